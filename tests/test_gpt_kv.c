/* test_gpt_kv.c — KV-cache generation (train/gpt.h, fg_gpt_kv_*): the cached logits against the
 * full recompute (fg_gpt_forward's last row) at several block sizes, both attention
 * implementations and both dtypes; greedy tokens identical to the recompute's, also far past the
 * block size (where the context is cropped and the cache rebuilt); top-p against a nucleus computed
 * here; bad sizes refused. The PyTorch cross-check against nanoGPT's generate() is
 * tests/gpt_generate_torch_check.py. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ops/cpu.h"
#include "tensor/philox.h"
#include "tensor/safetensors.h"
#include "tests/common.h"
#include "train/checkpoint.h"
#include "train/gpt.h"

static fg_gpt *make(const fg_gpt_config *c, uint64_t seed) {
    fg_gpt *g = fg_gpt_create(c, seed);
    cr_assert(g != NULL, "fg_gpt_create: %s", fg_last_error());
    return g;
}

static void fill_tokens(int32_t *t, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(fg_philox_u32(seed, 5, (uint64_t)i) % (uint32_t)V);
}

/* fg_gpt_forward's logits of the last of tokens[0..t) (V doubles) */
static void full_last_logits(fg_gpt *g, const int32_t *tokens, int t, double *out) {
    fg_tensor *lg = fg_gpt_forward(g, tokens, 1, t, NULL);
    cr_assert(lg, "%s", fg_last_error());
    const int V = g->cfg.vocab_size;
    for (int v = 0; v < V; v++) out[v] = fg_get(lg, (int64_t)(t - 1) * V + v);
    fg_release(lg);
}

typedef struct {
    const char *name;
    fg_dtype dt;
    fg_attn_impl impl;
    int n_embd, n_head, block, vocab;
    int prompt; /* tokens appended at once first */
} kv_case;

static const kv_case cases[] = {
    {"f32 flash block 1", FG_F32, FG_ATTN_FLASH, 16, 2, 1, 11, 1},
    {"f32 flash block 7", FG_F32, FG_ATTN_FLASH, 16, 2, 7, 11, 3},
    {"f32 flash block 70 (tiles of 64 and a tail)", FG_F32, FG_ATTN_FLASH, 24, 3, 70, 13, 65},
    {"f32 naive block 9", FG_F32, FG_ATTN_NAIVE, 16, 4, 9, 7, 2},
    {"f64 flash block 12", FG_F64, FG_ATTN_FLASH, 16, 2, 12, 9, 5},
    {"f64 naive block 5", FG_F64, FG_ATTN_NAIVE, 8, 1, 5, 6, 1},
};

Test(gpt_kv, cached_logits_match_the_full_recompute_at_every_position) {
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const kv_case *k = &cases[ci];
        fg_gpt_config c = fgt_tiny_gpt_config(k->dt, k->impl, k->n_embd, k->block, k->vocab, 0);
        c.n_head = k->n_head;
        fg_gpt *g = make(&c, 31 + ci);
        fg_gpt_kv *kv = fg_gpt_kv_create(g);
        cr_assert(kv, "%s: %s", k->name, fg_last_error());
        const int T = k->block, V = k->vocab;
        int32_t *tok = malloc((size_t)T * sizeof *tok);
        double *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
        fill_tokens(tok, T, V, 7 + ci);
        /* float32: the products run on fewer rows, so their sums may round differently */
        const double tol = k->dt == FG_F64 ? 1e-11 : 2e-5;
        for (int round = 0; round < 2; round++) { /* the second reuses the buffers after a reset */
            fg_gpt_kv_reset(kv);
            int len = 0;
            while (len < T) {
                int n = len == 0 ? k->prompt : 1;
                cr_assert_eq(fg_gpt_kv_append(g, kv, tok + len, n, a), FG_OK, "%s: %s", k->name, fg_last_error());
                len += n;
                cr_assert_eq(fg_gpt_kv_len(kv), len);
                full_last_logits(g, tok, len, b);
                double worst = 0, scale = 0;
                int at = 0;
                for (int v = 0; v < V; v++) {
                    double e = fabs(a[v] - b[v]);
                    if (e > worst) worst = e, at = v;
                    if (fabs(b[v]) > scale) scale = fabs(b[v]);
                }
                cr_assert(worst <= tol * fmax(1.0, scale),
                          "%s, position %d: cached logit %d is %.17g, the recompute's %.17g (|diff| %.3g > %.3g)",
                          k->name, len - 1, at, a[at], b[at], worst, tol * fmax(1.0, scale));
            }
        }
        /* a full cache takes no more */
        cr_expect_eq(fg_gpt_kv_append(g, kv, tok, 1, a), FG_ERR_ARG, "%s: appending past block_size", k->name);
        cr_expect_eq(fg_gpt_kv_len(kv), T, "%s: a refused append changed the length", k->name);
        free(tok);
        free(a);
        free(b);
        fg_gpt_kv_free(kv);
        fg_gpt_free(g);
    }
}

