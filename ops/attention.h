/* attention.h — scaled dot-product attention, naive and flash, with autograd.
 *
 *   O = softmax(Q·Kᵀ·scale + mask) · V        for each batch b and head h
 *
 * Q is (B, H, Nq, d), K and V are (B, H, Nk, d), O is (B, H, Nq, d); row-major, float32 or float64.
 * lse, the per-row logsumexp of the (masked, scaled) scores, is (B, H, Nq).
 *
 * naive: materializes S and P = softmax(S) per (b, h) and saves P for the backward.
 * flash: tiles Q into block_q rows and K, V into block_k rows with an online softmax (running max
 *        m, running sum l); saves only O and L = m + log l; the backward recomputes S and
 *        P = exp(S − L) tile by tile. Nothing of size Nq×Nk is ever allocated.
 *
 * Causal masking is aligned to the bottom-right: query i sees key j iff j <= i + Nk − Nq. A row
 * that sees no key outputs zeros, has lse = −inf, and gets zero gradients.
 * Dropout p drops P's element (b, h, i, j) iff !fg_attn_keep(seed, threshold, b, h, i, j)
 * (tensor/philox.h) and scales kept ones by 1/(1−p); the mask is regenerated, never stored.
 *
 * The file is in three layers:
 *   fg_attention            tensors + autograd (ops/attention.c)
 *   fg_attn_{naive,flash}_* raw-pointer CPU kernels, float32 and float64, for benchmarks, tests and
 *                           as the reference the CUDA mirror (cuda/attention.cu) is checked against
 *                           (ops/attention_naive.c, ops/attention_flash.c)
 *   fg_attn_online_update_* the online-softmax step of one query row over one block of keys
 */
#ifndef FG_ATTENTION_H
#define FG_ATTENTION_H

#include <stdint.h>

#include "autograd/autograd.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FG_ATTN_NAIVE = 0, FG_ATTN_FLASH = 1, FG_ATTN_IMPL_COUNT } fg_attn_impl;

/* "naive" / "flash" */
const char *fg_attn_impl_name(fg_attn_impl impl);

/* Default flash tiles on the CPU: a 64×64 score tile is 16 KiB in float32 (32 KiB in float64);
 * with the Q, K and V tiles (64×d each) it stays in a core's L2 for every d up to 256. */
#define FG_ATTN_DEFAULT_BLOCK_Q 64
#define FG_ATTN_DEFAULT_BLOCK_K 64
/* Largest block size accepted (a tile is block_q × block_k elements). */
#define FG_ATTN_MAX_BLOCK 65536

typedef struct {
    fg_attn_impl impl;
    double scale;        /* 0 means 1/sqrt(d) */
    int causal;
    double dropout_p;    /* 0 <= p < 1 */
    uint64_t seed;       /* dropout seed */
    int block_q, block_k;/* flash tile sizes; 0 means the default */
} fg_attn_opts;

/* Default options: flash, scale 1/sqrt(d), no mask, no dropout, default blocks. */
fg_attn_opts fg_attn_defaults(void);

/* O (new reference). If lse_out is not NULL, *lse_out receives the logsumexp (new reference; it
 * carries no gradient). Records an autograd node when Q, K or V requires grad (and grad mode is
 * on); its backward adds dQ, dK, dV into their gradient buffers. Inputs may be non-contiguous
 * views (they are made contiguous first). NULL on error: Q/K/V not rank 4, B, H or d that differ,
 * Nk of K and V that differ, dtypes or devices that differ, p outside [0, 1), a scale that is not
 * finite, a block size outside [0, FG_ATTN_MAX_BLOCK]. */
fg_tensor *fg_attention(fg_tensor *q, fg_tensor *k, fg_tensor *v, const fg_attn_opts *opts,
                        fg_tensor **lse_out);

/* ---- raw-pointer kernels (CPU) ----
 * Every array is contiguous, row-major, of the kernel's dtype:
 *   q (B, H, Nq, d); k, v (B, H, Nk, d); o, dout, dq (B, H, Nq, d); dk, dv (B, H, Nk, d);
 *   lse (B, H, Nq); p (B, H, Nq, Nk) — naive only.
 * Backward kernels ADD into dq, dk, dv; any of the three may be NULL (not wanted).
 * Scratch comes from fg_alloc once per call: naive takes O(Nq·Nk) per (b, h), flash
 * O(block_q·block_k + Nq). They return FG_OK, or FG_ERR_OOM when scratch cannot be had. */
typedef struct {
    int64_t B, H, Nq, Nk, d;
    double scale;        /* resolved (never 0) */
    int causal;
    double dropout_p;
    uint64_t seed;
    int block_q, block_k;/* resolved (>= 1) */
} fg_attn_problem;

/* Validates the sizes and options and fills *pr, resolving the defaults (scale 0, blocks 0).
 * FG_ERR_ARG / FG_ERR_SHAPE with a message on bad values. */
fg_status fg_attn_problem_init(fg_attn_problem *pr, int64_t B, int64_t H, int64_t Nq, int64_t Nk,
                               int64_t d, const fg_attn_opts *opts);

/* naive forward: o and lse out; p, if not NULL, receives the softmax P (before dropout), saved for
 * the backward. With p NULL the kernel uses one Nq×Nk scratch for all (b, h). */
fg_status fg_attn_naive_forward_f32(float *o, float *lse, float *p, const float *q, const float *k,
                                    const float *v, const fg_attn_problem *pr);
