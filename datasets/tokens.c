/* tokens.c — pre-tokenized datasets (nanoGPT's and llm.c's .bin files) and llm.c's tokenizer file.
 * Formats and contracts: tokens.h. */
#include "datasets/tokens.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/fileio.h"

#define LLMC_HEADER_BYTES (256 * 4)

struct fg_token_file {
    char path[4096];
    fg_token_format format;
    void *map; /* the whole file */
    size_t map_bytes;
    const uint16_t *tok; /* into map */
    size_t count;
    uint64_t hash;
};

static int32_t rd_i32(const unsigned char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

fg_token_file *fg_token_file_open(const char *path, int vocab_size) {
    if (!path || !*path) {
        fg_error(FG_ERR_ARG, "token file: empty path");
        return NULL;
    }
    if (vocab_size < 1 || vocab_size > FG_TOKEN_MAX_VOCAB) {
        fg_error(FG_ERR_ARG, "token file '%s': vocabulary %d is outside 1..%d (uint16 ids)", path, vocab_size,
                 FG_TOKEN_MAX_VOCAB);
        return NULL;
    }
    int fd;
    int64_t size;
    if (fg_open_read(path, 0, &fd, &size) != FG_OK) return NULL; /* regular files only: it is mapped */
    fg_token_file *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        fg_error(FG_ERR_OOM, "token file '%s': out of memory", path);
        return NULL;
    }
    snprintf(f->path, sizeof f->path, "%s", path);
    if (size == 0) {
        close(fd);
        fg_error(FG_ERR_FORMAT, "token file '%s' is empty", path);
        goto fail;
    }
    f->map_bytes = (size_t)size;
    f->map = mmap(NULL, f->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        fg_error(FG_ERR_IO, "token file '%s': cannot map it: %s", path, strerror(e));
        goto fail;
    }
    fg_mapped_register(f->map, f->map_bytes, f->path); /* a SIGBUS there names the file (fileio.h) */
    madvise(f->map, f->map_bytes, MADV_SEQUENTIAL);
    const unsigned char *b = f->map;
    size_t off;
    if (f->map_bytes >= 4 && rd_i32(b) == FG_LLMC_DATA_MAGIC) {
        f->format = FG_TOKFILE_LLMC;
        if (f->map_bytes < LLMC_HEADER_BYTES) {
            fg_error(FG_ERR_FORMAT, "token file '%s': llm.c header is truncated (%zu of %d bytes)", path, f->map_bytes,
                     LLMC_HEADER_BYTES);
            goto fail;
        }
        int32_t version = rd_i32(b + 4), count = rd_i32(b + 8);
        if (version != 1) {
            fg_error(FG_ERR_FORMAT, "token file '%s': llm.c data version %d (only version 1, uint16 tokens, is known)",
                     path, (int)version);
            goto fail;
        }
        size_t have = (f->map_bytes - LLMC_HEADER_BYTES) / 2;
        if (count < 0 || (size_t)count != have || (f->map_bytes - LLMC_HEADER_BYTES) % 2) {
            fg_error(FG_ERR_FORMAT,
                     "token file '%s': the llm.c header says %d tokens but the file holds %zu bytes of "
                     "tokens (%s)",
                     path, (int)count, f->map_bytes - LLMC_HEADER_BYTES,
                     (size_t)count > have ? "truncated" : "extra bytes");
            goto fail;
        }
        off = LLMC_HEADER_BYTES;
    } else {
        /* Not llm.c's data magic: raw nanoGPT ids, unless the file is another llm.c file, or has an
         * llm.c data header (its token count at [2] matches the size) under another magic. */
        const int32_t magic = f->map_bytes >= 4 ? rd_i32(b) : 0;
        const char *other = magic == 20240326                  ? "model checkpoint"
                            : magic == 20240327                ? "debug state"
                            : magic == FG_LLMC_TOKENIZER_MAGIC ? "tokenizer"
                                                               : NULL;
        if (other) {
            fg_error(FG_ERR_FORMAT, "token file '%s' is an llm.c %s file (magic %d), not token data (magic %d)", path,
                     other, (int)magic, FG_LLMC_DATA_MAGIC);
            goto fail;
        }
        if (f->map_bytes > LLMC_HEADER_BYTES && (f->map_bytes - LLMC_HEADER_BYTES) % 2 == 0 && rd_i32(b + 8) > 0 &&
            (size_t)rd_i32(b + 8) == (f->map_bytes - LLMC_HEADER_BYTES) / 2) {
            fg_error(FG_ERR_FORMAT,
                     "token file '%s' has an llm.c data header with the wrong magic %d (llm.c's is %d): a damaged or "
                     "foreign file",
                     path, (int)magic, FG_LLMC_DATA_MAGIC);
            goto fail;
        }
        f->format = FG_TOKFILE_NANOGPT;
        if (f->map_bytes % 2) {
            fg_error(FG_ERR_FORMAT,
                     "token file '%s': %zu bytes is not a whole number of uint16 tokens (nanoGPT's "
                     "format is raw little-endian uint16; llm.c's starts with magic %d)",
                     path, f->map_bytes, FG_LLMC_DATA_MAGIC);
            goto fail;
        }
        off = 0;
    }
    f->tok = (const uint16_t *)(b + off); /* both formats keep the ids 2-byte aligned */
    f->count = (f->map_bytes - off) / 2;
    if (f->count == 0) {
        fg_error(FG_ERR_FORMAT, "token file '%s' holds no tokens", path);
        goto fail;
    }
    /* One pass in chunks: the ids against the vocabulary and the hash of every byte; each chunk's
     * pages are dropped after it (they are the file's, read again on demand), so opening a file
     * of many GiB does not fill the process's memory with it. */
    fg_xxh64_state hs;
    fg_xxh64_init(&hs, 0);
    const size_t chunk = (size_t)8 << 20; /* a multiple of the page size, and even; what stays resident */
    for (size_t pos = 0; pos < f->map_bytes; pos += chunk) {
        const size_t len = f->map_bytes - pos < chunk ? f->map_bytes - pos : chunk;
        fg_xxh64_update(&hs, b + pos, len);
        const size_t end = (pos + len - off) / 2; /* ids before the chunk's end (off <= chunk) */
        for (size_t i = pos > off ? (pos - off) / 2 : 0; i < end; i++)
            if (f->tok[i] >= vocab_size) {
                fg_error(FG_ERR_FORMAT,
                         "token file '%s': token %zu is id %u, outside the vocabulary of %d (--vocab-size)", path, i,
                         (unsigned)f->tok[i], vocab_size);
                goto fail;
            }
        madvise((char *)f->map + pos, len, MADV_DONTNEED);
    }
    f->hash = fg_xxh64_digest(&hs);
    madvise(f->map, f->map_bytes, MADV_RANDOM); /* batches read windows anywhere */
    return f;
fail:
    fg_token_file_close(f);
    return NULL;
}

