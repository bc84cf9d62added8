/* attn_bf16_mirror.h — the CPU "bf16 mirror" of the tensor-core flash attention
 * (cuda/attention_bf16.cuh): the arithmetic the kernels are meant to do, written as plain loops —
 * bf16 operands (Q, K, V, dO, and the weights P and dS where they enter a product), float32
 * accumulation, the forward's online softmax over the kernels' 64-key tiles (the bf16 rounding of
 * P depends on the running max, so the mirror keeps the same tiles) — so the emulated kernels can be
 * held to ~1e-5 of it, while the mirror itself is held to the float64 reference at bf16 tolerance.
 * It follows no kernel's data layout, and no summation order beyond that and mirror_dot's. Test code (C++).
 *
 * Shapes (outermost first): q (B, H, Nq, d), k, v (B, H_kv, Nk, d) bf16 bits; dout bf16 bits
 * (B, H, Nq, d); o (B, H, Nq, d), lse (B, H, Nq) float32; dq (B, H, Nq, d), dk, dv (B, H_kv, Nk, d)
 * float32, ADDED into (the backward accumulates). pr: causal, window, GQA, dropout (no softcap,
 * ALiBi or callbacks).
 */
#ifndef FG_ATTN_BF16_MIRROR_H
#define FG_ATTN_BF16_MIRROR_H

#include <math.h>
#include <stdint.h>

#include <vector>

#include "cuda/ptx_mma.cuh"
#include "ops/attention_kernels.h"

static inline float fg_bf16_round(float x) { return fg_bf16_float(fg_bf16_rne(x)); }

/* Σ_c x_c · y_c over bf16 operands into a float32 accumulator, 16 terms at a time: each chunk's
 * products summed exactly and added, rounded once, to the running float32 sum — the m16n8k16
 * step (a tensor core adds the chunk in a wider format before rounding into the accumulator). The
 * dot products whose results are rounded to bf16 afterwards (S before P, dP before dS) are summed
 * this way, so that the kernels and the mirror round the same float32 values: a last-bit difference
 * in S could move P across a bf16 rounding boundary, a 2^-9 change. */
static inline float mirror_dot(const uint16_t *x, const uint16_t *y, int64_t d) {
    float s = 0;
    for (int64_t c0 = 0; c0 < d; c0 += 16) {
        double part = s;
        for (int64_t c = c0; c < d && c < c0 + 16; c++) part += (double)fg_bf16_float(x[c]) * fg_bf16_float(y[c]);
        s = (float)part;
    }
    return s;
}
/* S = scale · q_i · k_j */
static inline float mirror_score(const uint16_t *qi, const uint16_t *kj, int64_t d, float scale) {
    return mirror_dot(qi, kj, d) * scale;
}

/* forward: o, lse out */
static void bf16_mirror_forward(float *o, float *lse, const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                const fg_attn_problem *pr) {
    const int64_t B = pr->B, H = pr->H, Nq = pr->Nq, Nk = pr->Nk, d = pr->d, BK = 64;
    const int64_t Hkv = pr->var.n_kv_heads, G = H / Hkv;
    const float scale = (float)pr->scale, inv_keep = (float)(1.0 / (1.0 - pr->dropout_p));
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    std::vector<float> acc((size_t)d), x((size_t)BK);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t bh = b * H + h, bg = b * Hkv + h / G;
            for (int64_t i = 0; i < Nq; i++) {
                int64_t lo, hi;
                fg_attn_row_range(i, Nq, Nk, pr->causal, pr->var.window, pr->var.window_left, pr->var.window_right, &lo,
                                  &hi);
                const uint16_t *qi = q + (bh * Nq + i) * d;
                float m = -INFINITY, l = 0;
                for (auto &a : acc) a = 0;
                /* every key tile: one a row does not see leaves m, l and acc as they are */
                for (int64_t j0 = 0; j0 < Nk; j0 += BK) {
                    const int64_t n = Nk - j0 < BK ? Nk - j0 : BK;
                    float mt = -INFINITY;
                    for (int64_t jj = 0; jj < n; jj++) {
                        const int64_t j = j0 + jj;
                        x[(size_t)jj] =
                            j >= lo && j < hi ? mirror_score(qi, k + (bg * Nk + j) * d, d, scale) : -INFINITY;
                        mt = x[(size_t)jj] > mt ? x[(size_t)jj] : mt;
                    }
                    const float mnew = m > mt ? m : mt, ms = mnew == -INFINITY ? 0.0f : mnew;
                    const float alpha = expf(m - ms);
                    float rsum = 0;
                    for (int64_t c = 0; c < d; c++) acc[(size_t)c] *= alpha;
                    for (int64_t jj = 0; jj < n; jj++) {
                        const int64_t j = j0 + jj;
                        const float p = expf(x[(size_t)jj] - ms);
                        rsum += p;
                        const float pz = fg_attn_keep(pr->seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j)
                                             ? p * inv_keep
                                             : 0.0f;
                        const float pb = fg_bf16_round(pz);
                        const uint16_t *vj = v + (bg * Nk + j) * d;
                        for (int64_t c = 0; c < d; c++) acc[(size_t)c] += pb * fg_bf16_float(vj[c]);
                    }
                    l = alpha * l + rsum;
                    m = mnew;
                }
                const bool seen = l != 0.0f;
                for (int64_t c = 0; c < d; c++) o[(bh * Nq + i) * d + c] = seen ? acc[(size_t)c] * (1.0f / l) : 0.0f;
                lse[bh * Nq + i] = seen ? (float)((double)m + log((double)l)) : -INFINITY;
            }
        }
}

