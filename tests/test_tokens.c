/* test_tokens.c — pre-tokenized datasets (datasets/tokens.h): nanoGPT's raw uint16 files and
 * llm.c's headed ones, their refusals, batches as windows of the file, and llm.c's tokenizer file.
 * Every file is made here: a byte-level vocabulary (256) over a random uint16 stream. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datasets/tokens.h"
#include "tensor/fileio.h"
#include "tests/common.h"

static char dir[256];
static void setup(void) { fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_tokens.XXXXXX"); }
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) cr_log_warn("could not remove %s", dir);
}

static const char *at(const char *rel) {
    static char p[4][600];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, rel);
    return p[k];
}

static void write_bytes(const char *rel, const void *data, size_t n) {
    FILE *f = fopen(at(rel), "wb");
    cr_assert(f, "cannot create %s", rel);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* n token ids below v, from a fixed linear congruential stream */
static uint16_t *stream(size_t n, unsigned v, uint32_t seed) {
    uint16_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (uint16_t)((seed >> 8) % v);
    }
    return t;
}

/* an llm.c data file: 256 int32 header (magic, version, count) + the tokens */
static void write_llmc(const char *rel, const uint16_t *t, int32_t count_in_header, size_t n, int32_t magic,
                       int32_t version) {
    int32_t h[256] = {0};
    h[0] = magic;
    h[1] = version;
    h[2] = count_in_header;
    FILE *f = fopen(at(rel), "wb");
    cr_assert(f);
    fwrite(h, sizeof h, 1, f);
    fwrite(t, 2, n, f);
    fclose(f);
}

static void expect_refused(const char *rel, int vocab, fg_status st, const char *phrase) {
    fg_clear_error();
    fg_token_file *f = fg_token_file_open(at(rel), vocab);
    cr_expect_null(f, "%s was accepted", rel);
    fg_token_file_close(f);
    cr_expect_eq(fg_last_status(), st, "%s: status %s: %s", rel, fg_status_name(fg_last_status()), fg_last_error());
    cr_expect(strstr(fg_last_error(), phrase) && strstr(fg_last_error(), rel),
              "%s: the message should name the file and say '%s': %s", rel, phrase, fg_last_error());
}

Test(tokens, both_formats_read_the_same_tokens, .init = setup, .fini = teardown) {
    const size_t n = 5000;
    uint16_t *t = stream(n, 256, 1);
    write_bytes("nano.bin", t, n * 2);
    write_llmc("llmc.bin", t, (int32_t)n, n, FG_LLMC_DATA_MAGIC, 1);
    fg_token_file *a = fg_token_file_open(at("nano.bin"), 256), *b = fg_token_file_open(at("llmc.bin"), 256);
    cr_assert(a && b, "%s", fg_last_error());
    cr_expect_eq(fg_token_file_format(a), FG_TOKFILE_NANOGPT);
    cr_expect_eq(fg_token_file_format(b), FG_TOKFILE_LLMC);
    cr_expect_eq(fg_token_file_count(a), n);
    cr_expect_eq(fg_token_file_count(b), n);
    cr_expect_neq(fg_token_file_hash(a), fg_token_file_hash(b), "different bytes, different identity");
    fg_token_file_close(a);
    fg_token_file_close(b);
    free(t);
}

Test(tokens, bad_files_are_refused_with_the_reason, .init = setup, .fini = teardown) {
    const size_t n = 300;
    uint16_t *t = stream(n, 256, 2);
    write_llmc("truncated.bin", t, (int32_t)n + 7, n, FG_LLMC_DATA_MAGIC, 1);
    expect_refused("truncated.bin", 256, FG_ERR_FORMAT, "truncated");
    write_llmc("padded.bin", t, (int32_t)n - 1, n, FG_LLMC_DATA_MAGIC, 1);
    expect_refused("padded.bin", 256, FG_ERR_FORMAT, "extra bytes");
    write_llmc("version.bin", t, (int32_t)n, n, FG_LLMC_DATA_MAGIC, 2);
    expect_refused("version.bin", 256, FG_ERR_FORMAT, "version 2");
    /* an llm.c header under another magic is refused as such, whatever the vocabulary */
    write_llmc("magic.bin", t, (int32_t)n, n, FG_LLMC_DATA_MAGIC + 1, 1);
    expect_refused("magic.bin", 256, FG_ERR_FORMAT, "wrong magic");
    expect_refused("magic.bin", 65536, FG_ERR_FORMAT, "wrong magic");
    write_llmc("tokenizer.bin", t, (int32_t)n + 9, n, FG_LLMC_TOKENIZER_MAGIC, 2);
    expect_refused("tokenizer.bin", 65536, FG_ERR_FORMAT, "llm.c tokenizer file");
    /* any other first word without that header reads as nanoGPT's raw tokens: the words are ids */
    write_llmc("raw.bin", t, (int32_t)n + 1, n, FG_LLMC_DATA_MAGIC + 1, 1);
    expect_refused("raw.bin", 256, FG_ERR_FORMAT, "outside the vocabulary");
    write_bytes("odd.bin", t, 2 * n - 1);
    expect_refused("odd.bin", 256, FG_ERR_FORMAT, "whole number of uint16");
    write_bytes("empty.bin", "", 0);
    expect_refused("empty.bin", 256, FG_ERR_FORMAT, "empty");
    t[123] = 256; /* one id at the vocabulary's size */
    write_bytes("big.bin", t, 2 * n);
    expect_refused("big.bin", 256, FG_ERR_FORMAT, "token 123 is id 256");
    fg_token_file *ok = fg_token_file_open(at("big.bin"), 257);
    cr_expect_not_null(ok, "with a vocabulary of 257 id 256 is fine: %s", fg_last_error());
    fg_token_file_close(ok);
    cr_assert_eq(mkfifo(at("fifo.bin"), 0600), 0);
    expect_refused("fifo.bin", 256, FG_ERR_IO, "fifo.bin"); /* refused at once, never waits for a writer */
    free(t);
}

