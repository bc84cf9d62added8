/* test_nanogpt.c — nanoGPT's habits (cli/nanogpt.h): the config-file reader on nanoGPT's own config
 * files (tests/nanogpt/config/, copied unchanged from karpathy/nanoGPT) and on lines it must refuse;
 * `flashgrad train CONFIG.py` on data/shakespeare_char prepared as nanoGPT's prepare.py does; every
 * nanoGPT flag name against ours and against train.py's own formulas; `flashgrad eval` and
 * `train --eval-only` leaving the run folder untouched; the FMA peak cache (cli/peak_cache.h). */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include "cli/nanogpt.h"
#include "tensor/fileio.h"

#define CONFIGS "tests/nanogpt/config"
#define TS_PATH "../shared/datasets/tinyshakespeare/input.txt"

/* ---- the reader on nanoGPT's files ---- */
typedef struct {
    const char *key, *value;
    int is_string;
} kv;

static void expect_entries(const char *file, const kv *want, int n) {
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/%s", CONFIGS, file);
    fg_pyconfig_entry *e = NULL;
    int got = fg_pyconfig_read(path, &e, err, sizeof err);
    cr_assert_eq(got, n, "%s: %d entries, expected %d (%s)", file, got, n, got < 0 ? err : "");
    for (int i = 0; i < n; i++) {
        cr_expect_str_eq(e[i].key, want[i].key, "%s entry %d", file, i);
        cr_expect_str_eq(e[i].value, want[i].value, "%s: %s", file, want[i].key);
        cr_expect_eq(e[i].is_string, want[i].is_string, "%s: %s string-ness", file, want[i].key);
    }
    free(e);
}

Test(pyconfig, reads_train_shakespeare_char_as_nanogpt_ships_it) {
    static const kv w[] = {
        {"out_dir", "out-shakespeare-char", 1}, {"eval_interval", "250", 0}, {"eval_iters", "200", 0},
        {"log_interval", "10", 0},              {"always_save_checkpoint", "False", 0},
        {"wandb_log", "False", 0},              {"wandb_project", "shakespeare-char", 1},
        {"wandb_run_name", "mini-gpt", 1},      {"dataset", "shakespeare_char", 1},
        {"gradient_accumulation_steps", "1", 0}, {"batch_size", "64", 0},
        {"block_size", "256", 0},               {"n_layer", "6", 0},
        {"n_head", "6", 0},                     {"n_embd", "384", 0},
        {"dropout", "0.20000000000000001", 0},  {"learning_rate", "0.001", 0},
        {"max_iters", "5000", 0},               {"lr_decay_iters", "5000", 0},
        {"min_lr", "0.0001", 0},                {"beta2", "0.98999999999999999", 0},
        {"warmup_iters", "100", 0},
    };
    expect_entries("train_shakespeare_char.py", w, sizeof w / sizeof w[0]);
}

Test(pyconfig, reads_train_gpt2_with_its_constant_product) {
    static const kv w[] = {
        {"wandb_log", "True", 0},       {"wandb_project", "owt", 1},   {"wandb_run_name", "gpt2-124M", 1},
        {"batch_size", "12", 0},        {"block_size", "1024", 0},     {"gradient_accumulation_steps", "40", 0},
        {"max_iters", "600000", 0},     {"lr_decay_iters", "600000", 0}, {"eval_interval", "1000", 0},
        {"eval_iters", "200", 0},       {"log_interval", "10", 0},     {"weight_decay", "0.10000000000000001", 0},
    };
    expect_entries("train_gpt2.py", w, sizeof w / sizeof w[0]);
}

Test(pyconfig, reads_eval_gpt2) {
    static const kv w[] = {{"batch_size", "8", 0}, {"eval_iters", "500", 0}, {"eval_only", "True", 0},
                           {"wandb_log", "False", 0}, {"init_from", "gpt2", 1}};
    expect_entries("eval_gpt2.py", w, sizeof w / sizeof w[0]);
}

Test(pyconfig, refuses_finetune_shakespeare_at_its_import_line) {
    char err[512];
    fg_pyconfig_entry *e = NULL;
    cr_expect_eq(fg_pyconfig_read(CONFIGS "/finetune_shakespeare.py", &e, err, sizeof err), -1);
    cr_expect(strstr(err, "finetune_shakespeare.py:1:") && strstr(err, "import time"), "%s", err);
    free(e);
}

/* One line, what it must read as (NULL: refused, with `why` in the message). */
typedef struct {
    const char *line, *value, *why;
} line_case;

