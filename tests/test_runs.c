/* test_runs.c — what `flashgrad train` promises about its run folder (--out): it never replaces
 * another run's files without --overwrite, a failed run leaves an earlier run as it was, only its
 * own leftover temporaries are removed, one writer holds the folder at a time, SIGTERM and SIGHUP
 * checkpoint like SIGINT, and a closed stdout does not stop training.
 *
 * Every test runs the real program (FG_BIN) in a fresh temporary folder and checks the files it
 * leaves byte for byte, or the checkpoint's tensors bit for bit against an uninterrupted run.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tensor/safetensors.h"
#include "tests/common.h"

static char dir[256];

static void setup(void) { fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_runs.XXXXXX"); }
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) cr_log_warn("could not remove %s", dir);
}

static void need_bin(void) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
}

/* A tiny model: a run of a few hundred steps takes well under a second. */
#define TINY                                                                                                           \
    "--task addition --digits 1 --n-layer 1 --n-head 2 --n-embd 16 --batch-size 8 --eval-every 0 "                     \
    "--eval-iters 1 --eval-problems 10 --samples 0 --threads 1"

/* `flashgrad <args>` in the test folder, stderr included in log; returns the exit status. */
static int run(const char *args, char *log, size_t n) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>&1", dir, fgt_bin(), args);
    return fgt_run_cmd(cmd, log, n);
}

static void run_ok(const char *args) {
    char log[8192];
    int st = run(args, log, sizeof log);
    cr_assert_eq(st, 0, "`flashgrad %s` exited %d:\n%s", args, st, log);
}

static char *path(const char *rel) {
    static char p[4][600];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, rel);
    return p[k];
}

/* The whole file, or NULL when it does not exist. Caller frees. */
static char *slurp(const char *rel, size_t *n) {
    void *buf = NULL;
    if (fg_read_file(path(rel), 0, &buf, n) != FG_OK) {
        fg_clear_error();
        return NULL;
    }
    return buf;
}

/* The run files of a folder, kept to check later that nothing changed. */
typedef struct {
    char *data[3];
    size_t n[3];
} snapshot;
static const char *const snap_files[3] = {"model.safetensors", "optimizer.safetensors", "log.csv"};

static snapshot take(const char *run_dir) {
    snapshot s;
    for (int i = 0; i < 3; i++) {
        char rel[300];
        snprintf(rel, sizeof rel, "%s/%s", run_dir, snap_files[i]);
        s.data[i] = slurp(rel, &s.n[i]);
        cr_assert(s.data[i], "%s is missing", rel);
    }
    return s;
}

static void expect_unchanged(const snapshot *s, const char *run_dir, const char *after) {
    for (int i = 0; i < 3; i++) {
        char rel[300];
        size_t n = 0;
        snprintf(rel, sizeof rel, "%s/%s", run_dir, snap_files[i]);
        char *now = slurp(rel, &n);
        cr_expect(now && n == s->n[i] && !memcmp(now, s->data[i], n), "%s changed after %s", rel, after);
        free(now);
    }
}

static void drop(snapshot *s) {
    for (int i = 0; i < 3; i++) free(s->data[i]);
}

/* train's log header (train/run_folder.h) */
#define CSV_HEADER_FOR_TEST "step,loss,lr,grad_norm,tokens_per_s,val_loss,mfu"

static int one_line(const char *log) {
    int lines = 0;
    for (const char *c = log; *c; c++) lines += *c == '\n';
    return lines == 1;
}

Test(runs, a_fresh_run_refuses_a_folder_that_holds_another_run, .init = setup, .fini = teardown, .timeout = 120) {
    need_bin();
    run_ok("train " TINY " --steps 30 --out r");
    snapshot before = take("r");
    char log[8192];
    int st = run("train " TINY " --steps 3 --out r", log, sizeof log);
    cr_expect_eq(st, 2, "a fresh run into a finished run's folder exited %d:\n%s", st, log);
    cr_expect(strstr(log, "step 30") && strstr(log, "--resume") && strstr(log, "--overwrite") && one_line(log),
              "the refusal should be one line naming the checkpoint's step and --resume / --overwrite:\n%s", log);
    expect_unchanged(&before, "r", "a refused fresh run");
    drop(&before);

    /* a folder with only an earlier run's log (it failed before its first checkpoint) is a run too */
    cr_assert(mkdir(path("l"), 0777) == 0);
    FILE *f = fopen(path("l/log.csv"), "w");
    cr_assert(f);
    fputs("step,loss,lr,grad_norm,tokens_per_s,val_loss\n1,2.5,0.001,1.0,100.0,\n", f);
    fclose(f);
    st = run("train " TINY " --steps 3 --out l", log, sizeof log);
    cr_expect(st == 2 && strstr(log, "log.csv") && strstr(log, "--overwrite"), "log-only folder: exit %d:\n%s", st,
              log);
    size_t n;
    char *kept = slurp("l/log.csv", &n);
    cr_expect(kept && strstr(kept, "1,2.5,0.001"), "the earlier log was replaced");
    free(kept);

    st = run("train " TINY " --steps 40 --out r --resume --overwrite", log, sizeof log);
    cr_expect_eq(st, 2, "--resume with --overwrite should be a usage error:\n%s", log);
}

Test(runs, a_failed_overwrite_run_leaves_the_earlier_run_and_its_log_untouched, .init = setup, .fini = teardown,
     .timeout = 120) {
    need_bin();
    run_ok("train " TINY " --steps 30 --out r");
    snapshot before = take("r");
    /* diverges at step 2 or 3, before its first checkpoint (at the end, step 5) */
    char log[8192];
    int st = run("train " TINY " --steps 5 --out r --overwrite --lr 10 --warmup 0 --weight-decay 1e6", log, sizeof log);
    cr_expect_eq(st, 1, "the diverging run exited %d:\n%s", st, log);
    cr_expect(strstr(log, "step 30") && strstr(log, "untouched"),
              "the message should say the earlier checkpoint (step 30) is untouched:\n%s", log);
    cr_expect(!strstr(log, "before any checkpoint was written"), "the folder holds a checkpoint:\n%s", log);
    expect_unchanged(&before, "r", "a failed --overwrite run");
    drop(&before);
    cr_expect(access(path("r/optimizer.prev.safetensors"), F_OK) != 0, "a failed run left an optimizer.prev file");

    /* a --resume of that folder still continues the earlier run, with its own log */
    run_ok("train --resume --steps 32 --out r --samples 0 --eval-problems 10");
    size_t n;
    char *l = slurp("r/log.csv", &n);
    int rows = 0;
    for (char *c = l; c && *c; c++) rows += *c == '\n';
    cr_expect_eq(rows, 1 + 32, "the resumed log has %d lines", rows);
    free(l);

    /* --overwrite that succeeds replaces the run */
    run_ok("train " TINY " --steps 3 --out r --overwrite");
    l = slurp("r/log.csv", &n);
    rows = 0;
    for (char *c = l; c && *c; c++) rows += *c == '\n';
    cr_expect_eq(rows, 1 + 3, "the replacing run's log has %d lines", rows);
    free(l);
    run_ok("sample --ckpt r --tokens 2 --prompt 1");
}

