/* test_ops.c — what holds for every op in ops/ops.h: each user error returns NULL with a message
 * naming the op (one table row per error), gradients accumulate (a tensor used twice, a leaf over
 * two backward calls), a GPT-like block composed of all the ops passes gradcheck, and building and
 * backpropagating a graph many times leaks neither nodes nor memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"
#include "tests/common.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}
TestSuite(ops, .fini = leak_check, .timeout = 300);

/* ============================================================================================
 * error paths: every row must return NULL, set the status, and name the op (and a shape)
 * ============================================================================================ */

typedef struct {
    fg_tensor *a23, *b34, *w43, *f32_34, *v3, *v4, *v4_f32, *x223, *b334, *cu23, *cu34, *s0;
} fx;

static const int32_t ids_ok[2] = {0, 1}, ids_big[2] = {0, 4}, ids_neg[2] = {-1, 0};
static const int32_t tg_ok[2] = {0, 2}, tg_big[2] = {0, 3}, tg_neg2[2] = {-2, 0};

#define ROW(name, expr)                                                                                                \
    static fg_tensor *name(fx *f) {                                                                                    \
        (void)f;                                                                                                       \
        return (expr);                                                                                                 \
    }
ROW(mm_null_a, fg_matmul(NULL, f->b34))
ROW(mm_null_b, fg_matmul(f->a23, NULL))
ROW(mm_inner, fg_matmul(f->a23, f->a23))
ROW(mm_dtype, fg_matmul(f->a23, f->f32_34))
ROW(mm_1d, fg_matmul(f->v3, f->b34))
ROW(mm_batch, fg_matmul(f->x223, f->b334))
ROW(mm_device, fg_matmul(f->a23, f->cu34))
ROW(mm_cuda, fg_matmul(f->cu23, f->cu34))
ROW(lin_null, fg_linear(NULL, f->w43, NULL))
ROW(lin_k, fg_linear(f->a23, f->b34, NULL))
ROW(lin_bias_size, fg_linear(f->a23, f->w43, f->v3))
ROW(lin_bias_dtype, fg_linear(f->a23, f->w43, f->v4_f32))
ROW(lin_w1d, fg_linear(f->a23, f->v3, NULL))
ROW(lin_cuda, fg_linear(f->cu23, f->cu23, NULL))
ROW(add_bcast, fg_add(f->a23, f->v4))
ROW(sub_bcast, fg_sub(f->x223, f->b34))
ROW(mul_dtype, fg_mul(f->b34, f->f32_34))
ROW(div_null, fg_div(f->a23, NULL))
ROW(sub_device, fg_sub(f->a23, f->cu23))
ROW(adds_null, fg_add_scalar(NULL, 1.0))
ROW(muls_cuda, fg_mul_scalar(f->cu23, 2.0))
ROW(sum_axis, fg_sum(f->a23, 2, 0))
ROW(mean_axis, fg_mean(f->a23, -3, 1))
ROW(sum_all_null, fg_sum_all(NULL))
ROW(mean_all_cuda, fg_mean_all(f->cu23))
ROW(reshape_count, fg_reshape(f->a23, FGT_DIMS(4, 2)))
ROW(reshape_two_infer, fg_reshape(f->a23, FGT_DIMS(-1, -1)))
ROW(reshape_rank, fg_reshape(f->a23, 7, (const int64_t[]){1, 1, 1, 1, 1, 6, 1}))
ROW(permute_dup, fg_permute(f->a23, (const int[]){0, 0}))
ROW(permute_range, fg_permute(f->a23, (const int[]){0, 2}))
ROW(permute_null, fg_permute(f->a23, NULL))
ROW(transpose_axis, fg_transpose(f->a23, 0, 2))
ROW(slice_end, fg_slice(f->a23, 1, 1, 4))
ROW(slice_order, fg_slice(f->a23, 1, 2, 1))
ROW(slice_neg, fg_slice(f->a23, 0, -1, 1))
ROW(slice_axis, fg_slice(f->a23, 3, 0, 1))
ROW(contig_null, fg_make_contiguous(NULL))
ROW(contig_cuda, fg_make_contiguous(f->cu23))
ROW(emb_big, fg_embedding(f->w43, ids_big, FGT_DIMS(2)))
ROW(emb_neg, fg_embedding(f->w43, ids_neg, FGT_DIMS(2)))
ROW(emb_1d, fg_embedding(f->v3, ids_ok, FGT_DIMS(2)))
ROW(emb_null_idx, fg_embedding(f->w43, NULL, FGT_DIMS(2)))
ROW(emb_null_w, fg_embedding(NULL, ids_ok, FGT_DIMS(2)))
ROW(emb_neg_shape, fg_embedding(f->w43, ids_ok, FGT_DIMS(-2)))
ROW(emb_cuda, fg_embedding(f->cu34, ids_ok, FGT_DIMS(2)))
ROW(ln_weight, fg_layernorm(f->a23, f->v4, NULL, 1e-5))
ROW(ln_bias_dtype, fg_layernorm(f->b34, NULL, f->v4_f32, 1e-5))
ROW(ln_eps, fg_layernorm(f->a23, NULL, NULL, -1.0))
ROW(ln_eps_nan, fg_layernorm(f->a23, NULL, NULL, NAN))
ROW(ln_0d, fg_layernorm(f->s0, NULL, NULL, 1e-5))
ROW(ln_null, fg_layernorm(NULL, f->v3, f->v3, 1e-5))
ROW(ln_cuda, fg_layernorm(f->cu23, NULL, NULL, 1e-5))
ROW(gelu_null, fg_gelu(NULL))
ROW(gelu_cuda, fg_gelu(f->cu23))
ROW(softmax_null, fg_softmax(NULL))
ROW(softmax_0d, fg_softmax(f->s0))
ROW(softmax_cuda, fg_softmax(f->cu23))
ROW(ce_big, fg_cross_entropy(f->a23, tg_big))
ROW(ce_neg2, fg_cross_entropy(f->a23, tg_neg2))
ROW(ce_null_t, fg_cross_entropy(f->a23, NULL))
ROW(ce_null, fg_cross_entropy(NULL, tg_ok))
ROW(ce_0d, fg_cross_entropy(f->s0, tg_ok))
ROW(ce_cuda, fg_cross_entropy(f->cu23, tg_ok))
ROW(drop_one, fg_dropout(f->a23, 1.0, 1, 0))
ROW(drop_neg, fg_dropout(f->a23, -0.1, 1, 0))
ROW(drop_nan, fg_dropout(f->a23, NAN, 1, 0))
ROW(drop_null, fg_dropout(NULL, 0.5, 1, 0))
ROW(drop_cuda, fg_dropout(f->cu23, 0.5, 1, 0))

