/* text.c — a text file as a tokenized, split dataset with deterministic Philox batches.
 *
 * B = batch rows, T = time steps per row (the model's block size).
 */
#include "datasets/text.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tensor/philox.h"
#include "datasets/source.h"
#include "tensor/utf8.h"

struct fg_text_dataset {
    fg_tokenizer *tok;
    int32_t *tokens; /* the whole file, n tokens */
    size_t n;
    size_t split_len[FG_SPLIT_COUNT];
    size_t split_off[FG_SPLIT_COUNT];
};

const char *fg_split_name(fg_split s) {
    return s == FG_SPLIT_TRAIN ? "train" : s == FG_SPLIT_VAL ? "val" : "unknown split";
}

fg_text_options fg_text_default_options(int block_size) {
    fg_text_options o;
    o.kind = FG_TOK_CHAR;
    o.tokenizer = NULL;
    o.val_fraction = 0.1;
    o.block_size = block_size;
    return o;
}

/* ---- "is this text?" for char-level datasets ---- */

/* A control byte that does not belong in text: C0 controls except \t \n \v \f \r, and DEL. */
static int is_bad_control(unsigned char c) { return (c < 0x20 && !(c >= '\t' && c <= '\r')) || c == 0x7F; }

/* FG_OK when data[0..n) looks like text to a char-level model (rule in text.h). */
static fg_status check_text(const unsigned char *p, size_t n, const char *name) {
    const void *nul = memchr(p, 0, n);
    if (nul)
        return fg_error(FG_ERR_FORMAT,
                        "%s: looks binary: NUL byte at offset %zu (use the byte-level "
                        "tokenizer for binary data)",
                        name, (size_t)((const unsigned char *)nul - p));
    size_t ctrl = 0, first_ctrl = 0;
    for (size_t i = 0; i < n;) {
        size_t l = fg_utf8_seq(p + i, n - i);
        if (l == 0)
            return fg_error(FG_ERR_FORMAT,
                            "%s: not valid UTF-8 at offset %zu (byte 0x%02x); use the "
                            "byte-level tokenizer for non-UTF-8 data",
                            name, i, p[i]);
        if (l == 1 && is_bad_control(p[i]) && ctrl++ == 0) first_ctrl = i;
        i += l;
    }
    if (ctrl > n / 100)
        return fg_error(FG_ERR_FORMAT,
                        "%s: looks binary: %zu control bytes in %zu (more than 1%%), "
                        "the first at offset %zu (byte 0x%02x)",
                        name, ctrl, n, first_ctrl, p[first_ctrl]);
    return FG_OK;
}

/* ---- loading ---- */

void fg_text_free(fg_text_dataset *ds) {
    if (!ds) return;
    fg_tokenizer_free(ds->tok);
    free(ds->tokens);
    free(ds);
}

static fg_status check_options(const fg_text_options *opt) {
    if (!opt) return fg_error(FG_ERR_ARG, "text dataset: options are NULL");
    if (opt->block_size < 1)
        return fg_error(FG_ERR_ARG, "text dataset: block_size must be >= 1, got %d", opt->block_size);
    if (!(opt->val_fraction >= 0.0 && opt->val_fraction <= 0.5))
        return fg_error(FG_ERR_ARG, "text dataset: val_fraction must be in [0, 0.5], got %g", opt->val_fraction);
    if (!opt->tokenizer && opt->kind != FG_TOK_CHAR && opt->kind != FG_TOK_BYTE)
        return fg_error(FG_ERR_ARG, "text dataset: unknown tokenizer kind %d", (int)opt->kind);
    return FG_OK;
}

