/* softmax.c — softmax over the last dim.
 *
 * Legend: x is (..., C), seen as R rows of C; out (..., C), contiguous.
 * saved for backward: out itself, as fg_alias(out) (the output's own storage, no copy).
 *
 *   out_i = exp(x_i - max) / sum_j exp(x_j - max)
 *
 * A row whose entries are all -inf (fully masked) has no defined softmax: it outputs zeros and
 * passes no gradient, instead of NaN.
 */
#include "ops/ops_internal.h"

#define SOFTMAX_KERNELS(T, SFX)                                                                        \
    static void softmax_fwd_##SFX(T *out, const T *x, int64_t R, int64_t C) {                          \
        for (int64_t r = 0; r < R; r++) {                                                              \
            const T *xr = x + r * C;                                                                   \
            T *o = out + r * C;                                                                        \
            T mx = (T)-INFINITY;                                                                       \
            for (int64_t i = 0; i < C; i++) mx = xr[i] > mx ? xr[i] : mx;                              \
            if (mx == (T)-INFINITY) { /* every entry masked */                                         \
                for (int64_t i = 0; i < C; i++) o[i] = 0;                                              \
                continue;                                                                              \
            }                                                                                          \
            double sum = 0;                                                                            \
            for (int64_t i = 0; i < C; i++) {                                                          \
                o[i] = FG_EXP(xr[i] - mx);                                                             \
                sum += o[i];                                                                           \
            }                                                                                          \
            T inv = (T)(1.0 / sum);                                                                    \
            for (int64_t i = 0; i < C; i++) o[i] *= inv;                                               \
        }                                                                                              \
    }                                                                                                  \
    /* forward: y_i = exp(x_i) / sum_j exp(x_j)  ->  dx_i += y_i (dy_i - sum_j dy_j y_j) */           \
    static void softmax_bwd_##SFX(T *dx, const T *dout, const T *y, int64_t R, int64_t C) {            \
        for (int64_t r = 0; r < R; r++) {                                                              \
            const T *yr = y + r * C, *d = dout + r * C;                                                \
            T *g = dx + r * C;                                                                         \
            double dot = 0;                                                                            \
            for (int64_t i = 0; i < C; i++) dot += (double)d[i] * yr[i];                               \
            T tdot = (T)dot;                                                                           \
            for (int64_t i = 0; i < C; i++) g[i] += yr[i] * (d[i] - tdot);                             \
        }                                                                                              \
    }
SOFTMAX_KERNELS(float, f32)
SOFTMAX_KERNELS(double, f64)

/* saved {y} */
static fg_status softmax_backward(fg_node *n) {
    fg_tensor *dx = fg_grad_buffer(n->inputs[0]);
    if (!dx) return FG_OK;
    fg_tensor *y = n->saved[0], *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    int64_t C = y->ndim ? y->shape[y->ndim - 1] : 1, R = C ? fg_numel(y) / C : 0;
    FG_DISPATCH(y->dtype, softmax_bwd, fg_data(dx), fg_data(dout), fg_data(y), R, C);
    fg_release(dout);
    return FG_OK;
}

fg_tensor *fg_softmax(fg_tensor *x) {
    static const char op[] = "softmax";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK) return NULL;
    if (x->ndim < 1) {
        fg_error(FG_ERR_SHAPE, "%s: x %s needs at least one dim", op, FG_SHP(x, b));
        return NULL;
    }
#ifdef FG_WITH_CUDA
    if (x->device == FG_CUDA) return fg_cuda_softmax(x); /* cuda/softmax.cu */
#endif
    if (x->device != FG_CPU) return fg_op_no_cuda(op); /* CUDA dispatch point */
    int64_t C = x->shape[x->ndim - 1], R = C ? fg_numel(x) / C : 0;
    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *out = X ? fg_empty(x->dtype, FG_CPU, x->ndim, x->shape) : NULL;
    if (out) {
        FG_DISPATCH(x->dtype, softmax_fwd, fg_data(out), fg_data(X), R, C);
        fg_node *node = fg_record(out, op, softmax_backward, 1, (fg_tensor *[]){x});
        if (node) {
            fg_tensor *y = fg_alias(out); /* not `out` itself: out owns the node (no cycle) */
            if (!y) {
                fg_release(out);
                out = NULL;
            } else {
                fg_node_save(node, y);
                fg_release(y);
            }
        }
    }
    fg_release(X);
    return out;
}
