/* detectors.cpp — every check of the CUDA emulator (cuda_emu.h, include/cuda_runtime.h) proven to
 * fire: each case below is a tiny kernel or host snippet with one seeded bug, run in a child
 * process that must stop with the detector's message (or, for the checks that return an error,
 * report it), beside a control without the bug that must run clean under every schedule.
 * `make cuda-emu` runs it first. Exit status = number of failed cases.
 */
#include "tests/cuda/emu/cuda_emu.h"
#include "tests/cuda/emu/seeded_case.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "cuda/ptx_async.cuh"

/* ---- kernels ---- */

/* the block's sum of 256 values, as a tree in static shared memory (cuda_common.cuh's pattern);
 * SYNC = false removes the __syncthreads between the levels */
template <bool SYNC> __global__ void tree_sum(const float *in, float *out) {
    __shared__ float sh[256];
    const unsigned t = threadIdx.x;
    sh[t] = in[blockIdx.x * 256 + t];
    __syncthreads();
    for (unsigned s = 128; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        if (SYNC) __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = sh[0];
}

/* the last 32 values summed "warp-synchronously": lanes assumed to run in lockstep, with no
 * __syncwarp (SYNC = true puts a __syncthreads after every level instead, for a whole block) */
template <bool SYNC> __global__ void lockstep_sum(const float *in, float *out) {
    __shared__ float sh[64];
    const unsigned t = threadIdx.x;
    sh[t] = in[t];
    __syncthreads();
    for (unsigned s = 32; s > 0; s >>= 1) {
        if (t < s) sh[t] += sh[t + s];
        if (SYNC) __syncthreads();
    }
    if (t == 0) out[0] = sh[0];
}

/* block b adds one to what block b - 1 left: right only when blocks run in grid order */
__global__ void chain(int *v) {
    if (threadIdx.x == 0) v[blockIdx.x + 1] = v[blockIdx.x] + 1;
}

/* tiles through dynamic shared memory; SYNC = false removes the barrier that keeps the next tile
 * from overwriting the one still being read (flash attention's first __syncthreads per tile) */
template <bool SYNC> __global__ void tile_loop(const float *in, float *out, int ntiles) {
    FG_DYN_SMEM(raw);
    float *tile = (float *)raw;
    const unsigned t = threadIdx.x, n = blockDim.x;
    float acc = 0;
    for (int k = 0; k < ntiles; k++) {
        if (SYNC) __syncthreads();
        tile[t] = in[k * n + t];
        __syncthreads();
        acc += tile[(t + 1) % n];
    }
    out[t] = acc;
}

/* a float4 load from in + off: misaligned unless off is a multiple of 4 floats */
__global__ void load_float4(const float *in, float *out, int off) {
    const float4 v = reinterpret_cast<const float4 *>(in + off)[threadIdx.x];
    out[threadIdx.x] = v.x + v.y + v.z + v.w;
}

/* reads shared memory that only the threads below `writers` wrote */
__global__ void shared_read(float *out, unsigned writers, int dynamic) {
    __shared__ float st[64];
    FG_DYN_SMEM(raw);
    float *sh = dynamic ? (float *)raw : st;
    const unsigned t = threadIdx.x;
    if (t < writers) sh[t] = (float)t;
    __syncthreads();
    out[t] = sh[(t + 1) % blockDim.x];
}

/* a warp sum by shuffles; the lane `skip` (32 = none) leaves the shuffles out */
__global__ void warp_sum(const float *in, float *out, unsigned skip) {
    const unsigned lane = threadIdx.x & 31;
    float v = in[threadIdx.x];
    if (lane != skip)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}

/* a shuffle among the lanes of `mask` */
__global__ void masked_shfl(float *out, unsigned mask, int src) {
    float v = (float)threadIdx.x;
    if (mask >> (threadIdx.x & 31) & 1u) v = __shfl_sync(mask, v, src);
    out[threadIdx.x] = v;
}

/* threads below `stop` return before the barrier */
__global__ void early_return(float *out, unsigned stop) {
    if (threadIdx.x < stop) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

/* every thread writes element 0: what is left depends on which thread writes last */
__global__ void global_race(int *out) { out[0] = (int)threadIdx.x; }

/* out[i] = in[i] for i < n + extra */
__global__ void copy_n(const float *in, float *out, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i];
}

/* writes `n` floats of dynamic shared memory */
__global__ void fill_shared(float *out, int n) {
    FG_DYN_SMEM(raw);
    float *sh = (float *)raw;
    for (int i = threadIdx.x; i < n; i += blockDim.x) sh[i] = 1;
    __syncthreads();
    out[threadIdx.x] = sh[threadIdx.x];
}

/* tiles fetched by cp.async into two buffers of dynamic shared memory, tile k + 1 in flight while
 * tile k is read (flash attention's K/V pipeline). MODE 0: correct (wait_group, barrier, then the
 * next fetch); 1: no wait_group before the barrier; 2: the barrier before the wait_group instead
 * of after it (a thread sees its own copies only); 3: the next fetch issued before the barrier,
 * while other threads still read that buffer */
template <int MODE> __global__ void async_tiles(const float *in, float *out, int ntiles) {
    FG_DYN_SMEM(raw);
    float *buf = (float *)raw; /* 2 × blockDim.x */
    const unsigned t = threadIdx.x, n = blockDim.x;
    fg_cp_async<4>(buf + t, in + t, true);
    fg_cp_async_commit();
    float acc = 0;
    for (int k = 0; k < ntiles; k++) {
        float *next = buf + ((k + 1) & 1) * n;
        if (MODE == 2) __syncthreads();
        if (MODE != 1) fg_cp_async_wait<0>();
        if (MODE == 3 && k + 1 < ntiles) {
            fg_cp_async<4>(next + t, in + (k + 1) * n + t, true);
            fg_cp_async_commit();
        }
        if (MODE != 2) __syncthreads();
        if (MODE != 3 && k + 1 < ntiles) {
            fg_cp_async<4>(next + t, in + (k + 1) * n + t, true);
            fg_cp_async_commit();
        }
        acc += buf[(k & 1) * n + (t + 1) % n];
    }
    out[t] = acc;
}

/* ---- helpers ---- */

static float *dev_floats(size_t n, float v) {
    float *d = nullptr;
    std::vector<float> h(n, v);
    if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess ||
        cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "detectors: device setup failed\n");
        exit(90);
    }
    return d;
}
static std::vector<float> host_floats(const float *d, size_t n) {
    std::vector<float> h(n);
    cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
}

