/* source.h — where training batches come from: one small interface over every dataset.
 *
 * A source is a dataset behind a table of functions (fg_source_ops), as a device is behind its
 * kernel table: the trainer, the checkpoints and the command line only call fg_source_*. Each
 * dataset implements the interface in its own file (the addition task in datasets/addition.c, text
 * files in datasets/text.c, pre-tokenized files in datasets/token_source.c) and fills the identity
 * fields the checkpoints record.
 *
 * Batch `index` of split s is a pure function of (the data, s, B, T, seed, index): it does not depend
 * on threads or on which batches were drawn before, so a resumed run draws what an uninterrupted
 * one would have.
 */
#ifndef FG_SOURCE_H
#define FG_SOURCE_H

#include <stdint.h>

#include "datasets/addition.h"
#include "datasets/text.h"
#include "datasets/tokenizer.h"
#include "datasets/tokens.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FG_SOURCE_ADDITION = 0, FG_SOURCE_TEXT = 1, FG_SOURCE_TOKENS = 2 } fg_source_kind;

/* The identity of one token file, as the checkpoints record it. */
typedef struct {
    char path[4096];        /* as opened (relative when the --data-bin argument was); "" for none */
    char path_abs[4096];    /* its absolute path (realpath when it was opened), or "" */
    uint64_t hash;          /* XXH64 of the file's bytes */
    fg_token_format format; /* nanoGPT's or llm.c's */
    uint64_t count;         /* token ids it holds */
} fg_source_file;

/* One file of a split's list (a shard of a shard set, or the one file of a split), as the
 * checkpoints record it. */
typedef struct {
    char *path;             /* as opened (malloc'd) */
    uint64_t hash;          /* XXH64 of its bytes */
    fg_token_format format; /* nanoGPT's or llm.c's */
    uint64_t count;         /* token ids it holds */
} fg_source_shard;
/* Frees the paths of list[0 .. n) and the list (NULL is fine). */
void fg_source_shards_free(fg_source_shard *list, int n);

typedef struct fg_source fg_source;

/* Where a source writes its identity: metadata key/value strings (a checkpoint's). */
typedef struct {
    void *ctx;
    /* stores a copy of value under key; FG_OK or the writer's error */
    fg_status (*set)(void *ctx, const char *key, const char *value);
    /* the stored form of a file path (malloc'd), or NULL + fg_error */
    char *(*escape_path)(const char *path);
} fg_meta_writer;
/* Values in their stored form: decimal, 16 lowercase hex digits, %.17g (reads back to the same
 * bits), a path through escape_path. Each returns what w->set returns. */
fg_status fg_meta_put_i64(const fg_meta_writer *w, const char *key, int64_t v);
fg_status fg_meta_put_u64(const fg_meta_writer *w, const char *key, uint64_t v);
fg_status fg_meta_put_hex(const fg_meta_writer *w, const char *key, uint64_t v);
fg_status fg_meta_put_f64(const fg_meta_writer *w, const char *key, double v);
fg_status fg_meta_put_path(const fg_meta_writer *w, const char *key, const char *path);

/* The names a source's identity is recorded under (its describe writes them; a checkpoint reads
 * them back). */
extern const char *const fg_source_kind_names[3];   /* "data": by fg_source_kind */
extern const char *const fg_tokfile_format_names[2]; /* by fg_token_format */
/* a file or pair's "tokens.val": the validation split is its own file, or the train file's last tenth */
extern const char *const fg_tokens_val_names[2];
/* a shard set's "tokens.val": shards of its own, or the train sequence's last tenth */
extern const char *const fg_shards_val_names[2];
/* a file's keys by split: path, path_abs, xxh64, format, count */
extern const char *const fg_tokens_file_keys[FG_SPLIT_COUNT][5];
/* a shard's key is the prefix and its index; its value "<xxh64> <format> <ids> <path>" */
extern const char *const fg_shard_key_prefix[FG_SPLIT_COUNT];

/* What a dataset provides. */
typedef struct {
    const fg_tokenizer *(*tokenizer)(const fg_source *d); /* NULL for token ids without a tokenizer */
    int (*vocab_size)(const fg_source *d);
    /* the sequence length the data needs (the addition task's); NULL when any T works */
    int (*fixed_block)(const fg_source *d);
    fg_status (*batch)(const fg_source *d, fg_split s, int B, int T, uint64_t seed, uint64_t index, int32_t *x,
                       int32_t *y);
    /* the best achievable loss; NULL when it is not known */
    double (*optimal_loss)(const fg_source *d);
    void (*free_data)(fg_source *d); /* releases the dataset itself; the source struct is freed after */
    /* writes the data's identity (every key but "data", which fg_source_describe writes first);
     * NULL for data no checkpoint records */
    fg_status (*describe)(const fg_source *d, const fg_meta_writer *w);
} fg_source_ops;

