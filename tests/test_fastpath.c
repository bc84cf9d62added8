/* test_fastpath.c — the float32 fast paths of the non-matmul ops (ops/cpu/vmath.h): gelu, layernorm,
 * cross-entropy, the element-wise ops, gradient accumulation through views, contiguous copies,
 * the embedding's backward, and the optimizer (gradient norm, clipping, AdamW).
 *
 * Each op is checked twice:
 *   - against a plain double-precision loop written here (tolerances a few float32 ulps, or what
 *     a float32 sum of that length can lose), with gradients added into buffers that start
 *     non-zero (backward rules add);
 *   - for the same bits on every SIMD level the CPU has (fg_simd_set) and on 1, 2 and 3 threads,
 *     with the parallel threshold at 0 so that every loop of two or more pieces goes to the pool.
 * Sizes are odd (not multiples of 16: vector tails) and span several pieces.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/threadpool.h"
#include "ops/cpu/vmath.h"
#include "ops/cpu/vphilox.h"
#include "tensor/philox.h"
#include "tests/common.h"
#include "train/adamw.h"
#include "train/gpt.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}
TestSuite(fastpath, .fini = leak_check, .timeout = 120);

/* ---------------------------------------------------------------------------------------------
 * helpers
 * ------------------------------------------------------------------------------------------- */

/* A float32 tensor of uniform values in (lo, hi]. */
static fg_tensor *uni(int ndim, const int64_t *shape, double lo, double hi, uint64_t seed) {
    return fgt_uniform(FG_F32, ndim, shape, lo, hi, seed);
}

/* Make t a leaf that wants a gradient, with the gradient buffer already holding uniform values in
 * (-1, 1] (backward rules must add to them). */
static void leaf_with_grad(fg_tensor *t, uint64_t seed) {
    fg_set_requires_grad(t, 1);
    fg_tensor *g0 = fgt_rand(FG_F32, t->ndim, t->shape, seed);
    fg_tensor *g = fg_grad_buffer(t);
    cr_assert(g, "grad buffer");
    memcpy(fg_data(g), fg_data(g0), (size_t)fg_numel(g) * sizeof(float));
    fg_release(g0);
}

/* The values of a contiguous float32 tensor, appended to a growing output list. */
typedef struct {
    float *v;
    int64_t n, cap;
} outs;
static void outs_add(outs *o, const fg_tensor *t) {
    cr_assert(t && t->dtype == FG_F32 && fg_is_contiguous(t), "outs_add: contiguous float32");
    const int64_t n = fg_numel(t);
    if (o->n + n > o->cap) {
        o->cap = 2 * (o->n + n);
        o->v = realloc(o->v, (size_t)o->cap * sizeof(float));
    }
    memcpy(o->v + o->n, fg_data(t), (size_t)n * sizeof(float));
    o->n += n;
}
/* A double, appended as its 8 bytes (compared bit for bit like the rest). */
static void outs_add_double(outs *o, double x) {
    float f[2];
    memcpy(f, &x, sizeof x);
    int64_t two = 2;
    fg_tensor *t = fg_from_buffer(FG_F32, FG_CPU, 1, &two, f);
    outs_add(o, t);
    fg_release(t);
}

/* One run of an op: forward and backward from fresh inputs made from `seed`, every output and
 * gradient appended to o. */
typedef void (*run_fn)(outs *o, const void *cfg);

/* Run `run` on every SIMD level and on 1, 2, 3 threads (every multi-piece loop on the pool) and
 * assert that all runs give the bits of the first (scalar, one thread). */
static void assert_same_bits_everywhere(const char *what, run_fn run, const void *cfg) {
    const fg_simd_level best = fg_simd_detect();
    const double min_ns = fg_par_set_min_ns(0);
    outs ref = {0};
    fg_simd_set(FG_SIMD_SCALAR);
    fg_pool_set_threads(1);
    run(&ref, cfg);
    int runs = 0;
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++)
        for (int th = 1; th <= 3; th++) {
            outs o = {0};
            fg_simd_set((fg_simd_level)lv);
            fg_pool_set_threads(th);
            run(&o, cfg);
            cr_assert_eq(o.n, ref.n, "%s: %lld outputs, expected %lld", what, (long long)o.n, (long long)ref.n);
            for (int64_t i = 0; i < o.n; i++)
                if (memcmp(&o.v[i], &ref.v[i], sizeof(float)) != 0)
                    cr_assert_fail("%s: %s with %d threads differs from scalar/1 thread at output %lld of %lld: "
                                   "%a vs %a",
                                   what, fg_simd_name((fg_simd_level)lv), th, (long long)i, (long long)o.n, o.v[i],
                                   ref.v[i]);
            free(o.v);
            runs++;
        }
    free(ref.v);
    fg_simd_set(best);
    fg_pool_set_threads(0);
    fg_par_set_min_ns(min_ns);
    cr_assert(runs >= 3, "%s: %d runs", what, runs);
}

/* |a - r| <= atol + rtol |r| for every element, with the worst one in the message */
static void assert_close_f(const char *what, const float *a, const double *r, int64_t n, double atol, double rtol) {
    int64_t worst = -1;
    double worst_excess = 0;
    for (int64_t i = 0; i < n; i++) {
        const double err = fabs((double)a[i] - r[i]), tol = atol + rtol * fabs(r[i]);
        if (!(err <= tol) && (worst < 0 || err - tol > worst_excess)) {
            worst = i;
            worst_excess = err - tol;
        }
    }
    if (worst >= 0)
        cr_assert_fail("%s: element %lld of %lld is %.9g, reference %.9g (error %.3g, allowed %.3g)", what,
                       (long long)worst, (long long)n, a[worst], r[worst], fabs((double)a[worst] - r[worst]),
                       atol + rtol * fabs(r[worst]));
}

static const float *fdata(const fg_tensor *t) { return (const float *)fg_data(t); }

/* ---------------------------------------------------------------------------------------------
 * gelu
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    int64_t n;
    double lo, hi;
    int fresh; /* x has no gradient yet: the backward writes it instead of adding into it */
} gelu_cfg;

