/* test_attention.c — GPU attention: flash against naive against the CPU, and determinism.
 *
 * For each shape (odd sizes, Nq ≠ Nk both ways, rows that see no key, Nk = 0, head dims from 8
 * to 256), causal and not, with and without dropout, float32 and float64, and then for each
 * built-in variant (GQA and multi-query, sliding windows, ALiBi with standard and user slopes,
 * softcapping, and combinations) under the same conditions:
 *   reference  = the CPU naive kernel in float64 on the same (dtype-rounded) inputs
 *   GPU flash, GPU naive and the CPU flash kernel (in the test dtype) must all match it (flash in
 *   float32 with the lse_lo buffer, as fg_attention runs it; in float64 without):
 *   O and lse after the forward (outputs poisoned with NaN first, so an unwritten element fails),
 *   dQ, dK, dV after the backward (gradient buffers pre-filled with random values, so the test
 *   also checks that the backward ADDS).
 * Then: two flash backward runs give bit-identical gradients (also under GQA, where a K/V head
 * sums several query heads); fg_attention with autograd on cuda tensors matches the CPU's, with
 * and without variants; user callbacks on cuda and an unsupported head dim are clean errors; the
 * `flashgrad attention` and `flashgrad gradcheck attention` commands work with --device cuda.
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernels_cuda.h"
#include "ops/attention.h"
#include "ops/attention_kernels.h"
#include "tensor/npy.h"
#include "tensor/philox.h"
#include "tests/cuda/cuda_test.h"
#include "cli/commands.h"

typedef struct {
    int64_t B, H, Nq, Nk, d;
    int causal;
    double p;
    /* variants: K/V heads (0 = H), window (win, wl, wr), alibi (1 standard slopes, 2 user_slopes),
     * softcap (0 = off), score scale (0 = 1/sqrt(d)) */
    int64_t Hkv;
    int win;
    int64_t wl, wr;
    int alibi;
    double softcap, scale;
} shape_case;

/* user ALiBi slopes (alibi = 2), up to 8 heads; deliberately not the standard ones */
static const double user_slopes[8] = {0.3, 0.05, 1.25, 0.0, 0.7, 0.01, 0.5, 2.0};

/* (B, H, Nq, Nk, d, causal, p, then designated variant fields) */
#define SHAPE(b_, h_, nq_, nk_, d_, c_, p_, ...)                                                                       \
    { .B = (b_), .H = (h_), .Nq = (nq_), .Nk = (nk_), .d = (d_), .causal = (c_), .p = (p_), __VA_ARGS__ }
static const shape_case shapes[] = {
    SHAPE(1, 1, 1, 1, 8, 0, 0),       SHAPE(2, 3, 17, 17, 16, 0, 0),    SHAPE(2, 3, 17, 17, 16, 1, 0),
    SHAPE(1, 2, 65, 130, 32, 1, 0),   SHAPE(1, 2, 130, 65, 32, 1, 0),   SHAPE(1, 1, 100, 37, 40, 0, 0.2),
    SHAPE(2, 2, 77, 77, 64, 1, 0.1),  SHAPE(1, 2, 129, 200, 100, 0, 0), SHAPE(1, 1, 64, 64, 128, 1, 0),
    SHAPE(1, 1, 33, 70, 256, 1, 0.3), SHAPE(1, 1, 200, 1, 24, 1, 0),    SHAPE(1, 2, 7, 0, 16, 0, 0),
    SHAPE(1, 1, 63, 65, 64, 0, 0.5),  SHAPE(2, 1, 96, 96, 128, 0, 0.1),
};
static const shape_case big = SHAPE(2, 4, 1000, 1000, 64, 1, 0.1);
static const shape_case big_quick = SHAPE(1, 2, 300, 300, 64, 1, 0.1);

static const shape_case variant_shapes[] = {
    /* GQA */
    SHAPE(2, 4, 37, 53, 16, 1, 0, .Hkv = 2), SHAPE(1, 6, 65, 65, 32, 0, 0.2, .Hkv = 3),
    SHAPE(1, 3, 100, 37, 24, 1, 0.1, .Hkv = 1), /* multi-query, Nq > Nk: rows that see no key */
    /* sliding windows */
    SHAPE(1, 2, 140, 140, 32, 1, 0, .win = 1, .wl = 20, .wr = -1),
    SHAPE(1, 1, 70, 150, 24, 0, 0.1, .win = 1, .wl = 5, .wr = 7),
    SHAPE(1, 1, 150, 60, 40, 1, 0, .win = 1, .wl = 3, .wr = 3),
    SHAPE(2, 1, 45, 45, 16, 0, 0, .win = 1, .wl = 0, .wr = 0),
    SHAPE(1, 1, 129, 200, 100, 0, 0.3, .win = 1, .wl = -1, .wr = 10),
    /* ALiBi */
    SHAPE(1, 6, 45, 77, 16, 1, 0, .alibi = 1), SHAPE(2, 2, 33, 33, 32, 0, 0.25, .alibi = 2),
    SHAPE(1, 8, 20, 90, 64, 0, 0, .alibi = 1),
    /* softcap */
    SHAPE(1, 2, 64, 100, 64, 0, 0, .softcap = 3.0, .scale = 1.0), SHAPE(1, 1, 50, 50, 16, 1, 0.1, .softcap = 0.5),
    SHAPE(1, 1, 33, 70, 256, 1, 0, .softcap = 1.5, .scale = 0.3),
    /* combinations */
    SHAPE(2, 4, 97, 75, 40, 1, 0.2, .Hkv = 2, .win = 1, .wl = 16, .wr = 2, .alibi = 1, .softcap = 4.0, .scale = 0.8),
    SHAPE(1, 4, 63, 65, 128, 0, 0, .Hkv = 1, .win = 1, .wl = 10, .wr = 10, .alibi = 2, .softcap = 2.0),
    SHAPE(1, 2, 7, 0, 16, 0, 0, .Hkv = 1, .win = 1, .wl = 1, .wr = 1, .alibi = 1, .softcap = 1.0), /* Nk = 0 */
};

