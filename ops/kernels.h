/* kernels.h — the per-device kernel table: what a device gives the ops.
 *
 * Every op has ONE shell, in ops/<family>.c, for every device: it checks the arguments, allocates
 * the outputs on the inputs' device, records the autograd node with its typed state, and in the
 * backward unpacks that state. The arithmetic is a kernel reached through the table of the
 * tensors' device (the CPU's kernels in ops/cpu/<family>.c, CUDA's in cuda/<family>.cu):
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
 *
 * Adding an op family edits these places, besides its tests:
 *   1. ops/ops.h            its public functions;
 *   2. ops/kernels.h        its kernels' list FG_KERNELS_<FAMILY> (below) and its line in
 *                           FG_KERNEL_FAMILIES;
 *   3. ops/<family>.c       the shell: checks, allocation, the autograd node, the saved state;
 *   4. ops/cpu/<family>.c   the CPU's kernels, fg_cpu_<family>_<name> (no tensors, no autograd:
 *                           tests/lint_layers.sh checks that ops/cpu/ includes nothing of autograd/
 *                           and that no shell in ops/ defines an fg_cpu_ function);
 *   5. cuda/<family>.cu     the CUDA kernels, fg_cu_<family>_<name> (or `cpu` in the list's entry,
 *                           and the CUDA table holds NULL);
 * and, where they apply: ops/infer.h and ops/infer.c for a forward-only entry on raw buffers, and
 * the Makefile's VALGRIND_SUITES for its test suite. The table types, both devices' declarations
 * and both tables are generated from the list; the Makefile picks new files up by itself.
 */
#ifndef FG_KERNELS_H
#define FG_KERNELS_H

#include <stdint.h>

#include "ops/attention_kernels.h"
#include "ops/device.h"
#include "ops/flat.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the one list ----
 * Every member of the table comes from the lists below, one per op family, gathered in
 * FG_KERNEL_FAMILIES (the order of ops/ops.h). An entry
 *     FN(family, name, where, ret, params)
 * is the member `name` of fg_<family>_kernels, of type ret (*)params, which the CPU defines as
 * fg_cpu_<family>_<name> (ops/cpu/<family>.c) and CUDA as fg_cu_<family>_<name> (cuda/<family>.cu);
 * `where` is `all`, or `cpu` when only the CPU has it (NULL in the CUDA table). An entry
 *     VAL(family, type, name, cpu_value, cuda_value)
 * is a plain member with each device's value. From these lists come the table's types (here), both
 * devices' declarations (ops/kernels_cpu.h, cuda/kernels_cuda.h) and both tables (ops/kernels.c,
 * cuda/kernels.cu); none of those four files changes when an op is added. */

/* ---- matmul (ops/matmul.c; the CPU's kernels in ops/cpu/matmul.c) ----
 * gemm: row-major GEMM, like cblas_?gemm(CblasRowMajor, ...), repeated over `batch` matrices that
 * are sA, sB, sC elements apart (0 = the same matrix for every batch):
 *     C (M, N) = alpha · op(A) op(B) + beta · C,     op(X) = X, or Xᵀ when tX is non-zero
 * A is (M, K) after op, stored with row stride lda (likewise B (K, N), ldb; C, ldc). With bias
 * (N) non-NULL, bias takes the place of beta · C: C = alpha · op(A) op(B) + bias in every row.
 * When sC is 0 and batch > 1, the batches add into the one C in batch order (beta, or the bias,
 * applies to the first). K = 0 is an empty sum (C = beta · C, or bias).
 * colsum: linear's bias gradient: db (N) += Σ_r dout (R, N), each column summed in a fixed order. */
#define FG_KERNELS_MATMUL(FN, VAL)                                                                                     \
    FN(matmul, gemm, all, fg_status,                                                                                   \
       (fg_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A, int64_t lda,        \
        int64_t sA, const void *B, int64_t ldb, int64_t sB, double beta, const void *bias, void *C, int64_t ldc,       \
        int64_t sC, int64_t batch))                                                                                    \
    FN(matmul, colsum, all, fg_status, (fg_dtype dt, void *db, const void *dout, int64_t R, int64_t N))

