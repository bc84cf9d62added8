/* test_kernels_nn.c — gelu, softmax, cross_entropy, dropout and the optimizer go through the kernel
 * table of their tensors' device (ops/kernels.h).
 *
 * A stand-in device takes FG_CUDA's slot (this is the CPU build: nothing else uses it): its memory
 * is host memory behind the device memory interface (tensor/alloc.h), and its kernel table is a
 * copy of the CPU's. Every op on it must give the CPU's numbers bit for bit, forward and backward,
 * with its buffers (the cross-entropy targets' copy too) taken from and given back to that
 * device's allocator. With a table that lacks the families, each op refuses with FG_ERR_DEVICE.
 * Each Criterion test runs in its own process, so the registrations do not leak into other tests.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/kernels.h"
#include "ops/ops.h"
#include "tests/common.h"
#include "train/adamw.h"

/* ---- the stand-in device: host memory behind the device interfaces ---- */
static void *host_alloc(size_t n) { return aligned_alloc(64, (n + 63) & ~(size_t)63); }
static void host_free(void *p) { free(p); }
static void host_memset0(void *p, size_t n) { memset(p, 0, n); }
static void host_copy(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static void host_sync(void) {}
static const fg_device_backend host_memory = {host_alloc, host_free, host_memset0, host_copy,
                                              host_copy,  host_copy, host_sync};

/* A CPU tensor over t's (contiguous) storage, to run the tensor utilities on it. */
static fg_tensor *as_cpu(const fg_tensor *t) {
    if (!fg_is_contiguous(t)) {
        fg_error(FG_ERR_ARG, "stand-in device: only contiguous tensors");
        return NULL;
    }
    return fg_from_blob(t->dtype, t->ndim, t->shape, fg_data(t));
}
static fg_status sd_fill(fg_tensor *t, double v) {
    fg_tensor *c = as_cpu(t);
    fg_status st = c ? fg_fill(c, v) : fg_last_status();
    fg_release(c);
    return st;
}
static fg_status sd_axpy(fg_tensor *y, double a, const fg_tensor *x) {
    fg_tensor *cy = as_cpu(y), *cx = as_cpu(x);
    fg_status st = cy && cx ? fg_axpy(cy, a, cx) : fg_last_status();
    fg_release(cy);
    fg_release(cx);
    return st;
}
static fg_status sd_copy(fg_tensor *dst, const fg_tensor *src) {
    fg_tensor *cd = as_cpu(dst), *cs = as_cpu(src);
    fg_status st = cd && cs ? fg_copy_into(cd, cs) : fg_last_status();
    fg_release(cd);
    fg_release(cs);
    return st;
}
static const fg_tensor_backend host_tensors = {sd_fill, sd_axpy, sd_copy};

#define SD FG_CUDA /* the stand-in's slot */
static fg_kernels sd_table;

/* Registers the stand-in with the CPU's kernels (full = 1) or with none (full = 0). */
static void stand_in(int full) {
    fg_register_backend(SD, &host_memory);
    fg_register_tensor_backend(SD, &host_tensors);
    const fg_kernels *cpu = fg_kernels_for(FG_CPU, "test");
    cr_assert(cpu != NULL, "no CPU table");
    if (full)
        sd_table = *cpu;
    else
        memset(&sd_table, 0, sizeof sd_table);
    sd_table.device = "stand-in";
    fg_register_kernels(SD, &sd_table);
}

static fg_tensor *on(const fg_tensor *t, fg_device d) {
    fg_tensor *r = fgt_ok(fg_to(t, d, t->dtype), "to");
    return r;
}

/* ---- the ops ---- */
static const int32_t targets[6] = {3, -1, 0, 36, 17, 5};
enum { N_OPS = 4 };
static const char *const op_names[N_OPS] = {"gelu", "softmax", "cross_entropy", "dropout"};
static fg_tensor *run_op(int k, fg_tensor *x) {
    switch (k) {
    case 0:
        return fg_gelu(x);
    case 1:
        return fg_softmax(x);
    case 2:
        return fg_cross_entropy(x, targets);
    default:
        return fg_dropout(x, 0.25, 0x5eedULL, 7);
    }
}

/* y = op(x) on device d from the CPU tensor x0, and x's gradient for the output gradient g0
 * (CPU); both returned on the CPU. */
static void op_on(int k, fg_device d, const fg_tensor *x0, const fg_tensor *g0, fg_tensor **y, fg_tensor **dx) {
    fg_tensor *x = on(x0, d);
    cr_assert_eq(fg_set_requires_grad(x, 1), FG_OK);
    fg_tensor *out = run_op(k, x);
    cr_assert(out != NULL, "%s on %s: %s", op_names[k], fg_device_name(d), fg_last_error());
    cr_expect_eq(out->device, d, "%s: the output is on %s", op_names[k], fg_device_name(out->device));
    fg_tensor *g = k == 2 ? NULL : on(g0, d); /* cross_entropy: a scalar loss, seeded with 1 */
    cr_assert_eq(fg_backward(out, g), FG_OK, "%s backward on %s: %s", op_names[k], fg_device_name(d), fg_last_error());
    *y = on(out, FG_CPU);
    *dx = on(x->grad, FG_CPU);
    fg_release(g);
    fg_release(out);
    fg_release(x);
}

Test(kernels_nn, ops_on_another_device_run_its_table_with_the_cpus_bits) {
    stand_in(1);
    for (int dt = 0; dt < 2; dt++)
        for (int k = 0; k < N_OPS; k++) {
            fg_tensor *x = fgt_uniform((fg_dtype)dt, FGT_DIMS(6, 37), -4, 4, 11 + k);
            fg_tensor *g = fgt_rand((fg_dtype)dt, FGT_DIMS(6, 37), 23 + k);
            fg_tensor *y_cpu, *dx_cpu, *y_sd, *dx_sd;
            op_on(k, FG_CPU, x, g, &y_cpu, &dx_cpu);
            op_on(k, SD, x, g, &y_sd, &dx_sd);
            char what[64];
            snprintf(what, sizeof what, "%s %s forward", op_names[k], fg_dtype_name((fg_dtype)dt));
            FGT_ASSERT_CLOSE(y_sd, y_cpu, 0, 0, what);
            snprintf(what, sizeof what, "%s %s backward", op_names[k], fg_dtype_name((fg_dtype)dt));
            FGT_ASSERT_CLOSE(dx_sd, dx_cpu, 0, 0, what);
            fg_release(x), fg_release(g), fg_release(y_cpu), fg_release(dx_cpu), fg_release(y_sd), fg_release(dx_sd);
        }
    /* every buffer on the stand-in, the targets' copy of cross_entropy included, was given back */
    fg_alloc_stats st = fg_alloc_get_stats(SD);
    cr_expect_eq(st.current, 0, "%zu bytes still live on the stand-in device", st.current);
    cr_expect_gt(st.allocs, 0, "nothing was allocated on the stand-in device");
}

Test(kernels_nn, ops_refuse_a_device_whose_table_lacks_them) {
    stand_in(0);
    fg_tensor *x0 = fgt_rand(FG_F32, FGT_DIMS(6, 37), 1), *x = on(x0, SD);
    for (int k = 0; k < N_OPS; k++) {
        fg_tensor *y = run_op(k, x);
        cr_expect(y == NULL, "%s ran without kernels", op_names[k]);
        cr_expect_eq(fg_last_status(), FG_ERR_DEVICE, "%s: status %d", op_names[k], (int)fg_last_status());
        char want[64];
        snprintf(want, sizeof want, "op %s: not supported on stand-in", op_names[k]);
        cr_expect(strstr(fg_last_error(), want) != NULL, "%s: message '%s'", op_names[k], fg_last_error());
        fg_release(y);
    }
    const fg_adamw_config cfg = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8};
    fg_adamw o;
    cr_expect_eq(fg_adamw_init(&o, &cfg, FG_F32, SD, 10), FG_ERR_DEVICE, "adamw: status %d", (int)fg_last_status());
    cr_expect(strstr(fg_last_error(), "op adamw: not supported on stand-in") != NULL, "message '%s'", fg_last_error());
    cr_expect(isnan(fg_grad_norm(x)), "a gradient norm without kernels is not NaN");
    fg_release(x0);
    fg_release(x);
}

