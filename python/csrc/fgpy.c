/* fgpy.c — the flat interface of fgpy.h over the attention op, on the caller's memory.
 *
 * Legend: B batch, H heads, H_kv K/V heads, Nq queries, Nk keys, d head dim (fgpy.h has the shapes).
 *
 * Each call turns its flat arguments into fg_attn_opts and runs the op's own entry below
 * fg_attention (fg_attn_call_*, ops/attention_kernels.h): fg_attn_call_begin makes fg_attention's
 * checks and builds a flash block mask for a mask callback when the caller passed none,
 * fg_attn_call_forward runs the CPU's kernel and fg_attention's overflow check, and
 * fg_attn_call_end releases what begin built.
 *
 * On CUDA (args->device) the same entry runs the CUDA kernel table on device pointers; the fills
 * this file makes go through the device's memory backend (stream-ordered like the kernels), and
 * every call ends by waiting for flashgrad's stream, so the caller may read the outputs at once.
 */
#include "python/csrc/fgpy.h"

#include "ops/attention_kernels.h"

#include <stdio.h>
#include <string.h>

#include "ops/cpu.h"
#include "ops/device.h"
#include "ops/shared/attn_dropout.h"
#include "tensor/alloc.h"
#include "tensor/error.h"

/* The CUDA objects (cuda/runtime.cu) define it when they are linked in (make shared with nvcc); in
 * a CPU-only library the weak reference reads as NULL, as fg_device_start's does (ops/kernels.c). */
extern fg_status fg_cuda_synchronize(void) __attribute__((weak));

int fgpy_cuda_built(void) { return fg_device_built(FG_CUDA); }

fg_status fgpy_cuda_start(void) {
    if (!fg_device_built(FG_CUDA))
        return fg_error(FG_ERR_DEVICE,
                        "attention on cuda: this libflashgrad.so was built without CUDA (build it with nvcc on "
                        "PATH: `make shared` writes build-cuda/libflashgrad.so; load that one with "
                        "FLASHGRAD_LIB=build-cuda/libflashgrad.so)");
    return fg_device_start(FG_CUDA);
}

int fgpy_abi_version(void) { return FGPY_ABI_VERSION; }
size_t fgpy_attn_args_size(void) { return sizeof(fgpy_attn_args); }
size_t fgpy_check_report_size(void) { return sizeof(fgpy_check_report); }

const char *fgpy_last_error(void) { return fg_last_error(); }
int fgpy_last_status(void) { return (int)fg_last_status(); }
void fgpy_clear_error(void) { fg_clear_error(); }
int fgpy_threads(void) { return fg_pool_threads(); }
void fgpy_set_threads(int n) { fg_pool_set_threads(n); }

const char *fgpy_variant_name(int i, const char **help) { return fg_attn_custom_name(i, help); }

fg_status fgpy_attn_dropout_keep(uint64_t seed, double p, int64_t B, int64_t H, int64_t Nq, int64_t Nk, uint8_t *keep) {
    if (!(p >= 0 && p < 1)) return fg_error(FG_ERR_ARG, "attention dropout: p must be in [0, 1), got %g", p);
    if (B < 0 || H < 0 || Nq < 0 || Nk < 0) return fg_error(FG_ERR_SHAPE, "attention dropout: negative size");
    if (B * H * Nq * Nk == 0) return FG_OK;
    if (!keep) return fg_error(FG_ERR_ARG, "attention dropout: NULL array");
    const uint32_t thr = fg_dropout_threshold(p);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < Nq; i++, keep += Nk)
                for (int64_t j = 0; j < Nk; j++)
                    keep[j] = (uint8_t)fg_attn_keep(seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j);
    return FG_OK;
}

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

/* One call of the op (its resolved problem and the block mask built for it) and its tensor mask. */
typedef struct {
    fg_attn_call op;
    fg_dtype dt;
    fg_device dev;
    int started; /* CUDA: the device is up, so the end of the call waits for its stream */
    fg_attn_tensor_mask tm;
} call;

