/* tensor.c — creation, reference counting, views and copies of strided tensors. */
#include "tensor/tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/bf16.h"
#include "tensor/philox.h"

static const fg_tensor_backend *tensor_backends[FG_DEVICE_COUNT];
static void (*node_release_hook)(struct fg_node *);

void fg_register_tensor_backend(fg_device d, const fg_tensor_backend *be) {
    if (d > FG_CPU && d < FG_DEVICE_COUNT) tensor_backends[d] = be;
}
void fg_set_node_release_hook(void (*hook)(struct fg_node *)) { node_release_hook = hook; }

const char *fg_dtype_name(fg_dtype t) {
    switch (t) {
    case FG_F32:
        return "float32";
    case FG_F64:
        return "float64";
    case FG_BF16:
        return "bfloat16";
    default:
        return "unknown-dtype";
    }
}
size_t fg_dtype_size(fg_dtype t) { return t == FG_F64 ? 8 : t == FG_BF16 ? 2 : 4; }

/* ---- inspection ---- */
int64_t fg_numel(const fg_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}
size_t fg_nbytes(const fg_tensor *t) { return (size_t)fg_numel(t) * fg_dtype_size(t->dtype); }

static void contiguous_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

int fg_is_contiguous(const fg_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != s) return 0;
        s *= t->shape[i];
    }
    return 1;
}

int fg_same_shape(const fg_tensor *a, const fg_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

void *fg_data(const fg_tensor *t) { return (char *)t->storage->data + (size_t)t->offset * fg_dtype_size(t->dtype); }

const char *fg_dims_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t used = 0;
    if (n == 0) return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf + used, n - used, "(");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, ")");
    return buf;
}

const char *fg_shape_str(const fg_tensor *t, char *buf, size_t n) { return fg_dims_str(buf, n, t->ndim, t->shape); }

/* Storage offset (elements) of the flat C-order index `k` of the view. */
static int64_t flat_to_offset(const fg_tensor *t, int64_t k) {
    int64_t off = t->offset;
    for (int i = t->ndim - 1; i >= 0; i--) {
        int64_t idx = k % t->shape[i];
        k /= t->shape[i];
        off += idx * t->strides[i];
    }
    return off;
}

double fg_get(const fg_tensor *t, int64_t k) {
    int64_t off = flat_to_offset(t, k);
    size_t es = fg_dtype_size(t->dtype);
    union {
        float f;
        double d;
        uint16_t h;
    } v = {0};
    if (t->device == FG_CPU) {
        memcpy(&v, (char *)t->storage->data + (size_t)off * es, es);
    } else {
        const fg_device_backend *be = fg_backend(t->device);
        if (!be) {
            fg_error(FG_ERR_DEVICE, "get: device %s is not available", fg_device_name(t->device));
            return NAN;
        }
        be->copy_to_host(&v, (char *)t->storage->data + (size_t)off * es, es); /* one element: slow, for tests */
    }
    return t->dtype == FG_F64 ? v.d : t->dtype == FG_BF16 ? (double)fg_bf16_to_f32(v.h) : v.f;
}

fg_status fg_set(fg_tensor *t, int64_t k, double x) {
    int64_t off = flat_to_offset(t, k);
    size_t es = fg_dtype_size(t->dtype);
    union {
        float f;
        double d;
        uint16_t h;
    } v;
    if (t->dtype == FG_F64)
        v.d = x;
    else if (t->dtype == FG_BF16)
        v.h = fg_bf16_from_f64(x);
    else
        v.f = (float)x;
    if (t->device == FG_CPU) {
        memcpy((char *)t->storage->data + (size_t)off * es, &v, es);
        return FG_OK;
    }
    const fg_device_backend *be = fg_backend(t->device);
    if (!be) return fg_error(FG_ERR_DEVICE, "set: device %s is not available", fg_device_name(t->device));
    be->copy_from_host((char *)t->storage->data + (size_t)off * es, &v, es);
    return FG_OK;
}