Test(gpt_kv, greedy_tokens_equal_the_recompute_within_and_past_the_block) {
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const kv_case *k = &cases[ci];
        fg_gpt_config c = fgt_tiny_gpt_config(k->dt, k->impl, k->n_embd, k->block, k->vocab, 0);
        c.n_head = k->n_head;
        fg_gpt *g = make(&c, 101 + ci);
        const int T = k->block, np = k->prompt, n_new = 2 * T + 5; /* well past the block */
        int32_t *a = malloc((size_t)(np + n_new) * sizeof *a), *b = malloc((size_t)(np + n_new) * sizeof *b);
        fill_tokens(a, np, k->vocab, 3 + ci);
        memcpy(b, a, (size_t)np * sizeof *a);
        fg_sample_opts cached = {.temperature = 0}, full = {.temperature = 0, .no_cache = 1};
        cr_assert_eq(fg_gpt_generate(g, a, np, n_new, &cached), FG_OK, "%s: %s", k->name, fg_last_error());
        cr_assert_eq(fg_gpt_generate(g, b, np, n_new, &full), FG_OK, "%s: %s", k->name, fg_last_error());
        for (int i = np; i < np + n_new; i++)
            cr_assert_eq(a[i], b[i], "%s: token %d (block %d): cached %d, recompute %d", k->name, i, T, a[i], b[i]);
        /* and each recomputed greedy token is the argmax of a forward over the cropped context */
        double *row = malloc((size_t)k->vocab * sizeof *row);
        for (int len = np; len < np + n_new; len++) {
            int t = len < T ? len : T;
            full_last_logits(g, b + len - t, t, row);
            int best = 0;
            for (int v = 1; v < k->vocab; v++)
                if (row[v] > row[best]) best = v;
            cr_assert_eq(b[len], best, "%s: token %d is %d, the argmax %d", k->name, len, b[len], best);
        }
        free(row);
        free(a);
        free(b);
        fg_gpt_free(g);
    }
}

Test(gpt_kv, sampling_with_the_cache_is_seeded_and_one_cache_serves_many_calls) {
    fg_gpt_config c = fgt_tiny_gpt_config(FG_F64, FG_ATTN_FLASH, 16, 10, 9, 0);
    fg_gpt *g = make(&c, 5);
    fg_gpt_kv *kv = fg_gpt_kv_create(g);
    cr_assert(kv, "%s", fg_last_error());
    int32_t x[40] = {1, 2}, y[40] = {1, 2}, z[40] = {1, 2};
    fg_sample_opts o = {.temperature = 1.0, .top_k = 4, .seed = 11, .kv = kv};
    cr_assert_eq(fg_gpt_generate(g, x, 2, 30, &o), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_gpt_generate(g, y, 2, 30, &o), FG_OK, "%s", fg_last_error());
    o.kv = NULL;
    o.no_cache = 1;
    cr_assert_eq(fg_gpt_generate(g, z, 2, 30, &o), FG_OK, "%s", fg_last_error());
    /* float64: the cached and recomputed probabilities agree to ~1e-15, so the draws do too */
    for (int i = 0; i < 32; i++) {
        cr_expect_eq(x[i], y[i], "a reused cache changed token %d", i);
        cr_expect_eq(x[i], z[i], "token %d: cached %d, recompute %d", i, x[i], z[i]);
    }
    fg_gpt_kv_free(kv);
    fg_gpt_free(g);
}

/* The streaming callback sees every token once, in order. */
typedef struct {
    int n;
    int32_t seen[64];
} stream_log;

static void on_token(void *user, int j, int32_t t) {
    stream_log *s = user;
    cr_assert_eq(j, s->n, "callback %d came as number %d", j, s->n);
    s->seen[s->n++] = t;
}

