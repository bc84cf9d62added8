/* embedding.c — the CPU's embedding kernels (ops/kernels.h's FG_KERNELS_EMBEDDING): row copies in
 * the forward, a scatter-add in position order in the backward. The op's shell is in
 * ops/embedding.c, the GPU's kernels in cuda/embedding.cu. */
#include <string.h>

#include "ops/cpu/kernel.h"
#include "ops/cpu/vmath.h"
#include "ops/kernels_cpu.h"

/* out[r, :] = weight[idx[r], :]; weight rows are ws elements apart */
#define EMBEDDING_FWD_BODY(T)                                                                                          \
    for (int64_t r = 0; r < n; r++) memcpy(out + r * C, weight + (int64_t)idx[r] * ws, (size_t)C * sizeof(T));

/* forward: out[r, :] = weight[idx[r], :]  ->  dweight[idx[r], :] += dout[r, :] */
#define EMBEDDING_BWD_BODY(T, ROW_ADD)                                                                                 \
    for (int64_t r = 0; r < n; r++) {                                                                                  \
        T *dw = dweight + (int64_t)idx[r] * C;                                                                         \
        const T *d = dout + r * C;                                                                                     \
        ROW_ADD(dw, d, C);                                                                                             \
    }

/* float32 adds each row with the vector kernel (the same bits: one add per element) */
#define EMBEDDING_ROW_ADD_f32(dw, d, C) fg_vaxpy_f32((dw), 1.0f, (d), (C))
#define EMBEDDING_ROW_ADD_f64(dw, d, C)                                                                                \
    for (int64_t c = 0; c < (C); c++) (dw)[c] += (d)[c]

static void embedding_fwd_f32(float *out, const float *weight, const int32_t *idx, int64_t n, int64_t C, int64_t ws) {
    EMBEDDING_FWD_BODY(float);
}
static void embedding_bwd_f32(float *dweight, const float *dout, const int32_t *idx, int64_t n, int64_t C) {
    EMBEDDING_BWD_BODY(float, EMBEDDING_ROW_ADD_f32);
}
static void embedding_fwd_f64(double *out, const double *weight, const int32_t *idx, int64_t n, int64_t C, int64_t ws) {
    EMBEDDING_FWD_BODY(double);
}
static void embedding_bwd_f64(double *dweight, const double *dout, const int32_t *idx, int64_t n, int64_t C) {
    EMBEDDING_BWD_BODY(double, EMBEDDING_ROW_ADD_f64);
}

/* ---- the CPU kernels (ops/kernels.h) ---- */

fg_status fg_cpu_embedding_forward(fg_dtype dt, void *out, const void *weight, int64_t ws, const int32_t *idx,
                                   int64_t n, int64_t V, int64_t C) {
    (void)V;
    FG_DISPATCH(dt, embedding_fwd, out, weight, idx, n, C, ws);
    return FG_OK;
}

fg_status fg_cpu_embedding_backward(fg_dtype dt, void *dweight, const void *dout, const int32_t *idx, int64_t n,
                                    int64_t V, int64_t C) {
    (void)V;
    FG_DISPATCH(dt, embedding_bwd, dweight, dout, idx, n, C);
    return FG_OK;
}
