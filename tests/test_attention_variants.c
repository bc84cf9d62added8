/* test_attention_variants.c — grouped-query / multi-query attention, sliding windows, ALiBi, logit
 * softcapping and user-defined variants (score_mod, mask, block mask), naive and flash.
 *
 * Every variant passes the tests plain attention passes (tests/test_attention.c), with and without
 * the causal mask and dropout:
 *   - forward against a scalar long-double reference written here from the definition in
 *     ops/attention.h (its own ALiBi slopes, following the paper's reference code recursively);
 *   - naive and flash backward against central finite differences (fg_gradcheck);
 *   - flash against naive in float64 (1e-12 relative) and FlashAttention's float32 rule (the flash
 *     error against a float64 reference at most twice the naive float32 error);
 *   - GQA against multi-head attention on K and V repeated per group (dK, dV summed per group).
 * Then: flash skips tiles outside the window or the block mask (a NaN in V there would show), the
 * mask callback is called only in PARTIAL tiles, rows that see no key give zeros, errors, the
 * CLI flags, and the worked example in docs/attention.md, which must match this file's copy.
 * Sizes shrink under FG_SANITIZE=1 (make sanitize) where noted.
 */
#include <criterion/criterion.h>
#include <errno.h>
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
#include "ops/cpu/attention_cpu.h"
#include "ops/cpu/flash_tiles.h"
#include "tests/common.h"
#include "tensor/npy.h"
#include "tensor/philox.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}

TestSuite(attention_variants, .fini = leak_check, .timeout = 300);

/* ---------------------------------------------------------------------------------------------
 * helpers
 * ------------------------------------------------------------------------------------------- */

static fg_tensor *to_dt(const fg_tensor *t, fg_dtype dt) {
    fg_tensor *r = fg_to(t, FG_CPU, dt);
    cr_assert(r, "%s", fg_last_error());
    return r;
}

/* ---------------------------------------------------------------------------------------------
 * user variants used by the cases
 * ------------------------------------------------------------------------------------------- */

/* mod 1: a smooth nonlinear score_mod that depends on b, h, i and j:
 *   f(s) = (1 + 0.1 h) s + 0.2 sin(s + 0.1 (i − j)) + 0.01 b,  f'(s) = 1 + 0.1 h + 0.2 cos(s + 0.1 (i − j)) */
static double mod_wavy(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)u;
    return (1 + 0.1 * (double)h) * s + 0.2 * sin(s + 0.1 * (double)(i - j)) + 0.01 * (double)b;
}
static double mod_wavy_grad(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)u, (void)b;
    return 1 + 0.1 * (double)h + 0.2 * cos(s + 0.1 * (double)(i - j));
}
/* mask 1: documents of 3 tokens, plus a global first key: i / 3 == j / 3 or j == 0 */
static int mask_docs(int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)b, (void)h, (void)u;
    return i / 3 == j / 3 || j == 0;
}
/* mask 2: depends on the head and the batch: key j is hidden from head h when j % (h + 2) == 1 + b */
static int mask_stripes(int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)i, (void)u;
    return j % (h + 2) != 1 + b % 2;
}

/* ---------------------------------------------------------------------------------------------
 * the scalar reference, from the definition in ops/attention.h
 * ------------------------------------------------------------------------------------------- */

/* ALiBi's get_slopes (Press et al.), recursive as in the paper's code: for a power of two n,
 * start = 2^(−2^−(log2 n − 3)) and slopes start^1..start^n; otherwise the slopes of the closest
 * smaller power of two c, then every other slope of 2c heads. */
static void ref_slopes(int n, long double *out) {
    int c = 1;
    while (c * 2 <= n) c *= 2;
    if (c == n) {
        long double start = powl(2.0L, -powl(2.0L, -(log2l((long double)n) - 3)));
        for (int i = 0; i < n; i++) out[i] = powl(start, (long double)(i + 1));
        return;
    }
    ref_slopes(c, out);
    long double tmp[128];
    ref_slopes(2 * c, tmp);
    for (int m = 0; m < n - c; m++) out[c + m] = tmp[2 * m];
}

/* O and lse in long double, one scalar at a time. */
static void reference_forward(const fg_tensor *q, const fg_tensor *k, const fg_tensor *v, const fg_attn_opts *o,
                              fg_tensor *out, fg_tensor *lse) {
    const int64_t B = q->shape[0], H = q->shape[1], Nq = q->shape[2], Nk = k->shape[2], d = q->shape[3];
    const int64_t Hkv = k->shape[1], G = H / Hkv;
    const long double scale = o->scale != 0 ? o->scale : 1.0L / sqrtl((long double)d);
    const uint32_t thr = fg_dropout_threshold(o->dropout_p);
    const fg_attn_variant *var = &o->variant;
    const fg_attn_custom *cu = &o->custom;
    long double slopes[128];
    cr_assert(H <= 128);
    if (var->alibi) {
        if (var->alibi_slopes)
            for (int64_t h = 0; h < H; h++) slopes[h] = var->alibi_slopes[h];
        else
            ref_slopes((int)H, slopes);
    }
    long double *s = malloc(sizeof(long double) * (size_t)(Nk > 0 ? Nk : 1));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Nq; i++) {
                const int64_t qi = ((b * H + h) * Nq + i) * d, ip = i + Nk - Nq;
                const int64_t kvh = b * Hkv + h / G;
                long double mx = -INFINITY;
                for (int64_t j = 0; j < Nk; j++) {
                    long double acc = 0;
                    for (int64_t c = 0; c < d; c++)
                        acc += (long double)fg_get(q, qi + c) * fg_get(k, (kvh * Nk + j) * d + c);
                    long double x = acc * scale;
                    if (var->softcap > 0) x = var->softcap * tanhl(x / var->softcap);
                    if (var->alibi) x -= slopes[h] * fabsl((long double)(ip - j));
                    int vis = 1;
                    if (o->causal && j > ip) vis = 0;
                    if (var->window && var->window_left >= 0 && j < ip - var->window_left) vis = 0;
                    if (var->window && var->window_right >= 0 && j > ip + var->window_right) vis = 0;
                    if (cu->mask && !cu->mask(b, h, i, j, cu->user)) vis = 0;
                    if (vis && cu->score_mod) x = cu->score_mod((double)x, b, h, i, j, cu->user);
                    s[j] = vis ? x : -INFINITY;
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
                            p = fg_attn_keep(o->seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j)
                                    ? p / (1.0L - o->dropout_p)
                                    : 0;
                        acc += p * fg_get(v, (kvh * Nk + j) * d + c);
                    }
                    fg_set(out, qi + c, (double)acc);
                }
            }
    free(s);
}

/* ---------------------------------------------------------------------------------------------
 * the variant cases
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int64_t hkv; /* K/V heads (of H = 4) */
    int window;
    int64_t wl, wr;
    int alibi, user_slopes;
    double softcap;
    int mod;        /* 1: mod_wavy */
    int mask;       /* 1: mask_docs, 2: mask_stripes */
    int block_mask; /* pass a prebuilt block mask (else fg_attention builds one for flash) */
} vcase;

