/* test_rope_qkv.c — fg_rope_qkv, the rotary embedding and QK-norm on a packed projection, against
 * the composition it replaces in train/gpt.c: slice each part out of qkv, permute it to
 * (B, heads, T, D), fg_rope (nanochat: between two flips of the second half's sign, fg_mul),
 * fg_rmsnorm without a weight; v only permuted. Values and gradients in float64 (within 1e-12)
 * and float32, gradients against central differences in float64, backward accumulating, a row per
 * error path. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ops/cpu.h"
#include "ops/device.h"
#include "ops/ops.h"
#include "tests/common.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}
TestSuite(rope_qkv, .fini = leak_check, .timeout = 300);

typedef struct {
    const char *name;
    int64_t B, T, H, K, D; /* K = H_kv */
    int rotary, qk_norm;
    double theta;
    int64_t pos0;
    double eps;
} qkv_case;

/* sizes 1, GQA and MQA, both conventions, each part alone, a KV-cache offset */
static const qkv_case cases[] = {
    {"hf rope 1x1 H1", 1, 1, 1, 1, 2, 1, 0, 10000, 0, 1e-6},
    {"hf rope 2x5 H3 K3 D6", 2, 5, 3, 3, 6, 1, 0, 10000, 0, 1e-6},
    {"hf rope GQA 2x7 H4 K2 D8 theta 1e5", 2, 7, 4, 2, 8, 1, 0, 100000, 0, 1e-5},
    {"hf rope + norm MQA 1x6 H3 K1 D10 pos0 9", 1, 6, 3, 1, 10, 1, 1, 500000, 9, 1e-5},
    {"nanochat rope + norm 2x5 H2 K2 D8", 2, 5, 2, 2, 8, -1, 1, 10000, 0, 1e-6},
    {"nanochat rope + norm GQA 3x4 H6 K2 D4 pos0 1000", 3, 4, 6, 2, 4, -1, 1, 100, 1000, 1e-6},
    {"nanochat rope 1x3 H2 K1 D6", 1, 3, 2, 1, 6, -1, 0, 10000, 3, 1e-6},
    {"norm only 2x3 H2 K1 D5", 2, 3, 2, 1, 5, 0, 1, 0, 0, 1e-3},
    {"neither 1x2 H1 K1 D3", 1, 2, 1, 1, 3, 0, 0, 0, 0, 0},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static int64_t width(const qkv_case *c) { return (c->H + 2 * c->K) * c->D; }

static fg_rope_qkv_opts opts_of(const qkv_case *c) {
    return (fg_rope_qkv_opts){.n_head = c->H,
                              .n_kv_heads = c->K,
                              .rotary = c->rotary,
                              .theta = c->theta,
                              .pos0 = c->pos0,
                              .qk_norm = c->qk_norm,
                              .eps = c->eps};
}

static fg_tensor *fused_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    const fg_rope_qkv_opts o = opts_of(user);
    return fg_rope_qkv(in[0], &o);
}

/* columns [c0, c0 + n D) of x (B, T, W) as (B, n, T, D) */
static fg_tensor *heads(const qkv_case *c, fg_tensor *x, int64_t c0, int64_t n) {
    fg_tensor *s = fgt_ok(fg_slice(x, 2, c0, c0 + n * c->D), "slice");
    fg_tensor *r = fgt_ok(fg_reshape(s, 4, (int64_t[]){c->B, c->T, n, c->D}), "reshape");
    fg_tensor *p = fgt_ok(fg_permute(r, (int[]){0, 2, 1, 3}), "permute");
    fg_release(s), fg_release(r);
    return p;
}

/* the composition on one part (q or k): rope (with the flips for nanochat's), then the norm */
static fg_tensor *composed_part(const qkv_case *c, fg_tensor *x, fg_tensor *sign) {
    fg_tensor *y = fg_retain(x), *t;
    if (c->rotary == 1) {
        t = fgt_ok(fg_rope(y, c->theta, c->pos0), "rope");
        fg_release(y), y = t;
    }
    if (c->rotary == -1) {
        t = fgt_ok(fg_mul(y, sign), "flip");
        fg_release(y), y = t;
        t = fgt_ok(fg_rope(y, c->theta, c->pos0), "rope");
        fg_release(y), y = t;
        t = fgt_ok(fg_mul(y, sign), "flip");
        fg_release(y), y = t;
    }
    if (c->qk_norm) {
        t = fgt_ok(fg_rmsnorm(y, NULL, c->eps), "rmsnorm");
        fg_release(y), y = t;
    }
    return y;
}