static void gelu_run(outs *o, const void *cfg_) {
    const gelu_cfg *c = cfg_;
    fg_tensor *x = uni(FGT_DIMS(c->n), c->lo, c->hi, 11);
    if (c->fresh)
        fg_set_requires_grad(x, 1);
    else
        leaf_with_grad(x, 12);
    fg_tensor *dout = fgt_rand(FG_F32, FGT_DIMS(c->n), 13);
    fg_tensor *y = fgt_ok(fg_gelu(x), "gelu");
    cr_assert(fg_backward(y, dout) == FG_OK, "gelu backward: %s", fg_last_error());
    outs_add(o, y);
    outs_add(o, x->grad);
    fg_release(y), fg_release(dout), fg_release(x);
}

Test(fastpath, gelu_matches_double_and_every_level_and_thread_count) {
    for (int fresh = 0; fresh < 2; fresh++) {
        const gelu_cfg c = {2 * FG_PAR_CHUNK + 1003, -12, 12, fresh};
        const fg_simd_level best = fg_simd_detect();
        for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
            fg_simd_set((fg_simd_level)lv);
            outs o = {0};
            gelu_run(&o, &c);
            fg_tensor *x = uni(FGT_DIMS(c.n), c.lo, c.hi, 11), *g0 = fgt_rand(FG_F32, FGT_DIMS(c.n), 12);
            fg_tensor *d = fgt_rand(FG_F32, FGT_DIMS(c.n), 13);
            double *ry = malloc((size_t)c.n * sizeof(double)), *rg = malloc((size_t)c.n * sizeof(double));
            for (int64_t i = 0; i < c.n; i++) {
                /* 0.5 x (1 + tanh u) written as x σ(2u), which has no cancellation for negative x */
                const double X = fdata(x)[i], u = 0.7978845608028654 * (X + 0.044715 * X * X * X);
                const double s = 1 / (1 + exp(-2 * u)), du = 0.7978845608028654 * (1 + 3 * 0.044715 * X * X);
                ry[i] = X * s;
                rg[i] = (fresh ? 0 : fdata(g0)[i]) + fdata(d)[i] * (s + 2 * X * du * s * (1 - s));
            }
            /* rtol: exp(-2u) of a float32 u carries |2u| ulps (up to ~70 at x = -9.6, where gelu ~ 1e-40) */
            assert_close_f("gelu forward", o.v, ry, c.n, 1e-30, 1e-5);
            assert_close_f(fresh ? "gelu backward into a fresh gradient" : "gelu backward", o.v + c.n, rg, c.n, 1e-6,
                           1e-5);
            free(ry), free(rg), free(o.v);
            fg_release(x), fg_release(g0), fg_release(d);
        }
        fg_simd_set(best);
        assert_same_bits_everywhere("gelu", gelu_run, &c);
        const gelu_cfg tail = {13, -3, 3, fresh}; /* only a vector tail */
        assert_same_bits_everywhere("gelu, 13 elements", gelu_run, &tail);
    }
}

Test(fastpath, gelu_of_large_and_special_values) {
    /* |u| so large that exp(-2u) is 0 or +inf: gelu(x) = x and -0; gelu' = 1 and 0 */
    const float xs[] = {0.0f, -0.0f, 30.0f, -30.0f, 1e10f, -1e10f, 9.6f, -9.6f, 1e-20f, -1e-20f};
    const int n = (int)(sizeof xs / sizeof xs[0]);
    const fg_simd_level best = fg_simd_detect();
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
        fg_simd_set((fg_simd_level)lv);
        fg_tensor *x = fgt_ok(fg_from_buffer(FG_F32, FG_CPU, FGT_DIMS(n), xs), "x");
        fg_set_requires_grad(x, 1);
        fg_tensor *y = fgt_ok(fg_gelu(x), "gelu"), *ones = fg_ones(FG_F32, FG_CPU, FGT_DIMS(n));
        cr_assert(fg_backward(y, ones) == FG_OK, "backward");
        const float *py = fdata(y), *pg = fdata(x->grad);
        cr_expect(py[2] == 30.0f && py[4] == 1e10f && pg[2] == 1.0f && pg[4] == 1.0f, "%s: large x: %a %a %a %a",
                  fg_simd_name((fg_simd_level)lv), py[2], py[4], pg[2], pg[4]);
        cr_expect(py[3] == 0.0f && py[5] == 0.0f && pg[3] == 0.0f && pg[5] == 0.0f, "%s: very negative x: %a %a %a %a",
                  fg_simd_name((fg_simd_level)lv), py[3], py[5], pg[3], pg[5]);
        cr_expect(py[0] == 0.0f && pg[0] == 0.5f && pg[1] == 0.5f, "%s: gelu(0) %a, gelu'(0) %a %a",
                  fg_simd_name((fg_simd_level)lv), py[0], pg[0], pg[1]);
        cr_expect(py[8] == 0.5e-20f && py[9] == -0.5e-20f, "%s: tiny x: %a %a", fg_simd_name((fg_simd_level)lv), py[8],
                  py[9]);
        for (int i = 0; i < n; i++)
            cr_expect(isfinite(py[i]) && isfinite(pg[i]), "finite at %d: %a %a", i, py[i], pg[i]);
        fg_release(y), fg_release(ones), fg_release(x);
    }
    fg_simd_set(best);
}

/* ---------------------------------------------------------------------------------------------
 * layernorm
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    int64_t R, C;
    int affine; /* weight and bias, or neither */
} ln_cfg;

static void ln_run(outs *o, const void *cfg_) {
    const ln_cfg *c = cfg_;
    fg_tensor *x = uni(FGT_DIMS(c->R, c->C), -2, 3, 21);
    fg_tensor *w = c->affine ? uni(FGT_DIMS(c->C), 0.5, 1.5, 22) : NULL;
    fg_tensor *b = c->affine ? uni(FGT_DIMS(c->C), -1, 1, 23) : NULL;
    leaf_with_grad(x, 24);
    if (w) leaf_with_grad(w, 25), leaf_with_grad(b, 26);
    fg_tensor *dout = fgt_rand(FG_F32, FGT_DIMS(c->R, c->C), 27);
    fg_tensor *y = fgt_ok(fg_layernorm(x, w, b, 1e-5), "layernorm");
    cr_assert(fg_backward(y, dout) == FG_OK, "layernorm backward: %s", fg_last_error());
    outs_add(o, y);
    outs_add(o, x->grad);
    if (w) outs_add(o, w->grad), outs_add(o, b->grad);
    fg_release(y), fg_release(dout), fg_release(x), fg_release(w), fg_release(b);
}

