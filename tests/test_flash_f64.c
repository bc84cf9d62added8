/* test_flash_f64.c — the float64 tile kernels of CPU flash attention: the exp (ops/cpu/flash_exp64.h),
 * the tile products (fg_dgemm_small, ops/cpu/smallgemm.h), the x86 float64 table of tile operations
 * (ops/cpu/flash_tiles.h) against the portable one, and the promise on top: the same bits for any
 * thread count and any instruction set.
 *
 * References: expl (long double) for the exp; a long double triple loop for the products; the
 * plain C forms for the claim that every level computes the same bits. Every level the CPU has is
 * tried (fg_simd_set). Sizes shrink under FG_SANITIZE=1.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention_kernels.h"
#include "ops/cpu/flash_exp64.h"
#include "ops/cpu/flash_tiles.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/smallgemm.h"
#include "ops/cpu/threadpool.h"
#include "tests/common.h"

TestSuite(flash_f64, .timeout = 300);

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}
static double drand(uint64_t *s) { return (double)lcg(s) / 2147483648.0 * 2.0 - 1.0; }

/* the exp, applied to n values at the given level: the array form through the x86 table's exp_rows
 * (one row, L = 0, no lo) */
static void exp_at_level(fg_simd_level lv, double *y, const double *x, int64_t n) {
    fg_simd_set(lv);
    memcpy(y, x, (size_t)n * sizeof(double));
    const double L = 0;
    fg_flash_x86_f64.exp_rows(y, n, 1, n, &L, NULL);
}

Test(flash_f64, exp_is_within_two_ulps_of_expl_and_every_level_gives_the_same_bits) {
    enum { N = 4096 };
    static double x[N], y0[N], y1[N];
    const int rounds = fgt_sanitize() ? 4 : 64;
    uint64_t seed = 2024;
    const fg_simd_level best = fg_simd_detect();
    double worst = 0;
    for (int rd = 0; rd < rounds; rd++) {
        for (int i = 0; i < N; i++) /* [-708, 709.7], denser near 0 where softmax lives */
            x[i] = rd % 2 ? 708.0 * drand(&seed) : 20.0 * drand(&seed);
        x[0] = 0, x[1] = -708.0, x[2] = 709.7, x[3] = 1e-300, x[4] = -1e-17;
        exp_at_level(FG_SIMD_SCALAR, y0, x, N);
        for (int i = 0; i < N; i++) {
            const long double t = expl((long double)x[i]);
            const double td = (double)t;
            const long double ulp = (long double)nextafter(td, INFINITY) - (long double)td;
            const double e = (double)(fabsl((long double)y0[i] - t) / ulp);
            cr_assert(e <= 2.0, "exp(%a) = %a, expl says %La (%.2f ulp)", x[i], y0[i], t, e);
            if (e > worst) worst = e;
        }
        for (int lv = FG_SIMD_AVX2; lv <= (int)best; lv++) {
            exp_at_level((fg_simd_level)lv, y1, x, N);
            for (int i = 0; i < N; i++)
                cr_assert(memcmp(&y0[i], &y1[i], sizeof(double)) == 0, "%s: exp(%a) = %a, scalar %a",
                          fg_simd_name((fg_simd_level)lv), x[i], y1[i], y0[i]);
        }
    }
    fg_simd_set(best);
    cr_assert(worst > 0 || rounds == 0, "the ulp error was never measured");
}

