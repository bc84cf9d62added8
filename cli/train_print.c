/* train_print.c — what `flashgrad train` prints (cli/train_cmd.h): the lines before the first step,
 * the samples and the report at the end, and the shared printing state. Rank 0 alone prints. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "cli/train_cmd.h"
#include "ops/cpu.h"
#include "tensor/fileio.h"

fg_comm *fg_train_comm;
int fg_train_on_tty;
int fg_train_stdout_lost;
fg_model_file *fg_train_init_model;

/* A full line on stdout, clearing the progress line first. */
void fg_train_say(const char *fmt, ...) {
    if (fg_train_on_tty) fputs("\r\033[K", stderr);
    if (fg_train_stdout_lost) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fg_train_check_stdout();
}

void fg_train_die(int code, const char *fmt, ...) {
    fflush(stdout);
    const int ranks = fg_train_comm ? fg_train_comm->size : 1, rank = fg_train_comm ? fg_train_comm->rank : 0;
    /* Most failures happen on every rank alike (a bad flag): rank 0 says it and ends the run
     * (fg_comm_abort), and the others, a moment later, say it only if it was theirs alone. */
    if (rank > 0) usleep(300 * 1000);
    char head[96];
    snprintf(head, sizeof head, "%sflashgrad train: ", fg_train_on_tty ? "\r\033[K" : "");
    if (rank > 0) snprintf(head + strlen(head), sizeof head - strlen(head), "rank %d: ", rank);
    va_list ap;
    va_start(ap, fmt);
    fg_cli_vline(head, fmt, ap); /* one write: mpirun's banner cannot split it */
    va_end(ap);
    if (ranks > 1) fg_comm_abort(fg_train_comm, code);
    exit(code);
}

/* ---- standard output that may go away ---- */
/* After a write error on stdout (EPIPE once the reader of `train | head` exits, ENOSPC, EIO after a
 * hangup) nothing more is printed there; training goes on. */
void fg_train_check_stdout(void) {
    if (fg_train_stdout_lost) return;
    if (fflush(stdout) != 0 || ferror(stdout)) fg_train_stdout_lost = 1;
}

/* ---- samples at the end ---- */
static void show_addition_samples(fg_trainer *tr, int n) {
    const fg_addition *task = tr->data->add;
    const fg_tokenizer *tok = fg_addition_tokenizer(task);
    const int pl = fg_addition_prompt_len(task), al = fg_addition_answer_len(task),
              nd = fg_addition_get_config(task)->n_digits;
    int32_t seq[64], ans[64];
    fg_train_say("samples (held-out problems, greedy; the model writes the sum's digits least significant first):\n");
    for (int i = 0; i < n; i++) {
        uint64_t a, b;
        /* problems far from the ones the accuracy used */
        if (fg_addition_problem(task, FG_SPLIT_VAL, 1000000u + (uint64_t)i, seq, ans, &a, &b) != FG_OK) return;
        if (fg_gpt_greedy_batch(tr->model, seq, 1, pl, al) != FG_OK) return;
        /* the model's digits, un-reversed (it writes the sum least significant digit first) */
        char sum[16];
        int ok = 1, k = 0;
        for (int j = al - 2; j >= 0; j--) {
            int by = fg_tokenizer_byte_of(tok, seq[pl + j]);
            sum[k++] = (by >= '0' && by <= '9') ? (char)by : '?';
        }
        sum[k] = '\0';
        for (int j = 0; j < al; j++) ok &= seq[pl + j] == ans[j];
        fg_train_say("  %0*" PRIu64 " + %0*" PRIu64 " = %0*" PRIu64 "   model: %s   %s\n", nd, a, nd, b, nd + 1, a + b,
                     sum, ok ? "correct" : "WRONG");
    }
}

/* Samples from a newline (text), or from id 0 as token ids (token files, which have no tokenizer:
 * `flashgrad sample --tokenizer` decodes them). */
