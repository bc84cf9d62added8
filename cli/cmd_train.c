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
 *     end; DIR/log.csv (step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops) rewritten
 *     atomically with each checkpoint, so it always describes the steps the checkpoint has seen
 *     (mfu: the step's model FLOPs utilization as a fraction, fg_trainer_mfu, of the FMA peak in
 *     peak_gflops, cli/peak_cache.h; both empty off the CPU and in the rows of a log written before
 *     the columns existed, which --resume keeps); with nanoGPT's always_save_checkpoint = False
 *     only evaluations that improve the best val loss checkpoint (and write the log);
 *   - at the end, a few samples from the model.
 * Exit: 0 done; 1 runtime error (bad data, unwritable or busy folder, non-finite loss — the last
 * good checkpoint is kept); 2 usage error (also: a fresh run into a folder that holds another
 * run); 128 + the signal after SIGINT, SIGTERM or SIGHUP: the step in flight finishes, a
 * checkpoint is written, and `--resume` continues from it (the same signal again aborts at once).
 *
 * The run folder (--out) and what this command promises about it:
 *   - one writer at a time: DIR/train.lock is flock'ed for the whole run (the kernel releases it
 *     when the process dies, however it dies); a second `train` on DIR refuses at start. Readers
 *     (`sample`) take no lock: every file is replaced atomically, so they always see whole files;
 *   - a fresh run never replaces another run's files unless --overwrite is given, and even then the
 *     earlier checkpoint and log stay as they were until this run writes its own first checkpoint;
 *   - log.csv always belongs to the checkpoint beside it: it is written just before each checkpoint
 *     and, when a run fails, only if no other run's checkpoint shares the folder;
 *   - the only files removed are this command's own leftovers: temporaries named
 *     "<file>" FG_TMP_MARK "XXXXXX" of the run files, left by a writer that was killed.
 * Standard output may go away (`train | head`): SIGPIPE is ignored, printing stops, training and
 * checkpointing go on.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "ops/cpu/peak.h"
#include "ops/cpu/threadpool.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/eval.h"
#include "cli/flags.h"
#include "cli/nanogpt.h"
#include "cli/peak_cache.h"
#include "cli/train_defaults.h"
#include "cli/train_flags.h"
#include "datasets/meta_pkl.h"
#include "train/gpt2_files.h"

/* --init-from: the model the run starts from, until its weights are in the trainer (a global, so
 * that it stays reachable when a check stops the program) */
static fg_model_file *init_model;

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
    X(SAMPLES, "--samples", FG_FLAG_INT, "N", "samples shown at the end", 0, 100, 0)                                     \
    X(INIT_FROM, "--init-from", FG_FLAG_STR, "PATH",                                                                   \
      "start from a model's weights (fresh optimizer and schedule): a flashgrad run, a Hugging Face GPT-2 folder or "  \
      "an llm.c .bin; the architecture is the file's (--init_from too)",                                              \
      0, 0, 0)                                                                                                         \
    X(ZERO, "--zero", FG_FLAG_INT, "0|1", "under mpirun: 1 = each process keeps AdamW's moments for its shard (ZeRO-1)", \
      0, 1, 0)                                                                                                         \
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

static void init_flags(fg_flag *f) {
    static const fg_flag own[F_COUNT - FG_TF_COUNT] = {
#define TF_INIT(id, nm, ty, me, he, l, h, lop)                                                                         \
    {.name = nm, .type = ty, .meta = me, .help = he, .lo = l, .hi = h, .lo_open = lop},
        TRAIN_FLAGS(TF_INIT) FG_NANOGPT_FLAGS(TF_INIT)
#undef TF_INIT
    };
    fg_train_flags_init(f);
    memcpy(f + FG_TF_COUNT, own, sizeof own);
    fg_nanogpt_aliases(f, F_COUNT);
}

/* Defaults: a task's own (train_defaults.h), shown in --help as "text / addition". */
static void set_defaults(fg_flag *f, const fg_train_defaults *d) {
    fg_train_flags_defaults(f, d);
    f[F_TASK].s = "addition";
    f[F_OUT].s = "out";
    f[F_ANSWER_ONLY].i = d->answer_only;
    f[F_STEPS].i = d->steps;
    f[F_EVAL_EVERY].i = d->eval_every;
    f[F_EVAL_ITERS].i = d->eval_iters;
    f[F_EVAL_PROBLEMS].i = d->eval_problems;
    f[F_CKPT_EVERY].i = 0;
    f[F_LOG_EVERY].i = 0;
    f[F_SAMPLES].i = d->samples;
    f[F_ZERO].i = 0;
    fg_nanogpt_flag_defaults(f, F_COUNT);
}

static void help(void) {
    fg_flag a[F_COUNT], t[F_COUNT];
    init_flags(a);
    set_defaults(a, &fg_defaults_addition);
    init_flags(t);
    set_defaults(t, &fg_defaults_text);
    printf("Train a GPT-2 style model on the addition task (the default), a text file (--data) or pre-tokenized\n"
           "token files (--data-bin with --vocab-size). Where a default differs for text and token files it is\n"
           "shown after 'text'.\n\n");
    fg_flags_help_alt(stdout, "train",
                      "[CONFIG.py] [--data FILE | --data-bin PATH --vocab-size V | --task addition] [--steps N] "
                      "[--out DIR] [--resume] [options]",
                      a, t, "text", F_COUNT);
    printf(
        "\nWeight decay applies to the 2-d weights (matmuls and embeddings), not to biases or LayerNorm.\n"
        "The character-level tokenizer works on bytes: its vocabulary is the distinct bytes of the file, so a\n"
        "non-ASCII UTF-8 character is several tokens, and samples of such text may hold invalid UTF-8.\n"
        "--data-bin reads nanoGPT's train.bin/val.bin (raw little-endian uint16 ids, from its prepare.py) and\n"
        "llm.c's .bin files (a 1024-byte header, magic 20240520), memory-mapped; a single file without a *val*\n"
        "sibling keeps its last tenth for validation. Such a model has no tokenizer: `flashgrad sample` prints\n"
        "its token ids, or decodes them with --tokenizer (llm.c's gpt2_tokenizer.bin).\n"
        "One train at a time writes a folder (DIR/train.lock); a fresh run refuses a folder that holds another\n"
        "run's checkpoint or log unless --overwrite is given.\n"
        "Exit status: 0 done, 1 runtime error, 2 usage error; after SIGINT, SIGTERM or SIGHUP the step in flight\n"
        "finishes, a checkpoint is written and the exit status is 128 + the signal (130, 143, 129): use --resume.\n"
        "Data parallel: `mpirun -np P flashgrad train ...` runs P processes of --grad-accum micro-batches each (P x\n"
        "--grad-accum per step, the sequences of one process with --grad-accum P x N, summed in a fixed order: with\n"
        "--grad-accum 1 the run is bit for bit that one process's); process 0 alone prints, logs and checkpoints.\n"
        "(As root in a container, Open MPI needs `mpirun --allow-run-as-root -np P ...`.)\n"
        "MFU divides by the float32 FMA peak of this CPU model, SIMD level and thread count, measured once and\n"
        "cached in $XDG_CACHE_HOME/flashgrad/peak.tsv (~/.cache/flashgrad/peak.tsv); --peak overrides it, and\n"
        "log.csv's peak_gflops column says which figure each row used.\n");
    fg_nanogpt_help(stdout);
}

/* ---- SIGINT, SIGTERM, SIGHUP: finish the step, checkpoint, exit 128 + signal ---- */
static volatile sig_atomic_t stop_requested; /* the signal's number, 0 while none came */

static void on_stop_signal(int sig) {
    stop_requested = sig;
    static const char msg[] = "\nflashgrad train: stopping after this step (the same signal again aborts now)\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    signal(sig, SIG_DFL);
}

static const char *signal_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

/* ---- the CSV log: rows kept in memory, the file rewritten atomically ---- */
typedef struct {
    char **rows;
    int64_t n, cap;
} csv_log;

static int csv_add(csv_log *l, const char *row) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 1024;
        char **r = realloc(l->rows, (size_t)cap * sizeof *r);
        if (!r) return -1;
        l->rows = r;
        l->cap = cap;
    }
    l->rows[l->n] = strdup(row);
    return l->rows[l->n++] ? 0 : -1;
}

static void csv_free(csv_log *l) {
    for (int64_t i = 0; i < l->n; i++) free(l->rows[i]);
    free(l->rows);
}

#define CSV_HEADER "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu,peak_gflops"
/* The headers of logs written before the peak_gflops column and before the mfu column: their rows
 * are kept with those columns empty. */
#define CSV_HEADER_NO_PEAK "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu"
#define CSV_HEADER_NO_MFU "step,loss,lr,grad_norm,tokens_per_s,val_loss"

/* The whole log, header and rows, replaced atomically (fileio.h). FG_OK or an error. */
static fg_status csv_write(const csv_log *l, const char *path) {
    size_t n = sizeof CSV_HEADER + 1; /* the header, its newline and the final NUL sprintf writes */
    for (int64_t i = 0; i < l->n; i++) n += strlen(l->rows[i]) + 1;
    char *buf = malloc(n), *p = buf;
    if (!buf) return fg_error(FG_ERR_OOM, "out of memory for the log (%zu bytes)", n);
    p += sprintf(p, "%s\n", CSV_HEADER);
    for (int64_t i = 0; i < l->n; i++) p += sprintf(p, "%s\n", l->rows[i]);
    const void *parts[1] = {buf};
    size_t sizes[1] = {(size_t)(p - buf)};
    fg_status st = fg_write_file_atomic(path, parts, sizes, 1);
    free(buf);
    return st;
}

/* The files a run keeps in its folder. */
static const char *const run_files[] = {FG_CKPT_MODEL_FILE, FG_CKPT_OPTIM_FILE, FG_CKPT_OPTIM_PREV_FILE, "log.csv"};
#define N_RUN_FILES (sizeof run_files / sizeof run_files[0])

/* Is `name` a temporary that fg_write_file_atomic made for one of the run files: exactly
 * "<run file>" FG_TMP_MARK followed by mkstemp's six letters or digits? */