fg_text_dataset *fg_text_from_memory(const void *data, size_t n, const char *name, const fg_text_options *opt) {
    if (!name) name = "<memory>";
    if (check_options(opt) != FG_OK) return NULL;
    if (n == 0 || !data) {
        fg_error(FG_ERR_FORMAT, "%s: the file is empty", name);
        return NULL;
    }
    const unsigned char *p = data;
    fg_tok_kind kind = opt->tokenizer ? fg_tokenizer_kind(opt->tokenizer) : opt->kind;
    if (kind == FG_TOK_CHAR && check_text(p, n, name) != FG_OK) return NULL;

    fg_text_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) goto oom;
    ds->tok = opt->tokenizer        ? fg_tokenizer_clone(opt->tokenizer)
              : kind == FG_TOK_BYTE ? fg_tokenizer_byte()
                                    : fg_tokenizer_char_from_text(p, n);
    if (!ds->tok) {
        fg_text_free(ds);
        return NULL;
    }
    size_t n_tok, n_val;
    if (kind == FG_TOK_BPE) {
        /* nanoGPT's split: train = text[:int(n * (1 - val_fraction))] in characters, the two parts
         * encoded apart (a piece never spans the cut) */
        size_t chars = 0, cut = 0;
        for (size_t i = 0; i < n; i++) chars += (p[i] & 0xc0) != 0x80;
        const size_t cut_chars = (size_t)((double)chars * (1.0 - opt->val_fraction));
        for (size_t c = 0; cut < n; cut++)
            if ((p[cut] & 0xc0) != 0x80 && c++ == cut_chars) break;
        int32_t *ids[2] = {NULL, NULL};
        size_t nids[2] = {0, 0};
        fg_status st = fg_tokenizer_encode_text(ds->tok, p, cut, &ids[0], &nids[0]);
        if (st == FG_OK) st = fg_tokenizer_encode_text(ds->tok, p + cut, n - cut, &ids[1], &nids[1]);
        if (st == FG_OK && !(ds->tokens = malloc((nids[0] + nids[1] + 1) * sizeof *ds->tokens))) st = FG_ERR_OOM;
        if (st == FG_OK) {
            memcpy(ds->tokens, ids[0], nids[0] * sizeof *ds->tokens);
            memcpy(ds->tokens + nids[0], ids[1], nids[1] * sizeof *ds->tokens);
        }
        free(ids[0]);
        free(ids[1]);
        if (st == FG_ERR_OOM) goto oom;
        if (st != FG_OK) {
            fg_text_free(ds);
            return NULL;
        }
        n_tok = nids[0] + nids[1];
        n_val = nids[1];
    } else {
        /* one token per byte: val is the floor of the fraction of the tokens, train the rest */
        n_tok = n;
        n_val = (size_t)((double)n * opt->val_fraction);
        ds->tokens = malloc(n * sizeof *ds->tokens);
        if (!ds->tokens) goto oom;
        if (fg_tokenizer_encode(ds->tok, p, n, ds->tokens) != FG_OK) {
            /* Only possible with a given tokenizer: the text has a byte the checkpoint never saw. */
            char why[512]; /* copy: fg_error must not read the buffer it writes */
            snprintf(why, sizeof why, "%s", fg_last_error());
            fg_error(FG_ERR_FORMAT, "%s: %s (the tokenizer came from elsewhere, e.g. a checkpoint)", name, why);
            fg_text_free(ds);
            return NULL;
        }
    }
    size_t n_train = n_tok - n_val;
    size_t need = (size_t)opt->block_size + 1;
    if (n_train < need || (opt->val_fraction > 0 && n_val < need)) {
        if (opt->val_fraction > 0)
            fg_error(FG_ERR_FORMAT,
                     "%s: too short: %zu tokens (train %zu, val %zu) but block_size %d "
                     "needs at least %zu tokens in each split; use a longer text or a smaller block size",
                     name, n_tok, n_train, n_val, opt->block_size, need);
        else
            fg_error(FG_ERR_FORMAT,
                     "%s: too short: %zu tokens but block_size %d needs at least %zu; use "
                     "a longer text or a smaller block size",
                     name, n_tok, opt->block_size, need);
        fg_text_free(ds);
        return NULL;
    }
    ds->n = n_tok;
    ds->split_off[FG_SPLIT_TRAIN] = 0;
    ds->split_len[FG_SPLIT_TRAIN] = n_train;
    ds->split_off[FG_SPLIT_VAL] = n_train;
    ds->split_len[FG_SPLIT_VAL] = n_val;
    return ds;
