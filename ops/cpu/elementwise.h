/* elementwise.h — the CPU's strided copy, which fg_op_contiguous (ops/ops_common.c) calls directly
 * for CPU tensors; defined in ops/cpu/elementwise.c. Private to ops/.
 */
#ifndef FG_CPU_ELEMENTWISE_H
#define FG_CPU_ELEMENTWISE_H

#include <stdint.h>

#include "tensor/tensor.h" /* fg_dtype */

#ifdef __cplusplus
extern "C" {
#endif

/* dst (shape, nd dims), contiguous, = src read through its element strides src_strides (nd) */
void fg__cpu_copy_strided(fg_dtype dt, void *dst, const void *src, const int64_t *src_strides, int nd,
                          const int64_t *shape);

#ifdef __cplusplus
}
#endif
#endif /* FG_CPU_ELEMENTWISE_H */
