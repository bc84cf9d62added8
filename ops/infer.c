/* infer.c — forward-only ops on raw buffers (see infer.h): the checks, then the device's kernel, or
 * for attention the attention family's one entry (fg_attn_call_*). */
#include "ops/infer.h"

#include "ops/attention_kernels.h"
#include "ops/cpu.h"
#include "ops/kernels.h"
#include "ops/ops_internal.h"

/* FG_OK when dt is a compute dtype on d (fg_op_compute_dtype), every pointer is set and every size
 * is at least 1. */
static fg_status check_args(const char *op, fg_device d, fg_dtype dt, int n_ptr, const void *const *ptr, int n_size,
                            const int64_t *size) {
    FG_TRY(fg_op_compute_dtype(op, "the data", dt, d));
    for (int i = 0; i < n_ptr; i++)
        if (!ptr[i]) return fg_error(FG_ERR_ARG, "%s: buffer %d is NULL", op, i);
    for (int i = 0; i < n_size; i++)
        if (size[i] < 1) return fg_error(FG_ERR_ARG, "%s: size %lld must be at least 1", op, (long long)size[i]);
    return FG_OK;
}
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The device's table, or NULL with the op's error when it lacks the kernel `has`. */
#define KERNELS(k, op, d, member)                                                                                      \
    const fg_kernels *k = fg_kernels_for(d, op);                                                                       \
    if (!k) return fg_last_status();                                                                                   \
    if (!k->member) return fg_op_no_kernel(op, k->device)

fg_status fg_infer_embedding(fg_device d, fg_dtype dt, void *out, const void *table, const int32_t *idx, int64_t n,
                             int64_t V, int64_t C) {
    static const char op[] = "embedding";
    const void *const bufs[] = {out, table, idx};
    const int64_t sizes[] = {n, V, C};
    FG_TRY(check_args(op, d, dt, N_OF(bufs), bufs, N_OF(sizes), sizes));
    for (int64_t r = 0; r < n; r++)
        if (idx[r] < 0 || idx[r] >= V)
            return fg_error(FG_ERR_ARG, "%s: id %d (position %lld) is outside [0, %lld)", op, (int)idx[r], (long long)r,
                            (long long)V);
    KERNELS(k, op, d, embedding.forward);
    return k->embedding.forward(dt, out, table, C, idx, n, V, C);
}

fg_status fg_infer_layernorm(fg_device d, fg_dtype dt, void *out, void *mean, void *rstd, const void *x, const void *w,
                             const void *b, int64_t R, int64_t C, double eps) {
    static const char op[] = "layernorm";
    const void *const bufs[] = {out, mean, rstd, x};
    const int64_t sizes[] = {R, C};
    FG_TRY(check_args(op, d, dt, N_OF(bufs), bufs, N_OF(sizes), sizes));
    if (!(eps > 0)) return fg_error(FG_ERR_ARG, "%s: eps %g must be positive", op, eps);
    KERNELS(k, op, d, layernorm.forward);
    return k->layernorm.forward(dt, out, mean, rstd, x, w, b, R, C, eps);
}

fg_status fg_infer_linear(fg_device d, fg_dtype dt, void *out, const void *x, const void *w, const void *b, int64_t R,
                          int64_t N, int64_t K) {
    static const char op[] = "linear";
    const void *const bufs[] = {out, x, w};
    const int64_t sizes[] = {R, N, K};
    FG_TRY(check_args(op, d, dt, N_OF(bufs), bufs, N_OF(sizes), sizes));
    KERNELS(k, op, d, matmul.gemm);
    return k->matmul.gemm(dt, 0, 1, R, N, K, 1.0, x, K, 0, w, K, 0, 0.0, b, out, N, 0, 1);
}

