/* attention_variant_body.h — the per-dtype code every CPU attention kernel runs on a tile of
 * scores: the variants (steps 2–5 of ops/attention.h) and dropout's scaling.
 *
 * Legend: B batch, H heads (of Q), Nq queries, Nk keys; a tile is rows [i0, i0 + nq) × keys
 * [j0, j0 + nk) of one (b, h), row stride ld.
 *
 * Both kernels call score_tile on every tile they compute (naive: the whole Nq × Nk matrix as one
 * tile), so a variant's semantics live here once. Its loops are one per variant, each over the
 * whole tile, so the plain path (no variant, FULL tile) does nothing, and the built-in variants
 * are flat loops the compiler can vectorize; user callbacks run in a loop of their own, called only
 * on elements that are still visible.
 *
 * A template body: ops/cpu/attention_f32.c and ops/cpu/attention_f64.c include it once each, with
 * T the dtype, TANH and FABS its tanh and fabs, and LIN the bound below which c · tanh(s / c)
 * rounds to s; their kernels call score_tile and dropout_scale, and fg_attn_dropout_scale_f32/_f64
 * wraps dropout_scale.
 */
/* (no include guard: included once per dtype translation unit) */

/* ---- dropout: Z(b, h, i, j) = keep ? 1/(1-p) : 0, regenerated wherever it is needed ----
 * x[j] *= Z(b, h, i, j0 + j) for j in [0, n). counter = (j/4, i, h, b), word j%4: one Philox
 * block serves four keys (fg_attn_keep). The blocks of a row segment come DROPOUT_BLOCKS at a
 * time from fg_philox_blocks (ops/cpu/vphilox.h: the same words, 16 blocks per AVX-512
 * instruction sequence). */
#ifndef DROPOUT_BLOCKS
#define DROPOUT_BLOCKS 64
#endif
static void dropout_scale(T *x, int64_t n, uint64_t seed, uint32_t threshold, T inv_keep, int64_t b, int64_t h,
                          int64_t i, int64_t j0) {
    if (threshold == 0) return;
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t w[4 * DROPOUT_BLOCKS];
    for (int64_t jj = 0; jj < n;) {
        const int64_t j = j0 + jj, blk = j >> 2, last = (j0 + n - 1) >> 2;
        const int64_t nb = last - blk + 1 < DROPOUT_BLOCKS ? last - blk + 1 : DROPOUT_BLOCKS;
        fg_philox_blocks((uint32_t)blk, (uint32_t)i, (uint32_t)h, (uint32_t)b, key, nb, w);
        /* w[j' - 4·blk] is key j''s word, for j' up to 4·(blk + nb) */
        const int64_t end = 4 * (blk + nb) - j0 < n ? 4 * (blk + nb) - j0 : n;
        for (; jj < end; jj++) x[jj] = w[j0 + jj - 4 * blk] >= threshold ? x[jj] * inv_keep : (T)0;
    }
}

/* ---- steps 2–5 on a tile ----
 * S is the tile of scaled scores (step 1) of rows [i0, i0 + nq) and keys [j0, j0 + nk) of head
 * (b, h), row stride ld. Applies steps 2–5 in place: softcap and ALiBi on every element; then, when
 * kind is FG_TILE_PARTIAL, −inf outside causal ∧ window (window_partial) and where the mask
 * callback says no (mask_partial); then score_mod on the elements still visible. With G not NULL,
 * G (same layout) receives ∂s_final/∂s_1 (1 where no variant changes the score, 0 where s_final is
 * −inf). FG_TILE_FULL: no element is masked, nothing is tested. Never called with MASKED. */
