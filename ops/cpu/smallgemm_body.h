/* smallgemm_body.h — the register-blocked tile products' plain C form and AVX2 form, one template
 * for both dtypes (T = float, 8 lanes a vector; T = double, 4 lanes), the vector operations named
 * by the V_* macros of ops/cpu/vec256.h (see ops/cpu/smallgemm.h).
 *
 * A template body: ops/cpu/smallgemm_f32.c and ops/cpu/smallgemm_f64.c include it once each, with
 * T, FMA_T (its fma) and FG_VEC256_DOUBLE; their fg_sgemm_small and fg_dgemm_small dispatch to
 * gemm_scalar and gemm_avx2 (and, float32 only, the AVX-512 form of smallgemm_f32.c).
 */
/* (no include guard: included once per dtype translation unit) */

/* the final rounding of one element, shared by every level: see smallgemm.h */
static inline T store_one(T t, T alpha, T c_old, const T *rs, int64_t r, int accumulate) {
    if (!accumulate) return alpha * t;
    if (!rs) return FMA_T(t, alpha, c_old);
    return FMA_T(c_old, rs[r], alpha * t);
}

static void gemm_scalar(int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t rsa, int64_t csa, const T *B,
                        int64_t ldb, T *C, int64_t ldc, const T *rs, int accumulate) {
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < n; c++) {
            T t = 0;
            for (int64_t p = 0; p < k; p++) t = FMA_T(A[r * rsa + p * csa], B[p * ldb + c], t);
            T *cp = C + r * ldc + c;
            *cp = store_one(t, alpha, accumulate ? *cp : 0, rs, r, accumulate);
        }
}

#if FG_SIMD_X86
#include "ops/cpu/vec256.h" /* VT, LANES, V_*: this dtype's vector operations */

/* 6 rows × up to 2 vectors of LANES columns; a partial last vector uses maskload */
static inline __attribute__((always_inline)) FG_TARGET_AVX2 void
blk256(const int MR, const int NV, const int MASKED, __m256i lm, int64_t k, T alpha, const T *A, int64_t rsa,
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

/* the tiles: blk256_MR_NV_MASKED is blk256 with those three as constants (MR rows, NV vectors of
 * columns, the last one masked or not) */
#define BLK256_PARAMS                                                                                                  \
    __m256i lm, int64_t k, T alpha, const T *A, int64_t rsa, int64_t csa, const T *B, int64_t ldb, T *C, int64_t ldc,  \
        const T *rs, int accumulate
#define BLK256_ARGS lm, k, alpha, A, rsa, csa, B, ldb, C, ldc, rs, accumulate
static FG_TARGET_AVX2 void blk256_1_1_0(BLK256_PARAMS) { blk256(1, 1, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_1_2_0(BLK256_PARAMS) { blk256(1, 2, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_1_1_1(BLK256_PARAMS) { blk256(1, 1, 1, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_1_2_1(BLK256_PARAMS) { blk256(1, 2, 1, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_2_1_0(BLK256_PARAMS) { blk256(2, 1, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_2_2_0(BLK256_PARAMS) { blk256(2, 2, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_2_1_1(BLK256_PARAMS) { blk256(2, 1, 1, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_2_2_1(BLK256_PARAMS) { blk256(2, 2, 1, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_3_1_0(BLK256_PARAMS) { blk256(3, 1, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_3_2_0(BLK256_PARAMS) { blk256(3, 2, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_3_1_1(BLK256_PARAMS) { blk256(3, 1, 1, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_3_2_1(BLK256_PARAMS) { blk256(3, 2, 1, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_4_1_0(BLK256_PARAMS) { blk256(4, 1, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_4_2_0(BLK256_PARAMS) { blk256(4, 2, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_4_1_1(BLK256_PARAMS) { blk256(4, 1, 1, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_4_2_1(BLK256_PARAMS) { blk256(4, 2, 1, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_5_1_0(BLK256_PARAMS) { blk256(5, 1, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_5_2_0(BLK256_PARAMS) { blk256(5, 2, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_5_1_1(BLK256_PARAMS) { blk256(5, 1, 1, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_5_2_1(BLK256_PARAMS) { blk256(5, 2, 1, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_6_1_0(BLK256_PARAMS) { blk256(6, 1, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_6_2_0(BLK256_PARAMS) { blk256(6, 2, 0, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_6_1_1(BLK256_PARAMS) { blk256(6, 1, 1, BLK256_ARGS); }
static FG_TARGET_AVX2 void blk256_6_2_1(BLK256_PARAMS) { blk256(6, 2, 1, BLK256_ARGS); }
#undef BLK256_PARAMS
#undef BLK256_ARGS

typedef void (*blk256_fn)(__m256i, int64_t, T, const T *, int64_t, int64_t, const T *, int64_t, T *, int64_t, const T *,
                          int);
/* [MR - 1][MASKED][NV - 1] */
static const blk256_fn blk256_table[6][2][2] = {
    {{blk256_1_1_0, blk256_1_2_0}, {blk256_1_1_1, blk256_1_2_1}},
    {{blk256_2_1_0, blk256_2_2_0}, {blk256_2_1_1, blk256_2_2_1}},
    {{blk256_3_1_0, blk256_3_2_0}, {blk256_3_1_1, blk256_3_2_1}},
    {{blk256_4_1_0, blk256_4_2_0}, {blk256_4_1_1, blk256_4_2_1}},
    {{blk256_5_1_0, blk256_5_2_0}, {blk256_5_1_1, blk256_5_2_1}},
    {{blk256_6_1_0, blk256_6_2_0}, {blk256_6_1_1, blk256_6_2_1}},
};

FG_TARGET_AVX2 static void gemm_avx2(int64_t m, int64_t n, int64_t k, T alpha, const T *A, int64_t rsa, int64_t csa,
                                     const T *B, int64_t ldb, T *C, int64_t ldc, const T *rs, int accumulate) {
    for (int64_t c0 = 0; c0 < n; c0 += 2 * LANES) {
        const int64_t nc = n - c0 < 2 * LANES ? n - c0 : 2 * LANES;
        const int nv = (int)((nc + LANES - 1) / LANES);
        const int tail = (int)(nc - LANES * (nv - 1)); /* 1..LANES */
        const int masked = tail != LANES;
        const __m256i lm = V_TAIL_MASK(tail);
        for (int64_t r0 = 0; r0 < m; r0 += 6) {
            const int mr = (int)(m - r0 < 6 ? m - r0 : 6);
            blk256_table[mr - 1][masked][nv - 1](lm, k, alpha, A + r0 * rsa, rsa, csa, B + c0, ldb, C + r0 * ldc + c0,
                                                 ldc, rs ? rs + r0 : NULL, accumulate);
        }
    }
}
#define FG_VEC256_UNDEF
#include "ops/cpu/vec256.h"
#endif /* FG_SIMD_X86 */
