/* vphilox.c — fg_philox_blocks: Philox4x32-10 across the lanes of a vector (see vphilox.h).
 *
 * One round on the four counter words c0..c3 of every lane (tensor/philox.h, fg_philox_round):
 *     (hi0, lo0) = M0 · c0,  (hi1, lo1) = M1 · c2          (32 × 32 → 64 bits)
 *     c0' = hi1 ^ c1 ^ k0,  c1' = lo1,  c2' = hi0 ^ c3 ^ k1,  c3' = lo0
 * then the key is bumped by the Weyl constants (W0, W1) between rounds. The vector forms get the
 * low halves from vpmulld and the high halves from two vpmuludq (even lanes, then the odd lanes
 * shifted down), blended back into place.
 */
#include "ops/cpu/vphilox.h"

#include "ops/cpu/simd.h"
#include "ops/cpu/vexp.h" /* FG_TARGET_AVX512, FG_TARGET_AVX2 */
#include "tensor/philox.h"

#if FG_SIMD_X86
#include <immintrin.h>

/* the high 32 bits of the lane-wise products a · m (m broadcast) */
static inline __attribute__((always_inline)) FG_TARGET_AVX512 __m512i mulhi512(__m512i a, __m512i m) {
    const __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(a, m), 32); /* lanes 0, 2, …: high half */
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);  /* lanes 1, 3, …: in place */
    return _mm512_mask_blend_epi32((__mmask16)0xAAAA, even, odd);
}

/* 16 blocks: counters (c0 + i, c1, c2, c3), i < 16 */
static FG_TARGET_AVX512 void blocks16(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, const uint32_t key[2],
                                      uint32_t *out) {
    __m512i x0 = _mm512_add_epi32(_mm512_set1_epi32((int)c0),
                                  _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    __m512i x1 = _mm512_set1_epi32((int)c1), x2 = _mm512_set1_epi32((int)c2), x3 = _mm512_set1_epi32((int)c3);
    const __m512i m0 = _mm512_set1_epi32((int)FG_PHILOX_M0), m1 = _mm512_set1_epi32((int)FG_PHILOX_M1);
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        const __m512i hi0 = mulhi512(x0, m0), lo0 = _mm512_mullo_epi32(x0, m0);
        const __m512i hi1 = mulhi512(x2, m1), lo1 = _mm512_mullo_epi32(x2, m1);
        x0 = _mm512_xor_si512(_mm512_xor_si512(hi1, x1), _mm512_set1_epi32((int)k0));
        x1 = lo1;
        x2 = _mm512_xor_si512(_mm512_xor_si512(hi0, x3), _mm512_set1_epi32((int)k1));
        x3 = lo0;
        k0 += FG_PHILOX_W0;
        k1 += FG_PHILOX_W1;
    }
    /* interleave to out[4 i + w]: after the two unpacks, 128-bit lane L of u_m holds block 4 L + m */
    const __m512i t0 = _mm512_unpacklo_epi32(x0, x1), t1 = _mm512_unpackhi_epi32(x0, x1);
    const __m512i t2 = _mm512_unpacklo_epi32(x2, x3), t3 = _mm512_unpackhi_epi32(x2, x3);
    const __m512i u[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                          _mm512_unpackhi_epi64(t1, t3)};
    /* blocks 0-3 are lane 0 of u0..u3, blocks 4-7 lane 1, …: two permutes put them in order */
    const __m512i lo_idx = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i hi_idx = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    const __m512i a01 = _mm512_permutex2var_epi32(u[0], lo_idx, u[1]); /* blocks 0, 1, 4, 5 */
    const __m512i a23 = _mm512_permutex2var_epi32(u[2], lo_idx, u[3]); /* blocks 2, 3, 6, 7 */
    const __m512i b01 = _mm512_permutex2var_epi32(u[0], hi_idx, u[1]); /* blocks 8, 9, 12, 13 */
    const __m512i b23 = _mm512_permutex2var_epi32(u[2], hi_idx, u[3]); /* blocks 10, 11, 14, 15 */
    const __m512i first = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    const __m512i second = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    _mm512_storeu_si512(out, _mm512_permutex2var_epi32(a01, first, a23));       /* blocks 0-3 */
    _mm512_storeu_si512(out + 16, _mm512_permutex2var_epi32(a01, second, a23)); /* blocks 4-7 */
    _mm512_storeu_si512(out + 32, _mm512_permutex2var_epi32(b01, first, b23));  /* blocks 8-11 */
    _mm512_storeu_si512(out + 48, _mm512_permutex2var_epi32(b01, second, b23)); /* blocks 12-15 */
}

