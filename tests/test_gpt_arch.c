/* test_gpt_arch.c — the model's architecture options (train/gpt.h): Llama- and nanochat-style
 * blocks beside GPT-2's.
 *   - config refusals, one row per bad field, each message naming it; presets; the GPT-2 preset is
 *     the default table;
 *   - the parameter tables: Hugging Face names, shapes under GQA, q|k|v and gate|up adjacent;
 *   - every parameter's gradient against central finite differences in float64, for llama,
 *     nanochat (windows, softcap) and a free mix of options under GPT-2 names;
 *   - the KV cache against the full recompute at every position, and greedy decoding with and
 *     without it (past the block size too), for every architecture;
 *   - training bit-identical under every recompute setting, and a resumed run bit-identical to
 *     the uninterrupted one, for non-GPT-2 models; checkpoints keep the architecture;
 *   - logits and every gradient against PyTorch (transformers' LlamaForCausalLM and
 *     NanoChatForCausalLM, and a reference module written from the math in
 *     tests/gpt_arch_torch_check.py) where $FG_TORCH_PYTHON has torch and transformers. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/gradcheck.h"
#include "ops/ops.h"
#include "tensor/alloc.h"
#include "tensor/npy.h"
#include "tensor/philox.h"
#include "tests/common.h"
#include "train/checkpoint.h"
#include "train/gpt.h"
#include "train/trainer.h"

static fg_gpt *make(const fg_gpt_config *c, uint64_t seed) {
    fg_gpt *g = fg_gpt_create(c, seed);
    cr_assert(g != NULL, "fg_gpt_create: %s", fg_last_error());
    return g;
}

static void fill_tokens(int32_t *t, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(fg_philox_u32(seed, 5, (uint64_t)i) % (uint32_t)V);
}

/* The architectures the tests run: a preset plus changes, on a tiny model. */
typedef enum { A_LLAMA, A_LLAMA_TIED, A_NANOCHAT, A_MIX, A_GPT2_GQA, A_COUNT } arch_case;
static const char *const arch_case_names[A_COUNT] = {
    "llama (GQA, untied)", "llama (MQA, tied, bias)", "nanochat (SSSL windows, softcap)",
    "gpt2 names, rope + rmsnorm + qk-norm + swiglu + emb-norm", "gpt2 with GQA and a window"};

static fg_gpt_config arch_config(arch_case a, fg_dtype dt, fg_attn_impl impl, int n_embd, int n_head, int block,
                                 int vocab) {
    fg_gpt_config c = fgt_tiny_gpt_config(dt, impl, n_embd, block, vocab, 0);
    c.n_head = n_head;
    switch (a) {
    case A_LLAMA:
        fg_gpt_arch_preset(&c, FG_ARCH_LLAMA);
        c.n_kv_head = n_head / 2;
        c.mlp_hidden = 3 * n_embd; /* not 4C: an intermediate size of its own */
        c.rope_theta = 500000;
        break;
    case A_LLAMA_TIED:
        fg_gpt_arch_preset(&c, FG_ARCH_LLAMA);
        c.n_kv_head = 1;
        c.untie_head = 0;
        c.no_bias = 0;
        c.norm_eps = 1e-5;
        break;
    case A_NANOCHAT:
        fg_gpt_arch_preset(&c, FG_ARCH_NANOCHAT);
        c.n_layer = 3;
        snprintf(c.window, sizeof c.window, "SSSL");
        c.logit_softcap = 2; /* small, so that tanh bends the logits */
        break;
    case A_MIX:
        c.pos = FG_POS_ROPE;
        c.norm = FG_NORM_RMSNORM;
        c.qk_norm = 1;
        c.mlp = FG_MLP_SWIGLU;
        c.emb_norm = 1;
        c.untie_head = 1;
        break;
    case A_GPT2_GQA:
        c.n_kv_head = n_head / 2;
        snprintf(c.window, sizeof c.window, "S");
        break;
    default:
        break;
    }
    return c;
}

/* ---- config ---- */

typedef struct {
    const char *name;
    void (*edit)(fg_gpt_config *c);
    const char *phrase; /* what the one-line message must say */
} refusal;

static void kv3(fg_gpt_config *c) { c->n_kv_head = 3; }
static void kv_neg(fg_gpt_config *c) { c->n_kv_head = -1; }
static void rope_odd(fg_gpt_config *c) {
    c->pos = FG_POS_ROPE;
    c->n_embd = 12;
    c->n_head = 4;
}
static void theta_neg(fg_gpt_config *c) { c->rope_theta = -1; }
static void theta_inf(fg_gpt_config *c) { c->rope_theta = INFINITY; }
static void eps_neg(fg_gpt_config *c) { c->norm_eps = -1e-6; }
static void eps_nan(fg_gpt_config *c) { c->norm_eps = NAN; }
static void norm_bad(fg_gpt_config *c) { c->norm = (fg_gpt_norm)7; }
static void mlp_bad(fg_gpt_config *c) { c->mlp = (fg_gpt_mlp)-1; }
static void pos_bad(fg_gpt_config *c) { c->pos = (fg_gpt_pos)3; }
static void arch_bad(fg_gpt_config *c) { c->arch = (fg_gpt_arch)3; }
static void hidden_neg(fg_gpt_config *c) { c->mlp_hidden = -4; }
static void softcap_neg(fg_gpt_config *c) { c->logit_softcap = -15; }
static void softcap_nan(fg_gpt_config *c) { c->logit_softcap = NAN; }
static void window_bad(fg_gpt_config *c) { snprintf(c->window, sizeof c->window, "SSXL"); }
static void window_long(fg_gpt_config *c) { memset(c->window, 'S', sizeof c->window); }
static void qk_two(fg_gpt_config *c) { c->qk_norm = 2; }
static void bias_two(fg_gpt_config *c) { c->no_bias = 2; }
static void untie_two(fg_gpt_config *c) { c->untie_head = -1; }
static void embn_two(fg_gpt_config *c) { c->emb_norm = 5; }
static void cuda_rope(fg_gpt_config *c) {
    c->device = FG_CUDA;
    c->pos = FG_POS_ROPE;
}

