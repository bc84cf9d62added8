/* cuda_runtime.h (emulator) — the part of the CUDA runtime API flashgrad's host code uses, on the
 * CPU, with the host/device discipline checks a GPU would enforce by crashing or by silently wrong
 * data. Device memory comes from the emulator's own address range (cuda_emu.h: PROT_NONE outside
 * device work, so host code that dereferences a device pointer faults with a message saying so),
 * starts as NaN bytes, and is freed for good (a later use faults). Copies check their kind against
 * the pointers (a device pointer where the kind says host, or the reverse, or a range past the end
 * of an allocation, fails with cudaErrorInvalidValue and a line on stderr). The one stream is in
 * order, and kernels run at launch; a device-to-host cudaMemcpyAsync lands in host memory only at
 * the next synchronization (cudaStreamSynchronize, cudaDeviceSynchronize, cudaMemcpy, cudaFree),
 * the host buffer holding NaN bytes until then, so a missing stream sync reads garbage. Launches
 * (rewritten from <<<...>>> by tests/cuda/emu/rewrite_launches.py) run through cuda_emu.h. Launch
 * errors are checked as the GPU checks them: an empty or oversized grid, too many threads, dynamic
 * shared memory above 48 KB without cudaFuncSetAttribute, or above the device's opt-in limit, fail
 * with the real error code and are reported by cudaGetLastError. Only for tests/cuda/emu
 * (`make cuda-emu`).
 */
#ifndef FG_EMU_CUDA_RUNTIME_H
#define FG_EMU_CUDA_RUNTIME_H

#include <map>
#include <vector>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/cuda/emu/cuda_emu.h"

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorCudartUnloading = 4,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorContextIsDestroyed = 709,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorMisalignedAddress = 716,
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
    cudaMemcpyDefault
};
enum cudaDeviceAttr {
    cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

typedef struct fg_emu_stream_s *cudaStream_t;

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount;
    size_t totalGlobalMem, sharedMemPerBlockOptin;
};

inline cudaError_t &fg_emu_last_error() {
    static cudaError_t e = cudaSuccess;
    return e;
}
inline cudaError_t fg_emu_err(cudaError_t e) {
    if (e != cudaSuccess) fg_emu_last_error() = e;
    return e;
}
inline cudaError_t cudaGetLastError() {
    cudaError_t e = fg_emu_last_error();
    fg_emu_last_error() = cudaSuccess;
    return e;
}
inline const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
        return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
        return "cudaErrorInvalidDevice";
    default:
        return "cudaErrorUnknown";
    }
}
inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "no error";
    case cudaErrorInvalidValue:
        return "invalid argument";
    case cudaErrorMemoryAllocation:
        return "out of memory";
    case cudaErrorInvalidConfiguration:
        return "invalid configuration argument";
    case cudaErrorInvalidDevice:
        return "invalid device ordinal";
    default:
        return "unknown error";
    }
}

#define FG_EMU_SMS 2 /* multiprocessors: small, so grid-stride kernels launch few emulated blocks */

inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
inline int &fg_emu_device() {
    static int d = 0;
    return d;
}
inline cudaError_t cudaSetDevice(int d) {
    if (d != 0) return fg_emu_err(cudaErrorInvalidDevice);
    fg_emu_device() = d;
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int *d) {
    *d = fg_emu_device();
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    if (d != 0) return fg_emu_err(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    strcpy(p->name, "CPU emulator of tests/cuda/emu");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = FG_EMU_SMS;
    p->totalGlobalMem = (size_t)8 << 30;
    p->sharedMemPerBlockOptin = FG_EMU_SMEM_LIMIT;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    if (d != 0) return fg_emu_err(cudaErrorInvalidDevice);
    switch (a) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *v = FG_EMU_SMEM_LIMIT;
        return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
        *v = FG_EMU_SMS;
        return cudaSuccess;
    case cudaDevAttrClockRate: /* kHz; an emulated device has no clock: 1 GHz */
        *v = 1000000;
        return cudaSuccess;
    }
    return fg_emu_err(cudaErrorInvalidValue);
}
/* A kernel's resources: the emulator knows no registers or local memory (0); occupancy is what
 * Hopper's shared memory (228 KB per SM, 1 KB reserved per block) and 2048 threads allow. */
