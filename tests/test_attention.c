/* test_attention.c — naive and flash attention, forward and backward.
 *
 * References, from most to least independent:
 *   - numbers from the seed articles (three scores, the six-score block trace);
 *   - a scalar long-double triple loop written here (textbook formula, dropout via fg_attn_keep);
 *   - central finite differences (fg_gradcheck) for the naive backward;
 *   - naive float64 for flash (1e-12 relative), and FlashAttention's float32 rule: the flash error
 *     against a float64 reference is at most twice the naive float32 error against it.
 * Sizes shrink under FG_SANITIZE=1 (make sanitize) where noted.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "ops/attention_kernels.h"
#include "ops/kernels.h"
#include "ops/ops.h"
#include "tests/common.h"
#include "tensor/npy.h"
#include "tensor/philox.h"
#include "ops/cpu/attention_cpu.h" /* the flash items' group sizes */
#include "ops/cpu/simd.h"
#include "ops/cpu/threadpool.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}

TestSuite(attention, .fini = leak_check, .timeout = 300);

/* ---------------------------------------------------------------------------------------------
 * helpers
 * ------------------------------------------------------------------------------------------- */

static fg_tensor *from_values(fg_dtype dt, int64_t B, int64_t H, int64_t N, int64_t d, const double *vals) {
    int64_t shape[4] = {B, H, N, d};
    fg_tensor *t = fg_empty(dt, FG_CPU, 4, shape);
    cr_assert(t, "%s", fg_last_error());
    for (int64_t i = 0; i < fg_numel(t); i++) fg_set(t, i, vals[i]);
    return t;
}

static int all_finite(const fg_tensor *t, int allow_neg_inf, int64_t *bad) {
    for (int64_t i = 0; i < fg_numel(t); i++) {
        double x = fg_get(t, i);
        if (isnan(x) || (isinf(x) && !(allow_neg_inf && x < 0))) {
            *bad = i;
            return 0;
        }
    }
    return 1;
}

static fg_tensor *to_f64(const fg_tensor *t) {
    fg_tensor *r = fg_to(t, FG_CPU, FG_F64);
    cr_assert(r, "%s", fg_last_error());
    return r;
}

/* The textbook formula in long double, one scalar at a time, written independently of ops/:
 * O = (softmax(scale·QKᵀ + mask) ∘ Z) V, lse = logsumexp of the masked row. */
static void reference_forward(const fg_tensor *q, const fg_tensor *k, const fg_tensor *v, const fg_attn_opts *opts,
                              fg_tensor *o, fg_tensor *lse) {
    const int64_t B = q->shape[0], H = q->shape[1], Nq = q->shape[2], Nk = k->shape[2], d = q->shape[3];
    const long double scale = opts->scale != 0 ? opts->scale : 1.0L / sqrtl((long double)d);
    const uint32_t thr = fg_dropout_threshold(opts->dropout_p);
    long double *s = malloc(sizeof(long double) * (size_t)(Nk > 0 ? Nk : 1));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Nq; i++) {
                const int64_t qi = ((b * H + h) * Nq + i) * d;
                long double mx = -INFINITY;
                for (int64_t j = 0; j < Nk; j++) {
                    const int64_t kj = ((b * H + h) * Nk + j) * d;
                    long double acc = 0;
                    for (int64_t c = 0; c < d; c++) acc += (long double)fg_get(q, qi + c) * fg_get(k, kj + c);
                    s[j] = (opts->causal && j > i + Nk - Nq) ? -INFINITY : acc * scale;
                    if (s[j] > mx) mx = s[j];
                }
                long double sum = 0;
                for (int64_t j = 0; j < Nk; j++) sum += mx == -INFINITY ? 0 : expl(s[j] - mx);
                fg_set(lse, (b * H + h) * Nq + i, sum > 0 ? (double)(mx + logl(sum)) : -INFINITY);
                for (int64_t c = 0; c < d; c++) {
                    long double acc = 0;
                    for (int64_t j = 0; j < Nk; j++) {
                        if (sum == 0 || s[j] == -INFINITY) continue;
                        long double p = expl(s[j] - mx) / sum;
                        if (thr)
                            p = fg_attn_keep(opts->seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j)
                                    ? p / (1.0L - opts->dropout_p)
                                    : 0;
                        acc += p * fg_get(v, ((b * H + h) * Nk + j) * d + c);
                    }
                    fg_set(o, qi + c, (double)acc);
                }
            }
    free(s);
}

/* ---------------------------------------------------------------------------------------------
 * the seed articles
 * ------------------------------------------------------------------------------------------- */

/* Scores [0, 1, 2] and values [10, 20, 30]: q = 1, k_j = score_j, v_j = value_j, d = 1, scale 1. */
static double three_scores(fg_dtype dt, fg_attn_impl impl, int block_k, double shift) {
    double qv[1] = {1}, kv[3] = {0 + shift, 1 + shift, 2 + shift}, vv[3] = {10, 20, 30};
    fg_tensor *q = from_values(dt, 1, 1, 1, 1, qv), *k = from_values(dt, 1, 1, 3, 1, kv),
              *v = from_values(dt, 1, 1, 3, 1, vv);
    fg_attn_opts o = fg_attn_defaults();
    o.impl = impl;
    o.scale = 1;
    o.block_k = block_k;
    fg_tensor *out = fg_attention(q, k, v, &o, NULL);
    cr_assert(out, "%s", fg_last_error());
    double r = fg_get(out, 0);
    fg_release(out);
    fg_release(q);
    fg_release(k);
    fg_release(v);
    return r;
}

Test(attention, seed_three_scores_give_25_752104) {
    for (int dt = 0; dt < 2; dt++)
        for (int impl = 0; impl < 2; impl++)
            for (int bk = 1; bk <= 4; bk++)
                for (int sh = 0; sh < 2; sh++) {
                    double shift = sh ? 1000 : 0;
                    double got = three_scores((fg_dtype)dt, (fg_attn_impl)impl, bk, shift);
                    double tol = dt == FG_F64 ? 5e-7 : 5e-5; /* the article prints 6 decimals */
                    cr_expect(fabs(got - 25.752104) <= tol, "%s %s block_k=%d shift=%g: got %.9f, want 25.752104",
                              fg_dtype_name((fg_dtype)dt), fg_attn_impl_name((fg_attn_impl)impl), bk, shift, got);
                }
    /* the exact value, to float64 precision: (10 + 20e + 30e^2) / (1 + e + e^2) */
    const double e = exp(1.0), want = (10 + 20 * e + 30 * e * e) / (1 + e + e * e);
    double got = three_scores(FG_F64, FG_ATTN_FLASH, 1, 1000);
    cr_expect(fabs(got - want) <= 1e-12 * want, "shift 1000, one key per block: %.17g vs %.17g", got, want);
}

Test(attention, online_update_traces_the_six_score_example) {
    /* 001_37883b6d971c1612.txt: one query, six keys, blocks of two */
    const double s[6] = {-1.5058, -0.6387, -0.8939, 1.5231, 0.0306, 1.1040};
    const double want_m[3] = {-0.6387, 1.5231, 1.5231};
    const double want_l[3] = {1.4202, 1.2527, 2.1351};
    const double want_alpha[3] = {0.0, 0.1151, 1.0};
    double m = -INFINITY, l = 0;
    float mf = -INFINITY, lf = 0;
    for (int blk = 0; blk < 3; blk++) {
        double tile[2] = {s[2 * blk], s[2 * blk + 1]};
        float tilef[2] = {(float)s[2 * blk], (float)s[2 * blk + 1]};
        double alpha = fg_attn_online_update_f64(&m, &l, tile, 2);
        float alphaf = fg_attn_online_update_f32(&mf, &lf, tilef, 2);
        cr_expect(fabs(m - want_m[blk]) < 5e-5, "block %d: m = %.5f, want %.4f", blk, m, want_m[blk]);
        cr_expect(fabs(l - want_l[blk]) < 5e-5, "block %d: l = %.5f, want %.4f", blk, l, want_l[blk]);
        cr_expect(fabs(alpha - want_alpha[blk]) < 5e-5, "block %d: rescale = %.5f, want %.4f", blk, alpha,
                  want_alpha[blk]);
        cr_expect(fabs(mf - want_m[blk]) < 5e-5 && fabs(lf - want_l[blk]) < 5e-5 &&
                      fabs(alphaf - want_alpha[blk]) < 5e-5,
                  "float32 block %d: m = %.5f l = %.5f rescale = %.5f", blk, mf, lf, alphaf);
        /* the block's weights are exp(s - m') */
        for (int j = 0; j < 2; j++)
            cr_expect(fabs(tile[j] - exp(s[2 * blk + j] - m)) < 1e-15, "block %d weight %d: %.17g", blk, j, tile[j]);
    }
    /* and the whole row: l is the softmax denominator under the final max */
    double full = 0;
    for (int j = 0; j < 6; j++) full += exp(s[j] - 1.5231);
    cr_expect(fabs(l - full) < 1e-14, "l = %.17g, direct sum = %.17g", l, full);
}

Test(attention, online_update_of_a_fully_masked_block_changes_nothing) {
    double m = -INFINITY, l = 0, s[3] = {-INFINITY, -INFINITY, -INFINITY};
    double a = fg_attn_online_update_f64(&m, &l, s, 3);
    cr_expect(a == 1 && m == -INFINITY && l == 0 && s[0] == 0 && s[2] == 0, "alpha %g m %g l %g", a, m, l);
    double s2[2] = {0.5, -INFINITY};
    a = fg_attn_online_update_f64(&m, &l, s2, 2);
    cr_expect(a == 0 && m == 0.5 && l == 1 && s2[0] == 1 && s2[1] == 0, "alpha %g m %g l %g", a, m, l);
    double s3[2] = {-INFINITY, -INFINITY};
    a = fg_attn_online_update_f64(&m, &l, s3, 2);
    cr_expect(a == 1 && m == 0.5 && l == 1 && s3[0] == 0, "alpha %g m %g l %g", a, m, l);
}

