/* matmul.c — the CPU's GEMM kernels (ops/kernels.h's FG_KERNELS_MATMUL): the product, blocked over
 * the library's thread pool and run by oneDNN, OpenBLAS or the register-blocked float32 tile kernel
 * (the rule and the blocks are below), and linear's bias gradient (the column sums). The ops' shells,
 * and how operands reach the GEMM without copies, are in ops/matmul.c; the GPU's kernels in
 * cuda/matmul.cu. */
#include <cblas.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/cpu/dnnl_gemm.h"
#include "ops/cpu/flash_tiles.h" /* fg_flash_x86_f32.transpose */
#include "ops/cpu/kernel.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/smallgemm.h"
#include "ops/cpu/threadpool.h"
#include "ops/cpu/vmath.h" /* fg_par_range */
#include "ops/kernels_cpu.h"
#include "ops/ops.h" /* fg_matmul_kernel */
#include "tensor/alloc.h"

/* ---- the CPU GEMM, on the library's thread pool ----
 *
 * Every product is split over blocks of C, one pool item per block (ops/cpu/threadpool.h); the
 * kernel runs single-threaded inside an item, so flashgrad's threads are the only ones (BLAS's
 * own threads, spinning between calls, would fight the pool's on a 2-core machine: measured, ~30%
 * of a training step went to sched_yield; oneDNN's OpenMP team, handed whole products while the
 * pool waits, loses to the per-block calls on small products and ties on big ones). Each block is
 * computed by one of three kernels:
 *
 *   dnnl: oneDNN's sgemm (ops/cpu/dnnl_gemm.h), when the build has oneDNN.
 *   blas: OpenBLAS's sgemm/dgemm.
 *   tile: ops/cpu/smallgemm.h's register-blocked kernel (AVX2+FMA or AVX-512), which reads B'
 *         row-major straight from the cache without repacking it. A transposed B (linear's
 *         forward: x @ wᵀ) is first transposed once into scratch. Each element of C is one sum in
 *         index order (smallgemm.h), so the result does not depend on the block split, the thread
 *         count, the SIMD level, or the BLAS build.
 *
 * The rule (FG_MATMUL_AUTO), from `flashgrad bench matmul` over every product of a GPT's training
 * step from nanoGPT's CPU model to GPT-2 small's shape (with each kernel single-threaded per block,
 * timed by CPU time, and on the pool):
 *   - float64: blas.
 *   - float32 with oneDNN: dnnl, except
 *       - a small weight gradient over many rows (A read transposed, K >= GEMM_BLAS_MIN_K,
 *         M·N <= GEMM_BLAS_MAX_MN: a narrow model's dW = doutᵀ @ x), where oneDNN's blocks are
 *         narrow (one block, one thread, when M and N are small): tile on an AVX-512 CPU (ahead of
 *         OpenBLAS's AVX-512 kernels too, whose 128-row blocks leave a thread idle when M is 128),
 *         else, when M >= GEMM_BLAS_MIN_M, blas when OpenBLAS's kernels are as wide as the CPU's
 *         vectors (blas_full_width: always on AVX2 CPUs), else dnnl. OpenBLAS runs its AVX2
 *         kernels on an AVX-512 CPU when OPENBLAS_CORETYPE says so (or it does not know the CPU):
 *         half the CPU's peak, behind both others;
 *       - on an AVX-512 CPU, a narrow output (N <= GEMM_TILE_NARROW_N, B' not transposed or
 *         transposed into scratch, A as stored: a narrow model's products into C = 128 columns,
 *         an LM head over a character vocabulary): tile, as fast as oneDNN or faster at N = 128
 *         and at N = 65 (whose last column the tile kernel runs as a strip of rows).
 *     On AVX2 CPUs oneDNN is ahead of the tile kernel at every shape measured, small ones
 *     included. Both tile rules follow the CPU (fg_simd_detect), not the level FG_SIMD caps the
 *     kernels to, so capping the level keeps the choice, and the tile kernel's bits are the same
 *     on every level.
 *   - float32 without oneDNN: tile where B' fits in the L2 cache (at most 3/4 of a core's L2;
 *     there it is ahead of OpenBLAS), else blas.
 *   - FG_MATMUL (or fg_matmul_set_kernel) forces one kernel where it can run.
 *
 * Blocks. oneDNN is faster the larger one call is: its grid has as few blocks as give each of the
 * machine's CPUs one (dnnl_grid; full-height column blocks for some x @ wᵀ products on AVX-512 CPUs:
 * dnnl_grid_bt). BLAS's blocks are GEMM_BLAS_ROWS rows. Both follow from the shape
 * (and, for oneDNN, the machine's CPU count), never from the thread count: a block's result can
 * depend on the block's size (a kernel's tail rows may sum differently; oneDNN's do), so a split
 * that followed the thread count would make the bits follow it too. The tile kernel's blocks
 * follow the thread count (its bits do not depend on the split).
 *
 * K split. A oneDNN product with A read transposed (a weight gradient, dW = doutᵀ @ x, whose K is
 * the batch's rows) and no bias, for which dnnl_grid gives S >= 2 blocks (other than full-width
 * blocks of at least GEMM_KSPLIT_MAX_ROWS rows, where oneDNN is as fast as on the whole), with K at
 * least S · GEMM_KSPLIT_MIN_K and (S − 1) · M · N floats at most GEMM_KSPLIT_MAX_SCRATCH bytes, is
 * cut into S pieces of K instead (gemm_ksplit): piece p computes the whole of C over its range of K
 * (piece 0 into C with the caller's beta, the others into scratch with beta 0), one pool item each,
 * then C += piece 1 + piece 2 + ... element by element in piece order. Single-threaded, oneDNN's
 * transposed-A kernel keeps its speed when K is halved but loses much of it when M or N is (unless
 * the blocks stay tall and full-width), and the fold costs a pass over C per extra piece. S and the
 * pieces follow the shape and the machine's CPU count as the grid does, so the bits do not depend
 * on the thread count; the scratch comes from the caching allocator (fg_alloc), so a warm training
 * step takes nothing new from the system. */

