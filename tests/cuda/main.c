/* main.c — the GPU test runner: fg_cuda_tests [--cpu-self-test] [--quick] [--list] [FILTER...]
 *
 * Runs every test of every suite whose name contains one of the FILTER substrings (all when none
 * is given), prints one line per test and a summary, and exits with the number of failures
 * (0 = all passed), or 77 when no usable GPU is found (the message says why). See cuda_test.h.
 */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda.h"
#include "tests/cuda/cuda_test.h"

fg_device FGT_DEV = FG_CUDA;
int fgt_quick = 0;

void fgt_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "    FAIL at %s:%d: ", file, line);
    vfprintf(stdout, fmt, ap);
    fprintf(stdout, "\n");
    va_end(ap);
}

double fgt_tol(fg_dtype dt) { return dt == FG_F64 ? 1e-11 : 2e-5; }

int fgt_compare(const char *what, const double *got, const double *want, int64_t n, double tol) {
    double num = 0, den = 0, wmax = 0, worst = 0;
    int64_t worst_i = -1, first_bad = -1;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(want[i]) && fabs(want[i]) > wmax) wmax = fabs(want[i]);
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i];
        if (!isfinite(w) || !isfinite(g)) {
            int same = (isnan(g) && isnan(w)) || g == w;
            if (!same) {
                printf("    %s: element %lld is %g, expected %g (non-finite values must match)\n", what, (long long)i,
                       g, w);
                return FGT_FAIL;
            }
            continue;
        }
        double e = fabs(g - w);
        num += e * e;
        den += w * w;
        if (e > worst) {
            worst = e;
            worst_i = i;
        }
        /* element-wise bound, loose (10x the norm bound) but catching single wrong elements */
        if (first_bad < 0 && e > 10 * tol * (wmax + fabs(w)) + 1e-300) first_bad = i;
    }
    double rel = sqrt(num) / (sqrt(den) > 1e-300 ? sqrt(den) : 1e-300);
    if (den == 0 && num == 0) rel = 0;
    if (rel > tol || first_bad >= 0) {
        printf("    %s: relative error %.3e (tolerance %.1e) over %lld values; max |diff| %.3e at %lld (got %.9g, want "
               "%.9g)",
               what, rel, tol, (long long)n, worst, (long long)worst_i, worst_i >= 0 ? got[worst_i] : 0.0,
               worst_i >= 0 ? want[worst_i] : 0.0);
        if (first_bad >= 0)
            printf("; first element out of bounds: %lld (got %.9g, want %.9g)", (long long)first_bad, got[first_bad],
                   want[first_bad]);
        printf("\n");
        return FGT_FAIL;
    }
    return FGT_PASS;
}

double *fgt_host_f64(const fg_tensor *t) {
    fg_tensor *h = fg_to(t, FG_CPU, FG_F64);
    if (!h) return NULL;
    int64_t n = fg_numel(h);
    double *out = malloc((size_t)(n ? n : 1) * sizeof(double));
    if (out && n) memcpy(out, fg_data(h), (size_t)n * sizeof(double));
    fg_release(h);
    return out;
}

int fgt_compare_tensors(const char *what, const fg_tensor *got, const fg_tensor *want, double tol) {
    char b1[128], b2[128];
    if (!got || !want) {
        printf("    %s: %s is NULL\n", what, got ? "want" : "got");
        return FGT_FAIL;
    }
    if (!fg_same_shape(got, want)) {
        printf("    %s: shape %s, expected %s\n", what, fg_shape_str(got, b1, sizeof b1),
               fg_shape_str(want, b2, sizeof b2));
        return FGT_FAIL;
    }
    double *g = fgt_host_f64(got), *w = fgt_host_f64(want);
    int r = (g && w) ? fgt_compare(what, g, w, fg_numel(got), tol) : FGT_FAIL;
    if (!g || !w) printf("    %s: could not read the tensors back: %s\n", what, fg_last_error());
    free(g);
    free(w);
    return r;
}

fg_tensor *fgt_rand(fg_dtype dt, fg_device dev, int ndim, const int64_t *shape, double lo, double hi, uint64_t seed) {
    return fg_rand_uniform(dt, dev, ndim, shape, lo, hi, seed, 0);
}

fg_tensor *fgt_to(const fg_tensor *t, fg_device dev) { return fg_to(t, dev, t->dtype); }

size_t fgt_live_bytes(void) { return fg_alloc_get_stats(FGT_DEV).current; }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static const fgt_case *const suites[] = {fgt_device_cases, fgt_runtime_cases,   fgt_ops_cases,
                                         fgt_attention_cases, fgt_train_cases, fgt_bf16_cases};
static const char *const suite_names[] = {"device", "runtime", "ops", "attention", "train", "bf16"};

int main(int argc, char **argv) {
    const char *filters[64];
    int nf = 0, list = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cpu-self-test"))
            FGT_DEV = FG_CPU;
        else if (!strcmp(argv[i], "--quick"))
            fgt_quick = 1;
        else if (!strcmp(argv[i], "--list"))
            list = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: fg_cuda_tests [--cpu-self-test] [--quick] [--list] [FILTER...]\n");
            return 0;
        } else if (nf < 64)
            filters[nf++] = argv[i];
    }
    if (getenv("FG_SANITIZE")) fgt_quick = 1;
    if (!list) {
        if (FGT_DEV == FG_CUDA) {
            if (fg_cuda_init() != FG_OK) {
                printf("fg_cuda_tests: no usable GPU: %s\n", fg_last_error());
                return 77;
            }
            printf("fg_cuda_tests on %s\n", fg_cuda_device_string());
        } else {
            printf("fg_cuda_tests --cpu-self-test: the GPU side runs on the CPU (harness check only)\n");
        }
    }
    int passed = 0, failed = 0, skipped = 0;
    double t_all = now_ms();
    for (size_t s = 0; s < sizeof suites / sizeof suites[0]; s++)
        for (const fgt_case *c = suites[s]; c->name; c++) {
            char full[256];
            snprintf(full, sizeof full, "%s/%s", suite_names[s], c->name);
            int want = nf == 0;
            for (int f = 0; f < nf && !want; f++) want = strstr(full, filters[f]) != NULL;
            if (!want) continue;
            if (list) {
                printf("%s\n", full);
                continue;
            }
            fflush(stdout);
            fg_clear_error();
            double t0 = now_ms();
            int r = c->fn();
            double ms = now_ms() - t0;
            if (r == FGT_PASS)
                passed++;
            else if (r == FGT_SKIP)
                skipped++;
            else
                failed++;
            printf("%s %s (%.0f ms)\n", r == FGT_PASS ? "PASS" : r == FGT_SKIP ? "SKIP" : "FAIL", full, ms);
            fflush(stdout);
        }
    if (!list)
        printf("fg_cuda_tests: %d passed, %d failed, %d skipped in %.1f s\n", passed, failed, skipped,
               (now_ms() - t_all) / 1e3);
    return failed > 255 ? 255 : failed;
}
