/* attention_varlen.c — flash attention over packed variable-length sequences (pr->varlen,
 * fg_attn_varlen in ops/attention_kernels.h): what the CPU table's entries run when the problem
 * carries documents.
 *
 * Legend: S documents, H query heads, H_kv K/V heads, Tq / Tk packed queries / keys, d head dim.
 *   q, o, dout, dq (Tq, H, d); k, v, dk, dv (Tk, H_kv, d); lse, lse_lo (H, Tq)
 *   document s: queries [cu_q[s], cu_q[s+1]), keys [cu_k[s], cu_k[s+1])
 *
 * Attention never crosses a document, so each document is the problem (1, H, Nq_s, Nk_s, d) of the
 * flash kernels, run on a copy gathered into their (H, N, d) layout and scattered back: the math
 * is the kernels', unchanged, and causal, window and ALiBi are aligned per document as flash_attn
 * aligns them. The scratch is sized once for the longest document and reused for every one. The
 * offsets, arrays and per-document slopes were checked by the entry (ops/attention_entry.c).
 */
#include <string.h>

#include "ops/cpu/attention_cpu.h"
#include "tensor/alloc.h"
#include "tensor/error.h"

/* The longest document of offsets cu (S + 1, checked: nondecreasing). */
static int64_t longest(const int64_t *cu, int64_t S) {
    int64_t n = 0;
    for (int64_t s = 0; s < S; s++)
        if (cu[s + 1] - cu[s] > n) n = cu[s + 1] - cu[s];
    return n;
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
    const int64_t *cu_q, *cu_k;
    const double *slopes;
    int64_t nseq, Tq, Tk, nq_max, nk_max, H, Hkv, d;
    size_t es;
} varlen;

static void varlen_begin(varlen *w, fg_dtype dt, const fg_attn_problem *pr) {
    const fg_attn_varlen *vl = pr->varlen;
    w->pr = *pr;
    w->pr.B = 1;
    w->pr.varlen = NULL;
    w->cu_q = vl->cu_q, w->cu_k = vl->cu_k, w->slopes = vl->slopes;
    w->nseq = vl->nseq, w->Tq = vl->Tq, w->Tk = vl->Tk;
    w->H = pr->H;
    w->Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : pr->H;
    w->d = pr->d;
    w->es = fg_dtype_size(dt);
    w->nq_max = longest(vl->cu_q, vl->nseq);
    w->nk_max = longest(vl->cu_k, vl->nseq);
}

/* document s's problem: its sizes, its dropout seed, its slopes */
static void varlen_doc(varlen *w, int64_t s, const fg_attn_problem *pr) {
    w->pr.Nq = w->cu_q[s + 1] - w->cu_q[s];
    w->pr.Nk = w->cu_k[s + 1] - w->cu_k[s];
    w->pr.seed = pr->seed + (uint64_t)s * 0x9E3779B97F4A7C15ull;
    if (w->slopes && pr->var.alibi) w->pr.var.alibi_slopes = w->slopes + s * pr->H;
}

