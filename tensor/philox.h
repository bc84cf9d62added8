/* philox.h — Philox4x32-10 counter-based RNG, shared by host C and CUDA device code.
 *
 * Philox (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) maps a 128-bit
 * counter and a 64-bit key to 128 random bits through 10 rounds of multiply-high/xor with a
 * Weyl-sequence key schedule. It is the generator behind cuRAND's curandStatePhilox4_32_10_t.
 *
 * The mapping to cuRAND: curand_init(seed, subsequence, offset) uses key = (seed lo, seed hi) and
 * counter = (offset/4 lo, offset/4 hi, subsequence lo, subsequence hi); the number at `offset` is
 * word offset%4 of that block. fg_philox_u32(seed, stream, index) returns exactly that number, so
 * a CPU and a GPU that agree on (seed, stream, index) draw the same bits.
 *
 * Everything here is a pure function: no state, no allocation, usable in any thread or kernel.
 */
#ifndef FG_PHILOX_H
#define FG_PHILOX_H

#include <stdint.h>
#include <math.h>

#include "tensor/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_PHILOX_M0 0xD2511F53u
#define FG_PHILOX_M1 0xCD9E8D57u
#define FG_PHILOX_W0 0x9E3779B9u /* golden ratio */
#define FG_PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

/* One Philox round: two 32x32->64 multiplies; the high halves are mixed with the key. */
FG_HD void fg_philox_round(uint32_t ctr[4], const uint32_t key[2]) {
    uint64_t p0 = (uint64_t)FG_PHILOX_M0 * ctr[0];
    uint64_t p1 = (uint64_t)FG_PHILOX_M1 * ctr[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    uint32_t c1 = ctr[1], c3 = ctr[3];
    ctr[0] = hi1 ^ c1 ^ key[0];
    ctr[1] = lo1;
    ctr[2] = hi0 ^ c3 ^ key[1];
    ctr[3] = lo0;
}

/* Philox4x32-10: out = 10 rounds of ctr under key, bumping the key by the Weyl constants. */
FG_HD void fg_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4]) {
    uint32_t c[4] = {ctr_in[0], ctr_in[1], ctr_in[2], ctr_in[3]};
    uint32_t k[2] = {key_in[0], key_in[1]};
    for (int r = 0; r < 9; r++) {
        fg_philox_round(c, k);
        k[0] += FG_PHILOX_W0;
        k[1] += FG_PHILOX_W1;
    }
    fg_philox_round(c, k);
    out[0] = c[0];
    out[1] = c[1];
    out[2] = c[2];
    out[3] = c[3];
}

/* The 4 words of block `block` (= index/4) of stream `stream` under `seed`. */
FG_HD void fg_philox_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
    uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    fg_philox4x32_10(ctr, key, out);
}

/* The index-th 32-bit number of (seed, stream): cuRAND's curand() after curand_init(seed, stream, index). */
FG_HD uint32_t fg_philox_u32(uint64_t seed, uint64_t stream, uint64_t index) {
    uint32_t out[4];
    fg_philox_block(seed, stream, index >> 2, out);
    return out[index & 3];
}

/* Uniform float in (0, 1], cuRAND's mapping: x * 2^-32 + 2^-33. Never 0, so log() is safe. */
FG_HD float fg_u32_to_uniform(uint32_t x) { return (float)x * 2.3283064e-10f + (2.3283064e-10f / 2.0f); }

/* Uniform double in (0, 1] from one 32-bit word, for float64 tensors (same draw as the float one). */
FG_HD double fg_u32_to_uniform_f64(uint32_t x) { return (double)x * 2.3283064365386963e-10 + 1.1641532182693481e-10; }

/* Box-Muller: two uniforms in (0,1] -> two independent standard normals. */
FG_HD void fg_box_muller(uint32_t a, uint32_t b, double *n0, double *n1) {
    double u = fg_u32_to_uniform_f64(a), v = fg_u32_to_uniform_f64(b);
    double r = sqrt(-2.0 * log(u));
    double t = 6.283185307179586 * v;
    *n0 = r * sin(t);
    *n1 = r * cos(t);
}

/* Dropout keep decision with probability 1-p: keep iff the draw exceeds p * 2^32.
 * threshold = fg_dropout_threshold(p), computed once per call. */
FG_HD uint32_t fg_dropout_threshold(double p) {
    double t = p * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}

#ifdef __cplusplus
}
#endif
#endif /* FG_PHILOX_H */
