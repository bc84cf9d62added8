/* attention_flash.c — FlashAttention on the CPU: tiled forward with an online softmax, and a
 * backward that recomputes the attention weights from the saved logsumexp (FlashAttention-2's
 * loop order). Nothing of size Nq×Nk is ever allocated.
 *
 * Legend: B batch, H heads, H_kv K/V heads (G = H / H_kv), Nq queries, Nk keys, d head dim;
 * bq = block_q, bk = block_k.
 *   q (B, H, Nq, d); k, v (B, H_kv, Nk, d); o (B, H, Nq, d); lse (B, H, Nq)
 *   query head h reads K/V head h / G; masks and variants as in ops/attention.h.
 *
 * Every tile (query block i, key block j) is first classified (fg_attn_tile_kind: causal, window
 * and block mask): MASKED tiles are skipped without touching K, V or the scores; FULL tiles need
 * no per-element mask; PARTIAL ones are masked element by element.
 * Forward, for every (b, h) and every query block Qi (bq rows), keys in blocks Kj, Vj (bk rows):
 *     S  = variants(scale · Qi Kjᵀ)              (bq × bk tile, masked entries -inf)
 *     m' = max(m, rowmax S);  P = exp(S − m');  l' = exp(m − m') l + rowsum P
 *     Oi = exp(m − m') Oi + dropout(P) Vj        (the accumulator lives in o itself)
 *   then Oi /= l and L = m + log l  (saved for backward: O, L — not P).
 * Backward, for every (b, K/V head g), the query heads h of group g (so dK, dV of g are summed
 * inside one work item); D = rowsum(dO ∘ O) once per h; key blocks outer, query blocks inner:
 *     S1 = scale · Qi Kjᵀ;  S = variants(S1), Gt = ∂S/∂S1 (only with softcap or score_mod)
 *     P  = exp(S − L)                            (recompute: the naive kernel stored P)
 *     Z  = dropout mask / (1 − p) (regenerated from Philox, never stored)
 *     dVj += (P∘Z)ᵀ dOi
 *     dP  = (dOi Vjᵀ) ∘ Z
 *     dS  = P ∘ (dP − D) [∘ Gt]     (D_i = Σ_j P_ij dP_ij = dO_i · O_i, dropout included)
 *     dQi += scale · dS Kj;  dKj += scale · dSᵀ Qi
 *
 * Threads. The work splits into items that share nothing but the read-only inputs: a query block
 * of one (b, h) in the forward (its rows of O and lse), one (b, K/V head) in the backward (its dK,
 * dV rows and the dQ rows of its G query heads). The library's pool (ops/cpu/threadpool.h) hands them
 * to its threads, costly ones first (causal: the last query blocks). Each item computes its outputs
 * in a fixed order — key blocks in increasing order, and inside a product every sum in index order
 * — so the results are bit-identical for any thread count and any schedule (float32 tile kernels:
 * tests/test_simd.c, flash_is_bit_identical_for_any_thread_count_and_instruction_set; the BLAS
 * path as far as BLAS is deterministic for one thread). Scratch is per thread, one item's tiles for each thread
 * that can take part, taken from fg_alloc before the items start (peak scratch: threads × tiles). User
 * callbacks (score_mod, mask) are called from the calling thread only: a problem that has them
 * runs its items serially, in order, since a callback need not be thread-safe. The backward has
 * B·H_kv items: with fewer than there are threads (multi-query attention at batch 1) threads idle;
 * splitting an item's key blocks would need dQ partials per chunk summed in a fixed order (not done:
 * the shapes here have B·H_kv >= 8).
 *
 * Two inner kernels:
 *   float32 (the default): register-blocked tile products (ops/cpu/smallgemm.h) and a vectorized exp
 *     (ops/cpu/vexp.h), AVX-512 or AVX2 chosen at run time, the same bits on either (and on the plain
 *     C path). The forward computes the transposed tile Sᵀ = scale · Kj Qiᵀ, with Qiᵀ packed once
 *     per item, so that the online softmax runs down the
 *     columns of Sᵀ — every query row in its own vector lane: no horizontal max or sum, and each
 *     row's sum is taken key by key in order whatever the lane count. P·V then reads Pᵀ with
 *     swapped strides. The backward keeps the row-major tile (S = scale · Qi Kjᵀ, with Kjᵀ and
 *     Vjᵀ packed once per key block) so the variants code (fg_attn_score_tile) applies as is;
 *     the forward hands a tile to it (and to dropout) transposed when a variant or dropout is on.
 *   float64, and float32 when FG_ATTN_GEMM=blas is set in the environment (for comparing) or the
 *     CPU has no AVX2+FMA: each tile product is one BLAS call, BLAS set to one thread while the
 *     pool runs. (Measured on the 2-core Xeon here, per core: 27 / 45 GFLOP/s forward / backward
 *     through BLAS tiles, 110-120 / 130-140 through the AVX-512 tile kernels.)
 *
 * Precision in float32. Two quantities are kept better than float32 because their errors do not
 * average out: L is evaluated in double and its rounding remainder kept as lse_lo (one more float
 * per row), so exp((S − L) − lse_lo) is as precise near the row max as naive's stored P even when
 * |L| is large; and D is summed in double, because dS = P ∘ (dP − D) cancels for a peaked row.
 * Without them, flash float32 gradients were up to ~6x less accurate than naive float32 on
 * peaked softmaxes (tests/test_attention.c, flash_f32_error_at_most_twice_naive_f32_error).
 *
 * The BLAS path is a template: the file includes itself twice, once per dtype (T = float, then
 * double); the float32 tile kernels follow it.
 */
#ifndef FG_ATTN_FLASH_TEMPLATE

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ops/attention.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/smallgemm.h"
#include "ops/cpu/threadpool.h"
#include "ops/cpu/vexp.h"
#include "tensor/alloc.h"
#include "tensor/philox.h"

/* Per-thread scratch of one kernel call: one buffer per thread that can take part, allocated by
 * flash_run before the items start (not lazily by whichever thread gets an item first: which
 * threads get items depends on the schedule, and a lazily taken buffer would make the caching
 * allocator's traffic — and whether a warm step asks the system for memory — depend on it too). */
typedef struct {
    void *buf[FG_POOL_MAX_THREADS];
    size_t bytes;
    atomic_int oom; /* a late buffer (flash_scratch_get) could not be had */
} flash_scratch;

/* Worker w's buffer. Always allocated up front — unless another thread raised the pool's thread
 * count between flash_run's allocation and the run; such a worker takes its buffer here. NULL
 * (and oom set) when memory is short: the item must then do nothing, and flash_run reports it. */
static void *flash_scratch_get(flash_scratch *s, int w) {
    if (!s->buf[w] && !(s->buf[w] = fg_alloc(FG_CPU, s->bytes))) atomic_store(&s->oom, 1);
    return s->buf[w];
}

static void flash_scratch_free(flash_scratch *s) {
    for (int w = 0; w < FG_POOL_MAX_THREADS; w++)
        if (s->buf[w]) fg_free(FG_CPU, s->buf[w]);
}

/* Run a kernel's n items with s->bytes of scratch per thread: on the pool, or in order on this
 * thread when user callbacks are present. Frees the scratch after. */
