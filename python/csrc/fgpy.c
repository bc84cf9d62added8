/* fgpy.c — the flat interface of fgpy.h over the attention kernels of ops/attention.h.
 *
 * Legend: B batch, H heads, H_kv K/V heads, Nq queries, Nk keys, d head dim (fgpy.h has the shapes).
 *
 * Each call resolves the options into an fg_attn_problem (fg_attn_problem_init and
 * fg_attn_problem_check_dtype, the checks fg_attention makes), builds a flash block mask for a mask
 * callback when the caller passed none (as fg_attention does, per call), runs the kernels on the
 * caller's memory, and releases what it built. The forward then applies fg_attention's overflow
 * check (check_scores below).
 */
#include "python/csrc/fgpy.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "ops/cpu.h"
#include "tensor/alloc.h"
#include "tensor/error.h"

int fgpy_abi_version(void) { return FGPY_ABI_VERSION; }
size_t fgpy_attn_args_size(void) { return sizeof(fgpy_attn_args); }
size_t fgpy_check_report_size(void) { return sizeof(fgpy_check_report); }

const char *fgpy_last_error(void) { return fg_last_error(); }
int fgpy_last_status(void) { return (int)fg_last_status(); }
void fgpy_clear_error(void) { fg_clear_error(); }
int fgpy_threads(void) { return fg_pool_threads(); }
void fgpy_set_threads(int n) { fg_pool_set_threads(n); }

const char *fgpy_variant_name(int i, const char **help) { return fg_attn_custom_name(i, help); }

/* The OpenMP team of fgpy_use_openmp: GOMP_parallel(fn, data, num_threads, flags) runs fn(data) on
 * a team of up to num_threads threads, the caller as thread 0 (flags 0: no proc_bind). */
typedef void (*gomp_parallel_fn)(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);
typedef int (*omp_int_fn)(void);
static struct {
    gomp_parallel_fn parallel;
    omp_int_fn thread_num, max_threads;
} omp;

typedef struct {
    void (*body)(void *, int);
    void *data;
} omp_call;

static void omp_thread(void *p) {
    const omp_call *c = p;
    c->body(c->data, omp.thread_num());
}

static void omp_team(void (*body)(void *, int), void *data, int n) {
    const int m = omp.max_threads();
    if (m < n) n = m;
    if (n <= 1) {
        body(data, 0);
        return;
    }
    omp_call c = {body, data};
    omp.parallel(omp_thread, &c, (unsigned)n, 0);
}

int fgpy_use_openmp(void *parallel, void *thread_num, void *max_threads) {
    fg_pool_set_team(NULL);
    if (!parallel || !thread_num || !max_threads) return 0;
    omp.parallel = (gomp_parallel_fn)parallel;
    omp.thread_num = (omp_int_fn)thread_num;
    omp.max_threads = (omp_int_fn)max_threads;
    fg_pool_set_team(omp_team);
    return 1;
}

/* a's options as the library's; FG_ERR_ARG for an unknown variant name or a name with callbacks. */
static fg_status opts_of(const fgpy_attn_args *a, fg_attn_opts *o) {
    *o = fg_attn_defaults();
    if (a->impl != FG_ATTN_NAIVE && a->impl != FG_ATTN_FLASH)
        return fg_error(FG_ERR_ARG, "attention: unknown implementation %d (naive or flash)", (int)a->impl);
    o->impl = (fg_attn_impl)a->impl;
    o->scale = a->scale;
    o->causal = a->causal == FG_ATTN_CAUSAL_TOP_LEFT ? FG_ATTN_CAUSAL_TOP_LEFT : a->causal ? 1 : 0;
    o->dropout_p = a->dropout;
    o->seed = a->seed;
    o->block_q = a->block_q;
    o->block_k = a->block_k;
    o->variant = (fg_attn_variant){.n_kv_heads = a->H_kv,
                                   .window = a->window ? 1 : 0,
                                   .window_left = a->window_left,
                                   .window_right = a->window_right,
                                   .alibi = a->alibi ? 1 : 0,
                                   .alibi_slopes = a->alibi_slopes,
                                   .softcap = a->softcap};
    o->custom = (fg_attn_custom){
        .score_mod = a->score_mod, .score_mod_grad = a->score_mod_grad, .mask = a->mask, .user = a->user};
    if (a->custom) {
        if (a->score_mod || a->score_mod_grad || a->mask)
            return fg_error(FG_ERR_ARG,
                            "attention: a registered variant ('%s') and score_mod/mask callbacks cannot "
                            "be combined",
                            a->custom);
        const fg_attn_custom *c = fg_attn_find_custom(a->custom);
        if (!c) return fg_error(FG_ERR_ARG, "attention: no registered variant named '%s'", a->custom);
        o->custom = *c;
    }
    return FG_OK;
}