oom:
    fg_text_free(ds);
    fg_error(FG_ERR_OOM, "%s: out of memory for %zu tokens", name, n);
    return NULL;
}

fg_text_dataset *fg_text_load(const char *path, const fg_text_options *opt) {
    if (!path) {
        fg_error(FG_ERR_ARG, "text dataset: path is NULL");
        return NULL;
    }
    if (check_options(opt) != FG_OK) return NULL;
    void *buf;
    size_t len;
    if (fg_read_file(path, FG_TEXT_MAX_BYTES, &buf, &len) != FG_OK) return NULL;
    fg_text_dataset *ds = fg_text_from_memory(buf, len, path, opt);
    free(buf);
    return ds;
}

/* ---- accessors ---- */

const fg_tokenizer *fg_text_tokenizer(const fg_text_dataset *ds) { return ds->tok; }
int fg_text_vocab_size(const fg_text_dataset *ds) { return fg_tokenizer_vocab_size(ds->tok); }
size_t fg_text_num_tokens(const fg_text_dataset *ds) { return ds->n; }

size_t fg_text_split_tokens(const fg_text_dataset *ds, fg_split s) {
    return (s >= 0 && s < FG_SPLIT_COUNT) ? ds->split_len[s] : 0;
}

const int32_t *fg_text_split_data(const fg_text_dataset *ds, fg_split s) {
    if (s < 0 || s >= FG_SPLIT_COUNT || ds->split_len[s] == 0) return NULL;
    return ds->tokens + ds->split_off[s];
}

/* ---- batches ---- */

/* A uniform integer in [0, range) for row `row` (= step * B + r), drawn as described in text.h:
 * 64-bit draws from Philox, rejecting the top 2^64 mod range values so every result is equally
 * likely. range >= 1. */
uint64_t fg_text_window_offset(uint64_t seed, uint64_t stream, uint64_t row, uint64_t range) {
    /* 2^64 mod range values would make the low results likelier; accept x <= max_ok only. */
    uint64_t max_ok = UINT64_MAX - (0 - range) % range;
    for (uint64_t k = 0;; k++) {
        uint32_t w[4];
        fg_philox_block(seed, stream, row + (k << 48), w);
        uint64_t x0 = ((uint64_t)w[0] << 32) | w[1], x1 = ((uint64_t)w[2] << 32) | w[3];
        if (x0 <= max_ok) return x0 % range;
        if (x1 <= max_ok) return x1 % range;
    }
}

fg_status fg_text_batch(const fg_text_dataset *ds, fg_split s, int B, int T, uint64_t seed, uint64_t step, int32_t *x,
                        int32_t *y) {
    if (!ds || !x || !y) return fg_error(FG_ERR_ARG, "text batch: NULL dataset or output buffer");
    if (s < 0 || s >= FG_SPLIT_COUNT) return fg_error(FG_ERR_ARG, "text batch: unknown split %d", (int)s);
    if (B < 1 || T < 1) return fg_error(FG_ERR_ARG, "text batch: need B >= 1 and T >= 1, got B=%d T=%d", B, T);
    size_t len = ds->split_len[s];
    if (len < (size_t)T + 1)
        return fg_error(FG_ERR_ARG, "text batch: the %s split has %zu tokens, fewer than T + 1 = %d%s",
                        fg_split_name(s), len, T + 1, len == 0 ? " (it is empty: val_fraction was 0)" : "");
    /* x is (B, T), y is (B, T): row r is the window at offset o, y shifted one to the right. */
    const int32_t *tok = ds->tokens + ds->split_off[s];
    uint64_t range = (uint64_t)(len - (size_t)T); /* offsets 0 .. len-T-1 */
    for (int r = 0; r < B; r++) {
        uint64_t o = fg_text_window_offset(seed, FG_TEXT_STREAM(s), step * (uint64_t)B + (uint64_t)r, range);
        memcpy(x + (size_t)r * T, tok + o, (size_t)T * sizeof *x);
        memcpy(y + (size_t)r * T, tok + o + 1, (size_t)T * sizeof *y);
    }
    return FG_OK;
}

