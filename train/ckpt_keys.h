/* ckpt_keys.h — the configuration a checkpoint records, one row per metadata key.
 *
 * train/checkpoint.c writes each row, reads it back (with the row's range) and refuses what it
 * does not read; cli/train_setup.c requires, on --resume, that a flag the row keeps matches the
 * checkpoint's value. A key added here is written, read, range-checked and (when kept) held on
 * resume without touching either file.
 *
 * X(key, type, field, a, b, keep, when)
 *   key    the metadata key; a kept key's flag is "--" + key with '_' as '-' ("n_layer": --n-layer)
 *   type   I  an integer field, canonical decimal in a .. b
 *          F  a double, written %.17g, finite and in [a, b]     FO: the same in [a, b)
 *          U  a uint64_t, canonical decimal (a, b unused)
 *          E  an enum, written by name: a is its name function, b the count of names
 *          NB a flag stored negated, "true" when the field is 0 and "false" when it is 1
 *          WIN the attention window pattern ("L" when empty); PLAN the recompute plan
 *   field  the member: of fg_gpt_config (FG_CKPT_MODEL_KEYS, FG_CKPT_ARCH_KEYS) or of
 *          fg_train_config (FG_CKPT_RUN_KEYS, FG_CKPT_MUON_KEYS)
 *   keep   KEEP: --resume refuses the flag with another value; FREE: not held this way (changes
 *          freely, or has its own check: the architecture, --dtype, --attn, --recompute)
 *   when   ALL  always written, always required
 *          SET  written when the field is not 0 (its default); absent reads as 0
 *          OPT  always written; absent reads as 0 (files written before the key existed)
 *          and for a whole list: FG_CKPT_ARCH_KEYS written for a model that is not GPT-2 (absent
 *          "arch": every option GPT-2's), FG_CKPT_MUON_KEYS for a run with Muon ("optimizer" =
 *          "muon").
 * Rows are read in order, so the first error names the first bad row. */
#ifndef FG_CKPT_KEYS_H
#define FG_CKPT_KEYS_H

#include <limits.h>

#include "train/gpt.h"
#include "train/muon.h"
#include "train/trainer.h"

#define FG_CKPT_MODEL_KEYS(X)                                                                                          \
    X("n_layer", I, n_layer, 1, FG_GPT_MAX_LAYER, KEEP, ALL)                                                           \
    X("n_head", I, n_head, 1, FG_GPT_MAX_EMBD, KEEP, ALL)                                                              \
    X("n_embd", I, n_embd, 1, FG_GPT_MAX_EMBD, KEEP, ALL)                                                              \
    X("block_size", I, block_size, 1, FG_GPT_MAX_BLOCK, KEEP, ALL)                                                     \
    X("vocab_size", I, vocab_size, 1, FG_GPT_MAX_VOCAB, FREE, ALL)                                                     \
    X("dropout", FO, dropout, 0, 1, KEEP, ALL)                                                                         \
    X("attn", E, attn, fg_attn_impl_name, FG_ATTN_IMPL_COUNT, FREE, ALL)                                               \
    X("compute_dtype", E, compute, fg_compute_name, FG_COMPUTE_COUNT, FREE, SET)                                       \
    X("recompute", PLAN, recompute, 0, 0, FREE, SET)                                                                   \
    X("bias", NB, no_bias, 0, 0, FREE, ALL)                                                                            \
    X("tied_lm_head", NB, untie_head, 0, 0, FREE, ALL)

