/* test_runtime.c — the CUDA backends behind tensor/: allocation and its counter, copies between
 * host and device (strided, dtype-converting), fill and axpy on device views, raw GEMM edge cases,
 * and the AdamW / norm kernels train/ uses — each against a host-side reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda.h"
#include "cuda/cuda_ops.h"
#include "ops/kernels.h"
#include "ops/nccl_backend.h"
#include "tensor/alloc.h"
#include "tests/cuda/cuda_test.h"
#include "train/dist.h"

/* The allocation counter: a device tensor raises current by its (rounded) size, peak follows,
 * freeing lowers current, and a second tensor of the same size reuses the cached block. */
static int allocator_counts_and_caches_device_blocks(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    const int64_t sh[1] = {1 << 20};
    fg_alloc_stats s0 = fg_alloc_get_stats(FG_CUDA);
    fg_tensor *a = fg_empty(FG_F32, FG_CUDA, 1, sh);
    FGT_NOTNULL(a);
    fg_alloc_stats s1 = fg_alloc_get_stats(FG_CUDA);
    FGT_CHECK(s1.current >= s0.current + (4u << 20), "current %zu -> %zu after a 4 MiB tensor", s0.current, s1.current);
    FGT_CHECK(s1.peak >= s1.current, "peak %zu < current %zu", s1.peak, s1.current);
    fg_release(a);
    fg_alloc_stats s2 = fg_alloc_get_stats(FG_CUDA);
    FGT_CHECK(s2.current == s0.current, "current %zu after the free, %zu before the alloc", s2.current, s0.current);
    fg_tensor *b = fg_empty(FG_F32, FG_CUDA, 1, sh);
    FGT_NOTNULL(b);
    fg_alloc_stats s3 = fg_alloc_get_stats(FG_CUDA);
    FGT_CHECK(s3.system_allocs == s2.system_allocs, "a same-size tensor took a new block (%llu -> %llu cudaMallocs)",
              (unsigned long long)s2.system_allocs, (unsigned long long)s3.system_allocs);
    fg_release(b);
    fg_alloc_reset_peak(FG_CUDA);
    FGT_CHECK(fg_alloc_get_stats(FG_CUDA).peak == fg_alloc_get_stats(FG_CUDA).current, "reset_peak");
    return FGT_PASS;
}

/* host -> device -> host round trips, both dtypes, and a dtype change on the device */
static int copies_round_trip_and_convert(void) {
    const int64_t sh[3] = {3, 5, 7};
    fg_tensor *h = fgt_rand(FG_F64, FG_CPU, 3, sh, -2, 2, 1);
    FGT_NOTNULL(h);
    fg_tensor *d64 = fgt_to(h, FGT_DEV), *d32 = fg_to(d64, FGT_DEV, FG_F32), *back = fg_to(d32, FGT_DEV, FG_F64);
    FGT_NOTNULL(back);
    fg_tensor *h32 = fg_to(h, FG_CPU, FG_F32);
    int r = fgt_compare_tensors("f64 round trip", d64, h, 0);
    if (r == FGT_PASS) r = fgt_compare_tensors("f64 -> f32 on the device", d32, h32, 0);
    if (r == FGT_PASS) r = fgt_compare_tensors("f32 -> f64 on the device", back, h32, 0);
    fg_release(h), fg_release(d64), fg_release(d32), fg_release(back), fg_release(h32);
    return r;
}

