/* text.h — a text file as a language-modelling dataset: tokenize, split, sample batches.
 *
 * The whole file is read into memory and tokenized once (one token per byte, see tokenizer.h).
 * The first (1 - val_fraction) of the tokens are the training split, the rest the validation
 * split (a contiguous tail, as nanoGPT does, so no window straddles both).
 *
 * Batches: row r of batch `step` of split s is the window tokens[o .. o+T] of that split, where the
 * offset o is uniform in [0, len(s) - T - 1] and drawn from Philox:
 *     block = step * B + r,  stream = FG_TEXT_STREAM(s),  fg_philox_block(seed, stream, block)
 * taking words 0-1 as one 64-bit number reduced to the range without bias by rejection (a
 * rejected draw, probability < range / 2^64, retries with words 2-3, then further blocks
 * block + k * 2^48; see text.c). x[r, t] = tokens[o + t] and
 * y[r, t] = tokens[o + t + 1]. A batch is a pure function of (data, split, B, T, seed, step): it does
 * not depend on threads, on earlier calls, or on which other batches were drawn.
 *
 * What is accepted ("is this text?"):
 *   - empty files and files that cannot be read are errors (FG_ERR_IO / FG_ERR_FORMAT);
 *   - char-level: a file containing a NUL byte, or that is not valid UTF-8, or whose control
 *     bytes (0x01-0x1F except \t \n \v \f \r, and 0x7F) are more than 1% of the file, is rejected as
 *     binary (FG_ERR_FORMAT, the message says which rule and the offset of the first bad byte);
 *   - byte-level: any nonempty file;
 *   - each used split must hold at least block_size + 1 tokens (one window plus its shifted target);
 *     otherwise FG_ERR_FORMAT saying how many tokens the file and each split have.
 *
 * Streams for Philox: FG_TEXT_STREAM(split) keeps text batches apart from the addition task and
 * from dropout/init streams (which use small stream numbers).
 */
#ifndef FG_TEXT_H
#define FG_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/error.h"
#include "datasets/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FG_SPLIT_TRAIN = 0, FG_SPLIT_VAL = 1, FG_SPLIT_COUNT } fg_split;

/* "train" / "val". */
const char *fg_split_name(fg_split s);

/* The Philox stream of text batches of split s ("TEXT" in the high word). */
#define FG_TEXT_STREAM(split) ((((uint64_t)0x54455854u) << 32) | (uint64_t)(split))

/* The window offset of batch row `row` (= step * B + r): uniform in [0, range), range >= 1, drawn
 * from Philox (seed, stream, row) as described above. Shared by every dataset of token windows. */
uint64_t fg_text_window_offset(uint64_t seed, uint64_t stream, uint64_t row, uint64_t range);

typedef struct {
    fg_tok_kind kind;              /* tokenizer to build when `tokenizer` is NULL; default FG_TOK_CHAR */
    const fg_tokenizer *tokenizer; /* use this one (e.g. from a checkpoint) instead of building a
                                    * vocabulary; borrowed, the dataset keeps its own copy. Its kind
                                    * decides the accept rule. A byte outside its vocabulary is an
                                    * FG_ERR_FORMAT error naming the byte and offset. */
    double val_fraction;           /* in [0, 0.5]; default 0.1. 0 = no validation split. */
    int block_size;                /* T the model will use; both splits (val only if val_fraction > 0)
                                * must hold >= block_size + 1 tokens. Must be >= 1. */
} fg_text_options;

/* Defaults: FG_TOK_CHAR, no given tokenizer, val_fraction 0.1, block_size = the argument. */
fg_text_options fg_text_default_options(int block_size);

/* Opaque. Immutable after loading: batches may be drawn from several threads at once. */
typedef struct fg_text_dataset fg_text_dataset;

/* The largest text taken (1 GiB; tokens take 4 bytes each in memory). */
#define FG_TEXT_MAX_BYTES ((size_t)1 << 30)

/* Loads and tokenizes the file at path: a regular file or a FIFO/pipe of at most
 * FG_TEXT_MAX_BYTES, read with fg_read_file (so a FIFO without a writer is refused at once and
 * devices such as /dev/zero are refused). NULL + fg_error on failure; the message names the path.
 * Caller frees with fg_text_free. */
fg_text_dataset *fg_text_load(const char *path, const fg_text_options *opt);

/* Same from a memory buffer data[0..n) (copied; data is not kept). `name` labels messages (NULL =
 * "<memory>"). Total for any bytes: this is the fuzzing entry point. */
fg_text_dataset *fg_text_from_memory(const void *data, size_t n, const char *name, const fg_text_options *opt);

/* NULL is a no-op. */
void fg_text_free(fg_text_dataset *ds);

/* The dataset's tokenizer (borrowed; lives as long as ds). */
const fg_tokenizer *fg_text_tokenizer(const fg_text_dataset *ds);
int fg_text_vocab_size(const fg_text_dataset *ds);
/* Tokens in the whole file / in split s. */
size_t fg_text_num_tokens(const fg_text_dataset *ds);
size_t fg_text_split_tokens(const fg_text_dataset *ds, fg_split s);
/* The tokens of split s (borrowed, fg_text_split_tokens(ds, s) of them; NULL for an empty split). */
const int32_t *fg_text_split_data(const fg_text_dataset *ds, fg_split s);

/* Fills x and y, both (B, T) int32 row-major, caller-owned, with batch `step` of split s (rule at
 * the top). Needs B >= 1, 1 <= T and len(s) >= T + 1 (FG_ERR_ARG otherwise, e.g. asking for the
 * validation split when val_fraction was 0). */
fg_status fg_text_batch(const fg_text_dataset *ds, fg_split s, int B, int T, uint64_t seed, uint64_t step, int32_t *x,
                        int32_t *y);

#ifdef __cplusplus
}
#endif
#endif /* FG_TEXT_H */
