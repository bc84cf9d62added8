/* flash_profile.h — where the CPU flash kernels' time goes, phase by phase (the public switch and
 * readout are in ops/cpu.h: fg_flash_profile_*). Private to ops/cpu/.
 *
 * Off (the default), a mark is one load and a predicted branch. On, each thread keeps the time
 * stamp counter's reading at its last mark; a mark charges the cycles since then to one phase
 * (and, for a tile product, its multiply-adds), so the phases of an item add up to the item.
 * An item's counts are added to the totals when it ends (fg_flash_prof_end). The time stamp
 * counter runs at a fixed rate on the CPUs this runs on; the readout converts cycles to seconds
 * with the rate measured against the monotonic clock over the profiled run.
 */
#ifndef FG_FLASH_PROFILE_H
#define FG_FLASH_PROFILE_H

#include <stdatomic.h>
#include <stdint.h>

#include "ops/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t fg_flash_prof_clock(void) { return __rdtsc(); }
#else
uint64_t fg_flash_prof_clock(void); /* the monotonic clock in ns elsewhere */
#endif

extern atomic_int fg_flash_prof_on;

typedef struct {
    uint64_t last;
    uint64_t cycles[FG_FLASH_PHASE_COUNT];
    double flops[FG_FLASH_PHASE_COUNT];
} fg_flash_prof_thread;
extern _Thread_local fg_flash_prof_thread fg_flash_prof_t;

static inline int fg_flash_prof_active(void) { return atomic_load_explicit(&fg_flash_prof_on, memory_order_relaxed); }
/* start an item: the cycles until the first mark are charged to the first phase marked */
static inline void fg_flash_prof_begin(void) {
    if (fg_flash_prof_active()) fg_flash_prof_t.last = fg_flash_prof_clock();
}
/* the cycles since the last mark go to phase p, with `flops` floating-point operations */
static inline void fg_flash_prof_mark(fg_flash_phase p, double flops) {
    if (!fg_flash_prof_active()) return;
    const uint64_t t = fg_flash_prof_clock();
    fg_flash_prof_t.cycles[p] += t - fg_flash_prof_t.last;
    fg_flash_prof_t.flops[p] += flops;
    fg_flash_prof_t.last = t;
}
/* end an item: its counts join the totals */
void fg_flash_prof_end(void);

/* What ops/cpu.h's fg_flash_profile_start, _stop and fg_flash_phase_name (ops/cpu_runtime.c) do. */
void fg__flash_profile_start(void);
void fg__flash_profile_stop(fg_flash_profile *out);
const char *fg__flash_phase_name(fg_flash_phase p);

#endif /* FG_FLASH_PROFILE_H */
