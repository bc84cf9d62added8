/* cuda_common.cuh — what every .cu file of flashgrad shares (internal to cuda/; C++).
 *
 *  - One check for every CUDA, cuBLAS and cuRAND call and every kernel launch: on failure it
 *    records "CUDA error at FILE:LINE: <call>: <CUDA's error string> (<error name>)" with fg_error
 *    (FG_ERR_DEVICE) and returns that status from the enclosing function:
 *        FG_CU(cudaMemcpyAsync(...));      FG_CUBLAS(cublasSgemm(...));
 *        kernel<<<grid, block, smem, fg_cu_stream()>>>(...);  FG_CU_LAUNCHED();
 *    Functions that cannot return a status (the allocator's void hooks) use FG_CU_REPORT, which
 *    records and prints the same line on stderr.
 *  - The stream and handles (cuda/runtime.cu owns them).
 *  - (cuda/device_math.cuh) type-generic device math and warp reductions.
 *  - Launch-size helpers, device scratch from the caching allocator, and a strided-layout
 *    descriptor passed to kernels by value.
 */
#ifndef FG_CUDA_COMMON_CUH
#define FG_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <curand.h>
#include <math.h>
#include <stdint.h>

#include "cuda/cuda.h"
#include "cuda/device_math.cuh"
#include "tensor/alloc.h"
#include "tensor/error.h"
#include "tensor/tensor.h"

/* ---- error checks ---- */
fg_status fg_cu_fail(cudaError_t e, const char *call, const char *file, int line);
fg_status fg_cublas_fail(cublasStatus_t s, const char *call, const char *file, int line);
fg_status fg_curand_fail(curandStatus_t s, const char *call, const char *file, int line);
/* As fg_cu_fail, and also prints the message on stderr (for void contexts). */
void fg_cu_report(cudaError_t e, const char *call, const char *file, int line);