#define GEMM_TILE_ROWS 96          /* past this many rows per thread, the tile kernel takes two items per thread */
#define GEMM_BLAS_ROWS 128         /* rows per item for BLAS (it repacks B' in every call) */
#define GEMM_DNNL_ROWS 256         /* fewest rows per item for oneDNN */
#define GEMM_BLAS_MIN_K 512        /* a transposed-A product at least this deep (K), */
#define GEMM_BLAS_MIN_M 128        /* this tall (M) */
#define GEMM_BLAS_MAX_MN 65536.0   /* and at most this big (M·N) goes to OpenBLAS */
#define GEMM_MIN_PARALLEL 200000.0 /* flops under which a product runs on the calling thread */
#define GEMM_TILE_NARROW_N 128     /* on AVX-512 CPUs, outputs at most this wide go to the tile kernel */
#define GEMM_DNNL_COLS_ROWS 1024   /* on AVX-512 CPUs, x @ wᵀ row blocks shorter than this ... */
#define GEMM_DNNL_COLS_MIN_K 512   /* ... of a product this deep, and as wide (N >= K): column blocks */
#define GEMM_KSPLIT_MIN_K 128      /* fewest rows of K per piece of a K-split oneDNN product */
#define GEMM_KSPLIT_MAX_ROWS 1024  /* a grid of full-width blocks this tall is kept (no K split) */
#define GEMM_KSPLIT_MAX_SCRATCH (64.0 * 1024 * 1024) /* most bytes of partial C a K split may hold */

/* Bytes of B' up to which the tile kernel runs: three quarters of a core's L2 cache (sysconf;
 * 1.5 MiB when unknown): past that the tile kernel's reads of B' miss L2 and BLAS's packing wins
 * (`flashgrad bench matmul` shows where on a given machine). */
static double gemm_tile_max_b(void) {
    static _Atomic long v; /* bytes; 0 until the first call */
    long b = atomic_load_explicit(&v, memory_order_relaxed);
    if (b == 0) {
        const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        b = l2 > 0 ? l2 / 4 * 3 : 3L << 19;
        atomic_store_explicit(&v, b, memory_order_relaxed);
    }
    return (double)b;
}

/* Whether OpenBLAS's float32 kernels are as wide as the CPU's vectors: one of its AVX-512 kernels
 * on a CPU with AVX-512 (fg_simd_detect), any on one without. Read once. */
static int blas_full_width(void) {
    static atomic_int v = -1;
    int w = atomic_load_explicit(&v, memory_order_relaxed);
    if (w < 0) {
        const char *core = openblas_get_corename();
        static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
        w = fg_simd_detect() != FG_SIMD_AVX512;
        for (size_t i = 0; !w && core && i < sizeof avx512_cores / sizeof avx512_cores[0]; i++)
            w = !strcmp(core, avx512_cores[i]);
        atomic_store_explicit(&v, w, memory_order_relaxed);
    }
    return w;
}

