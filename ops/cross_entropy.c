/* cross_entropy.c — fused softmax + negative log-likelihood, mean over the counted rows.
 *
 * Legend: logits is (..., V), seen as R = numel / V rows of V classes; targets holds R int32
 * class ids (-1 = ignore the row); out is (1): the mean loss over the `count` rows whose target is
 * not -1 (0 when there are none).
 * saved for backward: X (logits, contiguous), lse (R) = per-row logsumexp, a copy of targets in
 * the logits' device memory (the kernels of every device read them there).
 * The probabilities (R, V) are never stored; the backward recomputes exp(x - lse).
 *
 *   lse_r = max_r + log sum_j exp(x_rj - max_r)        loss = sum_r (lse_r - x_r,t_r) / count
 *   d loss / d x_rj = (softmax(x_r)_j - [j == t_r]) / count
 *
 * float32 runs the vector kernels below over pieces of rows (ops/cpu/vmath.h): exp is fg_vexp
 * (ops/cpu/vexp.h), the row max a 16-lane max and the row sum a 16-lane sum in double, so that every
 * SIMD level and thread count gives the same bits; the loss is summed in row order afterwards.
 */
#include <string.h>

#include "ops/kernels_cpu.h"
#include "ops/ops_internal.h"
#include "ops/cpu/vmath.h"

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

/* ---- the op, for every device ---- */

/* The targets' copy in device d's memory (R int32 ids; freed by targets_free[d]). */
static void targets_free_cpu(void *p) { fg_free(FG_CPU, p); }
static void targets_free_cuda(void *p) { fg_free(FG_CUDA, p); }
static void (*const targets_free[FG_DEVICE_COUNT])(void *) = {
    [FG_CPU] = targets_free_cpu, [FG_CUDA] = targets_free_cuda};

static int32_t *targets_copy(const char *op, fg_device d, const int32_t *targets, int64_t R) {
    const size_t nbytes = (size_t)R * sizeof(int32_t);
    int32_t *t = fg_alloc(d, nbytes ? nbytes : 1);
    if (!t) {
        fg_error(FG_ERR_OOM, "%s: out of memory for %zu bytes of targets on %s", op, nbytes, fg_device_name(d));
        return NULL;
    }
    if (nbytes && d == FG_CPU)
        memcpy(t, targets, nbytes);
    else if (nbytes)
        fg_backend(d)->copy_from_host(t, targets, nbytes); /* waits for the copy */
    return t;
}

/* What the backward needs. targets is the node's ctx (ctx_free frees it). */
typedef struct {
    fg_tensor *x, *lse;
    const int32_t *targets;
    int64_t R, V, count;
} cross_entropy_state;

/* inputs {logits} */
static fg_status cross_entropy_backward(fg_node *n) {
    const cross_entropy_state *s = FG_NODE_STATE(n, cross_entropy_state);
    fg_tensor *dx;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    if (!dx || s->count == 0) return FG_OK; /* nothing counted: the loss is the constant 0 */
    const fg_kernels *k = fg_kernels_for(s->x->device, n->op);
    if (!k) return fg_last_status();
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    fg_status st = k->cross_entropy.backward(s->x->dtype, fg_data(dx), fg_data(dout), fg_data(s->x), fg_data(s->lse),
                                             s->targets, s->R, s->V, s->count);
    fg_release(dout);
    return st;
}

