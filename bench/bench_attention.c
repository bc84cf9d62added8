/* bench_attention.c — `flashgrad bench attention`: time and memory of naive against flash.
 *
 * For each N (and, in sweep mode, each block size pair) and each implementation, one child
 * process (fork) runs the measurement, so the process's peak resident memory (ru_maxrss) belongs
 * to that configuration alone. Inside the child:
 *   forward : fg_attention with Q, K, V requiring grad; the allocator's peak minus its baseline is
 *             the op's peak bytes (O, lse and what the op keeps for backward, plus scratch);
 *   backward: fg_backward from O with a random dO; peak bytes again.
 * Times are medians over --repeat runs after one warm-up run. FLOPs follow the FlashAttention
 * papers: forward 4·Nq·Nk·d per head, backward 2.5× forward, both halved when causal.
 *
 * --dtype float64 times the float64 kernels (the gradient checks' dtype) the same way, with dgemm
 * as the reference.
 *
 * The FMA peak: a child process measures the float32 FMA peak on the measuring processes' threads
 * as `flashgrad bench peak` does (12 independent FMA chains per thread, best of a few short
 * rounds; --peak G takes a figure measured on a quiet machine instead), and every line gives its
 * forward + backward GFLOP/s as a fraction of it — of half of it in float64 (a vector holds half
 * as many doubles, at the same FMA rate).
 *
 * The CPU reference: for each N, another child process times OpenBLAS's sgemm on the
 * products flash attention is made of, Nq×d by d×Nk (one per head, B·H of them, C written), in the
 * same run and environment, with the same thread count; the table then gives flash's forward +
 * backward GFLOP/s as a percentage of sgemm's. The machine line says which kernel OpenBLAS chose
 * (OPENBLAS_CORETYPE). --threads N sets both flashgrad's pool and OpenBLAS to N threads in the
 * measuring processes (default: each library's own default).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "bench/bench.h"
#include "ops/attention.h"
#include "ops/cpu.h"
#include "tensor/alloc.h"
#include "cli/attn_flags.h"
#include "cli/cli_util.h"

typedef struct {
    int64_t b, h, nq, nk, d;
    int causal;
    double dropout;
    int repeat;
    int threads; /* 0: the libraries' defaults */
    fg_device device;
    fg_dtype dtype; /* FG_F32 or FG_F64 */
    int profile;    /* --profile: one more flash forward + backward with the phase profile on */
} attn_cfg;

typedef struct {
    double fwd_ms, bwd_ms;
    double fwd_peak, bwd_peak; /* bytes above the baseline */
    double rss_kb;
    double fwd_cpu_ms, bwd_cpu_ms; /* CPU time of the process (all its threads), same runs as the medians */
    double sgemm_ms, sgemm_cpu_ms; /* the sgemm reference: B·H products Nq×d by d×Nk */
    double peak_gf;                /* the float32 FMA peak of the measuring threads */
    int pool_threads, blas_threads;
    int profiled;
    fg_flash_profile prof; /* the profiled forward + backward (--profile) */
    double prof_fwd_ms, prof_bwd_ms;
    int ok;
    char err[200];
} attn_result;

/* the measuring process's threads: --threads N for both libraries, else their defaults */
static void set_threads(const attn_cfg *c, attn_result *r) {
    if (c->threads > 0) {
        fg_pool_set_threads(c->threads);
        fg_blas_set_threads(c->threads);
    }
    r->pool_threads = fg_pool_threads();
    r->blas_threads = fg_blas_threads();
}

/* CPU seconds used by this process so far, all threads: user + system. Unlike wall time it does not
 * count the time other processes hold the cores, so flops per CPU-second is a per-core speed that
 * a shared machine disturbs less (a thread that spins waiting still counts). */
static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

/* the median of t[0..n) and the c[] of the same run */
static void median_pair(double *t, double *c, int n, double *tm, double *cm) {
    int best = 0;
    double *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) {
        *tm = t[0];
        *cm = c[0];
        return;
    }
    memcpy(sorted, t, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, fg_bench_cmp_double);
    *tm = sorted[n / 2];
    for (int i = 0; i < n; i++)
        if (t[i] == *tm) best = i;
    *cm = c[best];
    free(sorted);
}

