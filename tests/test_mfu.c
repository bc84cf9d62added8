/* test_mfu.c — the MFU figures a training run prints and logs name the peak they divide by.
 *
 * MFU = tokens/s x model flop/token / peak. For each row of log.csv the test recomputes it from
 * that row's tokens_per_s and peak_gflops and the flop/token of the header line, and checks that
 * the progress lines name the same peak as log.csv. Under `mpirun -np 2`, tokens/s counts both
 * processes' tokens, so the peak named must be both processes' (2 x one process's, which a run of
 * one process on the same machine names): a line that names one process's peak while dividing by
 * two fails the recomputation by a factor of 2. The two-process case is skipped with one line where
 * mpirun is missing or the program was built without MPI.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tests/common.h"

static char dir[256];

static void setup(void) {
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_mfu.XXXXXX");
    char p[400];
    snprintf(p, sizeof p, "%s/text.txt", dir);
    FILE *f = fopen(p, "w");
    cr_assert(f, "cannot write %s", p);
    for (int i = 0; i < 400; i++) fputs("the cat sat on a mat and the dog ran\n", f);
    fclose(f);
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) cr_log_warn("could not remove %s", dir);
}

TestSuite(mfu, .init = setup, .fini = teardown, .timeout = 180);

/* mpirun on the loopback, as tests/test_mpi.c runs it (root allowed, shared memory, session files in
 * the test's folder, no leak report for Open MPI's own allocations under the sanitizers) */
#define MPIRUN                                                                                                         \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "                   \
    "TMPDIR=\"$PWD\" ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" mpirun --oversubscribe --mca btl self,vader"

/* A model big enough for MFU to show in the lines' one decimal: most of a step is matmuls. */
#define RUN                                                                                                            \
    "--data text.txt --n-layer 2 --n-head 2 --n-embd 64 --block-size 32 --batch-size 4 --eval-every 0 "               \
    "--eval-iters 1 --samples 0 --threads 1 --steps 4 --log-every 1 --warmup 0"

/* `[mpirun -np P] flashgrad train RUN --out OUT` (P = 0: no mpirun); its output into out. */
static void train(int P, const char *out_dir, char *out, size_t n) {
    char cmd[2048], np[400] = "";
    if (P > 0) snprintf(np, sizeof np, MPIRUN " -np %d", P);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s '%s' train " RUN " --out %s 2>&1", dir, np, fgt_bin(), out_dir);
    int st = fgt_run_cmd(cmd, out, n);
    cr_assert_eq(st, 0, "`%s` exited %d:\n%s", cmd, st, out);
}

/* The checks on one run's output and log.csv; returns the peak it names. */
static double check_run(int P, const char *out_dir) {
    static char out[65536];
    train(P, out_dir, out, sizeof out);
    const char *h = strstr(out, "model flop/token");
    cr_assert(h, "no flop/token in the header:\n%s", out);
    while (h > out && h[-1] != 'x') h--;
    const double flop = strtod(h, NULL);
    cr_assert(flop > 0, "flop/token does not parse:\n%s", out);
    if (P > 1) {
        char want[64];
        snprintf(want, sizeof want, "/ (%d processes x peak = ", P);
        cr_expect(strstr(out, want), "the header does not say the peak is %d processes':\n%s", P, out);
    }

    char p[600];
    snprintf(p, sizeof p, "%s/%s/log.csv", dir, out_dir);
    void *buf = NULL;
    size_t n = 0;
    cr_assert_eq(fg_read_file(p, 0, &buf, &n), FG_OK, "%s: %s", p, fg_last_error());
    char *line = strchr(buf, '\n'); /* past the header */
    double peak = NAN;
    int rows = 0;
    for (; line && line[1]; line = strchr(line + 1, '\n')) {
        long step;
        double loss, lr, gn, tps, mfu, pk;
        /* step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops (val_loss empty here) */
        char tail[128];
        if (sscanf(line + 1, "%ld,%lf,%lf,%lf,%lf,%127[^\n]", &step, &loss, &lr, &gn, &tps, tail) != 6) break;
        const char *c = strchr(tail, ',');
        cr_assert(c && sscanf(c + 1, "%lf,%lf", &mfu, &pk) == 2, "log.csv row %ld: '%s'", step, tail);
        /* mfu has 4 significant digits, tokens_per_s 1 decimal, peak_gflops 1 decimal */
        const double want = tps * flop / (pk * 1e9);
        cr_expect(fabs(mfu - want) <= 2e-3 * want, "row %ld: mfu %g but %g tok/s x %g flop / %g GF/s = %g", step, mfu,
                  tps, flop, pk, want);
        if (rows++ == 0) peak = pk;
        cr_expect(fabs(pk - peak) < 0.05, "row %ld: peak %g, row 1's %g", step, pk, peak);
    }
    free(buf);
    cr_assert(rows == 4, "%d rows in %s", rows, p);

    /* every progress line names that peak, and its MFU is the same quotient to the line's digits */
    int lines = 0;
    for (const char *s = strstr(out, "\nstep "); s; s = strstr(s + 1, "\nstep ")) {
        if (s[6 + strspn(s + 6, "0123456789")] != '/') continue; /* "step N: train loss ..." */
        const char *m = strstr(s, " MFU ");
        const char *e = strchr(s + 1, '\n');
        cr_assert(m && (!e || m < e), "a step line without MFU:\n%s", out);
        double pct, pk;
        cr_assert(sscanf(m, " MFU %lf%% of %lf GF/s", &pct, &pk) == 2, "MFU does not parse: %.80s", m);
        cr_expect(fabs(pk - peak) < 0.05 + 1e-3 * peak, "a step line names %g GF/s, log.csv %g:\n%s", pk, peak, out);
        if (P > 1) cr_expect(strstr(m, " x ") && m[strcspn(m, "\n")], "the line does not show %d x the peak", P);
        lines++;
    }
    cr_expect_eq(lines, 4, "%d step lines:\n%s", lines, out);
    return peak;
}

Test(mfu, one_process_names_the_peak_it_divides_by) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    check_run(0, "one");
}

Test(mfu, two_processes_name_both_peaks) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        fgt_skip("mfu under mpirun", "mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev, then rebuild)");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ldd '%s' 2>/dev/null | grep -q libmpi", fgt_bin());
    if (system(cmd) != 0) fgt_skip("mfu under mpirun", "the flashgrad program was built without MPI");
    const double one = check_run(0, "one");
    const double two = check_run(2, "two");
    /* both processes run the one-thread configuration the single run measured (the cache's line) */
    cr_expect(fabs(two - 2 * one) < 0.15, "two processes name %g GF/s, one names %g: not 2 x", two, one);
}
