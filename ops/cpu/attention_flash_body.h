/* attention_flash_body.h — FlashAttention on the CPU: tiled forward with an online softmax, and a
 * backward that recomputes the attention weights from the saved logsumexp (FlashAttention-2's
 * loop order). Nothing of size Nq×Nk is ever allocated.
 *
 * Legend: B batch, H heads, H_kv K/V heads (G = H / H_kv), Nq queries, Nk keys, d head dim;
 * bq = block_q, bk = block_k.
 *   q (B, H, Nq, d); k, v (B, H_kv, Nk, d); o (B, H, Nq, d); lse (B, H, Nq)
 *   query head h reads K/V head h / G; masks and variants as in ops/attention.h.
 * Those are the contiguous layouts; the drivers address every array but lse through its rows'
 * strides (pr->rows, fg_attn_layout, ops/attention_kernels.h), so a head may also be a column group of a
 * packed projection. A row's d elements are always contiguous.
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
 * One driver per direction walks the tiles; the arithmetic on a tile goes through a table of tile
 * operations (ops/cpu/flash_tiles.h): the portable one (BLAS tile products, libm's exp) for float64,
 * and for float32 on a CPU without AVX2+FMA or with FG_ATTN_GEMM=blas set; else the x86 one, whose
 * forward tile is Sᵀ = scale · Kj Qiᵀ (Qiᵀ packed once per item: every query row in its own vector
 * lane for the online softmax), handed to the variants code and to dropout transposed back.
 *
 * Threads. The work splits into items that share nothing but the read-only inputs: a group of
 * query blocks of one (b, h) in the forward (their rows of O and lse; fg_attn_flash_fwd_group,
 * ops/cpu/attention_cpu.h), one (b, K/V head) in the backward (its dK,
 * dV rows and the dQ rows of its G query heads), handed out by the pool (ops/cpu/threadpool.h),
 * costly ones first (causal: the last query blocks). Each item computes its outputs in a fixed
 * order — key blocks in increasing order, every sum of a product in index order — so the results
 * are bit-identical for any thread count and schedule (tests/test_simd.c; the BLAS path as far as
 * BLAS is for one thread). Scratch is one item's tiles per thread that can take part, allocated
 * before the items start. User callbacks (score_mod, mask) need not be thread-safe: a problem that
 * has them runs its items serially, in order, on the calling thread. The backward has B·H_kv items
 * (fewer than threads, e.g. multi-query attention at batch 1, leaves threads idle: splitting an
 * item's key blocks would need dQ partials summed in a fixed order).
 *
 * Precision in float32. Two quantities are kept better than float32 because their errors do not
 * average out: L is evaluated in double and its rounding remainder kept as lse_lo (one more float
 * per row), so exp((S − L) − lse_lo) is as precise near the row max as naive's stored P even when
 * |L| is large; and D is summed in double, because dS = P ∘ (dP − D) cancels for a peaked row.
 * Without them, flash float32 gradients were up to ~6x less accurate than naive float32 on
 * peaked softmaxes (tests/test_attention.c, flash_f32_error_at_most_twice_naive_f32_error).
 *
 * The drivers are a template body: ops/cpu/attention_f32.c and ops/cpu/attention_f64.c include it
 * once each, with T the dtype, DT its fg_dtype, flash_ops its table type of tile operations and
 * flash_ops_of_dtype() the table to use; their fg_cpu_attention_flash_{forward,backward}_f32/_f64 call
 * flash_forward_lo and flash_backward_lo. What both dtypes share (scratch, the item runner, the
 * choice of table) is in ops/cpu/attention.c.
 */
/* (no include guard: included once per dtype translation unit) */

/* The variants code and dropout take the forward's score tile row-major (row stride bk): S itself,
 * or with the x86 table Sᵀ transposed into R (bq × bk), and back into Sᵀ when `back`. */
static T *rows_view(const flash_ops *op, T *S, T *R, int64_t ld, int64_t bk, int64_t nq, int64_t nk, int back) {
    if (!op->packs) return S;
    if (back)
        op->transpose(S, ld, R, bk, nq, nk);
    else
        op->transpose(R, bk, S, ld, nk, nq);
    return R;
}

/* Ask for [p, p + bytes) to be brought into L2 (a hint: no effect on results). */
static inline void prefetch_l2(const void *p, int64_t bytes) {
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o, 0, 2);
}
/* The same for `rows` rows of d elements, row stride ld. */
static inline void prefetch_rows_l2(const T *p, int64_t rows, int64_t ld, int64_t d) {
    if (ld == d) {
        prefetch_l2(p, rows * d * (int64_t)sizeof(T));
        return;
    }
    for (int64_t r = 0; r < rows; r++) prefetch_l2(p + r * ld, d * (int64_t)sizeof(T));
}
/* Zeroes `rows` rows of d elements, row stride ld. */
static inline void zero_rows(T *p, int64_t rows, int64_t ld, int64_t d) {
    if (ld == d) {
        memset(p, 0, (size_t)(rows * d) * sizeof(T));
        return;
    }
    for (int64_t r = 0; r < rows; r++) memset(p + r * ld, 0, (size_t)d * sizeof(T));
}
/* The start of head (b, h)'s rows in an array of layout R. */
static inline int64_t head_at(fg_attn_rows R, int64_t b, int64_t h) { return b * R.b + h * R.h; }

