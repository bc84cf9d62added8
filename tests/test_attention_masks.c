/* test_attention_masks.c — masks held in memory (fg_attn_tensor_mask: boolean, float32 and float64
 * additive) and block masks (fg_attn_block_mask_create on a callback) that differ per batch and per
 * head, over several flash tiles in both directions (Nq and Nk larger than the tiles, not multiples
 * of them), full and broadcast along the batch (stride 0, B = 1) or the head axis in turn; forward
 * (O, lse) and backward (dQ, dK, dV) against a scalar long double reference written here, which
 * evaluates the mask's closed form itself and never reads the mask memory through flashgrad. A
 * stride or a broadcast applied to the wrong axis reads another (b, h)'s mask and fails. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "ops/attention.h"
#include "tests/common.h"

static void leak_check(void) {
    cr_expect_eq(fg_nodes_alive(), 0, "%lld autograd nodes still alive", (long long)fg_nodes_alive());
}
TestSuite(attention_masks, .fini = leak_check, .timeout = 300);

/* Which axes the mask depends on: a broadcast axis is one it must not depend on. */
typedef struct {
    int use_b, use_h;
    int64_t tq, tk; /* the tiles the pattern is laid on (the flash tiles of the case) */
} pattern;

/* Visibility: per (query tile, key tile) a kind that depends on b and h (whole tiles hidden or
 * visible for some (b, h) and cut through for others), and key (i + b) % 5 always visible so that
 * no row is empty. */
static int pat_visible(const pattern *p, int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t bb = p->use_b ? b : 0, hh = p->use_h ? h : 0;
    if (j == (i + bb) % 5) return 1;
    switch ((i / p->tq * 7 + j / p->tk * 3 + 2 * bb + 5 * hh) % 4) {
    case 0:
        return 0;
    case 1:
        return 1;
    case 2:
        return (i + j + hh) % 3 != 0;
    default:
        return (i * j + bb) % 4 != 1;
    }
}
/* The additive bias where visible (−inf elsewhere). */
static double pat_bias(const pattern *p, int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t bb = p->use_b ? b : 0, hh = p->use_h ? h : 0;
    if (!pat_visible(p, b, h, i, j)) return -INFINITY;
    return 0.7 * sin(0.3 * (double)i + 0.7 * (double)j + 1.1 * (double)bb + 0.5 * (double)hh);
}
static int cb_visible(int64_t b, int64_t h, int64_t i, int64_t j, void *u) { return pat_visible(u, b, h, i, j); }

/* O, lse and the gradients for dO, one scalar at a time in long double: s = scale·q·k (+ bias), the
 * row softmax P over visible keys, O = P·V; dV = Pᵀ·dO, dP = dO·Vᵀ, dS = P ∘ (dP − rowsum(P ∘ dP)),
 * dQ = scale·dS·K, dK = scale·dSᵀ·Q. All arrays (B, H, N, d) C order. */
typedef struct {
    int64_t B, H, Nq, Nk, d;
    int kind; /* FG_ATTN_TMASK_*, or 0: the callback (boolean) */
    pattern pat;
    fg_dtype dt; /* of q, k, v (the reference reads their values exactly) */
} problem;

