/* fg_cuda_bench.cu — flashgrad's GPU attention, timed: forward and backward milliseconds and
 * TFLOP/s of the flash kernels (cuda/attention.cu) over sequence lengths and head dims, causal and
 * not. CSV on stdout, one row per configuration; bench/gpu_check.sh sets it beside PyTorch's
 * scaled_dot_product_attention (bench/attention_torch_gpu.py, same shapes and precision).
 *
 *   fg_cuda_bench [--n 1024,4096,16384] [--d 64,128] [--dtype f32|f64|bf16] [--tokens 16384]
 *                 [--hidden 2048] [--budget-ms 1500] [--impl flash|naive]
 *                 [--gqa HKV_DIVISOR] [--window L,R] [--alibi] [--softcap C]
 *   fg_cuda_bench --kernels      the flash kernels' shared memory, registers, local memory and
 *                                blocks per SM on this device (CSV), and nothing else
 *
 * --dtype bf16 times the tensor-core kernels of cuda/attention_bf16.h (bf16 q, k, v, dout; float32
 * o, lse and gradients; flash only, no ALiBi or softcap), called directly.
 *
 * Variants (ops/attention.h): --gqa G gives K and V H/G heads (G query heads share one), --window,
 * --alibi (standard slopes) and --softcap as in `flashgrad attention`; the last column names them.
 * With a window the FLOPs count the visible (i, j) pairs exactly (Σ_i of the row's key range), so
 * TFLOP/s measure useful work and the skipped tiles show up as time saved.
 *
 * Shapes follow the FlashAttention papers' benchmark: batch · N = tokens (16k), heads · d = hidden
 * (2048). FLOPs: forward 4·B·H·Nq·Nk·d (halved when causal), backward 2.5× the forward (the
 * papers' convention: 5 matrix products against 2). Inputs are standard normals from the cuRAND
 * generator. Each timing is the median of repeated runs after one warm-up, measured with CUDA
 * events; repeats stop at --budget-ms per measurement (at least 3 runs). peak_tflops is the
 * device's FMA peak for the dtype (2 · FMA lanes per SM · SMs · boost clock: sm_90 has 128 float32
 * and 64 float64 lanes per SM), and the *_peak_frac columns each TFLOP/s as a fraction of it. For
 * bf16 it is the dense bf16 tensor-core peak of NVIDIA's H100/H200 SXM datasheet, 989.4 TFLOP/s
 * at 132 SMs (4096 FLOPs per SM per clock at 1830 MHz), scaled by this device's SM count; on
 * other than compute capability 9.0 it is unknown (0, fractions nan).
 */
#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#include "cuda/attention_bf16.h"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_ops.h"
#include "cuda/kernels_cuda.h"
#include "cuda/ptx_mma.cuh"

