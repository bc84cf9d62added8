/* cuda.h — the CUDA device: start it, and what the rest of flashgrad needs to know about it.
 *
 * fg_cuda_init() (idempotent, thread-safe) picks device 0 (or $FG_CUDA_DEVICE), creates the one
 * stream every flashgrad kernel and copy runs on, the cuBLAS handle (bound to that stream, default
 * float32 math: no TF32) and a cuRAND Philox generator, and registers the FG_CUDA backends:
 *   - memory (tensor/alloc.h): cudaMalloc / cudaFree (never managed memory), stream-ordered memset
 *     and copies. The caching allocator in tensor/alloc.c keeps freed CUDA blocks and hands them out
 *     again, and its per-device counters (fg_alloc_get_stats(FG_CUDA): current, peak, reserved,
 *     system_allocs) are the framework's allocation counter for the GPU. Reusing a block at once is
 *     safe because every kernel and copy is ordered on the one stream.
 *   - tensors (tensor/tensor.h): fill, axpy and strided, dtype-converting copies on the device.
 *   - attention (ops/attention.h): the flash and naive kernels of cuda/attention.cu.
 * Without a usable GPU it returns FG_ERR_DEVICE with CUDA's reason ("no CUDA-capable device is
 * detected", a driver older than the runtime, ...), registers nothing, and may be called again.
 *
 * Copies to the host (fg_to_host, fg_to) synchronize the stream, so a value read back is final.
 * Errors from a kernel surface at the next checked call; every CUDA call goes through one check
 * (cuda/cuda_common.cuh) that records file, line and CUDA's error string in fg_last_error().
 *
 * Only the CUDA objects (cuda/) and their tests include this header. The library and the program
 * reach the device through fg_device_start (ops/kernels.h), which finds fg_cuda_init when the CUDA
 * objects are linked in and says "built without CUDA" otherwise.
 */
#ifndef FG_CUDA_H
#define FG_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Start the device and register the backends (see above). FG_OK or FG_ERR_DEVICE. */
fg_status fg_cuda_init(void);
/* Wait until every queued kernel and copy has finished. FG_OK, or the error a kernel raised. */
fg_status fg_cuda_synchronize(void);
/* One line about the device: "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver 13.0, runtime 13.0)".
 * Before init (or without a GPU) it says why there is none. Owned by the library. */
const char *fg_cuda_device_string(void);
/* The cuRAND generator, as an opaque pointer (curandGenerator_t) for tests and benchmarks; NULL
 * before init. */
void *fg_cuda_curand(void);

#ifdef __cplusplus
}
#endif
#endif /* FG_CUDA_H */