/* backward from the forward's o and lse (float32), recomputing P = exp(x − L):
 *   D_i = Σ_c dO_ic · O_ic (float64, rounded once);  dP = dO Vᵀ (bf16 operands, float32)
 *   dS = P ∘ (dP ∘ Z − D);  dV += bf16(P ∘ Z)ᵀ dO;  dQ += scale · bf16(dS) K;  dK += scale · bf16(dS)ᵀ Q */
static void bf16_mirror_backward(float *dq, float *dk, float *dv, const uint16_t *dout, const uint16_t *q,
                                 const uint16_t *k, const uint16_t *v, const float *o, const float *lse,
                                 const fg_attn_problem *pr) {
    const int64_t B = pr->B, H = pr->H, Nq = pr->Nq, Nk = pr->Nk, d = pr->d;
    const int64_t Hkv = pr->var.n_kv_heads, G = H / Hkv;
    const float scale = (float)pr->scale, inv_keep = (float)(1.0 / (1.0 - pr->dropout_p));
    const uint32_t thr = fg_dropout_threshold(pr->dropout_p);
    const size_t nk = (size_t)(B * Hkv * Nk * d), nq = (size_t)(B * H * Nq * d);
    std::vector<float> gq(nq, 0.0f), gk(nk, 0.0f), gv(nk, 0.0f);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t bh = b * H + h, bg = b * Hkv + h / G;
            for (int64_t i = 0; i < Nq; i++) {
                const float L = lse[bh * Nq + i];
                if (L == -INFINITY) continue; /* no key: P = 0, no gradient */
                int64_t lo, hi;
                fg_attn_row_range(i, Nq, Nk, pr->causal, pr->var.window, pr->var.window_left, pr->var.window_right, &lo,
                                  &hi);
                const uint16_t *qi = q + (bh * Nq + i) * d, *doi = dout + (bh * Nq + i) * d;
                double Dd = 0;
                for (int64_t c = 0; c < d; c++) Dd += (double)fg_bf16_float(doi[c]) * o[(bh * Nq + i) * d + c];
                const float Di = (float)Dd;
                for (int64_t j = lo; j < hi; j++) {
                    const uint16_t *kj = k + (bg * Nk + j) * d, *vj = v + (bg * Nk + j) * d;
                    const float P = expf(mirror_score(qi, kj, d, scale) - L);
                    const float Z = fg_attn_keep(pr->seed, thr, (uint32_t)b, (uint32_t)h, (uint32_t)i, (uint32_t)j)
                                        ? inv_keep
                                        : 0.0f;
                    const float dp = mirror_dot(doi, vj, d);
                    const float ds = fg_bf16_round(P * (dp * Z - Di)), pz = fg_bf16_round(P * Z);
                    for (int64_t c = 0; c < d; c++) {
                        gv[(size_t)((bg * Nk + j) * d + c)] += pz * fg_bf16_float(doi[c]);
                        gk[(size_t)((bg * Nk + j) * d + c)] += ds * fg_bf16_float(qi[c]);
                        gq[(size_t)((bh * Nq + i) * d + c)] += ds * fg_bf16_float(kj[c]);
                    }
                }
            }
        }
    for (size_t e = 0; e < nq; e++) dq[e] += scale * gq[e];
    for (size_t e = 0; e < nk; e++) dk[e] += scale * gk[e], dv[e] += gv[e];
}

#endif /* FG_ATTN_BF16_MIRROR_H */
