/* attention.cu — scaled dot-product attention on the GPU: FlashAttention kernels (forward with an
 * online softmax; FlashAttention-2-style backward that recomputes P from the saved logsumexp) and a
 * naive reference that materializes S and P through cuBLAS.
 *
 * CPU reference: ops/attention_flash.c and ops/attention_naive.c (same math, same masking, same
 * dropout function); tests/cuda/ checks flash against naive against the CPU.
 *
 * Legend: B batch, H heads, Nq queries, Nk keys, d head dim (D = d rounded up to 32/64/128/256,
 * the kernel's compile-time width; columns d..D-1 are zero in shared memory and never stored).
 *   q (B, H, Nq, d); k, v (B, H, Nk, d); o, dout, dq (B, H, Nq, d); dk, dv (B, H, Nk, d);
 *   lse (B, H, Nq); p (B, H, Nq, Nk) — naive only.
 *   Causal mask, bottom-right aligned: query i sees key j iff j <= i + Nk − Nq (cuda/attn_tiles.h).
 *   Dropout: element (b, h, i, j) of P is kept iff fg_attn_keep(seed, threshold, b, h, i, j)
 *   (tensor/philox.h, the same function the CPU calls) and then scaled by 1/(1 − p).
 *
 * ---- flash forward: one thread block per (q tile of BQ rows, h, b), 256 threads ----
 *   Q tile in shared memory for the whole block; for each key tile kt < kt_end(qt) (tiles past the
 *   causal horizon are skipped entirely):
 *     K, V tiles -> shared memory
 *     S  = scale · Q Kᵀ                      (BQ × BK, registers; masked only in PARTIAL tiles)
 *     m' = max(m, rowmax S);  P = exp(S − m');  l = exp(m − m') l + rowsum P
 *     O  = exp(m − m') O + dropout(P) V      (O accumulates in registers)
 *   then O /= l and lse = m + log l. It writes O and lse only (saved for backward: O, lse).
 *   Thread (ty, tx) of the 16 × 16 grid owns rows ty + 16a of the tile and columns tx + 16b, so
 *   a row's max and sum are shuffles among the 16 lanes that share ty (half a warp).
 *
 * ---- flash backward (deterministic: no floating-point atomics) ----
 *   kernel 1: Dᵢ = rowsum(dOᵢ ∘ Oᵢ)   (= Σ_j P_ij dP_ij with dropout, as on the CPU)
 *   kernel 2: one block per (key tile, h, b). K, V tiles stay in shared memory; dK and dV
 *             accumulate in registers over the query tiles qt >= qt_begin(kt) that see the tile:
 *               recompute S = scale · Q Kᵀ, P = exp(S − L)          ("recompute": naive stored P)
 *               dP = (dO Vᵀ) ∘ Z;  dS = P ∘ (dP − D)
 *               dV += (P∘Z)ᵀ dO;   dK += scale · dSᵀ Q
 *             then adds them into dk, dv. Each element of dk, dv has exactly one writer.
 *   kernel 3: one block per (query tile, h, b): loops over key tiles kt < kt_end(qt), recomputes
 *             P and dS the same way and accumulates dQ += scale · dS K in registers; one writer per
 *             element of dq. (dS is computed twice — by kernels 2 and 3 — which is the price of
 *             dropping the atomics; both use identical arithmetic.)
 *   Every sum runs in a fixed order, so two runs give bit-identical gradients.
 *
 * Precision: float32 inputs accumulate in float32, float64 in float64 (as the CPU kernels do).
 * Tile sizes per (dtype, D) are chosen so a block's shared memory fits Hopper's 227 KB (see
 * flash_cfg below); the opt-in limit is raised with cudaFuncSetAttribute before each first launch.
 *
 * ---- naive: S = scale · Q Kᵀ by strided-batched cuBLAS over all (b, h); a row kernel masks,
 *   normalizes and writes P and lse; O = (P∘Z) V by cuBLAS. Backward from P, as the CPU's.
 */
#include <limits.h>
#include <string.h>

#include "cuda/attn_tiles.h"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"
#include "tensor/philox.h"

