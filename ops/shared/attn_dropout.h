/* attn_dropout.h — which attention weights dropout keeps, shared by host C and CUDA device code.
 *
 * Attention dropout drops element (b, h, i, j) of the softmax weights P (h the query head) with
 * probability p and scales the kept ones by 1/(1 − p) (ops/attention.h). The decision is a pure
 * function of (seed, b, h, i, j) through Philox4x32-10 (tensor/philox.h): counter = (j/4, i, h, b),
 * word j%4, so one Philox block serves four consecutive keys. Naive and flash attention, CPU and
 * GPU, forward and backward all call fg_attn_keep (or, on the CPU, fg_philox_blocks of
 * ops/cpu/vphilox.h, which gives the same words), so they drop exactly the same elements and no mask
 * is stored. tests/test_cuda_shared.c checks the counter mapping, tests/cuda/test_device.cu the
 * device build against the host one.
 */
#ifndef FG_ATTN_DROPOUT_H
#define FG_ATTN_DROPOUT_H

#include <stdint.h>

#include "tensor/hd.h"
#include "tensor/philox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keep element (b, h, i, j) of the attention weights? threshold = fg_dropout_threshold(p)
 * (tensor/philox.h); p == 0 (threshold 0) keeps everything. */
FG_HD int fg_attn_keep(uint64_t seed, uint32_t threshold, uint32_t b, uint32_t h, uint32_t i, uint32_t j) {
    if (threshold == 0) return 1;
    uint32_t ctr[4] = {j >> 2, i, h, b};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    fg_philox4x32_10(ctr, key, out);
    return out[j & 3] >= threshold;
}

#ifdef __cplusplus
}
#endif
#endif /* FG_ATTN_DROPOUT_H */
