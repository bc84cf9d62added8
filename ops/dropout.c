/* dropout.c — inverted dropout with a mask that is regenerated, never stored.
 *
 * Legend: x is any shape; out has x's shape (contiguous). k is an element's flat C-order index.
 *
 *   keep(k) = fg_philox_u32(seed, stream, k) >= fg_dropout_threshold(p)
 *   out[k]  = keep(k) ? x[k] / (1 - p) : 0
 *
 * The backward calls keep(k) again with the same (seed, stream) (kept in iargs), so it drops
 * exactly the elements the forward dropped; cuda/dropout.cu draws the same numbers.
 * Philox yields 4 words per counter block; the kernels compute one block per 4 elements.
 */
#include <string.h>

#include "ops/ops_internal.h"
#include "tensor/philox.h"

#define DROPOUT_KERNELS(T, SFX)                                                                        \
    /* operands: out (contiguous, so its offset is k), x. Whole Philox blocks (k % 4 == 0, four      \
     * elements) take one fg_philox_block; the few elements at the ends of a row draw one word. */    \
    static void dropout_fwd_##SFX(T *out, const T *x, fg_iter *it, uint64_t seed, uint64_t stream,     \
                                  uint32_t thr, double scale_) {                                       \
        T scale = (T)scale_;                                                                           \
        while (fg_iter_next(it)) {                                                                     \
            /* out is contiguous: along a row k steps by 1 (or the row is one element) */              \
            int64_t k0 = it->off[0], sx = it->inner[1], n = it->n;                                     \
            const T *px = x + it->off[1];                                                              \
            for (int64_t i = 0; i < n;) {                                                              \
                uint64_t k = (uint64_t)(k0 + i);                                                       \
                if ((k & 3) == 0 && n - i >= 4) {                                                      \
                    uint32_t b[4];                                                                     \
                    fg_philox_block(seed, stream, k >> 2, b);                                          \
                    for (int j = 0; j < 4; j++) out[k + j] = b[j] >= thr ? px[(i + j) * sx] * scale : (T)0; \
                    i += 4;                                                                            \
                } else {                                                                               \
                    out[k] = fg_philox_u32(seed, stream, k) >= thr ? px[i * sx] * scale : (T)0;        \
                    i++;                                                                               \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    }                                                                                                  \
    /* forward: out[k] = keep(k) ? x[k] * scale : 0  ->  dx[k] += keep(k) ? dout[k] * scale : 0 */   \
    static void dropout_bwd_##SFX(T *dx, const T *dout, int64_t n, uint64_t seed, uint64_t stream,     \
                                  uint32_t thr, double scale_) {                                       \
        T scale = (T)scale_;                                                                           \
        int64_t k = 0;                                                                                 \
        for (; k + 4 <= n; k += 4) {                                                                   \
            uint32_t b[4];                                                                             \
            fg_philox_block(seed, stream, (uint64_t)k >> 2, b);                                        \
            for (int j = 0; j < 4; j++) dx[k + j] += b[j] >= thr ? dout[k + j] * scale : (T)0;         \
        }                                                                                              \
        for (; k < n; k++) dx[k] += fg_philox_u32(seed, stream, (uint64_t)k) >= thr ? dout[k] * scale : (T)0; \
    }
DROPOUT_KERNELS(float, f32)
DROPOUT_KERNELS(double, f64)

/* fargs[0] = p; iargs = {seed, stream} */
static fg_status dropout_backward(fg_node *n) {
    fg_tensor *dx = fg_grad_buffer(n->inputs[0]);
    if (!dx) return FG_OK;
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    double p = n->fargs[0];
    FG_DISPATCH(dx->dtype, dropout_bwd, fg_data(dx), fg_data(dout), fg_numel(dx), (uint64_t)n->iargs[0],
                (uint64_t)n->iargs[1], fg_dropout_threshold(p), 1.0 / (1.0 - p));
    fg_release(dout);
    return FG_OK;
}

fg_tensor *fg_dropout(fg_tensor *x, double p, uint64_t seed, uint64_t stream) {
    static const char op[] = "dropout";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK) return NULL;
    if (!(p >= 0.0 && p < 1.0)) {
        fg_error(FG_ERR_ARG, "%s: p = %g is outside [0, 1) (x %s)", op, p, FG_SHP(x, b));
        return NULL;
    }
#ifdef FG_WITH_CUDA
    if (x->device == FG_CUDA) return fg_cuda_dropout(x, p, seed, stream); /* cuda/dropout.cu */
#endif
    if (x->device != FG_CPU) return fg_op_no_cuda(op); /* CUDA dispatch point */
    if (p == 0.0) return fg_retain(x);
    fg_tensor *out = fg_empty(x->dtype, FG_CPU, x->ndim, x->shape);
    if (!out) return NULL;
    int64_t st[2][FG_MAX_DIMS];
    fg_contig_strides(x->ndim, x->shape, st[0]);
    memcpy(st[1], x->strides, sizeof st[1]);
    fg_iter it;
    fg_iter_init(&it, x->ndim, x->shape, 2, st);
    FG_DISPATCH(x->dtype, dropout_fwd, fg_data(out), fg_data(x), &it, seed, stream, fg_dropout_threshold(p),
                1.0 / (1.0 - p));
    fg_node *node = fg_record(out, op, dropout_backward, 1, (fg_tensor *[]){x});
    if (node) {
        node->fargs[0] = p;
        node->iargs[0] = (int64_t)seed;
        node->iargs[1] = (int64_t)stream;
    }
    return out;
}
