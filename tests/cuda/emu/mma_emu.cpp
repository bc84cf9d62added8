/* mma_emu.cpp — the emulator's tensor-core instructions (cuda/ptx_mma.cuh on emu_mma.h) checked
 * against an independent statement of their fragment layouts and against direct matrix products:
 *
 *   - the layouts are written here as CUTLASS's CuTe states them, (thread, value) → element maps in
 *     shape/stride form (MMA_Traits<SM80_16x8x16_F32BF16BF16F32_TN>, Copy_Traits<SM75_U32x{1,2,4}
 *     _LDSM_N>, Copy_Traits<SM75_U16x{2,4,8}_LDSM_T>), not as the PTX ISA's tables the emulator
 *     follows, so a misread of either shows;
 *   - mma: every fragment index of A (256), B (128) and C (128), each alone (one-hot against a
 *     matrix of distinct values), then random products of 16×8×64 (four chained mma) against the
 *     float64 product;
 *   - ldmatrix .x1/.x2/.x4 with and without .trans: every destination register half of every
 *     lane, from rows scattered through shared memory; and P·V-style products where B is stored
 *     row-major (needs .trans) or column-major (must not have it): the wrong .trans must fail;
 *   - cvt.rn.bf16x2.f32 (fg_pack_bf16x2) and fg_bf16_rne against the nearest bf16 found by
 *     comparing distances in float64 (ties to the even mantissa), over random bit patterns, exact
 *     ties, subnormals, overflow and NaN;
 *   - detector cases, each in a child process that must stop with the emulator's message: lanes
 *     arriving with different shapes, a lane missing from an mma, an mma meeting a shuffle,
 *     ldmatrix from global memory, a misaligned or unwritten ldmatrix row, a race on a row.
 * `make cuda-emu` runs it. Exit status = number of failed checks.
 */
#include "tests/cuda/emu/cuda_emu.h"
#include "tests/cuda/emu/seeded_case.h"

#include <cuda_runtime.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "cuda/ptx_mma.cuh"

/* ---- the layouts as CuTe writes them: index = Σ coordinate · stride, then split by the shape ---- */

/* A (M16 × K16): thread (t0 = T % 4, t1 = T / 4) strides (32, 1); value (v0, v1, v2) strides
 * (16, 8, 128); the index is column-major m + 16k */
static void cute_a(int T, int v, int *m, int *k) {
    const int idx = 32 * (T % 4) + (T / 4) + 16 * (v % 2) + 8 * (v / 2 % 2) + 128 * (v / 4);
    *m = idx % 16, *k = idx / 16;
}
/* B (N8 × K16): thread strides (16, 1), value (v0, v1) strides (8, 64); index n + 8k */
static void cute_b(int T, int v, int *k, int *n) {
    const int idx = 16 * (T % 4) + (T / 4) + 8 * (v % 2) + 64 * (v / 2);
    *n = idx % 8, *k = idx / 8;
}
/* C, D (M16 × N8), SM80_16x8_Row: thread strides (32, 1), value strides (16, 8); index m + 16n */
static void cute_c(int T, int v, int *m, int *n) {
    const int idx = 32 * (T % 4) + (T / 4) + 16 * (v % 2) + 8 * (v / 2);
    *m = idx % 16, *n = idx / 16;
}
/* ldmatrix: the source is 8N rows of 128 bits, row s given by thread s; destination register j,
 * half h of thread T is bit b of that stack, b = 32T + 16h + 1024j (LDSM_N) or
 * 256(T % 4) + 16(T / 4) + 128h + 1024j (LDSM_T); element (row b / 128, column b % 128 / 16) */
static void cute_ldsm(bool trans, int T, int j, int h, int *row, int *col) {
    const int b = trans ? 256 * (T % 4) + 16 * (T / 4) + 128 * h + 1024 * j : 32 * T + 16 * h + 1024 * j;
    *row = b / 128, *col = b % 128 / 16;
}

/* ---- kernels (one warp each) ---- */

static __device__ uint32_t half_into(uint32_t reg, int h, uint16_t bits) {
    return h ? (reg & 0xffffu) | (uint32_t)bits << 16 : (reg & 0xffff0000u) | bits;
}

