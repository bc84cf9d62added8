/* bench_train.c — `flashgrad bench train`: the steady-state cost of one optimizer step (forward,
 * backward, clipping, AdamW) for a configuration given with train's flags.
 *
 * It runs --warmup-steps steps first (they fill the caching allocator and BLAS's buffers), then
 * times --steps steps one by one and reports the median step time, tokens/s at the median, and the
 * allocator's counters: live and peak bytes, and system allocations after warm-up against at the
 * end — a training step after warm-up should take nothing new from the system, so the two numbers
 * should be equal. The optimizer settings (--lr, --min-lr, --warmup, --lr-decay-steps,
 * --weight-decay, --beta1, --beta2, --grad-clip) are train's; their defaults here are lr 1e-3 ->
 * 1e-4 with no warm-up, cosine over all W + N steps. With --eval-iters E > 0 it then evaluates the
 * trained model on E fixed validation batches — the batches `flashgrad train` evaluates on
 * (fg_trainer_eval_seed) — and prints each batch's loss and their mean: bench/train_torch_cpu.py
 * compares that with the same model trained by PyTorch. --print-step-times prints every timed
 * step's time.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "bench/bench.h"
#include "tensor/alloc.h"
#include "ops/cpu/threadpool.h"
#include "cli/cli_util.h"
#include "cli/flags.h"
#include "cli/train_defaults.h"
#include "train/trainer.h"

extern void openblas_set_num_threads(int n);

enum {
    B_DATA, B_BYTE, B_DIGITS, B_N_LAYER, B_N_HEAD, B_N_EMBD, B_BLOCK, B_BATCH, B_ACCUM, B_DROPOUT, B_ATTN,
    B_STEPS, B_WARM, B_THREADS, B_SEED, B_DEVICE, B_RECOMPUTE, B_LR, B_MIN_LR, B_LR_WARMUP, B_DECAY, B_WD, B_BETA1,
    B_BETA2, B_CLIP, B_EVAL_ITERS, B_STEP_TIMES, B_COUNT
};

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

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

static void set_bench_defaults(fg_flag *f, const fg_train_defaults *d) {
    f[B_DIGITS].i = d->digits;
    f[B_N_LAYER].i = d->n_layer;
    f[B_N_HEAD].i = d->n_head;
    f[B_N_EMBD].i = d->n_embd;
    f[B_BLOCK].i = d->block_size;
    f[B_BATCH].i = d->batch_size;
    f[B_ACCUM].i = d->grad_accum;
    f[B_DROPOUT].d = d->dropout;
}

int fg_bench_train(int argc, char **argv) {
    fg_flag f[B_COUNT] = {
        [B_DATA] = {"--data", FG_FLAG_STR, "FILE", "text file (default: the addition task)"},
        [B_BYTE] = {"--byte", FG_FLAG_BOOL, NULL, "byte-level tokenizer for --data"},
        [B_DIGITS] = {"--digits", FG_FLAG_INT, "N", "addition: digits per operand", 1, FG_ADD_MAX_DIGITS},
        [B_N_LAYER] = {"--n-layer", FG_FLAG_INT, "N", "transformer blocks", 1, 1024},
        [B_N_HEAD] = {"--n-head", FG_FLAG_INT, "N", "attention heads", 1, 65536},
        [B_N_EMBD] = {"--n-embd", FG_FLAG_INT, "N", "embedding width", 1, 65536},
        [B_BLOCK] = {"--block-size", FG_FLAG_INT, "N", "context length (text)", 1, 1 << 20},
        [B_BATCH] = {"--batch-size", FG_FLAG_INT, "N", "sequences per micro-batch", 1, 1 << 24},
        [B_ACCUM] = {"--grad-accum", FG_FLAG_INT, "N", "micro-batches per step", 1, 1 << 20},
        [B_DROPOUT] = {"--dropout", FG_FLAG_F64, "P", "dropout probability", 0, 0.99},
        [B_ATTN] = {"--attn", FG_FLAG_STR, "IMPL", "naive or flash", .s = "flash"},
        [B_STEPS] = {"--steps", FG_FLAG_INT, "N", "timed steps", 1, 1e6, 0, .i = 20},
        [B_WARM] = {"--warmup-steps", FG_FLAG_INT, "N", "untimed steps first", 1, 1e6, 0, .i = 3},
        [B_THREADS] = {"--threads", FG_FLAG_INT, "N", "threads of flashgrad's pool and of OpenBLAS (default: all cores)", 1, 1024},
        [B_SEED] = {"--seed", FG_FLAG_U64, "N", "seed", .u = 1337},
        [B_DEVICE] = {"--device", FG_FLAG_STR, "DEV", "cpu or cuda", .s = "cpu"},
        [B_RECOMPUTE] = {"--recompute", FG_FLAG_STR, "WHAT", "activation checkpointing: none, attn or block", .s = "none"},
        [B_LR] = {"--lr", FG_FLAG_F64, "X", "peak learning rate", 0, 1e30, 1, .d = 1e-3},
        [B_MIN_LR] = {"--min-lr", FG_FLAG_F64, "X", "learning rate at the end of the cosine", 0, 1e30, 0, .d = 1e-4},
        [B_LR_WARMUP] = {"--warmup", FG_FLAG_INT, "N", "linear learning-rate warm-up steps", 0, 1e12, 0, .i = 0},
        [B_DECAY] = {"--lr-decay-steps", FG_FLAG_INT, "N", "step where the cosine reaches --min-lr (default: all steps)", 0, 1e12, 1},
        [B_WD] = {"--weight-decay", FG_FLAG_F64, "X", "AdamW weight decay of the 2-d weights", 0, 1e30, 0, .d = 0.1},
        [B_BETA1] = {"--beta1", FG_FLAG_F64, "X", "AdamW beta1", 0, 0.999999, 0, .d = 0.9},
        [B_BETA2] = {"--beta2", FG_FLAG_F64, "X", "AdamW beta2", 0, 0.999999, 0, .d = 0.99},
        [B_CLIP] = {"--grad-clip", FG_FLAG_F64, "X", "clip the global gradient norm (0: off)", 0, 1e30, 0, .d = 1.0},
        [B_EVAL_ITERS] = {"--eval-iters", FG_FLAG_INT, "N", "validation batches evaluated after the timed steps (0: none)", 0, 1e6, 0, .i = 0},
        [B_STEP_TIMES] = {"--print-step-times", FG_FLAG_BOOL, NULL, "print every timed step's time"},
    };
    set_bench_defaults(f, &fg_defaults_addition);
    int rc = fg_flags_parse("bench train", f, B_COUNT, argc, argv);
    if (rc == -1) {
        fg_flags_help(stdout, "bench train", "[--data FILE] [model flags] [--steps N] [--warmup-steps N]", f, B_COUNT);
        printf("\nModel defaults are the addition task's training defaults; with --data, the text defaults.\n"
               "The optimizer defaults above hold for both (train's text defaults add --warmup 100).\n");
        return 0;
    }
    if (rc) return rc;
    if (f[B_DATA].given) {
        fg_flag g[B_COUNT];
        memcpy(g, f, sizeof g);
        set_bench_defaults(f, &fg_defaults_text);
        for (int k = 0; k < B_COUNT; k++)
            if (g[k].given) f[k] = g[k];
    }
    if (strcmp(f[B_DEVICE].s, "cpu")) {
        if (!strcmp(f[B_DEVICE].s, "cuda")) {
            if (fg_device_available(FG_CUDA) != FG_OK) {
                fprintf(stderr, "flashgrad bench train: --device cuda: %s\n", fg_last_error());
                return 2;
            }
        } else {
            fprintf(stderr, "flashgrad bench train: --device: unknown device '%s' (cpu or cuda)\n", f[B_DEVICE].s);
            return 2;
        }
    }
    const fg_device dev = strcmp(f[B_DEVICE].s, "cuda") ? FG_CPU : FG_CUDA;
    fg_attn_impl attn;
    if (!strcmp(f[B_ATTN].s, "flash")) attn = FG_ATTN_FLASH;
    else if (!strcmp(f[B_ATTN].s, "naive")) attn = FG_ATTN_NAIVE;
    else {
        fprintf(stderr, "flashgrad bench train: --attn: unknown implementation '%s' (naive or flash)\n", f[B_ATTN].s);
        return 2;
    }
    int recompute = fg_gpt_recompute_parse(f[B_RECOMPUTE].s);
    if (recompute < 0) {
        fprintf(stderr, "flashgrad bench train: --recompute: unknown setting '%s' (none, attn or block)\n", f[B_RECOMPUTE].s);
        return 2;
    }
    if (f[B_N_EMBD].i % f[B_N_HEAD].i) {
        fprintf(stderr, "flashgrad bench train: --n-embd %lld is not a multiple of --n-head %lld\n", (long long)f[B_N_EMBD].i,
                (long long)f[B_N_HEAD].i);
        return 2;
    }
    if (f[B_THREADS].given) {
        openblas_set_num_threads((int)f[B_THREADS].i);
        fg_pool_set_threads((int)f[B_THREADS].i);
    }

    fg_source *src;
    if (f[B_DATA].given) {
        fg_text_options to = fg_text_default_options((int)f[B_BLOCK].i);
        to.kind = f[B_BYTE].given ? FG_TOK_BYTE : FG_TOK_CHAR;
        src = fg_source_text(f[B_DATA].s, &to);
    } else {
        fg_addition_config ac = fg_addition_default_config();
        ac.n_digits = (int)f[B_DIGITS].i;
        src = fg_source_addition(&ac);
    }
    if (!src) {
        fprintf(stderr, "flashgrad bench train: %s\n", fg_last_error());
        return 1;
    }
    const int W = (int)f[B_WARM].i, N = (int)f[B_STEPS].i;
    fg_train_config cfg = {0};
    cfg.model = fg_gpt_default_config();
    cfg.model.n_layer = (int)f[B_N_LAYER].i;
    cfg.model.n_head = (int)f[B_N_HEAD].i;
    cfg.model.n_embd = (int)f[B_N_EMBD].i;
    cfg.model.block_size = fg_source_fixed_block(src) ? fg_source_fixed_block(src) : (int)f[B_BLOCK].i;
    cfg.model.vocab_size = fg_source_vocab_size(src);
    cfg.model.dropout = f[B_DROPOUT].d;
    cfg.model.attn = attn;
    cfg.model.recompute = (fg_gpt_recompute)recompute;
    cfg.model.device = dev;
    cfg.batch_size = (int)f[B_BATCH].i;
    cfg.grad_accum = (int)f[B_ACCUM].i;
    cfg.steps = W + N;
    cfg.eval_iters = 1;
    cfg.seed = f[B_SEED].u;
    cfg.opt = (fg_adamw_config){.lr = f[B_LR].d, .min_lr = f[B_MIN_LR].d, .warmup = f[B_LR_WARMUP].i,
                                .decay_steps = f[B_DECAY].given ? f[B_DECAY].i : W + N, .beta1 = f[B_BETA1].d,
                                .beta2 = f[B_BETA2].d, .eps = 1e-8, .weight_decay = f[B_WD].d,
                                .grad_clip = f[B_CLIP].d};
    const int E = (int)f[B_EVAL_ITERS].i;
    if (E > 0 && (!f[B_DATA].given || dev != FG_CPU)) {
        fprintf(stderr, "flashgrad bench train: --eval-iters needs --data (a text file) on the cpu\n");
        fg_source_free(src);
        return 2;
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
    printf("bench train: %s, %d layers, %d heads, %d embd, %.3fM parameters, %s attention, dropout %g, recompute %s\n",
           src->kind == FG_SOURCE_ADDITION ? "addition task" : src->path, cfg.model.n_layer, cfg.model.n_head,
           cfg.model.n_embd, tr->model->num_elements / 1e6, fg_attn_impl_name(attn), cfg.model.dropout,
           fg_gpt_recompute_name(cfg.model.recompute));
    printf("step: %d x %d tokens x %d micro-batches = %lld tokens; %d warm-up steps, %d timed\n", cfg.batch_size, tr->T,
           cfg.grad_accum, (long long)tokens, W, N);
    printf("optimizer: AdamW lr %g -> %g (warm-up %lld, cosine to step %lld), betas (%g, %g), eps %g, weight decay %g, "
           "grad clip %g, seed %llu\n", cfg.opt.lr, cfg.opt.min_lr, (long long)cfg.opt.warmup, (long long)cfg.opt.decay_steps,
           cfg.opt.beta1, cfg.opt.beta2, cfg.opt.eps, cfg.opt.weight_decay, cfg.opt.grad_clip, (unsigned long long)cfg.seed);

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
        qsort(t, (size_t)N, sizeof *t, cmp_double);
        double med = N % 2 ? t[N / 2] : 0.5 * (t[N / 2 - 1] + t[N / 2]);
        printf("step time: median %.2f ms (min %.2f, max %.2f, mean %.2f)\n", med * 1e3, t[0] * 1e3, t[N - 1] * 1e3,
               sum / N * 1e3);
        printf("throughput: %.0f tokens/s at the median step time\n", tokens / med);
        printf("memory (%s): live %.2f MiB between steps, peak %.2f MiB during a step, reserved %.2f MiB\n",
               fg_device_name(dev),
               end.current / 1048576.0, end.peak / 1048576.0, end.reserved / 1048576.0);
        printf("peak bytes: %zu (allocation counter, during a timed step)\n", (size_t)end.peak);
        printf("system allocations: %" PRIu64 " after warm-up, %" PRIu64 " at the end (%s)\n", warm.system_allocs,
               end.system_allocs,
               end.system_allocs == warm.system_allocs ? "none during the timed steps" : "GREW during the timed steps");
    }
    if (code == 0 && E > 0) code = eval_val(tr, E);
    free(t);
    free(t_order);
    fg_trainer_free(tr);
    fg_source_free(src);
    return code;
}
