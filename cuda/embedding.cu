/* embedding.cu — token (or position) embedding lookup, on the GPU.
 *
 * CPU reference: ops/embedding.c.
 *
 * Legend: weight is (V, C); idx holds n int32 ids laid out as `shape` (host memory, checked by
 * the caller); out is (shape..., C) with out[r, :] = weight[idx[r], :].
 * saved for backward (node ctx): the ids on the device and, grouped by id, the positions that
 * hold each id, in increasing position order.
 *
 * Backward without atomics: the CPU adds dout's rows into dweight in position order. Here one
 * block owns one distinct id and adds that id's rows in the same increasing position order, so
 * no two threads write one element and the sum has a fixed order. The grouping (a stable counting
 * sort by id) is made on the host during the forward and uploaded with the ids.
 */
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

/* out[r, c] = weight[idx[r] · ws + c] */
template <typename T>
__global__ void embedding_fwd_kernel(T *out, const T *weight, const int32_t *idx, int64_t n, int64_t C, int64_t ws) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n * C; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / C, c = e % C;
        out[e] = weight[(int64_t)idx[r] * ws + c];
    }
}

/* forward: out[r, :] = weight[idx[r], :]  ->  dweight[u, :] += Σ_{r: idx[r] = u} dout[r, :]
 * block b handles the distinct ids uniq[b], uniq[b + gridDim.x], ...; positions order[start[b] ..
 * start[b+1]) hold that id, ascending */
template <typename T>
__global__ void embedding_bwd_kernel(T *dweight, const T *dout, const int32_t *order, const int32_t *uniq,
                                     const int32_t *start, int64_t nu, int64_t C) {
    for (int64_t u = blockIdx.x; u < nu; u += gridDim.x) {
        T *dw = dweight + (int64_t)uniq[u] * C;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            T acc = dw[c];
            for (int32_t p = start[u]; p < start[u + 1]; p++) acc += dout[(int64_t)order[p] * C + c];
            dw[c] = acc;
        }
    }
}

/* ============================================================================================
 * host side
 * ============================================================================================ */

/* The node's ctx: one device block of int32 holding idx[n], order[n], uniq[nu], start[nu + 1]. */
typedef struct {
    int32_t *dev;
    int64_t n, nu;
} emb_ctx;

static void emb_ctx_free(void *p) {
    emb_ctx *c = (emb_ctx *)p;
    if (!c) return;
    fg_free(FG_CUDA, c->dev);
    fg_free(FG_CPU, c);
}

/* Build ids + grouping on the host and upload them; FG_OK or an error. */
static fg_status upload_ids(emb_ctx *c, const int32_t *idx, int64_t n, int64_t V) {
    c->n = n;
    c->nu = 0;
    c->dev = NULL;
    /* host staging: idx, order, uniq, start, plus V counters */
    size_t words = (size_t)(3 * n + 1) + (size_t)n + 1;
    int32_t *h = (int32_t *)fg_alloc(FG_CPU, words * sizeof(int32_t));
    int64_t *cnt = (int64_t *)fg_alloc(FG_CPU, (size_t)(V + 1) * sizeof(int64_t));
    if (!h || !cnt) {
        if (h) fg_free(FG_CPU, h);
        if (cnt) fg_free(FG_CPU, cnt);
        return fg_error(FG_ERR_OOM, "embedding: out of host memory for %lld ids", (long long)n);
    }
    int32_t *h_idx = h, *h_order = h + n, *h_uniq = h + 2 * n;
    memcpy(h_idx, idx, (size_t)n * sizeof(int32_t));
    /* stable counting sort of positions by id */
    memset(cnt, 0, (size_t)(V + 1) * sizeof(int64_t));
    for (int64_t r = 0; r < n; r++) cnt[idx[r] + 1]++;
    int64_t nu = 0;
    for (int64_t v = 0; v < V; v++) nu += cnt[v + 1] > 0;
    int32_t *h_start = h_uniq + nu;
    int64_t u = 0;
    for (int64_t v = 0; v < V; v++) {
        if (cnt[v + 1] > 0) {
            h_uniq[u] = (int32_t)v;
            h_start[u] = (int32_t)cnt[v];
            u++;
        }
        cnt[v + 1] += cnt[v]; /* cnt[v] = first slot of id v */
    }
    h_start[nu] = (int32_t)n;
    for (int64_t r = 0; r < n; r++) h_order[cnt[idx[r]]++] = (int32_t)r;
    size_t used = (size_t)(2 * n + 2 * nu + 1);
    c->dev = (int32_t *)fg_alloc(FG_CUDA, used * sizeof(int32_t));
    fg_status st = FG_OK;
    if (!c->dev) {
        st = fg_last_status();
    } else {
        cudaError_t e = cudaMemcpyAsync(c->dev, h, used * sizeof(int32_t), cudaMemcpyHostToDevice, fg_cu_stream());
        if (e == cudaSuccess) e = cudaStreamSynchronize(fg_cu_stream()); /* h is freed below */
        if (e != cudaSuccess) st = fg_cu_fail(e, "upload of embedding ids", __FILE__, __LINE__);
    }
    c->nu = nu;
    fg_free(FG_CPU, h);
    fg_free(FG_CPU, cnt);
    return st;
}