static void measure(const attn_cfg *c, fg_attn_impl impl, int bq, int bk, attn_result *r) {
    set_threads(c, r);
    int64_t qs[4] = {c->b, c->h, c->nq, c->d}, ks[4] = {c->b, c->h, c->nk, c->d};
    fg_tensor *q = fg_rand_normal(c->dtype, c->device, 4, qs, 0, 1, 1, 0);
    fg_tensor *k = fg_rand_normal(c->dtype, c->device, 4, ks, 0, 1, 1, 1);
    fg_tensor *v = fg_rand_normal(c->dtype, c->device, 4, ks, 0, 1, 1, 2);
    fg_tensor *dout = fg_rand_normal(c->dtype, c->device, 4, qs, 0, 1, 1, 3);
    if (!q || !k || !v || !dout) {
        snprintf(r->err, sizeof r->err, "%s", fg_last_error());
        goto done;
    }
    fg_set_requires_grad(q, 1);
    fg_set_requires_grad(k, 1);
    fg_set_requires_grad(v, 1);
    fg_attn_opts o = fg_attn_defaults();
    o.impl = impl;
    o.causal = c->causal;
    o.dropout_p = c->dropout;
    o.seed = 7;
    o.block_q = bq;
    o.block_k = bk;
    int reps = c->repeat < 1 ? 1 : c->repeat;
    double *tf = calloc((size_t)reps, sizeof *tf), *tb = calloc((size_t)reps, sizeof *tb);
    double *cf = calloc((size_t)reps, sizeof *cf), *cb = calloc((size_t)reps, sizeof *cb);
    if (!tf || !tb || !cf || !cb) {
        snprintf(r->err, sizeof r->err, "out of memory");
        reps = 0;
    }
    for (int it = -1; it < reps; it++) { /* it = -1: warm-up (fills the allocator cache) */
        fg_zero_grad(q);
        fg_zero_grad(k);
        fg_zero_grad(v);
        size_t base = fg_alloc_get_stats(c->device).current;
        fg_alloc_reset_peak(c->device);
        double c0 = cpu_now(), t0 = fg_now();
        fg_tensor *out = fg_attention(q, k, v, &o, NULL);
        fg_device_sync(c->device);
        double t1 = fg_now(), c1 = cpu_now();
        if (!out) {
            snprintf(r->err, sizeof r->err, "%s", fg_last_error());
            break;
        }
        double fpeak = (double)(fg_alloc_get_stats(c->device).peak - base);
        size_t base2 = fg_alloc_get_stats(c->device).current;
        fg_alloc_reset_peak(c->device);
        double c2 = cpu_now(), t2 = fg_now();
        fg_status st = fg_backward(out, dout);
        fg_device_sync(c->device);
        double t3 = fg_now(), c3 = cpu_now();
        double bpeak = (double)(fg_alloc_get_stats(c->device).peak - base2);
        fg_release(out);
        if (st != FG_OK) {
            snprintf(r->err, sizeof r->err, "%s", fg_last_error());
            break;
        }
        if (it >= 0) {
            tf[it] = (t1 - t0) * 1e3;
            tb[it] = (t3 - t2) * 1e3;
            cf[it] = (c1 - c0) * 1e3;
            cb[it] = (c3 - c2) * 1e3;
            r->fwd_peak = fpeak;
            r->bwd_peak = bpeak;
        }
        if (it == reps - 1) r->ok = 1;
    }
    if (r->ok && c->profile && impl == FG_ATTN_FLASH && c->device == FG_CPU) {
        /* the phase profile, apart from the timed runs (its time stamps cost a little) */
        fg_zero_grad(q);
        fg_zero_grad(k);
        fg_zero_grad(v);
        fg_flash_profile_start();
        const double t0 = fg_now();
        fg_tensor *out = fg_attention(q, k, v, &o, NULL);
        const double t1 = fg_now();
        const fg_status st = out ? fg_backward(out, dout) : FG_ERR_ARG;
        const double t2 = fg_now();
        fg_flash_profile_stop(&r->prof);
        fg_release(out);
        r->profiled = st == FG_OK;
        r->prof_fwd_ms = (t1 - t0) * 1e3;
        r->prof_bwd_ms = (t2 - t1) * 1e3;
    }
    if (r->ok) {
        median_pair(tf, cf, reps, &r->fwd_ms, &r->fwd_cpu_ms);
        median_pair(tb, cb, reps, &r->bwd_ms, &r->bwd_cpu_ms);
    }
    free(tf);
    free(tb);
    free(cf);
    free(cb);
done:
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(dout);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    r->rss_kb = (double)ru.ru_maxrss;
}