static int is_our_temporary(const char *name) {
    for (size_t i = 0; i < N_RUN_FILES; i++) {
        size_t a = strlen(run_files[i]), b = strlen(FG_TMP_MARK);
        if (strncmp(name, run_files[i], a) || strncmp(name + a, FG_TMP_MARK, b)) continue;
        const char *x = name + a + b;
        int k = 0;
        while (k < 6 && ((x[k] >= 'a' && x[k] <= 'z') || (x[k] >= 'A' && x[k] <= 'Z') || (x[k] >= '0' && x[k] <= '9')))
            k++;
        if (k == 6 && x[6] == '\0') return 1;
    }
    return 0;
}

/* A writer killed mid-write (SIGKILL, power loss) leaves its temporary beside the target; the
 * targets themselves are always whole. Called with the folder's lock held, so no live writer owns
 * such a file: remove them (regular files only, named exactly as above). */
static void remove_stale_temporaries(const char *out) {
    DIR *d = opendir(out);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_our_temporary(e->d_name)) continue;
        char path[4096];
        struct stat sb;
        if (snprintf(path, sizeof path, "%s/%s", out, e->d_name) < (int)sizeof path && lstat(path, &sb) == 0 &&
            S_ISREG(sb.st_mode))
            unlink(path);
    }
    closedir(d);
}

/* On resume: keep the rows of steps <= step from an existing log. */
static void csv_load(csv_log *l, const char *path, int64_t step) {
    void *buf = NULL;
    size_t n = 0;
    if (fg_read_file(path, (size_t)1 << 30, &buf, &n) != FG_OK) {
        fg_clear_error();
        return;
    }
    char *s = buf, *save = NULL;
    int first = 1, missing = 0; /* columns the old log lacks */
    for (char *line = strtok_r(s, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (first) {
            first = 0;
            missing = !strcmp(line, CSV_HEADER_NO_MFU) ? 2 : !strcmp(line, CSV_HEADER_NO_PEAK) ? 1 : 0;
            if (strcmp(line, CSV_HEADER) && !missing) break; /* not our log: start over */
            continue;
        }
        char *end;
        long long st = strtoll(line, &end, 10);
        if (end == line || *end != ',' || st < 1 || st > step) continue;
        char row[512];
        if (missing && snprintf(row, sizeof row, "%s%s", line, missing == 2 ? ",," : ",") >= (int)sizeof row) continue;
        if (csv_add(l, missing ? row : line)) break;
    }
    free(buf);
}

/* ---- printing ---- */
static int on_tty;

static void fmt_time(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* A loss: 4 decimals, or 3 significant digits once it is below 0.001 (answer-only runs reach 1e-5). */
static const char *fmt_loss(char *buf, size_t n, double x) {
    if (x != 0 && fabs(x) < 1e-3)
        snprintf(buf, n, "%.2e", x);
    else
        snprintf(buf, n, "%.4f", x);
    return buf;
}
#define LOSS(x) fmt_loss((char[24]){0}, 24, (x))

static void fmt_rate(char *buf, size_t n, double r) {
    if (r >= 1e6)
        snprintf(buf, n, "%.2fM", r / 1e6);
    else if (r >= 1e3)
        snprintf(buf, n, "%.1fk", r / 1e3);
    else
        snprintf(buf, n, "%.0f", r);
}

/* A full line on stdout, clearing the progress line first. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int stdout_lost;
static void check_stdout(void);
static void say(const char *fmt, ...) {
    if (on_tty) fputs("\r\033[K", stderr);
    if (stdout_lost) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    check_stdout();
}

/* The run's processes (train/dist.h): one, unless started by mpirun. */
static fg_comm *comm;

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int code, const char *fmt, ...) {
    if (on_tty) fputs("\r\033[K", stderr);
    fflush(stdout);
    const int ranks = comm ? comm->size : 1, rank = comm ? comm->rank : 0;
    /* Most failures happen on every rank alike (a bad flag): rank 0 says it and ends the run
     * (fg_comm_abort), and the others, a moment later, say it only if it was theirs alone. */
    if (rank > 0) usleep(300 * 1000);
    char head[64] = "";
    if (ranks > 1) snprintf(head, sizeof head, "rank %d: ", rank);
    fprintf(stderr, "flashgrad train: %s", rank > 0 ? head : "");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (ranks > 1) fg_comm_abort(comm, code);
    exit(code);
}

/* ---- samples at the end ---- */
static void show_addition_samples(fg_trainer *tr, int n) {
    const fg_addition *task = tr->data->add;
    const fg_tokenizer *tok = fg_addition_tokenizer(task);
    const int pl = fg_addition_prompt_len(task), al = fg_addition_answer_len(task),
              nd = fg_addition_get_config(task)->n_digits;
    int32_t seq[64], ans[64];
    say("samples (held-out problems, greedy; the model writes the sum's digits least significant first):\n");
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
        say("  %0*" PRIu64 " + %0*" PRIu64 " = %0*" PRIu64 "   model: %s   %s\n", nd, a, nd, b, nd + 1, a + b, sum,
            ok ? "correct" : "WRONG");
    }
}

/* Samples from a newline (text), or from id 0 as token ids (token files, which have no tokenizer:
 * `flashgrad sample --tokenizer` decodes them). */
static void show_text_samples(fg_trainer *tr, int n, uint64_t seed) {
    const fg_tokenizer *tok = fg_source_tokenizer(tr->data);
    const int len = tok ? 200 : 64;
    int32_t *t = malloc((len + 1) * sizeof *t);
    char *s = malloc(tok ? (size_t)len + 2 : (size_t)len * 7 + 1);
    if (!t || !s) goto out;
    int32_t start = tok ? fg_tokenizer_token_of(tok, '\n') : 0;
    if (start < 0) start = 0;
    for (int i = 0; i < n; i++) {
        t[0] = start;
        fg_sample_opts o = {.temperature = 0.8, .top_k = 0, .seed = seed + (uint64_t)i};
        if (fg_gpt_generate(tr->model, t, 1, len, &o) != FG_OK) break;
        if (tok) {
            fg_tokenizer_decode(tok, t + 1, (size_t)len, s);
            s[len] = '\0';
        } else {
            size_t k = 0;
            for (int j = 1; j <= len; j++) k += (size_t)sprintf(s + k, j > 1 ? " %d" : "%d", (int)t[j]);
        }
        say("---- sample %d (temperature 0.8%s) ----\n%s\n", i + 1, tok ? "" : ", token ids", s);
    }
out:
    free(t);
    free(s);
}

/* ---- the run folder ---- */
static int path_exists(const char *dir, const char *name) {
    char p[4096];
    struct stat sb;
    return snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p && lstat(p, &sb) == 0;
}

/* Creates `out` (with its parents) if missing and checks it is a writable folder. */
static void make_run_folder(const char *out) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", out);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST) die(1, "--out: cannot create '%s': %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) die(1, "--out: cannot create '%s': %s", tmp, strerror(errno));
    struct stat sb;
    if (stat(tmp, &sb) != 0 || !S_ISDIR(sb.st_mode)) die(1, "--out: '%s' is not a folder", out);
    if (access(tmp, W_OK) != 0) die(1, "--out: cannot write to '%s': %s", out, strerror(errno));
}

#define LOCK_FILE "train.lock"

/* Takes the folder's writer lock for the rest of the process (the descriptor stays open; the
 * kernel drops the lock when the process ends), or stops: another train is writing there. The
 * file holds the owner's pid, for that message. */
static void lock_run_folder(const char *out) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s/%s", out, LOCK_FILE) >= (int)sizeof p) die(2, "--out: the path is too long");
    /* O_NONBLOCK: a FIFO put there must not hang the open; it is refused just below */
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0666);
    if (fd < 0) die(1, "--out: cannot open the lock file '%s': %s", p, strerror(errno));
    /* The pid is written into the lock file: only into a regular file of its own, never into a
     * device or into a file that has other names (a hard link to someone's file). */
    struct stat sb;
    if (fstat(fd, &sb) != 0) die(1, "--out: cannot stat the lock file '%s': %s", p, strerror(errno));
    if (!S_ISREG(sb.st_mode) || sb.st_nlink != 1)
        die(1, "--out: the lock file '%s' is %s; flashgrad writes only to a file of its own there: move it away", p,
            !S_ISREG(sb.st_mode) ? "not a regular file" : "a hard link to another file");
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t r = pread(fd, pid, sizeof pid - 1, 0);
        if (r > 0) pid[r] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        if (e == EWOULDBLOCK)
            die(1,
                "--out: another `flashgrad train`%s%s%s is writing to '%s' (it holds %s); wait for it to end or "
                "choose another --out",
                *pid ? " (pid " : "", pid, *pid ? ")" : "", out, p);
        die(1, "--out: cannot lock '%s': %s", p, strerror(e));
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) { /* the pid is only for messages */
    }
}

/* 1 when DIR/log.csv is one of ours with a header and no row (what a run that failed at its first
 * step used to leave), and nothing else of a run is there. */
static int log_has_no_rows(const char *out) {
    for (size_t i = 0; i < N_RUN_FILES; i++)
        if (strcmp(run_files[i], "log.csv") && path_exists(out, run_files[i])) return 0;
    char p[4200];
    snprintf(p, sizeof p, "%s/log.csv", out);
    void *buf = NULL;
    size_t n = 0;
    if (fg_read_file(p, 4096, &buf, &n) != FG_OK) {
        fg_clear_error();
        return 0;
    }
    const char *b = buf;
    int empty = (n == sizeof CSV_HEADER && !memcmp(b, CSV_HEADER "\n", n)) ||
                (n == sizeof CSV_HEADER_NO_PEAK && !memcmp(b, CSV_HEADER_NO_PEAK "\n", n)) ||
                (n == sizeof CSV_HEADER_NO_MFU && !memcmp(b, CSV_HEADER_NO_MFU "\n", n));
    free(buf);
    return empty;
}

/* A fresh run's folder: does it hold another run's files? Stops (exit 2) unless --overwrite;
 * returns the step of the checkpoint there (0 when only a log, -1 when nothing). */
