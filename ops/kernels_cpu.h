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

/* ops/attention.c: naive or flash (ops/attention_naive.c, ops/attention_flash.c) by impl */
fg_status fg_cpu_attention_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux, const void *q,
                                   const void *k, const void *v, const fg_attn_problem *pr);
fg_status fg_cpu_attention_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv, const void *dout,
                                    const void *q, const void *k, const void *v, const void *o, const void *lse,
                                    const void *aux, const fg_attn_problem *pr);

#ifdef __cplusplus
}
#endif
#endif /* FG_KERNELS_CPU_H */
