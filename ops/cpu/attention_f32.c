/* attention_f32.c — the CPU attention kernels in float (float32): one translation unit
 * over the template bodies (see ops/cpu/attention.c), and below them every public f32 name of
 * ops/attention_kernels.h and ops/cpu/flash_tiles.h, each a thin definition over its body's
 * function. ops/cpu/attention_f64.c is the same for the other dtype.
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/cpu/attention_cpu.h"
#include "ops/cpu/flash_exp64.h"
#include "ops/cpu/flash_tiles.h"
#include "ops/cpu/smallgemm.h"
#include "ops/cpu/threadpool.h"
#include "ops/cpu/vexp.h"
#include "ops/cpu/vphilox.h"
#include "tensor/alloc.h"
#include "tensor/philox.h"

/* the bodies' parameters: the dtype, its libm and BLAS functions, its vector forms */
#define T float
#define DT FG_F32
#define GEMM cblas_sgemm
#define EXP expf
#define TANH tanhf
#define FABS fabsf
/* LIN: below it, c · tanh(s / c) rounds to s (u²/3 < 2^-25 for float32) */
#define LIN 0x1p-12f
#define VEXP fg_vexp_avx2
#define FG_VEC256_DOUBLE 0
#define GEMM_SMALL fg_sgemm_small
#define EXP_REF fg_expf_ref
#define X86_AVX512 1
#define SOFTMAX_COLS_AVX512 fg_flash_softmax_cols_avx512
#define EXP_ROWS_AVX512 fg_flash_exp_rows_avx512
#define DS_ROWS_AVX512 fg_flash_ds_rows_avx512
#define TRANSPOSE_AVX512 fg_flash_transpose_avx512
#define SOFTMAX_COLS_AVX2 fg_flash_softmax_cols_avx2_f32
#define EXP_ROWS_AVX2 fg_flash_exp_rows_avx2_f32
#define DS_ROWS_AVX2 fg_flash_ds_rows_avx2_f32
#define ROW_DOTS_AVX512 fg_flash_row_dots_avx512
#define ROW_DOTS_AVX2 fg_flash_row_dots_avx2_f32
#define TRANSPOSE_AVX2 fg_flash_transpose_avx2_f32
typedef fg_flash_ops_f32 flash_ops;

/* the tile operations the flash drivers use */
static const flash_ops *flash_ops_of_dtype(void) { return fg_attn_flash_ops_f32(); }

#include "ops/cpu/flash_tiles_body.h"
#include "ops/cpu/attention_variant_body.h"
#include "ops/cpu/attention_naive_body.h"
#include "ops/cpu/attention_flash_body.h"
#include "ops/cpu/flash_x86_body.h"

/* ---- ops/cpu/flash_tiles.h ---- */
const fg_flash_ops_f32 fg_flash_portable_f32 = FLASH_PORTABLE_TABLE;
const fg_flash_ops_f32 fg_flash_x86_f32 = FLASH_X86_TABLE;

float fg_attn_online_update_f32(float *m, float *l, float *s, int64_t n) { return online_update(m, l, s, n); }

void fg_flash_transpose_scalar_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols) {
    transpose_scalar(dst, ldd, src, lds, rows, cols);
}

void fg_flash_row_dots_scalar_f32(float *D, const float *a, int64_t lda, const float *b, int64_t ldb, int64_t rows,
                                  int64_t d) {
    flash_row_dots(D, a, lda, b, ldb, rows, d);
}

#if FG_SIMD_X86
FG_TARGET_AVX2 void fg_flash_softmax_cols_avx2_f32(float *ST, int64_t ld, int64_t nk, int64_t nq, float *m, float *l,
                                                   float *alpha) {
    softmax_cols_avx2(ST, ld, nk, nq, m, l, alpha);
}

FG_TARGET_AVX2 void fg_flash_exp_rows_avx2_f32(float *S, int64_t ld, int64_t nq, int64_t nk, const float *L,
                                               const float *lo) {
    exp_rows_avx2(S, ld, nq, nk, L, lo);
}

FG_TARGET_AVX2 void fg_flash_ds_rows_avx2_f32(float *dS, const float *P, int64_t ld, int64_t nq, int64_t nk,
                                              const float *D) {
    ds_rows_avx2(dS, P, ld, nq, nk, D);
}

FG_TARGET_AVX2 void fg_flash_row_dots_avx2_f32(float *D, const float *a, int64_t lda, const float *b, int64_t ldb,
                                               int64_t rows, int64_t d) {
    row_dots_avx2(D, a, lda, b, ldb, rows, d);
}
#endif

/* ---- ops/attention_kernels.h ---- */
void fg_attn_dropout_scale_f32(float *x, int64_t n, uint64_t seed, uint32_t threshold, float inv_keep, int64_t b,
                               int64_t h, int64_t i, int64_t j0) {
    dropout_scale(x, n, seed, threshold, inv_keep, b, h, i, j0);
}

/* ---- ops/cpu/attention_cpu.h: what the CPU table's entries run (unchecked: the entry checked) ---- */
fg_status fg_cpu_attention_naive_forward_f32(float *o, float *lse, float *p, const float *q, const float *k,
                                             const float *v, const fg_attn_problem *pr) {
    return naive_forward(o, lse, p, q, k, v, pr);
}

fg_status fg_cpu_attention_naive_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                              const float *k, const float *v, const float *p,
                                              const fg_attn_problem *pr) {
    return naive_backward(dq, dk, dv, dout, q, k, v, p, pr);
}

fg_status fg_cpu_attention_flash_forward_f32(float *o, float *lse, float *lse_lo, const float *q, const float *k,
                                             const float *v, const fg_attn_problem *pr) {
    return flash_forward_lo(o, lse, lse_lo, q, k, v, pr);
}

fg_status fg_cpu_attention_flash_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                              const float *k, const float *v, const float *o, const float *lse,
                                              const float *lse_lo, const fg_attn_problem *pr) {
    return flash_backward_lo(dq, dk, dv, dout, q, k, v, o, lse, lse_lo, pr);
}
