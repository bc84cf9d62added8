/* test_plot.c — `flashgrad plot`.
 *
 * The data handed to the renderer: `plot --script` prints the script gnuplot is given (data inline
 * as datablocks); the tests write their own log.csv files (several runs, columns in any order,
 * missing values, CRLF lines, a half-written last line), read the datablocks back and compare each
 * value with the one they wrote, exactly; a stand-in gnuplot (a shell script first in PATH) records
 * what it is given and answers with a known PNG, or fails in the ways gnuplot can (an error exit, a
 * signal, output that is no PNG, a hang, a flood). Around it: the output name is written exactly
 * (spaces, quotes, a newline, %, backslashes, long paths) or refused in one line, a symbolic link
 * anywhere in the output folder is never followed, special files as inputs are refused at once,
 * rows outside reason are refused by line and column, and no message carries a raw control byte.
 * Runs with the real gnuplot (a finished run, overlaid runs, a run in progress) skip with one line
 * without it. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tensor/error.h"
#include "tests/common.h"

static char dir[256];

static void setup(void) { fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_plot_test_XXXXXX"); }
static void teardown(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* s in single quotes for sh (a quote as '\''), into out. */
static const char *shq(char *out, size_t n, const char *s) {
    size_t k = 0;
    out[k++] = '\'';
    for (; *s && k + 6 < n; s++) {
        if (*s == '\'') {
            memcpy(out + k, "'\\''", 4);
            k += 4;
        } else {
            out[k++] = *s;
        }
    }
    out[k++] = '\'';
    out[k] = '\0';
    return out;
}

/* `flashgrad <args>` in dir (env: prefix such as "PATH=/none"), at most `secs` seconds (timeout's
 * 124 past them), stdout and stderr into log. */
static int fg_t(int secs, const char *env, const char *args, char *log, size_t n) {
    static char cmd[20000];
    char bin[4096];
    if (!realpath(fgt_bin(), bin)) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout %d env %s '%s' %s 2>&1", dir, secs, env ? env : "", bin, args);
    return fgt_run_cmd(cmd, log, n);
}
static int fg(const char *env, const char *args, char *log, size_t n) { return fg_t(120, env, args, log, n); }

static void expect_png(const char *rel, long min);

static int have_gnuplot(void) { return fgt_run_cmd("command -v gnuplot >/dev/null 2>&1", NULL, 0) == 0; }
static void need_gnuplot(void) {
    if (!have_gnuplot()) fgt_skip("flashgrad plot", "no gnuplot here (Debian: gnuplot-nox)");
}

static int lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* One line of printable ASCII: no control byte, no byte above 0x7e, one newline at the end. */
static void expect_one_clean_line(const char *what, const char *log) {
    cr_expect_eq(lines(log), 1, "%s: expected one line, got: %s", what, log);
    size_t n = strlen(log);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)log[i];
        if (c == '\n' && i + 1 == n) continue;
        if (c < 0x20 || c > 0x7e) {
            cr_expect(0, "%s: byte 0x%02x at %zu of the message: %s", what, c, i, log);
            break;
        }
    }
}

static void path_of(char *out, size_t n, const char *rel) { snprintf(out, n, "%s/%s", dir, rel); }

static void write_bytes(const char *rel, const void *data, size_t len) {
    char path[600];
    path_of(path, sizeof path, rel);
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    cr_assert_eq(fclose(f), 0);
}
static void write_file(const char *rel, const char *text) { write_bytes(rel, text, strlen(text)); }

static void make_dir(const char *rel) {
    static char path[8400];
    path_of(path, sizeof path, rel);
    cr_assert(mkdir(path, 0777) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
}

/* The whole of dir/rel into buf (NUL-terminated); its length, or -1 when it cannot be read. */
static long read_rel(const char *rel, char *buf, size_t cap) {
    char path[600];
    path_of(path, sizeof path, rel);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return (long)n;
}

/* The names in dir (not . and ..), sorted, joined by '|' (a name may hold a newline). */
static void names_in(const char *d, char *out, size_t n) {
    struct dirent **e;
    int k = scandir(d, &e, NULL, alphasort);
    cr_assert(k >= 0, "scandir %s: %s", d, strerror(errno));
    out[0] = '\0';
    for (int i = 0; i < k; i++) {
        if (strcmp(e[i]->d_name, ".") && strcmp(e[i]->d_name, "..")) {
            if (*out) strncat(out, "|", n - strlen(out) - 1);
            strncat(out, e[i]->d_name, n - strlen(out) - 1);
        }
        free(e[i]);
    }
    free(e);
}

/* ---- a stand-in gnuplot ---- */

/* What the stand-in writes for a picture: the PNG signature and the IEND chunk (plot checks both). */
static const char tiny_png[] = "\x89PNG\r\n\x1a\n\0\0\0\0IEND\xae\x42\x60\x82";
#define TINY_PNG_LEN (sizeof tiny_png - 1)
#define PRINT_TINY_PNG "printf '\\211PNG\\r\\n\\032\\n\\0\\0\\0\\0IEND\\256B`\\202'"

static char fake_env[1400];

/* dir/bin/gnuplot as a sh script with `body`; fake_env names PATH with it first and CAP (where it
 * may leave what it got: dir/cap). */
static const char *fake_gnuplot(const char *body) {
    make_dir("bin");
    make_dir("cap");
    char script[4096];
    snprintf(script, sizeof script, "#!/bin/sh\n%s\n", body);
    write_file("bin/gnuplot", script);
    char path[600];
    path_of(path, sizeof path, "bin/gnuplot");
    cr_assert_eq(chmod(path, 0755), 0);
    snprintf(fake_env, sizeof fake_env, "PATH='%s/bin:/usr/bin:/bin' CAP='%s/cap'", dir, dir);
    return fake_env;
}
/* A gnuplot that records its arguments and its whole input, then draws tiny_png. */
#define RECORDING_GNUPLOT "printf '%s\\n' \"$@\" > \"$CAP/argv\"; cat > \"$CAP/stdin\"; " PRINT_TINY_PNG

/* ---- the datablocks of a script ---- */

typedef struct {
    double v[5];
} sc_row;

/* The rows of datablock `name` ("$run0") in script text: their count, or -1 when there is no such
 * block. Each row has `cols` numbers ("NaN" where missing). */
static long datablock(const char *text, const char *name, int cols, sc_row *rows, long cap) {
    char head[64];
    snprintf(head, sizeof head, "%s << EOD\n", name);
    const char *p = strstr(text, head);
    if (!p || (p != text && p[-1] != '\n')) return -1;
    p += strlen(head);
    long n = 0;
    while (strncmp(p, "EOD\n", 4)) {
        cr_assert(*p, "datablock %s does not end", name);
        cr_assert(n < cap, "datablock %s has more than %ld rows", name, cap);
        for (int j = 0; j < cols; j++) {
            char *e;
            rows[n].v[j] = strtod(p, &e);
            cr_assert(e != p && (*e == ' ' || *e == '\n'), "datablock %s row %ld: bad number at '%.20s'", name, n, p);
            p = e + (*e == ' ');
        }
        cr_assert(*p == '\n', "datablock %s row %ld has more than %d numbers", name, n, cols);
        p++;
        n++;
    }
    return n;
}

/* a == b as doubles, NaN equal to NaN */
static int same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }

