/* test_token_runs.c — training on pre-tokenized files end to end (datasets/token_source.c, the
 * "tokens" checkpoints of train/checkpoint.c, `flashgrad train --data-bin` and `flashgrad sample
 * --tokenizer / --prompt-ids`).
 *
 * Every file is made here in a fresh temporary folder: a nanoGPT folder of byte-level ids (vocabulary
 * 256), llm.c files over a random uint16 stream, and an llm.c tokenizer file whose token i is the text
 * "<i>", so a decoded sample can be predicted from its ids. The program tests run the real binary
 * (FG_BIN) under `timeout`, so a hang fails the test instead of stalling the suite.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datasets/source.h"
#include "datasets/tokens.h"
#include "tensor/fileio.h"
#include "tensor/safetensors.h"
#include "tests/common.h"
#include "train/checkpoint.h"

static char dir[256];
static void setup(void) { fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_token_runs.XXXXXX"); }
static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) cr_log_warn("could not remove %s", dir);
}

TestSuite(token_runs, .init = setup, .fini = teardown, .timeout = 240);

static const char *at(const char *rel) {
    static char p[4][600];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, rel);
    return p[k];
}

static void need_bin(void) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
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
    cr_assert(t);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (uint16_t)((seed >> 8) % v);
    }
    return t;
}

/* an llm.c data file: 256 int32 header (magic, version, count) + n tokens */
static void write_llmc(const char *rel, const uint16_t *t, int32_t count_in_header, size_t n, int32_t magic) {
    int32_t h[256] = {0};
    h[0] = magic;
    h[1] = 1;
    h[2] = count_in_header;
    FILE *f = fopen(at(rel), "wb");
    cr_assert(f);
    fwrite(h, sizeof h, 1, f);
    fwrite(t, 2, n, f);
    fclose(f);
}

/* A nanoGPT folder rel/{train,val}.bin of byte-level ids. */
static void write_nano_folder(const char *rel, uint32_t seed) {
    cr_assert_eq(mkdir(at(rel), 0777), 0);
    char p[300];
    uint16_t *tr = stream(4000, 256, seed), *va = stream(900, 256, seed + 1);
    snprintf(p, sizeof p, "%s/train.bin", rel);
    write_bytes(p, tr, 4000 * 2);
    snprintf(p, sizeof p, "%s/val.bin", rel);
    write_bytes(p, va, 900 * 2);
    free(tr);
    free(va);
}

/* llm.c's tokenizer file (version 2) of V tokens, token i being "<i>", end-of-text eot. */
static void write_tokenizer(const char *rel, int V, int eot) {
    uint32_t h[256] = {0};
    h[0] = FG_LLMC_TOKENIZER_MAGIC;
    h[1] = 2;
    h[2] = (uint32_t)V;
    h[3] = (uint32_t)eot;
    FILE *f = fopen(at(rel), "wb");
    cr_assert(f);
    fwrite(h, sizeof h, 1, f);
    for (int i = 0; i < V; i++) {
        char s[16];
        unsigned char len = (unsigned char)snprintf(s, sizeof s, "<%d>", i);
        fputc(len, f);
        fwrite(s, 1, len, f);
    }
    fclose(f);
}

/* `cd <dir>/<cwd> && timeout 120 flashgrad <args> 2>&1`; stdout and stderr into log; the exit status. */
static int run_in(const char *cwd, const char *args, char *log, size_t n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s/%s' && timeout 120 '%s' %s 2>&1", dir, cwd, fgt_bin(), args);
    return fgt_run_cmd(cmd, log, n);
}
static int run(const char *args, char *log, size_t n) { return run_in(".", args, log, n); }

static void run_ok(const char *args) {
    char log[16384];
    int st = run(args, log, sizeof log);
    cr_assert_eq(st, 0, "`flashgrad %s` exited %d:\n%s", args, st, log);
}

