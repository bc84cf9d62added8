/* attention.h — scaled dot-product attention, naive and flash, with autograd, and its variants.
 *
 *   O = softmax(mask(mod(Q·Kᵀ·scale))) · V        for each batch b and head h
 *
 * Q is (B, H, Nq, d), K and V are (B, H_kv, Nk, d), O is (B, H, Nq, d); row-major, float32 or
 * float64. H_kv divides H (H_kv = H: multi-head; 1 < H_kv < H: grouped-query; H_kv = 1:
 * multi-query). lse, the per-row logsumexp of the final (modified, masked) scores, is (B, H, Nq).
 *
 * naive: materializes S and P = softmax(S) per (b, h) and saves P for the backward.
 * flash: tiles Q into block_q rows and K, V into block_k rows with an online softmax (running max
 *        m, running sum l); saves only O and L = m + log l; the backward recomputes S and
 *        P = exp(S − L) tile by tile. Nothing of size Nq×Nk is ever allocated. Tiles that no
 *        element of is visible (causal, window, block mask) are skipped.
 *
 * ---- the score of (b, h, i, j), exactly; naive and flash, CPU and any device follow this ----
 * With off = Nk − Nq and i' = i + off (query i in key coordinates, bottom-right alignment):
 *   1. s = scale · Σ_c q[b, h, i, c] · k[b, h / G, j, c]        G = H / H_kv (GQA: K/V head h / G)
 *   2. softcap c > 0:  s = c · tanh(s / c)                        (FlashAttention's order: on the
 *                                                                 scaled score, before bias/mask)
 *   3. ALiBi:          s = s − slope_h · |i' − j|                 slope_h: user's alibi_slopes[h] or
 *                                                                 fg_attn_alibi_slope(h, H)
 *   4. score_mod:      s = score_mod(s, b, h, i, j, user)         user callback, CPU only
 *   5. visible(i, j) = (!causal or j <= i')                     (top-left causal: j <= i)
 *                    ∧ (!window or ((L < 0 or j >= i' − L) ∧ (R < 0 or j <= i' + R)))
 *                    ∧ (!mask or mask(b, h, i, j, user))          user callback, CPU only
 *      s = −inf where not visible.
 *   6. P = softmax_j(s); lse_i = logsumexp_j(s); dropout on P; O = P · V (V head h / G).
 * Notes:
 *   - b, h, i, j given to callbacks are raw indices: 0 <= i < Nq, 0 <= j < Nk, h a query head.
 *     Callbacks are called only where steps 1–5 left the score visible, in no fixed order and
 *     possibly more than once per element (the backward recomputes).
 *   - ALiBi's bias is −slope·|i' − j| with and without the causal mask. FlashAttention adds
 *     +slope·j under its causal mask instead; that differs by slope·i' per row, which the softmax
 *     cancels: O and every gradient are the same, only lse differs (ours is lower by slope·i').
 *   - The backward chains through steps 2–4: dS_1 = dS_4 · score_mod'(s_3) · (1 − tanh²(s_1 / c));
 *     ALiBi's derivative is 1. score_mod_grad must return ∂score_mod/∂s at the given s.
 *   - A row that sees no key (or whose visible scores are all −inf) outputs zeros, has lse = −inf,
 *     and gets zero gradients, with every variant.
 *   - A row whose visible scores include a NaN (a NaN in q_i, or in a key k_j the row sees; or a
 *     +inf score, as inf − inf) has O_i and lse_i NaN, in naive and flash alike: NaN is never read
 *     as "no key". Rows that do not see it are unaffected in the forward. (The backward's products
 *     take 0 · NaN = NaN where a masked weight meets a NaN input, so its gradients spread further.)
 *   - Softcap with a large c: where |s / c| is so small that c · tanh(s / c) rounds to s, the
 *     score is s exactly (so a softcap of 1e38 in float32 changes nothing).
 *   - Dropout p drops P's element (b, h, i, j) — h the query head — iff
 *     !fg_attn_keep(seed, threshold, b, h, i, j) (ops/shared/attn_dropout.h) and scales kept ones by
 *     1/(1−p); the mask is regenerated, never stored. It combines with every variant.
 *   - Under GQA, dK and dV of K/V head g are the sums over the query heads h with h / G == g.
 * The built-in variants (GQA, window, ALiBi, softcap) live in fg_attn_variant
 * (ops/shared/attn_variant.h), a plain struct with pure helper functions that device code can share.
 * User variants (score_mod, mask, block mask) live in fg_attn_custom and run on the CPU only.
 * The CPU kernels apply steps 2–5 to a tile of scores with one function (score_tile,
 * ops/cpu/attention_variant_body.h) that both call, so a variant's semantics are written once.
 *
 * This header is the family's public face: the ops fg_attention and fg_attention_qkv, block
 * masks, named variants and the gradient check; the options' plain types are in
 * ops/attention_types.h (included here). Everything below the op — the resolved problem, the one
 * internal entry fg_attn_call_* that every call runs through, and the raw kernels — is in
 * ops/attention_kernels.h, for the family's code and the devices' kernels.
 *   ops/attention.c          fg_attention and fg_attention_qkv: the tensors' checks, the node
 *   ops/attention_entry.c    the entry below them, where the problem is checked, once
 *   ops/attention_variant.c  block masks, tensor masks, the registry of named variants
 *   ops/attention_check.c    fg_attn_gradcheck
 *   ops/cpu/attention*.c     the CPU kernels (naive, flash, the variants on a tile, varlen)
 *   cuda/attention.cu        the CUDA kernels
 */