static void reference(const problem *pr, const double *q, const double *k, const double *v, const double *dout,
                      double *o, double *lse, double *dq, double *dk, double *dv) {
    const int64_t Nq = pr->Nq, Nk = pr->Nk, d = pr->d;
    const long double scale = 1.0L / sqrtl((long double)d);
    long double *P = malloc(sizeof *P * (size_t)Nk), *dP = malloc(sizeof *dP * (size_t)Nk);
    memset(dq, 0, sizeof *dq * (size_t)(pr->B * pr->H * Nq * d));
    memset(dk, 0, sizeof *dk * (size_t)(pr->B * pr->H * Nk * d));
    memset(dv, 0, sizeof *dv * (size_t)(pr->B * pr->H * Nk * d));
    for (int64_t b = 0; b < pr->B; b++)
        for (int64_t h = 0; h < pr->H; h++) {
            const int64_t bh = b * pr->H + h;
            const double *Q = q + bh * Nq * d, *K = k + bh * Nk * d, *V = v + bh * Nk * d, *dO = dout + bh * Nq * d;
            double *dQ = dq + bh * Nq * d, *dK = dk + bh * Nk * d, *dV = dv + bh * Nk * d;
            for (int64_t i = 0; i < Nq; i++) {
                long double mx = -INFINITY;
                for (int64_t j = 0; j < Nk; j++) {
                    long double s = -INFINITY;
                    if (pat_visible(&pr->pat, b, h, i, j)) {
                        s = 0;
                        for (int64_t c = 0; c < d; c++) s += (long double)Q[i * d + c] * K[j * d + c];
                        s *= scale;
                        double bias = pat_bias(&pr->pat, b, h, i, j);
                        if (pr->kind == FG_ATTN_TMASK_F32) s += (float)bias;
                        if (pr->kind == FG_ATTN_TMASK_F64) s += bias;
                    }
                    P[j] = s;
                    if (s > mx) mx = s;
                }
                long double sum = 0;
                for (int64_t j = 0; j < Nk; j++) sum += P[j] == -INFINITY ? 0 : expl(P[j] - mx);
                lse[bh * Nq + i] = (double)(mx + logl(sum));
                for (int64_t j = 0; j < Nk; j++) P[j] = P[j] == -INFINITY ? 0 : expl(P[j] - mx) / sum;
                long double D = 0;
                for (int64_t j = 0; j < Nk; j++) {
                    dP[j] = 0;
                    for (int64_t c = 0; c < d; c++) dP[j] += (long double)dO[i * d + c] * V[j * d + c];
                    D += P[j] * dP[j];
                }
                for (int64_t c = 0; c < d; c++) {
                    long double acc = 0;
                    for (int64_t j = 0; j < Nk; j++) acc += P[j] * V[j * d + c];
                    o[(bh * Nq + i) * d + c] = (double)acc;
                }
                for (int64_t j = 0; j < Nk; j++) {
                    const long double dS = P[j] * (dP[j] - D);
                    for (int64_t c = 0; c < d; c++) {
                        dV[j * d + c] += (double)(P[j] * dO[i * d + c]);
                        dQ[i * d + c] += (double)(scale * dS * K[j * d + c]);
                        dK[j * d + c] += (double)(scale * dS * Q[i * d + c]);
                    }
                }
            }
        }
    free(P);
    free(dP);
}

/* The mask memory, laid out here: (Bm, Hm, Nq, Nk) with Bm = 1 when the pattern ignores b (stride
 * 0), Hm = 1 when it ignores h. */
static void *make_tensor_mask(const problem *pr, fg_attn_tensor_mask *m) {
    const int64_t Bm = pr->pat.use_b ? pr->B : 1, Hm = pr->pat.use_h ? pr->H : 1, Nq = pr->Nq, Nk = pr->Nk;
    const size_t es = pr->kind == FG_ATTN_TMASK_BOOL ? 1 : pr->kind == FG_ATTN_TMASK_F32 ? 4 : 8;
    unsigned char *data = malloc(es * (size_t)(Bm * Hm * Nq * Nk));
    for (int64_t b = 0; b < Bm; b++)
        for (int64_t h = 0; h < Hm; h++)
            for (int64_t i = 0; i < Nq; i++)
                for (int64_t j = 0; j < Nk; j++) {
                    const size_t at = (size_t)(((b * Hm + h) * Nq + i) * Nk + j);
                    if (pr->kind == FG_ATTN_TMASK_BOOL)
                        data[at] = (unsigned char)(pat_visible(&pr->pat, b, h, i, j) ? 1 + (i + j) % 7 : 0);
                    else if (pr->kind == FG_ATTN_TMASK_F32)
                        ((float *)data)[at] = (float)pat_bias(&pr->pat, b, h, i, j);
                    else
                        ((double *)data)[at] = pat_bias(&pr->pat, b, h, i, j);
                }
    *m = (fg_attn_tensor_mask){.data = data,
                               .kind = pr->kind,
                               .stride = {pr->pat.use_b ? Hm * Nq * Nk : 0, pr->pat.use_h ? Nq * Nk : 0, Nk, 1}};
    return data;
}

