/* bench_peak.c — `flashgrad bench peak`: this machine's float32 FMA peak and memory bandwidth, on
 * the threads flashgrad's pool uses, the ceiling every other figure is a fraction of.
 *
 * FMA peak: each thread runs 12 independent chains of fused multiply-adds on vector registers
 * (x = x * a + b per chain; 12 chains hide the FMA latency of 4 cycles on two ports), so the
 * count of FMAs per second is what the cores can issue at most. Vector width by the active SIMD
 * level: 16 floats (AVX-512), 8 (AVX2+FMA), or 1 (scalar fmaf, only to have a number). One FMA is
 * 2 flops. The loop over the chains is unrolled completely (#pragma GCC unroll) so that they live in
 * registers: left as a loop over an array, every FMA goes through memory and the figure is the
 * store-to-load latency's, a fraction of the peak. The best of several timed rounds is reported
 * (the peak, not the typical value).
 *
 * Bandwidth: a STREAM-like triad a[i] = b[i] + s * c[i] over arrays far larger than the caches,
 * split over the pool; bytes counted are 3 × 4 per element (two reads, one write), as STREAM does.
 * The arrays are touched once before timing (first-touched memory is slow here).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/cli_util.h"
#include "cli/flags.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/threadpool.h"

#if FG_SIMD_X86
#include <immintrin.h>
#endif

#define CHAINS 12
#define ITERS 20000000L /* FMA steps per chain per round: ~0.1 s on one core */

typedef struct {
    long iters;
    fg_simd_level level;
    double sink[64]; /* per worker, so the chains are not optimized away */
} peak_job;

#if FG_SIMD_X86
__attribute__((target("avx512f"))) static double chains_avx512(long n) {
    __m512 x[CHAINS];
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < CHAINS; c++) x[c] = _mm512_set1_ps(1.0f + 0.01f * (float)c);
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS; c++) x[c] = _mm512_fmadd_ps(x[c], a, b);
    }
    __m512 s = x[0];
    for (int c = 1; c < CHAINS; c++) s = _mm512_add_ps(s, x[c]);
    return (double)_mm512_reduce_add_ps(s);
}
__attribute__((target("avx2,fma"))) static double chains_avx2(long n) {
    __m256 x[CHAINS];
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int c = 0; c < CHAINS; c++) x[c] = _mm256_set1_ps(1.0f + 0.01f * (float)c);
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS; c++) x[c] = _mm256_fmadd_ps(x[c], a, b);
    }
    __m256 s = x[0];
    for (int c = 1; c < CHAINS; c++) s = _mm256_add_ps(s, x[c]);
    float f[8];
    _mm256_storeu_ps(f, s);
    return (double)(f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7]);
}
#endif

static double chains_scalar(long n) {
    float x[CHAINS];
    for (int c = 0; c < CHAINS; c++) x[c] = 1.0f + 0.01f * (float)c;
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 12
        for (int c = 0; c < CHAINS; c++) x[c] = __builtin_fmaf(x[c], 0.999999f, 1e-7f);
    }
    double s = 0;
    for (int c = 0; c < CHAINS; c++) s += x[c];
    return s;
}

static int lanes(fg_simd_level l) { return l == FG_SIMD_AVX512 ? 16 : l == FG_SIMD_AVX2 ? 8 : 1; }

static void peak_item(void *ctx, int64_t item, int worker) {
    peak_job *j = ctx;
    (void)item;
    double r;
#if FG_SIMD_X86
    if (j->level == FG_SIMD_AVX512)
        r = chains_avx512(j->iters);
    else if (j->level == FG_SIMD_AVX2)
        r = chains_avx2(j->iters);
    else
        r = chains_scalar(j->iters);
#else
    r = chains_scalar(j->iters);
#endif
    j->sink[worker & 63] += r;
}

typedef struct {
    float *a;
    const float *b, *c;
    int64_t n, per;
} triad_job;

