/* rmsnorm.c — RMS normalization over the last dim, with a weight (Llama) or without (nanochat).
 *
 * Legend: x is (..., C), seen as R = prod(...) rows of C; weight is (C) or NULL (then 1); out is
 * (..., C). saved for backward: X (x, contiguous), rstd (R), W (weight, contiguous, or NULL).
 *
 *   rstd = 1 / sqrt(sum_i x_i² / C + eps)        out_i = x_i * rstd * w_i
 *
 * No mean is taken out (that is LayerNorm, ops/layernorm.c), and eps sits inside the square root,
 * as in torch.nn.functional.rms_norm and Hugging Face's LlamaRMSNorm.
 * QK-norm (nanochat, Qwen3, OLMo 2) needs no op of its own: it is this op on q and k, (B, H, T, D),
 * whose last dim is the head's, so each head of each token is normalized on its own.
 *
 * The kernels are in ops/cpu/rmsnorm.c; CPU only (the CUDA table holds NULL, and the op refuses).
 */
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the op, for every device ---- */

/* What the backward needs: x made contiguous, the rows' 1/rms, the weight (or NULL). */
typedef struct {
    fg_tensor *x, *rstd, *w;
} rmsnorm_state;

/* inputs {x, weight} */
static fg_status rmsnorm_backward(fg_node *n) {
    const rmsnorm_state *s = FG_NODE_STATE(n, rmsnorm_state);
    fg_tensor *dx, *dw;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    FG_TRY(fg_grad_get(n->inputs[1], &dw));
    if (!dx && !dw) return FG_OK;
    const fg_kernels *k = fg_kernels_for(s->x->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    const int64_t C = s->x->shape[s->x->ndim - 1], R = s->rstd->shape[0];
    fg_status st = k->rmsnorm.backward(s->x->dtype, dx ? fg_data(dx) : NULL, dw ? fg_data(dw) : NULL, fg_data(dout),
                                       fg_data(s->x), fg_data(s->rstd), s->w ? fg_data(s->w) : NULL, R, C);
    fg_release(dout);
    return st;
}

fg_tensor *fg_rmsnorm(fg_tensor *x, fg_tensor *weight, double eps) {
    static const char op[] = "rmsnorm";
    int64_t R, C;
    if (fg_op_check_norm(op, x, 1, (const fg_tensor *[]){weight}, (const char *[]){"weight"}, eps, 1, &R, &C) != FG_OK)
        return NULL;
    const fg_kernels *k = fg_kernels_for(x->device, op);
    if (!k) return NULL;
    if (!k->rmsnorm.forward || !k->rmsnorm.backward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    const fg_device dev = x->device;
    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *W = (X && weight) ? fg_op_contiguous(weight) : NULL;
    fg_tensor *rstd = fg_empty(x->dtype, dev, 1, &R);
    fg_tensor *out = fg_empty(x->dtype, dev, x->ndim, x->shape);
    fg_tensor *ret = NULL;
    if (X && (W || !weight) && rstd && out &&
        k->rmsnorm.forward(x->dtype, fg_data(out), fg_data(rstd), fg_data(X), W ? fg_data(W) : NULL, R, C, eps) ==
            FG_OK) {
        fg_node *node = fg_record(out, op, rmsnorm_backward, 2, (fg_tensor *[]){x, weight});
        if (node) {
            rmsnorm_state *s = FG_NODE_STATE(node, rmsnorm_state);
            s->x = fg_node_keep(node, X);
            s->rstd = fg_node_keep(node, rstd);
            s->w = fg_node_keep(node, W);
        }
        ret = out;
        out = NULL;
    }
    fg_release(X);
    fg_release(W);
    fg_release(rstd);
    fg_release(out);
    return ret;
}
