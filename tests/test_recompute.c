/* test_recompute.c — the recomputation study:
 *   - fg_recompute (autograd/recompute.h) gives the same gradients, bit for bit, as the graph it
 *     replaces, frees its nodes, and records nothing under no-grad;
 *   - GPT training under every per-block choice (none, pointwise, attn, mlp, block) and two mixed
 *     plans: identical losses and parameters, bit for bit, with dropout on, for naive and flash
 *     attention; and less peak memory when recomputing;
 *   - `flashgrad bench attention --csv`: the expected columns, and peak bytes that grow linearly
 *     in N for flash (O and the logsumexp) but quadratically for naive (the stored P);
 *   - `flashgrad bench train --recompute`: the same losses for every setting. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ops/ops.h"
#include "autograd/recompute.h"
#include "tensor/alloc.h"
#include "tests/common.h"
#include "train/checkpoint.h"
#include "train/recompute_plan.h"
#include "train/trainer.h"

/* ---- fg_recompute on a small function ---- */

/* f(x, y; w) = sum over rows of gelu(x @ w + y) * x — x used twice, a leaf w read directly. */
typedef struct {
    fg_tensor *w;
} fn_ctx;

static fg_tensor *small_fn(void *ctx, fg_tensor *const *in) {
    const fn_ctx *c = ctx;
    fg_tensor *h = fg_matmul(in[0], c->w);
    fg_tensor *h2 = h ? fg_add(h, in[1]) : NULL;
    fg_tensor *g = h2 ? fg_gelu(h2) : NULL;
    fg_tensor *o = g ? fg_mul(g, in[0]) : NULL;
    fg_release(h);
    fg_release(h2);
    fg_release(g);
    return o;
}

/* grads of x, y, w after backward of sum(f * r) (r fixed), with or without the checkpoint */
static void small_grads(int checkpoint, double **gx, double **gy, double **gw) {
    fg_tensor *x = fgt_leaf(FG_F64, FGT_DIMS(5, 4), 1), *y = fgt_leaf(FG_F64, FGT_DIMS(5, 4), 2),
              *w = fgt_leaf(FG_F64, FGT_DIMS(4, 4), 3), *r = fgt_rand(FG_F64, FGT_DIMS(5, 4), 4);
    fn_ctx c = {w};
    fg_tensor *in[2] = {x, y};
    int64_t before = fg_nodes_alive();
    fg_tensor *f = fgt_ok(checkpoint ? fg_recompute(small_fn, &c, sizeof c, 2, in) : small_fn(&c, in), "f");
    if (checkpoint)
        cr_assert(f->grad_fn && !strcmp(f->grad_fn->op, "recompute") && fg_nodes_alive() == before + 1,
                  "a checkpoint records exactly one node (got %lld new)", (long long)(fg_nodes_alive() - before));
    fg_tensor *fr = fgt_ok(fg_mul(f, r), "f*r"), *s = fgt_ok(fg_sum_all(fr), "sum");
    cr_assert_eq(fg_backward(s, NULL), FG_OK, "backward: %s", fg_last_error());
    fg_release(s);
    fg_release(fr);
    fg_release(f);
    cr_assert_eq(fg_nodes_alive(), before, "nodes leaked: %lld alive, %lld before", (long long)fg_nodes_alive(),
                 (long long)before);
    *gx = fgt_values(x->grad);
    *gy = fgt_values(y->grad);
    *gw = fgt_values(w->grad);
    fg_release(x);
    fg_release(y);
    fg_release(w);
    fg_release(r);
}

Test(recompute, checkpoint_gradients_equal_the_full_graph_bit_for_bit) {
    double *a[3], *b[3];
    small_grads(0, &a[0], &a[1], &a[2]);
    small_grads(1, &b[0], &b[1], &b[2]);
    const char *names[3] = {"dx", "dy", "dw"};
    const int n[3] = {20, 20, 16};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < n[k]; i++)
            cr_assert(a[k][i] == b[k][i] && a[k][i] != 0, "%s[%d]: full graph %.17g, checkpoint %.17g", names[k], i,
                      a[k][i], b[k][i]);
        free(a[k]);
        free(b[k]);
    }
}