#define FG_CU(call)                                                                                                    \
    do {                                                                                                               \
        cudaError_t fg_e_ = (call);                                                                                    \
        if (fg_e_ != cudaSuccess) return fg_cu_fail(fg_e_, #call, __FILE__, __LINE__);                                 \
    } while (0)
#define FG_CU_LAUNCHED() FG_CU(cudaGetLastError())
#define FG_CUBLAS(call)                                                                                                \
    do {                                                                                                               \
        cublasStatus_t fg_s_ = (call);                                                                                 \
        if (fg_s_ != CUBLAS_STATUS_SUCCESS) return fg_cublas_fail(fg_s_, #call, __FILE__, __LINE__);                   \
    } while (0)
#define FG_CURAND(call)                                                                                                \
    do {                                                                                                               \
        curandStatus_t fg_s_ = (call);                                                                                 \
        if (fg_s_ != CURAND_STATUS_SUCCESS) return fg_curand_fail(fg_s_, #call, __FILE__, __LINE__);                   \
    } while (0)
#define FG_CU_REPORT(call)                                                                                             \
    do {                                                                                                               \
        cudaError_t fg_e_ = (call);                                                                                    \
        if (fg_e_ != cudaSuccess) fg_cu_report(fg_e_, #call, __FILE__, __LINE__);                                      \
    } while (0)
/* FG_TRY (tensor/error.h) propagates an fg_status from a helper. */

/* ---- the device state (cuda/runtime.cu) ---- */
cudaStream_t fg_cu_stream(void);
/* Copy n bytes of host memory to device memory dev, in order on fg_cu_stream(), without waiting
 * for the device: the bytes are staged in pinned memory first, so the caller's buffer may change
 * as soon as this returns (cuda/upload.cu). */
fg_status fg_cu_upload(void *dev, const void *host, size_t n, const char *what);
cublasHandle_t fg_cu_blas(void);
int fg_cu_sm_count(void);
/* FG_ERR_DEVICE with a message naming `op` unless fg_cuda_init() has succeeded. */
fg_status fg_cu_require(const char *op);

/* ---- launch sizes ---- */
#define FG_CU_THREADS 256
/* Blocks for a grid-stride loop over n elements: enough to fill the device, never 0. */
static inline unsigned fg_cu_blocks(int64_t n, int threads = FG_CU_THREADS) {
    int64_t b = (n + threads - 1) / threads;
    int64_t cap = (int64_t)fg_cu_sm_count() * 32;
    if (b > cap) b = cap;
    return b < 1 ? 1u : (unsigned)b;
}

/* The C type of an fg_dtype, for dispatching a templated launcher:
 *     FG_CU_DISPATCH(dt, launch_thing, args...)  calls launch_thing<float> or launch_thing<double>. */
#define FG_CU_DISPATCH(dt, fn, ...) ((dt) == FG_F64 ? fn<double>(__VA_ARGS__) : fn<float>(__VA_ARGS__))

/* ---- device scratch: fg_alloc(FG_CUDA) for the lifetime of a scope ----
 * Freed blocks go back to the caching allocator; the next user of the block is ordered after us
 * on the one stream, so no synchronization is needed. */
struct fg_cu_scratch {
    void *p = nullptr;
    fg_cu_scratch() = default;
    fg_cu_scratch(const fg_cu_scratch &) = delete;
    fg_cu_scratch &operator=(const fg_cu_scratch &) = delete;
    ~fg_cu_scratch() {
        if (p) fg_free(FG_CUDA, p);
    }
    /* FG_OK or FG_ERR_OOM (message names `what`). */
    fg_status get(size_t nbytes, const char *what) {
        p = fg_alloc(FG_CUDA, nbytes ? nbytes : 1);
        if (!p) return fg_error(FG_ERR_OOM, "%s: cannot allocate %zu bytes of GPU scratch", what, nbytes);
        return FG_OK;
    }
    template <typename U> U *as() const { return (U *)p; }
};

/* ---- strided layouts, by value into kernels ----
 * A view of `ndim` dims (outermost first), element strides (0 = broadcast), for kernels that walk
 * a C-order flat index and need each operand's offset. */
struct fg_cu_layout {
    int ndim;
    int64_t shape[FG_MAX_DIMS];
    int64_t stride[FG_MAX_DIMS];
};
/* Offset of flat C-order index k of `shape` under `stride`. */
__device__ __forceinline__ int64_t fg_cu_offset(int64_t k, int ndim, const int64_t *shape, const int64_t *stride) {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        int64_t n = shape[d];
        int64_t q = k / n;
        off += (k - q * n) * stride[d];
        k = q;
    }
    return off;
}

/* ---- deterministic reductions without atomics ----
 * Column sums: dst[c] += (T) Σ_r f(r, c) for an (R, C) index space. Rows are cut into fixed chunks;
 * stage 1 writes one float64 partial per (chunk, column), stage 2 adds the chunks in order. The
 * chunking depends only on R, so the result is the same on every run. f is a functor with
 * `__device__ double operator()(int64_t r, int64_t c) const`. */
template <typename F>
__global__ void fg_colsum_partial_kernel(double *part, int64_t R, int64_t C, int64_t rows_per_chunk, F f) {
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, chunk = blockIdx.y;
    if (c >= C) return;
    int64_t r0 = chunk * rows_per_chunk, r1 = r0 + rows_per_chunk < R ? r0 + rows_per_chunk : R;
    double acc = 0;
    for (int64_t r = r0; r < r1; r++) acc += f(r, c);
    part[chunk * C + c] = acc;
}
template <typename T> __global__ void fg_colsum_finish_kernel(T *dst, const double *part, int64_t nchunks, int64_t C) {
    int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    double acc = 0;
    for (int64_t k = 0; k < nchunks; k++) acc += part[k * C + c];
    dst[c] += (T)acc;
}
template <typename T, typename F> static fg_status fg_cu_colsum(T *dst, int64_t R, int64_t C, F f, const char *what) {
    if (R <= 0 || C <= 0) return FG_OK;
    int64_t rpc = (R + 1023) / 1024;
    if (rpc < 32) rpc = 32;
    int64_t nchunks = (R + rpc - 1) / rpc;
    fg_cu_scratch part;
    FG_TRY(part.get((size_t)(nchunks * C) * sizeof(double), what));
    dim3 grid((unsigned)((C + 255) / 256), (unsigned)nchunks);
    fg_colsum_partial_kernel<F><<<grid, 256, 0, fg_cu_stream()>>>(part.as<double>(), R, C, rpc, f);
    FG_CU_LAUNCHED();
    fg_colsum_finish_kernel<T>
        <<<(unsigned)((C + 255) / 256), 256, 0, fg_cu_stream()>>>(dst, part.as<double>(), nchunks, C);
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* Total: *out_dev = Σ_k f(k) over k in [0, n), in float64, into device memory. A fixed grid of
 * FG_SUM_BLOCKS blocks strides over k; each block reduces in shared memory in a fixed tree; one
 * block then adds the block sums in order. f: `__device__ double operator()(int64_t k) const`. */
#define FG_SUM_BLOCKS 256
template <typename F> __global__ void fg_sum_partial_kernel(double *part, int64_t n, F f) {
    __shared__ double sh[256];
    double acc = 0;
    for (int64_t k = blockIdx.x * 256 + threadIdx.x; k < n; k += (int64_t)FG_SUM_BLOCKS * 256) acc += f(k);
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}
template <int NB> __global__ void fg_sum_finish_kernel(double *out, const double *part) {
    __shared__ double sh[256];
    sh[threadIdx.x] = threadIdx.x < NB ? part[threadIdx.x] : 0.0;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = sh[0];
}
template <typename F> static fg_status fg_cu_sum(double *out_dev, int64_t n, F f, const char *what) {
    fg_cu_scratch part;
    FG_TRY(part.get(FG_SUM_BLOCKS * sizeof(double), what));
    fg_sum_partial_kernel<F><<<FG_SUM_BLOCKS, 256, 0, fg_cu_stream()>>>(part.as<double>(), n, f);
    FG_CU_LAUNCHED();
    fg_sum_finish_kernel<FG_SUM_BLOCKS><<<1, 256, 0, fg_cu_stream()>>>(out_dev, part.as<double>());
    FG_CU_LAUNCHED();
    return FG_OK;
}

#endif /* FG_CUDA_COMMON_CUH */
