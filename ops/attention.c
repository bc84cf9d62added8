/* attention.c — fg_attention, the op's one shell for every device: argument checks, the autograd
 * node and its typed state, and the one entry below it (fg_attn_call_*, ops/attention_kernels.h)
 * through which every caller reaches the device's kernel table (ops/kernels.h: the CPU's are in
 * ops/cpu/attention.c).
 *
 * Legend: B batch, H heads, Nq queries, Nk keys, d head dim.
 *   q (B, H, Nq, d); k, v (B, H, Nk, d) -> o (B, H, Nq, d), lse (B, H, Nq)
 *
 *   (K and V have H_kv heads; see ops/attention.h.)
 *
 * Saved for backward (attention_state): Q, K, V (contiguous), O (an alias of the output), then
 *   flash: L = lse (B, H, Nq), and for float32 also lse_lo (B, H, Nq), the bits of L that rounding
 *          it to float32 lost (see fg_attn_flash_forward_lo_f32)
 *   naive: P = softmax(S) (B, H, Nq, Nk)
 * and the resolved problem (attn_problem_copy), with its own copy of the ALiBi slopes and a
 * reference to the block mask.
 */
#include "ops/attention_kernels.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/kernels.h"
#include "ops/ops_internal.h"
#include "ops/cpu/threadpool.h"
#include "ops/cpu/vmath.h"

const char *fg_attn_impl_name(fg_attn_impl impl) {
    switch (impl) {
    case FG_ATTN_NAIVE:
        return "naive";
    case FG_ATTN_FLASH:
        return "flash";
    default:
        return "unknown-impl";
    }
}

fg_attn_opts fg_attn_defaults(void) {
    return (fg_attn_opts){.impl = FG_ATTN_FLASH,
                          .scale = 0,
                          .causal = 0,
                          .dropout_p = 0,
                          .seed = 0,
                          .block_q = 0,
                          .block_k = 0,
                          .variant = {0},
                          .custom = {0}};
}

int fg_attn_has_variant(const fg_attn_opts *o) {
    if (!o) return 0;
    const fg_attn_variant *v = &o->variant;
    const fg_attn_custom *c = &o->custom;
    return v->n_kv_heads != 0 || v->window || v->alibi || v->softcap != 0 || c->score_mod || c->score_mod_grad ||
           c->mask || c->block_mask;
}

/* ---- checks ---- */
fg_status fg_attn_problem_init(fg_attn_problem *pr, int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t d,
                               const fg_attn_opts *opts) {
    fg_attn_opts o = opts ? *opts : fg_attn_defaults();
    if (B < 0 || H < 0 || Nq < 0 || Nk < 0)
        return fg_error(FG_ERR_SHAPE, "attention: negative size (B=%lld H=%lld Nq=%lld Nk=%lld)", (long long)B,
                        (long long)H, (long long)Nq, (long long)Nk);
    if (d < 1) return fg_error(FG_ERR_SHAPE, "attention: head dim d must be >= 1, got %lld", (long long)d);
    /* BLAS takes int sizes, Philox's counter takes 32-bit indices */
    const int64_t lim = INT32_MAX;
    if (B > lim || H > lim || Nq > lim || Nk > lim || d > lim)
        return fg_error(FG_ERR_SHAPE, "attention: a size exceeds 2^31-1 (B=%lld H=%lld Nq=%lld Nk=%lld d=%lld)",
                        (long long)B, (long long)H, (long long)Nq, (long long)Nk, (long long)d);
    if (o.impl != FG_ATTN_NAIVE && o.impl != FG_ATTN_FLASH)
        return fg_error(FG_ERR_ARG, "attention: unknown implementation %d (naive or flash)", (int)o.impl);
    if (!isfinite(o.scale)) return fg_error(FG_ERR_ARG, "attention: scale must be finite, got %g", o.scale);
    if (!(o.dropout_p >= 0 && o.dropout_p < 1))
        return fg_error(FG_ERR_ARG, "attention: dropout p must be in [0, 1), got %g", o.dropout_p);
    if (o.block_q < 0 || o.block_q > FG_ATTN_MAX_BLOCK || o.block_k < 0 || o.block_k > FG_ATTN_MAX_BLOCK)
        return fg_error(FG_ERR_ARG,
                        "attention: block sizes must be in [1, %d] (0 = default), got block_q=%d block_k=%d",
                        FG_ATTN_MAX_BLOCK, o.block_q, o.block_k);
    /* ---- variants ---- */
    fg_attn_variant var = o.variant;
    if (var.n_kv_heads == 0) var.n_kv_heads = H;
    if (var.n_kv_heads < 0 || var.n_kv_heads > lim || (H > 0 && (var.n_kv_heads < 1 || H % var.n_kv_heads != 0)) ||
        (H == 0 && var.n_kv_heads != 0))
        return fg_error(FG_ERR_SHAPE, "attention: H = %lld query heads must be a multiple of the %lld K/V heads",
                        (long long)H, (long long)var.n_kv_heads);
    var.window = var.window ? 1 : 0;
    /* a bound at least 2^32 lets every key through on that side (|i'| < 2^31 and j < 2^31): the same
     * as unbounded, written as -1 so that i' ± L never overflows */
    if (var.window_left < 0 || var.window_left >= ((int64_t)1 << 32)) var.window_left = -1;
    if (var.window_right < 0 || var.window_right >= ((int64_t)1 << 32)) var.window_right = -1;
    var.alibi = var.alibi ? 1 : 0;
    if (!(isfinite(var.softcap) && var.softcap >= 0))
        return fg_error(FG_ERR_ARG, "attention: softcap must be finite and >= 0 (0 = off), got %g", var.softcap);
    if (var.alibi && var.alibi_slopes)
        for (int64_t h = 0; h < H; h++)
            if (!isfinite(var.alibi_slopes[h]))
                return fg_error(FG_ERR_ARG, "attention: ALiBi slope of head %lld is %g, not finite", (long long)h,
                                var.alibi_slopes[h]);
    if (!var.alibi) var.alibi_slopes = NULL;
    const fg_attn_custom *c = &o.custom;
    if ((c->score_mod == NULL) != (c->score_mod_grad == NULL))
        return fg_error(FG_ERR_ARG,
                        "attention: a score_mod needs its derivative score_mod_grad, and the reverse (got %s "
                        "without %s)",
                        c->score_mod ? "score_mod" : "score_mod_grad", c->score_mod ? "score_mod_grad" : "score_mod");
    if (c->block_mask) {
        int64_t bB, bH, bNq, bNk;
        int bbq, bbk;
        fg_attn_block_mask_dims(c->block_mask, &bB, &bH, &bNq, &bNk, &bbq, &bbk);
        if (!c->mask) return fg_error(FG_ERR_ARG, "attention: a block mask needs the mask callback it was built from");
        if (bNq != Nq || bNk != Nk || (bB != 1 && bB != B) || (bH != 1 && bH != H))
            return fg_error(FG_ERR_SHAPE,
                            "attention: the block mask was built for B=%lld H=%lld Nq=%lld Nk=%lld, the "
                            "inputs are B=%lld H=%lld Nq=%lld Nk=%lld",
                            (long long)bB, (long long)bH, (long long)bNq, (long long)bNk, (long long)B, (long long)H,
                            (long long)Nq, (long long)Nk);
        if (o.block_q == 0) o.block_q = bbq;
        if (o.block_k == 0) o.block_k = bbk;
        if (o.block_q != bbq || o.block_k != bbk)
            return fg_error(FG_ERR_ARG, "attention: the block mask has %dx%d tiles but the flash blocks are %dx%d", bbq,
                            bbk, o.block_q, o.block_k);
    }
    *pr = (fg_attn_problem){
        .B = B,
        .H = H,
        .Nq = Nq,
        .Nk = Nk,
        .d = d,
        .scale = o.scale != 0 ? o.scale : 1.0 / sqrt((double)d),
        .causal = o.causal == FG_ATTN_CAUSAL_TOP_LEFT ? FG_ATTN_CAUSAL_TOP_LEFT
                  : o.causal                          ? 1
                                                      : 0,
        .dropout_p = o.dropout_p,
        .seed = o.seed,
        .block_q = o.block_q ? o.block_q : FG_ATTN_DEFAULT_BLOCK_Q,
        .block_k = o.block_k ? o.block_k : FG_ATTN_DEFAULT_BLOCK_K,
        .var = var,
        .custom = *c,
    };
    return FG_OK;
}

