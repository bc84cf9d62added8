/* device.h — starting a device: what a program calls before it puts tensors on one, and the
 * precision its products compute in (bfloat16 mixed precision on cuda). The devices' kernel
 * tables behind it (ops/kernels.h) are for the ops and the devices' code only. */
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

/* The precision of a device's matrix products and attention, for float32 tensors (autocast):
 *   FG_COMPUTE_FULL  in the tensors' own dtype (the default; float32 products in float32);
 *   FG_COMPUTE_BF16  bfloat16 mixed precision: every float32 GEMM and attention call rounds its
 *                    operands to bfloat16 (nearest even) in device scratch and multiplies them
 *                    with float32 accumulation into float32 results; attention runs the bf16
 *                    flash kernels (softcap, ALiBi and the naive implementation are refused, not
 *                    run in float32). Tensors, weights, gradients, the optimizer and every other
 *                    op (layernorm, softmax, cross-entropy, GELU) stay float32. CUDA only.
 * The setting is one per device and process, read by the device's kernels at each call: a forward
 * and its backward must run under the same one (train/trainer.c sets it around each step). */
typedef enum { FG_COMPUTE_FULL = 0, FG_COMPUTE_BF16 = 1, FG_COMPUTE_COUNT } fg_compute;
/* "float32" (FULL: what it means for the float32 models that train) or "bfloat16"; parse returns
 * -1 on any other name. */
const char *fg_compute_name(fg_compute c);
int fg_compute_parse(const char *s);
/* Sets device d's compute precision. FG_OK; FG_ERR_DEVICE for FG_COMPUTE_BF16 on the CPU (it has
 * no bf16 kernels) or on a device this program was built without; FG_ERR_ARG for an unknown c. */
fg_status fg_device_set_compute(fg_device d, fg_compute c);
/* Device d's compute precision now (FG_COMPUTE_FULL until set). */
fg_compute fg_device_compute(fg_device d);

#ifdef __cplusplus
}
#endif
#endif /* FG_DEVICE_H */
