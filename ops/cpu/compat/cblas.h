/* cblas.h — a stand-in for the system CBLAS, for machines without OpenBLAS that cannot install it
 * (the GPU machines this project is checked on). The CPU library is built with ops/cpu/compat/ on
 * the include path and cblas_fallback.c in it when FG_CBLAS=fallback, which `make cuda` sets by
 * itself when libopenblas is not installed; otherwise nothing includes this file.
 *
 * It declares what flashgrad's CPU code calls: row-major cblas_sgemm / cblas_dgemm and OpenBLAS's
 * thread-count functions. The implementation (ops/cpu/compat/cblas_fallback.c) is a plain blocked C
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
