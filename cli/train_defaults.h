/* train_defaults.h — the default settings of `flashgrad train` for each kind of data.
 *
 * text:     nanoGPT's Shakespeare-char CPU quick-start (4 layers, 4 heads, 128 wide, block 64,
 *           batch 12, 2000 steps, lr 1e-3 -> 1e-4 with 100 warm-up steps, beta2 0.99, wd 0.1,
 *           clip 1.0, dropout 0).
 * addition: sized so that `make train` finishes in a couple of minutes on 2 CPU cores and solves
 *           held-out 3-digit additions. Tuning notes (2 layers, 64 wide, batch 32, lr 3e-3):
 *           with the loss on every token (optimum 0.9594) a run crosses two plateaus — near
 *           1.54 (routing attention to the right digits) and near 1.15 (the carry) — whose
 *           length is counted in optimizer steps (batch 256 did not shorten them) and varies
 *           with the seed and the rounding: of 5 seeds run for 6000 steps, 4 reached >= 99.8%
 *           held-out exact match and one stayed at the carry plateau (~10%), as did a 10000-step
 *           run of the default seed after a change in the ops' rounding. With the loss on the answer tokens only
 *           (answer_only, optimum 0) the uniform operand digits add no gradient noise: all six
 *           seeds tried (2, 5, 6, 7, 8, 1337) reached 100% by step 3000. So the default is
 *           answer_only with 6000 steps (twice the slowest seed); --answer-only 0 trains on
 *           every token.
 */
#ifndef FG_TRAIN_DEFAULTS_H
#define FG_TRAIN_DEFAULTS_H

typedef struct {
    int digits;
    int answer_only;
    int steps;
    int n_layer, n_head, n_embd, block_size;
    int batch_size, grad_accum;
    double lr, min_lr;
    int warmup;
    double weight_decay, beta1, beta2, grad_clip, dropout;
    int eval_every, eval_iters, eval_problems;
    int samples;
} fg_train_defaults;

static const fg_train_defaults fg_defaults_text = {
    .digits = 3,
    .answer_only = 1 /* addition only; unused for text */,
    .steps = 2000,
    .n_layer = 4,
    .n_head = 4,
    .n_embd = 128,
    .block_size = 64,
    .batch_size = 12,
    .grad_accum = 1,
    .lr = 1e-3,
    .min_lr = 1e-4,
    .warmup = 100,
    .weight_decay = 0.1,
    .beta1 = 0.9,
    .beta2 = 0.99,
    .grad_clip = 1.0,
    .dropout = 0.0,
    .eval_every = 250,
    .eval_iters = 20,
    .eval_problems = 1000,
    .samples = 2,
};

static const fg_train_defaults fg_defaults_addition = {
    .digits = 3,
    .answer_only = 1,
    .steps = 6000,
    .n_layer = 2,
    .n_head = 4,
    .n_embd = 64,
    .block_size = 12,
    .batch_size = 32,
    .grad_accum = 1,
    .lr = 3e-3,
    .min_lr = 1e-4,
    .warmup = 100,
    .weight_decay = 0.1,
    .beta1 = 0.9,
    .beta2 = 0.99,
    .grad_clip = 1.0,
    .dropout = 0.0,
    .eval_every = 500,
    .eval_iters = 10,
    .eval_problems = 1000,
    .samples = 5,
};

#endif /* FG_TRAIN_DEFAULTS_H */