/* Kernel arguments (one struct for all kernels; unused pointers are NULL). */
template <typename T>
struct fa_args {
    const T *q, *k, *v, *o, *dout, *lse, *Drow;
    T *o_out, *lse_out, *dq, *dk, *dv, *Drow_out;
    int64_t B, H, Nq, Nk;
    int d;
    T scale;
    int causal;
    uint64_t seed;
    uint32_t thr; /* fg_dropout_threshold(p); 0 = no dropout */
    T inv_keep;   /* 1 / (1 − p) */
};

/* Tile sizes: BQ query rows × BK keys per block, for the forward (F) and backward (B) kernels.
 * Shared-memory rows are padded: Q/K/V/dO rows to D + 1 elements (conflict-free column reads),
 * score rows to BK + SPAD. */
template <typename T, int D> struct flash_cfg;
template <int D> struct flash_cfg<float, D> {
    static constexpr int FBQ = 64, FBK = 64;
    static constexpr int BBQ = D <= 128 ? 64 : 32, BBK = D <= 128 ? 64 : 32;
    static constexpr int SPAD = 16;
};
template <int D> struct flash_cfg<double, D> {
    static constexpr int FBQ = 32, FBK = 32;
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

template <typename T, int D>
__global__ void __launch_bounds__(256) flash_fwd_kernel(fa_args<T> a) {
    using C = flash_cfg<T, D>;
    constexpr int BQ = C::FBQ, BK = C::FBK, RQ = BQ / 16, RK = BK / 16, RD = D / 16;
    constexpr int LD = D + 1, LDS = BK + C::SPAD;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *Qs = (T *)smem_raw, *Ks = Qs + BQ * LD, *Vs = Ks + BK * LD, *Ps = Vs + BK * LD;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t qt = (int64_t)gridDim.x - 1 - blockIdx.x; /* causal: the longest rows first */
    const int64_t h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h;
    const int64_t Nq = a.Nq, Nk = a.Nk, i0 = qt * BQ;
    const int d = a.d;
    const T *q = a.q + bh * Nq * d, *k = a.k + bh * Nk * d, *v = a.v + bh * Nk * d;

    load_tile<T, D, BQ>(Qs, q, i0, Nq, d);
    T m[RQ], l[RQ], acc[RQ][RD];
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        m[r] = fg_neg_inf<T>();
        l[r] = 0;
#pragma unroll
        for (int c = 0; c < RD; c++) acc[r][c] = 0;
    }

    const int64_t kt_end = fg_attn_kt_end(qt, Nq, Nk, BQ, BK, a.causal);
    for (int64_t kt = 0; kt < kt_end; kt++) {
        const int64_t j0 = kt * BK;
        __syncthreads(); /* the previous tile's Ks, Vs, Ps are no longer read */
        load_tile<T, D, BK>(Ks, k, j0, Nk, d);
        load_tile<T, D, BK>(Vs, v, j0, Nk, d);
        __syncthreads();
        const fg_tile_kind kind = fg_attn_tile_kind(qt, kt, Nq, Nk, BQ, BK, a.causal);

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

        /* scale, mask, online softmax, dropout; P -> shared memory */
#pragma unroll
        for (int r = 0; r < RQ; r++) {
            const int64_t i = i0 + ty + 16 * r;
            T rmax = fg_neg_inf<T>();
#pragma unroll
            for (int c = 0; c < RK; c++) {
                const int64_t j = j0 + tx + 16 * c;
                T x = s[r][c] * a.scale;
                if (kind != FG_TILE_FULL && !fg_attn_visible(i, j, Nq, Nk, a.causal)) x = fg_neg_inf<T>();
                s[r][c] = x;
                rmax = x > rmax ? x : rmax;
            }
            rmax = half_warp_max(rmax);
            const T mnew = m[r] > rmax ? m[r] : rmax;
            T alpha = 1, rsum = 0;
            if (mnew == fg_neg_inf<T>()) { /* nothing seen yet: every weight is 0 */
#pragma unroll
                for (int c = 0; c < RK; c++) s[r][c] = 0;
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

    /* O /= l, lse = m + log l; a row that saw no key: O = 0, lse = -inf */
    T *o = a.o_out + bh * Nq * d, *lse = a.lse_out + bh * Nq;
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        const int64_t i = i0 + ty + 16 * r;
        if (i >= Nq) continue;
        const int seen = l[r] > (T)0;
        const T inv = seen ? (T)1 / l[r] : (T)0;
#pragma unroll
        for (int c = 0; c < RD; c++) {
            const int col = tx + 16 * c;
            if (col < d) o[i * d + col] = seen ? acc[r][c] * inv : (T)0;
        }
        if (tx == 0) lse[i] = seen ? m[r] + fg_log(l[r]) : fg_neg_inf<T>();
    }
}

/* kernel 1 of the backward: D[row] = Σ_c dout[row, c] · o[row, c], one warp per row */
template <typename T>
__global__ void flash_bwd_rowdot_kernel(T *Drow, const T *dout, const T *o, int64_t rows, int d) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
        T s = 0;
        for (int c = lane; c < d; c += 32) s += dout[r * d + c] * o[r * d + c];
        s = fg_warp_sum(s);
        if (lane == 0) Drow[r] = s;
    }
}

