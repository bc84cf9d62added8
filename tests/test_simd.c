/* test_simd.c — the CPU speed machinery: the vectorized exp and tanh (ops/cpu/vexp.h, vtanh.h), the tile products
 * (ops/cpu/smallgemm.h), the thread pool (ops/cpu/threadpool.h), and what flash attention promises on top
 * of them: the same bits for any thread count and any instruction set.
 *
 * References: exp in double (libm) for vexp; a double-precision triple loop for the products; the
 * scalar forms (fg_expf_ref, the plain C product) for the claim that every level computes the same
 * bits; a serial run for the pool. Every level the CPU has is tried (fg_simd_set), so on an
 * AVX-512 machine all three paths are covered. Sizes shrink under FG_SANITIZE=1.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ops/attention_kernels.h"
#include "ops/cpu/flash_tiles.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/smallgemm.h"
#include "ops/cpu/threadpool.h"
#include "ops/cpu/vexp.h"
#include "ops/cpu/vtanh.h"
#include "tensor/alloc.h"
#include "tests/common.h"

TestSuite(simd, .timeout = 300);

/* ---------------------------------------------------------------------------------------------
 * vexp
 * ------------------------------------------------------------------------------------------- */

/* |y − exp(x)| in units of the float32 spacing at exp(x) (x >= FG_VEXP_LO: a normal result). */
static double ulp_error(float x, float y) {
    const double t = exp((double)x);
    const float tf = (float)t;
    const double ulp = (double)nextafterf(tf, INFINITY) - (double)tf;
    return fabs((double)y - t) / ulp;
}

Test(simd, vexp_is_within_one_ulp_of_exp_on_every_level) {
    const uint32_t stride = fgt_sanitize() ? 9973 : 97; /* every stride-th float32 of [−104, 89] */
    enum { CH = 4096 };
    float *x = malloc(CH * sizeof(float)), *y = malloc(CH * sizeof(float));
    const fg_simd_level best = fg_simd_detect();
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
        fg_simd_set((fg_simd_level)lv);
        double worst = 0;
        float worst_x = 0, nonzero_below = 0;
        int64_t n = 0, differ = 0, n_nonzero_below = 0;
        float first_differ = 0;
        for (int neg = 0; neg < 2; neg++) {
            const float lim = neg ? 104.0f : 89.0f;
            uint32_t top;
            memcpy(&top, &lim, sizeof top);
            for (uint32_t u = 0; u <= top;) {
                int c = 0;
                for (; c < CH && u <= top; c++, u += stride) {
                    const uint32_t bits = u | (neg ? 0x80000000u : 0);
                    memcpy(&x[c], &bits, sizeof bits);
                }
                fg_vexp_f32(y, x, c);
                for (int i = 0; i < c; i++) {
                    const float r = fg_expf_ref(x[i]);
                    if (memcmp(&r, &y[i], sizeof r) != 0 && differ++ == 0) first_differ = x[i];
                    if (isinf(y[i]) || isinf((float)exp((double)x[i]))) {
                        cr_expect(isinf(y[i]) && isinf((float)exp((double)x[i])), "exp(%a): %a, libm %a", x[i], y[i],
                                  exp((double)x[i]));
                        continue;
                    }
                    if (x[i] < FG_VEXP_LO) { /* flushed to 0: exp(x) < 1.3e-38 */
                        if (y[i] != 0 && n_nonzero_below++ == 0) nonzero_below = x[i];
                        continue;
                    }
                    const double e = ulp_error(x[i], y[i]);
                    if (e > worst) {
                        worst = e;
                        worst_x = x[i];
                    }
                    n++;
                }
            }
        }
        cr_expect(worst <= 1.0, "%s: exp error %.3f ulp at x = %.9g (bound 1 ulp)", fg_simd_name(lv), worst, worst_x);
        cr_expect_eq(n_nonzero_below, 0, "%s: %lld results below the cut are not 0, the first at x = %a",
                     fg_simd_name(lv), (long long)n_nonzero_below, nonzero_below);
        cr_expect_eq(differ, 0, "%s: %lld results differ from fg_expf_ref, the first at x = %a", fg_simd_name(lv),
                     (long long)differ, first_differ);
        fprintf(stderr, "[simd] vexp %s: %lld inputs >= %g, worst %.3f ulp (at %.7g)\n", fg_simd_name(lv), (long long)n,
                (double)FG_VEXP_LO, worst, worst_x);
    }
    free(x);
    free(y);
}

