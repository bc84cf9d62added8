/* cmd_tokenizer.c — `flashgrad tokenizer encode|decode`: a BPE tokenizer (datasets/bpe.h) on a file.
 *
 *   flashgrad tokenizer encode --tokenizer PATH FILE...   the ids of each FILE's bytes, space-separated,
 *                                                          a line per FILE
 *   flashgrad tokenizer decode --tokenizer PATH FILE...   the bytes of the ids in each FILE (as encode
 *                                                          prints them), one after the other
 *
 *   flashgrad tokenizer train --vocab-size N --out DIR FILE...
 *                                                          trains a byte-level BPE on the files and
 *                                                          writes DIR/tokenizer.json (datasets/bpe_train.h)
 *
 * --allow-special cuts special tokens out of the text (tiktoken's allowed_special="all"); without
 * it their text is encoded as ordinary text. --bench encodes the file --repeat times and prints the
 * speed instead of the ids.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/flags.h"
#include "datasets/bpe.h"
#include "datasets/bpe_train.h"
#include "tensor/fileio.h"

enum { T_TOK, T_ENC, T_SPECIAL, T_BENCH, T_REPEAT, T_COUNT };

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int usage(void) {
    fprintf(stderr, "usage: flashgrad tokenizer encode|decode --tokenizer PATH [flags] FILE (--help for the flags)\n");
    return 2;
}

/* Ids as encode prints them: decimal, separated by white space. */
static int parse_ids(const char *text, size_t n, const char *path, int32_t **ids, size_t *nids) {
    size_t cap = 1024, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return fprintf(stderr, "flashgrad tokenizer: out of memory\n"), 1;
    for (size_t i = 0; i < n;) {
        if (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r') {
            i++;
            continue;
        }
        long long x = 0;
        size_t j = i;
        while (j < n && text[j] >= '0' && text[j] <= '9' && x <= INT32_MAX) x = x * 10 + (text[j++] - '0');
        if (j == i || x > INT32_MAX || (j < n && !strchr(" \n\t\r", text[j]))) {
            fprintf(stderr, "flashgrad tokenizer decode: %s: byte %zu is not part of a token id (decimal ids separated by spaces)\n", path, i);
            free(v);
            return 1;
        }
        if (k == cap) {
            int32_t *w = realloc(v, (cap *= 2) * sizeof *v);
            if (!w) return free(v), fprintf(stderr, "flashgrad tokenizer: out of memory\n"), 1;
            v = w;
        }
        v[k++] = (int32_t)x;
        i = j;
    }
    *ids = v;
    *nids = k;
    return 0;
}

/* Encodes or decodes one file onto standard output; 0 or 1 (its line printed). */
static int run_file(const fg_bpe *t, const char *path, int enc, const fg_flag *f) {
    void *text = NULL;
    size_t n = 0;
    int fd;
    int64_t size;
    fg_status st = fg_open_read(path, 0, &fd, &size);
    if (st == FG_OK) {
        st = fg_read_fd(fd, path, 0, &text, &n);
        close(fd);
    }
    if (st != FG_OK) {
        fprintf(stderr, "flashgrad tokenizer: %s\n", fg_last_error());
        return 1;
    }
    int32_t *ids = NULL;
    size_t nids = 0;
    int rc = 0;
    if (enc) {
        double best = 1e300;
        int reps = f[T_BENCH].given ? (int)f[T_REPEAT].i : 1;
        for (int r = 0; r < reps && st == FG_OK; r++) {
            free(ids);
            double t0 = now_s();
            st = fg_bpe_encode(t, text, n, f[T_SPECIAL].given, &ids, &nids);
            double dt = now_s() - t0;
            if (dt < best) best = dt;
        }
        if (st != FG_OK) {
            fprintf(stderr, "flashgrad tokenizer encode: %s\n", fg_last_error());
            rc = 1;
        } else if (f[T_BENCH].given) {
            printf("encode: %zu bytes -> %zu tokens in %.4f s (best of %d): %.2f MB/s on one thread\n", n, nids, best, reps,
                   (double)n / best / 1e6);
        } else {
            for (size_t i = 0; i < nids; i++) printf(i ? " %d" : "%d", (int)ids[i]);
            printf("\n");
        }
    } else {
        char *out = NULL;
        size_t len = 0;
        rc = parse_ids(text, n, path, &ids, &nids);
        if (!rc && fg_bpe_decode(t, ids, nids, &out, &len) != FG_OK) {
            fprintf(stderr, "flashgrad tokenizer decode: %s\n", fg_last_error());
            rc = 1;
        }
        if (!rc && fwrite(out, 1, len, stdout) != len) rc = 1;
        free(out);
    }
    free(ids);
    free(text);
    return rc;
}

