/* nccl.h (emulator) — a loopback stand-in for the NCCL calls cuda/nccl.cu makes, for a clique of
 * one rank: the emulator is one process, so a communicator of size 1 is all it can hold. At P = 1
 * cuda/nccl.cu sends nothing (a rank never sends to itself: its own slice is a device copy), so
 * the emulated suite runs its device copy and fold kernel; a send or receive names a peer that
 * cannot exist here and fails. Buffers must be device memory, as for NCCL. */
#ifndef FG_EMU_NCCL_H
#define FG_EMU_NCCL_H

#include <string.h>

#include "cuda_runtime.h"

typedef enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclInProgress = 7 } ncclResult_t;
typedef enum { ncclFloat32 = 7, ncclFloat64 = 8 } ncclDataType_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
struct fg_emu_nccl_s {
    int rank, size;
};
typedef fg_emu_nccl_s *ncclComm_t;

inline const char *ncclGetErrorString(ncclResult_t r) {
    return r == ncclSuccess ? "no error" : r == ncclInvalidArgument ? "invalid argument" : "invalid usage";
}
inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    memcpy(id->internal, "fg-emu-loopback", 15);
    return ncclSuccess;
}
inline ncclResult_t ncclCommInitRank(ncclComm_t *c, int size, ncclUniqueId id, int rank) {
    if (size != 1 || rank != 0 || memcmp(id.internal, "fg-emu-loopback", 15)) return ncclInvalidArgument;
    *c = new fg_emu_nccl_s{rank, size};
    return ncclSuccess;
}
inline ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r) {
    if (!c) return ncclInvalidArgument;
    *r = ncclSuccess; /* a loopback clique has no peer to lose */
    return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
    if (!c) return ncclInvalidArgument;
    delete c;
    return ncclSuccess;
}
inline ncclResult_t ncclGroupStart() { return ncclSuccess; }
inline ncclResult_t ncclGroupEnd() { return ncclSuccess; }
inline ncclResult_t ncclSend(const void *buf, size_t n, ncclDataType_t ty, int peer, ncclComm_t c, cudaStream_t) {
    if (!fg_emu_dev_check(buf, n * (ty == ncclFloat64 ? 8 : 4), "ncclSend")) return ncclInvalidArgument;
    return c && peer == c->rank ? ncclInvalidUsage : ncclInvalidArgument; /* no peer in a clique of one */
}
inline ncclResult_t ncclRecv(void *buf, size_t n, ncclDataType_t ty, int peer, ncclComm_t c, cudaStream_t) {
    if (!fg_emu_dev_check(buf, n * (ty == ncclFloat64 ? 8 : 4), "ncclRecv")) return ncclInvalidArgument;
    return c && peer == c->rank ? ncclInvalidUsage : ncclInvalidArgument;
}

#endif /* FG_EMU_NCCL_H */