/* ---- logs the tests write ---- */

/* One log row as the test wrote it: the strings of each column ("" missing). */
typedef struct {
    char step[32], loss[32], lr[32], val[32], mfu[32];
} log_row;

static double val_of(const char *s) { return *s ? strtod(s, NULL) : NAN; }

/* Expects the datablocks $run<k> and $val<k> of script to be exactly rows[0..n), with tokens
 * (the second column) step * tokens_per_step, or NaN when tokens_per_step is 0. */
static void expect_run_data(const char *script, int k, const log_row *rows, long n, double tokens_per_step) {
    static sc_row got[512];
    char name[16];
    snprintf(name, sizeof name, "$run%d", k);
    long m = datablock(script, name, 5, got, 512);
    cr_assert_eq(m, n, "%s has %ld rows, the log %ld", name, m, n);
    long nv = 0;
    for (long i = 0; i < n; i++) {
        double want[5] = {val_of(rows[i].step), tokens_per_step > 0 ? val_of(rows[i].step) * tokens_per_step : NAN,
                          val_of(rows[i].loss), val_of(rows[i].lr), val_of(rows[i].mfu)};
        for (int j = 0; j < 5; j++)
            cr_expect(same(got[i].v[j], want[j]), "%s row %ld column %d: %.17g, the log says %.17g", name, i, j + 1,
                      got[i].v[j], want[j]);
        nv += *rows[i].val != 0;
    }
    snprintf(name, sizeof name, "$val%d", k);
    m = datablock(script, name, 3, got, 512);
    if (nv == 0) {
        cr_expect_eq(m, -1, "%s exists for a run without val_loss", name);
        return;
    }
    cr_assert_eq(m, nv, "%s has %ld rows, the log %ld val_loss values", name, m, nv);
    long i = 0;
    for (long r = 0; r < n; r++) {
        if (!*rows[r].val) continue;
        double s = val_of(rows[r].step);
        double want[3] = {s, tokens_per_step > 0 ? s * tokens_per_step : NAN, val_of(rows[r].val)};
        for (int j = 0; j < 3; j++)
            cr_expect(same(got[i].v[j], want[j]), "%s row %ld column %d: %.17g, the log says %.17g", name, i, j + 1,
                      got[i].v[j], want[j]);
        i++;
    }
}

/* A small deterministic stream of numbers for the logs. */
static uint64_t lcg = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(lcg >> 11) / 9007199254740992.0;
}

/* Fills rows[0..n) with plausible values: steps from `first` by `stride`, a val_loss every
 * `val_every` rows, an mfu missing every 7th row. */
static void make_rows(log_row *rows, long n, long first, long stride, int val_every) {
    for (long i = 0; i < n; i++) {
        log_row *r = &rows[i];
        snprintf(r->step, sizeof r->step, "%ld", first + i * stride);
        snprintf(r->loss, sizeof r->loss, "%.6f", 4.5 - 3.0 * (double)i / (double)n + 0.1 * uniform());
        snprintf(r->lr, sizeof r->lr, "%.6g", 1e-3 * uniform());
        snprintf(r->val, sizeof r->val, "%s", "");
        if (val_every && i % val_every == val_every - 1)
            snprintf(r->val, sizeof r->val, "%.6f", 4.0 - 2.0 * (double)i / (double)n);
        snprintf(r->mfu, sizeof r->mfu, "%s", "");
        if (i % 7 != 3) snprintf(r->mfu, sizeof r->mfu, "%.4g", 0.3 * uniform());
    }
}

TestSuite(plot, .init = setup, .fini = teardown, .timeout = 240);

