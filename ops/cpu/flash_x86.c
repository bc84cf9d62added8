/* flash_x86.c — the vector forms of the x86 tables of flash attention's tile operations
 * (ops/cpu/flash_tiles.h): AVX-512 for float32, and AVX2+FMA for float32 and float64, each compiled
 * for its instruction set through a target attribute and chosen at run time by
 * ops/cpu/flash_tiles_body.h. Every form computes the bits of the plain C one there: the exp is
 * fg_vexp's (ops/cpu/vexp.h) or fg_vexp64's (ops/cpu/flash_exp64.h), sums run key by key in each
 * lane, and the rest is elementwise or moves.
 *
 * The AVX2 softmax, exp and dS forms are one template for both dtypes, instantiated in the
 * dtypes' translation units (ops/cpu/flash_x86_body.h, in ops/cpu/attention_f32.c and
 * ops/cpu/attention_f64.c); this file holds the AVX-512 forms and the transposes.
 */
#include "ops/cpu/flash_tiles.h"

#if FG_SIMD_X86
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "ops/cpu/flash_exp64.h"
#include "ops/cpu/transpose512.h"
#include "ops/cpu/vexp.h"

/* Four vectors of columns at a time: each column's max and sum are chains of dependent operations
 * down the rows (the sum must stay in key order), so four independent chains keep the vector units
 * busy where one would wait on its own latency. */
FG_TARGET_AVX512 void fg_flash_softmax_cols_avx512(float *ST, int64_t ld, int64_t nk, int64_t nq, float *m, float *l,
                                                   float *alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
    for (int64_t r0 = 0; r0 < nq; r0 += 64) {
        __mmask16 km[4];
        __m512 mo[4], mx[4], ms[4], sum[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const int64_t left = nq - r0 - 16 * v;
            km[v] = left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
            mo[v] = _mm512_maskz_loadu_ps(km[v], m + r0 + 16 * v);
            mx[v] = mo[v];
            sum[v] = zero;
        }
        for (int64_t j = 0; j < nk; j++) {
            const float *sp = ST + j * ld + r0;
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) mx[v] = _mm512_max_ps(_mm512_maskz_loadu_ps(km[v], sp + 16 * v), mx[v]);
        }
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
            ms[v] = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx[v], ninf, _CMP_EQ_OQ), mx[v], zero);
        for (int64_t j = 0; j < nk; j++) {
            float *sp = ST + j * ld + r0;
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                const __m512 p = fg_vexp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(km[v], sp + 16 * v), ms[v]));
                _mm512_mask_storeu_ps(sp + 16 * v, km[v], p);
                sum[v] = _mm512_add_ps(sum[v], p);
            }
        }
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const int64_t r = r0 + 16 * v;
            const __m512 a = fg_vexp_avx512(_mm512_sub_ps(mo[v], ms[v]));
            const __m512 lo = _mm512_maskz_loadu_ps(km[v], l + r);
            _mm512_mask_storeu_ps(l + r, km[v], _mm512_add_ps(_mm512_mul_ps(a, lo), sum[v]));
            _mm512_mask_storeu_ps(m + r, km[v], mx[v]);
            _mm512_mask_storeu_ps(alpha + r, km[v], a);
        }
    }
}

FG_TARGET_AVX512 void fg_flash_exp_rows_avx512(float *S, int64_t ld, int64_t nq, int64_t nk, const float *L,
                                               const float *lo) {
    for (int64_t r = 0; r < nq; r++) {
        float *row = S + r * ld;
        if (L[r] == -INFINITY) {
            memset(row, 0, (size_t)nk * sizeof(float));
            continue;
        }
        const __m512 Lr = _mm512_set1_ps(L[r]), lr = _mm512_set1_ps(lo ? lo[r] : 0.0f);
        for (int64_t j = 0; j < nk; j += 16) {
            const __mmask16 km = nk - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nk - j)) - 1);
            const __m512 s = _mm512_maskz_loadu_ps(km, row + j);
            _mm512_mask_storeu_ps(row + j, km, fg_vexp_avx512(_mm512_sub_ps(_mm512_sub_ps(s, Lr), lr)));
        }
    }
}

/* one 16 × 16 block, through the registers (ops/cpu/transpose512.h) */
FG_TARGET_AVX512 static void transpose16_avx512(float *dst, int64_t ldd, const float *src, int64_t lds) {
    __m512 r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
    fg_transpose16_avx512(r);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * ldd, r[i]);
}

