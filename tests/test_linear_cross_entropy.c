/* test_linear_cross_entropy.c — the fused LM head + loss, fg_linear_cross_entropy, against the
 * composition it replaces, fg_cross_entropy(fg_linear(x, w, NULL)): the same loss and gradients
 * (bit for bit in one chunk, to rounding in several), gradients against finite differences in
 * float64 in one chunk and in several, dloss scaling, ignored rows, grad mode, and bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/gradcheck.h"
#include "ops/ops.h"
#include "tensor/alloc.h"
#include "tests/common.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}
TestSuite(linear_cross_entropy, .fini = leak_check, .timeout = 120);

enum { R = 23, C = 16, V = 37 };

/* targets of R rows, a few of them ignored (-1) */
static void make_targets(int32_t *t) {
    for (int r = 0; r < R; r++) t[r] = (r * 7 + 3) % V;
    t[4] = -1;
    t[17] = -1;
}

typedef struct {
    const int32_t *t;
    double cap;
    int64_t chunk;
} lce_args;

static fg_tensor *lce_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    const lce_args *a = user;
    return fg_linear_cross_entropy(in[0], in[1], a->t, a->cap, a->chunk);
}

/* loss and the gradients of x and w by the fused op (chunk rows) or, with chunk < 0, the
 * composition cross_entropy(linear) or, with a softcap cap > 0, cross_entropy(softcap(linear)) */
static void run_cap(fg_dtype dt, int64_t chunk, double cap, double dloss, const int32_t *t, double *loss,
                    fg_tensor **dx, fg_tensor **dw) {
    fg_tensor *x = fgt_leaf(dt, FGT_DIMS(R, C), 11), *w = fgt_leaf(dt, FGT_DIMS(V, C), 12);
    fg_tensor *l;
    if (chunk < 0) {
        fg_tensor *logits = fgt_ok(fg_linear(x, w, NULL), "linear");
        fg_tensor *z = cap > 0 ? fgt_ok(fg_softcap(logits, cap), "softcap") : fg_retain(logits);
        l = fgt_ok(fg_cross_entropy(z, t), "cross_entropy");
        fg_release(z);
        fg_release(logits);
    } else {
        l = fgt_ok(fg_linear_cross_entropy(x, w, t, cap, chunk), "linear_cross_entropy");
    }
    cr_assert(l->ndim == 1 && l->shape[0] == 1, "loss shape (1)");
    *loss = fg_get(l, 0);
    int64_t one = 1;
    fg_tensor *seed = fg_full(dt, FG_CPU, 1, &one, dloss);
    cr_assert_eq(fg_backward(l, seed), FG_OK, "%s", fg_last_error());
    *dx = fg_retain(x->grad);
    *dw = fg_retain(w->grad);
    fg_release(seed), fg_release(l), fg_release(x), fg_release(w);
}

static void run(fg_dtype dt, int64_t chunk, double dloss, const int32_t *t, double *loss, fg_tensor **dx,
                fg_tensor **dw) {
    run_cap(dt, chunk, 0, dloss, t, loss, dx, dw);
}

static void expect_same_bits(const fg_tensor *a, const fg_tensor *b, const char *what) {
    cr_assert(a && b, "%s: missing gradient", what);
    cr_assert_eq(fg_nbytes(a), fg_nbytes(b));
    for (int64_t i = 0; i < fg_numel(a); i++)
        if (fg_get(a, i) != fg_get(b, i))
            cr_assert_fail("%s: element %lld is %.9g, the composition's %.9g", what, (long long)i, fg_get(a, i),
                           fg_get(b, i));
}

Test(linear_cross_entropy, one_chunk_is_the_composition_bit_for_bit) {
    int32_t t[R];
    make_targets(t);
    const double dlosses[3] = {1.0, 0.5, 0.25}; /* a unit seed and the seeds of 2 and 4 micro-batches */
    for (int k = 0; k < 3; k++) {
        double lf, lc;
        fg_tensor *dxf, *dwf, *dxc, *dwc;
        run(FG_F32, 0, dlosses[k], t, &lf, &dxf, &dwf);
        run(FG_F32, -1, dlosses[k], t, &lc, &dxc, &dwc);
        cr_expect_eq(lf, lc, "loss %.9g, the composition's %.9g", lf, lc);
        expect_same_bits(dxf, dxc, "dx");
        expect_same_bits(dwf, dwc, "dw");
        fg_release(dxf), fg_release(dwf), fg_release(dxc), fg_release(dwc);
    }
}

