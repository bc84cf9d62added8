/* attention_bf16.cuh — bf16 flash attention on tensor cores (mma.sync m16n8k16, cuda/ptx_mma.cuh),
 * float32 accumulation. Internal to cuda/ (C++). Like attention_kernels.cuh it uses nothing from
 * the CUDA runtime, so the CPU emulator of tests/cuda/emu/ runs this very source, tensor-core
 * instructions included (tests/cuda/emu/attn_bf16_emu.cpp checks it against the bf16 mirror).
 *
 * Legend: B batch, H heads, H_kv K/V heads (G = H / H_kv), Nq queries, Nk keys, d head dim (a
 * multiple of 8, at most D, the compile-time width 64 or 128; columns d..D−1 are zero in shared
 * memory and never stored).
 *   q (B, H, Nq, d), k, v (B, H_kv, Nk, d): bf16 (uint16_t bits);  o (B, H, Nq, d): float32;
 *   lse (B, H, Nq): float32 — saved for the backward: o, lse.
 * The score of (b, h, i, j) is ops/attention.h's steps 1, 5, 6: s = scale · q_i·k_j (K/V head
 * h / G), −inf outside causal ∧ window (bottom-right, fg_attn_row_range), softmax, dropout with
 * fg_attn_keep's bits (query head h), · V. Softcap and ALiBi are not here.
 *
 * Shared tiles: bf16 rows of 16-byte chunks, XOR-swizzled by row (chunk c of row r at c ^ (r % 8)),
 * so the 8 rows an ldmatrix phase reads at one logical chunk fall in 8 different bank groups, and
 * filled by 16-byte cp.async (cuda/ptx_async.cuh) two stages deep: the tile after the current one
 * is in flight while the current one is used (fetched right after the barrier that follows the
 * current tile's wait, into the stage everyone finished reading before that barrier).
 *
 * ---- forward: one block of 4 warps per (query tile of 64 rows, h, b); warp w owns rows 16w..16w+15
 *   Q tile → shared memory (in stage 1, free until the loop's first prefetch) → A fragments in
 *   registers for the whole block (ldmatrix.x4), while K/V tile 0 is in flight to stage 0;
 *   for each key tile of 64 keys the tile's rows can see:
 *     wait for K, V tile kt (stage kt % 2); fetch tile kt + 1 into the other stage
 *     S  = Q Kᵀ                     (mma; K rows are B's columns: ldmatrix.x4 without .trans)
 *     x  = scale · S, −inf where not visible
 *     m' = max(m, rowmax x);  P = exp(x − m');  l = exp(m − m') l + rowsum P    (float32)
 *     O  = exp(m − m') O + bf16(dropout(P)) V  (P stays in registers: the accumulator pairs of S
 *                  are the A fragments of P·V, packed by cvt.rn.bf16x2; V by ldmatrix.x4.trans)
 *   then O /= l, lse = m + log l (float64, rounded once). A row that sees no key: O = 0,
 *   lse = −inf; a NaN score makes the row NaN (as the float kernels).
 * Each thread holds rows g and g + 8 of its warp's 16 (g = lane / 4) and, per 8 keys, keys 2t and
 * 2t + 1 (t = lane % 4): a row's max and sum are shuffles among the 4 lanes of the group, and
 * dropout's Philox block (4 consecutive keys) serves a thread's two keys with one call.
 */
#ifndef FG_ATTENTION_BF16_CUH
#define FG_ATTENTION_BF16_CUH

#include <math.h>
#include <stdint.h>

#include "cuda/ptx_async.cuh"
#include "cuda/ptx_mma.cuh"
#include "ops/shared/attn_tiles.h"
#include "ops/shared/attn_variant.h"
#include "tensor/philox.h"

#if !defined(FG_CUDA_EMU) && !defined(FG_DYN_SMEM)
#define FG_DYN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

/* Kernel arguments. */
struct fa16_args {
    const uint16_t *q, *k, *v, *dout; /* bf16 */
    float *o, *lse;                   /* the forward's outputs, the backward's inputs */
    const float *Drow;                /* (B, H, Nq): kernel 1's output */
    float *dq, *dk, *dv;              /* added into */
    int64_t B, H, Nq, Nk;
    int64_t Hkv, G; /* query head h reads K/V head h / G */
    int d;
    float scale;
    int causal, window; /* window: keys i' − wl .. i' + wr (a negative side is unbounded) */
    int64_t wl, wr;
    uint64_t seed;
    uint32_t thr;   /* fg_dropout_threshold(p); 0 = no dropout */
    float inv_keep; /* 1 / (1 − p) */
};

enum { FA16_BQ = 64, FA16_BK = 64, FA16_THREADS = 128 };

/* dynamic shared memory of the forward: two stages of a K and a V tile, 64 rows × D bf16 each
 * (the Q tile lies in stage 1 until its fragments are in registers) */
template <int D> static inline size_t fa16_fwd_smem() { return (size_t)2 * 2 * FA16_BK * D * sizeof(uint16_t); }

/* offset of element (r, c) in a swizzled tile of D-element rows: 16-byte chunk c / 8 of row r
 * sits at chunk (c / 8) ^ (r % 8) (D ≥ 64: 8 chunks or more per row) */
