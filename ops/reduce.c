/* reduce.c — sum and mean over one axis or over everything.
 *
 * Legend: t is seen as (O, N, I) around the reduced axis: O = product of the dims before it,
 * N = its size, I = product of the dims after it. out is (O, I), reshaped to t's shape without
 * the axis (keepdim = 0) or with it as size 1 (keepdim = 1); a 1-D t without keepdim gives a
 * 0-d tensor (one element, ndim 0). sum_all / mean_all give out (1).
 *
 * Sums accumulate in double for both dtypes (the rounding of a float32 sum then does not grow with
 * N). Over an axis, a non-contiguous t is copied first (fg_op_contiguous): the reduction itself
 * wants rows; over everything, t is read through its strides. mean scales the sum by 1/N.
 */
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the ops, for every device ---- */

/* What the backward needs: the reduced axis (-1 for sum_all / mean_all) and the scale, 1 for a
 * sum and 1/N for a mean (keepdim only shapes the output). */
typedef struct {
    int axis, keepdim, is_mean;
    double scale;
} reduce_state;

/* (O, N, I) of t around `axis` */

static void split_at(const fg_tensor *t, int axis, int64_t *O, int64_t *N, int64_t *I) {
    *O = 1;
    *I = 1;
    for (int d = 0; d < axis; d++) *O *= t->shape[d];
    for (int d = axis + 1; d < t->ndim; d++) *I *= t->shape[d];
    *N = t->shape[axis];
}

/* ============================================================================================
 * sum / mean over one axis: out (O, I) = scale * sum over N of t (O, N, I)
 * ============================================================================================ */

static fg_status sum_axis_backward(fg_node *n) {
    const reduce_state *s = FG_NODE_STATE(n, reduce_state);
    fg_tensor *t = n->inputs[0], *gt;
    FG_TRY(fg_grad_get(t, &gt));
    if (!gt) return FG_OK;
    const fg_kernels *k = fg_kernels_for(t->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    int64_t O, N, I;
    split_at(t, s->axis, &O, &N, &I);
    fg_status st = k->reduce.axis_backward(gt->dtype, fg_data(gt), fg_data(dout), O, N, I, s->scale);
    fg_release(dout);
    return st;
}

static fg_tensor *reduce_axis(const char *op, int is_mean, fg_tensor *t, int axis, int keepdim) {
    if (fg_op_check(op, "t", t) != FG_OK) return NULL;
    int a = fg_op_axis(op, t, axis);
    if (a < 0) return NULL;
    const fg_kernels *k = fg_kernels_for(t->device, op);
    if (!k) return NULL;
    if (!k->reduce.axis_forward || !k->reduce.axis_backward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    int64_t O, N, I, shape[FG_MAX_DIMS];
    split_at(t, a, &O, &N, &I);
    int nd = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (d != a)
            shape[nd++] = t->shape[d];
        else if (keepdim)
            shape[nd++] = 1;
    }
    double scale = is_mean ? 1.0 / (double)N : 1.0; /* mean over an empty axis is 0/0 = NaN, like NumPy */
    fg_tensor *x = fg_op_contiguous(t);
    fg_tensor *out = x ? fg_empty(t->dtype, t->device, nd, shape) : NULL;
    if (out && k->reduce.axis_forward(t->dtype, fg_data(out), fg_data(x), O, N, I, scale) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    if (out) {
        fg_node *node = fg_record(out, op, sum_axis_backward, 1, (fg_tensor *[]){t});
        if (node) *FG_NODE_STATE(node, reduce_state) = (reduce_state){a, keepdim, is_mean, scale};
    }
    fg_release(x);
    return out;
}

fg_tensor *fg_sum(fg_tensor *t, int axis, int keepdim) { return reduce_axis("sum", 0, t, axis, keepdim); }
fg_tensor *fg_mean(fg_tensor *t, int axis, int keepdim) { return reduce_axis("mean", 1, t, axis, keepdim); }

/* ============================================================================================
 * sum / mean of everything: out (1) = scale * sum of t
 * ============================================================================================ */

static fg_status sum_all_backward(fg_node *n) {
    const reduce_state *s = FG_NODE_STATE(n, reduce_state);
    fg_tensor *gt;
    FG_TRY(fg_grad_get(n->inputs[0], &gt));
    if (!gt) return FG_OK;
    const fg_kernels *k = fg_kernels_for(gt->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = k->reduce.all_backward(gt->dtype, fg_data(gt), fg_data(dout), fg_numel(gt), s->scale);
    fg_release(dout);
    return st;
}

static fg_tensor *reduce_all(const char *op, int is_mean, fg_tensor *t) {
    if (fg_op_check(op, "t", t) != FG_OK) return NULL;
    const fg_kernels *k = fg_kernels_for(t->device, op);
    if (!k) return NULL;
    if (!k->reduce.all_forward || !k->reduce.all_backward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }
    int64_t one = 1, n = fg_numel(t);
    double scale = is_mean ? 1.0 / (double)n : 1.0;
    fg_tensor *out = fg_empty(t->dtype, t->device, 1, &one);
    if (!out) return NULL;
    if (k->reduce.all_forward(t->dtype, fg_data(out), fg_data(t), t->ndim, t->shape, t->strides, scale) != FG_OK) {
        fg_release(out);
        return NULL;
    }
    fg_node *node = fg_record(out, op, sum_all_backward, 1, (fg_tensor *[]){t});
    if (node) *FG_NODE_STATE(node, reduce_state) = (reduce_state){-1, 0, is_mean, scale};
    return out;
}

fg_tensor *fg_sum_all(fg_tensor *t) { return reduce_all("sum_all", 0, t); }
fg_tensor *fg_mean_all(fg_tensor *t) { return reduce_all("mean_all", 1, t); }
