/* test_attention_limits.c — attention at the edges of its dtype, naive and flash:
 *   - options the inputs' dtype cannot hold (a scale or softcap beyond float32, an ALiBi bias
 *     beyond it) are refused by fg_attention, fg_attention_qkv and the raw kernels with
 *     FG_ERR_ARG, and by `flashgrad attention` with exit 2 and the library's line; the same
 *     options run in float64;
 *   - options that fit but are extreme give exact results: a softcap so large that c·tanh(s/c) is s
 *     equals no softcap bit for bit; a scale of 1e30 gives one-hot weights and lse = the max score;
 *   - scores that overflow the dtype although q, k, v are finite are FG_ERR_NUMERIC (exit 1);
 *   - a NaN in q or k makes O and lse NaN in exactly the rows that see it, in naive and flash, in
 *     both dtypes and on every instruction-set level the CPU has, other rows unchanged;
 *   - window bounds of 2^32 and more mean "unbounded" (no integer overflow);
 *   - `flashgrad gradcheck attention --softcap 1e300` passes (the float32 check is skipped), and
 *     `flashgrad bench attention --device cuda` in a build without CUDA is a usage error (2).
 * Expectations come from the definition (ops/attention.h) or from a run without the NaN / the
 * variant, computed here.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "ops/attention_kernels.h"
#include "ops/ops.h"
#include "ops/cpu/simd.h"
#include "tensor/npy.h"
#include "tests/common.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}

TestSuite(attention_limits, .fini = leak_check, .timeout = 300);

/* ---------------------------------------------------------------------------------------------
 * helpers
 * ------------------------------------------------------------------------------------------- */

/* Do a and b hold the same bits (same numel; NaN matches NaN)? Reports the first difference. */
static void expect_same(const fg_tensor *a, const fg_tensor *b, const char *what) {
    cr_assert_eq(fg_numel(a), fg_numel(b), "%s: numel %lld vs %lld", what, (long long)fg_numel(a),
                 (long long)fg_numel(b));
    for (int64_t i = 0; i < fg_numel(a); i++) {
        const double x = fg_get(a, i), y = fg_get(b, i);
        if (x == y || (isnan(x) && isnan(y))) continue;
        cr_expect(0, "%s: element %lld is %.17g, want %.17g", what, (long long)i, x, y);
        return;
    }
}

/* Is every element finite? */
static int finite_all(const fg_tensor *t) {
    for (int64_t i = 0; i < fg_numel(t); i++)
        if (!isfinite(fg_get(t, i))) return 0;
    return 1;
}

/* fg_attention must refuse: NULL, status st, and a message containing every one of want[]. */
static void expect_refused(fg_tensor *q, fg_tensor *k, fg_tensor *v, const fg_attn_opts *o, fg_status st,
                           const char *const *want, int n_want, const char *what) {
    fg_clear_error();
    fg_tensor *lse = NULL, *out = fg_attention(q, k, v, o, &lse);
    cr_expect(out == NULL, "%s: not refused", what);
    cr_expect_eq(fg_last_status(), st, "%s: status %s, want %s (%s)", what, fg_status_name(fg_last_status()),
                 fg_status_name(st), fg_last_error());
    for (int i = 0; i < n_want; i++)
        cr_expect(strstr(fg_last_error(), want[i]) != NULL, "%s: message lacks '%s': %s", what, want[i],
                  fg_last_error());
    fg_release(out);
    fg_release(lse);
}

/* ---------------------------------------------------------------------------------------------
 * options the dtype cannot hold
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    fg_dtype dt; /* refused in this dtype */
    double scale, softcap, slope;
    const char *word; /* the option, as the message names it */
    int fits_f64;     /* and runs in float64 */
} fit_case;

static const fit_case fit_cases[] = {
    {"scale 1e39", FG_F32, 1e39, 0, 0, "scale", 1},
    {"scale -1e39", FG_F32, -1e39, 0, 0, "scale", 1},
    {"softcap 1e39", FG_F32, 0, 1e39, 0, "softcap", 1},
    {"softcap 1e300", FG_F32, 0, 1e300, 0, "softcap", 1},
    {"softcap 1e-39 (1/c beyond float32)", FG_F32, 0, 1e-39, 0, "softcap", 1},
    {"softcap 1e-310 (1/c beyond float64)", FG_F64, 0, 1e-310, 0, "softcap", 0},
    {"ALiBi slope 1e38 over 15 keys", FG_F32, 0, 0, 1e38, "ALiBi slope", 1},
    {"ALiBi slope 2e307 over 15 keys", FG_F64, 0, 0, 2e307, "ALiBi slope", 0},
};

