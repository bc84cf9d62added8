/* test_ops_nn.c — the GPT's layer ops: embedding, layernorm, gelu, softmax, cross_entropy, dropout.
 * Forward against naive loops or known values, gradients against finite differences, float32
 * against float64, and each op's special cases (ignored targets, masked rows, the dropout mask). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tensor/philox.h"
#include "tests/common.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}
TestSuite(embedding, .fini = leak_check, .timeout = 120);
TestSuite(layernorm, .fini = leak_check, .timeout = 120);
TestSuite(gelu, .fini = leak_check, .timeout = 120);
TestSuite(softmax, .fini = leak_check, .timeout = 120);
TestSuite(cross_entropy, .fini = leak_check, .timeout = 120);
TestSuite(dropout, .fini = leak_check, .timeout = 120);

/* A strided (2-D transposed) view of a fresh (cols, rows) tensor, shape (rows, cols). */
static fg_tensor *transposed_rand(fg_dtype dt, int64_t rows, int64_t cols, uint64_t seed) {
    fg_tensor *base = fgt_rand(dt, FGT_DIMS(cols, rows), seed);
    fg_tensor *v = fgt_ok(fg_view_transpose(base, 0, 1), "transpose");
    fg_release(base);
    return v;
}

/* ============================================================================================
 * embedding
 * ============================================================================================ */

typedef struct {
    const int32_t *idx;
    int ndim;
    const int64_t *shape;
} emb_arg;
static fg_tensor *embedding_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    const emb_arg *e = user;
    return fg_embedding(in[0], e->idx, e->ndim, e->shape);
}

Test(embedding, forward_copies_the_rows_of_the_ids) {
    fg_tensor *w = fgt_rand(FG_F64, FGT_DIMS(7, 5), 1);
    const int32_t idx[6] = {3, 0, 6, 3, 3, 1};
    fg_tensor *out = fgt_ok(fg_embedding(w, idx, FGT_DIMS(2, 3)), "embedding");
    cr_assert(out->ndim == 3 && out->shape[0] == 2 && out->shape[1] == 3 && out->shape[2] == 5, "shape (2, 3, 5)");
    double ref[30];
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 5; c++) ref[r * 5 + c] = fg_get(w, idx[r] * 5 + c);
    FGT_ASSERT_CLOSE_BUF(out, ref, 30, 0, 0, "embedding rows");
    fg_release(out);
    /* a 0-d index gives one row of shape (C) */
    out = fgt_ok(fg_embedding(w, idx + 2, 0, NULL), "embedding 0-d");
    cr_assert(out->ndim == 1 && out->shape[0] == 5, "0-d index gives (C)");
    FGT_ASSERT_CLOSE_BUF(out, ref + 10, 5, 0, 0, "0-d row");
    fg_release(out), fg_release(w);
}

Test(embedding, backward_scatter_adds_repeated_ids) {
    fg_tensor *w = fgt_leaf(FG_F64, FGT_DIMS(4, 3), 1);
    const int32_t idx[5] = {2, 2, 0, 2, 3};
    fg_tensor *out = fgt_ok(fg_embedding(w, idx, FGT_DIMS(5)), "embedding");
    fg_tensor *dy = fgt_rand(FG_F64, FGT_DIMS(5, 3), 2);
    cr_assert_eq(fg_backward(out, dy), FG_OK, "%s", fg_last_error());
    double want[12] = {0};
    for (int r = 0; r < 5; r++)
        for (int c = 0; c < 3; c++) want[idx[r] * 3 + c] += fg_get(dy, r * 3 + c);
    FGT_ASSERT_CLOSE_BUF(w->grad, want, 12, 1e-15, 0, "dweight");
    fg_release(out), fg_release(dy), fg_release(w);
}

