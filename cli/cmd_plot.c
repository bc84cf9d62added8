/* cmd_plot.c — `flashgrad plot`: a run's loss curves as a picture.
 *
 *   flashgrad plot --run DIR [--run DIR2 ...] [--out FILE.png | --script] [--timeout S]
 *
 * Reads DIR/log.csv of each run (the columns by their header names: step and loss are required;
 * lr, val_loss and mfu are drawn when present) and draws, with gnuplot, one PNG of four panels:
 * train and validation loss against step, the same against tokens seen, the learning rate and the
 * MFU against step. Runs are overlaid in one colour each, with a legend naming each run by its
 * folder and its configuration (from its checkpoint: L, H, C, block, batch × accumulation, lr; a
 * run with no checkpoint yet is named by its folder alone, and its tokens-seen panel is empty).
 * The figure's title names the machine and the date it was drawn on.
 *
 * Inputs: each --run is a folder (anything else is refused by name); its log.csv and checkpoint
 * are read as regular files only, opened without blocking (a FIFO, a device, a socket or a
 * directory there, or a link to one, is refused in one line). A run
 * still in progress works: a last line without its newline is a row being written and is left
 * out. Every other row must be one flashgrad writes, or the file is refused with one line naming
 * the file, the line and the column (see check_value): the header's number of fields, a step that
 * is a whole number in [1, 1e12] and larger than the row before, a loss in [0, 1e6]; lr (in
 * [0, 10]), val_loss (as loss) and mfu (in [0, 2]) empty or in range. Nothing outside reason is
 * drawn as if it were a measurement, and no row is dropped without a word.
 *
 * Rendering: gnuplot gets the whole script on its standard input, the data inline (datablocks,
 * `$run0 << EOD`), and writes the PNG to its standard output (a pipe); it never opens a file named
 * from the command line or a run folder, and no temporary file is made for it. flashgrad collects
 * its output (at most PNG_MAX bytes, within --timeout seconds, else gnuplot's process group is
 * killed), checks that it is a whole PNG (signature and IEND trailer) and writes --out through
 * fg_write_file_atomic (tensor/fileio.h), so the path is written exactly as given or refused in
 * one line. An existing PNG at --out is replaced, as bench --csv replaces its CSV (a plot is
 * regenerated output); anything else there (another file, a symbolic link, a folder) is refused.
 * --script prints that same script (what gnuplot would be given, data included) on standard output
 * instead and needs no gnuplot: `flashgrad plot --run a --script | gnuplot > a.png` draws the same
 * picture, and the tests read the data handed to the renderer from it.
 *
 * Messages are one line; text from a file or from gnuplot in them is made printable (fg_printable).
 * Exit: 0 written; 1 no gnuplot / an unreadable, refused or empty log / gnuplot failed / --out not
 * writable; 2 usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "tensor/fileio.h"
#include "train/checkpoint.h"

#define MAX_RUNS 16
/* A log of a 1e12-step run would not fit anyway; this bounds the memory a bad file can take. */
#define LOG_MAX ((size_t)1 << 30)
/* A 1400 x 900 PNG of line plots is well under a megabyte. */
#define PNG_MAX ((size_t)64 << 20)
#define ERR(...) (fprintf(stderr, "flashgrad plot: " __VA_ARGS__), fputc('\n', stderr))

extern char **environ;

enum { P_RUN, P_OUT, P_SCRIPT, P_TIMEOUT, P_COUNT };

static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
/* The last chunk of every PNG: length 0, "IEND", its CRC. */
static const unsigned char png_iend[12] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};

/* Printable copies of outside text for messages (fg_printable), a few at a time. */
#define SHOW_CAP 1200
static const char *show(const char *s) {
    static char buf[4][SHOW_CAP];
    static int next;
    next = (next + 1) % 4;
    return fg_printable(buf[next], SHOW_CAP, s, strlen(s));
}
static const char *shown(const char *s, size_t n, size_t cap) {
    static char buf[2][96];
    static int next;
    next = (next + 1) % 2;
    return fg_printable(buf[next], cap < sizeof buf[0] ? cap : sizeof buf[0], s, n);
}

/* ---- the rows of one run ---- */

typedef struct {
    double step, loss, lr, val, mfu; /* NAN: empty in log.csv */
} plot_row;

