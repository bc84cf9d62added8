/* layernorm.cu — layer normalization over the last dim, on the GPU.
 *
 * CPU reference: ops/layernorm.c (same formulas; row sums in float64; biased variance).
 *
 * Legend: x is (..., C), seen as R rows of C; weight and bias are (C) or NULL (1 and 0);
 * out is (..., C).
 * saved for backward: X (x, contiguous), mean (R), rstd (R) = 1/sqrt(var + eps), W (weight).
 *   mean = Σ_i x_i / C      var = Σ_i (x_i − mean)² / C      out_i = (x_i − mean) · rstd · w_i + b_i
 * Backward, with norm_i = (x_i − mean) · rstd and dnorm_i = dout_i · w_i:
 *   dx_i += rstd · (dnorm_i − mean_j(dnorm_j) − norm_i · mean_j(dnorm_j · norm_j))
 *   dw_i += Σ_rows dout_i · norm_i        db_i += Σ_rows dout_i
 * One warp per row for the row work; dw and db are column sums over rows done in a fixed order
 * (fg_cu_colsum), not with atomics.
 */
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

template <typename T>
__global__ void layernorm_fwd_kernel(T *out, T *mean, T *rstd, const T *x, const T *w, const T *b, int64_t R,
                                     int64_t C, double eps) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; r < R; r += warps) {
        const T *xr = x + r * C;
        T *o = out + r * C;
        double s = 0;
        for (int64_t i = lane; i < C; i += 32) s += xr[i];
        T m = (T)(fg_warp_sum(s) / (double)C);
        double v = 0;
        for (int64_t i = lane; i < C; i += 32) {
            T d = xr[i] - m;
            v += (double)d * d;
        }
        T rs = (T)(1.0 / sqrt(fg_warp_sum(v) / (double)C + eps));
        for (int64_t i = lane; i < C; i += 32) {
            T y = (xr[i] - m) * rs;
            if (w) y *= w[i];
            if (b) y += b[i];
            o[i] = y;
        }
        if (lane == 0) {
            mean[r] = m;
            rstd[r] = rs;
        }
    }
}

/* dx only (dw and db are column sums, below) */
template <typename T>
__global__ void layernorm_bwd_dx_kernel(T *dx, const T *dout, const T *x, const T *mean, const T *rstd, const T *w,
                                        int64_t R, int64_t C) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; r < R; r += warps) {
        const T *xr = x + r * C, *d = dout + r * C;
        T m = mean[r], rs = rstd[r];
        double s_dn = 0, s_dnn = 0;
        for (int64_t i = lane; i < C; i += 32) {
            T norm = (xr[i] - m) * rs, dn = w ? d[i] * w[i] : d[i];
            s_dn += dn;
            s_dnn += (double)dn * norm;
        }
        T mean_dn = (T)(fg_warp_sum(s_dn) / (double)C), mean_dnn = (T)(fg_warp_sum(s_dnn) / (double)C);
        T *dxr = dx + r * C;
        for (int64_t i = lane; i < C; i += 32) {
            T norm = (xr[i] - m) * rs, dn = w ? d[i] * w[i] : d[i];
            dxr[i] += rs * (dn - mean_dn - norm * mean_dnn);
        }
    }
}

/* dw_c += Σ_r dout[r, c] · norm[r, c] */
template <typename T>
struct dw_term {
    const T *dout, *x, *mean, *rstd;
    int64_t C;
    __device__ double operator()(int64_t r, int64_t c) const {
        T norm = (x[r * C + c] - mean[r]) * rstd[r];
        return (double)(dout[r * C + c] * norm);
    }
};
/* db_c += Σ_r dout[r, c] */
template <typename T>
struct db_term {
    const T *dout;
    int64_t C;
    __device__ double operator()(int64_t r, int64_t c) const { return (double)dout[r * C + c]; }
};

/* ============================================================================================
 * host side
 * ============================================================================================ */

