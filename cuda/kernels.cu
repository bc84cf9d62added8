/* kernels.cu — the FG_CUDA kernel table (ops/kernels.h), registered by fg_cuda_init(). */
#include "cuda/kernels_cuda.h"

static fg_kernels make_table() {
    fg_kernels k = {};
    k.device = "cuda";
    k.matmul = {fg_cu_matmul_gemm, fg_cu_matmul_colsum};
    k.elementwise = {fg_cu_elementwise_forward, fg_cu_elementwise_backward, fg_cu_elementwise_scalar};
    k.reduce = {fg_cu_reduce_axis_forward, fg_cu_reduce_axis_backward, fg_cu_reduce_all_forward,
                fg_cu_reduce_all_backward};
    k.memory = {fg_cu_add_into};
    k.embedding = {fg_cu_embedding_forward, fg_cu_embedding_backward};
    k.layernorm = {fg_cu_layernorm_forward, fg_cu_layernorm_backward};
    k.gelu = {fg_cu_gelu_forward, fg_cu_gelu_backward};
    k.softmax = {fg_cu_softmax_forward, fg_cu_softmax_backward};
    k.cross_entropy = {fg_cu_cross_entropy_forward, fg_cu_cross_entropy_backward};
    k.dropout = {fg_cu_dropout_forward, fg_cu_dropout_backward};
    k.optimizer = {fg_cu_adamw, fg_cu_sum_squares, fg_cu_scale, NULL, NULL};
    /* the built-in variants cuda/attention.cu implements; fg_attention refuses user callbacks here */
    k.attention = {fg_cu_attention_forward, fg_cu_attention_backward, FG_ATTN_CAP_ALL};
    return k;
}

extern "C" const fg_kernels fg_cuda_kernels = make_table();
