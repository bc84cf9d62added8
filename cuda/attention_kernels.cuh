/* attention_kernels.cuh — the attention kernels of cuda/attention.cu (the algorithm is described
 * there), with the small host helpers that size and parameterize them. Internal to cuda/ (C++).
 *
 * Kept apart from the host code so the very same kernel source also runs on the CPU: the emulator
 * in tests/cuda/emu/ defines FG_CUDA_EMU and the CUDA built-ins (threads as fibers, __syncthreads
 * and warp shuffles as barriers) and checks these kernels against the CPU reference on a machine
 * without a GPU (`make cuda-emu`). So this file uses nothing from the CUDA runtime: only
 * cuda/device_math.cuh, cuda/ptx_async.cuh (cp.async, which the emulator models), the host/device headers of ops/shared/ (attn_tiles.h, attn_variant.h,
 * attn_dropout.h), tensor/philox.h and FG_DYN_SMEM below.
 *
 * The variants (ops/attention.h, steps 1–6) are written with the CPU's own pure helpers of
 * ops/shared/attn_variant.h (fg_attn_row_range, fg_attn_alibi_slope; fa_tile_kind below is
 * fg_attn_tile_kind_window's O(1) decision, tested equal to it), so the GPU and the CPU agree on
 * which element is visible and which tile is skipped:
 *   s = scale · q_i · k_j  (K/V head h / G)  ->  softcap c·tanh(s/c)  ->  ALiBi −slope_h·|i' − j|
 *     ->  −inf outside causal ∧ window  ->  softmax, dropout (query head h), · V
 * GQA and the window change only which tiles and elements are visited (runtime values). Softcap
 * and ALiBi change every score, so the three flash kernels have a second instance (MODS = true)
 * that applies them; the plain instance (MODS = false) has no per-score code beyond the mask test.
 */
#ifndef FG_ATTENTION_KERNELS_CUH
#define FG_ATTENTION_KERNELS_CUH

#include <stdint.h>
#include <string.h>

#include "cuda/device_math.cuh"
#include "cuda/ptx_async.cuh"
#include "ops/attention_kernels.h" /* fg_attn_problem */
#include "ops/shared/attn_dropout.h"
#include "ops/shared/attn_tiles.h"
#include "ops/shared/attn_variant.h"
#include "tensor/philox.h"

/* The block's dynamic shared memory as `unsigned char name[]`. */
#ifndef FG_CUDA_EMU
#define FG_DYN_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

/* Kernel arguments (one struct for all kernels; unused pointers are NULL).
 * q, o, dout, dq (B, H, Nq, d); k, v, dk, dv (B, Hkv, Nk, d); lse, lse_lo, Drow (B, H, Nq). */
template <typename T> struct fa_args {
    const T *q, *k, *v, *o, *dout, *lse, *lse_lo, *Drow;
    T *o_out, *lse_out, *lse_lo_out, *dq, *dk, *dv;
    int64_t B, H, Nq, Nk;
    int64_t Hkv, G; /* K/V heads; query head h reads K/V head h / G, G = H / Hkv */
    int d;
    T scale;
    int causal;
    uint64_t seed;
    uint32_t thr; /* fg_dropout_threshold(p); 0 = no dropout */
    T inv_keep;   /* 1 / (1 − p) */
    int window;   /* 1: keys i' − wl .. i' + wr only (a negative side is unbounded) */
    int64_t wl, wr;
    int alibi;              /* 1: s −= slope_h · |i' − j| */
    const double *slopes;   /* device memory, H slopes; NULL: fg_attn_alibi_slope(h, H) */
    T softcap, inv_softcap; /* softcap c > 0: s = c · tanh(s · (1/c)); 0 = off */
    int vec16; /* d is a multiple of 16 / sizeof(T) and q, k, v, dout 16-byte aligned: tiles load by chunks */
};

/* ---- the variants, per element and per tile ---- */

/* The ALiBi slope of query head h (0 without ALiBi): the user's, or the standard one. */
template <typename T> __device__ __forceinline__ double fa_slope(const fa_args<T> &a, int64_t h) {
    if (!a.alibi) return 0.0;
    return a.slopes ? a.slopes[h] : fg_attn_alibi_slope(h, a.H);
}

/* Does the problem need the MODS = true kernels (softcap or ALiBi)? */
template <typename T> static inline bool fa_mods(const fa_args<T> &a) { return a.softcap > (T)0 || a.alibi; }

/* Steps 2–3 on the scaled score x of row i' = i + Nk − Nq (ip) and key j, in the CPU's order and
 * arithmetic (ops/attention_variant.c): softcap x = c·tanh(x·(1/c)) — x itself where |x·(1/c)| is
 * below 2^-12 (float) or 2^-27 (double), where that rounds to x —, then ALiBi
 * x −= (T)(slope·|i' − j|) (the product in float64). With g, *g = ∂x_out/∂x_in = 1 − tanh². */
template <typename T>
__device__ __forceinline__ T fa_modify(const fa_args<T> &a, T x, double slope, int64_t ip, int64_t j, T *g) {
    if (a.softcap > (T)0) {
        const T lin = sizeof(T) == sizeof(float) ? (T)2.44140625e-4 : (T)7.450580596923828125e-9;
        const T u = x * a.inv_softcap, t = fg_tanh(u);
        x = (u < (T)0 ? -u : u) < lin ? x : a.softcap * t;
        if (g) *g = (T)1 - t * t;
    }
    if (a.alibi) {
        const int64_t dist = ip - j;
        x -= (T)(slope * (double)(dist < 0 ? -dist : dist));
    }
    return x;
}

/* The keys [*lo, *hi) query i sees under causal ∧ window (rows past Nq: whatever the formula says;
 * the kernels never store them). */
template <typename T>
__device__ __forceinline__ void fa_row_range(const fa_args<T> &a, int64_t i, int64_t *lo, int64_t *hi) {
    fg_attn_row_range(i, a.Nq, a.Nk, a.causal, a.window, a.wl, a.wr, lo, hi);
}

/* The kind of the tile rows [i0, i0 + BQ) × keys [j0, j0 + BK) under causal ∧ window, from its
 * first and last rows in range, exactly as fg_attn_tile_kind_window decides in O(1): both ends of
 * a row's key range grow with i, so MASKED when the last row ends before j0 or the first row starts
 * past the tile, FULL when the last row starts and the first row ends around it. Where the ends do
 * not decide, fg_attn_tile_kind_window scans the rows for one that sees a key of the tile; that
 * scan can only find MASKED when consecutive rows' ranges jump over the whole tile, which causal
 * and window ranges never do (they move by one key per row), so the kernels skip it and call the
 * tile PARTIAL — correct in any case, since a PARTIAL tile masks element by element — and keep its
 * registers (tests/cuda/emu/flash_emu.cpp checks that both give the same kind, and that no tile with
 * a visible element is left out of fa_key_tiles / fa_query_tiles, on ~3000 configurations).
 * Key padding past Nk makes a FULL tile PARTIAL. Rows past Nq are ignored (the forward never
 * stores them; the backward gives them L = −inf). */
