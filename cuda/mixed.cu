/* mixed.cu — bfloat16 mixed precision's conversion kernel and its attention shell (see
 * cuda/mixed.cuh). cuda/matmul.cu calls the conversion for its GEMMs.
 *
 * Legend (attention): B batch, H heads, H_kv K/V heads, Nq queries, Nk keys, d head dim.
 *   q, dout (B, H, Nq, d); k, v (B, H_kv, Nk, d) float32, converted to bf16 scratch of the same
 *   shapes; o, dq (B, H, Nq, d), dk, dv (B, H_kv, Nk, d), lse (B, H, Nq) float32.
 */
#include <stdio.h>

#include "cuda/attention_bf16.h"
#include "cuda/mixed.cuh"
#include "cuda/ptx_mma.cuh"

/* ============================================================================================
 * kernel
 * ============================================================================================ */

/* dst[k] = bf16(src at element k of (batch, rows, cols)), k the flat C-order index; FLAT: src is
 * contiguous there too (no index arithmetic) */
template <bool FLAT>
__global__ void bf16_from_f32_kernel(uint16_t *dst, const float *src, int64_t n, int64_t rows, int64_t cols,
                                     int64_t ld, int64_t sb) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n; k += (int64_t)gridDim.x * blockDim.x) {
        int64_t at = k;
        if (!FLAT) {
            const int64_t r = k / cols, c = k - r * cols, b = r / rows;
            at = b * sb + (r - b * rows) * ld + c;
        }
        dst[k] = fg_bf16_rne(src[at]);
    }
}

fg_status fg_cu_bf16_copy::make(const float *src, int64_t batch, int64_t rows, int64_t cols, int64_t ld, int64_t sb,
                                const char *what) {
    const int64_t n = batch * rows * cols;
    FG_TRY(s.get((size_t)n * sizeof(uint16_t), what));
    if (n == 0) return FG_OK;
    const bool flat = ld == cols && (batch == 1 || sb == rows * cols);
    if (flat)
        bf16_from_f32_kernel<true>
            <<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>(s.as<uint16_t>(), src, n, rows, cols, ld, sb);
    else
        bf16_from_f32_kernel<false>
            <<<fg_cu_blocks(n), FG_CU_THREADS, 0, fg_cu_stream()>>>(s.as<uint16_t>(), src, n, rows, cols, ld, sb);
    FG_CU_LAUNCHED();
    return FG_OK;
}

/* ============================================================================================
 * attention
 * ============================================================================================ */

/* What the bf16 kernels take, or one line saying what under mixed precision they do not. */
static fg_status mixed_attention_check(fg_attn_impl impl, fg_dtype dt, const fg_attn_problem *pr, const char *what) {
    if (dt != FG_F32)
        return fg_error(FG_ERR_DTYPE, "%s under bfloat16 mixed precision takes float32 tensors, got %s", what,
                        fg_dtype_name(dt));
    if (impl != FG_ATTN_FLASH)
        return fg_error(FG_ERR_ARG,
                        "%s under bfloat16 mixed precision: the naive implementation has no bf16 kernels (use "
                        "flash, or float32)",
                        what);
    if (fg_cuda_attn_bf16_check(pr) != FG_OK) {
        char why[512]; /* fg_error must not read the buffer it writes */
        snprintf(why, sizeof why, "%s", fg_last_error());
        return fg_error(FG_ERR_ARG, "%s under bfloat16 mixed precision: %s (no float32 fallback)", what, why);
    }
    return FG_OK;
}

static int64_t kv_heads(const fg_attn_problem *pr) { return pr->var.n_kv_heads > 0 ? pr->var.n_kv_heads : pr->H; }

fg_status fg_cu_attention_mixed_forward(fg_attn_impl impl, fg_dtype dt, void *o, void *lse, void *aux, const void *q,
                                        const void *k, const void *v, const fg_attn_problem *pr) {
    FG_TRY(mixed_attention_check(impl, dt, pr, "attention"));
    const int64_t rows = pr->B * pr->H * pr->Nq, nq = rows * pr->d, nk = pr->B * kv_heads(pr) * pr->Nk * pr->d;
    if (rows == 0) return FG_OK;
    fg_cu_bf16_copy qb, kb, vb;
    FG_TRY(qb.make((const float *)q, nq, "attention (bf16 q)"));
    FG_TRY(kb.make((const float *)k, nk, "attention (bf16 k)"));
    FG_TRY(vb.make((const float *)v, nk, "attention (bf16 v)"));
    if (aux) FG_CU(cudaMemsetAsync(aux, 0, (size_t)rows * sizeof(float), fg_cu_stream()));
    return fg_cuda_attn_bf16_forward((float *)o, (float *)lse, qb.p(), kb.p(), vb.p(), pr);
}

fg_status fg_cu_attention_mixed_backward(fg_attn_impl impl, fg_dtype dt, void *dq, void *dk, void *dv,
                                         const void *dout, const void *q, const void *k, const void *v, const void *o,
                                         const void *lse, const fg_attn_problem *pr) {
    FG_TRY(mixed_attention_check(impl, dt, pr, "attention backward"));
    const int64_t rows = pr->B * pr->H * pr->Nq, nq = rows * pr->d, nk = pr->B * kv_heads(pr) * pr->Nk * pr->d;
    if ((!dq && !dk && !dv) || rows == 0) return FG_OK;
    fg_cu_bf16_copy qb, kb, vb, db;
    FG_TRY(qb.make((const float *)q, nq, "attention backward (bf16 q)"));
    FG_TRY(kb.make((const float *)k, nk, "attention backward (bf16 k)"));
    FG_TRY(vb.make((const float *)v, nk, "attention backward (bf16 v)"));
    FG_TRY(db.make((const float *)dout, nq, "attention backward (bf16 dout)"));
    /* the kernels write all three gradients: the ones not wanted go to zeroed scratch */
    fg_cu_scratch Drow, sq, sk, sv;
    FG_TRY(Drow.get((size_t)rows * sizeof(float), "attention backward (D)"));
    void *g[3] = {dq, dk, dv};
    fg_cu_scratch *spare[3] = {&sq, &sk, &sv};
    const int64_t sizes[3] = {nq, nk, nk};
    for (int i = 0; i < 3; i++)
        if (!g[i]) {
            FG_TRY(spare[i]->get((size_t)sizes[i] * sizeof(float), "attention backward (unwanted gradient)"));
            FG_CU(cudaMemsetAsync(spare[i]->p, 0, (size_t)sizes[i] * sizeof(float), fg_cu_stream()));
            g[i] = spare[i]->p;
        }
    return fg_cuda_attn_bf16_backward((float *)g[0], (float *)g[1], (float *)g[2], Drow.as<float>(), db.p(), qb.p(),
                                      kb.p(), vb.p(), (const float *)o, (const float *)lse, pr);
}