/* ---------------------------------------------------------------------------------------------
 * shapes: flash against naive, and both against the scalar reference
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    int64_t B, H, Nq, Nk, d;
    int causal;
    double p;
    int bq, bk;
} shape_case;

static const shape_case cases[] = {
    {1, 1, 1, 1, 8, 0, 0, 0, 0},
    {1, 1, 1, 1, 8, 1, 0, 0, 0},
    {2, 3, 7, 7, 16, 0, 0, 3, 2}, /* blocks that do not divide N */
    {2, 3, 7, 7, 16, 1, 0.3, 7, 7},
    {1, 2, 64, 64, 32, 0, 0, 16, 32}, /* blocks that divide N */
    {1, 2, 64, 64, 32, 1, 0.2, 16, 32},
    {1, 2, 129, 129, 64, 1, 0, 64, 64},
    {1, 2, 129, 129, 64, 0, 0.1, 0, 0},
    {1, 1, 1000, 1000, 64, 1, 0, 0, 0},
    {1, 1, 1000, 1000, 64, 0, 0.3, 128, 100},
    {2, 2, 7, 19, 8, 1, 0, 4, 5},   /* Nq < Nk, causal: bottom-right */
    {2, 2, 19, 7, 8, 1, 0.5, 4, 5}, /* Nq > Nk, causal: the first 12 rows see nothing */
    {1, 3, 64, 129, 16, 0, 0.5, 32, 64},
    {1, 1, 129, 64, 16, 1, 0.25, 17, 13},
    {1, 1, 5, 3, 1, 0, 0, 2, 2},         /* d = 1 */
    {1, 1, 33, 40, 256, 1, 0.1, 16, 16}, /* d = 256 */
    {1, 1, 9, 9, 8, 1, 0, 1, 1},         /* 1×1 tiles */
    {1, 1, 9, 9, 8, 0, 0, 1000, 1000},   /* one tile bigger than N */
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static fg_attn_opts case_opts(const shape_case *c, fg_attn_impl impl) {
    fg_attn_opts o = fg_attn_defaults();
    o.impl = impl;
    o.causal = c->causal;
    o.dropout_p = c->p;
    o.seed = 0x5eed + (uint64_t)c->Nq;
    o.block_q = c->bq;
    o.block_k = c->bk;
    return o;
}

static void case_inputs_std(const shape_case *c, fg_dtype dt, uint64_t seed, double qk_std, fg_tensor **q,
                            fg_tensor **k, fg_tensor **v, fg_tensor **dout) {
    *q = fgt_randn4(dt, c->B, c->H, c->Nq, c->d, qk_std, seed, 1);
    *k = fgt_randn4(dt, c->B, c->H, c->Nk, c->d, qk_std, seed, 2);
    *v = fgt_randn4(dt, c->B, c->H, c->Nk, c->d, 1.0, seed, 3);
    *dout = fgt_randn4(dt, c->B, c->H, c->Nq, c->d, 1.0, seed, 4);
}
static void case_inputs(const shape_case *c, fg_dtype dt, uint64_t seed, fg_tensor **q, fg_tensor **k, fg_tensor **v,
                        fg_tensor **dout) {
    case_inputs_std(c, dt, seed, 1.0, q, k, v, dout);
}

static int big_case(const shape_case *c) { return c->Nq * c->Nk > 200000; }

Test(attention, naive_and_flash_forward_match_scalar_reference_f64) {
    for (int ci = 0; ci < N_CASES; ci++) {
        const shape_case *c = &cases[ci];
        if (big_case(c) || c->d > 64) continue; /* the scalar loop is slow; the rest is covered below */
        fg_tensor *q, *k, *v, *dout;
        case_inputs(c, FG_F64, 100 + ci, &q, &k, &v, &dout);
        fg_tensor *o_ref = fg_zeros(FG_F64, FG_CPU, 4, (int64_t[]){c->B, c->H, c->Nq, c->d});
        fg_tensor *l_ref = fg_zeros(FG_F64, FG_CPU, 3, (int64_t[]){c->B, c->H, c->Nq});
        fg_attn_opts o = case_opts(c, FG_ATTN_NAIVE);
        reference_forward(q, k, v, &o, o_ref, l_ref);
        for (int impl = 0; impl < 2; impl++) {
            o = case_opts(c, (fg_attn_impl)impl);
            fgt_attn_run r = fgt_run_attention(q, k, v, NULL, &o);
            fgt_cmp eo = fgt_compare(r.o, o_ref, 0, 0), el = fgt_compare(r.lse, l_ref, 0, 0);
            cr_expect(!eo.nonfinite && fgt_rel_err(eo) < 1e-12,
                      "case %d %s: O rel err %.3g at %lld (%.17g vs ref %.17g)", ci, fg_attn_impl_name(o.impl),
                      fgt_rel_err(eo), (long long)eo.worst, eo.worst_actual, eo.worst_expected);
            cr_expect(!el.nonfinite && fgt_rel_err(el) < 1e-12,
                      "case %d %s: lse rel err %.3g at %lld (%.17g vs ref %.17g)", ci, fg_attn_impl_name(o.impl),
                      fgt_rel_err(el), (long long)el.worst, el.worst_actual, el.worst_expected);
            fgt_attn_run_free(&r);
        }
        fg_release(o_ref);
        fg_release(l_ref);
        fg_release(q);
        fg_release(k);
        fg_release(v);
        fg_release(dout);
    }
}

Test(attention, flash_matches_naive_f64_to_1e_12) {
    for (int ci = 0; ci < N_CASES; ci++) {
        const shape_case *c = &cases[ci];
        fg_tensor *q, *k, *v, *dout;
        case_inputs(c, FG_F64, 200 + ci, &q, &k, &v, &dout);
        fg_attn_opts on = case_opts(c, FG_ATTN_NAIVE), of = case_opts(c, FG_ATTN_FLASH);
        fgt_attn_run n = fgt_run_attention(q, k, v, dout, &on), f = fgt_run_attention(q, k, v, dout, &of);
        const fg_tensor *fa[5] = {f.o, f.lse, f.dq, f.dk, f.dv}, *na[5] = {n.o, n.lse, n.dq, n.dk, n.dv};
        const char *names[5] = {"O", "lse", "dQ", "dK", "dV"};
        for (int t = 0; t < 5; t++) {
            fgt_cmp e = fgt_compare(fa[t], na[t], 0, 0);
            cr_expect(!e.nonfinite && fgt_rel_err(e) <= 1e-12,
                      "case %d (B%lld H%lld Nq%lld Nk%lld d%lld causal %d p %g blocks %d,%d): %s rel err %.3g at %lld: "
                      "flash %.17g naive %.17g",
                      ci, (long long)c->B, (long long)c->H, (long long)c->Nq, (long long)c->Nk, (long long)c->d,
                      c->causal, c->p, c->bq, c->bk, names[t], fgt_rel_err(e), (long long)e.worst, e.worst_actual,
                      e.worst_expected);
        }
        fgt_attn_run_free(&n);
        fgt_attn_run_free(&f);
        fg_release(q);
        fg_release(k);
        fg_release(v);
        fg_release(dout);
    }
}

/* FlashAttention's float32 rule: err(flash32, ref64) <= 2 err(naive32, ref64) + floor, where ref64 is naive
 * float64 on the same (float32-rounded) inputs and err is the max abs error. The floor, 2^-21 (4 float32
 * ulps of 1) times the larger of the inputs' scale and the largest reference value, only matters when the
 * naive error is ~0: with one visible key dQ is exactly 0, and naive float32 finds exactly 0 because
 * rowsum(dP∘P) reuses the rounded dP, while flash's D = dO·O does not share dP's rounding. */
static double worst_f32_ratio[2], worst_f32_tight[2], worst_f32_rel[2];
static char worst_f32_where[2][128];

/* Two passes. Unit-normal inputs, as FlashAttention's tests use: the 2x rule. Then q, k with std 3, whose
 * scores (std ~9, up to ~±40) make the softmax peaked. There the D = dO·O shortcut costs accuracy by
 * design: for a row with P_max ≈ 1, dS_max = P_max (dP_max − D) cancels, and naive's rowsum(dP∘P) cancels
 * dP_max's rounding along with it while D = dO·O (from the rounded O) does not. Flash measured up to ~3x
 * the naive error there (after keeping L to float32 precision via lse_lo and summing D in double, which
 * took it down from ~6x), so that pass checks 8x: loose for rounding, tight for any bug. */