struct cudaFuncAttributes {
    size_t sharedSizeBytes, localSizeBytes;
    int maxThreadsPerBlock, numRegs;
};
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *fa, const void *) {
    memset(fa, 0, sizeof *fa);
    fa->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, const void *, int threads, size_t smem) {
    if (threads <= 0 || threads > 1024) return fg_emu_err(cudaErrorInvalidValue);
    const int by_smem = (int)(233472 / (smem + 1024)), by_threads = 2048 / threads;
    *n = by_smem < by_threads ? by_smem : by_threads;
    if (*n > 32) *n = 32;
    return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
inline cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t *s) {
    *s = (cudaStream_t)malloc(1);
    return cudaSuccess;
}

/* ---- memory ---- */
inline cudaError_t cudaMalloc(void **p, size_t n) {
    *p = fg_emu_dev_malloc(n);
    return *p ? cudaSuccess : fg_emu_err(cudaErrorMemoryAllocation);
}
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }

/* device-to-host copies not yet delivered (they land at the next synchronization) */
struct fg_emu_pending_copy {
    void *dst;
    std::vector<unsigned char> bytes;
};
inline std::vector<fg_emu_pending_copy> &fg_emu_pending() {
    static auto *v = new std::vector<fg_emu_pending_copy>;
    return *v;
}
inline void fg_emu_deliver() {
    for (auto &c : fg_emu_pending()) memcpy(c.dst, c.bytes.data(), c.bytes.size());
    fg_emu_pending().clear();
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
    fg_emu_deliver();
    return cudaSuccess;
}

/* Events: the emulator runs every call to completion, so an event records the host's clock when
 * it is recorded (benchmarks time the emulated work; the figures mean nothing for a GPU). */
typedef struct fg_emu_event_s {
    double t_ms;
    int recorded;
} *cudaEvent_t;
inline double fg_emu_now_ms() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
inline cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = (cudaEvent_t)calloc(1, sizeof **e);
    return *e ? cudaSuccess : fg_emu_err(cudaErrorMemoryAllocation);
}
#define cudaEventDisableTiming 0x02
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) { return cudaEventCreate(e); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    free(e);
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    cudaError_t r = cudaStreamSynchronize(s);
    e->t_ms = fg_emu_now_ms();
    e->recorded = 1;
    return r;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e->recorded ? cudaSuccess : fg_emu_err(cudaErrorInvalidValue); }
inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a->recorded || !b->recorded) return fg_emu_err(cudaErrorInvalidValue);
    *ms = (float)(b->t_ms - a->t_ms);
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
    fg_emu_deliver();
    return cudaSuccess;
}