/* ---- a text file as a training source (datasets/source.h) ---- */
static const fg_tokenizer *text_tokenizer(const fg_source *d) { return fg_text_tokenizer(d->text); }
static int text_vocab_size(const fg_source *d) { return fg_text_vocab_size(d->text); }
static fg_status text_batch(const fg_source *d, fg_split s, int B, int T, uint64_t seed, uint64_t index, int32_t *x,
                            int32_t *y) {
    return fg_text_batch(d->text, s, B, T, seed, index, x, y);
}
static void text_free_data(fg_source *d) { fg_text_free(d->text); }
/* The file as given and absolute, its contents' hash and the validation share. */
static fg_status text_describe(const fg_source *d, const fg_meta_writer *w) {
    fg_status st = fg_meta_put_path(w, "text.path", d->path);
    if (st == FG_OK) st = fg_meta_put_path(w, "text.path_abs", d->path_abs);
    if (st == FG_OK) st = fg_meta_put_hex(w, "text.xxh64", d->file_hash);
    if (st == FG_OK) st = fg_meta_put_f64(w, "text.val_fraction", d->val_fraction);
    return st;
}

/* Text files (or FIFOs/pipes) up to FG_TEXT_MAX_BYTES: the whole file is tokenized in memory. */
fg_source *fg_source_text(const char *path, const fg_text_options *opt) {
    void *buf = NULL;
    size_t n = 0;
    if (strlen(path) >= sizeof((fg_source *)0)->path) {
        fg_error(FG_ERR_ARG, "data: the path '%.60s...' is too long (%zu bytes; at most %zu)", path, strlen(path),
                 sizeof((fg_source *)0)->path - 1);
        return NULL;
    }
    if (fg_read_file(path, FG_TEXT_MAX_BYTES, &buf, &n) != FG_OK) return NULL;
    fg_source *d = calloc(1, sizeof *d);
    if (!d) {
        free(buf);
        fg_error(FG_ERR_OOM, "data: out of memory");
        return NULL;
    }
    d->ops = &fg_text_source_ops;
    d->kind = FG_SOURCE_TEXT;
    d->file_hash = fg_xxh64(buf, n, 0);
    d->val_fraction = opt->val_fraction;
    snprintf(d->path, sizeof d->path, "%s", path);
    char abs[PATH_MAX];
    if (realpath(path, abs) && strlen(abs) < sizeof d->path_abs) snprintf(d->path_abs, sizeof d->path_abs, "%s", abs);
    d->text = fg_text_from_memory(buf, n, path, opt);
    free(buf);
    if (!d->text) {
        free(d);
        return NULL;
    }
    return d;
}

/* The text file at path again, when its contents still hash to `hash` (XXH64 of its bytes), read as
 * fg_source_text reads it; else NULL and why not into why[0 .. n): one line naming path followed by
 * `what` (how the path was found). A FIFO or device is refused unread. */
static fg_source *text_reopen_one(const char *path, const char *what, uint64_t hash, const fg_text_options *opt,
                                  char *why, size_t n) {
    /* the contents first (a changed file may not even tokenize), then the dataset */
    uint64_t h = 0;
    int fd = -1;
    int64_t size;
    FILE *fp = NULL;
    /* a regular file, opened without blocking (a FIFO or device there is refused, unread) */
    if (fg_open_read(path, 0, &fd, &size) != FG_OK || !(fp = fdopen(fd, "rb"))) {
        snprintf(why, n, "'%s'%s: %.1000s", path, what, fd < 0 ? fg_last_error() : strerror(errno));
        fg_clear_error();
        if (fd >= 0) close(fd);
        return NULL;
    }
    fg_xxh64_state hs;
    fg_xxh64_init(&hs, 0);
    char chunk[1 << 14];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, fp)) > 0) fg_xxh64_update(&hs, chunk, k);
    int err = ferror(fp);
    fclose(fp);
    h = fg_xxh64_digest(&hs);
    if (err) {
        snprintf(why, n, "'%s'%s: read error", path, what);
        return NULL;
    }
    if (h != hash) {
        snprintf(why, n,
                 "'%s'%s is not the file the checkpoint trained on (its contents changed: "
                 "xxh64 %016llx, the checkpoint records %016llx)",
                 path, what, (unsigned long long)h, (unsigned long long)hash);
        return NULL;
    }
    fg_source *s = fg_source_text(path, opt);
    if (s && s->file_hash == hash) return s;
    snprintf(why, n, "'%s'%s: %s", path, what, s ? "its contents changed while it was read" : fg_last_error());
    fg_source_free(s);
    return NULL;
}