Test(gpt_arch, bad_options_are_refused_naming_the_field) {
    static const refusal rows[] = {
        {"n_kv_head 3 of 4 heads", kv3, "n_kv_head 3 must divide n_head 4"},
        {"n_kv_head -1", kv_neg, "n_kv_head -1"},
        {"rope with an odd head dim", rope_odd, "pos rope needs an even head dim (n_embd / n_head = 3)"},
        {"rope_theta -1", theta_neg, "rope_theta -1"},
        {"rope_theta inf", theta_inf, "rope_theta inf"},
        {"norm_eps < 0", eps_neg, "norm_eps -1e-06"},
        {"norm_eps nan", eps_nan, "norm_eps nan"},
        {"norm 7", norm_bad, "unknown norm 7"},
        {"mlp -1", mlp_bad, "unknown mlp -1"},
        {"pos 3", pos_bad, "unknown pos 3"},
        {"arch 3", arch_bad, "unknown arch 3"},
        {"mlp_hidden -4", hidden_neg, "mlp_hidden -4"},
        {"logit_softcap -15", softcap_neg, "logit_softcap -15"},
        {"logit_softcap nan", softcap_nan, "logit_softcap nan"},
        {"window SSXL", window_bad, "window pattern 'SSXL' may hold only S and L"},
        {"window without its end", window_long, "window pattern is longer than 31 letters"},
        {"qk_norm 2", qk_two, "qk_norm 2"},
        {"no_bias 2", bias_two, "no_bias 2"},
        {"untie_head -1", untie_two, "untie_head -1"},
        {"emb_norm 5", embn_two, "emb_norm 5"},
        {"rope on cuda", cuda_rope, "run on the CPU only"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fg_gpt_config c = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 16, 8, 11, 0);
        c.n_head = 4;
        cr_assert_eq(fg_gpt_config_check(&c), FG_OK, "%s: the base config: %s", rows[i].name, fg_last_error());
        rows[i].edit(&c);
        cr_expect_neq(fg_gpt_config_check(&c), FG_OK, "%s: accepted", rows[i].name);
        cr_expect(strstr(fg_last_error(), rows[i].phrase) != NULL, "%s: message '%s' does not say '%s'", rows[i].name,
                  fg_last_error(), rows[i].phrase);
        cr_expect(!strchr(fg_last_error(), '\n'), "%s: the message is not one line", rows[i].name);
        cr_expect(fg_gpt_create(&c, 1) == NULL, "%s: a model was made", rows[i].name);
    }
}

Test(gpt_arch, names_parse_and_print_back) {
    for (int a = 0; a < FG_ARCH_COUNT; a++) cr_expect_eq(fg_gpt_arch_parse(fg_gpt_arch_name((fg_gpt_arch)a)), a);
    for (int a = 0; a < FG_POS_COUNT; a++) cr_expect_eq(fg_gpt_pos_parse(fg_gpt_pos_name((fg_gpt_pos)a)), a);
    for (int a = 0; a < FG_NORM_COUNT; a++) cr_expect_eq(fg_gpt_norm_parse(fg_gpt_norm_name((fg_gpt_norm)a)), a);
    for (int a = 0; a < FG_MLP_COUNT; a++) cr_expect_eq(fg_gpt_mlp_parse(fg_gpt_mlp_name((fg_gpt_mlp)a)), a);
    cr_expect_eq(fg_gpt_arch_parse("Llama"), -1);
    cr_expect_eq(fg_gpt_norm_parse("rms"), -1);
    cr_expect_eq(fg_gpt_mlp_parse(NULL), -1);
}

/* ---- the tables ---- */

Test(gpt_arch, the_gpt2_preset_is_the_default_model) {
    fg_gpt_config a = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 16, 8, 11, 0), b = a;
    fg_gpt_arch_preset(&b, FG_ARCH_NANOCHAT);
    fg_gpt_arch_preset(&b, FG_ARCH_GPT2);
    cr_assert(!memcmp(&a, &b, sizeof a), "the gpt2 preset differs from the default config");
    cr_expect(fg_gpt_is_gpt2(&a));
    b.n_kv_head = b.n_head;
    b.mlp_hidden = 4 * b.n_embd;
    snprintf(b.window, sizeof b.window, "LL");
    cr_expect(fg_gpt_is_gpt2(&b) && fg_gpt_same_arch(&a, &b), "options at their GPT-2 values are GPT-2");
    b.logit_softcap = 30;
    cr_expect(!fg_gpt_is_gpt2(&b) && !fg_gpt_same_arch(&a, &b));
    fg_gpt *g = make(&a, 1);
    cr_expect_eq(g->n_params, 2 + 12 * a.n_layer + 2);
    cr_expect_str_eq(g->params[0].name, "transformer.wte.weight");
    cr_expect_str_eq(g->params[2].name, "transformer.h.0.ln_1.weight");
    cr_expect_str_eq(g->params[g->n_params - 1].name, "transformer.ln_f.bias");
    fg_gpt_free(g);
}

