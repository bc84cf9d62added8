/* softmax.cu — softmax over the last dim, on the GPU.
 *
 * CPU reference: ops/cpu/softmax.c (max-subtracted; sums in float64; a row that is all -inf gives
 * zeros and passes no gradient).
 *
 * Legend: x, y = softmax(x), dy, dx are (R, C), contiguous (ops/softmax.c makes x so and keeps y
 * for the backward).
 *   out_i = exp(x_i − max) / Σ_j exp(x_j − max)
 * One warp per row; lanes stride over the row and combine with butterfly shuffles (fixed order).
 */
#include "cuda/cuda_common.cuh"
#include "cuda/kernels_cuda.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

template <typename T> __global__ void softmax_fwd_kernel(T *out, const T *x, int64_t R, int64_t C) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; r < R; r += warps) {
        const T *xr = x + r * C;
        T *o = out + r * C;
        T mx = fg_neg_inf<T>();
        for (int64_t i = lane; i < C; i += 32) mx = xr[i] > mx ? xr[i] : mx;
        mx = fg_warp_max(mx);
        if (mx == fg_neg_inf<T>()) { /* every entry masked */
            for (int64_t i = lane; i < C; i += 32) o[i] = 0;
            continue;
        }
        double sum = 0;
        for (int64_t i = lane; i < C; i += 32) {
            T e = fg_exp(xr[i] - mx);
            o[i] = e;
            sum += e;
        }
        sum = fg_warp_sum(sum);
        T inv = (T)(1.0 / sum);
        for (int64_t i = lane; i < C; i += 32) o[i] *= inv;
    }
}

/* forward: y_i = exp(x_i) / Σ_j exp(x_j)  ->  dx_i += y_i (dy_i − Σ_j dy_j y_j) */
template <typename T> __global__ void softmax_bwd_kernel(T *dx, const T *dout, const T *y, int64_t R, int64_t C) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; r < R; r += warps) {
        const T *yr = y + r * C, *d = dout + r * C;
        T *g = dx + r * C;
        double dot = 0;
        for (int64_t i = lane; i < C; i += 32) dot += (double)d[i] * yr[i];
        T tdot = (T)fg_warp_sum(dot);
        for (int64_t i = lane; i < C; i += 32) g[i] += yr[i] * (d[i] - tdot);
    }
}

/* ============================================================================================
 * host side: the launchers of the kernel table (ops/kernels.h)
 * ============================================================================================ */

static unsigned row_blocks(int64_t R) { return fg_cu_blocks(R * 32); } /* 8 rows (warps) per block */

template <typename T> static fg_status softmax_fwd(void *y, const void *x, int64_t R, int64_t C) {
    if (R * C == 0) return FG_OK;
    softmax_fwd_kernel<T><<<row_blocks(R), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)y, (const T *)x, R, C);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T> static fg_status softmax_bwd(void *dx, const void *dy, const void *y, int64_t R, int64_t C) {
    if (R * C == 0) return FG_OK;
    softmax_bwd_kernel<T>
        <<<row_blocks(R), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)dx, (const T *)dy, (const T *)y, R, C);
    FG_CU_LAUNCHED();
    return FG_OK;
}

extern "C" fg_status fg_cu_softmax_forward(fg_dtype dt, void *y, const void *x, int64_t R, int64_t C) {
    return FG_CU_DISPATCH(dt, softmax_fwd, y, x, R, C);
}

extern "C" fg_status fg_cu_softmax_backward(fg_dtype dt, void *dx, const void *dy, const void *y, int64_t R,
                                            int64_t C) {
    return FG_CU_DISPATCH(dt, softmax_bwd, dx, dy, y, R, C);
}
