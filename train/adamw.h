/* adamw.h — AdamW, the learning-rate schedule and gradient clipping, as flat loops.
 *
 * The model's parameters and gradients are each one contiguous array (train/gpt.h), and so are
 * AdamW's two moments here: m and v are (P) tensors in the model's dtype, P the parameter count.
 * Each update is one pass over the arrays, range by range of the parameter table, because weight
 * decay applies only to the ranges whose table entry says `decay` (nanoGPT's rule: the 2-d
 * tensors — the matmul weights and the two embeddings; never biases or LayerNorm parameters).
 *
 * The update is PyTorch's torch.optim.AdamW (decoupled weight decay, Loshchilov & Hutter 2019),
 * for step t = 1, 2, ...:
 *     p ← p · (1 − lr · wd)                     (decayed ranges only)
 *     m ← β1 m + (1 − β1) g
 *     v ← β2 v + (1 − β2) g²
 *     p ← p − (lr / (1 − β1ᵗ)) · m / (sqrt(v) / sqrt(1 − β2ᵗ) + eps)
 *
 * The schedule is nanoGPT's: linear warm-up over `warmup` steps, lr·(s+1)/(warmup+1) at step s,
 * then a half cosine from lr down to min_lr at step `decay_steps`, and min_lr after it.
 *
 * Clipping is torch.nn.utils.clip_grad_norm_: with n = ‖g‖₂ over all parameters, the gradients
 * are scaled by clip / (n + 1e-6) when that is below 1. The norm is summed in float64, in fixed
 * blocks of the array (16 lanes each for float32) added in block order, so it does not depend on
 * threads or on the SIMD level (ops/cpu/adamw.c).
 */
#ifndef FG_ADAMW_H
#define FG_ADAMW_H

#include <stdint.h>

#include "train/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double lr;           /* peak learning rate */
    double min_lr;       /* the schedule's floor */
    int64_t warmup;      /* warm-up steps (0: none) */
    int64_t decay_steps; /* the step where the cosine reaches min_lr (nanoGPT's lr_decay_iters) */
    double beta1, beta2, eps;
    double weight_decay;
    double grad_clip; /* 0: no clipping */
} fg_adamw_config;

/* The learning rate at (0-based) step s. */
double fg_lr_at(const fg_adamw_config *c, int64_t s);

typedef struct {
    fg_adamw_config cfg;
    int64_t n;        /* P */
    fg_tensor *m, *v; /* (P), zero at the start */
    int64_t t;        /* updates done */
    int muon;         /* 1: the entries Muon takes (train/muon.h, fg_muon_takes) are Muon's; AdamW
                       * leaves them alone (their moments stay zero) */
} fg_adamw;

/* Zeroed moments for P >= 0 parameters of dtype dt (0: an empty ZeRO-1 shard). FG_OK or FG_ERR_OOM /
 * FG_ERR_ARG. */
fg_status fg_adamw_init(fg_adamw *o, const fg_adamw_config *c, fg_dtype dt, fg_device dev, int64_t P);
void fg_adamw_free(fg_adamw *o);

/* ‖g‖₂ of a flat (P) gradient, summed in float64 (see above). */
double fg_grad_norm(const fg_tensor *grads);
/* g ← g · s. */
void fg_grad_scale(fg_tensor *grads, double s);
/* Clip as described above; returns the norm before clipping. clip <= 0 only measures. */
double fg_clip_grad_norm(fg_tensor *grads, double clip);

/* One AdamW update of g's parameters from g's gradients at learning rate lr (t advances by 1). */
fg_status fg_adamw_update(fg_adamw *o, fg_gpt *g, double lr);
/* The same update of the parameters [lo, hi) of the flat array only, whose moments o holds (o->n is
 * hi - lo: a ZeRO-1 shard, train/dist.h), from the gradients times gscale (a clipping coefficient,
 * applied as AdamW reads each gradient: the bits of fg_grad_scale then the update, one pass over
 * the gradients fewer; the gradients themselves are left as they are). Elementwise, so a shard's
 * result is bit for bit that part of the whole update. */
fg_status fg_adamw_update_range(fg_adamw *o, fg_gpt *g, double lr, double gscale, int64_t lo, int64_t hi);

#ifdef __cplusplus
}
#endif
#endif /* FG_ADAMW_H */
