/* flash_x86_body.h — the AVX2+FMA forms of flash attention's softmax, exp and dS tile operations,
 * one template for both dtypes (T = float, 8 lanes; T = double, 4 lanes), the vector operations
 * named by ops/cpu/vec256.h. Every form computes the bits of the plain C one
 * (ops/cpu/flash_tiles_body.h): the exp is VEXP's, sums run key by key in each lane.
 *
 * A template body: ops/cpu/attention_f32.c and ops/cpu/attention_f64.c include it once each (after
 * ops/cpu/flash_tiles_body.h, whose softmax_cols_scalar finishes the ragged columns), with T,
 * FG_VEC256_DOUBLE, VEXP and EXP_REF; their fg_flash_{softmax_cols,exp_rows,ds_rows,row_dots}_avx2_<dt>
 * call softmax_cols_avx2, exp_rows_avx2, ds_rows_avx2 and row_dots_avx2. x86 only.
 */
/* (no include guard: included once per dtype translation unit) */
#if FG_SIMD_X86
#include "ops/cpu/vec256.h" /* VT, LANES, V_*: this dtype's vector operations */

/* four vectors of columns at a time, as in the AVX-512 form */
static FG_TARGET_AVX2 void softmax_cols_avx2(T *ST, int64_t ld, int64_t nk, int64_t nq, T *m, T *l, T *alpha) {
    const VT ninf = V_SET1(-INFINITY), zero = V_ZERO();
    int64_t r0 = 0;
    for (; r0 + 4 * LANES <= nq; r0 += 4 * LANES) {
        VT mo[4], mx[4], ms[4], sum[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            mo[v] = V_LOADU(m + r0 + LANES * v);
            mx[v] = mo[v];
            sum[v] = zero;
        }
        for (int64_t j = 0; j < nk; j++) {
            const T *sp = ST + j * ld + r0;
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) mx[v] = V_MAX(V_LOADU(sp + LANES * v), mx[v]);
        }
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) ms[v] = V_BLENDV(mx[v], zero, V_CMP_EQ(mx[v], ninf));
        for (int64_t j = 0; j < nk; j++) {
            T *sp = ST + j * ld + r0;
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                const VT p = VEXP(V_SUB(V_LOADU(sp + LANES * v), ms[v]));
                V_STOREU(sp + LANES * v, p);
                sum[v] = V_ADD(sum[v], p);
            }
        }
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const int64_t r = r0 + LANES * v;
            const VT a = VEXP(V_SUB(mo[v], ms[v]));
            V_STOREU(l + r, V_ADD(V_MUL(a, V_LOADU(l + r)), sum[v]));
            V_STOREU(m + r, mx[v]);
            V_STOREU(alpha + r, a);
        }
    }
    for (; r0 + LANES <= nq; r0 += LANES) {
        const VT mo = V_LOADU(m + r0);
        VT mx = mo;
        for (int64_t j = 0; j < nk; j++) mx = V_MAX(V_LOADU(ST + j * ld + r0), mx);
        const VT ms = V_BLENDV(mx, zero, V_CMP_EQ(mx, ninf));
        const VT a = VEXP(V_SUB(mo, ms));
        VT sum = zero;
        for (int64_t j = 0; j < nk; j++) {
            T *sp = ST + j * ld + r0;
            const VT p = VEXP(V_SUB(V_LOADU(sp), ms));
            V_STOREU(sp, p);
            sum = V_ADD(sum, p);
        }
        V_STOREU(l + r0, V_ADD(V_MUL(a, V_LOADU(l + r0)), sum));
        V_STOREU(m + r0, mx);
        V_STOREU(alpha + r0, a);
    }
    softmax_cols_scalar(ST, ld, nk, r0, nq, m, l, alpha); /* the same bits, one column at a time */
}