/* fg_matmul_set_kernel's setting; -1 until the first product reads FG_MATMUL from the environment
 * (blas, tile, dnnl or dnnl-omp; anything else is the automatic choice). */
static atomic_int gemm_kernel_setting = -1;

static fg_matmul_kernel gemm_setting(void) {
    int k = atomic_load_explicit(&gemm_kernel_setting, memory_order_relaxed);
    if (k < 0) {
        static const char *names[] = {[FG_MATMUL_BLAS] = "blas",
                                      [FG_MATMUL_TILE] = "tile",
                                      [FG_MATMUL_DNNL] = "dnnl",
                                      [FG_MATMUL_DNNL_OMP] = "dnnl-omp"};
        const char *e = getenv("FG_MATMUL");
        k = FG_MATMUL_AUTO;
        for (int i = 1; e && i < (int)(sizeof names / sizeof names[0]); i++)
            if (!strcmp(e, names[i])) k = i;
        atomic_store_explicit(&gemm_kernel_setting, k, memory_order_relaxed);
    }
    return (fg_matmul_kernel)k;
}

fg_matmul_kernel fg__matmul_set_kernel(fg_matmul_kernel k) {
    const fg_matmul_kernel was = gemm_setting();
    atomic_store(&gemm_kernel_setting, k >= FG_MATMUL_AUTO && k <= FG_MATMUL_DNNL_OMP ? (int)k : FG_MATMUL_AUTO);
    return was;
}

typedef enum { GEMM_TILE, GEMM_BLAS, GEMM_DNNL, GEMM_DNNL_OMP } gemm_kind;

typedef struct {
    fg_dtype dt;
    int64_t M, N, K;
    double alpha;
    const char *A;
    CBLAS_TRANSPOSE ta;
    int64_t lda;
    const char *B; /* the BLAS kernel: B with tb; the tile kernel: B' row-major (K, N), row stride ldb */
    CBLAS_TRANSPOSE tb;
    int64_t ldb;
    double beta;
    const char *bias; /* (N) or NULL: with beta = 0, every row of C starts as bias */
    char *C;
    int64_t ldc;
    gemm_kind kind;
    int64_t rows, cols; /* the block of C per item */
    int64_t col_blocks; /* ceil(N / cols): items are row block major */
} gemm_job;

/* Item i: the block of C at row block i / col_blocks and column block i % col_blocks. */
static void gemm_item(void *ctx, int64_t item, int worker) {
    (void)worker;
    const gemm_job *J = ctx;
    const size_t esz = fg_dtype_size(J->dt);
    const int64_t r0 = item / J->col_blocks * J->rows, m = J->M - r0 < J->rows ? J->M - r0 : J->rows;
    const int64_t c0 = item % J->col_blocks * J->cols, n = J->N - c0 < J->cols ? J->N - c0 : J->cols;
    const char *A = J->A + (size_t)(J->ta == CblasNoTrans ? r0 * J->lda : r0) * esz;
    const char *B = J->B + (size_t)(J->tb == CblasNoTrans || J->kind == GEMM_TILE ? c0 : c0 * J->ldb) * esz;
    char *C = J->C + (size_t)(r0 * J->ldc + c0) * esz;
    double beta = J->beta;
    /* oneDNN refuses only arguments BLAS refuses too: then BLAS, below, says why */
    if (J->kind == GEMM_DNNL &&
        !fg_dnnl_sgemm(J->ta == CblasTrans, J->tb == CblasTrans, m, n, J->K, (float)J->alpha, (const float *)A, J->lda,
                       (const float *)B, J->ldb, J->bias ? 0.0f : (float)beta, (float *)C, J->ldc, 1)) {
        /* out = A'B' + bias, added while the block is still in the cache (oneDNN has no bias; a
         * copy of the bias into C before a β = 1 product cost a pass over C from memory) */
        for (int64_t r = 0; J->bias && r < m; r++) {
            float *row = (float *)C + r * J->ldc;
            fg_vbinary_f32(FG_VOP_ADD, row, row, (const float *)J->bias + c0, n);
        }
        return;
    }
    if (J->bias) { /* out = bias + A'B' */
        for (int64_t r = 0; r < m; r++) memcpy(C + (size_t)(r * J->ldc) * esz, J->bias + c0 * esz, (size_t)n * esz);
        beta = 1.0;
    }
    if (J->kind == GEMM_TILE) {
        const int nt = J->ta == CblasNoTrans;
        fg_sgemm_small(m, n, J->K, (float)J->alpha, (const float *)A, nt ? J->lda : 1, nt ? 1 : J->lda,
                       (const float *)B, J->ldb, (float *)C, J->ldc, NULL, beta != 0.0);
    } else if (J->dt == FG_F32) {
        cblas_sgemm(CblasRowMajor, J->ta, J->tb, (int)m, (int)n, (int)J->K, (float)J->alpha, (const float *)A,
                    (int)J->lda, (const float *)B, (int)J->ldb, (float)beta, (float *)C, (int)J->ldc);
    } else {
        cblas_dgemm(CblasRowMajor, J->ta, J->tb, (int)m, (int)n, (int)J->K, J->alpha, (const double *)A, (int)J->lda,
                    (const double *)B, (int)J->ldb, beta, (double *)C, (int)J->ldc);
    }
}