static const line_case line_cases[] = {
    {"x = 5 * 8", "40", NULL},
    {"x = 2 ** 10", "1024", NULL},
    {"x = -2 ** 2", "-4", NULL}, /* Python: -(2 ** 2) */
    {"x = -7 // 2", "-4", NULL}, /* floor division */
    {"x = 7 % -3", "-2", NULL},  /* Python's modulo takes the divisor's sign */
    {"x = 1 / 4", "0.25", NULL},
    {"x = (1 + 2) * 3", "9", NULL},
    {"x = 1_000_000", "1000000", NULL},
    {"x = 0x10", "16", NULL},
    {"x = 6e-4", "0.00059999999999999995", NULL},
    {"x = .5", "0.5", NULL},
    {"x = True # a comment", "True", NULL},
    {"x = 'a#b' # the hash in the string is not a comment", "a#b", NULL},
    {"x = \"it's\"", "it's", NULL},
    {"x = 'tab\\there'", "tab\there", NULL},
    {"x = None", "None", NULL},
    {"x = foo", NULL, "not a literal"},
    {"x = 'a' + 'b'", NULL, "not a literal"},
    {"x = str(1)", NULL, "not a literal"},
    {"x = 5 *", NULL, "not a literal"},
    {"x = (1", NULL, "without its ')'"},
    {"x = 1 / 0", NULL, "division by zero"},
    {"x = 'open", NULL, "closing quote"},
    {"x = f'{y}'", NULL, "prefixed strings"},
    {"x = 9223372036854775807 + 1", NULL, "overflow"},
    {"x = Truex", NULL, "not a literal"},
    {"x == 1", NULL, "not a `key = literal` line"},
    {"  x = 1", NULL, "indented"},
    {"import os", NULL, "not a `key = literal` line"},
    {"x, y = 1, 2", NULL, "not a `key = literal` line"},
    {"exec('1')", NULL, "not a `key = literal` line"},
    {"x = 012", NULL, "leading zeros"},
};

/* Each line of line_cases in a file of its own, as its third line. */
Test(pyconfig, reads_each_line_as_python_would_or_refuses_it) {
    for (size_t k = 0; k < sizeof line_cases / sizeof line_cases[0]; k++) {
        const line_case *c = &line_cases[k];
    char path[] = "/tmp/fg_pyconfig_XXXXXX", err[512];
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    char text[256];
    int n = snprintf(text, sizeof text, "# a config\n\n%s\n", c->line);
    cr_assert(write(fd, text, (size_t)n) == n);
    close(fd);
    fg_pyconfig_entry *e = NULL;
    int got = fg_pyconfig_read(path, &e, err, sizeof err);
    unlink(path);
    if (c->value) {
        cr_assert_eq(got, 1, "'%s': %d entries (%s)", c->line, got, got < 0 ? err : "");
        cr_expect_str_eq(e[0].value, c->value, "'%s'", c->line);
        cr_expect_eq(e[0].line, 3, "'%s': line %d", c->line, e[0].line);
    } else {
        cr_expect_eq(got, -1, "'%s' was read (%d entries)", c->line, got);
        cr_expect(strstr(err, c->why) != NULL, "'%s': message lacks '%s': %s", c->line, c->why, err);
        cr_expect(strstr(err, ":3:") != NULL, "'%s': the message does not name line 3: %s", c->line, err);
    }
    free(e);
    }
}

/* ---- the command line ---- */
static char tmpdir[256];

static void make_tmpdir(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fg_nanogpt_test_XXXXXX");
    cr_assert(mkdtemp(tmpdir), "mkdtemp: %s", strerror(errno));
}
static void remove_tmpdir(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd)) {
    }
}

static const char *fg_bin(void) {
    const char *b = getenv("FG_BIN");
    return b && *b ? b : "build/flashgrad";
}

static void need_bin(void) {
    if (access(fg_bin(), X_OK) != 0) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fg_bin());
}

/* `flashgrad <args>` in tmpdir (stdout and stderr together into out, at most n - 1 bytes kept);
 * the exit status, -1 when it did not exit. */
static int run(const char *args, char *out, size_t n) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && XDG_CACHE_HOME='%s/cache' '%s' %s 2>&1", tmpdir, tmpdir, fg_bin(), args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t k = 0, r;
    char chunk[4096];
    while ((r = fread(chunk, 1, sizeof chunk, p)) > 0)
        for (size_t i = 0; i < r; i++)
            if (k < n - 1) out[k++] = chunk[i];
    out[k] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void expect_run(const char *args, int code, const char *phrase, char *out, size_t n) {
    int st = run(args, out, n);
    cr_assert_eq(st, code, "`flashgrad %s` exited %d, expected %d:\n%s", args, st, code, out);
    cr_expect(strstr(out, phrase), "`flashgrad %s`: no '%s' in:\n%s", args, phrase, out);
}

/* An error: exit code, one line, naming `phrase`. */
static void expect_error(const char *args, int code, const char *phrase) {
    char out[8192];
    expect_run(args, code, phrase, out, sizeof out);
    int lines = 0;
    for (const char *c = out; *c; c++) lines += *c == '\n';
    cr_expect_eq(lines, 1, "`flashgrad %s`: %d lines:\n%s", args, lines, out);
}

/* data/shakespeare_char/{train,val}.bin in tmpdir as nanoGPT's data/shakespeare_char/prepare.py
 * writes them: the characters sorted by code point (bytes here: the corpus is ASCII) numbered from
 * 0, the first int(n * 0.9) characters for train, the rest for val, as uint16. Returns the
 * vocabulary size (65 for Tiny Shakespeare). */
