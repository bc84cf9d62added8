/* test_mpi.c — data-parallel training under mpirun (train/dist.h, cli/cmd_train.c).
 *
 * P ranks with --grad-accum 1 must give, bit for bit, the losses and the checkpoint (parameters,
 * AdamW moments, step) of one process with --grad-accum P, with and without --zero 1; a run
 * saved at one P resumes at another; ranks that disagree stop with one line; a rank killed with
 * SIGKILL ends the run within seconds and its last checkpoint resumes; a signal to one rank stops
 * every rank at the same step with a checkpoint. The runs use Open MPI on this machine's
 * loopback (shared memory), one thread per rank. Skipped with one line where mpirun is missing
 * or the program was built without MPI.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tensor/safetensors.h"
#include "tests/common.h"
#include "train/dist.h"

static char dir[256];

/* A small text: the same words in a pseudo-random order, so the losses move. */
static void write_text(void) {
    char p[400];
    snprintf(p, sizeof p, "%s/text.txt", dir);
    FILE *f = fopen(p, "w");
    cr_assert(f, "cannot write %s", p);
    static const char *const words[] = {"the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog ", "ran\n"};
    uint64_t x = 12345;
    for (int i = 0; i < 3000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        fputs(words[(x >> 33) % 9], f);
    }
    fclose(f);
}

static void setup(void) {
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_mpi.XXXXXX");
    write_text();
}
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) cr_log_warn("could not remove %s", dir);
}

/* mpirun on the loopback: shared memory between the ranks, as root too, more ranks than cores.
 * Every command starts in the test's own folder, and Open MPI keeps its session files there
 * (TMPDIR): mpiruns of tests running side by side would otherwise race to create the same
 * session folder under /tmp. Under the sanitizers, LeakSanitizer is off for the ranks: Open MPI
 * leaves its own allocations (and those of the components it unloads) at exit; the one-process
 * suites check flashgrad's. */
#define MPIRUN_ENV                                                                                                     \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "                   \
    "TMPDIR=\"$PWD\" ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" "
#define MPIRUN_CMD "mpirun --oversubscribe --mca btl self,vader"
#define MPIRUN     MPIRUN_ENV MPIRUN_CMD

static void need_mpi(void) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        fgt_skip("mpi", "mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev, then rebuild)");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ldd '%s' 2>/dev/null | grep -q libmpi", fgt_bin());
    if (system(cmd) != 0) fgt_skip("mpi", "the flashgrad program was built without MPI");
}

/* A tiny GPT on the text, dropout on (its masks follow the global micro-batch index). */
#define TINY                                                                                                           \
    "--data text.txt --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --eval-every 0 "                \
    "--eval-iters 2 --samples 0 --threads 1 --dropout 0.1 --warmup 0 --lr 0.01 --lr-decay-steps 400 --log-every 1"

/* `[mpirun -np P] flashgrad train TINY <args>` in the test folder (P = 0: no mpirun), stderr in
 * log; returns the exit status. */
static int train(int P, const char *args, char *log, size_t n) {
    char cmd[2048], np[512] = "";
    if (P > 0) snprintf(np, sizeof np, MPIRUN " -np %d", P);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s '%s' train " TINY " %s 2>&1", dir, np, fgt_bin(), args);
    return fgt_run_cmd(cmd, log, n);
}

static void train_ok(int P, const char *args) {
    static char log[65536];
    int st = train(P, args, log, sizeof log);
    cr_assert_eq(st, 0, "`%s train %s` at P = %d exited %d:\n%s", fgt_bin(), args, P, st, log);
}

static char *path(const char *rel) {
    static char p[4][600];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, rel);
    return p[k];
}

/* log.csv's step, loss, lr and grad_norm columns (not tokens_per_s, a timing, nor val_loss, which
 * an interrupted run has at its last step too). */
