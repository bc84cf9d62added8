/* attention_bf16.h — bf16 flash attention on tensor cores (cuda/attention_bf16.cu), callable
 * from C. The CUDA kernel table reaches them for FG_BF16 tensors through cuda/attention.cu's
 * bf16 shells (bf16 o and gradients rounded from these float32 ones); the entry points take raw
 * device pointers. q (B, H, Nq, d), k, v (B, H_kv, Nk, d) hold bf16 bits; o (B, H, Nq, d) and
 * lse (B, H, Nq) are float32. Supported: d a multiple of 8 up to 128, causal (either alignment),
 * window, GQA, dropout; not softcap, ALiBi or user callbacks (FG_ERR_ARG naming what is refused).
 * q, k, v and dout are read in 16-byte chunks: they must be 16-byte aligned (else FG_ERR_ARG).
 */
#ifndef FG_CUDA_ATTENTION_BF16_H
#define FG_CUDA_ATTENTION_BF16_H

#include <stdint.h>

#include "ops/attention_kernels.h"
#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FG_OK, or FG_ERR_ARG (sizes these kernels cannot hold) or FG_ERR_DEVICE (what they do not
 * implement, fg_attn_check_caps with FG_ATTN_CAPS_BF16_CUDA). */
fg_status fg_cuda_attn_bf16_check(const fg_attn_problem *pr);
/* The forward on the current stream: o, lse out (device memory). */
fg_status fg_cuda_attn_bf16_forward(float *o, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                    const fg_attn_problem *pr);

/* The backward on the current stream, recomputing P from q, k and lse: ADDS into dq (B, H, Nq, d)
 * and dk, dv (B, H_kv, Nk, d), float32, all three required; Drow (B, H, Nq) is float32 scratch
 * (overwritten); dout (B, H, Nq, d) bf16; o, lse the forward's. Deterministic: no atomics. */
fg_status fg_cuda_attn_bf16_backward(float *dq, float *dk, float *dv, float *Drow, const uint16_t *dout,
                                     const uint16_t *q, const uint16_t *k, const uint16_t *v, const float *o,
                                     const float *lse, const fg_attn_problem *pr);

#ifdef __cplusplus
}
#endif
#endif /* FG_CUDA_ATTENTION_BF16_H */