Test(linear_cross_entropy, chunks_give_the_same_loss_and_gradients_to_rounding) {
    int32_t t[R];
    make_targets(t);
    double lc;
    fg_tensor *dxc, *dwc;
    run(FG_F32, -1, 1.0, t, &lc, &dxc, &dwc);
    const int64_t chunks[4] = {1, 5, 16, 22};
    for (int k = 0; k < 4; k++) {
        double lf;
        fg_tensor *dxf, *dwf;
        run(FG_F32, chunks[k], 1.0, t, &lf, &dxf, &dwf);
        /* the logits of a row are the same GEMM row in any chunk: the loss sums them in row order */
        cr_expect_eq(lf, lc, "chunk %lld: loss %.9g, the composition's %.9g", (long long)chunks[k], lf, lc);
        FGT_ASSERT_CLOSE(dxf, dxc, 1e-7, 1e-5, "dx in chunks");
        FGT_ASSERT_CLOSE(dwf, dwc, 1e-7, 1e-5, "dw in chunks");
        fg_release(dxf), fg_release(dwf);
    }
    fg_release(dxc), fg_release(dwc);
}

Test(linear_cross_entropy, gradients_match_finite_differences_in_one_chunk_and_in_several) {
    int32_t t[R];
    make_targets(t);
    const int64_t chunks[3] = {0, 4, 7};
    for (int k = 0; k < 3; k++) {
        fg_tensor *in[2] = {fgt_leaf(FG_F64, FGT_DIMS(R, C), 21), fgt_leaf(FG_F64, FGT_DIMS(V, C), 22)};
        lce_args a = {t, 0, chunks[k]};
        FGT_GRADCHECK("linear_cross_entropy", lce_fn, in, 2, &a);
        fg_release(in[0]), fg_release(in[1]);
    }
}

/* The logit softcap inside the chunks: the fused op against cross_entropy(softcap(linear)). The
 * caps 1.5 and 4 bend the test's logits (a few units) hard; 15 is nanochat's. */
static const double caps[3] = {1.5, 4.0, 15.0};

Test(linear_cross_entropy, softcap_in_one_chunk_is_the_composition_bit_for_bit) {
    int32_t t[R];
    make_targets(t);
    const double dlosses[2] = {1.0, 0.5};
    const fg_dtype dts[2] = {FG_F32, FG_F64};
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 3; c++)
            for (int k = 0; k < 2; k++) {
                double lf, lc;
                fg_tensor *dxf, *dwf, *dxc, *dwc;
                run_cap(dts[d], 0, caps[c], dlosses[k], t, &lf, &dxf, &dwf);
                run_cap(dts[d], -1, caps[c], dlosses[k], t, &lc, &dxc, &dwc);
                cr_expect_eq(lf, lc, "cap %g: loss %.17g, the composition's %.17g", caps[c], lf, lc);
                expect_same_bits(dxf, dxc, "dx with a softcap");
                expect_same_bits(dwf, dwc, "dw with a softcap");
                fg_release(dxf), fg_release(dwf), fg_release(dxc), fg_release(dwc);
            }
}