static char *losses(const char *run) {
    char rel[300];
    snprintf(rel, sizeof rel, "%s/log.csv", run);
    void *buf = NULL;
    size_t n = 0;
    cr_assert_eq(fg_read_file(path(rel), 0, &buf, &n), FG_OK, "%s: %s", rel, fg_last_error());
    char *out = calloc(n + 1, 1), *o = out;
    const char *s = buf;
    int col = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') col = 0;
        else if (s[i] == ',') col++;
        if (col < 4) *o++ = s[i];
    }
    free(buf);
    return out;
}

static void expect_same_run(const char *a, const char *b) {
    char *la = losses(a), *lb = losses(b);
    cr_expect_str_eq(la, lb, "the losses of %s and %s differ:\n%s\n---\n%s", a, b, la, lb);
    free(la);
    free(lb);
    fgt_expect_same_run_state(path(a), path(b));
}

TestSuite(mpi, .init = setup, .fini = teardown, .timeout = 120);

Test(mpi, two_ranks_equal_one_process_with_grad_accum_2) {
    need_mpi();
    train_ok(0, "--steps 4 --grad-accum 2 --out one");
    train_ok(2, "--steps 4 --grad-accum 1 --out two");
    expect_same_run("one", "two");
}

Test(mpi, four_ranks_equal_one_process_with_grad_accum_4_with_and_without_zero1) {
    need_mpi();
    train_ok(0, "--steps 3 --grad-accum 4 --out one");
    train_ok(4, "--steps 3 --grad-accum 1 --out four");
    train_ok(4, "--steps 3 --grad-accum 1 --zero 1 --out zero");
    expect_same_run("one", "four");
    expect_same_run("one", "zero");
}

Test(mpi, zero1_on_two_ranks_equals_one_process) {
    need_mpi();
    train_ok(0, "--steps 3 --grad-accum 2 --out one");
    train_ok(2, "--steps 3 --grad-accum 1 --zero 1 --out zero");
    expect_same_run("one", "zero");
}

/* The bytes rank 0 sent and received per step, from the run's last line. */
static double step_bytes(const char *log) {
    const char *p = strstr(log, "communication: ");
    cr_assert(p, "no communication line:\n%s", log);
    const char *q = strstr(p, " processes, ");
    double b = -1;
    cr_assert(q && sscanf(q, " processes, %lf bytes sent and received per step by rank 0", &b) == 1, "%s", p);
    return b;
}

/* The bytes of a run's parameters (its checkpoint's model file). */
static double param_bytes(const char *run) {
    char rel[300];
    snprintf(rel, sizeof rel, "%s/model.safetensors", run);
    fg_st_file *f = fg_st_load(path(rel));
    cr_assert(f, "%s: %s", rel, fg_last_error());
    double n = 0;
    for (int i = 0; i < fg_st_count(f); i++) n += (double)fg_st_at(f, i)->nbytes;
    fg_st_close(f);
    return n;
}

/* A model of several blocks of the gradient norm (65536 parameters each, ops/kernels.h), so that
 * ZeRO-1's ranks each sum their own blocks (at P = 4 one rank has none), with clipping on: the
 * norm assembled from the shards is one process's, bit for bit. */
#define WIDE "--n-layer 2 --n-embd 80 --grad-clip 0.5"
Test(mpi, zero1_with_several_norm_blocks_and_clipping_equals_one_process) {
    need_mpi();
    train_ok(0, "--steps 3 --grad-accum 4 " WIDE " --out one4");
    train_ok(4, "--steps 3 --grad-accum 1 --zero 1 " WIDE " --out zero4");
    cr_assert_gt(param_bytes("one4"), 2 * 65536 * 4, "the model fits in two norm blocks");
    expect_same_run("one4", "zero4");
    train_ok(0, "--steps 3 --grad-accum 2 " WIDE " --out one2");
    train_ok(2, "--steps 3 --grad-accum 1 --zero 1 " WIDE " --out zero2");
    expect_same_run("one2", "zero2");
}

/* ZeRO-1 as in llm.c: a step reduce-scatters the gradient (the norm comes from the shards' sums
 * of squares) and all-gathers the parameters. At P = 2 each of the two moves the whole array
 * through each rank once (its own shard out or in, the other's the other way), so a step is twice
 * the parameters' bytes plus the losses and the norm's sums (16 bytes each here): no more than
 * plain data parallelism's all-reduce of the gradient, and a third less than a gathered gradient. */
