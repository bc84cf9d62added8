/* rope_qkv.c — the rotary embedding and the QK-norm on a packed projection, in one pass.
 *
 * Legend: B = batch, T = time, H = query heads, K = key/value heads (H_kv), D = head dim.
 * qkv is (B, T, (H + 2K) D), each row [q heads | k heads | v heads]; out has the same shape.
 * saved for backward: cs (T, D/2, 2), the cos/sin table (rotary); with qk_norm, out (through an
 * alias) and rstd (B, T, H + K). x itself is not saved: the norm's backward needs only its output
 * and 1/rms, and the rotation is orthogonal.
 *
 * On every q and k head h of the token at position p = pos0 + t (fg_rope's rotation, ops/rope.c,
 * with s = +1; nanochat's, s = -1, is the rotation by minus the angle):
 *   y_i = h_i cos a_i - h_{i+D/2} s sin a_i,   y_{i+D/2} = h_{i+D/2} cos a_i + h_i s sin a_i
 *   a_i = p theta^(-2i/D)
 *   out = y / sqrt(mean(y²) + eps)    (qk_norm; fg_rmsnorm without a weight, ops/rmsnorm.c)
 * and v is copied. The backward is the transposes in reverse: rmsnorm's rule, then the rotation
 * with sin negated. The kernels evaluate the expressions of fg_rope's and fg_rmsnorm's, so the
 * result is the composition's bit for bit (tests/test_ops_llama.c checks it, values and gradients).
 *
 * Why a fused op: the composition copies each of q, k, v several times (slice, permute, rope,
 * flips, norm) and then needs fg_attention's permuted layout; this reads qkv once, writes it once,
 * and hands fg_attention_qkv packed rows it reads in place.
 *
 * The kernels are in ops/cpu/rope_qkv.c; CPU only (the CUDA table holds NULL, and the op refuses).
 */
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- the op, for every device ---- */

/* What the backward needs: the table, and with the norm the output and 1/rms; the sizes. */
typedef struct {
    fg_tensor *cs, *out, *rstd;
    int64_t B, T, H, K, D;
    int rot, norm;
} rope_qkv_state;

