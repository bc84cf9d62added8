/* flat.c — ops on flat arrays (see flat.h): the checks, then the device's kernel. */
#include "ops/flat.h"

#include "ops/kernels.h"
#include "ops/ops_internal.h"

static fg_status same_kind(const char *op, const fg_tensor *x, const fg_tensor *y) {
    if (x->device != y->device || x->dtype != y->dtype || fg_numel(x) != fg_numel(y) || !fg_is_contiguous(x) ||
        !fg_is_contiguous(y))
        return fg_error(FG_ERR_ARG, "%s: the arrays must be contiguous, of one dtype, device and length", op);
    return FG_OK;
}

fg_status fg_flat_add(fg_tensor *out, const fg_tensor *a, const fg_tensor *b) {
    static const char op[] = "grad_accum";
    FG_TRY(same_kind(op, out, a));
    FG_TRY(same_kind(op, out, b));
    const fg_kernels *k = fg_kernels_for(out->device, op);
    if (!k) return fg_last_status();
    if (!k->elementwise.forward) return fg_op_no_kernel(op, k->device);
    const int64_t n = fg_numel(out), s1 = 1;
    return k->elementwise.forward(FG_BINARY_ADD, out->dtype, fg_data(out), fg_data(a), &s1, fg_data(b), &s1, 1, &n);
}

fg_status fg_flat_scale_range(fg_tensor *x, int64_t lo, int64_t hi, double s) {
    static const char op[] = "grad_scale";
    if (lo < 0 || hi < lo || hi > fg_numel(x) || !fg_is_contiguous(x))
        return fg_error(FG_ERR_ARG, "%s: the range [%lld, %lld) of a contiguous array of %lld", op, (long long)lo,
                        (long long)hi, (long long)fg_numel(x));
    const fg_kernels *k = fg_kernels_for(x->device, op);
    if (!k) return fg_last_status();
    if (!k->optimizer.scale) return fg_op_no_kernel(op, k->device);
    const size_t off = (size_t)lo * fg_dtype_size(x->dtype);
    return k->optimizer.scale(x->dtype, (char *)fg_data(x) + off, hi - lo, s);
}

fg_status fg_flat_norm_blocks(fg_device d, int64_t (**block)(int64_t n)) {
    const fg_kernels *k = fg_kernels_for(d, "zero");
    if (!k) return fg_last_status();
    if (!k->optimizer.norm_block || !k->optimizer.sum_squares_blocks)
        return fg_error(FG_ERR_DEVICE, "--zero 1: the %s kernels have no blockwise sum of squares",
                        d == FG_CPU ? "CPU" : k->device);
    *block = k->optimizer.norm_block;
    return FG_OK;
}

fg_status fg_flat_sum_squares_blocks(const fg_tensor *x, int64_t b0, int64_t b1, double *part) {
    static const char op[] = "grad_norm";
    if (!fg_is_contiguous(x)) return fg_error(FG_ERR_ARG, "%s: the array must be contiguous", op);
    const fg_kernels *k = fg_kernels_for(x->device, op);
    if (!k) return fg_last_status();
    if (!k->optimizer.sum_squares_blocks) return fg_op_no_kernel(op, k->device);
    return k->optimizer.sum_squares_blocks(x->dtype, fg_data(x), fg_numel(x), b0, b1, part);
}
