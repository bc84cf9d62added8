/* cross_entropy.c — the CPU's cross-entropy kernels (ops/kernels.h's FG_KERNELS_CROSS_ENTROPY) and
 * the row kernels of the CPU's linear_cross_entropy (ops/cpu/cross_entropy.h). The math and the
 * ops' shells are in ops/cross_entropy.c, the GPU's kernels in cuda/cross_entropy.cu.
 *
 * float32 runs the vector kernels below over pieces of rows (ops/cpu/vmath.h): exp is fg_vexp
 * (ops/cpu/vexp.h), the row max a 16-lane max and the row sum a 16-lane sum in double, so that every
 * SIMD level and thread count gives the same bits; the loss is summed in row order afterwards.
 */
#include <math.h>
#include <string.h>

#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/vtanh.h"
#include "ops/cpu/kernel.h"
#include "ops/cpu/vmath.h"
#include "ops/kernels_cpu.h"

/* returns the summed loss of the counted rows (in double); fills lse for them (0 elsewhere) */
#define CROSS_ENTROPY_FWD_BODY(T)                                                                                      \
    double s = 0;                                                                                                      \
    for (int64_t r = 0; r < R; r++) {                                                                                  \
        if (targets[r] < 0) {                                                                                          \
            lse[r] = 0;                                                                                                \
            continue;                                                                                                  \
        }                                                                                                              \
        const T *xr = x + r * V;                                                                                       \
        T mx = xr[0];                                                                                                  \
        for (int64_t j = 1; j < V; j++) mx = xr[j] > mx ? xr[j] : mx;                                                  \
        double sum = 0;                                                                                                \
        for (int64_t j = 0; j < V; j++) sum += FG_EXP(xr[j] - mx);                                                     \
        T l = mx + (T)log(sum);                                                                                        \
        lse[r] = l;                                                                                                    \
        s += (double)l - (double)xr[targets[r]];                                                                       \
    }                                                                                                                  \
    *total = s;

/* forward: loss = sum_r (lse_r - x_r,t_r) / count
 *   ->  dx_rj += dloss / count * (exp(x_rj - lse_r) - [j == t_r])   for counted rows */
#define CROSS_ENTROPY_BWD_BODY(T)                                                                                      \
    T g = (T)g_;                                                                                                       \
    for (int64_t r = 0; r < R; r++) {                                                                                  \
        if (targets[r] < 0) continue;                                                                                  \
        const T *xr = x + r * V;                                                                                       \
        T *d = dx + r * V, l = lse[r];                                                                                 \
        for (int64_t j = 0; j < V; j++) d[j] += g * FG_EXP(xr[j] - l);                                                 \
        d[targets[r]] -= g;                                                                                            \
    }

static void cross_entropy_fwd_f64(double *total, double *lse, const double *x, const int32_t *targets, int64_t R,
                                  int64_t V) {
    CROSS_ENTROPY_FWD_BODY(double);
}
static void cross_entropy_bwd_f64(double *dx, const double *x, const double *lse, const int32_t *targets, int64_t R,
                                  int64_t V, double g_) {
    CROSS_ENTROPY_BWD_BODY(double);
}

/* ============================================================================================
 * float32: one row at a time, in three forms with the same bits
 *   max: lane i mod 16 keeps max(x_i, lane) = x_i > lane ? x_i : lane (from -inf), then the
 *        lanes meet in the tree of ops/cpu/vmath.h with the same rule (upper half first)
 *   lse = max + (float)log(S(exp(x_i - max)))      S: the 16-lane sum in double, exp: fg_vexp
 *   backward: dx_i += g * exp(x_i - lse), then dx_t -= g
 * ============================================================================================ */

typedef struct {
    float *lse_out, *dx; /* forward: writes lse_out; backward: adds into dx, reads lse */
    const float *x, *lse;
    const int32_t *t;
    int64_t V;
    float g;
    int set; /* backward: dx = g * exp(x - lse) instead of +=, and dx may be x itself (in place) */
} ce_job;

static inline float max2(float a, float b) { return a > b ? a : b; } /* the rule of max_ps(a, b) */

