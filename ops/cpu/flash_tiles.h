/* flash_tiles.h — the tile operations of the CPU flash attention kernels (ops/cpu/attention_flash_body.h).
 *
 * One forward driver and one backward driver walk the tiles (ops/cpu/attention_flash_body.h); what they do
 * to a tile goes through a table of operations, fg_flash_ops_f32 or fg_flash_ops_f64, of which
 * there are two instances per dtype:
 *
 *   portable   each tile product is one BLAS call (BLAS kept to one thread while the pool runs),
 *              exp is libm's, and the forward's score tile is S (nq × nk, row-major) with the
 *              online softmax row by row (fg_attn_online_update_*, ops/attention.h): where the CPU
 *              has no AVX2+FMA, or with FG_ATTN_GEMM=blas set, for comparing.
 *   x86        register-blocked tile products (ops/cpu/smallgemm.h) and the vectorized exp
 *              (ops/cpu/vexp.h, ops/cpu/flash_exp64.h), chosen at run time (fg_simd_active;
 *              AVX-512 or AVX2 for float32, AVX2 for float64; the intrinsics are in
 *              ops/cpu/flash_x86.c), with plain C forms of the very same bits (what
 *              fg_simd_set(FG_SIMD_SCALAR) runs). The forward's score tile is Sᵀ (nk × nq):
 *              every query row in its own vector lane, so the online softmax runs down the columns
 *              with no horizontal max or sum, and each row's sum is taken key by key in order
 *              whatever the lane count. The tile products take B row-major only, so the drivers
 *              pack Qiᵀ (once per item) and Kjᵀ, Vjᵀ (once per key block).
 *
 * Shapes: a score tile covers nq query rows and nk keys; "row-major tile" means element (r, j) at
 * S[r·ld + j]. Every operation is elementwise or sums in index order, so the results do not depend
 * on the SIMD level or on how work is split (tests/test_simd.c).
 */
#ifndef FG_FLASH_TILES_H
#define FG_FLASH_TILES_H

#include <stdint.h>

#include "ops/cpu/simd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The table, for T = float (f32) and double (f64):
 *   packs      1: gemm's B must be row-major (tb = 0): the drivers pack Qᵀ, Kᵀ, Vᵀ, and the forward's
 *              score tile is Sᵀ (nk × nq, row stride ld); 0: B may be transposed, the tile is S.
 *   pool_flags for fg_pool_run (FG_POOL_BLAS_SERIAL when the products are BLAS calls).
 *   gemm       C (m × n, row stride ldc) = alpha · op(A) op(B), op(X) = X (t = 0) or Xᵀ (t = 1), row
 *              major like cblas_?gemm; acc = 1 adds it to C, and with rowscale, C[r, :] =
 *              rowscale[r] · C[r, :] + alpha · (op(A) op(B))[r, :].
 *   softmax    the online-softmax step on the forward's score tile (S, or Sᵀ with packs) for query
 *              rows r < nq with running max m[r] and sum l[r]: m' = max(m, max_j s_j), s_j <-
 *              exp(s_j − m'), l' = alpha_r·l + Σ_j s_j (in key order), alpha[r] = the factor the
 *              row's output accumulator is rescaled by (ops/attention.h, fg_attn_online_update).
 *   exp_rows   P = exp((S − L_r) − lo_r) on the rows of a row-major tile; 0 in rows with L = −inf
 *              (no key seen); lo may be NULL (0).
 *   ds_rows    dS = P ∘ (dS − D_r) on the rows of row-major tiles (dS holds dP on entry).
 *   row_dots   D[r] = Σ_c a[r, c]·b[r, c] for rows r < rows of d contiguous columns (a and b row-major,
 *              row strides lda and ldb), summed in double in column order and rounded once to T.
 *   transpose  dst (cols × rows, row stride ldd) = srcᵀ (src rows × cols, row stride lds); moves
 *              only. NULL in the portable tables (never needed without packs). */
#define FG_FLASH_OPS_TABLE(T)                                                                                          \
    struct {                                                                                                           \
        int packs;                                                                                                     \
        unsigned pool_flags;                                                                                           \
        void (*gemm)(int ta, int tb, int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t lda, const T *B,    \
                     int64_t ldb, T *C, int64_t ldc, const T *rowscale, int acc);                                      \
        void (*softmax)(T * S, int64_t ld, int64_t nq, int64_t nk, T *m, T *l, T *alpha);                              \
        void (*exp_rows)(T * S, int64_t ld, int64_t nq, int64_t nk, const T *L, const T *lo);                          \
        void (*ds_rows)(T * dS, const T *P, int64_t ld, int64_t nq, int64_t nk, const T *D);                           \
        void (*row_dots)(T * D, const T *a, int64_t lda, const T *b, int64_t ldb, int64_t rows, int64_t d);            \
        void (*transpose)(T * dst, int64_t ldd, const T *src, int64_t lds, int64_t rows, int64_t cols);                \
    }
typedef FG_FLASH_OPS_TABLE(float) fg_flash_ops_f32;
typedef FG_FLASH_OPS_TABLE(double) fg_flash_ops_f64;

extern const fg_flash_ops_f64 fg_flash_portable_f64;
extern const fg_flash_ops_f32 fg_flash_portable_f32;
extern const fg_flash_ops_f32 fg_flash_x86_f32;
extern const fg_flash_ops_f64 fg_flash_x86_f64;

/* ---- internal to ops/cpu/flash_tiles_body.h and ops/cpu/flash_x86.c: the x86 tables' pieces ----
 * The plain C forms (the bit-exact reference; the vector forms finish their ragged edges with them):
 * the transpose and the row dots. */
void fg_flash_transpose_scalar_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols);
void fg_flash_row_dots_scalar_f32(float *D, const float *a, int64_t lda, const float *b, int64_t ldb, int64_t rows,
                                  int64_t d);