/* A tile on the diagonal of a plain causal mask (PARTIAL through causality alone: no window, no
 * mask callback; `plain` says the caller has no variant, dropout or score gradient either): its
 * first nq/2 query rows see only the tile's first kc keys, so every product of the tile can leave
 * out the quarter (rows [0, nq/2) × keys [kc, nk)) whose weights are all 0: the tile is computed
 * as rows [0, nq/2) × keys [0, kc) and rows [nq/2, nq) × all keys. Returns kc, or nk for a tile
 * that is not split (kc would be 0 or nk: nothing to leave out). The masked entries the products
 * leave unset are set to −inf by the mask step as before, and the terms left out of each sum are
 * products with a zero weight: with the x86 table (each sum in index order) the bits of the whole
 * tile; BLAS may round the smaller products differently. (A non-finite V or dO row of a key that a
 * row cannot see no longer reaches the rows of the left-out quarter as 0 · inf.) */
static int64_t causal_cut(const fg_attn_problem *pr, fg_tile_kind kind, int window_partial, int mask_partial, int plain,
                          int64_t i0, int64_t nq, int64_t j0, int64_t nk) {
    if (!plain || kind != FG_TILE_PARTIAL || !pr->causal || pr->var.window || mask_partial || pr->custom.mask ||
        !window_partial || nq < 2)
        return nk;
    int64_t a, e;
    fg_attn_row_range(i0 + nq / 2 - 1, pr->Nq, pr->Nk, pr->causal, 0, 0, 0, &a, &e);
    const int64_t kc = e - j0;
    return kc > 0 && kc < nk ? kc : nk;
}

/* The end of a forward item: Oi /= l and L = m + log l, evaluated in double and rounded once, lo
 * keeping what the rounding lost. l = 0: the row sees no key (O = 0 already, L = −inf); l NaN (a
 * NaN score in the row, which the softmax's exp keeps): O and L NaN. */
static void flash_epilogue(T *Oi, int64_t ldo, T *Li, T *lo, const T *m, const T *l, int64_t nq, int64_t d) {
    for (int64_t r = 0; r < nq; r++) {
        T *orow = Oi + r * ldo;
        if (l[r] != 0) {
            const T inv = 1 / l[r];
            int64_t c = 0;
            for (; c + 16 <= d; c += 16) /* a fixed count, which the compiler turns into vectors */
                for (int k = 0; k < 16; k++) orow[c + k] *= inv;
            for (; c < d; c++) orow[c] *= inv;
            const double Ld = (double)m[r] + log((double)l[r]);
            Li[r] = (T)Ld;
            if (lo) lo[r] = (T)(Ld - (double)(T)Ld);
        } else {
            Li[r] = -INFINITY;
            if (lo) lo[r] = 0;
        }
    }
}

typedef struct {
    const flash_ops *op;
    const fg_attn_problem *pr; /* blocks resolved */
    T *o, *lse, *lse_lo;
    const T *q, *k, *v;
    fg_attn_layout L;
    int64_t ngroups, Hkv, G;
    int64_t ld;    /* the score tile's row stride: bk (S), or bq rounded up to 16 (Sᵀ) */
    int64_t nm;    /* entries of m, l and alpha per query block: bq, or ld (Sᵀ's padded columns) */
    int64_t group; /* query blocks per item (fg_attn_flash_fwd_group) */
    int need_r, mods; /* mods: variants change the scores (fg_attn_modifies_scores) */
    uint32_t thr;     /* dropout's keep threshold (0: no dropout) and 1 / (1 − p) */
    T inv_keep;
    fg_attn_flash_scratch scratch;
} fwd_job;

/* A forward item's state for one of its query blocks: rows [i0, i0 + nq), their Qᵢᵀ (x86 only),
 * running max m, sum l and rescale alpha, the accumulator Oi (o itself) and the key blocks [jb, je)
 * the rows can see. */
typedef struct {
    int64_t i0, nq, jb, je;
    const T *Qi;
    T *Oi, *QT, *m, *l, *alpha;
} fwd_rows;

/* One tile of the forward: query block Q (its rows, state and accumulator) against key block j0
 * (nk keys); S and R are the item's score tiles. */
