/* nccl.cu — data parallelism across GPUs: the communicator operations of train/dist.h on device
 * buffers, over NCCL, one GPU per rank. train/mpi/comm_mpi.c bootstraps it as llm.c does: rank 0
 * makes the unique id (fg_nccl_id), MPI broadcasts it, every rank joins (fg_nccl_start).
 *
 * The fold is explicit, not ncclReduceScatter / ncclAllReduce (whose summation order over ranks
 * depends on NCCL's algorithm, ring or tree, and on the topology): rank q receives every rank's
 * slice of its shard with grouped ncclSend / ncclRecv, and fold_kernel adds the P slices in rank
 * order, x_0 + x_1 + ... + x_{P-1} — the CPU's fold (train/dist.c, fg_comm_add_into) and one
 * process's micro-batch accumulation, so the result does not depend on P. The all-gather is
 * grouped sends / receives too (a copy: exact). Everything runs on the library's one stream.
 *
 * CPU reference: train/mpi/comm_mpi.c (mpi_fold) and fg_comm_add_into.
 */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.cuh"
#include "ops/nccl_backend.h"

/* ============================================================================================
 * kernels
 * ============================================================================================ */

/* out (m) = slices[0] + slices[1] + ... + slices[P-1], each slice (m), added in that order */
template <typename T> __global__ void fold_kernel(T *out, const T *slices, int64_t m, int P) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < m; k += (int64_t)gridDim.x * blockDim.x) {
        T acc = slices[k];
        for (int q = 1; q < P; q++) acc = acc + slices[(int64_t)q * m + k];
        out[k] = acc;
    }
}

/* ============================================================================================
 * host side
 * ============================================================================================ */

#define FG_NCCL(call)                                                                                                  \
    do {                                                                                                               \
        ncclResult_t fg_r_ = (call);                                                                                   \
        if (fg_r_ != ncclSuccess)                                                                                      \
            return fg_error(FG_ERR_DEVICE, "NCCL error at %s:%d: %s: %s", __FILE__, __LINE__, #call,                  \
                            ncclGetErrorString(fg_r_));                                                                \
    } while (0)

static ncclComm_t g_comm;
static int g_rank, g_size;

/* rank r's shard [lo, hi) of n among P: fg_comm_shard's split (train/dist.h) */
static void shard(int64_t n, int P, int r, int64_t *lo, int64_t *hi) {
    int64_t base = n / P, rem = n % P;
    *lo = (int64_t)r * base + (r < rem ? r : rem);
    *hi = *lo + base + (r < rem ? 1 : 0);
}

extern "C" fg_status fg_nccl_id(void *id, size_t cap, size_t *len) {
    FG_TRY(fg_cu_require("nccl"));
    ncclUniqueId u;
    if (cap < sizeof u) return fg_error(FG_ERR_ARG, "NCCL: the unique id needs %zu bytes", sizeof u);
    FG_NCCL(ncclGetUniqueId(&u));
    memcpy(id, &u, sizeof u);
    *len = sizeof u;
    return FG_OK;
}

static void comm_destroy(void);

extern "C" fg_status fg_nccl_start(int rank, int size, const void *id, size_t len) {
    FG_TRY(fg_cu_require("nccl"));
    ncclUniqueId u;
    if (len != sizeof u) return fg_error(FG_ERR_ARG, "NCCL: a unique id of %zu bytes (expected %zu)", len, sizeof u);
    memcpy(&u, id, sizeof u);
    FG_NCCL(ncclCommInitRank(&g_comm, size, u, rank));
    g_rank = rank;
    g_size = size;
    atexit(comm_destroy);
    return FG_OK;
}

/* the communicator goes at exit (NCCL's proxy threads and its peers' connections with it) */
static void comm_destroy(void) {
    if (g_comm) (void)ncclCommDestroy(g_comm);
    g_comm = nullptr;
}

/* A peer that died or a network fault surfaces asynchronously: ask after every grouped call, so a
 * broken clique is one clear error rather than a hang at the next synchronization. */
static fg_status async_error(const char *what) {
    ncclResult_t r = ncclSuccess;
    FG_NCCL(ncclCommGetAsyncError(g_comm, &r));
    if (r != ncclSuccess && r != ncclInProgress)
        return fg_error(FG_ERR_DEVICE, "NCCL %s: asynchronous error: %s", what, ncclGetErrorString(r));
    return FG_OK;
}

