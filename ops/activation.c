/* activation.c — the pointwise activations of Llama- and nanochat-style models: relu² (nanochat's
 * MLP), SwiGLU (Llama's MLP) and the logit softcap (nanochat's head).
 *
 * Legend: x, a, b are any shape (made contiguous; a and b of one shape); out has the inputs'
 * shape (contiguous). saved for backward: the inputs, contiguous (the backward recomputes σ and
 * tanh from them).
 *
 *   relu2:   out = relu(x)²                            d/dx = 2 relu(x)
 *   swiglu:  out = silu(a) b,  silu(a) = a σ(a)         d/da = b σ(a) (1 + a (1 − σ(a))),  d/db = silu(a)
 *   softcap: out = c tanh(x / c)                        d/dx = 1 − tanh²(x / c)
 *
 * SwiGLU takes the gate a = x W_gate and the value b = x W_up as two tensors (two linears, as in
 * Hugging Face's LlamaMLP); swiglu_packed takes them as the two halves of one tensor's rows, x
 * (..., 2I) = [a, b] (one gate|up linear), and writes its gradient in place, with the same numbers
 * as swiglu on the two slices and neither made contiguous.
 *
 * The kernels are in ops/cpu/activation.c; CPU only (the CUDA table holds NULL, and the ops refuse).
 */
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the ops, for every device ---- */

/* What the backwards need: the inputs made contiguous (b NULL for the one-input ops), and c. */
typedef struct {
    fg_tensor *a, *b;
    double c;
} activation_state;

/* What every backward below starts with, once an input wants a gradient: the kernel table of the
 * saved input's device and dout, contiguous (*dout a new reference). */
static fg_status activation_backward_begin(fg_node *n, const activation_state *s, const fg_kernels **k,
                                           fg_tensor **dout) {
    *k = fg_kernels_for(s->a->device, n->op);
    if (!*k) return fg_last_status();
    *dout = fg_op_grad_out(n);
    return *dout ? FG_OK : fg_last_status();
}

/* inputs {x}. forward: out = relu(x)²  ->  dx += dout * 2 relu(x) */
static fg_status relu2_backward(fg_node *n) {
    const activation_state *s = FG_NODE_STATE(n, activation_state);
    fg_tensor *dx, *dout;
    const fg_kernels *k;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    if (!dx) return FG_OK;
    FG_TRY(activation_backward_begin(n, s, &k, &dout));
    fg_status st = k->activation.relu2_backward(s->a->dtype, fg_data(dx), fg_data(dout), fg_data(s->a), fg_numel(s->a));
    fg_release(dout);
    return st;
}

/* inputs {a, b}. forward: out = silu(a) b  ->  da += dout b silu'(a);  db += dout silu(a) */
static fg_status swiglu_backward(fg_node *n) {
    const activation_state *s = FG_NODE_STATE(n, activation_state);
    fg_tensor *da, *db, *dout;
    const fg_kernels *k;
    FG_TRY(fg_grad_get(n->inputs[0], &da));
    FG_TRY(fg_grad_get(n->inputs[1], &db));
    if (!da && !db) return FG_OK;
    FG_TRY(activation_backward_begin(n, s, &k, &dout));
    fg_status st = k->activation.swiglu_backward(s->a->dtype, da ? fg_data(da) : NULL, db ? fg_data(db) : NULL,
                                                 fg_data(dout), fg_data(s->a), fg_data(s->b), fg_numel(s->a));
    fg_release(dout);
    return st;
}

/* inputs {x}, x (..., 2I) = gate|up. forward: out = silu(a) b  ->  dx = [dout b silu'(a), dout silu(a)] */
static fg_status swiglu_packed_backward(fg_node *n) {
    const activation_state *s = FG_NODE_STATE(n, activation_state);
    fg_tensor *dx, *dout;
    const fg_kernels *k;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    if (!dx) return FG_OK;
    FG_TRY(activation_backward_begin(n, s, &k, &dout));
    const int64_t I = s->a->shape[s->a->ndim - 1] / 2, R = I > 0 ? fg_numel(s->a) / (2 * I) : 0;
    fg_status st = k->activation.swiglu_rows_backward(s->a->dtype, fg_data(dx), fg_data(dout), fg_data(s->a), R, I);
    fg_release(dout);
    return st;
}

/* inputs {x}. forward: out = c tanh(x / c)  ->  dx += dout (1 − tanh²(x / c)) */
static fg_status softcap_backward(fg_node *n) {
    const activation_state *s = FG_NODE_STATE(n, activation_state);
    fg_tensor *dx, *dout;
    const fg_kernels *k;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    if (!dx) return FG_OK;
    FG_TRY(activation_backward_begin(n, s, &k, &dout));
    fg_status st =
        k->activation.softcap_backward(s->a->dtype, fg_data(dx), fg_data(dout), fg_data(s->a), fg_numel(s->a), s->c);
    fg_release(dout);
    return st;
}