static const vcase vcases[] = {
    {"gqa 4/2", 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"mqa 4/1", 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"window 3,1", 4, 1, 3, 1, 0, 0, 0, 0, 0, 0},
    {"window 0,0", 4, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {"window -1,2", 4, 1, -1, 2, 0, 0, 0, 0, 0, 0},
    {"window 4,-1", 4, 1, 4, -1, 0, 0, 0, 0, 0, 0},
    {"alibi", 4, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    {"alibi user slopes", 4, 0, 0, 0, 1, 1, 0, 0, 0, 0},
    {"softcap 2", 4, 0, 0, 0, 0, 0, 2.0, 0, 0, 0},
    {"softcap 0.7 + alibi", 4, 0, 0, 0, 1, 0, 0.7, 0, 0, 0},
    {"score_mod", 4, 0, 0, 0, 0, 0, 0, 1, 0, 0},
    {"mask docs", 4, 0, 0, 0, 0, 0, 0, 0, 1, 0},
    {"mask docs + block mask", 4, 0, 0, 0, 0, 0, 0, 0, 1, 1},
    {"mask stripes + block mask", 4, 0, 0, 0, 0, 0, 0, 0, 2, 1},
    {"gqa + window + alibi + softcap", 2, 1, 2, 1, 1, 0, 3.0, 0, 0, 0},
    {"everything", 2, 1, 5, 2, 1, 1, 4.0, 1, 1, 1},
};
#define N_VCASES (int)(sizeof vcases / sizeof vcases[0])

static const double user_slopes[4] = {0.3, -0.2, 1.1, 0.05};

typedef struct {
    int64_t B, H, Nq, Nk, d;
    int bq, bk;
} vshape;

/* Options for case c on shape s; *bm receives the block mask to release (or NULL). */
static fg_attn_opts vcase_opts(const vcase *c, const vshape *s, fg_attn_impl impl, int causal, double p,
                               fg_attn_block_mask **bm) {
    fg_attn_opts o = fg_attn_defaults();
    o.impl = impl;
    o.causal = causal;
    o.dropout_p = p;
    o.seed = 0xabc + (uint64_t)s->Nq;
    o.block_q = s->bq;
    o.block_k = s->bk;
    o.variant.n_kv_heads = c->hkv;
    o.variant.window = c->window;
    o.variant.window_left = c->wl;
    o.variant.window_right = c->wr;
    o.variant.alibi = c->alibi;
    o.variant.alibi_slopes = c->user_slopes ? user_slopes : NULL;
    o.variant.softcap = c->softcap;
    if (c->mod) {
        o.custom.score_mod = mod_wavy;
        o.custom.score_mod_grad = mod_wavy_grad;
    }
    if (c->mask) o.custom.mask = c->mask == 1 ? mask_docs : mask_stripes;
    *bm = NULL;
    if (c->block_mask) {
        /* mask_docs does not depend on b or h: broadcast; mask_stripes does */
        *bm = fg_attn_block_mask_create(o.custom.mask, NULL, c->mask == 1 ? 1 : s->B, c->mask == 1 ? 1 : s->H, s->Nq,
                                        s->Nk, s->bq, s->bk);
        cr_assert(*bm, "block mask: %s", fg_last_error());
        o.custom.block_mask = *bm;
    }
    return o;
}

static void case_inputs(const vcase *c, const vshape *s, fg_dtype dt, uint64_t seed, fg_tensor **q, fg_tensor **k,
                        fg_tensor **v, fg_tensor **dout) {
    *q = fgt_randn4(dt, s->B, s->H, s->Nq, s->d, 1.0, seed, 1);
    *k = fgt_randn4(dt, s->B, c->hkv, s->Nk, s->d, 1.0, seed, 2);
    *v = fgt_randn4(dt, s->B, c->hkv, s->Nk, s->d, 1.0, seed, 3);
    *dout = fgt_randn4(dt, s->B, s->H, s->Nq, s->d, 1.0, seed, 4);
}

static const vshape vshapes[] = {
    {2, 4, 13, 17, 8, 4, 5},    /* Nq < Nk, blocks that do not divide N */
    {1, 4, 19, 11, 5, 6, 4},    /* Nq > Nk: with causal or a window the first rows see nothing */
    {1, 4, 70, 70, 16, 16, 16}, /* square, many tiles: windows and masks skip some */
};
#define N_VSHAPES (int)(sizeof vshapes / sizeof vshapes[0])

/* ---------------------------------------------------------------------------------------------
 * ALiBi slopes
 * ------------------------------------------------------------------------------------------- */

Test(attention_variants, alibi_standard_slopes_follow_the_paper) {
    /* H = 8: 2^-1 .. 2^-8; H = 12: the 8 of H = 8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 (every other
     * slope of 16 heads); H = 1: 2^-8; H = 6: 2^-2, 2^-4, 2^-6, 2^-8, then 2^-1, 2^-3 */
    const struct {
        int H;
        double want[12];
    } rows[] = {
        {8, {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625}},
        {12,
         {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625, 0.70710678118654752, 0.35355339059327376,
          0.17677669529663688, 0.08838834764831844}},
        {1, {0.00390625}},
        {6, {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125}},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (int h = 0; h < rows[r].H; h++) {
            double got = fg_attn_alibi_slope(h, rows[r].H);
            cr_expect(fabs(got - rows[r].want[h]) <= 1e-15 * rows[r].want[h], "H=%d head %d: slope %.17g, want %.17g",
                      rows[r].H, h, got, rows[r].want[h]);
        }
    /* and the recursive reference agrees for every H up to 64 */
    for (int H = 1; H <= 64; H++) {
        long double ref[128];
        ref_slopes(H, ref);
        for (int h = 0; h < H; h++)
            cr_expect(fabsl(fg_attn_alibi_slope(h, H) - ref[h]) <= 1e-15L * ref[h], "H=%d head %d: %.17g vs %.17Lg", H,
                      h, fg_attn_alibi_slope(h, H), ref[h]);
    }
}

/* ---------------------------------------------------------------------------------------------
 * every case: forward against the scalar reference, flash against naive (f64 and f32)
 * ------------------------------------------------------------------------------------------- */

Test(attention_variants, forward_matches_scalar_reference_f64) {
    double worst = 0;
    const char *worst_at = "";
    for (int ci = 0; ci < N_VCASES; ci++)
        for (int si = 0; si < N_VSHAPES; si++)
            for (int combo = 0; combo < 4; combo++) {
                const vcase *c = &vcases[ci];
                const vshape *s = &vshapes[si];
                const int causal = combo & 1;
                const double p = (combo & 2) ? 0.3 : 0;
                fg_tensor *q, *k, *v, *dout;
                case_inputs(c, s, FG_F64, 100 + ci * 7 + si, &q, &k, &v, &dout);
                fg_tensor *o_ref = fg_zeros(FG_F64, FG_CPU, 4, (int64_t[]){s->B, s->H, s->Nq, s->d});
                fg_tensor *l_ref = fg_zeros(FG_F64, FG_CPU, 3, (int64_t[]){s->B, s->H, s->Nq});
                fg_attn_block_mask *bm;
                fg_attn_opts o = vcase_opts(c, s, FG_ATTN_NAIVE, causal, p, &bm);
                reference_forward(q, k, v, &o, o_ref, l_ref);
                for (int impl = 0; impl < 2; impl++) {
                    o.impl = (fg_attn_impl)impl;
                    fgt_attn_run r = fgt_run_attention(q, k, v, NULL, &o);
                    fgt_cmp eo = fgt_compare(r.o, o_ref, 0, 0), el = fgt_compare(r.lse, l_ref, 0, 0);
                    cr_expect(!eo.nonfinite && fgt_rel_err(eo) < 1e-12 && !el.nonfinite && fgt_rel_err(el) < 1e-12,
                              "%s, shape %d, causal %d, p %g, %s: O rel err %.3g at %lld (%.17g vs %.17g), lse rel err "
                              "%.3g at %lld (%.17g vs %.17g)",
                              c->name, si, causal, p, fg_attn_impl_name(o.impl), fgt_rel_err(eo), (long long)eo.worst,
                              eo.worst_actual, eo.worst_expected, fgt_rel_err(el), (long long)el.worst, el.worst_actual,
                              el.worst_expected);
                    if (fgt_rel_err(eo) > worst) {
                        worst = fgt_rel_err(eo);
                        worst_at = c->name;
                    }
                    fgt_attn_run_free(&r);
                }
                fg_attn_block_mask_release(bm);
                fg_release(o_ref);
                fg_release(l_ref);
                fg_release(q);
                fg_release(k);
                fg_release(v);
                fg_release(dout);
            }
    fprintf(stderr, "[attention_variants] forward vs long-double reference: worst O rel err %.3g (%s)\n", worst,
            worst_at);
}

/* Per case, the worst flash-vs-naive float64 relative error and the worst float32 ratios
 * err(flash32) / (err(naive32) + floor) and err(flash32) / err(naive32), for the report. */
static double case_f64_err[N_VCASES], case_f32_ratio[2][N_VCASES], case_f32_tight[2][N_VCASES];

Test(attention_variants, flash_matches_naive_f64_to_1e_12) {
    const char *names[5] = {"O", "lse", "dQ", "dK", "dV"};
    for (int ci = 0; ci < N_VCASES; ci++)
        for (int si = 0; si < N_VSHAPES; si++)
            for (int combo = 0; combo < 4; combo++) {
                const vcase *c = &vcases[ci];
                const vshape *s = &vshapes[si];
                const int causal = combo & 1;
                const double p = (combo & 2) ? 0.3 : 0;
                fg_tensor *q, *k, *v, *dout;
                case_inputs(c, s, FG_F64, 200 + ci * 7 + si, &q, &k, &v, &dout);
                fg_attn_block_mask *bm;
                fg_attn_opts on = vcase_opts(c, s, FG_ATTN_NAIVE, causal, p, &bm), of = on;
                of.impl = FG_ATTN_FLASH;
                fgt_attn_run n = fgt_run_attention(q, k, v, dout, &on), f = fgt_run_attention(q, k, v, dout, &of);
                const fg_tensor *fa[5] = {f.o, f.lse, f.dq, f.dk, f.dv}, *na[5] = {n.o, n.lse, n.dq, n.dk, n.dv};
                for (int t = 0; t < 5; t++) {
                    fgt_cmp e = fgt_compare(fa[t], na[t], 0, 0);
                    if (fgt_rel_err(e) > case_f64_err[ci]) case_f64_err[ci] = fgt_rel_err(e);
                    cr_expect(!e.nonfinite && fgt_rel_err(e) <= 1e-12,
                              "%s, shape %d, causal %d, p %g: %s rel err %.3g at %lld: flash %.17g naive %.17g",
                              c->name, si, causal, p, names[t], fgt_rel_err(e), (long long)e.worst, e.worst_actual,
                              e.worst_expected);
                }
                fgt_attn_run_free(&n);
                fgt_attn_run_free(&f);
                fg_attn_block_mask_release(bm);
                fg_release(q);
                fg_release(k);
                fg_release(v);
                fg_release(dout);
            }
    for (int ci = 0; ci < N_VCASES; ci++)
        fprintf(stderr, "[attention_variants] flash vs naive f64, worst rel err over O, lse, dQ, dK, dV: %-32s %.3g\n",
                vcases[ci].name, case_f64_err[ci]);
}

/* FlashAttention's float32 rule, as in tests/test_attention.c: err(flash32, ref64) <= 2 err(naive32,
 * ref64) + floor, ref64 = naive float64 on the float32-rounded inputs, floor = 2^-21 (4 float32 ulps
 * of 1) times the larger of 1 and the tensor's largest reference value.
 * Where naive float32 is exact (error 0) the floor is 2^-20 · qk std · the largest reference value of
 * O, dQ, dK and dV instead: with window 0,0 every row sees one key, so the true dQ and dK are 0 and
 * naive float32 gets exactly 0 (rowsum(dP∘P) reuses the rounded dP), while flash's D = dO·O does not
 * share dP's rounding and leaves a few ulps of dP (the size of dV) times K (the size of qk std). */
Test(attention_variants, flash_f32_error_at_most_twice_naive_f32_error) {
    const char *names[4] = {"O", "dQ", "dK", "dV"};
    /* pass 0: unit-normal inputs, the 2x rule. pass 1: q, k with std 3 (peaked softmax), where
     * tests/test_attention.c explains why the D = dO·O shortcut costs up to ~3x and checks 8x. */
    for (int pass = 0; pass < 2; pass++)
        for (int ci = 0; ci < N_VCASES; ci++)
            for (int si = 0; si < N_VSHAPES; si++)
                for (int combo = 0; combo < 4; combo++) {
                    const vcase *c = &vcases[ci];
                    const vshape *s = &vshapes[si];
                    const int causal = combo & 1;
                    const double p = (combo & 2) ? 0.3 : 0;
                    fg_tensor *q, *k, *v, *dout;
                    case_inputs(c, s, FG_F32, 300 + ci * 7 + si + 1000 * pass, &q, &k, &v, &dout);
                    const double factor = pass ? 8 : 2;
                    if (pass) { /* q, k *= 3 (exact in float32 up to rounding of the product, same for all) */
                        for (int64_t e = 0; e < fg_numel(q); e++) fg_set(q, e, 3 * fg_get(q, e));
                        for (int64_t e = 0; e < fg_numel(k); e++) fg_set(k, e, 3 * fg_get(k, e));
                    }
                    fg_tensor *q64 = to_dt(q, FG_F64), *k64 = to_dt(k, FG_F64), *v64 = to_dt(v, FG_F64),
                              *d64 = to_dt(dout, FG_F64);
                    fg_attn_block_mask *bm;
                    fg_attn_opts on = vcase_opts(c, s, FG_ATTN_NAIVE, causal, p, &bm), of = on;
                    of.impl = FG_ATTN_FLASH;
                    fgt_attn_run ref = fgt_run_attention(q64, k64, v64, d64, &on);
                    fgt_attn_run n = fgt_run_attention(q, k, v, dout, &on), f = fgt_run_attention(q, k, v, dout, &of);
                    const fg_tensor *fa[4] = {f.o, f.dq, f.dk, f.dv}, *na[4] = {n.o, n.dq, n.dk, n.dv},
                                    *ra[4] = {ref.o, ref.dq, ref.dk, ref.dv};
                    double gscale = 1;
                    for (int t = 0; t < 4; t++) {
                        fgt_cmp e = fgt_compare(ra[t], ra[t], 0, 0);
                        if (e.ref_max > gscale) gscale = e.ref_max;
                    }
                    for (int t = 0; t < 4; t++) {
                        fgt_cmp ef = fgt_compare(fa[t], ra[t], 0, 0), en = fgt_compare(na[t], ra[t], 0, 0);
                        const double floor = en.max_abs == 0 ? ldexp(gscale * (pass ? 3 : 1), -20)
                                                             : ldexp(ef.ref_max > 1 ? ef.ref_max : 1.0, -21);
                        double ratio = ef.max_abs / (en.max_abs + floor);
                        if (ratio > case_f32_ratio[pass][ci]) case_f32_ratio[pass][ci] = ratio;
                        if (en.max_abs > floor && ef.max_abs / en.max_abs > case_f32_tight[pass][ci])
                            case_f32_tight[pass][ci] = ef.max_abs / en.max_abs;
                        cr_expect(
                            !ef.nonfinite && ef.max_abs <= factor * en.max_abs + floor,
                            "%s, shape %d, causal %d, p %g, qk std %d: %s flash32 err %.3g at %lld > %g x naive32 err "
                            "%.3g + %.2g (flash %.9g ref %.9g)",
                            c->name, si, causal, p, pass ? 3 : 1, names[t], ef.max_abs, (long long)ef.worst, factor,
                            en.max_abs, floor, ef.worst_actual, ef.worst_expected);
                    }
                    fgt_attn_run_free(&ref);
                    fgt_attn_run_free(&n);
                    fgt_attn_run_free(&f);
                    fg_attn_block_mask_release(bm);
                    fg_tensor *all[] = {q64, k64, v64, d64, q, k, v, dout};
                    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fg_release(all[i]);
                }
    for (int pass = 0; pass < 2; pass++)
        for (int ci = 0; ci < N_VCASES; ci++)
            fprintf(stderr,
                    "[attention_variants] float32, qk std %d: %-32s worst err(flash)/(err(naive)+floor) %.3f, "
                    "err(flash)/err(naive) where err(naive) > floor %.3f\n",
                    pass ? 3 : 1, vcases[ci].name, case_f32_ratio[pass][ci], case_f32_tight[pass][ci]);
}

/* ---------------------------------------------------------------------------------------------
 * gradients against finite differences
 * ------------------------------------------------------------------------------------------- */

static fg_tensor *attention_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    return fg_attention(in[0], in[1], in[2], (const fg_attn_opts *)user, NULL);
}

Test(attention_variants, naive_and_flash_backward_match_finite_differences) {
    const vshape s = {1, 4, 5, 7, 3, 2, 3};
    double worst[N_VCASES] = {0};
    for (int ci = 0; ci < N_VCASES; ci++)
        for (int combo = 0; combo < 4; combo++)
            for (int impl = 0; impl < 2; impl++) {
                const vcase *c = &vcases[ci];
                const int causal = combo & 1;
                const double p = (combo & 2) ? 0.3 : 0;
                fg_tensor *in[3], *dout;
                case_inputs(c, &s, FG_F64, 400 + ci, &in[0], &in[1], &in[2], &dout);
                for (int i = 0; i < 3; i++) fg_set_requires_grad(in[i], 1);
                fg_attn_block_mask *bm;
                fg_attn_opts o = vcase_opts(c, &s, (fg_attn_impl)impl, causal, p, &bm);
                fg_gradcheck_report rep;
                fg_gradcheck_opts go = {.eps = 1e-6, .atol = 1e-8, .rtol = 1e-6, .seed = 9};
                cr_assert_eq(fg_gradcheck(attention_fn, in, 3, &o, &go, &rep), FG_OK, "%s", fg_last_error());
                cr_expect(rep.passed,
                          "%s causal %d p %g %s: input %d index %lld: analytic %.12g numeric %.12g (max abs err %.3g, "
                          "rel %.3g)",
                          c->name, causal, p, fg_attn_impl_name(o.impl), rep.worst_input, (long long)rep.worst_index,
                          rep.analytic, rep.numeric, rep.max_abs_err, rep.max_rel_err);
                cr_expect_eq(rep.checked, s.B * (s.H * s.Nq + 2 * c->hkv * s.Nk) * s.d, "%s: checked %lld elements",
                             c->name, (long long)rep.checked);
                if (rep.max_abs_err > worst[ci]) worst[ci] = rep.max_abs_err;
                fg_attn_block_mask_release(bm);
                for (int i = 0; i < 3; i++) fg_release(in[i]);
                fg_release(dout);
            }
    for (int ci = 0; ci < N_VCASES; ci++)
        fprintf(stderr, "[attention_variants] finite differences, worst |analytic - numeric|: %-32s %.3g\n",
                vcases[ci].name, worst[ci]);
}

/* ---------------------------------------------------------------------------------------------
 * GQA is multi-head attention on repeated K and V
 * ------------------------------------------------------------------------------------------- */

/* (B, Hkv, N, d) -> (B, Hkv·G, N, d) with head h = copy of head h / G */
static fg_tensor *repeat_heads(const fg_tensor *t, int64_t G) {
    const int64_t B = t->shape[0], Hkv = t->shape[1], N = t->shape[2], d = t->shape[3];
    fg_tensor *r = fg_empty(t->dtype, FG_CPU, 4, (int64_t[]){B, Hkv * G, N, d});
    cr_assert(r, "%s", fg_last_error());
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hkv * G; h++)
            for (int64_t e = 0; e < N * d; e++)
                fg_set(r, ((b * Hkv * G + h) * N) * d + e, fg_get(t, ((b * Hkv + h / G) * N) * d + e));
    return r;
}
/* (B, Hkv·G, N, d) -> (B, Hkv, N, d), summing the G heads of each group */
static fg_tensor *sum_groups(const fg_tensor *t, int64_t G) {
    const int64_t B = t->shape[0], H = t->shape[1], N = t->shape[2], d = t->shape[3];
    fg_tensor *r = fg_zeros(t->dtype, FG_CPU, 4, (int64_t[]){B, H / G, N, d});
    cr_assert(r, "%s", fg_last_error());
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t e = 0; e < N * d; e++) {
                int64_t at = ((b * (H / G) + h / G) * N) * d + e;
                fg_set(r, at, fg_get(r, at) + fg_get(t, ((b * H + h) * N) * d + e));
            }
    return r;
}