Test(flash_f64, exp_special_values) {
    const double x[8] = {-INFINITY, INFINITY, NAN, -709.0, -1000.0, 710.0, 1e6, -0.0};
    const fg_simd_level best = fg_simd_detect();
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
        double y[8];
        exp_at_level((fg_simd_level)lv, y, x, 8);
        const char *ln = fg_simd_name((fg_simd_level)lv);
        cr_expect(y[0] == 0 && !signbit(y[0]), "%s: exp(-inf) = %a", ln, y[0]);
        cr_expect(isinf(y[1]) && y[1] > 0, "%s: exp(inf) = %a", ln, y[1]);
        cr_expect(isnan(y[2]), "%s: exp(nan) = %a", ln, y[2]);
        cr_expect(y[3] == 0 && y[4] == 0, "%s: exp below the flush point: %a %a (no subnormals)", ln, y[3], y[4]);
        cr_expect(isinf(y[5]) && isinf(y[6]), "%s: exp(710), exp(1e6) = %a %a", ln, y[5], y[6]);
        cr_expect(y[7] == 1, "%s: exp(-0) = %a", ln, y[7]);
    }
    fg_simd_set(best);
    cr_assert(fg_exp64_ref(0.5) == fg_exp64_ref(0.5) && fabs(fg_exp64_ref(1.0) - M_E) <= 2 * DBL_EPSILON * M_E,
              "fg_exp64_ref(1) = %a", fg_exp64_ref(1.0));
}

Test(flash_f64, dgemm_small_matches_a_long_double_reference_and_every_level_gives_the_same_bits) {
    fgt_small_gemm_check(FG_F64, fgt_sanitize() ? 30 : 200, 40, 75, 777);
}

static double rel_diff(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-300); }

/* The x86 float64 table and the portable one agree on a tile: exactly on the max, dS and moves, to
 * a few double ulps where the products or exps round differently (the x86 softmax runs on Sᵀ). */