fg_tensor *fg_cross_entropy(fg_tensor *logits, const int32_t *targets) {
    static const char op[] = "cross_entropy";
    char b[FG_SHAPE_BUF];
    if (fg_op_check(op, "logits", logits) != FG_OK) return NULL;
    if (logits->ndim < 1 || logits->shape[logits->ndim - 1] < 1) {
        fg_error(FG_ERR_SHAPE, "%s: logits %s must be (..., V) with V >= 1", op, FG_SHP(logits, b));
        return NULL;
    }
    int64_t V = logits->shape[logits->ndim - 1], R = fg_numel(logits) / V, count = 0;
    if (R > 0 && !targets) {
        fg_error(FG_ERR_ARG, "%s: targets is NULL for logits %s", op, FG_SHP(logits, b));
        return NULL;
    }
    for (int64_t r = 0; r < R; r++) {
        if (targets[r] < -1 || targets[r] >= V) {
            fg_error(FG_ERR_ARG, "%s: target %d in row %lld is outside [-1, %lld) for logits %s", op, (int)targets[r],
                     (long long)r, (long long)V, FG_SHP(logits, b));
            return NULL;
        }
        count += targets[r] >= 0;
    }
    const fg_kernels *k = fg_kernels_for(logits->device, op);
    if (!k) return NULL;
    if (!k->cross_entropy.forward) {
        fg_op_no_kernel(op, k->device);
        return NULL;
    }

    const fg_device dev = logits->device;
    const int64_t one = 1;
    int32_t *t = targets_copy(op, dev, targets, R);
    fg_tensor *X = t ? fg_op_contiguous(logits) : NULL;
    fg_tensor *lse = X ? fg_empty(logits->dtype, dev, 1, &R) : NULL;
    fg_tensor *out = lse ? fg_empty(logits->dtype, dev, 1, &one) : NULL;
    if (out &&
        k->cross_entropy.forward(logits->dtype, fg_data(out), fg_data(lse), fg_data(X), t, R, V, count) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    fg_node *node = out ? fg_record(out, op, cross_entropy_backward, 1, (fg_tensor *[]){logits}) : NULL;
    if (node) {
        cross_entropy_state *s = FG_NODE_STATE(node, cross_entropy_state);
        s->x = fg_node_keep(node, X);
        s->lse = fg_node_keep(node, lse);
        s->targets = t;
        s->R = R, s->V = V, s->count = count;
        node->ctx = t; /* freed with the node */
        node->ctx_free = targets_free[dev];
    } else if (t) {
        targets_free[dev](t);
    }
    fg_release(X);
    fg_release(lse);
    return out;
}

/* ============================================================================================
 * linear_cross_entropy: the LM head and the loss in one op, the (R, V) logits never all live
 *
 * Legend: x (..., C) seen as R rows, w (V, C) (the head's weight, nn.Linear's layout), targets R
 * ids (-1 = ignore); out (1) = cross_entropy(x @ wᵀ, targets), the mean over the `count` counted
 * rows. Rows go in chunks of Rc (chunk_rows, or by default the fewest chunks of about
 * LCE_CHUNK_ELEMS logits, at least LCE_MIN_ROWS rows, made equal):
 *     logits_c (Rc, V) = x_c @ wᵀ                              (one GEMM per chunk)
 *     lse_r = logsumexp(logits_c row r); loss = sum_r (lse_r - logits_r,t_r) / count
 * and, when a gradient is wanted, the gradient for dloss = 1 right away, from the chunk still in
 * the cache (as llm.c's fused classifier does), so nothing has to be recomputed later:
 *     dlogits_c = (softmax(logits_c) - onehot) / count          (float32: over logits_c, in place)
 *     dx1_c (Rc, C) = dlogits_c @ w         dw1 (V, C) += dlogits_cᵀ @ x_c
 * saved for backward: dx1 (R, C) and dw1 (V, C), the gradients for dloss = 1. The backward is
 * linear in dloss:  dx += dloss · dx1,  dw += dloss · dw1  (exact when dloss is 1 or a power of 2).
 *
 * Same numbers as fg_cross_entropy(fg_linear(x, w, NULL), targets): the same GEMM shapes and row
 * kernels per row; the loss summed in row order. With one chunk (R ≤ Rc) the gradients are the
 * composition's too (the composition's backward adds into zeroed gradients); with more chunks, dw
 * sums the chunks' products in chunk order, a different rounding of the same sum.
 * The CPU only (float32, float64); on other devices the op is the composition.
 * ============================================================================================ */
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

static void lce_axpy(fg_dtype dt, void *y, double a, const void *x, int64_t n) {
    lce_axpy_job j = {y, x, a, dt};
    fg_par_range(n, 1 << 16, 0.3, lce_axpy_piece, &j);
}

typedef struct {
    fg_tensor *dx1, *dw1; /* the gradients for dloss = 1 (NULL where the input wants none) */
} linear_cross_entropy_state;

/* inputs {x, w} */
static fg_status linear_cross_entropy_backward(fg_node *n) {
    const linear_cross_entropy_state *s = FG_NODE_STATE(n, linear_cross_entropy_state);
    fg_tensor *dx, *dw;
    FG_TRY(fg_grad_get(n->inputs[0], &dx));
    FG_TRY(fg_grad_get(n->inputs[1], &dw));
    if (!dx && !dw) return FG_OK;
    fg_tensor *dout = fg_op_grad_out(n);
    if (!dout) return fg_last_status();
    const double g = fg_get(dout, 0);
    fg_release(dout);
    /* forward: out = cross_entropy(x @ wᵀ)  ->  dx += dloss · dx1,  dw += dloss · dw1 */
    if (dx && s->dx1) lce_axpy(dx->dtype, fg_data(dx), g, fg_data(s->dx1), fg_numel(dx));
    if (dw && s->dw1) lce_axpy(dw->dtype, fg_data(dw), g, fg_data(s->dw1), fg_numel(dw));
    return FG_OK;
}

/* The forward on the CPU (see above). X (R, C) and W (V, C) contiguous; dx1 / dw1 NULL when not
 * wanted; lse and xt (R) scratch. */
static fg_status lce_forward_cpu(fg_dtype dt, void *loss, fg_tensor *X, fg_tensor *W, const int32_t *t, int64_t R,
                                 int64_t C, int64_t V, int64_t count, int64_t chunk, fg_tensor *dx1, fg_tensor *dw1) {
    const size_t esz = fg_dtype_size(dt);
    const int64_t Rc = lce_chunk_rows(R, V, chunk), nchunk = R > 0 ? (R + Rc - 1) / Rc : 0;
    const int want_grad = dx1 || dw1;
    fg_tensor *lse = fg_empty(dt, FG_CPU, 1, &R);
    fg_tensor *logits = lse ? fg_empty(dt, FG_CPU, 2, (int64_t[]){Rc, V}) : NULL;
    /* float32 turns the logits into their gradient in place; float64 (gradient checks) uses a
     * second buffer and the plain backward kernel */
    fg_tensor *dl = logits && want_grad && dt == FG_F64 ? fg_empty(dt, FG_CPU, 2, (int64_t[]){Rc, V}) : NULL;
    const int dl_ok = !want_grad || dt == FG_F32 || dl;
    double *xt = logits && dl_ok ? fg_alloc(FG_CPU, (size_t)(R > 0 ? R : 1) * sizeof *xt) : NULL;
    fg_status st = xt ? FG_OK : fg_last_status();
    const char *xp = X ? fg_data(X) : NULL, *wp = fg_data(W);
    const double one = 1.0;
    for (int64_t c = 0; c < nchunk && st == FG_OK; c++) {
        const int64_t r0 = c * Rc, rn = R - r0 < Rc ? R - r0 : Rc;
        const char *xc = xp + (size_t)(r0 * C) * esz;
        const int32_t *tc = t + r0;
        char *lg = fg_data(logits), *ls = (char *)fg_data(lse) + (size_t)r0 * esz;
        /* logits_c (rn, V) = x_c (rn, C) @ wᵀ, as fg_linear computes it */
        st = fg_cpu_matmul_gemm(dt, 0, 1, rn, V, C, 1.0, xc, C, 0, wp, C, 0, 0.0, NULL, lg, V, 0, 1);
        if (st != FG_OK) break;
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
            d = fg_data(dl);
            memset(d, 0, (size_t)(rn * V) * esz);
            st = fg_cpu_cross_entropy_backward(dt, d, &one, lg, ls, tc, rn, V, count);
        }
        /* dx1_c (rn, C) = dlogits_c (rn, V) @ w (V, C);  dw1 (V, C) += dlogits_cᵀ (V, rn) @ x_c (rn, C) */
        if (st == FG_OK && dx1)
            st = fg_cpu_matmul_gemm(dt, 0, 0, rn, C, V, 1.0, d, V, 0, wp, C, 0, 0.0, NULL,
                                    (char *)fg_data(dx1) + (size_t)(r0 * C) * esz, C, 0, 1);
        if (st == FG_OK && dw1)
            st = fg_cpu_matmul_gemm(dt, 1, 0, V, C, rn, 1.0, d, V, 0, xc, C, 0, c == 0 ? 0.0 : 1.0, NULL, fg_data(dw1),
                                    C, 0, 1);
    }
    if (st == FG_OK) {
        /* the loss in row order, as cross_entropy_fwd sums it */
        double s = 0;
        for (int64_t r = 0; r < R; r++)
            if (t[r] >= 0) {
                const double l =
                    dt == FG_F32 ? (double)((const float *)fg_data(lse))[r] : ((const double *)fg_data(lse))[r];
                s += l - xt[r];
            }
        const double mean = count ? s / (double)count : 0.0;
        if (dt == FG_F32)
            *(float *)loss = (float)mean;
        else
            *(double *)loss = mean;
        if (count == 0 && dx1) memset(fg_data(dx1), 0, fg_nbytes(dx1));
        if (count == 0 && dw1) memset(fg_data(dw1), 0, fg_nbytes(dw1));
    }
    if (xt) fg_free(FG_CPU, xt);
    fg_release(dl);
    fg_release(logits);
    fg_release(lse);
    return st;
}

