/* ops.h — the differentiable operations a GPT needs, each with its backward rule.
 *
 * Conventions for every function here:
 *  - Shapes are outermost-first. "x is (B, T, C)" means x->shape = {B, T, C}.
 *  - Inputs are borrowed; the result is a new reference the caller releases; NULL on error with
 *    the reason in fg_last_error() (shape, dtype or device mismatch, out of memory).
 *  - float32 and float64 are both supported on the CPU; all tensor inputs of one call share one
 *    dtype and one device. Inputs may be non-contiguous views unless a note says otherwise.
 *  - When grad mode is on and an input requires grad, the op records a node (autograd/autograd.h)
 *    and its backward rule adds into the inputs' gradients. Forward and backward of a family live
 *    in one file, ops/<family>.c, the op's shell; its kernels in ops/cpu/<family>.c (the CPU) and
 *    cuda/<family>.cu (the GPU).
 */
#ifndef FG_OPS_H
#define FG_OPS_H

#include <stdint.h>

#include "autograd/autograd.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- matmul.c ---- */
/* a (..., M, K) @ b (..., K, N) -> (..., M, N). Batch dims of a and b must be equal, or b is 2-D
 * (K, N) and is shared by every batch. Operands that are transposed views (of the last two dims)
 * go to BLAS as transposed, without a copy. */
fg_tensor *fg_matmul(fg_tensor *a, fg_tensor *b);
/* x (..., K) @ w^T + bias: w is (N, K) like torch.nn.Linear, bias (N) or NULL -> (..., N). */
fg_tensor *fg_linear(fg_tensor *x, fg_tensor *w, fg_tensor *bias);
/* The kernel of float32 products on the CPU (ops/cpu/matmul.c): FG_MATMUL_AUTO, the default — chosen
 * per product by its shape (ops/cpu/matmul.c states the rule) — or one kernel for every float32
 * product it can run: FG_MATMUL_BLAS, OpenBLAS; FG_MATMUL_TILE, the register-blocked tile kernel
 * (AVX2+FMA or AVX-512); FG_MATMUL_DNNL, oneDNN single-threaded per block of C on the pool;
 * FG_MATMUL_DNNL_OMP, oneDNN given the whole product on its own OpenMP threads (as many as the
 * pool's) while the pool waits. A kernel that cannot run a product (no oneDNN in the build, no
 * AVX2, float64) leaves it to the automatic choice. FG_MATMUL=blas|tile|dnnl|dnnl-omp in the
 * environment starts with that setting. Returns the previous setting. For benchmarks and tests;
 * not to be called while products run in other threads. */
typedef enum {
    FG_MATMUL_AUTO = 0,
    FG_MATMUL_BLAS = 1,
    FG_MATMUL_TILE = 2,
    FG_MATMUL_DNNL = 3,
    FG_MATMUL_DNNL_OMP = 4
} fg_matmul_kernel;
fg_matmul_kernel fg_matmul_set_kernel(fg_matmul_kernel k);
/* The kernel FG_MATMUL_AUTO gives a float32 product C (M, N) = A' (M, K) @ B' (K, N) on the CPU
 * (FG_MATMUL_TILE, _DNNL or _BLAS), whatever fg_matmul_set_kernel says; ta: A' is the transpose
 * of A as stored (as in a weight gradient, xᵀ @ dout). */
fg_matmul_kernel fg_matmul_auto_kernel(int64_t M, int64_t N, int64_t K, int ta);

/* ---- elementwise.c (NumPy broadcasting: shapes align at the right; size 1 stretches) ---- */
fg_tensor *fg_add(fg_tensor *a, fg_tensor *b);
fg_tensor *fg_sub(fg_tensor *a, fg_tensor *b);
fg_tensor *fg_mul(fg_tensor *a, fg_tensor *b);
fg_tensor *fg_div(fg_tensor *a, fg_tensor *b);
fg_tensor *fg_add_scalar(fg_tensor *a, double s); /* a + s */
fg_tensor *fg_mul_scalar(fg_tensor *a, double s); /* a * s */