/* inputs {qkv}. forward: out = norm(rot(qkv))  ->  dqkv (+)= rotᵀ(normᵀ(dout)) */
static fg_status rope_qkv_backward(fg_node *n) {
    const rope_qkv_state *s = FG_NODE_STATE(n, rope_qkv_state);
    fg_tensor *dx;
    int fresh;
    FG_TRY(fg_grad_get_fresh(n->inputs[0], &dx, &fresh));
    if (!dx) return FG_OK;
    const fg_kernels *k = fg_kernels_for(dx->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = k->rope_qkv.backward(dx->dtype, fg_data(dx), !fresh, fg_data(dout), s->out ? fg_data(s->out) : NULL,
                                        s->rstd ? fg_data(s->rstd) : NULL, s->cs ? fg_data(s->cs) : NULL, s->B, s->T,
                                        s->H, s->K, s->D, s->rot, s->norm);
    fg_release(dout);
    return st;
}

/* FG_OK, or the error naming the op: qkv's rank, heads and width; the options' ranges. */
static fg_status rope_qkv_check(const char *op, const fg_tensor *qkv, const fg_rope_qkv_opts *o, int64_t *K,
                                int64_t *D) {
    char b[FG_SHAPE_BUF];
    FG_TRY(fg_op_check(op, "qkv", qkv));
    if (!o) return fg_error(FG_ERR_ARG, "%s: opts is NULL", op);
    if (qkv->ndim != 3) return fg_error(FG_ERR_SHAPE, "%s: qkv %s must be (B, T, (H + 2 H_kv) D)", op, FG_SHP(qkv, b));
    const int64_t H = o->n_head, Kv = o->n_kv_heads ? o->n_kv_heads : o->n_head, W = qkv->shape[2];
    if (H < 1 || Kv < 1)
        return fg_error(FG_ERR_ARG, "%s: n_head %lld and n_kv_heads %lld must be >= 1 (0 = n_head for n_kv_heads)", op,
                        (long long)H, (long long)o->n_kv_heads);
    if (W % (H + 2 * Kv) != 0 || W == 0)
        return fg_error(FG_ERR_SHAPE, "%s: qkv %s: the last dim %lld does not split into %lld + 2 x %lld heads", op,
                        FG_SHP(qkv, b), (long long)W, (long long)H, (long long)Kv);
    *K = Kv;
    *D = W / (H + 2 * Kv);
    if (o->rotary != 0 && o->rotary != 1 && o->rotary != -1)
        return fg_error(FG_ERR_ARG, "%s: rotary %d is not 0, 1 or -1", op, o->rotary);
    if (o->qk_norm != 0 && o->qk_norm != 1) return fg_error(FG_ERR_ARG, "%s: qk_norm %d is not 0 or 1", op, o->qk_norm);
    if (o->rotary) {
        if (*D % 2 != 0)
            return fg_error(FG_ERR_SHAPE, "%s: qkv %s has an odd head dim D = %lld; the rotary pairs need it even", op,
                            FG_SHP(qkv, b), (long long)*D);
        if (!(o->theta > 0) || isinf(o->theta))
            return fg_error(FG_ERR_ARG, "%s: theta = %g must be finite and > 0", op, o->theta);
        if (o->pos0 < 0) return fg_error(FG_ERR_ARG, "%s: pos0 = %lld must be >= 0", op, (long long)o->pos0);
    }
    if (o->qk_norm && (!(o->eps > 0) || isinf(o->eps)))
        return fg_error(FG_ERR_ARG, "%s: eps = %g must be finite and > 0", op, o->eps);
    return FG_OK;
}

fg_tensor *fg_rope_qkv(fg_tensor *qkv, const fg_rope_qkv_opts *o) {
    static const char op[] = "rope_qkv";
    int64_t K = 0, D = 0;
    if (rope_qkv_check(op, qkv, o, &K, &D) != FG_OK) return NULL;
    const fg_kernels *k = fg_kernels_for(qkv->device, op);
    if (!k) return NULL;
    if (!k->rope_qkv.forward || !k->rope_qkv.backward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    const fg_device dev = qkv->device;
    const fg_dtype dt = qkv->dtype;
    const int64_t B = qkv->shape[0], T = qkv->shape[1], H = o->n_head;
    fg_tensor *X = fg_op_contiguous(qkv);
    fg_tensor *cs = o->rotary ? fg_empty(dt, dev, 3, (int64_t[]){T, D / 2, 2}) : NULL;
    fg_tensor *rstd = o->qk_norm ? fg_empty(dt, dev, 3, (int64_t[]){B, T, H + K}) : NULL;
    fg_tensor *out = fg_empty(dt, dev, 3, qkv->shape);
    fg_tensor *ret = NULL, *alias = NULL;
    if (X && (cs || !o->rotary) && (rstd || !o->qk_norm) && out &&
        k->rope_qkv.forward(dt, fg_data(out), rstd ? fg_data(rstd) : NULL, cs ? fg_data(cs) : NULL, fg_data(X), B, T, H,
                            K, D, o->rotary, o->theta, o->pos0, o->qk_norm, o->eps) == FG_OK) {
        fg_node *node = fg_record(out, op, rope_qkv_backward, 1, (fg_tensor *[]){qkv});
        /* the node saves the output through an alias: the output itself would own its own node */
        alias = node && o->qk_norm ? fg_alias(out) : NULL;
        if (node && (alias || !o->qk_norm)) {
            rope_qkv_state *s = FG_NODE_STATE(node, rope_qkv_state);
            *s = (rope_qkv_state){.B = B, .T = T, .H = H, .K = K, .D = D, .rot = o->rotary, .norm = o->qk_norm};
            s->cs = fg_node_keep(node, cs);
            s->out = fg_node_keep(node, alias);
            s->rstd = fg_node_keep(node, rstd);
        }
        if (!node || alias || !o->qk_norm) {
            ret = out;
            out = NULL;
        }
    }
    fg_release(X);
    fg_release(cs);
    fg_release(rstd);
    fg_release(alias);
    fg_release(out);
    return ret;
}
