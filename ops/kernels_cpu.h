/* kernels_cpu.h — the CPU's kernels, defined beside their op's shell in ops/<family>.c and
 * gathered into the CPU table by ops/kernels.c. Contracts: ops/kernels.h. Only ops/ includes this. */
#ifndef FG_KERNELS_CPU_H
#define FG_KERNELS_CPU_H

#include "ops/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ops/layernorm.c */
fg_status fg_cpu_layernorm_forward(fg_dtype dt, void *out, void *mean, void *rstd, const void *x, const void *w,
                                   const void *b, int64_t R, int64_t C, double eps);
fg_status fg_cpu_layernorm_backward(fg_dtype dt, void *dx, void *dw, void *db, const void *dout, const void *x,
                                    const void *mean, const void *rstd, const void *w, int64_t R, int64_t C);

#ifdef __cplusplus
}
#endif
#endif /* FG_KERNELS_CPU_H */
