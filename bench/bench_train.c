/* bench_train.c — `flashgrad bench train`: the steady-state cost of one optimizer step (forward,
 * backward, clipping, AdamW) for a configuration given with train's flags.
 *
 * It runs --warmup-steps steps first (they fill the caching allocator and BLAS's buffers), then
 * times --steps steps one by one and reports the median step time, tokens/s at the median, and the
 * allocator's counters: live and peak bytes, and system allocations after warm-up against at the
 * end — a training step after warm-up should take nothing new from the system, so the two numbers
 * should be equal. The optimizer settings (--lr, --min-lr, --warmup, --lr-decay-steps,
 * --weight-decay, --beta1, --beta2, --grad-clip) are train's; their defaults here are lr 1e-3 ->
 * 1e-4 with no warm-up, cosine over all W + N steps. With --eval-iters E > 0 (and a dataset with a
 * validation split: --data or --data-bin) it then evaluates the trained model on E fixed
 * validation batches — the batches `flashgrad train` evaluates on
 * (fg_trainer_eval_seed) — and prints each batch's loss and their mean: bench/train_torch_cpu.py
 * compares that with the same model trained by PyTorch. --print-step-times prints every timed
 * step's time. --synthetic-vocab V trains on synthetic tokens of a V-word vocabulary (no file; for
 * speed at GPT-2's vocabulary until a dataset is at hand). On the CPU it also prints MFU at the median step time (fg_trainer_mfu: model FLOPs
 * per token × tokens/s over the FMA peak of ops/cpu/peak.h) and the process's peak RSS.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "autograd/autograd.h"
#include "tensor/philox.h"
#include "bench/bench.h"
#include "tensor/alloc.h"
#include "ops/cpu.h"
#include "cli/cli_util.h"
#include "cli/flags.h"
#include "cli/train_defaults.h"
#include "cli/train_flags.h"
#include "train/trainer.h"

/* bench train's own flags; they follow the ones it shares with train (cli/train_flags.h). */
enum { B_STEPS = FG_TF_COUNT, B_WARM, B_EVAL_ITERS, B_STEP_TIMES, B_SYNTH, B_PROFILE, B_COUNT };

/* The loss of the trained model on E fixed validation batches (batch i of the split under the run's
 * evaluation seed, as fg_trainer_eval_loss draws them), one by one so that the spread shows:
 *     val losses: l_0 ... l_{E-1}       (%.9g each)
 *     val loss: mean over E batches of B x T tokens
 * No dropout, no graph. Returns 0, or 1 after printing the error. */
static int eval_val(fg_trainer *tr, int E) {
    const int B = tr->cfg.batch_size, T = tr->T;
    const uint64_t seed = fg_trainer_eval_seed(tr->cfg.seed);
    double sum = 0;
    int code = 0;
    fg_no_grad_enter();
    printf("val losses:");
    for (int i = 0; i < E && code == 0; i++) {
        fg_tensor *l = NULL;
        if (fg_source_batch(tr->data, FG_SPLIT_VAL, B, T, seed, (uint64_t)i, tr->x, tr->y) != FG_OK ||
            !(l = fg_gpt_loss(tr->model, tr->x, tr->y, B, T, NULL))) {
            code = 1;
            break;
        }
        double v = fg_get(l, 0);
        fg_release(l);
        sum += v;
        printf(" %.9g", v);
    }
    printf("\n");
    fg_no_grad_exit();
    if (code) {
        fprintf(stderr, "flashgrad bench train: evaluation: %s\n", fg_last_error());
        return 1;
    }
    printf("val loss: %.6f (mean over %d batches of %d x %d tokens)\n", sum / E, E, B, T);
    return 0;
}

/* The process's peak resident memory in KiB: VmHWM of /proc/self/status, the high-water mark of
 * this program's own address space. getrusage's ru_maxrss is the fallback only: Linux carries it
 * over from the process image before execve, so a benchmark started by a large parent (a Python
 * with torch loaded) would report the parent's size. 0 when neither is available. */
static double peak_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kib = atof(line + 6);
    if (f) fclose(f);
    struct rusage ru;
    if (kib <= 0 && getrusage(RUSAGE_SELF, &ru) == 0) kib = (double)ru.ru_maxrss;
    return kib;
}

