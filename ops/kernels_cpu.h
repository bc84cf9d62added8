/* kernels_cpu.h — the CPU's kernels, defined beside their op's shell in ops/<family>.c and
 * gathered into the CPU table by ops/kernels.c. Contracts: ops/kernels.h. Only ops/ includes this. */
#ifndef FG_KERNELS_CPU_H
#define FG_KERNELS_CPU_H

#include "ops/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ops/matmul.c */
fg_status fg_cpu_matmul_gemm(fg_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                             int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, double beta,
                             const void *bias, void *C, int64_t ldc, int64_t sC, int64_t batch);
fg_status fg_cpu_matmul_colsum(fg_dtype dt, void *db, const void *dout, int64_t R, int64_t N);

/* ops/elementwise.c */
fg_status fg_cpu_elementwise_forward(fg_binary_op op, fg_dtype dt, void *out, const void *a, const int64_t *sa,
                                     const void *b, const int64_t *sb, int nd, const int64_t *shape);
fg_status fg_cpu_elementwise_backward(fg_binary_rule rule, fg_dtype dt, void *g, int g_nd, const int64_t *g_shape,
                                      const void *dout, const void *p, const int64_t *sp, const void *q,
                                      const int64_t *sq, int nd, const int64_t *shape);
fg_status fg_cpu_elementwise_scalar(fg_binary_op op, fg_dtype dt, void *out, const void *a, const int64_t *sa, int nd,
                                    const int64_t *shape, double s);

/* ops/reduce.c */
fg_status fg_cpu_reduce_axis_forward(fg_dtype dt, void *out, const void *x, int64_t O, int64_t N, int64_t In,
                                     double scale);
fg_status fg_cpu_reduce_axis_backward(fg_dtype dt, void *dx, const void *dout, int64_t O, int64_t N, int64_t In,
                                      double scale);
fg_status fg_cpu_reduce_all_forward(fg_dtype dt, void *out, const void *x, int nd, const int64_t *shape,
                                    const int64_t *strides, double scale);
fg_status fg_cpu_reduce_all_backward(fg_dtype dt, void *dx, const void *dout, int64_t n, double scale);

/* ops/ops_common.c */
fg_status fg_cpu_add_into(fg_dtype dt, void *dst, const int64_t *dst_strides, const void *src,
                          const int64_t *src_strides, int nd, const int64_t *shape, double alpha);

/* ops/embedding.c */
fg_status fg_cpu_embedding_forward(fg_dtype dt, void *out, const void *weight, int64_t ws, const int32_t *idx,
                                   int64_t n, int64_t V, int64_t C);
fg_status fg_cpu_embedding_backward(fg_dtype dt, void *dweight, const void *dout, const int32_t *idx, int64_t n,
                                    int64_t V, int64_t C);

/* ops/layernorm.c */
fg_status fg_cpu_layernorm_forward(fg_dtype dt, void *out, void *mean, void *rstd, const void *x, const void *w,
                                   const void *b, int64_t R, int64_t C, double eps);
fg_status fg_cpu_layernorm_backward(fg_dtype dt, void *dx, void *dw, void *db, const void *dout, const void *x,
                                    const void *mean, const void *rstd, const void *w, int64_t R, int64_t C);

/* ops/gelu.c */
fg_status fg_cpu_gelu_forward(fg_dtype dt, void *out, const void *x, int64_t n);
fg_status fg_cpu_gelu_backward(fg_dtype dt, void *dx, const void *dout, const void *x, int64_t n);

/* ops/softmax.c */
fg_status fg_cpu_softmax_forward(fg_dtype dt, void *y, const void *x, int64_t R, int64_t C);
fg_status fg_cpu_softmax_backward(fg_dtype dt, void *dx, const void *dy, const void *y, int64_t R, int64_t C);

/* ops/cross_entropy.c */
fg_status fg_cpu_cross_entropy_forward(fg_dtype dt, void *loss, void *lse, const void *x, const int32_t *targets,
                                       int64_t R, int64_t V, int64_t count);
fg_status fg_cpu_cross_entropy_backward(fg_dtype dt, void *dx, const void *dloss, const void *x, const void *lse,
                                        const int32_t *targets, int64_t R, int64_t V, int64_t count);

/* ops/dropout.c */
fg_status fg_cpu_dropout_forward(fg_dtype dt, void *out, const void *x, int64_t n, uint64_t seed, uint64_t stream,
                                 double p);
fg_status fg_cpu_dropout_backward(fg_dtype dt, void *dx, const void *dout, int64_t n, uint64_t seed, uint64_t stream,
                                  double p);

/* ops/optim.c */
fg_status fg_cpu_adamw(fg_dtype dt, void *p, const void *g, void *m, void *v, int64_t n, int n_spans,
                       const fg_adamw_span *spans, double b1, double b2, double step_size, double bc2_sqrt, double eps);
fg_status fg_cpu_sum_squares(fg_dtype dt, const void *x, int64_t n, double *out);
int64_t fg_cpu_norm_block(int64_t n);
fg_status fg_cpu_sum_squares_blocks(fg_dtype dt, const void *x, int64_t n, int64_t b0, int64_t b1, double *part);
fg_status fg_cpu_scale(fg_dtype dt, void *x, int64_t n, double s);
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