Test(recompute, checkpoint_records_nothing_under_no_grad_and_rejects_bad_arguments) {
    fg_tensor *x = fgt_leaf(FG_F64, FGT_DIMS(5, 4), 1), *y = fgt_leaf(FG_F64, FGT_DIMS(5, 4), 2),
              *w = fgt_leaf(FG_F64, FGT_DIMS(4, 4), 3);
    fn_ctx c = {w};
    fg_tensor *in[2] = {x, y};
    fg_no_grad_enter();
    fg_tensor *f = fgt_ok(fg_recompute(small_fn, &c, sizeof c, 2, in), "f");
    fg_no_grad_exit();
    cr_expect(f->grad_fn == NULL && !f->requires_grad, "no-grad checkpoint recorded a node");
    fg_tensor *ref = fgt_ok(small_fn(&c, in), "ref");
    FGT_ASSERT_CLOSE(f, ref, 0, 0, "no-grad checkpoint value");
    cr_expect(fg_recompute(small_fn, &c, sizeof c, 0, in) == NULL, "0 inputs accepted");
    cr_expect(fg_recompute(NULL, &c, sizeof c, 2, in) == NULL, "NULL function accepted");
    fg_release(f);
    fg_release(ref);
    fg_release(x);
    fg_release(y);
    fg_release(w);
}

/* ---- the GPT trainer ---- */

static fg_source *addition_source(void) {
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = 2;
    fg_source *s = fg_source_addition(&ac);
    cr_assert(s, "%s", fg_last_error());
    return s;
}

/* The plans every training test runs: each choice for every block, then two mixed ones (every
 * choice once, in two orders), on a model of PLAN_LAYERS blocks. */
#define PLAN_LAYERS 5
static const char *const plans[] = {"none",
                                    "attn",
                                    "block",
                                    "pointwise",
                                    "mlp",
                                    "pointwise,block,mlp,attn,none",
                                    "none,attn,mlp,block,pointwise"};
#define N_PLANS ((int)(sizeof plans / sizeof plans[0]))

/* The architecture the training tests build: GPT-2, or (arch_variant) Llama's pieces with a relu²
 * MLP every other run — rmsnorm, swiglu or relu², rope, GQA — whose norms and activations the
 * pointwise choice recomputes through other functions. */
static int arch_variant;

static fg_train_config plan_config(const fg_source *src, fg_attn_impl attn, const char *plan) {
    /* dropout 0.1: the recomputation must redraw the same masks */
    fg_train_config c = fgt_tiny_train_config(src, fg_source_fixed_block(src), 4, 4, 1, 5);
    c.model.attn = attn;
    c.model.n_layer = PLAN_LAYERS;
    if (arch_variant) {
        fg_gpt_arch_preset(&c.model, arch_variant == 1 ? FG_ARCH_LLAMA : FG_ARCH_NANOCHAT);
        c.model.n_kv_head = 1;
    }
    cr_assert_eq(fg_gpt_recompute_set(&c.model, plan), FG_OK, "plan %s: %s", plan, fg_last_error());
    return c;
}

/* run 3 steps; losses[3], the final parameters (malloc'd float32 copy), and the largest per-step peak */
static float *run3(const fg_source *src, fg_attn_impl attn, const char *plan, double *losses, size_t *peak) {
    fg_train_config c = plan_config(src, attn, plan);
    fg_trainer *tr = fg_trainer_create(&c, src);
    cr_assert(tr, "fg_trainer_create: %s", fg_last_error());
    *peak = 0;
    for (int i = 0; i < 3; i++) {
        fg_alloc_reset_peak(FG_CPU);
        fg_step_stats s;
        cr_assert_eq(fg_trainer_step(tr, &s), FG_OK, "recompute %s step %d: %s", plan, i + 1, fg_last_error());
        losses[i] = s.loss;
        size_t p = fg_alloc_get_stats(FG_CPU).peak;
        if (p > *peak) *peak = p;
    }
    size_t n = (size_t)tr->model->num_elements;
    float *w = malloc(n * sizeof *w);
    cr_assert(w);
    memcpy(w, fg_data(tr->model->params_flat), n * sizeof *w);
    fg_trainer_free(tr);
    return w;
}