fg_status fg_attn_problem_check_dtype(const fg_attn_problem *pr, fg_dtype dt) {
    if (dt != FG_F32 && dt != FG_F64 && dt != FG_BF16)
        return fg_error(FG_ERR_DTYPE, "attention: unsupported dtype %d", (int)dt);
    /* bfloat16 kernels compute the scores in float32 */
    const fg_dtype cdt = dt == FG_BF16 ? FG_F32 : dt;
    const double tmax = cdt == FG_F32 ? FLT_MAX : DBL_MAX, tmin = cdt == FG_F32 ? FLT_MIN : DBL_MIN;
    const char *dn = fg_dtype_name(cdt);
    if (!(fabs(pr->scale) <= tmax))
        return fg_error(FG_ERR_ARG, "attention: scale %g does not fit %s: |scale| must be at most %.3g", pr->scale, dn,
                        tmax);
    const double c = pr->var.softcap;
    if (c != 0 && !(c >= tmin && c <= tmax))
        return fg_error(FG_ERR_ARG,
                        "attention: softcap %g does not fit %s: it must be 0 (off) or in [%.3g, %.3g] (c and "
                        "1/c are both %s)",
                        c, dn, tmin, tmax, dn);
    if (pr->var.alibi) {
        /* the bias slope_h · |i' − j| is rounded to dt once; |i' − j| <= max(Nq, Nk) − 1 */
        const int64_t far = (pr->Nq > pr->Nk ? pr->Nq : pr->Nk) - 1;
        for (int64_t h = 0; far > 0 && h < pr->H; h++) {
            const double slope = pr->var.alibi_slopes ? pr->var.alibi_slopes[h] : fg_attn_alibi_slope(h, pr->H);
            if (!(fabs(slope) * (double)far <= tmax))
                return fg_error(FG_ERR_ARG,
                                "attention: ALiBi slope %g of head %lld does not fit %s at distance %lld: "
                                "|slope| must be at most %.3g",
                                slope, (long long)h, dn, (long long)far, tmax / (double)far);
        }
    }
    return FG_OK;
}

static fg_status check_qkv(const fg_tensor *q, const fg_tensor *k, const fg_tensor *v) {
    char b1[96], b2[96], b3[96];
    const fg_tensor *t[3] = {q, k, v};
    const char *nm[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        if (!t[i]) return fg_error(FG_ERR_ARG, "attention: %s is NULL", nm[i]);
        if (t[i]->ndim != 4)
            return fg_error(FG_ERR_SHAPE, "attention: %s must be (B, H, N, d), got rank %d %s", nm[i], t[i]->ndim,
                            fg_shape_str(t[i], b1, sizeof b1));
        if (t[i]->dtype != FG_F32 && t[i]->dtype != FG_F64 && t[i]->dtype != FG_BF16)
            return fg_error(FG_ERR_DTYPE, "attention: %s has unsupported dtype %d", nm[i], (int)t[i]->dtype);
    }
    for (int i = 1; i < 3; i++) {
        if (t[i]->dtype != q->dtype)
            return fg_error(FG_ERR_DTYPE, "attention: %s is %s but q is %s", nm[i], fg_dtype_name(t[i]->dtype),
                            fg_dtype_name(q->dtype));
        if (t[i]->device != q->device)
            return fg_error(FG_ERR_DEVICE, "attention: %s is on %s but q is on %s", nm[i], fg_device_name(t[i]->device),
                            fg_device_name(q->device));
    }
    /* K and V share their H_kv heads; H_kv divides H (grouped-query attention) */
    const int64_t H = q->shape[1], Hkv = k->shape[1];
    if (q->shape[0] != k->shape[0] || q->shape[0] != v->shape[0] || v->shape[1] != Hkv ||
        (Hkv == 0 ? H != 0 : H % Hkv != 0) || q->shape[3] != k->shape[3] || q->shape[3] != v->shape[3] ||
        k->shape[2] != v->shape[2])
        return fg_error(FG_ERR_SHAPE,
                        "attention: q %s, k %s, v %s do not fit: need q (B, H, Nq, d), k and v (B, H_kv, Nk, d) with "
                        "H a multiple of H_kv",
                        fg_shape_str(q, b1, sizeof b1), fg_shape_str(k, b2, sizeof b2), fg_shape_str(v, b3, sizeof b3));
    return FG_OK;
}

/* The device's kernels run only the variants they list in caps (caps_bf16 for bfloat16, which a
 * device without FG_ATTN_CAP_BF16 there refuses outright), and user callbacks only on the CPU. */