static int prepare_shakespeare_char(void) {
    void *buf = NULL;
    size_t n = 0;
    if (fg_read_file(TS_PATH, 0, &buf, &n) != FG_OK) cr_skip_test("no Tiny Shakespeare at %s", TS_PATH);
    const unsigned char *s = buf;
    int id[256], used[256] = {0}, vocab = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert(s[i] < 128, "the corpus is not ASCII at byte %zu", i);
        used[s[i]] = 1;
    }
    for (int c = 0; c < 256; c++) id[c] = used[c] ? vocab++ : -1;
    char p[600];
    snprintf(p, sizeof p, "%s/data", tmpdir);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/data/shakespeare_char", tmpdir);
    mkdir(p, 0777);
    const size_t cut = (size_t)((double)n * 0.9); /* int(n * 0.9) */
    uint16_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = (uint16_t)id[s[i]];
    for (int split = 0; split < 2; split++) {
        snprintf(p, sizeof p, "%s/data/shakespeare_char/%s", tmpdir, split ? "val.bin" : "train.bin");
        FILE *f = fopen(p, "wb");
        cr_assert(f);
        size_t a = split ? cut : 0, b = split ? n : cut;
        cr_assert_eq(fwrite(ids + a, sizeof *ids, b - a, f), b - a);
        fclose(f);
    }
    free(ids);
    free(buf);
    /* nanoGPT's config files, unchanged, in config/ */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/config' && cp %s/*.py '%s/config/'", tmpdir, CONFIGS, tmpdir);
    cr_assert_eq(system(cmd), 0);
    return vocab;
}

/* The given fields (0-based) of every row of DIR/log.csv, rows joined by '\n' into out. */
static int log_fields(const char *dir, const int *cols, int ncols, char *out, size_t n) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s/log.csv", tmpdir, dir);
    FILE *f = fopen(p, "r");
    cr_assert(f, "no %s", p);
    char line[512];
    int rows = -1;
    size_t k = 0;
    out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        rows++;
        if (rows == 0) continue;
        line[strcspn(line, "\n")] = '\0';
        for (int c = 0; c < ncols; c++) {
            const char *s = line;
            for (int j = 0; j < cols[c] && s; j++) {
                s = strchr(s, ',');
                if (s) s++;
            }
            cr_assert(s, "short row: %s", line);
            k += (size_t)snprintf(out + k, n - k, "%.*s%s", (int)strcspn(s, ","), s, c + 1 < ncols ? "," : "\n");
        }
    }
    fclose(f);
    return rows;
}

/* nanoGPT's file as shipped, shrunk from the command line (its dataset, schedule, betas, dropout,
 * always_save_checkpoint stay the file's). */
#define SMALL "--n_layer=1 --n_head=2 --n_embd=16 --block_size=16 --batch_size=4 --eval_iters=2 --max_iters=3 --threads=1"

Test(nanogpt, train_reads_train_shakespeare_char_py_unchanged, .init = make_tmpdir, .fini = remove_tmpdir,
     .timeout = 300) {
    need_bin();
    cr_assert_eq(prepare_shakespeare_char(), 65);
    char out[16384];
    expect_run("train config/train_shakespeare_char.py " SMALL, 0, "final:", out, sizeof out);
    /* the file's settings, over train.py's defaults (weight decay 0.1, clip 1.0) */
    cr_expect(strstr(out, "data/shakespeare_char/train.bin (1003854 ids, train), data/shakespeare_char/val.bin "
                          "(111540 ids, val)"),
              "%s", out);
    cr_expect(strstr(out, "lr 0.001 -> 0.0001 (warmup 100, cosine to step 5000), AdamW betas (0.9, 0.99) wd 0.1, clip 1"),
              "%s", out);
    cr_expect(strstr(out, "dropout 0.2"), "%s", out);
    cr_expect(strstr(out, "only at evaluations that improve the best val loss"), "%s", out);
    cr_expect(strstr(out, "warning: --warmup 100 is not shorter than the run's 3 steps"), "%s", out);
    struct stat sb;
    char p[600];
    snprintf(p, sizeof p, "%s/out-shakespeare-char/model.safetensors", tmpdir);
    cr_expect_eq(stat(p, &sb), 0, "out_dir was not the run folder:\n%s", out);
    char rows[4096];
    int cols[] = {0};
    cr_expect_eq(log_fields("out-shakespeare-char", cols, 1, rows, sizeof rows), 3);
}

/* Every nanoGPT name does what our flag does: the same run under both spellings (and both
 * --key=value and --key value) gives the same log, bit for bit. */
Test(nanogpt, every_alias_trains_the_same_run_as_our_flag, .init = make_tmpdir, .fini = remove_tmpdir,
     .timeout = 300) {
    need_bin();
    prepare_shakespeare_char();
    char out[16384], a[8192], b[8192], c[8192];
    expect_run("train --data-bin data/shakespeare_char --vocab-size 65 --n-layer 1 --n-head 2 --n-embd 16 "
               "--block-size 8 --batch-size 3 --grad-accum 2 --lr 0.004 --min-lr 0.0002 --warmup 2 "
               "--lr-decay-steps 5 --weight-decay 0.05 --beta1 0.8 --beta2 0.9 --grad-clip 0.5 --dropout 0.1 "
               "--steps 7 --eval-every 3 --eval-iters 2 --log-every 1 --out ours --samples 0 --threads 1",
               0, "final:", out, sizeof out);
    expect_run("train --dataset=shakespeare_char --vocab-size 65 --n_layer=1 --n_head=2 --n_embd=16 --block_size=8 "
               "--batch_size=3 --gradient_accumulation_steps=2 --learning_rate=0.004 --min_lr=0.0002 "
               "--warmup_iters=2 --lr_decay_iters=5 --weight_decay=0.05 --beta1=0.8 --beta2=0.9 --grad_clip=0.5 "
               "--dropout=0.1 --max_iters=7 --eval_interval=3 --eval_iters=2 --log_interval=1 --out_dir=theirs "
               "--always_save_checkpoint=True --compile=False --dtype=float32 --bias=True --device=cpu "
               "--samples 0 --threads 1",
               0, "final:", out, sizeof out);
    expect_run("train --dataset shakespeare_char --vocab-size 65 --n_layer 1 --n_head 2 --n_embd 16 --block_size 8 "
               "--batch_size 3 --gradient_accumulation_steps 2 --learning_rate 0.004 --min_lr 0.0002 "
               "--warmup_iters 2 --lr_decay_iters 5 --weight_decay 0.05 --beta1 0.8 --beta2 0.9 --grad_clip 0.5 "
               "--dropout 0.1 --max_iters 7 --eval_interval 3 --eval_iters 2 --log_interval 1 --out_dir spaced "
               "--compile False --samples 0 --threads 1",
               0, "final:", out, sizeof out);
    int cols[] = {0, 1, 2, 3, 5}; /* step, loss, lr, grad_norm, val_loss (not the timings) */
    cr_assert_eq(log_fields("ours", cols, 5, a, sizeof a), 7);
    cr_assert_eq(log_fields("theirs", cols, 5, b, sizeof b), 7);
    cr_assert_eq(log_fields("spaced", cols, 5, c, sizeof c), 7);
    cr_expect_str_eq(b, a, "nanoGPT's names trained another run");
    cr_expect_str_eq(c, a, "--key value trained another run than --key=value");
}

