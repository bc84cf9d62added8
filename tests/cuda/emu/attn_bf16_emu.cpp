/* attn_bf16_emu.cpp — the bf16 tensor-core flash attention (cuda/attention_bf16.cu, .cuh) on the
 * CPU emulator, against the bf16 mirror (attn_bf16_mirror.h), and the mirror against the float64
 * reference (ops/attention_naive.c on the same bf16-rounded inputs):
 *   mirror vs float64: O, lse, dQ, dK, dV within bf16 tolerance (relative norm error < 1e-2);
 *   emulated forward (fg_cuda_attn_bf16_forward) vs mirror: O and lse within 1e-5;
 *   emulated backward (fg_cuda_attn_bf16_backward, from the mirror's O and lse, adding into random
 *   gradients) vs mirror: dQ, dK, dV within 1e-5, and bit-identical over two runs.
 * Shapes: head dims 64 and 128 and padded ones (40, 96), Nq ≠ Nk both ways (rows with no key under
 * bottom-right causal), top-left causal, a window, GQA, dropout, Nk = 0, a sharper scale, and
 * lengths that are no multiple of the 64-row tiles (ragged last tiles), one query row among them.
 * The device buffers have guard zones on both sides, checked after the launches.
 * Then the seeded bugs: copies of the kernels compiled here with one kernel's cp.async wait, or the
 * barrier after it, defined away (FA16_TILES_READY), each run in a child process that the
 * emulator must stop with its unlanded-copy or race report; the same copy with every wait and
 * barrier in place must run clean.
 * `make cuda-emu` runs it. Exit status = number of failed cases.
 */
#include "tests/cuda/emu/cuda_emu.h"
#include "tests/cuda/emu/seeded_case.h"

#include <cuda_runtime.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "cuda/attention_bf16.h"
#include "cuda/ptx_async.cuh"
#include "cuda/ptx_mma.cuh"
#include "ops/attention_kernels.h"
#include "ops/shared/attn_tiles.h"
#include "ops/shared/attn_variant.h"
#include "tensor/philox.h"
#include "tests/cuda/emu/attn_bf16_mirror.h"

/* Copies of the kernels (cuda/attention_bf16.cuh, its includes above already in), each in its own
 * namespace: FA16_TILES_READY(kernel) expands to FA16_SEEDED_<kernel>, set per copy to the wait and
 * the barrier (FA16_READY), the barrier alone (FA16_NO_WAIT) or the wait alone (FA16_NO_BARRIER). */
#define FA16_READY                                                                                                     \
    do {                                                                                                               \
        fg_cp_async_wait<0>();                                                                                         \
        __syncthreads();                                                                                               \
    } while (0)
#define FA16_NO_WAIT __syncthreads()
#define FA16_NO_BARRIER fg_cp_async_wait<0>()
#define FA16_TILES_READY(kernel) FA16_SEEDED_##kernel
#define FA16_SEEDED_fwd FA16_READY
#define FA16_SEEDED_dkdv FA16_READY
#define FA16_SEEDED_dq FA16_READY
namespace seeded_control { /* every wait and barrier in place */
#include "cuda/attention_bf16.cuh"
}
#undef FG_ATTENTION_BF16_CUH
#undef FA16_SEEDED_fwd
#define FA16_SEEDED_fwd FA16_NO_WAIT
namespace seeded_fwd_no_wait {
#include "cuda/attention_bf16.cuh"
}
#undef FG_ATTENTION_BF16_CUH
#undef FA16_SEEDED_fwd
#define FA16_SEEDED_fwd FA16_NO_BARRIER
namespace seeded_fwd_no_barrier {
#include "cuda/attention_bf16.cuh"
}
#undef FG_ATTENTION_BF16_CUH
#undef FA16_SEEDED_fwd
#undef FA16_SEEDED_dkdv
#define FA16_SEEDED_fwd FA16_READY
#define FA16_SEEDED_dkdv FA16_NO_WAIT
namespace seeded_dkdv_no_wait {
#include "cuda/attention_bf16.cuh"
}
#undef FG_ATTENTION_BF16_CUH
#undef FA16_SEEDED_dkdv
#define FA16_SEEDED_dkdv FA16_NO_BARRIER
namespace seeded_dkdv_no_barrier {
#include "cuda/attention_bf16.cuh"
}
#undef FG_ATTENTION_BF16_CUH
#undef FA16_SEEDED_dkdv
#undef FA16_SEEDED_dq
#define FA16_SEEDED_dkdv FA16_READY
#define FA16_SEEDED_dq FA16_NO_WAIT
namespace seeded_dq_no_wait {
#include "cuda/attention_bf16.cuh"
}
#undef FG_ATTENTION_BF16_CUH
#undef FA16_SEEDED_dq
#define FA16_SEEDED_dq FA16_NO_BARRIER
namespace seeded_dq_no_barrier {
#include "cuda/attention_bf16.cuh"
}