/* a permuted, sliced device view made contiguous equals the same on the host */
static int strided_views_copy_like_the_cpu(void) {
    const int64_t sh[4] = {2, 3, 4, 5};
    const int perm[4] = {3, 1, 0, 2};
    fg_tensor *h = fgt_rand(FG_F32, FG_CPU, 4, sh, -1, 1, 2), *d = h ? fgt_to(h, FGT_DEV) : NULL;
    FGT_NOTNULL(d);
    fg_tensor *hp = fg_view_permute(h, perm), *dp = fg_view_permute(d, perm);
    fg_tensor *hs = fg_view_slice(hp, 0, 1, 4), *ds = fg_view_slice(dp, 0, 1, 4);
    fg_tensor *hc = fg_contiguous(hs), *dc = fg_contiguous(ds);
    FGT_NOTNULL(dc);
    FGT_CHECK(fg_is_contiguous(dc), "fg_contiguous of a device view is not contiguous");
    int r = fgt_compare_tensors("permuted slice", dc, hc, 0);
    /* copy into a strided destination with a dtype change */
    fg_tensor *h64 = fg_zeros(FG_F64, FG_CPU, 4, sh), *d64 = fg_zeros(FG_F64, FGT_DEV, 4, sh);
    fg_tensor *h64p = fg_view_permute(h64, perm), *d64p = fg_view_permute(d64, perm);
    if (r == FGT_PASS) {
        FGT_OK(fg_copy_into(h64p, hp));
        FGT_OK(fg_copy_into(d64p, dp));
        r = fgt_compare_tensors("strided f32 -> f64 copy", d64, h64, 0);
    }
    fg_release(h), fg_release(d), fg_release(hp), fg_release(dp), fg_release(hs), fg_release(ds);
    fg_release(hc), fg_release(dc), fg_release(h64), fg_release(d64), fg_release(h64p), fg_release(d64p);
    return r;
}

/* fill and axpy through device views */
static int fill_and_axpy_on_views(void) {
    const int64_t sh[2] = {6, 9};
    for (int dt = 0; dt < 2; dt++) {
        fg_tensor *hy = fgt_rand((fg_dtype)dt, FG_CPU, 2, sh, -1, 1, 3),
                  *hx = fgt_rand((fg_dtype)dt, FG_CPU, 2, sh, -1, 1, 4);
        fg_tensor *dy = fgt_to(hy, FGT_DEV), *dx = fgt_to(hx, FGT_DEV);
        FGT_NOTNULL(dx);
        fg_tensor *hyt = fg_view_transpose(hy, 0, 1), *dyt = fg_view_transpose(dy, 0, 1);
        fg_tensor *hxt = fg_view_transpose(hx, 0, 1), *dxt = fg_view_transpose(dx, 0, 1);
        fg_tensor *hys = fg_view_slice(hyt, 0, 2, 7), *dys = fg_view_slice(dyt, 0, 2, 7);
        fg_tensor *hxs = fg_view_slice(hxt, 0, 2, 7), *dxs = fg_view_slice(dxt, 0, 2, 7);
        FGT_OK(fg_axpy(hys, -0.75, hxs));
        FGT_OK(fg_axpy(dys, -0.75, dxs));
        fg_tensor *hcol = fg_view_slice(hy, 1, 4, 5), *dcol = fg_view_slice(dy, 1, 4, 5);
        FGT_OK(fg_fill(hcol, 3.25));
        FGT_OK(fg_fill(dcol, 3.25));
        int r = fgt_compare_tensors("axpy + fill through views", dy, hy, fgt_tol((fg_dtype)dt));
        fg_release(hy), fg_release(hx), fg_release(dy), fg_release(dx), fg_release(hyt), fg_release(dyt);
        fg_release(hxt), fg_release(dxt), fg_release(hys), fg_release(dys), fg_release(hxs), fg_release(dxs);
        fg_release(hcol), fg_release(dcol);
        if (r != FGT_PASS) return r;
    }
    return FGT_PASS;
}

/* raw GEMM: transposes, batches accumulating into one C (sC = 0), and the K = 0 case, against a
 * float64 triple loop */
