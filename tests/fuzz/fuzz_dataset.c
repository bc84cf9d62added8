/* fuzz_dataset.c — libFuzzer target for the dataset and tokenizer loaders (datasets/).
 * The first byte picks what the rest is fed to: a serialized tokenizer (what checkpoints store),
 * a char-level text dataset, or a byte-level one. Any bytes must either load or fail with a
 * message; a loaded dataset must hand out batches whose ids are inside its vocabulary. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/text.h"
#include "datasets/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0] % 3;
    data++;
    size--;
    if (mode == 0) {
        fg_tokenizer *tok = fg_tokenizer_parse((const char *)data, size);
        if (!tok) {
            if (fg_last_error()[0] == '\0') abort();
            return 0;
        }
        /* a parsed tokenizer must serialize and parse back to the same vocabulary */
        char *s = fg_tokenizer_serialize(tok);
        if (!s) abort();
        fg_tokenizer *back = fg_tokenizer_parse(s, strlen(s));
        if (!back || fg_tokenizer_vocab_size(back) != fg_tokenizer_vocab_size(tok)) abort();
        fg_tokenizer_free(back);
        free(s);
        fg_tokenizer_free(tok);
        return 0;
    }
    fg_text_options opt = fg_text_default_options(4);
    opt.kind = mode == 1 ? FG_TOK_CHAR : FG_TOK_BYTE;
    fg_text_dataset *ds = fg_text_from_memory(data, size, "fuzz", &opt);
    if (!ds) {
        if (fg_last_error()[0] == '\0') abort();
        return 0;
    }
    int32_t x[2 * 4], y[2 * 4];
    if (fg_text_batch(ds, FG_SPLIT_TRAIN, 2, 4, 1, 0, x, y) == FG_OK) {
        int v = fg_text_vocab_size(ds);
        for (int k = 0; k < 8; k++)
            if (x[k] < 0 || x[k] >= v || y[k] < 0 || y[k] >= v) abort();
    }
    fg_text_free(ds);
    return 0;
}
