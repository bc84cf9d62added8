/* fuzz_bpe.c — libFuzzer target for the JSON reader (tensor/json.h) and the BPE tokenizer readers
 * (datasets/bpe.h). The first byte picks what the rest is fed to: the JSON reader, the
 * tokenizer.json reader, or the tiktoken rank-file reader (GPT-2's encoding). Any bytes must load
 * or fail with a message; a loaded tokenizer must encode the input itself and decode it back. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/bpe.h"
#include "tensor/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0] % 3;
    data++;
    size--;
    if (mode == 0) {
        fg_json_doc *d = NULL;
        if (fg_json_parse((const char *)data, size, "fuzz", &d) != FG_OK && fg_last_error()[0] == '\0') abort();
        fg_json_free(d);
        return 0;
    }
    fg_bpe *t = fg_bpe_from_memory(data, size, mode == 1 ? NULL : "gpt2", "fuzz");
    if (!t) {
        if (fg_last_error()[0] == '\0') abort();
        return 0;
    }
    int32_t *ids = NULL;
    size_t n = 0, len = 0;
    char *back = NULL;
    if (fg_bpe_encode(t, data, size, 1, &ids, &n) != FG_OK) abort();
    if (fg_bpe_decode(t, ids, n, &back, &len) != FG_OK || len != size || memcmp(back, data, size) != 0) abort();
    free(back);
    free(ids);
    fg_bpe_free(t);
    return 0;
}
