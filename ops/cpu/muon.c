/* muon.c — the CPU's Muon kernel (ops/kernels.h, `optimizer`): one matrix's momentum, Newton–Schulz
 * orthogonalization and update. train/muon.c calls it, through ops/flat.h's fg_flat_muon, once per
 * hidden matrix of the model (train/muon.h has the optimizer; ops/flat.h has the math).
 *
 * Legend: p, g, buf are (R, Cc) matrices, row-major (R = rows, Cc = cols): the parameter, its
 * gradient, its momentum buffer. k = min(R, Cc), n = max(R, Cc); the iteration works on X (k, n),
 * the update transposed when R > Cc, so its Gram matrix A = X Xᵀ is the small (k, k) one.
 * work: X (k, n), the next iterate Xn (k, n), A (k, k), B (k, k).
 *
 * The element loops run on the calling thread in index order and the three products per step go
 * to the CPU GEMM (ops/cpu/matmul.c), whose bits do not follow the thread count: the update is the
 * same for any number of threads.
 */
#include <math.h>
#include <string.h>

#include "ops/kernels_cpu.h"

/* PyTorch's lerp: x + w (y − x) for |w| < 0.5, else y − (y − x)(1 − w) (exact at both ends). */
#define MUON_LERP(T, x, y, w) ((w) < (T)0.5 ? (x) + (w) * ((y) - (x)) : (y) - ((y) - (x)) * ((T)1 - (w)))

/* Momentum and Nesterov into X (transposed when R > Cc); returns ‖u‖_F² in float64, index order. */
#define MUON_MOMENTUM_BODY(T)                                                                                          \
    const T gs = (T)gscale, mu = (T)ms->momentum, omm = (T)(1.0 - ms->momentum);                                       \
    double ss = 0;                                                                                                     \
    for (int64_t i = 0; i < R; i++)                                                                                    \
        for (int64_t j = 0; j < Cc; j++) {                                                                             \
            const int64_t ix = i * Cc + j;                                                                             \
            const T gi = g[ix] * gs;                                                                                   \
            const T b = buf[ix] = MUON_LERP(T, buf[ix], gi, omm);                                                      \
            const T u = ms->nesterov ? MUON_LERP(T, gi, b, mu) : b;                                                    \
            X[tr ? j * R + i : ix] = u;                                                                                \
        }                                                                                                              \
    for (int64_t i = 0; i < R * Cc; i++) ss += (double)X[i] * (double)X[i];

/* The update, X read back in p's layout. */
#define MUON_APPLY_BODY(T)                                                                                             \
    const T df = (T)ms->decay_factor, nlr = (T)(-ms->lr);                                                              \
    for (int64_t i = 0; i < R; i++)                                                                                    \
        for (int64_t j = 0; j < Cc; j++) {                                                                             \
            const int64_t ix = i * Cc + j;                                                                             \
            p[ix] = p[ix] * df + nlr * X[tr ? j * R + i : ix];                                                         \
        }

static void momentum_f32(float *X, const float *g, double gscale, float *buf, int64_t R, int64_t Cc, int tr,
                         const fg_muon_step *ms, double *sumsq) {
    MUON_MOMENTUM_BODY(float)
    *sumsq = ss;
}
static void momentum_f64(double *X, const double *g, double gscale, double *buf, int64_t R, int64_t Cc, int tr,
                         const fg_muon_step *ms, double *sumsq) {
    MUON_MOMENTUM_BODY(double)
    *sumsq = ss;
}
static void apply_f32(float *p, const float *X, int64_t R, int64_t Cc, int tr, const fg_muon_step *ms) {
    MUON_APPLY_BODY(float)
}
static void apply_f64(double *p, const double *X, int64_t R, int64_t Cc, int tr, const fg_muon_step *ms) {
    MUON_APPLY_BODY(double)
}

fg_status fg_cpu_optimizer_muon(fg_dtype dt, void *p, const void *g, double gscale, void *buf, int64_t R, int64_t Cc,
                                const fg_muon_step *ms, void *work) {
    if (dt != FG_F32 && dt != FG_F64) return fg_error(FG_ERR_DTYPE, "muon: float32 or float64 parameters only");
    const size_t es = fg_dtype_size(dt);
    const int tr = R > Cc;
    const int64_t k = tr ? Cc : R, n = tr ? R : Cc;
    char *X = work, *Xn = X + (size_t)(k * n) * es, *A = Xn + (size_t)(k * n) * es, *B = A + (size_t)(k * k) * es;
    double ss;
    if (dt == FG_F32)
        momentum_f32((float *)X, g, gscale, buf, R, Cc, tr, ms, &ss);
    else
        momentum_f64((double *)X, g, gscale, buf, R, Cc, tr, ms, &ss);
    /* X /= max(‖X‖_F, eps): the spectral norm is at most the Frobenius one, so the iteration starts
     * with every singular value in (0, 1] */
    const double nrm = sqrt(ss) > ms->eps ? sqrt(ss) : ms->eps;
    if (dt == FG_F32)
        for (int64_t i = 0; i < k * n; i++) ((float *)X)[i] /= (float)nrm;
    else
        for (int64_t i = 0; i < k * n; i++) ((double *)X)[i] /= nrm;
    fg_status st = FG_OK;
    for (int s = 0; s < ms->ns_steps && st == FG_OK; s++) {
        /* A = X Xᵀ (k, k) */
        st = fg_cpu_matmul_gemm(dt, 0, 1, k, k, n, 1.0, X, n, 0, X, n, 0, 0.0, NULL, A, k, 0, 1);
        /* B = b A + c A A */
        if (st == FG_OK) {
            memcpy(B, A, (size_t)(k * k) * es);
            st = fg_cpu_matmul_gemm(dt, 0, 0, k, k, k, ms->c, A, k, 0, A, k, 0, ms->b, NULL, B, k, 0, 1);
        }
        /* Xn = a X + B X */
        if (st == FG_OK) {
            memcpy(Xn, X, (size_t)(k * n) * es);
            st = fg_cpu_matmul_gemm(dt, 0, 0, k, n, k, 1.0, B, k, 0, X, n, 0, ms->a, NULL, Xn, n, 0, 1);
        }
        char *t = X;
        X = Xn;
        Xn = t;
    }
    if (st != FG_OK) return st;
    if (dt == FG_F32)
        apply_f32(p, (const float *)X, R, Cc, tr, ms);
    else
        apply_f64(p, (const double *)X, R, Cc, tr, ms);
    return FG_OK;
}
