/* kernel.h — what the CPU kernels of ops/cpu/ share with each other and with the op shells: dtype
 * dispatch, type-generic math, and the strided (broadcasting) row iterator. No tensors, no autograd:
 * only raw pointers, sizes and strides. Private to ops/ (the shells get it through
 * ops/ops_internal.h); the iterator is defined in ops/cpu/iter.c.
 *
 * The iterator is the "general strided path" of every elementwise op. It walks an n-d index space
 * one ROW at a time (the innermost dim after merging), so a kernel's inner loop is a plain strided
 * loop over it.n elements, with no call per element:
 *
 *     fg_iter it;
 *     fg_iter_init(&it, ndim, shape, 2, strides);   // strides[k][d]: operand k, dim d (0 = broadcast)
 *     while (fg_iter_next(&it))
 *         for (int64_t i = 0; i < it.n; i++)
 *             out[it.off[0] + i * it.inner[0]] = f(in[it.off[1] + i * it.inner[1]]);
 *
 * Dims of size 1 are dropped and dims that are contiguous with each other for every operand are
 * merged, so a contiguous tensor is one row and (B, T, C) + (C) is B*T rows of C.
 */
#ifndef FG_CPU_KERNEL_H
#define FG_CPU_KERNEL_H

#include <math.h>
#include <stdint.h>

#include "tensor/tensor.h" /* fg_dtype, fg_status, FG_MAX_DIMS */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dtype dispatch: kernels come in pairs name_f32 / name_f64 (void functions) ---- */
#define FG_DISPATCH(dt, fn, ...) ((dt) == FG_F32 ? fn##_f32(__VA_ARGS__) : fn##_f64(__VA_ARGS__))

/* Type-generic exp for kernels written once for float and double (expf for float). */
#define FG_EXP(x) _Generic((x), float : expf, default : exp)(x)

/* ---- the strided row iterator (see the top of this file) ---- */
#define FG_ITER_MAX_OPS 4
typedef struct {
    int nops, ndim; /* after merging; ndim >= 1 */
    int64_t shape[FG_MAX_DIMS];
    int64_t strides[FG_ITER_MAX_OPS][FG_MAX_DIMS];
    int64_t n;                      /* row length = shape[ndim-1] */
    int64_t inner[FG_ITER_MAX_OPS]; /* each operand's stride along the row */
    int64_t off[FG_ITER_MAX_OPS];   /* each operand's offset of the current row */
    int64_t idx[FG_MAX_DIMS];
    int64_t rows_left;
    int started;
} fg_iter;

/* strides[k] are operand k's strides (elements) for the common `shape`; 0 means broadcast. */
void fg_iter_init(fg_iter *it, int ndim, const int64_t *shape, int nops, int64_t (*strides)[FG_MAX_DIMS]);
/* Advance to the next row (the first on the first call); 0 when there are no more. */
int fg_iter_next(fg_iter *it);

/* Contiguous (C-order) strides of a shape. */
void fg_contig_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Strides that read a tensor of shape (t_ndim, t_shape) with strides t_strides as if it had the
 * broadcast shape (ndim, shape): dims aligned at the right; missing or stretched dims get 0. */
void fg_broadcast_strides(int t_ndim, const int64_t *t_shape, const int64_t *t_strides, int ndim, const int64_t *shape,
                          int64_t *out);

#ifdef __cplusplus
}
#endif
#endif /* FG_CPU_KERNEL_H */