static void fwd_tile(const fwd_job *J, fwd_rows *Q, T *S, T *R, int64_t b, int64_t h, const T *K, const T *V,
                     int64_t j0, int64_t nk) {
    const flash_ops *op = J->op;
    const fg_attn_problem *pr = J->pr;
    const int64_t d = pr->d, Nq = pr->Nq, bk = pr->block_k, ld = J->ld, nq = Q->nq, i0 = Q->i0;
    const int64_t ldq = J->L.q.t, ldk = J->L.k.t, ldv = J->L.v.t, ldo = J->L.o.t;
    const fg_attn_variant *var = &pr->var;
    int wp, mp;
    const fg_tile_kind kind = fg_attn_tile_kind(pr, b, h, i0, nq, j0, nk, &wp, &mp);
    fg_flash_prof_mark(FG_FLASH_FWD_MASK, 0);
    if (kind == FG_TILE_MASKED) return;
    /* S = scale · Qi Kjᵀ (nq × nk), or Sᵀ = scale · Kj Qiᵀ (nk × nq) */
    const T scale = (T)pr->scale;
    /* a causal diagonal tile: rows [0, qh) against keys [0, kc), rows [qh, nq) against all */
    const int64_t kc = causal_cut(pr, kind, wp, mp, !J->mods && !J->thr, i0, nq, j0, nk), qh = kc < nk ? nq / 2 : 0;
    const double flops = 2.0 * (double)d * (double)(qh * kc + (nq - qh) * nk);
    if (op->packs) { /* on Sᵀ the same quarter left out as keys [0, kc) × all rows, keys [kc, nk) × rows [qh, nq) */
        op->gemm(0, 0, kc, nq, d, scale, K + j0 * ldk, ldk, Q->QT, ld, S, ld, NULL, 0);
        if (qh)
            op->gemm(0, 0, nk - kc, nq - qh, d, scale, K + (j0 + kc) * ldk, ldk, Q->QT + qh, ld, S + kc * ld + qh, ld,
                     NULL, 0);
    } else {
        if (qh) op->gemm(0, 1, qh, kc, d, scale, Q->Qi, ldq, K + j0 * ldk, ldk, S, ld, NULL, 0);
        op->gemm(0, 1, nq - qh, nk, d, scale, Q->Qi + qh * ldq, ldq, K + j0 * ldk, ldk, S + qh * ld, ld, NULL, 0);
    }
    fg_flash_prof_mark(FG_FLASH_FWD_QK, flops);
    if (J->mods || (kind == FG_TILE_PARTIAL && pr->custom.mask)) { /* what every kernel shares */
        T *Sr = rows_view(op, S, R, ld, bk, nq, nk, 0);
        score_tile(Sr, NULL, bk, b, h, i0, nq, j0, nk, kind, wp, mp, pr);
        rows_view(op, S, R, ld, bk, nq, nk, 1);
    } else if (kind == FG_TILE_PARTIAL && op->packs) {
        /* causal ∧ window only, on Sᵀ (row j: key j0 + j). Row r sees keys [lo_r, hi_r), both
         * nondecreasing in r, so key j is seen by one run of rows [rb, re): from the first with
         * hi_r > j0 + j up to the first with lo_r > j0 + j (none when re <= rb); the rest of key
         * j's row is masked, in two contiguous runs. */
        int64_t rb = 0, re = 0;
        for (int64_t j = 0; j < nk; j++) {
            const int64_t key = j0 + j;
            int64_t a, e;
            for (; rb < nq; rb++) {
                fg_attn_row_range(i0 + rb, Nq, pr->Nk, pr->causal, var->window, var->window_left, var->window_right,
                                  &a, &e);
                if (e > key) break;
            }
            for (; re < nq; re++) {
                fg_attn_row_range(i0 + re, Nq, pr->Nk, pr->causal, var->window, var->window_left, var->window_right,
                                  &a, &e);
                if (a > key) break;
            }
            T *srow = S + j * ld;
            const int64_t r1 = re > rb ? re : rb;
            for (int64_t r = 0; r < rb; r++) srow[r] = -INFINITY;
            for (int64_t r = r1; r < nq; r++) srow[r] = -INFINITY;
        }
    } else if (kind == FG_TILE_PARTIAL) { /* the same on S: row r sees keys [a, e) */
        for (int64_t r = 0; r < nq; r++) {
            int64_t a, e;
            fg_attn_row_range(i0 + r, Nq, pr->Nk, pr->causal, var->window, var->window_left, var->window_right, &a, &e);
            for (int64_t j = 0; j < nk && j < a - j0; j++) S[r * ld + j] = -INFINITY;
            for (int64_t j = e - j0 > 0 ? e - j0 : 0; j < nk; j++) S[r * ld + j] = -INFINITY;
        }
    }
    fg_flash_prof_mark(FG_FLASH_FWD_MASK, 0);
    op->softmax(S, ld, nq, nk, Q->m, Q->l, Q->alpha);
    fg_flash_prof_mark(FG_FLASH_FWD_SOFTMAX, 0);
    if (J->thr) { /* dropout acts on the weights after the softmax; l keeps the full sum */
        T *Sr = rows_view(op, S, R, ld, bk, nq, nk, 0);
        for (int64_t r = 0; r < nq; r++)
            dropout_scale(Sr + r * bk, nk, pr->seed, J->thr, J->inv_keep, b, h, i0 + r, j0);
        rows_view(op, S, R, ld, bk, nq, nk, 1);
        fg_flash_prof_mark(FG_FLASH_FWD_DROPOUT, 0);
    }
    /* Oi = alpha ∘ Oi + P Vj, P read from S (or from Sᵀ as a transposed operand); P's row r starts
     * at S + r (Sᵀ) or S + r · ld */
    const int64_t pr_qh = op->packs ? qh : qh * ld;
    if (qh) op->gemm(op->packs, 0, qh, d, kc, 1, S, ld, V + j0 * ldv, ldv, Q->Oi, ldo, Q->alpha, 1);
    op->gemm(op->packs, 0, nq - qh, d, nk, 1, S + pr_qh, ld, V + j0 * ldv, ldv, Q->Oi + qh * ldo, ldo, Q->alpha + qh,
             1);
    fg_flash_prof_mark(FG_FLASH_FWD_PV, flops);
}

