/* reduce.c — sum and mean over one axis or over everything.
 *
 * Legend: t is seen as (O, N, I) around the reduced axis: O = product of the dims before it,
 * N = its size, I = product of the dims after it. out is (O, I), reshaped to t's shape without
 * the axis (keepdim = 0) or with it as size 1 (keepdim = 1); a 1-D t without keepdim gives a
 * 0-d tensor (one element, ndim 0). sum_all / mean_all give out (1).
 *
 * Sums accumulate in double for both dtypes (the rounding of a float32 sum then does not grow with
 * N). A non-contiguous t is copied first (fg_op_contiguous): the reduction itself wants rows.
 * mean scales the sum by 1/N (fargs[0] holds the scale: 1 for sum, 1/N for mean).
 */
#include <string.h>

#include "ops/ops_internal.h"

#define REDUCE_KERNELS(T, SFX)                                                                         \
    /* out[o, i] = scale * sum_k x[o, k, i]; acc is I doubles of scratch */                           \
    static void sum_axis_fwd_##SFX(T *out, const T *x, double *acc, int64_t O, int64_t N, int64_t I,   \
                                   double scale) {                                                     \
        for (int64_t o = 0; o < O; o++) {                                                              \
            const T *xo = x + o * N * I;                                                               \
            if (I == 1) {                                                                              \
                double s = 0;                                                                          \
                for (int64_t k = 0; k < N; k++) s += xo[k];                                            \
                out[o] = (T)(s * scale);                                                               \
                continue;                                                                              \
            }                                                                                          \
            for (int64_t i = 0; i < I; i++) acc[i] = 0;                                                \
            for (int64_t k = 0; k < N; k++) {                                                          \
                const T *row = xo + k * I;                                                             \
                for (int64_t i = 0; i < I; i++) acc[i] += row[i];                                      \
            }                                                                                          \
            for (int64_t i = 0; i < I; i++) out[o * I + i] = (T)(acc[i] * scale);                      \
        }                                                                                              \
    }                                                                                                  \
    /* forward: out[o, i] = scale * sum_k x[o, k, i]  ->  dx[o, k, i] += scale * dout[o, i] */         \
    static void sum_axis_bwd_##SFX(T *dx, const T *dout, int64_t O, int64_t N, int64_t I, double scale_) { \
        T scale = (T)scale_;                                                                           \
        for (int64_t o = 0; o < O; o++)                                                                \
            for (int64_t k = 0; k < N; k++) {                                                          \
                T *row = dx + (o * N + k) * I;                                                         \
                const T *d = dout + o * I;                                                             \
                for (int64_t i = 0; i < I; i++) row[i] += scale * d[i];                                \
            }                                                                                          \
    }                                                                                                  \
    /* the sum of every element of a strided tensor, in C order */                                    \
    static void sum_all_fwd_##SFX(double *sum, const T *x, fg_iter *it) {                              \
        double s = 0;                                                                                  \
        while (fg_iter_next(it)) {                                                                     \
            const T *px = x + it->off[0];                                                              \
            int64_t sx = it->inner[0], n = it->n;                                                      \
            if (sx == 1)                                                                               \
                for (int64_t i = 0; i < n; i++) s += px[i];                                            \
            else                                                                                       \
                for (int64_t i = 0; i < n; i++) s += px[i * sx];                                       \
        }                                                                                              \
        *sum = s;                                                                                      \
    }                                                                                                  \
    /* forward: out = scale * sum_k x[k]  ->  dx[k] += scale * dout */                               \
    static void sum_all_bwd_##SFX(T *dx, const T *dout, int64_t n, double scale) {                     \
        T g = (T)(scale * (double)dout[0]);                                                            \
        for (int64_t k = 0; k < n; k++) dx[k] += g;                                                    \
    }
REDUCE_KERNELS(float, f32)
REDUCE_KERNELS(double, f64)

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
 * iargs[0] = axis; fargs[0] = scale
 * ============================================================================================ */

