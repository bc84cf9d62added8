/* attention.cu — scaled dot-product attention on the GPU: FlashAttention kernels (forward with an
 * online softmax; FlashAttention-2-style backward that recomputes P from the saved logsumexp) and a
 * naive reference that materializes S and P through cuBLAS.
 *
 * CPU reference: ops/cpu/attention_flash_body.h and ops/cpu/attention_naive_body.h (same math, same masking, same
 * dropout function); tests/cuda/ checks flash against naive against the CPU.
 *
 * Legend: B batch, H heads, H_kv K/V heads (G = H / H_kv), Nq queries, Nk keys, d head dim
 * (D = d rounded up to 32/64/128/256, the kernel's compile-time width; columns d..D-1 are zero in
 * shared memory and never stored).
 *   q (B, H, Nq, d); k, v (B, H_kv, Nk, d); o, dout, dq (B, H, Nq, d); dk, dv (B, H_kv, Nk, d);
 *   lse (B, H, Nq); p (B, H, Nq, Nk) — naive only.
 *   The score of (b, h, i, j) is ops/attention.h's, steps 1–6, with the CPU's helpers
 *   (ops/shared/attn_variant.h): s = scale · q·k with K/V head h / G; softcap; ALiBi; −inf outside
 *   causal ∧ window (bottom-right aligned, i' = i + Nk − Nq). User callbacks (score_mod, mask)
 *   run on the CPU only and are refused here.
 *   Dropout: element (b, h, i, j) of P is kept iff fg_attn_keep(seed, threshold, b, h, i, j)
 *   (ops/shared/attn_dropout.h, the same function the CPU calls; h the query head) and then scaled by 1/(1 − p).
 *   ALiBi slopes: the user's (a host array) are kept on the device (uploaded, without a host wait,
 *   when they change); the standard ones are computed in the kernels by fg_attn_alibi_slope, the
 *   CPU's function.
 *
 * ---- flash forward: one thread block per (q tile of BQ rows, h, b), 256 threads ----
 *   Q tile in shared memory for the whole block; for each key tile in the range the tile's rows can
 *   see (causal ∧ window, fa_key_tiles), skipping the MASKED ones entirely (no load, no math):
 *     K, V tiles -> shared memory           (K/V head h / G; cp.async, tile kt + 1 in flight
 *                                            while tile kt is used where two stages fit)
 *     S  = variants(scale · Q Kᵀ)            (BQ × BK, registers; masked only in PARTIAL tiles)
 *     m' = max(m, rowmax S);  P = exp(S − m');  l = exp(m − m') l + rowsum P
 *     O  = exp(m − m') O + dropout(P) V      (O accumulates in registers)
 *   then O /= l and lse = m + log l (in float64, rounded once; with the `aux` buffer, lse_lo gets
 *   the rounding remainder, as on the CPU). It writes O and lse (and lse_lo) only — saved for
 *   backward: O, lse.
 *   Thread (ty, tx) of the 16 × 16 grid owns rows ty + 16a of the tile and the BK/16 consecutive
 *   keys (BK/16)·tx + c, so a row's max and sum are shuffles among the 16 lanes that share ty (half
 *   a warp) and one Philox block gives the dropout bits of four of its keys. Shared tiles are
 *   swizzled in 16-byte chunks so every inner-loop load is one 16-byte vector load without bank
 *   conflicts (flash_cfg in attention_kernels.cuh).
 *
 * ---- flash backward (deterministic: no floating-point atomics) ----
 *   kernel 1: Dᵢ = rowsum(dOᵢ ∘ Oᵢ)   (= Σ_j P_ij dP_ij with dropout; summed in float64, as on the CPU)
 *   kernel 2: one block per (key tile, K/V head g, b). K, V tiles stay in shared memory; dK and dV
 *             accumulate in registers over the G query heads of the group (in order) and, for
 *             each, the query tiles whose rows see the tile (fa_query_tiles; MASKED ones skipped):
 *               recompute S = variants(scale · Q Kᵀ), P = exp((S − L) − lse_lo) ("recompute":
 *               naive stored P)
 *               dP = (dO Vᵀ) ∘ Z;  dS = P ∘ (dP − D) ∘ (1 − tanh²) [softcap]
 *               dV += (P∘Z)ᵀ dO;   dK += scale · dSᵀ Q
 *             then adds them into dk, dv. Each element of dk, dv has exactly one writer, so GQA's
 *             sum over the group is deterministic too.
 *   kernel 3: one block per (query tile, h, b): loops over the key tiles its rows see, recomputes
 *             P and dS the same way and accumulates dQ += scale · dS K in registers; one writer per
 *             element of dq. (dS is computed twice — by kernels 2 and 3 — which is the price of
 *             dropping the atomics; both use identical arithmetic.)
 *   Every sum runs in a fixed order, so two runs give bit-identical gradients.
 *
 * Precision: float32 inputs accumulate in float32, float64 in float64 (as the CPU kernels do).
 * Tile sizes per (dtype, D) are chosen so a block's shared memory fits Hopper's 227 KB (see
 * flash_cfg); the opt-in limit is raised with cudaFuncSetAttribute before each launch.
 *
 * The kernels live in cuda/attention_kernels.cuh (so the CPU emulator of tests/cuda/emu/ can run
 * the same source); this file holds the host side: launches, scratch, the backend entry points.
 *
 * ---- naive: S = scale · Q Kᵀ by strided-batched cuBLAS, one batch per (b, K/V head g) whose
 *   rows are the G·Nq query rows of the group's heads (contiguous in Q, O and P), so GQA needs no
 *   copy of K or V; a row kernel applies the variants, masks, normalizes and writes P and lse;
 *   O = (P∘Z) V by cuBLAS. Backward from P, as the CPU's; dK and dV come out of GEMMs whose inner
 *   dimension runs over the group's G·Nq rows (the GQA sum). With softcap the backward recomputes
 *   S1 = scale · Q Kᵀ for the chain rule, as the CPU does.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/attention_bf16.h"
#include "cuda/attention_kernels.cuh"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/kernels_cuda.h"
#include "cuda/mixed.cuh"
#include "tensor/bf16.h"

/* ============================================================================================
 * host side: flash
 * ============================================================================================ */

