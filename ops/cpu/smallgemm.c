/* smallgemm.c — register-blocked tile products, float32 and float64 (see smallgemm.h).
 *
 * Each level has one block function, always inlined with constant MR (rows, <= 6) and NV (vectors
 * of columns), so that the accumulators c[MR][NV] live in registers; the drivers cover C with
 * MR × (NV · lanes) blocks, the last column block masked.
 *
 * The plain C form and the AVX2 form are one template for both dtypes: this file includes itself
 * twice, with T = float (8 lanes a vector) and T = double (4 lanes), the vector operations named by
 * the V_* macros. AVX-512 has a float32 form of its own; float64 runs the AVX2 form there. */
#ifndef FG_SMALLGEMM_TEMPLATE
#include "ops/cpu/smallgemm.h"

#include <math.h>

#include "ops/cpu/simd.h"
#include "ops/cpu/vexp.h" /* FG_TARGET_AVX512, FG_TARGET_AVX2 */

#define FG_SMALLGEMM_TEMPLATE 1

#define T float
#define SFX(name) name##_f32
#define FMA_T fmaf
#define FG_VEC256_DOUBLE 0
#include "ops/cpu/smallgemm.c"
#undef T
#undef SFX
#undef FMA_T
#undef FG_VEC256_DOUBLE

#define T double
#define SFX(name) name##_f64
#define FMA_T fma
#define FG_VEC256_DOUBLE 1
#include "ops/cpu/smallgemm.c"
#undef T
#undef SFX
#undef FMA_T
#undef FG_VEC256_DOUBLE

#undef FG_SMALLGEMM_TEMPLATE

#if FG_SIMD_X86

/* ---- AVX-512: 6 rows × up to 4 vectors of 16 columns ---- */
static inline __attribute__((always_inline)) FG_TARGET_AVX512 void
blk512(const int MR, const int NV, __mmask16 lm, int64_t k, float alpha, const float *A, int64_t rsa, int64_t csa,
       const float *B, int64_t ldb, float *C, int64_t ldc, const float *rs, int accumulate) {
    __m512 c[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[r][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        const float *b = B + p * ldb, *a = A + p * csa;
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(lm, b + 16 * v) : _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const __m512 av = _mm512_set1_ps(a[r * rsa]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) c[r][v] = _mm512_fmadd_ps(av, bv[v], c[r][v]);
        }
    }
    const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float *cp = C + r * ldc + 16 * v;
            const __mmask16 m = v == NV - 1 ? lm : (__mmask16)0xFFFF;
            __m512 out;
            if (!accumulate)
                out = _mm512_mul_ps(va, c[r][v]);
            else if (!rs)
                out = _mm512_fmadd_ps(c[r][v], va, _mm512_maskz_loadu_ps(m, cp));
            else
                out = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, cp), _mm512_set1_ps(rs[r]), _mm512_mul_ps(va, c[r][v]));
            _mm512_mask_storeu_ps(cp, m, out);
        }
}

#define FG_BLK512(MR, NV)                                                                                              \
    static FG_TARGET_AVX512 void blk512_##MR##_##NV(__mmask16 lm, int64_t k, float alpha, const float *A, int64_t rsa, \
                                                    int64_t csa, const float *B, int64_t ldb, float *C, int64_t ldc,   \
                                                    const float *rs, int accumulate) {                                 \
        blk512(MR, NV, lm, k, alpha, A, rsa, csa, B, ldb, C, ldc, rs, accumulate);                                     \
    }
#define FG_BLK512_ROW(MR) FG_BLK512(MR, 1) FG_BLK512(MR, 2) FG_BLK512(MR, 3) FG_BLK512(MR, 4)
FG_BLK512_ROW(1)
FG_BLK512_ROW(2)
FG_BLK512_ROW(3)
FG_BLK512_ROW(4)
FG_BLK512_ROW(5)
FG_BLK512_ROW(6)

typedef void (*blk512_fn)(__mmask16, int64_t, float, const float *, int64_t, int64_t, const float *, int64_t, float *,
                          int64_t, const float *, int);
