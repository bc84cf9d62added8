/* token_source.c — pre-tokenized files (datasets/tokens.h) as a training source (datasets/source.h).
 *
 * The files stay memory-mapped for the source's life: a batch copies its B windows of T + 1 ids out
 * of the mapping and nothing else is held, so memory does not grow with the files' size. There is
 * no text tokenizer: the vocabulary is the --vocab-size the ids were checked against.
 */
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

static const fg_source_ops tokens_source_ops = {.tokenizer = tokens_tokenizer,
                                                .vocab_size = tokens_vocab_size,
                                                .batch = tokens_batch,
                                                .free_data = tokens_free_data};

static void set_identity(fg_source_file *id, const fg_token_file *f) {
    snprintf(id->path, sizeof id->path, "%s", fg_token_file_path(f));
    char abs[PATH_MAX];
    if (realpath(id->path, abs) && strlen(abs) < sizeof id->path_abs)
        snprintf(id->path_abs, sizeof id->path_abs, "%s", abs);
    id->hash = fg_token_file_hash(f);
    id->format = fg_token_file_format(f);
    id->count = (uint64_t)fg_token_file_count(f);
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
    char abs[PATH_MAX];
    if (realpath(path, abs) && strlen(abs) < sizeof d->path_abs) snprintf(d->path_abs, sizeof d->path_abs, "%s", abs);
    for (int s = 0; s < FG_SPLIT_COUNT; s++) {
        const fg_token_file *f = fg_token_data_file(d->tokens, (fg_split)s);
        if (f) set_identity(&d->files[s], f);
    }
    return d;
}
