/* reduce.cu — sum and mean over one axis or over everything, on the GPU: the launchers of the
 * reduce kernels of ops/kernels.h.
 *
 * CPU reference: ops/cpu/reduce.c (sums accumulate in float64 for both dtypes; mean = sum · 1/N).
 *
 * Legend: t is seen as (O, N, I) around the reduced axis: O = product of the dims before it,
 * N = its size, I = product of the dims after it; out is (O, I) (reshaped to t's shape without
 * the axis, or with it as size 1 when keepdim). sum_all / mean_all give out (1).
 * No atomics: an axis sum is one thread (or one warp when I = 1) per output element; a total is
 * the fixed two-stage tree of fg_cu_sum over the C-order index (a strided view is read through its
 * strides, in the same order). Both are the same on every run.
 */
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/kernels_cuda.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

/* out[o, i] = scale · Σ_k x[o, k, i], I > 1: one thread per (o, i); neighbours read neighbours */
template <typename T>
__global__ void sum_axis_kernel(T *out, const T *x, int64_t O, int64_t N, int64_t I, double scale) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < O * I; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = e / I, i = e % I;
        const T *p = x + o * N * I + i;
        double s = 0;
        for (int64_t k = 0; k < N; k++) s += p[k * I];
        out[e] = (T)(s * scale);
    }
}

/* the same for I == 1: one warp per row o */
template <typename T> __global__ void sum_rows_kernel(T *out, const T *x, int64_t O, int64_t N, double scale) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t o = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; o < O; o += warps) {
        double s = 0;
        for (int64_t k = lane; k < N; k += 32) s += x[o * N + k];
        s = fg_warp_sum(s);
        if (lane == 0) out[o] = (T)(s * scale);
    }
}

/* forward: out[o, i] = scale · Σ_k x[o, k, i]  ->  dx[o, k, i] += scale · dout[o, i] */
template <typename T>
__global__ void sum_axis_bwd_kernel(T *dx, const T *dout, int64_t O, int64_t N, int64_t I, T scale) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < O * N * I;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e % I, o = e / (N * I);
        dx[e] += scale * dout[o * I + i];
    }
}

/* out[0] = (T)(sum · scale) */
template <typename T> __global__ void store_total_kernel(T *out, const double *sum, double scale) {
    out[0] = (T)(sum[0] * scale);
}

/* forward: out = scale · Σ_k x[k]  ->  dx[k] += scale · dout */
template <typename T> __global__ void sum_all_bwd_kernel(T *dx, const T *dout, int64_t n, double scale) {
    T g = (T)(scale * (double)dout[0]);
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x)
        dx[k] += g;
}

template <typename T> struct elem_term {
    const T *x;
    __device__ double operator()(int64_t k) const { return (double)x[k]; }
};
/* the same over a strided view: element k in C order */
template <typename T> struct strided_term {
    const T *x;
    fg_cu_layout L;
    __device__ double operator()(int64_t k) const { return (double)x[fg_cu_offset(k, L.ndim, L.shape, L.stride)]; }
};

/* ============================================================================================
 * host side: the launchers of the kernel table (ops/kernels.h)
 * ============================================================================================ */

template <typename T>
static fg_status sum_axis_fwd(void *out, const void *x, int64_t O, int64_t N, int64_t I, double scale) {
    if (O * I == 0) return FG_OK;
    if (I == 1)
        sum_rows_kernel<T>
            <<<fg_cu_blocks(O * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)out, (const T *)x, O, N, scale);
    else
        sum_axis_kernel<T>
            <<<fg_cu_blocks(O * I), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)out, (const T *)x, O, N, I, scale);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status sum_axis_bwd(void *dx, const void *dout, int64_t O, int64_t N, int64_t I, double scale) {
    if (O * N * I == 0) return FG_OK;
    sum_axis_bwd_kernel<T>
        <<<fg_cu_blocks(O * N * I), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)dx, (const T *)dout, O, N, I, (T)scale);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status sum_all_fwd(void *out, const void *x, int nd, const int64_t *shape, const int64_t *strides,
                             double scale) {
    int64_t n = 1, want = 1;
    int contiguous = 1; /* element k at k (size-1 dims never step) */
    for (int d = nd - 1; d >= 0; d--) {
        if (shape[d] != 1 && strides[d] != want) contiguous = 0;
        want *= shape[d];
        n *= shape[d];
    }
    fg_cu_scratch total;
    FG_TRY(total.get(sizeof(double), "sum_all"));
    if (contiguous) {
        FG_TRY(fg_cu_sum(total.as<double>(), n, elem_term<T>{(const T *)x}, "sum_all"));
    } else {
        fg_cu_layout L;
        memset(&L, 0, sizeof L);
        L.ndim = nd;
        for (int d = 0; d < nd; d++) {
            L.shape[d] = shape[d];
            L.stride[d] = strides[d];
        }
        FG_TRY(fg_cu_sum(total.as<double>(), n, strided_term<T>{(const T *)x, L}, "sum_all"));
    }
    store_total_kernel<T><<<1, 1, 0, fg_cu_stream()>>>((T *)out, total.as<double>(), scale);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T> static fg_status sum_all_bwd(void *dx, const void *dout, int64_t n, double scale) {
    if (n == 0) return FG_OK;
    sum_all_bwd_kernel<T><<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)dx, (const T *)dout, n, scale);
    FG_CU_LAUNCHED();
    return FG_OK;
}

extern "C" fg_status fg_cu_reduce_axis_forward(fg_dtype dt, void *out, const void *x, int64_t O, int64_t N, int64_t I,
                                               double scale) {
    return FG_CU_DISPATCH(dt, sum_axis_fwd, out, x, O, N, I, scale);
}

extern "C" fg_status fg_cu_reduce_axis_backward(fg_dtype dt, void *dx, const void *dout, int64_t O, int64_t N,
                                                int64_t I, double scale) {
    return FG_CU_DISPATCH(dt, sum_axis_bwd, dx, dout, O, N, I, scale);
}

extern "C" fg_status fg_cu_reduce_all_forward(fg_dtype dt, void *out, const void *x, int nd, const int64_t *shape,
                                              const int64_t *strides, double scale) {
    return FG_CU_DISPATCH(dt, sum_all_fwd, out, x, nd, shape, strides, scale);
}

extern "C" fg_status fg_cu_reduce_all_backward(fg_dtype dt, void *dx, const void *dout, int64_t n, double scale) {
    return FG_CU_DISPATCH(dt, sum_all_bwd, dx, dout, n, scale);
}
