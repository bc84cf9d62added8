/* simd.h — which vector instructions the CPU kernels use, chosen once at run time.
 *
 * The library is compiled for a baseline x86-64 (the Makefile's -march=x86-64-v2: SSE4.2, no AVX),
 * so that one binary runs everywhere. Hot kernels (ops/cpu/vexp.h, ops/cpu/smallgemm.h) carry extra
 * copies compiled for AVX2+FMA and for AVX-512F through GCC/Clang target attributes; which copy
 * runs is decided here, from __builtin_cpu_supports, the first time a kernel asks:
 *
 *   FG_SIMD_AVX512   AVX-512F (16 float lanes, 32 registers, masked loads and stores)
 *   FG_SIMD_AVX2     AVX2 + FMA (8 float lanes, 16 registers)
 *   FG_SIMD_SCALAR   plain C; also what non-x86 builds and compilers without target attributes get
 *
 * The environment variable FG_SIMD=scalar|avx2|avx512 caps the choice (it never raises it above
 * what the CPU has), and fg_simd_set() does the same from a program; tests use them to check that
 * every level computes the same bits (see ops/cpu/vexp.h and ops/cpu/smallgemm.h for why they do).
 */
#ifndef FG_SIMD_H
#define FG_SIMD_H

#include "ops/cpu.h" /* fg_simd_level, fg_simd_name, fg_simd_detect, fg_simd_active, fg_simd_set */

#ifdef __cplusplus
extern "C" {
#endif

/* -DFG_NO_SIMD builds the plain C forms only (as on a non-x86 machine). */
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) &&   \
    !defined(FG_NO_SIMD)
#define FG_SIMD_X86 1
#else
#define FG_SIMD_X86 0
#endif

#ifdef __cplusplus
}
#endif
#endif /* FG_SIMD_H */
