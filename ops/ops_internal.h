/* ops_internal.h — what the op families' shells in ops/ share: argument checks with readable
 * messages, broadcasting, and small backward helpers; with ops/cpu/kernel.h (included here), what
 * the shells share with the CPU kernels: dtype dispatch, type-generic math and the strided row
 * iterator. Not part of the public API; only the files in ops/ include it.
 */
#ifndef FG_OPS_INTERNAL_H
#define FG_OPS_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "autograd/autograd.h"
#include "ops/cpu/kernel.h" /* FG_DISPATCH, FG_EXP, fg_iter, fg_contig_strides */
#include "ops/ops.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A buffer big enough for fg_shape_str of any tensor (FG_MAX_DIMS sizes of up to 20 digits). */
#define FG_SHAPE_BUF 160
/* fg_shape_str into a caller's buffer: `char b[FG_SHAPE_BUF]; FG_SHP(t, b)`. */
#define FG_SHP(t, buf) fg_shape_str((t), (buf), sizeof(buf))

/* ---- argument checks: FG_OK, or the error status with a message that names the op ---- */
/* t must be non-NULL and of a compute dtype (float32, float64). `what` names the argument ("a",
 * "weight", ...). A bfloat16 tensor is refused (FG_ERR_DTYPE) by fg_op_compute_dtype's line. */
fg_status fg_op_check(const char *op, const char *what, const fg_tensor *t);
/* FG_OK for float32 and float64, which every device's kernels compute in; FG_ERR_DTYPE otherwise,
 * one line naming op and what: bfloat16 is a storage dtype, so on the CPU it says that bf16
 * compute needs --device cuda (convert with fg_to for CPU math), and on a device that only
 * attention takes bf16 there. The one check the ops' shells (and ops/infer.c) run on a dtype. */
fg_status fg_op_compute_dtype(const char *op, const char *what, fg_dtype dt, fg_device dev);
/* As fg_op_check, and t has ref's dtype and device. */
fg_status fg_op_check_like(const char *op, const char *what, const fg_tensor *t, const char *ref_what,
                           const fg_tensor *ref);
/* Normalize a possibly negative axis of a rank-`ndim` tensor; -1 (with a message) if out of range. */
int fg_op_axis(const char *op, const fg_tensor *t, int axis);
/* A device's kernel table lacks what `op` needs (a NULL member): sets FG_ERR_DEVICE "op X: not
 * supported on <device>" and returns that status. */
fg_status fg_op_no_kernel(const char *op, const char *device);

/* NumPy broadcast of a's and b's shapes into (*ndim, shape); FG_ERR_SHAPE naming `op` if they clash. */
fg_status fg_broadcast_shape(const char *op, const fg_tensor *a, const fg_tensor *b, int *ndim, int64_t *shape);
/* The checks of a normalization over x's last dim (layernorm, rmsnorm), in this order: x (fg_op_check);
 * each non-NULL params[i], named names[i], like x (fg_op_check_like); x of rank >= 1; each param
 * of shape (C), C = x's last dim; eps finite and > 0 (eps_positive) or >= 0. Sets *R (the product
 * of x's other dims) and *C. FG_OK, or the error with one line naming op. */
fg_status fg_op_check_norm(const char *op, const fg_tensor *x, int n, const fg_tensor *const *params,
                           const char *const *names, double eps, int eps_positive, int64_t *R, int64_t *C);
/* ---- backward helpers ---- */
/* dst += alpha * src: same shape, dtype and device, any strides on either (dst must not overlap
 * itself), through the device's add_into kernel. */
fg_status fg_op_add_into(fg_tensor *dst, const fg_tensor *src, double alpha);
/* fg_contiguous with the row iterator's copy loop (memcpy per contiguous row): t retained when
 * already contiguous, else a new contiguous copy. */
fg_tensor *fg_op_contiguous(fg_tensor *t);
/* node->grad_out as a contiguous tensor (new reference; normally just retained). NULL on OOM. */
fg_tensor *fg_op_grad_out(fg_node *n);

/* Host scratch memory for a node's ctx (copied token ids, targets), from the caching allocator.
 * fg_op_ctx_free matches fg_node.ctx_free. */
void *fg_op_ctx_alloc(const char *op, size_t nbytes);
void fg_op_ctx_free(void *ctx);

#ifdef __cplusplus
}
#endif
#endif /* FG_OPS_INTERNAL_H */
