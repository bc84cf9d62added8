/* test_attention_dropin.c — what the torch drop-ins (python/flashgrad/_torch_ops.py) need from the
 * attention family: the top-left causal alignment, tensor masks (bool keep-mask, float bias, with
 * broadcast strides) and packed variable-length sequences.
 *
 * Each is checked against an independent form of the same math: top-left causal against a mask
 * callback j <= i; a tensor mask against the callbacks written out by hand; varlen against one
 * fg_attention call per document. Naive and flash, float64, forward and all three gradients, and
 * fg_gradcheck (central finite differences) on the new options.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "autograd/gradcheck.h"
#include "ops/attention_kernels.h"
#include "tests/common.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}

TestSuite(attention_dropin, .fini = leak_check, .timeout = 300);

static int mask_top_left(int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)b, (void)h, (void)u;
    return j <= i;
}

static void expect_runs_equal(const fgt_attn_run *a, const fgt_attn_run *b, double tol, const char *what) {
    FGT_ASSERT_CLOSE(a->o, b->o, tol, tol, what);
    FGT_ASSERT_CLOSE(a->dq, b->dq, tol, tol, what);
    FGT_ASSERT_CLOSE(a->dk, b->dk, tol, tol, what);
    FGT_ASSERT_CLOSE(a->dv, b->dv, tol, tol, what);
}

Test(attention_dropin, top_left_causal_equals_the_mask_j_le_i) {
    const int64_t sizes[][2] = {{2, 5}, {7, 3}, {5, 5}, {13, 29}, {29, 13}};
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++)
        for (int impl = 0; impl < 2; impl++) {
            const int64_t Nq = sizes[c][0], Nk = sizes[c][1];
            fg_tensor *q = fgt_randn4(FG_F64, 2, 3, Nq, 4, 1, 11, 1), *k = fgt_randn4(FG_F64, 2, 3, Nk, 4, 1, 11, 2),
                      *v = fgt_randn4(FG_F64, 2, 3, Nk, 4, 1, 11, 3), *d = fgt_randn4(FG_F64, 2, 3, Nq, 4, 1, 11, 4);
            fg_attn_opts o = fg_attn_defaults();
            o.impl = (fg_attn_impl)impl;
            o.block_q = 4, o.block_k = 3;
            o.causal = FG_ATTN_CAUSAL_TOP_LEFT;
            fgt_attn_run a = fgt_run_attention(q, k, v, d, &o);
            o.causal = 0;
            o.custom.mask = mask_top_left;
            fgt_attn_run b = fgt_run_attention(q, k, v, d, &o);
            char what[64];
            snprintf(what, sizeof what, "Nq %lld Nk %lld %s", (long long)Nq, (long long)Nk,
                     fg_attn_impl_name((fg_attn_impl)impl));
            expect_runs_equal(&a, &b, 1e-13, what);
            fgt_attn_run_free(&a), fgt_attn_run_free(&b);
            fg_release(q), fg_release(k), fg_release(v), fg_release(d);
        }
}

Test(attention_dropin, bottom_right_causal_is_unchanged_by_the_new_alignment) {
    /* causal = 1 is bottom-right, as before: it differs from top-left when Nq != Nk */
    fg_tensor *q = fgt_randn4(FG_F64, 1, 1, 2, 4, 1, 5, 1), *k = fgt_randn4(FG_F64, 1, 1, 5, 4, 1, 5, 2),
              *v = fgt_randn4(FG_F64, 1, 1, 5, 4, 1, 5, 3);
    fg_attn_opts o = fg_attn_defaults();
    o.causal = FG_ATTN_CAUSAL_BOTTOM_RIGHT;
    fg_tensor *br = fgt_ok(fg_attention(q, k, v, &o, NULL), "bottom-right");
    o.causal = FG_ATTN_CAUSAL_TOP_LEFT;
    fg_tensor *tl = fgt_ok(fg_attention(q, k, v, &o, NULL), "top-left");
    /* query 0 sees keys 0..3 bottom-right but only key 0 top-left: there O_0 = v_0 exactly */
    const double *t = (double *)fg_data(tl), *vv = (double *)fg_data(v), *b = (double *)fg_data(br);
    for (int c = 0; c < 4; c++) cr_expect_eq(t[c], vv[c], "top-left row 0 must be v_0");
    cr_expect(fabs(b[0] - vv[0]) > 1e-6, "bottom-right row 0 must mix keys 0..3");
    fg_release(br), fg_release(tl), fg_release(q), fg_release(k), fg_release(v);
}

static fg_tensor *attention_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    return fg_attention(in[0], in[1], in[2], (const fg_attn_opts *)user, NULL);
}