/* The helper behind every message that quotes outside text. */
Test(plot, messages_quote_outside_text_printably) {
    char out[32];
    static const struct {
        const char *in;
        size_t n, cap;
        const char *want;
    } cases[] = {
        {"abc", 3, 16, "abc"},
        {"a\x1b[2J\n", 6, 16, "a\\x1b[2J\\x0a"},
        {"x\\y", 3, 16, "x\\\\y"},
        {"\0\x7f\x80\xff", 4, 20, "\\x00\\x7f\\x80\\xff"},
        {"0123456", 7, 8, "0123456"},     /* fits exactly */
        {"01234567", 8, 8, "0123..."},    /* one too many: cut, and says so */
        {"abcd\x01", 5, 8, "abcd..."},    /* one too many: cut, and says so */
        {"abc\x01\x02", 5, 10, "abc..."}, /* an escape that does not fit is not cut in half */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cr_assert(cases[i].cap <= sizeof out);
        fg_printable(out, cases[i].cap, cases[i].in, cases[i].n);
        cr_expect_str_eq(out, cases[i].want, "case %zu: '%s', expected '%s'", i, out, cases[i].want);
        cr_expect(strlen(out) < cases[i].cap, "case %zu: past the buffer", i);
    }
}

Test(plot, the_renderer_gets_every_row_of_every_log_exactly) {
    /* run a: train's own header and column order; b: columns in another order, no mfu column, CRLF
     * lines; c: step and loss alone, steps far apart. a and b end with a row still being written,
     * c with a whole row. */
    static log_row a[60], b[25], c[9];
    make_rows(a, 60, 1, 1, 10);
    make_rows(b, 25, 2, 2, 4);
    make_rows(c, 9, 100, 1000, 0);
    for (long i = 0; i < 25; i++) b[i].mfu[0] = '\0';
    for (long i = 0; i < 9; i++) c[i].lr[0] = c[i].mfu[0] = c[i].val[0] = '\0';
    static char text[65536];
    int k = snprintf(text, sizeof text, "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops\n");
    for (long i = 0; i < 60; i++)
        k += snprintf(text + k, sizeof text - (size_t)k, "%s,%s,%s,1.5,1234.5,%s,%s,%s\n", a[i].step, a[i].loss,
                      a[i].lr, a[i].val, a[i].mfu, *a[i].mfu ? "55.5" : "");
    snprintf(text + k, sizeof text - (size_t)k, "61,1.2345,0.0001,1.0,10");
    make_dir("a");
    write_file("a/log.csv", text);
    k = snprintf(text, sizeof text, "val_loss,lr,loss,step\r\n");
    for (long i = 0; i < 25; i++)
        k += snprintf(text + k, sizeof text - (size_t)k, "%s,%s,%s,%s\r\n", b[i].val, b[i].lr, b[i].loss, b[i].step);
    snprintf(text + k, sizeof text - (size_t)k, ",0.001,2.0,52\r");
    make_dir("b");
    write_file("b/log.csv", text);
    k = snprintf(text, sizeof text, "step,loss\n");
    for (long i = 0; i < 9; i++) k += snprintf(text + k, sizeof text - (size_t)k, "%s,%s\n", c[i].step, c[i].loss);
    make_dir("c");
    write_file("c/log.csv", text);

    static char out[1 << 17];
    int st = fg(NULL, "plot --run a --run b/ --run=c --script", out, sizeof out);
    cr_assert_eq(st, 0, "plot --script exited %d: %.2000s", st, out);
    expect_run_data(out, 0, a, 60, 0);
    expect_run_data(out, 1, b, 25, 0);
    expect_run_data(out, 2, c, 9, 0);
    cr_expect(datablock(out, "$run3", 5, (sc_row[1]){0}, 1) == -1, "a fourth run in the script");
    /* each run is drawn under its folder's name */
    cr_expect(strstr(out, "title 'a (no checkpoint yet) train'") && strstr(out, "title 'b (no checkpoint yet) val'") &&
                  strstr(out, "$run2 using 1:3 with lines lw 1.5 lc 3 title 'c (no checkpoint yet) train'"),
              "labels: %.3000s", out);
    /* the picture goes to gnuplot's standard output: the script names no file */
    cr_expect(strstr(out, "\nset output\n") && !strstr(out, "set output '"), "set output in: %.3000s", out);
}