template <typename T, int BQ, int BK>
__host__ __device__ __forceinline__ fg_tile_kind fa_tile_kind(const fa_args<T> &a, int64_t i0, int64_t j0) {
    const int64_t nq = a.Nq - i0 < BQ ? a.Nq - i0 : BQ, nk = a.Nk - j0 < BK ? a.Nk - j0 : BK;
    if (nq <= 0 || nk <= 0) return FG_TILE_MASKED;
    int64_t lo0, hi0, lo1, hi1;
    fg_attn_row_range(i0, a.Nq, a.Nk, a.causal, a.window, a.wl, a.wr, &lo0, &hi0);
    fg_attn_row_range(i0 + nq - 1, a.Nq, a.Nk, a.causal, a.window, a.wl, a.wr, &lo1, &hi1);
    if (hi1 <= j0 || lo0 >= j0 + nk) return FG_TILE_MASKED;
    if (lo1 <= j0 && hi0 >= j0 + nk && nk == BK) return FG_TILE_FULL;
    return FG_TILE_PARTIAL;
}

/* Key tiles [*kt0, *kt1) hold every key that a row of the query tile starting at i0 sees: the first
 * row has the smallest lo, the last the largest hi (both ends grow with i), so no tile outside is
 * visited. Inside, the FULL tiles are [*kf0, *kf1): keys [j0, j0 + BK) all in range, at or past the
 * last row's lo and before the first row's hi; the others are PARTIAL (none is MASKED: the first
 * tile ends past the first row's lo and the last starts before the last row's hi). This is
 * fa_tile_kind for every tile of the range, in two integer compares per tile (tests/cuda/emu
 * checks that it is). */
template <typename T, int BQ, int BK>
__device__ __forceinline__ void fa_key_tiles(const fa_args<T> &a, int64_t i0, int64_t *kt0, int64_t *kt1, int64_t *kf0,
                                             int64_t *kf1) {
    const int64_t i_last = (i0 + BQ < a.Nq ? i0 + BQ : a.Nq) - 1;
    int64_t lo0, hi0, lo1, hi1;
    fa_row_range(a, i0, &lo0, &hi0);
    fa_row_range(a, i_last, &lo1, &hi1);
    *kt0 = lo0 / BK;
    *kt1 = hi1 > lo0 ? fg_attn_ntiles(hi1, BK) : *kt0;
    *kf0 = (lo1 + BK - 1) / BK; /* j0 >= lo1 */
    *kf1 = hi0 / BK;            /* j0 + BK <= hi0 (<= Nk) */
}

/* Query tiles [*qt0, *qt1) hold every row that sees a key of the key tile starting at j0: rows
 * i_first (the first with hi > j0) to i_end (the first with lo >= j1) − 1, found by bisection —
 * lo and hi are nondecreasing in i. */
template <typename T, int BQ, int BK>
__device__ __forceinline__ void fa_query_tiles(const fa_args<T> &a, int64_t j0, int64_t *qt0, int64_t *qt1) {
    const int64_t j1 = j0 + BK < a.Nk ? j0 + BK : a.Nk;
    int64_t x = 0, y = a.Nq; /* the first row with hi > j0 is in [x, y] */
    while (x < y) {
        const int64_t mid = x + (y - x) / 2;
        int64_t lo, hi;
        fa_row_range(a, mid, &lo, &hi);
        if (hi > j0)
            y = mid;
        else
            x = mid + 1;
    }
    const int64_t i_first = x;
    y = a.Nq; /* the first row with lo >= j1 is in [x, y] */
    while (x < y) {
        const int64_t mid = x + (y - x) / 2;
        int64_t lo, hi;
        fa_row_range(a, mid, &lo, &hi);
        if (lo >= j1)
            y = mid;
        else
            x = mid + 1;
    }
    *qt0 = i_first / BQ;
    *qt1 = x > i_first ? fg_attn_ntiles(x, BQ) : *qt0;
}

/* Tile sizes: BQ query rows × BK keys per block, for the forward (F) and backward (B) kernels,
 * and the shared-memory layout they share.
 *
 * Thread (ty, tx) of the 16 × 16 grid owns rows ty + 16r of a score tile and the KW = BK / 16
 * CONSECUTIVE keys KW·tx .. KW·tx + KW − 1: its P and dS go to shared memory as one vector store
 * per row, and one Philox block (four consecutive keys, ops/shared/attn_dropout.h) serves four of
 * its elements. Of a (rows, D) output tile it owns rows ty + 16r and the columns
 * CW·tx + 16·CW·m + w (w < CW = min(VEC, D/16)), so a V, dO, Q or K row is read CW at a time.
 *
 * Shared tiles are row-major without padding, in 16-byte chunks (VEC = 16 / sizeof(T) elements)
 * whose order within a row is XOR-swizzled by fa_swz(row) (fa_sw): every 16-byte load stays
 * aligned, and the access patterns of the kernels hit distinct bank groups —
 *   rows KW·tx + c (K, V in the score loops; P, dS stores): fa_swz differs for tx = 0..7;
 *   rows ty, ty + 1 (Q, dO; a half-warp each, both in one warp): fa_swz differs;
 *   one row, chunks by tx (V in O += P V, dO and Q in dV, dK, K in dQ): a permutation.
 * It needs rows of at least 8 chunks (128 bytes). K/V tiles are fetched with cp.async
 * (cuda/ptx_async.cuh) into STAGES buffers: with two, tile kt + 1 is in flight while tile kt is
 * used (the forward and dQ kernels, where fa_stages allows); the dK/dV kernel waits for each
 * query tile (one stage). */
template <typename T, int D> struct flash_cfg;
template <int D> struct flash_cfg<float, D> {
    static constexpr int FBQ = 64, FBK = 64;
    static constexpr int BBQ = D <= 128 ? 64 : 32, BBK = D <= 128 ? 64 : 32;
};
template <int D> struct flash_cfg<double, D> {
    static constexpr int FBQ = 32, FBK = 32;
    static constexpr int BBQ = D <= 128 ? 32 : 16, BBK = D <= 128 ? 32 : 16;
};