static fg_status check_device_variant(const fg_attn_problem *pr, fg_attn_impl impl, fg_dtype dt, fg_device dev,
                                      const fg_attention_kernels *kn) {
    const int bf16 = dt == FG_BF16;
    const unsigned caps = bf16 ? kn->caps_bf16 : kn->caps;
    if (bf16 && !(caps & FG_ATTN_CAP_BF16)) return fg_op_compute_dtype("attention", "q", dt, dev);
    if (bf16 && impl != FG_ATTN_FLASH)
        return fg_error(FG_ERR_ARG, "attention on %s: bfloat16 q, k, v run the flash kernels only (not --impl %s)",
                        fg_device_name(dev), fg_attn_impl_name(impl));
    const char *what = NULL;
    if (dev != FG_CPU && (pr->custom.score_mod || pr->custom.mask || (bf16 && pr->custom.block_mask)))
        what = "user callbacks (score_mod, mask), which run on the CPU only";
    else if (pr->var.n_kv_heads != pr->H && !(caps & FG_ATTN_CAP_GQA))
        what = "grouped-query attention";
    else if (pr->var.window && !(caps & FG_ATTN_CAP_WINDOW))
        what = "sliding windows";
    else if (pr->var.alibi && !(caps & FG_ATTN_CAP_ALIBI))
        what = "ALiBi";
    else if (pr->var.softcap > 0 && !(caps & FG_ATTN_CAP_SOFTCAP))
        what = "softcapping";
    else if (pr->causal == FG_ATTN_CAUSAL_TOP_LEFT && pr->Nq != pr->Nk && !(caps & FG_ATTN_CAP_CAUSAL_TOP_LEFT))
        what = "a top-left aligned causal mask with Nq != Nk";
    if (what)
        return fg_error(FG_ERR_DEVICE, "attention on %s: this build's %skernels do not support %s", fg_device_name(dev),
                        bf16 ? "bfloat16 " : "", what);
    return FG_OK;
}

/* The attention kernels of device dev; NULL (and the error) when it has none for that direction. */
static const fg_attention_kernels *attention_kernels(fg_device dev, int backward) {
    const fg_kernels *kt = fg_kernels_for(dev, "attention");
    if (!kt) return NULL;
    if (backward ? !kt->attention.backward : !kt->attention.forward) {
        fg_error(FG_ERR_DEVICE, "op attention%s: not supported on %s", backward ? " backward" : "", kt->device);
        return NULL;
    }
    return &kt->attention;
}

/* ---- the backward's copy of the resolved problem, owning what it points at ---- */
typedef struct {
    fg_attn_problem pr;
    double *slopes; /* pr.var.alibi_slopes points here (H of them), or NULL */
} attn_problem_copy;

static void attn_problem_copy_free(void *p) {
    attn_problem_copy *c = p;
    if (!c) return;
    fg_attn_block_mask_release(c->pr.custom.block_mask);
    if (c->slopes) fg_free(FG_CPU, c->slopes);
    fg_free(FG_CPU, c);
}

/* A copy of *pr that owns its slopes and holds a reference to the block mask; NULL on OOM. */
static attn_problem_copy *attn_problem_copy_new(const fg_attn_problem *pr) {
    attn_problem_copy *c = fg_alloc(FG_CPU, sizeof *c);
    if (!c) {
        fg_error(FG_ERR_OOM, "attention: cannot allocate the backward's context");
        return NULL;
    }
    *c = (attn_problem_copy){.pr = *pr, .slopes = NULL};
    if (pr->var.alibi_slopes && pr->H > 0) {
        c->slopes = fg_alloc(FG_CPU, (size_t)pr->H * sizeof(double));
        if (!c->slopes) {
            fg_free(FG_CPU, c);
            fg_error(FG_ERR_OOM, "attention: cannot allocate the ALiBi slopes' copy");
            return NULL;
        }
        memcpy(c->slopes, pr->var.alibi_slopes, (size_t)pr->H * sizeof(double));
        c->pr.var.alibi_slopes = c->slopes;
    }
    fg_attn_block_mask_retain(pr->custom.block_mask);
    return c;
}

/* ---- the node's state (fg_attention and fg_attention_qkv) ----
 *   q, k, v  contiguous Q (B, H, Nq, d), K, V (B, H_kv, Nk, d), in the kernels' layout; packed:
 *            q is the packed projection qkv (B, T, (H + 2 H_kv) d) itself, k and v NULL
 *   o        O (B, H, Nq, d): an alias of fg_attention's output, or fg_attention_qkv's kernel
 *            output; packed: fg_attention_qkv's output y (B, T, H d)
 *   lse      flash: L (B, H, Nq); naive: NULL
 *   aux      naive: P (B, H, Nq, Nk); flash float32: lse_lo (B, H, Nq); flash float64: NULL
 *   pc       the resolved problem (owned by the node: node->ctx, freed by node->ctx_free) */
typedef struct {
    fg_tensor *q, *k, *v, *o, *lse, *aux;
    const attn_problem_copy *pc;
    fg_attn_impl impl;
    int packed; /* fg_attention_qkv's flash path: the kernels ran on the packed rows in place */
} attention_state;

/* ---- backward rules ---- */
/* The kernels' backward for a node of fg_attention or fg_attention_qkv: adds into dq, dk, dv (any
 * may be NULL) for dout in O's (B, H, Nq, d) layout. */
static fg_status attn_node_backward(fg_node *n, void *dq, void *dk, void *dv, const fg_tensor *dout) {
    const attention_state *s = FG_NODE_STATE(n, attention_state);
    /* the forward's call again, on the node's copy of its problem (the block mask is the node's) */
    const fg_attn_call call = {.pr = s->pc->pr, .impl = s->impl, .dt = s->q->dtype, .dev = s->q->device};
    return fg_attn_call_backward(&call, dq, dk, dv, fg_data(dout), fg_data(s->q), fg_data(s->k), fg_data(s->v),
                                 fg_data(s->o), s->lse ? fg_data(s->lse) : NULL, s->aux ? fg_data(s->aux) : NULL);
}

/* Reverses  o = attention(q, k, v): adds dQ, dK, dV into the inputs' gradient buffers. */
static fg_status attention_backward(fg_node *n) {
    const fg_tensor *q = FG_NODE_STATE(n, attention_state)->q;
    fg_tensor *g[3];
    for (int i = 0; i < 3; i++) {
        FG_TRY(fg_grad_get(n->inputs[i], &g[i]));
        if (g[i] && (g[i]->dtype != q->dtype || g[i]->device != q->device || !fg_is_contiguous(g[i])))
            return fg_error(FG_ERR_STATE, "attention backward: gradient buffer %d is not a contiguous %s tensor", i,
                            fg_dtype_name(q->dtype));
    }
    fg_tensor *dout = fg_contiguous(n->grad_out);
    if (!dout) return fg_last_status();
    if (dout->dtype != q->dtype) {
        fg_release(dout);
        return fg_error(FG_ERR_DTYPE, "attention backward: output gradient is %s, expected %s",
                        fg_dtype_name(dout->dtype), fg_dtype_name(q->dtype));
    }
    fg_status st = attn_node_backward(n, g[0] ? fg_data(g[0]) : NULL, g[1] ? fg_data(g[1]) : NULL,
                                      g[2] ? fg_data(g[2]) : NULL, dout);
    fg_release(dout);
    return st;
}