static fg_status call_begin(call *c, const fgpy_attn_args *a) {
    memset(c, 0, sizeof *c);
    if (!a) return fg_error(FG_ERR_ARG, "attention: NULL arguments");
    if (a->device != FG_CPU && a->device != FG_CUDA)
        return fg_error(FG_ERR_DEVICE, "attention: unknown device %d (cpu or cuda)", (int)a->device);
    c->dev = (fg_device)a->device;
    if (a->dtype != FG_F32 && a->dtype != FG_F64 && !(a->dtype == FG_BF16 && c->dev == FG_CUDA))
        return fg_error(FG_ERR_DTYPE, "attention: unsupported dtype %d (float32 or float64; bfloat16 on cuda)",
                        (int)a->dtype);
    c->dt = (fg_dtype)a->dtype;
    if (c->dev == FG_CUDA) {
        if (a->mask_kind)
            return fg_error(FG_ERR_DEVICE, "attention on cuda: tensor masks are not supported (CPU tensors only)");
        FG_TRY(fgpy_cuda_start());
        c->started = 1;
    }
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
    /* a tensor mask broadcast over b or h is summarized once for all of them */
    const unsigned bcast =
        (a->mask_kind && a->mask_stride[0] == 0 ? 1u : 0u) | (a->mask_kind && a->mask_stride[1] == 0 ? 2u : 0u);
    return fg_attn_call_begin(&c->op, &o, a->B, a->H, a->Nq, a->Nk, a->d, c->dt, c->dev, bcast);
}

/* n bytes of zeros at p on the call's device (queued on flashgrad's stream on CUDA). */
static void zero_fill(const call *c, void *p, size_t n) {
    if (!p || !n) return;
    if (c->dev == FG_CPU)
        memset(p, 0, n);
    else
        fg_backend(c->dev)->memset0(p, n);
}

/* Ends the call: releases what begin built and, on CUDA, waits for flashgrad's stream (the kernels
 * are then done with the caller's memory). Returns st, or the error the wait reports when st is
 * FG_OK; an earlier error keeps its own message. */
static fg_status call_end(call *c, fg_status st) {
    fg_attn_call_end(&c->op);
    if (!c->started || !fg_cuda_synchronize) return st;
    if (st == FG_OK) return fg_cuda_synchronize();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fg_last_error());
    (void)fg_cuda_synchronize();
    return fg_error(st, "%s", msg);
}

/* ---- empty problems ----
 * A zero size leaves part of the result with nothing to compute, and every entry point of the
 * package (numpy, torch.attention, the drop-ins) inherits the rules from here:
 *   B, H or Nq zero: no output row (o, lse, dq empty); dk and dv are zeros (no query uses a key).
 *   Nk zero: every row sees no key (o = 0, lse = -inf, dq = 0; dk, dv empty); k and v are not read.
 *   d zero: o, dq, dk, dv are empty; every score is an empty dot product, 0, so lse is the logsumexp
 *   of the options' biases and masks over the visible keys: that of the same problem with d = 1 and
 *   q = k = 0, which the kernels compute here on zeroed scratch. PyTorch's SDPA accepts head dim 0
 *   the same way (an empty output).
 * The options are checked in every case (as the d = 1 problem when d is 0). An array with no
 * elements may come with any pointer, NULL included (an empty torch tensor has none): only the
 * arrays of a non-empty part of the problem are read or written. */

/* a with d = 0 as the d = 1 problem it is computed as (see above); a itself otherwise. */
static const fgpy_attn_args *d1_args(const fgpy_attn_args *a, fgpy_attn_args *one) {
    if (!a || a->d != 0) return a;
    *one = *a;
    one->d = 1;
    return one;
}

/* Zeroed scratch on the call's device for a d = 0 forward: q and o of nq elements, k and v of nk
 * (the d = 1 problem's inputs and its discarded output). NULL with the error set when out of memory. */
static char *d0_scratch(const call *c, size_t nq, size_t nk, const void **q, void **o, const void **k,
                        const void **v) {
    const size_t es = fg_dtype_size(c->dt), n = (2 * nq + 2 * nk) * es;
    char *s = fg_alloc(c->dev, n ? n : 1);
    if (!s) {
        if (fg_last_status() == FG_OK) fg_error(FG_ERR_OOM, "attention: out of memory");
        return NULL;
    }
    zero_fill(c, s, n);
    *q = s;
    *o = s + nq * es;
    *k = s + 2 * nq * es;
    *v = s + (2 * nq + nk) * es;
    return s;
}