Test(runs, only_flashgrads_own_leftover_temporaries_are_removed, .init = setup, .fini = teardown, .timeout = 120) {
    need_bin();
    run_ok("train " TINY " --steps 3 --out r");
    static const char *const users[] = {"r/model.safetensors.tmp.backup", "r/log.csv.tmp.mine",
                                        "r/model.safetensors" FG_TMP_MARK "abc", "r/notes" FG_TMP_MARK "Ab12Cd",
                                        "r/log.csv" FG_TMP_MARK "Ab12Cd.old"};
    static const char *const ours[] = {"r/model.safetensors" FG_TMP_MARK "Ab12Cd", "r/log.csv" FG_TMP_MARK "x9Y8z7",
                                       "r/optimizer.safetensors" FG_TMP_MARK "000000"};
    for (size_t i = 0; i < sizeof users / sizeof users[0]; i++) {
        FILE *f = fopen(path(users[i]), "w");
        cr_assert(f);
        fputs("a user's file\n", f);
        fclose(f);
    }
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++) {
        FILE *f = fopen(path(ours[i]), "w");
        cr_assert(f);
        fputs("half a checkpoint", f);
        fclose(f);
    }
    run_ok("train --resume --steps 5 --out r --samples 0 --eval-problems 10");
    for (size_t i = 0; i < sizeof users / sizeof users[0]; i++)
        cr_expect(access(path(users[i]), F_OK) == 0, "the user's file %s was removed", users[i]);
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        cr_expect(access(path(ours[i]), F_OK) != 0, "the stale temporary %s was left", ours[i]);
}

Test(runs, a_second_writer_is_refused_while_sample_still_reads, .init = setup, .fini = teardown, .timeout = 120) {
    need_bin();
    run_ok("train " TINY " --steps 3 --out r");
    snapshot before = take("r");
    /* hold the folder's lock as a running train does */
    int fd = open(path("r/train.lock"), O_RDWR);
    cr_assert(fd >= 0, "train left no train.lock");
    cr_assert(flock(fd, LOCK_EX | LOCK_NB) == 0, "the lock was still held after train ended");
    char log[8192];
    int st = run("train --resume --steps 6 --out r --samples 0", log, sizeof log);
    cr_expect(st == 1 && strstr(log, "another") && one_line(log), "a resume of a locked folder: exit %d:\n%s", st, log);
    st = run("train " TINY " --steps 3 --out r --overwrite", log, sizeof log);
    cr_expect(st == 1 && strstr(log, "another"), "an --overwrite run into a locked folder: exit %d:\n%s", st, log);
    expect_unchanged(&before, "r", "refused writers");
    drop(&before);
    st = run("sample --ckpt r --tokens 2 --prompt 1", log, sizeof log);
    cr_expect_eq(st, 0, "sample of a folder being written: exit %d:\n%s", st, log);
    close(fd); /* the lock goes with the descriptor, as it does when a train process dies */
    run_ok("train --resume --steps 6 --out r --samples 0 --eval-problems 10");
}

/* Sends `sig` to a long run once it has logged step 50; it must checkpoint the step it was in and
 * exit 128 + sig. The checkpoint must equal an uninterrupted run to that step, and resuming it must
 * equal an uninterrupted run to a later step, bit for bit. */
static void signal_checkpoints(int sig, const char *name) {
    need_bin();
    const long long total = 2000000; /* far more than the run gets to before the signal */
    char logp[300];
    snprintf(logp, sizeof logp, "%s/run.log", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (chdir(dir) != 0) _exit(99);
        int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(fgt_bin(), fgt_bin(), "train", "--task", "addition", "--digits", "1", "--n-layer", "1", "--n-head", "2",
              "--n-embd", "16", "--batch-size", "8", "--eval-every", "0", "--eval-iters", "1", "--eval-problems", "10",
              "--samples", "0", "--threads", "1", "--log-every", "1", "--steps", "2000000", "--out", "sig",
              (char *)NULL);
        _exit(98);
    }
    int seen = 0;
    for (int i = 0; i < 6000 && !seen; i++) {
        usleep(10000);
        size_t n = 0;
        char *l = slurp("run.log", &n);
        seen = l && strstr(l, "step 50/");
        free(l);
    }
    if (!seen) kill(pid, SIGKILL);
    cr_assert(seen, "the run never logged step 50");
    kill(pid, sig);
    int status;
    waitpid(pid, &status, 0);
    size_t n = 0;
    char *l = slurp("run.log", &n);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig, "after %s the exit status is %d (want %d):\n%s",
              name, WIFEXITED(status) ? WEXITSTATUS(status) : -1, 128 + sig, l);
    cr_expect(l && strstr(l, "interrupted by") && strstr(l, name), "no interruption message naming %s:\n%s", name, l);
    free(l);
    long long step = fgt_ckpt_step(path("sig"));
    cr_assert(step >= 50 && step < total, "checkpoint at step %lld", step);

    /* the same schedule, uninterrupted, to the signal's step and to 40 steps later */
    char args[1024];
    snprintf(args, sizeof args, "train " TINY " --steps %lld --lr-decay-steps %lld --out ref", step, total);
    run_ok(args);
    fgt_expect_same_run_state(path("sig"), path("ref"));
    snprintf(args, sizeof args, "train " TINY " --steps %lld --lr-decay-steps %lld --out ref2", step + 40, total);
    run_ok(args);
    snprintf(args, sizeof args, "train --resume --steps %lld --out sig --samples 0 --eval-problems 10", step + 40);
    run_ok(args);
    fgt_expect_same_run_state(path("sig"), path("ref2"));
}

Test(runs, sigterm_checkpoints_exits_143_and_resumes_bit_for_bit, .init = setup, .fini = teardown, .timeout = 300) {
    signal_checkpoints(SIGTERM, "SIGTERM");
}

Test(runs, sighup_checkpoints_exits_129_and_resumes_bit_for_bit, .init = setup, .fini = teardown, .timeout = 300) {
    signal_checkpoints(SIGHUP, "SIGHUP");
}

Test(runs, sigint_checkpoints_exits_130_and_resumes_bit_for_bit, .init = setup, .fini = teardown, .timeout = 300) {
    signal_checkpoints(SIGINT, "SIGINT");
}