static fg_attn_opts fit_opts(const fit_case *c, fg_attn_impl impl, double *slopes) {
    fg_attn_opts o = fg_attn_defaults();
    o.impl = impl;
    o.scale = c->scale;
    o.variant.softcap = c->softcap;
    if (c->slope != 0) {
        slopes[0] = 0.5;
        slopes[1] = c->slope;
        o.variant.alibi = 1;
        o.variant.alibi_slopes = slopes;
    }
    return o;
}

Test(attention_limits, options_that_do_not_fit_the_dtype_are_refused_by_the_library) {
    for (size_t ci = 0; ci < sizeof fit_cases / sizeof fit_cases[0]; ci++) {
        const fit_case *c = &fit_cases[ci];
        const char *dn = fg_dtype_name(c->dt);
        for (int impl = 0; impl < 2; impl++) {
            double slopes[2];
            const fg_attn_opts o = fit_opts(c, (fg_attn_impl)impl, slopes);
            char what[160];
            snprintf(what, sizeof what, "%s, %s, %s", c->name, dn, impl ? "flash" : "naive");
            fg_tensor *q = fgt_randn4(c->dt, 1, 2, 16, 4, 1, 3, 1), *k = fgt_randn4(c->dt, 1, 2, 16, 4, 1, 3, 2);
            fg_tensor *v = fgt_randn4(c->dt, 1, 2, 16, 4, 1, 3, 3);
            const char *want[2] = {c->word, dn};
            expect_refused(q, k, v, &o, FG_ERR_ARG, want, 2, what);
            /* the packed projection and the raw kernels refuse too */
            fg_tensor *qkv = fgt_ok(fg_rand_normal(c->dt, FG_CPU, FGT_DIMS(1, 16, 24), 0, 1, 3, 4), "qkv");
            fg_clear_error();
            fg_tensor *y = fg_attention_qkv(qkv, 2, &o);
            cr_expect(y == NULL && fg_last_status() == FG_ERR_ARG, "%s: fg_attention_qkv not refused (%s)", what,
                      fg_last_error());
            fg_release(y);
            fg_release(qkv);
            fg_attn_problem pr;
            cr_assert_eq(fg_attn_problem_init(&pr, 1, 2, 16, 16, 4, &o), FG_OK, "%s: %s", what, fg_last_error());
            cr_expect_eq(fg_attn_problem_check_dtype(&pr, c->dt), FG_ERR_ARG, "%s: check_dtype", what);
            fg_tensor *out = fgt_ok(fg_empty(c->dt, FG_CPU, FGT_DIMS(1, 2, 16, 4)), "o");
            fg_tensor *lse = fgt_ok(fg_empty(c->dt, FG_CPU, FGT_DIMS(1, 2, 16)), "lse");
            fg_status st;
            if (c->dt == FG_F32)
                st = impl ? fg_attn_flash_forward_f32(fg_data(out), fg_data(lse), fg_data(q), fg_data(k), fg_data(v),
                                                      &pr)
                          : fg_attn_naive_forward_f32(fg_data(out), fg_data(lse), NULL, fg_data(q), fg_data(k),
                                                      fg_data(v), &pr);
            else
                st = impl ? fg_attn_flash_forward_f64(fg_data(out), fg_data(lse), fg_data(q), fg_data(k), fg_data(v),
                                                      &pr)
                          : fg_attn_naive_forward_f64(fg_data(out), fg_data(lse), NULL, fg_data(q), fg_data(k),
                                                      fg_data(v), &pr);
            cr_expect_eq(st, FG_ERR_ARG, "%s: the raw forward kernel ran", what);
            fg_release(out), fg_release(lse), fg_release(q), fg_release(k), fg_release(v);
            /* float32's refusals run in float64, with finite outputs */
            if (c->dt == FG_F32 && c->fits_f64) {
                fg_tensor *q64 = fgt_randn4(FG_F64, 1, 2, 16, 4, 1, 3, 1),
                          *k64 = fgt_randn4(FG_F64, 1, 2, 16, 4, 1, 3, 2);
                fg_tensor *v64 = fgt_randn4(FG_F64, 1, 2, 16, 4, 1, 3, 3),
                          *dout = fgt_randn4(FG_F64, 1, 2, 16, 4, 1, 3, 4);
                fgt_attn_run r = fgt_run_attention(q64, k64, v64, dout, &o);
                cr_expect(finite_all(r.o) && finite_all(r.lse) && finite_all(r.dq) && finite_all(r.dk) &&
                              finite_all(r.dv),
                          "%s: float64 outputs not finite", what);
                fgt_attn_run_free(&r);
                fg_release(q64), fg_release(k64), fg_release(v64), fg_release(dout);
            }
        }
    }
}

