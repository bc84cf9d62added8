/* cross_entropy.h — the CPU's kernels that fg_linear_cross_entropy (ops/cross_entropy.c, a CPU-only
 * op outside the kernel table) calls directly; defined in ops/cpu/cross_entropy.c. Private to ops/.
 */
#ifndef FG_CPU_CROSS_ENTROPY_H
#define FG_CPU_CROSS_ENTROPY_H

#include <stdint.h>

#include "tensor/tensor.h" /* fg_dtype */

#ifdef __cplusplus
extern "C" {
#endif

/* The forward rows of fg_cpu_cross_entropy_forward: x (R, V) logits, targets (R) (-1: ignored);
 * writes lse (R) (0 for ignored rows) and *total = sum over the counted rows of lse_r - x_r,t_r,
 * in row order, in double. */
void fg__cpu_cross_entropy_rows(fg_dtype dt, double *total, void *lse, const void *x, const int32_t *targets, int64_t R,
                                int64_t V);
/* float32, in place: x (R, V) becomes g · (softmax(x) - onehot) in the rows whose target is not -1
 * (the bits of the backward into a zeroed dx); ignored rows are left as they were. */
void fg__cpu_cross_entropy_bwd_inplace_f32(float *x, const float *lse, const int32_t *targets, int64_t R, int64_t V,
                                           double g);
/* y (n) += a · x (n), in pieces on the thread pool (float32 with (float)a) */
void fg__cpu_lce_axpy(fg_dtype dt, void *y, double a, const void *x, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* FG_CPU_CROSS_ENTROPY_H */
