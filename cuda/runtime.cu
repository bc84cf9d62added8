/* runtime.cu — the CUDA device: init, the one stream, cuBLAS and cuRAND handles, error reporting,
 * and the memory and tensor backends that tensor/ calls for FG_CUDA tensors (see cuda/cuda.h).
 *
 * CPU reference of the kernels here: tensor/tensor.c (cpu_copy, fg_fill, fg_axpy; axpy is the
 * add_into kernel of cuda/elementwise.cu) — the GPU versions walk the same C-order index with the
 * same strides and dtype conversions.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/kernels_cuda.h"
#include "tensor/bf16.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

/* t[k] = v for every element k of a strided view */
template <typename T> __global__ void fill_kernel(T *t, fg_cu_layout L, int64_t n, T v) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x)
        t[fg_cu_offset(k, L.ndim, L.shape, L.stride)] = v;
}

/* A bfloat16 element (its bits, tensor/bf16.h) as a type of its own, so the copy kernel's
 * conversions pick bf16 rounding by overload instead of an integer cast. */
struct bf16_bits {
    uint16_t h;
};
template <typename TD> __device__ __forceinline__ TD convert_to(float x) { return (TD)x; }
template <typename TD> __device__ __forceinline__ TD convert_to(double x) { return (TD)x; }
template <> __device__ __forceinline__ bf16_bits convert_to<bf16_bits>(float x) { return {fg_bf16_from_f32(x)}; }
template <> __device__ __forceinline__ bf16_bits convert_to<bf16_bits>(double x) { return {fg_bf16_from_f64(x)}; }
template <typename TD> __device__ __forceinline__ TD convert_to(bf16_bits x) { return (TD)fg_bf16_to_f32(x.h); }
template <> __device__ __forceinline__ bf16_bits convert_to<bf16_bits>(bf16_bits x) { return x; }

/* dst[k] = src[k] converted to TD (bf16: round to nearest even), any strides on both */
template <typename TD, typename TS>
__global__ void copy_kernel(TD *dst, fg_cu_layout Ld, const TS *src, fg_cu_layout Ls, int64_t n) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x)
        dst[fg_cu_offset(k, Ld.ndim, Ld.shape, Ld.stride)] =
            convert_to<TD>(src[fg_cu_offset(k, Ls.ndim, Ls.shape, Ls.stride)]);
}

/* y[k] = bf16(float(y[k]) + a · float(x[k])), any strides on both (tensor.c's axpy_row_h) */
__global__ void axpy_bf16_kernel(uint16_t *y, fg_cu_layout Ly, const uint16_t *x, fg_cu_layout Lx, int64_t n, float a) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        uint16_t *p = y + fg_cu_offset(k, Ly.ndim, Ly.shape, Ly.stride);
        *p = fg_bf16_from_f32(fg_bf16_to_f32(*p) + a * fg_bf16_to_f32(x[fg_cu_offset(k, Lx.ndim, Lx.shape, Lx.stride)]));
    }
}

/* ============================================================================================
 * state and error reporting
 * ============================================================================================ */

static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_ready;
static int g_device;
static int g_sms = 1;
static int g_arch;
static cudaStream_t g_stream;
static cublasHandle_t g_blas;
static curandGenerator_t g_rand;
static char g_devstr[1024] = "CUDA not initialized (call fg_cuda_init)";

fg_status fg_cu_fail(cudaError_t e, const char *call, const char *file, int line) {
    return fg_error(FG_ERR_DEVICE, "CUDA error at %s:%d: %s: %s (%s)", file, line, call, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}
fg_status fg_cublas_fail(cublasStatus_t s, const char *call, const char *file, int line) {
    return fg_error(FG_ERR_DEVICE, "cuBLAS error at %s:%d: %s: %s (%s)", file, line, call, cublasGetStatusString(s),
                    cublasGetStatusName(s));
}
fg_status fg_curand_fail(curandStatus_t s, const char *call, const char *file, int line) {
    return fg_error(FG_ERR_DEVICE, "cuRAND error at %s:%d: %s: status %d", file, line, call, (int)s);
}
void fg_cu_report(cudaError_t e, const char *call, const char *file, int line) {
    fg_cu_fail(e, call, file, line);
    fprintf(stderr, "flashgrad: %s\n", fg_last_error());
    /* a sticky error (a kernel faulted) poisons the context: every later call fails with it, so
     * stop here with the first, real, message */
    if (e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure || e == cudaErrorMisalignedAddress) {
        fprintf(stderr, "flashgrad: the CUDA context is unusable after this error; stopping\n");
        exit(1);
    }
}

cudaStream_t fg_cu_stream(void) { return g_stream; }
cublasHandle_t fg_cu_blas(void) { return g_blas; }
int fg_cu_sm_count(void) { return g_sms; }
fg_status fg_cu_require(const char *op) {
    if (g_ready) return FG_OK;
    return fg_error(FG_ERR_DEVICE, "%s: the CUDA device is not initialized (call fg_cuda_init first)", op);
}

/* ============================================================================================
 * the memory backend (tensor/alloc.h): raw cudaMalloc'd blocks under the caching allocator
 * ============================================================================================ */

static void *be_alloc(size_t nbytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, nbytes);
    if (e == cudaErrorMemoryAllocation) {
        /* out of memory is not sticky: clear it so the allocator can empty its cache and retry */
        (void)cudaGetLastError();
        return NULL;
    }
    if (e != cudaSuccess) {
        /* anything else is a real fault, usually an earlier kernel's sticky error (illegal
         * address, launch failure) surfacing here: report it as itself and stop, rather than let
         * the allocator empty its cache into a flood of cudaFree errors that bury it */
        fprintf(stderr, "flashgrad: CUDA error in cudaMalloc(%zu bytes): %s (%s); an earlier kernel may have faulted "
                        "(rerun with CUDA_LAUNCH_BLOCKING=1 to name it)\n",
                nbytes, cudaGetErrorString(e), cudaGetErrorName(e));
        exit(1);
    }
    return p;
}

