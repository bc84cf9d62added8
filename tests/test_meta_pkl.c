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
