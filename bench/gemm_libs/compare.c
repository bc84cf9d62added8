/* compare.c — the field's float32 GEMM libraries side by side on every product of a GPT training
 * step, each on 2 threads of its own (or --threads T), in one run (bench/gemm_libs/run.sh builds and
 * runs it; not part of any make target).
 *
 * Products: forward x·Wᵀ, dx = dout·W and dW = doutᵀ·x of c_attn, attn.c_proj, c_fc, mlp.c_proj and
 * the LM head, row-major as flashgrad calls them, for nanoGPT's CPU model (L4: 768 rows, C 128,
 * V 65), the shakespeare-char model (L6: 2048 rows, C 384, V 65) and GPT-2 small (1024 rows, C 768,
 * V 50304). Libraries, each where it is found:
 *   flashgrad   fg_matmul with the automatic kernel (what training runs), and its tile kernel
 *               forced, on flashgrad's pool (the output tensor from its caching allocator);
 *   onednn      dnnl_sgemm (the linked oneDNN) on its OpenMP team;
 *   openblas    cblas_sgemm of the linked OpenBLAS on its threads;
 *   openblas-w  scipy_cblas_sgemm of a newer OpenBLAS from PyPI (scipy-openblas32), --scipy-openblas;
 *   mkl         cblas_sgemm of Intel MKL from PyPI (libmkl_rt), --mkl;
 *   libxsmm     libxsmm_sgemm_omp (its own tiles of JIT kernels on OpenMP), when built with it.
 * --lib KEY times one library (fg-auto, fg-tile, onednn, openblas, openblas-wheel, mkl, libxsmm):
 * run.sh runs each in a process of its own, since the libraries' OpenMP and pthread teams
 * spin-wait after their calls and would take the cores from the next library in one process.
 * Each product: untimed warm-up calls (bench/bench.h, FG_BENCH_GEMM_WARM_CALLS), then --repeat
 * timed calls with the operands hot (the same call again); the median counts. Output: one line per product, "model product op M N K GFLOP/s %peak",
 * then one "all" line per model and the peak. GFLOP/s and % of the float32 FMA peak measured on flashgrad's pool
 * threads (the highest of a measurement before and one after).
 */
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "bench/bench.h"
#include "ops/cpu.h"
#include "ops/ops.h"

#ifdef FG_HAVE_DNNL
#include <dnnl.h>
#endif
#ifdef HAVE_XSMM
#include <libxsmm.h>
#endif

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                         int);
typedef void (*threads_fn)(int);

enum { LIB_FG_AUTO, LIB_FG_TILE, LIB_DNNL, LIB_OPENBLAS, LIB_CBLAS_DL, LIB_XSMM };

typedef struct {
    char name[64];
    const char *key;
    int kind;
    sgemm_fn gemm;  /* LIB_CBLAS_DL */
    threads_fn set; /* its thread count, LIB_CBLAS_DL */
} lib;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* flashgrad's operands of the product being timed: op(A) and op(B) as (transposed views of) tensors */
static fg_tensor *fg_a, *fg_b;

/* the tensor of a row-major (rows, cols) buffer, or the transposed view of it when trans */
static fg_tensor *operand(const float *p, int rows, int cols, int trans) {
    fg_tensor *t = fg_from_buffer(FG_F32, FG_CPU, 2, (int64_t[]){rows, cols}, p);
    if (!t || !trans) return t;
    fg_tensor *v = fg_view_transpose(t, 0, 1);
    fg_release(t);
    return v;
}

/* C (M, N) = op(A) op(B), row-major, ta/tb as cblas; lda, ldb as stored */
static void run(const lib *L, int threads, int ta, int tb, int M, int N, int K, const float *A, const float *B, float *C) {
    const int lda = ta ? M : K, ldb = tb ? K : N;
    switch (L->kind) {
    case LIB_FG_AUTO:
    case LIB_FG_TILE:
        fg_matmul_set_kernel(L->kind == LIB_FG_TILE ? FG_MATMUL_TILE : FG_MATMUL_AUTO);
        fg_release(fg_matmul(fg_a, fg_b));
        break;
#ifdef FG_HAVE_DNNL
    case LIB_DNNL:
        omp_set_num_threads(threads);
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
        break;
#endif
    case LIB_OPENBLAS:
        openblas_set_num_threads(threads);
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda,
                    B, ldb, 0.0f, C, N);
        break;
    case LIB_CBLAS_DL:
        L->set(threads);
        L->gemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda, B,
                ldb, 0.0f, C, N);
        break;
#ifdef HAVE_XSMM
    case LIB_XSMM: { /* column-major: C (M, N) row-major is Cᵀ = op(B)ᵀ op(A)ᵀ */
        omp_set_num_threads(threads);
        const libxsmm_blasint m = N, n = M, k = K, la = ldb, lb = lda, lc = N;
        const float one = 1.0f, zero = 0.0f;
        const char a = tb ? 'T' : 'N', b = ta ? 'T' : 'N';
        libxsmm_sgemm_omp(&a, &b, &m, &n, &k, &one, B, &la, A, &lb, &zero, C, &lc);
        break;
    }