/* D = A·B + C for one 16×16·16×8 tile, fragments built from the row-major A (16×16), B (k × n,
 * 16×8) and C (16×8) by the CuTe maps, D stored back by them. `onehot` ≥ 0 replaces operand
 * `which`'s fragments by zeros and one 1.0 at fragment index onehot + blockIdx.x (lane = index / V,
 * value = index % V): one block per fragment index. */
__global__ void mma_tile(const uint16_t *A, const uint16_t *B, const float *C, float *D, int which, int onehot) {
    const int T = threadIdx.x & 31;
    const int one = onehot >= 0 ? onehot + (int)blockIdx.x : -1;
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4];
    for (int v = 0; v < 8; v++) {
        int m, k;
        cute_a(T, v, &m, &k);
        const uint16_t x = which == 0 && one >= 0 ? (one == T * 8 + v ? 0x3f80 : 0) : A[m * 16 + k];
        a[v / 2] = half_into(a[v / 2], v % 2, x);
    }
    for (int v = 0; v < 4; v++) {
        int k, n;
        cute_b(T, v, &k, &n);
        const uint16_t x = which == 1 && one >= 0 ? (one == T * 4 + v ? 0x3f80 : 0) : B[k * 8 + n];
        b[v / 2] = half_into(b[v / 2], v % 2, x);
    }
    for (int v = 0; v < 4; v++) {
        int m, n;
        cute_c(T, v, &m, &n);
        c[v] = which == 2 && one >= 0 ? (one == T * 4 + v ? 1.0f : 0.0f) : C[m * 8 + n];
    }
    fg_mma_bf16_16816(c, a, b);
    float *out = D + (size_t)blockIdx.x * 128;
    for (int v = 0; v < 4; v++) {
        int m, n;
        cute_c(T, v, &m, &n);
        out[m * 8 + n] = c[v];
    }
}

/* D (16×8) = A (16×64) · B (64×8) as four chained mma, fragments by the CuTe maps */
__global__ void mma_chain(const uint16_t *A, const uint16_t *B, float *D) {
    const int T = threadIdx.x & 31;
    float c[4] = {0, 0, 0, 0};
    for (int kk = 0; kk < 4; kk++) {
        uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
        for (int v = 0; v < 8; v++) {
            int m, k;
            cute_a(T, v, &m, &k);
            a[v / 2] = half_into(a[v / 2], v % 2, A[m * 64 + kk * 16 + k]);
        }
        for (int v = 0; v < 4; v++) {
            int k, n;
            cute_b(T, v, &k, &n);
            b[v / 2] = half_into(b[v / 2], v % 2, B[(kk * 16 + k) * 8 + n]);
        }
        fg_mma_bf16_16816(c, a, b);
    }
    for (int v = 0; v < 4; v++) {
        int m, n;
        cute_c(T, v, &m, &n);
        D[m * 8 + n] = c[v];
    }
}

/* ldmatrix of 8N rows: row s (8 elements of src[s]) is put at shared row perm[s] of a 40-row
 * area with 16-element rows (a scatter, so a lane that gave the wrong row shows); every lane's
 * registers go to out[lane · 4 + j] */
template <int N, bool TRANS> __global__ void ldsm(const uint16_t *src, const int *perm, uint32_t *out) {
    __shared__ __align__(16) uint16_t sh[40 * 16];
    const int T = threadIdx.x & 31;
    for (int s = T; s < 8 * N; s += 32)
        for (int c = 0; c < 8; c++) sh[perm[s] * 16 + c] = src[s * 8 + c];
    __syncthreads();
    uint32_t r[4] = {0, 0, 0, 0};
    fg_ldmatrix<N, TRANS>(r, &sh[perm[T % (8 * N)] * 16]);
    for (int j = 0; j < 4; j++) out[T * 4 + j] = r[j];
}

/* D (16×8) = A (16×16, row-major in shared memory) · B (16×8): A by ldmatrix.x4, B by
 * ldmatrix.x2 from shared memory holding B row-major (k rows of 8: ROW_MAJOR, needs .trans) or
 * column-major (n rows of 16: no .trans), with the .trans flag TRANS */