#define FG_BLK512_PTRS(MR)                                                                                             \
    { blk512_##MR##_1, blk512_##MR##_2, blk512_##MR##_3, blk512_##MR##_4 }
static const blk512_fn blk512_table[6][4] = {FG_BLK512_PTRS(1), FG_BLK512_PTRS(2), FG_BLK512_PTRS(3),
                                             FG_BLK512_PTRS(4), FG_BLK512_PTRS(5), FG_BLK512_PTRS(6)};

static void sgemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t rsa, int64_t csa,
                         const float *B, int64_t ldb, float *C, int64_t ldc, const float *rs, int accumulate) {
    for (int64_t c0 = 0; c0 < n; c0 += 64) {
        const int64_t nc = n - c0 < 64 ? n - c0 : 64;
        const int nv = (int)((nc + 15) / 16);
        const int tail = (int)(nc - 16 * (nv - 1)); /* columns in the last vector, 1..16 */
        const __mmask16 lm = (__mmask16)(tail == 16 ? 0xFFFFu : (1u << tail) - 1);
        for (int64_t r0 = 0; r0 < m; r0 += 6) {
            const int mr = (int)(m - r0 < 6 ? m - r0 : 6);
            blk512_table[mr - 1][nv - 1](lm, k, alpha, A + r0 * rsa, rsa, csa, B + c0, ldb, C + r0 * ldc + c0, ldc,
                                         rs ? rs + r0 : NULL, accumulate);
        }
    }
}

#endif /* FG_SIMD_X86 */

void fg_sgemm_small(int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t rsa, int64_t csa,
                    const float *B, int64_t ldb, float *C, int64_t ldc, const float *rowscale, int accumulate) {
    if (m <= 0 || n <= 0) return;
    if (k < 0) k = 0;
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        sgemm_avx512(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
        return;
    case FG_SIMD_AVX2:
        gemm_avx2_f32(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
        return;
    default:
        break;
    }
#endif
    gemm_scalar_f32(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
}

void fg_dgemm_small(int64_t m, int64_t n, int64_t k, double alpha, const double *A, int64_t rsa, int64_t csa,
                    const double *B, int64_t ldb, double *C, int64_t ldc, const double *rowscale, int accumulate) {
    if (m <= 0 || n <= 0) return;
    if (k < 0) k = 0;
#if FG_SIMD_X86
    if (fg_simd_active() >= FG_SIMD_AVX2) {
        gemm_avx2_f64(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
        return;
    }
#endif
    gemm_scalar_f64(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
}

#else /* ---- the per-dtype template: the plain C form and the AVX2 form ---- */

/* the final rounding of one element, shared by every level: see smallgemm.h */
static inline T SFX(store_one)(T t, T alpha, T c_old, const T *rs, int64_t r, int accumulate) {
    if (!accumulate) return alpha * t;
    if (!rs) return FMA_T(t, alpha, c_old);
    return FMA_T(c_old, rs[r], alpha * t);
}

static void SFX(gemm_scalar)(int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t rsa, int64_t csa,
                             const T *B, int64_t ldb, T *C, int64_t ldc, const T *rs, int accumulate) {
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < n; c++) {
            T t = 0;
            for (int64_t p = 0; p < k; p++) t = FMA_T(A[r * rsa + p * csa], B[p * ldb + c], t);
            T *cp = C + r * ldc + c;
            *cp = SFX(store_one)(t, alpha, accumulate ? *cp : 0, rs, r, accumulate);
        }
}

#if FG_SIMD_X86
#include "ops/cpu/vec256.h" /* VT, LANES, V_*: this dtype's vector operations */

/* 6 rows × up to 2 vectors of LANES columns; a partial last vector uses maskload */
static inline __attribute__((always_inline)) FG_TARGET_AVX2 void
SFX(blk256)(const int MR, const int NV, const int MASKED, __m256i lm, int64_t k, T alpha, const T *A, int64_t rsa,
            int64_t csa, const T *B, int64_t ldb, T *C, int64_t ldc, const T *rs, int accumulate) {
    VT c[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) c[r][v] = V_ZERO();
    for (int64_t p = 0; p < k; p++) {
        const T *b = B + p * ldb, *a = A + p * csa;
        VT bv[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++)
            bv[v] = MASKED && v == NV - 1 ? V_MASKLOAD(b + LANES * v, lm) : V_LOADU(b + LANES * v);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const VT av = V_BROADCAST(a + r * rsa);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) c[r][v] = V_FMADD(av, bv[v], c[r][v]);
        }
    }
    const VT va = V_SET1(alpha);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            T *cp = C + r * ldc + LANES * v;
            const int mk = MASKED && v == NV - 1;
            VT out;
            if (!accumulate)
                out = V_MUL(va, c[r][v]);
            else {
                const VT old = mk ? V_MASKLOAD(cp, lm) : V_LOADU(cp);
                if (!rs)
                    out = V_FMADD(c[r][v], va, old);
                else
                    out = V_FMADD(old, V_BROADCAST(rs + r), V_MUL(va, c[r][v]));
            }
            if (mk)
                V_MASKSTORE(cp, lm, out);
            else
                V_STOREU(cp, out);
        }
}

