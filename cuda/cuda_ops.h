/* cuda_ops.h — the raw CUDA entry point that code outside the kernel table still calls.
 *
 * Every op reaches the GPU through its one shell in ops/<family>.c and the FG_CUDA kernel table
 * (ops/kernels.h, registered by fg_cuda_init from cuda/kernels.cu). What is left here is a
 * raw-pointer row-major GEMM, for the naive attention launchers, benchmarks and tests. Pointers are device
 * memory; arrays are contiguous unless a stride says otherwise. Everything runs on the one stream of
 * cuda/runtime.cu and returns before the GPU finishes; a copy to the host (fg_to_host, fg_to) waits.
 * All of it needs fg_cuda_init() first.
 */
#ifndef FG_CUDA_OPS_H
#define FG_CUDA_OPS_H

#include <stdint.h>
#include <stdio.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuda/matmul.cu — row-major GEMM like cblas_?gemm(CblasRowMajor, ...):
 *     C (M, N) = alpha · op(A) op(B) + beta · C,   op(X) = X or Xᵀ (ta / tb non-zero),
 * repeated over `batch` matrices that are sA, sB, sC elements apart (0 = shared). */
fg_status fg_cuda_gemm(fg_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                       int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, double beta, void *C,
                       int64_t ldc, int64_t sC, int64_t batch);

/* cuda/attention.cu — a CSV table (header first) of the flash kernels' resources on this device,
 * for bench/gpu_check.sh's report: per kernel, dtype, head-dim width D (64, 128, 256) and
 * softcap/ALiBi instance, its dynamic shared memory, K/V stages, __launch_bounds__ blocks,
 * registers, local memory (spills and stack) and cudaOccupancyMaxActiveBlocksPerMultiprocessor at
 * 256 threads a block. */
fg_status fg_cuda_attention_kernel_table(FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* FG_CUDA_OPS_H */
