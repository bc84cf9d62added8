/* dropout.c — inverted dropout with a mask that is regenerated, never stored.
 *
 * Legend: x is any shape (made contiguous); out has x's shape (contiguous). k is an element's flat
 * C-order index.
 *
 *   keep(k) = fg_philox_u32(seed, stream, k) >= fg_dropout_threshold(p)
 *   out[k]  = keep(k) ? x[k] / (1 - p) : 0
 *
 * saved for backward: only (p, seed, stream). The backward calls keep(k) again with the same
 * (seed, stream), so it drops exactly the elements the forward dropped; cuda/dropout.cu draws the
 * same numbers.
 * Philox yields 4 words per counter block (block k/4, word k%4).
 */
#include "ops/kernels_cpu.h"
#include "ops/ops_internal.h"
#include "ops/cpu/vmath.h"
#include "ops/cpu/vphilox.h"
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

/* ---- the op, for every device ---- */

/* What the backward needs: the mask's parameters (the mask itself is drawn again). */
typedef struct {
    double p;
    uint64_t seed, stream;
} dropout_state;

/* inputs {x} */
static fg_status dropout_backward(fg_node *n) {
    const dropout_state *s = FG_NODE_STATE(n, dropout_state);
    fg_tensor *dx;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    if (!dx) return FG_OK;
    const fg_kernels *k = fg_kernels_for(dx->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = k->dropout.backward(dx->dtype, fg_data(dx), fg_data(dout), fg_numel(dx), s->seed, s->stream, s->p);
    fg_release(dout);
    return st;
}

fg_tensor *fg_dropout(fg_tensor *x, double p, uint64_t seed, uint64_t stream) {
    static const char op[] = "dropout";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK) return NULL;
    if (!(p >= 0.0 && p < 1.0)) {
        fg_error(FG_ERR_ARG, "%s: p = %g is outside [0, 1) (x %s)", op, p, FG_SHP(x, b));
        return NULL;
    }
    const fg_kernels *k = fg_kernels_for(x->device, op);
    if (!k) return NULL;
    if (!k->dropout.forward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }
    if (p == 0.0) return fg_retain(x);

    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *out = X ? fg_empty(x->dtype, x->device, x->ndim, x->shape) : NULL;
    if (out && k->dropout.forward(x->dtype, fg_data(out), fg_data(X), fg_numel(X), seed, stream, p) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    fg_node *node = out ? fg_record(out, op, dropout_backward, 1, (fg_tensor *[]){x}) : NULL;
    if (node) *FG_NODE_STATE(node, dropout_state) = (dropout_state){p, seed, stream};
    fg_release(X);
    return out;
}