template <typename T>
static fg_status layernorm_fwd(fg_tensor *out, fg_tensor *mean, fg_tensor *rstd, const fg_tensor *X,
                               const fg_tensor *W, const fg_tensor *B, int64_t R, int64_t C, double eps) {
    if (R == 0) return FG_OK;
    layernorm_fwd_kernel<T><<<fg_cu_blocks(R * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)fg_data(out), (T *)fg_data(mean), (T *)fg_data(rstd), (const T *)fg_data(X),
        W ? (const T *)fg_data(W) : nullptr, B ? (const T *)fg_data(B) : nullptr, R, C, eps);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status layernorm_bwd(fg_tensor *dx, fg_tensor *dw, fg_tensor *db, const fg_tensor *dout, const fg_tensor *X,
                               const fg_tensor *mean, const fg_tensor *rstd, const fg_tensor *W, int64_t R, int64_t C) {
    const T *pd = (const T *)fg_data(dout), *px = (const T *)fg_data(X);
    const T *pm = (const T *)fg_data(mean), *ps = (const T *)fg_data(rstd);
    if (dw) FG_TRY(fg_cu_colsum<T>((T *)fg_data(dw), R, C, dw_term<T>{pd, px, pm, ps, C}, "layernorm backward"));
    if (db) FG_TRY(fg_cu_colsum<T>((T *)fg_data(db), R, C, db_term<T>{pd, C}, "layernorm backward"));
    if (dx && R > 0) {
        layernorm_bwd_dx_kernel<T><<<fg_cu_blocks(R * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>(
            (T *)fg_data(dx), pd, px, pm, ps, W ? (const T *)fg_data(W) : nullptr, R, C);
        FG_CU_LAUNCHED();
    }
    return FG_OK;
}

/* inputs {x, weight, bias}; saved {X, mean, rstd, W} */
static fg_status layernorm_backward(fg_node *n) {
    fg_tensor *dx = fg_grad_buffer(n->inputs[0]), *dw = fg_grad_buffer(n->inputs[1]);
    fg_tensor *db = fg_grad_buffer(n->inputs[2]);
    if (!dx && !dw && !db) return FG_OK;
    fg_tensor *X = n->saved[0], *mean = n->saved[1], *rstd = n->saved[2], *W = n->saved[3];
    fg_tensor *dout = fg_cu_grad_out(n);
    if (!dout) return fg_last_status();
    int64_t C = X->shape[X->ndim - 1], R = mean->shape[0];
    fg_status st = FG_CU_DISPATCH(X->dtype, layernorm_bwd, dx, dw, db, dout, X, mean, rstd, W, R, C);
    fg_release(dout);
    return st;
}

extern "C" fg_tensor *fg_cuda_layernorm(fg_tensor *x, fg_tensor *weight, fg_tensor *bias, double eps) {
    if (fg_cu_require("layernorm") != FG_OK) return NULL;
    int64_t C = x->shape[x->ndim - 1], R = 1;
    for (int d = 0; d < x->ndim - 1; d++) R *= x->shape[d];
    fg_tensor *X = fg_contiguous(x);
    fg_tensor *W = (X && weight) ? fg_contiguous(weight) : NULL;
    fg_tensor *B = (X && bias) ? fg_contiguous(bias) : NULL;
    fg_tensor *mean = fg_empty(x->dtype, FG_CUDA, 1, &R), *rstd = fg_empty(x->dtype, FG_CUDA, 1, &R);
    fg_tensor *out = fg_empty(x->dtype, FG_CUDA, x->ndim, x->shape);
    fg_tensor *ret = NULL;
    if (X && (W || !weight) && (B || !bias) && mean && rstd && out &&
        FG_CU_DISPATCH(x->dtype, layernorm_fwd, out, mean, rstd, X, W, B, R, C, eps) == FG_OK) {
        fg_tensor *inputs[3] = {x, weight, bias};
        fg_node *node = fg_record(out, "layernorm", layernorm_backward, 3, inputs);
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