static const struct {
    const char *name;
    fg_tensor *(*call)(fx *);
    fg_status status;
    const char *op;     /* must appear in the message */
    const char *detail; /* must appear too (a shape, an argument name), or NULL */
} err_rows[] = {
    {"matmul NULL a", mm_null_a, FG_ERR_ARG, "matmul", "a is NULL"},
    {"matmul NULL b", mm_null_b, FG_ERR_ARG, "matmul", "b is NULL"},
    {"matmul inner dims", mm_inner, FG_ERR_SHAPE, "matmul", "(2, 3)"},
    {"matmul dtypes", mm_dtype, FG_ERR_DTYPE, "matmul", "float32"},
    {"matmul 1-D a", mm_1d, FG_ERR_SHAPE, "matmul", "(3)"},
    {"matmul batch dims", mm_batch, FG_ERR_SHAPE, "matmul", "(3, 3, 4)"},
    {"matmul devices", mm_device, FG_ERR_DEVICE, "matmul", "cuda"},
    {"matmul on cuda", mm_cuda, FG_ERR_DEVICE, "op matmul: cuda tensors need the cuda device started", NULL},
    {"linear NULL x", lin_null, FG_ERR_ARG, "linear", "x is NULL"},
    {"linear K", lin_k, FG_ERR_SHAPE, "linear", "(3, 4)"},
    {"linear bias size", lin_bias_size, FG_ERR_SHAPE, "linear", "(3)"},
    {"linear bias dtype", lin_bias_dtype, FG_ERR_DTYPE, "linear", "bias"},
    {"linear 1-D w", lin_w1d, FG_ERR_SHAPE, "linear", "(3)"},
    {"linear on cuda", lin_cuda, FG_ERR_DEVICE, "op linear: cuda tensors need the cuda device started", NULL},
    {"add broadcast", add_bcast, FG_ERR_SHAPE, "add", "(2, 3) and (4)"},
    {"sub broadcast", sub_bcast, FG_ERR_SHAPE, "sub", "(2, 2, 3)"},
    {"mul dtypes", mul_dtype, FG_ERR_DTYPE, "mul", "float64"},
    {"div NULL", div_null, FG_ERR_ARG, "div", "b is NULL"},
    {"sub devices", sub_device, FG_ERR_DEVICE, "sub", "device mismatch"},
    {"add_scalar NULL", adds_null, FG_ERR_ARG, "add_scalar", NULL},
    {"mul_scalar on cuda", muls_cuda, FG_ERR_DEVICE, "op mul_scalar: cuda", NULL},
    {"sum axis 2", sum_axis, FG_ERR_ARG, "sum", "(2, 3)"},
    {"mean axis -3", mean_axis, FG_ERR_ARG, "mean", "axis -3"},
    {"sum_all NULL", sum_all_null, FG_ERR_ARG, "sum_all", NULL},
    {"mean_all on cuda", mean_all_cuda, FG_ERR_DEVICE, "op mean_all", NULL},
    {"reshape count", reshape_count, FG_ERR_SHAPE, "reshape", "(2, 3)"},
    {"reshape two -1", reshape_two_infer, FG_ERR_ARG, "reshape", "-1"},
    {"reshape rank 7", reshape_rank, FG_ERR_ARG, "reshape", "(2, 3)"},
    {"permute duplicate", permute_dup, FG_ERR_ARG, "permute", "(2, 3)"},
    {"permute range", permute_range, FG_ERR_ARG, "permute", "perm[1] = 2"},
    {"permute NULL", permute_null, FG_ERR_ARG, "permute", "(2, 3)"},
    {"transpose axis", transpose_axis, FG_ERR_ARG, "transpose", "(2, 3)"},
    {"slice past the end", slice_end, FG_ERR_ARG, "slice", "(2, 3)"},
    {"slice start > end", slice_order, FG_ERR_ARG, "slice", "[2, 1)"},
    {"slice negative", slice_neg, FG_ERR_ARG, "slice", "[-1, 1)"},
    {"slice axis", slice_axis, FG_ERR_ARG, "slice", "axis 3"},
    {"make_contiguous NULL", contig_null, FG_ERR_ARG, "make_contiguous", NULL},
    {"make_contiguous on cuda", contig_cuda, FG_ERR_DEVICE, "op make_contiguous", NULL},
    {"embedding id >= V", emb_big, FG_ERR_ARG, "embedding", "(4, 3)"},
    {"embedding id < 0", emb_neg, FG_ERR_ARG, "embedding", "id -1"},
    {"embedding 1-D weight", emb_1d, FG_ERR_SHAPE, "embedding", "(3)"},
    {"embedding NULL idx", emb_null_idx, FG_ERR_ARG, "embedding", "idx is NULL"},
    {"embedding NULL weight", emb_null_w, FG_ERR_ARG, "embedding", "weight is NULL"},
    {"embedding negative shape", emb_neg_shape, FG_ERR_ARG, "embedding", "-2"},
    {"embedding on cuda", emb_cuda, FG_ERR_DEVICE, "op embedding", NULL},
    {"layernorm weight size", ln_weight, FG_ERR_SHAPE, "layernorm", "(4)"},
    {"layernorm bias dtype", ln_bias_dtype, FG_ERR_DTYPE, "layernorm", "bias"},
    {"layernorm eps < 0", ln_eps, FG_ERR_ARG, "layernorm", "eps"},
    {"layernorm eps NaN", ln_eps_nan, FG_ERR_ARG, "layernorm", "eps"},
    {"layernorm 0-d x", ln_0d, FG_ERR_SHAPE, "layernorm", "()"},
    {"layernorm NULL x", ln_null, FG_ERR_ARG, "layernorm", "x is NULL"},
    {"layernorm on cuda", ln_cuda, FG_ERR_DEVICE, "op layernorm", NULL},
    {"gelu NULL", gelu_null, FG_ERR_ARG, "gelu", NULL},
    {"gelu on cuda", gelu_cuda, FG_ERR_DEVICE, "op gelu", NULL},
    {"softmax NULL", softmax_null, FG_ERR_ARG, "softmax", NULL},
    {"softmax 0-d", softmax_0d, FG_ERR_SHAPE, "softmax", "()"},
    {"softmax on cuda", softmax_cuda, FG_ERR_DEVICE, "op softmax", NULL},
    {"cross_entropy target >= V", ce_big, FG_ERR_ARG, "cross_entropy", "(2, 3)"},
    {"cross_entropy target -2", ce_neg2, FG_ERR_ARG, "cross_entropy", "target -2"},
    {"cross_entropy NULL targets", ce_null_t, FG_ERR_ARG, "cross_entropy", "targets is NULL"},
    {"cross_entropy NULL logits", ce_null, FG_ERR_ARG, "cross_entropy", "logits is NULL"},
    {"cross_entropy 0-d", ce_0d, FG_ERR_SHAPE, "cross_entropy", "()"},
    {"cross_entropy on cuda", ce_cuda, FG_ERR_DEVICE, "op cross_entropy", NULL},
    {"dropout p = 1", drop_one, FG_ERR_ARG, "dropout", "(2, 3)"},
    {"dropout p < 0", drop_neg, FG_ERR_ARG, "dropout", "p = -0.1"},
    {"dropout p NaN", drop_nan, FG_ERR_ARG, "dropout", "nan"},
    {"dropout NULL", drop_null, FG_ERR_ARG, "dropout", "x is NULL"},
    {"dropout on cuda", drop_cuda, FG_ERR_DEVICE, "op dropout", NULL},
};

