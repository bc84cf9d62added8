/* shape.c — differentiable views: reshape, permute, transpose, slice, and make_contiguous.
 *
 * Legend: t is the input of any shape; out is the view. A view shares t's storage (writing through
 * it writes t); only reshape of a non-contiguous t and make_contiguous copy.
 *
 * Backward goes through the inverse view: the gradient buffer of t (contiguous, t's shape) is
 * viewed the way the forward viewed t, which gives a strided tensor of out's shape, and dout is
 * added into it (fg_op_add_into: the device's add_into kernel). Nothing is copied besides dout's
 * values. The views themselves need no kernel: they work on every device that is started.
 */
#include <string.h>

#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ============================================================================================
 * reshape: out (shape) = t (t's shape) read in C order
 * ============================================================================================ */

/* forward: out = reshape(t)  ->  dt += reshape(dout, t's shape) */
static fg_status reshape_backward(fg_node *n) {
    fg_tensor *t = n->inputs[0], *gt;
    FG_TRY(fg_grad_get(t, &gt));
    if (!gt) return FG_OK;
    fg_tensor *dout = fg_op_grad_out(n);
    fg_tensor *d = dout ? fg_view_reshape(dout, t->ndim, t->shape) : NULL;
    fg_status st = d ? fg_op_add_into(gt, d, 1.0) : fg_last_status();
    fg_release(d);
    fg_release(dout);
    return st;
}

fg_tensor *fg_reshape(fg_tensor *t, int ndim, const int64_t *shape) {
    static const char op[] = "reshape";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "t", t) != FG_OK) return NULL;
    if (ndim < 0 || ndim > FG_MAX_DIMS || (ndim > 0 && !shape)) {
        fg_error(FG_ERR_ARG, "%s: new rank %d (shape %s) is invalid for t %s", op, ndim, shape ? "given" : "NULL",
                 FG_SHP(t, b));
        return NULL;
    }
    if (!fg_kernels_for(t->device, op)) return NULL; /* the backward's fg_op_add_into needs the device */
    fg_tensor *src = fg_op_contiguous(t);            /* t itself when contiguous: then out is a view */
    fg_tensor *out = src ? fg_view_reshape(src, ndim, shape) : NULL;
    fg_release(src);
    if (out) fg_record(out, op, reshape_backward, 1, (fg_tensor *[]){t});
    return out;
}

/* ============================================================================================
 * permute / transpose: out dim k = t dim perm[k]
 * ============================================================================================ */

typedef struct {
    int perm[FG_MAX_DIMS];
} permute_state;

/* forward: out = permute(t, perm)  ->  permute(dt, perm) += dout */
static fg_status permute_backward(fg_node *n) {
    const permute_state *s = FG_NODE_STATE(n, permute_state);
    fg_tensor *gt;
    FG_TRY(fg_grad_get(n->inputs[0], &gt));
    if (!gt) return FG_OK;
    fg_tensor *dout = fg_op_grad_out(n);
    fg_tensor *g = dout ? fg_view_permute(gt, s->perm) : NULL;
    fg_status st = g ? fg_op_add_into(g, dout, 1.0) : fg_last_status();
    fg_release(g);
    fg_release(dout);
    return st;
}

static fg_tensor *permute_impl(const char *op, fg_tensor *t, const int *perm) {
    fg_tensor *out = fg_view_permute(t, perm);
    if (!out) return NULL;
    fg_node *node = fg_record(out, op, permute_backward, 1, (fg_tensor *[]){t});
    if (node) memcpy(FG_NODE_STATE(node, permute_state)->perm, perm, (size_t)t->ndim * sizeof(int));
    return out;
}

