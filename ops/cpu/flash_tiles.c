/* flash_tiles.c — the tables of tile operations of CPU flash attention (ops/cpu/flash_tiles.h),
 * two per dtype: the portable one (BLAS tile products, libm's exp, the online softmax row by row),
 * and the x86 one's plain C forms and run-time dispatch (its vector forms: ops/cpu/flash_x86.c).
 *
 * Both are a template: the file includes itself twice, once per dtype.
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

/* GEMM, EXP: the portable table's product and exp; GEMM_SMALL, EXP_REF: the x86 table's (the
 * register-blocked products, the vectorized exp's plain C form); X86_AVX512: the dtype has AVX-512
 * forms (float32; float64 runs its AVX2 forms on AVX-512 CPUs) */
#define T float
#define SFX(name) name##_f32
#define GEMM cblas_sgemm
#define EXP expf
#define GEMM_SMALL fg_sgemm_small
#define EXP_REF fg_expf_ref
#define X86_AVX512 1
#include "ops/cpu/flash_tiles.c"
#undef T
#undef SFX
#undef GEMM
#undef EXP
#undef GEMM_SMALL
#undef EXP_REF
#undef X86_AVX512

#define T double
#define SFX(name) name##_f64
#define GEMM cblas_dgemm
#define EXP exp
#define GEMM_SMALL fg_dgemm_small
#define EXP_REF fg_exp64_ref
#define X86_AVX512 0
#include "ops/cpu/flash_tiles.c"
#undef T
#undef SFX
#undef GEMM
#undef EXP
#undef GEMM_SMALL
#undef EXP_REF
#undef X86_AVX512

#undef FG_FLASH_TILES_TEMPLATE

#else /* ---- the per-dtype template: the portable table, then the x86 table ---- */

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

/* P = exp((S − L_r) − lo_r) on the rows of S, with the exp ex: libm's (portable) or the vectorized
 * exp's plain C form (x86) */
static void SFX(exp_rows_with)(T *S, int64_t ld, int64_t nq, int64_t nk, const T *L, const T *lo, T (*ex)(T)) {
    for (int64_t r = 0; r < nq; r++) {
        T *row = S + r * ld;
        const T Lr = L[r], lr = lo ? lo[r] : 0;
        if (Lr == -INFINITY) { /* the row sees no key at all */
            for (int64_t j = 0; j < nk; j++) row[j] = 0;
            continue;
        }
        for (int64_t j = 0; j < nk; j++) row[j] = ex((row[j] - Lr) - lr);
    }
}

static void SFX(exp_rows_libm)(T *S, int64_t ld, int64_t nq, int64_t nk, const T *L, const T *lo) {
    SFX(exp_rows_with)(S, ld, nq, nk, L, lo, EXP);
}

/* also the x86 table's plain C form: the same elementwise arithmetic */
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

/* ---- the x86 table: plain C forms and dispatch ---- */

/* the online softmax down the columns of Sᵀ.
 * ST is nk × nq (row j: key j0 + j; column r: query i0 + r), row stride ld. For every column r:
 *     m' = max(m_r, max_j ST[j][r]);  m̃ = m' (0 while m' = −inf, so that exp(−inf − m̃) = 0)
 *     ST[j][r] = exp(ST[j][r] − m̃);  alpha_r = exp(m_r − m̃);  l_r = alpha_r·l_r + Σ_j ST[j][r]
 * (the sum in key order j = 0, 1, ...), m_r = m'. The same step as fg_attn_online_update, with the
 * vectorized exp; alpha is 0 rather than 1 while a row has seen no key (O and l are 0 then). */
void SFX(fg_flash_softmax_cols_scalar)(T *ST, int64_t ld, int64_t nk, int64_t r0, int64_t r1, T *m, T *l, T *alpha) {
    for (int64_t r = r0; r < r1; r++) {
        T mx = m[r];
        for (int64_t j = 0; j < nk; j++) {
            const T s = ST[j * ld + r];
            mx = s > mx ? s : mx; /* a NaN score does not become the max (as vmaxps(s, mx)) */
        }
        const T ms = mx == -INFINITY ? 0 : mx;
        const T a = EXP_REF(m[r] - ms);
        T sum = 0;
        for (int64_t j = 0; j < nk; j++) {
            const T p = EXP_REF(ST[j * ld + r] - ms);
            ST[j * ld + r] = p;
            sum += p;
        }
        l[r] = a * l[r] + sum;
        m[r] = mx;
        alpha[r] = a;
    }
}

