/* vexp.c — fg_vexp_f32: the array form of ops/cpu/vexp.h, one copy per instruction set. */
#include "ops/cpu/vexp.h"

#if FG_SIMD_X86
FG_TARGET_AVX512 static void vexp_avx512(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, fg_vexp_avx512(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, fg_vexp_avx512(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

FG_TARGET_AVX2 static void vexp_avx2(float *y, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, fg_vexp_avx2(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = fg_expf_ref(x[i]); /* the same bits, one at a time */
}
#endif

void fg_vexp_f32(float *y, const float *x, int64_t n) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        vexp_avx512(y, x, n);
        return;
    case FG_SIMD_AVX2:
        vexp_avx2(y, x, n);
        return;
    default:
        break;
    }
#endif
    for (int64_t i = 0; i < n; i++) y[i] = fg_expf_ref(x[i]);
}