Test(mpi, zero1_moves_the_gradient_reduce_scatter_and_the_parameter_all_gather_only) {
    need_mpi();
    static char log[65536];
    cr_assert_eq(train(2, "--steps 3 --grad-accum 1 --zero 1 --out zero", log, sizeof log), 0, "%s", log);
    const double zero = step_bytes(log), params = param_bytes("zero");
    cr_assert_eq(train(2, "--steps 3 --grad-accum 1 --out plain", log, sizeof log), 0, "%s", log);
    const double plain = step_bytes(log);
    cr_expect(zero >= 2 * params && zero <= 2 * params + 64, "--zero 1: %.0f bytes per step, parameters %.0f", zero,
              params);
    cr_expect(plain >= 2 * params && plain <= 2 * params + 64, "all-reduce: %.0f bytes per step, parameters %.0f",
              plain, params);
}

/* A run saved at one P continues at another, bit for bit where the micro-batches per rank stay 1
 * or the process is one; 2 ranks of 2 resume a 4-micro-batch run too (its sum grouped by rank). */
Test(mpi, a_run_resumes_with_a_different_number_of_processes) {
    need_mpi();
    train_ok(0, "--steps 4 --grad-accum 4 --out ref");
    train_ok(4, "--steps 2 --grad-accum 1 --zero 1 --out a");
    train_ok(0, "--steps 4 --resume --out a");
    expect_same_run("ref", "a");
    train_ok(0, "--steps 2 --grad-accum 4 --out b");
    train_ok(4, "--steps 4 --resume --out b");
    expect_same_run("ref", "b");
    train_ok(0, "--steps 2 --grad-accum 4 --out c");
    train_ok(2, "--steps 4 --resume --zero 1 --out c");
    char log[8192];
    int st = train(2, "--steps 5 --resume --grad-accum 1 --out c", log, sizeof log);
    cr_expect_eq(st, 2, "a --grad-accum that changes the step was accepted (%d):\n%s", st, log);
    cr_expect(strstr(log, "--grad-accum 1 differs from the checkpoint's 2"), "%s", log);
}

/* Whether `want` begins a line of what rank 0 or rank 1 wrote on stderr: DIR/err.<rank>, each
 * rank's own file, written straight by the process, so mpirun's abort banner and the other rank's
 * lines, which mpirun interleaves in its merged output in whatever order they reach it, never land
 * there. `log` (mpirun's own output) is shown on failure. */
static void expect_rank_line(const char *want, const char *log) {
    int found = 0;
    for (int r = 0; r < 2 && !found; r++) {
        char rel[32];
        snprintf(rel, sizeof rel, "err.%d", r);
        void *buf = NULL;
        size_t n = 0;
        if (fg_read_file(path(rel), 0, &buf, &n) != FG_OK) continue;
        char *text = realloc(buf, n + 1);
        cr_assert(text);
        text[n] = 0;
        for (const char *p = text; p && *p && !found; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
            found = !strncmp(p, want, strlen(want));
        free(text);
    }
    cr_expect(found, "no rank's stderr has a line starting '%s'; mpirun printed:\n%s", want, log);
}

Test(mpi, ranks_with_different_flags_stop_with_one_line_naming_the_difference) {
    need_mpi();
    char cmd[3072], log[16384];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && " MPIRUN " -np 1 sh -c 'exec \"%s\" train " TINY
             " --steps 2 --lr 0.01 --out x 2>err.$OMPI_COMM_WORLD_RANK' : -np 1 sh -c 'exec \"%s\" train " TINY
             " --steps 2 --lr 0.001 --out x 2>err.$OMPI_COMM_WORLD_RANK' 2>&1",
             dir, fgt_bin(), fgt_bin());
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_neq(st, 0, "mismatched ranks ran:\n%s", log);
    expect_rank_line("flashgrad train: rank 1's --lr 0.001 differs from rank 0's 0.01", log);
    cr_expect(access(path("x/model.safetensors"), F_OK) != 0, "a checkpoint was written");
}