/* The shared step of kernels 2 and 3: for the (BQ × BK) tile (qt, kt) whose Q, dO, K, V tiles and
 * per-row L, D are in shared memory, recompute P and dS for this thread's elements (rows
 * ty + 16r, keys tx + 16c) and store P∘Z (if Ps) and dS in shared memory. */
template <typename T, int D, int BQ, int BK, int LDS>
__device__ __forceinline__ void recompute_tile(const fa_args<T> &a, int64_t b, int64_t h, int64_t qt, int64_t kt,
                                               const T *Qs, const T *dOs, const T *Ks, const T *Vs, const T *Ls,
                                               const T *Ds, T *Ps, T *dSs) {
    constexpr int RQ = BQ / 16, RK = BK / 16, LD = D + 1;
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t i0 = qt * BQ, j0 = kt * BK;
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
    const fg_tile_kind kind = fg_attn_tile_kind(qt, kt, a.Nq, a.Nk, BQ, BK, a.causal);
#pragma unroll
    for (int r = 0; r < RQ; r++) {
        const int ii = ty + 16 * r;
        const int64_t i = i0 + ii;
        const T L = Ls[ii], Di = Ds[ii];
#pragma unroll
        for (int c = 0; c < RK; c++) {
            const int jj = tx + 16 * c;
            const int64_t j = j0 + jj;
            /* rows past Nq and rows that see no key have L = -inf: P = 0 */
            const int vis = L != fg_neg_inf<T>() &&
                            (kind == FG_TILE_FULL || fg_attn_visible(i, j, a.Nq, a.Nk, a.causal));
            /* recompute P = exp(S − L) (the naive kernel stored it) */
            const T P = vis ? fg_exp(s[r][c] * a.scale - L) : (T)0;
            T Z = 1;
            if (a.thr && P != (T)0)
                Z = fg_attn_keep(a.seed, a.thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j) ? a.inv_keep : (T)0;
            if (Ps) Ps[ii * LDS + jj] = P * Z;
            /* dP = (dO Vᵀ) ∘ Z;  dS = P ∘ (dP − D) — the forward's P = softmax(S) */
            dSs[ii * LDS + jj] = P * (dp[r][c] * Z - Di);
        }
    }
}

/* rows [r0, r0 + ROWS) of lse and D into shared memory (-inf and 0 past Nq) */
template <typename T, int ROWS>
__device__ __forceinline__ void load_rows(T *Ls, T *Ds, const T *lse, const T *Drow, int64_t r0, int64_t Nq) {
    for (int r = threadIdx.x; r < ROWS; r += blockDim.x) {
        const int64_t i = r0 + r;
        Ls[r] = i < Nq ? lse[i] : fg_neg_inf<T>();
        Ds[r] = i < Nq ? Drow[i] : (T)0;
    }
}