static void be_free(void *p) {
    cudaError_t e = cudaFree(p);
    /* at process exit the allocator's destructor may run after the CUDA runtime has shut down */
    if (e != cudaSuccess && e != cudaErrorCudartUnloading && e != cudaErrorContextIsDestroyed)
        fg_cu_report(e, "cudaFree(p)", __FILE__, __LINE__);
}

static void be_memset0(void *p, size_t n) { FG_CU_REPORT(cudaMemsetAsync(p, 0, n, g_stream)); }

static void be_to_host(void *dst, const void *src, size_t n) {
    FG_CU_REPORT(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, g_stream));
    FG_CU_REPORT(cudaStreamSynchronize(g_stream));
}

static void be_from_host(void *dst, const void *src, size_t n) {
    /* the caller may free or reuse `src` as soon as we return: wait for the copy */
    FG_CU_REPORT(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, g_stream));
    FG_CU_REPORT(cudaStreamSynchronize(g_stream));
}

static void be_dev(void *dst, const void *src, size_t n) {
    FG_CU_REPORT(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, g_stream));
}

static void be_sync(void) { FG_CU_REPORT(cudaStreamSynchronize(g_stream)); }

static const fg_device_backend g_mem_backend = {
    be_alloc, be_free, be_memset0, be_to_host, be_from_host, be_dev, be_sync,
};

/* ============================================================================================
 * the tensor backend (tensor/tensor.h): fill, axpy, copy on the device
 * ============================================================================================ */

static fg_cu_layout layout_of(const fg_tensor *t) {
    fg_cu_layout L;
    memset(&L, 0, sizeof L);
    L.ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        L.shape[d] = t->shape[d];
        L.stride[d] = t->strides[d];
    }
    return L;
}

template <typename T> static fg_status launch_fill(fg_tensor *t, double value) {
    int64_t n = fg_numel(t);
    if (n == 0) return FG_OK;
    if (value == 0.0 && fg_is_contiguous(t)) {
        FG_CU(cudaMemsetAsync(fg_data(t), 0, fg_nbytes(t), g_stream));
        return FG_OK;
    }
    fill_kernel<T><<<fg_cu_blocks(n), FG_CU_THREADS, 0, g_stream>>>((T *)fg_data(t), layout_of(t), n, (T)value);
    FG_CU_LAUNCHED();
    return FG_OK;
}
static fg_status tb_fill(fg_tensor *t, double value) {
    if (t->dtype == FG_BF16) {
        const int64_t n = fg_numel(t);
        if (n == 0) return FG_OK;
        fill_kernel<uint16_t><<<fg_cu_blocks(n), FG_CU_THREADS, 0, g_stream>>>((uint16_t *)fg_data(t), layout_of(t), n,
                                                                               fg_bf16_from_f64(value));
        FG_CU_LAUNCHED();
        return FG_OK;
    }
    return FG_CU_DISPATCH(t->dtype, launch_fill, t, value);
}

/* y += alpha * x: the add_into kernel of the table (cuda/elementwise.cu); bfloat16 by its own kernel */
static fg_status tb_axpy(fg_tensor *y, double alpha, const fg_tensor *x) {
    if (y->dtype == FG_BF16) {
        const int64_t n = fg_numel(y);
        if (n == 0) return FG_OK;
        axpy_bf16_kernel<<<fg_cu_blocks(n), FG_CU_THREADS, 0, g_stream>>>(
            (uint16_t *)fg_data(y), layout_of(y), (const uint16_t *)fg_data(x), layout_of(x), n, (float)alpha);
        FG_CU_LAUNCHED();
        return FG_OK;
    }
    return fg_cu_memory_add_into(y->dtype, fg_data(y), y->strides, fg_data(x), x->strides, y->ndim, y->shape, alpha);
}

