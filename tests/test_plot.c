/* test_plot.c — `flashgrad plot`: a finished run, several runs and a run still in progress (no
 * checkpoint, a half-written last line) each give a PNG (signature and size checked); bad input is
 * one line and a nonzero exit, and leaves other files alone. Skips with one line without gnuplot. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/common.h"

static char dir[256];

static void setup(void) { fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_plot_test_XXXXXX"); }
static void teardown(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* `flashgrad <args>` in dir (env: prefix such as "PATH=/none"), stdout and stderr into log. */
static int fg(const char *env, const char *args, char *log, size_t n) {
    char cmd[9000], bin[4096];
    if (!realpath(fgt_bin(), bin)) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 120 env %s '%s' %s 2>&1", dir, env ? env : "", bin, args);
    return fgt_run_cmd(cmd, log, n);
}

static void need_gnuplot(void) {
    if (fgt_run_cmd("command -v gnuplot >/dev/null 2>&1", NULL, 0) != 0)
        fgt_skip("flashgrad plot", "no gnuplot here (Debian: gnuplot-nox)");
}

static int lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* dir/rel is a PNG: the 8-byte signature, an IHDR chunk, at least `min` bytes */
static void expect_png(const char *rel, long min) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s was not written", rel);
    unsigned char b[16];
    size_t n = fread(b, 1, 16, f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    static const unsigned char magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    cr_expect(n == 16 && !memcmp(b, magic, 8) && !memcmp(b + 12, "IHDR", 4), "%s is not a PNG", rel);
    cr_expect(size >= min, "%s has %ld bytes, expected at least %ld", rel, size, min);
}

static void write_file(const char *rel, const char *text) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void train(const char *out, const char *lr) {
    char args[600], log[8192];
    snprintf(args, sizeof args,
             "train --data t.txt --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --steps 12 "
             "--eval-every 4 --eval-iters 1 --samples 0 --threads 1 --warmup 2 --lr %s --out %s",
             lr, out);
    int st = fg(NULL, args, log, sizeof log);
    cr_assert_eq(st, 0, "train exited %d: %s", st, log);
}

static void text_file(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/t.txt", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int i = 0; i < 200; i++) fputs("the quick brown fox jumps over the lazy dog. ", f);
    fclose(f);
}

TestSuite(plot, .init = setup, .fini = teardown, .timeout = 240);

Test(plot, finished_and_overlaid_runs_and_a_run_in_progress_give_pngs) {
    need_gnuplot();
    text_file();
    train("a", "1e-3");
    train("b", "3e-3");
    char log[8192];
    int st = fg(NULL, "plot --run a --out one.png", log, sizeof log);
    cr_assert_eq(st, 0, "plot exited %d: %s", st, log);
    cr_expect_str_eq(log, "one.png\n", "plot prints the file it wrote: %s", log);
    expect_png("one.png", 20000);
    st = fg(NULL, "plot --run a --run=b/ --out two.png", log, sizeof log);
    cr_assert_eq(st, 0, "plot exited %d: %s", st, log);
    expect_png("two.png", 20000);
    /* in progress: a log.csv and no checkpoint yet, its last line half written */
    mkdir(strcat(strcpy((char[600]){0}, dir), "/c"), 0777);
    write_file("c/log.csv", "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu\n"
                            "1,4.1,0.0001,2.0,1000,,0.10\n2,3.9,0.0002,1.8,1100,,0.12\n3,3.7,0.0003,1.7,1100,3.8,0.13\n"
                            "4,3.6,0.00");
    st = fg(NULL, "plot --run c --run a --out three.png", log, sizeof log);
    cr_assert_eq(st, 0, "plot of a run in progress exited %d: %s", st, log);
    expect_png("three.png", 20000);
    /* an existing PNG is regenerated output: replaced */
    st = fg(NULL, "plot --run a --out one.png", log, sizeof log);
    cr_expect_eq(st, 0, "replacing a PNG exited %d: %s", st, log);
    /* no temporary file is left beside it */
    st = fgt_run_cmd(strcat(strcat(strcpy((char[700]){0}, "ls "), dir), " | grep -c tmp"), log, sizeof log);
    cr_expect_str_eq(log, "0\n", "temporary files left: %s", log);
}

Test(plot, bad_input_is_one_line_and_a_nonzero_exit) {
    char log[8192];
    struct {
        const char *args;
        int code;
        const char *phrase;
    } cases[] = {
        {"plot", 2, "--run DIR is required"},
        {"plot --run", 2, "--run needs a value"},
        {"plot --run x --out x.txt", 2, "name it FILE.png"},
        {"plot --run x --bogus 1", 2, "unknown flag"},
        {"plot --run missing --out m.png", 1, "cannot read missing/log.csv"},
        {"plot --run empty --out m.png", 1, "no header line"},
        {"plot --run junk --out m.png", 1, "no step and loss columns"},
        {"plot --run header --out m.png", 1, "no complete rows yet"},
        {"plot --run header --out keep.png", 1, "exists and is not a PNG"},
    };
    mkdir(strcat(strcpy((char[600]){0}, dir), "/empty"), 0777);
    mkdir(strcat(strcpy((char[600]){0}, dir), "/junk"), 0777);
    mkdir(strcat(strcpy((char[600]){0}, dir), "/header"), 0777);
    write_file("empty/log.csv", "");
    write_file("junk/log.csv", "hello,world\n1,2\n");
    write_file("header/log.csv", "step,loss,lr\n5,2.0");
    write_file("keep.png", "not a picture\n");
    int gp = fgt_run_cmd("command -v gnuplot >/dev/null 2>&1", NULL, 0) == 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (!gp && cases[i].code == 1 && !strstr(cases[i].phrase, "not a PNG")) continue; /* gnuplot's line first */
        int st = fg(NULL, cases[i].args, log, sizeof log);
        cr_expect_eq(st, cases[i].code, "`flashgrad %s` exited %d, expected %d: %s", cases[i].args, st, cases[i].code,
                     log);
        cr_expect_eq(lines(log), 1, "`flashgrad %s`: expected one line, got: %s", cases[i].args, log);
        cr_expect(strstr(log, cases[i].phrase), "`flashgrad %s` does not say '%s': %s", cases[i].args, cases[i].phrase,
                  log);
    }
    /* the refused file is untouched */
    char path[600], buf[64] = "";
    snprintf(path, sizeof path, "%s/keep.png", dir);
    FILE *f = fopen(path, "r");
    cr_assert(f);
    cr_expect(fgets(buf, sizeof buf, f) && !strcmp(buf, "not a picture\n"), "keep.png was changed: %s", buf);
    fclose(f);
    /* without gnuplot: one line, exit 1, nothing written */
    write_file("header/log.csv", "step,loss,lr\n5,2.0,0.1\n");
    int st = fg("PATH=/nonexistent", "plot --run header --out g.png", log, sizeof log);
    cr_expect_eq(st, 1, "plot without gnuplot exited %d: %s", st, log);
    cr_expect(lines(log) == 1 && strstr(log, "gnuplot is not installed"), "without gnuplot: %s", log);
    snprintf(path, sizeof path, "%s/g.png", dir);
    cr_expect(access(path, F_OK) != 0, "g.png was written without gnuplot");
}