/* shared-memory bytes of each kernel with `st` K/V stages */
template <typename T, int D> constexpr size_t fa_fwd_bytes(int st) {
    using C = flash_cfg<T, D>;
    return sizeof(T) * ((size_t)C::FBQ * D + (size_t)st * 2 * C::FBK * D + (size_t)C::FBQ * C::FBK);
}
template <typename T, int D> constexpr size_t fa_dq_bytes(int st) {
    using C = flash_cfg<T, D>;
    return sizeof(T) *
           ((size_t)2 * C::BBQ * D + (size_t)st * 2 * C::BBK * D + (size_t)C::BBQ * C::BBK + 3 * (size_t)C::BBQ);
}
template <typename T, int D> constexpr size_t fa_dkdv_bytes() {
    using C = flash_cfg<T, D>;
    return sizeof(T) *
           ((size_t)2 * C::BBK * D + (size_t)2 * C::BBQ * D + (size_t)2 * C::BBK * C::BBQ + 3 * (size_t)C::BBQ);
}
/* Blocks of `bytes` an SM holds (228 KB, 1 KB reserved per block). Up to D = 64 two blocks of 256
 * threads per SM are the aim (__launch_bounds__(256, 2): 128 registers a thread hold the
 * accumulators); wider, the accumulators need more registers and one block runs per SM anyway
 * (up to 255 registers). The stages: two when they fit the 227 KB a block may have and, up to
 * D = 64, still leave min(2, blocks with one stage) blocks. */
constexpr int fa_blocks_per_sm(size_t bytes) { return (int)(233472 / (bytes + 1024)); }
constexpr int fa_stages(int D, size_t one, size_t two) {
    return two <= 232448 && (D > 64 || fa_blocks_per_sm(two) >= (fa_blocks_per_sm(one) < 2 ? fa_blocks_per_sm(one) : 2))
               ? 2
               : 1;
}
constexpr int fa_min_blocks(int D, size_t bytes) { return D <= 64 && fa_blocks_per_sm(bytes) >= 2 ? 2 : 1; }
/* ... except the float32 instances that ptxas -v (sm_90) shows spilling at 128 registers: the
 * forward with softcap/ALiBi at D = 64, the dK/dV kernel with them at D = 64 and without at D = 32;
 * they get one block per SM and the registers they need */
template <typename T> constexpr bool fa_spills_at_128(int kernel, int D, bool mods) {
    return sizeof(T) == 4 &&
           ((kernel == 0 && D == 64 && mods) || (kernel == 2 && D == 64 && mods) || (kernel == 2 && D == 32 && !mods));
}

template <typename T, int D> struct fa_fwd_cfg {
    static constexpr int ST = fa_stages(D, fa_fwd_bytes<T, D>(1), fa_fwd_bytes<T, D>(2));
    static constexpr size_t BYTES = fa_fwd_bytes<T, D>(ST);
    static constexpr int min_blocks(bool mods) { return fa_spills_at_128<T>(0, D, mods) ? 1 : fa_min_blocks(D, BYTES); }
};
template <typename T, int D> struct fa_dq_cfg {
    static constexpr int ST = fa_stages(D, fa_dq_bytes<T, D>(1), fa_dq_bytes<T, D>(2));
    static constexpr size_t BYTES = fa_dq_bytes<T, D>(ST);
    static constexpr int min_blocks(bool mods) { return fa_spills_at_128<T>(1, D, mods) ? 1 : fa_min_blocks(D, BYTES); }
};
template <typename T, int D> struct fa_dkdv_cfg {
    static constexpr size_t BYTES = fa_dkdv_bytes<T, D>();
    static constexpr int min_blocks(bool mods) { return fa_spills_at_128<T>(2, D, mods) ? 1 : fa_min_blocks(D, BYTES); }
};

/* ---- the shared-memory layout ---- */

/* the chunk swizzle of row r of a tile whose score rows are read KW at a time (see flash_cfg) */
template <int KW> __device__ __forceinline__ int fa_swz(int r) { return (KW > 1 ? (r / KW) ^ r : r) & 7; }
/* element (r, c) of a row-major tile of W columns */
template <typename T, int W, int KW> __device__ __forceinline__ int fa_sw(int r, int c) {
    constexpr int VEC = 16 / (int)sizeof(T);
    static_assert(W / VEC >= 8, "a swizzled row needs 8 chunks of 16 bytes");
    return r * W + (((c / VEC) ^ fa_swz<KW>(r)) * VEC) + c % VEC;
}

/* N consecutive elements of shared memory at p (aligned to N elements) in one access */
__device__ __forceinline__ void fa_ld(float (&o)[4], const float *p) {
    const float4 v = *reinterpret_cast<const float4 *>(p);
    o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
}
__device__ __forceinline__ void fa_ld(float (&o)[2], const float *p) {
    const float2 v = *reinterpret_cast<const float2 *>(p);
    o[0] = v.x, o[1] = v.y;
}
__device__ __forceinline__ void fa_ld(double (&o)[2], const double *p) {
    const double2 v = *reinterpret_cast<const double2 *>(p);
    o[0] = v.x, o[1] = v.y;
}
template <typename T> __device__ __forceinline__ void fa_ld(T (&o)[1], const T *p) { o[0] = *p; }
__device__ __forceinline__ void fa_st(float *p, const float (&v)[4]) {
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void fa_st(float *p, const float (&v)[2]) {
    *reinterpret_cast<float2 *>(p) = make_float2(v[0], v[1]);
}
__device__ __forceinline__ void fa_st(double *p, const double (&v)[2]) {
    *reinterpret_cast<double2 *>(p) = make_double2(v[0], v[1]);
}
template <typename T> __device__ __forceinline__ void fa_st(T *p, const T (&v)[1]) { *p = v[0]; }

/* Queue the copy of rows [r0, r0 + ROWS) of a (nrows, d) matrix into a swizzled (ROWS, D) tile;
 * zeros past nrows and past d. vec: d is a multiple of VEC and g 16-byte aligned (a.vec16), so
 * whole chunks are copied; otherwise element by element. The caller commits and waits. */
template <typename T, int D, int KW, int ROWS>
__device__ __forceinline__ void fa_load_tile(T *S, const T *g, int64_t r0, int64_t nrows, int d, int vec) {
    constexpr int VEC = 16 / (int)sizeof(T), CH = D / VEC;
    if (vec) {
        for (int e = threadIdx.x; e < ROWS * CH; e += blockDim.x) {
            const int r = e / CH, c = (e % CH) * VEC;
            const int64_t gr = r0 + r;
            const bool in = gr < nrows && c < d;
            fg_cp_async<16>(S + fa_sw<T, D, KW>(r, c), in ? g + gr * d + c : g, in);
        }
    } else {
        for (int e = threadIdx.x; e < ROWS * D; e += blockDim.x) {
            const int r = e / D, c = e % D;
            const int64_t gr = r0 + r;
            const bool in = gr < nrows && c < d;
            fg_cp_async<(int)sizeof(T)>(S + fa_sw<T, D, KW>(r, c), in ? g + gr * d + c : g, in);
        }
    }
}

/* ---- dropout: one Philox block for four consecutive keys ---- */

/* The four words of the dropout block of keys 4q .. 4q + 3 of row (b, h, i): the counter and key
 * of fg_attn_keep (ops/shared/attn_dropout.h), whose word j % 4 decides key j. */
struct fa_philox4 {
    uint32_t w[4];
};
__device__ __forceinline__ fa_philox4 fa_dropout_block(uint64_t seed, int64_t b, int64_t h, int64_t i, int64_t q) {
    const uint32_t ctr[4] = {(uint32_t)q, (uint32_t)i, (uint32_t)h, (uint32_t)b};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    fa_philox4 r;
    fg_philox4x32_10(ctr, key, r.w);
    return r;
}
/* word k (0..3, a runtime value) without indexing the array: a select, no stack */
__device__ __forceinline__ uint32_t fa_word(const fa_philox4 &p, int k) {
    return k == 0 ? p.w[0] : k == 1 ? p.w[1] : k == 2 ? p.w[2] : p.w[3];
}
/* z[c] = the dropout factor (1/(1 − p) or 0) of keys j0 + KW·tx + c of row i, one Philox block per
 * four of them; all 1 without dropout */
template <typename T, int KW>
__device__ __forceinline__ void fa_dropout_row(const fa_args<T> &a, int64_t b, int64_t h, int64_t i, int64_t jt,
                                               T (&z)[KW]) {
    fa_philox4 blk = {{0, 0, 0, 0}};
#pragma unroll
    for (int c = 0; c < KW; c++) {
        const int64_t j = jt + c; /* jt is a multiple of KW, so c % 4 == 0 starts a block */
        if (!a.thr) {
            z[c] = (T)1;
            continue;
        }
        if (c % 4 == 0) blk = fa_dropout_block(a.seed, b, h, i, j >> 2);
        const uint32_t w = KW >= 4 ? blk.w[c & 3] : fa_word(blk, (int)(j & 3));
        z[c] = w >= a.thr ? a.inv_keep : (T)0;
    }
}

/* ============================================================================================
 * flash kernels
 * ============================================================================================ */

/* max / sum over the 16 lanes that share ty (one half of a warp) */
template <typename T> __device__ __forceinline__ T half_warp_max(T v) {
    for (int o = 8; o > 0; o >>= 1) {
        T w = __shfl_xor_sync(0xffffffffu, v, o, 16);
        v = w > v ? w : v;
    }
    return v;
}
template <typename T> __device__ __forceinline__ T half_warp_sum(T v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, 16);
    return v;
}