/* Allow `kernel` its dynamic shared memory (above the default 48 KB). */
static fg_status allow_smem(const void *kernel, size_t bytes, const char *what) {
    int dev = 0, optin = 0;
    FG_CU(cudaGetDevice(&dev));
    FG_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if ((size_t)optin < bytes)
        return fg_error(FG_ERR_DEVICE,
                        "flash attention %s needs %zu bytes of shared memory per block; this GPU offers %d", what,
                        bytes, optin);
    FG_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return FG_OK;
}

template <typename T, int D, bool MODS> static fg_status flash_fwd_launch(const fa_args<T> &a) {
    using C = flash_cfg<T, D>;
    const size_t smem = fwd_smem<T, D>();
    FG_TRY(allow_smem((const void *)flash_fwd_kernel<T, D, MODS>, smem, "forward"));
    dim3 grid((unsigned)fg_attn_ntiles(a.Nq, C::FBQ), (unsigned)a.H, (unsigned)a.B);
    flash_fwd_kernel<T, D, MODS><<<grid, 256, smem, fg_cu_stream()>>>(a);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T, int D, bool MODS> static fg_status flash_bwd_launch(const fa_args<T> &a) {
    using C = flash_cfg<T, D>;
    if (a.dk || a.dv) {
        const size_t smem = dkdv_smem<T, D>();
        FG_TRY(allow_smem((const void *)flash_bwd_dkdv_kernel<T, D, MODS>, smem, "backward (dK, dV)"));
        dim3 grid((unsigned)fg_attn_ntiles(a.Nk, C::BBK), (unsigned)a.Hkv, (unsigned)a.B); /* per K/V head */
        if (grid.x > 0) {
            flash_bwd_dkdv_kernel<T, D, MODS><<<grid, 256, smem, fg_cu_stream()>>>(a);
            FG_CU_LAUNCHED();
        }
    }
    if (a.dq) {
        const size_t smem = dq_smem<T, D>();
        FG_TRY(allow_smem((const void *)flash_bwd_dq_kernel<T, D, MODS>, smem, "backward (dQ)"));
        dim3 grid((unsigned)fg_attn_ntiles(a.Nq, C::BBQ), (unsigned)a.H, (unsigned)a.B);
        flash_bwd_dq_kernel<T, D, MODS><<<grid, 256, smem, fg_cu_stream()>>>(a);
        FG_CU_LAUNCHED();
    }
    return FG_OK;
}

/* The instance for (D, MODS): the kernels' head-dim width and whether softcap / ALiBi are on. */
template <typename T, bool MODS> static fg_status flash_launch_d(int D, const fa_args<T> &a, bool backward) {
    switch (D) {
    case 32:
        return backward ? flash_bwd_launch<T, 32, MODS>(a) : flash_fwd_launch<T, 32, MODS>(a);
    case 64:
        return backward ? flash_bwd_launch<T, 64, MODS>(a) : flash_fwd_launch<T, 64, MODS>(a);
    case 128:
        return backward ? flash_bwd_launch<T, 128, MODS>(a) : flash_fwd_launch<T, 128, MODS>(a);
    default:
        return backward ? flash_bwd_launch<T, 256, MODS>(a) : flash_fwd_launch<T, 256, MODS>(a);
    }
}
template <typename T> static fg_status flash_launch(int D, const fa_args<T> &a, bool backward) {
    return fa_mods(a) ? flash_launch_d<T, true>(D, a, backward) : flash_launch_d<T, false>(D, a, backward);
}

/* The limits of these kernels: the sizes the grids can hold. What the kernels implement (no user
 * callbacks: they run on the CPU only; the variants of caps and caps_bf16) is the entry's one check,
 * fg_attn_check_caps (ops/attention_entry.c), made before any kernel is called; a direct caller
 * gets the same answer here from the same function. The problem's own checks (heads, softcap,
 * ALiBi slopes, ...) are the entry's too (fg_attn_call_begin). */
static fg_status check_problem(fg_attn_impl impl, fg_dtype dt, const fg_attn_problem *pr, const char *what) {
    FG_TRY(fg_attn_check_caps(pr, impl, dt, FG_CUDA, dt == FG_BF16 ? FG_ATTN_CAPS_BF16_CUDA : FG_ATTN_CAP_ALL));
    if (pr->B > 65535 || pr->H > 65535)
        return fg_error(FG_ERR_ARG, "%s: B = %lld and H = %lld must each be at most 65535 on the GPU", what,
                        (long long)pr->B, (long long)pr->H);
    if (pr->Nq > INT32_MAX || pr->Nk > INT32_MAX || pr->d > 256 * 1024)
        return fg_error(FG_ERR_ARG, "%s: sizes too large", what);
    return FG_OK;
}

/* The ALiBi slopes the kernels read: NULL (no ALiBi, or the standard slopes, which the kernels
 * compute with fg_attn_alibi_slope) or a device copy of the user's H host slopes. The copy is kept
 * between calls: a call whose slopes equal the last ones (a model's slopes do not change) uploads
 * nothing; new slopes go to a new device buffer by fg_cu_upload (staged, no host wait; kernels
 * queued earlier still read the old buffer, which goes back to the stream-ordered allocator), so
 * the caller's array may change once we return. One host thread drives the device. */
static struct {
    double *host; /* the slopes of `dev`, n of them */
    int64_t n;
    void *dev;
} g_slopes;

static fg_status device_slopes(const fg_attn_problem *pr, const double **out) {
    *out = nullptr;
    if (!pr->var.alibi || !pr->var.alibi_slopes || pr->H == 0) return FG_OK;
    const size_t n = (size_t)pr->H * sizeof(double);
    if (g_slopes.dev && g_slopes.n == pr->H && !memcmp(g_slopes.host, pr->var.alibi_slopes, n)) {
        *out = (const double *)g_slopes.dev;
        return FG_OK;
    }
    double *host = (double *)malloc(n);
    void *dev = fg_alloc(FG_CUDA, n);
    if (!host || !dev) {
        free(host);
        if (dev) fg_free(FG_CUDA, dev);
        return fg_error(FG_ERR_OOM, "attention: cannot allocate %zu bytes for the ALiBi slopes", n);
    }
    const fg_status st = fg_cu_upload(dev, pr->var.alibi_slopes, n, "attention (ALiBi slopes)");
    if (st != FG_OK) {
        free(host);
        fg_free(FG_CUDA, dev);
        return st;
    }
    memcpy(host, pr->var.alibi_slopes, n);
    free(g_slopes.host);
    if (g_slopes.dev) fg_free(FG_CUDA, g_slopes.dev);
    g_slopes.host = host;
    g_slopes.n = pr->H;
    g_slopes.dev = dev;
    *out = (const double *)dev;
    return FG_OK;
}

template <typename T>
static fg_status flash_forward(T *o, T *lse, T *lse_lo, const T *q, const T *k, const T *v, const fg_attn_problem *pr) {
    const int D = flash_width(pr->d);
    if (!D)
        return fg_error(FG_ERR_ARG, "flash attention on the GPU supports head dims up to 256, got d = %lld",
                        (long long)pr->d);
    if (pr->B * pr->H * pr->Nq == 0) return FG_OK;
    fa_args<T> a = make_args<T>(pr);
    FG_TRY(device_slopes(pr, &a.slopes));
    a.q = q;
    a.k = k;
    a.v = v;
    a.o_out = o;
    a.lse_out = lse;
    a.lse_lo_out = lse_lo;
    a.vec16 = fa_vec16(a);
    return flash_launch<T>(D, a, false);
}

template <typename T>
static fg_status flash_backward(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v, const T *o,
                                const T *lse, const T *lse_lo, const fg_attn_problem *pr) {
    const int D = flash_width(pr->d);
    if (!D)
        return fg_error(FG_ERR_ARG, "flash attention on the GPU supports head dims up to 256, got d = %lld",
                        (long long)pr->d);
    if ((!dq && !dk && !dv) || pr->B * pr->H == 0 || pr->Nq == 0) return FG_OK; /* no query: no gradient */
    const int64_t rows = pr->B * pr->H * pr->Nq;
    fg_cu_scratch Dbuf;
    FG_TRY(Dbuf.get((size_t)rows * sizeof(T), "flash attention backward"));
    /* kernel 1: D = rowsum(dO ∘ O) */
    flash_bwd_rowdot_kernel<T>
        <<<fg_cu_blocks(rows * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>(Dbuf.as<T>(), dout, o, rows, (int)pr->d);
    FG_CU_LAUNCHED();
    fa_args<T> a = make_args<T>(pr);
    FG_TRY(device_slopes(pr, &a.slopes));
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.dout = dout;
    a.lse = lse;
    a.lse_lo = lse_lo;
    a.Drow = Dbuf.as<T>();
    a.dq = dq;
    a.dk = dk;
    a.dv = dv;
    a.vec16 = fa_vec16(a);
    return flash_launch<T>(D, a, true); /* kernels 2 and 3 */
}

/* ============================================================================================
 * host side: naive
 * ============================================================================================ */

/* Sizes of the group-batched GEMMs: batch (b, g) over B·H_kv, M = G·Nq query rows per batch. */
struct naive_dims {
    int64_t batch, GNq, Nq, Nk, d, ldn;
    naive_dims(const fg_attn_problem *pr) {
        const int64_t Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : pr->H;
        batch = pr->B * Hkv;
        GNq = (Hkv > 0 ? pr->H / Hkv : 1) * pr->Nq;
        Nq = pr->Nq;
        Nk = pr->Nk;
        d = pr->d;
        ldn = Nk > 1 ? Nk : 1;
    }
};

template <typename T>
static fg_status naive_forward(T *o, T *lse, T *p, const T *q, const T *k, const T *v, const fg_attn_problem *pr) {
    const int64_t BH = pr->B * pr->H, nn = pr->Nq * pr->Nk;
    if (BH * pr->Nq == 0) return FG_OK;
    const naive_dims n(pr);
    const fg_dtype dt = sizeof(T) == 8 ? FG_F64 : FG_F32;
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    fa_args<T> a = make_args<T>(pr);
    fg_cu_scratch sP, sW;
    FG_TRY(device_slopes(pr, &a.slopes));
    T *P = p;
    if (!P) {
        FG_TRY(sP.get((size_t)(BH * nn) * sizeof(T), "naive attention (score matrix)"));
        P = sP.as<T>();
    }
    /* S1 = scale · Q Kᵀ  (G·Nq × Nk per (b, g)) into P's buffer */
    FG_TRY(fg_cuda_gemm(dt, 0, 1, n.GNq, n.Nk, n.d, pr->scale, q, n.d, n.GNq * n.d, k, n.d, n.Nk * n.d, 0.0, P, n.ldn,
                        n.GNq * n.Nk, n.batch));
    /* S = variants(S1), masked; P = softmax(S); lse */
    naive_softmax_kernel<T><<<fg_cu_blocks(BH * n.Nq * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>(P, lse, BH * n.Nq, a);
    FG_CU_LAUNCHED();
    const T *W = P; /* the weights that multiply V */
    if (thr && BH * nn > 0) {
        FG_TRY(sW.get((size_t)(BH * nn) * sizeof(T), "naive attention (dropout weights)"));
        naive_dropout_kernel<T><<<fg_cu_blocks(BH * nn), FG_CU_THREADS, 0, fg_cu_stream()>>>(
            sW.as<T>(), P, BH * nn, pr->H, n.Nq, n.Nk, pr->seed, thr, (T)(1.0 / (1.0 - pr->dropout_p)));
        FG_CU_LAUNCHED();
        W = sW.as<T>();
    }
    /* O = W V  (V of K/V head g for all G·Nq rows of the group) */
    return fg_cuda_gemm(dt, 0, 0, n.GNq, n.d, n.Nk, 1.0, W, n.ldn, n.GNq * n.Nk, v, n.d, n.Nk * n.d, 0.0, o, n.d,
                        n.GNq * n.d, n.batch);
}

template <typename T>
static fg_status naive_backward(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v, const T *p,
                                const fg_attn_problem *pr) {
    const int64_t BH = pr->B * pr->H, nn = pr->Nq * pr->Nk;
    if ((!dq && !dk && !dv) || BH * nn == 0) return FG_OK;
    if (!p) return fg_error(FG_ERR_ARG, "naive attention backward: the saved P is NULL");
    const naive_dims n(pr);
    const int64_t sS = n.GNq * n.Nk, sQ = n.GNq * n.d, sK = n.Nk * n.d; /* batch strides */
    const fg_dtype dt = sizeof(T) == 8 ? FG_F64 : FG_F32;
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    const T inv_keep = (T)(1.0 / (1.0 - pr->dropout_p));
    fg_cu_scratch sW, sdS, sS1;
    const T *W = p;
    if (thr) {
        FG_TRY(sW.get((size_t)(BH * nn) * sizeof(T), "naive attention backward"));
        naive_dropout_kernel<T><<<fg_cu_blocks(BH * nn), FG_CU_THREADS, 0, fg_cu_stream()>>>(
            sW.as<T>(), p, BH * nn, pr->H, n.Nq, n.Nk, pr->seed, thr, inv_keep);
        FG_CU_LAUNCHED();
        W = sW.as<T>();
    }
    /* the forward's O = (P∘Z) V:  dV += (P∘Z)ᵀ dO  (the inner dimension runs over the group's G·Nq rows) */
    if (dv)
        FG_TRY(fg_cuda_gemm(dt, 1, 0, n.Nk, n.d, n.GNq, 1.0, W, n.ldn, sS, dout, n.d, sQ, 1.0, dv, n.d, sK, n.batch));
    if (!dq && !dk) return FG_OK;
    /* d(P∘Z) = dO Vᵀ;  dP = d(P∘Z) ∘ Z;  the forward's P = softmax(S): dS = P ∘ (dP − rowsum(dP ∘ P)) */
    FG_TRY(sdS.get((size_t)(BH * nn) * sizeof(T), "naive attention backward"));
    T *dS = sdS.as<T>();
    FG_TRY(fg_cuda_gemm(dt, 0, 1, n.GNq, n.Nk, n.d, 1.0, dout, n.d, sQ, v, n.d, sK, 0.0, dS, n.ldn, sS, n.batch));
    /* the forward's S = variants(S1): with softcap, dS1 = dS ∘ (1 − tanh²(S1/c)) from S1 = scale · Q Kᵀ
     * recomputed (ALiBi's derivative is 1) */
    const T *S1 = nullptr;
    T inv_c = 0;
    if (pr->var.softcap > 0) {
        FG_TRY(sS1.get((size_t)(BH * nn) * sizeof(T), "naive attention backward (softcap)"));
        FG_TRY(fg_cuda_gemm(dt, 0, 1, n.GNq, n.Nk, n.d, pr->scale, q, n.d, sQ, k, n.d, sK, 0.0, sS1.as<T>(), n.ldn, sS,
                            n.batch));
        S1 = sS1.as<T>();
        inv_c = (T)(1.0 / pr->var.softcap);
    }
    naive_dsoftmax_kernel<T><<<fg_cu_blocks(BH * n.Nq * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        dS, p, S1, inv_c, BH * n.Nq, pr->H, n.Nq, n.Nk, pr->seed, thr, inv_keep);
    FG_CU_LAUNCHED();
    /* the forward's S1 = scale · Q Kᵀ:  dQ += scale dS K,  dK += scale dSᵀ Q (summed over the group) */
    if (dq)
        FG_TRY(
            fg_cuda_gemm(dt, 0, 0, n.GNq, n.d, n.Nk, pr->scale, dS, n.ldn, sS, k, n.d, sK, 1.0, dq, n.d, sQ, n.batch));
    if (dk)
        FG_TRY(
            fg_cuda_gemm(dt, 1, 0, n.Nk, n.d, n.GNq, pr->scale, dS, n.ldn, sS, q, n.d, sQ, 1.0, dk, n.d, sK, n.batch));
    return FG_OK;
}

/* ============================================================================================
 * the flash kernels' resources (bench/gpu_check.sh's report)
 * ============================================================================================ */

template <typename T, int D, bool MODS> static fg_status kernel_rows(FILE *out, const char *dt) {
    const struct {
        const char *name;
        const void *fn;
        size_t smem;
        int stages, min_blocks;
    } ks[3] = {
        {"flash_fwd", (const void *)flash_fwd_kernel<T, D, MODS>, fwd_smem<T, D>(), fa_fwd_cfg<T, D>::ST,
         fa_fwd_cfg<T, D>::min_blocks(MODS)},
        {"flash_bwd_dkdv", (const void *)flash_bwd_dkdv_kernel<T, D, MODS>, dkdv_smem<T, D>(), 1,
         fa_dkdv_cfg<T, D>::min_blocks(MODS)},
        {"flash_bwd_dq", (const void *)flash_bwd_dq_kernel<T, D, MODS>, dq_smem<T, D>(), fa_dq_cfg<T, D>::ST,
         fa_dq_cfg<T, D>::min_blocks(MODS)},
    };
    for (const auto &k : ks) {
        FG_TRY(allow_smem(k.fn, k.smem, k.name));
        cudaFuncAttributes fa;
        int blocks = 0;
        FG_CU(cudaFuncGetAttributes(&fa, k.fn));
        FG_CU(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k.fn, 256, k.smem));
        fprintf(out, "%s,%s,%d,%d,%zu,%d,%d,%d,%zu,%d\n", k.name, dt, D, MODS ? 1 : 0, k.smem, k.stages, k.min_blocks,
                fa.numRegs, (size_t)fa.localSizeBytes, blocks);
    }
    return FG_OK;
}

extern "C" fg_status fg_cuda_attention_kernel_table(FILE *out) {
    FG_TRY(fg_cu_require("attention kernel table"));
    fprintf(out,
            "kernel,dtype,D,mods,dyn_smem_bytes,kv_stages,launch_min_blocks,registers,local_bytes,blocks_per_sm\n");
    FG_TRY((kernel_rows<float, 64, false>(out, "float32")));
    FG_TRY((kernel_rows<float, 128, false>(out, "float32")));
    FG_TRY((kernel_rows<float, 256, false>(out, "float32")));
    FG_TRY((kernel_rows<float, 64, true>(out, "float32")));
    FG_TRY((kernel_rows<float, 128, true>(out, "float32")));
    FG_TRY((kernel_rows<float, 256, true>(out, "float32")));
    FG_TRY((kernel_rows<double, 64, false>(out, "float64")));
    FG_TRY((kernel_rows<double, 128, false>(out, "float64")));
    FG_TRY((kernel_rows<double, 256, false>(out, "float64")));
    return FG_OK;
}

/* ============================================================================================
 * host side: bfloat16 q, k, v (the table's bf16 contract over cuda/attention_bf16.h)
 *
 * The tensor-core kernels write o as float32 and add into float32 dq, dk, dv; the table's
 * bfloat16 tensors hold o, dq, dk, dv in bfloat16 (as PyTorch returns for bfloat16 inputs), so the
 * shells below keep the float32 results in scratch and round each element once on the device:
 *   o  = bf16(o_f32)                      (forward)
 *   o_f32 = float(o)                      (backward: D = rowsum(dO ∘ O) reads the stored bf16 O)
 *   g  = bf16(float(g) + dg_f32)          (backward, g in dq, dk, dv: the table's "adds into")
 * lse stays float32.
 * ============================================================================================ */

__global__ void bf16_round_kernel(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = fg_bf16_from_f32(src[i]);
}
__global__ void bf16_widen_kernel(float *dst, const uint16_t *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = fg_bf16_to_f32(src[i]);
}
__global__ void bf16_add_kernel(uint16_t *g, const float *d, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        g[i] = fg_bf16_from_f32(fg_bf16_to_f32(g[i]) + d[i]);
}

static fg_status bf16_forward(void *o, void *lse, const void *q, const void *k, const void *v,
                              const fg_attn_problem *pr) {
    FG_TRY(fg_cuda_attn_bf16_check(pr));
    const int64_t n = pr->B * pr->H * pr->Nq * pr->d;
    if (n == 0) return FG_OK;
    fg_cu_scratch of;
    FG_TRY(of.get((size_t)n * sizeof(float), "bf16 attention (float32 o)"));
    FG_TRY(fg_cuda_attn_bf16_forward(of.as<float>(), (float *)lse, (const uint16_t *)q, (const uint16_t *)k,
                                     (const uint16_t *)v, pr));
    bf16_round_kernel<<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>((uint16_t *)o, of.as<float>(), n);
    FG_CU_LAUNCHED();
    return FG_OK;
}

static fg_status bf16_backward(void *dq, void *dk, void *dv, const void *dout, const void *q, const void *k,
                               const void *v, const void *o, const void *lse, const fg_attn_problem *pr) {
    FG_TRY(fg_cuda_attn_bf16_check(pr));
    const int64_t nq = pr->B * pr->H * pr->Nq * pr->d, nk = pr->B * pr->var.n_kv_heads * pr->Nk * pr->d;
    const int64_t rows = pr->B * pr->H * pr->Nq;
    if ((!dq && !dk && !dv) || nq == 0) return FG_OK; /* no query: no gradient */
    /* the kernels take all three gradients: float32 scratch, zeroed, for each */
    fg_cu_scratch of, gq, gk, gv, Drow;
    FG_TRY(of.get((size_t)nq * sizeof(float), "bf16 attention backward"));
    FG_TRY(gq.get((size_t)nq * sizeof(float), "bf16 attention backward"));
    FG_TRY(gk.get((size_t)nk * sizeof(float), "bf16 attention backward"));
    FG_TRY(gv.get((size_t)nk * sizeof(float), "bf16 attention backward"));
    FG_TRY(Drow.get((size_t)rows * sizeof(float), "bf16 attention backward"));
    FG_CU(cudaMemsetAsync(gq.p, 0, (size_t)nq * sizeof(float), fg_cu_stream()));
    if (nk > 0) {
        FG_CU(cudaMemsetAsync(gk.p, 0, (size_t)nk * sizeof(float), fg_cu_stream()));
        FG_CU(cudaMemsetAsync(gv.p, 0, (size_t)nk * sizeof(float), fg_cu_stream()));
    }
    bf16_widen_kernel<<<fg_cu_blocks(nq), FG_CU_THREADS, 0, fg_cu_stream()>>>(of.as<float>(), (const uint16_t *)o,
                                                                               nq);
    FG_CU_LAUNCHED();
    FG_TRY(fg_cuda_attn_bf16_backward(gq.as<float>(), gk.as<float>(), gv.as<float>(), Drow.as<float>(),
                                      (const uint16_t *)dout, (const uint16_t *)q, (const uint16_t *)k,
                                      (const uint16_t *)v, of.as<float>(), (const float *)lse, pr));
    void *g[3] = {dq, dk, dv};
    const float *d[3] = {gq.as<float>(), gk.as<float>(), gv.as<float>()};
    const int64_t n[3] = {nq, nk, nk};
    for (int i = 0; i < 3; i++) {
        if (!g[i] || n[i] == 0) continue;
        bf16_add_kernel<<<fg_cu_blocks(n[i]), FG_CU_THREADS, 0, fg_cu_stream()>>>((uint16_t *)g[i], d[i], n[i]);
        FG_CU_LAUNCHED();
    }
    return FG_OK;
}

/* ============================================================================================
 * the entry points: the CUDA kernel table's attention member (cuda/kernels.cu)
 * ============================================================================================ */

extern "C" fg_status fg_cu_attention_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux,
                                             const void *q, const void *k, const void *v, const fg_attn_problem *pr) {
    FG_TRY(fg_cu_require("attention"));
    FG_TRY(check_problem(impl, dt, pr, "attention"));
    if (dt == FG_BF16) return bf16_forward(o, lse, q, k, v, pr); /* flash: check_problem refused naive */
    if (fg_cu_mixed_bf16() && (dt == FG_F32 || dt == FG_F64)) /* bfloat16 mixed precision (cuda/mixed.cuh) */
        return fg_cu_attention_mixed_forward(impl, dt, o, lse, aux, q, k, v, pr);
    if (impl == FG_ATTN_FLASH)
        return dt == FG_F64 ? flash_forward<double>((double *)o, (double *)lse, (double *)aux, (const double *)q,
                                                    (const double *)k, (const double *)v, pr)
                            : flash_forward<float>((float *)o, (float *)lse, (float *)aux, (const float *)q,
                                                   (const float *)k, (const float *)v, pr);
    if (impl == FG_ATTN_NAIVE)
        return dt == FG_F64 ? naive_forward<double>((double *)o, (double *)lse, (double *)aux, (const double *)q,
                                                    (const double *)k, (const double *)v, pr)
                            : naive_forward<float>((float *)o, (float *)lse, (float *)aux, (const float *)q,
                                                   (const float *)k, (const float *)v, pr);
    return fg_error(FG_ERR_ARG, "attention: unknown implementation %d", (int)impl);
}

extern "C" fg_status fg_cu_attention_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv,
                                              const void *dout, const void *q, const void *k, const void *v,
                                              const void *o, const void *lse, const void *aux,
                                              const fg_attn_problem *pr) {
    FG_TRY(fg_cu_require("attention backward"));
    FG_TRY(check_problem(impl, dt, pr, "attention backward"));
    if (dt == FG_BF16) /* flash: check_problem refused naive */
        return bf16_backward(dq, dk, dv, dout, q, k, v, o, lse, pr);
    if (fg_cu_mixed_bf16() && (dt == FG_F32 || dt == FG_F64)) /* bfloat16 mixed precision (cuda/mixed.cuh) */
        return fg_cu_attention_mixed_backward(impl, dt, dq, dk, dv, dout, q, k, v, o, lse, pr);
    if (impl == FG_ATTN_FLASH)
        return dt == FG_F64 ? flash_backward<double>((double *)dq, (double *)dk, (double *)dv, (const double *)dout,
                                                     (const double *)q, (const double *)k, (const double *)v,
                                                     (const double *)o, (const double *)lse, (const double *)aux, pr)
                            : flash_backward<float>((float *)dq, (float *)dk, (float *)dv, (const float *)dout,
                                                    (const float *)q, (const float *)k, (const float *)v,
                                                    (const float *)o, (const float *)lse, (const float *)aux, pr);
    if (impl == FG_ATTN_NAIVE)
        return dt == FG_F64
                   ? naive_backward<double>((double *)dq, (double *)dk, (double *)dv, (const double *)dout,
                                            (const double *)q, (const double *)k, (const double *)v,
                                            (const double *)aux, pr)
                   : naive_backward<float>((float *)dq, (float *)dk, (float *)dv, (const float *)dout, (const float *)q,
                                           (const float *)k, (const float *)v, (const float *)aux, pr);
    return fg_error(FG_ERR_ARG, "attention backward: unknown implementation %d", (int)impl);
}
