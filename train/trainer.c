/* trainer.c — the optimizer step and evaluation (see trainer.h). */
#include "train/trainer.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "ops/cpu/peak.h"
#include "tensor/fileio.h"
#include "tensor/philox.h"

/* ---- configuration ---- */

fg_status fg_train_config_check(const fg_train_config *c) {
    fg_status st = fg_gpt_config_check(&c->model);
    if (st != FG_OK) return st;
    const fg_adamw_config *o = &c->opt;
    if (c->batch_size < 1) return fg_error(FG_ERR_ARG, "batch size %d must be at least 1", c->batch_size);
    if (c->grad_accum < 1) return fg_error(FG_ERR_ARG, "grad-accum %d must be at least 1", c->grad_accum);
    if (c->steps < 1) return fg_error(FG_ERR_ARG, "steps %lld must be at least 1", (long long)c->steps);
    if (c->eval_every < 0) return fg_error(FG_ERR_ARG, "eval-every %d must not be negative", c->eval_every);
    if (c->eval_iters < 1) return fg_error(FG_ERR_ARG, "eval-iters %d must be at least 1", c->eval_iters);
    if (!(o->lr > 0 && isfinite(o->lr))) return fg_error(FG_ERR_ARG, "lr %g must be positive", o->lr);
    if (!(o->min_lr >= 0 && o->min_lr <= o->lr))
        return fg_error(FG_ERR_ARG, "min-lr %g must be in [0, lr = %g]", o->min_lr, o->lr);
    if (o->warmup < 0) return fg_error(FG_ERR_ARG, "warmup %lld must not be negative", (long long)o->warmup);
    if (o->decay_steps < 1)
        return fg_error(FG_ERR_ARG, "lr-decay-steps %lld must be at least 1", (long long)o->decay_steps);
    if (!(o->beta1 >= 0 && o->beta1 < 1)) return fg_error(FG_ERR_ARG, "beta1 %g must be in [0, 1)", o->beta1);
    if (!(o->beta2 >= 0 && o->beta2 < 1)) return fg_error(FG_ERR_ARG, "beta2 %g must be in [0, 1)", o->beta2);
    if (!(o->eps > 0 && isfinite(o->eps))) return fg_error(FG_ERR_ARG, "eps %g must be positive", o->eps);
    if (!(o->weight_decay >= 0 && isfinite(o->weight_decay)))
        return fg_error(FG_ERR_ARG, "weight-decay %g must not be negative", o->weight_decay);
    if (!(o->grad_clip >= 0 && isfinite(o->grad_clip)))
        return fg_error(FG_ERR_ARG, "grad-clip %g must not be negative (0 turns clipping off)", o->grad_clip);
    return FG_OK;
}

/* ---- the run ---- */

/* The value of a (1) loss on any device (a device copy waits for the step's queued work). */
static double scalar_value(const fg_tensor *t) {
    if (t->device == FG_CPU) return fg_get(t, 0);
    double d = NAN;
    float f = NAN;
    if (fg_to_host(t, t->dtype == FG_F64 ? (void *)&d : (void *)&f) != FG_OK) return NAN;
    return t->dtype == FG_F64 ? d : (double)f;
}

fg_trainer *fg_trainer_create(const fg_train_config *cfg, const fg_source *data) {
    if (fg_train_config_check(cfg) != FG_OK) return NULL;
    int V = fg_source_vocab_size(data);
    if (cfg->model.vocab_size != V) {
        fg_error(FG_ERR_ARG, "the model's vocabulary (%d) differs from the data's (%d)", cfg->model.vocab_size, V);
        return NULL;
    }
    int T = fg_source_fixed_block(data);
    if (T == 0) T = cfg->model.block_size;
    if (T > cfg->model.block_size) {
        fg_error(FG_ERR_ARG, "the task needs block size %d, the model has %d", T, cfg->model.block_size);
        return NULL;
    }
    fg_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) {
        fg_error(FG_ERR_OOM, "trainer: out of memory");
        return NULL;
    }
    tr->cfg = *cfg;
    tr->data = data;
    tr->T = T;
    size_t n = (size_t)cfg->batch_size * (size_t)T;
    tr->x = malloc(n * sizeof *tr->x);
    tr->y = malloc(n * sizeof *tr->y);
    if (!tr->x || !tr->y) {
        fg_error(FG_ERR_OOM, "trainer: out of memory for a (%d, %d) batch", cfg->batch_size, T);
        fg_trainer_free(tr);
        return NULL;
    }
    tr->model = fg_gpt_create(&cfg->model, cfg->seed);
    if (!tr->model ||
        fg_adamw_init(&tr->opt, &cfg->opt, cfg->model.dtype, cfg->model.device, tr->model->num_elements) != FG_OK) {
        fg_trainer_free(tr);
        return NULL;
    }
    int64_t one = 1;
    tr->grad_seed = fg_full(cfg->model.dtype, cfg->model.device, 1, &one, 1.0 / cfg->grad_accum);
    if (!tr->grad_seed) {
        fg_trainer_free(tr);
        return NULL;
    }
    return tr;
}

void fg_trainer_free(fg_trainer *tr) {
    if (!tr) return;
    fg_gpt_free(tr->model);
    fg_adamw_free(&tr->opt);
    fg_release(tr->grad_seed);
    free(tr->x);
    free(tr->y);
    free(tr);
}

