/* attention_kernels.h — the attention family's private header: what lies below fg_attention
 * (ops/attention.h), for the family's own code (ops/attention*.c, ops/cpu/attention*.c), the
 * devices' kernels (ops/kernels.h's attention member, cuda/attention.cu) and tests.
 *
 *   fg_attn_problem           the resolved options and sizes every kernel takes, with the arrays'
 *                             rows (fg_attn_layout) and packed documents (fg_attn_varlen)
 *   fg_attn_call_*            the one entry below fg_attention, where every check is made
 *                             (ops/attention_entry.c); the device's kernel table below it
 *   fg_attn_{naive,flash}_*   the CPU kernels on raw contiguous pointers, float32 and float64,
 *                             checked, then the CPU table (ops/attention_entry.c): in the tests the
 *                             reference the CUDA kernels (cuda/attention.cu) are checked against
 *   fg_attn_varlen_*          packed variable-length sequences, checked, then the CPU table
 *   fg_attn_check_caps        what a device's kernels implement, checked once (FG_ATTN_CAP_*)
 *   fg_attn_tile_kind         a tile's kind under causal, window and block mask (ops/cpu/attention.c)
 *   fg_attn_online_update_*   the online-softmax step of one query row over one block of keys
 *                             (ops/cpu/flash_tiles_body.h, with flash's other tile operations)
 *   fg_attn_dropout_scale_*   dropout on a row segment of weights (ops/cpu/attention_variant_body.h)
 *   FG_ATTN_CAP_*             what a device's kernels implement
 */
#ifndef FG_ATTENTION_KERNELS_H
#define FG_ATTENTION_KERNELS_H

#include <stdint.h>

#include "ops/attention_types.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the resolved problem, and the raw-pointer kernels (CPU) ----
 * Unless the problem's rows or varlen say otherwise, every array is contiguous, row-major, of the
 * kernel's dtype:
 *   q (B, H, Nq, d); k, v (B, H_kv, Nk, d); o, dout, dq (B, H, Nq, d); dk, dv (B, H_kv, Nk, d);
 *   lse (B, H, Nq); p (B, H, Nq, Nk) — naive only.
 * Backward kernels ADD into dq, dk, dv; any of the three may be NULL (not wanted).
 * Scratch comes from fg_alloc once per call: naive takes O(Nq·Nk) per (b, h) (two more Nq×Nk in
 * the backward with softcap or score_mod, which recomputes ∂S/∂S1), flash O(block_q·block_k + Nq)
 * (one more tile in the backward with softcap or score_mod). They return FG_OK, or FG_ERR_OOM when
 * scratch cannot be had. Under GQA several query heads add into the same dk, dv rows: flash's
 * backward therefore takes one (b, K/V head) — all its query heads — per work item. */
/* Where each array's rows are (FlashAttention's *_batch_stride, *_head_stride, *_row_stride):
 * element (b, h, t, c) of an array at base[b·rows.b + h·rows.h + t·rows.t + c], the d elements of
 * a row contiguous (h: the query head for q, o, dout, dq; the K/V head for k, v, dk, dv). lse and
 * lse_lo stay (B, H, Nq). fg_attention_qkv runs GPT-2's packed projection this way, its heads read
 * and written in place: q, k, v and dq, dk, dv are column groups of (B, T, (H + 2 H_kv) d) rows,
 * o and dout (B, T, H d) rows.
 *   write_grads  backward: dq, dk, dv are written (what they held is never read), else added into */
typedef struct {
    int64_t b, h, t;
} fg_attn_rows;
typedef struct {
    fg_attn_rows q, k, v, o, dout, dq, dk, dv;
    int write_grads;
} fg_attn_layout;

/* Packed variable-length sequences, flash_attn's varlen layout (its cu_seqlens): nseq documents
 * packed along one token axis,
 *   q, o, dout, dq (Tq, H, d); k, v, dk, dv (Tk, H_kv, d); lse, lse_lo (H, Tq)
 * with document s holding queries [cu_q[s], cu_q[s+1]) and keys [cu_k[s], cu_k[s+1]) (cu_q[0] =
 * cu_k[0] = 0, nondecreasing, cu_q[nseq] = Tq, cu_k[nseq] = Tk). Each document is its own attention
 * problem of the problem's options with Nq_s and Nk_s (causal, window and ALiBi aligned per
 * document), so no query sees another document's keys; the problem's B, Nq and Nk are not read.
 * slopes, when not NULL, are per-document ALiBi slopes (nseq, H) that replace the problem's.
 * Dropout of document s uses seed pr->seed + s·0x9E3779B97F4A7C15 (as batch 0). */