/* Is row r of x a window of tok (and y the same window one later)? */
static int is_window(const uint16_t *tok, size_t len, const int32_t *x, const int32_t *y, int T) {
    for (size_t o = 0; o + (size_t)T < len; o++) {
        int ok = 1;
        for (int i = 0; i < T && ok; i++) ok = x[i] == tok[o + i] && y[i] == tok[o + i + 1];
        if (ok) return 1;
    }
    return 0;
}

Test(tokens, batches_are_windows_of_their_split_and_depend_only_on_seed_and_step, .init = setup, .fini = teardown) {
    const size_t ntr = 3000, nva = 800;
    uint16_t *tr = stream(ntr, 256, 3), *va = stream(nva, 256, 4);
    cr_assert_eq(mkdir(at("nano"), 0777), 0);
    write_bytes("nano/train.bin", tr, ntr * 2);
    write_bytes("nano/val.bin", va, nva * 2);
    fg_token_data *d = fg_token_data_open(at("nano"), 256, 16);
    cr_assert(d, "%s", fg_last_error());
    cr_expect_eq(fg_token_data_split_tokens(d, FG_SPLIT_TRAIN), ntr);
    cr_expect_eq(fg_token_data_split_tokens(d, FG_SPLIT_VAL), nva);
    const int B = 4, T = 16;
    int32_t x[64], y[64], x2[64], y2[64];
    cr_assert_eq(fg_token_data_batch(d, FG_SPLIT_TRAIN, B, T, 9, 5, x, y), FG_OK);
    for (int r = 0; r < B; r++)
        cr_expect(is_window(tr, ntr, x + r * T, y + r * T, T), "train row %d is not a window of train.bin", r);
    cr_assert_eq(fg_token_data_batch(d, FG_SPLIT_TRAIN, B, T, 9, 5, x2, y2), FG_OK);
    cr_expect(!memcmp(x, x2, sizeof x) && !memcmp(y, y2, sizeof y), "the same (seed, step) gave another batch");
    cr_assert_eq(fg_token_data_batch(d, FG_SPLIT_TRAIN, B, T, 9, 6, x2, y2), FG_OK);
    cr_expect(memcmp(x, x2, sizeof x), "step 6 drew step 5's batch");
    cr_assert_eq(fg_token_data_batch(d, FG_SPLIT_VAL, B, T, 9, 5, x, y), FG_OK);
    for (int r = 0; r < B; r++)
        cr_expect(is_window(va, nva, x + r * T, y + r * T, T), "val row %d is not a window of val.bin", r);
    fg_token_data_free(d);

    /* one llm.c-named pair in a folder, found by name */
    cr_assert_eq(mkdir(at("llmc"), 0777), 0);
    write_llmc("llmc/shake_train.bin", tr, (int32_t)ntr, ntr, FG_LLMC_DATA_MAGIC, 1);
    write_llmc("llmc/shake_val.bin", va, (int32_t)nva, nva, FG_LLMC_DATA_MAGIC, 1);
    d = fg_token_data_open(at("llmc"), 256, 16);
    cr_assert(d, "%s", fg_last_error());
    cr_expect_eq(fg_token_data_split_tokens(d, FG_SPLIT_VAL), nva);
    fg_token_data_free(d);
    /* the train file named directly finds its val file */
    d = fg_token_data_open(at("llmc/shake_train.bin"), 256, 16);
    cr_assert(d, "%s", fg_last_error());
    cr_expect_not_null(fg_token_data_file(d, FG_SPLIT_VAL), "shake_val.bin was not found beside shake_train.bin");
    fg_token_data_free(d);
    /* a file alone: its last tenth is the validation split */
    write_bytes("alone.bin", tr, ntr * 2);
    d = fg_token_data_open(at("alone.bin"), 256, 16);
    cr_assert(d, "%s", fg_last_error());
    cr_expect_eq(fg_token_data_split_tokens(d, FG_SPLIT_VAL), ntr / 10);
    cr_expect_eq(fg_token_data_split_tokens(d, FG_SPLIT_TRAIN), ntr - ntr / 10);
    fg_token_data_free(d);
    /* too short for the block */
    fg_clear_error();
    cr_expect_null(fg_token_data_open(at("nano"), 256, 900), "val.bin is shorter than block + 1");
    cr_expect(strstr(fg_last_error(), "val split"), "%s", fg_last_error());
    free(tr);
    free(va);
}