Test(attention_variants, gqa_equals_multi_head_on_repeated_kv_and_sums_dk_dv_per_group) {
    const int64_t B = 2, H = 6, Nq = 21, Nk = 18, d = 8;
    const int64_t hkvs[3] = {3, 2, 1};
    for (int t = 0; t < 3; t++)
        for (int impl = 0; impl < 2; impl++)
            for (int combo = 0; combo < 4; combo++) {
                const int64_t Hkv = hkvs[t], G = H / Hkv;
                fg_tensor *q = fgt_randn4(FG_F64, B, H, Nq, d, 1, 50 + t, 1),
                          *k = fgt_randn4(FG_F64, B, Hkv, Nk, d, 1, 50 + t, 2),
                          *v = fgt_randn4(FG_F64, B, Hkv, Nk, d, 1, 50 + t, 3),
                          *dout = fgt_randn4(FG_F64, B, H, Nq, d, 1, 50 + t, 4);
                fg_tensor *kr = repeat_heads(k, G), *vr = repeat_heads(v, G);
                fg_attn_opts o = fg_attn_defaults();
                o.impl = (fg_attn_impl)impl;
                o.causal = combo & 1;
                o.dropout_p = (combo & 2) ? 0.25 : 0;
                o.seed = 5;
                o.block_q = 8;
                o.block_k = 5;
                fgt_attn_run g = fgt_run_attention(q, k, v, dout, &o), m = fgt_run_attention(q, kr, vr, dout, &o);
                fg_tensor *dk = sum_groups(m.dk, G), *dv = sum_groups(m.dv, G);
                const fg_tensor *ga[5] = {g.o, g.lse, g.dq, g.dk, g.dv}, *ma[5] = {m.o, m.lse, m.dq, dk, dv};
                const char *names[5] = {"O", "lse", "dQ", "dK", "dV"};
                for (int x = 0; x < 5; x++) {
                    fgt_cmp e = fgt_compare(ga[x], ma[x], 0, 0);
                    cr_expect(!e.nonfinite && fgt_rel_err(e) <= 1e-13,
                              "H_kv %lld %s causal %d p %g: %s rel err %.3g at %lld", (long long)Hkv,
                              fg_attn_impl_name(o.impl), o.causal, o.dropout_p, names[x], fgt_rel_err(e),
                              (long long)e.worst);
                }
                fgt_attn_run_free(&g);
                fgt_attn_run_free(&m);
                fg_tensor *all[] = {q, k, v, dout, kr, vr, dk, dv};
                for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fg_release(all[i]);
            }
}

