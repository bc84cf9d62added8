/* dist.c — the one-process communicator and the entry points of every communicator (dist.h). */
#include "train/dist.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/error.h"
#include "tensor/fileio.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- one process ---- */
static fg_status single_fold(fg_comm *c, void *buf, fg_dtype dt, int64_t n, fg_device dev, int gather) {
    (void)c, (void)buf, (void)dt, (void)n, (void)dev, (void)gather;
    return FG_OK;
}
static fg_status single_allgather(fg_comm *c, void *buf, fg_dtype dt, int64_t n, fg_device dev) {
    (void)c, (void)buf, (void)dt, (void)n, (void)dev;
    return FG_OK;
}
static fg_status single_allgather_bytes(fg_comm *c, const void *mine, void *all, size_t nbytes) {
    (void)c;
    memmove(all, mine, nbytes);
    return FG_OK;
}
static fg_status single_max_int(fg_comm *c, int v, int *out) {
    (void)c;
    *out = v;
    return FG_OK;
}
static void single_abort(fg_comm *c, int code) {
    (void)c;
    exit(code);
}
static void single_finish(fg_comm *c) { (void)c; }

static const fg_comm_ops single_ops = {"single",           single_fold,    single_allgather, single_allgather_bytes,
                                       single_max_int,     single_abort,   single_finish};
static fg_comm single_comm = {&single_ops, 0, 1, 0.0, NULL, NULL, 0};

fg_comm *fg_comm_single(void) { return &single_comm; }

/* ---- the world ---- */
/* Linked in with train/mpi/comm_mpi.o; NULL in a program without MPI. */
extern fg_status fg_comm_mpi_start(fg_comm **out) __attribute__((weak));

/* The process count a launcher announces in the environment (Open MPI, MPICH / Hydra, PMIx,
 * Slurm's srun), or 0 when none did. */
static int launcher_size(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return atoi(v) > 0 ? atoi(v) : 1;
    }
    return 0;
}

fg_status fg_comm_world(fg_comm **out) {
    static fg_comm *world;
    if (world) {
        *out = world;
        return FG_OK;
    }
    int launched = launcher_size();
    if (launched == 0 || !fg_comm_mpi_start) {
        if (launched > 1)
            return fg_error(FG_ERR_STATE,
                            "started as one of %d processes, but flashgrad was built without MPI; install "
                            "libopenmpi-dev openmpi-bin and rebuild (make)",
                            launched);
        *out = world = &single_comm;
        return FG_OK;
    }
    fg_status st = fg_comm_mpi_start(&world);
    if (st != FG_OK) return st;
    *out = world;
    return FG_OK;
}

void fg_comm_shard(int64_t n, int P, int r, int64_t *lo, int64_t *hi) {
    int64_t base = n / P, rem = n % P;
    *lo = (int64_t)r * base + (r < rem ? r : rem);
    *hi = *lo + base + (r < rem ? 1 : 0);
}

void fg_comm_shard_of(const fg_comm *c, int64_t n, int r, int64_t *lo, int64_t *hi) {
    if (!c->block) {
        fg_comm_shard(n, c->size, r, lo, hi);
        return;
    }
    const int64_t b = c->block(n) > 0 ? c->block(n) : 1, blocks = (n + b - 1) / b;
    int64_t blo, bhi;
    fg_comm_shard(blocks, c->size, r, &blo, &bhi);
    *lo = blo * b < n ? blo * b : n;
    *hi = bhi * b < n ? bhi * b : n;
}

/* the bytes of this rank's shard of n elements of dt (dist.h, `bytes`) */
static uint64_t shard_bytes(const fg_comm *c, int64_t n, fg_dtype dt) {
    int64_t lo, hi;
    fg_comm_shard_of(c, n, c->rank, &lo, &hi);
    return (uint64_t)(hi - lo) * fg_dtype_size(dt);
}