/* ---- creation ---- */
static fg_status check_shape(int ndim, const int64_t *shape, int64_t *numel) {
    if (ndim < 0 || ndim > FG_MAX_DIMS)
        return fg_error(FG_ERR_ARG, "tensor: rank %d is outside 0..%d", ndim, FG_MAX_DIMS);
    if (ndim > 0 && !shape) return fg_error(FG_ERR_ARG, "tensor: shape is NULL");
    /* The strides are products of trailing sizes, so the product of the nonzero sizes must fit
     * (with room for the bytes) even when a zero size makes the element count 0. */
    int64_t n = 1, nz = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return fg_error(FG_ERR_ARG, "tensor: negative size %lld in dim %d", (long long)shape[i], i);
        if (shape[i] > 0 && nz > INT64_MAX / 8 / shape[i])
            return fg_error(FG_ERR_ARG, "tensor: shape is too large (element count overflows)");
        if (shape[i] > 0) nz *= shape[i];
        n *= shape[i];
    }
    *numel = n;
    return FG_OK;
}

static fg_tensor *tensor_shell(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape) {
    fg_tensor *t = calloc(1, sizeof *t);
    if (!t) {
        fg_error(FG_ERR_OOM, "tensor: out of memory");
        return NULL;
    }
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    contiguous_strides(ndim, t->shape, t->strides);
    t->dtype = dt;
    t->device = dev;
    t->refcount = 1;
    return t;
}

fg_tensor *fg_empty(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape) {
    int64_t n;
    if (dt < 0 || dt >= FG_DTYPE_COUNT) {
        fg_error(FG_ERR_DTYPE, "tensor: unknown dtype %d", (int)dt);
        return NULL;
    }
    if (check_shape(ndim, shape, &n) != FG_OK) return NULL;
    fg_storage *s = calloc(1, sizeof *s);
    if (!s) {
        fg_error(FG_ERR_OOM, "tensor: out of memory");
        return NULL;
    }
    s->nbytes = (size_t)n * fg_dtype_size(dt);
    s->device = dev;
    s->refcount = 1;
    s->data = fg_alloc(dev, s->nbytes);
    if (!s->data) {
        free(s);
        return NULL;
    }
    fg_tensor *t = tensor_shell(dt, dev, ndim, shape);
    if (!t) {
        fg_free(dev, s->data);
        free(s);
        return NULL;
    }
    t->storage = s;
    return t;
}

fg_tensor *fg_full(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape, double value) {
    fg_tensor *t = fg_empty(dt, dev, ndim, shape);
    if (t && fg_fill(t, value) != FG_OK) {
        fg_release(t);
        return NULL;
    }
    return t;
}
fg_tensor *fg_zeros(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape) {
    return fg_full(dt, dev, ndim, shape, 0.0);
}
fg_tensor *fg_ones(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape) {
    return fg_full(dt, dev, ndim, shape, 1.0);
}
fg_tensor *fg_zeros_like(const fg_tensor *t) { return fg_zeros(t->dtype, t->device, t->ndim, t->shape); }

fg_tensor *fg_from_buffer(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape, const void *data) {
    if (!data) {
        fg_error(FG_ERR_ARG, "from_buffer: data is NULL");
        return NULL;
    }
    fg_tensor *t = fg_empty(dt, dev, ndim, shape);
    if (!t) return NULL;
    if (dev == FG_CPU)
        memcpy(t->storage->data, data, t->storage->nbytes);
    else
        fg_backend(dev)->copy_from_host(t->storage->data, data, t->storage->nbytes);
    return t;
}

fg_tensor *fg_from_blob(fg_dtype dt, int ndim, const int64_t *shape, void *data) {
    int64_t n;
    if (!data) {
        fg_error(FG_ERR_ARG, "from_blob: data is NULL");
        return NULL;
    }
    if (check_shape(ndim, shape, &n) != FG_OK) return NULL;
    fg_storage *s = calloc(1, sizeof *s);
    fg_tensor *t = s ? tensor_shell(dt, FG_CPU, ndim, shape) : NULL;
    if (!t) {
        free(s);
        fg_error(FG_ERR_OOM, "tensor: out of memory");
        return NULL;
    }
    s->data = data;
    s->nbytes = (size_t)n * fg_dtype_size(dt);
    s->device = FG_CPU;
    s->refcount = 1;
    s->borrowed = 1;
    t->storage = s;
    return t;
}