static fg_status flash_run(int64_t n, fg_pool_fn fn, void *ctx, flash_scratch *s, const fg_attn_problem *pr,
                           unsigned flags, const char *what) {
    const int serial = pr->custom.score_mod || pr->custom.mask;
    int64_t nbuf = serial ? 1 : fg_pool_threads(); /* workers are numbered below min(threads, n) */
    if (nbuf > n) nbuf = n;
    for (int64_t w = 0; w < nbuf; w++) {
        s->buf[w] = fg_alloc(FG_CPU, s->bytes);
        if (!s->buf[w]) {
            flash_scratch_free(s);
            return fg_error(FG_ERR_OOM, "flash attention %s: cannot allocate %zu bytes of scratch", what, s->bytes);
        }
    }
    if (serial)
        for (int64_t i = 0; i < n; i++) fn(ctx, i, 0);
    else
        fg_pool_run(n, fn, ctx, flags);
    flash_scratch_free(s);
    if (atomic_load(&s->oom))
        return fg_error(FG_ERR_OOM, "flash attention %s: cannot allocate %zu bytes of scratch", what, s->bytes);
    return FG_OK;
}

/* Item i of the forward -> (b·H + h, query block), the last query blocks first: under a causal
 * mask they see the most keys, and taking them first evens out the threads' loads. */
static void flash_fwd_item(int64_t item, int64_t BH, int64_t nqb, int64_t *bh, int64_t *qb) {
    *qb = nqb - 1 - item / BH;
    *bh = item % BH;
}

/* float32 through the BLAS path: with FG_ATTN_GEMM=blas in the environment (read once), and on a
 * CPU without AVX2+FMA (or not x86), where the plain C tile kernels would compute every
 * multiply-add with a call to fmaf — they stay the bit-exact reference that tests force with
 * fg_simd_set(FG_SIMD_SCALAR) on vector hardware. */
static int flash_f32_uses_blas(void) {
    static atomic_int v = -1;
    int x = atomic_load_explicit(&v, memory_order_relaxed);
    if (x < 0) {
        const char *e = getenv("FG_ATTN_GEMM");
        x = e && !strcmp(e, "blas");
        atomic_store_explicit(&v, x, memory_order_relaxed);
    }
    return x || fg_simd_detect() == FG_SIMD_SCALAR;
}

#define FG_ATTN_FLASH_TEMPLATE 1

#define T float
#define SFX(name) name##_f32
#define GEMM cblas_sgemm
#define EXP expf
#include "ops/attention_flash.c"
#undef T
#undef SFX
#undef GEMM
#undef EXP

#define T double
#define SFX(name) name##_f64
#define GEMM cblas_dgemm
#define EXP exp
#include "ops/attention_flash.c"
#undef T
#undef SFX
#undef GEMM
#undef EXP

#undef FG_ATTN_FLASH_TEMPLATE

/* =============================================================================================
 * float32 tile kernels
 * ============================================================================================= */

/* ---- the online softmax down the columns of Sᵀ ----
 * ST is nk × nq (row j: key j0 + j; column r: query i0 + r), row stride ld. For every column r:
 *     m' = max(m_r, max_j ST[j][r]);  m̃ = m' (0 while m' = −inf, so that exp(−inf − m̃) = 0)
 *     ST[j][r] = exp(ST[j][r] − m̃);  alpha_r = exp(m_r − m̃);  l_r = alpha_r·l_r + Σ_j ST[j][r]
 * (the sum in key order j = 0, 1, ...), m_r = m'. The same step as fg_attn_online_update_f32, with
 * the vectorized exp; alpha is 0 rather than 1 while a row has seen no key (O and l are 0 then). */
static void softmax_cols_scalar(float *ST, int64_t ld, int64_t nk, int64_t r0, int64_t r1, float *m, float *l,
                                float *alpha) {
    for (int64_t r = r0; r < r1; r++) {
        float mx = m[r];
        for (int64_t j = 0; j < nk; j++) {
            const float s = ST[j * ld + r];
            mx = s > mx ? s : mx; /* a NaN score does not become the max (as vmaxps(s, mx)) */
        }
        const float ms = mx == -INFINITY ? 0.0f : mx;
        const float a = fg_expf_ref(m[r] - ms);
        float sum = 0;
        for (int64_t j = 0; j < nk; j++) {
            const float p = fg_expf_ref(ST[j * ld + r] - ms);
            ST[j * ld + r] = p;
            sum += p;
        }
        l[r] = a * l[r] + sum;
        m[r] = mx;
        alpha[r] = a;
    }
}

/* P = exp((S − L_r) − lo_r) along the rows of the row-major tile S (nq × nk, stride ld); rows with
 * L = −inf (they see no key) become 0. */
static void exp_rows_scalar(float *S, int64_t ld, int64_t r0, int64_t r1, int64_t nk, const float *L,
                            const float *lo) {
    for (int64_t r = r0; r < r1; r++) {
        float *row = S + r * ld;
        const float Lr = L[r], lr = lo ? lo[r] : 0.0f;
        if (Lr == -INFINITY) {
            for (int64_t j = 0; j < nk; j++) row[j] = 0;
            continue;
        }
        for (int64_t j = 0; j < nk; j++) row[j] = fg_expf_ref((row[j] - Lr) - lr);
    }
}

#if FG_SIMD_X86
/* Four vectors of columns at a time: each column's max and sum are chains of dependent operations
 * down the rows (the sum must stay in key order), so four independent chains keep the vector units
 * busy where one would wait on its own latency. */
FG_TARGET_AVX512 static void softmax_cols_avx512(float *ST, int64_t ld, int64_t nk, int64_t nq, float *m, float *l,
                                                 float *alpha) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
    for (int64_t r0 = 0; r0 < nq; r0 += 64) {
        __mmask16 km[4];
        __m512 mo[4], mx[4], ms[4], sum[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const int64_t left = nq - r0 - 16 * v;
            km[v] = left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
            mo[v] = _mm512_maskz_loadu_ps(km[v], m + r0 + 16 * v);
            mx[v] = mo[v];
            sum[v] = zero;
        }
        for (int64_t j = 0; j < nk; j++) {
            const float *sp = ST + j * ld + r0;
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) mx[v] = _mm512_max_ps(_mm512_maskz_loadu_ps(km[v], sp + 16 * v), mx[v]);
        }
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) ms[v] = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mx[v], ninf, _CMP_EQ_OQ), mx[v], zero);
        for (int64_t j = 0; j < nk; j++) {
            float *sp = ST + j * ld + r0;
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                const __m512 p = fg_vexp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(km[v], sp + 16 * v), ms[v]));
                _mm512_mask_storeu_ps(sp + 16 * v, km[v], p);
                sum[v] = _mm512_add_ps(sum[v], p);
            }
        }
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const int64_t r = r0 + 16 * v;
            const __m512 a = fg_vexp_avx512(_mm512_sub_ps(mo[v], ms[v]));
            const __m512 lo = _mm512_maskz_loadu_ps(km[v], l + r);
            _mm512_mask_storeu_ps(l + r, km[v], _mm512_add_ps(_mm512_mul_ps(a, lo), sum[v]));
            _mm512_mask_storeu_ps(m + r, km[v], mx[v]);
            _mm512_mask_storeu_ps(alpha + r, km[v], a);
        }
    }
}

FG_TARGET_AVX512 static void exp_rows_avx512(float *S, int64_t ld, int64_t nq, int64_t nk, const float *L,
                                             const float *lo) {
    for (int64_t r = 0; r < nq; r++) {
        float *row = S + r * ld;
        if (L[r] == -INFINITY) {
            memset(row, 0, (size_t)nk * sizeof(float));
            continue;
        }
        const __m512 Lr = _mm512_set1_ps(L[r]), lr = _mm512_set1_ps(lo ? lo[r] : 0.0f);
        for (int64_t j = 0; j < nk; j += 16) {
            const __mmask16 km = nk - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nk - j)) - 1);
            const __m512 s = _mm512_maskz_loadu_ps(km, row + j);
            _mm512_mask_storeu_ps(row + j, km, fg_vexp_avx512(_mm512_sub_ps(_mm512_sub_ps(s, Lr), lr)));
        }
    }
}