/* The resolved problem of one call, its tensor mask, and the block mask built for it (NULL when
 * none was needed). */
typedef struct {
    fg_attn_problem pr;
    fg_dtype dt;
    fg_attn_tensor_mask tm;
    fg_attn_block_mask *own_bm;
} call;

static fg_status call_begin(call *c, const fgpy_attn_args *a) {
    memset(c, 0, sizeof *c);
    if (!a) return fg_error(FG_ERR_ARG, "attention: NULL arguments");
    if (a->dtype != FG_F32 && a->dtype != FG_F64)
        return fg_error(FG_ERR_DTYPE, "attention: unsupported dtype %d (float32 or float64)", (int)a->dtype);
    c->dt = (fg_dtype)a->dtype;
    if (a->H_kv < 0 || (a->H > 0 && a->H_kv < 1))
        return fg_error(FG_ERR_SHAPE, "attention: need at least one K/V head, got %lld", (long long)a->H_kv);
    fg_attn_opts o;
    FG_TRY(opts_of(a, &o));
    if (a->mask_kind) {
        if (o.custom.mask || o.custom.score_mod)
            return fg_error(FG_ERR_ARG, "attention: a tensor mask cannot be combined with callbacks or a variant");
        c->tm = (fg_attn_tensor_mask){.data = a->mask_data, .kind = a->mask_kind};
        memcpy(c->tm.stride, a->mask_stride, sizeof c->tm.stride);
        o.custom = fg_attn_tensor_mask_custom(&c->tm);
        if (!o.custom.mask && a->B * a->H * a->Nq * a->Nk > 0)
            return fg_error(FG_ERR_ARG, "attention: bad tensor mask (kind %d, data %s)", (int)a->mask_kind,
                            a->mask_data ? "given" : "NULL");
    }
    FG_TRY(fg_attn_problem_init(&c->pr, a->B, a->H, a->Nq, a->Nk, a->d, &o));
    FG_TRY(fg_attn_problem_check_dtype(&c->pr, c->dt));
    fg_attn_problem *pr = &c->pr;
    if (o.impl == FG_ATTN_FLASH && pr->custom.mask && !pr->custom.block_mask && pr->B > 0 && pr->H > 0) {
        /* a tensor mask broadcast over b or h is summarized once for all of them */
        const int64_t bB = a->mask_kind && a->mask_stride[0] == 0 ? 1 : pr->B,
                      bH = a->mask_kind && a->mask_stride[1] == 0 ? 1 : pr->H;
        c->own_bm = fg_attn_block_mask_create(pr->custom.mask, pr->custom.user, bB, bH, pr->Nq, pr->Nk, pr->block_q,
                                              pr->block_k);
        if (!c->own_bm) return fg_last_status();
        pr->custom.block_mask = c->own_bm;
    }
    return FG_OK;
}

static void call_end(call *c) {
    fg_attn_block_mask_release(c->own_bm);
    c->own_bm = NULL;
}