typedef struct {
    const int64_t *cu_q, *cu_k;
    int64_t nseq, Tq, Tk;
    const double *slopes;
} fg_attn_varlen;

typedef struct {
    int64_t B, H, Nq, Nk, d;
    double scale; /* resolved (never 0) */
    int causal;
    double dropout_p;
    uint64_t seed;
    int block_q, block_k; /* resolved (>= 1) */
    fg_attn_variant var;  /* resolved: var.n_kv_heads >= 1 divides H */
    fg_attn_custom custom;
    /* the arrays' rows; all zero (as fg_attn_problem_init leaves it): the contiguous layouts above.
     * Flash only, on a device whose caps list FG_ATTN_CAP_ROWS. */
    fg_attn_layout rows;
    /* NULL, or packed documents in place of B batches of Nq and Nk (flash only, on a device whose
     * caps list FG_ATTN_CAP_VARLEN); checked by the entry (fg_attn_call_varlen_*) before a kernel
     * sees it */
    const fg_attn_varlen *varlen;
} fg_attn_problem;

/* Validates the sizes and options and fills *pr, resolving the defaults (scale 0, blocks 0 — to the
 * block mask's when there is one —, n_kv_heads 0 = H). FG_ERR_ARG / FG_ERR_SHAPE with a message on
 * bad values (the list of fg_attention). k and v of the kernels below are (B, H_kv, Nk, d). */
fg_status fg_attn_problem_init(fg_attn_problem *pr, int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t d,
                               const fg_attn_opts *opts);
/* Do the resolved problem's options fit dtype dt (FG_F32 or FG_F64, or FG_BF16, whose kernels
 * compute scores in float32 and take float32's limits), in which the kernels compute?
 * With T_MAX and T_MIN dt's largest and smallest normal numbers: |scale| <= T_MAX; softcap 0 or in
 * [T_MIN, T_MAX] (the kernels use c and 1/c); every ALiBi bias slope_h · |i' − j| <= T_MAX, i.e.
 * |slope_h| · (max(Nq, Nk) − 1) <= T_MAX. FG_ERR_ARG naming the option, its value and the range
 * otherwise (a dropout p < 1 and the window's integers always fit). The entry below calls it
 * before any kernel runs (fg_attn_call_begin, and the checked raw entries that follow); the
 * kernels themselves never do. */
fg_status fg_attn_problem_check_dtype(const fg_attn_problem *pr, fg_dtype dt);

/* ---- the raw CPU kernels, checked ----
 * Each of these checks pr against its dtype (fg_attn_problem_check_dtype) and then runs the CPU
 * table's entry (ops/kernels.h) on contiguous arrays: what a caller holding a resolved problem and
 * raw host arrays uses (the tests, as the reference the CUDA kernels are checked against). They
 * live with the entry (ops/attention_entry.c), not in the kernels.
 * naive forward: o and lse out; p, if not NULL, receives the softmax P (before dropout), saved for
 * the backward. With p NULL the kernel uses one Nq×Nk scratch for all (b, h). */
fg_status fg_attn_naive_forward_f32(float *o, float *lse, float *p, const float *q, const float *k, const float *v,
                                    const fg_attn_problem *pr);
fg_status fg_attn_naive_forward_f64(double *o, double *lse, double *p, const double *q, const double *k,
                                    const double *v, const fg_attn_problem *pr);
/* naive backward from the saved P. */
fg_status fg_attn_naive_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                     const float *v, const float *p, const fg_attn_problem *pr);
fg_status fg_attn_naive_backward_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                     const double *k, const double *v, const double *p, const fg_attn_problem *pr);

/* flash forward: o and lse out (lse is what the backward needs; it is not optional). */
fg_status fg_attn_flash_forward_f32(float *o, float *lse, const float *q, const float *k, const float *v,
                                    const fg_attn_problem *pr);
fg_status fg_attn_flash_forward_f64(double *o, double *lse, const double *q, const double *k, const double *v,
                                    const fg_attn_problem *pr);
/* flash backward: recomputes P tile by tile from q, k and lse; o is the forward's output. */
fg_status fg_attn_flash_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                     const float *v, const float *o, const float *lse, const fg_attn_problem *pr);
fg_status fg_attn_flash_backward_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                     const double *k, const double *v, const double *o, const double *lse,
                                     const fg_attn_problem *pr);
