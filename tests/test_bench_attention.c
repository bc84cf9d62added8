/* test_bench_attention.c — `flashgrad bench attention` in float64 and with the fraction of the FMA
 * peak: it runs, says which dtype and peak it used, writes them to its CSV, and refuses bad
 * --dtype / --peak values with one line. (The timings are measurements, not checked here.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/common.h"

static char g_dir[64];
static void make_dir(void) { fgt_make_tmpdir(g_dir, sizeof g_dir, "/tmp/fg_bench_attn_XXXXXX"); }
static void remove_dir(void) { fgt_remove_tmpdir(g_dir); }

TestSuite(bench_attention, .init = make_dir, .fini = remove_dir, .timeout = 120);

Test(bench_attention, float64_runs_and_reports_its_dtype_and_the_fraction_of_the_peak) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char cmd[1024], log[8192], csv[128];
    snprintf(csv, sizeof csv, "%s/a.csv", g_dir);
    snprintf(cmd, sizeof cmd,
             "'%s' bench attention --impl flash --n 48 --b 1 --h 2 --d 16 --repeat 1 --threads 1 --dtype float64 "
             "--peak 10 --csv '%s' 2>&1",
             fgt_bin(), csv);
    cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "bench attention --dtype float64 failed:\n%s", log);
    cr_expect(strstr(log, "float64 flash tiles"), "no dtype line:\n%s", log);
    cr_expect(strstr(log, "peak: float64 FMA peak 5.0 GFLOP/s, half the float32 FMA peak 10.0"), "no peak line:\n%s",
              log);
    cr_expect(strstr(log, "dgemm "), "no dgemm reference:\n%s", log);
    FILE *f = fopen(csv, "r");
    cr_assert_not_null(f, "no CSV at %s", csv);
    char head[1024], row[1024];
    cr_assert_not_null(fgets(head, sizeof head, f));
    cr_assert_not_null(fgets(row, sizeof row, f));
    fclose(f);
    cr_expect(strstr(head, ",dtype,peak_gflops,fwdbwd_frac_peak"), "CSV header: %s", head);
    cr_expect(strncmp(row, "flash,", 6) == 0 && strstr(row, ",float64,5.00,"), "CSV row: %s", row);
    const char *last = strrchr(row, ',');
    cr_expect(last && atof(last + 1) > 0, "fwdbwd_frac_peak not positive: %s", row);

    /* measured peak (no --peak): a positive figure is printed */
    snprintf(cmd, sizeof cmd,
             "'%s' bench attention --impl flash --n 32 --b 1 --h 1 --d 8 --repeat 1 --threads 1 --no-sgemm 2>&1",
             fgt_bin());
    cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "bench attention failed:\n%s", log);
    cr_expect(strstr(log, "float32 flash tiles") && strstr(log, "%peak"), "%s", log);
}

Test(bench_attention, refuses_a_bad_dtype_or_peak_with_one_line) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    const char *bad[] = {"--dtype float16", "--dtype", "--peak 0", "--peak -3", "--peak x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[1024], log[4096];
        snprintf(cmd, sizeof cmd, "'%s' bench attention --n 32 %s 2>&1", fgt_bin(), bad[i]);
        cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 2, "'%s' should be a usage error:\n%s", bad[i], log);
        const char *nl = strchr(log, '\n');
        cr_expect(nl && nl[1] == '\0', "'%s': more than one line:\n%s", bad[i], log);
    }
}

/* A measurement that fails (here: a problem whose buffers cannot be allocated) makes the exit status
 * 1 with a closing line that counts the failures; the CSV is still written, header only. */
Test(bench_attention, a_failed_measurement_makes_the_exit_status_nonzero) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char cmd[1024], log[8192], csv[128];
    snprintf(csv, sizeof csv, "%s/f.csv", g_dir);
    snprintf(cmd, sizeof cmd,
             "'%s' bench attention --impl flash --no-sgemm --n 1048576 --b 64 --h 64 --d 128 --repeat 1 --threads 1 "
             "--peak 10 --csv '%s' 2>&1",
             fgt_bin(), csv);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, 1, "exit %d:\n%s", st, log);
    cr_expect(strstr(log, "failed: ") && strstr(log, "1 of 1 measurements failed"), "%s", log);
    cr_expect(access(csv, R_OK) == 0, "no CSV written");
}

/* --csv onto a FIFO (or any special file) is refused before measuring; the FIFO stays a FIFO. */
Test(bench_attention, csv_onto_a_special_file_is_refused) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char cmd[1024], log[8192], fifo[128];
    snprintf(fifo, sizeof fifo, "%s/p.csv", g_dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    snprintf(cmd, sizeof cmd, "'%s' bench attention --impl flash --no-sgemm --n 32 --repeat 1 --peak 10 --csv '%s' 2>&1",
             fgt_bin(), fifo);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect(st == 1 && strstr(log, "FIFO"), "exit %d:\n%s", st, log);
    struct stat sb;
    cr_expect(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO was replaced");
}

Test(bench_attention, profile_prints_every_phase_the_call_ran_and_the_rest) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char cmd[1024], log[16384];
    snprintf(cmd, sizeof cmd,
             "'%s' bench attention --impl flash --n 130 --b 1 --h 2 --d 16 --repeat 1 --threads 1 --no-sgemm "
             "--peak 10 --profile 2>&1",
             fgt_bin());
    cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "bench attention --profile failed:\n%s", log);
    const char *want[] = {"profile (one more forward", "fwd S = Q K^T", "fwd online softmax", "fwd O = alpha O + P V",
                          "bwd P = exp(S - L)", "bwd dS = P o (dP - D)", "bwd dK += dS^T Q", "outside the phases"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) cr_expect(strstr(log, want[i]), "no '%s':\n%s", want[i], log);
    cr_expect(!strstr(log, "fwd dropout"), "a phase the call did not run is listed:\n%s", log);
}
