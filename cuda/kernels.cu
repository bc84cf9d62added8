/* kernels.cu — the FG_CUDA kernel table (ops/kernels.h), registered by fg_cuda_init(). */
#include "cuda/kernels_cuda.h"

static fg_kernels make_table() {
    fg_kernels k = {};
    k.device = "cuda";
    k.layernorm = {fg_cu_layernorm_forward, fg_cu_layernorm_backward};
    k.gelu = {fg_cu_gelu_forward, fg_cu_gelu_backward};
    k.softmax = {fg_cu_softmax_forward, fg_cu_softmax_backward};
    k.cross_entropy = {fg_cu_cross_entropy_forward, fg_cu_cross_entropy_backward};
    k.dropout = {fg_cu_dropout_forward, fg_cu_dropout_backward};
    k.optimizer = {fg_cu_adamw, fg_cu_sum_squares, fg_cu_scale};
    return k;
}

extern "C" const fg_kernels fg_cuda_kernels = make_table();
