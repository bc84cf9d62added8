/* test_cuda_shared.c — what the CUDA code shares with the CPU, checked without a GPU:
 *  - ops/shared/attn_tiles.h (tile classification, kt_end, qt_begin) against brute force over every
 *    element, for many sizes, tile shapes, causal and not;
 *  - the tile schedule of the GPU flash kernels (cuda/attention.cu), replayed on the CPU in float64
 *    with the GPU's tile sizes: forward over kt < kt_end(qt) with the online softmax, backward's
 *    dK/dV over qt >= qt_begin(kt) and dQ over kt < kt_end(qt), recomputing P from lse — against
 *    the naive CPU kernel, so skipping a tile that has a visible element would fail;
 *  - tensor/philox.h as the GPU uses it: one Philox block serves four consecutive indices (the
 *    GPU dropout kernel's layout), and fg_attn_keep is the documented counter mapping;
 *  - that these host/device headers (ops/shared/, tensor/hd.h) include only lower layers, so the
 *    CPU build never reaches into cuda/, and that FG_HD has one definition.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention_kernels.h"
#include "ops/shared/attn_dropout.h"
#include "ops/shared/attn_tiles.h"
#include "tensor/philox.h"
#include "tests/common.h"

/* ---- tile arithmetic against brute force ---- */

static int brute_visible(int64_t i, int64_t j, int64_t Nq, int64_t Nk, int causal) {
    if (i < 0 || i >= Nq || j < 0 || j >= Nk) return 0;
    return causal ? j <= i + Nk - Nq : 1;
}

/* the kind of tile (qt, kt) from its elements */
static fg_tile_kind brute_kind(int64_t qt, int64_t kt, int64_t Nq, int64_t Nk, int64_t bq, int64_t bk, int causal) {
    int64_t any = 0, all = 1;
    for (int64_t i = qt * bq; i < qt * bq + bq && i < Nq; i++)
        for (int64_t j = kt * bk; j < kt * bk + bk; j++) {
            int v = brute_visible(i, j, Nq, Nk, causal);
            any |= v;
            all &= v; /* a key past Nk is not visible, so padding makes a tile partial */
        }
    if (!any) return FG_TILE_MASKED;
    return all ? FG_TILE_FULL : FG_TILE_PARTIAL;
}

Test(attn_tiles, tile_kinds_match_brute_force) {
    static const int64_t sizes[] = {0, 1, 2, 3, 5, 7, 16, 17, 31, 64, 65, 100, 129};
    static const int64_t blocks[] = {1, 2, 3, 16, 32, 64};
    const size_t ns = sizeof sizes / sizeof sizes[0], nb = sizeof blocks / sizeof blocks[0];
    int64_t checked = 0;
    for (size_t a = 0; a < ns; a++)
        for (size_t b = 0; b < ns; b++)
            for (size_t x = 0; x < nb; x++)
                for (size_t y = 0; y < nb; y++)
                    for (int causal = 0; causal < 2; causal++) {
                        const int64_t Nq = sizes[a], Nk = sizes[b], bq = blocks[x], bk = blocks[y];
                        if ((x + y + a + b) % 3 && Nq * Nk > 2000) continue; /* keep the sweep quick */
                        const int64_t nqt = fg_attn_ntiles(Nq, bq), nkt = fg_attn_ntiles(Nk, bk);
                        cr_assert_eq(nqt, (Nq + bq - 1) / bq);
                        for (int64_t qt = 0; qt < nqt; qt++) {
                            int64_t kt_end = fg_attn_kt_end(qt, Nq, Nk, bq, bk, causal);
                            for (int64_t kt = 0; kt < nkt; kt++) {
                                fg_tile_kind want = brute_kind(qt, kt, Nq, Nk, bq, bk, causal);
                                fg_tile_kind got = fg_attn_causal_tile_kind(qt, kt, Nq, Nk, bq, bk, causal);
                                cr_assert_eq(got, want,
                                             "Nq=%lld Nk=%lld bq=%lld bk=%lld causal=%d tile (%lld, %lld): kind %d, "
                                             "brute force %d",
                                             (long long)Nq, (long long)Nk, (long long)bq, (long long)bk, causal,
                                             (long long)qt, (long long)kt, got, want);
                                /* the non-masked tiles of a row of tiles are exactly the prefix [0, kt_end) */
                                cr_assert_eq(kt < kt_end, want != FG_TILE_MASKED,
                                             "Nq=%lld Nk=%lld bq=%lld bk=%lld causal=%d: kt_end(%lld) = %lld but tile "
                                             "%lld is %d",
                                             (long long)Nq, (long long)Nk, (long long)bq, (long long)bk, causal,
                                             (long long)qt, (long long)kt_end, (long long)kt, want);
                                /* ... and of a column of tiles the suffix [qt_begin, nqt) */
                                int64_t qb = fg_attn_qt_begin(kt, Nq, Nk, bq, bk, causal);
                                cr_assert_eq(qt >= qb, want != FG_TILE_MASKED,
                                             "Nq=%lld Nk=%lld bq=%lld bk=%lld causal=%d: qt_begin(%lld) = %lld but "
                                             "tile %lld is %d",
                                             (long long)Nq, (long long)Nk, (long long)bq, (long long)bk, causal,
                                             (long long)kt, (long long)qb, (long long)qt, want);
                                checked++;
                            }
                        }
                    }
    cr_assert_gt(checked, 100000, "only %lld tiles checked", (long long)checked);
}

