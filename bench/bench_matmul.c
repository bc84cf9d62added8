/* bench_matmul.c — `flashgrad bench matmul`: every float32 product of a GPT training step, timed
 * with each CPU GEMM kernel of ops/cpu/matmul.c, as GFLOP/s and as a fraction of the FMA peak.
 *
 * For a model of width C and R = batch × block rows, the products of one block and of the LM head,
 * as the forward and backward of fg_linear run them:
 *   fwd   out (R, N) = x (R, K) @ wᵀ         (w (N, K) read transposed)
 *   dx    dx  (R, K) = dout (R, N) @ w (N, K)
 *   dw    dw  (N, K) = doutᵀ (N, R) @ x (R, K)  (dout (R, N) read transposed)
 * for (N, K) = (3C, C) c_attn, (C, C) attn.c_proj, (4C, C) c_fc, (C, 4C) mlp.c_proj and (V, C)
 * lm_head. Configurations (--config, a comma list):
 *   tiny      L4 H4 C128 T64 B12, V 65      (nanoGPT's CPU quick start)
 *   mid       L6 H6 C384 T256 B8, V 65      (nanoGPT's shakespeare-char model)
 *   gpt2      L12 H12 C768 T1024 B1, V 65   (GPT-2 small's shape)
 *   gpt2-50k  the same with V 50304         (its LM head alone is ~80 GFLOP per product)
 * or one given by --rows, --n-embd and --vocab.
 *
 * Kernels, each through fg_matmul with fg_matmul_set_kernel on --threads threads:
 *   tile      flashgrad's register-blocked kernel (ops/cpu/smallgemm.h), blocks of C on the pool
 *   blas      OpenBLAS, single-threaded per block of C on the pool
 *   dnnl      oneDNN's sgemm, single-threaded per block of C on the pool
 *   dnnl-omp  oneDNN's sgemm given the whole product on its own OpenMP threads, the pool idle
 * and "pick": the kernel the automatic choice takes for that shape. Each figure is the best of
 * --repeat timed runs after the kernel's warm-up calls (best, not median: others' processes only
 * ever slow a run down). % = GFLOP/s against the FMA peak measured at the start (`flashgrad bench peak`'s figure)
 * or given by --peak. On a shared machine, --threads 1 --cpu-time compares the kernels by the CPU
 * time they took, which others' processes disturb far less than the wall clock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "cli/cli_util.h"
#include "cli/flags.h"
#include "ops/cpu.h"
#include "ops/ops.h"

/* --cpu-time: the calling thread's CPU time instead of the wall clock. */
static int use_cpu_time;