/* acc[r][·] += A[r][e] · B[·][e] over the (ROWS_A, D) tile A (rows ty + 16r) and the (·, D) tile B
 * (rows KW·tx + c): the score loop, VEC elements of each row per load, e in order */
template <typename T, int D, int KW, int RQ>
__device__ __forceinline__ void fa_scores(T (&s)[RQ][KW], const T *As, const T *Bs, int ty, int tx) {
    constexpr int VEC = 16 / (int)sizeof(T);
#pragma unroll 1 /* a chunk step is RQ·KW·VEC FFMAs already; unrolling more only costs registers */
    for (int e = 0; e < D; e += VEC) {
        T av[RQ][VEC];
#pragma unroll
        for (int r = 0; r < RQ; r++) fa_ld(av[r], As + fa_sw<T, D, KW>(ty + 16 * r, e));
#pragma unroll
        for (int c = 0; c < KW; c++) { /* one B row at a time: fewer registers live */
            T bv[VEC];
            fa_ld(bv, Bs + fa_sw<T, D, KW>(KW * tx + c, e));
#pragma unroll
            for (int u = 0; u < VEC; u++)
#pragma unroll
                for (int r = 0; r < RQ; r++) s[r][c] += av[r][u] * bv[u];
        }
    }
}

/* acc[r][m·CW + w] += Σ_jj W[ty + 16r][jj] · X[jj][CW·tx + 16·CW·m + w] over the (·, NJ) tile W
 * and the (NJ, D) tile X, both swizzled (KW of their producers), jj in order: O += P V, dQ += dS K,
 * dV += Pᵀ dO and dK += dSᵀ Q */
template <typename T, int D, int KW, int NJ, int RQ>
__device__ __forceinline__ void fa_rows_times_tile(T (&acc)[RQ][D / 16], const T *Ws, const T *Xs, int ty, int tx) {
    constexpr int VEC = 16 / (int)sizeof(T), RD = D / 16, CW = RD < VEC ? RD : VEC, NCG = RD / CW;
#pragma unroll 1
    for (int jj = 0; jj < NJ; jj += VEC) {
        T wv[RQ][VEC];
#pragma unroll
        for (int r = 0; r < RQ; r++) fa_ld(wv[r], Ws + fa_sw<T, NJ, KW>(ty + 16 * r, jj));
#pragma unroll
        for (int u = 0; u < VEC; u++) {
            T xv[NCG][CW];
#pragma unroll
            for (int m = 0; m < NCG; m++) fa_ld(xv[m], Xs + fa_sw<T, D, KW>(jj + u, CW * tx + 16 * CW * m));
#pragma unroll
            for (int r = 0; r < RQ; r++)
#pragma unroll
                for (int m = 0; m < NCG; m++)
#pragma unroll
                    for (int w = 0; w < CW; w++) acc[r][m * CW + w] += wv[r][u] * xv[m][w];
        }
    }
}

/* the column of output element (·, m·CW + w) of thread tx */
template <typename T, int D> __device__ __forceinline__ int fa_col(int tx, int k) {
    constexpr int VEC = 16 / (int)sizeof(T), RD = D / 16, CW = RD < VEC ? RD : VEC;
    return CW * tx + 16 * CW * (k / CW) + k % CW;
}