#endif
    default:
        break;
    }
}

typedef struct {
    const char *model, *name, *op;
    int ta, tb, M, N, K;
} product;

int main(int argc, char **argv) {
    int threads = 2, repeat = 5;
    const char *scipy = NULL, *mkl = NULL, *only = NULL, *want = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scipy-openblas") && i + 1 < argc)
            scipy = argv[++i];
        else if (!strcmp(argv[i], "--mkl") && i + 1 < argc)
            mkl = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--lib") && i + 1 < argc)
            want = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--threads T] [--repeat R] [--model L4|L6|gpt2] [--scipy-openblas LIB.so] "
                            "[--mkl libmkl_rt.so] [--lib KEY]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || repeat < 1 || repeat > 99) {
        fprintf(stderr, "compare: --threads >= 1 and --repeat in [1, 99]\n");
        return 2;
    }
    fg_pool_set_threads(threads);

    lib libs[8];
    int nl = 0;
    libs[nl++] = (lib){"flashgrad auto", "fg-auto", LIB_FG_AUTO, NULL, NULL};
    libs[nl++] = (lib){"flashgrad tile", "fg-tile", LIB_FG_TILE, NULL, NULL};
#ifdef FG_HAVE_DNNL
    const dnnl_version_t *dv = dnnl_version();
    libs[nl] = (lib){"", "onednn", LIB_DNNL, NULL, NULL};
    snprintf(libs[nl++].name, 64, "oneDNN %d.%d.%d", dv->major, dv->minor, dv->patch);
#endif
    libs[nl] = (lib){"", "openblas", LIB_OPENBLAS, NULL, NULL};
    snprintf(libs[nl++].name, 64, "OpenBLAS %.12s %s", openblas_get_config() + 9, openblas_get_corename());
    if (scipy) {
        void *h = dlopen(scipy, RTLD_NOW | RTLD_LOCAL);
        sgemm_fn g = h ? (sgemm_fn)dlsym(h, "scipy_cblas_sgemm") : NULL;
        threads_fn t = h ? (threads_fn)dlsym(h, "scipy_openblas_set_num_threads") : NULL;
        char *(*cfg)(void) = h ? (char *(*)(void))dlsym(h, "scipy_openblas_get_config") : NULL;
        char *(*core)(void) = h ? (char *(*)(void))dlsym(h, "scipy_openblas_get_corename") : NULL;
        if (g && t) {
            libs[nl] = (lib){"", "openblas-wheel", LIB_CBLAS_DL, g, t};
            snprintf(libs[nl++].name, 64, "OpenBLAS %.12s %s", cfg ? cfg() + 9 : "(wheel)", core ? core() : "");
        } else {
            fprintf(stderr, "compare: no scipy-openblas in %s: %s\n", scipy, dlerror());
        }
    }
    if (mkl) {
        void *h = dlopen(mkl, RTLD_NOW | RTLD_LOCAL);
        sgemm_fn g = h ? (sgemm_fn)dlsym(h, "cblas_sgemm") : NULL;
        threads_fn t = h ? (threads_fn)dlsym(h, "MKL_Set_Num_Threads") : NULL;
        void (*ver)(char *, int) = h ? (void (*)(char *, int))dlsym(h, "MKL_Get_Version_String") : NULL;
        if (g && t) {
            char v[200] = "MKL";
            if (ver) ver(v, sizeof v);
            libs[nl] = (lib){"", "mkl", LIB_CBLAS_DL, g, t};
            snprintf(libs[nl++].name, 64, "%.40s", v);
        } else {
            fprintf(stderr, "compare: no MKL in %s: %s\n", mkl, dlerror());
        }
    }
#ifdef HAVE_XSMM
    libxsmm_init();
    libs[nl++] = (lib){"libxsmm " LIBXSMM_VERSION " omp", "libxsmm", LIB_XSMM, NULL, NULL};
