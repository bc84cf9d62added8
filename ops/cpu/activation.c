/* activation.c — the CPU's kernels of the pointwise activations of Llama- and nanochat-style
 * models (ops/kernels.h's FG_KERNELS_ACTIVATION): relu², SwiGLU, the logit softcap. The math and
 * the ops' shell are in ops/activation.c. CPU only: the CUDA table holds NULL.
 *
 * Plain loops over (n) contiguous elements, written once for both dtypes (T is float or double);
 * float32 evaluates exp and tanh in float (expf, tanhf). Backward outputs are added to (+=).
 * relu² and SwiGLU run their loops over pieces of the array on the thread pool (fg_par_range,
 * ops/cpu/vmath.h): each element is computed alone, so the bits do not depend on the threads.
 */
#include "ops/cpu/kernel.h"
#include "ops/cpu/vmath.h"
#include "ops/kernels_cpu.h"

#define FG_TANH(x) _Generic((x), float : tanhf, default : tanh)(x)

/* ---- relu² ---- */
#define RELU2_FWD_BODY(T)                                                                                              \
    for (int64_t i = 0; i < n; i++) {                                                                                  \
        const T r = x[i] > 0 ? x[i] : 0;                                                                               \
        out[i] = r * r;                                                                                                \
    }
/* forward: out = relu(x)²  ->  dx += dout * 2 relu(x) */
#define RELU2_BWD_BODY(T)                                                                                              \
    for (int64_t i = 0; i < n; i++)                                                                                    \
        if (x[i] > 0) dx[i] += dout[i] * (2 * x[i]);

/* ---- SwiGLU ---- */
/* silu(a) = a σ(a) = a / (1 + exp(-a)) */
#define SWIGLU_FWD_BODY(T)                                                                                             \
    for (int64_t i = 0; i < n; i++) out[i] = a[i] / (1 + FG_EXP(-a[i])) * b[i];
/* forward: out = a σ(a) * b  ->  da += dout * b * σ(a) (1 + a (1 - σ(a)));  db += dout * a σ(a) */
#define SWIGLU_BWD_BODY(T)                                                                                             \
    for (int64_t i = 0; i < n; i++) {                                                                                  \
        const T s = 1 / (1 + FG_EXP(-a[i]));                                                                           \
        if (da) da[i] += dout[i] * b[i] * (s * (1 + a[i] * (1 - s)));                                                  \
        if (db) db[i] += dout[i] * (a[i] * s);                                                                         \
    }

/* ---- softcap ---- */
#define SOFTCAP_FWD_BODY(T)                                                                                            \
    for (int64_t i = 0; i < n; i++) out[i] = (T)c * FG_TANH(x[i] / (T)c);
/* forward: out = c tanh(x / c)  ->  dx += dout * (1 - tanh²(x / c)) */
#define SOFTCAP_BWD_BODY(T)                                                                                            \
    for (int64_t i = 0; i < n; i++) {                                                                                  \
        const T t = FG_TANH(x[i] / (T)c);                                                                              \
        dx[i] += dout[i] * (1 - t * t);                                                                                \
    }

static void relu2_fwd_f32(float *out, const float *x, int64_t n) { RELU2_FWD_BODY(float); }
static void relu2_bwd_f32(float *dx, const float *dout, const float *x, int64_t n) { RELU2_BWD_BODY(float); }
static void relu2_fwd_f64(double *out, const double *x, int64_t n) { RELU2_FWD_BODY(double); }
static void relu2_bwd_f64(double *dx, const double *dout, const double *x, int64_t n) { RELU2_BWD_BODY(double); }

static void swiglu_fwd_f32(float *out, const float *a, const float *b, int64_t n) { SWIGLU_FWD_BODY(float); }
static void swiglu_bwd_f32(float *da, float *db, const float *dout, const float *a, const float *b, int64_t n) {
    SWIGLU_BWD_BODY(float);
}
static void swiglu_fwd_f64(double *out, const double *a, const double *b, int64_t n) { SWIGLU_FWD_BODY(double); }
static void swiglu_bwd_f64(double *da, double *db, const double *dout, const double *a, const double *b, int64_t n) {
    SWIGLU_BWD_BODY(double);
}

static void softcap_fwd_f32(float *out, const float *x, int64_t n, double c) { SOFTCAP_FWD_BODY(float); }
static void softcap_bwd_f32(float *dx, const float *dout, const float *x, int64_t n, double c) {
    SOFTCAP_BWD_BODY(float);
}
static void softcap_fwd_f64(double *out, const double *x, int64_t n, double c) { SOFTCAP_FWD_BODY(double); }
static void softcap_bwd_f64(double *dx, const double *dout, const double *x, int64_t n, double c) {
    SOFTCAP_BWD_BODY(double);
}