static void ce_fwd_row_scalar(const ce_job *j, int64_t r) {
    const int64_t V = j->V, V16 = (V + 15) & ~(int64_t)15;
    const float *x = j->x + r * V;
    float lm[16];
    for (int k = 0; k < 16; k++) lm[k] = -INFINITY;
    for (int64_t i = 0; i < V; i++) lm[i & 15] = max2(x[i], lm[i & 15]);
    for (int w = 8; w >= 1; w /= 2)
        for (int k = 0; k < w; k++) lm[k] = max2(lm[k + w], lm[k]);
    const float mx = lm[0];
    double l[16] = {0};
    for (int64_t i = 0; i < V16; i++) l[i & 15] += i < V ? (double)fg_expf_ref(x[i] - mx) : 0.0;
    j->lse_out[r] = mx + (float)log(fg_lanes16_sum(l));
}

static void ce_bwd_row_scalar(const ce_job *j, int64_t r) {
    const float *x = j->x + r * j->V, l = j->lse[r];
    float *d = j->dx + r * j->V;
    for (int64_t i = 0; i < j->V; i++) {
        const float e = j->g * fg_expf_ref(x[i] - l);
        d[i] = (j->set ? 0.0f : d[i]) + e;
    }
}

#if FG_SIMD_X86
/* the tree of max2 over lanes 0-7 (a) and 8-15 (b); AVX only, so that both levels can inline it */
static inline __attribute__((always_inline, target("avx"))) float max16_tree(__m256 a, __m256 b) {
    const __m256 m8 = _mm256_max_ps(b, a);
    const __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(m8, 1), _mm256_castps256_ps128(m8));
    const __m128 m2 = _mm_max_ps(_mm_movehl_ps(m4, m4), m4);
    return _mm_cvtss_f32(_mm_max_ss(_mm_shuffle_ps(m2, m2, 1), m2));
}

FG_TARGET_AVX512 static void ce_fwd_row_avx512(const ce_job *j, int64_t r) {
    const int64_t V = j->V;
    const float *x = j->x + r * V;
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < V; i += 16) {
        const __mmask16 k = V - i >= 16 ? 0xffff : fg_mask16(V - i);
        m = _mm512_mask_max_ps(m, k, fg_loadz16(k, x + i), m);
    }
    const __m256 m_hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(m), 1));
    const float mx = max16_tree(_mm512_castps512_ps256(m), m_hi);
    const __m512 vm = _mm512_set1_ps(mx);
    __m512d lo = _mm512_setzero_pd(), hi = lo;
    for (int64_t i = 0; i < V; i += 16) {
        const __mmask16 k = V - i >= 16 ? 0xffff : fg_mask16(V - i);
        const __m512 e = _mm512_maskz_mov_ps(k, fg_vexp_avx512(_mm512_sub_ps(fg_loadz16(k, x + i), vm)));
        lo = _mm512_add_pd(lo, fg_lo8_pd_avx512(e));
        hi = _mm512_add_pd(hi, fg_hi8_pd_avx512(e));
    }
    j->lse_out[r] = mx + (float)log(fg_lanes16_sum_avx512(lo, hi));
}

FG_TARGET_AVX512 static void ce_bwd_row_avx512(const ce_job *j, int64_t r) {
    const int64_t V = j->V;
    const float *x = j->x + r * V;
    float *d = j->dx + r * V;
    const __m512 vl = _mm512_set1_ps(j->lse[r]), vg = _mm512_set1_ps(j->g);
    for (int64_t i = 0; i < V; i += 16) {
        const __mmask16 k = V - i >= 16 ? 0xffff : fg_mask16(V - i);
        const __m512 e = fg_vexp_avx512(_mm512_sub_ps(fg_loadz16(k, x + i), vl));
        const __m512 base = j->set ? _mm512_setzero_ps() : fg_loadz16(k, d + i);
        _mm512_mask_storeu_ps(d + i, k, _mm512_add_ps(base, _mm512_mul_ps(vg, e)));
    }
}