static int lines_of(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* `flashgrad <args>` fails with `code`, one line that says `phrase`. */
static void expect_fails(const char *args, int code, const char *phrase) {
    char log[16384];
    int st = run(args, log, sizeof log);
    cr_expect_eq(st, code, "`flashgrad %s` exited %d (124: hung), expected %d:\n%s", args, st, code, log);
    cr_expect(strstr(log, phrase), "`flashgrad %s`: the message does not say '%s':\n%s", args, phrase, log);
    cr_expect_eq(lines_of(log), 1, "`flashgrad %s`: an error should be one line:\n%s", args, log);
}

/* A tiny model: a few steps take well under a second. */
#define TINY                                                                                                           \
    "--n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --grad-accum 2 --eval-every 0 "                 \
    "--eval-iters 1 --samples 0 --threads 1 --lr-decay-steps 6 --warmup 2"

/* Six steps in one run against three, then a resume to six: the same state bit for bit. */
static void expect_resume_is_exact(const char *data_flags) {
    char args[1024];
    snprintf(args, sizeof args, "train %s " TINY " --steps 6 --out full", data_flags);
    run_ok(args);
    snprintf(args, sizeof args, "train %s " TINY " --steps 3 --out part", data_flags);
    run_ok(args);
    run_ok("train --resume --steps 6 --out part --samples 0");
    fgt_expect_same_run_state(at("full"), at("part"));
}

Test(token_runs, nanogpt_folder_trains_and_resumes_bit_for_bit) {
    need_bin();
    write_nano_folder("nano", 1);
    char log[16384];
    int st = run("train --data-bin nano --vocab-size 256 " TINY " --steps 2 --out look", log, sizeof log);
    cr_assert_eq(st, 0, "%s", log);
    cr_expect(strstr(log, "nanoGPT token files: nano/train.bin (4000 ids, train), nano/val.bin (900 ids, val)") &&
                  strstr(log, "vocabulary 256"),
              "the header does not describe the files:\n%s", log);
    expect_resume_is_exact("--data-bin nano --vocab-size 256");
}

Test(token_runs, llmc_files_train_and_resume_bit_for_bit) {
    need_bin();
    const int V = 5000;
    uint16_t *tr = stream(6000, V, 7), *va = stream(1500, V, 8);
    write_llmc("shake_train.bin", tr, 6000, 6000, FG_LLMC_DATA_MAGIC);
    write_llmc("shake_val.bin", va, 1500, 1500, FG_LLMC_DATA_MAGIC);
    free(tr);
    free(va);
    char log[16384];
    int st = run("train --data-bin shake_train.bin --vocab-size 5000 " TINY " --steps 1 --out look", log, sizeof log);
    cr_assert_eq(st, 0, "%s", log);
    cr_expect(strstr(log, "llm.c token files: shake_train.bin (6000 ids, train), shake_val.bin (1500 ids, val)") &&
                  strstr(log, "vocabulary 5000"),
              "the header does not describe the files:\n%s", log);
    expect_resume_is_exact("--data-bin shake_train.bin --vocab-size 5000");
}

Test(token_runs, single_file_keeps_its_last_tenth_for_validation_and_resumes) {
    need_bin();
    uint16_t *t = stream(3000, 300, 3);
    write_llmc("alone.bin", t, 3000, 3000, FG_LLMC_DATA_MAGIC);
    free(t);
    char log[16384];
    int st = run("train --data-bin alone.bin --vocab-size 300 " TINY " --steps 1 --out look", log, sizeof log);
    cr_assert_eq(st, 0, "%s", log);
    cr_expect(strstr(log, "alone.bin (3000 ids: 2700 train, the last 300 val)"), "%s", log);
    expect_resume_is_exact("--data-bin alone.bin --vocab-size 300");
}

/* ---- bad files and bad flags ---- */

Test(token_runs, bad_token_files_are_one_line_exit_1_and_leave_nothing) {
    need_bin();
    const size_t n = 400;
    uint16_t *t = stream(n, 256, 2);
    write_llmc("truncated_train.bin", t, (int32_t)n + 5, n, FG_LLMC_DATA_MAGIC);
    write_llmc("magic_train.bin", t, (int32_t)n, n, FG_LLMC_DATA_MAGIC + 3);
    write_bytes("odd.bin", t, 2 * n - 1);
    write_bytes("empty.bin", "", 0);
    write_bytes("short.bin", t, 2 * 12); /* 12 ids: 11 train, 1 val */
    t[321] = 256;
    write_bytes("big.bin", t, 2 * n);
    free(t);
    static const struct {
        const char *file, *phrase;
    } cases[] = {
        {"truncated_train.bin", "truncated"},
        {"magic_train.bin", "wrong magic"},
        {"odd.bin", "not a whole number of uint16 tokens"},
        {"empty.bin", "empty"},
        {"short.bin", "fewer than block size + 1"},
        {"big.bin", "token 321 is id 256, outside the vocabulary of 256"},
        {"missing_dir", "cannot open"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "train --data-bin %s --vocab-size 256 " TINY " --steps 2 --out r%zu", cases[i].file,
                 i);
        expect_fails(args, 1, cases[i].phrase);
        char out[16];
        snprintf(out, sizeof out, "r%zu", i);
        struct stat sb;
        cr_expect_neq(stat(at(out), &sb), 0, "`flashgrad %s` created its --out folder", args);
    }
    /* a vocabulary of 65536 still catches the wrong magic (no id is out of range then) */
    expect_fails("train --data-bin magic_train.bin --vocab-size 65536 " TINY " --steps 2 --out r", 1, "wrong magic");
}

Test(token_runs, data_bin_flag_misuse_is_a_usage_error) {
    need_bin();
    write_nano_folder("nano", 4);
    write_bytes("text.txt", "hello hello hello hello hello hello\n", 36);
    expect_fails("train --data-bin nano --steps 2 --out r", 2, "--data-bin needs --vocab-size");
    expect_fails("train --data-bin nano --vocab-size 0 --steps 2 --out r", 2, "--vocab-size");
    expect_fails("train --data-bin nano --vocab-size 65537 --steps 2 --out r", 2, "--vocab-size");
    expect_fails("train --data-bin nano --vocab-size 256 --data text.txt --steps 2 --out r", 2, "not both");
    expect_fails("train --data text.txt --vocab-size 256 --steps 2 --out r", 2, "--vocab-size applies to --data-bin");
    expect_fails("train --vocab-size 256 --steps 2 --out r", 2, "--vocab-size applies to --data-bin");
    expect_fails("train --data-bin nano --vocab-size 256 --task addition --steps 2 --out r", 2, "not both");
    expect_fails("train --data-bin nano --vocab-size 256 --byte --steps 2 --out r", 2, "--byte");
    expect_fails("train --data-bin nano --vocab-size 256 --answer-only 1 --steps 2 --out r", 2, "--answer-only");
}

/* ---- resume: the data must be the same ---- */

Test(token_runs, resume_refuses_changed_files_and_finds_moved_cwd_by_absolute_path) {
    need_bin();
    write_nano_folder("nano", 5);
    cr_assert_eq(mkdir(at("sub"), 0777), 0);
    run_ok("train --data-bin nano --vocab-size 256 " TINY " --steps 2 --out r");
    /* from another folder the recorded relative paths miss; the absolute ones are found */
    char log[16384];
    int st = run_in("sub", "train --resume --steps 3 --out ../r --samples 0", log, sizeof log);
    cr_expect_eq(st, 0, "a resume from another folder should find the files by their absolute paths:\n%s", log);
    /* a copy of the folder given with --data-bin is the same data (and the checkpoint records it) */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", at("nano"), at("copy"));
    cr_assert_eq(fgt_run_cmd(cmd, NULL, 0), 0);
    run_ok("train --resume --data-bin copy --steps 4 --out r --samples 0");
    /* a changed id (still in the vocabulary) in the val file: refused, naming it */
    FILE *f = fopen(at("copy/val.bin"), "r+b");
    cr_assert(f);
    uint16_t v = 7;
    fseek(f, 2 * 100, SEEK_SET);
    cr_assert_eq(fread(&v, 2, 1, f), 1);
    v = (uint16_t)((v + 1) % 256);
    fseek(f, 2 * 100, SEEK_SET);
    fwrite(&v, 2, 1, f);
    fclose(f);
    expect_fails("train --resume --steps 5 --out r --samples 0", 1, "copy/val.bin' is not the val file");
    expect_fails("train --resume --steps 5 --out r --samples 0", 1, "contents changed");
    /* a folder whose validation split is taken otherwise is not the same data either */
    uint16_t *t = stream(4000, 256, 5);
    write_bytes("train.bin", t, 4000 * 2);
    free(t);
    expect_fails("train --resume --data-bin train.bin --steps 5 --out r --samples 0", 1, "splits its data differently");
    /* the vocabulary and the kind of data are the checkpoint's */
    expect_fails("train --resume --data-bin copy --vocab-size 300 --steps 5 --out r", 2, "differs from the checkpoint");
    expect_fails("train --resume --vocab-size 300 --steps 5 --out r", 2,
                 "--vocab-size 300 differs from the checkpoint");
    write_bytes("text.txt", "hello hello hello hello hello hello\n", 36);
    expect_fails("train --resume --data text.txt --steps 5 --out r", 2, "trained on token files");
}

/* ---- sample ---- */

/* The ids of the single line `ids` ("3 17 250"), into out; their number. */
static int parse_id_line(const char *ids, int *out, int cap) {
    int n = 0;
    const char *p = ids;
    while (*p && *p != '\n' && n < cap) {
        char *end;
        long v = strtol(p, &end, 10);
        cr_assert(end != p, "not an id list: %s", ids);
        out[n++] = (int)v;
        p = end;
        while (*p == ' ') p++;
    }
    return n;
}

Test(token_runs, sample_prints_ids_and_decodes_them_with_an_llmc_tokenizer) {
    need_bin();
    const int V = 300;
    uint16_t *t = stream(3000, V, 9);
    write_bytes("data.bin", t, 3000 * 2);
    free(t);
    run_ok("train --data-bin data.bin --vocab-size 300 " TINY " --steps 3 --out r");
    write_tokenizer("tok.bin", V, 299);
    write_tokenizer("small.bin", 10, 0);

    /* ids: the prompt's, then 12 new ones */
    char ids[16384], text[16384];
    int st = run("sample --ckpt r --tokens 12 --seed 5 --prompt-ids 4,250,7", ids, sizeof ids);
    cr_assert_eq(st, 0, "%s", ids);
    int id[64];
    int n = parse_id_line(ids, id, 64);
    cr_assert_eq(n, 15, "expected 3 prompt ids and 12 new ones: %s", ids);
    cr_expect(id[0] == 4 && id[1] == 250 && id[2] == 7, "the prompt ids come first: %s", ids);
    for (int i = 0; i < n; i++) cr_expect(id[i] >= 0 && id[i] < V, "id %d outside the vocabulary: %s", id[i], ids);

    /* the same draws decoded: token i is "<i>" */
    st = run("sample --ckpt r --tokens 12 --seed 5 --prompt-ids 4,250,7 --tokenizer tok.bin", text, sizeof text);
    cr_assert_eq(st, 0, "%s", text);
    char want[1024];
    size_t k = 0;
    for (int i = 0; i < n; i++) k += (size_t)snprintf(want + k, sizeof want - k, "<%d>", id[i]);
    snprintf(want + k, sizeof want - k, "\n");
    cr_expect_str_eq(text, want, "decoded sample differs from its ids' bytes");

    /* no prompt: the tokenizer's end-of-text (299) starts it, and is not printed */
    st = run("sample --ckpt r --tokens 12 --seed 5 --prompt-ids 299 --tokenizer tok.bin", want, sizeof want);
    cr_assert_eq(st, 0, "%s", want);
    st = run("sample --ckpt r --tokens 12 --seed 5 --tokenizer tok.bin", text, sizeof text);
    cr_assert_eq(st, 0, "%s", text);
    cr_expect_str_eq(text, want + strlen("<299>"), "the default prompt is not the end-of-text id");

    /* a tokenizer smaller than the model's vocabulary (a padded one): only its ids are drawn */
    st = run("sample --ckpt r --tokens 200 --seed 5 --temperature 1", ids, sizeof ids);
    cr_assert_eq(st, 0, "%s", ids);
    int all[256], beyond = 0;
    n = parse_id_line(ids, all, 256);
    for (int i = 0; i < n; i++) beyond += all[i] >= 10;
    cr_assert(beyond > 0, "the test needs a model that emits ids >= 10 unrestricted: %s", ids);
    st = run("sample --ckpt r --tokens 200 --seed 5 --temperature 1 --tokenizer small.bin", text, sizeof text);
    cr_assert_eq(st, 0, "%s", text);
    cr_expect(strstr(text, "sampling only ids below 10"), "no note of the restriction: %s", text);
    int decoded = 0;
    for (const char *p = text; (p = strchr(p, '<')) != NULL; p++) {
        int v = atoi(p + 1);
        cr_expect(v >= 0 && v < 10, "id %d is beyond the tokenizer's 10 tokens", v);
        decoded++;
    }
    cr_expect_eq(decoded, 200, "expected 200 decoded tokens: %s", text);
    expect_fails("sample --ckpt r --tokenizer small.bin --prompt-ids 250", 1, "outside the vocabulary of 10");
    expect_fails("sample --ckpt r --tokenizer data.bin", 1, "not an llm.c tokenizer file");
    expect_fails("sample --ckpt r --prompt hello", 2, "--prompt-ids");
    expect_fails("sample --ckpt r --prompt-ids 1,300", 1, "id 300");
    expect_fails("sample --ckpt r --prompt-ids 1,,2", 2, "not a list of token ids");
    expect_fails("sample --ckpt r --prompt-ids 1 --prompt x", 2, "not both");

    /* a text model keeps its own tokenizer; --prompt-ids works there too */
    char abc[121];
    for (int i = 0; i < 120; i++) abc[i] = "abc"[i % 3];
    abc[120] = '\n';
    write_bytes("text.txt", abc, sizeof abc);
    run_ok("train --data text.txt --n-layer 1 --n-head 2 --n-embd 16 --block-size 8 --batch-size 4 --steps 1 "
           "--eval-every 0 --eval-iters 1 --samples 0 --threads 1 --out tr");
    expect_fails("sample --ckpt tr --tokenizer tok.bin", 2, "has its own character-level tokenizer");
    expect_fails("train --resume --data-bin data.bin --steps 2 --out tr", 2, "trained on a text file");
    expect_fails("train --resume --vocab-size 4 --steps 2 --out tr", 2, "--vocab-size: the checkpoint");
    st = run("sample --ckpt tr --tokens 0 --prompt-ids 0,1,2", text, sizeof text);
    cr_expect_eq(st, 0, "%s", text);
    cr_expect_str_eq(text, "\nab\n", "ids 0,1,2 of the vocabulary {\\n, a, b, c} print their bytes");
}

/* ---- the checkpoint records the files ---- */

Test(token_runs, checkpoint_records_the_token_files_and_reads_them_back) {
    write_nano_folder("nano", 6);
    char cwd[PATH_MAX];
    cr_assert(getcwd(cwd, sizeof cwd));
    cr_assert_eq(chdir(dir), 0);
    fg_source *s = fg_source_tokens("nano", NULL, 256, 8);
    cr_assert(s, "%s", fg_last_error());
    cr_expect_eq(s->kind, FG_SOURCE_TOKENS);
    cr_expect_null(fg_source_tokenizer(s), "token files have no tokenizer");
    cr_expect_eq(fg_source_vocab_size(s), 256);
    char abs[PATH_MAX];
    cr_assert(realpath("nano/train.bin", abs));
    cr_expect_str_eq(s->files[FG_SPLIT_TRAIN].path, "nano/train.bin");
    cr_expect_str_eq(s->files[FG_SPLIT_TRAIN].path_abs, abs);
    cr_expect_str_eq(s->files[FG_SPLIT_VAL].path, "nano/val.bin");
    cr_expect_eq(s->files[FG_SPLIT_TRAIN].count, 4000);
    cr_expect_eq(s->files[FG_SPLIT_VAL].count, 900);
    cr_expect_eq(s->files[FG_SPLIT_TRAIN].format, FG_TOKFILE_NANOGPT);
    /* the identity is the files' XXH64 */
    void *buf;
    size_t n;
    cr_assert_eq(fg_read_file("nano/val.bin", 0, &buf, &n), FG_OK);
    cr_expect_eq(s->files[FG_SPLIT_VAL].hash, fg_xxh64(buf, n, 0));
    free(buf);
    /* a batch is a window of the file */
    int32_t x[16], y[16];
    cr_assert_eq(fg_source_batch(s, FG_SPLIT_TRAIN, 2, 8, 3, 0, x, y), FG_OK, "%s", fg_last_error());
    for (int i = 0; i < 7; i++) cr_expect_eq(x[i + 1], y[i], "y is x shifted by one");

    fg_train_config c = fgt_tiny_train_config(s, 8, 2, 4, 1, 5);
    fg_trainer *tr = fg_trainer_create(&c, s);
    cr_assert(tr, "%s", fg_last_error());
    fg_step_stats st;
    cr_assert_eq(fg_trainer_step(tr, &st), FG_OK, "%s", fg_last_error());
    cr_assert_eq(mkdir("run", 0777), 0);
    cr_assert_eq(fg_ckpt_check_savable("run", tr), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_ckpt_save("run", tr), FG_OK, "%s", fg_last_error());
    fg_ckpt *ck = fg_ckpt_open("run", 1);
    cr_assert(ck, "%s", fg_last_error());
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    cr_expect_eq(in->data.kind, FG_SOURCE_TOKENS);
    cr_expect_null(in->tokenizer);
    cr_expect_eq(in->model.vocab_size, 256);
    for (int k = 0; k < FG_SPLIT_COUNT; k++) {
        const fg_source_file *a = &s->files[k], *b = &in->data.files[k];
        cr_expect(!strcmp(a->path, b->path) && !strcmp(a->path_abs, b->path_abs) && a->hash == b->hash &&
                      a->count == b->count && a->format == b->format,
                  "split %d: the checkpoint records %s %s %016llx %llu, the source is %s %s %016llx %llu", k, b->path,
                  b->path_abs, (unsigned long long)b->hash, (unsigned long long)b->count, a->path, a->path_abs,
                  (unsigned long long)a->hash, (unsigned long long)a->count);
    }
    fg_source *back = fg_ckpt_source(ck, NULL);
    cr_expect(back && back->files[FG_SPLIT_VAL].hash == s->files[FG_SPLIT_VAL].hash, "%s", fg_last_error());
    fg_source_free(back);
    fg_clear_error();
    cr_expect_null(fg_ckpt_source(ck, "no-such-tokens.bin"), "a path given is used alone, not the recorded ones");
    cr_expect_eq(fg_last_status(), FG_ERR_IO);
    fg_ckpt_close(ck);
    fg_trainer_free(tr);
    fg_source_free(s);
    cr_assert_eq(chdir(cwd), 0);
}

/* Rewrites safetensors file `path` through the library's writer (so its checksum is right again)
 * with metadata key set to value. */
static void resign(const char *path, const char *key, const char *value) {
    void *buf;
    size_t n;
    cr_assert_eq(fg_read_file(path, 0, &buf, &n), FG_OK, "%s", fg_last_error());
    fg_st_file *f = fg_st_parse(buf, n, path);
    cr_assert(f, "%s", fg_last_error());
    fg_st_writer *w = fg_st_writer_new();
    for (int i = 0; i < fg_st_count(f); i++) {
        const fg_st_array *a = fg_st_at(f, i);
        cr_assert_eq(fg_st_writer_add(w, a->name, a->dtype, a->ndim, a->shape, a->data), FG_OK);
    }
    for (int i = 0; i < fg_st_metadata_count(f); i++) {
        const char *k, *v;
        fg_st_metadata_at(f, i, &k, &v);
        if (strcmp(k, "fg_checksum") && strcmp(k, key)) fg_st_writer_set_metadata(w, k, v);
    }
    cr_assert_eq(fg_st_writer_set_metadata(w, key, value), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_st_writer_write(w, path), FG_OK, "%s", fg_last_error());
    fg_st_writer_free(w);
    fg_st_close(f);
    free(buf);
}

Test(token_runs, token_checkpoint_metadata_is_read_strictly) {
    write_nano_folder("nano", 7);
    fg_source *s = fg_source_tokens(at("nano"), NULL, 256, 8);
    cr_assert(s, "%s", fg_last_error());
    fg_train_config c = fgt_tiny_train_config(s, 8, 2, 4, 1, 5);
    fg_trainer *tr = fg_trainer_create(&c, s);
    cr_assert(tr, "%s", fg_last_error());
    cr_assert_eq(mkdir(at("good"), 0777), 0);
    cr_assert_eq(fg_ckpt_save(at("good"), tr), FG_OK, "%s", fg_last_error());
    fg_trainer_free(tr);
    fg_source_free(s);
    static const struct {
        const char *key, *value, *phrase;
    } edits[] = {
        {"tokenizer", "byte-v1", "has 'none' there"},
        {"tokens.val", "train_tail", "is not one a flashgrad checkpoint"}, /* its val keys remain */
        {"tokens.val", "maybe", "is none of: file, train_tail"},
        {"tokens.train.format", "raw", "is none of: nanogpt, llmc"},
        {"tokens.train.count", "8", "shorter than block_size + 1"},
        {"tokens.val.count", "-1", "'tokens.val.count' = -1 is outside 1.."},
        {"tokens.train.xxh64", "0123", "16 lowercase hex digits"},
        {"tokens.val.path", "", "is empty"},
        {"vocab_size", "70000", "vocab_size"},
        {"data", "text", "bad tokenizer"}, /* "none" is no text tokenizer */
    };
    char cmd[1200];
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", at("bad"), at("good"), at("bad"));
        cr_assert_eq(fgt_run_cmd(cmd, NULL, 0), 0);
        char mp[700];
        snprintf(mp, sizeof mp, "%s/%s", at("bad"), FG_CKPT_MODEL_FILE);
        resign(mp, edits[i].key, edits[i].value);
        fg_clear_error();
        fg_ckpt *ck = fg_ckpt_open(at("bad"), 1);
        cr_expect_null(ck, "%s = '%s' was accepted", edits[i].key, edits[i].value);
        fg_ckpt_close(ck);
        cr_expect(strstr(fg_last_error(), edits[i].phrase), "%s = '%s': the message does not say '%s': %s",
                  edits[i].key, edits[i].value, edits[i].phrase, fg_last_error());
    }
    fg_ckpt *ck = fg_ckpt_open(at("good"), 1);
    cr_expect_not_null(ck, "the unedited checkpoint: %s", fg_last_error());
    fg_ckpt_close(ck);
}