static int gemm_covers_transposes_batches_and_empty_k(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    enum { M = 5, N = 7, K = 3, BATCH = 4 };
    double A[BATCH][K][M], Bm[BATCH][N][K], C[M][N], want[M][N]; /* A stored (K, M): ta = 1; B (N, K): tb = 1 */
    uint64_t s = 99;
    for (int b = 0; b < BATCH; b++)
        for (int i = 0; i < K * M; i++)
            (&A[b][0][0])[i] = (double)((s = s * 6364136223846793005ULL + 1) >> 40) / 16777216.0 - 0.5;
    for (int b = 0; b < BATCH; b++)
        for (int i = 0; i < N * K; i++)
            (&Bm[b][0][0])[i] = (double)((s = s * 6364136223846793005ULL + 1) >> 40) / 16777216.0 - 0.5;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            C[i][j] = 0.25 * (i - j);
            double acc = 0;
            for (int b = 0; b < BATCH; b++)
                for (int p = 0; p < K; p++) acc += A[b][p][i] * Bm[b][j][p];
            want[i][j] = 2.0 * C[i][j] + 0.5 * acc;
        }
    const int64_t sa[1] = {BATCH * K * M}, sb[1] = {BATCH * N * K}, sc[2] = {M, N};
    fg_tensor *dA = fg_from_buffer(FG_F64, FG_CUDA, 1, sa, A), *dB = fg_from_buffer(FG_F64, FG_CUDA, 1, sb, Bm);
    fg_tensor *dC = fg_from_buffer(FG_F64, FG_CUDA, 2, sc, C);
    FGT_NOTNULL(dC);
    /* C = 2 C + 0.5 Σ_b A[b]ᵀ B[b]ᵀ: beta applies to the first batch only, the rest add */
    FGT_OK(fg_cuda_gemm(FG_F64, 1, 1, M, N, K, 0.5, fg_data(dA), M, K * M, fg_data(dB), K, N * K, 2.0, fg_data(dC), N,
                        0, BATCH));
    double got[M][N];
    FGT_OK(fg_to_host(dC, got));
    int r = fgt_compare("gemm with transposes and sC = 0", &got[0][0], &want[0][0], M * N, 1e-13);
    /* K = 0: C = beta C */
    FGT_OK(fg_cuda_gemm(FG_F64, 0, 0, M, N, 0, 1.0, fg_data(dA), 1, 0, fg_data(dB), N, 0, -1.0, fg_data(dC), N, 0, 1));
    FGT_OK(fg_to_host(dC, got));
    for (int i = 0; i < M * N && r == FGT_PASS; i++)
        if ((&got[0][0])[i] != -(&want[0][0])[i]) {
            printf("    K = 0 with beta = -1: element %d is %g, expected %g\n", i, (&got[0][0])[i], -(&want[0][0])[i]);
            r = FGT_FAIL;
        }
    FGT_CHECK(fg_cuda_gemm(FG_F64, 0, 0, M, N, K, 1.0, fg_data(dA), 0, 0, fg_data(dB), N, 0, 0.0, fg_data(dC), N, 0,
                           1) == FG_ERR_ARG,
              "lda = 0 was accepted");
    fg_release(dA), fg_release(dB), fg_release(dC);
    return r;
}

/* AdamW on the device (the CUDA table's optimizer kernels): the same arithmetic as ops/cpu/adamw.c's
 * ADAMW_RANGE (restated here) */