FG_TARGET_AVX2 static void softmax_cols_avx2(float *ST, int64_t ld, int64_t nk, int64_t nq, float *m, float *l,
                                             float *alpha) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), zero = _mm256_setzero_ps();
    int64_t r0 = 0;
    for (; r0 + 32 <= nq; r0 += 32) { /* four vectors of eight columns, as in the AVX-512 form */
        __m256 mo[4], mx[4], ms[4], sum[4];
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            mo[v] = _mm256_loadu_ps(m + r0 + 8 * v);
            mx[v] = mo[v];
            sum[v] = zero;
        }
        for (int64_t j = 0; j < nk; j++) {
            const float *sp = ST + j * ld + r0;
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) mx[v] = _mm256_max_ps(_mm256_loadu_ps(sp + 8 * v), mx[v]);
        }
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) ms[v] = _mm256_blendv_ps(mx[v], zero, _mm256_cmp_ps(mx[v], ninf, _CMP_EQ_OQ));
        for (int64_t j = 0; j < nk; j++) {
            float *sp = ST + j * ld + r0;
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) {
                const __m256 p = fg_vexp_avx2(_mm256_sub_ps(_mm256_loadu_ps(sp + 8 * v), ms[v]));
                _mm256_storeu_ps(sp + 8 * v, p);
                sum[v] = _mm256_add_ps(sum[v], p);
            }
        }
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            const int64_t r = r0 + 8 * v;
            const __m256 a = fg_vexp_avx2(_mm256_sub_ps(mo[v], ms[v]));
            _mm256_storeu_ps(l + r, _mm256_add_ps(_mm256_mul_ps(a, _mm256_loadu_ps(l + r)), sum[v]));
            _mm256_storeu_ps(m + r, mx[v]);
            _mm256_storeu_ps(alpha + r, a);
        }
    }
    for (; r0 + 8 <= nq; r0 += 8) {
        const __m256 mo = _mm256_loadu_ps(m + r0);
        __m256 mx = mo;
        for (int64_t j = 0; j < nk; j++) mx = _mm256_max_ps(_mm256_loadu_ps(ST + j * ld + r0), mx);
        const __m256 ms = _mm256_blendv_ps(mx, zero, _mm256_cmp_ps(mx, ninf, _CMP_EQ_OQ));
        const __m256 a = fg_vexp_avx2(_mm256_sub_ps(mo, ms));
        __m256 sum = zero;
        for (int64_t j = 0; j < nk; j++) {
            float *sp = ST + j * ld + r0;
            const __m256 p = fg_vexp_avx2(_mm256_sub_ps(_mm256_loadu_ps(sp), ms));
            _mm256_storeu_ps(sp, p);
            sum = _mm256_add_ps(sum, p);
        }
        _mm256_storeu_ps(l + r0, _mm256_add_ps(_mm256_mul_ps(a, _mm256_loadu_ps(l + r0)), sum));
        _mm256_storeu_ps(m + r0, mx);
        _mm256_storeu_ps(alpha + r0, a);
    }
    softmax_cols_scalar(ST, ld, nk, r0, nq, m, l, alpha); /* the same bits, one column at a time */
}

FG_TARGET_AVX2 static void exp_rows_avx2(float *S, int64_t ld, int64_t nq, int64_t nk, const float *L,
                                         const float *lo) {
    for (int64_t r = 0; r < nq; r++) {
        float *row = S + r * ld;
        if (L[r] == -INFINITY) {
            memset(row, 0, (size_t)nk * sizeof(float));
            continue;
        }
        const float Lf = L[r], lf = lo ? lo[r] : 0.0f;
        const __m256 Lr = _mm256_set1_ps(Lf), lr = _mm256_set1_ps(lf);
        int64_t j = 0;
        for (; j + 8 <= nk; j += 8)
            _mm256_storeu_ps(row + j, fg_vexp_avx2(_mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(row + j), Lr), lr)));
        for (; j < nk; j++) row[j] = fg_expf_ref((row[j] - Lf) - lf);
    }
}
#endif

static void softmax_cols(float *ST, int64_t ld, int64_t nk, int64_t nq, float *m, float *l, float *alpha) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512: softmax_cols_avx512(ST, ld, nk, nq, m, l, alpha); return;
    case FG_SIMD_AVX2: softmax_cols_avx2(ST, ld, nk, nq, m, l, alpha); return;
    default: break;
    }
#endif
    softmax_cols_scalar(ST, ld, nk, 0, nq, m, l, alpha);
}

static void exp_rows(float *S, int64_t ld, int64_t nq, int64_t nk, const float *L, const float *lo) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512: exp_rows_avx512(S, ld, nq, nk, L, lo); return;
    case FG_SIMD_AVX2: exp_rows_avx2(S, ld, nq, nk, L, lo); return;
    default: break;
    }
#endif
    exp_rows_scalar(S, ld, 0, nq, nk, L, lo);
}

/* dst (cols × rows, stride ldd) = srcᵀ, src rows × cols with stride lds; in 8 × 8 blocks, so that
 * both sides are read and written a cache line at a time. */
static void transpose_scalar(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols) {
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            const int64_t r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}

#if FG_SIMD_X86
/* one 16 × 16 block: pairs of rows interleaved by 1, 2, then 4 and 8 elements */
FG_TARGET_AVX512 static void transpose16_avx512(float *dst, int64_t ldd, const float *src, int64_t lds) {
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), e = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
        t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
        r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
        r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xdd);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * ldd, r[i]);
}
#endif

/* dst (cols × rows, stride ldd) = srcᵀ (src rows × cols, stride lds): moves only, the same on every
 * level. */
static void transpose_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols) {
#if FG_SIMD_X86
    if (fg_simd_active() == FG_SIMD_AVX512 && rows >= 16 && cols >= 16) {
        const int64_t r16 = rows / 16 * 16, c16 = cols / 16 * 16;
        for (int64_t r0 = 0; r0 < r16; r0 += 16)
            for (int64_t c0 = 0; c0 < c16; c0 += 16) transpose16_avx512(dst + c0 * ldd + r0, ldd, src + r0 * lds + c0, lds);
        /* the edges: the last cols % 16 columns of every row, then the last rows % 16 rows */
        if (c16 < cols) transpose_scalar(dst + c16 * ldd, ldd, src + c16, lds, r16, cols - c16);
        if (r16 < rows) transpose_scalar(dst + r16, ldd, src + r16 * lds, lds, rows - r16, cols);
        return;
    }
#endif
    transpose_scalar(dst, ldd, src, lds, rows, cols);
}

/* D_i = Σ_c a[i, c]·b[i, c] in double, each row's sum in column order; eight rows at a time, so
 * that eight independent chains of additions overlap (one chain alone waits on its own latency). */
static void rows_dot_f64(float *D, const float *a, const float *b, int64_t rows, int64_t d) {
    int64_t i = 0;
    for (; i + 8 <= rows; i += 8) {
        double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int64_t c = 0; c < d; c++)
            for (int r = 0; r < 8; r++) s[r] += (double)a[(i + r) * d + c] * (double)b[(i + r) * d + c];
        for (int r = 0; r < 8; r++) D[i + r] = (float)s[r];
    }
    for (; i < rows; i++) {
        double s = 0;
        for (int64_t c = 0; c < d; c++) s += (double)a[i * d + c] * (double)b[i * d + c];
        D[i] = (float)s;
    }
}

/* dS = P ∘ (dP − D_r) along the rows of the tile (dS holds dP on entry): element by element, so the
 * vector forms give the same bits as the scalar one. */
