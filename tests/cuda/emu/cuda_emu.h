/* cuda_emu.h — a small CPU emulator for CUDA kernels, so the real kernel source of
 * cuda/attention_kernels.cuh can be run and checked on a machine without a GPU (`make cuda-emu`).
 *
 * Model: a launch runs its blocks one after another; a block's threads are cooperative fibers
 * (ucontext) on one OS thread. __syncthreads() is a barrier over the block, __shfl_xor_sync a
 * write-barrier-read-barrier exchange over the warp (32 consecutive threads; a source lane past a
 * partial last warp is not modelled), so kernels that rely
 * on those orderings behave as on the GPU, and one that forgets a barrier or diverges around one
 * either reads stale data (caught by the comparisons) or deadlocks (caught here: the scheduler
 * aborts when a full round makes no progress). Shared memory starts filled with NaN bytes (0xff),
 * so a read of a shared location no thread wrote poisons the result; writes past the block's
 * shared memory hit a guard zone that is checked after every block. The shared-memory size is
 * checked against Hopper's per-block limit (227 KB).
 *
 * Not modelled: concurrency between blocks (kernels here never communicate across blocks), the
 * memory model beyond barriers, timing. Define FG_CUDA_EMU before including any kernel header —
 * this header does — and include it first.
 */
#ifndef FG_CUDA_EMU_H
#define FG_CUDA_EMU_H

#define FG_CUDA_EMU 1

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* a kernel's static shared array: one object per instantiation, which all fibers of the running
 * block share (blocks run one at a time) */
#define __shared__ static

struct fg_emu_dim3 {
    unsigned x, y, z;
};

struct fg_emu_fiber {
    ucontext_t ctx;
    fg_emu_dim3 tid;
    int done;
    char *stack;
};

struct fg_emu_block {
    fg_emu_dim3 bidx, gdim, bdim;
    int nthreads;
    std::vector<fg_emu_fiber> fibers;
    ucontext_t sched;
    int bar_count;
    unsigned bar_gen;
    int warp_count[32];
    unsigned warp_gen[32];
    uint64_t slot[1024];
    unsigned char *smem;
    uint64_t progress;
    const std::function<void()> *body;
};

inline fg_emu_block *fg_emu_blk;
inline fg_emu_fiber *fg_emu_cur;

#define threadIdx (fg_emu_cur->tid)
#define blockIdx (fg_emu_blk->bidx)
#define gridDim (fg_emu_blk->gdim)
#define blockDim (fg_emu_blk->bdim)
#define FG_DYN_SMEM(name) unsigned char *name = fg_emu_blk->smem

inline void fg_emu_yield() { swapcontext(&fg_emu_cur->ctx, &fg_emu_blk->sched); }

inline void __syncthreads() {
    fg_emu_block *b = fg_emu_blk;
    unsigned gen = b->bar_gen;
    b->progress++;
    if (++b->bar_count == b->nthreads) {
        b->bar_count = 0;
        b->bar_gen++;
        return;
    }
    while (b->bar_gen == gen) fg_emu_yield();
}

inline void fg_emu_warp_barrier() {
    fg_emu_block *b = fg_emu_blk;
    unsigned w = threadIdx.x / 32;
    unsigned gen = b->warp_gen[w];
    b->progress++;
    const int size = b->nthreads - (int)w * 32 < 32 ? b->nthreads - (int)w * 32 : 32; /* a last, partial warp */
    if (++b->warp_count[w] == size) {
        b->warp_count[w] = 0;
        b->warp_gen[w]++;
        return;
    }
    while (b->warp_gen[w] == gen) fg_emu_yield();
}

/* CUDA semantics: lane ^ laneMask, and a source lane outside the caller's width-segment returns
 * the caller's own value. Every lane of the warp must call it (all of ours do: mask 0xffffffff). */
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32) {
    if (mask != 0xffffffffu) {
        fprintf(stderr, "cuda_emu: __shfl_xor_sync with a partial mask is not modelled\n");
        abort();
    }
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a type wider than 8 bytes");
    const unsigned t = threadIdx.x, lane = t & 31u, base = t & ~31u;
    memcpy(&fg_emu_blk->slot[t], &v, sizeof(T));
    fg_emu_warp_barrier();
    unsigned src = lane ^ (unsigned)laneMask;
    if (src / (unsigned)width != lane / (unsigned)width) src = lane;
    T r;
    memcpy(&r, &fg_emu_blk->slot[base + src], sizeof(T));
    fg_emu_warp_barrier();
    return r;
}

