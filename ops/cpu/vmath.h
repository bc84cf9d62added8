/* vmath.h — what the float32 fast paths of the op families share (internal to ops/).
 *
 * The fast paths (layernorm, gelu, cross-entropy, the element-wise ops, gradient accumulation,
 * AdamW) run on contiguous float32 arrays, with AVX-512 / AVX2 copies chosen by ops/cpu/simd.h and a
 * plain C form that computes THE SAME BITS: every level does the same IEEE operations on the same
 * operands in the same order (fmaf wherever a vector path uses an FMA), like ops/cpu/vexp.h. And they
 * give the same bits for any thread count, because work is cut into pieces that do not depend on
 * it (below). tests/test_fastpath.c checks both claims, op by op.
 *
 * 1. Parallel ranges. fg_par_range(n, chunk, ns_per_elem, fn, ctx) cuts [0, n) into pieces of
 *    `chunk` (the last one shorter) and calls fn(ctx, begin, end) once per piece: on the thread
 *    pool when the estimated serial time n * ns_per_elem is worth a run (FG_PAR_MIN_NS), else in
 *    order on the calling thread. A piece that computes its own outputs (or its own partial of a
 *    reduction, combined afterwards in piece order) makes the result independent of threads.
 *
 * 2. Sums that every level computes alike ("16 lanes"). A float row x[0..n) is summed as: element
 *    i goes to lane i mod 16 (the row padded with +0 to a multiple of 16); each lane accumulates
 *    in double, in index order; the lanes l[0..16) are combined by a fixed tree,
 *        a_j = l_j + l_(j+8) (j < 8),  b_j = a_j + a_(j+4) (j < 4),  c_j = b_j + b_(j+2) (j < 2),
 *        sum = c_0 + c_1.
 *    AVX-512 holds lanes 0-7 and 8-15 in two __m512d, AVX2 in four __m256d (0-3, 4-7, 8-11,
 *    12-15), the scalar form in an array; the helpers below do the tree for each. Sums in double
 *    of floats (products of two floats are exact in double) lose nothing worth mentioning at any
 *    row length an op sees.
 *
 * 3. Array kernels shared by several ops: y = a ∘ b and y += a·x, dispatched on fg_simd_active().
 */
#ifndef FG_VMATH_H
#define FG_VMATH_H

#include <stdint.h>

#include "ops/cpu/kernel.h" /* fg_iter */
#include "ops/cpu/simd.h"
#include "ops/cpu/threadpool.h"
#include "ops/cpu/vexp.h" /* FG_TARGET_AVX512, FG_TARGET_AVX2, fg_vexp_* */

