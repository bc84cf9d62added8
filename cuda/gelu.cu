/* gelu.cu — GELU in the tanh form GPT-2 uses, on the GPU.
 *
 * CPU reference: ops/cpu/gelu.c (same formula, same derivative).
 *
 * Legend: x, out, dout, dx are (n), contiguous (ops/gelu.c makes x so).
 *   u = sqrt(2/pi) (x + 0.044715 x³)        out = 0.5 x (1 + tanh u)
 *   d out / dx = 0.5 (1 + tanh u) + 0.5 x (1 − tanh² u) sqrt(2/pi) (1 + 3 · 0.044715 x²)
 * The backward recomputes tanh u from x.
 */
#include "cuda/cuda_common.cuh"
#include "cuda/kernels_cuda.h"

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

template <typename T> __global__ void gelu_fwd_kernel(T *out, const T *x, int64_t n) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x)
        out[k] = gelu(x[k]);
}

/* forward: out = gelu(x)  ->  dx (+)= dout * gelu'(x) (add: +=) */
template <typename T> __global__ void gelu_bwd_kernel(T *dx, const T *dout, const T *x, int64_t n, int add) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        const T t = dout[k] * gelu_grad(x[k]);
        dx[k] = add ? dx[k] + t : t;
    }
}

/* ============================================================================================
 * host side: the launchers of the kernel table (ops/kernels.h)
 * ============================================================================================ */

template <typename T> static fg_status gelu_fwd(void *out, const void *x, int64_t n) {
    if (n == 0) return FG_OK;
    gelu_fwd_kernel<T><<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)out, (const T *)x, n);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T> static fg_status gelu_bwd(void *dx, const void *dout, const void *x, int64_t n, int add) {
    if (n == 0) return FG_OK;
    gelu_bwd_kernel<T>
        <<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)dx, (const T *)dout, (const T *)x, n, add);
    FG_CU_LAUNCHED();
    return FG_OK;
}

extern "C" fg_status fg_cu_gelu_forward(fg_dtype dt, void *out, const void *x, int64_t n) {
    return FG_CU_DISPATCH(dt, gelu_fwd, out, x, n);
}

extern "C" fg_status fg_cu_gelu_backward(fg_dtype dt, void *dx, const void *dout, const void *x, int64_t n,
                                        int add) {
    return FG_CU_DISPATCH(dt, gelu_bwd, dx, dout, x, n, add);
}
