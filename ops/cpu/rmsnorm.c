/* rmsnorm.c — the CPU's RMSNorm kernels (ops/kernels.h's FG_KERNELS_RMSNORM); the math and the
 * op's shell are in ops/rmsnorm.c. CPU only: the CUDA table holds NULL.
 *
 * Plain loops, written once for both dtypes (T is float or double); the row sums accumulate in
 * double for both, float32's in 16 lanes (ops/cpu/vmath.h) so that its AVX-512 form gives the plain
 * form's bits. R is the number of rows, C the row length.
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

/* ---- float32: the row sums as 16-lane sums (ops/cpu/vmath.h), an AVX-512 form and a plain one
 * of the same bits. Each product of two floats is exact in double, so a lane's fused
 * multiply-add and its multiply-then-add agree; the rest is the loops' float arithmetic above, in
 * the same order. ---- */

/* Σ_i a_i b_i over the row in 16 lanes of double, with a_i = x_i p_i (p NULL: x_i) and b_i = y_i q
 * (each rounded to float first) */
static double rms_dot16(const float *x, const float *p, const float *y, float q, int64_t C) {
    double l[16] = {0};
    for (int64_t i = 0; i < C; i++) {
        const float a = p ? x[i] * p[i] : x[i], b = y[i] * q;
        l[i % 16] += (double)a * (double)b;
    }
    return fg_lanes16_sum(l);
}

static void rms_fwd_row_plain(float *o, float *rstd, const float *xr, const float *w, int64_t C, double eps) {
    const float rs = (float)(1.0 / sqrt(rms_dot16(xr, NULL, xr, 1.0f, C) / (double)C + eps));
    for (int64_t i = 0; i < C; i++) o[i] = w ? xr[i] * rs * w[i] : xr[i] * rs;
    *rstd = rs;
}

static void rms_dx_row_plain(float *g, const float *d, const float *xr, float rs, const float *w, int64_t C) {
    const float mean_dnn = (float)(rms_dot16(d, w, xr, rs, C) / (double)C);
    for (int64_t i = 0; i < C; i++) {
        const float n = xr[i] * rs, dn = w ? d[i] * w[i] : d[i];
        g[i] += rs * (dn - n * mean_dnn);
    }
}

#if FG_SIMD_X86
FG_TARGET_AVX512 static double rms_dot16_avx512(const float *x, const float *p, const float *y, float q, int64_t C) {
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    const __m512 qv = _mm512_set1_ps(q);
    for (int64_t i = 0; i < C; i += 16) {
        const __mmask16 k = C - i >= 16 ? (__mmask16)0xffff : fg_mask16(C - i);
        __m512 a = fg_loadz16(k, x + i);
        if (p) a = _mm512_mul_ps(a, fg_loadz16(k, p + i));
        const __m512 b = _mm512_mul_ps(fg_loadz16(k, y + i), qv);
        lo = _mm512_fmadd_pd(fg_lo8_pd_avx512(a), fg_lo8_pd_avx512(b), lo);
        hi = _mm512_fmadd_pd(fg_hi8_pd_avx512(a), fg_hi8_pd_avx512(b), hi);
    }
    return fg_lanes16_sum_avx512(lo, hi);
}

FG_TARGET_AVX512 static void rms_fwd_row_avx512(float *o, float *rstd, const float *xr, const float *w, int64_t C,
                                                double eps) {
    const float rs = (float)(1.0 / sqrt(rms_dot16_avx512(xr, NULL, xr, 1.0f, C) / (double)C + eps));
    const __m512 rv = _mm512_set1_ps(rs);
    for (int64_t i = 0; i < C; i += 16) {
        const __mmask16 k = C - i >= 16 ? (__mmask16)0xffff : fg_mask16(C - i);
        __m512 v = _mm512_mul_ps(fg_loadz16(k, xr + i), rv);
        if (w) v = _mm512_mul_ps(v, fg_loadz16(k, w + i));
        _mm512_mask_storeu_ps(o + i, k, v);
    }
    *rstd = rs;
}