static int adamw_range_matches_the_host_formula(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    enum { N = 1000 };
    static float p[N], g[N], m[N], v[N], p2[N], m2[N], v2[N];
    for (int i = 0; i < N; i++) {
        p[i] = sinf((float)i);
        g[i] = cosf(0.37f * (float)i) * 0.1f;
        m[i] = 0.01f * (float)(i % 7);
        v[i] = 0.001f * (float)(i % 5);
    }
    const double lr = 3e-3, wd = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8, t = 3;
    const double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t), step = lr / bc1, bc2s = sqrt(bc2), df = 1 - lr * wd;
    const int64_t sh[1] = {N};
    fg_tensor *dp = fg_from_buffer(FG_F32, FG_CUDA, 1, sh, p), *dg = fg_from_buffer(FG_F32, FG_CUDA, 1, sh, g);
    fg_tensor *dm = fg_from_buffer(FG_F32, FG_CUDA, 1, sh, m), *dv = fg_from_buffer(FG_F32, FG_CUDA, 1, sh, v);
    FGT_NOTNULL(dv);
    const fg_kernels *kt = fg_kernels_for(FG_CUDA, "adamw");
    FGT_NOTNULL(kt);
    const fg_adamw_span span = {0, N, df};
    const double gs = 0.75; /* a clipping coefficient: the gradients read times it */
    FGT_OK(kt->optimizer.adamw(FG_F32, fg_data(dp), fg_data(dg), gs, fg_data(dm), fg_data(dv), N, 1, &span, b1, b2,
                               step, bc2s, eps));
    for (int i = 0; i < N; i++) {
        float gi = g[i] * (float)gs;
        float mi = m[i] = (float)b1 * m[i] + (float)(1.0 - b1) * gi;
        float vi = v[i] = (float)b2 * v[i] + (float)(1.0 - b2) * gi * gi;
        float denom = (float)sqrt((double)vi) / (float)bc2s + (float)eps;
        p[i] = p[i] * (float)df - (float)step * mi / denom;
    }
    FGT_OK(fg_to_host(dp, p2));
    FGT_OK(fg_to_host(dm, m2));
    FGT_OK(fg_to_host(dv, v2));
    double a[N], b[N];
    int r = FGT_PASS;
    const float *gotv[3] = {p2, m2, v2}, *wantv[3] = {p, m, v};
    const char *nm[3] = {"adamw params", "adamw m", "adamw v"};
    for (int k = 0; k < 3 && r == FGT_PASS; k++) {
        for (int i = 0; i < N; i++) a[i] = gotv[k][i], b[i] = wantv[k][i];
        r = fgt_compare(nm[k], a, b, N, 1e-6);
    }
    double ss = 0, want = 0;
    FGT_OK(kt->optimizer.sum_squares(FG_F32, fg_data(dg), N, &ss));
    for (int i = 0; i < N; i++) want += (double)g[i] * g[i];
    FGT_CHECK(fabs(ss - want) <= 1e-12 * want, "sum of squares %.17g, expected %.17g", ss, want);
    FGT_OK(kt->optimizer.scale(FG_F32, fg_data(dg), N, 0.5));
    FGT_OK(fg_to_host(dg, p2));
    for (int i = 0; i < N; i++)
        FGT_CHECK(p2[i] == g[i] * 0.5f, "scale: element %d is %g, expected %g", i, p2[i], g[i] * 0.5f);
    fg_release(dp), fg_release(dg), fg_release(dm), fg_release(dv);
    return r;
}

/* The CUDA objects are linked in (fg_device_built), and on a GPU the device starts through the
 * library's one entry point, fg_device_start. */
static int the_cuda_build_holds_the_device_and_starts_it(void) {
    FGT_CHECK(fg_device_built(FG_CUDA) == 1, "fg_device_built(FG_CUDA) is %d in a CUDA build",
              fg_device_built(FG_CUDA));
    FGT_CHECK(fg_device_built(FG_CPU) == 1, "fg_device_built(FG_CPU) is %d", fg_device_built(FG_CPU));
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    FGT_OK(fg_device_start(FG_CUDA));
    return FGT_PASS;
}

/* cuda/nccl.cu, when the build has NCCL (ops/nccl_backend.h; weak: the emulator's runner and a build without NCCL lack it) */
#pragma weak fg_nccl_id
#pragma weak fg_nccl_start
#pragma weak fg_nccl_fold_sum
#pragma weak fg_nccl_allgather
#pragma weak fg_nccl_fold_slices

/* The device fold of P > 1 ranks' slices adds them in rank order, bit for bit the CPU's fold
 * (fg_comm_add_into from rank 0 up): values of very different sizes make every other order give
 * other bits ((big + small) − big is not small). */
