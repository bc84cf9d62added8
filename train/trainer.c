/* trainer.c — the optimizer step and evaluation (see trainer.h). */
#include "train/trainer.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "ops/flat.h"
#include "ops/cpu.h"
#include "tensor/fileio.h"
#include "tensor/philox.h"

/* ---- configuration ---- */

fg_status fg_train_config_check(const fg_train_config *c) {
    fg_status st = fg_gpt_config_check(&c->model);
    if (st != FG_OK) return st;
    const fg_adamw_config *o = &c->opt;
    if (c->batch_size < 1 || c->batch_size > FG_TRAIN_BATCH_MAX)
        return fg_error(FG_ERR_ARG, "batch size %d is outside 1..%d", c->batch_size, FG_TRAIN_BATCH_MAX);
    if (c->grad_accum < 1 || c->grad_accum > FG_TRAIN_ACCUM_MAX)
        return fg_error(FG_ERR_ARG, "grad-accum %d is outside 1..%d", c->grad_accum, FG_TRAIN_ACCUM_MAX);
    if (c->steps < 1 || c->steps > FG_TRAIN_STEPS_MAX)
        return fg_error(FG_ERR_ARG, "steps %lld is outside 1..%lld", (long long)c->steps, FG_TRAIN_STEPS_MAX);
    if (c->eval_every < 0) return fg_error(FG_ERR_ARG, "eval-every %d must not be negative", c->eval_every);
    if (c->eval_iters < 1 || c->eval_iters > FG_TRAIN_EVAL_ITERS_MAX)
        return fg_error(FG_ERR_ARG, "eval-iters %d is outside 1..%d", c->eval_iters, FG_TRAIN_EVAL_ITERS_MAX);
    if (!(o->lr > 0 && o->lr <= FG_TRAIN_LR_MAX))
        return fg_error(FG_ERR_ARG, "lr %g is outside (0, %g]", o->lr, FG_TRAIN_LR_MAX);
    if (!(o->min_lr >= 0 && o->min_lr <= o->lr))
        return fg_error(FG_ERR_ARG, "min-lr %g must be in [0, lr = %g]", o->min_lr, o->lr);
    if (o->warmup < 0 || o->warmup > FG_TRAIN_STEPS_MAX)
        return fg_error(FG_ERR_ARG, "warmup %lld is outside 0..%lld", (long long)o->warmup, FG_TRAIN_STEPS_MAX);
    if (o->decay_steps < 1 || o->decay_steps > FG_TRAIN_STEPS_MAX)
        return fg_error(FG_ERR_ARG, "lr-decay-steps %lld is outside 1..%lld", (long long)o->decay_steps,
                        FG_TRAIN_STEPS_MAX);
    if (!(o->beta1 >= 0 && o->beta1 < 1)) return fg_error(FG_ERR_ARG, "beta1 %g must be in [0, 1)", o->beta1);
    if (!(o->beta2 >= 0 && o->beta2 < 1)) return fg_error(FG_ERR_ARG, "beta2 %g must be in [0, 1)", o->beta2);
    if (!(o->eps >= FG_TRAIN_EPS_MIN && o->eps <= FG_TRAIN_EPS_MAX))
        return fg_error(FG_ERR_ARG, "eps %g is outside [%g, %g]", o->eps, FG_TRAIN_EPS_MIN, FG_TRAIN_EPS_MAX);
    if (!(o->weight_decay >= 0 && o->weight_decay <= FG_TRAIN_WD_MAX))
        return fg_error(FG_ERR_ARG, "weight-decay %g is outside [0, %g]", o->weight_decay, FG_TRAIN_WD_MAX);
    if (!(o->grad_clip >= 0 && o->grad_clip <= FG_TRAIN_CLIP_MAX))
        return fg_error(FG_ERR_ARG, "grad-clip %g is outside [0, %g] (0 turns clipping off)", o->grad_clip,
                        FG_TRAIN_CLIP_MAX);
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
    return fg_trainer_create_dist(cfg, data, NULL, 0);
}

