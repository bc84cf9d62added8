/* test_datasets.c — tokenizers, the text-file dataset and the synthetic addition task.
 *
 * References are independent of the library: vocabularies are rebuilt with a presence table,
 * addition rows are parsed as character strings, and the held-out rule is recomputed from Philox.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datasets/addition.h"
#include "datasets/text.h"
#include "datasets/tokenizer.h"
#include "tensor/philox.h"
#include "tests/common.h"

#define TS_PATH "../shared/datasets/tinyshakespeare/input.txt"

static int sanitize_build(void) { return getenv("FG_SANITIZE") != NULL; }

/* A tiny deterministic generator for test inputs (splitmix64). */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* ==================================== tokenizer ==================================== */

Test(tokenizer, char_vocab_is_sorted_distinct_bytes_and_round_trips) {
    const char text[] = "hello, World!\n\"quoted\" \\ tab\there\x01\xff";
    size_t n = sizeof text - 1;
    fg_tokenizer *tok = fg_tokenizer_char_from_text(text, n);
    cr_assert_not_null(tok, "%s", fg_last_error());
    /* reference vocabulary: presence table walked in byte order */
    int present[256] = {0}, ref_id[256], vocab = 0;
    for (size_t i = 0; i < n; i++) present[(unsigned char)text[i]] = 1;
    for (int c = 0; c < 256; c++) ref_id[c] = present[c] ? vocab++ : -1;
    cr_assert_eq(fg_tokenizer_vocab_size(tok), vocab, "vocab %d, expected %d", fg_tokenizer_vocab_size(tok), vocab);
    cr_assert_eq(fg_tokenizer_kind(tok), FG_TOK_CHAR);
    int32_t ids[64];
    cr_assert_eq(fg_tokenizer_encode(tok, text, n, ids), FG_OK, "%s", fg_last_error());
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], ref_id[(unsigned char)text[i]], "index %zu: id %d, expected %d", i, ids[i],
                     ref_id[(unsigned char)text[i]]);
    char back[64];
    cr_assert_eq(fg_tokenizer_decode(tok, ids, n, back), FG_OK, "%s", fg_last_error());
    cr_assert(memcmp(back, text, n) == 0, "decode(encode(text)) differs from text");
    for (int c = 0; c < 256; c++) {
        cr_assert_eq(fg_tokenizer_token_of(tok, (unsigned char)c), ref_id[c], "byte %d", c);
        if (ref_id[c] >= 0) cr_assert_eq(fg_tokenizer_byte_of(tok, ref_id[c]), c, "token %d", ref_id[c]);
    }
    cr_assert_eq(fg_tokenizer_byte_of(tok, vocab), -1);
    cr_assert_eq(fg_tokenizer_byte_of(tok, -1), -1);
    fg_tokenizer_free(tok);
}

Test(tokenizer, byte_level_round_trips_all_256_values) {
    unsigned char text[512];
    for (int i = 0; i < 512; i++) text[i] = (unsigned char)(255 - i % 256);
    fg_tokenizer *tok = fg_tokenizer_byte();
    cr_assert_not_null(tok);
    cr_assert_eq(fg_tokenizer_vocab_size(tok), 256);
    int32_t ids[512];
    char back[512];
    cr_assert_eq(fg_tokenizer_encode(tok, text, 512, ids), FG_OK, "%s", fg_last_error());
    for (int i = 0; i < 512; i++) cr_assert_eq(ids[i], text[i], "index %d: id %d, expected %d", i, ids[i], text[i]);
    cr_assert_eq(fg_tokenizer_decode(tok, ids, 512, back), FG_OK, "%s", fg_last_error());
    cr_assert(memcmp(back, text, 512) == 0);
    fg_tokenizer_free(tok);
}

Test(tokenizer, unknown_byte_and_bad_id_are_errors_with_position) {
    fg_tokenizer *tok = fg_tokenizer_char_from_text("abc", 3);
    cr_assert_not_null(tok);
    int32_t ids[8];
    fg_clear_error();
    cr_assert_eq(fg_tokenizer_encode(tok, "abxc", 4, ids), FG_ERR_ARG);
    cr_assert(strstr(fg_last_error(), "'x'") && strstr(fg_last_error(), "offset 2"), "message: %s", fg_last_error());
    cr_assert_eq(fg_tokenizer_encode(tok, "a\nb", 3, ids), FG_ERR_ARG);
    cr_assert(strstr(fg_last_error(), "\\x0a"), "message: %s", fg_last_error());
    int32_t bad[3] = {0, 3, 1};
    char out[3];
    cr_assert_eq(fg_tokenizer_decode(tok, bad, 3, out), FG_ERR_ARG);
    cr_assert(strstr(fg_last_error(), "index 1"), "message: %s", fg_last_error());
    bad[1] = -1;
    cr_assert_eq(fg_tokenizer_decode(tok, bad, 3, out), FG_ERR_ARG);
    fg_tokenizer_free(tok);
    cr_assert_null(fg_tokenizer_char_from_text("", 0));
    cr_assert_null(fg_tokenizer_char_from_vocab("aba", 3), "duplicate vocabulary byte accepted");
    cr_assert_eq(fg_last_status(), FG_ERR_ARG);
}

Test(tokenizer, serialize_parse_round_trips_nasty_bytes) {
    /* NUL, quote, backslash, newline, CR, DEL, 0xff and a UTF-8 lead byte: all must survive. */
    const unsigned char vocab[] = {'\\', 0x00, '"', '\n', 0xff, '\r', 0x7f, 0xe2, 'A', '{', '}', ':'};
    fg_tokenizer *tok = fg_tokenizer_char_from_vocab(vocab, sizeof vocab);
    cr_assert_not_null(tok, "%s", fg_last_error());
    char *s = fg_tokenizer_serialize(tok);
    cr_assert_not_null(s);
    for (const char *p = s; *p; p++)
        cr_assert(*p >= 0x21 && *p <= 0x7e && *p != '"' && *p != '\\', "unsafe char 0x%02x at %d in %s",
                  (unsigned char)*p, (int)(p - s), s);
    cr_assert_str_eq(s, "char-v1:000a0d223a415c7b7d7fe2ff");
    fg_tokenizer *back = fg_tokenizer_parse(s, strlen(s));
    cr_assert_not_null(back, "%s", fg_last_error());
    cr_assert_eq(fg_tokenizer_vocab_size(back), (int)sizeof vocab);
    for (int c = 0; c < 256; c++)
        cr_assert_eq(fg_tokenizer_token_of(back, (unsigned char)c), fg_tokenizer_token_of(tok, (unsigned char)c),
                     "byte %d maps differently after the round trip", c);
    char *s2 = fg_tokenizer_serialize(back);
    cr_assert_str_eq(s2, s);
    free(s);
    free(s2);
    fg_tokenizer_free(tok);
    fg_tokenizer_free(back);

    /* every byte value: the largest char vocabulary, and the byte-level kind */
    unsigned char all[256];
    for (int i = 0; i < 256; i++) all[i] = (unsigned char)(i * 7 + 3); /* a permutation of 0..255 */
    tok = fg_tokenizer_char_from_vocab(all, 256);
    cr_assert_not_null(tok, "%s", fg_last_error());
    s = fg_tokenizer_serialize(tok);
    cr_assert_eq(strlen(s), 8 + 512);
    back = fg_tokenizer_parse(s, strlen(s));
    cr_assert_not_null(back, "%s", fg_last_error());
    cr_assert_eq(fg_tokenizer_kind(back), FG_TOK_CHAR);
    cr_assert_eq(fg_tokenizer_vocab_size(back), 256);
    free(s);
    fg_tokenizer_free(tok);
    fg_tokenizer_free(back);

    tok = fg_tokenizer_byte();
    s = fg_tokenizer_serialize(tok);
    cr_assert_str_eq(s, "byte-v1");
    back = fg_tokenizer_parse(s, strlen(s));
    cr_assert_not_null(back);
    cr_assert_eq(fg_tokenizer_kind(back), FG_TOK_BYTE);
    cr_assert_eq(fg_tokenizer_vocab_size(back), 256);
    free(s);
    fg_tokenizer_free(tok);
    fg_tokenizer_free(back);
}