template <typename T>
static fg_status embedding_fwd(fg_tensor *out, const fg_tensor *W, const int32_t *d_idx, int64_t n, int64_t C) {
    if (n * C == 0) return FG_OK;
    embedding_fwd_kernel<T><<<fg_cu_blocks(n * C), FG_CU_THREADS, 0, fg_cu_stream()>>>(
        (T *)fg_data(out), (const T *)fg_data(W), d_idx, n, C, W->strides[0]);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status embedding_bwd(fg_tensor *dw, const fg_tensor *dout, const emb_ctx *c, int64_t C) {
    if (c->nu == 0 || C == 0) return FG_OK;
    const int32_t *order = c->dev + c->n, *uniq = c->dev + 2 * c->n, *start = uniq + c->nu;
    unsigned blocks = (unsigned)(c->nu < 65535 ? c->nu : 65535);
    int threads = C >= 256 ? 256 : (C >= 128 ? 128 : 64);
    embedding_bwd_kernel<T><<<blocks, threads, 0, fg_cu_stream()>>>((T *)fg_data(dw), (const T *)fg_data(dout), order,
                                                                    uniq, start, c->nu, C);
    FG_CU_LAUNCHED();
    return FG_OK;
}

static fg_status embedding_backward(fg_node *n) {
    fg_tensor *dw = fg_grad_buffer(n->inputs[0]);
    if (!dw) return FG_OK;
    fg_tensor *dout = fg_cu_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = FG_CU_DISPATCH(dw->dtype, embedding_bwd, dw, dout, (const emb_ctx *)n->ctx, dw->shape[1]);
    fg_release(dout);
    return st;
}

extern "C" fg_tensor *fg_cuda_embedding(fg_tensor *weight, const int32_t *idx, int ndim, const int64_t *shape) {
    static const char op[] = "embedding";
    if (fg_cu_require(op) != FG_OK) return NULL;
    int64_t n = 1, V = weight->shape[0], C = weight->shape[1], oshape[FG_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        n *= shape[d];
        oshape[d] = shape[d];
    }
    oshape[ndim] = C;
    if (n > INT32_MAX) {
        fg_error(FG_ERR_ARG, "%s: %lld ids is more than the GPU path indexes (2^31 - 1)", op, (long long)n);
        return NULL;
    }
    emb_ctx *c = (emb_ctx *)fg_alloc(FG_CPU, sizeof(emb_ctx));
    if (!c) return NULL;
    if (upload_ids(c, idx, n, V) != FG_OK) {
        emb_ctx_free(c);
        return NULL;
    }
    /* rows of weight need unit stride along C; any row stride is fine */
    fg_tensor *W = (C <= 1 || weight->strides[1] == 1) ? fg_retain(weight) : fg_contiguous(weight);
    fg_tensor *out = W ? fg_empty(weight->dtype, FG_CUDA, ndim + 1, oshape) : NULL;
    if (out && FG_CU_DISPATCH(weight->dtype, embedding_fwd, out, W, c->dev, n, C) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    fg_node *node = NULL;
    if (out) {
        fg_tensor *inputs[1] = {weight};
        node = fg_record(out, op, embedding_backward, 1, inputs);
        if (node) {
            node->ctx = c;
            node->ctx_free = emb_ctx_free;
            node->iargs[0] = n;
        }
    }
    if (!node) emb_ctx_free(c); /* freed after the kernel is queued: the block's next user is ordered after it */
    fg_release(W);
    return out;
}
