/* threadpool.c — the library's worker threads (see threadpool.h).
 *
 * One job at a time: the caller publishes (fn, ctx, n_items), bumps the generation and wakes the
 * workers; every participant takes items from one atomic counter until it passes n_items; the
 * caller works as worker 0, then waits until the other participants have checked out. Workers
 * sleep on a condition variable between jobs (no spinning: on two cores a spinning thread takes
 * the core from the thread that has work).
 */
#include "ops/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* OpenBLAS's thread control, weak so that another BLAS (without them) still links */
extern void openblas_set_num_threads(int n) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;   /* workers: a new generation */
    pthread_cond_t done;   /* caller: the last participant checked out */
    pthread_mutex_t run_mu; /* held by the thread whose run is in progress */
    int configured;        /* fg_pool_set_threads value; 0 = default */
    int n_started;         /* worker threads alive (the caller not counted) */
    uint64_t gen;          /* job generation */
    /* the job of generation gen */
    fg_pool_fn fn;
    void *ctx;
    int64_t n_items;
    int n_part;            /* participants, the caller included */
    int active;            /* participants (other than the caller) still working */
    atomic_llong next;     /* next item to hand out */
} P = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_MUTEX_INITIALIZER,
       0, 0, 0, NULL, NULL, 0, 0, 0, 0};

static _Thread_local int tl_in_run;
/* the generation a worker was started in: its first job is the next one */
static uint64_t start_gen[FG_POOL_MAX_THREADS];
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* In a child of fork() only the forking thread exists: forget the workers and any job. */
static void pool_after_fork_child(void) {
    pthread_mutex_init(&P.mu, NULL);
    pthread_cond_init(&P.wake, NULL);
    pthread_cond_init(&P.done, NULL);
    pthread_mutex_init(&P.run_mu, NULL);
    P.n_started = 0;
    P.gen = 0;
    P.fn = NULL;
    P.ctx = NULL;
    P.n_items = 0;
    P.n_part = 0;
    P.active = 0;
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
    pthread_mutex_lock(&P.mu);
    int c = P.configured;
    pthread_mutex_unlock(&P.mu);
    return c > 0 ? c : default_threads();
}

void fg_pool_set_threads(int n) {
    if (n < 0) n = 0;
    if (n > FG_POOL_MAX_THREADS) n = FG_POOL_MAX_THREADS;
    pthread_mutex_lock(&P.mu);
    P.configured = n;
    pthread_mutex_unlock(&P.mu);
}

int fg_pool_in_run(void) { return tl_in_run; }

static void run_items(fg_pool_fn fn, void *ctx, int64_t n, int worker) {
    for (;;) {
        int64_t it = (int64_t)atomic_fetch_add_explicit(&P.next, 1, memory_order_relaxed);
        if (it >= n) break;
        fn(ctx, it, worker);
    }
}

static void *worker_main(void *arg) {
    const int id = (int)(intptr_t)arg; /* 1 .. */
    tl_in_run = 1;
    pthread_mutex_lock(&P.mu);
    uint64_t seen = start_gen[id];
    for (;;) {
        while (P.gen == seen) pthread_cond_wait(&P.wake, &P.mu);
        seen = P.gen;
        if (id >= P.n_part) continue; /* this job wants fewer threads */
        fg_pool_fn fn = P.fn;
        void *ctx = P.ctx;
        const int64_t n = P.n_items;
        pthread_mutex_unlock(&P.mu);
        run_items(fn, ctx, n, id);
        pthread_mutex_lock(&P.mu);
        if (--P.active == 0) pthread_cond_signal(&P.done);
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
        start_gen[P.n_started + 1] = P.gen;
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

void fg_pool_run(int64_t n_items, fg_pool_fn fn, void *ctx, unsigned flags) {
    if (n_items <= 0 || !fn) return;
    pthread_once(&atfork_once, pool_register_atfork);
    int blas_before = 0;
    const int blas = (flags & FG_POOL_BLAS_SERIAL) && openblas_set_num_threads && openblas_get_num_threads;
    const int want = fg_pool_threads();
    if (tl_in_run || want <= 1 || n_items == 1 || pthread_mutex_trylock(&P.run_mu) != 0) {
        /* nested, single-threaded or another run in progress: this thread does it all. (BLAS keeps
         * its threads here unless we are inside a run, where the outer run already set it to 1.) */
        if (blas && !tl_in_run) {
            blas_before = openblas_get_num_threads();
            openblas_set_num_threads(1);
        }
        run_serial(n_items, fn, ctx);
        if (blas && blas_before > 0) openblas_set_num_threads(blas_before);
        return;
    }
    if (blas) {
        blas_before = openblas_get_num_threads();
        openblas_set_num_threads(1);
    }
    pthread_mutex_lock(&P.mu);
    int part = ensure_workers(want);
    if ((int64_t)part > n_items) part = (int)n_items;
    P.fn = fn;
    P.ctx = ctx;
    P.n_items = n_items;
    P.n_part = part;
    P.active = part - 1;
    atomic_store_explicit(&P.next, 0, memory_order_relaxed);
    P.gen++;
    if (part > 1) pthread_cond_broadcast(&P.wake);
    pthread_mutex_unlock(&P.mu);

    tl_in_run = 1;
    run_items(fn, ctx, n_items, 0);
    tl_in_run = 0;

    pthread_mutex_lock(&P.mu);
    while (P.active > 0) pthread_cond_wait(&P.done, &P.mu);
    P.fn = NULL;
    P.ctx = NULL;
    pthread_mutex_unlock(&P.mu);
    pthread_mutex_unlock(&P.run_mu);
    if (blas && blas_before > 0) openblas_set_num_threads(blas_before);
}