typedef struct {
    const char *name;
    const char *s;
    size_t len; /* 0: strlen(s) */
} bad_tok_case;

Test(tokenizer, parse_refuses_malformed_strings) {
    static char long_hex[8 + 514 + 1];
    memcpy(long_hex, "char-v1:", 8);
    for (int i = 0; i < 514; i++) long_hex[8 + i] = "0123456789abcdef"[(i / 2 + i) % 16];
    long_hex[8 + 514] = '\0';
    const bad_tok_case cases[] = {
        {"empty", "", 0},
        {"unknown kind", "word-v1:00", 0},
        {"byte without version", "byte", 0},
        {"byte with trailing junk", "byte-v1x", 0},
        {"byte with trailing newline", "byte-v1\n", 0},
        {"future version", "char-v2:0a", 0},
        {"uppercase kind", "CHAR-v1:0a", 0},
        {"char without colon", "char-v1", 0},
        {"empty vocabulary", "char-v1:", 0},
        {"odd hex length", "char-v1:0a2", 0},
        {"uppercase hex", "char-v1:0A", 0},
        {"non-hex", "char-v1:zz", 0},
        {"space inside", "char-v1:0a 20", 0},
        {"duplicate byte", "char-v1:0a0a", 0},
        {"unsorted bytes", "char-v1:200a", 0},
        {"too long", long_hex, 0},
        {"NUL inside",
         "char-v1:0a\0"
         "20",
         13},
        {"truncated length", "char-v1:0a20", 11},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].s);
        fg_clear_error();
        fg_tokenizer *t = fg_tokenizer_parse(cases[i].s, len);
        cr_expect_null(t, "case '%s' was accepted", cases[i].name);
        cr_expect_eq(fg_last_status(), FG_ERR_FORMAT, "case '%s': status %s, message: %s", cases[i].name,
                     fg_status_name(fg_last_status()), fg_last_error());
        fg_tokenizer_free(t);
    }
}

/* A small fuzz pass: near-valid strings must be parsed or refused, never crash, and whatever is
 * accepted must serialize back to exactly the input (the format is canonical). */
Test(tokenizer, parse_is_total_and_canonical_on_mutated_strings) {
    uint64_t rng = 12345;
    const char *seeds[] = {"byte-v1", "char-v1:0a20416162", "char-v1:00ff", "char-v1:"};
    int accepted = 0, iters = sanitize_build() ? 3000 : 20000;
    char buf[64];
    for (int it = 0; it < iters; it++) {
        const char *seed = seeds[mix(&rng) % 4];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        int muts = 1 + (int)(mix(&rng) % 3);
        for (int m = 0; m < muts; m++) {
            uint64_t r = mix(&rng);
            size_t pos = len ? (size_t)(r >> 8) % len : 0;
            switch (r % 4) {
            case 0:
                if (len) buf[pos] = (char)(r >> 32);
                break; /* replace */
            case 1:
                if (len) len = pos;
                break; /* truncate */
            case 2:
                if (len < 60) buf[len++] = "0123456789abcdefA\0:"[(r >> 40) % 19];
                break; /* append */
            case 3:
                if (len) buf[pos] = "0123456789abcdef"[(r >> 40) % 16];
                break; /* hex digit */
            }
        }
        fg_tokenizer *t = fg_tokenizer_parse(buf, len);
        if (!t) {
            cr_assert_eq(fg_last_status(), FG_ERR_FORMAT, "iteration %d: refused with %s", it,
                         fg_status_name(fg_last_status()));
            continue;
        }
        accepted++;
        char *s = fg_tokenizer_serialize(t);
        cr_assert(strlen(s) == len && memcmp(s, buf, len) == 0,
                  "iteration %d: accepted '%.*s' but it "
                  "serializes to '%s'",
                  it, (int)len, buf, s);
        free(s);
        fg_tokenizer_free(t);
    }
    cr_assert_gt(accepted, iters / 100, "only %d of %d mutated strings parsed: mutations too harsh", accepted, iters);
}

/* ==================================== text ==================================== */

/* A scratch directory per test, removed with its files at the end. */
static char g_dir[64];
static void text_init(void) {
    strcpy(g_dir, "/tmp/fg_test_text_XXXXXX");
    cr_assert_not_null(mkdtemp(g_dir), "mkdtemp failed");
}
static void text_fini(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}
TestSuite(text, .init = text_init, .fini = text_fini, .timeout = 60);

/* Writes data[0..n) to g_dir/name; returns the path (static buffer). */
static const char *write_file(const char *name, const void *data, size_t n) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    if (n) cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
    return path;
}

/* n bytes of pseudo-random lowercase text with spaces and newlines. */
static char *make_text(size_t n, uint64_t seed) {
    char *s = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = mix(&seed) % 30;
        s[i] = r < 26 ? (char)('a' + r) : r < 29 ? ' ' : '\n';
    }
    s[n] = '\0';
    return s;
}