/* A CPU tensor that claims to live on the GPU: ops must refuse it before touching its data. */
static fg_tensor *fake_cuda(fg_tensor *t) {
    t->device = FG_CUDA;
    return t;
}

Test(ops, every_user_error_returns_null_with_a_message_naming_the_op) {
    fx f = {
        .a23 = fgt_rand(FG_F64, FGT_DIMS(2, 3), 1),
        .b34 = fgt_rand(FG_F64, FGT_DIMS(3, 4), 2),
        .w43 = fgt_rand(FG_F64, FGT_DIMS(4, 3), 3),
        .f32_34 = fgt_rand(FG_F32, FGT_DIMS(3, 4), 4),
        .v3 = fgt_rand(FG_F64, FGT_DIMS(3), 5),
        .v4 = fgt_rand(FG_F64, FGT_DIMS(4), 6),
        .v4_f32 = fgt_rand(FG_F32, FGT_DIMS(4), 7),
        .x223 = fgt_rand(FG_F64, FGT_DIMS(2, 2, 3), 8),
        .b334 = fgt_rand(FG_F64, FGT_DIMS(3, 3, 4), 9),
        .cu23 = fake_cuda(fgt_rand(FG_F64, FGT_DIMS(2, 3), 10)),
        .cu34 = fake_cuda(fgt_rand(FG_F64, FGT_DIMS(3, 4), 11)),
        .s0 = fgt_ok(fg_zeros(FG_F64, FG_CPU, 0, NULL), "0-d tensor"),
    };
    for (size_t r = 0; r < sizeof err_rows / sizeof err_rows[0]; r++) {
        fg_clear_error();
        fg_tensor *out = err_rows[r].call(&f);
        cr_expect_null(out, "%s: expected NULL, got a tensor", err_rows[r].name);
        fg_release(out);
        cr_expect_eq(fg_last_status(), err_rows[r].status, "%s: status %s (%d), want %s; message: %s", err_rows[r].name,
                     fg_status_name(fg_last_status()), (int)fg_last_status(), fg_status_name(err_rows[r].status),
                     fg_last_error());
        cr_expect(strstr(fg_last_error(), err_rows[r].op) != NULL, "%s: message \"%s\" does not name \"%s\"",
                  err_rows[r].name, fg_last_error(), err_rows[r].op);
        if (err_rows[r].detail)
            cr_expect(strstr(fg_last_error(), err_rows[r].detail) != NULL, "%s: message \"%s\" lacks \"%s\"",
                      err_rows[r].name, fg_last_error(), err_rows[r].detail);
    }
    f.cu23->device = FG_CPU;
    f.cu34->device = FG_CPU;
    fg_tensor **all = (fg_tensor **)&f;
    for (size_t i = 0; i < sizeof f / sizeof(fg_tensor *); i++) fg_release(all[i]);
}