/* ============================================================================================
 * the one entry below fg_attention (ops/attention_kernels.h): fg_attention, fg_attention_qkv and
 * the Python package's shim run every attention through these
 * ============================================================================================ */

fg_status fg_attn_check_opts(const fg_attn_opts *opts, int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t d,
                             fg_dtype dt) {
    fg_attn_problem pr;
    FG_TRY(fg_attn_problem_init(&pr, B, H, Nq, Nk, d, opts));
    return fg_attn_problem_check_dtype(&pr, dt);
}

fg_status fg_attn_call_begin(fg_attn_call *c, const fg_attn_opts *opts, int64_t B, int64_t H, int64_t Nq, int64_t Nk,
                             int64_t d, fg_dtype dt, fg_device dev, unsigned bm_broadcast) {
    const fg_attn_opts op = opts ? *opts : fg_attn_defaults();
    *c = (fg_attn_call){.impl = op.impl, .dt = dt, .dev = dev};
    fg_attn_problem *pr = &c->pr;
    FG_TRY(fg_attn_problem_init(pr, B, H, Nq, Nk, d, &op));
    FG_TRY(fg_attn_problem_check_dtype(pr, dt));
    const fg_attention_kernels *kn = attention_kernels(dev, 0);
    if (!kn) return fg_last_status();
    FG_TRY(check_device_variant(pr, op.impl, dt, dev, kn));
    /* a mask without a block mask: flash builds one for this call (and its backward) */
    if (op.impl == FG_ATTN_FLASH && pr->custom.mask && !pr->custom.block_mask && pr->B > 0 && pr->H > 0) {
        const int64_t bB = bm_broadcast & 1 ? 1 : pr->B, bH = bm_broadcast & 2 ? 1 : pr->H;
        c->own_bm = fg_attn_block_mask_create(pr->custom.mask, pr->custom.user, bB, bH, pr->Nq, pr->Nk, pr->block_q,
                                              pr->block_k);
        if (!c->own_bm) return fg_last_status();
        pr->custom.block_mask = c->own_bm;
    }
    return FG_OK;
}

void fg_attn_call_end(fg_attn_call *c) {
    fg_attn_block_mask_release(c->own_bm);
    c->own_bm = NULL;
}

/* Are all n elements of x (float32 or float64) finite? */
static int all_finite(fg_dtype dt, const void *x, int64_t n) {
    if (dt == FG_F32) {
        const float *f = x;
        for (int64_t e = 0; e < n; e++)
            if (!isfinite(f[e])) return 0;
    } else {
        const double *f = x;
        for (int64_t e = 0; e < n; e++)
            if (!isfinite(f[e])) return 0;
    }
    return 1;
}

/* After a CPU forward: with finite q, k and v every visible score is finite or the scores
 * overflowed dt (|scale · q·k| above its range): a row's lse is then NaN (a score +inf, so
 * inf − inf), or −inf although the row sees keys (every score −inf). A NaN or infinite input
 * rightly makes NaN rows (or −inf ones), so the inputs are scanned only when such a row turns up.
 * FG_ERR_NUMERIC for overflowed scores; a score_mod that returns NaN or +inf (it must not) reads the
 * same. The lse of a row that sees no key is −inf; with a mask or score_mod callback a visible
 * score may be −inf, so −inf rows count only without them. */
static fg_status check_scores(const fg_attn_problem *pr, fg_dtype dt, const void *lse, int n_in,
                              const void *const *in, const int64_t *len) {
    const int64_t rows = pr->B * pr->H * pr->Nq;
    const int inf_rows = !pr->custom.mask && !pr->custom.score_mod;
    int64_t bad = -1;
    for (int64_t r = 0; r < rows && bad < 0; r++) {
        const double L = dt == FG_F32 ? (double)((const float *)lse)[r] : ((const double *)lse)[r];
        if (isnan(L) || L == INFINITY)
            bad = r;
        else if (L == -INFINITY && inf_rows) {
            int64_t lo, hi;
            fg_attn_row_range(r % pr->Nq, pr->Nq, pr->Nk, pr->causal, pr->var.window, pr->var.window_left,
                              pr->var.window_right, &lo, &hi);
            if (lo < hi) bad = r;
        }
    }
    if (bad < 0) return FG_OK;
    for (int a = 0; a < n_in; a++)
        if (!all_finite(dt, in[a], len[a])) return FG_OK;
    const int64_t b = bad / (pr->H * pr->Nq), h = bad / pr->Nq % pr->H, i = bad % pr->Nq;
    return fg_error(FG_ERR_NUMERIC,
                    "attention: the scores of query %lld (batch %lld, head %lld) overflow %s although q, "
                    "k and v are finite: |scale * q.k| exceeds %.3g (scale %g)%s; use float64 inputs or "
                    "a smaller scale",
                    (long long)i, (long long)b, (long long)h, fg_dtype_name(dt), dt == FG_F32 ? FLT_MAX : DBL_MAX,
                    pr->scale, pr->custom.score_mod ? ", or score_mod returned NaN or +inf" : "");
}

fg_status fg_attn_call_forward(const fg_attn_call *c, void *o, void *lse, void *aux, const void *q, const void *k,
                               const void *v) {
    const fg_attention_kernels *kn = attention_kernels(c->dev, 0);
    if (!kn) return fg_last_status();
    FG_TRY(kn->forward(c->impl, c->dt, o, lse, aux, q, k, v, &c->pr));
    if (c->dev != FG_CPU) return FG_OK;
    const fg_attn_problem *pr = &c->pr;
    const int64_t nq = pr->B * pr->H * pr->Nq * pr->d, nk = pr->B * pr->var.n_kv_heads * pr->Nk * pr->d;
    return check_scores(pr, c->dt, lse, 3, (const void *[]){q, k, v}, (const int64_t[]){nq, nk, nk});
}