/* ---- host arrays ---- */
static double *rand_f64(int64_t n, uint64_t seed) {
    double *x = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) x[i] = 2.0 * fg_u32_to_uniform_f64(fg_philox_u32(seed, 0, (uint64_t)i)) - 1.0;
    return x;
}
/* round to dt's precision in place (so the float64 reference sees exactly the test's inputs) */
static void round_to(fg_dtype dt, double *x, int64_t n) {
    if (dt == FG_F32)
        for (int64_t i = 0; i < n; i++) x[i] = (double)(float)x[i];
}
/* a device (or CPU) tensor of dt holding x */
static fg_tensor *dev_tensor(fg_dtype dt, fg_device dev, int nd, const int64_t *sh, const double *x) {
    fg_tensor *h = fg_from_blob(FG_F64, nd, sh, (void *)x);
    fg_tensor *t = h ? fg_to(h, dev, dt) : NULL;
    fg_release(h);
    return t;
}
static fg_tensor *nan_tensor(fg_dtype dt, fg_device dev, int nd, const int64_t *sh) {
    return fg_full(dt, dev, nd, sh, NAN);
}

/* ---- the "device" kernels: the GPU backend, or the CPU kernels in self-test mode ---- */
static fg_status dev_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *p, const void *q, const void *k,
                             const void *v, const fg_attn_problem *pr) {
    if (FGT_DEV == FG_CUDA) return fg_cu_attention_forward(impl, dt, o, lse, p, q, k, v, pr);
    if (impl == FG_ATTN_NAIVE)
        return dt == FG_F32 ? fg_attn_naive_forward_f32(o, lse, p, q, k, v, pr)
                            : fg_attn_naive_forward_f64(o, lse, p, q, k, v, pr);
    /* flash: p is lse_lo (or NULL) */
    return dt == FG_F32 ? fg_attn_flash_forward_lo_f32(o, lse, p, q, k, v, pr)
                        : fg_attn_flash_forward_lo_f64(o, lse, p, q, k, v, pr);
}
static fg_status dev_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv, const void *dout,
                              const void *q, const void *k, const void *v, const void *o, const void *lse,
                              const void *p, const fg_attn_problem *pr) {
    if (FGT_DEV == FG_CUDA) return fg_cu_attention_backward(impl, dt, dq, dk, dv, dout, q, k, v, o, lse, p, pr);
    if (impl == FG_ATTN_NAIVE)
        return dt == FG_F32 ? fg_attn_naive_backward_f32(dq, dk, dv, dout, q, k, v, p, pr)
                            : fg_attn_naive_backward_f64(dq, dk, dv, dout, q, k, v, p, pr);
    return dt == FG_F32 ? fg_attn_flash_backward_lo_f32(dq, dk, dv, dout, q, k, v, o, lse, p, pr)
                        : fg_attn_flash_backward_lo_f64(dq, dk, dv, dout, q, k, v, o, lse, p, pr);
}
/* the CPU kernels in dt */
static fg_status cpu_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *p, const void *q, const void *k,
                             const void *v, const fg_attn_problem *pr) {
    fg_device save = FGT_DEV;
    FGT_DEV = FG_CPU;
    fg_status st = dev_forward(impl, dt, o, lse, p, q, k, v, pr);
    FGT_DEV = save;
    return st;
}
static fg_status cpu_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv, const void *dout,
                              const void *q, const void *k, const void *v, const void *o, const void *lse,
                              const void *p, const fg_attn_problem *pr) {
    fg_device save = FGT_DEV;
    FGT_DEV = FG_CPU;
    fg_status st = dev_backward(impl, dt, dq, dk, dv, dout, q, k, v, o, lse, p, pr);
    FGT_DEV = save;
    return st;
}

/* The reference and inputs of one (shape, dtype). */
typedef struct {
    fg_attn_problem pr;
    int64_t nq, nk, nl, np; /* element counts of q-like, k-like, lse, p */
    int64_t qs[4], ks[4], ls[3], ps[4];
    double *q, *k, *v, *dout, *g0q, *g0k, *g0v; /* inputs (dt-rounded) and initial gradients */
    double *o, *lse, *dq, *dk, *dv;             /* float64 reference; grads include g0 */
} ref_case;

/* The options of a shape case (dropout seed left 0). */
static fg_attn_opts shape_opts(const shape_case *s) {
    fg_attn_opts op = fg_attn_defaults();
    op.causal = s->causal;
    op.dropout_p = s->p;
    op.scale = s->scale;
    op.variant.n_kv_heads = s->Hkv;
    op.variant.window = s->win;
    op.variant.window_left = s->wl;
    op.variant.window_right = s->wr;
    op.variant.alibi = s->alibi != 0;
    op.variant.alibi_slopes = s->alibi == 2 ? user_slopes : NULL;
    op.variant.softcap = s->softcap;
    return op;
}

/* "[B=.. H=.. Nq=.. Nk=.. d=.. causal=.. p=.. <variants> <dtype>]" */
static void shape_label(char *buf, size_t n, const shape_case *s, fg_dtype dt) {
    int u = snprintf(buf, n, "[B=%lld H=%lld Nq=%lld Nk=%lld d=%lld causal=%d p=%g", (long long)s->B, (long long)s->H,
                     (long long)s->Nq, (long long)s->Nk, (long long)s->d, s->causal, s->p);
#define ADD(...) u += snprintf(buf + u, (size_t)u < n ? n - (size_t)u : 0, __VA_ARGS__)
    if (s->Hkv) ADD(" Hkv=%lld", (long long)s->Hkv);
    if (s->win) ADD(" window=%lld,%lld", (long long)s->wl, (long long)s->wr);
    if (s->alibi) ADD(" alibi%s", s->alibi == 2 ? "(user slopes)" : "");
    if (s->softcap > 0) ADD(" softcap=%g", s->softcap);
    if (s->scale) ADD(" scale=%g", s->scale);
    ADD(" %s]", fg_dtype_name(dt));
#undef ADD
}

