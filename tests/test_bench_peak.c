/* test_bench_peak.c — `flashgrad bench peak` prints the FMA peak and the bandwidth as positive
 * figures and refuses bad flags with one line. (Its numbers are measurements, not checked here.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