/* the reference, in double, from the same inputs as ln_run */
static void ln_reference(const ln_cfg *c, double *y, double *dx, double *dw, double *db) {
    const int64_t R = c->R, C = c->C;
    fg_tensor *x = uni(FGT_DIMS(R, C), -2, 3, 21);
    fg_tensor *w = c->affine ? uni(FGT_DIMS(C), 0.5, 1.5, 22) : NULL;
    fg_tensor *b = c->affine ? uni(FGT_DIMS(C), -1, 1, 23) : NULL;
    fg_tensor *gx = fgt_rand(FG_F32, FGT_DIMS(R, C), 24), *d = fgt_rand(FG_F32, FGT_DIMS(R, C), 27);
    fg_tensor *gw = fgt_rand(FG_F32, FGT_DIMS(C), 25), *gb = fgt_rand(FG_F32, FGT_DIMS(C), 26);
    for (int64_t i = 0; i < C && w; i++) dw[i] = fdata(gw)[i], db[i] = fdata(gb)[i];
    for (int64_t r = 0; r < R; r++) {
        const float *xr = fdata(x) + r * C, *dr = fdata(d) + r * C;
        double m = 0, v = 0;
        for (int64_t i = 0; i < C; i++) m += xr[i];
        m /= (double)C;
        for (int64_t i = 0; i < C; i++) v += (xr[i] - m) * (xr[i] - m);
        const double rs = 1 / sqrt(v / (double)C + 1e-5);
        double s1 = 0, s2 = 0;
        for (int64_t i = 0; i < C; i++) {
            const double nrm = (xr[i] - m) * rs, wi = w ? fdata(w)[i] : 1, dn = dr[i] * wi;
            y[r * C + i] = nrm * wi + (b ? fdata(b)[i] : 0);
            s1 += dn, s2 += dn * nrm;
            if (w) dw[i] += dr[i] * nrm, db[i] += dr[i];
        }
        for (int64_t i = 0; i < C; i++) {
            const double nrm = (xr[i] - m) * rs, dn = dr[i] * (w ? fdata(w)[i] : 1);
            dx[r * C + i] = fdata(gx)[r * C + i] + rs * (dn - s1 / (double)C - nrm * s2 / (double)C);
        }
    }
    fg_release(x), fg_release(w), fg_release(b), fg_release(gx), fg_release(d), fg_release(gw), fg_release(gb);
}

Test(fastpath, layernorm_matches_double_and_every_level_and_thread_count) {
    const ln_cfg cfgs[] = {{300, 100, 1}, {67, 37, 1}, {130, 133, 0}, {5, 1, 1}, {40, 16, 1}};
    const fg_simd_level best = fg_simd_detect();
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        const ln_cfg *c = &cfgs[k];
        const int64_t RC = c->R * c->C;
        double *y = malloc((size_t)RC * sizeof(double)), *dx = malloc((size_t)RC * sizeof(double));
        double *dw = calloc((size_t)c->C, sizeof(double)), *db = calloc((size_t)c->C, sizeof(double));
        ln_reference(c, y, dx, dw, db);
        char what[96];
        for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
            fg_simd_set((fg_simd_level)lv);
            outs o = {0};
            ln_run(&o, c);
            snprintf(what, sizeof what, "layernorm (%lld, %lld) %s: out", (long long)c->R, (long long)c->C,
                     fg_simd_name((fg_simd_level)lv));
            assert_close_f(what, o.v, y, RC, 2e-6, 2e-6);
            memcpy(strrchr(what, ':'), ": dx", 5);
            assert_close_f(what, o.v + RC, dx, RC, 2e-5, 1e-5);
            if (c->affine) {
                /* sums of R float32 terms of size ~1 */
                memcpy(strrchr(what, ':'), ": dw", 5);
                assert_close_f(what, o.v + 2 * RC, dw, c->C, 1e-6 * (double)c->R, 1e-5);
                memcpy(strrchr(what, ':'), ": db", 5);
                assert_close_f(what, o.v + 2 * RC + c->C, db, c->C, 1e-6 * (double)c->R, 1e-5);
            }
            free(o.v);
        }
        fg_simd_set(best);
        snprintf(what, sizeof what, "layernorm (%lld, %lld)", (long long)c->R, (long long)c->C);
        assert_same_bits_everywhere(what, ln_run, c);
        free(y), free(dx), free(dw), free(db);
    }
}

/* ---------------------------------------------------------------------------------------------
 * cross-entropy
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    int64_t R, V;
} ce_cfg;

/* targets: row r is ignored (-1) when r % 7 == 3, else (5r + 1) mod V */
static int32_t *ce_targets(const ce_cfg *c) {
    int32_t *t = malloc((size_t)c->R * sizeof(int32_t));
    for (int64_t r = 0; r < c->R; r++) t[r] = r % 7 == 3 ? -1 : (int32_t)((5 * r + 1) % c->V);
    return t;
}

static void ce_run(outs *o, const void *cfg_) {
    const ce_cfg *c = cfg_;
    fg_tensor *x = uni(FGT_DIMS(c->R, c->V), -6, 6, 31);
    leaf_with_grad(x, 32);
    int32_t *t = ce_targets(c);
    fg_tensor *loss = fgt_ok(fg_cross_entropy(x, t), "cross_entropy");
    fg_tensor *g = fg_full(FG_F32, FG_CPU, FGT_DIMS(1), 0.75); /* d(whatever)/d loss */
    cr_assert(fg_backward(loss, g) == FG_OK, "cross_entropy backward: %s", fg_last_error());
    outs_add(o, loss);
    outs_add(o, x->grad);
    fg_release(loss), fg_release(g), fg_release(x);
    free(t);
}

