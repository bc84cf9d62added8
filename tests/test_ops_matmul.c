/* test_ops_matmul.c — fg_matmul and fg_linear: forward against naive loops, gradients against
 * finite differences (plain, batched, shared b, transposed and otherwise strided operands),
 * float32 against float64, and the BLAS layout decisions (no copy for transposed views). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops/ops.h"
#include "tests/common.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}
TestSuite(matmul, .fini = leak_check, .timeout = 120);

/* ---- naive references ---- */

/* out = a @ b for a (..., M, K) and b (..., K, N) or (K, N), all read with fg_get (any strides). */
static double *ref_matmul(const fg_tensor *a, const fg_tensor *b) {
    int64_t M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1], N = b->shape[b->ndim - 1];
    int64_t batches = 1;
    for (int d = 0; d < a->ndim - 2; d++) batches *= a->shape[d];
    int shared = b->ndim == 2;
    double *out = calloc((size_t)(batches * M * N + 1), sizeof *out);
    for (int64_t z = 0; z < batches; z++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += fg_get(a, (z * M + i) * K + k) * fg_get(b, ((shared ? 0 : z) * K + k) * N + j);
                out[(z * M + i) * N + j] = s;
            }
    return out;
}

/* out = x @ wᵀ + bias for x (R, K) flattened, w (N, K) */
static double *ref_linear(const fg_tensor *x, const fg_tensor *w, const fg_tensor *bias) {
    int64_t N = w->shape[0], K = w->shape[1], R = K ? fg_numel(x) / K : 0;
    double *out = calloc((size_t)(R * N + 1), sizeof *out);
    for (int64_t r = 0; r < R; r++)
        for (int64_t j = 0; j < N; j++) {
            double s = bias ? fg_get(bias, j) : 0.0;
            for (int64_t k = 0; k < K; k++) s += fg_get(x, r * K + k) * fg_get(w, j * K + k);
            out[r * N + j] = s;
        }
    return out;
}

/* ---- operand builders ---- */

typedef enum {
    PLAIN,      /* contiguous */
    TRANSPOSED, /* a transposed view of a contiguous tensor with the last two dims swapped */
    STRIDED,    /* neither dim of the last two has unit stride: needs a copy */
    PADDED,     /* contiguous columns, rows further apart than their length (a column slice) */
} layout;

/* A float64 leaf-able tensor of `shape` with the given memory layout. */
static fg_tensor *make_operand(fg_dtype dt, int ndim, const int64_t *shape, layout lay, uint64_t seed) {
    int64_t sh[FG_MAX_DIMS];
    for (int d = 0; d < ndim; d++) sh[d] = shape[d];
    if (lay == PLAIN) return fgt_rand(dt, ndim, sh, seed);
    if (lay == TRANSPOSED) {
        sh[ndim - 2] = shape[ndim - 1];
        sh[ndim - 1] = shape[ndim - 2];
        fg_tensor *base = fgt_rand(dt, ndim, sh, seed);
        fg_tensor *v = fgt_ok(fg_view_transpose(base, ndim - 2, ndim - 1), "transpose");
        fg_release(base);
        return v;
    }
    if (lay == PADDED) {
        sh[ndim - 1] = shape[ndim - 1] + 3;
        fg_tensor *base = fgt_rand(dt, ndim, sh, seed);
        fg_tensor *v = fgt_ok(fg_view_slice(base, ndim - 1, 1, 1 + shape[ndim - 1]), "slice");
        fg_release(base);
        return v;
    }
    /* STRIDED: base (..., cols, rows, 2), keep [..., 0] and swap the last two dims: the view
     * (..., rows, cols) has strides (2, 2 * rows) */
    int64_t bs[FG_MAX_DIMS + 1];
    for (int d = 0; d < ndim - 2; d++) bs[d] = shape[d];
    bs[ndim - 2] = shape[ndim - 1];
    bs[ndim - 1] = shape[ndim - 2];
    bs[ndim] = 2;
    fg_tensor *base = fgt_rand(dt, ndim + 1, bs, seed);
    fg_tensor *s = fgt_ok(fg_view_slice(base, ndim, 0, 1), "slice");
    int64_t st[FG_MAX_DIMS];
    fg_tensor *v = fgt_ok(fg_alias(s), "alias");
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++) st[d] = s->strides[d];
    v->shape[ndim - 2] = shape[ndim - 2];
    v->shape[ndim - 1] = shape[ndim - 1];
    v->strides[ndim - 2] = st[ndim - 1];
    v->strides[ndim - 1] = st[ndim - 2];
    for (int d = 0; d < ndim - 2; d++) v->shape[d] = shape[d];
    fg_release(s);
    fg_release(base);
    cr_assert(!fg_is_contiguous(v) && v->strides[ndim - 1] != 1 && v->strides[ndim - 2] != 1, "STRIDED layout");
    return v;
}

/* ---- matmul cases ---- */

typedef struct {
    const char *name;
    int nda;
    int64_t a[4];
    int ndb;
    int64_t b[4];
    layout la, lb;
} mm_case;