static int64_t other_run_in_folder(const char *out, int overwrite) {
    int any = 0;
    for (size_t i = 0; i < N_RUN_FILES; i++) any |= path_exists(out, run_files[i]);
    if (!any) return -1;
    int64_t step = 0;
    char what[512] = "";
    if (path_exists(out, FG_CKPT_MODEL_FILE) || path_exists(out, FG_CKPT_OPTIM_FILE)) {
        fg_ckpt *c = fg_ckpt_open(out, 0);
        if (c) {
            step = fg_ckpt_get_info(c)->step;
            snprintf(what, sizeof what, "a checkpoint at step %lld", (long long)step);
            fg_ckpt_close(c);
        } else {
            snprintf(what, sizeof what, "a checkpoint that does not load (%.300s)", fg_last_error());
            fg_clear_error();
            step = 0;
        }
        if (!overwrite)
            die(2, "--out '%s' already holds %s; continue that run with --resume, or replace it with --overwrite", out,
                what);
        return step > 0 ? step : 0;
    }
    if (log_has_no_rows(out)) return -1; /* a header alone records no step: nothing to keep */
    if (!overwrite)
        die(2,
            "--out '%s' already holds the log.csv of an earlier run (no checkpoint); replace it with --overwrite, or "
            "choose another --out",
            out);
    return 0;
}

/* ---- --overwrite: the earlier run set aside, removed only once this run's checkpoint is down ----
 *
 * At this run's first checkpoint the earlier run's files move (rename: no space needed) into
 * DIR/ASIDE_MOVING, which is renamed to DIR/ASIDE_DONE once all are there; then this run writes its
 * log and checkpoint (each file fsync'ed, the model last); only then is ASIDE_DONE removed. If that
 * checkpoint cannot be written (a full disk), the earlier files move back and the run stops saying
 * so. A kill anywhere leaves a state the next `train` on DIR resolves, under the lock, before
 * anything else (recover_set_aside):
 *   ASIDE_MOVING present: the move was cut short and this run had written nothing: move back;
 *   ASIDE_DONE present, DIR/model.safetensors present: this run's checkpoint is complete (its model
 *     is written last): the earlier run goes;
 *   ASIDE_DONE present, no model: this run's checkpoint is incomplete: its files go, the earlier
 *     run's move back.
 * Only the run files (run_files) are ever moved or removed. */
#define ASIDE_MOVING ".flashgrad-overwrite-moving"
#define ASIDE_DONE ".flashgrad-overwritten"

static void fsync_dir(const char *d) {
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    if (fsync(fd) != 0) { /* a folder some filesystems cannot fsync: nothing more to do */
    }
    close(fd);
}

/* Moves the run files that are in `from` to `to` (folders), skipping names `to` already holds.
 * 0, or -1 with errno at the first failure (what moved stays moved). */
static int move_run_files(const char *from, const char *to) {
    for (size_t i = 0; i < N_RUN_FILES; i++) {
        char a[4200], b[4200];
        struct stat sb;
        snprintf(a, sizeof a, "%s/%s", from, run_files[i]);
        snprintf(b, sizeof b, "%s/%s", to, run_files[i]);
        if (lstat(a, &sb) != 0 || lstat(b, &sb) == 0) continue;
        if (rename(a, b) != 0) return -1;
    }
    fsync_dir(from);
    fsync_dir(to);
    return 0;
}

/* Removes the run files of folder d: regular files, and with links also symbolic links (a link the
 * earlier run had in its place was set aside with it; removing a link never touches its target). */
static void remove_run_files(const char *d, int links) {
    for (size_t i = 0; i < N_RUN_FILES; i++) {
        char p[4200];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", d, run_files[i]);
        if (lstat(p, &sb) == 0 && (S_ISREG(sb.st_mode) || (links && S_ISLNK(sb.st_mode)))) unlink(p);
    }
    fsync_dir(d);
}

static void aside_path(char *p, size_t n, const char *out, const char *which) { snprintf(p, n, "%s/%s", out, which); }

/* The earlier run's files back into out, this run's removed; ASIDE_DONE goes. 0 or -1. */
static int restore_set_aside(const char *out) {
    char d[4200];
    aside_path(d, sizeof d, out, ASIDE_DONE);
    remove_run_files(out, 0);
    if (move_run_files(d, out) != 0) return -1;
    if (rmdir(d) != 0) return -1;
    fsync_dir(out);
    return 0;
}

/* This run's checkpoint is complete: the earlier run's files go. */
static void discard_set_aside(const char *out) {
    char d[4200];
    aside_path(d, sizeof d, out, ASIDE_DONE);
    remove_run_files(d, 1);
    if (rmdir(d) != 0 && errno != ENOENT)
        say("note: could not remove '%s' (the replaced run's folder): %s\n", d, strerror(errno));
    fsync_dir(out);
}

/* With the lock held, before anything reads the folder: finish what an --overwrite killed midway
 * left (see above), saying what it did in one line. */
static void recover_set_aside(const char *out) {
    char m[4200], d[4200], mp[4200];
    struct stat sb;
    aside_path(m, sizeof m, out, ASIDE_MOVING);
    aside_path(d, sizeof d, out, ASIDE_DONE);
    snprintf(mp, sizeof mp, "%s/%s", out, FG_CKPT_MODEL_FILE);
    if (lstat(m, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (move_run_files(m, out) != 0 || rmdir(m) != 0)
            die(1, "--out: an interrupted --overwrite left the earlier run's files in '%s' and they cannot be moved "
                   "back: %s; move them back into '%s' by hand",
                m, strerror(errno), out);
        fsync_dir(out);
        say("note: put back the earlier run's files that an interrupted --overwrite had begun to set aside\n");
    }
    if (lstat(d, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (lstat(mp, &sb) == 0) {
            discard_set_aside(out);
            say("note: removed the run that an --overwrite killed after its first checkpoint had replaced\n");
        } else if (restore_set_aside(out) != 0) {
            die(1, "--out: an interrupted --overwrite left the earlier run in '%s' and it cannot be moved back: %s; "
                   "move its files back into '%s' by hand",
                d, strerror(errno), out);
        } else {
            say("note: an --overwrite was interrupted before its first checkpoint: the earlier run is back in '%s'\n",
                out);
        }
    }
}

/* --overwrite, at this run's first checkpoint: the earlier run's files move aside (see above). */
static void set_aside_other_run(const char *out) {
    char m[4200], d[4200];
    aside_path(m, sizeof m, out, ASIDE_MOVING);
    aside_path(d, sizeof d, out, ASIDE_DONE);
    if (mkdir(m, 0700) != 0)
        die(1, "--overwrite: cannot create '%s' to set the earlier run aside: %s ('%s' still holds it, untouched)", m,
            strerror(errno), out);
    if (move_run_files(out, m) != 0 || rename(m, d) != 0) {
        int e = errno;
        if (move_run_files(m, out) == 0 && rmdir(m) == 0)
            die(1, "--overwrite: cannot set the earlier run aside: %s ('%s' still holds it, untouched)", strerror(e),
                out);
        die(1, "--overwrite: cannot set the earlier run aside: %s; its files are in '%s' (the next `flashgrad train "
               "--out %s` puts them back)",
            strerror(e), m, out);
    }
    fsync_dir(out);
}

/* ---- standard output that may go away ---- */
/* After a write error on stdout (EPIPE once the reader of `train | head` exits, ENOSPC, EIO after a
 * hangup) nothing more is printed there; training goes on. */
static void check_stdout(void) {
    if (stdout_lost) return;
    if (fflush(stdout) != 0 || ferror(stdout)) stdout_lost = 1;
}

/* A step, an evaluation or the log failed (fg_last_error() says how): stop with exit 1, saying
 * what the folder holds now. The log of the steps run is kept unless another run's checkpoint
 * still shares the folder (an --overwrite run that had not reached its first checkpoint): that
 * run's log stays as it was, with its checkpoint. */
static void stop_failed(const csv_log *rows, const char *log_path, const char *out, int64_t last_ckpt,
                        int other_pending, int64_t other_step) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fg_last_error());
    if (comm->rank > 0) die(1, "%s", msg); /* rank 0 keeps the folder */
    if (other_pending && other_step > 0)
        die(1,
            "%s; stopped before this run's first checkpoint. '%s' still holds the earlier run (checkpoint at step "
            "%lld), "
            "untouched.",
            msg, out, (long long)other_step);
    if (other_pending)
        die(1, "%s; stopped before this run's first checkpoint. '%s' still holds the earlier run's files, untouched.",
            msg, out);
    /* a log is written only when it has rows: a header alone would record nothing and make the
     * folder look like an earlier run's to the next fresh one */
    int logged = rows->n > 0 && csv_write(rows, log_path) == FG_OK;
    if (last_ckpt >= 0)
        die(1, "%s; stopped. The last good checkpoint is in %s (step %lld)%s.", msg, out, (long long)last_ckpt,
            logged ? "; log.csv has every step run" : "");
    if (logged)
        die(1, "%s; stopped before any checkpoint was written (log.csv has the %lld step%s run).", msg,
            (long long)rows->n, rows->n == 1 ? "" : "s");
    die(1, "%s; stopped before any step completed: no log or checkpoint was written to %s.", msg, out);
}

static void check_address_space(int threads);

/* ---- the command: train_parse, train_configure (configure_fresh or configure_resumed, then the
 * folder and the trainer), print_header, train_loop, train_report ---- */
static int same_d(double a, double b) { return a == b; }

/* What the command line asks for, checked. */
typedef struct {
    fg_flag f[F_COUNT];
    int is_text;         /* --data: a text file; otherwise the addition task */
    int is_bin;          /* --data-bin: token files (is_text is 0) */
    fg_train_choice run; /* device (started), attention, recompute */
    const char *out;     /* the run folder */
    char model_path[4096], log_path[4096];
    fg_nanogpt ng;       /* nanoGPT's config files and names (ng.best_only: checkpoint the best val loss only) */
    double peak;         /* --peak GFLOPS (0: the cached figure) */
    int peak_remeasure;  /* --peak measure */
} train_args;