fg_status fg_attn_call_backward(const fg_attn_call *c, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                const void *k, const void *v, const void *o, const void *lse, const void *aux) {
    const fg_attention_kernels *kn = attention_kernels(c->dev, 1);
    if (!kn) return fg_last_status();
    const fg_attn_problem *pr = &c->pr;
    if (c->impl != FG_ATTN_NAIVE || aux)
        return kn->backward(c->impl, c->dt, dq, dk, dv, dout, q, k, v, o, lse, aux, pr);
    /* naive without the P its forward saves: recompute it (and O, L, unused) the same way */
    const fg_attention_kernels *kf = attention_kernels(c->dev, 0);
    if (!kf) return fg_last_status();
    const size_t es = fg_dtype_size(c->dt), rows = (size_t)(pr->B * pr->H * pr->Nq);
    const size_t pn = rows * (size_t)pr->Nk, on = rows * (size_t)pr->d;
    void *P = fg_alloc(c->dev, (pn ? pn : 1) * es);
    void *O = P ? fg_alloc(c->dev, (on ? on : 1) * es) : NULL;
    void *L = O ? fg_alloc(c->dev, (rows ? rows : 1) * es) : NULL;
    fg_status st = FG_OK;
    if (!L) st = fg_last_status() != FG_OK ? fg_last_status() : fg_error(FG_ERR_OOM, "attention: out of memory");
    if (st == FG_OK) st = kf->forward(FG_ATTN_NAIVE, c->dt, O, L, P, q, k, v, pr);
    if (st == FG_OK) st = kn->backward(FG_ATTN_NAIVE, c->dt, dq, dk, dv, dout, q, k, v, o, lse, P, pr);
    if (L) fg_free(c->dev, L);
    if (O) fg_free(c->dev, O);
    if (P) fg_free(c->dev, P);
    return st;
}

/* The packed variable-length kernels run on the CPU only. */
static fg_status varlen_device(const fg_attn_call *c) {
    if (c->dev != FG_CPU)
        return fg_error(FG_ERR_DEVICE, "attention varlen: not supported on %s", fg_device_name(c->dev));
    return FG_OK;
}

fg_status fg_attn_call_varlen_forward(const fg_attn_call *c, void *o, void *lse, void *lse_lo, const void *q,
                                      const void *k, const void *v, const int64_t *cu_q, const int64_t *cu_k,
                                      int64_t nseq, int64_t Tq, int64_t Tk, const double *slopes) {
    FG_TRY(varlen_device(c));
    return fg_attn_varlen_forward(c->dt, o, lse, lse_lo, q, k, v, cu_q, cu_k, nseq, Tq, Tk, slopes, &c->pr);
}

fg_status fg_attn_call_varlen_backward(const fg_attn_call *c, void *dq, void *dk, void *dv, const void *dout,
                                       const void *q, const void *k, const void *v, const void *o, const void *lse,
                                       const void *lse_lo, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq,
                                       int64_t Tq, int64_t Tk, const double *slopes) {
    FG_TRY(varlen_device(c));
    return fg_attn_varlen_backward(c->dt, dq, dk, dv, dout, q, k, v, o, lse, lse_lo, cu_q, cu_k, nseq, Tq, Tk, slopes,
                                   &c->pr);
}

/* ---- the forward shared by fg_attention and fg_attention_qkv ---- */

/* One forward: the call (resolved problem, the block mask built for it) and the kernel's outputs. */
typedef struct {
    fg_attn_call call;
    fg_tensor *o, *lse, *aux; /* aux: naive's P, or flash float32's lse_lo; NULL when not kept */
} attn_fwd;

/* Begin the call (B, H, Nq, Nk, d; H_kv = op.variant.n_kv_heads) and run the forward on contiguous
 * q, k, v into new outputs. On error everything is released and c->o is NULL. */
static fg_status attn_fwd_run(attn_fwd *c, fg_attn_opts op, int64_t B, int64_t H, int64_t Nq, int64_t Nk, int64_t d,
                              fg_device dev, fg_dtype dt, int wants_grad, const fg_tensor *qc, const fg_tensor *kc,
                              const fg_tensor *vc) {
    *c = (attn_fwd){0};
    fg_status st = fg_attn_call_begin(&c->call, &op, B, H, Nq, Nk, d, dt, dev, 0);
    if (st != FG_OK) {
        fg_attn_call_end(&c->call);
        *c = (attn_fwd){0};
        return st;
    }
    const fg_attn_problem *pr = &c->call.pr;
    const int64_t oshape[4] = {pr->B, pr->H, pr->Nq, pr->d}, lshape[3] = {pr->B, pr->H, pr->Nq};
    const int64_t pshape[4] = {pr->B, pr->H, pr->Nq, pr->Nk};
    c->o = fg_empty(dt, dev, 4, oshape);
    c->lse = c->o ? fg_empty(dt == FG_BF16 ? FG_F32 : dt, dev, 3, lshape) : NULL; /* bfloat16: float32 lse */
    /* naive keeps P for its backward (without one, the kernel uses per-(b, h) scratch); flash in
     * float32 keeps lse_lo */
    int want_aux = 0;
    if (wants_grad && op.impl == FG_ATTN_NAIVE) {
        want_aux = 1;
        c->aux = c->lse ? fg_empty(dt, dev, 4, pshape) : NULL;
    } else if (wants_grad && dt == FG_F32) {
        want_aux = 1;
        c->aux = c->lse ? fg_empty(dt, dev, 3, lshape) : NULL;
    }
    if (!c->lse || (want_aux && !c->aux))
        st = fg_last_status() != FG_OK ? fg_last_status() : fg_error(FG_ERR_OOM, "attention: cannot allocate outputs");
    if (st == FG_OK)
        st = fg_attn_call_forward(&c->call, fg_data(c->o), fg_data(c->lse), c->aux ? fg_data(c->aux) : NULL,
                                  fg_data(qc), fg_data(kc), fg_data(vc));
    if (st != FG_OK) {
        fg_release(c->o), fg_release(c->lse), fg_release(c->aux);
        fg_attn_call_end(&c->call);
        *c = (attn_fwd){0};
    }
    return st;
}

/* Give node n what the backward needs (attention_state): the problem (copied), the kernel, q, k,
 * v, O, L (flash; else NULL), naive's P or flash float32's lse_lo (or NULL), and whether the kernels
 * ran on fg_attention_qkv's packed rows. */
static fg_status attn_state_save(fg_node *n, const fg_attn_problem *pr, fg_attn_impl impl, fg_tensor *q, fg_tensor *k,
                                 fg_tensor *v, fg_tensor *o, fg_tensor *lse, fg_tensor *aux, int packed) {
    attn_problem_copy *pc = attn_problem_copy_new(pr);
    if (!pc) return fg_last_status();
    n->ctx = pc; /* only for freeing it: the state points at it */
    n->ctx_free = attn_problem_copy_free;
    attention_state *s = FG_NODE_STATE(n, attention_state);
    s->q = fg_node_keep(n, q);
    s->k = fg_node_keep(n, k);
    s->v = fg_node_keep(n, v);
    s->o = fg_node_keep(n, o);
    s->lse = fg_node_keep(n, lse);
    s->aux = fg_node_keep(n, aux);
    s->pc = pc;
    s->impl = impl;
    s->packed = packed;
    return FG_OK;
}

