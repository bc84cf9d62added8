/* test_ops_llama.c — the ops of Llama- and nanochat-style models: RMSNorm (with a weight and
 * parameter-free), RoPE (Hugging Face Llama's rotate_half layout), relu², SwiGLU and the logit
 * softcap. For each: forward against a naive loop from the math in long double, float32 against
 * float64 (outputs and gradients), the gradient against central differences in float64, backward
 * accumulating, a row per error path, and a cross-check with PyTorch (torch.nn.functional.rms_norm,
 * transformers' LlamaRotaryEmbedding + apply_rotary_pos_emb, F.silu(a) * b, F.relu(x)**2,
 * c * tanh(x / c)) through tests/ops_llama_torch_check.py when $FG_TORCH_PYTHON has torch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/cpu/simd.h"
#include "ops/cpu/threadpool.h"
#include "ops/cpu/vmath.h"
#include "ops/device.h"
#include "ops/kernels_cpu.h"
#include "ops/ops.h"
#include "tensor/npy.h"
#include "tests/common.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}
TestSuite(ops_llama, .fini = leak_check, .timeout = 300);

/* ============================================================================================
 * the cases: one op, its shapes and parameters
 * ============================================================================================ */

typedef enum { OP_RMSNORM, OP_RMSNORM_W, OP_ROPE, OP_RELU2, OP_SWIGLU, OP_SOFTCAP } llama_op;
static const char *const op_names[] = {"rmsnorm", "rmsnorm_w", "rope", "relu2", "swiglu", "softcap"};

typedef struct {
    const char *name;
    llama_op op;
    int ndim;
    int64_t shape[4];
    double p;     /* rmsnorm: eps; rope: theta; softcap: c */
    int64_t pos0; /* rope */
    double scale; /* x uniform in (-scale, scale] */
    int strided;  /* x is a transposed view (dims 0 and 1) */
} llama_case;

