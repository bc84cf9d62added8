/* upload.cu — small host-to-device copies on the hot path (embedding ids, ALiBi slopes) that do
 * not wait for the device.
 *
 * A cudaMemcpyAsync from pageable host memory may wait for the stream, and the caller's buffer
 * must stay unchanged until the copy has read it, so a call used to upload and then synchronize
 * the stream: one host wait per call, which drains the queue of kernels ahead of it. Here the
 * bytes are first copied into one of a few pinned staging buffers (in turn), from which the copy
 * is truly asynchronous; an event per buffer says when its copy is done, and a buffer is reused
 * only after that (normally long past). So the caller may change or free its buffer at once, and
 * the device copy is ready for every kernel queued after the call on fg_cu_stream().
 *
 * One host thread drives the device (as with the stream itself): not thread-safe.
 */
#include <string.h>

#include "cuda/cuda_common.cuh"

#define FG_UPLOAD_SLOTS 4

static struct fg_upload_slot {
    void *host; /* pinned, cap bytes */
    size_t cap;
    cudaEvent_t done;
    int pending; /* `done` recorded after this slot's last copy */
} g_slot[FG_UPLOAD_SLOTS];
static int g_next_slot;

fg_status fg_cu_upload(void *dev, const void *host, size_t n, const char *what) {
    if (n == 0) return FG_OK;
    fg_upload_slot &s = g_slot[g_next_slot];
    g_next_slot = (g_next_slot + 1) % FG_UPLOAD_SLOTS;
    if (s.pending) { /* its previous copy must have read the staging bytes */
        FG_CU(cudaEventSynchronize(s.done));
        s.pending = 0;
    }
    if (!s.done) FG_CU(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
    if (s.cap < n) {
        if (s.host) FG_CU(cudaFreeHost(s.host));
        s.host = nullptr;
        s.cap = 0;
        size_t cap = 4096;
        while (cap < n) cap *= 2;
        if (cudaMallocHost(&s.host, cap) != cudaSuccess) {
            (void)cudaGetLastError();
            return fg_error(FG_ERR_OOM, "%s: cannot allocate %zu bytes of pinned host memory for the upload", what,
                            cap);
        }
        s.cap = cap;
    }
    memcpy(s.host, host, n);
    FG_CU(cudaMemcpyAsync(dev, s.host, n, cudaMemcpyHostToDevice, fg_cu_stream()));
    FG_CU(cudaEventRecord(s.done, fg_cu_stream()));
    s.pending = 1;
    return FG_OK;
}