/* finetune_shakespeare.py's pair, init_from and dataset: the vocabulary is the model's (GPT-2's
 * 50257), not the 50304 a from-scratch run on a dataset without meta.pkl takes. */
Test(nanogpt, dataset_fine_tune_takes_the_models_vocabulary, .init = make_tmpdir, .fini = remove_tmpdir,
     .timeout = 300) {
    need_bin();
    char p[600], out[16384];
    snprintf(p, sizeof p, "%s/data", tmpdir);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/data/gpt2ids", tmpdir);
    mkdir(p, 0777);
    enum { N = 4000 };
    static uint16_t ids[N];
    for (int split = 0; split < 2; split++) {
        for (int i = 0; i < N; i++) ids[i] = (uint16_t)((i * 7919u + (unsigned)split * 13u) % 50257u);
        snprintf(p, sizeof p, "%s/data/gpt2ids/%s", tmpdir, split ? "val.bin" : "train.bin");
        FILE *f = fopen(p, "wb");
        cr_assert(f && fwrite(ids, sizeof ids[0], N, f) == N && fclose(f) == 0, "cannot write %s", p);
    }
    expect_run("train --data-bin data/gpt2ids --vocab-size 50257 --n-layer 1 --n-head 2 --n-embd 16 --block-size 8 "
               "--batch-size 2 --steps 1 --samples 0 --out base",
               0, "final:", out, sizeof out);
    expect_run("train --init_from=base --dataset=gpt2ids --max_iters=1 --batch_size=2 --samples 0 --out_dir=ft", 0,
               "vocabulary 50257", out, sizeof out);
    cr_expect(!strstr(out, "50304"), "a fine-tune took the from-scratch vocabulary:\n%s", out);
    expect_error("train --init_from=base --dataset=gpt2ids --vocab-size 50304 --max_iters=1 --out_dir=ft2", 2,
                 "contradicts the model");
}

/* The learning rate of every step against train.py's get_lr (written out here), and decay_lr =
 * False against its `lr = learning_rate`. */
static double nanogpt_get_lr(int it, double learning_rate, int warmup_iters, int lr_decay_iters, double min_lr) {
    if (it < warmup_iters) return learning_rate * (it + 1) / (warmup_iters + 1);
    if (it > lr_decay_iters) return min_lr;
    double decay_ratio = (double)(it - warmup_iters) / (lr_decay_iters - warmup_iters);
    double coeff = 0.5 * (1.0 + cos(M_PI * decay_ratio));
    return min_lr + coeff * (learning_rate - min_lr);
}

Test(nanogpt, schedule_flags_follow_train_py_get_lr, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 300) {
    need_bin();
    prepare_shakespeare_char();
    char out[16384], rows[8192];
    expect_run("train config/train_shakespeare_char.py " SMALL " --max_iters=12 --warmup_iters=3 --lr_decay_iters=9 "
               "--learning_rate=0.01 --min_lr=0.001 --out_dir=s --samples 0",
               0, "final:", out, sizeof out);
    int cols[] = {2};
    /* always_save_checkpoint = False in the file: the log ends at the best evaluation's checkpoint;
     * with eval_interval 250 the one evaluation is the last step's, so it has all 12 rows */
    cr_assert_eq(log_fields("s", cols, 1, rows, sizeof rows), 12);
    char *save = NULL;
    int it = 0;
    for (char *r = strtok_r(rows, "\n", &save); r; r = strtok_r(NULL, "\n", &save), it++) {
        /* log.csv's lr reads back as the double used (17 digits): only the order of operations may
         * differ from the formula here */
        double want = nanogpt_get_lr(it, 0.01, 3, 9, 0.001);
        cr_expect(fabs(strtod(r, NULL) - want) <= 4e-16 * want, "step %d: lr %s, train.py's get_lr %.17g", it + 1, r,
                  want);
    }
    cr_expect_eq(it, 12);
    /* decay_lr = False: exactly learning_rate at every step, whatever warm-up and decay flags say
     * (a cosine over lr_decay_iters 5000 moves the third step's lr by 4e-7 relative only) */
    const char *constant[] = {"", " --warmup_iters=2 --lr_decay_iters=4 --min_lr=0.0001"};
    for (int k = 0; k < 2; k++) {
        char args[512];
        snprintf(args, sizeof args,
                 "train config/train_shakespeare_char.py " SMALL " --max_iters=5 --decay_lr=False "
                 "--learning_rate=0.003 --out_dir=c%d --samples 0%s",
                 k, constant[k]);
        expect_run(args, 0, "final:", out, sizeof out);
        char d[16];
        snprintf(d, sizeof d, "c%d", k);
        cr_assert_eq(log_fields(d, cols, 1, rows, sizeof rows), 5);
        save = NULL;
        it = 0;
        for (char *r = strtok_r(rows, "\n", &save); r; r = strtok_r(NULL, "\n", &save), it++)
            cr_expect(strtod(r, NULL) == 0.003, "decay_lr = False%s: step %d has lr %s, not learning_rate 0.003",
                      constant[k], it + 1, r);
        cr_expect_eq(it, 5);
    }
}