static const mm_case mm_cases[] = {
    {"2d", 2, {3, 5}, 2, {5, 4}, PLAIN, PLAIN},
    {"1x1", 2, {1, 1}, 2, {1, 1}, PLAIN, PLAIN},
    {"odd", 2, {7, 9}, 2, {9, 11}, PLAIN, PLAIN},
    {"k1_n1", 2, {5, 1}, 2, {1, 1}, PLAIN, PLAIN},
    {"m1", 2, {1, 6}, 2, {6, 3}, PLAIN, PLAIN},
    {"batched_4d", 4, {2, 3, 7, 9}, 4, {2, 3, 9, 5}, PLAIN, PLAIN},
    {"shared_b", 3, {4, 7, 9}, 2, {9, 1}, PLAIN, PLAIN},
    {"shared_b_m1", 3, {4, 1, 9}, 2, {9, 3}, PLAIN, PLAIN},
    {"a_transposed", 2, {7, 9}, 2, {9, 5}, TRANSPOSED, PLAIN},
    {"b_transposed", 2, {7, 9}, 2, {9, 5}, PLAIN, TRANSPOSED},
    {"both_transposed", 3, {3, 6, 5}, 3, {3, 5, 10}, TRANSPOSED, TRANSPOSED},
    {"shared_b_a_transposed", 3, {2, 7, 9}, 2, {9, 3}, TRANSPOSED, TRANSPOSED},
    {"padded_rows", 3, {2, 5, 6}, 2, {6, 4}, PADDED, PADDED},
    {"strided_copy", 3, {2, 4, 3}, 3, {2, 3, 5}, STRIDED, STRIDED},
    {"strided_shared_b", 3, {2, 4, 3}, 2, {3, 5}, STRIDED, STRIDED},
};
#define N_MM_CASES (sizeof mm_cases / sizeof mm_cases[0])

static fg_tensor *matmul_fn(fg_tensor *const *in, int n, void *user) {
    (void)n, (void)user;
    return fg_matmul(in[0], in[1]);
}

Test(matmul, matmul_forward_matches_naive_loops_for_every_layout) {
    for (size_t c = 0; c < N_MM_CASES; c++) {
        const mm_case *mc = &mm_cases[c];
        fg_tensor *a = make_operand(FG_F64, mc->nda, mc->a, mc->la, 10 + c);
        fg_tensor *b = make_operand(FG_F64, mc->ndb, mc->b, mc->lb, 50 + c);
        fg_tensor *out = fgt_ok(fg_matmul(a, b), mc->name);
        cr_assert_eq(out->ndim, mc->nda, "%s: rank %d", mc->name, out->ndim);
        cr_assert_eq(out->shape[out->ndim - 1], mc->b[mc->ndb - 1], "%s: N", mc->name);
        double *ref = ref_matmul(a, b);
        FGT_ASSERT_CLOSE_BUF(out, ref, fg_numel(out), 1e-12, 1e-12, mc->name);
        free(ref);
        fg_release(out);
        fg_release(a);
        fg_release(b);
    }
}

Test(matmul, matmul_backward_matches_numeric_for_every_layout) {
    for (size_t c = 0; c < N_MM_CASES; c++) {
        const mm_case *mc = &mm_cases[c];
        fg_tensor *in[2] = {make_operand(FG_F64, mc->nda, mc->a, mc->la, 10 + c),
                            make_operand(FG_F64, mc->ndb, mc->b, mc->lb, 50 + c)};
        fg_set_requires_grad(in[0], 1);
        fg_set_requires_grad(in[1], 1);
        char what[64];
        snprintf(what, sizeof what, "matmul %s", mc->name);
        FGT_GRADCHECK(what, matmul_fn, in, 2, NULL);
        fg_release(in[0]);
        fg_release(in[1]);
    }
}

Test(matmul, matmul_gradient_of_only_one_operand) {
    fg_tensor *in[2] = {fgt_rand(FG_F64, FGT_DIMS(2, 4, 3), 1), fgt_rand(FG_F64, FGT_DIMS(3, 5), 2)};
    fg_set_requires_grad(in[1], 1);
    FGT_GRADCHECK("matmul (b only)", matmul_fn, in, 2, NULL);
    cr_assert_null(in[0]->grad, "a, which does not require grad, got a gradient");
    fg_release(in[0]);
    fg_release(in[1]);
}

Test(matmul, matmul_float32_agrees_with_float64) {
    for (size_t c = 0; c < N_MM_CASES; c++) {
        const mm_case *mc = &mm_cases[c];
        fg_tensor *a = make_operand(FG_F64, mc->nda, mc->a, mc->la, 10 + c);
        fg_tensor *b = make_operand(FG_F64, mc->ndb, mc->b, mc->lb, 50 + c);
        fg_tensor *a32 = fgt_ok(fg_to(a, FG_CPU, FG_F32), "to"), *b32 = fgt_ok(fg_to(b, FG_CPU, FG_F32), "to");
        fg_tensor *o64 = fgt_ok(fg_matmul(a, b), mc->name), *o32 = fgt_ok(fg_matmul(a32, b32), mc->name);
        cr_assert_eq(o32->dtype, FG_F32, "%s: output dtype", mc->name);
        FGT_ASSERT_CLOSE(o32, o64, 1e-5, 1e-5, mc->name);
        fg_release(a), fg_release(b), fg_release(a32), fg_release(b32), fg_release(o64), fg_release(o32);
    }
}