Test(text, split_sizes_follow_val_fraction) {
    char *s = make_text(1000, 1);
    const char *path = write_file("t.txt", s, 1000);
    const double fr[] = {0.1, 0.25, 0.5, 0.0};
    const size_t want_val[] = {100, 250, 500, 0};
    for (int i = 0; i < 4; i++) {
        fg_text_options o = fg_text_default_options(16);
        o.val_fraction = fr[i];
        fg_text_dataset *ds = fg_text_load(path, &o);
        cr_assert_not_null(ds, "%s", fg_last_error());
        cr_expect_eq(fg_text_num_tokens(ds), 1000);
        cr_expect_eq(fg_text_split_tokens(ds, FG_SPLIT_VAL), want_val[i], "fraction %g: val %zu, expected %zu", fr[i],
                     fg_text_split_tokens(ds, FG_SPLIT_VAL), want_val[i]);
        cr_expect_eq(fg_text_split_tokens(ds, FG_SPLIT_TRAIN), 1000 - want_val[i]);
        /* the splits are the head and the tail of the file, in order */
        const fg_tokenizer *tok = fg_text_tokenizer(ds);
        const int32_t *tr = fg_text_split_data(ds, FG_SPLIT_TRAIN);
        for (size_t k = 0; k < 1000 - want_val[i]; k++)
            cr_assert_eq(fg_tokenizer_byte_of(tok, tr[k]), (unsigned char)s[k], "train token %zu", k);
        if (want_val[i]) {
            const int32_t *va = fg_text_split_data(ds, FG_SPLIT_VAL);
            for (size_t k = 0; k < want_val[i]; k++)
                cr_assert_eq(fg_tokenizer_byte_of(tok, va[k]), (unsigned char)s[1000 - want_val[i] + k],
                             "val token %zu", k);
        } else {
            cr_expect_null(fg_text_split_data(ds, FG_SPLIT_VAL));
            int32_t x[16], y[16];
            cr_expect_eq(fg_text_batch(ds, FG_SPLIT_VAL, 1, 16, 0, 0, x, y), FG_ERR_ARG,
                         "empty val split gave a batch");
        }
        fg_text_free(ds);
    }
    fg_text_options o = fg_text_default_options(16);
    o.val_fraction = 0.6;
    cr_expect_null(fg_text_load(path, &o), "val_fraction 0.6 accepted");
    o.val_fraction = 0.1;
    o.block_size = 0;
    cr_expect_null(fg_text_load(path, &o), "block_size 0 accepted");
    free(s);
}

Test(text, batch_rows_are_windows_of_their_split_and_y_is_x_shifted) {
    size_t n = 4000;
    char *s = make_text(n, 2);
    fg_text_options o = fg_text_default_options(32);
    fg_text_dataset *ds = fg_text_from_memory(s, n, "mem", &o);
    cr_assert_not_null(ds, "%s", fg_last_error());
    enum { B = 8, T = 32 };
    int32_t x[B * T], y[B * T];
    for (int sp = 0; sp < 2; sp++) {
        const int32_t *tok = fg_text_split_data(ds, (fg_split)sp);
        size_t len = fg_text_split_tokens(ds, (fg_split)sp);
        for (uint64_t step = 0; step < 5; step++) {
            cr_assert_eq(fg_text_batch(ds, (fg_split)sp, B, T, 7, step, x, y), FG_OK, "%s", fg_last_error());
            for (int r = 0; r < B; r++) {
                for (int t = 0; t + 1 < T; t++)
                    cr_assert_eq(y[r * T + t], x[r * T + t + 1], "split %d step %d row %d t %d: y != x shifted", sp,
                                 (int)step, r, t);
                /* find the window in the split: x and y must both match at one offset */
                int found = 0;
                for (size_t off = 0; off + T < len && !found; off++)
                    found = memcmp(tok + off, x + r * T, T * sizeof(int32_t)) == 0 && tok[off + T] == y[r * T + T - 1];
                cr_assert(found, "split %d step %d row %d is not a window of the split", sp, (int)step, r);
            }
        }
    }
    fg_text_free(ds);
    free(s);
}

Test(text, batches_are_deterministic_in_seed_and_step) {
    size_t n = 3000;
    char *s = make_text(n, 3);
    fg_text_options o = fg_text_default_options(16);
    fg_text_dataset *ds = fg_text_from_memory(s, n, NULL, &o);
    cr_assert_not_null(ds, "%s", fg_last_error());
    enum { B = 4, T = 16 };
    int32_t x1[2 * B * T], y1[2 * B * T], x2[2 * B * T], y2[2 * B * T];
    cr_assert_eq(fg_text_batch(ds, FG_SPLIT_TRAIN, B, T, 99, 5, x1, y1), FG_OK);
    cr_assert_eq(fg_text_batch(ds, FG_SPLIT_TRAIN, B, T, 99, 6, x2, y2), FG_OK); /* another draw in between */
    cr_assert_eq(fg_text_batch(ds, FG_SPLIT_TRAIN, B, T, 99, 5, x2, y2), FG_OK);
    cr_assert(memcmp(x1, x2, sizeof(int32_t) * B * T) == 0 && memcmp(y1, y2, sizeof(int32_t) * B * T) == 0,
              "same (seed, step) gave different batches");
    cr_assert_eq(fg_text_batch(ds, FG_SPLIT_TRAIN, B, T, 99, 6, x2, y2), FG_OK);
    cr_assert(memcmp(x1, x2, sizeof(int32_t) * B * T) != 0, "steps 5 and 6 gave the same batch");
    cr_assert_eq(fg_text_batch(ds, FG_SPLIT_TRAIN, B, T, 100, 5, x2, y2), FG_OK);
    cr_assert(memcmp(x1, x2, sizeof(int32_t) * B * T) != 0, "seeds 99 and 100 gave the same batch");
    /* row r of step s is a function of s*B + r: step 5 of B=4 is rows 4..7 of step 2 of B=8 */
    cr_assert_eq(fg_text_batch(ds, FG_SPLIT_TRAIN, 2 * B, T, 99, 2, x2, y2), FG_OK);
    cr_assert(memcmp(x1, x2 + B * T, sizeof(int32_t) * B * T) == 0, "rows are not a function of step*B + r");
    /* train and val draw from different streams */
    cr_assert_eq(fg_text_batch(ds, FG_SPLIT_VAL, B, T, 99, 5, x2, y2), FG_OK);
    cr_assert(memcmp(x1, x2, sizeof(int32_t) * B * T) != 0);
    fg_text_free(ds);
    free(s);
}

Test(text, window_offsets_are_uniform) {
    /* A split of 12 tokens with T = 2 has 10 possible offsets; the tokens are distinct, so the
     * first token of a row names its offset. 20000 rows: each offset ~2000 times (sd ~42). */
    const char s[] = "abcdefghijklmnopqrstuvwxyz"; /* 26 bytes, val_fraction 0.5 -> 13 + 13 */
    fg_text_options o = fg_text_default_options(2);
    o.val_fraction = 0.5;
    fg_text_dataset *ds = fg_text_from_memory(s, 26, NULL, &o);
    cr_assert_not_null(ds, "%s", fg_last_error());
    size_t len = fg_text_split_tokens(ds, FG_SPLIT_TRAIN);
    cr_assert_eq(len, 13);
    int B = 500, T = 2, counts[32] = {0};
    int32_t *x = malloc(sizeof(int32_t) * B * T), *y = malloc(sizeof(int32_t) * B * T);
    for (int step = 0; step < 40; step++) {
        cr_assert_eq(fg_text_batch(ds, FG_SPLIT_TRAIN, B, T, 5, (uint64_t)step, x, y), FG_OK);
        for (int r = 0; r < B; r++) counts[x[r * T]]++;
    }
    int offsets = (int)len - T; /* 11 */
    for (int k = 0; k < 32; k++) {
        if (k < offsets)
            cr_expect(counts[k] > 20000 / offsets - 250 && counts[k] < 20000 / offsets + 250,
                      "offset %d drawn %d times, expected ~%d", k, counts[k], 20000 / offsets);
        else
            cr_expect_eq(counts[k], 0, "offset %d drawn %d times: past the end of the split", k, counts[k]);
    }
    free(x);
    free(y);
    fg_text_free(ds);
}

