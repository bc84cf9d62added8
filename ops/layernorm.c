/* layernorm.c — layer normalization over the last dim.
 *
 * Legend: x is (..., C), seen as R = prod(...) rows of C; weight and bias are (C) or NULL (then 1
 * and 0); out is (..., C).
 * saved for backward: X (x, contiguous), mean (R) and rstd (R) = 1/sqrt(var + eps), W (weight).
 *
 *   mean = sum_i x_i / C        var = sum_i (x_i - mean)² / C        (biased, like PyTorch)
 *   norm_i = (x_i - mean) * rstd        out_i = norm_i * w_i + b_i
 *
 * Row sums accumulate in double for both dtypes.
 */
#include <string.h>

#include "ops/ops_internal.h"

#define LAYERNORM_KERNELS(T, SFX)                                                                      \
    static void layernorm_fwd_##SFX(T *out, T *mean, T *rstd, const T *x, const T *w, const T *b,      \
                                    int64_t R, int64_t C, double eps) {                                \
        for (int64_t r = 0; r < R; r++) {                                                              \
            const T *xr = x + r * C;                                                                   \
            T *o = out + r * C;                                                                        \
            double s = 0;                                                                              \
            for (int64_t i = 0; i < C; i++) s += xr[i];                                                \
            T m = (T)(s / (double)C);                                                                  \
            double v = 0;                                                                              \
            for (int64_t i = 0; i < C; i++) {                                                          \
                T d = xr[i] - m;                                                                       \
                v += (double)d * d;                                                                    \
            }                                                                                          \
            T rs = (T)(1.0 / sqrt(v / (double)C + eps));                                               \
            for (int64_t i = 0; i < C; i++) o[i] = (xr[i] - m) * rs;                                   \
            if (w)                                                                                     \
                for (int64_t i = 0; i < C; i++) o[i] *= w[i];                                          \
            if (b)                                                                                     \
                for (int64_t i = 0; i < C; i++) o[i] += b[i];                                          \
            mean[r] = m;                                                                               \
            rstd[r] = rs;                                                                              \
        }                                                                                              \
    }                                                                                                  \
    /* forward: out_i = (x_i - mean) * rstd * w_i + b_i. With norm_i = (x_i - mean) * rstd and       \
     * dnorm_i = dout_i * w_i, differentiating through mean and rstd gives                          \
     *   dx_i += rstd * (dnorm_i - mean_j(dnorm_j) - norm_i * mean_j(dnorm_j * norm_j))             \
     *   dw_i += dout_i * norm_i          db_i += dout_i                                             \
     * dx, dw, db may each be NULL (not wanted). */                                                   \
    static void layernorm_bwd_##SFX(T *dx, T *dw, T *db, const T *dout, const T *x, const T *mean,     \
                                    const T *rstd, const T *w, int64_t R, int64_t C) {                 \
        for (int64_t r = 0; r < R; r++) {                                                              \
            const T *xr = x + r * C, *d = dout + r * C;                                                \
            T m = mean[r], rs = rstd[r];                                                               \
            if (dw)                                                                                    \
                for (int64_t i = 0; i < C; i++) dw[i] += d[i] * ((xr[i] - m) * rs);                    \
            if (db)                                                                                    \
                for (int64_t i = 0; i < C; i++) db[i] += d[i];                                         \
            if (!dx) continue;                                                                         \
            double s_dn = 0, s_dnn = 0;                                                                \
            for (int64_t i = 0; i < C; i++) {                                                          \
                T norm = (xr[i] - m) * rs, dn = w ? d[i] * w[i] : d[i];                                \
                s_dn += dn;                                                                            \
                s_dnn += (double)dn * norm;                                                            \
            }                                                                                          \
            T mean_dn = (T)(s_dn / (double)C), mean_dnn = (T)(s_dnn / (double)C);                      \
            T *dxr = dx + r * C;                                                                       \
            for (int64_t i = 0; i < C; i++) {                                                          \
                T norm = (xr[i] - m) * rs, dn = w ? d[i] * w[i] : d[i];                                \
                dxr[i] += rs * (dn - mean_dn - norm * mean_dnn);                                       \
            }                                                                                          \
        }                                                                                              \
    }