/* vtanh (ops/cpu/vtanh.h): every stride-th float32 of [−20, 20] (and the ends, where tanh is ±1),
 * divided by c = 1 (u itself) and by c = 15 (a softcap's scale): within 2 ulp of tanh in double, and
 * every level gives the scalar form's bits; NaN, ±inf, ±0 as promised. */
Test(simd, vtanh_is_within_two_ulp_of_tanh_and_every_level_gives_the_same_bits) {
    const uint32_t stride = fgt_sanitize() ? 9973 : 101;
    enum { CH = 4096 };
    float *x = malloc(CH * sizeof(float)), *y = malloc(CH * sizeof(float));
    const fg_simd_level best = fg_simd_detect();
    const float lim = 20.0f;
    uint32_t top;
    memcpy(&top, &lim, sizeof top);
    const float cs[2] = {1.0f, 15.0f};
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
        fg_simd_set((fg_simd_level)lv);
        for (int k = 0; k < 2; k++) {
            double worst = 0;
            float worst_x = 0, first_differ = 0;
            int64_t n = 0, differ = 0;
            for (int neg = 0; neg < 2; neg++)
                for (uint32_t u = 0; u <= top;) {
                    int c = 0;
                    for (; c < CH && u <= top; c++, u += stride) {
                        const uint32_t bits = u | (neg ? 0x80000000u : 0);
                        memcpy(&x[c], &bits, sizeof bits);
                    }
                    fg_vtanh_div_f32(y, x, cs[k], c);
                    for (int i = 0; i < c; i++) {
                        const float q = x[i] / cs[k], r = fg_tanhf_ref(q);
                        if (memcmp(&r, &y[i], sizeof r) != 0 && differ++ == 0) first_differ = x[i];
                        const double t = tanh((double)q);
                        const float tf = (float)t;
                        if (tf == 0) {
                            cr_expect(y[i] == 0 && signbit(y[i]) == signbit(q), "tanh(%a) = %a", (double)q, (double)y[i]);
                            continue;
                        }
                        const double ulp = fabs((double)nextafterf(tf, 2 * tf) - (double)tf);
                        const double e = fabs((double)y[i] - t) / ulp;
                        if (e > worst) worst = e, worst_x = q;
                        n++;
                    }
                }
            cr_expect(worst <= 2.0, "%s, c %g: tanh error %.3f ulp at u = %.9g (bound 2 ulp)", fg_simd_name(lv),
                      (double)cs[k], worst, (double)worst_x);
            cr_expect_eq(differ, 0, "%s, c %g: %lld results differ from fg_tanhf_ref, the first at x = %a",
                         fg_simd_name(lv), (double)cs[k], (long long)differ, (double)first_differ);
            fprintf(stderr, "[simd] vtanh %s c %g: %lld inputs, worst %.3f ulp (at %.7g)\n", fg_simd_name(lv),
                    (double)cs[k], (long long)n, worst, (double)worst_x);
        }
        const float sp[6] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f};
        float out[6];
        fg_vtanh_div_f32(out, sp, 1.0f, 6);
        cr_expect(isnan(out[0]), "%s: tanh(NaN) = %a", fg_simd_name(lv), (double)out[0]);
        cr_expect(out[1] == 1.0f && out[2] == -1.0f, "%s: tanh(±inf) = %a, %a", fg_simd_name(lv), (double)out[1],
                  (double)out[2]);
        cr_expect(out[3] == 0 && !signbit(out[3]) && out[4] == 0 && signbit(out[4]), "%s: tanh(±0)", fg_simd_name(lv));
        cr_expect(out[5] == 1.0f, "%s: tanh(1e30) = %a", fg_simd_name(lv), (double)out[5]);
    }
    fg_simd_set(best);
    free(x);
    free(y);
}

