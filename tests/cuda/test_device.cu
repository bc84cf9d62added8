/* test_device.cu — what only device code can check: tensor/philox.h and ops/shared/attn_dropout.h
 * compiled for the GPU give the CPU's bits (fg_philox_u32 and fg_attn_keep), cuRAND's own Philox
 * (curand_init + curand) gives the same numbers as fg_philox_u32 (the header's claim), the cuRAND handle works on the stream,
 * and a failing CUDA call is reported with file, line and CUDA's error string; the bf16 tensor-core
 * attention against its mirror (tests/cuda/attn_bf16_device.cuh). */
#include <curand_kernel.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "ops/shared/attn_dropout.h"
#include "tensor/philox.h"
#include "tests/cuda/attn_bf16_device.cuh"
#include "tests/cuda/cuda_test.h"

/* out[i] = fg_philox_u32(seed, stream, i) on the device */
__global__ void philox_kernel(uint32_t *out, int n, uint64_t seed, uint64_t stream) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fg_philox_u32(seed, stream, (uint64_t)i);
}
/* out[i] = curand() after curand_init(seed, stream, i) */
__global__ void curand_kernel_(uint32_t *out, int n, uint64_t seed, uint64_t stream) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    curandStatePhilox4_32_10_t st;
    curand_init(seed, stream, (unsigned long long)i, &st);
    out[i] = curand(&st);
}
/* out[(i * nk) + j] = fg_attn_keep(seed, thr, b, h, i, j) */
__global__ void keep_kernel(int *out, int nq, int nk, uint64_t seed, uint32_t thr, uint32_t b, uint32_t h) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e < nq * nk) out[e] = fg_attn_keep(seed, thr, b, h, (uint32_t)(e / nk), (uint32_t)(e % nk));
}

static int gpu_philox_bits_equal_the_cpus(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    const int n = 4099;
    const uint64_t seed = 0x0123456789abcdefULL, stream = 0xfedcba9876543210ULL;
    uint32_t *d = NULL, *h = (uint32_t *)malloc(n * sizeof(uint32_t)), *hc = (uint32_t *)malloc(n * sizeof(uint32_t));
    FGT_CHECK(cudaMalloc(&d, n * sizeof(uint32_t)) == cudaSuccess, "cudaMalloc");
    philox_kernel<<<(n + 255) / 256, 256, 0, fg_cu_stream()>>>(d, n, seed, stream);
    FGT_CHECK(cudaMemcpyAsync(h, d, n * sizeof(uint32_t), cudaMemcpyDeviceToHost, fg_cu_stream()) == cudaSuccess,
              "copy");
    curand_kernel_<<<(n + 255) / 256, 256, 0, fg_cu_stream()>>>(d, n, seed, stream);
    FGT_CHECK(cudaMemcpyAsync(hc, d, n * sizeof(uint32_t), cudaMemcpyDeviceToHost, fg_cu_stream()) == cudaSuccess,
              "copy");
    FGT_CHECK(cudaStreamSynchronize(fg_cu_stream()) == cudaSuccess, "sync: %s", cudaGetErrorString(cudaGetLastError()));
    cudaFree(d);
    int rc = FGT_PASS;
    for (int i = 0; i < n && rc == FGT_PASS; i++) {
        uint32_t want = fg_philox_u32(seed, stream, (uint64_t)i);
        if (h[i] != want) {
            printf("    fg_philox_u32 index %d: GPU %08x, CPU %08x\n", i, h[i], want);
            rc = FGT_FAIL;
        } else if (hc[i] != want) {
            printf("    cuRAND curand() after curand_init(seed, stream, %d): %08x, fg_philox_u32 %08x\n", i, hc[i],
                   want);
            rc = FGT_FAIL;
        }
    }
    free(h);
    free(hc);
    return rc;
}