Test(attention, flash_f32_error_at_most_twice_naive_f32_error) {
    for (int pass = 0; pass < 2; pass++)
        for (int ci = 0; ci < N_CASES; ci++) {
            const shape_case *c = &cases[ci];
            fg_tensor *q, *k, *v, *dout;
            const double qk_std = pass ? 3.0 : 1.0, factor = pass ? 8.0 : 2.0;
            case_inputs_std(c, FG_F32, 300 + ci + 50 * pass, qk_std, &q, &k, &v, &dout);
            fg_tensor *q64 = to_f64(q), *k64 = to_f64(k), *v64 = to_f64(v), *d64 = to_f64(dout);
            fg_attn_opts on = case_opts(c, FG_ATTN_NAIVE), of = case_opts(c, FG_ATTN_FLASH);
            fgt_attn_run ref = fgt_run_attention(q64, k64, v64, d64, &on);
            fgt_attn_run n = fgt_run_attention(q, k, v, dout, &on), f = fgt_run_attention(q, k, v, dout, &of);
            const fg_tensor *fa[4] = {f.o, f.dq, f.dk, f.dv}, *na[4] = {n.o, n.dq, n.dk, n.dv},
                            *ra[4] = {ref.o, ref.dq, ref.dk, ref.dv};
            const char *names[4] = {"O", "dQ", "dK", "dV"};
            for (int t = 0; t < 4; t++) {
                fgt_cmp ef = fgt_compare(fa[t], ra[t], 0, 0), en = fgt_compare(na[t], ra[t], 0, 0);
                double floor = ldexp(ef.ref_max > qk_std ? ef.ref_max : qk_std, -21);
                double ratio = ef.max_abs / (en.max_abs + floor);
                if (ratio > worst_f32_ratio[pass]) worst_f32_ratio[pass] = ratio;
                if (en.max_abs > floor && ef.max_abs / en.max_abs > worst_f32_tight[pass])
                    worst_f32_tight[pass] = ef.max_abs / en.max_abs;
                fgt_cmp efn = fgt_compare(fa[t], na[t], 0, 0);
                if (fgt_rel_err(efn) > worst_f32_rel[pass]) {
                    worst_f32_rel[pass] = fgt_rel_err(efn);
                    snprintf(worst_f32_where[pass], sizeof worst_f32_where[pass], "case %d %s (abs %.3g)", ci, names[t],
                             efn.max_abs);
                }
                cr_expect(!ef.nonfinite && ef.max_abs <= factor * en.max_abs + floor,
                          "case %d qk std %g (Nq%lld Nk%lld d%lld causal %d p %g blocks %d,%d): %s flash32 err %.3g at "
                          "%lld > "
                          "%g x naive32 err %.3g + %.2g (flash %.9g ref %.9g)",
                          ci, qk_std, (long long)c->Nq, (long long)c->Nk, (long long)c->d, c->causal, c->p, c->bq,
                          c->bk, names[t], ef.max_abs, (long long)ef.worst, factor, en.max_abs, floor, ef.worst_actual,
                          ef.worst_expected);
            }
            fgt_attn_run_free(&ref);
            fgt_attn_run_free(&n);
            fgt_attn_run_free(&f);
            fg_release(q64);
            fg_release(k64);
            fg_release(v64);
            fg_release(d64);
            fg_release(q);
            fg_release(k);
            fg_release(v);
            fg_release(dout);
        }
    for (int pass = 0; pass < 2; pass++)
        fprintf(stderr,
                "[attention] float32, qk std %d, against the f64 reference: worst err(flash)/(err(naive)+floor) "
                "%.3f, worst err(flash)/err(naive) where err(naive) > floor %.3f; worst flash-vs-naive rel err "
                "%.3g at %s\n",
                pass ? 3 : 1, worst_f32_ratio[pass], worst_f32_tight[pass], worst_f32_rel[pass], worst_f32_where[pass]);
}

Test(attention, flash_backward_is_deterministic) {
    const shape_case c = {2, 2, 70, 90, 16, 1, 0.2, 16, 32};
    fg_tensor *q, *k, *v, *dout;
    case_inputs(&c, FG_F32, 7, &q, &k, &v, &dout);
    fg_attn_opts of = case_opts(&c, FG_ATTN_FLASH);
    fgt_attn_run a = fgt_run_attention(q, k, v, dout, &of), b = fgt_run_attention(q, k, v, dout, &of);
    const fg_tensor *x[5] = {a.o, a.lse, a.dq, a.dk, a.dv}, *y[5] = {b.o, b.lse, b.dq, b.dk, b.dv};
    for (int t = 0; t < 5; t++)
        cr_expect(memcmp(fg_data(x[t]), fg_data(y[t]), fg_nbytes(x[t])) == 0, "output %d differs between two runs", t);
    fgt_attn_run_free(&a);
    fgt_attn_run_free(&b);
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(dout);
}

/* ---------------------------------------------------------------------------------------------
 * gradients against finite differences
 * ------------------------------------------------------------------------------------------- */

static fg_tensor *attention_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    return fg_attention(in[0], in[1], in[2], (const fg_attn_opts *)user, NULL);
}

Test(attention, naive_and_flash_backward_match_finite_differences) {
    const shape_case gc[] = {
        {2, 2, 5, 5, 4, 0, 0, 2, 3},   {2, 2, 5, 5, 4, 1, 0, 2, 3},   {1, 2, 6, 4, 3, 0, 0.3, 4, 3},
        {1, 2, 4, 7, 3, 1, 0.3, 3, 2}, {1, 1, 7, 3, 2, 1, 0.5, 2, 2}, /* rows with no key */
    };
    for (size_t ci = 0; ci < sizeof gc / sizeof gc[0]; ci++)
        for (int impl = 0; impl < 2; impl++) {
            const shape_case *c = &gc[ci];
            fg_tensor *in[3], *dout;
            case_inputs(c, FG_F64, 400 + ci, &in[0], &in[1], &in[2], &dout);
            for (int i = 0; i < 3; i++) fg_set_requires_grad(in[i], 1);
            fg_attn_opts o = case_opts(c, (fg_attn_impl)impl);
            fg_gradcheck_report rep;
            fg_gradcheck_opts go = {.eps = 1e-6, .atol = 1e-8, .rtol = 1e-6, .seed = 9};
            cr_assert_eq(fg_gradcheck(attention_fn, in, 3, &o, &go, &rep), FG_OK, "%s", fg_last_error());
            cr_expect(rep.passed,
                      "case %zu %s: input %d index %lld: analytic %.12g numeric %.12g (max abs err %.3g, rel %.3g)", ci,
                      fg_attn_impl_name(o.impl), rep.worst_input, (long long)rep.worst_index, rep.analytic, rep.numeric,
                      rep.max_abs_err, rep.max_rel_err);
            cr_expect_eq(rep.checked, c->B * c->H * (c->Nq + 2 * c->Nk) * c->d, "checked %lld elements",
                         (long long)rep.checked);
            for (int i = 0; i < 3; i++) fg_release(in[i]);
            fg_release(dout);
        }
}

/* ---------------------------------------------------------------------------------------------
 * dropout
 * ------------------------------------------------------------------------------------------- */

Test(attention, dropout_keeps_a_fraction_within_bounds_of_1_minus_p) {
    const double ps[4] = {0.05, 0.1, 0.5, 0.9};
    for (int t = 0; t < 4; t++) {
        const double p = ps[t];
        const uint32_t thr = fg_dropout_threshold(p);
        int64_t kept = 0, n = 0;
        for (uint32_t b = 0; b < 2; b++)
            for (uint32_t h = 0; h < 2; h++)
                for (uint32_t i = 0; i < 256; i++)
                    for (uint32_t j = 0; j < 256; j++, n++) kept += fg_attn_keep(42 + t, thr, b, h, i, j);
        double frac = (double)kept / (double)n, sd = sqrt(p * (1 - p) / (double)n);
        cr_expect(fabs(frac - (1 - p)) < 6 * sd, "p = %g: kept %.5f of %lld, want %.5f +- %.5f", p, frac, (long long)n,
                  1 - p, 6 * sd);
    }
}

Test(attention, dropout_row_helper_equals_fg_attn_keep) {
    const double p = 0.37;
    const uint32_t thr = fg_dropout_threshold(p);
    for (int64_t j0 = 0; j0 < 9; j0++) {
        double x[23];
        float xf[23];
        for (int j = 0; j < 23; j++) x[j] = xf[j] = 1;
        fg_attn_dropout_scale_f64(x, 23, 77, thr, 2.0, 1, 3, 5, j0);
        fg_attn_dropout_scale_f32(xf, 23, 77, thr, 2.0f, 1, 3, 5, j0);
        for (int j = 0; j < 23; j++) {
            double want = fg_attn_keep(77, thr, 1, 3, 5, (uint32_t)(j0 + j)) ? 2.0 : 0.0;
            cr_expect(x[j] == want && xf[j] == (float)want, "j0 %lld j %d: %g / %g, want %g", (long long)j0, j, x[j],
                      (double)xf[j], want);
        }
    }
}

Test(attention, dropout_zero_equals_no_dropout_exactly) {
    const shape_case c = {1, 2, 33, 20, 8, 1, 0, 8, 8};
    for (int impl = 0; impl < 2; impl++) {
        fg_tensor *q, *k, *v, *dout;
        case_inputs(&c, FG_F32, 11, &q, &k, &v, &dout);
        fg_attn_opts a = case_opts(&c, (fg_attn_impl)impl), b = a;
        a.seed = 1;
        b.seed = 987654321;
        b.dropout_p = 0.0;
        fgt_attn_run ra = fgt_run_attention(q, k, v, dout, &a), rb = fgt_run_attention(q, k, v, dout, &b);
        const fg_tensor *x[5] = {ra.o, ra.lse, ra.dq, ra.dk, ra.dv}, *y[5] = {rb.o, rb.lse, rb.dq, rb.dk, rb.dv};
        for (int t = 0; t < 5; t++)
            cr_expect(memcmp(fg_data(x[t]), fg_data(y[t]), fg_nbytes(x[t])) == 0, "%s: output %d differs",
                      fg_attn_impl_name(a.impl), t);
        fgt_attn_run_free(&ra);
        fgt_attn_run_free(&rb);
        fg_release(q);
        fg_release(k);
        fg_release(v);
        fg_release(dout);
    }
}