/* ---- synthetic tokens (--synthetic-vocab V): a dataset of no file, for measuring speed at any
 * vocabulary (GPT-2's 50,304). Token t of row b of batch `index` of split s is Philox number
 * (index · B + b) · (T + 1) + t of stream SYNT|s under the run's seed, mod V; x is tokens 0..T-1 of
 * the row and y tokens 1..T. Nothing to learn: the loss stays near log V. ---- */
#define FG_SYNTH_MAX_VOCAB (1 << 24)
#define SYNTH_STREAM (0x53594e54ull << 32) /* "SYNT" */

typedef struct {
    fg_source base; /* first: fg_source_free frees the whole struct */
    int V;
} synth_source;

static const fg_tokenizer *synth_tokenizer(const fg_source *d) {
    (void)d;
    return NULL;
}
static int synth_vocab(const fg_source *d) { return ((const synth_source *)d)->V; }
static int synth_fixed_block(const fg_source *d) {
    (void)d;
    return 0;
}
static double synth_optimal(const fg_source *d) { return log((double)((const synth_source *)d)->V); }
static fg_status synth_batch(const fg_source *d, fg_split s, int B, int T, uint64_t seed, uint64_t index, int32_t *x,
                             int32_t *y) {
    const uint32_t V = (uint32_t)((const synth_source *)d)->V;
    for (int b = 0; b < B; b++) {
        const uint64_t row = (index * (uint64_t)B + (uint64_t)b) * (uint64_t)(T + 1);
        for (int t = 0; t <= T; t++) {
            const int32_t tok = (int32_t)(fg_philox_u32(seed, SYNTH_STREAM | (uint64_t)s, row + (uint64_t)t) % V);
            if (t < T) x[(size_t)b * T + t] = tok;
            if (t > 0) y[(size_t)b * T + t - 1] = tok;
        }
    }
    return FG_OK;
}
static const fg_source_ops synth_ops = {.tokenizer = synth_tokenizer,
                                        .vocab_size = synth_vocab,
                                        .fixed_block = synth_fixed_block,
                                        .batch = synth_batch,
                                        .optimal_loss = synth_optimal};

fg_source *fg_bench_synth_source(int V) {
    synth_source *d = calloc(1, sizeof *d);
    if (!d) {
        fg_error(FG_ERR_OOM, "out of memory");
        return NULL;
    }
    d->base.ops = &synth_ops;
    d->base.kind = FG_SOURCE_TEXT;
    snprintf(d->base.path, sizeof d->base.path, "synthetic tokens, vocabulary %d", V);
    d->V = V;
    return &d->base;
}

/* A task's model defaults (train's, train_defaults.h) with the benchmark's optimizer defaults,
 * the same for every task: lr 1e-3 -> 1e-4 without warm-up. */
void fg_bench_train_defaults(fg_flag *f, const fg_train_defaults *d) {
    fg_train_flags_defaults(f, d);
    f[FG_TF_LR].d = 1e-3;
    f[FG_TF_MIN_LR].d = 1e-4;
    f[FG_TF_WARMUP].i = 0;
    f[FG_TF_WD].d = 0.1;
    f[FG_TF_BETA1].d = 0.9;
    f[FG_TF_BETA2].d = 0.99;
    f[FG_TF_CLIP].d = 1.0;
}

static void init_bench_flags(fg_flag *f) {
    fg_train_flags_init(f);
    f[B_STEPS] = (fg_flag){"--steps", FG_FLAG_INT, "N", "timed steps", 1, 1e6, 0, .i = 20};
    f[B_WARM] = (fg_flag){"--warmup-steps", FG_FLAG_INT, "N", "untimed steps first", 1, 1e6, 0, .i = 3};
    f[B_EVAL_ITERS] = (fg_flag){
        "--eval-iters", FG_FLAG_INT, "N",
        "validation batches evaluated after the timed steps (0: none; needs --data or --data-bin)", 0, 1e6, 0, .i = 0};
    f[B_STEP_TIMES] =
        (fg_flag){.name = "--print-step-times", .type = FG_FLAG_BOOL, .help = "print every timed step's time"};
    f[B_SYNTH] = (fg_flag){"--synthetic-vocab", FG_FLAG_INT, "V",
                           "train on synthetic tokens uniform in [0, V) instead (text model defaults; for speed only)",
                           2, FG_SYNTH_MAX_VOCAB, 0, .i = 0};
    f[B_PROFILE] = (fg_flag){"--profile", FG_FLAG_INT, "P",
                             "after the timed steps, P more with the op profile on: wall ms per step of every op's "
                             "forward and backward and of the step's other phases (0: none)",
                             0, 1e6, 0, .i = 0};
}

