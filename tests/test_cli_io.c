/* test_cli_io.c — how the flashgrad program treats its files and standard output: inputs that are
 * devices or FIFOs without a writer are refused at once (never read without a bound, never waited
 * on), lost standard output is an error, `flashgrad attention` replaces its output set as a whole,
 * and empty path flags are usage errors. Every command runs under `timeout`, so a hang fails the
 * test instead of stalling the suite. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensor/npy.h"
#include "tests/common.h"
#include "cli/cli_util.h"

static char g_dir[64];

static void make_dir(void) { fgt_make_tmpdir(g_dir, sizeof g_dir, "/tmp/fg_cli_io_XXXXXX"); }
static void remove_dir(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) {}
}

TestSuite(cli_io, .init = make_dir, .fini = remove_dir, .timeout = 120);

static void need_bin(void) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
}

/* Runs `<shell prefix> timeout 60 flashgrad <args>` in the test folder (a prefix ends with ';' or
 * '|') with stderr captured, and stdout too unless args redirect it. Outside the sanitizers the address space is capped at 4 GiB,
 * so a reader that runs away fails fast instead of filling the machine's memory. Returns the exit
 * status (124: it hung). */
static int run_fg(const char *prefix, const char *args, char *log, size_t n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && %s %s timeout 60 '%s' 2>&1 %s", g_dir,
             fgt_sanitize() ? "" : "ulimit -v 4194304;", prefix ? prefix : "", fgt_bin(), args);
    return fgt_run_cmd(cmd, log, n);
}

/* `flashgrad <args>` must exit `code` with `phrase` in its output, one line when it fails. */
static void expect_fg(const char *prefix, const char *args, int code, const char *phrase) {
    char log[8192];
    int rc = run_fg(prefix, args, log, sizeof log);
    cr_expect_eq(rc, code, "`flashgrad %s` exited %d (124: hung), expected %d:\n%s", args, rc, code, log);
    cr_expect(strstr(log, phrase), "`flashgrad %s`: output does not mention '%s':\n%s", args, phrase, log);
    if (code != 0) {
        int lines = 0;
        for (const char *c = log; *c; c++) lines += *c == '\n';
        cr_expect_eq(lines, 1, "`flashgrad %s`: an error should be one line, got %d:\n%s", args, lines, log);
    }
}

static char *path_in(char *buf, size_t n, const char *rel) {
    snprintf(buf, n, "%s/%s", g_dir, rel);
    return buf;
}

/* A float32 .npy of shape (1, 1, rows, 2) with values from a formula (seed varies them). */
static void save_input(const char *rel, int64_t rows, float seed) {
    int64_t shape[4] = {1, 1, rows, 2};
    float *x = malloc((size_t)rows * 2 * sizeof *x);
    cr_assert(x);
    for (int64_t i = 0; i < rows * 2; i++) x[i] = seed + 0.01f * (float)(i % 97) - 0.3f * (float)(i % 5);
    char p[256];
    path_in(p, sizeof p, rel);
    cr_assert_eq(fg_npy_save_raw(p, FG_F32, 4, shape, x), FG_OK, "%s", fg_last_error());
    free(x);
}

/* The bytes of a file (NULL if it cannot be read); *n its size. */
static unsigned char *slurp(const char *rel, size_t *n) {
    char p[256];
    path_in(p, sizeof p, rel);
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    unsigned char *b = malloc(1 << 20);
    *n = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

/* The entries of folder rel, sorted, joined by ' '. */
static void list_dir(const char *rel, char *out, size_t n) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cd '%s/%s' && ls -A | sort | tr '\\n' ' '", g_dir, rel);
    cr_assert_eq(fgt_run_cmd(cmd, out, n), 0, "cannot list %s", rel);
}

static void make_fifo(const char *rel) {
    char p[256];
    path_in(p, sizeof p, rel);
    cr_assert_eq(mkfifo(p, 0600), 0, "mkfifo %s: %s", p, strerror(errno));
}

