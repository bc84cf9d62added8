/* softmax.c — the CPU's softmax kernels (ops/kernels.h's FG_KERNELS_SOFTMAX): plain loops over raw
 * pointers and sizes, one per dtype, wrapped as fg_cpu_softmax_forward / fg_cpu_softmax_backward.
 * The math and the op's shell are in ops/softmax.c; the GPU's kernels in cuda/softmax.cu. */
#include "ops/cpu/kernel.h"
#include "ops/kernels_cpu.h"

/* The kernels' bodies, written once for both dtypes (T is float or double); each kernel below is
 * a one-line definition over its body. */
#define SOFTMAX_FWD_BODY(T)                                                                                            \
    for (int64_t r = 0; r < R; r++) {                                                                                  \
        const T *xr = x + r * C;                                                                                       \
        T *o = out + r * C;                                                                                            \
        T mx = (T)-INFINITY;                                                                                           \
        for (int64_t i = 0; i < C; i++) mx = xr[i] > mx ? xr[i] : mx;                                                  \
        if (mx == (T)-INFINITY) { /* every entry masked */                                                             \
            for (int64_t i = 0; i < C; i++) o[i] = 0;                                                                  \
            continue;                                                                                                  \
        }                                                                                                              \
        double sum = 0;                                                                                                \
        for (int64_t i = 0; i < C; i++) {                                                                              \
            o[i] = FG_EXP(xr[i] - mx);                                                                                 \
            sum += o[i];                                                                                               \
        }                                                                                                              \
        T inv = (T)(1.0 / sum);                                                                                        \
        for (int64_t i = 0; i < C; i++) o[i] *= inv;                                                                   \
    }

/* forward: y_i = exp(x_i) / sum_j exp(x_j)  ->  dx_i += y_i (dy_i - sum_j dy_j y_j) */
#define SOFTMAX_BWD_BODY(T)                                                                                            \
    for (int64_t r = 0; r < R; r++) {                                                                                  \
        const T *yr = y + r * C, *d = dout + r * C;                                                                    \
        T *g = dx + r * C;                                                                                             \
        double dot = 0;                                                                                                \
        for (int64_t i = 0; i < C; i++) dot += (double)d[i] * yr[i];                                                   \
        T tdot = (T)dot;                                                                                               \
        for (int64_t i = 0; i < C; i++) g[i] += yr[i] * (d[i] - tdot);                                                 \
    }

static void softmax_fwd_f32(float *out, const float *x, int64_t R, int64_t C) { SOFTMAX_FWD_BODY(float); }
static void softmax_bwd_f32(float *dx, const float *dout, const float *y, int64_t R, int64_t C) {
    SOFTMAX_BWD_BODY(float);
}
static void softmax_fwd_f64(double *out, const double *x, int64_t R, int64_t C) { SOFTMAX_FWD_BODY(double); }
static void softmax_bwd_f64(double *dx, const double *dout, const double *y, int64_t R, int64_t C) {
    SOFTMAX_BWD_BODY(double);
}

/* ---- the CPU kernels (ops/kernels.h) ---- */
fg_status fg_cpu_softmax_forward(fg_dtype dt, void *y, const void *x, int64_t R, int64_t C) {
    FG_DISPATCH(dt, softmax_fwd, y, x, R, C);
    return FG_OK;
}

fg_status fg_cpu_softmax_backward(fg_dtype dt, void *dx, const void *dy, const void *y, int64_t R, int64_t C) {
    FG_DISPATCH(dt, softmax_bwd, dx, dy, y, R, C);
    return FG_OK;
}