void fg_flash_transpose_avx512(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols) {
    const int64_t r16 = rows / 16 * 16, c16 = cols / 16 * 16;
    for (int64_t r0 = 0; r0 < r16; r0 += 16)
        for (int64_t c0 = 0; c0 < c16; c0 += 16) transpose16_avx512(dst + c0 * ldd + r0, ldd, src + r0 * lds + c0, lds);
    /* the edges: the last cols % 16 columns of every row, then the last rows % 16 rows */
    if (c16 < cols) fg_flash_transpose_scalar_f32(dst + c16 * ldd, ldd, src + c16, lds, r16, cols - c16);
    if (r16 < rows) fg_flash_transpose_scalar_f32(dst + r16, ldd, src + r16 * lds, lds, rows - r16, cols);
}

FG_TARGET_AVX512 void fg_flash_ds_rows_avx512(float *dS, const float *P, int64_t ld, int64_t nq, int64_t nk,
                                              const float *D) {
    for (int64_t r = 0; r < nq; r++) {
        float *dsrow = dS + r * ld;
        const float *prow = P + r * ld;
        const __m512 Di = _mm512_set1_ps(D[r]);
        for (int64_t j = 0; j < nk; j += 16) {
            const __mmask16 km = nk - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nk - j)) - 1);
            const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(km, dsrow + j), Di);
            _mm512_mask_storeu_ps(dsrow + j, km, _mm512_mul_ps(_mm512_maskz_loadu_ps(km, prow + j), x));
        }
    }
}

/* D_r = Σ_c a[r, c]·b[r, c] in double (the plain C form's order, ops/cpu/flash_tiles_body.h): eight
 * rows at a time, each in a lane. The products of an 8 × 8 block (exact: float times float fits a
 * double) are transposed so that q_k holds column k of the eight rows, then added column by column.
 * The transpose: rows interleaved in pairs, then 128-bit lanes gathered twice. */
FG_TARGET_AVX512 void fg_flash_row_dots_avx512(float *D, const float *a, int64_t lda, const float *b, int64_t ldb,
                                               int64_t rows, int64_t d) {
    int64_t i = 0;
    for (; i + 8 <= rows; i += 8) {
        __m512d s = _mm512_setzero_pd();
        int64_t c = 0;
        for (; c + 8 <= d; c += 8) {
            __m512d p[8], t[8], u[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++)
                p[r] = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(a + (i + r) * lda + c)),
                                     _mm512_cvtps_pd(_mm256_loadu_ps(b + (i + r) * ldb + c)));
#pragma GCC unroll 4
            for (int r = 0; r < 8; r += 2) {
                t[r] = _mm512_unpacklo_pd(p[r], p[r + 1]);     /* columns 0 2 4 6 of rows r, r+1 */
                t[r + 1] = _mm512_unpackhi_pd(p[r], p[r + 1]); /* columns 1 3 5 7 */
            }
#pragma GCC unroll 2
            for (int h = 0; h < 8; h += 4)
#pragma GCC unroll 2
                for (int o = 0; o < 2; o++) { /* rows h..h+3: columns {0 4, 2 6} (o = 0) or {1 5, 3 7} */
                    u[h + 2 * o] = _mm512_shuffle_f64x2(t[h + o], t[h + 2 + o], 0x88);
                    u[h + 2 * o + 1] = _mm512_shuffle_f64x2(t[h + o], t[h + 2 + o], 0xDD);
                }
            /* u[j] (rows 0-3) and u[4 + j] (rows 4-7) hold columns: j = 0: 0, 4; 1: 2, 6; 2: 1, 5; 3: 3, 7 */
            s = _mm512_add_pd(s, _mm512_shuffle_f64x2(u[0], u[4], 0x88)); /* column 0 */
            s = _mm512_add_pd(s, _mm512_shuffle_f64x2(u[2], u[6], 0x88)); /* 1 */
            s = _mm512_add_pd(s, _mm512_shuffle_f64x2(u[1], u[5], 0x88)); /* 2 */
            s = _mm512_add_pd(s, _mm512_shuffle_f64x2(u[3], u[7], 0x88)); /* 3 */
            s = _mm512_add_pd(s, _mm512_shuffle_f64x2(u[0], u[4], 0xDD)); /* 4 */
            s = _mm512_add_pd(s, _mm512_shuffle_f64x2(u[2], u[6], 0xDD)); /* 5 */
            s = _mm512_add_pd(s, _mm512_shuffle_f64x2(u[1], u[5], 0xDD)); /* 6 */
            s = _mm512_add_pd(s, _mm512_shuffle_f64x2(u[3], u[7], 0xDD)); /* 7 */
        }
        double acc[8];
        _mm512_storeu_pd(acc, s);
        for (int r = 0; r < 8; r++) {
            for (int64_t cc = c; cc < d; cc++)
                acc[r] += (double)a[(i + r) * lda + cc] * (double)b[(i + r) * ldb + cc];
            D[i + r] = (float)acc[r];
        }
    }
    if (i < rows) fg_flash_row_dots_scalar_f32(D + i, a + i * lda, lda, b + i * ldb, ldb, rows - i, d);
}