/* Random fills are generated on the host (element k uses number k of the stream) and copied to
 * the device, so a tensor's values never depend on where it lives. */
void fg_rand_normal_range(double *out, int64_t k0, int64_t k1, double mean, double std, uint64_t seed,
                          uint64_t stream) {
    uint32_t w[4];
    for (int64_t k = k0; k < k1; k++) {
        /* numbers 2k and 2k+1 of the stream: words 2(k&1), 2(k&1)+1 of Philox block k/2, so one
         * block serves two elements (fg_philox_u32 would compute it once per number) */
        if (k == k0 || (k & 1) == 0) fg_philox_block(seed, stream, (uint64_t)k >> 1, w);
        double n0, n1;
        fg_box_muller(w[2 * (k & 1)], w[2 * (k & 1) + 1], &n0, &n1);
        out[k - k0] = mean + std * n0;
    }
}

static fg_tensor *rand_fill(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape, int normal, double a, double b,
                            uint64_t seed, uint64_t stream) {
    fg_tensor *host = fg_empty(dt, FG_CPU, ndim, shape);
    if (!host) return NULL;
    int64_t n = fg_numel(host);
    double buf[256];
    for (int64_t k0 = 0; k0 < n; k0 += 256) {
        const int64_t k1 = n - k0 < 256 ? n : k0 + 256;
        if (normal)
            fg_rand_normal_range(buf, k0, k1, a, b, seed, stream);
        else /* uniform in (lo, hi]: lo + (hi - lo) * u with u in (0, 1] */
            for (int64_t k = k0; k < k1; k++)
                buf[k - k0] = a + (b - a) * fg_u32_to_uniform_f64(fg_philox_u32(seed, stream, (uint64_t)k));
        for (int64_t k = k0; k < k1; k++) {
            if (dt == FG_F64)
                ((double *)host->storage->data)[k] = buf[k - k0];
            else if (dt == FG_BF16)
                ((uint16_t *)host->storage->data)[k] = fg_bf16_from_f64(buf[k - k0]);
            else
                ((float *)host->storage->data)[k] = (float)buf[k - k0];
        }
    }
    if (dev == FG_CPU) return host;
    fg_tensor *t = fg_to(host, dev, dt);
    fg_release(host);
    return t;
}

fg_tensor *fg_rand_uniform(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape, double lo, double hi,
                           uint64_t seed, uint64_t stream) {
    return rand_fill(dt, dev, ndim, shape, 0, lo, hi, seed, stream);
}
fg_tensor *fg_rand_normal(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape, double mean, double std,
                          uint64_t seed, uint64_t stream) {
    return rand_fill(dt, dev, ndim, shape, 1, mean, std, seed, stream);
}

/* ---- references ---- */
fg_tensor *fg_retain(fg_tensor *t) {
    if (t) t->refcount++;
    return t;
}

static void storage_release(fg_storage *s) {
    if (!s || --s->refcount > 0) return;
    if (!s->borrowed) fg_free(s->device, s->data);
    free(s);
}

void fg_release(fg_tensor *t) {
    if (!t) return;
    FG_ASSERT(t->refcount > 0, "fg_release of a tensor that was already freed");
    if (--t->refcount > 0) return;
    if (t->grad_fn && node_release_hook) node_release_hook(t->grad_fn);
    fg_release(t->grad);
    storage_release(t->storage);
    free(t);
}

/* ---- views ---- */
static fg_tensor *view_of(fg_tensor *t) {
    fg_tensor *v = tensor_shell(t->dtype, t->device, t->ndim, t->shape);
    if (!v) return NULL;
    memcpy(v->strides, t->strides, sizeof v->strides);
    v->offset = t->offset;
    v->storage = t->storage;
    t->storage->refcount++;
    return v;
}

fg_tensor *fg_alias(fg_tensor *t) { return view_of(t); }

