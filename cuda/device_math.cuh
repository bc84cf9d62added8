/* device_math.cuh — type-generic math and warp reductions for kernels written once for float and
 * double (internal to cuda/; C++). It includes no CUDA header, so the kernels that use only this
 * (cuda/attention_kernels.cuh) also compile for the CPU emulator of tests/cuda/emu/, which defines
 * __host__, __device__, __shfl_xor_sync and friends itself.
 */
#ifndef FG_DEVICE_MATH_CUH
#define FG_DEVICE_MATH_CUH

#include <math.h>

/* ---- type-generic math (device and host) ---- */
__host__ __device__ __forceinline__ float fg_exp(float x) { return expf(x); }
__host__ __device__ __forceinline__ double fg_exp(double x) { return exp(x); }
__host__ __device__ __forceinline__ float fg_log(float x) { return logf(x); }
__host__ __device__ __forceinline__ double fg_log(double x) { return log(x); }
__host__ __device__ __forceinline__ float fg_tanh(float x) { return tanhf(x); }
__host__ __device__ __forceinline__ double fg_tanh(double x) { return tanh(x); }
__host__ __device__ __forceinline__ float fg_sqrt(float x) { return sqrtf(x); }
__host__ __device__ __forceinline__ double fg_sqrt(double x) { return sqrt(x); }
template <typename T> __host__ __device__ __forceinline__ T fg_neg_inf() { return (T)-INFINITY; }

/* ---- warp reductions (butterfly: every lane ends with the same value, in a fixed order) ---- */
template <typename T> __device__ __forceinline__ T fg_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ __forceinline__ T fg_warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) {
        T w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

#endif /* FG_DEVICE_MATH_CUH */