/* The kernel table of x's device with the activation family's members, or NULL with the error set. */
static const fg_kernels *activation_kernels(const char *op, const fg_tensor *x) {
    const fg_kernels *k = fg_kernels_for(x->device, op);
    if (!k) return NULL;
    const fg_activation_kernels *a = &k->activation;
    if (!a->relu2_forward || !a->relu2_backward || !a->swiglu_forward || !a->swiglu_backward ||
        !a->swiglu_rows_forward || !a->swiglu_rows_backward || !a->softcap_forward || !a->softcap_backward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }
    return k;
}

/* Records the node of one of the ops on out (when one is wanted) and fills its state; returns out. */
static fg_tensor *activation_record(fg_tensor *out, const char *op, fg_backward_fn bwd, int n_in,
                                    fg_tensor *const *inputs, fg_tensor *A, fg_tensor *B, double c) {
    fg_node *node = fg_record(out, op, bwd, n_in, inputs);
    if (!node) return out;
    activation_state *s = FG_NODE_STATE(node, activation_state);
    s->a = fg_node_keep(node, A);
    s->b = fg_node_keep(node, B);
    s->c = c;
    return out;
}

fg_tensor *fg_relu2(fg_tensor *x) {
    static const char op[] = "relu2";
    if (fg_op_check(op, "x", x) != FG_OK) return NULL;
    const fg_kernels *k = activation_kernels(op, x);
    if (!k) return NULL;
    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *out = X ? fg_empty(x->dtype, x->device, x->ndim, x->shape) : NULL;
    if (out && k->activation.relu2_forward(x->dtype, fg_data(out), fg_data(X), fg_numel(X)) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    if (out) out = activation_record(out, op, relu2_backward, 1, (fg_tensor *[]){x}, X, NULL, 0);
    fg_release(X);
    return out;
}

fg_tensor *fg_swiglu(fg_tensor *a, fg_tensor *b) {
    static const char op[] = "swiglu";
    char b1[FG_SHAPE_BUF], b2[FG_SHAPE_BUF];
    if (fg_op_check(op, "a", a) != FG_OK || fg_op_check_like(op, "b", b, "a", a) != FG_OK) return NULL;
    int same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->shape[d] == b->shape[d];
    if (!same) {
        fg_error(FG_ERR_SHAPE, "%s: a %s and b %s must have one shape (the gate and the value)", op, FG_SHP(a, b1),
                 FG_SHP(b, b2));
        return NULL;
    }
    const fg_kernels *k = activation_kernels(op, a);
    if (!k) return NULL;
    fg_tensor *A = fg_op_contiguous(a);
    fg_tensor *B = A ? fg_op_contiguous(b) : NULL;
    fg_tensor *out = B ? fg_empty(a->dtype, a->device, a->ndim, a->shape) : NULL;
    if (out && k->activation.swiglu_forward(a->dtype, fg_data(out), fg_data(A), fg_data(B), fg_numel(A)) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    if (out) out = activation_record(out, op, swiglu_backward, 2, (fg_tensor *[]){a, b}, A, B, 0);
    fg_release(A);
    fg_release(B);
    return out;
}

fg_tensor *fg_swiglu_packed(fg_tensor *x) {
    static const char op[] = "swiglu_packed";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK) return NULL;
    const int64_t I2 = x->ndim > 0 ? x->shape[x->ndim - 1] : 0;
    if (x->ndim < 1 || I2 < 2 || I2 % 2) {
        fg_error(FG_ERR_SHAPE, "%s: x %s needs a last dimension of 2I >= 2 (the gate, then the value)", op,
                 FG_SHP(x, b));
        return NULL;
    }
    const fg_kernels *k = activation_kernels(op, x);
    if (!k) return NULL;
    int64_t shape[FG_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) shape[d] = x->shape[d];
    shape[x->ndim - 1] = I2 / 2;
    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *out = X ? fg_empty(x->dtype, x->device, x->ndim, shape) : NULL;
    if (out && k->activation.swiglu_rows_forward(x->dtype, fg_data(out), fg_data(X), fg_numel(X) / I2, I2 / 2) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    if (out) out = activation_record(out, op, swiglu_packed_backward, 1, (fg_tensor *[]){x}, X, NULL, 0);
    fg_release(X);
    return out;
}

fg_tensor *fg_softcap(fg_tensor *x, double c) {
    static const char op[] = "softcap";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK) return NULL;
    if (!(c > 0) || isinf(c)) {
        fg_error(FG_ERR_ARG, "%s: cap c = %g must be finite and > 0 (x %s)", op, c, FG_SHP(x, b));
        return NULL;
    }
    const fg_kernels *k = activation_kernels(op, x);
    if (!k) return NULL;
    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *out = X ? fg_empty(x->dtype, x->device, x->ndim, x->shape) : NULL;
    if (out && k->activation.softcap_forward(x->dtype, fg_data(out), fg_data(X), fg_numel(X), c) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    if (out) out = activation_record(out, op, softcap_backward, 1, (fg_tensor *[]){x}, X, NULL, c);
    fg_release(X);
    return out;
}
