/* tokens.c — pre-tokenized datasets (nanoGPT's and llm.c's .bin files) and llm.c's tokenizer file.
 * Formats and contracts: tokens.h. */
#include "datasets/tokens.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
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

/* Maps `path` and checks everything but the ids: the format, the header, the size. The ids and the
 * hash are token_file_scan's. NULL + fg_error. */
static fg_token_file *token_file_map(const char *path, int vocab_size) {
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
    return f;
fail:
    fg_token_file_close(f);
    return NULL;
}

/* The ids of a mapped file against the vocabulary, and its hash. FG_OK, or the error naming the file
 * and the first bad id. */
static fg_status token_file_scan(fg_token_file *f, int vocab_size) {
    const unsigned char *b = f->map;
    const size_t off = (size_t)((const unsigned char *)f->tok - b);
    const char *path = f->path;
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
                return fg_error(FG_ERR_FORMAT,
                                "token file '%s': token %zu is id %u, outside the vocabulary of %d (--vocab-size)",
                                path, i, (unsigned)f->tok[i], vocab_size);
            }
        madvise((char *)f->map + pos, len, MADV_DONTNEED);
    }
    f->hash = fg_xxh64_digest(&hs);
    madvise(f->map, f->map_bytes, MADV_RANDOM); /* batches read windows anywhere */
    return FG_OK;
}

fg_token_file *fg_token_file_open(const char *path, int vocab_size) {
    fg_token_file *f = token_file_map(path, vocab_size);
    if (f && token_file_scan(f, vocab_size) != FG_OK) {
        fg_token_file_close(f);
        return NULL;
    }
    return f;
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

/* ---- a dataset: train and validation, each a sequence of files ---- */

/* A split reads ids [lo, lo + len) of a sequence: its files one after another. A shard set is the
 * logical concatenation of its shards (each mapped on its own), so a window may start in one shard
 * and end in the next. */
typedef struct {
    int n;                /* files */
    fg_token_file **file; /* into fg_token_data.files */
    size_t *start;        /* start[i]: where file i's ids begin in the sequence; start[n]: its length */
    size_t lo, len;
} tok_seq;

struct fg_token_data {
    int nfiles;
    fg_token_file **files;   /* owned: the train files, then the val files */
    int own[FG_SPLIT_COUNT]; /* split s has files of its own (val 0: the train sequence's last tenth) */
    tok_seq seq[FG_SPLIT_COUNT];
    int sharded;
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

/* ---- lists of paths, in llm.c's shard order ----
 * llm.c's dataloader takes glob(3)'s sorted result, which under its "C" locale is byte order:
 * strcmp. Folders and patterns are listed here and sorted with strcmp, whatever the locale. */

typedef struct {
    char **v;
    int n, cap;
} path_list;

static fg_status list_add(path_list *l, const char *a, const char *b) {
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 16;
        char **nv = realloc(l->v, (size_t)nc * sizeof *nv);
        if (!nv) return fg_error(FG_ERR_OOM, "--data-bin: out of memory");
        l->v = nv;
        l->cap = nc;
    }
    size_t n = strlen(a) + (b ? strlen(b) + 1 : 0) + 1;
    char *p = malloc(n);
    if (!p) return fg_error(FG_ERR_OOM, "--data-bin: out of memory");
    snprintf(p, n, b ? "%s/%s" : "%s", a, b ? b : "");
    l->v[l->n++] = p;
    return FG_OK;
}

static void list_free(path_list *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int cmp_path(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static void list_sort(path_list *l) {
    if (l->n > 1) qsort(l->v, (size_t)l->n, sizeof *l->v, cmp_path);
}

/* Folder `dir`'s files whose names end in ".bin" and hold `word` (split_word), sorted; FG_OK even when
 * there are none. */
static fg_status list_split(const char *dir, const char *word, path_list *out) {
    DIR *d = opendir(dir);
    if (!d) return fg_error(FG_ERR_IO, "--data-bin: cannot read the folder '%s': %s", dir, strerror(errno));
    struct dirent *e;
    fg_status st = FG_OK;
    while (st == FG_OK && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 4, ".bin") || !split_word(e->d_name, word)) continue;
        st = list_add(out, dir, e->d_name);
    }
    closedir(d);
    list_sort(out);
    return st;
}

/* The files pattern matches, sorted; FG_OK with none when nothing matches. */
static fg_status list_glob(const char *pattern, path_list *out) {
    glob_t g;
    memset(&g, 0, sizeof g);
    int rc = glob(pattern, GLOB_NOSORT, NULL, &g);
    fg_status st = FG_OK;
    if (rc == GLOB_NOSPACE)
        st = fg_error(FG_ERR_OOM, "--data-bin '%s': out of memory expanding the pattern", pattern);
    else if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc && st == FG_OK; i++) st = list_add(out, g.gl_pathv[i], NULL);
    globfree(&g);
    list_sort(out);
    return st;
}