/* A checkpoint from one step of a tiny model, in folder rel. */
static void make_checkpoint(const char *rel) {
    char args[512];
    snprintf(args, sizeof args,
             "train --task addition --digits 1 --n-layer 1 --n-head 2 --n-embd 16 --batch-size 8 --steps 1 "
             "--eval-every 0 --samples 0 --threads 1 --out %s",
             rel);
    expect_fg(NULL, args, 0, "checkpoint:");
}

/* ---- inputs that are not regular files ---- */

Test(cli_io, device_inputs_are_refused_without_reading) {
    need_bin();
    save_input("k.npy", 3, 0.5f);
    expect_fg(NULL, "sample --ckpt /dev/zero", 1, "character device");
    expect_fg(NULL, "attention --q /dev/zero --k k.npy --v k.npy --out o", 1, "character device");
    expect_fg(NULL, "attention --q k.npy --k k.npy --v k.npy --do /dev/zero --out o", 1, "character device");
    expect_fg(NULL, "train --data /dev/zero --steps 1 --out r", 1, "character device");
}

Test(cli_io, fifo_without_a_writer_is_refused_at_once) {
    need_bin();
    save_input("k.npy", 3, 0.5f);
    make_fifo("fifo");
    expect_fg(NULL, "train --data fifo --steps 1 --out r", 1, "FIFO");
    expect_fg(NULL, "attention --q fifo --k k.npy --v k.npy --out o", 1, "FIFO");
    expect_fg(NULL, "attention --q k.npy --k k.npy --v fifo --out o", 1, "FIFO");
    expect_fg(NULL, "sample --ckpt fifo", 1, "FIFO");
    struct stat st;
    char p[256];
    path_in(p, sizeof p, "o");
    cr_expect(stat(p, &st) != 0, "a refused run created its output folder");
}

Test(cli_io, npy_inputs_from_a_pipe_still_work) {
    need_bin();
    save_input("q.npy", 4, 0.1f);
    save_input("k.npy", 3, 0.5f);
    expect_fg("cat q.npy |", "attention --q /dev/stdin --k k.npy --v k.npy --out piped", 0, "");
    expect_fg(NULL, "attention --q q.npy --k k.npy --v k.npy --out direct", 0, "");
    size_t a, b;
    unsigned char *x = slurp("piped/o.npy", &a), *y = slurp("direct/o.npy", &b);
    cr_assert(x && y, "o.npy missing");
    cr_expect(a == b && !memcmp(x, y, a), "O from a pipe differs from O from the file");
    free(x);
    free(y);
}

/* ---- standard output ---- */

Test(cli_io, lost_standard_output_is_an_error) {
    need_bin();
    make_checkpoint("ck");
    const char *full = "cannot write to standard output: No space left on device";
    expect_fg(NULL, "sample --ckpt ck --tokens 20 >/dev/full", 1, full);
    expect_fg(NULL, "sample --ckpt ck --tokens 20 --num-samples 3 >/dev/full", 1, "cannot write to standard output");
    expect_fg(NULL, "gradcheck attention >/dev/full", 1, "cannot write to standard output");
    expect_fg(NULL, "--help >/dev/full", 1, full);
    expect_fg(NULL, "sample --help >/dev/full", 1, full);
    expect_fg(NULL, "attention --help >/dev/full", 1, full);
    expect_fg(NULL, "bench attention --n 16 --impl flash --no-sgemm --repeat 1 >/dev/full", 1,
              "cannot write to standard output");
    expect_fg(NULL, "sample --ckpt ck --tokens 20 >&-", 1, "cannot write to standard output: Bad file descriptor");
    /* the same commands with a working stdout succeed; a closed stdout that nothing was printed to
     * loses nothing */
    expect_fg(NULL, "sample --ckpt ck --tokens 20 >/dev/null", 0, "");
    expect_fg(NULL, "gradcheck attention >/dev/null", 0, "");
    save_input("k.npy", 3, 0.5f);
    expect_fg(NULL, "attention --q k.npy --k k.npy --v k.npy --out o >&-", 0, "");
}