/* ============================================================================================
 * gradient accumulation
 * ============================================================================================ */

Test(ops, a_tensor_used_twice_gets_the_sum_of_both_gradients) {
    /* y = sum(x * x + x)  ->  dy/dx = 2x + 1 */
    fg_tensor *x = fgt_leaf(FG_F64, FGT_DIMS(3, 4), 1);
    fg_tensor *xx = fgt_ok(fg_mul(x, x), "mul"), *s = fgt_ok(fg_add(xx, x), "add"),
              *y = fgt_ok(fg_sum_all(s), "sum_all");
    cr_assert_eq(fg_backward(y, NULL), FG_OK, "%s", fg_last_error());
    double want[12];
    for (int k = 0; k < 12; k++) want[k] = 2 * fg_get(x, k) + 1;
    FGT_ASSERT_CLOSE_BUF(x->grad, want, 12, 1e-15, 1e-15, "d(x*x + x)/dx");
    fg_release(y), fg_release(s), fg_release(xx), fg_release(x);
}

static fg_tensor *self_linear_fn(fg_tensor *const *in, int n, void *user) {
    (void)n, (void)user;
    return fg_linear(in[0], in[0], NULL);
}
static fg_tensor *self_matmul_fn(fg_tensor *const *in, int n, void *user) {
    (void)n, (void)user;
    return fg_matmul(in[0], in[0]);
}