/* ---- elementwise (ops/elementwise.c; the CPU's kernels in ops/cpu/elementwise.c) ----
 * NumPy broadcasting over out's shape (nd dims, outermost first): out is contiguous, and an input
 * is read through its broadcast strides (nd element strides, 0 along a dim where the input is
 * missing or has size 1). */
typedef enum { FG_BINARY_ADD, FG_BINARY_SUB, FG_BINARY_MUL, FG_BINARY_DIV } fg_binary_op;
/* The backward rules, g += rule(d, p, q) with d = dout and p, q two of the forward's operands:
 *   add: da += d, db += d      sub: da += d, db -= d      mul: da += d·b, db += d·a
 *   div: da += d / b, db -= d·a / b²                                                            */
typedef enum {
    FG_BINARY_RULE_PLUS,  /* d                 (add: a and b; sub: a)            */
    FG_BINARY_RULE_MINUS, /* -d                (sub: b)                          */
    FG_BINARY_RULE_TIMES, /* d · p             (mul: p = the other input)        */
    FG_BINARY_RULE_OVER,  /* d / p             (div, for a: p = b)               */
    FG_BINARY_RULE_QUOT,  /* -d · q / (p · p)  (div, for b: p = b, q = a)        */
} fg_binary_rule;
/* forward: out = a ∘ b; a and b read through sa, sb.
 * backward: g += rule(dout, p, q), summed over the dims of out along which g's input was
 *   stretched. g is contiguous with the input's shape (g_nd, g_shape); dout is contiguous with
 *   out's shape; p and q are read through sp, sq. Each element of g is summed in a fixed order.
 * scalar: out = a + s (op FG_BINARY_ADD) or a · s (FG_BINARY_MUL); a (nd, shape) read through its
 *   strides sa; float32 computes with (float)s */
#define FG_KERNELS_ELEMENTWISE(FN, VAL)                                                                                \
    FN(elementwise, forward, all, fg_status,                                                                           \
       (fg_binary_op op, fg_dtype dt, void *out, const void *a, const int64_t *sa, const void *b, const int64_t *sb,   \
        int nd, const int64_t *shape))                                                                                 \
    FN(elementwise, backward, all, fg_status,                                                                          \
       (fg_binary_rule rule, fg_dtype dt, void *g, int g_nd, const int64_t *g_shape, const void *dout, const void *p,  \
        const int64_t *sp, const void *q, const int64_t *sq, int nd, const int64_t *shape))                            \
    FN(elementwise, scalar, all, fg_status,                                                                            \
       (fg_binary_op op, fg_dtype dt, void *out, const void *a, const int64_t *sa, int nd, const int64_t *shape,       \
        double s))

/* ---- reduce (ops/reduce.c; the CPU's kernels in ops/cpu/reduce.c) ----
 * Sums accumulate in float64 for both dtypes. Over an axis, x is contiguous and seen as (O, N, In)
 * around the axis (O = the dims before it, N = its size, In = the dims after it); out is (O, In).
 * (Not `I`: <complex.h>, which some BLAS headers include, defines it.)
 *   axis_forward   out (O, In) = scale · Σ_n x (O, N, In)
 *   axis_backward  dx (O, N, In) += scale · dout (O, In), the same for every n
 *   all_forward    out (1) = scale · Σ x, over every element of x (nd, shape) read through its strides
 *   all_backward   dx (n) += scale · dout[0] */
#define FG_KERNELS_REDUCE(FN, VAL)                                                                                     \
    FN(reduce, axis_forward, all, fg_status,                                                                           \
       (fg_dtype dt, void *out, const void *x, int64_t O, int64_t N, int64_t In, double scale))                        \
    FN(reduce, axis_backward, all, fg_status,                                                                          \
       (fg_dtype dt, void *dx, const void *dout, int64_t O, int64_t N, int64_t In, double scale))                      \
    FN(reduce, all_forward, all, fg_status,                                                                            \
       (fg_dtype dt, void *out, const void *x, int nd, const int64_t *shape, const int64_t *strides, double scale))    \
    FN(reduce, all_backward, all, fg_status, (fg_dtype dt, void *dx, const void *dout, int64_t n, double scale))

