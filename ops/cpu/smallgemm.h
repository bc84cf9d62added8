/* smallgemm.h — float32 matrix products for tiles that live in the L1/L2 cache (tens to a few
 * hundred rows and columns), register-blocked for AVX-512F and AVX2+FMA, chosen at run time
 * (ops/cpu/simd.h), with a plain C form that computes the same bits.
 *
 * Why not BLAS for these: a flash-attention tile product is 64×64×64, about 10 µs; BLAS's
 * per-call overhead (argument checks, buffer packing, its thread hand-off) is a large fraction of
 * that, and BLAS's threads would fight the pool's (ops/cpu/threadpool.h). This kernel is called by
 * every pool thread on its own tiles, packs nothing, and takes A with arbitrary strides, so a
 * transposed operand (Pᵀ, dSᵀ) costs nothing.
 *
 *   C (m × n) = alpha · A B                                  accumulate = 0
 *   C        += alpha · A B                                  accumulate = 1, rowscale NULL
 *   C[r, :]   = rowscale[r] · C[r, :] + alpha · (A B)[r, :]  accumulate = 1, rowscale given
 * A is m × k with element (r, p) at A[r·rsa + p·csa] (row-major: rsa = lda, csa = 1; the transpose
 * of a row-major k × m matrix: rsa = 1, csa = ld); B is k × n row-major (row stride ldb); C is
 * m × n row-major (row stride ldc). C may not overlap A or B.
 *
 * Rounding, the same on every level: each element is t = Σ_p A[r,p]·B[p,c] summed in order p = 0,
 * 1, …, k−1 by fused multiply-adds starting from 0; then C = alpha·t (one rounding),
 * C = fma(t, alpha, C), or C = fma(C, rowscale[r], alpha·t). The vector lanes hold different
 * columns, never parts of one sum, so the lane count does not change any result (checked by
 * tests/test_simd.c against the scalar form on every level the CPU has).
 *
 * The register tile is 6 rows × 64 columns with AVX-512 (24 accumulators) and 6 × 16 with AVX2
 * (12): per step of p, one broadcast of A per row and one load of B per 16 (8) columns feed
 * 24 (12) FMAs. n that is not a multiple of the vector width is handled with masked loads and
 * stores (nothing is read or written past column n); with AVX-512, the last 1 to 4 columns past a
 * multiple of 16 go instead as a strip with 16 rows in a vector's lanes, where A has a contiguous
 * side (rsa or csa 1), so that N = 65 does not spend a fifth of its time on a nearly empty vector.
 *
 * Speed: close to the FMA peak per core for tiles in L1 (bench/results/ has the figures). The plain C
 * form is the bit-exact reference,
 * not a fast path: where the CPU has no FMA instruction (x86 before AVX2) each fmaf is a library
 * call — callers that need speed there should use BLAS (ops/cpu/attention_flash_body.h does).
 */
#ifndef FG_SMALLGEMM_H
#define FG_SMALLGEMM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void fg_sgemm_small(int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t rsa, int64_t csa,
                    const float *B, int64_t ldb, float *C, int64_t ldc, const float *rowscale, int accumulate);

/* The same contract in float64 (fma in place of fmaf; the same code as the float32 AVX2 and plain C
 * forms, ops/cpu/smallgemm.c): a register tile of 6 rows × 8 columns with AVX2+FMA (also what
 * AVX-512 CPUs run), and the plain C form. */
void fg_dgemm_small(int64_t m, int64_t n, int64_t k, double alpha, const double *A, int64_t rsa, int64_t csa,
                    const double *B, int64_t ldb, double *C, int64_t ldc, const double *rowscale, int accumulate);

#ifdef __cplusplus
}
#endif
#endif /* FG_SMALLGEMM_H */
