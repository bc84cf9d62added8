/* attn_tiles.h — tile index and causal-mask arithmetic of flash attention, shared by host C and
 * CUDA device code (FG_HD, tensor/hd.h).
 *
 * The picture: the Nq × Nk score matrix of one (b, h) is cut into tiles of bq query rows and bk key
 * columns; tile (qt, kt) covers rows [qt·bq, qt·bq + bq) ∩ [0, Nq) and keys [kt·bk, kt·bk + bk) ∩
 * [0, Nk). With the causal mask aligned to the bottom-right, query i sees key j iff
 *     j <= i + Nk − Nq          (off = Nk − Nq; when Nq == Nk this is the usual j <= i)
 * so the visible keys of a row are a prefix [0, row_end(i)), and row_end grows by one per row.
 * Consequences the kernels rely on:
 *   - for a query tile, the tiles that are not fully masked are a prefix kt ∈ [0, kt_end(qt));
 *   - for a key tile, the query tiles that see any of its keys are a suffix qt ∈ [qt_begin(kt), nqt);
 *   - a tile is fully visible (no per-element mask needed) when its first row sees its last key and
 *     it has no padding columns past Nk.
 * Without the causal mask every in-range element is visible and only the last key tile (padding
 * columns past Nk) is partial.
 *
 * tests/test_cuda_shared.c checks every function here against brute force over the elements, for
 * many (Nq, Nk, bq, bk) including odd sizes and Nq ≠ Nk; cuda/attention_kernels.cuh and the CPU
 * flash code may call them. Everything is a pure function of its arguments.
 */
#ifndef FG_ATTN_TILES_H
#define FG_ATTN_TILES_H

#include <stdint.h>

#include "tensor/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    FG_TILE_MASKED = 0,  /* no element of the tile is visible: skip it */
    FG_TILE_PARTIAL = 1, /* some elements are masked (causal diagonal, or key padding past Nk) */
    FG_TILE_FULL = 2     /* every in-range row sees every key of the tile and no key is padding */
} fg_tile_kind;

/* Number of tiles of size `block` covering n elements (0 for n <= 0). */
FG_HD int64_t fg_attn_ntiles(int64_t n, int64_t block) { return n <= 0 ? 0 : (n + block - 1) / block; }

/* Query i sees keys [0, fg_attn_row_end(i)): Nk without the mask, else clamp(i + Nk − Nq + 1, 0, Nk). */
FG_HD int64_t fg_attn_row_end(int64_t i, int64_t Nq, int64_t Nk, int causal) {
    if (!causal) return Nk;
    int64_t e = i + (Nk - Nq) + 1;
    return e < 0 ? 0 : (e > Nk ? Nk : e);
}

/* Does query i see key j? (Both in range: 0 <= i < Nq, 0 <= j < Nk; out of range is "no".) */
FG_HD int fg_attn_visible(int64_t i, int64_t j, int64_t Nq, int64_t Nk, int causal) {
    if (i < 0 || i >= Nq || j < 0 || j >= Nk) return 0;
    return !causal || j <= i + (Nk - Nq);
}

/* Key tiles [0, kt_end) are not fully masked for query tile qt; later ones are skipped. */
FG_HD int64_t fg_attn_kt_end(int64_t qt, int64_t Nq, int64_t Nk, int64_t bq, int64_t bk, int causal) {
    int64_t i0 = qt * bq;
    if (i0 >= Nq || Nk <= 0) return 0;
    int64_t i_last = (i0 + bq < Nq ? i0 + bq : Nq) - 1;
    /* row_end grows with i, so the tile's last row sees the most keys */
    return fg_attn_ntiles(fg_attn_row_end(i_last, Nq, Nk, causal), bk);
}

/* Query tiles [qt_begin, ntiles(Nq)) see some key of key tile kt; earlier ones are skipped.
 * Returns ntiles(Nq, bq) when no query sees the tile (then dK, dV of its keys get nothing). */
FG_HD int64_t fg_attn_qt_begin(int64_t kt, int64_t Nq, int64_t Nk, int64_t bq, int64_t bk, int causal) {
    int64_t nqt = fg_attn_ntiles(Nq, bq);
    int64_t j0 = kt * bk;
    if (j0 >= Nk) return nqt;
    if (!causal) return 0;
    /* the first query that sees key j0 (the tile's first key) is i = j0 − (Nk − Nq) */
    int64_t i_first = j0 - (Nk - Nq);
    if (i_first < 0) i_first = 0;
    if (i_first >= Nq) return nqt;
    return i_first / bq;
}

/* Classify tile (qt, kt) under the causal mask alone (ops/shared/attn_variant.h adds windows and
 * masks on top). Rows past Nq (padding of the last query tile) are ignored: the kernels
 * give them zero weight on their own; key padding past Nk makes a tile PARTIAL. */
FG_HD fg_tile_kind fg_attn_causal_tile_kind(int64_t qt, int64_t kt, int64_t Nq, int64_t Nk, int64_t bq, int64_t bk,
                                            int causal) {
    int64_t i0 = qt * bq, j0 = kt * bk;
    if (i0 >= Nq || j0 >= Nk || i0 < 0 || j0 < 0) return FG_TILE_MASKED;
    int64_t i_last = (i0 + bq < Nq ? i0 + bq : Nq) - 1;
    /* the last row sees the most keys: if it misses the first key, every row does */
    if (fg_attn_row_end(i_last, Nq, Nk, causal) <= j0) return FG_TILE_MASKED;
    if (j0 + bk > Nk) return FG_TILE_PARTIAL; /* padding columns */
    /* the first row sees the fewest keys: if it sees the last key, every row does */
    return fg_attn_row_end(i0, Nq, Nk, causal) >= j0 + bk ? FG_TILE_FULL : FG_TILE_PARTIAL;
}

#ifdef __cplusplus
}
#endif
#endif /* FG_ATTN_TILES_H */