/* ---- the cases: each returns 0 when it ran as a clean case expects ---- */

static int race_tree(bool sync) {
    float *in = dev_floats(512, 1), *out = dev_floats(2, 0);
    fg_emu_launch({2, 1, 1}, 256, 0, tree_sum<true>, in, out);
    if (!sync) fg_emu_launch({2, 1, 1}, 256, 0, tree_sum<false>, in, out);
    std::vector<float> h = host_floats(out, 2);
    return h[0] == 256 && h[1] == 256 ? 0 : 1;
}
static int race_tree_ok() { return race_tree(true); }
static int race_tree_bug() { return race_tree(false); }

static int lockstep(bool sync) {
    float *in = dev_floats(64, 1), *out = dev_floats(1, 0);
    if (sync)
        fg_emu_launch({1, 1, 1}, 64, 0, lockstep_sum<true>, (const float *)in, out);
    else
        fg_emu_launch({1, 1, 1}, 64, 0, lockstep_sum<false>, (const float *)in, out);
    return host_floats(out, 1)[0] == 64 ? 0 : 1;
}
static int lockstep_ok() { return lockstep(true); }
static int lockstep_bug() { return lockstep(false); }

/* launched three times (grid order, reversed, shuffled: the order changes by launch), the chain
 * must come out wrong at least once */
static int block_order() {
    int *v = nullptr;
    cudaMalloc(&v, 9 * sizeof(int));
    int wrong = 0;
    for (int k = 0; k < 3; k++) {
        int h[9] = {0};
        cudaMemcpy(v, h, sizeof h, cudaMemcpyHostToDevice);
        fg_emu_launch({8, 1, 1}, 32, 0, chain, v);
        cudaMemcpy(h, v, sizeof h, cudaMemcpyDeviceToHost);
        wrong += h[8] != 8;
    }
    return wrong > 0 ? 0 : 1;
}