Test(attn_tiles, row_end_is_the_visible_prefix) {
    for (int64_t Nq = 0; Nq < 40; Nq += 3)
        for (int64_t Nk = 0; Nk < 40; Nk += 4)
            for (int causal = 0; causal < 2; causal++)
                for (int64_t i = 0; i < Nq; i++) {
                    int64_t e = fg_attn_row_end(i, Nq, Nk, causal), count = 0;
                    for (int64_t j = 0; j < Nk; j++) {
                        int v = brute_visible(i, j, Nq, Nk, causal);
                        cr_assert_eq(fg_attn_visible(i, j, Nq, Nk, causal), v);
                        cr_assert_eq(v, j < e, "Nq=%lld Nk=%lld causal=%d: key %lld of row %lld (row_end %lld)",
                                     (long long)Nq, (long long)Nk, causal, (long long)j, (long long)i, (long long)e);
                        count += v;
                    }
                    cr_assert_eq(count, e);
                }
    /* bottom-right alignment: the last query sees every key; with Nq > Nk the first rows see none */
    cr_assert_eq(fg_attn_row_end(9, 10, 4, 1), 4);
    cr_assert_eq(fg_attn_row_end(5, 10, 4, 1), 0);
    cr_assert_eq(fg_attn_row_end(0, 3, 8, 1), 6);
}

/* ---- the GPU kernels' tile schedule, replayed in float64 ----
 * Forward as flash_fwd_kernel: per q tile, key tiles kt < kt_end(qt), masking only in non-FULL
 * tiles, online softmax, dropout on the weights. Backward as kernels 1-3: D = rowsum(dO∘O); dK, dV
 * per key tile over qt >= qt_begin(kt); dQ per query tile over kt < kt_end(qt). */
typedef struct {
    int64_t B, H, Nq, Nk, d;
    int causal;
    double p, scale;
    uint64_t seed;
} prob;

static int vis_in(fg_tile_kind kind, int64_t i, int64_t j, const prob *P) {
    return kind == FG_TILE_FULL ? (i < P->Nq) : fg_attn_visible(i, j, P->Nq, P->Nk, P->causal);
}
static double zmask(const prob *P, int64_t b, int64_t h, int64_t i, int64_t j) {
    uint32_t thr = fg_dropout_threshold(P->p);
    if (!thr) return 1;
    return fg_attn_keep(P->seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j) ? 1.0 / (1.0 - P->p) : 0.0;
}
static double dot(const double *a, const double *b, int64_t d) {
    double s = 0;
    for (int64_t c = 0; c < d; c++) s += a[c] * b[c];
    return s;
}