Test(plot, tokens_and_labels_come_from_the_checkpoint) {
    char path[600];
    path_of(path, sizeof path, "t.txt");
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int i = 0; i < 200; i++) fputs("the quick brown fox jumps over the lazy dog. ", f);
    fclose(f);
    static char log[1 << 17];
    int st = fg(NULL,
                "train --data t.txt --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --grad-accum 2 "
                "--steps 6 --eval-every 3 --eval-iters 1 --samples 0 --threads 1 --warmup 2 --lr 1e-3 --out r",
                log, sizeof log);
    cr_assert_eq(st, 0, "train exited %d: %s", st, log);
    /* the rows, read by this test from the log train wrote */
    static char text[8192];
    cr_assert(read_rel("r/log.csv", text, sizeof text) > 0);
    static const char header[] = "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops,val_bpb\n";
    cr_assert(!strncmp(text, header, sizeof header - 1), "%s", text);
    log_row rows[16];
    long n = 0;
    for (char *s = strchr(text, '\n'); s && *++s && n < 16; s = strchr(s, '\n')) {
        char f8[8][32] = {{0}};
        char *p = s;
        for (int j = 0; j < 8; j++) {
            size_t l = strcspn(p, ",\n");
            snprintf(f8[j], sizeof f8[j], "%.*s", (int)l, p);
            p += l + (p[l] == ',');
        }
        log_row *r = &rows[n++];
        snprintf(r->step, sizeof r->step, "%s", f8[0]);
        snprintf(r->loss, sizeof r->loss, "%s", f8[1]);
        snprintf(r->lr, sizeof r->lr, "%s", f8[2]);
        snprintf(r->val, sizeof r->val, "%s", f8[5]);
        snprintf(r->mfu, sizeof r->mfu, "%s", f8[6]);
    }
    cr_assert_eq(n, 6, "train logged %ld rows for 6 steps", n);
    st = fg(NULL, "plot --run r --script", log, sizeof log);
    cr_assert_eq(st, 0, "plot --script exited %d: %.2000s", st, log);
    /* a step is batch 4 x accumulation 2 x block 16 tokens */
    expect_run_data(log, 0, rows, n, 4.0 * 2 * 16);
    cr_expect(strstr(log, "title 'r: L1 H2 C16 T16, B4x2, lr 0.001 train'"), "label: %.3000s", log);
}

Test(plot, gnuplot_gets_the_script_on_stdin_and_no_path) {
    make_dir("r");
    write_file("r/log.csv", "step,loss,lr,val_loss\n1,3.5,0.001,\n2,3.25,0.002,3.375\n");
    const char *env = fake_gnuplot(RECORDING_GNUPLOT);
    static char log[1 << 16], script[1 << 16], got[1 << 16];
    int st = fg(env, "plot --run r --out 'pic-Out.png'", log, sizeof log);
    cr_assert_eq(st, 0, "plot exited %d: %s", st, log);
    cr_expect_str_eq(log, "pic-Out.png\n");
    /* what gnuplot drew is what was written, byte for byte */
    char png[64];
    long n = read_rel("pic-Out.png", png, sizeof png);
    cr_expect(n == (long)TINY_PNG_LEN && !memcmp(png, tiny_png, TINY_PNG_LEN), "pic-Out.png is not gnuplot's output");
    /* its arguments name no file; its input is --script's (the title's clock minute aside) */
    cr_assert(read_rel("cap/argv", got, sizeof got) >= 0);
    cr_expect_str_eq(got, "-d\n", "gnuplot's arguments: %s", got);
    cr_assert(read_rel("cap/stdin", got, sizeof got) > 0);
    st = fg(NULL, "plot --run r --script", script, sizeof script);
    cr_assert_eq(st, 0);
    char *cut_g = strstr(got, "set multiplot"), *cut_s = strstr(script, "set multiplot");
    cr_assert(cut_g && cut_s);
    *cut_g = *cut_s = '\0';
    cr_expect_str_eq(got, script, "gnuplot's input differs from --script's");
    cr_expect(!strstr(cut_g + 1, "pic-Out") && !strstr(got, "pic-Out"), "gnuplot was told the output's name");
    log_row rows[2] = {{"1", "3.5", "0.001", "", ""}, {"2", "3.25", "0.002", "3.375", ""}};
    expect_run_data(got, 0, rows, 2, 0);
    /* nothing else appeared */
    char names[4096];
    names_in(dir, names, sizeof names);
    cr_expect_str_eq(names, "bin|cap|pic-Out.png|r");
}

Test(plot, rows_outside_reason_are_refused_by_line_and_column) {
    static const struct {
        const char *row, *column;
    } cases[] = {
        {"3,nan,0.001,1,1,,0.1,50", "loss"},
        {"3,inf,0.001,1,1,,0.1,50", "loss"},
        {"3,-0.5,0.001,1,1,,0.1,50", "loss"},
        {"3,2e6,0.001,1,1,,0.1,50", "loss"},
        {"3,1e400,0.001,1,1,,0.1,50", "loss"},
        {"3,,0.001,1,1,,0.1,50", "loss"},
        {"3,2.5x,0.001,1,1,,0.1,50", "loss"},
        {"-3,2.5,0.001,1,1,,0.1,50", "step"},
        {"0,2.5,0.001,1,1,,0.1,50", "step"},
        {"2.5,2.5,0.001,1,1,,0.1,50", "step"},
        {"x,2.5,0.001,1,1,,0.1,50", "step"},
        {"10000000000000,2.5,0.001,1,1,,0.1,50", "step"},
        {"2,2.5,0.001,1,1,,0.1,50", "step"}, /* not after step 2 */
        {"1,2.5,0.001,1,1,,0.1,50", "step"},
        {"3,2.5,1e300,1,1,,0.1,50", "lr"},
        {"3,2.5,-1e-3,1,1,,0.1,50", "lr"},
        {"3,2.5,0.001,1,1,nan,0.1,50", "val_loss"},
        {"3,2.5,0.001,1,1,-2,0.1,50", "val_loss"},
        {"3,2.5,0.001,1,1,,3.1e+301,50", "mfu"},
        {"3,2.5,0.001,1,1,,-0.1,50", "mfu"},
        {"3,2.5", "fields"},
        {"3,2.5,0.001,1,1,,0.1,50,9", "fields"},
        {"", "fields"},
        {"3,\x1b[2J\x07\23331m,0.001,1,1,,0.1,50", "loss"},
    };
    make_dir("r");
    const char *env = fake_gnuplot(PRINT_TINY_PNG);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[512], log[4096], what[600];
        snprintf(text, sizeof text,
                 "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops\n1,3.0,0.001,1,1,,0.1,50\n"
                 "2,2.9,0.001,1,1,2.95,0.1,50\n%s\n5,2.5,0.001,1,1,,0.1,50\n",
                 cases[i].row);
        write_file("r/log.csv", text);
        snprintf(what, sizeof what, "row '%s'", cases[i].row);
        for (int script = 0; script < 2; script++) {
            int st = fg(env, script ? "plot --run r --script" : "plot --run r --out x.png", log, sizeof log);
            cr_expect_eq(st, 1, "%s: exited %d: %s", what, st, log);
            expect_one_clean_line(what, log);
            cr_expect(strstr(log, "r/log.csv:4: ") && strstr(log, cases[i].column),
                      "%s: does not name line 4 and %s: %s", what, cases[i].column, log);
        }
        char path[600];
        path_of(path, sizeof path, "x.png");
        cr_expect(access(path, F_OK) != 0, "%s: x.png was written", what);
    }
    /* a header that names a column twice, and a header of binary junk */
    write_file("r/log.csv", "step,loss,loss\n1,2,3\n");
    char log[4096];
    int st = fg(env, "plot --run r --script", log, sizeof log);
    cr_expect(st == 1 && strstr(log, "column loss twice"), "a repeated column: %d %s", st, log);
    static const char junk[] = "\x1b]0;owned\x07\x1b[2J\x9b\x00\xff\xfe step\r\x1b[1A,\x7f loss\n1,2\n";
    write_bytes("r/log.csv", junk, sizeof junk - 1);
    st = fg(env, "plot --run r --out x.png", log, sizeof log);
    cr_expect_eq(st, 1, "a binary header: exited %d: %s", st, log);
    expect_one_clean_line("a binary header", log);
    cr_expect(strstr(log, "no step and loss columns") && strstr(log, "\\x1b]0;owned\\x07"), "a binary header: %s", log);
}