#ifndef FG_ATTENTION_H
#define FG_ATTENTION_H

#include <stdint.h>

#include "autograd/autograd.h"
#include "ops/shared/attn_dropout.h"
#include "ops/shared/attn_variant.h"
#include "ops/attention_types.h" /* fg_attn_impl, fg_attn_custom, fg_attn_opts and their limits */
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A mask held in memory, as torch's scaled_dot_product_attention takes it: element (b, h, i, j) at
 * data + b·stride[0] + h·stride[1] + i·stride[2] + j·stride[3] (strides in elements; a stride 0
 * broadcasts that dimension, so a (Nq, Nk) mask serves every batch and head without a copy).
 *   FG_ATTN_TMASK_BOOL  uint8, nonzero = the query may see the key (ANDed with causal and window)
 *   FG_ATTN_TMASK_F32   float additive bias: s = s + bias after step 3 (as a score_mod with
 *   FG_ATTN_TMASK_F64   derivative 1); a bias of −inf masks the element (and makes its tile
 *                       skippable). The bias gets no gradient. */
enum { FG_ATTN_TMASK_BOOL = 1, FG_ATTN_TMASK_F32 = 2, FG_ATTN_TMASK_F64 = 3 };
typedef struct {
    const void *data;
    int kind;
    int64_t stride[4];
} fg_attn_tensor_mask;

/* The user variant that applies tensor mask *m (ops/attention_variant.c): a mask callback reading it
 * and, for a float bias, a score_mod adding it. *m (and its data) must outlive every use of the
 * returned struct, the backward included; the struct points to it. Build a block mask from it
 * (fg_attn_block_mask_create with its mask and user, B = 1 where stride[0] is 0, H = 1 where
 * stride[1] is 0) to skip the tiles it masks entirely. Zero struct for an unknown kind. */
fg_attn_custom fg_attn_tensor_mask_custom(const fg_attn_tensor_mask *m);

/* 1 when opts asks for any built-in or user variant (anything beyond causal and dropout). */
int fg_attn_has_variant(const fg_attn_opts *opts);

