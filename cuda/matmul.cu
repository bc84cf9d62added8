/* matmul.cu — matrix products on the GPU through cuBLAS: the launchers of the matmul kernels of
 * ops/kernels.h (the row-major GEMM with an optional bias, linear's bias gradient) and the raw
 * GEMM fg_cuda_gemm for device code that keeps its own arrays.
 *
 * CPU reference: ops/cpu/matmul.c (the CPU GEMM and column sums behind the same table entries).
 *
 * Row-major on a column-major library: a row-major (rows, cols) matrix with leading dimension ld
 * is, to cuBLAS, the column-major (cols, rows) matrix — its transpose. So the row-major product
 * C = op(A) op(B) is computed as the column-major Cᵀ = op(B)ᵀ op(A)ᵀ, i.e. cuBLAS gets B first,
 * with the same transpose flags, and the sizes (N, M, K). Math mode is cuBLAS's default: plain
 * float32 (no TF32), so results compare with the CPU's at float32 rounding. A bias is written into
 * every row of C first; the GEMM then adds to it (beta = 1).
 *
 * Under bfloat16 mixed precision (ops/device.h, FG_COMPUTE_BF16) a float32 GEMM rounds A and B to
 * bf16 (nearest even) into dense scratch (cuda/mixed.cuh) and calls cublasGemmEx /
 * cublasGemmStridedBatchedEx with CUDA_R_16BF inputs, a CUDA_R_32F C and CUBLAS_COMPUTE_32F:
 *     C = alpha · Σ_k bf16(a_ik) bf16(b_kj)  (products exact, summed in float32) + beta · C.
 * A float64 GEMM is refused there, never run at another precision.
 */
#include <limits.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/kernels_cuda.h"
#include "cuda/mixed.cuh"

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

/* every row of C[b] (M, N) starts as bias (N); the GEMM then adds op(A) op(B) (beta = 1) */
template <typename T>
__global__ void fill_rows_kernel(T *C, const T *bias, int64_t M, int64_t N, int64_t ldc, int64_t sC, int64_t batch) {
    int64_t total = batch * M * N;
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = k / (M * N), r = (k / N) % M, c = k % N;
        C[b * sC + r * ldc + c] = bias[c];
    }
}