/* Loads a file written with the given bytes; expects failure with status st and a message that
 * contains `needle`. */
static void expect_refused(const char *name, const void *data, size_t n, fg_tok_kind kind, fg_status st,
                           const char *needle) {
    const char *path = write_file(name, data, n);
    fg_text_options o = fg_text_default_options(4);
    o.kind = kind;
    fg_clear_error();
    fg_text_dataset *ds = fg_text_load(path, &o);
    cr_expect_null(ds, "%s was accepted", name);
    fg_text_free(ds);
    cr_expect_eq(fg_last_status(), st, "%s: status %s, expected %s (%s)", name, fg_status_name(fg_last_status()),
                 fg_status_name(st), fg_last_error());
    cr_expect(strstr(fg_last_error(), needle) != NULL, "%s: message lacks '%s': %s", name, needle, fg_last_error());
    cr_expect(strstr(fg_last_error(), name) != NULL, "%s: message does not name the file: %s", name, fg_last_error());
}

Test(text, bad_files_are_refused_with_clear_messages) {
    char *good = make_text(200, 4);
    fg_text_options o = fg_text_default_options(4);
    char missing[128];
    snprintf(missing, sizeof missing, "%s/missing.txt", g_dir);
    fg_clear_error();
    cr_expect_null(fg_text_load(missing, &o));
    cr_expect_eq(fg_last_status(), FG_ERR_IO, "missing: %s", fg_last_error());
    cr_expect(strstr(fg_last_error(), "missing.txt") && strstr(fg_last_error(), "No such file"), "%s", fg_last_error());
    fg_clear_error();
    cr_expect_null(fg_text_load(g_dir, &o));
    cr_expect_eq(fg_last_status(), FG_ERR_IO, "directory: %s", fg_last_error());
    cr_expect(strstr(fg_last_error(), "directory"), "%s", fg_last_error());

    /* not regular files: a device is refused unread, a FIFO without writer and a pipe with one at
     * once, unread (the suite's timeout catches a hang) */
    fg_clear_error();
    cr_expect_null(fg_text_load("/dev/zero", &o));
    cr_expect(strstr(fg_last_error(), "character device"), "%s", fg_last_error());
    char fifo[128];
    snprintf(fifo, sizeof fifo, "%s/fifo.txt", g_dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_expect_null(fg_text_load(fifo, &o));
    cr_expect_eq(fg_last_status(), FG_ERR_IO, "fifo: %s", fg_last_error());
    cr_expect(strstr(fg_last_error(), "fifo.txt") && strstr(fg_last_error(), "FIFO"), "%s", fg_last_error());
    char ppath[64];
    int pfd = fgt_pipe_with(good, 200, ppath, sizeof ppath);
    fg_text_dataset *piped = fg_text_load(ppath, &o);
    cr_expect_null(piped, "a pipe was read as a text file");
    cr_expect(strstr(fg_last_error(), ppath) && strstr(fg_last_error(), "FIFO/pipe, not a regular file"), "%s",
              fg_last_error());
    fg_text_free(piped);
    close(pfd);

    expect_refused("empty.txt", "", 0, FG_TOK_CHAR, FG_ERR_FORMAT, "empty");
    expect_refused("empty_bytes.bin", "", 0, FG_TOK_BYTE, FG_ERR_FORMAT, "empty");
    good[77] = '\0';
    expect_refused("nul.txt", good, 200, FG_TOK_CHAR, FG_ERR_FORMAT, "offset 77");
    good[77] = 'a';
    good[150] = (char)0xff;
    expect_refused("ff.txt", good, 200, FG_TOK_CHAR, FG_ERR_FORMAT, "UTF-8 at offset 150");
    memcpy(good + 150, "\xc0\x80", 2); /* overlong NUL */
    expect_refused("overlong.txt", good, 200, FG_TOK_CHAR, FG_ERR_FORMAT, "UTF-8");
    memcpy(good + 150, "\xed\xa0\x80", 3); /* a UTF-16 surrogate */
    expect_refused("surrogate.txt", good, 200, FG_TOK_CHAR, FG_ERR_FORMAT, "UTF-8");
    memcpy(good + 150, "\xf4\x90\x80\x80", 4); /* above U+10FFFF */
    expect_refused("toobig.txt", good, 200, FG_TOK_CHAR, FG_ERR_FORMAT, "UTF-8");
    memcpy(good + 198, "\xe2\x82", 2); /* truncated at end of file */
    memcpy(good + 150, "abcd", 4);
    expect_refused("truncated.txt", good, 200, FG_TOK_CHAR, FG_ERR_FORMAT, "UTF-8 at offset 198");
    memcpy(good + 198, "ab", 2);
    good[10] = 0x1b;
    good[20] = 0x07;
    good[30] = 0x7f; /* 3 control bytes in 200 > 1% */
    expect_refused("controls.txt", good, 200, FG_TOK_CHAR, FG_ERR_FORMAT, "binary");
    expect_refused("short.txt", "abcdefgh", 8, FG_TOK_CHAR, FG_ERR_FORMAT, "too short");
    expect_refused("short.bin", "abcdefgh", 8, FG_TOK_BYTE, FG_ERR_FORMAT, "too short");
    free(good);
}

Test(text, valid_utf8_and_sparse_controls_are_text_and_byte_level_takes_anything) {
    /* multi-byte UTF-8 (2, 3 and 4 bytes), tabs, CRLF, form feed and one escape byte in > 100 */
    char buf[400];
    size_t n = 0;
    for (int i = 0; i < 12; i++) {
        const char *piece = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\tok\r\n\f";
        memcpy(buf + n, piece, strlen(piece));
        n += strlen(piece);
    }
    buf[5] = 0x1b;
    fg_text_options o = fg_text_default_options(8);
    fg_text_dataset *ds = fg_text_load(write_file("utf8.txt", buf, n), &o);
    cr_assert_not_null(ds, "%s", fg_last_error());
    fg_text_free(ds);
    /* byte-level accepts binary data and has vocab 256 */
    unsigned char bin[300];
    uint64_t r = 9;
    for (int i = 0; i < 300; i++) bin[i] = (unsigned char)mix(&r);
    bin[0] = 0;
    o.kind = FG_TOK_BYTE;
    ds = fg_text_load(write_file("data.bin", bin, 300), &o);
    cr_assert_not_null(ds, "%s", fg_last_error());
    cr_expect_eq(fg_text_vocab_size(ds), 256);
    const int32_t *t = fg_text_split_data(ds, FG_SPLIT_TRAIN);
    for (int i = 0; i < 270; i++) cr_assert_eq(t[i], bin[i], "token %d", i);
    fg_text_free(ds);
}

Test(text, a_given_tokenizer_is_used_and_unknown_bytes_refused) {
    fg_tokenizer *tok = fg_tokenizer_char_from_text("abcdefghijklmnopqrstuvwxyz \n", 28);
    cr_assert_not_null(tok);
    char *s = make_text(500, 5); /* only a-z, space, newline */
    fg_text_options o = fg_text_default_options(8);
    o.tokenizer = tok;
    fg_text_dataset *ds = fg_text_from_memory(s, 500, "given", &o);
    cr_assert_not_null(ds, "%s", fg_last_error());
    cr_expect_eq(fg_text_vocab_size(ds), 28);
    const int32_t *t = fg_text_split_data(ds, FG_SPLIT_TRAIN);
    for (int i = 0; i < 450; i++) cr_assert_eq(t[i], fg_tokenizer_token_of(tok, (unsigned char)s[i]), "token %d", i);
    fg_text_free(ds);
    s[321] = 'Q';
    fg_clear_error();
    cr_expect_null(fg_text_from_memory(s, 500, "given", &o));
    cr_expect_eq(fg_last_status(), FG_ERR_FORMAT);
    cr_expect(strstr(fg_last_error(), "'Q'") && strstr(fg_last_error(), "offset 321") &&
                  strstr(fg_last_error(), "given"),
              "message: %s", fg_last_error());
    free(s);
    fg_tokenizer_free(tok);
}

Test(text, memory_loader_is_total_on_random_bytes) {
    uint64_t r = 77;
    unsigned char buf[256];
    int iters = sanitize_build() ? 300 : 2000, loaded = 0;
    for (int it = 0; it < iters; it++) {
        size_t n = (size_t)(mix(&r) % sizeof buf);
        int mostly_text = it % 2;
        for (size_t i = 0; i < n; i++) {
            uint64_t v = mix(&r);
            buf[i] = mostly_text && v % 64 ? (unsigned char)('a' + v % 26) : (unsigned char)(v >> 8);
        }
        fg_text_options o = fg_text_default_options(1 + (int)(mix(&r) % 16));
        o.kind = (fg_tok_kind)(mix(&r) % 2);
        o.val_fraction = (double)(mix(&r) % 6) / 10.0;
        fg_text_dataset *ds = fg_text_from_memory(buf, n, NULL, &o);
        if (!ds) {
            cr_assert_neq(fg_last_status(), FG_OK, "iteration %d: NULL without an error status", it);
            continue;
        }
        loaded++;
        int32_t x[16 * 2], y[16 * 2];
        cr_assert_eq(fg_text_batch(ds, FG_SPLIT_TRAIN, 2, o.block_size, 1, (uint64_t)it, x, y), FG_OK,
                     "iteration %d: %s", it, fg_last_error());
        for (int i = 0; i < 2 * o.block_size; i++)
            cr_assert(x[i] >= 0 && x[i] < fg_text_vocab_size(ds) && y[i] >= 0 && y[i] < fg_text_vocab_size(ds));
        fg_text_free(ds);
    }
    cr_assert_gt(loaded, iters / 10, "only %d of %d buffers loaded", loaded, iters);
}

Test(text, tiny_shakespeare_loads_with_vocab_65) {
    if (access(TS_PATH, R_OK) != 0)
        cr_skip_test(TS_PATH " not found (tests run from the repo root; it is optional reference data)");
    fg_text_options o = fg_text_default_options(64);
    fg_text_dataset *ds = fg_text_load(TS_PATH, &o);
    cr_assert_not_null(ds, "%s", fg_last_error());
    cr_expect_eq(fg_text_vocab_size(ds), 65, "vocab %d", fg_text_vocab_size(ds));
    size_t n = fg_text_num_tokens(ds);
    cr_expect_eq(n, 1115394, "tokens %zu", n);
    cr_expect_eq(fg_text_split_tokens(ds, FG_SPLIT_VAL), n / 10);
    cr_expect_eq(fg_text_split_tokens(ds, FG_SPLIT_TRAIN), n - n / 10);
    char head[13];
    cr_assert_eq(fg_tokenizer_decode(fg_text_tokenizer(ds), fg_text_split_data(ds, FG_SPLIT_TRAIN), 13, head), FG_OK);
    cr_expect(memcmp(head, "First Citizen", 13) == 0, "starts with '%.13s'", head);
    char *ser = fg_tokenizer_serialize(fg_text_tokenizer(ds));
    /* 65 characters: \n, space, !$&',-.3:;? and the two alphabets */
    cr_expect_str_eq(ser, "char-v1:0a20212426272c2d2e333a3b3f"
                          "4142434445464748494a4b4c4d4e4f505152535455565758595a"
                          "6162636465666768696a6b6c6d6e6f707172737475767778797a");
    free(ser);
    int32_t x[4 * 64], y[4 * 64];
    cr_expect_eq(fg_text_batch(ds, FG_SPLIT_VAL, 4, 64, 1, 0, x, y), FG_OK, "%s", fg_last_error());
    fg_text_free(ds);
}

/* ==================================== addition ==================================== */

TestSuite(addition, .timeout = 60);

static const char ADD_CHARS[] = "\n+0123456789="; /* token id -> character, the documented vocabulary */

/* Parses the characters of a row "a+b=rev(c)\n" for n digits into numbers; returns 0 if malformed. */
static int parse_row(const char *s, int n, uint64_t *a, uint64_t *b, uint64_t *c) {
    int L = 3 * n + 4;
    if ((int)strlen(s) != L || s[n] != '+' || s[2 * n + 1] != '=' || s[L - 1] != '\n') return 0;
    char ra[16], rb[16], rc[16];
    memcpy(ra, s, n);
    ra[n] = 0;
    memcpy(rb, s + n + 1, n);
    rb[n] = 0;
    for (int i = 0; i <= n; i++) rc[i] = s[3 * n + 2 - i]; /* un-reverse */
    rc[n + 1] = 0;
    if (strspn(ra, "0123456789") != (size_t)n || strspn(rb, "0123456789") != (size_t)n ||
        strspn(rc, "0123456789") != (size_t)n + 1)
        return 0;
    *a = strtoull(ra, NULL, 10);
    *b = strtoull(rb, NULL, 10);
    *c = strtoull(rc, NULL, 10);
    return 1;
}

/* Row r of a batch as characters: x[r, :] followed by the last target. */
static void row_string(const int32_t *x, const int32_t *y, int T, int r, char *out) {
    for (int t = 0; t < T; t++) out[t] = x[r * T + t] >= 0 && x[r * T + t] < 13 ? ADD_CHARS[x[r * T + t]] : '?';
    int32_t last = y[r * T + T - 1];
    out[T] = last >= 0 && last < 13 ? ADD_CHARS[last] : '?';
    out[T + 1] = 0;
}

/* The held-out rule recomputed from Philox, as documented in addition.h. */
static int ref_is_val(uint64_t split_seed, uint64_t p10, uint64_t a, uint64_t b, double frac) {
    uint64_t stream = (0x4144442BULL << 32) | 0x200u;
    return fg_philox_u32(split_seed, stream, a * p10 + b) < (uint32_t)(frac * 4294967296.0);
}

Test(addition, layout_and_vocabulary_match_the_documentation) {
    fg_addition_config cfg = fg_addition_default_config();
    cr_assert_eq(cfg.n_digits, 3);
    fg_addition *t = fg_addition_create(&cfg);
    cr_assert_not_null(t, "%s", fg_last_error());
    cr_expect_eq(fg_addition_seq_len(t), 13);
    cr_expect_eq(fg_addition_block_size(t), 12);
    cr_expect_eq(fg_addition_prompt_len(t), 8);
    cr_expect_eq(fg_addition_answer_len(t), 5);
    cr_expect_eq(fg_addition_vocab_size(t), 13);
    int32_t seq[13];
    char str[14];
    cr_assert_eq(fg_addition_encode(t, 123, 989, seq), FG_OK);
    cr_assert_eq(fg_tokenizer_decode(fg_addition_tokenizer(t), seq, 13, str), FG_OK);
    str[13] = 0;
    cr_expect_str_eq(str, "123+989=2111\n");
    cr_assert_eq(fg_addition_encode(t, 5, 7, seq), FG_OK);
    cr_assert_eq(fg_tokenizer_decode(fg_addition_tokenizer(t), seq, 13, str), FG_OK);
    cr_expect_str_eq(str, "005+007=2100\n");
    for (int i = 0; i < 13; i++)
        cr_expect_eq(fg_tokenizer_token_of(fg_addition_tokenizer(t), (unsigned char)ADD_CHARS[i]), i, "char %d", i);
    char *ser = fg_tokenizer_serialize(fg_addition_tokenizer(t));
    cr_expect_str_eq(ser, "char-v1:0a2b303132333435363738393d");
    free(ser);
    uint64_t a, b, c;
    cr_assert_eq(fg_addition_decode(t, seq, &a, &b, &c), FG_OK);
    cr_expect(a == 5 && b == 7 && c == 12, "decoded %llu %llu %llu", (unsigned long long)a, (unsigned long long)b,
              (unsigned long long)c);
    seq[3] = FG_ADD_TOK_DIGIT(1); /* '+' replaced by a digit */
    cr_expect_eq(fg_addition_decode(t, seq, &a, &b, &c), FG_ERR_FORMAT);
    cr_expect(strstr(fg_last_error(), "position 3"), "%s", fg_last_error());
    cr_expect_eq(fg_addition_encode(t, 1000, 1, seq), FG_ERR_ARG);
    fg_addition_free(t);
}

Test(addition, every_generated_example_is_correct_arithmetic) {
    for (int n = 1; n <= 9; n++) {
        fg_addition_config cfg = fg_addition_default_config();
        cfg.n_digits = n;
        fg_addition *t = fg_addition_create(&cfg);
        cr_assert_not_null(t, "n=%d: %s", n, fg_last_error());
        int B = 64, T = fg_addition_block_size(t);
        cr_assert_eq(T, 3 * n + 3);
        int32_t *x = malloc(sizeof(int32_t) * B * T), *y = malloc(sizeof(int32_t) * B * T);
        uint64_t p10 = 1;
        for (int i = 0; i < n; i++) p10 *= 10;
        uint64_t max_a = 0;
        for (int sp = 0; sp < 2; sp++)
            for (uint64_t step = 0; step < 4; step++) {
                cr_assert_eq(fg_addition_batch(t, (fg_split)sp, B, T, 11, step, x, y), FG_OK, "%s", fg_last_error());
                for (int r = 0; r < B; r++) {
                    char s[40];
                    uint64_t a, b, c;
                    row_string(x, y, T, r, s);
                    cr_assert(parse_row(s, n, &a, &b, &c), "n=%d row %d malformed: '%s'", n, r, s);
                    cr_assert_eq(a + b, c, "n=%d row %d: %llu + %llu != %llu ('%s')", n, r, (unsigned long long)a,
                                 (unsigned long long)b, (unsigned long long)c, s);
                    cr_assert(a < p10 && b < p10);
                    for (int i = 0; i + 1 < T; i++)
                        cr_assert_eq(y[r * T + i], x[r * T + i + 1], "n=%d row %d: y[%d] != x[%d]", n, r, i, i + 1);
                    if (a > max_a) max_a = a;
                }
            }
        /* operands use the whole range: 512 draws, the largest should be in the top 5% */
        cr_expect_geq(max_a, p10 - 1 - p10 / 20, "n=%d: largest a in 512 draws is %llu", n, (unsigned long long)max_a);
        free(x);
        free(y);
        fg_addition_free(t);
    }
}

Test(addition, validation_problems_never_appear_in_training_batches) {
    const int ns[] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        int n = ns[k];
        fg_addition_config cfg = fg_addition_default_config();
        cfg.n_digits = n;
        cfg.split_seed = 3;
        fg_addition *t = fg_addition_create(&cfg);
        cr_assert_not_null(t, "%s", fg_last_error());
        uint64_t p10 = 1;
        for (int i = 0; i < n; i++) p10 *= 10;
        /* the rule holds out ~10% of all pairs (exact count for n <= 2) */
        if (n == 2) {
            int held = 0;
            for (uint64_t a = 0; a < p10; a++)
                for (uint64_t b = 0; b < p10; b++) {
                    int v = fg_addition_is_val(t, a, b);
                    cr_assert_eq(v, ref_is_val(3, p10, a, b, 0.1), "pair (%llu, %llu)", (unsigned long long)a,
                                 (unsigned long long)b);
                    held += v;
                }
            cr_expect(held > 850 && held < 1150, "n=2: %d of 10000 pairs held out", held);
        }
        int B = 256, T = fg_addition_block_size(t), steps = sanitize_build() ? 8 : 40;
        int32_t *x = malloc(sizeof(int32_t) * B * T), *y = malloc(sizeof(int32_t) * B * T);
        for (int sp = 0; sp < 2; sp++)
            for (int step = 0; step < steps; step++) {
                cr_assert_eq(fg_addition_batch(t, (fg_split)sp, B, T, 1, (uint64_t)step, x, y), FG_OK);
                for (int r = 0; r < B; r++) {
                    char s[40];
                    uint64_t a, b, c;
                    row_string(x, y, T, r, s);
                    cr_assert(parse_row(s, n, &a, &b, &c), "'%s'", s);
                    cr_assert_eq(ref_is_val(3, p10, a, b, 0.1), sp == FG_SPLIT_VAL,
                                 "n=%d %s batch step %d row %d holds %s problem %llu+%llu", n,
                                 fg_split_name((fg_split)sp), step, r, sp ? "a training" : "a held-out",
                                 (unsigned long long)a, (unsigned long long)b);
                }
            }
        free(x);
        free(y);
        fg_addition_free(t);
    }
}