/* n elements of device memory between two guard zones, with a host copy (h) */
template <typename T> struct gbuf {
    static constexpr size_t G = 512;
    size_t n;
    std::vector<T> h;
    T *d = nullptr;
    T guard;
    gbuf(size_t n_, T guard_) : n(n_), h(n_), guard(guard_) {
        if (cudaMalloc(&d, (n + 2 * G) * sizeof(T)) != cudaSuccess) {
            fprintf(stderr, "attn_bf16_emu: cudaMalloc failed\n");
            exit(1);
        }
    }
    ~gbuf() { cudaFree(d); }
    gbuf(const gbuf &) = delete;
    gbuf &operator=(const gbuf &) = delete;
    T *p() { return d + G; }
    void upload() {
        std::vector<T> all(n + 2 * G, guard);
        std::copy(h.begin(), h.end(), all.begin() + G);
        cudaMemcpy(d, all.data(), all.size() * sizeof(T), cudaMemcpyHostToDevice);
    }
    bool download() { /* false when a guard element changed */
        std::vector<T> all(n + 2 * G);
        cudaMemcpy(all.data(), d, all.size() * sizeof(T), cudaMemcpyDeviceToHost);
        std::copy(all.begin() + G, all.begin() + G + n, h.begin());
        for (size_t i = 0; i < G; i++)
            if (memcmp(&all[i], &guard, sizeof(T)) || memcmp(&all[G + n + i], &guard, sizeof(T))) return false;
        return true;
    }
};

static double urand(uint64_t seed, uint64_t i) { return 2.0 * fg_u32_to_uniform_f64(fg_philox_u32(seed, 11, i)) - 1.0; }

/* relative norm error of got against want (non-finite entries must match exactly); *rel out */
template <typename A, typename B> static bool close(const A *got, const B *want, size_t n, double tol, double *rel) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double g = (double)got[i], w = (double)want[i];
        if (!isfinite(g) || !isfinite(w)) {
            if (!(g == w || (isnan(g) && isnan(w)))) {
                *rel = INFINITY;
                return false;
            }
            continue;
        }
        num += (g - w) * (g - w);
        den += w * w;
    }
    *rel = den > 0 ? sqrt(num / den) : sqrt(num);
    return *rel <= tol;
}

struct shape {
    int64_t B, H, Nq, Nk, d;
    int causal;
    double p;
    int64_t Hkv = 0;
    int win = 0;
    int64_t wl = 0, wr = 0;
    double scale = 0;
};

static double g_worst[10];

