/* matmul.h — the CPU GEMM's kernel choice (ops/cpu/matmul.c), which ops/matmul.c's
 * fg_matmul_set_kernel and fg_matmul_auto_kernel (ops/ops.h) answer with. Private to ops/.
 */
#ifndef FG_CPU_MATMUL_H
#define FG_CPU_MATMUL_H

#include <stdint.h>

#include "ops/ops.h" /* fg_matmul_kernel */

#ifdef __cplusplus
extern "C" {
#endif

/* fg_matmul_set_kernel and fg_matmul_auto_kernel (ops/ops.h: the contracts). */
fg_matmul_kernel fg__matmul_set_kernel(fg_matmul_kernel k);
fg_matmul_kernel fg__matmul_auto_kernel(int64_t M, int64_t N, int64_t K, int ta);

#ifdef __cplusplus
}
#endif
#endif /* FG_CPU_MATMUL_H */
