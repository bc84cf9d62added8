/* adamw.c — the CPU's optimizer kernels (ops/kernels.h, `optimizer`): AdamW over spans of flat
 * arrays, the sum of squares of the gradient norm, and scaling. train/adamw.c calls them, through
 * the kernel table, on the model's flat parameter, gradient and moment arrays (train/adamw.h has
 * the math and the blocks of the norm).
 *
 * Legend: p, g, m, v are (n) arrays of one dtype: parameters, gradients, AdamW's moments.
 *
 * The loops run in pieces on the thread pool (ops/cpu/vmath.h), float32 through AVX-512 / AVX2
 * kernels that do the scalar loop's operations in the same order (the same bits on every level and
 * thread count). cuda/adamw.cu has the GPU's twins.
 */
#include <math.h>

#include "ops/cpu/vmath.h"
#include "ops/kernels_cpu.h"

/* ============================================================================================
 * the sum of squares, in blocks
 * Block k covers [kB, (k+1)B) with B = max(NORM_BLOCK, ceil(n / NORM_MAX_BLOCKS)) (n alone fixes
 * the blocks). A block's float32 squares (exact in double) go to 16 lanes in double (ops/cpu/vmath.h),
 * float64 ones are summed in order; the blocks' sums are then added in block order.
 * ============================================================================================ */
#define NORM_BLOCK 65536
#define NORM_MAX_BLOCKS 1024

typedef struct {
    const void *g;
    int64_t n, block, b0;
    double *part; /* one sum per block, from block b0 */
    int f32;
} norm_job;

#if FG_SIMD_X86
FG_TARGET_AVX512 static double sumsq_avx512(const float *g, int64_t n) {
    __m512d lo = _mm512_setzero_pd(), hi = lo;
    for (int64_t i = 0; i < n; i += 16) {
        const __m512 v = fg_loadz16(n - i >= 16 ? 0xffff : fg_mask16(n - i), g + i);
        const __m512d a = fg_lo8_pd_avx512(v), b = fg_hi8_pd_avx512(v);
        lo = _mm512_add_pd(lo, _mm512_mul_pd(a, a));
        hi = _mm512_add_pd(hi, _mm512_mul_pd(b, b));
    }
    return fg_lanes16_sum_avx512(lo, hi);
}
FG_TARGET_AVX2 static double sumsq_avx2(const float *g, int64_t n) {
    __m256d q[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t left = n - i;
        const __m256 v = left >= 8 ? _mm256_loadu_ps(g + i) : _mm256_maskload_ps(g + i, fg_mask8_avx2(left));
        const __m256d a = fg_lo4_pd_avx2(v), b = fg_hi4_pd_avx2(v);
        const int h = (int)((i >> 3) & 1); /* lanes 0-7 or 8-15 of the 16 */
        q[2 * h] = _mm256_add_pd(q[2 * h], _mm256_mul_pd(a, a));
        q[2 * h + 1] = _mm256_add_pd(q[2 * h + 1], _mm256_mul_pd(b, b));
    }
    return fg_lanes16_sum_avx2(q);
}
#endif

static double sumsq_f32(const float *g, int64_t n) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        return sumsq_avx512(g, n);
    case FG_SIMD_AVX2:
        return sumsq_avx2(g, n);
    default:
        break;
    }
#endif
    double l[16] = {0};
    for (int64_t i = 0; i < n; i++) l[i & 15] += (double)g[i] * g[i]; /* padding would add +0: a no-op here */
    return fg_lanes16_sum(l);
}

/* blocks [b, e) */
static void norm_piece(void *ctx, int64_t b, int64_t e) {
    const norm_job *j = ctx;
    for (int64_t k = b; k < e; k++) {
        const int64_t lo = k * j->block, hi = lo + j->block < j->n ? lo + j->block : j->n;
        if (j->f32) {
            j->part[k - j->b0] = sumsq_f32((const float *)j->g + lo, hi - lo);
        } else {
            const double *g = (const double *)j->g;
            double s = 0;
            for (int64_t i = lo; i < hi; i++) s += g[i] * g[i];
            j->part[k - j->b0] = s;
        }
    }
}

int64_t fg_cpu_optimizer_norm_block(int64_t n) {
    const int64_t per = (n + NORM_MAX_BLOCKS - 1) / NORM_MAX_BLOCKS;
    return per > NORM_BLOCK ? per : NORM_BLOCK;
}

/* the pieces [b, e) of fg_par_range: blocks [b0 + b, b0 + e) */
static void norm_piece_from(void *ctx, int64_t b, int64_t e) {
    const norm_job *j = ctx;
    norm_piece(ctx, j->b0 + b, j->b0 + e);
}

