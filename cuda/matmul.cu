/* matmul.cu — matrix products on the GPU through cuBLAS: fg_cuda_matmul, fg_cuda_linear and the
 * raw row-major GEMM fg_cuda_gemm.
 *
 * CPU reference: ops/matmul.c (same shapes, same saved buffers, same backward lines).
 *
 * Legend (outermost first):
 *   matmul: a is (..., M, K), b is (..., K, N) or (K, N) shared by every batch, out is (..., M, N)
 *   linear: x is (..., K), seen as R rows of K; w is (N, K); bias is (N) or NULL; out is (..., N)
 *
 * Row-major on a column-major library: a row-major (rows, cols) matrix with leading dimension ld
 * is, to cuBLAS, the column-major (cols, rows) matrix — its transpose. So the row-major product
 * C = op(A) op(B) is computed as the column-major Cᵀ = op(B)ᵀ op(A)ᵀ, i.e. cuBLAS gets B first,
 * with the same transpose flags, and the sizes (N, M, K). Math mode is cuBLAS's default: plain
 * float32 (no TF32), so results compare with the CPU's at float32 rounding.
 *
 * Unlike the CPU code, operands are made contiguous first (a transposed view costs one copy).
 */
#include <limits.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

/* C[b] (M, N) *= beta for every batch b (the K == 0 case of a GEMM: an empty sum) */
template <typename T>
__global__ void scale_matrix_kernel(T *C, int64_t M, int64_t N, int64_t ldc, int64_t sC, int64_t batch, T beta) {
    int64_t total = batch * M * N;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = k / (M * N), r = (k / N) % M, c = k % N;
        T *p = C + b * sC + r * ldc + c;
        *p = beta == (T)0 ? (T)0 : beta * *p;
    }
}

/* every row of out (R, N) starts as bias (N); the GEMM then adds x @ wᵀ (beta = 1) */
template <typename T>
__global__ void fill_rows_kernel(T *out, const T *bias, int64_t R, int64_t N) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < R * N; k += (int64_t)gridDim.x * blockDim.x)
        out[k] = bias[k % N];
}

/* dbias[c] += Σ_r dout[r, c] (through fg_cu_colsum) */
template <typename T>
struct dout_col {
    const T *dout;
    int64_t N;
    __device__ double operator()(int64_t r, int64_t c) const { return (double)dout[r * N + c]; }
};

/* ============================================================================================
 * the raw GEMM
 * ============================================================================================ */

