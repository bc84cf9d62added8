/* test_autograd.c — the tape itself, with two tiny ops defined here so that the core is tested
 * without ops/: square(x) = x*x and mulxy(x, y) = x*y, elementwise, contiguous float64. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"

static fg_status square_backward(fg_node *n) {
    /* forward: y = x * x  ->  dx += 2 x dy */
    fg_tensor *x = n->inputs[0], *dx = fg_grad_buffer(x);
    if (!dx) return FG_OK;
    for (int64_t k = 0; k < fg_numel(x); k++) fg_set(dx, k, fg_get(dx, k) + 2 * fg_get(x, k) * fg_get(n->grad_out, k));
    return FG_OK;
}
static fg_tensor *square(fg_tensor *x) {
    fg_tensor *y = fg_empty(x->dtype, x->device, x->ndim, x->shape);
    for (int64_t k = 0; k < fg_numel(x); k++) fg_set(y, k, fg_get(x, k) * fg_get(x, k));
    fg_record(y, "square", square_backward, 1, &x);
    return y;
}
static fg_status mulxy_backward(fg_node *n) {
    /* forward: z = x * y  ->  dx += y dz, dy += x dz */
    fg_tensor *x = n->inputs[0], *y = n->inputs[1];
    fg_tensor *dx = fg_grad_buffer(x), *dy = fg_grad_buffer(y);
    for (int64_t k = 0; k < fg_numel(x); k++) {
        double g = fg_get(n->grad_out, k);
        if (dx) fg_set(dx, k, fg_get(dx, k) + fg_get(y, k) * g);
        if (dy) fg_set(dy, k, fg_get(dy, k) + fg_get(x, k) * g);
    }
    return FG_OK;
}
/* x = (1, 2, 3) */
static fg_tensor *fgt_from_values(const int64_t *shape) {
    fg_tensor *x = fg_empty(FG_F64, FG_CPU, 1, shape);
    for (int64_t k = 0; k < shape[0]; k++) fg_set(x, k, (double)(k + 1));
    return x;
}
/* sum of every element, with its rule: d sum / d x_k = 1 */
static fg_status sum_backward(fg_node *n) {
    fg_tensor *dx;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    if (dx)
        for (int64_t k = 0; k < fg_numel(dx); k++) fg_set(dx, k, fg_get(dx, k) + fg_get(n->grad_out, 0));
    return FG_OK;
}
static fg_tensor *fg_sum_all_test(fg_tensor *x) {
    int64_t one[1] = {1};
    fg_tensor *s = fg_zeros(FG_F64, FG_CPU, 1, one);
    double acc = 0;
    for (int64_t k = 0; k < fg_numel(x); k++) acc += fg_get(x, k);
    fg_set(s, 0, acc);
    fg_record(s, "sum", sum_backward, 1, &x);
    return s;
}
static fg_tensor *mulxy(fg_tensor *x, fg_tensor *y) {
    fg_tensor *z = fg_empty(x->dtype, x->device, x->ndim, x->shape);
    for (int64_t k = 0; k < fg_numel(x); k++) fg_set(z, k, fg_get(x, k) * fg_get(y, k));
    fg_tensor *in[2] = {x, y};
    fg_record(z, "mulxy", mulxy_backward, 2, in);
    return z;
}

static fg_tensor *scalar(double v) {
    int64_t shape[1] = {1};
    fg_tensor *t = fg_full(FG_F64, FG_CPU, 1, shape, v);
    fg_set_requires_grad(t, 1);
    return t;
}

Test(autograd, a_tensor_used_twice_accumulates) {
    /* z = x * x via mulxy(x, x): dz/dx = 2x */
    fg_tensor *x = scalar(3.0);
    fg_tensor *z = mulxy(x, x);
    cr_assert_eq(fg_backward(z, NULL), FG_OK, "%s", fg_last_error());
    cr_expect_eq(fg_get(x->grad, 0), 6.0);
    fg_release(z);
    fg_release(x);
    cr_expect_eq(fg_nodes_alive(), 0);
}

