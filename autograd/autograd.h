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
#define FG_MAX_SAVED 8
/* Bytes of typed op state a node carries (FG_NODE_STATE). */
#define FG_NODE_STATE_BYTES 192

typedef struct fg_node fg_node;

/* A backward rule: read node->grad_out (shape of the op's output), add into the inputs' gradients
 * through fg_grad_buffer(). Returns FG_OK or an error status (with fg_error's message). */
typedef fg_status (*fg_backward_fn)(fg_node *node);

struct fg_node {
    const char *op; /* name, for messages: "matmul", "layernorm", ... */
    fg_backward_fn backward;
    int n_inputs;
    fg_tensor *inputs[FG_MAX_INPUTS]; /* retained; NULL entries allowed (optional inputs) */
    int n_saved;
    fg_tensor *saved[FG_MAX_SAVED]; /* retained; the tensors of the op's state (fg_node_keep) */
    union {                         /* the op's typed state: FG_NODE_STATE(node, T) */
        unsigned char bytes[FG_NODE_STATE_BYTES];
        double align_d;
        int64_t align_i;
        void *align_p;
    } state;
    void *ctx;        /* larger op state (e.g. copied indices), freed by ctx_free */
    void (*ctx_free)(void *ctx);
    fg_tensor *grad_out;            /* d loss / d output, only while backward runs */
    int64_t out_shape[FG_MAX_DIMS]; /* the output's shape and dtype, to build grad_out */
    int out_ndim;
    fg_dtype out_dtype;
    fg_device out_device;
    int refcount;
    int freed;      /* inputs already dropped by a backward */
    uint64_t visit; /* topological-sort mark */
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
fg_node *fg_record(fg_tensor *out, const char *op, fg_backward_fn backward, int n_inputs, fg_tensor *const *inputs);
/* Keep `t` (retained) for the backward; returns its slot. */
int fg_node_save(fg_node *n, fg_tensor *t);

/* ---- an op's saved state: one typed struct, defined once beside the op ----
 * The forward fills it, the backward reads it:
 *
 *     typedef struct { fg_tensor *x, *mean, *rstd; double eps; } layernorm_state;
 *     layernorm_state *s = FG_NODE_STATE(node, layernorm_state);   // zeroed storage in the node
 *     s->x = fg_node_keep(node, X);                                // retained until the node is done
 *     ...
 *     const layernorm_state *s = FG_NODE_STATE(node, layernorm_state);   // in the backward
 *
 * The struct lives inside the node (at most FG_NODE_STATE_BYTES; a larger one is an internal error
 * caught at the first use), so recording allocates nothing more. Tensors in it must be kept with
 * fg_node_keep: autograd releases them when the backward has run or the graph is dropped, and the
 * pointers in the struct must not be used after that. */
#define FG_NODE_STATE(node, T) ((T *)fg_node_state((node), sizeof(T)))
void *fg_node_state(fg_node *n, size_t size);
/* Retains t (NULL is fine) for the node's lifetime and returns it. */
fg_tensor *fg_node_keep(fg_node *n, fg_tensor *t);

/* The gradient buffer that a rule adds into for input `t`: the leaf's grad (created as zeros on
 * first use), or t's own node's grad_out (created as zeros). Borrowed: do not release. Always
 * contiguous with t's shape.
 * fg_grad_get tells the two reasons for "no buffer" apart: FG_OK with *g = NULL when t wants no
 * gradient (no requires_grad, or its part of the graph is gone), an error status (out of memory)
 * with *g = NULL when the buffer could not be made. Rules use it as
 *     fg_tensor *dx; FG_TRY(fg_grad_get(n->inputs[0], &dx)); if (dx) ...
 * fg_grad_buffer is the short form that returns NULL in both cases (check fg_last_status). */
fg_status fg_grad_get(fg_tensor *t, fg_tensor **g);
fg_tensor *fg_grad_buffer(fg_tensor *t);
/* fg_grad_get for a rule that can set its whole gradient instead of adding it (a GEMM with β = 0
 * instead of 1, a copy instead of an add): a buffer that this call makes is left unset, not
 * zeroed, and *fresh = 1; the rule must then write every element of it before anything reads it.
 * *fresh = 0 for a buffer that exists already (a sum so far, or a leaf's gradient): add into it
 * as with fg_grad_get. (A rule that fails leaves it unset, as a failed fg_backward leaves every
 * gradient partial.) */
fg_status fg_grad_get_fresh(fg_tensor *t, fg_tensor **g, int *fresh);

/* For a rule whose input's gradient is its own output gradient unchanged (a residual add's
 * da = dout): when t is an op output with no gradient buffer yet, t's gradient becomes n's output
 * gradient itself (shared, not copied; n drops its reference when its rule returns) and *taken = 1.
 * Otherwise (a leaf, a buffer that exists already, another shape or dtype, no gradient wanted)
 * *taken = 0 and the rule adds as usual. After a take the rule must not write n's output gradient,
 * and it takes for one input at most: every later contribution to t's gradient adds into it. */
fg_status fg_grad_take_output_grad(fg_node *n, fg_tensor *t, int *taken);

/* External gradient storage for a leaf: from now on the leaf's gradient is `storage` (retained; a
 * contiguous tensor of the leaf's shape, dtype and device, typically a view into one flat buffer
 * holding every parameter's gradient, so that the optimizer and clipping are flat loops). The
 * leaf's previous gradient, if any, is released; storage is used as it is (not zeroed). */
fg_status fg_set_grad_storage(fg_tensor *leaf, fg_tensor *storage);
/* Convenience: fg_grad_buffer(t) += g (same shape; g any strides). No-op if t needs no grad. */
fg_status fg_accumulate_grad(fg_tensor *t, const fg_tensor *g);

/* ---- running it ---- */
/* Backpropagate from `root`. grad_root NULL means root must hold one element and its gradient is 1.
 * Otherwise grad_root has root's shape. Frees the graph's internals as it goes (see top). */
fg_status fg_backward(fg_tensor *root, const fg_tensor *grad_root);
/* Zero a leaf's gradient in place (keeps the buffer for reuse). */
void fg_zero_grad(fg_tensor *t);

/* ---- the op profile: where a step's wall time goes, op by op (for benchmarks) ----
 * While on (the calling thread's ops only), fg_record charges the wall time since the previous
 * record or mark to the recorded op's forward (an op's work before it records itself: its kernels,
 * and any untracked glue since the last op), fg_backward each node's rule to its op's backward and
 * the rest of the walk to "backward: graph walk", and fg_op_profile_phase charges the time since
 * the last record or mark to a named phase that is not an op (data, optimizer). op and phase names
 * must be string literals (they are kept, compared by content). Off, each costs one branch. */
#define FG_OP_PROFILE_MAX 96 /* rows the table holds; the last one is "(more ops than rows)" */
typedef struct {
    const char *name;
    double fwd_s, bwd_s;     /* wall seconds (a phase's time is in fwd_s) */
    int64_t fwd_n, bwd_n;    /* how many times */
} fg_op_profile_row;
void fg_op_profile_start(void); /* clears the table, then on */
void fg_op_profile_stop(void);
/* From now, the time since the last record is nobody's (call where a phase begins). */
void fg_op_profile_mark(void);
void fg_op_profile_phase(const char *name);
/* Copies up to `max` rows in first-seen order into rows; returns how many there are in all. */
int fg_op_profile_read(fg_op_profile_row *rows, int max);

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
