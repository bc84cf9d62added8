/* fuzz_safetensors.c — libFuzzer target for the safetensors reader (tensor/safetensors.c).
 * Property: any bytes either load into a table whose every array lies inside the buffer with a
 * size that matches its shape and dtype, or fail with a message; never a crash or a leak. */
#include <stdint.h>
#include <stdlib.h>

#include "tensor/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fg_st_file *f = fg_st_parse(data, size, "fuzz");
    if (!f) {
        if (fg_last_error()[0] == '\0') abort();
        return 0;
    }
    for (int i = 0; i < fg_st_count(f); i++) {
        const fg_st_array *a = fg_st_at(f, i);
        size_t n = fg_st_dtype_size(a->dtype);
        for (int d = 0; d < a->ndim; d++) n *= (size_t)a->shape[d];
        if (n != a->nbytes) abort();
        /* touch every byte so ASan sees any out-of-bounds view */
        volatile uint8_t sink = 0;
        for (size_t k = 0; k < a->nbytes; k++) sink ^= ((const uint8_t *)a->data)[k];
        (void)sink;
        if (fg_st_find(f, a->name) != a) abort();
    }
    for (int i = 0; i < fg_st_metadata_count(f); i++) {
        const char *k, *v;
        fg_st_metadata_at(f, i, &k, &v);
        if (!k || !v) abort();
    }
    fg_st_close(f);
    return 0;
}