static void same_training(fg_attn_impl attn) {
    fg_source *src = addition_source();
    double loss[N_PLANS][3];
    size_t peak[N_PLANS];
    float *w[N_PLANS];
    for (int r = 0; r < N_PLANS; r++) w[r] = run3(src, attn, plans[r], loss[r], &peak[r]);
    fg_train_config c = plan_config(src, attn, "none");
    fg_trainer *tr = fg_trainer_create(&c, src);
    const size_t n = (size_t)tr->model->num_elements;
    fg_trainer_free(tr);
    for (int r = 1; r < N_PLANS; r++) {
        for (int i = 0; i < 3; i++)
            cr_assert(loss[r][i] == loss[0][i], "%s attention, recompute %s, step %d: loss %a, without recompute %a",
                      fg_attn_impl_name(attn), plans[r], i + 1, loss[r][i], loss[0][i]);
        for (size_t k = 0; k < n; k++)
            cr_assert(memcmp(&w[r][k], &w[0][k], sizeof(float)) == 0,
                      "%s attention, recompute %s: parameter %zu after 3 steps %.9g, without recompute %.9g",
                      fg_attn_impl_name(attn), plans[r], k, w[r][k], w[0][k]);
        cr_expect(peak[r] < peak[0], "%s attention, recompute %s: peak %zu bytes, not below none's %zu",
                  fg_attn_impl_name(attn), plans[r], peak[r], peak[0]);
    }
    /* (block below attn holds at the Shakespeare size — bench/results/train_recompute.csv — but not
     * necessarily at this toy size, where one block's recomputed graph is most of the saving) */
    for (int r = 0; r < N_PLANS; r++) free(w[r]);
    fg_source_free(src);
}

Test(recompute, gpt_training_is_bit_identical_across_plans_flash) { same_training(FG_ATTN_FLASH); }
Test(recompute, gpt_training_is_bit_identical_across_plans_naive) { same_training(FG_ATTN_NAIVE); }
Test(recompute, llama_and_nanochat_training_is_bit_identical_across_plans) {
    for (arch_variant = 1; arch_variant <= 2; arch_variant++) same_training(FG_ATTN_FLASH);
    arch_variant = 0;
}