static void ds_rows_scalar(float *dS, const float *P, int64_t ld, int64_t r0, int64_t r1, int64_t nk, const float *D) {
    for (int64_t r = r0; r < r1; r++) {
        float *dsrow = dS + r * ld;
        const float *prow = P + r * ld;
        const float Di = D[r];
        for (int64_t j = 0; j < nk; j++) dsrow[j] = prow[j] * (dsrow[j] - Di);
    }
}
#if FG_SIMD_X86
FG_TARGET_AVX512 static void ds_rows_avx512(float *dS, const float *P, int64_t ld, int64_t nq, int64_t nk, const float *D) {
    for (int64_t r = 0; r < nq; r++) {
        float *dsrow = dS + r * ld;
        const float *prow = P + r * ld;
        const __m512 Di = _mm512_set1_ps(D[r]);
        for (int64_t j = 0; j < nk; j += 16) {
            const __mmask16 km = nk - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (nk - j)) - 1);
            const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(km, dsrow + j), Di);
            _mm512_mask_storeu_ps(dsrow + j, km, _mm512_mul_ps(_mm512_maskz_loadu_ps(km, prow + j), x));
        }
    }
}
FG_TARGET_AVX2 static void ds_rows_avx2(float *dS, const float *P, int64_t ld, int64_t nq, int64_t nk, const float *D) {
    for (int64_t r = 0; r < nq; r++) {
        float *dsrow = dS + r * ld;
        const float *prow = P + r * ld;
        const __m256 Di = _mm256_set1_ps(D[r]);
        int64_t j = 0;
        for (; j + 8 <= nk; j += 8)
            _mm256_storeu_ps(dsrow + j, _mm256_mul_ps(_mm256_loadu_ps(prow + j), _mm256_sub_ps(_mm256_loadu_ps(dsrow + j), Di)));
        for (; j < nk; j++) dsrow[j] = prow[j] * (dsrow[j] - D[r]);
    }
}
#endif
static void ds_rows(float *dS, const float *P, int64_t ld, int64_t nq, int64_t nk, const float *D) {
#if FG_SIMD_X86
    switch (fg_simd_active()) {
    case FG_SIMD_AVX512: ds_rows_avx512(dS, P, ld, nq, nk, D); return;
    case FG_SIMD_AVX2: ds_rows_avx2(dS, P, ld, nq, nk, D); return;
    default: break;
    }
#endif
    ds_rows_scalar(dS, P, ld, 0, nq, nk, D);
}

/* ---- forward ---- */
typedef struct {
    const fg_attn_problem *pr; /* blocks resolved to the problem's sizes */
    float *o, *lse, *lse_lo;
    const float *q, *k, *v;
    int64_t nqb, Hkv, G;
    int general;               /* variants or a mask callback: tiles go through fg_attn_score_tile */
    size_t ld;                 /* column stride of Qᵀ and Sᵀ: bq rounded up to 16 */
    flash_scratch scratch;
} fwd32_job;

/* One item: query rows [i0, i0 + nq) of head (b, h). Scratch: Qᵀ (d × ld), Sᵀ (bk × ld), m, l, alpha
 * (ld each), and a row-major tile R (bq × bk) for variants and dropout. */
static void fwd32_item(void *ctx, int64_t item, int worker) {
    fwd32_job *J = ctx;
    const fg_attn_problem *pr = J->pr;
    const int64_t d = pr->d, Nq = pr->Nq, Nk = pr->Nk, H = pr->H, bq = pr->block_q, bk = pr->block_k;
    const int64_t ld = (int64_t)J->ld;
    float *scr = flash_scratch_get(&J->scratch, worker);
    if (!scr) return;
    float *QT = scr, *ST = QT + d * ld, *m = ST + bk * ld, *l = m + ld, *alpha = l + ld, *R = alpha + ld;
    int64_t bh, qb;
    flash_fwd_item(item, pr->B * H, J->nqb, &bh, &qb);
    const int64_t b = bh / H, h = bh % H, bg = b * J->Hkv + h / J->G;
    const int64_t i0 = qb * bq, nq = Nq - i0 < bq ? Nq - i0 : bq;
    const float *Qi = J->q + (bh * Nq + i0) * d, *K = J->k + bg * Nk * d, *V = J->v + bg * Nk * d;
    float *Oi = J->o + (bh * Nq + i0) * d, *Li = J->lse + bh * Nq + i0, *lo = J->lse_lo ? J->lse_lo + bh * Nq + i0 : NULL;
    const float scale = (float)pr->scale;
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    const float inv_keep = (float)(1.0 / (1.0 - pr->dropout_p));
    const fg_attn_variant *var = &pr->var;

    transpose_f32(QT, ld, Qi, d, nq, d); /* Qiᵀ, d × nq */
    for (int64_t r = 0; r < nq; r++) {
        m[r] = -INFINITY;
        l[r] = 0;
    }
    memset(Oi, 0, (size_t)(nq * d) * sizeof(float));

    /* causal ∧ window: the block's rows see keys in [lo(i0), hi(last row)) at most */
    int64_t lo_first, hi_first, lo_last, hi_last;
    fg_attn_row_range(i0, Nq, Nk, pr->causal, var->window, var->window_left, var->window_right, &lo_first, &hi_first);
    fg_attn_row_range(i0 + nq - 1, Nq, Nk, pr->causal, var->window, var->window_left, var->window_right, &lo_last,
                      &hi_last);
    for (int64_t j0 = (lo_first / bk) * bk; j0 < hi_last; j0 += bk) {
        const int64_t nk = Nk - j0 < bk ? Nk - j0 : bk;
        int wp, mp;
        const fg_tile_kind kind = fg_attn_tile_kind(pr, b, h, i0, nq, j0, nk, &wp, &mp);
        if (kind == FG_TILE_MASKED) continue;
        /* Sᵀ = scale · Kj Qiᵀ   (nk × nq) */
        fg_sgemm_small(nk, nq, d, scale, K + j0 * d, d, 1, QT, ld, ST, ld, NULL, 0);
        if (J->general) {
            /* variants on the row-major tile: the code every kernel shares */
            transpose_f32(R, bk, ST, ld, nk, nq);
            fg_attn_score_tile_f32(R, NULL, bk, b, h, i0, nq, j0, nk, kind, wp, mp, pr);
            transpose_f32(ST, ld, R, bk, nq, nk);
        } else if (kind == FG_TILE_PARTIAL) {
            /* causal ∧ window only: column r sees keys [lo, hi) of the tile */
            for (int64_t r = 0; r < nq; r++) {
                int64_t a, e;
                fg_attn_row_range(i0 + r, Nq, Nk, pr->causal, var->window, var->window_left, var->window_right, &a,
                                  &e);
                a -= j0;
                e -= j0;
                for (int64_t j = 0; j < nk && j < a; j++) ST[j * ld + r] = -INFINITY;
                for (int64_t j = e > 0 ? e : 0; j < nk; j++) ST[j * ld + r] = -INFINITY;
            }
        }
        softmax_cols(ST, ld, nk, nq, m, l, alpha);
        if (thr) { /* dropout acts on the weights after the softmax; l keeps the full sum */
            transpose_f32(R, bk, ST, ld, nk, nq);
            for (int64_t r = 0; r < nq; r++) fg_attn_dropout_scale_f32(R + r * bk, nk, pr->seed, thr, inv_keep, b, h, i0 + r, j0);
            transpose_f32(ST, ld, R, bk, nq, nk);
        }
        /* Oi = alpha ∘ Oi + P Vj, P read from Sᵀ (element (r, j) at ST[j·ld + r]) */
        fg_sgemm_small(nq, d, nk, 1.0f, ST, 1, ld, V + j0 * d, d, Oi, d, alpha, 1);
    }
    for (int64_t r = 0; r < nq; r++) {
        float *orow = Oi + r * d;
        if (l[r] != 0) { /* l > 0; or NaN (a NaN score in the row: softmax_cols's exp keeps it): O and L NaN */
            const float inv = 1 / l[r];
            for (int64_t c = 0; c < d; c++) orow[c] *= inv;
            /* L = m + log l, evaluated in double and rounded once; lo keeps what the rounding lost */
            const double Ld = (double)m[r] + log((double)l[r]);
            Li[r] = (float)Ld;
            if (lo) lo[r] = (float)(Ld - (double)(float)Ld);
        } else { /* a row that sees no key: O = 0 (it is), L = -inf */
            Li[r] = -INFINITY;
            if (lo) lo[r] = 0;
        }
    }
}

