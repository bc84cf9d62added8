/* attention_entry.c — the one entry below fg_attention (ops/attention_kernels.h), and the one
 * place the attention problem is checked: fg_attention, fg_attention_qkv, the Python package's
 * shim and the tests' raw calls all reach a device's kernels through here, after these checks.
 *
 *   fg_attn_problem_init         sizes and options -> the resolved problem
 *   fg_attn_problem_check_dtype  do its options fit the dtype the kernels compute in
 *   fg_attn_check_caps           does the device implement what it asks (FG_ATTN_CAP_*)
 *   fg_attn_call_*               begin (the three above), forward, backward, varlen, end
 *   fg_attn_{naive,flash}_*      the CPU kernels on raw contiguous arrays, checked
 *   fg_attn_varlen_*             packed documents on the CPU, checked
 *
 * Every path ends in the device's kernel table (ops/kernels.h, the `attention` member): contiguous
 * arrays, fg_attention_qkv's packed rows (pr.rows) and varlen documents (pr.varlen) alike. The
 * kernels (ops/cpu/attention*.c, cuda/attention*.cu) check nothing of the problem and never call
 * back into this file.
 */
#include "ops/attention_kernels.h"

#include "ops/attention.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the problem, resolved and checked ---- */
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

/* ---- what a device's kernels implement (ops/attention_kernels.h) ---- */
fg_status fg_attn_check_caps(const fg_attn_problem *pr, fg_attn_impl impl, fg_dtype dt, fg_device dev, unsigned caps) {
    const int bf16 = dt == FG_BF16;
    if (bf16 && !(caps & FG_ATTN_CAP_BF16)) return fg_op_compute_dtype("attention", "q", dt, dev);
    if (bf16 && impl != FG_ATTN_FLASH)
        return fg_error(FG_ERR_ARG, "attention on %s: bfloat16 q, k, v run the flash kernels only (not --impl %s)",
                        fg_device_name(dev), fg_attn_impl_name(impl));
    if (pr->varlen && !(caps & FG_ATTN_CAP_VARLEN))
        return fg_error(FG_ERR_DEVICE, "attention varlen: not supported on %s", fg_device_name(dev));
    if (pr->rows.q.t != 0 && impl != FG_ATTN_FLASH)
        return fg_error(FG_ERR_ARG, "attention: strided rows run the flash kernels only (not %s)",
                        fg_attn_impl_name(impl));
    const char *what = NULL;
    if (dev != FG_CPU &&
        (pr->custom.score_mod || pr->custom.score_mod_grad || pr->custom.mask || pr->custom.block_mask))
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
    else if (pr->rows.q.t != 0 && !(caps & FG_ATTN_CAP_ROWS))
        what = "arrays on strided rows";
    if (what)
        return fg_error(FG_ERR_DEVICE, "attention on %s: this build's %skernels do not support %s", fg_device_name(dev),
                        bf16 ? "bfloat16 " : "", what);
    return FG_OK;
}