template <int D> __device__ __forceinline__ int fa16_swz(int r, int c) {
    return r * D + (((c >> 3) ^ (r & 7)) << 3) + (c & 7);
}

/* Queue the copies of rows [r0, r0 + ROWS) of a (nrows, d) bf16 matrix into a swizzled tile: one
 * 16-byte cp.async per chunk (cuda/ptx_async.cuh; g 16-byte aligned, d a multiple of 8), zeros past
 * nrows and past d (their unread source is g itself, inside the allocation). Consecutive threads
 * take consecutive chunks of a row, which the swizzle permutes: the stores meet no bank twice.
 * The caller commits, waits and synchronizes. */
template <int D, int ROWS>
__device__ __forceinline__ void fa16_load_tile(uint16_t *S, const uint16_t *g, int64_t r0, int64_t nrows, int d) {
    constexpr int CH = D / 8;
    static_assert(ROWS * CH % FA16_THREADS == 0, "every thread copies the same number of chunks");
#pragma unroll
    for (int e0 = 0; e0 < ROWS * CH; e0 += FA16_THREADS) {
        const int e = e0 + (int)threadIdx.x, r = e / CH, ch = e % CH;
        const int64_t gr = r0 + r;
        const bool in = gr < nrows && ch * 8 < d;
        fg_cp_async<16>(S + fa16_swz<D>(r, ch * 8), in ? g + gr * d + ch * 8 : g, in);
    }
}

/* The tile about to be used is in place for everyone: this thread waits for its own copies (every
 * group it issued), then the barrier makes everyone's visible — and marks the other stage, read
 * before it, as free for the next fetch. A test (tests/cuda/emu/attn_bf16_emu.cpp) compiles
 * copies of these kernels with one kernel's wait, or its barrier, defined away, which the
 * emulator must report. */
#ifndef FA16_TILES_READY
#define FA16_TILES_READY(kernel)                                                                                       \
    do {                                                                                                               \
        fg_cp_async_wait<0>();                                                                                         \
        __syncthreads();                                                                                               \
    } while (0)
#endif

template <int D> __global__ void __launch_bounds__(FA16_THREADS) fa16_fwd_kernel(fa16_args a) {
    constexpr int BQ = FA16_BQ, BK = FA16_BK, KD = D / 16, NT = BK / 8, DT = D / 8;
    FG_DYN_SMEM(smem_raw);
    /* stage s: K at KVs + s·2·BK·D, V after it; Q in stage 1's K until the loop first writes it */
    uint16_t *KVs = (uint16_t *)smem_raw, *Qs = KVs + 2 * BK * D;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t qt = (int64_t)gridDim.x - 1 - blockIdx.x; /* causal: the longest rows first */
    const int64_t h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h, bg = b * a.Hkv + h / a.G;
    const int64_t Nq = a.Nq, Nk = a.Nk, i0 = qt * BQ;
    const int d = a.d;
    const uint16_t *q = a.q + bh * Nq * d, *k = a.k + bg * Nk * d, *v = a.v + bg * Nk * d;

    /* key tiles: from the first row's lo to the last row's hi (both grow with i) */
    int64_t lo_first, hi_first, lo_last, hi_last;
    fg_attn_row_range(i0, Nq, Nk, a.causal, a.window, a.wl, a.wr, &lo_first, &hi_first);
    fg_attn_row_range((i0 + BQ < Nq ? i0 + BQ : Nq) - 1, Nq, Nk, a.causal, a.window, a.wl, a.wr, &lo_last, &hi_last);
    const int64_t kt0 = lo_first / BK, kt1 = hi_last > lo_first ? fg_attn_ntiles(hi_last, BK) : kt0;

    /* group 1: Q; group 2: the first K, V tile (stage 0), in flight while Q's fragments load */
    fa16_load_tile<D, BQ>(Qs, q, i0, Nq, d);
    fg_cp_async_commit();
    if (kt0 < kt1) {
        fa16_load_tile<D, BK>(KVs, k, kt0 * BK, Nk, d);
        fa16_load_tile<D, BK>(KVs + BK * D, v, kt0 * BK, Nk, d);
    }
    fg_cp_async_commit();
    fg_cp_async_wait<1>(); /* this thread's Q copies have landed */
    __syncthreads();       /* everyone's have */
    /* the warp's 16 rows of Q as A fragments, one per 16 columns: matrices (rows 0-7 | 8-15) ×
     * (columns 0-7 | 8-15) given by lanes 0-7, 8-15, 16-23, 24-31 */
    uint32_t qf[KD][4];
#pragma unroll
    for (int kk = 0; kk < KD; kk++)
        fg_ldmatrix<4, false>(qf[kk], Qs + fa16_swz<D>(warp * 16 + (lane & 15), kk * 16 + (lane >> 4) * 8));

    /* this thread's rows i0 + 16w + g (r = 0) and + 8 (r = 1), the keys [lo, hi) each sees */
    int64_t lo[2], hi[2];
#pragma unroll
    for (int r = 0; r < 2; r++)
        fg_attn_row_range(i0 + warp * 16 + g + 8 * r, Nq, Nk, a.causal, a.window, a.wl, a.wr, &lo[r], &hi[r]);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}, acc[DT][4];