Test(gpt_arch, llama_and_nanochat_tables_have_hugging_face_names_and_adjacent_projections) {
    const int C = 16, H = 4, T = 8, V = 11;
    fg_gpt_config c = arch_config(A_LLAMA, FG_F32, FG_ATTN_FLASH, C, H, T, V);
    fg_gpt *g = make(&c, 1);
    static const char *const want[] = {"model.embed_tokens.weight",
                                       "model.layers.0.input_layernorm.weight",
                                       "model.layers.0.self_attn.q_proj.weight",
                                       "model.layers.0.self_attn.k_proj.weight",
                                       "model.layers.0.self_attn.v_proj.weight",
                                       "model.layers.0.self_attn.o_proj.weight",
                                       "model.layers.0.post_attention_layernorm.weight",
                                       "model.layers.0.mlp.gate_proj.weight",
                                       "model.layers.0.mlp.up_proj.weight",
                                       "model.layers.0.mlp.down_proj.weight"};
    const int per_block = (int)(sizeof want / sizeof want[0]) - 1;
    cr_assert_eq(g->n_params, 1 + per_block * c.n_layer + 2, "llama: %d entries", g->n_params);
    for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++) cr_expect_str_eq(g->params[i].name, want[i]);
    cr_expect_str_eq(g->params[g->n_params - 2].name, "model.norm.weight");
    cr_expect_str_eq(g->params[g->n_params - 1].name, "lm_head.weight");
    const fg_gpt_param *q = fg_gpt_find(g, "model.layers.1.self_attn.q_proj.weight"),
                       *k = fg_gpt_find(g, "model.layers.1.self_attn.k_proj.weight"),
                       *v = fg_gpt_find(g, "model.layers.1.self_attn.v_proj.weight"),
                       *ga = fg_gpt_find(g, "model.layers.1.mlp.gate_proj.weight"),
                       *up = fg_gpt_find(g, "model.layers.1.mlp.up_proj.weight"),
                       *dn = fg_gpt_find(g, "model.layers.1.mlp.down_proj.weight");
    cr_assert(q && k && v && ga && up && dn);
    cr_expect(q->shape[0] == C && k->shape[0] == C / 2 && v->shape[0] == C / 2 && k->shape[1] == C,
              "GQA with 2 KV heads of 4: k_proj is (%lld, %lld)", (long long)k->shape[0], (long long)k->shape[1]);
    cr_expect(ga->shape[0] == 3 * C && dn->shape[1] == 3 * C, "mlp_hidden");
    cr_expect(k->offset == q->offset + q->numel && v->offset == k->offset + k->numel, "q, k, v are not adjacent");
    cr_expect(up->offset == ga->offset + ga->numel, "gate and up are not adjacent");
    cr_expect(fg_gpt_weight(g, FG_GPT_WPE, 0) == NULL && fg_gpt_weight(g, FG_GPT_ATTN_B, 0) == NULL);
    /* the table without a model is the model's */
    fg_gpt_param *t = calloc((size_t)g->n_params, sizeof *t);
    cr_assert_eq(fg_gpt_table(&c, t), g->n_params);
    for (int i = 0; i < g->n_params; i++)
        cr_expect(!strcmp(t[i].name, g->params[i].name) && t[i].offset == g->params[i].offset, "entry %d", i);
    int64_t total = 0;
    for (int i = 0; i < g->n_params; i++) total += g->params[i].numel;
    cr_expect_eq(total, g->num_elements);
    free(t);
    fg_gpt_free(g);

    c = arch_config(A_NANOCHAT, FG_F32, FG_ATTN_FLASH, C, H, T, V);
    g = make(&c, 1);
    /* parameter-free norms: embed, 4 per block, lm_head */
    cr_assert_eq(g->n_params, 1 + 6 * c.n_layer + 1, "nanochat: %d entries", g->n_params);
    cr_expect_str_eq(g->params[1].name, "model.layers.0.self_attn.q_proj.weight");
    cr_expect_str_eq(g->params[5].name, "model.layers.0.mlp.fc1.weight");
    cr_expect_str_eq(g->params[6].name, "model.layers.0.mlp.fc2.weight");
    cr_expect_str_eq(g->params[g->n_params - 1].name, "lm_head.weight");
    cr_expect_eq(fg_gpt_layer_window(&c, 0), T / 4);
    cr_expect_eq(fg_gpt_layer_window(&c, 2), 0, "the last layer is always full");
    fg_gpt_free(g);

    c = arch_config(A_LLAMA_TIED, FG_F32, FG_ATTN_FLASH, C, H, T, V);
    g = make(&c, 1);
    cr_expect(fg_gpt_find(g, "lm_head.weight") == NULL && fg_gpt_find(g, "model.layers.0.self_attn.k_proj.bias"));
    cr_expect_eq(fg_gpt_find(g, "model.layers.0.self_attn.k_proj.bias")->shape[0], C / H, "MQA: one KV head");
    fg_gpt_free(g);
}

Test(gpt_arch, initialization_is_deterministic_and_gpt2_style) {
    fg_gpt_config c = arch_config(A_LLAMA, FG_F32, FG_ATTN_FLASH, 32, 4, 16, 50);
    fg_gpt *a = make(&c, 7), *b = make(&c, 7), *d = make(&c, 8);
    cr_expect(!memcmp(fg_data(a->params_flat), fg_data(b->params_flat), fg_nbytes(a->params_flat)));
    cr_expect(memcmp(fg_data(a->params_flat), fg_data(d->params_flat), fg_nbytes(a->params_flat)));
    /* o_proj and down_proj: 0.02 / sqrt(2 L); the others 0.02; norm weights 1 */
    const fg_gpt_param *o = fg_gpt_find(a, "model.layers.0.self_attn.o_proj.weight"),
                       *q = fg_gpt_find(a, "model.layers.0.self_attn.q_proj.weight"),
                       *n = fg_gpt_find(a, "model.norm.weight");
    double so = 0, sq = 0;
    for (int64_t i = 0; i < o->numel; i++) so += fg_get(o->w, i) * fg_get(o->w, i);
    for (int64_t i = 0; i < q->numel; i++) sq += fg_get(q->w, i) * fg_get(q->w, i);
    so = sqrt(so / (double)o->numel);
    sq = sqrt(sq / (double)q->numel);
    cr_expect(fabs(sq - 0.02) < 0.004 && fabs(so - 0.02 / sqrt(2.0 * c.n_layer)) < 0.003, "std q %g o %g", sq, so);
    for (int64_t i = 0; i < n->numel; i++) cr_expect_eq(fg_get(n->w, i), 1.0);
    fg_gpt_free(a);
    fg_gpt_free(b);
    fg_gpt_free(d);
}

