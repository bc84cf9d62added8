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
#include "ops/cpu/transpose512.h"

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

/* ---- AVX-512, the last 1 to STRIP_MAX columns: rows in the lanes ----
 * A vector of 16 columns that holds one to four of them spends most of every FMA on nothing; for
 * N = 65 (an LM head over a character vocabulary) that vector cost a fifth of the product. Those
 * last columns run with 16 rows in a vector's lanes instead: acc[c] (16 rows of column c) +=
 * A[rows, p] · B[p, c]. The A column of 16 rows is loaded as it is where A is stored transposed
 * (rsa = 1), and taken from a 16 × 16 transpose in registers where A's rows are contiguous
 * (csa = 1); four or two groups of 16 rows side by side, so that independent chains of FMAs
 * cover their latency.
 * Each lane sums its element's products in order p = 0, 1, … from 0, and the final rounding is
 * store_one's: the bits of every other form. */
#define STRIP_MAX 4

static inline __mmask16 mask_below(int64_t n) { /* lanes [0, n) */
    return (__mmask16)(n <= 0 ? 0u : n >= 16 ? 0xFFFFu : (1u << n) - 1);
}

/* the epilogue of SG groups of 16 rows from r0 (rows below m) of NT columns held in acc[g][c] */
static inline __attribute__((always_inline)) FG_TARGET_AVX512 void
strip_store(const int SG, const int NT, __m512 acc[][STRIP_MAX], int64_t r0, int64_t m, float alpha, float *C,
            int64_t ldc, const float *rs, int accumulate) {
    float t[STRIP_MAX][16];
    for (int g = 0; g < SG; g++) {
#pragma GCC unroll 4
        for (int c = 0; c < NT; c++) _mm512_storeu_ps(t[c], acc[g][c]);
        for (int i = 0; i < 16 && r0 + 16 * g + i < m; i++) {
            const int64_t r = r0 + 16 * g + i;
            for (int c = 0; c < NT; c++) {
                float *cp = C + r * ldc + c;
                *cp = store_one(t[c][i], alpha, accumulate ? *cp : 0, rs, r, accumulate);
            }
        }
    }
}

static inline __attribute__((always_inline)) FG_TARGET_AVX512 void
strip512(const int NT, int64_t m, int64_t k, float alpha, const float *A, int64_t rsa, int64_t csa, const float *B,
         int64_t ldb, float *C, int64_t ldc, const float *rs, int accumulate) {
    if (rsa == 1) { /* the A column of 16 rows is contiguous: four groups, 64 rows at a time */
        for (int64_t r0 = 0; r0 < m; r0 += 64) {
            __m512 acc[4][STRIP_MAX];
            __mmask16 rm[4];
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                rm[g] = mask_below(m - r0 - 16 * g);
#pragma GCC unroll 4
                for (int c = 0; c < NT; c++) acc[g][c] = _mm512_setzero_ps();
            }
            for (int64_t p = 0; p < k; p++) {
                const float *a = A + p * csa + r0, *b = B + p * ldb;
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++) {
                    const __m512 av = _mm512_maskz_loadu_ps(rm[g], a + 16 * g);
#pragma GCC unroll 4
                    for (int c = 0; c < NT; c++) acc[g][c] = _mm512_fmadd_ps(av, _mm512_set1_ps(b[c]), acc[g][c]);
                }
            }
            strip_store(4, NT, acc, r0, m, alpha, C, ldc, rs, accumulate);
        }
        return;
    }
    /* csa == 1: rows contiguous; 16 rows × 16 of p transposed in registers, two groups of rows */
    for (int64_t r0 = 0; r0 < m; r0 += 32) {
        __m512 acc[2][STRIP_MAX];
#pragma GCC unroll 2
        for (int g = 0; g < 2; g++)
#pragma GCC unroll 4
            for (int c = 0; c < NT; c++) acc[g][c] = _mm512_setzero_ps();
        for (int64_t p0 = 0; p0 < k; p0 += 16) {
            const int64_t kp = k - p0;
            const __mmask16 pm = mask_below(kp);
#pragma GCC unroll 2
            for (int g = 0; g < 2; g++) {
                const int64_t g0 = r0 + 16 * g;
                if (g0 >= m) break;
                __m512 t[16];
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    t[i] = g0 + i < m ? _mm512_maskz_loadu_ps(pm, A + (g0 + i) * rsa + p0) : _mm512_setzero_ps();
                fg_transpose16_avx512(t); /* t[j]: A[g0 .. g0 + 15, p0 + j] */
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++) {
                    if (j >= kp) break;
                    const float *b = B + (p0 + j) * ldb;
#pragma GCC unroll 4
                    for (int c = 0; c < NT; c++) acc[g][c] = _mm512_fmadd_ps(t[j], _mm512_set1_ps(b[c]), acc[g][c]);
                }
            }
        }
        strip_store(2, NT, acc, r0, m, alpha, C, ldc, rs, accumulate);
    }
}

#define STRIP_PARAMS                                                                                                   \
    int64_t m, int64_t k, float alpha, const float *A, int64_t rsa, int64_t csa, const float *B, int64_t ldb,          \
        float *C, int64_t ldc, const float *rs, int accumulate
#define STRIP_ARGS m, k, alpha, A, rsa, csa, B, ldb, C, ldc, rs, accumulate
static FG_TARGET_AVX512 void strip512_1(STRIP_PARAMS) { strip512(1, STRIP_ARGS); }
static FG_TARGET_AVX512 void strip512_2(STRIP_PARAMS) { strip512(2, STRIP_ARGS); }
static FG_TARGET_AVX512 void strip512_3(STRIP_PARAMS) { strip512(3, STRIP_ARGS); }
static FG_TARGET_AVX512 void strip512_4(STRIP_PARAMS) { strip512(4, STRIP_ARGS); }
#undef STRIP_PARAMS
#undef STRIP_ARGS
typedef void (*strip512_fn)(int64_t, int64_t, float, const float *, int64_t, int64_t, const float *, int64_t, float *,
                            int64_t, const float *, int);
static const strip512_fn strip512_table[STRIP_MAX] = {strip512_1, strip512_2, strip512_3, strip512_4};

static void sgemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t rsa, int64_t csa,
                         const float *B, int64_t ldb, float *C, int64_t ldc, const float *rs, int accumulate) {
    /* the last n % 16 columns as a strip when there are few of them and A has a contiguous side */
    const int tail = (int)(n % 16);
    const int strip = tail >= 1 && tail <= STRIP_MAX && (rsa == 1 || csa == 1);
    const int64_t nb = strip ? n - tail : n; /* the columns of the 6-row blocks */
    if (strip) strip512_table[tail - 1](m, k, alpha, A, rsa, csa, B + nb, ldb, C + nb, ldc, rs, accumulate);
    for (int64_t c0 = 0; c0 < nb; c0 += 64) {
        const int64_t nc = nb - c0 < 64 ? nb - c0 : 64;
        const int nv = (int)((nc + 15) / 16);
        const int tail = (int)(nc - 16 * (nv - 1)); /* columns in the last vector, 1..16 */
        const __mmask16 lm = mask_below(tail);
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