/* ---------------------------------------------------------------------------------------------
 * the built-in variants are the same as their score_mod form
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    double c;
    int64_t H, Nq, Nk;
} builtin_as_mod;
static double cb_softcap(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)b, (void)h, (void)i, (void)j;
    const double c = ((builtin_as_mod *)u)->c;
    return c * tanh(s / c);
}
static double cb_softcap_grad(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)b, (void)h, (void)i, (void)j;
    const double t = tanh(s / ((builtin_as_mod *)u)->c);
    return 1 - t * t;
}
static double cb_alibi(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)b;
    const builtin_as_mod *m = u;
    return s - fg_attn_alibi_slope(h, m->H) * fabs((double)(i + m->Nk - m->Nq - j));
}
static double cb_one(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)s, (void)b, (void)h, (void)i, (void)j, (void)u;
    return 1;
}
static int cb_window_2_1(int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)b, (void)h;
    const builtin_as_mod *m = u;
    const int64_t ip = i + m->Nk - m->Nq;
    return j >= ip - 2 && j <= ip + 1;
}

Test(attention_variants, builtin_variants_equal_their_callback_form) {
    const int64_t B = 1, H = 4, Nq = 23, Nk = 29, d = 8;
    builtin_as_mod u = {.c = 1.5, .H = H, .Nq = Nq, .Nk = Nk};
    fg_tensor *q = fgt_randn4(FG_F64, B, H, Nq, d, 1.5, 61, 1), *k = fgt_randn4(FG_F64, B, H, Nk, d, 1.5, 61, 2),
              *v = fgt_randn4(FG_F64, B, H, Nk, d, 1, 61, 3), *dout = fgt_randn4(FG_F64, B, H, Nq, d, 1, 61, 4);
    for (int which = 0; which < 3; which++)
        for (int impl = 0; impl < 2; impl++) {
            fg_attn_opts a = fg_attn_defaults(), b = a;
            a.impl = b.impl = (fg_attn_impl)impl;
            a.causal = b.causal = 1;
            a.block_q = b.block_q = 8;
            a.block_k = b.block_k = 8;
            b.custom.user = &u;
            const char *what;
            if (which == 0) {
                what = "softcap";
                a.variant.softcap = u.c;
                b.custom.score_mod = cb_softcap;
                b.custom.score_mod_grad = cb_softcap_grad;
            } else if (which == 1) {
                what = "alibi";
                a.variant.alibi = 1;
                b.custom.score_mod = cb_alibi;
                b.custom.score_mod_grad = cb_one;
            } else {
                what = "window 2,1";
                a.variant.window = 1;
                a.variant.window_left = 2;
                a.variant.window_right = 1;
                b.custom.mask = cb_window_2_1;
            }
            fgt_attn_run ra = fgt_run_attention(q, k, v, dout, &a), rb = fgt_run_attention(q, k, v, dout, &b);
            const fg_tensor *x[5] = {ra.o, ra.lse, ra.dq, ra.dk, ra.dv}, *y[5] = {rb.o, rb.lse, rb.dq, rb.dk, rb.dv};
            for (int t = 0; t < 5; t++) {
                fgt_cmp e = fgt_compare(x[t], y[t], 0, 0);
                cr_expect(!e.nonfinite && fgt_rel_err(e) <= 1e-14,
                          "%s %s: output %d built-in vs callback rel err %.3g at %lld", what, fg_attn_impl_name(a.impl),
                          t, fgt_rel_err(e), (long long)e.worst);
            }
            fgt_attn_run_free(&ra);
            fgt_attn_run_free(&rb);
        }
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(dout);
}

/* ---------------------------------------------------------------------------------------------
 * tiles: classification, block masks, skipping
 * ------------------------------------------------------------------------------------------- */

/* the definition, element by element */
static int visible_def(int64_t i, int64_t j, int64_t Nq, int64_t Nk, int causal, int window, int64_t L, int64_t R) {
    const int64_t ip = i + Nk - Nq;
    if (causal && j > ip) return 0;
    if (window && L >= 0 && j < ip - L) return 0;
    if (window && R >= 0 && j > ip + R) return 0;
    return 1;
}

Test(attention_variants, window_tile_kind_matches_brute_force) {
    const int64_t sizes[][2] = {{1, 1}, {7, 7}, {13, 29}, {29, 13}, {64, 64}, {5, 40}};
    const int64_t blocks[][2] = {{1, 1}, {4, 3}, {8, 8}, {16, 5}};
    const int64_t wins[][2] = {{-1, -1}, {0, 0}, {3, 1}, {-1, 2}, {5, -1}, {0, 7}, {40, 40}};
    int64_t checked = 0;
    for (size_t a = 0; a < sizeof sizes / sizeof sizes[0]; a++)
        for (size_t bl = 0; bl < sizeof blocks / sizeof blocks[0]; bl++)
            for (size_t w = 0; w < sizeof wins / sizeof wins[0]; w++)
                for (int causal = 0; causal < 2; causal++)
                    for (int window = 0; window < 2; window++) {
                        const int64_t Nq = sizes[a][0], Nk = sizes[a][1], bq = blocks[bl][0], bk = blocks[bl][1];
                        const int64_t L = wins[w][0], R = wins[w][1];
                        /* rows: the range function against the definition */
                        for (int64_t i = 0; i < Nq; i++)
                            for (int64_t j = 0; j < Nk; j++)
                                cr_assert_eq(fg_attn_in_window(i, j, Nq, Nk, causal, window, L, R),
                                             visible_def(i, j, Nq, Nk, causal, window, L, R),
                                             "Nq %lld Nk %lld causal %d window %d (%lld,%lld): (i %lld, j %lld)",
                                             (long long)Nq, (long long)Nk, causal, window, (long long)L, (long long)R,
                                             (long long)i, (long long)j);
                        for (int64_t i0 = 0; i0 < Nq; i0 += bq)
                            for (int64_t j0 = 0; j0 < Nk; j0 += bk) {
                                const int64_t nq = Nq - i0 < bq ? Nq - i0 : bq, nk = Nk - j0 < bk ? Nk - j0 : bk;
                                int64_t seen = 0;
                                for (int64_t i = i0; i < i0 + nq; i++)
                                    for (int64_t j = j0; j < j0 + nk; j++)
                                        seen += visible_def(i, j, Nq, Nk, causal, window, L, R);
                                fg_tile_kind want = seen == 0         ? FG_TILE_MASKED
                                                    : seen == nq * nk ? FG_TILE_FULL
                                                                      : FG_TILE_PARTIAL;
                                fg_tile_kind got =
                                    fg_attn_tile_kind_window(i0, nq, j0, nk, Nq, Nk, causal, window, L, R);
                                cr_assert_eq(got, want,
                                             "Nq %lld Nk %lld blocks %lld,%lld causal %d window %d (%lld,%lld): tile "
                                             "at (%lld, %lld) "
                                             "is %d, want %d",
                                             (long long)Nq, (long long)Nk, (long long)bq, (long long)bk, causal, window,
                                             (long long)L, (long long)R, (long long)i0, (long long)j0, got, want);
                                checked++;
                            }
                    }
    cr_expect(checked > 1000, "only %lld tiles checked", (long long)checked);
}

Test(attention_variants, block_mask_records_each_tile_and_broadcasts) {
    const int64_t B = 2, H = 3, Nq = 23, Nk = 17;
    const int bq = 4, bk = 5;
    fg_attn_block_mask *full = fg_attn_block_mask_create(mask_stripes, NULL, B, H, Nq, Nk, bq, bk);
    fg_attn_block_mask *bcast = fg_attn_block_mask_create(mask_docs, NULL, 1, 1, Nq, Nk, bq, bk);
    cr_assert(full && bcast, "%s", fg_last_error());
    int64_t counts[3] = {0};
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t qt = 0; qt * bq < Nq; qt++)
                for (int64_t kt = 0; kt * bk < Nk; kt++) {
                    for (int which = 0; which < 2; which++) {
                        fg_attn_mask_fn m = which ? mask_docs : mask_stripes;
                        int64_t seen = 0, all = 0;
                        for (int64_t i = qt * bq; i < Nq && i < (qt + 1) * bq; i++)
                            for (int64_t j = kt * bk; j < Nk && j < (kt + 1) * bk; j++, all++)
                                seen += m(b, h, i, j, NULL) != 0;
                        fg_tile_kind want = seen == 0 ? FG_TILE_MASKED : seen == all ? FG_TILE_FULL : FG_TILE_PARTIAL;
                        fg_tile_kind got = fg_attn_block_mask_kind(which ? bcast : full, b, h, qt, kt);
                        cr_expect_eq(got, want, "%s b %lld h %lld tile (%lld, %lld): %d, want %d",
                                     which ? "docs (broadcast)" : "stripes", (long long)b, (long long)h, (long long)qt,
                                     (long long)kt, got, want);
                        if (!which) counts[want]++;
                    }
                }
    for (int kd = 0; kd < 3; kd++)
        cr_expect_eq(fg_attn_block_mask_count(full, (fg_tile_kind)kd), counts[kd], "kind %d: %lld tiles, want %lld", kd,
                     (long long)fg_attn_block_mask_count(full, (fg_tile_kind)kd), (long long)counts[kd]);
    cr_expect(counts[FG_TILE_PARTIAL] > 0, "the stripes should make some tiles partial");
    cr_expect(fg_attn_block_mask_count(bcast, FG_TILE_MASKED) > 0 &&
                  fg_attn_block_mask_count(bcast, FG_TILE_PARTIAL) > 0,
              "the documents should mask some tiles and cut through others");
    fg_attn_block_mask_release(full);
    fg_attn_block_mask_release(bcast);
}

/* A mask that counts its calls and the calls made for elements of tiles the block mask calls
 * MASKED or FULL (flash should test elements of PARTIAL tiles only). */
typedef struct {
    const fg_attn_block_mask *bm;
    int bq, bk;
    int64_t calls, outside_partial;
} counting_mask;
static int mask_docs_counted(int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    counting_mask *c = u;
    c->calls++;
    if (c->bm && fg_attn_block_mask_kind(c->bm, b, h, i / c->bq, j / c->bk) != FG_TILE_PARTIAL) c->outside_partial++;
    return mask_docs(b, h, i, j, NULL);
}

