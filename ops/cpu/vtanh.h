/* vtanh.h — tanh for float32, vectorized (AVX-512F, AVX2+FMA) with a scalar form that computes the
 * very same bits, on top of vexp.h's exp (the same discipline: every path does the same IEEE
 * operations on the same operands in the same order).
 *
 * With a = |u| (the sign put back at the end, tanh being odd):
 *     a < 0.55    tanh a = a + (a s) P(s),  s = a²,  P(s) = c1 + c2 s + ... + c9 s^8
 *                 the Taylor series of (tanh a − a) / a³ (c1 = −1/3, c2 = 2/15, ...; c_k is
 *                 2^2k (2^2k − 1) B_2k / (2k)! for the next power), Horner in fmaf; the first term
 *                 left out is below 0.02 ulp at a = 0.55
 *     a ≥ 0.55    tanh a = (1 − e) / (1 + e),  e = exp(−2a) ≤ 0.333, so 1 − e cancels nothing
 *                 (exp(−2a) is 0 from a > 43.65 on: tanh is 1 there, as it rounds to in float32)
 * NaN stays NaN, ±inf gives ±1, −0 gives −0.
 *
 * Accuracy: within 2 ulp of tanh in double (tests/test_simd.c checks a sample of every level). The
 * point is speed where a softcap meets every logit (glibc's tanhf is a call per element).
 *
 *   fg_tanhf_ref(u)                 the scalar form
 *   fg_vtanh_div_f32(t, x, c, n)    t[i] = tanh(x[i] / c) for an array (t may be x), dispatched on
 *                                   fg_simd_active()
 */
#ifndef FG_VTANH_H
#define FG_VTANH_H

#include "ops/cpu/vexp.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_VTANH_SMALL 0.55f
#define FG_VTANH_C1 (-0x1.555556p-2f)
#define FG_VTANH_C2 0x1.111112p-3f
#define FG_VTANH_C3 (-0x1.ba1ba2p-5f)
#define FG_VTANH_C4 0x1.664f48p-6f
#define FG_VTANH_C5 (-0x1.226e36p-7f)
#define FG_VTANH_C6 0x1.d6d3d0p-9f
#define FG_VTANH_C7 (-0x1.7da364p-10f)
#define FG_VTANH_C8 0x1.355824p-11f
#define FG_VTANH_C9 (-0x1.f57d78p-13f)

/* t[i] = tanh(x[i] / c) for i < n; t may equal x (in place). */
void fg_vtanh_div_f32(float *t, const float *x, float c, int64_t n);

static inline float fg_tanhf_ref(float u) {
    const float a = fabsf(u);
    float r;
    if (a < FG_VTANH_SMALL) {
        const float s = a * a;
        float p = fmaf(FG_VTANH_C9, s, FG_VTANH_C8);
        p = fmaf(p, s, FG_VTANH_C7);
        p = fmaf(p, s, FG_VTANH_C6);
        p = fmaf(p, s, FG_VTANH_C5);
        p = fmaf(p, s, FG_VTANH_C4);
        p = fmaf(p, s, FG_VTANH_C3);
        p = fmaf(p, s, FG_VTANH_C2);
        p = fmaf(p, s, FG_VTANH_C1);
        r = fmaf(a * s, p, a);
    } else {
        const float e = fg_expf_ref(-2.0f * a); /* NaN here for a NaN u */
        r = (1.0f - e) / (1.0f + e);
    }
    return copysignf(r, u);
}

#if FG_SIMD_X86
static inline __attribute__((always_inline)) FG_TARGET_AVX512 __m512 fg_vtanh_avx512(__m512 u) {
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(u)));
    const __m512 s = _mm512_mul_ps(a, a);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(FG_VTANH_C9), s, _mm512_set1_ps(FG_VTANH_C8));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(FG_VTANH_C7));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(FG_VTANH_C6));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(FG_VTANH_C5));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(FG_VTANH_C4));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(FG_VTANH_C3));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(FG_VTANH_C2));
    p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(FG_VTANH_C1));
    const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(a, s), p, a);
    const __m512 e = fg_vexp_avx512(_mm512_mul_ps(_mm512_set1_ps(-2.0f), a));
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 big = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
    /* a < 0.55 is false for NaN: the big form, NaN as in the scalar one */
    const __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(FG_VTANH_SMALL), _CMP_LT_OQ), big, small);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(sign, _mm512_castps_si512(r)),
                                               _mm512_and_si512(sign, _mm512_castps_si512(u))));
}

static inline __attribute__((always_inline)) FG_TARGET_AVX2 __m256 fg_vtanh_avx2(__m256 u) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 a = _mm256_andnot_ps(sign, u);
    const __m256 s = _mm256_mul_ps(a, a);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(FG_VTANH_C9), s, _mm256_set1_ps(FG_VTANH_C8));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(FG_VTANH_C7));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(FG_VTANH_C6));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(FG_VTANH_C5));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(FG_VTANH_C4));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(FG_VTANH_C3));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(FG_VTANH_C2));
    p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(FG_VTANH_C1));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(a, s), p, a);
    const __m256 e = fg_vexp_avx2(_mm256_mul_ps(_mm256_set1_ps(-2.0f), a));
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 big = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
    const __m256 r = _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, _mm256_set1_ps(FG_VTANH_SMALL), _CMP_LT_OQ));
    return _mm256_or_ps(_mm256_andnot_ps(sign, r), _mm256_and_ps(sign, u));
}
#endif /* FG_SIMD_X86 */

#ifdef __cplusplus
}
#endif
#endif /* FG_VTANH_H */
