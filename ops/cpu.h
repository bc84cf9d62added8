/* cpu.h — the CPU runtime, the CPU device's public controls, for programs, train/ and the Python
 * shim: the thread pool's size, its parallel loop and an outside team, the SIMD level the kernels
 * run at, the float32 FMA peak, BLAS's threads, which GEMM library the build has and the flash
 * kernels' profile. Its code is outside ops/cpu/ (ops/cpu_threadpool.c, ops/cpu_simd.c,
 * ops/cpu_peak.c, ops/cpu_runtime.c); ops/cpu/ holds the kernels and is private to ops/. Outside
 * ops/, this is the one header about the CPU to include, and nothing calls into ops/cpu/ or
 * declares a BLAS function of its own (tests/lint_layers.sh checks both). ops/cpu/'s headers
 * include this one and say more of how each piece works (ops/cpu/threadpool.h holds the pool's
 * full contract, ops/cpu/peak.h the peak's method).
 */
#ifndef FG_CPU_H
#define FG_CPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the thread pool (ops/cpu/threadpool.h) ----
 * Thread count: FG_NUM_THREADS in the environment when set (1 to 64), else the CPUs this process
 * may run on, at most FG_POOL_MAX_THREADS; fg_pool_set_threads overrides both. */
#define FG_POOL_MAX_THREADS 64

typedef void (*fg_pool_fn)(void *ctx, int64_t item, int worker);

/* FG_POOL_BLAS_SERIAL: OpenBLAS runs on one thread during the run, for loops whose items call BLAS. */
enum { FG_POOL_BLAS_SERIAL = 1 };

/* The threads a run uses, the caller included (>= 1). */
int fg_pool_threads(void);
/* Set the thread count (1 .. FG_POOL_MAX_THREADS; 0 = the default above). Workers are started
 * lazily by the next run. Not to be called while a run is in progress. */
void fg_pool_set_threads(int n);
/* Run fn(ctx, item, worker) once for every item in [0, n_items), in increasing order, on whichever
 * thread is free; worker in [0, fg_pool_threads()) is unique among the calls running at one time
 * (per-thread scratch). Returns when all have returned. n_items <= 0 does nothing. */
void fg_pool_run(int64_t n_items, fg_pool_fn fn, void *ctx, unsigned flags);

/* An outside team to run the loops on instead of the pool's own workers: the threads of a host
 * program's parallel runtime (flashgrad.torch hands it PyTorch's OpenMP threads), which would
 * otherwise compete for the cores with the pool's. team(body, data, n) must call body(data, t)
 * once on each of m threads at the same time, 1 <= m <= n, with distinct t in [0, m) and t = 0 on
 * the calling thread, and return when every call has returned. The contract of fg_pool_run holds
 * as it is (n = min(fg_pool_threads(), n_items); worker = t). NULL: the pool's own workers again.
 * Not to be called while a run is in progress. */
typedef void (*fg_pool_team_fn)(void (*body)(void *data, int t), void *data, int n);
void fg_pool_set_team(fg_pool_team_fn team);

/* ---- the SIMD level (ops/cpu/simd.h) ----
 * FG_SIMD_AVX512 (AVX-512F), FG_SIMD_AVX2 (AVX2 + FMA), FG_SIMD_SCALAR (plain C). The environment
 * variable FG_SIMD=scalar|avx2|avx512 caps the choice; every level computes the same bits. */
typedef enum { FG_SIMD_SCALAR = 0, FG_SIMD_AVX2 = 1, FG_SIMD_AVX512 = 2, FG_SIMD_LEVEL_COUNT } fg_simd_level;

/* "scalar", "avx2", "avx512". */
const char *fg_simd_name(fg_simd_level level);
/* The best level this CPU and this build support (ignores FG_SIMD and fg_simd_set). */
fg_simd_level fg_simd_detect(void);
/* The level the kernels use now: fg_simd_detect() capped by FG_SIMD (read once) or by the last
 * fg_simd_set(). Cheap after the first call. */
fg_simd_level fg_simd_active(void);
/* Cap the level (a request above what the CPU has gives the CPU's best); returns the level that
 * was active before. For tests and benchmarks: not to be called while kernels run in other
 * threads. */
fg_simd_level fg_simd_set(fg_simd_level level);

