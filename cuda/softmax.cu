/* softmax.cu — softmax over the last dim, on the GPU.
 *
 * CPU reference: ops/softmax.c (max-subtracted; sums in float64; a row that is all -inf gives
 * zeros and passes no gradient).
 *
 * Legend: x is (..., C), seen as R rows of C; out (..., C), contiguous.
 * saved for backward: out itself, as fg_alias(out).
 *   out_i = exp(x_i − max) / Σ_j exp(x_j − max)
 * One warp per row; lanes stride over the row and combine with butterfly shuffles (fixed order).
 */
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

template <typename T>
__global__ void softmax_fwd_kernel(T *out, const T *x, int64_t R, int64_t C) {
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
template <typename T>
__global__ void softmax_bwd_kernel(T *dx, const T *dout, const T *y, int64_t R, int64_t C) {
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
 * host side
 * ============================================================================================ */

static unsigned row_blocks(int64_t R) { return fg_cu_blocks(R * 32); } /* 8 rows (warps) per block */

template <typename T>
static fg_status softmax_fwd(fg_tensor *out, const fg_tensor *X, int64_t R, int64_t C) {
    if (R * C == 0) return FG_OK;
    softmax_fwd_kernel<T><<<row_blocks(R), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)fg_data(out), (const T *)fg_data(X),
                                                                              R, C);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status softmax_bwd(fg_tensor *dx, const fg_tensor *dout, const fg_tensor *y, int64_t R, int64_t C) {
    if (R * C == 0) return FG_OK;
    softmax_bwd_kernel<T><<<row_blocks(R), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)fg_data(dx), (const T *)fg_data(dout), (const T *)fg_data(y), R, C);
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* saved {y} */
static fg_status softmax_backward(fg_node *n) {
    fg_tensor *dx = fg_grad_buffer(n->inputs[0]);
    if (!dx) return FG_OK;
    fg_tensor *y = n->saved[0], *dout = fg_cu_grad_out(n);
    if (!dout) return fg_last_status();
    int64_t C = y->shape[y->ndim - 1], R = C ? fg_numel(y) / C : 0;
    fg_status st = FG_CU_DISPATCH(dx->dtype, softmax_bwd, dx, dout, y, R, C);
    fg_release(dout);
    return st;
}

extern "C" fg_tensor *fg_cuda_softmax(fg_tensor *x) {
    if (fg_cu_require("softmax") != FG_OK) return NULL;
    int64_t C = x->shape[x->ndim - 1], R = C ? fg_numel(x) / C : 0;
    fg_tensor *X = fg_contiguous(x);
    fg_tensor *out = X ? fg_empty(x->dtype, FG_CUDA, x->ndim, x->shape) : NULL;
    if (out && FG_CU_DISPATCH(x->dtype, softmax_fwd, out, X, R, C) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    if (out) {
        fg_tensor *inputs[1] = {x};
        fg_node *node = fg_record(out, "softmax", softmax_backward, 1, inputs);
        if (node) {
            fg_tensor *y = fg_alias(out); /* not `out` itself: out owns the node (no cycle) */
            if (!y) {
                fg_release(out);
                out = NULL;
            } else {
                fg_node_save(node, y);
                fg_release(y);
            }
        }
    }
    fg_release(X);
    return out;
}