/* What kernel table kn implements for dtype dt: its variants' caps and its layouts. */
static unsigned caps_for(const fg_attention_kernels *kn, fg_dtype dt) {
    return dt == FG_BF16 ? kn->caps_bf16 : kn->caps | kn->layouts;
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
    FG_TRY(fg_attn_check_caps(pr, op.impl, dt, dev, caps_for(kn, dt)));
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

/* Are all elements of the (B, heads, N, d) array x (float32 or float64) on rows R finite? */
static int all_finite(fg_dtype dt, const void *x, fg_attn_rows R, int64_t B, int64_t heads, int64_t N, int64_t d) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t t = 0; t < N; t++) {
                const int64_t at = b * R.b + h * R.h + t * R.t;
                for (int64_t c = 0; c < d; c++)
                    if (dt == FG_F32 ? !isfinite(((const float *)x)[at + c]) : !isfinite(((const double *)x)[at + c]))
                        return 0;
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
static fg_status check_scores(const fg_attn_problem *pr, fg_dtype dt, const void *lse, const void *q, const void *k,
                              const void *v) {
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
    const fg_attn_layout R = pr->rows.q.t != 0 ? pr->rows : fg_attn_layout_contiguous(pr);
    const int64_t Hkv = pr->var.n_kv_heads;
    if (!all_finite(dt, q, R.q, pr->B, pr->H, pr->Nq, pr->d) || !all_finite(dt, k, R.k, pr->B, Hkv, pr->Nk, pr->d) ||
        !all_finite(dt, v, R.v, pr->B, Hkv, pr->Nk, pr->d))
        return FG_OK;
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
    if (c->pr.rows.q.t != 0) FG_TRY(fg_attn_check_caps(&c->pr, c->impl, c->dt, c->dev, caps_for(kn, c->dt)));
    FG_TRY(kn->forward(c->impl, c->dt, o, lse, aux, q, k, v, &c->pr));
    if (c->dev != FG_CPU) return FG_OK;
    return check_scores(&c->pr, c->dt, lse, q, k, v);
}

fg_status fg_attn_call_backward(const fg_attn_call *c, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                const void *k, const void *v, const void *o, const void *lse, const void *aux) {
    const fg_attention_kernels *kn = attention_kernels(c->dev, 1);
    if (!kn) return fg_last_status();
    const fg_attn_problem *pr = &c->pr;
    if (pr->rows.q.t != 0) FG_TRY(fg_attn_check_caps(pr, c->impl, c->dt, c->dev, caps_for(kn, c->dt)));
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

/* ---- packed variable-length documents ---- */

/* cu (S + 1) starts at 0, never decreases, ends at T. */
static fg_status check_offsets(const int64_t *cu, int64_t S, int64_t T, const char *name) {
    if (!cu) return fg_error(FG_ERR_ARG, "attention varlen: %s is NULL", name);
    if (cu[0] != 0) return fg_error(FG_ERR_ARG, "attention varlen: %s[0] must be 0, got %lld", name, (long long)cu[0]);
    for (int64_t s = 0; s < S; s++)
        if (cu[s + 1] < cu[s])
            return fg_error(FG_ERR_ARG, "attention varlen: %s decreases at %lld (%lld then %lld)", name, (long long)s,
                            (long long)cu[s], (long long)cu[s + 1]);
    if (cu[S] != T)
        return fg_error(FG_ERR_ARG, "attention varlen: %s ends at %lld but there are %lld tokens", name,
                        (long long)cu[S], (long long)T);
    return FG_OK;
}

/* The checks of a varlen call on resolved problem pr (fg_attn_varlen_*, ops/attention_kernels.h):
 * the dtype, the sizes, no user callbacks, the offsets, and that every document's options fit dt
 * (its own Nq and Nk, its own ALiBi slopes). Fills *out: pr with vl's documents. */
static fg_status varlen_problem(fg_attn_problem *out, const fg_attn_problem *pr, const fg_attn_varlen *vl,
                                fg_dtype dt) {
    if (!pr) return fg_error(FG_ERR_ARG, "attention varlen: NULL problem");
    if (dt != FG_F32 && dt != FG_F64) return fg_error(FG_ERR_DTYPE, "attention varlen: unsupported dtype %d", (int)dt);
    const int64_t S = vl->nseq;
    if (S < 0 || vl->Tq < 0 || vl->Tk < 0)
        return fg_error(FG_ERR_SHAPE, "attention varlen: negative size (%lld documents, Tq=%lld, Tk=%lld)",
                        (long long)S, (long long)vl->Tq, (long long)vl->Tk);
    if (pr->custom.mask || pr->custom.score_mod)
        return fg_error(FG_ERR_ARG, "attention varlen: user callbacks (score_mod, mask) are not supported");
    FG_TRY(check_offsets(vl->cu_q, S, vl->Tq, "cu_seqlens_q"));
    FG_TRY(check_offsets(vl->cu_k, S, vl->Tk, "cu_seqlens_k"));
    fg_attn_problem doc = *pr;
    doc.B = 1;
    for (int64_t s = 0; s < S; s++) {
        doc.Nq = vl->cu_q[s + 1] - vl->cu_q[s];
        doc.Nk = vl->cu_k[s + 1] - vl->cu_k[s];
        if (vl->slopes && pr->var.alibi) doc.var.alibi_slopes = vl->slopes + s * pr->H;
        if (doc.Nq > 0) FG_TRY(fg_attn_problem_check_dtype(&doc, dt));
    }
    *out = *pr;
    out->rows = (fg_attn_layout){0};
    out->varlen = vl;
    return FG_OK;
}

/* The device's varlen forward (kn NULL: the CPU's) after the checks. */
static fg_status varlen_forward(const fg_attn_problem *pr, fg_device dev, fg_dtype dt, void *o, void *lse, void *lse_lo,
                                const void *q, const void *k, const void *v, const fg_attn_varlen *vl) {
    const fg_attention_kernels *kn = attention_kernels(dev, 0);
    if (!kn) return fg_last_status();
    fg_attn_problem p2;
    FG_TRY(varlen_problem(&p2, pr, vl, dt));
    FG_TRY(fg_attn_check_caps(&p2, FG_ATTN_FLASH, dt, dev, caps_for(kn, dt)));
    if (vl->Tq > 0 && (!o || !lse || !q || (vl->Tk > 0 && (!k || !v))))
        return fg_error(FG_ERR_ARG, "attention varlen: NULL array");
    return kn->forward(FG_ATTN_FLASH, dt, o, lse, lse_lo, q, k, v, &p2);
}

static fg_status varlen_backward(const fg_attn_problem *pr, fg_device dev, fg_dtype dt, void *dq, void *dk, void *dv,
                                 const void *dout, const void *q, const void *k, const void *v, const void *o,
                                 const void *lse, const void *lse_lo, const fg_attn_varlen *vl) {
    const fg_attention_kernels *kn = attention_kernels(dev, 1);
    if (!kn) return fg_last_status();
    fg_attn_problem p2;
    FG_TRY(varlen_problem(&p2, pr, vl, dt));
    FG_TRY(fg_attn_check_caps(&p2, FG_ATTN_FLASH, dt, dev, caps_for(kn, dt)));
    if (vl->Tq > 0 && vl->Tk > 0 && (!dout || !q || !k || !v || !o || !lse))
        return fg_error(FG_ERR_ARG, "attention varlen backward: NULL array");
    return kn->backward(FG_ATTN_FLASH, dt, dq, dk, dv, dout, q, k, v, o, lse, lse_lo, &p2);
}

/* The device check first, as before any other: a device without varlen kernels says so. */
static fg_status varlen_device(const fg_attn_call *c) {
    const fg_attention_kernels *kn = attention_kernels(c->dev, 0);
    if (!kn) return fg_last_status();
    if (!(caps_for(kn, c->dt) & FG_ATTN_CAP_VARLEN))
        return fg_error(FG_ERR_DEVICE, "attention varlen: not supported on %s", fg_device_name(c->dev));
    return FG_OK;
}

fg_status fg_attn_call_varlen_forward(const fg_attn_call *c, void *o, void *lse, void *lse_lo, const void *q,
                                      const void *k, const void *v, const int64_t *cu_q, const int64_t *cu_k,
                                      int64_t nseq, int64_t Tq, int64_t Tk, const double *slopes) {
    FG_TRY(varlen_device(c));
    const fg_attn_varlen vl = {.cu_q = cu_q, .cu_k = cu_k, .nseq = nseq, .Tq = Tq, .Tk = Tk, .slopes = slopes};
    return varlen_forward(&c->pr, c->dev, c->dt, o, lse, lse_lo, q, k, v, &vl);
}

fg_status fg_attn_call_varlen_backward(const fg_attn_call *c, void *dq, void *dk, void *dv, const void *dout,
                                       const void *q, const void *k, const void *v, const void *o, const void *lse,
                                       const void *lse_lo, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq,
                                       int64_t Tq, int64_t Tk, const double *slopes) {
    FG_TRY(varlen_device(c));
    const fg_attn_varlen vl = {.cu_q = cu_q, .cu_k = cu_k, .nseq = nseq, .Tq = Tq, .Tk = Tk, .slopes = slopes};
    return varlen_backward(&c->pr, c->dev, c->dt, dq, dk, dv, dout, q, k, v, o, lse, lse_lo, &vl);
}

fg_status fg_attn_varlen_forward(fg_dtype dt, void *o, void *lse, void *lse_lo, const void *q, const void *k,
                                 const void *v, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq, int64_t Tq,
                                 int64_t Tk, const double *slopes, const fg_attn_problem *pr) {
    const fg_attn_varlen vl = {.cu_q = cu_q, .cu_k = cu_k, .nseq = nseq, .Tq = Tq, .Tk = Tk, .slopes = slopes};
    return varlen_forward(pr, FG_CPU, dt, o, lse, lse_lo, q, k, v, &vl);
}

fg_status fg_attn_varlen_backward(fg_dtype dt, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                  const void *k, const void *v, const void *o, const void *lse, const void *lse_lo,
                                  const int64_t *cu_q, const int64_t *cu_k, int64_t nseq, int64_t Tq, int64_t Tk,
                                  const double *slopes, const fg_attn_problem *pr) {
    const fg_attn_varlen vl = {.cu_q = cu_q, .cu_k = cu_k, .nseq = nseq, .Tq = Tq, .Tk = Tk, .slopes = slopes};
    return varlen_backward(pr, FG_CPU, dt, dq, dk, dv, dout, q, k, v, o, lse, lse_lo, &vl);
}

/* ---- the raw CPU kernels, checked (ops/attention_kernels.h) ----
 * pr checked against the dtype and the CPU's caps, then the CPU table: the same kernels
 * fg_attention runs. */
static fg_status raw_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux, const void *q,
                             const void *k, const void *v, const fg_attn_problem *pr) {
    const fg_attention_kernels *kn = attention_kernels(FG_CPU, 0);
    if (!kn) return fg_last_status();
    FG_TRY(fg_attn_problem_check_dtype(pr, dt));
    FG_TRY(fg_attn_check_caps(pr, impl, dt, FG_CPU, caps_for(kn, dt)));
    return kn->forward(impl, dt, o, lse, aux, q, k, v, pr);
}

static fg_status raw_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv, const void *dout,
                              const void *q, const void *k, const void *v, const void *o, const void *lse,
                              const void *aux, const fg_attn_problem *pr) {
    const fg_attention_kernels *kn = attention_kernels(FG_CPU, 1);
    if (!kn) return fg_last_status();
    FG_TRY(fg_attn_problem_check_dtype(pr, dt));
    FG_TRY(fg_attn_check_caps(pr, impl, dt, FG_CPU, caps_for(kn, dt)));
    return kn->backward(impl, dt, dq, dk, dv, dout, q, k, v, o, lse, aux, pr);
}