Test(flash_f64, tile_tables_agree_on_every_operation) {
    const fg_flash_ops_f64 *px = &fg_flash_x86_f64, *pp = &fg_flash_portable_f64;
    cr_assert(px->packs && !pp->packs && px->transpose && !pp->transpose, "packs / transpose of the two tables");
    enum { NQ = 19, NK = 21, D = 13 };
    uint64_t seed = 4243;
    double S[NQ * NK], ST[NK * NQ], A[NQ * D], Bm[D * NK], BT[NK * D], C1[NQ * NK], C2[NQ * NK], rsc[NQ];
    for (int i = 0; i < NQ * NK; i++) S[i] = 6 * drand(&seed);
    for (int r = 0; r < NQ; r++) S[r * NK + (r * 5) % NK] = -INFINITY; /* masked scores */
    for (int j = 0; j < NK; j++) S[3 * NK + j] = -INFINITY;            /* row 3 sees no key */
    for (int i = 0; i < NQ * D; i++) A[i] = drand(&seed);
    for (int i = 0; i < D * NK; i++) Bm[i] = drand(&seed);
    for (int r = 0; r < NQ; r++) rsc[r] = 1 + drand(&seed);
    const double tol = 16 * DBL_EPSILON;
    const fg_simd_level best = fg_simd_detect();
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
        fg_simd_set((fg_simd_level)lv);
        const char *ln = fg_simd_name((fg_simd_level)lv);
        px->transpose(ST, NQ, S, NK, NQ, NK);
        for (int r = 0; r < NQ; r++)
            for (int j = 0; j < NK; j++)
                cr_assert(memcmp(&ST[j * NQ + r], &S[r * NK + j], sizeof(double)) == 0, "%s: transpose (%d, %d)", ln, r,
                          j);
        px->transpose(BT, D, Bm, NK, D, NK);
        for (int i = 0; i < NQ * NK; i++) C1[i] = C2[i] = drand(&seed);
        px->gemm(0, 0, NQ, NK, D, 0.5, A, D, Bm, NK, C1, NK, rsc, 1);
        pp->gemm(0, 1, NQ, NK, D, 0.5, A, D, BT, D, C2, NK, rsc, 1);
        for (int i = 0; i < NQ * NK; i++)
            cr_assert(fabs(C1[i] - C2[i]) <= 1e-14 * (1 + fabs(C2[i])), "%s: gemm [%d] %a vs %a", ln, i, C1[i], C2[i]);
        double mx[NQ], lx[NQ], ax[NQ], mp[NQ], lp[NQ], ap[NQ], Sp[NQ * NK];
        for (int r = 0; r < NQ; r++) mx[r] = mp[r] = -INFINITY, lx[r] = lp[r] = 0;
        for (int step = 0; step < 2; step++) {
            memcpy(Sp, S, sizeof Sp);
            for (int i = 0; step && i < NQ * NK; i++) Sp[i] += 1.5 * drand(&seed); /* -inf stays */
            px->transpose(ST, NQ, Sp, NK, NQ, NK);
            px->softmax(ST, NQ, NQ, NK, mx, lx, ax);
            pp->softmax(Sp, NK, NQ, NK, mp, lp, ap);
            for (int r = 0; r < NQ; r++) {
                cr_assert(memcmp(&mx[r], &mp[r], sizeof(double)) == 0, "%s step %d: m[%d] %a vs %a", ln, step, r, mx[r],
                          mp[r]);
                cr_assert(rel_diff(lx[r], lp[r]) <= tol || (lx[r] == 0 && lp[r] == 0), "%s step %d: l[%d] %a vs %a", ln,
                          step, r, lx[r], lp[r]);
                if (mp[r] != -INFINITY) /* a row that has seen no key: alpha is 0 (x86) or 1 (portable), O is 0 */
                    cr_assert(fabs(ax[r] - ap[r]) <= tol * ap[r], "%s step %d: alpha[%d] %a vs %a", ln, step, r, ax[r],
                              ap[r]);
                for (int j = 0; j < NK; j++)
                    cr_assert(fabs(ST[j * NQ + r] - Sp[r * NK + j]) <= tol * fmax(Sp[r * NK + j], 1e-300) ||
                                  ST[j * NQ + r] == Sp[r * NK + j],
                              "%s step %d: P(%d, %d) %a vs %a", ln, step, r, j, ST[j * NQ + r], Sp[r * NK + j]);
            }
        }
        double L[NQ], lo[NQ];
        for (int r = 0; r < NQ; r++) L[r] = r == 3 ? -INFINITY : 4 + drand(&seed), lo[r] = 1e-16 * drand(&seed);
        memcpy(C1, S, sizeof C1);
        memcpy(C2, S, sizeof C2);
        px->exp_rows(C1, NK, NQ, NK, L, lo);
        pp->exp_rows(C2, NK, NQ, NK, L, lo);
        for (int i = 0; i < NQ * NK; i++)
            cr_assert(fabs(C1[i] - C2[i]) <= tol * C2[i] || C1[i] == C2[i], "%s: exp_rows [%d] %a vs %a", ln, i, C1[i],
                      C2[i]);
        double dS1[NQ * NK], dS2[NQ * NK], Dr[NQ];
        for (int i = 0; i < NQ * NK; i++) dS1[i] = dS2[i] = drand(&seed);
        for (int r = 0; r < NQ; r++) Dr[r] = drand(&seed);
        px->ds_rows(dS1, C2, NK, NQ, NK, Dr);
        pp->ds_rows(dS2, C2, NK, NQ, NK, Dr);
        cr_assert(memcmp(dS1, dS2, sizeof dS1) == 0, "%s: ds_rows differs", ln);
    }
    fg_simd_set(best);
}

/* ---- flash float64 end to end: the same bits for any thread count and instruction set ---- */

Test(flash_f64, flash_is_bit_identical_for_any_thread_count_and_instruction_set) {
    const int small = fgt_sanitize();
    const fgt_flash_case cases[] = {
        {"plain", 2, 2, 2, small ? 50 : 130, small ? 50 : 130, 64, 0, 0, 0, 0, 0, 0, 0},
        {"causal, ragged blocks", 1, 2, 2, small ? 45 : 133, small ? 60 : 150, 24, 1, 0, 0, 0, 0, 32, 48},
        {"gqa window alibi dropout", 1, 4, 2, small ? 40 : 97, small ? 40 : 97, 16, 1, 1, 1, 0.2, 0, 16, 16},
        {"softcap, d not a multiple of 4", 2, 3, 3, 37, 41, 13, 0, 0, 0, 0, 3.0, 8, 16},
    };
    fgt_flash_bit_identity(FG_F64, cases, sizeof cases / sizeof cases[0], 555);
}
