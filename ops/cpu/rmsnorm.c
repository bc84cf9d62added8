/* rmsnorm.c — the CPU's RMSNorm kernels (ops/kernels.h's FG_KERNELS_RMSNORM); the math and the
 * op's shell are in ops/rmsnorm.c. CPU only: the CUDA table holds NULL.
 *
 * Plain loops, written once for both dtypes (T is float or double); the row sums accumulate in
 * double for both. R is the number of rows, C the row length.
 */
#include "ops/cpu/kernel.h"
#include "ops/cpu/vmath.h"
#include "ops/kernels_cpu.h"

/* rows [r0, r1): out (R, C), rstd (R) saved for the backward; x (R, C); w (C) or NULL */
#define RMSNORM_FWD_BODY(T)                                                                                            \
    for (int64_t r = r0; r < r1; r++) {                                                                                \
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
 * dx (R, C) rows [r0, r1); dout, x (R, C); rstd (R) from the forward */
#define RMSNORM_BWD_DX_BODY(T)                                                                                         \
    for (int64_t r = r0; r < r1; r++) {                                                                                \
        const T *xr = x + r * C, *d = dout + r * C, rs = rstd[r];                                                      \
        double s = 0;                                                                                                  \
        for (int64_t i = 0; i < C; i++) s += (double)(w ? d[i] * w[i] : d[i]) * (double)(xr[i] * rs);                  \
        const T mean_dnn = (T)(s / (double)C);                                                                         \
        T *g = dx + r * C;                                                                                             \
        for (int64_t i = 0; i < C; i++) {                                                                              \
            const T n = xr[i] * rs, dn = w ? d[i] * w[i] : d[i];                                                       \
            g[i] += rs * (dn - n * mean_dnn);                                                                          \
        }                                                                                                              \
    }
/* dw (C) columns [c0, c1), each summed over the rows in row order */
#define RMSNORM_BWD_DW_BODY(T)                                                                                         \
    for (int64_t r = 0; r < R; r++) {                                                                                  \
        const T *xr = x + r * C, *d = dout + r * C, rs = rstd[r];                                                      \
        for (int64_t i = c0; i < c1; i++) dw[i] += d[i] * (xr[i] * rs);                                                \
    }

static void rmsnorm_fwd_f32(float *out, float *rstd, const float *x, const float *w, int64_t r0, int64_t r1, int64_t C,
                            double eps) {
    RMSNORM_FWD_BODY(float);
}
static void rmsnorm_fwd_f64(double *out, double *rstd, const double *x, const double *w, int64_t r0, int64_t r1,
                            int64_t C, double eps) {
    RMSNORM_FWD_BODY(double);
}
static void rmsnorm_bwd_dx_f32(float *dx, const float *dout, const float *x, const float *rstd, const float *w,
                               int64_t r0, int64_t r1, int64_t C) {
    RMSNORM_BWD_DX_BODY(float);
}
static void rmsnorm_bwd_dx_f64(double *dx, const double *dout, const double *x, const double *rstd, const double *w,
                               int64_t r0, int64_t r1, int64_t C) {
    RMSNORM_BWD_DX_BODY(double);
}
static void rmsnorm_bwd_dw_f32(float *dw, const float *dout, const float *x, const float *rstd, int64_t R, int64_t C,
                               int64_t c0, int64_t c1) {
    RMSNORM_BWD_DW_BODY(float);
}
static void rmsnorm_bwd_dw_f64(double *dw, const double *dout, const double *x, const double *rstd, int64_t R,
                               int64_t C, int64_t c0, int64_t c1) {
    RMSNORM_BWD_DW_BODY(double);
}

/* ---- pieces on the thread pool: rows (forward, dx) or columns (dw); each output element is
 * computed by one piece in the serial loop's order, so the bits do not depend on the threads ---- */

/* serial cost per element (ns, one thread), for fg_par_range's decision */
#define RMSNORM_NS 1.0
/* columns per dw piece */
#define RMSNORM_DW_COLS 64

typedef struct {
    fg_dtype dt;
    void *out, *rstd, *dx, *dw;
    const void *x, *w, *dout, *rstd_in;
    int64_t R, C;
    double eps;
} rmsnorm_job;

static void rmsnorm_fwd_piece(void *ctx, int64_t r0, int64_t r1) {
    const rmsnorm_job *j = ctx;
    FG_DISPATCH(j->dt, rmsnorm_fwd, j->out, j->rstd, j->x, j->w, r0, r1, j->C, j->eps);
}
static void rmsnorm_dx_piece(void *ctx, int64_t r0, int64_t r1) {
    const rmsnorm_job *j = ctx;
    FG_DISPATCH(j->dt, rmsnorm_bwd_dx, j->dx, j->dout, j->x, j->rstd_in, j->w, r0, r1, j->C);
}
static void rmsnorm_dw_piece(void *ctx, int64_t c0, int64_t c1) {
    const rmsnorm_job *j = ctx;
    FG_DISPATCH(j->dt, rmsnorm_bwd_dw, j->dw, j->dout, j->x, j->rstd_in, j->R, j->C, c0, c1);
}

/* rows per piece: about FG_PAR_CHUNK elements */
static int64_t rmsnorm_rows_per(int64_t C) { return C >= FG_PAR_CHUNK ? 1 : FG_PAR_CHUNK / (C > 0 ? C : 1); }

/* ---- the CPU kernels (ops/kernels.h) ---- */
fg_status fg_cpu_rmsnorm_forward(fg_dtype dt, void *out, void *rstd, const void *x, const void *w, int64_t R, int64_t C,
                                 double eps) {
    rmsnorm_job j = {.dt = dt, .out = out, .rstd = rstd, .x = x, .w = w, .R = R, .C = C, .eps = eps};
    fg_par_range(R, rmsnorm_rows_per(C), RMSNORM_NS * (double)C, rmsnorm_fwd_piece, &j);
    return FG_OK;
}

fg_status fg_cpu_rmsnorm_backward(fg_dtype dt, void *dx, void *dw, const void *dout, const void *x, const void *rstd,
                                  const void *w, int64_t R, int64_t C) {
    rmsnorm_job j = {.dt = dt, .dx = dx, .dw = dw, .x = x, .w = w, .dout = dout, .rstd_in = rstd, .R = R, .C = C};
    if (dw) fg_par_range(C, RMSNORM_DW_COLS, RMSNORM_NS * (double)R, rmsnorm_dw_piece, &j);
    if (dx) fg_par_range(R, rmsnorm_rows_per(C), 2 * RMSNORM_NS * (double)C, rmsnorm_dx_piece, &j);
    return FG_OK;
}
