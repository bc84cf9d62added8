/* cpu_threadpool.c — the library's worker threads (ops/cpu.h; ops/cpu/threadpool.h adds what the
 * kernels share). Part of the CPU runtime, not a kernel file.
 *
 * One job at a time: the caller publishes (fn, ctx, n_items) under a new generation; a worker that
 * sees it joins the job (unless it is already closed), and the first min(threads, n_items) take
 * items from one atomic counter until it passes n_items; the caller works as worker 0, then closes
 * the job — no worker can join after that — and waits for the workers that joined to check out.
 * So a worker that the OS has not scheduled (another process holds its core) never holds the
 * caller up: the caller does its share of the items and, if it must, all of them.
 *
 * The job word (one atomic 64-bit value) holds the generation (high 32 bits), the closed flag
 * (bit 31) and the number of workers inside the job (bits 0-30). Joining is a compare-and-swap
 * that succeeds only while the job is open and of the generation the worker saw, and the caller
 * publishes the next job only when the count is back to 0, so a joined worker reads the fields of
 * its own job.
 *
 * Waiting. A training step is a few hundred short jobs back to back (a GEMM, a layernorm, …), many
 * of them shorter than the time it takes to wake a thread blocked on a condition variable, so a
 * worker that finishes a job first spins on the
 * generation for up to SPIN_NS (with the CPU's pause hint), and only then sleeps on the condition
 * variable; the caller wakes sleepers only when there are any. The caller, waiting for the
 * workers to check out, spins the same way and then yields. Between steps (data loading,
 * logging, evaluation on the caller alone) the workers go back to sleep after SPIN_NS, so an idle
 * pool costs nothing. (bench/results/train_cpu.md has the timings; tests/test_simd.c has the pool's
 * correctness tests.)
 */
#include "ops/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* OpenBLAS's thread control, weak so that another BLAS (without them) still links */
extern void openblas_set_num_threads(int n) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));

#define SPIN_NS 200000 /* how long an idle worker spins before it sleeps */

#define JOB_GEN(w) ((uint32_t)((w) >> 32))
#define JOB_CLOSED ((uint64_t)1 << 31)
#define JOB_COUNT(w) ((uint32_t)((w) & (JOB_CLOSED - 1)))

static struct {
    pthread_mutex_t mu;     /* guards sleeping and waking, and starting workers */
    pthread_cond_t wake;    /* sleeping workers: a new generation */
    pthread_cond_t park;    /* parked workers (id >= the thread count): the count went up */
    pthread_mutex_t run_mu; /* held by the thread whose run is in progress */
    atomic_int configured;  /* fg_pool_set_threads value; 0 = default */
    int n_started;          /* worker threads alive (the caller not counted) */
    atomic_ullong job;      /* generation | closed | workers inside (see the top of the file) */
    atomic_int sleepers;    /* workers blocked on `wake` */
    /* the job of the current generation */
    fg_pool_fn fn;
    void *ctx;
    int64_t n_items;
    int n_part;        /* participants, the caller included */
    atomic_llong next; /* next item to hand out */
} P = {PTHREAD_MUTEX_INITIALIZER,
       PTHREAD_COND_INITIALIZER,
       PTHREAD_COND_INITIALIZER,
       PTHREAD_MUTEX_INITIALIZER,
       0,
       0,
       0,
       0,
       NULL,
       NULL,
       0,
       0,
       0};

/* OpenBLAS set to one thread while any FG_POOL_BLAS_SERIAL run is in progress, in any thread: the
 * first to enter saves its thread count, the last to leave restores it. */
static struct {
    pthread_mutex_t mu;
    int depth, saved;
} B = {PTHREAD_MUTEX_INITIALIZER, 0, 0};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static _Thread_local int tl_in_run;
/* the generation a worker was started in: its first job is the next one */
static uint32_t start_gen[FG_POOL_MAX_THREADS];
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* In a child of fork() only the forking thread exists: forget the workers and any job. */
static void pool_after_fork_child(void) {
    pthread_mutex_init(&P.mu, NULL);
    pthread_cond_init(&P.wake, NULL);
    pthread_cond_init(&P.park, NULL);
    pthread_mutex_init(&P.run_mu, NULL);
    pthread_mutex_init(&B.mu, NULL);
    B.depth = 0;
    B.saved = 0;
    P.n_started = 0;
    atomic_store(&P.job, 0);
    atomic_store(&P.sleepers, 0);
    P.fn = NULL;
    P.ctx = NULL;
    P.n_items = 0;
    P.n_part = 0;
    atomic_store(&P.next, 0);
    tl_in_run = 0;
}
static void pool_register_atfork(void) { pthread_atfork(NULL, NULL, pool_after_fork_child); }