void fg_flash_transpose_scalar_f64(double *dst, int64_t ldd, const double *src, int64_t lds, int64_t rows,
                                   int64_t cols);
#if FG_SIMD_X86
/* The vector forms, each compiled for its instruction set (call only at that fg_simd_active level).
 * AVX-512, float32 only (float64 runs its AVX2 forms there); the transpose in 16 × 16 blocks, the
 * edges through fg_flash_transpose_scalar_f32; the row dots finish their last rows with
 * fg_flash_row_dots_scalar_f32. */
void fg_flash_softmax_cols_avx512(float *ST, int64_t ld, int64_t nk, int64_t nq, float *m, float *l, float *alpha);
void fg_flash_exp_rows_avx512(float *S, int64_t ld, int64_t nq, int64_t nk, const float *L, const float *lo);
void fg_flash_ds_rows_avx512(float *dS, const float *P, int64_t ld, int64_t nq, int64_t nk, const float *D);
void fg_flash_row_dots_avx512(float *D, const float *a, int64_t lda, const float *b, int64_t ldb, int64_t rows,
                              int64_t d);
void fg_flash_transpose_avx512(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols);
/* AVX2+FMA, both dtypes (the softmax, exp, dS and row-dot forms one template); the transposes in 8 × 8
 * (float32) and 4 × 4 (float64) blocks, the edges through the plain C form. */
void fg_flash_softmax_cols_avx2_f32(float *ST, int64_t ld, int64_t nk, int64_t nq, float *m, float *l, float *alpha);
void fg_flash_softmax_cols_avx2_f64(double *ST, int64_t ld, int64_t nk, int64_t nq, double *m, double *l,
                                    double *alpha);
void fg_flash_exp_rows_avx2_f32(float *S, int64_t ld, int64_t nq, int64_t nk, const float *L, const float *lo);
void fg_flash_exp_rows_avx2_f64(double *S, int64_t ld, int64_t nq, int64_t nk, const double *L, const double *lo);
void fg_flash_ds_rows_avx2_f32(float *dS, const float *P, int64_t ld, int64_t nq, int64_t nk, const float *D);
void fg_flash_ds_rows_avx2_f64(double *dS, const double *P, int64_t ld, int64_t nq, int64_t nk, const double *D);
void fg_flash_row_dots_avx2_f32(float *D, const float *a, int64_t lda, const float *b, int64_t ldb, int64_t rows,
                                int64_t d);
void fg_flash_row_dots_avx2_f64(double *D, const double *a, int64_t lda, const double *b, int64_t ldb, int64_t rows,
                                int64_t d);
void fg_flash_transpose_avx2_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols);
void fg_flash_transpose_avx2_f64(double *dst, int64_t ldd, const double *src, int64_t lds, int64_t rows,
                                 int64_t cols);
#endif

#ifdef __cplusplus
}
#endif
#endif /* FG_FLASH_TILES_H */
