/* test_ops_elementwise.c — broadcasting arithmetic (suite elementwise), sum/mean (suite reduce)
 * and differentiable views (suite shape): forward against naive loops, gradients against finite
 * differences, float32 against float64, view semantics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tests/common.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}
TestSuite(elementwise, .fini = leak_check, .timeout = 120);
TestSuite(reduce, .fini = leak_check, .timeout = 120);
TestSuite(shape, .fini = leak_check, .timeout = 120);

/* Element of t that broadcasting reads for the flat index k of an output of shape (nd, shape). */
static double bcast_get(const fg_tensor *t, int nd, const int64_t *shape, int64_t k) {
    int64_t idx[FG_MAX_DIMS];
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = k % shape[d];
        k /= shape[d];
    }
    int64_t flat = 0;
    for (int d = 0; d < t->ndim; d++) {
        int od = d + (nd - t->ndim);
        flat = flat * t->shape[d] + (t->shape[d] == 1 ? 0 : idx[od]);
    }
    return fg_get(t, flat);
}

/* ============================================================================================
 * elementwise
 * ============================================================================================ */

typedef struct {
    const char *name;
    int nda;
    int64_t a[4];
    int ndb;
    int64_t b[4];
    int b_transposed; /* b is a transposed view (of its last two dims) */
} bc_case;

static const bc_case bc_cases[] = {
    {"same_shape", 2, {3, 5}, 2, {3, 5}, 0},
    {"row_vector", 2, {3, 4}, 1, {4}, 0},
    {"column", 3, {2, 3, 5}, 3, {2, 3, 1}, 0},
    {"both_stretch", 3, {2, 1, 5}, 2, {3, 1}, 0},
    {"a_smaller", 1, {1}, 2, {2, 3}, 0},
    {"one_element", 2, {5, 7}, 1, {1}, 0},
    {"ones", 2, {1, 1}, 2, {1, 1}, 0},
    {"b_transposed", 3, {2, 3, 4}, 3, {2, 3, 4}, 1},
    {"b_transposed_bcast", 3, {2, 9, 7}, 2, {9, 7}, 1},
};
#define N_BC (sizeof bc_cases / sizeof bc_cases[0])

typedef struct {
    const char *name;
    fg_tensor *(*fn)(fg_tensor *, fg_tensor *);
    double (*ref)(double, double);
} bin_op;
static double r_add(double x, double y) { return x + y; }
static double r_sub(double x, double y) { return x - y; }
static double r_mul(double x, double y) { return x * y; }
static double r_div(double x, double y) { return x / y; }
static const bin_op bin_ops[] = {
    {"add", fg_add, r_add}, {"sub", fg_sub, r_sub}, {"mul", fg_mul, r_mul}, {"div", fg_div, r_div}};

static void bc_inputs(const bc_case *bc, fg_dtype dt, uint64_t seed, fg_tensor **a, fg_tensor **b) {
    *a = fgt_rand(dt, bc->nda, bc->a, seed);
    if (!bc->b_transposed) {
        *b = fgt_uniform(dt, bc->ndb, bc->b, 0.5, 1.5, seed + 1); /* away from 0, for div */
        return;
    }
    int64_t sh[4];
    memcpy(sh, bc->b, sizeof sh);
    sh[bc->ndb - 2] = bc->b[bc->ndb - 1];
    sh[bc->ndb - 1] = bc->b[bc->ndb - 2];
    fg_tensor *base = fgt_uniform(dt, bc->ndb, sh, 0.5, 1.5, seed + 1);
    *b = fgt_ok(fg_view_transpose(base, bc->ndb - 2, bc->ndb - 1), "transpose");
    fg_release(base);
}

static fg_tensor *bin_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    return ((const bin_op *)user)->fn(in[0], in[1]);
}