static void show_text_samples(fg_trainer *tr, int n, uint64_t seed) {
    const fg_tokenizer *tok = fg_source_tokenizer(tr->data);
    const int len = tok ? 200 : 64;
    int32_t *t = malloc((len + 1) * sizeof *t);
    char *s = malloc((size_t)len * 12 + 1);
    if (!t || !s) goto out;
    /* a BPE model starts from <|endoftext|> (GPT-2's habit), the others from a newline */
    const fg_bpe *b = tok ? fg_tokenizer_bpe(tok) : NULL;
    int32_t start = b && fg_bpe_special_id(b, "<|endoftext|>") >= 0 ? fg_bpe_special_id(b, "<|endoftext|>")
                    : tok                                          ? fg_tokenizer_token_of(tok, '\n')
                                                                   : 0;
    if (start < 0) start = 0;
    for (int i = 0; i < n; i++) {
        t[0] = start;
        fg_sample_opts o = {.temperature = 0.8, .top_k = 0, .seed = seed + (uint64_t)i};
        if (fg_gpt_generate(tr->model, t, 1, len, &o) != FG_OK) break;
        if (tok) {
            char *text = NULL;
            size_t tl = 0;
            if (fg_tokenizer_decode_text(tok, t + 1, (size_t)len, &text, &tl) != FG_OK) break;
            fg_train_say("---- sample %d (temperature 0.8) ----\n%.*s\n", i + 1, (int)tl, text);
            free(text);
            continue;
        } else {
            size_t k = 0;
            for (int j = 1; j <= len; j++) k += (size_t)sprintf(s + k, j > 1 ? " %d" : "%d", (int)t[j]);
        }
        fg_train_say("---- sample %d (temperature 0.8%s) ----\n%s\n", i + 1, tok ? "" : ", token ids", s);
    }
out:
    free(t);
    free(s);
}

/* The lines that describe the run before its first step. */
void fg_train_print_header(const train_args *a, const train_run *r) {
    if (fg_train_comm->rank > 0) return;
    const fg_trainer *tr = r->tr;
    const fg_source *src = r->src;
    const fg_train_config *cfg = &r->cfg;
    const fg_gpt_config *mc = &tr->model->cfg;
    char data_desc[8800];
    fg_source_print(src, data_desc, sizeof data_desc);
    fg_train_say("data: %s, vocabulary %d\n", data_desc, mc->vocab_size);
    fg_train_say("model: %d layers, %d heads, %d embd, block %d, %.2fM parameters, %s attention, dropout %g\n",
                 mc->n_layer, mc->n_head, mc->n_embd, mc->block_size, tr->model->num_elements / 1e6,
                 fg_attn_impl_name(mc->attn), mc->dropout);
    if (!fg_gpt_is_gpt2(mc)) {
        char arch[512];
        fg_gpt_arch_describe(mc, arch, sizeof arch);
        fg_train_say("architecture: %s\n", arch);
    }
    if (mc->compute == FG_COMPUTE_BF16)
        fg_train_say("precision: bfloat16 mixed (float32 weights, gradients and AdamW; bf16 matmuls and attention "
                     "with float32 accumulation)\n");
    fg_train_say("training: %lld steps of %d x %d x %d tokens, lr %g -> %g (warmup %lld, cosine to step %lld), AdamW "
                 "betas (%g, %g) wd %g, clip %g, seed %" PRIu64 "\n",
                 (long long)cfg->steps, cfg->batch_size, tr->T, cfg->grad_accum, cfg->opt.lr, cfg->opt.min_lr,
                 (long long)cfg->opt.warmup, (long long)cfg->opt.decay_steps, cfg->opt.beta1, cfg->opt.beta2,
                 cfg->opt.weight_decay, cfg->opt.grad_clip, cfg->seed);
    if (cfg->optimizer == FG_OPTIM_MUON)
        fg_train_say("muon: the 2-d matrices inside the blocks, lr %g (scheduled as --lr), momentum %g%s, %d "
                     "Newton-Schulz steps, wd %g, lr adjustment %s; AdamW for the rest\n",
                     cfg->muon.lr, cfg->muon.momentum, cfg->muon.nesterov ? " (Nesterov)" : "", cfg->muon.ns_steps,
                     cfg->muon.weight_decay, fg_muon_adjust_name(cfg->muon.adjust));
    if (fg_train_on_tty) fputs("\r\033[K", stderr);
    fg_print_machine_line(stdout);
    fg_blas_hint(stdout);
    fg_train_say("threads: %d (flashgrad pool); runs are bit-for-bit reproducible for a given seed and thread count\n",
                 fg_pool_threads());
    if (fg_train_comm->size > 1)
        fg_train_say("data parallel: %d processes (%s) x %d micro-batches each, gradients folded in rank order%s\n",
                     fg_train_comm->size, fg_train_comm->ops->name, cfg->grad_accum / fg_train_comm->size,
                     a->f[F_ZERO].i ? "; AdamW's moments sharded (ZeRO-1)" : "");
    if (mc->device == FG_CPU) {
        char origin[4400], all[96] = "peak";
        /* tokens/s counts every process's tokens, so the peak is every process's too */
        if (fg_train_comm->size > 1)
            snprintf(all, sizeof all, "(%d processes x peak = %.1f GFLOP/s)", fg_train_comm->size,
                     fg_train_mfu_peak(r));
        fg_train_say(
            "fma peak: %.1f GFLOP/s float32 (%s, %d threads; %s); MFU = tokens/s x %.4g model flop/token (6 N + 12 L "
            "C T) / %s\n",
            r->peak.gflops, r->peak.simd, r->peak.threads, fg_peak_origin_text(&r->peak, origin, sizeof origin),
            fg_trainer_flops_per_token(tr), all);
    }
    if (cfg->opt.warmup >= cfg->steps && cfg->opt.warmup > 0)
        fg_train_say(
            "warning: --warmup %lld is not shorter than the run's %lld steps: the learning rate never reaches --lr %g "
            "(it ends at %.3g)\n",
            (long long)cfg->opt.warmup, (long long)cfg->steps, cfg->opt.lr, fg_lr_at(&cfg->opt, cfg->steps - 1));
    if (r->cfg.save_best_only)
        fg_train_say(
            "checkpoints: only at evaluations that improve the best val loss (always_save_checkpoint = False)\n");
    if (tr->step > 0)
        fg_train_say("resuming from step %lld (%s)\n", (long long)tr->step, r->resumed_from[0] ? r->resumed_from : a->out);
    fg_train_say("output: %s/{model,optimizer}.safetensors, %s\n", a->out, a->log_path);
}

