/* attention_cpu.h — what the CPU attention kernels share between their two dtypes: the flash
 * drivers' scratch and item runner, the blocks of a problem, and the choice of tile operations.
 * Defined in ops/cpu/attention.c; used by the per-dtype kernels (ops/cpu/attention_f32.c,
 * ops/cpu/attention_f64.c, through ops/cpu/attention_flash_body.h). Private to ops/cpu/.
 */
#ifndef FG_ATTENTION_CPU_H
#define FG_ATTENTION_CPU_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/attention_kernels.h"
#include "ops/cpu/flash_profile.h"
#include "ops/cpu/flash_tiles.h"
#include "ops/cpu/threadpool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Query blocks per forward item, at most. Each item walks its key blocks once for all of its query
 * blocks, so a K/V tile is read from memory once and then reused from the nearest caches by every
 * block of the group; one block per item would stream all of K and V through the cache hierarchy
 * once per 64 query rows (at N in the thousands, more than L2 holds). The math of every (query
 * block, key block) tile is unchanged: grouping only changes which tiles run next to each other,
 * so the group may follow the cache and the thread count (fg_attn_flash_fwd_group). */
#define FG_ATTN_FLASH_FWD_GROUP 16

/* Key blocks per pass over the queries in a backward item: each query tile (Qi, dOi, dQi) is read
 * once for the group's key blocks while it is cached, where one key block per pass would stream
 * all of Q, dO and dQ through the cache hierarchy once per 64 keys. The order of every sum is
 * unchanged: dKj and dVj still take the query tiles in order, dQi the key blocks in order. */
#define FG_ATTN_FLASH_BWD_GROUP 4

/* Per-thread scratch of one kernel call: one buffer per thread that can take part, allocated by
 * flash_run before the items start (not lazily by whichever thread gets an item first: which
 * threads get items depends on the schedule, and a lazily taken buffer would make the caching
 * allocator's traffic — and whether a warm step asks the system for memory — depend on it too). */
typedef struct {
    void *buf[FG_POOL_MAX_THREADS];
    size_t bytes;
    atomic_int oom; /* a late buffer (flash_scratch_get) could not be had */
} fg_attn_flash_scratch;

/* Worker w's buffer. Always allocated up front by fg_attn_flash_run — unless another thread raised
 * the pool's thread count between the allocation and the run; such a worker takes its buffer here.
 * NULL (and oom set) when memory is short: the item must then do nothing, and the run reports it. */
void *fg_attn_flash_scratch_get(fg_attn_flash_scratch *s, int w);
/* Run a kernel's n items with s->bytes of scratch per thread: on the pool, or in order on this
 * thread when user callbacks are present. Frees the scratch after; FG_ERR_OOM naming `what`. */
fg_status fg_attn_flash_run(int64_t n, fg_pool_fn fn, void *ctx, fg_attn_flash_scratch *s, const fg_attn_problem *pr,
                            unsigned flags, const char *what);
/* The problem with its blocks clamped to its sizes: a block never exceeds Nq or Nk, and is >= 1. */
fg_attn_problem fg_attn_flash_resolved(const fg_attn_problem *pr);
/* Query blocks per forward item for nqb blocks in each of `heads` (b, h): as many as keep the
 * group's own state (block_bytes per block: its Qᵢᵀ and output accumulator) within half of a
 * core's L2 cache, at most FG_ATTN_FLASH_FWD_GROUP and nqb, and then fewer while that would leave
 * under four items per pool thread. At least 1. */
int64_t fg_attn_flash_fwd_group(int64_t nqb, int64_t heads, int64_t block_bytes);
/* The per-dtype kernels behind the CPU table's attention entries (attention_f32.c, attention_f64.c),
 * on the resolved and checked problem pr (the entry, ops/attention_entry.c, checked it): the
 * contracts of fg_attn_{naive,flash}_* in ops/attention_kernels.h, the flash ones on pr->rows. */
fg_status fg_cpu_attention_naive_forward_f32(float *o, float *lse, float *p, const float *q, const float *k,
                                             const float *v, const fg_attn_problem *pr);
fg_status fg_cpu_attention_naive_forward_f64(double *o, double *lse, double *p, const double *q, const double *k,
                                             const double *v, const fg_attn_problem *pr);
fg_status fg_cpu_attention_naive_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                              const float *k, const float *v, const float *p,
                                              const fg_attn_problem *pr);
fg_status fg_cpu_attention_naive_backward_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                              const double *k, const double *v, const double *p,
                                              const fg_attn_problem *pr);
fg_status fg_cpu_attention_flash_forward_f32(float *o, float *lse, float *lse_lo, const float *q, const float *k,
                                             const float *v, const fg_attn_problem *pr);
fg_status fg_cpu_attention_flash_forward_f64(double *o, double *lse, double *lse_lo, const double *q, const double *k,
                                             const double *v, const fg_attn_problem *pr);
fg_status fg_cpu_attention_flash_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                              const float *k, const float *v, const float *o, const float *lse,
                                              const float *lse_lo, const fg_attn_problem *pr);
fg_status fg_cpu_attention_flash_backward_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                              const double *k, const double *v, const double *o, const double *lse,
                                              const double *lse_lo, const fg_attn_problem *pr);
/* The flash kernels on pr->varlen's documents (attention_varlen.c): each document gathered into
 * the contiguous layout, run, scattered back; the backward adds into dq, dk, dv (any NULL). */
fg_status fg_cpu_attention_varlen_forward(fg_dtype dt, void *o, void *lse, void *lse_lo, const void *q, const void *k,
                                          const void *v, const fg_attn_problem *pr);
fg_status fg_cpu_attention_varlen_backward(fg_dtype dt, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                           const void *k, const void *v, const void *o, const void *lse,
                                           const void *lse_lo, const fg_attn_problem *pr);
/* The rows the flash kernels read: pr->rows, or the contiguous layouts when it is all zero. */
fg_attn_layout fg_cpu_attention_rows(const fg_attn_problem *pr);
/* The key blocks that query rows [i0, i0 + nq) can see under causal ∧ window: [*j0, *j1). */
void fg_attn_flash_key_blocks(const fg_attn_problem *pr, int64_t i0, int64_t nq, int64_t *j0, int64_t *j1);
/* The table of tile operations the flash kernels use for each dtype: the x86 one, or the portable
 * one on a CPU without AVX2+FMA or with FG_ATTN_GEMM=blas in the environment (read once). */
const fg_flash_ops_f32 *fg_attn_flash_ops_f32(void);
const fg_flash_ops_f64 *fg_attn_flash_ops_f64(void);

#ifdef __cplusplus
}
#endif
#endif /* FG_ATTENTION_CPU_H */
