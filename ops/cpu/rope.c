/* rope.c — the CPU's rotary position embedding kernels (ops/kernels.h's FG_KERNELS_ROPE); the math
 * and the op's shell are in ops/rope.c. CPU only: the CUDA table holds NULL.
 *
 * Legend: x, out, dout, dx are (B, H, T, D), contiguous; D2 = D / 2. The table cos, sin (T, D2)
 * is built once per call in float64 and rounded to the dtype (Hugging Face Llama's rotate_half
 * layout pairs x_i with x_{i+D2}):
 *     a_ti = (pos0 + t) * theta^(-2i / D)
 */
#include "ops/cpu/kernel.h"
#include "ops/kernels_cpu.h"
#include "tensor/alloc.h"

/* cs (T, D2, 2): cos and sin of a_ti, rounded to T */
#define ROPE_TABLE_BODY(T)                                                                                             \
    for (int64_t i = 0; i < D2; i++) {                                                                                 \
        const double inv_freq = 1.0 / pow(theta, (double)(2 * i) / (double)D);                                         \
        for (int64_t t = 0; t < Tn; t++) {                                                                             \
            const double a = (double)(pos0 + t) * inv_freq;                                                            \
            cs[2 * (t * D2 + i)] = (T)cos(a);                                                                          \
            cs[2 * (t * D2 + i) + 1] = (T)sin(a);                                                                      \
        }                                                                                                              \
    }

/* forward (sgn +1):   out_i = x_i cos - x_{i+D2} sin;   out_{i+D2} = x_{i+D2} cos + x_i sin
 * backward (sgn -1): the rotation is orthogonal, so dx += Rᵀ dout, the same with sin negated:
 *   dx_i += dout_i cos + dout_{i+D2} sin;   dx_{i+D2} += dout_{i+D2} cos - dout_i sin
 * y = out (written) or dx (added to, add 1); v = x or dout */
#define ROPE_APPLY_BODY(T)                                                                                             \
    for (int64_t bh = 0; bh < B * H; bh++)                                                                             \
        for (int64_t t = 0; t < Tn; t++) {                                                                             \
            const T *vr = v + (bh * Tn + t) * D, *c = cs + 2 * t * D2;                                                 \
            T *yr = y + (bh * Tn + t) * D;                                                                             \
            for (int64_t i = 0; i < D2; i++) {                                                                         \
                const T co = c[2 * i], si = sgn * c[2 * i + 1], lo = vr[i], hi = vr[i + D2];                           \
                const T ylo = lo * co - hi * si, yhi = hi * co + lo * si;                                              \
                if (add) {                                                                                             \
                    yr[i] += ylo;                                                                                      \
                    yr[i + D2] += yhi;                                                                                 \
                } else {                                                                                               \
                    yr[i] = ylo;                                                                                       \
                    yr[i + D2] = yhi;                                                                                  \
                }                                                                                                      \
            }                                                                                                          \
        }

static void rope_apply_f32(float *y, const float *v, float *cs, int64_t B, int64_t H, int64_t Tn, int64_t D,
                           int64_t pos0, double theta, float sgn, int add) {
    const int64_t D2 = D / 2;
    ROPE_TABLE_BODY(float);
    ROPE_APPLY_BODY(float);
}
static void rope_apply_f64(double *y, const double *v, double *cs, int64_t B, int64_t H, int64_t Tn, int64_t D,
                           int64_t pos0, double theta, double sgn, int add) {
    const int64_t D2 = D / 2;
    ROPE_TABLE_BODY(double);
    ROPE_APPLY_BODY(double);
}

static fg_status rope_run(const char *what, fg_dtype dt, void *y, const void *v, int64_t B, int64_t H, int64_t T,
                          int64_t D, int64_t pos0, double theta, int backward) {
    const size_t es = dt == FG_F32 ? sizeof(float) : sizeof(double);
    void *cs = fg_alloc(FG_CPU, (size_t)(T * D + 1) * es); /* T * D2 pairs; + 1: never 0 bytes */
    if (!cs)
        return fg_error(FG_ERR_OOM, "rope %s: out of memory for the (%lld, %lld) cos/sin table", what, (long long)T,
                        (long long)(D / 2));
    FG_DISPATCH(dt, rope_apply, y, v, cs, B, H, T, D, pos0, theta, backward ? -1 : 1, backward);
    fg_free(FG_CPU, cs);
    return FG_OK;
}

/* ---- the CPU kernels (ops/kernels.h) ---- */
fg_status fg_cpu_rope_forward(fg_dtype dt, void *out, const void *x, int64_t B, int64_t H, int64_t T, int64_t D,
                              int64_t pos0, double theta) {
    return rope_run("forward", dt, out, x, B, H, T, D, pos0, theta, 0);
}

fg_status fg_cpu_rope_backward(fg_dtype dt, void *dx, const void *dout, int64_t B, int64_t H, int64_t T, int64_t D,
                               int64_t pos0, double theta) {
    return rope_run("backward", dt, dx, dout, B, H, T, D, pos0, theta, 1);
}
