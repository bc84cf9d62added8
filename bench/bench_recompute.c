/* bench_recompute.c — `flashgrad bench recompute`: what each recompute choice (train/gpt.h: none,
 * pointwise, attn, mlp, block) saves and costs per block, for the model and batch given with bench
 * train's flags, measured on this machine; the planner under --memory-budget; and with --pareto the
 * whole trade-off, measured.
 *
 * The cost model (train/recompute_plan.h): each choice is run on every block at two depths (1 and
 * L), --warmup-steps then --steps steps each from a fresh model; the allocator's high-water mark of
 * a timed step (parameters, gradients and AdamW moments included) and the median step time give,
 * per choice, the bytes a block adds to the peak, the peak's part above the blocks, and a block's
 * share of the step time. The table prints them with the saving and the added time against none.
 *
 * --memory-budget SIZE: the plan of least predicted step time within SIZE, then that plan measured
 * (as `train --memory-budget` does, from the costs measured here); --budgets SIZE,SIZE,... the same
 * at each.
 *
 * --pareto: every plan is predicted — each count vector of choices (how many blocks make each) in
 * the planner's order, which for those counts has the least predicted peak; any other order of the
 * same counts takes the same time — and measured: all of them when there are at most --sample
 * (C(L + 4, 4): 210 at L 6), else the predicted frontier thinned evenly to --sample points plus the
 * five uniform plans (those five are the cost table's deep runs, not run again). --csv writes one row per measured plan, --png draws peak memory against step
 * time: the measured points, and the predicted frontier (every plan that no other beats in both)
 * over them. It prints the prediction error: bytes (exact counts) and time (%), and checks that
 * every measured plan's first loss is the same, bit for bit.
 *
 * Memory is the allocator's count; each measured run also prints the process's resident-set growth
 * (VmHWM reset through /proc/self/clear_refs, less VmRSS before the run) beside it.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/train_flags.h"
#include "tensor/fileio.h"
#include "ops/cpu.h"
#include "train/recompute_plan.h"

#define ERR_PREFIX "flashgrad bench recompute: "

enum { R_STEPS = FG_TF_COUNT, R_WARM, R_SYNTH, R_PARETO, R_CSV, R_PNG, R_SAMPLE, R_BUDGETS, R_COUNT };

static void init_flags(fg_flag *f) {
    fg_train_flags_init(f);
    f[R_STEPS] = (fg_flag){"--steps", FG_FLAG_INT, "N", "timed steps of each measured run", 1, 1e6, 0, .i = 3};
    f[R_WARM] = (fg_flag){"--warmup-steps", FG_FLAG_INT, "N", "untimed steps first in each run", 1, 1e6, 0, .i = 1};
    f[R_SYNTH] = (fg_flag){"--synthetic-vocab", FG_FLAG_INT, "V",
                           "synthetic tokens uniform in [0, V) (text model defaults; bench train's)", 2, 1 << 24, 0,
                           .i = 0};
    f[R_PARETO] = (fg_flag){.name = "--pareto", .type = FG_FLAG_BOOL,
                            .help = "measure every plan (or a sample, see --sample): the whole trade-off"};
    f[R_CSV] = (fg_flag){"--csv", FG_FLAG_STR, "FILE", "with --pareto: one row per measured plan", .s = ""};
    f[R_PNG] = (fg_flag){"--png", FG_FLAG_STR, "FILE.png",
                         "with --pareto: peak memory against step time, the predicted frontier over the measured "
                         "points (gnuplot)",
                         .s = ""};
    f[R_SAMPLE] = (fg_flag){"--sample", FG_FLAG_INT, "N",
                            "with --pareto: measure every plan when there are at most N, else the predicted frontier "
                            "thinned to N plus the uniform plans",
                            1, 1e6, 0, .i = 250};
    f[R_BUDGETS] = (fg_flag){"--budgets", FG_FLAG_STR, "SIZE,...",
                             "the planner at each of these budgets (as --memory-budget), from the costs measured once",
                             .s = ""};
}

static const char *mib(int64_t b, char *buf, size_t n) {
    snprintf(buf, n, "%.3f", (double)b / 1048576.0);
    return buf;
}

static void progress(void *user, int choice, int deep, const fg_recompute_run *r) {
    const int *depth = user;
    char a[32], b[32];
    char c[32];
    printf("  run: every block %-9s depth %3d: peak %s MiB (%" PRId64 " bytes; %s MiB above what lives between steps), "
           "RSS growth %s MiB, step %.2f ms, first loss %a\n",
           fg_gpt_recompute_name((fg_gpt_recompute)choice), depth[deep], mib(r->peak, a, sizeof a), r->peak,
           mib(r->peak - r->held, c, sizeof c), r->rss_growth >= 0 ? mib(r->rss_growth, b, sizeof b) : "?",
           r->seconds * 1e3, r->first_loss);
    fflush(stdout);
}

/* ---- --pareto ---- */

