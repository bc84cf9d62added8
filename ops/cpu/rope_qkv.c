/* rope_qkv.c — the CPU's kernels of the packed rotary embedding and QK-norm (ops/kernels.h's
 * FG_KERNELS_ROPE_QKV); the math and the op's shell are in ops/rope_qkv.c. CPU only.
 *
 * Legend: B = batch, T = time, H = query heads, K = key (and value) heads, D = head dim, D2 = D/2,
 * NH = H + K (the heads that are rotated and normalized), W = (H + 2K) D (a row).
 * x, out, dout, dx are (B, T, W): each row [q heads | k heads | v heads]; cs (T, D2, 2) holds cos
 * and sin of a_ti = (pos0 + t) theta^(-2i/D), computed in float64 and rounded to the dtype; rstd
 * (B, T, NH) is each q and k head's 1/rms when the op normalizes.
 *
 * Per q or k head h of the row at time t, with s = rot (+1 Hugging Face, -1 nanochat):
 *   y_i = h_i cos - h_{i+D2} s sin;   y_{i+D2} = h_{i+D2} cos + h_i s sin      (rotation, or y = h)
 *   out = y * rstd,  rstd = 1 / sqrt(Σ y² / D + eps)                          (or out = y)
 * v heads are copied. Every expression is the one ops/cpu/rope.c and ops/cpu/rmsnorm.c evaluate,
 * in the same order and precision, so the op equals the composition of fg_rope, the sign flips
 * and fg_rmsnorm bit for bit (nanochat's flips are exact negations: the sign moves onto sin).
 *
 * Rows are independent: both directions run over blocks of rows on the thread pool, each row
 * written by one item, so the bits do not depend on the thread count.
 */
#include <string.h>

#include "ops/cpu/kernel.h"
#include "ops/cpu/threadpool.h"
#include "ops/kernels_cpu.h"

/* rows per pool item (a row is W elements, a few hundred to a few thousand) */
#define ROPE_QKV_ROWS 32
/* times per pool item of the cos/sin table */
#define ROPE_QKV_TABLE_T 64

typedef struct {
    fg_dtype dt;
    void *y;       /* out (forward) or dx (backward) */
    void *rstd;    /* forward: written; backward: read */
    const void *v; /* x (forward) or dout (backward) */
    const void *o; /* backward: the forward's out (the normalized heads) */
    void *cs;      /* (T, D2, 2) */
    int64_t R, T, H, K, D, pos0;
    double theta, eps;
    int rot, norm, add;
} rope_qkv_job;

