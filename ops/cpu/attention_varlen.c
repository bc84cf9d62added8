/* attention_varlen.c — flash attention over packed variable-length sequences (ops/attention.h).
 *
 * Legend: S documents, H query heads, H_kv K/V heads, Tq / Tk packed queries / keys, d head dim.
 *   q, o, dout, dq (Tq, H, d); k, v, dk, dv (Tk, H_kv, d); lse, lse_lo (H, Tq)
 *   document s: queries [cu_q[s], cu_q[s+1]), keys [cu_k[s], cu_k[s+1])
 *
 * Attention never crosses a document, so each document is the problem (1, H, Nq_s, Nk_s, d) of the
 * flash kernels, run on a copy gathered into their (H, N, d) layout and scattered back: the math
 * is the kernels', unchanged, and causal, window and ALiBi are aligned per document as flash_attn
 * aligns them. The scratch is sized once for the longest document and reused for every one.
 */
#include <string.h>

#include "ops/attention_kernels.h"
#include "tensor/alloc.h"
#include "tensor/error.h"

/* cu (S + 1) starts at 0, never decreases, ends at T; *longest receives the longest document. */
static fg_status check_offsets(const int64_t *cu, int64_t S, int64_t T, const char *name, int64_t *longest) {
    if (!cu) return fg_error(FG_ERR_ARG, "attention varlen: %s is NULL", name);
    if (cu[0] != 0) return fg_error(FG_ERR_ARG, "attention varlen: %s[0] must be 0, got %lld", name, (long long)cu[0]);
    *longest = 0;
    for (int64_t s = 0; s < S; s++) {
        const int64_t n = cu[s + 1] - cu[s];
        if (n < 0)
            return fg_error(FG_ERR_ARG, "attention varlen: %s decreases at %lld (%lld then %lld)", name, (long long)s,
                            (long long)cu[s], (long long)cu[s + 1]);
        if (n > *longest) *longest = n;
    }
    if (cu[S] != T)
        return fg_error(FG_ERR_ARG, "attention varlen: %s ends at %lld but there are %lld tokens", name,
                        (long long)cu[S], (long long)T);
    return FG_OK;
}

/* (n, heads, d) rows starting at token t0 of packed x <-> (heads, n, d) in y */
static void gather(char *y, const char *x, int64_t t0, int64_t n, int64_t heads, int64_t d, size_t es) {
    const size_t row = (size_t)d * es;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t r = 0; r < n; r++)
            memcpy(y + (size_t)(h * n + r) * row, x + (size_t)((t0 + r) * heads + h) * row, row);
}
static void scatter(char *x, const char *y, int64_t t0, int64_t n, int64_t heads, int64_t d, size_t es) {
    const size_t row = (size_t)d * es;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t r = 0; r < n; r++)
            memcpy(x + (size_t)((t0 + r) * heads + h) * row, y + (size_t)(h * n + r) * row, row);
}
/* x's rows += y's (the backward adds into the caller's gradients) */
static void scatter_add(fg_dtype dt, char *x, const char *y, int64_t t0, int64_t n, int64_t heads, int64_t d) {
    for (int64_t h = 0; h < heads; h++)
        for (int64_t r = 0; r < n; r++) {
            const size_t xo = (size_t)((t0 + r) * heads + h) * (size_t)d, yo = (size_t)(h * n + r) * (size_t)d;
            if (dt == FG_F32) {
                float *a = (float *)x + xo;
                const float *b = (const float *)y + yo;
                for (int64_t c = 0; c < d; c++) a[c] += b[c];
            } else {
                double *a = (double *)x + xo;
                const double *b = (const double *)y + yo;
                for (int64_t c = 0; c < d; c++) a[c] += b[c];
            }
        }
}
/* lse rows (H, n) of one document <-> the packed (H, T) */
static void lse_gather(char *y, const char *x, int64_t t0, int64_t n, int64_t H, int64_t T, size_t es) {
    for (int64_t h = 0; h < H; h++) memcpy(y + (size_t)(h * n) * es, x + (size_t)(h * T + t0) * es, (size_t)n * es);
}
static void lse_scatter(char *x, const char *y, int64_t t0, int64_t n, int64_t H, int64_t T, size_t es) {
    for (int64_t h = 0; h < H; h++) memcpy(x + (size_t)(h * T + t0) * es, y + (size_t)(h * n) * es, (size_t)n * es);
}