static int gpu_attention_keep_equals_the_cpus(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    const int nq = 37, nk = 91;
    const uint64_t seed = 424242;
    const uint32_t thr = fg_dropout_threshold(0.3);
    int *d = NULL, *h = (int *)malloc(nq * nk * sizeof(int));
    FGT_CHECK(cudaMalloc(&d, nq * nk * sizeof(int)) == cudaSuccess, "cudaMalloc");
    keep_kernel<<<(nq * nk + 255) / 256, 256, 0, fg_cu_stream()>>>(d, nq, nk, seed, thr, 3, 5);
    FGT_CHECK(cudaMemcpyAsync(h, d, nq * nk * sizeof(int), cudaMemcpyDeviceToHost, fg_cu_stream()) == cudaSuccess,
              "copy");
    FGT_CHECK(cudaStreamSynchronize(fg_cu_stream()) == cudaSuccess, "sync");
    cudaFree(d);
    int rc = FGT_PASS, kept = 0;
    for (int e = 0; e < nq * nk && rc == FGT_PASS; e++) {
        int want = fg_attn_keep(seed, thr, 3, 5, (uint32_t)(e / nk), (uint32_t)(e % nk));
        kept += want;
        if (h[e] != want) {
            printf("    keep(b=3, h=5, i=%d, j=%d): GPU %d, CPU %d\n", e / nk, e % nk, h[e], want);
            rc = FGT_FAIL;
        }
    }
    free(h);
    FGT_CHECK(kept > 0.6 * nq * nk && kept < 0.8 * nq * nk, "p = 0.3 kept %d of %d", kept, nq * nk);
    return rc;
}

static int curand_handle_fills_on_the_stream(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    curandGenerator_t g = (curandGenerator_t)fg_cuda_curand();
    FGT_CHECK(g != NULL, "no cuRAND generator after init");
    const size_t n = 1 << 20;
    float *d = NULL;
    FGT_CHECK(cudaMalloc(&d, n * sizeof(float)) == cudaSuccess, "cudaMalloc");
    FGT_CHECK(curandSetPseudoRandomGeneratorSeed(g, 1234) == CURAND_STATUS_SUCCESS, "seed");
    FGT_CHECK(curandGenerateUniform(g, d, n) == CURAND_STATUS_SUCCESS, "generate");
    float *h = (float *)malloc(n * sizeof(float));
    FGT_CHECK(cudaMemcpyAsync(h, d, n * sizeof(float), cudaMemcpyDeviceToHost, fg_cu_stream()) == cudaSuccess, "copy");
    FGT_CHECK(cudaStreamSynchronize(fg_cu_stream()) == cudaSuccess, "sync");
    cudaFree(d);
    double s = 0;
    int out = 0;
    for (size_t i = 0; i < n; i++) {
        s += h[i];
        out += !(h[i] > 0.0f && h[i] <= 1.0f);
    }
    free(h);
    FGT_CHECK(out == 0, "%d uniforms outside (0, 1]", out);
    FGT_CHECK(s / n > 0.498 && s / n < 0.502, "mean of %zu uniforms is %g", n, s / n);
    return FGT_PASS;
}

/* A failing call through the check macro: FG_ERR_DEVICE with file, line, the call and CUDA's text. */
static fg_status failing_call(void) {
    int dev = 0;
    FG_CU(cudaGetDevice(&dev));
    FG_CU(cudaSetDevice(100000)); /* no such device: cudaErrorInvalidDevice, not sticky */
    return FG_OK;
}
static int cuda_errors_report_file_line_and_cuda_text(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    int dev = 0;
    cudaGetDevice(&dev);
    fg_status st = failing_call();
    cudaSetDevice(dev);
    (void)cudaGetLastError();
    const char *m = fg_last_error();
    FGT_CHECK(st == FG_ERR_DEVICE, "status %d", (int)st);
    FGT_CHECK(strstr(m, "test_device.cu:") != NULL, "no file:line in '%s'", m);
    FGT_CHECK(strstr(m, "cudaSetDevice(100000)") != NULL, "the failing call is not named in '%s'", m);
    FGT_CHECK(strstr(m, cudaGetErrorString(cudaErrorInvalidDevice)) != NULL, "CUDA's error string missing in '%s'", m);
    return FGT_PASS;
}

extern "C" const fgt_case fgt_device_cases[] = {
    {"gpu_philox_bits_equal_the_cpus", gpu_philox_bits_equal_the_cpus},
    {"gpu_attention_keep_equals_the_cpus", gpu_attention_keep_equals_the_cpus},
    {"curand_handle_fills_on_the_stream", curand_handle_fills_on_the_stream},
    {"cuda_errors_report_file_line_and_cuda_text", cuda_errors_report_file_line_and_cuda_text},
    {"bf16_tensor_core_attention_matches_the_mirror", bf16_tensor_core_attention_matches_the_mirror},
    {NULL, NULL},
};