Test(gpt_kv, top_p_keeps_the_nucleus_and_the_callback_streams_each_token) {
    fg_gpt_config c = fgt_tiny_gpt_config(FG_F64, FG_ATTN_FLASH, 16, 8, 12, 0);
    fg_gpt *g = make(&c, 9);
    const int V = c.vocab_size;
    /* top_p tiny: only the likeliest token is left, so temperature 1 is greedy */
    int32_t a[30] = {3}, b[30] = {3};
    fg_sample_opts greedy = {.temperature = 0};
    fg_sample_opts tiny = {.temperature = 1.0, .top_p = 1e-12, .seed = 4};
    cr_assert_eq(fg_gpt_generate(g, a, 1, 25, &greedy), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_gpt_generate(g, b, 1, 25, &tiny), FG_OK, "%s", fg_last_error());
    cr_expect(!memcmp(a, b, sizeof a), "top_p 1e-12 should sample the argmax every time");
    /* top_p 0.5 at temperature 1: every drawn token is in the nucleus of its context, computed here
     * from the recompute's logits (sorted probabilities summed until they reach 0.5) */
    stream_log log = {0};
    fg_sample_opts half = {.temperature = 1.0, .top_p = 0.5, .seed = 8, .on_token = on_token, .user = &log};
    int32_t t[30] = {5};
    cr_assert_eq(fg_gpt_generate(g, t, 1, 25, &half), FG_OK, "%s", fg_last_error());
    cr_assert_eq(log.n, 25, "the callback was called %d times for 25 tokens", log.n);
    double row[12], p[12];
    for (int len = 1; len < 26; len++) {
        cr_expect_eq(log.seen[len - 1], t[len], "streamed token %d is %d, the result's %d", len - 1, log.seen[len - 1],
                     t[len]);
        int ctx = len < c.block_size ? len : c.block_size;
        full_last_logits(g, t + len - ctx, ctx, row);
        double mx = row[0], z = 0;
        for (int v = 1; v < V; v++) mx = fmax(mx, row[v]);
        for (int v = 0; v < V; v++) z += p[v] = exp(row[v] - mx);
        /* the drawn token's probability must be among the top ones that reach 0.5 in total:
         * the mass of the tokens strictly likelier than it is below 0.5 */
        double above = 0;
        for (int v = 0; v < V; v++)
            if (p[v] > p[t[len]]) above += p[v] / z;
        cr_expect(above < 0.5 + 1e-12, "token %d (%d) is outside the 0.5 nucleus: likelier tokens hold %.4f", len,
                  t[len], above);
    }
    fg_gpt_free(g);
}

Test(gpt_kv, bad_sizes_and_ids_are_refused) {
    fg_gpt_config c = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 8, 4, 5, 0);
    fg_gpt *g = make(&c, 2);
    fg_gpt_kv *kv = fg_gpt_kv_create(g);
    cr_assert(kv, "%s", fg_last_error());
    int32_t ok[5] = {0, 1, 2, 3, 4}, bad[2] = {1, 5};
    cr_expect_eq(fg_gpt_kv_append(g, kv, ok, 0, NULL), FG_ERR_ARG, "zero tokens");
    cr_expect_eq(fg_gpt_kv_append(g, kv, ok, 5, NULL), FG_ERR_ARG, "5 tokens into block 4");
    cr_expect_eq(fg_gpt_kv_append(g, kv, bad, 2, NULL), FG_ERR_ARG, "id 5 in vocabulary 5");
    cr_expect_eq(fg_gpt_kv_len(kv), 0, "refused appends changed the length");
    cr_expect_eq(fg_gpt_kv_append(g, kv, ok, 4, NULL), FG_OK, "%s", fg_last_error());
    /* a cache made for other shapes */
    fg_gpt_config c2 = c;
    c2.n_embd = 16;
    fg_gpt *g2 = make(&c2, 2);
    cr_expect_eq(fg_gpt_kv_append(g2, kv, ok, 1, NULL), FG_ERR_ARG, "a cache of another model");
    int32_t p[8] = {7};
    fg_sample_opts o = {.temperature = 0};
    cr_expect_eq(fg_gpt_generate(g, p, 1, 3, &o), FG_ERR_ARG, "a prompt id outside the vocabulary");
    fg_gpt_free(g2);
    fg_gpt_kv_free(kv);
    fg_gpt_free(g);
}

