/* adamw.cu — the optimizer kernels of the CUDA table (ops/kernels.h, `optimizer`): AdamW's update,
 * the sum of squares of the gradient norm and gradient scaling, on device arrays.
 *
 * CPU reference: ops/cpu/adamw.c (ADAMW_RANGE, fg_cpu_optimizer_sum_squares, fg_cpu_optimizer_scale):
 * the same arithmetic in the same types, element by element. The norm's sum is float64 in a fixed two-stage order
 * (the CPU sums in blocks of its own, so the two may differ in the last bits).
 *
 * Legend: p, g, m, v are (n) arrays of one dtype: parameters, gradients, AdamW's moments.
 */
#include "cuda/cuda_common.cuh"
#include "cuda/kernels_cuda.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

/* g = g_stored · gs;  m = b1 m + (1 − b1) g;  v = b2 v + (1 − b2) g²;
 * p = p · df − step · m / (sqrt(v) / bc2_sqrt + eps) */
template <typename T>
__global__ void adamw_kernel(T *p, const T *g, double gs, T *m, T *v, int64_t n, double df, double b1, double b2,
                             double step, double bc2_sqrt, double eps) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        T gi = g[i] * (T)gs;
        T mi = m[i] = (T)b1 * m[i] + (T)(1.0 - b1) * gi;
        T vi = v[i] = (T)b2 * v[i] + (T)(1.0 - b2) * gi * gi;
        T denom = (T)sqrt((double)vi) / (T)bc2_sqrt + (T)eps;
        p[i] = p[i] * (T)df - (T)step * mi / denom;
    }
}

template <typename T> __global__ void scale_kernel(T *x, int64_t n, T s) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

template <typename T> struct square_term {
    const T *x;
    __device__ double operator()(int64_t k) const { return (double)x[k] * (double)x[k]; }
};

/* ============================================================================================
 * host side: the launchers of the kernel table (ops/kernels.h)
 * ============================================================================================ */

template <typename T>
static fg_status adamw_t(void *p, const void *g, double gs, void *m, void *v, int64_t n, double df, double b1,
                         double b2, double step, double bc2_sqrt, double eps) {
    if (n <= 0) return FG_OK;
    adamw_kernel<T><<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)p, (const T *)g, gs, (T *)m, (T *)v, n,
                                                                           df, b1, b2, step, bc2_sqrt, eps);
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* one launch per span, in span order */
extern "C" fg_status fg_cu_optimizer_adamw(fg_dtype dt, void *p, const void *g, double gscale, void *m, void *v,
                                           int64_t n, int n_spans, const fg_adamw_span *spans, double b1, double b2,
                                           double step_size, double bc2_sqrt, double eps) {
    (void)n;
    const size_t es = fg_dtype_size(dt);
    for (int k = 0; k < n_spans; k++) {
        const size_t off = (size_t)spans[k].offset * es;
        FG_TRY(FG_CU_DISPATCH(dt, adamw_t, (char *)p + off, (const char *)g + off, gscale, (char *)m + off,
                              (char *)v + off,
                              spans[k].count, spans[k].decay_factor, b1, b2, step_size, bc2_sqrt, eps));
    }
    return FG_OK;
}

template <typename T> static fg_status sum_squares_t(const void *x, int64_t n, double *out) {
    fg_cu_scratch total;
    FG_TRY(total.get(sizeof(double), "sum_squares"));
    FG_TRY(fg_cu_sum(total.as<double>(), n, square_term<T>{(const T *)x}, "sum_squares"));
    FG_CU(cudaMemcpyAsync(out, total.p, sizeof(double), cudaMemcpyDeviceToHost, fg_cu_stream()));
    FG_CU(cudaStreamSynchronize(fg_cu_stream()));
    return FG_OK;
}

extern "C" fg_status fg_cu_optimizer_sum_squares(fg_dtype dt, const void *x, int64_t n, double *out) {
    return FG_CU_DISPATCH(dt, sum_squares_t, x, n, out);
}

template <typename T> static fg_status scale_t(void *x, int64_t n, double s) {
    if (n <= 0) return FG_OK;
    scale_kernel<T><<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)x, n, (T)s);
    FG_CU_LAUNCHED();
    return FG_OK;
}

extern "C" fg_status fg_cu_optimizer_scale(fg_dtype dt, void *x, int64_t n, double s) {
    return FG_CU_DISPATCH(dt, scale_t, x, n, s);
}
