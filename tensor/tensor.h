/* tensor.h — n-dimensional strided tensors over reference-counted storage.
 *
 * Shapes are outermost-first (like PyTorch and llm.c): a (B, T, C) tensor has shape {B, T, C} and,
 * when contiguous, strides {T*C, C, 1}. Strides and offset count elements, not bytes.
 *
 * Ownership, in three rules:
 *  1. Every function that returns an fg_tensor* returns a NEW reference that the caller owns and
 *     must drop with fg_release() (or hand to something that takes ownership, which says so).
 *     NULL means failure, with the reason in fg_last_error().
 *  2. Tensor arguments are borrowed: a function that needs to keep one (a view, an autograd node)
 *     takes its own reference with fg_retain().
 *  3. Storage is shared and reference-counted: a view (reshape, permute, slice, alias) is a new
 *     fg_tensor over the same storage, so writing through a view writes the original. The storage
 *     is freed when its last tensor is released. fg_contiguous() of a non-contiguous tensor and
 *     fg_clone() copy.
 *
 * The autograd fields (requires_grad, grad, grad_fn) belong to autograd/; tensor/ only releases
 * grad_fn, through the hook autograd/ installs, when the tensor dies.
 */
#ifndef FG_TENSOR_H
#define FG_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/alloc.h"
#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_MAX_DIMS 6

/* FG_BF16 is bfloat16, stored as its 16 bits (tensor/bf16.h): a storage and transfer dtype. Tensors
 * of it are created, filled, copied and converted (fg_to, fg_copy_into, fg_get, fg_set round to
 * nearest even) and read and written by npy and safetensors; the ops refuse it (FG_ERR_DTYPE),
 * except attention on cuda (docs/gpu.md, "bfloat16 tensors"). */
typedef enum { FG_F32 = 0, FG_F64 = 1, FG_BF16 = 2, FG_DTYPE_COUNT } fg_dtype;

const char *fg_dtype_name(fg_dtype t);
size_t fg_dtype_size(fg_dtype t);

typedef struct fg_storage {
    void *data; /* device memory of `device`; CPU memory is plain host memory */
    size_t nbytes;
    fg_device device;
    int refcount;
    int borrowed; /* 1: data belongs to someone else and is not freed (fg_from_blob) */
} fg_storage;

struct fg_node; /* autograd/ */

typedef struct fg_tensor {
    int ndim;
    int64_t shape[FG_MAX_DIMS];
    int64_t strides[FG_MAX_DIMS]; /* in elements */
    int64_t offset;               /* in elements, into storage */
    fg_dtype dtype;
    fg_device device;
    fg_storage *storage;
    int refcount;
    /* autograd (see autograd/autograd.h) */
    int requires_grad;       /* a leaf whose gradient is wanted, or an op output that needs one */
    struct fg_tensor *grad;  /* leaves only: accumulated gradient, same shape, owned */
    struct fg_node *grad_fn; /* the node that produced this tensor, owned reference, or NULL */
    const char *name;        /* optional label for messages (static string or NULL) */
} fg_tensor;

/* ---- creation (each returns a new reference, contiguous, or NULL on error) ---- */
fg_tensor *fg_empty(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape);
fg_tensor *fg_zeros(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape);
fg_tensor *fg_ones(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape);
fg_tensor *fg_full(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape, double value);
/* Copies `data` (host memory, `dt` elements, C order) into a new tensor on `dev`. */
fg_tensor *fg_from_buffer(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape, const void *data);
/* Wraps host memory without copying; the caller keeps `data` alive longer than the tensor. */
fg_tensor *fg_from_blob(fg_dtype dt, int ndim, const int64_t *shape, void *data);
/* Uniform in (lo, hi] / normal(mean, std) from Philox stream (seed, stream): element k (C order)
 * uses the k-th number of the stream (normals use numbers 2k and 2k+1), so the values do not depend
 * on threads or device. */
fg_tensor *fg_rand_uniform(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape, double lo, double hi,
                           uint64_t seed, uint64_t stream);
fg_tensor *fg_rand_normal(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape, double mean, double std,
                          uint64_t seed, uint64_t stream);