static void score_tile(T *S, T *G, int64_t ld, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                       fg_tile_kind kind, int window_partial, int mask_partial, const fg_attn_problem *pr) {
    const fg_attn_variant *v = &pr->var;
    /* 2. softcap: s = c tanh(s / c);  ∂/∂s = 1 − tanh²(s / c).
     * For |u| = |s / c| < LIN, c tanh(u) = s (1 − u²/3 + ...) rounds to s itself (u²/3 is below
     * half an ulp), so s is kept: exact, where c · tanh(s · (1/c)) would carry the roundings of
     * 1/c, s · (1/c) and c · t — and lose all precision once s · (1/c) is subnormal (a c near T's
     * largest value). */
    if (v->softcap > 0) {
        const T c = (T)v->softcap, inv_c = (T)(1.0 / v->softcap), lin = LIN;
        for (int64_t r = 0; r < nq; r++) {
            T *srow = S + r * ld;
            T *grow = G ? G + r * ld : NULL;
            if (grow)
                for (int64_t j = 0; j < nk; j++) {
                    const T x = srow[j], u = x * inv_c, t = TANH(u);
                    srow[j] = FABS(u) < lin ? x : c * t;
                    grow[j] = 1 - t * t;
                }
            else
                for (int64_t j = 0; j < nk; j++) {
                    const T x = srow[j], u = x * inv_c;
                    srow[j] = FABS(u) < lin ? x : c * TANH(u);
                }
        }
    } else if (G) {
        for (int64_t r = 0; r < nq; r++)
            for (int64_t j = 0; j < nk; j++) G[r * ld + j] = 1;
    }
    /* 3. ALiBi: s −= slope_h |i' − j|  (derivative 1) */
    if (v->alibi) {
        const double slope = v->alibi_slopes ? v->alibi_slopes[h] : fg_attn_alibi_slope(h, pr->H);
        const int64_t off = pr->Nk - pr->Nq;
        for (int64_t r = 0; r < nq; r++) {
            T *srow = S + r * ld;
            const int64_t dist0 = i0 + r + off - j0; /* i' − j at j = j0 */
            for (int64_t j = 0; j < nk; j++) {
                const int64_t dist = dist0 - j;
                srow[j] -= (T)(slope * (double)(dist < 0 ? -dist : dist));
            }
        }
    }
    /* 5. the mask, before score_mod so that the callback only sees visible elements */
    if (kind == FG_TILE_PARTIAL) {
        if (window_partial)
            for (int64_t r = 0; r < nq; r++) {
                int64_t lo, hi;
                fg_attn_row_range(i0 + r, pr->Nq, pr->Nk, pr->causal, v->window, v->window_left, v->window_right, &lo,
                                  &hi);
                lo -= j0;
                hi -= j0;
                if (hi < lo) hi = lo;
                T *srow = S + r * ld;
                T *grow = G ? G + r * ld : NULL;
                for (int64_t j = 0; j < nk && j < lo; j++) srow[j] = -INFINITY;
                for (int64_t j = hi > 0 ? hi : 0; j < nk; j++) srow[j] = -INFINITY;
                if (grow) {
                    for (int64_t j = 0; j < nk && j < lo; j++) grow[j] = 0;
                    for (int64_t j = hi > 0 ? hi : 0; j < nk; j++) grow[j] = 0;
                }
            }
        if (mask_partial && pr->custom.mask) {
            const fg_attn_mask_fn mask = pr->custom.mask;
            void *user = pr->custom.user;
            for (int64_t r = 0; r < nq; r++)
                for (int64_t j = 0; j < nk; j++) {
                    T *s = S + r * ld + j;
                    if (*s == -INFINITY || mask(b, h, i0 + r, j0 + j, user)) continue;
                    *s = -INFINITY;
                    if (G) G[r * ld + j] = 0;
                }
        }
    }
    /* 4. score_mod on the visible elements: s = f(s);  G *= f'(s) */
    if (pr->custom.score_mod) {
        const fg_attn_score_mod_fn f = pr->custom.score_mod, df = pr->custom.score_mod_grad;
        void *user = pr->custom.user;
        for (int64_t r = 0; r < nq; r++)
            for (int64_t j = 0; j < nk; j++) {
                T *s = S + r * ld + j;
                if (*s == -INFINITY) continue;
                const double x = (double)*s;
                *s = (T)f(x, b, h, i0 + r, j0 + j, user);
                if (G)
                    G[r * ld + j] =
                        *s == -INFINITY ? 0 : (T)((double)G[r * ld + j] * df(x, b, h, i0 + r, j0 + j, user));
            }
    }
}
