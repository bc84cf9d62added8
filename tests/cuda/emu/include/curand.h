/* curand.h (emulator) — the cuRAND host calls flashgrad makes, with a simple generator (the
 * numbers are not cuRAND's; nothing in the emulated suite depends on their exact values). The
 * output must be device memory, as for cuRAND's host API. */
#ifndef FG_EMU_CURAND_H
#define FG_EMU_CURAND_H

#include <math.h>

#include "cuda_runtime.h"
#include "tensor/philox.h"

typedef enum { CURAND_STATUS_SUCCESS = 0, CURAND_STATUS_NOT_INITIALIZED = 101 } curandStatus_t;
typedef enum { CURAND_RNG_PSEUDO_PHILOX4_32_10 = 161 } curandRngType_t;
struct fg_emu_rand_s {
    unsigned long long seed, offset;
};
typedef fg_emu_rand_s *curandGenerator_t;

inline curandStatus_t curandCreateGenerator(curandGenerator_t *g, curandRngType_t) {
    *g = new fg_emu_rand_s{0, 0};
    return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandSetStream(curandGenerator_t, cudaStream_t) { return CURAND_STATUS_SUCCESS; }
inline curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t g, unsigned long long s) {
    g->seed = s;
    g->offset = 0;
    return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerateUniform(curandGenerator_t g, float *x, size_t n) {
    if (n && !fg_emu_dev_check(x, n * sizeof *x, "curandGenerateUniform"))
        fg_emu_fatal("curandGenerateUniform: bad output");
    fg_emu_device_scope scope;
    for (size_t i = 0; i < n; i++) x[i] = fg_u32_to_uniform(fg_philox_u32(g->seed, 0, g->offset++));
    return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerateNormalDouble(curandGenerator_t g, double *x, size_t n, double mean, double sd) {
    if (n && !fg_emu_dev_check(x, n * sizeof *x, "curandGenerateNormalDouble"))
        fg_emu_fatal("curandGenerateNormalDouble: bad output");
    fg_emu_device_scope scope;
    for (size_t i = 0; i < n; i++) {
        double a, b;
        fg_box_muller(fg_philox_u32(g->seed, 0, g->offset), fg_philox_u32(g->seed, 0, g->offset + 1), &a, &b);
        g->offset += 2;
        x[i] = mean + sd * a;
    }
    return CURAND_STATUS_SUCCESS;
}
inline curandStatus_t curandGenerateNormal(curandGenerator_t g, float *x, size_t n, float mean, float sd) {
    if (n && !fg_emu_dev_check(x, n * sizeof *x, "curandGenerateNormal"))
        fg_emu_fatal("curandGenerateNormal: bad output");
    fg_emu_device_scope scope;
    for (size_t i = 0; i < n; i++) {
        double a, b;
        fg_box_muller(fg_philox_u32(g->seed, 0, g->offset), fg_philox_u32(g->seed, 0, g->offset + 1), &a, &b);
        g->offset += 2;
        x[i] = (float)(mean + sd * a);
    }
    return CURAND_STATUS_SUCCESS;
}

#endif /* FG_EMU_CURAND_H */
