/* bf16.h — bfloat16 (FG_BF16) values as their 16 bits: the top half of a float32 (1 sign bit,
 * 8 exponent bits, 7 mantissa bits), so float32 -> bf16 drops the low 16 bits with rounding and
 * bf16 -> float32 is exact. Shared by the host (tensor/, npy, safetensors) and CUDA device code
 * (cuda/runtime.cu's copy kernels), hence FG_HD.
 *
 * Rounding is to nearest, ties to even (IEEE 754 roundTiesToEven): a float32 halfway between two
 * bf16 values goes to the one whose last kept bit is 0; values beyond the largest bf16 (0x7f7f,
 * about 3.39e38) plus half its ulp round to ±inf; subnormals are kept; a NaN stays a NaN (sign
 * kept, the quiet bit set so truncation cannot turn it into inf). */
#ifndef FG_BF16_H
#define FG_BF16_H

#include <stdint.h>
#include <string.h>

#include "tensor/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

FG_HD uint16_t fg_bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x0040u);
    /* add half a bf16 ulp (0x8000), less one when the kept part is even, then truncate: below the
     * halfway point nothing carries, above it the kept part steps up, exactly at it only an odd
     * kept part steps up (to even). An exponent carry is the correct next binade, up to inf. */
    u += 0x7fffu + (u >> 16 & 1u);
    return (uint16_t)(u >> 16);
}

FG_HD float fg_bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* x rounded once to bf16. Through float32 would round twice: a double just above (below) a bf16
 * halfway point can round to the float32 AT that point, and the tie would then go to even instead
 * of up (down). So when float32 lands exactly on a halfway point but x is not that float, step the
 * float32 one ulp towards x first; it is then on x's side of the halfway point. */
FG_HD uint16_t fg_bf16_from_f64(double x) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0xffffu) == 0x8000u && (double)f != x && x == x) {
        const double ax = x < 0 ? -x : x, af = f < 0 ? -(double)f : (double)f;
        u = ax > af ? u + 1 : u - 1; /* magnitude up or down; the bits are sign-magnitude */
        memcpy(&f, &u, 4);
    }
    return fg_bf16_from_f32(f);
}

#ifdef __cplusplus
}
#endif
#endif /* FG_BF16_H */
