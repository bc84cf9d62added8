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
 *  2. Raw-pointer kernels for code that keeps its own flat arrays (benchmarks, tests; train/'s
 *     optimizer goes through the kernel table, ops/kernels.h). Pointers are device memory; arrays
 *     are contiguous.
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

/* cuda/matmul.cu */
fg_tensor *fg_cuda_matmul(fg_tensor *a, fg_tensor *b);
fg_tensor *fg_cuda_linear(fg_tensor *x, fg_tensor *w, fg_tensor *bias);

/* cuda/elementwise.cu. kind: 0 add, 1 sub, 2 mul, 3 div (the order of ops/elementwise.c). */
enum { FG_CUDA_ADD = 0, FG_CUDA_SUB = 1, FG_CUDA_MUL = 2, FG_CUDA_DIV = 3 };
fg_tensor *fg_cuda_binary(int kind, fg_tensor *a, fg_tensor *b);
fg_tensor *fg_cuda_add_scalar(fg_tensor *a, double s);
fg_tensor *fg_cuda_mul_scalar(fg_tensor *a, double s);
/* dst += alpha * src: same shape and dtype, both on the GPU, any strides (ops_common.c's
 * fg_op_add_into for device tensors; the shape ops' backward goes through it). */
fg_status fg_cuda_add_into(fg_tensor *dst, const fg_tensor *src, double alpha);

/* cuda/reduce.cu: sum / mean over one axis (is_mean 0 / 1), and over everything -> (1). */
fg_tensor *fg_cuda_reduce_axis(fg_tensor *t, int axis, int keepdim, int is_mean);
fg_tensor *fg_cuda_reduce_all(fg_tensor *t, int is_mean);

/* cuda/embedding.cu: idx is HOST memory (n int32 ids, already range-checked by the caller). */
fg_tensor *fg_cuda_embedding(fg_tensor *weight, const int32_t *idx, int ndim, const int64_t *shape);

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