/* The same with lse_lo (B, H, Nq), the part of L = m + log l that rounding L to the dtype lost
 * (L ≈ lse + lse_lo); NULL in either call means "none" (the forms above pass NULL). In float32 with
 * large scores (|L| ~ 100 and up) one ulp of L is a relative error of ~|L|·6e-8 in every recomputed
 * weight P = exp(S − L); with lse_lo the backward computes exp((S − lse) − lse_lo), exact to float32
 * near the row max, as precise as the naive kernel's stored P. fg_attention uses these for float32
 * (B·H·Nq more floats saved, O(N)). */
fg_status fg_attn_flash_forward_lo_f32(float *o, float *lse, float *lse_lo, const float *q, const float *k,
                                       const float *v, const fg_attn_problem *pr);
fg_status fg_attn_flash_forward_lo_f64(double *o, double *lse, double *lse_lo, const double *q, const double *k,
                                       const double *v, const fg_attn_problem *pr);
fg_status fg_attn_flash_backward_lo_f32(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                        const float *k, const float *v, const float *o, const float *lse,
                                        const float *lse_lo, const fg_attn_problem *pr);
fg_status fg_attn_flash_backward_lo_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                        const double *k, const double *v, const double *o, const double *lse,
                                        const double *lse_lo, const fg_attn_problem *pr);

/* The contiguous layouts of the kernels above as explicit rows (fg_attn_layout), for pr's sizes;
 * write_grads 0. What a kernel reads when pr->rows is all zero. */
fg_attn_layout fg_attn_layout_contiguous(const fg_attn_problem *pr);

/* ---- the one entry below fg_attention ----
 * fg_attention and fg_attention_qkv run through these, as does any caller holding raw arrays
 * instead of tensors (the Python package's shim, python/csrc/fgpy.c): nothing else calls a
 * device's attention kernels for the op, and every path — contiguous, fg_attention_qkv's packed
 * rows (pr.rows), varlen documents (pr.varlen) — goes through the device's kernel table. The
 * checks live here (ops/attention_entry.c), before any kernel runs; a kernel checks only its own
 * limits (the sizes a CUDA grid holds, say) and never calls back up.
 *   begin     resolves and checks the options for these sizes and dtype (fg_attn_problem_init,
 *             fg_attn_problem_check_dtype), finds the device's kernels and checks their caps, and
 *             for flash with a mask callback but no block mask builds one for this call (with
 *             bm_broadcast bit 1: the mask does not depend on b; bit 2: nor on h — it is then
 *             summarized once for all of them); on error nothing is left to release
 *   forward   the device's forward kernel on q, k, v (contiguous, or where c->pr.rows says, which a
 *             caller may set after begin: flash only, FG_ERR_DEVICE where the caps lack
 *             FG_ATTN_CAP_ROWS; aux as in the kernel table: naive's P or NULL, flash's lse_lo or
 *             NULL), then on the CPU the overflow check (FG_ERR_NUMERIC, see fg_attention)
 *   backward  the device's backward kernel; for naive with aux NULL, P is first recomputed (by the
 *             forward kernel, into scratch)
 *   varlen    the flash kernels on packed variable-length documents: checks the offsets (and, per
 *             document, the dtype fit of its slopes), then runs the device's table with pr.varlen
 *             set (FG_ERR_DEVICE where the caps lack FG_ATTN_CAP_VARLEN); see fg_attn_varlen
 *   end       releases what begin built (the block mask); the call's problem must not be used after
 * A call may be copied or rebuilt from its fields (fg_attention's node keeps the problem and
 * rebuilds the call for the backward) as long as whoever holds the copy keeps its own reference to
 * pr.custom.block_mask and its own ALiBi slopes. */
typedef struct {
    fg_attn_problem pr; /* resolved; pr.custom.block_mask is own_bm when begin built one */
    fg_attn_impl impl;
    fg_dtype dt;
    fg_device dev;
    fg_attn_block_mask *own_bm;
} fg_attn_call;

fg_status fg_attn_call_begin(fg_attn_call *c, const fg_attn_opts *opts, int64_t B, int64_t H, int64_t Nq, int64_t Nk,
                             int64_t d, fg_dtype dt, fg_device dev, unsigned bm_broadcast);
fg_status fg_attn_call_forward(const fg_attn_call *c, void *o, void *lse, void *aux, const void *q, const void *k,
                               const void *v);