static int default_threads(void) {
    const char *e = getenv("FG_NUM_THREADS");
    if (e && *e) {
        char *end;
        long v = strtol(e, &end, 10);
        if (*end == '\0' && v >= 1) return v > FG_POOL_MAX_THREADS ? FG_POOL_MAX_THREADS : (int)v;
    }
    int n = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
#endif
    if (n < 1) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    return n > FG_POOL_MAX_THREADS ? FG_POOL_MAX_THREADS : n;
}

int fg_pool_threads(void) {
    static atomic_int dflt; /* default_threads(), read once: it asks the kernel */
    int c = atomic_load_explicit(&P.configured, memory_order_relaxed);
    if (c > 0) return c;
    int d = atomic_load_explicit(&dflt, memory_order_relaxed);
    if (d == 0) {
        d = default_threads();
        atomic_store_explicit(&dflt, d, memory_order_relaxed);
    }
    return d;
}

void fg_pool_set_threads(int n) {
    if (n < 0) n = 0;
    if (n > FG_POOL_MAX_THREADS) n = FG_POOL_MAX_THREADS;
    pthread_mutex_lock(&P.mu);
    atomic_store(&P.configured, n);
    pthread_cond_broadcast(&P.park); /* parked workers that are wanted again */
    pthread_mutex_unlock(&P.mu);
}

static void blas_serial_enter(void) {
    pthread_mutex_lock(&B.mu);
    if (B.depth++ == 0) {
        B.saved = openblas_get_num_threads();
        openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&B.mu);
}

static void blas_serial_exit(void) {
    pthread_mutex_lock(&B.mu);
    if (--B.depth == 0 && B.saved > 0) openblas_set_num_threads(B.saved);
    pthread_mutex_unlock(&B.mu);
}

int fg_pool_in_run(void) { return tl_in_run; }

static void run_items(fg_pool_fn fn, void *ctx, int64_t n, int worker) {
    for (;;) {
        int64_t it = (int64_t)atomic_fetch_add_explicit(&P.next, 1, memory_order_relaxed);
        if (it >= n) break;
        fn(ctx, it, worker);
    }
}

/* Wait for a job of a generation other than `seen`: spin for SPIN_NS, then sleep. Returns the
 * job word. */
static uint64_t wait_job(uint32_t seen) {
    uint64_t w = atomic_load_explicit(&P.job, memory_order_acquire);
    if (JOB_GEN(w) != seen) return w;
    const uint64_t t0 = now_ns();
    for (int i = 0;; i++) {
        cpu_relax();
        w = atomic_load_explicit(&P.job, memory_order_acquire);
        if (JOB_GEN(w) != seen) return w;
        if ((i & 255) == 255 && now_ns() - t0 > SPIN_NS) break;
    }
    /* sleep. sleepers goes up before the job word is read again (both sequentially consistent),
     * so a caller that publishes after our read sees sleepers > 0 and broadcasts under the mutex. */
    pthread_mutex_lock(&P.mu);
    atomic_fetch_add(&P.sleepers, 1);
    while (JOB_GEN(w = atomic_load(&P.job)) == seen) pthread_cond_wait(&P.wake, &P.mu);
    atomic_fetch_sub(&P.sleepers, 1);
    pthread_mutex_unlock(&P.mu);
    return w;
}

static void *worker_main(void *arg) {
    const int id = (int)(intptr_t)arg; /* 1 .. */
    pthread_setname_np(pthread_self(), "flashgrad-pool"); /* as top -H and /proc/<pid>/task/<tid>/comm show it */
    tl_in_run = 1;
    uint32_t seen = start_gen[id];
    for (;;) {
        if (id >= fg_pool_threads()) {
            /* not wanted at the current thread count (fg_pool_set_threads lowered it): park, so
             * as not to spin on jobs this worker may not take part in */
            pthread_mutex_lock(&P.mu);
            while (id >= fg_pool_threads()) pthread_cond_wait(&P.park, &P.mu);
            pthread_mutex_unlock(&P.mu);
            seen = JOB_GEN(atomic_load(&P.job)); /* the jobs published meanwhile are done or closing */
            continue;
        }
        uint64_t w = wait_job(seen);
        seen = JOB_GEN(w);
        if (id >= fg_pool_threads()) continue; /* lowered while we waited */
        /* join: count + 1, only while the job is open and still the one we saw */
        int joined = 0;
        while (!(w & JOB_CLOSED) && JOB_GEN(w) == seen && !joined)
            joined = atomic_compare_exchange_weak(&P.job, &w, w + 1);
        if (!joined) continue; /* closed: the caller did the items; or a newer job is waiting */
        if (id < P.n_part) run_items(P.fn, P.ctx, P.n_items, id);
        atomic_fetch_sub_explicit(&P.job, 1, memory_order_release);
    }
    return NULL;
}

