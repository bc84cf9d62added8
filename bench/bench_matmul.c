/* bench_matmul.c — `flashgrad bench matmul`: the float32 products of a GPT training step, timed
 * with each CPU kernel of ops/matmul.c.
 *
 * For a model of width C (--n-embd) and R = batch × block rows (--rows), the products of one
 * block and of the LM head, as the forward and backward of fg_linear run them:
 *   forward  out (R, N) = x (R, K) @ wᵀ        (w (N, K) read transposed)
 *   dx       dx  (R, K) = dout (R, N) @ w (N, K)
 *   dw       dw  (N, K) = doutᵀ (N, R) @ x (R, K)
 * for (N, K) = (3C, C) c_attn, (C, C) attn c_proj, (4C, C) c_fc, (C, 4C) mlp c_proj and (V, C)
 * the head. Each is timed through fg_matmul (on the library's pool, --threads threads) with
 * fg_matmul_set_kernel(FG_MATMUL_AUTO) — the tile kernel where it applies — and FG_MATMUL_BLAS,
 * and with one plain cblas_sgemm call on OpenBLAS's own threads, the way a program that leaves
 * threading to BLAS would run it. Times are medians of --repeat runs after a warm-up; GFLOP/s =
 * 2·M·N·K / time. The machine line says which kernel OpenBLAS chose (OPENBLAS_CORETYPE).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "ops/ops.h"
#include "ops/cpu/threadpool.h"
#include "cli/cli_util.h"
#include "cli/flags.h"

typedef struct {
    const char *name;
    int64_t M, N, K;
    int ta, tb; /* the operands as the backward or forward of linear reads them */
} mm_shape;

/* Median seconds of `repeat` products a' (M, K) @ b' (N... ) in the given mode:
 * mode 0: fg_matmul, kernel AUTO; 1: fg_matmul, kernel BLAS; 2: one cblas_sgemm, BLAS threads. */
static double time_product(const mm_shape *s, int mode, int repeat, fg_tensor *a, fg_tensor *b, float *c) {
    double *t = malloc((size_t)repeat * sizeof *t);
    if (!t) return -1;
    fg_matmul_kernel was = fg_matmul_set_kernel(mode == 1 ? FG_MATMUL_BLAS : FG_MATMUL_AUTO);
    for (int r = -1; r < repeat; r++) { /* r = -1: the warm-up */
        double t0 = fg_now();
        if (mode < 2) {
            fg_tensor *o = fg_matmul(a, b);
            if (!o) {
                free(t);
                fg_matmul_set_kernel(was);
                return -1;
            }
            fg_release(o);
        } else {
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, (int)s->M,
                        (int)s->N, (int)s->K, 1.0f, fg_data(a), s->ta ? (int)s->M : (int)s->K, fg_data(b),
                        s->tb ? (int)s->K : (int)s->N, 0.0f, c, (int)s->N);
        }
        if (r >= 0) t[r] = fg_now() - t0;
    }
    fg_matmul_set_kernel(was);
    qsort(t, (size_t)repeat, sizeof *t, fg_bench_cmp_double);
    double m = t[repeat / 2];
    free(t);
    return m;
}

/* A (rows, cols) float32 operand, or the transposed view of a (cols, rows) one when trans. */
static fg_tensor *operand(int64_t rows, int64_t cols, int trans, uint64_t seed) {
    int64_t shape[2] = {trans ? cols : rows, trans ? rows : cols};
    fg_tensor *base = fg_rand_normal(FG_F32, FG_CPU, 2, shape, 0.0, 1.0, seed, 0);
    if (!base || !trans) return base;
    fg_tensor *v = fg_view_transpose(base, 0, 1);
    fg_release(base);
    return v;
}

enum { M_ROWS, M_EMBD, M_VOCAB, M_REPEAT, M_THREADS, M_COUNT };