Test(simd, vexp_special_values_and_tails) {
    const float in[] = {-INFINITY, INFINITY, NAN,     0.0f,   -0.0f,      1.0f,      -1.0f,
                        88.72283f, 88.7229f, 89.0f,   1e30f,  -87.33655f, -87.3f,    -87.29999f,
                        -103.9f,   -103.98f, -104.0f, -1e30f, 0x1p-30f,   -0x1p-30f, 0.5f * 0.6931472f};
    const int n = (int)(sizeof in / sizeof in[0]);
    const fg_simd_level best = fg_simd_detect();
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
        fg_simd_set((fg_simd_level)lv);
        /* every length 0..n: the vector body, the masked / scalar tail, and in-place use */
        for (int len = 0; len <= n; len++) {
            float y[32], guard = 12345.0f;
            for (int i = 0; i < 32; i++) y[i] = guard;
            memcpy(y, in, (size_t)len * sizeof(float));
            fg_vexp_f32(y, y, len);
            for (int i = len; i < 32; i++)
                cr_assert_eq(y[i], guard, "%s len %d: wrote past the end at %d", fg_simd_name(lv), len, i);
            for (int i = 0; i < len; i++) {
                const double t = exp((double)in[i]);
                if (isnan(in[i]))
                    cr_expect(isnan(y[i]), "%s: exp(NaN) = %a", fg_simd_name(lv), y[i]);
                else if (isinf((float)t))
                    cr_expect(isinf(y[i]) && y[i] > 0, "%s: exp(%a) = %a, want +inf", fg_simd_name(lv), in[i], y[i]);
                else if (in[i] < FG_VEXP_LO)
                    cr_expect(y[i] == 0, "%s: exp(%a) = %a, want 0 (flushed)", fg_simd_name(lv), in[i], y[i]);
                else
                    cr_expect(ulp_error(in[i], y[i]) <= 1.0, "%s: exp(%a) = %a, libm %a", fg_simd_name(lv), in[i], y[i],
                              t);
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * smallgemm
 * ------------------------------------------------------------------------------------------- */

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}
static float frand(uint64_t *s) { return (float)((double)lcg(s) / 2147483648.0 * 2.0 - 1.0); }

Test(simd, smallgemm_matches_a_double_reference_and_every_level_gives_the_same_bits) {
    fgt_small_gemm_check(FG_F32, fgt_sanitize() ? 40 : 300, 71, 140, 12345);
}

/* ---------------------------------------------------------------------------------------------
 * the pool
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    atomic_int *hits;
    atomic_int bad_worker;
    atomic_int max_worker;
    int threads;
    atomic_int nested_calls;
} pool_probe;

static void probe_item(void *ctx, int64_t item, int worker) {
    pool_probe *p = ctx;
    atomic_fetch_add(&p->hits[item], 1);
    if (worker < 0 || worker >= p->threads) atomic_store(&p->bad_worker, 1);
    int mw = atomic_load(&p->max_worker);
    while (worker > mw && !atomic_compare_exchange_weak(&p->max_worker, &mw, worker)) {}
    for (volatile int spin = 0; spin < 2000; spin++) {} /* long enough for the threads to share items */
}

static void nested_inner(void *ctx, int64_t item, int worker) {
    pool_probe *p = ctx;
    (void)item;
    if (worker != 0) atomic_store(&p->bad_worker, 1); /* a nested run is serial, on worker 0 */
    atomic_fetch_add(&p->nested_calls, 1);
}
static void nested_outer(void *ctx, int64_t item, int worker) {
    pool_probe *p = ctx;
    (void)worker;
    atomic_fetch_add(&p->hits[item], 1);
    cr_assert(fg_pool_in_run(), "fg_pool_in_run() is 0 inside an item");
    fg_pool_run(3, nested_inner, p, 0);
}

Test(simd, pool_runs_every_item_once_for_any_thread_count) {
    const int64_t n = 1000;
    atomic_int *hits = malloc((size_t)n * sizeof(atomic_int));
    for (int threads = 1; threads <= 4; threads++) {
        fg_pool_set_threads(threads);
        cr_assert_eq(fg_pool_threads(), threads, "fg_pool_threads %d after setting %d", fg_pool_threads(), threads);
        for (int rep = 0; rep < 5; rep++) {
            for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
            pool_probe p = {.hits = hits, .threads = threads};
            fg_pool_run(n, probe_item, &p, 0);
            for (int64_t i = 0; i < n; i++)
                cr_assert_eq(atomic_load(&hits[i]), 1, "threads %d: item %lld ran %d times", threads, (long long)i,
                             atomic_load(&hits[i]));
            cr_assert_eq(atomic_load(&p.bad_worker), 0, "threads %d: a worker id outside [0, %d)", threads, threads);
        }
        /* nested runs are serial and complete */
        for (int64_t i = 0; i < 10; i++) atomic_store(&hits[i], 0);
        pool_probe p = {.hits = hits, .threads = threads};
        fg_pool_run(10, nested_outer, &p, FG_POOL_BLAS_SERIAL);
        for (int64_t i = 0; i < 10; i++)
            cr_assert_eq(atomic_load(&hits[i]), 1, "nested: outer item %lld", (long long)i);
        cr_assert_eq(atomic_load(&p.nested_calls), 30, "nested: %d inner calls, want 30", atomic_load(&p.nested_calls));
        cr_assert_eq(atomic_load(&p.bad_worker), 0, "nested: an inner call ran on a worker other than 0");
        cr_assert(!fg_pool_in_run(), "fg_pool_in_run() is 1 after the run");
    }
    fg_pool_run(0, probe_item, NULL, 0); /* nothing to do: fn is never called (ctx NULL would crash) */
    fg_pool_set_threads(0);
    free(hits);
}

/* Items that wait until `want` distinct workers have entered one, or until 10 s after the first
 * item started: a pool that runs everything on one thread never gets there. */
typedef struct {
    atomic_int seen_mask;
    int want;
    atomic_llong deadline_ms; /* 0 until the first item starts */
} gather_probe;

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void gather_item(void *ctx, int64_t item, int worker) {
    gather_probe *g = ctx;
    (void)item;
    long long zero = 0;
    atomic_compare_exchange_strong(&g->deadline_ms, &zero, now_ms() + 10000);
    atomic_fetch_or(&g->seen_mask, 1 << worker);
    while (__builtin_popcount((unsigned)atomic_load(&g->seen_mask)) < g->want &&
           now_ms() < atomic_load(&g->deadline_ms))
        usleep(100);
}

Test(simd, pool_runs_items_on_more_than_one_thread) {
    for (int threads = 2; threads <= 3; threads++) {
        fg_pool_set_threads(threads);
        gather_probe g = {.want = threads};
        fg_pool_run(64, gather_item, &g, 0);
        int got = __builtin_popcount((unsigned)atomic_load(&g.seen_mask));
        cr_expect_eq(got, threads, "%d threads set, but items ran on %d of them (mask %#x)", threads, got,
                     (unsigned)atomic_load(&g.seen_mask));
    }
    fg_pool_set_threads(0);
}

Test(simd, setting_a_level_makes_it_active) {
    const fg_simd_level best = fg_simd_detect();
    for (int l = 0; l < FG_SIMD_LEVEL_COUNT; l++) {
        fg_simd_level before = fg_simd_set((fg_simd_level)l);
        fg_simd_level want = (fg_simd_level)l <= best ? (fg_simd_level)l : best;
        cr_expect_eq(fg_simd_active(), want, "fg_simd_set(%s): active is %s, want %s", fg_simd_name((fg_simd_level)l),
                     fg_simd_name(fg_simd_active()), fg_simd_name(want));
        fg_simd_set(before);
    }
}

Test(simd, pool_works_in_a_forked_child) {
    const int64_t n = 200;
    atomic_int *hits = malloc((size_t)n * sizeof(atomic_int));
    fg_pool_set_threads(2);
    pool_probe p = {.hits = hits, .threads = 2};
    for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
    fg_pool_run(n, probe_item, &p, 0); /* the parent's workers exist now */
    fflush(NULL);
    pid_t pid = fork();
    cr_assert(pid >= 0, "fork failed");
    if (pid == 0) {
        for (int64_t i = 0; i < n; i++) atomic_store(&hits[i], 0);
        fg_pool_run(n, probe_item, &p, 0); /* would hang if the child waited for the parent's workers */
        int ok = 1;
        for (int64_t i = 0; i < n; i++) ok &= atomic_load(&hits[i]) == 1;
        _exit(ok ? 0 : 3);
    }
    int status = 0, done = 0;
    for (int t = 0; t < 600 && !done; t++) {
        done = waitpid(pid, &status, WNOHANG) == pid;
        if (!done) usleep(50000);
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        cr_assert_fail("the forked child's pool run did not finish in 30 s");
    }
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    fg_pool_set_threads(0);
    free(hits);
}

/* ---------------------------------------------------------------------------------------------
 * flash attention: the same bits for any thread count and any instruction set
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    float *o, *lse, *lo, *dq, *dk, *dv;
} flash_out;

static void flash_run_once(const fg_attn_problem *pr, const float *q, const float *k, const float *v, const float *dout,
                           flash_out *r) {
    const size_t nq = (size_t)(pr->B * pr->H * pr->Nq * pr->d),
                 nk = (size_t)(pr->B * pr->var.n_kv_heads * pr->Nk * pr->d);
    const size_t nl = (size_t)(pr->B * pr->H * pr->Nq);
    r->o = malloc(nq * sizeof(float));
    r->lse = malloc(nl * sizeof(float));
    r->lo = malloc(nl * sizeof(float));
    r->dq = calloc(nq, sizeof(float));
    r->dk = calloc(nk, sizeof(float));
    r->dv = calloc(nk, sizeof(float));
    cr_assert_eq(fg_attn_flash_forward_lo_f32(r->o, r->lse, r->lo, q, k, v, pr), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_attn_flash_backward_lo_f32(r->dq, r->dk, r->dv, dout, q, k, v, r->o, r->lse, r->lo, pr), FG_OK,
                 "%s", fg_last_error());
}
static void flash_out_free(flash_out *r) {
    free(r->o);
    free(r->lse);
    free(r->lo);
    free(r->dq);
    free(r->dk);
    free(r->dv);
}

static double softcap_mod(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)b, (void)h, (void)i, (void)j, (void)u;
    return 4.0 * tanh(s / 4.0);
}
static double softcap_mod_grad(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    (void)b, (void)h, (void)i, (void)j, (void)u;
    const double t = tanh(s / 4.0);
    return 1 - t * t;
}

Test(simd, flash_is_bit_identical_for_any_thread_count_and_instruction_set) {
    const int small = fgt_sanitize();
    const fgt_flash_case cases[] = {
        {"plain", 2, 4, 4, small ? 70 : 200, small ? 70 : 200, 64, 0, 0, 0, 0, 0, 0, 0},
        {"causal, ragged blocks", 2, 2, 2, small ? 45 : 133, small ? 60 : 150, 24, 1, 0, 0, 0, 0, 32, 48},
        {"gqa window alibi dropout", 1, 4, 2, small ? 40 : 97, small ? 40 : 97, 16, 1, 1, 1, 0.2, 0, 16, 16},
        {"softcap, d not a multiple of 8", 2, 3, 3, 37, 41, 13, 0, 0, 0, 0, 3.0, 8, 16},
    };
    fgt_flash_bit_identity(FG_F32, cases, sizeof cases / sizeof cases[0], 777);
}

/* Flash attention's two tables of tile operations (ops/cpu/flash_tiles.h) keep one contract: on
 * the same tile, the x86 table (at every level the CPU has) and the portable float32 one agree —
 * exactly where both compute the same operations (the max, dS, moves), to a few float32 ulps where
 * their products or exps are rounded differently. The x86 softmax runs on the transposed tile. */
static float rel_diff(float a, float b) { return fabsf(a - b) / fmaxf(fabsf(b), 1e-30f); }

Test(simd, flash_tile_tables_agree_on_every_operation) {
    const fg_flash_ops_f32 *px = &fg_flash_x86_f32, *pp = &fg_flash_portable_f32;
    cr_assert(px->packs && !pp->packs && px->transpose && !pp->transpose, "packs / transpose of the two tables");
    enum { NQ = 19, NK = 21, D = 13 };
    uint64_t seed = 4242;
    float S[NQ * NK], ST[NK * NQ], A[NQ * D], Bm[D * NK], BT[NK * D], C1[NQ * NK], C2[NQ * NK], rsc[NQ];
    for (int i = 0; i < NQ * NK; i++) S[i] = 6 * frand(&seed);
    for (int r = 0; r < NQ; r++) S[r * NK + (r * 5) % NK] = -INFINITY; /* masked scores */
    for (int j = 0; j < NK; j++) S[3 * NK + j] = -INFINITY;            /* row 3 sees no key */
    for (int i = 0; i < NQ * D; i++) A[i] = frand(&seed);
    for (int i = 0; i < D * NK; i++) Bm[i] = frand(&seed);
    for (int r = 0; r < NQ; r++) rsc[r] = 1 + frand(&seed);
    const fg_simd_level best = fg_simd_detect();
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
        fg_simd_set((fg_simd_level)lv);
        const char *ln = fg_simd_name((fg_simd_level)lv);
        /* transpose: moves only, and back again */
        px->transpose(ST, NQ, S, NK, NQ, NK);
        for (int r = 0; r < NQ; r++)
            for (int j = 0; j < NK; j++)
                cr_assert(memcmp(&ST[j * NQ + r], &S[r * NK + j], sizeof(float)) == 0, "%s: transpose (%d, %d)", ln, r,
                          j);
        /* gemm: C = rowscale ∘ C + 0.5 · A B, with B given transposed to the portable table */
        px->transpose(BT, D, Bm, NK, D, NK);
        for (int i = 0; i < NQ * NK; i++) C1[i] = C2[i] = frand(&seed);
        px->gemm(0, 0, NQ, NK, D, 0.5f, A, D, Bm, NK, C1, NK, rsc, 1);
        pp->gemm(0, 1, NQ, NK, D, 0.5f, A, D, BT, D, C2, NK, rsc, 1);
        for (int i = 0; i < NQ * NK; i++)
            cr_assert(fabsf(C1[i] - C2[i]) <= 1e-5f * (1 + fabsf(C2[i])), "%s: gemm [%d] %a vs %a", ln, i, C1[i],
                      C2[i]);
        /* the online softmax: a first block from m = -inf, then a second one */
        float mx[NQ], lx[NQ], ax[NQ], mp[NQ], lp[NQ], ap[NQ], Sp[NQ * NK];
        for (int r = 0; r < NQ; r++) mx[r] = mp[r] = -INFINITY, lx[r] = lp[r] = 0;
        for (int step = 0; step < 2; step++) {
            memcpy(Sp, S, sizeof Sp);
            for (int i = 0; step && i < NQ * NK; i++) Sp[i] += 1.5f * frand(&seed); /* -inf stays */
            px->transpose(ST, NQ, Sp, NK, NQ, NK);
            px->softmax(ST, NQ, NQ, NK, mx, lx, ax);
            pp->softmax(Sp, NK, NQ, NK, mp, lp, ap);
            for (int r = 0; r < NQ; r++) {
                cr_assert(memcmp(&mx[r], &mp[r], sizeof(float)) == 0, "%s step %d: m[%d] %a vs %a", ln, step, r, mx[r],
                          mp[r]);
                cr_assert(rel_diff(lx[r], lp[r]) <= 4e-7f || (lx[r] == 0 && lp[r] == 0), "%s step %d: l[%d] %a vs %a",
                          ln, step, r, lx[r], lp[r]);
                if (mp[r] != -INFINITY) /* a row that has seen no key: alpha is 0 (x86) or 1 (portable), O is 0 */
                    cr_assert(fabsf(ax[r] - ap[r]) <= 4e-7f * ap[r], "%s step %d: alpha[%d] %a vs %a", ln, step, r,
                              ax[r], ap[r]);
                for (int j = 0; j < NK; j++)
                    cr_assert(fabsf(ST[j * NQ + r] - Sp[r * NK + j]) <= 4e-7f * fmaxf(Sp[r * NK + j], 1e-30f) ||
                                  ST[j * NQ + r] == Sp[r * NK + j],
                              "%s step %d: P(%d, %d) %a vs %a", ln, step, r, j, ST[j * NQ + r], Sp[r * NK + j]);
            }
        }
        /* exp rows: P = exp((S - L) - lo), 0 in a row with L = -inf */
        float L[NQ], lo[NQ];
        for (int r = 0; r < NQ; r++) L[r] = r == 3 ? -INFINITY : 4 + frand(&seed), lo[r] = 1e-7f * frand(&seed);
        memcpy(C1, S, sizeof C1);
        memcpy(C2, S, sizeof C2);
        px->exp_rows(C1, NK, NQ, NK, L, lo);
        pp->exp_rows(C2, NK, NQ, NK, L, lo);
        for (int i = 0; i < NQ * NK; i++)
            cr_assert(fabsf(C1[i] - C2[i]) <= 4e-7f * C2[i] || C1[i] == C2[i], "%s: exp_rows [%d] %a vs %a", ln, i,
                      C1[i], C2[i]);
        /* dS = P ∘ (dP − D): the same elementwise arithmetic, so the same bits */
        float dS1[NQ * NK], dS2[NQ * NK], Dr[NQ];
        for (int i = 0; i < NQ * NK; i++) dS1[i] = dS2[i] = frand(&seed);
        for (int r = 0; r < NQ; r++) Dr[r] = frand(&seed);
        px->ds_rows(dS1, C2, NK, NQ, NK, Dr);
        pp->ds_rows(dS2, C2, NK, NQ, NK, Dr);
        cr_assert(memcmp(dS1, dS2, sizeof dS1) == 0, "%s: ds_rows differs", ln);
        /* D_r = Σ_c a[r, c] b[r, c] summed in double in column order: the same bits as that loop here,
         * for both dtypes, with and without ragged rows and columns */
        enum { RR = 19, DMAX = 64 };
        float fa[RR * DMAX], fb[RR * DMAX], fx[RR], fp[RR];
        double da[RR * DMAX], db[RR * DMAX], dx[RR], dp[RR];
        for (int i = 0; i < RR * DMAX; i++) {
            fa[i] = frand(&seed), fb[i] = frand(&seed);
            da[i] = (double)frand(&seed) / 3, db[i] = (double)frand(&seed) / 7;
        }
        const int dims[] = {13, 16, DMAX};
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
            const int dd = dims[di];
            for (int rows = RR - 3; rows <= RR; rows += 3) { /* 16 = two blocks of eight, 19 = a ragged last one */
                /* b's rows DMAX apart (a head in packed rows), a's dd apart */
                px->row_dots(fx, fa, dd, fb, DMAX, rows, dd);
                pp->row_dots(fp, fa, dd, fb, DMAX, rows, dd);
                fg_flash_x86_f64.row_dots(dx, da, dd, db, DMAX, rows, dd);
                fg_flash_portable_f64.row_dots(dp, da, dd, db, DMAX, rows, dd);
                for (int r = 0; r < rows; r++) {
                    double sf = 0, sd = 0;
                    for (int c = 0; c < dd; c++) {
                        sf += (double)fa[r * dd + c] * (double)fb[r * DMAX + c];
                        const double prod = da[r * dd + c] * db[r * DMAX + c]; /* rounded, then added */
                        sd += prod;
                    }
                    const float rf = (float)sf;
                    cr_assert(memcmp(&fx[r], &rf, sizeof rf) == 0 && memcmp(&fp[r], &rf, sizeof rf) == 0,
                              "%s: row_dots f32 d %d rows %d row %d: %a, %a vs %a", ln, dd, rows, r, fx[r], fp[r], rf);
                    cr_assert(memcmp(&dx[r], &sd, sizeof sd) == 0 && memcmp(&dp[r], &sd, sizeof sd) == 0,
                              "%s: row_dots f64 d %d rows %d row %d: %a, %a vs %a", ln, dd, rows, r, dx[r], dp[r], sd);
                }
            }
        }
    }
    fg_simd_set(best);
}