/* A name on both lists would be trained and validated on at once. */
static fg_status lists_disjoint(const char *name, const path_list *a, const path_list *b) {
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < b->n; j++)
            if (!strcmp(a->v[i], b->v[j]))
                return fg_error(FG_ERR_ARG,
                                "--data-bin '%s': '%s' is both a train shard and a val shard by its name (it holds "
                                "the words train and val)",
                                name, a->v[i]);
    return FG_OK;
}

static fg_token_data *open_lists(const char *name, const char *const *train, int ntrain, const char *const *val,
                                 int nval, int sharded, int vocab_size, int block_size);

/* --data-bin PATTERN: the train shards are its matches; the val shards the matches of the pattern with
 * its file name's last word "train" made "val", if that matches any; else the train sequence's last
 * tenth is the validation split. */
static fg_token_data *open_glob(const char *pattern, int vocab_size, int block_size) {
    path_list tr = {0}, va = {0};
    fg_token_data *d = NULL;
    if (list_glob(pattern, &tr) != FG_OK) goto out;
    if (tr.n == 0) {
        fg_error(FG_ERR_IO,
                 "--data-bin '%s': no file matches the pattern (flashgrad expands it, in llm.c's sorted order; "
                 "quote it, as in --data-bin 'data/fineweb_train_*.bin', so that the shell leaves it whole)",
                 pattern);
        goto out;
    }
    const char *slash = strrchr(pattern, '/');
    const char *base = slash ? slash + 1 : pattern;
    const char *w = split_word(base, "train");
    if (w) {
        size_t n = strlen(pattern) + 1;
        char *vp = malloc(n);
        if (!vp) {
            fg_error(FG_ERR_OOM, "--data-bin: out of memory");
            goto out;
        }
        snprintf(vp, n, "%.*sval%s", (int)(w - pattern), pattern, w + 5);
        fg_status st = list_glob(vp, &va);
        free(vp);
        if (st != FG_OK || lists_disjoint(pattern, &tr, &va) != FG_OK) goto out;
    }
    d = open_lists(pattern, (const char *const *)tr.v, tr.n, (const char *const *)va.v, va.n, 1, vocab_size,
                   block_size);
out:
    list_free(&tr);
    list_free(&va);
    return d;
}

/* A folder without nanoGPT's train.bin + val.bin: its *train*.bin and *val*.bin files (llm.c's
 * names): one of each is a pair of files as before, several of either a shard set. */
static fg_token_data *open_folder(const char *path, int vocab_size, int block_size) {
    path_list tr = {0}, va = {0};
    fg_token_data *d = NULL;
    if (list_split(path, "train", &tr) != FG_OK || list_split(path, "val", &va) != FG_OK) goto out;
    if (tr.n == 0 || va.n == 0) {
        fg_error(FG_ERR_IO,
                 "--data-bin '%s': the folder holds neither train.bin and val.bin (nanoGPT) nor *train*.bin and "
                 "*val*.bin files (llm.c: one of each, or shards); it has %d of the one and %d of the other",
                 path, tr.n, va.n);
        goto out;
    }
    if (tr.n == 1 && va.n == 1) {
        d = fg_token_data_open_files(path, tr.v[0], va.v[0], vocab_size, block_size);
        goto out;
    }
    if (lists_disjoint(path, &tr, &va) != FG_OK) goto out;
    d = open_lists(path, (const char *const *)tr.v, tr.n, (const char *const *)va.v, va.n, 1, vocab_size, block_size);
out:
    list_free(&tr);
    list_free(&va);
    return d;
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
    if (strlen(path) >= 4096) {
        fg_error(FG_ERR_ARG, "--data-bin: the path is too long");
        return NULL;
    }
    struct stat sb;
    if (stat(path, &sb) != 0) {
        const int e = errno;
        if (e == ENOENT && strpbrk(path, "*?[")) return open_glob(path, vocab_size, block_size);
        fg_error(FG_ERR_IO, "--data-bin: cannot open '%s': %s", path, strerror(e));
        return NULL;
    }
    char tr[4200] = "", va[4200] = "";
    if (S_ISDIR(sb.st_mode)) {
        snprintf(tr, sizeof tr, "%s/train.bin", path);
        snprintf(va, sizeof va, "%s/val.bin", path);
        if (!is_regular(tr) || !is_regular(va)) return open_folder(path, vocab_size, block_size);
    } else {
        snprintf(tr, sizeof tr, "%s", path);
        /* the validation file: the last "train" in the file name (not the folder's) becomes "val" */
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        const char *w = split_word(base, "train");
        if (w) {
            snprintf(va, sizeof va, "%.*sval%s", (int)(w - path), path, w + 5);
            /* anything there is the val file: a FIFO or a folder by that name is refused by name when
             * it is opened, not passed over for the train file's tail */
            struct stat vb;
            if (stat(va, &vb) != 0) va[0] = '\0';
        }
    }
    return fg_token_data_open_files(path, tr, va[0] ? va : NULL, vocab_size, block_size);
}

