/* test_bench_peak.c — `flashgrad bench peak` prints the FMA peak and the bandwidth as positive
 * figures and refuses bad flags with one line. (Its numbers are measurements, not checked here.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/cpu/peak.h"
#include "ops/cpu/threadpool.h"
#include "tests/common.h"

Test(bench_peak, prints_a_positive_peak_and_bandwidth_and_refuses_bad_flags) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char cmd[1024], log[4096];
    snprintf(cmd, sizeof cmd, "'%s' bench peak --rounds 1 --mib 16 --threads 1 2>&1", fgt_bin());
    cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "bench peak failed:\n%s", log);
    const char *p = strstr(log, "fma peak: "), *b = strstr(log, "memory bandwidth: ");
    cr_assert(p && b, "missing figures:\n%s", log);
    cr_expect_gt(atof(p + strlen("fma peak: ")), 0.0, "%s", log);
    cr_expect_gt(atof(b + strlen("memory bandwidth: ")), 0.0, "%s", log);
    snprintf(cmd, sizeof cmd, "'%s' bench peak --rounds 0 2>&1", fgt_bin());
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 2, "--rounds 0 should be a usage error:\n%s", log);
}

/* The library's cached peak: positive, measured once per thread count and SIMD level (the same
 * figure again until one changes), and of the order of lanes x 2 flops x threads per ns at most
 * a few GHz (a bound that no real core exceeds: 8 GHz with 4 FMA pipes). */
Test(bench_peak, the_cached_peak_is_positive_and_measured_once_per_setting) {
    fg_pool_set_threads(1);
    const double a = fg_fma_peak_gflops(), b = fg_fma_peak_gflops();
    cr_expect_gt(a, 0.0);
    cr_expect_eq(a, b, "a second call measured again: %g then %g", a, b);
    const double bound = 8.0 * 4 * 2 * fg_simd_float_lanes(fg_simd_active());
    cr_expect_lt(a, bound, "one thread's peak %g GFLOP/s is above %g", a, bound);
    fg_pool_set_threads(2);
    const double c = fg_fma_peak_gflops();
    cr_expect_gt(c, 0.0);
    cr_expect_eq(fg_fma_peak_gflops(), c, "the two-thread figure is not cached");
    fg_pool_set_threads(0);
}