/* always_save_checkpoint = False: the checkpoint is the best evaluation's, as train.py keeps it. */
Test(nanogpt, always_save_checkpoint_false_keeps_the_best_evaluation, .init = make_tmpdir, .fini = remove_tmpdir,
     .timeout = 300) {
    need_bin();
    prepare_shakespeare_char();
    char out[32768];
    /* a learning rate large enough that the val loss goes up and down */
    expect_run("train config/train_shakespeare_char.py " SMALL " --vocab-size 65 --max_iters=10 --eval_interval=1 "
               "--warmup_iters=0 --learning_rate=0.5 --out_dir=b --samples 0",
               0, "final:", out, sizeof out);
    double best = INFINITY;
    int best_step = -1;
    for (const char *p = out; (p = strstr(p, "\nstep ")); p++) {
        int s;
        double tl, vl;
        if (sscanf(p, "\nstep %d: train loss %lf, val loss %lf", &s, &tl, &vl) == 3 && vl < best) {
            best = vl;
            best_step = s;
        }
    }
    cr_assert(best_step > 0, "no evaluation lines:\n%s", out);
    char cmd[64], ev[4096], want[64];
    snprintf(cmd, sizeof cmd, "eval --ckpt b");
    expect_run(cmd, 0, "val loss", ev, sizeof ev);
    snprintf(want, sizeof want, "step %d: ", best_step);
    cr_expect(strstr(ev, want), "the checkpoint is not the best evaluation's (step %d, val %.4f):\n%s\n%s", best_step,
              best, ev, out);
    char rows[4096];
    int cols[] = {0};
    cr_expect_eq(log_fields("b", cols, 1, rows, sizeof rows), best_step, "log.csv does not end at the checkpoint");
}

Test(nanogpt, refusals_are_one_line, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 300) {
    need_bin();
    prepare_shakespeare_char();
    expect_error("train --dtype=bfloat16", 2, "--dtype bfloat16: the CPU has no bf16 kernels");
    expect_error("train --dtype float16", 2, "--dtype float16: not available");
    expect_error("train --bias=maybe", 2, "'maybe' is not True or False");
    expect_error("train --backend=foo", 2, "--backend 'foo'");
    expect_error("train --device=cuda:1", 2, "cuda:1");
    expect_error("train --eval_only=maybe", 2, "'maybe' is not True or False");
    expect_error("train --init_from=gpt2", 2, "downloads nothing");
    expect_error("train --init_from=resume", 2, "here that is --resume");
    expect_error("train --dataset=../x", 2, "a name, not a path");
    expect_error("train --dataset=shakespeare_char --data-bin data/shakespeare_char", 2, "not both");
    expect_error("train config/eval_gpt2.py", 2, "config/eval_gpt2.py:8: init_from = 'gpt2'");
    expect_error("train config/finetune_shakespeare.py", 2, "config/finetune_shakespeare.py:1:");
    expect_error("train config/missing.py", 1, "config/missing.py");
    char p[600];
    snprintf(p, sizeof p, "%s/bad.py", tmpdir);
    FILE *f = fopen(p, "w");
    fputs("n_layer = 2\nfoo_bar = 3\n", f);
    fclose(f);
    expect_error("train bad.py", 2, "bad.py:2: unknown config key 'foo_bar'");
    /* nanoGPT's init_from = 'resume' from a config file too: refused, naming the flag that resumes */
    char rp[600];
    snprintf(rp, sizeof rp, "%s/resume.py", tmpdir);
    FILE *rf = fopen(rp, "w");
    cr_assert(rf != NULL, "%s", rp);
    fputs("n_layer = 2\ninit_from = 'resume'\n", rf);
    fclose(rf);
    expect_error("train resume.py", 2, "resume.py:2: init_from = 'resume': nanoGPT's way to continue the run in out_dir; here that is --resume");
    f = fopen(p, "w");
    fputs("n_layer = 'two'\n", f);
    fclose(f);
    expect_error("train bad.py", 2, "bad.py:1: n_layer = 'two': a string, where a number is wanted");
    f = fopen(p, "w");
    fputs("n_layer = 0\n", f);
    fclose(f);
    expect_error("train bad.py", 2, "bad.py:1: --n_layer: 0 is outside");
}

