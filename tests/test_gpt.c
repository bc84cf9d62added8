/* test_gpt.c — the GPT model of train/gpt.h: its parameter table, gradients of every parameter
 * against finite differences (float64), naive against flash attention inside the model, that a
 * tiny model can fit one batch, generation, and (when Debian's python3 has torch) its logits, loss
 * and one clipped AdamW step against an independent PyTorch implementation
 * (tests/gpt_torch_check.py). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autograd/gradcheck.h"
#include "tensor/npy.h"
#include "ops/cpu/threadpool.h"
#include "tensor/philox.h"
#include "tests/common.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/gpt.h"

static fg_gpt *make(const fg_gpt_config *c, uint64_t seed) {
    fg_gpt *g = fg_gpt_create(c, seed);
    cr_assert(g != NULL, "fg_gpt_create: %s", fg_last_error());
    return g;
}

/* Tokens in [0, V) from Philox. */
static void fill_tokens(int32_t *t, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(fg_philox_u32(seed, 5, (uint64_t)i) % (uint32_t)V);
}

Test(gpt, parameter_table_tiles_one_buffer_with_nanogpt_names) {
    fg_gpt_config c = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 8, 6, 7, 0);
    fg_gpt *g = make(&c, 1);
    const int64_t C = c.n_embd, V = c.vocab_size, T = c.block_size, L = c.n_layer;
    /* P = V C + T C + L (12 C^2 + 13 C) + 2 C, counted independently of the X-macro list */
    int64_t want = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
    cr_expect_eq(g->num_elements, want, "parameters: %lld, expected %lld", (long long)g->num_elements, (long long)want);
    cr_expect_eq(g->n_params, 4 + 12 * L, "table entries: %d", g->n_params);
    int64_t off = 0;
    for (int j = 0; j < g->n_params; j++) {
        const fg_gpt_param *p = &g->params[j];
        cr_expect_eq(p->offset, off, "%s starts at %lld, expected %lld (no gaps, no overlap)", p->name,
                     (long long)p->offset, (long long)off);
        off += p->numel;
        cr_expect(fg_data(p->w) == (char *)fg_data(g->params_flat) + p->offset * 4, "%s is not a view of params_flat",
                  p->name);
        cr_expect(p->w->grad && fg_data(p->w->grad) == (char *)fg_data(g->grads_flat) + p->offset * 4,
                  "%s's grad is not a view of grads_flat", p->name);
        cr_expect(p->decay == (p->ndim == 2), "%s: decay %d but rank %d (nanoGPT decays exactly the 2-d tensors)",
                  p->name, p->decay, p->ndim);
    }
    cr_expect_eq(off, g->num_elements);
    static const char *names[] = {"transformer.wte.weight",
                                  "transformer.wpe.weight",
                                  "transformer.h.0.ln_1.weight",
                                  "transformer.h.1.attn.c_attn.weight",
                                  "transformer.h.1.attn.c_proj.bias",
                                  "transformer.h.0.mlp.c_fc.weight",
                                  "transformer.h.1.mlp.c_proj.weight",
                                  "transformer.ln_f.bias"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        cr_expect(fg_gpt_find(g, names[i]) != NULL, "no %s", names[i]);
    const fg_gpt_param *qkv = fg_gpt_find(g, "transformer.h.0.attn.c_attn.weight");
    cr_expect(qkv->shape[0] == 3 * C && qkv->shape[1] == C, "c_attn.weight is (%lld, %lld), nn.Linear wants (3C, C)",
              (long long)qkv->shape[0], (long long)qkv->shape[1]);
    fg_gpt_free(g);
}

