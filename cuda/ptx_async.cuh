/* ptx_async.cuh — asynchronous global-to-shared copies (PTX cp.async, sm_80 and later) as small
 * device functions, so kernels can fetch the next tile while they compute on the current one.
 * Internal to cuda/ (C++).
 *
 *   fg_cp_async(dst, src, full)   queue a copy of BYTES (4, 8 or 16) bytes from global src to
 *                                 shared dst, both BYTES-aligned; full = false: dst gets zeros and
 *                                 src is not read (it must still be an address of the allocation)
 *   fg_cp_async_commit()          close this thread's open copies into one group
 *   fg_cp_async_wait<N>()         wait until at most the N most recent groups of this thread are
 *                                 still in flight (N = 0: all of them have landed)
 *
 * Groups are per thread: after the wait a thread sees its own copies; other threads see them only
 * after a __syncthreads that follows the wait. A shared word must not be read, by anyone, between
 * the copy's issue and that barrier, nor written by anyone else.
 *
 * Device code compiled for sm_80+ uses cp.async (16-byte copies bypass L1: .cg; smaller ones: .ca,
 * which is the only form for 4 and 8 bytes); older architectures copy synchronously (a plain load
 * and store; commit and wait do nothing), which satisfies the same contract. Under the emulator
 * (FG_CUDA_EMU, tests/cuda/emu/emu_async.cpp) a copy lands only at the wait that covers it: until
 * then its destination holds NaN bytes, and a read or write of it by any thread is reported.
 */
#ifndef FG_PTX_ASYNC_CUH
#define FG_PTX_ASYNC_CUH

#include <stdint.h>

#ifdef FG_CUDA_EMU
/* the emulator's side (tests/cuda/emu/emu_async.cpp) */
void fg_emu_cp_async(void *dst, const void *src, unsigned bytes, int full);
void fg_emu_cp_async_commit();
void fg_emu_cp_async_wait(int n);

template <int BYTES> __device__ __forceinline__ void fg_cp_async(void *dst, const void *src, bool full) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
    fg_emu_cp_async(dst, src, BYTES, full);
}
__device__ __forceinline__ void fg_cp_async_commit() { fg_emu_cp_async_commit(); }
template <int N> __device__ __forceinline__ void fg_cp_async_wait() { fg_emu_cp_async_wait(N); }

#else

template <int BYTES> __device__ __forceinline__ void fg_cp_async(void *dst, const void *src, bool full) {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    const int src_bytes = full ? BYTES : 0; /* the rest of the BYTES is filled with zeros */
    if (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(src_bytes) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(s), "l"(src), "n"(BYTES), "r"(src_bytes)
                     : "memory");
#else
    /* synchronous: the same contract, without the overlap */
    if (BYTES == 16) {
        *(int4 *)dst = full ? *(const int4 *)src : make_int4(0, 0, 0, 0);
    } else if (BYTES == 8) {
        *(int2 *)dst = full ? *(const int2 *)src : make_int2(0, 0);
    } else {
        *(int *)dst = full ? *(const int *)src : 0;
    }
#endif
}
__device__ __forceinline__ void fg_cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N> __device__ __forceinline__ void fg_cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
#endif /* FG_CUDA_EMU */

#endif /* FG_PTX_ASYNC_CUH */
