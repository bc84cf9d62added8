/* embedding.cu — token (or position) embedding lookup, on the GPU: the launchers of the embedding
 * kernels of ops/kernels.h.
 *
 * CPU reference: ops/cpu/embedding.c.
 *
 * Legend: weight is (V, C); idx holds n int32 ids (host memory, checked by the shell); out is
 * (n, C) with out[r, :] = weight[idx[r], :]. The forward uploads the ids into device scratch
 * (fg_cu_upload: staged, no host wait).
 *
 * Backward without atomics: the CPU adds dout's rows into dweight in position order. Here one
 * block owns one distinct id and adds that id's rows in the same increasing position order, so
 * no two threads write one element and the sum has a fixed order. The grouping (a stable counting
 * sort by id: for each distinct id, the positions that hold it, ascending) is made on the host
 * from the shell's copy of the ids and uploaded into device scratch.
 */
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "cuda/kernels_cuda.h"

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
 * host side: the launchers of the kernel table (ops/kernels.h)
 * ============================================================================================ */

/* Copy n int32 words from the host to dev, in stream order without a host wait (staged in pinned
 * memory: the host buffer may be freed right after). */
static fg_status upload(int32_t *dev, const int32_t *host, size_t n, const char *what) {
    return fg_cu_upload(dev, host, n * sizeof(int32_t), what);
}

/* The backward's grouping of positions by id, in host memory h (2n + 1 + V words at least):
 * order[n], then uniq[nu], start[nu + 1]; returns nu. cnt is V + 1 counters of scratch. */
static int64_t group_ids(int32_t *h, int64_t *cnt, const int32_t *idx, int64_t n, int64_t V) {
    int32_t *h_order = h, *h_uniq = h + n;
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
    return nu;
}

template <typename T>
static fg_status embedding_fwd(void *out, const void *weight, int64_t ws, const int32_t *d_idx, int64_t n, int64_t C) {
    embedding_fwd_kernel<T>
        <<<fg_cu_blocks(n * C), FG_CU_THREADS, 0, fg_cu_stream()>>>((T *)out, (const T *)weight, d_idx, n, C, ws);
    FG_CU_LAUNCHED();
    return FG_OK;
}

template <typename T>
static fg_status embedding_bwd(void *dw, const void *dout, const int32_t *d_group, int64_t n, int64_t nu, int64_t C) {
    const int32_t *order = d_group, *uniq = d_group + n, *start = uniq + nu;
    unsigned blocks = (unsigned)(nu < 65535 ? nu : 65535);
    int threads = C >= 256 ? 256 : (C >= 128 ? 128 : 64);
    embedding_bwd_kernel<T>
        <<<blocks, threads, 0, fg_cu_stream()>>>((T *)dw, (const T *)dout, order, uniq, start, nu, C);
    FG_CU_LAUNCHED();
    return FG_OK;
}

static fg_status check_count(int64_t n) {
    if (n > INT32_MAX)
        return fg_error(FG_ERR_ARG, "embedding: %lld ids is more than the GPU path indexes (2^31 - 1)", (long long)n);
    return FG_OK;
}

extern "C" fg_status fg_cu_embedding_forward(fg_dtype dt, void *out, const void *weight, int64_t ws, const int32_t *idx,
                                             int64_t n, int64_t V, int64_t C) {
    (void)V;
    FG_TRY(check_count(n));
    if (n * C == 0) return FG_OK;
    fg_cu_scratch d_idx;
    FG_TRY(d_idx.get((size_t)n * sizeof(int32_t), "embedding"));
    FG_TRY(upload(d_idx.as<int32_t>(), idx, (size_t)n, "upload of embedding ids"));
    /* d_idx goes back to the allocator after the kernel is queued: its next user is ordered after it */
    return FG_CU_DISPATCH(dt, embedding_fwd, out, weight, ws, d_idx.as<int32_t>(), n, C);
}

extern "C" fg_status fg_cu_embedding_backward(fg_dtype dt, void *dweight, const void *dout, const int32_t *idx,
                                              int64_t n, int64_t V, int64_t C) {
    FG_TRY(check_count(n));
    if (n == 0 || C == 0) return FG_OK;
    /* host staging: order[n], uniq[nu], start[nu + 1] with nu <= min(n, V); V + 1 counters */
    size_t words = (size_t)(3 * n + 1);
    int32_t *h = (int32_t *)fg_alloc(FG_CPU, words * sizeof(int32_t));
    int64_t *cnt = (int64_t *)fg_alloc(FG_CPU, (size_t)(V + 1) * sizeof(int64_t));
    if (!h || !cnt) {
        if (h) fg_free(FG_CPU, h);
        if (cnt) fg_free(FG_CPU, cnt);
        return fg_error(FG_ERR_OOM, "embedding: out of host memory for %lld ids", (long long)n);
    }
    const int64_t nu = group_ids(h, cnt, idx, n, V);
    const size_t used = (size_t)(n + 2 * nu + 1);
    fg_cu_scratch d_group;
    fg_status st = d_group.get(used * sizeof(int32_t), "embedding backward");
    if (st == FG_OK) st = upload(d_group.as<int32_t>(), h, used, "upload of embedding ids");
    fg_free(FG_CPU, h);
    fg_free(FG_CPU, cnt);
    if (st != FG_OK) return st;
    return FG_CU_DISPATCH(dt, embedding_bwd, dweight, dout, d_group.as<int32_t>(), n, nu, C);
}