/* sizes 1, odd sizes and sizes that are not a multiple of 8 */
static const llama_case cases[] = {
    {"rmsnorm 3x7", OP_RMSNORM, 2, {3, 7}, 1e-6, 0, 1, 0},
    {"rmsnorm 2x3x5", OP_RMSNORM, 3, {2, 3, 5}, 1e-5, 0, 2, 0},
    {"rmsnorm 1x1", OP_RMSNORM, 2, {1, 1}, 1e-6, 0, 1, 0},
    {"rmsnorm 4x9 eps 0.1", OP_RMSNORM, 2, {4, 9}, 0.1, 0, 0.5, 0},
    {"rmsnorm strided 5x6", OP_RMSNORM, 2, {5, 6}, 1e-6, 0, 1, 1},
    {"rmsnorm_w 3x7", OP_RMSNORM_W, 2, {3, 7}, 1e-6, 0, 1, 0},
    {"rmsnorm_w 2x1x3x10", OP_RMSNORM_W, 4, {2, 1, 3, 10}, 1e-5, 0, 3, 0},
    {"rmsnorm_w 1x1", OP_RMSNORM_W, 2, {1, 1}, 1e-6, 0, 1, 0},
    {"rmsnorm_w strided 5x6", OP_RMSNORM_W, 2, {5, 6}, 1e-6, 0, 1, 1},
    {"rope 1x1x1x2", OP_ROPE, 4, {1, 1, 1, 2}, 10000, 0, 1, 0},
    {"rope 2x3x5x6", OP_ROPE, 4, {2, 3, 5, 6}, 10000, 0, 1, 0},
    {"rope 1x2x7x10 theta 5e5 pos0 5", OP_ROPE, 4, {1, 2, 7, 10}, 500000, 5, 1, 0},
    {"rope 2x1x3x14 theta 100 pos0 1000", OP_ROPE, 4, {2, 1, 3, 14}, 100, 1000, 1, 0},
    {"rope strided 3x2x4x4", OP_ROPE, 4, {3, 2, 4, 4}, 10000, 2, 1, 1},
    {"relu2 3x7", OP_RELU2, 2, {3, 7}, 0, 0, 1, 0},
    {"relu2 1x1", OP_RELU2, 2, {1, 1}, 0, 0, 1, 0},
    {"relu2 2x3x5", OP_RELU2, 3, {2, 3, 5}, 0, 0, 3, 0},
    {"relu2 strided 5x6", OP_RELU2, 2, {5, 6}, 0, 0, 1, 1},
    {"swiglu 3x7", OP_SWIGLU, 2, {3, 7}, 0, 0, 2, 0},
    {"swiglu 1x1", OP_SWIGLU, 2, {1, 1}, 0, 0, 1, 0},
    {"swiglu 2x3x9", OP_SWIGLU, 3, {2, 3, 9}, 0, 0, 8, 0},
    {"swiglu strided 5x6", OP_SWIGLU, 2, {5, 6}, 0, 0, 2, 1},
    {"softcap 3x7 c 15", OP_SOFTCAP, 2, {3, 7}, 15, 0, 40, 0},
    {"softcap 1x1 c 1", OP_SOFTCAP, 2, {1, 1}, 1, 0, 1, 0},
    {"softcap 2x3x5 c 2.5", OP_SOFTCAP, 3, {2, 3, 5}, 2.5, 0, 4, 0},
    {"softcap strided 5x6 c 30", OP_SOFTCAP, 2, {5, 6}, 30, 0, 50, 1},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static int n_inputs(llama_op op) { return op == OP_RMSNORM_W || op == OP_SWIGLU ? 2 : 1; }

static fg_tensor *llama_fn(fg_tensor *const *in, int n, void *user) {
    (void)n;
    const llama_case *c = user;
    switch (c->op) {
    case OP_RMSNORM:
        return fg_rmsnorm(in[0], NULL, c->p);
    case OP_RMSNORM_W:
        return fg_rmsnorm(in[0], in[1], c->p);
    case OP_ROPE:
        return fg_rope(in[0], c->p, c->pos0);
    case OP_RELU2:
        return fg_relu2(in[0]);
    case OP_SWIGLU:
        return fg_swiglu(in[0], in[1]);
    case OP_SOFTCAP:
        return fg_softcap(in[0], c->p);
    }
    return NULL;
}

/* The case's inputs in dt, from the seed: x (a transposed view when strided), then the weight
 * (C) in (0.5, 1.5] or SwiGLU's b (x's shape). */
static void case_inputs(const llama_case *c, fg_dtype dt, uint64_t seed, fg_tensor **in) {
    if (c->strided) {
        int64_t sh[4];
        memcpy(sh, c->shape, sizeof sh);
        sh[0] = c->shape[1], sh[1] = c->shape[0];
        fg_tensor *base = fgt_uniform(dt, c->ndim, sh, -c->scale, c->scale, seed);
        in[0] = fgt_ok(fg_view_transpose(base, 0, 1), "transpose");
        fg_release(base);
    } else {
        in[0] = fgt_uniform(dt, c->ndim, c->shape, -c->scale, c->scale, seed);
    }
    const int64_t C = c->shape[c->ndim - 1];
    if (c->op == OP_RMSNORM_W) in[1] = fgt_uniform(dt, 1, &C, 0.5, 1.5, seed + 1);
    if (c->op == OP_SWIGLU) in[1] = fgt_uniform(dt, c->ndim, c->shape, -c->scale, c->scale, seed + 1);
}

static void release_inputs(fg_tensor **in, int n) {
    for (int i = 0; i < n; i++) fg_release(in[i]);
}

/* The op's output from the math, in long double, over the inputs' values (C order). */
static double *ref_forward(const llama_case *c, fg_tensor *const *in) {
    const int64_t n = fg_numel(in[0]), C = c->shape[c->ndim - 1], R = C ? n / C : 0;
    double *x = fgt_values(in[0]), *y = n_inputs(c->op) == 2 ? fgt_values(in[1]) : NULL;
    double *out = malloc((size_t)n * sizeof *out);
    cr_assert(out);
    switch (c->op) {
    case OP_RMSNORM:
    case OP_RMSNORM_W:
        for (int64_t r = 0; r < R; r++) {
            long double ss = 0;
            for (int64_t i = 0; i < C; i++) ss += (long double)x[r * C + i] * x[r * C + i];
            const long double rms = sqrtl(ss / C + c->p);
            for (int64_t i = 0; i < C; i++) out[r * C + i] = (double)(x[r * C + i] / rms * (y ? y[i] : 1.0L));
        }
        break;
    case OP_ROPE: {
        const int64_t D = C, D2 = D / 2, T = c->shape[2];
        for (int64_t row = 0; row < R; row++) {
            const int64_t t = row % T;
            for (int64_t i = 0; i < D2; i++) {
                const long double a = (long double)(c->pos0 + t) * powl(c->p, -2.0L * i / D);
                const long double lo = x[row * D + i], hi = x[row * D + i + D2];
                out[row * D + i] = (double)(lo * cosl(a) - hi * sinl(a));
                out[row * D + i + D2] = (double)(hi * cosl(a) + lo * sinl(a));
            }
        }
        break;
    }
    case OP_RELU2:
        for (int64_t i = 0; i < n; i++) out[i] = x[i] > 0 ? (double)((long double)x[i] * x[i]) : 0;
        break;
    case OP_SWIGLU:
        for (int64_t i = 0; i < n; i++) out[i] = (double)((long double)x[i] / (1 + expl(-(long double)x[i])) * y[i]);
        break;
    case OP_SOFTCAP:
        for (int64_t i = 0; i < n; i++) out[i] = (double)(c->p * tanhl(x[i] / (long double)c->p));
        break;
    }
    free(x);
    free(y);
    return out;
}

/* ============================================================================================
 * forward, float32, gradients
 * ============================================================================================ */

Test(ops_llama, forward_matches_naive_loops_in_long_double) {
    for (size_t k = 0; k < N_CASES; k++) {
        const llama_case *c = &cases[k];
        fg_tensor *in[2] = {0};
        case_inputs(c, FG_F64, 100 * k + 1, in);
        fg_tensor *out = fgt_ok(llama_fn(in, n_inputs(c->op), (void *)c), c->name);
        cr_assert(out->ndim == c->ndim, "%s: output rank %d", c->name, out->ndim);
        for (int d = 0; d < c->ndim; d++) cr_assert_eq(out->shape[d], c->shape[d], "%s: dim %d", c->name, d);
        double *ref = ref_forward(c, in);
        FGT_ASSERT_CLOSE_BUF(out, ref, fg_numel(out), 1e-13, 1e-12, c->name);
        free(ref);
        fg_release(out);
        release_inputs(in, n_inputs(c->op));
    }
}

Test(ops_llama, backward_matches_numeric) {
    for (size_t k = 0; k < N_CASES; k++) {
        const llama_case *c = &cases[k];
        fg_tensor *in[2] = {0};
        case_inputs(c, FG_F64, 100 * k + 2, in);
        for (int i = 0; i < n_inputs(c->op); i++) fg_set_requires_grad(in[i], 1);
        FGT_GRADCHECK(c->name, llama_fn, in, n_inputs(c->op), (void *)c);
        release_inputs(in, n_inputs(c->op));
    }
}

/* forward and backward with a fixed dout; the output and each input's gradient go to res[0..n] */
static void run_with_grads(const llama_case *c, fg_tensor **in, fg_tensor *dout, fg_tensor **res) {
    const int n = n_inputs(c->op);
    for (int i = 0; i < n; i++) fg_set_requires_grad(in[i], 1);
    res[0] = fgt_ok(llama_fn(in, n, (void *)c), c->name);
    cr_assert_eq(fg_backward(res[0], dout), FG_OK, "%s: %s", c->name, fg_last_error());
    for (int i = 0; i < n; i++) {
        cr_assert(in[i]->grad, "%s: input %d has no gradient", c->name, i);
        res[1 + i] = fg_retain(in[i]->grad);
    }
}

Test(ops_llama, float32_agrees_with_float64_forward_and_backward) {
    for (size_t k = 0; k < N_CASES; k++) {
        const llama_case *c = &cases[k];
        const int n = n_inputs(c->op);
        fg_tensor *in[2] = {0}, *in32[2] = {0}, *r64[3] = {0}, *r32[3] = {0};
        case_inputs(c, FG_F64, 100 * k + 3, in);
        for (int i = 0; i < n; i++) in32[i] = fgt_ok(fg_to(in[i], FG_CPU, FG_F32), "to f32");
        fg_tensor *dout = fgt_rand(FG_F64, c->ndim, c->shape, 100 * k + 4);
        fg_tensor *dout32 = fgt_ok(fg_to(dout, FG_CPU, FG_F32), "to f32");
        run_with_grads(c, in, dout, r64);
        run_with_grads(c, in32, dout32, r32);
        for (int i = 0; i <= n; i++) {
            char what[96];
            snprintf(what, sizeof what, "%s %s", c->name, i ? (i == 1 ? "grad 0" : "grad 1") : "out");
            /* relative to the values' scale, at least 1 (dout's): where the result cancels to near
             * 0 (rmsnorm's dx for C = 1 is rstd dout (1 - n²), n = ±1 up to eps), float32 keeps
             * only the digits of the terms */
            const fgt_cmp cmp = fgt_compare(r32[i], r64[i], 0, 0);
            const double err = cmp.max_abs / fmax(cmp.ref_max, 1.0);
            cr_expect(err < 2e-5, "%s: float32 is %.3g off float64 relative to max(%.3g, 1) (at %lld: %g vs %g)", what,
                      err, cmp.ref_max, (long long)cmp.worst, cmp.worst_actual, cmp.worst_expected);
            fg_release(r32[i]), fg_release(r64[i]);
        }
        fg_release(dout), fg_release(dout32);
        release_inputs(in, n), release_inputs(in32, n);
    }
}

Test(ops_llama, backward_accumulates_into_existing_gradients) {
    for (size_t k = 0; k < N_CASES; k++) {
        const llama_case *c = &cases[k];
        const int n = n_inputs(c->op);
        fg_tensor *in[2] = {0}, *first[3] = {0};
        case_inputs(c, FG_F64, 100 * k + 5, in);
        fg_tensor *dout = fgt_rand(FG_F64, c->ndim, c->shape, 100 * k + 6);
        run_with_grads(c, in, dout, first);
        for (int i = 1; i <= n; i++) { /* a copy: the leaf's grad is the buffer the next backward adds into */
            fg_tensor *copy = fgt_ok(fg_to(first[i], FG_CPU, FG_F64), "copy");
            fg_release(first[i]);
            first[i] = copy;
        }
        fg_tensor *out = fgt_ok(llama_fn(in, n, (void *)c), c->name);
        cr_assert_eq(fg_backward(out, dout), FG_OK, "%s: %s", c->name, fg_last_error());
        for (int i = 0; i < n; i++) {
            fg_tensor *twice = fgt_ok(fg_mul_scalar(first[1 + i], 2.0), "2 g");
            char what[96];
            snprintf(what, sizeof what, "%s: grad %d after two backwards", c->name, i);
            FGT_ASSERT_CLOSE(in[i]->grad, twice, 1e-14, 1e-13, what);
            fg_release(twice);
        }
        for (int i = 0; i <= n; i++) fg_release(first[i]);
        fg_release(out), fg_release(dout);
        release_inputs(in, n);
    }
}

/* ============================================================================================
 * properties
 * ============================================================================================ */

Test(ops_llama, rmsnorm_rows_have_unit_rms_and_the_weight_scales_columns) {
    fg_tensor *x = fgt_uniform(FG_F64, FGT_DIMS(3, 11), -4, 9, 1);
    fg_tensor *w = fgt_uniform(FG_F64, FGT_DIMS(11), 0.5, 1.5, 2);
    fg_tensor *o = fgt_ok(fg_rmsnorm(x, NULL, 1e-12), "rmsnorm"), *ow = fgt_ok(fg_rmsnorm(x, w, 1e-12), "rmsnorm w");
    for (int64_t r = 0; r < 3; r++) {
        double ss = 0;
        for (int64_t i = 0; i < 11; i++) {
            ss += fg_get(o, r * 11 + i) * fg_get(o, r * 11 + i) / 11;
            cr_assert_float_eq(fg_get(ow, r * 11 + i), fg_get(o, r * 11 + i) * fg_get(w, i), 1e-15, "row %lld col %lld",
                               (long long)r, (long long)i);
        }
        cr_assert(fabs(ss - 1) < 1e-12, "row %lld: mean square %.17g", (long long)r, ss);
    }
    fg_release(o), fg_release(ow), fg_release(x), fg_release(w);
}

/* The KV cache's case: rotating one token at pos0 = t equals row t of rotating the whole sequence;
 * and the rotation keeps each pair's length. */
Test(ops_llama, rope_at_an_offset_equals_the_same_row_of_the_whole_sequence) {
    fg_tensor *x = fgt_rand(FG_F64, FGT_DIMS(1, 2, 9, 6), 7);
    fg_tensor *all = fgt_ok(fg_rope(x, 10000, 0), "rope");
    for (int64_t t = 0; t < 9; t++) {
        fg_tensor *xt = fgt_ok(fg_slice(x, 2, t, t + 1), "slice"), *want = fgt_ok(fg_slice(all, 2, t, t + 1), "slice");
        fg_tensor *got = fgt_ok(fg_rope(xt, 10000, t), "rope one");
        FGT_ASSERT_CLOSE(got, want, 0, 0, "rope at pos0 = t");
        fg_release(xt), fg_release(want), fg_release(got);
    }
    for (int64_t row = 0; row < 2 * 9; row++)
        for (int64_t i = 0; i < 3; i++) {
            const double a = fg_get(x, row * 6 + i), b = fg_get(x, row * 6 + i + 3);
            const double p = fg_get(all, row * 6 + i), q = fg_get(all, row * 6 + i + 3);
            cr_assert(fabs(hypot(a, b) - hypot(p, q)) < 1e-15, "row %lld pair %lld: |(%g, %g)| != |(%g, %g)|",
                      (long long)row, (long long)i, a, b, p, q);
        }
    /* position 0 is the identity */
    fg_tensor *x0 = fgt_ok(fg_slice(x, 2, 0, 1), "slice"), *r0 = fgt_ok(fg_rope(x0, 10000, 0), "rope");
    FGT_ASSERT_CLOSE(r0, x0, 0, 0, "rope at position 0");
    fg_release(x0), fg_release(r0), fg_release(all), fg_release(x);
}

/* relu², SwiGLU and RMSNorm cut their loops into pieces on the thread pool: 1, 2 and 3 threads,
 * with every loop forced onto the pool, give the bits of the serial loop, outputs and gradients. */
Test(ops_llama, threads_do_not_change_the_bits) {
    const llama_case big[] = {
        {"rmsnorm_w 300x70", OP_RMSNORM_W, 2, {300, 70}, 1e-6, 0, 2, 0},
        {"rmsnorm 2x400x33", OP_RMSNORM, 3, {2, 400, 33}, 1e-5, 0, 2, 0},
        {"swiglu 5x9000", OP_SWIGLU, 2, {5, 9000}, 0, 0, 4, 0},
        {"relu2 3x17000", OP_RELU2, 2, {3, 17000}, 0, 0, 2, 0},
    };
    const double old_min = fg_par_set_min_ns(0);
    for (size_t k = 0; k < sizeof big / sizeof big[0]; k++) {
        const llama_case *c = &big[k];
        const int n = n_inputs(c->op);
        fg_tensor *ref[3] = {0};
        for (int threads = 1; threads <= 3; threads++) {
            fg_pool_set_threads(threads);
            fg_tensor *in[2] = {0}, *res[3] = {0};
            case_inputs(c, FG_F32, 100 * k + 9, in);
            fg_tensor *dout = fgt_rand(FG_F32, c->ndim, c->shape, 100 * k + 10);
            run_with_grads(c, in, dout, res);
            for (int i = 0; i <= n; i++) {
                if (threads == 1) {
                    ref[i] = res[i];
                    continue;
                }
                char what[96];
                snprintf(what, sizeof what, "%s, %d threads, %s", c->name, threads, i ? "gradient" : "output");
                FGT_ASSERT_CLOSE(res[i], ref[i], 0, 0, what);
                fg_release(res[i]);
            }
            fg_release(dout);
            release_inputs(in, n);
        }
        for (int i = 0; i <= n; i++) fg_release(ref[i]);
    }
    fg_par_set_min_ns(old_min);
    fg_pool_set_threads(0);
}

Test(ops_llama, softcap_saturates_at_c_and_relu2_is_zero_below_zero) {
    const double v[4] = {-1e6, -3, 0, 1e6};
    fg_tensor *x = fgt_from(FG_F64, FGT_DIMS(4), v);
    fg_tensor *s = fgt_ok(fg_softcap(x, 15), "softcap"), *r = fgt_ok(fg_relu2(x), "relu2");
    const double want_s[4] = {-15, 15 * tanh(-0.2), 0, 15}, want_r[4] = {0, 0, 0, 1e12};
    FGT_ASSERT_CLOSE_BUF(s, want_s, 4, 0, 1e-15, "softcap");
    FGT_ASSERT_CLOSE_BUF(r, want_r, 4, 0, 0, "relu2");
    fg_release(s), fg_release(r), fg_release(x);
}

/* ============================================================================================
 * error paths: one row each
 * ============================================================================================ */

typedef struct {
    const char *name;
    llama_op op;
    int ndim;
    int64_t shape[4];
    int ndim2; /* the second input (weight, b): 0 = none */
    int64_t shape2[4];
    fg_dtype dt2;
    double p;
    int64_t pos0;
    fg_status want;
    const char *says; /* a piece of the message */
} error_case;

static const error_case error_cases[] = {
    {"rmsnorm weight of the wrong size", OP_RMSNORM_W, 2, {3, 7}, 1, {8}, FG_F64, 1e-6, 0, FG_ERR_SHAPE, "need (7)"},
    {"rmsnorm 2-D weight", OP_RMSNORM_W, 2, {3, 7}, 2, {1, 7}, FG_F64, 1e-6, 0, FG_ERR_SHAPE, "weight"},
    {"rmsnorm float32 weight, float64 x", OP_RMSNORM_W, 2, {3, 7}, 1, {7}, FG_F32, 1e-6, 0, FG_ERR_DTYPE, "dtype"},
    {"rmsnorm eps 0", OP_RMSNORM, 2, {3, 7}, 0, {0}, FG_F64, 0, 0, FG_ERR_ARG, "eps"},
    {"rmsnorm eps < 0", OP_RMSNORM, 2, {3, 7}, 0, {0}, FG_F64, -1e-6, 0, FG_ERR_ARG, "eps"},
    {"rmsnorm eps NaN", OP_RMSNORM, 2, {3, 7}, 0, {0}, FG_F64, NAN, 0, FG_ERR_ARG, "eps"},
    {"rmsnorm eps inf", OP_RMSNORM_W, 2, {3, 7}, 1, {7}, FG_F64, INFINITY, 0, FG_ERR_ARG, "eps"},
    {"rope 3-D x", OP_ROPE, 3, {2, 5, 6}, 0, {0}, FG_F64, 10000, 0, FG_ERR_SHAPE, "(B, H, T, D)"},
    {"rope odd D", OP_ROPE, 4, {1, 2, 3, 5}, 0, {0}, FG_F64, 10000, 0, FG_ERR_SHAPE, "odd head dim"},
    {"rope D = 1", OP_ROPE, 4, {1, 1, 1, 1}, 0, {0}, FG_F64, 10000, 0, FG_ERR_SHAPE, "odd head dim"},
    {"rope theta 0", OP_ROPE, 4, {1, 2, 3, 4}, 0, {0}, FG_F64, 0, 0, FG_ERR_ARG, "theta"},
    {"rope theta < 0", OP_ROPE, 4, {1, 2, 3, 4}, 0, {0}, FG_F64, -10000, 0, FG_ERR_ARG, "theta"},
    {"rope theta inf", OP_ROPE, 4, {1, 2, 3, 4}, 0, {0}, FG_F64, INFINITY, 0, FG_ERR_ARG, "theta"},
    {"rope pos0 < 0", OP_ROPE, 4, {1, 2, 3, 4}, 0, {0}, FG_F64, 10000, -1, FG_ERR_ARG, "pos0"},
    {"swiglu shapes differ", OP_SWIGLU, 2, {3, 7}, 2, {3, 8}, FG_F64, 0, 0, FG_ERR_SHAPE, "one shape"},
    {"swiglu no broadcasting", OP_SWIGLU, 2, {3, 7}, 1, {7}, FG_F64, 0, 0, FG_ERR_SHAPE, "one shape"},
    {"swiglu dtypes differ", OP_SWIGLU, 2, {3, 7}, 2, {3, 7}, FG_F32, 0, 0, FG_ERR_DTYPE, "dtype"},
    {"softcap c 0", OP_SOFTCAP, 2, {3, 7}, 0, {0}, FG_F64, 0, 0, FG_ERR_ARG, "cap c"},
    {"softcap c < 0", OP_SOFTCAP, 2, {3, 7}, 0, {0}, FG_F64, -15, 0, FG_ERR_ARG, "cap c"},
    {"softcap c inf", OP_SOFTCAP, 2, {3, 7}, 0, {0}, FG_F64, INFINITY, 0, FG_ERR_ARG, "cap c"},
};

/* relu², SwiGLU, the softcap and RMSNorm (forward, and the backward without a weight) run in pieces
 * on the thread pool: one thread and three give the same bits, outputs and gradients alike. */
static void par_run(int op, int threads, fg_tensor **res) {
    const int64_t R = 70, C = 600; /* 42000 elements: three element pieces, six pieces of rows */
    fg_pool_set_threads(threads);
    fg_tensor *x = fgt_leaf(FG_F32, FGT_DIMS(R, C), 31), *b = fgt_leaf(FG_F32, FGT_DIMS(R, C), 32);
    fg_tensor *w = fgt_leaf(FG_F32, FGT_DIMS(C), 33);
    fg_tensor *out = op == 0   ? fg_relu2(x)
                     : op == 1 ? fg_swiglu(x, b)
                     : op == 2 ? fg_softcap(x, 0.7)
                     : op == 3 ? fg_rmsnorm(x, NULL, 1e-6)
                               : fg_rmsnorm(x, w, 1e-6);
    cr_assert(out, "op %d: %s", op, fg_last_error());
    fg_tensor *dout = fgt_rand(FG_F32, FGT_DIMS(R, C), 34);
    cr_assert_eq(fg_backward(out, dout), FG_OK, "%s", fg_last_error());
    res[0] = out, res[1] = fg_retain(x->grad), res[2] = op == 1 ? fg_retain(b->grad) : NULL;
    res[3] = op == 4 ? fg_retain(w->grad) : NULL;
    fg_release(dout), fg_release(x), fg_release(b), fg_release(w);
}

Test(ops_llama, softcap_and_the_others_give_the_same_bits_on_1_and_3_threads) {
    const double min_ns = fg_par_set_min_ns(0); /* every loop of two or more pieces on the pool */
    for (int op = 0; op < 5; op++) {
        fg_tensor *one[4], *three[4];
        par_run(op, 1, one);
        par_run(op, 3, three);
        for (int k = 0; k < 4; k++) {
            cr_assert((one[k] == NULL) == (three[k] == NULL), "op %d output %d", op, k);
            if (one[k]) {
                cr_assert(fg_is_contiguous(one[k]) && fg_is_contiguous(three[k]), "op %d output %d", op, k);
                cr_assert(memcmp(fg_data(one[k]), fg_data(three[k]), (size_t)fg_nbytes(one[k])) == 0,
                          "op %d output %d: 3 threads differ from 1", op, k);
            }
            fg_release(one[k]), fg_release(three[k]);
        }
    }
    fg_pool_set_threads(0);
    fg_par_set_min_ns(min_ns);
}

/* relu² in float32 runs branch-free vector code: the bits of the plain loop, NaN, ±0 and a gradient
 * of -0 (left alone where x <= 0) included. The CPU kernels, called directly. */
Test(ops_llama, relu2_float32_is_the_plain_loop_bit_for_bit) {
    enum { N = 1003 };
    static float x[N], d[N], o[N], g[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)((i * 37) % 101 - 50) / 7.0f;
        d[i] = (float)((i * 13) % 29 - 14) / 3.0f;
        g[i] = i % 2 ? -0.0f : 0.25f * (float)i;
    }
    x[0] = NAN, x[1] = -0.0f, x[2] = 0.0f, x[3] = INFINITY, x[4] = -INFINITY, x[5] = 1e-30f;
    cr_assert_eq(fg_cpu_activation_relu2_forward(FG_F32, o, x, N), FG_OK);
    cr_assert_eq(fg_cpu_activation_relu2_backward(FG_F32, g, d, x, N), FG_OK);
    for (int i = 0; i < N; i++) {
        const float r = x[i] > 0 ? x[i] : 0, want_o = r * r;
        float want_g = i % 2 ? -0.0f : 0.25f * (float)i;
        if (x[i] > 0) want_g += d[i] * (2 * x[i]);
        cr_assert(memcmp(&o[i], &want_o, 4) == 0 && memcmp(&g[i], &want_g, 4) == 0,
                  "x[%d] = %a: out %a (loop %a), dx %a (loop %a)", i, x[i], o[i], want_o, g[i], want_g);
    }
}

