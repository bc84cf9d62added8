/* attention.c — the CPU attention kernels' common code: the CPU table's attention entries (naive
 * or flash, float32 or float64, by impl and dtype), the variants' predicates and tile
 * classification, and what the flash drivers of both dtypes share (ops/cpu/attention_cpu.h).
 *
 * The kernels themselves are per dtype: ops/cpu/attention_f32.c and ops/cpu/attention_f64.c, each
 * one translation unit over the template bodies
 *   ops/cpu/attention_naive_body.h    naive: the whole score matrix of a head at once
 *   ops/cpu/attention_flash_body.h    flash: tiled, online softmax, recomputing backward
 *   ops/cpu/attention_variant_body.h  the variants and dropout on a tile, which both call
 *   ops/cpu/flash_tiles_body.h        flash's tables of tile operations (ops/cpu/flash_tiles.h)
 * with every name written out there (fg_cpu_attention_flash_forward_f32, ...). A call from the op
 * (ops/attention.c) goes: fg_attention -> fg_attn_call_forward (ops/attention_entry.c, where every
 * check is made) -> the device table's attention.forward = fg_cpu_attention_forward (below) ->
 * fg_cpu_attention_flash_forward_f32 (attention_f32.c) -> flash_forward_lo (attention_flash_body.h)
 * -> fwd_item -> the tile operations and score_tile. fg_attention_qkv's packed rows (pr->rows) and
 * varlen documents (pr->varlen, attention_varlen.c) come the same way; no kernel checks the
 * problem or calls back into the entry.
 */
#include "ops/cpu/attention_cpu.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/cpu/simd.h"
#include "ops/kernels_cpu.h"
#include "tensor/alloc.h"

/* ---- the CPU table's attention entries (ops/kernels.h): naive or flash, float32 or float64 ----
 * aux: naive's P (may be NULL in the forward), or flash's lse_lo (may be NULL). pr is checked (the
 * entry made every check before the table was called): pr->varlen runs the documents, pr->rows
 * comes with flash only. */
fg_status fg_cpu_attention_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux, const void *q,
                                   const void *k, const void *v, const fg_attn_problem *pr) {
    if (pr->varlen) return fg_cpu_attention_varlen_forward(dt, o, lse, aux, q, k, v, pr);
    if (impl == FG_ATTN_NAIVE)
        return dt == FG_F32 ? fg_cpu_attention_naive_forward_f32(o, lse, aux, q, k, v, pr)
                            : fg_cpu_attention_naive_forward_f64(o, lse, aux, q, k, v, pr);
    return dt == FG_F32 ? fg_cpu_attention_flash_forward_f32(o, lse, aux, q, k, v, pr)
                        : fg_cpu_attention_flash_forward_f64(o, lse, aux, q, k, v, pr);
}

fg_status fg_cpu_attention_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv, const void *dout,
                                    const void *q, const void *k, const void *v, const void *o, const void *lse,
                                    const void *aux, const fg_attn_problem *pr) {
    if (pr->varlen) return fg_cpu_attention_varlen_backward(dt, dq, dk, dv, dout, q, k, v, o, lse, aux, pr);
    if (impl == FG_ATTN_NAIVE)
        return dt == FG_F32 ? fg_cpu_attention_naive_backward_f32(dq, dk, dv, dout, q, k, v, aux, pr)
                            : fg_cpu_attention_naive_backward_f64(dq, dk, dv, dout, q, k, v, aux, pr);
    return dt == FG_F32 ? fg_cpu_attention_flash_backward_f32(dq, dk, dv, dout, q, k, v, o, lse, aux, pr)
                        : fg_cpu_attention_flash_backward_f64(dq, dk, dv, dout, q, k, v, o, lse, aux, pr);
}

/* ---- the arrays' rows (ops/attention_kernels.h) ---- */
fg_attn_layout fg_attn_layout_contiguous(const fg_attn_problem *pr) {
    const int64_t d = pr->d, Hkv = pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : pr->H;
    const fg_attn_rows qr = {pr->H * pr->Nq * d, pr->Nq * d, d}, kr = {Hkv * pr->Nk * d, pr->Nk * d, d};
    return (fg_attn_layout){.q = qr, .k = kr, .v = kr, .o = qr, .dout = qr, .dq = qr, .dk = kr, .dv = kr};
}

fg_attn_layout fg_cpu_attention_rows(const fg_attn_problem *pr) {
    /* a row holds d >= 1 elements, so a set layout has a nonzero row stride */
    return pr->rows.q.t != 0 ? pr->rows : fg_attn_layout_contiguous(pr);
}

/* ---- predicates ---- */
int fg_attn_modifies_scores(const fg_attn_problem *pr) {
    return pr->var.softcap > 0 || pr->var.alibi || pr->custom.score_mod != NULL;
}
int fg_attn_needs_score_grad(const fg_attn_problem *pr) { return pr->var.softcap > 0 || pr->custom.score_mod != NULL; }

/* ---- tile classification: causal ∧ window (pure, ops/shared/attn_variant.h) ∧ the block mask ---- */
fg_tile_kind fg_attn_tile_kind(const fg_attn_problem *pr, int64_t b, int64_t h, int64_t i0, int64_t nq, int64_t j0,
                               int64_t nk, int *window_partial, int *mask_partial) {
    const fg_attn_variant *v = &pr->var;
    fg_tile_kind wk = fg_attn_tile_kind_window(i0, nq, j0, nk, pr->Nq, pr->Nk, pr->causal, v->window, v->window_left,
                                               v->window_right);
    fg_tile_kind mk = FG_TILE_FULL;
    if (pr->custom.mask) {
        const fg_attn_block_mask *bm = pr->custom.block_mask;
        if (bm) {
            int bq, bk;
            fg_attn_block_mask_dims(bm, NULL, NULL, NULL, NULL, &bq, &bk);
            mk = fg_attn_block_mask_kind(bm, b, h, i0 / bq, j0 / bk);
        } else {
            mk = FG_TILE_PARTIAL;
        }
    }
    if (window_partial) *window_partial = wk == FG_TILE_PARTIAL;
    if (mask_partial) *mask_partial = mk == FG_TILE_PARTIAL;
    return fg_attn_tile_kind_and(wk, mk);
}