static int all_finite(fg_dtype dt, const void *x, int64_t n) {
    if (dt == FG_F32) {
        const float *f = x;
        for (int64_t e = 0; e < n; e++)
            if (!isfinite(f[e])) return 0;
    } else {
        const double *f = x;
        for (int64_t e = 0; e < n; e++)
            if (!isfinite(f[e])) return 0;
    }
    return 1;
}

/* fg_attention's check after a CPU forward: with finite q, k and v, a row whose lse is NaN or +inf
 * — or −inf although it sees keys, when no callback may mask or send a score to −inf — means the
 * scores overflowed the dtype. A NaN or infinite input rightly makes such rows, so the inputs are
 * scanned only when one turns up. */
static fg_status check_scores(const fg_attn_problem *pr, fg_dtype dt, const void *lse, const void *q, const void *k,
                              const void *v) {
    const int64_t rows = pr->B * pr->H * pr->Nq;
    const int inf_rows = !pr->custom.mask && !pr->custom.score_mod;
    int64_t bad = -1;
    for (int64_t r = 0; r < rows && bad < 0; r++) {
        const double L = dt == FG_F32 ? (double)((const float *)lse)[r] : ((const double *)lse)[r];
        if (isnan(L) || L == INFINITY)
            bad = r;
        else if (L == -INFINITY && inf_rows) {
            int64_t lo, hi;
            fg_attn_row_range(r % pr->Nq, pr->Nq, pr->Nk, pr->causal, pr->var.window, pr->var.window_left,
                              pr->var.window_right, &lo, &hi);
            if (lo < hi) bad = r;
        }
    }
    const int64_t nq = pr->B * pr->H * pr->Nq * pr->d, nk = pr->B * pr->var.n_kv_heads * pr->Nk * pr->d;
    if (bad < 0 || !all_finite(dt, q, nq) || !all_finite(dt, k, nk) || !all_finite(dt, v, nk)) return FG_OK;
    const int64_t b = bad / (pr->H * pr->Nq), h = bad / pr->Nq % pr->H, i = bad % pr->Nq;
    return fg_error(FG_ERR_NUMERIC,
                    "attention: the scores of query %lld (batch %lld, head %lld) overflow %s although q, "
                    "k and v are finite: |scale * q.k| exceeds %.3g (scale %g)%s; use float64 inputs or "
                    "a smaller scale",
                    (long long)i, (long long)b, (long long)h, fg_dtype_name(dt), dt == FG_F32 ? FLT_MAX : DBL_MAX,
                    pr->scale, pr->custom.score_mod ? ", or score_mod returned NaN or +inf" : "");
}

static fg_status forward_kernels(const call *c, int impl, void *o, void *lse, void *lse_lo, void *p, const void *q,
                                 const void *k, const void *v) {
    const fg_attn_problem *pr = &c->pr;
    if (impl == FG_ATTN_NAIVE)
        return c->dt == FG_F32 ? fg_attn_naive_forward_f32(o, lse, p, q, k, v, pr)
                               : fg_attn_naive_forward_f64(o, lse, p, q, k, v, pr);
    /* fg_attention keeps lse_lo in float32 only; float64 runs the same kernel without it */
    return c->dt == FG_F32 ? fg_attn_flash_forward_lo_f32(o, lse, lse_lo, q, k, v, pr)
                           : fg_attn_flash_forward_lo_f64(o, lse, NULL, q, k, v, pr);
}