Test(gpt, initialization_is_gpt2s) {
    fg_gpt_config c = fg_gpt_default_config();
    c.n_layer = 3;
    c.n_embd = 64;
    c.vocab_size = 50;
    fg_gpt *g = make(&c, 42);
    for (int j = 0; j < g->n_params; j++) {
        const fg_gpt_param *p = &g->params[j];
        double s = 0, s2 = 0;
        for (int64_t k = 0; k < p->numel; k++) {
            double v = fg_get(p->w, k);
            s += v;
            s2 += v * v;
        }
        double mean = s / p->numel, sd = sqrt(s2 / p->numel - mean * mean);
        if (p->init == FG_INIT_ONES)
            cr_expect(mean == 1 && sd == 0, "%s should be ones", p->name);
        else if (p->init == FG_INIT_ZEROS)
            cr_expect(mean == 0 && sd == 0, "%s should be zeros", p->name);
        else {
            double want = p->init == FG_INIT_RESID ? 0.02 / sqrt(2.0 * c.n_layer) : 0.02;
            cr_expect(fabs(sd - want) < 0.15 * want, "%s: std %g, expected %g", p->name, sd, want);
            int resid = strstr(p->name, "c_proj.weight") != NULL;
            cr_expect_eq(p->init == FG_INIT_RESID, resid, "%s: residual scaling applies to c_proj weights only",
                         p->name);
        }
    }
    /* the same seed gives the same model; another seed another one */
    fg_gpt *g2 = make(&c, 42), *g3 = make(&c, 43);
    cr_expect(!memcmp(fg_data(g->params_flat), fg_data(g2->params_flat), fg_nbytes(g->params_flat)),
              "seed 42 twice differs");
    cr_expect(memcmp(fg_data(g->params_flat), fg_data(g3->params_flat), fg_nbytes(g->params_flat)),
              "seeds 42 and 43 agree");
    fg_gpt_free(g);
    fg_gpt_free(g2);
    fg_gpt_free(g3);
}

/* The initial values are fg_rand_normal's of the parameter's stream (float64, then the model's
 * dtype), whatever the thread count that fills them in pieces. */
Test(gpt, initial_weights_are_the_streams_normals_for_any_thread_count) {
    fg_gpt_config c = fg_gpt_default_config();
    c.n_layer = 2;
    c.n_embd = 64;
    c.vocab_size = 300;
    c.block_size = 1100; /* wpe: 70,400 values, more than one piece */
    fg_pool_set_threads(1);
    fg_gpt *a = make(&c, 9);
    fg_pool_set_threads(3);
    fg_gpt *b = make(&c, 9);
    fg_pool_set_threads(0);
    cr_expect(!memcmp(fg_data(a->params_flat), fg_data(b->params_flat), fg_nbytes(a->params_flat)),
              "1 and 3 threads initialized differently");
    const double resid = 0.02 / sqrt(2.0 * c.n_layer);
    for (int j = 0; j < a->n_params; j++) {
        const fg_gpt_param *p = &a->params[j];
        if (p->init != FG_INIT_NORMAL && p->init != FG_INIT_RESID) continue;
        fg_tensor *want = fg_rand_normal(FG_F64, FG_CPU, p->w->ndim, p->w->shape, 0.0,
                                         p->init == FG_INIT_RESID ? resid : 0.02, 9, FG_GPT_INIT_STREAM + (uint64_t)j);
        cr_assert(want, "%s", fg_last_error());
        for (int64_t k = 0; k < p->numel; k++)
            if (fg_get(p->w, k) != (double)(float)fg_get(want, k))
                cr_assert_fail("%s[%lld] = %.9g, the stream's normal %.9g", p->name, (long long)k, fg_get(p->w, k),
                               (double)(float)fg_get(want, k));
        fg_release(want);
    }
    fg_gpt_free(a);
    fg_gpt_free(b);
}

/* ---- gradients of every parameter against finite differences ---- */
typedef struct {
    fg_gpt *g;
    const int32_t *x, *y;
    int B, T;
    const fg_gpt_train_ctx *train;
    int logits; /* 1: check the logits (weighted by gradcheck's R) instead of the loss */
} grad_case;