static int parse_list(const char *s, std::vector<long> &out) {
    out.clear();
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0) return -1;
        out.push_back(v);
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return out.empty() ? -1 : 0;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define CHECK(x)                                                                                                       \
    do {                                                                                                               \
        if ((x) != FG_OK) {                                                                                            \
            fprintf(stderr, "fg_cuda_bench: %s\n", fg_last_error());                                                   \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#define CUCHECK(x)                                                                                                     \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "fg_cuda_bench: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));         \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

/* time `fn` (enqueues work on the stream) with events: median ms of at least 3 runs within budget */
template <typename F> static double time_ms(F fn, double budget_ms) {
    cudaStream_t s = fg_cu_stream();
    cudaEvent_t a, b;
    CUCHECK(cudaEventCreate(&a));
    CUCHECK(cudaEventCreate(&b));
    fn(); /* warm-up */
    CUCHECK(cudaStreamSynchronize(s));
    std::vector<double> t;
    double total = 0;
    while (t.size() < 3 || (total < budget_ms && t.size() < 20)) {
        CUCHECK(cudaEventRecord(a, s));
        fn();
        CUCHECK(cudaEventRecord(b, s));
        CUCHECK(cudaEventSynchronize(b));
        float ms = 0;
        CUCHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
        total += ms;
        if (t.size() >= 3 && total > 4 * budget_ms) break;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return median(t);
}

/* dst[i] = bf16(src[i]), round to nearest even: the bf16 inputs from cuRAND's float32 normals */
__global__ void bench_to_bf16(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = fg_bf16_rne(src[i]);
}

/* The dense bf16 tensor-core peak in TFLOP/s (see the top): sm_90 only, else 0 (unknown). */
static double bf16_peak_tflops() {
    int dev = 0, sms = 0;
    cudaDeviceProp prop;
    CUCHECK(cudaGetDevice(&dev));
    CUCHECK(cudaGetDeviceProperties(&prop, dev));
    CUCHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return prop.major == 9 && prop.minor == 0 ? 989.4 * sms / 132.0 : 0.0;
}

/* The device's FMA peak in TFLOP/s for dt: 2 FLOPs per lane per clock. */
static double fma_peak_tflops(fg_dtype dt) {
    int dev = 0, sms = 0, khz = 0;
    cudaDeviceProp prop;
    CUCHECK(cudaGetDevice(&dev));
    CUCHECK(cudaGetDeviceProperties(&prop, dev));
    CUCHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUCHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
    const int cc = prop.major * 10 + prop.minor;
    const int f32 = cc >= 86 ? 128 : 64;                                   /* sm_70, sm_80: 64 */
    const int f64 = cc == 70 || cc == 80 || cc >= 90 ? f32 / 2 : f32 / 64; /* GeForce-class parts: 1/64 */
    return 2.0 * (dt == FG_F64 ? f64 : f32) * sms * (khz * 1e3) / 1e12;
}

int main(int argc, char **argv) {
    std::vector<long> ns = {1024, 4096, 16384}, ds = {64, 128};
    long tokens = 16384, hidden = 2048;
    double budget = 1500;
    fg_dtype dt = FG_F32;
    fg_attn_impl impl = FG_ATTN_FLASH;
    fg_attn_variant var{}; /* no variant */
    long gqa = 1;
    int kernels = 0, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: fg_cuda_bench [--n LIST] [--d LIST] [--dtype f32|f64|bf16] [--tokens N] [--hidden N] "
                   "[--budget-ms MS] [--impl flash|naive] [--gqa G] [--window L,R] [--alibi] [--softcap C]\n"
                   "       fg_cuda_bench --kernels\n");
            return 0;
        }
        if (!strcmp(a, "--alibi")) {
            var.alibi = 1;
            continue;
        }
        if (!strcmp(a, "--kernels")) {
            kernels = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "fg_cuda_bench: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--n") && parse_list(v, ns) == 0) continue;
        if (!strcmp(a, "--d") && parse_list(v, ds) == 0) continue;
        if (!strcmp(a, "--tokens") && (tokens = atol(v)) > 0) continue;
        if (!strcmp(a, "--hidden") && (hidden = atol(v)) > 0) continue;
        if (!strcmp(a, "--budget-ms") && (budget = atof(v)) > 0) continue;
        if (!strcmp(a, "--dtype") && (!strcmp(v, "f32") || !strcmp(v, "f64") || !strcmp(v, "bf16"))) {
            dt = !strcmp(v, "f64") ? FG_F64 : FG_F32; /* bf16: float32 outputs and gradients */
            bf16 = !strcmp(v, "bf16");
            continue;
        }
        if (!strcmp(a, "--gqa") && (gqa = atol(v)) > 0) continue;
        if (!strcmp(a, "--softcap") && (var.softcap = atof(v)) > 0) continue;
        long wl, wr;
        if (!strcmp(a, "--window") && sscanf(v, "%ld,%ld", &wl, &wr) == 2 && wl >= -1 && wr >= -1) {
            var.window = 1;
            var.window_left = wl;
            var.window_right = wr;
            continue;
        }
        if (!strcmp(a, "--impl") && (!strcmp(v, "flash") || !strcmp(v, "naive"))) {
            impl = !strcmp(v, "naive") ? FG_ATTN_NAIVE : FG_ATTN_FLASH;
            continue;
        }
        fprintf(stderr, "fg_cuda_bench: bad option %s %s\n", a, v);
        return 2;
    }
    if (bf16 && impl == FG_ATTN_NAIVE) {
        fprintf(stderr, "fg_cuda_bench: --dtype bf16 has the flash kernels only (not --impl naive)\n");
        return 2;
    }
    CHECK(fg_cuda_init());
    fprintf(stderr, "fg_cuda_bench on %s\n", fg_cuda_device_string());
    if (kernels) {
        CHECK(fg_cuda_attention_kernel_table(stdout));
        return 0;
    }
    const double peak = bf16 ? bf16_peak_tflops() : fma_peak_tflops(dt);
    char vname[96] = "";
    if (gqa > 1) snprintf(vname + strlen(vname), sizeof vname - strlen(vname), "gqa%ld ", gqa);
    if (var.window)
        snprintf(vname + strlen(vname), sizeof vname - strlen(vname), "window%ld:%ld ", (long)var.window_left,
                 (long)var.window_right);
    if (var.alibi) snprintf(vname + strlen(vname), sizeof vname - strlen(vname), "alibi ");
    if (var.softcap > 0) snprintf(vname + strlen(vname), sizeof vname - strlen(vname), "softcap%g ", var.softcap);
    if (!*vname)
        snprintf(vname, sizeof vname, "none");
    else
        vname[strlen(vname) - 1] = '\0';
    printf("impl,dtype,B,H,N,d,causal,fwd_ms,bwd_ms,fwd_tflops,bwd_tflops,variant,peak_tflops,fwd_peak_frac,"
           "bwd_peak_frac\n");
    curandGenerator_t gen = (curandGenerator_t)fg_cuda_curand();
    const size_t es = fg_dtype_size(dt);
    for (long N : ns)
        for (long d : ds)
            for (int causal = 0; causal < 2; causal++) {
                const long B = std::max(1L, tokens / N), H = std::max(1L, hidden / d);
                fg_attn_opts op = fg_attn_defaults();
                op.impl = impl;
                op.causal = causal;
                op.variant = var;
                if (gqa > 1) {
                    if (H % gqa) {
                        fprintf(stderr, "fg_cuda_bench: --gqa %ld does not divide H = %ld (d = %ld)\n", gqa, H, d);
                        return 2;
                    }
                    op.variant.n_kv_heads = H / gqa;
                }
                fg_attn_problem pr;
                CHECK(fg_attn_problem_init(&pr, B, H, N, N, d, &op));
                if (bf16) CHECK(fg_cuda_attn_bf16_check(&pr));
                const size_t n = (size_t)B * H * N * d, nl = (size_t)B * H * N;
                double fwd, bwd;
                if (bf16) {
                    /* bf16 q, k, v, dout (k, v sized as q: GQA reads fewer heads); float32 o, lse,
                     * gradients (added into: zeroed once) and the backward's row-dot scratch */
                    uint16_t *q, *k, *v, *dout;
                    float *o, *lse, *dq, *dk, *dv, *Drow;
                    uint16_t **ins[4] = {&q, &k, &v, &dout};
                    float **outs[4] = {&o, &dq, &dk, &dv};
                    for (uint16_t **b : ins) CUCHECK(cudaMalloc(b, n * sizeof(uint16_t)));
                    for (float **b : outs) CUCHECK(cudaMalloc(b, n * sizeof(float)));
                    CUCHECK(cudaMalloc(&lse, nl * sizeof(float)));
                    CUCHECK(cudaMalloc(&Drow, nl * sizeof(float)));
                    for (uint16_t **b : ins) { /* normals into o, rounded to bf16 */
                        curandStatus_t st = curandGenerateNormal(gen, o, n, 0.0f, 1.0f);
                        if (st != CURAND_STATUS_SUCCESS) {
                            fprintf(stderr, "fg_cuda_bench: cuRAND status %d\n", (int)st);
                            return 1;
                        }
                        bench_to_bf16<<<1024, 256, 0, fg_cu_stream()>>>(*b, o, n);
                        CUCHECK(cudaGetLastError());
                    }
                    for (float **b : outs) CUCHECK(cudaMemsetAsync(*b, 0, n * sizeof(float), fg_cu_stream()));
                    CHECK(fg_cuda_attn_bf16_forward(o, lse, q, k, v, &pr));
                    fwd = time_ms([&] { CHECK(fg_cuda_attn_bf16_forward(o, lse, q, k, v, &pr)); }, budget);
                    bwd = time_ms(
                        [&] { CHECK(fg_cuda_attn_bf16_backward(dq, dk, dv, Drow, dout, q, k, v, o, lse, &pr)); },
                        budget);
                    for (uint16_t **b : ins) cudaFree(*b);
                    for (float **b : outs) cudaFree(*b);
                    cudaFree(lse);
                    cudaFree(Drow);
                } else {
                    /* aux: naive saves P (B, H, N, N); flash saves lse_lo (B, H, N), written by every forward */
                    const size_t np = impl == FG_ATTN_NAIVE ? (size_t)B * H * N * N : nl;
                    void *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv, *p;
                    void **bufs[8] = {&q, &k, &v, &o, &dout, &dq, &dk, &dv};
                    for (void **b : bufs) CUCHECK(cudaMalloc(b, n * es));
                    CUCHECK(cudaMalloc(&lse, nl * es));
                    CUCHECK(cudaMalloc(&p, np * es));
                    void *rnd[4] = {q, k, v, dout};
                    for (void *r : rnd) {
                        curandStatus_t st = dt == FG_F64 ? curandGenerateNormalDouble(gen, (double *)r, n, 0.0, 1.0)
                                                         : curandGenerateNormal(gen, (float *)r, n, 0.0f, 1.0f);
                        if (st != CURAND_STATUS_SUCCESS) {
                            fprintf(stderr, "fg_cuda_bench: cuRAND status %d\n", (int)st);
                            return 1;
                        }
                    }
                    CHECK(fg_cu_attention_forward(impl, dt, o, lse, p, q, k, v, &pr));
                    fwd = time_ms([&] { CHECK(fg_cu_attention_forward(impl, dt, o, lse, p, q, k, v, &pr)); }, budget);
                    bwd = time_ms(
                        [&] { CHECK(fg_cu_attention_backward(impl, dt, dq, dk, dv, dout, q, k, v, o, lse, p, &pr)); },
                        budget);
                    for (void **b : bufs) cudaFree(*b);
                    cudaFree(lse);
                    cudaFree(p);
                }
                double pairs = (double)N * N * (causal ? 0.5 : 1.0); /* the papers' convention */
                if (var.window) {                                    /* exactly the visible pairs */
                    pairs = 0;
                    for (long i = 0; i < N; i++) {
                        int64_t lo, hi;
                        fg_attn_row_range(i, N, N, causal, 1, var.window_left, var.window_right, &lo, &hi);
                        pairs += hi > lo ? (double)(hi - lo) : 0.0;
                    }
                }
                const double flops = 4.0 * B * H * pairs * d;
                const double tf = flops / (fwd * 1e9), tb = 2.5 * flops / (bwd * 1e9);
                printf("%s,%s,%ld,%ld,%ld,%ld,%d,%.3f,%.3f,%.2f,%.2f,%s,%.1f,%.3f,%.3f\n", fg_attn_impl_name(impl),
                       bf16           ? "bfloat16"
                       : dt == FG_F64 ? "float64"
                                      : "float32",
                       B, H, N, d, causal, fwd, bwd, tf, tb, vname, peak, peak > 0 ? tf / peak : NAN,
                       peak > 0 ? tb / peak : NAN);
                fflush(stdout);
            }
    CHECK(fg_cuda_synchronize());
    return 0;
}