Test(ops_llama, each_bad_argument_is_refused_with_a_message_naming_the_op) {
    for (size_t k = 0; k < sizeof error_cases / sizeof error_cases[0]; k++) {
        const error_case *e = &error_cases[k];
        fg_tensor *in[2] = {fgt_rand(FG_F64, e->ndim, e->shape, k + 1),
                            e->ndim2 ? fgt_rand(e->dt2, e->ndim2, e->shape2, k + 2) : NULL};
        const llama_case c = {e->name, e->op, e->ndim, {0}, e->p, e->pos0, 1, 0};
        fg_tensor *out = llama_fn(in, 2, (void *)&c);
        cr_expect_null(out, "%s: accepted", e->name);
        cr_expect_eq(fg_last_status(), e->want, "%s: status %d, want %d (%s)", e->name, (int)fg_last_status(),
                     (int)e->want, fg_last_error());
        const char *op = op_names[e->op == OP_RMSNORM_W ? OP_RMSNORM : e->op];
        cr_expect(strstr(fg_last_error(), op) && strstr(fg_last_error(), e->says), "%s: message \"%s\" lacks %s or %s",
                  e->name, fg_last_error(), op, e->says);
        fg_release(out);
        release_inputs(in, 2);
    }
    /* NULL inputs */
    cr_expect_null(fg_rmsnorm(NULL, NULL, 1e-6));
    cr_expect_null(fg_rope(NULL, 10000, 0));
    cr_expect_null(fg_relu2(NULL));
    cr_expect_null(fg_softcap(NULL, 15));
    fg_tensor *a = fgt_rand(FG_F64, FGT_DIMS(2), 1);
    cr_expect_null(fg_swiglu(a, NULL));
    cr_expect_null(fg_swiglu(NULL, a));
    fg_release(a);
}

