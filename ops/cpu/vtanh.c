/* vtanh.c — fg_vtanh_div_f32: the array form of ops/cpu/vtanh.h, one copy per instruction set. */
#include "ops/cpu/vtanh.h"

#if FG_SIMD_X86
FG_TARGET_AVX512 static void vtanh_avx512(float *t, const float *x, float c, int64_t n) {
    const __m512 cv = _mm512_set1_ps(c);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(t + i, fg_vtanh_avx512(_mm512_div_ps(_mm512_loadu_ps(x + i), cv)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(t + i, m, fg_vtanh_avx512(_mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), cv)));
    }
}

FG_TARGET_AVX2 static void vtanh_avx2(float *t, const float *x, float c, int64_t n) {
    const __m256 cv = _mm256_set1_ps(c);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(t + i, fg_vtanh_avx2(_mm256_div_ps(_mm256_loadu_ps(x + i), cv)));
    for (; i < n; i++) t[i] = fg_tanhf_ref(x[i] / c); /* the same bits, one at a time */
}
#endif

void fg_vtanh_div_f32(float *t, const float *x, float c, int64_t n) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        vtanh_avx512(t, x, c, n);
        return;
    case FG_SIMD_AVX2:
        vtanh_avx2(t, x, c, n);
        return;
    default:
        break;
    }
#endif
    for (int64_t i = 0; i < n; i++) t[i] = fg_tanhf_ref(x[i] / c);
}