void fg_token_file_close(fg_token_file *f) {
    if (!f) return;
    if (f->map) {
        fg_mapped_unregister(f->map);
        munmap(f->map, f->map_bytes);
    }
    free(f);
}

fg_token_format fg_token_file_format(const fg_token_file *f) { return f->format; }
size_t fg_token_file_count(const fg_token_file *f) { return f->count; }
uint64_t fg_token_file_hash(const fg_token_file *f) { return f->hash; }
const char *fg_token_file_path(const fg_token_file *f) { return f->path; }

/* ---- a dataset: train and validation ---- */

struct fg_token_data {
    fg_token_file *file[FG_SPLIT_COUNT]; /* val NULL: the train file's tail */
    const uint16_t *tok[FG_SPLIT_COUNT];
    size_t len[FG_SPLIT_COUNT];
    int vocab_size;
};

static int is_regular(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Does file name `name` hold split word `word` ("train", "val") as a word of its own: at the start or
 * after a character that is not a letter or digit, and followed by one that is not a letter
 * ("fineweb_val_000000.bin", "val.bin", "shakespeare-train.bin"), so that "eval_train.bin" names
 * only a train split and "interval.bin" none. Returns where, the last such place, or NULL. */
static const char *split_word(const char *name, const char *word) {
    const size_t w = strlen(word);
    const char *last = NULL;
    for (const char *p = strstr(name, word); p; p = strstr(p + 1, word)) {
        const int before_ok = p == name || !isalnum((unsigned char)p[-1]);
        const int after_ok = !isalpha((unsigned char)p[w]);
        if (before_ok && after_ok) last = p;
    }
    return last;
}

/* In folder `dir`, the one file whose name holds `word` (split_word) and ends in ".bin": 0 and its path;
 * -1 when there is none, -2 (message set) when there are several. */
static int find_one(const char *dir, const char *word, char *out, size_t n) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int found = 0;
    struct dirent *e;
    char first[512] = "";
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 4, ".bin") || !split_word(e->d_name, word)) continue;
        if (found++ == 0) {
            snprintf(first, sizeof first, "%s", e->d_name);
            snprintf(out, n, "%s/%s", dir, e->d_name);
        } else {
            fg_error(FG_ERR_ARG, "--data-bin '%s': several *%s*.bin files (%s, %s, ...): name the file", dir, word,
                     first, e->d_name);
        }
    }
    closedir(d);
    return found == 1 ? 0 : found == 0 ? -1 : -2;
}

