/* mixed.cuh — bfloat16 mixed precision on the GPU (internal to cuda/; C++): what the matmul and
 * attention shells share under FG_COMPUTE_BF16 (ops/device.h). The tensors stay float32; at each
 * call the operands are rounded to bf16 (nearest even, cuda/ptx_mma.cuh's fg_bf16_rne) into device
 * scratch by one conversion kernel (cuda/mixed.cu), the products run on bf16 operands with float32
 * accumulation, and the results are float32.
 *
 * Scratch comes from the caching allocator (fg_cu_scratch) and goes back to it when the call
 * returns, so after a training step's warm-up the same blocks come back: no step takes anything new
 * from the system.
 *
 * CPU reference: the products of the bf16-rounded operands in float64 (tests/cuda/test_ops.c), the
 * bf16 mirror of the attention kernels (tests/cuda/emu/attn_bf16_mirror.h).
 */
#ifndef FG_CUDA_MIXED_CUH
#define FG_CUDA_MIXED_CUH

#include <stdint.h>

#include "cuda/cuda_common.cuh"
#include "ops/attention_kernels.h"
#include "ops/device.h"

/* 1 when the CUDA device computes float32 products in bfloat16 mixed precision. */
static inline bool fg_cu_mixed_bf16(void) { return fg_device_compute(FG_CUDA) == FG_COMPUTE_BF16; }

/* A bf16 copy of float32 device memory, in scratch that lives as long as this object:
 * p() (batch, rows, cols) contiguous bf16 bits, element (b, r, c) = bf16(src[b·sb + r·ld + c]). */
struct fg_cu_bf16_copy {
    fg_cu_scratch s;
    /* FG_OK, or FG_ERR_OOM / FG_ERR_DEVICE naming `what`. */
    fg_status make(const float *src, int64_t batch, int64_t rows, int64_t cols, int64_t ld, int64_t sb,
                   const char *what);
    /* a contiguous array of n floats */
    fg_status make(const float *src, int64_t n, const char *what) { return make(src, 1, 1, n, n, n, what); }
    const uint16_t *p() const { return s.as<uint16_t>(); }
};

/* The attention entry points of the kernel table (cuda/attention.cu) under bfloat16 mixed
 * precision: q, k, v (and dout) float32, as fg_cu_attention_forward / _backward take them,
 * converted to bf16 and passed to the bf16 flash kernels (cuda/attention_bf16.h); o, lse, dq, dk,
 * dv float32. Flash only, float32 only, and only what those kernels implement (no softcap, no
 * ALiBi, head dims a multiple of 8 up to 128): anything else is FG_ERR_ARG (FG_ERR_DTYPE for a
 * dtype) with one line saying so, never a float32 fallback. The forward sets aux (lse_lo), when
 * given, to zero: the bf16 kernels keep no rounding remainder of lse, and their backward reads lse
 * alone. The backward adds into dq, dk, dv (any NULL). */
fg_status fg_cu_attention_mixed_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux, const void *q,
                                        const void *k, const void *v, const fg_attn_problem *pr);
fg_status fg_cu_attention_mixed_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv,
                                         const void *dout, const void *q, const void *k, const void *v, const void *o,
                                         const void *lse, const fg_attn_problem *pr);

#endif /* FG_CUDA_MIXED_CUH */