/* A warm generation takes no new memory from the system: the cache's buffers are made once, and
 * the scratch the attention kernels take at each length comes back from the allocator's cache the
 * second time the cache is filled. On one thread: with more, the heads running at once (each with
 * its scratch) vary from run to run, and a run with more of them than any before takes more. */
static void fill_cache(fg_gpt *g, fg_gpt_kv *kv, int T, double *lg) {
    int32_t t[2] = {1, 2};
    fg_gpt_kv_reset(kv);
    cr_assert_eq(fg_gpt_kv_append(g, kv, t, 2, lg), FG_OK, "%s", fg_last_error());
    for (int i = 2; i < T; i++) cr_assert_eq(fg_gpt_kv_append(g, kv, t, 1, lg), FG_OK, "%s", fg_last_error());
}

Test(gpt_kv, a_warm_generation_takes_no_new_memory) {
    fg_pool_set_threads(1);
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const kv_case *k = &cases[ci];
        if (k->block < 2) continue;
        fg_gpt_config c = fgt_tiny_gpt_config(k->dt, k->impl, k->n_embd, k->block, k->vocab, 0);
        c.n_head = k->n_head;
        fg_gpt *g = make(&c, 5);
        fg_gpt_kv *kv = fg_gpt_kv_create(g);
        cr_assert(kv, "%s", fg_last_error());
        double *lg = malloc((size_t)k->vocab * sizeof *lg);
        fill_cache(g, kv, k->block, lg);
        const uint64_t before = fg_alloc_get_stats(FG_CPU).system_allocs;
        fill_cache(g, kv, k->block, lg);
        cr_expect_eq(fg_alloc_get_stats(FG_CPU).system_allocs, before, "%s: %llu blocks from the system", k->name,
                     (unsigned long long)(fg_alloc_get_stats(FG_CPU).system_allocs - before));
        free(lg);
        fg_gpt_kv_free(kv);
        fg_gpt_free(g);
    }
    fg_pool_set_threads(0);
}

/* ---- flashgrad sample ---- */

/* `flashgrad <args>` in dir with stdout into out (stderr to err when not NULL, else dropped). */
static int fg_run(const char *dir, const char *args, char *out, size_t n, const char *err) {
    char cmd[8400], bin[4096];
    if (!realpath(fgt_bin(), bin)) cr_skip_test("no flashgrad binary at %s (set FG_BIN; make test does)", fgt_bin());
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 120 '%s' %s 2>%s", dir, bin, args, err ? err : "/dev/null");
    return fgt_run_cmd(cmd, out, n);
}

