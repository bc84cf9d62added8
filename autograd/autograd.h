/* autograd.h — reverse-mode automatic differentiation on a dynamic tape.
 *
 * How it works, in one paragraph. An op that sees an input with requires_grad (and grad mode on)
 * records a node: its name, its inputs (retained, fixed order), any tensors it saves for the
 * backward, and its backward rule. The output tensor owns the node (tensor->grad_fn). The node holds
 * the gradient of its output while backward runs (node->grad_out), so nothing points back from a
 * node to its output and the graph has no cycles. fg_backward(loss) orders the nodes reachable from
 * the loss topologically (iterative DFS, inputs in their fixed order, so sums are repeatable), seeds
 * the loss gradient, and walks them in reverse: each rule reads node->grad_out and ADDS into the
 * gradients of its inputs (fg_grad_buffer). A tensor used twice therefore just accumulates. A leaf
 * (a tensor with requires_grad and no grad_fn) keeps its gradient in leaf->grad across backward
 * calls, which is what gradient accumulation wants; only fg_zero_grad() zeroes it. After backward
 * each node drops its inputs, saved tensors and grad_out, so the graph is freed as soon as the
 * user releases the loss; a second backward through it is an FG_ERR_STATE error.
 *
 * Saving the output: a rule that needs its own output (softmax, gelu's tanh) saves fg_alias(out),
 * a second tensor object over the same storage, never `out` itself (that would be a cycle).
 */
#ifndef FG_AUTOGRAD_H
#define FG_AUTOGRAD_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_MAX_INPUTS 4
#define FG_MAX_SAVED 6

typedef struct fg_node fg_node;

/* A backward rule: read node->grad_out (shape of the op's output), add into the inputs' gradients
 * through fg_grad_buffer(). Returns FG_OK or an error status (with fg_error's message). */
typedef fg_status (*fg_backward_fn)(fg_node *node);

struct fg_node {
    const char *op;                       /* name, for messages: "matmul", "layernorm", ... */
    fg_backward_fn backward;
    int n_inputs;
    fg_tensor *inputs[FG_MAX_INPUTS];     /* retained; NULL entries allowed (optional inputs) */
    int n_saved;
    fg_tensor *saved[FG_MAX_SAVED];       /* retained; what the rule needs beyond the inputs */
    double fargs[8];                      /* small op parameters: eps, scale, p, ... */
    int64_t iargs[8];                     /* axis, seed, flags, ... */
    void *ctx;                            /* larger op state (e.g. copied indices), freed by ctx_free */
    void (*ctx_free)(void *ctx);
    fg_tensor *grad_out;                  /* d loss / d output, only while backward runs */
    int64_t out_shape[FG_MAX_DIMS];       /* the output's shape and dtype, to build grad_out */
    int out_ndim;
    fg_dtype out_dtype;
    fg_device out_device;
    int refcount;
    int freed;                            /* inputs already dropped by a backward */
    uint64_t visit;                       /* topological-sort mark */
};

/* ---- grad mode ---- */
/* Nesting counter per thread: while > 0 no graph is recorded (evaluation, sampling, gradcheck's
 * numeric side). */
void fg_no_grad_enter(void);
void fg_no_grad_exit(void);
int fg_grad_enabled(void);

/* Mark a leaf tensor as wanting a gradient (fails on a tensor that has a grad_fn). */
fg_status fg_set_requires_grad(fg_tensor *t, int on);

/* ---- recording (for op implementations) ----
 * If grad mode is on and any non-NULL input requires grad, create a node for `out`, make `out`
 * require grad and own the node, and return the node so the caller can save tensors and args.
 * Otherwise return NULL and record nothing (that is not an error). */
fg_node *fg_record(fg_tensor *out, const char *op, fg_backward_fn backward,
                   int n_inputs, fg_tensor *const *inputs);
/* Keep `t` (retained) for the backward; returns its slot. */
int fg_node_save(fg_node *n, fg_tensor *t);

/* The gradient buffer that a rule adds into for input `t`: the leaf's grad (created as zeros on
 * first use), or t's own node's grad_out (created as zeros); NULL if t does not require grad.
 * Borrowed: do not release. Always contiguous with t's shape. */
fg_tensor *fg_grad_buffer(fg_tensor *t);
/* Convenience: fg_grad_buffer(t) += g (same shape; g any strides). No-op if t needs no grad. */
fg_status fg_accumulate_grad(fg_tensor *t, const fg_tensor *g);

/* ---- running it ---- */
/* Backpropagate from `root`. grad_root NULL means root must hold one element and its gradient is 1.
 * Otherwise grad_root has root's shape. Frees the graph's internals as it goes (see top). */
fg_status fg_backward(fg_tensor *root, const fg_tensor *grad_root);
/* Zero a leaf's gradient in place (keeps the buffer for reuse). */
void fg_zero_grad(fg_tensor *t);

/* ---- node lifetime (for tensor/ and tests) ---- */
void fg_node_retain(fg_node *n);
void fg_node_release(fg_node *n);
/* Nodes alive right now (a leak check for tests). */
int64_t fg_nodes_alive(void);

/* Called once by anything that creates tensors with autograd (done by fg_record too). */
void fg_autograd_init(void);

#ifdef __cplusplus
}
#endif
#endif /* FG_AUTOGRAD_H */