Test(embedding, backward_matches_numeric) {
    const int32_t idx[12] = {0, 4, 4, 1, 8, 0, 4, 2, 2, 7, 8, 8};
    emb_arg cases[] = {
        {idx, 2, (const int64_t[]){3, 4}}, {idx, 1, (const int64_t[]){1}}, {idx + 1, 1, (const int64_t[]){11}}};
    fg_tensor *weights[] = {fgt_leaf(FG_F64, FGT_DIMS(9, 5), 1), fgt_leaf(FG_F64, FGT_DIMS(9, 1), 2), NULL};
    fg_tensor *wt = transposed_rand(FG_F64, 9, 3, 3); /* weight rows with non-unit stride: copied */
    fg_set_requires_grad(wt, 1);
    weights[2] = wt;
    for (int k = 0; k < 3; k++) FGT_GRADCHECK("embedding", embedding_fn, &weights[k], 1, &cases[k]);
    for (int k = 0; k < 3; k++) fg_release(weights[k]);
}

Test(embedding, float32_equals_float64_exactly) {
    fg_tensor *w = fgt_rand(FG_F64, FGT_DIMS(6, 4), 1), *w32 = fgt_ok(fg_to(w, FG_CPU, FG_F32), "to");
    const int32_t idx[3] = {5, 0, 5};
    fg_tensor *o64 = fgt_ok(fg_embedding(w, idx, FGT_DIMS(3)), "f64"),
              *o32 = fgt_ok(fg_embedding(w32, idx, FGT_DIMS(3)), "f32");
    FGT_ASSERT_CLOSE(o32, o64, 1e-7, 1e-7, "embedding f32");
    fg_release(o64), fg_release(o32), fg_release(w), fg_release(w32);
}

/* ============================================================================================
 * layernorm
 * ============================================================================================ */

typedef struct {
    int has_w, has_b;
    double eps;
} ln_arg;
static fg_tensor *layernorm_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    const ln_arg *a = user;
    return fg_layernorm(in[0], a->has_w ? in[1] : NULL, a->has_b ? in[2] : NULL, a->eps);
}

static double *ref_layernorm(const fg_tensor *x, const fg_tensor *w, const fg_tensor *b, double eps) {
    int64_t C = x->shape[x->ndim - 1], R = fg_numel(x) / C;
    double *out = malloc((size_t)(R * C) * sizeof *out);
    for (int64_t r = 0; r < R; r++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < C; i++) m += fg_get(x, r * C + i);
        m /= (double)C;
        for (int64_t i = 0; i < C; i++) v += (fg_get(x, r * C + i) - m) * (fg_get(x, r * C + i) - m);
        v /= (double)C;
        for (int64_t i = 0; i < C; i++)
            out[r * C + i] =
                (fg_get(x, r * C + i) - m) / sqrt(v + eps) * (w ? fg_get(w, i) : 1.0) + (b ? fg_get(b, i) : 0.0);
    }
    return out;
}

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[3];
    int strided;
    ln_arg arg;
} ln_case;
static const ln_case ln_cases[] = {
    {"3x7", 2, {3, 7}, 0, {1, 1, 1e-5}},       {"2x3x5", 3, {2, 3, 5}, 0, {1, 1, 1e-5}},
    {"1x1", 2, {1, 1}, 0, {1, 1, 1e-5}},       {"weight_only", 2, {4, 9}, 0, {1, 0, 1e-5}},
    {"bias_only", 2, {4, 9}, 0, {0, 1, 1e-5}}, {"neither", 1, {6}, 0, {0, 0, 1e-3}},
    {"strided_x", 2, {5, 6}, 1, {1, 1, 1e-5}},
};

static void ln_inputs(const ln_case *lc, fg_dtype dt, uint64_t seed, fg_tensor **in) {
    int64_t C = lc->shape[lc->ndim - 1];
    in[0] =
        lc->strided ? transposed_rand(dt, lc->shape[0], lc->shape[1], seed) : fgt_rand(dt, lc->ndim, lc->shape, seed);
    in[1] = fgt_uniform(dt, 1, &C, 0.5, 1.5, seed + 1);
    in[2] = fgt_rand(dt, 1, &C, seed + 2);
}