/* A softcap so large that |s / c| < 2^-12 (float32) or 2^-27 (float64) for every score: then
 * c·tanh(s/c) rounds to s, and the outputs and gradients are those without a softcap, bit for bit
 * — including c near the dtype's largest value, where 1/c and s/c are subnormal. */
Test(attention_limits, a_softcap_too_large_to_matter_equals_no_softcap) {
    const struct {
        fg_dtype dt;
        double c;
    } cases[] = {{FG_F32, 1e38}, {FG_F32, 3.4e38}, {FG_F32, 1e30}, {FG_F64, 1e300}, {FG_F64, 1.7e308}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int impl = 0; impl < 2; impl++)
            for (int causal = 0; causal < 2; causal++) {
                const fg_dtype dt = cases[ci].dt;
                fg_tensor *q = fgt_randn4(dt, 2, 2, 13, 8, 1, 5, 1), *k = fgt_randn4(dt, 2, 2, 11, 8, 1, 5, 2);
                fg_tensor *v = fgt_randn4(dt, 2, 2, 11, 8, 1, 5, 3), *dout = fgt_randn4(dt, 2, 2, 13, 8, 1, 5, 4);
                fg_attn_opts o = fg_attn_defaults();
                o.impl = (fg_attn_impl)impl;
                o.causal = causal;
                o.block_q = 4;
                o.block_k = 5;
                fgt_attn_run plain = fgt_run_attention(q, k, v, dout, &o);
                o.variant.softcap = cases[ci].c;
                fgt_attn_run capped = fgt_run_attention(q, k, v, dout, &o);
                char what[128];
                const char *nm[5] = {"O", "lse", "dQ", "dK", "dV"};
                const fg_tensor *a[5] = {capped.o, capped.lse, capped.dq, capped.dk, capped.dv};
                const fg_tensor *b[5] = {plain.o, plain.lse, plain.dq, plain.dk, plain.dv};
                for (int t = 0; t < 5; t++) {
                    snprintf(what, sizeof what, "softcap %g %s %s causal=%d: %s", cases[ci].c, fg_dtype_name(dt),
                             impl ? "flash" : "naive", causal, nm[t]);
                    expect_same(a[t], b[t], what);
                }
                fgt_attn_run_free(&plain);
                fgt_attn_run_free(&capped);
                fg_release(q), fg_release(k), fg_release(v), fg_release(dout);
            }
}

/* scale 1e30 on unit-size float32 inputs: scores of ~1e30 fit, the max subtraction keeps the
 * softmax finite, and the weights are one-hot: O_i = v at the row's argmax, lse_i = the row's max
 * score (log 1 = 0), and dQ, dK are 0. Naive finds exactly 0 (dS = P∘(dP − Σ P dP) with one P = 1);
 * flash's D = dO·O, summed apart from dP, leaves a few float32 ulps of dP in dS, times scale · K
 * (as at any scale: the floor of fg_attn_gradcheck's check 3) — finite, and tiny next to scale. */