/* `bench train --eval-iters` on a token folder: the validation loss `flashgrad train` reports after
 * the same steps and schedule (bench train's defaults: no warm-up, cosine over its W + N steps),
 * within train's four printed decimals; and one line with exit 2 where there is no validation
 * split. */
Test(token_runs, bench_train_evaluates_a_token_folder_as_train_does) {
    need_bin();
    write_nano_folder("nano", 3);
#define EVAL_MODEL                                                                                                     \
    "--data-bin nano --vocab-size 256 --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 "              \
    "--threads 1 --eval-iters 2"
    char blog[16384], tlog[16384];
    int st = run("bench train " EVAL_MODEL " --warmup-steps 1 --steps 2", blog, sizeof blog);
    cr_assert_eq(st, 0, "%s", blog);
    st = run("train " EVAL_MODEL " --steps 3 --warmup 0 --eval-every 0 --samples 0 --out ev", tlog, sizeof tlog);
    cr_assert_eq(st, 0, "%s", tlog);
#undef EVAL_MODEL
    const char *vs = strstr(blog, "val losses: "), *vm = strstr(blog, "val loss: "), *tf = strstr(tlog, "final: ");
    cr_assert(vs && vm && tf, "no validation lines:\n%s\n%s", blog, tlog);
    char *end;
    const double a = strtod(vs + strlen("val losses: "), &end), b = strtod(end, NULL);
    const double mean = strtod(vm + strlen("val loss: "), NULL);
    const char *tv = strstr(tf, "val loss ");
    cr_assert(tv, "%s", tlog);
    const double train_val = strtod(tv + strlen("val loss "), NULL);
    cr_expect(fabs(mean - (a + b) / 2) < 1e-6, "val loss %.9g is not the mean of %.9g and %.9g", mean, a, b);
    cr_expect(fabs(mean - train_val) <= 5e-5 + 1e-9, "bench train's val loss %.6f, train's %.4f:\n%s\n%s", mean,
              train_val, blog, tlog);
    /* random bytes: a 3-step model is near the uniform loss log 256 */
    cr_expect(fabs(mean - log(256.0)) < 0.5, "val loss %g, log 256 = %g", mean, log(256.0));
    expect_fails("bench train --synthetic-vocab 100 --eval-iters 1 --steps 1 --warmup-steps 1", 2,
                 "--eval-iters needs a validation split");
}

