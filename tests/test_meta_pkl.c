/* test_meta_pkl.c — nanoGPT's meta.pkl (datasets/meta_pkl.h): the files Python's pickle writes for
 * prepare.py's dict (protocols 2 to 5, tests/fuzz/corpus/meta_pkl/, made with pickle.dumps from
 * Tiny Shakespeare) are read as the character tokenizer of the same text, and every opcode outside
 * the subset is refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/meta_pkl.h"
#include <sys/stat.h>

#include "tensor/fileio.h"
#include "tests/common.h"

TestSuite(meta_pkl);

#define CORPUS "tests/fuzz/corpus/meta_pkl/"

Test(meta_pkl, python_pickles_of_nanogpts_dict_give_the_texts_tokenizer) {
    void *text = NULL;
    size_t n = 0;
    const char *sh = "../shared/datasets/tinyshakespeare/input.txt";
    if (fg_read_file(sh, 0, &text, &n) != FG_OK) cr_skip_test("%s not found", sh);
    fg_tokenizer *want = fg_tokenizer_char_from_text(text, n);
    char *ws = fg_tokenizer_serialize(want);
    const char *files[] = {"shakespeare_char_p2.pkl", "shakespeare_char_p3.pkl", "shakespeare_char_p4.pkl",
                           "shakespeare_char_p5.pkl"};
    for (int i = 0; i < 4; i++) {
        char p[256];
        snprintf(p, sizeof p, CORPUS "%s", files[i]);
        fg_tokenizer *t = fg_meta_pkl_load(p);
        cr_assert(t, "%s: %s", files[i], fg_last_error());
        char *ts = fg_tokenizer_serialize(t);
        cr_expect_str_eq(ts, ws, "%s", files[i]);
        cr_expect_eq(fg_tokenizer_vocab_size(t), 65);
        free(ts);
        fg_tokenizer_free(t);
    }
    fg_tokenizer *one = fg_meta_pkl_load(CORPUS "one_char_p4.pkl"); /* SETITEM, not SETITEMS */
    cr_expect(one && fg_tokenizer_vocab_size(one) == 1, "%s", fg_last_error());
    fg_tokenizer_free(one);
    free(ws);
    fg_tokenizer_free(want);
    free(text);
}