Test(elementwise, binary_ops_forward_match_naive_broadcasting) {
    for (size_t o = 0; o < 4; o++)
        for (size_t c = 0; c < N_BC; c++) {
            const bc_case *bc = &bc_cases[c];
            fg_tensor *a, *b;
            bc_inputs(bc, FG_F64, 3 * c + 1, &a, &b);
            fg_tensor *out = fgt_ok(bin_ops[o].fn(a, b), bin_ops[o].name);
            int64_t n = fg_numel(out);
            double *ref = malloc((size_t)n * sizeof *ref);
            for (int64_t k = 0; k < n; k++)
                ref[k] = bin_ops[o].ref(bcast_get(a, out->ndim, out->shape, k), bcast_get(b, out->ndim, out->shape, k));
            char what[96];
            snprintf(what, sizeof what, "%s %s", bin_ops[o].name, bc->name);
            FGT_ASSERT_CLOSE_BUF(out, ref, n, 0, 0, what); /* one rounding each way: exact */
            free(ref);
            fg_release(out), fg_release(a), fg_release(b);
        }
}

Test(elementwise, broadcast_output_shape_follows_numpy) {
    fg_tensor *a = fgt_rand(FG_F64, FGT_DIMS(2, 1, 5), 1), *b = fgt_rand(FG_F64, FGT_DIMS(3, 1), 2);
    fg_tensor *out = fgt_ok(fg_add(a, b), "add");
    cr_assert(out->ndim == 3 && out->shape[0] == 2 && out->shape[1] == 3 && out->shape[2] == 5,
              "shape (%lld, %lld, %lld), want (2, 3, 5)", (long long)out->shape[0], (long long)out->shape[1],
              (long long)out->shape[2]);
    fg_release(out), fg_release(a), fg_release(b);
}

Test(elementwise, binary_ops_backward_match_numeric) {
    for (size_t o = 0; o < 4; o++)
        for (size_t c = 0; c < N_BC; c++) {
            const bc_case *bc = &bc_cases[c];
            fg_tensor *in[2];
            bc_inputs(bc, FG_F64, 3 * c + 1, &in[0], &in[1]);
            fg_set_requires_grad(in[0], 1);
            fg_set_requires_grad(in[1], 1);
            char what[96];
            snprintf(what, sizeof what, "%s %s", bin_ops[o].name, bc->name);
            FGT_GRADCHECK(what, bin_fn, in, 2, (void *)&bin_ops[o]);
            fg_release(in[0]), fg_release(in[1]);
        }
}

/* A gradient buffer the rule makes is written (add: a copy of dout), one that exists is added
 * into: for every op and broadcast, the second equals the first plus what was there; and x + x
 * (one buffer, made by the first side) is 2 dout. */
Test(elementwise, binary_ops_backward_into_made_and_existing_gradients_agree) {
    for (size_t o = 0; o < 4; o++)
        for (size_t c = 0; c < N_BC; c++) {
            const bc_case *bc = &bc_cases[c];
            fg_tensor *in[2];
            bc_inputs(bc, FG_F64, 3 * c + 7, &in[0], &in[1]);
            fg_set_requires_grad(in[0], 1);
            fg_set_requires_grad(in[1], 1);
            fg_tensor *out = fgt_ok(bin_ops[o].fn(in[0], in[1]), bin_ops[o].name);
            fg_tensor *dout = fgt_rand(FG_F64, out->ndim, out->shape, 5 * c + o);
            cr_assert_eq(fg_backward(out, dout), FG_OK, "%s", fg_last_error());
            fg_release(out);
            double *made[2], *before[2];
            for (int s = 0; s < 2; s++) {
                made[s] = fgt_values(in[s]->grad);
                fg_tensor *g0 = fgt_rand(FG_F64, in[s]->ndim, in[s]->shape, 11 * c + o + s);
                fg_copy_into(in[s]->grad, g0);
                before[s] = fgt_values(g0);
                fg_release(g0);
            }
            out = fgt_ok(bin_ops[o].fn(in[0], in[1]), bin_ops[o].name);
            cr_assert_eq(fg_backward(out, dout), FG_OK, "%s", fg_last_error());
            for (int s = 0; s < 2; s++) {
                const int64_t n = fg_numel(in[s]);
                double *want = malloc((size_t)n * sizeof *want);
                for (int64_t k = 0; k < n; k++) want[k] = before[s][k] + made[s][k];
                char what[96];
                snprintf(what, sizeof what, "%s %s: d%c into an existing gradient", bin_ops[o].name, bc->name,
                         s ? 'b' : 'a');
                /* exact where no broadcast is summed (one addition each way); a sum over broadcast
                 * dimensions adds its terms into what was there one by one */
                const double tol = n == fg_numel(dout) ? 0 : 1e-14;
                FGT_ASSERT_CLOSE_BUF(in[s]->grad, want, n, tol, tol, what);
                free(want), free(made[s]), free(before[s]);
            }
            fg_release(out), fg_release(dout), fg_release(in[0]), fg_release(in[1]);
        }
    fg_tensor *x = fgt_rand(FG_F64, FGT_DIMS(4, 6), 3);
    fg_set_requires_grad(x, 1);
    fg_tensor *y = fgt_ok(fg_add(x, x), "add");
    fg_tensor *dout = fgt_rand(FG_F64, FGT_DIMS(4, 6), 4);
    cr_assert_eq(fg_backward(y, dout), FG_OK, "%s", fg_last_error());
    double *d = fgt_values(dout);
    for (int k = 0; k < 24; k++) d[k] *= 2;
    FGT_ASSERT_CLOSE_BUF(x->grad, d, 24, 0, 0, "x + x");
    free(d);
    fg_release(y), fg_release(dout), fg_release(x);
}