/* AVX2: the 16 lanes as two vectors of 8; a short last block through a mask */
FG_TARGET_AVX2 static void ce_fwd_row_avx2(const ce_job *j, int64_t r) {
    const int64_t V = j->V;
    const float *x = j->x + r * V;
    __m256 m[2] = {_mm256_set1_ps(-INFINITY), _mm256_set1_ps(-INFINITY)};
    for (int64_t i = 0; i < V; i += 16)
        for (int h = 0; h < 2; h++) {
            const int64_t c0 = i + 8 * h, left = V - c0;
            if (left >= 8) {
                m[h] = _mm256_max_ps(_mm256_loadu_ps(x + c0), m[h]);
            } else if (left > 0) {
                const __m256 k = _mm256_castsi256_ps(fg_mask8_avx2(left));
                const __m256 v = _mm256_max_ps(_mm256_maskload_ps(x + c0, fg_mask8_avx2(left)), m[h]);
                m[h] = _mm256_blendv_ps(m[h], v, k);
            }
        }
    const float mx = max16_tree(m[0], m[1]);
    const __m256 vm = _mm256_set1_ps(mx);
    __m256d q[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    for (int64_t i = 0; i < V; i += 16) {
        __m256 e[2];
        for (int h = 0; h < 2; h++) {
            const int64_t c0 = i + 8 * h, left = V - c0;
            const __m256i k = fg_mask8_avx2(left < 0 ? 0 : left < 8 ? left : 8);
            const __m256 v = left >= 8 ? _mm256_loadu_ps(x + c0) : _mm256_maskload_ps(x + c0, k);
            e[h] = _mm256_and_ps(_mm256_castsi256_ps(k), fg_vexp_avx2(_mm256_sub_ps(v, vm)));
        }
        q[0] = _mm256_add_pd(q[0], fg_lo4_pd_avx2(e[0]));
        q[1] = _mm256_add_pd(q[1], fg_hi4_pd_avx2(e[0]));
        q[2] = _mm256_add_pd(q[2], fg_lo4_pd_avx2(e[1]));
        q[3] = _mm256_add_pd(q[3], fg_hi4_pd_avx2(e[1]));
    }
    j->lse_out[r] = mx + (float)log(fg_lanes16_sum_avx2(q));
}

FG_TARGET_AVX2 static void ce_bwd_row_avx2(const ce_job *j, int64_t r) {
    const int64_t V = j->V;
    const float *x = j->x + r * V, l = j->lse[r];
    float *d = j->dx + r * V;
    const __m256 vl = _mm256_set1_ps(l), vg = _mm256_set1_ps(j->g);
    int64_t i = 0;
    for (; i + 8 <= V; i += 8) {
        const __m256 e = fg_vexp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vl));
        const __m256 base = j->set ? _mm256_setzero_ps() : _mm256_loadu_ps(d + i);
        _mm256_storeu_ps(d + i, _mm256_add_ps(base, _mm256_mul_ps(vg, e)));
    }
    for (; i < V; i++) {
        const float e = j->g * fg_expf_ref(x[i] - l);
        d[i] = (j->set ? 0.0f : d[i]) + e;
    }
}
#endif /* FG_SIMD_X86 */

/* rows [b, e): lse of the counted rows (0 for ignored ones) */
static void ce_fwd_piece(void *ctx, int64_t b, int64_t e) {
    const ce_job *j = ctx;
    const fg_simd_level lv = fg_simd_active();
    for (int64_t r = b; r < e; r++) {
        if (j->t[r] < 0) {
            j->lse_out[r] = 0;
            continue;
        }
#if FG_SIMD_X86
        if (lv == FG_SIMD_AVX512) {
            ce_fwd_row_avx512(j, r);
            continue;
        }
        if (lv == FG_SIMD_AVX2) {
            ce_fwd_row_avx2(j, r);
            continue;
        }
#endif
        (void)lv;
        ce_fwd_row_scalar(j, r);
    }
}

/* rows [b, e) of the backward */
static void ce_bwd_piece(void *ctx, int64_t b, int64_t e) {
    const ce_job *j = ctx;
    const fg_simd_level lv = fg_simd_active();
    for (int64_t r = b; r < e; r++) {
        if (j->t[r] < 0) continue;
#if FG_SIMD_X86
        if (lv == FG_SIMD_AVX512)
            ce_bwd_row_avx512(j, r);
        else if (lv == FG_SIMD_AVX2)
            ce_bwd_row_avx2(j, r);
        else
#endif
            ce_bwd_row_scalar(j, r);
        (void)lv;
        j->dx[r * j->V + j->t[r]] -= j->g;
    }
}

