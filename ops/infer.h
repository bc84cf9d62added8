/* infer.h — forward-only ops on raw contiguous buffers, outside autograd, for inference loops such
 * as a KV cache (train/gpt.c's): the same device kernels, and so the same bits, as the ops of
 * ops.h, with the checks and the errors of an op. Each returns FG_OK, or an error
 * (fg_last_error()) and leaves its output untouched where it could not run.
 *
 * Legend: every buffer is contiguous, row-major, of dtype dt (float32 or float64) in device d's
 * memory; token ids are in host memory. Sizes are elements. Outputs do not overlap inputs.
 */
#ifndef FG_INFER_H
#define FG_INFER_H

#include <stdint.h>

#include "ops/attention.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out (n, C): out[r, :] = table[idx[r], :] of table (V, C); every idx[r] in [0, V). */
fg_status fg_infer_embedding(fg_device d, fg_dtype dt, void *out, const void *table, const int32_t *idx, int64_t n,
                             int64_t V, int64_t C);

/* out (R, C) = layernorm of the rows of x (R, C) with weight w and bias b (C; NULL: 1 and 0);
 * mean, rstd (R) receive each row's mean and 1/sqrt(var + eps), as fg_layernorm saves them. */
fg_status fg_infer_layernorm(fg_device d, fg_dtype dt, void *out, void *mean, void *rstd, const void *x, const void *w,
                             const void *b, int64_t R, int64_t C, double eps);

/* out (R, N) = x (R, K) · wᵀ + b, w (N, K) as fg_linear stores it, b (N) or NULL. */
fg_status fg_infer_linear(fg_device d, fg_dtype dt, void *out, const void *x, const void *w, const void *b, int64_t R,
                          int64_t N, int64_t K);

/* out (n) = gelu(x) (fg_gelu's tanh form). */
fg_status fg_infer_gelu(fg_device d, fg_dtype dt, void *out, const void *x, int64_t n);

/* Attention of H heads, each on its own arrays: head h's queries q and outputs o (Nq, hd) start
 * h · q_stride elements in, its keys k and values v (Nk, hd) h · kv_stride elements in (a cache
 * may hold more rows than Nk), its logsumexp lse (Nq) h · Nq elements in. Each head is
 * fg_attention with B = H = 1 under opts (NULL: defaults), through the attention family's one
 * entry, its overflow check included (FG_ERR_NUMERIC); the heads run on the CPU's thread pool.
 * CPU only; no dropout and no variant (both would need the head's index). */
fg_status fg_infer_attention(fg_device d, fg_dtype dt, const fg_attn_opts *opts, int64_t H, int64_t Nq, int64_t Nk,
                             int64_t hd, void *o, void *lse, const void *q, const void *k, const void *v,
                             int64_t q_stride, int64_t kv_stride);

#ifdef __cplusplus
}
#endif
#endif /* FG_INFER_H */
