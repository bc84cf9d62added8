/* device.h — starting a device: what a program calls before it puts tensors on one. The devices'
 * kernel tables behind it (ops/kernels.h) are for the ops and the devices' code only. */
#ifndef FG_DEVICE_H
#define FG_DEVICE_H

#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Makes device d usable: nothing for the CPU; for CUDA, starts the GPU and registers its memory
 * functions and kernel table (fg_cuda_init), or explains why it cannot ("built without CUDA", no
 * device, a driver too old for the runtime). Idempotent and thread-safe. */
fg_status fg_device_start(fg_device d);
/* 1 when this program holds device d's code — the CPU always, CUDA when the cuda/ objects are
 * linked in — whether or not the device can start (a CUDA build on a machine without a GPU: 1
 * here, and fg_device_start fails); 0 otherwise. */
int fg_device_built(fg_device d);

#ifdef __cplusplus
}
#endif
#endif /* FG_DEVICE_H */
