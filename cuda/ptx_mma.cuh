/* ptx_mma.cuh — bf16 tensor-core building blocks for the kernels of cuda/ (internal; C++): bf16
 * conversions, mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 and ldmatrix
 * (.x1/.x2/.x4, .trans). On the device they are inline PTX (sm_80 and later); under the CPU
 * emulator (FG_CUDA_EMU, tests/cuda/emu/emu_mma.h) the same calls are warp-collective steps that
 * follow the PTX ISA's fragment layouts, so a kernel written with these runs, checked, on a machine
 * without a GPU.
 *
 * bf16 values are kept as their bits (uint16_t): the top half of a float32. A .b32 register holds
 * two, the lower-indexed element in bits 0–15. Fragment layouts (groupID g = lane >> 2, t = lane % 4):
 *   A (16×16, row-major):  a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]
 *                          a[2] = A[g][2t+8, +9]   a[3] = A[g+8][2t+8, +9]
 *   B (16×8, column-major): b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
 *   C, D (16×8, float32):  d[0], d[1] = D[g][2t, 2t+1]   d[2], d[3] = D[g+8][2t, 2t+1]
 *   ldmatrix: matrix m (8×8) has its row r at the address lane 8m + r gives (16 bytes, 16-byte
 *   aligned, shared memory); lane l receives r[m] = M_m[g][2t, 2t+1], with .trans M_m[2t, 2t+1][g].
 * So the accumulator of one mma is, pair by pair, the A fragment of the next (S → P in flash
 * attention), and ldmatrix (.trans) of row-major tiles gives A and B fragments directly.
 */
#ifndef FG_PTX_MMA_CUH
#define FG_PTX_MMA_CUH

#include <stdint.h>
#include <string.h>

#include "tensor/bf16.h"

/* ---- bf16 ⇄ float32 (host and device) ---- */

/* x rounded to the nearest bf16, ties to even; NaN becomes the canonical NaN 0x7fff (as cvt.rn
 * does); overflow rounds to ±inf, subnormals are kept. */
__host__ __device__ __forceinline__ uint16_t fg_bf16_rne(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    return fg_bf16_from_f32(x); /* tensor/bf16.h's rounding, the one converter */
}
__host__ __device__ __forceinline__ float fg_bf16_float(uint16_t h) { return fg_bf16_to_f32(h); }

/* {lo, hi} rounded to bf16 and packed (lo in bits 0–15): cvt.rn.bf16x2.f32 */
__device__ __forceinline__ uint32_t fg_pack_bf16x2(float lo, float hi) {
#ifdef FG_CUDA_EMU
    return (uint32_t)fg_bf16_rne(lo) | (uint32_t)fg_bf16_rne(hi) << 16;
#else
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); /* the first source goes high */
    return r;
#endif
}

/* ---- warp-collective instructions: every lane of the warp calls them together ---- */

/* d += A · B for the warp's A (16×16 bf16), B (16×8 bf16), d (16×8 float32), fragments above */
__device__ __forceinline__ void fg_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#ifdef FG_CUDA_EMU
    fg_emu_mma_m16n8k16_bf16(d, a, b, d);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* N (1, 2, 4) 8×8 matrices of 16-bit elements from shared memory into r[0..N), transposed with
 * TRANS; `row` is this lane's row address (read from lanes 0 .. 8N − 1 only) */
template <int N, bool TRANS> __device__ __forceinline__ void fg_ldmatrix(uint32_t r[N], const void *row) {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix takes 1, 2 or 4 matrices");
#ifdef FG_CUDA_EMU
    fg_emu_ldmatrix<N, TRANS>(r, row);
#else
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(row);
    if constexpr (N == 1 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a) : "memory");
    else if constexpr (N == 1)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a) : "memory");
    else if constexpr (N == 2 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                     : "=r"(r[0]), "=r"(r[1])
                     : "r"(a)
                     : "memory");
    else if constexpr (N == 2)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                     : "=r"(r[0]), "=r"(r[1])
                     : "r"(a)
                     : "memory");
    else if constexpr (!TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a)
                     : "memory");
#endif
}

#endif /* FG_PTX_MMA_CUH */