fg_status fg_cpu_optimizer_sum_squares_blocks(fg_dtype dt, const void *x, int64_t n, int64_t b0, int64_t b1,
                                              double *part) {
    const int64_t block = fg_cpu_optimizer_norm_block(n);
    if (b0 < 0 || b1 < b0 || b1 > fg_par_pieces(n, block))
        return fg_error(FG_ERR_ARG, "sum_squares: blocks [%lld, %lld) of an array of %lld blocks", (long long)b0,
                        (long long)b1, (long long)fg_par_pieces(n, block));
    norm_job j = {x, n, block, b0, part, dt == FG_F32};
    /* blocks [b0, b1) as pieces [0, b1 - b0), shifted */
    fg_par_range(b1 - b0, 1, 0.15 * (double)block, norm_piece_from, &j); /* ~0.15 ns per element */
    return FG_OK;
}

fg_status fg_cpu_optimizer_sum_squares(fg_dtype dt, const void *x, int64_t n, double *out) {
    double part[NORM_MAX_BLOCKS], s = 0;
    const int64_t blocks = fg_par_pieces(n, fg_cpu_optimizer_norm_block(n));
    fg_status st = fg_cpu_optimizer_sum_squares_blocks(dt, x, n, 0, blocks, part);
    if (st != FG_OK) return st;
    for (int64_t k = 0; k < blocks; k++) s += part[k];
    *out = s;
    return FG_OK;
}

/* ============================================================================================
 * scaling: x[i] *= s
 * ============================================================================================ */
typedef struct {
    void *g;
    double s;
    int f32;
} scale_job;

static void scale_piece(void *ctx, int64_t b, int64_t e) {
    const scale_job *j = ctx;
    if (j->f32) {
        float *g = (float *)j->g + b;
        fg_vbinary_scalar_f32(FG_VOP_MUL, g, g, (float)j->s, e - b);
    } else {
        double *g = (double *)j->g;
        for (int64_t i = b; i < e; i++) g[i] *= j->s;
    }
}

fg_status fg_cpu_optimizer_scale(fg_dtype dt, void *x, int64_t n, double s) {
    scale_job j = {x, s, dt == FG_F32};
    fg_par_range(n, FG_PAR_CHUNK, 0.15, scale_piece, &j); /* ~0.15 ns per element */
    return FG_OK;
}

/* ============================================================================================
 * AdamW
 * ============================================================================================ */

/* The update of one range [0, n) of the arrays, the gradient read as g · gs; T is float or double.
 * The float32 vector kernels below do these operations in this order (no FMA), and cuda/adamw.cu
 * mirrors it too. */
#define ADAMW_RANGE(T, p, g, gs, m, v, n, decay_factor, b1, b2, step_size, bc2_sqrt, eps)                              \
    for (int64_t i = 0; i < (n); i++) {                                                                                \
        T gi = (g)[i] * (T)(gs);                                                                                       \
        T mi = (m)[i] = (T)(b1) * (m)[i] + (T)(1.0 - (b1)) * gi;                                                       \
        T vi = (v)[i] = (T)(b2) * (v)[i] + (T)(1.0 - (b2)) * gi * gi;                                                  \
        T denom = (T)sqrt((double)vi) / (T)(bc2_sqrt) + (T)(eps);                                                      \
        (p)[i] = (p)[i] * (T)(decay_factor) - (T)(step_size)*mi / denom;                                               \
    }

/* the scalars of one update, as the float32 constants ADAMW_RANGE makes of them */
typedef struct {
    float gs, b1, omb1, b2, omb2, step, bc2s, eps;
} adamw_f32c;

#if FG_SIMD_X86
/* The bulk of ADAMW_RANGE in vectors of W lanes of type V (PFX: the intrinsics' prefix); returns
 * how many elements it did. sqrt is correctly rounded in float32 and in double, so
 * sqrt_ps(v) = (float)sqrt((double)v). */