/* kernel 2: dK, dV of one key tile */
template <typename T, int D>
__global__ void __launch_bounds__(256) flash_bwd_dkdv_kernel(fa_args<T> a) {
    using C = flash_cfg<T, D>;
    constexpr int BQ = C::BBQ, BK = C::BBK, RK = BK / 16, RD = D / 16;
    constexpr int LD = D + 1, LDS = BK + C::SPAD;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *Ks = (T *)smem_raw, *Vs = Ks + BK * LD, *Qs = Vs + BK * LD, *dOs = Qs + BQ * LD;
    T *Ps = dOs + BQ * LD, *dSs = Ps + BQ * LDS, *Ls = dSs + BQ * LDS, *Ds = Ls + BQ;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t kt = blockIdx.x, h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h;
    const int64_t Nq = a.Nq, Nk = a.Nk, j0 = kt * BK;
    const int d = a.d;
    const T *q = a.q + bh * Nq * d, *dout = a.dout + bh * Nq * d;
    const T *lse = a.lse + bh * Nq, *Drow = a.Drow + bh * Nq;

    load_tile<T, D, BK>(Ks, a.k + bh * Nk * d, j0, Nk, d);
    load_tile<T, D, BK>(Vs, a.v + bh * Nk * d, j0, Nk, d);
    T dk[RK][RD], dv[RK][RD]; /* rows j0 + ty + 16r, columns tx + 16c */
#pragma unroll
    for (int r = 0; r < RK; r++)
#pragma unroll
        for (int c = 0; c < RD; c++) dk[r][c] = dv[r][c] = 0;

    const int64_t nqt = fg_attn_ntiles(Nq, BQ);
    for (int64_t qt = fg_attn_qt_begin(kt, Nq, Nk, BQ, BK, a.causal); qt < nqt; qt++) {
        const int64_t i0 = qt * BQ;
        __syncthreads(); /* the previous query tile is no longer read */
        load_tile<T, D, BQ>(Qs, q, i0, Nq, d);
        load_tile<T, D, BQ>(dOs, dout, i0, Nq, d);
        load_rows<T, BQ>(Ls, Ds, lse, Drow, i0, Nq);
        __syncthreads();
        recompute_tile<T, D, BQ, BK, LDS>(a, b, h, qt, kt, Qs, dOs, Ks, Vs, Ls, Ds, Ps, dSs);
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
    /* the only writer of these rows of dk and dv: add (the backward accumulates) */
    T *dkh = a.dk ? a.dk + bh * Nk * d : nullptr, *dvh = a.dv ? a.dv + bh * Nk * d : nullptr;
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

/* kernel 3: dQ of one query tile, looping over key tiles (no atomics) */
template <typename T, int D>
__global__ void __launch_bounds__(256) flash_bwd_dq_kernel(fa_args<T> a) {
    using C = flash_cfg<T, D>;
    constexpr int BQ = C::BBQ, BK = C::BBK, RQ = BQ / 16, RD = D / 16;
    constexpr int LD = D + 1, LDS = BK + C::SPAD;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *Qs = (T *)smem_raw, *dOs = Qs + BQ * LD, *Ks = dOs + BQ * LD, *Vs = Ks + BK * LD;
    T *dSs = Vs + BK * LD, *Ls = dSs + BQ * LDS, *Ds = Ls + BQ;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int64_t qt = (int64_t)gridDim.x - 1 - blockIdx.x; /* causal: the longest rows first */
    const int64_t h = blockIdx.y, b = blockIdx.z, bh = b * a.H + h;
    const int64_t Nq = a.Nq, Nk = a.Nk, i0 = qt * BQ;
    const int d = a.d;
    const T *k = a.k + bh * Nk * d, *v = a.v + bh * Nk * d;

    load_tile<T, D, BQ>(Qs, a.q + bh * Nq * d, i0, Nq, d);
    load_tile<T, D, BQ>(dOs, a.dout + bh * Nq * d, i0, Nq, d);
    load_rows<T, BQ>(Ls, Ds, a.lse + bh * Nq, a.Drow + bh * Nq, i0, Nq);
    T dq[RQ][RD]; /* rows i0 + ty + 16r, columns tx + 16c */
#pragma unroll
    for (int r = 0; r < RQ; r++)
#pragma unroll
        for (int c = 0; c < RD; c++) dq[r][c] = 0;

    const int64_t kt_end = fg_attn_kt_end(qt, Nq, Nk, BQ, BK, a.causal);
    for (int64_t kt = 0; kt < kt_end; kt++) {
        __syncthreads(); /* the previous key tile is no longer read */
        load_tile<T, D, BK>(Ks, k, kt * BK, Nk, d);
        load_tile<T, D, BK>(Vs, v, kt * BK, Nk, d);
        __syncthreads();
        recompute_tile<T, D, BQ, BK, LDS>(a, b, h, qt, kt, Qs, dOs, Ks, Vs, Ls, Ds, nullptr, dSs);
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

/* One warp per row of S (rows = B·H·Nq): mask, softmax in place (P), lse — ops/attention_naive.c's
 * row loop: the max and the sum over the visible prefix in T, masked entries 0. */
template <typename T>
__global__ void naive_softmax_kernel(T *P, T *lse, int64_t rows, int64_t Nq, int64_t Nk, int causal) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
        const int64_t i = row % Nq, nvis = fg_attn_row_end(i, Nq, Nk, causal);
        T *p = P + row * Nk;
        T mx = fg_neg_inf<T>();
        for (int64_t j = lane; j < nvis; j += 32) mx = p[j] > mx ? p[j] : mx;
        mx = fg_warp_max(mx);
        if (mx == fg_neg_inf<T>()) { /* no visible key: P = 0, lse = -inf */
            for (int64_t j = lane; j < Nk; j += 32) p[j] = 0;
            if (lane == 0) lse[row] = fg_neg_inf<T>();
            continue;
        }
        T sum = 0;
        for (int64_t j = lane; j < nvis; j += 32) {
            T e = fg_exp(p[j] - mx);
            p[j] = e;
            sum += e;
        }
        sum = fg_warp_sum(sum);
        for (int64_t j = nvis + lane; j < Nk; j += 32) p[j] = 0;
        const T inv = (T)1 / sum;
        for (int64_t j = lane; j < nvis; j += 32) p[j] *= inv;
        if (lane == 0) lse[row] = mx + fg_log(sum);
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

/* One warp per row: dP∘Z (in place in dS), r = Σ_j (dP∘Z)_j P_j, dS = P ∘ (dP∘Z − r) */
template <typename T>
__global__ void naive_dsoftmax_kernel(T *dS, const T *P, int64_t rows, int64_t H, int64_t Nq, int64_t Nk,
                                      uint64_t seed, uint32_t thr, T inv_keep) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t row = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; row < rows; row += warps) {
        const int64_t i = row % Nq, h = (row / Nq) % H, b = row / (Nq * H);
        T *ds = dS + row * Nk;
        const T *p = P + row * Nk;
        T r = 0;
        for (int64_t j = lane; j < Nk; j += 32) {
            T x = ds[j];
            if (thr) x = fg_attn_keep(seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j) ? x * inv_keep : (T)0;
            ds[j] = x;
            r += x * p[j];
        }
        r = fg_warp_sum(r);
        for (int64_t j = lane; j < Nk; j += 32) ds[j] = p[j] * (ds[j] - r);
    }
}

/* ============================================================================================
 * host side: flash
 * ============================================================================================ */

template <typename T, int D> static size_t fwd_smem() {
    using C = flash_cfg<T, D>;
    return sizeof(T) * ((size_t)(C::FBQ + 2 * C::FBK) * (D + 1) + (size_t)C::FBQ * (C::FBK + C::SPAD));
}
template <typename T, int D> static size_t dkdv_smem() {
    using C = flash_cfg<T, D>;
    return sizeof(T) * ((size_t)(2 * C::BBK + 2 * C::BBQ) * (D + 1) + 2 * (size_t)C::BBQ * (C::BBK + C::SPAD) +
                        2 * (size_t)C::BBQ);
}
template <typename T, int D> static size_t dq_smem() {
    using C = flash_cfg<T, D>;
    return sizeof(T) * ((size_t)(2 * C::BBQ + 2 * C::BBK) * (D + 1) + (size_t)C::BBQ * (C::BBK + C::SPAD) +
                        2 * (size_t)C::BBQ);
}

/* Allow `kernel` its dynamic shared memory (above the default 48 KB). */
static fg_status allow_smem(const void *kernel, size_t bytes, const char *what) {
    int dev = 0, optin = 0;
    FG_CU(cudaGetDevice(&dev));
    FG_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if ((size_t)optin < bytes)
        return fg_error(FG_ERR_DEVICE, "flash attention %s needs %zu bytes of shared memory per block; this GPU offers %d",
                        what, bytes, optin);
    FG_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return FG_OK;
}

template <typename T>
static fa_args<T> make_args(const fg_attn_problem *pr) {
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
    return a;
}

template <typename T, int D>
static fg_status flash_fwd_launch(const fa_args<T> &a) {
    using C = flash_cfg<T, D>;
    const size_t smem = fwd_smem<T, D>();
    FG_TRY(allow_smem((const void *)flash_fwd_kernel<T, D>, smem, "forward"));
    dim3 grid((unsigned)fg_attn_ntiles(a.Nq, C::FBQ), (unsigned)a.H, (unsigned)a.B);
    flash_fwd_kernel<T, D><<<grid, 256, smem, fg_cu_stream()>>>(a);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T, int D>
static fg_status flash_bwd_launch(const fa_args<T> &a) {
    using C = flash_cfg<T, D>;
    if (a.dk || a.dv) {
        const size_t smem = dkdv_smem<T, D>();
        FG_TRY(allow_smem((const void *)flash_bwd_dkdv_kernel<T, D>, smem, "backward (dK, dV)"));
        dim3 grid((unsigned)fg_attn_ntiles(a.Nk, C::BBK), (unsigned)a.H, (unsigned)a.B);
        if (grid.x > 0) {
            flash_bwd_dkdv_kernel<T, D><<<grid, 256, smem, fg_cu_stream()>>>(a);
            FG_CU_LAUNCHED();
        }
    }
    if (a.dq) {
        const size_t smem = dq_smem<T, D>();
        FG_TRY(allow_smem((const void *)flash_bwd_dq_kernel<T, D>, smem, "backward (dQ)"));
        dim3 grid((unsigned)fg_attn_ntiles(a.Nq, C::BBQ), (unsigned)a.H, (unsigned)a.B);
        flash_bwd_dq_kernel<T, D><<<grid, 256, smem, fg_cu_stream()>>>(a);
        FG_CU_LAUNCHED();
    }
    return FG_OK;
}

/* The compile-time width D for head dim d; 0 if unsupported. */
static int flash_width(int64_t d) {
    return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0;
}

static fg_status check_grid(const fg_attn_problem *pr, const char *what) {
    if (pr->B > 65535 || pr->H > 65535)
        return fg_error(FG_ERR_ARG, "%s: B = %lld and H = %lld must each be at most 65535 on the GPU", what,
                        (long long)pr->B, (long long)pr->H);
    if (pr->Nq > INT32_MAX || pr->Nk > INT32_MAX || pr->d > 256 * 1024)
        return fg_error(FG_ERR_ARG, "%s: sizes too large", what);
    return FG_OK;
}

template <typename T>
static fg_status flash_forward(T *o, T *lse, const T *q, const T *k, const T *v, const fg_attn_problem *pr) {
    const int D = flash_width(pr->d);
    if (!D)
        return fg_error(FG_ERR_ARG, "flash attention on the GPU supports head dims up to 256, got d = %lld",
                        (long long)pr->d);
    if (pr->B * pr->H * pr->Nq == 0) return FG_OK;
    fa_args<T> a = make_args<T>(pr);
    a.q = q;
    a.k = k;
    a.v = v;
    a.o_out = o;
    a.lse_out = lse;
    switch (D) {
    case 32: return flash_fwd_launch<T, 32>(a);
    case 64: return flash_fwd_launch<T, 64>(a);
    case 128: return flash_fwd_launch<T, 128>(a);
    default: return flash_fwd_launch<T, 256>(a);
    }
}

template <typename T>
static fg_status flash_backward(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v, const T *o,
                                const T *lse, const fg_attn_problem *pr) {
    const int D = flash_width(pr->d);
    if (!D)
        return fg_error(FG_ERR_ARG, "flash attention on the GPU supports head dims up to 256, got d = %lld",
                        (long long)pr->d);
    if ((!dq && !dk && !dv) || pr->B * pr->H == 0 || pr->Nq == 0) return FG_OK; /* no query: no gradient */
    const int64_t rows = pr->B * pr->H * pr->Nq;
    fg_cu_scratch Dbuf;
    FG_TRY(Dbuf.get((size_t)rows * sizeof(T), "flash attention backward"));
    /* kernel 1: D = rowsum(dO ∘ O) */
    flash_bwd_rowdot_kernel<T><<<fg_cu_blocks(rows * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>(Dbuf.as<T>(), dout, o,
                                                                                            rows, (int)pr->d);
    FG_CU_LAUNCHED();
    fa_args<T> a = make_args<T>(pr);
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.dout = dout;
    a.lse = lse;
    a.Drow = Dbuf.as<T>();
    a.dq = dq;
    a.dk = dk;
    a.dv = dv;
    switch (D) { /* kernels 2 and 3 */
    case 32: return flash_bwd_launch<T, 32>(a);
    case 64: return flash_bwd_launch<T, 64>(a);
    case 128: return flash_bwd_launch<T, 128>(a);
    default: return flash_bwd_launch<T, 256>(a);
    }
}

/* ============================================================================================
 * host side: naive
 * ============================================================================================ */

template <typename T>
static fg_status naive_forward(T *o, T *lse, T *p, const T *q, const T *k, const T *v, const fg_attn_problem *pr) {
    const int64_t BH = pr->B * pr->H, Nq = pr->Nq, Nk = pr->Nk, d = pr->d, nn = Nq * Nk;
    if (BH * Nq == 0) return FG_OK;
    const fg_dtype dt = sizeof(T) == 8 ? FG_F64 : FG_F32;
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    fg_cu_scratch sP, sW;
    T *P = p;
    if (!P) {
        FG_TRY(sP.get((size_t)(BH * nn) * sizeof(T), "naive attention (score matrix)"));
        P = sP.as<T>();
    }
    /* S = scale · Q Kᵀ  (Nq × Nk per (b, h)) into P's buffer */
    FG_TRY(fg_cuda_gemm(dt, 0, 1, Nq, Nk, d, pr->scale, q, d, Nq * d, k, d, Nk * d, 0.0, P, Nk > 1 ? Nk : 1, nn, BH));
    naive_softmax_kernel<T><<<fg_cu_blocks(BH * Nq * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>(P, lse, BH * Nq, Nq, Nk,
                                                                                            pr->causal);
    FG_CU_LAUNCHED();
    const T *W = P; /* the weights that multiply V */
    if (thr && BH * nn > 0) {
        FG_TRY(sW.get((size_t)(BH * nn) * sizeof(T), "naive attention (dropout weights)"));
        naive_dropout_kernel<T><<<fg_cu_blocks(BH * nn), FG_CU_THREADS, 0, fg_cu_stream()>>>(
            sW.as<T>(), P, BH * nn, pr->H, Nq, Nk, pr->seed, thr, (T)(1.0 / (1.0 - pr->dropout_p)));
        FG_CU_LAUNCHED();
        W = sW.as<T>();
    }
    /* O = W V */
    return fg_cuda_gemm(dt, 0, 0, Nq, d, Nk, 1.0, W, Nk > 1 ? Nk : 1, nn, v, d, Nk * d, 0.0, o, d, Nq * d, BH);
}

template <typename T>
static fg_status naive_backward(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v, const T *p,
                                const fg_attn_problem *pr) {
    const int64_t BH = pr->B * pr->H, Nq = pr->Nq, Nk = pr->Nk, d = pr->d, nn = Nq * Nk, ldn = Nk > 1 ? Nk : 1;
    if ((!dq && !dk && !dv) || BH * nn == 0) return FG_OK;
    if (!p) return fg_error(FG_ERR_ARG, "naive attention backward: the saved P is NULL");
    const fg_dtype dt = sizeof(T) == 8 ? FG_F64 : FG_F32;
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    const T inv_keep = (T)(1.0 / (1.0 - pr->dropout_p));
    fg_cu_scratch sW, sdS;
    const T *W = p;
    if (thr) {
        FG_TRY(sW.get((size_t)(BH * nn) * sizeof(T), "naive attention backward"));
        naive_dropout_kernel<T><<<fg_cu_blocks(BH * nn), FG_CU_THREADS, 0, fg_cu_stream()>>>(sW.as<T>(), p, BH * nn, pr->H,
                                                                                           Nq, Nk, pr->seed, thr, inv_keep);
        FG_CU_LAUNCHED();
        W = sW.as<T>();
    }
    /* the forward's O = (P∘Z) V:  dV += (P∘Z)ᵀ dO */
    if (dv) FG_TRY(fg_cuda_gemm(dt, 1, 0, Nk, d, Nq, 1.0, W, ldn, nn, dout, d, Nq * d, 1.0, dv, d, Nk * d, BH));
    if (!dq && !dk) return FG_OK;
    /* d(P∘Z) = dO Vᵀ;  dP = d(P∘Z) ∘ Z;  the forward's P = softmax(S): dS = P ∘ (dP − rowsum(dP ∘ P)) */
    FG_TRY(sdS.get((size_t)(BH * nn) * sizeof(T), "naive attention backward"));
    T *dS = sdS.as<T>();
    FG_TRY(fg_cuda_gemm(dt, 0, 1, Nq, Nk, d, 1.0, dout, d, Nq * d, v, d, Nk * d, 0.0, dS, ldn, nn, BH));
    naive_dsoftmax_kernel<T><<<fg_cu_blocks(BH * Nq * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>(dS, p, BH * Nq, pr->H, Nq,
                                                                                              Nk, pr->seed, thr, inv_keep);
    FG_CU_LAUNCHED();
    /* the forward's S = scale · Q Kᵀ:  dQ += scale dS K,  dK += scale dSᵀ Q */
    if (dq) FG_TRY(fg_cuda_gemm(dt, 0, 0, Nq, d, Nk, pr->scale, dS, ldn, nn, k, d, Nk * d, 1.0, dq, d, Nq * d, BH));
    if (dk) FG_TRY(fg_cuda_gemm(dt, 1, 0, Nk, d, Nq, pr->scale, dS, ldn, nn, q, d, Nq * d, 1.0, dk, d, Nk * d, BH));
    return FG_OK;
}

/* ============================================================================================
 * the backend entry points (registered by fg_cuda_init)
 * ============================================================================================ */

extern "C" fg_status fg_cuda_attention_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *p,
                                               const void *q, const void *k, const void *v,
                                               const fg_attn_problem *pr) {
    FG_TRY(fg_cu_require("attention"));
    FG_TRY(check_grid(pr, "attention"));
    if (impl == FG_ATTN_FLASH)
        return dt == FG_F64 ? flash_forward<double>((double *)o, (double *)lse, (const double *)q, (const double *)k,
                                                    (const double *)v, pr)
                            : flash_forward<float>((float *)o, (float *)lse, (const float *)q, (const float *)k,
                                                   (const float *)v, pr);
    if (impl == FG_ATTN_NAIVE)
        return dt == FG_F64 ? naive_forward<double>((double *)o, (double *)lse, (double *)p, (const double *)q,
                                                    (const double *)k, (const double *)v, pr)
                            : naive_forward<float>((float *)o, (float *)lse, (float *)p, (const float *)q,
                                                   (const float *)k, (const float *)v, pr);
    return fg_error(FG_ERR_ARG, "attention: unknown implementation %d", (int)impl);
}

extern "C" fg_status fg_cuda_attention_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv,
                                                const void *dout, const void *q, const void *k, const void *v,
                                                const void *o, const void *lse, const void *p,
                                                const fg_attn_problem *pr) {
    FG_TRY(fg_cu_require("attention backward"));
    FG_TRY(check_grid(pr, "attention backward"));
    if (impl == FG_ATTN_FLASH)
        return dt == FG_F64
                   ? flash_backward<double>((double *)dq, (double *)dk, (double *)dv, (const double *)dout,
                                            (const double *)q, (const double *)k, (const double *)v, (const double *)o,
                                            (const double *)lse, pr)
                   : flash_backward<float>((float *)dq, (float *)dk, (float *)dv, (const float *)dout, (const float *)q,
                                           (const float *)k, (const float *)v, (const float *)o, (const float *)lse, pr);
    if (impl == FG_ATTN_NAIVE)
        return dt == FG_F64 ? naive_backward<double>((double *)dq, (double *)dk, (double *)dv, (const double *)dout,
                                                     (const double *)q, (const double *)k, (const double *)v,
                                                     (const double *)p, pr)
                            : naive_backward<float>((float *)dq, (float *)dk, (float *)dv, (const float *)dout,
                                                    (const float *)q, (const float *)k, (const float *)v,
                                                    (const float *)p, pr);
    return fg_error(FG_ERR_ARG, "attention backward: unknown implementation %d", (int)impl);
}
