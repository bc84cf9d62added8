/* cuda_test.h — the GPU test runner's small harness (tests/cuda/, built by `make cuda` into
 * build-cuda/fg_cuda_tests; not part of the CPU `make test`).
 *
 * Why not Criterion: the GPU machines this runs on cannot install packages, and the runner must
 * work there with nothing but the CUDA toolkit and a C compiler. The conventions are Criterion's:
 * one function per test named as a sentence, every test compares against an independent
 * reference and can fail, and a failure prints the actual values and the first bad index.
 *
 * A test returns FGT_PASS, FGT_FAIL or FGT_SKIP. Use FGT_CHECK(cond, fmt, ...) for conditions and
 * fgt_compare() for arrays. The runner exits with the number of failed tests (0 = all passed),
 * or 77 when there is no usable GPU.
 *
 * Self-test mode (`fg_cuda_tests --cpu-self-test`, or FGT_DEV == FG_CPU): the "GPU" side of each
 * comparison runs the CPU code instead, so the harness, the inputs and the references can be
 * checked on a machine without a GPU. Tests that only make sense on a GPU skip themselves.
 */
#ifndef FG_CUDA_TEST_H
#define FG_CUDA_TEST_H

#include <stdint.h>
#include <stdio.h>

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { FGT_PASS = 0, FGT_FAIL = 1, FGT_SKIP = 2 };

typedef struct {
    const char *name;
    int (*fn)(void);
} fgt_case;

/* The device the "GPU" side runs on: FG_CUDA, or FG_CPU in self-test mode. */
extern fg_device FGT_DEV;
/* 1 when FG_SANITIZE or --quick asks for smaller cases. */
extern int fgt_quick;

/* Print a failure line "  FAIL at file:line: message" (the runner prints the test name). */
void fgt_fail(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
#define FGT_CHECK(cond, ...)                                                                                           \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fgt_fail(__FILE__, __LINE__, __VA_ARGS__);                                                                 \
            return FGT_FAIL;                                                                                           \
        }                                                                                                              \
    } while (0)
/* A library call that must succeed (non-NULL / FG_OK); prints fg_last_error() otherwise. */
#define FGT_OK(expr) FGT_CHECK((expr) == FG_OK, "%s failed: %s", #expr, fg_last_error())
#define FGT_NOTNULL(expr) FGT_CHECK((expr) != NULL, "%s returned NULL: %s", #expr, fg_last_error())

/* Compare n values (float64 arrays). Passes when ‖got − want‖₂ ≤ tol · max(‖want‖₂, tiny) and
 * every element satisfies |got − want| ≤ tol_elem · (max|want| + |want_i|), and non-finite values
 * (NaN, ±inf) sit in the same places with the same value. On failure prints what, both errors,
 * the worst element and the first bad index. Returns FGT_PASS or FGT_FAIL. */
int fgt_compare(const char *what, const double *got, const double *want, int64_t n, double tol);

/* Any tensor (any device, dtype, strides) as a new float64 host array of numel values (caller
 * frees with free()); NULL on error. */
double *fgt_host_f64(const fg_tensor *t);
/* Compare two tensors of the same shape (any devices/dtypes) with fgt_compare. */
int fgt_compare_tensors(const char *what, const fg_tensor *got, const fg_tensor *want, double tol);

/* Uniform in (lo, hi] from Philox stream `seed`, made on the host and copied to `dev`. */
fg_tensor *fgt_rand(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape, double lo, double hi, uint64_t seed);
/* A copy of t on `dev` (same dtype), as a fresh leaf. */
fg_tensor *fgt_to(const fg_tensor *t, fg_device dev);

/* Device bytes live right now (fg_alloc_get_stats(FGT_DEV).current), for leak checks. */
size_t fgt_live_bytes(void);

/* Default tolerances for results that went through sums of a few hundred terms. */
double fgt_tol(fg_dtype dt);

/* The suites (one per file). Each array ends with {NULL, NULL}. */
extern const fgt_case fgt_runtime_cases[];
extern const fgt_case fgt_ops_cases[];
extern const fgt_case fgt_attention_cases[];
extern const fgt_case fgt_device_cases[];
extern const fgt_case fgt_train_cases[]; /* tests/cuda/test_train.c */
extern const fgt_case fgt_bf16_cases[];  /* tests/cuda/test_bf16.c */

#ifdef __cplusplus
}
#endif
#endif /* FG_CUDA_TEST_H */