/* ---- memory (ops/ops_common.c; the CPU's kernel in ops/cpu/elementwise.c): the accumulation behind
 * the shape ops' backward ----
 * add_into: dst += alpha · src over shape (nd dims), each read through its own element strides
 * (dst must not reach one element twice); float32 scales by (float)alpha */
#define FG_KERNELS_MEMORY(FN, VAL)                                                                                     \
    FN(memory, add_into, all, fg_status,                                                                               \
       (fg_dtype dt, void *dst, const int64_t *dst_strides, const void *src, const int64_t *src_strides, int nd,       \
        const int64_t *shape, double alpha))

/* ---- embedding (ops/embedding.c; the CPU's kernels in ops/cpu/embedding.c) ----
 * weight is (V, C) with rows ws elements apart (unit stride along C); idx holds n int32 ids in
 * HOST memory, each in [0, V) (the shell has checked them; a device kernel stages what it needs).
 *   forward   out (n, C): out[r, :] = weight[idx[r], :]
 *   backward  dweight (V, C), contiguous, += dout (n, C) scattered by idx: the rows of one id are
 *             added in position order r = 0, 1, ... */
#define FG_KERNELS_EMBEDDING(FN, VAL)                                                                                  \
    FN(embedding, forward, all, fg_status,                                                                             \
       (fg_dtype dt, void *out, const void *weight, int64_t ws, const int32_t *idx, int64_t n, int64_t V, int64_t C))  \
    FN(embedding, backward, all, fg_status,                                                                            \
       (fg_dtype dt, void *dweight, const void *dout, const int32_t *idx, int64_t n, int64_t V, int64_t C))

/* ---- layernorm (ops/layernorm.c; the CPU's kernels in ops/cpu/layernorm.c) ----
 * x is (R, C); w, b (C) or NULL (1 and 0); saved: mean (R), rstd (R) = 1/sqrt(var + eps).
 * The backward adds into dx, dw, db; any of them NULL when not wanted. */
#define FG_KERNELS_LAYERNORM(FN, VAL)                                                                                  \
    FN(layernorm, forward, all, fg_status,                                                                             \
       (fg_dtype dt, void *out, void *mean, void *rstd, const void *x, const void *w, const void *b, int64_t R,        \
        int64_t C, double eps))                                                                                        \
    FN(layernorm, backward, all, fg_status,                                                                            \
       (fg_dtype dt, void *dx, void *dw, void *db, const void *dout, const void *x, const void *mean,                  \
        const void *rstd, const void *w, int64_t R, int64_t C))

/* ---- gelu (ops/gelu.c; the CPU's kernels in ops/cpu/gelu.c) ----
 * x, out, dout, dx are (n), contiguous: out = gelu(x); dx = dout * gelu'(x) (add 0: dx is not read)
 * or dx += dout * gelu'(x) (add 1). */
#define FG_KERNELS_GELU(FN, VAL)                                                                                       \
    FN(gelu, forward, all, fg_status, (fg_dtype dt, void *out, const void *x, int64_t n))                              \
    FN(gelu, backward, all, fg_status, (fg_dtype dt, void *dx, const void *dout, const void *x, int64_t n, int add))

/* ---- softmax (ops/softmax.c; the CPU's kernels in ops/cpu/softmax.c) ----
 * x, y = softmax(x) over each row, dy, dx are (R, C); a row of all -inf gives y = 0.
 * dx += y * (dy - sum_j dy_j y_j), row by row. */
#define FG_KERNELS_SOFTMAX(FN, VAL)                                                                                    \
    FN(softmax, forward, all, fg_status, (fg_dtype dt, void *y, const void *x, int64_t R, int64_t C))                  \
    FN(softmax, backward, all, fg_status, (fg_dtype dt, void *dx, const void *dy, const void *y, int64_t R, int64_t C))

/* ---- cross_entropy (ops/cross_entropy.c; the CPU's kernels in ops/cpu/cross_entropy.c) ----
 * x is (R, V) logits; targets (R) int32 class ids in [0, V) or -1 (row ignored), in the device's
 * memory; count = the rows whose target is not -1. forward writes lse (R) (0 for ignored rows) and
 * loss (1) = sum_r (lse_r - x_r,t_r) / count (0 when count is 0). backward, for count > 0 and
 * dloss (1) in the device's memory: dx_rj += dloss / count * (exp(x_rj - lse_r) - [j == t_r]). */