/* ---- shard sets (llm.c's many files) ---- */

/* rel/: ns llm.c shards tiny_train_00.bin ... of 7 to 13 ids (so that with block 16 every window
 * crosses a boundary or more) and tiny_val_0.bin; and rel_cat/{train,val}.bin: the same ids as one
 * nanoGPT pair (the train shards one after another in their order). */
static void write_shard_folder(const char *rel, int ns, int V, uint32_t seed) {
    char p[300];
    cr_assert_eq(mkdir(at(rel), 0777), 0);
    snprintf(p, sizeof p, "%s_cat", rel);
    cr_assert_eq(mkdir(at(p), 0777), 0);
    uint16_t all[64 * 13];
    size_t n = 0;
    cr_assert(ns <= 64);
    for (int i = 0; i < ns; i++) {
        const size_t len = 7 + (size_t)(i * 5) % 7;
        uint16_t *t = stream(len, (unsigned)V, seed + (uint32_t)i);
        snprintf(p, sizeof p, "%s/tiny_train_%02d.bin", rel, i);
        write_llmc(p, t, (int32_t)len, len, FG_LLMC_DATA_MAGIC);
        memcpy(all + n, t, len * 2);
        n += len;
        free(t);
    }
    snprintf(p, sizeof p, "%s_cat/train.bin", rel);
    write_bytes(p, all, n * 2);
    uint16_t *v = stream(300, (unsigned)V, seed + 1000);
    snprintf(p, sizeof p, "%s/tiny_val_0.bin", rel);
    write_llmc(p, v, 300, 300, FG_LLMC_DATA_MAGIC);
    snprintf(p, sizeof p, "%s_cat/val.bin", rel);
    write_bytes(p, v, 300 * 2);
    free(v);
}

