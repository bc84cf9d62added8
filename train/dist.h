/* dist.h — the processes of a data-parallel run and the collectives they need.
 *
 * A communicator is P processes (ranks 0 .. P-1) that run the same training step on different
 * micro-batches. It is one table of operations (like the kernel table of ops/kernels.h), with
 * three implementations:
 *   - one process (P = 1, built in): every collective is the identity;
 *   - MPI (train/mpi/comm_mpi.c, linked into the flashgrad program when MPI is installed; the
 *     library reaches it through a weak symbol, as ops/kernels.c reaches CUDA): host buffers;
 *   - NCCL (cuda/nccl.cu, in `make cuda`, bootstrapped over MPI): the buffers of device tensors.
 *
 * The one reduction that shapes the numbers, fold_sum, is a FIXED-ORDER left fold over ranks:
 *     out = ((x_0 + x_1) + x_2) + ... + x_{P-1}      (x_r: rank r's buffer, elementwise)
 * done as a reduce-scatter (rank q receives every rank's slice of its shard fg_comm_shard_of(q) and
 * folds them in rank order) followed by an all-gather. A single process that accumulates
 * micro-batch gradients as acc = g_0; acc += g_1; ... (train/trainer.c) computes the same fold, so
 * P processes with one micro-batch each reproduce one process with P micro-batches bit for bit.
 * (MPI_Allreduce promises no order; NCCL's ring reduce neither.)
 */
#ifndef FG_DIST_H
#define FG_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_comm fg_comm;

typedef struct {
    const char *name; /* "single", "mpi" */
    /* buf (n) of dtype dt on device dev: the fold of all ranks' buffers (see the top); with
     * gather 0 only this rank's shard of buf holds it (a reduce-scatter). */
    fg_status (*fold_sum)(fg_comm *c, void *buf, fg_dtype dt, int64_t n, fg_device dev, int gather);
    /* buf (n): every rank's shard of buf (fg_comm_shard_of) copied to every rank. */
    fg_status (*allgather)(fg_comm *c, void *buf, fg_dtype dt, int64_t n, fg_device dev);
    /* all (P · nbytes) = the nbytes of `mine` of every rank, rank order (host memory). */
    fg_status (*allgather_bytes)(fg_comm *c, const void *mine, void *all, size_t nbytes);
    /* the largest v over the ranks */
    fg_status (*max_int)(fg_comm *c, int v, int *out);
    /* ends every rank of the run with exit status `code` (the message is printed already) */
    void (*abort)(fg_comm *c, int code);
    void (*finish)(fg_comm *c); /* the normal end: after the last collective */
} fg_comm_ops;

struct fg_comm {
    const fg_comm_ops *ops;
    int rank, size;
    double seconds; /* wall time spent inside fold_sum and allgather so far */
    void *impl;     /* the implementation's state */
    /* When set, the shards of host buffers (fg_comm_shard_of) are whole blocks of block(n)
     * elements: a ZeRO-1 trainer sets the blocks of the gradient norm (train/trainer.c). */
    int64_t (*block)(int64_t n);
    /* bytes this rank sent plus received in fold_sum, allgather and allgather_bytes so far,
     * counted as the data a collective moves: a reduce-scatter of n elements sends the n - s of
     * the other shards and receives P - 1 slices of this rank's s, an all-gather the reverse */
    uint64_t bytes;
};

/* The run's communicator, started once: MPI's world when the program was started by mpirun (or
 * another MPI launcher) and MPI is linked in, else one process. Under a launcher with P > 1 in a
 * program built without MPI it fails with a message that says how to get it. Never freed before
 * fg_comm_finish. */
fg_status fg_comm_world(fg_comm **out);

/* The one-process communicator (always available). */
fg_comm *fg_comm_single(void);

/* Rank r's shard [lo, hi) of n elements split among P ranks: contiguous, sizes differ by at
 * most one, the larger ones first. */
void fg_comm_shard(int64_t n, int P, int r, int64_t *lo, int64_t *hi);
/* Rank r's shard [lo, hi) of a host buffer of n elements in c's collectives: fg_comm_shard's
 * split of the elements, or with c->block of the ceil(n / b) blocks of b = c->block(n) elements
 * (the last block shorter; a rank may get none). */
void fg_comm_shard_of(const fg_comm *c, int64_t n, int r, int64_t *lo, int64_t *hi);

/* The operations above, with their time added to c->seconds for fold_sum and allgather. */
fg_status fg_comm_fold_sum(fg_comm *c, void *buf, fg_dtype dt, int64_t n, fg_device dev, int gather);
fg_status fg_comm_allgather(fg_comm *c, void *buf, fg_dtype dt, int64_t n, fg_device dev);
fg_status fg_comm_allgather_bytes(fg_comm *c, const void *mine, void *all, size_t nbytes);
int fg_comm_max_int(fg_comm *c, int v); /* an error reads as v */
void fg_comm_abort(fg_comm *c, int code) __attribute__((noreturn));
void fg_comm_finish(fg_comm *c);

/* ---- agreement: every rank must run the same thing ----
 * Each rank describes its run as named text fields (each flag's value, the data's and the
 * program's identity, the state it starts from); fg_comm_agree compares them with rank 0's. */
typedef struct {
    char name[40];
    char value[120];
} fg_comm_field;

/* fields[*n] = {name, the printf of fmt} (both cut to fit), then (*n)++. */
void fg_comm_field_add(fg_comm_field *fields, int *n, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Collective (every rank passes the same n): FG_OK when every rank's fields equal rank 0's; else
 * FG_ERR_ARG on every rank, naming the first rank and field that differ. One process: FG_OK. */
fg_status fg_comm_agree(fg_comm *c, const fg_comm_field *mine, int n);
/* XXH64 of the running program's file (/proc/self/exe): the build's identity; 0 where it cannot be
 * read. */
uint64_t fg_program_hash(void);

/* The fold on host memory, shared by the implementations: acc[i] += x[i] (dtype dt). */
void fg_comm_add_into(fg_dtype dt, void *acc, const void *x, int64_t n);

/* ---- the implementations behind the weak symbols ---- */
/* train/mpi/comm_mpi.c: MPI_Init and the world communicator. */
fg_status fg_comm_mpi_start(fg_comm **out);
/* cuda/nccl.cu: NCCL on device buffers, declared in ops/nccl_backend.h. */

#ifdef __cplusplus
}
#endif
#endif /* FG_DIST_H */