static FG_TARGET_AVX2 void exp_rows_avx2(T *S, int64_t ld, int64_t nq, int64_t nk, const T *L, const T *lo) {
    for (int64_t r = 0; r < nq; r++) {
        T *row = S + r * ld;
        if (L[r] == -INFINITY) {
            memset(row, 0, (size_t)nk * sizeof(T));
            continue;
        }
        const T Lf = L[r], lf = lo ? lo[r] : 0;
        const VT Lr = V_SET1(Lf), lr = V_SET1(lf);
        int64_t j = 0;
        for (; j + LANES <= nk; j += LANES) V_STOREU(row + j, VEXP(V_SUB(V_SUB(V_LOADU(row + j), Lr), lr)));
        for (; j < nk; j++) row[j] = EXP_REF((row[j] - Lf) - lf);
    }
}

static FG_TARGET_AVX2 void ds_rows_avx2(T *dS, const T *P, int64_t ld, int64_t nq, int64_t nk, const T *D) {
    for (int64_t r = 0; r < nq; r++) {
        T *dsrow = dS + r * ld;
        const T *prow = P + r * ld;
        const VT Di = V_SET1(D[r]);
        int64_t j = 0;
        for (; j + LANES <= nk; j += LANES)
            V_STOREU(dsrow + j, V_MUL(V_LOADU(prow + j), V_SUB(V_LOADU(dsrow + j), Di)));
        for (; j < nk; j++) dsrow[j] = prow[j] * (dsrow[j] - D[r]);
    }
}

/* D_r = Σ_c a[r, c]·b[r, c] in double, four rows at a time with each row in a lane of a double
 * vector: the products of a 4 × 4 block of columns, transposed so that one vector holds one column,
 * are added column by column, which is the plain C form's order (flash_row_dots). Products are
 * rounded before they are added, as there (exact for float32 inputs). */
#if FG_VEC256_DOUBLE
#define LOAD4_PD(p) _mm256_loadu_pd(p)
#else
#define LOAD4_PD(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#endif
static FG_TARGET_AVX2 void row_dots_avx2(T *D, const T *a, int64_t lda, const T *b, int64_t ldb, int64_t rows,
                                         int64_t d) {
    int64_t i = 0;
    for (; i + 4 <= rows; i += 4) {
        __m256d s = _mm256_setzero_pd();
        int64_t c = 0;
        for (; c + 4 <= d; c += 4) {
            __m256d p[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                p[r] = _mm256_mul_pd(LOAD4_PD(a + (i + r) * lda + c), LOAD4_PD(b + (i + r) * ldb + c));
            /* rows (p0, p1) and (p2, p3) interleaved, then the 128-bit halves: column k in q_k */
            const __m256d t0 = _mm256_unpacklo_pd(p[0], p[1]), t1 = _mm256_unpackhi_pd(p[0], p[1]);
            const __m256d t2 = _mm256_unpacklo_pd(p[2], p[3]), t3 = _mm256_unpackhi_pd(p[2], p[3]);
            s = _mm256_add_pd(s, _mm256_permute2f128_pd(t0, t2, 0x20));
            s = _mm256_add_pd(s, _mm256_permute2f128_pd(t1, t3, 0x20));
            s = _mm256_add_pd(s, _mm256_permute2f128_pd(t0, t2, 0x31));
            s = _mm256_add_pd(s, _mm256_permute2f128_pd(t1, t3, 0x31));
        }
        double acc[4];
        _mm256_storeu_pd(acc, s);
        for (int r = 0; r < 4; r++) {
            for (int64_t cc = c; cc < d; cc++)
                acc[r] += (double)a[(i + r) * lda + cc] * (double)b[(i + r) * ldb + cc];
            D[i + r] = (T)acc[r];
        }
    }
    if (i < rows) flash_row_dots(D + i, a + i * lda, lda, b + i * ldb, ldb, rows - i, d);
}
#undef LOAD4_PD

#define FG_VEC256_UNDEF
#include "ops/cpu/vec256.h"
#endif /* FG_SIMD_X86 */