int fg_bench_matmul(int argc, char **argv) {
    fg_flag f[M_COUNT] = {
        [M_ROWS] = {"--rows", FG_FLAG_INT, "R", "rows = batch x block", .lo = 1, .hi = 1 << 20, .i = 768},
        [M_EMBD] = {"--n-embd", FG_FLAG_INT, "C", "model width", .lo = 1, .hi = 1 << 14, .i = 128},
        [M_VOCAB] = {"--vocab", FG_FLAG_INT, "V", "vocabulary", .lo = 1, .hi = 1 << 20, .i = 65},
        [M_REPEAT] = {"--repeat", FG_FLAG_INT, "N", "timed runs per product", .lo = 1, .hi = 100000, .i = 100},
        [M_THREADS] = {"--threads", FG_FLAG_INT, "N", "threads of the pool and of OpenBLAS (0: all cores)", .lo = 0,
                       .hi = FG_POOL_MAX_THREADS, .i = 0},
    };
    int rc = fg_flags_parse("bench matmul", f, M_COUNT, argc, argv);
    if (rc == -1) {
        fg_flags_help(stdout, "bench matmul", "[options]", f, M_COUNT);
        printf("\nTimes the float32 products of one GPT block and of the LM head (forward, dx, dw) with each CPU\n"
               "kernel: tile and BLAS on flashgrad's pool, and one OpenBLAS call on OpenBLAS's own threads.\n");
        return 0;
    }
    if (rc != 0) return rc;
    const int threads = (int)f[M_THREADS].i;
    if (threads > 0) {
        fg_pool_set_threads(threads);
        openblas_set_num_threads(threads);
    }
    const int64_t R = f[M_ROWS].i, C = f[M_EMBD].i, V = f[M_VOCAB].i;
    const int repeat = (int)f[M_REPEAT].i;
    fg_print_machine_line(stdout);
    fg_blas_hint(stdout);
    printf("bench matmul: R = %lld rows, C = %lld, V = %lld; pool %d threads, OpenBLAS %d threads; median of %d\n",
           (long long)R, (long long)C, (long long)V, fg_pool_threads(), openblas_get_num_threads(), repeat);
    const struct {
        const char *name;
        int64_t N, K;
    } lin[] = {
        {"c_attn", 3 * C, C}, {"attn.c_proj", C, C}, {"c_fc", 4 * C, C}, {"mlp.c_proj", C, 4 * C}, {"lm_head", V, C}};
    printf("%-12s %-8s %6s %6s %6s   %12s %12s %14s\n", "linear", "product", "M", "N", "K", "tile GFLOP/s",
           "BLAS GFLOP/s", "BLAS threads");
    double tot_flop = 0, tot_s[3] = {0, 0, 0};
    int failed = 0;
    for (size_t l = 0; l < sizeof lin / sizeof lin[0] && !failed; l++) {
        const int64_t N = lin[l].N, K = lin[l].K;
        const mm_shape shapes[3] = {{"forward", R, N, K, 0, 1}, {"dx", R, K, N, 0, 0}, {"dw", N, K, R, 1, 0}};
        for (int p = 0; p < 3; p++) {
            const mm_shape *s = &shapes[p];
            fg_tensor *a = operand(s->M, s->K, s->ta, 1 + (uint64_t)p);
            fg_tensor *b = a ? operand(s->K, s->N, s->tb, 11 + (uint64_t)p) : NULL;
            float *c = malloc((size_t)(s->M * s->N) * sizeof(float));
            double t[3] = {-1, -1, -1};
            if (a && b && c)
                for (int mode = 0; mode < 3; mode++) t[mode] = time_product(s, mode, repeat, a, b, c);
            fg_release(a);
            fg_release(b);
            free(c);
            if (t[0] < 0 || t[1] < 0 || t[2] < 0) {
                fprintf(stderr, "flashgrad bench matmul: %s %s failed: %s\n", lin[l].name, s->name, fg_last_error());
                failed = 1;
                break;
            }
            const double flop = 2.0 * (double)s->M * (double)s->N * (double)s->K;
            tot_flop += flop;
            for (int mode = 0; mode < 3; mode++) tot_s[mode] += t[mode];
            printf("%-12s %-8s %6lld %6lld %6lld   %12.1f %12.1f %14.1f\n", lin[l].name, s->name, (long long)s->M,
                   (long long)s->N, (long long)s->K, flop / t[0] * 1e-9, flop / t[1] * 1e-9, flop / t[2] * 1e-9);
        }
    }
    if (failed) return 1;
    printf("%-12s %-8s %6s %6s %6s   %12.1f %12.1f %14.1f\n", "all", "", "", "", "", tot_flop / tot_s[0] * 1e-9,
           tot_flop / tot_s[1] * 1e-9, tot_flop / tot_s[2] * 1e-9);
    printf("(tile: fg_matmul with the default kernel choice, which is BLAS where the tile kernel does not apply)\n");
    return 0;
}
