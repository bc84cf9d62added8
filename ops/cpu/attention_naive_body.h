/* attention_naive_body.h — textbook attention: the whole score matrix of a head at once. The reference
 * that flash attention is checked against, and the baseline its memory is compared with.
 *
 * Legend: B batch, H heads, H_kv K/V heads (G = H / H_kv), Nq queries, Nk keys, d head dim.
 *   q (B, H, Nq, d); k, v (B, H_kv, Nk, d); o (B, H, Nq, d); lse (B, H, Nq)
 *   p (B, H, Nq, Nk): the softmax before dropout, saved for backward
 *   query head h reads K/V head h / G; masks and variants as in ops/attention.h.
 *
 * Forward, per (b, h):
 *     S1 = scale · Q Kᵀ;  S = variants(S1) (score_tile: softcap, ALiBi, mask -inf, score_mod)
 *     P = softmax(S) row by row (max-subtracted)
 *     O = (P∘Z) V,  Z = dropout mask / (1 − p);  lse = rowmax S + log rowsum exp(S − rowmax S)
 * Backward, per (b, h), from the saved P:
 *     dV = (P∘Z)ᵀ dO;  dP = (dO Vᵀ)∘Z;  dS = P∘(dP − rowsum(dP∘P))
 *     dS1 = dS ∘ G, G = ∂S/∂S1 recomputed from S1 = scale · Q Kᵀ (only with softcap or score_mod)
 *     dQ = scale dS1 K;  dK = scale dS1ᵀ Q  (dK, dV of head h / G add up over the group)
 * A row that sees no key has P = 0, O = 0, lse = -inf and zero gradients; a row with a NaN score
 * has P, O and lse NaN.
 *
 * A template body: ops/cpu/attention_f32.c and ops/cpu/attention_f64.c include it once each, with
 * T the dtype, GEMM its cblas_?gemm and EXP its exp, after ops/cpu/attention_variant_body.h
 * (score_tile, dropout_scale); their fg_cpu_attention_naive_{forward,backward}_f32/_f64 call
 * naive_forward and naive_backward.
 */
/* (no include guard: included once per dtype translation unit) */

/* C (m × n) = alpha · op(A) op(B) + beta · C; a no-op on empty sizes. */
static void naive_gemm(int ta, int tb, int64_t m, int64_t n, int64_t kk, T alpha, const T *A, int64_t lda, const T *Bm,
                       int64_t ldb, T beta, T *C, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (kk == 0) {
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < n; c++) C[r * ldc + c] = beta == 0 ? 0 : beta * C[r * ldc + c];
        return;
    }
    GEMM(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)kk, alpha,
         A, (int)(lda > 0 ? lda : 1), Bm, (int)(ldb > 0 ? ldb : 1), beta, C, (int)(ldc > 0 ? ldc : 1));
}

/* The variants' tile kind for the whole matrix: naive tests every element it needs to. */
static fg_tile_kind naive_kind(const fg_attn_problem *pr, int *wp, int *mp) {
    *wp = pr->causal || pr->var.window;
    *mp = pr->custom.mask != NULL;
    return (*wp || *mp) ? FG_TILE_PARTIAL : FG_TILE_FULL;
}

static fg_status naive_forward(T *o, T *lse, T *p, const T *q, const T *k, const T *v, const fg_attn_problem *pr) {
    const int64_t B = pr->B, H = pr->H, Nq = pr->Nq, Nk = pr->Nk, d = pr->d;
    const int64_t Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : H, G = Hkv > 0 ? H / Hkv : 1;
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    const T inv_keep = (T)(1.0 / (1.0 - pr->dropout_p));
    const size_t nn = (size_t)(Nq * Nk);
    int wp, mp;
    const fg_tile_kind kind = naive_kind(pr, &wp, &mp);
    const int variants = kind != FG_TILE_FULL || fg_attn_modifies_scores(pr);
    /* scratch: P when the caller does not keep it, P∘Z with dropout */
    size_t n_scratch = (p ? 0 : (nn ? nn : 1)) + (thr ? nn : 0);
    T *scratch = NULL;
    if (n_scratch) {
        scratch = fg_alloc(FG_CPU, n_scratch * sizeof(T));
        if (!scratch)
            return fg_error(FG_ERR_OOM, "naive attention: cannot allocate %zu bytes for the %lldx%lld score matrix",
                            n_scratch * sizeof(T), (long long)Nq, (long long)Nk);
    }
    T *PZ = thr ? scratch + (p ? 0 : (nn ? nn : 1)) : NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t bh = b * H + h, bg = b * Hkv + h / G;
            const T *Q = q + bh * Nq * d, *K = k + bg * Nk * d, *V = v + bg * Nk * d;
            T *O = o + bh * Nq * d, *L = lse + bh * Nq;
            T *P = p ? p + (size_t)bh * nn : scratch;
            /* S = scale · Q Kᵀ  (Nq × Nk), into P's buffer, then the variants */
            naive_gemm(0, 1, Nq, Nk, d, (T)pr->scale, Q, d, K, d, 0, P, Nk);
            if (variants && nn) score_tile(P, NULL, Nk, b, h, 0, Nq, 0, Nk, kind, wp, mp, pr);
            for (int64_t i = 0; i < Nq; i++) {
                T *row = P + i * Nk;
                T mx = -INFINITY;
                for (int64_t j = 0; j < Nk; j++)
                    if (row[j] > mx) mx = row[j];
                if (mx == -INFINITY) { /* every score -inf or NaN */
                    int nan = 0;
                    for (int64_t j = 0; j < Nk; j++) nan |= row[j] != row[j];
                    if (!nan) { /* no visible key (or every score -inf): P = 0, lse = -inf */
                        for (int64_t j = 0; j < Nk; j++) row[j] = 0;
                        L[i] = -INFINITY;
                        continue;
                    }
                    mx = 0; /* a NaN score: the row below makes P and lse NaN, as with a finite max */
                }
                T sum = 0;
                for (int64_t j = 0; j < Nk; j++) { /* exp(-inf − mx) = 0 for masked keys */
                    row[j] = EXP(row[j] - mx);
                    sum += row[j];
                }
                T inv = 1 / sum;
                for (int64_t j = 0; j < Nk; j++) row[j] *= inv;
                L[i] = (T)((double)mx + log((double)sum)); /* one rounding for float32 */
            }
            const T *W = P; /* the weights that multiply V */
            if (thr) {
                memcpy(PZ, P, nn * sizeof(T));
                for (int64_t i = 0; i < Nq; i++) dropout_scale(PZ + i * Nk, Nk, pr->seed, thr, inv_keep, b, h, i, 0);
                W = PZ;
            }
            /* O = W V */
            naive_gemm(0, 0, Nq, d, Nk, 1, W, Nk, V, d, 0, O, d);
            /* a NaN row is NaN in O too, even where dropout zeroed its NaN weights */
            for (int64_t i = 0; i < Nq; i++)
                if (L[i] != L[i])
                    for (int64_t c = 0; c < d; c++) O[i * d + c] = L[i];
        }
    if (scratch) fg_free(FG_CPU, scratch);
    return FG_OK;
}