Test(fastpath, cross_entropy_matches_double_and_every_level_and_thread_count) {
    const ce_cfg cfgs[] = {{300, 67}, {41, 5}, {9, 1}, {3, 300}};
    const fg_simd_level best = fg_simd_detect();
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        const ce_cfg *c = &cfgs[k];
        const int64_t RV = c->R * c->V;
        fg_tensor *x = uni(FGT_DIMS(c->R, c->V), -6, 6, 31), *g0 = fgt_rand(FG_F32, FGT_DIMS(c->R, c->V), 32);
        int32_t *t = ce_targets(c);
        double *dx = malloc((size_t)RV * sizeof(double)), loss = 0;
        int64_t count = 0;
        for (int64_t r = 0; r < c->R; r++) count += t[r] >= 0;
        for (int64_t r = 0; r < c->R; r++) {
            const float *xr = fdata(x) + r * c->V;
            double mx = xr[0], s = 0;
            for (int64_t j = 1; j < c->V; j++) mx = xr[j] > mx ? xr[j] : mx;
            for (int64_t j = 0; j < c->V; j++) s += exp(xr[j] - mx);
            const double lse = mx + log(s);
            if (t[r] >= 0) loss += lse - xr[t[r]];
            for (int64_t j = 0; j < c->V; j++)
                dx[r * c->V + j] =
                    fdata(g0)[r * c->V + j] + (t[r] < 0 ? 0 : 0.75 / (double)count * (exp(xr[j] - lse) - (j == t[r])));
        }
        loss /= (double)count;
        char what[96];
        for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
            fg_simd_set((fg_simd_level)lv);
            outs o = {0};
            ce_run(&o, c);
            snprintf(what, sizeof what, "cross_entropy (%lld, %lld) %s: loss", (long long)c->R, (long long)c->V,
                     fg_simd_name((fg_simd_level)lv));
            assert_close_f(what, o.v, &loss, 1, 0, 2e-6);
            memcpy(strrchr(what, ':'), ": dx", 5);
            assert_close_f(what, o.v + 1, dx, RV, 1e-7, 1e-6);
            free(o.v);
        }
        fg_simd_set(best);
        snprintf(what, sizeof what, "cross_entropy (%lld, %lld)", (long long)c->R, (long long)c->V);
        assert_same_bits_everywhere(what, ce_run, c);
        fg_release(x), fg_release(g0);
        free(t), free(dx);
    }
}

/* ---------------------------------------------------------------------------------------------
 * element-wise ops: a ∘ b with broadcasting, a ∘ s, and their backward
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    int kind; /* 0 add, 1 sub, 2 mul, 3 div, 4 add_scalar, 5 mul_scalar */
    int nda, ndb;
    int64_t sa[3], sb[3];
} ew_cfg;

static fg_tensor *ew_apply(int kind, fg_tensor *a, fg_tensor *b) {
    switch (kind) {
    case 0:
        return fg_add(a, b);
    case 1:
        return fg_sub(a, b);
    case 2:
        return fg_mul(a, b);
    case 3:
        return fg_div(a, b);
    case 4:
        return fg_add_scalar(a, 0.3);
    default:
        return fg_mul_scalar(a, -1.7);
    }
}

static void ew_run(outs *o, const void *cfg_) {
    const ew_cfg *c = cfg_;
    fg_tensor *a = uni(c->nda, c->sa, -2, 2, 41), *b = uni(c->ndb, c->sb, 0.5, 2, 42);
    leaf_with_grad(a, 43);
    leaf_with_grad(b, 44);
    fg_tensor *y = fgt_ok(ew_apply(c->kind, a, b), "element-wise op");
    fg_tensor *dy = fgt_rand(FG_F32, y->ndim, y->shape, 45);
    cr_assert(fg_backward(y, dy) == FG_OK, "backward: %s", fg_last_error());
    outs_add(o, y);
    outs_add(o, a->grad);
    if (c->kind < 4) outs_add(o, b->grad);
    fg_release(y), fg_release(dy), fg_release(a), fg_release(b);
}