static void ref_free(ref_case *r) {
    double *all[] = {r->q, r->k, r->v, r->dout, r->g0q, r->g0k, r->g0v, r->o, r->lse, r->dq, r->dk, r->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    memset(r, 0, sizeof *r);
}

static int ref_make(ref_case *r, const shape_case *s, fg_dtype dt, uint64_t seed) {
    memset(r, 0, sizeof *r);
    fg_attn_opts op = shape_opts(s);
    op.seed = 0xfeedULL + seed;
    const int64_t Hkv = s->Hkv ? s->Hkv : s->H;
    if (fg_attn_problem_init(&r->pr, s->B, s->H, s->Nq, s->Nk, s->d, &op) != FG_OK) {
        printf("    problem init: %s\n", fg_last_error());
        return FGT_FAIL;
    }
    r->nq = s->B * s->H * s->Nq * s->d;
    r->nk = s->B * Hkv * s->Nk * s->d;
    r->nl = s->B * s->H * s->Nq;
    r->np = s->B * s->H * s->Nq * s->Nk;
    const int64_t qs[4] = {s->B, s->H, s->Nq, s->d}, ks[4] = {s->B, Hkv, s->Nk, s->d}, ls[3] = {s->B, s->H, s->Nq};
    const int64_t ps[4] = {s->B, s->H, s->Nq, s->Nk};
    memcpy(r->qs, qs, sizeof qs), memcpy(r->ks, ks, sizeof ks), memcpy(r->ls, ls, sizeof ls),
        memcpy(r->ps, ps, sizeof ps);
    r->q = rand_f64(r->nq, seed + 1), r->k = rand_f64(r->nk, seed + 2), r->v = rand_f64(r->nk, seed + 3);
    r->dout = rand_f64(r->nq, seed + 4);
    r->g0q = rand_f64(r->nq, seed + 5), r->g0k = rand_f64(r->nk, seed + 6), r->g0v = rand_f64(r->nk, seed + 7);
    double *all[] = {r->q, r->k, r->v, r->dout, r->g0q, r->g0k, r->g0v};
    int64_t cnt[] = {r->nq, r->nk, r->nk, r->nq, r->nq, r->nk, r->nk};
    for (int i = 0; i < 7; i++) round_to(dt, all[i], cnt[i]);
    r->o = malloc((size_t)(r->nq ? r->nq : 1) * sizeof(double));
    r->lse = malloc((size_t)(r->nl ? r->nl : 1) * sizeof(double));
    double *p = malloc((size_t)(r->np ? r->np : 1) * sizeof(double));
    r->dq = malloc((size_t)(r->nq ? r->nq : 1) * sizeof(double));
    r->dk = malloc((size_t)(r->nk ? r->nk : 1) * sizeof(double));
    r->dv = malloc((size_t)(r->nk ? r->nk : 1) * sizeof(double));
    memcpy(r->dq, r->g0q, (size_t)r->nq * sizeof(double));
    memcpy(r->dk, r->g0k, (size_t)r->nk * sizeof(double));
    memcpy(r->dv, r->g0v, (size_t)r->nk * sizeof(double));
    fg_status st = fg_attn_naive_forward_f64(r->o, r->lse, p, r->q, r->k, r->v, &r->pr);
    if (st == FG_OK) st = fg_attn_naive_backward_f64(r->dq, r->dk, r->dv, r->dout, r->q, r->k, r->v, p, &r->pr);
    free(p);
    if (st != FG_OK) {
        printf("    reference: %s\n", fg_last_error());
        return FGT_FAIL;
    }
    return FGT_PASS;
}

static double attn_tol(fg_dtype dt) { return dt == FG_F64 ? 1e-10 : 1e-4; }

/* Run impl forward + backward on `dev` through fwd/bwd and compare with the reference. */
typedef fg_status (*fwd_fn)(fg_attn_impl, fg_dtype, void *, void *, void *, const void *, const void *, const void *,
                            const fg_attn_problem *);
typedef fg_status (*bwd_fn)(fg_attn_impl, fg_dtype, void *, void *, void *, const void *, const void *, const void *,
                            const void *, const void *, const void *, const void *, const fg_attn_problem *);
static int check_impl(const ref_case *r, fg_attn_impl impl, fg_dtype dt, fg_device dev, fwd_fn fwd, bwd_fn bwd,
                      const char *label) {
    char what[200];
    int rc = FGT_FAIL;
    fg_tensor *q = dev_tensor(dt, dev, 4, r->qs, r->q), *k = dev_tensor(dt, dev, 4, r->ks, r->k);
    fg_tensor *v = dev_tensor(dt, dev, 4, r->ks, r->v), *dout = dev_tensor(dt, dev, 4, r->qs, r->dout);
    fg_tensor *dq = dev_tensor(dt, dev, 4, r->qs, r->g0q), *dk = dev_tensor(dt, dev, 4, r->ks, r->g0k);
    fg_tensor *dv = dev_tensor(dt, dev, 4, r->ks, r->g0v);
    fg_tensor *o = nan_tensor(dt, dev, 4, r->qs), *lse = nan_tensor(dt, dev, 3, r->ls);
    /* aux: naive's P; for flash in float32 the lse_lo buffer fg_attention passes (poisoned too) */
    fg_tensor *p = impl == FG_ATTN_NAIVE ? nan_tensor(dt, dev, 4, r->ps)
                   : dt == FG_F32        ? nan_tensor(dt, dev, 3, r->ls)
                                         : NULL;
    double *ho = NULL, *hl = NULL, *hq = NULL, *hk = NULL, *hv = NULL;
    if (!q || !k || !v || !dout || !dq || !dk || !dv || !o || !lse || ((impl == FG_ATTN_NAIVE || dt == FG_F32) && !p)) {
        printf("    %s: allocation failed: %s\n", label, fg_last_error());
        goto done;
    }
    if (fwd(impl, dt, fg_data(o), fg_data(lse), p ? fg_data(p) : NULL, fg_data(q), fg_data(k), fg_data(v), &r->pr) !=
        FG_OK) {
        printf("    %s forward: %s\n", label, fg_last_error());
        goto done;
    }
    if (bwd(impl, dt, fg_data(dq), fg_data(dk), fg_data(dv), fg_data(dout), fg_data(q), fg_data(k), fg_data(v),
            fg_data(o), fg_data(lse), p ? fg_data(p) : NULL, &r->pr) != FG_OK) {
        printf("    %s backward: %s\n", label, fg_last_error());
        goto done;
    }
    ho = fgt_host_f64(o), hl = fgt_host_f64(lse), hq = fgt_host_f64(dq), hk = fgt_host_f64(dk), hv = fgt_host_f64(dv);
    if (!ho || !hl || !hq || !hk || !hv) {
        printf("    %s: read back failed: %s\n", label, fg_last_error());
        goto done;
    }
    const double tol = attn_tol(dt);
    snprintf(what, sizeof what, "%s O", label);
    if (fgt_compare(what, ho, r->o, r->nq, tol) != FGT_PASS) goto done;
    snprintf(what, sizeof what, "%s lse", label);
    if (fgt_compare(what, hl, r->lse, r->nl, tol) != FGT_PASS) goto done;
    snprintf(what, sizeof what, "%s dQ (+= into random)", label);
    if (fgt_compare(what, hq, r->dq, r->nq, tol) != FGT_PASS) goto done;
    snprintf(what, sizeof what, "%s dK (+= into random)", label);
    if (fgt_compare(what, hk, r->dk, r->nk, tol) != FGT_PASS) goto done;
    snprintf(what, sizeof what, "%s dV (+= into random)", label);
    if (fgt_compare(what, hv, r->dv, r->nk, tol) != FGT_PASS) goto done;
    rc = FGT_PASS;
done:
    free(ho), free(hl), free(hq), free(hk), free(hv);
    fg_release(q), fg_release(k), fg_release(v), fg_release(dout), fg_release(dq), fg_release(dk), fg_release(dv);
    fg_release(o), fg_release(lse), fg_release(p);
    return rc;
}

static int run_shape(const shape_case *s, fg_dtype dt, uint64_t seed) {
    ref_case r;
    char label[200];
    if (ref_make(&r, s, dt, seed) != FGT_PASS) {
        ref_free(&r);
        return FGT_FAIL;
    }
    int rc = FGT_PASS;
    shape_label(label, sizeof label - 40, s, dt);
    snprintf(label + strlen(label), 40, " %s flash", fg_device_name(FGT_DEV));
    if (check_impl(&r, FG_ATTN_FLASH, dt, FGT_DEV, dev_forward, dev_backward, label) != FGT_PASS) rc = FGT_FAIL;
    snprintf(label + strlen(label) - 5, 16, "naive");
    if (check_impl(&r, FG_ATTN_NAIVE, dt, FGT_DEV, dev_forward, dev_backward, label) != FGT_PASS) rc = FGT_FAIL;
    char *at = strstr(label, "] ");
    if (at) snprintf(at + 2, 32, "cpu flash");
    if (check_impl(&r, FG_ATTN_FLASH, dt, FG_CPU, cpu_forward, cpu_backward, label) != FGT_PASS) rc = FGT_FAIL;
    ref_free(&r);
    return rc;
}

static int run_all_shapes(fg_dtype dt) {
    int rc = FGT_PASS;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (run_shape(&shapes[i], dt, 100 * (uint64_t)i) != FGT_PASS) rc = FGT_FAIL;
    return rc;
}

static int run_variant_shapes(fg_dtype dt) {
    int rc = FGT_PASS;
    for (size_t i = 0; i < sizeof variant_shapes / sizeof variant_shapes[0]; i++)
        if (run_shape(&variant_shapes[i], dt, 7000 + 100 * (uint64_t)i) != FGT_PASS) rc = FGT_FAIL;
    return rc;
}

static int flash_naive_cpu_agree_float32(void) { return run_all_shapes(FG_F32); }
static int variants_flash_naive_cpu_agree_float32(void) { return run_variant_shapes(FG_F32); }
static int variants_flash_naive_cpu_agree_float64(void) { return run_variant_shapes(FG_F64); }
static int flash_naive_cpu_agree_float64(void) { return run_all_shapes(FG_F64); }
static int flash_naive_cpu_agree_large_causal_dropout(void) {
    return run_shape(fgt_quick ? &big_quick : &big, FG_F32, 4242);
}

/* Two flash backward runs on the same inputs: bit-identical O, dQ, dK, dV. With GQA each dK, dV
 * row sums several query heads, still in a fixed order. */
static int deterministic_run(const shape_case *s) {
    ref_case r;
    memset(&r, 0, sizeof r);
    fg_attn_opts op = shape_opts(s);
    op.seed = 31337;
    FGT_OK(fg_attn_problem_init(&r.pr, s->B, s->H, s->Nq, s->Nk, s->d, &op));
    const int64_t Hkv = s->Hkv ? s->Hkv : s->H;
    const int64_t qs[4] = {s->B, s->H, s->Nq, s->d}, ks[4] = {s->B, Hkv, s->Nk, s->d}, ls[3] = {s->B, s->H, s->Nq};
    const int64_t n = s->B * s->H * s->Nq * s->d, nk = s->B * Hkv * s->Nk * s->d;
    double *q = rand_f64(n, 1), *k = rand_f64(nk, 2), *v = rand_f64(nk, 3), *dout = rand_f64(n, 4);
    fg_tensor *tq = dev_tensor(FG_F32, FGT_DEV, 4, qs, q), *tk = dev_tensor(FG_F32, FGT_DEV, 4, ks, k);
    fg_tensor *tv = dev_tensor(FG_F32, FGT_DEV, 4, ks, v), *td = dev_tensor(FG_F32, FGT_DEV, 4, qs, dout);
    free(q), free(k), free(v), free(dout);
    FGT_NOTNULL(td);
    double *res[2][4] = {{0}};
    for (int run = 0; run < 2; run++) {
        fg_tensor *o = fg_empty(FG_F32, FGT_DEV, 4, qs), *lse = fg_empty(FG_F32, FGT_DEV, 3, ls);
        fg_tensor *dq = fg_zeros(FG_F32, FGT_DEV, 4, qs), *dk = fg_zeros(FG_F32, FGT_DEV, 4, ks);
        fg_tensor *dv = fg_zeros(FG_F32, FGT_DEV, 4, ks);
        FGT_NOTNULL(dv);
        FGT_OK(dev_forward(FG_ATTN_FLASH, FG_F32, fg_data(o), fg_data(lse), NULL, fg_data(tq), fg_data(tk), fg_data(tv),
                           &r.pr));
        FGT_OK(dev_backward(FG_ATTN_FLASH, FG_F32, fg_data(dq), fg_data(dk), fg_data(dv), fg_data(td), fg_data(tq),
                            fg_data(tk), fg_data(tv), fg_data(o), fg_data(lse), NULL, &r.pr));
        res[run][0] = fgt_host_f64(o), res[run][1] = fgt_host_f64(dq), res[run][2] = fgt_host_f64(dk);
        res[run][3] = fgt_host_f64(dv);
        fg_release(o), fg_release(lse), fg_release(dq), fg_release(dk), fg_release(dv);
    }
    fg_release(tq), fg_release(tk), fg_release(tv), fg_release(td);
    const char *nm[4] = {"O", "dQ", "dK", "dV"};
    const int64_t cnt[4] = {n, n, nk, nk};
    int rc = FGT_PASS;
    for (int i = 0; i < 4; i++) {
        int64_t bad = -1;
        for (int64_t e = 0; e < cnt[i] && bad < 0 && res[0][i] && res[1][i]; e++)
            if (memcmp(&res[0][i][e], &res[1][i][e], sizeof(double))) bad = e;
        if (!res[0][i] || !res[1][i] || bad >= 0) {
            printf("    %s differs between two identical runs (first at %lld: %.9g vs %.9g)\n", nm[i], (long long)bad,
                   bad >= 0 ? res[0][i][bad] : 0.0, bad >= 0 ? res[1][i][bad] : 0.0);
            rc = FGT_FAIL;
        }
        free(res[0][i]), free(res[1][i]);
    }
    return rc;
}

static int flash_backward_is_deterministic(void) { return deterministic_run(fgt_quick ? &big_quick : &big); }

static int flash_backward_is_deterministic_with_gqa_and_variants(void) {
    static const shape_case full =
        SHAPE(2, 8, 1000, 1000, 64, 1, 0.1, .Hkv = 2, .win = 1, .wl = 300, .wr = -1, .alibi = 1, .softcap = 5.0);
    static const shape_case quick =
        SHAPE(1, 4, 300, 300, 64, 1, 0.1, .Hkv = 2, .win = 1, .wl = 100, .wr = -1, .alibi = 1, .softcap = 5.0);
    return deterministic_run(fgt_quick ? &quick : &full);
}

/* fg_attention with autograd on cuda tensors (the registered backend) equals the CPU's */
static int autograd_attention_on_the_gpu_matches_the_cpu(void) {
    const int64_t qs[4] = {2, 2, 45, 24}, ks[4] = {2, 2, 61, 24};
    for (int impl = 0; impl < 2; impl++) {
        fg_tensor *hq = fgt_rand(FG_F64, FG_CPU, 4, qs, -1, 1, 1), *hk = fgt_rand(FG_F64, FG_CPU, 4, ks, -1, 1, 2);
        fg_tensor *hv = fgt_rand(FG_F64, FG_CPU, 4, ks, -1, 1, 3);
        fg_tensor *dq = fgt_to(hq, FGT_DEV), *dk = fgt_to(hk, FGT_DEV), *dv = fgt_to(hv, FGT_DEV);
        FGT_NOTNULL(dv);
        fg_tensor *leaves[6] = {hq, hk, hv, dq, dk, dv};
        for (int i = 0; i < 6; i++) fg_set_requires_grad(leaves[i], 1);
        fg_attn_opts op = fg_attn_defaults();
        op.impl = (fg_attn_impl)impl;
        op.causal = 1;
        op.dropout_p = 0.25;
        op.seed = 9;
        fg_tensor *lh = NULL, *ld = NULL;
        fg_tensor *oh = fg_attention(hq, hk, hv, &op, &lh), *od = fg_attention(dq, dk, dv, &op, &ld);
        FGT_NOTNULL(oh);
        FGT_NOTNULL(od);
        fg_tensor *R = fgt_rand(FG_F64, FG_CPU, 4, qs, -1, 1, 4), *Rd = fgt_to(R, FGT_DEV);
        FGT_OK(fg_backward(oh, R));
        FGT_OK(fg_backward(od, Rd));
        int rc = fgt_compare_tensors("fg_attention O", od, oh, 1e-10);
        if (rc == FGT_PASS) rc = fgt_compare_tensors("fg_attention lse", ld, lh, 1e-10);
        if (rc == FGT_PASS) rc = fgt_compare_tensors("fg_attention dq", dq->grad, hq->grad, 1e-10);
        if (rc == FGT_PASS) rc = fgt_compare_tensors("fg_attention dk", dk->grad, hk->grad, 1e-10);
        if (rc == FGT_PASS) rc = fgt_compare_tensors("fg_attention dv", dv->grad, hv->grad, 1e-10);
        for (int i = 0; i < 6; i++) fg_release(leaves[i]);
        fg_release(oh), fg_release(od), fg_release(lh), fg_release(ld), fg_release(R), fg_release(Rd);
        if (rc != FGT_PASS) {
            printf("    (impl %s)\n", fg_attn_impl_name((fg_attn_impl)impl));
            return rc;
        }
    }
    return FGT_PASS;
}

/* fg_attention with every built-in variant at once on cuda tensors equals the CPU's: GQA (the
 * autograd node's dK, dV have H_kv heads), window, ALiBi with user slopes (which the node copies and
 * the backend uploads again for the backward), softcap, causal, dropout; both implementations */
static int autograd_attention_variants_on_the_gpu_match_the_cpu(void) {
    const int64_t qs[4] = {2, 4, 29, 24}, ks[4] = {2, 2, 41, 24};
    double slopes[4] = {0.25, 0.0625, 1.5, 0.125};
    for (int impl = 0; impl < 2; impl++) {
        fg_tensor *hq = fgt_rand(FG_F64, FG_CPU, 4, qs, -1, 1, 11), *hk = fgt_rand(FG_F64, FG_CPU, 4, ks, -1, 1, 12);
        fg_tensor *hv = fgt_rand(FG_F64, FG_CPU, 4, ks, -1, 1, 13);
        fg_tensor *dq = fgt_to(hq, FGT_DEV), *dk = fgt_to(hk, FGT_DEV), *dv = fgt_to(hv, FGT_DEV);
        FGT_NOTNULL(dv);
        fg_tensor *leaves[6] = {hq, hk, hv, dq, dk, dv};
        for (int i = 0; i < 6; i++) fg_set_requires_grad(leaves[i], 1);
        fg_attn_opts op = fg_attn_defaults();
        op.impl = (fg_attn_impl)impl;
        op.causal = 1;
        op.dropout_p = 0.2;
        op.seed = 77;
        op.scale = 0.9;
        op.variant = (fg_attn_variant){.n_kv_heads = 2,
                                       .window = 1,
                                       .window_left = 6,
                                       .window_right = 3,
                                       .alibi = 1,
                                       .alibi_slopes = slopes,
                                       .softcap = 2.5};
        fg_tensor *lh = NULL, *ld = NULL;
        fg_tensor *oh = fg_attention(hq, hk, hv, &op, &lh), *od = fg_attention(dq, dk, dv, &op, &ld);
        FGT_NOTNULL(oh);
        FGT_NOTNULL(od);
        slopes[0] = 99; /* the node holds its own copy: changing the caller's array now must not matter */
        fg_tensor *R = fgt_rand(FG_F64, FG_CPU, 4, qs, -1, 1, 14), *Rd = fgt_to(R, FGT_DEV);
        FGT_OK(fg_backward(oh, R));
        FGT_OK(fg_backward(od, Rd));
        slopes[0] = 0.25;
        int rc = fgt_compare_tensors("fg_attention O", od, oh, 1e-10);
        if (rc == FGT_PASS) rc = fgt_compare_tensors("fg_attention lse", ld, lh, 1e-10);
        if (rc == FGT_PASS) rc = fgt_compare_tensors("fg_attention dq", dq->grad, hq->grad, 1e-10);
        if (rc == FGT_PASS) rc = fgt_compare_tensors("fg_attention dk (B, H_kv, Nk, d)", dk->grad, hk->grad, 1e-10);
        if (rc == FGT_PASS) rc = fgt_compare_tensors("fg_attention dv (B, H_kv, Nk, d)", dv->grad, hv->grad, 1e-10);
        for (int i = 0; i < 6; i++) fg_release(leaves[i]);
        fg_release(oh), fg_release(od), fg_release(lh), fg_release(ld), fg_release(R), fg_release(Rd);
        if (rc != FGT_PASS) {
            printf("    (impl %s)\n", fg_attn_impl_name((fg_attn_impl)impl));
            return rc;
        }
    }
    return FGT_PASS;
}

static int keep_even_keys(int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)b, (void)h, (void)i, (void)user;
    return j % 2 == 0;
}
static double halve(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)b, (void)h, (void)i, (void)j, (void)user;
    return s / 2;
}
static double halve_grad(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *user) {
    (void)s, (void)b, (void)h, (void)i, (void)j, (void)user;
    return 0.5;
}