static fg_tensor *gpt_fn(fg_tensor *const *in, int n, void *user) {
    (void)in;
    (void)n;
    grad_case *c = user;
    if (c->logits) return fg_gpt_forward(c->g, c->x, c->B, c->T, c->train);
    return fg_gpt_loss(c->g, c->x, c->y, c->B, c->T, c->train);
}

static void check_all_gradients(fg_attn_impl impl, double dropout, int logits) {
    fg_gpt_config c = fgt_tiny_gpt_config(FG_F64, impl, 8, 6, 7, dropout);
    fg_gpt *g = make(&c, 3);
    /* larger weights than GPT-2's init so that every path carries a visible gradient */
    for (int j = 0; j < g->n_params; j++) {
        fg_gpt_param *p = &g->params[j];
        fg_tensor *r = fg_rand_uniform(FG_F64, FG_CPU, p->w->ndim, p->w->shape, -0.5, 0.5, 9, (uint64_t)j);
        if (p->init == FG_INIT_ONES)
            fg_axpy(p->w, 1.0, r);
        else
            fg_copy_into(p->w, r);
        fg_release(r);
    }
    enum { B = 2, T = 5 };
    int32_t x[B * T], y[B * T];
    fill_tokens(x, B * T, c.vocab_size, 1);
    fill_tokens(y, B * T, c.vocab_size, 2);
    y[3] = -1; /* an ignored target */
    fg_gpt_train_ctx tc = {.seed = 11, .step = 4, .micro = 1};
    grad_case gc = {g, x, y, B, T, dropout > 0 ? &tc : NULL, logits};
    fg_tensor **in = malloc((size_t)g->n_params * sizeof *in);
    for (int j = 0; j < g->n_params; j++) in[j] = g->params[j].w;
    fg_gradcheck_opts o = {.eps = 1e-6, .atol = 1e-7, .rtol = 1e-5, .seed = 5};
    fg_gradcheck_report r;
    cr_assert_eq(fg_gradcheck(gpt_fn, in, g->n_params, &gc, &o, &r), FG_OK, "gradcheck: %s", fg_last_error());
    cr_expect_eq(r.checked, g->num_elements, "checked %lld of %lld parameters", (long long)r.checked,
                 (long long)g->num_elements);
    cr_expect(r.passed,
              "%s attention, dropout %g, %s: worst at %s[%lld]: analytic %.10g numeric %.10g (max abs err %.3g, max "
              "rel %.3g)",
              fg_attn_impl_name(impl), dropout, logits ? "logits" : "loss",
              r.worst_input >= 0 ? g->params[r.worst_input].name : "?", (long long)r.worst_index, r.analytic, r.numeric,
              r.max_abs_err, r.max_rel_err);
    free(in);
    fg_gpt_free(g);
}

Test(gpt, every_parameter_gradient_matches_finite_differences_flash, .timeout = 300) {
    check_all_gradients(FG_ATTN_FLASH, 0.0, 0);
}
Test(gpt, every_parameter_gradient_matches_finite_differences_naive_logits, .timeout = 300) {
    check_all_gradients(FG_ATTN_NAIVE, 0.0, 1);
}
/* Dropout masks are pure functions of (seed, step, micro, layer, site), so with them fixed the
 * model is a smooth function again and finite differences apply. */
Test(gpt, every_parameter_gradient_matches_finite_differences_with_dropout, .timeout = 300) {
    check_all_gradients(FG_ATTN_FLASH, 0.2, 0);
}

Test(gpt, flash_and_naive_attention_give_the_same_model) {
    fg_gpt_config c = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 16, 16, 7, 0);
    fg_gpt *g = make(&c, 8);
    enum { B = 3, T = 16 };
    int32_t x[B * T];
    fill_tokens(x, B * T, c.vocab_size, 3);
    fg_tensor *lf = fg_gpt_forward(g, x, B, T, NULL);
    g->cfg.attn = FG_ATTN_NAIVE;
    fg_tensor *ln = fg_gpt_forward(g, x, B, T, NULL);
    cr_assert(lf && ln, "%s", fg_last_error());
    FGT_ASSERT_CLOSE(lf, ln, 1e-5, 1e-4, "logits flash vs naive");
    fg_release(lf);
    fg_release(ln);
    fg_gpt_free(g);
}