static fg_status sum_axis_backward(fg_node *n) {
    fg_tensor *t = n->inputs[0];
    fg_tensor *gt = fg_grad_buffer(t);
    if (!gt) return FG_OK;
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    int64_t O, N, I;
    split_at(t, (int)n->iargs[0], &O, &N, &I);
    FG_DISPATCH(gt->dtype, sum_axis_bwd, fg_data(gt), fg_data(dout), O, N, I, n->fargs[0]);
    fg_release(dout);
    return FG_OK;
}

static fg_tensor *reduce_axis(const char *op, int is_mean, fg_tensor *t, int axis, int keepdim) {
    if (fg_op_check(op, "t", t) != FG_OK) return NULL;
    int a = fg_op_axis(op, t, axis);
    if (a < 0) return NULL;
#ifdef FG_WITH_CUDA
    if (t->device == FG_CUDA) return fg_cuda_reduce_axis(t, a, keepdim, is_mean); /* cuda/reduce.cu */
#endif
    if (t->device != FG_CPU) return fg_op_no_cuda(op); /* CUDA dispatch point */

    int64_t O, N, I, shape[FG_MAX_DIMS];
    split_at(t, a, &O, &N, &I);
    int nd = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (d != a) shape[nd++] = t->shape[d];
        else if (keepdim) shape[nd++] = 1;
    }
    double scale = is_mean ? 1.0 / (double)N : 1.0; /* mean over an empty axis is 0/0 = NaN, like NumPy */
    fg_tensor *x = fg_op_contiguous(t);
    fg_tensor *acc = x ? fg_empty(FG_F64, FG_CPU, 1, &I) : NULL;
    fg_tensor *out = acc ? fg_empty(t->dtype, FG_CPU, nd, shape) : NULL;
    if (out) {
        FG_DISPATCH(t->dtype, sum_axis_fwd, fg_data(out), fg_data(x), fg_data(acc), O, N, I, scale);
        fg_node *node = fg_record(out, op, sum_axis_backward, 1, (fg_tensor *[]){t});
        if (node) {
            node->iargs[0] = a;
            node->fargs[0] = scale;
        }
    }
    fg_release(x);
    fg_release(acc);
    return out;
}

fg_tensor *fg_sum(fg_tensor *t, int axis, int keepdim) { return reduce_axis("sum", 0, t, axis, keepdim); }
fg_tensor *fg_mean(fg_tensor *t, int axis, int keepdim) { return reduce_axis("mean", 1, t, axis, keepdim); }

/* ============================================================================================
 * sum / mean of everything: out (1) = scale * sum of t          fargs[0] = scale
 * ============================================================================================ */

static fg_status sum_all_backward(fg_node *n) {
    fg_tensor *gt = fg_grad_buffer(n->inputs[0]);
    if (!gt) return FG_OK;
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    FG_DISPATCH(gt->dtype, sum_all_bwd, fg_data(gt), fg_data(dout), fg_numel(gt), n->fargs[0]);
    fg_release(dout);
    return FG_OK;
}

static fg_tensor *reduce_all(const char *op, int is_mean, fg_tensor *t) {
    if (fg_op_check(op, "t", t) != FG_OK) return NULL;
#ifdef FG_WITH_CUDA
    if (t->device == FG_CUDA) return fg_cuda_reduce_all(t, is_mean);
#endif
    if (t->device != FG_CPU) return fg_op_no_cuda(op); /* CUDA dispatch point */
    int64_t one = 1, n = fg_numel(t);
    double scale = is_mean ? 1.0 / (double)n : 1.0, sum;
    fg_tensor *out = fg_empty(t->dtype, FG_CPU, 1, &one);
    if (!out) return NULL;
    int64_t st[1][FG_MAX_DIMS];
    memcpy(st[0], t->strides, sizeof st[0]);
    fg_iter it;
    fg_iter_init(&it, t->ndim, t->shape, 1, st);
    FG_DISPATCH(t->dtype, sum_all_fwd, &sum, fg_data(t), &it);
    fg_set(out, 0, sum * scale);
    fg_node *node = fg_record(out, op, sum_all_backward, 1, (fg_tensor *[]){t});
    if (node) node->fargs[0] = scale;
    return out;
}

fg_tensor *fg_sum_all(fg_tensor *t) { return reduce_all("sum_all", 0, t); }
fg_tensor *fg_mean_all(fg_tensor *t) { return reduce_all("mean_all", 1, t); }
