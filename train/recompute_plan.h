/* recompute_plan.h — choosing each block's recompute setting (train/gpt.h) under a memory budget.
 *
 * The cost model, per choice c of a block (FG_RECOMPUTE_*), all measured on the machine for the
 * model and batch at hand (`flashgrad bench recompute`):
 *   held        the bytes live between steps (parameters, gradients, AdamW moments: one flat buffer
 *               each, whose size class is not linear in the depth, so they are measured at the
 *               planned depth and kept out of the per-block figures);
 *   bytes[c]    what one block adds to the step's peak above `held`: the activations it keeps from
 *               its forward to its backward;
 *   top[c]      what the step's peak holds on top of those when this block's backward (its
 *               recomputation, its gradients), or the embedding, the head and the loss, are at
 *               their largest;
 *   seconds[c]  one block's share of the step time; base_seconds the rest of the step.
 * Block l's backward runs while blocks 0 .. l still hold their bytes (the ones above have given
 * theirs back), so a plan c_0 .. c_{L-1} is predicted to peak at
 *     peak = held + max over l of ( bytes[c_0] + ... + bytes[c_l] + top[c_l] )
 * and to take  time = base_seconds + Σ_l seconds[c_l].  With every block the same (c), the peak is
 * held + L bytes[c] + top[c]: two uniform runs at two depths give bytes[c] and top[c] exactly.
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
#include "train/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t held;
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

/* Every count vector of the allowed choices over L blocks (C(L + k − 1, k − 1) of them for k
 * allowed choices), each as the plan of the lowest predicted peak for its counts (the planner's
 * order), handed to fn with its predicted peak and seconds. Returns how many (0 on a bad L). */
int64_t fg_recompute_enumerate(const fg_recompute_costs *c, int L,
                               void (*fn)(void *user, const unsigned char *plan, int64_t peak, double seconds),
                               void *user);

/* choice[0 .. L) into cfg's per-block plan (recompute_plan). */
void fg_recompute_plan_apply(fg_gpt_config *cfg, const unsigned char *choice);

/* ---- measuring on this machine ---- */

/* One measured configuration. */
typedef struct {
    double seconds;     /* the fastest timed step's wall time (device synchronized): on a shared
                         * machine the least disturbed one, the estimate of the step's own cost */
    int64_t peak;       /* the allocator's high-water mark during a timed step (the largest of them),
                         * everything the step holds: parameters, gradients, AdamW moments included */
    int64_t held;       /* the allocator's live bytes before a timed step (what lives between steps) */
    int64_t rss_growth; /* bytes: the process's resident high-water mark over the run less its resident
                         * size before the trainer was made (Linux /proc; -1 where unknown) */
    double first_loss;  /* the first step's loss (every plan gives the same, bit for bit) */
} fg_recompute_run;

/* Trains cfg on src for warm + steps steps from a fresh model (cfg's seed) and measures the timed
 * `steps` (see fg_recompute_run). Before it, the allocator's cache is given back, so peak and RSS
 * growth count this run only. FG_OK, or the trainer's error. */
fg_status fg_recompute_measure(const fg_train_config *cfg, const fg_source *src, int warm, int steps,
                               fg_recompute_run *run);

/* The cost model of recompute_plan.h for cfg's model and batch: for each allowed choice c, every
 * block making c at two depths (1 and L, or 1 and 2 when L is 1), through fg_recompute_measure;
 * runs[c][0] the shallow, runs[c][1] the deep run. With e = peak − held of a run: bytes[c] =
 * (e_deep − e_shallow) / (depths' difference), top[c] = e_shallow − bytes[c] · shallow depth, held
 * the deep NONE run's; seconds likewise (base_seconds from NONE's runs). *inexact gets the largest remainder of those divisions (0: the bytes are exact).
 * progress, if not NULL, is called after each run. */
fg_status fg_recompute_measure_costs(const fg_train_config *cfg, const fg_source *src, int warm, int steps,
                                     const int *allowed, fg_recompute_costs *costs,
                                     fg_recompute_run runs[FG_RECOMPUTE_COUNT][2], int64_t *inexact,
                                     void (*progress)(void *user, int choice, int deep, const fg_recompute_run *r),
                                     void *user);

#ifdef __cplusplus
}
#endif
#endif /* FG_RECOMPUTE_PLAN_H */
