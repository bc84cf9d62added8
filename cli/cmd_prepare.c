/* cmd_prepare.c — `flashgrad prepare`: text files to token files with a BPE tokenizer, as nanoGPT's
 * prepare.py and llm.c's dev/data scripts make them (datasets/tokens.h reads both).
 *
 *   flashgrad prepare --tokenizer PATH --out DIR [--format nanogpt|llmc] FILE...
 *
 * The files, one document each, are read as one text; its last --val-fraction of characters is the
 * validation split, cut where nanoGPT cuts (train = text[:int(n * 0.9)], by characters) and the two
 * parts encoded apart. With more than one file, <|endoftext|> (when the tokenizer has it) follows
 * every document, as nanoGPT's openwebtext and llm.c's fineweb do.
 *   - nanogpt: DIR/train.bin and DIR/val.bin, uint16 ids (a vocabulary of at most 65536);
 *   - llmc: DIR/NAME_val_000000.bin, then DIR/NAME_train_000001.bin, ... of at most
 *     --shard-tokens ids each, llm.c's header (magic 20240520, version 1) and uint16 ids, or for a
 *     vocabulary past 65536 llm.c's Llama 3 header (magic 20240801, version 7) and uint32 ids.
 * The tokenizer's own files are copied into DIR beside them.
 *
 * Memory stays flat whatever the size of the files: they are read in chunks of --chunk-mb, each cut
 * after a newline that a non-space character follows (no pre-tokenizer pattern makes a piece across
 * such a place, so the ids are those of the whole text), and --threads chunks are encoded at once,
 * then written in order. Every output is written atomically; an existing one is replaced only with
 * --overwrite.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "datasets/bpe.h"
#include "tensor/fileio.h"

#define LLMC_MAGIC_U32 20240801 /* llm.c's Llama 3 token files: uint32 ids */
#define LLMC_VERSION_U32 7

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the outputs ---- */
typedef struct {
    const char *dir, *name;
    int llmc, wide;          /* llm.c shards; uint32 ids */
    int64_t shard_tokens;
    int overwrite;
    fg_atomic_file f[2];     /* [split] the file being written (fd -1: none open) */
    int64_t count[2];        /* ids in the open file */
    int64_t total[2];
    int shard;               /* the next train shard's number */
    char path[2][4096];
} outputs;

static fg_status out_open(outputs *o, int split) {
    char *p = o->path[split];
    if (!o->llmc) snprintf(p, 4096, "%s/%s.bin", o->dir, split ? "val" : "train");
    else if (split) snprintf(p, 4096, "%s/%s_val_000000.bin", o->dir, o->name);
    else snprintf(p, 4096, "%s/%s_train_%06d.bin", o->dir, o->name, o->shard++);
    struct stat sb;
    if (!o->overwrite && lstat(p, &sb) == 0) return fg_error(FG_ERR_IO, "%s exists (--overwrite replaces it)", p);
    FG_TRY(fg_atomic_begin(&o->f[split], p));
    o->count[split] = 0;
    if (o->llmc) { /* the header, its count filled in at the end */
        int32_t h[256] = {0};
        h[0] = o->wide ? LLMC_MAGIC_U32 : 20240520;
        h[1] = o->wide ? LLMC_VERSION_U32 : 1;
        if (write(o->f[split].fd, h, sizeof h) != (ssize_t)sizeof h) {
            fg_atomic_abort(&o->f[split]);
            return fg_error(FG_ERR_IO, "cannot write '%s': %s", p, strerror(errno));
        }
    }
    return FG_OK;
}

static fg_status out_close(outputs *o, int split) {
    if (o->f[split].fd < 0) return FG_OK;
    if (o->llmc) {
        int32_t n = (int32_t)o->count[split];
        if (pwrite(o->f[split].fd, &n, sizeof n, 8) != (ssize_t)sizeof n) {
            fg_atomic_abort(&o->f[split]);
            return fg_error(FG_ERR_IO, "cannot write '%s': %s", o->path[split], strerror(errno));
        }
    }
    return fg_atomic_commit(&o->f[split]);
}

