/* cross_entropy.cu — fused softmax + negative log-likelihood, mean over the counted rows, on the GPU.
 *
 * CPU reference: ops/cross_entropy.c (same formulas; exp sums in float64; a row with target -1
 * is ignored and gets lse 0; the loss is 0 when no row counts).
 *
 * Legend: logits is (..., V), seen as R rows of V; targets: R int32 ids (host memory, checked by
 * the caller; -1 = ignore); out is (1).
 * saved for backward: X (logits, contiguous), lse (R), the targets on the device (node ctx).
 *   lse_r = max_r + log Σ_j exp(x_rj − max_r)        loss = Σ_r (lse_r − x_r,t_r) / count
 *   d loss / d x_rj = (exp(x_rj − lse_r) − [j = t_r]) / count
 * The (R, V) probabilities are never stored. The mean is a fixed-order two-stage sum (no atomics).
 */
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

/* one warp per row: lse[r] and the row's loss (float64) into loss[r] (0 for ignored rows) */
template <typename T>
__global__ void cross_entropy_fwd_kernel(double *loss, T *lse, const T *x, const int32_t *targets, int64_t R,
                                         int64_t V) {
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
    for (int64_t r = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32; r < R; r += warps) {
        int32_t t = targets[r];
        if (t < 0) {
            if (lane == 0) {
                lse[r] = 0;
                loss[r] = 0;
            }
            continue;
        }
        const T *xr = x + r * V;
        T mx = xr[0];
        for (int64_t j = lane; j < V; j += 32) mx = xr[j] > mx ? xr[j] : mx;
        mx = fg_warp_max(mx);
        double sum = 0;
        for (int64_t j = lane; j < V; j += 32) sum += fg_exp(xr[j] - mx);
        sum = fg_warp_sum(sum);
        T l = mx + (T)log(sum);
        if (lane == 0) {
            lse[r] = l;
            loss[r] = (double)l - (double)xr[t];
        }
    }
}

/* forward: loss = Σ_r (lse_r − x_r,t_r) / count
 *   ->  dx_rj += dloss / count · (exp(x_rj − lse_r) − [j = t_r])   for counted rows */
template <typename T>
__global__ void cross_entropy_bwd_kernel(T *dx, const T *x, const T *lse, const int32_t *targets, const T *dout,
                                         int64_t R, int64_t V, double inv_count) {
    T g = (T)((double)dout[0] * inv_count);
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < R * V; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / V, j = e % V;
        int32_t t = targets[r];
        if (t < 0) continue;
        T d = dx[e];
        d += g * fg_exp(x[e] - lse[r]);
        if (j == t) d -= g;
        dx[e] = d;
    }
}

template <typename T>
__global__ void store_mean_kernel(T *out, const double *total, double inv_count) {
    out[0] = (T)(inv_count > 0 ? total[0] * inv_count : 0.0);
}

struct loss_term {
    const double *loss;
    __device__ double operator()(int64_t r) const { return loss[r]; }
};

/* ============================================================================================
 * host side
 * ============================================================================================ */

static void targets_free(void *p) { fg_free(FG_CUDA, p); }

template <typename T>
static fg_status cross_entropy_fwd(fg_tensor *out, fg_tensor *lse, const fg_tensor *X, const int32_t *d_targets,
                                   int64_t R, int64_t V, int64_t count) {
    fg_cu_scratch loss, total;
    FG_TRY(loss.get((size_t)(R ? R : 1) * sizeof(double), "cross_entropy"));
    FG_TRY(total.get(sizeof(double), "cross_entropy"));
    if (R > 0) {
        cross_entropy_fwd_kernel<T><<<fg_cu_blocks(R * 32), FG_CU_THREADS, 0, fg_cu_stream()>>>(
            loss.as<double>(), (T *)fg_data(lse), (const T *)fg_data(X), d_targets, R, V);
        FG_CU_LAUNCHED();
    }
    FG_TRY(fg_cu_sum(total.as<double>(), R, loss_term{loss.as<double>()}, "cross_entropy"));
    store_mean_kernel<T><<<1, 1, 0, fg_cu_stream()>>>((T *)fg_data(out), total.as<double>(),
                                                     count ? 1.0 / (double)count : 0.0);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status cross_entropy_bwd(fg_tensor *dx, const fg_tensor *X, const fg_tensor *lse, const int32_t *d_targets,
                                   const fg_tensor *dout, int64_t R, int64_t V, int64_t count) {
    if (R * V == 0) return FG_OK;
    cross_entropy_bwd_kernel<T><<<fg_cu_blocks(R * V), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)fg_data(dx), (const T *)fg_data(X), (const T *)fg_data(lse), d_targets, (const T *)fg_data(dout), R, V,
        1.0 / (double)count);
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* saved {X, lse}; ctx = targets (device); iargs = {R, V, count} */
static fg_status cross_entropy_backward(fg_node *n) {
    fg_tensor *dx = fg_grad_buffer(n->inputs[0]);
    int64_t R = n->iargs[0], V = n->iargs[1], count = n->iargs[2];
    if (!dx || count == 0) return FG_OK; /* nothing counted: the loss is the constant 0 */
    fg_tensor *dout = fg_cu_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = FG_CU_DISPATCH(dx->dtype, cross_entropy_bwd, dx, n->saved[0], n->saved[1],
                                  (const int32_t *)n->ctx, dout, R, V, count);
    fg_release(dout);
    return st;
}

extern "C" fg_tensor *fg_cuda_cross_entropy(fg_tensor *logits, const int32_t *targets) {
    static const char op[] = "cross_entropy";
    if (fg_cu_require(op) != FG_OK) return NULL;
    int64_t V = logits->shape[logits->ndim - 1], R = fg_numel(logits) / V, count = 0, one = 1;
    for (int64_t r = 0; r < R; r++) count += targets[r] >= 0;
    int32_t *d_targets = (int32_t *)fg_alloc(FG_CUDA, (size_t)(R ? R : 1) * sizeof(int32_t));
    if (!d_targets) return NULL;
    if (R > 0) {
        cudaError_t e = cudaMemcpyAsync(d_targets, targets, (size_t)R * sizeof(int32_t), cudaMemcpyHostToDevice,
                                        fg_cu_stream());
        if (e == cudaSuccess) e = cudaStreamSynchronize(fg_cu_stream()); /* the caller may reuse targets */
        if (e != cudaSuccess) {
            fg_cu_fail(e, "upload of cross_entropy targets", __FILE__, __LINE__);
            fg_free(FG_CUDA, d_targets);
            return NULL;
        }
    }
    fg_tensor *X = fg_contiguous(logits);
    fg_tensor *lse = X ? fg_empty(logits->dtype, FG_CUDA, 1, &R) : NULL;
    fg_tensor *out = lse ? fg_empty(logits->dtype, FG_CUDA, 1, &one) : NULL;
    if (out && FG_CU_DISPATCH(logits->dtype, cross_entropy_fwd, out, lse, X, d_targets, R, V, count) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    fg_node *node = NULL;
    if (out) {
        fg_tensor *inputs[1] = {logits};
        node = fg_record(out, op, cross_entropy_backward, 1, inputs);
        if (node) {
            fg_node_save(node, X);
            fg_node_save(node, lse);
            node->iargs[0] = R;
            node->iargs[1] = V;
            node->iargs[2] = count;
            node->ctx = d_targets;
            node->ctx_free = targets_free;
        }
    }
    if (!node) fg_free(FG_CUDA, d_targets);
    fg_release(X);
    fg_release(lse);
    return out;
}
