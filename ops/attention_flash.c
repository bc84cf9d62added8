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
 * no per-element mask; PARTIAL ones are masked element by element (fg_attn_score_tile).
 * Forward, for every (b, h) and every query block Qi (bq rows), keys in blocks Kj, Vj (bk rows):
 *     S  = variants(scale · Qi Kjᵀ)              (bq × bk tile, masked entries -inf)
 *     m' = max(m, rowmax S);  P = exp(S − m');  l' = exp(m − m') l + rowsum P
 *     Oi = exp(m − m') Oi + dropout(P) Vj        (the accumulator lives in o itself)
 *   then Oi /= l and L = m + log l  (saved for backward: O, L — not P).
 * Backward, for every (b, K/V head g), the query heads h of group g in turn (so dK, dV of g are
 * summed inside one work item); D = rowsum(dO ∘ O) once per h; key blocks outer, query blocks inner:
 *     S1 = scale · Qi Kjᵀ;  S = variants(S1), Gt = ∂S/∂S1 (only with softcap or score_mod)
 *     P  = exp(S − L)                            (recompute: the naive kernel stored P)
 *     Z  = dropout mask / (1 − p) (regenerated from Philox, never stored)
 *     dVj += (P∘Z)ᵀ dOi
 *     dP  = (dOi Vjᵀ) ∘ Z
 *     dS  = P ∘ (dP − D) [∘ Gt]     (D_i = Σ_j P_ij dP_ij = dO_i · O_i, dropout included)
 *     dQi += scale · dS Kj;  dKj += scale · dSᵀ Qi
 * The loop order is fixed, so the sums (and the result) are the same on every run.
 *
 * Precision in float32. Two quantities are kept better than float32 because their errors do not
 * average out: L is evaluated in double and its rounding remainder kept as lse_lo (one more float
 * per row), so exp((S − L) − lse_lo) is as precise near the row max as naive's stored P even when
 * |L| is large; and D is summed in double, because dS = P ∘ (dP − D) cancels for a peaked row.
 * Without them, flash float32 gradients were up to ~6x less accurate than naive float32 on
 * peaked softmaxes (tests/test_attention.c, flash_f32_error_at_most_twice_naive_f32_error).
 *
 * The work splits into independent items — a query block of one (b, h) in the forward, one
 * (b, K/V head) in the backward (its query heads all add into the same dK, dV) — each using only
 * its own scratch, so threads can later take items without sharing anything but the read-only
 * inputs. The plain path (no variant) never calls a callback: fg_attn_score_tile is called once
 * per tile and only when the tile is PARTIAL or a variant modifies scores.
 *
 * The file is a template: it includes itself twice, once per dtype (T = float, then double).
 */
#ifndef FG_ATTN_FLASH_TEMPLATE

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/attention.h"
#include "tensor/alloc.h"
#include "tensor/philox.h"

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

#else /* ---- the per-dtype template ---- */

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
        for (int64_t j = 0; j < n; j++) s[j] = 0;
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
        if (l[r] > 0) {
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

fg_status SFX(fg_attn_flash_forward_lo)(T *o, T *lse, T *lse_lo, const T *q, const T *k, const T *v,
                                     const fg_attn_problem *pr) {
    const int64_t B = pr->B, H = pr->H, Nq = pr->Nq, Nk = pr->Nk, d = pr->d;
    const int64_t Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : H, G = Hkv > 0 ? H / Hkv : 1;
    const int64_t bq = pr->block_q < Nq ? pr->block_q : (Nq > 0 ? Nq : 1);
    const int64_t bk = pr->block_k < Nk ? pr->block_k : (Nk > 0 ? Nk : 1);
    fg_attn_problem p2 = *pr;
    p2.block_q = (int)bq;
    p2.block_k = (int)bk;
    /* scratch, once per call: the score tile S (bq × bk), m and l (bq each) */
    size_t n_scratch = (size_t)(bq * bk + 2 * bq);
    T *scratch = fg_alloc(FG_CPU, n_scratch * sizeof(T));
    if (!scratch) return fg_error(FG_ERR_OOM, "flash attention: cannot allocate %zu bytes of scratch",
                                  n_scratch * sizeof(T));
    T *S = scratch, *m = S + bq * bk, *l = m + bq;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t bh = b * H + h, bg = b * Hkv + h / G;
            for (int64_t i0 = 0; i0 < Nq; i0 += bq) {
                const int64_t nq = (Nq - i0 < bq) ? Nq - i0 : bq;
                SFX(flash_forward_block)(o + bh * Nq * d, lse + bh * Nq, lse_lo ? lse_lo + bh * Nq : NULL,
                                         q + bh * Nq * d, k + bg * Nk * d, v + bg * Nk * d, b, h, i0, nq, S, m, l,
                                         &p2);
            }
        }
    fg_free(FG_CPU, scratch);
    return FG_OK;
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

fg_status SFX(fg_attn_flash_backward_lo)(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k,
                                      const T *v, const T *o, const T *lse, const T *lse_lo,
                                      const fg_attn_problem *pr) {
    const int64_t B = pr->B, H = pr->H, Nq = pr->Nq, Nk = pr->Nk, d = pr->d;
    const int64_t Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : H, G = Hkv > 0 ? H / Hkv : 1;
    if (!dq && !dk && !dv) return FG_OK;
    const int64_t bq = pr->block_q < Nq ? pr->block_q : (Nq > 0 ? Nq : 1);
    const int64_t bk = pr->block_k < Nk ? pr->block_k : (Nk > 0 ? Nk : 1);
    fg_attn_problem p2 = *pr;
    p2.block_q = (int)bq;
    p2.block_k = (int)bk;
    const int dropout = fg_dropout_threshold(pr->dropout_p) != 0, chain = fg_attn_needs_score_grad(pr);
    size_t tile = (size_t)(bq * bk);
    size_t n_scratch = (2 + dropout + chain) * tile + (size_t)(Nq > 0 ? Nq : 1);
    T *scratch = fg_alloc(FG_CPU, n_scratch * sizeof(T));
    if (!scratch) return fg_error(FG_ERR_OOM, "flash attention backward: cannot allocate %zu bytes of scratch",
                                  n_scratch * sizeof(T));
    T *P = scratch, *dS = P + tile, *D = dS + tile, *Z = dropout ? D + (Nq > 0 ? Nq : 1) : NULL;
    T *Gt = chain ? D + (Nq > 0 ? Nq : 1) + (dropout ? tile : 0) : NULL;
    /* one work item per (b, K/V head g): the G query heads of the group add into the same dK, dV */
    for (int64_t b = 0; b < B; b++)
        for (int64_t g = 0; g < Hkv; g++) {
            const int64_t ko = (b * Hkv + g) * Nk * d;
            for (int64_t h = g * G; h < (g + 1) * G; h++) {
                const int64_t bh = b * H + h, qo = bh * Nq * d;
                SFX(flash_backward_head)(dq ? dq + qo : NULL, dk ? dk + ko : NULL, dv ? dv + ko : NULL, dout + qo,
                                         q + qo, k + ko, v + ko, o + qo, lse + bh * Nq,
                                         lse_lo ? lse_lo + bh * Nq : NULL, b, h, P, dS, Z, Gt, D, &p2);
            }
        }
    fg_free(FG_CPU, scratch);
    return FG_OK;
}

fg_status SFX(fg_attn_flash_forward)(T *o, T *lse, const T *q, const T *k, const T *v, const fg_attn_problem *pr) {
    return SFX(fg_attn_flash_forward_lo)(o, lse, NULL, q, k, v, pr);
}

fg_status SFX(fg_attn_flash_backward)(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v,
                                      const T *o, const T *lse, const fg_attn_problem *pr) {
    return SFX(fg_attn_flash_backward_lo)(dq, dk, dv, dout, q, k, v, o, lse, NULL, pr);
}

#endif /* FG_ATTN_FLASH_TEMPLATE */
