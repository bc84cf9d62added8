/* smallgemm_f64.c — the register-blocked tile products in double (see ops/cpu/smallgemm.h): the plain
 * C and AVX2 forms of ops/cpu/smallgemm_body.h, and fg_dgemm_small, which picks the
 * form of the CPU's level.
 *
 * Each level has one block function, always inlined with constant MR (rows, <= 6) and NV (vectors
 * of columns), so that the accumulators c[MR][NV] live in registers; the drivers cover C with
 * MR × (NV · lanes) blocks, the last column block masked.
 */
#include "ops/cpu/smallgemm.h"

#include <math.h>

#include "ops/cpu/simd.h"
#include "ops/cpu/vexp.h" /* FG_TARGET_AVX512, FG_TARGET_AVX2 */

#define T double
#define FMA_T fma
#define FG_VEC256_DOUBLE 1
#include "ops/cpu/smallgemm_body.h"

void fg_dgemm_small(int64_t m, int64_t n, int64_t k, double alpha, const double *A, int64_t rsa, int64_t csa,
                    const double *B, int64_t ldb, double *C, int64_t ldc, const double *rowscale, int accumulate) {
    if (m <= 0 || n <= 0) return;
    if (k < 0) k = 0;
#if FG_SIMD_X86
    if (fg_simd_active() >= FG_SIMD_AVX2) {
        gemm_avx2(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
        return;
    }
#endif
    gemm_scalar(m, n, k, alpha, A, rsa, csa, B, ldb, C, ldc, rowscale, accumulate);
}