fg_tensor *fg_linear_cross_entropy(fg_tensor *x, fg_tensor *w, const int32_t *targets, int64_t chunk_rows) {
    static const char op[] = "linear_cross_entropy";
    char b1[FG_SHAPE_BUF], b2[FG_SHAPE_BUF];
    if (fg_op_check(op, "x", x) != FG_OK || fg_op_check_like(op, "w", w, "x", x) != FG_OK) return NULL;
    if (x->ndim < 1 || w->ndim != 2 || w->shape[1] != x->shape[x->ndim - 1] || w->shape[0] < 1) {
        fg_error(FG_ERR_SHAPE, "%s: x %s and w %s do not fit: need x (..., C) and w (V, C) with V >= 1", op,
                 FG_SHP(x, b1), FG_SHP(w, b2));
        return NULL;
    }
    if (chunk_rows < 0) {
        fg_error(FG_ERR_ARG, "%s: chunk_rows %lld must not be negative (0: the default)", op, (long long)chunk_rows);
        return NULL;
    }
    if (x->device != FG_CPU) { /* the composition, on every other device */
        fg_tensor *logits = fg_linear(x, w, NULL);
        fg_tensor *loss = logits ? fg_cross_entropy(logits, targets) : NULL;
        fg_release(logits);
        return loss;
    }
    const int64_t V = w->shape[0], C = w->shape[1], R = fg_numel(x) / (C > 0 ? C : 1);
    int64_t count = 0;
    if (R > 0 && !targets) {
        fg_error(FG_ERR_ARG, "%s: targets is NULL for x %s", op, FG_SHP(x, b1));
        return NULL;
    }
    for (int64_t r = 0; r < R; r++) {
        if (targets[r] < -1 || targets[r] >= V) {
            fg_error(FG_ERR_ARG, "%s: target %d in row %lld is outside [-1, %lld) for w %s", op, (int)targets[r],
                     (long long)r, (long long)V, FG_SHP(w, b2));
            return NULL;
        }
        count += targets[r] >= 0;
    }
    const int grad = fg_grad_enabled(), gx = grad && x->requires_grad, gw = grad && w->requires_grad;
    const int64_t one = 1;
    fg_tensor *X = fg_op_contiguous(x);
    fg_tensor *W = X ? fg_op_contiguous(w) : NULL;
    fg_tensor *out = W ? fg_empty(x->dtype, FG_CPU, 1, &one) : NULL;
    fg_tensor *dx1 = out && gx ? fg_empty(x->dtype, FG_CPU, 2, (int64_t[]){R, C}) : NULL;
    fg_tensor *dw1 = out && gw ? fg_empty(x->dtype, FG_CPU, 2, (int64_t[]){V, C}) : NULL;
    if (out && ((gx && !dx1) || (gw && !dw1))) {
        fg_release(out);
        out = NULL;
    }
    if (out && lce_forward_cpu(x->dtype, fg_data(out), X, W, targets, R, C, V, count, chunk_rows, dx1, dw1) != FG_OK) {
        fg_release(out);
        out = NULL;
    }
    fg_node *node = out ? fg_record(out, op, linear_cross_entropy_backward, 2, (fg_tensor *[]){x, w}) : NULL;
    if (node) {
        linear_cross_entropy_state *s = FG_NODE_STATE(node, linear_cross_entropy_state);
        s->dx1 = fg_node_keep(node, dx1);
        s->dw1 = fg_node_keep(node, dw1);
    }
    fg_release(dx1);
    fg_release(dw1);
    fg_release(X);
    fg_release(W);
    return out;
}
