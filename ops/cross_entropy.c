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
#include <string.h>

#include "ops/cpu/cross_entropy.h"
#include "ops/kernels_cpu.h"
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
 * ids (-1 = ignore); out (1) = cross_entropy(x @ wᵀ, targets), the mean over the `count` counted
 * rows. Rows go in chunks of Rc (chunk_rows, or by default the fewest chunks of about
 * LCE_CHUNK_ELEMS logits, at least LCE_MIN_ROWS rows, made equal):
 *     logits_c (Rc, V) = x_c @ wᵀ                              (one GEMM per chunk)
 *     lse_r = logsumexp(logits_c row r); loss = sum_r (lse_r - logits_r,t_r) / count
 * and, when a gradient is wanted, the gradient for dloss = 1 right away, from the chunk still in
 * the cache (as llm.c's fused classifier does), so nothing has to be recomputed later:
 *     dlogits_c = (softmax(logits_c) - onehot) / count          (float32: over logits_c, in place)
 *     dx1_c (Rc, C) = dlogits_c @ w         dw1 (V, C) += dlogits_cᵀ @ x_c
 * saved for backward: dx1 (R, C) and dw1 (V, C), the gradients for dloss = 1. The backward is
 * linear in dloss:  dx += dloss · dx1,  dw += dloss · dw1  (exact when dloss is 1 or a power of 2).
 *
 * Same numbers as fg_cross_entropy(fg_linear(x, w, NULL), targets): the same GEMM shapes and row
 * kernels per row; the loss summed in row order. With one chunk (R ≤ Rc) the gradients are the
 * composition's too (the composition's backward adds into zeroed gradients); with more chunks, dw
 * sums the chunks' products in chunk order, a different rounding of the same sum.
 * The CPU only (float32, float64); on other devices the op is the composition.
 * ============================================================================================ */
#define LCE_CHUNK_ELEMS ((int64_t)1 << 24) /* logits per chunk: 64 MiB of float32 */
/* Fewer rows make the GEMMs slow: each chunk's products read all of w again (V C elements) for a
 * few rows of work, and the dw product's depth is the chunk's rows. */
#define LCE_MIN_ROWS 256

static int64_t lce_chunk_rows(int64_t R, int64_t V, int64_t chunk) {
    if (chunk > 0) return chunk < R ? chunk : (R > 0 ? R : 1);
    int64_t rc = LCE_CHUNK_ELEMS / (V > 0 ? V : 1);
    if (rc < LCE_MIN_ROWS) rc = LCE_MIN_ROWS;
    if (rc >= R) return R > 0 ? R : 1;
    /* the chunks that size needs, made equal (a short last chunk would run its three GEMMs far
     * below the others' speed): ceil(R / n) <= rc rows each, the last at most n - 1 rows shorter */
    const int64_t n = (R + rc - 1) / rc;
    return (R + n - 1) / n;
}

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

/* The forward on the CPU (see above). X (R, C) and W (V, C) contiguous; dx1 / dw1 NULL when not
 * wanted; lse and xt (R) scratch. */