/* ---- gradients against finite differences ---- */

typedef struct {
    fg_gpt *g;
    const int32_t *x, *y;
    int B, T;
    int logits;
} grad_case;

static fg_tensor *gpt_fn(fg_tensor *const *in, int n, void *user) {
    (void)in;
    (void)n;
    grad_case *c = user;
    if (c->logits) return fg_gpt_forward(c->g, c->x, c->B, c->T, NULL);
    return fg_gpt_loss(c->g, c->x, c->y, c->B, c->T, NULL);
}

/* larger weights than the init so that every path carries a visible gradient */
static void randomize(fg_gpt *g, uint64_t seed) {
    for (int j = 0; j < g->n_params; j++) {
        fg_gpt_param *p = &g->params[j];
        fg_tensor *r = fg_rand_uniform(FG_F64, FG_CPU, p->w->ndim, p->w->shape, -0.5, 0.5, seed, (uint64_t)j);
        if (p->init == FG_INIT_ONES)
            fg_axpy(p->w, 1.0, r);
        else
            fg_copy_into(p->w, r);
        fg_release(r);
    }
}

static void check_gradients(arch_case a, fg_attn_impl impl, int logits) {
    fg_gpt_config c = arch_config(a, FG_F64, impl, 8, 4, 6, 7);
    fg_gpt *g = make(&c, 3);
    randomize(g, 9);
    enum { B = 2, T = 5 };
    int32_t x[B * T], y[B * T];
    fill_tokens(x, B * T, c.vocab_size, 1);
    fill_tokens(y, B * T, c.vocab_size, 2);
    y[3] = -1;
    grad_case gc = {g, x, y, B, T, logits};
    fg_tensor **in = malloc((size_t)g->n_params * sizeof *in);
    for (int j = 0; j < g->n_params; j++) in[j] = g->params[j].w;
    fg_gradcheck_opts o = {.eps = 1e-6, .atol = 1e-7, .rtol = 1e-5, .seed = 5};
    fg_gradcheck_report r;
    cr_assert_eq(fg_gradcheck(gpt_fn, in, g->n_params, &gc, &o, &r), FG_OK, "gradcheck: %s", fg_last_error());
    cr_expect_eq(r.checked, g->num_elements, "%s: checked %lld of %lld parameters", arch_case_names[a],
                 (long long)r.checked, (long long)g->num_elements);
    cr_expect(r.passed, "%s, %s attention, %s: worst at %s[%lld]: analytic %.10g numeric %.10g (max abs %.3g rel %.3g)",
              arch_case_names[a], fg_attn_impl_name(impl), logits ? "logits" : "loss",
              r.worst_input >= 0 ? g->params[r.worst_input].name : "?", (long long)r.worst_index, r.analytic, r.numeric,
              r.max_abs_err, r.max_rel_err);
    free(in);
    fg_gpt_free(g);
}

Test(gpt_arch, llama_gradients_match_finite_differences, .timeout = 300) {
    check_gradients(A_LLAMA, FG_ATTN_FLASH, 0);
    check_gradients(A_LLAMA_TIED, FG_ATTN_NAIVE, 1);
}
Test(gpt_arch, nanochat_gradients_match_finite_differences, .timeout = 300) {
    check_gradients(A_NANOCHAT, FG_ATTN_FLASH, 0);
    check_gradients(A_NANOCHAT, FG_ATTN_NAIVE, 1);
}
Test(gpt_arch, mixed_options_gradients_match_finite_differences, .timeout = 300) {
    check_gradients(A_MIX, FG_ATTN_FLASH, 1);
    check_gradients(A_GPT2_GQA, FG_ATTN_FLASH, 0);
}

/* The same model computed two ways: GPT-2 names with q|k|v fused in one tensor, Llama names with
 * three; copied weights give the same logits bit for bit. */
Test(gpt_arch, fused_and_split_names_are_one_model) {
    fg_gpt_config a = arch_config(A_MIX, FG_F64, FG_ATTN_FLASH, 16, 4, 8, 13), b = a;
    b.arch = FG_ARCH_LLAMA;
    fg_gpt *ga = make(&a, 4), *gb = make(&b, 4);
    cr_assert_eq(ga->num_elements, gb->num_elements);
    memcpy(fg_data(gb->params_flat), fg_data(ga->params_flat), fg_nbytes(ga->params_flat));
    int32_t x[16];
    fill_tokens(x, 16, 13, 3);
    fg_tensor *la = fgt_ok(fg_gpt_forward(ga, x, 2, 8, NULL), "a"),
              *lb = fgt_ok(fg_gpt_forward(gb, x, 2, 8, NULL), "b");
    cr_expect(!memcmp(fg_data(la), fg_data(lb), fg_nbytes(la)), "the logits differ");
    fg_release(la);
    fg_release(lb);
    fg_gpt_free(ga);
    fg_gpt_free(gb);
}

/* ---- the KV cache ---- */

static void full_last_logits(fg_gpt *g, const int32_t *tokens, int t, double *out) {
    fg_tensor *lg = fg_gpt_forward(g, tokens, 1, t, NULL);
    cr_assert(lg, "%s", fg_last_error());
    const int V = g->cfg.vocab_size;
    for (int v = 0; v < V; v++) out[v] = fg_get(lg, (int64_t)(t - 1) * V + v);
    fg_release(lg);
}