/* the float32 form of cross_entropy_fwd_f64's contract; ~1.1 ns per element */
static void cross_entropy_fwd_f32(double *total, float *lse, const float *x, const int32_t *targets, int64_t R,
                                  int64_t V) {
    ce_job j = {.lse_out = lse, .x = x, .t = targets, .V = V};
    fg_par_range(R, fg_par_rows(V), 1.1 * (double)V, ce_fwd_piece, &j);
    double s = 0;
    for (int64_t r = 0; r < R; r++)
        if (targets[r] >= 0) s += (double)lse[r] - (double)x[r * V + targets[r]];
    *total = s;
}

/* the float32 form of cross_entropy_bwd_f64; ~0.6 ns per element */
static void cross_entropy_bwd_f32(float *dx, const float *x, const float *lse, const int32_t *targets, int64_t R,
                                  int64_t V, double g) {
    ce_job j = {.lse = lse, .dx = dx, .x = x, .t = targets, .V = V, .g = (float)g};
    fg_par_range(R, fg_par_rows(V), 0.6 * (double)V, ce_bwd_piece, &j);
}

/* cross_entropy_bwd_f32 into a zeroed dx, written over x itself: x (R, V) becomes
 * g * (softmax(x) - onehot) in the rows whose target is not -1 (the same bits as the zeroed-dx
 * form: 0 + v is v); ignored rows are left as they were. */
static void cross_entropy_bwd_inplace_f32(float *x, const float *lse, const int32_t *targets, int64_t R, int64_t V,
                                          double g) {
    ce_job j = {.lse = lse, .dx = x, .x = x, .t = targets, .V = V, .g = (float)g, .set = 1};
    fg_par_range(R, fg_par_rows(V), 0.6 * (double)V, ce_bwd_piece, &j);
}

/* ---- the CPU kernels (ops/kernels.h) ---- */
fg_status fg_cpu_cross_entropy_forward(fg_dtype dt, void *loss, void *lse, const void *x, const int32_t *targets,
                                       int64_t R, int64_t V, int64_t count) {
    double total;
    FG_DISPATCH(dt, cross_entropy_fwd, &total, lse, x, targets, R, V);
    const double mean = count ? total / (double)count : 0.0;
    if (dt == FG_F32)
        *(float *)loss = (float)mean;
    else
        *(double *)loss = mean;
    return FG_OK;
}

fg_status fg_cpu_cross_entropy_backward(fg_dtype dt, void *dx, const void *dloss, const void *x, const void *lse,
                                        const int32_t *targets, int64_t R, int64_t V, int64_t count) {
    const double g = (dt == FG_F32 ? (double)*(const float *)dloss : *(const double *)dloss) / (double)count;
    FG_DISPATCH(dt, cross_entropy_bwd, dx, x, lse, targets, R, V, g);
    return FG_OK;
}

/* ---- linear_cross_entropy, the CPU only (ops/cpu/cross_entropy.h) ---- */
#define LCE_CHUNK_ELEMS ((int64_t)1 << 24) /* logits per chunk: 64 MiB of float32 */
/* Fewer rows make the GEMMs slow: each chunk's products read all of w again (V C elements) for a
 * few rows of work, and the dw product's depth is the chunk's rows. */
#define LCE_MIN_ROWS 256

static int64_t lce_chunk_rows(int64_t R, int64_t V, int64_t chunk) {
    if (chunk > 0) return chunk < R ? chunk : (R > 0 ? R : 1);
    int64_t rc = LCE_CHUNK_ELEMS / (V > 0 ? V : 1);
    if (rc < LCE_MIN_ROWS) rc = LCE_MIN_ROWS;
    if (rc >= R) return R > 0 ? R : 1;
    /* the chunks that size needs, made equal (a short last chunk would run its three GEMMs far
     * below the others' speed): ceil(R / n) <= rc rows each, the last at most n - 1 rows shorter */
    const int64_t n = (R + rc - 1) / rc;
    return (R + n - 1) / n;
}

/* y[i] += a · x[i] over [b, e) */
typedef struct {
    void *y;
    const void *x;
    double a;
    fg_dtype dt;
} lce_axpy_job;

static void lce_axpy_piece(void *ctx, int64_t b, int64_t e) {
    const lce_axpy_job *j = ctx;
    if (j->dt == FG_F32) {
        fg_vaxpy_f32((float *)j->y + b, (float)j->a, (const float *)j->x + b, e - b);
    } else {
        double *y = (double *)j->y + b;
        const double *x = (const double *)j->x + b;
        for (int64_t i = 0; i < e - b; i++) y[i] += j->a * x[i];
    }
}