Test(fastpath, elementwise_ops_match_double_and_every_level_and_thread_count) {
    const int64_t big = FG_PAR_CHUNK + 4099; /* two pieces of one long row */
    const ew_cfg cfgs[] = {
        {0, 1, 1, {big}, {big}}, /* same shape, contiguous */
        {1, 1, 1, {big}, {big}},
        {2, 1, 1, {big}, {big}},
        {3, 1, 1, {big}, {big}},
        {4, 1, 1, {big}, {1}},
        {5, 1, 1, {big}, {1}},
        {0, 3, 2, {5, 67, 131}, {67, 131}}, /* (B, T, C) + (T, C), as x + pos in the GPT */
        {1, 3, 2, {5, 67, 131}, {67, 131}},
        {0, 3, 3, {301, 3, 37}, {301, 3, 1}}, /* b broadcast along the last dim */
        {1, 2, 2, {1, 37}, {301, 37}},        /* a broadcast along the first */
        {0, 2, 2, {301, 45}, {301, 45}},
    };
    const fg_simd_level best = fg_simd_detect();
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        const ew_cfg *c = &cfgs[k];
        char what[96];
        snprintf(what, sizeof what, "element-wise op %d, cfg %zu", c->kind, k);
        /* the reference in double: shapes right-aligned to 3 dims, a dim of size 1 broadcast */
        int64_t pa[3] = {1, 1, 1}, pb[3] = {1, 1, 1}, po[3];
        for (int d = 0; d < c->nda; d++) pa[3 - c->nda + d] = c->sa[d];
        for (int d = 0; d < c->ndb; d++) pb[3 - c->ndb + d] = c->sb[d];
        for (int d = 0; d < 3; d++) po[d] = pa[d] > pb[d] ? pa[d] : pb[d];
        const int64_t no = po[0] * po[1] * po[2], na = pa[0] * pa[1] * pa[2], nb = pb[0] * pb[1] * pb[2];
        fg_tensor *a = uni(c->nda, c->sa, -2, 2, 41), *b = uni(c->ndb, c->sb, 0.5, 2, 42);
        fg_tensor *ga = fgt_rand(FG_F32, c->nda, c->sa, 43), *gb = fgt_rand(FG_F32, c->ndb, c->sb, 44);
        fg_tensor *dy = fgt_rand(FG_F32, FGT_DIMS(no), 45);
        double *ref = malloc((size_t)(no + na + nb) * sizeof(double)), *ra = ref + no, *rb = ra + na;
        for (int64_t i = 0; i < na; i++) ra[i] = fdata(ga)[i];
        for (int64_t i = 0; i < nb; i++) rb[i] = fdata(gb)[i];
#define BCAST_INDEX(p, i, j, l)                                                                                        \
    ((((p)[0] > 1 ? (i) : 0) * (p)[1] + ((p)[1] > 1 ? (j) : 0)) * (p)[2] + ((p)[2] > 1 ? (l) : 0))
        for (int64_t i = 0; i < po[0]; i++)
            for (int64_t j = 0; j < po[1]; j++)
                for (int64_t l = 0; l < po[2]; l++) {
                    const int64_t io = (i * po[1] + j) * po[2] + l;
                    const int64_t ia = BCAST_INDEX(pa, i, j, l), ib = BCAST_INDEX(pb, i, j, l);
                    const double x = fdata(a)[ia], y = c->kind >= 4 ? (c->kind == 4 ? 0.3 : -1.7) : fdata(b)[ib];
                    const double d = fdata(dy)[io];
                    static const double sgn[] = {1, -1};
                    switch (c->kind) {
                    case 0:
                    case 1:
                        ref[io] = x + sgn[c->kind] * y, ra[ia] += d, rb[ib] += sgn[c->kind] * d;
                        break;
                    case 2:
                        ref[io] = x * y, ra[ia] += d * y, rb[ib] += d * x;
                        break;
                    case 3:
                        ref[io] = x / y, ra[ia] += d / y, rb[ib] -= d * x / (y * y);
                        break;
                    case 4:
                        ref[io] = x + y, ra[ia] += d;
                        break;
                    default:
                        ref[io] = x * (float)y, ra[ia] += d * (float)y;
                        break;
                    }
                }
        for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
            fg_simd_set((fg_simd_level)lv);
            outs o = {0};
            ew_run(&o, c);
            /* forward: one rounding (the scalar rounded to float32 first, as the op does) */
            if (c->kind == 4)
                for (int64_t i = 0; i < no; i++) ref[i] = fdata(a)[i] + (double)0.3f;
            assert_close_f(what, o.v, ref, no, 0, 1.2e-7);
            /* a gradient summed over broadcast dims: no / na float32 terms of size ~1 */
            assert_close_f(what, o.v + no, ra, na, 1e-6 + 2e-7 * (double)(no / na), 1e-6);
            if (c->kind < 4) assert_close_f(what, o.v + no + na, rb, nb, 1e-6 + 2e-7 * (double)(no / nb), 1e-6);
            free(o.v);
        }
        fg_simd_set(best);
        assert_same_bits_everywhere(what, ew_run, c);
        free(ref);
        fg_release(a), fg_release(b), fg_release(ga), fg_release(gb), fg_release(dy);
    }
}

/* ---------------------------------------------------------------------------------------------
 * gradients through views (dst += src on strided tensors) and contiguous copies, as the GPT's
 * attention input takes them: qkv (B, T, 3C) -> (B, T, 3H, hd) -> slice of H heads -> (B, H, T, hd)
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    int64_t B, T, H, hd;
    int s; /* which of q, k, v */
} view_cfg;

static void view_run(outs *o, const void *cfg_) {
    const view_cfg *c = cfg_;
    const int64_t C3 = 3 * c->H * c->hd;
    fg_tensor *x = uni(FGT_DIMS(c->B, c->T, C3), -1, 1, 51);
    leaf_with_grad(x, 52);
    fg_tensor *r = fgt_ok(fg_reshape(x, FGT_DIMS(c->B, c->T, 3 * c->H, c->hd)), "reshape");
    fg_tensor *sl = fgt_ok(fg_slice(r, 2, c->s * c->H, (c->s + 1) * c->H), "slice");
    fg_tensor *p = fgt_ok(fg_permute(sl, (int[]){0, 2, 1, 3}), "permute");
    fg_tensor *y = fgt_ok(fg_make_contiguous(p), "make_contiguous");
    fg_tensor *dy = fgt_rand(FG_F32, y->ndim, y->shape, 53);
    cr_assert(fg_backward(y, dy) == FG_OK, "backward: %s", fg_last_error());
    outs_add(o, y);
    outs_add(o, x->grad);
    fg_release(y), fg_release(p), fg_release(sl), fg_release(r), fg_release(dy), fg_release(x);
}

/* a long contiguous row (pieces of columns): y = reshape(x) * 1.5 -> dx += 1.5 dy through the view */
static void long_row_run(outs *o, const void *cfg_) {
    const int64_t n = *(const int64_t *)cfg_;
    fg_tensor *x = uni(FGT_DIMS(n), -1, 1, 54);
    leaf_with_grad(x, 55);
    fg_tensor *r = fgt_ok(fg_reshape(x, FGT_DIMS(1, n)), "reshape");
    fg_tensor *t = fgt_ok(fg_transpose(r, 0, 1), "transpose"); /* (n, 1): still unit stride */
    fg_tensor *y = fgt_ok(fg_mul_scalar(t, 1.5), "mul_scalar");
    fg_tensor *dy = fgt_rand(FG_F32, y->ndim, y->shape, 56);
    cr_assert(fg_backward(y, dy) == FG_OK, "backward: %s", fg_last_error());
    outs_add(o, y);
    outs_add(o, x->grad);
    fg_release(y), fg_release(t), fg_release(r), fg_release(dy), fg_release(x);
}