static double max_abs(const double *x, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* got (a tensor) against want: |diff| <= rtol · max(1, max |want|) (1e-10 for float64, 5e-5 for
 * float32: a wrong (b, h) of the mask moves values by far more); the first bad index named. */
static void expect_close(const char *what, const char *name, const fg_tensor *got, const double *want, int64_t n) {
    double *g = fgt_values(got);
    const double tol = (got->dtype == FG_F32 ? 5e-5 : 1e-10) * fmax(1.0, max_abs(want, n));
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(g[i] - want[i]) <= tol)) {
            cr_expect(0, "%s: %s[%lld] is %.17g, the reference %.17g", what, name, (long long)i, g[i], want[i]);
            break;
        }
    free(g);
}

typedef enum { ROUTE_TENSOR, ROUTE_TENSOR_BLOCKS, ROUTE_CALLBACK_BLOCKS, ROUTE_COUNT } route;
static const char *route_name[ROUTE_COUNT] = {"tensor mask", "tensor mask + its block mask", "callback + block mask"};

static void run_case(const problem *pr, route rt, fg_attn_impl impl, int bq, int bk, uint64_t seed) {
    char what[256];
    snprintf(what, sizeof what, "%s %s %s, kind %d, %s, %s, B %lld H %lld Nq %lld Nk %lld, tiles %dx%d", route_name[rt],
             fg_attn_impl_name(impl), fg_dtype_name(pr->dt), pr->kind,
             pr->pat.use_b ? (pr->pat.use_h ? "per (b, h)" : "H-broadcast") : "B-broadcast",
             pr->kind == FG_ATTN_TMASK_BOOL || !pr->kind ? "boolean" : "additive", (long long)pr->B, (long long)pr->H,
             (long long)pr->Nq, (long long)pr->Nk, bq, bk);
    const int64_t nq = pr->B * pr->H * pr->Nq * pr->d, nk = pr->B * pr->H * pr->Nk * pr->d;
    fg_tensor *q = fgt_leaf(pr->dt, FGT_DIMS(pr->B, pr->H, pr->Nq, pr->d), seed);
    fg_tensor *k = fgt_leaf(pr->dt, FGT_DIMS(pr->B, pr->H, pr->Nk, pr->d), seed + 1);
    fg_tensor *v = fgt_leaf(pr->dt, FGT_DIMS(pr->B, pr->H, pr->Nk, pr->d), seed + 2);
    fg_tensor *dout = fgt_rand(pr->dt, FGT_DIMS(pr->B, pr->H, pr->Nq, pr->d), seed + 3);
    /* scores of a few units, so the bias and the mask both move the softmax */
    for (int64_t i = 0; i < nq; i++) fg_set(q, i, 2.5 * fg_get(q, i));

    fg_attn_opts o = fg_attn_defaults();
    o.impl = impl;
    o.block_q = bq;
    o.block_k = bk;
    fg_attn_tensor_mask tm;
    void *data = NULL;
    fg_attn_block_mask *bm = NULL;
    const int64_t Bm = pr->pat.use_b ? pr->B : 1, Hm = pr->pat.use_h ? pr->H : 1;
    if (rt == ROUTE_CALLBACK_BLOCKS) {
        o.custom.mask = cb_visible;
        o.custom.user = (void *)&pr->pat;
        bm = fg_attn_block_mask_create(cb_visible, (void *)&pr->pat, Bm, Hm, pr->Nq, pr->Nk, bq, bk);
    } else {
        data = make_tensor_mask(pr, &tm);
        o.custom = fg_attn_tensor_mask_custom(&tm);
        cr_assert(o.custom.mask, "%s: fg_attn_tensor_mask_custom refused it", what);
        if (rt == ROUTE_TENSOR_BLOCKS)
            bm = fg_attn_block_mask_create(o.custom.mask, o.custom.user, Bm, Hm, pr->Nq, pr->Nk, bq, bk);
    }
    if (rt != ROUTE_TENSOR) {
        cr_assert(bm, "%s: %s", what, fg_last_error());
        /* the pattern has whole tiles hidden for some (b, h) and not for others */
        cr_assert(fg_attn_block_mask_count(bm, FG_TILE_MASKED) > 0 && fg_attn_block_mask_count(bm, FG_TILE_FULL) > 0,
                  "%s: no masked or no full tiles", what);
        if (impl == FG_ATTN_FLASH) o.custom.block_mask = bm;
    }

    fg_tensor *lse = NULL;
    fg_tensor *out = fg_attention(q, k, v, &o, &lse);
    cr_assert(out && lse, "%s: %s", what, fg_last_error());
    cr_assert_eq(fg_backward(out, dout), FG_OK, "%s: %s", what, fg_last_error());

    double *qv = fgt_values(q), *kv = fgt_values(k), *vv = fgt_values(v), *dov = fgt_values(dout);
    double *ro = malloc(sizeof *ro * (size_t)nq), *rl = malloc(sizeof *rl * (size_t)(pr->B * pr->H * pr->Nq));
    double *rdq = malloc(sizeof *rdq * (size_t)nq), *rdk = malloc(sizeof *rdk * (size_t)nk),
           *rdv = malloc(sizeof *rdv * (size_t)nk);
    reference(pr, qv, kv, vv, dov, ro, rl, rdq, rdk, rdv);
    expect_close(what, "O", out, ro, nq);
    expect_close(what, "lse", lse, rl, pr->B * pr->H * pr->Nq);
    expect_close(what, "dQ", q->grad, rdq, nq);
    expect_close(what, "dK", k->grad, rdk, nk);
    expect_close(what, "dV", v->grad, rdv, nk);

    free(qv), free(kv), free(vv), free(dov), free(ro), free(rl), free(rdq), free(rdk), free(rdv);
    fg_release(out), fg_release(lse);
    fg_release(q), fg_release(k), fg_release(v), fg_release(dout);
    fg_attn_block_mask_release(bm);
    free(data);
}