template <bool ROW_MAJOR, bool TRANS> __global__ void mma_from_shared(const uint16_t *A, const uint16_t *B, float *D) {
    __shared__ __align__(16) uint16_t As[16 * 16], Bs[16 * 8];
    const int T = threadIdx.x & 31;
    /* each thread writes whole 4-byte words (the emulator's shared-memory shadow is per word) */
    for (int e = 2 * T; e < 256; e += 64) As[e] = A[e], As[e + 1] = A[e + 1];
    for (int p = T; p < 64; p += 32) {
        if (ROW_MAJOR) {
            const int k = p / 4, n = 2 * (p % 4);
            Bs[k * 8 + n] = B[k * 8 + n], Bs[k * 8 + n + 1] = B[k * 8 + n + 1];
        } else {
            const int n = p / 8, k = 2 * (p % 8);
            Bs[n * 16 + k] = B[k * 8 + n], Bs[n * 16 + k + 1] = B[(k + 1) * 8 + n];
        }
    }
    __syncthreads();
    uint32_t a[4], b[2];
    /* matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15) */
    fg_ldmatrix<4, false>(a, &As[(T & 15) * 16 + (T >> 4) * 8]);
    /* row-major B: matrices (k 0-7), (k 8-15), rows k; column-major: rows n, halves k 0-7 and 8-15 */
    const uint16_t *row = ROW_MAJOR ? &Bs[(T & 15) * 8] : &Bs[(T & 7) * 16 + (T >> 3 & 1) * 8];
    fg_ldmatrix<2, TRANS>(b, row);
    float c[4] = {0, 0, 0, 0};
    fg_mma_bf16_16816(c, a, b);
    for (int v = 0; v < 4; v++) {
        int m, n;
        cute_c(T, v, &m, &n);
        D[m * 8 + n] = c[v];
    }
}

/* out[i] = fg_pack_bf16x2(x[2i], x[2i + 1]) */
__global__ void pack(const float *x, uint32_t *out, int n) {
    for (int i = (int)(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += (int)(gridDim.x * blockDim.x))
        out[i] = fg_pack_bf16x2(x[2 * i], x[2 * i + 1]);
}

/* ---- seeded bugs (detector cases) ---- */

/* lane `odd` asks for two matrices where the others ask for four */
__global__ void bug_shapes(uint32_t *out, int odd) {
    __shared__ __align__(16) uint16_t sh[32 * 8];
    const int T = threadIdx.x & 31;
    for (int c = 0; c < 8; c++) sh[T * 8 + c] = (uint16_t)c;
    __syncthreads();
    uint32_t r[4] = {0, 0, 0, 0};
    if (T == odd)
        fg_ldmatrix<2, false>(r, &sh[(T & 15) * 8]);
    else
        fg_ldmatrix<4, false>(r, &sh[T * 8]);
    out[T] = r[0];
}
/* lane `skip` leaves the mma out */
__global__ void bug_missing_lane(float *out, int skip) {
    const int T = threadIdx.x & 31;
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0};
    if (T != skip) fg_mma_bf16_16816(c, a, b);
    out[threadIdx.x] = c[0];
}
/* lane 3 shuffles while the others do an mma */
__global__ void bug_mma_meets_shuffle(float *out) {
    const int T = threadIdx.x & 31;
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4] = {0, 0, 0, 0};
    if (T == 3)
        c[0] = __shfl_sync(0xffffffffu, 1.0f, 0);
    else
        fg_mma_bf16_16816(c, a, b);
    out[T] = c[0];
}
/* ldmatrix whose rows are global memory (glob), or shared rows `off` elements from aligned, or
 * rows `unwritten` leaves unwritten, or rows another thread writes without a barrier between */
__global__ void bug_ldsm(const uint16_t *glob, int off, int unwritten, int racy, uint32_t *out) {
    __shared__ __align__(16) uint16_t sh[33 * 8];
    const int T = threadIdx.x & 31;
    for (int c = 0; c < 8; c++)
        if (T != unwritten) sh[T * 8 + c] = (uint16_t)(T + c);
    if (T == 0)
        for (int c = 0; c < 8; c++) sh[256 + c] = 0;
    __syncthreads();
    if (racy) /* the next lane's row, with no barrier before that lane reads it */
        for (int c = 0; c < 8; c++) sh[((T + 1) % 32) * 8 + c] = (uint16_t)(T - c);
    uint32_t r[4];
    fg_ldmatrix<4, false>(r, glob ? (const void *)(glob + T * 8) : (const void *)&sh[T * 8 + off]);
    out[T] = r[0];
}