void fg__cpu_lce_axpy(fg_dtype dt, void *y, double a, const void *x, int64_t n) {
    lce_axpy_job j = {y, x, a, dt};
    fg_par_range(n, 1 << 16, 0.3, lce_axpy_piece, &j);
}

/* The logit softcap on a chunk, written as fg_softcap's kernels (ops/cpu/activation.c) compute it,
 * so that the fused op gives the composition's bits:
 *     forward   t = tanh(l / c)   z = c t            (z over l, t into its own buffer)
 *     backward  dl = 0 + dz (1 - t²)                 (over dz; "0 +" as into a zeroed gradient)
 * The tanh of the forward is kept, not recomputed (the composition evaluates it twice). */
typedef struct {
    void *z;
    void *t;
    double c;
    fg_dtype dt;
    int bwd;
} lce_cap_job;

#define LCE_CAP_BWD_BODY(T)                                                                                            \
    T *d = (T *)j->z + b;                                                                                              \
    const T *t = (const T *)j->t + b;                                                                                  \
    for (int64_t i = 0; i < e - b; i++) d[i] = (T)0 + d[i] * (1 - t[i] * t[i]);

static void lce_cap_piece(void *ctx, int64_t b, int64_t e) {
    const lce_cap_job *j = ctx;
    if (j->dt == FG_F32 && !j->bwd) { /* float32's tanh: ops/cpu/vtanh.h, as fg_softcap's */
        float *z = (float *)j->z + b, *t = (float *)j->t + b;
        const float c = (float)j->c;
        fg_vtanh_div_f32(t, z, c, e - b);
        for (int64_t i = 0; i < e - b; i++) z[i] = c * t[i];
    } else if (j->dt == FG_F32) {
        LCE_CAP_BWD_BODY(float);
    } else if (!j->bwd) {
        double *z = (double *)j->z + b, *t = (double *)j->t + b;
        for (int64_t i = 0; i < e - b; i++) {
            t[i] = tanh(z[i] / j->c);
            z[i] = j->c * t[i];
        }
    } else {
        LCE_CAP_BWD_BODY(double);
    }
}

/* forward (bwd 0) or backward (bwd 1) of the softcap over n elements; forward ~1 ns an element in
 * float32, ~8 in float64 */
static void lce_cap(fg_dtype dt, void *z, void *t, int64_t n, double c, int bwd) {
    lce_cap_job j = {z, t, c, dt, bwd};
    fg_par_range(n, FG_PAR_CHUNK, bwd ? 0.5 : (dt == FG_F32 ? 1.0 : 8.0), lce_cap_piece, &j);
}

/* fg_linear_cross_entropy's forward (ops/cpu/cross_entropy.h; the op and its math: ops/cross_entropy.c).
 * lse and xt (R) scratch; with a softcap the tanh of a chunk (Rc, V) too. */