/* Appends ids to split's output, starting a new train shard where the open one is full. */
static fg_status out_write(outputs *o, int split, const int32_t *ids, size_t n) {
    unsigned char buf[1 << 16];
    const size_t width = o->wide ? 4 : 2;
    while (n) {
        if (o->f[split].fd < 0) FG_TRY(out_open(o, split));
        size_t room = o->llmc && split == 0 ? (size_t)(o->shard_tokens - o->count[0]) : n;
        if (o->llmc && split == 1 && o->count[1] + (int64_t)n > INT32_MAX)
            return fg_error(FG_ERR_ARG, "the validation split has more than %d ids, more than llm.c's header can count", INT32_MAX);
        size_t k = n < room ? n : room, m = k < sizeof buf / width ? k : sizeof buf / width;
        for (size_t i = 0; i < m; i++) {
            uint32_t v = (uint32_t)ids[i];
            if (width == 2) buf[2 * i] = (unsigned char)v, buf[2 * i + 1] = (unsigned char)(v >> 8);
            else memcpy(buf + 4 * i, &v, 4);
        }
        if (write(o->f[split].fd, buf, m * width) != (ssize_t)(m * width))
            return fg_error(FG_ERR_IO, "cannot write '%s': %s", o->path[split], strerror(errno));
        o->count[split] += (int64_t)m;
        o->total[split] += (int64_t)m;
        ids += m, n -= m;
        if (o->llmc && split == 0 && o->count[0] == o->shard_tokens) FG_TRY(out_close(o, 0));
    }
    return FG_OK;
}

/* ---- segments of text, encoded in parallel ---- */
typedef struct {
    const fg_bpe *tok;
    char *text;
    size_t n;
    int split, eot_after;
    int32_t *ids;
    size_t nids;
    fg_status st;
    char err[512];
} segment;

static void *encode_segment(void *arg) {
    segment *s = arg;
    s->st = fg_bpe_encode(s->tok, s->text, s->n, 0, &s->ids, &s->nids);
    if (s->st != FG_OK) snprintf(s->err, sizeof s->err, "%s", fg_last_error());
    return NULL;
}

/* Where a chunk of text[0..n) may end: just after the last newline that a non-space byte follows;
 * n when there is none (the chunk grows). */
static size_t safe_cut(const char *text, size_t n) {
    for (size_t i = n; i-- > 1;)
        if (text[i - 1] == '\n' && (unsigned char)text[i] > ' ' && (unsigned char)text[i] != 0x7f) return i;
    return n;
}

typedef struct {
    segment *seg;
    int n, cap;
    int threads;
    outputs *out;
    int32_t eot;
} batch;

/* Encodes the batch's segments (threads at once) and writes them in order. */
static fg_status flush(batch *b) {
    pthread_t th[b->n];
    int started[b->n];
    for (int i = 0; i < b->n; i++) started[i] = pthread_create(&th[i], NULL, encode_segment, &b->seg[i]) == 0;
    fg_status st = FG_OK;
    for (int i = 0; i < b->n; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else encode_segment(&b->seg[i]);
    }
    for (int i = 0; i < b->n; i++) {
        segment *s = &b->seg[i];
        if (st == FG_OK && s->st != FG_OK) st = fg_error(s->st, "%s", s->err);
        if (st == FG_OK) st = out_write(b->out, s->split, s->ids, s->nids);
        if (st == FG_OK && s->eot_after) st = out_write(b->out, s->split, &b->eot, 1);
        free(s->ids);
        free(s->text);
    }
    b->n = 0;
    return st;
}

static fg_status add_segment(batch *b, const fg_bpe *tok, const char *text, size_t n, int split, int eot_after) {
    segment *s = &b->seg[b->n];
    *s = (segment){.tok = tok, .n = n, .split = split, .eot_after = eot_after};
    if (!(s->text = malloc(n ? n : 1))) return fg_error(FG_ERR_OOM, "prepare: out of memory");
    memcpy(s->text, text, n);
    b->n++;
    return b->n == b->threads ? flush(b) : FG_OK;
}