fg_token_data *fg_token_data_open_files(const char *name, const char *train, const char *val, int vocab_size,
                                        int block_size) {
    return open_lists(name ? name : train, &train, 1, &val, val ? 1 : 0, 0, vocab_size, block_size);
}

fg_token_data *fg_token_data_open_shards(const char *name, const char *const *train, int ntrain, const char *const *val,
                                         int nval, int vocab_size, int block_size) {
    if (!name || !train || ntrain < 1 || nval < 0 || (nval && !val)) {
        fg_error(FG_ERR_ARG, "token shards: need a name and at least one train shard");
        return NULL;
    }
    return open_lists(name, train, ntrain, val, nval, 1, vocab_size, block_size);
}

static fg_token_data *open_lists(const char *name, const char *const *train, int ntrain, const char *const *val,
                                 int nval, int sharded, int vocab_size, int block_size) {
    if (block_size < 1) {
        fg_error(FG_ERR_ARG, "--data-bin '%s': block size %d must be >= 1", name, block_size);
        return NULL;
    }
    for (int s = 0; s < 2; s++) {
        const int k = s ? nval : ntrain;
        if (k > FG_TOKEN_MAX_SHARDS) {
            fg_error(FG_ERR_ARG, "--data-bin '%s': %d %s shards, more than the %d %s shards one dataset may hold", name,
                     k, s ? "val" : "train", FG_TOKEN_MAX_SHARDS, s ? "val" : "train");
            return NULL;
        }
    }
    fg_token_data *d = calloc(1, sizeof *d);
    if (d) d->files = calloc((size_t)(ntrain + nval), sizeof *d->files);
    if (!d || !d->files) {
        free(d);
        fg_error(FG_ERR_OOM, "--data-bin: out of memory");
        return NULL;
    }
    d->vocab_size = vocab_size;
    d->sharded = sharded;
    d->nfiles = ntrain + nval;
    if (!sharded) { /* a pair of files: each opened and checked in turn */
        for (int i = 0; i < d->nfiles; i++)
            if (!(d->files[i] = fg_token_file_open(i < ntrain ? train[i] : val[i - ntrain], vocab_size))) goto fail;
    } else { /* every shard's header and size first, so a bad one is named before the long pass */
        for (int i = 0; i < d->nfiles; i++)
            if (!(d->files[i] = token_file_map(i < ntrain ? train[i] : val[i - ntrain], vocab_size))) goto fail;
        for (int i = 0; i < d->nfiles; i++)
            if (token_file_scan(d->files[i], vocab_size) != FG_OK) goto fail;
    }
    for (int s = 0; s < FG_SPLIT_COUNT; s++) {
        tok_seq *q = &d->seq[s];
        q->n = s == FG_SPLIT_TRAIN ? ntrain : nval;
        if (!q->n) continue;
        q->file = d->files + (s == FG_SPLIT_TRAIN ? 0 : ntrain);
        if (!(q->start = malloc(((size_t)q->n + 1) * sizeof *q->start))) {
            fg_error(FG_ERR_OOM, "--data-bin: out of memory");
            goto fail;
        }
        d->own[s] = 1;
        q->start[0] = 0;
        for (int i = 0; i < q->n; i++) q->start[i + 1] = q->start[i] + q->file[i]->count;
        q->lo = 0;
        q->len = q->start[q->n];
    }
    if (!nval) { /* no val files: the train sequence's last tenth is the validation split, as for text */
        tok_seq *t = &d->seq[FG_SPLIT_TRAIN], *v = &d->seq[FG_SPLIT_VAL];
        const size_t nv = t->len / 10;
        *v = *t;
        v->lo = t->len - nv;
        v->len = nv;
        t->len -= nv;
    }
    for (int s = 0; s < FG_SPLIT_COUNT; s++)
        if (d->seq[s].len < (size_t)block_size + 1) {
            fg_error(FG_ERR_FORMAT, "--data-bin '%s': the %s split has %zu tokens, fewer than block size + 1 = %d",
                     name, fg_split_name((fg_split)s), d->seq[s].len, block_size + 1);
            goto fail;
        }
    return d;
fail:
    fg_token_data_free(d);
    return NULL;
}