static double bench_clock(void) {
    if (!use_cpu_time) return fg_now();
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { KN_TILE, KN_BLAS, KN_DNNL, KN_DNNL_OMP, KN_COUNT };
static const char *const kn_name[KN_COUNT] = {"tile", "blas", "dnnl", "dnnl-omp"};
static const fg_matmul_kernel kn_setting[KN_COUNT] = {FG_MATMUL_TILE, FG_MATMUL_BLAS, FG_MATMUL_DNNL,
                                                      FG_MATMUL_DNNL_OMP};

typedef struct {
    const char *name, *what;
    int64_t R, C, V;
} mm_config;

static const mm_config configs[] = {
    {"tiny", "L4 H4 C128 T64 B12, V 65", 12 * 64, 128, 65},
    {"mid", "L6 H6 C384 T256 B8, V 65", 8 * 256, 384, 65},
    {"gpt2", "L12 H12 C768 T1024 B1, V 65", 1024, 768, 65},
    {"gpt2-50k", "L12 H12 C768 T1024 B1, V 50304", 1024, 768, 50304},
};
#define N_CONFIGS ((int)(sizeof configs / sizeof configs[0]))

/* Seconds of one product a @ b with the given kernel setting; < 0 on failure. */
static double time_once(fg_matmul_kernel k, fg_tensor *a, fg_tensor *b) {
    const fg_matmul_kernel was = fg_matmul_set_kernel(k);
    const double t0 = bench_clock();
    fg_tensor *o = fg_matmul(a, b);
    const double dt = bench_clock() - t0;
    fg_matmul_set_kernel(was);
    fg_release(o);
    return o ? dt : -1;
}

/* t[k] = the best seconds of `repeat` products with kernel k (for the kernels in use), after its
 * warm-up calls (bench/bench.h); the kernels take turns, so that a burst of load elsewhere slows all of them alike.
 * Returns 0, or -1 on failure. */
static int time_kernels(const int *use, int repeat, fg_tensor *a, fg_tensor *b, double *t) {
    for (int k = 0; k < KN_COUNT; k++) {
        t[k] = use[k] ? 1e30 : 0;
        double spent = 0;
        for (int w = 0; use[k] && w < FG_BENCH_GEMM_WARM_CALLS && spent < FG_BENCH_GEMM_WARM_SECONDS; w++) {
            const double dt = time_once(kn_setting[k], a, b);
            if (dt < 0) return -1;
            spent += dt;
        }
    }
    for (int r = 0; r < repeat; r++)
        for (int k = 0; k < KN_COUNT; k++) {
            if (!use[k]) continue;
            const double dt = time_once(kn_setting[k], a, b);
            if (dt < 0) return -1;
            if (dt < t[k]) t[k] = dt;
        }
    return 0;
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

static int kernel_index(fg_matmul_kernel k) {
    for (int i = 0; i < KN_COUNT; i++)
        if (kn_setting[i] == k) return i;
    return KN_BLAS;
}

/* One configuration: every product with every kernel, a line each, then a summary line. */
static int bench_config(const mm_config *cfg, int repeat, double peak, const int *use) {
    const int64_t R = cfg->R, C = cfg->C, V = cfg->V;
    printf("\n%s: %s (R = %lld rows)\n", cfg->name, cfg->what, (long long)R);
    printf("%-12s %-4s %6s %6s %6s ", "linear", "prod", "M", "N", "K");
    for (int k = 0; k < KN_COUNT; k++) printf(" %13s", kn_name[k]);
    printf("  %-8s\n", "pick");
    const struct {
        const char *name;
        int64_t N, K;
    } lin[] = {
        {"c_attn", 3 * C, C}, {"attn.c_proj", C, C}, {"c_fc", 4 * C, C}, {"mlp.c_proj", C, 4 * C}, {"lm_head", V, C}};
    double flop_all = 0, s_pick = 0, s_best = 0, worst = 1e30;
    char worst_at[64] = "";
    for (size_t l = 0; l < sizeof lin / sizeof lin[0]; l++) {
        const int64_t N = lin[l].N, K = lin[l].K;
        const struct {
            const char *name;
            int64_t M, N, K;
            int ta, tb;
        } prod[3] = {{"fwd", R, N, K, 0, 1}, {"dx", R, K, N, 0, 0}, {"dw", N, K, R, 1, 0}};
        for (int p = 0; p < 3; p++) {
            fg_tensor *a = operand(prod[p].M, prod[p].K, prod[p].ta, 1 + (uint64_t)p);
            fg_tensor *b = a ? operand(prod[p].K, prod[p].N, prod[p].tb, 11 + (uint64_t)p) : NULL;
            double t[KN_COUNT];
            const int failed = !a || !b || time_kernels(use, repeat, a, b, t) != 0;
            fg_release(a);
            fg_release(b);
            if (failed) {
                fprintf(stderr, "flashgrad bench matmul: %s %s %s failed: %s\n", cfg->name, lin[l].name, prod[p].name,
                        fg_last_error());
                return 1;
            }
            const double flop = 2.0 * (double)prod[p].M * (double)prod[p].N * (double)prod[p].K;
            const int pick = kernel_index(fg_matmul_auto_kernel(prod[p].M, prod[p].N, prod[p].K, prod[p].ta));
            printf("%-12s %-4s %6lld %6lld %6lld ", lin[l].name, prod[p].name, (long long)prod[p].M,
                   (long long)prod[p].N, (long long)prod[p].K);
            double best = 1e30;
            for (int k = 0; k < KN_COUNT; k++) {
                if (!use[k]) {
                    printf(" %13s", "-");
                    continue;
                }
                const double g = flop / t[k] * 1e-9;
                printf(" %7.1f %4.0f%%", g, 100.0 * g / peak);
                if (t[k] < best) best = t[k];
            }
            printf("  %-8s\n", kn_name[pick]);
            flop_all += flop;
            s_best += best;
            if (use[pick]) {
                s_pick += t[pick];
                const double frac = flop / t[pick] * 1e-9 / peak;
                if (frac < worst) {
                    worst = frac;
                    snprintf(worst_at, sizeof worst_at, "%s %s", lin[l].name, prod[p].name);
                }
            }
        }
    }
    if (use[KN_TILE] && use[KN_BLAS] && use[KN_DNNL] && use[KN_DNNL_OMP])
        printf("%s, all products: the pick %.1f GFLOP/s (%.0f%% of peak), lowest %.0f%% (%s); the fastest of each "
               "%.1f GFLOP/s (%.0f%%)\n",
               cfg->name, flop_all / s_pick * 1e-9, 100.0 * flop_all / s_pick * 1e-9 / peak, 100.0 * worst, worst_at,
               flop_all / s_best * 1e-9, 100.0 * flop_all / s_best * 1e-9 / peak);
    return 0;
}

enum { M_CONFIG, M_ROWS, M_EMBD, M_VOCAB, M_KERNELS, M_REPEAT, M_THREADS, M_PEAK, M_CPU_TIME, M_COUNT };

int fg_bench_matmul(int argc, char **argv) {
    fg_flag f[M_COUNT] = {
        [M_CONFIG] = {"--config", FG_FLAG_STR, "LIST", "tiny, mid, gpt2, gpt2-50k or all (comma list)",
                      .s = "tiny,mid"},
        [M_ROWS] = {"--rows", FG_FLAG_INT, "R", "a custom configuration: rows = batch x block", .lo = 1, .hi = 1 << 20,
                    .i = 768},
        [M_EMBD] = {"--n-embd", FG_FLAG_INT, "C", "a custom configuration: model width", .lo = 1, .hi = 1 << 14,
                    .i = 128},
        [M_VOCAB] = {"--vocab", FG_FLAG_INT, "V", "a custom configuration: vocabulary", .lo = 1, .hi = 1 << 20,
                     .i = 65},
        [M_KERNELS] = {"--kernels", FG_FLAG_STR, "LIST", "kernels to time: tile, blas, dnnl, dnnl-omp (comma list)",
                       .s = "tile,blas,dnnl,dnnl-omp"},
        [M_REPEAT] = {"--repeat", FG_FLAG_INT, "N", "timed runs per product and kernel (the best counts)", .lo = 1,
                      .hi = 100000, .i = 3},
        [M_THREADS] = {"--threads", FG_FLAG_INT, "N", "threads of the pool (and of oneDNN's whole products; 0: all)",
                       .lo = 0, .hi = FG_POOL_MAX_THREADS, .i = 0},
        [M_PEAK] = {"--peak", FG_FLAG_INT, "GFLOPS", "the FMA peak to take (0: measure it)", .lo = 0, .hi = 1 << 24,
                    .i = 0},
        [M_CPU_TIME] = {"--cpu-time", FG_FLAG_BOOL, NULL,
                        "time by this thread's CPU time (with --threads 1: the kernels' cost on a shared machine)"},
    };
    int rc = fg_flags_parse("bench matmul", f, M_COUNT, argc, argv);
    if (rc == -1) {
        fg_flags_help(stdout, "bench matmul", "[options]", f, M_COUNT);
        printf("\nTimes every float32 product of a GPT training step (forward, dx, dw of each linear) with each\n"
               "CPU kernel, as GFLOP/s and %% of the FMA peak, and names the kernel the automatic choice takes.\n"
               "--rows, --n-embd or --vocab given: that one configuration instead of --config.\n");
        return 0;
    }
    if (rc != 0) return rc;
    int use[KN_COUNT] = {0};
    {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", f[M_KERNELS].s);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            int k = 0;
            while (k < KN_COUNT && strcmp(tok, kn_name[k])) k++;
            if (k == KN_COUNT) {
                fprintf(stderr, "flashgrad bench matmul: --kernels: unknown kernel '%s' (tile, blas, dnnl, dnnl-omp)\n",
                        tok);
                return 2;
            }
            use[k] = 1;
        }
    }
    const mm_config *run[N_CONFIGS];
    int n_run = 0;
    mm_config custom = {"custom", "", f[M_ROWS].i, f[M_EMBD].i, f[M_VOCAB].i};
    char custom_what[96];
    if (f[M_ROWS].given || f[M_EMBD].given || f[M_VOCAB].given) {
        snprintf(custom_what, sizeof custom_what, "C%lld, V %lld", (long long)custom.C, (long long)custom.V);
        custom.what = custom_what;
        run[n_run++] = &custom;
    } else {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", f[M_CONFIG].s);
        for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
            int all = !strcmp(tok, "all"), found = all;
            for (int c = 0; c < N_CONFIGS; c++)
                if ((all || !strcmp(tok, configs[c].name)) && n_run < N_CONFIGS) {
                    run[n_run++] = &configs[c];
                    found = 1;
                }
            if (!found) {
                fprintf(stderr,
                        "flashgrad bench matmul: --config: unknown configuration '%s' (tiny, mid, gpt2, "
                        "gpt2-50k, all)\n",
                        tok);
                return 2;
            }
        }
    }
    if (!fg_dnnl_available() && (use[KN_DNNL] || use[KN_DNNL_OMP])) {
        printf("bench matmul: this build has no oneDNN: the dnnl columns are left out\n");
        use[KN_DNNL] = use[KN_DNNL_OMP] = 0;
    }
    if (f[M_THREADS].i > 0) fg_pool_set_threads((int)f[M_THREADS].i);
    use_cpu_time = f[M_CPU_TIME].i != 0;
    if (use_cpu_time && fg_pool_threads() > 1) {
        fprintf(stderr, "flashgrad bench matmul: --cpu-time needs --threads 1 (other threads' time is not counted)\n");
        return 2;
    }
    fg_print_machine_line(stdout);
    fg_blas_hint(stdout);
    const double peak = f[M_PEAK].i > 0 ? (double)f[M_PEAK].i : fg_fma_peak_gflops();
    printf("bench matmul: pool %d threads; oneDNN %s; FMA peak %.1f GFLOP/s (%s); best of %d runs\n"
           "each kernel: GFLOP/s and %% of the peak; pick: the automatic choice\n",
           fg_pool_threads(), fg_dnnl_version(), peak, f[M_PEAK].i > 0 ? "--peak" : "measured", (int)f[M_REPEAT].i);
    for (int c = 0; c < n_run; c++)
        if (bench_config(run[c], (int)f[M_REPEAT].i, peak, use)) return 1;
    return 0;
}
