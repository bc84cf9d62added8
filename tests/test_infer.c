/* test_infer.c — the forward-only ops on raw buffers (ops/infer.h): each against the op of ops.h
 * with the same kernel (fg_attention, fg_linear, fg_layernorm, fg_gelu, fg_embedding), bit for
 * bit; attention's heads read from a cache longer than the keys they see; bad arguments refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/infer.h"
#include "ops/ops.h"
#include "tests/common.h"

/* n elements of a and b have the same bits */
static void expect_same_bits(const void *a, const void *b, size_t n, size_t es, const char *what) {
    cr_expect(memcmp(a, b, n * es) == 0, "%s: the raw-buffer op's bits differ from the op's", what);
}

Test(infer, attention_heads_from_a_longer_cache_equal_fg_attention) {
    const int64_t H = 3, Nq = 5, Nk = 21, hd = 8, Tc = 32; /* cache rows Tc > Nk */
    for (int dti = 0; dti < 2; dti++)
        for (int impl = 0; impl < 2; impl++) {
            const fg_dtype dt = dti ? FG_F64 : FG_F32;
            const size_t es = fg_dtype_size(dt);
            fg_tensor *q = fgt_randn4(dt, 1, H, Nq, hd, 1.0, 11, 0), *k = fgt_randn4(dt, 1, H, Nk, hd, 1.0, 11, 1),
                      *v = fgt_randn4(dt, 1, H, Nk, hd, 1.0, 11, 2);
            fg_attn_opts o = fg_attn_defaults();
            o.impl = impl ? FG_ATTN_FLASH : FG_ATTN_NAIVE;
            o.causal = FG_ATTN_CAUSAL_BOTTOM_RIGHT;
            fg_tensor *lse = NULL, *out = fgt_ok(fg_attention(q, k, v, &o, &lse), "fg_attention");
            /* the cache: head h's Nk rows at h Tc hd, NaN in the rows past Nk (never read) */
            char *kc = malloc((size_t)(H * Tc * hd) * es), *vc = malloc((size_t)(H * Tc * hd) * es);
            char *ob = malloc((size_t)(H * Nq * hd) * es), *lb = malloc((size_t)(H * Nq) * es);
            memset(kc, 0xff, (size_t)(H * Tc * hd) * es); /* all-ones bits: NaN in either dtype */
            memset(vc, 0xff, (size_t)(H * Tc * hd) * es);
            for (int64_t h = 0; h < H; h++) {
                memcpy(kc + (size_t)(h * Tc * hd) * es, (char *)fg_data(k) + (size_t)(h * Nk * hd) * es,
                       (size_t)(Nk * hd) * es);
                memcpy(vc + (size_t)(h * Tc * hd) * es, (char *)fg_data(v) + (size_t)(h * Nk * hd) * es,
                       (size_t)(Nk * hd) * es);
            }
            cr_assert_eq(
                fg_infer_attention(FG_CPU, dt, &o, H, Nq, Nk, hd, ob, lb, fg_data(q), kc, vc, Nq * hd, Tc * hd), FG_OK,
                "%s", fg_last_error());
            char what[64];
            snprintf(what, sizeof what, "attention %s %s o", fg_dtype_name(dt), impl ? "flash" : "naive");
            expect_same_bits(ob, fg_data(out), (size_t)(H * Nq * hd), es, what);
            snprintf(what, sizeof what, "attention %s %s lse", fg_dtype_name(dt), impl ? "flash" : "naive");
            expect_same_bits(lb, fg_data(lse), (size_t)(H * Nq), es, what);
            free(kc), free(vc), free(ob), free(lb);
            fg_release(out), fg_release(lse), fg_release(q), fg_release(k), fg_release(v);
        }
}