/* The run: configuration, data, trainer, its log, and the folder's state. */
typedef struct {
    fg_train_config cfg;
    fg_source *src;     /* owned */
    fg_trainer *tr;     /* owned */
    fg_ckpt *ck;        /* --resume: the checkpoint, open until the trainer is restored from it */
    csv_log log;        /* the rows of log.csv */
    int64_t other_step; /* a fresh --overwrite run: the step of the run it will replace */
    int other_pending;  /* ... and that run's files are still in place */
    fg_peak_info peak;  /* what MFU divides by (CPU runs) */
} train_run;

/* What the loop measured, for the final report. */
typedef struct {
    double t_start, step_time; /* wall clock at the first step; seconds inside training steps */
    int64_t tokens_done;
    uint64_t comm_bytes; /* moved by this rank's collectives inside training steps */
    double last_train, last_val, last_acc; /* the last evaluation */
    int64_t first_step;                    /* the step the run started from */
    int64_t last_ckpt;                     /* the step of the last checkpoint written (-1: none) */
    double best_val;                       /* the best val loss evaluated (always_save_checkpoint = False) */
} train_totals;

/* --init-from: loads the model (exit 1 when it does not load) and makes the model flags its
 * architecture: a flag that contradicts the file is one line and exit 2; --block-size may only
 * shrink the context (wpe is cropped); --data-bin's --vocab-size is the file's. */
static void init_from_flags(fg_flag *f) {
    const char *path = f[F_INIT_FROM].s;
    const char *why = fg_nanogpt_init_from_refusal(path);
    if (!strcmp(path, "scratch")) { /* nanoGPT's name for a fresh run */
        f[F_INIT_FROM].given = 0;
        return;
    }
    if (why) die(2, "--init-from '%s': %s", path, why);
    if (f[F_RESUME].given)
        die(2, "--init-from starts a new run from a model's weights; --resume continues the run in --out: not both");
    init_model = fg_model_file_load(path);
    if (!init_model) die(1, "--init-from: %s", fg_last_error());
    const fg_gpt_config *mc = &init_model->model->cfg;
    const struct {
        int flag;
        int value;
        const char *what;
    } arch[] = {{FG_TF_N_LAYER, mc->n_layer, "n_layer"},
                {FG_TF_N_HEAD, mc->n_head, "n_head"},
                {FG_TF_N_EMBD, mc->n_embd, "n_embd"},
                {FG_TF_VOCAB, mc->vocab_size, "vocab_size"}};
    for (size_t i = 0; i < sizeof arch / sizeof arch[0]; i++) {
        fg_flag *x = &f[arch[i].flag];
        if (arch[i].flag == FG_TF_VOCAB && !f[FG_TF_DATA_BIN].given) continue; /* text and tasks: checked later */
        if (x->given && x->i != arch[i].value)
            die(2, "%s %lld contradicts the model in '%s' (%s %d); its architecture comes from the file", x->name,
                (long long)x->i, path, arch[i].what, arch[i].value);
        x->i = arch[i].value;
        x->given = 1;
    }
    if (f[FG_TF_BLOCK].given && f[FG_TF_BLOCK].i > mc->block_size)
        die(2, "--block-size %lld is longer than the context of the model in '%s' (%d positions); it may only shrink",
            (long long)f[FG_TF_BLOCK].i, path, mc->block_size);
    if (!f[FG_TF_BLOCK].given) f[FG_TF_BLOCK].i = mc->block_size;
    f[FG_TF_BLOCK].given = 1;
}

/* --init-from after the data loaded: the same vocabulary, and the same tokenizer when the model
 * has one (a flashgrad text run), or the ids would mean other bytes. */
static void init_from_check_data(const fg_flag *f, const fg_source *src) {
    const char *path = f[F_INIT_FROM].s;
    const int V = init_model->model->cfg.vocab_size, Vd = fg_source_vocab_size(src);
    const fg_tokenizer *mt = init_model->tokenizer, *dt = fg_source_tokenizer(src);
    if (Vd != V)
        die(2,
            "--init-from: the data's vocabulary (%d%s) differs from the model's in '%s' (%d): the token ids must mean "
            "the same thing (--byte gives 256; --data-bin --vocab-size the file's)",
            Vd, dt ? (fg_tokenizer_kind(dt) == FG_TOK_BYTE ? ", byte-level" : ", character-level") : "", path, V);
    if (mt) {
        char *a = fg_tokenizer_serialize(mt), *b = dt ? fg_tokenizer_serialize(dt) : NULL;
        int same = a && b && !strcmp(a, b);
        free(a);
        free(b);
        if (!same)
            die(2, "--init-from: the model in '%s' has its own tokenizer, and this data's is %s", path,
                dt ? "a different one" : "none (token ids)");
    }
}

/* Parses and checks every flag: a bad value is one line and exit 2, before anything is written.
 * Returns -1 when the run goes on, else the exit status (0 after --help). */
static int train_parse(int argc, char **argv, train_args *a) {
    fg_flag *f = a->f;
    init_flags(f);
    /* Two passes: the first finds --data/--task (and nanoGPT config files, whose dataset is the
     * data) so the second starts from that task's defaults, or from nanoGPT train.py's under a
     * config file (cli/nanogpt.h). */
    set_defaults(f, &fg_defaults_text);
    memset(&a->ng, 0, sizeof a->ng);
    a->ng = (fg_nanogpt){.cmd = "train", .flags = f, .n = F_COUNT};
    int rc = fg_flags_parse_ex("train", f, F_COUNT, argc, argv, fg_nanogpt_positional, &a->ng);
    if (rc == -1) {
        help();
        return 0;
    }
    if (rc) return rc;
    if ((rc = fg_nanogpt_resolve(&a->ng, f[F_RESUME].given, 0)) != 0) return rc;
    const int configs = a->ng.configs;
    a->is_text = f[FG_TF_DATA].given;
    /* under a config file the data is train.py's dataset (openwebtext) unless it names one */
    a->is_bin = f[FG_TF_DATA_BIN].given || (configs && !a->is_text);
    if (a->is_text && f[F_TASK].given) die(2, "give either --data FILE or --task NAME, not both");
    if (a->is_bin && f[F_TASK].given) die(2, "give either --data-bin PATH or --task NAME, not both");
    if (a->is_bin && f[F_ANSWER_ONLY].given) die(2, "--answer-only applies to the addition task only");
    if (!a->is_text && strcmp(f[F_TASK].s, "addition"))
        die(2, "--task: unknown task '%s' (available: addition)", f[F_TASK].s);
    if (a->is_text && f[F_ANSWER_ONLY].given) die(2, "--answer-only applies to the addition task only");
    if ((a->is_text || a->is_bin) && f[F_EVAL_PROBLEMS].given)
        die(2, "--eval-problems applies to the addition task only (its exact-match accuracy)");
    init_flags(f);
    set_defaults(f, a->is_text || a->is_bin ? &fg_defaults_text : &fg_defaults_addition);
    a->ng = (fg_nanogpt){.cmd = "train", .flags = f, .n = F_COUNT};
    if (configs && (rc = fg_nanogpt_train_defaults(&a->ng)) != 0) return rc;
    rc = fg_flags_parse_ex("train", f, F_COUNT, argc, argv, fg_nanogpt_positional, &a->ng);
    if (rc) return rc;
    if ((rc = fg_nanogpt_resolve(&a->ng, f[F_RESUME].given, comm->rank == 0)) != 0) return rc;
    a->is_text = f[FG_TF_DATA].given;
    a->is_bin = f[FG_TF_DATA_BIN].given;
    /* nanoGPT's gradient_accumulation_steps counts the micro-batches of every process */
    if (f[FG_TF_ACCUM].by_alias) {
        if (f[FG_TF_ACCUM].i % comm->size)
            die(2, "--gradient_accumulation_steps %lld does not divide among %d processes", (long long)f[FG_TF_ACCUM].i,
                comm->size);
        f[FG_TF_ACCUM].i /= comm->size;
    }
    if (a->ng.best_only && f[F_CKPT_EVERY].given)
        die(2, "--ckpt-every and always_save_checkpoint = False: give one (the second checkpoints the best val loss)");
    a->peak = 0;
    a->peak_remeasure = 0;
    if (f[F_PEAK].given) {
        char *end;
        double g = strtod(f[F_PEAK].s, &end);
        if (!strcmp(f[F_PEAK].s, "measure"))
            a->peak_remeasure = 1;
        else if (*end || !isfinite(g) || g <= 0 || g > 1e9)
            die(2, "--peak: '%s' is neither GFLOP/s (a number > 0) nor 'measure'", f[F_PEAK].s);
        else
            a->peak = g;
    }
    if (f[F_INIT_FROM].given) init_from_flags(f);
    char meta[4200];
    if (a->is_bin && !f[FG_TF_VOCAB].given && !f[F_RESUME].given &&
        fg_source_tokens_meta_path(f[FG_TF_DATA_BIN].s, meta, sizeof meta)) {
        /* nanoGPT's meta.pkl names the vocabulary (its tokenizer goes into the checkpoint) */
        fg_tokenizer *t = fg_meta_pkl_load(meta);
        if (!t) die(1, "--data-bin: %s", fg_last_error());
        f[FG_TF_VOCAB].i = fg_tokenizer_vocab_size(t);
        f[FG_TF_VOCAB].given = 1;
        fg_tokenizer_free(t);
    }

    /* --byte, --data-bin, device (started here), attention, recompute, heads, learning rates:
     * train_flags.h. A resumed run takes its vocabulary from the checkpoint (configure_resumed
     * checks a --vocab-size against it). */
    fg_flag chk[F_COUNT];
    memcpy(chk, f, sizeof chk);
    if (f[F_RESUME].given) chk[FG_TF_VOCAB].given = a->is_bin;
    if (fg_train_flags_check(chk, &a->run) != FG_OK) die(2, "%s", fg_last_error());
    check_address_space(f[FG_TF_THREADS].given ? (int)f[FG_TF_THREADS].i : fg_pool_threads()); /* no thread yet */
    fg_train_flags_threads(f);

    /* the output folder: created if missing (with parents), and it must be writable */
    a->out = f[F_OUT].s;
    if (snprintf(a->model_path, sizeof a->model_path, "%s/%s", a->out, FG_CKPT_MODEL_FILE) >=
            (int)sizeof a->model_path ||
        snprintf(a->log_path, sizeof a->log_path, "%s/log.csv", a->out) >= (int)sizeof a->log_path)
        die(2, "--out: the path is too long");
    return -1;
}