FG_TARGET_AVX512 static void rms_dx_row_avx512(float *g, const float *d, const float *xr, float rs, const float *w,
                                               int64_t C) {
    const __m512 mv = _mm512_set1_ps((float)(rms_dot16_avx512(d, w, xr, rs, C) / (double)C));
    const __m512 rv = _mm512_set1_ps(rs);
    for (int64_t i = 0; i < C; i += 16) {
        const __mmask16 k = C - i >= 16 ? (__mmask16)0xffff : fg_mask16(C - i);
        const __m512 n = _mm512_mul_ps(fg_loadz16(k, xr + i), rv);
        __m512 dn = fg_loadz16(k, d + i);
        if (w) dn = _mm512_mul_ps(dn, fg_loadz16(k, w + i));
        const __m512 t = _mm512_mul_ps(rv, _mm512_sub_ps(dn, _mm512_mul_ps(n, mv)));
        _mm512_mask_storeu_ps(g + i, k, _mm512_add_ps(fg_loadz16(k, g + i), t));
    }
}
#endif

static void rmsnorm_fwd_f32(float *out, float *rstd, const float *x, const float *w, int64_t r0, int64_t r1, int64_t C,
                            double eps) {
#if FG_SIMD_X86
    if (fg_simd_active() == FG_SIMD_AVX512) {
        for (int64_t r = r0; r < r1; r++) rms_fwd_row_avx512(out + r * C, rstd + r, x + r * C, w, C, eps);
        return;
    }
#endif
    for (int64_t r = r0; r < r1; r++) rms_fwd_row_plain(out + r * C, rstd + r, x + r * C, w, C, eps);
}
static void rmsnorm_fwd_f64(double *out, double *rstd, const double *x, const double *w, int64_t r0, int64_t r1,
                            int64_t C, double eps) {
    RMSNORM_FWD_BODY(double);
}
static void rmsnorm_bwd_dx_f32(float *dx, const float *dout, const float *x, const float *rstd, const float *w,
                               int64_t r0, int64_t r1, int64_t C) {
#if FG_SIMD_X86
    if (fg_simd_active() == FG_SIMD_AVX512) {
        for (int64_t r = r0; r < r1; r++) rms_dx_row_avx512(dx + r * C, dout + r * C, x + r * C, rstd[r], w, C);
        return;
    }
#endif
    for (int64_t r = r0; r < r1; r++) rms_dx_row_plain(dx + r * C, dout + r * C, x + r * C, rstd[r], w, C);
}
static void rmsnorm_bwd_dx_f64(double *dx, const double *dout, const double *x, const double *rstd, const double *w,
                               int64_t r0, int64_t r1, int64_t C) {
    RMSNORM_BWD_DX_BODY(double);
}
#if FG_SIMD_X86
/* dw's columns [c0, c1) 16 at a time, each lane summing its column over the rows in row order: the
 * plain loop's operations element for element (no sum is split), so its bits */
FG_TARGET_AVX512 static void rms_dw_avx512(float *dw, const float *dout, const float *x, const float *rstd, int64_t R,
                                           int64_t C, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; c += 16) {
        const __mmask16 k = c1 - c >= 16 ? (__mmask16)0xffff : fg_mask16(c1 - c);
        __m512 acc = _mm512_maskz_loadu_ps(k, dw + c);
        for (int64_t r = 0; r < R; r++) {
            const __m512 n = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + r * C + c), _mm512_set1_ps(rstd[r]));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dout + r * C + c), n));
        }
        _mm512_mask_storeu_ps(dw + c, k, acc);
    }
}
#endif

static void rmsnorm_bwd_dw_f32(float *dw, const float *dout, const float *x, const float *rstd, int64_t R, int64_t C,
                               int64_t c0, int64_t c1) {
#if FG_SIMD_X86
    if (fg_simd_active() == FG_SIMD_AVX512) {
        rms_dw_avx512(dw, dout, x, rstd, R, C, c0, c1);
        return;
    }
#endif
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