/* Six steps in one run against three and a resume to six, out folders <tag>_full and <tag>_part: the
 * same state bit for bit. */
static void expect_resume_is_exact_as(const char *data_flags, const char *tag) {
    char args[1024];
    snprintf(args, sizeof args, "train %s " TINY " --steps 6 --out %s_full", data_flags, tag);
    run_ok(args);
    snprintf(args, sizeof args, "train %s " TINY " --steps 3 --out %s_part", data_flags, tag);
    run_ok(args);
    snprintf(args, sizeof args, "train --resume --steps 6 --out %s_part --samples 0", tag);
    run_ok(args);
    char a[64], b[64];
    snprintf(a, sizeof a, "%s_full", tag);
    snprintf(b, sizeof b, "%s_part", tag);
    fgt_expect_same_run_state(at(a), at(b));
}

/* A shard set trains exactly as the one file its shards make (the same batches, the same state bit
 * for bit), every batch crossing shards, and a resume across those boundaries is exact; from a
 * folder and from a pattern. */
Test(token_runs, shard_sets_train_as_their_concatenation_and_resume_bit_for_bit) {
    need_bin();
    write_shard_folder("fw", 12, 300, 11);
    char log[16384];
    int st = run("train --data-bin fw --vocab-size 300 " TINY " --steps 1 --out look", log, sizeof log);
    cr_assert_eq(st, 0, "%s", log);
    cr_expect(strstr(log, "data: llm.c token shards fw: 12 train (120 ids), 1 val (300 ids), 13 shards and 420 ids in "
                          "all, no tokenizer, vocabulary 300"),
              "the data line should name the shard counts and the ids:\n%s", log);
    expect_resume_is_exact_as("--data-bin fw --vocab-size 300", "dir");
    run_ok("train --data-bin fw_cat --vocab-size 300 " TINY " --steps 6 --out cat");
    fgt_expect_same_run_state(at("dir_full"), at("cat"));
    expect_resume_is_exact_as("--data-bin 'fw/tiny_train_*.bin' --vocab-size 300", "glob");
    fgt_expect_same_run_state(at("glob_full"), at("cat"));
}