/* dst (K, N) = the transpose of src (N, K, row stride ld): flash attention's transposes (16 × 16
 * blocks on AVX-512, 8 × 8 on AVX2), over pieces of src's rows on the pool when it is big enough. */
typedef struct {
    float *dst;
    const float *src;
    int64_t N, K, ld;
} transpose_job;

static void transpose_piece(void *ctx, int64_t r0, int64_t r1) {
    const transpose_job *J = ctx;
    fg_flash_x86_f32.transpose(J->dst + r0, J->N, J->src + r0 * J->ld, J->ld, r1 - r0, J->K);
}

static void transpose_f32(float *dst, const float *src, int64_t N, int64_t K, int64_t ld) {
    transpose_job J = {dst, src, N, K, ld};
    fg_par_range(N, 64, 0.25 * (double)K, transpose_piece, &J); /* ~0.25 ns an element moved */
}

/* The CPUs this machine has (configured, whatever this process's affinity or thread count):
 * oneDNN's grid follows it, so the grid is fixed on a machine. */
static int64_t machine_cpus(void) {
    static _Atomic long v;
    long n = atomic_load_explicit(&v, memory_order_relaxed);
    if (n == 0) {
        n = sysconf(_SC_NPROCESSORS_CONF);
        n = n < 1 ? 1 : n > FG_POOL_MAX_THREADS ? FG_POOL_MAX_THREADS : n;
        atomic_store_explicit(&v, n, memory_order_relaxed);
    }
    return n;
}

/* oneDNN's blocks of C (rows × cols), from the shape and the machine's CPU count P, never from
 * the thread count: oneDNN is faster the larger one call is, so the grid has as few blocks as
 * give every CPU one: up to P row blocks of at least GEMM_DNNL_ROWS rows, and where there are
 * fewer than P, column blocks of at least 128 columns to make up the count. */
static void dnnl_grid(int64_t M, int64_t N, int64_t *rows, int64_t *cols) {
    const int64_t P = machine_cpus();
    int64_t rb = M / GEMM_DNNL_ROWS;
    rb = rb < 1 ? 1 : rb > P ? P : rb;
    int64_t cb = (P + rb - 1) / rb, cb_max = N / 128;
    cb = cb > cb_max ? cb_max : cb;
    cb = cb < 1 ? 1 : cb;
    *rows = ((M + rb - 1) / rb + 15) / 16 * 16;
    *cols = ((N + cb - 1) / cb + 15) / 16 * 16;
}

/* The grid of a product that reads B transposed (linear's forward, x @ wᵀ), as dnnl_grid's, except
 * on an AVX-512 CPU where its row blocks would be shorter than GEMM_DNNL_COLS_ROWS rows and the
 * product is at least GEMM_DNNL_COLS_MIN_K deep and at least as wide as it is deep: one full-height
 * block per CPU across the columns instead. (Chosen on GPT-2 small's forward at 1024 rows on two
 * CPUs, where a benchmark that timed oneDNN's first calls of each shape showed the 512-row blocks
 * far behind; timed in the steady state, the two grids run c_attn, attn.c_proj and c_fc within a
 * few percent of each other, either way round: bench/results/ has both. The narrower mlp.c_proj
 * (N = K / 4), the shallow products of small models and the 1024-row blocks of 2048 rows keep row
 * blocks.) It follows the CPU and its CPU count, as dnnl_grid does, never the thread count. */
static void dnnl_grid_bt(int64_t M, int64_t N, int64_t K, int64_t *rows, int64_t *cols) {
    dnnl_grid(M, N, rows, cols);
    const int64_t P = machine_cpus();
    if (fg_simd_detect() == FG_SIMD_AVX512 && *rows < M && *rows < GEMM_DNNL_COLS_ROWS &&
        K >= GEMM_DNNL_COLS_MIN_K && N >= K && N >= P * 128) {
        *rows = M;
        *cols = ((N + P - 1) / P + 15) / 16 * 16;
    }
}