/* The ops have no CUDA kernels: a cuda tensor is refused with "op X: not supported on cuda". */
Test(ops_llama, cuda_tensors_are_refused) {
    const char *what = "the new ops refusing cuda tensors";
    if (!fg_device_built(FG_CUDA)) fgt_skip(what, "this build has no CUDA device (make cuda)");
    if (fg_device_start(FG_CUDA) != FG_OK) fgt_skip(what, fg_last_error());
    fg_tensor *h = fgt_rand(FG_F32, FGT_DIMS(1, 2, 3, 4), 1);
    fg_tensor *x = fgt_ok(fg_to(h, FG_CUDA, FG_F32), "to cuda");
    const llama_case cs[] = {{"rmsnorm", OP_RMSNORM, 4, {0}, 1e-6, 0, 1, 0},
                             {"rope", OP_ROPE, 4, {0}, 10000, 0, 1, 0},
                             {"relu2", OP_RELU2, 4, {0}, 0, 0, 1, 0},
                             {"swiglu", OP_SWIGLU, 4, {0}, 0, 0, 1, 0},
                             {"softcap", OP_SOFTCAP, 4, {0}, 15, 0, 1, 0}};
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        fg_tensor *in[2] = {x, x};
        fg_tensor *out = llama_fn(in, 2, (void *)&cs[k]);
        cr_expect_null(out, "%s accepted a cuda tensor", cs[k].name);
        cr_expect_eq(fg_last_status(), FG_ERR_DEVICE, "%s: %s", cs[k].name, fg_last_error());
        cr_expect(strstr(fg_last_error(), "not supported on cuda"), "%s: %s", cs[k].name, fg_last_error());
        fg_release(out);
    }
    fg_release(x), fg_release(h);
}