#pragma unroll
    for (int c = 0; c < DT; c++) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0;

    const uint32_t key[2] = {(uint32_t)a.seed, (uint32_t)(a.seed >> 32)};

    int stage = 0;
    for (int64_t kt = kt0; kt < kt1; kt++) { /* the same tiles for every thread of the block */
        const int64_t j0 = kt * BK;
        const uint16_t *Ks = KVs + stage * 2 * BK * D, *Vs = Ks + BK * D;
        FA16_TILES_READY(fwd); /* tile kt; the other stage (and Q) is no longer read */
        if (kt + 1 < kt1) {    /* fetch tile kt + 1 into the other stage while this one is used */
            uint16_t *Kn = KVs + (stage ^ 1) * 2 * BK * D;
            fa16_load_tile<D, BK>(Kn, k, j0 + BK, Nk, d);
            fa16_load_tile<D, BK>(Kn + BK * D, v, j0 + BK, Nk, d);
            fg_cp_async_commit();
        }

        /* S = Q Kᵀ: keys 16p..16p+15 as two B operands from one ldmatrix.x4 — matrices (keys
         * 0-7, columns 0-7), (keys 0-7, 8-15), (keys 8-15, 0-7), (keys 8-15, 8-15) */
        float s[NT][4];
#pragma unroll
        for (int c = 0; c < NT; c++) s[c][0] = s[c][1] = s[c][2] = s[c][3] = 0;
#pragma unroll
        for (int p = 0; p < BK / 16; p++)
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t kb[4];
                fg_ldmatrix<4, false>(
                    kb, Ks + fa16_swz<D>(16 * p + (lane >> 4) * 8 + (lane & 7), kk * 16 + ((lane >> 3) & 1) * 8));
                const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
                fg_mma_bf16_16816(s[2 * p], qf[kk], b0);
                fg_mma_bf16_16816(s[2 * p + 1], qf[kk], b1);
            }

        /* scale and mask; s[c][e] is row r = e / 2, key j0 + 8c + 2t + e % 2 */
        float mt[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int c = 0; c < NT; c++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                const int64_t j = j0 + 8 * c + 2 * t + (e & 1);
                float x = s[c][e] * a.scale;
                if (!(j >= lo[r] && j < hi[r])) x = -INFINITY;
                s[c][e] = x;
                mt[r] = x > mt[r] ? x : mt[r]; /* a NaN is not a max; it reaches l through P */
            }
        /* online softmax per row: the max over the group's 4 lanes, then weights and partial sums
         * (each lane keeps its own part of l; the 4 parts are added at the end) */
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float w = __shfl_xor_sync(0xffffffffu, mt[r], 1);
            mt[r] = w > mt[r] ? w : mt[r];
            w = __shfl_xor_sync(0xffffffffu, mt[r], 2);
            mt[r] = w > mt[r] ? w : mt[r];
            const float mnew = m[r] > mt[r] ? m[r] : mt[r];
            const float ms = mnew == -INFINITY ? 0.0f : mnew; /* nothing seen: exp(−inf − 0) = 0 */
            alpha[r] = expf(m[r] - ms);
            float rsum = 0;
#pragma unroll
            for (int c = 0; c < NT; c++)
#pragma unroll
                for (int e = 2 * r; e < 2 * r + 2; e++) {
                    s[c][e] = expf(s[c][e] - ms);
                    rsum += s[c][e];
                }
            l[r] = alpha[r] * l[r] + rsum; /* l keeps the full sum; dropout acts on the weights only */
            m[r] = mnew;
        }
#pragma unroll
        for (int c = 0; c < DT; c++) {
            acc[c][0] *= alpha[0], acc[c][1] *= alpha[0];
            acc[c][2] *= alpha[1], acc[c][3] *= alpha[1];
        }
        if (a.thr) { /* keys 2t, 2t + 1 of each 8 share one Philox block: counter (j / 4, i, h, b) */
#pragma unroll
            for (int c = 0; c < NT; c++)
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const int64_t j = j0 + 8 * c + 2 * t, i = i0 + warp * 16 + g + 8 * r;
                    uint32_t ctr[4] = {(uint32_t)(j >> 2), (uint32_t)i, (uint32_t)h, (uint32_t)b}, w[4];
                    fg_philox4x32_10(ctr, key, w);
                    /* j % 4 is 2t % 4 (j0 and 8c are multiples of 4): words 0, 1 or 2, 3 — chosen
                     * without a runtime index, which would put w in local memory */
                    const uint32_t w0 = (t & 1) ? w[2] : w[0], w1 = (t & 1) ? w[3] : w[1];
                    s[c][2 * r] = w0 >= a.thr ? s[c][2 * r] * a.inv_keep : 0.0f;
                    s[c][2 * r + 1] = w1 >= a.thr ? s[c][2 * r + 1] * a.inv_keep : 0.0f;
                }
        }

        /* O += bf16(P) V: the A fragment of keys 16kk..16kk+15 is S's accumulators 2kk and
         * 2kk + 1, pair by pair; V's B operands for columns 16u..16u+15 from one ldmatrix.x4.trans
         * — matrices (keys 0-7, columns 0-7), (keys 8-15, 0-7), (keys 0-7, 8-15), (keys 8-15, 8-15) */
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            const uint32_t pa[4] = {
                fg_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), fg_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                fg_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]), fg_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int u = 0; u < D / 16; u++) {
                uint32_t vb[4];
                fg_ldmatrix<4, true>(
                    vb, Vs + fa16_swz<D>(16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7), 16 * u + (lane >> 4) * 8));
                const uint32_t b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
                fg_mma_bf16_16816(acc[2 * u], pa, b0);
                fg_mma_bf16_16816(acc[2 * u + 1], pa, b1);
            }
        }
        stage ^= 1;
    }

    /* l over the group's 4 lanes; O /= l; L = m + log l in float64, rounded once */
    float *o = a.o + bh * Nq * d, *lse = a.lse + bh * Nq;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int64_t i = i0 + warp * 16 + g + 8 * r;
        if (i >= Nq) continue;
        const bool seen = l[r] != 0.0f;
        const float inv = seen ? 1.0f / l[r] : 0.0f;