/* A unix socket bound at dir/rel. */
static void make_socket(const char *rel) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    char path[600];
    path_of(path, sizeof path, rel);
    cr_assert(strlen(path) < sizeof a.sun_path);
    strcpy(a.sun_path, path);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    cr_assert(s >= 0);
    cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0, "bind %s: %s", path, strerror(errno));
    close(s);
}

Test(plot, special_files_as_inputs_are_refused_at_once) {
    const char *env = fake_gnuplot(PRINT_TINY_PNG);
    char path[600], target[600];
    static const struct {
        const char *run, *phrase;
    } cases[] = {
        {"fifo", "FIFO"},  {"dir", "directory"},     {"zero", "character device"}, {"sock", "sock/log.csv"},
        {"lfifo", "FIFO"}, {"ckfifo", "checkpoint"}, {"ckdir", "checkpoint"},      {"runfifo", "not a folder"},
    };
    for (size_t i = 0; i + 1 < sizeof cases / sizeof *cases; i++) make_dir(cases[i].run);
    path_of(path, sizeof path, "runfifo"); /* --run names a FIFO itself */
    cr_assert_eq(mkfifo(path, 0666), 0);
    path_of(path, sizeof path, "fifo/log.csv");
    cr_assert_eq(mkfifo(path, 0666), 0);
    make_dir("dir/log.csv");
    path_of(path, sizeof path, "zero/log.csv");
    cr_assert_eq(symlink("/dev/zero", path), 0);
    make_socket("sock/log.csv");
    path_of(path, sizeof path, "lfifo/log.csv");
    path_of(target, sizeof target, "fifo/log.csv");
    cr_assert_eq(symlink(target, path), 0);
    /* a checkpoint file that is a FIFO or a folder, beside a good log */
    write_file("ckfifo/log.csv", "step,loss\n1,2.5\n");
    write_file("ckdir/log.csv", "step,loss\n1,2.5\n");
    path_of(path, sizeof path, "ckfifo/model.safetensors");
    cr_assert_eq(mkfifo(path, 0666), 0);
    make_dir("ckdir/model.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[200], log[4096];
        for (int script = 0; script < 2; script++) {
            snprintf(args, sizeof args, "plot --run %s %s", cases[i].run, script ? "--script" : "--out x.png");
            time_t t0 = time(NULL);
            int st = fg_t(30, env, args, log, sizeof log);
            cr_expect_neq(st, 124, "`%s` hung", args);
            cr_expect(time(NULL) - t0 < 20, "`%s` took %lld s", args, (long long)(time(NULL) - t0));
            cr_expect_eq(st, 1, "`%s` exited %d: %s", args, st, log);
            expect_one_clean_line(args, log);
            cr_expect(strstr(log, cases[i].phrase), "`%s` does not say '%s': %s", args, cases[i].phrase, log);
        }
    }
    path_of(path, sizeof path, "x.png");
    cr_expect(access(path, F_OK) != 0, "x.png was written");
}