fg_status fgpy_attn_forward(const fgpy_attn_args *a, void *o, void *lse, void *lse_lo, const void *q, const void *k,
                            const void *v) {
    fgpy_attn_args one;
    const int no_d = a && a->d == 0;
    a = d1_args(a, &one);
    call c;
    fg_status st = call_begin(&c, a);
    const size_t es = c.dt == FG_BF16 ? sizeof(float) : fg_dtype_size(c.dt); /* lse's element */
    const fg_attn_problem *pr = &c.op.pr;
    const int64_t rows = pr->B * pr->H * pr->Nq, nk = pr->B * pr->var.n_kv_heads * pr->Nk;
    if (st != FG_OK || rows == 0) return call_end(&c, st); /* no output row */
    if (!lse || (!no_d && (!o || !q || (nk > 0 && (!k || !v)))))
        return call_end(&c, fg_error(FG_ERR_ARG, "attention: NULL array"));
    char *scratch = NULL;
    if (no_d) {
        scratch = d0_scratch(&c, (size_t)rows, (size_t)nk, &q, &o, &k, &v);
        if (!scratch) return call_end(&c, fg_last_status());
    }
    if (nk == 0) k = v = q; /* never read: no key (the kernels' pointers stay non-NULL) */
    /* fg_attention keeps lse_lo in float32 flash only; naive, float64 and bfloat16 run without it */
    const int flash_lo = a->impl == FG_ATTN_FLASH && c.dt == FG_F32;
    st = fg_attn_call_forward(&c.op, o, lse, flash_lo ? lse_lo : NULL, q, k, v);
    if (st == FG_OK && lse_lo && !flash_lo) zero_fill(&c, lse_lo, (size_t)rows * es);
    if (scratch) fg_free(c.dev, scratch);
    return call_end(&c, st);
}

fg_status fgpy_attn_backward(const fgpy_attn_args *a, int zero, void *dq, void *dk, void *dv, const void *dout,
                             const void *q, const void *k, const void *v, const void *o, const void *lse,
                             const void *lse_lo) {
    fgpy_attn_args one;
    const int no_d = a && a->d == 0;
    a = d1_args(a, &one);
    call c;
    fg_status st = call_begin(&c, a);
    if (st != FG_OK || no_d) return call_end(&c, st); /* d = 0: every gradient is empty */
    const fg_attn_problem *pr = &c.op.pr;
    const size_t es = fg_dtype_size(c.dt);
    const int64_t rows = pr->B * pr->H * pr->Nq, nk = pr->B * pr->var.n_kv_heads * pr->Nk;
    if (zero) {
        zero_fill(&c, dq, (size_t)(rows * pr->d) * es);
        zero_fill(&c, dk, (size_t)(nk * pr->d) * es);
        zero_fill(&c, dv, (size_t)(nk * pr->d) * es);
    }
    /* no query or no key: no weight, so nothing to add to any gradient */
    if (rows == 0 || nk == 0) return call_end(&c, st);
    if (!dout || !q || !k || !v || (a->impl == FG_ATTN_FLASH && (!o || !lse)))
        return call_end(&c, fg_error(FG_ERR_ARG, "attention backward: NULL array"));
    /* flash: lse_lo in float32 only; naive: no saved P, so the entry recomputes it */
    const void *aux = a->impl == FG_ATTN_FLASH && c.dt == FG_F32 ? lse_lo : NULL;
    st = fg_attn_call_backward(&c.op, dq, dk, dv, dout, q, k, v, a->impl == FG_ATTN_FLASH ? o : NULL,
                               a->impl == FG_ATTN_FLASH ? lse : NULL, aux);
    return call_end(&c, st);
}

