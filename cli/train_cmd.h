/* train_cmd.h — the pieces of `flashgrad train` (private to cli/): its flags, the run's state, and
 * the printing every piece shares.
 *
 *   cli/cmd_train.c    the command: flags -> configure -> loop -> report
 *   cli/train_args.c   the flag table, --help, parsing and checking the flags, --init-from
 *   cli/train_setup.c  the run's configuration (fresh or resumed), its folder and trainer, the
 *                      agreement across ranks, --eval-only
 *   cli/train_print.c  what the run prints: the header, progress helpers, samples, the report
 *   cli/stop_signal.h  SIGINT, SIGTERM, SIGHUP
 *   train/run_folder.h the run folder: lock, log.csv, temporaries, --overwrite's set-aside
 */
#ifndef FG_TRAIN_CMD_H
#define FG_TRAIN_CMD_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/flags.h"
#include "cli/nanogpt.h"
#include "cli/peak_cache.h"
#include "cli/train_flags.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/model_files.h"
#include "train/run_folder.h"
#include "train/trainer.h"

/* ---- flags ---- */
/* train's own flags; they follow the flags it shares with `bench train` (cli/train_flags.h), whose
 * indices are FG_TF_<ID>. X(id, name, type, meta, help, lo, hi, lo_open) — defaults are set in
 * set_defaults(). */
#define TRAIN_FLAGS(X)                                                                                                 \
    X(TASK, "--task", FG_FLAG_STR, "NAME", "synthetic task: addition (default when --data is absent)", 0, 0, 0)        \
    X(ANSWER_ONLY, "--answer-only", FG_FLAG_INT, "0|1",                                                                \
      "addition: 1 = loss on the answer tokens only (optimum 0), 0 = on every token", 0, 1, 0)                         \
    X(STEPS, "--steps", FG_FLAG_INT, "N", "optimizer steps", 0, 1e12, 1)                                               \
    X(OUT, "--out", FG_FLAG_STR, "DIR", "output folder: checkpoint, log.csv (created if missing)", 0, 0, 0)            \
    X(RESUME, "--resume", FG_FLAG_BOOL, NULL, "continue the run saved in --out", 0, 0, 0)                              \
    X(OVERWRITE, "--overwrite", FG_FLAG_BOOL, NULL,                                                                    \
      "start afresh in an --out that holds another run, replacing it at this run's first checkpoint", 0, 0, 0)         \
    X(EVAL_EVERY, "--eval-every", FG_FLAG_INT, "N", "evaluate and checkpoint every N steps (0: at the end)", 0, 1e12,  \
      0)                                                                                                               \
    X(EVAL_ITERS, "--eval-iters", FG_FLAG_INT, "N", "batches per evaluation", 1, 1e6, 0)                               \
    X(EVAL_PROBLEMS, "--eval-problems", FG_FLAG_INT, "N", "addition: held-out problems for the accuracy", 1, 1e7, 0)   \
    X(CKPT_EVERY, "--ckpt-every", FG_FLAG_INT, "N", "checkpoint every N steps (default: at each evaluation)", 0, 1e12, \
      0)                                                                                                               \
    X(LOG_EVERY, "--log-every", FG_FLAG_INT, "N", "plain log line every N steps when not on a terminal (0: auto)", 0,  \
      1e12, 0)                                                                                                         \
    X(SAMPLES, "--samples", FG_FLAG_INT, "N", "samples shown at the end", 0, 100, 0)                                   \
    X(INIT_FROM, "--init-from", FG_FLAG_STR, "PATH",                                                                   \
      "start from a model's weights (fresh optimizer and schedule): a flashgrad run, a Hugging Face folder (GPT-2, Llama, NanoChat) or "  \
      "an llm.c .bin; the architecture is the file's (--init_from too)",                                               \
      0, 0, 0)                                                                                                         \
    X(ZERO, "--zero", FG_FLAG_INT, "0|1",                                                                              \
      "under mpirun: 1 = each process keeps AdamW's moments for its shard (ZeRO-1)", 0, 1, 0)                          \
    X(EVAL_ONLY, "--eval-only", FG_FLAG_BOOL, NULL,                                                                    \
      "print train and val loss and stop, writing nothing (with --resume: of the checkpoint in --out)", 0, 0, 0)       \
    X(PEAK, "--peak", FG_FLAG_STR, "GFLOPS",                                                                           \
      "the FMA peak MFU divides by, or 'measure' to measure it again (default: measured once per machine, cached)", 0, \
      0, 0)

enum {
    F_OWN = FG_TF_COUNT - 1, /* the next index, FG_TF_COUNT, is train's first own flag */
#define TF_ENUM(id, name, type, meta, help, lo, hi, lo_open) F_##id,
    TRAIN_FLAGS(TF_ENUM) FG_NANOGPT_FLAGS(TF_ENUM)
#undef TF_ENUM
        F_COUNT
};

/* What the command line asks for, checked. */
typedef struct {
    fg_flag f[F_COUNT];
    int is_text;         /* --data: a text file; otherwise the addition task */
    int is_bin;          /* --data-bin: token files (is_text is 0) */
    fg_train_choice run; /* device (started), attention, recompute */
    const char *out;     /* the run folder */
    char model_path[4096], log_path[4096];
    fg_nanogpt ng;      /* nanoGPT's config files and names (ng.best_only: checkpoint the best val loss only) */
    double peak;        /* --peak GFLOPS (0: the cached figure) */
    int peak_remeasure; /* --peak measure */
} train_args;