Test(matmul, matmul_with_zero_sized_dims_gives_empty_or_zero_results) {
    fg_tensor *a = fgt_ok(fg_zeros(FG_F64, FG_CPU, FGT_DIMS(3, 0)), "zeros");
    fg_tensor *b = fgt_ok(fg_zeros(FG_F64, FG_CPU, FGT_DIMS(0, 2)), "zeros");
    fg_tensor *out = fgt_ok(fg_matmul(a, b), "matmul (3,0)@(0,2)");
    double zeros[6] = {0};
    FGT_ASSERT_CLOSE_BUF(out, zeros, 6, 0, 0, "empty sum is 0");
    fg_release(out);
    fg_tensor *c = fgt_ok(fg_zeros(FG_F64, FG_CPU, FGT_DIMS(0, 3)), "zeros");
    out = fgt_ok(fg_matmul(c, a), "matmul (0,3)@(3,0)");
    cr_assert_eq(fg_numel(out), 0, "numel %lld", (long long)fg_numel(out));
    fg_release(out), fg_release(a), fg_release(b), fg_release(c);
}

/* ---- linear ---- */

typedef struct {
    const char *name;
    int ndx;
    int64_t x[4];
    int64_t N;
    int has_bias;
    layout lx, lw;
} lin_case;

static const lin_case lin_cases[] = {
    {"2d_bias", 2, {5, 8}, 3, 1, PLAIN, PLAIN},
    {"3d_no_bias", 3, {2, 3, 7}, 5, 0, PLAIN, PLAIN},
    {"1x1", 2, {1, 1}, 1, 1, PLAIN, PLAIN},
    {"x_1d", 1, {9}, 4, 1, PLAIN, PLAIN},
    {"x_transposed_copy", 3, {2, 7, 5}, 6, 1, TRANSPOSED, PLAIN},
    {"w_transposed", 3, {3, 2, 9}, 10, 1, PLAIN, TRANSPOSED},
    {"x_padded_rows", 2, {6, 7}, 3, 1, PADDED, PADDED},
    {"strided", 3, {2, 4, 3}, 5, 0, STRIDED, STRIDED},
};
#define N_LIN_CASES (sizeof lin_cases / sizeof lin_cases[0])

static fg_tensor *linear_fn(fg_tensor *const *in, int n, void *user) {
    (void)user;
    return fg_linear(in[0], in[1], n > 2 ? in[2] : NULL);
}

static void lin_inputs(const lin_case *lc, fg_dtype dt, uint64_t seed, fg_tensor **in) {
    int64_t K = lc->x[lc->ndx - 1], ws[2] = {lc->N, K};
    in[0] = lc->ndx >= 2 ? make_operand(dt, lc->ndx, lc->x, lc->lx, seed) : fgt_rand(dt, 1, lc->x, seed);
    in[1] = make_operand(dt, 2, ws, lc->lw, seed + 1);
    in[2] = lc->has_bias ? fgt_rand(dt, 1, &lc->N, seed + 2) : NULL;
}

Test(matmul, linear_forward_matches_naive_loops) {
    for (size_t c = 0; c < N_LIN_CASES; c++) {
        const lin_case *lc = &lin_cases[c];
        fg_tensor *in[3];
        lin_inputs(lc, FG_F64, 100 + 3 * c, in);
        fg_tensor *out = fgt_ok(fg_linear(in[0], in[1], in[2]), lc->name);
        cr_assert_eq(out->ndim, lc->ndx, "%s: rank", lc->name);
        cr_assert_eq(out->shape[out->ndim - 1], lc->N, "%s: last dim", lc->name);
        double *ref = ref_linear(in[0], in[1], in[2]);
        FGT_ASSERT_CLOSE_BUF(out, ref, fg_numel(out), 1e-12, 1e-12, lc->name);
        free(ref);
        fg_release(out);
        for (int i = 0; i < 3; i++) fg_release(in[i]);
    }
}

Test(matmul, linear_backward_matches_numeric) {
    for (size_t c = 0; c < N_LIN_CASES; c++) {
        const lin_case *lc = &lin_cases[c];
        fg_tensor *in[3];
        lin_inputs(lc, FG_F64, 100 + 3 * c, in);
        for (int i = 0; i < 3; i++)
            if (in[i]) fg_set_requires_grad(in[i], 1);
        char what[64];
        snprintf(what, sizeof what, "linear %s", lc->name);
        FGT_GRADCHECK(what, linear_fn, in, lc->has_bias ? 3 : 2, NULL);
        for (int i = 0; i < 3; i++) fg_release(in[i]);
    }
}

Test(matmul, linear_float32_agrees_with_float64) {
    for (size_t c = 0; c < N_LIN_CASES; c++) {
        const lin_case *lc = &lin_cases[c];
        fg_tensor *in[3], *in32[3];
        lin_inputs(lc, FG_F64, 100 + 3 * c, in);
        for (int i = 0; i < 3; i++) in32[i] = in[i] ? fgt_ok(fg_to(in[i], FG_CPU, FG_F32), "to") : NULL;
        fg_tensor *o64 = fgt_ok(fg_linear(in[0], in[1], in[2]), lc->name);
        fg_tensor *o32 = fgt_ok(fg_linear(in32[0], in32[1], in32[2]), lc->name);
        FGT_ASSERT_CLOSE(o32, o64, 1e-5, 1e-5, lc->name);
        fg_release(o64), fg_release(o32);
        for (int i = 0; i < 3; i++) fg_release(in[i]), fg_release(in32[i]);
    }
}

