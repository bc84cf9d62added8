/* flash_tiles.c — the tables of tile operations of CPU flash attention (ops/cpu/flash_tiles.h):
 * the portable one per dtype (BLAS tile products, libm's exp, the online softmax row by row), and
 * the float32 x86 one's plain C forms and run-time dispatch (its vector forms: ops/cpu/flash_x86.c).
 *
 * The portable operations are a template: the file includes itself twice, once per dtype.
 */
#ifndef FG_FLASH_TILES_TEMPLATE

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "ops/attention.h"
#include "ops/cpu/flash_exp64.h"
#include "ops/cpu/flash_tiles.h"
#include "ops/cpu/smallgemm.h"
#include "ops/cpu/threadpool.h"
#include "ops/cpu/vexp.h"

#define FG_FLASH_TILES_TEMPLATE 1

#define T float
#define SFX(name) name##_f32
#define GEMM cblas_sgemm
#define EXP expf
#include "ops/cpu/flash_tiles.c"
#undef T
#undef SFX
#undef GEMM
#undef EXP

#define T double
#define SFX(name) name##_f64
#define GEMM cblas_dgemm
#define EXP exp
#include "ops/cpu/flash_tiles.c"
#undef T
#undef SFX
#undef GEMM
#undef EXP

#undef FG_FLASH_TILES_TEMPLATE

/* =============================================================================================
 * the x86 table (float32): plain C forms and dispatch
 * ============================================================================================= */

/* ---- the online softmax down the columns of Sᵀ ----
 * ST is nk × nq (row j: key j0 + j; column r: query i0 + r), row stride ld. For every column r:
 *     m' = max(m_r, max_j ST[j][r]);  m̃ = m' (0 while m' = −inf, so that exp(−inf − m̃) = 0)
 *     ST[j][r] = exp(ST[j][r] − m̃);  alpha_r = exp(m_r − m̃);  l_r = alpha_r·l_r + Σ_j ST[j][r]
 * (the sum in key order j = 0, 1, ...), m_r = m'. The same step as fg_attn_online_update_f32, with
 * the vectorized exp; alpha is 0 rather than 1 while a row has seen no key (O and l are 0 then). */
void fg_flash_softmax_cols_scalar(float *ST, int64_t ld, int64_t nk, int64_t r0, int64_t r1, float *m, float *l,
                                  float *alpha) {
    for (int64_t r = r0; r < r1; r++) {
        float mx = m[r];
        for (int64_t j = 0; j < nk; j++) {
            const float s = ST[j * ld + r];
            mx = s > mx ? s : mx; /* a NaN score does not become the max (as vmaxps(s, mx)) */
        }
        const float ms = mx == -INFINITY ? 0.0f : mx;
        const float a = fg_expf_ref(m[r] - ms);
        float sum = 0;
        for (int64_t j = 0; j < nk; j++) {
            const float p = fg_expf_ref(ST[j * ld + r] - ms);
            ST[j * ld + r] = p;
            sum += p;
        }
        l[r] = a * l[r] + sum;
        m[r] = mx;
        alpha[r] = a;
    }
}

static void softmax_cols(float *ST, int64_t ld, int64_t nq, int64_t nk, float *m, float *l, float *alpha) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        fg_flash_softmax_cols_avx512(ST, ld, nk, nq, m, l, alpha);
        return;
    case FG_SIMD_AVX2:
        fg_flash_softmax_cols_avx2(ST, ld, nk, nq, m, l, alpha);
        return;
    default:
        break;
    }
#endif
    fg_flash_softmax_cols_scalar(ST, ld, nk, 0, nq, m, l, alpha);
}

/* P = exp((S − L_r) − lo_r) with the vectorized exp's scalar form */
static void exp_rows(float *S, int64_t ld, int64_t nq, int64_t nk, const float *L, const float *lo) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        fg_flash_exp_rows_avx512(S, ld, nq, nk, L, lo);
        return;
    case FG_SIMD_AVX2:
        fg_flash_exp_rows_avx2(S, ld, nq, nk, L, lo);
        return;
    default:
        break;
    }
#endif
    for (int64_t r = 0; r < nq; r++) {
        float *row = S + r * ld;
        const float Lr = L[r], lr = lo ? lo[r] : 0.0f;
        if (Lr == -INFINITY) {
            for (int64_t j = 0; j < nk; j++) row[j] = 0;
            continue;
        }
        for (int64_t j = 0; j < nk; j++) row[j] = fg_expf_ref((row[j] - Lr) - lr);
    }
}

/* dS = P ∘ (dP − D_r): element by element, so the vector forms give the portable form's bits */
static void ds_rows(float *dS, const float *P, int64_t ld, int64_t nq, int64_t nk, const float *D) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        fg_flash_ds_rows_avx512(dS, P, ld, nq, nk, D);
        return;
    case FG_SIMD_AVX2:
        fg_flash_ds_rows_avx2(dS, P, ld, nq, nk, D);
        return;
    default:
        break;
    }
