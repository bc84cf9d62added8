/* trainer.h — one training run: data source, configuration, the optimizer step, evaluation.
 *
 * `flashgrad train`, `flashgrad bench train` and the tests all drive a model through this one
 * interface, so what the tests check (bit-exact resume, no allocation after warm-up) is what the
 * program does.
 *
 * A step (fg_trainer_step) is:
 *     zero grads_flat
 *     for micro in 0 .. grad_accum-1:
 *         (x, y) = train batch number step·grad_accum + micro          (pure function of the seed)
 *         loss = model(x, y) with dropout masks of (seed, step, micro)   (train/gpt.h)
 *         backward(loss) with d loss = 1 / grad_accum                   (so grads are the mean)
 *     clip the global gradient norm; AdamW at lr = schedule(step)
 *     (the clip's coefficient applied as AdamW reads each gradient: grads_flat keeps the unclipped sum)
 * Everything random is a pure function of (seed, step, micro), so the state of a run is its
 * parameters, AdamW's moments and `step`: a run resumed from those continues bit for bit. Given
 * the same thread count, a run is reproducible bit for bit (sums are in a fixed order).
 *
 * The micro-batch gradients are summed as a left fold, acc = g_0; acc += g_1; ..., each g computed
 * from zero gradients; so the sum is the same whether the micro-batches run in one process or on P
 * ranks of a data-parallel run (train/dist.h): grad_accum counts the micro-batches of the WHOLE
 * step, and rank r runs the global micro-batches r·A .. r·A + A - 1 (A = grad_accum / P, with the
 * batches and dropout masks of those global indices), folds its own A, and the ranks' sums are
 * folded in rank order. P ranks with A = 1 therefore give one process's step with grad_accum P
 * bit for bit. Every rank then clips and applies the same update; with `zero`, each keeps AdamW's
 * moments for its shard of the flat parameters only (ZeRO-1), updates that shard and all-gathers
 * the parameters.
 *
 * Evaluation (fg_trainer_eval_loss) averages the loss over eval_iters FIXED batches of a split —
 * the same batches at every evaluation, drawn with a seed derived from the run's — without dropout
 * and without recording a graph.
 */
#ifndef FG_TRAINER_H
#define FG_TRAINER_H

#include <stdint.h>

#include "datasets/source.h"
#include "train/adamw.h"
#include "train/dist.h"
#include "train/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- data: datasets/source.h ---- */

/* ---- configuration ---- */
typedef struct {
    fg_gpt_config model;
    fg_adamw_config opt;
    int batch_size; /* B, rows per micro-batch */
    int grad_accum; /* micro-batches per optimizer step, over all ranks of a data-parallel run */
    int64_t steps;  /* optimizer steps of the run */
    int eval_every; /* evaluate every k steps (0: only at the end) */
    int eval_iters; /* batches per evaluation */
    uint64_t seed;
    /* the save policy (nanoGPT's always_save_checkpoint = False: checkpoint only an evaluation that
     * improves the best val loss): the checkpoint keeps it for --resume; the trainer does not read it */
    int save_best_only;
} fg_train_config;

/* The plausible ranges of a run's settings: what fg_train_config_check accepts, what the train
 * command's flags accept, and what a checkpoint's metadata may hold when it is read back (a value
 * outside is a damaged or foreign file, refused by key). */
#define FG_TRAIN_LR_MAX 10.0           /* lr in (0, max], min_lr in [0, lr] */
#define FG_TRAIN_EPS_MIN 1e-30         /* AdamW eps in [min, max] */
#define FG_TRAIN_EPS_MAX 1.0
#define FG_TRAIN_WD_MAX 1e6            /* weight decay in [0, max] */
#define FG_TRAIN_CLIP_MAX 1e30         /* gradient clip norm in [0, max] (0: off) */
#define FG_TRAIN_BATCH_MAX (1 << 24)   /* batch size in 1..max */
#define FG_TRAIN_ACCUM_MAX (1 << 20)   /* grad-accum in 1..max */
#define FG_TRAIN_STEPS_MAX 1000000000000LL /* steps, warmup, decay steps, step counters */
#define FG_TRAIN_EVAL_ITERS_MAX 10000000 /* eval-iters in 1..max */

/* FG_OK or FG_ERR_ARG naming the bad value (the model part via fg_gpt_config_check). */
fg_status fg_train_config_check(const fg_train_config *c);

