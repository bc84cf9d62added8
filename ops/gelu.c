/* gelu.c — GELU in the tanh form GPT-2 uses.
 *
 * Legend: x is any shape (made contiguous); out has x's shape (contiguous).
 * saved for backward: X (x, contiguous).
 *
 *   u = sqrt(2/pi) * (x + 0.044715 x³)        out = 0.5 x (1 + tanh u)
 *
 * The backward recomputes the nonlinearity from X (cheaper than storing it):
 *   d out / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh² u) sqrt(2/pi) (1 + 3 * 0.044715 x²)
 *
 * The kernels are in ops/cpu/gelu.c (float64 with tanh; float32 through exp, vectorized).
 */
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the op, for every device ---- */

/* What the backward needs: x made contiguous. */
typedef struct {
    fg_tensor *x;
} gelu_state;

/* inputs {x}; a fresh gradient buffer is written, not added into */
static fg_status gelu_backward(fg_node *n) {
    const gelu_state *s = FG_NODE_STATE(n, gelu_state);
    fg_tensor *dx;
    int fresh;
    FG_TRY(fg_grad_get_fresh(n->inputs[0], &dx, &fresh));
    if (!dx) return FG_OK;
    const fg_kernels *k = fg_kernels_for(s->x->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = k->gelu.backward(s->x->dtype, fg_data(dx), fg_data(dout), fg_data(s->x), fg_numel(s->x), !fresh);
    fg_release(dout);
    return st;
}

fg_tensor *fg_gelu(fg_tensor *x) {
    static const char op[] = "gelu";
    if (fg_op_check(op, "x", x) != FG_OK) return NULL;
    const fg_kernels *k = fg_kernels_for(x->device, op);
    if (!k) return NULL;
    if (!k->gelu.forward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *out = X ? fg_empty(x->dtype, x->device, x->ndim, x->shape) : NULL;
    if (out && k->gelu.forward(x->dtype, fg_data(out), fg_data(X), fg_numel(X)) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    fg_node *node = out ? fg_record(out, op, gelu_backward, 1, (fg_tensor *[]){x}) : NULL;
    if (node) FG_NODE_STATE(node, gelu_state)->x = fg_node_keep(node, X);
    fg_release(X);
    return out;
}
