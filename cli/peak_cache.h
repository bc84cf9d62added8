/* peak_cache.h — the machine's float32 FMA peak, measured once and kept in the user's cache folder,
 * so that the MFU of two runs on the same machine divides by the same number.
 *
 * The cache is $XDG_CACHE_HOME/flashgrad/peak.tsv (~/.cache/flashgrad/peak.tsv without it), one
 * line per (CPU model, SIMD level, thread count):
 *     <GFLOP/s> TAB <simd> TAB <threads> TAB <cpu model>
 * after a header line. A figure is measured (ops/cpu/peak.h, longer than the quick measure: the
 * best of many short rounds) the first time a configuration is asked for, then read back; the file
 * is replaced atomically (tensor/fileio.h) under a lock (peak.lock beside it), so concurrent runs
 * measure once. A cache that does not parse, or holds a figure outside [FG_PEAK_MIN_GFLOPS,
 * FG_PEAK_MAX_GFLOPS] (or NaN, or an infinity), is refused with one line on stderr naming the line
 * and what is wrong, and rewritten with its valid lines and a new measurement; one that cannot be
 * written is said once, and the run goes on with its own measurement.
 */
#ifndef FG_PEAK_CACHE_H
#define FG_PEAK_CACHE_H

#include <stddef.h>

/* The figures a cache line may hold, in GFLOP/s: any CPU core's float32 FMA peak times any thread
 * count this program runs lies between. A line outside is refused like a line that does not parse. */
#define FG_PEAK_MIN_GFLOPS 0.1
#define FG_PEAK_MAX_GFLOPS 1e7

typedef enum { FG_PEAK_GIVEN, FG_PEAK_CACHED, FG_PEAK_MEASURED } fg_peak_origin;

typedef struct {
    double gflops;
    fg_peak_origin origin;
    char cpu[256];   /* /proc/cpuinfo's model name */
    char simd[16];   /* fg_simd_name of the active level */
    int threads;     /* the pool's */
    char path[4096]; /* the cache file ("" when no folder could be found) */
} fg_peak_info;

/* The peak for this machine's CPU model, SIMD level and pool thread count: `given` when > 0 (the
 * user's --peak), else the cached figure, else a measurement (stored in the cache, replacing the
 * cached one when `remeasure`). Then fg_fma_peak_set(it), so that MFU (train/trainer.h) and every
 * "% of peak" divide by it. Writes *out; never fails (a cache problem is one line on stderr). */
void fg_peak_get(double given, int remeasure, fg_peak_info *out);

/* "cached in PATH", "measured now, cached in PATH", "--peak": for the header line. */
const char *fg_peak_origin_text(const fg_peak_info *p, char *buf, size_t n);

#endif /* FG_PEAK_CACHE_H */