#define FG_BLK256(MR, NV, MASKED)                                                                                      \
    static FG_TARGET_AVX2 void SFX(blk256_##MR##_##NV##_##MASKED)(__m256i lm, int64_t k, T alpha, const T *A,          \
                                                                  int64_t rsa, int64_t csa, const T *B, int64_t ldb,   \
                                                                  T *C, int64_t ldc, const T *rs, int accumulate) {    \
        SFX(blk256)(MR, NV, MASKED, lm, k, alpha, A, rsa, csa, B, ldb, C, ldc, rs, accumulate);                        \
    }
#define FG_BLK256_ROW(MR) FG_BLK256(MR, 1, 0) FG_BLK256(MR, 2, 0) FG_BLK256(MR, 1, 1) FG_BLK256(MR, 2, 1)
FG_BLK256_ROW(1)
FG_BLK256_ROW(2)
FG_BLK256_ROW(3)
FG_BLK256_ROW(4)
FG_BLK256_ROW(5)
FG_BLK256_ROW(6)

typedef void (*SFX(blk256_fn))(__m256i, int64_t, T, const T *, int64_t, int64_t, const T *, int64_t, T *, int64_t,
                               const T *, int);
#define FG_BLK256_PTRS(MR)                                                                                             \
    {                                                                                                                  \
        {SFX(blk256_##MR##_1_0), SFX(blk256_##MR##_2_0)}, { SFX(blk256_##MR##_1_1), SFX(blk256_##MR##_2_1) }           \
    }
static const SFX(blk256_fn) SFX(blk256_table)[6][2][2] = {FG_BLK256_PTRS(1), FG_BLK256_PTRS(2), FG_BLK256_PTRS(3),
                                                          FG_BLK256_PTRS(4), FG_BLK256_PTRS(5), FG_BLK256_PTRS(6)};
#undef FG_BLK256
#undef FG_BLK256_ROW
#undef FG_BLK256_PTRS

FG_TARGET_AVX2 static void SFX(gemm_avx2)(int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t rsa,
                                          int64_t csa, const T *B, int64_t ldb, T *C, int64_t ldc, const T *rs,
                                          int accumulate) {
    for (int64_t c0 = 0; c0 < n; c0 += 2 * LANES) {
        const int64_t nc = n - c0 < 2 * LANES ? n - c0 : 2 * LANES;
        const int nv = (int)((nc + LANES - 1) / LANES);
        const int tail = (int)(nc - LANES * (nv - 1)); /* 1..LANES */
        const int masked = tail != LANES;
        const __m256i lm = V_TAIL_MASK(tail);
        for (int64_t r0 = 0; r0 < m; r0 += 6) {
            const int mr = (int)(m - r0 < 6 ? m - r0 : 6);
            SFX(blk256_table)[mr - 1][masked][nv - 1](lm, k, alpha, A + r0 * rsa, rsa, csa, B + c0, ldb,
                                                      C + r0 * ldc + c0, ldc, rs ? rs + r0 : NULL, accumulate);
        }
    }
}
#define FG_VEC256_UNDEF
#include "ops/cpu/vec256.h"
#endif /* FG_SIMD_X86 */
#endif /* FG_SMALLGEMM_TEMPLATE */
