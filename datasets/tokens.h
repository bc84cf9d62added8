/* tokens.h — pre-tokenized datasets, in the formats people already have, and llm.c's tokenizer file.
 *
 * Token files (memory-mapped, never copied: a file of many GiB trains in constant memory):
 *   - nanoGPT (data/<name>/prepare.py): raw little-endian uint16 token ids, nothing else, as
 *     train.bin and val.bin in one folder;
 *   - llm.c (the scripts in its dev/data folder): a header of 256 little-endian int32 — [0] magic 20240520, [1] version 1
 *     (uint16 tokens), [2] the token count — then that many uint16 ids.
 * A file whose first int32 is the llm.c magic is read as llm.c's; any other as nanoGPT's, except
 * llm.c's other files (model 20240326, debug state 20240327, tokenizer 20240328) and a file with an
 * llm.c header under another magic (its [2] is the token count its size implies), which are refused
 * by name. Opening
 * validates everything before it is used: an llm.c header with another version or a count that
 * disagrees with the file's size (truncated or padded), a nanoGPT file of an odd byte count, an
 * empty file, and any token id >= the vocabulary (one pass over the file) are errors that name the
 * file and, for a bad id, its offset.
 *
 * A dataset is a train split and a validation split (fg_token_data_open says how the files are
 * found), each a file or a sequence of shards: llm.c's datasets come as many files
 * (fineweb_train_000001.bin, fineweb_train_000002.bin, ...), taken in llm.c's order (its glob's
 * sorted list: byte order, strcmp) and read as one logical concatenation. Every shard stays mapped
 * on its own, so memory does not grow with the number or the size of the shards; every shard is
 * validated as a single file is, the headers and sizes of all of them before the pass over the ids.
 * Batches are drawn as for text files (datasets/text.h): row r of batch `step` is the window at an
 * offset uniform in [0, len - T - 1] of its split, a pure function of (seed, split, B, T, step)
 * through Philox; x = tokens[o .. o+T), y = tokens[o+1 .. o+T]. A window may begin in one shard and
 * end in the next.
 *
 * llm.c's tokenizer file (gpt2_tokenizer.bin): a header of 256 little-endian uint32 — [0] magic
 * 20240328, [1] version 1 or 2, [2] vocabulary size, [3] (version 2) the end-of-text id — then, per
 * token, one length byte and that many bytes. It decodes ids to bytes for `flashgrad sample`.
 */
#ifndef FG_TOKENS_H
#define FG_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "datasets/text.h"
#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_LLMC_DATA_MAGIC 20240520
#define FG_LLMC_TOKENIZER_MAGIC 20240328
#define FG_TOKEN_MAX_VOCAB 65536 /* uint16 ids */
/* The most train shards one dataset may hold; its val shards are counted apart, to the same limit. */
#define FG_TOKEN_MAX_SHARDS 4096

typedef enum { FG_TOKFILE_NANOGPT = 0, FG_TOKFILE_LLMC = 1 } fg_token_format;

/* One token file, mapped read-only. */
typedef struct fg_token_file fg_token_file;

/* Opens and validates `path` (see the top) for a vocabulary of vocab_size ids (1 ..
 * FG_TOKEN_MAX_VOCAB). NULL + fg_last_error() (FG_ERR_IO: cannot open or map; FG_ERR_FORMAT: the
 * contents). Caller closes with fg_token_file_close. */
fg_token_file *fg_token_file_open(const char *path, int vocab_size);
void fg_token_file_close(fg_token_file *f); /* NULL is fine */
fg_token_format fg_token_file_format(const fg_token_file *f);
size_t fg_token_file_count(const fg_token_file *f);
/* XXH64 of the whole file's bytes, the file's identity (computed at open). */
uint64_t fg_token_file_hash(const fg_token_file *f);
const char *fg_token_file_path(const fg_token_file *f);

