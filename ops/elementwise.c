/* elementwise.c — add, sub, mul, div with NumPy broadcasting; add_scalar, mul_scalar.
 *
 * Legend: a and b are any two shapes that broadcast (aligned at the right; a size-1 or missing dim
 * stretches), out has the broadcast shape, e.g. a (B, T, C) + b (C) -> out (B, T, C).
 *
 * Forward reads a and b through broadcast strides (0 along stretched dims), so neither is copied
 * or expanded. Backward is the forward's derivative summed over every output element that read
 * a given input element: an input's gradient buffer is walked with the same broadcast strides, so
 * the += of all those elements lands on the one element they came from (a reduction over the
 * broadcast dims, in output order).
 *
 * The kernels are in ops/cpu/elementwise.c.
 */
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ============================================================================================
 * binary ops: out = a ∘ b with broadcasting
 * ============================================================================================ */

static const char *const op_names[] = {"add", "sub", "mul", "div"};

/* Backward rules, from the forward lines
 *   add: out = a + b   ->  da += dout,            db += dout
 *   sub: out = a - b   ->  da += dout,            db -= dout
 *   mul: out = a * b   ->  da += dout * b,        db += dout * a
 *   div: out = a / b   ->  da += dout / b,        db -= dout * a / b²
 * each summed over the broadcast dims of its input. The rule reads the inputs themselves. */