/* add's backward hands its output gradient itself to an input that is an op output with no gradient
 * yet (da = dout, shared instead of copied): later contributions must add into it, the other input
 * gets its own, and x + x still doubles. w is the leaf; h = 3 w the op output the add sees. */
Test(elementwise, an_add_passing_its_output_gradient_down_keeps_every_gradient) {
    enum { R = 4, C = 6, N = R * C };
    for (int form = 0; form < 4; form++) {
        fg_tensor *w = fgt_rand(FG_F64, FGT_DIMS(R, C), 21), *cl = fgt_rand(FG_F64, FGT_DIMS(R, C), 22);
        fg_tensor *bias = fgt_rand(FG_F64, FGT_DIMS(C), 23);
        fg_set_requires_grad(w, 1), fg_set_requires_grad(cl, 1), fg_set_requires_grad(bias, 1);
        fg_tensor *h = fgt_ok(fg_mul_scalar(w, 3.0), "mul_scalar");
        fg_tensor *hb = fgt_ok(fg_mul_scalar(bias, 2.0), "mul_scalar"); /* an op output of shape (C) */
        fg_tensor *y = NULL, *z = NULL;
        switch (form) {
        case 0: /* y = h + h */
            y = fgt_ok(fg_add(h, h), "add");
            break;
        case 1: /* y = (h + c) * h: h's gradient is the add's dout plus the product's */
            z = fgt_ok(fg_add(h, cl), "add");
            y = fgt_ok(fg_mul(z, h), "mul");
            break;
        case 2: /* y = (h + 2 bias) * h: the other input broadcast, its gradient summed over rows */
            z = fgt_ok(fg_add(h, hb), "add");
            y = fgt_ok(fg_mul(z, h), "mul");
            break;
        default: /* y = (2 bias + h) * h: the first input broadcast, so it cannot share */
            z = fgt_ok(fg_add(hb, h), "add");
            y = fgt_ok(fg_mul(z, h), "mul");
            break;
        }
        fg_tensor *dout = fgt_rand(FG_F64, FGT_DIMS(R, C), 24);
        cr_assert_eq(fg_backward(y, dout), FG_OK, "%s", fg_last_error());
        double *d = fgt_values(dout), *wv = fgt_values(w), *cv = fgt_values(cl), *bv = fgt_values(bias);
        double dw[N], dc[N], db[C] = {0};
        for (int k = 0; k < N; k++) {
            const double hk = 3 * wv[k], other = form == 1 ? cv[k] : 2 * bv[k % C];
            /* y = (h + other) h: dh = dout h + dout (h + other); form 0: dh = 2 dout */
            dw[k] = form == 0 ? 6 * d[k] : 3 * (d[k] * hk + d[k] * (hk + other));
            dc[k] = d[k] * hk;
            db[k % C] += 2 * d[k] * hk;
        }
        char what[64];
        snprintf(what, sizeof what, "form %d: dw", form);
        FGT_ASSERT_CLOSE_BUF(w->grad, dw, N, 1e-13, 1e-13, what);
        if (form == 1) FGT_ASSERT_CLOSE_BUF(cl->grad, dc, N, 1e-13, 1e-13, "form 1: dc");
        if (form >= 2) FGT_ASSERT_CLOSE_BUF(bias->grad, db, C, 1e-13, 1e-13, "dbias");
        free(d), free(wv), free(cv), free(bv);
        fg_release(y), fg_release(z), fg_release(dout), fg_release(h), fg_release(hb);
        fg_release(w), fg_release(cl), fg_release(bias);
    }
}