/* The composition's q, k, v (B, heads, T, D) of qkv; out[3]. */
static void composed(const qkv_case *c, fg_tensor *qkv, fg_tensor **out) {
    fg_tensor *sign = fg_full(qkv->dtype, FG_CPU, 1, &c->D, 1.0);
    cr_assert(sign);
    for (int64_t i = c->D / 2; i < c->D; i++) fg_set(sign, i, -1.0);
    fg_tensor *q = heads(c, qkv, 0, c->H), *k = heads(c, qkv, c->H * c->D, c->K);
    out[0] = composed_part(c, q, sign);
    out[1] = composed_part(c, k, sign);
    out[2] = heads(c, qkv, (c->H + c->K) * c->D, c->K);
    fg_release(q), fg_release(k), fg_release(sign);
}

/* Runs both on copies of one qkv with one dout (B, T, W): the fused output and its qkv gradient
 * in fo, fg; the composition's parts in co[3] and its qkv gradient in cg. */
typedef struct {
    fg_tensor *fo, *fg, *co[3], *cg;
} both_run;

static both_run run_both(const qkv_case *c, fg_dtype dt, uint64_t seed) {
    const int64_t shape[3] = {c->B, c->T, width(c)};
    fg_tensor *x64 = fgt_uniform(FG_F64, 3, shape, -2, 2, seed), *d64 = fgt_rand(FG_F64, 3, shape, seed + 1);
    fg_tensor *xa = fgt_ok(fg_to(x64, FG_CPU, dt), "to"), *xb = fgt_ok(fg_to(x64, FG_CPU, dt), "to");
    fg_tensor *dout = fgt_ok(fg_to(d64, FG_CPU, dt), "to");
    fg_set_requires_grad(xa, 1), fg_set_requires_grad(xb, 1);
    both_run r = {0};
    const fg_rope_qkv_opts o = opts_of(c);
    r.fo = fgt_ok(fg_rope_qkv(xa, &o), c->name);
    cr_assert_eq(fg_backward(r.fo, dout), FG_OK, "%s: %s", c->name, fg_last_error());
    r.fg = fg_retain(xa->grad);
    /* the composition's loss: Σ part ⊙ (the same part of dout), so each part's gradient is dout's */
    composed(c, xb, r.co);
    fg_tensor *dp[3] = {heads(c, dout, 0, c->H), heads(c, dout, c->H * c->D, c->K),
                        heads(c, dout, (c->H + c->K) * c->D, c->K)};
    fg_tensor *loss = NULL;
    for (int i = 0; i < 3; i++) {
        fg_tensor *m = fgt_ok(fg_mul(r.co[i], dp[i]), "mul"), *s = fgt_ok(fg_sum_all(m), "sum");
        fg_tensor *l = loss ? fgt_ok(fg_add(loss, s), "add") : fg_retain(s);
        fg_release(loss), fg_release(m), fg_release(s), fg_release(dp[i]);
        loss = l;
    }
    cr_assert_eq(fg_backward(loss, NULL), FG_OK, "%s: %s", c->name, fg_last_error());
    r.cg = fg_retain(xb->grad);
    fg_release(loss), fg_release(xa), fg_release(xb), fg_release(dout), fg_release(x64), fg_release(d64);
    return r;
}

static void both_free(both_run *r) {
    fg_release(r->fo), fg_release(r->fg), fg_release(r->cg);
    for (int i = 0; i < 3; i++) fg_release(r->co[i]);
}

static void check_against_composition(fg_dtype dt, double tol) {
    for (size_t n = 0; n < N_CASES; n++) {
        const qkv_case *c = &cases[n];
        both_run r = run_both(c, dt, 100 * n + 1);
        const int64_t c0[3] = {0, c->H * c->D, (c->H + c->K) * c->D}, nh[3] = {c->H, c->K, c->K};
        for (int i = 0; i < 3; i++) {
            fg_tensor *part = heads(c, r.fo, c0[i], nh[i]);
            char what[160];
            snprintf(what, sizeof what, "%s %s: %c", c->name, fg_dtype_name(dt), "qkv"[i]);
            FGT_ASSERT_CLOSE(part, r.co[i], tol, tol, what);
            fg_release(part);
        }
        char what[160];
        snprintf(what, sizeof what, "%s %s: the gradient of qkv", c->name, fg_dtype_name(dt));
        FGT_ASSERT_CLOSE(r.fg, r.cg, tol, tol, what);
        both_free(&r);
    }
}

Test(rope_qkv, float64_matches_the_composition_values_and_gradients) { check_against_composition(FG_F64, 1e-12); }

Test(rope_qkv, float32_matches_the_composition_values_and_gradients) { check_against_composition(FG_F32, 1e-6); }

/* The kernels evaluate the composition's expressions in its order: with the default build (no
 * contraction into fused multiply-adds), the results agree to the last bit, which keeps the
 * models' losses what they were before the fusion. */