Test(tokens, llmc_tokenizer_file_decodes_and_bad_ones_are_refused, .init = setup, .fini = teardown) {
    uint32_t h[256] = {0};
    h[0] = FG_LLMC_TOKENIZER_MAGIC;
    h[1] = 2;
    h[2] = 3;
    h[3] = 2; /* end of text */
    const unsigned char body[] = {2, 'h', 'i', 1, ' ', 5, '<', 'e', 'o', 't', '>'};
    FILE *f = fopen(at("tok.bin"), "wb");
    fwrite(h, sizeof h, 1, f);
    fwrite(body, sizeof body, 1, f);
    fclose(f);
    fg_token_vocab *v = fg_token_vocab_load(at("tok.bin"));
    cr_assert(v, "%s", fg_last_error());
    cr_expect_eq(fg_token_vocab_size(v), 3);
    size_t n = 0;
    const unsigned char *b = fg_token_vocab_bytes(v, 2, &n);
    cr_expect(b && n == 5 && !memcmp(b, "<eot>", 5), "token 2 decodes wrongly");
    cr_expect_null(fg_token_vocab_bytes(v, 3, &n), "id 3 is outside a vocabulary of 3");
    fg_token_vocab_free(v);
    f = fopen(at("short.bin"), "wb");
    fwrite(h, sizeof h, 1, f);
    fwrite(body, sizeof body - 2, 1, f);
    fclose(f);
    fg_clear_error();
    cr_expect_null(fg_token_vocab_load(at("short.bin")));
    cr_expect(strstr(fg_last_error(), "past the end"), "%s", fg_last_error());
    h[0] = 1234;
    f = fopen(at("magic.bin"), "wb");
    fwrite(h, sizeof h, 1, f);
    fclose(f);
    fg_clear_error();
    cr_expect_null(fg_token_vocab_load(at("magic.bin")));
    cr_expect(strstr(fg_last_error(), "magic"), "%s", fg_last_error());
}

/* The process's peak resident memory (VmHWM), in KiB. */
static long peak_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert(f);
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kib = strtol(line + 6, NULL, 10);
    fclose(f);
    return kib;
}