#define FG_KERNELS_CROSS_ENTROPY(FN, VAL)                                                                              \
    FN(cross_entropy, forward, all, fg_status,                                                                         \
       (fg_dtype dt, void *loss, void *lse, const void *x, const int32_t *targets, int64_t R, int64_t V,               \
        int64_t count))                                                                                                \
    FN(cross_entropy, backward, all, fg_status,                                                                        \
       (fg_dtype dt, void *dx, const void *dloss, const void *x, const void *lse, const int32_t *targets, int64_t R,   \
        int64_t V, int64_t count))

/* ---- dropout (ops/dropout.c; the CPU's kernels in ops/cpu/dropout.c) ----
 * x, out, dout, dx are (n), contiguous; k is the flat index, 0 <= p < 1:
 *   keep(k) = fg_philox_u32(seed, stream, k) >= fg_dropout_threshold(p)   (tensor/philox.h)
 *   forward: out[k] = keep(k) ? x[k] * scale : 0      backward: dx[k] += keep(k) ? dout[k] * scale : 0
 * with scale = 1 / (1 - p) rounded to the dtype. */
#define FG_KERNELS_DROPOUT(FN, VAL)                                                                                    \
    FN(dropout, forward, all, fg_status,                                                                               \
       (fg_dtype dt, void *out, const void *x, int64_t n, uint64_t seed, uint64_t stream, double p))                   \
    FN(dropout, backward, all, fg_status,                                                                              \
       (fg_dtype dt, void *dx, const void *dout, int64_t n, uint64_t seed, uint64_t stream, double p))

/* ---- optimizer (ops/cpu/adamw.c and ops/cpu/muon.c; train/adamw.c and train/muon.c use them): not
 * an op, the flat-array loops of train/'s optimizers ----
 * Flat arrays of one dtype: p (parameters), g (gradients), m, v (AdamW's moments), each (n).
 * adamw updates, for each span, the elements [offset, offset + count) (spans do not overlap;
 * elements in no span are left alone), with the span's decay factor df and the gradient read as
 * g = g_stored · gscale (rounded to the dtype: the bits of scaling g first; g itself is not written):
 *     m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g²;
 *     p = p * df - step_size * m / (sqrt(v) / bc2_sqrt + eps)
 * each constant rounded to the dtype, in that order of operations (train/adamw.h has the math).
 * sum_squares: *out = sum_i x[i]² in float64, in an order that depends on n only; it waits for the
 * result. scale: x[i] *= s, with s rounded to the dtype.
 * The CPU's order (ops/cpu/adamw.c): norm_block(n) = B fixes blocks [kB, (k+1)B) of the array (the
 * last one shorter); sum_squares adds the blocks' float64 sums in block order, starting from 0.
 * sum_squares_blocks writes part[k - b0] = block k's sum for the blocks [b0, b1) of the whole (n)
 * array x, so that adding every block's part in block order gives sum_squares's bits (a ZeRO-1
 * rank sums its own blocks, train/trainer.c). Both are NULL on devices without that order.
 * muon: one Muon update of the (rows, cols) matrix p from its gradient g · gscale and momentum
 * buffer buf (ops/flat.h, fg_flat_muon, has the math); work holds fg_flat_muon_work(rows, cols)
 * elements of scratch. The CPU's Newton–Schulz products run on its GEMM (ops/cpu/matmul.c), whose
 * bits do not depend on the thread count. */
/* fg_adamw_span, fg_muon_step: ops/flat.h */