Test(attention_limits, a_huge_scale_that_fits_gives_one_hot_weights) {
    const int64_t N = 9, d = 4;
    for (int impl = 0; impl < 2; impl++) {
        fg_tensor *q = fgt_randn4(FG_F32, 1, 2, N, d, 1, 8, 1), *k = fgt_randn4(FG_F32, 1, 2, N, d, 1, 8, 2);
        fg_tensor *v = fgt_randn4(FG_F32, 1, 2, N, d, 1, 8, 3), *dout = fgt_randn4(FG_F32, 1, 2, N, d, 1, 8, 4);
        fg_attn_opts o = fg_attn_defaults();
        o.impl = (fg_attn_impl)impl;
        o.scale = 1e30;
        fgt_attn_run r = fgt_run_attention(q, k, v, dout, &o);
        for (int64_t h = 0; h < 2; h++)
            for (int64_t i = 0; i < N; i++) {
                /* the scores in double from the float32 inputs; skip rows whose top two are close */
                double best = -INFINITY, second = -INFINITY, mag = 0;
                int64_t arg = -1;
                for (int64_t j = 0; j < N; j++) {
                    double s = 0, a = 0;
                    for (int64_t c = 0; c < d; c++) {
                        const double x = fg_get(q, (h * N + i) * d + c), y = fg_get(k, (h * N + j) * d + c);
                        s += x * y;
                        a += fabs(x * y);
                    }
                    s *= 1e30;
                    if (a * 1e30 > mag) mag = a * 1e30;
                    if (s > best)
                        second = best, best = s, arg = j;
                    else if (s > second)
                        second = s;
                }
                if (best - second < 1e-5 * mag) continue;
                const double L = fg_get(r.lse, h * N + i);
                cr_expect(fabs(L - best) <= 1e-5 * mag, "%s h=%lld i=%lld: lse %g, want %g", impl ? "flash" : "naive",
                          (long long)h, (long long)i, L, best);
                for (int64_t c = 0; c < d; c++)
                    cr_expect_eq(fg_get(r.o, (h * N + i) * d + c), fg_get(v, (h * N + arg) * d + c),
                                 "%s h=%lld i=%lld: O is not v[%lld]", impl ? "flash" : "naive", (long long)h,
                                 (long long)i, (long long)arg);
            }
        double big = 0; /* max |dO| · max |V| · max |K|: dP is at most d times that over |K| */
        double mo = 0, mv = 0, mk = 0;
        for (int64_t e = 0; e < fg_numel(v); e++) {
            mo = fmax(mo, fabs(fg_get(dout, e)));
            mv = fmax(mv, fabs(fg_get(v, e)));
            mk = fmax(mk, fabs(fg_get(k, e)));
        }
        big = mo * mv * mk * (double)d;
        const double lim = impl ? 1e30 * big * 0x1p-20 : 0; /* 8 ulps of dP, times scale · |K| */
        for (int64_t e = 0; e < fg_numel(r.dq); e++) {
            cr_expect(fabs(fg_get(r.dq, e)) <= lim, "%s: dQ[%lld] = %g (at most %g)", impl ? "flash" : "naive",
                      (long long)e, fg_get(r.dq, e), lim);
            cr_expect(fabs(fg_get(r.dk, e)) <= lim, "%s: dK[%lld] = %g (at most %g)", impl ? "flash" : "naive",
                      (long long)e, fg_get(r.dk, e), lim);
        }
        cr_expect(finite_all(r.dv), "dV not finite");
        fgt_attn_run_free(&r);
        fg_release(q), fg_release(k), fg_release(v), fg_release(dout);
    }
}

/* A scale that fits float32 but makes |scale·q·k| exceed it: +inf scores (NaN rows) or a row of
 * −inf scores would be a silent wrong answer, so fg_attention says so. With a NaN input the NaN
 * rows are the answer, and no error. */
