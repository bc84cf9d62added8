/* muon.h — Muon for the hidden matrices, beside AdamW for the rest (train/adamw.h).
 *
 * The split is nanochat's and modded-nanogpt's: Muon takes the 2-d matrices inside the blocks (the
 * parameter table's entries with ndim 2 and a layer >= 0: attention's and the MLP's weights);
 * AdamW keeps the embeddings, the head, the norms and the biases. Each group has its own learning
 * rate; the schedule (fg_lr_at, train/adamw.h) scales both alike: at step s Muon runs at
 * muon.lr · fg_lr_at(s) / adamw.lr.
 *
 * The update of one matrix W (R, C) with gradient G is torch.optim.Muon's (its single-tensor path,
 * with its defaults, which are Keller Jordan's):
 *     B ← lerp(B, G, 1 − μ)                 momentum (B, the buffer, starts at 0)
 *     U ← lerp(G, B, μ)                     Nesterov (U = B without it)
 *     O ← NS₅(U / max(‖U‖_F, eps))          Newton–Schulz: X ← a X + (b A + c A²) X, A = X Xᵀ,
 *                                           (a, b, c) = (3.4445, −4.7750, 2.0315), on the wide side
 *     W ← W · (1 − lr · wd) − lr' · O       decoupled weight decay, then the adjusted rate
 * with lr' = lr · sqrt(max(1, R / C)) ("original"), 0.2 · lr · sqrt(max(R, C)) ("match_rms_adamw",
 * Moonshot's: AdamW's learning rate and decay carry over), or lr · sqrt(R / C) ("spectral_unclamped").
 * PyTorch runs the iteration in bfloat16 (a GPU speed choice); here it runs in the model's dtype.
 * The clipping coefficient of the step multiplies G as it is read, as AdamW reads it.
 *
 * State: one momentum buffer per Muon matrix, the buffers back to back in table order in one flat
 * array (the checkpoint's "muon_momentum_buffer"), and scratch for the largest matrix's iteration,
 * both allocated by fg_muon_init: a step allocates nothing. CPU only; the update is the same for
 * any thread count (ops/cpu/muon.c), so data-parallel ranks, which all update every parameter,
 * stay bit-identical. ZeRO-1 does not shard it (the trainer refuses the pair).
 */
#ifndef FG_MUON_H
#define FG_MUON_H

#include <stdint.h>

#include "train/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The learning-rate adjustment of torch.optim.Muon's adjust_lr_fn. */
typedef enum { FG_MUON_ADJUST_ORIGINAL = 0, FG_MUON_ADJUST_MATCH_RMS_ADAMW, FG_MUON_ADJUST_SPECTRAL_UNCLAMPED,
               FG_MUON_ADJUST_COUNT } fg_muon_adjust;
/* "original", "match_rms_adamw", "spectral_unclamped"; parse returns -1 on an unknown name. */
const char *fg_muon_adjust_name(fg_muon_adjust a);
int fg_muon_adjust_parse(const char *s);

/* Which optimizer a run trains with. */
typedef enum { FG_OPTIM_ADAMW = 0, FG_OPTIM_MUON, FG_OPTIM_COUNT } fg_optim_kind;
/* "adamw", "muon" (Muon for the hidden matrices, AdamW for the rest); parse returns -1 when unknown. */
const char *fg_optim_name(fg_optim_kind k);
int fg_optim_parse(const char *s);

typedef struct {
    double lr;           /* peak learning rate of the Muon group (the schedule scales it) */
    double momentum;     /* μ in [0, 1) */
    int nesterov;        /* 0 or 1 */
    int ns_steps;        /* Newton–Schulz iterations, 1..FG_MUON_MAX_NS_STEPS */
    double weight_decay; /* decoupled, at the unadjusted lr */
    fg_muon_adjust adjust;
} fg_muon_config;

#define FG_MUON_NS_A 3.4445
#define FG_MUON_NS_B (-4.7750)
#define FG_MUON_NS_C 2.0315
#define FG_MUON_EPS 1e-7
#define FG_MUON_MAX_NS_STEPS 99 /* PyTorch's bound */

/* lr 0.02, momentum 0.95, Nesterov, 5 steps, weight decay 0, the original adjustment. */
fg_muon_config fg_muon_default_config(void);
/* FG_OK or FG_ERR_ARG naming the bad field. */
fg_status fg_muon_config_check(const fg_muon_config *c);

/* 1 when Muon takes the table entry p (ndim 2 and inside a block), else 0. */
int fg_muon_takes(const fg_gpt_param *p);
/* The adjusted learning rate of a (rows, cols) matrix at lr. */
double fg_muon_adjusted_lr(fg_muon_adjust a, double lr, int64_t rows, int64_t cols);

typedef struct {
    fg_muon_config cfg;
    int64_t n;         /* elements of the Muon matrices together */
    fg_tensor *buf;    /* (n) momentum buffers, zero at the start */
    fg_tensor *work;   /* scratch for the largest matrix (ops/flat.h, fg_flat_muon_work) */
    int64_t t;         /* updates done */
} fg_muon;

/* Zeroed buffers for g's Muon matrices. FG_OK, FG_ERR_ARG (a bad config, or no matrix for Muon),
 * FG_ERR_DEVICE (not a CPU model), FG_ERR_OOM. */
fg_status fg_muon_init(fg_muon *o, const fg_muon_config *c, const fg_gpt *g);
void fg_muon_free(fg_muon *o);

/* One Muon update of g's Muon matrices at learning rate lr (the group's, scheduled) from the
 * gradients times gscale (t advances by 1); the other parameters are left alone. */
fg_status fg_muon_update(fg_muon *o, fg_gpt *g, double lr, double gscale);

#ifdef __cplusplus
}
#endif
#endif /* FG_MUON_H */
