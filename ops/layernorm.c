/* layernorm.c — layer normalization over the last dim.
 *
 * Legend: x is (..., C), seen as R = prod(...) rows of C; weight and bias are (C) or NULL (then 1
 * and 0); out is (..., C).
 * saved for backward: X (x, contiguous), mean (R) and rstd (R) = 1/sqrt(var + eps), W (weight).
 *
 *   mean = sum_i x_i / C        var = sum_i (x_i - mean)² / C        (biased, like PyTorch)
 *   norm_i = (x_i - mean) * rstd        out_i = norm_i * w_i + b_i
 *
 * The kernels are in ops/cpu/layernorm.c.
 */
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the op, for every device ---- */

/* What the backward needs: x made contiguous, the row statistics, the weight (or NULL). */
typedef struct {
    fg_tensor *x, *mean, *rstd, *w;
} layernorm_state;

/* inputs {x, weight, bias} */
static fg_status layernorm_backward(fg_node *n) {
    const layernorm_state *s = FG_NODE_STATE(n, layernorm_state);
    fg_tensor *dx, *dw, *db;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    FG_TRY(fg_grad_get(n->inputs[1], &dw));
    FG_TRY(fg_grad_get(n->inputs[2], &db));
    if (!dx && !dw && !db) return FG_OK;
    const fg_kernels *k = fg_kernels_for(s->x->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    const int64_t C = s->x->shape[s->x->ndim - 1], R = s->mean->shape[0];
    fg_status st = k->layernorm.backward(s->x->dtype, dx ? fg_data(dx) : NULL, dw ? fg_data(dw) : NULL,
                                         db ? fg_data(db) : NULL, fg_data(dout), fg_data(s->x), fg_data(s->mean),
                                         fg_data(s->rstd), s->w ? fg_data(s->w) : NULL, R, C);
    fg_release(dout);
    return st;
}

fg_tensor *fg_layernorm(fg_tensor *x, fg_tensor *weight, fg_tensor *bias, double eps) {
    static const char op[] = "layernorm";
    int64_t R, C;
    if (fg_op_check_norm(op, x, 2, (const fg_tensor *[]){weight, bias}, (const char *[]){"weight", "bias"}, eps, 0, &R,
                         &C) != FG_OK)
        return NULL;
    const fg_kernels *k = fg_kernels_for(x->device, op);
    if (!k) return NULL;
    if (!k->layernorm.forward || !k->layernorm.backward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    const fg_device dev = x->device;
    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *W = (X && weight) ? fg_op_contiguous(weight) : NULL;
    fg_tensor *B = (X && bias) ? fg_op_contiguous(bias) : NULL;
    fg_tensor *mean = fg_empty(x->dtype, dev, 1, &R), *rstd = fg_empty(x->dtype, dev, 1, &R);
    fg_tensor *out = fg_empty(x->dtype, dev, x->ndim, x->shape);
    fg_tensor *ret = NULL;
    if (X && (W || !weight) && (B || !bias) && mean && rstd && out &&
        k->layernorm.forward(x->dtype, fg_data(out), fg_data(mean), fg_data(rstd), fg_data(X), W ? fg_data(W) : NULL,
                             B ? fg_data(B) : NULL, R, C, eps) == FG_OK) {
        fg_node *node = fg_record(out, op, layernorm_backward, 3, (fg_tensor *[]){x, weight, bias});
        if (node) {
            layernorm_state *s = FG_NODE_STATE(node, layernorm_state);
            s->x = fg_node_keep(node, X);
            s->mean = fg_node_keep(node, mean);
            s->rstd = fg_node_keep(node, rstd);
            s->w = fg_node_keep(node, W);
        }
        ret = out;
        out = NULL;
    }
    fg_release(X);
    fg_release(W);
    fg_release(B);
    fg_release(mean);
    fg_release(rstd);
    fg_release(out);
    return ret;
}
