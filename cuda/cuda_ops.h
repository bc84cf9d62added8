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

/* cuda/gelu.cu, cuda/softmax.cu */
fg_tensor *fg_cuda_gelu(fg_tensor *x);
fg_tensor *fg_cuda_softmax(fg_tensor *x);

/* cuda/cross_entropy.cu: targets is HOST memory (one int32 per row, checked by the caller). */
fg_tensor *fg_cuda_cross_entropy(fg_tensor *logits, const int32_t *targets);

/* cuda/dropout.cu: the keep decision of element k is fg_philox_u32(seed, stream, k) >= threshold,
 * exactly as on the CPU, so a GPU run drops the same elements. p == 0 returns x retained. */
fg_tensor *fg_cuda_dropout(fg_tensor *x, double p, uint64_t seed, uint64_t stream);

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