/* --resume: the configuration of the checkpoint in --out, which the flags may only change where
 * that keeps the curve (steps, decay, evaluation, attention, recompute, device). Takes the folder's
 * lock before reading the checkpoint; leaves it open in r->ck. What it opens goes into *r at once,
 * so that it stays reachable when a check stops the program (the leak checkers see it). */
static void configure_resumed(const train_args *a, train_run *r) {
    const fg_flag *f = a->f;
    const char *out = a->out;
    struct stat sb;
    char aside[4200], moving[4200];
    aside_path(aside, sizeof aside, out, ASIDE_DONE);
    aside_path(moving, sizeof moving, out, ASIDE_MOVING);
    if (stat(a->model_path, &sb) != 0 && stat(aside, &sb) != 0 && stat(moving, &sb) != 0)
        die(1, "--resume: no checkpoint in '%s' (%s: %s)", out, a->model_path, strerror(errno));
    if (f[F_OVERWRITE].given) die(2, "--overwrite starts a new run; it cannot be combined with --resume");
    if (comm->rank == 0) {
        lock_run_folder(out);
        recover_set_aside(out);
    }
    if (stat(a->model_path, &sb) != 0)
        die(1, "--resume: no checkpoint in '%s' (%s: %s)", out, a->model_path, strerror(errno));
    fg_ckpt *ck = r->ck = fg_ckpt_open(out, 1);
    if (!ck) die(1, "--resume: %s", fg_last_error());
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    fg_train_config cfg = in->train;
    /* the checkpoint counts the micro-batches of the whole step: they must divide among the ranks */
    if (cfg.grad_accum % comm->size)
        die(2, "--resume: the checkpoint's steps have %d micro-batches, which do not divide among %d processes",
            cfg.grad_accum, comm->size);
    const int accum_per_rank = cfg.grad_accum / comm->size;
    /* Settings that shape the run must match the checkpoint's, or the resumed curve would not
     * be the uninterrupted one. */
#define KEEP_I(k, val)                                                                                                 \
    if (f[k].given && f[k].i != (int64_t)(val))                                                                        \
        die(2, "%s %lld differs from the checkpoint's %lld; a resumed run keeps its settings", f[k].name,              \
            (long long)f[k].i, (long long)(val));
#define KEEP_D(k, val)                                                                                                 \
    if (f[k].given && !same_d(f[k].d, (val)))                                                                          \
        die(2, "%s %g differs from the checkpoint's %g; a resumed run keeps its settings", f[k].name, f[k].d,          \
            (double)(val));
    KEEP_I(FG_TF_N_LAYER, cfg.model.n_layer)
    KEEP_I(FG_TF_N_HEAD, cfg.model.n_head) KEEP_I(FG_TF_N_EMBD, cfg.model.n_embd) KEEP_I(
        FG_TF_BLOCK, cfg.model.block_size) KEEP_I(FG_TF_BATCH, cfg.batch_size) KEEP_I(FG_TF_ACCUM, accum_per_rank)
        KEEP_I(FG_TF_WARMUP, cfg.opt.warmup) KEEP_D(FG_TF_LR, cfg.opt.lr) KEEP_D(FG_TF_MIN_LR, cfg.opt.min_lr)
            KEEP_D(FG_TF_WD, cfg.opt.weight_decay) KEEP_D(FG_TF_BETA1, cfg.opt.beta1) KEEP_D(FG_TF_BETA2, cfg.opt.beta2)
                KEEP_D(FG_TF_CLIP, cfg.opt.grad_clip)
                    KEEP_D(FG_TF_DROPOUT, cfg.model.dropout) if (f[FG_TF_SEED].given && f[FG_TF_SEED].u != cfg.seed)
                        die(2, "--seed differs from the checkpoint's %" PRIu64, cfg.seed);
    if (f[FG_TF_BYTE].given && (!in->tokenizer || fg_tokenizer_kind(in->tokenizer) != FG_TOK_BYTE))
        die(2, "--byte: the checkpoint %s",
            in->tokenizer ? "uses a character-level tokenizer" : "trained on token files");
    if (in->source != FG_SOURCE_TOKENS && (a->is_bin || f[FG_TF_VOCAB].given))
        die(2, "%s: the checkpoint in '%s' was trained on %s", a->is_bin ? "--data-bin" : "--vocab-size", out,
            in->source == FG_SOURCE_ADDITION ? "the addition task" : "a text file (--data)");
    if (in->source == FG_SOURCE_TOKENS) {
        if (a->is_text) die(2, "--data: the checkpoint in '%s' was trained on token files (--data-bin)", out);
        if (f[F_TASK].given) die(2, "--task: the checkpoint in '%s' was trained on token files", out);
        KEEP_I(FG_TF_VOCAB, in->model.vocab_size)
        /* --data-bin if given, else the recorded paths, then the recorded absolute ones */
        r->src = fg_ckpt_tokens_source(ck, a->is_bin ? f[FG_TF_DATA_BIN].s : NULL);
        if (!r->src) die(1, "--resume: %s%s", fg_last_error(), a->is_bin ? "" : "; give the files with --data-bin");
    } else if (in->source == FG_SOURCE_ADDITION) {
        if (a->is_text) die(2, "--data: the checkpoint in '%s' was trained on the addition task", out);
        KEEP_I(FG_TF_DIGITS, in->addition.n_digits)
        KEEP_I(F_ANSWER_ONLY, in->addition.answer_only)
        r->src = fg_source_addition(&in->addition);
    } else {
        if (f[F_TASK].given) die(2, "--task: the checkpoint in '%s' was trained on a text file", out);
    }
    if (in->source != FG_SOURCE_ADDITION) {
        const int bad = f[FG_TF_DIGITS].given ? FG_TF_DIGITS : f[F_EVAL_PROBLEMS].given ? F_EVAL_PROBLEMS
                        : f[F_ANSWER_ONLY].given                                        ? F_ANSWER_ONLY
                                                                                        : -1;
        if (bad >= 0)
            die(2, "%s applies to the addition task only; the checkpoint in '%s' was trained on %s", f[bad].name, out,
                in->source == FG_SOURCE_TOKENS ? "token files" : "a text file");
    }
    if (in->source == FG_SOURCE_TEXT) {
        /* --data if given, else the recorded path, then the recorded absolute one */
        r->src = fg_ckpt_text_source(ck, a->is_text ? f[FG_TF_DATA].s : NULL);
        if (!r->src) die(1, "--resume: %s%s", fg_last_error(), a->is_text ? "" : "; give the file with --data");
    }
#undef KEEP_I
#undef KEEP_D
    if (!r->src) die(1, "%s", fg_last_error());
    /* what may change on resume */
    if (f[F_STEPS].given) cfg.steps = f[F_STEPS].i;
    if (f[FG_TF_DECAY].given) cfg.opt.decay_steps = f[FG_TF_DECAY].i;
    if (f[F_EVAL_EVERY].given) cfg.eval_every = (int)f[F_EVAL_EVERY].i;
    if (f[F_EVAL_ITERS].given) cfg.eval_iters = (int)f[F_EVAL_ITERS].i;
    cfg.model.attn = f[FG_TF_ATTN].given ? a->run.attn : in->model.attn;
    cfg.model.recompute = a->run.recompute; /* changes no number: free on resume */
    cfg.model.device = a->run.device;       /* checkpoints are device-neutral: resume on either */
    if (in->step >= cfg.steps)
        die(2, "--resume: the checkpoint is at step %lld of %lld already; pass a larger --steps to continue",
            (long long)in->step, (long long)cfg.steps);
    r->cfg = cfg;
}

/* A fresh run: the data (a bad file is one line and exit 1), then the configuration from the
 * flags, checked (train_flags.h). */
static void configure_fresh(const train_args *a, train_run *r) {
    const fg_flag *f = a->f;
    r->src = fg_train_flags_source(f, (int)f[F_ANSWER_ONLY].i);
    if (!r->src) die(1, "%s", fg_last_error());
    r->cfg.steps = f[F_STEPS].i;
    r->cfg.eval_every = (int)f[F_EVAL_EVERY].i;
    r->cfg.eval_iters = (int)f[F_EVAL_ITERS].i;
    if (f[F_INIT_FROM].given) init_from_check_data(f, r->src);
    if (fg_train_flags_config(f, r->src, &a->run, &r->cfg) != FG_OK) die(2, "%s", fg_last_error());
    r->cfg.grad_accum *= comm->size; /* --grad-accum is per process; the config counts the whole step */
}

/* The run's configuration (fresh or resumed), then its folder, then the trainer (restored from
 * the checkpoint on resume). Stops with one line on any failure. */