/* The first step of a model with GPT-2's vocabulary and little else is nearly all oneDNN products
 * of the fused LM head, deeper than its kernels' stack frame holds (K = 128, 320 and 50304 rows):
 * the kernels then run with the stack pointer in a heap workspace. A stop signal landing there
 * must still end in a clean stop after the step, with its checkpoint, not in heap corruption.
 * SIGHUP, SIGTERM and SIGINT (each handled once) go out 0.6, 1.4 and 2.2 s into the first step,
 * as long as it has not been logged; the checkpoint must then equal an uninterrupted run's. */
Test(runs, stop_signals_in_the_first_step_of_a_large_vocabulary_model_checkpoint, .init = setup, .fini = teardown,
     .timeout = 300) {
    need_bin();
    const unsigned V = 50304;
    static const char *const split[2] = {"tok/train.bin", "tok/val.bin"};
    char tok[300];
    snprintf(tok, sizeof tok, "%s/tok", dir);
    cr_assert_eq(mkdir(tok, 0755), 0);
    uint32_t r = 12345;
    for (int f = 0; f < 2; f++) {
        uint16_t ids[20000];
        for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
            ids[i] = (uint16_t)(((r = r * 1664525u + 1013904223u) >> 8) % V);
        FILE *fp = fopen(path(split[f]), "wb");
        cr_assert(fp && fwrite(ids, sizeof ids, 1, fp) == 1 && fclose(fp) == 0, "cannot write %s", split[f]);
    }
    char logp[300];
    snprintf(logp, sizeof logp, "%s/run.log", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (chdir(dir) != 0) _exit(99);
        int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(fgt_bin(), fgt_bin(), "train", "--data-bin", "tok", "--vocab-size", "50304", "--n-layer", "1", "--n-head",
              "2", "--n-embd", "128", "--block-size", "64", "--batch-size", "16", "--steps", "1000", "--eval-every",
              "0", "--eval-iters", "1", "--samples", "0", "--threads", "2", "--log-every", "1", "--out", "big",
              (char *)NULL);
        _exit(98);
    }
    int started = 0;
    for (int i = 0; i < 12000 && !started; i++) {
        usleep(10000);
        size_t n = 0;
        char *l = slurp("run.log", &n);
        started = l && strstr(l, "output: ");
        free(l);
    }
    if (!started) kill(pid, SIGKILL);
    cr_assert(started, "the run never reached its first step");
    static const int sigs[3] = {SIGHUP, SIGTERM, SIGINT};
    int sent = 0;
    for (int k = 0; k < 3; k++) {
        usleep(k == 0 ? 600000 : 800000);
        size_t n = 0;
        char *l = slurp("run.log", &n);
        const int logged = l && strstr(l, "step 1/");
        free(l);
        if (logged && sent) break;
        kill(pid, sigs[k]);
        sent++;
    }
    int status;
    waitpid(pid, &status, 0);
    size_t n = 0;
    char *l = slurp("run.log", &n);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    cr_expect(code == 128 + SIGHUP || code == 128 + SIGTERM || code == 128 + SIGINT,
              "after %d stop signal(s) the exit status is %d%s%s:\n%s", sent, code,
              WIFSIGNALED(status) ? ", killed by " : "", WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "", l);
    cr_expect(l && strstr(l, "interrupted by") && !strstr(l, "corrupt"), "no clean interruption:\n%s", l);
    free(l);
    /* a signal frame written over a product's workspace changes its bits without a crash: the
     * checkpoint must be an uninterrupted run's to the same step */
    const long long step = fgt_ckpt_step(path("big"));
    cr_assert(step >= 1 && step < 1000, "checkpoint at step %lld", step);
    char args[1024];
    snprintf(args, sizeof args,
             "train --data-bin tok --vocab-size 50304 --n-layer 1 --n-head 2 --n-embd 128 --block-size 64 "
             "--batch-size 16 --steps %lld --lr-decay-steps 1000 --eval-every 0 --eval-iters 1 --samples 0 "
             "--threads 2 --out ref",
             step);
    run_ok(args);
    fgt_expect_same_run_state(path("big"), path("ref"));
}

Test(runs, a_closed_stdout_does_not_stop_training, .init = setup, .fini = teardown, .timeout = 120) {
    need_bin();
    if (access("/bin/bash", X_OK) != 0) cr_skip_test("no /bin/bash for PIPESTATUS");
    char cmd[2048], log[8192];
    /* head exits after one line; every later line the run prints meets a closed pipe */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && bash -c \"'%s' train " TINY
             " --steps 400 --log-every 1 --out p 2>err.log | head -n 1 >/dev/null;"
             " exit \\${PIPESTATUS[0]}\"",
             dir, fgt_bin());
    int st = fgt_run_cmd(cmd, log, sizeof log);
    size_t n;
    char *err = slurp("err.log", &n);
    cr_expect_eq(st, 0, "train | head exited %d: %s", st, err ? err : "");
    free(err);
    cr_expect_eq(fgt_ckpt_step(path("p")), 400, "the run did not train to the end with its stdout closed");
}

/* ---- --overwrite keeps the earlier run until its own checkpoint is down ---- */

/* A disk that fills at the new run's first checkpoint (a file-size limit makes the optimizer file's
 * write fail, as ENOSPC would): exit 1, one line saying the earlier run is back, and every byte of
 * it in place, with nothing of the failed run's left. */
Test(runs, an_overwrite_whose_checkpoint_cannot_be_written_puts_the_earlier_run_back, .init = setup,
     .fini = teardown, .timeout = 120) {
    need_bin();
    run_ok("train " TINY " --steps 30 --out r");
    snapshot before = take("r");
    char cmd[2048], log[8192];
    /* SIGXFSZ ignored (inherited through exec): the write fails with EFBIG instead of killing */
    snprintf(cmd, sizeof cmd, "cd '%s' && trap '' XFSZ && ulimit -f 20 && '%s' train " TINY
             " --steps 3 --out r --overwrite 2>&1 >/dev/null", dir, fgt_bin());
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, 1, "exit %d:\n%s", st, log);
    cr_expect(one_line(log) && strstr(log, "earlier run again") && strstr(log, "untouched"),
              "the line should say the earlier run is back:\n%s", log);
    expect_unchanged(&before, "r", "an --overwrite that could not write its checkpoint");
    drop(&before);
    cr_expect(access(path("r/.flashgrad-overwritten"), F_OK) != 0, "the set-aside folder was left");
    cr_expect(access(path("r/optimizer.prev.safetensors"), F_OK) != 0, "an optimizer.prev file was left");
    run_ok("train --resume --steps 31 --out r --samples 0 --eval-problems 10");
}

/* What a kill at any moment of an --overwrite's first checkpoint leaves (made here by hand, as the
 * moves and writes would leave it) is resolved by the next train on the folder: back to the earlier
 * run while the new checkpoint is incomplete, the new run once its model is written. */