static void kv_matches(arch_case a, fg_dtype dt, fg_attn_impl impl, int block, int prompt) {
    fg_gpt_config c = arch_config(a, dt, impl, 16, 4, block, 13);
    fg_gpt *g = make(&c, 21);
    if (dt == FG_F64) randomize(g, 3);
    fg_gpt_kv *kv = fg_gpt_kv_create(g);
    cr_assert(kv, "%s", fg_last_error());
    const int T = block, V = c.vocab_size;
    int32_t *tok = malloc((size_t)T * sizeof *tok);
    double *x = malloc((size_t)V * sizeof *x), *y = malloc((size_t)V * sizeof *y);
    fill_tokens(tok, T, V, 8);
    const double tol = dt == FG_F64 ? 1e-11 : 2e-5;
    for (int round = 0; round < 2; round++) {
        fg_gpt_kv_reset(kv);
        int len = 0;
        while (len < T) {
            int n = len == 0 ? prompt : 1;
            cr_assert_eq(fg_gpt_kv_append(g, kv, tok + len, n, x), FG_OK, "%s: %s", arch_case_names[a],
                         fg_last_error());
            len += n;
            full_last_logits(g, tok, len, y);
            double worst = 0, scale = 1;
            for (int v = 0; v < V; v++) {
                worst = fmax(worst, fabs(x[v] - y[v]));
                scale = fmax(scale, fabs(y[v]));
            }
            cr_assert(worst <= tol * scale, "%s %s %s: position %d: cached logits differ by %g", arch_case_names[a],
                      fg_dtype_name(dt), fg_attn_impl_name(impl), len - 1, worst);
        }
    }
    /* greedy decoding far past the block: the cache (rebuilt when the window moves) and the
     * recompute choose the same tokens */
    const int n_new = 2 * T + 3, W = 2 + n_new;
    int32_t *s1 = calloc((size_t)W, sizeof *s1), *s2 = calloc((size_t)W, sizeof *s2);
    s1[0] = s2[0] = 1;
    s1[1] = s2[1] = 4;
    fg_sample_opts o = {.temperature = 0};
    cr_assert_eq(fg_gpt_generate(g, s1, 2, n_new, &o), FG_OK, "%s", fg_last_error());
    o.no_cache = 1;
    cr_assert_eq(fg_gpt_generate(g, s2, 2, n_new, &o), FG_OK, "%s", fg_last_error());
    for (int i = 0; i < W; i++)
        cr_expect_eq(s1[i], s2[i], "%s: greedy token %d: cache %d, recompute %d", arch_case_names[a], i, s1[i], s2[i]);
    /* a cache of another architecture is refused */
    fg_gpt_config o2 = c;
    fg_gpt_arch_preset(&o2, FG_ARCH_GPT2);
    fg_gpt *other = make(&o2, 1);
    fg_gpt_kv_reset(kv);
    cr_expect_neq(fg_gpt_kv_append(other, kv, tok, 1, x), FG_OK, "a cache of another architecture was used");
    fg_gpt_free(other);
    free(s1);
    free(s2);
    free(tok);
    free(x);
    free(y);
    fg_gpt_kv_free(kv);
    fg_gpt_free(g);
}

Test(gpt_arch, kv_cache_equals_the_full_recompute_for_every_architecture, .timeout = 300) {
    for (int a = 0; a < A_COUNT; a++) {
        kv_matches((arch_case)a, FG_F64, FG_ATTN_FLASH, 12, 5);
        kv_matches((arch_case)a, FG_F32, FG_ATTN_NAIVE, 9, 1);
        kv_matches((arch_case)a, FG_F32, FG_ATTN_FLASH, 70, 3);
    }
}

/* ---- training: recompute and resume ---- */

static fg_source *addition_source(void) {
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = 2;
    fg_source *s = fg_source_addition(&ac);
    cr_assert(s, "%s", fg_last_error());
    return s;
}

static fg_train_config arch_train_config(const fg_source *src, arch_case a, int steps) {
    fg_train_config c = fgt_tiny_train_config(src, fg_source_fixed_block(src), 4, steps, 1, 5);
    fg_gpt_config m = arch_config(a, FG_F32, FG_ATTN_FLASH, 16, 4, c.model.block_size, c.model.vocab_size);
    m.dropout = 0.1; /* the recomputation and the resumed run must redraw the same masks */
    c.model = m;
    return c;
}

static float *run3(const fg_source *src, arch_case a, fg_gpt_recompute rc, double *losses) {
    fg_train_config c = arch_train_config(src, a, 4);
    c.model.recompute = rc;
    fg_trainer *tr = fg_trainer_create(&c, src);
    cr_assert(tr, "fg_trainer_create: %s", fg_last_error());
    for (int i = 0; i < 3; i++) {
        fg_step_stats s;
        cr_assert_eq(fg_trainer_step(tr, &s), FG_OK, "%s", fg_last_error());
        losses[i] = s.loss;
    }
    float *w = malloc(fg_nbytes(tr->model->params_flat));
    memcpy(w, fg_data(tr->model->params_flat), fg_nbytes(tr->model->params_flat));
    fg_trainer_free(tr);
    return w;
}

Test(gpt_arch, training_is_bit_identical_under_every_recompute_setting, .timeout = 300) {
    fg_source *src = addition_source();
    const arch_case cases[] = {A_LLAMA, A_NANOCHAT};
    for (size_t ci = 0; ci < 2; ci++) {
        fg_train_config c = arch_train_config(src, cases[ci], 4);
        fg_gpt *g = make(&c.model, 1);
        const size_t n = (size_t)g->num_elements;
        fg_gpt_free(g);
        double loss[FG_RECOMPUTE_COUNT][3];
        float *w[FG_RECOMPUTE_COUNT];
        for (int r = 0; r < FG_RECOMPUTE_COUNT; r++) w[r] = run3(src, cases[ci], (fg_gpt_recompute)r, loss[r]);
        for (int r = 1; r < FG_RECOMPUTE_COUNT; r++) {
            for (int i = 0; i < 3; i++)
                cr_expect(loss[r][i] == loss[0][i], "%s, recompute %s, step %d: loss %a, without %a",
                          arch_case_names[cases[ci]], fg_gpt_recompute_name((fg_gpt_recompute)r), i + 1, loss[r][i],
                          loss[0][i]);
            cr_expect(!memcmp(w[r], w[0], n * sizeof(float)), "%s, recompute %s: the parameters differ",
                      arch_case_names[cases[ci]], fg_gpt_recompute_name((fg_gpt_recompute)r));
        }
        for (int r = 0; r < FG_RECOMPUTE_COUNT; r++) free(w[r]);
    }
    fg_source_free(src);
}

