/* attention.c — fg_attention: argument checks, the autograd node, dispatch to the naive and flash
 * kernels (ops/attention_naive.c, ops/attention_flash.c) or a registered device backend, and the
 * dropout mask shared by both.
 *
 * Legend: B batch, H heads, Nq queries, Nk keys, d head dim.
 *   q (B, H, Nq, d); k, v (B, H, Nk, d) -> o (B, H, Nq, d), lse (B, H, Nq)
 *
 * Saved for backward (node->saved): Q, K, V (contiguous), O (an alias of the output), then
 *   flash: L = lse (B, H, Nq), and for float32 also lse_lo (B, H, Nq), the bits of L that rounding
 *          it to float32 lost (see fg_attn_flash_forward_f32)
 *   naive: P = softmax(S) (B, H, Nq, Nk)
 * fargs: [0] scale, [1] dropout p;  iargs: [0] impl, [1] causal, [2] seed, [3] block_q, [4] block_k.
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
                          .block_q = 0, .block_k = 0};
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
    *pr = (fg_attn_problem){
        .B = B, .H = H, .Nq = Nq, .Nk = Nk, .d = d,
        .scale = o.scale != 0 ? o.scale : 1.0 / sqrt((double)d),
        .causal = o.causal ? 1 : 0,
        .dropout_p = o.dropout_p,
        .seed = o.seed,
        .block_q = o.block_q ? o.block_q : FG_ATTN_DEFAULT_BLOCK_Q,
        .block_k = o.block_k ? o.block_k : FG_ATTN_DEFAULT_BLOCK_K,
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
    if (q->shape[0] != k->shape[0] || q->shape[0] != v->shape[0] || q->shape[1] != k->shape[1] ||
        q->shape[1] != v->shape[1] || q->shape[3] != k->shape[3] || q->shape[3] != v->shape[3] ||
        k->shape[2] != v->shape[2])
        return fg_error(FG_ERR_SHAPE,
                        "attention: q %s, k %s, v %s do not fit: need q (B, H, Nq, d), k and v (B, H, Nk, d)",
                        fg_shape_str(q, b1, sizeof b1), fg_shape_str(k, b2, sizeof b2), fg_shape_str(v, b3, sizeof b3));
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

/* ---- backward rule ---- */
/* Reverses  o = attention(q, k, v): adds dQ, dK, dV into the inputs' gradient buffers. */
static fg_status attention_backward(fg_node *n) {
    fg_tensor *q = n->saved[0], *k = n->saved[1], *v = n->saved[2], *o = n->saved[3];
    fg_tensor *lse_or_p = n->saved[4], *lo = n->n_saved > 5 ? n->saved[5] : NULL;
    fg_attn_problem pr = {
        .B = q->shape[0], .H = q->shape[1], .Nq = q->shape[2], .Nk = k->shape[2], .d = q->shape[3],
        .scale = n->fargs[0], .dropout_p = n->fargs[1],
        .causal = (int)n->iargs[1], .seed = (uint64_t)n->iargs[2],
        .block_q = (int)n->iargs[3], .block_k = (int)n->iargs[4],
    };
    fg_attn_impl impl = (fg_attn_impl)n->iargs[0];
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
    fg_attn_problem pr;
    if (fg_attn_problem_init(&pr, q->shape[0], q->shape[1], q->shape[2], k->shape[2], q->shape[3], &op) != FG_OK)
        return NULL;
    const fg_dtype dt = q->dtype;
    const fg_device dev = q->device;
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
            if (!oa) {
                st = fg_last_status();
            } else {
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
                n->fargs[0] = pr.scale;
                n->fargs[1] = pr.dropout_p;
                n->iargs[0] = op.impl;
                n->iargs[1] = pr.causal;
                n->iargs[2] = (int64_t)pr.seed;
                n->iargs[3] = pr.block_q;
                n->iargs[4] = pr.block_k;
            }
        }
    }
    fg_release(qc);
    fg_release(kc);
    fg_release(vc);
    fg_release(aux);
    if (st != FG_OK) {
        fg_release(o);
        fg_release(lse);
        return NULL;
    }
    if (lse_out) *lse_out = lse;
    else fg_release(lse);
    return o;
}
