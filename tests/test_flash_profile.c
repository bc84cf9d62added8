/* test_flash_profile.c — the CPU flash kernels' phase profile (ops/cpu.h, fg_flash_profile_*):
 * its product counts against the operations the problem must do, its time against the clock. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "ops/attention_kernels.h"
#include "ops/cpu.h"
#include "tensor/error.h"

typedef struct {
    float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
} bufs;

static bufs make(int64_t n) {
    bufs b;
    float **all[] = {&b.q, &b.k, &b.v, &b.o, &b.lse, &b.dout, &b.dq, &b.dk, &b.dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        *all[i] = calloc((size_t)n, sizeof(float));
        cr_assert(*all[i]);
    }
    for (int64_t i = 0; i < n; i++) b.q[i] = (float)sin(0.37 * (double)i), b.k[i] = (float)cos(0.11 * (double)i);
    for (int64_t i = 0; i < n; i++) b.v[i] = (float)sin(0.05 * (double)i), b.dout[i] = (float)cos(0.29 * (double)i);
    return b;
}

static void release(bufs *b) {
    float *all[] = {b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* Without a mask every tile is computed, so each product phase counts 2·B·H·Nq·Nk·d operations
 * exactly (ragged last blocks included: 200 is not a multiple of 64); a causal mask skips whole
 * tiles, so the counts fall between half of that and all of it. The phases' time is the calls'
 * time, no more (one thread: thread time is wall time). */
static void check(int causal) {
    const int64_t B = 2, H = 3, N = 200, d = 32, n = B * H * N * d;
    fg_attn_problem pr;
    fg_attn_opts o = fg_attn_defaults();
    o.causal = causal;
    cr_assert_eq(fg_attn_problem_init(&pr, B, H, N, N, d, &o), FG_OK, "%s", fg_last_error());
    bufs b = make(n);
    const int threads = fg_pool_threads();
    fg_pool_set_threads(1);
    fg_flash_profile prof;
    fg_flash_profile_start();
    cr_assert_eq(fg_attn_flash_forward_f32(b.o, b.lse, b.q, b.k, b.v, &pr), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_attn_flash_backward_f32(b.dq, b.dk, b.dv, b.dout, b.q, b.k, b.v, b.o, b.lse, &pr), FG_OK, "%s",
                 fg_last_error());
    fg_flash_profile_stop(&prof);
    fg_pool_set_threads(threads);
    const double full = 2.0 * (double)(B * H * N * N * d);
    const fg_flash_phase products[] = {FG_FLASH_FWD_QK, FG_FLASH_FWD_PV, FG_FLASH_BWD_QK, FG_FLASH_BWD_DV,
                                       FG_FLASH_BWD_DP, FG_FLASH_BWD_DQ, FG_FLASH_BWD_DK};
    for (size_t i = 0; i < sizeof products / sizeof products[0]; i++) {
        const double f = prof.flops[products[i]];
        if (causal)
            cr_expect(f >= 0.5 * full && f < full, "%s: %g operations, want within [%g, %g)",
                      fg_flash_phase_name(products[i]), f, 0.5 * full, full);
        else
            cr_expect_eq(f, full, "%s: %g operations, want %g", fg_flash_phase_name(products[i]), f, full);
    }
    double sum = 0;
    for (int p = 0; p < FG_FLASH_PHASE_COUNT; p++) {
        cr_expect(prof.seconds[p] >= 0, "phase %d: %g s", p, prof.seconds[p]);
        sum += prof.seconds[p];
        const int is_product = p == FG_FLASH_FWD_QK || p == FG_FLASH_FWD_PV || p == FG_FLASH_BWD_QK ||
                               p == FG_FLASH_BWD_DV || p == FG_FLASH_BWD_DP || p == FG_FLASH_BWD_DQ ||
                               p == FG_FLASH_BWD_DK;
        if (!is_product) cr_expect_eq(prof.flops[p], 0, "%s counts no products", fg_flash_phase_name((fg_flash_phase)p));
    }
    cr_expect(sum > 0 && sum <= prof.wall_s * 1.05 + 1e-4, "phases %g s in %g s of wall time", sum, prof.wall_s);
    cr_expect(prof.seconds[FG_FLASH_FWD_QK] > 0 && prof.seconds[FG_FLASH_BWD_DK] > 0, "the products take time");
    release(&b);
}

Test(flash_profile, product_counts_are_the_problems_and_time_is_the_calls) { check(0); }
Test(flash_profile, causal_skips_whole_tiles) { check(1); }

Test(flash_profile, off_counts_nothing) {
    const int64_t N = 100, d = 16, n = N * d;
    fg_attn_problem pr;
    fg_attn_opts o = fg_attn_defaults();
    cr_assert_eq(fg_attn_problem_init(&pr, 1, 1, N, N, d, &o), FG_OK, "%s", fg_last_error());
    bufs b = make(n);
    fg_flash_profile prof;
    fg_flash_profile_start();
    fg_flash_profile_stop(&prof);
    cr_assert_eq(fg_attn_flash_forward_f32(b.o, b.lse, b.q, b.k, b.v, &pr), FG_OK, "%s", fg_last_error());
    fg_flash_profile_start(); /* the totals start from zero: the call above, made while off, is not in them */
    fg_flash_profile_stop(&prof);
    for (int p = 0; p < FG_FLASH_PHASE_COUNT; p++)
        cr_expect(prof.seconds[p] == 0 && prof.flops[p] == 0, "phase %d: %g s, %g operations", p, prof.seconds[p],
                  prof.flops[p]);
    release(&b);
}
