/* kernels_cuda.h — the CUDA kernel table's launchers, one block per op family, each defined in
 * cuda/<family>.cu beside its kernels. Contracts: ops/kernels.h (pointers are device memory, the
 * work is queued on flashgrad's one stream). cuda/kernels.cu gathers them into the table that
 * fg_cuda_init() registers. */
#ifndef FG_KERNELS_CUDA_H
#define FG_KERNELS_CUDA_H

#include "ops/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The FG_CUDA table (cuda/kernels.cu). */
extern const fg_kernels fg_cuda_kernels;

/* cuda/layernorm.cu */
fg_status fg_cu_layernorm_forward(fg_dtype dt, void *out, void *mean, void *rstd, const void *x, const void *w,
                                  const void *b, int64_t R, int64_t C, double eps);
fg_status fg_cu_layernorm_backward(fg_dtype dt, void *dx, void *dw, void *db, const void *dout, const void *x,
                                   const void *mean, const void *rstd, const void *w, int64_t R, int64_t C);

/* cuda/attention.cu — the table's attention member (caps FG_ATTN_CAP_ALL). Same contract as the
 * CPU kernels of ops/attention.h, on device pointers. impl FLASH: the tiled kernels (forward writes
 * O and lse only; the backward recomputes P from lse); `aux` is lse_lo (B, H, Nq) or NULL, as for
 * fg_attn_flash_*_lo. impl NAIVE: the reference with materialized S and P through cuBLAS (`aux`
 * receives P when not NULL and is required by its backward). Both implement causal masking,
 * dropout and the built-in variants of pr->var — GQA (k, v, dk, dv are (B, H_kv, Nk, d)), sliding
 * windows, ALiBi (pr->var.alibi_slopes is a HOST array or NULL) and softcapping — with
 * ops/attention.h's semantics. User callbacks (score_mod, mask) are refused by fg_attention: they
 * run on the CPU only. The tile sizes of pr (block_q, block_k) are the CPU's and are ignored: the
 * GPU picks its own per dtype and head dim (see cuda/attention.cu). Head dims up to 256 are
 * supported; larger ones fail with FG_ERR_ARG. The backward is deterministic (no floating-point
 * atomics, also under GQA). */
fg_status fg_cuda_attention_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux, const void *q,
                                    const void *k, const void *v, const fg_attn_problem *pr);
fg_status fg_cuda_attention_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv,
                                     const void *dout, const void *q, const void *k, const void *v,
                                     const void *o, const void *lse, const void *aux, const fg_attn_problem *pr);

#ifdef __cplusplus
}
#endif
#endif /* FG_KERNELS_CUDA_H */