static void gradcheck_opts(fg_attn_opts *o, int64_t Nq, int64_t Nk, const char *what) {
    for (int impl = 0; impl < 2; impl++) {
        o->impl = (fg_attn_impl)impl;
        fg_tensor *in[3] = {fgt_randn4(FG_F64, 1, 2, Nq, 3, 1, 21, 1), fgt_randn4(FG_F64, 1, 2, Nk, 3, 1, 21, 2),
                            fgt_randn4(FG_F64, 1, 2, Nk, 3, 1, 21, 3)};
        for (int i = 0; i < 3; i++) fg_set_requires_grad(in[i], 1);
        fg_gradcheck_report rep;
        fg_gradcheck_opts go = {.eps = 1e-6, .atol = 1e-8, .rtol = 1e-6, .seed = 9};
        cr_assert_eq(fg_gradcheck(attention_fn, in, 3, o, &go, &rep), FG_OK, "%s", fg_last_error());
        cr_expect(rep.passed, "%s %s: input %d index %lld analytic %.12g numeric %.12g", what,
                  fg_attn_impl_name(o->impl), rep.worst_input, (long long)rep.worst_index, rep.analytic, rep.numeric);
        for (int i = 0; i < 3; i++) fg_release(in[i]);
    }
}

Test(attention_dropin, top_left_causal_and_tensor_masks_match_finite_differences) {
    fg_attn_opts o = fg_attn_defaults();
    o.block_q = 2, o.block_k = 3;
    o.causal = FG_ATTN_CAUSAL_TOP_LEFT;
    gradcheck_opts(&o, 4, 7, "top-left Nq < Nk");
    gradcheck_opts(&o, 7, 4, "top-left Nq > Nk");
    /* a float bias (Nq, Nk) broadcast over b and h, with −inf entries */
    double bias[5 * 6];
    for (int e = 0; e < 30; e++) bias[e] = e % 7 == 3 ? -INFINITY : 0.3 * sin((double)e);
    fg_attn_tensor_mask tm = {.data = bias, .kind = FG_ATTN_TMASK_F64, .stride = {0, 0, 6, 1}};
    o.causal = 0;
    o.custom = fg_attn_tensor_mask_custom(&tm);
    gradcheck_opts(&o, 5, 6, "float bias");
}

/* the hand-written callbacks a tensor mask must equal */
typedef struct {
    const uint8_t *keep; /* (B, 1, Nq, Nk) */
    const float *bias;   /* (Nq, Nk) */
    int64_t H, Nq, Nk;
} hand;
static int hand_keep(int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    const hand *m = u;
    (void)h;
    return m->keep[(b * m->Nq + i) * m->Nk + j];
}
static double hand_bias(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    const hand *m = u;
    (void)b, (void)h;
    return s + (double)m->bias[i * m->Nk + j];
}
static double hand_one(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)s, (void)b, (void)h, (void)i, (void)j, (void)u;
    return 1;
}
static int hand_bias_visible(int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    const hand *m = u;
    (void)b, (void)h;
    return m->bias[i * m->Nk + j] != -INFINITY;
}

Test(attention_dropin, tensor_masks_with_broadcast_strides_equal_their_callbacks) {
    enum { B = 2, H = 3, Nq = 9, Nk = 11 };
    uint8_t keep[B * Nq * Nk];
    float bias[Nq * Nk];
    for (int e = 0; e < B * Nq * Nk; e++) keep[e] = (uint8_t)((e * 7 + e / 5) % 3 != 0);
    for (int e = 0; e < Nq * Nk; e++) bias[e] = e % 5 == 0 ? -INFINITY : (float)(0.5 * cos((double)e));
    hand hm = {keep, bias, H, Nq, Nk};
    fg_tensor *q = fgt_randn4(FG_F64, B, H, Nq, 4, 1, 31, 1), *k = fgt_randn4(FG_F64, B, H, Nk, 4, 1, 31, 2),
              *v = fgt_randn4(FG_F64, B, H, Nk, 4, 1, 31, 3), *d = fgt_randn4(FG_F64, B, H, Nq, 4, 1, 31, 4);
    for (int impl = 0; impl < 2; impl++)
        for (int causal = 0; causal < 3; causal++) {
            fg_attn_opts o = fg_attn_defaults();
            o.impl = (fg_attn_impl)impl;
            o.causal = causal;
            o.block_q = 4, o.block_k = 3;
            /* bool (B, 1, Nq, Nk): stride 0 over the heads */
            fg_attn_tensor_mask tk = {.data = keep, .kind = FG_ATTN_TMASK_BOOL, .stride = {Nq * Nk, 0, Nk, 1}};
            o.custom = fg_attn_tensor_mask_custom(&tk);
            fgt_attn_run a = fgt_run_attention(q, k, v, d, &o);
            o.custom = (fg_attn_custom){.mask = hand_keep, .user = &hm};
            fgt_attn_run b = fgt_run_attention(q, k, v, d, &o);
            expect_runs_equal(&a, &b, 0, "bool mask");
            fgt_attn_run_free(&a), fgt_attn_run_free(&b);
            /* float32 bias (Nq, Nk): stride 0 over batch and heads */
            fg_attn_tensor_mask tb = {.data = bias, .kind = FG_ATTN_TMASK_F32, .stride = {0, 0, Nk, 1}};
            o.custom = fg_attn_tensor_mask_custom(&tb);
            a = fgt_run_attention(q, k, v, d, &o);
            o.custom = (fg_attn_custom){
                .score_mod = hand_bias, .score_mod_grad = hand_one, .mask = hand_bias_visible, .user = &hm};
            b = fgt_run_attention(q, k, v, d, &o);
            expect_runs_equal(&a, &b, 0, "float bias");
            fgt_attn_run_free(&a), fgt_attn_run_free(&b);
        }
    fg_release(q), fg_release(k), fg_release(v), fg_release(d);
}