/* O (new reference). If lse_out is not NULL, *lse_out receives the logsumexp (new reference; it
 * carries no gradient). Records an autograd node when Q, K or V requires grad (and grad mode is
 * on); its backward adds dQ, dK, dV into their gradient buffers. Inputs may be non-contiguous
 * views (they are made contiguous first). H_kv is K's head count (opts->variant.n_kv_heads, when
 * not 0, must equal it). The node keeps copies of the ALiBi slopes and a reference to the block
 * mask; the custom callbacks' `user` data must stay valid until the backward has run.
 * NULL on error: Q/K/V not rank 4; B or d that differ; K and V heads or Nk that differ; H not a
 * multiple of K's heads; dtypes or devices that differ; p outside [0, 1); a scale that is not
 * finite; a block size outside [0, FG_ATTN_MAX_BLOCK]; a softcap < 0 or not finite; non-finite
 * ALiBi slopes; options that do not fit the dtype (fg_attn_problem_check_dtype: e.g. softcap 1e39
 * with float32); score_mod without score_mod_grad (or the reverse); a block mask without a mask or
 * for other sizes or blocks; user callbacks or unsupported variants on a non-CPU device. On the CPU
 * also FG_ERR_NUMERIC when q, k and v are finite but the scores overflow the dtype (|scale · q·k|
 * above its range: a row's lse would be NaN, or −inf though it sees keys). A NaN or infinite input
 * is no error: it makes NaN rows (see the notes at the top).
 * bfloat16 q, k, v (FG_BF16) run on a device whose kernel table lists them (CUDA: the flash
 * kernels, docs/gpu.md "bfloat16 tensors"): O and the gradients are bfloat16, lse float32; on the
 * CPU FG_ERR_DTYPE (bf16 compute needs --device cuda), and the variants those kernels lack
 * (softcap, ALiBi, callbacks; impl naive) are refused by name. */
fg_tensor *fg_attention(fg_tensor *q, fg_tensor *k, fg_tensor *v, const fg_attn_opts *opts, fg_tensor **lse_out);

/* Attention on a packed projection, as a GPT's c_attn makes it: qkv is (B, T, (H + 2·H_kv)·d),
 * each row [q heads 0..H-1 | k heads 0..H_kv-1 | v heads 0..H_kv-1] (H = n_head; H_kv =
 * opts->variant.n_kv_heads, 0 = H); returns y (B, T, H·d), each row the heads' outputs side by
 * side (new reference). Self-attention: Nq = Nk = T. Equal, bit for bit, to slicing q, k, v out of
 * qkv, permuting each to (B, heads, T, d), fg_attention, and permuting and reshaping its output
 * back — on the CPU without those views: flash reads and writes the packed rows in place (the
 * problem's row strides, through the same entry and kernel table as fg_attention), naive gathers
 * the heads into its layout once and scatters them back once, and the backward adds dQ, dK, dV
 * straight into qkv's gradient. The node
 * saves what fg_attention's does. NULL on error: qkv not rank 3 or not float; a last dim that does
 * not split into H + 2·H_kv heads of one width, H not a multiple of H_kv; and fg_attention's. */
fg_tensor *fg_attention_qkv(fg_tensor *qkv, int64_t n_head, const fg_attn_opts *opts);

/* FG_OK when fg_attention would accept these sizes and options for inputs of dtype dt (FG_F32 or
 * FG_F64): the checks of its list above that need no tensors (fg_attn_problem_init and
 * fg_attn_problem_check_dtype, ops/attention_kernels.h); else their error status and message.
 * K's heads are opts->variant.n_kv_heads (0 = H). */
fg_status fg_attn_check_opts(const fg_attn_opts *opts, int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t d,
                             fg_dtype dt);

/* ---- block masks ----
 * Evaluates mask(b, h, i, j, user) for every b < B, h < H, i < Nq, j < Nk once, and records per
 * (b, h, tile) whether it is MASKED, PARTIAL or FULL, for tiles of block_q × block_k (0 = the
 * defaults). B = 1 or H = 1 broadcasts: the mask must then not depend on b (h), and is evaluated
 * with b = 0 (h = 0). New reference (release with fg_attn_block_mask_release); NULL on error. */
fg_attn_block_mask *fg_attn_block_mask_create(fg_attn_mask_fn mask, void *user, int64_t B, int64_t H, int64_t Nq,
                                              int64_t Nk, int block_q, int block_k);
