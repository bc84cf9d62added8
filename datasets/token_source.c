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

/* A shard set: the shard count and ids of each split and the total. */
static void print_shards(const fg_source *d, char *out, size_t n) {
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
    d->ops = &fg_tokens_source_ops;
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

/* ---- matching the data a checkpoint recorded ---- */

/* Empty when src holds the files recorded, else why not (into why[0..n)). */
static void files_mismatch(const fg_source_identity *in, const fg_source *src, char *why, size_t n) {
    why[0] = '\0';
    for (int k = 0; k < FG_SPLIT_COUNT; k++) {
        const fg_source_file *want = &in->files[k], *have = &src->files[k];
        if (!want->path[0] != !have->path[0]) {
            snprintf(why, n,
                     "'%.600s' splits its data differently: the checkpoint's validation split is %s, this one's is %s",
                     src->path, want->path[0] ? "a file of its own" : "the train file's last tenth",
                     have->path[0] ? "a file of its own" : "the train file's last tenth");
            return;
        }
        if (!want->path[0]) continue;
        if (have->hash != want->hash || have->count != want->count || have->format != want->format) {
            snprintf(why, n,
                     "'%.600s' is not the %s file the checkpoint trained on (its contents changed: xxh64 %016llx, "
                     "%llu ids; the checkpoint records %016llx, %llu ids)",
                     have->path, fg_split_name((fg_split)k), (unsigned long long)have->hash,
                     (unsigned long long)have->count, (unsigned long long)want->hash, (unsigned long long)want->count);
            return;
        }
    }
}

/* How many leading bytes the paths of list[0 .. n) share up to a '/': what their names in a message
 * leave out, so that a set listed from another folder (a copy, or the absolute pattern) still
 * matches shard by shard. */
static size_t shared_folder(const fg_source_shard *list, int n) {
    if (n < 1) return 0;
    const char *a = list[0].path, *slash = strrchr(a, '/');
    size_t k = slash ? (size_t)(slash - a) + 1 : 0;
    for (int i = 1; i < n && k; i++) {
        size_t j = 0;
        while (j < k && a[j] == list[i].path[j]) j++;
        while (j > 0 && a[j - 1] != '/') j--;
        k = j;
    }
    return k;
}

static int same_shard(const fg_source_shard *a, const fg_source_shard *b) {
    return a->hash == b->hash && a->count == b->count && a->format == b->format;
}

/* In list b[0 .. nb) (names from byte kb on), the shard named `name`, or -1. */
static int find_shard(const fg_source_shard *b, int nb, size_t kb, const char *name) {
    for (int j = 0; j < nb; j++)
        if (!strcmp(b[j].path + kb, name)) return j;
    return -1;
}

/* In list b[0 .. nb), the shard with the contents of x, or -1. */
static int find_contents(const fg_source_shard *b, int nb, const fg_source_shard *x) {
    for (int j = 0; j < nb; j++)
        if (same_shard(&b[j], x)) return j;
    return -1;
}

/* Empty when src's lists hold the shards recorded, in their order (their names may
 * differ: the data is the same), else the first difference (into why[0..n)): the same shards in
 * another order; else, by name, a shard missing, one added, or one changed. */
static void shards_mismatch(const fg_source_identity *in, const fg_source *src, char *why, size_t n) {
    why[0] = '\0';
    for (int s = 0; s < FG_SPLIT_COUNT; s++) {
        const fg_source_shard *a = in->shards[s], *b = src->shards[s];
        const int na = in->n_shards[s], nb = src->n_shards[s];
        const char *sp = fg_split_name((fg_split)s);
        if (!na != !nb) {
            snprintf(why, n,
                     "'%.600s' splits its data differently: the checkpoint's validation split is %s, this one's is %s",
                     src->path, na ? "files of its own" : "the last tenth of the train data",
                     nb ? "files of its own" : "the last tenth of the train data");
            return;
        }
        int same = na == nb, permuted = na == nb;
        for (int i = 0; i < na && same; i++) same = same_shard(&a[i], &b[i]);
        if (same) continue;
        for (int i = 0; i < na && permuted; i++) permuted = find_contents(b, nb, &a[i]) >= 0;
        for (int j = 0; j < nb && permuted; j++) permuted = find_contents(a, na, &b[j]) >= 0;
        for (int j = 0; j < nb && permuted; j++)
            if (!same_shard(&a[j], &b[j])) {
                snprintf(why, n,
                         "'%.600s' is not the data the checkpoint trained on: its %s shards are in another order "
                         "('%.300s' is shard %d of %d here; the checkpoint trained on its contents as shard %d)",
                         src->path, sp, b[j].path, j + 1, nb, find_contents(a, na, &b[j]) + 1);
                return;
            }
        const size_t ka = shared_folder(a, na), kb = shared_folder(b, nb);
        for (int i = 0; i < na; i++)
            if (find_shard(b, nb, kb, a[i].path + ka) < 0) {
                snprintf(why, n,
                         "'%.600s' is not the data the checkpoint trained on: its %s shard '%.300s' is missing (the "
                         "checkpoint trained on %d %s shards, this has %d)",
                         src->path, sp, a[i].path + ka, na, sp, nb);
                return;
            }
        for (int j = 0; j < nb; j++)
            if (find_shard(a, na, ka, b[j].path + kb) < 0) {
                snprintf(why, n,
                         "'%.600s' is not the data the checkpoint trained on: %s shard '%.300s' was added (the "
                         "checkpoint trained on %d %s shards, this has %d)",
                         src->path, sp, b[j].path, na, sp, nb);
                return;
            }
        for (int i = 0; i < na; i++) {
            const fg_source_shard *x = &b[find_shard(b, nb, kb, a[i].path + ka)];
            if (!same_shard(&a[i], x)) {
                snprintf(why, n,
                         "'%.600s' is not the data the checkpoint trained on: %s shard '%.300s' changed (xxh64 "
                         "%016llx, %llu ids; the checkpoint records %016llx, %llu ids)",
                         src->path, sp, x->path, (unsigned long long)x->hash, (unsigned long long)x->count,
                         (unsigned long long)a[i].hash, (unsigned long long)a[i].count);
                return;
            }
        }
        snprintf(why, n, "'%.600s' is not the data the checkpoint trained on: its %s shards differ", src->path, sp);
        return;
    }
}

/* Empty when token source d holds the data rec records (the same contents, shard for shard in the
 * same order; their names may differ), else the first difference, one line, into why[0 .. n). */
static void tokens_mismatch(const fg_source *d, const fg_source_identity *rec, char *why, size_t n) {
    if (rec->sharded || d->sharded)
        shards_mismatch(rec, d, why, n);
    else
        files_mismatch(rec, d, why, n);
}

/* ---- reading back what tokens_describe wrote ---- */

/* One token file's identity under keys (fg_tokens_file_keys[split]). */
static void read_file(const fg_meta_reader *r, const char *const keys[5], fg_source_file *id) {
    r->path(r->ctx, keys[0], id->path, sizeof id->path, 0);
    r->path(r->ctx, keys[1], id->path_abs, sizeof id->path_abs, 1);
    id->hash = r->hex(r->ctx, keys[2]);
    int fmt = r->name(r->ctx, keys[3], fg_tokfile_format_names, 2);
    id->format = fmt < 0 ? FG_TOKFILE_NANOGPT : (fg_token_format)fmt;
    id->count = (uint64_t)r->i64(r->ctx, keys[4], 1, INT64_MAX / 2);
}

/* Shard i of split `split`'s list: "<xxh64> <format> <ids> <path>" (16 lowercase hex digits, a
 * format name, canonical decimal in 1 .. INT64_MAX/2, a stored path). */
static void read_shard(const fg_meta_reader *r, int split, int i, fg_source_shard *id) {
    if (r->status(r->ctx) != FG_OK) return;
    char key[64], num[24], path[4096];
    snprintf(key, sizeof key, "%s%d", fg_shard_key_prefix[split], i);
    const char *v = r->lookup(r->ctx, key), *p = v;
    if (!v) {
        fg_meta_fail(r, "the metadata has no '%s' (an incomplete or foreign checkpoint)", key);
        return;
    }
    int ok = 1;
    uint64_t h = 0;
    for (int k = 0; k < 16 && ok; k++, p++) {
        if (*p >= '0' && *p <= '9')
            h = h << 4 | (uint64_t)(*p - '0');
        else if (*p >= 'a' && *p <= 'f')
            h = h << 4 | (uint64_t)(*p - 'a' + 10);
        else
            ok = 0;
    }
    ok = ok && *p++ == ' ';
    int fmt = -1;
    for (int f = 0; ok && f < 2 && fmt < 0; f++) {
        const size_t n = strlen(fg_tokfile_format_names[f]);
        if (!strncmp(p, fg_tokfile_format_names[f], n) && p[n] == ' ') {
            fmt = f;
            p += n + 1;
        }
    }
    ok = ok && fmt >= 0;
    const char *sp = ok ? strchr(p, ' ') : NULL;
    int64_t count = 0;
    ok = ok && sp && (size_t)(sp - p) < sizeof num;
    if (ok) {
        snprintf(num, sizeof num, "%.*s", (int)(sp - p), p);
        ok = r->parse_i64(num, &count) && count >= 1 && count <= INT64_MAX / 2;
    }
    ok = ok && r->unescape_path(sp + 1, path, sizeof path) && path[0];
    if (!ok) {
        fg_meta_fail(r,
                     "metadata '%s' = '%.80s' is not a shard as flashgrad records it ('<xxh64> <nanogpt|llmc> <ids> "
                     "<path>')",
                     key, v);
        return;
    }
    if (!(id->path = strdup(path))) {
        r->fail_status(r->ctx, fg_error(FG_ERR_OOM, "checkpoint: out of memory"));
        return;
    }
    id->hash = h;
    id->format = (fg_token_format)fmt;
    id->count = (uint64_t)count;
}

/* A shard set's record into id (its lists owned by id, also on error). */
static void read_shard_set(const fg_meta_reader *r, fg_source_identity *id) {
    id->sharded = 1;
    r->path(r->ctx, "tokens.source", id->path, sizeof id->path, 0);
    r->path(r->ctx, "tokens.source_abs", id->path_abs, sizeof id->path_abs, 1);
    int n[2];
    n[0] = (int)r->i64(r->ctx, "tokens.train.shards", 1, FG_TOKEN_MAX_SHARDS);
    const int val = r->name(r->ctx, "tokens.val", fg_shards_val_names, 2);
    n[1] = val == 0 ? (int)r->i64(r->ctx, "tokens.val.shards", 1, FG_TOKEN_MAX_SHARDS) : 0;
    for (int s = 0; s < 2 && r->status(r->ctx) == FG_OK; s++) {
        if (!n[s]) continue;
        if (!(id->shards[s] = calloc((size_t)n[s], sizeof *id->shards[s]))) {
            r->fail_status(r->ctx, fg_error(FG_ERR_OOM, "checkpoint: out of memory"));
            return;
        }
        id->n_shards[s] = n[s];
        for (int i = 0; i < n[s]; i++) read_shard(r, s, i, &id->shards[s][i]);
        r->indexed(r->ctx, fg_shard_key_prefix[s], n[s]);
    }
}

/* The lists of a run on a file or a pair of files: its files[]. */
static void files_as_lists(const fg_meta_reader *r, fg_source_identity *id) {
    for (int s = 0; s < FG_SPLIT_COUNT && r->status(r->ctx) == FG_OK; s++) {
        if (!id->files[s].path[0]) continue;
        fg_source_shard *sh = id->shards[s] = calloc(1, sizeof *sh);
        if (!sh || !(sh->path = strdup(id->files[s].path))) {
            r->fail_status(r->ctx, fg_error(FG_ERR_OOM, "checkpoint: out of memory"));
            return;
        }
        id->n_shards[s] = 1;
        sh->hash = id->files[s].hash;
        sh->format = id->files[s].format;
        sh->count = id->files[s].count;
    }
}

/* The tokenizer: FG_TOKENIZER_NONE (token ids of a vocabulary of uint16 ids), or the character
 * tokenizer of a meta.pkl or the BPE tokenizer of the ids; then the files or the shard set, each
 * split long enough for one window of block_size + 1. */
static void tokens_read(const fg_meta_reader *r, const char *tokstr, fg_source_identity *id, fg_tokenizer **tok) {
    if (strcmp(tokstr, FG_TOKENIZER_NONE)) {
        *tok = fg_tokenizer_parse(tokstr, strlen(tokstr));
        if (!*tok)
            fg_meta_fail(r, "bad tokenizer: %s", fg_last_error());
        else if (fg_tokenizer_kind(*tok) == FG_TOK_BYTE || fg_tokenizer_vocab_size(*tok) != id->vocab_size)
            fg_meta_fail(r,
                         "metadata 'tokenizer' = '%.40s'; a model trained on token files has '%s' there, the "
                         "character tokenizer of its meta.pkl or the BPE tokenizer of its ids (vocab_size %d tokens)",
                         tokstr, FG_TOKENIZER_NONE, id->vocab_size);
    } else if (id->vocab_size > FG_TOKEN_MAX_VOCAB) {
        fg_meta_fail(r, "vocab_size %d is larger than token files hold (%d, uint16 ids)", id->vocab_size,
                     FG_TOKEN_MAX_VOCAB);
    }
    if (r->status(r->ctx) != FG_OK) return;
    int val;
    if (r->lookup(r->ctx, "tokens.train.shards")) { /* a shard set */
        read_shard_set(r, id);
        val = id->n_shards[FG_SPLIT_VAL] ? 0 : 1;
    } else {
        read_file(r, fg_tokens_file_keys[FG_SPLIT_TRAIN], &id->files[FG_SPLIT_TRAIN]);
        val = r->name(r->ctx, "tokens.val", fg_tokens_val_names, 2);
        if (val == 0) read_file(r, fg_tokens_file_keys[FG_SPLIT_VAL], &id->files[FG_SPLIT_VAL]);
        files_as_lists(r, id);
    }
    if (r->status(r->ctx) != FG_OK) return;
    /* the splits' sizes (tokens.h): each must hold one window of block_size + 1 */
    uint64_t n_train = 0, n_val = 0;
    for (int i = 0; i < id->n_shards[FG_SPLIT_TRAIN]; i++) n_train += id->shards[FG_SPLIT_TRAIN][i].count;
    for (int i = 0; i < id->n_shards[FG_SPLIT_VAL]; i++) n_val += id->shards[FG_SPLIT_VAL][i].count;
    if (val == 1) {
        n_val = n_train / 10;
        n_train -= n_val;
    }
    const uint64_t need = (uint64_t)id->block_size + 1;
    if (n_train < need || n_val < need)
        fg_meta_fail(r, "the token splits (train %llu, val %llu ids) are shorter than block_size + 1 = %llu",
                     (unsigned long long)n_train, (unsigned long long)n_val, (unsigned long long)need);
}

/* ---- opening again the files a checkpoint recorded ---- */

/* `given` (a --data-bin argument) alone, else the paths recorded (for a shard set: its folder or
 * pattern, listed again) as written, then the absolute ones recorded beside them. Candidates count
 * only if every file hashes to its recorded XXH64 (and the validation split is taken the same
 * way), a shard set is the same shards in the same order, and the meta.pkl beside them gives the
 * checkpoint's tokenizer (or there is none in both). */
static fg_source *tokens_reopen(const fg_source_identity *id, const fg_tokenizer *tok, const char *given) {
    const int V = id->vocab_size, T = id->block_size;
    const fg_source_file *tr = &id->files[FG_SPLIT_TRAIN], *va = &id->files[FG_SPLIT_VAL];
    char why[2][1600];
    const char *what[2] = {"", ""};
    int n = 0;
    for (int i = 0; i < 2; i++) {
        fg_source *s = NULL;
        if (i == 0 && given) {
            s = fg_source_tokens(given, NULL, V, T);
        } else if (!given && id->sharded) { /* the folder or pattern, listed again */
            const int abs = i == 1;
            if (abs && (!id->path_abs[0] || !strcmp(id->path_abs, id->path))) break;
            what[i] = abs ? " (the absolute folder or pattern recorded in the checkpoint)"
                          : " (the folder or pattern recorded in the checkpoint)";
            s = fg_source_tokens(abs ? id->path_abs : id->path, NULL, V, T);
        } else if (!given) {
            const int abs = i == 1;
            if (abs && (!tr->path_abs[0] || (va->path[0] && !va->path_abs[0]) ||
                        (!strcmp(tr->path_abs, tr->path) && !strcmp(va->path_abs, va->path))))
                break;
            what[i] =
                abs ? " (the absolute paths recorded in the checkpoint)" : " (the paths recorded in the checkpoint)";
            s = fg_source_tokens(abs ? tr->path_abs : tr->path, abs ? va->path_abs : va->path, V, T);
        } else {
            break;
        }
        n++;
        if (!s) {
            snprintf(why[i], sizeof why[i], "%s%s", fg_last_error(), what[i]);
            continue;
        }
        char m[1400];
        tokens_mismatch(s, id, m, sizeof m);
        if (!m[0]) {
            const fg_tokenizer *a = tok, *b = fg_source_tokenizer(s);
            char *sa = a ? fg_tokenizer_serialize(a) : NULL, *sb = b ? fg_tokenizer_serialize(b) : NULL;
            int same = (!a && !b) || (sa && sb && !strcmp(sa, sb));
            free(sa);
            free(sb);
            if (same) return s;
            snprintf(m, sizeof m, "%s", a ? (b ? "their meta.pkl differs from the checkpoint's tokenizer"
                                               : "the checkpoint has a meta.pkl tokenizer and these files have none")
                                          : "these files have a meta.pkl, and the checkpoint was trained without one");
        }
        snprintf(why[i], sizeof why[i], "%s%s", m, what[i]);
        fg_source_free(s);
    }
    if (n == 1)
        fg_error(FG_ERR_IO, "%s", why[0]);
    else
        fg_error(FG_ERR_IO, "the token files recorded in the checkpoint cannot be used: tried %s; and %s", why[0],
                 why[1]);
    return NULL;
}

static int tokens_kept(const fg_source_identity *id, const char *flag, int64_t *v) {
    if (strcmp(flag, "--vocab-size")) return 0;
    *v = id->vocab_size;
    return 1;
}

/* Every path of d as the record read back from its description holds it. */
static fg_status tokens_check_read_back(const fg_source *d, const fg_source_identity *id) {
    for (int k = 0; k < FG_SPLIT_COUNT; k++)
        if (strcmp(id->files[k].path, d->files[k].path))
            return fg_error(FG_ERR_STATE, "checkpoint: the token file path '%s' would read back as '%s'",
                            d->files[k].path, id->files[k].path);
    if (!d->sharded) return FG_OK;
    if (strcmp(id->path, d->path))
        return fg_error(FG_ERR_STATE, "checkpoint: the data path '%s' would read back as '%s'", d->path, id->path);
    for (int k = 0; k < FG_SPLIT_COUNT; k++)
        for (int i = 0; i < d->n_shards[k]; i++)
            if (i >= id->n_shards[k] || strcmp(id->shards[k][i].path, d->shards[k][i].path))
                return fg_error(FG_ERR_STATE, "checkpoint: the token shard path '%s' would not read back",
                                d->shards[k][i].path);
    return FG_OK;
}

/* The format, the files or, for a shard set, the shard count and ids of each split and the total,
 * and the tokenizer. */
static void tokens_print(const fg_source *d, char *out, size_t n) {
    if (d->sharded) {
        print_shards(d, out, n);
        return;
    }
    const fg_source_file *ft = &d->files[FG_SPLIT_TRAIN], *fv = &d->files[FG_SPLIT_VAL];
    const char *fmt = ft->format == FG_TOKFILE_LLMC ? "llm.c" : "nanoGPT";
    const char *tok_desc = !d->tok                                   ? "no tokenizer"
                           : fg_tokenizer_kind(d->tok) == FG_TOK_BPE ? "the BPE tokenizer of --tokenizer"
                                                                     : "meta.pkl's character-level tokenizer";
    if (fv->path[0]) {
        if (snprintf(out, n, "%s token files: %s (%" PRIu64 " ids, train), %s (%" PRIu64 " ids, val), %s", fmt,
                     ft->path, ft->count, fv->path, fv->count, tok_desc) >= (int)n &&
            n >= 4)
            snprintf(out + n - 4, 4, "..."); /* two very long paths */
    } else {
        snprintf(out, n, "%s token file: %s (%" PRIu64 " ids: %zu train, the last %zu val), %s", fmt, ft->path,
                 ft->count, fg_token_data_split_tokens(d->tokens, FG_SPLIT_TRAIN),
                 fg_token_data_split_tokens(d->tokens, FG_SPLIT_VAL), tok_desc);
    }
}

static const char *const tokens_flags[] = {"--data-bin", "--vocab-size", NULL};
const fg_source_ops fg_tokens_source_ops = {.tokenizer = tokens_tokenizer,
                                            .vocab_size = tokens_vocab_size,
                                            .batch = tokens_batch,
                                            .free_data = tokens_free_data,
                                            .describe = tokens_describe,
                                            .kind = FG_SOURCE_TOKENS,
                                            .what = "token files",
                                            .data_flag = "--data-bin",
                                            .data_noun = "the files",
                                            .flags = tokens_flags,
                                            .read = tokens_read,
                                            .reopen = tokens_reopen,
                                            .kept = tokens_kept,
                                            .check_read_back = tokens_check_read_back,
                                            .print = tokens_print};
