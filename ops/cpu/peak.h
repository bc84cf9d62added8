/* peak.h — this machine's float32 FMA peak on the threads of flashgrad's pool, the ceiling that
 * MFU (model FLOPs utilization) and every benchmark's "% of peak" are fractions of.
 *
 * Method: each of the pool's threads runs 12 independent chains of fused multiply-adds on vector
 * registers (x = x * a + b per chain; 12 chains cover the FMA latency of 4 cycles on two ports), so
 * the FMAs per second are what the cores can issue at most. Vector width by the active SIMD level
 * (ops/cpu/simd.h): 16 floats (AVX-512), 8 (AVX2+FMA), or 1 (scalar fmaf, only to have a number).
 * One FMA is 2 flops. The best of the timed rounds is the result (the peak, not the typical value),
 * after one untimed round that wakes the workers and settles the clocks.
 */
#ifndef FG_PEAK_H
#define FG_PEAK_H

#include "ops/cpu/simd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One measurement: `rounds` timed rounds (>= 1) of `iters` FMA steps per chain on every thread of
 * the pool (fg_pool_threads()) at the active SIMD level; returns the best round's GFLOP/s (> 0).
 * A round of 20,000,000 iters takes ~0.1 s per core with AVX2. */
double fg_fma_peak_measure(long iters, int rounds);

/* The float32 FMA peak in GFLOP/s for the pool's current thread count and SIMD level: measured
 * once (about 50-100 ms: the best of 40 rounds of 500,000 iters, short rounds so that one of them
 * likely runs while no other process holds the cores) on the first call, and again only when the
 * thread count or the SIMD level has changed since; later calls return the cached figure.
 * Thread-safe. Benchmarks divide their GFLOP/s by it; `train` divides its model FLOPs by it. */
double fg_fma_peak_gflops(void);

/* From now on, fg_fma_peak_gflops returns `gflops` (> 0) for the pool's current thread count and
 * SIMD level instead of measuring (a figure measured before and kept, or given by the user); a
 * change of either measures again. Thread-safe. */
void fg_fma_peak_set(double gflops);

/* Lanes of one vector at a SIMD level: 16, 8 or 1. */
int fg_simd_float_lanes(fg_simd_level level);

#ifdef __cplusplus
}
#endif
#endif /* FG_PEAK_H */
