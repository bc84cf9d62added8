/* attention_kernels.cuh — the attention kernels of cuda/attention.cu (the algorithm is described
 * there), with the small host helpers that size and parameterize them. Internal to cuda/ (C++).
 *
 * Kept apart from the host code so the very same kernel source also runs on the CPU: the emulator
 * in tests/cuda/emu/ defines FG_CUDA_EMU and the CUDA built-ins (threads as fibers, __syncthreads
 * and warp shuffles as barriers) and checks these kernels against the CPU reference on a machine
 * without a GPU (`make cuda-emu`). So this file uses nothing from the CUDA runtime: only
 * cuda/device_math.cuh, the host/device headers of ops/shared/ (attn_tiles.h, attn_variant.h,
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

/* Tile sizes: BQ query rows × BK keys per block, for the forward (F) and backward (B) kernels.
 * Shared-memory rows are padded: Q/K/V/dO rows to D + 1 elements (conflict-free column reads),
 * score rows to BK + SPAD. */
template <typename T, int D> struct flash_cfg;
template <int D> struct flash_cfg<float, D> {
    static constexpr int FBQ = 64, FBK = 64;
    /* forward blocks per SM the registers must leave room for (__launch_bounds__): shared memory
     * (70 KB a block) allows 3 up to D = 64, which caps ptxas at 80 registers — what the kernel
     * used before the variants; left alone, ptxas now picks 128 and only 2 blocks fit. (It spills
     * 16 bytes of loop-invariant values in the plain D = 64 instance.) Wider D: shared memory
     * allows 1. */
    static constexpr int FWD_MIN_BLOCKS = D <= 64 ? 3 : 1;
    static constexpr int BBQ = D <= 128 ? 64 : 32, BBK = D <= 128 ? 64 : 32;
    static constexpr int SPAD = 16;
};
template <int D> struct flash_cfg<double, D> {
    static constexpr int FBQ = 32, FBK = 32;
    static constexpr int FWD_MIN_BLOCKS = 1;
    static constexpr int BBQ = D <= 128 ? 32 : 16, BBK = D <= 128 ? 32 : 16;
    static constexpr int SPAD = 1;
};

/* ============================================================================================
 * flash kernels
 * ============================================================================================ */

/* rows [r0, r0 + ROWS) of a (nrows, d) matrix into a (ROWS, LD) shared tile; zeros past nrows
 * and past d */
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_tile(T *S, const T *g, int64_t r0, int64_t nrows, int d) {
    constexpr int LD = D + 1;
    for (int e = threadIdx.x; e < ROWS * D; e += blockDim.x) {
        int r = e / D, c = e % D;
        int64_t gr = r0 + r;
        S[r * LD + c] = (gr < nrows && c < d) ? g[gr * d + c] : (T)0;
    }
}

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