/* cs rows [t0, t1): cos and sin of (pos0 + t) inv_freq_i, inv_freq_i = theta^(-2i/D) */
#define ROPE_QKV_TABLE_BODY(T_)                                                                                        \
    do {                                                                                                               \
        T_ *cs = j->cs;                                                                                                \
        const int64_t D2 = j->D / 2;                                                                                   \
        for (int64_t i = 0; i < D2; i++) {                                                                             \
            const double inv_freq = 1.0 / pow(j->theta, (double)(2 * i) / (double)j->D);                               \
            for (int64_t t = t0; t < t1; t++) {                                                                        \
                const double a = (double)(j->pos0 + t) * inv_freq;                                                     \
                cs[2 * (t * D2 + i)] = (T_)cos(a);                                                                     \
                cs[2 * (t * D2 + i) + 1] = (T_)sin(a);                                                                 \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

static void rope_qkv_table_item(void *ctx, int64_t item, int worker) {
    (void)worker;
    const rope_qkv_job *j = ctx;
    const int64_t t0 = item * ROPE_QKV_TABLE_T, t1 = t0 + ROPE_QKV_TABLE_T < j->T ? t0 + ROPE_QKV_TABLE_T : j->T;
    if (j->dt == FG_F32)
        ROPE_QKV_TABLE_BODY(float);
    else
        ROPE_QKV_TABLE_BODY(double);
}

/* forward of rows [r0, r1): x -> out, rstd (see the top) */
#define ROPE_QKV_FWD_BODY(T_)                                                                                          \
    do {                                                                                                               \
        T_ *out = j->y, *rstd = j->rstd;                                                                               \
        const T_ *x = j->v, *csa = j->cs;                                                                              \
        const int64_t D = j->D, D2 = D / 2, NH = j->H + j->K, W = (NH + j->K) * D;                                     \
        const T_ sgn = (T_)j->rot;                                                                                     \
        for (int64_t r = r0; r < r1; r++) {                                                                            \
            const T_ *xr = x + r * W, *c = csa + 2 * (r % j->T) * D2;                                                  \
            T_ *orow = out + r * W;                                                                                    \
            for (int64_t h = 0; h < NH; h++) {                                                                         \
                const T_ *xh = xr + h * D;                                                                             \
                T_ *oh = orow + h * D;                                                                                 \
                if (j->rot)                                                                                            \
                    for (int64_t i = 0; i < D2; i++) {                                                                 \
                        const T_ co = c[2 * i], si = sgn * c[2 * i + 1], lo = xh[i], hi = xh[i + D2];                  \
                        oh[i] = lo * co - hi * si;                                                                     \
                        oh[i + D2] = hi * co + lo * si;                                                                \
                    }                                                                                                  \
                else                                                                                                   \
                    memcpy(oh, xh, (size_t)D * sizeof(T_));                                                            \
                if (!j->norm) continue;                                                                                \
                double ss = 0;                                                                                         \
                for (int64_t i = 0; i < D; i++) ss += (double)oh[i] * (double)oh[i];                                   \
                const T_ rs = (T_)(1.0 / sqrt(ss / (double)D + j->eps));                                               \
                for (int64_t i = 0; i < D; i++) oh[i] = oh[i] * rs;                                                    \
                rstd[r * NH + h] = rs;                                                                                 \
            }                                                                                                          \
            memcpy(orow + NH * D, xr + NH * D, (size_t)(j->K * D) * sizeof(T_));                                       \
        }                                                                                                              \
    } while (0)

/* backward of rows [r0, r1). With n = out (the normalized head) and rs its rstd, rmsnorm's rule
 *   g_i = rs (dout_i - n_i Σ_k dout_k n_k / D)            (g = dout without the norm)
 * then the transposed rotation (sin negated):
 *   dx_i (+)= g_i cos + g_{i+D2} s sin;   dx_{i+D2} (+)= g_{i+D2} cos - g_i s sin
 * and dx (+)= dout on the v heads. */
#define ROPE_QKV_BWD_BODY(T_)                                                                                          \
    do {                                                                                                               \
        T_ *dx = j->y;                                                                                                 \
        const T_ *dout = j->v, *out = j->o, *rstd = j->rstd, *csa = j->cs;                                             \
        const int64_t D = j->D, D2 = D / 2, NH = j->H + j->K, W = (NH + j->K) * D;                                     \
        const T_ sgn = (T_)-j->rot;                                                                                    \
        for (int64_t r = r0; r < r1; r++) {                                                                            \
            const T_ *dr = dout + r * W, *c = csa + 2 * (r % j->T) * D2;                                               \
            T_ *gr = dx + r * W;                                                                                       \
            for (int64_t h = 0; h < NH; h++) {                                                                         \
                const T_ *d = dr + h * D, *n = j->norm ? out + r * W + h * D : NULL;                                   \
                T_ *g = gr + h * D;                                                                                    \
                T_ rs = 1, mean_dnn = 0;                                                                               \
                if (j->norm) {                                                                                         \
                    rs = rstd[r * NH + h];                                                                             \
                    double s = 0;                                                                                      \
                    for (int64_t i = 0; i < D; i++) s += (double)d[i] * (double)n[i];                                  \
                    mean_dnn = (T_)(s / (double)D);                                                                    \
                }                                                                                                      \
                if (!j->rot) /* D may be odd: no pairs */                                                              \
                    for (int64_t i = 0; i < D; i++) {                                                                  \
                        const T_ gi = j->norm ? rs * (d[i] - n[i] * mean_dnn) : d[i];                                  \
                        g[i] = j->add ? g[i] + gi : gi;                                                                \
                    }                                                                                                  \
                else                                                                                                   \
                    for (int64_t i = 0; i < D2; i++) {                                                                 \
                        const T_ glo = j->norm ? rs * (d[i] - n[i] * mean_dnn) : d[i];                                 \
                        const T_ ghi = j->norm ? rs * (d[i + D2] - n[i + D2] * mean_dnn) : d[i + D2];                  \
                        const T_ co = c[2 * i], si = sgn * c[2 * i + 1];                                               \
                        const T_ ylo = glo * co - ghi * si, yhi = ghi * co + glo * si;                                 \
                        g[i] = j->add ? g[i] + ylo : ylo;                                                              \
                        g[i + D2] = j->add ? g[i + D2] + yhi : yhi;                                                    \
                    }                                                                                                  \
            }                                                                                                          \
            const T_ *dv = dr + NH * D;                                                                                \
            T_ *gv = gr + NH * D;                                                                                      \
            if (j->add)                                                                                                \
                for (int64_t i = 0; i < j->K * D; i++) gv[i] += dv[i];                                                 \
            else                                                                                                       \
                memcpy(gv, dv, (size_t)(j->K * D) * sizeof(T_));                                                       \
        }                                                                                                              \
    } while (0)

static void rope_qkv_fwd_item(void *ctx, int64_t item, int worker) {
    (void)worker;
    const rope_qkv_job *j = ctx;
    const int64_t r0 = item * ROPE_QKV_ROWS, r1 = r0 + ROPE_QKV_ROWS < j->R ? r0 + ROPE_QKV_ROWS : j->R;
    if (j->dt == FG_F32)
        ROPE_QKV_FWD_BODY(float);
    else
        ROPE_QKV_FWD_BODY(double);
}

static void rope_qkv_bwd_item(void *ctx, int64_t item, int worker) {
    (void)worker;
    const rope_qkv_job *j = ctx;
    const int64_t r0 = item * ROPE_QKV_ROWS, r1 = r0 + ROPE_QKV_ROWS < j->R ? r0 + ROPE_QKV_ROWS : j->R;
    if (j->dt == FG_F32)
        ROPE_QKV_BWD_BODY(float);
    else
        ROPE_QKV_BWD_BODY(double);
}

/* ---- the CPU kernels (ops/kernels.h) ---- */
fg_status fg_cpu_rope_qkv_forward(fg_dtype dt, void *out, void *rstd, void *cs, const void *x, int64_t B, int64_t T,
                                  int64_t H, int64_t K, int64_t D, int rot, double theta, int64_t pos0, int norm,
                                  double eps) {
    rope_qkv_job j = {.dt = dt,
                      .y = out,
                      .rstd = rstd,
                      .v = x,
                      .cs = cs,
                      .R = B * T,
                      .T = T,
                      .H = H,
                      .K = K,
                      .D = D,
                      .pos0 = pos0,
                      .theta = theta,
                      .eps = eps,
                      .rot = rot,
                      .norm = norm};
    if (rot) fg_pool_run((T + ROPE_QKV_TABLE_T - 1) / ROPE_QKV_TABLE_T, rope_qkv_table_item, &j, 0);
    fg_pool_run((j.R + ROPE_QKV_ROWS - 1) / ROPE_QKV_ROWS, rope_qkv_fwd_item, &j, 0);
    return FG_OK;
}

fg_status fg_cpu_rope_qkv_backward(fg_dtype dt, void *dx, int add, const void *dout, const void *out, const void *rstd,
                                   const void *cs, int64_t B, int64_t T, int64_t H, int64_t K, int64_t D, int rot,
                                   int norm) {
    rope_qkv_job j = {.dt = dt,
                      .y = dx,
                      .rstd = (void *)rstd,
                      .v = dout,
                      .o = out,
                      .cs = (void *)cs,
                      .R = B * T,
                      .T = T,
                      .H = H,
                      .K = K,
                      .D = D,
                      .rot = rot,
                      .norm = norm,
                      .add = add};
    fg_pool_run((j.R + ROPE_QKV_ROWS - 1) / ROPE_QKV_ROWS, rope_qkv_bwd_item, &j, 0);
    return FG_OK;
}