Test(attention, dropout_changes_the_output_and_depends_on_the_seed) {
    const shape_case c = {1, 1, 16, 16, 8, 0, 0.5, 0, 0};
    fg_tensor *q, *k, *v, *dout;
    case_inputs(&c, FG_F64, 12, &q, &k, &v, &dout);
    fg_attn_opts a = case_opts(&c, FG_ATTN_FLASH), b = a, z = a;
    b.seed = a.seed + 1;
    z.dropout_p = 0;
    fgt_attn_run ra = fgt_run_attention(q, k, v, NULL, &a), rb = fgt_run_attention(q, k, v, NULL, &b),
                 rz = fgt_run_attention(q, k, v, NULL, &z);
    fgt_cmp e1 = fgt_compare(ra.o, rb.o, 0, 0), e2 = fgt_compare(ra.o, rz.o, 0, 0);
    cr_expect(e1.max_abs > 1e-3 && e2.max_abs > 1e-3, "dropout had no effect: %g %g", e1.max_abs, e2.max_abs);
    /* lse is the logsumexp of the scores: dropout does not touch it */
    fgt_cmp el = fgt_compare(ra.lse, rz.lse, 0, 0);
    cr_expect(el.max_abs == 0, "lse changed with dropout: %g", el.max_abs);
    fgt_attn_run_free(&ra);
    fgt_attn_run_free(&rb);
    fgt_attn_run_free(&rz);
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(dout);
}

/* ---------------------------------------------------------------------------------------------
 * edge cases: rows that see nothing, huge scores, odd layouts
 * ------------------------------------------------------------------------------------------- */

Test(attention, rows_that_see_no_key_are_zero_with_zero_gradients) {
    /* Nq = 8 > Nk = 3, causal: query i sees j <= i - 5, so rows 0..4 see nothing */
    const shape_case c = {2, 1, 8, 3, 4, 1, 0, 2, 2};
    for (int dt = 0; dt < 2; dt++)
        for (int impl = 0; impl < 2; impl++)
            for (int drop = 0; drop < 2; drop++) {
                fg_tensor *q, *k, *v, *dout;
                case_inputs(&c, (fg_dtype)dt, 13, &q, &k, &v, &dout);
                fg_attn_opts o = case_opts(&c, (fg_attn_impl)impl);
                o.dropout_p = drop ? 0.4 : 0;
                fgt_attn_run r = fgt_run_attention(q, k, v, dout, &o);
                int64_t bad = -1;
                cr_expect(all_finite(r.o, 0, &bad) && all_finite(r.dq, 0, &bad) && all_finite(r.dk, 0, &bad) &&
                              all_finite(r.dv, 0, &bad) && all_finite(r.lse, 1, &bad),
                          "%s %s: non-finite value at %lld", fg_dtype_name((fg_dtype)dt), fg_attn_impl_name(o.impl),
                          (long long)bad);
                for (int64_t b = 0; b < 2; b++)
                    for (int64_t i = 0; i < 8; i++) {
                        double lse = fg_get(r.lse, b * 8 + i);
                        cr_expect(i < 5 ? lse == -INFINITY : isfinite(lse), "row %lld lse %g", (long long)i, lse);
                        for (int64_t cc = 0; cc < 4; cc++) {
                            int64_t at = (b * 8 + i) * 4 + cc;
                            if (i < 5)
                                cr_expect(fg_get(r.o, at) == 0 && fg_get(r.dq, at) == 0,
                                          "%s row %lld: O %g dQ %g, want 0", fg_attn_impl_name(o.impl), (long long)i,
                                          fg_get(r.o, at), fg_get(r.dq, at));
                        }
                    }
                fgt_attn_run_free(&r);
                fg_release(q);
                fg_release(k);
                fg_release(v);
                fg_release(dout);
            }
}

Test(attention, no_keys_at_all_gives_zeros) {
    fg_tensor *q = fgt_randn4(FG_F32, 1, 2, 5, 4, 1, 1, 1), *k = fgt_randn4(FG_F32, 1, 2, 0, 4, 1, 1, 2),
              *v = fgt_randn4(FG_F32, 1, 2, 0, 4, 1, 1, 3), *dout = fgt_randn4(FG_F32, 1, 2, 5, 4, 1, 1, 4);
    for (int impl = 0; impl < 2; impl++) {
        fg_attn_opts o = fg_attn_defaults();
        o.impl = (fg_attn_impl)impl;
        fgt_attn_run r = fgt_run_attention(q, k, v, dout, &o);
        for (int64_t i = 0; i < fg_numel(r.o); i++)
            cr_expect(fg_get(r.o, i) == 0 && fg_get(r.dq, i) == 0, "%s: O[%lld] = %g", fg_attn_impl_name(o.impl),
                      (long long)i, fg_get(r.o, i));
        for (int64_t i = 0; i < fg_numel(r.lse); i++) cr_expect(fg_get(r.lse, i) == -INFINITY);
        fgt_attn_run_free(&r);
    }
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(dout);
}

Test(attention, huge_scores_stay_finite_in_float32) {
    /* scale 1, q and k entries of size ~70 with d = 4: scores reach about ±1e4 */
    const shape_case c = {1, 2, 40, 50, 4, 0, 0, 16, 16};
    for (int causal = 0; causal < 2; causal++)
        for (int drop = 0; drop < 2; drop++) {
            fg_tensor *q = fgt_randn4(FG_F32, 1, 2, 40, 4, 60, 14, 1), *k = fgt_randn4(FG_F32, 1, 2, 50, 4, 60, 14, 2),
                      *v = fgt_randn4(FG_F32, 1, 2, 50, 4, 1, 14, 3), *dout = fgt_randn4(FG_F32, 1, 2, 40, 4, 1, 14, 4);
            double smax = 0;
            for (int64_t i = 0; i < 40; i++)
                for (int64_t j = 0; j < 50; j++) {
                    double s = 0;
                    for (int cc = 0; cc < 4; cc++) s += fg_get(q, i * 4 + cc) * fg_get(k, j * 4 + cc);
                    if (fabs(s) > smax) smax = fabs(s);
                }
            cr_assert(smax > 5e3 && smax < 1e5, "scores up to %g: the test needs ~1e4", smax);
            fg_tensor *q64 = to_f64(q), *k64 = to_f64(k), *v64 = to_f64(v), *d64 = to_f64(dout);
            fg_attn_opts o = case_opts(&c, FG_ATTN_NAIVE);
            o.scale = 1;
            o.causal = causal;
            o.dropout_p = drop ? 0.2 : 0;
            fgt_attn_run ref = fgt_run_attention(q64, k64, v64, d64, &o);
            for (int impl = 0; impl < 2; impl++) {
                o.impl = (fg_attn_impl)impl;
                fgt_attn_run r = fgt_run_attention(q, k, v, dout, &o);
                const fg_tensor *x[5] = {r.o, r.lse, r.dq, r.dk, r.dv};
                for (int t = 0; t < 5; t++) {
                    int64_t bad = -1;
                    cr_expect(all_finite(x[t], 0, &bad), "%s causal %d drop %d: output %d non-finite at %lld (%g)",
                              fg_attn_impl_name(o.impl), causal, drop, t, (long long)bad,
                              bad >= 0 ? fg_get(x[t], bad) : 0.0);
                }
                /* with softmax this peaked, O is close to the V row of each row's top key */
                fgt_cmp e = fgt_compare(r.o, ref.o, 0, 0);
                cr_expect(fgt_rel_err(e) < 1e-2, "%s: O rel err %g against float64", fg_attn_impl_name(o.impl),
                          fgt_rel_err(e));
                fgt_attn_run_free(&r);
            }
            fgt_attn_run_free(&ref);
            fg_release(q64);
            fg_release(k64);
            fg_release(v64);
            fg_release(d64);
            fg_release(q);
            fg_release(k);
            fg_release(v);
            fg_release(dout);
        }
}

Test(attention, non_contiguous_inputs_match_contiguous_ones) {
    /* q as a (B, N, H, d) tensor permuted to (B, H, N, d), the usual layout after a QKV projection */
    int64_t shape[4] = {2, 9, 3, 8};
    int perm[4] = {0, 2, 1, 3};
    fg_tensor *base = fg_rand_normal(FG_F64, FG_CPU, 4, shape, 0, 1, 21, 1);
    fg_set_requires_grad(base, 1);
    fg_tensor *qv = fg_view_permute(base, perm);
    cr_assert(qv && !fg_is_contiguous(qv));
    fg_tensor *qc = fg_clone(qv);
    fg_tensor *k = fgt_randn4(FG_F64, 2, 3, 11, 8, 1, 21, 2), *v = fgt_randn4(FG_F64, 2, 3, 11, 8, 1, 21, 3);
    fg_tensor *dout = fgt_randn4(FG_F64, 2, 3, 9, 8, 1, 21, 4);
    fg_attn_opts o = fg_attn_defaults();
    o.causal = 1;
    o.block_q = 4;
    o.block_k = 4;
    /* the view does not carry autograd from base (fg_view_* are plain views), so check values only */
    fg_tensor *o1 = fg_attention(qv, k, v, &o, NULL), *o2 = fg_attention(qc, k, v, &o, NULL);
    cr_assert(o1 && o2, "%s", fg_last_error());
    fgt_cmp e = fgt_compare(o1, o2, 0, 0);
    cr_expect(e.max_abs == 0, "strided q gives a different O: %g at %lld", e.max_abs, (long long)e.worst);
    fg_release(o1);
    fg_release(o2);
    fg_release(qv);
    fg_release(qc);
    fg_release(base);
    fg_release(k);
    fg_release(v);
    fg_release(dout);
}