Test(layernorm, forward_matches_naive_loops) {
    for (size_t c = 0; c < sizeof ln_cases / sizeof ln_cases[0]; c++) {
        const ln_case *lc = &ln_cases[c];
        fg_tensor *in[3];
        ln_inputs(lc, FG_F64, 10 * c, in);
        fg_tensor *out = fgt_ok(layernorm_fn(in, 3, (void *)&lc->arg), lc->name);
        double *ref = ref_layernorm(in[0], lc->arg.has_w ? in[1] : NULL, lc->arg.has_b ? in[2] : NULL, lc->arg.eps);
        FGT_ASSERT_CLOSE_BUF(out, ref, fg_numel(out), 1e-12, 1e-12, lc->name);
        free(ref);
        fg_release(out);
        for (int i = 0; i < 3; i++) fg_release(in[i]);
    }
}

Test(layernorm, backward_matches_numeric) {
    for (size_t c = 0; c < sizeof ln_cases / sizeof ln_cases[0]; c++) {
        const ln_case *lc = &ln_cases[c];
        fg_tensor *in[3];
        ln_inputs(lc, FG_F64, 10 * c, in);
        fg_set_requires_grad(in[0], 1);
        if (lc->arg.has_w) fg_set_requires_grad(in[1], 1);
        if (lc->arg.has_b) fg_set_requires_grad(in[2], 1);
        char what[64];
        snprintf(what, sizeof what, "layernorm %s", lc->name);
        FGT_GRADCHECK(what, layernorm_fn, in, 3, (void *)&lc->arg);
        for (int i = 0; i < 3; i++) fg_release(in[i]);
    }
}

Test(layernorm, output_rows_have_zero_mean_and_unit_variance) {
    fg_tensor *x = fgt_uniform(FG_F64, FGT_DIMS(4, 33), -5, 20, 1);
    fg_tensor *out = fgt_ok(fg_layernorm(x, NULL, NULL, 0.0), "layernorm");
    for (int64_t r = 0; r < 4; r++) {
        double m = 0, v = 0;
        for (int64_t i = 0; i < 33; i++) m += fg_get(out, r * 33 + i) / 33;
        for (int64_t i = 0; i < 33; i++) v += (fg_get(out, r * 33 + i) - m) * (fg_get(out, r * 33 + i) - m) / 33;
        cr_assert(fabs(m) < 1e-14 && fabs(v - 1) < 1e-12, "row %lld: mean %g, variance %.17g", (long long)r, m, v);
    }
    fg_release(out), fg_release(x);
}

Test(layernorm, float32_agrees_with_float64) {
    for (size_t c = 0; c < sizeof ln_cases / sizeof ln_cases[0]; c++) {
        const ln_case *lc = &ln_cases[c];
        if (lc->shape[lc->ndim - 1] == 1) continue; /* var = 0: out = b exactly, eps dominates */
        fg_tensor *in[3], *in32[3];
        ln_inputs(lc, FG_F64, 10 * c, in);
        for (int i = 0; i < 3; i++) in32[i] = fgt_ok(fg_to(in[i], FG_CPU, FG_F32), "to");
        fg_tensor *o64 = fgt_ok(layernorm_fn(in, 3, (void *)&lc->arg), "f64");
        fg_tensor *o32 = fgt_ok(layernorm_fn(in32, 3, (void *)&lc->arg), "f32");
        FGT_ASSERT_CLOSE(o32, o64, 1e-5, 1e-5, lc->name);
        fg_release(o64), fg_release(o32);
        for (int i = 0; i < 3; i++) fg_release(in[i]), fg_release(in32[i]);
    }
}

/* ============================================================================================
 * gelu
 * ============================================================================================ */

static fg_tensor *gelu_fn(fg_tensor *const *in, int n, void *user) {
    (void)n, (void)user;
    return fg_gelu(in[0]);
}

Test(gelu, forward_matches_known_values_of_the_tanh_form) {
    /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))), evaluated in high precision */
    const double xs[8] = {-3, -1, -0.5, 0, 0.5, 1, 2, 3};
    const double want[8] = {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
                            0.34571400982514394,    0.8411919906082768,   1.954597694087775,    2.996362607918227};
    fg_tensor *x = fgt_from(FG_F64, FGT_DIMS(8), xs);
    fg_tensor *out = fgt_ok(fg_gelu(x), "gelu");
    FGT_ASSERT_CLOSE_BUF(out, want, 8, 1e-15, 1e-14, "gelu values");
    fg_release(out), fg_release(x);
}