/* The same for a forward run by attn_fwd_run on q, k, v in the kernels' layout, O o_saved. */
static fg_status attn_fwd_save(fg_node *n, const attn_fwd *c, fg_tensor *qc, fg_tensor *kc, fg_tensor *vc,
                               fg_tensor *o_saved) {
    return attn_state_save(n, &c->call.pr, c->call.impl, qc, kc, vc, o_saved,
                           c->call.impl == FG_ATTN_FLASH ? c->lse : NULL, c->aux, 0);
}

/* ---- forward ---- */
fg_tensor *fg_attention(fg_tensor *q, fg_tensor *k, fg_tensor *v, const fg_attn_opts *opts, fg_tensor **lse_out) {
    if (lse_out) *lse_out = NULL;
    if (check_qkv(q, k, v) != FG_OK) return NULL;
    fg_attn_opts op = opts ? *opts : fg_attn_defaults();
    if (op.variant.n_kv_heads != 0 && op.variant.n_kv_heads != k->shape[1]) {
        fg_error(FG_ERR_SHAPE, "attention: opts ask for %lld K/V heads but k and v have %lld",
                 (long long)op.variant.n_kv_heads, (long long)k->shape[1]);
        return NULL;
    }
    op.variant.n_kv_heads = k->shape[1];
    const int wants_grad = fg_grad_enabled() && (q->requires_grad || k->requires_grad || v->requires_grad);
    fg_tensor *qc = fg_contiguous(q), *kc = qc ? fg_contiguous(k) : NULL, *vc = kc ? fg_contiguous(v) : NULL;
    attn_fwd c = {0};
    fg_status st = vc ? attn_fwd_run(&c, op, q->shape[0], q->shape[1], q->shape[2], k->shape[2], q->shape[3], q->device,
                                     q->dtype, wants_grad, qc, kc, vc)
                      : fg_last_status();
    if (st == FG_OK) {
        fg_node *n = fg_record(c.o, "attention", attention_backward, 3, (fg_tensor *[]){q, k, v});
        if (n) {
            /* the node saves O through an alias: the output itself would own its own node */
            fg_tensor *oa = fg_alias(c.o);
            st = oa ? attn_fwd_save(n, &c, qc, kc, vc, oa) : fg_last_status();
            fg_release(oa);
        }
    }
    fg_release(qc);
    fg_release(kc);
    fg_release(vc);
    fg_release(c.aux);
    fg_attn_call_end(&c.call); /* the node's context holds its own reference to the block mask */
    if (st != FG_OK) {
        fg_release(c.o);
        fg_release(c.lse);
        return NULL;
    }
    if (lse_out)
        *lse_out = c.lse;
    else
        fg_release(c.lse);
    return c.o;
}

/* ============================================================================================
 * fg_attention_qkv: attention on GPT-2's packed projection
 *
 * Legend: qkv (B, T, W) with W = (H + 2·H_kv)·d, each row [q heads 0..H-1 | k heads | v heads];
 * y (B, T, H·d), each row [head 0 | head 1 | ...].
 *
 * The same as slicing q, k, v out of qkv, permuting each to (B, heads, T, d), fg_attention, and
 * permuting and reshaping the output back, without four autograd views, their gradient buffers
 * and their accumulations. Flash on the CPU reads the heads where they are and writes y's rows
 * and the gradient's in place (fg_attn_flash_*_rows): nothing is gathered or scattered, and a new
 * gradient buffer is written, not zeroed first. Naive gathers the heads into its layout and
 * scatters them back, once each way.
 *
 * Saved for backward: flash on the CPU qkv, y, L and lse_lo; naive as fg_attention (Q, K, V, O in
 * the (B, heads, T, d) layout, P).
 * ============================================================================================ */

/* Moves heads between the packed rows and the per-head layout:
 *   rows  (B, T, W): head h of the group occupies columns [off + h·d, off + (h+1)·d)
 *   heads (B, Hs, T, d), contiguous
 * REPACK_GATHER: heads = rows;  REPACK_SCATTER: rows = heads;  REPACK_ADD: rows += heads. */
enum { REPACK_GATHER, REPACK_SCATTER, REPACK_ADD };
#define REPACK_T 32 /* time steps per pool item */
typedef struct {
    fg_dtype dt;
    int dir;
    void *rows, *heads;
    int64_t B, T, W, Hs, d, off;
} repack_job;

/* One item: time steps [t0, t1) of batch b, every head of the group. float32 moves a head's rows
 * as one block of vector copies (fg_vrows_f32): a call per row of d floats would cost more than
 * the row. */
static void repack_item(void *ctx, int64_t item, int worker) {
    (void)worker;
    const repack_job *J = ctx;
    const int64_t nt = (J->T + REPACK_T - 1) / REPACK_T, b = item / nt, t0 = (item % nt) * REPACK_T;
    const int64_t n = (t0 + REPACK_T < J->T ? t0 + REPACK_T : J->T) - t0, d = J->d, W = J->W;
    const int gather = J->dir == REPACK_GATHER, add = J->dir == REPACK_ADD;
    for (int64_t h = 0; h < J->Hs; h++) {
        const int64_t ro = (b * J->T + t0) * W + J->off + h * d, ho = ((b * J->Hs + h) * J->T + t0) * d;
        if (J->dt == FG_F32) {
            float *r = (float *)J->rows + ro, *hd = (float *)J->heads + ho;
            if (gather)
                fg_vrows_f32(hd, d, r, W, n, d, 0);
            else
                fg_vrows_f32(r, W, hd, d, n, d, add);
            continue;
        }
        double *r = (double *)J->rows + ro, *hd = (double *)J->heads + ho;
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < d; i++) {
                if (gather)
                    hd[t * d + i] = r[t * W + i];
                else
                    r[t * W + i] = add ? r[t * W + i] + hd[t * d + i] : hd[t * d + i];
            }
    }
}