Test(attention_variants, flash_tests_the_mask_only_in_partial_tiles) {
    const int64_t B = 1, H = 2, N = 96, d = 8;
    const int bq = 16, bk = 16;
    counting_mask cm = {.bq = bq, .bk = bk};
    fg_attn_block_mask *bm = fg_attn_block_mask_create(mask_docs_counted, &cm, 1, 1, N, N, bq, bk);
    cr_assert(bm, "%s", fg_last_error());
    cr_expect_eq(cm.calls, N * N, "building evaluates every element once: %lld calls", (long long)cm.calls);
    cm.bm = bm;
    cm.calls = 0;
    fg_tensor *q = fgt_randn4(FG_F64, B, H, N, d, 1, 71, 1), *k = fgt_randn4(FG_F64, B, H, N, d, 1, 71, 2),
              *v = fgt_randn4(FG_F64, B, H, N, d, 1, 71, 3), *dout = fgt_randn4(FG_F64, B, H, N, d, 1, 71, 4);
    fg_attn_opts o = fg_attn_defaults();
    o.custom.mask = mask_docs_counted;
    o.custom.user = &cm;
    o.custom.block_mask = bm; /* block sizes 0: taken from the block mask */
    fgt_attn_run r = fgt_run_attention(q, k, v, dout, &o);
    cr_expect_eq(cm.outside_partial, 0, "%lld of %lld mask calls were for tiles the block mask calls MASKED or FULL",
                 (long long)cm.outside_partial, (long long)cm.calls);
    const int64_t partial = fg_attn_block_mask_count(bm, FG_TILE_PARTIAL);
    cr_expect(cm.calls > 0 && cm.calls <= 2 * B * H * partial * bq * bk,
              "%lld mask calls for %lld partial tiles of %d elements (forward and backward)", (long long)cm.calls,
              (long long)partial, bq * bk);
    fprintf(stderr,
            "[attention_variants] document mask N=%lld tiles %dx%d: %lld masked, %lld partial, %lld full; %lld mask "
            "calls in forward+backward against %lld elements\n",
            (long long)N, bq, bk, (long long)fg_attn_block_mask_count(bm, FG_TILE_MASKED), (long long)partial,
            (long long)fg_attn_block_mask_count(bm, FG_TILE_FULL), (long long)cm.calls, (long long)(2 * B * H * N * N));
    /* and the result is the one naive gets, which calls the mask everywhere */
    fg_attn_opts on = o;
    on.impl = FG_ATTN_NAIVE;
    fgt_attn_run n = fgt_run_attention(q, k, v, dout, &on);
    const fg_tensor *x[5] = {r.o, r.lse, r.dq, r.dk, r.dv}, *y[5] = {n.o, n.lse, n.dq, n.dk, n.dv};
    for (int t = 0; t < 5; t++) {
        fgt_cmp e = fgt_compare(x[t], y[t], 0, 0);
        cr_expect(!e.nonfinite && fgt_rel_err(e) <= 1e-12, "output %d: flash vs naive rel err %.3g", t, fgt_rel_err(e));
    }
    fgt_attn_run_free(&r);
    fgt_attn_run_free(&n);
    fg_attn_block_mask_release(bm);
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(dout);
}

/* Flash must not touch a key tile that no query of a query tile sees. Poison V in one key tile
 * with NaN: the rows of query tiles that see none of those keys stay finite only if their tile
 * pair was skipped (a computed tile multiplies its zero weights by V, and 0 · NaN is NaN). */
Test(attention_variants, flash_skips_tiles_outside_the_window_and_the_block_mask) {
    const int64_t N = 64, d = 4, bq = 8, bk = 8;
    struct {
        const char *what;
        int causal, window;
        int64_t L, R;
        int mask;
    } rows[] = {
        {"window 2,2", 0, 1, 2, 2, 0}, {"window 9,0 + causal", 1, 1, 9, 0, 0}, {"window -1,3", 0, 1, -1, 3, 0},
        {"causal", 1, 0, 0, 0, 0},     {"document mask", 0, 0, 0, 0, 1},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int skipped_tiles = 0;
        for (int64_t kt = 0; kt < N / bk; kt += 3) {
            fg_tensor *q = fgt_randn4(FG_F64, 1, 1, N, d, 1, 81, 1), *k = fgt_randn4(FG_F64, 1, 1, N, d, 1, 81, 2),
                      *v = fgt_randn4(FG_F64, 1, 1, N, d, 1, 81, 3);
            for (int64_t j = kt * bk; j < (kt + 1) * bk; j++)
                for (int64_t c = 0; c < d; c++) fg_set(v, j * d + c, NAN);
            fg_attn_opts o = fg_attn_defaults();
            o.causal = rows[r].causal;
            o.variant.window = rows[r].window;
            o.variant.window_left = rows[r].L;
            o.variant.window_right = rows[r].R;
            o.block_q = (int)bq;
            o.block_k = (int)bk;
            if (rows[r].mask) o.custom.mask = mask_docs;
            fg_tensor *out = fg_attention(q, k, v, &o, NULL);
            cr_assert(out, "%s", fg_last_error());
            int computed_blind_rows = 0, computed_blind_nan = 0;
            for (int64_t qt = 0; qt < N / bq; qt++) {
                /* does any query of this tile see a key of tile kt? (the definition) */
                int seen = 0;
                for (int64_t i = qt * bq; i < (qt + 1) * bq; i++)
                    for (int64_t j = kt * bk; j < (kt + 1) * bk; j++)
                        seen |= visible_def(i, j, N, N, rows[r].causal, rows[r].window, rows[r].L, rows[r].R) &&
                                (!rows[r].mask || mask_docs(0, 0, i, j, NULL));
                for (int64_t i = qt * bq; i < (qt + 1) * bq; i++) {
                    int row_sees = 0, row_nan = 0;
                    for (int64_t j = kt * bk; j < (kt + 1) * bk; j++)
                        row_sees |= visible_def(i, j, N, N, rows[r].causal, rows[r].window, rows[r].L, rows[r].R) &&
                                    (!rows[r].mask || mask_docs(0, 0, i, j, NULL));
                    for (int64_t c = 0; c < d; c++) row_nan |= isnan(fg_get(out, i * d + c));
                    if (!seen)
                        cr_expect(!row_nan,
                                  "%s, poisoned key tile %lld: row %lld of query tile %lld (which sees none of "
                                  "its keys) is NaN: the tile pair was not skipped",
                                  rows[r].what, (long long)kt, (long long)i, (long long)qt);
                    else if (!row_sees) {
                        computed_blind_rows++;
                        computed_blind_nan += row_nan;
                    }
                }
                skipped_tiles += !seen;
            }
            /* sanity of the poison: rows in computed tiles that see no poisoned key do turn NaN (if a
             * kernel ever stops multiplying zero weights by V, this test needs another probe) */
            if (computed_blind_rows)
                cr_expect(computed_blind_nan > 0, "%s, key tile %lld: the NaN probe is blind (%d rows)", rows[r].what,
                          (long long)kt, computed_blind_rows);
            fg_release(out);
            fg_release(q);
            fg_release(k);
            fg_release(v);
        }
        cr_expect(skipped_tiles > 0, "%s: no tile pair to skip, the test checks nothing", rows[r].what);
    }
}

Test(attention_variants, raw_flash_kernel_without_block_mask_tests_every_element) {
    /* the raw kernels accept a mask with no block mask: every tile counts as PARTIAL for it */
    const int64_t B = 1, H = 2, Nq = 30, Nk = 26, d = 4;
    fg_tensor *q = fgt_randn4(FG_F64, B, H, Nq, d, 1, 91, 1), *k = fgt_randn4(FG_F64, B, H, Nk, d, 1, 91, 2),
              *v = fgt_randn4(FG_F64, B, H, Nk, d, 1, 91, 3);
    fg_attn_opts o = fg_attn_defaults();
    o.custom.mask = mask_docs;
    o.block_q = 7;
    o.block_k = 6;
    fg_tensor *lse_ref = NULL;
    fg_tensor *ref = fg_attention(q, k, v, &o, &lse_ref); /* builds a block mask */
    cr_assert(ref, "%s", fg_last_error());
    fg_attn_problem pr;
    cr_assert_eq(fg_attn_problem_init(&pr, B, H, Nq, Nk, d, &o), FG_OK, "%s", fg_last_error());
    cr_assert(pr.custom.block_mask == NULL);
    fg_tensor *out = fg_empty(FG_F64, FG_CPU, 4, (int64_t[]){B, H, Nq, d}),
              *lse = fg_empty(FG_F64, FG_CPU, 3, (int64_t[]){B, H, Nq});
    cr_assert_eq(fg_attn_flash_forward_f64(fg_data(out), fg_data(lse), fg_data(q), fg_data(k), fg_data(v), &pr), FG_OK);
    fgt_cmp e = fgt_compare(out, ref, 0, 0), el = fgt_compare(lse, lse_ref, 0, 0);
    cr_expect(e.max_abs == 0 && el.max_abs == 0, "with and without the block mask: O differs by %g, lse by %g",
              e.max_abs, el.max_abs);
    fg_tensor *all[] = {q, k, v, ref, lse_ref, out, lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fg_release(all[i]);
}

/* ---------------------------------------------------------------------------------------------
 * rows that see no key
 * ------------------------------------------------------------------------------------------- */

static int mask_rows_3_to_6_see_nothing(int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)b, (void)h, (void)j, (void)u;
    return i < 3 || i > 6;
}