Test(ops, one_tensor_in_two_roles_of_one_op_accumulates_both) {
    /* x (4, 4) as both the input and the weight of linear, and as both operands of matmul */
    fg_tensor *x = fgt_leaf(FG_F64, FGT_DIMS(4, 4), 1);
    FGT_GRADCHECK("linear(x, x)", self_linear_fn, &x, 1, NULL);
    FGT_GRADCHECK("matmul(x, x)", self_matmul_fn, &x, 1, NULL);
    fg_release(x);
}

/* loss of a small graph over x, w, b */
static fg_tensor *small_loss(fg_tensor *x, fg_tensor *w, fg_tensor *b, const int32_t *t) {
    fg_tensor *h = fgt_ok(fg_linear(x, w, b), "linear");
    fg_tensor *g = fgt_ok(fg_gelu(h), "gelu");
    fg_tensor *l = fgt_ok(fg_cross_entropy(g, t), "cross_entropy");
    fg_release(h), fg_release(g);
    return l;
}

Test(ops, leaf_gradients_accumulate_across_two_backward_calls) {
    fg_tensor *x = fgt_leaf(FG_F64, FGT_DIMS(3, 5), 1), *w = fgt_leaf(FG_F64, FGT_DIMS(4, 5), 2);
    fg_tensor *b = fgt_leaf(FG_F64, FGT_DIMS(4), 3);
    const int32_t t[3] = {1, 3, -1};
    fg_tensor *l1 = small_loss(x, w, b, t);
    cr_assert_eq(fg_backward(l1, NULL), FG_OK, "%s", fg_last_error());
    fg_tensor *g1[3] = {fg_clone(x->grad), fg_clone(w->grad), fg_clone(b->grad)};
    fg_tensor *l2 = small_loss(x, w, b, t);
    cr_assert_eq(fg_backward(l2, NULL), FG_OK, "%s", fg_last_error());
    fg_tensor *leaves[3] = {x, w, b};
    for (int i = 0; i < 3; i++) {
        fg_tensor *twice = fgt_ok(fg_mul_scalar(g1[i], 2.0), "mul_scalar");
        FGT_ASSERT_CLOSE(leaves[i]->grad, twice, 1e-15, 1e-14, "two backward calls give twice the gradient");
        fg_release(twice), fg_release(g1[i]);
    }
    fg_zero_grad(w);
    for (int64_t k = 0; k < 20; k++) cr_assert_eq(fg_get(w->grad, k), 0.0, "zero_grad left %g", fg_get(w->grad, k));
    fg_release(l1), fg_release(l2), fg_release(x), fg_release(w), fg_release(b);
}