Test(attention, one_tensor_as_q_k_and_v_accumulates_all_three_gradients) {
    fg_tensor *x = fgt_randn4(FG_F64, 1, 2, 10, 4, 1, 22, 1), *dout = fgt_randn4(FG_F64, 1, 2, 10, 4, 1, 22, 2);
    for (int impl = 0; impl < 2; impl++) {
        fg_attn_opts o = fg_attn_defaults();
        o.impl = (fg_attn_impl)impl;
        o.causal = 1;
        o.block_q = o.block_k = 3;
        fgt_attn_run sep = fgt_run_attention(x, x, x, dout, &o);
        fg_tensor *lx = fg_clone(x);
        fg_set_requires_grad(lx, 1);
        fg_tensor *out = fg_attention(lx, lx, lx, &o, NULL);
        cr_assert(out, "%s", fg_last_error());
        cr_assert_eq(fg_backward(out, dout), FG_OK, "%s", fg_last_error());
        fg_tensor *sum = fg_clone(sep.dq);
        fg_axpy(sum, 1, sep.dk);
        fg_axpy(sum, 1, sep.dv);
        fgt_cmp e = fgt_compare(lx->grad, sum, 0, 0);
        cr_expect(fgt_rel_err(e) < 1e-14, "%s: dX vs dQ+dK+dV rel err %g", fg_attn_impl_name(o.impl), fgt_rel_err(e));
        /* a second backward through a new graph adds to the gradient */
        fg_tensor *out2 = fg_attention(lx, lx, lx, &o, NULL);
        cr_assert_eq(fg_backward(out2, dout), FG_OK, "%s", fg_last_error());
        fg_axpy(sum, 1, sum);
        e = fgt_compare(lx->grad, sum, 0, 0);
        cr_expect(fgt_rel_err(e) < 1e-14, "%s: gradients did not accumulate: rel err %g", fg_attn_impl_name(o.impl),
                  fgt_rel_err(e));
        fg_release(out);
        fg_release(out2);
        fg_release(sum);
        fg_release(lx);
        fgt_attn_run_free(&sep);
    }
    fg_release(x);
    fg_release(dout);
}

Test(attention, only_the_inputs_that_want_a_gradient_get_one) {
    fg_tensor *q = fgt_randn4(FG_F64, 1, 1, 6, 4, 1, 23, 1), *k = fgt_randn4(FG_F64, 1, 1, 6, 4, 1, 23, 2),
              *v = fgt_randn4(FG_F64, 1, 1, 6, 4, 1, 23, 3), *dout = fgt_randn4(FG_F64, 1, 1, 6, 4, 1, 23, 4);
    fg_attn_opts o = fg_attn_defaults();
    fgt_attn_run full = fgt_run_attention(q, k, v, dout, &o);
    fg_tensor *lv = fg_clone(v);
    fg_set_requires_grad(lv, 1);
    fg_tensor *out = fg_attention(q, k, lv, &o, NULL);
    cr_assert(out && out->requires_grad, "%s", fg_last_error());
    cr_assert_eq(fg_backward(out, dout), FG_OK, "%s", fg_last_error());
    cr_expect(q->grad == NULL && k->grad == NULL);
    fgt_cmp e = fgt_compare(lv->grad, full.dv, 0, 0);
    cr_expect(e.max_abs == 0, "dV alone differs: %g", e.max_abs);
    fg_release(out);
    fg_release(lv);
    /* no input wants a gradient: no node */
    fg_tensor *o2 = fg_attention(q, k, v, &o, NULL);
    cr_expect(o2 && o2->grad_fn == NULL && !o2->requires_grad);
    fg_release(o2);
    fgt_attn_run_free(&full);
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(dout);
}

/* ---------------------------------------------------------------------------------------------
 * memory: flash allocates nothing of size Nq×Nk, naive does
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    size_t fwd, bwd;
} peak_pair;

/* Peak bytes above what was live before, for a forward that records the graph, then its backward. */
static peak_pair measure_peaks(fg_attn_impl impl, int64_t N, int64_t d) {
    fg_tensor *q = fgt_randn4(FG_F32, 1, 1, N, d, 1, 31, 1), *k = fgt_randn4(FG_F32, 1, 1, N, d, 1, 31, 2),
              *v = fgt_randn4(FG_F32, 1, 1, N, d, 1, 31, 3), *dout = fgt_randn4(FG_F32, 1, 1, N, d, 1, 31, 4);
    fg_set_requires_grad(q, 1);
    fg_set_requires_grad(k, 1);
    fg_set_requires_grad(v, 1);
    fg_attn_opts o = fg_attn_defaults();
    o.impl = impl;
    o.causal = 1;
    peak_pair r;
    fg_alloc_reset_peak(FG_CPU);
    size_t before = fg_alloc_get_stats(FG_CPU).current;
    fg_tensor *out = fg_attention(q, k, v, &o, NULL);
    cr_assert(out, "%s", fg_last_error());
    r.fwd = fg_alloc_get_stats(FG_CPU).peak - before;
    fg_alloc_reset_peak(FG_CPU);
    before = fg_alloc_get_stats(FG_CPU).current;
    cr_assert_eq(fg_backward(out, dout), FG_OK, "%s", fg_last_error());
    r.bwd = fg_alloc_get_stats(FG_CPU).peak - before;
    fg_release(out);
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(dout);
    return r;
}

Test(attention, flash_allocates_nothing_of_size_nq_by_nk) {
    const int64_t N = fgt_sanitize() ? 1024 : 4096, d = 64;
    const size_t nn = (size_t)(N * N) * sizeof(float), nd = (size_t)(N * d) * sizeof(float);
    peak_pair f = measure_peaks(FG_ATTN_FLASH, N, d), n = measure_peaks(FG_ATTN_NAIVE, N, d);
    fprintf(
        stderr,
        "[attention] peak extra bytes, N=%lld d=%lld float32 causal (Nq*Nk*4 = %zu): flash forward %zu backward %zu; "
        "naive forward %zu backward %zu\n",
        (long long)N, (long long)d, nn, f.fwd, f.bwd, n.fwd, n.bwd);
    /* forward: O and lse plus tiles; backward: dQ, dK, dV, the seeded dO, plus tiles */
    cr_expect(f.fwd <= nd + (size_t)N * 4 + (1u << 20), "flash forward peak %zu bytes (O is %zu)", f.fwd, nd);
    cr_expect(f.bwd <= 4 * nd + (size_t)N * 4 + (1u << 20), "flash backward peak %zu bytes (Q is %zu)", f.bwd, nd);
    /* beyond those O(N d) tensors, flash's scratch is tiny next to one Nq x Nk matrix */
    const size_t T = (size_t)fg_pool_threads(); /* flash's scratch is per thread */
    cr_expect(f.fwd - nd < T * nn / 32 && f.bwd - 4 * nd < T * nn / 32,
              "flash scratch: forward %zu backward %zu bytes, not small against Nq*Nk*4 = %zu", f.fwd - nd,
              f.bwd - 4 * nd, nn);
    cr_expect(n.fwd >= nn && n.bwd >= nn, "naive should hold the Nq x Nk matrix: forward %zu backward %zu, Nq*Nk*4 %zu",
              n.fwd, n.bwd, nn);
}

Test(attention, flash_kernels_take_only_tile_scratch) {
    /* the raw kernels: everything they allocate is scratch */
    const int64_t N = 2000, d = 32;
    fg_attn_problem pr;
    fg_attn_opts o = fg_attn_defaults();
    cr_assert_eq(fg_attn_problem_init(&pr, 1, 1, N, N, d, &o), FG_OK, "%s", fg_last_error());
    float *buf = calloc((size_t)(7 * N * d + N), sizeof(float));
    float *q = buf, *k = q + N * d, *v = k + N * d, *out = v + N * d, *dout = out + N * d, *dq = dout + N * d,
          *dk = dq + N * d, *lse = dk + N * d;
    for (int64_t i = 0; i < 3 * N * d; i++) buf[i] = (float)sin((double)i);
    for (int64_t i = 0; i < N * d; i++) dout[i] = (float)cos((double)i);
    fg_alloc_reset_peak(FG_CPU);
    size_t before = fg_alloc_get_stats(FG_CPU).current;
    cr_assert_eq(fg_attn_flash_forward_f32(out, lse, q, k, v, &pr), FG_OK, "%s", fg_last_error());
    size_t fwd = fg_alloc_get_stats(FG_CPU).peak - before;
    fg_alloc_reset_peak(FG_CPU);
    cr_assert_eq(fg_attn_flash_backward_f32(dq, dk, NULL, dout, q, k, v, out, lse, &pr), FG_OK, "%s", fg_last_error());
    size_t bwd = fg_alloc_get_stats(FG_CPU).peak - before;
    size_t tile = (size_t)pr.block_q * pr.block_k * sizeof(float);
    const size_t T = (size_t)fg_pool_threads(); /* flash's scratch is per thread */
    /* forward: a score tile and per query block of its group Qᵢᵀ (d ≤ block_k here, so at most a
     * tile) and three rows of statistics; backward: P and dS, Kⱼᵀ and Vⱼᵀ per key block of its
     * group (a tile each at most) and D */
    const size_t fg = FG_ATTN_FLASH_FWD_GROUP, bg = FG_ATTN_FLASH_BWD_GROUP;
    cr_expect(fwd <= T * ((1 + fg) * tile + 4096), "flash forward kernel scratch %zu bytes, tile %zu", fwd, tile);
    cr_expect(bwd <= T * ((2 + 2 * bg) * tile + (size_t)N * sizeof(float) + 4096),
              "flash backward kernel scratch %zu bytes", bwd);
    cr_expect_eq(fg_alloc_get_stats(FG_CPU).current, before, "the kernels must free their scratch");
    free(buf);
}