fg_tensor *fg_permute(fg_tensor *t, const int *perm) {
    static const char op[] = "permute";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "t", t) != FG_OK) return NULL;
    if (!perm && t->ndim > 0) {
        fg_error(FG_ERR_ARG, "%s: perm is NULL for t %s", op, FG_SHP(t, b));
        return NULL;
    }
    int seen[FG_MAX_DIMS] = {0};
    for (int i = 0; i < t->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= t->ndim || seen[perm[i]]) {
            fg_error(FG_ERR_ARG, "%s: perm[%d] = %d: not a permutation of the %d dims of t %s", op, i, perm[i], t->ndim,
                     FG_SHP(t, b));
            return NULL;
        }
        seen[perm[i]] = 1;
    }
    if (!fg_kernels_for(t->device, op)) return NULL; /* the backward's fg_op_add_into needs the device */
    return permute_impl(op, t, perm);
}

fg_tensor *fg_transpose(fg_tensor *t, int d0, int d1) {
    static const char op[] = "transpose";
    if (fg_op_check(op, "t", t) != FG_OK) return NULL;
    int a = fg_op_axis(op, t, d0), b = a < 0 ? -1 : fg_op_axis(op, t, d1);
    if (a < 0 || b < 0) return NULL;
    if (!fg_kernels_for(t->device, op)) return NULL; /* the backward's fg_op_add_into needs the device */
    int perm[FG_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return permute_impl(op, t, perm);
}

/* ============================================================================================
 * slice: out = t[..., start:end, ...] along axis
 * ============================================================================================ */

typedef struct {
    int axis;
    int64_t start, end;
} slice_state;

/* forward: out = t[start:end]  ->  dt[start:end] += dout */
static fg_status slice_backward(fg_node *n) {
    const slice_state *s = FG_NODE_STATE(n, slice_state);
    fg_tensor *gt;
    FG_TRY(fg_grad_get(n->inputs[0], &gt));
    if (!gt) return FG_OK;
    fg_tensor *dout = fg_op_grad_out(n);
    fg_tensor *g = dout ? fg_view_slice(gt, s->axis, s->start, s->end) : NULL;
    fg_status st = g ? fg_op_add_into(g, dout, 1.0) : fg_last_status();
    fg_release(g);
    fg_release(dout);
    return st;
}

fg_tensor *fg_slice(fg_tensor *t, int axis, int64_t start, int64_t end) {
    static const char op[] = "slice";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "t", t) != FG_OK) return NULL;
    int a = fg_op_axis(op, t, axis);
    if (a < 0) return NULL;
    if (start < 0 || end < start || end > t->shape[a]) {
        fg_error(FG_ERR_ARG, "%s: [%lld, %lld) is not a range within 0..%lld along axis %d of t %s", op,
                 (long long)start, (long long)end, (long long)t->shape[a], axis, FG_SHP(t, b));
        return NULL;
    }
    if (!fg_kernels_for(t->device, op)) return NULL; /* the backward's fg_op_add_into needs the device */
    fg_tensor *out = fg_view_slice(t, a, start, end);
    if (!out) return NULL;
    fg_node *node = fg_record(out, op, slice_backward, 1, (fg_tensor *[]){t});
    if (node) *FG_NODE_STATE(node, slice_state) = (slice_state){a, start, end};
    return out;
}

/* ============================================================================================
 * make_contiguous: out = a contiguous copy of t (or t itself, retained, when already contiguous)
 * ============================================================================================ */

/* forward: out = copy(t)  ->  dt += dout */
static fg_status copy_backward(fg_node *n) {
    fg_tensor *gt;
    FG_TRY(fg_grad_get(n->inputs[0], &gt));
    if (!gt) return FG_OK;
    fg_tensor *dout = fg_op_grad_out(n);
    fg_status st = dout ? fg_op_add_into(gt, dout, 1.0) : fg_last_status();
    fg_release(dout);
    return st;
}

fg_tensor *fg_make_contiguous(fg_tensor *t) {
    static const char op[] = "make_contiguous";
    if (fg_op_check(op, "t", t) != FG_OK) return NULL;
    if (!fg_kernels_for(t->device, op)) return NULL; /* the backward's fg_op_add_into needs the device */
    if (fg_is_contiguous(t)) return fg_retain(t);
    fg_tensor *out = fg_op_contiguous(t); /* a copy: t is not contiguous */
    if (out) fg_record(out, op, copy_backward, 1, (fg_tensor *[]){t});
    return out;
}
