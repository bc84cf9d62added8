/* reduce.c — the CPU's sum kernels (ops/kernels.h's FG_KERNELS_REDUCE), accumulating in double for
 * both dtypes. The ops' shells (sum, mean, over an axis or everything) are in ops/reduce.c, the
 * GPU's kernels in cuda/reduce.cu. */
#include <string.h>

#include "ops/cpu/kernel.h"
#include "ops/kernels_cpu.h"
#include "tensor/alloc.h"

/* out[o, i] = scale * sum_k x[o, k, i]; acc is I doubles of scratch */
#define SUM_AXIS_FWD_BODY(T)                                                                                           \
    for (int64_t o = 0; o < O; o++) {                                                                                  \
        const T *xo = x + o * N * I;                                                                                   \
        if (I == 1) {                                                                                                  \
            double s = 0;                                                                                              \
            for (int64_t k = 0; k < N; k++) s += xo[k];                                                                \
            out[o] = (T)(s * scale);                                                                                   \
            continue;                                                                                                  \
        }                                                                                                              \
        for (int64_t i = 0; i < I; i++) acc[i] = 0;                                                                    \
        for (int64_t k = 0; k < N; k++) {                                                                              \
            const T *row = xo + k * I;                                                                                 \
            for (int64_t i = 0; i < I; i++) acc[i] += row[i];                                                          \
        }                                                                                                              \
        for (int64_t i = 0; i < I; i++) out[o * I + i] = (T)(acc[i] * scale);                                          \
    }

/* forward: out[o, i] = scale * sum_k x[o, k, i]  ->  dx[o, k, i] += scale * dout[o, i] */
#define SUM_AXIS_BWD_BODY(T)                                                                                           \
    T scale = (T)scale_;                                                                                               \
    for (int64_t o = 0; o < O; o++)                                                                                    \
        for (int64_t k = 0; k < N; k++) {                                                                              \
            T *row = dx + (o * N + k) * I;                                                                             \
            const T *d = dout + o * I;                                                                                 \
            for (int64_t i = 0; i < I; i++) row[i] += scale * d[i];                                                    \
        }

/* the sum of every element of a strided tensor, in C order */
#define SUM_ALL_FWD_BODY(T)                                                                                            \
    double s = 0;                                                                                                      \
    while (fg_iter_next(it)) {                                                                                         \
        const T *px = x + it->off[0];                                                                                  \
        int64_t sx = it->inner[0], n = it->n;                                                                          \
        if (sx == 1)                                                                                                   \
            for (int64_t i = 0; i < n; i++) s += px[i];                                                                \
        else                                                                                                           \
            for (int64_t i = 0; i < n; i++) s += px[i * sx];                                                           \
    }                                                                                                                  \
    *sum = s;

/* forward: out = scale * sum_k x[k]  ->  dx[k] += scale * dout */
#define SUM_ALL_BWD_BODY(T)                                                                                            \
    T g = (T)(scale * (double)dout[0]);                                                                                \
    for (int64_t k = 0; k < n; k++) dx[k] += g;

static void sum_axis_fwd_f32(float *out, const float *x, double *acc, int64_t O, int64_t N, int64_t I, double scale) {
    SUM_AXIS_FWD_BODY(float);
}
static void sum_axis_bwd_f32(float *dx, const float *dout, int64_t O, int64_t N, int64_t I, double scale_) {
    SUM_AXIS_BWD_BODY(float);
}
static void sum_all_fwd_f32(double *sum, const float *x, fg_iter *it) { SUM_ALL_FWD_BODY(float); }
static void sum_all_bwd_f32(float *dx, const float *dout, int64_t n, double scale) { SUM_ALL_BWD_BODY(float); }
static void sum_axis_fwd_f64(double *out, const double *x, double *acc, int64_t O, int64_t N, int64_t I, double scale) {
    SUM_AXIS_FWD_BODY(double);
}
static void sum_axis_bwd_f64(double *dx, const double *dout, int64_t O, int64_t N, int64_t I, double scale_) {
    SUM_AXIS_BWD_BODY(double);
}
static void sum_all_fwd_f64(double *sum, const double *x, fg_iter *it) { SUM_ALL_FWD_BODY(double); }
static void sum_all_bwd_f64(double *dx, const double *dout, int64_t n, double scale) { SUM_ALL_BWD_BODY(double); }

/* ---- the CPU kernels (ops/kernels.h) ---- */

fg_status fg_cpu_reduce_axis_forward(fg_dtype dt, void *out, const void *x, int64_t O, int64_t N, int64_t I,
                                     double scale) {
    double *acc = NULL; /* I doubles of scratch, for rows of more than one element */
    if (I > 1 && !(acc = fg_alloc(FG_CPU, (size_t)I * sizeof(double))))
        return fg_error(FG_ERR_OOM, "sum: out of memory for %lld doubles of scratch", (long long)I);
    FG_DISPATCH(dt, sum_axis_fwd, out, x, acc, O, N, I, scale);
    if (acc) fg_free(FG_CPU, acc);
    return FG_OK;
}

fg_status fg_cpu_reduce_axis_backward(fg_dtype dt, void *dx, const void *dout, int64_t O, int64_t N, int64_t I,
                                      double scale) {
    FG_DISPATCH(dt, sum_axis_bwd, dx, dout, O, N, I, scale);
    return FG_OK;
}

fg_status fg_cpu_reduce_all_forward(fg_dtype dt, void *out, const void *x, int nd, const int64_t *shape,
                                    const int64_t *strides, double scale) {
    int64_t st[1][FG_MAX_DIMS];
    memcpy(st[0], strides, (size_t)nd * sizeof(int64_t));
    fg_iter it;
    fg_iter_init(&it, nd, shape, 1, st);
    double sum;
    FG_DISPATCH(dt, sum_all_fwd, &sum, x, &it);
    if (dt == FG_F32)
        *(float *)out = (float)(sum * scale);
    else
        *(double *)out = sum * scale;
    return FG_OK;
}

fg_status fg_cpu_reduce_all_backward(fg_dtype dt, void *dx, const void *dout, int64_t n, double scale) {
    FG_DISPATCH(dt, sum_all_bwd, dx, dout, n, scale);
    return FG_OK;
}