fg_status fg_comm_fold_sum(fg_comm *c, void *buf, fg_dtype dt, int64_t n, fg_device dev, int gather) {
    if (c->size == 1) return FG_OK;
    double t0 = now();
    fg_status st = c->ops->fold_sum(c, buf, dt, n, dev, gather);
    c->seconds += now() - t0;
    /* reduce-scatter + all-gather (if gather): each moves the others' shards and P - 1 of its own */
    const uint64_t all = (uint64_t)n * fg_dtype_size(dt), own = shard_bytes(c, n, dt);
    c->bytes += ((all - own) + (uint64_t)(c->size - 1) * own) * (gather ? 2 : 1);
    return st;
}

fg_status fg_comm_allgather(fg_comm *c, void *buf, fg_dtype dt, int64_t n, fg_device dev) {
    if (c->size == 1) return FG_OK;
    double t0 = now();
    fg_status st = c->ops->allgather(c, buf, dt, n, dev);
    c->seconds += now() - t0;
    const uint64_t all = (uint64_t)n * fg_dtype_size(dt), own = shard_bytes(c, n, dt);
    c->bytes += (all - own) + (uint64_t)(c->size - 1) * own;
    return st;
}

fg_status fg_comm_allgather_bytes(fg_comm *c, const void *mine, void *all, size_t nbytes) {
    if (c->size > 1) c->bytes += 2 * (uint64_t)(c->size - 1) * nbytes;
    return c->ops->allgather_bytes(c, mine, all, nbytes);
}

int fg_comm_max_int(fg_comm *c, int v) {
    int out = v;
    if (c->size > 1 && c->ops->max_int(c, v, &out) != FG_OK) return v;
    return out;
}

void fg_comm_abort(fg_comm *c, int code) {
    c->ops->abort(c, code);
    exit(code); /* an implementation that returned */
}

void fg_comm_finish(fg_comm *c) { c->ops->finish(c); }

void fg_comm_add_into(fg_dtype dt, void *acc, const void *x, int64_t n) {
    if (dt == FG_F64) {
        double *a = acc;
        const double *b = x;
        for (int64_t i = 0; i < n; i++) a[i] += b[i];
    } else {
        float *a = acc;
        const float *b = x;
        for (int64_t i = 0; i < n; i++) a[i] += b[i];
    }
}

/* ---- agreement ---- */
void fg_comm_field_add(fg_comm_field *f, int *k, const char *name, const char *fmt, ...) {
    snprintf(f[*k].name, sizeof f[*k].name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f[*k].value, sizeof f[*k].value, fmt, ap);
    va_end(ap);
    (*k)++;
}

fg_status fg_comm_agree(fg_comm *c, const fg_comm_field *mine, int n) {
    if (c->size == 1) return FG_OK;
    fg_comm_field *all = malloc((size_t)c->size * (size_t)n * sizeof *all);
    if (!all) return fg_error(FG_ERR_OOM, "out of memory for the ranks' configurations");
    fg_status st = fg_comm_allgather_bytes(c, mine, all, (size_t)n * sizeof *mine);
    for (int q = 1; st == FG_OK && q < c->size; q++)
        for (int i = 0; i < n; i++) {
            const fg_comm_field *x = &all[(size_t)q * (size_t)n + (size_t)i], *z = &all[i];
            if (strcmp(x->value, z->value)) {
                st = fg_error(FG_ERR_ARG, "rank %d's %s %s differs from rank 0's %s; every process must run the same", q,
                              x->name, x->value, z->value);
                break;
            }
        }
    free(all);
    return st;
}

uint64_t fg_program_hash(void) {
    FILE *fp = fopen("/proc/self/exe", "rb");
    if (!fp) return 0;
    fg_xxh64_state h;
    fg_xxh64_init(&h, 0);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, fp)) > 0) fg_xxh64_update(&h, buf, n);
    fclose(fp);
    return fg_xxh64_digest(&h);
}