#pragma unroll
        for (int c = 0; c < DT; c++) {
            const int col = 8 * c + 2 * t;
            if (col < d)
                *(float2 *)(o + i * d + col) =
                    make_float2(seen ? acc[c][2 * r] * inv : 0.0f, seen ? acc[c][2 * r + 1] * inv : 0.0f);
        }
        if (t == 0) lse[i] = seen ? (float)((double)m[r] + log((double)l[r])) : -INFINITY;
    }
}

/* ============================================================================================
 * backward (deterministic: no atomics; every sum in a fixed order)
 *   kernel 1: D_i = Σ_c dO_ic · O_ic (float64, rounded once)
 *   kernel 2: one block per (key tile of 64, K/V head g, b); warp w owns keys 16w..16w+15 and
 *             accumulates dK, dV in registers over the G query heads of the group (in order) and
 *             the query tiles whose rows see the tile (K, V stay in shared memory; each pair's Q,
 *             dO, L and D rows come two stages deep, the next pair in flight):
 *               Sᵀ = K Qᵀ, dPᵀ = V dOᵀ        (mma; Q and dO rows are B's columns)
 *               P = exp(scale · S − L) where visible ("recompute": nothing of Nq × Nk is stored)
 *               dS = P ∘ (dP ∘ Z − D)
 *               dV += bf16(P ∘ Z)ᵀ dO;  dK += bf16(dS)ᵀ Q   (A operands from the registers of Sᵀ
 *                            and dPᵀ; dO and Q as B by ldmatrix.trans)
 *             then dk += scale · dK, dv += dV: the only writer of these rows.
 *   kernel 3: one block per (query tile of 64, h, b); warp w owns rows 16w..16w+15; Q and dO stay
 *             in shared memory, K/V tiles come two stages deep as in the forward:
 *               S = Q Kᵀ, dP = dO Vᵀ, P and dS as above;  dQ += bf16(dS) K  (K by ldmatrix.trans)
 *             then dq += scale · dQ.
 *   The forward's lines they reverse: O = P V (dV, dP), S = Q Kᵀ (dQ, dK), P = softmax(S) (dS).
 * ============================================================================================ */

/* kernel 1, one warp per row: Drow (B·H·Nq) from dout (bf16) and o (float32) */
__global__ void fa16_bwd_rowdot_kernel(float *Drow, const uint16_t *dout, const float *o, int64_t rows, int d) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
        double s = 0;
        for (int c = lane; c < d; c += 32) s += (double)fg_bf16_float(dout[r * d + c]) * (double)o[r * d + c];
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (lane == 0) Drow[r] = (float)s;
    }
}

/* dynamic shared memory of kernel 2: the K and V tiles, then two stages of a Q and a dO tile (64
 * rows × D bf16 each), then two stages of the query tile's L and D rows (float32) */
template <int D> static inline size_t fa16_dkdv_smem() {
    return (size_t)(2 + 2 * 2) * 64 * D * sizeof(uint16_t) + (size_t)2 * 2 * 64 * sizeof(float);
}
/* of kernel 3: the Q and dO tiles, then two stages of a K and a V tile */
template <int D> static inline size_t fa16_dq_smem() { return (size_t)(2 + 2 * 2) * 64 * D * sizeof(uint16_t); }

/* Queue the copies of query tile i0 of head bh for kernel 2: Q and dO rows into swizzled tiles, and
 * L, D rows (one 4-byte cp.async each; zeros past Nq, where kernel 2 sees no row) */
