/* fgpy.h — a flat C interface to flashgrad's attention for callers through a foreign-function layer
 * (the Python package's ctypes module, python/flashgrad/_lib.py).
 *
 * Why a layer of its own: fg_attn_opts and fg_attn_problem are nested structs that may grow; a
 * ctypes mirror of them would break silently when a field moves. This file owns the one struct the
 * Python side mirrors (fgpy_attn_args, checked by size and version at load time) and turns it into
 * the library's options. Everything else is the library's: the raw-pointer CPU kernels of
 * ops/attention.h compute straight into the caller's arrays (no copies), errors are fg_status plus
 * fg_last_error() on the calling thread, and nothing here keeps state between calls, so calls from
 * several threads at once are as safe as the kernels (the pool runs a second caller's loop on that
 * caller's thread).
 *
 * Legend: B batch, H query heads, H_kv K/V heads, Nq queries, Nk keys, d head dim.
 *   q (B, H, Nq, d); k, v (B, H_kv, Nk, d); o, dout, dq (B, H, Nq, d); dk, dv (B, H_kv, Nk, d);
 *   lse, lse_lo (B, H, Nq). Every array is contiguous, row-major, of args->dtype (lse: float32 for
 *   bfloat16).
 *
 * CUDA: with args->device = FG_CUDA the dense forward and backward take device pointers (memory
 * of the device flashgrad started on: device 0, or $FG_CUDA_DEVICE) and run the CUDA kernel table's
 * flash or naive kernels on them in place, on flashgrad's own stream; the call returns after that
 * stream has finished (a synchronization at the end), so the outputs are complete when it returns.
 * The caller makes sure the inputs are complete before the call (e.g. by synchronizing the stream
 * that wrote them) and calls with that device current on the calling thread. A library built
 * without CUDA refuses with FG_ERR_DEVICE. Not on CUDA: the varlen calls, tensor masks, user
 * callbacks and registered variants (FG_ERR_DEVICE or FG_ERR_ARG), and the overflow check of the
 * CPU's forward (FG_ERR_NUMERIC is the CPU's only).
 */
#ifndef FGPY_H
#define FGPY_H

#include <stddef.h>
#include <stdint.h>

#include "ops/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever fgpy_attn_args or fgpy_check_report changes. */
#define FGPY_ABI_VERSION 3

typedef struct {
    int32_t dtype;  /* FG_F32 or FG_F64; FG_BF16 on FG_CUDA (float32 lse, no lse_lo) */
    int32_t device; /* FG_CPU, or FG_CUDA: every array is then device memory (see "CUDA" below) */
    int32_t impl;  /* FG_ATTN_NAIVE or FG_ATTN_FLASH */
    int64_t B, H, H_kv, Nq, Nk, d;
    double scale; /* 0 = 1/sqrt(d) */
    int32_t causal; /* 0, 1 bottom-right, 2 top-left (FG_ATTN_CAUSAL_*) */
    int32_t block_q, block_k; /* 0 = default */
    double dropout;           /* 0 <= p < 1 */
    uint64_t seed;
    int32_t window; /* 1: window_left / window_right apply (negative: unbounded) */
    int64_t window_left, window_right;
    int32_t alibi;
    const double *alibi_slopes;     /* H slopes or NULL (standard ones) */
    double softcap;                 /* 0 = off */
    fg_attn_score_mod_fn score_mod; /* user callbacks (ops/attention.h) or NULL */
    fg_attn_score_mod_fn score_mod_grad;
    fg_attn_mask_fn mask;
    void *user;
    const char *custom; /* a registered variant's name (fg_attn_register_custom) or NULL */
    /* a tensor mask (fg_attn_tensor_mask): kind 0 none, else FG_ATTN_TMASK_*; strides in elements
     * for (b, h, i, j), 0 to broadcast. Not with callbacks or a registered variant. */
    const void *mask_data;
    int32_t mask_kind;
    int64_t mask_stride[4];
} fgpy_attn_args;

typedef struct {
    const char *check, *tensor; /* static strings of the library */
    double max_abs, max_rel, limit;
    int32_t passed; /* 1, 0, or -1 for rows that only inform */
} fgpy_check_row;

typedef struct {
    int32_t passed, n_rows;
    fgpy_check_row rows[FG_ATTN_CHECK_MAX_ROWS];
    const char *fd_worst_tensor; /* NULL unless check 1 failed */
    int64_t fd_worst_index;      /* flat C-order index into that tensor's input (dQ: q, ...) */
    double fd_analytic, fd_numeric;
    char f32_skipped[256];
} fgpy_check_report;

int fgpy_abi_version(void);
size_t fgpy_attn_args_size(void);
size_t fgpy_check_report_size(void);

