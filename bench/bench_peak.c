/* bench_peak.c — `flashgrad bench peak`: this machine's float32 FMA peak and memory bandwidth, on
 * the threads flashgrad's pool uses, the ceiling every other figure is a fraction of.
 *
 * FMA peak: fg_fma_peak_measure (ops/cpu/peak.h says how), the best of --rounds rounds of ITERS
 * steps. Benchmarks and `train` use the quick cached form of the same measurement,
 * fg_fma_peak_gflops. The bandwidth takes the best of at most 5 of the rounds.
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
#include "ops/cpu.h"

#define ITERS 2500000L /* FMA steps per chain per round: ~10 ms on one core; short rounds, many of them, so that
                             * the best one likely ran while no other process held the cores */

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

int fg_bench_peak(int argc, char **argv) {
    fg_flag f[] = {
        {.name = "--threads",
         .type = FG_FLAG_INT,
         .meta = "N",
         .help = "threads of flashgrad's pool, at most 64 (default: all cores)",
         .lo = 1,
         .hi = 64},
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
    f[1].i = 40;
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

    const double gflops = fg_fma_peak_measure(ITERS, (int)f[1].i);
    printf("fma peak: %.1f GFLOP/s float32 (%s, %d threads, %.1f per thread; best of %lld rounds)\n", gflops,
           fg_simd_name(level), threads, gflops / threads, (long long)f[1].i);

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
    const int triads = f[1].i < 5 ? (int)f[1].i : 5;
    for (int r = 0; r < triads + 1; r++) {
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