Test(gpt, causal_logits_do_not_see_the_future) {
    fg_gpt_config c = fgt_tiny_gpt_config(FG_F64, FG_ATTN_FLASH, 8, 6, 7, 0);
    fg_gpt *g = make(&c, 2);
    int32_t a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 2, 3, 0, 0, 0};
    fg_tensor *la = fg_gpt_forward(g, a, 1, 6, NULL), *lb = fg_gpt_forward(g, b, 1, 6, NULL);
    const int V = c.vocab_size;
    for (int k = 0; k < 3 * V; k++)
        cr_expect_eq(fg_get(la, k), fg_get(lb, k), "position %d logit %d changed with later tokens", k / V, k % V);
    int diff = 0;
    for (int k = 3 * V; k < 6 * V; k++) diff |= fg_get(la, k) != fg_get(lb, k);
    cr_expect(diff, "later positions should depend on their own tokens");
    fg_release(la);
    fg_release(lb);
    fg_gpt_free(g);
}

Test(gpt, dropout_seeds_differ_by_step_micro_layer_and_site) {
    fg_gpt_train_ctx a = {.seed = 1, .step = 10, .micro = 0};
    uint64_t s0 = fg_gpt_dropout_seed(&a, 0, FG_DROP_ATTN);
    cr_expect_eq(s0, fg_gpt_dropout_seed(&a, 0, FG_DROP_ATTN), "not a pure function");
    fg_gpt_train_ctx b = a, m = a, r = a;
    b.step = 11;
    m.micro = 1;
    r.seed = 2;
    uint64_t others[] = {fg_gpt_dropout_seed(&b, 0, FG_DROP_ATTN),      fg_gpt_dropout_seed(&m, 0, FG_DROP_ATTN),
                         fg_gpt_dropout_seed(&r, 0, FG_DROP_ATTN),      fg_gpt_dropout_seed(&a, 1, FG_DROP_ATTN),
                         fg_gpt_dropout_seed(&a, 0, FG_DROP_MLP_RESID), fg_gpt_dropout_seed(&a, -1, FG_DROP_EMB)};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        cr_expect_neq(others[i], s0, "seed %zu collides with the reference", i);
}

Test(gpt, dropout_changes_training_logits_and_not_evaluation) {
    fg_gpt_config c = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 8, 6, 7, 0.3);
    fg_gpt *g = make(&c, 4);
    int32_t x[12];
    fill_tokens(x, 12, c.vocab_size, 4);
    fg_gpt_train_ctx tc = {.seed = 1, .step = 0, .micro = 0};
    fg_tensor *e1 = fg_gpt_forward(g, x, 2, 6, NULL), *e2 = fg_gpt_forward(g, x, 2, 6, NULL);
    fg_tensor *t1 = fg_gpt_forward(g, x, 2, 6, &tc), *t2 = fg_gpt_forward(g, x, 2, 6, &tc);
    tc.step = 1;
    fg_tensor *t3 = fg_gpt_forward(g, x, 2, 6, &tc);
    cr_expect(!memcmp(fg_data(e1), fg_data(e2), fg_nbytes(e1)), "evaluation is not deterministic");
    cr_expect(!memcmp(fg_data(t1), fg_data(t2), fg_nbytes(t1)), "the same (seed, step, micro) gave other masks");
    cr_expect(memcmp(fg_data(t1), fg_data(e1), fg_nbytes(t1)), "dropout 0.3 changed nothing");
    cr_expect(memcmp(fg_data(t1), fg_data(t3), fg_nbytes(t1)), "the next step drew the same masks");
    fg_release(e1);
    fg_release(e2);
    fg_release(t1);
    fg_release(t2);
    fg_release(t3);
    fg_gpt_free(g);
}