static fg_status flash_forward_tiles_f32(float *o, float *lse, float *lse_lo, const float *q, const float *k,
                                         const float *v, const fg_attn_problem *p2) {
    const int64_t bq = p2->block_q, bk = p2->block_k, d = p2->d, H = p2->H;
    fwd32_job J = {.pr = p2, .o = o, .lse = lse, .lse_lo = lse_lo, .q = q, .k = k, .v = v};
    J.nqb = (p2->Nq + bq - 1) / bq;
    J.Hkv = p2->var.n_kv_heads > 0 ? p2->var.n_kv_heads : H;
    J.G = J.Hkv > 0 ? H / J.Hkv : 1;
    J.general = fg_attn_modifies_scores(p2) || p2->custom.mask != NULL;
    J.ld = (size_t)((bq + 15) / 16 * 16);
    const int need_r = J.general || fg_dropout_threshold(p2->dropout_p) != 0;
    J.scratch.bytes = ((size_t)(d + bk + 3) * J.ld + (need_r ? (size_t)(bq * bk) : 0)) * sizeof(float);
    return flash_run(p2->B * H * J.nqb, fwd32_item, &J, &J.scratch, p2, 0, "forward");
}

/* ---- backward ---- */
typedef struct {
    const fg_attn_problem *pr;
    float *dq, *dk, *dv;
    const float *dout, *q, *k, *v, *o, *lse, *lse_lo;
    int64_t Hkv, G;
    int dropout, chain, mods;
    flash_scratch scratch;
} bwd32_job;

/* One item: K/V head (b, g) with its G query heads. Scratch: Kjᵀ, Vjᵀ (d × bk each), P, dS
 * (bq × bk each), Z (dropout), Gt (softcap or score_mod), D (G × Nq). */
static void bwd32_item(void *ctx, int64_t item, int worker) {
    bwd32_job *J = ctx;
    const fg_attn_problem *pr = J->pr;
    const int64_t d = pr->d, Nq = pr->Nq, Nk = pr->Nk, H = pr->H, bq = pr->block_q, bk = pr->block_k, G = J->G;
    float *scr = flash_scratch_get(&J->scratch, worker);
    if (!scr) return;
    const int64_t tile = bq * bk;
    float *KT = scr, *VT = KT + d * bk, *P = VT + d * bk, *dS = P + tile, *D = dS + tile;
    float *Z = J->dropout ? D + G * Nq : NULL, *Gt = J->chain ? D + G * Nq + (J->dropout ? tile : 0) : NULL;
    const int64_t b = item / J->Hkv, g = item % J->Hkv;
    const int64_t ko = (b * J->Hkv + g) * Nk * d;
    const float *K = J->k + ko, *V = J->v + ko;
    float *dK = J->dk ? J->dk + ko : NULL, *dV = J->dv ? J->dv + ko : NULL;
    const float scale = (float)pr->scale;
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    const float inv_keep = (float)(1.0 / (1.0 - pr->dropout_p));

    /* D_i = dO_i · O_i  (= Σ_j P_ij dP_ij, the softmax-gradient correction), per query head of the
     * group. Summed in double: dS = P∘(dP − D) cancels when P is peaked, so D's own rounding
     * shows up in dQ and dK. */
    for (int64_t hh = 0; hh < G; hh++) {
        const int64_t qo = (b * H + g * G + hh) * Nq * d;
        rows_dot_f64(D + hh * Nq, J->dout + qo, J->o + qo, Nq, d);
    }
    for (int64_t j0 = 0; j0 < Nk; j0 += bk) {
        const int64_t nk = Nk - j0 < bk ? Nk - j0 : bk;
        const float *Kj = K + j0 * d, *Vj = V + j0 * d;
        int packed = 0;
        for (int64_t hh = 0; hh < G; hh++) {
            const int64_t h = g * G + hh, bh = b * H + h, qo = bh * Nq * d;
            const float *Q = J->q + qo, *dO = J->dout + qo, *Lh = J->lse + bh * Nq;
            const float *loh = J->lse_lo ? J->lse_lo + bh * Nq : NULL, *Dh = D + hh * Nq;
            float *dQ = J->dq ? J->dq + qo : NULL;
            for (int64_t i0 = 0; i0 < Nq; i0 += bq) {
                const int64_t nq = Nq - i0 < bq ? Nq - i0 : bq;
                int wp, mp;
                const fg_tile_kind kind = fg_attn_tile_kind(pr, b, h, i0, nq, j0, nk, &wp, &mp);
                if (kind == FG_TILE_MASKED) continue; /* no query of the block sees a key of Kj */
                if (!packed) { /* Kjᵀ and Vjᵀ (d × nk), once per key block */
                    transpose_f32(KT, bk, Kj, d, nk, d);
                    transpose_f32(VT, bk, Vj, d, nk, d);
                    packed = 1;
                }
                const float *Qi = Q + i0 * d, *dOi = dO + i0 * d;
                /* recompute S = variants(scale · Qi Kjᵀ) (and Gt = ∂S/∂S1), then P = exp(S − L) */
                fg_sgemm_small(nq, nk, d, scale, Qi, d, 1, KT, bk, P, bk, NULL, 0);
                if (J->mods || kind == FG_TILE_PARTIAL)
                    fg_attn_score_tile_f32(P, J->chain ? Gt : NULL, bk, b, h, i0, nq, j0, nk, kind, wp, mp, pr);
                /* S − L is exact near the row max (Sterbenz), so lo, below L's last bit, still counts;
                 * masked S = -inf gives 0 */
                exp_rows(P, bk, nq, nk, Lh + i0, loh ? loh + i0 : NULL);
                if (thr)
                    for (int64_t r = 0; r < nq; r++) {
                        float *zrow = Z + r * bk;
                        for (int64_t j = 0; j < nk; j++) zrow[j] = 1;
                        fg_attn_dropout_scale_f32(zrow, nk, pr->seed, thr, inv_keep, b, h, i0 + r, j0);
                    }
                /* dVj += (P∘Z)ᵀ dOi — the forward's Oi += dropout(P) Vj */
                if (dV) {
                    const float *PZ = P;
                    if (thr) { /* P∘Z into dS, which is free until dP below */
                        for (int64_t r = 0; r < nq; r++)
                            for (int64_t j = 0; j < nk; j++) dS[r * bk + j] = P[r * bk + j] * Z[r * bk + j];
                        PZ = dS;
                    }
                    fg_sgemm_small(nk, d, nq, 1.0f, PZ, 1, bk, dOi, d, dV + j0 * d, d, NULL, 1);
                }
                if (!dQ && !dK) continue;
                /* dP = (dOi Vjᵀ) ∘ Z;  dS = P ∘ (dP − D) — the forward's P = softmax(S) */
                fg_sgemm_small(nq, nk, d, 1.0f, dOi, d, 1, VT, bk, dS, bk, NULL, 0);
                if (thr)
                    for (int64_t r = 0; r < nq; r++) {
                        float *dsrow = dS + r * bk;
                        const float *prow = P + r * bk, *zrow = Z + r * bk;
                        const float Di = Dh[i0 + r];
                        for (int64_t j = 0; j < nk; j++) dsrow[j] = prow[j] * (dsrow[j] * zrow[j] - Di);
                    }
                else
                    ds_rows(dS, P, bk, nq, nk, Dh + i0);
                /* the forward's S = variants(S1): dS1 = dS ∘ ∂S/∂S1 (P = 0 where it is masked) */
                if (J->chain)
                    for (int64_t r = 0; r < nq; r++) {
                        float *dsrow = dS + r * bk;
                        const float *grow = Gt + r * bk;
                        for (int64_t j = 0; j < nk; j++)
                            if (dsrow[j] != 0) dsrow[j] *= grow[j];
                    }
                /* the forward's S1 = scale · Qi Kjᵀ: dQi += scale dS Kj, dKj += scale dSᵀ Qi */
                if (dQ) fg_sgemm_small(nq, d, nk, scale, dS, bk, 1, Kj, d, dQ + i0 * d, d, NULL, 1);
                if (dK) fg_sgemm_small(nk, d, nq, scale, dS, 1, bk, Qi, d, dK + j0 * d, d, NULL, 1);
            }
        }
    }
}