#define FG_KERNELS_OPTIMIZER(FN, VAL)                                                                                  \
    FN(optimizer, adamw, all, fg_status,                                                                               \
       (fg_dtype dt, void *p, const void *g, double gscale, void *m, void *v, int64_t n, int n_spans,                  \
        const fg_adamw_span *spans, double b1, double b2, double step_size, double bc2_sqrt, double eps))              \
    FN(optimizer, sum_squares, all, fg_status, (fg_dtype dt, const void *x, int64_t n, double *out))                   \
    FN(optimizer, scale, all, fg_status, (fg_dtype dt, void *x, int64_t n, double s))                                  \
    FN(optimizer, norm_block, cpu, int64_t, (int64_t n))                                                               \
    FN(optimizer, sum_squares_blocks, cpu, fg_status,                                                                  \
       (fg_dtype dt, const void *x, int64_t n, int64_t b0, int64_t b1, double *part))                                  \
    FN(optimizer, muon, cpu, fg_status,                                                                                \
       (fg_dtype dt, void *p, const void *g, double gscale, void *buf, int64_t rows, int64_t cols,                     \
        const fg_muon_step *ms, void *work))

/* ---- attention (ops/attention.c; the entry ops/attention_entry.c; the CPU's kernels in
 * ops/cpu/attention.c) ----
 * The contract of the CPU kernels of ops/attention_kernels.h on the device's pointers: `aux` is
 * the naive P buffer (B, H, Nq, Nk) for FG_ATTN_NAIVE and lse_lo (B, H, Nq) or NULL for
 * FG_ATTN_FLASH; the naive backward gets lse NULL (it reads P); the backward adds into dq, dk, dv
 * (any NULL) — or, with pr->rows.write_grads, writes them. Arrays are where pr->rows says (all
 * zero: contiguous), and with pr->varlen they hold packed documents (fg_attn_varlen). `caps` lists
 * the built-in variants the kernels implement (FG_ATTN_CAP_*), `layouts` the array layouts beyond
 * contiguous ones they take (FG_ATTN_CAP_ROWS, FG_ATTN_CAP_VARLEN; float32 and float64); the entry
 * refuses the rest on that device (fg_attn_check_caps), and always refuses user callbacks off the
 * CPU. `caps_bf16`
 * is the same for bfloat16 q, k, v (dt FG_BF16), FG_ATTN_CAP_BF16 set when the device takes them
 * at all: then q, k, v, dout, o, dq, dk, dv are bfloat16 and lse float32, aux is NULL, the impl is
 * flash (the shell refuses naive), and the backward adds into dq, dk, dv with one rounding each. With
 * FG_ATTN_CAP_ALIBI, pr->var.alibi_slopes is a HOST pointer (H doubles) or NULL (standard slopes).
 * The entry has checked the problem (fg_attn_problem_init, fg_attn_problem_check_dtype, the
 * varlen offsets) and the caps before it calls a kernel: a device's kernels check only their own
 * limits, and never call back into the entry. */
#define FG_KERNELS_ATTENTION(FN, VAL)                                                                                  \
    FN(attention, forward, all, fg_status,                                                                             \
       (fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux, const void *q, const void *k, const void *v,    \
        const fg_attn_problem *pr))                                                                                    \
    FN(attention, backward, all, fg_status,                                                                            \
       (fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv, const void *dout, const void *q, const void *k,  \
        const void *v, const void *o, const void *lse, const void *aux, const fg_attn_problem *pr))                    \
    VAL(attention, unsigned, caps, FG_ATTN_CAP_ALL | FG_ATTN_CAP_CAUSAL_TOP_LEFT, FG_ATTN_CAP_ALL)                 \
    VAL(attention, unsigned, layouts, FG_ATTN_CAP_ROWS | FG_ATTN_CAP_VARLEN, 0)                                        \
    VAL(attention, unsigned, caps_bf16, 0, FG_ATTN_CAPS_BF16_CUDA)

/* ---- rmsnorm (ops/rmsnorm.c; the CPU's kernels in ops/cpu/rmsnorm.c; CPU only) ----
 * x is (R, C); w (C) or NULL (parameter-free: 1); saved: rstd (R) = 1/sqrt(mean_i x_i² + eps).
 *   forward   out_i = x_i * rstd * w_i
 *   backward  dx (R, C), dw (C) += ...; either NULL when not wanted. */
#define FG_KERNELS_RMSNORM(FN, VAL)                                                                                    \
    FN(rmsnorm, forward, cpu, fg_status,                                                                               \
       (fg_dtype dt, void *out, void *rstd, const void *x, const void *w, int64_t R, int64_t C, double eps))           \
    FN(rmsnorm, backward, cpu, fg_status,                                                                              \
       (fg_dtype dt, void *dx, void *dw, const void *dout, const void *x, const void *rstd, const void *w, int64_t R,  \
        int64_t C))

