/* source.h — where training batches come from: one small interface over every dataset.
 *
 * A source is a dataset behind a table of functions (fg_source_ops), as a device is behind its
 * kernel table: the checkpoints and the command line only call fg_source_*. Each dataset implements
 * the interface in its own file (the addition task in datasets/addition.c, text files in
 * datasets/text.c, pre-tokenized files in datasets/token_source.c), and its identity is its own
 * business: it writes it (describe), reads it back from a checkpoint (read, into an
 * fg_source_identity), opens the data again (reopen) and says how a run names it (print, what,
 * the command-line flags it takes).
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
#define FG_SOURCE_KIND_COUNT 3

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

/* The identity of a source as a checkpoint recorded it: its kind's `read` fills the fields of that
 * kind (the same fields, by the same names, as the source's own), the rest stay zero. */
typedef struct {
    fg_source_kind kind;
    int vocab_size, block_size;   /* the model's, as the checkpoint recorded them */
    fg_addition_config addition;  /* addition: the task's settings */
    char path[4096];              /* text: the file as given to train; a shard set: its folder or pattern */
    char path_abs[4096];          /* its absolute form, or "" */
    uint64_t file_hash;           /* text: XXH64 of the file's bytes */
    double val_fraction;          /* text: the validation share */
    fg_source_file files[FG_SPLIT_COUNT]; /* token files: train, val (path "": the train file's tail) */
    /* token files, every split as a list in order: a file or a pair one each (from files[]; val
     * none for the train file's tail); a shard set (sharded 1) its shards */
    int sharded;
    int n_shards[FG_SPLIT_COUNT];
    fg_source_shard *shards[FG_SPLIT_COUNT]; /* owned by the identity (fg_source_identity_free) */
} fg_source_identity;
/* Frees what the identity owns (its shard lists) and zeroes them; the struct itself is the caller's. */
void fg_source_identity_free(fg_source_identity *id);

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

/* Where a source reads its identity back from: the strict reader of a checkpoint's metadata. It
 * keeps the first error; after one, every call does nothing (and returns 0, NULL or -1). Each key
 * a call names counts as read: the metadata may hold no key that was not. */
