/* cmd_train.c — `flashgrad train`: train a GPT on the addition task, a text file or token files.
 *
 * The run: parse and check every flag (a bad value is one line and exit 2, before anything is
 * written), load the data (a bad file is one line and exit 1), create or resume the trainer
 * (train/trainer.h), then loop over optimizer steps:
 *   - progress: on a terminal (isatty(stderr)) one \r-updated line on stderr: step/total, loss,
 *     tokens/s, elapsed, ETA; otherwise a plain line on stdout every --log-every steps;
 *   - every --eval-every steps and at the end: train and validation loss on fixed batches (and,
 *     for the addition task, exact-match accuracy on held-out problems by greedy decoding);
 *   - checkpoints (train/checkpoint.h) at every evaluation (or every --ckpt-every steps) and at the
 *     end; DIR/log.csv (step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops,val_bpb) rewritten
 *     atomically with each checkpoint, so it always describes the steps the checkpoint has seen
 *     (mfu: the step's model FLOPs utilization as a fraction, fg_trainer_mfu, of the FMA peak in
 *     peak_gflops, cli/peak_cache.h, that of every process under mpirun; both empty off the CPU and in the rows of a log written before
 *     the columns existed, which --resume keeps; val_bpb: bits per byte of the validation batches,
 *     fg_trainer_eval, empty where the tokens do not map to bytes); with nanoGPT's always_save_checkpoint = False
 *     only evaluations that improve the best val loss checkpoint (and write the log), and a stop
 *     signal's checkpoint goes to DIR/FG_RUN_RESUME_DIR, beside the best one;
 *   - at the end, a few samples from the model.
 * Exit: 0 done; 1 runtime error (bad data, unwritable or busy folder, non-finite loss — the last
 * good checkpoint is kept); 2 usage error (also: a fresh run into a folder that holds another
 * run); 128 + the signal after SIGINT, SIGTERM or SIGHUP: the step in flight finishes, a
 * checkpoint is written, and `--resume` continues from it (the same signal again aborts at once).
 *
 * The run folder (--out) and what this command promises about it (one writer at a time, a fresh
 * run never replaces another run's files unless --overwrite, log.csv always belongs to the
 * checkpoint beside it, only this command's own temporaries are removed): train/run_folder.h.
 * The pieces of the command: cli/train_cmd.h.
 * Standard output may go away (`train | head`): SIGPIPE is ignored, printing stops, training and
 * checkpointing go on.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/stop_signal.h"
#include "cli/train_cmd.h"
#include "tensor/fileio.h"

/* A step, an evaluation or the log failed (fg_last_error() says how): stop with exit 1, saying
 * what the folder holds now. The log of the steps run is kept unless another run's checkpoint
 * still shares the folder (an --overwrite run that had not reached its first checkpoint): that
 * run's log stays as it was, with its checkpoint. */
static void stop_failed(const fg_run_log *rows, const char *log_path, const char *out, int64_t last_ckpt,
                        int other_pending, int64_t other_step) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fg_last_error());
    if (fg_train_comm->rank > 0) fg_train_die(1, "%s", msg); /* rank 0 keeps the folder */
    if (other_pending && other_step > 0)
        fg_train_die(
            1,
            "%s; stopped before this run's first checkpoint. '%s' still holds the earlier run (checkpoint at step "
            "%lld), untouched.",
            msg, out, (long long)other_step);
    if (other_pending)
        fg_train_die(
            1, "%s; stopped before this run's first checkpoint. '%s' still holds the earlier run's files, untouched.",
            msg, out);
    /* a log is written only when it has rows: a header alone would record nothing and make the
     * folder look like an earlier run's to the next fresh one */
    int logged = rows->n > 0 && fg_run_log_write(rows, log_path) == FG_OK;
    if (last_ckpt >= 0)
        fg_train_die(1, "%s; stopped. The last good checkpoint is in %s (step %lld)%s.", msg, out, (long long)last_ckpt,
                     logged ? "; log.csv has every step run" : "");
    if (logged)
        fg_train_die(1, "%s; stopped before any checkpoint was written (log.csv has the %lld step%s run).", msg,
                     (long long)rows->n, rows->n == 1 ? "" : "s");
    fg_train_die(1, "%s; stopped before any step completed: no log or checkpoint was written to %s.", msg, out);
}

