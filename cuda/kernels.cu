/* kernels.cu — the FG_CUDA kernel table (ops/kernels.h), registered by fg_cuda_init(). */
#include "cuda/kernels_cuda.h"

static fg_kernels make_table() {
    fg_kernels k = {};
    k.device = "cuda";
    k.layernorm = {fg_cu_layernorm_forward, fg_cu_layernorm_backward};
    /* the built-in variants cuda/attention.cu implements; fg_attention refuses user callbacks here */
    k.attention = {fg_cuda_attention_forward, fg_cuda_attention_backward, FG_ATTN_CAP_ALL};
    return k;
}

extern "C" const fg_kernels fg_cuda_kernels = make_table();
