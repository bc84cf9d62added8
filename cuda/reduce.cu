/* reduce.cu — sum and mean over one axis or over everything, on the GPU.
 *
 * CPU reference: ops/reduce.c (sums accumulate in float64 for both dtypes; mean = sum · 1/N).
 *
 * Legend: t is seen as (O, N, I) around the reduced axis: O = product of the dims before it,
 * N = its size, I = product of the dims after it; out is (O, I) (reshaped to t's shape without
 * the axis, or with it as size 1 when keepdim). sum_all / mean_all give out (1).
 * No atomics: an axis sum is one thread (or one warp when I = 1) per output element; a total is
 * the fixed two-stage tree of fg_cu_sum. Both are the same on every run.
 */
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"

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
template <typename T>
__global__ void sum_rows_kernel(T *out, const T *x, int64_t O, int64_t N, double scale) {
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
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < O * N * I; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = e % I, o = e / (N * I);
        dx[e] += scale * dout[o * I + i];
    }
}

/* out[0] = (T)(sum · scale) */
template <typename T>
__global__ void store_total_kernel(T *out, const double *sum, double scale) {
    out[0] = (T)(sum[0] * scale);
}

/* forward: out = scale · Σ_k x[k]  ->  dx[k] += scale · dout */
template <typename T>
__global__ void sum_all_bwd_kernel(T *dx, const T *dout, int64_t n, double scale) {
    T g = (T)(scale * (double)dout[0]);
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x)
        dx[k] += g;
}

template <typename T>
struct elem_term {
    const T *x;
    __device__ double operator()(int64_t k) const { return (double)x[k]; }
};

/* ============================================================================================
 * host side
 * ============================================================================================ */

static void split_at(const fg_tensor *t, int axis, int64_t *O, int64_t *N, int64_t *I) {
    *O = 1;
    *I = 1;
    for (int d = 0; d < axis; d++) *O *= t->shape[d];
    for (int d = axis + 1; d < t->ndim; d++) *I *= t->shape[d];
    *N = t->shape[axis];
}

template <typename T>
static fg_status sum_axis_fwd(fg_tensor *out, const fg_tensor *X, int64_t O, int64_t N, int64_t I, double scale) {
    if (O * I == 0) return FG_OK;
    if (I == 1)
        sum_rows_kernel<T><<<fg_cu_blocks(O * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)fg_data(out),
                                                                                     (const T *)fg_data(X), O, N, scale);
    else
        sum_axis_kernel<T><<<fg_cu_blocks(O * I), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)fg_data(out),
                                                                                    (const T *)fg_data(X), O, N, I, scale);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status sum_axis_bwd(fg_tensor *dx, const fg_tensor *dout, int64_t O, int64_t N, int64_t I, double scale) {
    if (O * N * I == 0) return FG_OK;
    sum_axis_bwd_kernel<T><<<fg_cu_blocks(O * N * I), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)fg_data(dx), (const T *)fg_data(dout), O, N, I, (T)scale);
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* iargs[0] = axis; fargs[0] = scale */
static fg_status sum_axis_backward(fg_node *n) {
    fg_tensor *t = n->inputs[0], *gt = fg_grad_buffer(t);
    if (!gt) return FG_OK;
    fg_tensor *dout = fg_cu_grad_out(n);
    if (!dout) return fg_last_status();
    int64_t O, N, I;
    split_at(t, (int)n->iargs[0], &O, &N, &I);
    fg_status st = FG_CU_DISPATCH(gt->dtype, sum_axis_bwd, gt, dout, O, N, I, n->fargs[0]);
    fg_release(dout);
    return st;
}

extern "C" fg_tensor *fg_cuda_reduce_axis(fg_tensor *t, int axis, int keepdim, int is_mean) {
    const char *op = is_mean ? "mean" : "sum";
    if (fg_cu_require(op) != FG_OK) return NULL;
    int a = axis < 0 ? axis + t->ndim : axis;
    if (a < 0 || a >= t->ndim) {
        fg_error(FG_ERR_ARG, "%s: axis %d is out of range for a rank-%d tensor", op, axis, t->ndim);
        return NULL;
    }
    int64_t O, N, I, shape[FG_MAX_DIMS];
    split_at(t, a, &O, &N, &I);
    int nd = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (d != a) shape[nd++] = t->shape[d];
        else if (keepdim) shape[nd++] = 1;
    }
    double scale = is_mean ? 1.0 / (double)N : 1.0; /* mean over an empty axis is 0/0 = NaN, like the CPU */
    fg_tensor *X = fg_contiguous(t);
    fg_tensor *out = X ? fg_empty(t->dtype, FG_CUDA, nd, shape) : NULL;
    if (out && FG_CU_DISPATCH(t->dtype, sum_axis_fwd, out, X, O, N, I, scale) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    if (out) {
        fg_tensor *inputs[1] = {t};
        fg_node *node = fg_record(out, op, sum_axis_backward, 1, inputs);
        if (node) {
            node->iargs[0] = a;
            node->fargs[0] = scale;
        }
    }
    fg_release(X);
    return out;
}

template <typename T>
static fg_status sum_all_fwd(fg_tensor *out, const fg_tensor *X, double scale) {
    fg_cu_scratch total;
    FG_TRY(total.get(sizeof(double), "sum_all"));
    FG_TRY(fg_cu_sum(total.as<double>(), fg_numel(X), elem_term<T>{(const T *)fg_data(X)}, "sum_all"));
    store_total_kernel<T><<<1, 1, 0, fg_cu_stream()>>>((T *)fg_data(out), total.as<double>(), scale);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status sum_all_bwd(fg_tensor *dx, const fg_tensor *dout, double scale) {
    int64_t n = fg_numel(dx);
    if (n == 0) return FG_OK;
    sum_all_bwd_kernel<T><<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)fg_data(dx),
                                                                                (const T *)fg_data(dout), n, scale);
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* fargs[0] = scale */
static fg_status sum_all_backward(fg_node *n) {
    fg_tensor *gt = fg_grad_buffer(n->inputs[0]);
    if (!gt) return FG_OK;
    fg_tensor *dout = fg_cu_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = FG_CU_DISPATCH(gt->dtype, sum_all_bwd, gt, dout, n->fargs[0]);
    fg_release(dout);
    return st;
}

extern "C" fg_tensor *fg_cuda_reduce_all(fg_tensor *t, int is_mean) {
    const char *op = is_mean ? "mean_all" : "sum_all";
    if (fg_cu_require(op) != FG_OK) return NULL;
    int64_t one = 1, n = fg_numel(t);
    double scale = is_mean ? 1.0 / (double)n : 1.0;
    fg_tensor *X = fg_contiguous(t);
    fg_tensor *out = X ? fg_empty(t->dtype, FG_CUDA, 1, &one) : NULL;
    if (out && FG_CU_DISPATCH(t->dtype, sum_all_fwd, out, X, scale) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    if (out) {
        fg_tensor *inputs[1] = {t};
        fg_node *node = fg_record(out, op, sum_all_backward, 1, inputs);
        if (node) node->fargs[0] = scale;
    }
    fg_release(X);
    return out;
}