/* Elements [k0, k1) of fg_rand_normal's float64 values for (mean, std, seed, stream) into out[0 ..
 * k1 - k0): element k is mean + std · (Box-Muller's first normal of numbers 2k and 2k+1 of the
 * stream). A pure function, so pieces filled on any threads give the tensor's exact values. */
void fg_rand_normal_range(double *out, int64_t k0, int64_t k1, double mean, double std, uint64_t seed, uint64_t stream);
fg_tensor *fg_zeros_like(const fg_tensor *t);

/* ---- references ---- */
fg_tensor *fg_retain(fg_tensor *t); /* returns t */
void fg_release(fg_tensor *t);      /* NULL is fine */

/* ---- inspection ---- */
int64_t fg_numel(const fg_tensor *t);
size_t fg_nbytes(const fg_tensor *t); /* numel * dtype size */
int fg_is_contiguous(const fg_tensor *t);
int fg_same_shape(const fg_tensor *a, const fg_tensor *b);
/* Pointer to element 0 of the view (storage data + offset). Device memory for non-CPU tensors. */
void *fg_data(const fg_tensor *t);
/* Writes "(2, 3, 4)" into buf; returns buf. */
const char *fg_shape_str(const fg_tensor *t, char *buf, size_t n);
/* The same for a shape given as ndim sizes (a file's array before it is a tensor): "(96, 32)". */
const char *fg_dims_str(char *buf, size_t n, int ndim, const int64_t *shape);
/* Element at a flat C-order index of the view, as double. Any device (a device element is copied
 * one at a time: for tests and messages, not loops). NaN with FG_ERR_DEVICE if the device is gone. */
double fg_get(const fg_tensor *t, int64_t flat_index);
fg_status fg_set(fg_tensor *t, int64_t flat_index, double v);

/* ---- views (no copy; new tensor over the same storage; no autograd — see ops/ for that) ---- */
/* Same data, new shape. Needs a contiguous tensor; -1 in one place infers that size. */
fg_tensor *fg_view_reshape(fg_tensor *t, int ndim, const int64_t *shape);
/* Dimensions reordered: result dim k is t's dim perm[k]. */
fg_tensor *fg_view_permute(fg_tensor *t, const int *perm);
fg_tensor *fg_view_transpose(fg_tensor *t, int d0, int d1);
/* Elements [start, end) along `axis`. */
fg_tensor *fg_view_slice(fg_tensor *t, int axis, int64_t start, int64_t end);
/* A second tensor object over the same elements (same shape and strides), with no autograd state. */
fg_tensor *fg_alias(fg_tensor *t);

/* ---- copies ---- */
/* t itself (retained) if already contiguous, else a contiguous copy. */
fg_tensor *fg_contiguous(fg_tensor *t);
/* Always a fresh contiguous copy. */
fg_tensor *fg_clone(const fg_tensor *t);
/* Copy src's elements into dst (same shape; dtypes may differ; CPU, or both on one device). */
fg_status fg_copy_into(fg_tensor *dst, const fg_tensor *src);
/* dst on another device or dtype: a new contiguous tensor. */
fg_tensor *fg_to(const fg_tensor *t, fg_device dev, fg_dtype dt);
/* Copy the elements, in C order, into host memory of t's dtype (any device). */
fg_status fg_to_host(const fg_tensor *t, void *dst);

/* ---- in-place utilities (no autograd) ---- */
fg_status fg_fill(fg_tensor *t, double value);
/* y += alpha * x, same shape and dtype (bfloat16: computed in float32, rounded once per element). */
fg_status fg_axpy(fg_tensor *y, double alpha, const fg_tensor *x);

/* ---- device backends ----
 * A non-CPU device registers these for its tensors (cuda/ does for FG_CUDA). Each gets tensors on
 * that device; `copy` handles any strides and a dtype change. */
typedef struct {
    fg_status (*fill)(fg_tensor *t, double value);
    fg_status (*axpy)(fg_tensor *y, double alpha, const fg_tensor *x);
    fg_status (*copy)(fg_tensor *dst, const fg_tensor *src);
} fg_tensor_backend;
void fg_register_tensor_backend(fg_device d, const fg_tensor_backend *be);

/* ---- hooks for autograd/ (do not call from elsewhere) ---- */
void fg_set_node_release_hook(void (*hook)(struct fg_node *));

#ifdef __cplusplus
}
#endif
#endif /* FG_TENSOR_H */