/* ---- reduce.c ---- */
/* Sum / mean over one axis (negative counts from the end); keepdim keeps it as size 1. */
fg_tensor *fg_sum(fg_tensor *t, int axis, int keepdim);
fg_tensor *fg_mean(fg_tensor *t, int axis, int keepdim);
/* Sum / mean of all elements -> a tensor of shape (1). */
fg_tensor *fg_sum_all(fg_tensor *t);
fg_tensor *fg_mean_all(fg_tensor *t);

/* ---- shape.c (differentiable views; the gradient flows back through the inverse view) ---- */
/* A view when t is contiguous, else a contiguous copy. One size may be -1. */
fg_tensor *fg_reshape(fg_tensor *t, int ndim, const int64_t *shape);
fg_tensor *fg_permute(fg_tensor *t, const int *perm);                    /* view */
fg_tensor *fg_transpose(fg_tensor *t, int d0, int d1);                   /* view */
fg_tensor *fg_slice(fg_tensor *t, int axis, int64_t start, int64_t end); /* view */
fg_tensor *fg_make_contiguous(fg_tensor *t);                             /* copy (or t retained) */

/* ---- embedding.c ---- */
/* weight (V, C), idx: n int32 token ids laid out as `shape` (ndim dims) -> (shape..., C).
 * An id outside [0, V) is an FG_ERR_ARG error. Backward scatter-adds rows into dweight. */
fg_tensor *fg_embedding(fg_tensor *weight, const int32_t *idx, int ndim, const int64_t *shape);

/* ---- layernorm.c ---- */
/* x (..., C), weight (C), bias (C) -> (..., C); normalizes over the last dim with eps. Saves the
 * per-row mean and 1/std for the backward. weight/bias may be NULL (then 1 and 0). */
fg_tensor *fg_layernorm(fg_tensor *x, fg_tensor *weight, fg_tensor *bias, double eps);

/* ---- gelu.c ---- */
/* GELU, the tanh form GPT-2 uses: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
fg_tensor *fg_gelu(fg_tensor *x);

/* ---- softmax.c ---- */
/* Softmax over the last dim (max-subtracted). */
fg_tensor *fg_softmax(fg_tensor *x);

/* ---- cross_entropy.c ---- */
/* Fused softmax + negative log-likelihood. logits (..., V); targets: one int32 per row (numel/V
 * rows); a target of -1 is ignored. Returns the mean over non-ignored rows, shape (1). The
 * backward is (softmax - onehot) / count, computed from saved per-row logsumexp. A target outside
 * [-1, V) is an FG_ERR_ARG error. */
fg_tensor *fg_cross_entropy(fg_tensor *logits, const int32_t *targets);
/* The LM head and the loss fused: cross_entropy(x @ wᵀ, targets) for x (..., C), w (V, C) and one
 * target per row of x — with softcap c > 0, cross_entropy(softcap(x @ wᵀ, c), targets); 0: none,
 * negative or infinite: FG_ERR_ARG — without holding the (rows, V) logits: rows go through in chunks of
 * chunk_rows rows (0, the default to use: about 16M logits and at least 256 rows a chunk), and the
 * gradients for a unit dloss are formed in the forward, chunk by chunk (only when grad mode is on
 * and x or w requires grad; the backward scales them by dloss). Returns the mean loss, shape (1),
 * as the composition does, with the same numbers (ops/cross_entropy.c says how exactly). CPU; on
 * other devices it is the composition fg_cross_entropy(fg_linear(x, w)). */
fg_tensor *fg_linear_cross_entropy(fg_tensor *x, fg_tensor *w, const int32_t *targets, double softcap,
                                   int64_t chunk_rows);

/* ---- dropout.c ---- */
/* Zeroes each element with probability p and scales the rest by 1/(1-p). Element k (C order) is
 * kept iff fg_philox_u32(seed, stream, k) >= fg_dropout_threshold(p): the mask is never stored;
 * the backward regenerates it. p == 0 returns x unchanged (retained). 0 <= p < 1. */
fg_tensor *fg_dropout(fg_tensor *x, double p, uint64_t seed, uint64_t stream);