static int tiles(bool sync) {
    float *in = dev_floats(4 * 64, 1), *out = dev_floats(64, 0);
    if (sync)
        fg_emu_launch({1, 1, 1}, 64, 64 * sizeof(float), tile_loop<true>, in, out, 4);
    else
        fg_emu_launch({1, 1, 1}, 64, 64 * sizeof(float), tile_loop<false>, in, out, 4);
    return host_floats(out, 64)[5] == 4 ? 0 : 1;
}
static int war_tile_ok() { return tiles(true); }
static int war_tile_bug() { return tiles(false); }

static int float4_at(int off) {
    float *in = dev_floats(32 * 4 + 8, 1), *out = dev_floats(32, 0);
    fg_emu_launch({1, 1, 1}, 32, 0, load_float4, (const float *)in, out, off);
    return host_floats(out, 32)[0] == 4 ? 0 : 1;
}
static int float4_ok() { return float4_at(4); }
static int float4_bug() { return float4_at(1); }

static int uninit(unsigned writers, int dynamic) {
    float *out = dev_floats(64, 0);
    fg_emu_launch({1, 1, 1}, 64, dynamic ? 64 * sizeof(float) : 0, shared_read, out, writers, dynamic);
    return host_floats(out, 64)[0] == 1 ? 0 : 1;
}
static int uninit_ok() { return uninit(64, 1) | uninit(64, 0); }
static int uninit_dynamic_bug() { return uninit(63, 1); }
static int uninit_static_bug() { return uninit(63, 0); }

static int shfl(unsigned skip) {
    float *in = dev_floats(64, 1), *out = dev_floats(64, 0);
    fg_emu_launch({1, 1, 1}, 64, 0, warp_sum, (const float *)in, out, skip);
    return host_floats(out, 64)[40] == 32 ? 0 : 1;
}
static int shfl_ok() { return shfl(32); }
static int shfl_lane_missing() { return shfl(5); }

static int masked(unsigned threads, unsigned mask, int src, float want_lane0) {
    float *out = dev_floats(threads, 0);
    fg_emu_launch({1, 1, 1}, threads, 0, masked_shfl, out, mask, src);
    return host_floats(out, threads)[0] == want_lane0 ? 0 : 1;
}
static int mask_partial_ok() { return masked(48, 0x0000ffffu, 3, 3) | masked(20, 0x000fffffu, 7, 7); }
static int mask_source_outside() { return masked(32, 0x0000ffffu, 20, 20); }
static int mask_lanes_missing() { return masked(20, 0xffffffffu, 3, 3); }

static int barrier_divergence() {
    float *out = dev_floats(64, 0);
    fg_emu_launch({1, 1, 1}, 64, 0, early_return, out, 16u);
    return 0;
}

static int global_race_bug() {
    int *out = nullptr;
    cudaMalloc(&out, sizeof(int));
    fg_emu_launch({1, 1, 1}, 64, 0, global_race, out);
    return 0;
}

static int shared_oob() {
    float *out = dev_floats(64, 0);
    fg_emu_launch({1, 1, 1}, 64, 64 * sizeof(float), fill_shared, out, 65);
    return 0;
}

static int device_oob() {
    float *in = dev_floats(64, 1), *out = dev_floats(64, 0);
    fg_emu_launch({1, 1, 1}, 32, 0, copy_n, (const float *)in, out, 64 + 1024);
    return 0;
}

static int device_use_after_free() {
    float *in = dev_floats(64, 1), *out = dev_floats(64, 0);
    cudaFree(in);
    fg_emu_launch({1, 1, 1}, 32, 0, copy_n, (const float *)in, out, 64);
    return 0;
}

static int kernel_reads_host() {
    std::vector<float> host(64, 1);
    float *out = dev_floats(64, 0);
    fg_emu_launch({1, 1, 1}, 32, 0, copy_n, (const float *)host.data(), out, 64);
    return 0;
}

static int host_deref() {
    float *d = dev_floats(16, 0);
    volatile float *p = d;
    p[3] = 1; /* host code writing device memory */
    return 0;
}