Test(cli_io, csv_commit_fails_after_a_lost_write_and_keeps_the_old_file) {
    char p[256];
    path_in(p, sizeof p, "log.csv");
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fputs("old\n", f);
    fclose(f);
    fg_csv_file c;
    f = fg_csv_open_atomic(&c, p);
    cr_assert(f, "%s", fg_last_error());
    fputs("new\n", f);
    (void)fgetc(f); /* reading a write-only stream fails and sets its error flag, as a lost write would */
    cr_assert(ferror(f));
    cr_expect_eq(fg_csv_commit(&c), -1, "a stream with a failed write was committed");
    size_t n;
    unsigned char *b = slurp("log.csv", &n);
    cr_expect(b && n == 4 && !memcmp(b, "old\n", 4), "the old file was replaced");
    free(b);
    char names[256];
    list_dir(".", names, sizeof names);
    cr_expect_str_eq(names, "log.csv ", "temporary files left");
}

/* ---- the attention output set ---- */

static unsigned char *g_old[5];
static size_t g_old_n[5];
static const char *const g_set[5] = {"o.npy", "lse.npy", "dq.npy", "dk.npy", "dv.npy"};

/* Runs attention with --do into folder out (inputs q, k (Nk rows), dO), expecting success, and
 * keeps the five outputs' bytes. */
static void first_run(const char *out) {
    char args[256];
    snprintf(args, sizeof args, "attention --q q.npy --k k3.npy --v k3.npy --do do.npy --out %s", out);
    expect_fg(NULL, args, 0, "");
    for (int i = 0; i < 5; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "%s/%s", out, g_set[i]);
        g_old[i] = slurp(rel, &g_old_n[i]);
        cr_assert(g_old[i], "%s missing after the first run", rel);
    }
}

static void expect_old_set(const char *out, const char *when) {
    for (int i = 0; i < 5; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "%s/%s", out, g_set[i]);
        size_t n;
        unsigned char *b = slurp(rel, &n);
        cr_expect(b && n == g_old_n[i] && !memcmp(b, g_old[i], n), "%s: %s is not the previous run's", when, rel);
        free(b);
    }
    char names[512];
    list_dir(out, names, sizeof names);
    cr_expect_str_eq(names, "dk.npy dq.npy dv.npy lse.npy o.npy ", "%s: the folder holds other entries", when);
}

static void free_old(void) {
    for (int i = 0; i < 5; i++) free(g_old[i]), g_old[i] = NULL;
}

Test(cli_io, attention_failed_write_leaves_the_previous_set_intact) {
    need_bin();
    save_input("q.npy", 4, 0.1f);
    save_input("do.npy", 4, -0.2f);
    save_input("k3.npy", 3, 0.5f);
    save_input("kbig.npy", 4096, 0.7f); /* dk, dv: 32 KiB each, past the file size limit below */
    first_run("out");
    /* Files may not exceed 8 KiB (ulimit -f counts 512-byte blocks; SIGXFSZ ignored so the write
     * fails with EFBIG): o, lse and dq fit, dk does not, so the fourth write of the set fails. */
    expect_fg("trap '' XFSZ; ulimit -f 16;", "attention --q q.npy --k kbig.npy --v kbig.npy --do do.npy --out out", 1,
              "dk.npy");
    expect_old_set("out", "after a failed write");
    free_old();
}

Test(cli_io, attention_directory_in_the_way_changes_nothing) {
    need_bin();
    save_input("q.npy", 4, 0.1f);
    save_input("do.npy", 4, -0.2f);
    save_input("k3.npy", 3, 0.5f);
    first_run("out");
    /* a folder where dv.npy goes: caught before anything is written */
    char p[256];
    path_in(p, sizeof p, "out/dv.npy");
    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(mkdir(p, 0700), 0);
    free(g_old[4]);
    g_old[4] = NULL;
    g_old_n[4] = 0;
    expect_fg(NULL, "attention --q q.npy --k q.npy --v q.npy --do do.npy --out out", 1, "is a directory");
    for (int i = 0; i < 4; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "out/%s", g_set[i]);
        size_t n;
        unsigned char *b = slurp(rel, &n);
        cr_expect(b && n == g_old_n[i] && !memcmp(b, g_old[i], n), "%s is not the previous run's", rel);
        free(b);
    }
    char names[512];
    list_dir("out", names, sizeof names);
    cr_expect_str_eq(names, "dk.npy dq.npy dv.npy lse.npy o.npy ", "the folder holds other entries");
    free_old();
}