Test(gpt, tiny_model_overfits_one_batch, .timeout = 120) {
    fg_gpt_config c = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 32, 8, 11, 0);
    c.n_head = 4;
    fg_gpt *g = make(&c, 5);
    enum { B = 4, T = 8 };
    int32_t x[B * T], y[B * T];
    fill_tokens(x, B * T, c.vocab_size, 6);
    fill_tokens(y, B * T, c.vocab_size, 7); /* arbitrary targets: only memorization can fit them */
    fg_adamw_config oc = {.lr = 1e-2,
                          .min_lr = 1e-2,
                          .warmup = 0,
                          .decay_steps = 1,
                          .beta1 = 0.9,
                          .beta2 = 0.99,
                          .eps = 1e-8,
                          .weight_decay = 0.0,
                          .grad_clip = 1.0};
    fg_adamw opt;
    cr_assert_eq(fg_adamw_init(&opt, &oc, FG_F32, FG_CPU, g->num_elements), FG_OK);
    double first = 0, last = 0;
    for (int it = 0; it < 300; it++) {
        fg_gpt_zero_grad(g);
        fg_tensor *loss = fg_gpt_loss(g, x, y, B, T, NULL);
        cr_assert(loss, "%s", fg_last_error());
        last = fg_get(loss, 0);
        if (it == 0) first = last;
        cr_assert_eq(fg_backward(loss, NULL), FG_OK, "%s", fg_last_error());
        fg_release(loss);
        fg_clip_grad_norm(g->grads_flat, oc.grad_clip);
        fg_adamw_update(&opt, g, oc.lr);
        if (last < 0.02) break;
    }
    cr_expect(first > 2.0, "initial loss %g should be near ln 11 = 2.4", first);
    cr_expect(last < 0.05, "after training on one batch the loss is %g (from %g); expected < 0.05", last, first);
    fg_adamw_free(&opt);
    fg_gpt_free(g);
}

Test(gpt, greedy_generation_is_argmax_and_sampling_is_seeded) {
    fg_gpt_config c = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 8, 6, 7, 0);
    fg_gpt *g = make(&c, 6);
    int32_t a[20] = {1, 2}, b[20] = {1, 2};
    fg_sample_opts greedy = {.temperature = 0};
    cr_assert_eq(fg_gpt_generate(g, a, 2, 10, &greedy), FG_OK, "%s", fg_last_error()); /* runs past block_size 6 */
    /* each greedy token is the argmax of a forward over the (cropped) context */
    for (int len = 2; len < 12; len++) {
        int t = len < c.block_size ? len : c.block_size;
        fg_tensor *lg = fg_gpt_forward(g, a + len - t, 1, t, NULL);
        int best = 0;
        for (int v = 1; v < c.vocab_size; v++)
            if (fg_get(lg, (t - 1) * c.vocab_size + v) > fg_get(lg, (t - 1) * c.vocab_size + best)) best = v;
        cr_expect_eq(a[len], best, "token %d: generated %d, argmax %d", len, a[len], best);
        fg_release(lg);
    }
    /* batched greedy agrees with one-by-one greedy */
    int32_t rows[2 * 6] = {1, 2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0};
    cr_assert_eq(fg_gpt_greedy_batch(g, rows, 2, 2, 4), FG_OK, "%s", fg_last_error());
    for (int k = 0; k < 6; k++) cr_expect(rows[k] == a[k] && rows[6 + k] == a[k], "batched greedy differs at %d", k);
    fg_sample_opts s1 = {.temperature = 1.0, .top_k = 3, .seed = 9};
    int32_t c1[20] = {1}, c2[20] = {1};
    fg_gpt_generate(g, c1, 1, 15, &s1);
    fg_gpt_generate(g, c2, 1, 15, &s1);
    cr_expect(!memcmp(c1, c2, sizeof c1), "the same seed sampled different text");
    (void)b;
    fg_gpt_free(g);
}