fg_status fg__cpu_linear_cross_entropy_forward(fg_dtype dt, void *loss, const void *X, const void *W, const int32_t *t,
                                               int64_t R, int64_t C, int64_t V, int64_t count, double cap,
                                               int64_t chunk, void *dx1, void *dw1) {
    const size_t esz = fg_dtype_size(dt);
    const int64_t Rc = lce_chunk_rows(R, V, chunk), nchunk = R > 0 ? (R + Rc - 1) / Rc : 0;
    const int want_grad = dx1 || dw1;
    char *lse = fg_alloc(FG_CPU, (size_t)R * esz);
    char *logits = lse ? fg_alloc(FG_CPU, (size_t)(Rc * V) * esz) : NULL;
    /* float32 turns the logits into their gradient in place; float64 (gradient checks) uses a
     * second buffer and the plain backward kernel */
    char *dl = logits && want_grad && dt == FG_F64 ? fg_alloc(FG_CPU, (size_t)(Rc * V) * esz) : NULL;
    const int dl_ok = !want_grad || dt == FG_F32 || dl;
    char *th = logits && dl_ok && cap > 0 ? fg_alloc(FG_CPU, (size_t)(Rc * V) * esz) : NULL;
    const int th_ok = dl_ok && (cap == 0 || th);
    double *xt = logits && th_ok ? fg_alloc(FG_CPU, (size_t)(R > 0 ? R : 1) * sizeof *xt) : NULL;
    fg_status st = xt ? FG_OK : fg_last_status();
    const char *xp = X, *wp = W;
    const double one = 1.0;
    for (int64_t c = 0; c < nchunk && st == FG_OK; c++) {
        const int64_t r0 = c * Rc, rn = R - r0 < Rc ? R - r0 : Rc;
        const char *xc = xp + (size_t)(r0 * C) * esz;
        const int32_t *tc = t + r0;
        char *lg = logits, *ls = lse + (size_t)r0 * esz;
        /* logits_c (rn, V) = x_c (rn, C) @ wᵀ, as fg_linear computes it */
        st = fg_cpu_matmul_gemm(dt, 0, 1, rn, V, C, 1.0, xc, C, 0, wp, C, 0, 0.0, NULL, lg, V, 0, 1);
        if (st != FG_OK) break;
        /* z_c = cap tanh(logits_c / cap): the loss's logits from here on */
        if (cap > 0) lce_cap(dt, lg, th, rn * V, cap, 0);
        double unused;
        FG_DISPATCH(dt, cross_entropy_fwd, &unused, (void *)ls, (const void *)lg, tc, rn, V);
        for (int64_t r = 0; r < rn; r++)
            if (tc[r] >= 0)
                xt[r0 + r] =
                    dt == FG_F32 ? (double)((const float *)lg)[r * V + tc[r]] : ((const double *)lg)[r * V + tc[r]];
        if (!want_grad || count == 0) continue;
        /* dlogits_c = (softmax - onehot) / count, as into the composition's fresh (zero) gradient */
        char *d = lg;
        if (dt == FG_F32) {
            cross_entropy_bwd_inplace_f32((float *)lg, (const float *)ls, tc, rn, V, 1.0 / (double)count);
            /* an ignored row's gradient is zero: clear its logits */
            for (int64_t r = 0; r < rn; r++)
                if (tc[r] < 0) memset(lg + (size_t)(r * V) * esz, 0, (size_t)V * esz);
        } else {
            d = dl;
            memset(d, 0, (size_t)(rn * V) * esz);
            st = fg_cpu_cross_entropy_backward(dt, d, &one, lg, ls, tc, rn, V, count);
        }
        /* that was dz_c; z = cap t  ->  dlogits_c = dz_c (1 - t²) */
        if (st == FG_OK && cap > 0) lce_cap(dt, d, th, rn * V, cap, 1);
        /* dx1_c (rn, C) = dlogits_c (rn, V) @ w (V, C);  dw1 (V, C) += dlogits_cᵀ (V, rn) @ x_c (rn, C) */
        if (st == FG_OK && dx1)
            st = fg_cpu_matmul_gemm(dt, 0, 0, rn, C, V, 1.0, d, V, 0, wp, C, 0, 0.0, NULL,
                                    (char *)dx1 + (size_t)(r0 * C) * esz, C, 0, 1);
        if (st == FG_OK && dw1)
            st = fg_cpu_matmul_gemm(dt, 1, 0, V, C, rn, 1.0, d, V, 0, xc, C, 0, c == 0 ? 0.0 : 1.0, NULL, dw1, C, 0, 1);
    }
    if (st == FG_OK) {
        /* the loss in row order, as cross_entropy_fwd sums it */
        double s = 0;
        for (int64_t r = 0; r < R; r++)
            if (t[r] >= 0) {
                const double l = dt == FG_F32 ? (double)((const float *)lse)[r] : ((const double *)lse)[r];
                s += l - xt[r];
            }
        const double mean = count ? s / (double)count : 0.0;
        if (dt == FG_F32)
            *(float *)loss = (float)mean;
        else
            *(double *)loss = mean;
        if (count == 0 && dx1) memset(dx1, 0, (size_t)(R * C) * esz);
        if (count == 0 && dw1) memset(dw1, 0, (size_t)(V * C) * esz);
    }
    if (xt) fg_free(FG_CPU, xt);
    if (th) fg_free(FG_CPU, th);
    if (dl) fg_free(FG_CPU, dl);
    if (logits) fg_free(FG_CPU, logits);
    if (lse) fg_free(FG_CPU, lse);
    return st;
}