static fg_status lce_forward_cpu(fg_dtype dt, void *loss, fg_tensor *X, fg_tensor *W, const int32_t *t, int64_t R,
                                 int64_t C, int64_t V, int64_t count, int64_t chunk, fg_tensor *dx1, fg_tensor *dw1) {
    const size_t esz = fg_dtype_size(dt);
    const int64_t Rc = lce_chunk_rows(R, V, chunk), nchunk = R > 0 ? (R + Rc - 1) / Rc : 0;
    const int want_grad = dx1 || dw1;
    fg_tensor *lse = fg_empty(dt, FG_CPU, 1, &R);
    fg_tensor *logits = lse ? fg_empty(dt, FG_CPU, 2, (int64_t[]){Rc, V}) : NULL;
    /* float32 turns the logits into their gradient in place; float64 (gradient checks) uses a
     * second buffer and the plain backward kernel */
    fg_tensor *dl = logits && want_grad && dt == FG_F64 ? fg_empty(dt, FG_CPU, 2, (int64_t[]){Rc, V}) : NULL;
    const int dl_ok = !want_grad || dt == FG_F32 || dl;
    double *xt = logits && dl_ok ? fg_alloc(FG_CPU, (size_t)(R > 0 ? R : 1) * sizeof *xt) : NULL;
    fg_status st = xt ? FG_OK : fg_last_status();
    const char *xp = X ? fg_data(X) : NULL, *wp = fg_data(W);
    const double one = 1.0;
    for (int64_t c = 0; c < nchunk && st == FG_OK; c++) {
        const int64_t r0 = c * Rc, rn = R - r0 < Rc ? R - r0 : Rc;
        const char *xc = xp + (size_t)(r0 * C) * esz;
        const int32_t *tc = t + r0;
        char *lg = fg_data(logits), *ls = (char *)fg_data(lse) + (size_t)r0 * esz;
        /* logits_c (rn, V) = x_c (rn, C) @ wᵀ, as fg_linear computes it */
        st = fg_cpu_matmul_gemm(dt, 0, 1, rn, V, C, 1.0, xc, C, 0, wp, C, 0, 0.0, NULL, lg, V, 0, 1);
        if (st != FG_OK) break;
        double unused;
        fg__cpu_cross_entropy_rows(dt, &unused, ls, lg, tc, rn, V);
        for (int64_t r = 0; r < rn; r++)
            if (tc[r] >= 0)
                xt[r0 + r] =
                    dt == FG_F32 ? (double)((const float *)lg)[r * V + tc[r]] : ((const double *)lg)[r * V + tc[r]];
        if (!want_grad || count == 0) continue;
        /* dlogits_c = (softmax - onehot) / count, as into the composition's fresh (zero) gradient */
        char *d = lg;
        if (dt == FG_F32) {
            fg__cpu_cross_entropy_bwd_inplace_f32((float *)lg, (const float *)ls, tc, rn, V, 1.0 / (double)count);
            /* an ignored row's gradient is zero: clear its logits */
            for (int64_t r = 0; r < rn; r++)
                if (tc[r] < 0) memset(lg + (size_t)(r * V) * esz, 0, (size_t)V * esz);
        } else {
            d = fg_data(dl);
            memset(d, 0, (size_t)(rn * V) * esz);
            st = fg_cpu_cross_entropy_backward(dt, d, &one, lg, ls, tc, rn, V, count);
        }
        /* dx1_c (rn, C) = dlogits_c (rn, V) @ w (V, C);  dw1 (V, C) += dlogits_cᵀ (V, rn) @ x_c (rn, C) */
        if (st == FG_OK && dx1)
            st = fg_cpu_matmul_gemm(dt, 0, 0, rn, C, V, 1.0, d, V, 0, wp, C, 0, 0.0, NULL,
                                    (char *)fg_data(dx1) + (size_t)(r0 * C) * esz, C, 0, 1);
        if (st == FG_OK && dw1)
            st = fg_cpu_matmul_gemm(dt, 1, 0, V, C, rn, 1.0, d, V, 0, xc, C, 0, c == 0 ? 0.0 : 1.0, NULL, fg_data(dw1),
                                    C, 0, 1);
    }
    if (st == FG_OK) {
        /* the loss in row order, as cross_entropy_fwd sums it */
        double s = 0;
        for (int64_t r = 0; r < R; r++)
            if (t[r] >= 0) {
                const double l =
                    dt == FG_F32 ? (double)((const float *)fg_data(lse))[r] : ((const double *)fg_data(lse))[r];
                s += l - xt[r];
            }
        const double mean = count ? s / (double)count : 0.0;
        if (dt == FG_F32)
            *(float *)loss = (float)mean;
        else
            *(double *)loss = mean;
        if (count == 0 && dx1) memset(fg_data(dx1), 0, fg_nbytes(dx1));
        if (count == 0 && dw1) memset(fg_data(dw1), 0, fg_nbytes(dw1));
    }
    if (xt) fg_free(FG_CPU, xt);
    fg_release(dl);
    fg_release(logits);
    fg_release(lse);
    return st;
}

fg_tensor *fg_linear_cross_entropy(fg_tensor *x, fg_tensor *w, const int32_t *targets, int64_t chunk_rows) {
    static const char op[] = "linear_cross_entropy";
    char b1[FG_SHAPE_BUF], b2[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK || fg_op_check_like(op, "w", w, "x", x) != FG_OK) return NULL;
    if (x->ndim < 1 || w->ndim != 2 || w->shape[1] != x->shape[x->ndim - 1] || w->shape[0] < 1) {
        fg_error(FG_ERR_SHAPE, "%s: x %s and w %s do not fit: need x (..., C) and w (V, C) with V >= 1", op,
                 FG_SHP(x, b1), FG_SHP(w, b2));
        return NULL;
    }
    if (chunk_rows < 0) {
        fg_error(FG_ERR_ARG, "%s: chunk_rows %lld must not be negative (0: the default)", op, (long long)chunk_rows);
        return NULL;
    }
    if (x->device != FG_CPU) { /* the composition, on every other device */
        fg_tensor *logits = fg_linear(x, w, NULL);
        fg_tensor *loss = logits ? fg_cross_entropy(logits, targets) : NULL;
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
    if (out && lce_forward_cpu(x->dtype, fg_data(out), X, W, targets, R, C, V, count, chunk_rows, dx1, dw1) != FG_OK) {
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