/* ============================================================================================
 * PyTorch
 * ============================================================================================ */

/* The interpreter with torch: $FG_TORCH_PYTHON when set, else the system one. */
static const char *torch_python(void) {
    const char *p = getenv("FG_TORCH_PYTHON");
    return p && *p ? p : FGT_PYTHON;
}

/* The cases the script checks: one or two per op, each in both dtypes. */
static const llama_case torch_cases[] = {
    {"rmsnorm", OP_RMSNORM, 2, {4, 9}, 1e-5, 0, 2, 0},  {"rmsnorm_w", OP_RMSNORM_W, 4, {2, 3, 5, 12}, 1e-6, 0, 3, 0},
    {"rope", OP_ROPE, 4, {2, 3, 5, 8}, 10000, 0, 1, 0}, {"rope_pos0", OP_ROPE, 4, {1, 2, 3, 14}, 500000, 17, 1, 1},
    {"relu2", OP_RELU2, 2, {5, 13}, 0, 0, 2, 0},        {"swiglu", OP_SWIGLU, 3, {3, 7, 11}, 0, 0, 4, 0},
    {"softcap", OP_SOFTCAP, 2, {4, 17}, 15, 0, 30, 0},
};

static void save_npy(const char *dir, const char *name, const char *suffix, const fg_tensor *t) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s_%s.npy", dir, name, suffix);
    fg_tensor *c = fgt_ok(fg_make_contiguous((fg_tensor *)t), "contiguous");
    cr_assert_eq(fg_npy_save(p, c), FG_OK, "%s: %s", p, fg_last_error());
    fg_release(c);
}