static cublasStatus_t gemm_sb(cublasOperation_t oa, cublasOperation_t ob, int m, int n, int k, const float *alpha,
                              const float *A, int lda, long long sA, const float *B, int ldb, long long sB,
                              const float *beta, float *C, int ldc, long long sC, int batch) {
    if (batch == 1) return cublasSgemm(fg_cu_blas(), oa, ob, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    return cublasSgemmStridedBatched(fg_cu_blas(), oa, ob, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC,
                                     batch);
}
static cublasStatus_t gemm_sb(cublasOperation_t oa, cublasOperation_t ob, int m, int n, int k, const double *alpha,
                              const double *A, int lda, long long sA, const double *B, int ldb, long long sB,
                              const double *beta, double *C, int ldc, long long sC, int batch) {
    if (batch == 1) return cublasDgemm(fg_cu_blas(), oa, ob, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    return cublasDgemmStridedBatched(fg_cu_blas(), oa, ob, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC,
                                     batch);
}

template <typename T>
static fg_status gemm_t(int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha_, const void *A_, int64_t lda,
                        int64_t sA, const void *B_, int64_t ldb, int64_t sB, double beta_, void *C_, int64_t ldc,
                        int64_t sC, int64_t batch) {
    const T *A = (const T *)A_, *B = (const T *)B_;
    T *C = (T *)C_;
    const T alpha = (T)alpha_, beta = (T)beta_;
    if (M == 0 || N == 0 || batch == 0) return FG_OK;
    if (K == 0) { /* C = beta · C */
        scale_matrix_kernel<T><<<fg_cu_blocks(batch * M * N), FG_CU_THREADS, 0, fg_cu_stream()>>>(C, M, N, ldc, sC,
                                                                                                 batch, beta);
        FG_CU_LAUNCHED();
        return FG_OK;
    }
    if (sC == 0 && batch > 1) {
        /* every batch adds into the same C: run them one after another, in batch order */
        for (int64_t b = 0; b < batch; b++)
            FG_TRY(gemm_t<T>(ta, tb, M, N, K, alpha_, A + b * sA, lda, 0, B + b * sB, ldb, 0, b ? 1.0 : beta_, C, ldc,
                             0, 1));
        return FG_OK;
    }
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* column-major Cᵀ (N, M) = op(B)ᵀ (N, K) · op(A)ᵀ (K, M) */
    FG_CUBLAS(gemm_sb(ob, oa, (int)N, (int)M, (int)K, &alpha, B, (int)ldb, (long long)sB, A, (int)lda, (long long)sA,
                      &beta, C, (int)ldc, (long long)sC, (int)batch));
    return FG_OK;
}

extern "C" fg_status fg_cuda_gemm(fg_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                                  const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB,
                                  double beta, void *C, int64_t ldc, int64_t sC, int64_t batch) {
    FG_TRY(fg_cu_require("gemm"));
    const int64_t lim = INT_MAX;
    if (M < 0 || N < 0 || K < 0 || batch < 0 || M > lim || N > lim || K > lim || batch > lim || lda > lim ||
        ldb > lim || ldc > lim || lda < 1 || ldb < 1 || ldc < 1)
        return fg_error(FG_ERR_ARG, "gemm: sizes M=%lld N=%lld K=%lld batch=%lld lda=%lld ldb=%lld ldc=%lld must fit "
                        "cuBLAS (int, leading dimensions >= 1)", (long long)M, (long long)N, (long long)K,
                        (long long)batch, (long long)lda, (long long)ldb, (long long)ldc);
    return FG_CU_DISPATCH(dt, gemm_t, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch);
}

/* ============================================================================================
 * matmul: out (..., M, N) = a (..., M, K) @ b (..., K, N)
 * saved for backward: A, B = a, b made contiguous
 * ============================================================================================ */

static int64_t ld1(int64_t n) { return n > 1 ? n : 1; }

static fg_status matmul_backward(fg_node *n) {
    fg_tensor *A = n->saved[0], *B = n->saved[1];
    fg_tensor *dA = fg_grad_buffer(n->inputs[0]), *dB = fg_grad_buffer(n->inputs[1]);
    if (!dA && !dB) return FG_OK;
    fg_tensor *dC = fg_cu_grad_out(n);
    if (!dC) return fg_last_status();
    fg_dtype dt = dC->dtype;
    int64_t M = A->shape[A->ndim - 2], K = A->shape[A->ndim - 1], N = B->shape[B->ndim - 1], bn = 1;
    for (int d = 0; d < A->ndim - 2; d++) bn *= A->shape[d];
    int shared_b = B->ndim == 2;
    fg_status st = FG_OK;
    /* forward: C = A @ B  ->  dA (.., M, K) += dC (.., M, N) @ Bᵀ (.., N, K) */
    if (dA) {
        if (shared_b) /* all batches are one GEMM of bn·M rows */
            st = fg_cuda_gemm(dt, 0, 1, bn * M, K, N, 1.0, fg_data(dC), ld1(N), 0, fg_data(B), ld1(N), 0, 1.0,
                              fg_data(dA), ld1(K), 0, 1);
        else
            st = fg_cuda_gemm(dt, 0, 1, M, K, N, 1.0, fg_data(dC), ld1(N), M * N, fg_data(B), ld1(N), K * N, 1.0,
                              fg_data(dA), ld1(K), M * K, bn);
    }
    /* forward: C = A @ B  ->  dB (.., K, N) += Aᵀ (.., K, M) @ dC (.., M, N) */
    if (dB && st == FG_OK) {
        if (shared_b) /* dB (K, N) += A_flatᵀ (K, bn·M) @ dC_flat (bn·M, N): one GEMM over every batch */
            st = fg_cuda_gemm(dt, 1, 0, K, N, bn * M, 1.0, fg_data(A), ld1(K), 0, fg_data(dC), ld1(N), 0, 1.0,
                              fg_data(dB), ld1(N), 0, 1);
        else
            st = fg_cuda_gemm(dt, 1, 0, K, N, M, 1.0, fg_data(A), ld1(K), M * K, fg_data(dC), ld1(N), M * N, 1.0,
                              fg_data(dB), ld1(N), K * N, bn);
    }
    fg_release(dC);
    return st;
}

extern "C" fg_tensor *fg_cuda_matmul(fg_tensor *a, fg_tensor *b) {
    if (fg_cu_require("matmul") != FG_OK) return NULL;
    int nb = a->ndim - 2;
    int64_t M = a->shape[nb], K = a->shape[nb + 1], N = b->shape[b->ndim - 1], bn = 1;
    for (int d = 0; d < nb; d++) bn *= a->shape[d];
    int64_t shape[FG_MAX_DIMS];
    memcpy(shape, a->shape, sizeof shape);
    shape[nb + 1] = N;
    fg_tensor *A = fg_contiguous(a), *B = A ? fg_contiguous(b) : NULL;
    fg_tensor *out = B ? fg_empty(a->dtype, FG_CUDA, a->ndim, shape) : NULL;
    fg_status st = out ? FG_OK : fg_last_status();
    if (st == FG_OK) {
        if (b->ndim == 2) /* shared b: all batches of a are one (bn·M, K) matrix */
            st = fg_cuda_gemm(a->dtype, 0, 0, bn * M, N, K, 1.0, fg_data(A), ld1(K), 0, fg_data(B), ld1(N), 0, 0.0,
                              fg_data(out), ld1(N), 0, 1);
        else
            st = fg_cuda_gemm(a->dtype, 0, 0, M, N, K, 1.0, fg_data(A), ld1(K), M * K, fg_data(B), ld1(N), K * N, 0.0,
                              fg_data(out), ld1(N), M * N, bn);
    }
    if (st == FG_OK) {
        fg_tensor *inputs[2] = {a, b};
        fg_node *node = fg_record(out, "matmul", matmul_backward, 2, inputs);
        if (node) {
            fg_node_save(node, A);
            fg_node_save(node, B);
        }
    } else {
        fg_release(out);
        out = NULL;
    }
    fg_release(A);
    fg_release(B);
    return out;
}

/* ============================================================================================
 * linear: out (R, N) = x (R, K) @ wᵀ (K, N) + bias (N)
 * saved for backward: X, W = x, w made contiguous
 * ============================================================================================ */

template <typename T>
static fg_status linear_db(fg_tensor *db, const fg_tensor *dout, int64_t R, int64_t N) {
    return fg_cu_colsum<T>((T *)fg_data(db), R, N, dout_col<T>{(const T *)fg_data(dout), N}, "linear backward");
}

static fg_status linear_backward(fg_node *n) {
    fg_tensor *X = n->saved[0], *W = n->saved[1];
    fg_tensor *dx = fg_grad_buffer(n->inputs[0]), *dw = fg_grad_buffer(n->inputs[1]);
    fg_tensor *db = fg_grad_buffer(n->inputs[2]);
    if (!dx && !dw && !db) return FG_OK;
    fg_tensor *dout = fg_cu_grad_out(n);
    if (!dout) return fg_last_status();
    fg_dtype dt = dout->dtype;
    int64_t N = W->shape[0], K = W->shape[1], R = 1;
    for (int d = 0; d < X->ndim - 1; d++) R *= X->shape[d];
    fg_status st = FG_OK;
    /* forward: out = x @ wᵀ + bias  ->  dx (R, K) += dout (R, N) @ w (N, K) */
    if (dx) st = fg_cuda_gemm(dt, 0, 0, R, K, N, 1.0, fg_data(dout), ld1(N), 0, fg_data(W), ld1(K), 0, 1.0,
                              fg_data(dx), ld1(K), 0, 1);
    /* forward: out = x @ wᵀ + bias  ->  dw (N, K) += doutᵀ (N, R) @ x (R, K) */
    if (dw && st == FG_OK) st = fg_cuda_gemm(dt, 1, 0, N, K, R, 1.0, fg_data(dout), ld1(N), 0, fg_data(X), ld1(K), 0,
                                             1.0, fg_data(dw), ld1(K), 0, 1);
    /* forward: out = x @ wᵀ + bias  ->  dbias (N) += Σ_rows dout */
    if (db && st == FG_OK) st = FG_CU_DISPATCH(dt, linear_db, db, dout, R, N);
    fg_release(dout);
    return st;
}

template <typename T>
static fg_status fill_rows(fg_tensor *out, const fg_tensor *bias, int64_t R, int64_t N) {
    if (R * N == 0) return FG_OK;
    fill_rows_kernel<T><<<fg_cu_blocks(R * N), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)fg_data(out),
                                                                                 (const T *)fg_data(bias), R, N);
    FG_CU_LAUNCHED();
    return FG_OK;
}