Test(attention_dropin, flash_skips_tiles_a_bool_tensor_mask_hides) {
    /* keys [6, 12) are hidden from every query; V there is NaN: a tile the kernel reads would show */
    enum { N = 12 };
    uint8_t keep[N * N];
    for (int e = 0; e < N * N; e++) keep[e] = e % N < 6;
    fg_tensor *q = fgt_randn4(FG_F64, 1, 1, N, 4, 1, 41, 1), *k = fgt_randn4(FG_F64, 1, 1, N, 4, 1, 41, 2),
              *v = fgt_randn4(FG_F64, 1, 1, N, 4, 1, 41, 3);
    double *vv = (double *)fg_data(v);
    for (int e = 6 * 4; e < N * 4; e++) vv[e] = NAN;
    fg_attn_tensor_mask tk = {.data = keep, .kind = FG_ATTN_TMASK_BOOL, .stride = {0, 0, N, 1}};
    fg_attn_opts o = fg_attn_defaults();
    o.block_q = 4, o.block_k = 6;
    o.custom = fg_attn_tensor_mask_custom(&tk);
    o.custom.block_mask = fg_attn_block_mask_create(o.custom.mask, o.custom.user, 1, 1, N, N, 4, 6);
    cr_assert(o.custom.block_mask, "%s", fg_last_error());
    cr_expect_eq(fg_attn_block_mask_count(o.custom.block_mask, FG_TILE_MASKED), 3);
    fg_tensor *y = fgt_ok(fg_attention(q, k, v, &o, NULL), "masked");
    const double *yy = (double *)fg_data(y);
    for (int e = 0; e < N * 4; e++) cr_assert(isfinite(yy[e]), "element %d is %g: a hidden tile was read", e, yy[e]);
    fg_attn_block_mask_release(o.custom.block_mask);
    fg_release(y), fg_release(q), fg_release(k), fg_release(v);
}

/* ---- varlen ---- */

/* packed (T, H, d) rows [t0, t0 + n) as a (1, H, n, d) tensor */
static fg_tensor *unpack(const double *x, int64_t t0, int64_t n, int64_t H, int64_t d) {
    fg_tensor *t = fgt_ok(fg_zeros(FG_F64, FG_CPU, 4, (int64_t[]){1, H, n, d}), "unpack");
    double *y = (double *)fg_data(t);
    for (int64_t h = 0; h < H; h++)
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < d; c++) y[(h * n + r) * d + c] = x[((t0 + r) * H + h) * d + c];
    return t;
}