static int run(const shape &s, uint64_t seed) {
    const int64_t Hkv = s.Hkv ? s.Hkv : s.H;
    char label[200];
    snprintf(label, sizeof label, "[B=%lld H=%lld Hkv=%lld Nq=%lld Nk=%lld d=%lld causal=%d p=%g%s%s]", (long long)s.B,
             (long long)s.H, (long long)Hkv, (long long)s.Nq, (long long)s.Nk, (long long)s.d, s.causal, s.p,
             s.win ? " window" : "", s.scale ? " scale=1" : "");
    fg_attn_opts op = fg_attn_defaults();
    op.causal = s.causal;
    op.dropout_p = s.p;
    op.seed = 77 + seed;
    op.scale = s.scale;
    op.variant.n_kv_heads = Hkv;
    op.variant.window = s.win;
    op.variant.window_left = s.wl;
    op.variant.window_right = s.wr;
    fg_attn_problem pr;
    if (fg_attn_problem_init(&pr, s.B, s.H, s.Nq, s.Nk, s.d, &op) != FG_OK) {
        printf("  FAIL %s: %s\n", label, fg_last_error());
        return 1;
    }
    const size_t nq = (size_t)(s.B * s.H * s.Nq * s.d), nk = (size_t)(s.B * Hkv * s.Nk * s.d);
    const size_t nl = (size_t)(s.B * s.H * s.Nq);
    /* bf16 inputs; the float64 reference on exactly their values */
    std::vector<uint16_t> q(nq), k(nk), v(nk), dout(nq);
    std::vector<uint16_t> *ins[] = {&q, &k, &v, &dout};
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < ins[a]->size(); i++) (*ins[a])[i] = fg_bf16_rne((float)urand(seed * 10 + a, i));
    auto widen = [](const std::vector<uint16_t> &x) {
        std::vector<double> r(x.size());
        for (size_t i = 0; i < x.size(); i++) r[i] = fg_bf16_float(x[i]);
        return r;
    };
    std::vector<double> q64 = widen(q), k64 = widen(k), v64 = widen(v), do64 = widen(dout);
    std::vector<double> ro(nq + 1), rl(nl + 1), rp((size_t)(s.B * s.H * s.Nq * s.Nk) + 1), rdq(nq, 0.0), rdk(nk, 0.0),
        rdv(nk, 0.0);
    if (fg_attn_naive_forward_f64(ro.data(), rl.data(), rp.data(), q64.data(), k64.data(), v64.data(), &pr) != FG_OK ||
        fg_attn_naive_backward_f64(rdq.data(), rdk.data(), rdv.data(), do64.data(), q64.data(), k64.data(), v64.data(),
                                   rp.data(), &pr) != FG_OK) {
        printf("  FAIL %s reference: %s\n", label, fg_last_error());
        return 1;
    }
    /* the mirror; its gradients start from random values (the backward adds) */
    std::vector<float> mo(nq + 1), ml(nl + 1), g0q(nq), g0k(nk), g0v(nk);
    for (size_t i = 0; i < nq; i++) g0q[i] = (float)urand(seed * 10 + 5, i);
    for (size_t i = 0; i < nk; i++) g0k[i] = (float)urand(seed * 10 + 6, i), g0v[i] = (float)urand(seed * 10 + 7, i);
    std::vector<float> mdq = g0q, mdk = g0k, mdv = g0v;
    bf16_mirror_forward(mo.data(), ml.data(), q.data(), k.data(), v.data(), &pr);
    bf16_mirror_backward(mdq.data(), mdk.data(), mdv.data(), dout.data(), q.data(), k.data(), v.data(), mo.data(),
                         ml.data(), &pr);
    /* the float64 reference's gradients start from the same values */
    std::vector<double> rdq0(nq), rdk0(nk), rdv0(nk), mdq0(nq), mdk0(nk), mdv0(nk);
    for (size_t i = 0; i < nq; i++) rdq0[i] = rdq[i] + g0q[i], mdq0[i] = (double)mdq[i] - g0q[i];
    for (size_t i = 0; i < nk; i++) {
        rdk0[i] = rdk[i] + g0k[i], rdv0[i] = rdv[i] + g0v[i];
        mdk0[i] = (double)mdk[i] - g0k[i], mdv0[i] = (double)mdv[i] - g0v[i];
    }
    int bad = 0;
    double e[10];
    const double bf_tol = 1e-2, mirror_tol = 1e-5;
    bad |= !close(mo.data(), ro.data(), nq, bf_tol, &e[0]);
    bad |= !close(ml.data(), rl.data(), nl, bf_tol, &e[1]);
    bad |= !close(mdq0.data(), rdq.data(), nq, bf_tol, &e[2]);
    bad |= !close(mdk0.data(), rdk.data(), nk, bf_tol, &e[3]);
    bad |= !close(mdv0.data(), rdv.data(), nk, bf_tol, &e[4]);
    /* the emulated kernel */
    gbuf<uint16_t> tq(nq, 0x7fc1), tk(nk, 0x7fc1), tv(nk, 0x7fc1);
    gbuf<float> to(nq, -12345.5f), tl(nl, -12345.5f);
    tq.h = q, tk.h = k, tv.h = v;
    std::fill(to.h.begin(), to.h.end(), NAN);
    std::fill(tl.h.begin(), tl.h.end(), NAN);
    tq.upload(), tk.upload(), tv.upload(), to.upload(), tl.upload();
    if (fg_cuda_attn_bf16_forward(to.p(), tl.p(), tq.p(), tk.p(), tv.p(), &pr) != FG_OK) {
        printf("  FAIL %s forward: %s\n", label, fg_last_error());
        return 1;
    }
    if (!to.download() || !tl.download()) {
        printf("  FAIL %s: the forward wrote outside its buffers\n", label);
        return 1;
    }
    bad |= !close(to.h.data(), mo.data(), nq, mirror_tol, &e[5]);
    bad |= !close(tl.h.data(), ml.data(), nl, mirror_tol, &e[6]);
    /* the emulated backward, from the mirror's O and lse (the same P, so the same bf16 roundings),
     * into the same random gradients; twice from the same state, bit for bit (deterministic) */
    gbuf<uint16_t> tdo(nq, 0x7fc1);
    gbuf<float> tdq(nq, -12345.5f), tdk(nk, -12345.5f), tdv(nk, -12345.5f), tD(nl, -12345.5f);
    tdo.h = dout, to.h = mo, tl.h = ml, tdq.h = g0q, tdk.h = g0k, tdv.h = g0v;
    to.h.resize(nq), tl.h.resize(nl);
    std::fill(tD.h.begin(), tD.h.end(), NAN);
    std::vector<float> first[3];
    for (int rep = 0; rep < 2; rep++) {
        tdo.upload(), to.upload(), tl.upload(), tdq.upload(), tdk.upload(), tdv.upload(), tD.upload();
        if (fg_cuda_attn_bf16_backward(tdq.p(), tdk.p(), tdv.p(), tD.p(), tdo.p(), tq.p(), tk.p(), tv.p(), to.p(),
                                       tl.p(), &pr) != FG_OK) {
            printf("  FAIL %s backward: %s\n", label, fg_last_error());
            return 1;
        }
        if (!tdq.download() || !tdk.download() || !tdv.download() || !tD.download()) {
            printf("  FAIL %s: the backward wrote outside its buffers\n", label);
            return 1;
        }
        if (rep == 0) {
            first[0] = tdq.h, first[1] = tdk.h, first[2] = tdv.h;
            tdq.h = g0q, tdk.h = g0k, tdv.h = g0v;
        } else if (memcmp(first[0].data(), tdq.h.data(), nq * 4) || memcmp(first[1].data(), tdk.h.data(), nk * 4) ||
                   memcmp(first[2].data(), tdv.h.data(), nk * 4)) {
            printf("  FAIL %s: two backward runs differ\n", label);
            bad = 1;
        }
    }
    /* on what the backward added (a kernel that overwrote would be off by the start values) */
    std::vector<double> kdq0(nq), kdk0(nk), kdv0(nk);
    for (size_t i = 0; i < nq; i++) kdq0[i] = (double)tdq.h[i] - g0q[i];
    for (size_t i = 0; i < nk; i++) kdk0[i] = (double)tdk.h[i] - g0k[i], kdv0[i] = (double)tdv.h[i] - g0v[i];
    bad |= !close(kdq0.data(), mdq0.data(), nq, mirror_tol, &e[7]);
    bad |= !close(kdk0.data(), mdk0.data(), nk, mirror_tol, &e[8]);
    bad |= !close(kdv0.data(), mdv0.data(), nk, mirror_tol, &e[9]);
    for (int i = 0; i < 10; i++)
        if (isfinite(e[i]) && e[i] > g_worst[i]) g_worst[i] = e[i];
    printf("  %s %s\n       mirror vs float64: O %.1e lse %.1e dQ %.1e dK %.1e dV %.1e (< %.0e);"
           " kernels vs mirror: O %.1e lse %.1e dQ %.1e dK %.1e dV %.1e (< %.0e)\n",
           bad ? "FAIL" : "ok  ", label, e[0], e[1], e[2], e[3], e[4], bf_tol, e[5], e[6], e[7], e[8], e[9],
           mirror_tol);
    return bad;
}

