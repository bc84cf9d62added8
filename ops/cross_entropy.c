/* cross_entropy.c — fused softmax + negative log-likelihood, mean over the counted rows.
 *
 * Legend: logits is (..., V), seen as R = numel / V rows of V classes; targets holds R int32
 * class ids (-1 = ignore the row); out is (1): the mean loss over the `count` rows whose target is
 * not -1 (0 when there are none).
 * saved for backward: X (logits, contiguous), lse (R) = per-row logsumexp, a copy of targets (ctx).
 * The probabilities (R, V) are never stored; the backward recomputes exp(x - lse).
 *
 *   lse_r = max_r + log sum_j exp(x_rj - max_r)        loss = sum_r (lse_r - x_r,t_r) / count
 *   d loss / d x_rj = (softmax(x_r)_j - [j == t_r]) / count
 */
#include <string.h>

#include "ops/ops_internal.h"

#define CROSS_ENTROPY_KERNELS(T, SFX)                                                                  \
    /* returns the summed loss of the counted rows (in double); fills lse for them (0 elsewhere) */   \
    static void cross_entropy_fwd_##SFX(double *total, T *lse, const T *x, const int32_t *targets,     \
                                        int64_t R, int64_t V) {                                        \
        double s = 0;                                                                                  \
        for (int64_t r = 0; r < R; r++) {                                                              \
            if (targets[r] < 0) {                                                                      \
                lse[r] = 0;                                                                            \
                continue;                                                                              \
            }                                                                                          \
            const T *xr = x + r * V;                                                                   \
            T mx = xr[0];                                                                              \
            for (int64_t j = 1; j < V; j++) mx = xr[j] > mx ? xr[j] : mx;                              \
            double sum = 0;                                                                            \
            for (int64_t j = 0; j < V; j++) sum += FG_EXP(xr[j] - mx);                                 \
            T l = mx + (T)log(sum);                                                                    \
            lse[r] = l;                                                                                \
            s += (double)l - (double)xr[targets[r]];                                                   \
        }                                                                                              \
        *total = s;                                                                                    \
    }                                                                                                  \
    /* forward: loss = sum_r (lse_r - x_r,t_r) / count                                               \
     *   ->  dx_rj += dloss / count * (exp(x_rj - lse_r) - [j == t_r])   for counted rows */         \
    static void cross_entropy_bwd_##SFX(T *dx, const T *x, const T *lse, const int32_t *targets,       \
                                        int64_t R, int64_t V, double g_) {                             \
        T g = (T)g_;                                                                                   \
        for (int64_t r = 0; r < R; r++) {                                                              \
            if (targets[r] < 0) continue;                                                              \
            const T *xr = x + r * V;                                                                   \
            T *d = dx + r * V, l = lse[r];                                                             \
            for (int64_t j = 0; j < V; j++) d[j] += g * FG_EXP(xr[j] - l);                             \
            d[targets[r]] -= g;                                                                        \
        }                                                                                              \
    }
CROSS_ENTROPY_KERNELS(float, f32)
CROSS_ENTROPY_KERNELS(double, f64)

/* saved {X, lse}; ctx = targets; iargs = {R, V, count} */
static fg_status cross_entropy_backward(fg_node *n) {
    fg_tensor *dx = fg_grad_buffer(n->inputs[0]);
    int64_t R = n->iargs[0], V = n->iargs[1], count = n->iargs[2];
    if (!dx || count == 0) return FG_OK; /* nothing counted: the loss is the constant 0 */
    fg_tensor *X = n->saved[0], *lse = n->saved[1], *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    double g = fg_get(dout, 0) / (double)count;
    FG_DISPATCH(X->dtype, cross_entropy_bwd, fg_data(dx), fg_data(X), fg_data(lse), (const int32_t *)n->ctx, R, V, g);
    fg_release(dout);
    return FG_OK;
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
#ifdef FG_WITH_CUDA
    if (logits->device == FG_CUDA) return fg_cuda_cross_entropy(logits, targets); /* cuda/cross_entropy.cu */
#endif
    if (logits->device != FG_CPU) return fg_op_no_cuda(op); /* CUDA dispatch point */

    int64_t one = 1;
    fg_tensor *X = fg_op_contiguous(logits);
    fg_tensor *lse = X ? fg_empty(logits->dtype, FG_CPU, 1, &R) : NULL;
    fg_tensor *out = lse ? fg_empty(logits->dtype, FG_CPU, 1, &one) : NULL;
    if (out) {
        double total;
        FG_DISPATCH(logits->dtype, cross_entropy_fwd, &total, fg_data(lse), fg_data(X), targets, R, V);
        fg_set(out, 0, count ? total / (double)count : 0.0);
        fg_node *node = fg_record(out, op, cross_entropy_backward, 1, (fg_tensor *[]){logits});
        if (node) {
            fg_node_save(node, X);
            fg_node_save(node, lse);
            node->iargs[0] = R;
            node->iargs[1] = V;
            node->iargs[2] = count;
            node->ctx = fg_op_ctx_alloc(op, (size_t)R * sizeof(int32_t));
            if (!node->ctx) { /* releasing out frees the node */
                fg_release(out);
                out = NULL;
            } else {
                if (R) memcpy(node->ctx, targets, (size_t)R * sizeof(int32_t));
                node->ctx_free = fg_op_ctx_free;
            }
        }
    }
    fg_release(X);
    fg_release(lse);
    return out;
}