fg_tensor *fg_view_reshape(fg_tensor *t, int ndim, const int64_t *shape) {
    char buf[96];
    if (ndim < 0 || ndim > FG_MAX_DIMS) {
        fg_error(FG_ERR_ARG, "reshape: rank %d is outside 0..%d", ndim, FG_MAX_DIMS);
        return NULL;
    }
    int64_t sh[FG_MAX_DIMS], known = 1;
    int infer = -1;
    for (int i = 0; i < ndim; i++) {
        sh[i] = shape[i];
        if (sh[i] == -1) {
            if (infer >= 0) {
                fg_error(FG_ERR_ARG, "reshape: more than one -1 in the new shape");
                return NULL;
            }
            infer = i;
        } else if (sh[i] < 0) {
            fg_error(FG_ERR_ARG, "reshape: negative size %lld", (long long)sh[i]);
            return NULL;
        } else {
            known *= sh[i];
        }
    }
    int64_t n = fg_numel(t);
    if (infer >= 0) {
        if (known == 0 || n % known) {
            fg_error(FG_ERR_SHAPE, "reshape: cannot infer -1 for %lld elements of %s", (long long)n,
                     fg_shape_str(t, buf, sizeof buf));
            return NULL;
        }
        sh[infer] = n / known;
        known *= sh[infer];
    }
    if (known != n) {
        fg_error(FG_ERR_SHAPE, "reshape: %s has %lld elements, the new shape %lld", fg_shape_str(t, buf, sizeof buf),
                 (long long)n, (long long)known);
        return NULL;
    }
    if (!fg_is_contiguous(t)) {
        fg_error(FG_ERR_ARG, "reshape view: tensor %s is not contiguous (use fg_contiguous first)",
                 fg_shape_str(t, buf, sizeof buf));
        return NULL;
    }
    fg_tensor *v = view_of(t);
    if (!v) return NULL;
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->shape[i] = sh[i];
    contiguous_strides(ndim, v->shape, v->strides);
    return v;
}

fg_tensor *fg_view_permute(fg_tensor *t, const int *perm) {
    int seen[FG_MAX_DIMS] = {0};
    for (int i = 0; i < t->ndim; i++) {
        if (perm[i] < 0 || perm[i] >= t->ndim || seen[perm[i]]) {
            fg_error(FG_ERR_ARG, "permute: not a permutation of %d dims", t->ndim);
            return NULL;
        }
        seen[perm[i]] = 1;
    }
    fg_tensor *v = view_of(t);
    if (!v) return NULL;
    for (int i = 0; i < t->ndim; i++) {
        v->shape[i] = t->shape[perm[i]];
        v->strides[i] = t->strides[perm[i]];
    }
    return v;
}

static int norm_axis(const fg_tensor *t, int axis, const char *op) {
    int a = axis < 0 ? axis + t->ndim : axis;
    if (a < 0 || a >= t->ndim) {
        fg_error(FG_ERR_ARG, "%s: axis %d is out of range for a rank-%d tensor", op, axis, t->ndim);
        return -1;
    }
    return a;
}

fg_tensor *fg_view_transpose(fg_tensor *t, int d0, int d1) {
    int a = norm_axis(t, d0, "transpose"), b = a < 0 ? -1 : norm_axis(t, d1, "transpose");
    if (a < 0 || b < 0) return NULL;
    int perm[FG_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) perm[i] = i;
    perm[a] = b;
    perm[b] = a;
    return fg_view_permute(t, perm);
}

fg_tensor *fg_view_slice(fg_tensor *t, int axis, int64_t start, int64_t end) {
    int a = norm_axis(t, axis, "slice");
    if (a < 0) return NULL;
    if (start < 0 || end < start || end > t->shape[a]) {
        fg_error(FG_ERR_ARG, "slice: [%lld, %lld) is outside 0..%lld along axis %d", (long long)start, (long long)end,
                 (long long)t->shape[a], a);
        return NULL;
    }
    fg_tensor *v = view_of(t);
    if (!v) return NULL;
    v->shape[a] = end - start;
    v->offset += start * t->strides[a];
    return v;
}