Test(nanogpt, help_lists_both_names, .timeout = 60) {
    need_bin();
    char cmd[600], out[65536];
    snprintf(cmd, sizeof cmd, "'%s' train --help 2>&1", fg_bin());
    FILE *p = popen(cmd, "r");
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    cr_assert_eq(pclose(p), 0);
    static const char *const pairs[][2] = {
        {"--out DIR", "--out_dir"},         {"--eval-every N", "--eval_interval"},
        {"--log-every N", "--log_interval"}, {"--eval-iters N", "--eval_iters"},
        {"--eval-only", "--eval_only"},     {"--grad-accum N", "--gradient_accumulation_steps"},
        {"--batch-size N", "--batch_size"}, {"--block-size N", "--block_size"},
        {"--n-layer N", "--n_layer"},       {"--n-head N", "--n_head"},
        {"--n-embd N", "--n_embd"},         {"--lr X", "--learning_rate"},
        {"--steps N", "--max_iters"},       {"--weight-decay X", "--weight_decay"},
        {"--grad-clip X", "--grad_clip"},   {"--warmup N", "--warmup_iters"},
        {"--lr-decay-steps N", "--lr_decay_iters"}, {"--min-lr X", "--min_lr"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char opt[80];
        snprintf(opt, sizeof opt, "\n  %s ", pairs[i][0]);
        const char *line = strstr(out, opt);
        cr_expect(line, "--help lacks %s", pairs[i][0]);
        if (!line) continue;
        char want[80];
        snprintf(want, sizeof want, "[nanoGPT: %s]", pairs[i][1]);
        const char *eol = strchr(line + 1, '\n');
        const char *alias = strstr(line, want);
        cr_expect(alias && alias < eol, "the line of %s does not name %s", pairs[i][0], pairs[i][1]);
    }
    static const char *const own[] = {"--dataset NAME", "--always_save_checkpoint", "--decay_lr", "--dtype DTYPE",
                                      "--compile", "--bias", "--backend NAME", "--wandb_log", "--wandb_project NAME",
                                      "--wandb_run_name NAME", "--beta1 X", "--beta2 X", "--dropout P", "--seed N",
                                      "--device DEV", "init_from"};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) cr_expect(strstr(out, own[i]), "--help lacks %s", own[i]);
}

/* ---- eval: nothing in the run folder changes ---- */
typedef struct {
    char name[64];
    off_t size;
    struct timespec mtime;
    uint64_t hash;
} file_state;

/* The folder's files (name, size, mtime, XXH64) and the folder's own mtime. */
static int snapshot(const char *dir, file_state *fs, int cap, struct timespec *dir_mtime) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", tmpdir, dir);
    struct stat sb;
    cr_assert_eq(stat(p, &sb), 0);
    *dir_mtime = sb.st_mtim;
    DIR *d = opendir(p);
    cr_assert(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        file_state *f = &fs[n++];
        snprintf(f->name, sizeof f->name, "%.63s", e->d_name);
        snprintf(p, sizeof p, "%s/%s/%s", tmpdir, dir, e->d_name);
        cr_assert_eq(stat(p, &sb), 0);
        f->size = sb.st_size;
        f->mtime = sb.st_mtim;
        void *buf = NULL;
        size_t len = 0;
        cr_assert_eq(fg_read_file(p, 0, &buf, &len), FG_OK, "%s", fg_last_error());
        fg_xxh64_state h;
        fg_xxh64_init(&h, 0);
        fg_xxh64_update(&h, buf, len);
        f->hash = fg_xxh64_digest(&h);
        free(buf);
    }
    closedir(d);
    return n;
}

static void expect_same_folder(const char *dir, const file_state *a, int na, struct timespec da, const char *after) {
    file_state b[32];
    struct timespec db;
    int nb = snapshot(dir, b, 32, &db);
    cr_expect_eq(nb, na, "%s: %d files, %d before", after, nb, na);
    cr_expect(db.tv_sec == da.tv_sec && db.tv_nsec == da.tv_nsec, "%s: the folder's mtime changed", after);
    for (int i = 0; i < na; i++) {
        int found = 0;
        for (int j = 0; j < nb; j++) {
            if (strcmp(a[i].name, b[j].name)) continue;
            found = 1;
            cr_expect(a[i].size == b[j].size && a[i].hash == b[j].hash, "%s: %s changed", after, a[i].name);
            cr_expect(a[i].mtime.tv_sec == b[j].mtime.tv_sec && a[i].mtime.tv_nsec == b[j].mtime.tv_nsec,
                      "%s: %s's mtime changed", after, a[i].name);
        }
        cr_expect(found, "%s: %s is gone", after, a[i].name);
    }
}