/* ---- the seeded missing waits ---- */

/* One namespace's forward, then its backward (kernels 1, 2, 3), D = 64, at B = 1, H = 2, N = 130
 * (three key tiles, two query tiles, so the pipelines' second stage is used), causal; exit 0 when
 * every launch succeeded. The inputs are random bf16 and lse comes from the forward, so a kernel
 * with its wait in place computes on finite values. */
template <typename A, void (*FWD)(A), void (*ROWDOT)(float *, const uint16_t *, const float *, int64_t, int),
          void (*DKDV)(A), void (*DQ)(A)>
static int seeded_run() {
    const int64_t B = 1, H = 2, N = 130, d = 64, n = B * H * N * d, nl = B * H * N;
    std::vector<uint16_t> x((size_t)n);
    uint16_t *q, *k, *v, *dout;
    float *o, *lse, *Drow, *dq, *dk, *dv;
    uint16_t **in[] = {&q, &k, &v, &dout};
    for (int i = 0; i < 4; i++) {
        for (int64_t j = 0; j < n; j++) x[(size_t)j] = fg_bf16_rne((float)urand(90 + i, (uint64_t)j));
        cudaMalloc(in[i], (size_t)n * 2);
        cudaMemcpy(*in[i], x.data(), (size_t)n * 2, cudaMemcpyHostToDevice);
    }
    const std::vector<float> zeros((size_t)n, 0.0f);
    float **out[] = {&o, &dq, &dk, &dv};
    for (float **p : out) {
        cudaMalloc(p, (size_t)n * 4);
        cudaMemcpy(*p, zeros.data(), (size_t)n * 4, cudaMemcpyHostToDevice);
    }
    cudaMalloc(&lse, (size_t)nl * 4);
    cudaMalloc(&Drow, (size_t)nl * 4);
    A a;
    memset(&a, 0, sizeof a);
    a.q = q, a.k = k, a.v = v, a.dout = dout, a.o = o, a.lse = lse, a.Drow = Drow, a.dq = dq, a.dk = dk, a.dv = dv;
    a.B = B, a.H = H, a.Nq = N, a.Nk = N, a.Hkv = H, a.G = 1, a.d = (int)d, a.scale = 0.125f, a.causal = 1;
    a.inv_keep = 1.0f;
    const size_t fwd_smem = seeded_control::fa16_fwd_smem<64>(), dkdv_smem = seeded_control::fa16_dkdv_smem<64>(),
                 dq_smem = seeded_control::fa16_dq_smem<64>();
    cudaFuncSetAttribute((const void *)FWD, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fwd_smem);
    cudaFuncSetAttribute((const void *)DKDV, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dkdv_smem);
    cudaFuncSetAttribute((const void *)DQ, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dq_smem);
    const dim3 grid((unsigned)fg_attn_ntiles(N, 64), (unsigned)H, (unsigned)B);
    fg_emu_kernel_call(grid, 128, fwd_smem, (cudaStream_t)0, FWD, a);
    fg_emu_kernel_call(dim3(4), 128, (size_t)0, (cudaStream_t)0, ROWDOT, Drow, (const uint16_t *)dout, (const float *)o,
                       nl, (int)d);
    fg_emu_kernel_call(grid, 128, dkdv_smem, (cudaStream_t)0, DKDV, a);
    fg_emu_kernel_call(grid, 128, dq_smem, (cudaStream_t)0, DQ, a);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        fprintf(stderr, "seeded run: a launch failed: %s\n", cudaGetErrorString(e));
        return 1;
    }
    return 0;
}
#define SEEDED(ns)                                                                                                     \
    seeded_run<ns::fa16_args, ns::fa16_fwd_kernel<64>, ns::fa16_bwd_rowdot_kernel, ns::fa16_bwd_dkdv_kernel<64>,       \
               ns::fa16_bwd_dq_kernel<64>>