Test(plot, output_names_are_written_exactly) {
    static const char *names[] = {
        "a b.png",   "it's.png",    "back\\slash\\n.png", "100%.png",          "%s%n%x.png", "new\nline.png",
        "tab\t.png", "quote\".png", "$(touch pwned).png", "`touch pwned`.png", "@x.png",     "\xc3\xa9t\xc3\xa9.png",
        "-.png",
    };
    make_dir("r");
    write_file("r/log.csv", "step,loss\n1,2.5\n2,2.25\n");
    const char *env = fake_gnuplot("cat >/dev/null; " PRINT_TINY_PNG);
    char expect[8192] = "bin|cap|r";
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char q[400], args[600], log[4096], want[400];
        snprintf(args, sizeof args, "plot --run r --out %s", shq(q, sizeof q, names[i]));
        int st = fg(env, args, log, sizeof log);
        cr_expect_eq(st, 0, "--out '%s': exited %d: %s", names[i], st, log);
        snprintf(want, sizeof want, "%s\n", names[i]);
        cr_expect_str_eq(log, want, "--out '%s': printed %s", names[i], log);
        char png[64];
        long n = read_rel(names[i], png, sizeof png);
        cr_expect(n == (long)TINY_PNG_LEN && !memcmp(png, tiny_png, TINY_PNG_LEN), "--out '%s' was not written",
                  names[i]);
        /* the folder holds exactly the names so far: none cut, changed or left behind */
        strncat(expect, "|", sizeof expect - strlen(expect) - 1);
        strncat(expect, names[i], sizeof expect - strlen(expect) - 1);
        char got[8192];
        names_in(dir, got, sizeof got);
        /* compare as sets: sort expect's names the way scandir's alphasort does */
        char *parts[64];
        int np = 0;
        char copy[8192];
        snprintf(copy, sizeof copy, "%s", expect);
        for (char *s = strtok(copy, "|"); s && np < 64; s = strtok(NULL, "|")) parts[np++] = s;
        for (int a = 0; a < np; a++)
            for (int b = a + 1; b < np; b++)
                if (strcoll(parts[b], parts[a]) < 0) {
                    char *t = parts[a];
                    parts[a] = parts[b];
                    parts[b] = t;
                }
        char sorted[8192] = "";
        for (int a = 0; a < np; a++) {
            if (a) strncat(sorted, "|", sizeof sorted - strlen(sorted) - 1);
            strncat(sorted, parts[a], sizeof sorted - strlen(sorted) - 1);
        }
        cr_expect_str_eq(got, sorted, "after --out '%s'", names[i]);
    }
}

/* The regular files under dir (find -type f), one a line, sorted. */
static void files_under(char *out, size_t n) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cd '%s' && find . -type f -not -path './bin/*' | LC_ALL=C sort", dir);
    fgt_run_cmd(cmd, out, n);
}

Test(plot, long_output_paths_are_written_exactly_or_refused) {
    make_dir("r");
    write_file("r/log.csv", "step,loss\n1,2.5\n2,2.25\n");
    const char *env = fake_gnuplot("cat >/dev/null; " PRINT_TINY_PNG);
    char before[8192], after[8192], log[8192];
    files_under(before, sizeof before);
    /* 1. a path of about 3,900 bytes in 20 folders of 190 (under PATH_MAX): written at exactly that
     * path, nowhere else */
    static char rel[8192], part[200], args[9000];
    memset(part, 'd', 190);
    part[190] = '\0';
    rel[0] = '\0';
    for (int i = 0; i < 20; i++) {
        part[0] = (char)('a' + i);
        if (i) strcat(rel, "/");
        strcat(rel, part);
        make_dir(rel);
    }
    strcat(rel, "/");
    size_t base = strlen(rel);
    memset(rel + base, 'p', 80);
    strcpy(rel + base + 80, ".png");
    snprintf(args, sizeof args, "plot --run r --out '%s'", rel);
    int st = fg(env, args, log, sizeof log);
    cr_expect_eq(st, 0, "a %zu-byte path: exited %d: ...%s", strlen(rel), st,
                 log + (strlen(log) > 300 ? strlen(log) - 300 : 0));
    static char cmd[9000];
    snprintf(cmd, sizeof cmd, "cd '%s' && test -f '%s'", dir, rel);
    cr_expect_eq(fgt_run_cmd(cmd, NULL, 0), 0, "the %zu-byte path was not written", strlen(rel));
    files_under(after, sizeof after);
    cr_expect_eq(lines(after), lines(before) + 1, "files before: %s\nafter: %.600s", before, after);
    /* 2. names at and over NAME_MAX, and a path over PATH_MAX: exactly, or one line and nothing */
    static char name[8192];
    const size_t lens[] = {250, 255, 300, 5000};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
        if (lens[i] < 1000) {
            memset(name, 'n', lens[i] - 4);
            strcpy(name + lens[i] - 4, ".png");
        } else { /* "./" repeated: a path past PATH_MAX to the same folder */
            for (size_t j = 0; j + 2 < lens[i]; j += 2) memcpy(name + j, "./", 2);
            strcpy(name + lens[i] - 6, "p.png");
        }
        files_under(before, sizeof before);
        snprintf(args, sizeof args, "plot --run r --out '%s'", name);
        st = fg(env, args, log, sizeof log);
        files_under(after, sizeof after);
        if (st == 0) {
            snprintf(cmd, sizeof cmd, "cd '%s' && test -f '%s'", dir, name);
            cr_expect_eq(fgt_run_cmd(cmd, NULL, 0), 0, "a %zu-byte name: exit 0 but not written", lens[i]);
            cr_expect_eq(lines(after), lines(before) + 1, "a %zu-byte name: %.600s", lens[i], after);
        } else {
            cr_expect_eq(st, 1, "a %zu-byte name: exited %d: %.300s", lens[i], st, log);
            expect_one_clean_line("a long name", log);
            cr_expect(strstr(log, "too long"), "a %zu-byte name: %.300s", lens[i], log);
            cr_expect_str_eq(after, before, "a %zu-byte name: refused but files changed", lens[i]);
        }
        cr_expect(lens[i] <= 255 || st == 1, "a %zu-byte name was accepted", lens[i]);
    }
    /* a run folder past PATH_MAX: one line that says why */
    for (size_t j = 0; j < 5000; j += 2) memcpy(name + j, "./", 2);
    strcpy(name + 5000, "r");
    snprintf(args, sizeof args, "plot --run '%s' --out x.png", name);
    st = fg(env, args, log, sizeof log);
    cr_expect_eq(st, 1, "a 5001-byte --run: exited %d", st);
    expect_one_clean_line("a long --run", log);
    cr_expect(strstr(log, "too long"), "a 5001-byte --run: %.300s", log);
}