template <typename T, int D, bool MODS>
__global__ void __launch_bounds__(256, fa_fwd_cfg<T, D>::min_blocks(MODS)) flash_fwd_kernel(fa_args<T> a) {
    using C = flash_cfg<T, D>;
    constexpr int BQ = C::FBQ, BK = C::FBK, RQ = BQ / 16, KW = BK / 16, RD = D / 16, ST = fa_fwd_cfg<T, D>::ST;
    FG_DYN_SMEM(smem_raw);
    T *Qs = (T *)smem_raw, *KVs = Qs + BQ * D, *Ps = KVs + ST * 2 * BK * D; /* stage s: K at s·2BK·D, V after */

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t qt = (int64_t)gridDim.x - 1 - blockIdx.x; /* causal: the longest rows first */
    const int64_t h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h, bg = b * a.Hkv + h / a.G;
    const int64_t Nq = a.Nq, Nk = a.Nk, i0 = qt * BQ, off = Nk - Nq;
    const int d = a.d;
    const T *q = a.q + bh * Nq * d, *k = a.k + bg * Nk * d, *v = a.v + bg * Nk * d;
    const double slope = MODS ? fa_slope(a, h) : 0.0;

    T m[RQ], l[RQ], acc[RQ][RD];
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        m[r] = fg_neg_inf<T>();
        l[r] = 0;
#pragma unroll
        for (int c = 0; c < RD; c++) acc[r][c] = 0;
    }

    int64_t kt0, kt1, kf0, kf1;
    fa_key_tiles<T, BQ, BK>(a, i0, &kt0, &kt1, &kf0, &kf1);
    fa_load_tile<T, D, KW, BQ>(Qs, q, i0, Nq, d, a.vec16);
    if (ST == 2 && kt0 < kt1) {
        fa_load_tile<T, D, KW, BK>(KVs, k, kt0 * BK, Nk, d, a.vec16);
        fa_load_tile<T, D, KW, BK>(KVs + BK * D, v, kt0 * BK, Nk, d, a.vec16);
    }
    fg_cp_async_commit();
    int stage = 0;
    for (int64_t kt = kt0; kt < kt1; kt++) { /* the same tiles for every thread of the block */
        const int64_t j0 = kt * BK;
        const fg_tile_kind kind = kt >= kf0 && kt < kf1 ? FG_TILE_FULL : FG_TILE_PARTIAL;
        const T *Ks = KVs + stage * 2 * BK * D, *Vs = Ks + BK * D;
        if (ST == 1) {
            __syncthreads(); /* the previous tile's K, V, P are no longer read */
            fa_load_tile<T, D, KW, BK>(KVs, k, j0, Nk, d, a.vec16);
            fa_load_tile<T, D, KW, BK>(KVs + BK * D, v, j0, Nk, d, a.vec16);
            fg_cp_async_commit();
        }
        fg_cp_async_wait<0>();         /* this thread's copies of tile kt (and Q) have landed */
        __syncthreads();               /* everyone's have; and the other stage and P are no longer read */
        if (ST == 2 && kt + 1 < kt1) { /* fetch tile kt + 1 while this one is used */
            T *Kn = KVs + (stage ^ 1) * 2 * BK * D;
            fa_load_tile<T, D, KW, BK>(Kn, k, j0 + BK, Nk, d, a.vec16);
            fa_load_tile<T, D, KW, BK>(Kn + BK * D, v, j0 + BK, Nk, d, a.vec16);
            fg_cp_async_commit();
        }

        /* S = Q Kᵀ for this thread's rows ty + 16r and keys KW·tx + c */
        T s[RQ][KW];
#pragma unroll
        for (int r = 0; r < RQ; r++)
#pragma unroll
            for (int c = 0; c < KW; c++) s[r][c] = 0;
        fa_scores<T, D, KW, RQ>(s, Qs, Ks, ty, tx);

        /* scale, variants, mask, online softmax, dropout; P -> shared memory */
#pragma unroll
        for (int r = 0; r < RQ; r++) {
            const int64_t i = i0 + ty + 16 * r;
            int64_t lo = 0, hi = Nk;
            if (kind != FG_TILE_FULL) fa_row_range(a, i, &lo, &hi);
            T rmax = fg_neg_inf<T>();
#pragma unroll
            for (int c = 0; c < KW; c++) {
                const int64_t j = j0 + KW * tx + c;
                T x = s[r][c] * a.scale;
                if (MODS) x = fa_modify(a, x, slope, i + off, j, (T *)nullptr);
                if (kind != FG_TILE_FULL && !(j >= lo && j < hi)) x = fg_neg_inf<T>();
                s[r][c] = x;
                rmax = x > rmax ? x : rmax;
            }
            rmax = half_warp_max(rmax);
            const T mnew = m[r] > rmax ? m[r] : rmax;
            T alpha = 1, rsum = 0;
            if (mnew == fg_neg_inf<T>()) { /* nothing seen yet: every weight is 0 */
#pragma unroll
                for (int c = 0; c < KW; c++) { /* each score -inf or NaN: a NaN stays, and makes l NaN */
                    if (s[r][c] == fg_neg_inf<T>()) s[r][c] = 0;
                    rsum += s[r][c];
                }
            } else { /* exp(-inf − m') = 0: the first block gets alpha = 0 */
                alpha = fg_exp(m[r] - mnew);
#pragma unroll
                for (int c = 0; c < KW; c++) {
                    s[r][c] = fg_exp(s[r][c] - mnew);
                    rsum += s[r][c];
                }
            }
            rsum = half_warp_sum(rsum);
            l[r] = alpha * l[r] + rsum; /* l keeps the full sum; dropout acts on the weights only */
            m[r] = mnew;
#pragma unroll
            for (int c = 0; c < RD; c++) acc[r][c] *= alpha;
            T z[KW];
            fa_dropout_row<T, KW>(a, b, h, i, j0 + KW * tx, z);
#pragma unroll
            for (int c = 0; c < KW; c++) s[r][c] = z[c] == (T)0 ? (T)0 : s[r][c] * z[c];
            fa_st(Ps + fa_sw<T, BK, KW>(ty + 16 * r, KW * tx), s[r]);
        }
        __syncthreads();

        /* O += P V */
        fa_rows_times_tile<T, D, KW, BK, RQ>(acc, Ps, Vs, ty, tx);
        stage ^= ST - 1;
    }

    /* O /= l; L = m + log l, evaluated in float64 and rounded once, lse_lo keeping what the rounding
     * lost (as ops/attention_flash.c does); a row that saw no key (l = 0): O = 0, lse = -inf,
     * lse_lo = 0; a row with a NaN score (l NaN): O and lse NaN */
    T *o = a.o_out + bh * Nq * d, *lse = a.lse_out + bh * Nq;
    T *lo = a.lse_lo_out ? a.lse_lo_out + bh * Nq : nullptr;
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        const int64_t i = i0 + ty + 16 * r;
        if (i >= Nq) continue;
        const int seen = l[r] != (T)0;
        const T inv = seen ? (T)1 / l[r] : (T)0;
#pragma unroll
        for (int c = 0; c < RD; c++) {
            const int col = fa_col<T, D>(tx, c);
            if (col < d) o[i * d + col] = seen ? acc[r][c] * inv : (T)0;
        }
        if (tx == 0) {
            const double Ld = seen ? (double)m[r] + log((double)l[r]) : 0.0;
            lse[i] = seen ? (T)Ld : fg_neg_inf<T>();
            if (lo) lo[i] = seen ? (T)(Ld - (double)(T)Ld) : (T)0;
        }
    }
}

/* kernel 1 of the backward: D[row] = Σ_c dout[row, c] · o[row, c], one warp per row, summed in
 * float64 (dS = P ∘ (dP − D) cancels for a peaked row, so D's rounding matters; as on the CPU) */
template <typename T> __global__ void flash_bwd_rowdot_kernel(T *Drow, const T *dout, const T *o, int64_t rows, int d) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
        double s = 0;
        for (int c = lane; c < d; c += 32) s += (double)dout[r * d + c] * (double)o[r * d + c];
        s = fg_warp_sum(s);
        if (lane == 0) Drow[r] = (T)s;
    }
}