/* One item: up to `group` query blocks of head (b, h); the last groups come first (under a causal
 * mask they see the most keys, and taking them first evens out the threads' loads). Scratch: the
 * score tile (S bq × bk, or Sᵀ bk × ld), with the x86 table a row-major tile R (bq × bk) for
 * variants and dropout, then per query block Qiᵀ (d × ld, x86 only), m, l and alpha. */
static void fwd_item(void *ctx, int64_t item, int worker) {
    fwd_job *J = ctx;
    const flash_ops *op = J->op;
    const fg_attn_problem *pr = J->pr;
    const int64_t d = pr->d, Nq = pr->Nq, Nk = pr->Nk, H = pr->H, BH = pr->B * H, bq = pr->block_q, bk = pr->block_k;
    const int64_t ld = J->ld, nm = J->nm;
    T *scr = fg_attn_flash_scratch_get(&J->scratch, worker);
    if (!scr) return;
    T *S = scr, *R = S + (op->packs ? bk : bq) * ld, *st = R + (J->need_r ? bq * bk : 0);
    const int64_t bh = item % BH, g0 = (J->ngroups - 1 - item / BH) * J->group * bq;
    const int64_t b = bh / H, h = bh % H, ldq = J->L.q.t, ldo = J->L.o.t;
    const T *K = J->k + head_at(J->L.k, b, h / J->G), *V = J->v + head_at(J->L.v, b, h / J->G);
    fg_flash_prof_begin();
    fwd_rows rows[FG_ATTN_FLASH_FWD_GROUP];
    int64_t n = 0, jb = Nk, je = 0;
    for (int64_t i0 = g0; i0 < Nq && n < J->group; i0 += bq, n++) {
        fwd_rows *Q = &rows[n];
        Q->i0 = i0;
        Q->nq = Nq - i0 < bq ? Nq - i0 : bq;
        Q->Qi = J->q + head_at(J->L.q, b, h) + i0 * ldq;
        Q->Oi = J->o + head_at(J->L.o, b, h) + i0 * ldo;
        Q->QT = st;
        Q->m = Q->QT + (op->packs ? d * ld : 0);
        Q->l = Q->m + nm;
        Q->alpha = Q->l + nm;
        st = Q->alpha + nm;
        if (op->packs) op->transpose(Q->QT, ld, Q->Qi, ldq, Q->nq, d); /* Qiᵀ, d × nq */
        for (int64_t r = 0; r < Q->nq; r++) Q->m[r] = -INFINITY, Q->l[r] = 0;
        zero_rows(Q->Oi, Q->nq, ldo, d);
        fg_attn_flash_key_blocks(pr, i0, Q->nq, &Q->jb, &Q->je);
        if (Q->jb < jb) jb = Q->jb;
        if (Q->je > je) je = Q->je;
    }
    fg_flash_prof_mark(FG_FLASH_FWD_SETUP, 0);
    /* key blocks outer, so each K/V tile serves every query block of the group while cached; each
     * block still meets its keys in increasing order (the same sums as one block per item) */
    for (int64_t j0 = jb; j0 < je; j0 += bk) {
        const int64_t nk = Nk - j0 < bk ? Nk - j0 : bk;
        if (j0 + bk < je) { /* the next K/V tile, on its way to L2 while this one is computed */
            const int64_t nn = Nk - j0 - bk < bk ? Nk - j0 - bk : bk;
            prefetch_rows_l2(K + (j0 + bk) * J->L.k.t, nn, J->L.k.t, d);
            prefetch_rows_l2(V + (j0 + bk) * J->L.v.t, nn, J->L.v.t, d);
        }
        for (int64_t t = 0; t < n; t++)
            if (j0 >= rows[t].jb && j0 < rows[t].je) fwd_tile(J, &rows[t], S, R, b, h, K, V, j0, nk);
    }
    for (int64_t t = 0; t < n; t++) {
        const fwd_rows *Q = &rows[t];
        const int64_t lo = bh * Nq + Q->i0;
        flash_epilogue(Q->Oi, ldo, J->lse + lo, J->lse_lo ? J->lse_lo + lo : NULL, Q->m, Q->l, Q->nq, d);
    }
    fg_flash_prof_mark(FG_FLASH_FWD_EPILOGUE, 0);
    fg_flash_prof_end();
}