extern "C" fg_tensor *fg_cuda_linear(fg_tensor *x, fg_tensor *w, fg_tensor *bias) {
    if (fg_cu_require("linear") != FG_OK) return NULL;
    int64_t N = w->shape[0], K = w->shape[1], R = 1;
    for (int d = 0; d < x->ndim - 1; d++) R *= x->shape[d];
    int64_t shape[FG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = N;
    fg_tensor *X = fg_contiguous(x);
    fg_tensor *W = X ? fg_contiguous(w) : NULL;
    fg_tensor *Bc = (W && bias) ? fg_contiguous(bias) : NULL;
    fg_tensor *out = (W && (Bc || !bias)) ? fg_empty(x->dtype, FG_CUDA, x->ndim, shape) : NULL;
    fg_status st = out ? FG_OK : fg_last_status();
    if (st == FG_OK && Bc) st = FG_CU_DISPATCH(x->dtype, fill_rows, out, Bc, R, N);
    if (st == FG_OK)
        st = fg_cuda_gemm(x->dtype, 0, 1, R, N, K, 1.0, fg_data(X), ld1(K), 0, fg_data(W), ld1(K), 0, Bc ? 1.0 : 0.0,
                          fg_data(out), ld1(N), 0, 1);
    if (st == FG_OK) {
        fg_tensor *inputs[3] = {x, w, bias};
        fg_node *node = fg_record(out, "linear", linear_backward, 3, inputs);
        if (node) {
            fg_node_save(node, X);
            fg_node_save(node, W);
        }
    } else {
        fg_release(out);
        out = NULL;
    }
    fg_release(X);
    fg_release(W);
    fg_release(Bc);
    return out;
}
