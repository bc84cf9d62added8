/* layernorm.cu — layer normalization over the last dim, on the GPU.
 *
 * CPU reference: ops/cpu/layernorm.c (same formulas; row sums in float64; biased variance).
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
#include "cuda/kernels_cuda.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

template <typename T>
__global__ void layernorm_fwd_kernel(T *out, T *mean, T *rstd, const T *x, const T *w, const T *b, int64_t R, int64_t C,
                                     double eps) {
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
template <typename T> struct dw_term {
    const T *dout, *x, *mean, *rstd;
    int64_t C;
    __device__ double operator()(int64_t r, int64_t c) const {
        T norm = (x[r * C + c] - mean[r]) * rstd[r];
        return (double)(dout[r * C + c] * norm);
    }
};
/* db_c += Σ_r dout[r, c] */
template <typename T> struct db_term {
    const T *dout;
    int64_t C;
    __device__ double operator()(int64_t r, int64_t c) const { return (double)dout[r * C + c]; }
};

/* ============================================================================================
 * host side: the launchers of the kernel table (ops/kernels.h)
 * ============================================================================================ */

template <typename T>
static fg_status layernorm_fwd(void *out, void *mean, void *rstd, const void *x, const void *w, const void *b,
                               int64_t R, int64_t C, double eps) {
    if (R == 0) return FG_OK;
    layernorm_fwd_kernel<T><<<fg_cu_blocks(R * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)out, (T *)mean, (T *)rstd, (const T *)x, (const T *)w, (const T *)b, R, C, eps);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status layernorm_bwd(void *dx, void *dw, void *db, const void *dout, const void *x, const void *mean,
                               const void *rstd, const void *w, int64_t R, int64_t C) {
    const T *pd = (const T *)dout, *px = (const T *)x, *pm = (const T *)mean, *ps = (const T *)rstd;
    if (dw) FG_TRY(fg_cu_colsum<T>((T *)dw, R, C, dw_term<T>{pd, px, pm, ps, C}, "layernorm backward"));
    if (db) FG_TRY(fg_cu_colsum<T>((T *)db, R, C, db_term<T>{pd, C}, "layernorm backward"));
    if (dx && R > 0) {
        layernorm_bwd_dx_kernel<T>
            <<<fg_cu_blocks(R * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)dx, pd, px, pm, ps, (const T *)w, R, C);
        FG_CU_LAUNCHED();
    }
    return FG_OK;
}

extern "C" fg_status fg_cu_layernorm_forward(fg_dtype dt, void *out, void *mean, void *rstd, const void *x,
                                             const void *w, const void *b, int64_t R, int64_t C, double eps) {
    return FG_CU_DISPATCH(dt, layernorm_fwd, out, mean, rstd, x, w, b, R, C, eps);
}

extern "C" fg_status fg_cu_layernorm_backward(fg_dtype dt, void *dx, void *dw, void *db, const void *dout,
                                              const void *x, const void *mean, const void *rstd, const void *w,
                                              int64_t R, int64_t C) {
    return FG_CU_DISPATCH(dt, layernorm_bwd, dx, dw, db, dout, x, mean, rstd, w, R, C);
}