Test(autograd, diamond_graph_sums_both_paths) {
    /* a = x^2; b = a * x; loss = b * a = x^5 -> 5 x^4 */
    fg_tensor *x = scalar(1.5);
    fg_tensor *a = square(x), *b = mulxy(a, x), *loss = mulxy(b, a);
    cr_assert_eq(fg_backward(loss, NULL), FG_OK);
    cr_expect_float_eq(fg_get(x->grad, 0), 5 * pow(1.5, 4), 1e-12);
    fg_release(loss);
    fg_release(b);
    fg_release(a);
    fg_release(x);
    cr_expect_eq(fg_nodes_alive(), 0);
}

Test(autograd, leaf_gradients_accumulate_across_backward_calls_until_zeroed) {
    fg_tensor *x = scalar(2.0);
    for (int i = 0; i < 2; i++) {
        fg_tensor *y = square(x);
        fg_backward(y, NULL);
        fg_release(y);
    }
    cr_expect_eq(fg_get(x->grad, 0), 8.0);
    fg_zero_grad(x);
    cr_expect_eq(fg_get(x->grad, 0), 0.0);
    fg_release(x);
}

Test(autograd, no_grad_scope_records_nothing) {
    fg_tensor *x = scalar(2.0);
    fg_no_grad_enter();
    fg_tensor *y = square(x);
    fg_no_grad_exit();
    cr_expect_null(y->grad_fn);
    cr_expect_not(y->requires_grad);
    cr_expect_eq(fg_backward(y, NULL), FG_ERR_STATE);
    fg_release(y);
    fg_release(x);
}

Test(autograd, second_backward_through_a_freed_graph_is_an_error) {
    fg_tensor *x = scalar(2.0);
    fg_tensor *y = square(x), *z = square(y);
    cr_assert_eq(fg_backward(z, NULL), FG_OK);
    cr_expect_eq(fg_backward(z, NULL), FG_ERR_STATE);
    cr_expect_neq(fg_last_error()[0], '\0');
    fg_release(z);
    fg_release(y);
    fg_release(x);
}

Test(autograd, backward_errors_on_non_scalar_without_gradient) {
    int64_t shape[1] = {3};
    fg_tensor *x = fg_ones(FG_F64, FG_CPU, 1, shape);
    fg_set_requires_grad(x, 1);
    fg_tensor *y = square(x);
    cr_expect_eq(fg_backward(y, NULL), FG_ERR_SHAPE);
    int64_t wrong[1] = {4};
    fg_tensor *g = fg_ones(FG_F64, FG_CPU, 1, wrong);
    cr_expect_eq(fg_backward(y, g), FG_ERR_SHAPE);
    cr_expect_eq(fg_set_requires_grad(y, 1), FG_ERR_ARG, "only leaves can be marked");
    fg_release(g);
    fg_release(y);
    fg_release(x);
}

Test(autograd, grad_get_tells_no_gradient_wanted_from_an_error) {
    int64_t shape[1] = {3};
    fg_tensor *plain = fg_ones(FG_F64, FG_CPU, 1, shape), *leaf = fg_ones(FG_F64, FG_CPU, 1, shape);
    cr_assert_eq(fg_set_requires_grad(leaf, 1), FG_OK);
    fg_tensor *g = (fg_tensor *)1;
    cr_expect_eq(fg_grad_get(plain, &g), FG_OK, "a tensor without requires_grad is not an error");
    cr_expect_null(g, "a tensor without requires_grad has no gradient buffer");
    cr_expect_eq(fg_grad_get(leaf, &g), FG_OK, "%s", fg_last_error());
    cr_assert_not_null(g);
    cr_expect(fg_same_shape(g, leaf) && fg_get(g, 0) == 0 && fg_get(g, 2) == 0,
              "a new gradient is zeros of the leaf's shape");
    fg_release(plain);
    fg_release(leaf);
}

