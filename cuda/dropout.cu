/* dropout.cu — inverted dropout with a regenerated mask, on the GPU.
 *
 * CPU reference: ops/dropout.c. The keep decision is the same pure function on both sides,
 *     keep(k) = fg_philox_u32(seed, stream, k) >= fg_dropout_threshold(p)   (tensor/philox.h)
 * so a GPU run drops exactly the elements the CPU run drops.
 *
 * Legend: x is any shape (made contiguous); out has x's shape; k is the flat C-order index.
 *   out[k] = keep(k) ? x[k] / (1 − p) : 0
 * Philox yields 4 words per counter block: one thread handles the 4 elements of one block.
 */
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"
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
 * host side
 * ============================================================================================ */

template <typename T>
static fg_status dropout_fwd(fg_tensor *out, const fg_tensor *X, uint64_t seed, uint64_t stream, double p) {
    int64_t n = fg_numel(X);
    if (n == 0) return FG_OK;
    dropout_fwd_kernel<T><<<fg_cu_blocks((n + 3) / 4), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)fg_data(out), (const T *)fg_data(X), n, seed, stream, fg_dropout_threshold(p), (T)(1.0 / (1.0 - p)));
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status dropout_bwd(fg_tensor *dx, const fg_tensor *dout, uint64_t seed, uint64_t stream, double p) {
    int64_t n = fg_numel(dx);
    if (n == 0) return FG_OK;
    dropout_bwd_kernel<T><<<fg_cu_blocks((n + 3) / 4), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)fg_data(dx), (const T *)fg_data(dout), n, seed, stream, fg_dropout_threshold(p), (T)(1.0 / (1.0 - p)));
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* fargs[0] = p; iargs = {seed, stream} */
static fg_status dropout_backward(fg_node *n) {
    fg_tensor *dx = fg_grad_buffer(n->inputs[0]);
    if (!dx) return FG_OK;
    fg_tensor *dout = fg_cu_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = FG_CU_DISPATCH(dx->dtype, dropout_bwd, dx, dout, (uint64_t)n->iargs[0], (uint64_t)n->iargs[1],
                                  n->fargs[0]);
    fg_release(dout);
    return st;
}

extern "C" fg_tensor *fg_cuda_dropout(fg_tensor *x, double p, uint64_t seed, uint64_t stream) {
    if (fg_cu_require("dropout") != FG_OK) return NULL;
    if (p == 0.0) return fg_retain(x);
    fg_tensor *X = fg_contiguous(x);
    fg_tensor *out = X ? fg_empty(x->dtype, FG_CUDA, x->ndim, x->shape) : NULL;
    if (out && FG_CU_DISPATCH(x->dtype, dropout_fwd, out, X, seed, stream, p) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    if (out) {
        fg_tensor *inputs[1] = {x};
        fg_node *node = fg_record(out, "dropout", dropout_backward, 1, inputs);
        if (node) {
            node->fargs[0] = p;
            node->iargs[0] = (int64_t)seed;
            node->iargs[1] = (int64_t)stream;
        }
    }
    fg_release(X);
    return out;
}