/* An llm.c file of `count` ids, sparse (all ids 0) except id `bad` at index bad_at (when >= 0). */
static void write_sparse_llmc(const char *rel, int64_t count, int64_t bad_at, uint16_t bad) {
    int fd = open(at(rel), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    cr_assert(fd >= 0);
    int32_t h[256] = {FG_LLMC_DATA_MAGIC, 1, (int32_t)count};
    cr_assert_eq(pwrite(fd, h, sizeof h, 0), (ssize_t)sizeof h);
    cr_assert_eq(ftruncate(fd, (off_t)sizeof h + 2 * (off_t)count), 0);
    if (bad_at >= 0) cr_assert_eq(pwrite(fd, &bad, 2, (off_t)sizeof h + 2 * (off_t)bad_at), 2);
    close(fd);
}

Test(tokens, files_beyond_a_gib_open_in_flat_memory_and_every_id_is_checked, .init = setup, .fini = teardown) {
    const int64_t n = (int64_t)600 << 20; /* 1.2 GiB of ids, more than a text file may hold */
    write_sparse_llmc("big.bin", n, -1, 0);
    const long before = peak_rss_kib();
    fg_token_file *f = fg_token_file_open(at("big.bin"), 50257);
    cr_assert(f, "%s", fg_last_error());
    const long grew = peak_rss_kib() - before;
    cr_expect_eq(fg_token_file_count(f), (size_t)n);
    if (!fgt_sanitize()) /* the sanitizers' shadow memory grows with what is read */
        cr_expect(grew < 256 * 1024, "opening a %lld MiB file raised the peak memory by %ld MiB", (long long)(n >> 19),
                  grew / 1024);
    /* the identity is the XXH64 of every byte, read here independently */
    FILE *fp = fopen(at("big.bin"), "rb");
    cr_assert(fp);
    fg_xxh64_state hs;
    fg_xxh64_init(&hs, 0);
    static char buf[1 << 20];
    size_t k;
    while ((k = fread(buf, 1, sizeof buf, fp)) > 0) fg_xxh64_update(&hs, buf, k);
    fclose(fp);
    cr_expect_eq(fg_token_file_hash(f), fg_xxh64_digest(&hs), "the file's hash is not the XXH64 of its bytes");
    fg_token_file_close(f);
    /* one bad id far into the file (past the first chunks the check reads) is found at its index */
    write_sparse_llmc("bad.bin", n, 40000001, 50257);
    expect_refused("bad.bin", 50257, FG_ERR_FORMAT, "token 40000001 is id 50257");
    const int64_t m = (int64_t)70 << 20; /* ids over three of the check's 64 MiB chunks */
    write_sparse_llmc("last.bin", m, m - 1, 65535);
    expect_refused("last.bin", 50257, FG_ERR_FORMAT, "token 73400319 is id 65535");
}

/* Split words in file names are words of their own: a folder holding only eval_train.bin has a train
 * file and no validation one (refused: it would otherwise validate on the training data), and
 * interval.bin / training.bin are neither. */
Test(tokens, split_names_are_whole_words_not_substrings, .init = setup, .fini = teardown) {
    const size_t n = 600;
    uint16_t *t = stream(n, 64, 7);
    cr_assert_eq(mkdir(at("e"), 0777), 0);
    write_bytes("e/eval_train.bin", t, n * 2);
    fg_clear_error();
    fg_token_data *d = fg_token_data_open(at("e"), 64, 16);
    cr_expect_null(d, "a folder with only eval_train.bin opened (train and val the same file?)");
    fg_token_data_free(d);
    write_bytes("e/eval_val.bin", t, 300 * 2);
    d = fg_token_data_open(at("e"), 64, 16);
    cr_assert(d, "eval_train.bin + eval_val.bin: %s", fg_last_error());
    cr_expect_eq(fg_token_data_split_tokens(d, FG_SPLIT_TRAIN), n);
    cr_expect_eq(fg_token_data_split_tokens(d, FG_SPLIT_VAL), 300);
    fg_token_data_free(d);
    cr_assert_eq(mkdir(at("w"), 0777), 0);
    write_bytes("w/training.bin", t, n * 2);
    write_bytes("w/interval.bin", t, n * 2);
    d = fg_token_data_open(at("w"), 64, 16);
    cr_expect_null(d, "training.bin / interval.bin were taken as splits");
    fg_token_data_free(d);
    free(t);
}

/* Window offsets are uniform over 0 .. len - T - 1: the last window, whose target ends at the file's
 * last id, is drawn too (with len = T + 2 there are exactly two windows, each drawn about half the
 * time). */
Test(tokens, the_last_window_of_a_split_is_drawn, .init = setup, .fini = teardown) {
    enum { T = 8, N = T + 2, B = 64 };
    uint16_t t[N];
    for (int i = 0; i < N; i++) t[i] = (uint16_t)i;
    cr_assert_eq(mkdir(at("l"), 0777), 0);
    write_bytes("l/train.bin", t, sizeof t);
    write_bytes("l/val.bin", t, sizeof t);
    fg_token_data *d = fg_token_data_open(at("l"), 64, T);
    cr_assert(d, "%s", fg_last_error());
    int32_t x[B * T], y[B * T];
    int count[2] = {0, 0};
    for (uint64_t step = 0; step < 4; step++) {
        cr_assert_eq(fg_token_data_batch(d, FG_SPLIT_TRAIN, B, T, 11, step, x, y), FG_OK);
        for (int r = 0; r < B; r++) {
            cr_assert(x[r * T] == 0 || x[r * T] == 1, "row %d starts at %d", r, x[r * T]);
            count[x[r * T]]++;
        }
    }
    cr_expect(count[1] > 64 && count[0] > 64, "offsets 0 and 1 drawn %d and %d times of 256", count[0], count[1]);
    fg_token_data_free(d);
}

/* A token file truncated under a running train: one line naming the file and the last good
 * checkpoint, exit 1 (not a silent SIGBUS). */
Test(tokens, a_token_file_truncated_while_training_is_one_line_naming_it, .init = setup, .fini = teardown,
     .timeout = 120) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    const size_t n = (size_t)4 << 20;
    uint16_t *t = stream(n, 64, 5);
    cr_assert_eq(mkdir(at("d"), 0777), 0);
    write_bytes("d/train.bin", t, n * 2);
    write_bytes("d/val.bin", t, 65536 * 2);
    free(t);
    char cmd[2048], log[8192];
    /* the run checkpoints every 20 steps; once its first checkpoint is there the file shrinks to a page */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && { '%s' train --data-bin d --vocab-size 64 --n-layer 1 --n-head 2 --n-embd 16 --block-size 32 "
             "--batch-size 8 --steps 100000000 --eval-every 20 --eval-iters 1 --samples 0 --threads 1 --out r "
             ">/dev/null 2>err.txt & p=$!; i=0; while [ ! -f r/model.safetensors ] && [ $i -lt 600 ]; do sleep 0.1; "
             "i=$((i+1)); done; sleep 0.5; truncate -s 4096 d/train.bin; wait $p; echo \"exit $?\"; cat err.txt; }",
             dir, fgt_bin());
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_assert_eq(st, 0, "%s", log);
    cr_expect(strstr(log, "exit 1\n"), "the run should exit 1:\n%s", log);
    cr_expect(strstr(log, "d/train.bin") && strstr(log, "changed while it was being read") &&
                  strstr(log, "last good checkpoint is in r (step"),
              "the line should name the file and the checkpoint:\n%s", log);
}