/* Start workers up to `want` − 1 (called with P.mu held). Returns how many threads can take part. */
static int ensure_workers(int want) {
    while (P.n_started < want - 1) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        start_gen[P.n_started + 1] = JOB_GEN(atomic_load(&P.job));
        int rc = pthread_create(&t, &at, worker_main, (void *)(intptr_t)(P.n_started + 1));
        pthread_attr_destroy(&at);
        if (rc != 0) break; /* run with the threads there are */
        P.n_started++;
    }
    return P.n_started + 1 < want ? P.n_started + 1 : want;
}

static void run_serial(int64_t n_items, fg_pool_fn fn, void *ctx) {
    const int was = tl_in_run;
    tl_in_run = 1;
    for (int64_t i = 0; i < n_items; i++) fn(ctx, i, 0);
    tl_in_run = was;
}

/* ---- an outside team (fg_pool_set_team): one job on the stack, items from its own counter ---- */
static _Atomic(fg_pool_team_fn) team_fn;

typedef struct {
    fg_pool_fn fn;
    void *ctx;
    int64_t n_items;
    int n_part;
    atomic_llong next;
} team_job;

static void team_body(void *data, int t) {
    team_job *j = data;
    if (t < 0 || t >= j->n_part) return;
    const int was = tl_in_run;
    tl_in_run = 1;
    for (;;) {
        int64_t it = (int64_t)atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n_items) break;
        j->fn(j->ctx, it, t);
    }
    tl_in_run = was;
}

void fg_pool_set_team(fg_pool_team_fn team) { atomic_store(&team_fn, team); }

void fg_pool_run(int64_t n_items, fg_pool_fn fn, void *ctx, unsigned flags) {
    if (n_items <= 0 || !fn) return;
    pthread_once(&atfork_once, pool_register_atfork);
    const int blas = (flags & FG_POOL_BLAS_SERIAL) && openblas_set_num_threads && openblas_get_num_threads;
    const int want = fg_pool_threads();
    if (blas) blas_serial_enter();
    if (tl_in_run || want <= 1 || n_items == 1 || pthread_mutex_trylock(&P.run_mu) != 0) {
        /* nested, single-threaded or another run in progress: this thread does it all */
        run_serial(n_items, fn, ctx);
        if (blas) blas_serial_exit();
        return;
    }
    const fg_pool_team_fn team = atomic_load(&team_fn);
    if (team) {
        team_job j = {fn, ctx, n_items, (int64_t)want < n_items ? want : (int)n_items, 0};
        team(team_body, &j, j.n_part);
        pthread_mutex_unlock(&P.run_mu);
        if (blas) blas_serial_exit();
        return;
    }
    pthread_mutex_lock(&P.mu);
    int part = ensure_workers(want);
    pthread_mutex_unlock(&P.mu);
    if ((int64_t)part > n_items) part = (int)n_items;
    P.fn = fn;
    P.ctx = ctx;
    P.n_items = n_items;
    P.n_part = part;
    atomic_store_explicit(&P.next, 0, memory_order_relaxed);
    /* publish: the next generation, open, nobody inside (sequentially consistent, see wait_job) */
    const uint64_t gen = (uint64_t)(JOB_GEN(atomic_load(&P.job)) + 1u);
    atomic_store(&P.job, gen << 32);
    if (atomic_load(&P.sleepers) > 0) {
        pthread_mutex_lock(&P.mu);
        pthread_cond_broadcast(&P.wake);
        pthread_mutex_unlock(&P.mu);
    }

    tl_in_run = 1;
    run_items(fn, ctx, n_items, 0);
    tl_in_run = 0;

    /* close the job, then wait for the workers inside it: spin, then yield the core */
    uint64_t w = atomic_fetch_or(&P.job, JOB_CLOSED) | JOB_CLOSED;
    for (int i = 0; JOB_COUNT(w) > 0;) {
        if (i < 4096) {
            cpu_relax();
            i++;
        } else {
            sched_yield();
        }
        w = atomic_load_explicit(&P.job, memory_order_acquire);
    }
    P.fn = NULL;
    P.ctx = NULL;
    pthread_mutex_unlock(&P.run_mu);
    if (blas) blas_serial_exit();
}
