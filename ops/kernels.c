/* kernels.c — the kernel table registry (ops/kernels.h) and the CPU's table. */
#include "ops/kernels.h"

#include <stdatomic.h>
#include <string.h>

#include "ops/kernels_cpu.h"

/* Every entry of ops/kernels.h's lists: .family = {.name = fg_cpu_<family>_<name>, ...}. */
#define CPU_ENTRY_(family, name, where, ret, params) .name = fg_cpu_##family##_##name,
#define CPU_VALUE_(family, type, name, cpu_value, cuda_value) .name = cpu_value,
#define CPU_FAMILY_(family, LIST) .family = {LIST(CPU_ENTRY_, CPU_VALUE_)},
static const fg_kernels cpu_kernels = {.device = "cpu", FG_KERNEL_FAMILIES(CPU_FAMILY_)};

static _Atomic(const fg_kernels *) tables[FG_DEVICE_COUNT] = {&cpu_kernels};

void fg_register_kernels(fg_device d, const fg_kernels *k) {
    if (d > FG_CPU && d < FG_DEVICE_COUNT) atomic_store(&tables[d], k);
}

const fg_kernels *fg_kernels_for(fg_device d, const char *op) {
    const fg_kernels *k = (d >= 0 && d < FG_DEVICE_COUNT) ? atomic_load(&tables[d]) : NULL;
    if (!k)
        fg_error(FG_ERR_DEVICE, "op %s: %s tensors need the %s device started (in a CUDA build: make cuda)", op,
                 fg_device_name(d), fg_device_name(d));
    return k;
}

/* The CUDA objects (cuda/runtime.cu) define fg_cuda_init when they are linked in; a CPU-only
 * program has no such symbol, and the weak reference reads as NULL. */
extern fg_status fg_cuda_init(void) __attribute__((weak));

fg_status fg_device_start(fg_device d) {
    if (d == FG_CPU) return FG_OK;
    if (d == FG_CUDA) {
        if (!fg_cuda_init)
            return fg_error(FG_ERR_DEVICE,
                            "flashgrad was built without CUDA (build with `make cuda` and use build-cuda/flashgrad)");
        return fg_cuda_init();
    }
    return fg_error(FG_ERR_DEVICE, "unknown device %d", (int)d);
}

int fg_device_built(fg_device d) { return d == FG_CPU || (d == FG_CUDA && fg_cuda_init != NULL); }

/* ---- compute precision (ops/device.h) ---- */

static const char *const compute_names[FG_COMPUTE_COUNT] = {"float32", "bfloat16"};
static _Atomic int compute[FG_DEVICE_COUNT];

const char *fg_compute_name(fg_compute c) { return c >= 0 && c < FG_COMPUTE_COUNT ? compute_names[c] : "?"; }

int fg_compute_parse(const char *s) {
    for (int c = 0; s && c < FG_COMPUTE_COUNT; c++)
        if (!strcmp(s, compute_names[c])) return c;
    return -1;
}

fg_status fg_device_set_compute(fg_device d, fg_compute c) {
    if (d < 0 || d >= FG_DEVICE_COUNT) return fg_error(FG_ERR_DEVICE, "unknown device %d", (int)d);
    if (c < 0 || c >= FG_COMPUTE_COUNT) return fg_error(FG_ERR_ARG, "unknown compute precision %d", (int)c);
    if (c == FG_COMPUTE_BF16 && d == FG_CPU)
        return fg_error(FG_ERR_DEVICE, "bfloat16 mixed precision: the CPU has no bf16 kernels yet (float32 only; "
                                       "bfloat16 runs on cuda)");
    if (c == FG_COMPUTE_BF16 && !fg_device_built(d))
        return fg_error(FG_ERR_DEVICE, "bfloat16 mixed precision: flashgrad was built without %s",
                        fg_device_name(d));
    atomic_store(&compute[d], (int)c);
    return FG_OK;
}

fg_compute fg_device_compute(fg_device d) {
    return d >= 0 && d < FG_DEVICE_COUNT ? (fg_compute)atomic_load(&compute[d]) : FG_COMPUTE_FULL;
}