/* The file as given, else the path recorded (from the current folder when relative), then the
 * absolute one recorded beside it; a candidate counts only if its contents hash to the recorded
 * XXH64. Tokenized with the checkpoint's tokenizer and split as it was. */
static fg_source *text_reopen(const fg_source_identity *id, const fg_tokenizer *tok, const char *given) {
    fg_text_options to = fg_text_default_options(id->block_size);
    to.tokenizer = tok;
    to.val_fraction = id->val_fraction;
    const char *cand[2];
    const char *what[2];
    int n = 0;
    if (given) {
        cand[n] = given;
        what[n++] = "";
    } else {
        cand[n] = id->path;
        what[n++] = id->path[0] == '/' ? " (the path recorded in the checkpoint)"
                                       : " (the path recorded in the checkpoint, from the current folder)";
        if (id->path_abs[0] && strcmp(id->path_abs, id->path)) {
            cand[n] = id->path_abs;
            what[n++] = " (the absolute path recorded in the checkpoint)";
        }
    }
    char why[2][1400];
    for (int i = 0; i < n; i++) {
        fg_source *s = text_reopen_one(cand[i], what[i], id->file_hash, &to, why[i], sizeof why[i]);
        if (s) return s;
    }
    if (n == 1)
        fg_error(FG_ERR_IO, "%s", why[0]);
    else
        fg_error(FG_ERR_IO, "the text file recorded in the checkpoint cannot be used: tried %s; and %s", why[0],
                 why[1]);
    return NULL;
}

/* What text_describe wrote, back. */
static void text_read(const fg_meta_reader *r, const char *tokstr, fg_source_identity *id, fg_tokenizer **tok) {
    fg_meta_read_tokenizer(r, tokstr, id->vocab_size, tok);
    if (r->status(r->ctx) != FG_OK) return;
    r->path(r->ctx, "text.path", id->path, sizeof id->path, 0);
    r->path(r->ctx, "text.path_abs", id->path_abs, sizeof id->path_abs, 1);
    id->file_hash = r->hex(r->ctx, "text.xxh64");
    id->val_fraction = r->f64(r->ctx, "text.val_fraction", 0, 0.5, 0);
}

static fg_status text_check_read_back(const fg_source *d, const fg_source_identity *id) {
    if (strcmp(id->path, d->path))
        return fg_error(FG_ERR_STATE, "checkpoint: the data path '%s' would read back as '%s'", d->path, id->path);
    return FG_OK;
}

static void text_print(const fg_source *d, char *out, size_t n) {
    const fg_tok_kind k = fg_tokenizer_kind(fg_text_tokenizer(d->text));
    snprintf(out, n, "%s: %zu tokens (%zu train, %zu val), %s tokenizer", d->path, fg_text_num_tokens(d->text),
             fg_text_split_tokens(d->text, FG_SPLIT_TRAIN), fg_text_split_tokens(d->text, FG_SPLIT_VAL),
             k == FG_TOK_BYTE ? "byte-level" : k == FG_TOK_BPE ? "BPE" : "character-level");
}

static const char *const text_flags[] = {"--data", NULL};
const fg_source_ops fg_text_source_ops = {.tokenizer = text_tokenizer,
                                          .vocab_size = text_vocab_size,
                                          .batch = text_batch,
                                          .free_data = text_free_data,
                                          .describe = text_describe,
                                          .kind = FG_SOURCE_TEXT,
                                          .what = "a text file",
                                          .data_flag = "--data",
                                          .data_noun = "the file",
                                          .flags = text_flags,
                                          .read = text_read,
                                          .reopen = text_reopen,
                                          .check_read_back = text_check_read_back,
                                          .print = text_print};