/* one 8 × 8 block: pairs of rows interleaved by 1, then 2 elements, then the 128-bit halves swapped */
FG_TARGET_AVX2 static void transpose8x8_ps(float *dst, int64_t ldd, const float *src, int64_t lds) {
    __m256 r[8], t[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++) {
        r[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[4 + i], 0x20));
        _mm256_storeu_ps(dst + (4 + i) * ldd, _mm256_permute2f128_ps(r[i], r[4 + i], 0x31));
    }
}

FG_TARGET_AVX2 void fg_flash_transpose_avx2_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows,
                                                int64_t cols) {
    const int64_t r8 = rows / 8 * 8, c8 = cols / 8 * 8;
    for (int64_t r0 = 0; r0 < r8; r0 += 8)
        for (int64_t c0 = 0; c0 < c8; c0 += 8) transpose8x8_ps(dst + c0 * ldd + r0, ldd, src + r0 * lds + c0, lds);
    if (c8 < cols) fg_flash_transpose_scalar_f32(dst + c8 * ldd, ldd, src + c8, lds, r8, cols - c8);
    if (r8 < rows) fg_flash_transpose_scalar_f32(dst + r8, ldd, src + r8 * lds, lds, rows - r8, cols);
}

/* one 4 × 4 block: pairs of rows interleaved, then 128-bit halves swapped */
FG_TARGET_AVX2 static void transpose4x4_pd(double *dst, int64_t ldd, const double *src, int64_t lds) {
    const __m256d r0 = _mm256_loadu_pd(src), r1 = _mm256_loadu_pd(src + lds), r2 = _mm256_loadu_pd(src + 2 * lds),
                  r3 = _mm256_loadu_pd(src + 3 * lds);
    const __m256d t0 = _mm256_unpacklo_pd(r0, r1), t1 = _mm256_unpackhi_pd(r0, r1), t2 = _mm256_unpacklo_pd(r2, r3),
                  t3 = _mm256_unpackhi_pd(r2, r3);
    _mm256_storeu_pd(dst, _mm256_permute2f128_pd(t0, t2, 0x20));
    _mm256_storeu_pd(dst + ldd, _mm256_permute2f128_pd(t1, t3, 0x20));
    _mm256_storeu_pd(dst + 2 * ldd, _mm256_permute2f128_pd(t0, t2, 0x31));
    _mm256_storeu_pd(dst + 3 * ldd, _mm256_permute2f128_pd(t1, t3, 0x31));
}

FG_TARGET_AVX2 void fg_flash_transpose_avx2_f64(double *dst, int64_t ldd, const double *src, int64_t lds, int64_t rows,
                                                int64_t cols) {
    const int64_t r4 = rows / 4 * 4, c4 = cols / 4 * 4;
    /* 16 × 16 panels of 4 × 4 blocks, so that both sides stay in a few cache lines */
    for (int64_t R = 0; R < r4; R += 16)
        for (int64_t Cc = 0; Cc < c4; Cc += 16)
            for (int64_t r0 = R; r0 < R + 16 && r0 < r4; r0 += 4)
                for (int64_t c0 = Cc; c0 < Cc + 16 && c0 < c4; c0 += 4)
                    transpose4x4_pd(dst + c0 * ldd + r0, ldd, src + r0 * lds + c0, lds);
    if (c4 < cols) fg_flash_transpose_scalar_f64(dst + c4 * ldd, ldd, src + c4, lds, r4, cols - c4);
    if (r4 < rows) fg_flash_transpose_scalar_f64(dst + r4, ldd, src + r4 * lds, lds, rows - r4, cols);
}

#else
typedef int fg_flash_x86_unused; /* a translation unit may not be empty */
#endif /* FG_SIMD_X86 */