void fg_token_data_free(fg_token_data *d) {
    if (!d) return;
    for (int s = 0; s < FG_SPLIT_COUNT; s++)
        if (d->own[s]) free(d->seq[s].start);
    for (int i = 0; i < d->nfiles; i++) fg_token_file_close(d->files[i]);
    free(d->files);
    free(d);
}

int fg_token_data_vocab_size(const fg_token_data *d) { return d->vocab_size; }
size_t fg_token_data_split_tokens(const fg_token_data *d, fg_split s) { return d->seq[s].len; }
int fg_token_data_sharded(const fg_token_data *d) { return d->sharded; }
int fg_token_data_file_count(const fg_token_data *d, fg_split s) { return d->own[s] ? d->seq[s].n : 0; }
const fg_token_file *fg_token_data_shard(const fg_token_data *d, fg_split s, int i) {
    return i >= 0 && i < fg_token_data_file_count(d, s) ? d->seq[s].file[i] : NULL;
}
const fg_token_file *fg_token_data_file(const fg_token_data *d, fg_split s) { return fg_token_data_shard(d, s, 0); }

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

/* Ids g .. g + T of sequence q: x gets the first T, y the last T. A window that runs past the end of
 * one file goes on at the start of the next. */
static void gather_window(const tok_seq *q, size_t g, int T, int32_t *x, int32_t *y) {
    int i = 0, hi = q->n - 1; /* the file holding id g: the last i with start[i] <= g */
    while (i < hi) {
        const int mid = i + (hi - i + 1) / 2;
        if (q->start[mid] <= g)
            i = mid;
        else
            hi = mid - 1;
    }
    const size_t need = (size_t)T + 1;
    for (size_t t = 0; t < need; i++) {
        const fg_token_file *f = q->file[i];
        const size_t p = g + t - q->start[i], k = need - t < f->count - p ? need - t : f->count - p;
        const uint16_t *w = f->tok + p;
        for (size_t j = 0; j < k; j++) {
            if (t + j < (size_t)T) x[t + j] = w[j];
            if (t + j > 0) y[t + j - 1] = w[j];
        }
        drop_window(f, w, k);
        t += k;
    }
}

fg_status fg_token_data_batch(const fg_token_data *d, fg_split s, int B, int T, uint64_t seed, uint64_t step,
                              int32_t *x, int32_t *y) {
    if (!d || !x || !y) return fg_error(FG_ERR_ARG, "token batch: NULL dataset or output buffer");
    if (s < 0 || s >= FG_SPLIT_COUNT) return fg_error(FG_ERR_ARG, "token batch: unknown split %d", (int)s);
    if (B < 1 || T < 1) return fg_error(FG_ERR_ARG, "token batch: need B >= 1 and T >= 1, got B=%d T=%d", B, T);
    const tok_seq *q = &d->seq[s];
    if (q->len < (size_t)T + 1)
        return fg_error(FG_ERR_ARG, "token batch: the %s split has %zu tokens, fewer than T + 1 = %d", fg_split_name(s),
                        q->len, T + 1);
    const uint64_t range = (uint64_t)(q->len - (size_t)T); /* offsets 0 .. len-T-1 */
    for (int r = 0; r < B; r++) {
        uint64_t o = fg_text_window_offset(seed, FG_TEXT_STREAM(s), step * (uint64_t)B + (uint64_t)r, range);
        gather_window(q, q->lo + (size_t)o, T, x + (size_t)r * T, y + (size_t)r * T);
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