static void steps(fg_trainer *tr, int n, double *losses) {
    for (int i = 0; i < n; i++) {
        fg_step_stats s;
        cr_assert_eq(fg_trainer_step(tr, &s), FG_OK, "step %lld: %s", (long long)tr->step + 1, fg_last_error());
        losses[i] = s.loss;
    }
}

Test(gpt_arch, a_resumed_nanochat_run_is_the_uninterrupted_one_bit_for_bit, .timeout = 300) {
    char dir[256];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_gpt_arch_XXXXXX");
    fg_source *s = addition_source();
    fg_train_config c = arch_train_config(s, A_NANOCHAT, 8);
    c.model.n_kv_head = 2;
    enum { N = 4 };
    fg_trainer *full = fg_trainer_create(&c, s);
    cr_assert(full, "%s", fg_last_error());
    double lf[2 * N], l1[N], l2[N];
    steps(full, 2 * N, lf);
    fg_trainer *first = fg_trainer_create(&c, s);
    steps(first, N, l1);
    cr_assert_eq(fg_ckpt_save(dir, first), FG_OK, "%s", fg_last_error());
    fg_trainer_free(first);
    fg_ckpt *ck = fg_ckpt_open(dir, 1);
    cr_assert(ck, "%s", fg_last_error());
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    cr_expect(fg_gpt_same_arch(&in->train.model, &c.model) && !strcmp(in->train.model.window, "SSSL") &&
                  in->train.model.logit_softcap == 2 && in->train.model.n_kv_head == 2 &&
                  in->train.model.arch == FG_ARCH_NANOCHAT,
              "the architecture did not survive the checkpoint");
    fg_trainer *second = fg_trainer_create(&in->train, s);
    cr_assert(second, "%s", fg_last_error());
    cr_assert_eq(fg_ckpt_restore(ck, second), FG_OK, "%s", fg_last_error());
    fg_ckpt_close(ck);
    steps(second, N, l2);
    for (int i = 0; i < N; i++)
        cr_expect(l2[i] == lf[N + i], "step %d after resuming: %.17g, uninterrupted %.17g", N + i + 1, l2[i],
                  lf[N + i]);
    cr_expect(!memcmp(fg_data(second->model->params_flat), fg_data(full->model->params_flat),
                      fg_nbytes(full->model->params_flat)),
              "final parameters differ");
    /* a trainer of another architecture does not take the checkpoint */
    fg_train_config o = c;
    fg_gpt_arch_preset(&o.model, FG_ARCH_LLAMA);
    fg_trainer *other = fg_trainer_create(&o, s);
    ck = fg_ckpt_open(dir, 1);
    cr_assert(other && ck, "%s", fg_last_error());
    cr_expect_neq(fg_ckpt_restore(ck, other), FG_OK, "a llama trainer took a nanochat checkpoint");
    fg_ckpt_close(ck);
    fg_trainer_free(other);
    fg_trainer_free(full);
    fg_trainer_free(second);
    fg_source_free(s);
    fgt_remove_tmpdir(dir);
}

/* ---- the command line ---- */

/* `flashgrad <args>` run in dir: exit code `code` and `phrase` in its output, one line when an error. */
static void expect_cli(const char *dir, const char *args, int code, const char *phrase) {
    char cmd[2048], log[16384];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' %s 2>&1", dir, fgt_bin(), args);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, code, "`flashgrad %s` exited %d, expected %d:\n%s", args, st, code, log);
    cr_expect(strstr(log, phrase) != NULL, "`flashgrad %s`: output does not mention '%s':\n%s", args, phrase, log);
    if (code != 0) {
        int lines = 0;
        for (const char *c = log; *c; c++) lines += *c == '\n';
        cr_expect_eq(lines, 1, "`flashgrad %s`: an error should be one line, got %d:\n%s", args, lines, log);
    }
}