Test(elementwise, binary_ops_float32_agree_with_float64) {
    for (size_t o = 0; o < 4; o++)
        for (size_t c = 0; c < N_BC; c++) {
            const bc_case *bc = &bc_cases[c];
            fg_tensor *a, *b;
            bc_inputs(bc, FG_F64, 3 * c + 1, &a, &b);
            fg_tensor *a32 = fgt_ok(fg_to(a, FG_CPU, FG_F32), "to"), *b32 = fgt_ok(fg_to(b, FG_CPU, FG_F32), "to");
            fg_tensor *o64 = fgt_ok(bin_ops[o].fn(a, b), "f64"), *o32 = fgt_ok(bin_ops[o].fn(a32, b32), "f32");
            cr_assert_eq(o32->dtype, FG_F32, "output dtype");
            FGT_ASSERT_CLOSE(o32, o64, 1e-6, 1e-6, bin_ops[o].name);
            fg_release(a), fg_release(b), fg_release(a32), fg_release(b32), fg_release(o64), fg_release(o32);
        }
}

typedef struct {
    int is_mul;
    double s;
} scalar_arg;
static fg_tensor *scalar_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    const scalar_arg *s = user;
    return s->is_mul ? fg_mul_scalar(in[0], s->s) : fg_add_scalar(in[0], s->s);
}

Test(elementwise, scalar_ops_forward_and_backward) {
    fg_tensor *base = fgt_rand(FG_F64, FGT_DIMS(4, 7), 1);
    fg_tensor *views[2] = {fgt_rand(FG_F64, FGT_DIMS(3, 5), 2), fgt_ok(fg_view_transpose(base, 0, 1), "t")};
    const scalar_arg args[] = {{0, 2.5}, {1, -3.25}, {1, 0.0}};
    for (int v = 0; v < 2; v++)
        for (int k = 0; k < 3; k++) {
            fg_tensor *x = views[v];
            fg_tensor *out = fgt_ok(scalar_fn(&x, 1, (void *)&args[k]), "scalar op");
            int64_t n = fg_numel(x);
            double *ref = fgt_values(x);
            for (int64_t i = 0; i < n; i++) ref[i] = args[k].is_mul ? ref[i] * args[k].s : ref[i] + args[k].s;
            FGT_ASSERT_CLOSE_BUF(out, ref, n, 0, 0, args[k].is_mul ? "mul_scalar" : "add_scalar");
            free(ref);
            fg_release(out);
            fg_set_requires_grad(x, 1);
            FGT_GRADCHECK(args[k].is_mul ? "mul_scalar" : "add_scalar", scalar_fn, &x, 1, (void *)&args[k]);
            fg_set_requires_grad(x, 0);
        }
    fg_release(views[0]), fg_release(views[1]), fg_release(base);
}

/* ============================================================================================
 * reduce
 * ============================================================================================ */

typedef struct {
    int axis, keepdim, mean;
} red_arg;
static fg_tensor *reduce_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    const red_arg *r = user;
    return r->mean ? fg_mean(in[0], r->axis, r->keepdim) : fg_sum(in[0], r->axis, r->keepdim);
}