/* A resume lists the folder or pattern again and refuses a set that is not the one it trained on,
 * in one line naming the difference: a shard added, one missing, one changed, the same shards in
 * another order. */
Test(token_runs, resume_refuses_a_changed_shard_set_naming_the_difference) {
    need_bin();
    write_shard_folder("fw", 6, 300, 21);
    run_ok("train --data-bin fw --vocab-size 300 " TINY " --steps 2 --out r");
    const char *resume = "train --resume --steps 3 --out r --samples 0";
    char cmd[1400];
#define SH(fmt)                                                                                                        \
    do {                                                                                                               \
        snprintf(cmd, sizeof cmd, "cd '%s' && " fmt, dir);                                                             \
        cr_assert_eq(fgt_run_cmd(cmd, NULL, 0), 0, "%s", cmd);                                                         \
    } while (0)
    SH("cp fw/tiny_train_02.bin fw/tiny_train_99.bin");
    expect_fails(resume, 1,
                 "train shard 'fw/tiny_train_99.bin' was added (the checkpoint trained on 6 train "
                 "shards, this has 7)");
    SH("rm fw/tiny_train_99.bin && mv fw/tiny_train_04.bin aside.bin");
    expect_fails(resume, 1, "its train shard 'tiny_train_04.bin' is missing");
    SH("mv aside.bin fw/tiny_train_04.bin && mv fw/tiny_train_01.bin t && mv fw/tiny_train_03.bin fw/tiny_train_01.bin "
       "&& mv t fw/tiny_train_03.bin");
    expect_fails(resume, 1,
                 "its train shards are in another order ('fw/tiny_train_01.bin' is shard 2 of 6 here; "
                 "the checkpoint trained on its contents as shard 4)");
    SH("mv fw/tiny_train_01.bin t && mv fw/tiny_train_03.bin fw/tiny_train_01.bin && mv t fw/tiny_train_03.bin");
    SH("cp fw/tiny_val_0.bin v && printf '\\001' | dd of=fw/tiny_val_0.bin bs=1 seek=1030 conv=notrunc 2>/dev/null");
    expect_fails(resume, 1, "val shard 'fw/tiny_val_0.bin' changed");
    SH("mv v fw/tiny_val_0.bin");
    run_ok(resume);
    /* a copy elsewhere, given with --data-bin, is the same data; the one-file form of it is not */
    SH("mkdir sub && cp -r fw sub/copy");
    run_ok("train --resume --data-bin sub/copy --steps 4 --out r --samples 0");
    expect_fails("train --resume --data-bin fw_cat --steps 5 --out r --samples 0", 1,
                 "is not the data the checkpoint trained on");
    /* a run on one llm.c-named pair refuses the folder once it holds a second train shard */
    SH("mkdir pair && cp fw_cat/train.bin pair/p_train.bin && cp fw_cat/val.bin pair/p_val.bin");
    run_ok("train --data-bin pair --vocab-size 300 " TINY " --steps 1 --out rp");
    SH("cp fw/tiny_train_01.bin pair/");
    expect_fails("train --resume --data-bin pair --steps 2 --out rp --samples 0", 1,
                 "train shard 'pair/tiny_train_01.bin' was added");
#undef SH
}

