/* vexp.h — exp for float32, vectorized (AVX-512F, AVX2+FMA) with a scalar form that computes the
 * very same bits.
 *
 * The method (Cody–Waite range reduction and a polynomial; the coefficients were fitted for this
 * file by an iterated weighted least-squares (Lawson) fit of the relative error on [−ln2/2, ln2/2]):
 *     exp(x) = 0 for x < −87.3 (and x = −inf): see "no subnormals" below
 *     x  <- min(max(x, −87.3), 89)         (NaN stays NaN; above 89 the result overflows to +inf)
 *     n  = fma(x, log2(e), 1.5·2^23) − 1.5·2^23   (x·log2(e) rounded to an integer)
 *     r  = (x − n·ln2_hi) − n·ln2_lo       (two FMAs: r is x − n·ln2 to ~2^-33 relative)
 *     p  = 1 + r·(1 + r·(c2 + r·(c3 + r·(c4 + r·(c5 + r·c6)))))       (six FMAs, Horner)
 *     exp(x) = p · 2^n                     (one rounding)
 * The scaling is one instruction in AVX-512 (vscalefps); AVX2 and the scalar form multiply by
 * 2^(n>>1) (exact) and then by 2^(n − (n>>1)) (the one rounding), which gives the same bits. Every
 * step is an IEEE operation on float32 with the same operands in the same order, so the three
 * paths agree bit for bit (tests/test_simd.c checks it), and results do not depend on the CPU a
 * program runs on — only on the inputs.
 *
 * No subnormals: results below 2^-126 (x < −87.34) are flushed to 0, from x < −87.3 on (a cut a
 * little above, so that no step ever makes a subnormal). Producing a subnormal costs a microcode
 * assist of ~100 cycles per instruction on Intel cores — measured here, exp of [−200, −90] ran 25x
 * slower than of [−4, 0] — and attention feeds exp a lot of them: masked scores (−inf), far-off
 * scores of peaked rows, the first block's rescale exp(−inf). What the flush loses is below
 * 1.3·10^-38 in absolute terms, next to softmax weights whose largest is 1.
 *
 * Accuracy: against exp in double, over every one of the float32 x in [−87.3, 89] (an exhaustive
 * run when this file was written), at most 0.91 ulp (the polynomial alone: 0.72 ulp); the vector
 * and scalar forms agreed on every one of the 2.2·10^9 inputs of [−104, 89]. exp(−inf) = 0,
 * exp(+inf) = +inf, exp(NaN) = NaN. tests/test_simd.c repeats the check on a sample (every 97th
 * float32) and on the special values, for every level the CPU has. (glibc's expf is correctly
 * rounded, < 0.5 ulp, and returns subnormals.)
 *
 * Speed (L1-resident array, per core): ~8 cycles per 16 values with AVX-512, ~19 per 8 with AVX2.
 * The scalar form is slow where fmaf is not an instruction (x86 without FMA): use expf there.
 *
 *   fg_vexp_f32(y, x, n)      y[i] = exp(x[i]) for an array (y may be x), dispatched on
 *                             fg_simd_active()
 *   fg_expf_ref(x)            the scalar form (also the dispatcher's fallback)
 *   fg_vexp_avx512(v), fg_vexp_avx2(v)   inline, for kernels compiled with the matching target
 *                             attribute (FG_TARGET_AVX512 / FG_TARGET_AVX2 below)
 */
#ifndef FG_VEXP_H
#define FG_VEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/simd.h"

#if FG_SIMD_X86
#include <immintrin.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* the constants, as exact float32 values */
#define FG_VEXP_LO (-87.3f) /* below: 0 */
#define FG_VEXP_HI 89.0f
#define FG_VEXP_ROUND 12582912.0f /* 1.5·2^23: (t + it) − it rounds t to an integer for |t| < 2^22 */
#define FG_VEXP_LOG2E 0x1.715476p+0f
#define FG_VEXP_LN2_HI 0x1.62e430p-1f
#define FG_VEXP_LN2_LO (-0x1.05c610p-29f)
#define FG_VEXP_C2 0x1.fffffcp-2f
#define FG_VEXP_C3 0x1.555492p-3f
#define FG_VEXP_C4 0x1.5558f2p-5f
#define FG_VEXP_C5 0x1.1239d4p-7f
#define FG_VEXP_C6 0x1.6a244cp-10f