fg_status fg_attn_naive_forward_f64(double *o, double *lse, double *p, const double *q, const double *k,
                                    const double *v, const fg_attn_problem *pr);
/* naive backward from the saved P. */
fg_status fg_attn_naive_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                     const float *k, const float *v, const float *p,
                                     const fg_attn_problem *pr);
fg_status fg_attn_naive_backward_f64(double *dq, double *dk, double *dv, const double *dout, const double *q,
                                     const double *k, const double *v, const double *p,
                                     const fg_attn_problem *pr);

/* flash forward: o and lse out (lse is what the backward needs; it is not optional). */
fg_status fg_attn_flash_forward_f32(float *o, float *lse, const float *q, const float *k, const float *v,
                                    const fg_attn_problem *pr);
fg_status fg_attn_flash_forward_f64(double *o, double *lse, const double *q, const double *k,
                                    const double *v, const fg_attn_problem *pr);
/* flash backward: recomputes P tile by tile from q, k and lse; o is the forward's output. */
fg_status fg_attn_flash_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                     const float *k, const float *v, const float *o, const float *lse,
                                     const fg_attn_problem *pr);
fg_status fg_attn_flash_backward_f64(double *dq, double *dk, double *dv, const double *dout,
                                     const double *q, const double *k, const double *v, const double *o,
                                     const double *lse, const fg_attn_problem *pr);
/* The same with lse_lo (B, H, Nq), the part of L = m + log l that rounding L to the dtype lost
 * (L ≈ lse + lse_lo); NULL in either call means "none" (the forms above pass NULL). In float32 with
 * large scores (|L| ~ 100 and up) one ulp of L is a relative error of ~|L|·6e-8 in every recomputed
 * weight P = exp(S − L); with lse_lo the backward computes exp((S − lse) − lse_lo), exact to float32
 * near the row max, as precise as the naive kernel's stored P. fg_attention uses these for float32
 * (B·H·Nq more floats saved, O(N)). */
fg_status fg_attn_flash_forward_lo_f32(float *o, float *lse, float *lse_lo, const float *q, const float *k,
                                       const float *v, const fg_attn_problem *pr);
fg_status fg_attn_flash_forward_lo_f64(double *o, double *lse, double *lse_lo, const double *q, const double *k,
                                       const double *v, const fg_attn_problem *pr);
fg_status fg_attn_flash_backward_lo_f32(float *dq, float *dk, float *dv, const float *dout, const float *q,
                                        const float *k, const float *v, const float *o, const float *lse,
                                        const float *lse_lo, const fg_attn_problem *pr);
fg_status fg_attn_flash_backward_lo_f64(double *dq, double *dk, double *dv, const double *dout,
                                        const double *q, const double *k, const double *v, const double *o,
                                        const double *lse, const double *lse_lo, const fg_attn_problem *pr);

/* ---- the online-softmax step ----
 * One query row meets one block of n scores s (masked scores are -inf). With m the running max
 * and l the running sum of exp(score − m) over the blocks before:
 *     m' = max(m, max_j s_j)
 *     s_j <- exp(s_j − m')                 (0 for a masked score; all 0 while m' is still -inf)
 *     l' = exp(m − m') · l + Σ_j s_j
 * and returns the rescale factor exp(m − m') (1 while m' is -inf) that the caller applies to its
 * output accumulator before adding this block's Σ_j s_j·v_j. Start a row with m = -inf, l = 0.
 * The flash forward calls exactly these functions, so a test can trace m and l block by block. */
float fg_attn_online_update_f32(float *m, float *l, float *s, int64_t n);
double fg_attn_online_update_f64(double *m, double *l, double *s, int64_t n);

/* ---- dropout ----
 * x[j] *= Z(b, h, i, j0 + j) for j in [0, n): Z = inv_keep where
 * fg_attn_keep(seed, threshold, b, h, i, j0 + j), else 0. One Philox call serves four keys; the
 * result equals fg_attn_keep element by element. threshold = fg_dropout_threshold(p) (0: no-op). */
void fg_attn_dropout_scale_f32(float *x, int64_t n, uint64_t seed, uint32_t threshold, float inv_keep,
                               int64_t b, int64_t h, int64_t i, int64_t j0);
void fg_attn_dropout_scale_f64(double *x, int64_t n, uint64_t seed, uint32_t threshold, double inv_keep,
                               int64_t b, int64_t h, int64_t i, int64_t j0);

/* ---- another device ----
 * A non-CPU device (cuda/) registers its kernels; fg_attention then calls them for tensors on
 * that device with device pointers, the same contract as the CPU kernels above: `aux` is the naive
 * P buffer (B, H, Nq, Nk) for FG_ATTN_NAIVE and lse_lo (B, H, Nq) or NULL for FG_ATTN_FLASH.
 * Either entry may be NULL (then that direction is unsupported on the device). */
typedef struct {
    fg_status (*forward)(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux, const void *q,
                         const void *k, const void *v, const fg_attn_problem *pr);
    fg_status (*backward)(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv, const void *dout,
                          const void *q, const void *k, const void *v, const void *o, const void *lse,
                          const void *aux, const fg_attn_problem *pr);
} fg_attn_backend;
void fg_register_attention_backend(fg_device dev, const fg_attn_backend *be);

#ifdef __cplusplus
}
#endif
#endif /* FG_ATTENTION_H */
