/* attention_types.h — the plain types of attention's options: the implementation, the user
 * variants' callbacks and the options struct with its defaults (fg_attn_defaults, defined with the
 * op in ops/attention.c). What the public header (ops/attention.h, which includes this one and
 * explains the semantics they select) and the private one the kernels see
 * (ops/attention_kernels.h) share: no tensors, no autograd, so a kernel's includes reach nothing
 * above ops/.
 */
#ifndef FG_ATTENTION_TYPES_H
#define FG_ATTENTION_TYPES_H

#include <stdint.h>

#include "ops/shared/attn_dropout.h"
#include "ops/shared/attn_variant.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FG_ATTN_NAIVE = 0, FG_ATTN_FLASH = 1, FG_ATTN_IMPL_COUNT } fg_attn_impl;

/* "naive" / "flash" */
const char *fg_attn_impl_name(fg_attn_impl impl);

/* Default flash tiles on the CPU: a 64×64 score tile is 16 KiB in float32 (32 KiB in float64);
 * with the Q, K and V tiles (64×d each) it stays in a core's L2 for every d up to 256. */
#define FG_ATTN_DEFAULT_BLOCK_Q 64
#define FG_ATTN_DEFAULT_BLOCK_K 64
/* Largest block size accepted (a tile is block_q × block_k elements). */
#define FG_ATTN_MAX_BLOCK 65536

/* ---- user-defined variants (CPU only) ----
 * score_mod: the new score from the score s after steps 1–3 (ops/attention.h, at the top), for batch b, query head
 *            h, query i, key j. Must be finite or −inf (−inf masks the element).
 * score_mod_grad: ∂score_mod/∂s at the same arguments (required with score_mod).
 * mask:      nonzero when query i may see key j (ANDed with causal and window). */
typedef double (*fg_attn_score_mod_fn)(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *user);
typedef int (*fg_attn_mask_fn)(int64_t b, int64_t h, int64_t i, int64_t j, void *user);


/* A mask callback summarized per flash tile: for each (b, h, query tile, key tile) whether no
 * element, some or every element is visible (fg_tile_kind). Flash skips MASKED tiles, and calls
 * the mask per element only in PARTIAL ones. Opaque, reference-counted. */
typedef struct fg_attn_block_mask fg_attn_block_mask;

typedef struct {
    fg_attn_score_mod_fn score_mod;      /* NULL: none */
    fg_attn_score_mod_fn score_mod_grad; /* with score_mod */
    fg_attn_mask_fn mask;                /* NULL: every key (that causal and window allow) */
    void *user;                          /* passed to the three callbacks */
    /* optional, flash only: fg_attn_block_mask_create(mask, user, ...) for these sizes and
     * blocks. Without one, fg_attention builds one per call (B·H·Nq·Nk mask calls); build it once
     * and pass it to reuse it across calls and layers. */
    const fg_attn_block_mask *block_mask;
} fg_attn_custom;

/* fg_attn_opts.causal: 0 none; FG_ATTN_CAUSAL_BOTTOM_RIGHT (or any other nonzero value) query i
 * sees keys j <= i + Nk − Nq, FlashAttention's alignment; FG_ATTN_CAUSAL_TOP_LEFT j <= i, the
 * alignment of torch's scaled_dot_product_attention(is_causal=True). They differ only when Nq != Nk.
 * A sliding window and ALiBi stay bottom-right aligned under either. */
#define FG_ATTN_CAUSAL_BOTTOM_RIGHT 1
#define FG_ATTN_CAUSAL_TOP_LEFT 2

typedef struct {
    fg_attn_impl impl;
    double scale;            /* 0 means 1/sqrt(d) */
    int causal;              /* 0, FG_ATTN_CAUSAL_BOTTOM_RIGHT or FG_ATTN_CAUSAL_TOP_LEFT */
    double dropout_p;        /* 0 <= p < 1 */
    uint64_t seed;           /* dropout seed */
    int block_q, block_k;    /* flash tile sizes; 0 means the default (or the block mask's) */
    fg_attn_variant variant; /* built-in variants; all zero = none. n_kv_heads 0: from K's shape */
    fg_attn_custom custom;   /* user variants; all zero = none */
} fg_attn_opts;

/* Default options: flash, scale 1/sqrt(d), no mask, no dropout, default blocks, no variant. */
fg_attn_opts fg_attn_defaults(void);

#ifdef __cplusplus
}
#endif
#endif /* FG_ATTENTION_TYPES_H */