template <typename TD>
static void launch_copy_src(fg_dtype ts, unsigned nb, TD *d, const fg_cu_layout &Ld, const void *s,
                            const fg_cu_layout &Ls, int64_t n) {
    if (ts == FG_F64)
        copy_kernel<TD, double><<<nb, FG_CU_THREADS, 0, g_stream>>>(d, Ld, (const double *)s, Ls, n);
    else if (ts == FG_BF16)
        copy_kernel<TD, bf16_bits><<<nb, FG_CU_THREADS, 0, g_stream>>>(d, Ld, (const bf16_bits *)s, Ls, n);
    else
        copy_kernel<TD, float><<<nb, FG_CU_THREADS, 0, g_stream>>>(d, Ld, (const float *)s, Ls, n);
}
static void launch_copy_dst(fg_dtype td, fg_dtype ts, unsigned nb, void *d, const fg_cu_layout &Ld, const void *s,
                            const fg_cu_layout &Ls, int64_t n) {
    if (td == FG_F64)
        launch_copy_src<double>(ts, nb, (double *)d, Ld, s, Ls, n);
    else if (td == FG_BF16)
        launch_copy_src<bf16_bits>(ts, nb, (bf16_bits *)d, Ld, s, Ls, n);
    else
        launch_copy_src<float>(ts, nb, (float *)d, Ld, s, Ls, n);
}

static fg_status tb_copy(fg_tensor *dst, const fg_tensor *src) {
    int64_t n = fg_numel(dst);
    if (n == 0) return FG_OK;
    if (dst->dtype == src->dtype && fg_is_contiguous(dst) && fg_is_contiguous(src)) {
        FG_CU(cudaMemcpyAsync(fg_data(dst), fg_data(src), fg_nbytes(dst), cudaMemcpyDeviceToDevice, g_stream));
        return FG_OK;
    }
    fg_cu_layout Ld = layout_of(dst), Ls = layout_of(src);
    unsigned nb = fg_cu_blocks(n);
    void *d = fg_data(dst);
    const void *s = fg_data(src);
    launch_copy_dst(dst->dtype, src->dtype, nb, d, Ld, s, Ls, n);
    FG_CU_LAUNCHED();
    return FG_OK;
}

static const fg_tensor_backend g_tensor_backend = {tb_fill, tb_axpy, tb_copy};

/* ============================================================================================
 * init
 * ============================================================================================ */

static fg_status init_locked(void) {
    int count = 0;
    FG_CU(cudaGetDeviceCount(&count));
    if (count < 1) return fg_error(FG_ERR_DEVICE, "CUDA: no CUDA-capable device is visible");
    const char *env = getenv("FG_CUDA_DEVICE");
    g_device = env && *env ? atoi(env) : 0;
    if (g_device < 0 || g_device >= count)
        return fg_error(FG_ERR_DEVICE, "CUDA: FG_CUDA_DEVICE=%s but %d device(s) are visible", env, count);
    FG_CU(cudaSetDevice(g_device));
    FG_CU(cudaFree(0)); /* create the context now, so the first kernel's time is the kernel's */
    cudaDeviceProp prop;
    FG_CU(cudaGetDeviceProperties(&prop, g_device));
    g_sms = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    g_arch = prop.major * 10 + prop.minor;
    int drv = 0, rt = 0;
    FG_CU(cudaDriverGetVersion(&drv));
    FG_CU(cudaRuntimeGetVersion(&rt));
    FG_CU(cudaStreamCreate(&g_stream));
    FG_CUBLAS(cublasCreate(&g_blas));
    FG_CUBLAS(cublasSetStream(g_blas, g_stream));
    /* plain float32 arithmetic (no TF32): results are compared with the CPU's */
    FG_CUBLAS(cublasSetMathMode(g_blas, CUBLAS_DEFAULT_MATH));
    FG_CURAND(curandCreateGenerator(&g_rand, CURAND_RNG_PSEUDO_PHILOX4_32_10));
    FG_CURAND(curandSetStream(g_rand, g_stream));
    snprintf(g_devstr, sizeof g_devstr,
             "%.256s (sm_%d, %d SMs, %.1f GiB, %d KiB smem/block opt-in, driver %d.%d, runtime %d.%d)", prop.name,
             g_arch, g_sms, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
             (int)(prop.sharedMemPerBlockOptin / 1024), drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10);
    fg_register_backend(FG_CUDA, &g_mem_backend);
    fg_register_tensor_backend(FG_CUDA, &g_tensor_backend);
    fg_register_kernels(FG_CUDA, &fg_cuda_kernels);
    g_ready = 1;
    return FG_OK;
}

extern "C" fg_status fg_cuda_init(void) {
    pthread_mutex_lock(&g_init_mu);
    fg_status st = g_ready ? FG_OK : init_locked();
    if (st != FG_OK) {
        snprintf(g_devstr, sizeof g_devstr, "no usable CUDA device: %.900s", fg_last_error());
        /* a partial init keeps its handles; the next call starts over from the device query */
    }
    pthread_mutex_unlock(&g_init_mu);
    return st;
}

extern "C" fg_status fg_cuda_synchronize(void) {
    FG_TRY(fg_cu_require("synchronize"));
    FG_CU(cudaStreamSynchronize(g_stream));
    FG_CU(cudaGetLastError());
    return FG_OK;
}

extern "C" const char *fg_cuda_device_string(void) { return g_devstr; }
extern "C" void *fg_cuda_curand(void) { return g_ready ? (void *)g_rand : NULL; }