inline cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess; /* cudaFree(0) initializes the context */
    fg_emu_deliver();           /* cudaFree synchronizes the device */
    if (fg_emu_dev_free(p) != 0) {
        fprintf(stderr, "cuda_emu: cudaFree(%p): not a live device allocation\n", p);
        return fg_emu_err(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

inline const char *fg_emu_kind_name(cudaMemcpyKind k) {
    switch (k) {
    case cudaMemcpyHostToHost:
        return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice:
        return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost:
        return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice:
        return "cudaMemcpyDeviceToDevice";
    default:
        return "cudaMemcpyDefault";
    }
}
/* cudaSuccess, or cudaErrorInvalidValue (with a line on stderr) when a pointer is not where `k`
 * says, or a device range is not inside one live allocation */
inline cudaError_t fg_emu_copy_check(const char *fn, void *dst, const void *src, size_t n, cudaMemcpyKind k) {
    const int dk = fg_emu_dev_find(dst, nullptr, nullptr), sk = fg_emu_dev_find(src, nullptr, nullptr);
    /* where the kind says they are (cudaMemcpyDefault: wherever they are) */
    const bool to_dev = k == cudaMemcpyHostToDevice || k == cudaMemcpyDeviceToDevice;
    const bool from_dev = k == cudaMemcpyDeviceToHost || k == cudaMemcpyDeviceToDevice;
    const int want_d = to_dev ? 1 : k == cudaMemcpyDefault ? dk : 0;
    const int want_s = from_dev ? 1 : k == cudaMemcpyDefault ? sk : 0;
    const char *why = nullptr;
    const void *bad = nullptr;
    if (dk != want_d)
        why = "destination", bad = dst;
    else if (sk != want_s)
        why = "source", bad = src;
    if (why) {
        const int got = why[0] == 'd' ? dk : sk, want = why[0] == 'd' ? want_d : want_s;
        fprintf(stderr, "cuda_emu: %s(%p, %p, %zu, %s): the %s %p is %s, but the kind says %s memory\n", fn, dst, src,
                n, fg_emu_kind_name(k), why, bad,
                got == 1   ? "device memory"
                : got == 0 ? "host memory"
                           : "in the device range but in no live allocation",
                want ? "device" : "host");
        return cudaErrorInvalidValue;
    }
    char what[160];
    snprintf(what, sizeof what, "%s(..., %s): the destination", fn, fg_emu_kind_name(k));
    if (want_d && !fg_emu_dev_check(dst, n, what)) return cudaErrorInvalidValue;
    snprintf(what, sizeof what, "%s(..., %s): the source", fn, fg_emu_kind_name(k));
    if (want_s && !fg_emu_dev_check(src, n, what)) return cudaErrorInvalidValue;
    return cudaSuccess;
}
inline cudaError_t fg_emu_copy(const char *fn, void *d, const void *s, size_t n, cudaMemcpyKind k, bool sync) {
    if (n == 0) return cudaSuccess;
    cudaError_t e = fg_emu_copy_check(fn, d, s, n, k);
    if (e != cudaSuccess) return fg_emu_err(e);
    const bool to_host = fg_emu_dev_find(d, nullptr, nullptr) == 0;
    const bool from_dev = fg_emu_dev_find(s, nullptr, nullptr) == 1;
    fg_emu_device_scope scope;
    if (to_host && from_dev && !sync) { /* in stream order now, in host memory at the next sync */
        const unsigned char *b = (const unsigned char *)s;
        fg_emu_pending().push_back({d, std::vector<unsigned char>(b, b + n)});
        memset(d, 0xff, n);
        return cudaSuccess;
    }
    if (sync) fg_emu_deliver();
    memmove(d, s, n);
    return cudaSuccess;
}
/* pinned host memory: plain host memory here (copies from it are as asynchronous as any) */
inline cudaError_t cudaMallocHost(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : fg_emu_err(cudaErrorMemoryAllocation);
}
inline cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t = nullptr) {
    return fg_emu_copy("cudaMemcpyAsync", d, s, n, k, false);
}
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) {
    return fg_emu_copy("cudaMemcpy", d, s, n, k, true);
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t = nullptr) {
    if (n == 0) return cudaSuccess;
    if (!fg_emu_dev_check(p, n, "cudaMemsetAsync")) return fg_emu_err(cudaErrorInvalidValue);
    fg_emu_device_scope scope;
    memset(p, v, n);
    return cudaSuccess;
}

/* dynamic shared memory allowed per kernel (cudaFuncSetAttribute) */
inline std::map<const void *, int> &fg_emu_smem_allowed() {
    static auto *m = new std::map<const void *, int>;
    return *m;
}
inline cudaError_t cudaFuncSetAttribute(const void *f, cudaFuncAttribute a, int v) {
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || v > FG_EMU_SMEM_LIMIT)
        return fg_emu_err(cudaErrorInvalidValue);
    fg_emu_smem_allowed()[f] = v;
    return cudaSuccess;
}

/* kernel<<<grid, block, smem, stream>>>(args...) becomes fg_emu_kernel_call(grid, block, smem,
 * stream, kernel, args...) (tests/cuda/emu/rewrite_launches.py) */
template <typename G, typename B, typename... KArgs, typename... Args>
void fg_emu_kernel_call(G grid_, B block_, size_t smem, cudaStream_t, void (*kernel)(KArgs...), Args... args) {
    dim3 grid(grid_), block(block_);
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 || block.y != 1 || block.z != 1 ||
        block.x == 0 || block.x > 1024) {
        fg_emu_err(cudaErrorInvalidConfiguration);
        return;
    }
    if (smem > 48 * 1024) {
        auto it = fg_emu_smem_allowed().find((const void *)kernel);
        if (it == fg_emu_smem_allowed().end() || (size_t)it->second < smem) {
            fg_emu_err(cudaErrorInvalidValue); /* launch fails: the kernel was not allowed that much */
            return;
        }
    }
    fg_emu_launch({grid.x, grid.y, grid.z}, block.x, smem, kernel, ((KArgs)args)...);
}

#endif /* FG_EMU_CUDA_RUNTIME_H */