static void repack(fg_dtype dt, int dir, void *rows, void *heads, int64_t B, int64_t T, int64_t W, int64_t Hs,
                   int64_t d, int64_t off) {
    repack_job J = {
        .dt = dt, .dir = dir, .rows = rows, .heads = heads, .B = B, .T = T, .W = W, .Hs = Hs, .d = d, .off = off};
    const int64_t items = B * ((T + REPACK_T - 1) / REPACK_T);
    if ((double)B * (double)T * (double)(Hs * d) < 32768) /* too small to pay for a pool run */
        for (int64_t i = 0; i < items; i++) repack_item(&J, i, 0);
    else
        fg_pool_run(items, repack_item, &J, 0);
}

/* The (B, Hs, T, d) head group at column offset `off` of the packed (B, T, W) rows r. */
static fg_tensor *gather_heads(const fg_tensor *r, int64_t Hs, int64_t d, int64_t off) {
    const int64_t B = r->shape[0], T = r->shape[1], W = r->shape[2];
    fg_tensor *h = fg_empty(r->dtype, FG_CPU, 4, (int64_t[]){B, Hs, T, d});
    if (h) repack(r->dtype, REPACK_GATHER, fg_data(r), fg_data(h), B, T, W, Hs, d, off);
    return h;
}

/* The packed rows of fg_attention_qkv as the flash kernels address them (fg_attn_layout): heads of
 * width d side by side in rows of qkv's W = (H + 2 H_kv) d and y's H d, one row per time step. */
static fg_attn_layout packed_layout(int64_t T, int64_t H, int64_t Hkv, int64_t d) {
    const int64_t W = (H + 2 * Hkv) * d;
    const fg_attn_rows in = {T * W, d, W}, out = {T * H * d, d, H * d};
    return (fg_attn_layout){.q = in, .k = in, .v = in, .o = out, .dout = out, .dq = in, .dk = in, .dv = in};
}

/* The packed rows' backward: flash reads dY, qkv and y in place and writes (fresh: a new gradient
 * buffer) or adds (an existing one) dQ, dK, dV into qkv's gradient rows g, which the three head
 * groups cover. */
static fg_status qkv_backward_packed(const attention_state *s, fg_tensor *g, int fresh, const fg_tensor *dy) {
    const fg_attn_problem *pr = &s->pc->pr;
    const fg_tensor *x = s->q;
    const int64_t H = pr->H, Hkv = pr->var.n_kv_heads, d = pr->d;
    fg_attn_layout L = packed_layout(pr->Nq, H, Hkv, d);
    L.write_grads = fresh;
    const size_t es = fg_dtype_size(x->dtype), ko = (size_t)(H * d) * es, vo = (size_t)((H + Hkv) * d) * es;
    char *gp = fg_data(g);
    const char *xp = fg_data(x);
    return fg_attn_flash_backward_rows(x->dtype, gp, gp + ko, gp + vo, fg_data(dy), xp, xp + ko, xp + vo, fg_data(s->o),
                                       fg_data(s->lse), s->aux ? fg_data(s->aux) : NULL, pr, &L);
}

/* The gathered heads' backward (naive): dY into the heads' layout, the kernels' backward into
 * zeroed dQ, dK, dV, then those added into qkv's gradient rows g (or, fresh, written there). */
static fg_status qkv_backward_gathered(fg_node *n, fg_tensor *g, int fresh, const fg_tensor *dy) {
    const attention_state *s = FG_NODE_STATE(n, attention_state);
    const fg_tensor *q = s->q, *k = s->k, *v = s->v;
    const fg_attn_problem *pr = &s->pc->pr;
    const int64_t H = pr->H, Hkv = pr->var.n_kv_heads, d = pr->d, B = pr->B, T = pr->Nq, W = (H + 2 * Hkv) * d;
    fg_tensor *dout = gather_heads(dy, H, d, 0);
    fg_tensor *dq = dout ? fg_zeros(q->dtype, FG_CPU, 4, q->shape) : NULL;
    fg_tensor *dk = dq ? fg_zeros(q->dtype, FG_CPU, 4, k->shape) : NULL;
    fg_tensor *dv = dk ? fg_zeros(q->dtype, FG_CPU, 4, v->shape) : NULL;
    fg_status st = dv ? FG_OK : fg_last_status();
    if (st == FG_OK) st = attn_node_backward(n, fg_data(dq), fg_data(dk), fg_data(dv), dout);
    if (st == FG_OK) { /* forward: q, k, v = the head groups of qkv  ->  dqkv += dq, dk, dv in place */
        const int dir = fresh ? REPACK_SCATTER : REPACK_ADD;
        repack(q->dtype, dir, fg_data(g), fg_data(dq), B, T, W, H, d, 0);
        repack(q->dtype, dir, fg_data(g), fg_data(dk), B, T, W, Hkv, d, H * d);
        repack(q->dtype, dir, fg_data(g), fg_data(dv), B, T, W, Hkv, d, (H + Hkv) * d);
    }
    fg_release(dout), fg_release(dq), fg_release(dk), fg_release(dv);
    return st;
}

/* Reverses  y = attention_qkv(qkv) into qkv's gradient, which it writes when the buffer is new. */
static fg_status attention_qkv_backward(fg_node *n) {
    const attention_state *s = FG_NODE_STATE(n, attention_state);
    const fg_dtype dt = s->q->dtype;
    fg_tensor *g;
    int fresh;
    FG_TRY(fg_grad_get_fresh(n->inputs[0], &g, &fresh));
    if (!g) return FG_OK; /* qkv wants no gradient */
    if (g->dtype != dt || !fg_is_contiguous(g))
        return fg_error(FG_ERR_STATE, "attention_qkv backward: the gradient buffer is not a contiguous %s tensor",
                        fg_dtype_name(dt));
    fg_tensor *dy = fg_contiguous(n->grad_out);
    if (!dy) return fg_last_status();
    fg_status st = s->packed ? qkv_backward_packed(s, g, fresh, dy) : qkv_backward_gathered(n, g, fresh, dy);
    fg_release(dy);
    return st;
}