/* The sgemm reference: C (Nq × Nk) = A (Nq × d) · Bm (d × Nk), B·H times per repetition (one
 * product per head, as attention does), after one untimed repetition that touches every page;
 * median over --repeat. Inputs uniform in [-1, 1). */
static void measure_sgemm(const attn_cfg *c, attn_result *r) {
    set_threads(c, r);
    const int f64 = c->dtype == FG_F64;
    const size_t es = f64 ? sizeof(double) : sizeof(float);
    const size_t na = (size_t)(c->nq * c->d), nb = (size_t)(c->d * c->nk), nc = (size_t)(c->nq * c->nk);
    void *A = fg_alloc(FG_CPU, na * es), *Bm = fg_alloc(FG_CPU, nb * es);
    void *C = fg_alloc(FG_CPU, nc * es);
    const int reps = c->repeat < 1 ? 1 : c->repeat;
    double *t = calloc((size_t)reps, sizeof *t), *cp = calloc((size_t)reps, sizeof *cp);
    if (!A || !Bm || !C || !t || !cp) {
        snprintf(r->err, sizeof r->err, "sgemm reference: out of memory");
        goto done;
    }
    uint64_t s = 1;
    for (size_t i = 0; i < na + nb; i++) {
        const double x = (double)((s = s * 6364136223846793005ULL + 1) >> 40) / 8388608.0 - 1;
        void *base = i < na ? A : Bm;
        const size_t at = i < na ? i : i - na;
        if (f64)
            ((double *)base)[at] = x;
        else
            ((float *)base)[at] = (float)x;
    }
    for (int it = -1; it < reps; it++) {
        const double c0 = cpu_now(), t0 = fg_now();
        for (int64_t p = 0; p < c->b * c->h; p++)
            if (f64)
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c->nq, (int)c->nk, (int)c->d, 1.0, A,
                            (int)c->d, Bm, (int)c->nk, 0.0, C, (int)c->nk);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c->nq, (int)c->nk, (int)c->d, 1.0f, A,
                            (int)c->d, Bm, (int)c->nk, 0.0f, C, (int)c->nk);
        if (it >= 0) {
            t[it] = (fg_now() - t0) * 1e3;
            cp[it] = (cpu_now() - c0) * 1e3;
        }
    }
    median_pair(t, cp, reps, &r->sgemm_ms, &r->sgemm_cpu_ms);
    r->ok = 1;
done:
    free(t);
    free(cp);
    if (A) fg_free(FG_CPU, A);
    if (Bm) fg_free(FG_CPU, Bm);
    if (C) fg_free(FG_CPU, C);
}

/* The float32 FMA peak on the measuring threads (fg_fma_peak_measure, ops/cpu/peak.h: 12 independent
 * vector FMA chains per thread, the best of several short rounds); none without vector FMAs. */
static void measure_peak(const attn_cfg *c, attn_result *r) {
    set_threads(c, r);
    if (fg_simd_active() != FG_SIMD_SCALAR) r->peak_gf = fg_fma_peak_measure(4000000L, 8);
    r->ok = 1;
}

/* Run one measurement in a child process; the result comes back through a pipe. impl -1: the
 * sgemm reference; -2: the FMA peak. */