/* The same --data path names different files on the two ranks (each runs in its own folder, as on
 * two machines): the data's identity differs, and the run stops naming it. */
Test(mpi, ranks_with_different_data_stop_with_one_line) {
    need_mpi();
    char cmd[3072], log[16384];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir a b && cp text.txt a/ && head -c 8000 text.txt > b/text.txt && " MPIRUN
             " -np 1 sh -c 'cd a && exec \"%s\" train " TINY " --steps 2 --out ../x 2>../err.$OMPI_COMM_WORLD_RANK' : "
             "-np 1 sh -c 'cd b && exec \"%s\" train " TINY " --steps 2 --out ../x 2>../err.$OMPI_COMM_WORLD_RANK' 2>&1",
             dir, fgt_bin(), fgt_bin());
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_neq(st, 0, "ranks with different data ran:\n%s", log);
    expect_rank_line("flashgrad train: rank 1's data xxh64 ", log);
    cr_expect(access(path("x/model.safetensors"), F_OK) != 0, "a checkpoint was written");
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Starts `mpirun -np 2 flashgrad train TINY <args>` in the background, each rank writing its pid
 * to DIR/pid.<rank>; returns mpirun's pid once both pids are there and rank 0 has checkpointed. */
static pid_t start_two(const char *args) {
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && " MPIRUN_ENV "exec " MPIRUN_CMD " -np 2 sh -c 'echo $$ > pid.$OMPI_COMM_WORLD_RANK; exec \"%s\" train " TINY
                 " %s' >run.log 2>&1",
                 dir, fgt_bin(), args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (double t0 = now(); now() - t0 < 60; usleep(20000))
        if (access(path("pid.1"), F_OK) == 0 && access(path("run/model.safetensors"), F_OK) == 0) break;
    return pid;
}

static pid_t read_pid(const char *rel) {
    FILE *f = fopen(path(rel), "r");
    cr_assert(f, "no %s", rel);
    long p = 0;
    cr_assert_eq(fscanf(f, "%ld", &p), 1);
    fclose(f);
    return (pid_t)p;
}

