/* recompute_plan.c — the exact planner of recompute_plan.h. */
#include "train/recompute_plan.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/alloc.h"
#include "tensor/error.h"

int64_t fg_recompute_predict_peak(const fg_recompute_costs *c, int L, const unsigned char *choice) {
    int64_t held = 0, peak = INT64_MIN;
    for (int l = 0; l < L; l++) {
        held += c->bytes[choice[l]];
        const int64_t p = held + c->top[choice[l]];
        if (p > peak) peak = p;
    }
    return c->held + peak;
}

double fg_recompute_predict_seconds(const fg_recompute_costs *c, int L, const unsigned char *choice) {
    double t = c->base_seconds;
    for (int l = 0; l < L; l++) t += c->seconds[choice[l]];
    return t;
}

/* The allowed choices in decreasing top (ties: the lower enum first), the order blocks take them
 * from block 0 up. Returns how many. */
static int choice_order(const fg_recompute_costs *c, int *order) {
    int n = 0;
    for (int k = 0; k < FG_RECOMPUTE_COUNT; k++)
        if (c->allowed[k]) order[n++] = k;
    for (int i = 1; i < n; i++) /* insertion sort, stable */
        for (int j = i; j > 0 && c->top[order[j]] > c->top[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return n;
}

/* The peak of count[i] blocks of choice order[i], i = 0 .. n, laid out in that order from block 0:
 * within a run of one choice the largest term is at its last block when bytes >= 0, its first
 * otherwise. */
static int64_t counts_peak(const fg_recompute_costs *c, const int *order, const int *count, int n) {
    int64_t held = 0, peak = INT64_MIN;
    for (int i = 0; i < n; i++) {
        if (!count[i]) continue;
        const int k = order[i];
        const int64_t first = held + c->bytes[k] + c->top[k];
        held += (int64_t)count[i] * c->bytes[k];
        const int64_t last = held + c->top[k];
        const int64_t p = first > last ? first : last;
        if (p > peak) peak = p;
    }
    return c->held + peak;
}

/* The search over count vectors: count[0 .. n) >= 0 summing to L. */
typedef struct {
    const fg_recompute_costs *c;
    const int *order;
    int n;
    int64_t budget;
    int count[FG_RECOMPUTE_COUNT];
    int found;
    int best[FG_RECOMPUTE_COUNT], low[FG_RECOMPUTE_COUNT];
    int64_t best_peak, low_peak;
    double best_t;
} plan_search;

static void search(plan_search *s, int i, int left) {
    if (i == s->n - 1) {
        s->count[i] = left;
        const int64_t p = counts_peak(s->c, s->order, s->count, s->n);
        double t = s->c->base_seconds;
        for (int k = 0; k < s->n; k++) t += s->count[k] * s->c->seconds[s->order[k]];
        if (p < s->low_peak) {
            s->low_peak = p;
            memcpy(s->low, s->count, sizeof s->low);
        }
        if (p <= s->budget && (!s->found || t < s->best_t || (t == s->best_t && p < s->best_peak))) {
            s->found = 1;
            s->best_t = t;
            s->best_peak = p;
            memcpy(s->best, s->count, sizeof s->best);
        }
        return;
    }
    for (int k = 0; k <= left; k++) {
        s->count[i] = k;
        search(s, i + 1, left - k);
    }
}

fg_status fg_recompute_plan(const fg_recompute_costs *c, int L, int64_t budget, unsigned char *choice, int64_t *peak,
                            double *seconds) {
    if (L < 1 || L > FG_RECOMPUTE_PLAN_MAX_LAYER)
        return fg_error(FG_ERR_ARG, "recompute plan: %d blocks (the planner takes 1..%d)", L,
                        FG_RECOMPUTE_PLAN_MAX_LAYER);
    int order[FG_RECOMPUTE_COUNT];
    plan_search s = {.c = c, .order = order, .budget = budget, .low_peak = INT64_MAX};
    s.n = choice_order(c, order);
    if (!s.n) return fg_error(FG_ERR_ARG, "recompute plan: no choice allowed");
    search(&s, 0, L);
    const int *use = s.found ? s.best : s.low;
    int l = 0;
    for (int i = 0; i < s.n; i++)
        for (int k = 0; k < use[i]; k++) choice[l++] = (unsigned char)order[i];
    *peak = s.found ? s.best_peak : s.low_peak;
    *seconds = fg_recompute_predict_seconds(c, L, choice);
    if (!s.found)
        return fg_error(FG_ERR_ARG, "recompute plan: no plan fits %lld bytes; the smallest budget that fits is %lld",
                        (long long)budget, (long long)s.low_peak);
    return FG_OK;
}

typedef struct {
    const fg_recompute_costs *c;
    const int *order;
    int n, L;
    int count[FG_RECOMPUTE_COUNT];
    unsigned char *plan;
    void (*fn)(void *, const unsigned char *, int64_t, double);
    void *user;
    int64_t visited;
} enum_state;

static void enum_rec(enum_state *e, int i, int left) {
    if (i < e->n - 1) {
        for (int k = 0; k <= left; k++) {
            e->count[i] = k;
            enum_rec(e, i + 1, left - k);
        }
        return;
    }
    e->count[i] = left;
    int l = 0;
    for (int j = 0; j < e->n; j++)
        for (int k = 0; k < e->count[j]; k++) e->plan[l++] = (unsigned char)e->order[j];
    e->fn(e->user, e->plan, counts_peak(e->c, e->order, e->count, e->n),
          fg_recompute_predict_seconds(e->c, e->L, e->plan));
    e->visited++;
}

int64_t fg_recompute_enumerate(const fg_recompute_costs *c, int L,
                               void (*fn)(void *user, const unsigned char *plan, int64_t peak, double seconds),
                               void *user) {
    if (L < 1 || L > FG_RECOMPUTE_PLAN_MAX_LAYER) return 0;
    int order[FG_RECOMPUTE_COUNT];
    unsigned char plan[FG_RECOMPUTE_PLAN_MAX_LAYER];
    enum_state e = {.c = c, .order = order, .L = L, .plan = plan, .fn = fn, .user = user};
    e.n = choice_order(c, order);
    if (!e.n) return 0;
    enum_rec(&e, 0, L);
    return e.visited;
}

void fg_recompute_plan_apply(fg_gpt_config *cfg, const unsigned char *choice) {
    memset(cfg->recompute_plan, 0, sizeof cfg->recompute_plan);
    for (int l = 0; l < cfg->n_layer && l < FG_GPT_MAX_LAYER_PLAN; l++)
        cfg->recompute_plan[l] = (unsigned char)(choice[l] + 1);
}

/* ---- measuring ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sync_device(fg_device d) {
    const fg_device_backend *be = fg_backend(d);
    if (be && be->synchronize) be->synchronize();
}

/* A "Key:   N kB" line of /proc/self/status in bytes, or -1. */
static int64_t proc_status_bytes(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    const size_t n = strlen(key);
    int64_t v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') v = (int64_t)atoll(line + n + 1) * 1024;
    fclose(f);
    return v;
}

/* Resets VmHWM to the current RSS (Linux: "5" into clear_refs). 0 on success. */
static int reset_rss_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    int ok = fputs("5", f) >= 0;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

fg_status fg_recompute_measure(const fg_train_config *cfg, const fg_source *src, int warm, int steps,
                               fg_recompute_run *run) {
    if (warm < 0 || steps < 1) return fg_error(FG_ERR_ARG, "recompute measure: %d warm-up and %d timed steps", warm, steps);
    const fg_device dev = cfg->model.device;
    /* the previous run's blocks back to the system, so that this one's RSS growth is its own */
    fg_alloc_empty_cache(dev);
    fg_alloc_empty_cache(FG_CPU);
    malloc_trim(0);
    const int rss_ok = reset_rss_peak() == 0;
    const int64_t rss0 = proc_status_bytes("VmRSS");
    fg_train_config c = *cfg;
    c.steps = warm + steps;
    fg_trainer *tr = fg_trainer_create(&c, src);
    if (!tr) return fg_last_status();
    double *t = malloc((size_t)steps * sizeof *t);
    fg_status st = t ? FG_OK : fg_error(FG_ERR_OOM, "recompute measure: out of memory");
    run->peak = 0;
    for (int i = 0; i < warm + steps && st == FG_OK; i++) {
        sync_device(dev);
        fg_alloc_reset_peak(dev);
        const int64_t held_before = (int64_t)fg_alloc_get_stats(dev).current;
        const double t0 = now_s();
        fg_step_stats s;
        st = fg_trainer_step(tr, &s);
        sync_device(dev);
        if (st != FG_OK) break;
        if (i == 0) run->first_loss = s.loss;
        if (i >= warm) {
            if (i == warm) run->held = held_before;
            t[i - warm] = now_s() - t0;
            const int64_t p = (int64_t)fg_alloc_get_stats(dev).peak;
            if (p > run->peak) run->peak = p;
        }
    }
    if (st == FG_OK) {
        qsort(t, (size_t)steps, sizeof *t, cmp_d);
        run->seconds = t[0]; /* the fastest: the step least disturbed by other processes */
        const int64_t hwm = proc_status_bytes("VmHWM");
        run->rss_growth = rss_ok && rss0 >= 0 && hwm >= 0 ? hwm - rss0 : -1;
    }
    free(t);
    fg_trainer_free(tr);
    return st;
}

fg_status fg_recompute_measure_costs(const fg_train_config *cfg, const fg_source *src, int warm, int steps,
                                     const int *allowed, fg_recompute_costs *costs,
                                     fg_recompute_run runs[FG_RECOMPUTE_COUNT][2], int64_t *inexact,
                                     void (*progress)(void *user, int choice, int deep, const fg_recompute_run *r),
                                     void *user) {
    const int L = cfg->model.n_layer, d0 = 1, d1 = L > 1 ? L : 2;
    memset(costs, 0, sizeof *costs);
    *inexact = 0;
    for (int k = 0; k < FG_RECOMPUTE_COUNT; k++) {
        costs->allowed[k] = allowed ? allowed[k] : 1;
        if (!costs->allowed[k] && k != FG_RECOMPUTE_NONE) continue; /* NONE always: the base time */
        for (int deep = 0; deep < 2; deep++) {
            fg_train_config c = *cfg;
            c.model.n_layer = deep ? d1 : d0;
            c.model.recompute = (fg_gpt_recompute)k;
            memset(c.model.recompute_plan, 0, sizeof c.model.recompute_plan);
            fg_status st = fg_recompute_measure(&c, src, warm, steps, &runs[k][deep]);
            if (st != FG_OK) return st;
            if (progress) progress(user, k, deep, &runs[k][deep]);
        }
        const int64_t e0 = runs[k][0].peak - runs[k][0].held, e1 = runs[k][1].peak - runs[k][1].held;
        const int64_t dp = e1 - e0, dd = d1 - d0;
        costs->bytes[k] = dp / dd;
        const int64_t rem = dp - costs->bytes[k] * dd;
        if ((rem < 0 ? -rem : rem) > *inexact) *inexact = rem < 0 ? -rem : rem;
        costs->top[k] = e0 - costs->bytes[k] * d0;
        costs->seconds[k] = (runs[k][1].seconds - runs[k][0].seconds) / dd;
    }
    costs->held = runs[FG_RECOMPUTE_NONE][1].held;
    costs->base_seconds = runs[FG_RECOMPUTE_NONE][0].seconds - costs->seconds[FG_RECOMPUTE_NONE] * d0;
    return FG_OK;
}