typedef struct {
    fg_attn_problem pr; /* the template; per document Nq, Nk, seed and slopes are set */
    int64_t nq_max, nk_max, H, Hkv, d;
    size_t es;
} varlen;

static fg_status varlen_begin(varlen *w, fg_dtype dt, const int64_t *cu_q, const int64_t *cu_k, int64_t S, int64_t Tq,
                              int64_t Tk, const fg_attn_problem *pr) {
    if (!pr) return fg_error(FG_ERR_ARG, "attention varlen: NULL problem");
    if (dt != FG_F32 && dt != FG_F64) return fg_error(FG_ERR_DTYPE, "attention varlen: unsupported dtype %d", (int)dt);
    if (S < 0 || Tq < 0 || Tk < 0)
        return fg_error(FG_ERR_SHAPE, "attention varlen: negative size (%lld documents, Tq=%lld, Tk=%lld)",
                        (long long)S, (long long)Tq, (long long)Tk);
    if (pr->custom.mask || pr->custom.score_mod)
        return fg_error(FG_ERR_ARG, "attention varlen: user callbacks (score_mod, mask) are not supported");
    w->pr = *pr;
    w->pr.B = 1;
    w->H = pr->H;
    w->Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : pr->H;
    w->d = pr->d;
    w->es = fg_dtype_size(dt);
    FG_TRY(check_offsets(cu_q, S, Tq, "cu_seqlens_q", &w->nq_max));
    FG_TRY(check_offsets(cu_k, S, Tk, "cu_seqlens_k", &w->nk_max));
    return FG_OK;
}

/* document s's problem: its sizes, its dropout seed, its slopes */
static void varlen_doc(varlen *w, const int64_t *cu_q, const int64_t *cu_k, int64_t s, const double *slopes,
                       const fg_attn_problem *pr) {
    w->pr.Nq = cu_q[s + 1] - cu_q[s];
    w->pr.Nk = cu_k[s + 1] - cu_k[s];
    w->pr.seed = pr->seed + (uint64_t)s * 0x9E3779B97F4A7C15ull;
    if (slopes && pr->var.alibi) w->pr.var.alibi_slopes = slopes + s * pr->H;
}

fg_status fg_attn_varlen_forward(fg_dtype dt, void *o, void *lse, void *lse_lo, const void *q, const void *k,
                                 const void *v, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq, int64_t Tq,
                                 int64_t Tk, const double *slopes, const fg_attn_problem *pr) {
    varlen w;
    FG_TRY(varlen_begin(&w, dt, cu_q, cu_k, nseq, Tq, Tk, pr));
    if (Tq > 0 && (!o || !lse || !q || (Tk > 0 && (!k || !v))))
        return fg_error(FG_ERR_ARG, "attention varlen: NULL array");
    const size_t es = w.es, nqe = (size_t)(w.H * w.nq_max * w.d), nke = (size_t)(w.Hkv * w.nk_max * w.d),
                 nl = (size_t)(w.H * w.nq_max);
    /* one block: q, o | k, v | lse, lse_lo */
    char *buf = fg_alloc(FG_CPU, (2 * nqe + 2 * nke + 2 * nl + 1) * es);
    if (!buf) return fg_last_status() != FG_OK ? fg_last_status() : fg_error(FG_ERR_OOM, "attention varlen: OOM");
    char *qs = buf, *os = qs + nqe * es, *ks = os + nqe * es, *vs = ks + nke * es, *ls = vs + nke * es,
         *los = ls + nl * es;
    fg_status st = FG_OK;
    for (int64_t s = 0; s < nseq && st == FG_OK; s++) {
        varlen_doc(&w, cu_q, cu_k, s, slopes, pr);
        const int64_t nq = w.pr.Nq, nk = w.pr.Nk;
        if (nq == 0) continue;
        gather(qs, q, cu_q[s], nq, w.H, w.d, es);
        if (nk > 0) {
            gather(ks, k, cu_k[s], nk, w.Hkv, w.d, es);
            gather(vs, v, cu_k[s], nk, w.Hkv, w.d, es);
        }
        st = dt == FG_F32
                 ? fg_attn_flash_forward_lo_f32((float *)os, (float *)ls, lse_lo ? (float *)los : NULL,
                                                (const float *)qs, (const float *)ks, (const float *)vs, &w.pr)
                 : fg_attn_flash_forward_lo_f64((double *)os, (double *)ls, lse_lo ? (double *)los : NULL,
                                                (const double *)qs, (const double *)ks, (const double *)vs, &w.pr);
        if (st != FG_OK) break;
        scatter(o, os, cu_q[s], nq, w.H, w.d, es);
        lse_scatter(lse, ls, cu_q[s], nq, w.H, Tq, es);
        if (lse_lo) lse_scatter(lse_lo, los, cu_q[s], nq, w.H, Tq, es);
    }
    fg_free(FG_CPU, buf);
    return st;
}

