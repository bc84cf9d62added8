/* cuda_ops.h — the raw CUDA entry points that code outside the kernel table still calls.
 *
 * Every op reaches the GPU through its one shell in ops/<family>.c and the FG_CUDA kernel table
 * (ops/kernels.h, registered by fg_cuda_init from cuda/kernels.cu). What is left here are raw-pointer
 * functions for benchmarks and tests: the attention kernels and a row-major GEMM. Pointers are device
 * memory; arrays are contiguous unless a stride says otherwise. Everything runs on the one stream of
 * cuda/runtime.cu and returns before the GPU finishes; a copy to the host (fg_to_host, fg_to) waits.
 * All of it needs fg_cuda_init() first.
 */
#ifndef FG_CUDA_OPS_H
#define FG_CUDA_OPS_H

#include <stdint.h>

#include "autograd/autograd.h"
#include "ops/attention.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif


/* ---- attention (cuda/attention.cu): the fg_attn_backend that fg_cuda_init() registers ----
 * Same contract as the CPU kernels of ops/attention.h, on device pointers. impl FLASH: the
 * tiled kernels (forward writes O and lse only; the backward recomputes P from lse); `aux` is
 * lse_lo (B, H, Nq) or NULL, as for fg_attn_flash_*_lo. impl NAIVE: the reference with
 * materialized S and P through cuBLAS (`aux` receives P when not NULL and is required by its
 * backward). Both implement causal masking, dropout and the built-in variants of pr->var — GQA
 * (k, v, dk, dv are (B, H_kv, Nk, d)), sliding windows, ALiBi (pr->var.alibi_slopes is a HOST
 * array or NULL) and softcapping — with ops/attention.h's semantics; the backend registers them as
 * FG_ATTN_CAP_*. User callbacks (score_mod, mask) are refused with FG_ERR_DEVICE: they run on the
 * CPU only. The tile sizes of pr (block_q, block_k) are the CPU's and are ignored: the GPU picks its
 * own per dtype and head dim (see cuda/attention.cu). Head dims up to 256 are supported; larger
 * ones fail with FG_ERR_ARG. The backward is deterministic (no floating-point atomics, also under
 * GQA). */
fg_status fg_cuda_attention_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux, const void *q,
                                    const void *k, const void *v, const fg_attn_problem *pr);
fg_status fg_cuda_attention_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv,
                                     const void *dout, const void *q, const void *k, const void *v,
                                     const void *o, const void *lse, const void *aux, const fg_attn_problem *pr);

/* ---- 2. raw-pointer kernels ---- */

/* cuda/matmul.cu — row-major GEMM like cblas_?gemm(CblasRowMajor, ...):
 *     C (M, N) = alpha · op(A) op(B) + beta · C,   op(X) = X or Xᵀ (ta / tb non-zero),
 * repeated over `batch` matrices that are sA, sB, sC elements apart (0 = shared). */
fg_status fg_cuda_gemm(fg_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                       int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, double beta, void *C,
                       int64_t ldc, int64_t sC, int64_t batch);

#ifdef __cplusplus
}
#endif
#endif /* FG_CUDA_OPS_H */