fg_attn_block_mask *fg_attn_block_mask_retain(const fg_attn_block_mask *bm); /* returns bm */
void fg_attn_block_mask_release(const fg_attn_block_mask *bm);               /* NULL is fine */
/* How many tiles (over all stored b, h) are of the given kind. */
int64_t fg_attn_block_mask_count(const fg_attn_block_mask *bm, fg_tile_kind kind);
/* ---- named variants ----
 * A registry of user variants by name, so that a program can hand its own variant to the
 * `flashgrad gradcheck attention --custom NAME` and `flashgrad attention --custom NAME` commands
 * (fg_cmd_gradcheck, fg_cmd_attention). The library registers two examples: "softcap-cb" (softcap 5
 * written as a score_mod) and "doc-mask" (documents of 5 tokens: i / 5 == j / 5, with causal it is
 * per-document causal attention). Registering a taken name replaces it. *c is copied; its `user`
 * data must outlive its use. FG_ERR_ARG for a NULL or empty name, FG_ERR_OOM when the table (32
 * entries) is full. Not thread-safe: register at start-up. */
fg_status fg_attn_register_custom(const char *name, const char *help, const fg_attn_custom *c);
/* The registered variant of that name, or NULL. */
const fg_attn_custom *fg_attn_find_custom(const char *name);
/* The i-th registered name and its help line (NULL past the end), for listings. */
const char *fg_attn_custom_name(int i, const char **help);

/* ---- gradient-checking a variant (ops/attention_check.c) ----
 * fg_attn_gradcheck runs, on random normal inputs of the given sizes, the checks every variant
 * must pass:
 *   1. naive float64 against central finite differences, dQ, dK and dV one input at a time: an
 *      element passes when |analytic − numeric| <= 1e-7 + 1e-5 |numeric| (eps 1e-6);
 *   2. flash float64 against naive float64: O, dQ, dK, dV to 1e-12 relative (max|a − b| / max|b|);
 *   3. flash float32 against naive float64 on the same float32-rounded inputs, FlashAttention's
 *      rule: the flash error is at most twice the naive float32 error + 2^-20 max(1, max|ref|);
 *      where naive float32 is exact (error 0: e.g. one visible key per row, true dQ = 0), flash is
 *      held to 2^-19 · max(1, qk_std) · the largest reference value of O, dQ, dK and dV instead.
 * Check 3 is skipped (f32_skipped says why) when an option does not fit float32.
 * opts gives everything but the implementation (both are run) and K's heads come from
 * opts->variant.n_kv_heads (0 = H). Block sizes 0 become 4 and 3 so that tiles do not divide N
 * (unless opts has a block mask). */
typedef struct {
    int64_t B, H, Nq, Nk, d;
    uint64_t seed; /* inputs; the finite-difference weights use seed + 17 */
    double qk_std; /* std of Q and K entries; 0 = 1 */
} fg_attn_check_shape;

#define FG_ATTN_CHECK_MAX_ROWS 16
typedef struct {
    const char *check;  /* "naive f64 vs finite diff", "flash f64 vs naive f64", ... */
    const char *tensor; /* "O", "dQ", "dK", "dV" */
    double max_abs, max_rel;
    double limit; /* the bound max_abs (1, 3) or max_rel (2) was held to; 0 for info rows */
    int passed;   /* -1 for rows that only inform (naive f32 error) */
} fg_attn_check_row;

typedef struct {
    int passed;
    int n_rows;
    fg_attn_check_row rows[FG_ATTN_CHECK_MAX_ROWS];
    /* the worst finite-difference element, when check 1 failed */
    const char *fd_worst_tensor;
    int64_t fd_worst_index;
    double fd_analytic, fd_numeric;
    /* "" when check 3 ran; else why not: an option float32 cannot hold (fg_attn_problem_check_dtype's
     * message, e.g. softcap 1e300). Checks 1 and 2 still decide `passed`. */
    char f32_skipped[256];
} fg_attn_check_report;

/* FG_OK when the checks ran (rep->passed says whether they passed); an error status (and message)
 * when they could not run: bad sizes or options. */
fg_status fg_attn_gradcheck(const fg_attn_opts *opts, const fg_attn_check_shape *shape, fg_attn_check_report *rep);

#ifdef __cplusplus
}
#endif
#endif /* FG_ATTENTION_H */
