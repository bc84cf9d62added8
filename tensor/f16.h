/* f16.h — IEEE 754 binary16 (half precision) values as their 16 bits: 1 sign bit, 5 exponent bits
 * (bias 15), 10 mantissa bits. Every half is exactly a float32, so half -> float32 is exact;
 * float32 -> half rounds to nearest, ties to even. Shared by the host and CUDA device code, as
 * tensor/bf16.h is.
 *
 * The half's range: normals from 2^-14 to 65504, subnormals k 2^-24 for k = 1 .. 1023. A float32 at
 * or beyond 65520 (65504 plus half its ulp, a tie that goes to the even neighbour, infinity) becomes
 * ±inf; one at or below 2^-25 (half the smallest subnormal, a tie that goes to 0) becomes ±0; a NaN
 * stays a NaN (sign kept, quiet bit set). */
#ifndef FG_F16_H
#define FG_F16_H

#include <stdint.h>
#include <string.h>

#include "tensor/hd.h"

#ifdef __cplusplus
extern "C" {
#endif

FG_HD float fg_f16_to_f32(uint16_t h) {
    const uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, m = h & 1023u;
    uint32_t u;
    if (e == 31) {
        u = s | 0x7f800000u | m << 13; /* inf, or a NaN with its payload */
    } else if (e != 0) {
        u = s | (e + 112u) << 23 | m << 13; /* rebias the exponent: 127 - 15 = 112 */
    } else if (m == 0) {
        u = s; /* ±0 */
    } else {
        /* a subnormal m 2^-24: shift m up until its leading 1 is the hidden bit of a float32 normal */
        uint32_t e32 = 113; /* the float32 exponent of 2^-14, the place of m's bit 10 */
        uint32_t mm = m;
        while (!(mm & 1024u)) mm <<= 1, e32--;
        u = s | e32 << 23 | (mm & 1023u) << 13;
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

FG_HD uint16_t fg_f16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint16_t s = (uint16_t)(u >> 16 & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00u | (a >> 13 & 0x3ffu)); /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00u);                     /* 65520 and up: inf */
    if (a >= 0x38800000u) {
        /* a normal half: drop 13 mantissa bits rounding to nearest even (half an ulp is 0x1000, less
         * one when the kept part is even), then rebias the exponent; a carry out of the mantissa is
         * the next binade, exactly as for bf16 */
        const uint32_t r = a + 0xfffu + (a >> 13 & 1u);
        return (uint16_t)(s | ((r >> 13) - (112u << 10)));
    }
    if (a <= 0x33000000u) return s; /* at most 2^-25: 0 (the tie at 2^-25 goes to the even 0) */
    /* a subnormal half: x = mant 2^(e - 150) with the hidden bit set, in units of 2^-24 that is
     * mant >> (126 - e), rounded to nearest even; 1024 units is the smallest normal, encoded alike */
    const uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - e; /* 14 .. 24 */
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(s | q);
}

#ifdef __cplusplus
}
#endif
#endif /* FG_F16_H */
