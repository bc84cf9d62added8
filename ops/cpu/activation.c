/* activation.c — the CPU's kernels of the pointwise activations of Llama- and nanochat-style
 * models (ops/kernels.h's FG_KERNELS_ACTIVATION): relu², SwiGLU, the logit softcap. The math and
 * the ops' shell are in ops/activation.c. CPU only: the CUDA table holds NULL.
 *
 * Plain loops over (n) contiguous elements, written once for both dtypes (T is float or double);
 * float32 evaluates exp with ops/cpu/vexp.h and tanh with ops/cpu/vtanh.h. Backward outputs are added to (+=). Each
 * element is computed alone, so the loops run in pieces on the thread pool (fg_par_range) with the
 * same bits for any thread count.
 */
#include "ops/cpu/kernel.h"
#include "ops/cpu/vmath.h"
#include "ops/cpu/vtanh.h"
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

/* float32 takes exp(-a) from ops/cpu/vexp.h (vectorized, the same bits on every level), a block at a
 * time; the arithmetic around it is the loops' above */
#define SWIGLU_BLOCK 256
static void swiglu_fwd_f32(float *out, const float *a, const float *b, int64_t n) {
    float e[SWIGLU_BLOCK];
    for (int64_t i = 0; i < n; i += SWIGLU_BLOCK) {
        const int64_t m = n - i < SWIGLU_BLOCK ? n - i : SWIGLU_BLOCK;
        for (int64_t k = 0; k < m; k++) e[k] = -a[i + k];
        fg_vexp_f32(e, e, m);
        for (int64_t k = 0; k < m; k++) out[i + k] = a[i + k] / (1 + e[k]) * b[i + k];
    }
}
static void swiglu_bwd_f32(float *da, float *db, const float *dout, const float *a, const float *b, int64_t n) {
    float e[SWIGLU_BLOCK];
    for (int64_t i = 0; i < n; i += SWIGLU_BLOCK) {
        const int64_t m = n - i < SWIGLU_BLOCK ? n - i : SWIGLU_BLOCK;
        for (int64_t k = 0; k < m; k++) e[k] = -a[i + k];
        fg_vexp_f32(e, e, m);
        for (int64_t k = 0; k < m; k++) {
            const int64_t j = i + k;
            const float s = 1 / (1 + e[k]);
            if (da) da[j] += dout[j] * b[j] * (s * (1 + a[j] * (1 - s)));
            if (db) db[j] += dout[j] * (a[j] * s);
        }
    }
}
static void swiglu_fwd_f64(double *out, const double *a, const double *b, int64_t n) { SWIGLU_FWD_BODY(double); }
static void swiglu_bwd_f64(double *da, double *db, const double *dout, const double *a, const double *b, int64_t n) {
    SWIGLU_BWD_BODY(double);
}

/* float32 takes its tanh from ops/cpu/vtanh.h (vectorized, the same bits on every level), a block
 * at a time; the arithmetic around it is the loops' above */
#define SOFTCAP_BLOCK 256
static void softcap_fwd_f32(float *out, const float *x, int64_t n, double c) {
    const float cf = (float)c;
    for (int64_t i = 0; i < n; i += SOFTCAP_BLOCK) {
        const int64_t m = n - i < SOFTCAP_BLOCK ? n - i : SOFTCAP_BLOCK;
        fg_vtanh_div_f32(out + i, x + i, cf, m);
        for (int64_t k = 0; k < m; k++) out[i + k] = cf * out[i + k];
    }
}
static void softcap_bwd_f32(float *dx, const float *dout, const float *x, int64_t n, double c) {
    const float cf = (float)c;
    float t[SOFTCAP_BLOCK];
    for (int64_t i = 0; i < n; i += SOFTCAP_BLOCK) {
        const int64_t m = n - i < SOFTCAP_BLOCK ? n - i : SOFTCAP_BLOCK;
        fg_vtanh_div_f32(t, x + i, cf, m);
        for (int64_t k = 0; k < m; k++) dx[i + k] += dout[i + k] * (1 - t[k] * t[k]);
    }
}
static void softcap_fwd_f64(double *out, const double *x, int64_t n, double c) { SOFTCAP_FWD_BODY(double); }
static void softcap_bwd_f64(double *dx, const double *dout, const double *x, int64_t n, double c) {
    SOFTCAP_BWD_BODY(double);
}

