/* token_source.c — pre-tokenized files (datasets/tokens.h) as a training source (datasets/source.h).
 *
 * The files stay memory-mapped for the source's life: a batch copies its B windows of T + 1 ids out
 * of the mapping and nothing else is held, so memory does not grow with the files' size. There is
 * no text tokenizer (unless nanoGPT's meta.pkl is beside them): the vocabulary is the --vocab-size
 * the ids were checked against. A shard set is one source: its shards in order, each split's list
 * recorded for the checkpoints.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "datasets/meta_pkl.h"
#include "datasets/source.h"

static const fg_tokenizer *tokens_tokenizer(const fg_source *d) { return d->tok; }
static int tokens_vocab_size(const fg_source *d) { return fg_token_data_vocab_size(d->tokens); }
static fg_status tokens_batch(const fg_source *d, fg_split s, int B, int T, uint64_t seed, uint64_t index, int32_t *x,
                              int32_t *y) {
    return fg_token_data_batch(d->tokens, s, B, T, seed, index, x, y);
}
static void tokens_free_data(fg_source *d) {
    fg_token_data_free(d->tokens);
    fg_tokenizer_free(d->tok);
    for (int s = 0; s < FG_SPLIT_COUNT; s++) fg_source_shards_free(d->shards[s], d->n_shards[s]);
}

void fg_source_shards_free(fg_source_shard *list, int n) {
    if (!list) return;
    for (int i = 0; i < n; i++) free(list[i].path);
    free(list);
}

int fg_source_tokens_meta_path(const char *path, char *out, size_t n) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (snprintf(out, n, "%s/meta.pkl", path) >= (int)n) return 0;
    } else {
        const char *slash = strrchr(path, '/');
        if (!slash) {
            if (snprintf(out, n, "meta.pkl") >= (int)n) return 0;
        } else if (snprintf(out, n, "%.*s/meta.pkl", (int)(slash - path), path) >= (int)n) {
            return 0;
        }
    }
    return stat(out, &sb) == 0;
}

/* Shard i of a split's list: "<xxh64> <format> <ids> <path>". */
static fg_status put_shard(const fg_meta_writer *w, int split, int i, const fg_source_shard *id) {
    char key[64];
    snprintf(key, sizeof key, "%s%d", fg_shard_key_prefix[split], i);
    char *e = w->escape_path(id->path);
    if (!e) return fg_last_status();
    const size_t n = strlen(e) + 64;
    char *v = malloc(n);
    if (!v) {
        free(e);
        return fg_error(FG_ERR_OOM, "checkpoint: out of memory");
    }
    snprintf(v, n, "%016" PRIx64 " %s %" PRIu64 " %s", id->hash, fg_tokfile_format_names[id->format], id->count, e);
    fg_status st = w->set(w->ctx, key, v);
    free(v);
    free(e);
    return st;
}

/* A shard set: the folder or pattern (as given and absolute), then each split's shards in order
 * (a validation split without shards of its own is the train sequence's tail). */
static fg_status describe_shards(const fg_source *d, const fg_meta_writer *w) {
    static const char *const count_keys[FG_SPLIT_COUNT] = {"tokens.train.shards", "tokens.val.shards"};
    fg_status st = fg_meta_put_path(w, "tokens.source", d->path);
    if (st == FG_OK) st = fg_meta_put_path(w, "tokens.source_abs", d->path_abs);
    for (int k = 0; k < FG_SPLIT_COUNT && st == FG_OK; k++) {
        if (k == FG_SPLIT_VAL) st = w->set(w->ctx, "tokens.val", fg_shards_val_names[!d->n_shards[k]]);
        if (st != FG_OK || !d->n_shards[k]) continue;
        st = fg_meta_put_i64(w, count_keys[k], d->n_shards[k]);
        for (int i = 0; i < d->n_shards[k] && st == FG_OK; i++) st = put_shard(w, k, i, &d->shards[k][i]);
    }
    return st;
}

