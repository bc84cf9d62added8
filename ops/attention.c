/* attention.c — fg_attention and fg_attention_qkv, the op's one shell for every device: the
 * tensors' checks, the autograd node and its typed state. Below it, the one entry (fg_attn_call_*,
 * ops/attention_entry.c) checks the problem and reaches the device's kernel table (ops/kernels.h:
 * the CPU's are in ops/cpu/attention.c).
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

#include "ops/attention.h"

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
 * and the gradient's in place (the problem's rows, through the entry and the CPU's kernel table
 * like every other call): nothing is gathered or scattered, and a new gradient buffer is written,
 * not zeroed first. Naive gathers the heads into its layout and
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

/* The packed rows of fg_attention_qkv as the flash kernels address them (the problem's rows,
 * fg_attn_layout): heads of width d side by side in rows of qkv's W = (H + 2 H_kv) d and y's H d,
 * one row per time step. */
static fg_attn_layout packed_layout(int64_t T, int64_t H, int64_t Hkv, int64_t d) {
    const int64_t W = (H + 2 * Hkv) * d;
    const fg_attn_rows in = {T * W, d, W}, out = {T * H * d, d, H * d};
    return (fg_attn_layout){.q = in, .k = in, .v = in, .o = out, .dout = out, .dq = in, .dk = in, .dv = in};
}

/* The packed rows' backward: flash reads dY, qkv and y in place and writes (fresh: a new gradient
 * buffer) or adds (an existing one) dQ, dK, dV into qkv's gradient rows g, which the three head
 * groups cover. */
static fg_status qkv_backward_packed(const attention_state *s, fg_tensor *g, int fresh, const fg_tensor *dy) {
    const fg_tensor *x = s->q;
    /* the forward's call again, on the node's copy of its problem (its rows: the packed layout) */
    fg_attn_call call = {.pr = s->pc->pr, .impl = FG_ATTN_FLASH, .dt = x->dtype, .dev = FG_CPU};
    call.pr.rows.write_grads = fresh;
    const int64_t H = call.pr.H, Hkv = call.pr.var.n_kv_heads, d = call.pr.d;
    const size_t es = fg_dtype_size(x->dtype), ko = (size_t)(H * d) * es, vo = (size_t)((H + Hkv) * d) * es;
    char *gp = fg_data(g);
    const char *xp = fg_data(x);
    return fg_attn_call_backward(&call, gp, gp + ko, gp + vo, fg_data(dy), xp, xp + ko, xp + vo, fg_data(s->o),
                                 fg_data(s->lse), s->aux ? fg_data(s->aux) : NULL);
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
    if (st == FG_OK) { /* the kernels read q, k, v and write y on the packed rows (the entry checks the scores) */
        call.pr.rows = packed_layout(T, H, Hkv, d);
        const size_t es = fg_dtype_size(dt), ko = (size_t)(H * d) * es, vo = (size_t)((H + Hkv) * d) * es;
        const char *xp = fg_data(x);
        st = fg_attn_call_forward(&call, fg_data(y), fg_data(lse), lo ? fg_data(lo) : NULL, xp, xp + ko, xp + vo);
    }
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