/* mpirun's exit status, waiting at most `limit` seconds (-1: still running, then killed). */
static int wait_for(pid_t pid, double limit, double *took) {
    double t0 = now();
    int status = 0;
    while (now() - t0 < limit) {
        if (waitpid(pid, &status, WNOHANG) == pid) {
            *took = now() - t0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    *took = limit;
    return -1;
}

/* The runs below are stopped from outside, so they are given far more steps than they reach
 * (TINY's schedule does not depend on --steps); each is then checked against one process to a
 * few dozen steps past the checkpoint it left, whichever step that is. */
#define FAR "--steps 2000000"

/* `flashgrad train TINY --steps <step + 40> <args>` in one process into ref, and the resumed run to
 * the same step. */
static void resume_and_reference(long long step, const char *ref_args, const char *resume_args) {
    char a[512], log[8192];
    snprintf(a, sizeof a, "--steps %lld %s --out ref", step + 40, ref_args);
    train_ok(0, a);
    snprintf(a, sizeof a, "--steps %lld %s --resume --out run", step + 40, resume_args);
    int st = train(0, a, log, sizeof log);
    cr_assert_eq(st, 0, "the checkpoint of step %lld did not resume (%d):\n%s", step, st, log);
}

Test(mpi, a_killed_rank_ends_the_run_within_seconds_and_the_checkpoint_resumes, .timeout = 180) {
    need_mpi();
    pid_t mp = start_two(FAR " --grad-accum 1 --ckpt-every 1 --out run");
    cr_assert_eq(access(path("run/model.safetensors"), F_OK), 0, "no checkpoint appeared");
    kill(read_pid("pid.1"), SIGKILL);
    double took = 0;
    int st = wait_for(mp, 30, &took);
    cr_expect(st != 0 && st != -1, "mpirun exited %d %.1f s after a rank was killed", st, took);
    const long long step = fgt_ckpt_step(path("run"));
    cr_assert(step >= 1 && step < 2000000, "checkpoint at step %lld", step);
    resume_and_reference(step, "--grad-accum 2", "");
    fgt_expect_same_run_state(path("ref"), path("run"));
}

Test(mpi, sigterm_to_one_rank_stops_every_rank_at_the_same_step_with_a_checkpoint, .timeout = 180) {
    need_mpi();
    pid_t mp = start_two(FAR " --grad-accum 1 --ckpt-every 50 --out run");
    kill(read_pid("pid.1"), SIGTERM);
    double took = 0;
    int st = wait_for(mp, 60, &took);
    cr_expect(st != 0 && st != -1, "mpirun exited %d after SIGTERM to rank 1", st);
    const long long step = fgt_ckpt_step(path("run"));
    cr_assert(step >= 50 && step < 2000000, "checkpoint at step %lld", step);
    resume_and_reference(step, "--grad-accum 2", "--grad-accum 2");
    expect_same_run("ref", "run");
}

/* Two "hosts": network namespaces over a veth pair, TCP between the ranks (tests/mpi_netns.sh). */
Test(mpi, two_hosts_as_network_namespaces_equal_one_process) {
    need_mpi();
    char cmd[1200], log[16384];
    snprintf(cmd, sizeof cmd, "sh tests/mpi_netns.sh '%s' '%s' 2>&1", fgt_bin(), dir);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    if (st == 77) fgt_skip("mpi two hosts", log);
    cr_expect_eq(st, 0, "tests/mpi_netns.sh exited %d:\n%s", st, log);
}

/* The test runner links no MPI: a launcher's several processes are refused with the remedy. */
Test(mpi, a_build_without_mpi_refuses_several_processes) {
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    fg_comm *c = NULL;
    fg_status st = fg_comm_world(&c);
    unsetenv("OMPI_COMM_WORLD_SIZE");
    cr_assert_neq(st, FG_OK, "started without MPI as one of 2 processes");
    cr_expect(strstr(fg_last_error(), "built without MPI; install libopenmpi-dev openmpi-bin"), "%s", fg_last_error());
    fg_clear_error();
    cr_assert_eq(fg_comm_world(&c), FG_OK, "%s", fg_last_error());
    cr_expect_eq(c->size, 1);
}

Test(mpi, shards_cover_the_array_in_order) {
    for (int P = 1; P <= 5; P++)
        for (int64_t n = 0; n < 12; n++) {
            int64_t next = 0;
            for (int r = 0; r < P; r++) {
                int64_t lo, hi;
                fg_comm_shard(n, P, r, &lo, &hi);
                cr_expect(lo == next && hi >= lo && hi - lo <= n / P + 1 && hi - lo >= n / P,
                          "n %lld P %d rank %d: [%lld, %lld)", (long long)n, P, r, (long long)lo, (long long)hi);
                next = hi;
            }
            cr_expect_eq(next, n);
        }
}

/* Llama- and nanochat-style models (RoPE, RMSNorm, GQA, SwiGLU / ReLU², untied head, softcap,
 * windows): ranks bit-identical to gradient accumulation too, with and without ZeRO-1. */
Test(mpi, other_architectures_on_two_ranks_equal_one_process) {
    need_mpi();
    train_ok(0, "--arch llama --n-kv-head 1 --steps 3 --grad-accum 2 --out llama1");
    train_ok(2, "--arch llama --n-kv-head 1 --steps 3 --grad-accum 1 --out llama2");
    train_ok(2, "--arch llama --n-kv-head 1 --steps 3 --grad-accum 1 --zero 1 --out llamaz");
    expect_same_run("llama1", "llama2");
    expect_same_run("llama1", "llamaz");
    train_ok(0, "--arch nanochat --n-layer 2 --window SL --steps 3 --grad-accum 2 --out nano1");
    train_ok(2, "--arch nanochat --n-layer 2 --window SL --steps 3 --grad-accum 1 --out nano2");
    expect_same_run("nano1", "nano2");
}
