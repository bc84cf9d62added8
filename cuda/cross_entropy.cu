/* cross_entropy.cu — fused softmax + negative log-likelihood, mean over the counted rows, on the GPU.
 *
 * CPU reference: ops/cpu/cross_entropy.c (same formulas; exp sums in float64; a row with target -1
 * is ignored and gets lse 0; the loss is 0 when no row counts).
 *
 * Legend: x (logits) is (R, V), contiguous; targets: R int32 ids in device memory (checked and
 * copied there by ops/cross_entropy.c; -1 = ignore); lse (R); loss (1).
 *   lse_r = max_r + log Σ_j exp(x_rj − max_r)        loss = Σ_r (lse_r − x_r,t_r) / count
 *   d loss / d x_rj = (exp(x_rj − lse_r) − [j = t_r]) / count
 * The (R, V) probabilities are never stored. The mean is a fixed-order two-stage sum (no atomics).
 */
#include "cuda/cuda_common.cuh"
#include "cuda/kernels_cuda.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

/* one warp per row: lse[r] and the row's loss (float64) into loss[r] (0 for ignored rows) */
template <typename T>
__global__ void cross_entropy_fwd_kernel(double *loss, T *lse, const T *x, const int32_t *targets, int64_t R,
                                         int64_t V) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; r < R; r += warps) {
        int32_t t = targets[r];
        if (t < 0) {
            if (lane == 0) {
                lse[r] = 0;
                loss[r] = 0;
            }
            continue;
        }
        const T *xr = x + r * V;
        T mx = xr[0];
        for (int64_t j = lane; j < V; j += 32) mx = xr[j] > mx ? xr[j] : mx;
        mx = fg_warp_max(mx);
        double sum = 0;
        for (int64_t j = lane; j < V; j += 32) sum += fg_exp(xr[j] - mx);
        sum = fg_warp_sum(sum);
        T l = mx + (T)log(sum);
        if (lane == 0) {
            lse[r] = l;
            loss[r] = (double)l - (double)xr[t];
        }
    }
}

/* forward: loss = Σ_r (lse_r − x_r,t_r) / count
 *   ->  dx_rj += dloss / count · (exp(x_rj − lse_r) − [j = t_r])   for counted rows */
template <typename T>
__global__ void cross_entropy_bwd_kernel(T *dx, const T *x, const T *lse, const int32_t *targets, const T *dout,
                                         int64_t R, int64_t V, double inv_count) {
    T g = (T)((double)dout[0] * inv_count);
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < R * V; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / V, j = e % V;
        int32_t t = targets[r];
        if (t < 0) continue;
        T d = dx[e];
        d += g * fg_exp(x[e] - lse[r]);
        if (j == t) d -= g;
        dx[e] = d;
    }
}

template <typename T> __global__ void store_mean_kernel(T *out, const double *total, double inv_count) {
    out[0] = (T)(inv_count > 0 ? total[0] * inv_count : 0.0);
}

struct loss_term {
    const double *loss;
    __device__ double operator()(int64_t r) const { return loss[r]; }
};

/* ============================================================================================
 * host side: the launchers of the kernel table (ops/kernels.h)
 * ============================================================================================ */

template <typename T>
static fg_status cross_entropy_fwd(void *out, void *lse, const void *x, const int32_t *targets, int64_t R, int64_t V,
                                   int64_t count) {
    fg_cu_scratch loss, total;
    FG_TRY(loss.get((size_t)(R ? R : 1) * sizeof(double), "cross_entropy"));
    FG_TRY(total.get(sizeof(double), "cross_entropy"));
    if (R > 0) {
        cross_entropy_fwd_kernel<T><<<fg_cu_blocks(R * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>(
            loss.as<double>(), (T *)lse, (const T *)x, targets, R, V);
        FG_CU_LAUNCHED();
    }
    FG_TRY(fg_cu_sum(total.as<double>(), R, loss_term{loss.as<double>()}, "cross_entropy"));
    store_mean_kernel<T><<<1, 1, 0, fg_cu_stream()>>>((T *)out, total.as<double>(), count ? 1.0 / (double)count : 0.0);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status cross_entropy_bwd(void *dx, const void *dout, const void *x, const void *lse, const int32_t *targets,
                                   int64_t R, int64_t V, int64_t count) {
    if (R * V == 0) return FG_OK;
    cross_entropy_bwd_kernel<T><<<fg_cu_blocks(R * V), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)dx, (const T *)x, (const T *)lse, targets, (const T *)dout, R, V, 1.0 / (double)count);
    FG_CU_LAUNCHED();
    return FG_OK;
}

extern "C" fg_status fg_cu_cross_entropy_forward(fg_dtype dt, void *loss, void *lse, const void *x,
                                                 const int32_t *targets, int64_t R, int64_t V, int64_t count) {
    return FG_CU_DISPATCH(dt, cross_entropy_fwd, loss, lse, x, targets, R, V, count);
}

extern "C" fg_status fg_cu_cross_entropy_backward(fg_dtype dt, void *dx, const void *dloss, const void *x,
                                                  const void *lse, const int32_t *targets, int64_t R, int64_t V,
                                                  int64_t count) {
    return FG_CU_DISPATCH(dt, cross_entropy_bwd, dx, dloss, x, lse, targets, R, V, count);
}