fg_status fg_cpu_attention_varlen_forward(fg_dtype dt, void *o, void *lse, void *lse_lo, const void *q, const void *k,
                                          const void *v, const fg_attn_problem *pr) {
    varlen w;
    varlen_begin(&w, dt, pr);
    const int64_t *cu_q = w.cu_q, *cu_k = w.cu_k, Tq = w.Tq;
    const size_t es = w.es, nqe = (size_t)(w.H * w.nq_max * w.d), nke = (size_t)(w.Hkv * w.nk_max * w.d),
                 nl = (size_t)(w.H * w.nq_max);
    /* one block: q, o | k, v | lse, lse_lo */
    char *buf = fg_alloc(FG_CPU, (2 * nqe + 2 * nke + 2 * nl + 1) * es);
    if (!buf) return fg_last_status() != FG_OK ? fg_last_status() : fg_error(FG_ERR_OOM, "attention varlen: OOM");
    char *qs = buf, *os = qs + nqe * es, *ks = os + nqe * es, *vs = ks + nke * es, *ls = vs + nke * es,
         *los = ls + nl * es;
    fg_status st = FG_OK;
    for (int64_t s = 0; s < w.nseq && st == FG_OK; s++) {
        varlen_doc(&w, s, pr);
        const int64_t nq = w.pr.Nq, nk = w.pr.Nk;
        if (nq == 0) continue;
        gather(qs, q, cu_q[s], nq, w.H, w.d, es);
        if (nk > 0) {
            gather(ks, k, cu_k[s], nk, w.Hkv, w.d, es);
            gather(vs, v, cu_k[s], nk, w.Hkv, w.d, es);
        }
        st =
            dt == FG_F32
                ? fg_cpu_attention_flash_forward_f32((float *)os, (float *)ls, lse_lo ? (float *)los : NULL,
                                                     (const float *)qs, (const float *)ks, (const float *)vs, &w.pr)
                : fg_cpu_attention_flash_forward_f64((double *)os, (double *)ls, lse_lo ? (double *)los : NULL,
                                                     (const double *)qs, (const double *)ks, (const double *)vs, &w.pr);
        if (st != FG_OK) break;
        scatter(o, os, cu_q[s], nq, w.H, w.d, es);
        lse_scatter(lse, ls, cu_q[s], nq, w.H, Tq, es);
        if (lse_lo) lse_scatter(lse_lo, los, cu_q[s], nq, w.H, Tq, es);
    }
    fg_free(FG_CPU, buf);
    return st;
}

fg_status fg_cpu_attention_varlen_backward(fg_dtype dt, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                           const void *k, const void *v, const void *o, const void *lse,
                                           const void *lse_lo, const fg_attn_problem *pr) {
    varlen w;
    varlen_begin(&w, dt, pr);
    const int64_t *cu_q = w.cu_q, *cu_k = w.cu_k, Tq = w.Tq;
    const size_t es = w.es, nqe = (size_t)(w.H * w.nq_max * w.d), nke = (size_t)(w.Hkv * w.nk_max * w.d),
                 nl = (size_t)(w.H * w.nq_max);
    /* q, o, dout, dq | k, v, dk, dv | lse, lse_lo */
    char *buf = fg_alloc(FG_CPU, (4 * nqe + 4 * nke + 2 * nl + 1) * es);
    if (!buf) return fg_last_status() != FG_OK ? fg_last_status() : fg_error(FG_ERR_OOM, "attention varlen: OOM");
    char *qs = buf, *os = qs + nqe * es, *dos = os + nqe * es, *dqs = dos + nqe * es, *ks = dqs + nqe * es,
         *vs = ks + nke * es, *dks = vs + nke * es, *dvs = dks + nke * es, *ls = dvs + nke * es, *los = ls + nl * es;
    fg_status st = FG_OK;
    for (int64_t s = 0; s < w.nseq && st == FG_OK; s++) {
        varlen_doc(&w, s, pr);
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
        st = dt == FG_F32
                 ? fg_cpu_attention_flash_backward_f32((float *)dqs, (float *)dks, (float *)dvs, (const float *)dos,
                                                       (const float *)qs, (const float *)ks, (const float *)vs,
                                                       (const float *)os, (const float *)ls,
                                                       lse_lo ? (const float *)los : NULL, &w.pr)
                 : fg_cpu_attention_flash_backward_f64((double *)dqs, (double *)dks, (double *)dvs, (const double *)dos,
                                                       (const double *)qs, (const double *)ks, (const double *)vs,
                                                       (const double *)os, (const double *)ls,
                                                       lse_lo ? (const double *)los : NULL, &w.pr);
        if (st != FG_OK) break;
        if (dq) scatter_add(dt, dq, dqs, cu_q[s], nq, w.H, w.d);
        if (dk) scatter_add(dt, dk, dks, cu_k[s], nk, w.Hkv, w.d);
        if (dv) scatter_add(dt, dv, dvs, cu_k[s], nk, w.Hkv, w.d);
    }
    fg_free(FG_CPU, buf);
    return st;
}