/* What a death by a truncated mapped input (fileio.h) adds to its line: where the run stands. */
void fg_train_set_crash_note(const char *out, int64_t last_ckpt, int other_pending, int64_t other_step) {
    char note[1024];
    if (other_pending && other_step > 0)
        snprintf(note, sizeof note,
                 " before this run's first checkpoint; '%s' still holds the earlier run "
                 "(checkpoint at step %lld), untouched",
                 out, (long long)other_step);
    else if (other_pending)
        snprintf(note, sizeof note, " before this run's first checkpoint; '%s' still holds the earlier run's files",
                 out);
    else if (last_ckpt >= 0)
        snprintf(note, sizeof note, "; the last good checkpoint is in %s (step %lld): continue with --resume", out,
                 (long long)last_ckpt);
    else
        snprintf(note, sizeof note, " before any checkpoint of this run was written");
    fg_mapped_set_note(note);
}

double fg_train_mfu_peak(const train_run *r) { return fg_train_comm->size * r->peak.gflops; }

/* After the last step: time, final losses, a few samples, where the checkpoint is. */
void fg_train_report(const train_args *a, const train_run *r, const train_totals *t) {
    const fg_flag *f = a->f;
    double wall = fg_now() - t->t_start;
    char el[32], rt[32];
    fmt_time(el, sizeof el, wall);
    fmt_rate(rt, sizeof rt, t->step_time > 0 ? t->tokens_done / t->step_time : 0);
    fg_train_say("done: %lld steps in %s (%.1f s), %s tokens/s during training steps\n", (long long)r->cfg.steps, el,
                 wall, rt);
    if (fg_train_comm->size > 1)
        fg_train_say("communication: %.1f ms per step (%.1f%% of the step time), %d processes, %.0f bytes sent and "
                     "received per step by rank 0\n",
                     1e3 * fg_train_comm->seconds / (double)(r->cfg.steps - t->first_step),
                     100 * fg_train_comm->seconds / t->step_time, fg_train_comm->size,
                     (double)t->comm_bytes / (double)(r->cfg.steps - t->first_step));
    if (fg_source_exact_match(r->src)) {
        double opt = fg_source_optimal_loss(r->src);
        fg_train_say(
            "final: train loss %s, val loss %s (optimum %.4f, gap %s%s), held-out exact match %.1f%% of %d problems\n",
            LOSS(t->last_train), LOSS(t->last_val), opt, t->last_val - opt >= 0 ? "+" : "", LOSS(t->last_val - opt),
            100 * t->last_acc, (int)f[F_EVAL_PROBLEMS].i);
        if (f[F_SAMPLES].i > 0) show_addition_samples(r->tr, (int)f[F_SAMPLES].i);
    } else {
        fg_train_say("final: train loss %s, val loss %s\n", LOSS(t->last_train), LOSS(t->last_val));
        if (f[F_SAMPLES].i > 0) show_text_samples(r->tr, (int)f[F_SAMPLES].i, r->cfg.seed);
    }
    if (r->cfg.save_best_only && t->last_ckpt != r->cfg.steps) {
        if (t->last_ckpt >= 0)
            fg_train_say(
                "checkpoint: %s holds step %lld, the best val loss %s (always_save_checkpoint = False)  (flashgrad "
                "sample --ckpt %s)\n",
                a->out, (long long)t->last_ckpt, LOSS(t->best_val), a->out);
        else
            fg_train_say("checkpoint: none written (no evaluation improved on the run's earlier best val loss %s)\n",
                         LOSS(t->best_val));
        return;
    }
    fg_train_say("checkpoint: %s  (flashgrad sample --ckpt %s)\n", a->out, a->out);
}