/* ---------------------------------------------------------------------------------------------
 * errors
 * ------------------------------------------------------------------------------------------- */

Test(attention, bad_arguments_give_null_and_a_message) {
    fg_tensor *q = fgt_randn4(FG_F32, 2, 3, 5, 4, 1, 1, 1), *k = fgt_randn4(FG_F32, 2, 3, 6, 4, 1, 1, 2),
              *v = fgt_randn4(FG_F32, 2, 3, 6, 4, 1, 1, 3);
    fg_tensor *q64 = fgt_randn4(FG_F64, 2, 3, 5, 4, 1, 1, 1);
    fg_tensor *k_badd = fgt_randn4(FG_F32, 2, 3, 6, 5, 1, 1, 2), *k_badh = fgt_randn4(FG_F32, 2, 2, 6, 4, 1, 1, 2),
              *k_badb = fgt_randn4(FG_F32, 1, 3, 6, 4, 1, 1, 2), *v_badn = fgt_randn4(FG_F32, 2, 3, 7, 4, 1, 1, 3);
    int64_t s3[3] = {2, 15, 4};
    fg_tensor *q3 = fg_zeros(FG_F32, FG_CPU, 3, s3);
    struct {
        const char *what;
        fg_tensor *q, *k, *v;
        fg_attn_opts o;
        fg_status st;
        const char *msg;
    } rows[] = {
        {"rank 3 q", q3, k, v, fg_attn_defaults(), FG_ERR_SHAPE, "rank 3"},
        {"NULL k", q, NULL, v, fg_attn_defaults(), FG_ERR_ARG, "k is NULL"},
        {"d differs", q, k_badd, v, fg_attn_defaults(), FG_ERR_SHAPE, "do not fit"},
        {"H differs", q, k_badh, v, fg_attn_defaults(), FG_ERR_SHAPE, "do not fit"},
        {"B differs", q, k_badb, v, fg_attn_defaults(), FG_ERR_SHAPE, "do not fit"},
        {"Nk of K and V differ", q, k, v_badn, fg_attn_defaults(), FG_ERR_SHAPE, "do not fit"},
        {"dtypes differ", q64, k, v, fg_attn_defaults(), FG_ERR_DTYPE, "float32"},
        {"p = 1", q, k, v, (fg_attn_opts){.impl = FG_ATTN_FLASH, .dropout_p = 1}, FG_ERR_ARG, "[0, 1)"},
        {"p < 0", q, k, v, (fg_attn_opts){.impl = FG_ATTN_NAIVE, .dropout_p = -0.1}, FG_ERR_ARG, "[0, 1)"},
        {"p NaN", q, k, v, (fg_attn_opts){.impl = FG_ATTN_FLASH, .dropout_p = NAN}, FG_ERR_ARG, "[0, 1)"},
        {"scale inf", q, k, v, (fg_attn_opts){.impl = FG_ATTN_FLASH, .scale = INFINITY}, FG_ERR_ARG, "scale"},
        {"block_q < 0", q, k, v, (fg_attn_opts){.impl = FG_ATTN_FLASH, .block_q = -1}, FG_ERR_ARG, "block"},
        {"block_k too big", q, k, v, (fg_attn_opts){.impl = FG_ATTN_FLASH, .block_k = FG_ATTN_MAX_BLOCK + 1},
         FG_ERR_ARG, "block"},
        {"unknown impl", q, k, v, (fg_attn_opts){.impl = (fg_attn_impl)7}, FG_ERR_ARG, "implementation"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fg_clear_error();
        fg_tensor *lse = (fg_tensor *)1;
        fg_tensor *out = fg_attention(rows[i].q, rows[i].k, rows[i].v, &rows[i].o, &lse);
        cr_expect(out == NULL && lse == NULL, "%s: expected NULL", rows[i].what);
        cr_expect_eq(fg_last_status(), rows[i].st, "%s: status %s, want %s (%s)", rows[i].what,
                     fg_status_name(fg_last_status()), fg_status_name(rows[i].st), fg_last_error());
        cr_expect(strstr(fg_last_error(), rows[i].msg) != NULL, "%s: message '%s' lacks '%s'", rows[i].what,
                  fg_last_error(), rows[i].msg);
        fg_release(out);
    }
    fg_tensor *all[] = {q, k, v, q64, k_badd, k_badh, k_badb, v_badn, q3};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fg_release(all[i]);
}

/* ---------------------------------------------------------------------------------------------
 * the command line and PyTorch
 * ------------------------------------------------------------------------------------------- */

static int file_exists(const char *path) {
    struct stat s;
    return stat(path, &s) == 0;
}

Test(attention, cli_rejects_bad_usage_and_writes_nothing) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char dir[] = "/tmp/fg_attn_cli_XXXXXX";
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    char qp[256], kp[256], vp[256], kbad[256], out[256], cmd[2048], log[4096];
    snprintf(qp, sizeof qp, "%s/q.npy", dir);
    snprintf(kp, sizeof kp, "%s/k.npy", dir);
    snprintf(vp, sizeof vp, "%s/v.npy", dir);
    snprintf(kbad, sizeof kbad, "%s/kbad.npy", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    fg_tensor *q = fgt_randn4(FG_F32, 1, 2, 5, 4, 1, 3, 1), *k = fgt_randn4(FG_F32, 1, 2, 6, 4, 1, 3, 2),
              *v = fgt_randn4(FG_F32, 1, 2, 6, 4, 1, 3, 3), *kb = fgt_randn4(FG_F32, 1, 2, 6, 3, 1, 3, 2);
    cr_assert(fg_npy_save(qp, q) == FG_OK && fg_npy_save(kp, k) == FG_OK && fg_npy_save(vp, v) == FG_OK &&
                  fg_npy_save(kbad, kb) == FG_OK,
              "%s", fg_last_error());
    struct {
        const char *args;
        int want;
    } rows[] = {
        {"--q %1$s/q.npy --k %1$s/k.npy --v %1$s/v.npy --out %1$s/out --bogus", 2},
        {"--q %1$s/q.npy --k %1$s/k.npy --out %1$s/out", 2}, /* no --v */
        {"--q %1$s/q.npy --k %1$s/k.npy --v %1$s/v.npy", 2}, /* no --out */
        {"--q %1$s/q.npy --k %1$s/k.npy --v %1$s/v.npy --out %1$s/out --impl fast", 2},
        {"--q %1$s/q.npy --k %1$s/k.npy --v %1$s/v.npy --out %1$s/out --dropout 1", 2},
        {"--q %1$s/q.npy --k %1$s/k.npy --v %1$s/v.npy --out %1$s/out --dropout abc", 2},
        {"--q %1$s/q.npy --k %1$s/k.npy --v %1$s/v.npy --out %1$s/out --block-q 0x", 2},
        {"--q %1$s/q.npy --k %1$s/k.npy --v %1$s/v.npy --out %1$s/out --block-k -3", 2},
        {"--q %1$s/q.npy --k %1$s/k.npy --v %1$s/v.npy --out %1$s/out --scale", 2},
        {"--q %1$s/missing.npy --k %1$s/k.npy --v %1$s/v.npy --out %1$s/out", 1},
        {"--q %1$s/q.npy --k %1$s/kbad.npy --v %1$s/v.npy --out %1$s/out", 1},              /* d differs */
        {"--q %1$s/q.npy --k %1$s/k.npy --v %1$s/v.npy --do %1$s/k.npy --out %1$s/out", 1}, /* dO shape */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char args[1024];
        snprintf(args, sizeof args, rows[i].args, dir);
        snprintf(cmd, sizeof cmd, "%s attention %s 2>&1", fgt_bin(), args);
        int st = fgt_run_cmd(cmd, log, sizeof log);
        cr_expect_eq(st, rows[i].want, "'%s' exited %d, want %d; output: %s", args, st, rows[i].want, log);
        int lines = 0;
        for (char *c = log; *c; c++) lines += *c == '\n';
        cr_expect(lines == 1 && strncmp(log, "flashgrad", 9) == 0, "'%s': want one line starting 'flashgrad', got: %s",
                  args, log);
        char o_path[300];
        snprintf(o_path, sizeof o_path, "%s/o.npy", out);
        cr_expect(!file_exists(o_path), "'%s' left %s behind", args, o_path);
    }
    /* and a good run writes all five files */
    snprintf(cmd, sizeof cmd, "%s attention --q %s --k %s --v %s --do %s --out %s --impl naive --causal 2>&1",
             fgt_bin(), qp, kp, vp, qp, out);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, 0, "good run exited %d: %s", st, log);
    const char *names[5] = {"o", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        char path[300];
        snprintf(path, sizeof path, "%s/%s.npy", out, names[i]);
        fg_tensor *t = fg_npy_load(path);
        cr_expect(t != NULL, "%s: %s", path, fg_last_error());
        if (t) cr_expect_eq(t->dtype, FG_F32, "%s is %s", path, fg_dtype_name(t->dtype));
        fg_release(t);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    fgt_run_cmd(cmd, NULL, 0);
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(kb);
}

Test(attention, gradcheck_command_passes_and_prints_a_table) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char cmd[1024], log[8192];
    snprintf(cmd, sizeof cmd,
             "%s gradcheck attention --b 1 --h 2 --nq 6 --nk 9 --d 4 --causal --dropout 0.2 --seed 3 "
             "--block-q 4 --block-k 3 2>&1",
             fgt_bin());
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, 0, "gradcheck exited %d:\n%s", st, log);
    cr_expect(strstr(log, "dQ") && strstr(log, "dK") && strstr(log, "dV") && strstr(log, "PASS"), "table:\n%s", log);
    snprintf(cmd, sizeof cmd, "%s gradcheck attention --nq 0x 2>&1", fgt_bin());
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 2, "bad flag value: %s", log);
    snprintf(cmd, sizeof cmd, "%s gradcheck softmax 2>&1", fgt_bin());
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 2, "unknown target: %s", log);
}

