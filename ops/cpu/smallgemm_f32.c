/* smallgemm_f32.c — the register-blocked tile products in float (see ops/cpu/smallgemm.h): the plain
 * C and AVX2 forms of ops/cpu/smallgemm_body.h, and its own AVX-512 form (float64 runs the AVX2 form
 * there), and fg_sgemm_small, which picks the
 * form of the CPU's level.
 *
 * Each level has one block function, always inlined with constant MR (rows, <= 6) and NV (vectors
 * of columns), so that the accumulators c[MR][NV] live in registers; the drivers cover C with
 * MR × (NV · lanes) blocks, the last column block masked.
 */
#include "ops/cpu/smallgemm.h"

#include <math.h>

#include "ops/cpu/simd.h"
#include "ops/cpu/vexp.h" /* FG_TARGET_AVX512, FG_TARGET_AVX2 */

#define T float
#define FMA_T fmaf
#define FG_VEC256_DOUBLE 0
#include "ops/cpu/smallgemm_body.h"

#if FG_SIMD_X86

/* ---- AVX-512: 6 rows × up to 4 vectors of 16 columns ---- */
static inline __attribute__((always_inline)) FG_TARGET_AVX512 void
blk512(const int MR, const int NV, __mmask16 lm, int64_t k, float alpha, const float *A, int64_t rsa, int64_t csa,
       const float *B, int64_t ldb, float *C, int64_t ldc, const float *rs, int accumulate) {
    __m512 c[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[r][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        const float *b = B + p * ldb, *a = A + p * csa;
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(lm, b + 16 * v) : _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const __m512 av = _mm512_set1_ps(a[r * rsa]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) c[r][v] = _mm512_fmadd_ps(av, bv[v], c[r][v]);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float *cp = C + r * ldc + 16 * v;
            const __mmask16 m = v == NV - 1 ? lm : (__mmask16)0xFFFF;
            __m512 out;
            if (!accumulate)
                out = _mm512_mul_ps(va, c[r][v]);
            else if (!rs)
                out = _mm512_fmadd_ps(c[r][v], va, _mm512_maskz_loadu_ps(m, cp));
            else
                out = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, cp), _mm512_set1_ps(rs[r]), _mm512_mul_ps(va, c[r][v]));
            _mm512_mask_storeu_ps(cp, m, out);
        }
}

/* the tiles: blk512_MR_NV is blk512 with MR rows and NV vectors of columns as constants */
#define BLK512_PARAMS                                                                                                  \
    __mmask16 lm, int64_t k, float alpha, const float *A, int64_t rsa, int64_t csa, const float *B, int64_t ldb,       \
        float *C, int64_t ldc, const float *rs, int accumulate
#define BLK512_ARGS lm, k, alpha, A, rsa, csa, B, ldb, C, ldc, rs, accumulate
static FG_TARGET_AVX512 void blk512_1_1(BLK512_PARAMS) { blk512(1, 1, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_1_2(BLK512_PARAMS) { blk512(1, 2, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_1_3(BLK512_PARAMS) { blk512(1, 3, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_1_4(BLK512_PARAMS) { blk512(1, 4, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_2_1(BLK512_PARAMS) { blk512(2, 1, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_2_2(BLK512_PARAMS) { blk512(2, 2, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_2_3(BLK512_PARAMS) { blk512(2, 3, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_2_4(BLK512_PARAMS) { blk512(2, 4, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_3_1(BLK512_PARAMS) { blk512(3, 1, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_3_2(BLK512_PARAMS) { blk512(3, 2, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_3_3(BLK512_PARAMS) { blk512(3, 3, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_3_4(BLK512_PARAMS) { blk512(3, 4, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_4_1(BLK512_PARAMS) { blk512(4, 1, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_4_2(BLK512_PARAMS) { blk512(4, 2, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_4_3(BLK512_PARAMS) { blk512(4, 3, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_4_4(BLK512_PARAMS) { blk512(4, 4, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_5_1(BLK512_PARAMS) { blk512(5, 1, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_5_2(BLK512_PARAMS) { blk512(5, 2, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_5_3(BLK512_PARAMS) { blk512(5, 3, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_5_4(BLK512_PARAMS) { blk512(5, 4, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_6_1(BLK512_PARAMS) { blk512(6, 1, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_6_2(BLK512_PARAMS) { blk512(6, 2, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_6_3(BLK512_PARAMS) { blk512(6, 3, BLK512_ARGS); }
static FG_TARGET_AVX512 void blk512_6_4(BLK512_PARAMS) { blk512(6, 4, BLK512_ARGS); }
#undef BLK512_PARAMS
#undef BLK512_ARGS

typedef void (*blk512_fn)(__mmask16, int64_t, float, const float *, int64_t, int64_t, const float *, int64_t, float *,
                          int64_t, const float *, int);
/* [MR - 1][NV - 1] */
static const blk512_fn blk512_table[6][4] = {
    {blk512_1_1, blk512_1_2, blk512_1_3, blk512_1_4}, {blk512_2_1, blk512_2_2, blk512_2_3, blk512_2_4},
    {blk512_3_1, blk512_3_2, blk512_3_3, blk512_3_4}, {blk512_4_1, blk512_4_2, blk512_4_3, blk512_4_4},
    {blk512_5_1, blk512_5_2, blk512_5_3, blk512_5_4}, {blk512_6_1, blk512_6_2, blk512_6_3, blk512_6_4},
};

static void sgemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t rsa, int64_t csa,
                         const float *B, int64_t ldb, float *C, int64_t ldc, const float *rs, int accumulate) {
    for (int64_t c0 = 0; c0 < n; c0 += 64) {
        const int64_t nc = n - c0 < 64 ? n - c0 : 64;
        const int nv = (int)((nc + 15) / 16);
        const int tail = (int)(nc - 16 * (nv - 1)); /* columns in the last vector, 1..16 */
        const __mmask16 lm = (__mmask16)(tail == 16 ? 0xFFFFu : (1u << tail) - 1);
        for (int64_t r0 = 0; r0 < m; r0 += 6) {
            const int mr = (int)(m - r0 < 6 ? m - r0 : 6);
            blk512_table[mr - 1][nv - 1](lm, k, alpha, A + r0 * rsa, rsa, csa, B + c0, ldb, C + r0 * ldc + c0, ldc,
                                         rs ? rs + r0 : NULL, accumulate);
        }
    }
}

#endif /* FG_SIMD_X86 */

void fg_sgemm_small(int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t rsa, int64_t csa,
                    const float *B, int64_t ldb, float *C, int64_t ldc, const float *rowscale, int accumulate) {
    if (m <= 0 || n <= 0) return;
    if (k < 0) k = 0;
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        sgemm_avx512(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
        return;
    case FG_SIMD_AVX2:
        gemm_avx2(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
        return;
    default:
        break;
    }
#endif
    gemm_scalar(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
}