#ifdef __cplusplus
extern "C" {
#endif

/* "The same operations": a*b + c written in C must stay a multiply and an add. GCC does not fuse
 * them under -std=c11 (-ffp-contract=off); clang would, unless told. */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- 1. parallel ranges ---- */

/* A pool run has a fixed cost (waking or reaching the workers: ops/cpu_threadpool.c), far more while
 * another process holds a core, so a loop goes parallel only when its serial time is well above
 * that. Each caller passes its cost per element (one thread, AVX-512, data in L2;
 * bench/results/train_cpu.md has the measurements). */
#define FG_PAR_MIN_NS 60000.0
/* The piece of an element-wise loop: 16 Ki floats (64 KiB), a few µs of work. */
#define FG_PAR_CHUNK 16384

typedef void (*fg_range_fn)(void *ctx, int64_t begin, int64_t end);
/* fn over the pieces of [0, n) as described above (n <= 0: nothing). */
void fg_par_range(int64_t n, int64_t chunk, double ns_per_elem, fg_range_fn fn, void *ctx);
/* For tests: replace FG_PAR_MIN_NS (0 sends every loop of two or more pieces to the pool; a
 * negative value restores the default). Returns the previous value. Not while loops run. */
double fg_par_set_min_ns(double ns);
/* The number of pieces fg_par_range cuts [0, n) into. */
static inline int64_t fg_par_pieces(int64_t n, int64_t chunk) { return n <= 0 ? 0 : (n + chunk - 1) / chunk; }
/* Rows per piece for a row-wise op over rows of C elements: about FG_PAR_CHUNK / 2 elements per
 * piece, at least one row. Depends on C only (never on the thread count). */
static inline int64_t fg_par_rows(int64_t C) {
    return C >= FG_PAR_CHUNK / 2 ? 1 : (FG_PAR_CHUNK / 2) / (C > 0 ? C : 1);
}

/* Iterator pieces: fn(ctx, piece) over the rows of a fresh iterator `it` (fg_iter_init, not yet
 * advanced), cut into pieces of whole rows of about FG_PAR_CHUNK / 2 elements, or — rows longer
 * than FG_PAR_CHUNK — of FG_PAR_CHUNK columns of one row. Each piece is a copy of the iterator
 * positioned on its first row (it->n cut down and the offsets moved for a column piece), which fn
 * walks with fg_iter_next as usual; a loop too small for the pool (or parallel = 0) is one call
 * with the whole iterator. The pieces write disjoint outputs only if no operand that is written
 * has a stride of 0 (broadcast): callers check that, or pass parallel = 0. Only element-wise
 * loops (every output element computed alone) may use it: whether and where the rows are cut
 * depends on the size and the thread count. */
typedef void (*fg_rows_fn)(void *ctx, fg_iter *piece);
void fg_par_iter(const fg_iter *it, int parallel, double ns_per_elem, fg_rows_fn fn, void *ctx);
/* 1 when no dim of size > 1 of `shape` has stride 0 in `strides` (no element is reached twice). */
int fg_no_broadcast(int ndim, const int64_t *shape, const int64_t *strides);

/* ---- 2. 16-lane sums ---- */

/* The tree over l[0..16) (l is overwritten). */
static inline double fg_lanes16_sum(double *l) {
    for (int j = 0; j < 8; j++) l[j] += l[j + 8];
    for (int j = 0; j < 4; j++) l[j] += l[j + 4];
    for (int j = 0; j < 2; j++) l[j] += l[j + 2];
    return l[0] + l[1];
}

#if FG_SIMD_X86
/* lanes 0-7 in lo, 8-15 in hi */
static inline __attribute__((always_inline)) FG_TARGET_AVX512 double fg_lanes16_sum_avx512(__m512d lo, __m512d hi) {
    const __m512d a = _mm512_add_pd(lo, hi);
    const __m256d b = _mm256_add_pd(_mm512_castpd512_pd256(a), _mm512_extractf64x4_pd(a, 1));
    const __m128d c = _mm_add_pd(_mm256_castpd256_pd128(b), _mm256_extractf128_pd(b, 1));
    return _mm_cvtsd_f64(_mm_add_sd(c, _mm_unpackhi_pd(c, c)));
}
/* the floats of v as doubles: lanes 0-7 and 8-15 */
static inline __attribute__((always_inline)) FG_TARGET_AVX512 __m512d fg_lo8_pd_avx512(__m512 v) {
    return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}
static inline __attribute__((always_inline)) FG_TARGET_AVX512 __m512d fg_hi8_pd_avx512(__m512 v) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}
/* the first n (< 16) lanes set */
static inline __mmask16 fg_mask16(int64_t n) { return (__mmask16)((1u << n) - 1u); }
/* the lanes of p that k selects, +0 elsewhere: _mm512_maskz_loadu_ps, but a plain load when k
 * selects all 16. Loops that stream from memory load through this: a masked load there ran about
 * three times slower than a plain one on a Zen 5 (the hardware prefetch seems not to follow masked
 * loads), while from L1 or L2 the two cost the same. */
static inline __attribute__((always_inline)) FG_TARGET_AVX512 __m512 fg_loadz16(__mmask16 k, const float *p) {
    return k == (__mmask16)0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}

/* lanes 0-3, 4-7, 8-11, 12-15 in q[0..4) */
static inline __attribute__((always_inline)) FG_TARGET_AVX2 double fg_lanes16_sum_avx2(const __m256d *q) {
    const __m256d b = _mm256_add_pd(_mm256_add_pd(q[0], q[2]), _mm256_add_pd(q[1], q[3]));
    const __m128d c = _mm_add_pd(_mm256_castpd256_pd128(b), _mm256_extractf128_pd(b, 1));
    return _mm_cvtsd_f64(_mm_add_sd(c, _mm_unpackhi_pd(c, c)));
}
/* floats 0-3 / 4-7 of v as doubles */
static inline __attribute__((always_inline)) FG_TARGET_AVX2 __m256d fg_lo4_pd_avx2(__m256 v) {
    return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}
static inline __attribute__((always_inline)) FG_TARGET_AVX2 __m256d fg_hi4_pd_avx2(__m256 v) {
    return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}
/* the mask that loads (vmaskmovps) the first n (0..8) of 8 floats; the others read as +0 */
static inline __attribute__((always_inline)) FG_TARGET_AVX2 __m256i fg_mask8_avx2(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

/* ---- 3. array kernels (contiguous float32; outputs may equal inputs) ---- */

enum { FG_VOP_ADD, FG_VOP_SUB, FG_VOP_MUL, FG_VOP_DIV };
/* y[i] = a[i] ∘ b[i] (∘ one of FG_VOP_*) */
void fg_vbinary_f32(int op, float *y, const float *a, const float *b, int64_t n);
/* y[i] = a[i] ∘ s, with a scalar s */
void fg_vbinary_scalar_f32(int op, float *y, const float *a, float s, int64_t n);
/* y[i] += alpha · x[i]: the product rounded, then the sum (alpha = 1 is y += x, alpha = -1 is
 * y -= x, bit for bit) */
void fg_vaxpy_f32(float *y, float alpha, const float *x, int64_t n);
/* Row blocks: for r < rows, dst[r·ldd + i] = src[r·lds + i] (add 0) or += (add 1), i < n. For
 * the short rows of strided layouts (an attention head's d floats), where a call per row costs
 * more than the row. */
void fg_vrows_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t n, int add);

#ifdef __cplusplus
}
#endif
#endif /* FG_VMATH_H */