/* linear is matmul by wᵀ plus a broadcast bias: both paths give the same gradients. */
Test(matmul, linear_equals_matmul_by_w_transposed_plus_bias) {
    fg_tensor *x = fgt_leaf(FG_F64, FGT_DIMS(2, 5, 7), 1), *w = fgt_leaf(FG_F64, FGT_DIMS(4, 7), 2);
    fg_tensor *b = fgt_leaf(FG_F64, FGT_DIMS(4), 3);
    fg_tensor *dy = fgt_rand(FG_F64, FGT_DIMS(2, 5, 4), 4);
    fg_tensor *y1 = fgt_ok(fg_linear(x, w, b), "linear");
    cr_assert_eq(fg_backward(y1, dy), FG_OK, "%s", fg_last_error());
    fg_tensor *gx = fg_clone(x->grad), *gw = fg_clone(w->grad), *gb = fg_clone(b->grad);
    fg_zero_grad(x), fg_zero_grad(w), fg_zero_grad(b);
    fg_tensor *wt = fgt_ok(fg_transpose(w, 0, 1), "transpose");
    fg_tensor *mm = fgt_ok(fg_matmul(x, wt), "matmul");
    fg_tensor *y2 = fgt_ok(fg_add(mm, b), "add");
    FGT_ASSERT_CLOSE(y1, y2, 1e-13, 1e-13, "forward");
    cr_assert_eq(fg_backward(y2, dy), FG_OK, "%s", fg_last_error());
    FGT_ASSERT_CLOSE(x->grad, gx, 1e-13, 1e-13, "dx");
    FGT_ASSERT_CLOSE(w->grad, gw, 1e-13, 1e-13, "dw");
    FGT_ASSERT_CLOSE(b->grad, gb, 1e-13, 1e-13, "db");
    fg_release(y1), fg_release(y2), fg_release(mm), fg_release(wt), fg_release(dy);
    fg_release(gx), fg_release(gw), fg_release(gb), fg_release(x), fg_release(w), fg_release(b);
}

/* A transposed view goes to BLAS as CblasTrans: nothing the size of the operand is allocated. */
Test(matmul, transposed_operands_are_not_copied) {
    int64_t M = 64, K = 48, N = 32;
    fg_tensor *at = fgt_rand(FG_F64, FGT_DIMS(K, M), 1), *bt = fgt_rand(FG_F64, FGT_DIMS(N, K), 2);
    fg_tensor *a = fgt_ok(fg_view_transpose(at, 0, 1), "t"), *b = fgt_ok(fg_view_transpose(bt, 0, 1), "t");
    fg_alloc_reset_peak(FG_CPU);
    size_t before = fgt_alloc_current();
    fg_tensor *out = fgt_ok(fg_matmul(a, b), "matmul");
    size_t used = fg_alloc_get_stats(FG_CPU).peak - before, out_bytes = (size_t)(M * N) * 8;
    cr_assert(used <= out_bytes + 4096, "matmul of transposed views allocated %zu bytes; the output alone is %zu", used,
              out_bytes);
    double *ref = ref_matmul(a, b);
    FGT_ASSERT_CLOSE_BUF(out, ref, M * N, 1e-12, 1e-12, "transposed operands");
    free(ref);
    fg_release(out), fg_release(a), fg_release(b), fg_release(at), fg_release(bt);
}

/* ---- the float32 GEMM on the pool (ops/cpu/matmul.c: tile kernel or BLAS per row block) ---- */

#include <string.h>

#include "ops/cpu/simd.h"
#include "ops/cpu/threadpool.h"

/* Forward and backward of linear at one shape in dtype dt, from float32 random values (so that
 * float32 and float64 runs see the same numbers): out, dx, dw, db (new tensors). */
static fg_tensor *rand_as(fg_dtype dt, fg_tensor *t32) {
    fg_tensor *t = fgt_ok(fg_to(t32, FG_CPU, dt), "to");
    fg_release(t32);
    return t;
}

static fg_tensor *leaf_as(fg_dtype dt, fg_tensor *t32) {
    fg_tensor *t = rand_as(dt, t32);
    fg_set_requires_grad(t, 1);
    return t;
}

static void linear_run(fg_dtype dt, int64_t R, int64_t K, int64_t N, int w_transposed, fg_tensor **res) {
    fg_tensor *x = leaf_as(dt, fgt_rand(FG_F32, FGT_DIMS(R, K), 7));
    fg_tensor *b = leaf_as(dt, fgt_rand(FG_F32, FGT_DIMS(N), 9));
    fg_tensor *w;
    if (w_transposed) { /* w (N, K) as a transposed view of a (K, N) leaf */
        fg_tensor *wt = rand_as(dt, fgt_rand(FG_F32, FGT_DIMS(K, N), 8));
        w = fgt_ok(fg_view_transpose(wt, 0, 1), "transpose");
        fg_set_requires_grad(w, 1);
        fg_release(wt);
    } else {
        w = leaf_as(dt, fgt_rand(FG_F32, FGT_DIMS(N, K), 8));
    }
    fg_tensor *dy = rand_as(dt, fgt_rand(FG_F32, FGT_DIMS(R, N), 10));
    res[0] = fgt_ok(fg_linear(x, w, b), "linear");
    cr_assert_eq(fg_backward(res[0], dy), FG_OK, "%s", fg_last_error());
    res[1] = fg_clone(x->grad), res[2] = fg_clone(w->grad), res[3] = fg_clone(b->grad);
    fg_release(x), fg_release(w), fg_release(b), fg_release(dy);
}

/* GPT-like and odd shapes: several row blocks, the register tiles' tails (rows not a multiple of
 * 6, columns not of 16), a transposed w (the forward then reads w as it is stored), and a B' too
 * big for the tile kernel. Every SIMD level (scalar: oneDNN or BLAS) and thread count must
 * give the float64 answer to float32 accuracy, and the same bits for 1 and 3 threads. */
