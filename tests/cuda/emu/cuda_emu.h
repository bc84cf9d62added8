/* cuda_emu.h — a CPU emulator for CUDA kernels that hunts the bugs a GPU would hide, so the real
 * kernel source of cuda/ can be run and checked on a machine without a GPU (`make cuda-emu`).
 * Include it first (the Makefile passes -include); it defines FG_CUDA_EMU. The runtime behind it
 * is tests/cuda/emu/emu_runtime.cpp; the fake CUDA runtime, cuBLAS and cuRAND are in include/.
 *
 * Execution: a launch runs its blocks one after another; a block's threads are fibers on one OS
 * thread, each running until it blocks at __syncthreads or a warp intrinsic. Between barriers the
 * threads run in an order given by the schedule, and every block runs under FG_EMU_SCHEDULES
 * schedules (default 3): thread-id order, reversed, then seeded random orders (FG_EMU_SEED, a new
 * permutation in every barrier interval). The global memory a block wrote is rolled back between
 * schedules, and what the schedules leave must agree byte for byte. Blocks run in grid order,
 * reversed or shuffled (by launch) when more than one schedule is asked for.
 *
 * Checks (each one aborts the program with a message naming the kernel, block, threads, byte
 * offset and source lines):
 *  - shared-memory races (CUDA racecheck semantics): a 4-byte word of static or dynamic shared
 *    memory written by one thread and read or written by another in the same barrier interval;
 *  - reads of shared memory no thread of the block has written (static and dynamic);
 *  - shared-memory accesses past the launch's dynamic size;
 *  - misaligned accesses: every access the compiler makes with a size of 2, 4, 8 or 16 bytes must
 *    be aligned to that size (a float4 or double2 load through a cast pointer included);
 *  - kernel accesses to host memory (anything but device allocations, the thread's own stack,
 *    shared memory, kernel parameters and the program's static data);
 *  - warp intrinsics: every lane named in the mask must arrive, the mask must name the caller and
 *    only lanes that exist, lanes meeting at a rendezvous must agree on it, a shuffle's source
 *    lane must be in the mask;
 *  - barriers that not every thread reaches, and threads that return while others wait;
 *  - results that depend on the thread schedule (races on global memory within a block);
 *  - launch limits: threads per block, dynamic shared memory (Hopper's 227 KB), parameter bytes.
 * Every memory access of emulated code is seen because that code is compiled with GCC's
 * -fsanitize=thread instrumentation, whose __tsan_* hooks the runtime implements itself (no TSan
 * runtime is linked). Static __shared__ variables are thread_local, so they live in the main
 * thread's TLS block, which the runtime treats as the block's static shared memory.
 *
 *  - warp-collective tensor-core instructions (mma.sync m16n8k16 bf16, ldmatrix; emu_mma.h): all
 *    32 lanes must arrive, with the same instruction and shape; ldmatrix rows must be 16-byte
 *    aligned shared memory the block has written;
 * Not modelled: concurrency between blocks, the memory model beyond barriers, timing, device math
 * (the CPU's libm, no FMA contraction differences), atomics, __syncwarp.
 */
#ifndef FG_CUDA_EMU_H
#define FG_CUDA_EMU_H

#define FG_CUDA_EMU 1

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <new>
#include <tuple>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
/* static shared memory: one object per variable in the main thread's TLS block, which all fibers
 * of the running block share (blocks run one at a time) and the runtime tracks as shared memory */
#define __shared__ static thread_local

struct fg_emu_dim3 {
    unsigned x, y, z;
};

/* what kernel code reads of its thread and launch (the runtime owns both) */
struct fg_emu_thread {
    fg_emu_dim3 tid;
};
struct fg_emu_launch_state {
    fg_emu_dim3 bidx, gdim, bdim;
    unsigned char *smem; /* the block's dynamic shared memory */
};
extern fg_emu_thread *fg_emu_cur;
extern fg_emu_launch_state fg_emu_ls;

#define threadIdx (fg_emu_cur->tid)
#define blockIdx (fg_emu_ls.bidx)
#define gridDim (fg_emu_ls.gdim)
#define blockDim (fg_emu_ls.bdim)
#define warpSize 32
#define FG_DYN_SMEM(name) unsigned char *name = fg_emu_ls.smem