template <int D>
__device__ __forceinline__ void fa16_load_query_tile(const fa16_args &a, int64_t bh, int64_t i0, uint16_t *Qs,
                                                     uint16_t *dOs, float *Ls, float *Ds) {
    const int64_t Nq = a.Nq;
    fa16_load_tile<D, FA16_BQ>(Qs, a.q + bh * Nq * a.d, i0, Nq, a.d);
    fa16_load_tile<D, FA16_BQ>(dOs, a.dout + bh * Nq * a.d, i0, Nq, a.d);
    for (int r = threadIdx.x; r < FA16_BQ; r += FA16_THREADS) {
        const int64_t i = i0 + r;
        const bool in = i < Nq;
        fg_cp_async<4>(Ls + r, a.lse + bh * Nq + (in ? i : 0), in);
        fg_cp_async<4>(Ds + r, a.Drow + bh * Nq + (in ? i : 0), in);
    }
}

/* Query tiles [*qt0, *qt1) hold every row that sees a key of [j0, j0 + 64): the first row with
 * hi > j0 to the first with lo >= j1, by bisection (lo and hi are nondecreasing in i). */
__device__ __forceinline__ void fa16_query_tiles(const fa16_args &a, int64_t j0, int64_t *qt0, int64_t *qt1) {
    const int64_t j1 = j0 + FA16_BK < a.Nk ? j0 + FA16_BK : a.Nk;
    int64_t x = 0, y = a.Nq;
    while (x < y) {
        const int64_t mid = x + (y - x) / 2;
        int64_t lo, hi;
        fg_attn_row_range(mid, a.Nq, a.Nk, a.causal, a.window, a.wl, a.wr, &lo, &hi);
        if (hi > j0)
            y = mid;
        else
            x = mid + 1;
    }
    const int64_t i_first = x;
    y = a.Nq;
    while (x < y) {
        const int64_t mid = x + (y - x) / 2;
        int64_t lo, hi;
        fg_attn_row_range(mid, a.Nq, a.Nk, a.causal, a.window, a.wl, a.wr, &lo, &hi);
        if (lo >= j1)
            y = mid;
        else
            x = mid + 1;
    }
    *qt0 = i_first / FA16_BQ;
    *qt1 = x > i_first ? fg_attn_ntiles(x, FA16_BQ) : *qt0;
}

/* Keep element (b, h, i, j)? (fg_attn_keep's bits; thr 0 keeps all) */
__device__ __forceinline__ bool fa16_keep(const fa16_args &a, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!a.thr) return true;
    const uint32_t ctr[4] = {(uint32_t)(j >> 2), (uint32_t)i, (uint32_t)h, (uint32_t)b};
    const uint32_t key[2] = {(uint32_t)a.seed, (uint32_t)(a.seed >> 32)};
    uint32_t w[4];
    fg_philox4x32_10(ctr, key, w);
    const int wi = (int)(j & 3);
    return (wi == 0 ? w[0] : wi == 1 ? w[1] : wi == 2 ? w[2] : w[3]) >= a.thr; /* no runtime index: registers */
}

/* The A fragments of a warp's 16 rows of a swizzled tile, columns 16kk..16kk+15 (rows row0..) */
template <int D> __device__ __forceinline__ void fa16_a_frag(uint32_t f[4], const uint16_t *S, int row0, int kk) {
    const int lane = threadIdx.x & 31;
    fg_ldmatrix<4, false>(f, S + fa16_swz<D>(row0 + (lane & 15), kk * 16 + (lane >> 4) * 8));
}
/* B operands of rows 16p..16p+15 of a swizzled tile used as B's columns (B = tileᵀ), columns
 * 16kk..16kk+15: {f[0], f[1]} for rows 16p..+7, {f[2], f[3]} for rows 16p+8..+15 */
template <int D> __device__ __forceinline__ void fa16_bt_frag(uint32_t f[4], const uint16_t *S, int p, int kk) {
    const int lane = threadIdx.x & 31;
    fg_ldmatrix<4, false>(f, S + fa16_swz<D>(16 * p + (lane >> 4) * 8 + (lane & 7), kk * 16 + ((lane >> 3) & 1) * 8));
}
/* B operands of rows 16kk..16kk+15 (B's k) of a swizzled tile used as B itself, columns
 * 16u..16u+15: {f[0], f[1]} for columns 16u..+7, {f[2], f[3]} for 16u+8..+15 (ldmatrix.trans) */
template <int D> __device__ __forceinline__ void fa16_b_frag(uint32_t f[4], const uint16_t *S, int kk, int u) {
    const int lane = threadIdx.x & 31;
    fg_ldmatrix<4, true>(f, S + fa16_swz<D>(16 * kk + ((lane >> 3) & 1) * 8 + (lane & 7), 16 * u + (lane >> 4) * 8));
}

