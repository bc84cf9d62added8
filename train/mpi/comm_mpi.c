/* comm_mpi.c — the MPI communicator (train/dist.h), linked into the flashgrad program when MPI is
 * installed (the Makefile compiles it with `mpicc --showme:compile` and links with
 * `mpicc --showme:link`); the library reaches fg_comm_mpi_start through a weak symbol.
 *
 * fold_sum on host buffers: MPI_Alltoallv sends rank q the slice of every rank's buffer that is
 * q's shard; q folds the P slices in rank order (dist.h), then MPI_Allgatherv (a copy: exact)
 * gives every rank the whole result. Device buffers go to NCCL (cuda/nccl.cu), started here on
 * first use with its unique id broadcast from rank 0. MPI's default error handler stays: a rank
 * that dies makes the launcher end the others. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/nccl_backend.h"
#include "tensor/error.h"
#include "train/dist.h"

/* cuda/nccl.cu, when linked in (make cuda): weak references to ops/nccl_backend.h's functions */
#pragma weak fg_nccl_id
#pragma weak fg_nccl_start
#pragma weak fg_nccl_fold_sum
#pragma weak fg_nccl_allgather

typedef struct {
    int *counts, *displs, *rcounts, *rdispls; /* (P) each */
    void *tmp;                                /* P slices of this rank's shard */
    size_t tmp_bytes;
    int nccl; /* NCCL started */
} mpi_state;

static fg_status mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return fg_error(FG_ERR_IO, "MPI %s: %s", what, msg);
}

/* the shards of n among the ranks, as MPI counts */
static fg_status layout(fg_comm *c, int64_t n) {
    mpi_state *s = c->impl;
    for (int q = 0; q < c->size; q++) {
        int64_t lo, hi;
        fg_comm_shard_of(c, n, q, &lo, &hi);
        if (hi - lo > 0x7fffffff || lo > 0x7fffffff)
            return fg_error(FG_ERR_ARG, "MPI: %lld elements are too many for one collective", (long long)n);
        s->counts[q] = (int)(hi - lo);
        s->displs[q] = (int)lo;
    }
    return FG_OK;
}

static fg_status nccl_ready(fg_comm *c) {
    mpi_state *s = c->impl;
    if (s->nccl) return FG_OK;
    if (!fg_nccl_start || !fg_nccl_id || !fg_nccl_fold_sum || !fg_nccl_allgather)
        return fg_error(FG_ERR_DEVICE,
                        "several processes on CUDA need NCCL: this flashgrad was built without it (make cuda)");
    char id[256] = {0};
    size_t len = 0;
    int st = FG_OK;
    if (c->rank == 0) st = fg_nccl_id(id, sizeof id, &len);
    int info[2] = {st, (int)len};
    MPI_Bcast(info, 2, MPI_INT, 0, MPI_COMM_WORLD);
    if (info[0] != FG_OK) return c->rank == 0 ? (fg_status)st : fg_error(FG_ERR_DEVICE, "NCCL: rank 0 failed to start");
    MPI_Bcast(id, info[1], MPI_BYTE, 0, MPI_COMM_WORLD);
    fg_status r = fg_nccl_start(c->rank, c->size, id, (size_t)info[1]);
    if (r != FG_OK) return r;
    s->nccl = 1;
    return FG_OK;
}