fg_status fg_attn_varlen_backward(fg_dtype dt, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                  const void *k, const void *v, const void *o, const void *lse, const void *lse_lo,
                                  const int64_t *cu_q, const int64_t *cu_k, int64_t nseq, int64_t Tq, int64_t Tk,
                                  const double *slopes, const fg_attn_problem *pr) {
    varlen w;
    FG_TRY(varlen_begin(&w, dt, cu_q, cu_k, nseq, Tq, Tk, pr));
    if (Tq > 0 && Tk > 0 && (!dout || !q || !k || !v || !o || !lse))
        return fg_error(FG_ERR_ARG, "attention varlen backward: NULL array");
    const size_t es = w.es, nqe = (size_t)(w.H * w.nq_max * w.d), nke = (size_t)(w.Hkv * w.nk_max * w.d),
                 nl = (size_t)(w.H * w.nq_max);
    /* q, o, dout, dq | k, v, dk, dv | lse, lse_lo */
    char *buf = fg_alloc(FG_CPU, (4 * nqe + 4 * nke + 2 * nl + 1) * es);
    if (!buf) return fg_last_status() != FG_OK ? fg_last_status() : fg_error(FG_ERR_OOM, "attention varlen: OOM");
    char *qs = buf, *os = qs + nqe * es, *dos = os + nqe * es, *dqs = dos + nqe * es, *ks = dqs + nqe * es,
         *vs = ks + nke * es, *dks = vs + nke * es, *dvs = dks + nke * es, *ls = dvs + nke * es, *los = ls + nl * es;
    fg_status st = FG_OK;
    for (int64_t s = 0; s < nseq && st == FG_OK; s++) {
        varlen_doc(&w, cu_q, cu_k, s, slopes, pr);
        const int64_t nq = w.pr.Nq, nk = w.pr.Nk;
        if (nq == 0 || nk == 0) continue; /* no weights: every gradient of the document is 0 */
        gather(qs, q, cu_q[s], nq, w.H, w.d, es);
        gather(os, o, cu_q[s], nq, w.H, w.d, es);
        gather(dos, dout, cu_q[s], nq, w.H, w.d, es);
        gather(ks, k, cu_k[s], nk, w.Hkv, w.d, es);
        gather(vs, v, cu_k[s], nk, w.Hkv, w.d, es);
        lse_gather(ls, lse, cu_q[s], nq, w.H, Tq, es);
        if (lse_lo) lse_gather(los, lse_lo, cu_q[s], nq, w.H, Tq, es);
        memset(dqs, 0, (size_t)(w.H * nq * w.d) * es);
        memset(dks, 0, (size_t)(w.Hkv * nk * w.d) * es);
        memset(dvs, 0, (size_t)(w.Hkv * nk * w.d) * es);
        st = dt == FG_F32 ? fg_attn_flash_backward_lo_f32((float *)dqs, (float *)dks, (float *)dvs, (const float *)dos,
                                                          (const float *)qs, (const float *)ks, (const float *)vs,
                                                          (const float *)os, (const float *)ls,
                                                          lse_lo ? (const float *)los : NULL, &w.pr)
                          : fg_attn_flash_backward_lo_f64((double *)dqs, (double *)dks, (double *)dvs,
                                                          (const double *)dos, (const double *)qs, (const double *)ks,
                                                          (const double *)vs, (const double *)os, (const double *)ls,
                                                          lse_lo ? (const double *)los : NULL, &w.pr);
        if (st != FG_OK) break;
        if (dq) scatter_add(dt, dq, dqs, cu_q[s], nq, w.H, w.d);
        if (dk) scatter_add(dt, dk, dks, cu_k[s], nk, w.Hkv, w.d);
        if (dv) scatter_add(dt, dv, dvs, cu_k[s], nk, w.Hkv, w.d);
    }
    fg_free(FG_CPU, buf);
    return st;
}