#define ADAMW_VEC_BODY(V, PFX, W)                                                                                      \
    const V b1 = PFX##_set1_ps(c->b1), omb1 = PFX##_set1_ps(c->omb1), b2 = PFX##_set1_ps(c->b2);                       \
    const V omb2 = PFX##_set1_ps(c->omb2), step = PFX##_set1_ps(c->step);                                              \
    const V bc2s = PFX##_set1_ps(c->bc2s), eps = PFX##_set1_ps(c->eps), vdf = PFX##_set1_ps(df);                       \
    const V gs = PFX##_set1_ps(c->gs);                                                                                 \
    int64_t i = 0;                                                                                                     \
    for (; i + W <= n; i += W) {                                                                                       \
        const V gi = PFX##_mul_ps(PFX##_loadu_ps(g + i), gs);                                                          \
        const V mi = PFX##_add_ps(PFX##_mul_ps(b1, PFX##_loadu_ps(m + i)), PFX##_mul_ps(omb1, gi));                    \
        const V vi = PFX##_add_ps(PFX##_mul_ps(b2, PFX##_loadu_ps(v + i)), PFX##_mul_ps(PFX##_mul_ps(omb2, gi), gi));  \
        const V denom = PFX##_add_ps(PFX##_div_ps(PFX##_sqrt_ps(vi), bc2s), eps);                                      \
        const V upd = PFX##_div_ps(PFX##_mul_ps(step, mi), denom);                                                     \
        PFX##_storeu_ps(m + i, mi);                                                                                    \
        PFX##_storeu_ps(v + i, vi);                                                                                    \
        PFX##_storeu_ps(p + i, PFX##_sub_ps(PFX##_mul_ps(PFX##_loadu_ps(p + i), vdf), upd));                           \
    }                                                                                                                  \
    return i;
FG_TARGET_AVX512 static int64_t adamw_avx512(float *p, const float *g, float *m, float *v, int64_t n, float df,
                                             const adamw_f32c *c) {
    ADAMW_VEC_BODY(__m512, _mm512, 16);
}
FG_TARGET_AVX2 static int64_t adamw_avx2(float *p, const float *g, float *m, float *v, int64_t n, float df,
                                         const adamw_f32c *c) {
    ADAMW_VEC_BODY(__m256, _mm256, 8);
}
#endif

/* ADAMW_RANGE on float32 [0, n), the bulk through the vector kernel and the tail in C */
static void adamw_f32(float *p, const float *g, double gs, float *m, float *v, int64_t n, double df, double b1,
                      double b2, double step_size, double bc2_sqrt, double eps) {
    int64_t i = 0;
#if FG_SIMD_X86
    const adamw_f32c c = {(float)gs,         (float)b1,        (float)(1.0 - b1), (float)b2,
                          (float)(1.0 - b2), (float)step_size, (float)bc2_sqrt,   (float)eps};
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512:
        i = adamw_avx512(p, g, m, v, n, (float)df, &c);
        break;
    case FG_SIMD_AVX2:
        i = adamw_avx2(p, g, m, v, n, (float)df, &c);
        break;
    default:
        break;
    }
#endif
    const int64_t done = i, rest = n - i; /* (ADAMW_RANGE has a loop variable i of its own) */
    p += done, g += done, m += done, v += done;
    ADAMW_RANGE(float, p, g, gs, m, v, rest, df, b1, b2, step_size, bc2_sqrt, eps)
}

typedef struct {
    fg_dtype dt;
    void *p, *m, *v;
    const void *g;
    double gs;
    int n_spans;
    const fg_adamw_span *spans;
    double b1, b2, step_size, bc2_sqrt, eps;
} adamw_job;

/* the elements [b, e) of the flat arrays: the part of every span that falls in it */
static void adamw_piece(void *ctx, int64_t b, int64_t e) {
    const adamw_job *j = ctx;
    for (int k = 0; k < j->n_spans; k++) {
        const fg_adamw_span *sp = &j->spans[k];
        const int64_t end = sp->offset + sp->count, lo = sp->offset > b ? sp->offset : b, hi = end < e ? end : e;
        if (lo >= hi) continue;
        const double df = sp->decay_factor;
        if (j->dt == FG_F32) {
            float *p = (float *)j->p + lo, *m = (float *)j->m + lo, *v = (float *)j->v + lo;
            const float *gr = (const float *)j->g + lo;
            adamw_f32(p, gr, j->gs, m, v, hi - lo, df, j->b1, j->b2, j->step_size, j->bc2_sqrt, j->eps);
        } else {
            double *p = (double *)j->p + lo, *m = (double *)j->m + lo, *v = (double *)j->v + lo;
            const double *gr = (const double *)j->g + lo;
            ADAMW_RANGE(double, p, gr, j->gs, m, v, hi - lo, df, j->b1, j->b2, j->step_size, j->bc2_sqrt, j->eps)
        }
    }
}

fg_status fg_cpu_optimizer_adamw(fg_dtype dt, void *p, const void *g, double gscale, void *m, void *v, int64_t n,
                                 int n_spans, const fg_adamw_span *spans, double b1, double b2, double step_size,
                                 double bc2_sqrt, double eps) {
    /* pieces of the flat arrays; ~1 ns per element (four arrays in, three out) */
    adamw_job j = {dt, p, m, v, g, gscale, n_spans, spans, b1, b2, step_size, bc2_sqrt, eps};
    fg_par_range(n, FG_PAR_CHUNK, 1.0, adamw_piece, &j);
    return FG_OK;
}