static void sched_forward(double *o, double *lse, const double *q, const double *k, const double *v, const prob *P,
                          int64_t BQ, int64_t BK) {
    const int64_t d = P->d;
    double *m = malloc(BQ * sizeof(double)), *l = malloc(BQ * sizeof(double)), *acc = malloc(BQ * d * sizeof(double));
    double *s = malloc(BK * sizeof(double));
    for (int64_t b = 0; b < P->B; b++)
        for (int64_t h = 0; h < P->H; h++) {
            const int64_t bh = b * P->H + h;
            const double *qh = q + bh * P->Nq * d, *kh = k + bh * P->Nk * d, *vh = v + bh * P->Nk * d;
            for (int64_t qt = 0; qt < fg_attn_ntiles(P->Nq, BQ); qt++) {
                for (int64_t r = 0; r < BQ; r++) m[r] = -INFINITY, l[r] = 0;
                memset(acc, 0, BQ * d * sizeof(double));
                const int64_t kt_end = fg_attn_kt_end(qt, P->Nq, P->Nk, BQ, BK, P->causal);
                for (int64_t kt = 0; kt < kt_end; kt++) {
                    fg_tile_kind kind = fg_attn_causal_tile_kind(qt, kt, P->Nq, P->Nk, BQ, BK, P->causal);
                    for (int64_t r = 0; r < BQ; r++) {
                        const int64_t i = qt * BQ + r;
                        if (i >= P->Nq) continue;
                        double rmax = -INFINITY;
                        for (int64_t c = 0; c < BK; c++) {
                            const int64_t j = kt * BK + c;
                            s[c] = (j < P->Nk && vis_in(kind, i, j, P)) ? P->scale * dot(qh + i * d, kh + j * d, d)
                                                                        : -INFINITY;
                            rmax = fmax(rmax, s[c]);
                        }
                        double mnew = fmax(m[r], rmax), alpha = 1, rsum = 0;
                        for (int64_t c = 0; c < BK; c++) {
                            s[c] = mnew == -INFINITY ? 0 : exp(s[c] - mnew);
                            rsum += s[c];
                        }
                        if (mnew != -INFINITY) alpha = exp(m[r] - mnew);
                        l[r] = alpha * l[r] + rsum;
                        m[r] = mnew;
                        for (int64_t c = 0; c < d; c++) acc[r * d + c] *= alpha;
                        for (int64_t c = 0; c < BK; c++) {
                            const int64_t j = kt * BK + c;
                            if (j >= P->Nk || s[c] == 0) continue;
                            const double w = s[c] * zmask(P, b, h, i, j);
                            for (int64_t e = 0; e < d; e++) acc[r * d + e] += w * vh[j * d + e];
                        }
                    }
                }
                for (int64_t r = 0; r < BQ; r++) {
                    const int64_t i = qt * BQ + r;
                    if (i >= P->Nq) continue;
                    for (int64_t c = 0; c < d; c++) o[(bh * P->Nq + i) * d + c] = l[r] > 0 ? acc[r * d + c] / l[r] : 0;
                    lse[bh * P->Nq + i] = l[r] > 0 ? m[r] + log(l[r]) : -INFINITY;
                }
            }
        }
    free(m), free(l), free(acc), free(s);
}

/* P and dS of element (i, j) as recompute_tile does */
static void sched_pds(const prob *P, fg_tile_kind kind, int64_t b, int64_t h, int64_t i, int64_t j, const double *qh,
                      const double *kh, const double *vh, const double *doh, const double *lseh, const double *D,
                      double *pz, double *ds) {
    const int64_t d = P->d;
    const double L = i < P->Nq ? lseh[i] : -INFINITY;
    const int vis = L != -INFINITY && j < P->Nk && vis_in(kind, i, j, P);
    const double p = vis ? exp(P->scale * dot(qh + i * d, kh + j * d, d) - L) : 0;
    const double z = p != 0 ? zmask(P, b, h, i, j) : 1;
    const double dp = p != 0 ? dot(doh + i * d, vh + j * d, d) : 0;
    *pz = p * z;
    *ds = p * (dp * z - (i < P->Nq ? D[i] : 0));
}

