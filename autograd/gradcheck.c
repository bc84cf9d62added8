/* gradcheck.c — analytic gradients against central finite differences (see gradcheck.h). */
#include "autograd/gradcheck.h"

#include <math.h>
#include <stdlib.h>

/* loss = sum_k R[k] * out[k], computed in double without recording a graph. */
static fg_status weighted_loss(fg_gradcheck_fn fn, fg_tensor *const *inputs, int n, void *user, const fg_tensor *R,
                               double *loss) {
    fg_no_grad_enter();
    fg_tensor *out = fn(inputs, n, user);
    fg_no_grad_exit();
    if (!out)
        return fg_last_status() != FG_OK ? fg_last_status() : fg_error(FG_ERR_STATE, "gradcheck: fn returned NULL");
    if (fg_numel(out) != fg_numel(R)) {
        fg_release(out);
        return fg_error(FG_ERR_SHAPE, "gradcheck: the output changed size between calls");
    }
    double s = 0;
    int64_t m = fg_numel(out);
    for (int64_t k = 0; k < m; k++) s += fg_get(R, k) * fg_get(out, k);
    fg_release(out);
    *loss = s;
    return FG_OK;
}

fg_status fg_gradcheck(fg_gradcheck_fn fn, fg_tensor *const *inputs, int n, void *user, const fg_gradcheck_opts *opts,
                       fg_gradcheck_report *rep) {
    double eps = opts && opts->eps > 0 ? opts->eps : 1e-6;
    double atol = opts && opts->atol > 0 ? opts->atol : 1e-7;
    double rtol = opts && opts->rtol > 0 ? opts->rtol : 1e-5;
    uint64_t seed = opts ? opts->seed : 0;
    *rep = (fg_gradcheck_report){.passed = 1, .worst_input = -1};
    double worst_score = 0;
    for (int i = 0; i < n; i++) {
        if (!inputs[i]) continue;
        if (inputs[i]->dtype != FG_F64 || inputs[i]->device != FG_CPU)
            return fg_error(FG_ERR_DTYPE, "gradcheck: input %d must be a float64 CPU tensor", i);
        if (inputs[i]->grad_fn) return fg_error(FG_ERR_ARG, "gradcheck: input %d must be a leaf", i);
        fg_zero_grad(inputs[i]);
    }

    /* Analytic side: one backward with R as the output gradient. */
    fg_tensor *out = fn(inputs, n, user);
    if (!out) return fg_last_status();
    fg_tensor *R = fg_rand_uniform(FG_F64, FG_CPU, out->ndim, out->shape, -1.0, 1.0, seed, 0x67726164ULL);
    fg_tensor *Rd = R ? fg_to(R, out->device, out->dtype) : NULL;
    fg_status st = Rd ? fg_backward(out, Rd) : fg_last_status();
    fg_release(Rd);
    fg_release(out);
    if (st != FG_OK) {
        fg_release(R);
        return st;
    }

    for (int i = 0; i < n && st == FG_OK; i++) {
        fg_tensor *x = inputs[i];
        if (!x || !x->requires_grad) continue;
        int64_t m = fg_numel(x);
        for (int64_t k = 0; k < m; k++) {
            double x0 = fg_get(x, k), lp, lm;
            fg_set(x, k, x0 + eps);
            st = weighted_loss(fn, inputs, n, user, R, &lp);
            fg_set(x, k, x0 - eps);
            if (st == FG_OK) st = weighted_loss(fn, inputs, n, user, R, &lm);
            fg_set(x, k, x0);
            if (st != FG_OK) break;
            double num = (lp - lm) / (2 * eps);
            double ana = x->grad ? fg_get(x->grad, k) : 0.0;
            double err = fabs(ana - num);
            /* how far over its tolerance this element is; NaN is the worst possible */
            double score = isnan(err) ? INFINITY : err / (atol + rtol * fabs(num));
            int bad = !(score <= 1.0);
            rep->checked++;
            if (!isnan(err) && err > rep->max_abs_err) rep->max_abs_err = err;
            if (fabs(num) > atol && err / fabs(num) > rep->max_rel_err) rep->max_rel_err = err / fabs(num);
            if (rep->worst_input < 0 || score > worst_score) {
                worst_score = score;
                rep->worst_input = i;
                rep->worst_index = k;
                rep->analytic = ana;
                rep->numeric = num;
            }
            if (bad) rep->passed = 0;
        }
    }
    fg_release(R);
    return st;
}
