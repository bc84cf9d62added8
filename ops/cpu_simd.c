/* cpu_simd.c — run-time choice of the vector instruction set (ops/cpu.h, ops/cpu/simd.h). Part of the
 * CPU runtime, not a kernel file. */
#include "ops/cpu/simd.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

const char *fg_simd_name(fg_simd_level level) {
    switch (level) {
    case FG_SIMD_SCALAR:
        return "scalar";
    case FG_SIMD_AVX2:
        return "avx2";
    case FG_SIMD_AVX512:
        return "avx512";
    default:
        return "unknown-simd";
    }
}

static fg_simd_level detect_once(void) {
#if FG_SIMD_X86
    __builtin_cpu_init();
    /* libgcc's and compiler-rt's tables also check (XGETBV) that the OS saves the wide registers */
    if (__builtin_cpu_supports("avx512f")) return FG_SIMD_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return FG_SIMD_AVX2;
#endif
    return FG_SIMD_SCALAR;
}

fg_simd_level fg_simd_detect(void) {
    static atomic_int hw = -1;
    int l = atomic_load_explicit(&hw, memory_order_relaxed);
    if (l < 0) {
        l = (int)detect_once();
        atomic_store_explicit(&hw, l, memory_order_relaxed);
    }
    return (fg_simd_level)l;
}

/* -1 until the first call; then the active level */
static atomic_int g_level = -1;

static fg_simd_level capped(fg_simd_level want) {
    fg_simd_level hw = fg_simd_detect();
    return want < hw ? want : hw;
}

fg_simd_level fg_simd_active(void) {
    int l = atomic_load_explicit(&g_level, memory_order_relaxed);
    if (l >= 0) return (fg_simd_level)l;
    fg_simd_level want = FG_SIMD_AVX512;
    const char *e = getenv("FG_SIMD");
    if (e && *e) {
        if (!strcmp(e, "scalar"))
            want = FG_SIMD_SCALAR;
        else if (!strcmp(e, "avx2"))
            want = FG_SIMD_AVX2;
        /* "avx512" or anything else: the best there is */
    }
    l = (int)capped(want);
    atomic_store_explicit(&g_level, l, memory_order_relaxed);
    return (fg_simd_level)l;
}

fg_simd_level fg_simd_set(fg_simd_level level) {
    fg_simd_level before = fg_simd_active();
    if (level < FG_SIMD_SCALAR) level = FG_SIMD_SCALAR;
    if (level >= FG_SIMD_LEVEL_COUNT) level = FG_SIMD_AVX512;
    atomic_store_explicit(&g_level, (int)capped(level), memory_order_relaxed);
    return before;
}
