/* kernels.c — the kernel table registry (ops/kernels.h) and the CPU's table. */
#include "ops/kernels.h"

#include <stdatomic.h>

#include "ops/kernels_cpu.h"

static const fg_kernels cpu_kernels = {
    .device = "cpu",
    .matmul = {fg_cpu_matmul_gemm, fg_cpu_matmul_colsum},
    .elementwise = {fg_cpu_elementwise_forward, fg_cpu_elementwise_backward, fg_cpu_elementwise_scalar},
    .reduce = {fg_cpu_reduce_axis_forward, fg_cpu_reduce_axis_backward, fg_cpu_reduce_all_forward,
               fg_cpu_reduce_all_backward},
    .memory = {fg_cpu_add_into},
    .embedding = {fg_cpu_embedding_forward, fg_cpu_embedding_backward},
    .layernorm = {fg_cpu_layernorm_forward, fg_cpu_layernorm_backward},
    .gelu = {fg_cpu_gelu_forward, fg_cpu_gelu_backward},
    .softmax = {fg_cpu_softmax_forward, fg_cpu_softmax_backward},
    .cross_entropy = {fg_cpu_cross_entropy_forward, fg_cpu_cross_entropy_backward},
    .dropout = {fg_cpu_dropout_forward, fg_cpu_dropout_backward},
    .optimizer = {fg_cpu_adamw, fg_cpu_sum_squares, fg_cpu_scale, fg_cpu_norm_block, fg_cpu_sum_squares_blocks},
    .attention = {fg_cpu_attention_forward, fg_cpu_attention_backward, FG_ATTN_CAP_ALL | FG_ATTN_CAP_CAUSAL_TOP_LEFT},
};

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