fg_token_data *fg_token_data_open(const char *path, int vocab_size, int block_size) {
    if (!path || !*path) {
        fg_error(FG_ERR_ARG, "--data-bin: empty path");
        return NULL;
    }
    if (block_size < 1) {
        fg_error(FG_ERR_ARG, "--data-bin '%s': block size %d must be >= 1", path, block_size);
        return NULL;
    }
    char tr[4096] = "", va[4096] = "";
    struct stat sb;
    if (stat(path, &sb) != 0) {
        fg_error(FG_ERR_IO, "--data-bin: cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (S_ISDIR(sb.st_mode)) {
        snprintf(tr, sizeof tr, "%s/train.bin", path);
        snprintf(va, sizeof va, "%s/val.bin", path);
        if (!is_regular(tr) || !is_regular(va)) {
            int a = find_one(path, "train", tr, sizeof tr), b = a == -2 ? -2 : find_one(path, "val", va, sizeof va);
            if (a == -2 || b == -2) return NULL;
            if (a || b) {
                fg_error(FG_ERR_IO,
                         "--data-bin '%s': the folder holds neither train.bin and val.bin (nanoGPT) nor one "
                         "*train*.bin and one *val*.bin (llm.c)",
                         path);
                return NULL;
            }
        }
    } else {
        snprintf(tr, sizeof tr, "%s", path);
        /* the validation file: the last "train" in the file name (not the folder's) becomes "val" */
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        const char *w = split_word(base, "train");
        if (w) {
            snprintf(va, sizeof va, "%.*sval%s", (int)(w - path), path, w + 5);
            if (!is_regular(va)) va[0] = '\0';
        }
    }
    return fg_token_data_open_files(path, tr, va[0] ? va : NULL, vocab_size, block_size);
}

fg_token_data *fg_token_data_open_files(const char *name, const char *train, const char *val, int vocab_size,
                                        int block_size) {
    if (!name) name = train;
    if (block_size < 1) {
        fg_error(FG_ERR_ARG, "--data-bin '%s': block size %d must be >= 1", name, block_size);
        return NULL;
    }
    fg_token_data *d = calloc(1, sizeof *d);
    if (!d) {
        fg_error(FG_ERR_OOM, "--data-bin: out of memory");
        return NULL;
    }
    d->vocab_size = vocab_size;
    d->file[FG_SPLIT_TRAIN] = fg_token_file_open(train, vocab_size);
    if (!d->file[FG_SPLIT_TRAIN]) goto fail;
    const fg_token_file *t = d->file[FG_SPLIT_TRAIN];
    if (val) {
        d->file[FG_SPLIT_VAL] = fg_token_file_open(val, vocab_size);
        if (!d->file[FG_SPLIT_VAL]) goto fail;
        d->tok[FG_SPLIT_TRAIN] = t->tok;
        d->len[FG_SPLIT_TRAIN] = t->count;
        d->tok[FG_SPLIT_VAL] = d->file[FG_SPLIT_VAL]->tok;
        d->len[FG_SPLIT_VAL] = d->file[FG_SPLIT_VAL]->count;
    } else { /* one file: the last tenth is the validation split, as for text */
        size_t nval = t->count / 10;
        d->tok[FG_SPLIT_TRAIN] = t->tok;
        d->len[FG_SPLIT_TRAIN] = t->count - nval;
        d->tok[FG_SPLIT_VAL] = t->tok + (t->count - nval);
        d->len[FG_SPLIT_VAL] = nval;
    }
    for (int s = 0; s < FG_SPLIT_COUNT; s++)
        if (d->len[s] < (size_t)block_size + 1) {
            fg_error(FG_ERR_FORMAT, "--data-bin '%s': the %s split has %zu tokens, fewer than block size + 1 = %d",
                     name, fg_split_name((fg_split)s), d->len[s], block_size + 1);
            goto fail;
        }
    return d;
fail:
    fg_token_data_free(d);
    return NULL;
}

void fg_token_data_free(fg_token_data *d) {
    if (!d) return;
    for (int s = 0; s < FG_SPLIT_COUNT; s++) fg_token_file_close(d->file[s]);
    free(d);
}

int fg_token_data_vocab_size(const fg_token_data *d) { return d->vocab_size; }
size_t fg_token_data_split_tokens(const fg_token_data *d, fg_split s) { return d->len[s]; }
const fg_token_file *fg_token_data_file(const fg_token_data *d, fg_split s) { return d->file[s]; }

/* After a window is copied out: its pages leave the process (the file's page cache keeps them),
 * and so do the neighbours the kernel maps with a fault ("fault-around", 64 KiB aligned), so that
 * training on a file of many GiB keeps a flat resident size instead of mapping it all by and by. */
static void drop_window(const fg_token_file *f, const uint16_t *w, size_t n) {
    const uintptr_t around = (uintptr_t)64 << 10, base = (uintptr_t)f->map, end = base + f->map_bytes;
    uintptr_t lo = ((uintptr_t)w & ~(around - 1)), hi = ((uintptr_t)(w + n) + around - 1) & ~(around - 1);
    if (lo < base) lo = base;
    if (hi > end) hi = (end + 4095) & ~(uintptr_t)4095;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

fg_status fg_token_data_batch(const fg_token_data *d, fg_split s, int B, int T, uint64_t seed, uint64_t step,
                              int32_t *x, int32_t *y) {
    if (!d || !x || !y) return fg_error(FG_ERR_ARG, "token batch: NULL dataset or output buffer");
    if (s < 0 || s >= FG_SPLIT_COUNT) return fg_error(FG_ERR_ARG, "token batch: unknown split %d", (int)s);
    if (B < 1 || T < 1) return fg_error(FG_ERR_ARG, "token batch: need B >= 1 and T >= 1, got B=%d T=%d", B, T);
    if (d->len[s] < (size_t)T + 1)
        return fg_error(FG_ERR_ARG, "token batch: the %s split has %zu tokens, fewer than T + 1 = %d", fg_split_name(s),
                        d->len[s], T + 1);
    const uint16_t *tok = d->tok[s];
    const uint64_t range = (uint64_t)(d->len[s] - (size_t)T); /* offsets 0 .. len-T-1 */
    for (int r = 0; r < B; r++) {
        uint64_t o = fg_text_window_offset(seed, FG_TEXT_STREAM(s), step * (uint64_t)B + (uint64_t)r, range);
        for (int t = 0; t < T; t++) {
            x[(size_t)r * T + t] = tok[o + t];
            y[(size_t)r * T + t] = tok[o + t + 1];
        }
        drop_window(d->file[s] ? d->file[s] : d->file[FG_SPLIT_TRAIN], tok + o, (size_t)T + 1);
    }
    return FG_OK;
}

/* ---- llm.c's tokenizer file ---- */

struct fg_token_vocab {
    int n;
    int32_t eot; /* version 2: the end-of-text id; -1 when the file does not say */
    size_t *off; /* token i's bytes are bytes[off[i] .. off[i+1]) */
    unsigned char *bytes;
};

fg_token_vocab *fg_token_vocab_load(const char *path) {
    void *buf = NULL;
    size_t n = 0;
    if (fg_read_file(path, (size_t)64 << 20, &buf, &n) != FG_OK) return NULL;
    const unsigned char *b = buf;
    fg_token_vocab *v = NULL;
    if (n < 256 * 4 || rd_i32(b) != FG_LLMC_TOKENIZER_MAGIC) {
        fg_error(FG_ERR_FORMAT, "tokenizer '%s' is not an llm.c tokenizer file (%s)", path,
                 n < 256 * 4 ? "shorter than its 1024-byte header" : "wrong magic; llm.c's is 20240328");
        goto out;
    }
    int32_t version = rd_i32(b + 4), size = rd_i32(b + 8);
    if (version != 1 && version != 2) {
        fg_error(FG_ERR_FORMAT, "tokenizer '%s': version %d (1 and 2 are known)", path, (int)version);
        goto out;
    }
    if (size < 1 || size > FG_TOKEN_MAX_VOCAB) {
        fg_error(FG_ERR_FORMAT, "tokenizer '%s': vocabulary size %d is outside 1..%d", path, (int)size,
                 FG_TOKEN_MAX_VOCAB);
        goto out;
    }
    v = calloc(1, sizeof *v);
    if (v) {
        v->off = malloc(((size_t)size + 1) * sizeof *v->off);
        v->bytes = malloc(n);
    }
    if (!v || !v->off || !v->bytes) {
        fg_error(FG_ERR_OOM, "tokenizer '%s': out of memory", path);
        fg_token_vocab_free(v);
        v = NULL;
        goto out;
    }
    v->n = size;
    v->eot = version == 2 ? rd_i32(b + 12) : -1;
    if (v->eot < -1 || v->eot >= size) {
        fg_error(FG_ERR_FORMAT, "tokenizer '%s': end-of-text id %d is outside its vocabulary of %d", path, (int)v->eot,
                 (int)size);
        goto bad;
    }
    size_t p = 256 * 4, used = 0;
    for (int i = 0; i < size; i++) {
        if (p >= n) {
            fg_error(FG_ERR_FORMAT, "tokenizer '%s' is truncated: token %d of %d has no length byte", path, i,
                     (int)size);
            goto bad;
        }
        size_t len = b[p++];
        if (len == 0 || p + len > n) {
            fg_error(FG_ERR_FORMAT, "tokenizer '%s': token %d %s", path, i,
                     len == 0 ? "has length 0" : "runs past the end of the file");
            goto bad;
        }
        v->off[i] = used;
        memcpy(v->bytes + used, b + p, len);
        used += len;
        p += len;
    }
    v->off[size] = used;
    goto out;
bad:
    fg_token_vocab_free(v);
    v = NULL;
out:
    free(buf);
    return v;
}

void fg_token_vocab_free(fg_token_vocab *v) {
    if (!v) return;
    free(v->off);
    free(v->bytes);
    free(v);
}

int fg_token_vocab_size(const fg_token_vocab *v) { return v->n; }
int32_t fg_token_vocab_eot(const fg_token_vocab *v) { return v->eot; }

const unsigned char *fg_token_vocab_bytes(const fg_token_vocab *v, int32_t id, size_t *n) {
    if (!v || id < 0 || id >= v->n) return NULL;
    *n = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}