static int cmp_row_total(const void *a, const void *b) {
    const fg_op_profile_row *x = a, *y = b;
    const double tx = x->fwd_s + x->bwd_s, ty = y->fwd_s + y->bwd_s;
    return tx < ty ? 1 : tx > ty ? -1 : 0;
}

/* --profile P: P more steps with the op profile on, then its table, the costliest first. An op's
 * forward is the wall time from the previous op's record to its own (its kernels and whatever ran
 * between the two). */
static int profile_steps(fg_trainer *tr, int P, fg_device dev) {
    fg_op_profile_row rows[FG_OP_PROFILE_MAX];
    fg_op_profile_start();
    const double t0 = fg_now();
    for (int i = 0; i < P; i++) {
        fg_step_stats s;
        if (fg_trainer_step(tr, &s) != FG_OK) {
            fg_op_profile_stop();
            fprintf(stderr, "flashgrad bench train: profiled step %d: %s\n", i + 1, fg_last_error());
            return 1;
        }
    }
    fg_device_sync(dev);
    const double wall = (fg_now() - t0) / P;
    fg_op_profile_stop();
    int n = fg_op_profile_read(rows, FG_OP_PROFILE_MAX);
    if (n > FG_OP_PROFILE_MAX) n = FG_OP_PROFILE_MAX;
    qsort(rows, (size_t)n, sizeof rows[0], cmp_row_total);
    printf("op profile: %d steps, %.2f ms per step (wall; an op's forward runs from the previous op's record to its "
           "own)\n",
           P, wall * 1e3);
    printf("  %-36s %9s %9s %9s %7s\n", "op or phase", "fwd ms", "bwd ms", "total ms", "share");
    double sum = 0;
    for (int i = 0; i < n; i++) {
        const double f = rows[i].fwd_s / P, b = rows[i].bwd_s / P;
        sum += f + b;
        printf("  %-36s %9.3f %9.3f %9.3f %6.1f%%\n", rows[i].name, f * 1e3, b * 1e3, (f + b) * 1e3,
               100 * (f + b) / wall);
    }
    printf("  %-36s %9s %9s %9.3f %6.1f%%\n", "(outside the profile)", "", "", (wall - sum) * 1e3,
           100 * (wall - sum) / wall);
    return 0;
}

