/* test_checkpoint.c — what a checkpoint refuses and what it survives (train/checkpoint.h): in-place
 * edits of any metadata value (caught by the checksum, which covers the metadata), near-miss
 * digests, forged but well-signed files with values the writer never writes, non-finite weights and
 * moments, shape mismatches, files of the older format, resuming from another folder, and data
 * files whose names are not UTF-8. */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tensor/safetensors.h"
#include "tests/common.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

static char tmpdir[256];

static void make_dir(void) { fgt_make_tmpdir(tmpdir, sizeof tmpdir, "/tmp/fg_ckpt_XXXXXX"); }
static void remove_dir(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) {}
}

TestSuite(checkpoint, .init = make_dir, .fini = remove_dir, .timeout = 120);

/* ---- helpers ---- */

static const char *in_dir(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmpdir, name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static unsigned char *slurp(const char *path, size_t *n) {
    void *buf;
    cr_assert_eq(fg_read_file(path, 0, &buf, n), FG_OK, "%s", fg_last_error());
    return buf;
}

static const char *some_text(void) {
    return "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
           "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n";
}

static fg_source *text_source(const char *path) {
    write_file(path, some_text(), strlen(some_text()));
    fg_text_options to = fg_text_default_options(8);
    fg_source *s = fg_source_text(path, &to);
    cr_assert(s, "%s", fg_last_error());
    return s;
}

static fg_trainer *trained(const fg_source *src, int n) {
    fg_train_config c = fgt_tiny_train_config(src, 8, 2, 10, 1, 5);
    fg_trainer *tr = fg_trainer_create(&c, src);
    cr_assert(tr, "%s", fg_last_error());
    for (int i = 0; i < n; i++) {
        fg_step_stats st;
        cr_assert_eq(fg_trainer_step(tr, &st), FG_OK, "%s", fg_last_error());
    }
    return tr;
}

/* A checkpoint of 3 steps on a text file, saved into tmpdir/run. */
static void save_run(char run[512]) {
    char data[512];
    fg_source *s = text_source(in_dir(data, sizeof data, "data.txt"));
    fg_trainer *tr = trained(s, 3);
    in_dir(run, 512, "run");
    mkdir(run, 0777);
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    fg_trainer_free(tr);
    fg_source_free(s);
}

static void expect_refused(const char *dir, int with_optim, const char *phrase, const char *what) {
    fg_clear_error();
    fg_ckpt *ck = fg_ckpt_open(dir, with_optim);
    cr_expect_null(ck, "%s: accepted", what);
    fg_ckpt_close(ck);
    cr_expect(strstr(fg_last_error(), phrase) != NULL, "%s: message '%s' does not mention '%s'", what, fg_last_error(),
              phrase);
}

static void expect_opens(const char *dir, const char *what) {
    fg_ckpt *ck = fg_ckpt_open(dir, 1);
    cr_expect_not_null(ck, "%s: refused: %s", what, fg_last_error());
    fg_ckpt_close(ck);
}

/* Where the JSON value of metadata `key` starts in the file image (just after `"key":"`). */
static size_t value_at(const unsigned char *b, size_t n, const char *key) {
    char pat[128];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    size_t k = strlen(pat);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(b + i, pat, k)) return i + k;
    cr_assert_fail("metadata key '%s' not found in the file", key);
    return 0;
}

/* Rewrites file `path` through the library's writer (so its checksum is right again) with metadata
 * key set to value (NULL: removed), and tensor `reshape` (if not NULL) stored with shape
 * (rows, cols) instead. */
static void resign(const char *path, const char *key, const char *value, const char *reshape, int64_t rows,
                   int64_t cols) {
    size_t n;
    unsigned char *buf = slurp(path, &n);
    fg_st_file *f = fg_st_parse(buf, n, path);
    cr_assert(f, "%s", fg_last_error());
    fg_st_writer *w = fg_st_writer_new();
    for (int i = 0; i < fg_st_count(f); i++) {
        const fg_st_array *a = fg_st_at(f, i);
        int64_t shape2[2] = {rows, cols};
        int re = reshape && !strcmp(a->name, reshape);
        cr_assert_eq(fg_st_writer_add(w, a->name, a->dtype, re ? 2 : a->ndim, re ? shape2 : a->shape, a->data), FG_OK,
                     "%s", fg_last_error());
    }
    for (int i = 0; i < fg_st_metadata_count(f); i++) {
        const char *k, *v;
        fg_st_metadata_at(f, i, &k, &v);
        if (strcmp(k, "fg_checksum") && (!key || strcmp(k, key))) fg_st_writer_set_metadata(w, k, v);
    }
    if (key && value) cr_assert_eq(fg_st_writer_set_metadata(w, key, value), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_st_writer_write(w, path), FG_OK, "%s", fg_last_error());
    fg_st_writer_free(w);
    fg_st_close(f);
    free(buf);
}