/* A K-split oneDNN product: piece p computes the whole C over its range of K; piece 0 into C with
 * the job's beta, pieces 1.. into scratch (M, N) each with beta 0; ksplit_fold then adds them to C. */
typedef struct {
    const gemm_job *J;
    int64_t pieces, kstep; /* piece p covers K rows [p·kstep, min((p+1)·kstep, K)) */
    float *scratch;        /* pieces − 1 matrices (M, N), row stride N */
    int64_t fold_rows;     /* rows of C per item of the fold */
} ksplit_job;

static void ksplit_item(void *ctx, int64_t p, int worker) {
    (void)worker;
    const ksplit_job *S = ctx;
    const gemm_job *J = S->J;
    const int64_t k0 = p * S->kstep, k = J->K - k0 < S->kstep ? J->K - k0 : S->kstep;
    const float *A = (const float *)J->A + k0 * J->lda; /* A stored (K, M): A' transposed */
    const float *B = (const float *)J->B + (J->tb == CblasNoTrans ? k0 * J->ldb : k0);
    float *C = p == 0 ? (float *)J->C : S->scratch + (size_t)(p - 1) * (size_t)(J->M * J->N);
    const int64_t ldc = p == 0 ? J->ldc : J->N;
    if (!fg_dnnl_sgemm(1, J->tb == CblasTrans, J->M, J->N, k, (float)J->alpha, A, J->lda, B, J->ldb,
                       p == 0 ? (float)J->beta : 0.0f, C, ldc, 1))
        return;
    cblas_sgemm(CblasRowMajor, CblasTrans, J->tb, (int)J->M, (int)J->N, (int)k, (float)J->alpha, A, (int)J->lda, B,
                (int)J->ldb, p == 0 ? (float)J->beta : 0.0f, C, (int)ldc); /* (then BLAS says why) */
}

/* C += scratch piece 1, then piece 2, ...: element by element in piece order, so the sum does not
 * depend on the fold's row split. */
static void ksplit_fold(void *ctx, int64_t item, int worker) {
    (void)worker;
    const ksplit_job *S = ctx;
    const gemm_job *J = S->J;
    const int64_t r0 = item * S->fold_rows, r1 = J->M - r0 < S->fold_rows ? J->M : r0 + S->fold_rows;
    for (int64_t r = r0; r < r1; r++) {
        float *c = (float *)J->C + r * J->ldc;
        for (int64_t p = 1; p < S->pieces; p++) /* c += s, one add per element (the vector kernel's bits) */
            fg_vbinary_f32(FG_VOP_ADD, c, c, S->scratch + (size_t)(p - 1) * (size_t)(J->M * J->N) + r * J->N, J->N);
    }
}

/* The K split of a oneDNN product, if it takes one (the rule is stated at "the CPU GEMM" above):
 * the pieces are as many as dnnl_grid's blocks for the shape, so they follow the shape and the
 * machine's CPU count, never the thread count. Returns 1 when the product is done. */
static int gemm_ksplit(const gemm_job *J) {
    if (J->kind != GEMM_DNNL || J->ta != CblasTrans || J->bias) return 0;
    int64_t rows, cols;
    dnnl_grid(J->M, J->N, &rows, &cols);
    if (cols >= J->N && rows >= GEMM_KSPLIT_MAX_ROWS) return 0; /* tall blocks: as fast, and no fold */
    const int64_t pieces = (J->M + rows - 1) / rows * ((J->N + cols - 1) / cols);
    if (pieces < 2 || J->K < pieces * GEMM_KSPLIT_MIN_K ||
        (double)(pieces - 1) * (double)J->M * (double)J->N * sizeof(float) > GEMM_KSPLIT_MAX_SCRATCH)
        return 0;
    ksplit_job S = {.J = J, .pieces = pieces, .kstep = (J->K + pieces - 1) / pieces};
    S.scratch = fg_alloc(FG_CPU, (size_t)(pieces - 1) * (size_t)(J->M * J->N) * sizeof(float));
    if (!S.scratch) { /* no memory for the partial sums: the row and column grid needs none */
        fg_clear_error();
        return 0;
    }
    fg_pool_run(pieces, ksplit_item, &S, 0);
    const int64_t threads = fg_pool_threads();
    S.fold_rows = (J->M + 2 * threads - 1) / (2 * threads);
    fg_pool_run((J->M + S.fold_rows - 1) / S.fold_rows, ksplit_fold, &S, 0);
    fg_free(FG_CPU, S.scratch);
    return 1;
}

