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
#include "ops/kernels.h"
#include "ops/ops_internal.h"

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
