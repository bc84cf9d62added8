/* gradcheck.h — compare analytic gradients with central finite differences in float64.
 *
 * The function under test maps n input tensors to one output of any shape. gradcheck reduces the
 * output to a scalar with fixed random weights R (loss = sum(R * out), so every output element
 * matters and a wrong sign or a transposed gradient cannot cancel), runs fg_backward with R as the
 * output gradient, then perturbs each input element by ±eps and compares
 *     numeric = (loss(x + eps) - loss(x - eps)) / (2 eps)
 * with the analytic value. An element passes when |analytic - numeric| <= atol + rtol * |numeric|.
 * Inputs must be float64 CPU tensors with requires_grad set on those to check.
 */
#ifndef FG_GRADCHECK_H
#define FG_GRADCHECK_H

#include "autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Returns a new output tensor (caller of fn releases it), or NULL on error. */
typedef fg_tensor *(*fg_gradcheck_fn)(fg_tensor *const *inputs, int n, void *user);

typedef struct {
    double eps, atol, rtol; /* defaults used when 0: 1e-6, 1e-7, 1e-5 */
    uint64_t seed;          /* for R */
} fg_gradcheck_opts;

typedef struct {
    int passed;
    int worst_input;          /* which input held the worst element (-1 if none checked) */
    int64_t worst_index;      /* its flat C-order index */
    double analytic, numeric; /* the two values there */
    double max_abs_err;       /* over all checked elements */
    double max_rel_err;       /* |a - n| / max(|n|, tiny) over elements with |n| > atol */
    int64_t checked;          /* elements compared */
} fg_gradcheck_report;

/* FG_OK when the check ran (see report->passed for the verdict); an error status otherwise. */
fg_status fg_gradcheck(fg_gradcheck_fn fn, fg_tensor *const *inputs, int n, void *user, const fg_gradcheck_opts *opts,
                       fg_gradcheck_report *report);

#ifdef __cplusplus
}
#endif
#endif /* FG_GRADCHECK_H */
