/* dropout.c — the CPU's dropout kernels (ops/kernels.h's FG_KERNELS_DROPOUT): the keep mask is
 * regenerated from (seed, stream) in both directions, never stored. The op's shell is in
 * ops/dropout.c, the GPU's kernels (drawing the same numbers) in cuda/dropout.cu.
 * Philox yields 4 words per counter block (block k/4, word k%4).
 */
#include "ops/cpu/kernel.h"
#include "ops/cpu/vmath.h"
#include "ops/cpu/vphilox.h"
#include "ops/kernels_cpu.h"
#include "tensor/philox.h"

/* The keep mask of elements [k0, k1): out[k] (and in the backward dx[k]) for a contiguous range.
 * The words of the covering Philox blocks come DROP_BLOCKS at a time from fg_philox_stream_blocks
 * (ops/cpu/vphilox.h: the same words as fg_philox_block, a vector of blocks per instruction sequence);
 * fg_par_range splits the range over the pool in fixed pieces (element-wise: any split gives the
 * same result). */
#define DROP_BLOCKS 64
#define DROP_CHUNK 16384 /* elements per piece: a multiple of 4 */

typedef struct {
    void *y;       /* out (forward) or dx (backward) */
    const void *x; /* x (forward) or dout (backward) */
    uint64_t seed, stream;
    uint32_t thr;
    double scale;
    int backward; /* 0: y = keep ? x·scale : 0;  1: y += keep ? x·scale : 0 */
} drop_job;

#define DROP_RANGE_BODY(T)                                                                                             \
    T *y = J->y;                                                                                                       \
    const T *x = J->x;                                                                                                 \
    const T scale = (T)J->scale;                                                                                       \
    uint32_t w[4 * DROP_BLOCKS];                                                                                       \
    for (int64_t k = k0; k < k1;) {                                                                                    \
        const uint64_t blk = (uint64_t)k >> 2, last = (uint64_t)(k1 - 1) >> 2;                                         \
        const int64_t nb = last - blk + 1 < DROP_BLOCKS ? (int64_t)(last - blk + 1) : DROP_BLOCKS;                     \
        fg_philox_stream_blocks(J->seed, J->stream, blk, nb, w);                                                       \
        const int64_t end = (int64_t)(4 * (blk + (uint64_t)nb)) < k1 ? (int64_t)(4 * (blk + (uint64_t)nb)) : k1;       \
        const int64_t k4 = (int64_t)(4 * blk); /* w[k - k4] is element k's word */                                     \
        if (J->backward)                                                                                               \
            for (; k < end; k++) y[k] += w[k - k4] >= J->thr ? x[k] * scale : (T)0;                                    \
        else                                                                                                           \
            for (; k < end; k++) y[k] = w[k - k4] >= J->thr ? x[k] * scale : (T)0;                                     \
    }

static void drop_range_f32(const drop_job *J, int64_t k0, int64_t k1) { DROP_RANGE_BODY(float); }
static void drop_range_f64(const drop_job *J, int64_t k0, int64_t k1) { DROP_RANGE_BODY(double); }

/* a drop_job and its dtype: the context of one fg_par_range */
typedef struct {
    drop_job job;
    fg_dtype dt;
} drop_ctx;

/* elements [b, e): one piece of fg_par_range */
static void drop_piece(void *ctx, int64_t b, int64_t e) {
    const drop_ctx *c = ctx;
    if (c->dt == FG_F32)
        drop_range_f32(&c->job, b, e);
    else
        drop_range_f64(&c->job, b, e);
}

/* y = / += keep ? x·scale : 0 over n contiguous elements */
static void drop_contiguous(fg_dtype dt, void *y, const void *x, int64_t n, uint64_t seed, uint64_t stream,
                            uint32_t thr, double scale, int backward) {
    drop_ctx c = {
        .job = {.y = y, .x = x, .seed = seed, .stream = stream, .thr = thr, .scale = scale, .backward = backward},
        .dt = dt};
    fg_par_range(n, DROP_CHUNK, 1.0, drop_piece, &c); /* ~1 ns an element on one core */
}

/* ---- the CPU kernels (ops/kernels.h) ---- */
fg_status fg_cpu_dropout_forward(fg_dtype dt, void *out, const void *x, int64_t n, uint64_t seed, uint64_t stream,
                                 double p) {
    drop_contiguous(dt, out, x, n, seed, stream, fg_dropout_threshold(p), 1.0 / (1.0 - p), 0);
    return FG_OK;
}

/* forward: out[k] = keep(k) ? x[k] * scale : 0  ->  dx[k] += keep(k) ? dout[k] * scale : 0 */
fg_status fg_cpu_dropout_backward(fg_dtype dt, void *dx, const void *dout, int64_t n, uint64_t seed, uint64_t stream,
                                  double p) {
    drop_contiguous(dt, dx, dout, n, seed, stream, fg_dropout_threshold(p), 1.0 / (1.0 - p), 1);
    return FG_OK;
}