/* Replaces `from` by `to` in the JSON header of file `path` (any lengths) and fixes the length. */
static void rewrite_header(const char *path, const char *from, const char *to) {
    size_t n;
    unsigned char *b = slurp(path, &n);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)b[i] << (8 * i);
    char *h = malloc(hl + 1);
    memcpy(h, b + 8, hl);
    h[hl] = '\0';
    char *at = strstr(h, from);
    cr_assert(at, "'%s' is not in the header of %s", from, path);
    size_t nh = hl - strlen(from) + strlen(to), pre = (size_t)(at - h);
    unsigned char *o = malloc(8 + nh + (n - 8 - hl));
    for (int i = 0; i < 8; i++) o[i] = (unsigned char)((uint64_t)nh >> (8 * i));
    memcpy(o + 8, h, pre);
    memcpy(o + 8 + pre, to, strlen(to));
    memcpy(o + 8 + pre + strlen(to), at + strlen(from), hl - pre - strlen(from));
    memcpy(o + 8 + nh, b + 8 + hl, n - 8 - hl);
    write_file(path, o, 8 + nh + (n - 8 - hl));
    free(o);
    free(h);
    free(b);
}

/* The float32 data of parameter `name` of g. */
static float *param_data(fg_gpt *g, const char *name) {
    for (int j = 0; j < g->n_params; j++)
        if (!strcmp(g->params[j].name, name)) return fg_data(g->params[j].w);
    cr_assert_fail("no parameter '%s'", name);
    return NULL;
}