static fg_status flash_backward_tiles_f32(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                          const float *k, const float *v, const float *o, const float *lse,
                                          const float *lse_lo, const fg_attn_problem *p2) {
    const int64_t bq = p2->block_q, bk = p2->block_k, d = p2->d, H = p2->H;
    bwd32_job J = {.pr = p2, .dq = dq, .dk = dk, .dv = dv, .dout = dout, .q = q, .k = k, .v = v, .o = o,
                   .lse = lse, .lse_lo = lse_lo};
    J.Hkv = p2->var.n_kv_heads > 0 ? p2->var.n_kv_heads : H;
    J.G = J.Hkv > 0 ? H / J.Hkv : 1;
    J.dropout = fg_dropout_threshold(p2->dropout_p) != 0;
    J.chain = fg_attn_needs_score_grad(p2);
    J.mods = fg_attn_modifies_scores(p2);
    const size_t tile = (size_t)(bq * bk);
    J.scratch.bytes = ((size_t)(2 * d * bk) + (2 + (size_t)J.dropout + (size_t)J.chain) * tile +
                       (size_t)(J.G * (p2->Nq > 0 ? p2->Nq : 1))) * sizeof(float);
    return flash_run(p2->B * J.Hkv, bwd32_item, &J, &J.scratch, p2, 0, "backward");
}

/* ---- the float32 entry points: tile kernels, or the BLAS path with FG_ATTN_GEMM=blas ---- */

/* block sizes clamped to the problem (a block never exceeds Nq or Nk, and is >= 1) */
static fg_attn_problem flash_resolved(const fg_attn_problem *pr) {
    fg_attn_problem p2 = *pr;
    p2.block_q = (int)(pr->block_q < pr->Nq ? pr->block_q : (pr->Nq > 0 ? pr->Nq : 1));
    p2.block_k = (int)(pr->block_k < pr->Nk ? pr->block_k : (pr->Nk > 0 ? pr->Nk : 1));
    return p2;
}

fg_status fg_attn_flash_forward_lo_f32(float *o, float *lse, float *lse_lo, const float *q, const float *k,
                                       const float *v, const fg_attn_problem *pr) {
    const fg_status fits = fg_attn_problem_check_dtype(pr, FG_F32);
    if (fits != FG_OK) return fits;
    if (flash_f32_uses_blas()) return flash_forward_blas_f32(o, lse, lse_lo, q, k, v, pr);
    const fg_attn_problem p2 = flash_resolved(pr);
    if (p2.B * p2.H * p2.Nq == 0) return FG_OK;
    return flash_forward_tiles_f32(o, lse, lse_lo, q, k, v, &p2);
}

fg_status fg_attn_flash_backward_lo_f32(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                        const float *k, const float *v, const float *o, const float *lse,
                                        const float *lse_lo, const fg_attn_problem *pr) {
    const fg_status fits = fg_attn_problem_check_dtype(pr, FG_F32);
    if (fits != FG_OK) return fits;
    if (flash_f32_uses_blas()) return flash_backward_blas_f32(dq, dk, dv, dout, q, k, v, o, lse, lse_lo, pr);
    if (!dq && !dk && !dv) return FG_OK;
    const fg_attn_problem p2 = flash_resolved(pr);
    if (p2.B * p2.H == 0) return FG_OK;
    return flash_backward_tiles_f32(dq, dk, dv, dout, q, k, v, o, lse, lse_lo, &p2);
}

fg_status fg_attn_flash_forward_lo_f64(double *o, double *lse, double *lse_lo, const double *q, const double *k,
                                       const double *v, const fg_attn_problem *pr) {
    const fg_status fits = fg_attn_problem_check_dtype(pr, FG_F64);
    if (fits != FG_OK) return fits;
    return flash_forward_blas_f64(o, lse, lse_lo, q, k, v, pr);
}

fg_status fg_attn_flash_backward_lo_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                        const double *k, const double *v, const double *o, const double *lse,
                                        const double *lse_lo, const fg_attn_problem *pr) {
    const fg_status fits = fg_attn_problem_check_dtype(pr, FG_F64);
    if (fits != FG_OK) return fits;
    return flash_backward_blas_f64(dq, dk, dv, dout, q, k, v, o, lse, lse_lo, pr);
}

#else /* ---- the per-dtype template: the BLAS path ---- */

/* C (m × n, row stride ldc) = alpha · op(A) op(B) + beta · C, with BLAS's shapes; a no-op on empty
 * sizes (BLAS wants leading dimensions >= 1 even then). */
static void SFX(flash_gemm)(int ta, int tb, int64_t m, int64_t n, int64_t kk, T alpha, const T *A,
                            int64_t lda, const T *Bm, int64_t ldb, T beta, T *C, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (kk == 0) {
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < n; c++) C[r * ldc + c] = beta == 0 ? 0 : beta * C[r * ldc + c];
        return;
    }
    GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
         (int)kk, alpha, A, (int)lda, Bm, (int)ldb, beta, C, (int)ldc);
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

/* The forward of one work item: query rows [i0, i0 + nq) of head (b, h).
 * qh, oh, lseh point at head (b, h), kh, vh at its K/V head; S is a bq × bk scratch tile, m and l
 * hold bq. */
