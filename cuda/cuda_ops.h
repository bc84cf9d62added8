/* cuda_ops.h — the op families of ops/ops.h and ops/attention.h on the GPU.
 *
 * Two layers:
 *  1. Tensor ops with autograd, one per dispatch point in ops/<family>.c. Each has the contract of its
 *     ops.h twin — same shapes, same saved-for-backward buffers, same backward rule, result a new
 *     reference or NULL with fg_last_error() — for tensors on FG_CUDA, and is called by that twin
 *     after it has checked the arguments:
 *         #ifdef FG_WITH_CUDA
 *             if (x->device == FG_CUDA) return fg_cuda_layernorm(x, weight, bias, eps);
 *         #endif
 *     Inputs may be strided views; an op makes what it needs contiguous on the device. float32
 *     and float64 both work. Matmuls go through cuBLAS (plain float32 math, no TF32); the rest are
 *     fused kernels, one file per family: cuda/<family>.cu mirrors ops/<family>.c and names it as
 *     its CPU reference.
 *     Every reduction (bias and LayerNorm parameter gradients, sums, embedding scatter-add,
 *     cross-entropy mean) runs in a fixed order without atomics, so two runs are bit-identical.
 *  2. Raw-pointer kernels for code that keeps its own flat arrays (train/'s AdamW and gradient
 *     clipping, benchmarks, tests). Pointers are device memory; arrays are contiguous.
 *
 * Everything runs on the one stream of cuda/runtime.cu and returns before the GPU finishes; a
 * copy to the host (fg_to_host, fg_to) waits. All of it needs fg_cuda_init() first.
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

/* ---- 1. tensor ops (cuda/<family>.cu; contracts in ops/ops.h) ---- */

/* cuda/gelu.cu, cuda/softmax.cu */
fg_tensor *fg_cuda_gelu(fg_tensor *x);
fg_tensor *fg_cuda_softmax(fg_tensor *x);

/* cuda/cross_entropy.cu: targets is HOST memory (one int32 per row, checked by the caller). */
fg_tensor *fg_cuda_cross_entropy(fg_tensor *logits, const int32_t *targets);

/* cuda/dropout.cu: the keep decision of element k is fg_philox_u32(seed, stream, k) >= threshold,
 * exactly as on the CPU, so a GPU run drops the same elements. p == 0 returns x retained. */
fg_tensor *fg_cuda_dropout(fg_tensor *x, double p, uint64_t seed, uint64_t stream);

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

/* cuda/adamw.cu — train/adamw.c's ADAMW_RANGE on device arrays p, g, m, v of n elements:
 *     m = b1 m + (1 − b1) g;  v = b2 v + (1 − b2) g²;
 *     p = p · decay_factor − step_size · m / (sqrt(v) / bc2_sqrt + eps) */
fg_status fg_cuda_adamw_range(fg_dtype dt, void *p, const void *g, void *m, void *v, int64_t n, double decay_factor,
                              double b1, double b2, double step_size, double bc2_sqrt, double eps);
/* *out = Σ x[i]² in float64 (fixed order: deterministic). Waits for the result. */
fg_status fg_cuda_sum_squares(fg_dtype dt, const void *x, int64_t n, double *out);
/* x[i] *= s (float32 multiplies by (float)s, as train/adamw.c does). */
fg_status fg_cuda_scale(fg_dtype dt, void *x, int64_t n, double s);

#ifdef __cplusplus
}
#endif
#endif /* FG_CUDA_OPS_H */