/* The arrays' rows are pr->rows (all zero: the contiguous layouts). pr is checked (the entry). */
static fg_status flash_forward_lo(T *o, T *lse, T *lse_lo, const T *q, const T *k, const T *v,
                                  const fg_attn_problem *pr) {
    const flash_ops *op = flash_ops_of_dtype();
    const fg_attn_problem p2 = fg_attn_flash_resolved(pr);
    if (p2.B * p2.H * p2.Nq == 0) return FG_OK;
    const int64_t bq = p2.block_q, bk = p2.block_k, d = p2.d, H = p2.H;
    fwd_job J = {.op = op, .pr = &p2, .o = o, .lse = lse, .lse_lo = lse_lo, .q = q, .k = k, .v = v};
    J.L = fg_cpu_attention_rows(&p2);
    const int64_t nqb = (p2.Nq + bq - 1) / bq;
    J.ld = op->packs ? (bq + 15) / 16 * 16 : bk;
    J.group = fg_attn_flash_fwd_group(nqb, p2.B * H, ((op->packs ? d * J.ld : 0) + bq * d) * (int64_t)sizeof(T));
    J.ngroups = (nqb + J.group - 1) / J.group;
    J.Hkv = p2.var.n_kv_heads > 0 ? p2.var.n_kv_heads : H;
    J.G = J.Hkv > 0 ? H / J.Hkv : 1;
    J.nm = op->packs ? J.ld : bq;
    J.mods = fg_attn_modifies_scores(&p2);
    J.thr = fg_dropout_threshold(p2.dropout_p);
    J.inv_keep = (T)(1.0 / (1.0 - p2.dropout_p));
    J.need_r = op->packs && (J.mods || p2.custom.mask || J.thr);
    const int64_t n = (op->packs ? bk : bq) * J.ld + (J.need_r ? bq * bk : 0) +
                      J.group * ((op->packs ? d * J.ld : 0) + 3 * J.nm);
    J.scratch.bytes = (size_t)n * sizeof(T);
    return fg_attn_flash_run(p2.B * H * J.ngroups, fwd_item, &J, &J.scratch, &p2, op->pool_flags, "forward");
}

typedef struct {
    const flash_ops *op;
    const fg_attn_problem *pr; /* blocks resolved */
    T *dq, *dk, *dv;
    const T *dout, *q, *k, *v, *o, *lse, *lse_lo;
    fg_attn_layout L;
    int64_t Hkv, G, nd; /* nd = max(Nq, 1): D's entries per query head */
    int64_t group;      /* key blocks per pass over the queries (FG_ATTN_FLASH_BWD_GROUP, fewer when Nk is short) */
    int dropout, chain, mods;
    uint32_t thr; /* dropout's keep threshold (0: none) and 1 / (1 − p) */
    T inv_keep;
    fg_attn_flash_scratch scratch;
} bwd_job;

/* A key block of a backward item: keys [j0, j0 + nk), their Kjᵀ and Vjᵀ (x86 only; packed on first
 * use), and whether they are packed yet. */
typedef struct {
    int64_t j0, nk;
    T *KT, *VT;
    int packed;
} bwd_keys;

/* One tile of the backward: query block i0 (nq rows) of head h against key block kb. Scratch: P,
 * dS, and with dropout Z, with softcap or score_mod Gt (bq × bk each). */