Test(fastpath, gradients_through_views_and_copies_match_and_every_level_and_thread_count) {
    const view_cfg cfgs[] = {{7, 67, 3, 33, 1}, {3, 130, 4, 32, 2}, {2, 5, 1, 7, 0}};
    for (size_t k = 0; k < sizeof cfgs / sizeof cfgs[0]; k++) {
        const view_cfg *c = &cfgs[k];
        const int64_t C3 = 3 * c->H * c->hd, nx = c->B * c->T * C3, ny = c->B * c->H * c->T * c->hd;
        outs o = {0};
        view_run(&o, c);
        fg_tensor *x = uni(FGT_DIMS(c->B, c->T, C3), -1, 1, 51), *g0 = fgt_rand(FG_F32, FGT_DIMS(nx), 52);
        fg_tensor *dy = fgt_rand(FG_F32, FGT_DIMS(ny), 53);
        double *ry = malloc((size_t)ny * sizeof(double)), *rg = malloc((size_t)nx * sizeof(double));
        for (int64_t i = 0; i < nx; i++) rg[i] = fdata(g0)[i];
        for (int64_t b = 0; b < c->B; b++)
            for (int64_t h = 0; h < c->H; h++)
                for (int64_t t = 0; t < c->T; t++)
                    for (int64_t d = 0; d < c->hd; d++) {
                        const int64_t iy = ((b * c->H + h) * c->T + t) * c->hd + d;
                        const int64_t ix = (b * c->T + t) * C3 + (c->s * c->H + h) * c->hd + d;
                        ry[iy] = fdata(x)[ix];
                        rg[ix] += fdata(dy)[iy];
                    }
        char what[96];
        snprintf(what, sizeof what, "qkv views (%lld, %lld, %lld, %lld)", (long long)c->B, (long long)c->T,
                 (long long)c->H, (long long)c->hd);
        assert_close_f(what, o.v, ry, ny, 0, 0);         /* a copy */
        assert_close_f(what, o.v + ny, rg, nx, 0, 6e-8); /* one rounding */
        free(ry), free(rg), free(o.v);
        fg_release(x), fg_release(g0), fg_release(dy);
        assert_same_bits_everywhere(what, view_run, c);
    }
    const int64_t n = 2 * FG_PAR_CHUNK + 77;
    outs o = {0};
    long_row_run(&o, &n);
    fg_tensor *x = uni(FGT_DIMS(n), -1, 1, 54), *g0 = fgt_rand(FG_F32, FGT_DIMS(n), 55);
    fg_tensor *dy = fgt_rand(FG_F32, FGT_DIMS(n), 56);
    double *ry = malloc((size_t)n * sizeof(double)), *rg = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) ry[i] = 1.5 * fdata(x)[i], rg[i] = fdata(g0)[i] + 1.5 * fdata(dy)[i];
    assert_close_f("long row: y", o.v, ry, n, 0, 6e-8);
    assert_close_f("long row: dx", o.v + n, rg, n, 1e-7, 6e-8);
    free(ry), free(rg), free(o.v);
    fg_release(x), fg_release(g0), fg_release(dy);
    assert_same_bits_everywhere("long row", long_row_run, &n);
}

/* ---------------------------------------------------------------------------------------------
 * embedding backward: rows scattered into the weight's gradient, repeated ids summed in order
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    int64_t V, C, n;
} emb_cfg;

static int32_t emb_id(int64_t r, int64_t V) { return (int32_t)((r * r + 3 * r) % V); }

static void emb_run(outs *o, const void *cfg_) {
    const emb_cfg *c = cfg_;
    fg_tensor *w = uni(FGT_DIMS(c->V, c->C), -1, 1, 61);
    leaf_with_grad(w, 62);
    int32_t *idx = malloc((size_t)c->n * sizeof(int32_t));
    for (int64_t r = 0; r < c->n; r++) idx[r] = emb_id(r, c->V);
    fg_tensor *y = fgt_ok(fg_embedding(w, idx, FGT_DIMS(c->n)), "embedding");
    fg_tensor *dy = fgt_rand(FG_F32, y->ndim, y->shape, 63);
    cr_assert(fg_backward(y, dy) == FG_OK, "backward: %s", fg_last_error());
    outs_add(o, y);
    outs_add(o, w->grad);
    fg_release(y), fg_release(dy), fg_release(w);
    free(idx);
}

Test(fastpath, embedding_backward_matches_double_and_every_level_and_thread_count) {
    const emb_cfg c = {50, 37, 231};
    outs o = {0};
    emb_run(&o, &c);
    fg_tensor *w = uni(FGT_DIMS(c.V, c.C), -1, 1, 61), *g0 = fgt_rand(FG_F32, FGT_DIMS(c.V * c.C), 62);
    fg_tensor *dy = fgt_rand(FG_F32, FGT_DIMS(c.n * c.C), 63);
    double *ry = malloc((size_t)(c.n * c.C) * sizeof(double)), *rg = malloc((size_t)(c.V * c.C) * sizeof(double));
    for (int64_t i = 0; i < c.V * c.C; i++) rg[i] = fdata(g0)[i];
    for (int64_t r = 0; r < c.n; r++)
        for (int64_t j = 0; j < c.C; j++) {
            ry[r * c.C + j] = fdata(w)[emb_id(r, c.V) * c.C + j];
            rg[emb_id(r, c.V) * c.C + j] += fdata(dy)[r * c.C + j];
        }
    assert_close_f("embedding: out", o.v, ry, c.n * c.C, 0, 0);
    assert_close_f("embedding: dweight", o.v + c.n * c.C, rg, c.V * c.C, 1e-6 * (double)c.n / (double)c.V, 1e-6);
    free(ry), free(rg), free(o.v);
    fg_release(w), fg_release(g0), fg_release(dy);
    assert_same_bits_everywhere("embedding", emb_run, &c);
}

/* ---------------------------------------------------------------------------------------------
 * the optimizer: gradient norm, clipping, AdamW over a small GPT's flat arrays
 * ------------------------------------------------------------------------------------------- */

static fg_gpt *small_gpt(void) {
    fg_gpt_config gc = fg_gpt_default_config();
    gc.n_layer = 1, gc.n_head = 2, gc.n_embd = 64, gc.block_size = 16, gc.vocab_size = 65;
    fg_gpt *g = fg_gpt_create(&gc, 7);
    cr_assert(g, "gpt: %s", fg_last_error());
    return g;
}

static const fg_adamw_config opt_cfg = {3e-3, 1e-4, 0, 100, 0.9, 0.95, 1e-8, 0.1, 1.0};