/* X86_VECTOR(op, args…): run op's vector form at the level the CPU runs (AVX-512 for float32,
 * AVX2+FMA for both dtypes) and return; without one, go on (to the plain C form that follows). */
#if FG_SIMD_X86
static int SFX(x86_level)(void) { /* 2 AVX-512 (float32 only), 1 AVX2+FMA, 0 none */
    const fg_simd_level s = fg_simd_active();
    if (X86_AVX512 && s == FG_SIMD_AVX512) return 2;
    return s >= FG_SIMD_AVX2;
}
#if X86_AVX512
#define X86_AVX512_FORM(lv, op, ...)                                                                                   \
    if (lv == 2) {                                                                                                     \
        fg_flash_##op##_avx512(__VA_ARGS__);                                                                           \
        return;                                                                                                        \
    }
#else
#define X86_AVX512_FORM(lv, op, ...)
#endif
#define X86_VECTOR(op, ...)                                                                                            \
    do {                                                                                                               \
        const int lv = SFX(x86_level)();                                                                               \
        X86_AVX512_FORM(lv, op, __VA_ARGS__)                                                                           \
        if (lv == 1) {                                                                                                 \
            SFX(fg_flash_##op##_avx2)(__VA_ARGS__);                                                                    \
            return;                                                                                                    \
        }                                                                                                              \
    } while (0)
#else
#define X86_VECTOR(op, ...) ((void)0)
#endif

static void SFX(x86_softmax)(T *ST, int64_t ld, int64_t nq, int64_t nk, T *m, T *l, T *alpha) {
    X86_VECTOR(softmax_cols, ST, ld, nk, nq, m, l, alpha);
    SFX(fg_flash_softmax_cols_scalar)(ST, ld, nk, 0, nq, m, l, alpha);
}

static void SFX(x86_exp_rows)(T *S, int64_t ld, int64_t nq, int64_t nk, const T *L, const T *lo) {
    X86_VECTOR(exp_rows, S, ld, nq, nk, L, lo);
    SFX(exp_rows_with)(S, ld, nq, nk, L, lo, EXP_REF);
}

/* dS = P ∘ (dP − D_r): element by element, so the vector forms give the portable form's bits */
static void SFX(x86_ds_rows)(T *dS, const T *P, int64_t ld, int64_t nq, int64_t nk, const T *D) {
    X86_VECTOR(ds_rows, dS, P, ld, nq, nk, D);
    SFX(flash_ds_rows)(dS, P, ld, nq, nk, D);
}
/* in 8 × 8 blocks, so that both sides are read and written a cache line at a time */
void SFX(fg_flash_transpose_scalar)(T *dst, int64_t ldd, const T *src, int64_t lds, int64_t rows, int64_t cols) {
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            const int64_t r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}

static void SFX(x86_transpose)(T *dst, int64_t ldd, const T *src, int64_t lds, int64_t rows, int64_t cols) {
    X86_VECTOR(transpose, dst, ldd, src, lds, rows, cols);
    SFX(fg_flash_transpose_scalar)(dst, ldd, src, lds, rows, cols);
}

#undef X86_VECTOR
#undef X86_AVX512_FORM

/* the register-blocked products with BLAS's transpose flags (B is always row-major: the table packs) */
static void SFX(x86_gemm)(int ta, int tb, int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t lda,
                          const T *B, int64_t ldb, T *C, int64_t ldc, const T *rowscale, int acc) {
    (void)tb;
    GEMM_SMALL(m, n, k, alpha, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, C, ldc, rowscale, acc);
}

const SFX(fg_flash_ops) SFX(fg_flash_x86) = {.packs = 1,
                                             .pool_flags = 0,
                                             .gemm = SFX(x86_gemm),
                                             .softmax = SFX(x86_softmax),
                                             .exp_rows = SFX(x86_exp_rows),
                                             .ds_rows = SFX(x86_ds_rows),
                                             .transpose = SFX(x86_transpose)};

#endif /* FG_FLASH_TILES_TEMPLATE */