Test(addition, one_digit_training_pairs_are_drawn_uniformly) {
    fg_addition_config cfg = fg_addition_default_config();
    cfg.n_digits = 1;
    fg_addition *t = fg_addition_create(&cfg);
    cr_assert_not_null(t, "%s", fg_last_error());
    int train_pairs = 0, counts[100] = {0};
    for (int p = 0; p < 100; p++) train_pairs += !ref_is_val(0, 10, (uint64_t)(p / 10), (uint64_t)(p % 10), 0.1);
    int B = 1000, T = 6, rows = 30000;
    int32_t *x = malloc(sizeof(int32_t) * B * T), *y = malloc(sizeof(int32_t) * B * T);
    for (int step = 0; step < rows / B; step++) {
        cr_assert_eq(fg_addition_batch(t, FG_SPLIT_TRAIN, B, T, 8, (uint64_t)step, x, y), FG_OK);
        for (int r = 0; r < B; r++) counts[(x[r * T] - 2) * 10 + (x[r * T + 2] - 2)]++;
    }
    double expect = (double)rows / train_pairs; /* ~333, sd ~18 */
    for (int p = 0; p < 100; p++) {
        if (ref_is_val(0, 10, (uint64_t)(p / 10), (uint64_t)(p % 10), 0.1))
            cr_expect_eq(counts[p], 0, "held-out pair %d drawn %d times", p, counts[p]);
        else
            cr_expect(fabs(counts[p] - expect) < 6 * sqrt(expect), "pair %d drawn %d times, expected ~%.0f", p,
                      counts[p], expect);
    }
    free(x);
    free(y);
    fg_addition_free(t);
}

