/* recompute.c — fg_recompute (autograd/recompute.h): activation checkpointing as one autograd node.
 *
 * Node layout: inputs[0 .. n) the checkpoint's inputs (retained by autograd); ctx a malloc'd
 * record {fn, ctx bytes}; nothing else is saved, which is the point.
 */
#include "autograd/recompute.h"

#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "tensor/error.h"

typedef struct {
    fg_recompute_fn fn;
    size_t size;
    unsigned char bytes[]; /* the caller's ctx, copied */
} ckpt_ctx;

/* Run fn with grad recording on, whatever the caller's no-grad depth (fg_backward may be called
 * inside a no-grad region; the recomputation must record its graph regardless). */
static fg_tensor *run_with_grad(ckpt_ctx *c, fg_tensor *const *in) {
    int depth = 0;
    while (!fg_grad_enabled()) {
        fg_no_grad_exit();
        depth++;
    }
    fg_tensor *y = c->fn(c->bytes, in);
    while (depth-- > 0) fg_no_grad_enter();
    return y;
}

/* Backward of: y = fn(ctx, x_0 .. x_{n-1}) run under no-grad.
 * dx_i += d/dx_i <dy, fn(ctx, x)>, by recomputing fn on detached aliases and backpropagating dy. */
static fg_status recompute_backward(fg_node *node) {
    ckpt_ctx *c = node->ctx;
    const int n = node->n_inputs;
    fg_tensor *a[FG_MAX_INPUTS] = {0};
    fg_tensor *y = NULL;
    fg_status st = FG_OK;
    for (int i = 0; i < n; i++) {
        if (!node->inputs[i]) continue;
        a[i] = fg_alias(node->inputs[i]); /* same elements, no graph: the subgraph starts here */
        if (!a[i]) {
            st = fg_last_status();
            goto done;
        }
        if (node->inputs[i]->requires_grad && (st = fg_set_requires_grad(a[i], 1)) != FG_OK) goto done;
    }
    y = run_with_grad(c, a);
    if (!y) {
        st = fg_last_status();
        goto done;
    }
    if (y->ndim != node->out_ndim || memcmp(y->shape, node->out_shape, (size_t)y->ndim * sizeof y->shape[0])) {
        st = fg_error(FG_ERR_STATE, "checkpoint: the recomputation returned a different shape than the forward");
        goto done;
    }
    if (y->requires_grad) {
        st = fg_backward(y, node->grad_out);
        if (st != FG_OK) goto done;
    }
    for (int i = 0; i < n && st == FG_OK; i++)
        if (a[i] && a[i]->grad) st = fg_accumulate_grad(node->inputs[i], a[i]->grad);
done:
    fg_release(y);
    for (int i = 0; i < n; i++) fg_release(a[i]);
    return st;
}

fg_tensor *fg_recompute(fg_recompute_fn fn, const void *ctx, size_t ctx_size, int n_inputs, fg_tensor *const *inputs) {
    if (!fn) {
        fg_error(FG_ERR_ARG, "checkpoint: NULL function");
        return NULL;
    }
    if (n_inputs < 1 || n_inputs > FG_MAX_INPUTS) {
        fg_error(FG_ERR_ARG, "checkpoint: %d inputs (1..%d)", n_inputs, FG_MAX_INPUTS);
        return NULL;
    }
    int any = 0;
    for (int i = 0; i < n_inputs; i++) any |= inputs[i] && inputs[i]->requires_grad;
    ckpt_ctx *c = malloc(sizeof *c + ctx_size);
    if (!c) {
        fg_error(FG_ERR_OOM, "checkpoint: out of memory");
        return NULL;
    }
    c->fn = fn;
    c->size = ctx_size;
    if (ctx_size) memcpy(c->bytes, ctx, ctx_size);
    if (!any || !fg_grad_enabled()) {
        /* Nothing to recompute for: an ordinary call (it records what grad mode says). */
        fg_tensor *y = fn(c->bytes, inputs);
        free(c);
        return y;
    }
    fg_no_grad_enter();
    fg_tensor *y = fn(c->bytes, inputs); /* intermediates die here */
    fg_no_grad_exit();
    if (!y) {
        free(c);
        return NULL;
    }
    if (y->grad_fn) { /* cannot happen under no-grad, but a view of an input would carry none either */
        free(c);
        fg_release(y);
        fg_error(FG_ERR_STATE, "checkpoint: the function's output already has a graph");
        return NULL;
    }
    if (y->requires_grad) {
        /* fn returned a leaf (e.g. an input itself): make an alias we can attach a node to */
        fg_tensor *t = fg_alias(y);
        fg_release(y);
        y = t;
        if (!y) {
            free(c);
            return NULL;
        }
    }
    fg_node *node = fg_record(y, "recompute", recompute_backward, n_inputs, inputs);
    if (!node) { /* cannot happen: grad is on and an input requires grad */
        free(c);
        return y;
    }
    node->ctx = c;
    node->ctx_free = free;
    return y;
}