Test(attention_dropin, varlen_equals_one_attention_per_document) {
    enum { S = 4, H = 4, Hkv = 2, d = 3 };
    const int64_t cu_q[S + 1] = {0, 5, 5, 12, 13}, cu_k[S + 1] = {0, 7, 9, 13, 20};
    const int64_t Tq = cu_q[S], Tk = cu_k[S];
    const double slopes[S * H] = {0.5, 0.25, 0.1, 0.9, 0.3, 0.2, 0.1, 0.0, 1.0, 0.5, 0.25, 0.125, 0.7, 0.6, 0.5, 0.4};
    double *q = malloc(sizeof(double) * Tq * H * d), *k = malloc(sizeof(double) * Tk * Hkv * d),
           *v = malloc(sizeof(double) * Tk * Hkv * d), *dout = malloc(sizeof(double) * Tq * H * d);
    for (int64_t e = 0; e < Tq * H * d; e++) q[e] = sin(0.37 * (double)e), dout[e] = cos(0.11 * (double)e);
    for (int64_t e = 0; e < Tk * Hkv * d; e++) k[e] = cos(0.53 * (double)e), v[e] = sin(0.29 * (double)e + 1);
    for (int variant = 0; variant < 4; variant++) {
        fg_attn_opts o = fg_attn_defaults();
        o.causal = variant & 1;
        o.block_q = 2, o.block_k = 3;
        o.variant.n_kv_heads = Hkv;
        if (variant == 2) o.variant.window = 1, o.variant.window_left = 2, o.variant.window_right = 1;
        if (variant == 3) o.variant.alibi = 1, o.variant.softcap = 3;
        fg_attn_problem pr;
        cr_assert_eq(fg_attn_problem_init(&pr, 1, H, 7, 7, d, &o), FG_OK, "%s", fg_last_error());
        double *O = calloc((size_t)(Tq * H * d), sizeof(double)), *L = calloc((size_t)(H * Tq), sizeof(double)),
               *dq = calloc((size_t)(Tq * H * d), sizeof(double)), *dk = calloc((size_t)(Tk * Hkv * d), sizeof(double)),
               *dv = calloc((size_t)(Tk * Hkv * d), sizeof(double));
        const double *sl = variant == 3 ? slopes : NULL;
        cr_assert_eq(fg_attn_varlen_forward(FG_F64, O, L, NULL, q, k, v, cu_q, cu_k, S, Tq, Tk, sl, &pr), FG_OK, "%s",
                     fg_last_error());
        cr_assert_eq(
            fg_attn_varlen_backward(FG_F64, dq, dk, dv, dout, q, k, v, O, L, NULL, cu_q, cu_k, S, Tq, Tk, sl, &pr),
            FG_OK, "%s", fg_last_error());
        for (int64_t s = 0; s < S; s++) {
            const int64_t nq = cu_q[s + 1] - cu_q[s], nk = cu_k[s + 1] - cu_k[s];
            if (nq == 0) continue;
            fg_tensor *qs = unpack(q, cu_q[s], nq, H, d), *ks = unpack(k, cu_k[s], nk, Hkv, d),
                      *vs = unpack(v, cu_k[s], nk, Hkv, d), *ds = unpack(dout, cu_q[s], nq, H, d);
            fg_attn_opts on = o;
            on.impl = FG_ATTN_NAIVE;
            if (sl) on.variant.alibi_slopes = sl + s * H;
            fgt_attn_run r = fgt_run_attention(qs, ks, vs, ds, &on);
            fg_tensor *os = unpack(O, cu_q[s], nq, H, d), *dqs = unpack(dq, cu_q[s], nq, H, d);
            char what[64];
            snprintf(what, sizeof what, "variant %d document %lld", variant, (long long)s);
            FGT_ASSERT_CLOSE(os, r.o, 1e-12, 1e-12, what);
            FGT_ASSERT_CLOSE(dqs, r.dq, 1e-12, 1e-12, what);
            if (nk > 0) {
                fg_tensor *dks = unpack(dk, cu_k[s], nk, Hkv, d), *dvs = unpack(dv, cu_k[s], nk, Hkv, d);
                FGT_ASSERT_CLOSE(dks, r.dk, 1e-12, 1e-12, what);
                FGT_ASSERT_CLOSE(dvs, r.dv, 1e-12, 1e-12, what);
                fg_release(dks), fg_release(dvs);
            }
            fgt_attn_run_free(&r);
            fg_release(qs), fg_release(ks), fg_release(vs), fg_release(ds), fg_release(os), fg_release(dqs);
        }
        free(O), free(L), free(dq), free(dk), free(dv);
    }
    /* offsets that do not fit are refused */
    fg_attn_problem pr;
    fg_attn_opts o = fg_attn_defaults();
    o.variant.n_kv_heads = Hkv;
    cr_assert_eq(fg_attn_problem_init(&pr, 1, H, 7, 7, d, &o), FG_OK);
    double O[1], L[1];
    const int64_t bad[S + 1] = {0, 5, 3, 12, 13};
    cr_expect_eq(fg_attn_varlen_forward(FG_F64, O, L, NULL, q, k, v, bad, cu_k, S, Tq, Tk, NULL, &pr), FG_ERR_ARG);
    cr_expect(strstr(fg_last_error(), "decreases") != NULL, "%s", fg_last_error());
    cr_expect_eq(fg_attn_varlen_forward(FG_F64, O, L, NULL, q, k, v, cu_q, cu_k, S, Tq + 1, Tk, NULL, &pr),
                 FG_ERR_ARG);
    fg_clear_error();
    free(q), free(k), free(v), free(dout);
}
