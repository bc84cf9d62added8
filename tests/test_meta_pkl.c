/* test_meta_pkl.c — nanoGPT's meta.pkl (datasets/meta_pkl.h): the files Python's pickle writes for
 * prepare.py's dict (protocols 2 to 5, tests/fuzz/corpus/meta_pkl/, made with pickle.dumps from
 * Tiny Shakespeare) are read as the character tokenizer of the same text, and every opcode outside
 * the subset is refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/meta_pkl.h"
#include "tensor/fileio.h"

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
    static const unsigned char allowed[] = {0x80, 0x95, '}', '(', 'K', 'M', 'J', 0x8c, 'X', 0x94, 'q', 'r', 'h', 'j',
                                            's',  'u',  '.'};
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