static void train_configure(const train_args *a, train_run *r) {
    memset(r, 0, sizeof *r);
    r->other_step = -1;
    const char *out = a->out;
    if (a->f[F_RESUME].given)
        configure_resumed(a, r);
    else
        configure_fresh(a, r);

    /* The folder: after the data loaded, so a bad dataset leaves nothing behind. A fresh run takes
     * the lock here; a resumed one took it before reading the checkpoint. */
    if (comm->rank > 0) {
        /* rank 0 alone writes the folder */
    } else if (!r->ck) {
        make_run_folder(out);
        lock_run_folder(out);
        recover_set_aside(out);
        r->other_step = other_run_in_folder(out, a->f[F_OVERWRITE].given);
        r->other_pending = r->other_step >= 0;
    } else if (access(out, W_OK) != 0) {
        die(1, "--out: cannot write to '%s': %s", out, strerror(errno));
    }
    if (comm->rank == 0) remove_stale_temporaries(out);

    r->tr = fg_trainer_create_dist(&r->cfg, r->src, comm, (int)a->f[F_ZERO].i);
    if (!r->tr) die(1, "%s", fg_last_error());
    if (init_model) {
        /* the file's weights (wpe cropped to --block-size); optimizer and schedule start afresh */
        if (fg_gpt_copy_weights(r->tr->model, init_model->model) != FG_OK)
            die(1, "--init-from: %s", fg_last_error());
        const fg_gpt_config *mc = &init_model->model->cfg;
        say("init from %s (%s: L %d, H %d, C %d, vocabulary %d, context %d%s)\n", a->f[F_INIT_FROM].s,
            fg_model_format_name(init_model->format), mc->n_layer, mc->n_head, mc->n_embd, mc->vocab_size,
            mc->block_size, r->cfg.model.block_size < mc->block_size ? ", cropped" : "");
        fg_model_file_free(init_model);
        init_model = NULL;
    }
    /* whatever could make a checkpoint fail (except the disk) fails now, before the first step
     * (with --zero the checkpoint's moments are whole: the check sees full-size ones) */
    if (fg_trainer_unshard(r->tr, 0) != FG_OK) die(1, "%s", fg_last_error());
    if (comm->rank == 0 && fg_ckpt_check_savable(out, r->tr) != FG_OK) die(1, "%s", fg_last_error());
    if (r->ck) {
        if (fg_ckpt_restore(r->ck, r->tr) != FG_OK) die(1, "--resume: %s", fg_last_error());
        fg_ckpt_close(r->ck);
        r->ck = NULL;
        if (comm->rank == 0) csv_load(&r->log, a->log_path, r->tr->step);
    }
    fg_trainer_reshard(r->tr, 1);
}

/* ---- data parallel: the ranks must run the same thing ---- */
typedef struct {
    char name[40];
    char value[120];
} agree_field;

/* XXH64 of this program's file: the build's identity (0 where /proc is missing). */
static uint64_t build_hash(void) {
    FILE *fp = fopen("/proc/self/exe", "rb");
    if (!fp) return 0;
    fg_xxh64_state h;
    fg_xxh64_init(&h, 0);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, fp)) > 0) fg_xxh64_update(&h, buf, n);
    fclose(fp);
    return fg_xxh64_digest(&h);
}

/* The data's identity: the text file's XXH64, and that of a few batches of each split (so that any
 * kind of source whose contents differ between the ranks is told apart by what it feeds). */
static uint64_t data_hash(const train_run *r) {
    fg_trainer *tr = r->tr;
    const int B = r->cfg.batch_size, T = tr->T;
    fg_xxh64_state h;
    fg_xxh64_init(&h, 0);
    fg_xxh64_update(&h, &r->src->file_hash, sizeof r->src->file_hash);
    for (int s = 0; s < 2; s++)
        for (uint64_t i = 0; i < 4; i++) {
            if (fg_source_batch(r->src, s ? FG_SPLIT_VAL : FG_SPLIT_TRAIN, B, T, r->cfg.seed, i, tr->x, tr->y) != FG_OK)
                die(1, "%s", fg_last_error());
            fg_xxh64_update(&h, tr->x, (size_t)B * (size_t)T * sizeof *tr->x);
            fg_xxh64_update(&h, tr->y, (size_t)B * (size_t)T * sizeof *tr->y);
        }
    return fg_xxh64_digest(&h);
}

static void add_field(agree_field *f, int *k, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_field(agree_field *f, int *k, const char *name, const char *fmt, ...) {
    snprintf(f[*k].name, sizeof f[*k].name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f[*k].value, sizeof f[*k].value, fmt, ap);
    va_end(ap);
    (*k)++;
}

/* Every rank describes its run (each flag's value, the data's and the program's identity, the
 * state it starts from); a field that differs from rank 0's stops every rank with one line. */
static void agree_across_ranks(const train_args *a, const train_run *r) {
    if (comm->size == 1) return;
    enum { N = F_COUNT + 4 };
    agree_field mine[N];
    memset(mine, 0, sizeof mine);
    int k = 0;
    for (int i = 0; i < F_COUNT; i++) {
        const fg_flag *fl = &a->f[i];
        switch (fl->type) {
        case FG_FLAG_INT: add_field(mine, &k, fl->name, "%lld", (long long)fl->i); break;
        case FG_FLAG_F64: add_field(mine, &k, fl->name, "%.17g", fl->d); break;
        case FG_FLAG_STR: add_field(mine, &k, fl->name, "%s", fl->s ? fl->s : ""); break;
        case FG_FLAG_BOOL: add_field(mine, &k, fl->name, "%s", fl->given ? "given" : "not given"); break;
        case FG_FLAG_TRUTH: add_field(mine, &k, fl->name, "%s", fl->i ? "True" : "False"); break;
        case FG_FLAG_U64: add_field(mine, &k, fl->name, "%" PRIu64, fl->u); break;
        }
    }
    add_field(mine, &k, "data", "xxh64 %016" PRIx64, data_hash(r));
    add_field(mine, &k, "build", "program xxh64 %016" PRIx64, build_hash());
    add_field(mine, &k, "starting step", "%lld", (long long)r->tr->step);
    add_field(mine, &k, "starting parameters", "xxh64 %016" PRIx64, fg_ckpt_params_hash(r->tr->model));
    agree_field *all = malloc((size_t)comm->size * sizeof mine);
    if (!all) die(1, "out of memory for the ranks' configurations");
    if (fg_comm_allgather_bytes(comm, mine, all, sizeof mine) != FG_OK) die(1, "%s", fg_last_error());
    for (int q = 1; q < comm->size; q++)
        for (int i = 0; i < k; i++) {
            const agree_field *x = &all[(size_t)q * N + i], *z = &all[i];
            if (strcmp(x->value, z->value)) {
                char line[512];
                snprintf(line, sizeof line, "rank %d's %s %s differs from rank 0's %s; every process must run the same",
                         q, x->name, x->value, z->value);
                free(all);
                die(2, "%s", line);
            }
        }
    free(all);
}

/* A checkpoint from rank 0 (with --zero the moments are gathered first: every rank calls this). */
static fg_status save_checkpoint(const char *out, fg_trainer *tr) {
    fg_status st = fg_trainer_unshard(tr, 1);
    if (st == FG_OK && comm->rank == 0) st = fg_ckpt_save(out, tr);
    fg_trainer_reshard(tr, 0);
    return st;
}

/* The lines that describe the run before its first step. */
static void print_header(const train_args *a, const train_run *r) {
    if (comm->rank > 0) return;
    const fg_trainer *tr = r->tr;
    const fg_source *src = r->src;
    const fg_train_config *cfg = &r->cfg;
    const fg_gpt_config *mc = &tr->model->cfg;
    char data_desc[8800];
    if (src->kind == FG_SOURCE_ADDITION) {
        const fg_addition_config *ac = fg_addition_get_config(src->add);
        snprintf(data_desc, sizeof data_desc,
                 "addition task, %d-digit operands (%.0f%% of pairs held out; loss %s, optimum %.4f)", ac->n_digits,
                 100 * ac->val_fraction, ac->answer_only ? "on the answers only" : "on every token",
                 fg_source_optimal_loss(src));
    } else if (src->kind == FG_SOURCE_TOKENS) {
        const fg_source_file *ft = &src->files[FG_SPLIT_TRAIN], *fv = &src->files[FG_SPLIT_VAL];
        const char *fmt = ft->format == FG_TOKFILE_LLMC ? "llm.c" : "nanoGPT";
        const char *tok_desc = src->tok ? "meta.pkl's character-level tokenizer" : "no tokenizer";
        if (fv->path[0]) {
            if (snprintf(data_desc, sizeof data_desc,
                         "%s token files: %s (%" PRIu64 " ids, train), %s (%" PRIu64 " ids, val), %s", fmt,
                         ft->path, ft->count, fv->path, fv->count, tok_desc) >= (int)sizeof data_desc)
                strcpy(data_desc + sizeof data_desc - 4, "..."); /* two very long paths */
        } else {
            snprintf(data_desc, sizeof data_desc,
                     "%s token file: %s (%" PRIu64 " ids: %zu train, the last %zu val), %s", fmt, ft->path,
                     ft->count, fg_token_data_split_tokens(src->tokens, FG_SPLIT_TRAIN),
                     fg_token_data_split_tokens(src->tokens, FG_SPLIT_VAL), tok_desc);
        }
    } else {
        snprintf(data_desc, sizeof data_desc, "%s: %zu tokens (%zu train, %zu val), %s tokenizer", src->path,
                 fg_text_num_tokens(src->text), fg_text_split_tokens(src->text, FG_SPLIT_TRAIN),
                 fg_text_split_tokens(src->text, FG_SPLIT_VAL),
                 fg_tokenizer_kind(fg_source_tokenizer(src)) == FG_TOK_BYTE ? "byte-level" : "character-level");
    }
    say("data: %s, vocabulary %d\n", data_desc, mc->vocab_size);
    say("model: %d layers, %d heads, %d embd, block %d, %.2fM parameters, %s attention, dropout %g\n", mc->n_layer,
        mc->n_head, mc->n_embd, mc->block_size, tr->model->num_elements / 1e6, fg_attn_impl_name(mc->attn),
        mc->dropout);
    say("training: %lld steps of %d x %d x %d tokens, lr %g -> %g (warmup %lld, cosine to step %lld), AdamW "
        "betas (%g, %g) wd %g, clip %g, seed %" PRIu64 "\n",
        (long long)cfg->steps, cfg->batch_size, tr->T, cfg->grad_accum, cfg->opt.lr, cfg->opt.min_lr,
        (long long)cfg->opt.warmup, (long long)cfg->opt.decay_steps, cfg->opt.beta1, cfg->opt.beta2,
        cfg->opt.weight_decay, cfg->opt.grad_clip, cfg->seed);
    if (on_tty) fputs("\r\033[K", stderr);
    fg_print_machine_line(stdout);
    fg_blas_hint(stdout);
    say("threads: %d (flashgrad pool); runs are bit-for-bit reproducible for a given seed and thread count\n",
        fg_pool_threads());
    if (comm->size > 1)
        say("data parallel: %d processes (%s) x %d micro-batches each, gradients folded in rank order%s\n", comm->size,
            comm->ops->name, cfg->grad_accum / comm->size,
            a->f[F_ZERO].i ? "; AdamW's moments sharded (ZeRO-1)" : "");
    if (mc->device == FG_CPU) {
        char origin[4400];
        say("fma peak: %.1f GFLOP/s float32 (%s, %d threads; %s); MFU = tokens/s x %.4g model flop/token (6 N + 12 L "
            "C T) / peak\n",
            r->peak.gflops, r->peak.simd, r->peak.threads, fg_peak_origin_text(&r->peak, origin, sizeof origin),
            fg_trainer_flops_per_token(tr));
    }
    if (cfg->opt.warmup >= cfg->steps && cfg->opt.warmup > 0)
        say("warning: --warmup %lld is not shorter than the run's %lld steps: the learning rate never reaches --lr %g "
            "(it ends at %.3g)\n",
            (long long)cfg->opt.warmup, (long long)cfg->steps, cfg->opt.lr, fg_lr_at(&cfg->opt, cfg->steps - 1));
    if (a->ng.best_only)
        say("checkpoints: only at evaluations that improve the best val loss (always_save_checkpoint = False)\n");
    if (tr->step > 0) say("resuming from step %lld (%s)\n", (long long)tr->step, a->out);
    say("output: %s/{model,optimizer}.safetensors, %s\n", a->out, a->log_path);
}

/* What a death by a truncated mapped input (fileio.h) adds to its line: where the run stands. */
static void set_crash_note(const char *out, int64_t last_ckpt, int other_pending, int64_t other_step) {
    char note[1024];
    if (other_pending && other_step > 0)
        snprintf(note, sizeof note, " before this run's first checkpoint; '%s' still holds the earlier run "
                 "(checkpoint at step %lld), untouched", out, (long long)other_step);
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

/* The lowest val_loss (the sixth column) in the log's rows: the best evaluation of the run so far,
 * or INFINITY. */
static double best_logged_val(const csv_log *l) {
    double best = INFINITY;
    for (int64_t i = 0; i < l->n; i++) {
        const char *p = l->rows[i];
        for (int c = 0; c < 5 && p; c++) {
            p = strchr(p, ',');
            if (p) p++;
        }
        if (!p || *p == ',' || !*p) continue;
        double v = strtod(p, NULL);
        if (v < best) best = v;
    }
    return best;
}

/* Address space a worker thread reserves once it runs its first step (its stack, its malloc arena,
 * OpenMP's and oneDNN's per-thread scratch), measured on Linux/glibc as the growth of VmPeak per
 * extra --threads: mostly reserved, little of it touched, but an address-space limit (ulimit -v)
 * counts it all, and a reservation that fails inside a library kills the process without a word. */
#define THREAD_RESERVE_MIB 512

/* Before any worker starts (flashgrad's pool and OpenBLAS's, which --threads sizes alike): the
 * reservations of `threads` threads must fit RLIMIT_AS, or one line and exit 1. */
extern int openblas_get_num_threads(void);

static void check_address_space(int threads) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
    long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%lld", &pages) != 1) pages = 0;
        fclose(f);
    }
    const long long now = pages * (long long)sysconf(_SC_PAGESIZE), limit = (long long)rl.rlim_cur;
    /* the main thread's own growth during the first step, then one reservation per other thread */
    const long long per = (long long)THREAD_RESERVE_MIB << 20, first = per / 2;
    if (now + first + (long long)(threads - 1) * per <= limit) return;
    /* The suggestion must also fit a later start whose "in use" is larger: OpenBLAS starts its
     * workers when it loads, and each one's malloc arena (a 128 MiB mapping, trimmed to 64) may
     * or may not be there yet when statm is read. */
    const long long racing = (long long)(openblas_get_num_threads() > 1 ? openblas_get_num_threads() - 1 : 0) << 27;
    const long long room = limit - now - first - racing;
    const long long fit = room >= 0 ? room / per + 1 : 0;
    if (fit >= 1)
        die(1, "the address-space limit (ulimit -v) is %lld MiB and %lld MiB are in use; %d threads reserve about %d "
               "MiB each: run with --threads %lld or raise the limit",
            limit >> 20, now >> 20, threads, THREAD_RESERVE_MIB, fit);
    die(1, "the address-space limit (ulimit -v) is %lld MiB and %lld MiB are in use: too little for training "
           "(each thread reserves about %d MiB); raise the limit",
        limit >> 20, now >> 20, THREAD_RESERVE_MIB);
}