static void bwd_tile(const bwd_job *J, bwd_keys *kb, T *P, T *dS, T *Z, T *Gt, int64_t b, int64_t h, int64_t hh,
                     int64_t i0, int64_t nq, const T *D, const T *K, const T *V, T *dK, T *dV) {
    const flash_ops *op = J->op;
    const fg_attn_problem *pr = J->pr;
    const int64_t d = pr->d, Nq = pr->Nq, H = pr->H, bk = pr->block_k, j0 = kb->j0, nk = kb->nk;
    int wp, mp;
    const fg_tile_kind kind = fg_attn_tile_kind(pr, b, h, i0, nq, j0, nk, &wp, &mp);
    fg_flash_prof_mark(FG_FLASH_BWD_MASK, 0);
    if (kind == FG_TILE_MASKED) return; /* no query of the block sees a key of Kj */
    const int64_t ldq = J->L.q.t, ldk = J->L.k.t, ldv = J->L.v.t, lddo = J->L.dout.t;
    const T *Kj = K + j0 * ldk, *Vj = V + j0 * ldv;
    if (op->packs && !kb->packed) {
        op->transpose(kb->KT, bk, Kj, ldk, nk, d);
        op->transpose(kb->VT, bk, Vj, ldv, nk, d);
        kb->packed = 1;
        fg_flash_prof_mark(FG_FLASH_BWD_PACK, 0);
    }
    /* Kjᵀ and Vjᵀ, the B operands of S and dP: packed (d × nk) or read transposed */
    const T *KB = op->packs ? kb->KT : Kj, *VB = op->packs ? kb->VT : Vj;
    const int tb = !op->packs;
    const int64_t ldkb = op->packs ? bk : ldk, ldvb = op->packs ? bk : ldv;
    const int64_t bh = b * H + h;
    const T *Qi = J->q + head_at(J->L.q, b, h) + i0 * ldq, *dOi = J->dout + head_at(J->L.dout, b, h) + i0 * lddo;
    const T *Lh = J->lse + bh * Nq, *loh = J->lse_lo ? J->lse_lo + bh * Nq : NULL, *Dh = D + hh * J->nd;
    T *dQ = J->dq ? J->dq + head_at(J->L.dq, b, h) : NULL;
    const T scale = (T)pr->scale;
    const uint32_t thr = J->thr;
    /* a causal diagonal tile: rows [0, qh) against keys [0, kc), rows [qh, nq) against all (the
     * entries left out are never read) */
    const int64_t kc = causal_cut(pr, kind, wp, mp, !J->mods && !J->dropout && !J->chain, i0, nq, j0, nk);
    const int64_t qh = kc < nk ? nq / 2 : 0, sq = qh * bk; /* sq: where row qh starts in P and dS */
    const double flops = 2.0 * (double)d * (double)(qh * kc + (nq - qh) * nk);
    /* recompute S = variants(scale · Qi Kjᵀ) (and Gt = ∂S/∂S1), then P = exp(S − L) */
    if (qh) op->gemm(0, tb, qh, kc, d, scale, Qi, ldq, KB, ldkb, P, bk, NULL, 0);
    op->gemm(0, tb, nq - qh, nk, d, scale, Qi + qh * ldq, ldq, KB, ldkb, P + sq, bk, NULL, 0);
    fg_flash_prof_mark(FG_FLASH_BWD_QK, flops);
    if (J->mods || kind == FG_TILE_PARTIAL) {
        score_tile(P, J->chain ? Gt : NULL, bk, b, h, i0, nq, j0, nk, kind, wp, mp, pr);
        fg_flash_prof_mark(FG_FLASH_BWD_MASK, 0);
    }
    /* S − L is exact near the row max (Sterbenz), so lo, below L's last bit, still counts; masked
     * S = -inf gives 0 */
    op->exp_rows(P, bk, nq, nk, Lh + i0, loh ? loh + i0 : NULL);
    fg_flash_prof_mark(FG_FLASH_BWD_EXP, 0);
    if (thr) {
        for (int64_t r = 0; r < nq; r++) {
            T *zrow = Z + r * bk;
            for (int64_t j = 0; j < nk; j++) zrow[j] = 1;
            dropout_scale(zrow, nk, pr->seed, thr, J->inv_keep, b, h, i0 + r, j0);
        }
    }
    /* dVj += (P∘Z)ᵀ dOi — the forward's Oi += dropout(P) Vj */
    if (dV) {
        const T *PZ = P;
        if (thr) { /* P∘Z into dS, which is free until dP below */
            for (int64_t r = 0; r < nq; r++)
                for (int64_t j = 0; j < nk; j++) dS[r * bk + j] = P[r * bk + j] * Z[r * bk + j];
            PZ = dS;
        }
        fg_flash_prof_mark(FG_FLASH_BWD_DROPOUT, 0);
        /* keys [0, kc) from every row, keys [kc, nk) from rows [qh, nq) */
        T *dVj = dV + j0 * J->L.dv.t;
        op->gemm(1, 0, kc, d, nq, 1, PZ, bk, dOi, lddo, dVj, J->L.dv.t, NULL, 1);
        if (qh)
            op->gemm(1, 0, nk - kc, d, nq - qh, 1, PZ + sq + kc, bk, dOi + qh * lddo, lddo, dVj + kc * J->L.dv.t,
                     J->L.dv.t, NULL, 1);
        fg_flash_prof_mark(FG_FLASH_BWD_DV, flops);
    }
    if (!dQ && !dK) return;
    /* dP = (dOi Vjᵀ) ∘ Z;  dS = P ∘ (dP − D) — the forward's P = softmax(S) */
    if (qh) op->gemm(0, tb, qh, kc, d, 1, dOi, lddo, VB, ldvb, dS, bk, NULL, 0);
    op->gemm(0, tb, nq - qh, nk, d, 1, dOi + qh * lddo, lddo, VB, ldvb, dS + sq, bk, NULL, 0);
    fg_flash_prof_mark(FG_FLASH_BWD_DP, flops);
    if (thr)
        for (int64_t r = 0; r < nq; r++) {
            T *dsrow = dS + r * bk;
            const T *prow = P + r * bk, *zrow = Z + r * bk;
            const T Di = Dh[i0 + r];
            for (int64_t j = 0; j < nk; j++) dsrow[j] = prow[j] * (dsrow[j] * zrow[j] - Di);
        }
    else {
        if (qh) op->ds_rows(dS, P, bk, qh, kc, Dh + i0);
        op->ds_rows(dS + sq, P + sq, bk, nq - qh, nk, Dh + i0 + qh);
    }
    /* the forward's S = variants(S1): dS1 = dS ∘ ∂S/∂S1 (P = 0 where it is masked) */
    if (J->chain)
        for (int64_t r = 0; r < nq; r++) {
            T *dsrow = dS + r * bk;
            const T *grow = Gt + r * bk;
            for (int64_t j = 0; j < nk; j++)
                if (dsrow[j] != 0) dsrow[j] *= grow[j];
        }
    fg_flash_prof_mark(FG_FLASH_BWD_DS, 0);
    /* the forward's S1 = scale · Qi Kjᵀ: dQi += scale dS Kj, dKj += scale dSᵀ Qi */
    if (dQ) {
        T *dQi = dQ + i0 * J->L.dq.t;
        if (qh) op->gemm(0, 0, qh, d, kc, scale, dS, bk, Kj, ldk, dQi, J->L.dq.t, NULL, 1);
        op->gemm(0, 0, nq - qh, d, nk, scale, dS + sq, bk, Kj, ldk, dQi + qh * J->L.dq.t, J->L.dq.t, NULL, 1);
        fg_flash_prof_mark(FG_FLASH_BWD_DQ, flops);
    }
    if (dK) {
        T *dKj = dK + j0 * J->L.dk.t;
        op->gemm(1, 0, kc, d, nq, scale, dS, bk, Qi, ldq, dKj, J->L.dk.t, NULL, 1);
        if (qh)
            op->gemm(1, 0, nk - kc, d, nq - qh, scale, dS + sq + kc, bk, Qi + qh * ldq, ldq, dKj + kc * J->L.dk.t,
                     J->L.dk.t, NULL, 1);
        fg_flash_prof_mark(FG_FLASH_BWD_DK, flops);
    }
}

