/* cmd_plot.c — `flashgrad plot`: a run's loss curves as a picture.
 *
 *   flashgrad plot --run DIR [--run DIR2 ...] [--out FILE.png]
 *
 * Reads DIR/log.csv of each run (the columns by their header names: step and loss are required;
 * lr, val_loss and mfu are drawn when present) and draws, with gnuplot, one PNG of four panels:
 * train and validation loss against step, the same against tokens seen, the learning rate and the
 * MFU against step. Runs are overlaid in one colour each, with a legend naming each run by its
 * folder and its configuration (from its checkpoint: L, H, C, block, batch × accumulation, lr; a
 * run with no checkpoint yet is named by its folder alone, and its tokens-seen panel is empty).
 * A run still in progress works: a last line that is incomplete (no newline) or malformed is left
 * out. The figure's title names the machine and the date it was drawn on.
 * Output: --out (default loss.png), written atomically (a temporary file beside it, renamed when
 * gnuplot has finished and the file is a PNG). A PNG already there is replaced, as bench --csv
 * replaces its CSV (a plot is regenerated output); any other existing file is refused.
 * Exit: 0 written, 1 no gnuplot / unreadable or empty log / gnuplot failed, 2 usage error.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "train/checkpoint.h"

#define MAX_RUNS 16
#define ERR(...) (fprintf(stderr, "flashgrad plot: " __VA_ARGS__), fputc('\n', stderr))

enum { P_RUN, P_OUT, P_COUNT };

static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

/* 1 when path starts with the PNG signature */
static int is_png(const char *path) {
    unsigned char b[8];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(b, 1, 8, f);
    fclose(f);
    return n == 8 && !memcmp(b, png_magic, 8);
}

/* gnuplot in PATH? */
static int have_gnuplot(void) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    char buf[4096];
    while (*path) {
        size_t n = strcspn(path, ":");
        if (n && n < sizeof buf - 10) {
            snprintf(buf, sizeof buf, "%.*s/gnuplot", (int)n, path);
            if (access(buf, X_OK) == 0) return 1;
        }
        path += n;
        if (*path == ':') path++;
    }
    return 0;
}

/* s as a gnuplot single-quoted string's body ('' for a quote), at most n bytes */
static void gp_quote(char *out, size_t n, const char *s) {
    size_t k = 0;
    for (; *s && k + 3 < n; s++) {
        if (*s == '\'') out[k++] = '\'';
        out[k++] = (*s == '\n' || *s == '\r') ? ' ' : *s;
    }
    out[k] = '\0';
}

/* The column of `name` in the header fields, or -1. */
static int col_of(char fields[][32], int nf, const char *name) {
    for (int i = 0; i < nf; i++)
        if (!strcmp(fields[i], name)) return i;
    return -1;
}

/* Splits line at commas into at most cap fields of up to 31 bytes; the count, or -1 if too many. */
static int split(char *line, char fields[][32], int cap) {
    int n = 0;
    char *p = line;
    for (;;) {
        size_t len = strcspn(p, ",");
        if (n >= cap) return -1;
        snprintf(fields[n++], 32, "%.*s", (int)(len < 31 ? len : 31), p);
        if (p[len] != ',') break;
        p += len + 1;
    }
    return n;
}

/* A finite number in s ("" or junk: NAN). */
static double num(const char *s) {
    double v;
    return *s && fg_parse_double(s, &v) == 0 && isfinite(v) ? v : NAN;
}

/* log.csv of dir into tmpdir/run<k>.dat ("step tokens loss lr mfu") and run<k>_val.dat ("step
 * tokens val"). tokens_per_step 0: unknown (the column is NaN). Rows written, or -1 after printing
 * the error. *has_lr, *has_mfu, *has_val: whether any row had them. */