Test(ops_llama, forward_and_gradients_match_pytorch) {
    const char *what = "PyTorch cross-check of rmsnorm, rope, relu2, swiglu, softcap";
    const char *script = "tests/ops_llama_torch_check.py";
    if (access(script, R_OK) != 0) fgt_skip(what, "tests/ops_llama_torch_check.py not found (run from the repo root)");
    if (access(torch_python(), X_OK) != 0) fgt_skip(what, "no python interpreter (set FG_TORCH_PYTHON)");
    char dir[256], p[512], cmd[1024], log[16384];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_ops_llama_XXXXXX");
    snprintf(p, sizeof p, "%s/cases.txt", dir);
    FILE *f = fopen(p, "w");
    cr_assert(f, "%s", p);
    const fg_dtype dts[2] = {FG_F32, FG_F64};
    for (size_t k = 0; k < sizeof torch_cases / sizeof torch_cases[0]; k++)
        for (int d = 0; d < 2; d++) {
            const llama_case *c = &torch_cases[k];
            const int n = n_inputs(c->op);
            char name[64];
            snprintf(name, sizeof name, "%s_%s", c->name, fg_dtype_name(dts[d]));
            fg_tensor *in[2] = {0}, *res[3] = {0};
            case_inputs(c, dts[d], 1000 + 10 * k, in);
            fg_tensor *dout = fgt_rand(dts[d], c->ndim, c->shape, 1000 + 10 * k + 5);
            for (int i = 0; i < n; i++) save_npy(dir, name, i ? "in1" : "in0", in[i]);
            save_npy(dir, name, "dout", dout);
            run_with_grads(c, in, dout, res);
            save_npy(dir, name, "out", res[0]);
            for (int i = 0; i < n; i++) save_npy(dir, name, i ? "grad1" : "grad0", res[1 + i]);
            fprintf(f, "%s %s %s %.17g %lld\n", name, op_names[c->op], fg_dtype_name(dts[d]), c->p, (long long)c->pos0);
            for (int i = 0; i <= n; i++) fg_release(res[i]);
            fg_release(dout);
            release_inputs(in, n);
        }
    fclose(f);
    snprintf(cmd, sizeof cmd, "HF_HUB_OFFLINE=1 %s %s %s 2>&1", torch_python(), script, dir);
    const int st = fgt_run_cmd(cmd, log, sizeof log);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    if (st == FGT_PYTHON_CANNOT_RUN) {
        log[strcspn(log, "\n")] = 0; /* its one line */
        fgt_skip(what, log);
    }
    if (fgt_verbose() || st) fprintf(stderr, "[ops_llama] %s", log);
    cr_expect_eq(st, 0, "ops_llama_torch_check.py exited %d:\n%s", st, log);
}