/* ---- the float32 FMA peak (ops/cpu/peak.h), what MFU and "% of peak" divide by ---- */
/* One measurement: `rounds` timed rounds (>= 1) of `iters` FMA steps per chain on every thread of
 * the pool (fg_pool_threads()) at the active SIMD level, after 0.1 s of untimed ones; returns the
 * best GFLOP/s of the rounds that ran every thread side by side, each on a core of its own
 * (ops/cpu/peak.h; > 0). A round of 20,000,000 iters takes ~0.1 s per core with AVX2. */
double fg_fma_peak_measure(long iters, int rounds);

/* The float32 FMA peak in GFLOP/s for the pool's current thread count and SIMD level: measured
 * once (about 150 ms: 0.1 s of untimed rounds, then the best of 40 rounds of 500,000 iters, short
 * rounds so that one of them likely runs while no other process holds the cores) on the first call, and again only when the
 * thread count or the SIMD level has changed since; later calls return the cached figure.
 * Thread-safe. Benchmarks divide their GFLOP/s by it; `train` divides its model FLOPs by it. */
double fg_fma_peak_gflops(void);

/* From now on, fg_fma_peak_gflops returns `gflops` (> 0) for the pool's current thread count and
 * SIMD level instead of measuring (a figure measured before and kept, or given by the user); a
 * change of either measures again. Thread-safe. */
void fg_fma_peak_set(double gflops);

/* Lanes of one vector at a SIMD level: 16, 8 or 1. */
int fg_simd_float_lanes(fg_simd_level level);

/* ---- BLAS (OpenBLAS, or the build's fallback GEMM in ops/cpu/compat) ----
 * Its own threads, for BLAS calls made outside the pool's loops (the pool runs BLAS on one thread
 * inside a loop that asks for it: FG_POOL_BLAS_SERIAL). */
/* Set the thread count of BLAS (openblas_set_num_threads). */
void fg_blas_set_threads(int n);
/* The thread count of BLAS now (openblas_get_num_threads). */
int fg_blas_threads(void);
/* The kernel BLAS picked for this CPU, as OpenBLAS names it ("Haswell", "Prescott"; the fallback
 * says so). Static storage. */
const char *fg_blas_core_name(void);

/* ---- oneDNN (ops/cpu/dnnl_gemm.h) ---- */
/* 1 when flashgrad was built with oneDNN, else 0. */
int fg_dnnl_available(void);
/* The oneDNN version, threading runtime and instruction set, as "2.6.3 (OpenMP, isa avx2)", or
 * "none". Static storage; not thread-safe on its first call. */
const char *fg_dnnl_version(void);

/* ---- the flash kernels' phase profile (ops/cpu/flash_profile.h), for benchmarks ----
 * Between start and stop, every float32 and float64 CPU flash call charges the time its threads
 * spend to the phases below (time stamp counter cycles converted to seconds; thread time, summed
 * over threads) and counts the floating-point operations of the tile products. Costs a few
 * percent while on, nothing measurable while off. Not to be started or stopped during a call. */
typedef enum {
    FG_FLASH_FWD_SETUP, FG_FLASH_FWD_MASK, FG_FLASH_FWD_QK, FG_FLASH_FWD_SOFTMAX, FG_FLASH_FWD_DROPOUT,
    FG_FLASH_FWD_PV, FG_FLASH_FWD_EPILOGUE,
    FG_FLASH_BWD_D, FG_FLASH_BWD_PACK, FG_FLASH_BWD_MASK, FG_FLASH_BWD_QK, FG_FLASH_BWD_EXP,
    FG_FLASH_BWD_DROPOUT, FG_FLASH_BWD_DV, FG_FLASH_BWD_DP, FG_FLASH_BWD_DS, FG_FLASH_BWD_DQ, FG_FLASH_BWD_DK,
    FG_FLASH_PHASE_COUNT
} fg_flash_phase;
typedef struct {
    double wall_s;                         /* from start to stop */
    double seconds[FG_FLASH_PHASE_COUNT];  /* thread time in each phase */
    double flops[FG_FLASH_PHASE_COUNT];    /* the tile products' operations (0 for other phases) */
} fg_flash_profile;
void fg_flash_profile_start(void);
void fg_flash_profile_stop(fg_flash_profile *out);
/* a phase's name for a report ("fwd S = Q K^T", ...) */
const char *fg_flash_phase_name(fg_flash_phase p);

#ifdef __cplusplus
}
#endif
#endif /* FG_CPU_H */