/* A file or a pair: each file's paths, hash, format and id count. */
static fg_status tokens_describe(const fg_source *d, const fg_meta_writer *w) {
    if (d->sharded) return describe_shards(d, w);
    fg_status st = FG_OK;
    for (int k = 0; k < FG_SPLIT_COUNT && st == FG_OK; k++) {
        const fg_source_file *id = &d->files[k];
        const char *const *keys = fg_tokens_file_keys[k];
        if (k == FG_SPLIT_VAL) st = w->set(w->ctx, "tokens.val", fg_tokens_val_names[!id->path[0]]);
        if (st != FG_OK || !id->path[0]) continue;
        st = fg_meta_put_path(w, keys[0], id->path);
        if (st == FG_OK) st = fg_meta_put_path(w, keys[1], id->path_abs);
        if (st == FG_OK) st = fg_meta_put_hex(w, keys[2], id->hash);
        if (st == FG_OK) st = w->set(w->ctx, keys[3], fg_tokfile_format_names[id->format]);
        if (st == FG_OK) st = fg_meta_put_i64(w, keys[4], (int64_t)id->count);
    }
    return st;
}

static const fg_source_ops tokens_source_ops = {.tokenizer = tokens_tokenizer,
                                                .vocab_size = tokens_vocab_size,
                                                .batch = tokens_batch,
                                                .free_data = tokens_free_data,
                                                .describe = tokens_describe};

static void set_identity(fg_source_file *id, const fg_token_file *f) {
    snprintf(id->path, sizeof id->path, "%s", fg_token_file_path(f));
    char abs[PATH_MAX];
    if (realpath(id->path, abs) && strlen(abs) < sizeof id->path_abs)
        snprintf(id->path_abs, sizeof id->path_abs, "%s", abs);
    id->hash = fg_token_file_hash(f);
    id->format = fg_token_file_format(f);
    id->count = (uint64_t)fg_token_file_count(f);
}

/* Every split's files as a list (source.h). */
static fg_status set_shards(fg_source *d) {
    for (int s = 0; s < FG_SPLIT_COUNT; s++) {
        const int n = fg_token_data_file_count(d->tokens, (fg_split)s);
        if (!n) continue;
        if (!(d->shards[s] = calloc((size_t)n, sizeof *d->shards[s])))
            return fg_error(FG_ERR_OOM, "--data-bin: out of memory");
        d->n_shards[s] = n;
        for (int i = 0; i < n; i++) {
            const fg_token_file *f = fg_token_data_shard(d->tokens, (fg_split)s, i);
            fg_source_shard *id = &d->shards[s][i];
            if (!(id->path = strdup(fg_token_file_path(f)))) return fg_error(FG_ERR_OOM, "--data-bin: out of memory");
            id->hash = fg_token_file_hash(f);
            id->format = fg_token_file_format(f);
            id->count = (uint64_t)fg_token_file_count(f);
        }
    }
    return FG_OK;
}

/* The absolute form of a --data-bin argument into out (n bytes), or "": realpath of a folder or a
 * file; for a pattern, realpath of its folder up to the first wildcard, then the rest as written. */
static void abs_argument(const char *path, char *out, size_t n) {
    char abs[PATH_MAX];
    out[0] = '\0';
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (realpath(path, abs) && strlen(abs) < n) snprintf(out, n, "%s", abs);
        return;
    }
    if (path[0] == '/') {
        if (strlen(path) < n) snprintf(out, n, "%s", path);
        return;
    }
    const char *wild = strpbrk(path, "*?["), *slash = NULL;
    for (const char *p = path; *p && (!wild || p < wild); p++)
        if (*p == '/') slash = p;
    char dir[PATH_MAX];
    if (slash) {
        if ((size_t)(slash - path) >= sizeof dir) return;
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    } else {
        snprintf(dir, sizeof dir, ".");
    }
    const char *rest = slash ? slash + 1 : path;
    const size_t r = strlen(rest);
    if (!realpath(dir, abs)) return;
    const size_t a = strlen(abs);
    if (a + 1 + r >= n) return;
    memcpy(out, abs, a);
    out[a] = '/';
    memcpy(out + a + 1, rest, r + 1);
}