/* ============================================================================================
 * swiglu_packed: SwiGLU on the two halves of one gate|up tensor
 * ============================================================================================ */

static fg_tensor *swiglu_packed_fn(fg_tensor *const *in, int n, void *user) {
    (void)n, (void)user;
    return fg_swiglu_packed(in[0]);
}

/* The packed op against fg_swiglu on the two slices (the composition it replaces): the same bits,
 * output and the gradient of x, in float32 and float64, on 1 and 3 threads; a float64
 * finite-difference check; and the shapes it refuses. */
Test(ops_llama, swiglu_packed_is_swiglu_of_the_halves_bit_for_bit) {
    const fg_dtype dts[2] = {FG_F32, FG_F64};
    const double min_ns = fg_par_set_min_ns(0);
    for (int d = 0; d < 2; d++)
        for (int threads = 1; threads <= 3; threads += 2) {
            fg_pool_set_threads(threads);
            const int64_t I = 37;
            fg_tensor *x1 = fgt_leaf(dts[d], FGT_DIMS(3, 300, 2 * I), 41), *x2 = fgt_leaf(dts[d], FGT_DIMS(3, 300, 2 * I), 41);
            fg_tensor *dout = fgt_rand(dts[d], FGT_DIMS(3, 300, I), 42);
            fg_tensor *y1 = fgt_ok(fg_swiglu_packed(x1), "swiglu_packed");
            fg_tensor *a = fgt_ok(fg_slice(x2, 2, 0, I), "slice"), *b = fgt_ok(fg_slice(x2, 2, I, 2 * I), "slice");
            fg_tensor *y2 = fgt_ok(fg_swiglu(a, b), "swiglu");
            cr_assert_eq(y1->ndim, 3);
            cr_assert_eq(y1->shape[2], I);
            cr_assert(memcmp(fg_data(y1), fg_data(y2), (size_t)fg_nbytes(y1)) == 0, "%s, %d threads: outputs differ",
                      fg_dtype_name(dts[d]), threads);
            cr_assert_eq(fg_backward(y1, dout), FG_OK, "%s", fg_last_error());
            cr_assert_eq(fg_backward(y2, dout), FG_OK, "%s", fg_last_error());
            cr_assert(memcmp(fg_data(x1->grad), fg_data(x2->grad), (size_t)fg_nbytes(x1->grad)) == 0,
                      "%s, %d threads: gradients differ", fg_dtype_name(dts[d]), threads);
            fg_release(y1), fg_release(y2), fg_release(a), fg_release(b), fg_release(dout), fg_release(x1),
                fg_release(x2);
        }
    fg_pool_set_threads(0);
    fg_par_set_min_ns(min_ns);
    fg_tensor *x = fgt_leaf(FG_F64, FGT_DIMS(2, 3, 10), 43);
    FGT_GRADCHECK("swiglu_packed", swiglu_packed_fn, &x, 1, NULL);
    fg_release(x);
    const int64_t bad[3][2] = {{4, 7}, {4, 1}, {4, 0}};
    for (int i = 0; i < 3; i++) {
        fg_tensor *t = fg_zeros(FG_F32, FG_CPU, 2, bad[i]);
        cr_assert_null(fg_swiglu_packed(t), "a last dimension of %lld was taken", (long long)bad[i][1]);
        cr_expect_eq(fg_last_status(), FG_ERR_SHAPE);
        cr_expect(strstr(fg_last_error(), "swiglu_packed"), "%s", fg_last_error());
        fg_release(t);
    }
}