fg_status fg_attn_naive_forward_f32(float *o, float *lse, float *p, const float *q, const float *k, const float *v,
                                    const fg_attn_problem *pr) {
    return raw_forward(FG_ATTN_NAIVE, FG_F32, o, lse, p, q, k, v, pr);
}

fg_status fg_attn_naive_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                     const float *v, const float *p, const fg_attn_problem *pr) {
    return raw_backward(FG_ATTN_NAIVE, FG_F32, dq, dk, dv, dout, q, k, v, NULL, NULL, p, pr);
}

fg_status fg_attn_flash_forward_f32(float *o, float *lse, const float *q, const float *k, const float *v,
                                    const fg_attn_problem *pr) {
    return raw_forward(FG_ATTN_FLASH, FG_F32, o, lse, NULL, q, k, v, pr);
}

fg_status fg_attn_flash_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                                     const float *v, const float *o, const float *lse, const fg_attn_problem *pr) {
    return raw_backward(FG_ATTN_FLASH, FG_F32, dq, dk, dv, dout, q, k, v, o, lse, NULL, pr);
}

fg_status fg_attn_flash_forward_lo_f32(float *o, float *lse, float *lse_lo, const float *q, const float *k,
                                       const float *v, const fg_attn_problem *pr) {
    return raw_forward(FG_ATTN_FLASH, FG_F32, o, lse, lse_lo, q, k, v, pr);
}