static int nccl_fold_adds_every_rank_in_rank_order(void) {
    if (FGT_DEV != FG_CUDA || !fg_nccl_fold_slices) return FGT_SKIP;
    FGT_OK(fg_device_start(FG_CUDA));
    enum { M = 517, P = 4 };
    static float h[P * M], want[M], back[M];
    static double hd[P * M], wantd[M], backd[M];
    for (int q = 0; q < P; q++)
        for (int k = 0; k < M; k++) {
            const double big = (q % 2 ? -1.0 : 1.0) * 3.0e7 * (1 + (k + q) % 5), small = 0.1 * (q + 1) + 0.013 * k;
            h[q * M + k] = (float)(q == 1 || q == 2 ? big : small);
            hd[q * M + k] = (q == 1 || q == 2 ? big * 1e9 : small);
        }
    memcpy(want, h, sizeof want);
    memcpy(wantd, hd, sizeof wantd);
    for (int q = 1; q < P; q++) {
        fg_comm_add_into(FG_F32, want, h + q * M, M);
        fg_comm_add_into(FG_F64, wantd, hd + q * M, M);
    }
    int64_t ns = P * M, no = M;
    fg_tensor *s = fg_from_buffer(FG_F32, FG_CUDA, 1, &ns, h), *o = fg_zeros(FG_F32, FG_CUDA, 1, &no);
    fg_tensor *sd = fg_from_buffer(FG_F64, FG_CUDA, 1, &ns, hd), *od = fg_zeros(FG_F64, FG_CUDA, 1, &no);
    FGT_NOTNULL(s);
    FGT_NOTNULL(o);
    FGT_NOTNULL(sd);
    FGT_NOTNULL(od);
    int r = FGT_PASS;
    if (fg_nccl_fold_slices(fg_data(o), fg_data(s), FG_F32, M, P) != FG_OK || fg_to_host(o, back) != FG_OK ||
        fg_nccl_fold_slices(fg_data(od), fg_data(sd), FG_F64, M, P) != FG_OK || fg_to_host(od, backd) != FG_OK) {
        fgt_fail(__FILE__, __LINE__, "the device fold: %s", fg_last_error());
        r = FGT_FAIL;
    }
    for (int k = 0; k < M && r == FGT_PASS; k++)
        if (memcmp(&back[k], &want[k], sizeof back[k]) || memcmp(&backd[k], &wantd[k], sizeof backd[k])) {
            fgt_fail(__FILE__, __LINE__, "element %d: the device fold gives %.9g / %.17g, rank order %.9g / %.17g", k,
                     back[k], backd[k], want[k], wantd[k]);
            r = FGT_FAIL;
        }
    fg_release(s), fg_release(o), fg_release(sd), fg_release(od);
    return r;
}

/* One rank (P = 1) through NCCL: the clique starts from a unique id, and the fold and the
 * all-gather leave a device buffer exactly as it was (a fold of one rank is that rank's values). */
static int nccl_one_rank_folds_and_gathers_exactly(void) {
    if (FGT_DEV != FG_CUDA || !fg_nccl_start) return FGT_SKIP;
    FGT_OK(fg_device_start(FG_CUDA));
    char id[256];
    size_t len = 0;
    FGT_OK(fg_nccl_id(id, sizeof id, &len));
    FGT_OK(fg_nccl_start(0, 1, id, len));
    enum { N = 1003 };
    float h[N], back[N];
    for (int i = 0; i < N; i++) h[i] = (float)(i % 17) * 0.37f - 2.0f;
    int64_t n = N;
    fg_tensor *d = fg_from_buffer(FG_F32, FG_CUDA, 1, &n, h);
    FGT_NOTNULL(d);
    int r = FGT_PASS;
    if (fg_nccl_fold_sum(fg_data(d), FG_F32, N, 1) != FG_OK || fg_nccl_allgather(fg_data(d), FG_F32, N) != FG_OK ||
        fg_to_host(d, back) != FG_OK) {
        fgt_fail(__FILE__, __LINE__, "NCCL at P = 1: %s", fg_last_error());
        r = FGT_FAIL;
    }
    for (int i = 0; i < N && r == FGT_PASS; i++)
        if (back[i] != h[i]) {
            fgt_fail(__FILE__, __LINE__, "element %d is %g after the fold, expected %g", i, back[i], h[i]);
            r = FGT_FAIL;
        }
    fg_release(d);
    return r;
}

const fgt_case fgt_runtime_cases[] = {
    {"the_cuda_build_holds_the_device_and_starts_it", the_cuda_build_holds_the_device_and_starts_it},
    {"allocator_counts_and_caches_device_blocks", allocator_counts_and_caches_device_blocks},
    {"copies_round_trip_and_convert", copies_round_trip_and_convert},
    {"strided_views_copy_like_the_cpu", strided_views_copy_like_the_cpu},
    {"fill_and_axpy_on_views", fill_and_axpy_on_views},
    {"gemm_covers_transposes_batches_and_empty_k", gemm_covers_transposes_batches_and_empty_k},
    {"adamw_range_matches_the_host_formula", adamw_range_matches_the_host_formula},
    {"nccl_one_rank_folds_and_gathers_exactly", nccl_one_rank_folds_and_gathers_exactly},
    {"nccl_fold_adds_every_rank_in_rank_order", nccl_fold_adds_every_rank_in_rank_order},
    {NULL, NULL},
};