/* ---- rope (ops/rope.c; the CPU's kernels in ops/cpu/rope.c; CPU only) ----
 * x, out, dout, dx are (B, H, T, D), contiguous, D even; token t is at position pos0 + t. The
 * angles, cos and sin are computed in float64 and rounded to the dtype:
 *   inv_freq_i = theta^(-2i / D),  a_ti = (pos0 + t) * inv_freq_i   (i < D/2)
 *   forward   out_i = x_i cos a - x_{i+D/2} sin a;  out_{i+D/2} = x_{i+D/2} cos a + x_i sin a
 *   backward  dx += the transposed rotation of dout (the same with sin a negated) */
#define FG_KERNELS_ROPE(FN, VAL)                                                                                       \
    FN(rope, forward, cpu, fg_status,                                                                                  \
       (fg_dtype dt, void *out, const void *x, int64_t B, int64_t H, int64_t T, int64_t D, int64_t pos0,               \
        double theta))                                                                                                 \
    FN(rope, backward, cpu, fg_status,                                                                                 \
       (fg_dtype dt, void *dx, const void *dout, int64_t B, int64_t H, int64_t T, int64_t D, int64_t pos0,             \
        double theta))

/* ---- rope_qkv (ops/rope_qkv.c; the CPU's kernels in ops/cpu/rope_qkv.c; CPU only) ----
 * The rotary embedding and the QK-norm on a packed projection. x, out, dout, dx are (B, T, W),
 * W = (H + 2K) D, each row [H q heads | K k heads | K v heads] of D (even when rot != 0); token t
 * is at position pos0 + t. On each q and k head, with s = rot (+1: fg_rope's rotation; -1: the
 * rotation by minus the angle; 0: none) and the angles of fg_rope's entry above:
 *   forward   y_i = h_i cos - h_{i+D/2} s sin;  y_{i+D/2} = h_{i+D/2} cos + h_i s sin
 *             out = y * rstd, rstd = 1/sqrt(mean_i y_i² + eps) when norm (else out = y); v heads copied
 *             writes cs (T, D/2, 2) (cos, sin; rot != 0) and rstd (B, T, H + K) (norm), saved
 *   backward  dx = rmsnorm's and the rotation's transposes applied to dout (out: the forward's
 *             output), added to dx when add, else written; v heads: dout */
#define FG_KERNELS_ROPE_QKV(FN, VAL)                                                                                   \
    FN(rope_qkv, forward, cpu, fg_status,                                                                              \
       (fg_dtype dt, void *out, void *rstd, void *cs, const void *x, int64_t B, int64_t T, int64_t H, int64_t K,       \
        int64_t D, int rot, double theta, int64_t pos0, int norm, double eps))                                         \
    FN(rope_qkv, backward, cpu, fg_status,                                                                             \
       (fg_dtype dt, void *dx, int add, const void *dout, const void *out, const void *rstd, const void *cs,           \
        int64_t B, int64_t T, int64_t H, int64_t K, int64_t D, int rot, int norm))

/* ---- activation (ops/activation.c; the CPU's kernels in ops/cpu/activation.c; CPU only) ----
 * The pointwise activations of Llama- and nanochat-style models. Every array is (n), contiguous;
 * backward outputs are added to (NULL: not wanted).
 *   relu2:   out = relu(x)²                    dx += dout * 2 relu(x)
 *   swiglu:  out = silu(a) * b                 da += dout * b * silu'(a);  db += dout * silu(a)
 *            silu(a) = a σ(a),  silu'(a) = σ(a) (1 + a (1 - σ(a)))
 *   swiglu_rows: the same on x (R, 2n) whose row r holds a = x[r, :n] then b = x[r, n:] (a gate|up
 *            projection's output); out (R, n); dx (R, 2n) takes da and db in those places
 *   softcap: out = c tanh(x / c), c > 0        dx += dout * (1 - tanh²(x / c)) */