fg_status fg_attn_flash_backward_lo_f32(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                        const float *k, const float *v, const float *o, const float *lse,
                                        const float *lse_lo, const fg_attn_problem *pr) {
    return raw_backward(FG_ATTN_FLASH, FG_F32, dq, dk, dv, dout, q, k, v, o, lse, lse_lo, pr);
}

fg_status fg_attn_naive_forward_f64(double *o, double *lse, double *p, const double *q, const double *k,
                                    const double *v, const fg_attn_problem *pr) {
    return raw_forward(FG_ATTN_NAIVE, FG_F64, o, lse, p, q, k, v, pr);
}

fg_status fg_attn_naive_backward_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                     const double *k, const double *v, const double *p, const fg_attn_problem *pr) {
    return raw_backward(FG_ATTN_NAIVE, FG_F64, dq, dk, dv, dout, q, k, v, NULL, NULL, p, pr);
}

fg_status fg_attn_flash_forward_f64(double *o, double *lse, const double *q, const double *k, const double *v,
                                    const fg_attn_problem *pr) {
    return raw_forward(FG_ATTN_FLASH, FG_F64, o, lse, NULL, q, k, v, pr);
}

fg_status fg_attn_flash_backward_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                     const double *k, const double *v, const double *o, const double *lse,
                                     const fg_attn_problem *pr) {
    return raw_backward(FG_ATTN_FLASH, FG_F64, dq, dk, dv, dout, q, k, v, o, lse, NULL, pr);
}

fg_status fg_attn_flash_forward_lo_f64(double *o, double *lse, double *lse_lo, const double *q, const double *k,
                                       const double *v, const fg_attn_problem *pr) {
    return raw_forward(FG_ATTN_FLASH, FG_F64, o, lse, lse_lo, q, k, v, pr);
}

fg_status fg_attn_flash_backward_lo_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                        const double *k, const double *v, const double *o, const double *lse,
                                        const double *lse_lo, const fg_attn_problem *pr) {
    return raw_backward(FG_ATTN_FLASH, FG_F64, dq, dk, dv, dout, q, k, v, o, lse, lse_lo, pr);
}
