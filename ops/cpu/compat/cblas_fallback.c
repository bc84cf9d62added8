/* cblas_fallback.c — row-major GEMM for machines without OpenBLAS (see ops/cpu/compat/cblas.h). C = alpha · op(A) op(B) + beta · C.
 *
 * Method: op(B) is packed once into a contiguous (K, N) buffer when it is transposed; then each
 * thread owns a band of rows of C and, for each row i and each p, adds alpha · op(A)[i, p] times
 * row p of op(B) — an inner loop over contiguous memory that the compiler vectorizes. The sum over
 * p runs in increasing order, so results do not depend on the thread count.
 */
#include "cblas.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static int g_threads = 0; /* 0: decide from the machine */

void openblas_set_num_threads(int n) { g_threads = n > 0 ? n : 0; }
int openblas_get_num_threads(void) {
    if (g_threads > 0) return g_threads;
    const char *e = getenv("OPENBLAS_NUM_THREADS");
    int n = e ? atoi(e) : 0;
    if (n < 1) n = 8;
    return n > 64 ? 64 : n;
}
char *openblas_get_corename(void) { return (char *)"flashgrad-fallback-gemm"; }

#define GEMM_IMPL(T, NAME)                                                                                             \
    typedef struct {                                                                                                   \
        int M, N, K, r0, r1, ta, lda, ldc;                                                                             \
        T alpha;                                                                                                       \
        const T *A, *Bp;                                                                                               \
        T *C;                                                                                                          \
    } NAME##_job;                                                                                                      \
    static void *NAME##_band(void *arg) {                                                                              \
        NAME##_job *j = (NAME##_job *)arg;                                                                             \
        for (int i = j->r0; i < j->r1; i++) {                                                                          \
            T *c = j->C + (size_t)i * j->ldc;                                                                          \
            for (int p = 0; p < j->K; p++) {                                                                           \
                T a = j->ta ? j->A[(size_t)p * j->lda + i] : j->A[(size_t)i * j->lda + p];                             \
                a *= j->alpha;                                                                                         \
                const T *b = j->Bp + (size_t)p * j->N;                                                                 \
                for (int q = 0; q < j->N; q++) c[q] += a * b[q];                                                       \
            }                                                                                                          \
        }                                                                                                              \
        return NULL;                                                                                                   \
    }                                                                                                                  \
    void cblas_##NAME(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, T alpha,         \
                      const T *A, int lda, const T *B, int ldb, T beta, T *C, int ldc) {                               \
        if (order != CblasRowMajor || M <= 0 || N <= 0) return;                                                        \
        for (int i = 0; i < M; i++) {                                                                                  \
            T *c = C + (size_t)i * ldc;                                                                                \
            if (beta == 0)                                                                                             \
                memset(c, 0, (size_t)N * sizeof(T));                                                                   \
            else if (beta != 1)                                                                                        \
                for (int q = 0; q < N; q++) c[q] *= beta;                                                              \
        }                                                                                                              \
        if (K <= 0 || alpha == 0) return;                                                                              \
        /* op(B) as a contiguous (K, N) matrix */                                                                      \
        T *packed = NULL;                                                                                              \
        const T *Bp = B;                                                                                               \
        if (tb != CblasNoTrans || ldb != N) {                                                                          \
            packed = (T *)malloc((size_t)K * N * sizeof(T));                                                           \
            if (!packed) abort(); /* a reference GEMM with no memory cannot return an error */                         \
            for (int p = 0; p < K; p++)                                                                                \
                for (int q = 0; q < N; q++)                                                                            \
                    packed[(size_t)p * N + q] = tb != CblasNoTrans ? B[(size_t)q * ldb + p] : B[(size_t)p * ldb + q];  \
            Bp = packed;                                                                                               \
        }                                                                                                              \
        int nt = openblas_get_num_threads();                                                                           \
        double work = (double)M * N * K;                                                                               \
        if (work < 4e6) nt = 1;                                                                                        \
        if (nt > M) nt = M;                                                                                            \
        NAME##_job jobs[64];                                                                                           \
        pthread_t th[64];                                                                                              \
        int started[64] = {0};                                                                                         \
        for (int t = 0; t < nt; t++) {                                                                                 \
            jobs[t] = (NAME##_job){                                                                                    \
                M, N,  K, (int)((long)M * t / nt), (int)((long)M * (t + 1) / nt), ta != CblasNoTrans, lda, ldc, alpha, \
                A, Bp, C};                                                                                             \
            if (t > 0) started[t] = pthread_create(&th[t], NULL, NAME##_band, &jobs[t]) == 0;                          \
        }                                                                                                              \
        NAME##_band(&jobs[0]);                                                                                         \
        for (int t = 1; t < nt; t++) {                                                                                 \
            if (started[t])                                                                                            \
                pthread_join(th[t], NULL);                                                                             \
            else                                                                                                       \
                NAME##_band(&jobs[t]);                                                                                 \
        }                                                                                                              \
        free(packed);                                                                                                  \
    }

GEMM_IMPL(float, sgemm)
GEMM_IMPL(double, dgemm)