fg_status fg_attn_call_backward(const fg_attn_call *c, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                const void *k, const void *v, const void *o, const void *lse, const void *aux);
fg_status fg_attn_call_varlen_forward(const fg_attn_call *c, void *o, void *lse, void *lse_lo, const void *q,
                                      const void *k, const void *v, const int64_t *cu_q, const int64_t *cu_k,
                                      int64_t nseq, int64_t Tq, int64_t Tk, const double *slopes);
fg_status fg_attn_call_varlen_backward(const fg_attn_call *c, void *dq, void *dk, void *dv, const void *dout,
                                       const void *q, const void *k, const void *v, const void *o, const void *lse,
                                       const void *lse_lo, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq,
                                       int64_t Tq, int64_t Tk, const double *slopes);
void fg_attn_call_end(fg_attn_call *c);

/* ---- packed variable-length sequences, checked (ops/attention_entry.c) ----
 * The CPU's flash kernels on the documents of fg_attn_varlen (above) for a resolved problem pr
 * (pr->B, Nq and Nk are not read: they only sized pr's checks); the same checks as
 * fg_attn_call_varlen_*, then the CPU table. The flash kernels only, no user callbacks
 * (FG_ERR_ARG). The CPU runs each document on a copy gathered into the kernels' (1, H, N, d) layout
 * in scratch sized for the longest, and scattered back (ops/cpu/attention_varlen.c). The backward
 * ADDS into dq, dk, dv (any NULL). FG_ERR_ARG for offsets that do not fit, FG_ERR_OOM for scratch.
 * lse_lo may be NULL. */
fg_status fg_attn_varlen_forward(fg_dtype dt, void *o, void *lse, void *lse_lo, const void *q, const void *k,
                                 const void *v, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq, int64_t Tq,
                                 int64_t Tk, const double *slopes, const fg_attn_problem *pr);
fg_status fg_attn_varlen_backward(fg_dtype dt, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                  const void *k, const void *v, const void *o, const void *lse, const void *lse_lo,
                                  const int64_t *cu_q, const int64_t *cu_k, int64_t nseq, int64_t Tq, int64_t Tk,
                                  const double *slopes, const fg_attn_problem *pr);

/* ---- variants on a tile (ops/cpu/attention_variant_body.h) ---- */
/* 1 when steps 2–4 change any score (softcap, ALiBi or score_mod); 0 for the plain path. */
int fg_attn_modifies_scores(const fg_attn_problem *pr);
/* 1 when ∂s_final/∂s_1 is not identically 1 (softcap or score_mod): the backward needs G. */
int fg_attn_needs_score_grad(const fg_attn_problem *pr);

/* The kind of the tile rows [i0, i0 + nq) × keys [j0, j0 + nk) of (b, h) under causal ∧ window ∧
 * mask, and which parts need per-element tests (*window_partial, *mask_partial; either may be NULL).
 * With a mask but no block mask, the mask part counts as PARTIAL (flash then tests every element);
 * with a block mask, (i0, j0) must be the start of one of its tiles. */
fg_tile_kind fg_attn_tile_kind(const fg_attn_problem *pr, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0,
                               int64_t nk, int *window_partial, int *mask_partial);

/* ---- block masks, as the kernels read them ---- */
/* The kind of tile (qt, kt) of (b, h) (b, h taken modulo a broadcast dimension). */
fg_tile_kind fg_attn_block_mask_kind(const fg_attn_block_mask *bm, int64_t b, int64_t h, int64_t qt, int64_t kt);
/* The sizes the block mask was built for (any pointer may be NULL). */
void fg_attn_block_mask_dims(const fg_attn_block_mask *bm, int64_t *B, int64_t *H, int64_t *Nq, int64_t *Nk,
                             int *block_q, int *block_k);

/* ---- the online-softmax step ----
 * One query row meets one block of n scores s (masked scores are -inf). With m the running max
 * and l the running sum of exp(score − m) over the blocks before:
 *     m' = max(m, max_j s_j)
 *     s_j <- exp(s_j − m')                 (0 for a masked score; all 0 while m' is still -inf)
 *     l' = exp(m − m') · l + Σ_j s_j
 * and returns the rescale factor exp(m − m') (1 while m' is -inf) that the caller applies to its
 * output accumulator before adding this block's Σ_j s_j·v_j. Start a row with m = -inf, l = 0.
 * A NaN score (the max passes over it) gives s_j = NaN and so l = NaN from then on, also while
 * m' is -inf: the caller reads l NaN as a NaN row, l = 0 as a row that saw no key.
 * The flash forward's portable tile operations (ops/cpu/flash_tiles.h) are exactly these
 * functions, so a test can trace m and l block by block; the float32 vector ones take the same step
 * down the columns of a transposed tile. */
