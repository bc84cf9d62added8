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

/* cuda/layernorm.cu */
fg_status fg_cu_layernorm_forward(fg_dtype dt, void *out, void *mean, void *rstd, const void *x, const void *w,
                                  const void *b, int64_t R, int64_t C, double eps);
fg_status fg_cu_layernorm_backward(fg_dtype dt, void *dx, void *dw, void *db, const void *dout, const void *x,
                                   const void *mean, const void *rstd, const void *w, int64_t R, int64_t C);

#ifdef __cplusplus
}
#endif
#endif /* FG_KERNELS_CUDA_H */