#endif

    if (want) { /* that library alone */
        int k = -1;
        for (int l = 0; l < nl; l++)
            if (!strcmp(libs[l].key, want)) k = l;
        if (k < 0) {
            fprintf(stderr, "compare: no library %s here\n", want);
            return 1;
        }
        libs[0] = libs[k];
        nl = 1;
    }
    product P[64];
    int np = 0;
    const struct {
        const char *model;
        int R, C, V;
    } models[] = {{"L4", 768, 128, 65}, {"L6", 2048, 384, 65}, {"gpt2", 1024, 768, 50304}};
    for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
        if (only && strcmp(only, models[m].model)) continue;
        const int R = models[m].R, C = models[m].C;
        const int outs[5] = {3 * C, C, 4 * C, C, models[m].V}, ins[5] = {C, C, C, 4 * C, C};
        const char *names[5] = {"c_attn", "attn.c_proj", "c_fc", "mlp.c_proj", "lm_head"};
        for (int l = 0; l < 5; l++) {
            P[np++] = (product){models[m].model, names[l], "fwd", 0, 1, R, outs[l], ins[l]}; /* x Wᵀ */
            P[np++] = (product){models[m].model, names[l], "dx", 0, 0, R, ins[l], outs[l]};  /* dout W */
            P[np++] = (product){models[m].model, names[l], "dw", 1, 0, outs[l], ins[l], R};  /* doutᵀ x */
        }
    }
    size_t most = 0;
    for (int p = 0; p < np; p++) {
        const size_t a = (size_t)P[p].M * P[p].K, b = (size_t)P[p].K * P[p].N, c = (size_t)P[p].M * P[p].N;
        most = a > most ? a : most, most = b > most ? b : most, most = c > most ? c : most;
    }
    float *A = malloc(most * sizeof *A), *B = malloc(most * sizeof *B), *C = malloc(most * sizeof *C);
    if (!A || !B || !C) {
        fprintf(stderr, "compare: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < most; i++) A[i] = B[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f, C[i] = 0.0f;

    const double peak0 = fg_fma_peak_measure(500000, 400);
    printf("gemm_libs: %d threads per library; median of %d hot calls per product (one untimed first)\n", threads,
           repeat);
    printf("%-5s %-12s %-4s %6s %6s %6s", "model", "product", "op", "M", "N", "K");
    for (int l = 0; l < nl; l++) printf(" | %s", libs[l].name);
    printf("\n");
    double *sum = calloc((size_t)nl * 3, sizeof *sum), flops[3] = {0, 0, 0};
    double *gf = malloc((size_t)np * nl * sizeof *gf);
    const char *model_names[3] = {"L4", "L6", "gpt2"};
    for (int p = 0; p < np; p++) {
        const int mi = !strcmp(P[p].model, "L4") ? 0 : !strcmp(P[p].model, "L6") ? 1 : 2;
        flops[mi] += 2.0 * P[p].M * P[p].N * P[p].K;
    }
    for (int l = 0; l < nl; l++) {
        for (int p = 0; p < np; p++) {
            const double fl = 2.0 * P[p].M * P[p].N * P[p].K;
            const int mi = !strcmp(P[p].model, "L4") ? 0 : !strcmp(P[p].model, "L6") ? 1 : 2;
            double t[99];
            fg_a = operand(A, P[p].ta ? P[p].K : P[p].M, P[p].ta ? P[p].M : P[p].K, P[p].ta);
            fg_b = operand(B, P[p].tb ? P[p].N : P[p].K, P[p].tb ? P[p].K : P[p].N, P[p].tb);
            if (!fg_a || !fg_b) {
                fprintf(stderr, "compare: %s\n", fg_last_error());
                return 1;
            }
            double warm = 0;
            for (int w = 0; w < FG_BENCH_GEMM_WARM_CALLS && warm < FG_BENCH_GEMM_WARM_SECONDS; w++) {
                const double t0 = now_s();
                run(&libs[l], threads, P[p].ta, P[p].tb, P[p].M, P[p].N, P[p].K, A, B, C);
                warm += now_s() - t0;
            }
            for (int r = 0; r < repeat; r++) {
                const double t0 = now_s();
                run(&libs[l], threads, P[p].ta, P[p].tb, P[p].M, P[p].N, P[p].K, A, B, C);
                t[r] = now_s() - t0;
            }
            qsort(t, (size_t)repeat, sizeof *t, cmp_double);
            const double med = repeat % 2 ? t[repeat / 2] : 0.5 * (t[repeat / 2 - 1] + t[repeat / 2]);
            sum[mi * nl + l] += med;
            gf[p * nl + l] = fl / med / 1e9;
            fg_release(fg_a), fg_release(fg_b);
        }
    }
    fg_matmul_set_kernel(FG_MATMUL_AUTO);
    const double peak1 = fg_fma_peak_measure(500000, 400), peak = peak0 > peak1 ? peak0 : peak1;
    for (int p = 0; p < np; p++) {
        printf("%-5s %-12s %-4s %6d %6d %6d", P[p].model, P[p].name, P[p].op, P[p].M, P[p].N, P[p].K);
        for (int l = 0; l < nl; l++) printf(" | %12.1f %7.0f%%", gf[p * nl + l], 100 * gf[p * nl + l] / peak);
        printf("\n");
    }
    for (int mi = 0; mi < 3; mi++) {
        if (flops[mi] == 0) continue;
        printf("%-5s %-12s %-4s %20s", model_names[mi], "all", "", "");
        for (int l = 0; l < nl; l++) {
            const double g = flops[mi] / sum[mi * nl + l] / 1e9;
            printf(" | %12.1f %7.0f%%", g, 100 * g / peak);
        }
        printf("\n");
    }
    printf("fma peak: %.1f GFLOP/s float32 (%s, %d threads; the higher of %.1f before and %.1f after)\n", peak,
           fg_simd_name(fg_simd_active()), threads, peak0, peak1);
    free(sum), free(gf), free(A), free(B), free(C);
    return 0;
}
