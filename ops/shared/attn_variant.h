/* attn_variant.h — the built-in attention variants as plain data and pure functions, shared by the
 * CPU kernels (ops/attention_*.c) and the CUDA kernels (cuda/attention_kernels.cuh) through FG_HD
 * (tensor/hd.h), like ops/shared/attn_tiles.h. Everything here is a pure function of its arguments: no allocation, no
 * global state, usable in any thread or kernel. ops/attention.h documents the full semantics; the
 * short form:
 *
 *   off = Nk − Nq, i' = i + off           (query i in key coordinates: bottom-right alignment)
 *   s   = scale · q_i · k_j
 *   s   = c · tanh(s / c)                  softcap c > 0
 *   s   = s − slope_h · |i' − j|            ALiBi
 *   s   = score_mod(s, b, h, i, j)          user callback (CPU only; ops/attention.h)
 *   visible(i, j) = causal:  j <= i'    (causal FG_ATTN_CAUSAL_TOP_LEFT: j <= i, SDPA's is_causal)
 *                 ∧ window:  i' − L <= j <= i' + R   (L < 0 or R < 0: that side unbounded)
 *                 ∧ mask(b, h, i, j)          user callback (CPU only)
 *   P = softmax over the visible j; K and V head = h / (H / H_kv).
 *
 * The visible keys of a row under causal ∧ window form one interval [lo(i), hi(i)), and both ends
 * are nondecreasing in i. fg_attn_tile_kind_window() classifies a tile of the score matrix from
 * that: the first row has the smallest hi, the last row the largest lo.
 */
#ifndef FG_ATTN_VARIANT_H
#define FG_ATTN_VARIANT_H

#include <math.h>
#include <stdint.h>

#include "ops/shared/attn_tiles.h" /* fg_tile_kind */
#include "tensor/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The built-in variants: a plain struct a kernel can take by value. All-zero is plain multi-head
 * attention (so `(fg_attn_variant){0}` and designated initializers mean "no variant").
 *   n_kv_heads    H_kv, the heads of K and V; 0 = H. H % H_kv == 0; query head h reads K/V head
 *                 h / (H / H_kv). H_kv = 1 is multi-query attention. In a resolved problem it is
 *                 never 0.
 *   window        0: no window. 1: window_left L and window_right R apply; a negative value leaves
 *                 that side unbounded (FlashAttention's -1).
 *   alibi         0: off. 1: s −= slope_h · |i' − j|, slope_h = alibi_slopes[h] or, when
 *                 alibi_slopes is NULL, fg_attn_alibi_slope(h, H).
 *   alibi_slopes  H slopes (query heads), host memory, or NULL. The struct points, it does not own;
 *                 fg_attention copies them for its backward. A device backend must hand its kernels
 *                 a device copy.
 *   softcap       0: off. c > 0: s = c · tanh(s / c) on the scaled score, before ALiBi. */
typedef struct {
    int64_t n_kv_heads;
    int window;
    int64_t window_left, window_right;
    int alibi;
    const double *alibi_slopes;
    double softcap;
} fg_attn_variant;

/* The standard ALiBi slope of head h (0-based) among H heads, as in the ALiBi paper's reference
 * code (Press et al., 2022, get_slopes): for H a power of two, 2^(−8(h+1)/H); otherwise, with n the
 * largest power of two below H, heads h < n take 2^(−8(h+1)/n) and the remaining H − n heads take
 * every other slope of 2n heads, 2^(−4(2(h − n) + 1)/n). H = 8 gives 1/2, 1/4, ..., 1/256. */
FG_HD double fg_attn_alibi_slope(int64_t h, int64_t H) {
    int64_t n = 1;
    while (n * 2 <= H) n *= 2;
    if (h < n) return exp2(-8.0 * (double)(h + 1) / (double)n);
    return exp2(-4.0 * (double)(2 * (h - n) + 1) / (double)n);
}

/* The keys query i sees under causal ∧ window: [*lo, *hi) ⊆ [0, Nk), empty when *lo >= *hi. */
FG_HD void fg_attn_row_range(int64_t i, int64_t Nq, int64_t Nk, int causal, int window, int64_t wl, int64_t wr,
                             int64_t *lo, int64_t *hi) {
    const int64_t ip = i + (Nk - Nq);
    /* causal 2 aligns the mask to the top-left corner (query i sees keys j <= i); any other
     * nonzero value to the bottom-right (j <= i'); the window stays bottom-right aligned */
    const int64_t ic = causal == 2 ? i : ip;
    int64_t a = 0, e = Nk;
    if (causal && ic + 1 < e) e = ic + 1;
    if (window) {
        if (wl >= 0 && ip - wl > a) a = ip - wl;
        if (wr >= 0 && ip + wr + 1 < e) e = ip + wr + 1;
    }
    if (e < 0) e = 0;
    if (a > Nk) a = Nk;
    *lo = a;
    *hi = e;
}

/* Does query i see key j under causal ∧ window? (The user mask is not included.) */
FG_HD int fg_attn_in_window(int64_t i, int64_t j, int64_t Nq, int64_t Nk, int causal, int window, int64_t wl,
                            int64_t wr) {
    int64_t lo, hi;
    fg_attn_row_range(i, Nq, Nk, causal, window, wl, wr, &lo, &hi);
    return j >= lo && j < hi;
}

/* Classify the tile of rows [i0, i0 + nq) and keys [j0, j0 + nk) (all in range, no padding) under
 * causal ∧ window: MASKED when no element is visible, FULL when every element is, else PARTIAL.
 * O(1) except when neither end decides, then one pass over the rows (which stops at the first row
 * that sees a key of the tile). */
FG_HD fg_tile_kind fg_attn_tile_kind_window(int64_t i0, int64_t nq, int64_t j0, int64_t nk, int64_t Nq, int64_t Nk,
                                            int causal, int window, int64_t wl, int64_t wr) {
    if (nq <= 0 || nk <= 0) return FG_TILE_MASKED;
    const int64_t j1 = j0 + nk;
    int64_t lo0, hi0, lo1, hi1;
    fg_attn_row_range(i0, Nq, Nk, causal, window, wl, wr, &lo0, &hi0);
    fg_attn_row_range(i0 + nq - 1, Nq, Nk, causal, window, wl, wr, &lo1, &hi1);
    /* lo and hi are nondecreasing in i */
    if (hi1 <= j0 || lo0 >= j1) return FG_TILE_MASKED;
    if (lo1 <= j0 && hi0 >= j1) return FG_TILE_FULL;
    for (int64_t i = i0; i < i0 + nq; i++) {
        int64_t lo, hi;
        fg_attn_row_range(i, Nq, Nk, causal, window, wl, wr, &lo, &hi);
        if ((lo > j0 ? lo : j0) < (hi < j1 ? hi : j1)) return FG_TILE_PARTIAL;
    }
    return FG_TILE_MASKED;
}

/* Two tile kinds of the same tile combined (intersection of the visible sets, conservatively):
 * MASKED if either is, FULL if both are, else PARTIAL. */
FG_HD fg_tile_kind fg_attn_tile_kind_and(fg_tile_kind a, fg_tile_kind b) {
    if (a == FG_TILE_MASKED || b == FG_TILE_MASKED) return FG_TILE_MASKED;
    if (a == FG_TILE_FULL && b == FG_TILE_FULL) return FG_TILE_FULL;
    return FG_TILE_PARTIAL;
}

#ifdef __cplusplus
}
#endif
#endif /* FG_ATTN_VARIANT_H */
