/* cublas_v2.h (emulator) — the cuBLAS calls flashgrad makes, as plain column-major loops that
 * follow the BLAS definition literally (op(A) is m × k, op(B) k × n, C m × n, leading dimensions
 * checked as cuBLAS checks them). They do not reuse the row-major CBLAS path, so the emulator
 * tests cuda/matmul.cu's row-major-to-column-major mapping independently. Like the GPU's cuBLAS,
 * they reach only device memory: every matrix, with its leading dimension and batch stride, must
 * lie inside one device allocation (else the run stops with a message, as a GPU would stop with an
 * illegal address).
 *
 * cublasGemmEx / cublasGemmStridedBatchedEx take one type combination, the one bfloat16 mixed
 * precision uses (cuda/matmul.cu): A and B CUDA_R_16BF, C CUDA_R_32F, CUBLAS_COMPUTE_32F. Each
 * product of two bf16 values is exact; the products of one dot product are summed in float64 (so
 * exactly, unless their magnitudes spread over more than about 2^37) and the sum is rounded once
 * to float32, then C = alpha · sum + beta · C in float32. (A GPU's cuBLAS sums in float32 in its
 * own order; the tests' tolerances cover both.) Any other combination is refused loudly: a line on
 * stderr naming the types and CUBLAS_STATUS_NOT_SUPPORTED. */
#ifndef FG_EMU_CUBLAS_V2_H
#define FG_EMU_CUBLAS_V2_H

#include "cuda_runtime.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;
/* library_types.h's and cublas_api.h's values */
typedef enum { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType_t;
typedef cudaDataType_t cudaDataType;
typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0 } cublasMath_t;
typedef struct fg_emu_blas_s *cublasHandle_t;

inline const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : s == CUBLAS_STATUS_NOT_SUPPORTED ? "not supported" : "invalid value";
}
inline const char *cublasGetStatusName(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS         ? "CUBLAS_STATUS_SUCCESS"
           : s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED"
                                              : "CUBLAS_STATUS_INVALID_VALUE";
}
inline cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = (cublasHandle_t)malloc(1);
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }

/* the bytes of a column-major rows × cols matrix with leading dimension ld, `batch` of them stride
 * apart, inside one device allocation */
template <typename T>
inline void fg_emu_blas_range(const char *fn, const char *name, const T *p, int rows, int cols, int ld,
                              long long stride, int batch) {
    if (rows <= 0 || cols <= 0 || batch <= 0) return;
    const long long last = (long long)(cols - 1) * ld + (rows - 1) + (long long)(batch - 1) * stride;
    char what[96];
    snprintf(what, sizeof what, "%s: matrix %s (%d x %d, ld %d, %d of them)", fn, name, rows, cols, ld, batch);
    if (!fg_emu_dev_check(p, (size_t)(last + 1) * sizeof(T), what))
        fg_emu_fatal("%s reaches outside device memory", fn);
}

template <typename T>
__attribute__((no_sanitize("thread"))) /* host loops: no access hooks */
cublasStatus_t
fg_emu_gemm(const char *fn, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const T *alpha, const T *A,
            int lda, long long sA, const T *B, int ldb, long long sB, const T *beta, T *C, int ldc, long long sC,
            int batch) {
    const int arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
        ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    fg_emu_blas_range(fn, "A", A, arows, ta == CUBLAS_OP_N ? k : m, lda, sA, batch);
    fg_emu_blas_range(fn, "B", B, brows, tb == CUBLAS_OP_N ? n : k, ldb, sB, batch);
    fg_emu_blas_range(fn, "C", C, m, n, ldc, sC, batch);
    fg_emu_device_scope scope;
    for (int b = 0; b < batch; b++) {
        const T *Ab = A + b * sA, *Bb = B + b * sB;
        T *Cb = C + b * sC;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                T acc = 0;
                for (int p = 0; p < k; p++) {
                    T a = ta == CUBLAS_OP_N ? Ab[i + (long long)p * lda] : Ab[p + (long long)i * lda];
                    T bb = tb == CUBLAS_OP_N ? Bb[p + (long long)j * ldb] : Bb[j + (long long)p * ldb];
                    acc += a * bb;
                }
                T *c = &Cb[i + (long long)j * ldc];
                *c = *beta == (T)0 ? *alpha * acc : *alpha * acc + *beta * *c;
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const float *al, const float *A, int lda, const float *B, int ldb, const float *be,
                                  float *C, int ldc) {
    return fg_emu_gemm<float>("cublasSgemm", ta, tb, m, n, k, al, A, lda, 0, B, ldb, 0, be, C, ldc, 0, 1);
}
inline cublasStatus_t cublasDgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  const double *al, const double *A, int lda, const double *B, int ldb,
                                  const double *be, double *C, int ldc) {
    return fg_emu_gemm<double>("cublasDgemm", ta, tb, m, n, k, al, A, lda, 0, B, ldb, 0, be, C, ldc, 0, 1);
}
inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const float *al, const float *A, int lda, long long sA,
                                                const float *B, int ldb, long long sB, const float *be, float *C,
                                                int ldc, long long sC, int batch) {
    return fg_emu_gemm<float>("cublasSgemmStridedBatched", ta, tb, m, n, k, al, A, lda, sA, B, ldb, sB, be, C, ldc, sC,
                              batch);
}
inline cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                int n, int k, const double *al, const double *A, int lda, long long sA,
                                                const double *B, int ldb, long long sB, const double *be, double *C,
                                                int ldc, long long sC, int batch) {
    return fg_emu_gemm<double>("cublasDgemmStridedBatched", ta, tb, m, n, k, al, A, lda, sA, B, ldb, sB, be, C, ldc, sC,
                               batch);
}