#define FG_CKPT_ARCH_KEYS(X)                                                                                           \
    X("arch", E, arch, fg_gpt_arch_name, FG_ARCH_COUNT, FREE, ALL)                                                     \
    X("n_kv_head", I, n_kv_head, 0, FG_GPT_MAX_EMBD, FREE, ALL)                                                        \
    X("pos", E, pos, fg_gpt_pos_name, FG_POS_COUNT, FREE, ALL)                                                         \
    X("rope_theta", F, rope_theta, 0, 1e300, FREE, ALL)                                                                \
    X("norm", E, norm, fg_gpt_norm_name, FG_NORM_COUNT, FREE, ALL)                                                     \
    X("norm_eps", FO, norm_eps, 0, 1, FREE, ALL)                                                                       \
    X("emb_norm", I, emb_norm, 0, 1, FREE, ALL)                                                                        \
    X("qk_norm", I, qk_norm, 0, 1, FREE, ALL)                                                                          \
    X("mlp", E, mlp, fg_gpt_mlp_name, FG_MLP_COUNT, FREE, ALL)                                                         \
    X("mlp_hidden", I, mlp_hidden, 0, FG_GPT_MAX_HIDDEN, FREE, ALL)                                                    \
    X("logit_softcap", F, logit_softcap, 0, 1e300, FREE, ALL)                                                          \
    X("window", WIN, window, 0, 0, FREE, ALL)

#define FG_CKPT_RUN_KEYS(X)                                                                                            \
    X("lr", F, opt.lr, 0, FG_TRAIN_LR_MAX, KEEP, ALL)                                                                  \
    X("min_lr", F, opt.min_lr, 0, FG_TRAIN_LR_MAX, KEEP, ALL)                                                          \
    X("warmup", I, opt.warmup, 0, FG_TRAIN_STEPS_MAX, KEEP, ALL)                                                       \
    X("decay_steps", I, opt.decay_steps, 1, FG_TRAIN_STEPS_MAX, FREE, ALL)                                             \
    X("beta1", FO, opt.beta1, 0, 1, KEEP, ALL)                                                                         \
    X("beta2", FO, opt.beta2, 0, 1, KEEP, ALL)                                                                         \
    X("eps", F, opt.eps, FG_TRAIN_EPS_MIN, FG_TRAIN_EPS_MAX, FREE, ALL)                                                \
    X("weight_decay", F, opt.weight_decay, 0, FG_TRAIN_WD_MAX, KEEP, ALL)                                              \
    X("grad_clip", F, opt.grad_clip, 0, FG_TRAIN_CLIP_MAX, KEEP, ALL)                                                  \
    X("batch_size", I, batch_size, 1, FG_TRAIN_BATCH_MAX, KEEP, ALL)                                                   \
    X("grad_accum", I, grad_accum, 1, FG_TRAIN_ACCUM_MAX, KEEP, ALL)                                                   \
    X("steps", I, steps, 1, FG_TRAIN_STEPS_MAX, FREE, ALL)                                                             \
    X("eval_every", I, eval_every, 0, INT_MAX, FREE, ALL)                                                              \
    X("eval_iters", I, eval_iters, 1, FG_TRAIN_EVAL_ITERS_MAX, FREE, ALL)                                              \
    X("seed", U, seed, 0, 0, KEEP, ALL)                                                                                \
    X("save_best_only", I, save_best_only, 0, 1, FREE, OPT)                                                            \
    X("optimizer", E, optimizer, fg_optim_name, FG_OPTIM_COUNT, KEEP, SET)

#define FG_CKPT_MUON_KEYS(X)                                                                                           \
    X("muon_lr", F, muon.lr, 0, FG_TRAIN_LR_MAX, KEEP, ALL)                                                            \
    X("muon_momentum", FO, muon.momentum, 0, 1, KEEP, ALL)                                                             \
    X("muon_nesterov", I, muon.nesterov, 0, 1, FREE, ALL)                                                              \
    X("muon_ns_steps", I, muon.ns_steps, 1, FG_MUON_MAX_NS_STEPS, KEEP, ALL)                                           \
    X("muon_weight_decay", F, muon.weight_decay, 0, FG_TRAIN_WD_MAX, KEEP, ALL)                                        \
    X("muon_adjust_lr", E, muon.adjust, fg_muon_adjust_name, FG_MUON_ADJUST_COUNT, KEEP, ALL)

#endif /* FG_CKPT_KEYS_H */