static void triad_item(void *ctx, int64_t item, int worker) {
    triad_job *j = ctx;
    (void)worker;
    int64_t lo = item * j->per, hi = lo + j->per < j->n ? lo + j->per : j->n;
    for (int64_t i = lo; i < hi; i++) j->a[i] = j->b[i] + 3.0f * j->c[i];
}

double fg_bench_fma_peak(int rounds) {
    const fg_simd_level level = fg_simd_active();
    peak_job pj = {.iters = ITERS, .level = level};
    fg_pool_run(fg_pool_threads(), peak_item, &pj, 0); /* warm-up: wakes the workers, settles clocks */
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        double t0 = fg_now();
        fg_pool_run(fg_pool_threads(), peak_item, &pj, 0);
        double dt = fg_now() - t0;
        if (dt < best) best = dt;
    }
    volatile double keep = pj.sink[0];
    (void)keep;
    return 2.0 * CHAINS * lanes(level) * (double)ITERS * fg_pool_threads() / best / 1e9;
}

int fg_bench_peak(int argc, char **argv) {
    fg_flag f[] = {
        {.name = "--threads",
         .type = FG_FLAG_INT,
         .meta = "N",
         .help = "threads of flashgrad's pool (default: all cores)",
         .lo = 1,
         .hi = 1024},
        {.name = "--rounds",
         .type = FG_FLAG_INT,
         .meta = "N",
         .help = "timed rounds; the best is reported",
         .lo = 1,
         .hi = 1000},
        {.name = "--mib",
         .type = FG_FLAG_INT,
         .meta = "N",
         .help = "MiB per array of the bandwidth triad",
         .lo = 16,
         .hi = 1 << 16},
    };
    f[1].i = 5;
    f[2].i = 256;
    int rc = fg_flags_parse("bench peak", f, 3, argc, argv);
    if (rc == -1) {
        fg_flags_help(stdout, "bench peak", "[--threads N] [--rounds N] [--mib N]", f, 3);
        printf("\nThe float32 FMA peak (12 independent FMA chains per thread) and the triad memory bandwidth.\n");
        return 0;
    }
    if (rc) return rc;
    if (f[0].given) fg_pool_set_threads((int)f[0].i);
    const int threads = fg_pool_threads();
    const fg_simd_level level = fg_simd_active();
    fg_print_machine_line(stdout);

    const double peak = fg_bench_fma_peak((int)f[1].i);
    printf("fma peak: %.1f GFLOP/s float32 (%s, %d threads, %.1f per thread; best of %lld rounds)\n", peak,
           fg_simd_name(level), threads, peak / threads, (long long)f[1].i);

    const int64_t n = (int64_t)f[2].i << 18; /* MiB / 4 bytes */
    float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *c = malloc((size_t)n * 4);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        fprintf(stderr, "flashgrad bench peak: out of memory for 3 x %lld MiB\n", (long long)f[2].i);
        return 1;
    }
    for (int64_t i = 0; i < n; i++) {
        a[i] = 0;
        b[i] = (float)(i & 1023);
        c[i] = 1.0f;
    }
    triad_job tj = {a, b, c, n, (n + 4 * threads - 1) / (4 * threads)};
    const int64_t items = (n + tj.per - 1) / tj.per;
    double tbest = 1e30;
    for (int r = 0; r < (int)f[1].i + 1; r++) {
        double t0 = fg_now();
        fg_pool_run(items, triad_item, &tj, 0);
        double dt = fg_now() - t0;
        if (r > 0 && dt < tbest) tbest = dt; /* round 0 warms the pages */
    }
    printf("memory bandwidth: %.1f GB/s (triad over 3 x %lld MiB, %d threads)\n", 3.0 * 4.0 * (double)n / tbest / 1e9,
           (long long)f[2].i, threads);
    volatile double keep = a[n / 2];
    (void)keep;
    free(a);
    free(b);
    free(c);
    return 0;
}