Test(linear_cross_entropy, softcap_in_chunks_gives_the_composition_to_rounding) {
    int32_t t[R];
    make_targets(t);
    const int64_t chunks[3] = {1, 5, 16};
    const fg_dtype dts[2] = {FG_F32, FG_F64};
    for (int d = 0; d < 2; d++)
        for (int c = 0; c < 3; c++) {
            double lc;
            fg_tensor *dxc, *dwc;
            run_cap(dts[d], -1, caps[c], 1.0, t, &lc, &dxc, &dwc);
            const double atol = dts[d] == FG_F32 ? 1e-7 : 1e-15, rtol = dts[d] == FG_F32 ? 1e-5 : 1e-12;
            for (int k = 0; k < 3; k++) {
                double lf;
                fg_tensor *dxf, *dwf;
                run_cap(dts[d], chunks[k], caps[c], 1.0, t, &lf, &dxf, &dwf);
                /* float32: each row's logits are the composition's GEMM row, so its z, lse and the
                 * loss are too; float64's GEMM of one row sums in another order */
                if (dts[d] == FG_F32)
                    cr_expect_eq(lf, lc, "cap %g chunk %lld: loss %.9g, the composition's %.9g", caps[c],
                                 (long long)chunks[k], lf, lc);
                else
                    cr_expect(fabs(lf - lc) <= 1e-12 * fabs(lc), "cap %g chunk %lld: loss %.17g, the composition's %.17g",
                              caps[c], (long long)chunks[k], lf, lc);
                FGT_ASSERT_CLOSE(dxf, dxc, atol, rtol, "dx with a softcap in chunks");
                FGT_ASSERT_CLOSE(dwf, dwc, atol, rtol, "dw with a softcap in chunks");
                fg_release(dxf), fg_release(dwf);
            }
            fg_release(dxc), fg_release(dwc);
        }
}

Test(linear_cross_entropy, softcap_gradients_match_finite_differences) {
    int32_t t[R];
    make_targets(t);
    const int64_t chunks[2] = {0, 7};
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 2; k++) {
            fg_tensor *in[2] = {fgt_leaf(FG_F64, FGT_DIMS(R, C), 21), fgt_leaf(FG_F64, FGT_DIMS(V, C), 22)};
            lce_args a = {t, caps[c], chunks[k]};
            FGT_GRADCHECK("linear_cross_entropy with a softcap", lce_fn, in, 2, &a);
            fg_release(in[0]), fg_release(in[1]);
        }
}

Test(linear_cross_entropy, bad_softcaps_are_errors) {
    int32_t t[R];
    make_targets(t);
    fg_tensor *x = fgt_rand(FG_F32, FGT_DIMS(R, C), 1), *w = fgt_rand(FG_F32, FGT_DIMS(V, C), 2);
    const double bad[3] = {-1.0, INFINITY, NAN};
    for (int k = 0; k < 3; k++) {
        cr_expect_null(fg_linear_cross_entropy(x, w, t, bad[k], 0), "softcap %g", bad[k]);
        cr_expect(fg_last_status() == FG_ERR_ARG && strstr(fg_last_error(), "softcap"), "%s", fg_last_error());
    }
    fg_release(x), fg_release(w);
}

Test(linear_cross_entropy, all_rows_ignored_gives_zero_loss_and_zero_gradients) {
    int32_t t[R];
    for (int r = 0; r < R; r++) t[r] = -1;
    for (int64_t chunk = 0; chunk <= 6; chunk += 6) {
        double l;
        fg_tensor *dx, *dw;
        run(FG_F64, chunk, 1.0, t, &l, &dx, &dw);
        cr_expect_eq(l, 0.0, "loss %g", l);
        for (int64_t i = 0; i < fg_numel(dx); i++) cr_assert_eq(fg_get(dx, i), 0.0, "dx[%lld]", (long long)i);
        for (int64_t i = 0; i < fg_numel(dw); i++) cr_assert_eq(fg_get(dw, i), 0.0, "dw[%lld]", (long long)i);
        fg_release(dx), fg_release(dw);
    }
}

Test(linear_cross_entropy, no_grad_mode_records_nothing_and_gives_the_same_loss) {
    int32_t t[R];
    make_targets(t);
    fg_tensor *x = fgt_leaf(FG_F32, FGT_DIMS(R, C), 11), *w = fgt_leaf(FG_F32, FGT_DIMS(V, C), 12);
    fg_tensor *a = fgt_ok(fg_linear_cross_entropy(x, w, t, 0, 5), "with grad");
    fg_no_grad_enter();
    fg_tensor *b = fgt_ok(fg_linear_cross_entropy(x, w, t, 0, 5), "no grad");
    fg_no_grad_exit();
    cr_expect(a->grad_fn != NULL && b->grad_fn == NULL, "grad_fn %p with grad, %p without", (void *)a->grad_fn,
              (void *)b->grad_fn);
    cr_expect_eq(fg_get(a, 0), fg_get(b, 0));
    fg_release(a), fg_release(b), fg_release(x), fg_release(w);
}

