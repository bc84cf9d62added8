/* vphilox.h — Philox4x32-10 for many consecutive counters at once (AVX-512: 16 blocks, AVX2: 8),
 * for the CPU's dropout masks.
 *
 * Dropout regenerates its mask from Philox wherever it needs it (ops/cpu/dropout.c, attention's
 * fg_attn_dropout_scale_*): the forward and the backward of every dropout site, every step. One
 * block costs 10 rounds of two 32×32→64 multiplies; done one block at a time that was ~25% of a
 * training step with dropout 0.1. Here the 16 (8) lanes of a vector hold 16 (8) blocks whose first
 * counter word is consecutive; the multiplies are vpmuludq on the even and the odd 32-bit lanes.
 * The results are the same words as tensor/philox.h's fg_philox4x32_10 — integer arithmetic, no
 * rounding — on every level (tests/test_fastpath.c checks them against it).
 *
 *   fg_philox_blocks(c0, c1, c2, c3, key, n, out)
 *       out[4·i + w] = word w of Philox4x32-10 under key with counter (c0 + i, c1, c2, c3), for
 *       i in [0, n). c0 + i wraps modulo 2^32 (no carry into c1): callers whose counters carry
 *       (fg_philox_block's 64-bit block index) split the range at the wrap.
 */
#ifndef FG_VPHILOX_H
#define FG_VPHILOX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void fg_philox_blocks(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, const uint32_t key[2], int64_t n,
                      uint32_t *out);

/* The words of blocks [first, first + n) of (seed, stream), as fg_philox_block gives them: the
 * 64-bit block index carries into the second counter word. out holds 4·n words. */
void fg_philox_stream_blocks(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, uint32_t *out);

#ifdef __cplusplus
}
#endif
#endif /* FG_VPHILOX_H */