Test(runs, an_overwrite_killed_midway_is_resolved_by_the_next_run, .init = setup, .fini = teardown,
     .timeout = 120) {
    need_bin();
    run_ok("train " TINY " --steps 30 --out r");
    snapshot before = take("r");
    /* 1. killed while moving the earlier run aside: model moved, the rest not yet */
    cr_assert_eq(mkdir(path("r/.flashgrad-overwrite-moving"), 0700), 0);
    cr_assert_eq(rename(path("r/model.safetensors"), path("r/.flashgrad-overwrite-moving/model.safetensors")), 0);
    char log[8192];
    int st = run("train --resume --steps 31 --out r --samples 0 --eval-problems 10", log, sizeof log);
    cr_expect_eq(st, 0, "resume after a kill while setting aside: exit %d:\n%s", st, log);
    cr_expect(strstr(log, "put back"), "no note about the files put back:\n%s", log);
    cr_expect(access(path("r/.flashgrad-overwrite-moving"), F_OK) != 0, "the moving folder was left");
    long long s = fgt_ckpt_step(path("r"));
    cr_expect_eq(s, 31, "the earlier run did not continue (step %lld)", s);

    /* 2. killed after the set-aside, with the new run's log and optimizer written but not its model */
    run_ok("train " TINY " --steps 30 --out q");
    snapshot q = take("q");
    cr_assert_eq(mkdir(path("q/.flashgrad-overwritten"), 0700), 0);
    for (int i = 0; i < 3; i++) {
        char a[300], b[300];
        snprintf(a, sizeof a, "q/%s", snap_files[i]);
        snprintf(b, sizeof b, "q/.flashgrad-overwritten/%s", snap_files[i]);
        cr_assert_eq(rename(path(a), path(b)), 0);
    }
    FILE *f = fopen(path("q/log.csv"), "w");
    cr_assert(f);
    fputs(CSV_HEADER_FOR_TEST "\n1,9.9,0.001,1.0,100.0,,\n", f);
    fclose(f);
    f = fopen(path("q/optimizer.safetensors"), "w");
    cr_assert(f);
    fputs("the new run's optimizer state", f);
    fclose(f);
    st = run("train " TINY " --steps 3 --out q", log, sizeof log);
    cr_expect_eq(st, 2, "a fresh run without --overwrite should find the earlier run back: exit %d:\n%s", st, log);
    cr_expect(strstr(log, "back in") && strstr(log, "step 30"), "message:\n%s", log);
    expect_unchanged(&q, "q", "the recovery of an --overwrite killed before its model was written");
    drop(&q);
    cr_expect(access(path("q/.flashgrad-overwritten"), F_OK) != 0, "the set-aside folder was left");

    /* 3. killed after the new model was written, before the earlier run was removed */
    run_ok("train " TINY " --steps 4 --out p");
    snapshot p = take("p");
    cr_assert_eq(mkdir(path("p/.flashgrad-overwritten"), 0700), 0);
    f = fopen(path("p/.flashgrad-overwritten/model.safetensors"), "w");
    cr_assert(f);
    fputs("the earlier run's model", f);
    fclose(f);
    st = run("train --resume --steps 5 --out p --samples 0 --eval-problems 10", log, sizeof log);
    cr_expect_eq(st, 0, "exit %d:\n%s", st, log);
    cr_expect(access(path("p/.flashgrad-overwritten"), F_OK) != 0, "the replaced run was not removed");
    s = fgt_ckpt_step(path("p"));
    cr_expect_eq(s, 5, "the new run did not continue (step %lld)", s);
    drop(&p);
    drop(&before);
}

