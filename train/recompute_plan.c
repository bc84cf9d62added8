/* recompute_plan.c — the exact planner of recompute_plan.h. */
#include "train/recompute_plan.h"

#include <string.h>

#include "tensor/error.h"

int64_t fg_recompute_predict_peak(const fg_recompute_costs *c, int L, const unsigned char *choice) {
    int64_t held = 0, peak = INT64_MIN;
    for (int l = 0; l < L; l++) {
        held += c->bytes[choice[l]];
        const int64_t p = held + c->top[choice[l]];
        if (p > peak) peak = p;
    }
    return peak;
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
    return peak;
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

void fg_recompute_plan_apply(fg_gpt_config *cfg, const unsigned char *choice) {
    memset(cfg->recompute_plan, 0, sizeof cfg->recompute_plan);
    for (int l = 0; l < cfg->n_layer && l < FG_GPT_MAX_LAYER_PLAN; l++)
        cfg->recompute_plan[l] = (unsigned char)(choice[l] + 1);
}