Test(gpt_arch, train_takes_the_architecture_flags_and_keeps_them_across_resume, .timeout = 300) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char dir[256], p[512];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_gpt_arch_cli_XXXXXX");
    snprintf(p, sizeof p, "%s/text.txt", dir);
    FILE *f = fopen(p, "w");
    cr_assert(f);
    for (int i = 0; i < 400; i++) fprintf(f, "the quick brown fox %d jumps over the lazy dog\n", i % 7);
    fclose(f);
    const char *base = "train --data text.txt --n-layer 2 --n-embd 16 --n-head 4 --block-size 16 --batch-size 2 "
                       "--eval-every 0 --eval-iters 1 --threads 1";
    char args[1024];
    /* refusals: one line, exit 2, naming the flag */
    snprintf(args, sizeof args, "%s --arch llama3 --out o", base);
    expect_cli(dir, args, 2, "--arch: unknown architecture 'llama3' (gpt2, llama or nanochat)");
    snprintf(args, sizeof args, "%s --n-kv-head 3 --out o", base);
    expect_cli(dir, args, 2, "--n-kv-head 3 does not divide --n-head 4");
    snprintf(args, sizeof args, "%s --norm rms --out o", base);
    expect_cli(dir, args, 2, "--norm: unknown kind 'rms'");
    snprintf(args, sizeof args, "%s --mlp geglu --out o", base);
    expect_cli(dir, args, 2, "--mlp: unknown kind 'geglu'");
    snprintf(args, sizeof args, "%s --pos alibi --out o", base);
    expect_cli(dir, args, 2, "--pos: unknown kind 'alibi'");
    snprintf(args, sizeof args, "%s --window SXL --out o", base);
    expect_cli(dir, args, 2, "--window 'SXL'");
    snprintf(args, sizeof args, "%s --qk-norm 2 --out o", base);
    expect_cli(dir, args, 2, "--qk-norm");
    snprintf(args, sizeof args, "%s --pos rope --n-embd 12 --out o", base);
    expect_cli(dir, args, 2, "pos rope needs an even head dim");
    snprintf(args, sizeof args, "%s --arch nanochat --device cuda --out o", base);
    expect_cli(dir, args, 2, "cuda");
    /* a nanochat run with options over the preset, then a resume that must keep them */
    snprintf(args, sizeof args, "%s --arch nanochat --n-kv-head 2 --window SL --logit-softcap 10 --steps 4 --out run",
             base);
    expect_cli(dir, args, 0,
               "architecture: nanochat: rope-nanochat (theta 10000), rmsnorm-free (eps 1e-06) after the embedding too, "
               "qk-norm, relu2 (hidden 64), 2 kv heads, no biases, untied head, logit softcap 10, windows SL");
    snprintf(args, sizeof args, "%s --resume --steps 6 --mlp gelu --out run", base);
    expect_cli(dir, args, 2, "--mlp differs from the checkpoint's architecture");
    snprintf(args, sizeof args, "%s --resume --steps 6 --out run", base);
    expect_cli(dir, args, 0, "step 6/6");
    snprintf(args, sizeof args, "%s --init-from run --steps 2 --out run2 --arch llama", base);
    expect_cli(dir, args, 2, "--arch contradicts the model in 'run'");
    expect_cli(dir, "sample --ckpt run --tokens 5 --temperature 0", 0, "");
    expect_cli(dir, "export --ckpt run --to llmc m.bin", 2, "holds GPT-2 models only (this one is arch nanochat)");
    /* nanoGPT's bias = False: GPT-2 without a bias anywhere, nanoGPT's names */
    snprintf(args, sizeof args, "%s --bias=False --steps 1 --out nobias", base);
    expect_cli(dir, args, 0,
               "architecture: gpt2: learned, layernorm (eps 1e-05), gelu (hidden 64), no biases, tied head");
    /* bench train builds the same model from the same flags */
    expect_cli(dir, "bench train --arch llama --n-kv-head 1 --n-layer 1 --n-embd 16 --n-head 2 --steps 2 --threads 1",
               0, "architecture: llama: rope (theta 10000), rmsnorm (eps 1e-06), swiglu (hidden 64), 1 kv heads");
    fgt_remove_tmpdir(dir);
}

/* ---- PyTorch ---- */

static const char *torch_python(void) {
    const char *p = getenv("FG_TORCH_PYTHON");
    return p && *p ? p : FGT_PYTHON;
}

static void save_npy(const char *dir, const char *cname, const char *what, const char *name, const fg_tensor *t) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s__%s__%s.npy", dir, cname, what, name);
    fg_tensor *c = fgt_ok(fg_make_contiguous((fg_tensor *)t), "contiguous");
    cr_assert_eq(fg_npy_save(p, c), FG_OK, "%s: %s", p, fg_last_error());
    fg_release(c);
}

/* One case of the cross-check: its model (float64, weights uniform in ±0.5, norm gains around 1),
 * tokens and targets, and flashgrad's logits, loss and gradients, into dir; its line in cases.txt:
 * name, then the config as key=value, then the loss (%.17g). */
static void torch_case(FILE *list, const char *dir, const char *cname, const fg_gpt_config *c, uint64_t seed) {
    fg_gpt *g = make(c, seed);
    randomize(g, seed + 1);
    enum { B = 2, T = 7 };
    int32_t x[B * T], y[B * T];
    fill_tokens(x, B * T, c->vocab_size, seed + 2);
    fill_tokens(y, B * T, c->vocab_size, seed + 3);
    y[4] = -1; /* an ignored target */
    fg_tensor *logits = fgt_ok(fg_gpt_forward(g, x, B, T, NULL), "forward");
    fg_gpt_zero_grad(g);
    fg_tensor *loss = fgt_ok(fg_gpt_loss(g, x, y, B, T, NULL), "loss");
    cr_assert_eq(fg_backward(loss, NULL), FG_OK, "%s", fg_last_error());
    save_npy(dir, cname, "out", "logits", logits);
    for (int j = 0; j < g->n_params; j++) {
        save_npy(dir, cname, "w", g->params[j].name, g->params[j].w);
        save_npy(dir, cname, "grad", g->params[j].name, g->params[j].w->grad);
    }
    char win[FG_GPT_WINDOW_MAX + 2];
    snprintf(win, sizeof win, "%s", c->window[0] ? c->window : "L");
    fprintf(list,
            "%s arch=%s L=%d H=%d Hkv=%d C=%d V=%d T=%d Tq=%d pos=%s theta=%.17g norm=%s eps=%.17g emb_norm=%d "
            "qk_norm=%d mlp=%s hidden=%d bias=%d tie=%d softcap=%.17g window=%s loss=%.17g x=",
            cname, fg_gpt_arch_name(c->arch), c->n_layer, c->n_head, fg_gpt_kv_heads(c), c->n_embd, c->vocab_size,
            c->block_size, T, fg_gpt_pos_name(c->pos), fg_gpt_theta(c), fg_gpt_norm_name(c->norm), fg_gpt_eps(c),
            c->emb_norm, c->qk_norm, fg_gpt_mlp_name(c->mlp), fg_gpt_hidden(c), !c->no_bias, !c->untie_head,
            c->logit_softcap, win, fg_get(loss, 0));
    for (int i = 0; i < B * T; i++) fprintf(list, "%s%d", i ? "," : "", x[i]);
    fprintf(list, " y=");
    for (int i = 0; i < B * T; i++) fprintf(list, "%s%d", i ? "," : "", y[i]);
    fprintf(list, " B=%d\n", B);
    fg_release(logits);
    fg_release(loss);
    fg_gpt_free(g);
}

