/* cblas.h — a stand-in for the system CBLAS, used only by the CUDA build on machines that have
 * nvcc but no OpenBLAS headers (the GPU machines this project is checked on cannot install
 * packages). `make cuda` puts cuda/compat/ on the include path and links cblas_fallback.c only
 * when no system cblas.h is found; the CPU build never sees this file.
 *
 * It declares what flashgrad's CPU code calls: row-major cblas_sgemm / cblas_dgemm and OpenBLAS's
 * thread-count functions. The implementation (cuda/compat/cblas_fallback.c) is a plain blocked C
 * GEMM split over threads: correct and reasonably quick, not tuned — the CPU side is the
 * reference there, not the thing measured.
 */
#ifndef FG_COMPAT_CBLAS_H
#define FG_COMPAT_CBLAS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CblasRowMajor = 101, CblasColMajor = 102 } CBLAS_ORDER;
typedef enum { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 } CBLAS_TRANSPOSE;
typedef CBLAS_ORDER CBLAS_LAYOUT;

void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
void cblas_dgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, double alpha,
                 const double *A, int lda, const double *B, int ldb, double beta, double *C, int ldc);

void openblas_set_num_threads(int n);
int openblas_get_num_threads(void);
char *openblas_get_corename(void);

#ifdef __cplusplus
}
#endif
#endif /* FG_COMPAT_CBLAS_H */