enum { R_VOCAB, R_OUT, R_PATTERN, R_SPECIAL, R_MINFREQ, R_OVERWRITE, R_COUNT };

/* `tokenizer train`: DIR/tokenizer.json, written atomically; DIR is made when missing. */
static int cmd_train(int argc, char **argv) {
    fg_flag f[R_COUNT] = {
        [R_VOCAB] = {"--vocab-size", FG_FLAG_INT, "N", "tokens in all: 256 bytes, the merges, the special tokens", .lo = 257, .hi = 1 << 24, .i = 0},
        [R_OUT] = {"--out", FG_FLAG_STR, "DIR", "the folder for tokenizer.json (made when missing)", .s = NULL},
        [R_PATTERN] = {"--pattern", FG_FLAG_STR, "NAME", "the pre-tokenizer's regex: gpt2, cl100k_base or o200k_base", .s = "gpt2"},
        [R_SPECIAL] = {"--special", FG_FLAG_STR, "TOKENS", "special tokens, separated by spaces (\"\": none)", .s = "<|endoftext|>"},
        [R_MINFREQ] = {"--min-frequency", FG_FLAG_INT, "N", "a pair seen fewer times is never merged", .lo = 1, .hi = 1e15, .i = 2},
        [R_OVERWRITE] = {"--overwrite", FG_FLAG_BOOL, "", "replace DIR/tokenizer.json when it exists"},
    };
    const char *files[argc];
    fg_flag_args fl = {files, 0};
    int rc = fg_flags_parse_ex("tokenizer train", f, R_COUNT, argc, argv, fg_flags_collect, &fl);
    if (rc == -1) {
        fg_flags_help(stdout, "tokenizer train", "--vocab-size N --out DIR [flags] FILE...", f, R_COUNT);
        return 0;
    }
    if (rc) return rc;
    if (!f[R_VOCAB].given || !f[R_OUT].s || fl.n == 0) {
        fprintf(stderr, "usage: flashgrad tokenizer train --vocab-size N --out DIR [flags] FILE... (--help for the flags)\n");
        return 2;
    }
    char *sp = strdup(f[R_SPECIAL].s);
    const char *specials[64];
    int ns = 0;
    for (char *tok = strtok(sp, " "); tok; tok = strtok(NULL, " ")) {
        if (ns == 64) {
            fprintf(stderr, "flashgrad tokenizer train: --special: at most 64 special tokens\n");
            free(sp);
            return 2;
        }
        specials[ns++] = tok;
    }
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer.json", f[R_OUT].s) >= (int)sizeof path) {
        fprintf(stderr, "flashgrad tokenizer train: --out: the path is too long\n");
        free(sp);
        return 2;
    }
    struct stat sb;
    if (lstat(path, &sb) == 0 && !f[R_OVERWRITE].given) {
        fprintf(stderr, "flashgrad tokenizer train: %s exists (--overwrite replaces it)\n", path);
        free(sp);
        return 1;
    }
    fg_bpe_train_opts o = {.vocab_size = (int32_t)f[R_VOCAB].i, .pattern = f[R_PATTERN].s, .specials = specials, .n_specials = ns,
                           .min_frequency = f[R_MINFREQ].i, .progress = stderr};
    char *json = NULL;
    size_t len = 0;
    fg_status st = fg_bpe_train(files, fl.n, &o, &json, &len);
    free(sp);
    if (st == FG_OK && mkdir(f[R_OUT].s, 0777) != 0 && errno != EEXIST)
        st = fg_error(FG_ERR_IO, "cannot make the folder '%s': %s", f[R_OUT].s, strerror(errno));
    if (st == FG_OK) {
        const void *parts[] = {json};
        st = fg_write_file_atomic(path, parts, &len, 1);
    }
    free(json);
    if (st != FG_OK) {
        fprintf(stderr, "flashgrad tokenizer train: %s\n", fg_last_error());
        return 1;
    }
    fprintf(stderr, "flashgrad tokenizer train: wrote %s\n", path);
    return 0;
}