Test(gpt_kv, sample_streams_the_same_text_and_the_cache_equals_the_recompute, .timeout = 240) {
    char dir[256];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_kv_cli_XXXXXX");
    char path[512], a[8192], b[8192], log[4096];
    snprintf(path, sizeof path, "%s/t.txt", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int i = 0; i < 300; i++) fputs("to be or not to be, that is the question. ", f);
    fclose(f);
    int st = fg_run(dir,
                    "train --data t.txt --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --steps 4 "
                    "--eval-every 0 --eval-iters 1 --samples 0 --threads 1 --warmup 1 --out r",
                    log, sizeof log, NULL);
    cr_assert_eq(st, 0, "train exited %d: %s", st, log);
    /* greedy, 40 tokens: far past block 16 */
    st = fg_run(dir, "sample --ckpt r --tokens 40 --temperature 0 --prompt to", a, sizeof a, NULL);
    cr_assert_eq(st, 0, "%s", a);
    st = fg_run(dir, "sample --ckpt r --tokens 40 --temperature 0 --prompt to --no-kv-cache", b, sizeof b, NULL);
    cr_assert_eq(st, 0, "%s", b);
    cr_expect_str_eq(a, b, "greedy text with the cache differs from the recompute's");
    cr_expect_eq(strlen(a), 2 + 40 + 1, "prompt, 40 tokens, newline: %s", a);
    /* sampled, streamed, two samples: the same text as printed at the end */
    st = fg_run(dir, "sample --ckpt r --tokens 30 --top-p 0.9 --top-k 5 --num-samples 2 --seed 3", a, sizeof a, NULL);
    cr_assert_eq(st, 0, "%s", a);
    snprintf(path, sizeof path, "%s/err.txt", dir);
    st = fg_run(dir, "sample --ckpt r --tokens 30 --top-p 0.9 --top-k 5 --num-samples 2 --seed 3 --stream --speed", b,
                sizeof b, path);
    cr_assert_eq(st, 0, "%s", b);
    cr_expect_str_eq(a, b, "--stream printed other text");
    f = fopen(path, "r");
    cr_assert(f);
    size_t n = fread(log, 1, sizeof log - 1, f);
    fclose(f);
    log[n] = 0;
    cr_expect(strstr(log, "2 × 30 tokens") && strstr(log, "tokens/s (KV cache"), "no speed line on stderr: %s", log);
    /* a bad --top-p is a usage error */
    snprintf(path, sizeof path, "%s/err.txt", dir);
    st = fg_run(dir, "sample --ckpt r --top-p 0", a, sizeof a, path);
    cr_expect_eq(st, 2, "--top-p 0 exited %d", st);
    st = fg_run(dir, "sample --ckpt r --top-p 1.01", a, sizeof a, path);
    cr_expect_eq(st, 2, "--top-p 1.01 exited %d", st);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* ---- against nanoGPT's generate() in PyTorch ---- */
Test(gpt_kv, greedy_tokens_match_nanogpt_generate_in_pytorch, .timeout = 300) {
    const char *what = "PyTorch cross-check of KV-cache generation";
    const char *script = "tests/gpt_generate_torch_check.py";
    if (access(script, R_OK) != 0) fgt_skip(what, "tests/gpt_generate_torch_check.py not found (run from the repo root)");
    /* FG_TORCH_PYTHON (a PyTorch 2 interpreter) when set, else Debian's python3 */
    const char *py = getenv("FG_TORCH_PYTHON");
    if (py && *py && access(py, X_OK) != 0) fgt_skip(what, "FG_TORCH_PYTHON is not an executable");
    if (!(py && *py)) fgt_python_require(what, "numpy torch");
    char dir[256];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_kv_torch_XXXXXX");
    /* block sizes 1, 6, 16 and 40, each generating well past the block */
    static const int blocks[] = {1, 6, 16, 40}, prompts[] = {1, 4, 3, 25};
    for (int k = 0; k < 4; k++) {
        fg_gpt_config c = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 32, blocks[k], 29, 0);
        c.n_head = 4;
        fg_gpt *g = make(&c, 77 + (uint64_t)k);
        /* weights of std ~0.5 instead of 0.02: attention that is far from uniform and GELU inputs of
         * order 1, so that a wrong attention, position or activation changes the tokens */
        float *pw = fg_data(g->params_flat);
        for (int64_t i = 0; i < g->num_elements; i++) pw[i] *= 25.0f;
        const int np = prompts[k], n_new = 2 * blocks[k] + 7;
        int32_t tok[128];
        fill_tokens(tok, np, c.vocab_size, 50 + (uint64_t)k);
        fg_sample_opts o = {.temperature = 0};
        cr_assert_eq(fg_gpt_generate(g, tok, np, n_new, &o), FG_OK, "%s", fg_last_error());
        char path[512];
        snprintf(path, sizeof path, "%s/case_%d.safetensors", dir, k);
        fg_st_writer *w = fg_st_writer_new();
        cr_assert(w, "%s", fg_last_error());
        for (int j = 0; j < g->n_params; j++)
            cr_assert_eq(fg_st_writer_add_tensor(w, g->params[j].name, g->params[j].w), FG_OK, "%s", fg_last_error());
        cr_assert_eq(fg_st_writer_write(w, path), FG_OK, "%s", fg_last_error());
        fg_st_writer_free(w);
        snprintf(path, sizeof path, "%s/case_%d.txt", dir, k);
        FILE *f = fopen(path, "w");
        cr_assert(f);
        fprintf(f, "%d %d %d %d %d %d\n", c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size, np);
        for (int i = 0; i < np + n_new; i++) fprintf(f, i ? " %d" : "%d", tok[i]);
        fprintf(f, "\n");
        fclose(f);
        fg_gpt_free(g);
    }
    char log[16384];
    int st;
    if (py && *py) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "'%s' %s '%s' 2>&1", py, script, dir);
        st = fgt_run_cmd(cmd, log, sizeof log);
    } else {
        st = fgt_python_run(NULL, script, dir, log, sizeof log);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    if (st == FGT_PYTHON_CANNOT_RUN) fgt_skip(what, log);
    if (fgt_verbose()) fprintf(stderr, "[gpt_kv] %s", log);
    cr_expect_eq(st, 0, "gpt_generate_torch_check.py exited %d:\n%s", st, log);
}