/* ---- CUDA's vector types (vector_types.h), aligned as on the device ---- */
#define FG_EMU_VEC2(T, N, A)                                                                                           \
    struct __align__(A) N##2 {                                                                                         \
        T x, y;                                                                                                        \
    };                                                                                                                 \
    static inline N##2 make_##N##2(T x, T y) { return N##2 {x, y}; }
#define FG_EMU_VEC4(T, N, A)                                                                                           \
    struct __align__(A) N##4 {                                                                                         \
        T x, y, z, w;                                                                                                  \
    };                                                                                                                 \
    static inline N##4 make_##N##4(T x, T y, T z, T w) { return N##4 {x, y, z, w}; }
FG_EMU_VEC2(float, float, 8)
FG_EMU_VEC4(float, float, 16)
FG_EMU_VEC2(double, double, 16)
FG_EMU_VEC2(int, int, 8)
FG_EMU_VEC4(int, int, 16)
FG_EMU_VEC2(unsigned, uint, 8)
FG_EMU_VEC4(unsigned, uint, 16)
#undef FG_EMU_VEC2
#undef FG_EMU_VEC4

/* ---- barriers and warp intrinsics (the runtime; each blocks the calling fiber) ---- */
void __syncthreads();
enum {
    FG_EMU_SHFL_IDX,
    FG_EMU_SHFL_UP,
    FG_EMU_SHFL_DOWN,
    FG_EMU_SHFL_XOR,
    FG_EMU_BALLOT,
    FG_EMU_ANY,
    FG_EMU_ALL,
    FG_EMU_COLLECTIVE /* fg_emu_warp_collective */
};
/* One warp rendezvous of the lanes in `mask`: shuffles return the source lane's `v`, votes the
 * vote over the lanes' `v` (0 or 1). */
uint64_t fg_emu_warp_op(int op, unsigned mask, uint64_t v, int arg, int width);

template <typename T> static inline uint64_t fg_emu_bits(T v) {
    static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable<T>::value,
                  "warp shuffle of a type wider than 8 bytes");
    uint64_t b = 0;
    memcpy(&b, &v, sizeof v);
    return b;
}
template <typename T> static inline T fg_emu_unbits(uint64_t b) {
    T v;
    memcpy(&v, &b, sizeof v);
    return v;
}
template <typename T> inline T __shfl_sync(unsigned mask, T v, int srcLane, int width = 32) {
    return fg_emu_unbits<T>(fg_emu_warp_op(FG_EMU_SHFL_IDX, mask, fg_emu_bits(v), srcLane, width));
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return fg_emu_unbits<T>(fg_emu_warp_op(FG_EMU_SHFL_UP, mask, fg_emu_bits(v), (int)delta, width));
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return fg_emu_unbits<T>(fg_emu_warp_op(FG_EMU_SHFL_DOWN, mask, fg_emu_bits(v), (int)delta, width));
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32) {
    return fg_emu_unbits<T>(fg_emu_warp_op(FG_EMU_SHFL_XOR, mask, fg_emu_bits(v), laneMask, width));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)fg_emu_warp_op(FG_EMU_BALLOT, mask, pred != 0, 0, 32);
}
inline int __any_sync(unsigned mask, int pred) { return (int)fg_emu_warp_op(FG_EMU_ANY, mask, pred != 0, 0, 32); }
inline int __all_sync(unsigned mask, int pred) { return (int)fg_emu_warp_op(FG_EMU_ALL, mask, pred != 0, 0, 32); }

/* ---- warp-collective instructions (mma.sync, ldmatrix: tests/cuda/emu/emu_mma.h) ----
 * All 32 lanes of the warp meet (the .aligned instructions); each brings `lane`, its operands and
 * room for its results (on its own stack), and `shape`, a string naming the instruction and its
 * shape that every lane must bring alike (else the launch stops with both). When the last lane
 * arrives, fn(lanes) runs once over all of them, lanes[l] being lane l's. A lane that never comes
 * is a deadlock, reported like a shuffle's. */