/* ---- host helpers ---- */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd() {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double urand() { return (double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }

template <typename T> static T *dev(const std::vector<T> &h) {
    T *d = nullptr;
    if (cudaMalloc(&d, h.size() * sizeof(T)) != cudaSuccess ||
        cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) {
        fprintf(stderr, "mma_emu: device setup failed\n");
        exit(90);
    }
    return d;
}
template <typename T> static std::vector<T> host(const T *d, size_t n) {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
}
static float bf(uint16_t h) { return fg_bf16_float(h); }

static int g_fails = 0;
static void check(bool ok, const char *what) {
    printf("  %s %s\n", ok ? "ok  " : "FAIL", what);
    g_fails += !ok;
}

/* ---- the checks ---- */

/* one 1.0 at each fragment index of one operand against matrices of distinct integers: D must be
 * the row (A), column (B) or element (C) the CuTe map names, and zero elsewhere */
static void mma_every_index() {
    std::vector<uint16_t> A(256), B(128);
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++) A[m * 16 + k] = fg_bf16_rne((float)(1 + m * 16 + k)); /* exact up to 256 */
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 8; n++) B[k * 8 + n] = fg_bf16_rne((float)(1 + k * 8 + n));
    std::vector<float> C(128, 0.0f);
    uint16_t *dA = dev(A), *dB = dev(B);
    float *dC = dev(C);
    const int count[3] = {256, 128, 128}, vals[3] = {8, 4, 4};
    const char *names[3] = {"mma: each of A's 256 fragment indices lands where CuTe's ALayout says",
                            "mma: each of B's 128 fragment indices lands where CuTe's BLayout says",
                            "mma: each of C's 128 fragment indices (and D's) lands where CuTe's CLayout says"};
    for (int w = 0; w < 3; w++) {
        float *dD = dev(std::vector<float>((size_t)count[w] * 128, NAN));
        /* A and B zero where they are not the operand under test and C is: the other operands
         * keep their distinct values */
        std::vector<uint16_t> A0(256, 0), B0(128, 0);
        const uint16_t *pa = w == 2 ? dev(A0) : dA, *pb = w == 2 ? dev(B0) : dB;
        fg_emu_launch({(unsigned)count[w], 1, 1}, 32, 0, mma_tile, pa, pb, (const float *)dC, dD, w, 0);
        std::vector<float> D = host(dD, (size_t)count[w] * 128);
        int bad = -1;
        for (int idx = 0; idx < count[w] && bad < 0; idx++) {
            const int T = idx / vals[w], v = idx % vals[w];
            for (int m = 0; m < 16 && bad < 0; m++)
                for (int n = 0; n < 8 && bad < 0; n++) {
                    float want = 0;
                    int r, c;
                    if (w == 0) {
                        cute_a(T, v, &r, &c);
                        if (m == r) want = bf(B[c * 8 + n]);
                    } else if (w == 1) {
                        cute_b(T, v, &r, &c); /* k, n */
                        if (n == c) want = bf(A[m * 16 + r]);
                    } else {
                        cute_c(T, v, &r, &c);
                        if (m == r && n == c) want = 1;
                    }
                    if (D[(size_t)idx * 128 + m * 8 + n] != want) {
                        printf("    lane %d value %d: D[%d][%d] = %g, want %g\n", T, v, m, n,
                               D[(size_t)idx * 128 + m * 8 + n], want);
                        bad = idx;
                    }
                }
        }
        check(bad < 0, names[w]);
    }
}

/* random 16×64 · 64×8 in four chained mma against the float64 product; the error bound is
 * float32 rounding of each partial sum (4 roundings of a sum of at most Σ|a||b|) */