static void need_bin(void) {
    if (access(fgt_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
}

/* ---- the checksum covers the metadata ---- */

Test(checkpoint, a_metadata_value_edited_in_place_is_refused) {
    char run[512], mp[600], op[600];
    save_run(run);
    snprintf(mp, sizeof mp, "%s/%s", run, FG_CKPT_MODEL_FILE);
    snprintf(op, sizeof op, "%s/%s", run, FG_CKPT_OPTIM_FILE);
    size_t nm, no;
    unsigned char *model = slurp(mp, &nm), *optim = slurp(op, &no);
    expect_opens(run, "the saved checkpoint");
    /* same-length edits of one character of a value, each on a fresh copy of the good files */
    static const struct {
        int optim;
        const char *key;
        int offset; /* into the value */
        char to;
    } edits[] = {
        {0, "n_head", 0, '4'},  {0, "tokenizer", 9, 'b'}, /* "char-v1:0a..." -> "0b": a vocabulary byte */
        {0, "dropout", 2, '2'}, {0, "step", 0, '9'},       {0, "text.xxh64", 0, '0'}, {0, "attn", 0, 'F'},
        {1, "lr", 4, '4'},      {1, "grad_accum", 0, '3'}, {1, "adamw_t", 0, '4'},    {1, "seed", 0, '6'},
    };
    for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
        unsigned char *b = edits[e].optim ? optim : model;
        size_t n = edits[e].optim ? no : nm;
        size_t at = value_at(b, n, edits[e].key) + (size_t)edits[e].offset;
        unsigned char was = b[at], to = (unsigned char)edits[e].to;
        if (to == was) to = to == '1' ? '2' : '1';
        b[at] = to;
        write_file(edits[e].optim ? op : mp, b, n);
        char what[80];
        snprintf(what, sizeof what, "'%s' edited in place", edits[e].key);
        expect_refused(run, 1, "checksum mismatch in the header", what);
        b[at] = was;
        write_file(edits[e].optim ? op : mp, b, n);
    }
    expect_opens(run, "the restored files");

    /* and `flashgrad sample` says so and exits 1 */
    need_bin();
    size_t at = value_at(model, nm, "n_head");
    model[at] = '4';
    write_file(mp, model, nm);
    char cmd[1400], log[4096];
    snprintf(cmd, sizeof cmd, "'%s' sample --ckpt '%s' --tokens 5 2>&1", fgt_bin(), run);
    int rc = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(rc, 1, "sample of an edited checkpoint exited %d:\n%s", rc, log);
    cr_expect(strstr(log, "checksum mismatch in the header"), "%s", log);
    free(model);
    free(optim);
}

Test(checkpoint, a_near_miss_digest_or_a_flipped_last_data_byte_is_refused) {
    char run[512], mp[600], op[600];
    save_run(run);
    snprintf(mp, sizeof mp, "%s/%s", run, FG_CKPT_MODEL_FILE);
    snprintf(op, sizeof op, "%s/%s", run, FG_CKPT_OPTIM_FILE);
    for (int file = 0; file < 2; file++) {
        const char *p = file ? op : mp;
        size_t n;
        unsigned char *b = slurp(p, &n);
        /* "xxh64v2:<header digest>:<data digest>": flip the lowest bit of each digest in turn */
        size_t d0 = value_at(b, n, "fg_checksum") + strlen("xxh64v2:");
        for (int which = 0; which < 2; which++) {
            size_t last = d0 + 17 * (size_t)which + 15;
            unsigned char was = b[last];
            int v = was <= '9' ? was - '0' : was - 'a' + 10;
            v ^= 1;
            b[last] = (unsigned char)(v < 10 ? '0' + v : 'a' + v - 10);
            write_file(p, b, n);
            expect_refused(run, 1, which ? "checksum mismatch in tensor data" : "checksum mismatch in the header",
                           which ? "a data digest off by one bit" : "a header digest off by one bit");
            b[last] = was;
        }
        b[n - 1] ^= 0x01; /* the last data byte */
        write_file(p, b, n);
        expect_refused(run, 1, "checksum mismatch in tensor data", "a flipped last data byte");
        b[n - 1] ^= 0x01;
        write_file(p, b, n);
        free(b);
    }
    expect_opens(run, "the restored files");
}

Test(checkpoint, files_of_the_older_format_are_refused_by_their_version) {
    char run[512], mp[600];
    save_run(run);
    snprintf(mp, sizeof mp, "%s/%s", run, FG_CKPT_MODEL_FILE);
    size_t n;
    unsigned char *good = slurp(mp, &n);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)good[i] << (8 * i);
    size_t at = value_at(good, n, "fg_checksum");
    char sum[64], old[64];
    memcpy(sum, good + at, 8 + 33);
    sum[41] = '\0';
    /* what version 1 wrote: a data-only checksum, "fg_version":"1" */
    snprintf(old, sizeof old, "xxh64:%016" PRIx64, fg_xxh64(good + 8 + hl, n - 8 - hl, 0));
    rewrite_header(mp, sum, old);
    rewrite_header(mp, "\"fg_version\":\"2\"", "\"fg_version\":\"1\"");
    expect_refused(run, 0, "written by an older flashgrad (checkpoint format version 1", "a version 1 file");
    /* a data-only checksum on a version 2 file */
    rewrite_header(mp, "\"fg_version\":\"1\"", "\"fg_version\":\"2\"");
    expect_refused(run, 0, "its checksum does not cover its metadata", "a data-only checksum");
    /* no checksum at all */
    char with_key[100];
    snprintf(with_key, sizeof with_key, "\"fg_checksum\":\"%s\",", old);
    rewrite_header(mp, with_key, "");
    expect_refused(run, 0, "its checksum does not cover its metadata (it has none)", "no checksum");
    write_file(mp, good, n);
    expect_opens(run, "the restored file");
    free(good);
}

/* ---- values the writer never writes, in well-signed files ---- */

