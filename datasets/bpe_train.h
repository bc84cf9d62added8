/* bpe_train.h — training a byte-level BPE tokenizer on text files, as nanochat trains its own.
 *
 * The text is pre-tokenized with a tiktoken encoding's regex (special tokens cut out first); the
 * distinct pieces are counted; then, starting from the 256 byte tokens, the most frequent adjacent
 * pair of tokens over all pieces (weighted by their counts) is merged into a new token, again and
 * again, until the vocabulary has its size or no pair occurs min_frequency times. Among pairs of
 * equal frequency the one with the smaller (left id, right id) is merged first, so the result
 * depends only on the files and the options.
 *
 * Token ids: 0..255 are the bytes, merges follow in the order they were made, the special tokens
 * come last. The result is a Hugging Face tokenizer.json (a BPE model, the regex as a Split
 * pre-tokenizer, or ByteLevel's own for GPT-2's, and a ByteLevel decoder) that `tokenizers` loads
 * and encodes as flashgrad does (datasets/bpe.h).
 */
#ifndef FG_BPE_TRAIN_H
#define FG_BPE_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int32_t vocab_size;            /* all tokens: 256 bytes + merges + special tokens */
    const char *pattern;           /* "gpt2" (also "r50k_base"), "cl100k_base" or "o200k_base" */
    const char *const *specials;   /* special tokens' texts (none: NULL, 0) */
    int n_specials;
    int64_t min_frequency;         /* a pair seen fewer times than this is never merged (>= 1) */
    FILE *progress;                /* progress lines and the summary go here; NULL: none */
} fg_bpe_train_opts;

/* Trains on files[0..nfiles) (regular files, read whole) and writes the tokenizer.json text into
 * *json (caller frees) of *len bytes. FG_ERR_ARG for bad options, FG_ERR_IO / FG_ERR_OOM. */
fg_status fg_bpe_train(const char *const *files, int nfiles, const fg_bpe_train_opts *o, char **json, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* FG_BPE_TRAIN_H */