/* Every shard's identity is in the checkpoint, read back exactly, and read strictly: a malformed
 * shard record, a count that is not the records', or a key beyond them is refused by name. */
Test(token_runs, shard_checkpoints_record_every_shard_and_are_read_strictly) {
    write_shard_folder("fw", 5, 300, 31);
    char cwd[PATH_MAX];
    cr_assert(getcwd(cwd, sizeof cwd));
    cr_assert_eq(chdir(dir), 0);
    fg_source *s = fg_source_tokens("fw/tiny_*.bin", NULL, 300, 8); /* every shard trains: val is the tail */
    cr_assert(s, "%s", fg_last_error());
    cr_expect_eq(s->sharded, 1);
    cr_expect_eq(s->n_shards[FG_SPLIT_TRAIN], 6);
    cr_expect_eq(s->n_shards[FG_SPLIT_VAL], 0);
    cr_expect_str_eq(s->shards[FG_SPLIT_TRAIN][0].path, "fw/tiny_train_00.bin");
    cr_expect_str_eq(s->shards[FG_SPLIT_TRAIN][5].path, "fw/tiny_val_0.bin");
    void *buf;
    size_t n;
    cr_assert_eq(fg_read_file("fw/tiny_train_03.bin", 0, &buf, &n), FG_OK);
    cr_expect_eq(s->shards[FG_SPLIT_TRAIN][3].hash, fg_xxh64(buf, n, 0), "a shard's identity is its XXH64");
    free(buf);
    fg_train_config c = fgt_tiny_train_config(s, 8, 2, 4, 1, 5);
    fg_trainer *tr = fg_trainer_create(&c, s);
    cr_assert(tr, "%s", fg_last_error());
    cr_assert_eq(mkdir("good", 0777), 0);
    cr_assert_eq(fg_ckpt_check_savable("good", tr), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_ckpt_save("good", tr), FG_OK, "%s", fg_last_error());
    fg_ckpt *ck = fg_ckpt_open("good", 1);
    cr_assert(ck, "%s", fg_last_error());
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    cr_expect_eq(in->data.sharded, 1);
    cr_expect_str_eq(in->data.path, "fw/tiny_*.bin");
    char abs[PATH_MAX];
    cr_assert(realpath("fw", abs));
    strcat(abs, "/tiny_*.bin");
    cr_expect_str_eq(in->data.path_abs, abs);
    for (int k = 0; k < FG_SPLIT_COUNT; k++) {
        cr_assert_eq(in->data.n_shards[k], s->n_shards[k]);
        for (int i = 0; i < s->n_shards[k]; i++) {
            const fg_source_shard *a = &s->shards[k][i], *b = &in->data.shards[k][i];
            cr_expect(!strcmp(a->path, b->path) && a->hash == b->hash && a->count == b->count && a->format == b->format,
                      "split %d shard %d: recorded %s %016llx %llu, the source has %s %016llx %llu", k, i, b->path,
                      (unsigned long long)b->hash, (unsigned long long)b->count, a->path, (unsigned long long)a->hash,
                      (unsigned long long)a->count);
        }
    }
    fg_source *back = fg_ckpt_source(ck, NULL);
    cr_expect(back && back->sharded && back->n_shards[FG_SPLIT_TRAIN] == 6, "%s", fg_last_error());
    fg_source_free(back);
    fg_ckpt_close(ck);
    fg_trainer_free(tr);
    const uint64_t h0 = s->shards[FG_SPLIT_TRAIN][0].hash;
    fg_source_free(s);
    char rec[200], rec2[200];
    snprintf(rec, sizeof rec, "%016llx llmc 07 fw/tiny_train_00.bin", (unsigned long long)h0);
    snprintf(rec2, sizeof rec2, "%016llx llmc 7 fw/tiny_train_00.bin", (unsigned long long)h0);
    const struct {
        const char *key, *value, *phrase;
    } edits[] = {
        {"tokens.train.shard.0", "0123 llmc 7 fw/tiny_train_00.bin", "is not a shard as flashgrad records it"},
        {"tokens.train.shard.0", rec, "is not a shard as flashgrad records it"},
        {"tokens.train.shard.1", "0123456789abcdef raw 7 fw/x.bin", "is not a shard as flashgrad records it"},
        {"tokens.train.shard.2", "0123456789abcdef llmc 7 ", "is not a shard as flashgrad records it"},
        {"tokens.train.shard.6", rec2, "is not one a flashgrad checkpoint"},
        {"tokens.train.shards", "7", "has no 'tokens.train.shard.6'"},
        {"tokens.train.shards", "0", "'tokens.train.shards' = 0 is outside 1..4096"},
        {"tokens.train.shards", "4097", "'tokens.train.shards' = 4097 is outside 1..4096"},
        {"tokens.val", "file", "is none of: shards, train_tail"},
        {"tokens.source", "", "is empty"},
        {"tokens.train.path", "fw/x.bin", "is not one a flashgrad checkpoint"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        cr_assert_eq(fgt_run_cmd("rm -rf bad && cp -r good bad", NULL, 0), 0);
        resign("bad/" FG_CKPT_MODEL_FILE, edits[i].key, edits[i].value);
        fg_clear_error();
        fg_ckpt *b = fg_ckpt_open("bad", 1);
        cr_expect_null(b, "%s = '%s' was accepted", edits[i].key, edits[i].value);
        fg_ckpt_close(b);
        cr_expect(strstr(fg_last_error(), edits[i].phrase), "%s = '%s': the message does not say '%s': %s",
                  edits[i].key, edits[i].value, edits[i].phrase, fg_last_error());
    }
    cr_assert_eq(chdir(cwd), 0);
}

/* An unquoted pattern the shell expanded leaves shards as stray arguments: one line saying to quote
 * it. */
Test(token_runs, a_pattern_the_shell_expanded_is_one_line_saying_to_quote_it) {
    need_bin();
    write_shard_folder("fw", 3, 300, 41);
    expect_fails("train --data-bin fw/tiny_train_*.bin --vocab-size 300 " TINY " --steps 1 --out r", 2,
                 "unexpected argument 'fw/tiny_train_01.bin': did the shell expand a --data-bin pattern? Quote it");
    expect_fails("train --data-bin 'fw/nope_*.bin' --vocab-size 300 " TINY " --steps 1 --out r", 1,
                 "no file matches the pattern");
}

/* A shard truncated under a running train: one line naming that shard and the last good
 * checkpoint, exit 1 (the SIGBUS handler knows every shard's mapping). */
Test(token_runs, a_shard_truncated_while_training_is_one_line_naming_it) {
    need_bin();
    const size_t n = (size_t)2 << 20;
    cr_assert_eq(mkdir(at("d"), 0777), 0);
    for (int i = 0; i < 3; i++) {
        uint16_t *t = stream(n, 64, 50 + (uint32_t)i);
        char rel[64];
        snprintf(rel, sizeof rel, "d/s_train_%d.bin", i);
        write_llmc(rel, t, (int32_t)n, n, FG_LLMC_DATA_MAGIC);
        free(t);
    }
    uint16_t *v = stream(65536, 64, 60);
    write_llmc("d/s_val_0.bin", v, 65536, 65536, FG_LLMC_DATA_MAGIC);
    free(v);
    char cmd[2048], log[8192];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && { '%s' train --data-bin d --vocab-size 64 --n-layer 1 --n-head 2 --n-embd 16 --block-size 32 "
             "--batch-size 8 --steps 100000000 --eval-every 20 --eval-iters 1 --samples 0 --threads 1 --out r "
             ">/dev/null 2>err.txt & p=$!; i=0; while [ ! -f r/model.safetensors ] && [ $i -lt 600 ]; do sleep 0.1; "
             "i=$((i+1)); done; sleep 0.5; truncate -s 4096 d/s_train_1.bin; wait $p; echo \"exit $?\"; cat err.txt; }",
             dir, fgt_bin());
    int st = fgt_run_cmd(cmd, log, sizeof log);
    cr_assert_eq(st, 0, "%s", log);
    cr_expect(strstr(log, "exit 1\n"), "the run should exit 1:\n%s", log);
    cr_expect(strstr(log, "d/s_train_1.bin") && strstr(log, "changed while it was being read") &&
                  strstr(log, "last good checkpoint is in r (step"),
              "the line should name the shard and the checkpoint:\n%s", log);
}