Test(addition, optimum_matches_hand_computation) {
    fg_addition_config cfg = fg_addition_default_config();
    fg_addition *t = fg_addition_create(&cfg);
    cr_assert_not_null(t);
    /* n = 3: targets a2 a3 (ln 10 each) '+' b1 b2 b3 (ln 10 each) '=' c0..c3 '\n' -> 5 ln 10 / 12.
     * ln 10 = 2.302585092994046; 5 * that / 12 = 0.959410455414186. */
    double got = fg_addition_optimal_loss(t);
    cr_expect(fabs(got - 0.959410455414186) < 1e-12, "optimum %.15f, expected 0.959410455414186", got);
    fg_addition_free(t);
    cfg.answer_only = 1;
    t = fg_addition_create(&cfg);
    cr_expect_eq(fg_addition_optimal_loss(t), 0.0);
    fg_addition_free(t);

    /* The claim behind the formula: for n = 2, targets at operand-digit positions take all 10
     * digits, and every other target is a function of the inputs before it. Check on 4096 rows by
     * comparing rows that share a prefix (sorting would be neater; 4096^2/2 pairs are cheap). */
    cfg.answer_only = 0;
    cfg.n_digits = 2;
    t = fg_addition_create(&cfg);
    int B = 4096, T = 9, n = 2;
    int32_t *x = malloc(sizeof(int32_t) * B * T), *y = malloc(sizeof(int32_t) * B * T);
    cr_assert_eq(fg_addition_batch(t, FG_SPLIT_TRAIN, B, T, 4, 0, x, y), FG_OK);
    for (int pos = 0; pos < T; pos++) {
        int uniform = (pos <= n - 2) || (pos >= n && pos <= 2 * n - 1);
        int seen[13] = {0}, distinct = 0;
        for (int r = 0; r < B; r++) distinct += !seen[y[r * T + pos]]++;
        if (uniform) {
            cr_expect_eq(distinct, 10, "target %d (an operand digit) takes %d values", pos, distinct);
            continue;
        }
        cr_expect_eq(distinct > 1 || pos == n - 1 || pos == 2 * n || pos == T - 1, 1);
        if (sanitize_build() && pos % 3) continue; /* keep the quadratic check short under ASan */
        for (int r = 0; r < B; r++)
            for (int q = r + 1; q < B; q++)
                if (memcmp(x + r * T, x + q * T, sizeof(int32_t) * (pos + 1)) == 0)
                    cr_assert_eq(y[r * T + pos], y[q * T + pos],
                                 "target %d differs for rows %d and %d with the "
                                 "same prefix: it is not determined",
                                 pos, r, q);
    }
    free(x);
    free(y);
    fg_addition_free(t);
}

