/* kernels.cu — the FG_CUDA kernel table (ops/kernels.h), registered by fg_cuda_init(). */
#include "cuda/kernels_cuda.h"

static fg_kernels make_table() {
    fg_kernels k = {};
    k.device = "cuda";
    k.layernorm = {fg_cu_layernorm_forward, fg_cu_layernorm_backward};
    return k;
}

extern "C" const fg_kernels fg_cuda_kernels = make_table();