/* One item: K/V head (b, g) with its G query heads, which add into the same dK, dV rows; key blocks
 * in groups of `group`, each group's query tiles in order. Scratch: per key block of a group Kjᵀ,
 * Vjᵀ (d × bk each, x86 only); P, dS (bq × bk each), D (G × Nq), Z (bq × bk, with dropout), Gt
 * (bq × bk, with softcap or score_mod). */
static void bwd_item(void *ctx, int64_t item, int worker) {
    bwd_job *J = ctx;
    const flash_ops *op = J->op;
    const fg_attn_problem *pr = J->pr;
    const int64_t d = pr->d, Nq = pr->Nq, Nk = pr->Nk, bq = pr->block_q, bk = pr->block_k, G = J->G;
    T *scr = fg_attn_flash_scratch_get(&J->scratch, worker);
    if (!scr) return;
    const int64_t tile = bq * bk;
    T *P = scr + (op->packs ? J->group * 2 * d * bk : 0), *dS = P + tile, *D = dS + tile;
    T *Z = J->dropout ? D + G * J->nd : NULL, *Gt = J->chain ? D + G * J->nd + (J->dropout ? tile : 0) : NULL;
    const int64_t b = item / J->Hkv, g = item % J->Hkv;
    const T *K = J->k + head_at(J->L.k, b, g), *V = J->v + head_at(J->L.v, b, g);
    T *dK = J->dk ? J->dk + head_at(J->L.dk, b, g) : NULL, *dV = J->dv ? J->dv + head_at(J->L.dv, b, g) : NULL;
    fg_flash_prof_begin();
    if (J->L.write_grads) { /* the rows only this item writes: dK, dV of head g, dQ of its query heads */
        if (dK) zero_rows(dK, Nk, J->L.dk.t, d);
        if (dV) zero_rows(dV, Nk, J->L.dv.t, d);
        for (int64_t hh = 0; hh < G && J->dq; hh++) zero_rows(J->dq + head_at(J->L.dq, b, g * G + hh), Nq, J->L.dq.t, d);
    }

    /* D_i = dO_i · O_i  (= Σ_j P_ij dP_ij, the softmax-gradient correction), per query head of the
     * group. Summed in double: dS = P∘(dP − D) cancels when P is peaked, so D's own rounding
     * shows up in dQ and dK. */
    for (int64_t hh = 0; hh < G; hh++) {
        const T *dO = J->dout + head_at(J->L.dout, b, g * G + hh), *O = J->o + head_at(J->L.o, b, g * G + hh);
        op->row_dots(D + hh * J->nd, dO, J->L.dout.t, O, J->L.o.t, Nq, d);
    }
    fg_flash_prof_mark(FG_FLASH_BWD_D, 0);
    bwd_keys keys[FG_ATTN_FLASH_BWD_GROUP];
    for (int64_t g0 = 0; g0 < Nk; g0 += J->group * bk) {
        int64_t n = 0;
        for (int64_t j0 = g0; j0 < Nk && n < J->group; j0 += bk, n++) {
            keys[n].j0 = j0;
            keys[n].nk = Nk - j0 < bk ? Nk - j0 : bk;
            keys[n].KT = scr + n * 2 * d * bk;
            keys[n].VT = keys[n].KT + d * bk;
            keys[n].packed = 0;
        }
        for (int64_t hh = 0; hh < G; hh++)
            for (int64_t i0 = 0; i0 < Nq; i0 += bq) {
                const int64_t nq = Nq - i0 < bq ? Nq - i0 : bq;
                /* the next query tile's Q, dO and dQ rows, on their way to L2 while this one is used */
                const int64_t ni = i0 + bq < Nq ? i0 + bq : 0, nh = i0 + bq < Nq ? hh : hh + 1;
                if (nh < G) {
                    const int64_t h2 = g * G + nh, rows = Nq - ni < bq ? Nq - ni : bq;
                    const fg_attn_layout *L = &J->L;
                    prefetch_rows_l2(J->q + head_at(L->q, b, h2) + ni * L->q.t, rows, L->q.t, d);
                    prefetch_rows_l2(J->dout + head_at(L->dout, b, h2) + ni * L->dout.t, rows, L->dout.t, d);
                    if (J->dq) prefetch_rows_l2(J->dq + head_at(L->dq, b, h2) + ni * L->dq.t, rows, L->dq.t, d);
                }
                for (int64_t t = 0; t < n; t++)
                    bwd_tile(J, &keys[t], P, dS, Z, Gt, b, g * G + hh, hh, i0, nq, D, K, V, dK, dV);
            }
    }
    fg_flash_prof_end();
}