/* FG_MATMUL_AUTO's kernel for one product (the rule is stated at "the CPU GEMM" above); ta: A' is
 * the transpose of A as stored. */
static gemm_kind gemm_auto(fg_dtype dt, int64_t M, int64_t N, int64_t K, int ta, double beta) {
    const int tile_ok = dt == FG_F32 && fg_simd_active() != FG_SIMD_SCALAR && (beta == 0.0 || beta == 1.0);
    if (dt == FG_F32 && fg__dnnl_available()) {
        const int tile_wide = tile_ok && fg_simd_detect() == FG_SIMD_AVX512;
        if (ta && K >= GEMM_BLAS_MIN_K && (M >= GEMM_BLAS_MIN_M || tile_wide) &&
            (double)M * (double)N <= GEMM_BLAS_MAX_MN)
            return tile_wide ? GEMM_TILE : blas_full_width() ? GEMM_BLAS : GEMM_DNNL;
        if (tile_wide && !ta && N <= GEMM_TILE_NARROW_N && (double)K * (double)N * 4 <= gemm_tile_max_b())
            return GEMM_TILE;
        return GEMM_DNNL;
    }
    if (tile_ok && (double)K * (double)N * 4 <= gemm_tile_max_b()) return GEMM_TILE;
    return GEMM_BLAS;
}

/* The kernel of one product (the rule is stated at "the CPU GEMM" above). beta is the job's
 * (0 when a bias initializes C). */
static gemm_kind gemm_choose(fg_dtype dt, int64_t M, int64_t N, int64_t K, int ta, double beta) {
    /* the tile kernel overwrites or adds to C: beta 0 or 1 */
    const int tile_ok = dt == FG_F32 && fg_simd_active() != FG_SIMD_SCALAR && (beta == 0.0 || beta == 1.0);
    const int dnnl_ok = dt == FG_F32 && fg__dnnl_available();
    switch (gemm_setting()) {
    case FG_MATMUL_BLAS:
        return GEMM_BLAS;
    case FG_MATMUL_TILE:
        if (tile_ok) return GEMM_TILE;
        break;
    case FG_MATMUL_DNNL:
        if (dnnl_ok) return GEMM_DNNL;
        break;
    case FG_MATMUL_DNNL_OMP:
        if (dnnl_ok) return GEMM_DNNL_OMP;
        break;
    case FG_MATMUL_AUTO:
        break;
    }
    return gemm_auto(dt, M, N, K, ta, beta);
}

fg_matmul_kernel fg__matmul_auto_kernel(int64_t M, int64_t N, int64_t K, int ta) {
    const gemm_kind k = gemm_auto(FG_F32, M, N, K, ta, 0.0);
    return k == GEMM_TILE ? FG_MATMUL_TILE : k == GEMM_DNNL ? FG_MATMUL_DNNL : FG_MATMUL_BLAS;
}

/* C (M, N), row stride ldc  =  alpha * A' (M, K) @ B' (K, N)  +  beta * C    (bias NULL)
 *                           =  alpha * A' (M, K) @ B' (K, N)  +  bias (N)   (bias given)
 * where A' and B' are A and B with their transpose flags applied. */