static const pattern patterns[3] = {{1, 1, 0, 0}, {0, 1, 0, 0}, {1, 0, 0, 0}}; /* per (b, h), B-, H-broadcast */
static const int kinds[3] = {FG_ATTN_TMASK_BOOL, FG_ATTN_TMASK_F32, FG_ATTN_TMASK_F64};

/* Tiles of 16 × 8 over Nq 37 × Nk 29 (3 × 4 tiles, the last ones partial), and the default tiles
 * over 70 × 67 (2 × 2). */
static const struct {
    int64_t Nq, Nk;
    int bq, bk;
} sizes[2] = {{37, 29, 16, 8}, {70, 67, 64, 64}};

Test(attention_masks, tensor_masks_per_batch_and_head_across_tiles_match_the_reference) {
    uint64_t seed = 100;
    for (int si = 0; si < 2; si++)
        for (int pi = 0; pi < 3; pi++)
            for (int ki = 0; ki < 3; ki++)
                for (int rt = ROUTE_TENSOR; rt <= ROUTE_TENSOR_BLOCKS; rt++)
                    for (int v = 0; v < 4; v++) { /* flash, naive; float64, float32 */
                        problem pr = {2, 3,         sizes[si].Nq, sizes[si].Nk,
                                      8, kinds[ki], patterns[pi], v < 2 ? FG_F64 : FG_F32};
                        pr.pat.tq = sizes[si].bq, pr.pat.tk = sizes[si].bk;
                        run_case(&pr, (route)rt, v % 2 ? FG_ATTN_NAIVE : FG_ATTN_FLASH, sizes[si].bq, sizes[si].bk,
                                 seed += 4);
                    }
}

Test(attention_masks, block_masks_per_batch_and_head_across_tiles_match_the_reference) {
    uint64_t seed = 900;
    for (int si = 0; si < 2; si++)
        for (int pi = 0; pi < 3; pi++)
            for (int v = 0; v < 4; v++) {
                problem pr = {2, 3, sizes[si].Nq, sizes[si].Nk, 8, 0, patterns[pi], v < 2 ? FG_F64 : FG_F32};
                pr.pat.tq = sizes[si].bq, pr.pat.tk = sizes[si].bk;
                run_case(&pr, ROUTE_CALLBACK_BLOCKS, v % 2 ? FG_ATTN_NAIVE : FG_ATTN_FLASH, sizes[si].bq, sizes[si].bk,
                         seed += 4);
            }
}
