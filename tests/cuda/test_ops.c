/* test_ops.c — every op of ops/ops.h on the GPU against the CPU, forward and backward.
 *
 * Each case builds random inputs on the host, runs the op and its backward (with a random output
 * gradient R) on the CPU through the public API, copies the same inputs to the GPU and runs the
 * GPU version, then compares the output and every input gradient. Every op has one shell for every
 * device (ops/kernels.h), so both variants call the public fg_<op> on cuda tensors and reach the
 * CUDA kernels through the device's kernel table; the names say what the case checks:
 *   <op>_gpu_matches_cpu            the op on the device against the CPU;
 *   dispatch_<op>_reaches_the_gpu   the op on views and strided layouts of device tensors.
 * The op functions' last argument, `direct`, takes no other path: both variants run the shell.
 * Both dtypes; after each case the device's live bytes and the autograd nodes must be back where
 * they started (no leak through the caching allocator's counter).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "cuda/attention_bf16.h"
#include "cuda/cuda_ops.h"
#include "ops/attention.h"
#include "ops/device.h"
#include "ops/kernels.h"
#include "ops/ops.h"
#include "tensor/alloc.h"
#include "tests/cuda/cuda_test.h"

typedef struct op_case op_case;
/* Run the op on `in`; direct = 1: the cuda/ entry point, 0: the public API. */
typedef fg_tensor *(*op_fn)(const op_case *c, fg_tensor **in, int direct);

struct op_case {
    const char *name;
    op_fn fn;
    int n_in;
    int ndim[4];
    int64_t shape[4][FG_MAX_DIMS];
    double lo[4], hi[4];          /* input ranges; both 0 means (-1, 1] */
    int no_grad[4];               /* 1: this input does not require grad */
    void (*prep)(fg_tensor **in); /* edits the host inputs before they are copied (optional) */
    double tol32;                 /* float32 tolerance (0: fgt_tol) */
};

/* ---- the ops ---- */
/* matmul, linear, the elementwise ops, the reductions, embedding and layernorm have one shell for
 * every device (ops/kernels.h): no CUDA-only entry point, so `direct` runs the shell too */
static fg_tensor *op_matmul(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    return fg_matmul(in[0], in[1]);
}
/* a @ bᵀ with bᵀ a transposed view (the GEMM reads it as it is, transposed) */
static fg_tensor *op_matmul_bt(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    fg_tensor *bt = fg_transpose(in[1], -2, -1);
    fg_tensor *y = bt ? fg_matmul(in[0], bt) : NULL;
    fg_release(bt);
    return y;
}
static fg_tensor *op_linear(const op_case *c, fg_tensor **in, int direct) {
    (void)direct;
    fg_tensor *b = c->n_in > 2 ? in[2] : NULL;
    return fg_linear(in[0], in[1], b);
}
/* x (3, 10) sliced to its first 8 columns: rows of 8 that are 10 apart */
static fg_tensor *op_linear_strided_rows(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    fg_tensor *x = fg_slice(in[0], 1, 0, 8);
    fg_tensor *y = x ? fg_linear(x, in[1], in[2]) : NULL;
    fg_release(x);
    return y;
}
#define BINARY_OP(NAME)                                                                                                \
    static fg_tensor *op_##NAME(const op_case *c, fg_tensor **in, int direct) {                                        \
        (void)c, (void)direct;                                                                                         \
        return fg_##NAME(in[0], in[1]);                                                                                \
    }
BINARY_OP(add)
BINARY_OP(sub)
BINARY_OP(mul)
BINARY_OP(div)
/* a transposed view times b: strided reads in the forward and in the backward's p and q */
static fg_tensor *op_mul_view(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    fg_tensor *at = fg_transpose(in[0], 0, 1);
    fg_tensor *y = at ? fg_mul(at, in[1]) : NULL;
    fg_release(at);
    return y;
}
static fg_tensor *op_add_scalar(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    return fg_add_scalar(in[0], 0.75);
}
static fg_tensor *op_mul_scalar(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    return fg_mul_scalar(in[0], -1.5);
}
static fg_tensor *op_sum1(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    return fg_sum(in[0], 1, 0);
}
static fg_tensor *op_sum0k(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    return fg_sum(in[0], 0, 1);
}
static fg_tensor *op_mean_last(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    return fg_mean(in[0], -1, 1);
}
static fg_tensor *op_sum_all(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    return fg_sum_all(in[0]);
}
/* the total of a transposed view: read through its strides */
static fg_tensor *op_sum_all_view(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    fg_tensor *t = fg_transpose(in[0], 0, 2);
    fg_tensor *y = t ? fg_sum_all(t) : NULL;
    fg_release(t);
    return y;
}
static fg_tensor *op_mean_all(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    return fg_mean_all(in[0]);
}
static const int32_t emb_idx[15] = {3, 0, 10, 3, 3, 7, 1, 0, 9, 10, 2, 3, 5, 5, 0};
static fg_tensor *op_embedding(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    const int64_t sh[2] = {3, 5};
    return fg_embedding(in[0], emb_idx, 2, sh);
}
/* the weight (11, 9) sliced to its first 7 columns: rows of 7 that are 9 apart (the kernel must
 * use the weight's row stride, not its width) */