struct fg_source {
    const fg_source_ops *ops;
    fg_source_kind kind;
    fg_addition *add;      /* the dataset: addition ... */
    fg_text_dataset *text; /* ... or text ... */
    fg_token_data *tokens; /* ... or token files (the others are NULL) */
    /* identity, as the checkpoints record it */
    char path[4096];     /* the text file or the --data-bin argument as given ("" for addition) */
    char path_abs[4096]; /* its absolute path (realpath when it was read), or "" */
    uint64_t file_hash;  /* XXH64 of the text file's bytes (0 for addition and token files) */
    double val_fraction; /* text: the validation share it was split with */
    /* token files: the train file, and the val file (path "" when the validation split is the
     * train file's last tenth) */
    fg_source_file files[FG_SPLIT_COUNT];
    /* token files, every split as a list in order: a file or a pair has one each (val none when it
     * is the train file's tail); a shard set (sharded 1; files[] then unused, path and path_abs the
     * folder or pattern) its shards */
    int sharded;
    int n_shards[FG_SPLIT_COUNT];
    fg_source_shard *shards[FG_SPLIT_COUNT];
    fg_tokenizer *tok; /* token files: nanoGPT's meta.pkl beside the train file (owned), or NULL */
};

/* The addition task (datasets/addition.c). Caller frees with fg_source_free. NULL + fg_last_error(). */
fg_source *fg_source_addition(const fg_addition_config *c);
/* A text file, tokenized with opt's tokenizer kind or given tokenizer (datasets/text.c). */
fg_source *fg_source_text(const char *path, const fg_text_options *opt);
/* The text file at path again, when its contents still hash to `hash` (XXH64 of its bytes), read as
 * fg_source_text reads it; else NULL and why not into why[0 .. n): one line naming path followed by
 * `what` (how the path was found). A FIFO or device is refused unread. */
fg_source *fg_source_text_reopen(const char *path, const char *what, uint64_t hash, const fg_text_options *opt,
                                 char *why, size_t n);
/* Pre-tokenized files of a vocabulary of vocab_size ids for a model of block size block_size
 * (datasets/token_source.c): `path` as fg_token_data_open takes it (a folder, a file, or a pattern
 * of shards), or, when val_path is not NULL,
 * path is the train file and val_path the val file ("" for the train file's last tenth). The files
 * stay memory-mapped: batches read from the mapping. */
fg_source *fg_source_tokens(const char *path, const char *val_path, int vocab_size, int block_size);
/* Where nanoGPT's meta.pkl of a --data-bin argument would be: PATH/meta.pkl for a folder, else
 * meta.pkl in the folder of the (train) file. Writes it into out (n bytes); 1 when it exists. A token
 * source opened from such a folder carries the character tokenizer it describes (datasets/meta_pkl.h),
 * and its vocabulary must equal vocab_size. */
int fg_source_tokens_meta_path(const char *path, char *out, size_t n);
/* One line about a token source for the start of a run: the format, the files or, for a shard set,
 * the shard count and ids of each split and the total. Into out (n bytes, cut with "..."). */
void fg_source_tokens_describe(const fg_source *d, char *out, size_t n);
/* Gives a token source the tokenizer that made its ids (a copy is kept; it goes into the
 * checkpoints). FG_ERR_ARG when its vocabulary is not the ids' or a meta.pkl gave one already. */
fg_status fg_source_tokens_set_tokenizer(fg_source *d, const fg_tokenizer *tok);
/* A token source's identity as a checkpoint recorded it (borrowed arrays of FG_SPLIT_COUNT): a file
 * or pair in files[] and each split as a list in shards/n_shards, or (sharded 1) a shard set in the
 * lists alone. */
typedef struct {
    int sharded;
    const fg_source_file *files;
    fg_source_shard *const *shards;
    const int *n_shards;
} fg_source_tokens_record;
/* Empty when token source d holds the data rec records (the same contents, shard for shard in the
 * same order; their names may differ), else the first difference, one line, into why[0 .. n). */
void fg_source_tokens_mismatch(const fg_source *d, const fg_source_tokens_record *rec, char *why, size_t n);
void fg_source_free(fg_source *d); /* NULL is fine */

const fg_tokenizer *fg_source_tokenizer(const fg_source *d);
int fg_source_vocab_size(const fg_source *d);
int fg_source_fixed_block(const fg_source *d);
/* Batch `index` of split s: x, y (B, T) int32. */
fg_status fg_source_batch(const fg_source *d, fg_split s, int B, int T, uint64_t seed, uint64_t index, int32_t *x,
                          int32_t *y);
double fg_source_optimal_loss(const fg_source *d);
/* Writes the source's identity as metadata: "data" (its kind's name), then its own keys. */
fg_status fg_source_describe(const fg_source *d, const fg_meta_writer *w);

#ifdef __cplusplus
}
#endif
#endif /* FG_SOURCE_H */
