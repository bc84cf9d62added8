/* kernels.h — the per-device kernel table: what a device gives the ops.
 *
 * Every op has ONE shell, in ops/<family>.c, for every device: it checks the arguments, allocates
 * the outputs on the inputs' device, records the autograd node with its typed state, and in the
 * backward unpacks that state. The arithmetic is a kernel reached through the table of the
 * tensors' device:
 *
 *     const fg_kernels *k = fg_kernels_for(x->device, "layernorm");     // NULL + error if none
 *     if (!k->layernorm.forward) -> FG_ERR_DEVICE "layernorm is not supported on cuda"
 *     k->layernorm.forward(dt, fg_data(out), fg_data(mean), fg_data(rstd), fg_data(X), ..., R, C, eps);
 *
 * Kernels see raw pointers into the device's memory, sizes, strides and the dtype (FG_F32 or
 * FG_F64) — never tensors, never autograd (as FlashAttention's kernels see only their parameter
 * struct). Unless an entry says otherwise, arrays are contiguous in C order, and outputs that a
 * backward accumulates into (`dx`, `dw`, ...) are added to (+=), never overwritten; a NULL output
 * pointer means "not wanted". A kernel returns FG_OK or an error status with fg_error's message;
 * on a device with a queue (CUDA) it may return before the work finishes.
 *
 * A table is a set of members, one sub-table per op family, in the order of ops/ops.h. A member
 * left NULL means "not on this device": the shell then refuses the op with FG_ERR_DEVICE, as
 * ggml's backends answer supports_op. Devices register their table once they are started:
 * the CPU's is built in (ops/kernels.c); cuda/ registers its own from fg_cuda_init().
 */
#ifndef FG_KERNELS_H
#define FG_KERNELS_H

#include <stdint.h>

#include "ops/attention.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- layernorm (ops/layernorm.c) ----
 * x is (R, C); w, b (C) or NULL (1 and 0); saved: mean (R), rstd (R) = 1/sqrt(var + eps). */
typedef struct {
    fg_status (*forward)(fg_dtype dt, void *out, void *mean, void *rstd, const void *x, const void *w,
                         const void *b, int64_t R, int64_t C, double eps);
    /* dx, dw, db += ...; any of them NULL when not wanted */
    fg_status (*backward)(fg_dtype dt, void *dx, void *dw, void *db, const void *dout, const void *x,
                          const void *mean, const void *rstd, const void *w, int64_t R, int64_t C);
} fg_layernorm_kernels;

/* ---- attention (ops/attention.c) ----
 * The contract of the CPU kernels of ops/attention.h on the device's pointers: `aux` is the naive
 * P buffer (B, H, Nq, Nk) for FG_ATTN_NAIVE and lse_lo (B, H, Nq) or NULL for FG_ATTN_FLASH; the
 * naive backward gets lse NULL (it reads P); the backward adds into dq, dk, dv (any NULL). `caps`
 * lists the built-in variants the kernels implement (FG_ATTN_CAP_*); the shell refuses the others
 * on that device, and always refuses user callbacks off the CPU. With FG_ATTN_CAP_ALIBI,
 * pr->var.alibi_slopes is a HOST pointer (H doubles) or NULL (standard slopes). */
typedef struct {
    fg_status (*forward)(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux, const void *q,
                         const void *k, const void *v, const fg_attn_problem *pr);
    fg_status (*backward)(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv, const void *dout,
                          const void *q, const void *k, const void *v, const void *o, const void *lse,
                          const void *aux, const fg_attn_problem *pr);
    unsigned caps;
} fg_attention_kernels;

typedef struct fg_kernels {
    const char *device;              /* "cpu", "cuda": for messages */
    fg_layernorm_kernels layernorm;

    fg_attention_kernels attention;
} fg_kernels;

/* The table of device d, or NULL with FG_ERR_DEVICE naming `op` when d has none (a build without
 * that device, or a device not started: see fg_device_start). */
const fg_kernels *fg_kernels_for(fg_device d, const char *op);

/* Makes device d usable: nothing for the CPU; for CUDA, starts the GPU and registers its memory
 * functions and kernel table (fg_cuda_init), or explains why it cannot ("built without CUDA", no
 * device, a driver too old for the runtime). Idempotent and thread-safe. */
fg_status fg_device_start(fg_device d);

/* For device code: make `k` (static storage) the table of device d. */
void fg_register_kernels(fg_device d, const fg_kernels *k);

#ifdef __cplusplus
}
#endif
#endif /* FG_KERNELS_H */
