/* rope.c — rotary position embedding (RoPE) in Hugging Face Llama's layout.
 *
 * Legend: B = batch, H = heads, T = time, D = head dim (even), D2 = D / 2. x is (B, H, T, D)
 * (made contiguous); out is (B, H, T, D). saved for backward: nothing but the sizes, pos0 and
 * theta (the rotation is rebuilt from them: recompute).
 *
 * The token at time t sits at position p = pos0 + t. Pair i < D2 is (x_i, x_{i+D2}) — the
 * "rotate_half" layout of transformers' apply_rotary_pos_emb, not the interleaved (x_2i, x_2i+1)
 * of the RoFormer paper — and turns by the angle p * inv_freq_i:
 *   inv_freq_i = theta^(-2i / D)
 *   out_i = x_i cos - x_{i+D2} sin        out_{i+D2} = x_{i+D2} cos + x_i sin
 * i.e. out = x * cos + rotate_half(x) * sin, rotate_half(x) = (-x_{D2..D}, x_{0..D2}), with cos
 * and sin of the angle computed in float64 and then rounded to x's dtype. The rotation is
 * orthogonal, so the backward is its transpose: the same formula with sin negated.
 *
 * The kernels are in ops/cpu/rope.c; CPU only (the CUDA table holds NULL, and the op refuses).
 */
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the op, for every device ---- */

/* What the backward needs: the rotation's parameters (x itself is not needed). */
typedef struct {
    int64_t B, H, T, D, pos0;
    double theta;
    fg_dtype dt;
    fg_device dev;
} rope_state;

/* inputs {x}. forward: out = R(p) x  ->  dx += R(p)ᵀ dout */
static fg_status rope_backward(fg_node *n) {
    const rope_state *s = FG_NODE_STATE(n, rope_state);
    fg_tensor *dx;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    if (!dx) return FG_OK;
    const fg_kernels *k = fg_kernels_for(s->dev, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = k->rope.backward(s->dt, fg_data(dx), fg_data(dout), s->B, s->H, s->T, s->D, s->pos0, s->theta);
    fg_release(dout);
    return st;
}

fg_tensor *fg_rope(fg_tensor *x, double theta, int64_t pos0) {
    static const char op[] = "rope";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK) return NULL;
    if (x->ndim != 4) {
        fg_error(FG_ERR_SHAPE, "%s: x %s must be (B, H, T, D)", op, FG_SHP(x, b));
        return NULL;
    }
    const int64_t D = x->shape[3];
    if (D % 2 != 0) {
        fg_error(FG_ERR_SHAPE, "%s: x %s has an odd head dim D = %lld; the pairs (x_i, x_{i+D/2}) need it even", op,
                 FG_SHP(x, b), (long long)D);
        return NULL;
    }
    if (!(theta > 0) || isinf(theta)) {
        fg_error(FG_ERR_ARG, "%s: theta = %g must be finite and > 0 (x %s)", op, theta, FG_SHP(x, b));
        return NULL;
    }
    if (pos0 < 0) {
        fg_error(FG_ERR_ARG, "%s: pos0 = %lld must be >= 0 (x %s)", op, (long long)pos0, FG_SHP(x, b));
        return NULL;
    }
    const fg_kernels *k = fg_kernels_for(x->device, op);
    if (!k) return NULL;
    if (!k->rope.forward || !k->rope.backward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    const int64_t B = x->shape[0], H = x->shape[1], T = x->shape[2];
    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *out = X ? fg_empty(x->dtype, x->device, 4, x->shape) : NULL;
    if (out && k->rope.forward(x->dtype, fg_data(out), fg_data(X), B, H, T, D, pos0, theta) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    fg_node *node = out ? fg_record(out, op, rope_backward, 1, (fg_tensor *[]){x}) : NULL;
    if (node)
        *FG_NODE_STATE(node, rope_state) = (rope_state){
            .B = B, .H = H, .T = T, .D = D, .pos0 = pos0, .theta = theta, .dt = x->dtype, .dev = x->device};
    fg_release(X);
    return out;
}