/* ---- the flash drivers' common parts ---- */

/* Worker w's buffer. Always allocated up front — unless another thread raised the pool's thread
 * count between flash_run's allocation and the run; such a worker takes its buffer here. NULL
 * (and oom set) when memory is short: the item must then do nothing, and flash_run reports it. */
void *fg_attn_flash_scratch_get(fg_attn_flash_scratch *s, int w) {
    if (!s->buf[w] && !(s->buf[w] = fg_alloc(FG_CPU, s->bytes))) atomic_store(&s->oom, 1);
    return s->buf[w];
}

int64_t fg_attn_flash_fwd_group(int64_t nqb, int64_t heads, int64_t block_bytes) {
    static _Atomic long l2_bytes; /* 0 until the first call */
    long l2 = atomic_load_explicit(&l2_bytes, memory_order_relaxed);
    if (l2 == 0) {
        l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        if (l2 <= 0) l2 = 512L << 10; /* unknown: the smallest L2 of the x86 cores seen */
        atomic_store_explicit(&l2_bytes, l2, memory_order_relaxed);
    }
    int64_t g = block_bytes > 0 ? (int64_t)(l2 / 2) / block_bytes : FG_ATTN_FLASH_FWD_GROUP;
    if (g > FG_ATTN_FLASH_FWD_GROUP) g = FG_ATTN_FLASH_FWD_GROUP;
    if (g > nqb) g = nqb;
    const int64_t want = 4 * (int64_t)fg_pool_threads();
    while (g > 1 && heads * ((nqb + g - 1) / g) < want) g--;
    return g < 1 ? 1 : g;
}

static void flash_scratch_free(fg_attn_flash_scratch *s) {
    for (int w = 0; w < FG_POOL_MAX_THREADS; w++)
        if (s->buf[w]) fg_free(FG_CPU, s->buf[w]);
}

/* Run a kernel's n items with s->bytes of scratch per thread: on the pool, or in order on this
 * thread when user callbacks are present. Frees the scratch after. */
fg_status fg_attn_flash_run(int64_t n, fg_pool_fn fn, void *ctx, fg_attn_flash_scratch *s, const fg_attn_problem *pr,
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

/* The problem with its blocks clamped to its sizes: a block never exceeds Nq or Nk, and is >= 1. */
fg_attn_problem fg_attn_flash_resolved(const fg_attn_problem *pr) {
    fg_attn_problem p2 = *pr;
    p2.block_q = (int)(pr->block_q < pr->Nq ? pr->block_q : (pr->Nq > 0 ? pr->Nq : 1));
    p2.block_k = (int)(pr->block_k < pr->Nk ? pr->block_k : (pr->Nk > 0 ? pr->Nk : 1));
    return p2;
}

/* The key blocks that query rows [i0, i0 + nq) can see under causal ∧ window start at *j0 and end
 * before *j1: the rows see keys in [lo(i0), hi(i0 + nq − 1)) at most (both ends of a row's range
 * grow with i); key blocks outside are never visited. */
void fg_attn_flash_key_blocks(const fg_attn_problem *pr, int64_t i0, int64_t nq, int64_t *j0, int64_t *j1) {
    const fg_attn_variant *v = &pr->var;
    int64_t lo, hi, unused;
    fg_attn_row_range(i0, pr->Nq, pr->Nk, pr->causal, v->window, v->window_left, v->window_right, &lo, &unused);
    fg_attn_row_range(i0 + nq - 1, pr->Nq, pr->Nk, pr->causal, v->window, v->window_left, v->window_right, &unused,
                      &hi);
    *j0 = lo / pr->block_k * pr->block_k;
    *j1 = hi;
}

/* float32 through the portable table: with FG_ATTN_GEMM=blas in the environment (read once), and on
 * a CPU without AVX2+FMA (or not x86), where the x86 table's plain C forms would compute every
 * multiply-add with a call to fmaf — they stay the bit-exact reference that tests force with
 * fg_simd_set(FG_SIMD_SCALAR) on vector hardware. */
const fg_flash_ops_f32 *fg_attn_flash_ops_f32(void) {
    static atomic_int v = -1;
    int x = atomic_load_explicit(&v, memory_order_relaxed);
    if (x < 0) {
        const char *e = getenv("FG_ATTN_GEMM");
        x = e && !strcmp(e, "blas");
        atomic_store_explicit(&v, x, memory_order_relaxed);
    }
    return x || fg_simd_detect() == FG_SIMD_SCALAR ? &fg_flash_portable_f32 : &fg_flash_x86_f32;
}

/* float64 the same way: the x86 table (AVX2+FMA forms, run on AVX-512 CPUs too) unless
 * FG_ATTN_GEMM=blas or the CPU has no AVX2+FMA. */
const fg_flash_ops_f64 *fg_attn_flash_ops_f64(void) {
    return fg_attn_flash_ops_f32() == &fg_flash_portable_f32 ? &fg_flash_portable_f64 : &fg_flash_x86_f64;
}
