/* flat.h — ops on the flat arrays of a model (parameters, gradients), outside autograd: what the
 * trainer (train/trainer.c) does between backward passes and the optimizer, through the arrays'
 * device kernels (ops/kernels.h), with the checks and the errors of an op. Each returns FG_OK, or
 * an error (fg_last_error()) and leaves its output untouched where it could not run.
 *
 * Legend: x, a, b, out are contiguous (n) arrays of one dtype on one device.
 */
#ifndef FG_FLAT_H
#define FG_FLAT_H

#include <stdint.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One span of AdamW's update: the elements [offset, offset + count) of the flat arrays, with the
 * span's decay factor (1 - lr * weight_decay where the parameter decays, else 1). */
typedef struct {
    int64_t offset, count;
    double decay_factor;
} fg_adamw_span;

/* The scalars of one Muon update of one matrix (fg_flat_muon). */
typedef struct {
    double momentum;     /* mu */
    int nesterov;        /* 1: Nesterov's look-ahead */
    int ns_steps;        /* Newton–Schulz iterations */
    double a, b, c;      /* the iteration's coefficients */
    double eps;          /* the floor of the norm the iteration starts from */
    double decay_factor; /* 1 - lr · weight_decay (the unadjusted lr) */
    double lr;           /* the adjusted learning rate the orthogonalized update is applied at */
} fg_muon_step;

/* out = a + b elementwise (out may be a or b), in the elementwise kernel's bits. */
fg_status fg_flat_add(fg_tensor *out, const fg_tensor *a, const fg_tensor *b);

/* *out = sum of x[i]^2 in float64, in an order that depends on n only (the same bits on every
 * device with that order and for any thread count). */
fg_status fg_flat_sum_squares(const fg_tensor *x, double *out);

/* x[lo, hi) *= s (s rounded to the dtype); the rest of x is left alone. */
fg_status fg_flat_scale_range(fg_tensor *x, int64_t lo, int64_t hi, double s);

/* The blocks of the gradient norm's sum of squares on device d: *block(n) = B fixes the blocks
 * [kB, (k+1)B) of an (n) array, whose float64 sums, added in block order from 0, give the norm's
 * sum bit for bit. An error (FG_ERR_DEVICE) where the device's sum has no such blocks. */
fg_status fg_flat_norm_blocks(fg_device d, int64_t (**block)(int64_t n));

/* part[k - b0] = the float64 sum of squares of block k of x, for the blocks [b0, b1). */
fg_status fg_flat_sum_squares_blocks(const fg_tensor *x, int64_t b0, int64_t b1, double *part);

/* AdamW on the spans of the (n) arrays p, g, m, v, each span's elements [offset, offset + count)
 * from element lo of p and g and from 0 of m and v (m, v hold n = their length elements), the
 * gradient taken as g · gscale (a clipping coefficient; 1: g as it is; g is only read):
 *     m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g²;
 *     p = p * decay_factor - step_size * m / (sqrt(v) / bc2_sqrt + eps)
 * each constant rounded to the dtype, in that order of operations (train/adamw.h has the math);
 * the same bits as scaling g by gscale first. */
fg_status fg_flat_adamw(fg_tensor *p, const fg_tensor *g, double gscale, fg_tensor *m, fg_tensor *v, int64_t lo,
                        int n_spans, const fg_adamw_span *spans, double b1, double b2, double step_size,
                        double bc2_sqrt, double eps);

/* Muon (torch.optim.Muon's single-tensor update) on one (rows, cols) matrix p of a flat array,
 * the elements [off, off + rows·cols) of p and g, with its momentum buffer the elements
 * [boff, boff + rows·cols) of buf, the gradient read as g · gscale (g is only read):
 *     buf = lerp(buf, g, 1 - mu)                        (an average of the gradients)
 *     u   = nesterov ? lerp(g, buf, mu) : buf
 *     X   = u / max(‖u‖_F, eps), transposed when rows > cols, so X is (k, n) with k <= n
 *     ns_steps times:  A = X Xᵀ;  B = b A + c A A;  X = a X + B X      (Newton–Schulz, quintic)
 *     p   = p · decay_factor − lr · X (transposed back)
 * with lerp(x, y, w) = x + w (y − x) for w < 0.5, else y − (y − x)(1 − w) (PyTorch's). The norm is
 * summed in float64 in index order; the products are the device's GEMM. work is scratch of at
 * least fg_flat_muon_work(rows, cols) elements of p's dtype, on p's device. */
int64_t fg_flat_muon_work(int64_t rows, int64_t cols);
fg_status fg_flat_muon(fg_tensor *p, const fg_tensor *g, double gscale, int64_t off, int64_t rows, int64_t cols,
                       fg_tensor *buf, int64_t boff, const fg_muon_step *ms, fg_tensor *work);

/* FG_OK when device d has the optimizer's loops (AdamW, the sum of squares, scaling), else the
 * error of an op that d does not support, named `op`. */
fg_status fg_flat_optimizer_on(fg_device d, const char *op);

#ifdef __cplusplus
}
#endif
#endif /* FG_FLAT_H */