static fg_status naive_backward(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v, const T *p,
                                const fg_attn_problem *pr) {
    const int64_t B = pr->B, H = pr->H, Nq = pr->Nq, Nk = pr->Nk, d = pr->d;
    const int64_t Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : H, G = Hkv > 0 ? H / Hkv : 1;
    if (!dq && !dk && !dv) return FG_OK;
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    const T inv_keep = (T)(1.0 / (1.0 - pr->dropout_p));
    const T scale = (T)pr->scale;
    const size_t nn = (size_t)(Nq * Nk);
    int wp, mp;
    const fg_tile_kind kind = naive_kind(pr, &wp, &mp);
    const int chain = fg_attn_needs_score_grad(pr); /* ∂S/∂S1 is not 1 */
    /* scratch: dP/dS (Nq × Nk), P∘Z with dropout, S1 and G with softcap or score_mod */
    size_t n_scratch = (nn ? nn : 1) + (thr ? nn : 0) + (chain ? 2 * nn : 0);
    T *scratch = fg_alloc(FG_CPU, n_scratch * sizeof(T));
    if (!scratch)
        return fg_error(FG_ERR_OOM, "naive attention backward: cannot allocate %zu bytes", n_scratch * sizeof(T));
    T *dS = scratch, *PZ = thr ? scratch + nn : NULL;
    T *S1 = chain ? scratch + nn + (thr ? nn : 0) : NULL, *Gm = chain ? S1 + nn : NULL;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t bh = b * H + h, bg = b * Hkv + h / G;
            const T *Q = q + bh * Nq * d, *K = k + bg * Nk * d, *V = v + bg * Nk * d;
            const T *dO = dout + bh * Nq * d, *P = p + (size_t)bh * nn;
            const T *W = P;
            if (thr) {
                memcpy(PZ, P, nn * sizeof(T));
                for (int64_t i = 0; i < Nq; i++) dropout_scale(PZ + i * Nk, Nk, pr->seed, thr, inv_keep, b, h, i, 0);
                W = PZ;
            }
            /* the forward's O = (P∘Z) V:  dV += (P∘Z)ᵀ dO,  d(P∘Z) = dO Vᵀ */
            if (dv) naive_gemm(1, 0, Nk, d, Nq, 1, W, Nk, dO, d, 1, dv + bg * Nk * d, d);
            if (!dq && !dk) continue;
            naive_gemm(0, 1, Nq, Nk, d, 1, dO, d, V, d, 0, dS, Nk);
            /* dP = d(P∘Z) ∘ Z;  the forward's P = softmax(S): dS = P∘(dP − rowsum(dP∘P)) */
            for (int64_t i = 0; i < Nq; i++) {
                T *row = dS + i * Nk;
                const T *prow = P + i * Nk;
                if (thr) dropout_scale(row, Nk, pr->seed, thr, inv_keep, b, h, i, 0);
                T r = 0;
                for (int64_t j = 0; j < Nk; j++) r += row[j] * prow[j];
                for (int64_t j = 0; j < Nk; j++) row[j] = prow[j] * (row[j] - r);
            }
            /* the forward's S = variants(S1): dS1 = dS ∘ G, G = ∂S/∂S1 recomputed from S1 = scale · Q Kᵀ.
             * Where P = 0 (masked) dS is 0 and G is not used. */
            if (chain && nn) {
                naive_gemm(0, 1, Nq, Nk, d, scale, Q, d, K, d, 0, S1, Nk);
                score_tile(S1, Gm, Nk, b, h, 0, Nq, 0, Nk, kind, wp, mp, pr);
                for (size_t e = 0; e < nn; e++)
                    if (dS[e] != 0) dS[e] *= Gm[e];
            }
            /* the forward's S1 = scale · Q Kᵀ:  dQ += scale dS1 K,  dK += scale dS1ᵀ Q */
            if (dq) naive_gemm(0, 0, Nq, d, Nk, scale, dS, Nk, K, d, 1, dq + bh * Nq * d, d);
            if (dk) naive_gemm(1, 0, Nk, d, Nq, scale, dS, Nk, Q, d, 1, dk + bg * Nk * d, d);
        }
    fg_free(FG_CPU, scratch);
    return FG_OK;
}
