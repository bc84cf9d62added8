/* flash_profile.c — the totals of the flash kernels' phase profile (ops/cpu/flash_profile.h). */
#include "ops/cpu/flash_profile.h"

#include <string.h>
#include <time.h>

atomic_int fg_flash_prof_on;
_Thread_local fg_flash_prof_thread fg_flash_prof_t;

static _Atomic uint64_t total_cycles[FG_FLASH_PHASE_COUNT];
static _Atomic uint64_t total_flops[FG_FLASH_PHASE_COUNT]; /* whole operations */
static uint64_t start_clock;
static double start_ns;

static double mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

#if !(defined(__x86_64__) || defined(__i386__))
uint64_t fg_flash_prof_clock(void) { return (uint64_t)mono_ns(); }
#endif

void fg_flash_prof_end(void) {
    if (!fg_flash_prof_active()) return;
    for (int p = 0; p < FG_FLASH_PHASE_COUNT; p++) {
        if (fg_flash_prof_t.cycles[p]) atomic_fetch_add(&total_cycles[p], fg_flash_prof_t.cycles[p]);
        if (fg_flash_prof_t.flops[p] > 0) atomic_fetch_add(&total_flops[p], (uint64_t)fg_flash_prof_t.flops[p]);
    }
    memset(&fg_flash_prof_t, 0, sizeof fg_flash_prof_t);
}

void fg__flash_profile_start(void) {
    for (int p = 0; p < FG_FLASH_PHASE_COUNT; p++) atomic_store(&total_cycles[p], 0), atomic_store(&total_flops[p], 0);
    start_ns = mono_ns();
    start_clock = fg_flash_prof_clock();
    atomic_store(&fg_flash_prof_on, 1);
}

void fg__flash_profile_stop(fg_flash_profile *out) {
    atomic_store(&fg_flash_prof_on, 0);
    const double ns = mono_ns() - start_ns, ticks = (double)(fg_flash_prof_clock() - start_clock);
    const double sec_per_tick = ticks > 0 ? ns * 1e-9 / ticks : 0;
    memset(out, 0, sizeof *out);
    out->wall_s = ns * 1e-9;
    for (int p = 0; p < FG_FLASH_PHASE_COUNT; p++) {
        out->seconds[p] = (double)atomic_load(&total_cycles[p]) * sec_per_tick;
        out->flops[p] = (double)atomic_load(&total_flops[p]);
    }
}

const char *fg__flash_phase_name(fg_flash_phase p) {
    static const char *const names[FG_FLASH_PHASE_COUNT] = {
        [FG_FLASH_FWD_SETUP] = "fwd setup (Qi^T, zero O)",
        [FG_FLASH_FWD_MASK] = "fwd tile kind, mask, variants",
        [FG_FLASH_FWD_QK] = "fwd S = Q K^T",
        [FG_FLASH_FWD_SOFTMAX] = "fwd online softmax (max, exp, sum)",
        [FG_FLASH_FWD_DROPOUT] = "fwd dropout",
        [FG_FLASH_FWD_PV] = "fwd O = alpha O + P V",
        [FG_FLASH_FWD_EPILOGUE] = "fwd O /= l, lse",
        [FG_FLASH_BWD_D] = "bwd D = rowsum(dO o O)",
        [FG_FLASH_BWD_PACK] = "bwd pack Kj^T, Vj^T",
        [FG_FLASH_BWD_MASK] = "bwd tile kind, mask, variants",
        [FG_FLASH_BWD_QK] = "bwd S = Q K^T",
        [FG_FLASH_BWD_EXP] = "bwd P = exp(S - L)",
        [FG_FLASH_BWD_DROPOUT] = "bwd dropout (Z, P o Z)",
        [FG_FLASH_BWD_DV] = "bwd dV += P^T dO",
        [FG_FLASH_BWD_DP] = "bwd dP = dO V^T",
        [FG_FLASH_BWD_DS] = "bwd dS = P o (dP - D)",
        [FG_FLASH_BWD_DQ] = "bwd dQ += dS K",
        [FG_FLASH_BWD_DK] = "bwd dK += dS^T Q",
    };
    return p >= 0 && p < FG_FLASH_PHASE_COUNT ? names[p] : "?";
}