static void mma_random_products() {
    int worst_bad = 0;
    double worst = 0;
    for (int rep = 0; rep < 20; rep++) {
        std::vector<uint16_t> A(16 * 64), B(64 * 8);
        for (auto &x : A) x = fg_bf16_rne((float)(urand() * (rep % 3 ? 1.0 : 1e3)));
        for (auto &x : B) x = fg_bf16_rne((float)urand());
        uint16_t *dA = dev(A), *dB = dev(B);
        float *dD = dev(std::vector<float>(128, NAN));
        fg_emu_launch({1, 1, 1}, 32, 0, mma_chain, (const uint16_t *)dA, (const uint16_t *)dB, dD);
        std::vector<float> D = host(dD, 128);
        for (int m = 0; m < 16; m++)
            for (int n = 0; n < 8; n++) {
                double s = 0, sa = 0;
                for (int k = 0; k < 64; k++) {
                    s += (double)bf(A[m * 64 + k]) * bf(B[k * 8 + n]);
                    sa += fabs((double)bf(A[m * 64 + k]) * bf(B[k * 8 + n]));
                }
                const double e = fabs(D[m * 8 + n] - s) / (sa > 0 ? sa : 1);
                worst = e > worst ? e : worst;
                worst_bad |= e > 4 * 6e-8;
            }
        cudaFree(dA), cudaFree(dB), cudaFree(dD);
    }
    char msg[160];
    snprintf(msg, sizeof msg,
             "mma: 20 random 16x64 * 64x8 products (4 chained mma) vs float64: worst |err| / sum|ab| = %.2e", worst);
    check(!worst_bad, msg);
}

template <int N, bool TRANS> static void ldsm_every_index() {
    std::vector<uint16_t> src(8 * N * 8);
    for (size_t i = 0; i < src.size(); i++) src[i] = (uint16_t)(0x1000 + i); /* distinct */
    std::vector<int> perm(8 * N);
    for (int s = 0; s < 8 * N; s++) perm[s] = (s * 13 + 5) % 40; /* 40 rows, 13 coprime: distinct */
    uint16_t *dsrc = dev(src);
    int *dperm = dev(perm);
    uint32_t *dout = dev(std::vector<uint32_t>(128, 0));
    fg_emu_launch({1, 1, 1}, 32, 0, ldsm<N, TRANS>, (const uint16_t *)dsrc, (const int *)dperm, dout);
    std::vector<uint32_t> out = host(dout, 128);
    int bad = 0;
    for (int T = 0; T < 32; T++)
        for (int j = 0; j < N; j++)
            for (int h = 0; h < 2; h++) {
                int row, col;
                cute_ldsm(TRANS, T, j, h, &row, &col);
                const uint16_t got = (uint16_t)(out[T * 4 + j] >> (16 * h)), want = src[row * 8 + col];
                if (got != want && bad++ < 3)
                    printf("    lane %d register %d half %d: 0x%04x, want 0x%04x (row %d column %d)\n", T, j, h, got,
                           want, row, col);
            }
    char msg[160];
    snprintf(msg, sizeof msg, "ldmatrix.x%d%s: every register half of every lane (%d) as CuTe's %s says", N,
             TRANS ? ".trans" : "", 64 * N, TRANS ? "LDSM_T" : "LDSM_N");
    check(bad == 0, msg);
}

/* largest |D − A·B| relative to max |A·B| for one shared-memory layout of B and one .trans flag */
template <bool ROW_MAJOR, bool TRANS> static double product_error() {
    std::vector<uint16_t> A(256), B(128);
    for (auto &x : A) x = fg_bf16_rne((float)urand());
    for (auto &x : B) x = fg_bf16_rne((float)urand());
    uint16_t *dA = dev(A), *dB = dev(B);
    float *dD = dev(std::vector<float>(128, NAN));
    fg_emu_launch({1, 1, 1}, 32, 0, mma_from_shared<ROW_MAJOR, TRANS>, (const uint16_t *)dA, (const uint16_t *)dB, dD);
    std::vector<float> D = host(dD, 128);
    double worst = 0, scale = 0;
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            double s = 0;
            for (int k = 0; k < 16; k++) s += (double)bf(A[m * 16 + k]) * bf(B[k * 8 + n]);
            worst = fmax(worst, fabs(D[m * 8 + n] - s));
            scale = fmax(scale, fabs(s));
        }
    return worst / scale;
}