template <typename T, int D, bool MODS>
__global__ void __launch_bounds__(256, flash_cfg<T, D>::FWD_MIN_BLOCKS) flash_fwd_kernel(fa_args<T> a) {
    using C = flash_cfg<T, D>;
    constexpr int BQ = C::FBQ, BK = C::FBK, RQ = BQ / 16, RK = BK / 16, RD = D / 16;
    constexpr int LD = D + 1, LDS = BK + C::SPAD;
    FG_DYN_SMEM(smem_raw);
    T *Qs = (T *)smem_raw, *Ks = Qs + BQ * LD, *Vs = Ks + BK * LD, *Ps = Vs + BK * LD;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t qt = (int64_t)gridDim.x - 1 - blockIdx.x; /* causal: the longest rows first */
    const int64_t h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h, bg = b * a.Hkv + h / a.G;
    const int64_t Nq = a.Nq, Nk = a.Nk, i0 = qt * BQ, off = Nk - Nq;
    const int d = a.d;
    const T *q = a.q + bh * Nq * d, *k = a.k + bg * Nk * d, *v = a.v + bg * Nk * d;
    const double slope = MODS ? fa_slope(a, h) : 0.0;

    load_tile<T, D, BQ>(Qs, q, i0, Nq, d);
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
    for (int64_t kt = kt0; kt < kt1; kt++) { /* the same tiles for every thread of the block */
        const int64_t j0 = kt * BK;
        const fg_tile_kind kind = kt >= kf0 && kt < kf1 ? FG_TILE_FULL : FG_TILE_PARTIAL;
        __syncthreads(); /* the previous tile's Ks, Vs, Ps are no longer read */
        load_tile<T, D, BK>(Ks, k, j0, Nk, d);
        load_tile<T, D, BK>(Vs, v, j0, Nk, d);
        __syncthreads();

        /* S = Q Kᵀ for this thread's RQ × RK elements */
        T s[RQ][RK];
#pragma unroll
        for (int r = 0; r < RQ; r++)
#pragma unroll
            for (int c = 0; c < RK; c++) s[r][c] = 0;
#pragma unroll 8
        for (int e = 0; e < D; e++) {
            T qv[RQ], kv[RK];
#pragma unroll
            for (int r = 0; r < RQ; r++) qv[r] = Qs[(ty + 16 * r) * LD + e];
#pragma unroll
            for (int c = 0; c < RK; c++) kv[c] = Ks[(tx + 16 * c) * LD + e];
#pragma unroll
            for (int r = 0; r < RQ; r++)
#pragma unroll
                for (int c = 0; c < RK; c++) s[r][c] += qv[r] * kv[c];
        }

        /* scale, variants, mask, online softmax, dropout; P -> shared memory */
#pragma unroll
        for (int r = 0; r < RQ; r++) {
            const int64_t i = i0 + ty + 16 * r;
            int64_t lo = 0, hi = Nk;
            if (kind != FG_TILE_FULL) fa_row_range(a, i, &lo, &hi);
            T rmax = fg_neg_inf<T>();
#pragma unroll
            for (int c = 0; c < RK; c++) {
                const int64_t j = j0 + tx + 16 * c;
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
                for (int c = 0; c < RK; c++) { /* each score -inf or NaN: a NaN stays, and makes l NaN */
                    if (s[r][c] == fg_neg_inf<T>()) s[r][c] = 0;
                    rsum += s[r][c];
                }
            } else { /* exp(-inf − m') = 0: the first block gets alpha = 0 */
                alpha = fg_exp(m[r] - mnew);
#pragma unroll
                for (int c = 0; c < RK; c++) {
                    s[r][c] = fg_exp(s[r][c] - mnew);
                    rsum += s[r][c];
                }
            }
            rsum = half_warp_sum(rsum);
            l[r] = alpha * l[r] + rsum; /* l keeps the full sum; dropout acts on the weights only */
            m[r] = mnew;
#pragma unroll
            for (int c = 0; c < RD; c++) acc[r][c] *= alpha;
#pragma unroll
            for (int c = 0; c < RK; c++) {
                T p = s[r][c];
                if (a.thr && p != (T)0) {
                    const int64_t j = j0 + tx + 16 * c;
                    p = fg_attn_keep(a.seed, a.thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j) ? p * a.inv_keep
                                                                                                        : (T)0;
                }
                Ps[(ty + 16 * r) * LDS + tx + 16 * c] = p;
            }
        }
        __syncthreads();

        /* O += P V */
#pragma unroll 4
        for (int jj = 0; jj < BK; jj++) {
            T pv[RQ], vv[RD];
#pragma unroll
            for (int r = 0; r < RQ; r++) pv[r] = Ps[(ty + 16 * r) * LDS + jj];
#pragma unroll
            for (int c = 0; c < RD; c++) vv[c] = Vs[jj * LD + tx + 16 * c];
#pragma unroll
            for (int r = 0; r < RQ; r++)
#pragma unroll
                for (int c = 0; c < RD; c++) acc[r][c] += pv[r] * vv[c];
        }
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
            const int col = tx + 16 * c;
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
 * (b, h) and keys [j0, j0 + BK), whose Q, dO, K, V tiles and per-row L, D are in shared memory,
 * recompute P and dS for this thread's elements (rows ty + 16r, keys tx + 16c) and store P∘Z (if
 * Ps) and dS in shared memory. `kind` is the tile's fa_tile_kind (never MASKED here). */
template <typename T, int D, int BQ, int BK, int LDS, bool MODS>
__device__ __forceinline__ void recompute_tile(const fa_args<T> &a, int64_t b, int64_t h, int64_t i0, int64_t j0,
                                               fg_tile_kind kind, const T *Qs, const T *dOs, const T *Ks, const T *Vs,
                                               const T *Ls, const T *Los, const T *Ds, T *Ps, T *dSs) {
    constexpr int RQ = BQ / 16, RK = BK / 16, LD = D + 1;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t off = a.Nk - a.Nq;
    const double slope = MODS ? fa_slope(a, h) : 0.0;
    T s[RQ][RK], dp[RQ][RK];
#pragma unroll
    for (int r = 0; r < RQ; r++)
#pragma unroll
        for (int c = 0; c < RK; c++) s[r][c] = dp[r][c] = 0;
            /* S = Q Kᵀ and dP = dO Vᵀ in one pass over the head dim */
#pragma unroll 8
    for (int e = 0; e < D; e++) {
        T qv[RQ], dov[RQ], kv[RK], vv[RK];
#pragma unroll
        for (int r = 0; r < RQ; r++) {
            qv[r] = Qs[(ty + 16 * r) * LD + e];
            dov[r] = dOs[(ty + 16 * r) * LD + e];
        }
#pragma unroll
        for (int c = 0; c < RK; c++) {
            kv[c] = Ks[(tx + 16 * c) * LD + e];
            vv[c] = Vs[(tx + 16 * c) * LD + e];
        }
#pragma unroll
        for (int r = 0; r < RQ; r++)
#pragma unroll
            for (int c = 0; c < RK; c++) {
                s[r][c] += qv[r] * kv[c];
                dp[r][c] += dov[r] * vv[c];
            }
    }
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        const int ii = ty + 16 * r;
        const int64_t i = i0 + ii;
        const T L = Ls[ii], Llo = Los[ii], Di = Ds[ii];
        int64_t lo = 0, hi = a.Nk;
        if (kind != FG_TILE_FULL) fa_row_range(a, i, &lo, &hi);
#pragma unroll
        for (int c = 0; c < RK; c++) {
            const int jj = tx + 16 * c;
            const int64_t j = j0 + jj;
            /* rows past Nq and rows that see no key have L = -inf: P = 0 */
            const int vis = L != fg_neg_inf<T>() && (kind == FG_TILE_FULL || (j >= lo && j < hi));
            /* recompute S = variants(scale · q·k) and g = ∂S/∂(scale · q·k), then
             * P = exp((S − L) − lse_lo) (the naive kernel stored P) */
            T x = s[r][c] * a.scale, g = 1;
            if (MODS) x = fa_modify(a, x, slope, i + off, j, &g);
            const T P = vis ? fg_exp((x - L) - Llo) : (T)0;
            T Z = 1;
            if (a.thr && P != (T)0)
                Z = fg_attn_keep(a.seed, a.thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j) ? a.inv_keep : (T)0;
            if (Ps) Ps[ii * LDS + jj] = P * Z;
            /* dP = (dO Vᵀ) ∘ Z;  dS = P ∘ (dP − D) — the forward's P = softmax(S);
             * then through the softcap: dS1 = dS ∘ (1 − tanh²) (ALiBi's derivative is 1) */
            T ds = P * (dp[r][c] * Z - Di);
            if (MODS && ds != (T)0) ds *= g; /* g = 1 without softcap */
            dSs[ii * LDS + jj] = ds;
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
template <typename T, int D, bool MODS> __global__ void __launch_bounds__(256) flash_bwd_dkdv_kernel(fa_args<T> a) {
    using C = flash_cfg<T, D>;
    constexpr int BQ = C::BBQ, BK = C::BBK, RK = BK / 16, RD = D / 16;
    constexpr int LD = D + 1, LDS = BK + C::SPAD;
    FG_DYN_SMEM(smem_raw);
    T *Ks = (T *)smem_raw, *Vs = Ks + BK * LD, *Qs = Vs + BK * LD, *dOs = Qs + BQ * LD;
    T *Ps = dOs + BQ * LD, *dSs = Ps + BQ * LDS, *Ls = dSs + BQ * LDS, *Los = Ls + BQ, *Ds = Los + BQ;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t kt = blockIdx.x, g = blockIdx.y, b = blockIdx.z, bg = b * a.Hkv + g;
    const int64_t Nq = a.Nq, Nk = a.Nk, j0 = kt * BK;
    const int d = a.d;

    load_tile<T, D, BK>(Ks, a.k + bg * Nk * d, j0, Nk, d);
    load_tile<T, D, BK>(Vs, a.v + bg * Nk * d, j0, Nk, d);
    T dk[RK][RD], dv[RK][RD]; /* rows j0 + ty + 16r, columns tx + 16c */
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
            load_tile<T, D, BQ>(Qs, q, i0, Nq, d);
            load_tile<T, D, BQ>(dOs, dout, i0, Nq, d);
            load_rows<T, BQ>(Ls, Los, Ds, lse, lse_lo, Drow, i0, Nq);
            __syncthreads();
            recompute_tile<T, D, BQ, BK, LDS, MODS>(a, b, h, i0, j0, kind, Qs, dOs, Ks, Vs, Ls, Los, Ds, Ps, dSs);
            __syncthreads();
            /* dV += (P∘Z)ᵀ dO — the forward's O += dropout(P) V;  dK += dSᵀ Q — the forward's S = Q Kᵀ */
#pragma unroll 4
            for (int ii = 0; ii < BQ; ii++) {
                T pz[RK], ds[RK], dov[RD], qv[RD];
#pragma unroll
                for (int r = 0; r < RK; r++) {
                    pz[r] = Ps[ii * LDS + ty + 16 * r];
                    ds[r] = dSs[ii * LDS + ty + 16 * r];
                }
#pragma unroll
                for (int c = 0; c < RD; c++) {
                    dov[c] = dOs[ii * LD + tx + 16 * c];
                    qv[c] = Qs[ii * LD + tx + 16 * c];
                }
#pragma unroll
                for (int r = 0; r < RK; r++)
#pragma unroll
                    for (int c = 0; c < RD; c++) {
                        dv[r][c] += pz[r] * dov[c];
                        dk[r][c] += ds[r] * qv[c];
                    }
            }
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
            const int col = tx + 16 * c;
            if (col >= d) continue;
            if (dkh) dkh[j * d + col] += a.scale * dk[r][c];
            if (dvh) dvh[j * d + col] += dv[r][c];
        }
    }
}

/* kernel 3: dQ of one query tile of head (b, h), looping over the key tiles its rows see (no
 * atomics) */
template <typename T, int D, bool MODS> __global__ void __launch_bounds__(256) flash_bwd_dq_kernel(fa_args<T> a) {
    using C = flash_cfg<T, D>;
    constexpr int BQ = C::BBQ, BK = C::BBK, RQ = BQ / 16, RD = D / 16;
    constexpr int LD = D + 1, LDS = BK + C::SPAD;
    FG_DYN_SMEM(smem_raw);
    T *Qs = (T *)smem_raw, *dOs = Qs + BQ * LD, *Ks = dOs + BQ * LD, *Vs = Ks + BK * LD;
    T *dSs = Vs + BK * LD, *Ls = dSs + BQ * LDS, *Los = Ls + BQ, *Ds = Los + BQ;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t qt = (int64_t)gridDim.x - 1 - blockIdx.x; /* causal: the longest rows first */
    const int64_t h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h, bg = b * a.Hkv + h / a.G;
    const int64_t Nq = a.Nq, Nk = a.Nk, i0 = qt * BQ;
    const int d = a.d;
    const T *k = a.k + bg * Nk * d, *v = a.v + bg * Nk * d;

    load_tile<T, D, BQ>(Qs, a.q + bh * Nq * d, i0, Nq, d);
    load_tile<T, D, BQ>(dOs, a.dout + bh * Nq * d, i0, Nq, d);
    load_rows<T, BQ>(Ls, Los, Ds, a.lse + bh * Nq, a.lse_lo ? a.lse_lo + bh * Nq : nullptr, a.Drow + bh * Nq, i0, Nq);
    T dq[RQ][RD]; /* rows i0 + ty + 16r, columns tx + 16c */
#pragma unroll
    for (int r = 0; r < RQ; r++)
#pragma unroll
        for (int c = 0; c < RD; c++) dq[r][c] = 0;

    int64_t kt0, kt1, kf0, kf1;
    fa_key_tiles<T, BQ, BK>(a, i0, &kt0, &kt1, &kf0, &kf1);
    for (int64_t kt = kt0; kt < kt1; kt++) { /* the same tiles for every thread of the block */
        const fg_tile_kind kind = kt >= kf0 && kt < kf1 ? FG_TILE_FULL : FG_TILE_PARTIAL;
        __syncthreads(); /* the previous key tile is no longer read */
        load_tile<T, D, BK>(Ks, k, kt * BK, Nk, d);
        load_tile<T, D, BK>(Vs, v, kt * BK, Nk, d);
        __syncthreads();
        recompute_tile<T, D, BQ, BK, LDS, MODS>(a, b, h, i0, kt * BK, kind, Qs, dOs, Ks, Vs, Ls, Los, Ds, nullptr, dSs);
        __syncthreads();
        /* dQ += dS K — the forward's S = Q Kᵀ (scale applied at the end) */
#pragma unroll 4
        for (int jj = 0; jj < BK; jj++) {
            T ds[RQ], kv[RD];
#pragma unroll
            for (int r = 0; r < RQ; r++) ds[r] = dSs[(ty + 16 * r) * LDS + jj];
#pragma unroll
            for (int c = 0; c < RD; c++) kv[c] = Ks[jj * LD + tx + 16 * c];
#pragma unroll
            for (int r = 0; r < RQ; r++)
#pragma unroll
                for (int c = 0; c < RD; c++) dq[r][c] += ds[r] * kv[c];
        }
    }
    T *dqh = a.dq + bh * Nq * d;
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        const int64_t i = i0 + ty + 16 * r;
        if (i >= Nq) continue;
#pragma unroll
        for (int c = 0; c < RD; c++) {
            const int col = tx + 16 * c;
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

template <typename T, int D> static size_t fwd_smem() {
    using C = flash_cfg<T, D>;
    return sizeof(T) * ((size_t)(C::FBQ + 2 * C::FBK) * (D + 1) + (size_t)C::FBQ * (C::FBK + C::SPAD));
}
template <typename T, int D> static size_t dkdv_smem() {
    using C = flash_cfg<T, D>;
    return sizeof(T) *
           ((size_t)(2 * C::BBK + 2 * C::BBQ) * (D + 1) + 2 * (size_t)C::BBQ * (C::BBK + C::SPAD) + 3 * (size_t)C::BBQ);
}
template <typename T, int D> static size_t dq_smem() {
    using C = flash_cfg<T, D>;
    return sizeof(T) *
           ((size_t)(2 * C::BBQ + 2 * C::BBK) * (D + 1) + (size_t)C::BBQ * (C::BBK + C::SPAD) + 3 * (size_t)C::BBQ);
}

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

/* The compile-time width D for head dim d; 0 if unsupported. */
static inline int flash_width(int64_t d) { return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0; }

#endif /* FG_ATTENTION_KERNELS_CUH */