static void SFX(flash_forward_block)(T *oh, T *lseh, T *loh, const T *qh, const T *kh, const T *vh, int64_t b,
                                     int64_t h, int64_t i0, int64_t nq, T *S, T *m, T *l,
                                     const fg_attn_problem *pr) {
    const int64_t d = pr->d, Nq = pr->Nq, Nk = pr->Nk, bk = pr->block_k;
    const T scale = (T)pr->scale;
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    const T inv_keep = (T)(1.0 / (1.0 - pr->dropout_p));
    const int mods = fg_attn_modifies_scores(pr);
    const fg_attn_variant *var = &pr->var;
    const T *Qi = qh + i0 * d;
    T *Oi = oh + i0 * d;
    for (int64_t r = 0; r < nq; r++) {
        m[r] = -INFINITY;
        l[r] = 0;
    }
    memset(Oi, 0, (size_t)(nq * d) * sizeof(T));

    /* causal ∧ window: the block's rows see keys in [lo(i0), hi(last row)) at most (both ends of
     * a row's range grow with i); key blocks outside are never visited */
    int64_t lo_first, hi_first, lo_last, hi_last;
    fg_attn_row_range(i0, Nq, Nk, pr->causal, var->window, var->window_left, var->window_right, &lo_first, &hi_first);
    fg_attn_row_range(i0 + nq - 1, Nq, Nk, pr->causal, var->window, var->window_left, var->window_right, &lo_last,
                      &hi_last);
    (void)hi_first;
    (void)lo_last;
    for (int64_t j0 = (lo_first / bk) * bk; j0 < hi_last; j0 += bk) {
        const int64_t nk = (Nk - j0 < bk) ? Nk - j0 : bk;
        int wp, mp;
        const fg_tile_kind kind = fg_attn_tile_kind(pr, b, h, i0, nq, j0, nk, &wp, &mp);
        if (kind == FG_TILE_MASKED) continue;
        /* S = variants(scale · Qi Kjᵀ)   (nq × nk) */
        SFX(flash_gemm)(0, 1, nq, nk, d, scale, Qi, d, kh + j0 * d, d, 0, S, bk);
        if (mods || kind == FG_TILE_PARTIAL) SFX(fg_attn_score_tile)(S, NULL, bk, b, h, i0, nq, j0, nk, kind, wp, mp, pr);
        for (int64_t r = 0; r < nq; r++) {
            T *srow = S + r * bk;
            const int64_t i = i0 + r;
            T alpha = SFX(fg_attn_online_update)(&m[r], &l[r], srow, nk);
            if (alpha != 1) {
                T *orow = Oi + r * d;
                for (int64_t c = 0; c < d; c++) orow[c] *= alpha;
            }
            /* dropout acts on the weights after the softmax; l keeps the full sum */
            if (thr) SFX(fg_attn_dropout_scale)(srow, nk, pr->seed, thr, inv_keep, b, h, i, j0);
        }
        /* Oi += P Vj */
        SFX(flash_gemm)(0, 0, nq, d, nk, 1, S, bk, vh + j0 * d, d, 1, Oi, d);
    }
    for (int64_t r = 0; r < nq; r++) {
        T *orow = Oi + r * d;
        if (l[r] != 0) { /* l > 0; or NaN (a NaN score in the row): O and L NaN */
            T inv = 1 / l[r];
            for (int64_t c = 0; c < d; c++) orow[c] *= inv;
            /* L = m + log l, evaluated in double and rounded once; lo keeps what the rounding lost */
            const double Ld = (double)m[r] + log((double)l[r]);
            lseh[i0 + r] = (T)Ld;
            if (loh) loh[i0 + r] = (T)(Ld - (double)(T)Ld);
        } else { /* a row that sees no key: O = 0 (already), L = -inf */
            lseh[i0 + r] = -INFINITY;
            if (loh) loh[i0 + r] = 0;
        }
    }
}

typedef struct {
    const fg_attn_problem *pr;
    T *o, *lse, *lse_lo;
    const T *q, *k, *v;
    int64_t nqb, Hkv, G;
    flash_scratch scratch;
} SFX(fwd_blas_job);

/* scratch: the score tile S (bq × bk), m and l (bq each) */
static void SFX(fwd_blas_item)(void *ctx, int64_t item, int worker) {
    SFX(fwd_blas_job) *J = ctx;
    const fg_attn_problem *pr = J->pr;
    const int64_t H = pr->H, Nq = pr->Nq, Nk = pr->Nk, d = pr->d, bq = pr->block_q, bk = pr->block_k;
    T *S = flash_scratch_get(&J->scratch, worker);
    if (!S) return;
    T *m = S + bq * bk, *l = m + bq;
    int64_t bh, qb;
    flash_fwd_item(item, pr->B * H, J->nqb, &bh, &qb);
    const int64_t b = bh / H, h = bh % H, bg = b * J->Hkv + h / J->G, i0 = qb * bq;
    const int64_t nq = (Nq - i0 < bq) ? Nq - i0 : bq;
    SFX(flash_forward_block)(J->o + bh * Nq * d, J->lse + bh * Nq, J->lse_lo ? J->lse_lo + bh * Nq : NULL,
                             J->q + bh * Nq * d, J->k + bg * Nk * d, J->v + bg * Nk * d, b, h, i0, nq, S, m, l, pr);
}

static fg_status SFX(flash_forward_blas)(T *o, T *lse, T *lse_lo, const T *q, const T *k, const T *v,
                                         const fg_attn_problem *pr) {
    const int64_t B = pr->B, H = pr->H, Nq = pr->Nq, Nk = pr->Nk;
    const int64_t bq = pr->block_q < Nq ? pr->block_q : (Nq > 0 ? Nq : 1);
    const int64_t bk = pr->block_k < Nk ? pr->block_k : (Nk > 0 ? Nk : 1);
    fg_attn_problem p2 = *pr;
    p2.block_q = (int)bq;
    p2.block_k = (int)bk;
    SFX(fwd_blas_job) J = {.pr = &p2, .o = o, .lse = lse, .lse_lo = lse_lo, .q = q, .k = k, .v = v};
    J.nqb = Nq > 0 ? (Nq + bq - 1) / bq : 0;
    J.Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : H;
    J.G = J.Hkv > 0 ? H / J.Hkv : 1;
    J.scratch.bytes = (size_t)(bq * bk + 2 * bq) * sizeof(T);
    return flash_run(B * H * J.nqb, SFX(fwd_blas_item), &J, &J.scratch, &p2, FG_POOL_BLAS_SERIAL, "forward");
}

/* The backward of one query head h of a work item: its gradients add into dkh, dvh, which the
 * other heads of the group share. Scratch: P, dS (bq × bk each), Z (bq × bk, only with dropout),
 * Gt (bq × bk, only with softcap or score_mod) and D (Nq). */