static void measure_isolated(const attn_cfg *c, fg_attn_impl impl, int bq, int bk, attn_result *r) {
    memset(r, 0, sizeof *r);
    int fd[2];
    if (pipe(fd) != 0) {
        snprintf(r->err, sizeof r->err, "pipe: %s", strerror(errno));
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(r->err, sizeof r->err, "fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return;
    }
    if (pid == 0) {
        close(fd[0]);
        attn_result cr;
        memset(&cr, 0, sizeof cr);
        if ((int)impl == -2)
            measure_peak(c, &cr);
        else if ((int)impl < 0)
            measure_sgemm(c, &cr);
        else
            measure(c, impl, bq, bk, &cr);
        ssize_t w = write(fd[1], &cr, sizeof cr);
        _exit(w == (ssize_t)sizeof cr ? 0 : 1);
    }
    close(fd[1]);
    ssize_t got = read(fd[0], r, sizeof *r);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != (ssize_t)sizeof *r) {
        memset(r, 0, sizeof *r);
        if (WIFSIGNALED(status))
            snprintf(r->err, sizeof r->err, "measurement process died (signal %d; out of memory?)", WTERMSIG(status));
        else
            snprintf(r->err, sizeof r->err, "measurement process failed");
    }
}

/* --profile: where the flash forward's and backward's thread time went, phase by phase; the tile
 * products also as GFLOP/s per thread and as a fraction of one thread's share of the peak. The last
 * line is the time outside every phase: the pool's hand-offs, threads waiting for the last items,
 * autograd and the op's own setup. */
static void print_profile(const attn_result *r, double peak) {
    const int T = r->pool_threads > 0 ? r->pool_threads : 1;
    const double total = (r->prof_fwd_ms + r->prof_bwd_ms) * 1e-3 * T, thread_peak = peak / T;
    printf("  profile (one more forward %.1f ms + backward %.1f ms with the phase clock on; thread time of %d "
           "threads):\n",
           r->prof_fwd_ms, r->prof_bwd_ms, T);
    printf("    %-36s %10s %7s %9s %7s\n", "phase", "thread ms", "share", "GFLOP/s", "%peak");
    double in_phases = 0;
    for (int p = 0; p < FG_FLASH_PHASE_COUNT; p++) {
        const double sec = r->prof.seconds[p], fl = r->prof.flops[p];
        in_phases += sec;
        if (sec <= 0) continue;
        printf("    %-36s %10.2f %6.1f%%", fg_flash_phase_name((fg_flash_phase)p), sec * 1e3, 100.0 * sec / total);
        if (fl > 0) {
            const double gf = fl / sec / 1e9;
            printf(" %9.1f", gf);
            if (thread_peak > 0) printf(" %6.0f%%", 100.0 * gf / thread_peak);
        }
        printf("\n");
    }
    printf("    %-36s %10.2f %6.1f%%\n", "outside the phases", (total - in_phases) * 1e3, 100.0 * (total - in_phases) / total);
}

static void usage(FILE *f) {
    fprintf(f, "usage: flashgrad bench attention [--n N1,N2,...] [--nk M] [--d D] [--b B] [--h H] [--causal]\n"
               "         [--dropout P] [--device cpu|cuda] [--repeat R] [--block-q N] [--block-k N]\n"
               "         [--sweep-blocks S1,S2,...] [--impl naive|flash|both] [--max-naive-gib G] [--csv FILE]\n"
               "         [--threads T] [--no-sgemm] [--dtype float32|float64] [--peak GFLOPS]\n"
               "  times forward and backward of naive and flash attention (float32, or --dtype float64), median\n"
               "  of R repeats;\n"
               "  GFLOP/s: forward 4*Nq*Nk*d per head, backward 2.5x, halved when causal;\n"
               "  peak bytes from flashgrad's allocation counter; peak RSS of a process per configuration.\n"
               "  --nk defaults to N. --sweep-blocks times flash for every (block_q, block_k) pair of the list.\n"
               "  Naive is skipped when its score matrices would exceed --max-naive-gib (default 6).\n"
               "  CPU: also times OpenBLAS sgemm on the same-shaped products (Nq x d by d x Nk, B*H of them)\n"
               "  in the same run (--no-sgemm: don't) and prints flash's forward+backward GFLOP/s against it.\n"
               "  --threads T: T threads for flashgrad's pool and for OpenBLAS (default: their defaults).\n"
               "  --profile: after each flash line, one more forward + backward with the CPU kernels' phase\n"
               "  clock on: thread time per phase (products, softmax, exp, dS, packing, ...) and outside them.\n"
               "  %%peak: forward+backward GFLOP/s against the float32 FMA peak of the measuring threads (half of\n"
               "  it in float64), measured at the start like `flashgrad bench peak`, or --peak G (GFLOP/s float32).\n");
}