Test(recompute, plan_text_round_trips_and_bad_plans_are_refused) {
    fg_gpt_config c = fg_gpt_default_config();
    c.vocab_size = 10;
    c.n_layer = 3;
    char buf[256];
    const char *good[] = {"none", "pointwise", "block", "attn,mlp,pointwise", "none,none,block"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        cr_assert_eq(fg_gpt_recompute_set(&c, good[i]), FG_OK, "%s: %s", good[i], fg_last_error());
        cr_assert_eq(fg_gpt_config_check(&c), FG_OK, "%s: %s", good[i], fg_last_error());
        fg_gpt_recompute_format(&c, buf, sizeof buf);
        cr_expect_str_eq(buf, good[i], "plan %s formats as %s", good[i], buf);
    }
    cr_assert_eq(fg_gpt_recompute_set(&c, "attn,attn,attn"), FG_OK);
    fg_gpt_recompute_format(&c, buf, sizeof buf);
    cr_expect_str_eq(buf, "attn", "a uniform list formats as the one name");
    for (int l = 0; l < 3; l++) cr_expect_eq(fg_gpt_layer_recompute(&c, l), FG_RECOMPUTE_ATTN);
    const char *bad[] = {"", "full", "none,none", "none,none,none,none", "none,,block", "block,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_expect_eq(fg_gpt_recompute_set(&c, bad[i]), FG_ERR_ARG, "plan '%s' accepted", bad[i]);
    c.recompute_plan[5] = 1; /* past n_layer */
    cr_expect_eq(fg_gpt_config_check(&c), FG_ERR_ARG, "a plan entry past the last block passed the check");
}

Test(recompute, setting_names_round_trip) {
    for (int r = 0; r < FG_RECOMPUTE_COUNT; r++)
        cr_expect_eq(fg_gpt_recompute_parse(fg_gpt_recompute_name((fg_gpt_recompute)r)), r, "setting %d", r);
    cr_expect_eq(fg_gpt_recompute_parse("full"), -1);
    fg_gpt_config c = fg_gpt_default_config();
    c.vocab_size = 10;
    cr_expect_eq(c.recompute, FG_RECOMPUTE_NONE, "the default is none");
    c.recompute = FG_RECOMPUTE_COUNT;
    cr_expect_eq(fg_gpt_config_check(&c), FG_ERR_ARG, "an unknown setting passed the check");
}

/* ---- the command line ---- */

static const char *fg_bin(void) {
    const char *b = getenv("FG_BIN");
    return (b && *b) ? b : "build/flashgrad";
}

/* Runs cmd; its stdout+stderr (first logn-1 bytes) into log; returns the exit status or -1. */
static int run_cmd(const char *cmd, char *log, size_t logn) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t used = 0, got;
    char buf[512];
    while ((got = fread(buf, 1, sizeof buf, p)) > 0) {
        size_t take = got < logn - 1 - used ? got : logn - 1 - used;
        memcpy(log + used, buf, take);
        used += take;
    }
    log[used] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* least-squares slope of log(y) against log(x) */
static double loglog_slope(const double *x, const double *y, int n) {
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double lx = log(x[i]), ly = log(y[i]);
        sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly;
    }
    return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

Test(recompute, bench_attention_csv_has_the_columns_and_flash_memory_is_linear_naive_quadratic, .timeout = 300) {
    if (access(fg_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fg_bin());
    char csv[] = "/tmp/fg_recompute_csv_XXXXXX";
    int fd = mkstemp(csv);
    cr_assert(fd >= 0);
    close(fd);
    char cmd[1024], log[8192];
    snprintf(cmd, sizeof cmd, "%s bench attention --n 128,256,512,1024 --d 64 --repeat 1 --no-sgemm --csv %s 2>&1",
             fg_bin(), csv);
    int st = run_cmd(cmd, log, sizeof log);
    cr_assert_eq(st, 0, "bench attention exited %d: %s", st, log);
    FILE *f = fopen(csv, "r");
    cr_assert(f, "no CSV at %s", csv);
    char line[2048];
    cr_assert(fgets(line, sizeof line, f), "empty CSV");
    /* the columns plots.gp and the study read, at the positions it reads them */
    const char *want[] = {
        "impl",       "b",       "h",      "nq",     "nk",         "d",          "causal",         "dropout",
        "block_q",    "block_k", "fwd_ms", "bwd_ms", "fwd_gflops", "bwd_gflops", "fwd_peak_bytes", "bwd_peak_bytes",
        "peak_rss_kb"};
    {
        char hdr[2048];
        snprintf(hdr, sizeof hdr, "%s", line);
        char *save = NULL, *tok = strtok_r(hdr, ",\n", &save);
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            cr_assert(tok && !strcmp(tok, want[i]), "CSV column %zu is '%s', want '%s' (header: %s)", i + 1,
                      tok ? tok : "(none)", want[i], line);
            tok = strtok_r(NULL, ",\n", &save);
        }
    }
    double n_[2][4], fwd[2][4], bwd[2][4];
    int cnt[2] = {0, 0};
    while (fgets(line, sizeof line, f)) {
        char impl[16];
        double v[17];
        char *p = line;
        cr_assert(sscanf(p, "%15[^,]", impl) == 1, "bad row: %s", line);
        p = strchr(p, ',');
        for (int i = 1; i < 17 && p; i++) {
            v[i] = strtod(p + 1, NULL);
            p = strchr(p + 1, ',');
        }
        int k = !strcmp(impl, "flash") ? 1 : !strcmp(impl, "naive") ? 0 : -1;
        cr_assert(k >= 0 && cnt[k] < 4, "unexpected row: %s", line);
        n_[k][cnt[k]] = v[3];
        fwd[k][cnt[k]] = v[14];
        bwd[k][cnt[k]] = v[15];
        cr_assert(v[14] > 0 && v[15] > 0 && v[10] > 0 && v[11] > 0, "zero time or peak in: %s", line);
        cnt[k]++;
    }
    fclose(f);
    unlink(csv);
    cr_assert(cnt[0] == 4 && cnt[1] == 4, "rows: %d naive, %d flash, want 4 each", cnt[0], cnt[1]);
    /* Naive stores the (N, N) probabilities: slope ~2 on log-log, 4x per doubling at the top.
     * Flash stores O (N, d) and L (N) plus fixed-size tiles: slope <= 1, at most ~2x per doubling. */
    const char *what[2] = {"forward", "backward"};
    for (int pass = 0; pass < 2; pass++) {
        double(*pk)[4] = pass ? bwd : fwd;
        double sn = loglog_slope(n_[0], pk[0], 4), sf = loglog_slope(n_[1], pk[1], 4);
        double rn = pk[0][3] / pk[0][2], rf = pk[1][3] / pk[1][2];
        cr_expect(sn > 1.6 && rn > 3.3,
                  "naive %s peak bytes should grow ~N^2: log-log slope %.2f, 512->1024 x%.2f (%g .. %g)", what[pass],
                  sn, rn, pk[0][0], pk[0][3]);
        cr_expect(sf < 1.15 && rf < 2.3,
                  "flash %s peak bytes should grow ~N: log-log slope %.2f, 512->1024 x%.2f (%g .. %g)", what[pass], sf,
                  rf, pk[1][0], pk[1][3]);
        cr_expect(pk[1][3] < pk[0][3] / 4, "at N=1024 flash %s peak %g is not well below naive's %g", what[pass],
                  pk[1][3], pk[0][3]);
    }
}

/* The hex-float losses line of `flashgrad bench train --recompute rc` into out; its peak bytes
 * (the allocation counter during a timed step) into *peak. Asserts that the header line names rc,
 * so the setting reached the run. */
static void bench_losses(const char *rc, char *out, size_t n, long long *peak) {
    char cmd[1024], log[16384], want[64];
    snprintf(cmd, sizeof cmd,
             "%s bench train --n-layer 2 --n-head 2 --n-embd 16 --batch-size 4 --dropout 0.1 --steps 2 "
             "--warmup-steps 1 --recompute %s 2>&1",
             fg_bin(), rc);
    int st = run_cmd(cmd, log, sizeof log);
    cr_assert_eq(st, 0, "bench train --recompute %s exited %d: %s", rc, st, log);
    char *h = strstr(log, "bench train: ");
    cr_assert(h, "no 'bench train:' header line in: %s", log);
    snprintf(want, sizeof want, ", recompute %s\n", rc);
    char *he = strchr(h, '\n');
    cr_assert(he && (size_t)(he + 1 - h) >= strlen(want) && !strncmp(he + 1 - strlen(want), want, strlen(want)),
              "--recompute %s: the header does not name the setting: %.*s", rc, he ? (int)(he - h) : 80, h);
    char *pk = strstr(log, "peak bytes: ");
    cr_assert(pk && sscanf(pk, "peak bytes: %lld", peak) == 1, "no 'peak bytes:' line in: %s", log);
    char *p = strstr(log, "losses: ");
    cr_assert(p, "no 'losses:' line in: %s", log);
    char *e = strchr(p, '\n');
    cr_assert(e);
    snprintf(out, n, "%.*s", (int)(e - p), p);
}

Test(recompute, bench_train_losses_are_identical_across_settings, .timeout = 300) {
    if (access(fg_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fg_bin());
    char none[512], attn[512], block[512], log[4096];
    long long pk_none, pk_attn, pk_block;
    bench_losses("none", none, sizeof none, &pk_none);
    bench_losses("attn", attn, sizeof attn, &pk_attn);
    bench_losses("block", block, sizeof block, &pk_block);
    cr_expect_str_eq(attn, none, "attn: '%s', none: '%s'", attn, none);
    cr_expect_str_eq(block, none, "block: '%s', none: '%s'", block, none);
    {
        char other[512];
        long long pk;
        const char *more[] = {"pointwise", "mlp", "pointwise,block"};
        for (int i = 0; i < 3; i++) {
            bench_losses(more[i], other, sizeof other, &pk);
            cr_expect_str_eq(other, none, "%s: '%s', none: '%s'", more[i], other, none);
            cr_expect(pk < pk_none, "%s: peak %lld bytes, none's %lld", more[i], pk, pk_none);
        }
    }
    /* the setting took effect: recomputation keeps fewer activations alive during a step */
    cr_expect(pk_attn < pk_none && pk_block < pk_attn,
              "peak bytes none %lld, attn %lld, block %lld: expected decreasing", pk_none, pk_attn, pk_block);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s bench train --recompute full --steps 1 --warmup-steps 1 2>&1", fg_bin());
    int st = run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, 2, "--recompute full exited %d: %s", st, log);
}

/* ---- the planner (train/recompute_plan.h) ---- */

/* The model's peak, written out again here: max over l of (bytes of blocks 0..l) + top of block l. */
static int64_t ref_peak(const fg_recompute_costs *c, int L, const unsigned char *p) {
    int64_t held = 0, best = INT64_MIN;
    for (int l = 0; l < L; l++) {
        held += c->bytes[p[l]];
        if (held + c->top[p[l]] > best) best = held + c->top[p[l]];
    }
    return best;
}

/* Every plan of L blocks (5^L), by brute force: the least time with peak <= budget (INFINITY when
 * none), and the least peak of all. */
static double brute_best(const fg_recompute_costs *c, int L, int64_t budget, int64_t *lowest) {
    unsigned char p[8];
    int total = 1;
    for (int l = 0; l < L; l++) total *= FG_RECOMPUTE_COUNT;
    double best = INFINITY;
    *lowest = INT64_MAX;
    for (int code = 0; code < total; code++) {
        int ok = 1;
        for (int l = 0, x = code; l < L; l++, x /= FG_RECOMPUTE_COUNT) {
            p[l] = (unsigned char)(x % FG_RECOMPUTE_COUNT);
            ok &= c->allowed[p[l]];
        }
        if (!ok) continue;
        const int64_t pk = ref_peak(c, L, p);
        double t = c->base_seconds;
        for (int l = 0; l < L; l++) t += c->seconds[p[l]];
        if (pk < *lowest) *lowest = pk;
        if (pk <= budget && t < best) best = t;
    }
    return best;
}

/* Costs shaped like a measured GPT block: recomputing more keeps fewer bytes, has a larger
 * transient (top) and costs more time. Indexed by FG_RECOMPUTE_{NONE, ATTN, BLOCK, POINTWISE, MLP}. */
static fg_recompute_costs gpt_like_costs(void) {
    fg_recompute_costs c = {.bytes = {1000, 760, 300, 820, 640},
                            .top = {5000, 5240, 5700, 5180, 5360},
                            .seconds = {1.0, 1.25, 1.4, 1.05, 1.2},
                            .base_seconds = 2.0,
                            .allowed = {1, 1, 1, 1, 1}};
    return c;
}

Test(recompute, planner_is_exact_against_every_plan) {
    for (int set = 0; set < 4; set++) {
        fg_recompute_costs c = gpt_like_costs();
        if (set >= 1) /* other shapes: pseudo-random costs, one choice forbidden in set 3 */
            for (int k = 0; k < FG_RECOMPUTE_COUNT; k++) {
                uint32_t h = (uint32_t)(k * 2654435761u + (unsigned)set * 40503u);
                c.bytes[k] = 100 + (int64_t)(h % 900);
                c.top[k] = 3000 + (int64_t)((h >> 10) % 2000);
                c.seconds[k] = 1.0 + (double)((h >> 20) % 500) / 1000.0;
            }
        if (set == 3) c.allowed[FG_RECOMPUTE_ATTN] = 0;
        for (int L = 1; L <= 5; L++) {
            int64_t lowest;
            brute_best(&c, L, INT64_MAX, &lowest);
            for (int64_t budget = lowest - 50; budget <= lowest + L * 1000 + 2000; budget += 37) {
                int64_t low2;
                const double want = brute_best(&c, L, budget, &low2);
                unsigned char plan[8];
                int64_t pk;
                double t;
                fg_status st = fg_recompute_plan(&c, L, budget, plan, &pk, &t);
                if (want == INFINITY) {
                    cr_assert_eq(st, FG_ERR_ARG, "set %d, L %d, budget %lld: a plan was returned, none fits", set, L,
                                 (long long)budget);
                    cr_assert_eq(pk, lowest, "set %d, L %d: smallest budget %lld, brute force %lld", set, L,
                                 (long long)pk, (long long)lowest);
                    continue;
                }
                cr_assert_eq(st, FG_OK, "set %d, L %d, budget %lld: %s", set, L, (long long)budget, fg_last_error());
                cr_assert_eq(pk, ref_peak(&c, L, plan), "set %d, L %d: reported peak %lld, the plan's %lld", set, L,
                             (long long)pk, (long long)ref_peak(&c, L, plan));
                cr_assert(pk <= budget, "set %d, L %d: peak %lld over budget %lld", set, L, (long long)pk,
                          (long long)budget);
                for (int l = 0; l < L; l++) cr_assert(c.allowed[plan[l]], "a forbidden choice was used");
                cr_assert(fabs(t - want) < 1e-9, "set %d, L %d, budget %lld: time %.6f, brute force's best %.6f", set,
                          L, (long long)budget, t, want);
            }
        }
    }
}

Test(recompute, planner_budget_between_uniform_plans_forces_a_mixed_plan) {
    fg_recompute_costs c = gpt_like_costs();
    const int L = 12;
    unsigned char u[12];
    /* between "every block recomputes its attention" and "every block recomputes everything" */
    memset(u, FG_RECOMPUTE_ATTN, sizeof u);
    const int64_t attn_peak = fg_recompute_predict_peak(&c, L, u);
    memset(u, FG_RECOMPUTE_BLOCK, sizeof u);
    const int64_t block_peak = fg_recompute_predict_peak(&c, L, u);
    const int64_t budget = (attn_peak + block_peak) / 2;
    unsigned char plan[12];
    int64_t pk;
    double t;
    cr_assert_eq(fg_recompute_plan(&c, L, budget, plan, &pk, &t), FG_OK, "%s", fg_last_error());
    int seen[FG_RECOMPUTE_COUNT] = {0}, kinds = 0;
    for (int l = 0; l < L; l++) kinds += !seen[plan[l]]++;
    cr_expect(kinds >= 2, "budget %lld (uniform attn %lld, block %lld): plan of %d kind(s)", (long long)budget,
              (long long)attn_peak, (long long)block_peak, kinds);
    cr_expect(pk <= budget && pk == ref_peak(&c, L, plan), "peak %lld, budget %lld", (long long)pk, (long long)budget);
    const double uniform_block_t = c.base_seconds + L * c.seconds[FG_RECOMPUTE_BLOCK];
    cr_expect(t < uniform_block_t, "mixed plan %.3f s is not faster than all-block %.3f s", t, uniform_block_t);
    /* the plan applied to a config reads back block by block */
    fg_gpt_config g = fg_gpt_default_config();
    g.vocab_size = 10;
    g.n_layer = L;
    fg_recompute_plan_apply(&g, plan);
    cr_assert_eq(fg_gpt_config_check(&g), FG_OK, "%s", fg_last_error());
    for (int l = 0; l < L; l++) cr_expect_eq(fg_gpt_layer_recompute(&g, l), (fg_gpt_recompute)plan[l], "block %d", l);
    /* below the least peak: refused, naming it */
    cr_expect_eq(fg_recompute_plan(&c, L, 100, plan, &pk, &t), FG_ERR_ARG);
    cr_expect(strstr(fg_last_error(), "smallest budget that fits"), "message: %s", fg_last_error());
}

Test(recompute, checkpoint_records_the_plan_and_reads_it_back) {
    fg_source *src = addition_source();
    fg_train_config c = plan_config(src, FG_ATTN_FLASH, "pointwise,block,mlp,attn,none");
    fg_trainer *tr = fg_trainer_create(&c, src);
    cr_assert(tr, "%s", fg_last_error());
    char dir[] = "/tmp/fg_recompute_ckpt_XXXXXX";
    cr_assert(mkdtemp(dir));
    cr_assert_eq(fg_ckpt_save(dir, tr), FG_OK, "%s", fg_last_error());
    fg_ckpt *ck = fg_ckpt_open(dir, 0);
    cr_assert(ck, "%s", fg_last_error());
    const fg_gpt_config *m = &fg_ckpt_get_info(ck)->model;
    char buf[256];
    fg_gpt_recompute_format(m, buf, sizeof buf);
    cr_expect_str_eq(buf, "pointwise,block,mlp,attn,none", "the plan read back from the checkpoint");
    fg_ckpt_close(ck);
    fg_trainer_free(tr);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    fg_source_free(src);
}

/* ---- bench recompute and --memory-budget on the command line ---- */

#define TINY_MODEL "--n-layer 3 --n-head 2 --n-embd 16 --batch-size 4 --dropout 0.1"

Test(recompute, bench_recompute_pareto_predicts_every_plans_bytes_exactly, .timeout = 600) {
    if (access(fg_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fg_bin());
    char dir[] = "/tmp/fg_recompute_pareto_XXXXXX";
    cr_assert(mkdtemp(dir));
    char cmd[1024];
    static char log[1 << 17];
    snprintf(cmd, sizeof cmd,
             "%s bench recompute " TINY_MODEL " --steps 1 --warmup-steps 1 --pareto --csv %s/p.csv --png %s/p.png 2>&1",
             fg_bin(), dir, dir);
    int st = run_cmd(cmd, log, sizeof log);
    const int have_png = !strstr(log, "gnuplot is not installed");
    cr_assert(st == 0 || (!have_png && st == 1), "bench recompute --pareto exited %d: %s", st, log);
    cr_assert(strstr(log, "first losses are identical (bit for bit)"), "choices' losses differ: %s", log);
    cr_assert(strstr(log, "loss is identical across the measured plans"), "plans' losses differ: %s", log);
    /* 3 blocks, 5 choices: C(7, 4) = 35 count vectors, all measured */
    cr_assert(strstr(log, "pareto: 35 plans"), "plan count: %s", log);
    snprintf(cmd, sizeof cmd, "%s/p.csv", dir);
    FILE *f = fopen(cmd, "r");
    cr_assert(f, "no CSV: %s", log);
    char line[1024];
    cr_assert(fgets(line, sizeof line, f));
    const char *hdr = "plan,uniform,frontier,pred_peak_bytes,peak_bytes,peak_err_bytes,rss_growth_bytes,";
    cr_assert(!strncmp(line, hdr, strlen(hdr)), "header %s", line);
    int rows = 0, frontier = 0;
    while (fgets(line, sizeof line, f)) {
        /* "plan",uniform,frontier,pred,measured,err,... : the plan is quoted (it has commas) */
        char *q = strchr(line + 1, '"');
        cr_assert(line[0] == '"' && q, "row %s", line);
        int uni, fr;
        long long pred, meas, err;
        cr_assert(sscanf(q + 1, ",%d,%d,%lld,%lld,%lld", &uni, &fr, &pred, &meas, &err) == 5, "row %s", line);
        cr_expect(err == meas - pred && err == 0, "plan %.*s: predicted %lld bytes, measured %lld", (int)(q - line),
                  line, pred, meas);
        rows++;
        frontier += fr;
    }
    fclose(f);
    cr_expect_eq(rows, 35, "CSV rows %d", rows);
    cr_expect(frontier >= 1, "no frontier plan marked");
    if (st == 0) {
        snprintf(cmd, sizeof cmd, "%s/p.png", dir);
        f = fopen(cmd, "rb");
        unsigned char sig[8] = {0};
        cr_assert(f && fread(sig, 1, 8, f) == 8, "no PNG written: %s", log);
        fclose(f);
        cr_expect(sig[0] == 0x89 && sig[1] == 'P' && sig[2] == 'N' && sig[3] == 'G', "not a PNG");
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* the number after `key` in log, or -1 */
static long long number_after(const char *log, const char *key) {
    const char *p = strstr(log, key);
    return p ? atoll(p + strlen(key)) : -1;
}

Test(recompute, memory_budget_picks_a_plan_within_it_and_refuses_below_the_least, .timeout = 600) {
    if (access(fg_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fg_bin());
    static char log[1 << 16];
    char cmd[1024];
    /* the uniform plans' peaks, from the cost table's runs */
    snprintf(cmd, sizeof cmd, "%s bench recompute " TINY_MODEL " --steps 1 --warmup-steps 1 2>&1", fg_bin());
    cr_assert_eq(run_cmd(cmd, log, sizeof log), 0, "%s", log);
    const char *none = strstr(log, "every block none      depth   3"),
               *block = strstr(log, "every block block     depth   3");
    cr_assert(none && block, "no depth-3 runs in: %s", log);
    const long long pk_none = number_after(strstr(none, "MiB ("), "MiB ("),
                    pk_block = number_after(strstr(block, "MiB ("), "MiB (");
    cr_assert(pk_none > pk_block && pk_block > 0, "peaks none %lld, block %lld", pk_none, pk_block);
    /* a budget halfway: some recomputation needed, not all of it */
    const long long budget = (pk_none + pk_block) / 2;
    snprintf(cmd, sizeof cmd, "%s bench train " TINY_MODEL " --steps 1 --warmup-steps 1 --memory-budget %lld 2>&1",
             fg_bin(), budget);
    cr_assert_eq(run_cmd(cmd, log, sizeof log), 0, "%s", log);
    cr_assert(strstr(log, "-> plan "), "no plan printed: %s", log);
    const long long pred = number_after(strstr(log, "predicted peak"), "MiB ("),
                    meas = number_after(strstr(log, "measured"), "MiB (");
    cr_expect(pred > 0 && pred <= budget && meas == pred, "budget %lld: predicted %lld, measured %lld: %s", budget,
              pred, meas, log);
    cr_expect(strstr(log, "within the budget"), "%s", log);
    /* below every plan: one line naming the smallest budget, exit 2 */
    snprintf(cmd, sizeof cmd, "%s bench train " TINY_MODEL " --steps 1 --warmup-steps 1 --memory-budget 1KiB 2>&1",
             fg_bin());
    int st = run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, 2, "exit %d: %s", st, log);
    cr_expect(strstr(log, "no recompute plan fits; the smallest budget that fits is "), "%s", log);
    const char *bad[] = {"1.5GB", "12XiB", "-3MiB", "0", "abc"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s bench train " TINY_MODEL " --steps 1 --memory-budget %s 2>&1", fg_bin(), bad[i]);
        st = run_cmd(cmd, log, sizeof log);
        cr_expect(st == 2 && strstr(log, "--memory-budget"), "--memory-budget %s: exit %d: %s", bad[i], st, log);
    }
}
