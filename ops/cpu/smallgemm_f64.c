/* smallgemm_f64.c — register-blocked float64 tile products (fg_dgemm_small, see smallgemm.h): the
 * float32 kernel's structure (smallgemm.c) with four double lanes per vector.
 *
 * AVX2+FMA only: the register tile is 6 rows × 2 vectors of 4 columns (12 accumulators); on an
 * AVX-512 CPU the AVX2 form runs (the same bits, as on every level). The plain C form is the
 * bit-exact reference. */
#include <math.h>

#include "ops/cpu/simd.h"
#include "ops/cpu/smallgemm.h"
#include "ops/cpu/vexp.h" /* FG_TARGET_AVX2 */

/* the final rounding of one element, shared by every level: see smallgemm.h */
static inline double store_one(double t, double alpha, double c_old, const double *rs, int64_t r, int accumulate) {
    if (!accumulate) return alpha * t;
    if (!rs) return fma(t, alpha, c_old);
    return fma(c_old, rs[r], alpha * t);
}

static void dgemm_scalar(int64_t m, int64_t n, int64_t k, double alpha, const double *A, int64_t rsa, int64_t csa,
                         const double *B, int64_t ldb, double *C, int64_t ldc, const double *rs, int accumulate) {
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < n; c++) {
            double t = 0;
            for (int64_t p = 0; p < k; p++) t = fma(A[r * rsa + p * csa], B[p * ldb + c], t);
            double *cp = C + r * ldc + c;
            *cp = store_one(t, alpha, accumulate ? *cp : 0.0, rs, r, accumulate);
        }
}

#if FG_SIMD_X86
/* 6 rows × up to 2 vectors of 4 columns; a partial last vector uses maskload */
static inline __attribute__((always_inline)) FG_TARGET_AVX2 void
dblk256(const int MR, const int NV, const int MASKED, __m256i lm, int64_t k, double alpha, const double *A, int64_t rsa,
        int64_t csa, const double *B, int64_t ldb, double *C, int64_t ldc, const double *rs, int accumulate) {
    __m256d c[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) c[r][v] = _mm256_setzero_pd();
    for (int64_t p = 0; p < k; p++) {
        const double *b = B + p * ldb, *a = A + p * csa;
        __m256d bv[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            bv[v] = MASKED && v == NV - 1 ? _mm256_maskload_pd(b + 4 * v, lm) : _mm256_loadu_pd(b + 4 * v);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const __m256d av = _mm256_broadcast_sd(a + r * rsa);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) c[r][v] = _mm256_fmadd_pd(av, bv[v], c[r][v]);
        }
    }
    const __m256d va = _mm256_set1_pd(alpha);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            double *cp = C + r * ldc + 4 * v;
            const int mk = MASKED && v == NV - 1;
            __m256d out;
            if (!accumulate)
                out = _mm256_mul_pd(va, c[r][v]);
            else {
                const __m256d old = mk ? _mm256_maskload_pd(cp, lm) : _mm256_loadu_pd(cp);
                if (!rs)
                    out = _mm256_fmadd_pd(c[r][v], va, old);
                else
                    out = _mm256_fmadd_pd(old, _mm256_broadcast_sd(rs + r), _mm256_mul_pd(va, c[r][v]));
            }
            if (mk)
                _mm256_maskstore_pd(cp, lm, out);
            else
                _mm256_storeu_pd(cp, out);
        }
}

#define FG_DBLK256(MR, NV, MASKED)                                                                                     \
    static FG_TARGET_AVX2 void dblk256_##MR##_##NV##_##MASKED(                                                         \
        __m256i lm, int64_t k, double alpha, const double *A, int64_t rsa, int64_t csa, const double *B, int64_t ldb,  \
        double *C, int64_t ldc, const double *rs, int accumulate) {                                                    \
        dblk256(MR, NV, MASKED, lm, k, alpha, A, rsa, csa, B, ldb, C, ldc, rs, accumulate);                            \
    }
#define FG_DBLK256_ROW(MR) FG_DBLK256(MR, 1, 0) FG_DBLK256(MR, 2, 0) FG_DBLK256(MR, 1, 1) FG_DBLK256(MR, 2, 1)
FG_DBLK256_ROW(1)
FG_DBLK256_ROW(2)
FG_DBLK256_ROW(3)
FG_DBLK256_ROW(4)
FG_DBLK256_ROW(5)
FG_DBLK256_ROW(6)

typedef void (*dblk256_fn)(__m256i, int64_t, double, const double *, int64_t, int64_t, const double *, int64_t,
                           double *, int64_t, const double *, int);
#define FG_DBLK256_PTRS(MR)                                                                                            \
    {                                                                                                                  \
        {dblk256_##MR##_1_0, dblk256_##MR##_2_0}, { dblk256_##MR##_1_1, dblk256_##MR##_2_1 }                           \
    }
static const dblk256_fn dblk256_table[6][2][2] = {FG_DBLK256_PTRS(1), FG_DBLK256_PTRS(2), FG_DBLK256_PTRS(3),
                                                  FG_DBLK256_PTRS(4), FG_DBLK256_PTRS(5), FG_DBLK256_PTRS(6)};

FG_TARGET_AVX2 static void dgemm_avx2(int64_t m, int64_t n, int64_t k, double alpha, const double *A, int64_t rsa,
                                      int64_t csa, const double *B, int64_t ldb, double *C, int64_t ldc,
                                      const double *rs, int accumulate) {
    for (int64_t c0 = 0; c0 < n; c0 += 8) {
        const int64_t nc = n - c0 < 8 ? n - c0 : 8;
        const int nv = (int)((nc + 3) / 4);
        const int tail = (int)(nc - 4 * (nv - 1)); /* 1..4 */
        const int masked = tail != 4;
        const __m256i lm = _mm256_cmpgt_epi64(_mm256_set1_epi64x(tail), _mm256_setr_epi64x(0, 1, 2, 3));
        for (int64_t r0 = 0; r0 < m; r0 += 6) {
            const int mr = (int)(m - r0 < 6 ? m - r0 : 6);
            dblk256_table[mr - 1][masked][nv - 1](lm, k, alpha, A + r0 * rsa, rsa, csa, B + c0, ldb, C + r0 * ldc + c0,
                                                  ldc, rs ? rs + r0 : NULL, accumulate);
        }
    }
}
#endif /* FG_SIMD_X86 */

void fg_dgemm_small(int64_t m, int64_t n, int64_t k, double alpha, const double *A, int64_t rsa, int64_t csa,
                    const double *B, int64_t ldb, double *C, int64_t ldc, const double *rowscale, int accumulate) {
    if (m <= 0 || n <= 0) return;
    if (k < 0) k = 0;
#if FG_SIMD_X86
    if (fg_simd_active() >= FG_SIMD_AVX2) {
        dgemm_avx2(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
        return;
    }
#endif
    dgemm_scalar(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
}
