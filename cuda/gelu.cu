/* gelu.cu — GELU in the tanh form GPT-2 uses, on the GPU.
 *
 * CPU reference: ops/gelu.c (same formula, same derivative).
 *
 * Legend: x is any shape (made contiguous); out has x's shape.
 *   u = sqrt(2/pi) (x + 0.044715 x³)        out = 0.5 x (1 + tanh u)
 *   d out / dx = 0.5 (1 + tanh u) + 0.5 x (1 − tanh² u) sqrt(2/pi) (1 + 3 · 0.044715 x²)
 * saved for backward: X (x, contiguous); the backward recomputes tanh u.
 */
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"

#define GELU_SCALE 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_CUBE 0.044715

template <typename T> __device__ __forceinline__ T gelu(T x) {
    T u = (T)GELU_SCALE * (x + (T)GELU_CUBE * x * x * x);
    return (T)0.5 * x * ((T)1 + fg_tanh(u));
}
template <typename T> __device__ __forceinline__ T gelu_grad(T x) {
    T u = (T)GELU_SCALE * (x + (T)GELU_CUBE * x * x * x);
    T t = fg_tanh(u);
    T du = (T)GELU_SCALE * ((T)1 + (T)(3 * GELU_CUBE) * x * x);
    return (T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * du;
}

/* ============================================================================================
 * kernels
 * ============================================================================================ */

template <typename T>
__global__ void gelu_fwd_kernel(T *out, const T *x, int64_t n) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x)
        out[k] = gelu(x[k]);
}

/* forward: out = gelu(x)  ->  dx += dout * gelu'(x) */
template <typename T>
__global__ void gelu_bwd_kernel(T *dx, const T *dout, const T *x, int64_t n) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x)
        dx[k] += dout[k] * gelu_grad(x[k]);
}

/* ============================================================================================
 * host side
 * ============================================================================================ */

template <typename T>
static fg_status gelu_fwd(fg_tensor *out, const fg_tensor *X) {
    int64_t n = fg_numel(X);
    if (n == 0) return FG_OK;
    gelu_fwd_kernel<T><<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)fg_data(out), (const T *)fg_data(X), n);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status gelu_bwd(fg_tensor *dx, const fg_tensor *dout, const fg_tensor *X) {
    int64_t n = fg_numel(X);
    if (n == 0) return FG_OK;
    gelu_bwd_kernel<T><<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)fg_data(dx), (const T *)fg_data(dout),
                                                                             (const T *)fg_data(X), n);
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* saved {X} */
static fg_status gelu_backward(fg_node *n) {
    fg_tensor *dx = fg_grad_buffer(n->inputs[0]);
    if (!dx) return FG_OK;
    fg_tensor *dout = fg_cu_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = FG_CU_DISPATCH(dx->dtype, gelu_bwd, dx, dout, n->saved[0]);
    fg_release(dout);
    return st;
}

extern "C" fg_tensor *fg_cuda_gelu(fg_tensor *x) {
    if (fg_cu_require("gelu") != FG_OK) return NULL;
    fg_tensor *X = fg_contiguous(x);
    fg_tensor *out = X ? fg_empty(x->dtype, FG_CUDA, x->ndim, x->shape) : NULL;
    if (out && FG_CU_DISPATCH(x->dtype, gelu_fwd, out, X) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    if (out) {
        fg_tensor *inputs[1] = {x};
        fg_node *node = fg_record(out, "gelu", gelu_backward, 1, inputs);
        if (node) fg_node_save(node, X);
    }
    fg_release(X);
    return out;
}