fg_status fgpy_attn_forward(const fgpy_attn_args *a, void *o, void *lse, void *lse_lo, const void *q, const void *k,
                            const void *v) {
    call c;
    fg_status st = call_begin(&c, a);
    const size_t es = fg_dtype_size(c.dt);
    const int64_t rows = c.pr.B * c.pr.H * c.pr.Nq;
    if (st == FG_OK && (!o || !lse || ((!q || !k || !v) && rows > 0)))
        st = fg_error(FG_ERR_ARG, "attention: NULL array");
    const int flash_lo = a && a->impl == FG_ATTN_FLASH && c.dt == FG_F32;
    if (st == FG_OK) st = forward_kernels(&c, a->impl, o, lse, flash_lo ? lse_lo : NULL, NULL, q, k, v);
    if (st == FG_OK && lse_lo && !flash_lo) memset(lse_lo, 0, (size_t)rows * es);
    if (st == FG_OK) st = check_scores(&c.pr, c.dt, lse, q, k, v);
    call_end(&c);
    return st;
}

fg_status fgpy_attn_backward(const fgpy_attn_args *a, int zero, void *dq, void *dk, void *dv, const void *dout,
                             const void *q, const void *k, const void *v, const void *o, const void *lse,
                             const void *lse_lo) {
    call c;
    fg_status st = call_begin(&c, a);
    if (st != FG_OK) {
        call_end(&c);
        return st;
    }
    const fg_attn_problem *pr = &c.pr;
    const size_t es = fg_dtype_size(c.dt);
    if (pr->B * pr->H * pr->Nq > 0 && (!dout || !q || !k || !v || (a->impl == FG_ATTN_FLASH && (!o || !lse)))) {
        call_end(&c);
        return fg_error(FG_ERR_ARG, "attention backward: NULL array");
    }
    if (zero) {
        const size_t nq = (size_t)(pr->B * pr->H * pr->Nq * pr->d),
                     nk = (size_t)(pr->B * pr->var.n_kv_heads * pr->Nk * pr->d);
        if (dq) memset(dq, 0, nq * es);
        if (dk) memset(dk, 0, nk * es);
        if (dv) memset(dv, 0, nk * es);
    }
    if (a->impl == FG_ATTN_FLASH) {
        st = c.dt == FG_F32 ? fg_attn_flash_backward_lo_f32(dq, dk, dv, dout, q, k, v, o, lse, lse_lo, pr)
                            : fg_attn_flash_backward_lo_f64(dq, dk, dv, dout, q, k, v, o, lse, NULL, pr);
    } else {
        /* the op's naive backward reads the P its forward saved: recompute it the same way */
        const size_t rows = (size_t)(pr->B * pr->H * pr->Nq);
        const size_t pn = rows * (size_t)pr->Nk, on = rows * (size_t)pr->d;
        void *P = fg_alloc(FG_CPU, (pn ? pn : 1) * es);
        void *O = P ? fg_alloc(FG_CPU, (on ? on : 1) * es) : NULL;
        void *L = O ? fg_alloc(FG_CPU, (rows ? rows : 1) * es) : NULL;
        if (!L) st = fg_last_status() != FG_OK ? fg_last_status() : fg_error(FG_ERR_OOM, "attention: out of memory");
        if (st == FG_OK) st = forward_kernels(&c, FG_ATTN_NAIVE, O, L, NULL, P, q, k, v);
        if (st == FG_OK)
            st = c.dt == FG_F32 ? fg_attn_naive_backward_f32(dq, dk, dv, dout, q, k, v, P, pr)
                                : fg_attn_naive_backward_f64(dq, dk, dv, dout, q, k, v, P, pr);
        if (L) fg_free(FG_CPU, L);
        if (O) fg_free(FG_CPU, O);
        if (P) fg_free(FG_CPU, P);
    }
    call_end(&c);
    return st;
}