/* ---- the optimizer ---- */

Test(kernels_nn, grad_norm_and_scale_use_the_arrays_device) {
    stand_in(1);
    for (int dt = 0; dt < 2; dt++) {
        fg_tensor *g = fgt_rand((fg_dtype)dt, FGT_DIMS(70001), 5), *gd = on(g, SD);
        const double n_cpu = fg_grad_norm(g), n_sd = fg_grad_norm(gd);
        cr_expect(n_cpu == n_sd && n_cpu > 0, "norm %.17g on the stand-in, %.17g on the CPU", n_sd, n_cpu);
        fg_grad_scale(g, 0.3);
        fg_grad_scale(gd, 0.3);
        fg_tensor *back = on(gd, FG_CPU);
        FGT_ASSERT_CLOSE(back, g, 0, 0, "grad_scale");
        fg_release(g), fg_release(gd), fg_release(back);
    }
}

/* The update of one element, as ops/kernels.h states it, in T. */
#define ADAMW_ONE(T, p, g, m, v, df, b1, b2, step, bc2s, eps)                                                          \
    do {                                                                                                               \
        m = (T)(b1)*m + (T)(1.0 - (b1)) * g;                                                                           \
        v = (T)(b2)*v + (T)(1.0 - (b2)) * g * g;                                                                       \
        T denom_ = (T)sqrt((double)v) / (T)(bc2s) + (T)(eps);                                                          \
        p = p * (T)(df) - (T)(step)*m / denom_;                                                                        \
    } while (0)