static void trans_caught() {
    const double rt = product_error<true, true>(), cn = product_error<false, false>();
    const double rn = product_error<true, false>(), ct = product_error<false, true>();
    char msg[200];
    snprintf(msg, sizeof msg,
             "ldmatrix + mma from shared memory: row-major B with .trans %.1e, column-major B without %.1e", rt, cn);
    check(rt < 1e-6 && cn < 1e-6, msg);
    snprintf(msg, sizeof msg,
             "a wrong .trans is caught: row-major B without .trans %.2f, column-major B with .trans %.2f", rn, ct);
    check(rn > 0.1 && ct > 0.1, msg);
}

/* the nearest bf16 to x by distance in float64, ties to an even mantissa; NaN → 0x7fff */
static uint16_t nearest_bf16(float x) {
    if (isnan(x)) return 0x7fff;
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint16_t down = (uint16_t)(u >> 16); /* toward zero */
    if ((u & 0xffffu) == 0) return down;
    const uint16_t up = (uint16_t)(down + 1); /* away from zero (0x7f80 = inf past the largest) */
    const double dd = fabs((double)x - bf(down));
    /* the upper neighbour of the largest finite bf16 is the rounding boundary 2^128 (an inf
     * result); in float64 it is representable, so distances stay exact */
    const double upv = (up & 0x7fffu) == 0x7f80u ? copysign(ldexp(1.0, 128), (double)x) : (double)bf(up);
    const double du = fabs(upv - (double)x);
    if (dd != du) return dd < du ? down : up;
    return (down & 1u) ? up : down;
}

static void cvt_rne() {
    std::vector<float> x;
    const float specials[] = {0.0f, -0.0f,         1.0f,    -1.0f,    INFINITY, -INFINITY, NAN,
                              -NAN, 3.3895314e38f, FLT_MAX, -FLT_MAX, 1e-40f,   -1e-45f,   1.17549435e-38f};
    for (float f : specials) x.push_back(f);
    for (int i = 0; i < 4000; i++) { /* random bit patterns, exact ties and their neighbours */
        uint32_t u = (uint32_t)rnd();
        float f;
        const int kind = i % 4;
        if (kind == 1) u = (u & 0xffff0000u) | 0x8000u;                                     /* a tie */
        if (kind == 2) u = (u & 0xffff0000u) | (0x8000u + (rnd() & 1 ? 1u : (uint32_t)-1)); /* beside one */
        if (kind == 3) u = (u & 0x807fffffu) | (uint32_t)(0x7e + rnd() % 4) << 23;          /* near 1 */
        memcpy(&f, &u, 4);
        x.push_back(f);
    }
    if (x.size() % 2) x.push_back(0.5f);
    const int n = (int)x.size() / 2;
    float *dx = dev(x);
    uint32_t *dout = dev(std::vector<uint32_t>((size_t)n, 0));
    fg_emu_launch({4, 1, 1}, 64, 0, pack, (const float *)dx, dout, n);
    std::vector<uint32_t> out = host(dout, (size_t)n);
    int bad_dev = 0, bad_host = 0;
    for (int i = 0; i < 2 * n; i++) {
        const uint16_t want = nearest_bf16(x[(size_t)i]);
        const uint16_t got = (uint16_t)(out[(size_t)i / 2] >> (16 * (i % 2)));
        if (got != want && bad_dev++ < 3) {
            uint32_t u;
            memcpy(&u, &x[(size_t)i], 4);
            printf("    cvt of 0x%08x (%g) as element %d of its pair: 0x%04x, want 0x%04x\n", u, x[(size_t)i], i % 2,
                   got, want);
        }
        bad_host += fg_bf16_rne(x[(size_t)i]) != want;
    }
    char msg[160];
    snprintf(msg, sizeof msg,
             "cvt.rn.bf16x2.f32: %d values (ties, subnormals, overflow, NaN), the first in the low half", 2 * n);
    check(bad_dev == 0, msg);
    check(bad_host == 0, "fg_bf16_rne (host) gives the same nearest-even bf16");
}