#define FG_KERNELS_ACTIVATION(FN, VAL)                                                                                 \
    FN(activation, relu2_forward, cpu, fg_status, (fg_dtype dt, void *out, const void *x, int64_t n))                  \
    FN(activation, relu2_backward, cpu, fg_status,                                                                     \
       (fg_dtype dt, void *dx, const void *dout, const void *x, int64_t n))                                            \
    FN(activation, swiglu_forward, cpu, fg_status, (fg_dtype dt, void *out, const void *a, const void *b, int64_t n))  \
    FN(activation, swiglu_backward, cpu, fg_status,                                                                    \
       (fg_dtype dt, void *da, void *db, const void *dout, const void *a, const void *b, int64_t n))                   \
    FN(activation, swiglu_rows_forward, cpu, fg_status, (fg_dtype dt, void *out, const void *x, int64_t R, int64_t n)) \
    FN(activation, swiglu_rows_backward, cpu, fg_status,                                                               \
       (fg_dtype dt, void *dx, const void *dout, const void *x, int64_t R, int64_t n))                                 \
    FN(activation, softcap_forward, cpu, fg_status, (fg_dtype dt, void *out, const void *x, int64_t n, double c))      \
    FN(activation, softcap_backward, cpu, fg_status,                                                                   \
       (fg_dtype dt, void *dx, const void *dout, const void *x, int64_t n, double c))

/* The families: the table's members, in this order. */
#define FG_KERNEL_FAMILIES(FAM)                                                                                        \
    FAM(matmul, FG_KERNELS_MATMUL)                                                                                     \
    FAM(elementwise, FG_KERNELS_ELEMENTWISE)                                                                           \
    FAM(reduce, FG_KERNELS_REDUCE)                                                                                     \
    FAM(memory, FG_KERNELS_MEMORY)                                                                                     \
    FAM(embedding, FG_KERNELS_EMBEDDING)                                                                               \
    FAM(layernorm, FG_KERNELS_LAYERNORM)                                                                               \
    FAM(gelu, FG_KERNELS_GELU)                                                                                         \
    FAM(softmax, FG_KERNELS_SOFTMAX)                                                                                   \
    FAM(cross_entropy, FG_KERNELS_CROSS_ENTROPY)                                                                       \
    FAM(dropout, FG_KERNELS_DROPOUT)                                                                                   \
    FAM(rmsnorm, FG_KERNELS_RMSNORM)                                                                                   \
    FAM(rope, FG_KERNELS_ROPE)                                                                                         \
    FAM(rope_qkv, FG_KERNELS_ROPE_QKV)                                                                                 \
    FAM(activation, FG_KERNELS_ACTIVATION)                                                                             \
    FAM(optimizer, FG_KERNELS_OPTIMIZER)                                                                               \
    FAM(attention, FG_KERNELS_ATTENTION)

/* The types: fg_<family>_kernels, one function pointer per FN entry and one field per VAL entry;
 * fg_kernels holds one of each, named after its family. */
#define FG_KERNEL_MEMBER_(family, name, where, ret, params) ret(*name) params;
#define FG_KERNEL_VALUE_(family, type, name, cpu_value, cuda_value) type name;
#define FG_KERNEL_TYPE_(family, LIST)                                                                                  \
    typedef struct {                                                                                                   \
        LIST(FG_KERNEL_MEMBER_, FG_KERNEL_VALUE_)                                                                      \
    } fg_##family##_kernels;
FG_KERNEL_FAMILIES(FG_KERNEL_TYPE_)

#define FG_KERNEL_FIELD_(family, LIST) fg_##family##_kernels family;
typedef struct fg_kernels {
    const char *device; /* "cpu", "cuda": for messages */
    FG_KERNEL_FAMILIES(FG_KERNEL_FIELD_)
} fg_kernels;

/* The table of device d, or NULL with FG_ERR_DEVICE naming `op` when d has none (a build without
 * that device, or a device not started: see fg_device_start). */
const fg_kernels *fg_kernels_for(fg_device d, const char *op);

/* fg_device_start, fg_device_built: ops/device.h. */

/* For device code: make `k` (static storage) the table of device d. */
void fg_register_kernels(fg_device d, const fg_kernels *k);

#ifdef __cplusplus
}
#endif
#endif /* FG_KERNELS_H */