/* Naive: out over the dims other than `axis` of t, each summing t along it. */
static double *ref_reduce(const fg_tensor *t, int axis, int mean) {
    int64_t O = 1, N = t->shape[axis], I = 1;
    for (int d = 0; d < axis; d++) O *= t->shape[d];
    for (int d = axis + 1; d < t->ndim; d++) I *= t->shape[d];
    double *out = calloc((size_t)(O * I + 1), sizeof *out);
    for (int64_t o = 0; o < O; o++)
        for (int64_t i = 0; i < I; i++) {
            double s = 0;
            for (int64_t k = 0; k < N; k++) s += fg_get(t, (o * N + k) * I + i);
            out[o * I + i] = mean ? s / (double)N : s;
        }
    return out;
}

static fg_tensor *reduce_input(int which, fg_dtype dt) {
    if (which == 0) return fgt_rand(dt, FGT_DIMS(2, 3, 5), 11);
    if (which == 1) return fgt_rand(dt, FGT_DIMS(7), 12);
    if (which == 2) return fgt_rand(dt, FGT_DIMS(1, 1), 13);
    fg_tensor *base = fgt_rand(dt, FGT_DIMS(4, 3, 9), 14); /* a permuted, non-contiguous view */
    fg_tensor *v = fgt_ok(fg_view_permute(base, (int[]){2, 0, 1}), "permute");
    fg_release(base);
    return v;
}

Test(reduce, sum_and_mean_over_every_axis_match_naive_loops) {
    for (int w = 0; w < 4; w++) {
        fg_tensor *t = reduce_input(w, FG_F64);
        for (int axis = -t->ndim; axis < t->ndim; axis++)
            for (int keep = 0; keep < 2; keep++)
                for (int mean = 0; mean < 2; mean++) {
                    red_arg r = {axis, keep, mean};
                    fg_tensor *x = t;
                    fg_tensor *out = fgt_ok(reduce_fn(&x, 1, &r), mean ? "mean" : "sum");
                    int a = axis < 0 ? axis + t->ndim : axis;
                    cr_assert_eq(out->ndim, t->ndim - !keep, "rank %d for axis %d keepdim %d", out->ndim, axis, keep);
                    if (keep) cr_assert_eq(out->shape[a], 1, "kept axis has size %lld", (long long)out->shape[a]);
                    double *ref = ref_reduce(t, a, mean);
                    FGT_ASSERT_CLOSE_BUF(out, ref, fg_numel(out), 1e-14, 1e-14, mean ? "mean" : "sum");
                    free(ref);
                    fg_release(out);
                }
        fg_release(t);
    }
}

Test(reduce, sum_and_mean_backward_match_numeric) {
    for (int w = 0; w < 4; w++) {
        fg_tensor *t = reduce_input(w, FG_F64);
        fg_set_requires_grad(t, 1);
        for (int axis = -1; axis < t->ndim; axis++)
            for (int mean = 0; mean < 2; mean++) {
                red_arg r = {axis, axis & 1, mean};
                FGT_GRADCHECK(mean ? "mean" : "sum", reduce_fn, &t, 1, &r);
            }
        fg_release(t);
    }
}

static fg_tensor *sum_all_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    return user ? fg_mean_all(in[0]) : fg_sum_all(in[0]);
}

Test(reduce, sum_all_and_mean_all_forward_and_backward) {
    for (int w = 0; w < 4; w++) {
        fg_tensor *t = reduce_input(w, FG_F64);
        double s = 0;
        for (int64_t k = 0; k < fg_numel(t); k++) s += fg_get(t, k);
        fg_tensor *sa = fgt_ok(fg_sum_all(t), "sum_all"), *ma = fgt_ok(fg_mean_all(t), "mean_all");
        cr_assert(sa->ndim == 1 && sa->shape[0] == 1, "sum_all shape must be (1)");
        double want[2] = {s, s / (double)fg_numel(t)};
        FGT_ASSERT_CLOSE_BUF(sa, &want[0], 1, 1e-14, 1e-14, "sum_all");
        FGT_ASSERT_CLOSE_BUF(ma, &want[1], 1, 1e-14, 1e-14, "mean_all");
        fg_release(sa), fg_release(ma);
        fg_set_requires_grad(t, 1);
        FGT_GRADCHECK("sum_all", sum_all_fn, &t, 1, NULL);
        FGT_GRADCHECK("mean_all", sum_all_fn, &t, 1, (void *)1);
        fg_release(t);
    }
}