Test(addition, answer_only_mode_masks_everything_but_the_answer) {
    fg_addition_config cfg = fg_addition_default_config();
    fg_addition *full = fg_addition_create(&cfg);
    cfg.answer_only = 1;
    fg_addition *mask = fg_addition_create(&cfg);
    cr_assert(full && mask);
    enum { B = 16, T = 12 };
    int32_t xf[B * T], yf[B * T], xm[B * T], ym[B * T];
    cr_assert_eq(fg_addition_batch(full, FG_SPLIT_TRAIN, B, T, 2, 3, xf, yf), FG_OK);
    cr_assert_eq(fg_addition_batch(mask, FG_SPLIT_TRAIN, B, T, 2, 3, xm, ym), FG_OK);
    cr_assert(memcmp(xf, xm, sizeof xf) == 0, "masking changed the inputs");
    for (int r = 0; r < B; r++)
        for (int i = 0; i < T; i++) {
            /* answer targets: c0..c3 and '\n' = y[7..11] for n = 3 */
            if (i >= 7)
                cr_assert_eq(ym[r * T + i], yf[r * T + i], "row %d target %d", r, i);
            else
                cr_assert_eq(ym[r * T + i], -1, "row %d target %d is %d, not masked", r, i, ym[r * T + i]);
        }
    fg_addition_free(full);
    fg_addition_free(mask);
}