void fg_source_tokens_describe(const fg_source *d, char *out, size_t n) {
    const char *tok_desc = d->tok ? "meta.pkl's character-level tokenizer" : "no tokenizer";
    int llmc = 0, nano = 0;
    uint64_t ids[FG_SPLIT_COUNT] = {0, 0};
    for (int s = 0; s < FG_SPLIT_COUNT; s++)
        for (int i = 0; i < d->n_shards[s]; i++) {
            llmc += d->shards[s][i].format == FG_TOKFILE_LLMC;
            nano += d->shards[s][i].format == FG_TOKFILE_NANOGPT;
            ids[s] += d->shards[s][i].count;
        }
    const char *fmt = llmc && nano ? "llm.c and nanoGPT" : llmc ? "llm.c" : "nanoGPT";
    const int ntr = d->n_shards[FG_SPLIT_TRAIN], nva = d->n_shards[FG_SPLIT_VAL];
    int k;
    if (nva)
        k = snprintf(out, n,
                     "%s token shards %s: %d train (%" PRIu64 " ids), %d val (%" PRIu64 " ids), %d shards and %" PRIu64
                     " ids in all, %s",
                     fmt, d->path, ntr, ids[FG_SPLIT_TRAIN], nva, ids[FG_SPLIT_VAL], ntr + nva,
                     ids[FG_SPLIT_TRAIN] + ids[FG_SPLIT_VAL], tok_desc);
    else
        k = snprintf(out, n, "%s token shards %s: %d shards, %" PRIu64 " ids in all (%zu train, the last %zu val), %s",
                     fmt, d->path, ntr, ids[FG_SPLIT_TRAIN], fg_token_data_split_tokens(d->tokens, FG_SPLIT_TRAIN),
                     fg_token_data_split_tokens(d->tokens, FG_SPLIT_VAL), tok_desc);
    if (k >= (int)n && n >= 4) snprintf(out + n - 4, 4, "..."); /* a very long path */
}

fg_source *fg_source_tokens(const char *path, const char *val_path, int vocab_size, int block_size) {
    const size_t cap = sizeof((fg_source *)0)->path;
    if (!path || strlen(path) >= cap || (val_path && strlen(val_path) >= cap)) {
        fg_error(FG_ERR_ARG, "--data-bin: %s", path ? "the path is too long" : "no path");
        return NULL;
    }
    fg_source *d = calloc(1, sizeof *d);
    if (!d) {
        fg_error(FG_ERR_OOM, "--data-bin: out of memory");
        return NULL;
    }
    d->ops = &tokens_source_ops;
    d->kind = FG_SOURCE_TOKENS;
    d->tokens = val_path ? fg_token_data_open_files(NULL, path, val_path[0] ? val_path : NULL, vocab_size, block_size)
                         : fg_token_data_open(path, vocab_size, block_size);
    if (!d->tokens) {
        free(d);
        return NULL;
    }
    char meta[4200];
    if (fg_source_tokens_meta_path(path, meta, sizeof meta)) {
        d->tok = fg_meta_pkl_load(meta);
        if (d->tok && fg_tokenizer_vocab_size(d->tok) != vocab_size)
            fg_error(FG_ERR_ARG, "--data-bin: %s has vocab_size %d, and the ids' vocabulary is %d", meta,
                     fg_tokenizer_vocab_size(d->tok), vocab_size);
        if (!d->tok || fg_tokenizer_vocab_size(d->tok) != vocab_size) {
            fg_source_free(d);
            return NULL;
        }
    }
    snprintf(d->path, sizeof d->path, "%s", path);
    d->sharded = fg_token_data_sharded(d->tokens);
    if (d->sharded) {
        abs_argument(path, d->path_abs, sizeof d->path_abs);
    } else {
        char abs[PATH_MAX];
        if (realpath(path, abs) && strlen(abs) < sizeof d->path_abs)
            snprintf(d->path_abs, sizeof d->path_abs, "%s", abs);
        for (int s = 0; s < FG_SPLIT_COUNT; s++) {
            const fg_token_file *f = fg_token_data_file(d->tokens, (fg_split)s);
            if (f) set_identity(&d->files[s], f);
        }
    }
    if (set_shards(d) != FG_OK) {
        fg_source_free(d);
        return NULL;
    }
    return d;
}

fg_status fg_source_tokens_set_tokenizer(fg_source *d, const fg_tokenizer *tok) {
    if (!d || d->kind != FG_SOURCE_TOKENS || !tok) return fg_error(FG_ERR_ARG, "fg_source_tokens_set_tokenizer: not a token source");
    if (d->tok) return fg_error(FG_ERR_ARG, "--tokenizer: the ids come with nanoGPT's meta.pkl, whose tokenizer they use");
    if (fg_tokenizer_vocab_size(tok) != fg_token_data_vocab_size(d->tokens))
        return fg_error(FG_ERR_ARG, "--tokenizer: its vocabulary is %d and the ids' (--vocab-size) %d", fg_tokenizer_vocab_size(tok),
                        fg_token_data_vocab_size(d->tokens));
    return (d->tok = fg_tokenizer_clone(tok)) ? FG_OK : fg_last_status();
}