typedef struct {
    const char *dir;
    plot_row *rows;
    long n;
    int has_lr, has_mfu, has_val;
    double tokens_per_step; /* 0: unknown (no checkpoint yet) */
    char label[600];
} plot_run;

/* A column's rule: where a flashgrad log's values lie. Anything outside is not a value flashgrad
 * wrote: the whole file is refused, naming the line and column (a plot that silently dropped or
 * drew such a row would show a curve that never happened). */
typedef struct {
    const char *name;
    int required; /* may not be empty */
    double lo, hi;
    const char *why; /* the range in words */
} plot_col;

static const plot_col cols[] = {
    /* step: whole, at least 1, train's --steps bound */
    {"step", 1, 1, 1e12, "a whole step number in [1, 1e12]"},
    /* cross-entropy is >= 0; train stops at a non-finite loss, and a finite one past 1e6 is no
     * training run */
    {"loss", 1, 0, 1e6, "a loss in [0, 1e6]"},
    /* train's --lr and --min-lr range */
    {"lr", 0, 0, 10, "a learning rate in [0, 10]"},
    {"val_loss", 0, 0, 1e6, "a loss in [0, 1e6]"},
    /* a fraction of the measured FMA peak: above 2 the peak or the count is wrong, not fast */
    {"mfu", 0, 0, 2, "an MFU in [0, 2]"},
};
enum { C_STEP, C_LOSS, C_LR, C_VAL, C_MFU, C_COUNT };

/* The value of field [s, s+n) under column c into *v (NAN when empty and allowed). 0, or -1 after
 * printing the line that names path:line and the column. */
static int check_value(const char *path, long line, int c, const char *s, size_t n, double *v) {
    char buf[64];
    *v = NAN;
    if (n == 0) {
        if (!cols[c].required) return 0;
        ERR("%s:%ld: column %s is empty (not a flashgrad log.csv row)", show(path), line, cols[c].name);
        return -1;
    }
    int64_t iv = 0;
    int ok = n < sizeof buf && !memchr(s, '\0', n);
    if (ok) {
        memcpy(buf, s, n);
        buf[n] = '\0';
        ok = c == C_STEP ? fg_parse_int(buf, &iv) == 0 : fg_parse_double(buf, v) == 0;
        if (c == C_STEP) *v = (double)iv;
    }
    if (!ok || !(*v >= cols[c].lo && *v <= cols[c].hi)) {
        ERR("%s:%ld: column %s is '%s', not %s (not a flashgrad log.csv row)", show(path), line, cols[c].name,
            shown(s, n, 48), cols[c].why);
        return -1;
    }
    return 0;
}

/* The fields of line [s, e) split at commas into f[0..cap) as (start, length); the count, or
 * cap + 1 when there are more. */
static int split(const char *s, const char *e, const char **fs, size_t *fl, int cap) {
    int n = 0;
    for (;;) {
        const char *c = memchr(s, ',', (size_t)(e - s));
        const char *end = c ? c : e;
        if (n == cap) return cap + 1;
        fs[n] = s;
        fl[n++] = (size_t)(end - s);
        if (!c) return n;
        s = c + 1;
    }
}

#define MAX_FIELDS 64

/* Parses the log text (n bytes, NUL-terminated) of run r, read from path, into r->rows. 0, or -1
 * after printing the line. */
