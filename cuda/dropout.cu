/* dropout.cu — inverted dropout with a regenerated mask, on the GPU.
 *
 * CPU reference: ops/cpu/dropout.c. The keep decision is the same pure function on both sides,
 *     keep(k) = fg_philox_u32(seed, stream, k) >= fg_dropout_threshold(p)   (tensor/philox.h)
 * so a GPU run drops exactly the elements the CPU run drops.
 *
 * Legend: x, out, dout, dx are (n), contiguous (ops/dropout.c makes x so); k is the flat index.
 *   out[k] = keep(k) ? x[k] / (1 − p) : 0
 * Philox yields 4 words per counter block: one thread handles the 4 elements of one block.
 */
#include "cuda/cuda_common.cuh"
#include "cuda/kernels_cuda.h"
#include "tensor/philox.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

template <typename T>
__global__ void dropout_fwd_kernel(T *out, const T *x, int64_t n, uint64_t seed, uint64_t stream, uint32_t thr,
                                   T scale) {
    int64_t nblk = (n + 3) / 4;
    for (int64_t m = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; m < nblk; m += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        fg_philox_block(seed, stream, (uint64_t)m, w);
        for (int i = 0; i < 4; i++) {
            int64_t k = 4 * m + i;
            if (k < n) out[k] = w[i] >= thr ? x[k] * scale : (T)0;
        }
    }
}

/* forward: out[k] = keep(k) ? x[k] · scale : 0  ->  dx[k] += keep(k) ? dout[k] · scale : 0 */
template <typename T>
__global__ void dropout_bwd_kernel(T *dx, const T *dout, int64_t n, uint64_t seed, uint64_t stream, uint32_t thr,
                                   T scale) {
    int64_t nblk = (n + 3) / 4;
    for (int64_t m = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; m < nblk; m += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        fg_philox_block(seed, stream, (uint64_t)m, w);
        for (int i = 0; i < 4; i++) {
            int64_t k = 4 * m + i;
            if (k < n && w[i] >= thr) dx[k] += dout[k] * scale;
        }
    }
}

/* ============================================================================================
 * host side: the launchers of the kernel table (ops/kernels.h)
 * ============================================================================================ */

template <typename T>
static fg_status dropout_fwd(void *out, const void *x, int64_t n, uint64_t seed, uint64_t stream, double p) {
    if (n == 0) return FG_OK;
    dropout_fwd_kernel<T><<<fg_cu_blocks((n + 3) / 4), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)out, (const T *)x, n, seed, stream, fg_dropout_threshold(p), (T)(1.0 / (1.0 - p)));
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status dropout_bwd(void *dx, const void *dout, int64_t n, uint64_t seed, uint64_t stream, double p) {
    if (n == 0) return FG_OK;
    dropout_bwd_kernel<T><<<fg_cu_blocks((n + 3) / 4), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)dx, (const T *)dout, n, seed, stream, fg_dropout_threshold(p), (T)(1.0 / (1.0 - p)));
    FG_CU_LAUNCHED();
    return FG_OK;
}

extern "C" fg_status fg_cu_dropout_forward(fg_dtype dt, void *out, const void *x, int64_t n, uint64_t seed,
                                           uint64_t stream, double p) {
    return FG_CU_DISPATCH(dt, dropout_fwd, out, x, n, seed, stream, p);
}

extern "C" fg_status fg_cu_dropout_backward(fg_dtype dt, void *dx, const void *dout, int64_t n, uint64_t seed,
                                            uint64_t stream, double p) {
    return FG_CU_DISPATCH(dt, dropout_bwd, dx, dout, n, seed, stream, p);
}