/* float32 flash through the portable tile operations (BLAS products, libm's exp: what a CPU without
 * AVX2+FMA runs; FG_ATTN_GEMM=blas selects it, read once per process, hence the subprocess) passes
 * the same checks as the default path: flash f32 against naive f64, and flash f64 against naive. */
Test(attention, portable_float32_tiles_pass_gradcheck) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    const char *variants[] = {"--causal --dropout 0.2", "--gqa 1 --window 3,1 --alibi --softcap 2"};
    for (int c = 0; c < 2; c++) {
        char cmd[1024], log[8192];
        snprintf(cmd, sizeof cmd,
                 "FG_ATTN_GEMM=blas %s gradcheck attention --b 2 --h 2 --nq 7 --nk 10 --d 5 %s --seed 4 "
                 "--block-q 4 --block-k 3 2>&1",
                 fgt_bin(), variants[c]);
        int st = fgt_run_cmd(cmd, log, sizeof log);
        cr_expect_eq(st, 0, "%s: gradcheck exited %d:\n%s", variants[c], st, log);
        cr_expect(strstr(log, "flash f32") && strstr(log, "PASS"), "%s: table:\n%s", variants[c], log);
    }
}

Test(attention, matches_pytorch_autograd_through_the_cli, .timeout = 600) {
    const char *what = "PyTorch cross-check of attention";
    fgt_python_require(what, "numpy torch");
    if (access(fgt_bin(), X_OK) != 0) fgt_skip(what, "no flashgrad binary (set FG_BIN; make test does)");
    const char *script = "tests/attention_torch_check.py";
    if (access(script, R_OK) != 0) fgt_skip(what, "tests/attention_torch_check.py not found (run from the repo root)");
    char env[1024], log[16384];
    snprintf(env, sizeof env, "FG_BIN='%s'", fgt_bin());
    int st = fgt_python_run(env, script, fgt_sanitize() ? "--quick" : "", log, sizeof log);
    if (st == FGT_PYTHON_CANNOT_RUN) fgt_skip(what, log);
    cr_expect_eq(st, 0, "attention_torch_check.py exited %d:\n%s", st, log);
}

/* ---------------------------------------------------------------------------------------------
 * fg_attention_qkv: the packed (B, T, (H + 2 H_kv) d) projection
 * ------------------------------------------------------------------------------------------- */

/* y and d(qkv) through the composite of views: slice, permute, fg_attention, permute, reshape. */
static void qkv_composite(fg_tensor *qkv, int64_t H, int64_t Hkv, const fg_attn_opts *o, fg_tensor *dy,
                          fg_tensor **y_out, fg_tensor **g_out) {
    const int64_t B = qkv->shape[0], T = qkv->shape[1], d = qkv->shape[2] / (H + 2 * Hkv);
    fg_tensor *r = fgt_ok(fg_reshape(qkv, 4, (int64_t[]){B, T, H + 2 * Hkv, d}), "reshape");
    const int64_t lo[3] = {0, H, H + Hkv}, hi[3] = {H, H + Hkv, H + 2 * Hkv};
    fg_tensor *part[3];
    for (int s = 0; s < 3; s++) {
        fg_tensor *sl = fgt_ok(fg_slice(r, 2, lo[s], hi[s]), "slice");
        part[s] = fgt_ok(fg_permute(sl, (int[]){0, 2, 1, 3}), "permute");
        fg_release(sl);
    }
    fg_tensor *out = fgt_ok(fg_attention(part[0], part[1], part[2], o, NULL), "attention");
    fg_tensor *ot = fgt_ok(fg_permute(out, (int[]){0, 2, 1, 3}), "permute");
    fg_tensor *y = fgt_ok(fg_reshape(ot, 3, (int64_t[]){B, T, H * d}), "reshape");
    cr_assert_eq(fg_backward(y, dy), FG_OK, "%s", fg_last_error());
    *y_out = y;
    *g_out = fg_clone(qkv->grad);
    fg_zero_grad(qkv);
    fg_release(r), fg_release(part[0]), fg_release(part[1]), fg_release(part[2]), fg_release(out), fg_release(ot);
}

/* keys at an even distance from the query, for the mask callback below */
static int qkv_even_mask(int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)b, (void)h, (void)user;
    return (i - j) % 2 == 0;
}

/* Flash on the CPU runs on the packed rows in place, naive on gathered heads: both must give the
 * composite's bits, on every SIMD level, with every variant the kernels address rows for. */
Test(attention, packed_qkv_equals_the_composite_of_views_bit_for_bit) {
    typedef struct {
        int64_t B, T, H, Hkv, d;
        int impl, causal;
        double p;
        fg_dtype dt;
        int bq, bk, window, alibi, mask;
        double softcap;
    } qkv_case;
    const qkv_case cases[] = {
        {2, 64, 4, 4, 32, FG_ATTN_FLASH, 1, 0.0, FG_F32, 0, 0, 0, 0, 0, 0}, /* the Tiny Shakespeare block */
        {3, 37, 4, 2, 8, FG_ATTN_FLASH, 1, 0.2, FG_F32, 0, 0, 0, 0, 0, 0},  /* GQA, dropout, T past a block */
        {2, 19, 3, 3, 5, FG_ATTN_NAIVE, 0, 0.1, FG_F64, 0, 0, 0, 0, 0, 0},
        {1, 70, 2, 1, 16, FG_ATTN_FLASH, 0, 0.0, FG_F64, 0, 0, 0, 0, 0, 0}, /* multi-query */
        /* ragged blocks, a sliding window, ALiBi and a softcap; odd d; a mask callback (serial) */
        {2, 45, 4, 2, 12, FG_ATTN_FLASH, 1, 0.1, FG_F32, 16, 12, 9, 1, 0, 20.0},
        {1, 33, 2, 2, 7, FG_ATTN_FLASH, 0, 0.0, FG_F32, 8, 16, 0, 0, 1, 0},
        {2, 29, 3, 1, 9, FG_ATTN_FLASH, 1, 0.0, FG_F64, 8, 8, 5, 1, 0, 0},
    };
    const fg_simd_level best = fg_simd_detect();
    for (size_t ci = 0; ci < (size_t)(best + 1) * (sizeof cases / sizeof cases[0]); ci++) {
        const size_t c = ci % (sizeof cases / sizeof cases[0]);
        fg_simd_set((fg_simd_level)(ci / (sizeof cases / sizeof cases[0])));
        const qkv_case *k = &cases[c];
        const int64_t W = (k->H + 2 * k->Hkv) * k->d;
        fg_tensor *qkv = fgt_leaf(k->dt, FGT_DIMS(k->B, k->T, W), 40 + c);
        fg_tensor *dy = fgt_rand(k->dt, FGT_DIMS(k->B, k->T, k->H * k->d), 50 + c);
        fg_attn_opts o = fg_attn_defaults();
        o.impl = (fg_attn_impl)k->impl;
        o.causal = k->causal;
        o.dropout_p = k->p;
        o.seed = 99;
        o.variant.n_kv_heads = k->Hkv == k->H ? 0 : k->Hkv;
        o.block_q = k->bq;
        o.block_k = k->bk;
        if (k->window) {
            o.variant.window = 1;
            o.variant.window_left = k->window;
            o.variant.window_right = k->causal ? 0 : k->window;
        }
        o.variant.alibi = k->alibi;
        o.variant.softcap = k->softcap;
        if (k->mask) o.custom.mask = qkv_even_mask;
        fg_tensor *y_ref, *g_ref;
        qkv_composite(qkv, k->H, k->Hkv, &o, dy, &y_ref, &g_ref);
        fg_tensor *y = fgt_ok(fg_attention_qkv(qkv, k->H, &o), "attention_qkv");
        cr_assert_eq(y->ndim, 3, "case %zu: rank", c);
        cr_assert(y->shape[2] == k->H * k->d, "case %zu: last dim %lld", c, (long long)y->shape[2]);
        cr_assert_eq(fg_backward(y, dy), FG_OK, "%s", fg_last_error());
        for (int64_t i = 0; i < fg_numel(y); i++)
            cr_assert(fg_get(y, i) == fg_get(y_ref, i), "case %zu: y[%lld] = %.17g, composite %.17g", c, (long long)i,
                      fg_get(y, i), fg_get(y_ref, i));
        for (int64_t i = 0; i < fg_numel(qkv); i++)
            cr_assert(fg_get(qkv->grad, i) == fg_get(g_ref, i), "case %zu: dqkv[%lld] = %.17g, composite %.17g", c,
                      (long long)i, fg_get(qkv->grad, i), fg_get(g_ref, i));
        fg_release(y), fg_release(y_ref), fg_release(g_ref), fg_release(dy), fg_release(qkv);
    }
    fg_simd_set(best);
}

/* A forward kept for a backward that never comes frees its node with its output, for both kernels
 * (the node must not hold its own output) */