/* ---- shard sets: llm.c's many files as one sequence ---- */

/* Expects rows of batch `step` of split s to be the windows of seq (n ids) at the offsets the
 * contract draws (tokens.h: uniform in 0 .. len-T-1 through fg_text_window_offset), seq being the
 * split's ids as the test lays them out itself. */
static void expect_batches_are_windows_of(const fg_token_data *d, fg_split s, const uint16_t *seq, size_t n, int B,
                                          int T, int steps, const char *what) {
    cr_assert_eq(fg_token_data_split_tokens(d, s), n, "%s: the %s split holds %zu ids, the shards %zu", what,
                 fg_split_name(s), fg_token_data_split_tokens(d, s), n);
    int32_t *x = malloc((size_t)B * T * sizeof *x), *y = malloc((size_t)B * T * sizeof *y);
    cr_assert(x && y);
    for (int step = 0; step < steps; step++) {
        cr_assert_eq(fg_token_data_batch(d, s, B, T, 21, (uint64_t)step, x, y), FG_OK, "%s", fg_last_error());
        for (int r = 0; r < B; r++) {
            const uint64_t o = fg_text_window_offset(21, FG_TEXT_STREAM(s), (uint64_t)step * B + r, n - (size_t)T);
            for (int t = 0; t < T; t++)
                cr_assert(x[r * T + t] == seq[o + t] && y[r * T + t] == seq[o + t + 1],
                          "%s: %s step %d row %d id %d: x %d y %d, the shards' sequence has %d %d at offset %llu", what,
                          fg_split_name(s), step, r, t, x[r * T + t], y[r * T + t], seq[o + t], seq[o + t + 1],
                          (unsigned long long)o);
        }
    }
    free(x);
    free(y);
}

/* Shards are taken in llm.c's order (glob's sorted list: byte order), from a folder or a pattern, and
 * read as one sequence: with shards of 5 to 9 ids and T = 16, every window crosses two or more
 * boundaries. Shards of both formats may mix. */