fg_status fgpy_attn_gradcheck(const fgpy_attn_args *a, uint64_t seed, double qk_std, fgpy_check_report *rep) {
    if (!a || !rep) return fg_error(FG_ERR_ARG, "attention gradcheck: NULL argument");
    memset(rep, 0, sizeof *rep);
    fg_attn_opts o;
    FG_TRY(opts_of(a, &o));
    o.variant.n_kv_heads = a->H_kv;
    const fg_attn_check_shape sh = {
        .B = a->B, .H = a->H, .Nq = a->Nq, .Nk = a->Nk, .d = a->d, .seed = seed, .qk_std = qk_std};
    fg_attn_check_report r;
    FG_TRY(fg_attn_gradcheck(&o, &sh, &r));
    rep->passed = r.passed;
    rep->n_rows = r.n_rows < FG_ATTN_CHECK_MAX_ROWS ? r.n_rows : FG_ATTN_CHECK_MAX_ROWS;
    for (int i = 0; i < rep->n_rows; i++)
        rep->rows[i] = (fgpy_check_row){.check = r.rows[i].check,
                                        .tensor = r.rows[i].tensor,
                                        .max_abs = r.rows[i].max_abs,
                                        .max_rel = r.rows[i].max_rel,
                                        .limit = r.rows[i].limit,
                                        .passed = r.rows[i].passed};
    rep->fd_worst_tensor = r.fd_worst_tensor;
    rep->fd_worst_index = r.fd_worst_index;
    rep->fd_analytic = r.fd_analytic;
    rep->fd_numeric = r.fd_numeric;
    memcpy(rep->f32_skipped, r.f32_skipped,
           sizeof rep->f32_skipped < sizeof r.f32_skipped ? sizeof rep->f32_skipped : sizeof r.f32_skipped);
    rep->f32_skipped[sizeof rep->f32_skipped - 1] = 0;
    return FG_OK;
}

/* The varlen calls check the options as a dense call of the longest documents would. */
static fg_status varlen_begin(call *c, const fgpy_attn_args *a) {
    if (a && a->impl != FG_ATTN_FLASH) return fg_error(FG_ERR_ARG, "attention varlen: flash only");
    if (a && (a->mask_kind || a->mask || a->score_mod || a->custom))
        return fg_error(FG_ERR_ARG, "attention varlen: masks and callbacks are not supported");
    return call_begin(c, a);
}

fg_status fgpy_attn_varlen_forward(const fgpy_attn_args *a, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq,
                                   int64_t Tq, int64_t Tk, const double *slopes, void *o, void *lse, void *lse_lo,
                                   const void *q, const void *k, const void *v) {
    call c;
    fg_status st = varlen_begin(&c, a);
    if (st == FG_OK)
        st = fg_attn_varlen_forward(c.dt, o, lse, c.dt == FG_F32 ? lse_lo : NULL, q, k, v, cu_q, cu_k, nseq, Tq, Tk,
                                    slopes, &c.pr);
    if (st == FG_OK && lse_lo && c.dt != FG_F32) memset(lse_lo, 0, (size_t)(c.pr.H * Tq) * fg_dtype_size(c.dt));
    call_end(&c);
    return st;
}

fg_status fgpy_attn_varlen_backward(const fgpy_attn_args *a, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq,
                                    int64_t Tq, int64_t Tk, const double *slopes, int zero, void *dq, void *dk,
                                    void *dv, const void *dout, const void *q, const void *k, const void *v,
                                    const void *o, const void *lse, const void *lse_lo) {
    call c;
    fg_status st = varlen_begin(&c, a);
    if (st == FG_OK && zero) {
        const size_t es = fg_dtype_size(c.dt);
        if (dq) memset(dq, 0, (size_t)(Tq * c.pr.H * c.pr.d) * es);
        if (dk) memset(dk, 0, (size_t)(Tk * c.pr.var.n_kv_heads * c.pr.d) * es);
        if (dv) memset(dv, 0, (size_t)(Tk * c.pr.var.n_kv_heads * c.pr.d) * es);
    }
    if (st == FG_OK)
        st = fg_attn_varlen_backward(c.dt, dq, dk, dv, dout, q, k, v, o, lse, c.dt == FG_F32 ? lse_lo : NULL, cu_q,
                                     cu_k, nseq, Tq, Tk, slopes, &c.pr);
    call_end(&c);
    return st;
}