/* User callbacks run on the CPU only: fg_attention on cuda tensors and the backend itself refuse
 * them with FG_ERR_DEVICE and a message that says so (nothing is computed, nothing leaks) */
static int user_callbacks_on_the_gpu_are_a_clear_error(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    const int64_t sh[4] = {1, 2, 9, 8}, ls[3] = {1, 2, 9};
    fg_tensor *q = fgt_rand(FG_F32, FG_CUDA, 4, sh, -1, 1, 5);
    FGT_NOTNULL(q);
    const size_t live = fgt_live_bytes();
    const fg_attn_custom customs[2] = {{.mask = keep_even_keys}, {.score_mod = halve, .score_mod_grad = halve_grad}};
    for (int c = 0; c < 2; c++)
        for (int impl = 0; impl < 2; impl++) {
            fg_attn_opts op = fg_attn_defaults();
            op.impl = (fg_attn_impl)impl;
            op.custom = customs[c];
            fg_clear_error();
            fg_tensor *o = fg_attention(q, q, q, &op, NULL);
            const fg_status st = fg_last_status();
            fg_release(o);
            FGT_CHECK(o == NULL && st == FG_ERR_DEVICE, "fg_attention with %s on cuda (%s): result %p, status %d (%s)",
                      c ? "score_mod" : "mask", fg_attn_impl_name((fg_attn_impl)impl), (void *)o, (int)st,
                      fg_last_error());
            FGT_CHECK(strstr(fg_last_error(), "CPU") != NULL, "the message does not say callbacks are CPU-only: %s",
                      fg_last_error());
            /* the backend, called directly */
            fg_attn_problem pr;
            FGT_OK(fg_attn_problem_init(&pr, 1, 2, 9, 8, 8, &op));
            fg_tensor *out = fg_zeros(FG_F32, FG_CUDA, 4, sh), *lse = fg_zeros(FG_F32, FG_CUDA, 3, ls);
            FGT_NOTNULL(lse);
            fg_status st2 = fg_cu_attention_forward((fg_attn_impl)impl, FG_F32, fg_data(out), fg_data(lse), NULL,
                                                    fg_data(q), fg_data(q), fg_data(q), &pr);
            fg_release(out), fg_release(lse);
            FGT_CHECK(st2 == FG_ERR_DEVICE && strstr(fg_last_error(), "CPU"), "backend: status %d (%s)", (int)st2,
                      fg_last_error());
        }
    FGT_CHECK(fgt_live_bytes() == live, "device bytes live went from %zu to %zu", live, fgt_live_bytes());
    fg_release(q);
    return FGT_PASS;
}