Test(matmul, float32_linear_on_the_pool_matches_float64_for_every_level_and_thread_count) {
    static const int64_t shapes[][4] = {{768, 128, 384, 0}, {97, 37, 53, 0}, {131, 64, 65, 1}, {50, 1100, 400, 0}};
    static const char *names[4] = {"out", "dx", "dw", "db"};
    const fg_simd_level best = fg_simd_detect();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t R = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        const int wt = (int)shapes[s][3];
        fg_tensor *ref[4];
        linear_run(FG_F64, R, K, N, wt, ref);
        for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
            fg_simd_set((fg_simd_level)lv);
            fg_tensor *one[4], *three[4];
            fg_pool_set_threads(1);
            linear_run(FG_F32, R, K, N, wt, one);
            fg_pool_set_threads(3);
            linear_run(FG_F32, R, K, N, wt, three);
            for (int i = 0; i < 4; i++) {
                char what[96];
                snprintf(what, sizeof what, "shape %zu (R %lld K %lld N %lld) %s on %s", s, (long long)R, (long long)K,
                         (long long)N, names[i], fg_simd_name((fg_simd_level)lv));
                /* a sum of K (dx, out) or R (dw, db) float32 products of terms below 1 in size */
                double tol = 2e-7 * (double)(i >= 2 ? R : (i == 1 ? N : K)) + 1e-6;
                FGT_ASSERT_CLOSE(one[i], ref[i], tol, 1e-5, what);
                cr_assert(!memcmp(fg_data(one[i]), fg_data(three[i]), fg_nbytes(one[i])),
                          "%s: 1 thread and 3 threads give different bits", what);
                fg_release(one[i]), fg_release(three[i]);
            }
        }
        for (int i = 0; i < 4; i++) fg_release(ref[i]);
    }
    fg_simd_set(best);
    fg_pool_set_threads(0);
}

/* ---- the oneDNN kernel (ops/cpu/dnnl_gemm.h), forced for every float32 product ---- */

#include <dirent.h>

#include "ops/cpu/dnnl_gemm.h"
#include "ops/kernels.h"

/* Shapes that give oneDNN (on a machine of two or more CPUs) several row blocks, a single row block
 * cut into column blocks (B' read as stored and transposed), an odd tail, a transposed w, a forward
 * (x @ wᵀ) that an AVX-512 CPU cuts into full-height column blocks (R 1000, K 520, N 600), and
 * deep weight gradients (K = R; the last one deep enough to be split over K). The forward
 * and both backward products (dw reads dout transposed) must give the float64 answer to float32
 * accuracy, and the same bits for 1, 2 and 3 threads. */
Test(matmul, dnnl_products_give_the_same_bits_for_any_thread_count) {
    if (!fg_dnnl_available()) cr_skip_test("this build has no oneDNN");
    static const int64_t shapes[][4] = {{1100, 70, 150, 0}, {300, 96, 200, 1},  {97, 37, 53, 0},
                                        {640, 600, 130, 0}, {200, 300, 400, 0}, {1030, 300, 270, 0},
                                        {1000, 520, 600, 0}};
    static const char *names[4] = {"out", "dx", "dw", "db"};
    const fg_matmul_kernel was = fg_matmul_set_kernel(FG_MATMUL_DNNL);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t R = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        const int wt = (int)shapes[s][3];
        fg_tensor *ref[4], *runs[3][4];
        linear_run(FG_F64, R, K, N, wt, ref);
        for (int t = 0; t < 3; t++) {
            fg_pool_set_threads(t + 1);
            linear_run(FG_F32, R, K, N, wt, runs[t]);
        }
        for (int i = 0; i < 4; i++) {
            char what[96];
            snprintf(what, sizeof what, "shape %zu (R %lld K %lld N %lld) %s", s, (long long)R, (long long)K,
                     (long long)N, names[i]);
            double tol = 2e-7 * (double)(i >= 2 ? R : (i == 1 ? N : K)) + 1e-6;
            FGT_ASSERT_CLOSE(runs[0][i], ref[i], tol, 1e-5, what);
            for (int t = 1; t < 3; t++)
                cr_assert(!memcmp(fg_data(runs[0][i]), fg_data(runs[t][i]), fg_nbytes(runs[0][i])),
                          "%s: 1 thread and %d threads give different bits", what, t + 1);
            for (int t = 0; t < 3; t++) fg_release(runs[t][i]);
            fg_release(ref[i]);
        }
    }
    fg_matmul_set_kernel(was);
    fg_pool_set_threads(0);
}