/* two steps: gradients set from `seed`, clipped (to 0.5), AdamW; the norms and every array */
static void opt_run(outs *o, const void *cfg_) {
    (void)cfg_;
    fg_gpt *g = small_gpt();
    fg_adamw opt;
    cr_assert(fg_adamw_init(&opt, &opt_cfg, FG_F32, FG_CPU, g->num_elements) == FG_OK, "adamw init");
    for (int step = 0; step < 2; step++) {
        fg_tensor *r = fgt_rand(FG_F32, FGT_DIMS(g->num_elements), 71 + (uint64_t)step);
        memcpy(fg_data(g->grads_flat), fg_data(r), (size_t)g->num_elements * sizeof(float));
        fg_release(r);
        outs_add_double(o, fg_clip_grad_norm(g->grads_flat, 0.5));
        outs_add_double(o, fg_grad_norm(g->grads_flat));
        cr_assert(fg_adamw_update(&opt, g, fg_lr_at(&opt_cfg, step)) == FG_OK, "adamw update");
    }
    outs_add(o, g->params_flat);
    outs_add(o, opt.m);
    outs_add(o, opt.v);
    fg_adamw_free(&opt);
    fg_gpt_free(g);
}

Test(fastpath, optimizer_matches_double_and_every_level_and_thread_count) {
    fg_gpt *g = small_gpt();
    const int64_t P = g->num_elements;
    cr_assert(P > 3 * FG_PAR_CHUNK, "%lld parameters: want several pieces", (long long)P);
    /* the reference: clip and AdamW in double from the same float32 start */
    double *p = malloc((size_t)P * sizeof(double)), *m = calloc((size_t)P, sizeof(double));
    double *v = calloc((size_t)P, sizeof(double)), norms[4];
    for (int64_t i = 0; i < P; i++) p[i] = fdata(g->params_flat)[i];
    for (int step = 0; step < 2; step++) {
        fg_tensor *r = fgt_rand(FG_F32, FGT_DIMS(P), 71 + (uint64_t)step);
        double n2 = 0;
        for (int64_t i = 0; i < P; i++) n2 += (double)fdata(r)[i] * fdata(r)[i];
        const double norm = sqrt(n2), coef = 0.5 / (norm + 1e-6) < 1 ? 0.5 / (norm + 1e-6) : 1;
        norms[2 * step] = norm, norms[2 * step + 1] = norm * coef;
        const double lr = fg_lr_at(&opt_cfg, step), t = step + 1;
        const double bc1 = 1 - pow(opt_cfg.beta1, t), bc2 = 1 - pow(opt_cfg.beta2, t);
        for (int j = 0; j < g->n_params; j++) {
            const fg_gpt_param *pp = &g->params[j];
            for (int64_t i = pp->offset; i < pp->offset + pp->numel; i++) {
                const double gi = fdata(r)[i] * coef;
                if (pp->decay) p[i] *= 1 - lr * opt_cfg.weight_decay;
                m[i] = opt_cfg.beta1 * m[i] + (1 - opt_cfg.beta1) * gi;
                v[i] = opt_cfg.beta2 * v[i] + (1 - opt_cfg.beta2) * gi * gi;
                p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + opt_cfg.eps);
            }
        }
        fg_release(r);
    }
    fg_gpt_free(g);
    const fg_simd_level best = fg_simd_detect();
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
        fg_simd_set((fg_simd_level)lv);
        outs o = {0};
        opt_run(&o, NULL);
        for (int k = 0; k < 4; k++) {
            double got;
            memcpy(&got, o.v + 2 * k, sizeof got);
            cr_expect(fabs(got - norms[k]) <= 1e-6 * norms[k], "%s: norm %d: %.17g, reference %.17g",
                      fg_simd_name((fg_simd_level)lv), k, got, norms[k]);
        }
        /* a step moves p by ~lr; float32 rounds each moment's terms (~4e-4 for m after clipping,
         * ~1e-6 for v) to ~1e-7 relative, and they may cancel */
        assert_close_f("adamw: params", o.v + 8, p, P, 1e-7, 1e-6);
        assert_close_f("adamw: m", o.v + 8 + P, m, P, 1e-10, 1e-5);
        assert_close_f("adamw: v", o.v + 8 + 2 * P, v, P, 1e-13, 1e-5);
        free(o.v);
    }
    fg_simd_set(best);
    assert_same_bits_everywhere("optimizer", opt_run, NULL);
    free(p), free(m), free(v);
}

/* ---- Philox for dropout masks (ops/cpu/vphilox.h) ---- */

/* Every level gives tensor/philox.h's words (checked there against the published known answers),
 * for counts that are not multiples of the vector width and a first counter word that wraps. */
Test(fastpath, philox_blocks_equal_the_scalar_philox_on_every_level) {
    const uint32_t key[2] = {0x243F6A88u, 0x85A308D3u};
    enum { NMAX = 300 };
    uint32_t *got = malloc(4 * NMAX * sizeof *got), *want = malloc(4 * NMAX * sizeof *want);
    const fg_simd_level best = fg_simd_detect();
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
        fg_simd_set((fg_simd_level)lv);
        for (int64_t n = 0; n <= NMAX; n += 13) {
            const uint32_t c0 = 0xFFFFFFFFu - (uint32_t)(3 * n); /* wraps for n > 0 */
            fg_philox_blocks(c0, 0x13198A2Eu, 0x03707344u, (uint32_t)n, key, n, got);
            for (int64_t i = 0; i < n; i++) {
                const uint32_t ctr[4] = {c0 + (uint32_t)i, 0x13198A2Eu, 0x03707344u, (uint32_t)n};
                fg_philox4x32_10(ctr, key, want + 4 * i);
            }
            for (int64_t i = 0; i < 4 * n; i++)
                cr_assert_eq(got[i], want[i], "%s, n %lld: word %lld is %08x, scalar %08x", fg_simd_name(lv),
                             (long long)n, (long long)i, got[i], want[i]);
        }
        /* a 64-bit block index that carries into the second counter word */
        const uint64_t first = 0x00000001FFFFFFF7ull;
        fg_philox_stream_blocks(99, 7, first, 40, got);
        for (int64_t i = 0; i < 40; i++) {
            fg_philox_block(99, 7, first + (uint64_t)i, want);
            cr_assert(!memcmp(got + 4 * i, want, 4 * sizeof *want), "%s: stream block %llx differs", fg_simd_name(lv),
                      (unsigned long long)(first + (uint64_t)i));
        }
    }
    fg_simd_set(best);
    free(got);
    free(want);
}