Test(kernels_nn, adamw_updates_its_spans_only_with_their_decay) {
    const fg_kernels *k = fg_kernels_for(FG_CPU, "adamw");
    cr_assert(k && k->optimizer.adamw, "no CPU adamw kernel");
    enum { N = 20000 };
    /* spans with gaps between them, one longer than a vector, one of a single element */
    const fg_adamw_span spans[3] = {{3, 61, 0.97}, {100, 1, 1.0}, {200, N - 300, 0.9}};
    const double b1 = 0.9, b2 = 0.95, step = 2e-3, bc2s = 0.3, eps = 1e-8;
    static float p[N], g[N], m[N], v[N], p0[N], m0[N], v0[N];
    static double pd[N], gd[N], md[N], vd[N];
    for (int i = 0; i < N; i++) {
        p0[i] = sinf((float)i), g[i] = 0.1f * cosf(0.37f * (float)i);
        m0[i] = 0.01f * (float)(i % 7), v0[i] = 0.001f * (float)(i % 5);
        p[i] = p0[i], m[i] = m0[i], v[i] = v0[i];
        pd[i] = p0[i], gd[i] = g[i], md[i] = m0[i], vd[i] = v0[i];
    }
    /* the gradients read times gs (a clipping coefficient), as if scaled first; g is not written */
    const double gs = 0.6180339887;
    cr_assert_eq(k->optimizer.adamw(FG_F32, p, g, gs, m, v, N, 3, spans, b1, b2, step, bc2s, eps), FG_OK);
    cr_assert_eq(k->optimizer.adamw(FG_F64, pd, gd, gs, md, vd, N, 3, spans, b1, b2, step, bc2s, eps), FG_OK);
    int bad = -1;
    double got = 0, want = 0;
    for (int i = 0; i < N && bad < 0; i++) {
        double df = 0;
        int in = 0;
        for (int s = 0; s < 3; s++)
            if (i >= spans[s].offset && i < spans[s].offset + spans[s].count) in = 1, df = spans[s].decay_factor;
        float ep = p0[i], em = m0[i], ev = v0[i], eg = g[i] * (float)gs;
        double epd = p0[i], emd = m0[i], evd = v0[i], egd = (double)g[i] * gs;
        if (g[i] != 0.1f * cosf(0.37f * (float)i) || gd[i] != (double)g[i]) {
            bad = i, got = g[i], want = 0.1f * cosf(0.37f * (float)i);
            break;
        }
        if (in) { /* outside the spans nothing moves */
            ADAMW_ONE(float, ep, eg, em, ev, df, b1, b2, step, bc2s, eps);
            ADAMW_ONE(double, epd, egd, emd, evd, df, b1, b2, step, bc2s, eps);
        }
        if (p[i] != ep || m[i] != em || v[i] != ev)
            bad = i, got = p[i], want = ep;
        else if (pd[i] != epd || md[i] != emd || vd[i] != evd)
            bad = i, got = pd[i], want = epd;
    }
    cr_expect(bad < 0, "element %d differs from the formula (p, m or v; p is %.17g, expected %.17g)", bad, got, want);
}