/* ---- copies ---- */
/* Visit a strided view row by row: for every index of the leading dims, call
 * fn(ctx, dst_off, src_off, n) for the innermost dim. dst and src have the same shape; offsets
 * are in elements. The inner loops in the callers are then plain strided loops. */
typedef void (*row_fn)(void *ctx, int64_t doff, int64_t soff, int64_t n, int64_t dstride, int64_t sstride);
static void for_each_row(const fg_tensor *dst, const fg_tensor *src, row_fn fn, void *ctx) {
    int nd = dst->ndim;
    if (fg_numel(dst) == 0) return;
    if (nd == 0) {
        fn(ctx, dst->offset, src->offset, 1, 1, 1);
        return;
    }
    int64_t inner = dst->shape[nd - 1], rows = fg_numel(dst) / inner;
    int64_t idx[FG_MAX_DIMS] = {0};
    int64_t so = src->offset, dof = dst->offset;
    for (int64_t r = 0; r < rows; r++) {
        fn(ctx, dof, so, inner, dst->strides[nd - 1], src->strides[nd - 1]);
        for (int i = nd - 2; i >= 0; i--) { /* odometer over the leading dims */
            idx[i]++;
            so += src->strides[i];
            dof += dst->strides[i];
            if (idx[i] < dst->shape[i]) break;
            so -= src->strides[i] * idx[i];
            dof -= dst->strides[i] * idx[i];
            idx[i] = 0;
        }
    }
}

typedef struct {
    void *d;
    const void *s;
    double alpha;
} row_ctx;

#define COPY_ROW(NAME, TD, TS)                                                                                         \
    static void NAME(void *c, int64_t doff, int64_t soff, int64_t n, int64_t ds, int64_t ss) {                         \
        row_ctx *x = c;                                                                                                \
        TD *d = (TD *)x->d + doff;                                                                                     \
        const TS *s = (const TS *)x->s + soff;                                                                         \
        for (int64_t k = 0; k < n; k++) d[k * ds] = (TD)s[k * ss];                                                     \
    }
COPY_ROW(copy_ff, float, float)
COPY_ROW(copy_fd, float, double)
COPY_ROW(copy_df, double, float)
COPY_ROW(copy_dd, double, double)
COPY_ROW(copy_hh, uint16_t, uint16_t)

/* to and from bfloat16 (bits): rounding to nearest even, once, from either float type */
#define COPY_ROW_CVT(NAME, TD, TS, CVT)                                                                                \
    static void NAME(void *c, int64_t doff, int64_t soff, int64_t n, int64_t ds, int64_t ss) {                         \
        row_ctx *x = c;                                                                                                \
        TD *d = (TD *)x->d + doff;                                                                                     \
        const TS *s = (const TS *)x->s + soff;                                                                         \
        for (int64_t k = 0; k < n; k++) d[k * ds] = CVT(s[k * ss]);                                                    \
    }
COPY_ROW_CVT(copy_hf, uint16_t, float, fg_bf16_from_f32)
COPY_ROW_CVT(copy_hd, uint16_t, double, fg_bf16_from_f64)
COPY_ROW_CVT(copy_fh, float, uint16_t, fg_bf16_to_f32)
COPY_ROW_CVT(copy_dh, double, uint16_t, (double)fg_bf16_to_f32)

/* copy_rows[dst dtype][src dtype] */
static const row_fn copy_rows[FG_DTYPE_COUNT][FG_DTYPE_COUNT] = {
    [FG_F32] = {[FG_F32] = copy_ff, [FG_F64] = copy_fd, [FG_BF16] = copy_fh},
    [FG_F64] = {[FG_F32] = copy_df, [FG_F64] = copy_dd, [FG_BF16] = copy_dh},
    [FG_BF16] = {[FG_F32] = copy_hf, [FG_F64] = copy_hd, [FG_BF16] = copy_hh},
};

static void cpu_copy(fg_tensor *dst, const fg_tensor *src) {
    int64_t n = fg_numel(dst);
    if (n == 0) return;
    if (fg_is_contiguous(dst) && fg_is_contiguous(src) && dst->dtype == src->dtype) {
        memcpy(fg_data(dst), fg_data(src), (size_t)n * fg_dtype_size(dst->dtype));
        return;
    }
    row_ctx c = {dst->storage->data, src->storage->data, 0};
    for_each_row(dst, src, copy_rows[dst->dtype][src->dtype], &c);
}