typedef struct {
    unsigned char *plan; /* L choices */
    int64_t peak;        /* predicted */
    double seconds;      /* predicted */
    int frontier;        /* 1: no other plan is predicted both faster and smaller (and not equal) */
    int measure;
    fg_recompute_run m;
} pareto_point;

typedef struct {
    pareto_point *p;
    int64_t n, cap;
    int L;
    int failed;
} pareto_set;

static void collect(void *user, const unsigned char *plan, int64_t peak, double seconds) {
    pareto_set *s = user;
    if (s->failed) return;
    if (s->n == s->cap) {
        int64_t nc = s->cap ? 2 * s->cap : 256;
        pareto_point *np = realloc(s->p, (size_t)nc * sizeof *np);
        if (!np) {
            s->failed = 1;
            return;
        }
        s->p = np;
        s->cap = nc;
    }
    pareto_point *q = &s->p[s->n];
    memset(q, 0, sizeof *q);
    q->plan = malloc((size_t)s->L);
    if (!q->plan) {
        s->failed = 1;
        return;
    }
    memcpy(q->plan, plan, (size_t)s->L);
    q->peak = peak;
    q->seconds = seconds;
    s->n++;
}

static int by_peak_then_time(const void *a, const void *b) {
    const pareto_point *x = a, *y = b;
    if (x->peak != y->peak) return x->peak < y->peak ? -1 : 1;
    return (x->seconds > y->seconds) - (x->seconds < y->seconds);
}

static int uniform_choice(const unsigned char *plan, int L) {
    for (int l = 1; l < L; l++)
        if (plan[l] != plan[0]) return -1;
    return plan[0];
}

static void plan_text(const fg_train_config *cfg, const unsigned char *plan, char *out, size_t n) {
    fg_gpt_config m = cfg->model;
    fg_recompute_plan_apply(&m, plan);
    fg_gpt_recompute_format(&m, out, n);
}

