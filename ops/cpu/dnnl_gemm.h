/* dnnl_gemm.h — float32 GEMM through oneDNN (dnnl_sgemm, row-major), the CPU GEMM's main float32
 * kernel when the build has oneDNN (ops/cpu/matmul.c states which kernel runs where).
 *
 * Threads. Debian's oneDNN runs its parallel loops on OpenMP, a second thread runtime beside
 * flashgrad's pool (ops/cpu/threadpool.h). fg_dnnl_sgemm with threads = 1 runs on the calling
 * thread alone: it sets that thread's OpenMP team size to 1 for the call (omp_set_num_threads,
 * restored after), so no OpenMP worker is ever started and the pool's threads are the only ones;
 * each pool item calls it on its own block of C. threads > 1 hands the whole product to an OpenMP team of that size, for
 * `flashgrad bench matmul` to compare the two ways (the pool must be idle meanwhile).
 *
 * Rounding: the result of one call depends on its shape, its threads and the kernel oneDNN picks
 * for the CPU's instruction set (AVX2, AVX-512, ...), not on which thread runs it. With threads = 1
 * and a fixed split of the rows, a product gives the same bits for any pool thread count; across
 * machines with different instruction sets it need not.
 *
 * Signals: oneDNN's kernels may run with the stack pointer in a heap workspace, where a signal
 * handler's frame would land, so fg_dnnl_sgemm blocks the asynchronous signals on the calling
 * thread (and on an OpenMP team's workers) while oneDNN runs; one sent meanwhile is handled on
 * another thread or when the call returns.
 *
 * Built without oneDNN (no dnnl.h / libdnnl at build time), fg__dnnl_available() is 0 and
 * fg_dnnl_sgemm does nothing and returns nonzero.
 */
#ifndef FG_DNNL_GEMM_H
#define FG_DNNL_GEMM_H

#include <stdint.h>

#include "ops/cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What ops/cpu.h's fg_dnnl_available and fg_dnnl_version (ops/cpu_runtime.c) answer: 1 when this
 * build has oneDNN, else 0; its version, threading runtime and instruction set, or "none". */
int fg__dnnl_available(void);
const char *fg__dnnl_version(void);

/* C (m, n), row stride ldc  =  alpha · A' (m, k) @ B' (k, n)  +  beta · C, all row-major, where
 * A' = A (row stride lda) or, with ta, the transpose of the (k, m) matrix A; B' likewise with tb.
 * threads = 1: on the calling thread only; > 1: an OpenMP team of that many threads.
 * Returns 0 on success, nonzero when oneDNN is absent or refuses the arguments (C untouched then). */
int fg_dnnl_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int threads);

#ifdef __cplusplus
}
#endif
#endif /* FG_DNNL_GEMM_H */