#if FG_SIMD_X86
/* relu² in float32 without branches (the signs of x are a coin toss: a branch per element mispredicts
 * half the time): the same IEEE operations as the loops above, so the same bits. maxps(x, 0) is
 * "x > 0 ? x : 0" exactly (0 for NaN and -0 too); the backward computes dx + dout (2 x) in every
 * lane and keeps it where x > 0. SSE4.2 is the build's baseline (x86-64-v2). */
static void relu2_fwd_f32_sse(float *out, const float *x, int64_t n) {
    const __m128 z = _mm_setzero_ps();
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m128 r = _mm_max_ps(_mm_loadu_ps(x + i), z);
        _mm_storeu_ps(out + i, _mm_mul_ps(r, r));
    }
    relu2_fwd_f32(out + i, x + i, n - i);
}
static void relu2_bwd_f32_sse(float *dx, const float *dout, const float *x, int64_t n) {
    const __m128 z = _mm_setzero_ps(), two = _mm_set1_ps(2.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m128 xv = _mm_loadu_ps(x + i), d = _mm_loadu_ps(dx + i), m = _mm_cmpgt_ps(xv, z);
        const __m128 v = _mm_add_ps(d, _mm_mul_ps(_mm_loadu_ps(dout + i), _mm_mul_ps(two, xv)));
        _mm_storeu_ps(dx + i, _mm_or_ps(_mm_and_ps(m, v), _mm_andnot_ps(m, d)));
    }
    relu2_bwd_f32(dx + i, dout + i, x + i, n - i);
}
#endif

/* ---- pieces on the thread pool: each call runs one kernel above over elements [b, e) ---- */
typedef enum {
    ACT_RELU2_FWD,
    ACT_RELU2_BWD,
    ACT_SWIGLU_FWD,
    ACT_SWIGLU_BWD,
    ACT_SOFTCAP_FWD,
    ACT_SOFTCAP_BWD
} act_kind;
typedef struct {
    act_kind kind;
    fg_dtype dt;
    void *o1, *o2;            /* out, or dx / da and db */
    const void *i1, *i2, *i3; /* the inputs in the kernel's order */
    double c;
} act_job;

#define AT(p, T, b) ((p) ? (T *)(p) + (b) : NULL)
#define ACT_PIECE(T, sfx)                                                                                              \
    switch (j->kind) {                                                                                                 \
    case ACT_RELU2_FWD:                                                                                                \
        relu2_fwd_##sfx(AT(j->o1, T, b), AT(j->i1, const T, b), n);                                                    \
        break;                                                                                                         \
    case ACT_RELU2_BWD:                                                                                                \
        relu2_bwd_##sfx(AT(j->o1, T, b), AT(j->i1, const T, b), AT(j->i2, const T, b), n);                             \
        break;                                                                                                         \
    case ACT_SWIGLU_FWD:                                                                                               \
        swiglu_fwd_##sfx(AT(j->o1, T, b), AT(j->i1, const T, b), AT(j->i2, const T, b), n);                            \
        break;                                                                                                         \
    case ACT_SWIGLU_BWD:                                                                                               \
        swiglu_bwd_##sfx(AT(j->o1, T, b), AT(j->o2, T, b), AT(j->i1, const T, b), AT(j->i2, const T, b),               \
                         AT(j->i3, const T, b), n);                                                                    \
        break;                                                                                                         \
    case ACT_SOFTCAP_FWD:                                                                                              \
        softcap_fwd_##sfx(AT(j->o1, T, b), AT(j->i1, const T, b), n, j->c);                                            \
        break;                                                                                                         \
    case ACT_SOFTCAP_BWD:                                                                                              \
        softcap_bwd_##sfx(AT(j->o1, T, b), AT(j->i1, const T, b), AT(j->i2, const T, b), n, j->c);                     \
        break;                                                                                                         \
    }

static void act_piece(void *ctx, int64_t b, int64_t e) {
    const act_job *j = ctx;
    const int64_t n = e - b;
    if (j->dt == FG_F32) {
#if FG_SIMD_X86
        if (j->kind == ACT_RELU2_FWD) return relu2_fwd_f32_sse((float *)j->o1 + b, (const float *)j->i1 + b, n);
        if (j->kind == ACT_RELU2_BWD)
            return relu2_bwd_f32_sse((float *)j->o1 + b, (const float *)j->i1 + b, (const float *)j->i2 + b, n);
#endif
        ACT_PIECE(float, f32);
    } else {
        ACT_PIECE(double, f64);
    }
}