static void axpy_row_f(void *c, int64_t doff, int64_t soff, int64_t n, int64_t ds, int64_t ss) {
    row_ctx *x = c;
    float *d = (float *)x->d + doff, a = (float)x->alpha;
    const float *s = (const float *)x->s + soff;
    for (int64_t k = 0; k < n; k++) d[k * ds] += a * s[k * ss];
}
/* bfloat16: y = bf16(float(y) + (float)alpha · float(x)), one rounding per element (how autograd
 * accumulates a bfloat16 gradient) */
static void axpy_row_h(void *c, int64_t doff, int64_t soff, int64_t n, int64_t ds, int64_t ss) {
    row_ctx *x = c;
    uint16_t *d = (uint16_t *)x->d + doff;
    const uint16_t *s = (const uint16_t *)x->s + soff;
    const float a = (float)x->alpha;
    for (int64_t k = 0; k < n; k++) d[k * ds] = fg_bf16_from_f32(fg_bf16_to_f32(d[k * ds]) + a * fg_bf16_to_f32(s[k * ss]));
}
static void axpy_row_d(void *c, int64_t doff, int64_t soff, int64_t n, int64_t ds, int64_t ss) {
    row_ctx *x = c;
    double *d = (double *)x->d + doff;
    const double *s = (const double *)x->s + soff;
    for (int64_t k = 0; k < n; k++) d[k * ds] += x->alpha * s[k * ss];
}

fg_status fg_copy_into(fg_tensor *dst, const fg_tensor *src) {
    char b1[96], b2[96];
    if (!dst || !src) return fg_error(FG_ERR_ARG, "copy: NULL tensor");
    if (!fg_same_shape(dst, src))
        return fg_error(FG_ERR_SHAPE, "copy: shapes differ: %s vs %s", fg_shape_str(dst, b1, sizeof b1),
                        fg_shape_str(src, b2, sizeof b2));
    if (dst->device != src->device)
        return fg_error(FG_ERR_DEVICE, "copy: devices differ (%s vs %s); use fg_to", fg_device_name(dst->device),
                        fg_device_name(src->device));
    if (dst->device == FG_CPU) {
        cpu_copy(dst, src);
        return FG_OK;
    }
    const fg_tensor_backend *be = tensor_backends[dst->device];
    if (!be) return fg_error(FG_ERR_DEVICE, "copy: device %s is not available", fg_device_name(dst->device));
    return be->copy(dst, src);
}

fg_tensor *fg_clone(const fg_tensor *t) {
    fg_tensor *c = fg_empty(t->dtype, t->device, t->ndim, t->shape);
    if (c && fg_copy_into(c, t) != FG_OK) {
        fg_release(c);
        return NULL;
    }
    return c;
}

fg_tensor *fg_contiguous(fg_tensor *t) {
    if (fg_is_contiguous(t)) return fg_retain(t);
    return fg_clone(t);
}

fg_status fg_to_host(const fg_tensor *t, void *dst) {
    if (t->device == FG_CPU) {
        fg_tensor *d = fg_from_blob(t->dtype, t->ndim, t->shape, dst);
        if (!d) return fg_last_status();
        cpu_copy(d, t);
        fg_release(d);
        return FG_OK;
    }
    const fg_device_backend *be = fg_backend(t->device);
    if (!be) return fg_error(FG_ERR_DEVICE, "to_host: device %s is not available", fg_device_name(t->device));
    fg_tensor *c = fg_contiguous((fg_tensor *)t);
    if (!c) return fg_last_status();
    be->copy_to_host(dst, fg_data(c), fg_nbytes(c));
    fg_release(c);
    return FG_OK;
}