Test(rope_qkv, float32_equals_the_composition_bit_for_bit) {
    for (size_t n = 0; n < N_CASES; n++) {
        const qkv_case *c = &cases[n];
        both_run r = run_both(c, FG_F32, 100 * n + 7);
        const int64_t c0[3] = {0, c->H * c->D, (c->H + c->K) * c->D}, nh[3] = {c->H, c->K, c->K};
        for (int i = 0; i < 3; i++) {
            fg_tensor *part = heads(c, r.fo, c0[i], nh[i]);
            FGT_ASSERT_CLOSE(part, r.co[i], 0, 0, c->name);
            fg_release(part);
        }
        FGT_ASSERT_CLOSE(r.fg, r.cg, 0, 0, c->name);
        both_free(&r);
    }
}

Test(rope_qkv, backward_matches_numeric) {
    for (size_t n = 0; n < N_CASES; n++) {
        const qkv_case *c = &cases[n];
        fg_tensor *x = fgt_uniform(FG_F64, 3, (int64_t[]){c->B, c->T, width(c)}, -2, 2, 100 * n + 3);
        fg_set_requires_grad(x, 1);
        FGT_GRADCHECK(c->name, fused_fn, &x, 1, (void *)c);
        fg_release(x);
    }
}

Test(rope_qkv, backward_accumulates_into_existing_gradients) {
    for (size_t n = 0; n < N_CASES; n++) {
        const qkv_case *c = &cases[n];
        const int64_t shape[3] = {c->B, c->T, width(c)};
        fg_tensor *x = fgt_uniform(FG_F64, 3, shape, -2, 2, 100 * n + 5), *d = fgt_rand(FG_F64, 3, shape, 100 * n + 6);
        fg_set_requires_grad(x, 1);
        const fg_rope_qkv_opts o = opts_of(c);
        fg_tensor *y = fgt_ok(fg_rope_qkv(x, &o), c->name);
        cr_assert_eq(fg_backward(y, d), FG_OK, "%s", fg_last_error());
        fg_tensor *first = fgt_ok(fg_to(x->grad, FG_CPU, FG_F64), "copy"), *y2 = fgt_ok(fg_rope_qkv(x, &o), c->name);
        cr_assert_eq(fg_backward(y2, d), FG_OK, "%s", fg_last_error());
        fg_tensor *twice = fgt_ok(fg_mul_scalar(first, 2.0), "2 g");
        FGT_ASSERT_CLOSE(x->grad, twice, 1e-14, 1e-13, c->name);
        fg_release(twice), fg_release(first), fg_release(y), fg_release(y2), fg_release(x), fg_release(d);
    }
}

/* The rows go over the thread pool: 1, 2 and 3 threads give the same bits, values and gradients. */
Test(rope_qkv, threads_do_not_change_the_bits) {
    const qkv_case c = {"nanochat rope + norm GQA 2x70 H4 K2 D16", 2, 70, 4, 2, 16, -1, 1, 10000, 0, 1e-6};
    fg_tensor *ref[2] = {0};
    for (int threads = 1; threads <= 3; threads++) {
        fg_pool_set_threads(threads);
        both_run r = run_both(&c, FG_F32, 21);
        if (threads == 1) {
            ref[0] = fg_retain(r.fo), ref[1] = fg_retain(r.fg);
        } else {
            FGT_ASSERT_CLOSE(r.fo, ref[0], 0, 0, "output");
            FGT_ASSERT_CLOSE(r.fg, ref[1], 0, 0, "gradient");
        }
        both_free(&r);
    }
    fg_release(ref[0]), fg_release(ref[1]);
    fg_pool_set_threads(0);
}

/* A strided qkv (a transposed view) is read as its values. */
Test(rope_qkv, a_strided_input_gives_the_contiguous_result) {
    const qkv_case *c = &cases[4];
    fg_tensor *base = fgt_uniform(FG_F64, 3, (int64_t[]){c->T, c->B, width(c)}, -2, 2, 11);
    fg_tensor *x = fgt_ok(fg_view_transpose(base, 0, 1), "transpose"), *xc = fgt_ok(fg_contiguous(x), "contiguous");
    const fg_rope_qkv_opts o = opts_of(c);
    fg_tensor *a = fgt_ok(fg_rope_qkv(x, &o), "strided"), *b = fgt_ok(fg_rope_qkv(xc, &o), "contiguous");
    FGT_ASSERT_CLOSE(a, b, 0, 0, "strided vs contiguous");
    fg_release(a), fg_release(b), fg_release(x), fg_release(xc), fg_release(base);
}

typedef struct {
    const char *name;
    int64_t shape[3];
    int ndim;
    fg_rope_qkv_opts o;
    fg_status want;
    const char *says;
} error_case;