/* User callbacks need not be thread-safe: flash calls them on the calling thread only. */
static pthread_t caller_thread;
static atomic_int foreign_calls, total_calls;
static double thread_checked_mod(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    atomic_fetch_add(&total_calls, 1);
    if (!pthread_equal(pthread_self(), caller_thread)) atomic_fetch_add(&foreign_calls, 1);
    return softcap_mod(s, b, h, i, j, u);
}
static double thread_checked_grad(double s, int64_t b, int64_t h, int64_t i, int64_t j, void *u) {
    if (!pthread_equal(pthread_self(), caller_thread)) atomic_fetch_add(&foreign_calls, 1);
    return softcap_mod_grad(s, b, h, i, j, u);
}

Test(simd, flash_calls_user_callbacks_on_the_calling_thread_only) {
    fg_pool_set_threads(2);
    caller_thread = pthread_self();
    atomic_store(&foreign_calls, 0);
    atomic_store(&total_calls, 0);
    fg_attn_opts o = fg_attn_defaults();
    o.custom.score_mod = thread_checked_mod;
    o.custom.score_mod_grad = thread_checked_grad;
    o.block_q = o.block_k = 16;
    fg_attn_problem pr;
    const int64_t B = 2, H = 2, N = 64, d = 8;
    cr_assert_eq(fg_attn_problem_init(&pr, B, H, N, N, d, &o), FG_OK, "%s", fg_last_error());
    const size_t n = (size_t)(B * H * N * d);
    float *q = malloc(n * sizeof(float)), *k = malloc(n * sizeof(float)), *v = malloc(n * sizeof(float)),
          *dout = malloc(n * sizeof(float));
    uint64_t seed = 5;
    for (size_t i = 0; i < n; i++) {
        q[i] = frand(&seed);
        k[i] = frand(&seed);
        v[i] = frand(&seed);
        dout[i] = frand(&seed);
    }
    flash_out r;
    flash_run_once(&pr, q, k, v, dout, &r);
    cr_expect_gt(atomic_load(&total_calls), 0, "score_mod was never called");
    cr_expect_eq(atomic_load(&foreign_calls), 0, "%d callback calls came from a pool thread",
                 atomic_load(&foreign_calls));
    flash_out_free(&r);
    free(q);
    free(k);
    free(v);
    free(dout);
    fg_pool_set_threads(0);
}