Test(autograd, a_leaf_can_keep_its_gradient_in_external_storage) {
    int64_t shape[1] = {3}, flat_n[1] = {5};
    fg_tensor *flat = fg_zeros(FG_F64, FG_CPU, 1, flat_n);
    fg_tensor *view = fg_view_slice(flat, 0, 1, 4);
    fg_tensor *x = fgt_from_values(shape);
    cr_assert_eq(fg_set_requires_grad(x, 1), FG_OK);
    cr_assert_eq(fg_set_grad_storage(x, view), FG_OK, "%s", fg_last_error());
    fg_tensor *y = square(x), *loss = fg_sum_all_test(y);
    cr_assert_eq(fg_backward(loss, NULL), FG_OK, "%s", fg_last_error());
    /* d sum(x^2) / dx = 2x lands in flat[1..4); flat[0] and flat[4] stay 0 */
    const double want[5] = {0, 2, 4, 6, 0};
    for (int i = 0; i < 5; i++)
        cr_expect_eq(fg_get(flat, i), want[i], "flat[%d] = %g, want %g", i, fg_get(flat, i), want[i]);
    int64_t wrong_n[1] = {2};
    fg_tensor *wrong = fg_zeros(FG_F64, FG_CPU, 1, wrong_n);
    cr_expect_eq(fg_set_grad_storage(x, wrong), FG_ERR_SHAPE, "storage of another shape must be refused");
    cr_expect_eq(fg_set_grad_storage(y, view), FG_ERR_ARG, "only a leaf has gradient storage");
    fg_release(wrong);
    fg_release(loss);
    fg_release(y);
    fg_release(x);
    fg_release(view);
    fg_release(flat);
}

Test(autograd, thousands_of_steps_leak_nothing) {
    fg_tensor *x = scalar(0.5);
    fg_alloc_stats s0 = fg_alloc_get_stats(FG_CPU);
    fg_tensor *w = scalar(1.0);
    /* warm up the allocator, then check a steady state */
    for (int step = 0; step < 2000; step++) {
        fg_tensor *a = square(x), *b = mulxy(a, w), *c = square(b);
        fg_backward(c, NULL);
        fg_release(c);
        fg_release(b);
        fg_release(a);
        fg_zero_grad(x);
        fg_zero_grad(w);
        if (step == 10) s0 = fg_alloc_get_stats(FG_CPU);
    }
    fg_alloc_stats s1 = fg_alloc_get_stats(FG_CPU);
    cr_expect_eq(fg_nodes_alive(), 0);
    cr_expect_eq(s1.current, s0.current, "live bytes grew from %zu to %zu", s0.current, s1.current);
    cr_expect_eq(s1.system_allocs, s0.system_allocs, "steady state should take nothing new from the system");
    fg_release(w);
    fg_release(x);
}

Test(autograd, deep_chain_frees_without_recursion) {
    fg_tensor *x = scalar(1.0);
    fg_tensor *y = fg_retain(x);
    for (int i = 0; i < 100000; i++) {
        fg_tensor *z = mulxy(y, x);
        fg_release(y);
        y = z;
    }
    fg_release(y); /* frees a 100000-node chain */
    cr_expect_eq(fg_nodes_alive(), 0);
    fg_release(x);
}

static fg_tensor *fn_poly(fg_tensor *const *in, int n, void *user) {
    (void)n;
    (void)user;
    fg_tensor *a = square(in[0]), *b = mulxy(a, in[1]);
    fg_release(a);
    return b;
}

Test(gradcheck, passes_correct_rules_and_reports_the_worst_element) {
    int64_t shape[2] = {3, 4};
    fg_tensor *x = fg_rand_uniform(FG_F64, FG_CPU, 2, shape, -2, 2, 1, 0);
    fg_tensor *y = fg_rand_uniform(FG_F64, FG_CPU, 2, shape, -2, 2, 1, 1);
    fg_set_requires_grad(x, 1);
    fg_set_requires_grad(y, 1);
    fg_tensor *in[2] = {x, y};
    fg_gradcheck_report rep;
    cr_assert_eq(fg_gradcheck(fn_poly, in, 2, NULL, NULL, &rep), FG_OK, "%s", fg_last_error());
    cr_expect(rep.passed, "worst: input %d index %lld analytic %g numeric %g", rep.worst_input,
              (long long)rep.worst_index, rep.analytic, rep.numeric);
    cr_expect_eq(rep.checked, 24);
    cr_expect_lt(rep.max_abs_err, 1e-8);
    fg_release(x);
    fg_release(y);
}