Test(tokens, shards_are_one_sequence_in_llmc_order_and_windows_cross_them, .init = setup, .fini = teardown) {
    static const char *const names[] = {"fw_train_2.bin", "fw_train_10.bin", "fw_train_1.bin",
                                        "fw_train_B.bin", "fw_train_a.bin",  "fw_train_01.bin"};
    /* byte order: "01" < "1" < "10" < "2" < "B" < "a" */
    static const int order[] = {5, 2, 1, 0, 3, 4};
    enum { NS = 6, T = 16 };
    cr_assert_eq(mkdir(at("fw"), 0777), 0);
    uint16_t *tok[NS], seq[NS * 9];
    size_t len[NS], n = 0;
    for (int i = 0; i < NS; i++) {
        len[i] = 5 + (size_t)i % 5;
        tok[i] = stream(len[i], 300, 100 + (uint32_t)i);
        char rel[64];
        snprintf(rel, sizeof rel, "fw/%s", names[i]);
        if (i % 2)
            write_llmc(rel, tok[i], (int32_t)len[i], len[i], FG_LLMC_DATA_MAGIC, 1);
        else
            write_bytes(rel, tok[i], len[i] * 2);
    }
    for (int k = 0; k < NS; k++) {
        memcpy(seq + n, tok[order[k]], len[order[k]] * 2);
        n += len[order[k]];
    }
    uint16_t *va = stream(40, 300, 99), *vb = stream(30, 300, 98), vseq[70];
    write_llmc("fw/fw_val_1.bin", va, 40, 40, FG_LLMC_DATA_MAGIC, 1);
    write_llmc("fw/fw_val_0.bin", vb, 30, 30, FG_LLMC_DATA_MAGIC, 1);
    memcpy(vseq, vb, 60);
    memcpy(vseq + 30, va, 80);
    const char *const args[] = {at("fw"), at("fw/fw_train_*.bin"), at("fw/*train*.bin")};
    for (int a = 0; a < 3; a++) {
        fg_token_data *d = fg_token_data_open(args[a], 300, T);
        cr_assert(d, "%s: %s", args[a], fg_last_error());
        cr_expect_eq(fg_token_data_sharded(d), 1);
        cr_assert_eq(fg_token_data_file_count(d, FG_SPLIT_TRAIN), NS);
        for (int k = 0; k < NS; k++) {
            const char *p = fg_token_file_path(fg_token_data_shard(d, FG_SPLIT_TRAIN, k)), *b = strrchr(p, '/');
            cr_expect_str_eq(b ? b + 1 : p, names[order[k]], "%s: shard %d", args[a], k);
        }
        expect_batches_are_windows_of(d, FG_SPLIT_TRAIN, seq, n, 8, T, 6, args[a]);
        expect_batches_are_windows_of(d, FG_SPLIT_VAL, vseq, 70, 8, T, 3, args[a]);
        fg_token_data_free(d);
    }
    /* a pattern without the word "train" (or without val matches): the sequence's last tenth is val */
    fg_token_data *d = fg_token_data_open(at("fw/fw_*_1*.bin"), 300, 4);
    cr_assert(d, "%s", fg_last_error());
    /* fw_train_1.bin, fw_train_10.bin, fw_val_1.bin */
    size_t m = len[2] + len[1] + 40, mv = m / 10;
    uint16_t all[64];
    memcpy(all, tok[2], len[2] * 2);
    memcpy(all + len[2], tok[1], len[1] * 2);
    memcpy(all + len[2] + len[1], va, 80);
    cr_expect_eq(fg_token_data_file_count(d, FG_SPLIT_VAL), 0);
    expect_batches_are_windows_of(d, FG_SPLIT_TRAIN, all, m - mv, 4, 4, 4, "fw_*_1*.bin");
    expect_batches_are_windows_of(d, FG_SPLIT_VAL, all + (m - mv), mv, 4, 4, 4, "fw_*_1*.bin");
    fg_token_data_free(d);
    /* named shards take the order given */
    const char *tr2[] = {at("fw/fw_train_a.bin"), at("fw/fw_train_1.bin"), at("fw/fw_train_B.bin")};
    d = fg_token_data_open_shards("three", tr2, 3, NULL, 0, 300, 1);
    cr_assert(d, "%s", fg_last_error());
    memcpy(all, tok[4], len[4] * 2);
    memcpy(all + len[4], tok[2], len[2] * 2);
    memcpy(all + len[4] + len[2], tok[3], len[3] * 2);
    m = len[4] + len[2] + len[3];
    mv = m / 10;
    expect_batches_are_windows_of(d, FG_SPLIT_TRAIN, all, m - mv, 4, 2, 4, "named shards");
    fg_token_data_free(d);
    for (int i = 0; i < NS; i++) free(tok[i]);
    free(va);
    free(vb);
}

/* A file or one llm.c-named pair is what it was: not a shard set, the same windows; a path that
 * exists is a path even with a wildcard in its name; a pattern that matches nothing, a folder with
 * shards of one split only, and a name that is both splits' are one line each. */
Test(tokens, files_and_pairs_are_unchanged_and_patterns_are_checked, .init = setup, .fini = teardown) {
    const size_t n = 400;
    uint16_t *t = stream(n, 256, 8), *v = stream(100, 256, 9);
    cr_assert_eq(mkdir(at("p"), 0777), 0);
    write_llmc("p/a_train.bin", t, (int32_t)n, n, FG_LLMC_DATA_MAGIC, 1);
    write_llmc("p/a_val.bin", v, 100, 100, FG_LLMC_DATA_MAGIC, 1);
    fg_token_data *d = fg_token_data_open(at("p"), 256, 16);
    cr_assert(d, "%s", fg_last_error());
    cr_expect_eq(fg_token_data_sharded(d), 0, "one pair is a pair of files, as before");
    expect_batches_are_windows_of(d, FG_SPLIT_TRAIN, t, n, 4, 16, 3, "pair");
    expect_batches_are_windows_of(d, FG_SPLIT_VAL, v, 100, 4, 16, 3, "pair");
    fg_token_data_free(d);
    write_bytes("star*.bin", t, n * 2);
    d = fg_token_data_open(at("star*.bin"), 256, 16);
    cr_assert(d, "%s", fg_last_error());
    cr_expect_eq(fg_token_data_sharded(d), 0, "an existing path is a file, whatever its name");
    expect_batches_are_windows_of(d, FG_SPLIT_TRAIN, t, n - n / 10, 4, 16, 3, "star*.bin");
    fg_token_data_free(d);

    fg_clear_error();
    cr_expect_null(fg_token_data_open(at("p/b_train_*.bin"), 256, 16));
    cr_expect(strstr(fg_last_error(), "no file matches the pattern") && strstr(fg_last_error(), "quote it"), "%s",
              fg_last_error());
    write_llmc("p/b_train.bin", t, (int32_t)n, n, FG_LLMC_DATA_MAGIC, 1);
    rename(at("p/a_val.bin"), at("p/a_vals.bin"));
    fg_clear_error();
    cr_expect_null(fg_token_data_open(at("p"), 256, 16), "two train shards and no val one");
    cr_expect(strstr(fg_last_error(), "it has 2 of the one and 0 of the other"), "%s", fg_last_error());
    write_llmc("p/c_train_val.bin", v, 100, 100, FG_LLMC_DATA_MAGIC, 1);
    fg_clear_error();
    cr_expect_null(fg_token_data_open(at("p"), 256, 16));
    cr_expect(strstr(fg_last_error(), "c_train_val.bin' is both a train shard and a val shard"), "%s", fg_last_error());
    free(t);
    free(v);
}