/* ---- cublasGemmEx: bf16 A, B; float32 C and compute (see the top) ---- */
inline const char *fg_emu_type_name(cudaDataType_t t) {
    return t == CUDA_R_32F ? "CUDA_R_32F" : t == CUDA_R_64F ? "CUDA_R_64F" : t == CUDA_R_16F ? "CUDA_R_16F"
           : t == CUDA_R_16BF                              ? "CUDA_R_16BF"
                                                           : "another type";
}
__attribute__((no_sanitize("thread"))) /* host loops: no access hooks */
inline cublasStatus_t
fg_emu_gemm_ex(const char *fn, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha_,
               const void *A_, cudaDataType_t At, int lda, long long sA, const void *B_, cudaDataType_t Bt, int ldb,
               long long sB, const void *beta_, void *C_, cudaDataType_t Ct, int ldc, long long sC, int batch,
               cublasComputeType_t ct) {
    if (At != CUDA_R_16BF || Bt != CUDA_R_16BF || Ct != CUDA_R_32F || ct != CUBLAS_COMPUTE_32F) {
        fprintf(stderr,
                "%s (emulator): A %s, B %s, C %s, compute type %d: only CUDA_R_16BF x CUDA_R_16BF -> CUDA_R_32F with "
                "CUBLAS_COMPUTE_32F is emulated\n",
                fn, fg_emu_type_name(At), fg_emu_type_name(Bt), fg_emu_type_name(Ct), (int)ct);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const int arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
        ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    const uint16_t *A = (const uint16_t *)A_, *B = (const uint16_t *)B_;
    float *C = (float *)C_;
    fg_emu_blas_range(fn, "A", A, arows, ta == CUBLAS_OP_N ? k : m, lda, sA, batch);
    fg_emu_blas_range(fn, "B", B, brows, tb == CUBLAS_OP_N ? n : k, ldb, sB, batch);
    fg_emu_blas_range(fn, "C", C, m, n, ldc, sC, batch);
    const float alpha = *(const float *)alpha_, beta = *(const float *)beta_;
    /* a bf16 value is the top half of a float32 */
    auto widen = [](uint16_t h) {
        const uint32_t u = (uint32_t)h << 16;
        float x;
        memcpy(&x, &u, 4);
        return (double)x;
    };
    fg_emu_device_scope scope;
    for (int b = 0; b < batch; b++) {
        const uint16_t *Ab = A + b * sA, *Bb = B + b * sB;
        float *Cb = C + b * sC;
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double acc = 0;
                for (int p = 0; p < k; p++) {
                    const uint16_t a = ta == CUBLAS_OP_N ? Ab[i + (long long)p * lda] : Ab[p + (long long)i * lda];
                    const uint16_t bb = tb == CUBLAS_OP_N ? Bb[p + (long long)j * ldb] : Bb[j + (long long)p * ldb];
                    acc += widen(a) * widen(bb);
                }
                float *c = &Cb[i + (long long)j * ldc];
                *c = beta == 0.0f ? alpha * (float)acc : alpha * (float)acc + beta * *c;
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void *alpha, const void *A, cudaDataType_t At, int lda, const void *B,
                                   cudaDataType_t Bt, int ldb, const void *beta, void *C, cudaDataType_t Ct, int ldc,
                                   cublasComputeType_t ct, cublasGemmAlgo_t) {
    return fg_emu_gemm_ex("cublasGemmEx", ta, tb, m, n, k, alpha, A, At, lda, 0, B, Bt, ldb, 0, beta, C, Ct, ldc, 0, 1,
                          ct);
}
inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void *alpha, const void *A, cudaDataType_t At,
                                                 int lda, long long sA, const void *B, cudaDataType_t Bt, int ldb,
                                                 long long sB, const void *beta, void *C, cudaDataType_t Ct, int ldc,
                                                 long long sC, int batch, cublasComputeType_t ct, cublasGemmAlgo_t) {
    return fg_emu_gemm_ex("cublasGemmStridedBatchedEx", ta, tb, m, n, k, alpha, A, At, lda, sA, B, Bt, ldb, sB, beta,
                          C, Ct, ldc, sC, batch, ct);
}

#endif /* FG_EMU_CUBLAS_V2_H */