static int memcpy_kind(cudaMemcpyKind kind, bool dst_dev, bool src_dev) {
    float *d1 = dev_floats(16, 0), *d2 = dev_floats(16, 0);
    std::vector<float> h1(16), h2(16);
    void *dst = dst_dev ? (void *)d1 : h1.data();
    const void *src = src_dev ? (const void *)d2 : h2.data();
    return cudaMemcpy(dst, src, 16 * sizeof(float), kind) == cudaErrorInvalidValue ? 0 : 1;
}
static int memcpy_kinds_ok() {
    /* every right kind must pass: return 0 only when none of them fails */
    return !memcpy_kind(cudaMemcpyHostToDevice, true, false) || !memcpy_kind(cudaMemcpyDeviceToHost, false, true) ||
           !memcpy_kind(cudaMemcpyDeviceToDevice, true, true) || !memcpy_kind(cudaMemcpyHostToHost, false, false) ||
           !memcpy_kind(cudaMemcpyDefault, true, false);
}
static int memcpy_h2d_from_device() { return memcpy_kind(cudaMemcpyHostToDevice, true, true); }
static int memcpy_d2h_to_device() { return memcpy_kind(cudaMemcpyDeviceToHost, true, true); }
static int memcpy_d2d_from_host() { return memcpy_kind(cudaMemcpyDeviceToDevice, true, false); }
static int memcpy_past_end() {
    float *d = dev_floats(16, 0);
    std::vector<float> h(32);
    return cudaMemcpy(d, h.data(), 32 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue ? 0 : 1;
}

/* a device-to-host cudaMemcpyAsync has not landed before the stream is synchronized */
static int missing_stream_sync() {
    float *d = dev_floats(4, 2.5f);
    float h[4] = {0, 0, 0, 0};
    cudaMemcpyAsync(h, d, sizeof h, cudaMemcpyDeviceToHost, nullptr);
    uint32_t before;
    memcpy(&before, &h[0], 4);
    cudaStreamSynchronize(nullptr);
    return before == 0xffffffffu && h[0] == 2.5f ? 0 : 1;
}

static int cublas_host_matrix() {
    float *c = dev_floats(4, 0);
    std::vector<float> a(4, 1), b(4, 1);
    const float one = 1, zero = 0;
    cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.data(), 2, b.data(), 2, &zero, c, 2);
    return 0;
}