/* ---- detector cases: each runs in a child that must abort with the message ---- */

static int case_shapes() {
    uint32_t *out = dev(std::vector<uint32_t>(32, 0));
    fg_emu_launch({1, 1, 1}, 32, 0, bug_shapes, out, 5);
    return 0;
}
static int case_shapes_ok() {
    uint32_t *out = dev(std::vector<uint32_t>(32, 0));
    fg_emu_launch({1, 1, 1}, 32, 0, bug_shapes, out, 99);
    return 0;
}
static int case_missing_lane() {
    float *out = dev(std::vector<float>(32, 0));
    fg_emu_launch({1, 1, 1}, 32, 0, bug_missing_lane, out, 7);
    return 0;
}
static int case_missing_lane_ok() {
    float *out = dev(std::vector<float>(64, 0));
    fg_emu_launch({1, 1, 1}, 64, 0, bug_missing_lane, out, 99);
    return 0;
}
static int case_meets_shuffle() {
    float *out = dev(std::vector<float>(32, 0));
    fg_emu_launch({1, 1, 1}, 32, 0, bug_mma_meets_shuffle, out);
    return 0;
}
static int case_partial_warp() {
    float *out = dev(std::vector<float>(48, 0));
    fg_emu_launch({1, 1, 1}, 48, 0, bug_missing_lane, out, 99);
    return 0;
}
static int ldsm_case(bool glob, int off, int unwritten, int racy) {
    uint16_t *g = dev(std::vector<uint16_t>(32 * 8, 1));
    uint32_t *out = dev(std::vector<uint32_t>(32, 0));
    fg_emu_launch({1, 1, 1}, 32, 0, bug_ldsm, (const uint16_t *)(glob ? g : nullptr), off, unwritten, racy, out);
    return 0;
}
static int case_ldsm_ok() { return ldsm_case(false, 0, -1, 0); }
static int case_ldsm_global() { return ldsm_case(true, 0, -1, 0); }
static int case_ldsm_misaligned() { return ldsm_case(false, 4, -1, 0); }
static int case_ldsm_unwritten() { return ldsm_case(false, 0, 9, 0); }
static int case_ldsm_race() { return ldsm_case(false, 0, -1, 1); }

static const detector_case cases[] = {
    {"control: every lane asks ldmatrix.x4", case_shapes_ok, false, nullptr},
    {"control: every lane of two warps does the mma", case_missing_lane_ok, false, nullptr},
    {"control: ldmatrix of written, aligned shared rows", case_ldsm_ok, false, nullptr},
    {"lanes arriving with different shapes (x2 among x4)", case_shapes, true, "meet with different shapes"},
    {"a lane missing from an mma", case_missing_lane, true, "lane 7 of the mask did not arrive"},
    {"an mma meeting a shuffle", case_meets_shuffle, true, "meet at different intrinsics"},
    {"an mma in a partial warp", case_partial_warp, true, "which do not exist"},
    {"ldmatrix from global memory", case_ldsm_global, true, "which is not the block's shared memory"},
    {"ldmatrix row not 16-byte aligned", case_ldsm_misaligned, true, "which is not 16-byte aligned"},
    {"ldmatrix of a row no thread wrote", case_ldsm_unwritten, true, "that no thread of this block has written"},
    {"ldmatrix of a row another thread wrote without a barrier", case_ldsm_race, true, "race on static shared memory"},
};


int main() {
    printf("tensor-core instructions on the emulator (cuda/ptx_mma.cuh) against CuTe's layouts and direct products\n");
    mma_every_index();
    mma_random_products();
    ldsm_every_index<1, false>();
    ldsm_every_index<2, false>();
    ldsm_every_index<4, false>();
    ldsm_every_index<1, true>();
    ldsm_every_index<2, true>();
    ldsm_every_index<4, true>();
    trans_caught();
    cvt_rne();
    printf("tensor-core detectors: each seeded bug must be caught, each control must run clean\n");
    for (const auto &c : cases) g_fails += run_case(c);
    printf("mma_emu: %d failed\n", g_fails);
    return g_fails > 255 ? 255 : g_fails;
}
