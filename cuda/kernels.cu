/* kernels.cu — the FG_CUDA kernel table (ops/kernels.h), registered by fg_cuda_init(). Every entry
 * of ops/kernels.h's lists: k.<family>.<name> = fg_cu_<family>_<name> (NULL for the CPU-only ones),
 * and each VAL entry's CUDA value (attention's caps: the built-in variants cuda/attention.cu
 * implements; fg_attention refuses user callbacks here). */
#include "cuda/kernels_cuda.h"

#define CU_KERNEL_all(f) f
#define CU_KERNEL_cpu(f) NULL
#define CU_ENTRY_(family, name, where, ret, params) k.family.name = CU_KERNEL_##where(fg_cu_##family##_##name);
#define CU_VALUE_(family, type, name, cpu_value, cuda_value) k.family.name = cuda_value;
#define CU_FAMILY_(family, LIST) LIST(CU_ENTRY_, CU_VALUE_)

static fg_kernels make_table() {
    fg_kernels k = {};
    k.device = "cuda";
    FG_KERNEL_FAMILIES(CU_FAMILY_)
    return k;
}

extern "C" const fg_kernels fg_cuda_kernels = make_table();