int fg_bench_attention(int argc, char **argv) {
    attn_cfg c = {.b = 1, .h = 1, .d = 64, .repeat = 3, .device = FG_CPU, .dtype = FG_F32};
    double peak_given = 0;
    int64_t ns[64];
    int nn = 0, nsweep = 0, sweep[16], bq = 0, bk = 0, want_naive = 1, want_flash = 1, want_sgemm = 1;
    int64_t nk_fixed = 0;
    double max_naive_gib = 6.0;
    const char *csv = NULL;
    fg_attn_flags af;
    fg_attn_flags_init(&af, "bench attention",
                       FG_AF_BIT(FG_AF_CAUSAL) | FG_AF_BIT(FG_AF_DROPOUT) | FG_AF_BIT(FG_AF_BLOCK_Q) |
                           FG_AF_BIT(FG_AF_BLOCK_K) | FG_AF_BIT(FG_AF_IMPL) | FG_AF_BIT(FG_AF_IMPL_BOTH) |
                           FG_AF_BIT(FG_AF_DEVICE));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        const int af_rc = fg_attn_flags_take(&af, argc, argv, &i);
        if (af_rc == 2) return 2;
        if (af_rc == 1) continue;
        if (!strcmp(a, "--no-sgemm")) {
            want_sgemm = 0;
            continue;
        }
        if (!strcmp(a, "--profile")) {
            c.profile = 1;
            continue;
        }
        if (!val) {
            fprintf(stderr, "bench attention: %s needs a value (see --help)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--n")) {
            if (fg_parse_int_list(val, ns, 64, &nn, 1, 1 << 20) != 0) {
                fprintf(stderr, "bench attention: --n wants a comma-separated list of positive integers, got '%s'\n",
                        val);
                return 2;
            }
        } else if (!strcmp(a, "--sweep-blocks")) {
            int64_t tmp[16];
            if (fg_parse_int_list(val, tmp, 16, &nsweep, 1, 4096) != 0) {
                fprintf(stderr, "bench attention: --sweep-blocks wants a list of positive integers, got '%s'\n", val);
                return 2;
            }
            for (int s = 0; s < nsweep; s++) sweep[s] = (int)tmp[s];
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(val, "float32"))
                c.dtype = FG_F32;
            else if (!strcmp(val, "float64"))
                c.dtype = FG_F64;
            else {
                fprintf(stderr, "bench attention: --dtype must be float32 or float64, got '%s'\n", val);
                return 2;
            }
        } else if (!strcmp(a, "--peak")) {
            if (fg_parse_double(val, &peak_given) || !(peak_given > 0) || peak_given > 1e9) {
                fprintf(stderr, "bench attention: --peak must be a positive GFLOP/s figure, got '%s'\n", val);
                return 2;
            }
        } else if (!strcmp(a, "--csv")) {
            if (!*val) return fprintf(stderr, "bench attention: --csv: empty path\n"), 2;
            csv = val;
        } else if (!strcmp(a, "--max-naive-gib")) {
            if (fg_parse_double(val, &max_naive_gib) || max_naive_gib <= 0) {
                fprintf(stderr, "bench attention: --max-naive-gib must be positive, got '%s'\n", val);
                return 2;
            }
        } else {
            int64_t x;
            int64_t *dst = NULL;
            int ix = 0;
            if (!strcmp(a, "--d"))
                dst = &c.d;
            else if (!strcmp(a, "--b"))
                dst = &c.b;
            else if (!strcmp(a, "--h"))
                dst = &c.h;
            else if (!strcmp(a, "--nk"))
                dst = &nk_fixed;
            else if (!strcmp(a, "--repeat"))
                ix = 1;
            else if (!strcmp(a, "--threads"))
                ix = 4;
            else {
                fprintf(stderr, "bench attention: unknown option '%s' (see --help)\n", a);
                return 2;
            }
            if (fg_parse_int(val, &x) || x < 1 || x > (1 << 24)) {
                fprintf(stderr, "bench attention: %s must be a positive integer, got '%s'\n", a, val);
                return 2;
            }
            if (ix == 4 && x > FG_POOL_MAX_THREADS) {
                fprintf(stderr, "bench attention: --threads: %lld is above the pool's %d threads\n", (long long)x,
                        FG_POOL_MAX_THREADS);
                return 2;
            }
            if (dst)
                *dst = x;
            else if (ix == 1)
                c.repeat = (int)x;
            else if (ix == 4) {
                if (x > FG_POOL_MAX_THREADS) {
                    fprintf(stderr, "bench attention: --threads must be at most %d, got '%s'\n", FG_POOL_MAX_THREADS,
                            val);
                    return 2;
                }
                c.threads = (int)x;
            }
        }
    }
    fg_attn_opts ao = fg_attn_defaults();
    if (fg_attn_flags_apply(&af, &ao, &c.device)) return 2;
    c.causal = ao.causal;
    c.dropout = ao.dropout_p;
    if (af.f[FG_AF_BLOCK_Q].given) bq = ao.block_q;
    if (af.f[FG_AF_BLOCK_K].given) bk = ao.block_k;
    if (af.f[FG_AF_IMPL].given && strcmp(af.f[FG_AF_IMPL].s, "both")) {
        want_naive = ao.impl == FG_ATTN_NAIVE;
        want_flash = ao.impl == FG_ATTN_FLASH;
    }
    if (nn == 0) {
        static const int64_t def[] = {256, 512, 1024, 2048, 4096};
        nn = 5;
        memcpy(ns, def, sizeof def);
    }
    /* 2 in a build without CUDA (a usage error, as for the other commands), 1 when no GPU is usable */
    const int drc = fg_attn_device_ready("bench attention", c.device, NULL);
    if (drc) return drc;
    FILE *out = NULL;
    fg_csv_file csvf;
    if (csv) {
        out = fg_csv_open_atomic(&csvf, csv);
        if (!out) {
            fprintf(stderr, "bench attention: --csv: %s\n", fg_last_error());
            return 1;
        }
        fprintf(out, "impl,b,h,nq,nk,d,causal,dropout,block_q,block_k,fwd_ms,bwd_ms,fwd_gflops,bwd_gflops,"
                     "fwd_peak_bytes,bwd_peak_bytes,peak_rss_kb,device,fwdbwd_gflops,sgemm_gflops,threads,simd,"
                     "fwdbwd_gflops_per_cpu_s,sgemm_gflops_per_cpu_s,dtype,peak_gflops,fwdbwd_frac_peak\n");
    }
    if (c.device != FG_CPU) want_sgemm = 0;
    int n_failed = 0, n_done = 0; /* measurements that failed, and that gave a row */
    const int f64 = c.dtype == FG_F64;
    const char *dtn = f64 ? "float64" : "float32";
    fg_print_machine_line(stdout);
    fg_blas_hint(stdout);
    fg_simd_level tiles = fg_simd_active();
    if (f64 && tiles == FG_SIMD_AVX512) tiles = FG_SIMD_AVX2; /* the float64 tiles have AVX2 forms only */
    printf("flashgrad: %s flash tiles use %s (FG_SIMD to cap); %d threads (pool) and %d OpenBLAS threads in the "
           "measuring processes%s\n",
           dtn, fg_simd_name(tiles), c.threads > 0 ? c.threads : fg_pool_threads(),
           c.threads > 0 ? c.threads : fg_blas_threads(), c.threads > 0 ? " (--threads)" : "");
    double peak32 = peak_given; /* float32 GFLOP/s; the dtype's peak is half of it in float64 */
    if (c.device == FG_CPU) {
        if (peak32 <= 0) {
            attn_result pr;
            measure_isolated(&c, (fg_attn_impl)-2, 0, 0, &pr);
            peak32 = pr.ok ? pr.peak_gf : 0;
        }
        const char *how = peak_given > 0 ? "--peak" : "measured now: low when others share the cores";
        if (peak32 > 0 && f64)
            printf("peak: float64 FMA peak %.1f GFLOP/s, half the float32 FMA peak %.1f GFLOP/s of the measuring "
                   "threads (%s)\n",
                   peak32 / 2, peak32, how);
        else if (peak32 > 0)
            printf("peak: float32 FMA peak %.1f GFLOP/s of the measuring threads (%s)\n", peak32, how);
    }
    const double peak = f64 ? peak32 / 2 : peak32;
    printf("%-6s %6s %6s %4s %4s %4s | %9s %9s | %8s %8s %8s %5s | %12s %12s | %10s\n", "impl", "Nq", "Nk", "d", "bq",
           "bk", "fwd ms", "bwd ms", "fwd GF/s", "bwd GF/s", "f+b GF/s", "%peak", "fwd peak B", "bwd peak B",
           "peak RSS");
    int n_pairs = nsweep ? nsweep * nsweep : 1;
    for (int in = 0; in < nn; in++) {
        c.nq = ns[in];
        c.nk = nk_fixed ? nk_fixed : ns[in];
        double flops = 4.0 * (double)c.nq * (double)c.nk * (double)c.d * (double)(c.b * c.h);
        if (c.causal) flops /= 2;
        double sgemm_gf = 0, flash_gf = 0, sgemm_cgf = 0, flash_cgf = 0; /* wall, per CPU-second */
        if (want_sgemm) {
            attn_result r;
            measure_isolated(&c, (fg_attn_impl)-1, 0, 0, &r);
            const double sf = 2.0 * (double)c.nq * (double)c.nk * (double)c.d * (double)(c.b * c.h);
            if (r.ok) {
                sgemm_gf = sf / (r.sgemm_ms * 1e-3) / 1e9;
                sgemm_cgf = r.sgemm_cpu_ms > 0 ? sf / (r.sgemm_cpu_ms * 1e-3) / 1e9 : 0;
            } else {
                printf("sgemm  %6lld %6lld %4lld | failed: %s\n", (long long)c.nq, (long long)c.nk, (long long)c.d,
                       r.err);
                n_failed++;
            }
        }
        for (int impl = 0; impl < 2; impl++) {
            if ((impl == FG_ATTN_NAIVE && !want_naive) || (impl == FG_ATTN_FLASH && !want_flash)) continue;
            for (int pi = 0; pi < (impl == FG_ATTN_FLASH ? n_pairs : 1); pi++) {
                int ibq = nsweep ? sweep[pi / nsweep] : bq, ibk = nsweep ? sweep[pi % nsweep] : bk;
                attn_result r;
                double naive_bytes = 3.0 * (double)c.nq * (double)c.nk * (f64 ? 8.0 : 4.0) * (double)(c.b * c.h);
                if (impl == FG_ATTN_NAIVE && naive_bytes > max_naive_gib * 1073741824.0) {
                    printf("%-6s %6lld %6lld %4lld %4s %4s | skipped: its score matrices need ~%.1f GiB "
                           "(--max-naive-gib)\n",
                           "naive", (long long)c.nq, (long long)c.nk, (long long)c.d, "-", "-",
                           naive_bytes / 1073741824.0);
                    continue;
                }
                measure_isolated(&c, (fg_attn_impl)impl, ibq, ibk, &r);
                const char *name = impl == FG_ATTN_NAIVE ? "naive" : "flash";
                if (!r.ok) {
                    printf("%-6s %6lld %6lld %4lld | failed: %s\n", name, (long long)c.nq, (long long)c.nk,
                           (long long)c.d, r.err);
                    n_failed++;
                    continue;
                }
                n_done++;
                double gf = flops / (r.fwd_ms * 1e-3) / 1e9, gb = 2.5 * flops / (r.bwd_ms * 1e-3) / 1e9;
                double gfb = 3.5 * flops / ((r.fwd_ms + r.bwd_ms) * 1e-3) / 1e9;
                double cgfb =
                    r.fwd_cpu_ms + r.bwd_cpu_ms > 0 ? 3.5 * flops / ((r.fwd_cpu_ms + r.bwd_cpu_ms) * 1e-3) / 1e9 : 0;
                if (impl == FG_ATTN_FLASH && pi == 0) {
                    flash_gf = gfb;
                    flash_cgf = cgfb;
                }
                char sbq[16], sbk[16];
                snprintf(sbq, sizeof sbq, "%d", impl == FG_ATTN_FLASH ? ibq : 0);
                snprintf(sbk, sizeof sbk, "%d", impl == FG_ATTN_FLASH ? ibk : 0);
                char spk[16] = "-";
                if (peak > 0) snprintf(spk, sizeof spk, "%.0f%%", 100.0 * gfb / peak);
                printf("%-6s %6lld %6lld %4lld %4s %4s | %9.3f %9.3f | %8.1f %8.1f %8.1f %5s | %12.0f %12.0f | %7.0f "
                       "MiB\n",
                       name, (long long)c.nq, (long long)c.nk, (long long)c.d,
                       impl == FG_ATTN_FLASH ? (ibq ? sbq : "def") : "-",
                       impl == FG_ATTN_FLASH ? (ibk ? sbk : "def") : "-", r.fwd_ms, r.bwd_ms, gf, gb, gfb, spk,
                       r.fwd_peak, r.bwd_peak, r.rss_kb / 1024);
                if (r.profiled) print_profile(&r, peak);
                fflush(stdout);
                if (out)
                    fprintf(
                        out,
                        "%s,%lld,%lld,%lld,%lld,%lld,%d,%g,%d,%d,%.4f,%.4f,%.2f,%.2f,%.0f,%.0f,%.0f,%s,%.2f,%.2f,%d,%s,"
                        "%.2f,%.2f,%s,%.2f,%.4f\n",
                        name, (long long)c.b, (long long)c.h, (long long)c.nq, (long long)c.nk, (long long)c.d,
                        c.causal, c.dropout, impl == FG_ATTN_FLASH ? ibq : 0, impl == FG_ATTN_FLASH ? ibk : 0, r.fwd_ms,
                        r.bwd_ms, gf, gb, r.fwd_peak, r.bwd_peak, r.rss_kb, fg_device_name(c.device), gfb, sgemm_gf,
                        r.pool_threads, c.device == FG_CPU ? fg_simd_name(tiles) : "-", cgfb, sgemm_cgf, dtn, peak,
                        peak > 0 ? gfb / peak : 0.0);
            }
        }
        if (sgemm_gf > 0) {
            printf("%s  %6lld %6lld %4lld | OpenBLAS %s, %lld products %lldx%lld by %lldx%lld: %.1f GFLOP/s",
                   f64 ? "dgemm" : "sgemm", (long long)c.nq, (long long)c.nk, (long long)c.d, fg_blas_core_name(),
                   (long long)(c.b * c.h), (long long)c.nq, (long long)c.d, (long long)c.d, (long long)c.nk, sgemm_gf);
            if (peak > 0) printf(" (%.0f%% of peak)", 100.0 * sgemm_gf / peak);
            if (flash_gf > 0)
                printf("; flash fwd+bwd%s = %.0f%% of it", c.causal ? " (causal)" : "", 100.0 * flash_gf / sgemm_gf);
            printf("\n");
            if (flash_cgf > 0 && sgemm_cgf > 0)
                printf("per CPU-second (what other processes on the machine disturb less): flash fwd+bwd %.1f, sgemm "
                       "%.1f GFLOP/s: %.0f%%\n",
                       flash_cgf, sgemm_cgf, 100.0 * flash_cgf / sgemm_cgf);
            fflush(stdout);
        }
    }
    if (out && fg_csv_commit(&csvf) != 0) {
        fprintf(stderr, "bench attention: could not finish writing %s: %s\n", csv, fg_last_error());
        return 1;
    }
    if (n_failed) {
        fprintf(stderr, "bench attention: %d of %d measurements failed (see the lines above)%s\n", n_failed,
                n_failed + n_done, csv && n_done ? "; the CSV holds the others" : "");
        return 1;
    }
    return 0;
}