/* ---- rmsnorm.c (CPU only; other devices: FG_ERR_DEVICE) ---- */
/* x (..., C), weight (C) or NULL -> (..., C): x_i / sqrt(mean_i x_i² + eps) * weight_i, over the
 * last dim, like torch.nn.functional.rms_norm. weight NULL is the parameter-free RMSNorm
 * (nanochat); with a weight it is Llama's. eps must be finite and > 0. Saves x and the per-row
 * 1/rms for the backward. QK-norm is this op applied to q and k, (B, H, T, D), over D: each head
 * normalized on its own (one weight of size D shared by the heads, or none); it has no op of its
 * own. */
fg_tensor *fg_rmsnorm(fg_tensor *x, fg_tensor *weight, double eps);

/* ---- rope.c (CPU only) ---- */
/* Rotary position embedding in Hugging Face Llama's layout ("rotate_half"): x (B, H, T, D), D
 * even -> (B, H, T, D), where the pair (x_i, x_{i+D/2}), i < D/2, of the token at position
 * p = pos0 + t is rotated by the angle p * theta^(-2i/D):
 *     out_i = x_i cos - x_{i+D/2} sin,   out_{i+D/2} = x_{i+D/2} cos + x_i sin
 * cos and sin computed in float64, then rounded to x's dtype. theta finite and > 0 (Llama:
 * 10000 or 500000), pos0 >= 0 (0 in training; the cache length when decoding). */
fg_tensor *fg_rope(fg_tensor *x, double theta, int64_t pos0);

/* ---- rope_qkv.c (CPU only) ----
 * The rotary embedding and the QK-norm of a packed projection in one pass, for fg_attention_qkv:
 * qkv (B, T, (H + 2 H_kv) D), each row [q heads | k heads | v heads] -> a new (B, T, same) tensor
 * whose q and k heads are rotated (rotary != 0) and then RMS-normalized over D (qk_norm), and whose
 * v heads are copied. It equals, bit for bit, slicing the heads out, permuting them to
 * (B, heads, T, D), fg_rope (rotary +1; for -1, fg_rope between two flips of the second half's
 * sign: the rotation by minus the angle, nanochat's convention), fg_rmsnorm(., NULL, eps), and
 * packing them back. Saves the cos/sin table, and with qk_norm the output and each head's 1/rms. */
typedef struct {
    int64_t n_head;     /* H */
    int64_t n_kv_heads; /* H_kv, 0 = H */
    int rotary;         /* 0 none, +1 Hugging Face Llama's rotate_half (fg_rope), -1 nanochat's */
    double theta;       /* rotary: finite, > 0 */
    int64_t pos0;       /* rotary: the position of t = 0, >= 0 */
    int qk_norm;        /* 0 or 1: the parameter-free RMSNorm over each q and k head */
    double eps;         /* qk_norm: finite, > 0 */
} fg_rope_qkv_opts;
/* New reference, or NULL on error: qkv not rank 3 or not float32/float64, a last dim that does not
 * split into H + 2 H_kv heads of one width D, D odd with rotary, options out of range, or a device
 * without the kernels (every device but the CPU). */
fg_tensor *fg_rope_qkv(fg_tensor *qkv, const fg_rope_qkv_opts *opts);

/* ---- activation.c (CPU only): the pointwise activations of Llama- and nanochat-style MLPs and
 * heads; each result has its inputs' shape ---- */
/* relu(x)², nanochat's MLP activation. */
fg_tensor *fg_relu2(fg_tensor *x);
/* SwiGLU's gate: silu(a) * b = a σ(a) b, with a = x W_gate, b = x W_up (Llama's MLP); a and b of
 * the same shape (no broadcasting). */
fg_tensor *fg_swiglu(fg_tensor *a, fg_tensor *b);
/* swiglu of the two halves of x's last dimension: x (..., 2I) = [gate, value] -> (..., I), the
 * numbers of fg_swiglu(x[..., :I], x[..., I:]) without copying either half. New reference, or NULL. */
fg_tensor *fg_swiglu_packed(fg_tensor *x);
/* The logit softcap: c * tanh(x / c), c finite and > 0 (nanochat: 15 on the final logits). */
fg_tensor *fg_softcap(fg_tensor *x, double c);

#ifdef __cplusplus
}
#endif
#endif /* FG_OPS_H */