Test(attention_limits, scores_that_overflow_the_dtype_are_an_error) {
    const char *want[2] = {"overflow", "float32"};
    for (int impl = 0; impl < 2; impl++) {
        fg_attn_opts o = fg_attn_defaults();
        o.impl = (fg_attn_impl)impl;
        o.scale = 3e38;
        fg_tensor *q = fgt_randn4(FG_F32, 1, 2, 9, 4, 1, 2, 1), *k = fgt_randn4(FG_F32, 1, 2, 9, 4, 1, 2, 2);
        fg_tensor *v = fgt_randn4(FG_F32, 1, 2, 9, 4, 1, 2, 3);
        expect_refused(q, k, v, &o, FG_ERR_NUMERIC, want, 2, impl ? "flash, scale 3e38" : "naive, scale 3e38");
        /* every score of every row −inf: q = k = 1, scale −3e38 */
        fg_tensor *ones = fgt_ok(fg_full(FG_F32, FG_CPU, FGT_DIMS(1, 1, 5, 4), 1.0), "ones");
        o.scale = -3e38;
        o.causal = 1;
        expect_refused(ones, ones, ones, &o, FG_ERR_NUMERIC, want, 2, impl ? "flash, all -inf" : "naive, all -inf");
        /* float64 overflows too, past 1.8e308 */
        fg_tensor *q64 = fgt_randn4(FG_F64, 1, 2, 9, 4, 1, 2, 1);
        o.scale = 1e308;
        o.causal = 0;
        fg_tensor *q64b = fgt_ok(fg_mul_scalar(q64, 1e10), "q64 * 1e10");
        const char *want64[2] = {"overflow", "float64"};
        expect_refused(q64b, q64b, q64b, &o, FG_ERR_NUMERIC, want64, 2, impl ? "flash, float64" : "naive, float64");
        /* a NaN input: NaN rows, no error */
        fg_tensor *qn = fgt_ok(fg_clone(q), "clone");
        ((float *)fg_data(qn))[5] = NAN;
        o.scale = 3e38;
        fg_clear_error();
        fg_tensor *out = fg_attention(qn, k, v, &o, NULL);
        cr_expect(out != NULL, "%s: a NaN input is not an error: %s", impl ? "flash" : "naive", fg_last_error());
        fg_release(out);
        fg_release(q), fg_release(k), fg_release(v), fg_release(ones), fg_release(q64), fg_release(q64b),
            fg_release(qn);
    }
}

/* Rows that see no key keep lse = −inf and O = 0 without an error (causal with Nq > Nk). */
Test(attention_limits, rows_that_see_no_key_are_no_overflow) {
    for (int impl = 0; impl < 2; impl++) {
        fg_tensor *q = fgt_randn4(FG_F32, 1, 1, 7, 4, 1, 4, 1), *k = fgt_randn4(FG_F32, 1, 1, 3, 4, 1, 4, 2);
        fg_attn_opts o = fg_attn_defaults();
        o.impl = (fg_attn_impl)impl;
        o.causal = 1; /* i' = i − 4: rows 0..3 see no key */
        fg_tensor *lse = NULL, *out = fg_attention(q, k, k, &o, &lse);
        cr_assert(out != NULL, "%s", fg_last_error());
        for (int64_t i = 0; i < 7; i++)
            cr_expect(i < 4 ? fg_get(lse, i) == -INFINITY : isfinite(fg_get(lse, i)), "row %lld: lse %g", (long long)i,
                      fg_get(lse, i));
        fg_release(out), fg_release(lse), fg_release(q), fg_release(k);
    }
}

/* ---------------------------------------------------------------------------------------------
 * NaN inputs: NaN rows, the same in naive and flash
 * ------------------------------------------------------------------------------------------- */

/* With a NaN at q[b, h, i, c] (which = 0) or k[b, h, j, c] (which = 1): the rows (b, h, i') that
 * must be NaN — the query row itself, or every row that sees key j. */
static int nan_row(int which, int64_t b0, int64_t h0, int64_t ij, int64_t b, int64_t h, int64_t i, int64_t Nq,
                   int64_t Nk, int causal) {
    if (b != b0 || h != h0) return 0;
    if (which == 0) return i == ij;
    return !causal || ij <= i + Nk - Nq;
}

