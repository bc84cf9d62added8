/* ops_common.c — argument checks, the strided row iterator and backward helpers shared by ops/.
 * See ops_internal.h for what each does. */
#include "ops/cpu/vmath.h"
#include "ops/kernels_cpu.h"
#include "ops/ops_internal.h"

#include <string.h>

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

void fg_broadcast_strides(int t_ndim, const int64_t *t_shape, const int64_t *t_strides, int ndim, const int64_t *shape,
                          int64_t *out) {
    for (int i = 0; i < ndim; i++) {
        int it = i - (ndim - t_ndim);
        out[i] = (it >= 0 && t_shape[it] == shape[i]) ? t_strides[it] : 0;
    }
}

/* ---- backward helpers ----
 * dst += alpha * src and the contiguous copy walk the row iterator in pieces (ops/cpu/vmath.h): on
 * the thread pool when big, each piece's rows through the vector kernel when both sides have unit
 * stride along the row. The product alpha * src is rounded before the sum on every path, so the
 * bits do not depend on the path. */
typedef struct {
    void *dst;
    const void *src;
    double alpha;
} rows_job;

#define ADD_INTO_BODY(T, VEC)                                                                                          \
    const rows_job *j = ctx;                                                                                           \
    T *dst = j->dst, a = (T)j->alpha;                                                                                  \
    const T *src = j->src;                                                                                             \
    while (fg_iter_next(it)) {                                                                                         \
        T *d = dst + it->off[0];                                                                                       \
        const T *s = src + it->off[1];                                                                                 \
        int64_t sd = it->inner[0], ss = it->inner[1], n = it->n;                                                       \
        if (sd == 1 && ss == 1)                                                                                        \
            VEC(d, a, s, n);                                                                                           \
        else                                                                                                           \
            for (int64_t i = 0; i < n; i++) d[i * sd] += a * s[i * ss];                                                \
    }

#define ADD_INTO_LOOP_F64(d, a, s, n)                                                                                  \
    for (int64_t i = 0; i < (n); i++) (d)[i] += (a) * (s)[i]
static void add_into_f32(void *ctx, fg_iter *it) { ADD_INTO_BODY(float, fg_vaxpy_f32); }
static void add_into_f64(void *ctx, fg_iter *it) { ADD_INTO_BODY(double, ADD_INTO_LOOP_F64); }

#define COPY_ROWS_BODY(T)                                                                                              \
    const rows_job *j = ctx;                                                                                           \
    T *dst = j->dst;                                                                                                   \
    const T *src = j->src;                                                                                             \
    while (fg_iter_next(it)) {                                                                                         \
        T *d = dst + it->off[0];                                                                                       \
        const T *s = src + it->off[1];                                                                                 \
        int64_t ss = it->inner[1], n = it->n;                                                                          \
        if (ss == 1)                                                                                                   \
            memcpy(d, s, (size_t)n * sizeof(T));                                                                       \
        else                                                                                                           \
            for (int64_t i = 0; i < n; i++) d[i] = s[i * ss];                                                          \
    }

static void copy_rows_f32(void *ctx, fg_iter *it) { COPY_ROWS_BODY(float); }
static void copy_rows_f64(void *ctx, fg_iter *it) { COPY_ROWS_BODY(double); }

fg_tensor *fg_op_contiguous(fg_tensor *t) {
    if (fg_is_contiguous(t)) return fg_retain(t);
    if (t->device != FG_CPU) return fg_contiguous(t);
    fg_tensor *c = fg_empty(t->dtype, FG_CPU, t->ndim, t->shape);
    if (!c) return NULL;
    int64_t strides[2][FG_MAX_DIMS];
    fg_contig_strides(t->ndim, t->shape, strides[0]);
    memcpy(strides[1], t->strides, sizeof strides[1]);
    fg_iter it;
    fg_iter_init(&it, t->ndim, t->shape, 2, strides);
    rows_job j = {fg_data(c), fg_data(t), 0};
    /* ~0.3 ns per element: strided reads */
    fg_par_iter(&it, 1, 0.3, t->dtype == FG_F32 ? copy_rows_f32 : copy_rows_f64, &j);
    return c;
}

fg_status fg_cpu_memory_add_into(fg_dtype dt, void *dst, const int64_t *dst_strides, const void *src,
                                 const int64_t *src_strides, int nd, const int64_t *shape, double alpha) {
    int64_t strides[2][FG_MAX_DIMS];
    memcpy(strides[0], dst_strides, (size_t)nd * sizeof(int64_t));
    memcpy(strides[1], src_strides, (size_t)nd * sizeof(int64_t));
    fg_iter it;
    fg_iter_init(&it, nd, shape, 2, strides);
    rows_job j = {dst, src, alpha};
    /* pieces in parallel only if no element of dst is reached twice; ~0.2 ns per element */
    fg_par_iter(&it, fg_no_broadcast(nd, shape, dst_strides), 0.2, dt == FG_F32 ? add_into_f32 : add_into_f64, &j);
    return FG_OK;
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