Test(gelu, stays_within_1e_3_of_the_exact_erf_gelu) {
    fg_tensor *x = fgt_uniform(FG_F64, FGT_DIMS(1000), -4, 4, 1);
    fg_tensor *out = fgt_ok(fg_gelu(x), "gelu");
    double *ref = fgt_values(x);
    for (int k = 0; k < 1000; k++) ref[k] = 0.5 * ref[k] * (1 + erf(ref[k] / sqrt(2.0)));
    FGT_ASSERT_CLOSE_BUF(out, ref, 1000, 1e-3, 0, "tanh gelu vs erf gelu");
    free(ref);
    fg_release(out), fg_release(x);
}

Test(gelu, backward_matches_numeric) {
    fg_tensor *xs[3] = {fgt_uniform(FG_F64, FGT_DIMS(3, 7), -4, 4, 1), fgt_uniform(FG_F64, FGT_DIMS(1), -4, 4, 2),
                        transposed_rand(FG_F64, 5, 3, 3)};
    for (int k = 0; k < 3; k++) {
        fg_set_requires_grad(xs[k], 1);
        FGT_GRADCHECK("gelu", gelu_fn, &xs[k], 1, NULL);
        fg_release(xs[k]);
    }
}

Test(gelu, float32_agrees_with_float64) {
    fg_tensor *x = fgt_uniform(FG_F64, FGT_DIMS(17, 33), -6, 6, 1), *x32 = fgt_ok(fg_to(x, FG_CPU, FG_F32), "to");
    fg_tensor *o64 = fgt_ok(fg_gelu(x), "f64"), *o32 = fgt_ok(fg_gelu(x32), "f32");
    FGT_ASSERT_CLOSE(o32, o64, 1e-6, 1e-6, "gelu f32");
    fg_release(o64), fg_release(o32), fg_release(x), fg_release(x32);
}

/* ============================================================================================
 * softmax
 * ============================================================================================ */

static fg_tensor *softmax_fn(fg_tensor *const *in, int n, void *user) {
    (void)n, (void)user;
    return fg_softmax(in[0]);
}

static double *ref_softmax(const fg_tensor *x) {
    int64_t C = x->shape[x->ndim - 1], R = fg_numel(x) / C;
    double *out = malloc((size_t)(R * C) * sizeof *out);
    for (int64_t r = 0; r < R; r++) {
        double s = 0;
        for (int64_t i = 0; i < C; i++) s += exp(fg_get(x, r * C + i));
        for (int64_t i = 0; i < C; i++) out[r * C + i] = exp(fg_get(x, r * C + i)) / s;
    }
    return out;
}

Test(softmax, forward_matches_naive_loops) {
    fg_tensor *xs[4] = {fgt_uniform(FG_F64, FGT_DIMS(3, 7), -3, 3, 1), fgt_rand(FG_F64, FGT_DIMS(2, 2, 9), 2),
                        fgt_rand(FG_F64, FGT_DIMS(1), 3), transposed_rand(FG_F64, 4, 5, 4)};
    for (int k = 0; k < 4; k++) {
        fg_tensor *out = fgt_ok(fg_softmax(xs[k]), "softmax");
        double *ref = ref_softmax(xs[k]);
        FGT_ASSERT_CLOSE_BUF(out, ref, fg_numel(out), 1e-15, 1e-13, "softmax");
        free(ref);
        fg_release(out);
        fg_release(xs[k]);
    }
}

