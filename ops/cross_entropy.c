/* cross_entropy.c — fused softmax + negative log-likelihood, mean over the counted rows.
 *
 * Legend: logits is (..., V), seen as R = numel / V rows of V classes; targets holds R int32
 * class ids (-1 = ignore the row); out is (1): the mean loss over the `count` rows whose target is
 * not -1 (0 when there are none).
 * saved for backward: X (logits, contiguous), lse (R) = per-row logsumexp, a copy of targets in
 * the logits' device memory (the kernels of every device read them there).
 * The probabilities (R, V) are never stored; the backward recomputes exp(x - lse).
 *
 *   lse_r = max_r + log sum_j exp(x_rj - max_r)        loss = sum_r (lse_r - x_r,t_r) / count
 *   d loss / d x_rj = (softmax(x_r)_j - [j == t_r]) / count
 *
 * The kernels are in ops/cpu/cross_entropy.c.
 */
#include <math.h>
#include <string.h>

#include "ops/cpu/cross_entropy.h"
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the op, for every device ---- */

/* The targets' copy in device d's memory (R int32 ids; freed by targets_free[d]). */
static void targets_free_cpu(void *p) { fg_free(FG_CPU, p); }
static void targets_free_cuda(void *p) { fg_free(FG_CUDA, p); }
static void (*const targets_free[FG_DEVICE_COUNT])(void *) = {
    [FG_CPU] = targets_free_cpu, [FG_CUDA] = targets_free_cuda};

static int32_t *targets_copy(const char *op, fg_device d, const int32_t *targets, int64_t R) {
    const size_t nbytes = (size_t)R * sizeof(int32_t);
    int32_t *t = fg_alloc(d, nbytes ? nbytes : 1);
    if (!t) {
        fg_error(FG_ERR_OOM, "%s: out of memory for %zu bytes of targets on %s", op, nbytes, fg_device_name(d));
        return NULL;
    }
    if (nbytes && d == FG_CPU)
        memcpy(t, targets, nbytes);
    else if (nbytes)
        fg_backend(d)->copy_from_host(t, targets, nbytes); /* waits for the copy */
    return t;
}

/* What the backward needs. targets is the node's ctx (ctx_free frees it). */
typedef struct {
    fg_tensor *x, *lse;
    const int32_t *targets;
    int64_t R, V, count;
} cross_entropy_state;

