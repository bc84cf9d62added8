/* source.c — the source interface's calls (source.h); each dataset supplies its table. */
#include "datasets/source.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const fg_source_kind_names[FG_SOURCE_KIND_COUNT] = {
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

void fg_meta_fail(const fg_meta_reader *r, const char *fmt, ...) {
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->fail(r->ctx, msg);
}

void fg_meta_read_tokenizer(const fg_meta_reader *r, const char *tokstr, int vocab_size, fg_tokenizer **tok) {
    *tok = fg_tokenizer_parse(tokstr, strlen(tokstr));
    if (!*tok)
        fg_meta_fail(r, "bad tokenizer: %s", fg_last_error());
    else if (fg_tokenizer_vocab_size(*tok) != vocab_size)
        fg_meta_fail(r, "the tokenizer has %d tokens but vocab_size is %d", fg_tokenizer_vocab_size(*tok), vocab_size);
}

const fg_source_ops *const fg_source_kinds[FG_SOURCE_KIND_COUNT] = {
    [FG_SOURCE_ADDITION] = &fg_addition_source_ops, [FG_SOURCE_TEXT] = &fg_text_source_ops,
    [FG_SOURCE_TOKENS] = &fg_tokens_source_ops};

const fg_source_ops *fg_source_kind_taking(const char *flag) {
    for (int k = 0; k < FG_SOURCE_KIND_COUNT; k++)
        for (const char *const *f = fg_source_kinds[k]->flags; *f; f++)
            if (!strcmp(*f, flag)) return fg_source_kinds[k];
    return NULL;
}

void fg_source_identity_free(fg_source_identity *id) {
    for (int s = 0; s < FG_SPLIT_COUNT; s++) {
        fg_source_shards_free(id->shards[s], id->n_shards[s]);
        id->shards[s] = NULL;
        id->n_shards[s] = 0;
    }
}

int fg_source_kind_read(const fg_meta_reader *r) {
    return r->name(r->ctx, "data", fg_source_kind_names, FG_SOURCE_KIND_COUNT);
}

void fg_source_identity_read(const fg_meta_reader *r, int k, const char *tokstr, int vocab_size, int block_size,
                             fg_source_identity *id, fg_tokenizer **tok) {
    *tok = NULL;
    if (k < 0 || k >= FG_SOURCE_KIND_COUNT || r->status(r->ctx) != FG_OK) return;
    fg_source_identity_free(id);
    memset(id, 0, sizeof *id);
    id->kind = (fg_source_kind)k;
    id->vocab_size = vocab_size;
    id->block_size = block_size;
    fg_source_kinds[k]->read(r, tokstr, id, tok);
}

fg_source *fg_source_reopen(const fg_source_identity *id, const fg_tokenizer *tok, const char *given) {
    return fg_source_kinds[id->kind]->reopen(id, tok, given);
}

fg_status fg_source_check_read_back(const fg_source *d, const fg_source_identity *id) {
    return d->ops->check_read_back ? d->ops->check_read_back(d, id) : FG_OK;
}

int fg_source_kept(const fg_source_identity *id, const char *flag, int64_t *v) {
    const fg_source_ops *o = fg_source_kinds[id->kind];
    return o->kept ? o->kept(id, flag, v) : 0;
}

void fg_source_print(const fg_source *d, char *out, size_t n) { d->ops->print(d, out, n); }
int fg_source_exact_match(const fg_source *d) { return d->ops->exact_match; }

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