/* ---- the commands with --device cuda ---- */

/* Run a command with its stdout sent to /dev/null (the tables would drown the test log). */
static int quiet_cmd(int (*cmd)(int, char **), int argc, char **argv) {
    fflush(stdout);
    int saved = dup(1), null = open("/dev/null", O_WRONLY);
    if (saved >= 0 && null >= 0) dup2(null, 1);
    int rc = cmd(argc, argv);
    fflush(stdout);
    if (saved >= 0) dup2(saved, 1);
    if (saved >= 0) close(saved);
    if (null >= 0) close(null);
    return rc;
}

static const char *out_names[5] = {"o", "lse", "dq", "dk", "dv"};

static void remove_run_dir(const char *dir) {
    char p[512];
    const char *in[4] = {"q", "k", "v", "do"};
    for (int sub = 0; sub < 2; sub++)
        for (int i = 0; i < 5; i++) {
            snprintf(p, sizeof p, "%s/%s/%s.npy", dir, sub ? "cpu" : "gpu", out_names[i]);
            unlink(p);
        }
    for (int sub = 0; sub < 2; sub++) {
        snprintf(p, sizeof p, "%s/%s", dir, sub ? "cpu" : "gpu");
        rmdir(p);
    }
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s.npy", dir, in[i]);
        unlink(p);
    }
    rmdir(dir);
}