static int parse_log(plot_run *r, const char *path, const char *text, size_t n) {
    const char *end = text + n, *nl = memchr(text, '\n', n);
    if (!nl) {
        ERR("%s has no header line (not a flashgrad log.csv)", show(path));
        return -1;
    }
    const char *he = nl > text && nl[-1] == '\r' ? nl - 1 : nl;
    const char *fs[MAX_FIELDS];
    size_t fl[MAX_FIELDS];
    int nf = split(text, he, fs, fl, MAX_FIELDS), at[C_COUNT];
    for (int c = 0; c < C_COUNT; c++) {
        at[c] = -1;
        for (int i = 0; i < nf && i < MAX_FIELDS; i++)
            if (fl[i] == strlen(cols[c].name) && !memcmp(fs[i], cols[c].name, fl[i])) {
                if (at[c] >= 0) {
                    ERR("%s: the header names column %s twice (not a flashgrad log.csv)", show(path), cols[c].name);
                    return -1;
                }
                at[c] = i;
            }
    }
    if (nf > MAX_FIELDS || at[C_STEP] < 0 || at[C_LOSS] < 0) {
        ERR("%s has no step and loss columns (header '%s'; not a flashgrad log.csv)", show(path),
            shown(text, (size_t)(he - text), 80));
        return -1;
    }
    long cap = 0, line = 1;
    double prev = 0;
    for (const char *s = nl + 1; s < end; s = nl + 1) {
        line++;
        nl = memchr(s, '\n', (size_t)(end - s));
        if (!nl) break; /* the last line of a log still being written */
        const char *e = nl > s && nl[-1] == '\r' ? nl - 1 : nl;
        const char *rf[MAX_FIELDS];
        size_t rl[MAX_FIELDS];
        int k = split(s, e, rf, rl, MAX_FIELDS);
        if (k != nf) {
            ERR("%s:%ld: %s%d fields where the header has %d (not a flashgrad log.csv row)", show(path), line,
                k > MAX_FIELDS ? "more than " : "", k > MAX_FIELDS ? MAX_FIELDS : k, nf);
            return -1;
        }
        double v[C_COUNT];
        for (int c = 0; c < C_COUNT; c++) {
            v[c] = NAN;
            if (at[c] >= 0 && check_value(path, line, c, rf[at[c]], rl[at[c]], &v[c])) return -1;
        }
        if (r->n > 0 && v[C_STEP] <= prev) {
            ERR("%s:%ld: column step is %.0f after %.0f (steps only increase in a flashgrad log.csv)", show(path), line,
                v[C_STEP], prev);
            return -1;
        }
        prev = v[C_STEP];
        if (r->n == cap) {
            cap = cap ? 2 * cap : 256;
            plot_row *g = realloc(r->rows, (size_t)cap * sizeof *g);
            if (!g) {
                ERR("out of memory for the rows of %s", show(path));
                return -1;
            }
            r->rows = g;
        }
        r->rows[r->n++] = (plot_row){v[C_STEP], v[C_LOSS], v[C_LR], v[C_VAL], v[C_MFU]};
        r->has_lr |= !isnan(v[C_LR]);
        r->has_val |= !isnan(v[C_VAL]);
        r->has_mfu |= !isnan(v[C_MFU]);
    }
    if (r->n == 0) {
        ERR("%s has no complete rows yet", show(path));
        return -1;
    }
    return 0;
}

/* dir + "/" + name, malloc'ed (NULL when out of memory). */
static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (p) {
        memcpy(p, dir, a);
        p[a] = '/';
        memcpy(p + a + 1, name, b + 1);
    }
    return p;
}

/* 1 after printing the line when path is too long for the system to open in one piece (it would
 * fail with ENAMETOOLONG, and a message quoting thousands of bytes of it loses the reason). */
static int too_long(const char *what, const char *path) {
    size_t n = strlen(path);
    if (n < PATH_MAX) return 0;
    ERR("%s: a path of %zu bytes is too long (at most %d)", what, n, PATH_MAX - 1);
    return 1;
}

/* Reads and parses DIR/log.csv: a regular file only, opened without blocking. 0 or -1 (printed). */
static int read_log(plot_run *r) {
    char *path = join(r->dir, "log.csv");
    if (!path) return ERR("out of memory"), -1;
    if (too_long("--run", path)) {
        free(path);
        return -1;
    }
    int fd = -1;
    int64_t size = 0;
    void *buf = NULL;
    size_t n = 0;
    int rc = -1;
    if (fg_open_read(path, 0, &fd, &size) != FG_OK || fg_read_fd(fd, path, LOG_MAX, &buf, &n) != FG_OK)
        ERR("--run %s: %s", show(r->dir), show(fg_last_error()));
    else
        rc = parse_log(r, path, buf, n);
    if (fd >= 0) close(fd);
    free(buf);
    free(path);
    return rc;
}

/* "NAME: L4 H4 C128 T64, B12x2, lr 0.001" from the run's checkpoint (or "NAME (no checkpoint yet)"
 * when it has no model file yet) and the tokens of one step. A checkpoint that is there but cannot
 * be read (a special file, a damaged file) is refused: 0 or -1 (printed). */
