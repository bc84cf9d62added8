/* peak.h — this machine's float32 FMA peak on the threads of flashgrad's pool, the ceiling that
 * MFU (model FLOPs utilization) and every benchmark's "% of peak" are fractions of.
 *
 * Method: each of the pool's threads runs 12 independent chains of fused multiply-adds on vector
 * registers (x = x * a + b per chain; 12 chains cover the FMA latency of 4 cycles on two ports), so
 * the FMAs per second are what the cores can issue at most. Vector width by the active SIMD level
 * (ops/cpu/simd.h): 16 floats (AVX-512), 8 (AVX2+FMA), or 1 (scalar fmaf, only to have a number).
 * One FMA is 2 flops. The best of the timed rounds is the result (the peak, not the typical value),
 * after 0.1 s of untimed rounds that wake the workers and bring an idle core back to its full clock
 * (a core that was idle takes milliseconds to; timed while one is, a round reads as little as half
 * the peak on two threads). Only rounds whose items ran side by side count: each thread its own,
 * all of them done within 1.3 times the best time of one item run alone (timed between the rounds).
 * A worker the system leaves out of a run (its item then runs after another on the same thread),
 * or two threads on one core's FMA units (its hardware threads, or a VM's virtual CPUs that the host
 * runs on one core for a second or two), would time fewer cores than the round counts. Without
 * such a round in the rounds asked for, more are timed, up to 3 s more, and then the best of all
 * counts (what the threads get when they share cores for good).
 */
#ifndef FG_PEAK_H
#define FG_PEAK_H

#include "ops/cpu.h" /* fg_fma_peak_measure, fg_fma_peak_gflops, fg_fma_peak_set, fg_simd_float_lanes */
#include "ops/cpu/simd.h"

#endif /* FG_PEAK_H */
