/* source.c — the source interface's calls (source.h); each dataset supplies its table. */
#include "datasets/source.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

const char *const fg_source_kind_names[3] = {
    [FG_SOURCE_ADDITION] = "addition", [FG_SOURCE_TEXT] = "text", [FG_SOURCE_TOKENS] = "tokens"};
const char *const fg_tokfile_format_names[2] = {[FG_TOKFILE_NANOGPT] = "nanogpt", [FG_TOKFILE_LLMC] = "llmc"};
const char *const fg_tokens_val_names[2] = {"file", "train_tail"};
const char *const fg_shards_val_names[2] = {"shards", "train_tail"};
const char *const fg_tokens_file_keys[FG_SPLIT_COUNT][5] = {
    [FG_SPLIT_TRAIN] = {"tokens.train.path", "tokens.train.path_abs", "tokens.train.xxh64", "tokens.train.format",
                        "tokens.train.count"},
    [FG_SPLIT_VAL] = {"tokens.val.path", "tokens.val.path_abs", "tokens.val.xxh64", "tokens.val.format",
                      "tokens.val.count"}};
const char *const fg_shard_key_prefix[FG_SPLIT_COUNT] = {[FG_SPLIT_TRAIN] = "tokens.train.shard.",
                                                         [FG_SPLIT_VAL] = "tokens.val.shard."};

fg_status fg_meta_put_i64(const fg_meta_writer *w, const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return w->set(w->ctx, key, buf);
}
fg_status fg_meta_put_u64(const fg_meta_writer *w, const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return w->set(w->ctx, key, buf);
}
fg_status fg_meta_put_hex(const fg_meta_writer *w, const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%016" PRIx64, v);
    return w->set(w->ctx, key, buf);
}
fg_status fg_meta_put_f64(const fg_meta_writer *w, const char *key, double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    return w->set(w->ctx, key, buf);
}
fg_status fg_meta_put_path(const fg_meta_writer *w, const char *key, const char *path) {
    char *e = w->escape_path(path);
    if (!e) return fg_last_status();
    fg_status st = w->set(w->ctx, key, e);
    free(e);
    return st;
}

fg_status fg_source_describe(const fg_source *d, const fg_meta_writer *w) {
    fg_status st = w->set(w->ctx, "data", fg_source_kind_names[d->kind]);
    return st == FG_OK && d->ops->describe ? d->ops->describe(d, w) : st;
}

void fg_source_free(fg_source *d) {
    if (!d) return;
    if (d->ops && d->ops->free_data) d->ops->free_data(d);
    free(d);
}

const fg_tokenizer *fg_source_tokenizer(const fg_source *d) { return d->ops->tokenizer(d); }
int fg_source_vocab_size(const fg_source *d) { return d->ops->vocab_size(d); }
int fg_source_fixed_block(const fg_source *d) { return d->ops->fixed_block ? d->ops->fixed_block(d) : 0; }
double fg_source_optimal_loss(const fg_source *d) { return d->ops->optimal_loss ? d->ops->optimal_loss(d) : NAN; }

fg_status fg_source_batch(const fg_source *d, fg_split s, int B, int T, uint64_t seed, uint64_t index, int32_t *x,
                          int32_t *y) {
    return d->ops->batch(d, s, B, T, seed, index, x, y);
}