/* kernel 2: dK, dV (see above); a.lse, a.Drow, a.dout, a.dk, a.dv set */
template <int D> __global__ void __launch_bounds__(FA16_THREADS) fa16_bwd_dkdv_kernel(fa16_args a) {
    constexpr int BQ = FA16_BQ, BK = FA16_BK, KD = D / 16, RP = D <= 64 ? 64 : 32, NT = RP / 8, DT = D / 8;
    FG_DYN_SMEM(smem_raw);
    /* stage s: Q at QdO + s·2·BQ·D, dO after it; L at LD + s·2·BQ, D after it */
    uint16_t *Ks = (uint16_t *)smem_raw, *Vs = Ks + BK * D, *QdO = Vs + BK * D;
    float *LD = (float *)(QdO + 2 * 2 * BQ * D);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t kt = blockIdx.x, gh = blockIdx.y, b = blockIdx.z, bg = b * a.Hkv + gh;
    const int64_t Nq = a.Nq, Nk = a.Nk, j0 = kt * BK;
    const int d = a.d;

    float dk[DT][4], dv[DT][4]; /* keys j0 + 16w + g (+ 8), columns 8c + 2t, + 1 */
#pragma unroll
    for (int c = 0; c < DT; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[c][e] = dv[c][e] = 0;

    /* the (query head, query tile) pairs in order: heads g·G .. g·G + G − 1, each over the query
     * tiles [qt0, qt1) whose rows see this key tile; pair it + 1 is fetched while pair it is used */
    int64_t qt0, qt1;
    fa16_query_tiles(a, j0, &qt0, &qt1);
    const int64_t nqt = qt1 - qt0, npairs = a.G * nqt;
    if (npairs > 0) { /* group 1: K, V and the first pair (stage 0) */
        fa16_load_tile<D, BK>(Ks, a.k + bg * Nk * d, j0, Nk, d);
        fa16_load_tile<D, BK>(Vs, a.v + bg * Nk * d, j0, Nk, d);
        fa16_load_query_tile<D>(a, b * a.H + gh * a.G, qt0 * BQ, QdO, QdO + BQ * D, LD, LD + BQ);
        fg_cp_async_commit();
    }
    int stage = 0;
    for (int64_t it = 0; it < npairs; it++) { /* uniform over the block */
        const int64_t h = gh * a.G + it / nqt, i0 = (qt0 + it % nqt) * BQ;
        const uint16_t *Qs = QdO + stage * 2 * BQ * D, *dOs = Qs + BQ * D;
        const float *Ls = LD + stage * 2 * BQ, *Ds = Ls + BQ;
        FA16_TILES_READY(dkdv); /* pair it (and K, V the first time); the other stage is no longer read */
        if (it + 1 < npairs) {
            const int64_t hn = gh * a.G + (it + 1) / nqt, in0 = (qt0 + (it + 1) % nqt) * BQ;
            uint16_t *Qn = QdO + (stage ^ 1) * 2 * BQ * D;
            float *Ln = LD + (stage ^ 1) * 2 * BQ;
            fa16_load_query_tile<D>(a, b * a.H + hn, in0, Qn, Qn + BQ * D, Ln, Ln + BQ);
            fg_cp_async_commit();
        }
        /* Sᵀ and dPᵀ: the warp's 16 keys × RP rows of the tile at a time (RP = 32 at D = 128 keeps
         * the accumulators within the register file) */
        for (int r0 = 0; r0 < BQ; r0 += RP) {
            float st[NT][4], dpt[NT][4];
#pragma unroll
            for (int c = 0; c < NT; c++)
#pragma unroll
                for (int e = 0; e < 4; e++) st[c][e] = dpt[c][e] = 0;
#pragma unroll
            for (int kk = 0; kk < KD; kk++) {
                uint32_t ka[4], va[4];
                fa16_a_frag<D>(ka, Ks, warp * 16, kk);
                fa16_a_frag<D>(va, Vs, warp * 16, kk);
#pragma unroll
                for (int p = 0; p < RP / 16; p++) {
                    uint32_t f[4];
                    fa16_bt_frag<D>(f, Qs, r0 / 16 + p, kk);
                    const uint32_t q0[2] = {f[0], f[1]}, q1[2] = {f[2], f[3]};
                    fg_mma_bf16_16816(st[2 * p], ka, q0);
                    fg_mma_bf16_16816(st[2 * p + 1], ka, q1);
                    fa16_bt_frag<D>(f, dOs, r0 / 16 + p, kk);
                    const uint32_t o0[2] = {f[0], f[1]}, o1[2] = {f[2], f[3]};
                    fg_mma_bf16_16816(dpt[2 * p], va, o0);
                    fg_mma_bf16_16816(dpt[2 * p + 1], va, o1);
                }
            }
            /* element (key j0 + 16w + g + 8(e / 2), row i0 + r0 + 8c + 2t + e % 2): P ∘ Z into st, dS into dpt */
#pragma unroll
            for (int c = 0; c < NT; c++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int ii = r0 + 8 * c + 2 * t + (e & 1);
                    const int64_t i = i0 + ii, j = j0 + warp * 16 + g + 8 * (e >> 1);
                    const float L = Ls[ii];
                    int64_t lo, hi;
                    fg_attn_row_range(i, Nq, Nk, a.causal, a.window, a.wl, a.wr, &lo, &hi);
                    const bool vis = i < Nq && L != -INFINITY && j >= lo && j < hi; /* rows past Nq: P = 0 */
                    const float P = vis ? expf(st[c][e] * a.scale - L) : 0.0f;
                    const float Z = P != 0.0f && fa16_keep(a, b, h, i, j) ? (a.thr ? a.inv_keep : 1.0f) : 0.0f;
                    st[c][e] = P * Z;
                    dpt[c][e] = P * (dpt[c][e] * Z - Ds[ii]);
                }
                /* dV += (P∘Z)ᵀ dO, dK += dSᵀ Q over the tile's rows, 16 at a time */
#pragma unroll
            for (int kk = 0; kk < RP / 16; kk++) {
                const uint32_t pa[4] = {fg_pack_bf16x2(st[2 * kk][0], st[2 * kk][1]),
                                        fg_pack_bf16x2(st[2 * kk][2], st[2 * kk][3]),
                                        fg_pack_bf16x2(st[2 * kk + 1][0], st[2 * kk + 1][1]),
                                        fg_pack_bf16x2(st[2 * kk + 1][2], st[2 * kk + 1][3])};
                const uint32_t sa[4] = {fg_pack_bf16x2(dpt[2 * kk][0], dpt[2 * kk][1]),
                                        fg_pack_bf16x2(dpt[2 * kk][2], dpt[2 * kk][3]),
                                        fg_pack_bf16x2(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                                        fg_pack_bf16x2(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
                for (int u = 0; u < D / 16; u++) {
                    uint32_t f[4];
                    fa16_b_frag<D>(f, dOs, r0 / 16 + kk, u);
                    const uint32_t o0[2] = {f[0], f[1]}, o1[2] = {f[2], f[3]};
                    fg_mma_bf16_16816(dv[2 * u], pa, o0);
                    fg_mma_bf16_16816(dv[2 * u + 1], pa, o1);
                    fa16_b_frag<D>(f, Qs, r0 / 16 + kk, u);
                    const uint32_t q0[2] = {f[0], f[1]}, q1[2] = {f[2], f[3]};
                    fg_mma_bf16_16816(dk[2 * u], sa, q0);
                    fg_mma_bf16_16816(dk[2 * u + 1], sa, q1);
                }
            }
        } /* r0 */
        stage ^= 1;
    }
    /* the only writer of these rows of dk and dv: add (the backward accumulates) */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t j = j0 + warp * 16 + g + 8 * r;
        if (j >= Nk) continue;
        float *dkj = a.dk + (bg * Nk + j) * d, *dvj = a.dv + (bg * Nk + j) * d;
#pragma unroll
        for (int c = 0; c < DT; c++) {
            const int col = 8 * c + 2 * t;
            if (col >= d) continue;
            float2 x = *(float2 *)(dkj + col), y = *(float2 *)(dvj + col);
            x.x += a.scale * dk[c][2 * r], x.y += a.scale * dk[c][2 * r + 1];
            y.x += dv[c][2 * r], y.y += dv[c][2 * r + 1];
            *(float2 *)(dkj + col) = x;
            *(float2 *)(dvj + col) = y;
        }
    }
}

/* kernel 3: dQ (see above); a.lse, a.Drow, a.dout, a.dq set */
template <int D> __global__ void __launch_bounds__(FA16_THREADS) fa16_bwd_dq_kernel(fa16_args a) {
    constexpr int BQ = FA16_BQ, BK = FA16_BK, KD = D / 16, NT = BK / 8, DT = D / 8;
    FG_DYN_SMEM(smem_raw);
    /* stage s: K at KVs + s·2·BK·D, V after it */
    uint16_t *Qs = (uint16_t *)smem_raw, *dOs = Qs + BQ * D, *KVs = dOs + BQ * D;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t qt = (int64_t)gridDim.x - 1 - blockIdx.x; /* causal: the longest rows first */
    const int64_t h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h, bg = b * a.Hkv + h / a.G;
    const int64_t Nq = a.Nq, Nk = a.Nk, i0 = qt * BQ;
    const int d = a.d;
    const uint16_t *k = a.k + bg * Nk * d, *v = a.v + bg * Nk * d;

    int64_t lo_first, hi_first, lo_last, hi_last;
    fg_attn_row_range(i0, Nq, Nk, a.causal, a.window, a.wl, a.wr, &lo_first, &hi_first);
    fg_attn_row_range((i0 + BQ < Nq ? i0 + BQ : Nq) - 1, Nq, Nk, a.causal, a.window, a.wl, a.wr, &lo_last, &hi_last);
    const int64_t kt0 = lo_first / BK, kt1 = hi_last > lo_first ? fg_attn_ntiles(hi_last, BK) : kt0;
    if (kt0 < kt1) { /* group 1: Q, dO and the first K, V tile (stage 0) */
        fa16_load_tile<D, BQ>(Qs, a.q + bh * Nq * d, i0, Nq, d);
        fa16_load_tile<D, BQ>(dOs, a.dout + bh * Nq * d, i0, Nq, d);
        fa16_load_tile<D, BK>(KVs, k, kt0 * BK, Nk, d);
        fa16_load_tile<D, BK>(KVs + BK * D, v, kt0 * BK, Nk, d);
        fg_cp_async_commit();
    }
    float L[2], Dv[2];
    int64_t lo[2], hi[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t i = i0 + warp * 16 + g + 8 * r;
        L[r] = i < Nq ? a.lse[bh * Nq + i] : -INFINITY;
        Dv[r] = i < Nq ? a.Drow[bh * Nq + i] : 0.0f;
        fg_attn_row_range(i, Nq, Nk, a.causal, a.window, a.wl, a.wr, &lo[r], &hi[r]);
    }
    float dq[DT][4]; /* rows i0 + 16w + g (+ 8), columns 8c + 2t, + 1 */
#pragma unroll
    for (int c = 0; c < DT; c++) dq[c][0] = dq[c][1] = dq[c][2] = dq[c][3] = 0;

    int stage = 0;
    for (int64_t kt = kt0; kt < kt1; kt++) { /* the same tiles for every thread of the block */
        const int64_t j0 = kt * BK;
        const uint16_t *Ks = KVs + stage * 2 * BK * D, *Vs = Ks + BK * D;
        FA16_TILES_READY(dq); /* tile kt (and Q, dO the first time); the other stage is no longer read */
        if (kt + 1 < kt1) {   /* fetch tile kt + 1 into the other stage while this one is used */
            uint16_t *Kn = KVs + (stage ^ 1) * 2 * BK * D;
            fa16_load_tile<D, BK>(Kn, k, j0 + BK, Nk, d);
            fa16_load_tile<D, BK>(Kn + BK * D, v, j0 + BK, Nk, d);
            fg_cp_async_commit();
        }
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int c = 0; c < NT; c++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[c][e] = dp[c][e] = 0;
#pragma unroll
        for (int kk = 0; kk < KD; kk++) {
            uint32_t qa[4], oa[4];
            fa16_a_frag<D>(qa, Qs, warp * 16, kk);
            fa16_a_frag<D>(oa, dOs, warp * 16, kk);
#pragma unroll
            for (int p = 0; p < BK / 16; p++) {
                uint32_t f[4];
                fa16_bt_frag<D>(f, Ks, p, kk);
                const uint32_t k0[2] = {f[0], f[1]}, k1[2] = {f[2], f[3]};
                fg_mma_bf16_16816(s[2 * p], qa, k0);
                fg_mma_bf16_16816(s[2 * p + 1], qa, k1);
                fa16_bt_frag<D>(f, Vs, p, kk);
                const uint32_t v0[2] = {f[0], f[1]}, v1[2] = {f[2], f[3]};
                fg_mma_bf16_16816(dp[2 * p], oa, v0);
                fg_mma_bf16_16816(dp[2 * p + 1], oa, v1);
            }
        }
        /* dS into s: element (row r = e / 2, key j0 + 8c + 2t + e % 2); a thread's two keys of each 8
         * share one Philox block, as in the forward */
#pragma unroll
        for (int c = 0; c < NT; c++)
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int64_t i = i0 + warp * 16 + g + 8 * r, jp = j0 + 8 * c + 2 * t;
                bool keep[2] = {true, true};
                if (a.thr) {
                    const uint32_t ctr[4] = {(uint32_t)(jp >> 2), (uint32_t)i, (uint32_t)h, (uint32_t)b};
                    const uint32_t key[2] = {(uint32_t)a.seed, (uint32_t)(a.seed >> 32)};
                    uint32_t w[4];
                    fg_philox4x32_10(ctr, key, w);
                    keep[0] = ((t & 1) ? w[2] : w[0]) >= a.thr; /* jp % 4 is 2t % 4 */
                    keep[1] = ((t & 1) ? w[3] : w[1]) >= a.thr;
                }
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const int e = 2 * r + u;
                    const int64_t j = jp + u;
                    const bool vis = L[r] != -INFINITY && j >= lo[r] && j < hi[r];
                    const float P = vis ? expf(s[c][e] * a.scale - L[r]) : 0.0f;
                    const float Z = P != 0.0f && keep[u] ? (a.thr ? a.inv_keep : 1.0f) : 0.0f;
                    s[c][e] = P * (dp[c][e] * Z - Dv[r]);
                }
            }
            /* dQ += dS K over the tile's keys, 16 at a time */
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            const uint32_t sa[4] = {
                fg_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), fg_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                fg_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]), fg_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int u = 0; u < D / 16; u++) {
                uint32_t f[4];
                fa16_b_frag<D>(f, Ks, kk, u);
                const uint32_t k0[2] = {f[0], f[1]}, k1[2] = {f[2], f[3]};
                fg_mma_bf16_16816(dq[2 * u], sa, k0);
                fg_mma_bf16_16816(dq[2 * u + 1], sa, k1);
            }
        }
        stage ^= 1;
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t i = i0 + warp * 16 + g + 8 * r;
        if (i >= Nq) continue;
        float *dqi = a.dq + (bh * Nq + i) * d;
#pragma unroll
        for (int c = 0; c < DT; c++) {
            const int col = 8 * c + 2 * t;
            if (col >= d) continue;
            float2 x = *(float2 *)(dqi + col);
            x.x += a.scale * dq[c][2 * r], x.y += a.scale * dq[c][2 * r + 1];
            *(float2 *)(dqi + col) = x;
        }
    }
}

/* The compile-time width for head dim d (a multiple of 8); 0 if unsupported. */
static inline int fa16_width(int64_t d) { return d % 8 != 0 || d < 8 ? 0 : d <= 64 ? 64 : d <= 128 ? 128 : 0; }

#endif /* FG_ATTENTION_BF16_CUH */