Test(attention, packed_qkv_output_released_without_a_backward_frees_its_node) {
    for (int impl = 0; impl < 2; impl++) {
        fg_tensor *qkv = fgt_leaf(FG_F32, FGT_DIMS(2, 16, 3 * 2 * 8), 31);
        fg_attn_opts o = fg_attn_defaults();
        o.impl = (fg_attn_impl)impl;
        o.causal = 1;
        const long long before = fg_nodes_alive();
        fg_tensor *y = fgt_ok(fg_attention_qkv(qkv, 2, &o), "attention_qkv");
        cr_assert_eq(fg_nodes_alive(), before + 1, "%s: the forward recorded no node", fg_attn_impl_name(o.impl));
        fg_release(y);
        cr_expect_eq(fg_nodes_alive(), before, "%s: %lld nodes alive after the output was released",
                     fg_attn_impl_name(o.impl), fg_nodes_alive() - before);
        fg_release(qkv);
    }
}

/* A gradient buffer that attention_qkv's backward makes for qkv is written, not added into: with
 * the allocator's cached blocks of its size filled with NaN, it equals the gradient added into an
 * existing zeroed buffer (GQA included, where the three head groups differ in width). */
Test(attention, a_fresh_qkv_gradient_is_written_not_added_into) {
    const int64_t cases[][5] = {{2, 64, 4, 4, 32}, {3, 37, 4, 2, 8}, {1, 70, 2, 1, 16}}; /* B, T, H, Hkv, d */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t B = cases[c][0], T = cases[c][1], H = cases[c][2], Hkv = cases[c][3], d = cases[c][4];
        const int64_t W = (H + 2 * Hkv) * d;
        fg_tensor *qkv = fgt_leaf(FG_F32, FGT_DIMS(B, T, W), 140 + c);
        fg_tensor *dy = fgt_rand(FG_F32, FGT_DIMS(B, T, H * d), 150 + c);
        fg_attn_opts o = fg_attn_defaults();
        o.causal = 1;
        o.variant.n_kv_heads = Hkv == H ? 0 : Hkv;
        cr_assert_not_null(fg_grad_buffer(qkv), "%s", fg_last_error());
        fg_tensor *y = fgt_ok(fg_attention_qkv(qkv, H, &o), "attention_qkv");
        cr_assert_eq(fg_backward(y, dy), FG_OK, "%s", fg_last_error());
        fg_tensor *added = fg_clone(qkv->grad);
        fg_release(y);
        fg_release(qkv->grad);
        qkv->grad = NULL;
        void *poison[FGT_POISON_BLOCKS];
        fgt_poison_cache(FG_F32, FGT_DIMS(B, T, W), poison);
        y = fgt_ok(fg_attention_qkv(qkv, H, &o), "attention_qkv");
        cr_assert_eq(fg_backward(y, dy), FG_OK, "%s", fg_last_error());
        cr_assert(fgt_poisoned(fg_data(qkv->grad), poison), "case %zu: dqkv did not get a poisoned block", c);
        for (int64_t i = 0; i < fg_numel(qkv); i++)
            cr_assert(fg_get(qkv->grad, i) == fg_get(added, i), "case %zu: dqkv[%lld] = %g, %g added", c, (long long)i,
                      fg_get(qkv->grad, i), fg_get(added, i));
        fg_release(y), fg_release(added), fg_release(dy), fg_release(qkv);
    }
}

/* fg_attention reaches the CPU kernels through the CPU's kernel table, like any device: the table's
 * attention member is there, lists every built-in variant, and gives fg_attention's numbers. */
Test(attention, runs_through_the_cpu_kernel_table) {
    const fg_kernels *kt = fg_kernels_for(FG_CPU, "attention");
    cr_assert(kt, "%s", fg_last_error());
    cr_assert(kt->attention.forward && kt->attention.backward, "the CPU table has no attention kernels");
    cr_assert_eq(kt->attention.caps, (unsigned)(FG_ATTN_CAP_ALL | FG_ATTN_CAP_CAUSAL_TOP_LEFT), "caps 0x%x", kt->attention.caps);
    for (int impl = 0; impl < 2; impl++) {
        const fg_dtype dt = impl ? FG_F32 : FG_F64;
        const int64_t B = 2, H = 2, N = 21, d = 8;
        fg_tensor *q = fgt_leaf(dt, FGT_DIMS(B, H, N, d), 61), *k = fgt_leaf(dt, FGT_DIMS(B, H, N, d), 62);
        fg_tensor *v = fgt_leaf(dt, FGT_DIMS(B, H, N, d), 63), *dy = fgt_rand(dt, FGT_DIMS(B, H, N, d), 64);
        fg_attn_opts o = fg_attn_defaults();
        o.impl = (fg_attn_impl)impl;
        o.causal = 1;
        o.dropout_p = 0.2;
        o.seed = 5;
        o.block_q = 8;
        o.block_k = 5;
        fg_tensor *lse = NULL, *y = fgt_ok(fg_attention(q, k, v, &o, &lse), "attention");
        cr_assert_eq(fg_backward(y, dy), FG_OK, "%s", fg_last_error());
        fg_attn_problem pr;
        cr_assert_eq(fg_attn_problem_init(&pr, B, H, N, N, d, &o), FG_OK, "%s", fg_last_error());
        fg_tensor *o2 = fg_empty(dt, FG_CPU, FGT_DIMS(B, H, N, d)), *l2 = fg_empty(dt, FG_CPU, FGT_DIMS(B, H, N));
        fg_tensor *aux = impl ? fg_empty(dt, FG_CPU, FGT_DIMS(B, H, N)) : fg_empty(dt, FG_CPU, FGT_DIMS(B, H, N, N));
        fg_tensor *g[3] = {fg_zeros(dt, FG_CPU, FGT_DIMS(B, H, N, d)), fg_zeros(dt, FG_CPU, FGT_DIMS(B, H, N, d)),
                           fg_zeros(dt, FG_CPU, FGT_DIMS(B, H, N, d))};
        void *lo = impl && dt == FG_F32 ? fg_data(aux) : NULL, *a = impl ? lo : fg_data(aux);
        cr_assert_eq(kt->attention.forward((fg_attn_impl)impl, dt, fg_data(o2), fg_data(l2), a, fg_data(q), fg_data(k),
                                           fg_data(v), &pr),
                     FG_OK, "%s", fg_last_error());
        cr_assert_eq(kt->attention.backward((fg_attn_impl)impl, dt, fg_data(g[0]), fg_data(g[1]), fg_data(g[2]),
                                            fg_data(dy), fg_data(q), fg_data(k), fg_data(v), fg_data(o2),
                                            impl ? fg_data(l2) : NULL, a, &pr),
                     FG_OK, "%s", fg_last_error());
        const fg_tensor *got[5] = {y, lse, q->grad, k->grad, v->grad}, *want[5] = {o2, l2, g[0], g[1], g[2]};
        const char *nm[5] = {"O", "lse", "dQ", "dK", "dV"};
        for (int t = 0; t < 5; t++)
            for (int64_t i = 0; i < fg_numel(want[t]); i++)
                cr_assert(fg_get(got[t], i) == fg_get(want[t], i), "%s %s[%lld]: fg_attention %.17g, kernel %.17g",
                          fg_attn_impl_name((fg_attn_impl)impl), nm[t], (long long)i, fg_get(got[t], i),
                          fg_get(want[t], i));
        fg_release(y), fg_release(lse), fg_release(o2), fg_release(l2), fg_release(aux);
        for (int t = 0; t < 3; t++) fg_release(g[t]);
        fg_release(q), fg_release(k), fg_release(v), fg_release(dy);
    }
}

static fg_tensor *qkv_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    const fg_attn_opts *o = user;
    return fg_attention_qkv(in[0], 2, o);
}

Test(attention, packed_qkv_backward_matches_finite_differences) {
    fg_tensor *qkv = fgt_leaf(FG_F64, FGT_DIMS(2, 9, 6 * 3), 77); /* H = 2, H_kv = 2, d = 3 */
    fg_attn_opts o = fg_attn_defaults();
    o.causal = 1;
    FGT_GRADCHECK("attention_qkv flash causal", qkv_fn, &qkv, 1, &o);
    o.impl = FG_ATTN_NAIVE;
    o.causal = 0;
    FGT_GRADCHECK("attention_qkv naive", qkv_fn, &qkv, 1, &o);
    fg_release(qkv);
}

Test(attention, packed_qkv_refuses_shapes_that_do_not_split) {
    fg_tensor *x2 = fgt_rand(FG_F32, FGT_DIMS(4, 12), 1), *x3 = fgt_rand(FG_F32, FGT_DIMS(2, 4, 13), 2);
    fg_tensor *x4 = fgt_rand(FG_F32, FGT_DIMS(2, 4, 12), 3);
    cr_expect_null(fg_attention_qkv(x2, 2, NULL));
    cr_expect(strstr(fg_last_error(), "rank 2"), "message: %s", fg_last_error());
    cr_expect_null(fg_attention_qkv(x3, 2, NULL));
    cr_expect(strstr(fg_last_error(), "does not split"), "message: %s", fg_last_error());
    cr_expect_null(fg_attention_qkv(x4, 0, NULL));
    cr_expect(strstr(fg_last_error(), "does not split"), "message: %s", fg_last_error());
    fg_attn_opts o = fg_attn_defaults();
    o.variant.n_kv_heads = 3; /* 4 query heads are not a multiple of 3 */
    cr_expect_null(fg_attention_qkv(x4, 4, &o));
    cr_expect(strstr(fg_last_error(), "multiple"), "message: %s", fg_last_error());
    fg_release(x2), fg_release(x3), fg_release(x4);
}