Test(meta_pkl, foreign_pickles_are_refused_with_a_reason) {
    struct {
        const char *file, *why;
    } bad[] = {{"bad_float.pkl", "BINFLOAT"},       {"bad_global.pkl", "GLOBAL"},
               {"bad_list.pkl", "EMPTY_LIST"},      {"bad_unsorted.pkl", "increasing order"},
               {"bad_reduce.pkl", "GLOBAL"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char p[256];
        snprintf(p, sizeof p, CORPUS "%s", bad[i].file);
        cr_expect_null(fg_meta_pkl_load(p), "%s was accepted", bad[i].file);
        cr_expect(strstr(fg_last_error(), bad[i].why), "%s: '%s'", bad[i].file, fg_last_error());
    }
}

Test(meta_pkl, every_opcode_outside_the_subset_is_refused) {
    static const unsigned char allowed[] = {0x80, 0x95, '}', '(', 'K', 'M',  'J', 0x8a, 0x8b, 0x8c,
                                            'X',  0x94, 'q', 'r', 'h', 'j', 's', 'u',  '.'};
    int refused = 0;
    for (int op = 0; op < 256; op++) {
        /* PROTO 4, EMPTY_DICT, the opcode with room for an argument, STOP */
        unsigned char b[16] = {0x80, 4, '}', (unsigned char)op, 0, 0, 0, 0, '.'};
        fg_tokenizer *t = fg_meta_pkl_parse(b, 9, "t");
        cr_expect_null(t, "opcode 0x%02x made a tokenizer", op);
        fg_tokenizer_free(t);
        const int in_subset = memchr(allowed, op, sizeof allowed) != NULL;
        char tag[32];
        snprintf(tag, sizeof tag, "(0x%02x) is not", op);
        const int said_refused = strstr(fg_last_error(), tag) != NULL;
        cr_expect_eq(said_refused, !in_subset, "opcode 0x%02x: '%s'", op, fg_last_error());
        refused += said_refused;
    }
    cr_expect_eq(refused, 256 - (int)sizeof allowed);
}

Test(meta_pkl, every_truncation_of_a_good_file_is_refused) {
    void *buf = NULL;
    size_t n = 0;
    cr_assert_eq(fg_read_file(CORPUS "shakespeare_char_p4.pkl", 0, &buf, &n), FG_OK, "%s", fg_last_error());
    for (size_t k = 0; k < n; k++) {
        fg_tokenizer *t = fg_meta_pkl_parse(buf, k, "t");
        cr_expect_null(t, "the first %zu of %zu bytes were accepted", k, n);
        fg_tokenizer_free(t);
    }
    free(buf);
}

/* nanoGPT's shakespeare_char folder (train.bin, val.bin as raw uint16, meta.pkl): train takes its
 * vocabulary from meta.pkl, end-of-run samples and `sample --prompt` are text, and --resume refuses
 * a meta.pkl that changed. */
Test(meta_pkl, data_bin_folder_with_meta_pkl_trains_samples_text_and_resumes, .timeout = 300) {
    void *text = NULL;
    size_t n = 0;
    const char *sh = "../shared/datasets/tinyshakespeare/input.txt";
    if (fg_read_file(sh, 0, &text, &n) != FG_OK) cr_skip_test("%s not found", sh);
    char dir[256], p[600], cmd[2048], log[16384];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_meta_pkl_XXXXXX");
    snprintf(p, sizeof p, "%s/data", dir);
    mkdir(p, 0777);
    fg_tokenizer *t = fg_meta_pkl_load(CORPUS "shakespeare_char_p4.pkl");
    cr_assert(t, "%s", fg_last_error());
    int32_t *ids = malloc(n * sizeof *ids);
    uint16_t *u = malloc(n * sizeof *u);
    cr_assert_eq(fg_tokenizer_encode(t, text, n, ids), FG_OK, "%s", fg_last_error());
    for (size_t i = 0; i < n; i++) u[i] = (uint16_t)ids[i];
    const size_t ntr = n / 10 * 9;
    FILE *f;
    snprintf(p, sizeof p, "%s/data/train.bin", dir);
    cr_assert((f = fopen(p, "wb")));
    fwrite(u, 2, ntr, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/data/val.bin", dir);
    cr_assert((f = fopen(p, "wb")));
    fwrite(u + ntr, 2, n - ntr, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "cp " CORPUS "shakespeare_char_p4.pkl %s/data/meta.pkl", dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "%s train --data-bin %s/data --steps 4 --block-size 16 --batch-size 4 --n-layer 1 --n-embd 32 "
             "--eval-every 4 --eval-iters 1 --samples 1 --out %s/run 2>&1",
             fgt_bin(), dir, dir);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_assert_eq(st, 0, "train exited %d:\n%s", st, log);
    /* the sample is text of the tokenizer's characters (not ids) */
    const char *s = strstr(log, "---- sample 1");
    cr_expect(s && !strstr(s, " 12 "), "no text sample:\n%s", log);
    snprintf(cmd, sizeof cmd, "%s sample --ckpt %s/run --prompt 'ROMEO:' --tokens 10 2>&1", fgt_bin(), dir);
    st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect(st == 0 && !strncmp(log, "ROMEO:", 6), "sample exited %d:\n%s", st, log);
    snprintf(cmd, sizeof cmd, "%s train --data-bin %s/data --steps 6 --resume --out %s/run 2>&1", fgt_bin(), dir, dir);
    st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, 0, "resume exited %d:\n%s", st, log);
    snprintf(cmd, sizeof cmd, "cp " CORPUS "one_char_p4.pkl %s/data/meta.pkl", dir);
    cr_assert_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s train --data-bin %s/data --steps 8 --resume --out %s/run 2>&1", fgt_bin(), dir, dir);
    st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(st, 1, "a changed meta.pkl: resume exited %d:\n%s", st, log);
    cr_expect(strstr(log, "meta.pkl"), "%s", log);
    free(ids);
    free(u);
    free(text);
    fg_tokenizer_free(t);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* ---- LONG1 / LONG4 ----
 * The dict {'vocab_size': X, 'itos': {0: 'a'}, 'stoi': {'a': 0}} with X given as the opcode bytes
 * `xb[0..xn)`. X = 1 gives a one-character tokenizer; any other X is refused with "vocab_size is X",
 * which is how these tests see the decoded value. */
static size_t dict_with_int(unsigned char *b, const unsigned char *xb, size_t xn) {
    static const unsigned char head[] = {0x80, 4, '}', '(', 0x8c, 10, 'v', 'o', 'c', 'a', 'b', '_', 's', 'i', 'z', 'e'};
    static const unsigned char tail[] = {0x8c, 4,    'i', 't', 'o', 's', '}', 'K', 0,   0x8c, 1,   'a', 's',
                                         0x8c, 4,    's', 't', 'o', 'i', '}', 0x8c, 1, 'a',  'K', 0,   's', 'u', '.'};
    size_t n = 0;
    memcpy(b + n, head, sizeof head), n += sizeof head;
    memcpy(b + n, xb, xn), n += xn;
    memcpy(b + n, tail, sizeof tail), n += sizeof tail;
    return n;
}

/* Parses the dict whose vocab_size is the pickled integer xb[0..xn) and checks what it decoded to:
 * `want` (accepted when 1, else named in the refusal), or a refusal saying it is outside int64 when
 * `too_big`. */
static void expect_int_decodes(const unsigned char *xb, size_t xn, long long want, int too_big, const char *what) {
    unsigned char b[512];
    cr_assert(xn < 400);
    size_t n = dict_with_int(b, xb, xn);
    fg_tokenizer *t = fg_meta_pkl_parse(b, n, "t");
    if (too_big) {
        cr_expect_null(t, "%s: an integer outside int64 was accepted", what);
        cr_expect(strstr(fg_last_error(), "outside the 64-bit range"), "%s: '%s'", what, fg_last_error());
    } else if (want == 1) {
        cr_expect(t && fg_tokenizer_vocab_size(t) == 1, "%s: '%s'", what, t ? "" : fg_last_error());
    } else {
        cr_expect_null(t, "%s: vocab_size %lld accepted", what, want);
        const char *v = strstr(fg_last_error(), "vocab_size is ");
        cr_expect(v && strtoll(v + 14, NULL, 10) == want && !strchr(v + 14, ' '), "%s: want %lld, got '%s'", what,
                  want, fg_last_error());
    }
    fg_tokenizer_free(t);
}

/* Hand-built integers; each value worked out from pickle's definition (n bytes, little-endian, two's
 * complement; n = 0 is 0), not from the reader. */
Test(meta_pkl, long1_and_long4_read_little_endian_twos_complement) {
    static const struct {
        unsigned char b[16];
        size_t n;
        long long want;
        int too_big;
    } cases[] = {
        {{0x8a, 1, 0x01}, 3, 1, 0},
        {{0x8a, 2, 0x01, 0x00}, 4, 1, 0},                     /* a needless 0x00: still 1 */
        {{0x8a, 0}, 2, 0, 0},                                 /* no bytes: 0 */
        {{0x8a, 1, 0xff}, 3, -1, 0},                          /* 0xff: -1 */
        {{0x8a, 1, 0x80}, 3, -128, 0},                        /* -2^7 */
        {{0x8a, 2, 0x00, 0x80}, 4, -32768, 0},                /* -2^15 */
        {{0x8a, 2, 0x81, 0x00}, 4, 129, 0},                   /* the 0x00 keeps it positive */
        {{0x8a, 3, 0x00, 0x00, 0xff}, 5, -65536, 0},          /* 0xff0000 - 2^24 */
        {{0x8a, 5, 0x00, 0x00, 0x00, 0x80, 0x00}, 7, 2147483648LL, 0}, /* 2^31, as Python writes it */
        {{0x8a, 5, 0xff, 0xff, 0xff, 0x7f, 0xff}, 7, -2147483649LL, 0}, /* 0xff7fffffff - 2^40 = -2^31 - 1 */
        {{0x8a, 7, 0, 0, 0, 0, 0, 0, 0x80}, 9, -36028797018963968LL, 0}, /* -2^55 */
        {{0x8a, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 10, 9223372036854775807LL, 0},
        {{0x8a, 8, 0, 0, 0, 0, 0, 0, 0, 0x80}, 10, -9223372036854775807LL - 1, 0},
        {{0x8a, 9, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 11, -2, 0}, /* sign bytes past 8 */
        {{0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x00}, 11, 0, 1},                      /* 2^63 */
        {{0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0xff}, 11, 0, 1}, /* -2^63 - 1 */
        {{0x8b, 1, 0, 0, 0, 0x01}, 6, 1, 0},                                        /* LONG4 */
        {{0x8b, 2, 0, 0, 0, 0x00, 0xff}, 7, -256, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char what[32];
        snprintf(what, sizeof what, "case %zu", i);
        expect_int_decodes(cases[i].b, cases[i].n, cases[i].want, cases[i].too_big, what);
    }
    /* a length past the end: refused, not read */
    static const unsigned char runs_past[] = {0x80, 4, '}', 0x8a, 200, 1, '.'};
    cr_expect_null(fg_meta_pkl_parse(runs_past, sizeof runs_past, "t"));
    cr_expect(strstr(fg_last_error(), "runs past the end"), "'%s'", fg_last_error());
}

/* Python's own pickles of ints beyond 32 bits (LONG1), each protocol, where python3 is installed. */
Test(meta_pkl, python_pickles_of_big_ints_read_back_as_python_wrote_them) {
    static const char *const xs[] = {"2**31", "-2**31-1", "2**40+5", "-2**40-7", "2**62", "2**63-1", "-2**63",
                                      "2**63", "-2**63-1", "2**100"};
    for (int proto = 2; proto <= 5; proto++)
        for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
            char cmd[512], out[4096];
            snprintf(cmd, sizeof cmd,
                     "python3 -c \"import pickle; x=%s; print(-2**63 <= x < 2**63, x, "
                     "pickle.dumps({'vocab_size': x, 'itos': {0: 'a'}, 'stoi': {'a': 0}}, %d).hex())\" 2>/dev/null",
                     xs[i], proto);
            if (fgt_run_cmd(cmd, out, sizeof out) != 0) cr_skip_test("python3 is not available");
            char fits[8], xs_dec[64], hex[2048];
            cr_assert_eq(sscanf(out, "%7s %63s %2047s", fits, xs_dec, hex), 3, "python printed '%s'", out);
            const long long x = !strcmp(fits, "True") ? strtoll(xs_dec, NULL, 10) : 0;
            size_t n = strlen(hex) / 2;
            unsigned char b[1024];
            for (size_t k = 0; k < n; k++) {
                unsigned v;
                cr_assert_eq(sscanf(hex + 2 * k, "%2x", &v), 1);
                b[k] = (unsigned char)v;
            }
            fg_tokenizer *t = fg_meta_pkl_parse(b, n, "t");
            cr_expect_null(t, "%s (protocol %d) was accepted as a vocabulary size", xs[i], proto);
            fg_tokenizer_free(t);
            if (!strcmp(fits, "True")) {
                const char *v = strstr(fg_last_error(), "vocab_size is ");
                cr_expect(v && strtoll(v + 14, NULL, 10) == x, "%s (protocol %d): want %lld, got '%s'", xs[i], proto,
                          x, fg_last_error());
            } else {
                cr_expect(strstr(fg_last_error(), "outside the 64-bit range"), "%s (protocol %d): '%s'", xs[i], proto,
                          fg_last_error());
            }
        }
}