fg_status fg_infer_gelu(fg_device d, fg_dtype dt, void *out, const void *x, int64_t n) {
    static const char op[] = "gelu";
    const void *const bufs[] = {out, x};
    const int64_t sizes[] = {n};
    FG_TRY(check_args(op, d, dt, N_OF(bufs), bufs, N_OF(sizes), sizes));
    KERNELS(k, op, d, gelu.forward);
    return k->gelu.forward(dt, out, x, n);
}

/* ---- attention: one call of the family's entry per head, heads on the thread pool ---- */

typedef struct {
    const fg_attn_call *call;
    const char *q, *k, *v; /* head 0 */
    char *o, *lse;
    size_t q_head, kv_head, lse_head;    /* bytes from one head to the next */
    int64_t failed[FG_POOL_MAX_THREADS]; /* per worker: the first head that failed, or -1 */
} attn_heads;

static fg_status attn_head(const attn_heads *J, int64_t h) {
    return fg_attn_call_forward(J->call, J->o + (size_t)h * J->q_head, J->lse + (size_t)h * J->lse_head, NULL,
                                J->q + (size_t)h * J->q_head, J->k + (size_t)h * J->kv_head,
                                J->v + (size_t)h * J->kv_head);
}

static void attn_head_item(void *ctx, int64_t h, int worker) {
    attn_heads *J = ctx;
    if (attn_head(J, h) != FG_OK && J->failed[worker] < 0) J->failed[worker] = h;
}

fg_status fg_infer_attention(fg_device d, fg_dtype dt, const fg_attn_opts *opts, int64_t H, int64_t Nq, int64_t Nk,
                             int64_t hd, void *o, void *lse, const void *q, const void *k, const void *v,
                             int64_t q_stride, int64_t kv_stride) {
    static const char op[] = "attention";
    const void *const bufs[] = {o, lse, q, k, v};
    const int64_t sizes[] = {H, Nq, Nk, hd};
    FG_TRY(check_args(op, d, dt, N_OF(bufs), bufs, N_OF(sizes), sizes));
    if (d != FG_CPU) return fg_error(FG_ERR_DEVICE, "%s: the per-head inference loop runs on the CPU only", op);
    const fg_attn_opts ao = opts ? *opts : fg_attn_defaults();
    if (ao.dropout_p != 0 || fg_attn_has_variant(&ao))
        return fg_error(FG_ERR_ARG, "%s: the per-head inference loop takes no dropout and no variant", op);
    if (q_stride < Nq * hd || kv_stride < Nk * hd)
        return fg_error(FG_ERR_ARG, "%s: head strides %lld, %lld are shorter than a head (%lld, %lld)", op,
                        (long long)q_stride, (long long)kv_stride, (long long)(Nq * hd), (long long)(Nk * hd));
    fg_attn_call call;
    FG_TRY(fg_attn_call_begin(&call, &ao, 1, 1, Nq, Nk, hd, dt, d, 0));
    const size_t es = fg_dtype_size(dt);
    attn_heads J = {.call = &call,
                    .q = q,
                    .k = k,
                    .v = v,
                    .o = o,
                    .lse = lse,
                    .q_head = (size_t)q_stride * es,
                    .kv_head = (size_t)kv_stride * es,
                    .lse_head = (size_t)Nq * es};
    for (int w = 0; w < FG_POOL_MAX_THREADS; w++) J.failed[w] = -1;
    fg_pool_run(H, attn_head_item, &J, FG_POOL_BLAS_SERIAL); /* one head per item */
    /* a worker's message is its thread's: the first failed head runs again here to state it */
    int64_t bad = -1;
    for (int w = 0; w < FG_POOL_MAX_THREADS; w++)
        if (J.failed[w] >= 0 && (bad < 0 || J.failed[w] < bad)) bad = J.failed[w];
    fg_status st = bad < 0 ? FG_OK : attn_head(&J, bad);
    if (bad >= 0 && st == FG_OK) st = fg_error(FG_ERR_OOM, "%s: head %lld failed on a worker", op, (long long)bad);
    fg_attn_call_end(&call);
    return st;
}