float fg_attn_online_update_f32(float *m, float *l, float *s, int64_t n);
double fg_attn_online_update_f64(double *m, double *l, double *s, int64_t n);

/* ---- dropout ----
 * x[j] *= Z(b, h, i, j0 + j) for j in [0, n): Z = inv_keep where
 * fg_attn_keep(seed, threshold, b, h, i, j0 + j), else 0. One Philox call serves four keys; the
 * result equals fg_attn_keep element by element. threshold = fg_dropout_threshold(p) (0: no-op). */
void fg_attn_dropout_scale_f32(float *x, int64_t n, uint64_t seed, uint32_t threshold, float inv_keep, int64_t b,
                               int64_t h, int64_t i, int64_t j0);
void fg_attn_dropout_scale_f64(double *x, int64_t n, uint64_t seed, uint32_t threshold, double inv_keep, int64_t b,
                               int64_t h, int64_t i, int64_t j0);

/* ---- devices ----
 * fg_attention reaches a device's kernels through its kernel table (ops/kernels.h, the `attention`
 * member): the CPU's are the kernels above, a non-CPU device's take device pointers under the same
 * contract. `caps` there lists the built-in variants a device's kernels implement; fg_attention
 * refuses the others on that device (FG_ERR_DEVICE), and always refuses user callbacks off the
 * CPU. fg_attn_check_caps is that check, written once: the entry runs it before every kernel call,
 * and a device's launchers that must answer a direct caller run the same function. */
enum {
    FG_ATTN_CAP_GQA = 1,    /* var.n_kv_heads != H */
    FG_ATTN_CAP_WINDOW = 2, /* var.window */
    FG_ATTN_CAP_ALIBI = 4,  /* var.alibi */
    FG_ATTN_CAP_SOFTCAP = 8 /* var.softcap > 0 */
};
#define FG_ATTN_CAP_ALL (FG_ATTN_CAP_GQA | FG_ATTN_CAP_WINDOW | FG_ATTN_CAP_ALIBI | FG_ATTN_CAP_SOFTCAP)
/* causal = FG_ATTN_CAUSAL_TOP_LEFT with Nq != Nk (with Nq = Nk both alignments are the same mask).
 * Not in FG_ATTN_CAP_ALL: a device lists it only once its kernels are tested with it. */
#define FG_ATTN_CAP_CAUSAL_TOP_LEFT 16
/* In a table's caps_bf16 (ops/kernels.h): the device's kernels take bfloat16 q, k, v at all (the
 * flash ones; float32 lse; o, dq, dk, dv bfloat16). The other bits of caps_bf16 say which variants
 * they implement for bfloat16, as caps does for float32 and float64. */
#define FG_ATTN_CAP_BF16 32
/* What cuda/attention_bf16.h's kernels implement: no softcap, no ALiBi (nor user callbacks). */
#define FG_ATTN_CAPS_BF16_CUDA (FG_ATTN_CAP_BF16 | FG_ATTN_CAP_GQA | FG_ATTN_CAP_WINDOW | FG_ATTN_CAP_CAUSAL_TOP_LEFT)
/* In a table's `layouts` (ops/kernels.h), the layouts beyond contiguous arrays its float32 and
 * float64 kernels take: arrays on the problem's rows (pr->rows not all zero; flash only), and
 * packed variable-length documents (pr->varlen). */
#define FG_ATTN_CAP_ROWS 64
#define FG_ATTN_CAP_VARLEN 128
/* FG_OK when the kernels of a device with caps `caps` (its caps_bf16 for dt FG_BF16; for float32
 * and float64 its caps with its layouts ORed in) implement what resolved problem pr asks for with impl and dt on device dev; else FG_ERR_DEVICE naming what
 * they lack ("attention on DEV: this build's kernels do not support ..."), or the error of a dtype
 * or impl the device does not take (bfloat16: flash only). User callbacks are refused off the CPU
 * whatever the caps. */
fg_status fg_attn_check_caps(const fg_attn_problem *pr, fg_attn_impl impl, fg_dtype dt, fg_device dev, unsigned caps);

#ifdef __cplusplus
}
#endif
#endif /* FG_ATTENTION_KERNELS_H */