Test(attention_variants, rows_that_see_no_key_are_zero_with_zero_gradients) {
    /* window 0,0 with Nq = 9 > Nk = 4: i' = i − 5, rows 0..4 see nothing; and a mask that hides
     * every key from rows 3..6 */
    const int64_t B = 1, H = 2, Nq = 9, Nk = 4, d = 3;
    for (int which = 0; which < 2; which++)
        for (int dt = 0; dt < 2; dt++)
            for (int impl = 0; impl < 2; impl++)
                for (int drop = 0; drop < 2; drop++) {
                    fg_tensor *q = fgt_randn4((fg_dtype)dt, B, H, Nq, d, 1, 95, 1),
                              *k = fgt_randn4((fg_dtype)dt, B, 1, Nk, d, 1, 95, 2),
                              *v = fgt_randn4((fg_dtype)dt, B, 1, Nk, d, 1, 95, 3),
                              *dout = fgt_randn4((fg_dtype)dt, B, H, Nq, d, 1, 95, 4);
                    fg_attn_opts o = fg_attn_defaults();
                    o.impl = (fg_attn_impl)impl;
                    o.dropout_p = drop ? 0.4 : 0;
                    o.block_q = 2;
                    o.block_k = 3;
                    o.variant.alibi = 1;
                    o.variant.softcap = 2;
                    if (which == 0) {
                        o.variant.window = 1;
                    } else {
                        o.custom.mask = mask_rows_3_to_6_see_nothing;
                    }
                    fgt_attn_run r = fgt_run_attention(q, k, v, dout, &o);
                    for (int64_t h = 0; h < H; h++)
                        for (int64_t i = 0; i < Nq; i++) {
                            const int blind = which == 0 ? i < 5 : (i >= 3 && i <= 6);
                            const double lse = fg_get(r.lse, h * Nq + i);
                            cr_expect(blind ? lse == -INFINITY : isfinite(lse), "%s %s %s: head %lld row %lld lse %g",
                                      which ? "mask" : "window", fg_dtype_name((fg_dtype)dt), fg_attn_impl_name(o.impl),
                                      (long long)h, (long long)i, lse);
                            for (int64_t c = 0; c < d; c++) {
                                const int64_t at = (h * Nq + i) * d + c;
                                const double ov = fg_get(r.o, at), gq = fg_get(r.dq, at);
                                cr_expect(isfinite(ov) && isfinite(gq) && (!blind || (ov == 0 && gq == 0)),
                                          "%s %s: row %lld: O %g dQ %g", which ? "mask" : "window",
                                          fg_attn_impl_name(o.impl), (long long)i, ov, gq);
                            }
                        }
                    for (int64_t e = 0; e < fg_numel(r.dk); e++)
                        cr_expect(isfinite(fg_get(r.dk, e)) && isfinite(fg_get(r.dv, e)), "dK/dV[%lld] not finite",
                                  (long long)e);
                    fgt_attn_run_free(&r);
                    fg_release(q);
                    fg_release(k);
                    fg_release(v);
                    fg_release(dout);
                }
}

/* ---------------------------------------------------------------------------------------------
 * memory: variants keep flash's O(N) memory
 * ------------------------------------------------------------------------------------------- */

Test(attention_variants, flash_with_variants_allocates_nothing_of_size_nq_by_nk) {
    const int64_t N = fgt_sanitize() ? 512 : 2048, d = 32;
    fg_tensor *q = fgt_randn4(FG_F32, 1, 4, N, d, 1, 97, 1), *k = fgt_randn4(FG_F32, 1, 2, N, d, 1, 97, 2),
              *v = fgt_randn4(FG_F32, 1, 2, N, d, 1, 97, 3), *dout = fgt_randn4(FG_F32, 1, 4, N, d, 1, 97, 4);
    fg_set_requires_grad(q, 1);
    fg_set_requires_grad(k, 1);
    fg_set_requires_grad(v, 1);
    fg_attn_opts o = fg_attn_defaults();
    o.causal = 1;
    o.variant.window = 1;
    o.variant.window_left = 100;
    o.variant.window_right = -1;
    o.variant.alibi = 1;
    o.variant.softcap = 10;
    o.custom.score_mod = mod_wavy;
    o.custom.score_mod_grad = mod_wavy_grad;
    o.custom.mask = mask_docs;
    fg_alloc_reset_peak(FG_CPU);
    const size_t before = fg_alloc_get_stats(FG_CPU).current;
    fg_tensor *out = fg_attention(q, k, v, &o, NULL);
    cr_assert(out, "%s", fg_last_error());
    cr_assert_eq(fg_backward(out, dout), FG_OK, "%s", fg_last_error());
    const size_t peak = fg_alloc_get_stats(FG_CPU).peak - before;
    const size_t nn = (size_t)(N * N) * sizeof(float), nd = (size_t)(N * d) * sizeof(float) * 4;
    /* O, lse, lse_lo, dQ, dK, dV, the seeded dO, the block mask and tiles: all O(N) */
    cr_expect(peak < 6 * nd + nn / 16, "peak %zu bytes with variants; Nq*Nk*4 = %zu, Q is %zu", peak, nn, nd);
    fg_release(out);
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(dout);
}

/* ---------------------------------------------------------------------------------------------
 * errors
 * ------------------------------------------------------------------------------------------- */

Test(attention_variants, bad_variant_arguments_give_null_and_a_message) {
    fg_tensor *q = fgt_randn4(FG_F32, 1, 4, 5, 4, 1, 1, 1), *k = fgt_randn4(FG_F32, 1, 2, 6, 4, 1, 1, 2),
              *v = fgt_randn4(FG_F32, 1, 2, 6, 4, 1, 1, 3), *k3 = fgt_randn4(FG_F32, 1, 3, 6, 4, 1, 1, 2),
              *v3 = fgt_randn4(FG_F32, 1, 3, 6, 4, 1, 1, 3), *v4 = fgt_randn4(FG_F32, 1, 4, 6, 4, 1, 1, 3);
    fg_attn_block_mask *bm = fg_attn_block_mask_create(mask_docs, NULL, 1, 1, 5, 6, 4, 3);
    fg_attn_block_mask *bm_other = fg_attn_block_mask_create(mask_docs, NULL, 1, 1, 7, 6, 4, 3);
    cr_assert(bm && bm_other, "%s", fg_last_error());
    static const double bad_slopes[4] = {0.5, NAN, 0.1, 0.2};
    fg_attn_opts base = fg_attn_defaults();
    struct {
        const char *what;
        fg_tensor *k, *v;
        fg_attn_opts o;
        fg_status st;
        const char *msg;
    } rows[] = {
        {"H not a multiple of H_kv", k3, v3, base, FG_ERR_SHAPE, "multiple"},
        {"K and V heads differ", k, v4, base, FG_ERR_SHAPE, "do not fit"},
        {"n_kv_heads differs from K", k, v, base, FG_ERR_SHAPE, "K/V heads"},
        {"softcap < 0", k, v, base, FG_ERR_ARG, "softcap"},
        {"softcap NaN", k, v, base, FG_ERR_ARG, "softcap"},
        {"NaN slope", k, v, base, FG_ERR_ARG, "slope"},
        {"score_mod without grad", k, v, base, FG_ERR_ARG, "score_mod_grad"},
        {"grad without score_mod", k, v, base, FG_ERR_ARG, "score_mod"},
        {"block mask without mask", k, v, base, FG_ERR_ARG, "block mask"},
        {"block mask for other sizes", k, v, base, FG_ERR_SHAPE, "block mask"},
        {"block mask with other blocks", k, v, base, FG_ERR_ARG, "block mask"},
    };
    rows[2].o.variant.n_kv_heads = 4;
    rows[3].o.variant.softcap = -1;
    rows[4].o.variant.softcap = NAN;
    rows[5].o.variant.alibi = 1;
    rows[5].o.variant.alibi_slopes = bad_slopes;
    rows[6].o.custom.score_mod = mod_wavy;
    rows[7].o.custom.score_mod_grad = mod_wavy_grad;
    rows[8].o.custom.block_mask = bm;
    rows[9].o.custom.mask = mask_docs;
    rows[9].o.custom.block_mask = bm_other;
    rows[10].o.custom.mask = mask_docs;
    rows[10].o.custom.block_mask = bm;
    rows[10].o.block_q = 8;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        for (int impl = 0; impl < 2; impl++) {
            rows[i].o.impl = (fg_attn_impl)impl;
            fg_clear_error();
            fg_tensor *lse = (fg_tensor *)1;
            fg_tensor *out = fg_attention(q, rows[i].k, rows[i].v, &rows[i].o, &lse);
            cr_expect(out == NULL && lse == NULL, "%s: expected NULL", rows[i].what);
            cr_expect_eq(fg_last_status(), rows[i].st, "%s: status %s, want %s (%s)", rows[i].what,
                         fg_status_name(fg_last_status()), fg_status_name(rows[i].st), fg_last_error());
            cr_expect(strstr(fg_last_error(), rows[i].msg) != NULL, "%s: message '%s' lacks '%s'", rows[i].what,
                      fg_last_error(), rows[i].msg);
            fg_release(out);
        }
    /* block mask creation */
    fg_clear_error();
    cr_expect(fg_attn_block_mask_create(NULL, NULL, 1, 1, 4, 4, 0, 0) == NULL && fg_last_status() == FG_ERR_ARG,
              "NULL mask: %s", fg_last_error());
    cr_expect(fg_attn_block_mask_create(mask_docs, NULL, 0, 1, 4, 4, 0, 0) == NULL && fg_last_status() == FG_ERR_SHAPE,
              "B = 0: %s", fg_last_error());
    cr_expect(fg_attn_block_mask_create(mask_docs, NULL, 1, 1, 4, 4, -2, 0) == NULL && fg_last_status() == FG_ERR_ARG,
              "block -2: %s", fg_last_error());
    fg_attn_block_mask_release(bm);
    fg_attn_block_mask_release(bm_other);
    fg_tensor *all[] = {q, k, v, k3, v3, v4};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fg_release(all[i]);
}

/* ---------------------------------------------------------------------------------------------
 * the library's check and the registry
 * ------------------------------------------------------------------------------------------- */

