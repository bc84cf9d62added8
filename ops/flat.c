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

fg_status fg_flat_optimizer_on(fg_device d, const char *op) {
    const fg_kernels *k = fg_kernels_for(d, op);
    if (!k) return fg_last_status();
    if (!k->optimizer.adamw || !k->optimizer.sum_squares || !k->optimizer.scale) return fg_op_no_kernel(op, k->device);
    return FG_OK;
}

fg_status fg_flat_sum_squares(const fg_tensor *x, double *out) {
    static const char op[] = "grad_norm";
    FG_TRY(fg_flat_optimizer_on(x->device, op));
    if (!fg_is_contiguous(x)) return fg_error(FG_ERR_ARG, "%s: the array must be contiguous", op);
    return fg_kernels_for(x->device, op)->optimizer.sum_squares(x->dtype, fg_data(x), fg_numel(x), out);
}

fg_status fg_flat_adamw(fg_tensor *p, const fg_tensor *g, double gscale, fg_tensor *m, fg_tensor *v, int64_t lo,
                        int n_spans, const fg_adamw_span *spans, double b1, double b2, double step_size,
                        double bc2_sqrt, double eps) {
    static const char op[] = "adamw";
    FG_TRY(fg_flat_optimizer_on(p->device, op));
    const int64_t n = fg_numel(m);
    if (p->device != g->device || p->device != m->device || p->device != v->device || p->dtype != g->dtype ||
        p->dtype != m->dtype || p->dtype != v->dtype || fg_numel(v) != n || fg_numel(g) != fg_numel(p) || lo < 0 ||
        lo + n > fg_numel(p) || !fg_is_contiguous(p) || !fg_is_contiguous(g) || !fg_is_contiguous(m) ||
        !fg_is_contiguous(v))
        return fg_error(FG_ERR_ARG, "adamw: %lld moments for the parameters [%lld, %lld) of %lld", (long long)n,
                        (long long)lo, (long long)(lo + n), (long long)fg_numel(p));
    const size_t off = (size_t)lo * fg_dtype_size(p->dtype);
    return fg_kernels_for(p->device, op)
        ->optimizer.adamw(p->dtype, (char *)fg_data(p) + off, (const char *)fg_data(g) + off, gscale, fg_data(m),
                          fg_data(v), n, n_spans, spans, b1, b2, step_size, bc2_sqrt, eps);
}

int64_t fg_flat_muon_work(int64_t rows, int64_t cols) {
    const int64_t k = rows < cols ? rows : cols;
    return 2 * rows * cols + 2 * k * k; /* X and its next iterate, A and B */
}

fg_status fg_flat_muon(fg_tensor *p, const fg_tensor *g, double gscale, int64_t off, int64_t rows, int64_t cols,
                       fg_tensor *buf, int64_t boff, const fg_muon_step *ms, fg_tensor *work) {
    static const char op[] = "muon";
    const fg_kernels *k = fg_kernels_for(p->device, op);
    if (!k) return fg_last_status();
    if (!k->optimizer.muon) return fg_op_no_kernel(op, k->device);
    const int64_t n = rows * cols;
    if (p->device != g->device || p->device != buf->device || p->device != work->device || p->dtype != g->dtype ||
        p->dtype != buf->dtype || p->dtype != work->dtype || fg_numel(g) != fg_numel(p) || rows < 1 || cols < 1 ||
        off < 0 || off + n > fg_numel(p) || boff < 0 || boff + n > fg_numel(buf) ||
        fg_numel(work) < fg_flat_muon_work(rows, cols) || !fg_is_contiguous(p) || !fg_is_contiguous(g) ||
        !fg_is_contiguous(buf) || !fg_is_contiguous(work))
        return fg_error(FG_ERR_ARG, "muon: a (%lld, %lld) matrix at %lld of %lld parameters, its buffer at %lld of %lld",
                        (long long)rows, (long long)cols, (long long)off, (long long)fg_numel(p), (long long)boff,
                        (long long)fg_numel(buf));
    if (ms->ns_steps < 0) return fg_error(FG_ERR_ARG, "muon: %d Newton-Schulz steps", ms->ns_steps);
    const size_t es = fg_dtype_size(p->dtype);
    return k->optimizer.muon(p->dtype, (char *)fg_data(p) + (size_t)off * es, (const char *)fg_data(g) + (size_t)off * es,
                             gscale, (char *)fg_data(buf) + (size_t)boff * es, rows, cols, ms, fg_data(work));
}