Test(plot, links_in_the_output_folder_are_never_followed) {
    need_gnuplot(); /* the real renderer: the one that could follow them */
    make_dir("r");
    write_file("r/log.csv", "step,loss,lr\n1,2.5,0.001\n2,2.25,0.001\n");
    const char precious[] = "a user's file\n";
    write_file("precious.txt", precious);
    char bin[4096], cmd[9000], log[4096], buf[256];
    cr_assert(realpath(fgt_bin(), bin));
    /* links at the names a renderer or writer could use for the picture: the old temporary (its pid
     * is the shell's, which exec keeps), a fixed temporary name, the default output; the program
     * runs as the shell's own process so its pid is known */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && ln -s precious.txt \"out.png.tmp.$$.png\" && ln -s precious.txt out.png.tmp && "
             "ln -s precious.txt loss.png.tmp.$$.png && ln -s precious.txt .out.png && exec '%s' plot --run r "
             "--out out.png 2>&1",
             dir, bin);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, 0, "plot exited %d: %s", st, log);
    cr_expect(read_rel("precious.txt", buf, sizeof buf) == (long)strlen(precious) && !strcmp(buf, precious),
              "the link's target changed: %s", buf);
    char path[600];
    struct stat sb;
    path_of(path, sizeof path, "out.png");
    cr_expect(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 1000, "out.png is not a picture");
    char names[4096];
    names_in(dir, names, sizeof names);
    cr_expect(strstr(names, "precious.txt|r") && !strstr(names, "flashgrad-tmp"), "left in the folder: %s", names);
    /* a link at --out itself is refused, its target untouched */
    path_of(path, sizeof path, "link.png");
    cr_assert_eq(symlink("precious.txt", path), 0);
    st = fg(NULL, "plot --run r --out link.png", log, sizeof log);
    cr_expect_eq(st, 1, "a link at --out: exited %d: %s", st, log);
    expect_one_clean_line("a link at --out", log);
    cr_expect(strstr(log, "symbolic link"), "%s", log);
    cr_expect(lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode), "link.png is no longer a link");
    cr_expect(read_rel("precious.txt", buf, sizeof buf) == (long)strlen(precious) && !strcmp(buf, precious),
              "the link's target changed: %s", buf);
}

Test(plot, run_names_reach_gnuplot_as_text_only) {
    need_gnuplot();
    /* a folder name with everything gnuplot or a shell could act on: quotes, a newline, command
     * substitution in both syntaxes, a macro, a backslash */
    static const char name[] = "r'\n`touch pwned1`@x $(touch pwned2)\\\"";
    make_dir(name);
    char rel[600], q[600], args[1400], log[1 << 15];
    snprintf(rel, sizeof rel, "%s/log.csv", name);
    write_file(rel, "step,loss\n1,2.5\n2,2.25\n");
    snprintf(args, sizeof args, "plot --run %s --out p.png", shq(q, sizeof q, name));
    int st = fg(NULL, args, log, sizeof log);
    cr_expect_eq(st, 0, "plot exited %d: %s", st, log);
    expect_png("p.png", 10000);
    char names[4096];
    names_in(dir, names, sizeof names);
    cr_expect(!strstr(names, "|pwned") && strncmp(names, "pwned", 5), "gnuplot ran a command: %s", names);
    snprintf(args, sizeof args, "plot --run %s --script", shq(q, sizeof q, name));
    cr_assert_eq(fg(NULL, args, log, sizeof log), 0);
    cr_expect(strstr(log, "title 'r''\\x0a`touch pwned1`@x $(touch pwned2)\\\\\" (no checkpoint yet) train'"),
              "the label: %.3000s", log);
}