/* Every shard is checked as a file is, and the headers and sizes of all of them before any id: a
 * shard set whose first shard has a bad id and whose last a bad header is refused naming the last. */
Test(tokens, a_bad_shard_is_one_error_naming_it, .init = setup, .fini = teardown) {
    const size_t n = 200;
    uint16_t *t = stream(n, 256, 10);
    cr_assert_eq(mkdir(at("b"), 0777), 0);
    for (int i = 0; i < 4; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "b/x_train_%d.bin", i);
        write_llmc(rel, t, (int32_t)n, n, FG_LLMC_DATA_MAGIC, 1);
    }
    write_llmc("b/x_val_0.bin", t, (int32_t)n, n, FG_LLMC_DATA_MAGIC, 1);
    fg_token_data *d = fg_token_data_open(at("b"), 256, 16);
    cr_assert(d, "%s", fg_last_error());
    fg_token_data_free(d);
    static const struct {
        const char *shard;
        int32_t count, version;
        int bad_id;
        const char *phrase;
    } cases[] = {
        {"b/x_train_3.bin", (int32_t)n + 4, 1, 0, "truncated"},
        {"b/x_train_2.bin", (int32_t)n - 1, 1, 0, "extra bytes"},
        {"b/x_train_1.bin", (int32_t)n, 2, 0, "version 2"},
        {"b/x_train_2.bin", (int32_t)n, 1, 1, "token 77 is id 300"},
        {"b/x_val_0.bin", (int32_t)n, 1, 1, "token 77 is id 300"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint16_t *u = stream(n, 256, 10);
        if (cases[c].bad_id) u[77] = 300;
        write_llmc(cases[c].shard, u, cases[c].count, n, FG_LLMC_DATA_MAGIC, cases[c].version);
        if (c == 0) { /* and a bad id in the first shard: the header of the last is named first */
            uint16_t *w = stream(n, 256, 10);
            w[5] = 999;
            write_llmc("b/x_train_0.bin", w, (int32_t)n, n, FG_LLMC_DATA_MAGIC, 1);
            free(w);
        }
        fg_clear_error();
        cr_expect_null(fg_token_data_open(at("b"), 256, 16), "%s was accepted", cases[c].shard);
        cr_expect(strstr(fg_last_error(), cases[c].shard) && strstr(fg_last_error(), cases[c].phrase),
                  "case %zu: the message should name %s and say '%s': %s", c, cases[c].shard, cases[c].phrase,
                  fg_last_error());
        cr_expect(!strchr(fg_last_error(), '\n'), "one line: %s", fg_last_error());
        if (c == 0) write_llmc("b/x_train_0.bin", t, (int32_t)n, n, FG_LLMC_DATA_MAGIC, 1);
        write_llmc(cases[c].shard, t, (int32_t)n, n, FG_LLMC_DATA_MAGIC, 1);
        free(u);
    }
    free(t);
}

/* The RSS of a process that opens a shard set of more than a GiB (sparse files) and draws batches
 * all over it, windows crossing the shards' boundaries included, stays flat; the ids at the
 * boundaries, read back with pread, are the batches'. */