static void check_nan_rows(int which, fg_dtype dt, fg_attn_impl impl, int causal, double p, int blocks, int64_t Nq,
                           int64_t Nk, const char *level) {
    const int64_t B = 2, H = 2, d = 8, b0 = 1, h0 = 0, ij = which == 0 ? 5 : Nk - 4, c0 = 2;
    fg_tensor *q = fgt_randn4(dt, B, H, Nq, d, 1, 11, 1), *k = fgt_randn4(dt, B, H, Nk, d, 1, 11, 2);
    fg_tensor *v = fgt_randn4(dt, B, H, Nk, d, 1, 11, 3);
    fg_attn_opts o = fg_attn_defaults();
    o.impl = impl;
    o.causal = causal;
    o.dropout_p = p;
    o.seed = 9;
    if (blocks) o.block_q = 4, o.block_k = 5;
    fg_tensor *lse0 = NULL, *o0 = fgt_ok(fg_attention(q, k, v, &o, &lse0), "clean run");
    fg_tensor *bad = which == 0 ? q : k;
    const int64_t N = which == 0 ? Nq : Nk, at = ((b0 * H + h0) * N + ij) * d + c0;
    fg_set(bad, at, NAN);
    fg_tensor *lse1 = NULL, *o1 = fgt_ok(fg_attention(q, k, v, &o, &lse1), "NaN run");
    char what[200];
    snprintf(what, sizeof what, "NaN in %s, %s %s causal=%d p=%g blocks=%d Nq=%lld Nk=%lld simd=%s", which ? "k" : "q",
             fg_dtype_name(dt), fg_attn_impl_name(impl), causal, p, blocks, (long long)Nq, (long long)Nk, level);
    int64_t n_nan = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Nq; i++) {
                const int64_t r = (b * H + h) * Nq + i;
                const int want = nan_row(which, b0, h0, ij, b, h, i, Nq, Nk, causal);
                n_nan += want;
                const double L = fg_get(lse1, r);
                if (want) {
                    cr_expect(isnan(L), "%s: row (%lld, %lld, %lld): lse %g, want NaN", what, (long long)b,
                              (long long)h, (long long)i, L);
                    for (int64_t c = 0; c < d; c++)
                        cr_expect(isnan(fg_get(o1, r * d + c)), "%s: row (%lld, %lld, %lld): O[%lld] = %g, want NaN",
                                  what, (long long)b, (long long)h, (long long)i, (long long)c, fg_get(o1, r * d + c));
                } else {
                    cr_expect(L == fg_get(lse0, r),
                              "%s: row (%lld, %lld, %lld) does not see the NaN: lse %.17g, want "
                              "%.17g",
                              what, (long long)b, (long long)h, (long long)i, L, fg_get(lse0, r));
                    for (int64_t c = 0; c < d; c++)
                        cr_expect(fg_get(o1, r * d + c) == fg_get(o0, r * d + c),
                                  "%s: row (%lld, %lld, %lld) does not see the NaN: O[%lld] = %.17g, want %.17g", what,
                                  (long long)b, (long long)h, (long long)i, (long long)c, fg_get(o1, r * d + c),
                                  fg_get(o0, r * d + c));
                }
            }
    cr_expect(n_nan > 0 && n_nan < B * H * Nq, "%s: %lld NaN rows: the case tests nothing", what, (long long)n_nan);
    fg_release(o0), fg_release(lse0), fg_release(o1), fg_release(lse1), fg_release(q), fg_release(k), fg_release(v);
}

static void nan_rows_on_every_level(int which) {
    const fg_simd_level best = fg_simd_detect(), was = fg_simd_active();
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
        fg_simd_set((fg_simd_level)lv);
        for (int dt = 0; dt < 2; dt++)
            for (int impl = 0; impl < 2; impl++)
                for (int causal = 0; causal < 2; causal++)
                    for (int blocks = 0; blocks < 2; blocks++)
                        for (int shape = 0; shape < 2; shape++) {
                            const int64_t Nq = shape ? 9 : 13, Nk = 13;
                            check_nan_rows(which, dt ? FG_F64 : FG_F32, (fg_attn_impl)impl, causal, 0, blocks, Nq, Nk,
                                           fg_simd_name((fg_simd_level)lv));
                            if (blocks)
                                check_nan_rows(which, dt ? FG_F64 : FG_F32, (fg_attn_impl)impl, causal, 0.3, blocks, Nq,
                                               Nk, fg_simd_name((fg_simd_level)lv));
                        }
    }
    fg_simd_set(was);
}

/* Every score of the row is NaN (flash's running max never leaves −inf, naive's max neither): the
 * row must still read NaN, not "saw no key". */
Test(attention_limits, a_nan_in_q_makes_its_row_nan_in_naive_and_flash) { nan_rows_on_every_level(0); }

/* One score of each row that sees the key is NaN, beside finite ones. */
Test(attention_limits, a_nan_in_k_makes_every_row_that_sees_it_nan) { nan_rows_on_every_level(1); }

/* ---------------------------------------------------------------------------------------------
 * window bounds
 * ------------------------------------------------------------------------------------------- */

/* A bound of 2^32 or more lets every key through on its side, as −1 does; i' ± L must not overflow
 * (INT64_MAX), also for the negative i' of Nq > Nk. */
