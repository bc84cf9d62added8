/* attention.c — fg_attention: argument checks, the autograd node, dispatch to the naive and flash
 * kernels (ops/attention_naive.c, ops/attention_flash.c) or a registered device backend, and the
 * dropout mask shared by both.
 *
 * Legend: B batch, H heads, Nq queries, Nk keys, d head dim.
 *   q (B, H, Nq, d); k, v (B, H, Nk, d) -> o (B, H, Nq, d), lse (B, H, Nq)
 *
 *   (K and V have H_kv heads; see ops/attention.h.)
 *
 * Saved for backward (node->saved): Q, K, V (contiguous), O (an alias of the output), then
 *   flash: L = lse (B, H, Nq), and for float32 also lse_lo (B, H, Nq), the bits of L that rounding
 *          it to float32 lost (see fg_attn_flash_forward_f32)
 *   naive: P = softmax(S) (B, H, Nq, Nk)
 * node->ctx: the resolved problem (attn_ctx), with its own copy of the ALiBi slopes and a reference
 * to the block mask.
 */
#include "ops/attention.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tensor/philox.h"

const char *fg_attn_impl_name(fg_attn_impl impl) {
    switch (impl) {
    case FG_ATTN_NAIVE: return "naive";
    case FG_ATTN_FLASH: return "flash";
    default: return "unknown-impl";
    }
}

fg_attn_opts fg_attn_defaults(void) {
    return (fg_attn_opts){.impl = FG_ATTN_FLASH, .scale = 0, .causal = 0, .dropout_p = 0, .seed = 0,
                          .block_q = 0, .block_k = 0, .variant = {0}, .custom = {0}};
}

int fg_attn_has_variant(const fg_attn_opts *o) {
    if (!o) return 0;
    const fg_attn_variant *v = &o->variant;
    const fg_attn_custom *c = &o->custom;
    return v->n_kv_heads != 0 || v->window || v->alibi || v->softcap != 0 || c->score_mod || c->score_mod_grad ||
           c->mask || c->block_mask;
}

/* ---- dropout: Z(b, h, i, j) = keep ? 1/(1-p) : 0, regenerated wherever it is needed ---- */
#define FG_DEFINE_DROPOUT_SCALE(T, SFX)                                                             \
    void fg_attn_dropout_scale_##SFX(T *x, int64_t n, uint64_t seed, uint32_t threshold, T inv_keep, \
                                     int64_t b, int64_t h, int64_t i, int64_t j0) {                 \
        if (threshold == 0) return;                                                                 \
        /* counter = (j/4, i, h, b), word j%4: one Philox block serves four keys (fg_attn_keep) */  \
        const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};                           \
        uint32_t out[4];                                                                             \
        int64_t have = -1; /* the block index `out` holds */                                        \
        for (int64_t jj = 0; jj < n; jj++) {                                                        \
            int64_t j = j0 + jj;                                                                    \
            if ((j >> 2) != have) {                                                                 \
                uint32_t ctr[4] = {(uint32_t)(j >> 2), (uint32_t)i, (uint32_t)h, (uint32_t)b};      \
                fg_philox4x32_10(ctr, key, out);                                                    \
                have = j >> 2;                                                                      \
            }                                                                                        \
            x[jj] = out[j & 3] >= threshold ? x[jj] * inv_keep : (T)0;                              \
        }                                                                                            \
    }
FG_DEFINE_DROPOUT_SCALE(float, f32)
FG_DEFINE_DROPOUT_SCALE(double, f64)