/* The shared step of kernels 2 and 3: for the (BQ × BK) tile of rows [i0, i0 + BQ) of query head
 * (b, h) and keys [j0, j0 + BK), whose Q, dO, K, V tiles (swizzled) and per-row L, D are in shared
 * memory, recompute P and dS for this thread's elements (rows ty + 16r, keys KW·tx + c) and store
 * P∘Z (if Ps) and dS in shared memory: TRANS = false as (BQ, BK) tiles (rows = queries, for dQ),
 * TRANS = true as (BK, BQ) tiles (rows = keys, for dK and dV). `kind` is the tile's fa_tile_kind
 * (never MASKED here). */
template <typename T, int D, int BQ, int BK, bool MODS, bool TRANS>
__device__ __forceinline__ void recompute_tile(const fa_args<T> &a, int64_t b, int64_t h, int64_t i0, int64_t j0,
                                               fg_tile_kind kind, const T *Qs, const T *dOs, const T *Ks, const T *Vs,
                                               const T *Ls, const T *Los, const T *Ds, T *Ps, T *dSs) {
    constexpr int RQ = BQ / 16, KW = BK / 16;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t off = a.Nk - a.Nq;
    const double slope = MODS ? fa_slope(a, h) : 0.0;
    /* S = Q Kᵀ and dP = dO Vᵀ */
    T s[RQ][KW], dp[RQ][KW];
#pragma unroll
    for (int r = 0; r < RQ; r++)
#pragma unroll
        for (int c = 0; c < KW; c++) s[r][c] = dp[r][c] = 0;
    fa_scores<T, D, KW, RQ>(s, Qs, Ks, ty, tx);
    fa_scores<T, D, KW, RQ>(dp, dOs, Vs, ty, tx);
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        const int ii = ty + 16 * r;
        const int64_t i = i0 + ii;
        const T L = Ls[ii], Llo = Los[ii], Di = Ds[ii];
        int64_t lo = 0, hi = a.Nk;
        if (kind != FG_TILE_FULL) fa_row_range(a, i, &lo, &hi);
        T z[KW], pz[KW], dsv[KW];
        fa_dropout_row<T, KW>(a, b, h, i, j0 + KW * tx, z);
#pragma unroll
        for (int c = 0; c < KW; c++) {
            const int64_t j = j0 + KW * tx + c;
            /* rows past Nq and rows that see no key have L = -inf: P = 0 */
            const int vis = L != fg_neg_inf<T>() && (kind == FG_TILE_FULL || (j >= lo && j < hi));
            /* recompute S = variants(scale · q·k) and g = ∂S/∂(scale · q·k), then
             * P = exp((S − L) − lse_lo) (the naive kernel stored P) */
            T x = s[r][c] * a.scale, g = 1;
            if (MODS) x = fa_modify(a, x, slope, i + off, j, &g);
            const T P = vis ? fg_exp((x - L) - Llo) : (T)0;
            const T Z = P != (T)0 ? z[c] : (T)1;
            pz[c] = P * Z;
            /* dP = (dO Vᵀ) ∘ Z;  dS = P ∘ (dP − D) — the forward's P = softmax(S);
             * then through the softcap: dS1 = dS ∘ (1 − tanh²) (ALiBi's derivative is 1) */
            T ds = P * (dp[r][c] * Z - Di);
            if (MODS && ds != (T)0) ds *= g; /* g = 1 without softcap */
            dsv[c] = ds;
        }
        if (TRANS) {
#pragma unroll
            for (int c = 0; c < KW; c++) {
                if (Ps) Ps[fa_sw<T, BQ, KW>(KW * tx + c, ii)] = pz[c];
                dSs[fa_sw<T, BQ, KW>(KW * tx + c, ii)] = dsv[c];
            }
        } else {
            if (Ps) fa_st(Ps + fa_sw<T, BK, KW>(ii, KW * tx), pz);
            fa_st(dSs + fa_sw<T, BK, KW>(ii, KW * tx), dsv);
        }
    }
}

/* rows [r0, r0 + ROWS) of lse, lse_lo (0 without) and D into shared memory (-inf, 0, 0 past Nq) */
template <typename T, int ROWS>
__device__ __forceinline__ void load_rows(T *Ls, T *Los, T *Ds, const T *lse, const T *lse_lo, const T *Drow,
                                          int64_t r0, int64_t Nq) {
    for (int r = threadIdx.x; r < ROWS; r += blockDim.x) {
        const int64_t i = r0 + r;
        Ls[r] = i < Nq ? lse[i] : fg_neg_inf<T>();
        Los[r] = (i < Nq && lse_lo) ? lse_lo[i] : (T)0;
        Ds[r] = i < Nq ? Drow[i] : (T)0;
    }
}

/* kernel 2: dK, dV of one key tile of K/V head (b, g), summed over the G query heads of the group
 * (g·G, ..., g·G + G − 1, in that order) and their query tiles: one block owns these rows of dk
 * and dv, so grouped-query attention needs no atomics either. */