/* `flashgrad attention ... --device cuda` writes the files `--device cpu` writes, in the inputs'
 * dtype, with every variant at once (GQA, window, ALiBi, softcap, causal, dropout), for float64 and
 * float32 inputs and both implementations */
static int attention_command_on_the_gpu_matches_the_cpu(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    char dir[] = "/tmp/fg_cuda_cli.XXXXXX";
    FGT_CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    const int64_t qs[4] = {1, 4, 21, 16}, ks[4] = {1, 2, 30, 16};
    int rc = FGT_PASS;
    for (int dti = 0; dti < 2 && rc == FGT_PASS; dti++) {
        const fg_dtype dt = dti ? FG_F32 : FG_F64;
        const char *in_names[4] = {"q", "k", "v", "do"};
        const int64_t *shapes4[4] = {qs, ks, ks, qs};
        char paths[4][512];
        for (int i = 0; i < 4; i++) {
            fg_tensor *t = fgt_rand(dt, FG_CPU, 4, shapes4[i], -1, 1, 40 + (uint64_t)i);
            snprintf(paths[i], sizeof paths[i], "%s/%s.npy", dir, in_names[i]);
            FGT_NOTNULL(t);
            FGT_OK(fg_npy_save(paths[i], t));
            fg_release(t);
        }
        const char *impl = dti ? "naive" : "flash";
        for (int sub = 0; sub < 2; sub++) {
            char out[520];
            snprintf(out, sizeof out, "%s/%s", dir, sub ? "cpu" : "gpu");
            char *argv[] = {"attention",  "--q",       paths[0],    "--k",      paths[1],
                            "--v",        paths[2],    "--do",      paths[3],   "--impl",
                            (char *)impl, "--causal",  "--dropout", "0.1",      "--seed",
                            "5",          "--gqa",     "2",         "--window", "4,2",
                            "--alibi",    "--softcap", "3",         "--device", sub ? "cpu" : "cuda",
                            "--out",      out};
            const int argc = (int)(sizeof argv / sizeof argv[0]);
            const int r = quiet_cmd(fg_cmd_attention, argc, argv);
            FGT_CHECK(r == 0, "flashgrad attention --device %s (%s, %s) exited %d", sub ? "cpu" : "cuda",
                      fg_dtype_name(dt), impl, r);
        }
        for (int i = 0; i < 5 && rc == FGT_PASS; i++) {
            char pg[520], pc[520], what[96];
            snprintf(pg, sizeof pg, "%s/gpu/%s.npy", dir, out_names[i]);
            snprintf(pc, sizeof pc, "%s/cpu/%s.npy", dir, out_names[i]);
            fg_tensor *g = fg_npy_load(pg), *c = fg_npy_load(pc);
            FGT_NOTNULL(g);
            FGT_NOTNULL(c);
            FGT_CHECK(g->dtype == dt, "%s.npy is %s, the inputs are %s", out_names[i], fg_dtype_name(g->dtype),
                      fg_dtype_name(dt));
            snprintf(what, sizeof what, "%s.npy (%s, %s)", out_names[i], fg_dtype_name(dt), impl);
            rc = fgt_compare_tensors(what, g, c, dt == FG_F64 ? 1e-10 : 1e-4);
            fg_release(g);
            fg_release(c);
        }
    }
    remove_run_dir(dir);
    return rc;
}