/* y[i] = exp(x[i]) for i < n; y may equal x (in place). */
void fg_vexp_f32(float *y, const float *x, int64_t n);

/* 2^e as a float for −126 <= e <= 127 */
static inline float fg_vexp_pow2i(int32_t e) {
    uint32_t u = (uint32_t)(e + 127) << 23;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The scalar form: the same operations as the vector paths, one element at a time. fmaf is an
 * instruction on FMA machines and an exact library routine elsewhere. */
static inline float fg_expf_ref(float x) {
    if (x != x) return x + x; /* NaN */
    if (x < FG_VEXP_LO) return 0.0f;
    if (x > FG_VEXP_HI) x = FG_VEXP_HI;
    const float n = fmaf(x, FG_VEXP_LOG2E, FG_VEXP_ROUND) - FG_VEXP_ROUND; /* an integer near x·log2(e) */
    float r = fmaf(-n, FG_VEXP_LN2_HI, x);
    r = fmaf(-n, FG_VEXP_LN2_LO, r);
    float p = fmaf(FG_VEXP_C6, r, FG_VEXP_C5);
    p = fmaf(p, r, FG_VEXP_C4);
    p = fmaf(p, r, FG_VEXP_C3);
    p = fmaf(p, r, FG_VEXP_C2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    const int32_t ni = (int32_t)n, n1 = ni >> 1; /* −126 <= ni <= 128: both halves are normal powers */
    return (p * fg_vexp_pow2i(n1)) * fg_vexp_pow2i(ni - n1);
}

#if FG_SIMD_X86
#define FG_TARGET_AVX512 __attribute__((target("avx512f")))
#define FG_TARGET_AVX2 __attribute__((target("avx2,fma")))

static inline __attribute__((always_inline)) FG_TARGET_AVX512 __m512 fg_vexp_avx512(__m512 x0) {
    /* max(lo, x) and min(hi, x) return x when x is NaN (the second operand) */
    const __m512 x = _mm512_min_ps(_mm512_set1_ps(FG_VEXP_HI), _mm512_max_ps(_mm512_set1_ps(FG_VEXP_LO), x0));
    const __m512 big = _mm512_set1_ps(FG_VEXP_ROUND);
    const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(FG_VEXP_LOG2E), big), big);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FG_VEXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(FG_VEXP_LN2_LO), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(FG_VEXP_C6), r, _mm512_set1_ps(FG_VEXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FG_VEXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FG_VEXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(FG_VEXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    /* p · 2^n, rounded once; 0 where x0 < lo (−inf included; false for NaN) */
    const __mmask16 keep = _mm512_cmp_ps_mask(x0, _mm512_set1_ps(FG_VEXP_LO), _CMP_NLT_UQ);
    return _mm512_maskz_scalef_ps(keep, p, n);
}

static inline __attribute__((always_inline)) FG_TARGET_AVX2 __m256 fg_vexp_avx2(__m256 x0) {
    const __m256 x = _mm256_min_ps(_mm256_set1_ps(FG_VEXP_HI), _mm256_max_ps(_mm256_set1_ps(FG_VEXP_LO), x0));
    const __m256 big = _mm256_set1_ps(FG_VEXP_ROUND);
    const __m256 nb = _mm256_fmadd_ps(x, _mm256_set1_ps(FG_VEXP_LOG2E), big); /* n + 1.5·2^23 */
    const __m256 n = _mm256_sub_ps(nb, big);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(FG_VEXP_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(FG_VEXP_LN2_LO), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(FG_VEXP_C6), r, _mm256_set1_ps(FG_VEXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FG_VEXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FG_VEXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(FG_VEXP_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* n as an integer: the low bits of n + 1.5·2^23; then 2^n1 · 2^n2 with n1 = n >> 1, n2 = n − n1:
     * the first product is exact, the second rounds (a NaN x gives a meaningless n, but p is NaN) */
    const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(nb), _mm256_castps_si256(big));
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    const __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_and_ps(y, _mm256_cmp_ps(x0, _mm256_set1_ps(FG_VEXP_LO), _CMP_NLT_UQ));
}
#endif /* FG_SIMD_X86 */

#ifdef __cplusplus
}
#endif
#endif /* FG_VEXP_H */
