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

/* out = a + b elementwise (out may be a or b), in the elementwise kernel's bits. */
fg_status fg_flat_add(fg_tensor *out, const fg_tensor *a, const fg_tensor *b);

/* x[lo, hi) *= s (s rounded to the dtype); the rest of x is left alone. */
fg_status fg_flat_scale_range(fg_tensor *x, int64_t lo, int64_t hi, double s);

/* The blocks of the gradient norm's sum of squares on device d: *block(n) = B fixes the blocks
 * [kB, (k+1)B) of an (n) array, whose float64 sums, added in block order from 0, give the norm's
 * sum bit for bit. An error (FG_ERR_DEVICE) where the device's sum has no such blocks. */
fg_status fg_flat_norm_blocks(fg_device d, int64_t (**block)(int64_t n));

/* part[k - b0] = the float64 sum of squares of block k of x, for the blocks [b0, b1). */
fg_status fg_flat_sum_squares_blocks(const fg_tensor *x, int64_t b0, int64_t b1, double *part);

#ifdef __cplusplus
}
#endif
#endif /* FG_FLAT_H */