Test(attention_limits, window_bounds_of_2_to_the_32_and_more_are_unbounded) {
    const int64_t big[] = {(int64_t)1 << 32, INT64_MAX / 2, INT64_MAX};
    for (size_t bi = 0; bi < sizeof big / sizeof big[0]; bi++)
        for (int impl = 0; impl < 2; impl++)
            for (int causal = 0; causal < 2; causal++) {
                fg_tensor *q = fgt_randn4(FG_F64, 1, 2, 12, 4, 1, 6, 1), *k = fgt_randn4(FG_F64, 1, 2, 7, 4, 1, 6, 2);
                fg_tensor *v = fgt_randn4(FG_F64, 1, 2, 7, 4, 1, 6, 3),
                          *dout = fgt_randn4(FG_F64, 1, 2, 12, 4, 1, 6, 4);
                fg_attn_opts o = fg_attn_defaults();
                o.impl = (fg_attn_impl)impl;
                o.causal = causal;
                o.block_q = 4;
                o.block_k = 3;
                o.variant.window = 1;
                o.variant.window_left = -1;
                o.variant.window_right = -1;
                fgt_attn_run want = fgt_run_attention(q, k, v, dout, &o);
                for (int side = 0; side < 3; side++) {
                    o.variant.window_left = side != 1 ? big[bi] : -1;
                    o.variant.window_right = side != 0 ? big[bi] : -1;
                    fgt_attn_run got = fgt_run_attention(q, k, v, dout, &o);
                    char what[128];
                    snprintf(what, sizeof what, "%s causal=%d window %lld,%lld", impl ? "flash" : "naive", causal,
                             (long long)o.variant.window_left, (long long)o.variant.window_right);
                    expect_same(got.o, want.o, what);
                    expect_same(got.lse, want.lse, what);
                    expect_same(got.dq, want.dq, what);
                    expect_same(got.dk, want.dk, what);
                    fgt_attn_run_free(&got);
                }
                fgt_attn_run_free(&want);
                fg_release(q), fg_release(k), fg_release(v), fg_release(dout);
            }
}

/* ---------------------------------------------------------------------------------------------
 * the gradient check
 * ------------------------------------------------------------------------------------------- */

/* softcap 1e300 is plain attention in float64 and does not fit float32: checks 1 and 2 pass,
 * check 3 is skipped with the reason (not failed on float32's inf·0). */
Test(attention_limits, gradcheck_with_a_softcap_float32_cannot_hold_passes_and_skips_float32) {
    fg_attn_opts o = fg_attn_defaults();
    o.variant.softcap = 1e300;
    fg_attn_check_shape sh = {.B = 1, .H = 2, .Nq = 6, .Nk = 7, .d = 4, .seed = 1};
    fg_attn_check_report rep;
    cr_assert_eq(fg_attn_gradcheck(&o, &sh, &rep), FG_OK, "%s", fg_last_error());
    cr_expect(rep.passed, "softcap 1e300 failed the gradient check");
    cr_expect(strstr(rep.f32_skipped, "softcap") && strstr(rep.f32_skipped, "float32"), "f32_skipped: '%s'",
              rep.f32_skipped);
    for (int r = 0; r < rep.n_rows; r++)
        cr_expect(strstr(rep.rows[r].check, "f32") == NULL, "a float32 row ran: %s", rep.rows[r].check);
    o.variant.softcap = 5;
    cr_assert_eq(fg_attn_gradcheck(&o, &sh, &rep), FG_OK, "%s", fg_last_error());
    cr_expect(rep.passed && rep.f32_skipped[0] == '\0', "softcap 5: passed %d, skipped '%s'", rep.passed,
              rep.f32_skipped);
}

/* ---------------------------------------------------------------------------------------------
 * the command line
 * ------------------------------------------------------------------------------------------- */