/* the job over n elements; ns: a rough cost per element (one thread) */
static fg_status act_run(act_job j, int64_t n, double ns) {
    fg_par_range(n, FG_PAR_CHUNK, ns, act_piece, &j);
    return FG_OK;
}

/* ---- SwiGLU on the rows of a gate|up output: pieces of whole rows ---- */
typedef struct {
    fg_dtype dt;
    void *y;              /* out (R, n), or dx (R, 2n) */
    const void *x, *dout; /* x (R, 2n); dout (R, n) or NULL (forward) */
    int64_t n; /* the half row */
} swiglu_rows_job;

#define SWIGLU_ROWS_PIECE(T, sfx)                                                                                      \
    for (int64_t r = b; r < e; r++) {                                                                                  \
        const T *xa = (const T *)j->x + r * 2 * n;                                                                     \
        if (j->dout)                                                                                                   \
            swiglu_bwd_##sfx((T *)j->y + r * 2 * n, (T *)j->y + r * 2 * n + n, (const T *)j->dout + r * n, xa, xa + n, \
                             n);                                                                                       \
        else                                                                                                           \
            swiglu_fwd_##sfx((T *)j->y + r * n, xa, xa + n, n);                                                        \
    }

static void swiglu_rows_piece(void *ctx, int64_t b, int64_t e) {
    const swiglu_rows_job *j = ctx;
    const int64_t n = j->n;
    if (j->dt == FG_F32) {
        SWIGLU_ROWS_PIECE(float, f32);
    } else {
        SWIGLU_ROWS_PIECE(double, f64);
    }
}

static fg_status swiglu_rows_run(swiglu_rows_job j, int64_t R, double ns) {
    fg_par_range(R, fg_par_rows(j.n), ns * (double)j.n, swiglu_rows_piece, &j);
    return FG_OK;
}

/* ---- the CPU kernels (ops/kernels.h) ---- */
fg_status fg_cpu_activation_swiglu_rows_forward(fg_dtype dt, void *out, const void *x, int64_t R, int64_t n) {
    return swiglu_rows_run((swiglu_rows_job){.dt = dt, .y = out, .x = x, .n = n}, R, 5.0);
}
fg_status fg_cpu_activation_swiglu_rows_backward(fg_dtype dt, void *dx, const void *dout, const void *x, int64_t R,
                                                 int64_t n) {
    return swiglu_rows_run((swiglu_rows_job){.dt = dt, .y = dx, .x = x, .dout = dout, .n = n}, R, 6.0);
}
fg_status fg_cpu_activation_relu2_forward(fg_dtype dt, void *out, const void *x, int64_t n) {
    return act_run((act_job){.kind = ACT_RELU2_FWD, .dt = dt, .o1 = out, .i1 = x}, n, 0.5);
}
fg_status fg_cpu_activation_relu2_backward(fg_dtype dt, void *dx, const void *dout, const void *x, int64_t n) {
    return act_run((act_job){.kind = ACT_RELU2_BWD, .dt = dt, .o1 = dx, .i1 = dout, .i2 = x}, n, 1.0);
}
fg_status fg_cpu_activation_swiglu_forward(fg_dtype dt, void *out, const void *a, const void *b, int64_t n) {
    return act_run((act_job){.kind = ACT_SWIGLU_FWD, .dt = dt, .o1 = out, .i1 = a, .i2 = b}, n, 5.0);
}
fg_status fg_cpu_activation_swiglu_backward(fg_dtype dt, void *da, void *db, const void *dout, const void *a,
                                            const void *b, int64_t n) {
    return act_run((act_job){.kind = ACT_SWIGLU_BWD, .dt = dt, .o1 = da, .o2 = db, .i1 = dout, .i2 = a, .i3 = b}, n,
                   6.0);
}
fg_status fg_cpu_activation_softcap_forward(fg_dtype dt, void *out, const void *x, int64_t n, double c) {
    return act_run((act_job){.kind = ACT_SOFTCAP_FWD, .dt = dt, .o1 = out, .i1 = x, .c = c}, n, 8.0);
}
fg_status fg_cpu_activation_softcap_backward(fg_dtype dt, void *dx, const void *dout, const void *x, int64_t n,
                                             double c) {
    return act_run((act_job){.kind = ACT_SOFTCAP_BWD, .dt = dt, .o1 = dx, .i1 = dout, .i2 = x, .c = c}, n, 8.0);
}