static int run_label(plot_run *r) {
    const char *dir = r->dir, *name = dir;
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    for (size_t i = 0; i + 1 < len; i++)
        if (dir[i] == '/') name = dir + i + 1;
    int nl = (int)(dir + len - name);
    r->tokens_per_step = 0;
    struct stat st;
    if (stat(dir, &st) != 0) return ERR("--run %s: %s", show(dir), strerror(errno)), -1;
    if (!S_ISDIR(st.st_mode))
        return ERR("--run %s is not a folder (a run folder written by flashgrad train)", show(dir)), -1;
    char *model = join(dir, FG_CKPT_MODEL_FILE);
    if (!model) return ERR("out of memory"), -1;
    if (too_long("--run", model)) {
        free(model);
        return -1;
    }
    int none = lstat(model, &st) != 0 && errno == ENOENT;
    free(model);
    if (none) {
        snprintf(r->label, sizeof r->label, "%.*s (no checkpoint yet)", nl, name);
        return 0;
    }
    fg_ckpt *ck = fg_ckpt_open(dir, 1);
    if (!ck) ck = fg_ckpt_open(dir, 0); /* the optimizer file is being replaced: the model alone */
    if (!ck) {
        ERR("--run %s: its checkpoint cannot be read: %s", show(dir), show(fg_last_error()));
        return -1;
    }
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    const fg_gpt_config *m = &in->model;
    int k = snprintf(r->label, sizeof r->label, "%.*s: L%d H%d C%d T%d", nl, name, m->n_layer, m->n_head, m->n_embd,
                     m->block_size);
    if (in->has_train && k > 0 && (size_t)k < sizeof r->label) {
        snprintf(r->label + k, sizeof r->label - (size_t)k, ", B%dx%d, lr %g", in->train.batch_size,
                 in->train.grad_accum, in->train.opt.lr);
        r->tokens_per_step = (double)in->train.batch_size * in->train.grad_accum * m->block_size;
    }
    fg_ckpt_close(ck);
    return 0;
}

/* ---- the gnuplot script ---- */

/* s as the body of a gnuplot single-quoted string: '' for a quote (single quotes take nothing
 * else specially: no backslash escapes, no `command` or @macro substitution), and every byte
 * outside printable ASCII as \xNN text (a newline would end the command). */
void fg_plot_quote(FILE *g, const char *s) {
    char buf[SHOW_CAP];
    fg_printable(buf, sizeof buf, s, strlen(s));
    for (const char *p = buf; *p; p++) {
        if (*p == '\'') fputc('\'', g);
        fputc(*p, g);
    }
}

/* A value for a datablock: the shortest of %.15g, %.16g, %.17g that reads back to the same double
 * (%.17g always does), NaN when missing. */
static void gp_num(FILE *g, double v) {
    if (isnan(v)) {
        fputs("NaN", g);
        return;
    }
    char b[40];
    for (int p = 15; p <= 17; p++) {
        snprintf(b, sizeof b, "%.*g", p, v);
        if (strtod(b, NULL) == v) break;
    }
    fputs(b, g);
}

/* The whole script, data inline, into g. Datablocks: $run<k> rows "step tokens loss lr mfu",
 * $val<k> rows "step tokens val_loss" (only rows that have one; no block when none has). */