template <typename T, int D, bool MODS>
__global__ void __launch_bounds__(256, fa_dkdv_cfg<T, D>::min_blocks(MODS)) flash_bwd_dkdv_kernel(fa_args<T> a) {
    using C = flash_cfg<T, D>;
    constexpr int BQ = C::BBQ, BK = C::BBK, RK = BK / 16, KW = BK / 16, RD = D / 16;
    FG_DYN_SMEM(smem_raw);
    T *Ks = (T *)smem_raw, *Vs = Ks + BK * D, *Qs = Vs + BK * D, *dOs = Qs + BQ * D;
    T *Ps = dOs + BQ * D, *dSs = Ps + BK * BQ, *Ls = dSs + BK * BQ, *Los = Ls + BQ, *Ds = Los + BQ;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t kt = blockIdx.x, g = blockIdx.y, b = blockIdx.z, bg = b * a.Hkv + g;
    const int64_t Nq = a.Nq, Nk = a.Nk, j0 = kt * BK;
    const int d = a.d;

    fa_load_tile<T, D, KW, BK>(Ks, a.k + bg * Nk * d, j0, Nk, d, a.vec16);
    fa_load_tile<T, D, KW, BK>(Vs, a.v + bg * Nk * d, j0, Nk, d, a.vec16);
    T dk[RK][RD], dv[RK][RD]; /* rows j0 + ty + 16r, columns fa_col(tx, c) */
#pragma unroll
    for (int r = 0; r < RK; r++)
#pragma unroll
        for (int c = 0; c < RD; c++) dk[r][c] = dv[r][c] = 0;

    int64_t qt0, qt1;
    fa_query_tiles<T, BQ, BK>(a, j0, &qt0, &qt1);
    for (int64_t h = g * a.G; h < (g + 1) * a.G; h++) {
        const int64_t bh = b * a.H + h;
        const T *q = a.q + bh * Nq * d, *dout = a.dout + bh * Nq * d;
        const T *lse = a.lse + bh * Nq, *lse_lo = a.lse_lo ? a.lse_lo + bh * Nq : nullptr, *Drow = a.Drow + bh * Nq;
        for (int64_t qt = qt0; qt < qt1; qt++) {
            const int64_t i0 = qt * BQ;
            const fg_tile_kind kind = fa_tile_kind<T, BQ, BK>(a, i0, j0);
            if (kind == FG_TILE_MASKED) continue; /* uniform over the block */
            __syncthreads();                      /* the previous query tile is no longer read */
            fa_load_tile<T, D, KW, BQ>(Qs, q, i0, Nq, d, a.vec16);
            fa_load_tile<T, D, KW, BQ>(dOs, dout, i0, Nq, d, a.vec16);
            fg_cp_async_commit();
            load_rows<T, BQ>(Ls, Los, Ds, lse, lse_lo, Drow, i0, Nq);
            fg_cp_async_wait<0>(); /* Q, dO (and K, V the first time) */
            __syncthreads();
            recompute_tile<T, D, BQ, BK, MODS, true>(a, b, h, i0, j0, kind, Qs, dOs, Ks, Vs, Ls, Los, Ds, Ps, dSs);
            __syncthreads();
            /* dV += (P∘Z)ᵀ dO — the forward's O += dropout(P) V;  dK += dSᵀ Q — the forward's S = Q Kᵀ */
            fa_rows_times_tile<T, D, KW, BQ, RK>(dv, Ps, dOs, ty, tx);
            fa_rows_times_tile<T, D, KW, BQ, RK>(dk, dSs, Qs, ty, tx);
        }
    }
    /* the only writer of these rows of dk and dv: add (the backward accumulates) */
    T *dkh = a.dk ? a.dk + bg * Nk * d : nullptr, *dvh = a.dv ? a.dv + bg * Nk * d : nullptr;
#pragma unroll
    for (int r = 0; r < RK; r++) {
        const int64_t j = j0 + ty + 16 * r;
        if (j >= Nk) continue;
#pragma unroll
        for (int c = 0; c < RD; c++) {
            const int col = fa_col<T, D>(tx, c);
            if (col >= d) continue;
            if (dkh) dkh[j * d + col] += a.scale * dk[r][c];
            if (dvh) dvh[j * d + col] += dv[r][c];
        }
    }
}

/* kernel 3: dQ of one query tile of head (b, h), looping over the key tiles its rows see (no
 * atomics); K/V tiles pipelined as in the forward */
template <typename T, int D, bool MODS>
__global__ void __launch_bounds__(256, fa_dq_cfg<T, D>::min_blocks(MODS)) flash_bwd_dq_kernel(fa_args<T> a) {
    using C = flash_cfg<T, D>;
    constexpr int BQ = C::BBQ, BK = C::BBK, RQ = BQ / 16, KW = BK / 16, RD = D / 16, ST = fa_dq_cfg<T, D>::ST;
    FG_DYN_SMEM(smem_raw);
    T *Qs = (T *)smem_raw, *dOs = Qs + BQ * D, *KVs = dOs + BQ * D;
    T *dSs = KVs + ST * 2 * BK * D, *Ls = dSs + BQ * BK, *Los = Ls + BQ, *Ds = Los + BQ;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t qt = (int64_t)gridDim.x - 1 - blockIdx.x; /* causal: the longest rows first */
    const int64_t h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h, bg = b * a.Hkv + h / a.G;
    const int64_t Nq = a.Nq, Nk = a.Nk, i0 = qt * BQ;
    const int d = a.d;
    const T *k = a.k + bg * Nk * d, *v = a.v + bg * Nk * d;

    int64_t kt0, kt1, kf0, kf1;
    fa_key_tiles<T, BQ, BK>(a, i0, &kt0, &kt1, &kf0, &kf1);
    fa_load_tile<T, D, KW, BQ>(Qs, a.q + bh * Nq * d, i0, Nq, d, a.vec16);
    fa_load_tile<T, D, KW, BQ>(dOs, a.dout + bh * Nq * d, i0, Nq, d, a.vec16);
    if (ST == 2 && kt0 < kt1) {
        fa_load_tile<T, D, KW, BK>(KVs, k, kt0 * BK, Nk, d, a.vec16);
        fa_load_tile<T, D, KW, BK>(KVs + BK * D, v, kt0 * BK, Nk, d, a.vec16);
    }
    fg_cp_async_commit();
    load_rows<T, BQ>(Ls, Los, Ds, a.lse + bh * Nq, a.lse_lo ? a.lse_lo + bh * Nq : nullptr, a.Drow + bh * Nq, i0, Nq);
    T dq[RQ][RD]; /* rows i0 + ty + 16r, columns fa_col(tx, c) */
#pragma unroll
    for (int r = 0; r < RQ; r++)
#pragma unroll
        for (int c = 0; c < RD; c++) dq[r][c] = 0;

    int stage = 0;
    for (int64_t kt = kt0; kt < kt1; kt++) { /* the same tiles for every thread of the block */
        const fg_tile_kind kind = kt >= kf0 && kt < kf1 ? FG_TILE_FULL : FG_TILE_PARTIAL;
        const T *Ks = KVs + stage * 2 * BK * D, *Vs = Ks + BK * D;
        if (ST == 1) {
            __syncthreads(); /* the previous key tile is no longer read */
            fa_load_tile<T, D, KW, BK>(KVs, k, kt * BK, Nk, d, a.vec16);
            fa_load_tile<T, D, KW, BK>(KVs + BK * D, v, kt * BK, Nk, d, a.vec16);
            fg_cp_async_commit();
        }
        fg_cp_async_wait<0>();
        __syncthreads(); /* tile kt in place for everyone; the other stage and dS no longer read */
        if (ST == 2 && kt + 1 < kt1) {
            T *Kn = KVs + (stage ^ 1) * 2 * BK * D;
            fa_load_tile<T, D, KW, BK>(Kn, k, (kt + 1) * BK, Nk, d, a.vec16);
            fa_load_tile<T, D, KW, BK>(Kn + BK * D, v, (kt + 1) * BK, Nk, d, a.vec16);
            fg_cp_async_commit();
        }
        recompute_tile<T, D, BQ, BK, MODS, false>(a, b, h, i0, kt * BK, kind, Qs, dOs, Ks, Vs, Ls, Los, Ds, nullptr,
                                                  dSs);
        __syncthreads();
        /* dQ += dS K — the forward's S = Q Kᵀ (scale applied at the end) */
        fa_rows_times_tile<T, D, KW, BK, RQ>(dq, dSs, Ks, ty, tx);
        stage ^= ST - 1;
    }
    T *dqh = a.dq + bh * Nq * d;
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        const int64_t i = i0 + ty + 16 * r;
        if (i >= Nq) continue;
#pragma unroll
        for (int c = 0; c < RD; c++) {
            const int col = fa_col<T, D>(tx, c);
            if (col < d) dqh[i * d + col] += a.scale * dq[r][c];
        }
    }
}