/* every rank's shard of buf to every other rank (the all-gather, as grouped point-to-point) */
template <typename T> static fg_status gather_t(T *buf, int64_t n, ncclDataType_t ty) {
    int64_t mlo, mhi;
    shard(n, g_size, g_rank, &mlo, &mhi);
    FG_NCCL(ncclGroupStart());
    for (int q = 0; q < g_size; q++) {
        if (q == g_rank) continue;
        int64_t lo, hi;
        shard(n, g_size, q, &lo, &hi);
        FG_NCCL(ncclSend(buf + mlo, (size_t)(mhi - mlo), ty, q, g_comm, fg_cu_stream()));
        FG_NCCL(ncclRecv(buf + lo, (size_t)(hi - lo), ty, q, g_comm, fg_cu_stream()));
    }
    FG_NCCL(ncclGroupEnd());
    return async_error("all-gather");
}

/* out (m) = slices[0] + ... + slices[P-1] (P slices of m, device memory) in rank order */
template <typename T> static fg_status fold_slices_t(T *out, const T *slices, int64_t m, int P) {
    if (m > 0) {
        fold_kernel<T><<<fg_cu_blocks(m), FG_CU_THREADS, 0, fg_cu_stream()>>>(out, slices, m, P);
        FG_CU_LAUNCHED();
    }
    return FG_OK;
}

extern "C" fg_status fg_nccl_fold_slices(void *out, const void *slices, fg_dtype dt, int64_t m, int P) {
    if (P < 1 || m < 0) return fg_error(FG_ERR_ARG, "NCCL fold: %d slices of %lld", P, (long long)m);
    return dt == FG_F64 ? fold_slices_t<double>((double *)out, (const double *)slices, m, P)
                        : fold_slices_t<float>((float *)out, (const float *)slices, m, P);
}

template <typename T> static fg_status fold_t(T *buf, int64_t n, int gather, ncclDataType_t ty) {
    int64_t mlo, mhi;
    shard(n, g_size, g_rank, &mlo, &mhi);
    const int64_t m = mhi - mlo;
    fg_cu_scratch tmp;
    FG_TRY(tmp.get((size_t)g_size * (size_t)(m > 0 ? m : 1) * sizeof(T), "nccl fold"));
    T *slices = tmp.as<T>();
    /* slice q of tmp: rank q's values of this rank's shard */
    FG_CU(cudaMemcpyAsync(slices + (int64_t)g_rank * m, buf + mlo, (size_t)m * sizeof(T), cudaMemcpyDeviceToDevice,
                          fg_cu_stream()));
    FG_NCCL(ncclGroupStart());
    for (int q = 0; q < g_size; q++) {
        if (q == g_rank) continue;
        int64_t lo, hi;
        shard(n, g_size, q, &lo, &hi);
        FG_NCCL(ncclSend(buf + lo, (size_t)(hi - lo), ty, q, g_comm, fg_cu_stream()));
        FG_NCCL(ncclRecv(slices + (int64_t)q * m, (size_t)m, ty, q, g_comm, fg_cu_stream()));
    }
    FG_NCCL(ncclGroupEnd());
    FG_TRY(async_error("fold"));
    FG_TRY(fold_slices_t<T>(buf + mlo, slices, m, g_size));
    return gather ? gather_t<T>(buf, n, ty) : FG_OK;
}

extern "C" fg_status fg_nccl_fold_sum(void *buf, fg_dtype dt, int64_t n, int gather) {
    if (!g_comm) return fg_error(FG_ERR_STATE, "NCCL: not started (fg_nccl_start)");
    return dt == FG_F64 ? fold_t<double>((double *)buf, n, gather, ncclFloat64)
                        : fold_t<float>((float *)buf, n, gather, ncclFloat32);
}

extern "C" fg_status fg_nccl_allgather(void *buf, fg_dtype dt, int64_t n) {
    if (!g_comm) return fg_error(FG_ERR_STATE, "NCCL: not started (fg_nccl_start)");
    return dt == FG_F64 ? gather_t<double>((double *)buf, n, ncclFloat64) : gather_t<float>((float *)buf, n, ncclFloat32);
}