/* The exp's bits are pinned, not only its accuracy: a change of a coefficient or of the evaluation
 * order that stays within the 1-ulp bound still changes results (and every run's bits since), and
 * fails here. The reference is written out below from the published constants (Cephes-style
 * minimax polynomial on [−ln2/2, ln2/2], Cody–Waite split of ln 2), not taken from vexp.h. */
static float pinned_exp(float x) {
    if (x != x) return x + x;
    if (x < -87.3f) return 0.0f;
    if (x > 89.0f) x = 89.0f;
    const float n = fmaf(x, 0x1.715476p+0f, 12582912.0f) - 12582912.0f;
    float r = fmaf(-n, 0x1.62e430p-1f, x);
    r = fmaf(-n, -0x1.05c610p-29f, r);
    float p = fmaf(0x1.6a244cp-10f, r, 0x1.1239d4p-7f);
    p = fmaf(p, r, 0x1.5558f2p-5f);
    p = fmaf(p, r, 0x1.555492p-3f);
    p = fmaf(p, r, 0x1.fffffcp-2f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    const int32_t ni = (int32_t)n, n1 = ni >> 1;
    const uint32_t a = (uint32_t)(n1 + 127) << 23, b = (uint32_t)(ni - n1 + 127) << 23;
    float fa, fb;
    memcpy(&fa, &a, 4);
    memcpy(&fb, &b, 4);
    return (p * fa) * fb;
}

Test(simd, vexp_bits_are_pinned_on_every_level) {
    enum { N = 20000 };
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) x[i] = -90.0f + 180.0f * (float)i / (float)N + 1e-3f * (float)(i % 7);
    const fg_simd_level best = fg_simd_detect();
    for (int lv = FG_SIMD_SCALAR; lv <= (int)best; lv++) {
        fg_simd_set((fg_simd_level)lv);
        fg_vexp_f32(y, x, N);
        int bad = -1;
        for (int i = 0; i < N && bad < 0; i++) {
            const float r = pinned_exp(x[i]);
            if (memcmp(&r, &y[i], 4)) bad = i;
        }
        cr_expect_eq(bad, -1, "%s: exp(%.9g) = %.9g, the pinned formula gives %.9g (first of the inputs to differ)",
                     fg_simd_name((fg_simd_level)lv), bad >= 0 ? x[bad] : 0, bad >= 0 ? y[bad] : 0,
                     bad >= 0 ? pinned_exp(x[bad]) : 0);
    }
    fg_simd_set(best);
    free(x);
    free(y);
}