/* RMSNorm in float32 sums its rows in 16 lanes: every instruction-set level the CPU has gives the
 * same bits (output, dx and dw; with and without a weight; a row length that is not a multiple of 16). */
Test(ops_llama, rmsnorm_float32_gives_the_same_bits_on_every_simd_level) {
    const fg_simd_level best = fg_simd_detect();
    for (int with_w = 0; with_w < 2; with_w++) {
        fg_tensor *ref[3] = {0};
        for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
            fg_simd_set((fg_simd_level)lv);
            fg_tensor *x = fgt_leaf(FG_F32, FGT_DIMS(37, 77), 51), *w = fgt_leaf(FG_F32, FGT_DIMS(77), 52);
            fg_tensor *y = fgt_ok(fg_rmsnorm(x, with_w ? w : NULL, 1e-6), "rmsnorm");
            fg_tensor *dout = fgt_rand(FG_F32, FGT_DIMS(37, 77), 53);
            cr_assert_eq(fg_backward(y, dout), FG_OK, "%s", fg_last_error());
            fg_tensor *got[3] = {y, fg_retain(x->grad), with_w ? fg_retain(w->grad) : NULL};
            for (int k = 0; k < 3; k++) {
                if (!got[k]) continue;
                if (!ref[k])
                    ref[k] = fg_retain(got[k]);
                else
                    cr_expect(memcmp(fg_data(ref[k]), fg_data(got[k]), (size_t)fg_nbytes(got[k])) == 0,
                              "%s, weight %d: array %d differs from the scalar level's", fg_simd_name((fg_simd_level)lv),
                              with_w, k);
                fg_release(got[k]);
            }
            fg_release(dout), fg_release(x), fg_release(w);
        }
        for (int k = 0; k < 3; k++) fg_release(ref[k]);
    }
    fg_simd_set(best);
}
