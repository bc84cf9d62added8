/* flash_exp64.h — exp for float64, vectorized for AVX2+FMA, with a scalar form that computes the
 * very same bits: the exp of the float64 flash attention tiles (ops/cpu/flash_tiles.h).
 *
 * The method is vexp.h's (Cody–Waite range reduction and a polynomial), in double:
 *     exp(x) = 0 for x < −708 (and x = −inf): no subnormals, as in vexp.h
 *     x  <- min(max(x, −708), 710)          (NaN stays NaN; above ~709.78 the result is +inf)
 *     n  = fma(x, log2(e), 1.5·2^52) − 1.5·2^52   (x·log2(e) rounded to an integer)
 *     r  = (x − n·ln2_hi) − n·ln2_lo        (two FMAs; |r| <= ln2/2 + tiny)
 *     p  = Σ_{i=0..13} r^i / i!             (Horner, twelve FMAs and the last two with 1)
 *     exp(x) = (p · 2^n1) · 2^n2,  n1 = floor(n/2), n2 = n − n1   (both normal powers; the products
 *                                            are exact while the result is normal)
 * The Taylor remainder r^14/14! is below 5·10^-18 relative on |r| <= ln2/2, so the error is the
 * Horner rounding: about one ulp (tests/test_flash_f64.c checks <= 2 ulps against long double expl
 * on a sample, and the special values). Every step is an IEEE double operation with the same
 * operands in the same order in both forms, so they agree bit for bit.
 *
 *   fg_exp64_ref(x)      the scalar form (fma is an instruction on FMA machines, an exact library
 *                        routine elsewhere)
 *   fg_vexp64_avx2(v)    four lanes, for kernels compiled with FG_TARGET_AVX2 (ops/cpu/vexp.h)
 */
#ifndef FG_FLASH_EXP64_H
#define FG_FLASH_EXP64_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/vexp.h" /* FG_TARGET_AVX2, immintrin.h */

#ifdef __cplusplus
extern "C" {
#endif

#define FG_EXP64_LO (-708.0)
#define FG_EXP64_HI 710.0
#define FG_EXP64_ROUND 6755399441055744.0 /* 1.5·2^52 */
#define FG_EXP64_LOG2E 0x1.71547652b82fep+0
#define FG_EXP64_LN2_HI 0x1.62e42fefa39efp-1
#define FG_EXP64_LN2_LO 0x1.abc9e3b39803fp-56
#define FG_EXP64_POW2 4503599627371519.0 /* 2^52 + 1023: k + this has k + 1023 in its low mantissa bits */
/* 1/i! for i = 2..13, each the double nearest (constant expressions, rounded once) */
#define FG_EXP64_C2 (1.0 / 2.0)
#define FG_EXP64_C3 (1.0 / 6.0)
#define FG_EXP64_C4 (1.0 / 24.0)
#define FG_EXP64_C5 (1.0 / 120.0)
#define FG_EXP64_C6 (1.0 / 720.0)
#define FG_EXP64_C7 (1.0 / 5040.0)
#define FG_EXP64_C8 (1.0 / 40320.0)
#define FG_EXP64_C9 (1.0 / 362880.0)
#define FG_EXP64_C10 (1.0 / 3628800.0)
#define FG_EXP64_C11 (1.0 / 39916800.0)
#define FG_EXP64_C12 (1.0 / 479001600.0)
#define FG_EXP64_C13 (1.0 / 6227020800.0)

/* 2^k for an integer-valued k in [−1022, 1023] */
static inline double fg_exp64_pow2(double k) {
    const uint64_t u = (uint64_t)(int64_t)(k + 1023.0) << 52;
    double f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline double fg_exp64_ref(double x) {
    if (x != x) return x + x; /* NaN */
    if (x < FG_EXP64_LO) return 0.0;
    if (x > FG_EXP64_HI) x = FG_EXP64_HI;
    const double n = fma(x, FG_EXP64_LOG2E, FG_EXP64_ROUND) - FG_EXP64_ROUND;
    double r = fma(-n, FG_EXP64_LN2_HI, x);
    r = fma(-n, FG_EXP64_LN2_LO, r);
    double p = fma(FG_EXP64_C13, r, FG_EXP64_C12);
    p = fma(p, r, FG_EXP64_C11);
    p = fma(p, r, FG_EXP64_C10);
    p = fma(p, r, FG_EXP64_C9);
    p = fma(p, r, FG_EXP64_C8);
    p = fma(p, r, FG_EXP64_C7);
    p = fma(p, r, FG_EXP64_C6);
    p = fma(p, r, FG_EXP64_C5);
    p = fma(p, r, FG_EXP64_C4);
    p = fma(p, r, FG_EXP64_C3);
    p = fma(p, r, FG_EXP64_C2);
    p = fma(p, r, 1.0);
    p = fma(p, r, 1.0);
    const double n1 = floor(n * 0.5), n2 = n - n1;
    return (p * fg_exp64_pow2(n1)) * fg_exp64_pow2(n2);
}

#if FG_SIMD_X86
static inline __attribute__((always_inline)) FG_TARGET_AVX2 __m256d fg_vexp64_pow2_avx2(__m256d k) {
    return _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_castpd_si256(_mm256_add_pd(k, _mm256_set1_pd(FG_EXP64_POW2))), 52));
}

static inline __attribute__((always_inline)) FG_TARGET_AVX2 __m256d fg_vexp64_avx2(__m256d x0) {
    /* max(lo, x) and min(hi, x) return x when x is NaN (the second operand) */
    const __m256d x = _mm256_min_pd(_mm256_set1_pd(FG_EXP64_HI), _mm256_max_pd(_mm256_set1_pd(FG_EXP64_LO), x0));
    const __m256d big = _mm256_set1_pd(FG_EXP64_ROUND);
    const __m256d n = _mm256_sub_pd(_mm256_fmadd_pd(x, _mm256_set1_pd(FG_EXP64_LOG2E), big), big);
    __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(FG_EXP64_LN2_HI), x);
    r = _mm256_fnmadd_pd(n, _mm256_set1_pd(FG_EXP64_LN2_LO), r);
    __m256d p = _mm256_fmadd_pd(_mm256_set1_pd(FG_EXP64_C13), r, _mm256_set1_pd(FG_EXP64_C12));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(FG_EXP64_C11));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(FG_EXP64_C10));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(FG_EXP64_C9));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(FG_EXP64_C8));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(FG_EXP64_C7));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(FG_EXP64_C6));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(FG_EXP64_C5));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(FG_EXP64_C4));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(FG_EXP64_C3));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(FG_EXP64_C2));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0));
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0));
    const __m256d n1 = _mm256_floor_pd(_mm256_mul_pd(n, _mm256_set1_pd(0.5))), n2 = _mm256_sub_pd(n, n1);
    const __m256d y = _mm256_mul_pd(_mm256_mul_pd(p, fg_vexp64_pow2_avx2(n1)), fg_vexp64_pow2_avx2(n2));
    /* 0 where x0 < lo (−inf included; false for NaN) */
    return _mm256_and_pd(y, _mm256_cmp_pd(x0, _mm256_set1_pd(FG_EXP64_LO), _CMP_NLT_UQ));
}
#endif /* FG_SIMD_X86 */

#ifdef __cplusplus
}
#endif
#endif /* FG_FLASH_EXP64_H */