Test(reduce, float32_agrees_with_float64) {
    int64_t big[2] = {3, 20000};
    fg_tensor *t = fgt_rand(FG_F64, 2, big, 5), *t32 = fgt_ok(fg_to(t, FG_CPU, FG_F32), "to");
    for (int axis = 0; axis < 2; axis++) {
        fg_tensor *o64 = fgt_ok(fg_sum(t, axis, 0), "sum"), *o32 = fgt_ok(fg_sum(t32, axis, 0), "sum");
        FGT_ASSERT_CLOSE(o32, o64, 1e-5, 1e-6, "sum f32 vs f64");
        fg_release(o64), fg_release(o32);
    }
    fg_tensor *a64 = fgt_ok(fg_mean_all(t), "mean_all"), *a32 = fgt_ok(fg_mean_all(t32), "mean_all");
    FGT_ASSERT_CLOSE(a32, a64, 1e-7, 1e-6, "mean_all f32 vs f64");
    fg_release(a64), fg_release(a32), fg_release(t), fg_release(t32);
}

/* ============================================================================================
 * shape
 * ============================================================================================ */

Test(shape, reshape_of_a_contiguous_tensor_is_a_view_that_writes_through) {
    fg_tensor *t = fgt_rand(FG_F64, FGT_DIMS(2, 3, 4), 1);
    fg_tensor *r = fgt_ok(fg_reshape(t, FGT_DIMS(6, -1)), "reshape");
    cr_assert(r->ndim == 2 && r->shape[0] == 6 && r->shape[1] == 4, "-1 must infer 4");
    cr_assert_eq(r->storage, t->storage, "reshape of a contiguous tensor must share storage");
    fg_set(r, 13, 42.0);
    cr_assert_eq(fg_get(t, 13), 42.0, "write through the view did not reach the base");
    fg_release(r), fg_release(t);
}

Test(shape, reshape_of_a_non_contiguous_tensor_copies_in_c_order) {
    fg_tensor *base = fgt_rand(FG_F64, FGT_DIMS(3, 4), 1);
    fg_tensor *tv = fgt_ok(fg_transpose(base, 0, 1), "transpose");
    fg_tensor *r = fgt_ok(fg_reshape(tv, FGT_DIMS(12)), "reshape");
    cr_assert_neq(r->storage, base->storage, "expected a copy");
    for (int64_t k = 0; k < 12; k++)
        cr_assert_eq(fg_get(r, k), fg_get(tv, k), "element %lld: %g vs %g", (long long)k, fg_get(r, k), fg_get(tv, k));
    double before = fg_get(base, 0);
    fg_set(r, 0, before + 1.0);
    cr_assert_eq(fg_get(base, 0), before, "a write into the copy changed the original");
    fg_release(r), fg_release(tv), fg_release(base);
}