Test(softmax, large_inputs_stay_finite_and_are_shift_invariant) {
    fg_tensor *x = fgt_uniform(FG_F32, FGT_DIMS(3, 10), -2, 2, 1);
    fg_tensor *big = fgt_ok(fg_add_scalar(x, 1000.0), "add_scalar");
    fg_tensor *a = fgt_ok(fg_softmax(x), "softmax"), *b = fgt_ok(fg_softmax(big), "softmax");
    FGT_ASSERT_CLOSE(b, a, 1e-4, 1e-3, "softmax(x + 1000) = softmax(x)");
    fg_release(a), fg_release(b), fg_release(big), fg_release(x);
}

Test(softmax, a_fully_masked_row_is_zero_with_zero_gradient) {
    const double v[6] = {-INFINITY, -INFINITY, -INFINITY, 0.5, -INFINITY, 1.0};
    fg_tensor *x = fgt_from(FG_F64, FGT_DIMS(2, 3), v);
    fg_set_requires_grad(x, 1);
    fg_tensor *out = fgt_ok(fg_softmax(x), "softmax");
    double e = exp(-0.5), want[6] = {0, 0, 0, 1 / (1 + e) * e, 0, 1 / (1 + e)};
    FGT_ASSERT_CLOSE_BUF(out, want, 6, 1e-15, 1e-14, "masked softmax");
    fg_tensor *dy = fgt_rand(FG_F64, FGT_DIMS(2, 3), 5);
    cr_assert_eq(fg_backward(out, dy), FG_OK, "%s", fg_last_error());
    for (int k = 0; k < 3; k++)
        cr_assert_eq(fg_get(x->grad, k), 0.0, "masked row gradient %d: %g", k, fg_get(x->grad, k));
    cr_assert_eq(fg_get(x->grad, 4), 0.0, "a -inf entry gets no gradient");
    fg_release(dy), fg_release(out), fg_release(x);
}

Test(softmax, backward_matches_numeric) {
    fg_tensor *xs[4] = {fgt_uniform(FG_F64, FGT_DIMS(3, 7), -3, 3, 1), fgt_rand(FG_F64, FGT_DIMS(2, 2, 9), 2),
                        fgt_rand(FG_F64, FGT_DIMS(1, 1), 3), transposed_rand(FG_F64, 4, 5, 4)};
    for (int k = 0; k < 4; k++) {
        fg_set_requires_grad(xs[k], 1);
        FGT_GRADCHECK("softmax", softmax_fn, &xs[k], 1, NULL);
        fg_release(xs[k]);
    }
}

Test(softmax, float32_agrees_with_float64) {
    fg_tensor *x = fgt_uniform(FG_F64, FGT_DIMS(9, 65), -8, 8, 1), *x32 = fgt_ok(fg_to(x, FG_CPU, FG_F32), "to");
    fg_tensor *o64 = fgt_ok(fg_softmax(x), "f64"), *o32 = fgt_ok(fg_softmax(x32), "f32");
    FGT_ASSERT_CLOSE(o32, o64, 1e-7, 1e-5, "softmax f32");
    fg_release(o64), fg_release(o32), fg_release(x), fg_release(x32);
}

/* ============================================================================================
 * cross_entropy
 * ============================================================================================ */

static fg_tensor *ce_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    return fg_cross_entropy(in[0], user);
}

/* mean over counted rows of -log softmax(x_r)[t_r], from scratch */
static double ref_ce(const fg_tensor *x, const int32_t *t) {
    int64_t V = x->shape[x->ndim - 1], R = fg_numel(x) / V, count = 0;
    double total = 0;
    for (int64_t r = 0; r < R; r++) {
        if (t[r] < 0) continue;
        double s = 0;
        for (int64_t j = 0; j < V; j++) s += exp(fg_get(x, r * V + j));
        total += log(s) - fg_get(x, r * V + t[r]);
        count++;
    }
    return count ? total / (double)count : 0.0;
}