/* train.lock gets the pid written into it: never into a file with other names, nor a FIFO. */
Test(runs, a_lock_file_that_is_a_hard_link_or_a_fifo_is_refused_untouched, .init = setup, .fini = teardown,
     .timeout = 60) {
    need_bin();
    cr_assert_eq(mkdir(path("r"), 0777), 0);
    FILE *f = fopen(path("users_notes.txt"), "w");
    cr_assert(f);
    fputs("precious\n", f);
    fclose(f);
    cr_assert_eq(link(path("users_notes.txt"), path("r/train.lock")), 0);
    char log[8192];
    int st = run("train " TINY " --steps 2 --out r", log, sizeof log);
    cr_expect_eq(st, 1, "exit %d:\n%s", st, log);
    cr_expect(one_line(log) && strstr(log, "hard link"), "message:\n%s", log);
    size_t n;
    char *b = slurp("users_notes.txt", &n);
    cr_expect(b && n == 9 && !memcmp(b, "precious\n", 9), "the user's file was rewritten: '%s'", b ? b : "(gone)");
    free(b);
    cr_assert_eq(unlink(path("r/train.lock")), 0);
    cr_assert_eq(mkfifo(path("r/train.lock"), 0600), 0);
    st = run("train " TINY " --steps 2 --out r", log, sizeof log);
    cr_expect(st == 1 && one_line(log) && strstr(log, "not a regular file"), "FIFO lock: exit %d:\n%s", st, log);
    struct stat sb;
    cr_expect(lstat(path("r/train.lock"), &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO was replaced");
}

/* A log with a header and no row records nothing: it does not make the folder another run's, and a
 * failed run's message counts the steps its log holds. */
Test(runs, a_header_only_log_does_not_block_and_failure_messages_count_the_steps, .init = setup,
     .fini = teardown, .timeout = 60) {
    need_bin();
    /* the headers of this and earlier versions' logs */
    static const char *const headers[] = {CSV_HEADER_FOR_TEST ",peak_gflops,val_bpb", CSV_HEADER_FOR_TEST ",peak_gflops",
                                          CSV_HEADER_FOR_TEST, "step,loss,lr,grad_norm,tokens_per_s,val_loss"};
    for (int k = 0; k < 4; k++) {
        char rel[32], args[512];
        snprintf(rel, sizeof rel, "h%d", k);
        cr_assert_eq(mkdir(path(rel), 0777), 0);
        snprintf(rel, sizeof rel, "h%d/log.csv", k);
        FILE *f = fopen(path(rel), "w");
        cr_assert(f);
        fprintf(f, "%s\n", headers[k]);
        fclose(f);
        snprintf(args, sizeof args, "train " TINY " --steps 2 --out h%d", k);
        run_ok(args);
    }
    char log[8192];
    int st = run("train " TINY " --steps 5 --out d --lr 10 --warmup 0 --weight-decay 1e6", log, sizeof log);
    cr_expect_eq(st, 1, "the diverging run exited %d:\n%s", st, log);
    const char *at = strstr(log, "at step ");
    long long failed = at ? atoll(at + 8) : -1;
    char want[64];
    snprintf(want, sizeof want, "has the %lld step%s run", failed - 1, failed - 1 == 1 ? "" : "s");
    cr_expect(failed > 1 && strstr(log, want), "the message should say '%s':\n%s", want, log);
    size_t n;
    char *l = slurp("d/log.csv", &n);
    int rows = 0;
    for (char *c = l; c && *c; c++) rows += *c == '\n';
    cr_expect_eq(rows, failed, "the log has %d lines for %lld steps run", rows, failed - 1);
    free(l);
}

/* Values the pool cannot take, and flags of the addition task given with other data, are usage
 * errors with one line, before anything is written. */
Test(runs, flags_that_cannot_apply_are_refused, .init = setup, .fini = teardown, .timeout = 60) {
    need_bin();
    FILE *f = fopen(path("t.txt"), "w");
    cr_assert(f);
    for (int i = 0; i < 200; i++) fputs("hello world, ", f);
    fclose(f);
    static const char *const cases[][2] = {
        {"train " TINY " --steps 2 --out a --threads 65", "--threads"},
        {"train --data t.txt --digits 3 --steps 2 --out a", "--digits"},
        {"train --data t.txt --eval-problems 3 --steps 2 --out a", "--eval-problems"},
        {"bench peak --threads 65", "--threads"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char log[8192];
        int st = run(cases[i][0], log, sizeof log);
        cr_expect(st == 2 && one_line(log) && strstr(log, cases[i][1]), "`%s`: exit %d:\n%s", cases[i][0], st, log);
    }
    char cmd[1024], log[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && FG_NUM_THREADS=100 '%s' train " TINY " --steps 2 --out a 2>&1", dir, fgt_bin());
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect(st == 2 && one_line(log) && strstr(log, "FG_NUM_THREADS"), "FG_NUM_THREADS=100: exit %d:\n%s", st, log);
    cr_expect(access(path("a"), F_OK) != 0, "a refused run created its folder");
}

/* Under an address-space limit too small for the threads' reservations, train stops before its
 * first step with one line naming the limit and a thread count that fits (it used to die by SIGSEGV
 * inside the first matmul), and that count does run. */
Test(runs, an_address_space_limit_too_small_for_the_threads_is_one_line, .init = setup, .fini = teardown,
     .timeout = 300) {
    need_bin();
    if (fgt_sanitize()) cr_skip_test("the sanitizers reserve terabytes of address space: no ulimit -v under them");
    const char *tiny = "--task addition --digits 1 --n-layer 1 --n-head 2 --n-embd 16 --batch-size 8 --eval-every 0 "
                       "--eval-iters 1 --eval-problems 10 --samples 0 --steps 2";
    char cmd[2048], log[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && ulimit -v 3000000 && '%s' train %s --threads 16 --out a 2>&1 >/dev/null", dir, fgt_bin(),
             tiny);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect(st == 1 && one_line(log) && strstr(log, "ulimit -v") && strstr(log, "run with --threads "),
              "exit %d:\n%s", st, log);
    const char *k = strstr(log, "run with --threads ");
    int fit = k ? atoi(k + 19) : 0;
    cr_assert(fit >= 1 && fit < 16, "suggested %d threads:\n%s", fit, log);
    snprintf(cmd, sizeof cmd, "cd '%s' && ulimit -v 3000000 && '%s' train %s --threads %d --out b 2>&1", dir,
             fgt_bin(), tiny, fit);
    st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, 0, "the suggested --threads %d did not run: exit %d:\n%s", fit, st, log);
}

/* A fresh run whose first checkpoint cannot be written (a full disk; here a file-size limit) says
 * that no checkpoint exists and how many steps its log holds. */
Test(runs, a_first_checkpoint_that_cannot_be_written_says_none_exists, .init = setup, .fini = teardown,
     .timeout = 60) {
    need_bin();
    char cmd[2048], log[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && trap '' XFSZ && ulimit -f 20 && '%s' train " TINY
             " --steps 3 --out r 2>&1 >/dev/null", dir, fgt_bin());
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect(st == 1 && one_line(log) && strstr(log, "before any checkpoint was written (log.csv has the 3 steps run)"),
              "exit %d:\n%s", st, log);
}

/* An earlier run's log.csv that is a symbolic link: --overwrite replaces the link, never what it
 * points to, and leaves no set-aside folder behind. */
Test(runs, an_overwrite_replaces_a_symlinked_log_not_its_target, .init = setup, .fini = teardown, .timeout = 60) {
    need_bin();
    cr_assert_eq(mkdir(path("r"), 0777), 0);
    FILE *f = fopen(path("target.txt"), "w");
    cr_assert(f);
    fputs("keep\n", f);
    fclose(f);
    cr_assert_eq(symlink("../target.txt", path("r/log.csv")), 0);
    run_ok("train " TINY " --steps 2 --out r --overwrite");
    size_t n;
    char *b = slurp("target.txt", &n);
    cr_expect(b && n == 5 && !memcmp(b, "keep\n", 5), "the link's target changed");
    free(b);
    struct stat sb;
    cr_expect(lstat(path("r/log.csv"), &sb) == 0 && S_ISREG(sb.st_mode), "log.csv is not the new run's file");
    cr_expect(access(path("r/.flashgrad-overwritten"), F_OK) != 0, "the set-aside folder was left");
}

/* The "final:" line of a run's output (train and val loss, accuracy), or "" when there is none. */
static void final_line(const char *out, char *line, size_t n) {
    const char *f = strstr(out, "final:");
    size_t k = f ? strcspn(f, "\n") : 0;
    snprintf(line, n, "%.*s", (int)k, f ? f : "");
}

/* The step of the last row of a run's log.csv (0 when it has none). */
static long long log_last_step(const char *run_dir) {
    char rel[300];
    size_t n = 0;
    snprintf(rel, sizeof rel, "%s/log.csv", run_dir);
    char *l = slurp(rel, &n);
    long long s = 0;
    for (char *p = l; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
        if (*p >= '0' && *p <= '9') s = atoll(p);
    free(l);
    return s;
}

/* A stop signal leaves the work resumable whatever the save policy: with nanoGPT's
 * always_save_checkpoint = False (checkpoints only at evaluations that improve the val loss) the
 * interrupted step's state goes to --out/interrupted, beside the best val loss's checkpoint (or
 * alone, before any evaluation); `--resume` continues from it, and the run ends in the state and
 * with the final losses of an uninterrupted run, bit for bit. eval_every "0": the signal comes
 * before any evaluation. */
static void best_only_stop(int sig, const char *name, const char *eval_every) {
    need_bin();
    const long long total = 2000000;
    char logp[300];
    snprintf(logp, sizeof logp, "%s/run.log", dir);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        if (chdir(dir) != 0) _exit(99);
        int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(fgt_bin(), fgt_bin(), "train", "--task", "addition", "--digits", "1", "--n-layer", "1", "--n-head", "2",
              "--n-embd", "16", "--batch-size", "8", "--eval-every", eval_every, "--eval-iters", "1",
              "--eval-problems", "10", "--samples", "0", "--threads", "1", "--log-every", "1", "--steps", "2000000",
              "--always_save_checkpoint=False", "--out", "sig", (char *)NULL);
        _exit(98);
    }
    int seen = 0;
    for (int i = 0; i < 6000 && !seen; i++) {
        usleep(10000);
        size_t n = 0;
        char *l = slurp("run.log", &n);
        seen = l && strstr(l, "step 50/");
        free(l);
    }
    if (!seen) kill(pid, SIGKILL);
    cr_assert(seen, "the run never logged step 50");
    kill(pid, sig);
    int status;
    waitpid(pid, &status, 0);
    size_t n = 0;
    char *l = slurp("run.log", &n);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 128 + sig, "after %s the exit status is %d (want %d):\n%s",
              name, WIFEXITED(status) ? WEXITSTATUS(status) : -1, 128 + sig, l);
    cr_expect(l && strstr(l, "interrupted by") && strstr(l, name) && strstr(l, "--resume") &&
                  !strstr(l, "nothing written"),
              "the interruption message should say where the state is and --resume:\n%s", l);
    const char *at = l ? strstr(l, " at step ") : NULL;
    const long long said = at ? atoll(at + 9) : -1;
    free(l);
    /* the interrupted state: in its own folder, unless the signal's step was an improving evaluation */
    const int own = access(path("sig/interrupted/model.safetensors"), F_OK) == 0;
    long long step = fgt_ckpt_step(own ? path("sig/interrupted") : path("sig"));
    cr_assert(step >= 50 && step < total, "interrupted state at step %lld", step);
    cr_expect_eq(step, said, "the work up to the signal's step %lld is not kept (state at step %lld)", said, step);
    cr_expect_eq(log_last_step("sig"), step, "log.csv does not reach the interrupted step %lld", step);
    if (own && access(path("sig/model.safetensors"), F_OK) == 0) {
        long long best = fgt_ckpt_step(path("sig"));
        cr_expect(best < step && atoi(eval_every) > 0 && best % atoi(eval_every) == 0,
                  "--out's checkpoint (step %lld) is not an evaluation's before the signal's step %lld", best, step);
    } else {
        cr_expect(own || atoi(eval_every) > 0, "no checkpoint of the interrupted step");
    }
    char out[16384];
    int st = run("sample --ckpt sig --tokens 2 --prompt 1", out, sizeof out);
    cr_expect_eq(st, 0, "sample after the signal: exit %d:\n%s", st, out);

    /* resumed to 40 steps later: the state and the final losses of an uninterrupted run */
    char args[1024], ref_final[512], got_final[512];
    snprintf(args, sizeof args,
             "train " TINY " --eval-every %s --always_save_checkpoint=False --steps %lld --lr-decay-steps %lld "
             "--out ref",
             eval_every, step + 40, total);
    st = run(args, out, sizeof out);
    cr_assert_eq(st, 0, "the uninterrupted run: exit %d:\n%s", st, out);
    final_line(out, ref_final, sizeof ref_final);
    snprintf(args, sizeof args, "train --resume --steps %lld --out sig --samples 0 --eval-problems 10", step + 40);
    st = run(args, out, sizeof out);
    cr_assert_eq(st, 0, "the resumed run: exit %d:\n%s", st, out);
    cr_expect(strstr(out, "resuming from step") && atoll(strstr(out, "resuming from step") + 18) == step,
              "did not resume from the interrupted step %lld:\n%s", step, out);
    cr_expect(!own || strstr(out, "(sig/interrupted)"), "the resumed run does not say where it resumed from:\n%s", out);
    final_line(out, got_final, sizeof got_final);
    cr_expect(*ref_final && !strcmp(ref_final, got_final), "final losses differ:\n  uninterrupted: %s\n  resumed:       %s",
              ref_final, got_final);
    fgt_expect_same_run_state(path("sig"), path("ref"));
    if (fgt_ckpt_step(path("sig")) == step + 40)
        cr_expect(access(path("sig/interrupted"), F_OK) != 0, "the older interrupted state was left beside step %lld",
                  step + 40);
}

/* The save policy is the run's: a --resume without always_save_checkpoint keeps it, one that gives
 * it changes it. */
Test(runs, a_resumed_run_keeps_its_save_policy, .init = setup, .fini = teardown, .timeout = 120) {
    need_bin();
    char log[16384];
    run_ok("train " TINY " --steps 4 --eval-every 2 --always_save_checkpoint=False --out p");
    int st = run("train --resume --steps 6 --out p", log, sizeof log);
    cr_assert_eq(st, 0, "%s", log);
    cr_expect(strstr(log, "checkpoints: only at evaluations that improve"), "the resumed run saves every evaluation:\n%s", log);
    st = run("train --resume --steps 8 --out p --always_save_checkpoint=True", log, sizeof log);
    cr_assert_eq(st, 0, "%s", log);
    cr_expect(!strstr(log, "checkpoints: only at evaluations"), "--always_save_checkpoint=True on resume is not taken:\n%s", log);
    cr_expect_eq(fgt_ckpt_step(path("p")), 8, "every evaluation saves again");
}

Test(runs, sigint_before_any_evaluation_keeps_the_work_with_always_save_checkpoint_false, .init = setup,
     .fini = teardown, .timeout = 300) {
    best_only_stop(SIGINT, "SIGINT", "0");
}

Test(runs, sigterm_after_an_evaluation_keeps_the_best_and_the_interrupted_state, .init = setup, .fini = teardown,
     .timeout = 300) {
    best_only_stop(SIGTERM, "SIGTERM", "20");
}

Test(runs, sighup_keeps_the_work_with_always_save_checkpoint_false, .init = setup, .fini = teardown,
     .timeout = 300) {
    best_only_stop(SIGHUP, "SIGHUP", "7");
}

/* Writes text to dir/rel. */
static void put_file(const char *rel, const char *text) {
    FILE *f = fopen(path(rel), "w");
    cr_assert(f, "cannot create %s", rel);
    fputs(text, f);
    fclose(f);
}

/* 1 when dir/rel holds exactly text. */
static int holds(const char *rel, const char *text) {
    size_t n = 0;
    char *b = slurp(rel, &n);
    int same = b && n == strlen(text) && !memcmp(b, text, n);
    free(b);
    return same;
}

/* --overwrite replaces a flashgrad run and nothing else: a folder holding anything flashgrad did
 * not write (a Hugging Face model, a safetensors file without flashgrad's metadata, a user's notes or
 * an llm.c file beside a run) is refused in one line naming it, and left as it was. */
Test(runs, overwrite_replaces_a_flashgrad_run_and_nothing_else, .init = setup, .fini = teardown, .timeout = 120) {
    need_bin();
    char log[8192];
    /* a Hugging Face model folder */
    cr_assert_eq(mkdir(path("hf"), 0777), 0);
    put_file("hf/config.json", "{\"model_type\": \"gpt2\"}\n");
    put_file("hf/model.safetensors", "the user's weights");
    int st = run("train " TINY " --steps 2 --out hf --overwrite", log, sizeof log);
    cr_expect(st == 2 && one_line(log) && strstr(log, "--overwrite") &&
                  (strstr(log, "'config.json'") || strstr(log, "'model.safetensors'")),
              "an HF folder: exit %d:\n%s", st, log);
    cr_expect(holds("hf/config.json", "{\"model_type\": \"gpt2\"}\n") &&
                  holds("hf/model.safetensors", "the user's weights"),
              "the user's model changed");
    cr_expect(access(path("hf/log.csv"), F_OK) != 0 && access(path("hf/.flashgrad-overwritten"), F_OK) != 0 &&
                  access(path("hf/train.lock"), F_OK) != 0,
              "a run's files were written into the user's folder");
    /* a model.safetensors alone that is not flashgrad's: refused with and without --overwrite */
    cr_assert_eq(mkdir(path("st"), 0777), 0);
    put_file("st/model.safetensors", "the user's weights");
    st = run("train " TINY " --steps 2 --out st --overwrite", log, sizeof log);
    cr_expect(st == 2 && one_line(log) && strstr(log, "'model.safetensors'") && strstr(log, "flashgrad metadata"),
              "a foreign model.safetensors with --overwrite: exit %d:\n%s", st, log);
    st = run("train " TINY " --steps 2 --out st", log, sizeof log);
    cr_expect(st == 2 && one_line(log) && strstr(log, "not a flashgrad checkpoint"),
              "a foreign model.safetensors: exit %d:\n%s", st, log);
    cr_expect(holds("st/model.safetensors", "the user's weights"), "the user's file changed");
    /* a user's file beside a flashgrad run: notes, an llm.c model */
    run_ok("train " TINY " --steps 3 --out r");
    snapshot before = take("r");
    static const char *const theirs[] = {"r/notes.txt", "r/gpt2_124M.bin"};
    for (int i = 0; i < 2; i++) {
        put_file(theirs[i], "the user's");
        st = run("train " TINY " --steps 2 --out r --overwrite", log, sizeof log);
        cr_expect(st == 2 && one_line(log) && strstr(log, strchr(theirs[i], '/') + 1),
                  "%s beside a run: exit %d:\n%s", theirs[i], st, log);
        cr_expect(holds(theirs[i], "the user's"), "%s changed", theirs[i]);
        expect_unchanged(&before, "r", "a refused --overwrite");
        unlink(path(theirs[i]));
    }
    drop(&before);
    /* a folder that is a link to a run: the run behind it is replaced; to a user's folder: refused */
    cr_assert_eq(symlink("r", path("link")), 0);
    run_ok("train " TINY " --steps 2 --out link --overwrite");
    cr_expect_eq(fgt_ckpt_step(path("r")), 2, "the run behind the link was not replaced");
    cr_assert_eq(symlink("hf", path("hflink")), 0);
    st = run("train " TINY " --steps 2 --out hflink --overwrite", log, sizeof log);
    cr_expect(st == 2 && one_line(log), "a link to an HF folder: exit %d:\n%s", st, log);
    cr_expect(holds("hf/model.safetensors", "the user's weights"), "the user's model changed through a link");
    /* an empty folder: nothing to replace; a file where the folder should be: refused, untouched */
    cr_assert_eq(mkdir(path("empty"), 0777), 0);
    run_ok("train " TINY " --steps 2 --out empty --overwrite");
    put_file("model.bin", "an llm.c file");
    st = run("train " TINY " --steps 2 --out model.bin --overwrite", log, sizeof log);
    cr_expect(st != 0 && one_line(log) && strstr(log, "not a folder"), "a file as --out: exit %d:\n%s", st, log);
    cr_expect(holds("model.bin", "an llm.c file"), "the file changed");
}

/* `flashgrad <args>` in the test folder: stdout into out, stderr into err; returns the exit status. */
static int run2(const char *args, char *out, size_t n, char *err, size_t en) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>'%s/err.txt'", dir, fgt_bin(), args, dir);
    int st = fgt_run_cmd(cmd, out, n);
    size_t k = 0;
    char *e = slurp("err.txt", &k);
    snprintf(err, en, "%s", e ? e : "");
    free(e);
    return st;
}

/* What each reader makes of a run folder: sample's text (given the folder, or its model file), eval's
 * loss line, the bytes of an llm.c export, whether --init-from starts from it; one string. */
static int read_run(const char *run_dir, const char *reader, char *got, size_t n, char *err, size_t en) {
    char args[1024], out[8192];
    int st;
    got[0] = '\0';
    if (!strcmp(reader, "sample") || !strcmp(reader, "sample-file")) {
        snprintf(args, sizeof args, "sample --ckpt %s%s --tokens 4 --prompt 1", run_dir,
                 reader[6] ? "/model.safetensors" : "");
        st = run2(args, out, sizeof out, err, en);
        snprintf(got, n, "%.200s", out);
    } else if (!strcmp(reader, "eval")) {
        snprintf(args, sizeof args, "eval --ckpt %s", run_dir);
        st = run2(args, out, sizeof out, err, en);
        const char *l = strstr(out, "\nstep ");
        snprintf(got, n, "%.*s", l ? (int)strcspn(l + 1, "\n") : 0, l ? l + 1 : "");
    } else if (!strcmp(reader, "export")) {
        unlink(path("e.bin"));
        snprintf(args, sizeof args, "export --ckpt %s --to llmc e.bin", run_dir);
        st = run2(args, out, sizeof out, err, en);
        size_t k = 0;
        char *b = slurp("e.bin", &k);
        snprintf(got, n, "%016llx %zu", b ? (unsigned long long)fg_xxh64(b, k, 0) : 0ull, k);
        free(b);
    } else {
        char rm[700];
        snprintf(rm, sizeof rm, "rm -rf '%s/i'", dir);
        if (system(rm)) {}
        snprintf(args, sizeof args, "train " TINY " --steps 1 --init-from %s --out i", run_dir);
        st = run2(args, out, sizeof out, err, en);
        snprintf(got, n, "%s", st == 0 && strstr(out, "init from") ? "init from the model" : "");
    }
    return st;
}

/* Moves dir/run/<name> into dir/run/<into>/<name>. */
static void move_into(const char *run_dir, const char *name, const char *into) {
    char a[300], b[300];
    snprintf(a, sizeof a, "%s/%s", run_dir, name);
    snprintf(b, sizeof b, "%s/%s/%s", run_dir, into, name);
    cr_assert_eq(rename(path(a), path(b)), 0, "mv %s %s", a, b);
}

/* An --overwrite killed (or still running) while the earlier run sits in its set-aside folder: every
 * reader (sample, eval, export, --init-from; given the folder or its model file) finds the earlier run. Each state is built by hand, as
 * the overwrite's moves and writes leave it at that moment: with the writer dead and nothing of the
 * new run in the folder, the reader puts the run back; with the new run's log or optimizer there, it
 * reads the set-aside folder and names the command that restores it (which then does); with the
 * writer alive, it reads the set-aside folder and changes nothing, or says to try again while the
 * files are moving. */
Test(runs, readers_find_a_run_an_interrupted_overwrite_set_aside, .init = setup, .fini = teardown,
     .timeout = 300) {
    need_bin();
    run_ok("train " TINY " --steps 30 --out r");
    static const char *const readers[] = {"sample", "eval", "export", "init", "sample-file"};
    enum { N_READERS = sizeof readers / sizeof readers[0] };
    char want[N_READERS][256], got[256], err[4096];
    for (int k = 0; k < N_READERS; k++) {
        int st = read_run("r", readers[k], want[k], sizeof want[k], err, sizeof err);
        cr_assert(st == 0 && want[k][0], "%s of the run itself: exit %d: %s", readers[k], st, err);
    }
    enum {
        MOVING_PART,
        MOVING_ALL,
        DONE_CLEAN,
        DONE_NEW_LOG,
        DONE_NEW_OPTIM,
        LIVE_DONE,
        LIVE_MOVING,
        DONE_NEW_COMPLETE,
        N_STATES
    };
    static const char *const names[N_STATES] = {"moving, model moved",
                                                "moving, all moved",
                                                "set aside",
                                                "set aside, new log",
                                                "set aside, new log and optimizer",
                                                "set aside, writer alive",
                                                "moving, writer alive",
                                                "set aside, the new run's first checkpoint (interrupted) complete"};
    static const char *const files[3] = {"model.safetensors", "optimizer.safetensors", "log.csv"};
    char cmd[1200];
    for (int s = 0; s < N_STATES; s++)
        for (int k = 0; k < N_READERS; k++) {
            snprintf(cmd, sizeof cmd, "cd '%s' && rm -rf s && cp -a r s", dir);
            cr_assert_eq(system(cmd), 0);
            const int moving = s == MOVING_PART || s == MOVING_ALL || s == LIVE_MOVING;
            const char *aside = moving ? ".flashgrad-overwrite-moving" : ".flashgrad-overwritten";
            char ap[300];
            snprintf(ap, sizeof ap, "s/%s", aside);
            cr_assert_eq(mkdir(path(ap), 0700), 0);
            for (int i = 0; i < ((s == MOVING_PART || s == LIVE_MOVING) ? 1 : 3); i++) move_into("s", files[i], aside);
            if (s == DONE_NEW_LOG || s == DONE_NEW_OPTIM) put_file("s/log.csv", CSV_HEADER_FOR_TEST "\n1,9.9,0.001,1.0,100.0,,\n");
            if (s == DONE_NEW_OPTIM) put_file("s/optimizer.safetensors", "the new run's optimizer state, half written");
            if (s == DONE_NEW_COMPLETE) {
                /* the new run (here: the same bytes as r) stopped by a signal before its first
                 * evaluation, under always_save_checkpoint = False; the earlier run, set aside, is
                 * another (a model that does not load tells a reader that read it) */
                snprintf(cmd, sizeof cmd,
                         "cd '%s' && mkdir s/interrupted && cp r/model.safetensors r/optimizer.safetensors "
                         "s/interrupted/ && cp r/log.csv s/ && echo earlier > s/%s/model.safetensors",
                         dir, aside);
                cr_assert_eq(system(cmd), 0);
            }
            int lock = -1;
            if (s == LIVE_DONE || s == LIVE_MOVING) { /* the --overwrite run, alive: it holds the lock */
                lock = open(path("s/train.lock"), O_RDWR | O_CLOEXEC);
                cr_assert(lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) == 0);
            }
            int st = read_run("s", readers[k], got, sizeof got, err, sizeof err);
            if (s == LIVE_MOVING) {
                cr_expect(st != 0 && one_line(err) && strstr(err, "try again"), "%s, %s: exit %d: %s", names[s],
                          readers[k], st, err);
            } else {
                cr_expect(st == 0 && !strcmp(got, want[k]), "%s, %s: exit %d, got '%s' want '%s': %s", names[s],
                          readers[k], st, got, want[k], err);
            }
            struct stat sb;
            const int aside_left = lstat(path(ap), &sb) == 0;
            if (s == MOVING_PART || s == MOVING_ALL || s == DONE_CLEAN) {
                cr_expect(!aside_left && strstr(err, "note:"), "%s, %s: the run was not put back (or not said): %s",
                          names[s], readers[k], err);
                snapshot back = take("r");
                expect_unchanged(&back, "s", "a reader put the run back");
                drop(&back);
            } else if (s == DONE_NEW_LOG || s == DONE_NEW_OPTIM) {
                cr_expect(aside_left && holds("s/log.csv", CSV_HEADER_FOR_TEST "\n1,9.9,0.001,1.0,100.0,,\n"),
                          "%s, %s: the reader changed the folder", names[s], readers[k]);
                const char *how = strstr(err, "restore it with: ");
                cr_expect(how && strstr(err, ".flashgrad-overwritten"), "%s, %s: no restore command: %s", names[s],
                          readers[k], err);
                if (how && k == 0) { /* the command it names puts the run back */
                    char c[512], o[8192];
                    snprintf(c, sizeof c, "%.*s --steps 31 --samples 0 --eval-problems 10",
                             (int)strcspn(how + 27, "\n"), how + 27);
                    int rs = run(c, o, sizeof o);
                    cr_expect(rs == 0 && access(path(ap), F_OK) != 0 &&
                                  fgt_ckpt_step(path("s")) == 31,
                              "`flashgrad %s`: exit %d:\n%s", c, rs, o);
                }
            } else if (s == LIVE_DONE) {
                cr_expect(aside_left && access(path("s/model.safetensors"), F_OK) != 0 && !strstr(err, "note:"),
                          "%s, %s: a reader changed the folder of a live writer: %s", names[s], readers[k], err);
            }
            if (lock >= 0) close(lock);
        }
}
