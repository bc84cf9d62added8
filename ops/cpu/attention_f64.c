/* attention_f64.c — the CPU attention kernels in double (float64): one translation unit
 * over the template bodies (see ops/cpu/attention.c), and below them every public f64 name of
 * ops/attention_kernels.h and ops/cpu/flash_tiles.h, each a thin definition over its body's
 * function. ops/cpu/attention_f32.c is the same for the other dtype.
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
#define T double
#define DT FG_F64
#define GEMM cblas_dgemm
#define EXP exp
#define TANH tanh
#define FABS fabs
/* LIN: below it, c · tanh(s / c) rounds to s (u²/3 < 2^-54 for float64) */
#define LIN 0x1p-27
#define VEXP fg_vexp64_avx2
#define FG_VEC256_DOUBLE 1
#define GEMM_SMALL fg_dgemm_small
#define EXP_REF fg_exp64_ref
#define X86_AVX512 0
#define SOFTMAX_COLS_AVX512 no_avx512_form
#define EXP_ROWS_AVX512 no_avx512_form
#define DS_ROWS_AVX512 no_avx512_form
#define TRANSPOSE_AVX512 no_avx512_form
#define SOFTMAX_COLS_AVX2 fg_flash_softmax_cols_avx2_f64
#define EXP_ROWS_AVX2 fg_flash_exp_rows_avx2_f64
#define DS_ROWS_AVX2 fg_flash_ds_rows_avx2_f64
#define ROW_DOTS_AVX512 no_avx512_form
#define ROW_DOTS_AVX2 fg_flash_row_dots_avx2_f64
#define TRANSPOSE_AVX2 fg_flash_transpose_avx2_f64
typedef fg_flash_ops_f64 flash_ops;

/* the tile operations the flash drivers use */
static const flash_ops *flash_ops_of_dtype(void) { return fg_attn_flash_ops_f64(); }

#include "ops/cpu/flash_tiles_body.h"
#include "ops/cpu/attention_variant_body.h"
#include "ops/cpu/attention_naive_body.h"
#include "ops/cpu/attention_flash_body.h"
#include "ops/cpu/flash_x86_body.h"

/* ---- ops/cpu/flash_tiles.h ---- */
const fg_flash_ops_f64 fg_flash_portable_f64 = FLASH_PORTABLE_TABLE;
const fg_flash_ops_f64 fg_flash_x86_f64 = FLASH_X86_TABLE;

double fg_attn_online_update_f64(double *m, double *l, double *s, int64_t n) { return online_update(m, l, s, n); }

void fg_flash_transpose_scalar_f64(double *dst, int64_t ldd, const double *src, int64_t lds, int64_t rows,
                                   int64_t cols) {
    transpose_scalar(dst, ldd, src, lds, rows, cols);
}

#if FG_SIMD_X86
FG_TARGET_AVX2 void fg_flash_softmax_cols_avx2_f64(double *ST, int64_t ld, int64_t nk, int64_t nq, double *m, double *l,
                                                   double *alpha) {
    softmax_cols_avx2(ST, ld, nk, nq, m, l, alpha);
}

FG_TARGET_AVX2 void fg_flash_exp_rows_avx2_f64(double *S, int64_t ld, int64_t nq, int64_t nk, const double *L,
                                               const double *lo) {
    exp_rows_avx2(S, ld, nq, nk, L, lo);
}

FG_TARGET_AVX2 void fg_flash_ds_rows_avx2_f64(double *dS, const double *P, int64_t ld, int64_t nq, int64_t nk,
                                              const double *D) {
    ds_rows_avx2(dS, P, ld, nq, nk, D);
}

FG_TARGET_AVX2 void fg_flash_row_dots_avx2_f64(double *D, const double *a, int64_t lda, const double *b, int64_t ldb,
                                               int64_t rows, int64_t d) {
    row_dots_avx2(D, a, lda, b, ldb, rows, d);
}
#endif

/* ---- ops/attention_kernels.h ---- */
void fg_attn_dropout_scale_f64(double *x, int64_t n, uint64_t seed, uint32_t threshold, double inv_keep, int64_t b,
                               int64_t h, int64_t i, int64_t j0) {
    dropout_scale(x, n, seed, threshold, inv_keep, b, h, i, j0);
}

/* ---- ops/cpu/attention_cpu.h: what the CPU table's entries run (unchecked: the entry checked) ---- */
fg_status fg_cpu_attention_naive_forward_f64(double *o, double *lse, double *p, const double *q, const double *k,
                                             const double *v, const fg_attn_problem *pr) {
    return naive_forward(o, lse, p, q, k, v, pr);
}

fg_status fg_cpu_attention_naive_backward_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                              const double *k, const double *v, const double *p,
                                              const fg_attn_problem *pr) {
    return naive_backward(dq, dk, dv, dout, q, k, v, p, pr);
}

fg_status fg_cpu_attention_flash_forward_f64(double *o, double *lse, double *lse_lo, const double *q, const double *k,
                                             const double *v, const fg_attn_problem *pr) {
    return flash_forward_lo(o, lse, lse_lo, q, k, v, pr);
}

fg_status fg_cpu_attention_flash_backward_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                              const double *k, const double *v, const double *o, const double *lse,
                                              const double *lse_lo, const fg_attn_problem *pr) {
    return flash_backward_lo(dq, dk, dv, dout, q, k, v, o, lse, lse_lo, pr);
}