/* inputs {logits} */
static fg_status cross_entropy_backward(fg_node *n) {
    const cross_entropy_state *s = FG_NODE_STATE(n, cross_entropy_state);
    fg_tensor *dx;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    if (!dx || s->count == 0) return FG_OK; /* nothing counted: the loss is the constant 0 */
    const fg_kernels *k = fg_kernels_for(s->x->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = k->cross_entropy.backward(s->x->dtype, fg_data(dx), fg_data(dout), fg_data(s->x), fg_data(s->lse),
                                             s->targets, s->R, s->V, s->count);
    fg_release(dout);
    return st;
}

fg_tensor *fg_cross_entropy(fg_tensor *logits, const int32_t *targets) {
    static const char op[] = "cross_entropy";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "logits", logits) != FG_OK) return NULL;
    if (logits->ndim < 1 || logits->shape[logits->ndim - 1] < 1) {
        fg_error(FG_ERR_SHAPE, "%s: logits %s must be (..., V) with V >= 1", op, FG_SHP(logits, b));
        return NULL;
    }
    int64_t V = logits->shape[logits->ndim - 1], R = fg_numel(logits) / V, count = 0;
    if (R > 0 && !targets) {
        fg_error(FG_ERR_ARG, "%s: targets is NULL for logits %s", op, FG_SHP(logits, b));
        return NULL;
    }
    for (int64_t r = 0; r < R; r++) {
        if (targets[r] < -1 || targets[r] >= V) {
            fg_error(FG_ERR_ARG, "%s: target %d in row %lld is outside [-1, %lld) for logits %s", op, (int)targets[r],
                     (long long)r, (long long)V, FG_SHP(logits, b));
            return NULL;
        }
        count += targets[r] >= 0;
    }
    const fg_kernels *k = fg_kernels_for(logits->device, op);
    if (!k) return NULL;
    if (!k->cross_entropy.forward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    const fg_device dev = logits->device;
    const int64_t one = 1;
    int32_t *t = targets_copy(op, dev, targets, R);
    fg_tensor *X = t ? fg_op_contiguous(logits) : NULL;
    fg_tensor *lse = X ? fg_empty(logits->dtype, dev, 1, &R) : NULL;
    fg_tensor *out = lse ? fg_empty(logits->dtype, dev, 1, &one) : NULL;
    if (out &&
        k->cross_entropy.forward(logits->dtype, fg_data(out), fg_data(lse), fg_data(X), t, R, V, count) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    fg_node *node = out ? fg_record(out, op, cross_entropy_backward, 1, (fg_tensor *[]){logits}) : NULL;
    if (node) {
        cross_entropy_state *s = FG_NODE_STATE(node, cross_entropy_state);
        s->x = fg_node_keep(node, X);
        s->lse = fg_node_keep(node, lse);
        s->targets = t;
        s->R = R, s->V = V, s->count = count;
        node->ctx = t; /* freed with the node */
        node->ctx_free = targets_free[dev];
    } else if (t) {
        targets_free[dev](t);
    }
    fg_release(X);
    fg_release(lse);
    return out;
}

/* ============================================================================================
 * linear_cross_entropy: the LM head and the loss in one op, the (R, V) logits never all live
 *
 * Legend: x (..., C) seen as R rows, w (V, C) (the head's weight, nn.Linear's layout), targets R
 * ids (-1 = ignore), softcap c (0 = none); out (1) = cross_entropy(z, targets), the mean over the
 * `count` counted rows, of z = x @ wᵀ or, with a softcap, z = c tanh(x @ wᵀ / c). Rows go in chunks of Rc (chunk_rows, or by default the fewest chunks of about
 * LCE_CHUNK_ELEMS logits, at least LCE_MIN_ROWS rows, made equal):
 *     logits_c (Rc, V) = x_c @ wᵀ                              (one GEMM per chunk)
 *     z_c = c tanh(logits_c / c)  (softcap; else z_c = logits_c; t = tanh(logits_c / c) kept)
 *     lse_r = logsumexp(z_c row r); loss = sum_r (lse_r - z_r,t_r) / count
 * and, when a gradient is wanted, the gradient for dloss = 1 right away, from the chunk still in
 * the cache (as llm.c's fused classifier does), so nothing has to be recomputed later:
 *     dz_c = (softmax(z_c) - onehot) / count                    (float32: over z_c, in place)
 *     dlogits_c = dz_c (1 - t²)   (softcap; else dlogits_c = dz_c)
 *     dx1_c (Rc, C) = dlogits_c @ w         dw1 (V, C) += dlogits_cᵀ @ x_c
 * saved for backward: dx1 (R, C) and dw1 (V, C), the gradients for dloss = 1. The backward is
 * linear in dloss:  dx += dloss · dx1,  dw += dloss · dw1  (exact when dloss is 1 or a power of 2).
 *
 * Same numbers as fg_cross_entropy(fg_linear(x, w, NULL), targets), or with a softcap as
 * fg_cross_entropy(fg_softcap(fg_linear(x, w, NULL), c), targets): the same GEMM shapes, the same
 * element operations (softcap's too) and row kernels per row; the loss summed in row order. With one chunk (R ≤ Rc) the gradients are the
 * composition's too (the composition's backward adds into zeroed gradients); with more chunks, dw
 * sums the chunks' products in chunk order, a different rounding of the same sum.
 * The CPU only (float32, float64; the kernels, and LCE_CHUNK_ELEMS and LCE_MIN_ROWS, in
 * ops/cpu/cross_entropy.c); on other devices the op is the composition.
 * ============================================================================================ */
typedef struct {
    fg_tensor *dx1, *dw1; /* the gradients for dloss = 1 (NULL where the input wants none) */
} linear_cross_entropy_state;

/* inputs {x, w} */
static fg_status linear_cross_entropy_backward(fg_node *n) {
    const linear_cross_entropy_state *s = FG_NODE_STATE(n, linear_cross_entropy_state);
    fg_tensor *dx, *dw;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    FG_TRY(fg_grad_get(n->inputs[1], &dw));
    if (!dx && !dw) return FG_OK;
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    const double g = fg_get(dout, 0);
    fg_release(dout);
    /* forward: out = cross_entropy(x @ wᵀ)  ->  dx += dloss · dx1,  dw += dloss · dw1 */
    if (dx && s->dx1) fg__cpu_lce_axpy(dx->dtype, fg_data(dx), g, fg_data(s->dx1), fg_numel(dx));
    if (dw && s->dw1) fg__cpu_lce_axpy(dw->dtype, fg_data(dw), g, fg_data(s->dw1), fg_numel(dw));
    return FG_OK;
}

fg_tensor *fg_linear_cross_entropy(fg_tensor *x, fg_tensor *w, const int32_t *targets, double softcap,
                                   int64_t chunk_rows) {
    static const char op[] = "linear_cross_entropy";
    char b1[FG_SHAPE_BUF], b2[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK || fg_op_check_like(op, "w", w, "x", x) != FG_OK) return NULL;
    if (x->ndim < 1 || w->ndim != 2 || w->shape[1] != x->shape[x->ndim - 1] || w->shape[0] < 1) {
        fg_error(FG_ERR_SHAPE, "%s: x %s and w %s do not fit: need x (..., C) and w (V, C) with V >= 1", op,
                 FG_SHP(x, b1), FG_SHP(w, b2));
        return NULL;
    }
    if (!(softcap >= 0) || isinf(softcap)) {
        fg_error(FG_ERR_ARG, "%s: softcap %g must be finite and >= 0 (0: none)", op, softcap);
        return NULL;
    }
    if (chunk_rows < 0) {
        fg_error(FG_ERR_ARG, "%s: chunk_rows %lld must not be negative (0: the default)", op, (long long)chunk_rows);
        return NULL;
    }
    if (x->device != FG_CPU) { /* the composition, on every other device */
        fg_tensor *logits = fg_linear(x, w, NULL);
        fg_tensor *z = logits && softcap > 0 ? fg_softcap(logits, softcap) : fg_retain(logits);
        fg_tensor *loss = z ? fg_cross_entropy(z, targets) : NULL;
        fg_release(z);
        fg_release(logits);
        return loss;
    }
    const int64_t V = w->shape[0], C = w->shape[1], R = fg_numel(x) / (C > 0 ? C : 1);
    int64_t count = 0;
    if (R > 0 && !targets) {
        fg_error(FG_ERR_ARG, "%s: targets is NULL for x %s", op, FG_SHP(x, b1));
        return NULL;
    }
    for (int64_t r = 0; r < R; r++) {
        if (targets[r] < -1 || targets[r] >= V) {
            fg_error(FG_ERR_ARG, "%s: target %d in row %lld is outside [-1, %lld) for w %s", op, (int)targets[r],
                     (long long)r, (long long)V, FG_SHP(w, b2));
            return NULL;
        }
        count += targets[r] >= 0;
    }
    const int grad = fg_grad_enabled(), gx = grad && x->requires_grad, gw = grad && w->requires_grad;
    const int64_t one = 1;
    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *W = X ? fg_op_contiguous(w) : NULL;
    fg_tensor *out = W ? fg_empty(x->dtype, FG_CPU, 1, &one) : NULL;
    fg_tensor *dx1 = out && gx ? fg_empty(x->dtype, FG_CPU, 2, (int64_t[]){R, C}) : NULL;
    fg_tensor *dw1 = out && gw ? fg_empty(x->dtype, FG_CPU, 2, (int64_t[]){V, C}) : NULL;
    if (out && ((gx && !dx1) || (gw && !dw1))) {
        fg_release(out);
        out = NULL;
    }
    if (out && fg__cpu_linear_cross_entropy_forward(x->dtype, fg_data(out), fg_data(X), fg_data(W), targets, R, C, V,
                                                    count, softcap, chunk_rows, dx1 ? fg_data(dx1) : NULL,
                                                    dw1 ? fg_data(dw1) : NULL) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    fg_node *node = out ? fg_record(out, op, linear_cross_entropy_backward, 2, (fg_tensor *[]){x, w}) : NULL;
    if (node) {
        linear_cross_entropy_state *s = FG_NODE_STATE(node, linear_cross_entropy_state);
        s->dx1 = fg_node_keep(node, dx1);
        s->dw1 = fg_node_keep(node, dw1);
    }
    fg_release(dx1);
    fg_release(dw1);
    fg_release(X);
    fg_release(W);
    return out;
}