/* The threads of this process (entries of /proc/self/task), or -1 where /proc is missing. */
static int thread_count(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* oneDNN runs on OpenMP; called per block from the pool it must not start a team of its own next
 * to the pool's workers (they would fight for the cores). After a product has started the pool,
 * products on the oneDNN kernel leave the process's thread count as it was. */
Test(matmul, dnnl_products_start_no_threads_of_their_own) {
    if (!fg_dnnl_available()) cr_skip_test("this build has no oneDNN");
    if (thread_count() < 0) cr_skip_test("no /proc/self/task here");
    fg_pool_set_threads(2);
    const fg_matmul_kernel was = fg_matmul_set_kernel(FG_MATMUL_BLAS);
    fg_tensor *res[4];
    linear_run(FG_F32, 1100, 300, 200, 0, res); /* starts the pool's worker */
    for (int i = 0; i < 4; i++) fg_release(res[i]);
    const int before = thread_count();
    fg_matmul_set_kernel(FG_MATMUL_DNNL);
    for (int r = 0; r < 2; r++) {
        linear_run(FG_F32, 1100, 300, 200, r, res);
        for (int i = 0; i < 4; i++) fg_release(res[i]);
    }
    const int after = thread_count();
    fg_matmul_set_kernel(was);
    fg_pool_set_threads(0);
    cr_expect_eq(after, before, "oneDNN products took the process from %d to %d threads", before, after);
}

/* oneDNN's products with A transposed and a deep K (weight gradients) are split over K on a machine
 * of two or more CPUs: each piece computes the whole C over its range of K and the pieces are added
 * in a fixed order. Odd sizes (K not a multiple of the piece count), strided A, B and C, B read as
 * stored and transposed, beta 0 and 1: C must be the long double answer to float32 accuracy, and
 * the same bits for 1, 2 and 3 threads. */
Test(matmul, dnnl_weight_gradients_split_over_k_match_long_double_for_any_thread_count) {
    if (!fg_dnnl_available()) cr_skip_test("this build has no oneDNN");
    static const int64_t shapes[][4] = {
        /* M, N, K, tb */ {301, 263, 1201, 0}, {700, 150, 1537, 1}, {270, 300, 1030, 1}};
    const fg_kernels *kern = fg_kernels_for(FG_CPU, "matmul");
    cr_assert(kern, "%s", fg_last_error());
    const fg_matmul_kernel was = fg_matmul_set_kernel(FG_MATMUL_DNNL);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        const int tb = (int)shapes[s][3];
        const int64_t lda = M + 3, ldb = (tb ? K : N) + 5, ldc = N + 7; /* A (K, M); B (K, N) or (N, K) */
        float *A = malloc(sizeof(float) * (size_t)(K * lda)), *B = malloc(sizeof(float) * (size_t)((tb ? N : K) * ldb));
        float *C0 = malloc(sizeof(float) * (size_t)(M * ldc)), *C = malloc(sizeof(float) * (size_t)(M * ldc));
        float *first = malloc(sizeof(float) * (size_t)(M * ldc));
        long double *ref = malloc(sizeof(long double) * (size_t)(M * N));
        cr_assert(A && B && C0 && C && first && ref);
        uint64_t r = 0x9e3779b97f4a7c15ull + s;
        for (int64_t i = 0; i < K * lda; i++)
            A[i] = (float)((double)((r = r * 6364136223846793005ull + 1) >> 40) / (1 << 24) - 0.5);
        for (int64_t i = 0; i < (tb ? N : K) * ldb; i++)
            B[i] = (float)((double)((r = r * 6364136223846793005ull + 1) >> 40) / (1 << 24) - 0.5);
        for (int64_t i = 0; i < M * ldc; i++)
            C0[i] = (float)((double)((r = r * 6364136223846793005ull + 1) >> 40) / (1 << 24) - 0.5);
        for (int beta = 0; beta <= 1; beta++) {
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    long double acc = beta ? (long double)C0[i * ldc + j] : 0.0L;
                    for (int64_t p = 0; p < K; p++)
                        acc += (long double)A[p * lda + i] * (long double)(tb ? B[j * ldb + p] : B[p * ldb + j]);
                    ref[i * N + j] = acc;
                }
            for (int t = 1; t <= 3; t++) {
                fg_pool_set_threads(t);
                memcpy(C, C0, sizeof(float) * (size_t)(M * ldc));
                cr_assert_eq(
                    kern->matmul.gemm(FG_F32, 1, tb, M, N, K, 1.0, A, lda, 0, B, ldb, 0, beta, NULL, C, ldc, 0, 1),
                    FG_OK, "%s", fg_last_error());
                double worst = 0;
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < N; j++) {
                        const double e = fabs((double)((long double)C[i * ldc + j] - ref[i * N + j]));
                        worst = e > worst ? e : worst;
                    }
                /* a sum of K products of terms below 1/2 in size, each rounded to float32 */
                cr_assert(worst <= 1e-7 * (double)K, "M %lld N %lld K %lld tb %d beta %d, %d threads: off by %g",
                          (long long)M, (long long)N, (long long)K, tb, beta, t, worst);
                for (int64_t i = 0; i < M; i++) /* the padding of C is not written */
                    for (int64_t j = N; j < ldc; j++) cr_assert_eq(C[i * ldc + j], C0[i * ldc + j]);
                if (t == 1)
                    memcpy(first, C, sizeof(float) * (size_t)(M * ldc));
                else
                    cr_assert(!memcmp(first, C, sizeof(float) * (size_t)(M * ldc)),
                              "M %lld N %lld K %lld tb %d beta %d: 1 thread and %d threads give different bits",
                              (long long)M, (long long)N, (long long)K, tb, beta, t);
            }
        }
        /* a product again takes its partial sums from the allocator's cache, not from the system */
        const fg_alloc_stats a0 = fg_alloc_get_stats(FG_CPU);
        cr_assert_eq(kern->matmul.gemm(FG_F32, 1, tb, M, N, K, 1.0, A, lda, 0, B, ldb, 0, 0.0, NULL, C, ldc, 0, 1),
                     FG_OK, "%s", fg_last_error());
        const fg_alloc_stats a1 = fg_alloc_get_stats(FG_CPU);
        cr_expect_eq(a1.system_allocs, a0.system_allocs, "a repeated product took %llu blocks from the system",
                     (unsigned long long)(a1.system_allocs - a0.system_allocs));
        cr_expect_eq(a1.current, a0.current, "a product left %zu bytes live", a1.current - a0.current);
        free(A), free(B), free(C0), free(C), free(first), free(ref);
    }
    fg_matmul_set_kernel(was);
    fg_pool_set_threads(0);
}