Test(checkpoint, metadata_values_are_exactly_what_the_writer_writes) {
    char run[512], mp[600], op[600];
    save_run(run);
    snprintf(mp, sizeof mp, "%s/%s", run, FG_CKPT_MODEL_FILE);
    snprintf(op, sizeof op, "%s/%s", run, FG_CKPT_OPTIM_FILE);
    size_t nm, no;
    unsigned char *model = slurp(mp, &nm), *optim = slurp(op, &no);
    static const struct {
        int optim;
        const char *key, *value, *phrase;
    } cases[] = {
        {0, "n_head", "+2", "'n_head' = '+2' is not an integer"},
        {0, "n_head", " 2", "'n_head' = ' 2' is not an integer"},
        {0, "n_head", "02", "'n_head' = '02' is not an integer"},
        {0, "n_head", "2.0", "'n_head' = '2.0' is not an integer"},
        {0, "n_head", "3", "not a multiple of n_head 3"},
        {0, "n_layer", "99999999999", "'n_layer' = 99999999999 is outside 1..1024"},
        {0, "n_layer", "99999999999999999999", "'n_layer' = '99999999999999999999' is not an integer"},
        {0, "n_layer", "2000", "'n_layer' = 2000 is outside 1..1024"},
        {0, "n_embd", "131072", "'n_embd' = 131072 is outside 1..65536"},
        {0, "n_head", "0", "'n_head' = 0 is outside 1..65536"},
        {0, "block_size", "2097152", "'block_size' = 2097152 is outside 1..1048576"},
        {0, "vocab_size", "-3", "'vocab_size' = -3 is outside 1..16777216"},
        {0, "step", "-1", "'step' = -1 is outside 0..1000000000000"},
        {0, "step", "9000000000000000000", "'step' = 9000000000000000000 is outside 0..1000000000000"},
        {0, "vocab_size", NULL, "has no 'vocab_size'"},
        {0, "bias", "no", "'bias' = 'no' is none of: false, true"},
        {0, "bias", "false", "holds 28 tensors; a 2-layer model has 15"}, /* a model without biases has other tensors */
        {0, "tied_lm_head", "1", "'tied_lm_head' = '1'"},
        {0, "format", "np", "'format' = 'np'"},
        {0, "attn", "Flash", "'attn' = 'Flash' is none of: naive, flash"},
        {0, "data", "Text", "'data' = 'Text' is none of: addition, text"},
        {0, "dropout", "0.1", "'dropout' = '0.1' is not a finite number written as flashgrad writes it"},
        {0, "dropout", "nan", "'dropout' = 'nan'"},
        {0, "dropout", "1", "'dropout' = 1 is outside [0, 1)"},
        {0, "n_heads", "2", "metadata key 'n_heads' is not one a flashgrad checkpoint"},
        {0, "text.path", "a%ZZ", "'text.path' = 'a%ZZ' is not a path as flashgrad stores it"},
        {0, "text.path", "%41.txt", "'text.path' = '%41.txt' is not a path"}, /* 'A' needs no escape */
        {0, "text.path", "a%00", "is not a path"},
        {0, "text.xxh64", "ABCDEF0123456789", "'text.xxh64' = 'ABCDEF0123456789' is not 16 lowercase hex digits"},
        {0, "text.val_fraction", "0.75", "'text.val_fraction' = 0.75 is outside [0, 0.5]"},
        {0, "fg_version", "3", "checkpoint version '3' is not supported"},
        {1, "lr", "-1", "'lr' = -1 is outside [0, 10]"},
        {1, "lr", "0", "lr 0 is outside (0, 10]"},
        {1, "lr", "1.0000000000000001e+300", "'lr' = 1.0000000000000001e+300 is outside [0, 10]"},
        {1, "min_lr", "11", "'min_lr' = 11 is outside [0, 10]"},
        {1, "weight_decay", "1.0000000000000001e+300", "'weight_decay' = 1.0000000000000001e+300 is outside [0, 1e+06]"},
        {1, "grad_clip", "-1", "'grad_clip' = -1 is outside [0, 1e+30]"},
        {1, "eps", "1e-300", "'eps' = 1e-300 is outside [1e-30, 1]"},
        {1, "beta1", "-0.5", "'beta1' = -0.5 is outside [0, 1)"},
        {1, "batch_size", "0", "'batch_size' = 0 is outside 1..16777216"},
        {1, "batch_size", "2147483647", "'batch_size' = 2147483647 is outside 1..16777216"},
        {1, "grad_accum", "4194304", "'grad_accum' = 4194304 is outside 1..1048576"},
        {1, "eval_iters", "0", "'eval_iters' = 0 is outside 1..10000000"},
        {1, "eval_every", "-1", "'eval_every' = -1 is outside 0..2147483647"},
        {1, "steps", "0", "'steps' = 0 is outside 1..1000000000000"},
        {1, "warmup", "-1", "'warmup' = -1 is outside 0..1000000000000"},
        {1, "decay_steps", "1000000000001", "'decay_steps' = 1000000000001 is outside 1..1000000000000"},
        {1, "adamw_t", "-2", "'adamw_t' = -2 is outside 0..1000000000000"},
        {1, "grad_accum", "0", "'grad_accum' = 0 is outside 1..1048576"},
        {1, "beta2", "1", "'beta2' = 1 is outside [0, 1)"},
        {1, "eps", "0", "'eps' = 0 is outside [1e-30, 1]"},
        {1, "adamw_t", "4", "'adamw_t' = 4 differs from 'step' = 3"},
        {1, "seed", "-5", "'seed' = '-5' is not an unsigned integer"},
        {1, "momentum", "0.9", "metadata key 'momentum' is not one"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *p = cases[i].optim ? op : mp;
        resign(p, cases[i].key, cases[i].value, NULL, 0, 0);
        char what[120];
        snprintf(what, sizeof what, "%s = %s", cases[i].key, cases[i].value ? cases[i].value : "(removed)");
        expect_refused(run, 1, cases[i].phrase, what);
        write_file(p, cases[i].optim ? optim : model, cases[i].optim ? no : nm);
    }
    expect_opens(run, "the restored files");
    /* re-signing with nothing changed is accepted: the refusals above are the values' */
    resign(mp, NULL, NULL, NULL, 0, 0);
    resign(op, NULL, NULL, NULL, 0, 0);
    expect_opens(run, "files re-signed unchanged");
    free(model);
    free(optim);
}

/* ---- tensors ---- */

Test(checkpoint, non_finite_weights_and_moments_are_refused_naming_the_tensor_and_index) {
    char data[512], run[512];
    fg_source *s = text_source(in_dir(data, sizeof data, "data.txt"));
    fg_trainer *tr = trained(s, 2);
    in_dir(run, sizeof run, "run");
    mkdir(run, 0777);
    /* the library's own writer, hashes and all, over a trainer holding one bad value */
    float *w = param_data(tr->model, "transformer.h.1.attn.c_attn.weight");
    const float keep = w[19]; /* element (1, 3) of (48, 16) */
    w[19] = NAN;
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    expect_refused(run, 0,
                   "tensor 'transformer.h.1.attn.c_attn.weight' holds a non-finite value (nan) at index 19, "
                   "element (1, 3)",
                   "a NaN weight");
    w[19] = keep;
    float *wte = param_data(tr->model, "transformer.wte.weight");
    wte[0] = -INFINITY;
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    expect_refused(run, 0, "tensor 'transformer.wte.weight' holds a non-finite value (-inf) at index 0",
                   "an -inf weight");

    if (access(fgt_bin(), X_OK) == 0) {
        char cmd[1400], log[4096];
        snprintf(cmd, sizeof cmd, "'%s' sample --ckpt '%s' --tokens 5 2>&1", fgt_bin(), run);
        int rc = fgt_run_cmd(cmd, log, sizeof log);
        cr_expect_eq(rc, 1, "sample of a non-finite checkpoint exited %d:\n%s", rc, log);
        cr_expect(strstr(log, "non-finite"), "%s", log);
    }
    wte[0] = 0.5f;

    float *m = fg_data(tr->opt.m), *v = fg_data(tr->opt.v);
    m[5] = INFINITY;
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    expect_refused(run, 1, "exp_avg holds a non-finite value (inf) at index 5", "an inf first moment");
    fg_ckpt *only_model = fg_ckpt_open(run, 0);
    cr_expect_not_null(only_model, "the model alone is fine: %s", fg_last_error());
    fg_ckpt_close(only_model);
    m[5] = 0;
    v[7] = -1e-3f;
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    expect_refused(run, 1, "exp_avg_sq holds a negative second moment (-0.001) at index 7", "a negative second moment");
    v[7] = NAN;
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    expect_refused(run, 1, "exp_avg_sq holds a non-finite value (nan) at index 7", "a NaN second moment");
    v[7] = 0;
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    expect_opens(run, "the repaired state");
    fg_trainer_free(tr);
    fg_source_free(s);
}

Test(checkpoint, a_shape_mismatch_shows_the_stored_and_the_expected_shape) {
    char run[512], mp[600];
    save_run(run);
    snprintf(mp, sizeof mp, "%s/%s", run, FG_CKPT_MODEL_FILE);
    /* (3C, C) = (48, 16) stored as (16, 48): same element count, so only the shapes can tell */
    resign(mp, NULL, NULL, "transformer.h.0.attn.c_attn.weight", 16, 48);
    expect_refused(run, 0, "transformer.h.0.attn.c_attn.weight has shape (16, 48) F32, expected (48, 16) F32",
                   "a transposed c_attn weight");
}

/* ---- the data path ---- */

Test(checkpoint, resume_finds_the_data_by_its_absolute_path_from_another_folder) {
    char sub[512], other[512], cwd[PATH_MAX];
    cr_assert(getcwd(cwd, sizeof cwd));
    mkdir(in_dir(sub, sizeof sub, "sub"), 0777);
    mkdir(in_dir(other, sizeof other, "other"), 0777);
    cr_assert_eq(chdir(tmpdir), 0);
    fg_source *s = text_source("sub/data.txt");
    char abs[PATH_MAX];
    cr_assert(realpath("sub/data.txt", abs));
    fg_trainer *tr = trained(s, 1);
    mkdir("run", 0777);
    cr_assert_eq(fg_ckpt_save("run", tr), FG_OK, "%s", fg_last_error());
    fg_trainer_free(tr);

    cr_assert_eq(chdir("other"), 0);
    fg_ckpt *ck = fg_ckpt_open("../run", 1);
    cr_assert(ck, "%s", fg_last_error());
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    cr_expect_str_eq(in->data.path, "sub/data.txt");
    cr_expect_str_eq(in->data.path_abs, abs);
    fg_source *back = fg_ckpt_source(ck, NULL);
    cr_expect(back && back->file_hash == s->file_hash, "not found by its absolute path: %s", fg_last_error());
    fg_source_free(back);

    /* the file moved: both recorded paths are named, and that they are the checkpoint's */
    cr_assert_eq(rename("../sub/data.txt", "../moved.txt"), 0);
    back = fg_ckpt_source(ck, NULL);
    cr_expect_null(back);
    const char *msg = fg_last_error();
    cr_expect(strstr(msg, "recorded in the checkpoint") && strstr(msg, "'sub/data.txt'") && strstr(msg, abs),
              "the message does not show both recorded paths: %s", msg);
    fg_source_free(back);
    /* a path the user gives is used instead, if it holds the same bytes */
    back = fg_ckpt_source(ck, "../moved.txt");
    cr_expect(back != NULL, "%s", fg_last_error());
    fg_source_free(back);
    const char *other_text = "Something else entirely, long enough for a block of eight in both splits,\n"
                             "something else entirely, long enough for a block of eight in both splits.\n";
    write_file("../changed.txt", other_text, strlen(other_text));
    back = fg_ckpt_source(ck, "../changed.txt");
    cr_expect(!back && strstr(fg_last_error(), "is not the file the checkpoint trained on"), "%s", fg_last_error());
    fg_source_free(back);
    fg_ckpt_close(ck);
    fg_source_free(s);
    cr_assert_eq(chdir(cwd), 0);
}

Test(checkpoint, check_savable_checks_everything_and_writes_nothing) {
    char data[600], run[512];
    /* a file name that is not UTF-8 is stored escaped, so it is savable */
    in_dir(data, sizeof data,
           "d\xff"
           "ata%.txt");
    fg_source *s = text_source(data);
    fg_trainer *tr = trained(s, 0);
    in_dir(run, sizeof run, "run");
    mkdir(run, 0777);
    cr_expect_eq(fg_ckpt_check_savable(run, tr), FG_OK, "%s", fg_last_error());
    char mp[700];
    snprintf(mp, sizeof mp, "%s/%s", run, FG_CKPT_MODEL_FILE);
    cr_expect_neq(access(mp, F_OK), 0, "check_savable wrote %s", mp);
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    fg_ckpt *ck = fg_ckpt_open(run, 1);
    cr_assert(ck, "%s", fg_last_error());
    cr_expect_str_eq(fg_ckpt_get_info(ck)->data.path, data, "the raw bytes of the name did not survive");
    fg_ckpt_close(ck);
    /* a folder whose file paths the system would refuse is found before any step */
    char deep[4200];
    size_t k = (size_t)snprintf(deep, sizeof deep, "%s/", tmpdir);
    while (k < 4070) deep[k++] = 'd';
    deep[k] = '\0';
    cr_expect_eq(fg_ckpt_check_savable(deep, tr), FG_ERR_ARG);
    cr_expect(strstr(fg_last_error(), "too long"), "%s", fg_last_error());
    fg_trainer_free(tr);
    fg_source_free(s);
}

Test(checkpoint, a_run_on_a_file_whose_name_is_not_utf8_trains_checkpoints_and_resumes_elsewhere) {
    need_bin();
    char data[600], elsewhere[512];
    write_file(in_dir(data, sizeof data,
                      "d\xff"
                      "ata.txt"),
               some_text(), strlen(some_text()));
    mkdir(in_dir(elsewhere, sizeof elsewhere, "elsewhere"), 0777);
    const char *flags = "--steps 2 --n-layer 1 --n-head 2 --n-embd 16 --block-size 8 --batch-size 2 --eval-iters 1 "
                        "--samples 0";
    char cmd[2000], log[8192];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && '%s' train --data 'd\xff"
             "ata.txt' --out run %s 2>&1",
             tmpdir, fgt_bin(), flags);
    int rc = fgt_run_cmd(cmd, log, sizeof log);
    cr_assert_eq(rc, 0, "train on a non-UTF-8 file name exited %d:\n%s", rc, log);
    /* the file gone: one line naming both recorded paths, exit 1 */
    char moved[600];
    cr_assert_eq(rename(data, in_dir(moved, sizeof moved, "moved.txt")), 0);
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' train --resume --out ../run --steps 4 2>&1", elsewhere, fgt_bin());
    rc = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect_eq(rc, 1, "resume without the data exited %d:\n%s", rc, log);
    cr_expect(strstr(log, "recorded in the checkpoint") &&
                  strstr(log, "'d\xff"
                              "ata.txt'") &&
                  strstr(log, data),
              "the message does not show both recorded paths:\n%s", log);
    int lines = 0;
    for (const char *c = log; *c; c++) lines += *c == '\n';
    cr_expect_eq(lines, 1, "an error should be one line:\n%s", log);
    cr_assert_eq(rename(moved, data), 0);
    /* resumed from another folder: the relative path fails there, the absolute one is found */
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' train --resume --out ../run --steps 4 --samples 0 2>&1", elsewhere,
             fgt_bin());
    rc = fgt_run_cmd(cmd, log, sizeof log);
    cr_assert_eq(rc, 0, "resume from another folder exited %d:\n%s", rc, log);
    char run[512];
    fg_ckpt *ck = fg_ckpt_open(in_dir(run, sizeof run, "run"), 1);
    cr_assert(ck, "%s", fg_last_error());
    cr_expect_eq(fg_ckpt_get_info(ck)->step, 4);
    fg_ckpt_close(ck);
}

