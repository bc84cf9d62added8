/* test_f16.c — half precision conversions (tensor/f16.h) against an independent reference: every
 * one of the 65536 halves decoded with ldexp, every rounding boundary (the midpoint of each pair of
 * neighbouring halves and the floats either side of it), and random floats checked to land on a
 * nearest half. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

#include "tensor/f16.h"
#include "tensor/philox.h"
#include "tests/bf16_ref.h"
#include "tests/common.h"

/* A finite half's value from the definition: (-1)^s 2^(e-15) (1 + m/1024), subnormal 2^-14 m/1024. */
static double ref_value(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    const double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return s ? -v : v;
}

TestSuite(f16, .timeout = 60);

Test(f16, every_half_decodes_exactly) {
    for (uint32_t i = 0; i < 65536; i++) {
        const uint16_t h = (uint16_t)i;
        const float f = fg_f16_to_f32(h);
        const int e = (h >> 10) & 31;
        if (e == 31 && (h & 1023)) {
            cr_assert(isnan(f), "0x%04x is a NaN, decoded %a", h, (double)f);
        } else if (e == 31) {
            cr_assert(isinf(f) && !!signbit(f) == (h >> 15), "0x%04x is %cinf, decoded %a", h, h >> 15 ? '-' : '+',
                      (double)f);
        } else {
            cr_assert_eq((double)f, ref_value(h), "0x%04x: %a, expected %a", h, (double)f, ref_value(h));
            cr_assert_eq(!!signbit(f), h >> 15, "0x%04x: sign lost", h);
            cr_assert_eq(fg_f16_from_f32(f), h, "0x%04x does not round-trip: 0x%04x", h, fg_f16_from_f32(f));
        }
    }
}

/* Between neighbours a < b (bits h and h + 1, both positive and finite, or b = inf past 65504) the
 * midpoint goes to the even one; the float just below it to a, just above to b. */
Test(f16, every_rounding_boundary) {
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        const double a = ref_value((uint16_t)h), b = h + 1 == 0x7c00u ? 65536.0 : ref_value((uint16_t)(h + 1));
        const float mid = (float)((a + b) / 2);
        cr_assert_eq((double)mid, (a + b) / 2, "midpoint of 0x%04x not a float", h);
        const uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : (uint16_t)h;
        for (int s = 0; s < 2; s++) {
            const uint16_t sg = s ? 0x8000u : 0;
            const float m = s ? -mid : mid;
            cr_assert_eq(fg_f16_from_f32(m), sg | even, "midpoint %a: 0x%04x, expected 0x%04x", (double)m,
                         fg_f16_from_f32(m), sg | even);
            cr_assert_eq(fg_f16_from_f32(nextafterf(m, 0)), sg | h, "just inside %a", (double)m);
            cr_assert_eq(fg_f16_from_f32(nextafterf(m, s ? -INFINITY : INFINITY)), sg | (h + 1), "just outside %a",
                         (double)m);
        }
    }
}

/* Random float32s over the half's range and beyond: the result is a nearest half (no neighbour is
 * closer), ties aside; out of range is ±inf; NaN stays NaN with its sign. */
Test(f16, random_floats_land_on_a_nearest_half) {
    for (uint64_t i = 0; i < 400000; i++) {
        const uint32_t bits = fg_philox_u32(11, 5, i);
        const float x = fgt_f32_bits(bits);
        const uint16_t r = fg_f16_from_f32(x);
        if (isnan(x)) {
            cr_assert(isnan(fg_f16_to_f32(r)) && (r >> 15) == (bits >> 31), "NaN %08x -> 0x%04x", bits, r);
            continue;
        }
        const double ax = fabs((double)x);
        if (ax >= 65520.0) {
            cr_assert_eq(r, (bits >> 31 ? 0x8000u : 0) | 0x7c00u, "%a -> 0x%04x, expected inf", (double)x, r);
            continue;
        }
        cr_assert_eq(r >> 15, bits >> 31, "%a: sign lost", (double)x);
        const uint16_t m = r & 0x7fffu;
        cr_assert(m < 0x7c00u, "%a -> 0x%04x: not finite", (double)x, r);
        const double d = fabs(ax - ref_value(m));
        if (m > 0) cr_assert(d <= fabs(ax - ref_value((uint16_t)(m - 1))), "%a: 0x%04x, 0x%04x is closer", (double)x, m, m - 1);
        if (m + 1u < 0x7c00u)
            cr_assert(d <= fabs(ax - ref_value((uint16_t)(m + 1))), "%a: 0x%04x, 0x%04x is closer", (double)x, m, m + 1);
    }
    cr_expect_eq(fg_f16_from_f32(1.0f), 0x3c00);
    cr_expect_eq(fg_f16_from_f32(65504.0f), 0x7bff);
    cr_expect_eq(fg_f16_from_f32(-INFINITY), 0xfc00);
    cr_expect_eq(fg_f16_from_f32(0x1p-24f), 0x0001);
    cr_expect_eq(fg_f16_from_f32(-0.0f), 0x8000);
}