#define FG_EMU_SMEM_LIMIT 232448 /* Hopper's opt-in shared memory per block (227 KB) */
#define FG_EMU_GUARD 4096

inline void fg_emu_trampoline() {
    (*fg_emu_blk->body)();
    fg_emu_cur->done = 1;
}

/* Run one block to completion: its threads as fibers, round-robin, until all have returned. */
__attribute__((noinline)) inline void fg_emu_run_block(fg_emu_block &blk, unsigned threads, size_t smem) {
    static std::vector<char *> stacks;
    const size_t stack_bytes = 256 * 1024;
    while (stacks.size() < threads) stacks.push_back((char *)malloc(stack_bytes));
    blk.bar_count = 0;
    blk.bar_gen = 0;
    memset(blk.warp_count, 0, sizeof blk.warp_count);
    memset(blk.warp_gen, 0, sizeof blk.warp_gen);
    memset(blk.smem, 0xff, smem); /* NaN bytes: unwritten shared memory poisons results */
    memset(blk.smem + smem, 0xa5, FG_EMU_GUARD);
    blk.progress = 0;
    fg_emu_blk = &blk;
    for (unsigned t = 0; t < threads; t++) {
        fg_emu_fiber &f = blk.fibers[t];
        f.tid = {t, 0, 0};
        f.done = 0;
        f.stack = stacks[t];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack;
        f.ctx.uc_stack.ss_size = stack_bytes;
        f.ctx.uc_link = &blk.sched;
        makecontext(&f.ctx, fg_emu_trampoline, 0);
    }
    unsigned remaining = threads;
    while (remaining) {
        uint64_t p0 = blk.progress;
        for (unsigned t = 0; t < threads; t++) {
            fg_emu_fiber &f = blk.fibers[t];
            if (f.done) continue;
            fg_emu_cur = &f;
            swapcontext(&blk.sched, &f.ctx);
            if (f.done) {
                remaining--;
                blk.progress++;
            }
        }
        if (remaining && blk.progress == p0) {
            fprintf(stderr, "cuda_emu: deadlock in block (%u, %u, %u): %u threads wait at a barrier that not every "
                            "thread reaches\n", blk.bidx.x, blk.bidx.y, blk.bidx.z, remaining);
            abort();
        }
    }
    if (blk.bar_count != 0) {
        fprintf(stderr, "cuda_emu: block (%u, %u, %u) ended with %d threads inside a barrier\n", blk.bidx.x,
                blk.bidx.y, blk.bidx.z, blk.bar_count);
        abort();
    }
    for (size_t i = 0; i < FG_EMU_GUARD; i++)
        if (blk.smem[smem + i] != 0xa5) {
            fprintf(stderr, "cuda_emu: block (%u, %u, %u) wrote shared memory byte %zu past its %zu bytes\n",
                    blk.bidx.x, blk.bidx.y, blk.bidx.z, i, smem);
            abort();
        }
    fg_emu_blk = nullptr;
    fg_emu_cur = nullptr;
}

/* Run kernel(args...) on grid × threads with `smem` bytes of dynamic shared memory. */
template <typename... KArgs, typename... Args>
void fg_emu_launch(fg_emu_dim3 grid, unsigned threads, size_t smem, void (*kernel)(KArgs...), Args... args) {
    if (threads == 0 || threads > 1024) {
        fprintf(stderr, "cuda_emu: %u threads per block (need 1 to 1024)\n", threads);
        abort();
    }
    if (smem > FG_EMU_SMEM_LIMIT) {
        fprintf(stderr, "cuda_emu: %zu bytes of shared memory per block exceed Hopper's %d\n", smem, FG_EMU_SMEM_LIMIT);
        abort();
    }
    std::function<void()> body = [&]() { kernel(args...); };
    fg_emu_block blk;
    blk.gdim = grid;
    blk.bdim = {threads, 1, 1};
    blk.nthreads = (int)threads;
    blk.fibers.resize(threads);
    blk.body = &body;
    std::vector<unsigned char> smem_buf(smem + FG_EMU_GUARD);
    blk.smem = smem_buf.data();
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blk.bidx = {x, y, z};
                fg_emu_run_block(blk, threads, smem);
            }
}

#endif /* FG_CUDA_EMU_H */