static fg_tensor *op_embedding_strided_weight(const op_case *c, fg_tensor **in, int direct) {
    (void)c, (void)direct;
    const int64_t sh[2] = {3, 5};
    fg_tensor *w = fg_slice(in[0], 1, 0, 7);
    fg_tensor *y = w ? fg_embedding(w, emb_idx, 2, sh) : NULL;
    fg_release(w);
    return y;
}
static fg_tensor *op_layernorm(const op_case *c, fg_tensor **in, int direct) {
    fg_tensor *w = c->n_in > 1 ? in[1] : NULL, *b = c->n_in > 2 ? in[2] : NULL;
    (void)direct;
    return fg_layernorm(in[0], w, b, 1e-5);
}
static fg_tensor *op_gelu(const op_case *c, fg_tensor **in, int direct) {
    (void)c;
    (void)direct; /* one shell for every device: no CUDA-only entry point */
    return fg_gelu(in[0]);
}
static fg_tensor *op_softmax(const op_case *c, fg_tensor **in, int direct) {
    (void)c;
    (void)direct;
    return fg_softmax(in[0]);
}
/* 12 rows of logits: targets with ignored rows and the extreme classes */
static const int32_t ce_targets[12] = {0, 8, -1, 3, 3, 7, -1, 1, 2, 8, 5, 4};
static fg_tensor *op_cross_entropy(const op_case *c, fg_tensor **in, int direct) {
    (void)c;
    (void)direct;
    return fg_cross_entropy(in[0], ce_targets);
}
static const int32_t ce_none[4] = {-1, -1, -1, -1};
static fg_tensor *op_cross_entropy_none(const op_case *c, fg_tensor **in, int direct) {
    (void)c;
    (void)direct;
    return fg_cross_entropy(in[0], ce_none);
}
static fg_tensor *op_dropout(const op_case *c, fg_tensor **in, int direct) {
    (void)c;
    (void)direct;
    return fg_dropout(in[0], 0.3, 0x5eedULL, 3);
}
/* views: only through the public API (they share the CPU code; their backward needs add_into) */
static fg_tensor *op_views(const op_case *c, fg_tensor **in, int direct) {
    (void)c;
    (void)direct;
    /* x (4, 6, 5): transpose -> (5, 6, 4), slice rows 1..5 of dim 1, reshape-copy, permute back */
    fg_tensor *t = fg_transpose(in[0], 0, 2);
    fg_tensor *s = t ? fg_slice(t, 1, 1, 5) : NULL;
    const int64_t sh[2] = {5, 16};
    fg_tensor *r = s ? fg_reshape(s, 2, sh) : NULL;
    const int perm[2] = {1, 0};
    fg_tensor *p = r ? fg_permute(r, perm) : NULL;
    fg_tensor *m = p ? fg_make_contiguous(p) : NULL;
    fg_release(t);
    fg_release(s);
    fg_release(r);
    fg_release(p);
    return m;
}

/* softmax: one row entirely masked, one with a single masked entry */
static void prep_softmax(fg_tensor **in) {
    int64_t C = in[0]->shape[1];
    for (int64_t j = 0; j < C; j++) fg_set(in[0], 2 * C + j, -INFINITY);
    fg_set(in[0], 4 * C + 3, -INFINITY);
}

#define S(...)                                                                                                         \
    { __VA_ARGS__ }
static const op_case cases[] = {
    {"matmul_batched", op_matmul, 2, {4, 4}, {S(2, 3, 4, 5), S(2, 3, 5, 6)}, {0}, {0}, {0}, NULL, 0},
    {"matmul_shared_b", op_matmul, 2, {3, 2}, {S(3, 4, 5), S(5, 7)}, {0}, {0}, {0}, NULL, 0},
    {"linear_bias", op_linear, 3, {3, 2, 1}, {S(2, 3, 8), S(5, 8), S(5)}, {0}, {0}, {0}, NULL, 0},
    {"linear_no_bias", op_linear, 2, {2, 2}, {S(70, 33), S(17, 33)}, {0}, {0}, {0}, NULL, 0},
    {"matmul_transposed_b", op_matmul_bt, 2, {4, 4}, {S(2, 3, 4, 5), S(2, 3, 6, 5)}, {0}, {0}, {0}, NULL, 0},
    {"matmul_shared_transposed_b", op_matmul_bt, 2, {3, 2}, {S(3, 4, 5), S(7, 5)}, {0}, {0}, {0}, NULL, 0},
    {"linear_strided_rows", op_linear_strided_rows, 3, {2, 2, 1}, {S(3, 10), S(5, 8), S(5)}, {0}, {0}, {0}, NULL, 0},
    {"mul_of_a_view", op_mul_view, 2, {2, 2}, {S(5, 3), S(3, 1)}, {0}, {0}, {0}, NULL, 0},
    {"add_broadcast", op_add, 2, {3, 2}, {S(4, 3, 5), S(3, 1)}, {0}, {0}, {0}, NULL, 0},
    {"sub_broadcast_both", op_sub, 2, {3, 2}, {S(4, 1, 5), S(3, 1)}, {0}, {0}, {0}, NULL, 0},
    {"mul_same_shape", op_mul, 2, {2, 2}, {S(2, 3), S(2, 3)}, {0}, {0}, {0}, NULL, 0},
    {"div_broadcast", op_div, 2, {3, 1}, {S(4, 3, 5), S(5)}, {0, 0.5}, {0, 2.0}, {0}, NULL, 0},
    {"add_scalar", op_add_scalar, 1, {3}, {S(2, 3, 7)}, {0}, {0}, {0}, NULL, 0},
    {"mul_scalar", op_mul_scalar, 1, {2}, {S(9, 4)}, {0}, {0}, {0}, NULL, 0},
    {"sum_axis", op_sum1, 1, {3}, {S(4, 5, 6)}, {0}, {0}, {0}, NULL, 0},
    {"sum_axis0_keepdim", op_sum0k, 1, {2}, {S(300, 7)}, {0}, {0}, {0}, NULL, 0},
    {"mean_last_axis", op_mean_last, 1, {3}, {S(3, 4, 100)}, {0}, {0}, {0}, NULL, 0},
    {"sum_all", op_sum_all, 1, {3}, {S(7, 11, 13)}, {0}, {0}, {0}, NULL, 0},
    {"sum_all_of_a_view", op_sum_all_view, 1, {3}, {S(7, 11, 13)}, {0}, {0}, {0}, NULL, 0},
    {"mean_all", op_mean_all, 1, {1}, {S(100003)}, {0}, {0}, {0}, NULL, 0},
    {"embedding", op_embedding, 1, {2}, {S(11, 7)}, {0}, {0}, {0}, NULL, 0},
    {"embedding_strided_weight", op_embedding_strided_weight, 1, {2}, {S(11, 9)}, {0}, {0}, {0}, NULL, 0},
    {"layernorm", op_layernorm, 3, {3, 1, 1}, {S(4, 6, 33), S(33), S(33)}, {0}, {0}, {0}, NULL, 0},
    {"layernorm_no_affine", op_layernorm, 1, {2}, {S(5, 70)}, {0}, {0}, {0}, NULL, 0},
    {"gelu", op_gelu, 1, {2}, {S(7, 33)}, {-4}, {4}, {0}, NULL, 0},
    {"softmax_with_masked_rows", op_softmax, 1, {2}, {S(6, 20)}, {-3}, {3}, {0}, prep_softmax, 0},
    {"cross_entropy", op_cross_entropy, 1, {3}, {S(3, 4, 9)}, {-3}, {3}, {0}, NULL, 0},
    {"cross_entropy_all_ignored", op_cross_entropy_none, 1, {2}, {S(4, 5)}, {0}, {0}, {0}, NULL, 0},
    {"dropout", op_dropout, 1, {2}, {S(5, 37)}, {0}, {0}, {0}, NULL, 0},
    {NULL, NULL, 0, {0}, {{0}}, {0}, {0}, {0}, NULL, 0},
};
static const op_case views_case = {"views", op_views, 1, {3}, {S(4, 6, 5)}, {0}, {0}, {0}, NULL, 0};