Test(cli_io, attention_success_leaves_exactly_this_runs_set) {
    need_bin();
    save_input("q.npy", 4, 0.1f);
    save_input("do.npy", 4, -0.2f);
    save_input("k3.npy", 3, 0.5f);
    save_input("k5.npy", 5, 0.9f);
    first_run("out");
    char p[256];
    path_in(p, sizeof p, "out/notes.txt"); /* not part of the set: kept */
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fputs("mine\n", f);
    fclose(f);
    /* forward only, another K: o and lse are new, the old gradients (of K with 3 rows) are gone */
    expect_fg(NULL, "attention --q q.npy --k k5.npy --v k5.npy --out out", 0, "");
    char names[512];
    list_dir("out", names, sizeof names);
    cr_expect_str_eq(names, "lse.npy notes.txt o.npy ", "after a forward-only run");
    expect_fg(NULL, "attention --q q.npy --k k5.npy --v k5.npy --out direct", 0, "");
    for (int i = 0; i < 2; i++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "out/%s", g_set[i]);
        snprintf(b, sizeof b, "direct/%s", g_set[i]);
        size_t na, nb;
        unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
        cr_expect(x && y && na == nb && !memcmp(x, y, na), "%s is not this run's", a);
        free(x);
        free(y);
    }
    free_old();
}

/* ---- empty path flags ---- */

Test(cli_io, empty_path_flags_are_usage_errors) {
    need_bin();
    save_input("k.npy", 3, 0.5f);
    expect_fg(NULL, "attention --q k.npy --k k.npy --v k.npy --out ''", 2, "--out: empty path");
    expect_fg(NULL, "attention --q '' --k k.npy --v k.npy --out o", 2, "--q: empty path");
    expect_fg(NULL, "attention --q k.npy --k '' --v k.npy --out o", 2, "--k: empty path");
    expect_fg(NULL, "attention --q k.npy --k k.npy --v '' --out o", 2, "--v: empty path");
    expect_fg(NULL, "attention --q k.npy --k k.npy --v k.npy --do '' --out o", 2, "--do: empty path");
    expect_fg(NULL, "bench attention --n 16 --csv ''", 2, "--csv: empty path");
    expect_fg(NULL, "train --out ''", 2, "--out");
    expect_fg(NULL, "train --data '' --out o", 2, "--data");
    expect_fg(NULL, "sample --ckpt ''", 2, "--ckpt");
    expect_fg(NULL, "bench train --data ''", 2, "--data");
}

/* ---- every input is a regular file ----
 * Each input a command reads (a config, a text, token and tokenizer files, meta.pkl, model files,
 * checkpoints, a Hugging Face config.json) is put there as each kind of special file, and the
 * command must refuse it promptly in one line naming it: never block on it, never read it. */

typedef enum { SP_FIFO, SP_FIFO_WRITER, SP_DIR, SP_DEV_ZERO, SP_LINK_TO_FIFO, SP_COUNT } special_kind;
static const char *const special_names[SP_COUNT] = {"a FIFO with no writer", "a FIFO whose writer never writes",
                                                     "a directory", "a link to /dev/zero", "a link to a FIFO"};
/* what the refusal says the file is */
static const char *const special_phrase[SP_COUNT] = {"FIFO", "FIFO", "directory", "character device", "FIFO"};

/* Makes `rel` a special file of `kind`; for SP_FIFO_WRITER, *writer is a child process that holds
 * the FIFO open for writing and never writes (the caller kills it), else -1. */
