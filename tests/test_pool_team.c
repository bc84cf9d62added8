/* test_pool_team.c — the thread pool on an outside team (fg_pool_set_team, ops/cpu/threadpool.h).
 *
 * The team here is plain pthreads standing in for a host program's OpenMP runtime: team(body,
 * data, n) starts n − 1 threads that call body(data, t) for t = 1 .. n−1 while the caller runs
 * t = 0, and joins them. It records how often it was called, and each member thread its t.
 * References: the item counts a serial loop would give (each item exactly once) and the team's
 * own record of its threads.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ops/cpu/threadpool.h"

#define MAX_TEAM 8

static atomic_int team_calls;
static _Thread_local int tl_member = -1; /* t of the team member running on this thread, else -1 */

typedef struct {
    void (*body)(void *, int);
    void *data;
    int t;
} member;

static void *member_main(void *p) {
    member *m = p;
    tl_member = m->t;
    m->body(m->data, m->t);
    return NULL;
}

static void pthread_team(void (*body)(void *data, int t), void *data, int n) {
    atomic_fetch_add(&team_calls, 1);
    if (n > MAX_TEAM) n = MAX_TEAM;
    member ms[MAX_TEAM];
    pthread_t th[MAX_TEAM];
    for (int t = 1; t < n; t++) {
        ms[t] = (member){body, data, t};
        cr_assert_eq(pthread_create(&th[t], NULL, member_main, &ms[t]), 0, "pthread_create");
    }
    const int was = tl_member;
    tl_member = 0;
    body(data, 0);
    tl_member = was;
    for (int t = 1; t < n; t++) pthread_join(th[t], NULL);
}

typedef struct {
    atomic_int *hits;
    int threads;
    atomic_int bad_worker, outside_team, not_in_run, nested_calls;
} probe;

static void inner_item(void *ctx, int64_t item, int worker) {
    probe *p = ctx;
    (void)item;
    if (worker != 0) atomic_store(&p->bad_worker, 1); /* nested: serial, on worker 0 */
    atomic_fetch_add(&p->nested_calls, 1);
}

static void team_item(void *ctx, int64_t item, int worker) {
    probe *p = ctx;
    atomic_fetch_add(&p->hits[item], 1);
    if (worker < 0 || worker >= p->threads) atomic_store(&p->bad_worker, 1);
    if (tl_member >= 0 && tl_member != worker) atomic_store(&p->outside_team, 1); /* worker t on member t */
    if (!fg_pool_in_run()) atomic_store(&p->not_in_run, 1);
    if (item % 50 == 0) fg_pool_run(2, inner_item, p, 0);
    for (volatile int spin = 0; spin < 2000; spin++) {}
}

static void run_and_check(int threads, int want_team_calls) {
    const int64_t n = 500;
    atomic_int hits[500];
    for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
    probe p = {.hits = hits, .threads = threads};
    atomic_store(&team_calls, 0);
    fg_pool_run(n, team_item, &p, 0);
    for (int64_t i = 0; i < n; i++)
        cr_assert_eq(atomic_load(&hits[i]), 1, "threads %d: item %lld ran %d times", threads, (long long)i,
                     atomic_load(&hits[i]));
    cr_assert_eq(atomic_load(&team_calls), want_team_calls, "threads %d: the team was called %d times, want %d",
                 threads, atomic_load(&team_calls), want_team_calls);
    cr_assert_eq(atomic_load(&p.bad_worker), 0, "threads %d: a worker id outside [0, %d) or a nested call off 0",
                 threads, threads);
    cr_assert_eq(atomic_load(&p.not_in_run), 0, "threads %d: fg_pool_in_run() was 0 inside an item", threads);
    cr_assert_eq(atomic_load(&p.nested_calls), 20, "threads %d: %d nested calls, want 20", threads,
                 atomic_load(&p.nested_calls));
    cr_assert(!fg_pool_in_run(), "fg_pool_in_run() is 1 after the run");
}

Test(pool_team, loops_run_on_the_team_with_the_pools_contract) {
    fg_pool_set_team(pthread_team);
    for (int threads = 2; threads <= 4; threads++) {
        fg_pool_set_threads(threads);
        run_and_check(threads, 1);
    }
    fg_pool_set_team(NULL);
    fg_pool_set_threads(0);
}

Test(pool_team, items_run_on_the_teams_threads) {
    fg_pool_set_team(pthread_team);
    fg_pool_set_threads(3);
    const int64_t n = 300;
    atomic_int hits[300];
    for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
    probe p = {.hits = hits, .threads = 3};
    fg_pool_run(n, team_item, &p, 0);
    cr_assert_eq(atomic_load(&p.outside_team), 0, "an item with worker t ran on a team member other than t");
    fg_pool_set_team(NULL);
    /* and without the team no item runs on a member (the pool's own workers have tl_member -1) */
    for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
    tl_member = 0; /* the caller now claims to be member 0: an item on worker != 0 here would be flagged */
    probe p2 = {.hits = hits, .threads = 3};
    fg_pool_run(n, team_item, &p2, 0);
    tl_member = -1;
    cr_assert_eq(atomic_load(&p2.outside_team), 0, "worker 0 is the caller without a team too");
    fg_pool_set_team(NULL);
    fg_pool_set_threads(0);
}

Test(pool_team, single_threaded_runs_and_the_pools_own_workers_skip_the_team) {
    fg_pool_set_team(pthread_team);
    fg_pool_set_threads(1);
    run_and_check(1, 0); /* one thread: serial on the caller, no team */
    fg_pool_set_team(NULL);
    fg_pool_set_threads(2);
    run_and_check(2, 0); /* NULL: the pool's own workers again */
    fg_pool_set_threads(0);
}
