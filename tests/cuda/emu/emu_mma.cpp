/* emu_mma.cpp — the warp-wide steps of the emulator's tensor-core instructions (emu_mma.h), run
 * once per instruction when the last of the warp's 32 lanes has arrived. Not instrumented.
 *
 * Fragment layouts, from the PTX ISA ("Matrix fragments for mma.m16n8k16 with floating point
 * type", .bf16; and ldmatrix), with groupID g = lane >> 2 and t = lane % 4; each .b32 register
 * holds two bf16, the lower-indexed element in bits 0–15:
 *   A (16×16, row):  a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]
 *                    a[2] = A[g][2t+8, +9]   a[3] = A[g+8][2t+8, +9]
 *   B (16×8, col):   b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
 *   C, D (16×8 f32): c[0], c[1] = C[g][2t, 2t+1]   c[2], c[3] = C[g+8][2t, 2t+1]
 *   ldmatrix .x1/.x2/.x4: matrix m's row r is at the address of lane 8m + r; lane l gets
 *                    r[m] = M_m[g][2t, 2t+1], and with .trans r[m] = M_m[2t, 2t+1][g].
 * (CUTLASS's cute::MMA_Traits<SM80_16x8x16_F32BF16BF16F32_TN> and Copy_Traits<SM75_U32x4_LDSM_N /
 * SM75_U16x8_LDSM_T> give the same maps as layout algebra; tests/cuda/emu/mma_emu.cpp checks the
 * emulator against them, element by element.)
 *
 * Arithmetic: the products of two bf16 are exact in float64, and so, nearly, is their sum with C;
 * D is that sum rounded once to float32. A tensor core adds in its own wider fixed-point format
 * and may truncate; the bf16 kernels' tests compare against float32 references at tolerances that
 * cover either.
 */
#include "tests/cuda/emu/cuda_emu.h"

static float bf16_value(uint32_t reg, int half) {
    const uint32_t bits = (reg >> (16 * half) & 0xffffu) << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void fg_emu_mma_m16n8k16_bf16_step(void *const lanes[32]) {
    double A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const fg_emu_mma_lane &L = *(const fg_emu_mma_lane *)lanes[l];
        const int g = l >> 2, t = l & 3;
        for (int i = 0; i < 8; i++) /* element i: register i / 2, half i % 2 */
            A[g + 8 * (i >> 1 & 1)][2 * t + (i & 1) + 8 * (i >> 2)] = bf16_value(L.a[i >> 1], i & 1);
        for (int i = 0; i < 4; i++) B[2 * t + (i & 1) + 8 * (i >> 1)][g] = bf16_value(L.b[i >> 1], i & 1);
        for (int i = 0; i < 4; i++) C[g + 8 * (i >> 1)][2 * t + (i & 1)] = L.c[i];
    }
    for (int l = 0; l < 32; l++) {
        fg_emu_mma_lane &L = *(fg_emu_mma_lane *)lanes[l];
        const int g = l >> 2, t = l & 3;
        for (int i = 0; i < 4; i++) {
            const int m = g + 8 * (i >> 1), n = 2 * t + (i & 1);
            double s = C[m][n];
            for (int k = 0; k < 16; k++) s += A[m][k] * B[k][n];
            L.d[i] = (float)s;
        }
    }
}

template <int N, bool TRANS> static void ldmatrix_step(void *const lanes[32]) {
    uint16_t M[4][8][8]; /* [matrix][row][column] */
    for (int l = 0; l < 8 * N; l++) {
        const fg_emu_ldm_lane &L = *(const fg_emu_ldm_lane *)lanes[l];
        if (!fg_emu_in_shared(L.addr, 16))
            fg_emu_report("ldmatrix.x%d%s: lane %d gives row address %p, which is not the block's shared memory", N,
                          TRANS ? ".trans" : "", l, L.addr);
        for (int c = 0; c < 8; c++) M[l / 8][l % 8][c] = (uint16_t)(L.row[c / 2] >> (16 * (c & 1)));
    }
    for (int l = 0; l < 32; l++) {
        fg_emu_ldm_lane &L = *(fg_emu_ldm_lane *)lanes[l];
        const int g = l >> 2, t = l & 3;
        for (int m = 0; m < N; m++) {
            const uint32_t lo = TRANS ? M[m][2 * t][g] : M[m][g][2 * t];
            const uint32_t hi = TRANS ? M[m][2 * t + 1][g] : M[m][g][2 * t + 1];
            L.r[m] = lo | hi << 16;
        }
    }
}

const fg_emu_collective_fn fg_emu_ldmatrix_steps[2][3] = {
    {ldmatrix_step<1, false>, ldmatrix_step<2, false>, ldmatrix_step<4, false>},
    {ldmatrix_step<1, true>, ldmatrix_step<2, true>, ldmatrix_step<4, true>}};