Test(eval, prints_the_runs_losses_and_touches_nothing, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 300) {
    need_bin();
    prepare_shakespeare_char();
    char out[16384], ev[8192];
    expect_run("train config/train_shakespeare_char.py " SMALL " --always_save_checkpoint=True --out_dir=r --samples 0",
               0, "final:", out, sizeof out);
    double tl, vl;
    const char *fin = strstr(out, "final: train loss ");
    cr_assert(fin && sscanf(fin, "final: train loss %lf, val loss %lf", &tl, &vl) == 2, "%s", out);
    file_state before[32];
    struct timespec dm;
    int n = snapshot("r", before, 32, &dm);
    cr_assert(n >= 4, "the run folder holds %d files", n);
    sleep(1); /* a write now would show in the mtimes */
    expect_run("eval --ckpt r", 0, "step 3: train loss", ev, sizeof ev);
    double etl, evl;
    const char *s = strstr(ev, "\nstep 3: ");
    cr_assert(s && sscanf(s, "\nstep 3: train loss %lf, val loss %lf", &etl, &evl) == 2, "%s", ev);
    /* the same fixed batches as the run's last evaluation */
    cr_expect(fabs(etl - tl) < 1e-4 && fabs(evl - vl) < 1e-4, "eval %.4f / %.4f, the run's final %.4f / %.4f", etl,
              evl, tl, vl);
    expect_same_folder("r", before, n, dm, "flashgrad eval");
    expect_run("train --eval-only --resume --out r", 0, "val loss", ev, sizeof ev);
    s = strstr(ev, "\nstep 3: ");
    cr_assert(s && sscanf(s, "\nstep 3: train loss %lf, val loss %lf", &etl, &evl) == 2, "%s", ev);
    cr_expect(fabs(evl - vl) < 1e-4, "train --eval-only --resume: %.4f, the run's %.4f", evl, vl);
    expect_same_folder("r", before, n, dm, "train --eval-only --resume");
    expect_run("train config/train_shakespeare_char.py " SMALL " --eval_only=True --resume --out_dir=r", 0, "val loss",
               ev, sizeof ev);
    expect_same_folder("r", before, n, dm, "train CONFIG --eval_only=True --resume");
    expect_run("eval --ckpt r --eval_iters 3 --batch-size 2", 0, "3 batches of 2 x 16", ev, sizeof ev);
    expect_same_folder("r", before, n, dm, "flashgrad eval --eval_iters 3");
    /* a fresh model: evaluated, and its --out never created */
    expect_run("train config/train_shakespeare_char.py " SMALL " --eval_only=True --out_dir=fresh", 0,
               "step 0: train loss", ev, sizeof ev);
    char p[600];
    snprintf(p, sizeof p, "%s/fresh", tmpdir);
    cr_expect(access(p, F_OK) != 0, "--eval-only created its --out");
    expect_error("eval --ckpt nowhere", 1, "nowhere");
    expect_error("eval", 2, "--ckpt PATH is required");
}

/* ---- the FMA peak ---- */
static double log_peak(const char *dir, int *rows) {
    char buf[8192];
    int cols[] = {7};
    *rows = log_fields(dir, cols, 1, buf, sizeof buf);
    double first = atof(buf);
    for (char *save = NULL, *r = strtok_r(buf, "\n", &save); r; r = strtok_r(NULL, "\n", &save))
        cr_expect_eq(atof(r), first, "rows of %s/log.csv name different peaks", dir);
    return first;
}

#define TINY "train --task addition --digits 1 --n-layer 1 --n-head 2 --n-embd 16 --batch-size 8 --steps 3 --eval-iters 1 --eval-problems 5 --samples 0 --threads 1"

Test(peak, two_runs_divide_by_the_same_cached_peak, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 300) {
    need_bin();
    char out[16384];
    int rows;
    expect_run(TINY " --out a", 0, "measured now, cached in", out, sizeof out);
    double pa = log_peak("a", &rows);
    cr_expect_eq(rows, 3);
    expect_run(TINY " --out b", 0, "cached in", out, sizeof out);
    cr_expect(!strstr(out, "measured now"), "the second run measured again:\n%s", out);
    double pb = log_peak("b", &rows);
    cr_expect(pa > 0 && pa == pb, "peaks %g and %g", pa, pb);
    char want[64];
    snprintf(want, sizeof want, "fma peak: %.1f GFLOP/s", pa);
    cr_expect(strstr(out, want), "the header does not name the peak %.1f:\n%s", pa, out);
    /* the cache names what it belongs to */
    char p[600];
    snprintf(p, sizeof p, "%s/cache/flashgrad/peak.tsv", tmpdir);
    void *buf = NULL;
    size_t n = 0;
    cr_assert_eq(fg_read_file(p, 0, &buf, &n), FG_OK, "%s", fg_last_error());
    snprintf(want, sizeof want, "%.1f\t", pa);
    cr_expect(strstr(buf, want) && strstr(buf, "\t1\t"), "the cache: %s", (char *)buf);
    free(buf);
    /* another thread count is another entry */
    expect_run(TINY " --threads 2 --out c", 0, "2 threads; measured now", out, sizeof out);
    /* --peak overrides, and MFU is tokens/s x flop/token over it */
    expect_run(TINY " --peak 100 --out d", 0, "given by --peak", out, sizeof out);
    cr_expect_eq(log_peak("d", &rows), 100.0);
    const char *m = strstr(out, "MFU = tokens/s x ");
    double fpt = 0;
    cr_assert(m && sscanf(m, "MFU = tokens/s x %lf", &fpt) == 1, "%s", out);
    char tps[4096], mfu[4096];
    int c4[] = {4}, c6[] = {6};
    log_fields("d", c4, 1, tps, sizeof tps);
    log_fields("d", c6, 1, mfu, sizeof mfu);
    double want_mfu = atof(tps) * fpt / 100e9;
    cr_expect(fabs(atof(mfu) - want_mfu) <= 1e-4 + 1e-3 * want_mfu, "mfu %s, tokens/s %s x %g / 100 GFLOP/s = %g",
              mfu, tps, fpt, want_mfu);
    expect_error(TINY " --peak fast --out e", 2, "--peak: 'fast'");
    expect_error(TINY " --peak -5 --out e", 2, "--peak: '-5'");
    /* the cache's range holds for a figure given, too: no MFU divides by 1e-300 */
    expect_error(TINY " --peak 1e-300 --out e", 2, "--peak: '1e-300' is neither GFLOP/s (0.1..1e+07");
    expect_error(TINY " --peak 2e7 --out e", 2, "--peak: '2e7'");
}