int main() {
    static const shape shapes[] = {
        {1, 1, 64, 64, 64, 0, 0},
        {1, 2, 100, 130, 64, 1, 0},
        {1, 1, 130, 70, 128, 1, 0.2},                /* Nq > Nk: bottom-right rows with no key */
        {2, 4, 77, 77, 64, 1, 0.1, 2},               /* GQA 4:2, dropout */
        {1, 3, 50, 90, 40, 0, 0, 1},                 /* multi-query, d padded to 64 */
        {1, 1, 70, 45, 96, 2, 0},                    /* top-left causal, d padded to 128 */
        {1, 2, 90, 140, 64, 1, 0.25, 0, 1, 20, 3},   /* window + causal + dropout */
        {1, 1, 20, 0, 64, 0, 0},                     /* no keys */
        {1, 1, 65, 129, 128, 0, 0, 0, 0, 0, 0, 1.0}, /* scale 1: peaked rows */
        {1, 2, 200, 333, 64, 1, 0},                  /* many key tiles, causal */
        {2, 4, 257, 129, 128, 1, 0.1, 2},            /* many query tiles, GQA, dropout */
        {1, 3, 130, 190, 96, 0, 0, 1},               /* multi-query, padded d = 96 */
        {1, 2, 191, 191, 128, 2, 0.15},              /* ragged tails at d = 128, top-left causal, dropout */
        {1, 4, 150, 97, 128, 1, 0, 2, 1, 30, 5},     /* d = 128: window + causal + GQA, ragged tails */
        {1, 1, 1, 200, 64, 1, 0},                    /* one query row: it sees every key */
    };
    printf("bf16 tensor-core flash attention under the emulator (cuda/attention_bf16.cuh) vs the bf16 mirror, "
           "and the mirror vs float64\n");
    int fails = 0, n = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++, n++) fails += run(shapes[i], i + 1);
    static const detector_case seeded[] = {
        {"control: the kernels' copy with every cp.async wait and barrier in place", SEEDED(seeded_control), false, nullptr},
        {"seeded: the forward reads its K/V tile without the cp.async wait", SEEDED(seeded_fwd_no_wait), true,
         "no cp.async wait_group"},
        {"seeded: the forward's tiles without the barrier after the wait", SEEDED(seeded_fwd_no_barrier), true,
         "race on dynamic shared memory"},
        {"seeded: the dK/dV kernel reads its K, V, Q, dO tiles without the cp.async wait", SEEDED(seeded_dkdv_no_wait), true,
         "no cp.async wait_group"},
        {"seeded: the dK/dV kernel's tiles without the barrier after the wait", SEEDED(seeded_dkdv_no_barrier), true,
         "race on dynamic shared memory"},
        {"seeded: the dQ kernel reads its Q, dO, K, V tiles without the cp.async wait", SEEDED(seeded_dq_no_wait), true,
         "no cp.async wait_group"},
        {"seeded: the dQ kernel's tiles without the barrier after the wait", SEEDED(seeded_dq_no_barrier), true,
         "race on dynamic shared memory"},
    };
    { /* bad input: a q that is not 16-byte aligned is refused before any launch, in one line */
        fg_attn_opts op = fg_attn_defaults();
        fg_attn_problem pr;
        uint16_t *x = nullptr;
        float *f = nullptr;
        cudaMalloc(&x, 4 * 64 * 64 * 2 + 16);
        cudaMalloc(&f, 64 * 64 * 4);
        const bool ok = fg_attn_problem_init(&pr, 1, 1, 64, 64, 64, &op) == FG_OK &&
                        fg_cuda_attn_bf16_forward(f, f, x + 1, x, x, &pr) == FG_ERR_ARG &&
                        strstr(fg_last_error(), "q is not 16-byte aligned") &&
                        fg_cuda_attn_bf16_backward(f, f, f, f, x + 1, x, x, x, f, f, &pr) == FG_ERR_ARG &&
                        strstr(fg_last_error(), "dout is not 16-byte aligned");
        printf("  %s a misaligned q (forward) or dout (backward) is refused: %s\n", ok ? "ok  " : "FAIL",
               fg_last_error());
        fails += !ok;
        n++;
        cudaFree(x);
        cudaFree(f);
    }
    printf("seeded bugs in copies of the bf16 kernels (each in a child process):\n");
    int seeded_fails = 0;
    for (const detector_case &c : seeded) seeded_fails += run_case(c);
    fails += seeded_fails;
    n += (int)(sizeof seeded / sizeof seeded[0]);
    printf("attn_bf16_emu: %d of %d cases failed; worst mirror vs float64: O %.1e lse %.1e dQ %.1e dK %.1e dV %.1e; "
           "worst kernels vs mirror: O %.1e lse %.1e dQ %.1e dK %.1e dV %.1e\n",
           fails, n, g_worst[0], g_worst[1], g_worst[2], g_worst[3], g_worst[4], g_worst[5], g_worst[6], g_worst[7],
           g_worst[8], g_worst[9]);
    return fails > 255 ? 255 : fails;
}