Test(infer, linear_layernorm_gelu_embedding_equal_the_ops) {
    const int64_t R = 4, K = 6, N = 5, V = 7;
    for (int dti = 0; dti < 2; dti++) {
        const fg_dtype dt = dti ? FG_F64 : FG_F32;
        const size_t es = fg_dtype_size(dt);
        const int64_t xs[2] = {R, K}, ws[2] = {N, K}, bs[1] = {N}, ts[2] = {V, K}, cs[1] = {K};
        fg_tensor *x = fgt_rand(dt, 2, xs, 1), *w = fgt_rand(dt, 2, ws, 2), *b = fgt_rand(dt, 1, bs, 3);
        fg_tensor *t = fgt_rand(dt, 2, ts, 4), *g = fgt_rand(dt, 1, cs, 5), *be = fgt_rand(dt, 1, cs, 6);
        char *buf = malloc((size_t)(R * (N > K ? N : K)) * es), *mean = malloc((size_t)R * es),
             *rstd = malloc((size_t)R * es);

        fg_tensor *y = fgt_ok(fg_linear(x, w, b), "fg_linear");
        cr_assert_eq(fg_infer_linear(FG_CPU, dt, buf, fg_data(x), fg_data(w), fg_data(b), R, N, K), FG_OK, "%s",
                     fg_last_error());
        expect_same_bits(buf, fg_data(y), (size_t)(R * N), es, "linear");
        fg_release(y);

        y = fgt_ok(fg_layernorm(x, g, be, 1e-5), "fg_layernorm");
        cr_assert_eq(fg_infer_layernorm(FG_CPU, dt, buf, mean, rstd, fg_data(x), fg_data(g), fg_data(be), R, K, 1e-5),
                     FG_OK, "%s", fg_last_error());
        expect_same_bits(buf, fg_data(y), (size_t)(R * K), es, "layernorm");
        fg_release(y);

        y = fgt_ok(fg_gelu(x), "fg_gelu");
        cr_assert_eq(fg_infer_gelu(FG_CPU, dt, buf, fg_data(x), R * K), FG_OK, "%s", fg_last_error());
        expect_same_bits(buf, fg_data(y), (size_t)(R * K), es, "gelu");
        fg_release(y);

        const int32_t idx[4] = {6, 0, 3, 6};
        const int64_t is[1] = {R};
        y = fgt_ok(fg_embedding(t, idx, 1, is), "fg_embedding");
        cr_assert_eq(fg_infer_embedding(FG_CPU, dt, buf, fg_data(t), idx, R, V, K), FG_OK, "%s", fg_last_error());
        expect_same_bits(buf, fg_data(y), (size_t)(R * K), es, "embedding");
        fg_release(y);

        free(buf), free(mean), free(rstd);
        fg_release(x), fg_release(w), fg_release(b), fg_release(t), fg_release(g), fg_release(be);
    }
}

Test(infer, bad_arguments_are_refused_and_outputs_untouched) {
    float out[8] = {1, 1, 1, 1, 1, 1, 1, 1}, x[8] = {0}, w[8] = {0}, lse[2] = {0};
    const int32_t bad[2] = {0, 2};
    cr_expect_eq(fg_infer_embedding(FG_CPU, FG_F32, out, w, bad, 2, 2, 4), FG_ERR_ARG, "id 2 in vocabulary 2");
    cr_expect(strstr(fg_last_error(), "outside"), "%s", fg_last_error());
    cr_expect_eq(fg_infer_linear(FG_CPU, FG_F32, out, NULL, w, NULL, 2, 2, 2), FG_ERR_ARG, "NULL x");
    cr_expect_eq(fg_infer_gelu(FG_CPU, FG_F32, out, x, 0), FG_ERR_ARG, "n 0");
    cr_expect_eq(fg_infer_gelu(FG_CPU, (fg_dtype)7, out, x, 8), FG_ERR_DTYPE, "dtype 7");
    cr_expect_eq(fg_infer_layernorm(FG_CPU, FG_F32, out, x, x, w, NULL, NULL, 2, 4, 0.0), FG_ERR_ARG, "eps 0");
    for (int i = 0; i < 8; i++) cr_expect_eq(out[i], 1.0f, "a refused op wrote out[%d]", i);
    fg_attn_opts o = fg_attn_defaults();
    o.dropout_p = 0.1;
    cr_expect_eq(fg_infer_attention(FG_CPU, FG_F32, &o, 2, 1, 1, 4, out, lse, x, x, x, 4, 4), FG_ERR_ARG, "dropout");
    o = fg_attn_defaults();
    o.variant.softcap = 5;
    cr_expect_eq(fg_infer_attention(FG_CPU, FG_F32, &o, 2, 1, 1, 4, out, lse, x, x, x, 4, 4), FG_ERR_ARG, "softcap");
    cr_expect_eq(fg_infer_attention(FG_CPU, FG_F32, NULL, 2, 1, 2, 4, out, lse, x, x, x, 4, 4), FG_ERR_ARG,
                 "a key stride shorter than a head");
    cr_expect_eq(fg_infer_attention(FG_CUDA, FG_F32, NULL, 2, 1, 1, 4, out, lse, x, x, x, 4, 4), FG_ERR_DEVICE, "cuda");
    /* scores that overflow float32: the family's overflow check speaks, from whichever thread ran the head */
    float big[8] = {1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f, 1e30f};
    cr_expect_eq(fg_infer_attention(FG_CPU, FG_F32, NULL, 2, 1, 1, 4, out, lse, big, big, big, 4, 4), FG_ERR_NUMERIC,
                 "overflowed scores");
    cr_expect(strstr(fg_last_error(), "overflow"), "%s", fg_last_error());
}
