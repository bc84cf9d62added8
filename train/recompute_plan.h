/* recompute_plan.h — choosing each block's recompute setting (train/gpt.h) under a memory budget.
 *
 * The cost model, per choice c of a block (FG_RECOMPUTE_*), all measured on the machine for the
 * model and batch at hand (`flashgrad bench recompute`):
 *   bytes[c]    what one block adds to the step's peak: the activations it keeps from its forward
 *               to its backward, and its share of parameters, gradients and AdamW moments;
 *   top[c]      what the step's peak holds on top of the blocks' bytes when this block's backward
 *               (its recomputation, its gradients), or the embedding, the head and the loss, are
 *               at their largest;
 *   seconds[c]  one block's share of the step time; base_seconds the rest of the step.
 * Block l's backward runs while blocks 0 .. l still hold their bytes (the ones above have given
 * theirs back), so a plan c_0 .. c_{L-1} is predicted to peak at
 *     peak = max over l of ( bytes[c_0] + ... + bytes[c_l] + top[c_l] )
 * and to take  time = base_seconds + Σ_l seconds[c_l].  With every block the same (c), the peak is
 * L bytes[c] + top[c]: two uniform runs at two depths give bytes[c] and top[c] exactly.
 *
 * The planner is exact for this model: the time depends only on how many blocks make each choice,
 * and for given counts the lowest peak puts the choices in decreasing top[c] from block 0 up
 * (Jackson's rule: minimizing the largest prefix sum plus a tail is solved by ordering the tails
 * decreasingly). So every count vector (C(L + 4, 4) of them) is tried, each in its best order.
 */
#ifndef FG_RECOMPUTE_PLAN_H
#define FG_RECOMPUTE_PLAN_H

#include <stdint.h>

#include "train/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t bytes[FG_RECOMPUTE_COUNT];
    int64_t top[FG_RECOMPUTE_COUNT];
    double seconds[FG_RECOMPUTE_COUNT];
    double base_seconds;
    int allowed[FG_RECOMPUTE_COUNT]; /* 1: the planner may use this choice */
} fg_recompute_costs;

/* The largest model the planner takes (its count vectors grow as L^4 / 24). */
#define FG_RECOMPUTE_PLAN_MAX_LAYER 256

/* The predicted peak bytes and step seconds of plan choice[0 .. L) (see the top). */
int64_t fg_recompute_predict_peak(const fg_recompute_costs *c, int L, const unsigned char *choice);
double fg_recompute_predict_seconds(const fg_recompute_costs *c, int L, const unsigned char *choice);

/* The plan with the least predicted time whose predicted peak is <= budget (among equal times the
 * lower peak): FG_OK with choice[0 .. L) (FG_RECOMPUTE_* values), *peak and *seconds its
 * predictions. When no plan fits: FG_ERR_ARG, choice the plan of the lowest predicted peak and
 * *peak that peak (the smallest budget that fits). FG_ERR_ARG also for L outside
 * 1 .. FG_RECOMPUTE_PLAN_MAX_LAYER or no allowed choice (with a message). */
fg_status fg_recompute_plan(const fg_recompute_costs *c, int L, int64_t budget, unsigned char *choice, int64_t *peak,
                            double *seconds);

/* choice[0 .. L) into cfg's per-block plan (recompute_plan). */
void fg_recompute_plan_apply(fg_gpt_config *cfg, const unsigned char *choice);

#ifdef __cplusplus
}
#endif
#endif /* FG_RECOMPUTE_PLAN_H */
