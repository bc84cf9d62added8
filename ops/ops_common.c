/* ops_common.c — argument checks, broadcasting and backward helpers shared by the shells of ops/.
 * See ops_internal.h for what each does. */
#include <math.h>

#include "ops/cpu/elementwise.h"
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* ---- argument checks ---- */
fg_status fg_op_compute_dtype(const char *op, const char *what, fg_dtype dt, fg_device dev) {
    if (dt == FG_F32 || dt == FG_F64) return FG_OK;
    if (dt == FG_BF16 && dev == FG_CPU)
        return fg_error(FG_ERR_DTYPE,
                        "%s: %s is bfloat16, which the CPU stores but does not compute in: bf16 compute needs "
                        "--device cuda (convert with fg_to to float32 for CPU math)",
                        op, what);
    if (dt == FG_BF16)
        return fg_error(FG_ERR_DTYPE,
                        "%s: %s is bfloat16, which %s computes in for attention only (convert with fg_to to "
                        "float32)",
                        op, what, fg_device_name(dev));
    return fg_error(FG_ERR_DTYPE, "%s: %s has unsupported dtype %d", op, what, (int)dt);
}

fg_status fg_op_check(const char *op, const char *what, const fg_tensor *t) {
    if (!t) return fg_error(FG_ERR_ARG, "%s: %s is NULL", op, what);
    return fg_op_compute_dtype(op, what, t->dtype, t->device);
}

fg_status fg_op_check_like(const char *op, const char *what, const fg_tensor *t, const char *ref_what,
                           const fg_tensor *ref) {
    char b1[FG_SHAPE_BUF], b2[FG_SHAPE_BUF];
    fg_status st = fg_op_check(op, what, t);
    if (st != FG_OK) return st;
    if (t->dtype != ref->dtype)
        return fg_error(FG_ERR_DTYPE, "%s: dtype mismatch: %s is %s %s, %s is %s %s", op, ref_what,
                        fg_dtype_name(ref->dtype), FG_SHP(ref, b1), what, fg_dtype_name(t->dtype), FG_SHP(t, b2));
    if (t->device != ref->device)
        return fg_error(FG_ERR_DEVICE, "%s: device mismatch: %s is on %s %s, %s on %s %s", op, ref_what,
                        fg_device_name(ref->device), FG_SHP(ref, b1), what, fg_device_name(t->device), FG_SHP(t, b2));
    return FG_OK;
}

fg_status fg_op_check_norm(const char *op, const fg_tensor *x, int n, const fg_tensor *const *params,
                           const char *const *names, double eps, int eps_positive, int64_t *R, int64_t *C) {
    char b1[FG_SHAPE_BUF], b2[FG_SHAPE_BUF];
    FG_TRY(fg_op_check(op, "x", x));
    for (int i = 0; i < n; i++)
        if (params[i]) FG_TRY(fg_op_check_like(op, names[i], params[i], "x", x));
    if (x->ndim < 1) return fg_error(FG_ERR_SHAPE, "%s: x %s needs at least one dim", op, FG_SHP(x, b1));
    *C = x->shape[x->ndim - 1];
    *R = 1;
    for (int d = 0; d < x->ndim - 1; d++) *R *= x->shape[d];
    for (int i = 0; i < n; i++)
        if (params[i] && (params[i]->ndim != 1 || params[i]->shape[0] != *C))
            return fg_error(FG_ERR_SHAPE, "%s: %s %s does not match x %s: need (%lld)", op, names[i],
                            FG_SHP(params[i], b2), FG_SHP(x, b1), (long long)*C);
    if (eps_positive ? !(eps > 0) || isinf(eps) : !(eps >= 0) || isinf(eps))
        return fg_error(FG_ERR_ARG, "%s: eps = %g must be finite and %s 0 (x %s)", op, eps, eps_positive ? ">" : ">=",
                        FG_SHP(x, b1));
    return FG_OK;
}

int fg_op_axis(const char *op, const fg_tensor *t, int axis) {
    char b[FG_SHAPE_BUF];
    int a = axis < 0 ? axis + t->ndim : axis;
    if (a < 0 || a >= t->ndim) {
        fg_error(FG_ERR_ARG, "%s: axis %d is out of range for a tensor of shape %s", op, axis, FG_SHP(t, b));
        return -1;
    }
    return a;
}

fg_status fg_op_no_kernel(const char *op, const char *device) {
    return fg_error(FG_ERR_DEVICE, "op %s: not supported on %s", op, device);
}

/* ---- shapes and strides ---- */
fg_status fg_broadcast_shape(const char *op, const fg_tensor *a, const fg_tensor *b, int *ndim, int64_t *shape) {
    char b1[FG_SHAPE_BUF], b2[FG_SHAPE_BUF];
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < nd; i++) {
        /* align at the right: dim i of the result is dim i - (nd - ndim) of each input */
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return fg_error(FG_ERR_SHAPE, "%s: shapes %s and %s do not broadcast (dim %d: %lld vs %lld)", op,
                            FG_SHP(a, b1), FG_SHP(b, b2), i, (long long)sa, (long long)sb);
        shape[i] = sa == 1 ? sb : sa;
    }
    *ndim = nd;
    return FG_OK;
}

/* ---- backward helpers ---- */
fg_tensor *fg_op_contiguous(fg_tensor *t) {
    if (fg_is_contiguous(t)) return fg_retain(t);
    if (t->device != FG_CPU) return fg_contiguous(t);
    fg_tensor *c = fg_empty(t->dtype, FG_CPU, t->ndim, t->shape);
    if (!c) return NULL;
    fg__cpu_copy_strided(t->dtype, fg_data(c), fg_data(t), t->strides, t->ndim, t->shape);
    return c;
}

fg_status fg_op_add_into(fg_tensor *dst, const fg_tensor *src, double alpha) {
    static const char op[] = "accumulate";
    char b1[FG_SHAPE_BUF], b2[FG_SHAPE_BUF];
    if (!fg_same_shape(dst, src) || dst->dtype != src->dtype)
        return fg_error(FG_ERR_SHAPE, "internal: accumulate %s %s into %s %s", fg_dtype_name(src->dtype),
                        FG_SHP(src, b1), fg_dtype_name(dst->dtype), FG_SHP(dst, b2));
    FG_TRY(fg_op_compute_dtype(op, "the gradient", dst->dtype, dst->device));
    if (dst->device != src->device)
        return fg_error(FG_ERR_DEVICE, "%s: %s %s into %s %s: both must be on one device", op,
                        fg_device_name(src->device), FG_SHP(src, b1), fg_device_name(dst->device), FG_SHP(dst, b2));
    const fg_kernels *k = fg_kernels_for(dst->device, op);
    if (!k) return fg_last_status();
    if (!k->memory.add_into) return fg_op_no_kernel(op, k->device);
    return k->memory.add_into(dst->dtype, fg_data(dst), dst->strides, fg_data(src), src->strides, dst->ndim, dst->shape,
                              alpha);
}

fg_tensor *fg_op_grad_out(fg_node *n) {
    if (!n->grad_out) {
        fg_error(FG_ERR_STATE, "%s backward: no output gradient", n->op);
        return NULL;
    }
    return fg_op_contiguous(n->grad_out);
}

void *fg_op_ctx_alloc(const char *op, size_t nbytes) {
    void *p = fg_alloc(FG_CPU, nbytes ? nbytes : 1);
    if (!p) fg_error(FG_ERR_OOM, "%s: out of memory for %zu bytes of saved indices", op, nbytes);
    return p;
}

void fg_op_ctx_free(void *ctx) { fg_free(FG_CPU, ctx); }