typedef void (*fg_emu_collective_fn)(void *const lanes[32]);
void fg_emu_warp_collective(const char *shape, fg_emu_collective_fn fn, void *lane);
/* Inside a launch: report a problem of the running kernel (the launch stops at the end of the block). */
void fg_emu_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* [p, p + n) lies in the running block's shared memory (dynamic, within the launch's size, or static). */
bool fg_emu_in_shared(const void *p, size_t n);
#include "tests/cuda/emu/emu_mma.h"

/* ---- launches ---- */
#define FG_EMU_SMEM_LIMIT 232448 /* Hopper's opt-in shared memory per block (227 KB) */
#define FG_EMU_PARAM_LIMIT 32764 /* kernel parameter bytes (CUDA 12.1+, sm_70+) */
/* kernel arguments live here during a launch (the kernel's parameter space) */
extern unsigned char fg_emu_param_space[];

/* Run `body` (which calls the kernel on the arguments in fg_emu_param_space) on grid × threads
 * with `smem` bytes of dynamic shared memory; `kernel` names the kernel in reports. */
void fg_emu_run_grid(fg_emu_dim3 grid, unsigned threads, size_t smem, const void *kernel, void (*body)(),
                     size_t param_bytes);

template <typename... KArgs> struct fg_emu_params {
    void (*kernel)(KArgs...);
    std::tuple<std::decay_t<KArgs>...> args;
};
template <typename... KArgs> void fg_emu_body() {
    auto *p = std::launder(reinterpret_cast<fg_emu_params<KArgs...> *>(fg_emu_param_space));
    std::apply(p->kernel, p->args);
}
/* Run kernel(args...) on grid × threads with `smem` bytes of dynamic shared memory. */
template <typename... KArgs, typename... Args>
void fg_emu_launch(fg_emu_dim3 grid, unsigned threads, size_t smem, void (*kernel)(KArgs...), Args... args) {
    using P = fg_emu_params<KArgs...>;
    static_assert(sizeof(P) <= FG_EMU_PARAM_LIMIT + 64, "kernel parameters exceed CUDA's 32764 bytes");
    P *p = new (fg_emu_param_space) P{kernel, std::tuple<std::decay_t<KArgs>...>(((KArgs)args)...)};
    fg_emu_run_grid(grid, threads, smem, reinterpret_cast<const void *>(kernel), &fg_emu_body<KArgs...>,
                    sizeof(p->args));
    p->~P();
}

/* ---- device memory (for the fake runtime in include/) ----
 * Device allocations come from their own reserved address range, one guard page after each
 * (allocations end 256-byte aligned just before it), and are PROT_NONE except while the device
 * works on them (launches, copies, cuBLAS, cuRAND: fg_emu_device_scope). Host code that touches
 * them faults, and the fault is reported as a host dereference of a device pointer. */
void *fg_emu_dev_malloc(size_t n); /* NULL: out of (emulated) device memory */
int fg_emu_dev_free(void *p);      /* 0, or -1 when p is not a live allocation */
/* 1: p is inside a live device allocation (its base and size are returned), 0: p is host memory,
 * -1: p is in the device range but in no live allocation (freed, or out of bounds) */
int fg_emu_dev_find(const void *p, uintptr_t *base, size_t *size);
/* [p, p + n) inside one live device allocation; otherwise prints why ("cuda_emu: <what>: ...")
 * and returns false */
bool fg_emu_dev_check(const void *p, size_t n, const char *what);
void fg_emu_dev_enter(void);
void fg_emu_dev_exit(void);
struct fg_emu_device_scope {
    fg_emu_device_scope() { fg_emu_dev_enter(); }
    ~fg_emu_device_scope() { fg_emu_dev_exit(); }
    fg_emu_device_scope(const fg_emu_device_scope &) = delete;
    fg_emu_device_scope &operator=(const fg_emu_device_scope &) = delete;
};
/* Prints "cuda_emu: <message>" and the host call stack, then aborts. */
[[noreturn]] void fg_emu_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* FG_CUDA_EMU_H */