static char *pareto_script(const pareto_set *s, const fg_train_config *cfg, size_t *len) {
    char *text = NULL;
    FILE *g = open_memstream(&text, len);
    if (!g) return NULL;
    fputs("$measured << EOD\n", g);
    for (int64_t i = 0; i < s->n; i++)
        if (s->p[i].measure)
            fprintf(g, "%.6f %.6f %.6f %.6f\n", s->p[i].m.seconds * 1e3, (double)s->p[i].m.peak / 1048576.0,
                    s->p[i].seconds * 1e3, (double)s->p[i].peak / 1048576.0);
    fputs("EOD\n$frontier << EOD\n", g);
    for (int64_t i = 0; i < s->n; i++) /* sorted by peak: the frontier from least memory to fastest */
        if (s->p[i].frontier) fprintf(g, "%.6f %.6f\n", s->p[i].seconds * 1e3, (double)s->p[i].peak / 1048576.0);
    fputs("EOD\n", g);
    char cpu[256], when[64], title[768];
    fg_cpu_model_name(cpu, sizeof cpu);
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime_r(&now, &tm));
    snprintf(title, sizeof title,
             "recompute plans: L %d, H %d, C %d, T %d, batch %d x %d, %s attention (%s, %d threads, %s)",
             cfg->model.n_layer, cfg->model.n_head, cfg->model.n_embd, cfg->model.block_size, cfg->batch_size,
             cfg->grad_accum, fg_attn_impl_name(cfg->model.attn), cpu, fg_pool_threads(), when);
    fputs("set terminal pngcairo size 1200,800 noenhanced font ',10'\nset output\nset grid\nset key top right\n", g);
    fputs("set title ", g);
    fputc('\'', g);
    fg_plot_quote(g, title);
    fputc('\'', g);
    fputs("\nset xlabel 'step time (ms)'\nset ylabel 'peak memory during a step (MiB, allocator)'\n", g);
    fputs("plot $measured using 3:4 with points pt 6 ps 1.2 lc rgb '#999999' title 'predicted (measured plans)', \\\n"
          "     $measured using 1:2 with points pt 7 ps 1.0 lc rgb '#1f77b4' title 'measured', \\\n"
          "     $frontier using 1:2 with linespoints pt 2 lw 2 lc rgb '#d62728' title 'predicted frontier'\n",
          g);
    if (fclose(g) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

static int run_pareto(const fg_flag *f, const fg_train_config *cfg, const fg_source *src,
                      const fg_recompute_costs *costs, const fg_recompute_run uniform[FG_RECOMPUTE_COUNT], int warm,
                      int steps) {
    const int L = cfg->model.n_layer;
    pareto_set s = {.L = L};
    int64_t total = fg_recompute_enumerate(costs, L, collect, &s);
    int code = 0;
    if (s.failed || total != s.n) {
        fprintf(stderr, ERR_PREFIX "out of memory for the plans\n");
        code = 1;
        goto out;
    }
    qsort(s.p, (size_t)s.n, sizeof *s.p, by_peak_then_time);
    {
        double best = INFINITY;
        for (int64_t i = 0; i < s.n; i++)
            if (s.p[i].seconds < best) {
                s.p[i].frontier = 1;
                best = s.p[i].seconds;
            }
    }
    int64_t n_front = 0;
    for (int64_t i = 0; i < s.n; i++) n_front += s.p[i].frontier;
    const int64_t sample = f[R_SAMPLE].i;
    const int all = s.n <= sample;
    if (all) {
        for (int64_t i = 0; i < s.n; i++) s.p[i].measure = 1;
    } else {
        /* the frontier thinned evenly (its two ends kept), and every uniform plan */
        int64_t want = sample > 1 ? sample : 2, k = 0;
        for (int64_t i = 0; i < s.n; i++) {
            if (!s.p[i].frontier) continue;
            if (n_front <= want || k * (want - 1) % (n_front - 1) < (want - 1) || k == n_front - 1)
                s.p[i].measure = 1;
            k++;
        }
        for (int64_t i = 0; i < s.n; i++)
            if (uniform_choice(s.p[i].plan, L) >= 0 && costs->allowed[s.p[i].plan[0]]) s.p[i].measure = 1;
    }
    int64_t n_meas = 0;
    for (int64_t i = 0; i < s.n; i++) n_meas += s.p[i].measure;
    printf("pareto: %" PRId64 " plans (count vectors of the %d choices over %d blocks, each in the planner's order), "
           "%" PRId64 " on the predicted frontier; measuring %s: %" PRId64 " plans\n",
           s.n, FG_RECOMPUTE_COUNT, L, n_front, all ? "all of them" : "the frontier, thinned, and the uniform plans",
           n_meas);
    fflush(stdout);

    fg_csv_file csv = {0};
    FILE *cf = NULL;
    if (f[R_CSV].s[0]) {
        cf = fg_csv_open_atomic(&csv, f[R_CSV].s);
        if (!cf) {
            fprintf(stderr, ERR_PREFIX "--csv: %s\n", fg_last_error());
            code = 1;
            goto out;
        }
        fprintf(cf, "plan,uniform,frontier,pred_peak_bytes,peak_bytes,peak_err_bytes,rss_growth_bytes,pred_step_ms,"
                    "step_ms,step_err_pct,first_loss\n");
    }
    char text[FG_GPT_MAX_LAYER * 12];
    int64_t max_abs_err = 0, exact = 0, over = 0;
    double sum_t = 0, max_t = 0, loss0 = 0;
    int loss_same = 1, first = 1;
    int64_t done = 0;
    for (int64_t i = 0; i < s.n && code == 0; i++) {
        pareto_point *q = &s.p[i];
        if (!q->measure) continue;
        fg_train_config c = *cfg;
        fg_recompute_plan_apply(&c.model, q->plan);
        const int u = uniform_choice(q->plan, L);
        if (u >= 0 && L > 1) {
            q->m = uniform[u]; /* the cost table's deep run measured this very plan */
        } else if (fg_recompute_measure(&c, src, warm, steps, &q->m) != FG_OK) {
            fprintf(stderr, ERR_PREFIX "measuring a plan: %s\n", fg_last_error());
            code = 1;
            break;
        }
        plan_text(cfg, q->plan, text, sizeof text);
        const int64_t err = q->m.peak - q->peak;
        const double terr = 100.0 * (q->m.seconds - q->seconds) / q->seconds;
        max_abs_err = llabs(err) > max_abs_err ? llabs(err) : max_abs_err;
        exact += err == 0;
        over += err > 0;
        sum_t += fabs(terr);
        if (fabs(terr) > max_t) max_t = fabs(terr);
        if (first) loss0 = q->m.first_loss, first = 0;
        loss_same &= q->m.first_loss == loss0;
        done++;
        printf("  plan %-40s predicted %10.3f MiB %9.2f ms | measured %10.3f MiB %9.2f ms | error %+" PRId64
               " bytes, %+.1f%%\n",
               text, (double)q->peak / 1048576.0, q->seconds * 1e3, (double)q->m.peak / 1048576.0,
               q->m.seconds * 1e3, err, terr);
        fflush(stdout);
        if (cf)
            fprintf(cf, "\"%s\",%d,%d,%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%.4f,%.4f,%.2f,%a\n", text,
                    uniform_choice(q->plan, L) >= 0, q->frontier, q->peak, q->m.peak, err, q->m.rss_growth,
                    q->seconds * 1e3, q->m.seconds * 1e3, terr, q->m.first_loss);
    }
    if (code == 0) {
        printf("prediction error over %" PRId64 " measured plans: peak bytes exact in %" PRId64 ", largest |error| %" PRId64
               " bytes (%" PRId64 " above the prediction); step time mean |error| %.1f%%, largest %.1f%%\n",
               done, exact, max_abs_err, over, done ? sum_t / done : 0, max_t);
        printf("losses: the first step's loss is %s across the measured plans%s\n", loss_same ? "identical" : "NOT identical",
               loss_same ? " (bit for bit)" : "");
        if (!loss_same) code = 1;
    }
    if (cf) {
        if (code == 0 && fg_csv_commit(&csv) != 0) {
            fprintf(stderr, ERR_PREFIX "--csv: %s\n", fg_last_error());
            code = 1;
        } else if (code != 0) {
            fg_csv_abort(&csv);
        } else {
            printf("csv: %s\n", f[R_CSV].s);
        }
    }
    if (code == 0 && f[R_PNG].s[0]) {
        size_t len = 0;
        char *script = pareto_script(&s, cfg, &len);
        if (!script) {
            fprintf(stderr, ERR_PREFIX "out of memory for the gnuplot script\n");
            code = 1;
        } else {
            code = fg_plot_png(script, len, f[R_PNG].s, "--png", 120, ERR_PREFIX);
            if (!code) printf("png: %s\n", f[R_PNG].s);
            free(script);
        }
    }
out:
    for (int64_t i = 0; i < s.n; i++) free(s.p[i].plan);
    free(s.p);
    return code;
}

int fg_bench_recompute(int argc, char **argv) {
    fg_flag f[R_COUNT];
    init_flags(f);
    fg_bench_train_defaults(f, &fg_defaults_addition);
    int rc = fg_flags_parse("bench recompute", f, R_COUNT, argc, argv);
    if (rc == -1) {
        fg_flags_help(stdout, "bench recompute",
                      "[bench train's model and data flags] [--memory-budget SIZE] [--pareto [--csv FILE] [--png "
                      "FILE.png] [--sample N]]",
                      f, R_COUNT);
        return 0;
    }
    if (rc) return rc;
    if (f[R_SYNTH].given && (f[FG_TF_DATA].given || f[FG_TF_DATA_BIN].given || f[FG_TF_BYTE].given ||
                             f[FG_TF_DIGITS].given)) {
        fprintf(stderr, ERR_PREFIX "--synthetic-vocab is a dataset of its own: drop --data, --data-bin, --byte and "
                                   "--digits\n");
        return 2;
    }
    if ((f[R_CSV].given || f[R_PNG].given || f[R_SAMPLE].given) && !f[R_PARETO].given) {
        fprintf(stderr, ERR_PREFIX "--csv, --png and --sample go with --pareto\n");
        return 2;
    }
    if (f[R_PNG].given) {
        const size_t n = strlen(f[R_PNG].s);
        if (n < 5 || strcmp(f[R_PNG].s + n - 4, ".png")) {
            fprintf(stderr, ERR_PREFIX "--png '%s': the picture is a PNG, name it FILE.png\n", f[R_PNG].s);
            return 2;
        }
    }
    if (f[R_CSV].given && !f[R_CSV].s[0]) {
        fprintf(stderr, ERR_PREFIX "--csv needs a file name\n");
        return 2;
    }
    /* refused paths before the measurements, not after them (written at the end, checked again) */
    for (int k = R_CSV; k <= R_PNG; k++)
        if (f[k].given && fg_check_replaceable(f[k].s) != FG_OK) {
            fprintf(stderr, ERR_PREFIX "%s: %s\n", f[k].name, fg_last_error());
            return 2;
        }
    if (f[FG_TF_DATA].given || f[FG_TF_DATA_BIN].given || f[R_SYNTH].given) {
        fg_flag g[R_COUNT];
        memcpy(g, f, sizeof g);
        fg_bench_train_defaults(f, &fg_defaults_text);
        for (int k = 0; k < R_COUNT; k++)
            if (g[k].given) f[k] = g[k];
    }
    fg_train_choice run;
    if (fg_train_flags_check(f, &run) != FG_OK) {
        fprintf(stderr, ERR_PREFIX "%s\n", fg_last_error());
        return 2;
    }
    if (f[FG_TF_RECOMPUTE].given) {
        fprintf(stderr, ERR_PREFIX "--recompute: this benchmark measures every choice (leave it out)\n");
        return 2;
    }
    fg_train_flags_threads(f);
    fg_source *src = f[R_SYNTH].given ? fg_bench_synth_source((int)f[R_SYNTH].i)
                                      : fg_train_flags_source(f, fg_addition_default_config().answer_only, NULL);
    if (!src) {
        fprintf(stderr, ERR_PREFIX "%s\n", fg_last_error());
        return 1;
    }
    const int W = (int)f[R_WARM].i, N = (int)f[R_STEPS].i;
    fg_train_config cfg = {.steps = W + N, .eval_iters = 1};
    if (fg_train_flags_config(f, src, &run, &cfg) != FG_OK) {
        fprintf(stderr, ERR_PREFIX "%s\n", fg_last_error());
        fg_source_free(src);
        return 2;
    }
    const int L = cfg.model.n_layer;
    if (L > FG_RECOMPUTE_PLAN_MAX_LAYER) {
        fprintf(stderr, ERR_PREFIX "the planner takes models of up to %d blocks (--n-layer %d)\n",
                FG_RECOMPUTE_PLAN_MAX_LAYER, L);
        fg_source_free(src);
        return 2;
    }
    fg_print_machine_line(stdout);
    printf("threads: %d (flashgrad pool)\n", fg_pool_threads());
    printf("bench recompute: %s, %d layers, %d heads, %d embd, block %d, batch %d x %d micro-batches, %s attention, "
           "dropout %g; %d warm-up + %d timed steps per run\n",
           src->kind == FG_SOURCE_ADDITION ? "addition task" : src->path, L, cfg.model.n_head, cfg.model.n_embd,
           cfg.model.block_size, cfg.batch_size, cfg.grad_accum, fg_attn_impl_name(run.attn), cfg.model.dropout, W, N);
    fflush(stdout);

    int depth[2] = {1, L > 1 ? L : 2};
    fg_recompute_costs costs;
    fg_recompute_run runs[FG_RECOMPUTE_COUNT][2];
    int64_t inexact = 0;
    int code = 0;
    if (fg_recompute_measure_costs(&cfg, src, W, N, NULL, &costs, runs, &inexact, progress, depth) != FG_OK) {
        fprintf(stderr, ERR_PREFIX "%s\n", fg_last_error());
        fg_source_free(src);
        return 1;
    }
    int same = 1;
    for (int k = 0; k < FG_RECOMPUTE_COUNT; k++) same &= runs[k][1].first_loss == runs[0][1].first_loss;
    printf("cost per block (from the depth-%d and depth-%d runs; peak = held + max over blocks l of the bytes of "
           "blocks 0..l + the top of block l's choice):\n",
           depth[0], depth[1]);
    printf("  %-10s %14s %14s %14s %12s %12s\n", "choice", "bytes/block", "saved/block", "top bytes", "ms/block",
           "added ms");
    for (int k = 0; k < FG_RECOMPUTE_COUNT; k++)
        printf("  %-10s %14" PRId64 " %14" PRId64 " %14" PRId64 " %12.3f %+12.3f\n",
               fg_gpt_recompute_name((fg_gpt_recompute)k), costs.bytes[k],
               costs.bytes[FG_RECOMPUTE_NONE] - costs.bytes[k], costs.top[k], costs.seconds[k] * 1e3,
               (costs.seconds[k] - costs.seconds[FG_RECOMPUTE_NONE]) * 1e3);
    printf("  held between steps at depth %d (parameters, gradients, AdamW moments): %" PRId64 " bytes\n", depth[1],
           costs.held);
    printf("  the rest of the step: %.3f ms; per-block bytes %s (largest remainder of the depth difference: %" PRId64
           " bytes)\n",
           costs.base_seconds * 1e3, inexact ? "NOT whole" : "whole", inexact);
    printf("losses: the deep runs' first losses are %s across the choices\n",
           same ? "identical (bit for bit)" : "NOT identical");
    if (!same) code = 1;
    fflush(stdout);

    if (code == 0 && run.memory_budget) {
        fg_train_config c = cfg;
        const int mrc = fg_train_flags_memory_plan(&run, src, &c, W, N, &costs, stdout);
        if (mrc) {
            fprintf(stderr, ERR_PREFIX "%s\n", fg_last_error());
            code = mrc;
        }
    }
    for (const char *b = f[R_BUDGETS].s; code == 0 && *b;) {
        /* one budget after another; one that fits no plan is reported and the rest still run */
        char one[64];
        const size_t n = strcspn(b, ",");
        snprintf(one, sizeof one, "%.*s", (int)(n < sizeof one - 1 ? n : sizeof one - 1), b);
        b += n + (b[n] == ',');
        fg_train_choice r = run;
        fg_train_config c = cfg;
        printf("budget %s:\n", one);
        if (fg_parse_size(one, &r.memory_budget)) {
            fprintf(stderr, ERR_PREFIX "--budgets: '%s' is not a size (bytes, KiB, MiB, GiB)\n", one);
            code = 2;
        } else if (fg_train_flags_memory_plan(&r, src, &c, W, N, &costs, stdout) != 0) {
            printf("memory budget: %s\n", fg_last_error());
        }
        fflush(stdout);
    }
    fg_recompute_run deep[FG_RECOMPUTE_COUNT];
    for (int k = 0; k < FG_RECOMPUTE_COUNT; k++) deep[k] = runs[k][1];
    if (code == 0 && f[R_PARETO].given) code = run_pareto(f, &cfg, src, &costs, deep, W, N);
    fg_source_free(src);
    return code;
}