/* ---- device backends ---- */
static const fg_attn_backend *attn_backends[FG_DEVICE_COUNT];
void fg_register_attention_backend(fg_device dev, const fg_attn_backend *be) {
    if (dev > FG_CPU && dev < FG_DEVICE_COUNT) attn_backends[dev] = be;
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
    if (!isfinite(o.scale))
        return fg_error(FG_ERR_ARG, "attention: scale must be finite, got %g", o.scale);
    if (!(o.dropout_p >= 0 && o.dropout_p < 1))
        return fg_error(FG_ERR_ARG, "attention: dropout p must be in [0, 1), got %g", o.dropout_p);
    if (o.block_q < 0 || o.block_q > FG_ATTN_MAX_BLOCK || o.block_k < 0 || o.block_k > FG_ATTN_MAX_BLOCK)
        return fg_error(FG_ERR_ARG, "attention: block sizes must be in [1, %d] (0 = default), got block_q=%d block_k=%d",
                        FG_ATTN_MAX_BLOCK, o.block_q, o.block_k);
    /* ---- variants ---- */
    fg_attn_variant var = o.variant;
    if (var.n_kv_heads == 0) var.n_kv_heads = H;
    if (var.n_kv_heads < 0 || var.n_kv_heads > lim || (H > 0 && (var.n_kv_heads < 1 || H % var.n_kv_heads != 0)) ||
        (H == 0 && var.n_kv_heads != 0))
        return fg_error(FG_ERR_SHAPE, "attention: H = %lld query heads must be a multiple of the %lld K/V heads",
                        (long long)H, (long long)var.n_kv_heads);
    var.window = var.window ? 1 : 0;
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
        return fg_error(FG_ERR_ARG, "attention: a score_mod needs its derivative score_mod_grad, and the reverse (got %s "
                                    "without %s)", c->score_mod ? "score_mod" : "score_mod_grad",
                        c->score_mod ? "score_mod_grad" : "score_mod");
    if (c->block_mask) {
        int64_t bB, bH, bNq, bNk;
        int bbq, bbk;
        fg_attn_block_mask_dims(c->block_mask, &bB, &bH, &bNq, &bNk, &bbq, &bbk);
        if (!c->mask)
            return fg_error(FG_ERR_ARG, "attention: a block mask needs the mask callback it was built from");
        if (bNq != Nq || bNk != Nk || (bB != 1 && bB != B) || (bH != 1 && bH != H))
            return fg_error(FG_ERR_SHAPE, "attention: the block mask was built for B=%lld H=%lld Nq=%lld Nk=%lld, the "
                                          "inputs are B=%lld H=%lld Nq=%lld Nk=%lld", (long long)bB, (long long)bH,
                            (long long)bNq, (long long)bNk, (long long)B, (long long)H, (long long)Nq, (long long)Nk);
        if (o.block_q == 0) o.block_q = bbq;
        if (o.block_k == 0) o.block_k = bbk;
        if (o.block_q != bbq || o.block_k != bbk)
            return fg_error(FG_ERR_ARG, "attention: the block mask has %dx%d tiles but the flash blocks are %dx%d",
                            bbq, bbk, o.block_q, o.block_k);
    }
    *pr = (fg_attn_problem){
        .B = B, .H = H, .Nq = Nq, .Nk = Nk, .d = d,
        .scale = o.scale != 0 ? o.scale : 1.0 / sqrt((double)d),
        .causal = o.causal ? 1 : 0,
        .dropout_p = o.dropout_p,
        .seed = o.seed,
        .block_q = o.block_q ? o.block_q : FG_ATTN_DEFAULT_BLOCK_Q,
        .block_k = o.block_k ? o.block_k : FG_ATTN_DEFAULT_BLOCK_K,
        .var = var,
        .custom = *c,
    };
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
        if (t[i]->dtype != FG_F32 && t[i]->dtype != FG_F64)
            return fg_error(FG_ERR_DTYPE, "attention: %s has unsupported dtype %d", nm[i], (int)t[i]->dtype);
    }
    for (int i = 1; i < 3; i++) {
        if (t[i]->dtype != q->dtype)
            return fg_error(FG_ERR_DTYPE, "attention: %s is %s but q is %s", nm[i], fg_dtype_name(t[i]->dtype),
                            fg_dtype_name(q->dtype));
        if (t[i]->device != q->device)
            return fg_error(FG_ERR_DEVICE, "attention: %s is on %s but q is on %s", nm[i],
                            fg_device_name(t[i]->device), fg_device_name(q->device));
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

/* A device backend runs only the variants it lists in caps, and never user callbacks. */
static fg_status check_device_variant(const fg_attn_problem *pr, fg_device dev) {
    if (dev == FG_CPU) return FG_OK;
    const fg_attn_backend *be = attn_backends[dev];
    const unsigned caps = be ? be->caps : 0;
    const char *what = NULL;
    if (pr->custom.score_mod || pr->custom.mask) what = "user callbacks (score_mod, mask), which run on the CPU only";
    else if (pr->var.n_kv_heads != pr->H && !(caps & FG_ATTN_CAP_GQA)) what = "grouped-query attention";
    else if (pr->var.window && !(caps & FG_ATTN_CAP_WINDOW)) what = "sliding windows";
    else if (pr->var.alibi && !(caps & FG_ATTN_CAP_ALIBI)) what = "ALiBi";
    else if (pr->var.softcap > 0 && !(caps & FG_ATTN_CAP_SOFTCAP)) what = "softcapping";
    if (what)
        return fg_error(FG_ERR_DEVICE, "attention on %s: this build's kernels do not support %s", fg_device_name(dev),
                        what);
    return FG_OK;
}

/* ---- kernels, by device / dtype / impl ---- */
/* aux: naive's P, or flash's lse_lo (either may be NULL). */
static fg_status run_forward(const fg_attn_problem *pr, fg_attn_impl impl, fg_device dev, fg_dtype dt,
                             void *o, void *lse, void *aux, const void *q, const void *k, const void *v) {
    if (dev != FG_CPU) {
        const fg_attn_backend *be = attn_backends[dev];
        if (!be || !be->forward)
            return fg_error(FG_ERR_DEVICE, "attention: no %s kernels in this build", fg_device_name(dev));
        return be->forward(impl, dt, o, lse, aux, q, k, v, pr);
    }
    if (impl == FG_ATTN_NAIVE)
        return dt == FG_F32 ? fg_attn_naive_forward_f32(o, lse, aux, q, k, v, pr)
                            : fg_attn_naive_forward_f64(o, lse, aux, q, k, v, pr);
    return dt == FG_F32 ? fg_attn_flash_forward_lo_f32(o, lse, aux, q, k, v, pr)
                        : fg_attn_flash_forward_lo_f64(o, lse, aux, q, k, v, pr);
}

static fg_status run_backward(const fg_attn_problem *pr, fg_attn_impl impl, fg_device dev, fg_dtype dt,
                              void *dq, void *dk, void *dv, const void *dout, const void *q, const void *k,
                              const void *v, const void *o, const void *lse, const void *aux) {
    if (dev != FG_CPU) {
        const fg_attn_backend *be = attn_backends[dev];
        if (!be || !be->backward)
            return fg_error(FG_ERR_DEVICE, "attention backward: no %s kernels in this build", fg_device_name(dev));
        return be->backward(impl, dt, dq, dk, dv, dout, q, k, v, o, lse, aux, pr);
    }
    if (impl == FG_ATTN_NAIVE)
        return dt == FG_F32 ? fg_attn_naive_backward_f32(dq, dk, dv, dout, q, k, v, aux, pr)
                            : fg_attn_naive_backward_f64(dq, dk, dv, dout, q, k, v, aux, pr);
    return dt == FG_F32 ? fg_attn_flash_backward_lo_f32(dq, dk, dv, dout, q, k, v, o, lse, aux, pr)
                        : fg_attn_flash_backward_lo_f64(dq, dk, dv, dout, q, k, v, o, lse, aux, pr);
}

/* ---- the node's context: the resolved problem, owning what it points at ---- */
typedef struct {
    fg_attn_problem pr;
    fg_attn_impl impl;
    double *slopes; /* pr.var.alibi_slopes points here (H of them), or NULL */
} attn_ctx;

static void attn_ctx_free(void *p) {
    attn_ctx *c = p;
    if (!c) return;
    fg_attn_block_mask_release(c->pr.custom.block_mask);
    if (c->slopes) fg_free(FG_CPU, c->slopes);
    fg_free(FG_CPU, c);
}

/* A copy of *pr that owns its slopes and holds a reference to the block mask; NULL on OOM. */
static attn_ctx *attn_ctx_new(const fg_attn_problem *pr, fg_attn_impl impl) {
    attn_ctx *c = fg_alloc(FG_CPU, sizeof *c);
    if (!c) {
        fg_error(FG_ERR_OOM, "attention: cannot allocate the backward's context");
        return NULL;
    }
    *c = (attn_ctx){.pr = *pr, .impl = impl, .slopes = NULL};
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

/* ---- backward rule ---- */
/* Reverses  o = attention(q, k, v): adds dQ, dK, dV into the inputs' gradient buffers. */
static fg_status attention_backward(fg_node *n) {
    fg_tensor *q = n->saved[0], *k = n->saved[1], *v = n->saved[2], *o = n->saved[3];
    fg_tensor *lse_or_p = n->saved[4], *lo = n->n_saved > 5 ? n->saved[5] : NULL;
    const attn_ctx *cx = n->ctx;
    const fg_attn_problem pr = cx->pr;
    const fg_attn_impl impl = cx->impl;
    fg_tensor *g[3];
    for (int i = 0; i < 3; i++) {
        fg_clear_error();
        g[i] = fg_grad_buffer(n->inputs[i]);
        if (!g[i] && fg_last_status() != FG_OK) return fg_last_status(); /* could not allocate it */
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
    const int flash = impl == FG_ATTN_FLASH;
    fg_status st = run_backward(&pr, impl, q->device, q->dtype, g[0] ? fg_data(g[0]) : NULL,
                                g[1] ? fg_data(g[1]) : NULL, g[2] ? fg_data(g[2]) : NULL, fg_data(dout), fg_data(q),
                                fg_data(k), fg_data(v), fg_data(o), flash ? fg_data(lse_or_p) : NULL,
                                flash ? (lo ? fg_data(lo) : NULL) : fg_data(lse_or_p));
    fg_release(dout);
    return st;
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
    fg_attn_problem pr;
    if (fg_attn_problem_init(&pr, q->shape[0], q->shape[1], q->shape[2], k->shape[2], q->shape[3], &op) != FG_OK)
        return NULL;
    const fg_dtype dt = q->dtype;
    const fg_device dev = q->device;
    if (check_device_variant(&pr, dev) != FG_OK) return NULL;
    /* a mask without a block mask: flash builds one for this call (and its backward) */
    fg_attn_block_mask *own_bm = NULL;
    if (op.impl == FG_ATTN_FLASH && pr.custom.mask && !pr.custom.block_mask && pr.B > 0 && pr.H > 0) {
        own_bm = fg_attn_block_mask_create(pr.custom.mask, pr.custom.user, pr.B, pr.H, pr.Nq, pr.Nk, pr.block_q,
                                           pr.block_k);
        if (!own_bm) return NULL;
        pr.custom.block_mask = own_bm;
    }
    const int wants_grad = fg_grad_enabled() && (q->requires_grad || k->requires_grad || v->requires_grad);

    fg_tensor *qc = fg_contiguous(q), *kc = qc ? fg_contiguous(k) : NULL, *vc = kc ? fg_contiguous(v) : NULL;
    const int64_t oshape[4] = {pr.B, pr.H, pr.Nq, pr.d}, lshape[3] = {pr.B, pr.H, pr.Nq};
    const int64_t pshape[4] = {pr.B, pr.H, pr.Nq, pr.Nk};
    fg_tensor *o = vc ? fg_empty(dt, dev, 4, oshape) : NULL;
    fg_tensor *lse = o ? fg_empty(dt, dev, 3, lshape) : NULL;
    /* naive keeps P for its backward (without one, the kernel uses per-(b, h) scratch); flash in
     * float32 keeps lse_lo */
    fg_tensor *aux = NULL;
    int want_aux = 0;
    if (wants_grad && op.impl == FG_ATTN_NAIVE) {
        want_aux = 1;
        aux = lse ? fg_empty(dt, dev, 4, pshape) : NULL;
    } else if (wants_grad && dt == FG_F32) {
        want_aux = 1;
        aux = lse ? fg_empty(dt, dev, 3, lshape) : NULL;
    }
    fg_status st = FG_OK;
    if (!lse || (want_aux && !aux))
        st = fg_last_status() != FG_OK ? fg_last_status() : fg_error(FG_ERR_OOM, "attention: cannot allocate outputs");
    if (st == FG_OK)
        st = run_forward(&pr, op.impl, dev, dt, fg_data(o), fg_data(lse), aux ? fg_data(aux) : NULL, fg_data(qc),
                         fg_data(kc), fg_data(vc));
    if (st == FG_OK) {
        fg_tensor *inputs[3] = {q, k, v};
        fg_node *n = fg_record(o, "attention", attention_backward, 3, inputs);
        if (n) {
            fg_tensor *oa = fg_alias(o);
            attn_ctx *cx = oa ? attn_ctx_new(&pr, op.impl) : NULL;
            if (!oa || !cx) {
                st = fg_last_status();
                fg_release(oa);
            } else {
                n->ctx = cx;
                n->ctx_free = attn_ctx_free;
                fg_node_save(n, qc);
                fg_node_save(n, kc);
                fg_node_save(n, vc);
                fg_node_save(n, oa);
                if (op.impl == FG_ATTN_FLASH) {
                    fg_node_save(n, lse);
                    if (aux) fg_node_save(n, aux); /* lse_lo */
                } else {
                    fg_node_save(n, aux);          /* P */
                }
                fg_release(oa);
            }
        }
    }
    fg_release(qc);
    fg_release(kc);
    fg_release(vc);
    fg_release(aux);
    fg_attn_block_mask_release(own_bm); /* the node's context holds its own reference */
    if (st != FG_OK) {
        fg_release(o);
        fg_release(lse);
        return NULL;
    }
    if (lse_out) *lse_out = lse;
    else fg_release(lse);
    return o;
}