static const op_case *find_case(const char *name) {
    for (const op_case *c = cases; c->name; c++)
        if (!strcmp(c->name, name)) return c;
    return NULL;
}

static int run_case_dt(const op_case *c, fg_dtype dt, int direct) {
    size_t live0 = fgt_live_bytes();
    int64_t nodes0 = fg_nodes_alive();
    fg_tensor *hin[4] = {0}, *din[4] = {0}, *hy = NULL, *dy = NULL, *R = NULL, *Rd = NULL;
    int rc = FGT_FAIL;
    char what[160];
    const double tol = dt == FG_F64 ? fgt_tol(FG_F64) : (c->tol32 > 0 ? c->tol32 : fgt_tol(FG_F32));
    for (int i = 0; i < c->n_in; i++) {
        double lo = c->lo[i], hi = c->hi[i];
        if (lo == 0 && hi == 0) lo = -1, hi = 1;
        hin[i] = fgt_rand(dt, FG_CPU, c->ndim[i], c->shape[i], lo, hi, 1000 + 17 * (uint64_t)i);
        if (!hin[i]) goto done;
    }
    if (c->prep) c->prep(hin);
    for (int i = 0; i < c->n_in; i++) {
        din[i] = fgt_to(hin[i], FGT_DEV);
        if (!din[i]) goto done;
        if (!c->no_grad[i]) {
            fg_set_requires_grad(hin[i], 1);
            fg_set_requires_grad(din[i], 1);
        }
    }
    hy = c->fn(c, hin, 0);
    if (!hy) {
        printf("    %s (%s): the CPU op failed: %s\n", c->name, fg_dtype_name(dt), fg_last_error());
        goto done;
    }
    dy = c->fn(c, din, direct);
    if (!dy) {
        printf("    %s (%s): the %s op failed: %s\n", c->name, fg_dtype_name(dt), direct ? "cuda/" : "dispatched",
               fg_last_error());
        goto done;
    }
    if (dy->device != FGT_DEV) {
        printf("    %s: the result is on %s, expected %s\n", c->name, fg_device_name(dy->device),
               fg_device_name(FGT_DEV));
        goto done;
    }
    snprintf(what, sizeof what, "%s %s forward", c->name, fg_dtype_name(dt));
    if (fgt_compare_tensors(what, dy, hy, tol) != FGT_PASS) goto done;
    R = fgt_rand(dt, FG_CPU, hy->ndim, hy->shape, -1, 1, 7);
    Rd = R ? fgt_to(R, FGT_DEV) : NULL;
    if (!Rd) goto done;
    if (fg_backward(hy, R) != FG_OK) {
        printf("    %s: CPU backward failed: %s\n", c->name, fg_last_error());
        goto done;
    }
    if (fg_backward(dy, Rd) != FG_OK) {
        printf("    %s: GPU backward failed: %s\n", c->name, fg_last_error());
        goto done;
    }
    for (int i = 0; i < c->n_in; i++) {
        if (c->no_grad[i]) continue;
        snprintf(what, sizeof what, "%s %s gradient of input %d", c->name, fg_dtype_name(dt), i);
        if (!hin[i]->grad) { /* the CPU op passes no gradient here: then the GPU must not either */
            if (din[i]->grad) {
                double *g = fgt_host_f64(din[i]->grad);
                double mx = 0;
                for (int64_t k = 0; g && k < fg_numel(din[i]->grad); k++) mx = fmax(mx, fabs(g[k]));
                free(g);
                if (mx != 0) {
                    printf("    %s: GPU made a non-zero gradient (max %g) where the CPU made none\n", what, mx);
                    goto done;
                }
            }
            continue;
        }
        if (fgt_compare_tensors(what, din[i]->grad, hin[i]->grad, tol) != FGT_PASS) goto done;
    }
    rc = FGT_PASS;
done:
    fg_release(hy);
    fg_release(dy);
    fg_release(R);
    fg_release(Rd);
    for (int i = 0; i < 4; i++) {
        fg_release(hin[i]);
        fg_release(din[i]);
    }
    if (rc == FGT_PASS && fgt_live_bytes() != live0) {
        printf("    %s: %zu device bytes live before, %zu after releasing everything (a leak)\n", c->name, live0,
               fgt_live_bytes());
        rc = FGT_FAIL;
    }
    if (rc == FGT_PASS && fg_nodes_alive() != nodes0) {
        printf("    %s: %lld autograd nodes alive before, %lld after\n", c->name, (long long)nodes0,
               (long long)fg_nodes_alive());
        rc = FGT_FAIL;
    }
    return rc;
}