static void write_script(FILE *g, const plot_run *runs, int n_runs) {
    int has_lr = 0, has_mfu = 0, has_tok = 0;
    for (int k = 0; k < n_runs; k++) {
        const plot_run *r = &runs[k];
        has_lr |= r->has_lr;
        has_mfu |= r->has_mfu;
        has_tok |= r->tokens_per_step > 0;
        fprintf(g, "$run%d << EOD\n", k);
        for (long i = 0; i < r->n; i++) {
            const plot_row *w = &r->rows[i];
            double tok = r->tokens_per_step > 0 ? w->step * r->tokens_per_step : NAN;
            const double v[5] = {w->step, tok, w->loss, w->lr, w->mfu};
            for (int j = 0; j < 5; j++) {
                if (j) fputc(' ', g);
                gp_num(g, v[j]);
            }
            fputc('\n', g);
        }
        fputs("EOD\n", g);
        if (!r->has_val) continue;
        fprintf(g, "$val%d << EOD\n", k);
        for (long i = 0; i < r->n; i++) {
            const plot_row *w = &r->rows[i];
            if (isnan(w->val)) continue;
            gp_num(g, w->step);
            fputc(' ', g);
            gp_num(g, r->tokens_per_step > 0 ? w->step * r->tokens_per_step : NAN);
            fputc(' ', g);
            gp_num(g, w->val);
            fputc('\n', g);
        }
        fputs("EOD\n", g);
    }
    char cpu[256], when[64];
    fg_cpu_model_name(cpu, sizeof cpu); /* for the title */
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime_r(&now, &tm));
    /* `set output` alone: the picture goes to standard output */
    fputs("set terminal pngcairo size 1400,900 noenhanced font ',10'\nset output\n", g);
    fprintf(g, "set grid\nset key top right\nset multiplot layout 2,2 title 'flashgrad training runs (drawn %s on ",
            when);
    fg_plot_quote(g, cpu);
    fputs(")'\n", g);
    /* one panel: title, x label, y label, the columns (1-based) of $run<k> */
    static const char *panels[4][4] = {
        {"loss against step", "step", "loss", "1:3"},
        {"loss against tokens seen", "tokens seen", "loss", "2:3"},
        {"learning rate", "step", "lr", "1:4"},
        {"MFU (model FLOP/s over the peak)", "step", "MFU", "1:5"},
    };
    for (int p = 0; p < 4; p++) {
        fprintf(g, "set title '%s'\nset xlabel '%s'\nset ylabel '%s'\n", panels[p][0], panels[p][1], panels[p][2]);
        int empty = (p == 1 && !has_tok) || (p == 2 && !has_lr) || (p == 3 && !has_mfu);
        if (empty) {
            /* a panel with nothing to draw says why */
            fprintf(g,
                    "unset key\nset label 1 '%s' at graph 0.5, 0.5 center\nplot [0:1] [0:1] NaN notitle\n"
                    "unset label 1\nset key top right\n",
                    p == 1 ? "tokens seen unknown (no checkpoint with its batch size yet)" : "not in log.csv");
            continue;
        }
        fputs("plot ", g);
        for (int k = 0; k < n_runs; k++) {
            fprintf(g, "%s$run%d using %s with lines lw 1.5 lc %d title '", k ? ", " : "", k, panels[p][3], k + 1);
            fg_plot_quote(g, runs[k].label);
            fputs(p < 2 ? " train'" : "'", g);
            if (p < 2 && runs[k].has_val) {
                fprintf(g, ", $val%d using %s with linespoints lw 2 pt 7 ps 0.8 lc %d dt 2 title '", k,
                        p == 0 ? "1:3" : "2:3", k + 1);
                fg_plot_quote(g, runs[k].label);
                fputs(" val'", g);
            }
        }
        fputc('\n', g);
    }
    fputs("unset multiplot\n", g);
}

/* ---- running gnuplot ---- */

/* A pipe whose ends are not 0, 1 or 2 (where stdio might be closed), close-on-exec. */
static int pipe_above_2(int p[2]) {
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    for (int i = 0; i < 2; i++)
        if (p[i] <= 2) {
            int d = fcntl(p[i], F_DUPFD_CLOEXEC, 3);
            close(p[i]);
            p[i] = d;
        }
    if (p[0] < 0 || p[1] < 0) {
        if (p[0] >= 0) close(p[0]);
        if (p[1] >= 0) close(p[1]);
        return -1;
    }
    return 0;
}

/* Runs `gnuplot -d` (its own settings, no init file) in a process group of its own, the script on
 * its stdin, its stdout into *png (malloc'ed, at most PNG_MAX bytes) and the start of its stderr
 * kept for the message. 0 when it exited 0; else -1 with why (one printable line) filled. The wait
 * is bounded by timeout_s: past it, the group is killed. */