static const error_case error_cases[] = {
    {"2-D qkv", {4, 12}, 2, {.n_head = 2, .rotary = 1, .theta = 1e4}, FG_ERR_SHAPE, "(B, T, (H + 2 H_kv) D)"},
    {"width not H + 2K heads",
     {1, 2, 13},
     3,
     {.n_head = 2, .n_kv_heads = 1, .rotary = 1, .theta = 1e4},
     FG_ERR_SHAPE,
     "does not split"},
    {"n_head 0", {1, 2, 12}, 3, {.n_head = 0, .rotary = 1, .theta = 1e4}, FG_ERR_ARG, "n_head"},
    {"n_kv_heads < 0",
     {1, 2, 12},
     3,
     {.n_head = 2, .n_kv_heads = -1, .rotary = 1, .theta = 1e4},
     FG_ERR_ARG,
     "n_kv_heads"},
    {"odd D with rotary", {1, 2, 9}, 3, {.n_head = 1, .rotary = 1, .theta = 1e4}, FG_ERR_SHAPE, "odd head dim"},
    {"rotary 2", {1, 2, 12}, 3, {.n_head = 2, .rotary = 2, .theta = 1e4}, FG_ERR_ARG, "rotary"},
    {"theta 0", {1, 2, 12}, 3, {.n_head = 2, .rotary = 1, .theta = 0}, FG_ERR_ARG, "theta"},
    {"theta inf", {1, 2, 12}, 3, {.n_head = 2, .rotary = -1, .theta = INFINITY}, FG_ERR_ARG, "theta"},
    {"pos0 < 0", {1, 2, 12}, 3, {.n_head = 2, .rotary = 1, .theta = 1e4, .pos0 = -1}, FG_ERR_ARG, "pos0"},
    {"qk_norm 2", {1, 2, 12}, 3, {.n_head = 2, .qk_norm = 2, .eps = 1e-6}, FG_ERR_ARG, "qk_norm"},
    {"eps 0", {1, 2, 12}, 3, {.n_head = 2, .qk_norm = 1, .eps = 0}, FG_ERR_ARG, "eps"},
    {"eps NaN", {1, 2, 12}, 3, {.n_head = 2, .qk_norm = 1, .eps = NAN}, FG_ERR_ARG, "eps"},
};

Test(rope_qkv, each_bad_argument_is_refused_with_a_message_naming_the_op) {
    for (size_t n = 0; n < sizeof error_cases / sizeof error_cases[0]; n++) {
        const error_case *e = &error_cases[n];
        fg_tensor *x = fgt_rand(FG_F64, e->ndim, e->shape, n + 1);
        fg_tensor *y = fg_rope_qkv(x, &e->o);
        cr_expect_null(y, "%s: accepted", e->name);
        cr_expect_eq(fg_last_status(), e->want, "%s: status %d, want %d (%s)", e->name, (int)fg_last_status(),
                     (int)e->want, fg_last_error());
        cr_expect(strstr(fg_last_error(), "rope_qkv") && strstr(fg_last_error(), e->says),
                  "%s: message \"%s\" lacks rope_qkv or %s", e->name, fg_last_error(), e->says);
        fg_release(y), fg_release(x);
    }
    const fg_rope_qkv_opts o = {.n_head = 1};
    cr_expect_null(fg_rope_qkv(NULL, &o));
    fg_tensor *x = fgt_rand(FG_F64, FGT_DIMS(1, 1, 3), 1);
    cr_expect_null(fg_rope_qkv(x, NULL));
    fg_release(x);
}

/* No CUDA kernels: a cuda tensor is refused with "op X: not supported on cuda". */
Test(rope_qkv, cuda_tensors_are_refused) {
    const char *what = "rope_qkv refusing cuda tensors";
    if (!fg_device_built(FG_CUDA)) fgt_skip(what, "this build has no CUDA device (make cuda)");
    if (fg_device_start(FG_CUDA) != FG_OK) fgt_skip(what, fg_last_error());
    fg_tensor *h = fgt_rand(FG_F32, FGT_DIMS(1, 2, 12), 1);
    fg_tensor *x = fgt_ok(fg_to(h, FG_CUDA, FG_F32), "to cuda");
    const fg_rope_qkv_opts o = {.n_head = 2, .rotary = 1, .theta = 1e4};
    fg_tensor *y = fg_rope_qkv(x, &o);
    cr_expect_null(y);
    cr_expect_eq(fg_last_status(), FG_ERR_DEVICE, "%s", fg_last_error());
    cr_expect(strstr(fg_last_error(), "not supported on cuda"), "%s", fg_last_error());
    fg_release(y), fg_release(x), fg_release(h);
}
