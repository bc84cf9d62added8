/* test_bench_train.c — `flashgrad bench train`'s report (MFU, peak RSS) and its synthetic tokens
 * (--synthetic-vocab): the same losses for the same seed, a loss near log V at the start, and one
 * line with exit 2 for settings that contradict it. (Its timings are measurements, not checked.) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/common.h"

static void need_bin(void) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
}

Test(bench_train, synthetic_vocab_trains_at_log_v_and_reports_mfu_and_rss) {
    need_bin();
    char cmd[1024], a[8192], b[8192];
    snprintf(cmd, sizeof cmd,
             "'%s' bench train --synthetic-vocab 3000 --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 "
             "--batch-size 4 --steps 2 --warmup-steps 1 --threads 1 2>&1",
             fgt_bin());
    cr_assert_eq(fgt_run_cmd(cmd, a, sizeof a), 0, "%s", a);
    cr_assert_eq(fgt_run_cmd(cmd, b, sizeof b), 0, "%s", b);
    const char *la = strstr(a, "losses: "), *lb = strstr(b, "losses: ");
    cr_assert(la && lb, "no losses line:\n%s", a);
    cr_expect_eq(strncmp(la, lb, strcspn(la, "\n")), 0, "the same seed gave other losses:\n%s\n%s", a, b);
    const double l0 = strtod(la + strlen("losses: "), NULL);
    cr_expect(fabs(l0 - log(3000.0)) < 0.5, "first loss %g, log V = %g", l0, log(3000.0));
    const char *m = strstr(a, "mfu: "), *r = strstr(a, "peak RSS: ");
    cr_assert(m && r, "no mfu or peak RSS line:\n%s", a);
    cr_expect_gt(atof(m + strlen("mfu: ")), 0.0, "%s", a);
    cr_expect_gt(atof(r + strlen("peak RSS: ")), 0.0, "%s", a);
    cr_expect(strstr(a, "synthetic tokens, vocabulary 3000"), "%s", a);
}

Test(bench_train, synthetic_vocab_refuses_data_and_bad_sizes_in_one_line) {
    need_bin();
    const char *bad[3] = {"--synthetic-vocab 100 --data x.txt", "--synthetic-vocab 1",
                          "--synthetic-vocab 70 --digits 2"};
    for (int k = 0; k < 3; k++) {
        char cmd[1024], log[4096];
        snprintf(cmd, sizeof cmd, "'%s' bench train %s 2>&1", fgt_bin(), bad[k]);
        cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 2, "`bench train %s`:\n%s", bad[k], log);
        int lines = 0;
        for (const char *c = log; *c; c++) lines += *c == '\n';
        cr_expect_eq(lines, 1, "`bench train %s` printed %d lines:\n%s", bad[k], lines, log);
    }
}

/* --profile P: the table names the model's ops and the step's phases, and the same losses come
 * out of the timed steps as without it (profiling changes no arithmetic). */
Test(bench_train, profile_lists_the_ops_and_phases_of_a_step) {
    need_bin();
    char cmd[1024], a[16384], b[16384];
    const char *args = "--synthetic-vocab 50 --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 4 "
                       "--steps 2 --warmup-steps 1 --threads 1";
    snprintf(cmd, sizeof cmd, "'%s' bench train %s --profile 2 2>&1", fgt_bin(), args);
    cr_assert_eq(fgt_run_cmd(cmd, a, sizeof a), 0, "%s", a);
    snprintf(cmd, sizeof cmd, "'%s' bench train %s 2>&1", fgt_bin(), args);
    cr_assert_eq(fgt_run_cmd(cmd, b, sizeof b), 0, "%s", b);
    const char *want[] = {"op profile: 2 steps", "linear ", "layernorm ", "gelu ", "step: clip, AdamW",
                          "step: gradient sum, norm", "backward: graph walk", "(outside the profile)"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) cr_expect(strstr(a, want[i]), "no '%s':\n%s", want[i], a);
    const char *la = strstr(a, "losses: "), *lb = strstr(b, "losses: ");
    cr_assert(la && lb, "no losses line:\n%s\n%s", a, b);
    cr_expect_eq(strncmp(la, lb, strcspn(lb, "\n")), 0, "--profile changed the losses:\n%s\n%s", a, b);
}