Test(shape, permute_transpose_and_slice_are_views_with_the_right_elements) {
    fg_tensor *t = fgt_rand(FG_F64, FGT_DIMS(2, 3, 4), 1);
    fg_tensor *p = fgt_ok(fg_permute(t, (int[]){2, 0, 1}), "permute");
    cr_assert(p->shape[0] == 4 && p->shape[1] == 2 && p->shape[2] == 3, "permute shape");
    for (int64_t i = 0; i < 4; i++)
        for (int64_t j = 0; j < 2; j++)
            for (int64_t k = 0; k < 3; k++)
                cr_assert_eq(fg_get(p, (i * 2 + j) * 3 + k), fg_get(t, (j * 3 + k) * 4 + i), "permute element");
    fg_tensor *s = fgt_ok(fg_slice(t, -1, 1, 3), "slice");
    cr_assert(s->shape[2] == 2, "slice shape");
    for (int64_t j = 0; j < 6; j++)
        for (int64_t k = 0; k < 2; k++) cr_assert_eq(fg_get(s, j * 2 + k), fg_get(t, j * 4 + 1 + k), "slice element");
    fg_tensor *tr = fgt_ok(fg_transpose(t, 0, -1), "transpose");
    cr_assert(tr->shape[0] == 4 && tr->shape[2] == 2, "transpose shape");
    fg_set(s, 0, 7.0);
    fg_set(p, 5, 9.0);
    cr_assert_eq(fg_get(t, 1), 7.0, "write through slice");
    cr_assert_eq(fg_get(tr, 5), fg_get(p, 5), "two views of one storage disagree");
    fg_tensor *c = fgt_ok(fg_make_contiguous(p), "make_contiguous");
    cr_assert(fg_is_contiguous(c) && c->storage != t->storage, "make_contiguous of a view must copy");
    fg_set(c, 0, -1.0);
    cr_assert_neq(fg_get(p, 0), -1.0, "a write into the copy reached the original");
    fg_tensor *same = fgt_ok(fg_make_contiguous(t), "make_contiguous");
    cr_assert_eq(same, t, "make_contiguous of a contiguous tensor must return it");
    fg_release(same), fg_release(c), fg_release(tr), fg_release(s), fg_release(p), fg_release(t);
}

typedef struct {
    int kind; /* 0 reshape, 1 permute, 2 transpose, 3 slice, 4 make_contiguous, 5 two overlapping slices */
} view_arg;
static fg_tensor *view_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    fg_tensor *t = in[0];
    switch (((const view_arg *)user)->kind) {
    case 0:
        return fg_reshape(t, FGT_DIMS(-1, 2));
    case 1:
        return fg_permute(t, (int[]){1, 2, 0});
    case 2:
        return fg_transpose(t, 0, 2);
    case 3:
        return fg_slice(t, 1, 1, 3);
    case 4:
        return fg_make_contiguous(t);
    default: {
        fg_tensor *a = fg_slice(t, 2, 0, 3), *b = fg_slice(t, 2, 1, 4);
        fg_tensor *s = (a && b) ? fg_mul(a, b) : NULL;
        fg_release(a), fg_release(b);
        return s;
    }
    }
}

Test(shape, views_backward_match_numeric_for_contiguous_and_strided_inputs) {
    static const char *names[] = {"reshape", "permute", "transpose", "slice", "make_contiguous", "overlapping slices"};
    for (int strided = 0; strided < 2; strided++) {
        fg_tensor *x;
        if (strided) {
            fg_tensor *base = fgt_rand(FG_F64, FGT_DIMS(4, 3, 2), 3);
            x = fgt_ok(fg_view_permute(base, (int[]){2, 1, 0}), "permute"); /* (2, 3, 4), strided */
            fg_release(base);
        } else {
            x = fgt_rand(FG_F64, FGT_DIMS(2, 3, 4), 3);
        }
        fg_set_requires_grad(x, 1);
        for (int k = 0; k < 6; k++) {
            view_arg va = {k};
            FGT_GRADCHECK(names[k], view_fn, &x, 1, &va);
        }
        fg_release(x);
    }
}

/* slice's backward adds into its part of the gradient: two slices of one tensor sum where they overlap. */
Test(shape, overlapping_slices_sum_their_gradients) {
    fg_tensor *x = fgt_leaf(FG_F64, FGT_DIMS(5), 1);
    fg_tensor *a = fgt_ok(fg_slice(x, 0, 0, 3), "slice"), *b = fgt_ok(fg_slice(x, 0, 2, 5), "slice");
    fg_tensor *sa = fgt_ok(fg_sum_all(a), "sum"), *sb = fgt_ok(fg_sum_all(b), "sum");
    fg_tensor *loss = fgt_ok(fg_add(sa, sb), "add");
    cr_assert_eq(fg_backward(loss, NULL), FG_OK, "%s", fg_last_error());
    double want[5] = {1, 1, 2, 1, 1};
    FGT_ASSERT_CLOSE_BUF(x->grad, want, 5, 0, 0, "slice gradients");
    fg_release(loss), fg_release(sa), fg_release(sb), fg_release(a), fg_release(b), fg_release(x);
}