Test(plot, a_failing_gnuplot_is_one_line_naming_the_cause_and_nothing_is_written) {
    static const struct {
        const char *body, *phrase;
        double timeout;
    } cases[] = {
        {"cat >/dev/null; printf '\\n  line 7: \\033]0;evil\\007undefined variable: x\\nmore\\n' >&2; exit 3",
         "gnuplot exited with status 3: line 7: \\x1b]0;evil\\x07undefined variable: x", 0},
        {"exit 4", "gnuplot exited with status 4 (nothing on its stderr)", 0},
        {"cat >/dev/null; kill -9 $$", "gnuplot was killed by signal 9", 0},
        {"cat >/dev/null; printf 'not a picture'", "not a whole PNG (13 bytes, starting 'not a picture')", 0},
        {"cat >/dev/null; printf '\\211PNG\\r\\n\\032\\nIHDR'", "not a whole PNG", 0},
        {"cat >/dev/null; printf ''", "not a whole PNG (0 bytes", 0},
        {"sleep 100", "did not finish within 1 s", 1},
        {"cat >/dev/null; sleep 100 & wait", "did not finish within 1 s", 1},
        {"cat >/dev/null; head -c 70000000 /dev/zero", "more than 64 MiB", 0},
    };
    make_dir("r");
    write_file("r/log.csv", "step,loss\n1,2.5\n2,2.25\n");
    /* an earlier picture at --out stays as it was */
    write_bytes("keep.png", tiny_png, TINY_PNG_LEN);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *env = fake_gnuplot(cases[i].body);
        char before[4096], after[4096], log[4096], args[200];
        names_in(dir, before, sizeof before);
        for (int o = 0; o < 2; o++) {
            snprintf(args, sizeof args, "plot --run r --out %s%s", o ? "keep.png" : "new.png",
                     cases[i].timeout > 0 ? " --timeout 1" : "");
            time_t t0 = time(NULL);
            int st = fg_t(60, env, args, log, sizeof log);
            cr_expect(time(NULL) - t0 < 30, "gnuplot '%s': plot took %lld s", cases[i].body,
                      (long long)(time(NULL) - t0));
            cr_expect_eq(st, 1, "gnuplot '%s': exited %d: %s", cases[i].body, st, log);
            expect_one_clean_line(cases[i].body, log);
            cr_expect(strstr(log, cases[i].phrase), "gnuplot '%s': does not say '%s': %s", cases[i].body,
                      cases[i].phrase, log);
            names_in(dir, after, sizeof after);
            cr_expect_str_eq(after, before, "gnuplot '%s': the folder changed", cases[i].body);
            char png[64];
            cr_expect(read_rel("keep.png", png, sizeof png) == (long)TINY_PNG_LEN &&
                          !memcmp(png, tiny_png, TINY_PNG_LEN),
                      "gnuplot '%s': keep.png changed", cases[i].body);
        }
    }
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
    make_dir("c");
    write_file("c/log.csv", "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu\n"
                            "1,4.1,0.0001,2.0,1000,,0.10\n2,3.9,0.0002,1.8,1100,,0.12\n3,3.7,0.0003,1.7,1100,3.8,0.13\n"
                            "4,3.6,0.00");
    st = fg(NULL, "plot --run c --run a --out three.png", log, sizeof log);
    cr_assert_eq(st, 0, "plot of a run in progress exited %d: %s", st, log);
    expect_png("three.png", 20000);
    /* an existing PNG is regenerated output: replaced */
    st = fg(NULL, "plot --run a --out one.png", log, sizeof log);
    cr_expect_eq(st, 0, "replacing a PNG exited %d: %s", st, log);
    /* the script --script prints draws the same picture through gnuplot by hand */
    char cmd[5000], bin[4096];
    cr_assert(realpath(fgt_bin(), bin));
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' plot --run a --script | gnuplot > four.png", dir, bin);
    cr_expect_eq(fgt_run_cmd(cmd, NULL, 0), 0);
    expect_png("four.png", 20000);
    /* no temporary file is left beside them */
    char names[4096];
    names_in(dir, names, sizeof names);
    cr_expect_str_eq(names, "a|b|c|four.png|one.png|t.txt|three.png|two.png");
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
        {"plot --run x --script --out x.png", 2, "give one"},
        {"plot --run x --timeout 0", 2, "--timeout"},
        {"plot --run missing --out m.png", 1, "--run missing: No such file or directory"},
        {"plot --run empty/log.csv --out m.png", 1, "not a folder"},
        {"plot --run /dev/zero --out m.png", 1, "not a folder"},
        {"plot --run empty --out m.png", 1, "no header line"},
        {"plot --run junk --out m.png", 1, "no step and loss columns"},
        {"plot --run header --out m.png", 1, "no complete rows yet"},
        {"plot --run header --out keep.png", 1, "exists and is not a PNG"},
        {"plot --run header --out folder.png", 1, "it is a directory"},
    };
    make_dir("empty");
    make_dir("junk");
    make_dir("header");
    make_dir("folder.png");
    write_file("empty/log.csv", "");
    write_file("junk/log.csv", "hello,world\n1,2\n");
    write_file("header/log.csv", "step,loss,lr\n5,2.0");
    write_file("keep.png", "not a picture\n");
    const char *env = fake_gnuplot(PRINT_TINY_PNG);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int st = fg(env, cases[i].args, log, sizeof log);
        cr_expect_eq(st, cases[i].code, "`flashgrad %s` exited %d, expected %d: %s", cases[i].args, st, cases[i].code,
                     log);
        expect_one_clean_line(cases[i].args, log);
        cr_expect(strstr(log, cases[i].phrase), "`flashgrad %s` does not say '%s': %s", cases[i].args, cases[i].phrase,
                  log);
    }
    /* the refused file is untouched */
    char buf[64];
    cr_expect(read_rel("keep.png", buf, sizeof buf) > 0 && !strcmp(buf, "not a picture\n"), "keep.png was changed: %s",
              buf);
    /* without gnuplot: one line, exit 1, nothing written */
    write_file("header/log.csv", "step,loss,lr\n5,2.0,0.1\n");
    int st = fg("PATH=/nonexistent", "plot --run header --out g.png", log, sizeof log);
    cr_expect_eq(st, 1, "plot without gnuplot exited %d: %s", st, log);
    cr_expect(lines(log) == 1 && strstr(log, "gnuplot is not installed"), "without gnuplot: %s", log);
    char path[600];
    path_of(path, sizeof path, "g.png");
    cr_expect(access(path, F_OK) != 0, "g.png was written without gnuplot");
}