/* A checkpoint from rank 0 (with --zero the moments are gathered first: every rank calls this). */
static fg_status save_checkpoint(const char *out, fg_trainer *tr) {
    fg_status st = fg_trainer_unshard(tr, 1);
    if (st == FG_OK && fg_train_comm->rank == 0) st = fg_ckpt_save(out, tr);
    fg_trainer_reshard(tr, 0);
    return st;
}

/* The evaluation of a step (train and val loss, and the addition task's accuracy), printed; val
 * gets the log's val_loss. With always_save_checkpoint = False only an improvement checkpoints. */
static void evaluate(const train_args *a, train_run *r, train_totals *t, int64_t step, int64_t last_ckpt, int *do_ckpt,
                     char *val, size_t val_n, char *bpb, size_t bpb_n) {
    fg_trainer *tr = r->tr;
    const int eval_problems = (int)a->f[F_EVAL_PROBLEMS].i, best_only = r->cfg.save_best_only;
    double tl = NAN, vl = NAN, vb = NAN;
    if (fg_trainer_eval_loss(tr, FG_SPLIT_TRAIN, &tl) != FG_OK || fg_trainer_eval(tr, FG_SPLIT_VAL, &vl, &vb) != FG_OK) {
        fg_error(fg_last_status(), "evaluation at step %lld: %s", (long long)step, fg_last_error());
        stop_failed(&r->log, a->log_path, a->out, last_ckpt, r->other_pending, r->other_step);
    }
    t->last_train = tl;
    t->last_val = vl;
    /* nanoGPT: if losses['val'] < best_val_loss or always_save_checkpoint: save */
    const int improved = vl < t->best_val;
    if (improved || !best_only) t->best_val = vl;
    if (best_only) *do_ckpt = improved;
    snprintf(val, val_n, "%.6f", vl);
    char bpb_say[48] = "";
    if (isfinite(vb)) {
        snprintf(bpb, bpb_n, "%.6f", vb);
        snprintf(bpb_say, sizeof bpb_say, ", val bpb %.4f", vb);
    }
    if (fg_source_exact_match(r->src)) {
        if (fg_trainer_accuracy(tr, FG_SPLIT_VAL, eval_problems, &t->last_acc) != FG_OK) {
            fg_error(fg_last_status(), "accuracy at step %lld: %s", (long long)step, fg_last_error());
            stop_failed(&r->log, a->log_path, a->out, last_ckpt, r->other_pending, r->other_step);
        }
        fg_train_say(
            "step %lld: train loss %s, val loss %s (optimum %.4f), held-out exact match %.1f%% (%d problems)\n",
            (long long)step, LOSS(tl), LOSS(vl), fg_source_optimal_loss(r->src), 100 * t->last_acc, eval_problems);
    } else {
        fg_train_say("step %lld: train loss %s, val loss %s%s\n", (long long)step, LOSS(tl), LOSS(vl), bpb_say);
    }
}

/* The checkpoint of step: the earlier run that --overwrite replaces goes first; then the log: a
 * checkpoint at step s must never be on disk without the log's rows up to s (a resume keeps the
 * rows up to its checkpoint's step and drops later ones). With `interrupted` it goes to its own
 * folder (FG_RUN_RESUME_DIR: the state a stop signal interrupted, while the save policy keeps the
 * best val loss's checkpoint in --out); a checkpoint in --out removes that folder, being newer. A
 * failure stops, saying what the folder holds. */