LAYERNORM_KERNELS(float, f32)
LAYERNORM_KERNELS(double, f64)

/* inputs {x, weight, bias}; saved {X, mean, rstd, W} */
static fg_status layernorm_backward(fg_node *n) {
    fg_tensor *dx = fg_grad_buffer(n->inputs[0]), *dw = fg_grad_buffer(n->inputs[1]);
    fg_tensor *db = fg_grad_buffer(n->inputs[2]);
    if (!dx && !dw && !db) return FG_OK;
    fg_tensor *X = n->saved[0], *mean = n->saved[1], *rstd = n->saved[2], *W = n->saved[3];
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    int64_t C = X->shape[X->ndim - 1], R = mean->shape[0];
    FG_DISPATCH(X->dtype, layernorm_bwd, dx ? fg_data(dx) : NULL, dw ? fg_data(dw) : NULL, db ? fg_data(db) : NULL,
                fg_data(dout), fg_data(X), fg_data(mean), fg_data(rstd), W ? fg_data(W) : NULL, R, C);
    fg_release(dout);
    return FG_OK;
}

fg_tensor *fg_layernorm(fg_tensor *x, fg_tensor *weight, fg_tensor *bias, double eps) {
    static const char op[] = "layernorm";
    char b1[FG_SHAPE_BUF], b2[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK) return NULL;
    if (weight && fg_op_check_like(op, "weight", weight, "x", x) != FG_OK) return NULL;
    if (bias && fg_op_check_like(op, "bias", bias, "x", x) != FG_OK) return NULL;
    if (x->ndim < 1) {
        fg_error(FG_ERR_SHAPE, "%s: x %s needs at least one dim", op, FG_SHP(x, b1));
        return NULL;
    }
    int64_t C = x->shape[x->ndim - 1], R = 1;
    for (int d = 0; d < x->ndim - 1; d++) R *= x->shape[d];
    const fg_tensor *params[2] = {weight, bias};
    for (int k = 0; k < 2; k++)
        if (params[k] && (params[k]->ndim != 1 || params[k]->shape[0] != C)) {
            fg_error(FG_ERR_SHAPE, "%s: %s %s does not match x %s: need (%lld)", op, k ? "bias" : "weight",
                     FG_SHP(params[k], b2), FG_SHP(x, b1), (long long)C);
            return NULL;
        }
    if (!(eps >= 0) || isinf(eps)) {
        fg_error(FG_ERR_ARG, "%s: eps = %g must be finite and >= 0 (x %s)", op, eps, FG_SHP(x, b1));
        return NULL;
    }
#ifdef FG_WITH_CUDA
    if (x->device == FG_CUDA) return fg_cuda_layernorm(x, weight, bias, eps); /* cuda/layernorm.cu */
#endif
    if (x->device != FG_CPU) return fg_op_no_cuda(op); /* CUDA dispatch point */

    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *W = (X && weight) ? fg_op_contiguous(weight) : NULL;
    fg_tensor *B = (X && bias) ? fg_op_contiguous(bias) : NULL;
    fg_tensor *mean = fg_empty(x->dtype, FG_CPU, 1, &R), *rstd = fg_empty(x->dtype, FG_CPU, 1, &R);
    fg_tensor *out = fg_empty(x->dtype, FG_CPU, x->ndim, x->shape);
    fg_tensor *ret = NULL;
    if (X && (W || !weight) && (B || !bias) && mean && rstd && out) {
        FG_DISPATCH(x->dtype, layernorm_fwd, fg_data(out), fg_data(mean), fg_data(rstd), fg_data(X),
                    W ? fg_data(W) : NULL, B ? fg_data(B) : NULL, R, C, eps);
        fg_node *node = fg_record(out, op, layernorm_backward, 3, (fg_tensor *[]){x, weight, bias});
        if (node) {
            fg_node_save(node, X);
            fg_node_save(node, mean);
            fg_node_save(node, rstd);
            fg_node_save(node, W);
            node->fargs[0] = eps;
        }
        ret = out;
        out = NULL;
    }
    fg_release(X);
    fg_release(W);
    fg_release(B);
    fg_release(mean);
    fg_release(rstd);
    fg_release(out);
    return ret;
}