/* The "step" of the checkpoint file at path. */
static long long file_step(const char *path) {
    fg_st_file *f = fg_st_load(path);
    cr_assert(f, "%s", fg_last_error());
    const char *v = fg_st_metadata(f, "step");
    cr_assert(v, "%s has no step", path);
    long long s = atoll(v);
    fg_st_close(f);
    return s;
}

Test(checkpoint, a_save_after_an_interrupted_save_keeps_the_models_own_optimizer_state) {
    char data[512], run[512], other[512], opt[1024], prev[1024], oopt[1024];
    fg_source *s = text_source(in_dir(data, sizeof data, "data.txt"));
    fg_trainer *tr = trained(s, 3);
    in_dir(run, sizeof run, "run");
    in_dir(other, sizeof other, "other");
    mkdir(run, 0777);
    mkdir(other, 0777);
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    fg_step_stats st;
    cr_assert_eq(fg_trainer_step(tr, &st), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_ckpt_save(other, tr), FG_OK, "%s", fg_last_error());
    snprintf(opt, sizeof opt, "%s/" FG_CKPT_OPTIM_FILE, run);
    snprintf(prev, sizeof prev, "%s/" FG_CKPT_OPTIM_PREV_FILE, run);
    snprintf(oopt, sizeof oopt, "%s/" FG_CKPT_OPTIM_FILE, other);

    /* a save of step 4 killed between its optimizer and its model: model 3, optimizer 4, .prev 3 */
    cr_assert_eq(rename(opt, prev), 0);
    size_t n;
    unsigned char *b = slurp(oopt, &n);
    write_file(opt, b, n);
    free(b);
    expect_opens(run, "the model with its state in .prev");

    /* the next save (the resumed run's) must keep the model's own state on disk until its model is
     * in place: .prev stays step 3 while optimizer.safetensors is replaced */
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    cr_expect_eq(file_step(prev), 3, "the stale optimizer file was renamed over the model's own state");
    cr_expect_eq(file_step(opt), 4);
    fg_ckpt *ck = fg_ckpt_open(run, 1);
    cr_assert(ck, "%s", fg_last_error());
    cr_expect_eq(fg_ckpt_get_info(ck)->step, 4);
    fg_ckpt_close(ck);

    /* and a save over a matching pair moves the pair's optimizer file to .prev as before */
    cr_assert_eq(fg_trainer_step(tr, &st), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    cr_expect_eq(file_step(prev), 4);
    cr_expect_eq(file_step(opt), 5);
    fg_trainer_free(tr);
    fg_source_free(s);
}

/* Pairing is by step and parameter hash: an optimizer file of the same step but from other weights
 * (another seed's run) does not pair with the model, and the model's own state in .prev is used. */
Test(checkpoint, an_optimizer_file_of_the_same_step_but_other_weights_does_not_pair) {
    char data[512], a[512], b[512], aopt[1024], bopt[1024], aprev[1024];
    fg_source *s = text_source(in_dir(data, sizeof data, "data.txt"));
    fg_trainer *ta = trained(s, 3);
    fg_train_config c = fgt_tiny_train_config(s, 8, 2, 10, 1, 6);
    fg_trainer *tb = fg_trainer_create(&c, s);
    cr_assert(tb, "%s", fg_last_error());
    for (int i = 0; i < 3; i++) {
        fg_step_stats st;
        cr_assert_eq(fg_trainer_step(tb, &st), FG_OK, "%s", fg_last_error());
    }
    in_dir(a, sizeof a, "a");
    in_dir(b, sizeof b, "b");
    mkdir(a, 0777);
    mkdir(b, 0777);
    cr_assert_eq(fg_ckpt_save(a, ta), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_ckpt_save(b, tb), FG_OK, "%s", fg_last_error());
    snprintf(aopt, sizeof aopt, "%s/" FG_CKPT_OPTIM_FILE, a);
    snprintf(bopt, sizeof bopt, "%s/" FG_CKPT_OPTIM_FILE, b);
    snprintf(aprev, sizeof aprev, "%s/" FG_CKPT_OPTIM_PREV_FILE, a);
    cr_assert_eq(file_step(aopt), file_step(bopt), "the two runs should be at the same step");
    cr_assert_eq(rename(aopt, aprev), 0);
    size_t n;
    unsigned char *bb = slurp(bopt, &n);
    write_file(aopt, bb, n);
    free(bb);
    /* with its own state in .prev: that one is taken */
    fg_ckpt *ck = fg_ckpt_open(a, 1);
    cr_assert(ck, "%s", fg_last_error());
    fg_trainer *tr = fg_trainer_create(&fg_ckpt_get_info(ck)->train, s);
    cr_assert(tr);
    cr_assert_eq(fg_ckpt_restore(ck, tr), FG_OK, "%s", fg_last_error());
    fg_ckpt_close(ck);
    /* its moments are A's, not B's: one more step equals A's own next step */
    fg_step_stats s1, s2;
    cr_assert_eq(fg_trainer_step(tr, &s1), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_trainer_step(ta, &s2), FG_OK, "%s", fg_last_error());
    cr_expect(s1.loss == s2.loss && s1.grad_norm == s2.grad_norm, "restored run differs from A: %.9g vs %.9g",
              s1.loss, s2.loss);
    fg_trainer_free(tr);
    /* without it: refused, saying the weights differ */
    cr_assert_eq(unlink(aprev), 0);
    expect_refused(a, 1, "with other weights", "an optimizer file of another run at the same step");
    fg_trainer_free(ta);
    fg_trainer_free(tb);
    fg_source_free(s);
}

/* A save writes the optimizer file before the model file (fg_ckpt_save's crash-consistent order):
 * a save that can write a file the model's size but not the optimizer's (a file-size limit in a
 * child process, as a disk that fills would) leaves the previous checkpoint whole and paired. */
Test(checkpoint, a_save_that_fails_midway_leaves_the_previous_checkpoint_paired) {
    char data[512], run[512], mpath[1024], opath[1024];
    fg_source *s = text_source(in_dir(data, sizeof data, "data.txt"));
    fg_trainer *tr = trained(s, 3);
    in_dir(run, sizeof run, "run");
    mkdir(run, 0777);
    cr_assert_eq(fg_ckpt_save(run, tr), FG_OK, "%s", fg_last_error());
    snprintf(mpath, sizeof mpath, "%s/" FG_CKPT_MODEL_FILE, run);
    snprintf(opath, sizeof opath, "%s/" FG_CKPT_OPTIM_FILE, run);
    struct stat ms, os;
    cr_assert(stat(mpath, &ms) == 0 && stat(opath, &os) == 0);
    cr_assert(os.st_size > ms.st_size + 4096, "the optimizer file (%lld) should be larger than the model's (%lld)",
              (long long)os.st_size, (long long)ms.st_size);
    fg_step_stats st;
    cr_assert_eq(fg_trainer_step(tr, &st), FG_OK, "%s", fg_last_error());
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {.rlim_cur = (rlim_t)(ms.st_size + 2048), .rlim_max = (rlim_t)(ms.st_size + 2048)};
        setrlimit(RLIMIT_FSIZE, &rl);
        _exit(fg_ckpt_save(run, tr) == FG_OK ? 0 : 3);
    }
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 3, "the limited save did not fail (status %d)", ws);
    cr_expect_eq(file_step(mpath), 3, "the model file is from step %lld: it was written before the optimizer's",
                 file_step(mpath));
    expect_opens(run, "the previous checkpoint after a save that failed midway");
    fg_trainer_free(tr);
    fg_source_free(s);
}