static int run_gnuplot(const char *script, size_t slen, double timeout_s, char **png, size_t *png_n, char *why,
                       size_t why_n) {
    *png = NULL;
    *png_n = 0;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    if (pipe_above_2(in) || pipe_above_2(out) || pipe_above_2(err)) {
        snprintf(why, why_n, "cannot make a pipe for gnuplot: %s", strerror(errno));
        for (int i = 0; i < 2; i++) {
            if (in[i] >= 0) close(in[i]);
            if (out[i] >= 0) close(out[i]);
        }
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    posix_spawnattr_init(&at);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char *argv[] = {"gnuplot", "-d", NULL};
    pid_t pid;
    int se = posix_spawnp(&pid, "gnuplot", &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(in[0]);
    close(out[1]);
    close(err[1]);
    if (se != 0) {
        snprintf(why, why_n, "cannot start gnuplot: %s", strerror(se));
        close(in[1]);
        close(out[0]);
        close(err[0]);
        return -1;
    }
    /* gnuplot may exit before reading all of the script: that is a write error, not a signal */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old);
    fcntl(in[1], F_SETFL, fcntl(in[1], F_GETFL) | O_NONBLOCK);

    char errtext[1024];
    size_t errn = 0, sent = 0, cap = 0;
    int fin = in[1], fout = out[0], ferr = err[0], failed = 0, status = 0, reaped = 0;
    double deadline = fg_now() + timeout_s;
    why[0] = '\0';
    while (!failed && (fout >= 0 || ferr >= 0 || !reaped)) {
        double left = deadline - fg_now();
        if (left <= 0) {
            snprintf(why, why_n, "gnuplot did not finish within %g s (--timeout): stopped it", timeout_s);
            failed = 1;
            break;
        }
        if (fout < 0 && ferr < 0) { /* both closed: wait for the exit, still bounded */
            pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid) {
                reaped = 1;
            } else if (w < 0 && errno != EINTR) {
                snprintf(why, why_n, "waiting for gnuplot failed: %s", strerror(errno));
                failed = 1;
            } else {
                poll(NULL, 0, 10);
            }
            continue;
        }
        struct pollfd pf[3];
        int np = 0, ii = -1, io = -1, ie = -1;
        if (fin >= 0) pf[ii = np++] = (struct pollfd){.fd = fin, .events = POLLOUT};
        if (fout >= 0) pf[io = np++] = (struct pollfd){.fd = fout, .events = POLLIN};
        if (ferr >= 0) pf[ie = np++] = (struct pollfd){.fd = ferr, .events = POLLIN};
        int ms = left > 1000 ? 1000 : (int)(left * 1000) + 1;
        if (poll(pf, (nfds_t)np, ms) < 0) {
            if (errno == EINTR) continue;
            snprintf(why, why_n, "waiting for gnuplot failed: %s", strerror(errno));
            failed = 1;
            break;
        }
        if (ii >= 0 && pf[ii].revents) {
            ssize_t w = write(fin, script + sent, slen - sent);
            if (w > 0) sent += (size_t)w;
            /* EPIPE: gnuplot stopped reading (its exit status says why) */
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || sent == slen) {
                close(fin);
                fin = -1;
            }
        }
        if (io >= 0 && pf[io].revents) {
            if (*png_n == cap) {
                size_t nc = cap ? 2 * cap : (size_t)1 << 16;
                char *g = nc <= PNG_MAX + 1 ? realloc(*png, nc) : NULL;
                if (!g) {
                    snprintf(why, why_n, "gnuplot wrote more than %zu MiB: not a plot of this size", PNG_MAX >> 20);
                    failed = 1;
                    break;
                }
                *png = g;
                cap = nc;
            }
            ssize_t r = read(fout, *png + *png_n, cap - *png_n);
            if (r > 0) *png_n += (size_t)r;
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
                close(fout);
                fout = -1;
            }
            if (*png_n > PNG_MAX) {
                snprintf(why, why_n, "gnuplot wrote more than %zu MiB: not a plot of this size", PNG_MAX >> 20);
                failed = 1;
            }
        }
        if (ie >= 0 && pf[ie].revents) {
            char sink[4096];
            ssize_t r = read(ferr, sink, sizeof sink);
            if (r > 0 && errn < sizeof errtext - 1) {
                size_t take = (size_t)r < sizeof errtext - 1 - errn ? (size_t)r : sizeof errtext - 1 - errn;
                memcpy(errtext + errn, sink, take);
                errn += take;
            }
            if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
                close(ferr);
                ferr = -1;
            }
        }
    }
    if (fin >= 0) close(fin);
    if (fout >= 0) close(fout);
    if (ferr >= 0) close(ferr);
    if (failed && !reaped) {
        kill(-pid, SIGKILL); /* the group: a wrapper script's children too */
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        reaped = 1;
    }
    sigaction(SIGPIPE, &old, NULL);
    errtext[errn] = '\0';
    if (!failed && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
        /* gnuplot's first message line says what went wrong */
        char *m = errtext;
        while (*m == '\n' || *m == '\r' || *m == ' ') m++;
        m[strcspn(m, "\r\n")] = '\0';
        char st[64];
        if (WIFEXITED(status))
            snprintf(st, sizeof st, "exited with status %d", WEXITSTATUS(status));
        else
            snprintf(st, sizeof st, "was killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        snprintf(why, why_n, "gnuplot %s%s%s", st, *m ? ": " : " (nothing on its stderr)", shown(m, strlen(m), 96));
        failed = 1;
    }
    if (failed) {
        free(*png);
        *png = NULL;
        *png_n = 0;
        return -1;
    }
    return 0;
}