static void sched_backward(double *dq, double *dk, double *dv, const double *dout, const double *q, const double *k,
                           const double *v, const double *o, const double *lse, const prob *P, int64_t BQ, int64_t BK) {
    const int64_t d = P->d;
    double *D = malloc((P->Nq ? P->Nq : 1) * sizeof(double));
    for (int64_t b = 0; b < P->B; b++)
        for (int64_t h = 0; h < P->H; h++) {
            const int64_t bh = b * P->H + h;
            const double *qh = q + bh * P->Nq * d, *kh = k + bh * P->Nk * d, *vh = v + bh * P->Nk * d;
            const double *doh = dout + bh * P->Nq * d, *oh = o + bh * P->Nq * d, *lseh = lse + bh * P->Nq;
            for (int64_t i = 0; i < P->Nq; i++) D[i] = dot(doh + i * d, oh + i * d, d); /* kernel 1 */
            const int64_t nqt = fg_attn_ntiles(P->Nq, BQ), nkt = fg_attn_ntiles(P->Nk, BK);
            for (int64_t kt = 0; kt < nkt; kt++) /* kernel 2 */
                for (int64_t qt = fg_attn_qt_begin(kt, P->Nq, P->Nk, BQ, BK, P->causal); qt < nqt; qt++) {
                    fg_tile_kind kind = fg_attn_causal_tile_kind(qt, kt, P->Nq, P->Nk, BQ, BK, P->causal);
                    for (int64_t i = qt * BQ; i < qt * BQ + BQ; i++)
                        for (int64_t j = kt * BK; j < kt * BK + BK && j < P->Nk; j++) {
                            double pz, ds;
                            sched_pds(P, kind, b, h, i, j, qh, kh, vh, doh, lseh, D, &pz, &ds);
                            if (i >= P->Nq) continue;
                            for (int64_t c = 0; c < d; c++) {
                                dv[(bh * P->Nk + j) * d + c] += pz * doh[i * d + c];
                                dk[(bh * P->Nk + j) * d + c] += P->scale * ds * qh[i * d + c];
                            }
                        }
                }
            for (int64_t qt = 0; qt < nqt; qt++) { /* kernel 3 */
                const int64_t kt_end = fg_attn_kt_end(qt, P->Nq, P->Nk, BQ, BK, P->causal);
                for (int64_t kt = 0; kt < kt_end; kt++) {
                    fg_tile_kind kind = fg_attn_causal_tile_kind(qt, kt, P->Nq, P->Nk, BQ, BK, P->causal);
                    for (int64_t i = qt * BQ; i < qt * BQ + BQ && i < P->Nq; i++)
                        for (int64_t j = kt * BK; j < kt * BK + BK && j < P->Nk; j++) {
                            double pz, ds;
                            sched_pds(P, kind, b, h, i, j, qh, kh, vh, doh, lseh, D, &pz, &ds);
                            for (int64_t c = 0; c < d; c++)
                                dq[(bh * P->Nq + i) * d + c] += P->scale * ds * kh[j * d + c];
                        }
                }
            }
        }
    free(D);
}