/* The run: configuration, data, trainer, its log, and the folder's state. */
typedef struct {
    fg_train_config cfg;
    fg_source *src;       /* owned */
    fg_trainer *tr;       /* owned */
    fg_ckpt *ck;          /* --resume: the checkpoint, open until the trainer is restored from it */
    char resumed_from[4200]; /* --resume: the folder of that checkpoint (--out, or its interrupted state's) */
    fg_run_log log;       /* the rows of log.csv */
    fg_run_folder folder; /* --out (locked by rank 0) */
    int64_t other_step;   /* a fresh --overwrite run: the step of the run it will replace */
    int other_pending;    /* ... and that run's files are still in place */
    fg_peak_info peak;    /* what MFU divides by (CPU runs) */
} train_run;

/* What the loop measured, for the final report. */
typedef struct {
    double t_start, step_time; /* wall clock at the first step; seconds inside training steps */
    int64_t tokens_done;
    uint64_t comm_bytes;                   /* moved by this rank's collectives inside training steps */
    double last_train, last_val, last_acc; /* the last evaluation */
    int64_t first_step;                    /* the step the run started from */
    int64_t last_ckpt;                     /* the step of the last checkpoint written (-1: none) */
    double best_val;                       /* the best val loss evaluated (always_save_checkpoint = False) */
} train_totals;

/* ---- shared state (cli/train_print.c) ---- */
extern fg_comm *fg_train_comm;             /* the run's processes (train/dist.h): one, unless started by mpirun */
extern int fg_train_on_tty;                /* stderr is a terminal: a \r-updated progress line */
extern int fg_train_stdout_lost;           /* stdout failed (or rank > 0): nothing more is printed there */
extern fg_model_file *fg_train_init_model; /* --init-from: the model, until its weights are in the trainer */

/* Stops the program: "flashgrad train: <message>" on stderr (rank 0 alone says what every rank
 * hit), then exit(code) (every rank's, under mpirun). */
void fg_train_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* A full line on stdout, clearing the progress line first. */
void fg_train_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* After a write error on stdout nothing more is printed there; training goes on. */
void fg_train_check_stdout(void);

static inline void fmt_time(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* A loss: 4 decimals, or 3 significant digits once it is below 0.001 (answer-only runs reach 1e-5). */
static inline const char *fmt_loss(char *buf, size_t n, double x) {
    if (x != 0 && fabs(x) < 1e-3)
        snprintf(buf, n, "%.2e", x);
    else
        snprintf(buf, n, "%.4f", x);
    return buf;
}
#define LOSS(x) fmt_loss((char[24]){0}, 24, (x))

static inline void fmt_rate(char *buf, size_t n, double r) {
    if (r >= 1e6)
        snprintf(buf, n, "%.2fM", r / 1e6);
    else if (r >= 1e3)
        snprintf(buf, n, "%.1fk", r / 1e3);
    else
        snprintf(buf, n, "%.0f", r);
}

/* ---- the pieces ---- */
/* cli/train_args.c: parses and checks every flag (a bad value is one line and exit 2, before
 * anything is written). Returns -1 when the run goes on, else the exit status (0 after --help). */
int fg_train_parse(int argc, char **argv, train_args *a);
/* cli/train_setup.c: the run's configuration (fresh or resumed), then its folder, then the trainer
 * (restored from the checkpoint on resume). Stops with one line on any failure. */
void fg_train_configure(const train_args *a, train_run *r);
/* A fresh run's data and configuration from the flags (also --eval-only's). */
void fg_train_configure_fresh(const train_args *a, train_run *r);
/* Every rank describes its run; a field that differs from rank 0's stops every rank with one line. */
void fg_train_agree(const train_args *a, const train_run *r);
/* --eval-only: prints the train and val loss and returns the exit status; writes nothing. */
int fg_train_eval_only(const train_args *a);
/* cli/train_print.c */
void fg_train_print_header(const train_args *a, const train_run *r);
void fg_train_report(const train_args *a, const train_run *r, const train_totals *t);
/* The peak in GFLOP/s that MFU divides by (fg_trainer_mfu): every process's cores, each measured
 * as this one's, so the process count x this process's FMA peak (r->peak). What the MFU lines and
 * log.csv's peak_gflops name. */
double fg_train_mfu_peak(const train_run *r);
/* The progress after a step: on a terminal the \r-updated line on stderr (at most every 0.1 s, and
 * at evaluations and the last step), otherwise a plain line on stdout every log_every steps. */
void fg_train_progress(const train_run *r, const train_totals *t, const fg_step_stats *s, int64_t steps_timed, int last,
                       int do_eval, int64_t log_every, double comm_start, double *last_draw);
/* What a death by a truncated mapped input (fileio.h) adds to its line: where the run stands. */
void fg_train_set_crash_note(const char *out, int64_t last_ckpt, int other_pending, int64_t other_step);

#endif /* FG_TRAIN_CMD_H */