/* ---- against PyTorch ---- */
Test(gpt, logits_loss_and_an_adamw_step_match_pytorch, .timeout = 300) {
    const char *what = "PyTorch cross-check of the GPT";
    fgt_python_require(what, "numpy torch");
    const char *script = "tests/gpt_torch_check.py";
    if (access(script, R_OK) != 0) fgt_skip(what, "tests/gpt_torch_check.py not found (run from the repo root)");
    char dir[] = "/tmp/fg_gpt_torch_XXXXXX";
    cr_assert(mkdtemp(dir), "mkdtemp");
    char d0[600], d1[600], path[700];
    snprintf(d0, sizeof d0, "%s/before", dir);
    snprintf(d1, sizeof d1, "%s/after", dir);
    mkdir(d0, 0777);
    mkdir(d1, 0777);

    /* a tiny addition-task run: step 0 -> checkpoint, one step, checkpoint */
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = 2;
    fg_source *src = fg_source_addition(&ac);
    cr_assert(src, "%s", fg_last_error());
    fg_train_config tc = fgt_tiny_train_config(src, fg_source_fixed_block(src), 3, 10, 1, 3);
    tc.model.dropout = 0; /* the reference has none */
    /* lr large enough to move the weights visibly; clip small enough to be active */
    tc.opt = (fg_adamw_config){.lr = 1e-2,
                               .min_lr = 1e-3,
                               .warmup = 0,
                               .decay_steps = 10,
                               .beta1 = 0.8,
                               .beta2 = 0.95,
                               .eps = 1e-8,
                               .weight_decay = 0.5,
                               .grad_clip = 0.5};
    fg_trainer *tr = fg_trainer_create(&tc, src);
    cr_assert(tr, "%s", fg_last_error());
    fg_step_stats s;
    cr_assert_eq(fg_trainer_step(tr, &s), FG_OK, "%s", fg_last_error()); /* AdamW's t = 1 first: moments nonzero */
    cr_assert_eq(fg_ckpt_save(d0, tr), FG_OK, "%s", fg_last_error());
    /* the batches of step 1 (two micro-batches), as float .npy for numpy */
    const int B = tc.batch_size, T = tr->T;
    for (int micro = 0; micro < 2; micro++) {
        fg_source_batch(src, FG_SPLIT_TRAIN, B, T, tc.seed, 2 + (uint64_t)micro, tr->x, tr->y);
        double xb[64 * 16], yb[64 * 16];
        for (int i = 0; i < B * T; i++) {
            xb[i] = tr->x[i];
            yb[i] = tr->y[i];
        }
        snprintf(path, sizeof path, "%s/x%d.npy", dir, micro);
        cr_assert_eq(fg_npy_save_raw(path, FG_F64, 2, (int64_t[]){B, T}, xb), FG_OK, "%s", fg_last_error());
        snprintf(path, sizeof path, "%s/y%d.npy", dir, micro);
        cr_assert_eq(fg_npy_save_raw(path, FG_F64, 2, (int64_t[]){B, T}, yb), FG_OK, "%s", fg_last_error());
        if (micro == 0) {
            fg_tensor *lg = fg_gpt_forward(tr->model, tr->x, B, T, NULL);
            snprintf(path, sizeof path, "%s/logits.npy", dir);
            cr_assert_eq(fg_npy_save(path, lg), FG_OK, "%s", fg_last_error());
            fg_release(lg);
        }
    }
    cr_assert_eq(fg_trainer_step(tr, &s), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_ckpt_save(d1, tr), FG_OK, "%s", fg_last_error());
    char cmd[2048], log[16384];
    snprintf(cmd, sizeof cmd, "%s %.17g %.17g", dir, s.lr, s.loss);
    int st = fgt_python_run(NULL, script, cmd, log, sizeof log);
    fg_trainer_free(tr);
    fg_source_free(src);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    if (st == FGT_PYTHON_CANNOT_RUN) fgt_skip(what, log);
    if (fgt_verbose()) fprintf(stderr, "[gpt] %s", log);
    cr_expect_eq(st, 0, "gpt_torch_check.py exited %d:\n%s", st, log);
}
