/* cuda_runtime.h (emulator) — the part of the CUDA runtime API flashgrad's host code uses, on the
 * CPU: "device" memory is host memory from malloc (filled with NaN bytes, as real device memory is
 * garbage), copies are memcpy, streams are synchronous, and launches (rewritten from <<<...>>> by
 * tests/cuda/emu/rewrite_launches.py) run through cuda_emu.h. Launch errors are checked as the
 * GPU checks them: an empty or oversized grid, too many threads, dynamic shared memory above 48 KB
 * without cudaFuncSetAttribute, or above the device's opt-in limit, fail with the real error code
 * and are reported by cudaGetLastError. Only for tests/cuda/emu (`make cuda-emu`).
 */
#ifndef FG_EMU_CUDA_RUNTIME_H
#define FG_EMU_CUDA_RUNTIME_H

#include <map>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cuda/emu/cuda_emu.h"

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorCudartUnloading = 4,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevice = 101,
    cudaErrorContextIsDestroyed = 709,
} cudaError_t;

enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
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
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    default: return "cudaErrorUnknown";
    }
}
inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    default: return "unknown error";
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
    if (a != cudaDevAttrMaxSharedMemoryPerBlockOptin) return fg_emu_err(cudaErrorInvalidValue);
    *v = FG_EMU_SMEM_LIMIT;
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
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

/* allocations: malloc'd, poisoned; a table catches frees of unknown pointers */
/* never destroyed: the caching allocator frees its blocks from an exit-time destructor */
inline std::map<void *, size_t> &fg_emu_allocs() {
    static auto *m = new std::map<void *, size_t>;
    return *m;
}
inline cudaError_t cudaMalloc(void **p, size_t n) {
    *p = malloc(n ? n : 1);
    if (!*p) return fg_emu_err(cudaErrorMemoryAllocation);
    memset(*p, 0xff, n);
    fg_emu_allocs()[*p] = n;
    return cudaSuccess;
}
template <typename T> inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
inline cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess; /* cudaFree(0) initializes the context */
    auto it = fg_emu_allocs().find(p);
    if (it == fg_emu_allocs().end()) return fg_emu_err(cudaErrorInvalidValue);
    fg_emu_allocs().erase(it);
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t = nullptr) {
    memset(p, v, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t = nullptr) {
    if (n) memmove(d, s, n);
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
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535 || block.y != 1 ||
        block.z != 1 || block.x == 0 || block.x > 1024) {
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