/* The line of out that holds `phrase` has no double space (words an empty field left apart). */
static void expect_single_spaced(const char *out, const char *phrase) {
    const char *at = strstr(out, phrase);
    cr_assert(at, "no '%s' in:\n%s", phrase, out);
    const char *start = at, *end = strchr(at, '\n');
    while (start > out && start[-1] != '\n') start--;
    if (!end) end = at + strlen(at);
    for (const char *c = start; c + 1 < end; c++)
        cr_expect(!(c[0] == ' ' && c[1] == ' '), "a double space in '%.*s'", (int)(end - start), start);
}

Test(peak, a_corrupt_cache_is_refused_and_rewritten, .init = make_tmpdir, .fini = remove_tmpdir, .timeout = 300) {
    need_bin();
    char p[600], out[16384];
    snprintf(p, sizeof p, "%s/cache/flashgrad", tmpdir);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && printf 'garbage\\n1e999\\tavx2\\n' > '%s/peak.tsv'", p, p);
    cr_assert_eq(system(cmd), 0);
    expect_run(TINY " --out a", 0, "is not a valid peak cache: measuring the peak again and rewriting it", out,
               sizeof out);
    int lines = 0;
    for (const char *c = out; (c = strstr(c, "peak cache")); c++) lines++;
    cr_expect_eq(lines, 1, "the refusal is not one line:\n%s", out);
    expect_single_spaced(out, "peak cache");
    expect_run(TINY " --out b", 0, "cached in", out, sizeof out);
    cr_expect(!strstr(out, "not a valid"), "the rewritten cache is refused again:\n%s", out);
    int rows;
    cr_expect_eq(log_peak("a", &rows), log_peak("b", &rows));
    /* --peak measure measures again and replaces the entry */
    expect_run(TINY " --peak measure --out c", 0, "measured now", out, sizeof out);
}

/* A cached figure outside any CPU's reach (or not a number) is never divided by: the run says so in
 * one line naming the line and the value, measures again, logs the new figure and rewrites the
 * cache with it. The line tampered with is the one this machine's runs read. */
Test(peak, an_implausible_cached_figure_is_measured_again, .init = make_tmpdir, .fini = remove_tmpdir,
     .timeout = 600) {
    need_bin();
    char out[16384], p[600];
    expect_run(TINY " --out first", 0, "measured now", out, sizeof out);
    snprintf(p, sizeof p, "%s/cache/flashgrad/peak.tsv", tmpdir);
    void *buf = NULL;
    size_t n = 0;
    cr_assert_eq(fg_read_file(p, 0, &buf, &n), FG_OK, "%s", fg_last_error());
    char *line2 = strchr(buf, '\n'), *tab = line2 ? strchr(line2 + 1, '\t') : NULL;
    cr_assert(tab, "the cache has no entry: %s", (char *)buf);
    static const char *const figures[] = {"1e-300", "-1", "nan", "inf", "1e300", "0.09", "1.1e7"};
    for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++) {
        /* the machine's own line, its figure replaced */
        char cache[4096];
        snprintf(cache, sizeof cache, "%.*s%s%s", (int)(line2 + 1 - (char *)buf), (char *)buf, figures[i], tab);
        FILE *f = fopen(p, "w");
        cr_assert(f);
        fputs(cache, f);
        fclose(f);
        char args[300], dir[16];
        snprintf(dir, sizeof dir, "r%zu", i);
        snprintf(args, sizeof args, TINY " --out %s", dir);
        expect_run(args, 0, "measured now", out, sizeof out);
        char want[200];
        snprintf(want, sizeof want, "peak.tsv line 2 (%s GFLOP/s is outside 0.1..1e+07) is not a valid peak cache",
                 figures[i]);
        cr_expect(strstr(out, want), "%s: no '%s' in:\n%s", figures[i], want, out);
        int lines = 0;
        for (const char *c = out; (c = strstr(c, "peak cache")); c++) lines++;
        cr_expect_eq(lines, 1, "%s: the warning is not one line:\n%s", figures[i], out);
        expect_single_spaced(out, "peak cache");
        int rows;
        const double logged = log_peak(dir, &rows);
        cr_expect(logged >= 0.1 && logged <= 1e7, "%s: log.csv divides by %g GFLOP/s", figures[i], logged);
        void *nb = NULL;
        size_t nn = 0;
        cr_assert_eq(fg_read_file(p, 0, &nb, &nn), FG_OK, "%s", fg_last_error());
        char fig[64], old[64];
        snprintf(fig, sizeof fig, "\n%.1f\t", logged);
        snprintf(old, sizeof old, "\n%s\t", figures[i]);
        cr_expect(strstr(nb, fig) && !strstr(nb, old), "%s: the cache was not rewritten with %.1f: %s", figures[i],
                  logged, (char *)nb);
        free(nb);
    }
    free(buf);
}
