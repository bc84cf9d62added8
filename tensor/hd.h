/* hd.h — FG_HD, the qualifier of the small pure functions that host C and CUDA device code share
 * (tensor/philox.h, ops/shared/): under nvcc `__host__ __device__ __forceinline__`, in C
 * `static inline`. The one definition; every shared header includes this file. */
#ifndef FG_HD_H
#define FG_HD_H

#ifdef __CUDACC__
#define FG_HD __host__ __device__ __forceinline__
#else
#define FG_HD static inline
#endif

#endif /* FG_HD_H */