/* ---- signals during oneDNN's products ---- */

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

static atomic_int sig_handled, bomber_stop;
static void count_signal(int sig) {
    (void)sig;
    atomic_fetch_add(&sig_handled, 1);
}

typedef struct {
    pthread_t targets[2]; /* pthread_kill's targets, in turn; process: kill(getpid()) instead */
    int n, process;
} bomber_job;

/* libgomp's parallel region and thread number (weak: a build without oneDNN may not link libgomp) */
extern void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags) __attribute__((weak));
extern int omp_get_thread_num(void) __attribute__((weak));
static pthread_t team_worker;
static void note_team_worker(void *p) {
    (void)p;
    if (omp_get_thread_num() == 1) team_worker = pthread_self();
}

/* SIGUSR1 every 20 microseconds until bomber_stop. */
static void *bomber(void *p) {
    const bomber_job *b = p;
    const struct timespec gap = {0, 20000};
    for (unsigned i = 0; !atomic_load(&bomber_stop); i++) {
        if (b->process)
            kill(getpid(), SIGUSR1);
        else
            pthread_kill(b->targets[i % (unsigned)b->n], SIGUSR1);
        nanosleep(&gap, NULL);
    }
    return NULL;
}

/* oneDNN's generated float32 kernels run a product deeper than a few dozen rows of K with the
 * stack pointer inside a heap workspace; a signal handled on such a thread meanwhile writes its
 * frame over the heap (wrong products, then malloc's "corrupted size vs. prev_size" or a
 * segfault). Products hammered with a handled SIGUSR1 (sent to the calling thread, to the process
 * while the pool's two threads compute, to both threads of an OpenMP team) must keep their bits, the heap
 * must stay whole, and the signals must still be handled (after the call, or on another thread). */
Test(matmul, dnnl_products_survive_signals_handled_during_the_call) {
    if (!fg_dnnl_available()) cr_skip_test("this build has no oneDNN");
    const int64_t m = 320, n = 192, k = 1000; /* k past the kernels' stack capacity (84 and 252 rows) */
    float *A = malloc(sizeof(float) * (size_t)(m * k)), *B = malloc(sizeof(float) * (size_t)(k * n));
    float *C0 = malloc(sizeof(float) * (size_t)(m * n)), *C = malloc(sizeof(float) * (size_t)(m * n));
    cr_assert(A && B && C0 && C);
    uint64_t r = 0x2545f4914f6cdd1dull;
    for (int64_t i = 0; i < m * k; i++)
        A[i] = (float)((double)((r = r * 6364136223846793005ull + 1) >> 40) / (1 << 24));
    for (int64_t i = 0; i < k * n; i++)
        B[i] = (float)((double)((r = r * 6364136223846793005ull + 1) >> 40) / (1 << 24));
    cr_assert_eq(fg_dnnl_sgemm(0, 0, m, n, k, 1.0f, A, k, B, n, 0.0f, C0, n, 1), 0);
    const fg_kernels *kern = fg_kernels_for(FG_CPU, "matmul");
    cr_assert(kern, "%s", fg_last_error());
    const fg_matmul_kernel was = fg_matmul_set_kernel(FG_MATMUL_DNNL);
    struct sigaction sa = {0}, old;
    sa.sa_handler = count_signal;
    sigemptyset(&sa.sa_mask);
    cr_assert_eq(sigaction(SIGUSR1, &sa, &old), 0);
    static const char *ways[3] = {"one thread, signals to it", "the pool's 2 threads, signals to the process",
                                  "an OpenMP team of 2, signals to its threads"};
    for (int way = 0; way < 3; way++) {
        fg_pool_set_threads(way == 1 ? 2 : 1);
        bomber_job job = {{pthread_self()}, 1, way == 1};
        if (way == 2) { /* the team's worker started outside oneDNN with signals open, as the caller's
                         * own OpenMP code would start it; the signals go to it and to the caller */
            if (!GOMP_parallel || !omp_get_thread_num) continue;
            GOMP_parallel(note_team_worker, NULL, 2, 0);
            job.targets[1] = team_worker;
            job.n = 2;
        }
        atomic_store(&sig_handled, 0);
        atomic_store(&bomber_stop, 0);
        pthread_t bt;
        cr_assert_eq(pthread_create(&bt, NULL, bomber, &job), 0);
        int wrong = 0;
        for (int it = 0; it < 40; it++) {
            void *churn = malloc(1000 + 97 * (size_t)it); /* heap blocks next to oneDNN's workspace */
            memset(C, 0, sizeof(float) * (size_t)(m * n));
            if (way == 1)
                cr_assert_eq(kern->matmul.gemm(FG_F32, 0, 0, m, n, k, 1.0, A, k, 0, B, n, 0, 0.0, NULL, C, n, 0, 1),
                             FG_OK, "%s", fg_last_error());
            else
                cr_assert_eq(fg_dnnl_sgemm(0, 0, m, n, k, 1.0f, A, k, B, n, 0.0f, C, n, way == 2 ? 2 : 1), 0);
            free(churn);
            wrong += memcmp(C, C0, sizeof(float) * (size_t)(m * n)) != 0;
        }
        atomic_store(&bomber_stop, 1);
        pthread_join(bt, NULL);
        cr_expect_eq(wrong, 0, "%s: %d of 40 products changed under the signals", ways[way], wrong);
        cr_expect_gt(atomic_load(&sig_handled), 0, "%s: no SIGUSR1 was handled", ways[way]);
    }
    sigaction(SIGUSR1, &old, NULL);
    fg_matmul_set_kernel(was);
    fg_pool_set_threads(0);
    for (int i = 0; i < 64; i++) free(malloc(4096 + 64 * (size_t)i)); /* malloc checks the blocks it meets */
    free(A), free(B), free(C0), free(C);
}