Test(cross_entropy, forward_matches_naive_loops) {
    const int32_t t[8] = {3, 0, -1, 6, 6, 1, -1, 2};
    fg_tensor *xs[3] = {fgt_uniform(FG_F64, FGT_DIMS(2, 4, 7), -3, 3, 1), fgt_rand(FG_F64, FGT_DIMS(1, 1), 2),
                        transposed_rand(FG_F64, 5, 7, 3)};
    const int32_t zero = 0;
    const int32_t *ts[3] = {t, &zero, t};
    for (int k = 0; k < 3; k++) {
        fg_tensor *loss = fgt_ok(fg_cross_entropy(xs[k], ts[k]), "cross_entropy");
        cr_assert(loss->ndim == 1 && loss->shape[0] == 1, "loss shape (1)");
        double want = ref_ce(xs[k], ts[k]);
        FGT_ASSERT_CLOSE_BUF(loss, &want, 1, 1e-14, 1e-13, "cross_entropy");
        fg_release(loss), fg_release(xs[k]);
    }
}

Test(cross_entropy, backward_matches_numeric_with_ignored_rows) {
    const int32_t t[8] = {3, 0, -1, 6, 6, 1, -1, 2};
    fg_tensor *xs[3] = {fgt_uniform(FG_F64, FGT_DIMS(2, 4, 7), -3, 3, 1), fgt_rand(FG_F64, FGT_DIMS(1, 1), 2),
                        transposed_rand(FG_F64, 5, 7, 3)};
    const int32_t zero = 0;
    const int32_t *ts[3] = {t, &zero, t};
    for (int k = 0; k < 3; k++) {
        fg_set_requires_grad(xs[k], 1);
        FGT_GRADCHECK("cross_entropy", ce_fn, &xs[k], 1, (void *)ts[k]);
        /* rows with target -1 get exactly zero gradient */
        int64_t V = xs[k]->shape[xs[k]->ndim - 1];
        for (int64_t r = 0; r < fg_numel(xs[k]) / V; r++)
            if (ts[k][r] < 0)
                for (int64_t j = 0; j < V; j++)
                    cr_assert_eq(fg_get(xs[k]->grad, r * V + j), 0.0, "ignored row %lld has a gradient", (long long)r);
        fg_release(xs[k]);
    }
}

Test(cross_entropy, all_rows_ignored_gives_zero_loss_and_zero_gradient) {
    const int32_t t[3] = {-1, -1, -1};
    fg_tensor *x = fgt_leaf(FG_F64, FGT_DIMS(3, 4), 1);
    fg_tensor *loss = fgt_ok(fg_cross_entropy(x, t), "cross_entropy");
    cr_assert_eq(fg_get(loss, 0), 0.0, "loss %g, want 0", fg_get(loss, 0));
    cr_assert_eq(fg_backward(loss, NULL), FG_OK, "%s", fg_last_error());
    double zeros[12] = {0};
    if (x->grad) FGT_ASSERT_CLOSE_BUF(x->grad, zeros, 12, 0, 0, "gradient of an all-ignored batch");
    fg_release(loss), fg_release(x);
}

Test(cross_entropy, huge_logits_stay_finite_in_float32) {
    const double v[4] = {1e4, -1e4, 5e3, 1e4 - 2};
    fg_tensor *x = fgt_from(FG_F32, FGT_DIMS(2, 2), v);
    fg_set_requires_grad(x, 1);
    const int32_t t[2] = {1, 0};
    fg_tensor *loss = fgt_ok(fg_cross_entropy(x, t), "cross_entropy");
    /* row 0: x = (1e4, -1e4), target 1: lse = 1e4, loss 2e4.
     * row 1: x = (5e3, 1e4 - 2), target 0: lse = 1e4 - 2 + log(1 + e^(5e3 - 1e4 + 2)), loss lse - 5e3 */
    double l0 = 2e4, l1 = (1e4 - 2) + log1p(exp(5e3 - (1e4 - 2))) - 5e3;
    double want = (l0 + l1) / 2;
    FGT_ASSERT_CLOSE_BUF(loss, &want, 1, 0, 1e-6, "huge logits");
    cr_assert_eq(fg_backward(loss, NULL), FG_OK, "%s", fg_last_error());
    for (int k = 0; k < 4; k++) cr_assert(isfinite(fg_get(x->grad, k)), "gradient %d is %g", k, fg_get(x->grad, k));
    fg_release(loss), fg_release(x);
}