static int run_op(const char *name, int direct) {
    const op_case *c = !strcmp(name, "views") ? &views_case : find_case(name);
    if (!c) {
        printf("    no case named %s\n", name);
        return FGT_FAIL;
    }
    /* in self-test mode both sides are the CPU's public API */
    int d = FGT_DEV == FG_CUDA ? direct : 0;
    if (run_case_dt(c, FG_F32, d) != FGT_PASS) return FGT_FAIL;
    return run_case_dt(c, FG_F64, d);
}

#define OP_TESTS(id)                                                                                                   \
    static int direct_##id(void) { return run_op(#id, 1); }                                                            \
    static int dispatch_##id(void) { return run_op(#id, 0); }
/* cases of views through the shells: one variant */
#define VIEW_TEST(id)                                                                                                  \
    static int dispatch_##id(void) { return run_op(#id, 0); }
OP_TESTS(matmul_batched)
OP_TESTS(matmul_shared_b)
OP_TESTS(linear_bias)
OP_TESTS(linear_no_bias)
VIEW_TEST(matmul_transposed_b)
VIEW_TEST(matmul_shared_transposed_b)
VIEW_TEST(linear_strided_rows)
VIEW_TEST(mul_of_a_view)
OP_TESTS(add_broadcast)
OP_TESTS(sub_broadcast_both)
OP_TESTS(mul_same_shape)
OP_TESTS(div_broadcast)
OP_TESTS(add_scalar)
OP_TESTS(mul_scalar)
OP_TESTS(sum_axis)
OP_TESTS(sum_axis0_keepdim)
OP_TESTS(mean_last_axis)
OP_TESTS(sum_all)
VIEW_TEST(sum_all_of_a_view)
OP_TESTS(mean_all)
OP_TESTS(embedding)
VIEW_TEST(embedding_strided_weight)
OP_TESTS(layernorm)
OP_TESTS(layernorm_no_affine)
OP_TESTS(gelu)
OP_TESTS(softmax_with_masked_rows)
OP_TESTS(cross_entropy)
OP_TESTS(cross_entropy_all_ignored)
OP_TESTS(dropout)
static int dispatch_views(void) { return run_op("views", 0); }

/* The dropout mask on the GPU is the CPU's, element for element: the zeros sit in the same places. */
static int dropout_mask_is_the_cpus(void) {
    const int64_t sh[1] = {4099};
    fg_tensor *x = fgt_rand(FG_F32, FG_CPU, 1, sh, 0.5, 1.5, 5);
    fg_tensor *xd = x ? fgt_to(x, FGT_DEV) : NULL;
    FGT_NOTNULL(xd);
    fg_tensor *y = fg_dropout(x, 0.5, 77, 9);
    fg_tensor *yd = fg_dropout(xd, 0.5, 77, 9);
    FGT_NOTNULL(y);
    FGT_NOTNULL(yd);
    double *a = fgt_host_f64(yd), *b = fgt_host_f64(y);
    int bad = -1, zeros = 0;
    for (int64_t k = 0; k < sh[0]; k++) {
        if ((a[k] == 0) != (b[k] == 0) && bad < 0) bad = (int)k;
        zeros += b[k] == 0;
    }
    free(a);
    free(b);
    fg_release(x);
    fg_release(xd);
    fg_release(y);
    fg_release(yd);
    FGT_CHECK(bad < 0, "the GPU dropped a different set of elements: first difference at %d", bad);
    FGT_CHECK(zeros > 1800 && zeros < 2300, "p = 0.5 dropped %d of 4099", zeros);
    return FGT_PASS;
}

