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

/* ---- fg_recompute_drop: one saved input recomputed, the consumer's matmul not redone ----
 * Node layout: inputs[0] = y (the consumer's output); state: h (whose storage is refilled) and the
 * inputs of fn, kept; ctx a malloc'd record {fn, ctx bytes}. */
typedef struct {
    fg_tensor *h;
    fg_tensor *in[FG_MAX_INPUTS];
    int n;
} drop_state;

/* Backward of: y' = y, with h = fn(ctx, inputs) dropped after the forward.
 * First h := fn(ctx, inputs) again (same values), so the consumer's rule finds its saved input;
 * then dy += dy' (the same tensor when y has no gradient buffer yet). */
static fg_status recompute_drop_backward(fg_node *node) {
    const drop_state *s = FG_NODE_STATE(node, drop_state);
    ckpt_ctx *c = node->ctx;
    fg_tensor *h = s->h;
    if (!h->storage->data) {
        fg_no_grad_enter();
        fg_tensor *t = c->fn(c->bytes, s->in);
        fg_no_grad_exit();
        if (!t) return fg_last_status();
        if (t->ndim != h->ndim || memcmp(t->shape, h->shape, (size_t)h->ndim * sizeof h->shape[0]) ||
            t->dtype != h->dtype || t->device != h->device || !fg_is_contiguous(t) || t->offset != 0 ||
            t->storage->refcount != 1 || t->storage->borrowed || t->storage->nbytes != h->storage->nbytes) {
            fg_release(t);
            return fg_error(FG_ERR_STATE, "recompute_drop: the recomputation returned another tensor than the forward");
        }
        /* h takes t's memory; t's storage is left empty and freed with t */
        h->storage->data = t->storage->data;
        t->storage->data = NULL;
        fg_release(t);
    }
    int taken = 0;
    fg_status st = fg_grad_take_output_grad(node, node->inputs[0], &taken);
    if (st == FG_OK && !taken) st = fg_accumulate_grad(node->inputs[0], node->grad_out);
    return st;
}

fg_tensor *fg_recompute_drop(fg_tensor *y, fg_tensor *h, fg_recompute_fn fn, const void *ctx, size_t ctx_size,
                             int n_inputs, fg_tensor *const *inputs) {
    if (!y || !h || !fn) {
        fg_error(FG_ERR_ARG, "recompute_drop: NULL argument");
        return NULL;
    }
    if (n_inputs < 1 || n_inputs > FG_MAX_INPUTS) {
        fg_error(FG_ERR_ARG, "recompute_drop: %d inputs (1..%d)", n_inputs, FG_MAX_INPUTS);
        return NULL;
    }
    /* only a tensor that is all of its storage, not borrowed, can be given back and refilled */
    const int droppable = fg_is_contiguous(h) && h->offset == 0 && !h->storage->borrowed && h->storage->data &&
                          h->storage->nbytes == (size_t)fg_numel(h) * fg_dtype_size(h->dtype);
    if (!fg_grad_enabled() || !y->requires_grad || !droppable) return fg_retain(y);
    ckpt_ctx *c = malloc(sizeof *c + ctx_size);
    fg_tensor *z = c ? fg_alias(y) : NULL;
    if (!z) {
        free(c);
        if (!c) fg_error(FG_ERR_OOM, "recompute_drop: out of memory");
        return NULL;
    }
    c->fn = fn;
    c->size = ctx_size;
    if (ctx_size) memcpy(c->bytes, ctx, ctx_size);
    fg_node *node = fg_record(z, "recompute_drop", recompute_drop_backward, 1, &y);
    if (!node) { /* cannot happen: grad is on and y requires grad */
        free(c);
        fg_release(z);
        return fg_retain(y);
    }
    node->ctx = c;
    node->ctx_free = free;
    drop_state *s = FG_NODE_STATE(node, drop_state);
    s->h = fg_node_keep(node, h);
    s->n = n_inputs;
    for (int i = 0; i < n_inputs; i++) s->in[i] = fg_node_keep(node, inputs[i]);
    /* the saving: h's memory goes back to the allocator until the backward reaches this node */
    fg_free(h->device, h->storage->data);
    h->storage->data = NULL;
    return z;
}