int fg_cmd_tokenizer(int argc, char **argv) {
    if (argc < 2) return usage();
    const char *mode = argv[1];
    if (strcmp(mode, "train") == 0) return cmd_train(argc - 1, argv + 1);
    int enc = strcmp(mode, "encode") == 0;
    if (!enc && strcmp(mode, "decode") != 0) {
        if (strcmp(mode, "--help") == 0 || strcmp(mode, "-h") == 0) {
            printf("usage: flashgrad tokenizer encode|decode --tokenizer PATH [flags] FILE...\n       flashgrad tokenizer train --vocab-size N --out DIR [flags] FILE...\n");
            return 0;
        }
        fprintf(stderr, "flashgrad tokenizer: unknown mode '%s' (encode, decode or train)\n", mode);
        return 2;
    }
    fg_flag f[T_COUNT] = {
        [T_TOK] = {"--tokenizer", FG_FLAG_STR, "PATH", "a folder with tokenizer.json (or vocab.json + merges.txt), a tokenizer.json, or a .tiktoken file", .s = NULL},
        [T_ENC] = {"--encoding", FG_FLAG_STR, "NAME", "a .tiktoken file's encoding: gpt2, r50k_base, p50k_base, cl100k_base, o200k_base (default: from its name)", .s = NULL},
        [T_SPECIAL] = {"--allow-special", FG_FLAG_BOOL, "", "cut special tokens out of the text (else their text is ordinary text)"},
        [T_BENCH] = {"--bench", FG_FLAG_BOOL, "", "encode --repeat times and print MB/s instead of the ids"},
        [T_REPEAT] = {"--repeat", FG_FLAG_INT, "N", "encodings timed with --bench", .lo = 1, .hi = 1000, .i = 3},
    };
    const char *files[argc];
    fg_flag_args fl = {files, 0};
    int rc = fg_flags_parse_ex(enc ? "tokenizer encode" : "tokenizer decode", f, T_COUNT, argc - 1, argv + 1, fg_flags_collect, &fl);
    if (rc == -1) {
        fg_flags_help(stdout, enc ? "tokenizer encode" : "tokenizer decode", "--tokenizer PATH [flags] FILE...", f, T_COUNT);
        return 0;
    }
    if (rc) return rc;
    if (!f[T_TOK].s || fl.n == 0) return usage();
    fg_bpe *t = fg_bpe_load(f[T_TOK].s, f[T_ENC].s);
    if (!t) {
        fprintf(stderr, "flashgrad tokenizer: %s\n", fg_last_error());
        return 1;
    }
    rc = 0;
    for (int fi = 0; fi < fl.n && rc == 0; fi++) rc = run_file(t, files[fi], enc, f);
    if (fflush(stdout) != 0 && !rc) {
        fprintf(stderr, "flashgrad tokenizer: cannot write to standard output\n");
        rc = 1;
    }
    fg_bpe_free(t);
    return rc;
}