/* O and lse into o and lse, exactly as fg_attention's forward (the same kernels, the same checks:
 * the options, their fit in the dtype, and FG_ERR_NUMERIC for scores that overflow the dtype with
 * finite inputs). lse_lo (float32 flash only; else NULL or ignored — zeroed when given) receives
 * what rounding L to float32 lost, which fg_attention keeps for its backward. */
fg_status fgpy_attn_forward(const fgpy_attn_args *a, void *o, void *lse, void *lse_lo, const void *q, const void *k,
                            const void *v);

/* dQ, dK, dV (any may be NULL) for dout, as fg_attention's backward: flash recomputes P from q, k
 * and lse (+ lse_lo, may be NULL); naive, whose op saves P, recomputes it with its forward first
 * (o and lse are then not read). The kernels ADD into dq, dk, dv; with zero = 1 they are set to
 * zero first (on the calling thread, so a caller need not run a fill of its own). */
fg_status fgpy_attn_backward(const fgpy_attn_args *a, int zero, void *dq, void *dk, void *dv, const void *dout,
                             const void *q, const void *k, const void *v, const void *o, const void *lse,
                             const void *lse_lo);

/* fg_attn_varlen_forward / _backward (ops/attention.h) on packed q (Tq, H, d), k, v (Tk, H_kv, d)
 * with nseq + 1 offsets cu_q, cu_k; lse, lse_lo (H, Tq). a->B is ignored, a->Nq and a->Nk are the
 * longest documents (they size the option checks); a->impl must be flash. slopes: NULL or per-document
 * ALiBi slopes (nseq, H). The backward sets dq, dk, dv to zero first when zero = 1. */
fg_status fgpy_attn_varlen_forward(const fgpy_attn_args *a, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq,
                                   int64_t Tq, int64_t Tk, const double *slopes, void *o, void *lse, void *lse_lo,
                                   const void *q, const void *k, const void *v);
fg_status fgpy_attn_varlen_backward(const fgpy_attn_args *a, const int64_t *cu_q, const int64_t *cu_k, int64_t nseq,
                                    int64_t Tq, int64_t Tk, const double *slopes, int zero, void *dq, void *dk,
                                    void *dv, const void *dout, const void *q, const void *k, const void *v,
                                    const void *o, const void *lse, const void *lse_lo);

/* fg_attn_gradcheck for a's sizes and options (a->dtype and a->impl are ignored: both are run),
 * inputs from seed with Q, K std qk_std (0 = 1). FG_OK when the checks ran (rep->passed says how). */
fg_status fgpy_attn_gradcheck(const fgpy_attn_args *a, uint64_t seed, double qk_std, fgpy_check_report *rep);

/* The dropout pattern of dense attention (ops/shared/attn_dropout.h): keep (B, H, Nq, Nk), caller's
 * memory, receives 1 where dropout with probability p and seed keeps weight (b, h, i, j), else 0 —
 * the elements fgpy_attn_forward with that seed and p drops, exactly. FG_ERR_ARG for p outside
 * [0, 1), a negative size or a NULL keep with elements. */
fg_status fgpy_attn_dropout_keep(uint64_t seed, double p, int64_t B, int64_t H, int64_t Nq, int64_t Nk, uint8_t *keep);

/* The i-th registered variant's name and help (NULL past the end). */
const char *fgpy_variant_name(int i, const char **help);

/* 1 when this library holds flashgrad's CUDA code (built by `make shared` with nvcc), else 0. */
int fgpy_cuda_built(void);
/* Start the CUDA device (fg_device_start): FG_OK, or FG_ERR_DEVICE with the reason (built without
 * CUDA, no device). Idempotent. The calls with device FG_CUDA start it themselves. */
fg_status fgpy_cuda_start(void);

/* The calling thread's last error (fg_last_error, fg_last_status) and fg_clear_error. */
const char *fgpy_last_error(void);
int fgpy_last_status(void);
void fgpy_clear_error(void);

/* fg_pool_threads / fg_pool_set_threads (0 = the default; not while a call is running). */
int fgpy_threads(void);
void fgpy_set_threads(int n);

/* Run the pool's parallel loops on the threads of an OpenMP runtime already in the process
 * (fg_pool_set_team) instead of flashgrad's own workers: flashgrad.torch passes PyTorch's, so that
 * the two sets of threads do not fight for the cores. parallel, thread_num and max_threads are
 * that runtime's GOMP_parallel, omp_get_thread_num and omp_get_max_threads (the GOMP ABI, which
 * the GNU, LLVM and Intel runtimes all export); a loop runs on min(fgpy_threads(),
 * omp_get_max_threads()) of its threads. All NULL: flashgrad's own workers again. Returns 1 when
 * the runtime is in use, 0 when not (any NULL). Not while a call is running. */
int fgpy_use_openmp(void *parallel, void *thread_num, void *max_threads);

#ifdef __cplusplus
}
#endif
#endif /* FGPY_H */