/* Reductions without atomics: two GPU backward passes give bit-identical gradients. */
static int backward_reductions_are_bitwise_repeatable(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    const int64_t xs[2] = {512, 96}, ws[1] = {96}, es[2] = {50, 96};
    static int32_t ids[512];
    for (int i = 0; i < 512; i++) ids[i] = (i * 7) % 50;
    double *g[2][4] = {{0}};
    for (int run = 0; run < 2; run++) {
        fg_tensor *x = fgt_rand(FG_F32, FG_CUDA, 2, xs, -1, 1, 11), *w = fgt_rand(FG_F32, FG_CUDA, 1, ws, 0.5, 1.5, 12);
        fg_tensor *b = fgt_rand(FG_F32, FG_CUDA, 1, ws, -1, 1, 13), *e = fgt_rand(FG_F32, FG_CUDA, 2, es, -1, 1, 14);
        FGT_NOTNULL(x);
        FGT_NOTNULL(w);
        FGT_NOTNULL(b);
        FGT_NOTNULL(e);
        fg_set_requires_grad(w, 1);
        fg_set_requires_grad(b, 1);
        fg_set_requires_grad(e, 1);
        const int64_t is[1] = {512};
        fg_tensor *emb = fg_embedding(e, ids, 1, is);
        fg_tensor *h = emb ? fg_add(emb, x) : NULL;
        fg_tensor *y = h ? fg_layernorm(h, w, b, 1e-5) : NULL;
        fg_tensor *l = y ? fg_sum_all(y) : NULL;
        FGT_NOTNULL(l);
        FGT_OK(fg_backward(l, NULL));
        g[run][0] = fgt_host_f64(w->grad);
        g[run][1] = fgt_host_f64(b->grad);
        g[run][2] = fgt_host_f64(e->grad);
        fg_release(x), fg_release(w), fg_release(b), fg_release(e);
        fg_release(emb), fg_release(h), fg_release(y), fg_release(l);
    }
    const int64_t n[3] = {96, 96, 50 * 96};
    const char *nm[3] = {"layernorm weight", "layernorm bias", "embedding"};
    int rc = FGT_PASS;
    for (int k = 0; k < 3; k++) {
        if (!g[0][k] || !g[1][k] || memcmp(g[0][k], g[1][k], (size_t)n[k] * sizeof(double))) {
            printf("    %s gradient differs between two identical runs\n", nm[k]);
            rc = FGT_FAIL;
        }
        free(g[0][k]);
        free(g[1][k]);
    }
    return rc;
}

/* ---- bfloat16 mixed precision: the GEMM (cuda/matmul.cu under FG_COMPUTE_BF16) ----
 * The reference is the same product on the CPU from the bf16-rounded operands, in float64: the
 * device's result must match it to float32 accumulation noise (1e-5), and must NOT match the
 * float32 product of the unrounded operands (the rounding changes the result by ~1e-3 relative;
 * below 2e-4 an operand was not rounded). A GEMM that skipped the conversion of one operand,
 * read a copy transposed or with the wrong stride fails the first comparison. */
static double bf16_round_host(double x) {
    float f = (float)x;
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + (u >> 16 & 1u); /* nearest, ties to even (finite inputs only here) */
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct {
    const char *name;
    int ta, tb;
    int64_t M, N, K, batch;
    int shareA, shareB, shareC; /* batch stride 0 */
    int bias;
    int64_t pad; /* extra elements per row: leading dimensions above the width */
    double alpha, beta;
} bf16_gemm_case;

static int bf16_gemm_one(const bf16_gemm_case *c) {
    const int64_t ar = c->ta ? c->K : c->M, ac = c->ta ? c->M : c->K, br = c->tb ? c->N : c->K,
                  bc = c->tb ? c->K : c->N;
    const int64_t lda = ac + c->pad, ldb = bc + c->pad, ldc = c->N + c->pad;
    const int64_t nA = c->shareA ? 1 : c->batch, nB = c->shareB ? 1 : c->batch, nC = c->shareC ? 1 : c->batch;
    const int64_t sA = c->shareA ? 0 : ar * lda, sB = c->shareB ? 0 : br * ldb, sC = c->shareC ? 0 : c->M * ldc;
    const int64_t la = nA * ar * lda, lb = nB * br * ldb, lc = nC * c->M * ldc, ln = c->N;
    fg_tensor *A = fgt_rand(FG_F32, FG_CUDA, 1, &la, -1, 1, 301), *B = fgt_rand(FG_F32, FG_CUDA, 1, &lb, -1, 1, 302);
    fg_tensor *C = fgt_rand(FG_F32, FG_CUDA, 1, &lc, -1, 1, 303), *bias = fgt_rand(FG_F32, FG_CUDA, 1, &ln, -1, 1, 304);
    double *hA = A ? fgt_host_f64(A) : NULL, *hB = B ? fgt_host_f64(B) : NULL, *hC = C ? fgt_host_f64(C) : NULL;
    double *hb = bias ? fgt_host_f64(bias) : NULL;
    double *want = malloc((size_t)lc * sizeof(double)), *full = malloc((size_t)lc * sizeof(double)), *got = NULL;
    int r = FGT_FAIL;
    const fg_kernels *kt = fg_kernels_for(FG_CUDA, "gemm");
    if (!hA || !hB || !hC || !hb || !want || !full || !kt) {
        printf("    %s: setup: %s\n", c->name, fg_last_error());
        goto out;
    }
    /* the reference: each C element starts as beta · C (or the bias; with a shared C the first
     * batch's), then every batch's alpha · Σ_k a b adds in */
    for (int64_t b = 0; b < nC; b++)
        for (int64_t i = 0; i < c->M; i++)
            for (int64_t j = 0; j < ldc; j++) {
                const int64_t at = b * (c->M * ldc) + i * ldc + j;
                want[at] = full[at] = j >= c->N ? hC[at] : c->bias ? hb[j] : c->beta * hC[at];
            }
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t i = 0; i < c->M; i++)
            for (int64_t j = 0; j < c->N; j++) {
                double s16 = 0, s32 = 0;
                for (int64_t k = 0; k < c->K; k++) {
                    const double a = hA[b * sA + (c->ta ? k * lda + i : i * lda + k)];
                    const double bb = hB[b * sB + (c->tb ? j * ldb + k : k * ldb + j)];
                    s16 += bf16_round_host(a) * bf16_round_host(bb);
                    s32 += a * bb;
                }
                const int64_t at = (c->shareC ? 0 : b) * (c->M * ldc) + i * ldc + j;
                want[at] += c->alpha * s16;
                full[at] += c->alpha * s32;
            }
    if (fg_device_set_compute(FG_CUDA, FG_COMPUTE_BF16) != FG_OK) {
        printf("    %s: %s\n", c->name, fg_last_error());
        goto out;
    }
    fg_status st = kt->matmul.gemm(FG_F32, c->ta, c->tb, c->M, c->N, c->K, c->alpha, fg_data(A), lda, sA, fg_data(B),
                                   ldb, sB, c->beta, c->bias ? fg_data(bias) : NULL, fg_data(C), ldc, sC, c->batch);
    fg_device_set_compute(FG_CUDA, FG_COMPUTE_FULL);
    if (st != FG_OK || !(got = fgt_host_f64(C))) {
        printf("    %s: gemm: %s\n", c->name, fg_last_error());
        goto out;
    }
    char what[128];
    snprintf(what, sizeof what, "%s: bf16 GEMM against the products of the bf16-rounded operands", c->name);
    if (fgt_compare(what, got, want, lc, 1e-5) != FGT_PASS) goto out;
    double num = 0, den = 0;
    for (int64_t i = 0; i < lc; i++) num += (got[i] - full[i]) * (got[i] - full[i]), den += full[i] * full[i];
    const double rel = sqrt(num / (den > 0 ? den : 1));
    if (rel < 2e-4) {
        printf("    %s: the result is the float32 product (relative difference %.2e): no bf16 rounding happened\n",
               c->name, rel);
        goto out;
    }
    r = FGT_PASS;
out:
    free(hA), free(hB), free(hC), free(hb), free(want), free(full), free(got);
    fg_release(A), fg_release(B), fg_release(C), fg_release(bias);
    return r;
}

