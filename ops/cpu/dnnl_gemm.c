/* dnnl_gemm.c — fg_dnnl_sgemm over oneDNN's dnnl_sgemm (see dnnl_gemm.h). */
#include "ops/cpu/dnnl_gemm.h"

#ifdef FG_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>

int fg__dnnl_available(void) { return 1; }

/* The widest instruction set oneDNN's kernels may use on this CPU. */
static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch ((int)isa) {
    case dnnl_cpu_isa_sse41:
        return "sse4.1";
    case dnnl_cpu_isa_avx:
        return "avx";
    case dnnl_cpu_isa_avx2:
        return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
        return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
        return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
        return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
        return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
        return "avx512_core_amx";
    default:
        return "other";
    }
}

const char *fg__dnnl_version(void) {
    static char buf[96];
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "%d.%d.%d (%s, isa %s)", v->major, v->minor, v->patch,
             v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
             : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                  : "other runtime",
             isa_name(dnnl_get_effective_cpu_isa()));
    return buf;
}

/* Signals while oneDNN's kernels run. Its generated float32 GEMM kernels (AVX2 and AVX-512), for a
 * product deeper than the few dozen rows of K their stack frame holds, point the stack pointer into
 * a heap workspace for the whole kernel. A signal handled on that thread then has its frame (the
 * CPU state, some kilobytes) written by the kernel below that pointer: over the workspace and
 * the heap block in front of it, so the product can go wrong and malloc later aborts ("corrupted
 * size vs. prev_size"). Hence no signal with a handler may be delivered to a thread inside
 * dnnl_sgemm: the calling thread blocks every asynchronous signal for the call, and one that
 * arrives meanwhile goes to another thread of the process or waits until the call returns (a
 * fraction of a second). Synchronous ones (a fault in the call itself) stay open. */
static void async_signals(sigset_t *s) {
    sigfillset(s);
    static const int sync[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS};
    for (size_t i = 0; i < sizeof sync / sizeof sync[0]; i++) sigdelset(s, sync[i]);
}

/* libgomp's entry for a parallel region (what `#pragma omp parallel` compiles to): this file is
 * not built with -fopenmp. */
extern void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);

/* Each worker of an OpenMP team blocks the asynchronous signals for good (the master, the caller,
 * has them blocked for the call already): its threads run only OpenMP work. */
static void block_in_team(void *set) {
    if (omp_get_thread_num() != 0) pthread_sigmask(SIG_BLOCK, set, NULL);
}

int fg_dnnl_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int threads) {
    if (threads < 1) threads = 1;
    sigset_t block, was_mask;
    async_signals(&block);
    pthread_sigmask(SIG_BLOCK, &block, &was_mask);
    /* this thread's nthreads-var is the team oneDNN's loops get; the caller's own OpenMP code on
     * this thread gets its setting back afterwards */
    const int was = omp_get_max_threads();
    if (was != threads) omp_set_num_threads(threads);
    /* threads > 1: oneDNN's kernels run on the team's workers too. A worker that this region
     * starts inherits the caller's (blocked) mask; one libgomp already had blocks them here, as
     * libgomp hands the same master the same workers for the same team size. */
    if (threads > 1) GOMP_parallel(block_in_team, &block, (unsigned)threads, 0);
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    if (was != threads) omp_set_num_threads(was);
    pthread_sigmask(SIG_SETMASK, &was_mask, NULL);
    return st != dnnl_success;
}

#else

int fg__dnnl_available(void) { return 0; }

const char *fg__dnnl_version(void) { return "none"; }

int fg_dnnl_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int threads) {
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta;
    (void)C, (void)ldc, (void)threads;
    return 1;
}

#endif