/* The number of UTF-8 characters (bytes that are not continuation bytes) of a file. */
static fg_status count_chars(const char *path, int64_t *chars, int64_t *bytes) {
    int fd;
    int64_t size;
    FG_TRY(fg_open_read(path, 0, &fd, &size));
    static char buf[1 << 20];
    ssize_t k;
    while ((k = read(fd, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < k; i++) *chars += ((unsigned char)buf[i] & 0xc0) != 0x80;
        *bytes += k;
    }
    int e = errno;
    close(fd);
    return k < 0 ? fg_error(FG_ERR_IO, "cannot read '%s': %s", path, strerror(e)) : FG_OK;
}

/* Copies the tokenizer's own file(s) into dir. */
static fg_status copy_tokenizer(const char *tok, const char *dir, int overwrite) {
    const char *names[2] = {NULL, NULL};
    char src[2][4096];
    size_t n = strlen(tok);
    struct stat sb;
    if (stat(tok, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(src[0], sizeof src[0], "%s/tokenizer.json", tok);
        if (access(src[0], F_OK) == 0) {
            names[0] = "tokenizer.json";
        } else {
            snprintf(src[0], sizeof src[0], "%s/vocab.json", tok);
            snprintf(src[1], sizeof src[1], "%s/merges.txt", tok);
            names[0] = "vocab.json", names[1] = "merges.txt";
        }
    } else {
        snprintf(src[0], sizeof src[0], "%s", tok);
        names[0] = n > 9 && strcmp(tok + n - 9, ".tiktoken") == 0 ? strrchr(tok, '/') ? strrchr(tok, '/') + 1 : tok : "tokenizer.json";
    }
    for (int i = 0; i < 2 && names[i]; i++) {
        char dst[4096];
        snprintf(dst, sizeof dst, "%s/%s", dir, names[i]);
        if (!overwrite && lstat(dst, &sb) == 0) return fg_error(FG_ERR_IO, "%s exists (--overwrite replaces it)", dst);
        void *buf;
        size_t len;
        FG_TRY(fg_read_file(src[i], (size_t)1 << 30, &buf, &len));
        const void *parts[] = {buf};
        fg_status st = fg_write_file_atomic(dst, parts, &len, 1);
        free(buf);
        FG_TRY(st);
    }
    return FG_OK;
}

enum { P_TOK, P_ENC, P_OUT, P_FORMAT, P_NAME, P_VAL, P_THREADS, P_SHARD, P_CHUNK, P_EOT, P_OVERWRITE, P_COUNT };

int fg_cmd_prepare(int argc, char **argv) {
    fg_flag f[P_COUNT] = {
        [P_TOK] = {"--tokenizer", FG_FLAG_STR, "PATH", "a folder with tokenizer.json (or vocab.json + merges.txt), a tokenizer.json, or a .tiktoken file", .s = NULL},
        [P_ENC] = {"--encoding", FG_FLAG_STR, "NAME", "a .tiktoken file's encoding (default: from its name)", .s = NULL},
        [P_OUT] = {"--out", FG_FLAG_STR, "DIR", "the folder for the token files (made when missing)", .s = NULL},
        [P_FORMAT] = {"--format", FG_FLAG_STR, "F", "nanogpt (train.bin, val.bin) or llmc (shards with llm.c's header)", .s = "nanogpt"},
        [P_NAME] = {"--name", FG_FLAG_STR, "NAME", "llmc: the shards' name (NAME_train_000001.bin)", .s = "data"},
        [P_VAL] = {"--val-fraction", FG_FLAG_F64, "F", "the text's last fraction that is the validation split", .lo = 0, .hi = 1, .lo_open = 1, .d = 0.1},
        [P_THREADS] = {"--threads", FG_FLAG_INT, "N", "chunks encoded at once", .lo = 1, .hi = 256, .i = 2},
        [P_SHARD] = {"--shard-tokens", FG_FLAG_INT, "N", "llmc: ids per train shard", .lo = 1, .hi = INT32_MAX, .i = 100000000},
        [P_CHUNK] = {"--chunk-mb", FG_FLAG_F64, "MB", "text read and encoded at a time, per thread", .lo = 1e-6, .hi = 4096, .d = 8},
        [P_EOT] = {"--eot", FG_FLAG_STR, "WHEN", "<|endoftext|> after each document: auto (with more than one file), yes, no", .s = "auto"},
        [P_OVERWRITE] = {"--overwrite", FG_FLAG_BOOL, "", "replace token files that exist"},
    };
    const char *files[argc > 0 ? argc : 1];
    fg_flag_args fl = {files, 0};
    int rc = fg_flags_parse_ex("prepare", f, P_COUNT, argc, argv, fg_flags_collect, &fl);
    if (rc == -1) {
        fg_flags_help(stdout, "prepare", "--tokenizer PATH --out DIR [flags] FILE...", f, P_COUNT);
        return 0;
    }
    if (rc) return rc;
    if (!f[P_TOK].s || !f[P_OUT].s || fl.n == 0) {
        fprintf(stderr, "usage: flashgrad prepare --tokenizer PATH --out DIR [flags] FILE... (--help for the flags)\n");
        return 2;
    }
    const int llmc = strcmp(f[P_FORMAT].s, "llmc") == 0;
    if (!llmc && strcmp(f[P_FORMAT].s, "nanogpt") != 0) {
        fprintf(stderr, "flashgrad prepare: --format: '%s' is not nanogpt or llmc\n", f[P_FORMAT].s);
        return 2;
    }
    int eot_mode = strcmp(f[P_EOT].s, "yes") == 0 ? 1 : strcmp(f[P_EOT].s, "no") == 0 ? 0 : strcmp(f[P_EOT].s, "auto") == 0 ? 2 : -1;
    if (eot_mode < 0) {
        fprintf(stderr, "flashgrad prepare: --eot: '%s' is not auto, yes or no\n", f[P_EOT].s);
        return 2;
    }
    fg_bpe *tok = fg_bpe_load(f[P_TOK].s, f[P_ENC].s);
    if (!tok) {
        fprintf(stderr, "flashgrad prepare: %s\n", fg_last_error());
        return 1;
    }
    const int32_t vocab = fg_bpe_vocab_size(tok), eot = fg_bpe_special_id(tok, "<|endoftext|>");
    fg_status st = FG_OK;
    if (!llmc && vocab > 65536)
        st = fg_error(FG_ERR_ARG, "nanoGPT's .bin files hold uint16 ids and this tokenizer has %d; use --format llmc (uint32 ids)", (int)vocab);
    const int with_eot = eot_mode == 1 || (eot_mode == 2 && fl.n > 1);
    if (st == FG_OK && with_eot && eot < 0) st = fg_error(FG_ERR_ARG, "--eot: the tokenizer has no <|endoftext|>");
    int64_t chars = 0, bytes = 0;
    for (int i = 0; i < fl.n && st == FG_OK; i++) st = count_chars(files[i], &chars, &bytes);
    if (st == FG_OK && mkdir(f[P_OUT].s, 0777) != 0 && errno != EEXIST)
        st = fg_error(FG_ERR_IO, "cannot make the folder '%s': %s", f[P_OUT].s, strerror(errno));
    outputs out = {.dir = f[P_OUT].s, .name = f[P_NAME].s, .llmc = llmc, .wide = vocab > 65536, .shard_tokens = f[P_SHARD].i,
                   .overwrite = f[P_OVERWRITE].given, .f = {{.fd = -1}, {.fd = -1}}, .shard = 1};
    /* nanoGPT's cut: train = text[:int(n * 0.9)] in characters */
    const int64_t cut = (int64_t)((double)chars * (1.0 - f[P_VAL].d));
    const size_t chunk = (size_t)(f[P_CHUNK].d * 1e6) > 0 ? (size_t)(f[P_CHUNK].d * 1e6) : 1;
    batch b = {.seg = calloc((size_t)f[P_THREADS].i, sizeof(segment)), .threads = (int)f[P_THREADS].i, .out = &out, .eot = eot};
    char *buf = malloc(2 * chunk + 8);
    if (st == FG_OK && (!b.seg || !buf)) st = fg_error(FG_ERR_OOM, "prepare: out of memory");
    const int tty = isatty(2);
    double t0 = now_s(), last = t0;
    int64_t at_char = 0, done_bytes = 0;
    int last_decile = 0;
    for (int fi = 0; fi < fl.n && st == FG_OK; fi++) {
        int fd;
        int64_t size;
        if ((st = fg_open_read(files[fi], 0, &fd, &size)) != FG_OK) break;
        size_t have = 0;
        int eof = 0;
        while (st == FG_OK && (have || !eof)) {
            while (!eof && have < chunk) { /* fill the buffer to a chunk */
                ssize_t k = read(fd, buf + have, 2 * chunk - have);
                if (k < 0) st = fg_error(FG_ERR_IO, "cannot read '%s': %s", files[fi], strerror(errno));
                if (k <= 0) eof = 1;
                else have += (size_t)k;
            }
            if (st != FG_OK) break;
            size_t take = eof ? have : safe_cut(buf, have);
            if (take == have && !eof && have < 2 * chunk) continue; /* no place to cut yet: read more */
            /* the validation split begins at character `cut`: a chunk across it is encoded as two */
            size_t split_at = take;
            if (at_char >= cut) {
                split_at = 0;
            } else {
                int64_t c = at_char;
                for (size_t i = 0; i < take && split_at == take; i++)
                    if (((unsigned char)buf[i] & 0xc0) != 0x80 && c++ == cut) split_at = i;
            }
            for (size_t i = 0; i < take; i++) at_char += ((unsigned char)buf[i] & 0xc0) != 0x80;
            const int doc_end = eof && take == have;
            if (split_at > 0) st = add_segment(&b, tok, buf, split_at, 0, with_eot && doc_end && split_at == take);
            if (st == FG_OK && split_at < take) st = add_segment(&b, tok, buf + split_at, take - split_at, 1, with_eot && doc_end);
            memmove(buf, buf + take, have - take);
            have -= take;
            done_bytes += (int64_t)take;
            double now = now_s();
            int decile = bytes ? (int)(10 * done_bytes / bytes) : 10;
            if (tty ? now - last > 0.25 : decile > last_decile) {
                last = now, last_decile = decile;
                fprintf(stderr, "%sprepare: %3d%% %.1f / %.1f MB, %.1f MB/s%s", tty ? "\r" : "", bytes ? (int)(100 * done_bytes / bytes) : 100,
                        done_bytes / 1e6, bytes / 1e6, done_bytes / 1e6 / (now - t0 > 0 ? now - t0 : 1e-9), tty ? "" : "\n");
            }
        }
        close(fd);
    }
    if (st == FG_OK && b.n) st = flush(&b);
    for (int s = 0; s < 2 && st == FG_OK; s++)
        if (out.f[s].fd < 0 && out.total[s] == 0) st = out_open(&out, s); /* an empty split still gets its file */
    for (int s = 0; s < 2; s++) {
        if (st == FG_OK) st = out_close(&out, s);
        else if (out.f[s].fd >= 0) fg_atomic_abort(&out.f[s]);
    }
    if (st == FG_OK) st = copy_tokenizer(f[P_TOK].s, f[P_OUT].s, f[P_OVERWRITE].given);
    for (int i = 0; i < b.n; i++) free(b.seg[i].text), free(b.seg[i].ids);
    free(b.seg);
    free(buf);
    fg_bpe_free(tok);
    if (tty) fprintf(stderr, "\n");
    if (st != FG_OK) {
        fprintf(stderr, "flashgrad prepare: %s\n", fg_last_error());
        return 1;
    }
    double dt = now_s() - t0;
    fprintf(stderr, "prepare: %.1f MB -> %lld ids (train %lld, val %lld) in %.2f s, %.1f MB/s with %d threads; %s ids in %s\n", bytes / 1e6,
            (long long)(out.total[0] + out.total[1]), (long long)out.total[0], (long long)out.total[1], dt, bytes / 1e6 / (dt > 0 ? dt : 1e-9),
            (int)f[P_THREADS].i, out.wide ? "uint32" : "uint16", f[P_OUT].s);
    return 0;
}