Test(attention_variants, fg_attn_gradcheck_passes_every_case_and_catches_a_wrong_derivative) {
    for (int ci = 0; ci < N_VCASES; ci++) {
        const vcase *c = &vcases[ci];
        const vshape s = {1, 4, 7, 9, 4, 4, 3};
        fg_attn_block_mask *bm;
        fg_attn_opts o = vcase_opts(c, &s, FG_ATTN_FLASH, 1, 0.2, &bm);
        fg_attn_check_shape sh = {.B = s.B, .H = s.H, .Nq = s.Nq, .Nk = s.Nk, .d = s.d, .seed = 3};
        fg_attn_check_report rep;
        cr_assert_eq(fg_attn_gradcheck(&o, &sh, &rep), FG_OK, "%s: %s", c->name, fg_last_error());
        cr_expect(rep.passed && rep.n_rows == 15, "%s: %d rows, passed %d", c->name, rep.n_rows, rep.passed);
        for (int r = 0; r < rep.n_rows; r++)
            cr_expect(rep.rows[r].passed != 0, "%s: %s %s: abs %.3g rel %.3g limit %.3g", c->name, rep.rows[r].check,
                      rep.rows[r].tensor, rep.rows[r].max_abs, rep.rows[r].max_rel, rep.rows[r].limit);
        fg_attn_block_mask_release(bm);
    }
    /* a score_mod with a wrong derivative fails the finite-difference rows, and only those */
    fg_attn_opts o = fg_attn_defaults();
    o.custom.score_mod = mod_wavy;
    o.custom.score_mod_grad = cb_one;
    fg_attn_check_shape sh = {.B = 1, .H = 2, .Nq = 5, .Nk = 6, .d = 3, .seed = 4};
    fg_attn_check_report rep;
    cr_assert_eq(fg_attn_gradcheck(&o, &sh, &rep), FG_OK, "%s", fg_last_error());
    cr_expect(!rep.passed && rep.fd_worst_tensor != NULL, "a wrong score_mod_grad passed the check");
    for (int r = 0; r < rep.n_rows; r++)
        if (strcmp(rep.rows[r].check, "naive f64 vs finite diff") != 0)
            cr_expect(rep.rows[r].passed != 0, "%s %s failed: flash and naive share the same wrong derivative",
                      rep.rows[r].check, rep.rows[r].tensor);
    /* bad sizes are an error, not a failed check */
    sh.H = 3;
    o = fg_attn_defaults();
    o.variant.n_kv_heads = 2;
    cr_expect_eq(fg_attn_gradcheck(&o, &sh, &rep), FG_ERR_SHAPE, "H 3 with 2 K/V heads: %s", fg_last_error());
}

Test(attention_variants, registry_finds_replaces_and_lists_variants) {
    cr_assert(fg_attn_find_custom("softcap-cb") && fg_attn_find_custom("doc-mask"), "the two examples are registered");
    cr_expect(fg_attn_find_custom("no-such-variant") == NULL);
    fg_attn_custom c1 = {.mask = mask_docs}, c2 = {.mask = mask_stripes};
    cr_assert_eq(fg_attn_register_custom("test-reg", "first", &c1), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_attn_register_custom("test-reg", "second", &c2), FG_OK, "%s", fg_last_error());
    cr_expect(fg_attn_find_custom("test-reg")->mask == mask_stripes, "registering a taken name replaces it");
    int found = 0;
    const char *help = NULL;
    for (int i = 0; fg_attn_custom_name(i, &help); i++)
        if (!strcmp(fg_attn_custom_name(i, NULL), "test-reg")) {
            found++;
            cr_expect_str_eq(help, "second");
        }
    cr_expect_eq(found, 1, "test-reg listed %d times", found);
    cr_expect_eq(fg_attn_register_custom("", "x", &c1), FG_ERR_ARG);
    cr_expect_eq(fg_attn_register_custom(NULL, "x", &c1), FG_ERR_ARG);
}

Test(attention_variants, has_variant_sees_every_field) {
    fg_attn_opts o = fg_attn_defaults();
    o.causal = 1;
    o.dropout_p = 0.5;
    cr_expect(!fg_attn_has_variant(&o) && !fg_attn_has_variant(NULL), "causal and dropout are not variants");
    for (int f = 0; f < 7; f++) {
        fg_attn_opts x = fg_attn_defaults();
        switch (f) {
        case 0:
            x.variant.n_kv_heads = 1;
            break;
        case 1:
            x.variant.window = 1;
            break;
        case 2:
            x.variant.alibi = 1;
            break;
        case 3:
            x.variant.softcap = 1;
            break;
        case 4:
            x.custom.score_mod = mod_wavy;
            break;
        case 5:
            x.custom.score_mod_grad = mod_wavy_grad;
            break;
        default:
            x.custom.mask = mask_docs;
            break;
        }
        cr_expect(fg_attn_has_variant(&x), "field %d not seen", f);
    }
}

/* ---------------------------------------------------------------------------------------------
 * the command line
 * ------------------------------------------------------------------------------------------- */

Test(attention_variants, gradcheck_command_takes_the_variant_flags) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char cmd[1024], log[8192];
    const char *good[] = {
        "--h 4 --gqa 2 --window 3,1 --alibi --softcap 5 --causal --dropout 0.2",
        "--h 3 --gqa 1 --nq 9 --nk 6 --window 0,-1",
        "--custom doc-mask --causal --nq 12 --nk 12 --dropout 0.1",
        "--custom softcap-cb --alibi --window -1,2",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s gradcheck attention %s 2>&1", fgt_bin(), good[i]);
        int st = fgt_run_cmd(cmd, log, sizeof log);
        cr_expect_eq(st, 0, "'%s' exited %d:\n%s", good[i], st, log);
        cr_expect(strstr(log, "variant: ") && strstr(log, "gradcheck attention: PASS"), "'%s':\n%s", good[i], log);
    }
    const char *bad[] = {"--gqa 0",        "--gqa x",       "--h 4 --gqa 3", "--window 3",
                         "--window 1,2,3", "--window -2,1", "--softcap 0",   "--softcap -1",
                         "--softcap nan",  "--custom nope", "--window"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s gradcheck attention %s 2>&1", fgt_bin(), bad[i]);
        int st = fgt_run_cmd(cmd, log, sizeof log);
        cr_expect_eq(st, 2, "'%s' exited %d, want 2:\n%s", bad[i], st, log);
        cr_expect(strncmp(log, "flashgrad", 9) == 0 && strchr(log, '\n') == log + strlen(log) - 1,
                  "'%s': want one line starting 'flashgrad', got: %s", bad[i], log);
    }
    snprintf(cmd, sizeof cmd, "%s gradcheck attention --custom list 2>&1", fgt_bin());
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "--custom list: %s", log);
    cr_expect(strstr(log, "doc-mask") && strstr(log, "softcap-cb"), "--custom list:\n%s", log);
}

Test(attention_variants, attention_command_applies_the_variants) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    char dir[] = "/tmp/fg_attn_var_cli_XXXXXX";
    cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    char path[4][300], cmd[2048], log[4096];
    const char *nm[4] = {"q", "k", "v", "do"};
    fg_tensor *t[4] = {fgt_randn4(FG_F64, 1, 4, 9, 4, 1, 7, 1), fgt_randn4(FG_F64, 1, 2, 12, 4, 1, 7, 2),
                       fgt_randn4(FG_F64, 1, 2, 12, 4, 1, 7, 3), fgt_randn4(FG_F64, 1, 4, 9, 4, 1, 7, 4)};
    for (int i = 0; i < 4; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s.npy", dir, nm[i]);
        cr_assert_eq(fg_npy_save(path[i], t[i]), FG_OK, "%s", fg_last_error());
    }
    for (int impl = 0; impl < 2; impl++) {
        snprintf(
            cmd, sizeof cmd,
            "%s attention --q %s --k %s --v %s --do %s --out %s/out%d --impl %s --causal --gqa 2 --window 4,1 --alibi "
            "--softcap 3 --custom doc-mask --block-q 4 --block-k 5 2>&1",
            fgt_bin(), path[0], path[1], path[2], path[3], dir, impl, impl ? "flash" : "naive");
        int st = fgt_run_cmd(cmd, log, sizeof log);
        cr_expect_eq(st, 0, "exited %d: %s", st, log);
        /* the same through the library */
        fg_attn_opts o = fg_attn_defaults();
        o.impl = (fg_attn_impl)impl;
        o.causal = 1;
        o.variant = (fg_attn_variant){
            .n_kv_heads = 2, .window = 1, .window_left = 4, .window_right = 1, .alibi = 1, .softcap = 3};
        o.custom = *fg_attn_find_custom("doc-mask");
        o.block_q = 4;
        o.block_k = 5;
        fgt_attn_run r = fgt_run_attention(t[0], t[1], t[2], t[3], &o);
        const fg_tensor *want[5] = {r.o, r.lse, r.dq, r.dk, r.dv};
        const char *outs[5] = {"o", "lse", "dq", "dk", "dv"};
        for (int x = 0; x < 5; x++) {
            char p[400];
            snprintf(p, sizeof p, "%s/out%d/%s.npy", dir, impl, outs[x]);
            fg_tensor *got = fg_npy_load(p);
            cr_expect(got != NULL, "%s: %s", p, fg_last_error());
            if (!got) continue;
            fgt_cmp e = fgt_compare(got, want[x], 0, 0);
            cr_expect(e.max_abs == 0, "%s: CLI and library differ by %g", p, e.max_abs);
            fg_release(got);
        }
        fgt_attn_run_free(&r);
    }
    /* --gqa must agree with K's heads; bad values are usage errors */
    snprintf(cmd, sizeof cmd, "%s attention --q %s --k %s --v %s --out %s/bad --gqa 1 2>&1", fgt_bin(), path[0],
             path[1], path[2], dir);
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 1, "--gqa 1 with 2 K heads: %s", log);
    cr_expect(strstr(log, "K/V heads") != NULL, "message: %s", log);
    snprintf(cmd, sizeof cmd, "%s attention --q %s --k %s --v %s --out %s/bad --window 1 2>&1", fgt_bin(), path[0],
             path[1], path[2], dir);
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 2, "--window 1: %s", log);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    fgt_run_cmd(cmd, NULL, 0);
    for (int i = 0; i < 4; i++) fg_release(t[i]);
}

Test(attention_variants, match_pytorch_autograd_through_the_cli, .timeout = 600) {
    const char *what = "PyTorch cross-check of the attention variants";
    fgt_python_require(what, "numpy torch");
    if (access(fgt_bin(), X_OK) != 0) fgt_skip(what, "no flashgrad binary (set FG_BIN; make test does)");
    const char *script = "tests/attention_variants_torch_check.py";
    if (access(script, R_OK) != 0)
        fgt_skip(what, "tests/attention_variants_torch_check.py not found (run from the repo root)");
    char env[1024], log[16384];
    snprintf(env, sizeof env, "FG_BIN='%s'", fgt_bin());
    int st = fgt_python_run(env, script, fgt_sanitize() ? "--quick" : "", log, sizeof log);
    if (st == FGT_PYTHON_CANNOT_RUN) fgt_skip(what, log);
    cr_expect_eq(st, 0, "attention_variants_torch_check.py exited %d:\n%s", st, log);
}

