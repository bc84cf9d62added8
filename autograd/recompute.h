/* recompute.h — activation checkpointing: run a piece of the forward without keeping its
 * intermediates, and recompute them during the backward.
 *
 *     y = fg_recompute(fn, ctx, ctx_size, n, inputs)
 *
 * Forward: y = fn(ctx, inputs) under no-grad, so none of fn's intermediate tensors are kept; one
 * autograd node "checkpoint" is recorded for y, holding the inputs (and a copy of ctx) only.
 * Backward: the node's rule makes detached aliases a_i of the inputs (same storage, no graph,
 * requires_grad as the input), re-runs y' = fn(ctx, a) WITH grad recording, backpropagates the
 * incoming gradient dy through that subgraph (a nested fg_backward), and adds each a_i's gradient
 * into input i's gradient. Leaf tensors that fn uses directly (model parameters) are leaves of the
 * subgraph too, so their gradients accumulate into their own grad buffers exactly as without
 * checkpointing.
 *
 * Bit-for-bit: the recomputation must produce the same values as the first run, so fn must be a
 * pure function of (ctx, inputs, the leaves it reads): randomness (dropout) must come from seeds
 * stored in ctx, never from a running generator. Given that, and the same thread count, the
 * gradients equal the ones without checkpointing bit for bit: each parameter and each input receives
 * the same additions in the same order (a checkpointed input's contributions are summed inside the
 * subgraph in the order the full graph would have added them, then added to a zero buffer).
 *
 * When grad mode is off, or no input requires grad, fg_recompute just returns fn(ctx, inputs)
 * (with whatever recording grad mode implies), so it is always correct, only not always a saving.
 * Cost: one extra forward of fn per backward.
 */
#ifndef FG_RECOMPUTE_H
#define FG_RECOMPUTE_H

#include <stddef.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The recomputed function: a new reference to its one output, or NULL with fg_error(...). It must
 * not keep references to `inputs` beyond what the ops it calls record. */
typedef fg_tensor *(*fg_recompute_fn)(void *ctx, fg_tensor *const *inputs);

/* y = fn(ctx, inputs) with the intermediates recomputed in the backward (see the top). ctx points
 * to ctx_size bytes that are copied (the backward uses the copy; ctx may be a stack variable).
 * 1 <= n_inputs <= 4 (FG_MAX_INPUTS). New reference; NULL with fg_last_error() on failure. */
fg_tensor *fg_recompute(fg_recompute_fn fn, const void *ctx, size_t ctx_size, int n_inputs, fg_tensor *const *inputs);

/* Recompute one saved input instead of keeping it (the cheap pointwise outputs: a norm's or an
 * activation's output that the next matmul saves for its weight gradient):
 *
 *     h = fn(ctx, inputs)          recorded as usual (its own rule needs inputs, not h)
 *     y = consumer(h)              saves h for its backward (a linear)
 *     y = fg_recompute_drop(y, h, fn, ctx, ctx_size, n, inputs)
 *
 * frees h's storage now and returns an alias of y with one node "recompute_drop" whose rule, which
 * runs before the consumer's (it is downstream of it), first recomputes fn(ctx, inputs) under no-grad
 * into h's storage, then passes the gradient through unchanged. The matmul is not redone; only fn.
 * Bit-for-bit under the same rule as fg_recompute (fn pure), so h holds the same values again.
 * Contract: nothing but the consumer reads h after this call (no other op took h or a view of it),
 * h is contiguous and owns its whole storage; the inputs are retained by the node.
 * When grad mode is off or y needs no gradient, or h does not own its storage, nothing is dropped
 * and y itself is returned (retained). New reference; NULL with fg_last_error() on failure. */
fg_tensor *fg_recompute_drop(fg_tensor *y, fg_tensor *h, fg_recompute_fn fn, const void *ctx, size_t ctx_size,
                             int n_inputs, fg_tensor *const *inputs);

#ifdef __cplusplus
}
#endif
#endif /* FG_RECOMPUTE_H */