Test(cross_entropy, float32_agrees_with_float64) {
    int32_t t[64];
    for (int r = 0; r < 64; r++) t[r] = (r * 37) % 50 - (r % 9 == 0);
    fg_tensor *x = fgt_uniform(FG_F64, FGT_DIMS(64, 50), -5, 5, 1), *x32 = fgt_ok(fg_to(x, FG_CPU, FG_F32), "to");
    fg_tensor *o64 = fgt_ok(fg_cross_entropy(x, t), "f64"), *o32 = fgt_ok(fg_cross_entropy(x32, t), "f32");
    FGT_ASSERT_CLOSE(o32, o64, 1e-6, 1e-6, "cross_entropy f32");
    fg_release(o64), fg_release(o32), fg_release(x), fg_release(x32);
}

/* The fused op equals the composition it replaces: mean over rows of -(log softmax)[target]. */
Test(cross_entropy, gradient_equals_softmax_minus_onehot_over_count) {
    const int32_t t[4] = {2, -1, 0, 4};
    fg_tensor *x = fgt_leaf(FG_F64, FGT_DIMS(4, 5), 1);
    fg_tensor *loss = fgt_ok(fg_cross_entropy(x, t), "cross_entropy");
    cr_assert_eq(fg_backward(loss, NULL), FG_OK, "%s", fg_last_error());
    fg_tensor *p = fgt_ok(fg_softmax(x), "softmax");
    double want[20];
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 5; j++) want[r * 5 + j] = t[r] < 0 ? 0.0 : (fg_get(p, r * 5 + j) - (j == t[r])) / 3.0;
    FGT_ASSERT_CLOSE_BUF(x->grad, want, 20, 1e-15, 1e-13, "softmax - onehot");
    fg_release(p), fg_release(loss), fg_release(x);
}

/* ============================================================================================
 * dropout
 * ============================================================================================ */

typedef struct {
    double p;
    uint64_t seed, stream;
} drop_arg;
static fg_tensor *dropout_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    const drop_arg *d = user;
    return fg_dropout(in[0], d->p, d->seed, d->stream);
}

Test(dropout, kept_fraction_is_within_5_sigma_of_1_minus_p) {
    int64_t n = fgt_sanitize() ? 50000 : 400000;
    fg_tensor *x = fgt_ok(fg_ones(FG_F32, FG_CPU, 1, &n), "ones");
    const double ps[3] = {0.1, 0.5, 0.9};
    for (int k = 0; k < 3; k++) {
        fg_tensor *out = fgt_ok(fg_dropout(x, ps[k], 1234, 7), "dropout");
        const float *o = fg_data(out);
        int64_t kept = 0;
        float scale = (float)(1.0 / (1.0 - ps[k]));
        for (int64_t i = 0; i < n; i++) {
            cr_assert(o[i] == 0.0f || o[i] == scale, "element %lld is %g: neither 0 nor 1/(1-p) = %g", (long long)i,
                      o[i], scale);
            kept += o[i] != 0.0f;
        }
        double mean = n * (1 - ps[k]), sigma = sqrt(n * ps[k] * (1 - ps[k]));
        cr_assert(fabs(kept - mean) < 5 * sigma, "p = %g: kept %lld of %lld, expected %.0f +- %.0f", ps[k],
                  (long long)kept, (long long)n, mean, 5 * sigma);
        fg_release(out);
    }
    fg_release(x);
}

Test(dropout, p_zero_is_the_identity) {
    fg_tensor *x = fgt_leaf(FG_F64, FGT_DIMS(3, 4), 1);
    fg_tensor *out = fgt_ok(fg_dropout(x, 0.0, 1, 2), "dropout");
    cr_assert_eq(out, x, "p = 0 must return x itself");
    fg_tensor *ones = fgt_ok(fg_ones(FG_F64, FG_CPU, FGT_DIMS(3, 4)), "ones");
    cr_assert_eq(fg_backward(out, ones), FG_OK, "%s", fg_last_error());
    FGT_ASSERT_CLOSE(x->grad, ones, 0, 0, "the gradient through p = 0 passes unchanged");
    fg_release(ones), fg_release(out), fg_release(x);
}