static void gemm_bias(fg_dtype dt, int64_t M, int64_t N, int64_t K, double alpha, const char *A, CBLAS_TRANSPOSE ta,
                      int64_t lda, const char *B, CBLAS_TRANSPOSE tb, int64_t ldb, double beta, const char *bias,
                      char *C, int64_t ldc) {
    const size_t esz = fg_dtype_size(dt);
    if (M == 0 || N == 0) return;
    if (K == 0) { /* an empty sum: C = beta * C, or bias */
        for (int64_t i = 0; i < M && (bias || beta != 1.0); i++) {
            char *row = C + (size_t)(i * ldc) * esz;
            if (bias)
                memcpy(row, bias, (size_t)N * esz);
            else if (beta == 0.0)
                memset(row, 0, (size_t)N * esz);
            else if (dt == FG_F32)
                for (int64_t j = 0; j < N; j++) ((float *)row)[j] *= (float)beta;
            else
                for (int64_t j = 0; j < N; j++) ((double *)row)[j] *= beta;
        }
        return;
    }
    gemm_job J = {.dt = dt,
                  .M = M,
                  .N = N,
                  .K = K,
                  .alpha = alpha,
                  .A = A,
                  .ta = ta,
                  .lda = lda,
                  .B = B,
                  .tb = tb,
                  .ldb = ldb,
                  .beta = bias ? 0.0 : beta,
                  .bias = bias,
                  .C = C,
                  .ldc = ldc};
    J.kind = gemm_choose(dt, M, N, K, ta == CblasTrans, J.beta);
    float *packed = NULL;
    if (J.kind == GEMM_TILE && tb == CblasTrans) {
        packed = fg_alloc(FG_CPU, (size_t)(K * N) * sizeof(float));
        if (packed) { /* B' (K, N) = the transpose of B (N, K) */
            transpose_f32(packed, (const float *)B, N, K, ldb);
            J.B = (const char *)packed;
            J.ldb = N;
        } else {
            J.kind = GEMM_BLAS; /* no memory for the copy: BLAS reads B transposed as it is */
            fg_clear_error();
        }
    }
    if (J.kind == GEMM_DNNL_OMP) { /* the whole product on oneDNN's threads; the pool's wait */
        J.rows = M;
        if (J.bias)
            for (int64_t r = 0; r < M; r++) memcpy(C + (size_t)(r * ldc) * esz, bias, (size_t)N * esz);
        const int threads = fg_pool_in_run() ? 1 : fg_pool_threads();
        if (!fg_dnnl_sgemm(ta == CblasTrans, tb == CblasTrans, M, N, K, (float)alpha, (const float *)A, lda,
                           (const float *)B, ldb, J.bias ? 1.0f : (float)J.beta, (float *)C, ldc, threads))
            return;
        J.kind = GEMM_BLAS;
        J.bias = NULL;
        J.beta = bias ? 1.0 : beta;
    }
    /* Row blocks. The tile kernel's results do not depend on the split, so its blocks follow the
     * thread count: one or two per thread, in whole register tiles (6 rows). BLAS's and oneDNN's
     * blocks have a fixed size whatever the thread count: their results can depend on how the rows
     * are split (their kernels for a block's tail rows may sum differently), and a split that
     * followed the thread count would make results follow it too. */
    const int64_t threads = fg_pool_threads();
    J.cols = N;
    if (2.0 * (double)M * (double)N * (double)K < GEMM_MIN_PARALLEL || (J.kind == GEMM_TILE && threads <= 1)) {
        J.rows = M;
    } else if (J.kind == GEMM_TILE) {
        J.rows = (M + threads - 1) / threads;
        if (J.rows > GEMM_TILE_ROWS) J.rows = (M + 2 * threads - 1) / (2 * threads);
        J.rows = (J.rows + 5) / 6 * 6;
    } else if (J.kind == GEMM_DNNL) {
        if (gemm_ksplit(&J)) return;
        if (ta == CblasNoTrans && tb == CblasTrans)
            dnnl_grid_bt(M, N, K, &J.rows, &J.cols);
        else
            dnnl_grid(M, N, &J.rows, &J.cols);
    } else {
        J.rows = GEMM_BLAS_ROWS;
    }
    J.col_blocks = (N + J.cols - 1) / J.cols;
    fg_pool_run((M + J.rows - 1) / J.rows * J.col_blocks, gemm_item, &J, J.kind == GEMM_BLAS ? FG_POOL_BLAS_SERIAL : 0);
    if (packed) fg_free(FG_CPU, packed);
}

fg_status fg_cpu_matmul_gemm(fg_dtype dt, int ta, int tb, int64_t M, int64_t N, int64_t K, double alpha, const void *A,
                             int64_t lda, int64_t sA, const void *B, int64_t ldb, int64_t sB, double beta,
                             const void *bias, void *C, int64_t ldc, int64_t sC, int64_t batch) {
    const size_t esz = fg_dtype_size(dt);
    for (int64_t b = 0; b < batch; b++) {
        const int first = b == 0 || sC != 0; /* with sC = 0 the later batches add to the first's C */
        gemm_bias(dt, M, N, K, alpha, (const char *)A + (size_t)(b * sA) * esz, ta ? CblasTrans : CblasNoTrans, lda,
                  (const char *)B + (size_t)(b * sB) * esz, tb ? CblasTrans : CblasNoTrans, ldb, first ? beta : 1.0,
                  first ? bias : NULL, (char *)C + (size_t)(b * sC) * esz, ldc);
    }
    return FG_OK;
}

/* ---- linear's bias gradient ----
 * dbias (N) += column sums of dout (R, N). Items are blocks of COLSUM_COLS columns; each column
 * is summed over the rows in order, starting from dbias, so the result does not depend on the
 * thread count, and the vector forms (a lane per column) give the plain loop's bits. */