/* The number of lines of s. */
static int lines_of(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

Test(attention_limits, attention_command_refuses_options_the_dtype_cannot_hold) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char dir[256], cmd[2048], log[4096], p[8][300];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_attn_limits_XXXXXX");
    const char *nm[6] = {"q32", "k32", "v32", "q64", "k64", "v64"};
    for (int i = 0; i < 6; i++) {
        fg_tensor *t = fgt_randn4(i < 3 ? FG_F32 : FG_F64, 1, 2, 8, 4, 1, 21, (uint64_t)(i % 3 + 1));
        snprintf(p[i], sizeof p[i], "%s/%s.npy", dir, nm[i]);
        cr_assert_eq(fg_npy_save(p[i], t), FG_OK, "%s", fg_last_error());
        fg_release(t);
    }
    const struct {
        const char *flags;
        int f64;
        int want;
        const char *words[3];
    } rows[] = {
        {"--softcap 1e39", 0, 2, {"softcap", "1e+39", "float32"}},
        {"--softcap 1e300", 0, 2, {"softcap", "1e+300", "float32"}},
        {"--scale 1e39", 0, 2, {"scale", "1e+39", "3.4e+38"}},
        {"--scale -1e39 --impl naive", 0, 2, {"scale", "-1e+39", "float32"}},
        {"--scale 3e38", 0, 1, {"overflow", "float32", "scale"}},
        {"--softcap 1e300", 1, 0, {NULL}},
        {"--scale 1e39", 1, 0, {NULL}},
        {"--softcap 1e38", 0, 0, {NULL}},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const int base = rows[r].f64 ? 3 : 0;
        snprintf(cmd, sizeof cmd, "rm -rf '%s/out'; %s attention --q %s --k %s --v %s --out %s/out %s 2>&1", dir,
                 fgt_bin(), p[base], p[base + 1], p[base + 2], dir, rows[r].flags);
        const int st = fgt_run_cmd(cmd, log, sizeof log);
        cr_expect_eq(st, rows[r].want, "'%s' (%s) exited %d, want %d: %s", rows[r].flags, rows[r].f64 ? "f64" : "f32",
                     st, rows[r].want, log);
        char o_path[400];
        snprintf(o_path, sizeof o_path, "%s/out/o.npy", dir);
        if (rows[r].want != 0) {
            cr_expect(lines_of(log) == 1 && strncmp(log, "flashgrad attention", 19) == 0,
                      "'%s': want one line from flashgrad attention, got: %s", rows[r].flags, log);
            for (int w = 0; w < 3; w++)
                cr_expect(strstr(log, rows[r].words[w]) != NULL, "'%s': message lacks '%s': %s", rows[r].flags,
                          rows[r].words[w], log);
            cr_expect(access(o_path, F_OK) != 0, "'%s' left %s behind", rows[r].flags, o_path);
            continue;
        }
        fg_tensor *o = fg_npy_load(o_path);
        cr_expect(o != NULL && finite_all(o), "'%s': o.npy missing or not finite", rows[r].flags);
        fg_release(o);
    }
    /* --softcap 1e38 in float32 is plain attention, exactly */
    snprintf(cmd, sizeof cmd, "%s attention --q %s --k %s --v %s --out %s/plain 2>&1", fgt_bin(), p[0], p[1], p[2],
             dir);
    cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "plain run: %s", log);
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/out/o.npy", dir);
    snprintf(b, sizeof b, "%s/plain/o.npy", dir);
    fg_tensor *ta = fg_npy_load(a), *tb = fg_npy_load(b);
    cr_assert(ta && tb, "%s", fg_last_error());
    expect_same(ta, tb, "--softcap 1e38 against no softcap");
    fg_release(ta), fg_release(tb);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    fgt_run_cmd(cmd, NULL, 0);
}

Test(attention_limits, gradcheck_command_with_softcap_1e300_passes) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char cmd[1024], log[8192];
    const char *caps[] = {"1e300", "1e39"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s gradcheck attention --softcap %s 2>&1", fgt_bin(), caps[i]);
        const int st = fgt_run_cmd(cmd, log, sizeof log);
        cr_expect_eq(st, 0, "--softcap %s exited %d:\n%s", caps[i], st, log);
        cr_expect(strstr(log, "gradcheck attention: PASS") && strstr(log, "skipped") && !strstr(log, "FAIL"),
                  "--softcap %s:\n%s", caps[i], log);
    }
}

Test(attention_limits, bench_attention_device_cuda_without_cuda_is_a_usage_error) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char cmd[1024], log[4096];
    snprintf(cmd, sizeof cmd, "%s bench attention --device cuda --n 16 --repeat 1 2>&1", fgt_bin());
    const int st = fgt_run_cmd(cmd, log, sizeof log);
    if (strstr(log, "built without CUDA") == NULL) cr_skip_test("this flashgrad has CUDA: %s", log);
    cr_expect_eq(st, 2, "exited %d, want 2 (as flashgrad attention and train answer): %s", st, log);
    cr_expect(lines_of(log) == 1 && strstr(log, "--device cuda"), "want one line naming --device cuda: %s", log);
}
