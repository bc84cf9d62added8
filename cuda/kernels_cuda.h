/* kernels_cuda.h — the CUDA kernel table's launchers, each defined in cuda/<family>.cu beside its
 * kernels. Contracts: ops/kernels.h (pointers are device memory, the
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

/* Each entry FN(family, name, where, ...) of ops/kernels.h's lists with where = all, declared as
 * fg_cu_<family>_<name> with the entry's signature and defined in cuda/<family>.cu.
 *
 * cuda/attention.cu — the table's attention member (caps FG_ATTN_CAP_ALL). Same contract as the
 * CPU kernels of ops/attention_kernels.h, on device pointers. impl FLASH: the tiled kernels
 * (forward writes O and lse only; the backward recomputes P from lse); `aux` is lse_lo (B, H, Nq)
 * or NULL, as for fg_attn_flash_*_lo. impl NAIVE: the reference with materialized S and P through
 * cuBLAS (`aux` receives P when not NULL and is required by its backward). Both implement causal
 * masking, dropout and the built-in variants of pr->var — GQA (k, v, dk, dv are (B, H_kv, Nk, d)),
 * sliding windows, ALiBi (pr->var.alibi_slopes is a HOST array or NULL) and softcapping — with
 * ops/attention.h's semantics. User callbacks (score_mod, mask) are refused: they run on the CPU
 * only. The tile sizes of pr (block_q, block_k) are the CPU's and are ignored: the GPU picks its
 * own per dtype and head dim (see cuda/attention.cu). Head dims up to 256 are supported; larger
 * ones fail with FG_ERR_ARG. The backward is deterministic (no floating-point atomics, also under
 * GQA). */
#define FG_CU_DECLARE_all(decl) decl
#define FG_CU_DECLARE_cpu(decl)
#define FG_CU_DECLARE_(family, name, where, ret, params) FG_CU_DECLARE_##where(ret fg_cu_##family##_##name params;)
#define FG_CU_DECLARE_VALUE_(family, type, name, cpu_value, cuda_value)
#define FG_CU_DECLARE_FAMILY_(family, LIST) LIST(FG_CU_DECLARE_, FG_CU_DECLARE_VALUE_)
FG_KERNEL_FAMILIES(FG_CU_DECLARE_FAMILY_)
#undef FG_CU_DECLARE_
#undef FG_CU_DECLARE_VALUE_
#undef FG_CU_DECLARE_FAMILY_

#ifdef __cplusplus
}
#endif
#endif /* FG_KERNELS_CUDA_H */