/* ---- the run ---- */
typedef struct {
    fg_train_config cfg;
    fg_gpt *model;         /* owned */
    fg_adamw opt;          /* owned */
    const fg_source *data; /* borrowed */
    int64_t step;          /* optimizer steps done */
    int T;                 /* sequence length of the batches */
    int32_t *x, *y;        /* (B, T) batch buffers */
    fg_tensor *grad_seed;  /* (1) = 1 / grad_accum, the loss gradient of each micro-batch */
    /* data parallelism (train/dist.h) */
    fg_comm *comm;                /* borrowed; the one-process communicator by default */
    /* zero: opt holds the moments of [shard_lo, shard_hi) only, whole blocks of the gradient
     * norm (ops/flat.h, fg_flat_norm_blocks); a step folds the gradient on that shard alone, so after it
     * grads_flat outside the shard holds this rank's own micro-batch sum, not the step's gradient */
    int zero;
    int64_t shard_lo, shard_hi;   /* this rank's shard of the flat parameters */
    double *norm_parts;           /* zero: this rank's blocks' sums of squares, then every rank's */
    fg_tensor *acc;               /* (P) the fold of the micro-batch gradients (when A > 1), or NULL */
    double *losses;               /* (grad_accum) the micro-batch losses of a step, global order */
    fg_tensor *m_shard, *v_shard; /* zero: the shard moments while opt holds full ones (fg_trainer_unshard) */
} fg_trainer;

/* A fresh run: model initialized from cfg->seed, zero moments, step 0. cfg->model.vocab_size must
 * equal the data's; for the addition task block_size must be at least the task's T. Caller frees. */
fg_trainer *fg_trainer_create(const fg_train_config *cfg, const fg_source *data);
void fg_trainer_free(fg_trainer *tr);
/* The same on rank comm->rank of comm's ranks (NULL: one process); cfg->grad_accum must be a
 * multiple of comm->size. zero = 1 shards AdamW's moments (CPU only). */
fg_trainer *fg_trainer_create_dist(const fg_train_config *cfg, const fg_source *data, fg_comm *comm, int zero);

/* With zero (a no-op otherwise): fg_trainer_unshard makes opt hold full-size moments (gathered from
 * every rank when gather, else uninitialized: for a restore), as checkpoints read and write them;
 * fg_trainer_reshard goes back to the shards, first copying the full moments' part into them when
 * keep (after a restore). Collective: every rank calls them. */
fg_status fg_trainer_unshard(fg_trainer *tr, int gather);
void fg_trainer_reshard(fg_trainer *tr, int keep);

typedef struct {
    double loss; /* mean over the micro-batches */
    double lr;
    double grad_norm; /* before clipping */
    int64_t tokens;   /* tokens processed: B · T · grad_accum (all ranks) */
    uint64_t comm_bytes; /* bytes this rank's collectives moved in the step (train/dist.h, `bytes`) */
} fg_step_stats;

/* One optimizer step (see the top). A non-finite loss or gradient norm returns FG_ERR_NUMERIC
 * naming the step, and leaves the parameters, moments and step untouched. */
fg_status fg_trainer_step(fg_trainer *tr, fg_step_stats *st);

/* Mean loss over eval_iters fixed batches of split s (no dropout, no graph). */
fg_status fg_trainer_eval_loss(fg_trainer *tr, fg_split s, double *loss);

/* Addition task only: exact-match accuracy over the first K evaluation problems of split s,
 * decoded greedily in batches. */
fg_status fg_trainer_accuracy(fg_trainer *tr, fg_split s, int K, double *acc);

/* The seed of the fixed evaluation batches (derived from the run seed). */
uint64_t fg_trainer_eval_seed(uint64_t run_seed);

/* Model FLOPs per trained token, as nanoGPT's estimate_mfu counts them (PaLM, appendix B):
 * 6 N for the parameters' products in forward and backward (N = every parameter, the tied token
 * embedding once; an untied token embedding, a lookup, not at all, as nanochat counts) plus 12 L C T
 * for attention's two products QK^T and PV, forward and backward, at the trained sequence length
 * T (a layer with a sliding window of w keys back: 12 C min(T, w + 1)). Recomputation and masked
 * (causal) work are not counted. */
double fg_trainer_flops_per_token(const fg_trainer *tr);

/* Model FLOPs utilization at `tokens_per_s`: tokens/s × fg_trainer_flops_per_token / the CPU's
 * float32 FMA peak on the pool's threads (fg_fma_peak_gflops, ops/cpu/peak.h; measured once per
 * process, ~0.1 s, on first use) of every rank (tokens/s counts all ranks' tokens). A fraction (0.41 is 41%);
 * NAN for a model not on the CPU. */
double fg_trainer_mfu(const fg_trainer *tr, double tokens_per_s);

#ifdef __cplusplus
}
#endif
#endif /* FG_TRAINER_H */
