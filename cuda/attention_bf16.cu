/* attention_bf16.cu — the host side of the bf16 tensor-core flash attention (the kernels and their
 * algorithm: cuda/attention_bf16.cuh; the C entry points: cuda/attention_bf16.h).
 *
 * CPU reference: the bf16 mirror of tests/cuda/emu/attn_bf16_mirror.h (the same tiles, bf16
 * operands, float32 accumulation), which tests/cuda/emu/attn_bf16_emu.cpp checks against the
 * float64 reference and the emulated kernels against.
 */
#include "cuda/attention_bf16.h"

#include "cuda/attention_bf16.cuh"
#include "cuda/cuda_common.cuh"

static fa16_args bf16_args(const fg_attn_problem *pr) {
    fa16_args a;
    memset(&a, 0, sizeof a);
    a.B = pr->B, a.H = pr->H, a.Nq = pr->Nq, a.Nk = pr->Nk;
    a.Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : pr->H;
    a.G = pr->H / a.Hkv;
    a.d = (int)pr->d;
    a.scale = (float)pr->scale;
    a.causal = pr->causal;
    a.window = pr->var.window ? 1 : 0;
    a.wl = pr->var.window_left, a.wr = pr->var.window_right;
    a.seed = pr->seed;
    a.thr = fg_dropout_threshold(pr->dropout_p);
    a.inv_keep = (float)(1.0 / (1.0 - pr->dropout_p));
    return a;
}

fg_status fg_cuda_attn_bf16_check(const fg_attn_problem *pr) {
    if (!fa16_width(pr->d))
        return fg_error(FG_ERR_ARG, "bf16 attention: head dim %lld is not a multiple of 8 in 8..128", (long long)pr->d);
    /* what these kernels implement (FG_ATTN_CAPS_BF16_CUDA: no softcap, ALiBi or user callbacks): the
     * entry's one check, which the mixed-precision path (a float32 problem) needs here too */
    FG_TRY(fg_attn_check_caps(pr, FG_ATTN_FLASH, FG_BF16, FG_CUDA, FG_ATTN_CAPS_BF16_CUDA));
    if (pr->H > 65535 || pr->B > 65535) return fg_error(FG_ERR_ARG, "bf16 attention: B and H must be at most 65535");
    return FG_OK;
}

/* Allow `kernel` `bytes` of dynamic shared memory (above the default 48 KB: opt in). */
static fg_status bf16_allow_smem(const void *kernel, size_t bytes) {
    if (bytes <= 48 * 1024) return FG_OK;
    int dev = 0, optin = 0;
    FG_CU(cudaGetDevice(&dev));
    FG_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if ((size_t)optin < bytes)
        return fg_error(FG_ERR_DEVICE, "bf16 attention needs %zu bytes of shared memory per block; this GPU offers %d",
                        bytes, optin);
    FG_CU(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return FG_OK;
}

/* cp.async copies 16-byte chunks of q, k, v and dout rows: d is a multiple of 8 (the check), so the
 * base pointers must be 16-byte aligned (cudaMalloc's are) */
static fg_status bf16_aligned(const char *name, const void *p) {
    if ((uintptr_t)p % 16)
        return fg_error(FG_ERR_ARG, "bf16 attention: %s is not 16-byte aligned (it is read in 16-byte chunks)", name);
    return FG_OK;
}

template <int D> static fg_status fwd_launch(const fa16_args &a) {
    FG_TRY(bf16_allow_smem((const void *)fa16_fwd_kernel<D>, fa16_fwd_smem<D>()));
    dim3 grid((unsigned)fg_attn_ntiles(a.Nq, FA16_BQ), (unsigned)a.H, (unsigned)a.B);
    fa16_fwd_kernel<D><<<grid, FA16_THREADS, fa16_fwd_smem<D>(), fg_cu_stream()>>>(a);
    FG_CU_LAUNCHED();
    return FG_OK;
}

fg_status fg_cuda_attn_bf16_forward(float *o, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                    const fg_attn_problem *pr) {
    FG_TRY(fg_cuda_attn_bf16_check(pr));
    if (pr->B == 0 || pr->H == 0 || pr->Nq == 0) return FG_OK;
    FG_TRY(bf16_aligned("q", q));
    FG_TRY(bf16_aligned("k", k));
    FG_TRY(bf16_aligned("v", v));
    fa16_args a = bf16_args(pr);
    a.q = q, a.k = k, a.v = v, a.o = o, a.lse = lse;
    return fa16_width(pr->d) == 64 ? fwd_launch<64>(a) : fwd_launch<128>(a);
}

template <int D> static fg_status bwd_launch(const fa16_args &a) {
    const unsigned nkt = (unsigned)fg_attn_ntiles(a.Nk, FA16_BK);
    if (nkt) {
        FG_TRY(bf16_allow_smem((const void *)fa16_bwd_dkdv_kernel<D>, fa16_dkdv_smem<D>()));
        dim3 grid(nkt, (unsigned)a.Hkv, (unsigned)a.B);
        fa16_bwd_dkdv_kernel<D><<<grid, FA16_THREADS, fa16_dkdv_smem<D>(), fg_cu_stream()>>>(a);
        FG_CU_LAUNCHED();
    }
    FG_TRY(bf16_allow_smem((const void *)fa16_bwd_dq_kernel<D>, fa16_dq_smem<D>()));
    dim3 grid((unsigned)fg_attn_ntiles(a.Nq, FA16_BQ), (unsigned)a.H, (unsigned)a.B);
    fa16_bwd_dq_kernel<D><<<grid, FA16_THREADS, fa16_dq_smem<D>(), fg_cu_stream()>>>(a);
    FG_CU_LAUNCHED();
    return FG_OK;
}

fg_status fg_cuda_attn_bf16_backward(float *dq, float *dk, float *dv, float *Drow, const uint16_t *dout,
                                     const uint16_t *q, const uint16_t *k, const uint16_t *v, const float *o,
                                     const float *lse, const fg_attn_problem *pr) {
    FG_TRY(fg_cuda_attn_bf16_check(pr));
    if (pr->B == 0 || pr->H == 0 || pr->Nq == 0) return FG_OK;
    FG_TRY(bf16_aligned("q", q));
    FG_TRY(bf16_aligned("k", k));
    FG_TRY(bf16_aligned("v", v));
    FG_TRY(bf16_aligned("dout", dout));
    const int64_t rows = pr->B * pr->H * pr->Nq;
    const int64_t blocks = (rows + 3) / 4; /* 4 warps a block, one row each */
    fa16_bwd_rowdot_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 128, 0, fg_cu_stream()>>>(Drow, dout, o, rows,
                                                                                                  (int)pr->d);
    FG_CU_LAUNCHED();
    fa16_args a = bf16_args(pr);
    a.q = q, a.k = k, a.v = v, a.dout = dout, a.o = (float *)o, a.lse = (float *)lse, a.Drow = Drow;
    a.dq = dq, a.dk = dk, a.dv = dv;
    return fa16_width(pr->d) == 64 ? bwd_launch<64>(a) : bwd_launch<128>(a);
}
