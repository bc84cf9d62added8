/* nccl_backend.h — the NCCL backend of the data-parallel communicator (train/dist.h): the
 * communicator operations on device buffers, one GPU per rank. cuda/nccl.cu defines these
 * functions when the CUDA build finds NCCL; train/mpi/comm_mpi.c, which bootstraps NCCL over MPI
 * as llm.c does, references them weakly (#pragma weak), so a build without them still links and
 * a multi-process CUDA run says NCCL is missing. All three sides include this header, so the
 * compiler checks the definitions against the declarations.
 *
 * Pointers are device pointers of the library's CUDA device; everything runs on its one stream.
 */
#ifndef FG_NCCL_BACKEND_H
#define FG_NCCL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rank 0: fills id with NCCL's unique id (its size in *len, at most cap bytes). */
fg_status fg_nccl_id(void *id, size_t cap, size_t *len);
/* Every rank: joins the clique of `size` ranks with rank 0's id. */
fg_status fg_nccl_start(int rank, int size, const void *id, size_t len);
/* The contracts of fg_comm's fold_sum and allgather (train/dist.h) on device buffers (n of dt). */
fg_status fg_nccl_fold_sum(void *buf, fg_dtype dt, int64_t n, int gather);
fg_status fg_nccl_allgather(void *buf, fg_dtype dt, int64_t n);
/* The fold's sum on the device: out (m) = slices[0] + slices[1] + ... + slices[P-1], slice q (m) at
 * slices + q·m, added in rank order as fg_comm_add_into folds (so the same bits for any P). */
fg_status fg_nccl_fold_slices(void *out, const void *slices, fg_dtype dt, int64_t m, int P);

#ifdef __cplusplus
}
#endif
#endif /* FG_NCCL_BACKEND_H */