/* cublasGemmEx, the type combination bfloat16 mixed precision uses: 1.5 · 2 summed over k = 2 */
static int gemm_ex_bf16_ok() {
    uint16_t *a = nullptr, *b = nullptr;
    float *c = dev_floats(4, 0);
    const uint16_t ha[4] = {0x3fc0, 0x3fc0, 0x3fc0, 0x3fc0}, hb[4] = {0x4000, 0x4000, 0x4000, 0x4000}; /* 1.5, 2 */
    cudaMalloc((void **)&a, sizeof ha);
    cudaMalloc((void **)&b, sizeof hb);
    cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice);
    const float one = 1, zero = 0;
    const cublasStatus_t st = cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_T, 2, 2, 2, &one, a, CUDA_R_16BF, 2, b,
                                           CUDA_R_16BF, 2, &zero, c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS && host_floats(c, 4)[3] == 6.0f ? 0 : 1;
}
/* ... and another one (float32 inputs): refused, loudly, not computed */
static int gemm_ex_other_types() {
    float *a = dev_floats(4, 1), *c = dev_floats(4, 0);
    const float one = 1, zero = 0;
    const cublasStatus_t st = cublasGemmEx(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, CUDA_R_32F, 2, a,
                                           CUDA_R_32F, 2, &zero, c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_NOT_SUPPORTED ? 0 : 1;
}

template <int MODE> static int async_pipeline() {
    float *in = dev_floats(4 * 64, 1), *out = dev_floats(64, 0);
    fg_emu_launch({2, 1, 1}, 64, 2 * 64 * sizeof(float), async_tiles<MODE>, (const float *)in, out, 4);
    return host_floats(out, 64)[5] == 4 ? 0 : 1;
}


static const detector_case cases[] = {
    /* controls: correct code runs clean under every schedule */
    {"control: tree reduction with its barriers", race_tree_ok, false, nullptr},
    {"control: tiles with both barriers", war_tile_ok, false, nullptr},
    {"control: the last warp's levels with barriers", lockstep_ok, false, nullptr},
    {"control: aligned float4 load", float4_ok, false, nullptr},
    {"control: shared memory fully written before it is read", uninit_ok, false, nullptr},
    {"control: full-warp shuffle reduction", shfl_ok, false, nullptr},
    {"control: partial masks and a partial last warp", mask_partial_ok, false, nullptr},
    {"control: memcpy with the right kinds", memcpy_kinds_ok, false, nullptr},
    {"control: cublasGemmEx, bf16 x bf16 -> float32", gemm_ex_bf16_ok, false, nullptr},
    {"control: cp.async double buffering with wait_group and barriers", async_pipeline<0>, false, nullptr},
    /* seeded bugs */
    {"race: tree reduction without its __syncthreads", race_tree_bug, true, "race on static shared memory"},
    {"race: tile overwritten before it is read", war_tile_bug, true, "race on dynamic shared memory"},
    {"race: warp-synchronous reduction (lockstep assumed)", lockstep_bug, true, "race on static shared memory"},
    {"reliance on block order (the test's own check sees it)", block_order, false, nullptr},
    {"race: block threads writing one global word", global_race_bug, true, "depends on the thread schedule"},
    {"misaligned float4 load", float4_bug, true, "which is not 16-byte aligned"},
    {"uninitialized dynamic shared read", uninit_dynamic_bug, true, "read dynamic shared memory at byte 252"},
    {"uninitialized static shared read", uninit_static_bug, true, "read static shared memory"},
    {"shuffle with a lane missing", shfl_lane_missing, true, "lane 5 of the mask did not arrive"},
    {"shuffle reading a lane outside its mask", mask_source_outside, true, "which is not in the mask"},
    {"shuffle mask naming lanes that do not exist", mask_lanes_missing, true, "which do not exist"},
    {"barrier not reached by every thread", barrier_divergence, true, "returned"},
    {"shared memory past the launch's size", shared_oob, true, "past the launch's 256 bytes"},
    {"kernel writes past a device allocation", device_oob, true, "past the end of a 256-byte device allocation"},
    {"kernel reads freed device memory", device_use_after_free, true, "that was freed"},
    {"kernel reads host memory", kernel_reads_host, true, "bytes of host memory"},
    {"host code dereferences a device pointer", host_deref, true, "host code dereferenced a device pointer"},
    {"cudaMemcpy HostToDevice from a device pointer", memcpy_h2d_from_device, false, "the source"},
    {"cudaMemcpy DeviceToHost into a device pointer", memcpy_d2h_to_device, false, "the destination"},
    {"cudaMemcpy DeviceToDevice from a host pointer", memcpy_d2d_from_host, false,
     "is host memory, but the kind says device"},
    {"cudaMemcpy past the end of an allocation", memcpy_past_end, false,
     "past the end of its 64-byte device allocation"},
    {"missing stream sync after a device-to-host copy", missing_stream_sync, false, nullptr},
    {"cuBLAS given a host matrix", cublas_host_matrix, true, "is a host pointer, not device memory"},
    {"cublasGemmEx with float32 inputs (not emulated)", gemm_ex_other_types, false,
     "only CUDA_R_16BF x CUDA_R_16BF -> CUDA_R_32F"},
    {"cp.async tile read without its wait_group", async_pipeline<1>, true, "landed: no cp.async wait_group"},
    {"cp.async tile read after the wait but with the barrier before it", async_pipeline<2>, true,
     "or no __syncthreads after the wait"},
    {"cp.async prefetch issued before the barrier (buffer still read)", async_pipeline<3>, true,
     "(write-after-read hazard)"},
};


int main() {
    setenv("FG_EMU_SCHEDULES", "3", 1); /* the global-race case needs a second schedule */
    printf("emulator detectors: each seeded bug must be caught, each control must run clean\n");
    int fails = 0, n = 0;
    for (const auto &c : cases) {
        fails += run_case(c);
        n++;
    }
    printf("detectors: %d of %d cases failed\n", fails, n);
    return fails;
}