static void make_special(const char *rel, special_kind kind, pid_t *writer) {
    char p[256], target[300];
    path_in(p, sizeof p, rel);
    *writer = -1;
    switch (kind) {
    case SP_FIFO: cr_assert_eq(mkfifo(p, 0600), 0, "mkfifo %s: %s", p, strerror(errno)); break;
    case SP_FIFO_WRITER: {
        cr_assert_eq(mkfifo(p, 0600), 0, "mkfifo %s: %s", p, strerror(errno));
        int sync[2];
        cr_assert_eq(pipe(sync), 0);
        pid_t pid = fork();
        cr_assert(pid >= 0);
        if (pid == 0) { /* O_RDWR: open at once on Linux, and it holds the write end */
            int fd = open(p, O_RDWR);
            char c = fd >= 0 ? 'y' : 'n';
            if (write(sync[1], &c, 1) != 1) _exit(1);
            for (;;) pause();
        }
        close(sync[1]);
        char c = 0;
        cr_assert(read(sync[0], &c, 1) == 1 && c == 'y', "the writer could not open %s", p);
        close(sync[0]);
        *writer = pid;
        break;
    }
    case SP_DIR: cr_assert_eq(mkdir(p, 0700), 0, "mkdir %s: %s", p, strerror(errno)); break;
    case SP_DEV_ZERO: cr_assert_eq(symlink("/dev/zero", p), 0, "symlink %s: %s", p, strerror(errno)); break;
    default:
        snprintf(target, sizeof target, "%s.target", p);
        cr_assert_eq(mkfifo(target, 0600), 0, "mkfifo %s: %s", target, strerror(errno));
        cr_assert_eq(symlink(target, p), 0, "symlink %s: %s", p, strerror(errno));
    }
}