/* dbias[c] += Σ_r dout[r, c] (through fg_cu_colsum) */
template <typename T> struct dout_col {
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
        scale_matrix_kernel<T>
            <<<fg_cu_blocks(batch * M * N), FG_CU_THREADS, 0, fg_cu_stream()>>>(C, M, N, ldc, sC, batch, beta);
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

/* bfloat16 mixed precision: op(A) op(B) from bf16 copies of A and B, float32 accumulation into the
 * float32 C. The stored matrices are A (M, K), or (K, M) when transposed, with rows lda apart and
 * batches sA apart (0: one for all), likewise B (K, N) or (N, K); their copies are dense, so their
 * leading dimension is their width and their batch stride their size (0 stays 0). */
static fg_status gemm_bf16(int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha_, const void *A_,
                           int64_t lda, int64_t sA, const void *B_, int64_t ldb, int64_t sB, double beta_, void *C_,
                           int64_t ldc, int64_t sC, int64_t batch) {
    if (M == 0 || N == 0 || batch == 0) return FG_OK;
    if (K == 0) /* no products: C = beta · C */
        return gemm_t<float>(ta, tb, M, N, K, alpha_, A_, lda, sA, B_, ldb, sB, beta_, C_, ldc, sC, batch);
    const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    fg_cu_bf16_copy a, b;
    FG_TRY(a.make((const float *)A_, sA ? batch : 1, ar, ac, lda, sA, "gemm (bf16 copy of A)"));
    FG_TRY(b.make((const float *)B_, sB ? batch : 1, br, bc, ldb, sB, "gemm (bf16 copy of B)"));
    const long long sa = sA ? (long long)(ar * ac) : 0, sb = sB ? (long long)(br * bc) : 0;
    const float alpha = (float)alpha_, beta = (float)beta_, one = 1.0f;
    float *C = (float *)C_;
    const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    /* column-major Cᵀ (N, M) = op(B)ᵀ (N, K) · op(A)ᵀ (K, M), as gemm_t */
    if (batch == 1 || sC == 0) {
        /* one product, or batches that all add into the one C: in batch order */
        for (int64_t i = 0; i < batch; i++)
            FG_CUBLAS(cublasGemmEx(fg_cu_blas(), ob, oa, (int)N, (int)M, (int)K, &alpha, b.p() + i * sb, CUDA_R_16BF,
                                   (int)bc, a.p() + i * sa, CUDA_R_16BF, (int)ac, i ? &one : &beta, C, CUDA_R_32F,
                                   (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return FG_OK;
    }
    FG_CUBLAS(cublasGemmStridedBatchedEx(fg_cu_blas(), ob, oa, (int)N, (int)M, (int)K, &alpha, b.p(), CUDA_R_16BF,
                                         (int)bc, sb, a.p(), CUDA_R_16BF, (int)ac, sa, &beta, C, CUDA_R_32F, (int)ldc,
                                         (long long)sC, (int)batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return FG_OK;
}

template <typename T>
static fg_status fill_rows(void *C, const void *bias, int64_t M, int64_t N, int64_t ldc, int64_t sC, int64_t batch) {
    if (sC == 0) batch = 1; /* the batches add into one C: its rows start as bias once */
    if (batch * M * N == 0) return FG_OK;
    fill_rows_kernel<T><<<fg_cu_blocks(batch * M * N), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)C, (const T *)bias, M,
                                                                                           N, ldc, sC, batch);
    FG_CU_LAUNCHED();
    return FG_OK;
}

extern "C" fg_status fg_cu_matmul_gemm(fg_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                                       const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB,
                                       double beta, const void *bias, void *C, int64_t ldc, int64_t sC, int64_t batch) {
    const int64_t lim = INT_MAX;
    if (M < 0 || N < 0 || K < 0 || batch < 0 || M > lim || N > lim || K > lim || batch > lim || lda > lim ||
        ldb > lim || ldc > lim || lda < 1 || ldb < 1 || ldc < 1)
        return fg_error(FG_ERR_ARG,
                        "gemm: sizes M=%lld N=%lld K=%lld batch=%lld lda=%lld ldb=%lld ldc=%lld must fit "
                        "cuBLAS (int, leading dimensions >= 1)",
                        (long long)M, (long long)N, (long long)K, (long long)batch, (long long)lda, (long long)ldb,
                        (long long)ldc);
    const bool mixed = fg_cu_mixed_bf16() && (dt == FG_F32 || dt == FG_F64);
    if (mixed && dt != FG_F32)
        return fg_error(FG_ERR_DTYPE, "gemm under bfloat16 mixed precision takes float32 operands, got %s",
                        fg_dtype_name(dt));
    if (bias) {
        FG_TRY(FG_CU_DISPATCH(dt, fill_rows, C, bias, M, N, ldc, sC, batch));
        beta = 1.0;
    }
    if (mixed) return gemm_bf16(ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch);
    return FG_CU_DISPATCH(dt, gemm_t, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, batch);
}

extern "C" fg_status fg_cuda_gemm(fg_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha,
                                  const void *A, int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB,
                                  double beta, void *C, int64_t ldc, int64_t sC, int64_t batch) {
    FG_TRY(fg_cu_require("gemm"));
    return fg_cu_matmul_gemm(dt, ta, tb, M, N, K, alpha, A, lda, sA, B, ldb, sB, beta, NULL, C, ldc, sC, batch);
}

/* ============================================================================================
 * linear's bias gradient: db (N) += Σ_r dout (R, N)
 * ============================================================================================ */

template <typename T> static fg_status colsum(void *db, const void *dout, int64_t R, int64_t N) {
    return fg_cu_colsum<T>((T *)db, R, N, dout_col<T>{(const T *)dout, N}, "linear backward");
}

extern "C" fg_status fg_cu_matmul_colsum(fg_dtype dt, void *db, const void *dout, int64_t R, int64_t N) {
    return FG_CU_DISPATCH(dt, colsum, db, dout, R, N);
}