/* ---------------------------------------------------------------------------------------------
 * the worked example in docs/attention.md — the code between the two marker lines below is the
 * guide's code block, character for character (guide_example_matches_the_guide checks it)
 * ------------------------------------------------------------------------------------------- */

/* docs/attention.md holds the block below character for character: clang-format leaves it alone. */
/* clang-format off */
/* ---- guide example: begin ---- */
/* A prefix-LM mask (every query sees the first `prefix` keys, the rest causally) and a learned-style
 * per-head temperature on the scores: s -> temp[h] * s. */
typedef struct {
    int64_t prefix;
    double temp[4]; /* one per head */
} prefix_lm;

static double temp_mod(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)b, (void)i, (void)j;
    return ((const prefix_lm *)user)->temp[h] * s;
}

/* d temp_mod / d s */
static double temp_mod_grad(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)s, (void)b, (void)i, (void)j;
    return ((const prefix_lm *)user)->temp[h];
}

static int prefix_lm_mask(int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)b, (void)h;
    return j < ((const prefix_lm *)user)->prefix || j <= i;
}

/* Returns 0 when the variant passes every check. */
static int guide_example(void) {
    static prefix_lm pl = {.prefix = 5, .temp = {0.5, 1.0, 1.5, 2.0}};
    fg_attn_custom variant = {.score_mod = temp_mod, .score_mod_grad = temp_mod_grad,
                              .mask = prefix_lm_mask, .user = &pl};

    /* 1. gradient-check it, here together with dropout: naive against finite differences,
     *    flash against naive in float64 and float32 */
    fg_attn_opts opts = fg_attn_defaults();
    opts.custom = variant;
    opts.dropout_p = 0.1;
    fg_attn_check_shape shape = {.B = 2, .H = 4, .Nq = 12, .Nk = 12, .d = 8, .seed = 1};
    fg_attn_check_report rep;
    if (fg_attn_gradcheck(&opts, &shape, &rep) != FG_OK) {
        fprintf(stderr, "gradcheck could not run: %s\n", fg_last_error());
        return 1;
    }
    for (int r = 0; r < rep.n_rows; r++)
        if (rep.rows[r].passed == 0)
            fprintf(stderr, "FAIL %s %s: max abs err %.3g\n", rep.rows[r].check, rep.rows[r].tensor,
                    rep.rows[r].max_abs);
    if (!rep.passed) return 1;

    /* 2. use it: build the block mask once (B = H = 1: the mask depends on neither), so that
     *    flash skips the tiles no query sees and tests the mask only in partial ones */
    const int64_t N = 256;
    fg_attn_block_mask *bm = fg_attn_block_mask_create(prefix_lm_mask, &pl, 1, 1, N, N, 64, 64);
    if (!bm) return 1;
    opts.custom.block_mask = bm;
    opts.dropout_p = 0;
    const int64_t shp[4] = {1, 4, N, 16};
    fg_tensor *q = fg_rand_normal(FG_F32, FG_CPU, 4, shp, 0, 1, 7, 1);
    fg_tensor *k = fg_rand_normal(FG_F32, FG_CPU, 4, shp, 0, 1, 7, 2);
    fg_tensor *v = fg_rand_normal(FG_F32, FG_CPU, 4, shp, 0, 1, 7, 3);
    fg_tensor *o = fg_attention(q, k, v, &opts, NULL);
    printf("prefix LM: %lld of %lld tiles skipped\n", (long long)fg_attn_block_mask_count(bm, FG_TILE_MASKED),
           (long long)(fg_attn_block_mask_count(bm, FG_TILE_MASKED) + fg_attn_block_mask_count(bm, FG_TILE_PARTIAL) +
                       fg_attn_block_mask_count(bm, FG_TILE_FULL)));
    int failed = o == NULL;
    fg_release(o);
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_attn_block_mask_release(bm);

    /* 3. register it by name, so that a program can pick it from its settings or command line
     *    (fg_attn_find_custom), and check it as such a program would run it: causal, 9 x 9 */
    fg_attn_register_custom("prefix-lm", "prefix LM (5 keys) with per-head temperature", &variant);
    const fg_attn_custom *named = fg_attn_find_custom("prefix-lm");
    if (!named) return 1;
    fg_attn_opts causal = fg_attn_defaults();
    causal.custom = *named;
    causal.causal = 1;
    fg_attn_check_shape small = {.B = 1, .H = 4, .Nq = 9, .Nk = 9, .d = 8, .seed = 2};
    failed |= fg_attn_gradcheck(&causal, &small, &rep) != FG_OK || !rep.passed;
    return failed;
}
/* ---- guide example: end ---- */
/* clang-format on */

Test(attention_variants, guide_example_passes) {
    cr_expect_eq(guide_example(), 0, "the worked example in docs/attention.md failed (see above)");
}

/* The text between `begin` and `end` (exclusive) of file `path`, as a malloc'd string, or NULL. */
static char *between(const char *path, const char *begin, const char *end) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *a = strstr(buf, begin);
    if (!a) return NULL;
    a = strchr(a, '\n');
    if (!a) return NULL;
    a++;
    char *e = strstr(a, end);
    if (!e) return NULL;
    while (e > a && e[-1] != '\n') e--; /* back to the start of the end marker's line */
    return strndup(a, (size_t)(e - a));
}

Test(attention_variants, guide_example_matches_the_guide) {
    const char *guide = "docs/attention.md", *self = "tests/test_attention_variants.c";
    if (access(guide, R_OK) != 0 || access(self, R_OK) != 0)
        cr_skip_test("%s or %s not found (run from the repository root)", guide, self);
    char *in_test = between(self, "/* ---- guide example: begin ---- */", "/* ---- guide example: end ---- */");
    char *in_guide = between(guide, "<!-- guide example: begin", "```\n<!-- guide example: end");
    cr_assert(in_test, "markers not found in %s", self);
    cr_assert(in_guide, "markers not found in %s", guide);
    /* the guide's block opens with ```c on the marker's next line */
    const char *g = in_guide;
    if (!strncmp(g, "```c\n", 5)) g += 5;
    size_t at = 0;
    while (in_test[at] && in_test[at] == g[at]) at++;
    cr_expect(in_test[at] == '\0' && g[at] == '\0',
              "the example in %s and %s differ at character %zu: test has \"%.40s\", guide has \"%.40s\"", self, guide,
              at, in_test + at, g + at);
    free(in_test);
    free(in_guide);
}

/* ---------------------------------------------------------------------------------------------
 * the causal diagonal: a tile that the causal mask cuts through computes its products in two parts
 * (the first half of its rows against the keys they can see, the rest against all); a causal mask
 * with an unbounded window is the same mask through the whole-tile path. With the x86 table both
 * give the same bits; with the portable one (BLAS tiles) to float32 rounding.
 * ------------------------------------------------------------------------------------------- */
Test(attention_variants, a_causal_diagonal_tile_in_parts_gives_the_whole_tiles_results) {
    static const struct {
        int64_t Nq, Nk, d;
        int bq, bk, causal;
    } cases[] = {
        {200, 200, 16, 64, 64, 1},                      /* ragged last blocks */
        {130, 190, 24, 32, 32, 1},                      /* bottom-right: the diagonal shifted */
        {190, 130, 16, 48, 40, 1},                      /* more queries than keys */
        {150, 170, 8, 40, 24, FG_ATTN_CAUSAL_TOP_LEFT}, /* top-left */
        {77, 77, 32, 9, 9, 1},                          /* odd blocks */
    };
    const int exact = fg_attn_flash_ops_f32() == &fg_flash_x86_f32;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double *got[2][4] = {{0}};
        for (int form = 0; form < 2; form++) {
            fg_tensor *q = fgt_randn4(FG_F32, 2, 2, cases[c].Nq, cases[c].d, 1, 61 + c, 1);
            fg_tensor *k = fgt_randn4(FG_F32, 2, 2, cases[c].Nk, cases[c].d, 1, 61 + c, 2);
            fg_tensor *v = fgt_randn4(FG_F32, 2, 2, cases[c].Nk, cases[c].d, 1, 61 + c, 3);
            fg_tensor *dout = fgt_randn4(FG_F32, 2, 2, cases[c].Nq, cases[c].d, 1, 61 + c, 4);
            fg_set_requires_grad(q, 1), fg_set_requires_grad(k, 1), fg_set_requires_grad(v, 1);
            fg_attn_opts o = fg_attn_defaults();
            o.impl = FG_ATTN_FLASH;
            o.causal = cases[c].causal;
            o.block_q = cases[c].bq;
            o.block_k = cases[c].bk;
            if (form) { /* a window with no bound on either side: the same mask, the whole-tile path */
                o.variant.window = 1;
                o.variant.window_left = -1;
                o.variant.window_right = -1;
            }
            fg_tensor *out = fg_attention(q, k, v, &o, NULL);
            cr_assert(out, "%s", fg_last_error());
            cr_assert_eq(fg_backward(out, dout), FG_OK, "%s", fg_last_error());
            got[form][0] = fgt_values(out), got[form][1] = fgt_values(q->grad);
            got[form][2] = fgt_values(k->grad), got[form][3] = fgt_values(v->grad);
            fg_release(out), fg_release(q), fg_release(k), fg_release(v), fg_release(dout);
        }
        static const char *names[4] = {"O", "dQ", "dK", "dV"};
        const int64_t n[4] = {4 * cases[c].Nq * cases[c].d, 4 * cases[c].Nq * cases[c].d, 4 * cases[c].Nk * cases[c].d,
                              4 * cases[c].Nk * cases[c].d};
        for (int t = 0; t < 4; t++) {
            for (int64_t i = 0; i < n[t]; i++) {
                const double a = got[0][t][i], b = got[1][t][i];
                if (exact ? memcmp(&a, &b, sizeof a) != 0 : !(fabs(a - b) <= 1e-5 * (1 + fabs(b))))
                    cr_assert_fail("case %zu: %s[%lld] is %a in parts, %a as a whole tile", c, names[t], (long long)i,
                                   a, b);
            }
            free(got[0][t]), free(got[1][t]);
        }
    }
}
