/* cross_entropy.h — the CPU's kernels of fg_linear_cross_entropy (ops/cross_entropy.c: a CPU-only
 * op, outside the kernel table, which calls them directly); defined in ops/cpu/cross_entropy.c.
 * Private to ops/.
 */
#ifndef FG_CPU_CROSS_ENTROPY_H
#define FG_CPU_CROSS_ENTROPY_H

#include <stdint.h>

#include "tensor/tensor.h" /* fg_dtype, fg_status */

#ifdef __cplusplus
extern "C" {
#endif

/* The forward, in chunks of rows (the math and the chunking: ops/cross_entropy.c). x (R, C) and
 * w (V, C) contiguous, targets (R) (-1: ignored), count the rows not ignored, cap the logit softcap
 * (0: none), chunk the rows per chunk (0: the default); writes loss (1) and, when not NULL, the
 * gradients for dloss = 1: dx1 (R, C) and dw1 (V, C) (written, not added to). */
fg_status fg__cpu_linear_cross_entropy_forward(fg_dtype dt, void *loss, const void *x, const void *w,
                                               const int32_t *targets, int64_t R, int64_t C, int64_t V, int64_t count,
                                               double cap, int64_t chunk, void *dx1, void *dw1);
/* The backward: y (n) += a · x (n), in pieces on the thread pool (float32 with (float)a). */
void fg__cpu_lce_axpy(fg_dtype dt, void *y, double a, const void *x, int64_t n);

#ifdef __cplusplus
}
#endif
#endif /* FG_CPU_CROSS_ENTROPY_H */
