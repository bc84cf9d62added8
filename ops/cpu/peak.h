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

#include "ops/cpu.h" /* fg_fma_peak_measure, fg_fma_peak_gflops, fg_fma_peak_set, fg_simd_float_lanes */
#include "ops/cpu/simd.h"

#endif /* FG_PEAK_H */