static int bf16_gemm_matches_the_products_of_rounded_operands(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP; /* the CPU has no bf16 kernels */
    static const bf16_gemm_case cases[] = {
        {"NN with bias", 0, 0, 37, 29, 45, 1, 0, 0, 0, 1, 3, 1.0, 0.0},
        {"NT batched", 0, 1, 16, 33, 64, 3, 0, 0, 0, 0, 0, 0.5, 1.0},
        {"TN shared B", 1, 0, 21, 18, 40, 2, 0, 1, 0, 0, 5, 1.0, 0.0},
        {"TT into one C", 1, 1, 19, 23, 31, 3, 0, 0, 1, 0, 2, -1.0, 0.5},
        {"NT shared A", 0, 1, 8, 72, 24, 2, 1, 0, 0, 0, 0, 1.0, 0.0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (bf16_gemm_one(&cases[i]) != FGT_PASS) return FGT_FAIL;
    /* float64 operands under bfloat16: refused, not computed at another precision */
    const int64_t n = 16;
    fg_tensor *x = fgt_rand(FG_F64, FG_CUDA, 1, &n, -1, 1, 5);
    FGT_NOTNULL(x);
    FGT_OK(fg_device_set_compute(FG_CUDA, FG_COMPUTE_BF16));
    fg_status st = fg_cuda_gemm(FG_F64, 0, 0, 4, 4, 4, 1.0, fg_data(x), 4, 0, fg_data(x), 4, 0, 0.0, fg_data(x), 4, 0, 1);
    fg_device_set_compute(FG_CUDA, FG_COMPUTE_FULL);
    fg_release(x);
    FGT_CHECK(st == FG_ERR_DTYPE && strstr(fg_last_error(), "bfloat16"), "a float64 GEMM under bfloat16: %d, %s",
              (int)st, fg_last_error());
    fg_clear_error();
    return FGT_PASS;
}

/* ---- bfloat16 mixed precision: attention (cuda/mixed.cu under FG_COMPUTE_BF16) ----
 * fg_attention on float32 cuda tensors under bfloat16 must be exactly the bf16 flash kernels
 * (cuda/attention_bf16.h, checked against the CPU bf16 mirror by fg_attn_bf16_emu) called on the
 * bf16-rounded inputs: o, lse, dq, dk, dv bit for bit. What those kernels do not implement
 * (softcap, ALiBi, naive, float64) is one clear error, not a float32 run. */
static uint16_t *bf16_device_copy(const fg_tensor *t) {
    double *h = fgt_host_f64(t);
    const int64_t n = fg_numel(t);
    uint16_t *bits = malloc((size_t)n * sizeof(uint16_t));
    void *dev = h && bits ? fg_alloc(FG_CUDA, (size_t)n * sizeof(uint16_t)) : NULL;
    if (dev) {
        for (int64_t i = 0; i < n; i++) {
            float f = (float)h[i];
            uint32_t u;
            memcpy(&u, &f, 4);
            u += 0x7fffu + (u >> 16 & 1u);
            bits[i] = (uint16_t)(u >> 16);
        }
        fg_backend(FG_CUDA)->copy_from_host(dev, bits, (size_t)n * sizeof(uint16_t));
    }
    free(h);
    free(bits);
    return dev;
}

static int same_values(const char *what, const fg_tensor *got, const void *want_dev, int64_t n) {
    double *g = fgt_host_f64(got);
    float *w = malloc((size_t)n * sizeof(float));
    int ok = g && w;
    if (ok) fg_backend(FG_CUDA)->copy_to_host(w, want_dev, (size_t)n * sizeof(float));
    for (int64_t i = 0; ok && i < n; i++)
        if ((float)g[i] != w[i] && !(isnan(g[i]) && isnan(w[i]))) {
            printf("    %s: element %lld is %.9g under fg_attention, %.9g from the bf16 kernels\n", what, (long long)i,
                   g[i], (double)w[i]);
            ok = 0;
        }
    free(g);
    free(w);
    return ok;
}

static int bf16_attention_is_the_bf16_kernels_on_rounded_inputs(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    const int64_t B = 2, H = 2, N = 37, d = 16, qs[4] = {B, H, N, d}, n = B * H * N * d, rows = B * H * N;
    fg_tensor *q = fgt_rand(FG_F32, FG_CUDA, 4, qs, -1, 1, 41), *k = fgt_rand(FG_F32, FG_CUDA, 4, qs, -1, 1, 42);
    fg_tensor *v = fgt_rand(FG_F32, FG_CUDA, 4, qs, -1, 1, 43), *R = fgt_rand(FG_F32, FG_CUDA, 4, qs, -1, 1, 44);
    FGT_NOTNULL(q);
    FGT_NOTNULL(k);
    FGT_NOTNULL(v);
    FGT_NOTNULL(R);
    fg_set_requires_grad(q, 1), fg_set_requires_grad(k, 1), fg_set_requires_grad(v, 1);
    fg_attn_opts op = fg_attn_defaults();
    op.causal = 1, op.dropout_p = 0.2, op.seed = 77;
    fg_tensor *lse = NULL, *o = NULL;
    int r = FGT_FAIL;
    uint16_t *qb = bf16_device_copy(q), *kb = bf16_device_copy(k), *vb = bf16_device_copy(v), *db = bf16_device_copy(R);
    float *ro = fg_alloc(FG_CUDA, (size_t)n * 4), *rl = fg_alloc(FG_CUDA, (size_t)rows * 4),
          *rD = fg_alloc(FG_CUDA, (size_t)rows * 4), *rdq = fg_alloc(FG_CUDA, (size_t)n * 4),
          *rdk = fg_alloc(FG_CUDA, (size_t)n * 4), *rdv = fg_alloc(FG_CUDA, (size_t)n * 4);
    fg_attn_problem pr;
    if (!qb || !kb || !vb || !db || !ro || !rl || !rD || !rdq || !rdk || !rdv ||
        fg_attn_problem_init(&pr, B, H, N, N, d, &op) != FG_OK)
        goto fail;
    /* the kernels themselves, on bf16 copies made on the host */
    for (float *g = rdq; g; g = g == rdq ? rdk : g == rdk ? rdv : NULL) fg_backend(FG_CUDA)->memset0(g, (size_t)n * 4);
    if (fg_cuda_attn_bf16_forward(ro, rl, qb, kb, vb, &pr) != FG_OK ||
        fg_cuda_attn_bf16_backward(rdq, rdk, rdv, rD, db, qb, kb, vb, ro, rl, &pr) != FG_OK)
        goto fail;
    /* fg_attention under bfloat16 mixed precision */
    if (fg_device_set_compute(FG_CUDA, FG_COMPUTE_BF16) != FG_OK) goto fail;
    o = fg_attention(q, k, v, &op, &lse);
    fg_status st = o ? fg_backward(o, R) : fg_last_status();
    fg_device_set_compute(FG_CUDA, FG_COMPUTE_FULL);
    if (st != FG_OK) goto fail;
    if (!same_values("o", o, ro, n) || !same_values("lse", lse, rl, rows) || !same_values("dq", q->grad, rdq, n) ||
        !same_values("dk", k->grad, rdk, n) || !same_values("dv", v->grad, rdv, n))
        goto out;
    /* refused under bfloat16, each with one line naming it */
    FGT_OK(fg_device_set_compute(FG_CUDA, FG_COMPUTE_BF16));
    static const char *const why[3] = {"softcap", "naive", "ALiBi"};
    for (int c = 0; c < 3 && r == FGT_FAIL; c++) {
        fg_attn_opts bad = op;
        if (c == 0) bad.variant.softcap = 30;
        if (c == 1) bad.impl = FG_ATTN_NAIVE;
        if (c == 2) bad.variant.alibi = 1;
        fg_tensor *x = fg_attention(q, k, v, &bad, NULL);
        if (x || !strstr(fg_last_error(), "bfloat16 mixed precision") || !strstr(fg_last_error(), why[c])) {
            printf("    %s under bfloat16: %s (%s)\n", why[c], x ? "ran" : "refused, but", x ? "" : fg_last_error());
            fg_release(x);
            break;
        }
        if (c == 2) r = FGT_PASS;
    }
    fg_device_set_compute(FG_CUDA, FG_COMPUTE_FULL);
    fg_clear_error();
    goto out;
fail:
    printf("    %s\n", fg_last_error());
out:
    fg_free(FG_CUDA, qb), fg_free(FG_CUDA, kb), fg_free(FG_CUDA, vb), fg_free(FG_CUDA, db);
    fg_free(FG_CUDA, ro), fg_free(FG_CUDA, rl), fg_free(FG_CUDA, rD);
    fg_free(FG_CUDA, rdq), fg_free(FG_CUDA, rdk), fg_free(FG_CUDA, rdv);
    fg_release(q), fg_release(k), fg_release(v), fg_release(R), fg_release(o), fg_release(lse);
    return r;
}

const fgt_case fgt_ops_cases[] = {
    {"bf16_attention_is_the_bf16_kernels_on_rounded_inputs", bf16_attention_is_the_bf16_kernels_on_rounded_inputs},
    {"bf16_gemm_matches_the_products_of_rounded_operands", bf16_gemm_matches_the_products_of_rounded_operands},
    {"matmul_batched_gpu_matches_cpu", direct_matmul_batched},
    {"matmul_shared_b_gpu_matches_cpu", direct_matmul_shared_b},
    {"linear_bias_gpu_matches_cpu", direct_linear_bias},
    {"linear_no_bias_gpu_matches_cpu", direct_linear_no_bias},
    {"matmul_transposed_b_gpu_matches_cpu", dispatch_matmul_transposed_b},
    {"matmul_shared_transposed_b_gpu_matches_cpu", dispatch_matmul_shared_transposed_b},
    {"linear_strided_rows_gpu_matches_cpu", dispatch_linear_strided_rows},
    {"mul_of_a_view_gpu_matches_cpu", dispatch_mul_of_a_view},
    {"add_broadcast_gpu_matches_cpu", direct_add_broadcast},
    {"sub_broadcast_both_gpu_matches_cpu", direct_sub_broadcast_both},
    {"mul_same_shape_gpu_matches_cpu", direct_mul_same_shape},
    {"div_broadcast_gpu_matches_cpu", direct_div_broadcast},
    {"add_scalar_gpu_matches_cpu", direct_add_scalar},
    {"mul_scalar_gpu_matches_cpu", direct_mul_scalar},
    {"sum_axis_gpu_matches_cpu", direct_sum_axis},
    {"sum_axis0_keepdim_gpu_matches_cpu", direct_sum_axis0_keepdim},
    {"mean_last_axis_gpu_matches_cpu", direct_mean_last_axis},
    {"sum_all_gpu_matches_cpu", direct_sum_all},
    {"sum_all_of_a_view_gpu_matches_cpu", dispatch_sum_all_of_a_view},
    {"mean_all_gpu_matches_cpu", direct_mean_all},
    {"embedding_gpu_matches_cpu", direct_embedding},
    {"embedding_strided_weight_gpu_matches_cpu", dispatch_embedding_strided_weight},
    {"layernorm_gpu_matches_cpu", direct_layernorm},
    {"layernorm_no_affine_gpu_matches_cpu", direct_layernorm_no_affine},
    {"gelu_gpu_matches_cpu", direct_gelu},
    {"softmax_with_masked_rows_gpu_matches_cpu", direct_softmax_with_masked_rows},
    {"cross_entropy_gpu_matches_cpu", direct_cross_entropy},
    {"cross_entropy_all_ignored_gpu_matches_cpu", direct_cross_entropy_all_ignored},
    {"dropout_gpu_matches_cpu", direct_dropout},
    {"dropout_mask_is_the_cpus", dropout_mask_is_the_cpus},
    {"backward_reductions_are_bitwise_repeatable", backward_reductions_are_bitwise_repeatable},
    {"dispatch_matmul_reaches_the_gpu", dispatch_matmul_batched},
    {"dispatch_matmul_shared_b_reaches_the_gpu", dispatch_matmul_shared_b},
    {"dispatch_linear_reaches_the_gpu", dispatch_linear_bias},
    {"dispatch_linear_no_bias_reaches_the_gpu", dispatch_linear_no_bias},
    {"dispatch_add_reaches_the_gpu", dispatch_add_broadcast},
    {"dispatch_sub_reaches_the_gpu", dispatch_sub_broadcast_both},
    {"dispatch_mul_reaches_the_gpu", dispatch_mul_same_shape},
    {"dispatch_div_reaches_the_gpu", dispatch_div_broadcast},
    {"dispatch_add_scalar_reaches_the_gpu", dispatch_add_scalar},
    {"dispatch_mul_scalar_reaches_the_gpu", dispatch_mul_scalar},
    {"dispatch_sum_reaches_the_gpu", dispatch_sum_axis},
    {"dispatch_sum_keepdim_reaches_the_gpu", dispatch_sum_axis0_keepdim},
    {"dispatch_mean_reaches_the_gpu", dispatch_mean_last_axis},
    {"dispatch_sum_all_reaches_the_gpu", dispatch_sum_all},
    {"dispatch_mean_all_reaches_the_gpu", dispatch_mean_all},
    {"dispatch_embedding_reaches_the_gpu", dispatch_embedding},
    {"dispatch_layernorm_reaches_the_gpu", dispatch_layernorm},
    {"dispatch_layernorm_no_affine_reaches_the_gpu", dispatch_layernorm_no_affine},
    {"dispatch_gelu_reaches_the_gpu", dispatch_gelu},
    {"dispatch_softmax_reaches_the_gpu", dispatch_softmax_with_masked_rows},
    {"dispatch_cross_entropy_reaches_the_gpu", dispatch_cross_entropy},
    {"dispatch_cross_entropy_all_ignored_reaches_the_gpu", dispatch_cross_entropy_all_ignored},
    {"dispatch_dropout_reaches_the_gpu", dispatch_dropout},
    {"dispatch_views_reach_the_gpu", dispatch_views},
    {NULL, NULL},
};