static void remove_special(const char *rel, pid_t writer) {
    if (writer > 0) {
        kill(writer, SIGKILL);
        waitpid(writer, NULL, 0);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cd '%s' && rm -rf '%s' '%s.target'", g_dir, rel, rel);
    cr_assert_eq(system(cmd), 0);
}

/* A raw uint16 token file of n ids below 65 (nanoGPT's format). */
static void save_tokens(const char *rel, size_t n) {
    char p[256];
    path_in(p, sizeof p, rel);
    FILE *f = fopen(p, "wb");
    cr_assert(f, "cannot create %s", p);
    for (size_t i = 0; i < n; i++) {
        uint16_t id = (uint16_t)(i * 7 % 65);
        cr_assert_eq(fwrite(&id, 2, 1, f), 1);
    }
    cr_assert_eq(fclose(f), 0);
}

#define TINY_RUN                                                                                                       \
    "--n-layer 1 --n-head 2 --n-embd 16 --block-size 8 --batch-size 4 --steps 1 --eval-every 0 --eval-iters 1 "         \
    "--samples 0 --threads 1"

Test(cli_io, every_input_that_is_not_a_regular_file_is_refused_in_one_line, .timeout = 900) {
    need_bin();
    cr_assert_eq(mkdir(path_in((char[256]){0}, 256, "nano"), 0700), 0);
    save_tokens("nano/train.bin", 2000);
    save_tokens("nano/val.bin", 500);
    save_tokens("ids.bin", 2000);
    save_tokens("ids_train.bin", 2000);
    cr_assert_eq(mkdir(path_in((char[256]){0}, 256, "hf"), 0700), 0);
    cr_assert_eq(mkdir(path_in((char[256]){0}, 256, "run"), 0700), 0);
    /* a model trained on token ids, for --tokenizer */
    expect_fg(NULL, "train --data-bin ids.bin --vocab-size 65 " TINY_RUN " --out ids_run", 0, "checkpoint:");
    static const struct {
        const char *at;   /* where the special file goes */
        const char *args; /* the command that reads it */
        int dir_ok;       /* a folder is this input's own kind (then its refusal says what it lacks) */
    } rows[] = {
        {"x.py", "train x.py --out r", 0},                                 /* a nanoGPT config */
        {"x.txt", "train --data x.txt " TINY_RUN " --out r", 0},           /* a text */
        {"x.bin", "train --data-bin x.bin --vocab-size 65 " TINY_RUN " --out r", 1}, /* a token file */
        {"nano/meta.pkl", "train --data-bin nano " TINY_RUN " --out r", 0},          /* nanoGPT's meta.pkl */
        {"ids_val.bin", "train --data-bin ids_train.bin --vocab-size 65 " TINY_RUN " --out r", 0}, /* its val file */
        {"m.bin", "sample --ckpt m.bin", 1},                               /* a model file or folder */
        {"m.bin", "eval --ckpt m.bin", 1},
        {"m.bin", "train --init-from m.bin --data-bin nano " TINY_RUN " --out r", 1},
        {"run/model.safetensors", "sample --ckpt run", 0}, /* a flashgrad run's model file */
        {"hf/config.json", "sample --ckpt hf", 0},         /* a Hugging Face folder's config */
        {"tok.bin", "sample --ckpt ids_run --tokenizer tok.bin --tokens 2", 0}, /* llm.c's tokenizer */
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (int k = 0; k < SP_COUNT; k++) {
            pid_t writer;
            make_special(rows[r].at, (special_kind)k, &writer);
            char log[8192];
            int rc = run_fg(NULL, rows[r].args, log, sizeof log);
            remove_special(rows[r].at, writer);
            int lines = 0;
            for (const char *c = log; *c; c++) lines += *c == '\n';
            cr_expect(rc != 0 && rc != 124, "`flashgrad %s` with %s as %s exited %d (124: hung):\n%s", rows[r].args,
                      special_names[k], rows[r].at, rc, log);
            cr_expect(lines == 1 && strstr(log, rows[r].at), "`flashgrad %s` with %s as %s: not one line naming it:\n%s",
                      rows[r].args, special_names[k], rows[r].at, log);
            if (!(k == SP_DIR && rows[r].dir_ok))
                cr_expect(strstr(log, special_phrase[k]), "`flashgrad %s` with %s as %s does not say '%s':\n%s",
                          rows[r].args, special_names[k], rows[r].at, special_phrase[k], log);
        }
}

/* The text a checkpoint recorded, read again on --resume, and the peak cache, as special files:
 * the resume is refused in one line naming the text; the cache is set aside with one warning (the
 * run measures its peak and goes on). */
Test(cli_io, recorded_inputs_and_the_peak_cache_that_are_not_regular_files_do_not_block, .timeout = 900) {
    need_bin();
    char p[256];
    path_in(p, sizeof p, "t.txt");
    FILE *f = fopen(p, "w");
    cr_assert(f);
    for (int i = 0; i < 200; i++) fputs("to be or not to be, that is the question. ", f);
    cr_assert_eq(fclose(f), 0);
    expect_fg(NULL, "train --data t.txt " TINY_RUN " --out tr", 0, "checkpoint:");
    char keep[256], cache[300];
    path_in(keep, sizeof keep, "t.keep");
    cr_assert_eq(rename(p, keep), 0);
    snprintf(cache, sizeof cache, "XDG_CACHE_HOME='%s/cache'; export XDG_CACHE_HOME;", g_dir);
    cr_assert_eq(mkdir(path_in((char[256]){0}, 256, "cache"), 0700), 0);
    cr_assert_eq(mkdir(path_in((char[256]){0}, 256, "cache/flashgrad"), 0700), 0);
    for (int k = 0; k < SP_COUNT; k++) {
        pid_t writer;
        char log[8192];
        make_special("t.txt", (special_kind)k, &writer);
        int rc = run_fg(NULL, "train --resume --out tr --steps 2", log, sizeof log);
        remove_special("t.txt", writer);
        int lines = 0;
        for (const char *c = log; *c; c++) lines += *c == '\n';
        cr_expect(rc != 0 && rc != 124 && lines == 1 && strstr(log, "t.txt") && strstr(log, special_phrase[k]),
                  "--resume with %s as its text: exit %d (124: hung):\n%s", special_names[k], rc, log);

        make_special("cache/flashgrad/peak.tsv", (special_kind)k, &writer);
        rc = run_fg(cache, "train --task addition --digits 1 " TINY_RUN " --out pk", log, sizeof log);
        remove_special("cache/flashgrad/peak.tsv", writer);
        cr_expect(rc == 0 && strstr(log, "peak.tsv is not a valid peak cache"),
                  "a run with %s as its peak cache: exit %d (124: hung):\n%s", special_names[k], rc, log);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s/pk'", g_dir);
        cr_assert_eq(system(cmd), 0);
    }
}
