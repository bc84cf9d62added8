/* softmax.c — softmax over the last dim; the op to read second, after autograd/autograd.c.
 *
 * The math. x is (..., C), seen as R rows of C; y has x's shape (contiguous). Row by row,
 *     y_i = exp(x_i - max_j x_j) / sum_j exp(x_j - max_j x_j)
 * (taking the max out changes nothing in exact arithmetic and keeps exp from overflowing). The
 * Jacobian is dy_i / dx_j = y_i ([i == j] - y_j), so with dy = d loss / d y the backward is
 *     dx = y ∘ (dy − Σ_j dy_j y_j)          (∘: element by element; the sum is one number per row)
 * It needs y, not x: the op keeps its output for the backward. A row whose entries are all -inf
 * (fully masked) has no defined softmax: it outputs zeros and passes no gradient, instead of NaN.
 * The sums (Σ exp, Σ dy y) are taken in double for both dtypes.
 *
 * How an op is built; every op family has this shape, with more arithmetic:
 *  1. The kernels, in ops/cpu/softmax.c: plain loops over raw pointers and sizes, one per dtype
 *     (softmax_fwd_f32/_f64, softmax_bwd_f32/_f64, each a one-line definition over its body,
 *     SOFTMAX_FWD_BODY or SOFTMAX_BWD_BODY, written once for both dtypes), wrapped as
 *     fg_cpu_softmax_forward / fg_cpu_softmax_backward, the CPU's entries in the kernel table
 *     (ops/kernels.h; ops/kernels.c gathers the CPU's table). A kernel knows no tensors and no
 *     autograd, and a backward kernel ADDS into the gradient (+=). The GPU's kernels, with the
 *     same contract, are in cuda/softmax.cu.
 *  2. The op, fg_softmax: the one shell for every device. It
 *     - checks the arguments (fg_op_check: not NULL, a known dtype; then the shape), each failure
 *       an error whose message names the op;
 *     - takes the kernels of x's device, fg_kernels_for(x->device, op); a NULL member means "not
 *       on this device", and the op refuses with FG_ERR_DEVICE;
 *     - makes x contiguous, allocates y on x's device (fg_empty(dtype, x->device, ...)) and runs
 *       the forward kernel on their data pointers;
 *     - records the autograd node, fg_record(y, op, softmax_backward, inputs): NULL when nothing
 *       needs a gradient (grad mode off, or x without requires_grad), and then nothing is kept;
 *     - fills the node's typed state, softmax_state (FG_NODE_STATE), with what the backward
 *       needs: y, kept (fg_node_keep) as fg_alias(y), a second tensor over y's storage — keeping
 *       `y` itself would be a cycle, since y owns the node.
 *  3. The backward rule, softmax_backward(node), run by fg_backward: it reads the state, gets dx,
 *     the gradient buffer of the input, with fg_grad_get (FG_OK and NULL: x wants no gradient; an
 *     error status: out of memory), takes dy, the node's output gradient, as a contiguous tensor
 *     (fg_op_grad_out), and runs the backward kernel of y's device.
 */
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the op, for every device ---- */

/* What the backward needs: the output, as an alias of its storage. */
typedef struct {
    fg_tensor *y;
} softmax_state;

/* inputs {x}. forward: y = softmax(x)  ->  dx += y ∘ (dy − Σ_j dy_j y_j), row by row */
static fg_status softmax_backward(fg_node *n) {
    const softmax_state *s = FG_NODE_STATE(n, softmax_state);
    fg_tensor *dx;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    if (!dx) return FG_OK;
    const fg_kernels *k = fg_kernels_for(s->y->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dy = fg_op_grad_out(n);
    if (!dy) return fg_last_status();
    const int64_t C = s->y->shape[s->y->ndim - 1], R = C ? fg_numel(s->y) / C : 0;
    fg_status st = k->softmax.backward(s->y->dtype, fg_data(dx), fg_data(dy), fg_data(s->y), R, C);
    fg_release(dy);
    return st;
}

fg_tensor *fg_softmax(fg_tensor *x) {
    static const char op[] = "softmax";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK) return NULL;
    if (x->ndim < 1) {
        fg_error(FG_ERR_SHAPE, "%s: x %s needs at least one dim", op, FG_SHP(x, b));
        return NULL;
    }
    const fg_kernels *k = fg_kernels_for(x->device, op);
    if (!k) return NULL;
    if (!k->softmax.forward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    const int64_t C = x->shape[x->ndim - 1], R = C ? fg_numel(x) / C : 0;
    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *y = X ? fg_empty(x->dtype, x->device, x->ndim, x->shape) : NULL;
    if (y && k->softmax.forward(x->dtype, fg_data(y), fg_data(X), R, C) != FG_OK) {
        fg_release(y);
        y = NULL;
    }
    fg_node *node = y ? fg_record(y, op, softmax_backward, 1, (fg_tensor *[]){x}) : NULL;
    if (node) {
        softmax_state *s = FG_NODE_STATE(node, softmax_state);
        fg_tensor *alias = fg_alias(y); /* not `y` itself: y owns the node (no cycle) */
        s->y = fg_node_keep(node, alias);
        fg_release(alias);
        if (!s->y) { /* releasing y frees the node */
            fg_release(y);
            y = NULL;
        }
    }
    fg_release(X);
    return y;
}