/* The arrays' rows are pr->rows (all zero: the contiguous layouts, dq, dk, dv added into). pr is
 * checked (the entry). */
static fg_status flash_backward_lo(T *dq, T *dk, T *dv, const T *dout, const T *q, const T *k, const T *v, const T *o,
                                   const T *lse, const T *lse_lo, const fg_attn_problem *pr) {
    const flash_ops *op = flash_ops_of_dtype();
    if (!dq && !dk && !dv) return FG_OK;
    const fg_attn_problem p2 = fg_attn_flash_resolved(pr);
    if (p2.B * p2.H == 0) return FG_OK;
    const int64_t bk = p2.block_k, d = p2.d, H = p2.H, tile = (int64_t)p2.block_q * bk;
    bwd_job J = {.op = op,
                 .pr = &p2,
                 .dq = dq,
                 .dk = dk,
                 .dv = dv,
                 .dout = dout,
                 .q = q,
                 .k = k,
                 .v = v,
                 .o = o,
                 .lse = lse,
                 .lse_lo = lse_lo};
    J.L = fg_cpu_attention_rows(&p2);
    J.Hkv = p2.var.n_kv_heads > 0 ? p2.var.n_kv_heads : H;
    J.G = J.Hkv > 0 ? H / J.Hkv : 1;
    J.nd = p2.Nq > 0 ? p2.Nq : 1;
    J.thr = fg_dropout_threshold(p2.dropout_p);
    J.inv_keep = (T)(1.0 / (1.0 - p2.dropout_p));
    J.dropout = J.thr != 0;
    J.chain = fg_attn_needs_score_grad(&p2);
    J.mods = fg_attn_modifies_scores(&p2);
    const int64_t nkb = (p2.Nk + bk - 1) / bk;
    J.group = nkb < FG_ATTN_FLASH_BWD_GROUP ? nkb : FG_ATTN_FLASH_BWD_GROUP;
    const int64_t n = (op->packs ? J.group * 2 * d * bk : 0) + (2 + J.dropout + J.chain) * tile + J.G * J.nd;
    J.scratch.bytes = (size_t)n * sizeof(T);
    return fg_attn_flash_run(p2.B * J.Hkv, bwd_item, &J, &J.scratch, &p2, op->pool_flags, "backward");
}
