/* device_cases_stub.c — the emulated GPU test runner has no "device" suite: tests/cuda/test_device.cu
 * checks real device code (the GPU's Philox bits, cuRAND's device API, CUDA's own error strings),
 * which only a GPU can answer. */
#include "tests/cuda/cuda_test.h"

const fgt_case fgt_device_cases[] = {{NULL, NULL}};