fg_status fg_trainer_step(fg_trainer *tr, fg_step_stats *out) {
    const fg_train_config *c = &tr->cfg;
    const int B = c->batch_size, T = tr->T;
    fg_step_stats st = {.lr = fg_lr_at(&c->opt, tr->step), .tokens = (int64_t)B * T * c->grad_accum};
    fg_gpt_zero_grad(tr->model);
    double loss_sum = 0;
    for (int micro = 0; micro < c->grad_accum; micro++) {
        uint64_t index = (uint64_t)tr->step * (uint64_t)c->grad_accum + (uint64_t)micro;
        fg_status s = fg_source_batch(tr->data, FG_SPLIT_TRAIN, B, T, c->seed, index, tr->x, tr->y);
        if (s != FG_OK) return s;
        fg_gpt_train_ctx ctx = {.seed = c->seed, .step = (uint64_t)tr->step, .micro = (uint32_t)micro};
        fg_tensor *loss = fg_gpt_loss(tr->model, tr->x, tr->y, B, T, &ctx);
        if (!loss) return fg_last_status();
        double lv = scalar_value(loss);
        if (!isfinite(lv)) {
            fg_release(loss);
            fg_gpt_zero_grad(tr->model);
            return fg_error(FG_ERR_NUMERIC, "the loss is not finite (%g) at step %lld", lv, (long long)tr->step + 1);
        }
        s = fg_backward(loss, tr->grad_seed);
        fg_release(loss);
        if (s != FG_OK) return s;
        loss_sum += lv;
    }
    st.loss = loss_sum / c->grad_accum;
    st.grad_norm = fg_grad_norm(tr->model->grads_flat);
    if (!isfinite(st.grad_norm)) {
        fg_gpt_zero_grad(tr->model);
        return fg_error(FG_ERR_NUMERIC, "the gradient norm is not finite (%g) at step %lld", st.grad_norm,
                        (long long)tr->step + 1);
    }
    if (c->opt.grad_clip > 0) {
        double coef = c->opt.grad_clip / (st.grad_norm + 1e-6);
        if (coef < 1.0) fg_grad_scale(tr->model->grads_flat, coef);
    }
    fg_status s = fg_adamw_update(&tr->opt, tr->model, st.lr);
    if (s != FG_OK) return s;
    tr->step++;
    if (out) *out = st;
    return FG_OK;
}

uint64_t fg_trainer_eval_seed(uint64_t run_seed) {
    uint32_t w[4];
    fg_philox_block(run_seed, 0x4556414cull << 32 /* "EVAL" */, 0, w);
    return ((uint64_t)w[1] << 32) | w[0];
}

fg_status fg_trainer_eval_loss(fg_trainer *tr, fg_split s, double *loss) {
    const int B = tr->cfg.batch_size, T = tr->T;
    const uint64_t seed = fg_trainer_eval_seed(tr->cfg.seed);
    double sum = 0;
    fg_status st = FG_OK;
    fg_no_grad_enter();
    for (int i = 0; i < tr->cfg.eval_iters; i++) {
        st = fg_source_batch(tr->data, s, B, T, seed, (uint64_t)i, tr->x, tr->y);
        if (st != FG_OK) break;
        fg_tensor *l = fg_gpt_loss(tr->model, tr->x, tr->y, B, T, NULL);
        if (!l) {
            st = fg_last_status();
            break;
        }
        sum += scalar_value(l);
        fg_release(l);
    }
    fg_no_grad_exit();
    if (st == FG_OK) *loss = sum / tr->cfg.eval_iters;
    return st;
}

/* Problems decoded per forward pass. */
#define ACC_CHUNK 500

fg_status fg_trainer_accuracy(fg_trainer *tr, fg_split s, int K, double *acc) {
    if (tr->data->kind != FG_SOURCE_ADDITION) return fg_error(FG_ERR_ARG, "accuracy: only the addition task has one");
    if (K < 1) return fg_error(FG_ERR_ARG, "accuracy: need K >= 1 problems, got %d", K);
    const fg_addition *task = tr->data->add;
    const int pl = fg_addition_prompt_len(task), al = fg_addition_answer_len(task), W = pl + al;
    const int chunk = K < ACC_CHUNK ? K : ACC_CHUNK;
    int32_t *tok = malloc((size_t)chunk * W * sizeof *tok), *ans = malloc((size_t)chunk * al * sizeof *ans);
    fg_status st = tok && ans ? FG_OK : fg_error(FG_ERR_OOM, "accuracy: out of memory");
    int correct = 0;
    for (int i0 = 0; i0 < K && st == FG_OK; i0 += chunk) {
        int n = K - i0 < chunk ? K - i0 : chunk;
        for (int r = 0; r < n && st == FG_OK; r++)
            st =
                fg_addition_problem(task, s, (uint64_t)(i0 + r), tok + (size_t)r * W, ans + (size_t)r * al, NULL, NULL);
        if (st == FG_OK) st = fg_gpt_greedy_batch(tr->model, tok, n, pl, al);
        for (int r = 0; r < n && st == FG_OK; r++)
            correct += !memcmp(tok + (size_t)r * W + pl, ans + (size_t)r * al, (size_t)al * sizeof *ans);
    }
    free(tok);
    free(ans);
    if (st == FG_OK) *acc = (double)correct / K;
    return st;
}

/* ---- model FLOPs ---- */

double fg_trainer_flops_per_token(const fg_trainer *tr) {
    const fg_gpt_config *m = &tr->cfg.model;
    return 6.0 * (double)tr->model->num_elements + 12.0 * m->n_layer * (double)m->n_embd * tr->T;
}

double fg_trainer_mfu(const fg_trainer *tr, double tokens_per_s) {
    if (tr->cfg.model.device != FG_CPU) return NAN;
    return tokens_per_s * fg_trainer_flops_per_token(tr) / (fg_fma_peak_gflops() * 1e9);
}