fg_trainer *fg_trainer_create_dist(const fg_train_config *cfg, const fg_source *data, fg_comm *comm, int zero) {
    if (fg_train_config_check(cfg) != FG_OK) return NULL;
    if (!comm) comm = fg_comm_single();
    if (cfg->grad_accum % comm->size) {
        fg_error(FG_ERR_ARG, "grad-accum %d does not divide among %d processes", cfg->grad_accum, comm->size);
        return NULL;
    }
    if (zero && cfg->model.device != FG_CPU) {
        fg_error(FG_ERR_ARG, "--zero 1 shards the optimizer on the CPU only (the device here: %s)",
                 fg_device_name(cfg->model.device));
        return NULL;
    }
    if (cfg->model.compute == FG_COMPUTE_BF16 && cfg->model.device == FG_CPU) {
        fg_error(FG_ERR_DEVICE, "bfloat16 mixed precision runs on cuda only: the CPU has no bf16 kernels yet");
        return NULL;
    }
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
    tr->comm = comm;
    tr->zero = zero && comm->size > 1;
    size_t n = (size_t)cfg->batch_size * (size_t)T;
    tr->x = malloc(n * sizeof *tr->x);
    tr->y = malloc(n * sizeof *tr->y);
    tr->losses = malloc((size_t)cfg->grad_accum * sizeof *tr->losses);
    if (!tr->x || !tr->y || !tr->losses) {
        fg_error(FG_ERR_OOM, "trainer: out of memory for a (%d, %d) batch", cfg->batch_size, T);
        fg_trainer_free(tr);
        return NULL;
    }
    tr->model = fg_gpt_create(&cfg->model, cfg->seed);
    if (!tr->model) {
        fg_trainer_free(tr);
        return NULL;
    }
    const int64_t np = tr->model->num_elements;
    tr->shard_lo = 0;
    tr->shard_hi = np;
    if (tr->zero) {
        /* shards of whole norm blocks, so that each rank sums squares over blocks of its own */
        if (fg_flat_norm_blocks(FG_CPU, &comm->block) != FG_OK) {
            fg_trainer_free(tr);
            return NULL;
        }
        fg_comm_shard_of(comm, np, comm->rank, &tr->shard_lo, &tr->shard_hi);
        const int64_t B = comm->block(np), per = ((np + B - 1) / B + comm->size - 1) / comm->size;
        if (!(tr->norm_parts = malloc((size_t)(comm->size + 1) * (size_t)per * sizeof *tr->norm_parts))) {
            fg_error(FG_ERR_OOM, "trainer: out of memory");
            fg_trainer_free(tr);
            return NULL;
        }
    }
    if (fg_adamw_init(&tr->opt, &cfg->opt, cfg->model.dtype, cfg->model.device, tr->shard_hi - tr->shard_lo) !=
        FG_OK) {
        fg_trainer_free(tr);
        return NULL;
    }
    if (cfg->grad_accum / comm->size > 1 && !(tr->acc = fg_zeros(cfg->model.dtype, cfg->model.device, 1, &np))) {
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
    fg_trainer_reshard(tr, 0);
    if (tr->zero) tr->comm->block = NULL;
    free(tr->norm_parts);
    fg_gpt_free(tr->model);
    fg_adamw_free(&tr->opt);
    fg_release(tr->grad_seed);
    fg_release(tr->acc);
    free(tr->losses);
    free(tr->x);
    free(tr->y);
    free(tr);
}

fg_status fg_trainer_unshard(fg_trainer *tr, int gather) {
    if (!tr->zero || tr->m_shard) return FG_OK;
    const int64_t np = tr->model->num_elements, k = tr->shard_hi - tr->shard_lo;
    const fg_dtype dt = tr->cfg.model.dtype;
    const size_t es = fg_dtype_size(dt), off = (size_t)tr->shard_lo * es;
    fg_tensor *m = fg_zeros(dt, FG_CPU, 1, &np), *v = m ? fg_zeros(dt, FG_CPU, 1, &np) : NULL;
    if (!v) {
        fg_release(m);
        return fg_last_status();
    }
    fg_status st = FG_OK;
    if (gather) {
        if (k > 0) memcpy((char *)fg_data(m) + off, fg_data(tr->opt.m), (size_t)k * es);
        if (k > 0) memcpy((char *)fg_data(v) + off, fg_data(tr->opt.v), (size_t)k * es);
        st = fg_comm_allgather(tr->comm, fg_data(m), dt, np, FG_CPU);
        if (st == FG_OK) st = fg_comm_allgather(tr->comm, fg_data(v), dt, np, FG_CPU);
    }
    if (st != FG_OK) {
        fg_release(m);
        fg_release(v);
        return st;
    }
    tr->m_shard = tr->opt.m;
    tr->v_shard = tr->opt.v;
    tr->opt.m = m;
    tr->opt.v = v;
    tr->opt.n = np;
    return FG_OK;
}

void fg_trainer_reshard(fg_trainer *tr, int keep) {
    if (!tr->m_shard) return;
    const size_t es = fg_dtype_size(tr->cfg.model.dtype), off = (size_t)tr->shard_lo * es;
    const int64_t k = tr->shard_hi - tr->shard_lo;
    if (keep && k > 0) {
        memcpy(fg_data(tr->m_shard), (char *)fg_data(tr->opt.m) + off, (size_t)k * es);
        memcpy(fg_data(tr->v_shard), (char *)fg_data(tr->opt.v) + off, (size_t)k * es);
    }
    fg_release(tr->opt.m);
    fg_release(tr->opt.v);
    tr->opt.m = tr->m_shard;
    tr->opt.v = tr->v_shard;
    tr->opt.n = k;
    tr->m_shard = tr->v_shard = NULL;
}

/* ZeRO-1's ‖g‖₂ from the shards: each rank's blocks' float64 sums of squares (the blocks of
 * fg_flat_sum_squares_blocks, ops/flat.h), all-gathered, then added in block order from 0 as sum_squares adds
 * them, so every rank gets one process's fg_grad_norm bit for bit. Collective. */
static fg_status shard_grad_norm(fg_trainer *tr, double *norm) {
    fg_comm *c = tr->comm;
    const fg_gpt *g = tr->model;
    const int64_t n = g->num_elements, B = c->block(n), blocks = (n + B - 1) / B;
    const int64_t per = (blocks + c->size - 1) / c->size; /* the most blocks a rank has */
    double *mine = tr->norm_parts, *all = mine + per;
    for (int64_t i = 0; i < per; i++) mine[i] = 0.0;
    const int64_t b0 = tr->shard_lo / B, b1 = b0 + (tr->shard_hi - tr->shard_lo + B - 1) / B; /* own blocks */
    fg_status st = fg_flat_sum_squares_blocks(g->grads_flat, b0, b1, mine);
    if (st != FG_OK) mine[0] = NAN; /* every rank still joins the all-gather; the norm reads as NaN on all */
    fg_status s = fg_comm_allgather_bytes(c, mine, all, (size_t)per * sizeof *mine);
    if (s != FG_OK) return s;
    double sum = 0;
    for (int q = 0; q < c->size; q++) {
        int64_t lo, hi;
        fg_comm_shard_of(c, n, q, &lo, &hi);
        for (int64_t i = 0; i < (hi - lo + B - 1) / B; i++) sum += all[(size_t)q * (size_t)per + (size_t)i];
    }
    *norm = sqrt(sum);
    return FG_OK;
}

/* ---- the run's compute precision ----
 * A step, an evaluation and a decoding run under the model's compute precision on its device
 * (ops/device.h: the forward and its backward, recomputation included, see the same one); the
 * device's previous setting comes back afterwards, so runs of either precision may alternate. */
typedef struct {
    fg_device d;
    fg_compute prev;
} compute_scope;

/* Fills *cs in any case; compute_exit(cs) is then always right. */
static fg_status compute_enter(const fg_trainer *tr, compute_scope *cs) {
    cs->d = tr->cfg.model.device;
    cs->prev = fg_device_compute(cs->d);
    return cs->prev == tr->cfg.model.compute ? FG_OK : fg_device_set_compute(cs->d, tr->cfg.model.compute);
}
static void compute_exit(const compute_scope *cs) {
    if (fg_device_compute(cs->d) != cs->prev) fg_device_set_compute(cs->d, cs->prev);
}

static fg_status trainer_step(fg_trainer *tr, fg_step_stats *out) {
    const fg_train_config *c = &tr->cfg;
    fg_comm *comm = tr->comm;
    const int B = c->batch_size, T = tr->T, A = c->grad_accum / comm->size;
    fg_gpt *g = tr->model;
    fg_step_stats st = {.lr = fg_lr_at(&c->opt, tr->step), .tokens = (int64_t)B * T * c->grad_accum};
    const uint64_t bytes0 = comm->bytes;
    fg_op_profile_mark();
    fg_gpt_zero_grad(g);
    /* this rank's micro-batch losses go to their global places; a non-finite one stops the loop */
    double *mine = tr->losses + (size_t)comm->rank * (size_t)A;
    for (int a = 0; a < A; a++) mine[a] = 0.0;
    for (int a = 0; a < A; a++) {
        const int micro = comm->rank * A + a; /* the global micro-batch */
        uint64_t index = (uint64_t)tr->step * (uint64_t)c->grad_accum + (uint64_t)micro;
        fg_status s = fg_source_batch(tr->data, FG_SPLIT_TRAIN, B, T, c->seed, index, tr->x, tr->y);
        if (s != FG_OK) return s;
        fg_op_profile_phase("step: zero grads, batch");
        fg_gpt_train_ctx ctx = {.seed = c->seed, .step = (uint64_t)tr->step, .micro = (uint32_t)micro};
        fg_tensor *loss = fg_gpt_loss(g, tr->x, tr->y, B, T, &ctx);
        if (!loss) return fg_last_status();
        double lv = scalar_value(loss);
        mine[a] = lv;
        fg_op_profile_phase("step: read the loss");
        if (!isfinite(lv)) {
            fg_release(loss);
            break;
        }
        /* every micro-batch's gradient starts from zero; acc folds them: acc = g_0, acc += g_a */
        if (a == 1) s = fg_copy_into(tr->acc, g->grads_flat);
        if (a >= 1) fg_gpt_zero_grad(g);
        if (s == FG_OK) s = fg_backward(loss, tr->grad_seed);
        fg_release(loss);
        if (s == FG_OK && a >= 1) s = a < A - 1 ? fg_flat_add(tr->acc, tr->acc, g->grads_flat)
                                                : fg_flat_add(g->grads_flat, tr->acc, g->grads_flat);
        if (s != FG_OK) return s;
    }
    fg_op_profile_phase("step: gradient accumulation");
    fg_status s = FG_OK;
    if (comm->size > 1) s = fg_comm_allgather_bytes(comm, mine, tr->losses, (size_t)A * sizeof *tr->losses);
    if (s != FG_OK) return s;
    double loss_sum = 0;
    for (int m = 0; m < c->grad_accum; m++) {
        if (!isfinite(tr->losses[m])) {
            fg_gpt_zero_grad(g);
            return fg_error(FG_ERR_NUMERIC, "the loss is not finite (%g) at step %lld", tr->losses[m],
                            (long long)tr->step + 1);
        }
        loss_sum += tr->losses[m];
    }
    st.loss = loss_sum / c->grad_accum;
    /* the ranks' sums, folded in rank order: every rank gets the whole gradient, or with zero
     * its own shard alone (a reduce-scatter), whose blocks give the norm */
    s = fg_comm_fold_sum(comm, fg_data(g->grads_flat), c->model.dtype, g->num_elements, c->model.device, !tr->zero);
    if (s == FG_OK && tr->zero) s = shard_grad_norm(tr, &st.grad_norm);
    else if (s == FG_OK) st.grad_norm = fg_grad_norm(g->grads_flat);
    if (s != FG_OK) return s;
    fg_op_profile_phase("step: gradient sum, norm");
    if (!isfinite(st.grad_norm)) {
        fg_gpt_zero_grad(g);
        return fg_error(FG_ERR_NUMERIC, "the gradient norm is not finite (%g) at step %lld", st.grad_norm,
                        (long long)tr->step + 1);
    }
    /* clipping: AdamW reads each gradient times the coefficient (the same on every rank), the bits
     * of scaling the gradients first without a pass over them */
    double coef = 1.0;
    if (c->opt.grad_clip > 0 && c->opt.grad_clip / (st.grad_norm + 1e-6) < 1.0)
        coef = c->opt.grad_clip / (st.grad_norm + 1e-6);
    if (tr->zero) {
        s = fg_adamw_update_range(&tr->opt, g, st.lr, coef, tr->shard_lo, tr->shard_hi);
        if (s == FG_OK) s = fg_comm_allgather(comm, fg_data(g->params_flat), c->model.dtype, g->num_elements, FG_CPU);
    } else {
        s = fg_adamw_update_range(&tr->opt, g, st.lr, coef, 0, g->num_elements);
    }
    fg_op_profile_phase("step: clip, AdamW");
    st.comm_bytes = comm->bytes - bytes0;
    if (s != FG_OK) return s;
    tr->step++;
    if (out) *out = st;
    return FG_OK;
}

fg_status fg_trainer_step(fg_trainer *tr, fg_step_stats *out) {
    compute_scope cs;
    fg_status st = compute_enter(tr, &cs);
    if (st == FG_OK) st = trainer_step(tr, out);
    compute_exit(&cs);
    return st;
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
    compute_scope cs;
    fg_status st = compute_enter(tr, &cs);
    if (st != FG_OK) return st;
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
    compute_exit(&cs);
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
    compute_scope cs;
    fg_status st = compute_enter(tr, &cs);
    if (st == FG_OK && (!tok || !ans)) st = fg_error(FG_ERR_OOM, "accuracy: out of memory");
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
    compute_exit(&cs);
    free(tok);
    free(ans);
    if (st == FG_OK) *acc = (double)correct / K;
    return st;
}

/* ---- model FLOPs ---- */

double fg_trainer_flops_per_token(const fg_trainer *tr) {
    const fg_gpt_config *m = &tr->cfg.model;
    /* an untied token embedding is a lookup, no product: its V C parameters do not count */
    const double n = (double)tr->model->num_elements - (m->untie_head ? (double)m->vocab_size * m->n_embd : 0.0);
    double attn = 0;
    for (int l = 0; l < m->n_layer; l++) {
        const int w = fg_gpt_layer_window(m, l); /* a windowed layer's keys: at most w + 1 */
        attn += 12.0 * (double)m->n_embd * (w > 0 && w + 1 < tr->T ? w + 1 : tr->T);
    }
    return 6.0 * n + attn;
}

double fg_trainer_mfu(const fg_trainer *tr, double tokens_per_s) {
    if (tr->cfg.model.device != FG_CPU) return NAN;
    /* tokens/s counts every rank's tokens; each rank has its own cores and measured their peak */
    const int ranks = tr->comm ? tr->comm->size : 1;
    return tokens_per_s * fg_trainer_flops_per_token(tr) / (ranks * fg_fma_peak_gflops() * 1e9);
}