Test(tokens, a_shard_set_beyond_a_gib_opens_and_batches_in_flat_memory, .init = setup, .fini = teardown,
     .timeout = 300) {
    enum { NS = 3, T = 1024, B = 32 };
    const int64_t n = (int64_t)190 << 20; /* ids per shard: 3 x 380 MiB */
    cr_assert_eq(mkdir(at("g"), 0777), 0);
    for (int i = 0; i < NS; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "g/big_train_%d.bin", i);
        write_sparse_llmc(rel, n, -1, 0);
        /* distinct ids around each boundary: the last T ids of a shard and the first T of the next */
        int fd = open(at(rel), O_WRONLY);
        cr_assert(fd >= 0);
        uint16_t edge[T];
        for (int k = 0; k < T; k++) edge[k] = (uint16_t)(1 + i * 3 + k % 3);
        cr_assert_eq(pwrite(fd, edge, sizeof edge, 1024), (ssize_t)sizeof edge);
        cr_assert_eq(pwrite(fd, edge, sizeof edge, 1024 + 2 * (off_t)(n - T)), (ssize_t)sizeof edge);
        close(fd);
    }
    uint16_t v[4096];
    for (int k = 0; k < 4096; k++) v[k] = (uint16_t)k;
    write_llmc("g/big_val_0.bin", v, 4096, 4096, FG_LLMC_DATA_MAGIC, 1);
    const long before = peak_rss_kib();
    fg_token_data *d = fg_token_data_open(at("g"), 50257, T);
    cr_assert(d, "%s", fg_last_error());
    cr_expect_eq(fg_token_data_split_tokens(d, FG_SPLIT_TRAIN), (size_t)(NS * n));
    const long opened = peak_rss_kib() - before;
    int32_t *x = malloc((size_t)B * T * sizeof *x), *y = malloc((size_t)B * T * sizeof *y);
    cr_assert(x && y);
    for (int step = 0; step < 40; step++)
        cr_assert_eq(fg_token_data_batch(d, FG_SPLIT_TRAIN, B, T, 5, (uint64_t)step, x, y), FG_OK);
    const long drawn = peak_rss_kib() - before;
    if (!fgt_sanitize())
        cr_expect(opened < 256 * 1024 && drawn < 256 * 1024,
                  "a %lld MiB shard set raised the peak memory by %ld MiB to open and %ld MiB to draw 40 batches",
                  (long long)(NS * n >> 19), opened / 1024, drawn / 1024);
    /* a window across each boundary, found by its step and row: the contract's offsets (tokens.h) */
    int crossed = 0;
    for (uint64_t row = 0; row < 2000000 && crossed < NS - 1; row++) {
        const uint64_t o = fg_text_window_offset(5, FG_TEXT_STREAM(FG_SPLIT_TRAIN), row, (uint64_t)(NS * n - T));
        const int64_t b = (int64_t)(o / (uint64_t)n + 1) * n; /* the next boundary */
        if (b >= NS * n || (int64_t)o + T < b || (int64_t)o <= b - T) continue;
        cr_assert_eq(fg_token_data_batch(d, FG_SPLIT_TRAIN, 1, T, 5, row, x, y), FG_OK);
        for (int t = 0; t <= T; t++) { /* id o + t, read from its shard with pread */
            const int64_t g = (int64_t)o + t, sh = g / n, in = g % n;
            char rel[64];
            snprintf(rel, sizeof rel, "g/big_train_%d.bin", (int)sh);
            int fd = open(at(rel), O_RDONLY);
            uint16_t want;
            cr_assert_eq(pread(fd, &want, 2, 1024 + 2 * (off_t)in), 2);
            close(fd);
            if (t < T)
                cr_assert_eq(x[t], want, "row %llu: id %d across the boundary at %lld", (unsigned long long)row, t,
                             (long long)b);
            if (t > 0) cr_assert_eq(y[t - 1], want, "row %llu: target %d", (unsigned long long)row, t - 1);
        }
        crossed++;
    }
    cr_expect_eq(crossed, NS - 1, "no window across some boundary in 2M draws");
    free(x);
    free(y);
    fg_token_data_free(d);
}

/* The shard limit counts train shards, and val shards apart: FG_TOKEN_MAX_SHARDS train shards and
 * one val shard open; one train shard more is refused with a message naming what it counts. The
 * shards are hard links of one small llm.c file. */
Test(tokens, the_shard_limit_counts_train_shards_and_val_shards_apart, .init = setup, .fini = teardown,
     .timeout = 300) {
    const size_t n = 40;
    uint16_t *t = stream(n, 256, 3);
    cr_assert_eq(mkdir(at("lim"), 0777), 0);
    write_llmc("lim/one.bin", t, (int32_t)n, n, FG_LLMC_DATA_MAGIC, 1);
    free(t);
    const int ntrain = FG_TOKEN_MAX_SHARDS + 1;
    char **tr = calloc((size_t)ntrain, sizeof *tr);
    cr_assert(tr);
    for (int i = 0; i < ntrain; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "lim/s_train_%05d.bin", i);
        tr[i] = strdup(at(rel));
        cr_assert_eq(link(at("lim/one.bin"), tr[i]), 0, "link %s", tr[i]);
    }
    const char *val[1] = {at("lim/one.bin")};
    fg_token_data *d = fg_token_data_open_shards("lim", (const char *const *)tr, FG_TOKEN_MAX_SHARDS, val, 1, 256, 8);
    cr_expect(d, "%d train shards and 1 val shard were refused: %s", FG_TOKEN_MAX_SHARDS, fg_last_error());
    fg_token_data_free(d);
    fg_clear_error();
    d = fg_token_data_open_shards("lim", (const char *const *)tr, ntrain, val, 1, 256, 8);
    cr_expect_null(d, "%d train shards were accepted", ntrain);
    fg_token_data_free(d);
    char want[128];
    snprintf(want, sizeof want, "%d train shards, more than the %d train shards", ntrain, FG_TOKEN_MAX_SHARDS);
    cr_expect(strstr(fg_last_error(), want), "'%s'", fg_last_error());
    for (int i = 0; i < ntrain; i++) free(tr[i]);
    free(tr);
}