/* Train and validation token files. `path` is either
 *   - a folder holding train.bin and val.bin (nanoGPT), or else its *train*.bin and *val*.bin files
 *     (llm.c's names, e.g. tinyshakespeare_train.bin / tinyshakespeare_val.bin, or the shards
 *     fineweb_train_000001.bin, ... / fineweb_val_000000.bin), where "train" and "val" must be words
 *     of their own in the name (after a start or a non-alphanumeric, before a non-letter:
 *     "eval_train.bin" is a train file only, "interval.bin" neither); one of each is a pair of files,
 *     several of either a shard set; or
 *   - a file: the training split; its validation file is the same name with "train" replaced by
 *     "val" when that exists; otherwise the file's last tenth is the validation split; or
 *   - a glob(3) pattern (a path that does not exist and holds *, ? or [): a shard set of its
 *     matches for training, and for validation the matches of the pattern with the last word "train"
 *     of its file name made "val" (fineweb_train_*.bin -> fineweb_val_*.bin) when it has one and
 *     they exist, else the last tenth of the training sequence.
 * Each split must hold at least block_size + 1 tokens. NULL + fg_last_error(). */
typedef struct fg_token_data fg_token_data;
fg_token_data *fg_token_data_open(const char *path, int vocab_size, int block_size);
/* The same with the files named: `train`, and `val` (NULL: the train file's last tenth is the
 * validation split). `name` labels messages (NULL: the train file). */
fg_token_data *fg_token_data_open_files(const char *name, const char *train, const char *val, int vocab_size,
                                        int block_size);
/* A shard set named: the train shards train[0 .. ntrain) in that order (ntrain >= 1), and the val
 * shards val[0 .. nval) (nval 0: the train sequence's last tenth is the validation split). `name`
 * labels messages. */
fg_token_data *fg_token_data_open_shards(const char *name, const char *const *train, int ntrain, const char *const *val,
                                         int nval, int vocab_size, int block_size);
void fg_token_data_free(fg_token_data *d); /* NULL is fine */
int fg_token_data_vocab_size(const fg_token_data *d);
/* Tokens in split s. */
size_t fg_token_data_split_tokens(const fg_token_data *d, fg_split s);
/* 1 when the data is a shard set (a pattern, a folder of several files of a split, or
 * fg_token_data_open_shards), 0 for a file or a pair of files. */
int fg_token_data_sharded(const fg_token_data *d);
/* The files split s has of its own, in order (val: 0 when it is the train sequence's tail), and file
 * i of them (NULL outside 0 .. count-1). */
int fg_token_data_file_count(const fg_token_data *d, fg_split s);
const fg_token_file *fg_token_data_shard(const fg_token_data *d, fg_split s, int i);
/* The first of them: train, and val (NULL when the validation split is the train file's tail). */
const fg_token_file *fg_token_data_file(const fg_token_data *d, fg_split s);
/* Batch `step` of split s: x, y (B, T) int32 (see the top). */
fg_status fg_token_data_batch(const fg_token_data *d, fg_split s, int B, int T, uint64_t seed, uint64_t step,
                              int32_t *x, int32_t *y);

/* ---- llm.c's tokenizer file ---- */
typedef struct fg_token_vocab fg_token_vocab;
/* Reads and validates a gpt2_tokenizer.bin (see the top). NULL + fg_last_error(). */
fg_token_vocab *fg_token_vocab_load(const char *path);
void fg_token_vocab_free(fg_token_vocab *v); /* NULL is fine */
int fg_token_vocab_size(const fg_token_vocab *v);
/* The end-of-text id a version 2 file names (in 0 .. size-1), or -1 (version 1). */
int32_t fg_token_vocab_eot(const fg_token_vocab *v);
/* The bytes of token id (its length in *n), or NULL for an id outside the vocabulary. */
const unsigned char *fg_token_vocab_bytes(const fg_token_vocab *v, int32_t id, size_t *n);

#ifdef __cplusplus
}
#endif
#endif /* FG_TOKENS_H */