#define COLSUM_COLS 128
typedef struct {
    fg_dtype dt;
    char *dbias;
    const char *dout;
    int64_t R, N;
} colsum_job;

#define COL_SUMS_BODY(T)                                                                                               \
    T acc[COLSUM_COLS];                                                                                                \
    const int64_t w = c1 - c0;                                                                                         \
    for (int64_t j = 0; j < w; j++) acc[j] = dbias[c0 + j];                                                            \
    for (int64_t r = 0; r < R; r++) {                                                                                  \
        const T *row = dout + r * N + c0;                                                                              \
        for (int64_t j = 0; j < w; j++) acc[j] += row[j];                                                              \
    }                                                                                                                  \
    for (int64_t j = 0; j < w; j++) dbias[c0 + j] = acc[j];

static void col_sums_f64(double *dbias, const double *dout, int64_t R, int64_t N, int64_t c0, int64_t c1) {
    COL_SUMS_BODY(double);
}
static void col_sums_plain_f32(float *dbias, const float *dout, int64_t R, int64_t N, int64_t c0, int64_t c1) {
    COL_SUMS_BODY(float);
}
#if FG_SIMD_X86
/* A whole block of COLSUM_COLS columns, its sums in registers while the rows stream past: W
 * columns a vector, NV vectors a pass over the rows. */
#define COL_SUMS_VEC_BODY(V, PFX, W, NV)                                                                               \
    for (int64_t p0 = c0; p0 < c1; p0 += (W) * (NV)) {                                                                 \
        V acc[NV];                                                                                                     \
        _Pragma("GCC unroll 8") for (int v = 0; v < (NV); v++) acc[v] = PFX##_loadu_ps(dbias + p0 + (W) * v);         \
        for (int64_t r = 0; r < R; r++) {                                                                              \
            const float *row = dout + r * N + p0;                                                                      \
            _Pragma("GCC unroll 8") for (int v = 0; v < (NV); v++) acc[v] =                                            \
                PFX##_add_ps(acc[v], PFX##_loadu_ps(row + (W) * v));                                                   \
        }                                                                                                              \
        _Pragma("GCC unroll 8") for (int v = 0; v < (NV); v++) PFX##_storeu_ps(dbias + p0 + (W) * v, acc[v]);         \
    }
FG_TARGET_AVX512 static void col_sums_avx512(float *dbias, const float *dout, int64_t R, int64_t N, int64_t c0,
                                             int64_t c1) {
    COL_SUMS_VEC_BODY(__m512, _mm512, 16, 8);
}
FG_TARGET_AVX2 static void col_sums_avx2(float *dbias, const float *dout, int64_t R, int64_t N, int64_t c0,
                                         int64_t c1) {
    COL_SUMS_VEC_BODY(__m256, _mm256, 8, 8);
}
#endif
static void col_sums_f32(float *dbias, const float *dout, int64_t R, int64_t N, int64_t c0, int64_t c1) {
#if FG_SIMD_X86
    if (c1 - c0 == COLSUM_COLS && fg_simd_active() == FG_SIMD_AVX512) {
        col_sums_avx512(dbias, dout, R, N, c0, c1);
        return;
    }
    if (c1 - c0 == COLSUM_COLS && fg_simd_active() == FG_SIMD_AVX2) {
        col_sums_avx2(dbias, dout, R, N, c0, c1);
        return;
    }
#endif
    col_sums_plain_f32(dbias, dout, R, N, c0, c1);
}

static void colsum_item(void *ctx, int64_t item, int worker) {
    (void)worker;
    const colsum_job *J = ctx;
    int64_t c0 = item * COLSUM_COLS, c1 = c0 + COLSUM_COLS < J->N ? c0 + COLSUM_COLS : J->N;
    FG_DISPATCH(J->dt, col_sums, (void *)J->dbias, (const void *)J->dout, J->R, J->N, c0, c1);
}

fg_status fg_cpu_matmul_colsum(fg_dtype dt, void *dbias, const void *dout, int64_t R, int64_t N) {
    colsum_job J = {.dt = dt, .dbias = dbias, .dout = dout, .R = R, .N = N};
    int64_t items = (N + COLSUM_COLS - 1) / COLSUM_COLS;
    if ((double)R * (double)N < GEMM_MIN_PARALLEL / 2) /* too small to pay for a pool run */
        for (int64_t i = 0; i < items; i++) colsum_item(&J, i, 0);
    else
        fg_pool_run(items, colsum_item, &J, 0);
    return FG_OK;
}