/* ============================================================================================
 * a GPT-like block built from every op, checked end to end
 * ============================================================================================ */

enum { B_ = 2, T_ = 3, C_ = 4, V_ = 5 };

typedef struct {
    const int32_t *idx, *targets;
    double p;
} block_arg;

/* inputs: wte (V, C), wpe (T, C), ln_w (C), ln_b (C), w_fc (2C, C), b_fc (2C), w_proj (C, 2C) */
static fg_tensor *gpt_block(fg_tensor *const *in, int n, void *user) {
    (void)n;
    const block_arg *a = user;
    fg_tensor *tok = fg_embedding(in[0], a->idx, 2, (const int64_t[]){B_, T_}); /* (B, T, C) */
    fg_tensor *x = fg_add(tok, in[1]);                                          /* + wpe (T, C) */
    fg_tensor *ln = fg_layernorm(x, in[2], in[3], 1e-5);
    /* attention-like mixing: softmax(ln @ lnᵀ / sqrt(C)) @ ln */
    fg_tensor *lnT = fg_transpose(ln, 1, 2); /* (B, C, T) view */
    fg_tensor *sc = fg_matmul(ln, lnT);      /* (B, T, T) */
    fg_tensor *scs = fg_mul_scalar(sc, 0.5);
    fg_tensor *att = fg_softmax(scs);
    fg_tensor *mix = fg_matmul(att, ln);         /* (B, T, C) */
    fg_tensor *h = fg_linear(mix, in[4], in[5]); /* (B, T, 2C) */
    fg_tensor *g = fg_gelu(h);
    fg_tensor *d = fg_dropout(g, a->p, 42, 0);
    fg_tensor *pr = fg_linear(d, in[6], NULL); /* (B, T, C) */
    fg_tensor *r = fg_add(x, pr);
    fg_tensor *pm = fg_permute(r, (const int[]){1, 0, 2}); /* (T, B, C) view */
    fg_tensor *cm = fg_make_contiguous(pm);
    fg_tensor *rs = fg_reshape(cm, 2, (const int64_t[]){T_ * B_, C_});
    fg_tensor *sl = fg_slice(rs, 0, 1, T_ * B_); /* drop a row */
    fg_tensor *mn = fg_mean(sl, 1, 1);           /* (TB-1, 1) */
    fg_tensor *ctr = fg_sub(sl, mn);
    fg_tensor *mm = fg_mul(mn, mn);
    fg_tensor *den = fg_add_scalar(mm, 1.0); /* >= 1 */
    fg_tensor *sq = fg_div(ctr, den);
    fg_tensor *logits = fg_linear(sq, in[0], NULL); /* tied weights (., V) */
    fg_tensor *loss = fg_cross_entropy(logits, a->targets);
    fg_tensor *all[] = {tok, x,  ln, lnT, sc, scs, att, mix, h,   g,  d,     pr,
                        r,   pm, cm, rs,  sl, mn,  ctr, mm,  den, sq, logits};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fg_release(all[i]);
    return loss;
}

