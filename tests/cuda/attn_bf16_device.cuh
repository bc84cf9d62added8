/* attn_bf16_device.cuh — the device cases of the bf16 tensor-core attention (cuda/attention_bf16.h),
 * for tests/cuda/test_device.cu (the device-only suite: real tensor cores, which the emulator
 * replaces by its own arithmetic). The kernels run on the GPU on bf16 inputs; their results are
 * compared with the bf16 mirror (tests/cuda/emu/attn_bf16_mirror.h) and with the float64 reference
 * on the same inputs, and the backward runs twice for bit-identity. The mirror tolerance is wider
 * than the emulator's 1e-5: a tensor core's accumulation and the device expf differ from the
 * mirror's in the last bits, which can move a weight across a bf16 rounding boundary. */
#ifndef FG_ATTN_BF16_DEVICE_CUH
#define FG_ATTN_BF16_DEVICE_CUH

#include <math.h>
#include <vector>

#include "cuda/attention_bf16.h"
#include "tests/cuda/cuda_test.h"
#include "tests/cuda/emu/attn_bf16_mirror.h"

/* relative norm error (non-finite entries must agree) */
template <typename A, typename B> static double bf16_rel_err(const A *got, const B *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double g = (double)got[i], w = (double)want[i];
        if (!isfinite(g) || !isfinite(w)) {
            if (!(g == w || (isnan(g) && isnan(w)))) return INFINITY;
            continue;
        }
        num += (g - w) * (g - w), den += w * w;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

template <typename T> static T *bf16_dev_copy(const std::vector<T> &h) {
    T *d = NULL;
    if (cudaMalloc(&d, h.size() * sizeof(T) + 16) != cudaSuccess) return NULL;
    if (cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess) return NULL;
    return d;
}

/* One problem: forward and backward on the device vs the mirror (tol_m) and float64 (1e-2). */
static int bf16_device_case(int64_t B, int64_t H, int64_t Hkv, int64_t Nq, int64_t Nk, int64_t d, int causal, double p,
                            double tol_m) {
    fg_attn_opts op = fg_attn_defaults();
    op.causal = causal, op.dropout_p = p, op.seed = 4242, op.variant.n_kv_heads = Hkv;
    fg_attn_problem pr;
    FGT_CHECK(fg_attn_problem_init(&pr, B, H, Nq, Nk, d, &op) == FG_OK, "problem: %s", fg_last_error());
    const size_t nq = (size_t)(B * H * Nq * d), nk = (size_t)(B * Hkv * Nk * d), nl = (size_t)(B * H * Nq);
    std::vector<uint16_t> q(nq), k(nk), v(nk), dout(nq);
    std::vector<uint16_t> *ins[] = {&q, &k, &v, &dout};
    for (int a = 0; a < 4; a++)
        for (size_t i = 0; i < ins[a]->size(); i++)
            (*ins[a])[i] = fg_bf16_rne((float)(2.0 * fg_u32_to_uniform_f64(fg_philox_u32(900 + a, 3, i)) - 1.0));
    /* mirror and float64 reference */
    std::vector<float> mo(nq), ml(nl), mdq(nq, 0.0f), mdk(nk, 0.0f), mdv(nk, 0.0f);
    bf16_mirror_forward(mo.data(), ml.data(), q.data(), k.data(), v.data(), &pr);
    bf16_mirror_backward(mdq.data(), mdk.data(), mdv.data(), dout.data(), q.data(), k.data(), v.data(), mo.data(),
                         ml.data(), &pr);
    std::vector<double> q64(nq), k64(nk), v64(nk), do64(nq), ro(nq), rl(nl), rp((size_t)(B * H * Nq * Nk)),
        rdq(nq, 0.0), rdk(nk, 0.0), rdv(nk, 0.0);
    for (size_t i = 0; i < nq; i++) q64[i] = fg_bf16_float(q[i]), do64[i] = fg_bf16_float(dout[i]);
    for (size_t i = 0; i < nk; i++) k64[i] = fg_bf16_float(k[i]), v64[i] = fg_bf16_float(v[i]);
    FGT_CHECK(fg_attn_naive_forward_f64(ro.data(), rl.data(), rp.data(), q64.data(), k64.data(), v64.data(), &pr) ==
                      FG_OK &&
                  fg_attn_naive_backward_f64(rdq.data(), rdk.data(), rdv.data(), do64.data(), q64.data(), k64.data(),
                                             v64.data(), rp.data(), &pr) == FG_OK,
              "reference: %s", fg_last_error());
    /* the device */
    std::vector<float> zq(nq, 0.0f), zk(nk, 0.0f), zl(nl, 0.0f);
    uint16_t *dq16 = bf16_dev_copy(q), *dk16 = bf16_dev_copy(k), *dv16 = bf16_dev_copy(v), *ddo = bf16_dev_copy(dout);
    float *o = bf16_dev_copy(zq), *lse = bf16_dev_copy(zl), *Drow = bf16_dev_copy(zl);
    float *gq = bf16_dev_copy(zq), *gk = bf16_dev_copy(zk), *gv = bf16_dev_copy(zk);
    FGT_CHECK(dq16 && dk16 && dv16 && ddo && o && lse && Drow && gq && gk && gv, "cudaMalloc");
    FGT_CHECK(fg_cuda_attn_bf16_forward(o, lse, dq16, dk16, dv16, &pr) == FG_OK, "forward: %s", fg_last_error());
    std::vector<float> ko(nq), kl(nl), kdq[2], kdk[2], kdv[2];
    FGT_CHECK(cudaMemcpy(ko.data(), o, nq * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
                  cudaMemcpy(kl.data(), lse, nl * 4, cudaMemcpyDeviceToHost) == cudaSuccess,
              "copy: %s", cudaGetErrorString(cudaGetLastError()));
    /* the backward from the mirror's O and lse (the same P), twice */
    FGT_CHECK(cudaMemcpy(o, mo.data(), nq * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
                  cudaMemcpy(lse, ml.data(), nl * 4, cudaMemcpyHostToDevice) == cudaSuccess,
              "copy");
    for (int rep = 0; rep < 2; rep++) {
        FGT_CHECK(cudaMemcpy(gq, zq.data(), nq * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
                      cudaMemcpy(gk, zk.data(), nk * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
                      cudaMemcpy(gv, zk.data(), nk * 4, cudaMemcpyHostToDevice) == cudaSuccess,
                  "copy");
        FGT_CHECK(fg_cuda_attn_bf16_backward(gq, gk, gv, Drow, ddo, dq16, dk16, dv16, o, lse, &pr) == FG_OK,
                  "backward: %s", fg_last_error());
        kdq[rep].resize(nq), kdk[rep].resize(nk), kdv[rep].resize(nk);
        FGT_CHECK(cudaMemcpy(kdq[rep].data(), gq, nq * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
                      cudaMemcpy(kdk[rep].data(), gk, nk * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
                      cudaMemcpy(kdv[rep].data(), gv, nk * 4, cudaMemcpyDeviceToHost) == cudaSuccess,
                  "copy: %s", cudaGetErrorString(cudaGetLastError()));
    }
    void *bufs[] = {dq16, dk16, dv16, ddo, o, lse, Drow, gq, gk, gv};
    for (void *b : bufs) cudaFree(b);
    const double em[5] = {bf16_rel_err(ko.data(), mo.data(), nq), bf16_rel_err(kl.data(), ml.data(), nl),
                          bf16_rel_err(kdq[0].data(), mdq.data(), nq), bf16_rel_err(kdk[0].data(), mdk.data(), nk),
                          bf16_rel_err(kdv[0].data(), mdv.data(), nk)};
    const double er[5] = {bf16_rel_err(ko.data(), ro.data(), nq), bf16_rel_err(kl.data(), rl.data(), nl),
                          bf16_rel_err(kdq[0].data(), rdq.data(), nq), bf16_rel_err(kdk[0].data(), rdk.data(), nk),
                          bf16_rel_err(kdv[0].data(), rdv.data(), nk)};
    printf("    [B=%lld H=%lld Hkv=%lld Nq=%lld Nk=%lld d=%lld causal=%d p=%g] vs mirror: O %.1e lse %.1e dQ %.1e dK "
           "%.1e dV %.1e; vs float64: O %.1e lse %.1e dQ %.1e dK %.1e dV %.1e\n",
           (long long)B, (long long)H, (long long)Hkv, (long long)Nq, (long long)Nk, (long long)d, causal, p, em[0],
           em[1], em[2], em[3], em[4], er[0], er[1], er[2], er[3], er[4]);
    const bool same = kdq[0] == kdq[1] && kdk[0] == kdk[1] && kdv[0] == kdv[1];
    FGT_CHECK(same, "two backward runs differ");
    for (int i = 0; i < 5; i++) {
        FGT_CHECK(em[i] <= tol_m, "output %d: %.2e from the mirror (> %.0e)", i, em[i], tol_m);
        FGT_CHECK(er[i] <= 1e-2, "output %d: %.2e from float64 (> 1e-2)", i, er[i]);
    }
    return FGT_PASS;
}

static int bf16_tensor_core_attention_matches_the_mirror(void) {
    if (FGT_DEV != FG_CUDA) return FGT_SKIP;
    const double tol = 1e-4;
    int rc = FGT_PASS;
    if (rc == FGT_PASS) rc = bf16_device_case(1, 2, 2, 200, 333, 64, 1, 0.0, tol);
    if (rc == FGT_PASS) rc = bf16_device_case(2, 4, 2, 257, 129, 128, 1, 0.1, tol);
    if (rc == FGT_PASS) rc = bf16_device_case(1, 3, 1, 130, 190, 96, 0, 0.0, tol);
    return rc;
}

#endif /* FG_ATTN_BF16_DEVICE_CUH */