typedef struct {
    void *ctx;
    fg_status (*status)(void *ctx); /* the first error, or FG_OK */
    /* records an error (FG_ERR_FORMAT): the metadata's file, then msg */
    void (*fail)(void *ctx, const char *msg);
    /* records an error fg_error reported already (out of memory) */
    void (*fail_status)(void *ctx, fg_status st);
    /* the value under key, or NULL; does not count key as read */
    const char *(*lookup)(void *ctx, const char *key);
    /* the keys prefix + K, K in canonical decimal, 0 <= K < n, count as read */
    void (*indexed)(void *ctx, const char *prefix, int n);
    /* an integer in canonical decimal within [lo, hi] */
    int64_t (*i64)(void *ctx, const char *key, int64_t lo, int64_t hi);
    uint64_t (*u64)(void *ctx, const char *key);   /* unsigned, canonical decimal */
    uint64_t (*hex)(void *ctx, const char *key);   /* 16 lowercase hex digits */
    /* a finite %.17g number in [lo, hi] ([lo, hi) when hi_open) */
    double (*f64)(void *ctx, const char *key, double lo, double hi, int hi_open);
    /* the index of the value among names[0 .. n), or -1 */
    int (*name)(void *ctx, const char *key, const char *const *names, int n);
    /* a stored path decoded into out (cap bytes); empty only when may_be_empty */
    void (*path)(void *ctx, const char *key, char *out, size_t cap, int may_be_empty);
    /* the forms of values inside a composite value: 1 when s is canonical decimal within int64 (into
     * *v), or a stored path that decodes into out[0 .. cap) */
    int (*parse_i64)(const char *s, int64_t *v);
    int (*unescape_path)(const char *s, char *out, size_t cap);
} fg_meta_reader;
/* r->fail with a printf-style message (at most 1199 bytes). */
void fg_meta_fail(const fg_meta_reader *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The tokenizer recorded as tokstr (*tok, the caller's also on error), which must have vocab_size
 * tokens; errors go to r. */
void fg_meta_read_tokenizer(const fg_meta_reader *r, const char *tokstr, int vocab_size, fg_tokenizer **tok);

/* The names a source's identity is recorded under (its describe writes them; its read reads them
 * back). */
extern const char *const fg_source_kind_names[FG_SOURCE_KIND_COUNT]; /* "data": by fg_source_kind */
extern const char *const fg_tokfile_format_names[2]; /* by fg_token_format */
/* a file or pair's "tokens.val": the validation split is its own file, or the train file's last tenth */
extern const char *const fg_tokens_val_names[2];
/* a shard set's "tokens.val": shards of its own, or the train sequence's last tenth */
extern const char *const fg_shards_val_names[2];
/* a file's keys by split: path, path_abs, xxh64, format, count */
extern const char *const fg_tokens_file_keys[FG_SPLIT_COUNT][5];
/* a shard's key is the prefix and its index; its value "<xxh64> <format> <ids> <path>" */
extern const char *const fg_shard_key_prefix[FG_SPLIT_COUNT];
/* The "tokenizer" a checkpoint records for data with none (token ids). */
#define FG_TOKENIZER_NONE "none"

/* What a dataset provides. The first group serves training; the second is what its kind knows
 * about itself (its name in a checkpoint, reading that record back, opening the data again, how a
 * run names it), so that checkpoints and the command line never ask which kind a source is. */
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

    fg_source_kind kind; /* its "data" value is fg_source_kind_names[kind] */
    const char *what; /* in messages: "the addition task", "a text file", "token files" */
    /* the command-line flag that names its data ("--data"), or NULL (it needs none) */
    const char *data_flag;
    const char *data_noun; /* what data_flag gives: "the file", "the files" */
    /* the command-line flags only this kind takes, NULL-terminated (its data_flag first, when it has one) */
    const char *const *flags;
    /* 1 when its batches are problems with one right answer: a run reports held-out exact match */
    int exact_match;
    /* Reads back what describe wrote: first the tokenizer recorded as tokstr (into *tok, owned by
     * the caller, also on error) against id->vocab_size, then its keys into id (id->kind,
     * vocab_size and block_size are set), each checked as describe writes it and against the model.
     * Errors go to r. */
    void (*read)(const fg_meta_reader *r, const char *tokstr, fg_source_identity *id, fg_tokenizer **tok);
    /* The data id records, opened again with tokenizer tok (the checkpoint's): `given` (a value of
     * data_flag) alone when not NULL, else where id says it was. NULL + why (FG_ERR_IO). */
    fg_source *(*reopen)(const fg_source_identity *id, const fg_tokenizer *tok, const char *given);
    /* 1 with *v the value the record keeps for command-line flag `flag` (a resumed run keeps it) */
    int (*kept)(const fg_source_identity *id, const char *flag, int64_t *v);
    /* FG_OK when id (read back from what describe wrote for d) names the files d names; else
     * FG_ERR_STATE saying which path would not read back */
    fg_status (*check_read_back)(const fg_source *d, const fg_source_identity *id);
    /* one line about the data for the start of a run, into out (n bytes, cut with "...") */
    void (*print)(const fg_source *d, char *out, size_t n);
} fg_source_ops;

/* Every kind's table, by fg_source_kind (datasets/addition.c, text.c, token_source.c). */
extern const fg_source_ops fg_addition_source_ops, fg_text_source_ops, fg_tokens_source_ops;
extern const fg_source_ops *const fg_source_kinds[FG_SOURCE_KIND_COUNT];
/* The kind whose flags include command-line flag `flag`, or NULL. */
const fg_source_ops *fg_source_kind_taking(const char *flag);

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
/* Gives a token source the tokenizer that made its ids (a copy is kept; it goes into the
 * checkpoints). FG_ERR_ARG when its vocabulary is not the ids' or a meta.pkl gave one already. */
fg_status fg_source_tokens_set_tokenizer(fg_source *d, const fg_tokenizer *tok);
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
/* Reads an identity back: fg_source_kind_read reads "data" (the kind, or -1 + an error in r);
 * fg_source_identity_read then that kind's keys (fg_source_ops.read) with the model's vocab_size
 * and block_size into id (freed and zeroed first). Errors go to r; *tok as the op says. */
int fg_source_kind_read(const fg_meta_reader *r);
void fg_source_identity_read(const fg_meta_reader *r, int kind, const char *tokstr, int vocab_size, int block_size,
                             fg_source_identity *id, fg_tokenizer **tok);
/* The data id records, opened again (fg_source_ops.reopen). Caller frees with fg_source_free. */
fg_source *fg_source_reopen(const fg_source_identity *id, const fg_tokenizer *tok, const char *given);
/* fg_source_ops.check_read_back; FG_OK for a kind without one. */
fg_status fg_source_check_read_back(const fg_source *d, const fg_source_identity *id);
/* fg_source_ops.kept of id's kind; 0 for a kind without one */
int fg_source_kept(const fg_source_identity *id, const char *flag, int64_t *v);
/* fg_source_ops.print */
void fg_source_print(const fg_source *d, char *out, size_t n);
/* fg_source_ops.exact_match */
int fg_source_exact_match(const fg_source *d);

#ifdef __cplusplus
}
#endif
#endif /* FG_SOURCE_H */
