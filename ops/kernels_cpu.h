/* kernels_cpu.h — the CPU's kernels, defined in ops/cpu/<family>.c (apart from their op's shell,
 * ops/<family>.c) and gathered into the CPU table by ops/kernels.c. Each entry FN(family, name,
 * ...) of the lists in ops/kernels.h is declared here as fg_cpu_<family>_<name>, with the entry's
 * signature; the contracts are the list's. Only ops/ includes this. */
#ifndef FG_KERNELS_CPU_H
#define FG_KERNELS_CPU_H

#include "ops/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_CPU_DECLARE_(family, name, where, ret, params) ret fg_cpu_##family##_##name params;
#define FG_CPU_DECLARE_VALUE_(family, type, name, cpu_value, cuda_value)
#define FG_CPU_DECLARE_FAMILY_(family, LIST) LIST(FG_CPU_DECLARE_, FG_CPU_DECLARE_VALUE_)
FG_KERNEL_FAMILIES(FG_CPU_DECLARE_FAMILY_)
#undef FG_CPU_DECLARE_
#undef FG_CPU_DECLARE_VALUE_
#undef FG_CPU_DECLARE_FAMILY_

#ifdef __cplusplus
}
#endif
#endif /* FG_KERNELS_CPU_H */