int fg_bench_train(int argc, char **argv) {
    fg_flag f[B_COUNT];
    init_bench_flags(f);
    fg_bench_train_defaults(f, &fg_defaults_addition);
    int rc = fg_flags_parse("bench train", f, B_COUNT, argc, argv);
    if (rc == -1) {
        fg_flags_help(stdout, "bench train", "[--data FILE] [model flags] [--steps N] [--warmup-steps N]", f, B_COUNT);
        printf("\nModel defaults are the addition task's training defaults; with --data or --data-bin, the text "
               "defaults.\n"
               "The optimizer defaults above hold for both (train's text defaults add --warmup 100).\n");
        return 0;
    }
    if (rc) return rc;
    if (f[B_SYNTH].given && (f[FG_TF_DATA].given || f[FG_TF_DATA_BIN].given || f[FG_TF_BYTE].given ||
                             f[FG_TF_DIGITS].given)) {
        fprintf(stderr, "flashgrad bench train: --synthetic-vocab is a dataset of its own: drop --data, --data-bin, "
                        "--byte and --digits\n");
        return 2;
    }
    if (f[FG_TF_DATA].given || f[FG_TF_DATA_BIN].given || f[B_SYNTH].given) {
        fg_flag g[B_COUNT];
        memcpy(g, f, sizeof g);
        fg_bench_train_defaults(f, &fg_defaults_text);
        for (int k = 0; k < B_COUNT; k++)
            if (g[k].given) f[k] = g[k];
    }
    /* train's checks of the shared flags (cli/train_flags.h); this starts the device */
    fg_train_choice run;
    if (fg_train_flags_check(f, &run) != FG_OK) {
        fprintf(stderr, "flashgrad bench train: %s\n", fg_last_error());
        return 2;
    }
    fg_train_flags_threads(f);
    const fg_device dev = run.device;

    /* the data; the addition task keeps its default loss (on every token) */
    fg_source *src = f[B_SYNTH].given ? fg_bench_synth_source((int)f[B_SYNTH].i)
                                      : fg_train_flags_source(f, fg_addition_default_config().answer_only, NULL);
    if (!src) {
        fprintf(stderr, "flashgrad bench train: %s\n", fg_last_error());
        return 1;
    }
    const int W = (int)f[B_WARM].i, N = (int)f[B_STEPS].i;
    fg_train_config cfg = {.steps = W + N, .eval_iters = 1};
    if (fg_train_flags_config(f, src, &run, &cfg) != FG_OK) {
        fprintf(stderr, "flashgrad bench train: %s\n", fg_last_error());
        fg_source_free(src);
        return 2;
    }
    const int E = (int)f[B_EVAL_ITERS].i;
    if (E > 0 && ((!f[FG_TF_DATA].given && !f[FG_TF_DATA_BIN].given) || dev != FG_CPU)) {
        fprintf(stderr, "flashgrad bench train: --eval-iters needs a validation split (--data or --data-bin) on the "
                        "cpu\n");
        fg_source_free(src);
        return 2;
    }
    if (run.memory_budget) {
        const int mrc = fg_train_flags_memory_plan(&run, src, &cfg, 1, 2, NULL, stdout);
        if (mrc) {
            fprintf(stderr, "flashgrad bench train: %s\n", fg_last_error());
            fg_source_free(src);
            return mrc;
        }
    }
    fg_trainer *tr = fg_trainer_create(&cfg, src);
    if (!tr) {
        fprintf(stderr, "flashgrad bench train: %s\n", fg_last_error());
        fg_source_free(src);
        return 1;
    }
    fg_print_machine_line(stdout);
    fg_blas_hint(stdout);
    printf("threads: %d (flashgrad pool)\n", fg_pool_threads());
    const int64_t tokens = (int64_t)cfg.batch_size * tr->T * cfg.grad_accum;
    char plan[FG_GPT_MAX_LAYER * 12];
    fg_gpt_recompute_format(&cfg.model, plan, sizeof plan);
    printf("bench train: %s, %d layers, %d heads, %d embd, %.3fM parameters, %s attention, dropout %g, recompute %s\n",
           src->kind == FG_SOURCE_ADDITION ? "addition task" : src->path, cfg.model.n_layer, cfg.model.n_head,
           cfg.model.n_embd, tr->model->num_elements / 1e6, fg_attn_impl_name(run.attn), cfg.model.dropout,
           plan);
    if (!fg_gpt_is_gpt2(&cfg.model)) {
        char arch[512];
        fg_gpt_arch_describe(&cfg.model, arch, sizeof arch);
        printf("architecture: %s\n", arch);
    }
    if (cfg.model.compute == FG_COMPUTE_BF16)
        printf("precision: bfloat16 mixed (float32 weights and AdamW; bf16 matmuls and attention, float32 "
               "accumulation)\n");
    printf("step: %d x %d tokens x %d micro-batches = %lld tokens; %d warm-up steps, %d timed\n", cfg.batch_size, tr->T,
           cfg.grad_accum, (long long)tokens, W, N);
    printf("optimizer: AdamW lr %g -> %g (warm-up %lld, cosine to step %lld), betas (%g, %g), eps %g, weight decay %g, "
           "grad clip %g, seed %llu\n",
           cfg.opt.lr, cfg.opt.min_lr, (long long)cfg.opt.warmup, (long long)cfg.opt.decay_steps, cfg.opt.beta1,
           cfg.opt.beta2, cfg.opt.eps, cfg.opt.weight_decay, cfg.opt.grad_clip, (unsigned long long)cfg.seed);
    if (cfg.optimizer == FG_OPTIM_MUON)
        printf("muon: the 2-d matrices inside the blocks, lr %g, momentum %g%s, %d Newton-Schulz steps, weight decay "
               "%g, lr adjustment %s; AdamW for the rest\n",
               cfg.muon.lr, cfg.muon.momentum, cfg.muon.nesterov ? " (Nesterov)" : "", cfg.muon.ns_steps,
               cfg.muon.weight_decay, fg_muon_adjust_name(cfg.muon.adjust));

    int code = 0;
    double *t = malloc((size_t)N * sizeof *t), *t_order = f[B_STEP_TIMES].given ? malloc((size_t)N * sizeof *t) : NULL;
    fg_alloc_stats warm = {0};
    for (int i = 0; i < W + N && t; i++) {
        if (i == W) {
            fg_device_sync(dev);
            warm = fg_alloc_get_stats(dev);
            fg_alloc_reset_peak(dev);
        }
        double t0 = fg_now();
        fg_step_stats s;
        if (fg_trainer_step(tr, &s) != FG_OK) {
            fprintf(stderr, "flashgrad bench train: step %d: %s\n", i + 1, fg_last_error());
            code = 1;
            break;
        }
        fg_device_sync(dev); /* a GPU step is timed to its end */
        if (i >= W) t[i - W] = fg_now() - t0;
        if (i >= W && t_order) t_order[i - W] = t[i - W];
        /* every step's loss, exactly (hex float): bench/recompute.sh compares them across settings */
        printf("%s%a%s", i == 0 ? "losses: " : " ", s.loss, i == W + N - 1 ? "\n" : "");
    }
    if (!t || (f[B_STEP_TIMES].given && !t_order)) code = 1;
    if (code == 0 && t_order) {
        printf("step times ms:");
        for (int i = 0; i < N; i++) printf(" %.3f", t_order[i] * 1e3);
        printf("\n");
    }
    if (code == 0) {
        fg_alloc_stats end = fg_alloc_get_stats(dev);
        double sum = 0;
        for (int i = 0; i < N; i++) sum += t[i];
        qsort(t, (size_t)N, sizeof *t, fg_bench_cmp_double);
        double med = N % 2 ? t[N / 2] : 0.5 * (t[N / 2 - 1] + t[N / 2]);
        printf("step time: median %.2f ms (min %.2f, max %.2f, mean %.2f)\n", med * 1e3, t[0] * 1e3, t[N - 1] * 1e3,
               sum / N * 1e3);
        printf("throughput: %.0f tokens/s at the median step time\n", tokens / med);
        if (dev == FG_CPU) {
            const double peak = fg_fma_peak_gflops();
            /* N: the parameters in products (an untied token embedding is a lookup; trainer.h) */
            const long long n_prod = (long long)tr->model->num_elements -
                                     (cfg.model.untie_head ? (long long)cfg.model.vocab_size * cfg.model.n_embd : 0);
            printf("mfu: %.1f%% at the median step time (%.6g model flop/token = 6 N + 12 L C T, N = %lld; fma peak "
                   "%.1f GFLOP/s, %s, %d threads)\n",
                   100 * fg_trainer_mfu(tr, tokens / med), fg_trainer_flops_per_token(tr), n_prod, peak,
                   fg_simd_name(fg_simd_active()), fg_pool_threads());
        }
        printf("memory (%s): live %.2f MiB between steps, peak %.2f MiB during a step, reserved %.2f MiB\n",
               fg_device_name(dev), end.current / 1048576.0, end.peak / 1048576.0, end.reserved / 1048576.0);
        printf("peak bytes: %zu (allocation counter, during a timed step)\n", (size_t)end.peak);
        printf("system allocations: %" PRIu64 " after warm-up, %" PRIu64 " at the end (%s)\n", warm.system_allocs,
               end.system_allocs,
               end.system_allocs == warm.system_allocs ? "none during the timed steps" : "GREW during the timed steps");
        const double rss = peak_rss_kib();
        if (rss > 0) printf("peak RSS: %.1f MiB (the process)\n", rss / 1024.0);
    }
    if (code == 0 && f[B_PROFILE].i > 0) code = profile_steps(tr, (int)f[B_PROFILE].i, dev);
    if (code == 0 && E > 0) code = eval_val(tr, E);
    free(t);
    free(t_order);
    fg_trainer_free(tr);
    fg_source_free(src);
    return code;
}
