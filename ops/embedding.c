/* embedding.c — token (or position) embedding lookup.
 *
 * Legend: weight is (V, C): V rows (vocabulary), C channels. idx holds n int32 ids laid out as
 * `shape` (e.g. (B, T)); out is (shape..., C) with out[r, :] = weight[idx[r], :].
 * saved for backward: a copy of idx (host memory), since the caller may reuse its buffer.
 *
 * Backward scatter-adds dout's rows into dweight in position order r = 0, 1, ..., so a token that
 * appears several times gets its gradients summed in a fixed, repeatable order.
 */
#include <string.h>

#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the op, for every device ---- */

/* What the backward needs: the ids, copied (host memory from fg_op_ctx_alloc; node->ctx holds the
 * same pointer only so that the node frees it). */
typedef struct {
    const int32_t *idx;
    int64_t n;
} embedding_state;

static fg_status embedding_backward(fg_node *n) {
    const embedding_state *s = FG_NODE_STATE(n, embedding_state);
    fg_tensor *dw;
    FG_TRY(fg_grad_get(n->inputs[0], &dw));
    if (!dw) return FG_OK;
    const fg_kernels *k = fg_kernels_for(dw->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st =
        k->embedding.backward(dw->dtype, fg_data(dw), fg_data(dout), s->idx, s->n, dw->shape[0], dw->shape[1]);
    fg_release(dout);
    return st;
}

fg_tensor *fg_embedding(fg_tensor *weight, const int32_t *idx, int ndim, const int64_t *shape) {
    static const char op[] = "embedding";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "weight", weight) != FG_OK) return NULL;
    if (weight->ndim != 2) {
        fg_error(FG_ERR_SHAPE, "%s: weight %s must be (V, C)", op, FG_SHP(weight, b));
        return NULL;
    }
    if (ndim < 0 || ndim > FG_MAX_DIMS - 1 || (ndim > 0 && !shape)) {
        fg_error(FG_ERR_ARG, "%s: index rank %d is invalid (0..%d with a shape) for weight %s", op, ndim,
                 FG_MAX_DIMS - 1, FG_SHP(weight, b));
        return NULL;
    }
    int64_t n = 1, V = weight->shape[0], C = weight->shape[1];
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            fg_error(FG_ERR_ARG, "%s: index shape has negative size %lld in dim %d", op, (long long)shape[d], d);
            return NULL;
        }
        n *= shape[d];
    }
    if (n > 0 && !idx) {
        fg_error(FG_ERR_ARG, "%s: idx is NULL for %lld ids (weight %s)", op, (long long)n, FG_SHP(weight, b));
        return NULL;
    }
    for (int64_t r = 0; r < n; r++)
        if (idx[r] < 0 || idx[r] >= V) {
            fg_error(FG_ERR_ARG, "%s: id %d at position %lld is outside [0, %lld) for weight %s", op, (int)idx[r],
                     (long long)r, (long long)V, FG_SHP(weight, b));
            return NULL;
        }
    const fg_kernels *k = fg_kernels_for(weight->device, op);
    if (!k) return NULL;
    if (!k->embedding.forward || !k->embedding.backward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    int64_t oshape[FG_MAX_DIMS];
    for (int d = 0; d < ndim; d++) oshape[d] = shape[d];
    oshape[ndim] = C;
    /* rows of weight need unit stride along C; any row stride is fine */
    fg_tensor *W = (C <= 1 || weight->strides[1] == 1) ? fg_retain(weight) : fg_op_contiguous(weight);
    fg_tensor *out = W ? fg_empty(weight->dtype, weight->device, ndim + 1, oshape) : NULL;
    if (out && k->embedding.forward(weight->dtype, fg_data(out), fg_data(W), W->strides[0], idx, n, V, C) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    fg_node *node = out ? fg_record(out, op, embedding_backward, 1, (fg_tensor *[]){weight}) : NULL;
    if (node) {
        int32_t *ids = fg_op_ctx_alloc(op, (size_t)n * sizeof(int32_t));
        if (!ids) { /* releasing out frees the node */
            fg_release(out);
            out = NULL;
        } else {
            if (n) memcpy(ids, idx, (size_t)n * sizeof(int32_t));
            node->ctx = ids;
            node->ctx_free = fg_op_ctx_free;
            *FG_NODE_STATE(node, embedding_state) = (embedding_state){ids, n};
        }
    }
    fg_release(W);
    return out;
}