void fg_train_progress(const train_run *r, const train_totals *t, const fg_step_stats *s, int64_t steps_timed, int last,
                       int do_eval, int64_t log_every, double comm_start, double *last_draw) {
    const fg_trainer *tr = r->tr;
    const fg_train_config *cfg = &r->cfg;
    const int64_t step = tr->step;
    double now = fg_now(), rate = t->step_time > 0 ? t->tokens_done / t->step_time : 0;
    double eta = steps_timed ? (t->step_time / steps_timed) * (double)(cfg->steps - step) : 0;
    char el[32], et[32], rt[32], mf[96] = "";
    fmt_time(el, sizeof el, now - t->t_start);
    fmt_time(et, sizeof et, eta);
    fmt_rate(rt, sizeof rt, rate);
    const double run_mfu = fg_trainer_mfu(tr, rate);
    if (isfinite(run_mfu) && fg_train_comm->size > 1)
        snprintf(mf, sizeof mf, " MFU %.1f%% of %.1f GF/s (%d x %.1f)", 100 * run_mfu, fg_train_mfu_peak(r),
                 fg_train_comm->size, r->peak.gflops);
    else if (isfinite(run_mfu))
        snprintf(mf, sizeof mf, " MFU %.1f%% of %.1f GF/s", 100 * run_mfu, fg_train_mfu_peak(r));
    if (fg_train_on_tty) {
        if (now - *last_draw > 0.1 || last || do_eval) {
            fprintf(stderr, "\r\033[Kstep %lld/%lld | loss %s | lr %.2e | %s tok/s%s | %s elapsed | ETA %s",
                    (long long)step, (long long)cfg->steps, LOSS(s->loss), s->lr, rt, mf, el, et);
            fflush(stderr);
            *last_draw = now;
        }
    } else if ((step % log_every == 0 || last) && !fg_train_stdout_lost) {
        char cm[48] = "";
        if (fg_train_comm->size > 1)
            snprintf(cm, sizeof cm, " comm %.1f ms/step",
                     1e3 * (fg_train_comm->seconds - comm_start) / (double)steps_timed);
        printf("step %lld/%lld loss %s lr %.3e grad_norm %.3f %s tok/s%s elapsed %s ETA %s%s\n", (long long)step,
               (long long)cfg->steps, LOSS(s->loss), s->lr, s->grad_norm, rt, mf, el, et, cm);
        fg_train_check_stdout();
    }
}