/* The CPU flash forward of fg_attention_qkv on x (contiguous qkv, B T W), on the packed rows. */
static fg_tensor *attention_qkv_packed(fg_tensor *qkv, fg_tensor *x, const fg_attn_opts *op, int64_t H, int64_t Hkv,
                                       int64_t d, int wants_grad) {
    const int64_t B = x->shape[0], T = x->shape[1];
    const fg_dtype dt = x->dtype;
    fg_attn_call call;
    fg_status st = fg_attn_call_begin(&call, op, B, H, T, T, d, dt, FG_CPU, 0);
    fg_tensor *y = NULL, *lse = NULL, *lo = NULL;
    if (st == FG_OK) {
        y = fg_empty(dt, FG_CPU, 3, (int64_t[]){B, T, H * d});
        lse = y ? fg_empty(dt, FG_CPU, 3, (int64_t[]){B, H, T}) : NULL;
        lo = lse && wants_grad && dt == FG_F32 ? fg_empty(dt, FG_CPU, 3, (int64_t[]){B, H, T}) : NULL;
        if (!lse || (wants_grad && dt == FG_F32 && !lo)) st = fg_last_status();
    }
    if (st == FG_OK) {
        const fg_attn_layout L = packed_layout(T, H, Hkv, d);
        const size_t es = fg_dtype_size(dt), ko = (size_t)(H * d) * es, vo = (size_t)((H + Hkv) * d) * es;
        const char *xp = fg_data(x);
        st = fg_attn_flash_forward_rows(dt, fg_data(y), fg_data(lse), lo ? fg_data(lo) : NULL, xp, xp + ko, xp + vo,
                                        &call.pr, &L);
    }
    if (st == FG_OK)
        st = check_scores(&call.pr, dt, fg_data(lse), 1, (const void *[]){fg_data(x)}, (const int64_t[]){fg_numel(x)});
    if (st == FG_OK) {
        fg_node *n = fg_record(y, "attention_qkv", attention_qkv_backward, 1, (fg_tensor *[]){qkv});
        if (n) {
            fg_tensor *ya = fg_alias(y); /* y through an alias: the output would own its own node */
            st = ya ? attn_state_save(n, &call.pr, FG_ATTN_FLASH, x, NULL, NULL, ya, lse, lo, 1) : fg_last_status();
            fg_release(ya);
        }
    }
    fg_release(lse), fg_release(lo);
    fg_attn_call_end(&call);
    if (st != FG_OK) {
        fg_release(y);
        return NULL;
    }
    return y;
}

/* Off the CPU: the composite of views and fg_attention (the device kernels take that layout). */
static fg_tensor *attention_qkv_composite(fg_tensor *qkv, int64_t H, int64_t Hkv, int64_t d, const fg_attn_opts *opts) {
    const int64_t B = qkv->shape[0], T = qkv->shape[1];
    fg_tensor *r = fg_reshape(qkv, 4, (int64_t[]){B, T, H + 2 * Hkv, d});
    fg_tensor *part[3] = {NULL, NULL, NULL}, *y = NULL;
    const int64_t lo[3] = {0, H, H + Hkv}, hi[3] = {H, H + Hkv, H + 2 * Hkv};
    for (int s = 0; s < 3 && r; s++) {
        fg_tensor *sl = fg_slice(r, 2, lo[s], hi[s]);
        part[s] = sl ? fg_permute(sl, (int[]){0, 2, 1, 3}) : NULL; /* (B, heads, T, d) */
        fg_release(sl);
        if (!part[s]) break;
    }
    fg_tensor *o = part[2] ? fg_attention(part[0], part[1], part[2], opts, NULL) : NULL;
    fg_tensor *ot = o ? fg_permute(o, (int[]){0, 2, 1, 3}) : NULL; /* (B, T, H, d) */
    if (ot) y = fg_reshape(ot, 3, (int64_t[]){B, T, H * d});
    fg_release(r), fg_release(part[0]), fg_release(part[1]), fg_release(part[2]), fg_release(o), fg_release(ot);
    return y;
}

fg_tensor *fg_attention_qkv(fg_tensor *qkv, int64_t n_head, const fg_attn_opts *opts) {
    char b1[96];
    if (!qkv) {
        fg_error(FG_ERR_ARG, "attention_qkv: qkv is NULL");
        return NULL;
    }
    if (qkv->ndim != 3) {
        fg_error(FG_ERR_SHAPE, "attention_qkv: qkv must be (B, T, (H + 2 H_kv) d), got rank %d %s", qkv->ndim,
                 fg_shape_str(qkv, b1, sizeof b1));
        return NULL;
    }
    if (fg_op_compute_dtype("attention_qkv", "qkv", qkv->dtype, FG_CPU) != FG_OK) {
        return NULL;
    }
    fg_attn_opts op = opts ? *opts : fg_attn_defaults();
    const int64_t H = n_head, Hkv = op.variant.n_kv_heads ? op.variant.n_kv_heads : n_head, W = qkv->shape[2];
    if (H < 1 || Hkv < 1 || H % Hkv != 0 || W % (H + 2 * Hkv) != 0 || W == 0) {
        fg_error(FG_ERR_SHAPE,
                 "attention_qkv: qkv %s does not split into %lld query heads and 2 x %lld K/V heads of "
                 "one width (H must be a multiple of H_kv)",
                 fg_shape_str(qkv, b1, sizeof b1), (long long)H, (long long)Hkv);
        return NULL;
    }
    const int64_t d = W / (H + 2 * Hkv), B = qkv->shape[0], T = qkv->shape[1];
    if (qkv->device != FG_CPU) return attention_qkv_composite(qkv, H, Hkv, d, &op);
    op.variant.n_kv_heads = Hkv;
    const int wants_grad = fg_grad_enabled() && qkv->requires_grad;
    fg_tensor *x = fg_contiguous(qkv);
    if (x && op.impl == FG_ATTN_FLASH) {
        fg_tensor *y = attention_qkv_packed(qkv, x, &op, H, Hkv, d, wants_grad);
        fg_release(x);
        return y;
    }
    fg_tensor *qc = x ? gather_heads(x, H, d, 0) : NULL;
    fg_tensor *kc = qc ? gather_heads(x, Hkv, d, H * d) : NULL;
    fg_tensor *vc = kc ? gather_heads(x, Hkv, d, (H + Hkv) * d) : NULL;
    attn_fwd c = {0};
    fg_status st =
        vc ? attn_fwd_run(&c, op, B, H, T, T, d, FG_CPU, qkv->dtype, wants_grad, qc, kc, vc) : fg_last_status();
    fg_tensor *y = st == FG_OK ? fg_empty(qkv->dtype, FG_CPU, 3, (int64_t[]){B, T, H * d}) : NULL;
    if (st == FG_OK && !y) st = fg_last_status();
    if (st == FG_OK) {
        repack(qkv->dtype, REPACK_SCATTER, fg_data(y), fg_data(c.o), B, T, H * d, H, d, 0);
        fg_node *n = fg_record(y, "attention_qkv", attention_qkv_backward, 1, (fg_tensor *[]){qkv});
        if (n) st = attn_fwd_save(n, &c, qc, kc, vc, c.o);
    }
    fg_release(x), fg_release(qc), fg_release(kc), fg_release(vc);
    fg_release(c.o), fg_release(c.lse), fg_release(c.aux);
    fg_attn_call_end(&c.call);
    if (st != FG_OK) {
        fg_release(y);
        return NULL;
    }
    return y;
}