static void checkpoint(const train_args *a, train_run *r, int64_t step, int64_t last_ckpt, int interrupted) {
    const char *out = a->out;
    const int rank0 = fg_train_comm->rank == 0, aside = r->other_pending && rank0;
    char dir[4200];
    snprintf(dir, sizeof dir, interrupted ? "%s/" FG_RUN_RESUME_DIR : "%s", out);
    if (aside && fg_run_folder_set_aside(&r->folder) != FG_OK) fg_train_die(1, "%s", fg_last_error());
    fg_status cs = rank0 ? fg_run_log_write(&r->log, a->log_path) : FG_OK;
    const int logged = cs == FG_OK && rank0;
    if (cs == FG_OK && interrupted && rank0 && mkdir(dir, 0777) != 0 && errno != EEXIST)
        cs = fg_error(FG_ERR_IO, "cannot create '%s': %s", dir, strerror(errno));
    if (cs == FG_OK) cs = save_checkpoint(dir, r->tr);
    if (cs != FG_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "checkpoint at step %lld: %s", (long long)step, fg_last_error());
        if (aside && fg_run_folder_restore_aside(&r->folder) == FG_OK)
            fg_train_die(1, "%s; stopped. '%s' holds the earlier run again, untouched%s", msg, out,
                         r->other_step > 0 ? "" : " (its log)");
        if (aside)
            fg_train_die(1,
                         "%s; stopped. The earlier run's files are in '%s/" FG_RUN_ASIDE_DONE
                         "' (the next `flashgrad train --out %s` puts them back)",
                         msg, out, out);
        if (last_ckpt >= 0)
            fg_train_die(1, "%s; stopped. The last good checkpoint is in %s (step %lld).", msg, out,
                         (long long)last_ckpt);
        if (logged)
            fg_train_die(1, "%s; stopped before any checkpoint was written (log.csv has the %lld step%s run).", msg,
                         (long long)r->log.n, r->log.n == 1 ? "" : "s");
        fg_train_die(1, "%s; stopped before any checkpoint was written.", msg);
    }
    if (aside) fg_run_folder_discard_aside(&r->folder);
    if (rank0 && !interrupted) fg_run_folder_remove_resume(&r->folder);
    r->other_pending = 0;
    fg_train_set_crash_note(out, step, 0, 0);
}

/* The optimizer steps, with evaluations, log rows, progress and checkpoints, until --steps or a
 * stop signal. Returns 0 when every step ran, 128 + the signal after one (its checkpoint written);
 * a failure stops the program (stop_failed). */
static int train_loop(const train_args *a, train_run *r, train_totals *t) {
    const fg_flag *f = a->f;
    const char *out = a->out;
    fg_trainer *tr = r->tr;
    const fg_train_config *cfg = &r->cfg;
    const int ckpt_every = (int)f[F_CKPT_EVERY].i;
    int64_t log_every = f[F_LOG_EVERY].i;
    if (log_every == 0) log_every = cfg->steps / 40 > 0 ? cfg->steps / 40 : 1;

    fg_stop_signals_install();

    *t = (train_totals){.t_start = fg_now(),
                        .last_train = NAN,
                        .last_val = NAN,
                        .last_acc = NAN,
                        .first_step = tr->step,
                        .best_val = fg_run_log_best_val(&r->log)};
    const int best_only = r->cfg.save_best_only;
    const int cpu = tr->cfg.model.device == FG_CPU;
    double last_draw = 0;
    int64_t steps_timed = 0, last_ckpt = tr->step > 0 ? tr->step : -1;
    const double comm_start = fg_train_comm->seconds;
    int code = 0;
    fg_train_set_crash_note(out, last_ckpt, r->other_pending, r->other_step);
    while (tr->step < cfg->steps) {
        fg_step_stats s;
        double t0 = fg_now();
        fg_status st = fg_trainer_step(tr, &s);
        double dt = fg_now() - t0;
        if (st != FG_OK) stop_failed(&r->log, a->log_path, out, last_ckpt, r->other_pending, r->other_step);
        t->step_time += dt;
        t->tokens_done += s.tokens;
        t->comm_bytes += s.comm_bytes;
        steps_timed++;
        const int64_t step = tr->step; /* 1-based: steps done */
        const int last = step == cfg->steps;
        const int do_eval = last || (cfg->eval_every > 0 && step % cfg->eval_every == 0);
        /* read once: a signal that lands later in this iteration is served after the next step */
        const int stop = fg_comm_max_int(fg_train_comm, fg_stop_requested()); /* every rank stops at the same step */
        int do_ckpt = last || stop || (ckpt_every > 0 ? step % ckpt_every == 0 : do_eval);

        char row[300], val[48] = "", bpb[48] = "";
        if (do_eval) evaluate(a, r, t, step, last_ckpt, &do_ckpt, val, sizeof val, bpb, sizeof bpb);
        const double step_rate = dt > 0 ? s.tokens / dt : 0.0, step_mfu = fg_trainer_mfu(tr, step_rate);
        char mfu[32] = "";
        char peak[32] = "";
        /* 4 significant digits: a tiny model's MFU is tiny */
        if (isfinite(step_mfu)) snprintf(mfu, sizeof mfu, "%.4g", step_mfu);
        if (cpu) snprintf(peak, sizeof peak, "%.1f", fg_train_mfu_peak(r));
        if (best_only && !do_eval) do_ckpt = 0;
        /* lr with 17 significant digits: it reads back as the very double the optimizer used */
        snprintf(row, sizeof row, "%lld,%.6f,%.17g,%.6f,%.1f,%s,%s,%s,%s", (long long)step, s.loss, s.lr, s.grad_norm,
                 step_rate, val, mfu, peak, bpb);
        if (fg_run_log_add(&r->log, row)) {
            fg_error(FG_ERR_OOM, "out of memory for the log");
            stop_failed(&r->log, a->log_path, out, last_ckpt, r->other_pending, r->other_step);
        }
        fg_train_progress(r, t, &s, steps_timed, last, do_eval, log_every, comm_start, &last_draw);

        if (do_ckpt) {
            checkpoint(a, r, step, last_ckpt, 0);
            last_ckpt = step;
        }
        t->last_ckpt = last_ckpt;
        if (stop && last_ckpt != step) {
            /* the save policy (always_save_checkpoint = False) keeps the best val loss's checkpoint in
             * --out; the work a stop signal interrupts is kept all the same, in a folder of its own */
            checkpoint(a, r, step, last_ckpt, 1);
            char best[4200];
            snprintf(best, sizeof best, "%s/" FG_CKPT_MODEL_FILE, out);
            fg_train_say("interrupted by %s at step %lld: its state is in %s/" FG_RUN_RESUME_DIR
                         "; continue with --resume (%s%s)\n",
                         fg_stop_signal_name(stop), (long long)step, out, out,
                         access(best, F_OK) == 0 ? " keeps the checkpoint of the best val loss"
                                                 : ": no evaluation has made a best checkpoint yet");
            code = 128 + stop;
            break;
        }
        if (stop) {
            fg_train_say("interrupted by %s at step %lld: checkpoint written to %s; continue with --resume\n",
                         fg_stop_signal_name(stop), (long long)step, out);
            code = 128 + stop;
            break;
        }
    }
    if (fg_train_on_tty) fputs("\r\033[K", stderr);
    return code;
}