/* `flashgrad gradcheck attention --device cuda` passes, plain and with every variant; with a
 * custom (callback) variant it is a usage error (2) */
static int gradcheck_command_on_the_gpu_passes(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    char *plain[] = {"gradcheck", "attention", "--device", "cuda",   "--b", "1",   "--h",
                     "2",         "--nq",      "6",        "--nk",   "9",   "--d", "4",
                     "--causal",  "--dropout", "0.2",      "--seed", "3"};
    char *all[] = {"gradcheck", "attention", "--device", "cuda",     "--b", "2",       "--h",       "4",
                   "--nq",      "7",         "--nk",     "5",        "--d", "3",       "--causal",  "--dropout",
                   "0.1",       "--gqa",     "2",        "--window", "2,1", "--alibi", "--softcap", "1.5"};
    char *custom[] = {"gradcheck", "attention", "--device", "cuda", "--custom", "doc-mask"};
    int r = quiet_cmd(fg_cmd_gradcheck, (int)(sizeof plain / sizeof plain[0]), plain);
    FGT_CHECK(r == 0, "gradcheck attention --device cuda (plain) exited %d", r);
    r = quiet_cmd(fg_cmd_gradcheck, (int)(sizeof all / sizeof all[0]), all);
    FGT_CHECK(r == 0, "gradcheck attention --device cuda with every variant exited %d", r);
    r = quiet_cmd(fg_cmd_gradcheck, (int)(sizeof custom / sizeof custom[0]), custom);
    FGT_CHECK(r == 2, "gradcheck attention --device cuda --custom doc-mask exited %d, expected 2", r);
    return FGT_PASS;
}