#endif
    flash_ds_rows_f32(dS, P, ld, nq, nk, D);
}

/* in 8 × 8 blocks, so that both sides are read and written a cache line at a time */
void fg_flash_transpose_scalar(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols) {
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            const int64_t r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}

static void transpose(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols) {
#if FG_SIMD_X86
    if (fg_simd_active() == FG_SIMD_AVX512 && rows >= 16 && cols >= 16) {
        fg_flash_transpose_avx512(dst, ldd, src, lds, rows, cols);
        return;
    }
#endif
    fg_flash_transpose_scalar(dst, ldd, src, lds, rows, cols);
}

/* fg_sgemm_small with BLAS's transpose flags (B is always row-major: the table packs) */
static void gemm_small(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                       const float *B, int64_t ldb, float *C, int64_t ldc, const float *rowscale, int acc) {
    (void)tb;
    fg_sgemm_small(m, n, k, alpha, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, C, ldc, rowscale, acc);
}

const fg_flash_ops_f32 fg_flash_x86_f32 = {.packs = 1,
                                           .pool_flags = 0,
                                           .gemm = gemm_small,
                                           .softmax = softmax_cols,
                                           .exp_rows = exp_rows,
                                           .ds_rows = ds_rows,
                                           .transpose = transpose};

/* =============================================================================================
 * the x86 table (float64): the float32 one's structure, with fg_dgemm_small and fg_exp64 (four
 * lanes; AVX2+FMA, which AVX-512 CPUs run too)
 * ============================================================================================= */

/* the column softmax of fg_flash_softmax_cols_scalar, in double */
void fg_flash_softmax_cols64_scalar(double *ST, int64_t ld, int64_t nk, int64_t r0, int64_t r1, double *m, double *l,
                                    double *alpha) {
    for (int64_t r = r0; r < r1; r++) {
        double mx = m[r];
        for (int64_t j = 0; j < nk; j++) {
            const double s = ST[j * ld + r];
            mx = s > mx ? s : mx; /* a NaN score does not become the max (as vmaxpd(s, mx)) */
        }
        const double ms = mx == -INFINITY ? 0.0 : mx;
        const double a = fg_exp64_ref(m[r] - ms);
        double sum = 0;
        for (int64_t j = 0; j < nk; j++) {
            const double p = fg_exp64_ref(ST[j * ld + r] - ms);
            ST[j * ld + r] = p;
            sum += p;
        }
        l[r] = a * l[r] + sum;
        m[r] = mx;
        alpha[r] = a;
    }
}

static int x86_f64_vector(void) {
#if FG_SIMD_X86
    return fg_simd_active() >= FG_SIMD_AVX2;
#else
    return 0;
#endif
}

static void softmax_cols64(double *ST, int64_t ld, int64_t nq, int64_t nk, double *m, double *l, double *alpha) {
#if FG_SIMD_X86
    if (x86_f64_vector()) {
        fg_flash_softmax_cols64_avx2(ST, ld, nk, nq, m, l, alpha);
        return;
    }
#endif
    fg_flash_softmax_cols64_scalar(ST, ld, nk, 0, nq, m, l, alpha);
}

static void exp_rows64(double *S, int64_t ld, int64_t nq, int64_t nk, const double *L, const double *lo) {
#if FG_SIMD_X86
    if (x86_f64_vector()) {
        fg_flash_exp_rows64_avx2(S, ld, nq, nk, L, lo);
        return;
    }
#endif
    for (int64_t r = 0; r < nq; r++) {
        double *row = S + r * ld;
        const double Lr = L[r], lr = lo ? lo[r] : 0.0;
        if (Lr == -INFINITY) {
            for (int64_t j = 0; j < nk; j++) row[j] = 0;
            continue;
        }
        for (int64_t j = 0; j < nk; j++) row[j] = fg_exp64_ref((row[j] - Lr) - lr);
    }
}

static void ds_rows64(double *dS, const double *P, int64_t ld, int64_t nq, int64_t nk, const double *D) {
#if FG_SIMD_X86
    if (x86_f64_vector()) {
        fg_flash_ds_rows64_avx2(dS, P, ld, nq, nk, D);
        return;
    }
#endif
    flash_ds_rows_f64(dS, P, ld, nq, nk, D);
}

/* in 8 × 8 blocks, as the float32 one */
void fg_flash_transpose64_scalar(double *dst, int64_t ldd, const double *src, int64_t lds, int64_t rows, int64_t cols) {
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            const int64_t r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}