Test(addition, batches_are_deterministic_in_seed_and_step) {
    fg_addition_config cfg = fg_addition_default_config();
    fg_addition *t = fg_addition_create(&cfg);
    enum { B = 8, T = 12 };
    int32_t x1[2 * B * T], y1[2 * B * T], x2[2 * B * T], y2[2 * B * T];
    cr_assert_eq(fg_addition_batch(t, FG_SPLIT_TRAIN, B, T, 42, 7, x1, y1), FG_OK);
    cr_assert_eq(fg_addition_batch(t, FG_SPLIT_TRAIN, B, T, 42, 8, x2, y2), FG_OK);
    cr_assert(memcmp(x1, x2, sizeof(int32_t) * B * T) != 0, "steps 7 and 8 gave the same batch");
    cr_assert_eq(fg_addition_batch(t, FG_SPLIT_TRAIN, B, T, 43, 7, x2, y2), FG_OK);
    cr_assert(memcmp(x1, x2, sizeof(int32_t) * B * T) != 0, "seeds 42 and 43 gave the same batch");
    cr_assert_eq(fg_addition_batch(t, FG_SPLIT_TRAIN, B, T, 42, 7, x2, y2), FG_OK);
    cr_assert(memcmp(x1, x2, sizeof(int32_t) * B * T) == 0 && memcmp(y1, y2, sizeof(int32_t) * B * T) == 0);
    /* a second task object with the same config gives the same batch */
    fg_addition *t2 = fg_addition_create(&cfg);
    cr_assert_eq(fg_addition_batch(t2, FG_SPLIT_TRAIN, B, T, 42, 7, x2, y2), FG_OK);
    cr_assert(memcmp(x1, x2, sizeof(int32_t) * B * T) == 0);
    /* rows are a function of step*B + r */
    cr_assert_eq(fg_addition_batch(t, FG_SPLIT_TRAIN, 2 * B, T, 42, 3, x2, y2), FG_OK);
    cr_assert(memcmp(x1, x2 + B * T, sizeof(int32_t) * B * T) == 0);
    cr_expect_eq(fg_addition_batch(t, FG_SPLIT_TRAIN, B, 13, 42, 7, x2, y2), FG_ERR_ARG, "wrong T accepted");
    cr_expect(strstr(fg_last_error(), "12"), "%s", fg_last_error());
    cr_expect_eq(fg_addition_batch(t, FG_SPLIT_TRAIN, 0, T, 42, 7, x2, y2), FG_ERR_ARG);
    fg_addition_free(t);
    fg_addition_free(t2);
}

/* A perfect "model": reads a and b from the prompt characters and writes the answer. */
static fg_status oracle(void *ctx, const int32_t *prompt, int plen, int32_t *out, int olen) {
    int n = *(int *)ctx;
    cr_assert_eq(plen, 2 * n + 2);
    cr_assert_eq(olen, n + 2);
    uint64_t a = 0, b = 0;
    for (int i = 0; i < n; i++) a = a * 10 + (uint64_t)(ADD_CHARS[prompt[i]] - '0');
    for (int i = 0; i < n; i++) b = b * 10 + (uint64_t)(ADD_CHARS[prompt[n + 1 + i]] - '0');
    uint64_t c = a + b;
    for (int i = 0; i <= n; i++, c /= 10) out[i] = (int32_t)(2 + c % 10);
    out[n + 1] = 0;
    return FG_OK;
}
/* A model that is right only when the answer's lowest digit is even. */
static fg_status half_oracle(void *ctx, const int32_t *prompt, int plen, int32_t *out, int olen) {
    oracle(ctx, prompt, plen, out, olen);
    if ((out[0] - 2) % 2) out[1] = out[1] == 2 ? 3 : 2;
    return FG_OK;
}
static fg_status failing(void *ctx, const int32_t *prompt, int plen, int32_t *out, int olen) {
    (void)ctx;
    (void)prompt;
    (void)plen;
    (void)out;
    (void)olen;
    return fg_error(FG_ERR_NUMERIC, "model diverged");
}

Test(addition, problems_are_held_out_and_accuracy_counts_exact_matches) {
    fg_addition_config cfg = fg_addition_default_config();
    fg_addition *t = fg_addition_create(&cfg);
    int n = 3;
    int32_t p[8], ans[5], seq[13];
    uint64_t a, b;
    for (uint64_t i = 0; i < 200; i++) {
        cr_assert_eq(fg_addition_problem(t, FG_SPLIT_VAL, i, p, ans, &a, &b), FG_OK);
        cr_assert(ref_is_val(0, 1000, a, b, 0.1), "problem %llu (%llu+%llu) is not held out", (unsigned long long)i,
                  (unsigned long long)a, (unsigned long long)b);
        cr_assert_eq(fg_addition_encode(t, a, b, seq), FG_OK);
        cr_assert(memcmp(p, seq, sizeof p) == 0 && memcmp(ans, seq + 8, sizeof ans) == 0, "problem %llu",
                  (unsigned long long)i);
        uint64_t a2, b2;
        int32_t p2[8], ans2[5];
        cr_assert_eq(fg_addition_problem(t, FG_SPLIT_VAL, i, p2, ans2, &a2, &b2), FG_OK);
        cr_assert(a2 == a && b2 == b, "problem %llu is not deterministic", (unsigned long long)i);
        cr_assert_eq(fg_addition_problem(t, FG_SPLIT_TRAIN, i, p2, ans2, &a2, &b2), FG_OK);
        cr_assert(!ref_is_val(0, 1000, a2, b2, 0.1), "training problem %llu is held out", (unsigned long long)i);
    }
    double acc = -1;
    cr_assert_eq(fg_addition_accuracy(t, FG_SPLIT_VAL, 300, oracle, &n, &acc), FG_OK, "%s", fg_last_error());
    cr_expect_eq(acc, 1.0, "oracle accuracy %g", acc);
    /* reference count of problems whose lowest answer digit is even */
    int even = 0;
    for (uint64_t i = 0; i < 300; i++) {
        fg_addition_problem(t, FG_SPLIT_VAL, i, p, ans, &a, &b);
        even += (a + b) % 2 == 0;
    }
    cr_assert_eq(fg_addition_accuracy(t, FG_SPLIT_VAL, 300, half_oracle, &n, &acc), FG_OK);
    cr_expect(fabs(acc - even / 300.0) < 1e-12, "accuracy %g, expected %g", acc, even / 300.0);
    cr_expect_eq(fg_addition_accuracy(t, FG_SPLIT_VAL, 10, failing, &n, &acc), FG_ERR_NUMERIC);
    cr_expect_eq(fg_addition_accuracy(t, FG_SPLIT_VAL, 0, oracle, &n, &acc), FG_ERR_ARG);
    fg_addition_free(t);
}

Test(addition, bad_configs_are_refused) {
    struct {
        const char *name;
        int n;
        int answer_only;
        double frac;
    } cases[] = {
        {"0 digits", 0, 0, 0.1},
        {"10 digits", 10, 0, 0.1},
        {"no held-out share", 3, 0, 0.0},
        {"held-out share above half", 3, 0, 0.6},
        {"NaN share", 3, 0, NAN},
        {"answer_only 2", 3, 2, 0.1},
        {"1 digit with a tiny share (empty split)", 1, 0, 1e-6},
        {"3 digits with < 1000 held out", 3, 0, 1e-4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fg_addition_config cfg = fg_addition_default_config();
        cfg.n_digits = cases[i].n;
        cfg.answer_only = cases[i].answer_only;
        cfg.val_fraction = cases[i].frac;
        fg_clear_error();
        fg_addition *t = fg_addition_create(&cfg);
        cr_expect_null(t, "'%s' accepted", cases[i].name);
        cr_expect_eq(fg_last_status(), FG_ERR_ARG, "'%s': %s", cases[i].name, fg_last_error());
        fg_addition_free(t);
    }
    cr_expect_null(fg_addition_create(NULL));
}