int fg_cmd_train(int argc, char **argv) {
    fg_train_on_tty = isatty(STDERR_FILENO);
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is a write error (EPIPE), not the end of training */
    if (fg_comm_world(&fg_train_comm) != FG_OK) fg_train_die(1, "%s", fg_last_error());
    const int quiet = fg_train_comm->rank > 0; /* rank 0 alone prints */
    if (quiet) {
        fg_train_on_tty = 0;
        fg_train_stdout_lost = 1;
    }
    train_args a;
    int rc = fg_train_parse(argc, argv, &a);
    if (rc >= 0) {
        fg_comm_finish(fg_train_comm);
        return rc;
    }
    if (a.f[F_EVAL_ONLY].given) {
        rc = fg_train_eval_only(&a);
        fg_comm_finish(fg_train_comm);
        return rc;
    }
    train_run r;
    fg_train_configure(&a, &r);
    /* the peak MFU divides by: the user's, or this machine's, measured once and cached */
    if (r.cfg.model.device == FG_CPU) fg_peak_get(a.peak, a.peak_remeasure, &r.peak);
    fg_train_agree(&a, &r);
    fg_train_print_header(&a, &r);
    train_totals t;
    int code = train_loop(&a, &r, &t);
    if (code == 0 && !quiet) fg_train_report(&a, &r, &t);
    fg_comm_finish(fg_train_comm);
    fg_run_log_free(&r.log);
    fg_run_folder_close(&r.folder);
    fg_trainer_free(r.tr);
    fg_source_free(r.src);
    if (fg_train_stdout_lost && !quiet) {
        /* Only the progress lines were lost (log.csv and the checkpoint are written): say so once,
         * and give stdio a sink so the program's final check of stdout does not fail the run. */
        fprintf(stderr,
                "flashgrad train: standard output could not be written (closed or full); training went on, "
                "the log is in %s\n",
                a.log_path);
        if (!freopen("/dev/null", "w", stdout)) { /* nothing more to lose */
        }
    }
    return code;
}