static fg_tensor *block_inputs(fg_dtype dt, fg_tensor **in) {
    in[0] = fgt_rand(dt, FGT_DIMS(V_, C_), 1);
    in[1] = fgt_rand(dt, FGT_DIMS(T_, C_), 2);
    in[2] = fgt_uniform(dt, FGT_DIMS(C_), 0.5, 1.5, 3);
    in[3] = fgt_rand(dt, FGT_DIMS(C_), 4);
    in[4] = fgt_rand(dt, FGT_DIMS(2 * C_, C_), 5);
    in[5] = fgt_rand(dt, FGT_DIMS(2 * C_), 6);
    in[6] = fgt_rand(dt, FGT_DIMS(C_, 2 * C_), 7);
    return in[0];
}

static const int32_t blk_idx[B_ * T_] = {0, 3, 4, 4, 1, 2};
static const int32_t blk_tg[B_ * T_ - 1] = {1, -1, 0, 4, 2};

Test(ops, gpt_like_block_of_every_op_passes_gradcheck) {
    fg_tensor *in[7];
    block_inputs(FG_F64, in);
    for (int i = 0; i < 7; i++) fg_set_requires_grad(in[i], 1);
    block_arg a = {blk_idx, blk_tg, 0.25};
    FGT_GRADCHECK("gpt block", gpt_block, in, 7, &a);
    for (int i = 0; i < 7; i++) fg_release(in[i]);
}

Test(ops, gpt_like_block_float32_loss_agrees_with_float64) {
    fg_tensor *in[7], *in32[7];
    block_inputs(FG_F64, in);
    for (int i = 0; i < 7; i++) in32[i] = fgt_ok(fg_to(in[i], FG_CPU, FG_F32), "to");
    block_arg a = {blk_idx, blk_tg, 0.25};
    fg_tensor *l64 = fgt_ok(gpt_block(in, 7, &a), "f64 block"), *l32 = fgt_ok(gpt_block(in32, 7, &a), "f32 block");
    FGT_ASSERT_CLOSE(l32, l64, 1e-5, 1e-5, "block loss f32 vs f64");
    fg_release(l64), fg_release(l32);
    for (int i = 0; i < 7; i++) fg_release(in[i]), fg_release(in32[i]);
}

/* ============================================================================================
 * leaks
 * ============================================================================================ */

Test(ops, building_and_backpropagating_1000_graphs_leaks_nothing) {
    size_t baseline = fgt_alloc_current();
    int64_t nodes0 = fg_nodes_alive();
    fg_tensor *in[7];
    block_inputs(FG_F32, in);
    for (int i = 0; i < 7; i++) fg_set_requires_grad(in[i], 1);
    block_arg a = {blk_idx, blk_tg, 0.1};
    size_t after_first = 0;
    for (int it = 0; it < 1000; it++) {
        fg_tensor *loss = fgt_ok(gpt_block(in, 7, &a), "block");
        cr_assert_eq(fg_backward(loss, NULL), FG_OK, "iteration %d: %s", it, fg_last_error());
        fg_release(loss);
        /* an error path in the middle of a graph must not leak either */
        cr_assert_null(fg_matmul(in[0], in[0]), "mismatched matmul must fail");
        cr_assert_eq(fg_nodes_alive(), nodes0, "iteration %d: %lld nodes alive after releasing the loss", it,
                     (long long)fg_nodes_alive());
        if (it == 0)
            after_first = fgt_alloc_current(); /* now including the leaves' grads */
        else
            cr_assert_eq(fgt_alloc_current(), after_first, "iteration %d: %zu bytes live, %zu after the first", it,
                         fgt_alloc_current(), after_first);
    }
    for (int i = 0; i < 7; i++) fg_release(in[i]);
    cr_assert_eq(fg_nodes_alive(), nodes0, "%lld nodes alive at the end", (long long)fg_nodes_alive());
    cr_assert_eq(fgt_alloc_current(), baseline, "allocator current %zu bytes, baseline %zu", fgt_alloc_current(),
                 baseline);
}