static fg_status wrong_backward(fg_node *n) {
    fg_tensor *x = n->inputs[0], *dx = fg_grad_buffer(x);
    for (int64_t k = 0; k < fg_numel(x); k++) fg_set(dx, k, fg_get(dx, k) + 2 * fg_get(n->grad_out, k)); /* forgot x */
    return FG_OK;
}
static fg_tensor *fn_wrong(fg_tensor *const *in, int n, void *user) {
    (void)n;
    (void)user;
    fg_tensor *x = in[0], *y = fg_empty(x->dtype, x->device, x->ndim, x->shape);
    for (int64_t k = 0; k < fg_numel(x); k++) fg_set(y, k, fg_get(x, k) * fg_get(x, k));
    fg_record(y, "wrong", wrong_backward, 1, &x);
    return y;
}

Test(gradcheck, catches_a_wrong_rule) {
    int64_t shape[1] = {5};
    fg_tensor *x = fg_rand_uniform(FG_F64, FG_CPU, 1, shape, 2, 3, 2, 0);
    fg_set_requires_grad(x, 1);
    fg_gradcheck_report rep;
    cr_assert_eq(fg_gradcheck(fn_wrong, &x, 1, NULL, NULL, &rep), FG_OK);
    cr_expect_not(rep.passed);
    cr_expect_gt(fabs(rep.analytic - rep.numeric), 1e-3);
    fg_release(x);
}

Test(gradcheck, refuses_float32_inputs) {
    int64_t shape[1] = {2};
    fg_tensor *x = fg_zeros(FG_F32, FG_CPU, 1, shape);
    fg_set_requires_grad(x, 1);
    fg_gradcheck_report rep;
    cr_expect_eq(fg_gradcheck(fn_poly, &x, 1, NULL, NULL, &rep), FG_ERR_DTYPE);
    fg_release(x);
}

/* The op profile counts every recorded op once per forward and once per backward, charges only
 * while on, and its rows add up to no more than the wall time that passed. */
static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

Test(autograd, the_op_profile_counts_each_forward_and_backward_once) {
    fg_tensor *x = scalar(1.5);
    fg_tensor *warm = mulxy(x, x); /* recorded while off: not counted */
    fg_release(warm);
    const double t0 = wall_now();
    fg_op_profile_start();
    fg_tensor *a = square(x), *b = mulxy(a, x), *loss = mulxy(b, a);
    fg_op_profile_phase("test: between");
    cr_assert_eq(fg_backward(loss, NULL), FG_OK, "%s", fg_last_error());
    fg_op_profile_stop();
    const double wall = wall_now() - t0;
    fg_tensor *after = mulxy(x, x); /* recorded while off again */
    fg_op_profile_row rows[8];
    const int n = fg_op_profile_read(rows, 8);
    int seen_square = 0, seen_mul = 0, seen_phase = 0;
    double sum = 0;
    for (int i = 0; i < n && i < 8; i++) {
        sum += rows[i].fwd_s + rows[i].bwd_s;
        cr_expect(rows[i].fwd_s >= 0 && rows[i].bwd_s >= 0, "%s: negative time", rows[i].name);
        if (!strcmp(rows[i].name, "square")) {
            seen_square = 1;
            cr_expect(rows[i].fwd_n == 1 && rows[i].bwd_n == 1, "square: %lld forward, %lld backward",
                      (long long)rows[i].fwd_n, (long long)rows[i].bwd_n);
        } else if (!strcmp(rows[i].name, "mulxy")) {
            seen_mul = 1;
            cr_expect(rows[i].fwd_n == 2 && rows[i].bwd_n == 2, "mulxy: %lld forward, %lld backward",
                      (long long)rows[i].fwd_n, (long long)rows[i].bwd_n);
        } else if (!strcmp(rows[i].name, "test: between")) {
            seen_phase = 1;
            cr_expect(rows[i].fwd_n == 1 && rows[i].bwd_n == 0, "the phase: %lld, %lld", (long long)rows[i].fwd_n,
                      (long long)rows[i].bwd_n);
        }
    }
    cr_expect(seen_square && seen_mul && seen_phase, "rows: %d (square %d, mulxy %d, phase %d)", n, seen_square,
              seen_mul, seen_phase);
    cr_expect(sum <= wall + 1e-6, "the rows hold %g s of %g s", sum, wall);
    fg_op_profile_start(); /* start clears */
    fg_op_profile_stop();
    cr_expect_eq(fg_op_profile_read(rows, 8), 0);
    fg_release(after);
    fg_release(loss);
    fg_release(b);
    fg_release(a);
    fg_release(x);
    cr_expect_eq(fg_nodes_alive(), 0);
}