/* ---- pieces on the thread pool ---- */

/* Serial cost per element (ns, one thread): relu² a compare and a multiply or two, SwiGLU an exp. */
#define ACT_NS_RELU2 0.5
#define ACT_NS_SWIGLU_FWD 4.0
#define ACT_NS_SWIGLU_BWD 6.0

/* One call's arrays (NULL where the kernel has no such array or it is not wanted). */
typedef struct {
    fg_dtype dt;
    void *y0, *y1;            /* out, or dx / da and db */
    const void *x0, *x1, *x2; /* inputs: x / dout, x / a, b / dout, a, b */
} act_job;

/* p + i elements of dt; NULL stays NULL */
static void *act_at(fg_dtype dt, const void *p, int64_t i) {
    return p ? (char *)p + (size_t)i * (dt == FG_F32 ? sizeof(float) : sizeof(double)) : NULL;
}

static void relu2_fwd_piece(void *ctx, int64_t b, int64_t e) {
    const act_job *j = ctx;
    FG_DISPATCH(j->dt, relu2_fwd, act_at(j->dt, j->y0, b), act_at(j->dt, j->x0, b), e - b);
}
static void relu2_bwd_piece(void *ctx, int64_t b, int64_t e) {
    const act_job *j = ctx;
    FG_DISPATCH(j->dt, relu2_bwd, act_at(j->dt, j->y0, b), act_at(j->dt, j->x0, b), act_at(j->dt, j->x1, b), e - b);
}
static void swiglu_fwd_piece(void *ctx, int64_t b, int64_t e) {
    const act_job *j = ctx;
    FG_DISPATCH(j->dt, swiglu_fwd, act_at(j->dt, j->y0, b), act_at(j->dt, j->x0, b), act_at(j->dt, j->x1, b), e - b);
}
static void swiglu_bwd_piece(void *ctx, int64_t b, int64_t e) {
    const act_job *j = ctx;
    FG_DISPATCH(j->dt, swiglu_bwd, act_at(j->dt, j->y0, b), act_at(j->dt, j->y1, b), act_at(j->dt, j->x0, b),
                act_at(j->dt, j->x1, b), act_at(j->dt, j->x2, b), e - b);
}

/* ---- the CPU kernels (ops/kernels.h) ---- */
fg_status fg_cpu_activation_relu2_forward(fg_dtype dt, void *out, const void *x, int64_t n) {
    act_job j = {.dt = dt, .y0 = out, .x0 = x};
    fg_par_range(n, FG_PAR_CHUNK, ACT_NS_RELU2, relu2_fwd_piece, &j);
    return FG_OK;
}
fg_status fg_cpu_activation_relu2_backward(fg_dtype dt, void *dx, const void *dout, const void *x, int64_t n) {
    act_job j = {.dt = dt, .y0 = dx, .x0 = dout, .x1 = x};
    fg_par_range(n, FG_PAR_CHUNK, ACT_NS_RELU2, relu2_bwd_piece, &j);
    return FG_OK;
}
fg_status fg_cpu_activation_swiglu_forward(fg_dtype dt, void *out, const void *a, const void *b, int64_t n) {
    act_job j = {.dt = dt, .y0 = out, .x0 = a, .x1 = b};
    fg_par_range(n, FG_PAR_CHUNK, ACT_NS_SWIGLU_FWD, swiglu_fwd_piece, &j);
    return FG_OK;
}
fg_status fg_cpu_activation_swiglu_backward(fg_dtype dt, void *da, void *db, const void *dout, const void *a,
                                            const void *b, int64_t n) {
    act_job j = {.dt = dt, .y0 = da, .y1 = db, .x0 = dout, .x1 = a, .x2 = b};
    fg_par_range(n, FG_PAR_CHUNK, ACT_NS_SWIGLU_BWD, swiglu_bwd_piece, &j);
    return FG_OK;
}
fg_status fg_cpu_activation_softcap_forward(fg_dtype dt, void *out, const void *x, int64_t n, double c) {
    FG_DISPATCH(dt, softcap_fwd, out, x, n, c);
    return FG_OK;
}
fg_status fg_cpu_activation_softcap_backward(fg_dtype dt, void *dx, const void *dout, const void *x, int64_t n,
                                             double c) {
    FG_DISPATCH(dt, softcap_bwd, dx, dout, x, n, c);
    return FG_OK;
}