/* A NaN in q (every score of that row NaN) or in k (one score of every row that sees the key): the
 * GPU's O and lse are NaN in exactly the CPU's rows (ops/attention.h: NaN is never "no key"), and
 * equal elsewhere; naive and flash, plain and with softcap (the MODS kernels), causal or not. */
static int nan_rows_on_the_gpu_match_the_cpu(void) {
    const int64_t qs[4] = {1, 2, 70, 16}, ks[4] = {1, 2, 75, 16};
    for (int dt = 0; dt < 2; dt++)
        for (int impl = 0; impl < 2; impl++)
            for (int var = 0; var < 4; var++) {
                const fg_dtype t = dt ? FG_F64 : FG_F32;
                const int which = var & 1, causal = (var >> 1) & 1;
                fg_tensor *hq = fgt_rand(t, FG_CPU, 4, qs, -1, 1, 31), *hk = fgt_rand(t, FG_CPU, 4, ks, -1, 1, 32);
                fg_tensor *hv = fgt_rand(t, FG_CPU, 4, ks, -1, 1, 33);
                FGT_NOTNULL(hv);
                if (which == 0)
                    fg_set(hq, (1 * 70 + 5) * 16 + 3, NAN); /* q[0, 1, 5, 3] */
                else
                    fg_set(hk, (0 * 75 + 40) * 16 + 2, NAN); /* k[0, 0, 40, 2] */
                fg_tensor *dq = fgt_to(hq, FGT_DEV), *dk = fgt_to(hk, FGT_DEV), *dv = fgt_to(hv, FGT_DEV);
                FGT_NOTNULL(dv);
                fg_attn_opts op = fg_attn_defaults();
                op.impl = (fg_attn_impl)impl;
                op.causal = causal;
                if (impl) op.variant.softcap = 4.0; /* flash: the MODS instance; naive: fa_modify in its softmax */
                fg_tensor *lh = NULL, *ld = NULL;
                fg_tensor *oh = fg_attention(hq, hk, hv, &op, &lh), *od = fg_attention(dq, dk, dv, &op, &ld);
                FGT_NOTNULL(oh);
                FGT_NOTNULL(od);
                int64_t n_nan = 0;
                for (int64_t r = 0; r < fg_numel(lh); r++) n_nan += isnan(fg_get(lh, r));
                char what[96], what_l[96];
                snprintf(what, sizeof what, "NaN in %s: O (%s, %s, causal %d)", which ? "k" : "q", fg_dtype_name(t),
                         fg_attn_impl_name((fg_attn_impl)impl), causal);
                snprintf(what_l, sizeof what_l, "NaN in %s: lse (%s, %s, causal %d)", which ? "k" : "q",
                         fg_dtype_name(t), fg_attn_impl_name((fg_attn_impl)impl), causal);
                int rc = n_nan > 0 ? fgt_compare_tensors(what, od, oh, fgt_tol(t)) : FGT_FAIL;
                if (n_nan == 0) printf("    %s: the CPU has no NaN row\n", what);
                if (rc == FGT_PASS) rc = fgt_compare_tensors(what_l, ld, lh, fgt_tol(t));
                fg_release(hq), fg_release(hk), fg_release(hv), fg_release(dq), fg_release(dk), fg_release(dv);
                fg_release(oh), fg_release(od), fg_release(lh), fg_release(ld);
                if (rc != FGT_PASS) return rc;
            }
    return FGT_PASS;
}

static int unsupported_head_dim_is_an_error(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    fg_attn_problem pr;
    FGT_OK(fg_attn_problem_init(&pr, 1, 1, 4, 4, 300, NULL));
    const int64_t sh[4] = {1, 1, 4, 300}, ls[3] = {1, 1, 4};
    fg_tensor *q = fg_zeros(FG_F32, FG_CUDA, 4, sh), *o = fg_zeros(FG_F32, FG_CUDA, 4, sh),
              *l = fg_zeros(FG_F32, FG_CUDA, 3, ls);
    FGT_NOTNULL(l);
    fg_status st = fg_cu_attention_forward(FG_ATTN_FLASH, FG_F32, fg_data(o), fg_data(l), NULL, fg_data(q), fg_data(q),
                                           fg_data(q), &pr);
    fg_release(q), fg_release(o), fg_release(l);
    FGT_CHECK(st == FG_ERR_ARG, "d = 300 gave status %d (%s)", (int)st, fg_last_error());
    FGT_CHECK(strstr(fg_last_error(), "256") != NULL, "message does not name the limit: %s", fg_last_error());
    return FGT_PASS;
}

const fgt_case fgt_attention_cases[] = {
    {"flash_naive_cpu_agree_float32", flash_naive_cpu_agree_float32},
    {"flash_naive_cpu_agree_float64", flash_naive_cpu_agree_float64},
    {"flash_naive_cpu_agree_large_causal_dropout", flash_naive_cpu_agree_large_causal_dropout},
    {"variants_flash_naive_cpu_agree_float32", variants_flash_naive_cpu_agree_float32},
    {"variants_flash_naive_cpu_agree_float64", variants_flash_naive_cpu_agree_float64},
    {"flash_backward_is_deterministic", flash_backward_is_deterministic},
    {"flash_backward_is_deterministic_with_gqa_and_variants", flash_backward_is_deterministic_with_gqa_and_variants},
    {"autograd_attention_on_the_gpu_matches_the_cpu", autograd_attention_on_the_gpu_matches_the_cpu},
    {"autograd_attention_variants_on_the_gpu_match_the_cpu", autograd_attention_variants_on_the_gpu_match_the_cpu},
    {"user_callbacks_on_the_gpu_are_a_clear_error", user_callbacks_on_the_gpu_are_a_clear_error},
    {"attention_command_on_the_gpu_matches_the_cpu", attention_command_on_the_gpu_matches_the_cpu},
    {"gradcheck_command_on_the_gpu_passes", gradcheck_command_on_the_gpu_passes},
    {"unsupported_head_dim_is_an_error", unsupported_head_dim_is_an_error},
    {"nan_rows_on_the_gpu_match_the_cpu", nan_rows_on_the_gpu_match_the_cpu},
    {NULL, NULL},
};