Test(dropout, mask_follows_philox_and_the_backward_uses_the_same_mask) {
    const double p = 0.3;
    const uint64_t seed = 99, stream = 5;
    fg_tensor *base = fgt_uniform(FG_F64, FGT_DIMS(7, 6), 0.5, 1.0, 1); /* nonzero, so 0 means dropped */
    fg_tensor *x = fgt_ok(fg_view_transpose(base, 0, 1), "t");          /* (6, 7), strided */
    fg_set_requires_grad(x, 1);
    fg_tensor *out = fgt_ok(fg_dropout(x, p, seed, stream), "dropout");
    fg_tensor *dy = fgt_rand(FG_F64, FGT_DIMS(6, 7), 2);
    cr_assert_eq(fg_backward(out, dy), FG_OK, "%s", fg_last_error());
    uint32_t thr = fg_dropout_threshold(p);
    double scale = 1.0 / (1.0 - p);
    for (int64_t k = 0; k < 42; k++) {
        int keep = fg_philox_u32(seed, stream, (uint64_t)k) >= thr;
        double o = fg_get(out, k), g = fg_get(x->grad, k);
        cr_assert_eq(o, keep ? fg_get(x, k) * scale : 0.0, "forward element %lld: %g (keep %d)", (long long)k, o, keep);
        cr_assert_eq(g, keep ? fg_get(dy, k) * scale : 0.0, "backward element %lld: %g (keep %d)", (long long)k, g,
                     keep);
    }
    fg_release(dy), fg_release(out), fg_release(x), fg_release(base);
}

Test(dropout, different_seeds_and_streams_give_different_masks) {
    fg_tensor *x = fgt_ok(fg_ones(FG_F64, FG_CPU, FGT_DIMS(256)), "ones");
    fg_tensor *a = fgt_ok(fg_dropout(x, 0.5, 1, 0), "d"), *b = fgt_ok(fg_dropout(x, 0.5, 1, 0), "d");
    fg_tensor *c = fgt_ok(fg_dropout(x, 0.5, 2, 0), "d"), *d = fgt_ok(fg_dropout(x, 0.5, 1, 1), "d");
    FGT_ASSERT_CLOSE(a, b, 0, 0, "same seed and stream");
    cr_assert_gt(fgt_compare(a, c, 0, 0).n_bad, 0, "seed 1 and seed 2 gave the same mask");
    cr_assert_gt(fgt_compare(a, d, 0, 0).n_bad, 0, "stream 0 and stream 1 gave the same mask");
    fg_release(a), fg_release(b), fg_release(c), fg_release(d), fg_release(x);
}

Test(dropout, backward_matches_numeric) {
    const drop_arg args[3] = {{0.25, 3, 0}, {0.5, 4, 1}, {0.9, 5, 2}};
    fg_tensor *xs[3] = {fgt_rand(FG_F64, FGT_DIMS(5, 7), 1), fgt_rand(FG_F64, FGT_DIMS(1), 2),
                        transposed_rand(FG_F64, 4, 9, 3)};
    for (int k = 0; k < 3; k++) {
        fg_set_requires_grad(xs[k], 1);
        FGT_GRADCHECK("dropout", dropout_fn, &xs[k], 1, (void *)&args[k]);
        fg_release(xs[k]);
    }
}

Test(dropout, float32_and_float64_drop_the_same_elements) {
    fg_tensor *x = fgt_uniform(FG_F64, FGT_DIMS(33, 17), 0.5, 1, 1), *x32 = fgt_ok(fg_to(x, FG_CPU, FG_F32), "to");
    fg_tensor *o64 = fgt_ok(fg_dropout(x, 0.4, 8, 9), "f64"), *o32 = fgt_ok(fg_dropout(x32, 0.4, 8, 9), "f32");
    FGT_ASSERT_CLOSE(o32, o64, 1e-6, 1e-6, "dropout f32");
    fg_release(o64), fg_release(o32), fg_release(x), fg_release(x32);
}
