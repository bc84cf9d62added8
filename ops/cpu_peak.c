/* cpu_peak.c — the float32 FMA peak on the pool's threads (ops/cpu.h; the method in ops/cpu/peak.h).
 * Part of the CPU runtime, not a kernel file. */
#include "ops/cpu/peak.h"

#include <pthread.h>
#include <time.h>

#include "ops/cpu/threadpool.h"

#if FG_SIMD_X86
#include <immintrin.h>
#endif

#define CHAINS 12
#define QUICK_ITERS 500000L
#define QUICK_ROUNDS 40

/* The chains must live in registers: a loop over the array that the compiler keeps rolled puts
 * them on the stack, and each FMA then waits for a store and a load (several times slower). */
#if defined(__clang__)
#define UNROLLED _Pragma("clang loop unroll(full)")
#elif defined(__GNUC__)
#define UNROLLED _Pragma("GCC unroll 12")
#else
#define UNROLLED
#endif

typedef struct {
    long iters;
    fg_simd_level level;
    double sink[FG_POOL_MAX_THREADS]; /* per worker, so the chains are not optimized away */
    /* per item of the last round: when it started and ended, and which worker ran it */
    double start[FG_POOL_MAX_THREADS], end[FG_POOL_MAX_THREADS];
    int worker[FG_POOL_MAX_THREADS];
} peak_job;

#if FG_SIMD_X86
__attribute__((target("avx512f"))) static double chains_avx512(long n) {
    __m512 x[CHAINS];
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int c = 0; c < CHAINS; c++) x[c] = _mm512_set1_ps(1.0f + 0.01f * (float)c);
    for (long i = 0; i < n; i++)
        UNROLLED for (int c = 0; c < CHAINS; c++) x[c] = _mm512_fmadd_ps(x[c], a, b);
    __m512 s = x[0];
    for (int c = 1; c < CHAINS; c++) s = _mm512_add_ps(s, x[c]);
    return (double)_mm512_reduce_add_ps(s);
}
__attribute__((target("avx2,fma"))) static double chains_avx2(long n) {
    __m256 x[CHAINS];
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int c = 0; c < CHAINS; c++) x[c] = _mm256_set1_ps(1.0f + 0.01f * (float)c);
    for (long i = 0; i < n; i++)
        UNROLLED for (int c = 0; c < CHAINS; c++) x[c] = _mm256_fmadd_ps(x[c], a, b);
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
    for (long i = 0; i < n; i++)
        UNROLLED for (int c = 0; c < CHAINS; c++) x[c] = __builtin_fmaf(x[c], 0.999999f, 1e-7f);
    double s = 0;
    for (int c = 0; c < CHAINS; c++) s += x[c];
    return s;
}

int fg_simd_float_lanes(fg_simd_level l) { return l == FG_SIMD_AVX512 ? 16 : l == FG_SIMD_AVX2 ? 8 : 1; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void peak_item(void *ctx, int64_t item, int worker) {
    peak_job *j = ctx;
    j->start[item] = now_s();
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
    j->sink[worker] += r;
    j->worker[item] = worker;
    j->end[item] = now_s();
}

/* Whether the last round ran its `threads` items side by side: each on a worker of its own, and
 * all of them within about one item's time alone (`alone`: the best time of an item run by
 * itself; while unknown, at one moment). A worker that the system did not schedule in time is
 * left out of a run (ops/cpu/threadpool.h), and another thread then runs its item after its own;
 * two threads on one core (its hardware threads, or a VM's virtual CPUs that the host runs on one
 * core's two hardware threads for a while) share its FMA units, or take turns on it. Either way
 * the round times fewer cores than it counts, and would read as a fraction of the peak. */
#define ALONE_SLACK 1.3

static int side_by_side(const peak_job *j, int threads, double alone) {
    int seen[FG_POOL_MAX_THREADS] = {0};
    double first_start = j->start[0], last_start = j->start[0], first_end = j->end[0], last_end = j->end[0];
    for (int i = 0; i < threads; i++) {
        if (seen[j->worker[i]]++) return 0;
        if (j->start[i] < first_start) first_start = j->start[i];
        if (j->start[i] > last_start) last_start = j->start[i];
        if (j->end[i] < first_end) first_end = j->end[i];
        if (j->end[i] > last_end) last_end = j->end[i];
    }
    return alone > 0 ? last_end - first_start <= ALONE_SLACK * alone : last_start < first_end;
}

/* The best time of one item on the calling thread alone, over `n` more runs */
static double time_alone(peak_job *j, double best, int n) {
    for (int i = 0; i < n; i++) {
        fg_pool_run(1, peak_item, j, 0);
        const double t = j->end[0] - j->start[0];
        if (!(best > 0) || t < best) best = t;
    }
    return best;
}

/* Rounds that ran every thread side by side count; past the rounds asked for, more are timed
 * until one has (at most EXTRA_SECONDS more: a VM's cores stay shared for a second or two), and
 * only without one does the best of all count. */
#define EXTRA_SECONDS 3.0
#define WARM_SECONDS 0.1
#define ALONE_RUNS 5
#define ALONE_EVERY 8

double fg_fma_peak_measure(long iters, int rounds) {
    if (iters < 1) iters = 1;
    if (rounds < 1) rounds = 1;
    const int threads = fg_pool_threads();
    peak_job pj = {.iters = iters, .level = fg_simd_active()};
    /* untimed rounds first, WARM_SECONDS of them: they wake the workers, and a core that was idle
     * takes milliseconds to come back to its full clock */
    const double t_warm = now_s();
    do {
        fg_pool_run(threads, peak_item, &pj, 0);
    } while (now_s() - t_warm < WARM_SECONDS);
    double alone = threads > 1 ? time_alone(&pj, 0, ALONE_RUNS) : 0;
    double best = 1e30, best_any = 1e30;
    const double t_start = now_s();
    for (int r = 0; r < rounds || (best == 1e30 && now_s() - t_start < EXTRA_SECONDS); r++) {
        if (threads > 1 && r % ALONE_EVERY == ALONE_EVERY - 1) alone = time_alone(&pj, alone, 1);
        double t0 = now_s();
        fg_pool_run(threads, peak_item, &pj, 0);
        double dt = now_s() - t0;
        if (dt < best_any) best_any = dt;
        if (dt < best && side_by_side(&pj, threads, alone)) best = dt;
    }
    volatile double keep = pj.sink[0];
    (void)keep;
    if (best == 1e30) best = best_any;
    if (!(best > 0)) best = 1e-9;
    return 2.0 * CHAINS * fg_simd_float_lanes(pj.level) * (double)iters * threads / best / 1e9;
}

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static double cached;
static int cached_threads;
static fg_simd_level cached_level;

double fg_fma_peak_gflops(void) {
    pthread_mutex_lock(&cache_lock);
    const int threads = fg_pool_threads();
    const fg_simd_level level = fg_simd_active();
    if (!(cached > 0) || threads != cached_threads || level != cached_level) {
        cached = fg_fma_peak_measure(QUICK_ITERS, QUICK_ROUNDS);
        cached_threads = threads;
        cached_level = level;
    }
    double g = cached;
    pthread_mutex_unlock(&cache_lock);
    return g;
}

void fg_fma_peak_set(double gflops) {
    if (!(gflops > 0)) return;
    pthread_mutex_lock(&cache_lock);
    cached = gflops;
    cached_threads = fg_pool_threads();
    cached_level = fg_simd_active();
    pthread_mutex_unlock(&cache_lock);
}
