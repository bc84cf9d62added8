/* kernels_cuda.h — the CUDA kernel table's launchers, one block per op family, each defined in
 * cuda/<family>.cu beside its kernels. Contracts: ops/kernels.h (pointers are device memory, the
 * work is queued on flashgrad's one stream). cuda/kernels.cu gathers them into the table that
 * fg_cuda_init() registers. */
#ifndef FG_KERNELS_CUDA_H
#define FG_KERNELS_CUDA_H

#include "ops/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The FG_CUDA table (cuda/kernels.cu). */
extern const fg_kernels fg_cuda_kernels;

/* cuda/matmul.cu */
fg_status fg_cu_matmul_gemm(fg_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                            int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, double beta,
                            const void *bias, void *C, int64_t ldc, int64_t sC, int64_t batch);
fg_status fg_cu_matmul_colsum(fg_dtype dt, void *db, const void *dout, int64_t R, int64_t N);

/* cuda/elementwise.cu */
fg_status fg_cu_elementwise_forward(fg_binary_op op, fg_dtype dt, void *out, const void *a, const int64_t *sa,
                                    const void *b, const int64_t *sb, int nd, const int64_t *shape);
fg_status fg_cu_elementwise_backward(fg_binary_rule rule, fg_dtype dt, void *g, int g_nd, const int64_t *g_shape,
                                     const void *dout, const void *p, const int64_t *sp, const void *q,
                                     const int64_t *sq, int nd, const int64_t *shape);
fg_status fg_cu_elementwise_scalar(fg_binary_op op, fg_dtype dt, void *out, const void *a, const int64_t *sa, int nd,
                                   const int64_t *shape, double s);
fg_status fg_cu_add_into(fg_dtype dt, void *dst, const int64_t *dst_strides, const void *src,
                         const int64_t *src_strides, int nd, const int64_t *shape, double alpha);

/* cuda/reduce.cu */
fg_status fg_cu_reduce_axis_forward(fg_dtype dt, void *out, const void *x, int64_t O, int64_t N, int64_t In,
                                    double scale);
fg_status fg_cu_reduce_axis_backward(fg_dtype dt, void *dx, const void *dout, int64_t O, int64_t N, int64_t In,
                                     double scale);
fg_status fg_cu_reduce_all_forward(fg_dtype dt, void *out, const void *x, int nd, const int64_t *shape,
                                   const int64_t *strides, double scale);
fg_status fg_cu_reduce_all_backward(fg_dtype dt, void *dx, const void *dout, int64_t n, double scale);

/* cuda/embedding.cu */
fg_status fg_cu_embedding_forward(fg_dtype dt, void *out, const void *weight, int64_t ws, const int32_t *idx, int64_t n,
                                  int64_t V, int64_t C);
fg_status fg_cu_embedding_backward(fg_dtype dt, void *dweight, const void *dout, const int32_t *idx, int64_t n,
                                   int64_t V, int64_t C);

/* cuda/layernorm.cu */
fg_status fg_cu_layernorm_forward(fg_dtype dt, void *out, void *mean, void *rstd, const void *x, const void *w,
                                  const void *b, int64_t R, int64_t C, double eps);
fg_status fg_cu_layernorm_backward(fg_dtype dt, void *dx, void *dw, void *db, const void *dout, const void *x,
                                   const void *mean, const void *rstd, const void *w, int64_t R, int64_t C);

/* cuda/gelu.cu */
fg_status fg_cu_gelu_forward(fg_dtype dt, void *out, const void *x, int64_t n);
fg_status fg_cu_gelu_backward(fg_dtype dt, void *dx, const void *dout, const void *x, int64_t n);

/* cuda/softmax.cu */
fg_status fg_cu_softmax_forward(fg_dtype dt, void *y, const void *x, int64_t R, int64_t C);
fg_status fg_cu_softmax_backward(fg_dtype dt, void *dx, const void *dy, const void *y, int64_t R, int64_t C);

/* cuda/cross_entropy.cu */
fg_status fg_cu_cross_entropy_forward(fg_dtype dt, void *loss, void *lse, const void *x, const int32_t *targets,
                                      int64_t R, int64_t V, int64_t count);
fg_status fg_cu_cross_entropy_backward(fg_dtype dt, void *dx, const void *dloss, const void *x, const void *lse,
                                       const int32_t *targets, int64_t R, int64_t V, int64_t count);

/* cuda/dropout.cu */
fg_status fg_cu_dropout_forward(fg_dtype dt, void *out, const void *x, int64_t n, uint64_t seed, uint64_t stream,
                                double p);
fg_status fg_cu_dropout_backward(fg_dtype dt, void *dx, const void *dout, int64_t n, uint64_t seed, uint64_t stream,
                                 double p);

/* cuda/adamw.cu */
fg_status fg_cu_adamw(fg_dtype dt, void *p, const void *g, void *m, void *v, int64_t n, int n_spans,
                      const fg_adamw_span *spans, double b1, double b2, double step_size, double bc2_sqrt, double eps);
fg_status fg_cu_sum_squares(fg_dtype dt, const void *x, int64_t n, double *out);
fg_status fg_cu_scale(fg_dtype dt, void *x, int64_t n, double s);
/* cuda/attention.cu — the table's attention member (caps FG_ATTN_CAP_ALL). Same contract as the
 * CPU kernels of ops/attention.h, on device pointers. impl FLASH: the tiled kernels (forward writes
 * O and lse only; the backward recomputes P from lse); `aux` is lse_lo (B, H, Nq) or NULL, as for
 * fg_attn_flash_*_lo. impl NAIVE: the reference with materialized S and P through cuBLAS (`aux`
 * receives P when not NULL and is required by its backward). Both implement causal masking,
 * dropout and the built-in variants of pr->var — GQA (k, v, dk, dv are (B, H_kv, Nk, d)), sliding
 * windows, ALiBi (pr->var.alibi_slopes is a HOST array or NULL) and softcapping — with
 * ops/attention.h's semantics. User callbacks (score_mod, mask) are refused by fg_attention: they
 * run on the CPU only. The tile sizes of pr (block_q, block_k) are the CPU's and are ignored: the
 * GPU picks its own per dtype and head dim (see cuda/attention.cu). Head dims up to 256 are
 * supported; larger ones fail with FG_ERR_ARG. The backward is deterministic (no floating-point
 * atomics, also under GQA). */
fg_status fg_cu_attention_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux, const void *q,
                                  const void *k, const void *v, const fg_attn_problem *pr);
fg_status fg_cu_attention_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv, const void *dout,
                                   const void *q, const void *k, const void *v, const void *o, const void *lse,
                                   const void *aux, const fg_attn_problem *pr);

#ifdef __cplusplus
}
#endif
#endif /* FG_KERNELS_CUDA_H */
