/* dnnl_gemm.c — fg_dnnl_sgemm over oneDNN's dnnl_sgemm (see dnnl_gemm.h). */
#include "ops/cpu/dnnl_gemm.h"

#ifdef FG_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>
#include <stdio.h>

int fg_dnnl_available(void) { return 1; }

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

const char *fg_dnnl_version(void) {
    static char buf[96];
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, sizeof buf, "%d.%d.%d (%s, isa %s)", v->major, v->minor, v->patch,
             v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
             : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                  : "other runtime",
             isa_name(dnnl_get_effective_cpu_isa()));
    return buf;
}

int fg_dnnl_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int threads) {
    if (threads < 1) threads = 1;
    /* this thread's nthreads-var is the team oneDNN's loops get; the caller's own OpenMP code on
     * this thread gets its setting back afterwards */
    const int was = omp_get_max_threads();
    if (was != threads) omp_set_num_threads(threads);
    const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    if (was != threads) omp_set_num_threads(was);
    return st != dnnl_success;
}

#else

int fg_dnnl_available(void) { return 0; }

const char *fg_dnnl_version(void) { return "none"; }

int fg_dnnl_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc, int threads) {
    (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta;
    (void)C, (void)ldc, (void)threads;
    return 1;
}

#endif