/* The automatic choice follows the shape and the machine, never the SIMD level the kernels are
 * capped to: capping the level must leave every product on the same kernel (the tile kernel's bits
 * are the same on every level; the libraries' are not the tile kernel's). The shapes are every
 * product of a narrow model (C 128, vocabulary 65) and of a wider one (C 384). */
Test(matmul, the_automatic_kernel_does_not_follow_the_simd_cap) {
    const fg_simd_level best = fg_simd_detect();
    if (best < FG_SIMD_AVX2) cr_skip_test("no vector level to cap");
    const int64_t shapes[][4] = {
        {768, 384, 128, 0}, {768, 128, 384, 0}, {384, 128, 768, 1}, {768, 128, 128, 0}, {128, 128, 768, 1},
        {768, 512, 128, 0}, {512, 128, 768, 1}, {768, 65, 128, 0},  {65, 128, 768, 1},  {2048, 1152, 384, 0},
        {1152, 384, 2048, 1}, {384, 384, 2048, 1}, {2048, 65, 384, 0}, {65, 384, 2048, 1},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int64_t *s = shapes[i];
        const fg_matmul_kernel want = fg_matmul_auto_kernel(s[0], s[1], s[2], (int)s[3]);
        for (int lv = FG_SIMD_AVX2; lv < (int)best; lv++) {
            const fg_simd_level was = fg_simd_set((fg_simd_level)lv);
            const fg_matmul_kernel got = fg_matmul_auto_kernel(s[0], s[1], s[2], (int)s[3]);
            fg_simd_set(was);
            cr_expect_eq(got, want, "M %lld N %lld K %lld ta %lld: kernel %d at %s, %d at %s", (long long)s[0],
                         (long long)s[1], (long long)s[2], (long long)s[3], (int)got, fg_simd_name((fg_simd_level)lv),
                         (int)want, fg_simd_name(best));
        }
    }
}

/* A gradient buffer that linear's backward makes for x is written (β = 0), never added into: with
 * the allocator's cached blocks of dx's size filled with NaN, dx comes out equal to the dx of the
 * same backward into an existing zeroed buffer (where it adds), on every kernel and at shapes on
 * and off the pool. The test checks that dx did get a poisoned block. */
Test(matmul, a_fresh_input_gradient_is_written_not_added_into) {
    const int64_t shapes[][3] = {{37, 19, 23}, {768, 128, 384}, {768, 512, 128}, {300, 65, 130}}; /* R, K, N */
    const fg_matmul_kernel kernels[] = {FG_MATMUL_AUTO, FG_MATMUL_TILE, FG_MATMUL_BLAS, FG_MATMUL_DNNL};
    const fg_matmul_kernel was = fg_matmul_set_kernel(FG_MATMUL_AUTO);
    for (size_t kk = 0; kk < sizeof kernels / sizeof kernels[0]; kk++) {
        if (kernels[kk] == FG_MATMUL_DNNL && !fg_dnnl_available()) continue;
        fg_matmul_set_kernel(kernels[kk]);
        for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
            const int64_t R = shapes[c][0], K = shapes[c][1], N = shapes[c][2];
            fg_tensor *x = fgt_leaf(FG_F32, FGT_DIMS(R, K), 70 + c), *w = fgt_leaf(FG_F32, FGT_DIMS(N, K), 80 + c);
            fg_tensor *b = fgt_leaf(FG_F32, FGT_DIMS(N), 90 + c), *dy = fgt_rand(FG_F32, FGT_DIMS(R, N), 100 + c);
            /* into an existing zeroed buffer: added */
            cr_assert_not_null(fg_grad_buffer(x), "%s", fg_last_error());
            fg_tensor *y = fgt_ok(fg_linear(x, w, b), "linear");
            cr_assert_eq(fg_backward(y, dy), FG_OK, "%s", fg_last_error());
            fg_tensor *added = fg_clone(x->grad);
            fg_release(y);
            /* into a buffer the backward makes: written */
            fg_release(x->grad);
            x->grad = NULL;
            void *poison[FGT_POISON_BLOCKS];
            fgt_poison_cache(FG_F32, FGT_DIMS(R, K), poison);
            y = fgt_ok(fg_linear(x, w, b), "linear");
            cr_assert_eq(fg_backward(y, dy), FG_OK, "%s", fg_last_error());
            cr_assert(fgt_poisoned(fg_data(x->grad), poison), "kernel %d, R %lld: dx did not get a poisoned block",
                      (int)kernels[kk], (long long)R);
            for (int64_t i = 0; i < R * K; i++)
                cr_assert(fg_get(x->grad, i) == fg_get(added, i), "kernel %d, R %lld K %lld N %lld: dx[%lld] = %g, %g added",
                          (int)kernels[kk], (long long)R, (long long)K, (long long)N, (long long)i, fg_get(x->grad, i),
                          fg_get(added, i));
            fg_release(y), fg_release(added), fg_release(dy), fg_release(x), fg_release(w), fg_release(b);
        }
    }
    fg_matmul_set_kernel(was);
}