/* The optimizer steps, with evaluations, log rows, progress and checkpoints, until --steps or a
 * stop signal. Returns 0 when every step ran, 128 + the signal after one (its checkpoint written);
 * a failure stops the program (stop_failed). */
static int train_loop(const train_args *a, train_run *r, train_totals *t) {
    const fg_flag *f = a->f;
    const char *out = a->out, *log_path = a->log_path;
    fg_trainer *tr = r->tr;
    const fg_train_config *cfg = &r->cfg;
    const int is_add = r->src->kind == FG_SOURCE_ADDITION;
    const int eval_problems = (int)f[F_EVAL_PROBLEMS].i;
    const int ckpt_every = (int)f[F_CKPT_EVERY].i;
    int64_t log_every = f[F_LOG_EVERY].i;
    if (log_every == 0) log_every = cfg->steps / 40 > 0 ? cfg->steps / 40 : 1;

    struct sigaction sa = {0};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART; /* a system call the signal interrupts (a write to a full pipe) goes on, not EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    *t = (train_totals){.t_start = fg_now(),
                        .last_train = NAN,
                        .last_val = NAN,
                        .last_acc = NAN,
                        .first_step = tr->step,
                        .best_val = best_logged_val(&r->log)};
    const int best_only = a->ng.best_only;
    const int cpu = tr->cfg.model.device == FG_CPU;
    double last_draw = 0;
    int64_t steps_timed = 0, last_ckpt = tr->step > 0 ? tr->step : -1;
    const double comm_start = comm->seconds;
    int code = 0;
    set_crash_note(out, last_ckpt, r->other_pending, r->other_step);
    while (tr->step < cfg->steps) {
        fg_step_stats s;
        double t0 = fg_now();
        fg_status st = fg_trainer_step(tr, &s);
        double dt = fg_now() - t0;
        if (st != FG_OK) stop_failed(&r->log, log_path, out, last_ckpt, r->other_pending, r->other_step);
        t->step_time += dt;
        t->tokens_done += s.tokens;
        t->comm_bytes += s.comm_bytes;
        steps_timed++;
        const int64_t step = tr->step; /* 1-based: steps done */
        const int last = step == cfg->steps;
        const int do_eval = last || (cfg->eval_every > 0 && step % cfg->eval_every == 0);
        /* read once: a signal that lands later in this iteration is served after the next step */
        const int stop = fg_comm_max_int(comm, stop_requested); /* every rank stops at the same step */
        int do_ckpt = last || stop || (ckpt_every > 0 ? step % ckpt_every == 0 : do_eval);

        char row[256], val[48] = "";
        if (do_eval) {
            double tl = NAN, vl = NAN;
            if (fg_trainer_eval_loss(tr, FG_SPLIT_TRAIN, &tl) != FG_OK ||
                fg_trainer_eval_loss(tr, FG_SPLIT_VAL, &vl) != FG_OK) {
                fg_error(fg_last_status(), "evaluation at step %lld: %s", (long long)step, fg_last_error());
                stop_failed(&r->log, log_path, out, last_ckpt, r->other_pending, r->other_step);
            }
            t->last_train = tl;
            t->last_val = vl;
            /* nanoGPT: if losses['val'] < best_val_loss or always_save_checkpoint: save */
            const int improved = vl < t->best_val;
            if (improved || !best_only) t->best_val = vl;
            if (best_only) do_ckpt = improved;
            snprintf(val, sizeof val, "%.6f", vl);
            if (is_add) {
                if (fg_trainer_accuracy(tr, FG_SPLIT_VAL, eval_problems, &t->last_acc) != FG_OK) {
                    fg_error(fg_last_status(), "accuracy at step %lld: %s", (long long)step, fg_last_error());
                    stop_failed(&r->log, log_path, out, last_ckpt, r->other_pending, r->other_step);
                }
                say("step %lld: train loss %s, val loss %s (optimum %.4f), held-out exact match %.1f%% (%d problems)\n",
                    (long long)step, LOSS(tl), LOSS(vl), fg_source_optimal_loss(r->src), 100 * t->last_acc,
                    eval_problems);
            } else {
                say("step %lld: train loss %s, val loss %s\n", (long long)step, LOSS(tl), LOSS(vl));
            }
        }
        const double step_rate = dt > 0 ? s.tokens / dt : 0.0, step_mfu = fg_trainer_mfu(tr, step_rate);
        char mfu[32] = "";
        char peak[32] = "";
        /* 4 significant digits: a tiny model's MFU is tiny */
        if (isfinite(step_mfu)) snprintf(mfu, sizeof mfu, "%.4g", step_mfu);
        if (cpu) snprintf(peak, sizeof peak, "%.1f", r->peak.gflops);
        if (best_only && !do_eval) do_ckpt = 0;
        snprintf(row, sizeof row, "%lld,%.6f,%.6g,%.6f,%.1f,%s,%s,%s", (long long)step, s.loss, s.lr, s.grad_norm,
                 step_rate, val, mfu, peak);
        if (csv_add(&r->log, row)) {
            fg_error(FG_ERR_OOM, "out of memory for the log");
            stop_failed(&r->log, log_path, out, last_ckpt, r->other_pending, r->other_step);
        }

        /* progress */
        double now = fg_now(), rate = t->step_time > 0 ? t->tokens_done / t->step_time : 0;
        double eta = steps_timed ? (t->step_time / steps_timed) * (double)(cfg->steps - step) : 0;
        char el[32], et[32], rt[32], mf[64] = "";
        fmt_time(el, sizeof el, now - t->t_start);
        fmt_time(et, sizeof et, eta);
        fmt_rate(rt, sizeof rt, rate);
        const double run_mfu = fg_trainer_mfu(tr, rate);
        if (isfinite(run_mfu)) snprintf(mf, sizeof mf, " MFU %.1f%% of %.1f GF/s", 100 * run_mfu, r->peak.gflops);
        if (on_tty) {
            if (now - last_draw > 0.1 || last || do_eval) {
                fprintf(stderr, "\r\033[Kstep %lld/%lld | loss %s | lr %.2e | %s tok/s%s | %s elapsed | ETA %s",
                        (long long)step, (long long)cfg->steps, LOSS(s.loss), s.lr, rt, mf, el, et);
                fflush(stderr);
                last_draw = now;
            }
        } else if ((step % log_every == 0 || last) && !stdout_lost) {
            char cm[48] = "";
            if (comm->size > 1)
                snprintf(cm, sizeof cm, " comm %.1f ms/step", 1e3 * (comm->seconds - comm_start) / (double)steps_timed);
            printf("step %lld/%lld loss %s lr %.3e grad_norm %.3f %s tok/s%s elapsed %s ETA %s%s\n", (long long)step,
                   (long long)cfg->steps, LOSS(s.loss), s.lr, s.grad_norm, rt, mf, el, et, cm);
            check_stdout();
        }

        if (do_ckpt) {
            /* The earlier run that --overwrite replaces goes first; then the log: a checkpoint at
             * step s must never be on disk without the log's rows up to s (a resume keeps the rows
             * up to its checkpoint's step and drops later ones). */
            const int aside = r->other_pending && comm->rank == 0;
            if (aside) set_aside_other_run(out);
            fg_status cs = comm->rank == 0 ? csv_write(&r->log, log_path) : FG_OK;
            const int logged = cs == FG_OK && comm->rank == 0;
            if (cs == FG_OK) cs = save_checkpoint(out, tr);
            if (cs != FG_OK) {
                char msg[1024];
                snprintf(msg, sizeof msg, "checkpoint at step %lld: %s", (long long)step, fg_last_error());
                if (aside && restore_set_aside(out) == 0)
                    die(1, "%s; stopped. '%s' holds the earlier run again, untouched%s", msg, out,
                        r->other_step > 0 ? "" : " (its log)");
                if (aside)
                    die(1, "%s; stopped. The earlier run's files are in '%s/" ASIDE_DONE "' (the next `flashgrad "
                           "train --out %s` puts them back)",
                        msg, out, out);
                if (last_ckpt >= 0)
                    die(1, "%s; stopped. The last good checkpoint is in %s (step %lld).", msg, out,
                        (long long)last_ckpt);
                if (logged)
                    die(1, "%s; stopped before any checkpoint was written (log.csv has the %lld step%s run).", msg,
                        (long long)r->log.n, r->log.n == 1 ? "" : "s");
                die(1, "%s; stopped before any checkpoint was written.", msg);
            }
            if (aside) discard_set_aside(out);
            r->other_pending = 0;
            last_ckpt = step;
            set_crash_note(out, last_ckpt, 0, 0);
        }
        t->last_ckpt = last_ckpt;
        if (stop && best_only) {
            if (last_ckpt >= 0)
                say("interrupted by %s at step %lld: %s holds the checkpoint of the best val loss (step %lld); "
                    "continue from it with --resume\n",
                    signal_name(stop), (long long)step, out, (long long)last_ckpt);
            else
                say("interrupted by %s at step %lld before any evaluation: nothing written\n", signal_name(stop),
                    (long long)step);
            code = 128 + stop;
            break;
        }
        if (stop) {
            say("interrupted by %s at step %lld: checkpoint written to %s; continue with --resume\n", signal_name(stop),
                (long long)step, out);
            code = 128 + stop;
            break;
        }
    }
    if (on_tty) fputs("\r\033[K", stderr);
    return code;
}