fg_status fgpy_attn_gradcheck(const fgpy_attn_args *a, uint64_t seed, double qk_std, fgpy_check_report *rep) {
    if (!a || !rep) return fg_error(FG_ERR_ARG, "attention gradcheck: NULL argument");
    memset(rep, 0, sizeof *rep);
    fg_attn_opts o;
    FG_TRY(opts_of(a, &o));
    o.variant.n_kv_heads = a->H_kv;
    /* d = 0: O, dQ, dK, dV are all empty, as with B = 0, which the checks then run (the options
     * checked for the heads and sequences given) */
    const fg_attn_check_shape sh = {.B = a->d == 0 ? 0 : a->B,
                                    .H = a->H,
                                    .Nq = a->Nq,
                                    .Nk = a->Nk,
                                    .d = a->d == 0 ? 1 : a->d,
                                    .seed = seed,
                                    .qk_std = qk_std};
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
    memset(c, 0, sizeof *c);
    if (a && a->device != FG_CPU)
        return fg_error(FG_ERR_DEVICE, "attention varlen: CPU tensors only (its kernels run on the CPU)");
    if (a && a->impl != FG_ATTN_FLASH) return fg_error(FG_ERR_ARG, "attention varlen: flash only");
    if (a && (a->mask_kind || a->mask || a->score_mod || a->custom))
        return fg_error(FG_ERR_ARG, "attention varlen: masks and callbacks are not supported");
    return call_begin(c, a);
}

/* The empty problems of the dense calls (above), on packed q (Tq, H, d), k, v (Tk, H_kv, d); the
 * kernels check the offsets in every case. With no head every array is empty and may be NULL: the
 * kernels, which refuse NULL arrays when there are tokens, get a stand-in that nothing reads. */
static double no_array;
fg_status fgpy_attn_varlen_forward(const fgpy_attn_args *a, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq,
                                   int64_t Tq, int64_t Tk, const double *slopes, void *o, void *lse, void *lse_lo,
                                   const void *q, const void *k, const void *v) {
    fgpy_attn_args one;
    const int no_d = a && a->d == 0;
    a = d1_args(a, &one);
    call c;
    fg_status st = varlen_begin(&c, a);
    if (st != FG_OK) return call_end(&c, st);
    if (c.op.pr.H == 0) { /* no head: every array is empty; the kernel still checks the offsets */
        o = lse = (void *)&no_array;
        q = k = v = &no_array;
        lse_lo = NULL;
    }
    const int64_t nq = Tq * c.op.pr.H, nk = Tk * c.op.pr.var.n_kv_heads;
    char *scratch = NULL;
    if (no_d && nq > 0) {
        if (!lse) return call_end(&c, fg_error(FG_ERR_ARG, "attention varlen: NULL array"));
        scratch = d0_scratch(&c, (size_t)nq, (size_t)nk, &q, &o, &k, &v);
        if (!scratch) return call_end(&c, fg_last_status());
    }
    st = fg_attn_call_varlen_forward(&c.op, o, lse, c.dt == FG_F32 ? lse_lo : NULL, q, k, v, cu_q, cu_k, nseq, Tq, Tk,
                                     slopes);
    if (st == FG_OK && lse_lo && c.dt != FG_F32) memset(lse_lo, 0, (size_t)nq * fg_dtype_size(c.dt));
    if (scratch) fg_free(c.dev, scratch);
    return call_end(&c, st);
}

fg_status fgpy_attn_varlen_backward(const fgpy_attn_args *a, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq,
                                    int64_t Tq, int64_t Tk, const double *slopes, int zero, void *dq, void *dk,
                                    void *dv, const void *dout, const void *q, const void *k, const void *v,
                                    const void *o, const void *lse, const void *lse_lo) {
    fgpy_attn_args one;
    const int no_d = a && a->d == 0;
    a = d1_args(a, &one);
    call c;
    fg_status st = varlen_begin(&c, a);
    /* d = 0: every gradient is empty (the offsets were checked by the forward) */
    if (st != FG_OK || no_d) return call_end(&c, st);
    if (c.op.pr.H == 0) { /* no head: as in the forward */
        dq = dk = dv = (void *)&no_array;
        dout = q = k = v = o = lse = &no_array;
        lse_lo = NULL;
    }
    if (zero) {
        const size_t es = fg_dtype_size(c.dt);
        if (dq) memset(dq, 0, (size_t)(Tq * c.op.pr.H * c.op.pr.d) * es);
        if (dk) memset(dk, 0, (size_t)(Tk * c.op.pr.var.n_kv_heads * c.op.pr.d) * es);
        if (dv) memset(dv, 0, (size_t)(Tk * c.op.pr.var.n_kv_heads * c.op.pr.d) * es);
    }
    st = fg_attn_call_varlen_backward(&c.op, dq, dk, dv, dout, q, k, v, o, lse, c.dt == FG_F32 ? lse_lo : NULL, cu_q,
                                      cu_k, nseq, Tq, Tk, slopes);
    return call_end(&c, st);
}