/* ============================================================================================
 * naive kernels
 * ============================================================================================ */

/* One warp per row of S (rows = B·H·Nq, S already scaled): variants, mask, softmax in place (P),
 * lse — ops/attention_naive.c's row loop: softcap and ALiBi on the visible keys [lo, hi) of the row
 * (fa_modify), the max and the sum over them in T, masked entries 0, L = max + log(sum) in float64
 * rounded once. Only a's sizes and variant fields are read. */
template <typename T> __global__ void naive_softmax_kernel(T *P, T *lse, int64_t rows, fa_args<T> a) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32), Nq = a.Nq, Nk = a.Nk;
    const bool mods = a.softcap > (T)0 || a.alibi;
    for (int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
        const int64_t i = row % Nq, h = (row / Nq) % a.H;
        int64_t lo, hi;
        fa_row_range(a, i, &lo, &hi);
        const double slope = fa_slope(a, h);
        T *p = P + row * Nk;
        T mx = fg_neg_inf<T>();
        for (int64_t j = lo + lane; j < hi; j += 32) {
            T x = p[j];
            if (mods) p[j] = x = fa_modify(a, x, slope, i + (Nk - Nq), j, (T *)nullptr);
            mx = x > mx ? x : mx;
        }
        mx = fg_warp_max(mx);
        if (mx == fg_neg_inf<T>()) { /* every visible score -inf or NaN */
            T nan = 0;
            for (int64_t j = lo + lane; j < hi; j += 32) nan += p[j] != p[j] ? (T)1 : (T)0;
            if (fg_warp_sum(nan) == (T)0) { /* no visible key: P = 0, lse = -inf */
                for (int64_t j = lane; j < Nk; j += 32) p[j] = 0;
                if (lane == 0) lse[row] = fg_neg_inf<T>();
                continue;
            }
            mx = 0; /* a NaN score: the sum below makes P and lse NaN, as with a finite max */
        }
        T sum = 0;
        for (int64_t j = lo + lane; j < hi; j += 32) {
            T e = fg_exp(p[j] - mx);
            p[j] = e;
            sum += e;
        }
        sum = fg_warp_sum(sum);
        for (int64_t j = lane; j < Nk; j += 32)
            if (j < lo || j >= hi) p[j] = 0;
        const T inv = (T)1 / sum;
        for (int64_t j = lo + lane; j < hi; j += 32) p[j] *= inv;
        if (lane == 0) lse[row] = (T)((double)mx + log((double)sum));
    }
}

/* W = P ∘ Z over all (B, H, Nq, Nk) elements (dropout on the weights) */
template <typename T>
__global__ void naive_dropout_kernel(T *W, const T *P, int64_t total, int64_t H, int64_t Nq, int64_t Nk, uint64_t seed,
                                     uint32_t thr, T inv_keep) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = e % Nk, i = (e / Nk) % Nq, h = (e / (Nk * Nq)) % H, b = e / (Nk * Nq * H);
        W[e] = fg_attn_keep(seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j) ? P[e] * inv_keep : (T)0;
    }
}

/* One warp per row: dP∘Z (in place in dS), r = Σ_j (dP∘Z)_j P_j, dS = P ∘ (dP∘Z − r); with S1 (the
 * scaled scores before the variants, recomputed) also through the softcap: dS1 = dS ∘ (1 − tanh²(S1/c))
 * where dS ≠ 0 — ops/attention_naive.c's backward. */
template <typename T>
__global__ void naive_dsoftmax_kernel(T *dS, const T *P, const T *S1, T inv_softcap, int64_t rows, int64_t H,
                                      int64_t Nq, int64_t Nk, uint64_t seed, uint32_t thr, T inv_keep) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
        const int64_t i = row % Nq, h = (row / Nq) % H, b = row / (Nq * H);
        T *ds = dS + row * Nk;
        const T *p = P + row * Nk;
        T r = 0;
        for (int64_t j = lane; j < Nk; j += 32) {
            T x = ds[j];
            if (thr)
                x = fg_attn_keep(seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j) ? x * inv_keep : (T)0;
            ds[j] = x;
            r += x * p[j];
        }
        r = fg_warp_sum(r);
        for (int64_t j = lane; j < Nk; j += 32) {
            T x = p[j] * (ds[j] - r);
            if (S1 && x != (T)0) {
                const T t = fg_tanh(S1[row * Nk + j] * inv_softcap);
                x *= (T)1 - t * t;
            }
            ds[j] = x;
        }
    }
}

/* ============================================================================================
 * host helpers: shared-memory sizes, kernel arguments, the head-dim width
 * ============================================================================================ */

template <typename T, int D> static size_t fwd_smem() { return fa_fwd_cfg<T, D>::BYTES; }
template <typename T, int D> static size_t dkdv_smem() { return fa_dkdv_cfg<T, D>::BYTES; }
template <typename T, int D> static size_t dq_smem() { return fa_dq_cfg<T, D>::BYTES; }

template <typename T> static fa_args<T> make_args(const fg_attn_problem *pr) {
    fa_args<T> a;
    memset(&a, 0, sizeof a);
    a.B = pr->B;
    a.H = pr->H;
    a.Nq = pr->Nq;
    a.Nk = pr->Nk;
    a.d = (int)pr->d;
    a.scale = (T)pr->scale;
    a.causal = pr->causal;
    a.seed = pr->seed;
    a.thr = fg_dropout_threshold(pr->dropout_p);
    a.inv_keep = (T)(1.0 / (1.0 - pr->dropout_p));
    a.Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : pr->H;
    a.G = a.Hkv > 0 ? pr->H / a.Hkv : 1;
    a.window = pr->var.window ? 1 : 0;
    a.wl = pr->var.window_left;
    a.wr = pr->var.window_right;
    a.alibi = pr->var.alibi ? 1 : 0;
    a.slopes = nullptr; /* the caller sets a device copy of pr->var.alibi_slopes */
    a.softcap = pr->var.softcap > 0 ? (T)pr->var.softcap : (T)0;
    a.inv_softcap = pr->var.softcap > 0 ? (T)(1.0 / pr->var.softcap) : (T)0;
    return a;
}

/* a.vec16 for the pointers in a: whole 16-byte chunks can be copied */
template <typename T> static int fa_vec16(const fa_args<T> &a) {
    const uintptr_t any = (uintptr_t)a.q | (uintptr_t)a.k | (uintptr_t)a.v | (uintptr_t)a.dout;
    return a.d % (16 / (int)sizeof(T)) == 0 && any % 16 == 0;
}

/* The compile-time width D for head dim d; 0 if unsupported. */
static inline int flash_width(int64_t d) { return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0; }

#endif /* FG_ATTENTION_KERNELS_CUH */
