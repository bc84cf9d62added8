/* cpu_runtime.c — the parts of the CPU runtime (ops/cpu.h) that answer for a kernel file: BLAS's
 * threads, oneDNN's presence and the flash kernels' profile. The thread pool, the SIMD level and
 * the FMA peak are the runtime's own files (ops/cpu_threadpool.c, ops/cpu_simd.c, ops/cpu_peak.c).
 * Programs, train/ and the Python shim call these, never ops/cpu/ or the BLAS library itself. */
#include "ops/cpu.h"

#include <cblas.h> /* openblas_set_num_threads, openblas_get_num_threads, openblas_get_corename */

#include "ops/cpu/dnnl_gemm.h"
#include "ops/cpu/flash_profile.h"

/* ---- BLAS ---- */

void fg_blas_set_threads(int n) { openblas_set_num_threads(n); }

int fg_blas_threads(void) { return openblas_get_num_threads(); }

const char *fg_blas_core_name(void) { return openblas_get_corename(); }

/* ---- oneDNN (ops/cpu/dnnl_gemm.c) ---- */

int fg_dnnl_available(void) { return fg__dnnl_available(); }

const char *fg_dnnl_version(void) { return fg__dnnl_version(); }

/* ---- the flash kernels' phase profile (ops/cpu/flash_profile.c) ---- */

void fg_flash_profile_start(void) { fg__flash_profile_start(); }

void fg_flash_profile_stop(fg_flash_profile *out) { fg__flash_profile_stop(out); }

const char *fg_flash_phase_name(fg_flash_phase p) { return fg__flash_phase_name(p); }