static void SFX(flash_backward_head)(T *dqh, T *dkh, T *dvh, const T *doh, const T *qh, const T *kh,
                                     const T *vh, const T *oh, const T *lseh, const T *loh, int64_t b, int64_t h,
                                     T *P, T *dS, T *Z, T *Gt, T *D, const fg_attn_problem *pr) {
    const int64_t Nq = pr->Nq, Nk = pr->Nk, d = pr->d, bq = pr->block_q, bk = pr->block_k;
    const T scale = (T)pr->scale;
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    const T inv_keep = (T)(1.0 / (1.0 - pr->dropout_p));
    const int mods = fg_attn_modifies_scores(pr), chain = fg_attn_needs_score_grad(pr);

    /* D_i = dO_i · O_i  (= Σ_j P_ij dP_ij, the softmax-gradient correction). Accumulated in double:
     * dS = P∘(dP − D) cancels when P is peaked, so D's own rounding shows up in dQ and dK. */
    for (int64_t i = 0; i < Nq; i++) {
        double s = 0;
        for (int64_t c = 0; c < d; c++) s += (double)doh[i * d + c] * (double)oh[i * d + c];
        D[i] = (T)s;
    }
    for (int64_t j0 = 0; j0 < Nk; j0 += bk) {
        const int64_t nk = (Nk - j0 < bk) ? Nk - j0 : bk;
        const T *Kj = kh + j0 * d, *Vj = vh + j0 * d;
        for (int64_t i0 = 0; i0 < Nq; i0 += bq) {
            const int64_t nq = (Nq - i0 < bq) ? Nq - i0 : bq;
            int wp, mp;
            const fg_tile_kind kind = fg_attn_tile_kind(pr, b, h, i0, nq, j0, nk, &wp, &mp);
            if (kind == FG_TILE_MASKED) continue; /* no query of the block sees a key of Kj */
            const T *Qi = qh + i0 * d, *dOi = doh + i0 * d;
            /* recompute S = variants(scale · Qi Kjᵀ) (and Gt = ∂S/∂S1), then P = exp(S − L) */
            SFX(flash_gemm)(0, 1, nq, nk, d, scale, Qi, d, Kj, d, 0, P, bk);
            if (mods || kind == FG_TILE_PARTIAL)
                SFX(fg_attn_score_tile)(P, chain ? Gt : NULL, bk, b, h, i0, nq, j0, nk, kind, wp, mp, pr);
            for (int64_t r = 0; r < nq; r++) {
                const int64_t i = i0 + r;
                T *prow = P + r * bk;
                const T L = lseh[i], lo = loh ? loh[i] : 0;
                if (L == -INFINITY) { /* the row sees no key at all */
                    for (int64_t j = 0; j < nk; j++) prow[j] = 0;
                } else {
                    /* S − L is exact near the row max (Sterbenz), so lo, below L's last bit, still
                     * counts; masked S = -inf gives 0 */
                    for (int64_t j = 0; j < nk; j++) prow[j] = EXP((prow[j] - L) - lo);
                }
                if (thr) {
                    T *zrow = Z + r * bk;
                    for (int64_t j = 0; j < nk; j++) zrow[j] = 1;
                    SFX(fg_attn_dropout_scale)(zrow, nk, pr->seed, thr, inv_keep, b, h, i, j0);
                }
            }
            /* dVj += (P∘Z)ᵀ dOi — the forward's Oi += dropout(P) Vj */
            if (dvh) {
                const T *PZ = P;
                if (thr) { /* P∘Z into dS, which is free until dP below */
                    for (int64_t r = 0; r < nq; r++)
                        for (int64_t j = 0; j < nk; j++) dS[r * bk + j] = P[r * bk + j] * Z[r * bk + j];
                    PZ = dS;
                }
                SFX(flash_gemm)(1, 0, nk, d, nq, 1, PZ, bk, dOi, d, 1, dvh + j0 * d, d);
            }
            if (!dqh && !dkh) continue;
            /* dP = (dOi Vjᵀ) ∘ Z;  dS = P ∘ (dP − D) — the forward's P = softmax(S) */
            SFX(flash_gemm)(0, 1, nq, nk, d, 1, dOi, d, Vj, d, 0, dS, bk);
            for (int64_t r = 0; r < nq; r++) {
                T *dsrow = dS + r * bk;
                const T *prow = P + r * bk, *zrow = Z + r * bk;
                const T Di = D[i0 + r];
                if (thr)
                    for (int64_t j = 0; j < nk; j++) dsrow[j] = prow[j] * (dsrow[j] * zrow[j] - Di);
                else
                    for (int64_t j = 0; j < nk; j++) dsrow[j] = prow[j] * (dsrow[j] - Di);
                /* the forward's S = variants(S1): dS1 = dS ∘ ∂S/∂S1 (P = 0 where it is masked) */
                if (chain) {
                    const T *grow = Gt + r * bk;
                    for (int64_t j = 0; j < nk; j++)
                        if (dsrow[j] != 0) dsrow[j] *= grow[j];
                }
            }
            /* the forward's S1 = scale · Qi Kjᵀ: dQi += scale dS Kj, dKj += scale dSᵀ Qi */
            if (dqh) SFX(flash_gemm)(0, 0, nq, d, nk, scale, dS, bk, Kj, d, 1, dqh + i0 * d, d);
            if (dkh) SFX(flash_gemm)(1, 0, nk, d, nq, scale, dS, bk, Qi, d, 1, dkh + j0 * d, d);
        }
    }
}

typedef struct {
    const fg_attn_problem *pr;
    T *dq, *dk, *dv;
    const T *dout, *q, *k, *v, *o, *lse, *lse_lo;
    int64_t Hkv, G;
    int dropout, chain;
    flash_scratch scratch;
} SFX(bwd_blas_job);

/* one item per (b, K/V head g): the G query heads of the group add into the same dK, dV */
static void SFX(bwd_blas_item)(void *ctx, int64_t item, int worker) {
    SFX(bwd_blas_job) *J = ctx;
    const fg_attn_problem *pr = J->pr;
    const int64_t H = pr->H, Nq = pr->Nq, Nk = pr->Nk, d = pr->d, G = J->G;
    T *P = flash_scratch_get(&J->scratch, worker);
    if (!P) return;
    const int64_t tile = (int64_t)pr->block_q * pr->block_k, nd = Nq > 0 ? Nq : 1;
    T *dS = P + tile, *D = dS + tile, *Z = J->dropout ? D + nd : NULL;
    T *Gt = J->chain ? D + nd + (J->dropout ? tile : 0) : NULL;
    const int64_t b = item / J->Hkv, g = item % J->Hkv, ko = (b * J->Hkv + g) * Nk * d;
    for (int64_t h = g * G; h < (g + 1) * G; h++) {
        const int64_t bh = b * H + h, qo = bh * Nq * d;
        SFX(flash_backward_head)(J->dq ? J->dq + qo : NULL, J->dk ? J->dk + ko : NULL, J->dv ? J->dv + ko : NULL,
                                 J->dout + qo, J->q + qo, J->k + ko, J->v + ko, J->o + qo, J->lse + bh * Nq,
                                 J->lse_lo ? J->lse_lo + bh * Nq : NULL, b, h, P, dS, Z, Gt, D, pr);
    }
}

static fg_status SFX(flash_backward_blas)(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v,
                                          const T *o, const T *lse, const T *lse_lo, const fg_attn_problem *pr) {
    const int64_t B = pr->B, H = pr->H, Nq = pr->Nq, Nk = pr->Nk;
    if (!dq && !dk && !dv) return FG_OK;
    const int64_t bq = pr->block_q < Nq ? pr->block_q : (Nq > 0 ? Nq : 1);
    const int64_t bk = pr->block_k < Nk ? pr->block_k : (Nk > 0 ? Nk : 1);
    fg_attn_problem p2 = *pr;
    p2.block_q = (int)bq;
    p2.block_k = (int)bk;
    SFX(bwd_blas_job) J = {.pr = &p2, .dq = dq, .dk = dk, .dv = dv, .dout = dout, .q = q, .k = k, .v = v, .o = o,
                           .lse = lse, .lse_lo = lse_lo};
    J.Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : H;
    J.G = J.Hkv > 0 ? H / J.Hkv : 1;
    J.dropout = fg_dropout_threshold(pr->dropout_p) != 0;
    J.chain = fg_attn_needs_score_grad(pr);
    const size_t tile = (size_t)(bq * bk);
    J.scratch.bytes = ((2 + (size_t)J.dropout + (size_t)J.chain) * tile + (size_t)(Nq > 0 ? Nq : 1)) * sizeof(T);
    return flash_run(B * J.Hkv, SFX(bwd_blas_item), &J, &J.scratch, &p2, FG_POOL_BLAS_SERIAL, "backward");
}

fg_status SFX(fg_attn_flash_forward)(T *o, T *lse, const T *q, const T *k, const T *v, const fg_attn_problem *pr) {
    return SFX(fg_attn_flash_forward_lo)(o, lse, NULL, q, k, v, pr);
}

fg_status SFX(fg_attn_flash_backward)(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v,
                                      const T *o, const T *lse, const fg_attn_problem *pr) {
    return SFX(fg_attn_flash_backward_lo)(dq, dk, dv, dout, q, k, v, o, lse, NULL, pr);
}

#endif /* FG_ATTN_FLASH_TEMPLATE */