static long convert_log(const char *dir, const char *tmpdir, int k, double tokens_per_step, int *has_lr, int *has_mfu,
                        int *has_val) {
    char path[4200];
    snprintf(path, sizeof path, "%s/log.csv", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        ERR("--run %s: cannot read %s: %s", dir, path, strerror(errno));
        return -1;
    }
    char line[4096], fields[32][32];
    if (!fgets(line, sizeof line, f) || !strchr(line, '\n')) {
        fclose(f);
        ERR("--run %s: %s has no header line (not a flashgrad log.csv)", dir, path);
        return -1;
    }
    line[strcspn(line, "\r\n")] = '\0';
    int nf = split(line, fields, 32);
    int c_step = nf > 0 ? col_of(fields, nf, "step") : -1, c_loss = nf > 0 ? col_of(fields, nf, "loss") : -1;
    if (c_step < 0 || c_loss < 0) {
        fclose(f);
        ERR("--run %s: %s has no step and loss columns (header '%.80s')", dir, path, line);
        return -1;
    }
    int c_lr = col_of(fields, nf, "lr"), c_val = col_of(fields, nf, "val_loss"), c_mfu = col_of(fields, nf, "mfu");
    char tp[4200], vp[4200];
    snprintf(tp, sizeof tp, "%s/run%d.dat", tmpdir, k);
    snprintf(vp, sizeof vp, "%s/run%d_val.dat", tmpdir, k);
    FILE *t = fopen(tp, "w"), *v = fopen(vp, "w");
    if (!t || !v) {
        if (t) fclose(t);
        if (v) fclose(v);
        fclose(f);
        ERR("cannot write in %s: %s", tmpdir, strerror(errno));
        return -1;
    }
    long rows = 0;
    *has_lr = *has_mfu = *has_val = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n')) break; /* the last line of a log still being written */
        line[strcspn(line, "\r\n")] = '\0';
        char row[32][32];
        if (split(line, row, 32) != nf) continue; /* malformed: left out */
        double step = num(row[c_step]), loss = num(row[c_loss]);
        if (isnan(step)) continue;
        double lr = c_lr >= 0 ? num(row[c_lr]) : NAN, mfu = c_mfu >= 0 ? num(row[c_mfu]) : NAN;
        double val = c_val >= 0 ? num(row[c_val]) : NAN, tok = tokens_per_step > 0 ? step * tokens_per_step : NAN;
        *has_lr |= !isnan(lr);
        *has_mfu |= !isnan(mfu);
        fprintf(t, "%.17g %.17g %.9g %.9g %.9g\n", step, tok, loss, lr, mfu);
        if (!isnan(val)) {
            *has_val = 1;
            fprintf(v, "%.17g %.17g %.9g\n", step, tok, val);
        }
        rows++;
    }
    fclose(f);
    int bad = fclose(t) != 0;
    bad |= fclose(v) != 0;
    if (bad) {
        ERR("cannot write in %s: %s", tmpdir, strerror(errno));
        return -1;
    }
    if (rows == 0) ERR("--run %s: %s has no complete rows yet", dir, path);
    return rows ? rows : -1;
}

/* "NAME: L4 H4 C128 T64, B12x2, lr 0.001" from dir's checkpoint (or "NAME (no checkpoint yet)"),
 * and the tokens of one step (0 when unknown). */
static void run_label(const char *dir, char *out, size_t n, double *tokens_per_step) {
    const char *name = dir;
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    for (size_t i = 0; i + 1 < len; i++)
        if (dir[i] == '/') name = dir + i + 1;
    int nl = (int)(dir + len - name);
    *tokens_per_step = 0;
    fg_ckpt *ck = fg_ckpt_open(dir, 1);
    if (!ck) ck = fg_ckpt_open(dir, 0); /* the optimizer file is being replaced: the model alone */
    if (!ck) {
        snprintf(out, n, "%.*s (no checkpoint yet)", nl, name);
        return;
    }
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    const fg_gpt_config *m = &in->model;
    int k = snprintf(out, n, "%.*s: L%d H%d C%d T%d", nl, name, m->n_layer, m->n_head, m->n_embd, m->block_size);
    if (in->has_train && k > 0 && (size_t)k < n) {
        snprintf(out + k, n - (size_t)k, ", B%dx%d, lr %g", in->train.batch_size, in->train.grad_accum,
                 in->train.opt.lr);
        *tokens_per_step = (double)in->train.batch_size * in->train.grad_accum * m->block_size;
    }
    fg_ckpt_close(ck);
}