/* gnuplot in PATH? */
static int have_gnuplot(void) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    while (*path) {
        size_t n = strcspn(path, ":");
        char *d = n ? strndup(path, n) : NULL;
        char *f = d ? join(d, "gnuplot") : NULL;
        int ok = f && access(f, X_OK) == 0;
        free(d);
        free(f);
        if (ok) return 1;
        path += n;
        if (*path == ':') path++;
    }
    return 0;
}

/* What is at --out may be replaced: nothing, or a regular file that starts as a PNG. Read without
 * following a link and without blocking. 0, or 1 after printing the line. */
static int out_replaceable(const char *out, const char *prefix, const char *flag) {
    if (strlen(out) >= PATH_MAX)
        return fg_cli_line(prefix, "%s: a path of %zu bytes is too long (at most %d)", flag, strlen(out), PATH_MAX - 1), 1;
    if (fg_check_replaceable(out) != FG_OK) return fg_cli_line(prefix, "%s: %s", flag, show(fg_last_error())), 1;
    struct stat st;
    if (lstat(out, &st) != 0) return 0; /* nothing there (fg_check_replaceable said so) */
    if (S_ISLNK(st.st_mode))
        return fg_cli_line(prefix, "%s %s is a symbolic link: not replacing it", flag, show(out)), 1;
    unsigned char b[8];
    int fd = open(out, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? pread(fd, b, sizeof b, 0) : -1;
    if (fd >= 0) close(fd);
    if (n != (ssize_t)sizeof b || memcmp(b, png_magic, sizeof b))
        return fg_cli_line(prefix, "%s %s exists and is not a PNG: not replacing it", flag, show(out)), 1;
    return 0;
}

int fg_plot_png(const char *script, size_t slen, const char *out, const char *flag, double timeout_s,
                const char *prefix) {
    char *png = NULL, why[600];
    size_t n = 0;
    int code = 0;
    if (out_replaceable(out, prefix, flag)) return 1;
    if (!have_gnuplot()) {
        fg_cli_line(prefix, "gnuplot is not installed (Debian: apt-get install gnuplot-nox; make deps installs it)");
        return 1;
    }
    if (run_gnuplot(script, slen, timeout_s, &png, &n, why, sizeof why)) {
        fg_cli_line(prefix, "%s (nothing written)", why);
        code = 1;
    } else if (n < sizeof png_magic + sizeof png_iend || memcmp(png, png_magic, sizeof png_magic) ||
               memcmp(png + n - sizeof png_iend, png_iend, sizeof png_iend)) {
        fg_cli_line(prefix, "gnuplot's output is not a whole PNG (%zu bytes, starting '%s'): nothing written", n,
                    shown(png ? png : "", n < 16 ? n : 16, 80));
        code = 1;
    } else if (out_replaceable(out, prefix, flag)) { /* again: something may have appeared while gnuplot drew */
        code = 1;
    } else {
        const void *parts[1] = {png};
        size_t sizes[1] = {n};
        if (fg_write_file_atomic(out, parts, sizes, 1) != FG_OK) {
            fg_cli_line(prefix, "%s", show(fg_last_error()));
            code = 1;
        }
    }
    free(png);
    return code;
}

int fg_cmd_plot(int argc, char **argv) {
    /* --run may repeat: collect those, hand the rest to the flag parser */
    plot_run runs[MAX_RUNS];
    memset(runs, 0, sizeof runs);
    int n_runs = 0;
    char **rest = malloc((size_t)(argc + 1) * sizeof *rest);
    if (!rest) return ERR("out of memory"), 1;
    int nr = 0;
    rest[nr++] = argv[0];
    for (int a = 1; a < argc; a++) {
        const char *v = NULL;
        if (!strcmp(argv[a], "--run")) {
            if (a + 1 >= argc) {
                free(rest);
                return ERR("--run needs a value (DIR)"), 2;
            }
            v = argv[++a];
        } else if (!strncmp(argv[a], "--run=", 6)) {
            v = argv[a] + 6;
        } else {
            rest[nr++] = argv[a];
            continue;
        }
        if (!*v) {
            free(rest);
            return ERR("--run needs a non-empty value (DIR)"), 2;
        }
        if (n_runs == MAX_RUNS) {
            free(rest);
            return ERR("at most %d runs in one plot", MAX_RUNS), 2;
        }
        runs[n_runs++].dir = v;
    }
    rest[nr] = NULL;
    fg_flag f[P_COUNT] = {
        /* listed for --help; its values are taken out of argv above (it may repeat) */
        [P_RUN] = {"--run", FG_FLAG_STR, "DIR",
                   "a run folder written by flashgrad train (repeat for several runs; required)"},
        [P_OUT] = {"--out", FG_FLAG_STR, "FILE.png", "the picture (an existing PNG is replaced)", .s = "loss.png"},
        [P_SCRIPT] = {"--script", FG_FLAG_BOOL, NULL,
                      "print the gnuplot script, data included, instead of drawing (`... --script | gnuplot > x.png`)"},
        [P_TIMEOUT] = {"--timeout", FG_FLAG_F64, "S", "stop gnuplot after S seconds", .lo = 0, .hi = 86400,
                       .lo_open = 1, .d = 600},
    };
    int rc = fg_flags_parse("plot", f, P_COUNT, nr, rest);
    free(rest);
    if (rc == -1) {
        printf(
            "Draw train and validation loss, learning rate and MFU of training runs (their log.csv) as one PNG.\n\n");
        fg_flags_help(stdout, "plot", "--run DIR [--run DIR2 ...] [--out FILE.png | --script] [--timeout S]", f,
                      P_COUNT);
        return 0;
    }
    if (rc) return rc;
    if (!n_runs) return ERR("--run DIR is required (a folder written by flashgrad train)"), 2;
    const int script_only = (int)f[P_SCRIPT].i;
    const char *out = f[P_OUT].s;
    if (script_only && f[P_OUT].given) return ERR("--script prints the script instead of writing --out: give one"), 2;
    size_t ol = strlen(out);
    if (!script_only && (ol < 5 || strcmp(out + ol - 4, ".png")))
        return ERR("--out '%s': the picture is a PNG, name it FILE.png", show(out)), 2;
    if (!script_only && out_replaceable(out, "flashgrad plot: ", "--out")) return 1;
    if (!script_only && !have_gnuplot())
        return ERR("gnuplot is not installed (Debian: apt-get install gnuplot-nox; make deps installs it)"), 1;

    int code = 0;
    for (int k = 0; k < n_runs && !code; k++)
        if (run_label(&runs[k]) || read_log(&runs[k])) code = 1;
    char *script = NULL;
    size_t slen = 0;
    if (!code) {
        FILE *g = open_memstream(&script, &slen);
        if (g) write_script(g, runs, n_runs);
        if (!g || fclose(g) != 0) {
            ERR("out of memory for the gnuplot script");
            code = 1;
        }
    }
    for (int k = 0; k < n_runs; k++) free(runs[k].rows);
    if (!code && script_only) {
        fwrite(script, 1, slen, stdout);
    } else if (!code) {
        code = fg_plot_png(script, slen, out, "--out", f[P_TIMEOUT].d, "flashgrad plot: ");
        if (!code) printf("%s\n", out);
    }
    free(script);
    return code;
}