Test(linear_cross_entropy, bad_shapes_targets_and_chunks_are_errors) {
    int32_t t[R];
    make_targets(t);
    fg_tensor *x = fgt_rand(FG_F32, FGT_DIMS(R, C), 1), *w = fgt_rand(FG_F32, FGT_DIMS(V, C), 2);
    fg_tensor *w_bad = fgt_rand(FG_F32, FGT_DIMS(V, C + 1), 3), *w64 = fgt_rand(FG_F64, FGT_DIMS(V, C), 4);
    cr_expect_null(fg_linear_cross_entropy(x, w_bad, t, 0, 0));
    cr_expect_eq(fg_last_status(), FG_ERR_SHAPE, "%s", fg_last_error());
    cr_expect_null(fg_linear_cross_entropy(x, w64, t, 0, 0), "mixed dtypes");
    t[3] = V;
    cr_expect_null(fg_linear_cross_entropy(x, w, t, 0, 0));
    cr_expect(fg_last_status() == FG_ERR_ARG && strstr(fg_last_error(), "row 3"), "%s", fg_last_error());
    t[3] = 0;
    cr_expect_null(fg_linear_cross_entropy(x, w, NULL, 0, 0));
    cr_expect_null(fg_linear_cross_entropy(x, w, t, 0, -1));
    cr_expect_eq(fg_last_status(), FG_ERR_ARG, "%s", fg_last_error());
    fg_release(x), fg_release(w), fg_release(w_bad), fg_release(w64);
}

/* bytes above the live ones at the start that a forward + backward held at its peak */
static double peak_bytes(int fused, int64_t rows, int64_t vocab, int64_t chunk) {
    int32_t *t = malloc((size_t)rows * sizeof *t);
    for (int64_t r = 0; r < rows; r++) t[r] = (int32_t)((r * 13) % vocab);
    fg_tensor *x = fgt_leaf(FG_F32, FGT_DIMS(rows, C), 5), *w = fgt_leaf(FG_F32, FGT_DIMS(vocab, C), 6);
    fg_tensor *gx = fgt_ok(fg_zeros(FG_F32, FG_CPU, 2, (int64_t[]){rows, C}), "zeros");
    fg_tensor *gw = fgt_ok(fg_zeros(FG_F32, FG_CPU, 2, (int64_t[]){vocab, C}), "zeros");
    cr_assert_eq(fg_set_grad_storage(x, gx), FG_OK);
    cr_assert_eq(fg_set_grad_storage(w, gw), FG_OK);
    const uint64_t base = fg_alloc_get_stats(FG_CPU).current;
    fg_alloc_reset_peak(FG_CPU);
    fg_tensor *l;
    if (fused) {
        l = fgt_ok(fg_linear_cross_entropy(x, w, t, 0, chunk), "linear_cross_entropy");
    } else {
        fg_tensor *logits = fgt_ok(fg_linear(x, w, NULL), "linear");
        l = fgt_ok(fg_cross_entropy(logits, t), "cross_entropy");
        fg_release(logits);
    }
    cr_assert_eq(fg_backward(l, NULL), FG_OK, "%s", fg_last_error());
    const double peak = (double)(fg_alloc_get_stats(FG_CPU).peak - base);
    fg_release(l), fg_release(x), fg_release(w), fg_release(gx), fg_release(gw);
    free(t);
    return peak;
}

/* The point of the op: the (rows, V) logits (and their gradient) are never all live. */
Test(linear_cross_entropy, holds_a_chunk_of_logits_not_all_of_them) {
    const int64_t rows = 512, vocab = 1000, chunk = 32;
    const double logits = (double)rows * vocab * sizeof(float);
    const double fused = peak_bytes(1, rows, vocab, chunk), comp = peak_bytes(0, rows, vocab, 0);
    cr_expect_gt(comp, logits, "the composition's peak %.0f bytes, below the logits' %.0f?", comp, logits);
    cr_expect_lt(fused, logits / 4, "the fused op held %.0f bytes at its peak; all the logits are %.0f", fused, logits);
}
