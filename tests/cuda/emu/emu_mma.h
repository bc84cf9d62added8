/* emu_mma.h — the CUDA emulator's tensor-core instructions: mma.sync.aligned.m16n8k16.row.col
 * f32.bf16.bf16.f32 and ldmatrix.sync.aligned.m8n8{.x1,.x2,.x4}{,.trans}.shared.b16, each a
 * warp-collective step (fg_emu_warp_collective, cuda_emu.h) over the fragment layouts of the PTX
 * ISA (the warp-level matrix fragments of mma.m16n8k16 for .bf16, and ldmatrix). cuda/ptx_mma.cuh
 * calls these under FG_CUDA_EMU and inline PTX on the device; the warp-wide steps are in
 * emu_mma.cpp (not instrumented). Included by cuda_emu.h.
 *
 * The lane side below runs in the emulated (instrumented) code, so what an instruction reads of
 * shared memory is seen by the race, initialization, bounds and alignment checks: ldmatrix's row
 * reads are each one 16-byte load by the lane that gives the row's address.
 */
#ifndef FG_EMU_MMA_H
#define FG_EMU_MMA_H

/* one lane's operands and results */
struct fg_emu_mma_lane {
    uint32_t a[4], b[2]; /* bf16 pairs, the lower-indexed element in the low half */
    float c[4], d[4];
};
struct fg_emu_ldm_lane {
    const void *addr; /* the row this lane gives (lanes 0 .. 8·N − 1) */
    uint32_t row[4];  /* its 16 bytes, read by this lane */
    uint32_t r[4];    /* the lane's destination registers */
};

/* the warp-wide steps (emu_mma.cpp) */
void fg_emu_mma_m16n8k16_bf16_step(void *const lanes[32]);
extern const fg_emu_collective_fn fg_emu_ldmatrix_steps[2][3]; /* [trans][x1, x2, x4] */

#define FG_EMU_MMA_SHAPE "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"

/* d = A·B + c for the warp's 16×16 A (row-major fragments), 16×8 B (column-major) and 16×8 c */
static inline void fg_emu_mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    fg_emu_mma_lane L;
    memcpy(L.a, a, sizeof L.a);
    memcpy(L.b, b, sizeof L.b);
    memcpy(L.c, c, sizeof L.c);
    fg_emu_warp_collective(FG_EMU_MMA_SHAPE, fg_emu_mma_m16n8k16_bf16_step, &L);
    memcpy(d, L.d, sizeof L.d);
}

/* N 8×8 matrices of 16-bit elements, row r of matrix m at the address lane 8m + r gives; lane l
 * receives r[m] (see emu_mma.cpp for the layout) */
template <int N, bool TRANS> static inline void fg_emu_ldmatrix(uint32_t r[N], const void *row) {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix takes 1, 2 or 4 matrices");
    static const char *const shapes[2][3] = {
        {"ldmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16"},
        {"ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
         "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"}};
    const int which = N == 1 ? 0 : N == 2 ? 1 : 2;
    fg_emu_ldm_lane L;
    memset(&L, 0, sizeof L);
    L.addr = row;
    if ((threadIdx.x & 31) < 8u * N) { /* this lane gives a row: one 16-byte shared-memory read */
        if ((uintptr_t)row & 15u) {
            fg_emu_report("%s: lane %u gives row address %p, which is not 16-byte aligned", shapes[TRANS][which],
                          threadIdx.x & 31, row);
        } else {
            const uint4 v = *(const uint4 *)row;
            memcpy(L.row, &v, sizeof L.row);
        }
    }
    fg_emu_warp_collective(shapes[TRANS][which], fg_emu_ldmatrix_steps[TRANS][which], &L);
    memcpy(r, L.r, N * sizeof(uint32_t));
}

#endif /* FG_EMU_MMA_H */