Test(gpt_arch, logits_and_gradients_match_pytorch, .timeout = 300) {
    const char *what = "PyTorch cross-check of the llama and nanochat architectures";
    const char *script = "tests/gpt_arch_torch_check.py";
    if (access(script, R_OK) != 0) fgt_skip(what, "tests/gpt_arch_torch_check.py not found (run from the repo root)");
    if (access(torch_python(), X_OK) != 0) fgt_skip(what, "no python interpreter (set FG_TORCH_PYTHON)");
    char dir[256], p[512], cmd[1024], log[65536];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_gpt_arch_torch_XXXXXX");
    snprintf(p, sizeof p, "%s/cases.txt", dir);
    FILE *f = fopen(p, "w");
    cr_assert(f, "%s", p);
    const int C = 16, H = 4, T = 12, V = 19;
    fg_gpt_config c = arch_config(A_LLAMA, FG_F64, FG_ATTN_FLASH, C, H, T, V);
    torch_case(f, dir, "llama_gqa_untied", &c, 10);
    c = arch_config(A_LLAMA_TIED, FG_F64, FG_ATTN_NAIVE, C, H, T, V);
    torch_case(f, dir, "llama_mqa_tied_bias", &c, 20);
    c = arch_config(A_NANOCHAT, FG_F64, FG_ATTN_FLASH, C, H, T, V);
    c.window[0] = 0; /* transformers' NanoChat has no windows */
    c.logit_softcap = 15;
    c.n_kv_head = 2;
    torch_case(f, dir, "nanochat_gqa", &c, 30);
    c = arch_config(A_NANOCHAT, FG_F64, FG_ATTN_FLASH, C, H, T, V);
    torch_case(f, dir, "nanochat_windows_softcap2", &c, 40); /* the reference module only */
    c = arch_config(A_MIX, FG_F64, FG_ATTN_FLASH, C, H, T, V);
    c.no_bias = 0;
    torch_case(f, dir, "gpt2_names_mix", &c, 50);
    c = arch_config(A_GPT2_GQA, FG_F64, FG_ATTN_NAIVE, C, H, T, V);
    torch_case(f, dir, "gpt2_gqa_window", &c, 60);
    fclose(f);
    snprintf(cmd, sizeof cmd, "HF_HUB_OFFLINE=1 %s %s %s 2>&1", torch_python(), script, dir);
    const int st = fgt_run_cmd(cmd, log, sizeof log);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    if (st == FGT_PYTHON_CANNOT_RUN) {
        log[strcspn(log, "\n")] = 0; /* its one line */
        fgt_skip(what, log);
    }
    if (fgt_verbose() || st) fprintf(stderr, "[gpt_arch] %s", log);
    cr_expect_eq(st, 0, "gpt_arch_torch_check.py exited %d:\n%s", st, log);
}

Test(gpt_arch, flops_per_token_leave_out_an_untied_embedding_and_count_windows) {
    fg_source *src = addition_source();
    fg_train_config c = arch_train_config(src, A_NANOCHAT, 2);
    c.model.block_size = 16;
    fg_trainer *tr = fg_trainer_create(&c, src);
    cr_assert(tr, "%s", fg_last_error());
    const fg_gpt_config *m = &tr->model->cfg;
    const double T = tr->T, w = fg_gpt_layer_window(m, 0);
    cr_assert(w > 0 && w + 1 < T && fg_gpt_layer_window(m, 2) == 0, "the test needs a short window: w %g T %g", w, T);
    /* layers 0 and 1 windowed (SSSL over 3 layers, the last full) */
    const double want = 6.0 * ((double)tr->model->num_elements - (double)m->vocab_size * m->n_embd) +
                        12.0 * m->n_embd * (2 * (w + 1) + T);
    cr_expect(fg_trainer_flops_per_token(tr) == want, "flops/token %.17g, expected %.17g",
              fg_trainer_flops_per_token(tr), want);
    fg_trainer_free(tr);
    fg_source_free(src);
}

Test(gpt_arch, a_step_after_warmup_takes_nothing_from_the_system) {
    fg_source *src = addition_source();
    const arch_case cases[] = {A_LLAMA, A_NANOCHAT, A_MIX};
    for (size_t ci = 0; ci < 3; ci++) {
        fg_train_config c = arch_train_config(src, cases[ci], 12);
        fg_trainer *tr = fg_trainer_create(&c, src);
        cr_assert(tr, "%s", fg_last_error());
        double l[4], ev;
        steps(tr, 3, l);
        cr_assert_eq(fg_trainer_eval_loss(tr, FG_SPLIT_VAL, &ev), FG_OK);
        const fg_alloc_stats mid = fg_alloc_get_stats(FG_CPU);
        steps(tr, 3, l);
        cr_assert_eq(fg_trainer_eval_loss(tr, FG_SPLIT_VAL, &ev), FG_OK);
        const fg_alloc_stats after = fg_alloc_get_stats(FG_CPU);
        cr_expect_eq(after.system_allocs, mid.system_allocs, "%s: system allocations grew from %llu to %llu",
                     arch_case_names[cases[ci]], (unsigned long long)mid.system_allocs,
                     (unsigned long long)after.system_allocs);
        cr_expect_eq(after.current, mid.current, "%s: live bytes between steps changed: %zu -> %zu",
                     arch_case_names[cases[ci]], mid.current, after.current);
        fg_trainer_free(tr);
    }
    fg_source_free(src);
}