static fg_status binary_backward(fg_node *n, fg_binary_op kind) {
    fg_tensor *a = n->inputs[0], *b = n->inputs[1], *ga = NULL, *gb;
    int fresh[2] = {0, 0}; /* a gradient buffer made here, unset: written instead of added into */
    /* add: da = dout, so a's gradient can be dout itself when a has none yet (a residual stream's) */
    int taken = 0;
    if (kind == FG_BINARY_ADD) FG_TRY(fg_grad_take_output_grad(n, a, &taken));
    if (!taken) FG_TRY(fg_grad_get_fresh(a, &ga, &fresh[0]));
    FG_TRY(fg_grad_get_fresh(b, &gb, &fresh[1]));
    if (!ga && !gb) return FG_OK;
    const fg_kernels *k = fg_kernels_for(a->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dy = fg_op_grad_out(n);
    if (!dy) return fg_last_status();
    const int nd = dy->ndim;
    const int64_t *shape = dy->shape;
    int64_t sp[FG_MAX_DIMS], sq[FG_MAX_DIMS];
    fg_status st = FG_OK;
    for (int side = 0; side < 2 && st == FG_OK; side++) {
        fg_tensor *g = side ? gb : ga, *self = side ? b : a, *other = side ? a : b;
        if (!g) continue;
        if (fresh[side] && kind == FG_BINARY_ADD && fg_same_shape(g, dy)) { /* a residual's da = dout */
            st = fg_copy_into(g, dy);
            continue;
        }
        if (fresh[side] && (st = fg_fill(g, 0)) != FG_OK) break;
        fg_binary_rule rule;
        const fg_tensor *p = other, *q = self;
        switch (kind) {
        case FG_BINARY_ADD:
            rule = FG_BINARY_RULE_PLUS;
            break;
        case FG_BINARY_SUB:
            rule = side ? FG_BINARY_RULE_MINUS : FG_BINARY_RULE_PLUS;
            break;
        case FG_BINARY_MUL:
            rule = FG_BINARY_RULE_TIMES;
            break;
        default:
            if (side) { /* db -= dout * a / b²: p = b, q = a */
                rule = FG_BINARY_RULE_QUOT;
                p = self;
                q = other;
            } else {
                rule = FG_BINARY_RULE_OVER; /* da += dout / b: p = b */
            }
            break;
        }
        fg_broadcast_strides(p->ndim, p->shape, p->strides, nd, shape, sp);
        fg_broadcast_strides(q->ndim, q->shape, q->strides, nd, shape, sq);
        st = k->elementwise.backward(rule, dy->dtype, fg_data(g), g->ndim, g->shape, fg_data(dy), fg_data(p), sp,
                                     fg_data(q), sq, nd, shape);
    }
    fg_release(dy);
    return st;
}
static fg_status add_backward(fg_node *n) { return binary_backward(n, FG_BINARY_ADD); }
static fg_status sub_backward(fg_node *n) { return binary_backward(n, FG_BINARY_SUB); }
static fg_status mul_backward(fg_node *n) { return binary_backward(n, FG_BINARY_MUL); }
static fg_status div_backward(fg_node *n) { return binary_backward(n, FG_BINARY_DIV); }

static fg_tensor *binary(fg_binary_op kind, fg_tensor *a, fg_tensor *b) {
    const char *op = op_names[kind];
    if (fg_op_check(op, "a", a) != FG_OK || fg_op_check_like(op, "b", b, "a", a) != FG_OK) return NULL;
    int nd;
    int64_t shape[FG_MAX_DIMS];
    if (fg_broadcast_shape(op, a, b, &nd, shape) != FG_OK) return NULL;
    const fg_kernels *k = fg_kernels_for(a->device, op);
    if (!k) return NULL;
    if (!k->elementwise.forward || !k->elementwise.backward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    fg_tensor *out = fg_empty(a->dtype, a->device, nd, shape);
    if (!out) return NULL;
    int64_t sa[FG_MAX_DIMS], sb[FG_MAX_DIMS];
    fg_broadcast_strides(a->ndim, a->shape, a->strides, nd, shape, sa);
    fg_broadcast_strides(b->ndim, b->shape, b->strides, nd, shape, sb);
    if (k->elementwise.forward(kind, a->dtype, fg_data(out), fg_data(a), sa, fg_data(b), sb, nd, shape) != FG_OK) {
        fg_release(out);
        return NULL;
    }
    static const fg_backward_fn rules[] = {add_backward, sub_backward, mul_backward, div_backward};
    fg_record(out, op, rules[kind], 2, (fg_tensor *[]){a, b}); /* a and b are the node's inputs */
    return out;
}

fg_tensor *fg_add(fg_tensor *a, fg_tensor *b) { return binary(FG_BINARY_ADD, a, b); }
fg_tensor *fg_sub(fg_tensor *a, fg_tensor *b) { return binary(FG_BINARY_SUB, a, b); }
fg_tensor *fg_mul(fg_tensor *a, fg_tensor *b) { return binary(FG_BINARY_MUL, a, b); }
fg_tensor *fg_div(fg_tensor *a, fg_tensor *b) { return binary(FG_BINARY_DIV, a, b); }

/* ============================================================================================
 * scalar ops: out = a + s, out = a * s
 * ============================================================================================ */

/* What the backward needs: the factor of dout, 1 for add_scalar and s for mul_scalar. */
typedef struct {
    double alpha;
} scalar_state;

/* forward: out = a + s  ->  da += dout;   forward: out = a * s  ->  da += s * dout */
static fg_status scalar_backward(fg_node *n) {
    const scalar_state *s = FG_NODE_STATE(n, scalar_state);
    fg_tensor *ga;
    FG_TRY(fg_grad_get(n->inputs[0], &ga));
    if (!ga) return FG_OK;
    fg_tensor *dy = fg_op_grad_out(n);
    fg_status st = dy ? fg_op_add_into(ga, dy, s->alpha) : fg_last_status();
    fg_release(dy);
    return st;
}

static fg_tensor *scalar(const char *op, fg_binary_op kind, fg_tensor *a, double s) {
    if (fg_op_check(op, "a", a) != FG_OK) return NULL;
    const fg_kernels *k = fg_kernels_for(a->device, op);
    if (!k) return NULL;
    if (!k->elementwise.scalar) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }
    fg_tensor *out = fg_empty(a->dtype, a->device, a->ndim, a->shape);
    if (!out) return NULL;
    if (k->elementwise.scalar(kind, a->dtype, fg_data(out), fg_data(a), a->strides, a->ndim, a->shape, s) != FG_OK) {
        fg_release(out);
        return NULL;
    }
    fg_node *node = fg_record(out, op, scalar_backward, 1, (fg_tensor *[]){a});
    if (node) FG_NODE_STATE(node, scalar_state)->alpha = kind == FG_BINARY_MUL ? s : 1.0;
    return out;
}

fg_tensor *fg_add_scalar(fg_tensor *a, double s) { return scalar("add_scalar", FG_BINARY_ADD, a, s); }
fg_tensor *fg_mul_scalar(fg_tensor *a, double s) { return scalar("mul_scalar", FG_BINARY_MUL, a, s); }
