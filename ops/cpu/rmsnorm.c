/* rmsnorm.c — the CPU's RMSNorm kernels (ops/kernels.h's FG_KERNELS_RMSNORM); the math and the
 * op's shell are in ops/rmsnorm.c. CPU only: the CUDA table holds NULL.
 *
 * Plain loops, written once for both dtypes (T is float or double); the row sums accumulate in
 * double for both. R is the number of rows, C the row length. Rows are computed alone, so the
 * forward, and the backward without a weight gradient (whose sum runs over the rows), go in pieces
 * of rows on the thread pool (fg_par_range), the same bits for any thread count.
 */
#include "ops/cpu/kernel.h"
#include "ops/cpu/vmath.h"
#include "ops/kernels_cpu.h"

/* out (R, C), rstd (R) saved for the backward; x (R, C); w (C) or NULL */
#define RMSNORM_FWD_BODY(T)                                                                                            \
    for (int64_t r = 0; r < R; r++) {                                                                                  \
        const T *xr = x + r * C;                                                                                       \
        T *o = out + r * C;                                                                                            \
        double ss = 0;                                                                                                 \
        for (int64_t i = 0; i < C; i++) ss += (double)xr[i] * (double)xr[i];                                           \
        const T rs = (T)(1.0 / sqrt(ss / (double)C + eps));                                                            \
        for (int64_t i = 0; i < C; i++) o[i] = w ? xr[i] * rs * w[i] : xr[i] * rs;                                     \
        rstd[r] = rs;                                                                                                  \
    }

/* forward: out_i = x_i * rstd * w_i, rstd = (Σ_j x_j² / C + eps)^(-1/2).
 * With n_i = x_i * rstd and dn_i = dout_i * w_i, d rstd / d x_j = -rstd³ x_j / C, so
 *   dx_j += rstd * (dn_j - n_j * Σ_i dn_i n_i / C)        dw_i += Σ_rows dout_i * n_i
 * dx (R, C), dw (C), either NULL; dout, x (R, C); rstd (R) from the forward */
#define RMSNORM_BWD_BODY(T)                                                                                            \
    for (int64_t r = 0; r < R; r++) {                                                                                  \
        const T *xr = x + r * C, *d = dout + r * C, rs = rstd[r];                                                      \
        if (dw)                                                                                                        \
            for (int64_t i = 0; i < C; i++) dw[i] += d[i] * (xr[i] * rs);                                              \
        if (!dx) continue;                                                                                             \
        double s = 0;                                                                                                  \
        for (int64_t i = 0; i < C; i++) s += (double)(w ? d[i] * w[i] : d[i]) * (double)(xr[i] * rs);                  \
        const T mean_dnn = (T)(s / (double)C);                                                                         \
        T *g = dx + r * C;                                                                                             \
        for (int64_t i = 0; i < C; i++) {                                                                              \
            const T n = xr[i] * rs, dn = w ? d[i] * w[i] : d[i];                                                       \
            g[i] += rs * (dn - n * mean_dnn);                                                                          \
        }                                                                                                              \
    }

static void rmsnorm_fwd_f32(float *out, float *rstd, const float *x, const float *w, int64_t R, int64_t C, double eps) {
    RMSNORM_FWD_BODY(float);
}
static void rmsnorm_bwd_f32(float *dx, float *dw, const float *dout, const float *x, const float *rstd, const float *w,
                            int64_t R, int64_t C) {
    RMSNORM_BWD_BODY(float);
}
static void rmsnorm_fwd_f64(double *out, double *rstd, const double *x, const double *w, int64_t R, int64_t C,
                            double eps) {
    RMSNORM_FWD_BODY(double);
}
static void rmsnorm_bwd_f64(double *dx, double *dw, const double *dout, const double *x, const double *rstd,
                            const double *w, int64_t R, int64_t C) {
    RMSNORM_BWD_BODY(double);
}

/* rows [b, e) of a forward (dx NULL) or of a backward without dw */
typedef struct {
    fg_dtype dt;
    void *out, *rstd;
    const void *x, *w, *dout, *rstd_in;
    int64_t C;
    double eps;
} rmsnorm_job;

#define ROWS(p, T, b, C) ((p) ? (T *)(p) + (b) * (C) : NULL)
static void rmsnorm_piece(void *ctx, int64_t b, int64_t e) {
    const rmsnorm_job *j = ctx;
    const int64_t R = e - b, C = j->C;
    if (j->dout && j->dt == FG_F32)
        rmsnorm_bwd_f32(ROWS(j->out, float, b, C), NULL, ROWS(j->dout, const float, b, C),
                        ROWS(j->x, const float, b, C), (const float *)j->rstd_in + b, j->w, R, C);
    else if (j->dout)
        rmsnorm_bwd_f64(ROWS(j->out, double, b, C), NULL, ROWS(j->dout, const double, b, C),
                        ROWS(j->x, const double, b, C), (const double *)j->rstd_in + b, j->w, R, C);
    else if (j->dt == FG_F32)
        rmsnorm_fwd_f32(ROWS(j->out, float, b, C), (float *)j->rstd + b, ROWS(j->x, const float, b, C), j->w, R, C,
                        j->eps);
    else
        rmsnorm_fwd_f64(ROWS(j->out, double, b, C), (double *)j->rstd + b, ROWS(j->x, const double, b, C), j->w, R, C,
                        j->eps);
}

/* ---- the CPU kernels (ops/kernels.h) ---- */
fg_status fg_cpu_rmsnorm_forward(fg_dtype dt, void *out, void *rstd, const void *x, const void *w, int64_t R, int64_t C,
                                 double eps) {
    rmsnorm_job j = {.dt = dt, .out = out, .rstd = rstd, .x = x, .w = w, .C = C, .eps = eps};
    fg_par_range(R, fg_par_rows(C), 1.0 * (double)C, rmsnorm_piece, &j);
    return FG_OK;
}

fg_status fg_cpu_rmsnorm_backward(fg_dtype dt, void *dx, void *dw, const void *dout, const void *x, const void *rstd,
                                  const void *w, int64_t R, int64_t C) {
    if (dw || !dx) { /* dw sums over every row, in row order */
        FG_DISPATCH(dt, rmsnorm_bwd, dx, dw, dout, x, rstd, w, R, C);
        return FG_OK;
    }
    rmsnorm_job j = {.dt = dt, .out = dx, .x = x, .w = w, .dout = dout, .rstd_in = rstd, .C = C};
    fg_par_range(R, fg_par_rows(C), 2.0 * (double)C, rmsnorm_piece, &j);
    return FG_OK;
}