static inline __attribute__((always_inline)) FG_TARGET_AVX2 __m256i mulhi256(__m256i a, __m256i m) {
    const __m256i even = _mm256_srli_epi64(_mm256_mul_epu32(a, m), 32);
    const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    return _mm256_blend_epi32(even, odd, 0xAA);
}

/* 8 blocks: counters (c0 + i, c1, c2, c3), i < 8 */
static FG_TARGET_AVX2 void blocks8(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, const uint32_t key[2],
                                   uint32_t *out) {
    __m256i x0 = _mm256_add_epi32(_mm256_set1_epi32((int)c0), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i x1 = _mm256_set1_epi32((int)c1), x2 = _mm256_set1_epi32((int)c2), x3 = _mm256_set1_epi32((int)c3);
    const __m256i m0 = _mm256_set1_epi32((int)FG_PHILOX_M0), m1 = _mm256_set1_epi32((int)FG_PHILOX_M1);
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        const __m256i hi0 = mulhi256(x0, m0), lo0 = _mm256_mullo_epi32(x0, m0);
        const __m256i hi1 = mulhi256(x2, m1), lo1 = _mm256_mullo_epi32(x2, m1);
        x0 = _mm256_xor_si256(_mm256_xor_si256(hi1, x1), _mm256_set1_epi32((int)k0));
        x1 = lo1;
        x2 = _mm256_xor_si256(_mm256_xor_si256(hi0, x3), _mm256_set1_epi32((int)k1));
        x3 = lo0;
        k0 += FG_PHILOX_W0;
        k1 += FG_PHILOX_W1;
    }
    /* 128-bit lane L of u_m holds block 4 L + m */
    const __m256i t0 = _mm256_unpacklo_epi32(x0, x1), t1 = _mm256_unpackhi_epi32(x0, x1);
    const __m256i t2 = _mm256_unpacklo_epi32(x2, x3), t3 = _mm256_unpackhi_epi32(x2, x3);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    _mm256_storeu_si256((__m256i *)out, _mm256_permute2x128_si256(u0, u1, 0x20));        /* blocks 0, 1 */
    _mm256_storeu_si256((__m256i *)(out + 8), _mm256_permute2x128_si256(u2, u3, 0x20));  /* blocks 2, 3 */
    _mm256_storeu_si256((__m256i *)(out + 16), _mm256_permute2x128_si256(u0, u1, 0x31)); /* blocks 4, 5 */
    _mm256_storeu_si256((__m256i *)(out + 24), _mm256_permute2x128_si256(u2, u3, 0x31)); /* blocks 6, 7 */
}
#endif

void fg_philox_blocks(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, const uint32_t key[2], int64_t n,
                      uint32_t *out) {
    int64_t i = 0;
#if FG_SIMD_X86
    const fg_simd_level lv = fg_simd_active();
    if (lv == FG_SIMD_AVX512)
        for (; i + 16 <= n; i += 16) blocks16(c0 + (uint32_t)i, c1, c2, c3, key, out + 4 * i);
    else if (lv == FG_SIMD_AVX2)
        for (; i + 8 <= n; i += 8) blocks8(c0 + (uint32_t)i, c1, c2, c3, key, out + 4 * i);
#endif
    for (; i < n; i++) {
        const uint32_t ctr[4] = {c0 + (uint32_t)i, c1, c2, c3};
        fg_philox4x32_10(ctr, key, out + 4 * i);
    }
}

void fg_philox_stream_blocks(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, uint32_t *out) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    while (n > 0) {
        /* blocks up to the next wrap of the low counter word share the high word */
        const uint64_t to_wrap = ((uint64_t)1 << 32) - (first & 0xFFFFFFFFu);
        const int64_t m = (uint64_t)n < to_wrap ? n : (int64_t)to_wrap;
        fg_philox_blocks((uint32_t)first, (uint32_t)(first >> 32), (uint32_t)stream, (uint32_t)(stream >> 32), key, m,
                         out);
        first += (uint64_t)m;
        out += 4 * m;
        n -= m;
    }
}
