/* test_attention.c — GPU attention: flash against naive against the CPU, and determinism.
 *
 * For each shape (odd sizes, Nq ≠ Nk both ways, rows that see no key, Nk = 0, head dims from 8
 * to 256), causal and not, with and without dropout, float32 and float64:
 *   reference  = the CPU naive kernel in float64 on the same (dtype-rounded) inputs
 *   GPU flash, GPU naive and the CPU flash kernel (in the test dtype) must all match it (flash in
 *   float32 with the lse_lo buffer, as fg_attention runs it; in float64 without):
 *   O and lse after the forward (outputs poisoned with NaN first, so an unwritten element fails),
 *   dQ, dK, dV after the backward (gradient buffers pre-filled with random values, so the test
 *   also checks that the backward ADDS).
 * Then: two flash backward runs give bit-identical gradients; fg_attention with autograd on cuda
 * tensors matches the CPU's; an unsupported head dim is a clean error.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "cuda/cuda_ops.h"
#include "ops/attention.h"
#include "tensor/philox.h"
#include "tests/cuda/cuda_test.h"

typedef struct {
    int64_t B, H, Nq, Nk, d;
    int causal;
    double p;
} shape_case;

static const shape_case shapes[] = {
    {1, 1, 1, 1, 8, 0, 0},     {2, 3, 17, 17, 16, 0, 0},   {2, 3, 17, 17, 16, 1, 0},    {1, 2, 65, 130, 32, 1, 0},
    {1, 2, 130, 65, 32, 1, 0}, {1, 1, 100, 37, 40, 0, 0.2}, {2, 2, 77, 77, 64, 1, 0.1},  {1, 2, 129, 200, 100, 0, 0},
    {1, 1, 64, 64, 128, 1, 0}, {1, 1, 33, 70, 256, 1, 0.3}, {1, 1, 200, 1, 24, 1, 0},    {1, 2, 7, 0, 16, 0, 0},
    {1, 1, 63, 65, 64, 0, 0.5}, {2, 1, 96, 96, 128, 0, 0.1},
};
static const shape_case big = {2, 4, 1000, 1000, 64, 1, 0.1};
static const shape_case big_quick = {1, 2, 300, 300, 64, 1, 0.1};

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
    if (FGT_DEV == FG_CUDA) return fg_cuda_attention_forward(impl, dt, o, lse, p, q, k, v, pr);
    if (impl == FG_ATTN_NAIVE)
        return dt == FG_F32 ? fg_attn_naive_forward_f32(o, lse, p, q, k, v, pr) : fg_attn_naive_forward_f64(o, lse, p, q, k, v, pr);
    /* flash: p is lse_lo (or NULL) */
    return dt == FG_F32 ? fg_attn_flash_forward_lo_f32(o, lse, p, q, k, v, pr)
                        : fg_attn_flash_forward_lo_f64(o, lse, p, q, k, v, pr);
}
static fg_status dev_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv, const void *dout,
                              const void *q, const void *k, const void *v, const void *o, const void *lse,
                              const void *p, const fg_attn_problem *pr) {
    if (FGT_DEV == FG_CUDA) return fg_cuda_attention_backward(impl, dt, dq, dk, dv, dout, q, k, v, o, lse, p, pr);
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
    double *o, *lse, *dq, *dk, *dv;            /* float64 reference; grads include g0 */
} ref_case;