static void transpose64(double *dst, int64_t ldd, const double *src, int64_t lds, int64_t rows, int64_t cols) {
#if FG_SIMD_X86
    if (x86_f64_vector() && rows >= 4 && cols >= 4) {
        fg_flash_transpose64_avx2(dst, ldd, src, lds, rows, cols);
        return;
    }
#endif
    fg_flash_transpose64_scalar(dst, ldd, src, lds, rows, cols);
}

static void gemm_small64(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, const double *A, int64_t lda,
                         const double *B, int64_t ldb, double *C, int64_t ldc, const double *rowscale, int acc) {
    (void)tb;
    fg_dgemm_small(m, n, k, alpha, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, C, ldc, rowscale, acc);
}

const fg_flash_ops_f64 fg_flash_x86_f64 = {.packs = 1,
                                           .pool_flags = 0,
                                           .gemm = gemm_small64,
                                           .softmax = softmax_cols64,
                                           .exp_rows = exp_rows64,
                                           .ds_rows = ds_rows64,
                                           .transpose = transpose64};

#else /* ---- the per-dtype template: the portable table ---- */

/* BLAS with the table's rowscale; a no-op on empty sizes (BLAS wants leading dimensions >= 1 even
 * then) */
static void SFX(flash_gemm)(int ta, int tb, int64_t m, int64_t n, int64_t kk, T alpha, const T *A, int64_t lda,
                            const T *Bm, int64_t ldb, T *C, int64_t ldc, const T *rowscale, int acc) {
    if (m == 0 || n == 0) return;
    if (acc && rowscale)
        for (int64_t r = 0; r < m; r++)
            if (rowscale[r] != 1)
                for (int64_t c = 0; c < n; c++) C[r * ldc + c] *= rowscale[r];
    const T beta = acc ? 1 : 0;
    if (kk == 0) {
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < n; c++) C[r * ldc + c] = beta == 0 ? 0 : beta * C[r * ldc + c];
        return;
    }
    GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)kk, alpha,
         A, (int)lda, Bm, (int)ldb, beta, C, (int)ldc);
}

T SFX(fg_attn_online_update)(T *m, T *l, T *s, int64_t n) {
    T m_old = *m, m_new = m_old;
    for (int64_t j = 0; j < n; j++)
        if (s[j] > m_new) m_new = s[j];
    if (m_new == -INFINITY) { /* nothing seen yet: every weight is 0, nothing to rescale */
        T sum = 0;
        for (int64_t j = 0; j < n; j++) { /* each score -inf or NaN: a NaN stays, and makes l NaN */
            if (s[j] == -INFINITY) s[j] = 0;
            sum += s[j];
        }
        *l += sum;
        return 1;
    }
    /* exp(-inf - m') = 0, so the first block (m = -inf) gets alpha = 0 and l starts from 0 */
    T alpha = EXP(m_old - m_new), sum = 0;
    for (int64_t j = 0; j < n; j++) {
        s[j] = EXP(s[j] - m_new);
        sum += s[j];
    }
    *m = m_new;
    *l = alpha * *l + sum;
    return alpha;
}

/* the online softmax on the rows of S (nq × nk, row-major) */
static void SFX(softmax_rows)(T *S, int64_t ld, int64_t nq, int64_t nk, T *m, T *l, T *alpha) {
    for (int64_t r = 0; r < nq; r++) alpha[r] = SFX(fg_attn_online_update)(&m[r], &l[r], S + r * ld, nk);
}

static void SFX(exp_rows_libm)(T *S, int64_t ld, int64_t nq, int64_t nk, const T *L, const T *lo) {
    for (int64_t r = 0; r < nq; r++) {
        T *row = S + r * ld;
        const T Lr = L[r], lr = lo ? lo[r] : 0;
        if (Lr == -INFINITY) { /* the row sees no key at all */
            for (int64_t j = 0; j < nk; j++) row[j] = 0;
            continue;
        }
        for (int64_t j = 0; j < nk; j++) row[j] = EXP((row[j] - Lr) - lr);
    }
}

/* also the x86 table's plain C form (float32): the same elementwise arithmetic */
static void SFX(flash_ds_rows)(T *dS, const T *P, int64_t ld, int64_t nq, int64_t nk, const T *D) {
    for (int64_t r = 0; r < nq; r++) {
        T *dsrow = dS + r * ld;
        const T *prow = P + r * ld;
        const T Di = D[r];
        for (int64_t j = 0; j < nk; j++) dsrow[j] = prow[j] * (dsrow[j] - Di);
    }
}

const SFX(fg_flash_ops) SFX(fg_flash_portable) = {.packs = 0,
                                                  .pool_flags = FG_POOL_BLAS_SERIAL,
                                                  .gemm = SFX(flash_gemm),
                                                  .softmax = SFX(softmax_rows),
                                                  .exp_rows = SFX(exp_rows_libm),
                                                  .ds_rows = SFX(flash_ds_rows),
                                                  .transpose = NULL};

#endif /* FG_FLASH_TILES_TEMPLATE */
