/* fuzz_meta_pkl.c — libFuzzer target for the meta.pkl reader (datasets/meta_pkl.c: fg_meta_pkl_parse).
 * Property: any bytes either give a character-level tokenizer of at most 128 ASCII characters, or
 * fail with a message; never a crash, a read out of bounds, a leak, or an opcode outside the subset. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/meta_pkl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fg_tokenizer *t = fg_meta_pkl_parse(data, size, "fuzz");
    if (!t) {
        if (fg_last_error()[0] == '\0') abort(); /* a failure must say why */
        return 0;
    }
    const int V = fg_tokenizer_vocab_size(t);
    if (fg_tokenizer_kind(t) != FG_TOK_CHAR || V < 1 || V > 128) abort();
    for (int i = 0; i < V; i++)
        if (fg_tokenizer_byte_of(t, i) < 0 || fg_tokenizer_byte_of(t, i) >= 128) abort();
    fg_tokenizer_free(t);
    return 0;
}