static void ref_free(ref_case *r) {
    double *all[] = {r->q, r->k, r->v, r->dout, r->g0q, r->g0k, r->g0v, r->o, r->lse, r->dq, r->dk, r->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    memset(r, 0, sizeof *r);
}

static int ref_make(ref_case *r, const shape_case *s, fg_dtype dt, uint64_t seed) {
    memset(r, 0, sizeof *r);
    fg_attn_opts op = fg_attn_defaults();
    op.causal = s->causal;
    op.dropout_p = s->p;
    op.seed = 0xfeedULL + seed;
    if (fg_attn_problem_init(&r->pr, s->B, s->H, s->Nq, s->Nk, s->d, &op) != FG_OK) {
        printf("    problem init: %s\n", fg_last_error());
        return FGT_FAIL;
    }
    r->nq = s->B * s->H * s->Nq * s->d;
    r->nk = s->B * s->H * s->Nk * s->d;
    r->nl = s->B * s->H * s->Nq;
    r->np = s->B * s->H * s->Nq * s->Nk;
    const int64_t qs[4] = {s->B, s->H, s->Nq, s->d}, ks[4] = {s->B, s->H, s->Nk, s->d}, ls[3] = {s->B, s->H, s->Nq};
    const int64_t ps[4] = {s->B, s->H, s->Nq, s->Nk};
    memcpy(r->qs, qs, sizeof qs), memcpy(r->ks, ks, sizeof ks), memcpy(r->ls, ls, sizeof ls), memcpy(r->ps, ps, sizeof ps);
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
    fg_tensor *p = impl == FG_ATTN_NAIVE ? nan_tensor(dt, dev, 4, r->ps) : dt == FG_F32 ? nan_tensor(dt, dev, 3, r->ls) : NULL;
    double *ho = NULL, *hl = NULL, *hq = NULL, *hk = NULL, *hv = NULL;
    if (!q || !k || !v || !dout || !dq || !dk || !dv || !o || !lse || ((impl == FG_ATTN_NAIVE || dt == FG_F32) && !p)) {
        printf("    %s: allocation failed: %s\n", label, fg_last_error());
        goto done;
    }
    if (fwd(impl, dt, fg_data(o), fg_data(lse), p ? fg_data(p) : NULL, fg_data(q), fg_data(k), fg_data(v), &r->pr) != FG_OK) {
        printf("    %s forward: %s\n", label, fg_last_error());
        goto done;
    }
    if (bwd(impl, dt, fg_data(dq), fg_data(dk), fg_data(dv), fg_data(dout), fg_data(q), fg_data(k), fg_data(v), fg_data(o),
            fg_data(lse), p ? fg_data(p) : NULL, &r->pr) != FG_OK) {
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
    const char *dn = fg_dtype_name(dt);
    snprintf(label, sizeof label, "[B=%lld H=%lld Nq=%lld Nk=%lld d=%lld causal=%d p=%g %s] %s flash", (long long)s->B,
             (long long)s->H, (long long)s->Nq, (long long)s->Nk, (long long)s->d, s->causal, s->p, dn,
             fg_device_name(FGT_DEV));
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

static int flash_naive_cpu_agree_float32(void) { return run_all_shapes(FG_F32); }
static int flash_naive_cpu_agree_float64(void) { return run_all_shapes(FG_F64); }
static int flash_naive_cpu_agree_large_causal_dropout(void) {
    return run_shape(fgt_quick ? &big_quick : &big, FG_F32, 4242);
}

/* Two flash backward runs on the same inputs: bit-identical dQ, dK, dV (and forward). */
static int flash_backward_is_deterministic(void) {
    const shape_case *s = fgt_quick ? &big_quick : &big;
    ref_case r;
    memset(&r, 0, sizeof r);
    fg_attn_opts op = fg_attn_defaults();
    op.causal = 1;
    op.dropout_p = 0.1;
    op.seed = 31337;
    FGT_OK(fg_attn_problem_init(&r.pr, s->B, s->H, s->Nq, s->Nk, s->d, &op));
    const int64_t qs[4] = {s->B, s->H, s->Nq, s->d}, ls[3] = {s->B, s->H, s->Nq};
    const int64_t n = s->B * s->H * s->Nq * s->d;
    double *q = rand_f64(n, 1), *k = rand_f64(n, 2), *v = rand_f64(n, 3), *dout = rand_f64(n, 4);
    fg_tensor *tq = dev_tensor(FG_F32, FGT_DEV, 4, qs, q), *tk = dev_tensor(FG_F32, FGT_DEV, 4, qs, k);
    fg_tensor *tv = dev_tensor(FG_F32, FGT_DEV, 4, qs, v), *td = dev_tensor(FG_F32, FGT_DEV, 4, qs, dout);
    free(q), free(k), free(v), free(dout);
    FGT_NOTNULL(td);
    double *res[2][4] = {{0}};
    for (int run = 0; run < 2; run++) {
        fg_tensor *o = fg_empty(FG_F32, FGT_DEV, 4, qs), *lse = fg_empty(FG_F32, FGT_DEV, 3, ls);
        fg_tensor *dq = fg_zeros(FG_F32, FGT_DEV, 4, qs), *dk = fg_zeros(FG_F32, FGT_DEV, 4, qs);
        fg_tensor *dv = fg_zeros(FG_F32, FGT_DEV, 4, qs);
        FGT_NOTNULL(dv);
        FGT_OK(dev_forward(FG_ATTN_FLASH, FG_F32, fg_data(o), fg_data(lse), NULL, fg_data(tq), fg_data(tk), fg_data(tv), &r.pr));
        FGT_OK(dev_backward(FG_ATTN_FLASH, FG_F32, fg_data(dq), fg_data(dk), fg_data(dv), fg_data(td), fg_data(tq),
                            fg_data(tk), fg_data(tv), fg_data(o), fg_data(lse), NULL, &r.pr));
        res[run][0] = fgt_host_f64(o), res[run][1] = fgt_host_f64(dq), res[run][2] = fgt_host_f64(dk);
        res[run][3] = fgt_host_f64(dv);
        fg_release(o), fg_release(lse), fg_release(dq), fg_release(dk), fg_release(dv);
    }
    fg_release(tq), fg_release(tk), fg_release(tv), fg_release(td);
    const char *nm[4] = {"O", "dQ", "dK", "dV"};
    int rc = FGT_PASS;
    for (int i = 0; i < 4; i++) {
        int64_t bad = -1;
        for (int64_t e = 0; e < n && bad < 0 && res[0][i] && res[1][i]; e++)
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

static int unsupported_head_dim_is_an_error(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    fg_attn_problem pr;
    FGT_OK(fg_attn_problem_init(&pr, 1, 1, 4, 4, 300, NULL));
    const int64_t sh[4] = {1, 1, 4, 300}, ls[3] = {1, 1, 4};
    fg_tensor *q = fg_zeros(FG_F32, FG_CUDA, 4, sh), *o = fg_zeros(FG_F32, FG_CUDA, 4, sh), *l = fg_zeros(FG_F32, FG_CUDA, 3, ls);
    FGT_NOTNULL(l);
    fg_status st = fg_cuda_attention_forward(FG_ATTN_FLASH, FG_F32, fg_data(o), fg_data(l), NULL, fg_data(q), fg_data(q),
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
    {"flash_backward_is_deterministic", flash_backward_is_deterministic},
    {"autograd_attention_on_the_gpu_matches_the_cpu", autograd_attention_on_the_gpu_matches_the_cpu},
    {"unsupported_head_dim_is_an_error", unsupported_head_dim_is_an_error},
    {NULL, NULL},
};