/* After the last step: time, final losses, a few samples, where the checkpoint is. */
static void train_report(const train_args *a, const train_run *r, const train_totals *t) {
    const fg_flag *f = a->f;
    double wall = fg_now() - t->t_start;
    char el[32], rt[32];
    fmt_time(el, sizeof el, wall);
    fmt_rate(rt, sizeof rt, t->step_time > 0 ? t->tokens_done / t->step_time : 0);
    say("done: %lld steps in %s (%.1f s), %s tokens/s during training steps\n", (long long)r->cfg.steps, el, wall, rt);
    if (comm->size > 1)
        say("communication: %.1f ms per step (%.1f%% of the step time), %d processes, %.0f bytes sent and "
            "received per step by rank 0\n",
            1e3 * comm->seconds / (double)(r->cfg.steps - t->first_step), 100 * comm->seconds / t->step_time,
            comm->size, (double)t->comm_bytes / (double)(r->cfg.steps - t->first_step));
    if (r->src->kind == FG_SOURCE_ADDITION) {
        double opt = fg_source_optimal_loss(r->src);
        say("final: train loss %s, val loss %s (optimum %.4f, gap %s%s), held-out exact match %.1f%% of %d problems\n",
            LOSS(t->last_train), LOSS(t->last_val), opt, t->last_val - opt >= 0 ? "+" : "", LOSS(t->last_val - opt),
            100 * t->last_acc, (int)f[F_EVAL_PROBLEMS].i);
        if (f[F_SAMPLES].i > 0) show_addition_samples(r->tr, (int)f[F_SAMPLES].i);
    } else {
        say("final: train loss %s, val loss %s\n", LOSS(t->last_train), LOSS(t->last_val));
        if (f[F_SAMPLES].i > 0) show_text_samples(r->tr, (int)f[F_SAMPLES].i, r->cfg.seed);
    }
    if (a->ng.best_only && t->last_ckpt != r->cfg.steps) {
        if (t->last_ckpt >= 0)
            say("checkpoint: %s holds step %lld, the best val loss %s (always_save_checkpoint = False)  (flashgrad "
                "sample --ckpt %s)\n",
                a->out, (long long)t->last_ckpt, LOSS(t->best_val), a->out);
        else
            say("checkpoint: none written (no evaluation improved on the run's earlier best val loss %s)\n",
                LOSS(t->best_val));
        return;
    }
    say("checkpoint: %s  (flashgrad sample --ckpt %s)\n", a->out, a->out);
}

/* --eval-only: the train and val loss of the checkpoint in --out (with --resume), or of the model
 * the flags would start from, printed; nothing is written, and --out need not exist. */
static int eval_only(const train_args *a) {
    const fg_flag *f = a->f;
    if (comm->size > 1) die(2, "--eval-only runs in one process (not under mpirun)");
    if (f[F_RESUME].given) {
        if (a->run.device != FG_CPU) die(2, "--eval-only --resume evaluates on the CPU (leave out --device)");
        fg_eval_opts o = {.cmd = "train",
                          .ckpt = a->out,
                          .data = f[FG_TF_DATA].given ? f[FG_TF_DATA].s : NULL,
                          .data_bin = f[FG_TF_DATA_BIN].given ? f[FG_TF_DATA_BIN].s : NULL,
                          .batch_size = f[FG_TF_BATCH].given ? (int)f[FG_TF_BATCH].i : 0,
                          .eval_iters = f[F_EVAL_ITERS].given ? (int)f[F_EVAL_ITERS].i : 0,
                          .has_seed = f[FG_TF_SEED].given,
                          .seed = f[FG_TF_SEED].u};
        return fg_eval_run(&o);
    }
    train_run r;
    memset(&r, 0, sizeof r);
    configure_fresh(a, &r);
    r.tr = fg_trainer_create_dist(&r.cfg, r.src, comm, 0);
    if (!r.tr) die(1, "%s", fg_last_error());
    const fg_gpt_config *mc = &r.tr->model->cfg;
    say("eval-only: a freshly initialized model (seed %llu; --resume evaluates the run in %s): %d layers, %d heads, "
        "%d embd, block %d, vocabulary %d\n",
        (unsigned long long)r.cfg.seed, a->out, mc->n_layer, mc->n_head, mc->n_embd, mc->block_size, mc->vocab_size);
    say("eval: %d batches of %d x %d tokens per split, nothing written\n", r.cfg.eval_iters, r.cfg.batch_size, r.tr->T);
    double tl, vl;
    if (fg_trainer_eval_loss(r.tr, FG_SPLIT_TRAIN, &tl) != FG_OK || fg_trainer_eval_loss(r.tr, FG_SPLIT_VAL, &vl) != FG_OK)
        die(1, "evaluation: %s", fg_last_error());
    say("step 0: train loss %s, val loss %s\n", LOSS(tl), LOSS(vl));
    fg_trainer_free(r.tr);
    fg_source_free(r.src);
    return 0;
}

int fg_cmd_train(int argc, char **argv) {
    on_tty = isatty(STDERR_FILENO);
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is a write error (EPIPE), not the end of training */
    if (fg_comm_world(&comm) != FG_OK) die(1, "%s", fg_last_error());
    const int quiet = comm->rank > 0; /* rank 0 alone prints */
    if (quiet) {
        on_tty = 0;
        stdout_lost = 1;
    }
    train_args a;
    int rc = train_parse(argc, argv, &a);
    if (rc >= 0) {
        fg_comm_finish(comm);
        return rc;
    }
    if (a.f[F_EVAL_ONLY].given) {
        rc = eval_only(&a);
        fg_comm_finish(comm);
        return rc;
    }
    train_run r;
    train_configure(&a, &r);
    /* the peak MFU divides by: the user's, or this machine's, measured once and cached */
    if (r.cfg.model.device == FG_CPU) fg_peak_get(a.peak, a.peak_remeasure, &r.peak);
    agree_across_ranks(&a, &r);
    print_header(&a, &r);
    train_totals t;
    int code = train_loop(&a, &r, &t);
    if (code == 0 && !quiet) train_report(&a, &r, &t);
    fg_comm_finish(comm);
    csv_free(&r.log);
    fg_trainer_free(r.tr);
    fg_source_free(r.src);
    if (stdout_lost && !quiet) {
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