fg_tensor *fg_to(const fg_tensor *t, fg_device dev, fg_dtype dt) {
    if (t->device == dev) {
        fg_tensor *c = fg_empty(dt, dev, t->ndim, t->shape);
        if (c && fg_copy_into(c, t) != FG_OK) {
            fg_release(c);
            return NULL;
        }
        return c;
    }
    /* across devices: convert dtype on the host side, then one bulk copy */
    fg_tensor *host = fg_empty(dt, FG_CPU, t->ndim, t->shape);
    if (!host) return NULL;
    if (t->device == FG_CPU) {
        cpu_copy(host, t);
    } else {
        fg_tensor *src = t->dtype == dt ? fg_retain((fg_tensor *)t) : fg_to(t, t->device, dt);
        if (!src || fg_to_host(src, fg_data(host)) != FG_OK) {
            fg_release(src);
            fg_release(host);
            return NULL;
        }
        fg_release(src);
    }
    if (dev == FG_CPU) return host;
    const fg_device_backend *be = fg_backend(dev);
    if (!be) {
        fg_release(host);
        fg_error(FG_ERR_DEVICE, "to: device %s is not available in this build", fg_device_name(dev));
        return NULL;
    }
    fg_tensor *out = fg_from_buffer(dt, dev, t->ndim, t->shape, fg_data(host));
    fg_release(host);
    return out;
}

/* ---- in-place utilities ---- */
fg_status fg_fill(fg_tensor *t, double value) {
    if (t->device != FG_CPU) {
        const fg_tensor_backend *be = tensor_backends[t->device];
        if (!be) return fg_error(FG_ERR_DEVICE, "fill: device %s is not available", fg_device_name(t->device));
        return be->fill(t, value);
    }
    int64_t n = fg_numel(t);
    if (fg_is_contiguous(t)) {
        if (value == 0.0) {
            memset(fg_data(t), 0, fg_nbytes(t));
        } else if (t->dtype == FG_F64) {
            double *p = fg_data(t);
            for (int64_t k = 0; k < n; k++) p[k] = value;
        } else if (t->dtype == FG_BF16) {
            uint16_t *p = fg_data(t), v = fg_bf16_from_f64(value);
            for (int64_t k = 0; k < n; k++) p[k] = v;
        } else {
            float *p = fg_data(t), v = (float)value;
            for (int64_t k = 0; k < n; k++) p[k] = v;
        }
        return FG_OK;
    }
    for (int64_t k = 0; k < n; k++) fg_set(t, k, value);
    return FG_OK;
}

fg_status fg_axpy(fg_tensor *y, double alpha, const fg_tensor *x) {
    char b1[96], b2[96];
    if (!fg_same_shape(y, x))
        return fg_error(FG_ERR_SHAPE, "axpy: shapes differ: %s vs %s", fg_shape_str(y, b1, sizeof b1),
                        fg_shape_str(x, b2, sizeof b2));
    if (y->dtype != x->dtype)
        return fg_error(FG_ERR_DTYPE, "axpy: dtypes differ: %s vs %s", fg_dtype_name(y->dtype),
                        fg_dtype_name(x->dtype));
    if (y->device != x->device) return fg_error(FG_ERR_DEVICE, "axpy: tensors on different devices");
    if (y->device != FG_CPU) {
        const fg_tensor_backend *be = tensor_backends[y->device];
        if (!be) return fg_error(FG_ERR_DEVICE, "axpy: device %s is not available", fg_device_name(y->device));
        return be->axpy(y, alpha, x);
    }
    int64_t n = fg_numel(y);
    if (fg_is_contiguous(y) && fg_is_contiguous(x) && y->dtype != FG_BF16) {
        if (y->dtype == FG_F64) {
            double *py = fg_data(y);
            const double *px = fg_data(x);
            for (int64_t k = 0; k < n; k++) py[k] += alpha * px[k];
        } else {
            float *py = fg_data(y), a = (float)alpha;
            const float *px = fg_data(x);
            for (int64_t k = 0; k < n; k++) py[k] += a * px[k];
        }
        return FG_OK;
    }
    row_ctx c = {y->storage->data, x->storage->data, alpha};
    for_each_row(y, x, y->dtype == FG_F64 ? axpy_row_d : y->dtype == FG_BF16 ? axpy_row_h : axpy_row_f, &c);
    return FG_OK;
}