/* The machine's CPU model, for the title. */
static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown cpu");
    FILE *ci = fopen("/proc/cpuinfo", "r");
    if (!ci) return;
    char line[512];
    while (fgets(line, sizeof line, ci))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            const char *c = strchr(line, ':') + 1;
            while (*c == ' ') c++;
            snprintf(out, n, "%s", c);
            out[strcspn(out, "\n")] = '\0';
            break;
        }
    fclose(ci);
}

int fg_cmd_plot(int argc, char **argv) {
    /* --run may repeat: collect those, hand the rest to the flag parser */
    const char *runs[MAX_RUNS];
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
        runs[n_runs++] = v;
    }
    rest[nr] = NULL;
    fg_flag f[P_COUNT] = {
        /* listed for --help; its values are taken out of argv above (it may repeat) */
        [P_RUN] = {"--run", FG_FLAG_STR, "DIR", "a run folder written by flashgrad train (repeat for several runs; required)"},
        [P_OUT] = {"--out", FG_FLAG_STR, "FILE.png", "the picture (an existing PNG is replaced)", .s = "loss.png"},
    };
    int rc = fg_flags_parse("plot", f, P_COUNT, nr, rest);
    free(rest);
    if (rc == -1) {
        printf("Draw train and validation loss, learning rate and MFU of training runs (their log.csv) as one PNG.\n\n");
        fg_flags_help(stdout, "plot", "--run DIR [--run DIR2 ...] [--out FILE.png]", f, P_COUNT);
        return 0;
    }
    if (rc) return rc;
    if (!n_runs) return ERR("--run DIR is required (a folder written by flashgrad train)"), 2;
    const char *out = f[P_OUT].s;
    size_t ol = strlen(out);
    if (ol < 5 || strcmp(out + ol - 4, ".png")) return ERR("--out '%s': the picture is a PNG, name it FILE.png", out), 2;
    struct stat st;
    if (stat(out, &st) == 0 && (!S_ISREG(st.st_mode) || !is_png(out)))
        return ERR("--out %s exists and is not a PNG: not replacing it", out), 1;
    if (!have_gnuplot())
        return ERR("gnuplot is not installed (Debian: apt-get install gnuplot-nox; make deps installs it)"), 1;

    char tmpdir[] = "/tmp/fg_plot_XXXXXX";
    if (!mkdtemp(tmpdir)) return ERR("cannot make a temporary folder: %s", strerror(errno)), 1;
    char labels[MAX_RUNS][600];
    int has_lr = 0, has_mfu = 0, has_tok = 0, has_val[MAX_RUNS] = {0}, code = 0;
    for (int k = 0; k < n_runs && !code; k++) {
        double tps;
        run_label(runs[k], labels[k], sizeof labels[k], &tps);
        int lr, mfu;
        if (convert_log(runs[k], tmpdir, k, tps, &lr, &mfu, &has_val[k]) < 0) code = 1;
        has_lr |= lr;
        has_mfu |= mfu;
        has_tok |= tps > 0;
    }
    char tmp_png[4200], script[64], cpu[256], when[64], q[1400];
    snprintf(tmp_png, sizeof tmp_png, "%s.tmp.%ld.png", out, (long)getpid());
    snprintf(script, sizeof script, "%s/plot.gp", tmpdir);
    if (!code) {
        FILE *g = fopen(script, "w");
        if (!g) {
            ERR("cannot write %s: %s", script, strerror(errno));
            code = 1;
        } else {
            cpu_model(cpu, sizeof cpu);
            time_t now = time(NULL);
            strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
            gp_quote(q, sizeof q, tmp_png);
            fprintf(g, "set terminal pngcairo size 1400,900 noenhanced font ',10'\nset output '%s'\n", q);
            fprintf(g, "set grid\nset key top right\nset multiplot layout 2,2 title 'flashgrad training runs (drawn "
                       "%s on %s)'\n",
                    when, cpu);
            /* one panel: what (1-based columns of run<k>.dat), a val series or not */
            const char *panels[4][4] = {
                {"loss against step", "step", "loss", "1:3"},
                {"loss against tokens seen", "tokens seen", "loss", "2:3"},
                {"learning rate", "step", "lr", "1:4"},
                {"MFU (model FLOP/s over the peak)", "step", "MFU", "1:5"},
            };
            for (int p = 0; p < 4; p++) {
                fprintf(g, "set title '%s'\nset xlabel '%s'\nset ylabel '%s'\n", panels[p][0], panels[p][1],
                        panels[p][2]);
                int empty = (p == 1 && !has_tok) || (p == 2 && !has_lr) || (p == 3 && !has_mfu);
                if (empty) {
                    /* a panel with nothing to draw says why */
                    fprintf(g, "unset key\nset label 1 '%s' at graph 0.5, 0.5 center\nplot [0:1] [0:1] NaN notitle\n"
                               "unset label 1\nset key top right\n",
                            p == 1 ? "tokens seen unknown (no checkpoint with its batch size yet)"
                                   : "not in log.csv");
                    continue;
                }
                fprintf(g, "plot ");
                int first = 1;
                for (int k = 0; k < n_runs; k++) {
                    gp_quote(q, sizeof q, labels[k]);
                    fprintf(g, "%s'%s/run%d.dat' using %s with lines lw 1.5 lc %d title '%s%s'", first ? "" : ", ",
                            tmpdir, k, panels[p][3], k + 1, q, p < 2 ? " train" : "");
                    first = 0;
                    if (p < 2 && has_val[k])
                        fprintf(g, ", '%s/run%d_val.dat' using %s with linespoints lw 2 pt 7 ps 0.8 lc %d dt 2 "
                                   "title '%s val'",
                                tmpdir, k, p == 0 ? "1:3" : "2:3", k + 1, q);
                }
                fprintf(g, "\n");
            }
            fprintf(g, "unset multiplot\nset output\n");
            if (fclose(g) != 0) {
                ERR("cannot write %s: %s", script, strerror(errno));
                code = 1;
            }
        }
    }
    if (!code) {
        char cmd[200], log[2048] = "";
        snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>&1", script);
        FILE *p = popen(cmd, "r");
        size_t n = p ? fread(log, 1, sizeof log - 1, p) : 0;
        log[n] = '\0';
        int st = p ? pclose(p) : -1;
        if (st != 0 || !is_png(tmp_png)) {
            /* its first message line */
            char *m = log;
            while (*m == '\n' || *m == ' ') m++;
            m[strcspn(m, "\n")] = '\0';
            ERR("gnuplot failed%s%s", *m ? ": " : "", m);
            code = 1;
        } else if (rename(tmp_png, out) != 0) {
            ERR("cannot write %s: %s", out, strerror(errno));
            code = 1;
        }
    }
    if (code) unlink(tmp_png);
    /* the temporary folder and its files */
    for (int k = 0; k < n_runs && !getenv("FG_PLOT_KEEP"); k++) {
        char pth[4200];
        snprintf(pth, sizeof pth, "%s/run%d.dat", tmpdir, k);
        unlink(pth);
        snprintf(pth, sizeof pth, "%s/run%d_val.dat", tmpdir, k);
        unlink(pth);
    }
    unlink(script);
    rmdir(tmpdir);
    if (!code) printf("%s\n", out);
    return code;
}