static fg_status mpi_fold(fg_comm *c, void *buf, fg_dtype dt, int64_t n, fg_device dev, int gather) {
    mpi_state *s = c->impl;
    if (dev != FG_CPU) {
        fg_status st = nccl_ready(c);
        return st != FG_OK ? st : fg_nccl_fold_sum(buf, dt, n, gather);
    }
    fg_status st = layout(c, n);
    if (st != FG_OK) return st;
    const int P = c->size, r = c->rank, mine = s->counts[r];
    const size_t es = fg_dtype_size(dt);
    MPI_Datatype ty = dt == FG_F64 ? MPI_DOUBLE : MPI_FLOAT;
    size_t need = (size_t)P * (size_t)(mine > 0 ? mine : 1) * es;
    if (need > s->tmp_bytes) {
        void *t = realloc(s->tmp, need);
        if (!t) return fg_error(FG_ERR_OOM, "MPI: out of memory for %zu bytes", need);
        s->tmp = t;
        s->tmp_bytes = need;
    }
    for (int q = 0; q < P; q++) {
        s->rcounts[q] = mine;
        s->rdispls[q] = q * mine;
    }
    int rc = MPI_Alltoallv(buf, s->counts, s->displs, ty, s->tmp, s->rcounts, s->rdispls, ty, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "all-to-all");
    /* the left fold over ranks 0 .. P-1 of this rank's shard */
    char *out = (char *)buf + (size_t)s->displs[r] * es;
    memcpy(out, s->tmp, (size_t)mine * es);
    for (int q = 1; q < P; q++) fg_comm_add_into(dt, out, (char *)s->tmp + (size_t)q * mine * es, mine);
    if (!gather) return FG_OK;
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, ty, buf, s->counts, s->displs, ty, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? FG_OK : mpi_fail(rc, "all-gather");
}

static fg_status mpi_allgather(fg_comm *c, void *buf, fg_dtype dt, int64_t n, fg_device dev) {
    mpi_state *s = c->impl;
    if (dev != FG_CPU) {
        fg_status st = nccl_ready(c);
        return st != FG_OK ? st : fg_nccl_allgather(buf, dt, n);
    }
    fg_status st = layout(c, n);
    if (st != FG_OK) return st;
    MPI_Datatype ty = dt == FG_F64 ? MPI_DOUBLE : MPI_FLOAT;
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, ty, buf, s->counts, s->displs, ty, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? FG_OK : mpi_fail(rc, "all-gather");
}

static fg_status mpi_allgather_bytes(fg_comm *c, const void *mine, void *all, size_t nbytes) {
    (void)c;
    if (nbytes > 0x7fffffff) return fg_error(FG_ERR_ARG, "MPI: %zu bytes are too many for one all-gather", nbytes);
    int rc = MPI_Allgather(mine, (int)nbytes, MPI_BYTE, all, (int)nbytes, MPI_BYTE, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? FG_OK : mpi_fail(rc, "all-gather");
}

static fg_status mpi_max_int(fg_comm *c, int v, int *out) {
    (void)c;
    int rc = MPI_Allreduce(&v, out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? FG_OK : mpi_fail(rc, "all-reduce");
}

static void mpi_abort(fg_comm *c, int code) {
    (void)c;
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static void mpi_finish(fg_comm *c) {
    mpi_state *s = c->impl;
    fflush(stdout);
    MPI_Finalize();
    free(s->counts);
    free(s->tmp);
    free(s);
    c->impl = NULL;
}

static const fg_comm_ops mpi_ops = {"mpi",       mpi_fold,  mpi_allgather, mpi_allgather_bytes,
                                    mpi_max_int, mpi_abort, mpi_finish};

fg_status fg_comm_mpi_start(fg_comm **out) {
    static fg_comm world;
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(NULL, NULL) != MPI_SUCCESS) return fg_error(FG_ERR_IO, "MPI_Init failed");
    world.ops = &mpi_ops;
    MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world.size);
    mpi_state *s = calloc(1, sizeof *s);
    int *ints = calloc((size_t)4 * (size_t)world.size, sizeof *ints);
    if (!s || !ints) {
        free(s);
        free(ints);
        return fg_error(FG_ERR_OOM, "MPI: out of memory");
    }
    s->counts = ints;
    s->displs = ints + world.size;
    s->rcounts = ints + 2 * world.size;
    s->rdispls = ints + 3 * world.size;
    world.impl = s;
    *out = &world;
    return FG_OK;
}