/* The dropout op on the pool: the mask of fg_philox_u32 for every element, for any thread count,
 * forward and backward, at a size that is not a multiple of 4 or of a piece. */
Test(fastpath, dropout_mask_is_philox_on_the_pool_for_any_thread_count) {
    const int64_t n = 3 * 16384 + 7;
    const double p = 0.3;
    const uint32_t thr = fg_dropout_threshold(p);
    const double prev = fg_par_set_min_ns(0); /* every loop of two or more pieces takes the pool */
    for (int threads = 1; threads <= 3; threads += 2) {
        fg_pool_set_threads(threads);
        fg_tensor *x = fgt_leaf(FG_F32, FGT_DIMS(n), 5), *dy = fgt_rand(FG_F32, FGT_DIMS(n), 6);
        fg_tensor *y = fgt_ok(fg_dropout(x, p, 1234, 5), "dropout");
        cr_assert_eq(fg_backward(y, dy), FG_OK, "%s", fg_last_error());
        const float *px = fg_data(x), *py = fg_data(y), *pd = fg_data(dy), *pg = fg_data(x->grad);
        const float scale = (float)(1.0 / (1.0 - p));
        for (int64_t k = 0; k < n; k++) {
            const int keep = fg_philox_u32(1234, 5, (uint64_t)k) >= thr;
            const float want = keep ? px[k] * scale : 0.0f, want_g = keep ? pd[k] * scale : 0.0f;
            cr_assert(py[k] == want && pg[k] == want_g, "%d threads, element %lld: y %a (want %a), dx %a (want %a)",
                      threads, (long long)k, py[k], want, pg[k], want_g);
        }
        fg_release(y), fg_release(x), fg_release(dy);
    }
    fg_pool_set_threads(0);
    fg_par_set_min_ns(prev);
}

/* fg_vrows_f32 on every level: each row block copied or added exactly (a float sum is one rounding
 * everywhere), every row length a head can have around the vector widths, and nothing written
 * between the rows of a strided destination. */
Test(fastpath, row_blocks_copy_and_add_exactly_on_every_level) {
    static const int64_t lens[] = {1, 7, 8, 15, 16, 17, 31, 32, 33, 64, 100};
    const int64_t rows = 5, gap = 3;
    const fg_simd_level best = fg_simd_detect();
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        const int64_t n = lens[li], ld = n + gap, total = rows * ld;
        float *src = malloc((size_t)total * sizeof *src), *base = malloc((size_t)total * sizeof *base);
        float *dst = malloc((size_t)total * sizeof *dst);
        for (int64_t k = 0; k < total; k++) {
            src[k] = (float)(0.37 * (double)k - 3.1);
            base[k] = (float)(1.0 / (double)(k + 3));
        }
        for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
            fg_simd_set((fg_simd_level)lv);
            for (int add = 0; add < 2; add++) {
                memcpy(dst, base, (size_t)total * sizeof *dst);
                fg_vrows_f32(dst, ld, src + 1, ld, rows, n, add); /* source rows from an odd offset */
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t c = 0; c < ld; c++) {
                        const int64_t k = r * ld + c;
                        const float want = c >= n ? base[k] : add ? base[k] + src[k + 1] : src[k + 1];
                        cr_assert(memcmp(&dst[k], &want, sizeof want) == 0,
                                  "%s, n = %lld, %s: row %lld column %lld is %.9g, want %.9g",
                                  fg_simd_name((fg_simd_level)lv), (long long)n, add ? "add" : "copy", (long long)r,
                                  (long long)c, dst[k], want);
                    }
            }
        }
        fg_simd_set(best);
        free(src), free(base), free(dst);
    }
}

/* ---------------------------------------------------------------------------------------------
 * linear's bias gradient: column sums of dout, each column in row order from the gradient already
 * there (whole blocks of columns through the vector kernels, the rest in C)
 * ------------------------------------------------------------------------------------------- */
typedef struct {
    int64_t R, N, K;
} bias_cfg;

static void run_bias_grad(outs *o, const void *cfg) {
    const bias_cfg *c = cfg;
    fg_tensor *x = uni(2, (int64_t[]){c->R, c->K}, -1, 1, 41), *w = uni(2, (int64_t[]){c->N, c->K}, -1, 1, 42);
    fg_tensor *b = uni(1, &c->N, -1, 1, 43), *d = uni(2, (int64_t[]){c->R, c->N}, -1, 1, 44);
    leaf_with_grad(b, 45);
    fg_tensor *y = fg_linear(x, w, b);
    cr_assert(y, "%s", fg_last_error());
    cr_assert_eq(fg_backward(y, d), FG_OK, "%s", fg_last_error());
    outs_add(o, b->grad);
    fg_release(y), fg_release(x), fg_release(w), fg_release(b), fg_release(d);
}

Test(fastpath, bias_gradient_sums_each_column_in_row_order_on_every_level_and_thread_count) {
    /* 2 whole blocks of 128 columns and a tail of 45; and a width under one block */
    const bias_cfg cfgs[2] = {{301, 2 * 128 + 45, 8}, {77, 100, 5}};
    for (int k = 0; k < 2; k++) {
        const bias_cfg *c = &cfgs[k];
        outs o = {0};
        run_bias_grad(&o, c);
        cr_assert_eq(o.n, c->N);
        /* the reference: the starting gradient, then + dout[r, j] for r = 0, 1, ... in float32 */
        fg_tensor *g0 = fgt_rand(FG_F32, 1, &c->N, 45), *d = uni(2, (int64_t[]){c->R, c->N}, -1, 1, 44);
        for (int64_t j = 0; j < c->N; j++) {
            float s = fdata(g0)[j];
            for (int64_t r = 0; r < c->R; r++) s += fdata(d)[r * c->N + j];
            cr_assert(memcmp(&s, &o.v[j], sizeof s) == 0, "N %lld: column %lld sums to %a, in row order %a",
                      (long long)c->N, (long long)j, o.v[j], s);
        }
        free(o.v), fg_release(g0), fg_release(d);
        assert_same_bits_everywhere("bias gradient", run_bias_grad, c);
    }
}