static double *rnd(int64_t n, uint64_t seed) {
    double *x = malloc((n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) x[i] = 2 * fg_u32_to_uniform_f64(fg_philox_u32(seed, 1, (uint64_t)i)) - 1;
    return x;
}
static double *zeros(int64_t n) { return calloc(n ? n : 1, sizeof(double)); }

static void expect_close(const char *what, const double *got, const double *want, int64_t n, const prob *P, int64_t BQ,
                         int64_t BK) {
    for (int64_t i = 0; i < n; i++) {
        int both_ninf = got[i] == -INFINITY && want[i] == -INFINITY;
        cr_assert(
            both_ninf || fabs(got[i] - want[i]) <= 1e-11 * (1 + fabs(want[i])),
            "%s [Nq=%lld Nk=%lld d=%lld causal=%d p=%g tiles %lldx%lld] element %lld: schedule %.15g, naive %.15g",
            what, (long long)P->Nq, (long long)P->Nk, (long long)P->d, P->causal, P->p, (long long)BQ, (long long)BK,
            (long long)i, got[i], want[i]);
    }
}

Test(attn_tiles, gpu_tile_schedule_reproduces_naive_attention) {
    static const prob probs[] = {
        {1, 2, 17, 17, 8, 1, 0, 0, 1},     {1, 1, 70, 33, 5, 1, 0.2, 0, 2}, {2, 1, 33, 70, 4, 1, 0, 0, 3},
        {1, 1, 65, 65, 3, 0, 0.3, 0, 4},   {1, 1, 40, 1, 6, 1, 0, 0, 5},    {1, 1, 9, 0, 4, 0, 0, 0, 6},
        {1, 2, 100, 100, 7, 1, 0.1, 0, 7},
    };
    /* the GPU's tile shapes: float32 64x64 (forward, backward d <= 128), 32x32, float64 16x16 */
    static const int64_t tiles[][2] = {{64, 64}, {32, 32}, {16, 16}};
    for (size_t pi = 0; pi < sizeof probs / sizeof probs[0]; pi++)
        for (size_t ti = 0; ti < 3; ti++) {
            prob P = probs[pi];
            P.scale = 1.0 / sqrt((double)P.d);
            const int64_t BQ = tiles[ti][0], BK = tiles[ti][1];
            const int64_t nq = P.B * P.H * P.Nq * P.d, nk = P.B * P.H * P.Nk * P.d, nl = P.B * P.H * P.Nq;
            double *q = rnd(nq, 1), *k = rnd(nk, 2), *v = rnd(nk, 3), *dout = rnd(nq, 4);
            double *o = zeros(nq), *lse = zeros(nl), *dq = zeros(nq), *dk = zeros(nk), *dv = zeros(nk);
            double *ro = zeros(nq), *rl = zeros(nl), *rdq = zeros(nq), *rdk = zeros(nk), *rdv = zeros(nk);
            double *rp = zeros(P.B * P.H * P.Nq * P.Nk);
            fg_attn_opts op = fg_attn_defaults();
            op.causal = P.causal;
            op.dropout_p = P.p;
            op.seed = P.seed;
            fg_attn_problem pr;
            cr_assert_eq(fg_attn_problem_init(&pr, P.B, P.H, P.Nq, P.Nk, P.d, &op), FG_OK, "%s", fg_last_error());
            cr_assert_eq(fg_attn_naive_forward_f64(ro, rl, rp, q, k, v, &pr), FG_OK);
            cr_assert_eq(fg_attn_naive_backward_f64(rdq, rdk, rdv, dout, q, k, v, rp, &pr), FG_OK);
            sched_forward(o, lse, q, k, v, &P, BQ, BK);
            sched_backward(dq, dk, dv, dout, q, k, v, o, lse, &P, BQ, BK);
            expect_close("O", o, ro, nq, &P, BQ, BK);
            expect_close("lse", lse, rl, nl, &P, BQ, BK);
            expect_close("dQ", dq, rdq, nq, &P, BQ, BK);
            expect_close("dK", dk, rdk, nk, &P, BQ, BK);
            expect_close("dV", dv, rdv, nk, &P, BQ, BK);
            double *all[] = {q, k, v, dout, o, lse, dq, dk, dv, ro, rl, rdq, rdk, rdv, rp};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
        }
}

/* ---- Philox as the GPU kernels use it ---- */

Test(philox_shared, one_block_serves_four_consecutive_indices) {
    /* cuda/dropout.cu: thread m computes fg_philox_block(seed, stream, m) for elements 4m .. 4m+3 */
    const uint64_t seed = 0xdeadbeefcafef00dULL, stream = 12345;
    for (uint64_t m = 0; m < 300; m++) {
        uint32_t w[4];
        fg_philox_block(seed, stream, m, w);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(w[i], fg_philox_u32(seed, stream, 4 * m + i), "block %llu word %d", (unsigned long long)m, i);
    }
}

Test(philox_shared, attention_keep_is_the_documented_counter) {
    const uint64_t seed = 0x0102030405060708ULL;
    const uint32_t thr = fg_dropout_threshold(0.4);
    int kept = 0, total = 0;
    for (uint32_t b = 0; b < 2; b++)
        for (uint32_t h = 0; h < 3; h++)
            for (uint32_t i = 0; i < 20; i++)
                for (uint32_t j = 0; j < 37; j++) {
                    uint32_t ctr[4] = {j >> 2, i, h, b}, key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, out[4];
                    fg_philox4x32_10(ctr, key, out);
                    int want = out[j & 3] >= thr;
                    cr_assert_eq(fg_attn_keep(seed, thr, b, h, i, j), want, "(b %u, h %u, i %u, j %u)", b, h, i, j);
                    kept += want;
                    total++;
                }
    cr_assert(kept > 0.5 * total && kept < 0.7 * total, "p = 0.4 kept %d of %d", kept, total);
    cr_assert_eq(fg_attn_keep(seed, 0, 1, 2, 3, 4), 1, "threshold 0 (p = 0) keeps everything");
    cr_assert_eq(fg_dropout_threshold(0.0), 0u);
    cr_assert_eq(fg_dropout_threshold(0.5), 0x80000000u);
}

/* ---- where the shared headers live ---- */

/* ops/shared/ and tensor/ include no higher layer (tests/lint_layers.sh), and FG_HD is defined in
 * tensor/hd.h only. */
Test(attn_tiles, shared_headers_point_down_and_define_fg_hd_once) {
    char log[16384];
    fgt_run_cmd("sh tests/lint_layers.sh 2>&1", log, sizeof log);
    cr_expect(!strstr(log, "layers: ops/shared/") && !strstr(log, "layers: ops/attention") &&
                  !strstr(log, "layers: tensor/"),
              "an attention or tensor header includes a higher layer:\n%s", log);
    char defs[4096];
    fgt_run_cmd("grep -rlE '^[[:space:]]*#[[:space:]]*define[[:space:]]+FG_HD([[:space:]]|$)' tensor autograd ops cuda "
                "datasets train 2>/dev/null | sort | tr '\\n' ' '",
                defs, sizeof defs);
    cr_expect_str_eq(defs, "tensor/hd.h ", "FG_HD is defined in: %s", defs);
}
