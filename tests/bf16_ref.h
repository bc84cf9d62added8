/* bf16_ref.h — the tests' own bfloat16 reference (tests/test_bf16.c, tests/cuda/test_bf16.c),
 * independent of tensor/bf16.h: the float32 → bfloat16 rounding worked out by integer steps on the
 * bits, and a float32 from its bits. */
#ifndef FGT_BF16_REF_H
#define FGT_BF16_REF_H

#include <stdint.h>
#include <string.h>

/* Round to nearest, ties to even, on the bits (not tensor/bf16.h's add-and-truncate): keep the top
 * half, add one when the dropped half is above 0x8000, or equal with an odd kept part. Only
 * NaN-ness is specified for NaN inputs; callers check those apart. */
static inline uint16_t fgt_ref_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t keep = u >> 16, rest = u & 0xffffu;
    if (rest > 0x8000u || (rest == 0x8000u && (keep & 1u))) keep++;
    return (uint16_t)keep;
}

static inline float fgt_f32_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline int fgt_bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu); }

#endif /* FGT_BF16_REF_H */
