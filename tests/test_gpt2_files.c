/* test_gpt2_files.c — GPT-2 model files in and out (train/model_files.h): llm.c's model file
 * against a writer written here from llm.c's write_model, Hugging Face folders against transformers
 * itself (tests/gpt2_files_torch_check.py) and, without Python, a checked-in transformers model with
 * its logits (tests/fixtures/), llm.c's bfloat16 export at rounding ties, refusals, and the export's
 * rules for an existing OUT. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "datasets/source.h"
#include "tensor/fileio.h"
#include "tensor/npy.h"
#include "tests/bf16_ref.h"
#include "tests/common.h"
#include "train/model_files.h"
#include "train/trainer.h"

TestSuite(gpt2_files, .timeout = 300);

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* llm.c's write_model, from train_gpt2.py: header int32[256] = {20240326, version, maxT, V, L, H, C,
 * Vp, 0...}, then the tensors in this order, each C-order in PyTorch's (out, in) layout, float32
 * (version 3) or bfloat16 (5): wte padded to (Vp, C) with zero rows, wpe (maxT, C), then for each of
 * ln_1.w, ln_1.b, c_attn.w, c_attn.b, attn.c_proj.w, .b, ln_2.w, .b, c_fc.w, .b, mlp.c_proj.w, .b the
 * tensor of block 0, 1, ..., L-1, then ln_f.w, ln_f.b. Values are random bits (finite), written as
 * 4- or 2-byte words. Returns the bytes (caller frees) and their count. The sizes per kind and layer
 * are written out here, not taken from flashgrad's table. */
static unsigned char *llmc_write(int version, int T, int V, int L, int H, int C, int Vp, uint64_t seed, size_t *n) {
    const size_t es = version == 3 ? 4 : 2;
    const int64_t kind_sizes[12] = {C, C, 3LL * C * C, 3LL * C, (int64_t)C * C, C, C, C, 4LL * C * C, 4LL * C,
                                    4LL * C * C, C};
    int64_t total = (int64_t)Vp * C + (int64_t)T * C + 2LL * C;
    for (int k = 0; k < 12; k++) total += L * kind_sizes[k];
    *n = 1024 + (size_t)total * es;
    unsigned char *b = calloc(1, *n);
    int32_t hd[256] = {20240326, version, T, V, L, H, C, Vp};
    memcpy(b, hd, sizeof hd);
    uint64_t s = seed | 1;
    for (int64_t i = 0; i < total; i++) {
        if (i >= (int64_t)V * C && i < (int64_t)Vp * C) continue; /* padding rows stay zero */
        uint32_t r = (uint32_t)rng_next(&s);
        /* a finite float with a modest exponent: sign, exponent in [100, 140), mantissa random */
        uint32_t u = (r & 0x807fffffu) | ((100u + (r >> 24) % 40u) << 23);
        if (es == 4)
            memcpy(b + 1024 + i * 4, &u, 4);
        else {
            uint16_t h = (uint16_t)(u >> 16);
            memcpy(b + 1024 + i * 2, &h, 2);
        }
    }
    return b;
}

/* The file's value at element `at` of its parameters, as float. */
static float llmc_value(const unsigned char *b, int version, int64_t at) {
    uint32_t u = 0;
    if (version == 3)
        memcpy(&u, b + 1024 + at * 4, 4);
    else {
        uint16_t h;
        memcpy(&h, b + 1024 + at * 2, 2);
        u = (uint32_t)h << 16;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    void *b = NULL;
    cr_assert_eq(fg_read_file(path, 0, &b, n), FG_OK, "%s", fg_last_error());
    return b;
}

static void llmc_round_trip(int version) {
    char dir[256], p1[512], p2[512];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_llmc_XXXXXX");
    snprintf(p1, sizeof p1, "%s/in.bin", dir);
    snprintf(p2, sizeof p2, "%s/out.bin", dir);
    /* GPT-2's vocabulary padded as llm.c pads it, n_head != n_layer */
    const int T = 9, V = 50257, L = 3, H = 2, C = 8, Vp = 50304;
    size_t n = 0;
    unsigned char *b = llmc_write(version, T, V, L, H, C, Vp, 42 + (uint64_t)version, &n);
    write_bytes(p1, b, n);
    fg_model_file *m = fg_model_file_load(p1);
    cr_assert(m, "%s", fg_last_error());
    cr_expect_eq(m->format, FG_MODEL_LLMC);
    cr_expect_eq(m->padded_vocab, Vp);
    cr_expect_eq(m->llmc_version, version);
    const fg_gpt *g = m->model;
    cr_expect(g->cfg.vocab_size == V && g->cfg.block_size == T && g->cfg.n_layer == L && g->cfg.n_head == H &&
                  g->cfg.n_embd == C,
              "config V %d T %d L %d H %d C %d", g->cfg.vocab_size, g->cfg.block_size, g->cfg.n_layer, g->cfg.n_head,
              g->cfg.n_embd);
    /* spot checks at offsets computed from llm.c's order, independently of flashgrad's table */
    const int64_t off_wpe = (int64_t)Vp * C, off_blocks = off_wpe + (int64_t)T * C;
    const int64_t ln1w = off_blocks, ln1b = ln1w + L * C, qkvw = ln1b + L * C, qkvb = qkvw + L * 3LL * C * C;
    const int64_t aw = qkvb + L * 3LL * C, ab = aw + (int64_t)L * C * C, ln2w = ab + L * C, ln2b = ln2w + L * C;
    const int64_t fw = ln2b + L * C, fb = fw + L * 4LL * C * C, pw = fb + L * 4LL * C, pb = pw + L * 4LL * C * C;
    const int64_t lnf = pb + L * C;
    struct {
        fg_gpt_kind k;
        int layer;
        int64_t idx;  /* element within the tensor */
        int64_t file; /* element in the file */
    } spots[] = {
        {FG_GPT_WTE, 0, 5LL * C + 3, 5LL * C + 3},
        {FG_GPT_WTE, 0, (int64_t)(V - 1) * C + 7, (int64_t)(V - 1) * C + 7},
        {FG_GPT_WPE, 0, 8LL * C + 1, off_wpe + 8LL * C + 1},
        {FG_GPT_LN1_W, 2, 3, ln1w + 2 * C + 3},
        {FG_GPT_LN1_B, 1, 0, ln1b + 1 * C},
        {FG_GPT_ATTN_W, 1, 17LL * C + 5, qkvw + 1 * 3LL * C * C + 17LL * C + 5},
        {FG_GPT_ATTN_B, 2, 20, qkvb + 2 * 3LL * C + 20},
        {FG_GPT_APROJ_W, 0, 6LL * C + 2, aw + 6LL * C + 2},
        {FG_GPT_APROJ_B, 2, 7, ab + 2 * C + 7},
        {FG_GPT_LN2_W, 1, 4, ln2w + C + 4},
        {FG_GPT_LN2_B, 2, 5, ln2b + 2 * C + 5},
        {FG_GPT_FC_W, 2, 31LL * C + 6, fw + 2 * 4LL * C * C + 31LL * C + 6},
        {FG_GPT_FC_B, 1, 30, fb + 4LL * C + 30},
        {FG_GPT_MPROJ_W, 1, 7LL * 4 * C + 29, pw + 4LL * C * C + 7LL * 4 * C + 29},
        {FG_GPT_MPROJ_B, 0, 1, pb + 1},
        {FG_GPT_LNF_W, 0, 2, lnf + 2},
        {FG_GPT_LNF_B, 0, 6, lnf + C + 6},
    };
    for (size_t i = 0; i < sizeof spots / sizeof spots[0]; i++) {
        const float *w = fg_data(fg_gpt_weight(g, spots[i].k, spots[i].layer));
        float want = llmc_value(b, version, spots[i].file);
        cr_expect(w[spots[i].idx] == want, "spot %zu (kind %d layer %d): %g, the file holds %g", i, spots[i].k,
                  spots[i].layer, (double)w[spots[i].idx], (double)want);
    }
    /* written back: the same bytes */
    cr_assert_eq(fg_llmc_save(g, p2, version, 0), FG_OK, "%s", fg_last_error());
    size_t n2 = 0;
    unsigned char *b2 = read_bytes(p2, &n2);
    cr_assert_eq(n2, n, "written %zu bytes, read %zu", n2, n);
    size_t first = 0;
    while (first < n && b[first] == b2[first]) first++;
    cr_expect_eq(first, n, "the written file differs at byte %zu", first);
    /* refusals: truncated, one byte extra, another version, another magic */
    write_bytes(p1, b, n - 1);
    cr_expect_null(fg_model_file_load(p1));
    cr_expect(strstr(fg_last_error(), "truncated"), "%s", fg_last_error());
    unsigned char *big = calloc(1, n + 1);
    memcpy(big, b, n);
    write_bytes(p1, big, n + 1);
    cr_expect_null(fg_model_file_load(p1));
    cr_expect(strstr(fg_last_error(), "extra bytes"), "%s", fg_last_error());
    int32_t v4 = 4;
    memcpy(big + 4, &v4, 4);
    write_bytes(p1, big, n);
    cr_expect_null(fg_model_file_load(p1));
    cr_expect(strstr(fg_last_error(), "version 4"), "%s", fg_last_error());
    /* an existing file is kept without overwrite, replaced with it */
    cr_expect_eq(fg_llmc_save(g, p2, version, 0), FG_ERR_ARG);
    cr_expect_eq(fg_llmc_save(g, p2, version, 1), FG_OK, "%s", fg_last_error());
    free(big);
    free(b);
    free(b2);
    fg_model_file_free(m);
    fgt_remove_tmpdir(dir);
}

/* A tiny GPT2LMHeadModel saved by transformers (tests/fixtures/make_tiny_gpt2.py: 2 blocks, 2 heads,
 * C 16, V 32, weights large enough that every Conv1D weight moves the logits) loaded through
 * fg_model_file_load (what --init-from, sample and eval use): its logits for the fixture's tokens
 * against transformers' own (float64 forward on the file's float32 weights), with no Python. The
 * float32 model that the loader makes, within 1e-5 of the logits' scale; the same weights copied
 * into a float64 model (fg_gpt_copy_weights, as --init-from copies them), within 1e-9. */
Test(gpt2_files, hf_fixture_logits_match_transformers_without_python) {
    const char *dir = "tests/fixtures/tiny_gpt2", *ref = "tests/fixtures/tiny_gpt2_logits.txt";
    FILE *f = fopen(ref, "r");
    cr_assert(f, "no %s (run the tests from the repository root)", ref);
    enum { TMAX = 16, VV = 32 };
    int32_t tok[TMAX];
    int T = 0;
    char line[4096];
    cr_assert(fgets(line, sizeof line, f));
    for (char *p = line, *e; T < TMAX; p = e, T++) {
        long t = strtol(p, &e, 10);
        if (e == p) break;
        tok[T] = (int32_t)t;
    }
    cr_assert(T >= 8, "%s: %d tokens", ref, T);
    static double want[TMAX][VV];
    double scale = 1;
    for (int t = 0; t < T; t++)
        for (int v = 0; v < VV; v++) {
            cr_assert_eq(fscanf(f, "%lf", &want[t][v]), 1, "%s: row %d value %d", ref, t, v);
            scale = fmax(scale, fabs(want[t][v]));
        }
    fclose(f);
    fg_model_file *m = fg_model_file_load(dir);
    cr_assert(m, "%s", fg_last_error());
    cr_assert_eq(m->format, FG_MODEL_HF);
    const fg_gpt_config *c = &m->model->cfg;
    cr_assert(c->n_layer == 2 && c->n_head == 2 && c->n_embd == 16 && c->vocab_size == VV && c->block_size == 16,
              "config L %d H %d C %d V %d T %d", c->n_layer, c->n_head, c->n_embd, c->vocab_size, c->block_size);
    fg_gpt_config c64 = *c;
    c64.dtype = FG_F64;
    fg_gpt *g64 = fg_gpt_create_empty(&c64);
    cr_assert(g64, "%s", fg_last_error());
    cr_assert_eq(fg_gpt_copy_weights(g64, m->model), FG_OK, "%s", fg_last_error());
    fg_no_grad_enter();
    for (int pass = 0; pass < 2; pass++) {
        fg_tensor *lg = fg_gpt_forward(pass ? g64 : m->model, tok, 1, T, NULL);
        cr_assert(lg, "%s", fg_last_error());
        const double tol = (pass ? 1e-9 : 1e-5) * scale;
        for (int t = 0; t < T; t++)
            for (int v = 0; v < VV; v++) {
                const double got = fg_get(lg, (int64_t)t * VV + v);
                cr_assert(fabs(got - want[t][v]) <= tol,
                          "%s model: logit (position %d, token %d) is %.9g, transformers' %.9g (|diff| %.3g > %.3g)",
                          pass ? "float64" : "float32", t, v, got, want[t][v], fabs(got - want[t][v]), tol);
            }
        fg_release(lg);
    }
    fg_no_grad_exit();
    fg_gpt_free(g64);
    fg_model_file_free(m);
}

Test(gpt2_files, llmc_float32_file_round_trips_byte_for_byte) { llmc_round_trip(3); }

/* llm.c's bfloat16 export rounds each weight once to nearest, ties to even (PyTorch's rule, worked out
 * here on the bits): wte's rows (the file's first elements) set to float32 values exactly halfway
 * between two bf16 (kept part even and odd), one bit either side of halfway, and one below the
 * binade's top that carries into the exponent; then a float64 model with values 2^-40 off a float32
 * halfway point, which only a single rounding from float64 gets right (through float32 they land
 * on the tie and go to even). */
Test(gpt2_files, llmc_bfloat16_export_rounds_ties_to_even_once) {
    char dir[256], p[512];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_llmc_rne_XXXXXX");
    snprintf(p, sizeof p, "%s/m.bin", dir);
    for (int dt64 = 0; dt64 < 2; dt64++) {
        fg_gpt_config c = fgt_tiny_gpt_config(dt64 ? FG_F64 : FG_F32, FG_ATTN_FLASH, 16, 8, 7, 0);
        fg_gpt *g = fg_gpt_create(&c, 3);
        cr_assert(g, "%s", fg_last_error());
        fg_tensor *wte = fg_gpt_weight(g, FG_GPT_WTE, 0);
        const int64_t n = fg_numel(wte);
        uint16_t *want = malloc((size_t)n * sizeof *want);
        static const uint32_t rest32[4] = {0x8000u, 0x7fffu, 0x8001u, 0x8000u};
        for (int64_t i = 0; i < n; i++) {
            /* sign, an exponent in 120..135, a kept part whose last bit alternates (all ones every
             * 9th: the carry), a dropped half at or beside the halfway point */
            const uint32_t sign = (uint32_t)(i & 1) << 31, e = 120u + (uint32_t)(i % 16);
            const uint32_t kept = i % 9 == 0 ? 0x7fu : (uint32_t)(i * 37 % 128);
            const uint32_t u = sign | e << 23 | kept << 16 | (dt64 ? 0x8000u : rest32[i % 4]);
            const uint16_t keep = (uint16_t)(u >> 16);
            if (!dt64) {
                const uint32_t r = u & 0xffffu;
                want[i] = (uint16_t)(keep + (r > 0x8000u || (r == 0x8000u && (keep & 1u))));
                cr_assert_eq(fg_set(wte, i, (double)fgt_f32_bits(u)), FG_OK);
            } else {
                /* 2^-40 relative off the tie: the magnitude goes up for even i/2, down otherwise */
                const int up = (i / 2) % 2 == 0;
                const double t = (double)fgt_f32_bits(u);
                want[i] = (uint16_t)(keep + up);
                cr_assert_eq(fg_set(wte, i, t * (up ? 1 + 0x1p-40 : 1 - 0x1p-40)), FG_OK);
            }
        }
        cr_assert_eq(fg_llmc_save(g, p, 5, 1), FG_OK, "%s", fg_last_error());
        size_t nb = 0;
        unsigned char *b = read_bytes(p, &nb);
        cr_assert(nb >= 1024 + (size_t)n * 2);
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, b + 1024 + i * 2, 2);
            cr_assert_eq(h, want[i], "%s model, wte element %lld (%a): the file holds 0x%04x, nearest-even is 0x%04x",
                         dt64 ? "float64" : "float32", (long long)i, fg_get(wte, i), h, want[i]);
        }
        free(b);
        free(want);
        fg_gpt_free(g);
    }
    fgt_remove_tmpdir(dir);
}
Test(gpt2_files, llmc_bfloat16_file_round_trips_byte_for_byte) { llmc_round_trip(5); }

/* A small random model written as a Hugging Face folder by flashgrad's writer. */
static fg_gpt *small_model(int block) {
    fg_gpt_config c = fgt_tiny_gpt_config(FG_F32, FG_ATTN_FLASH, 16, block, 11, 0);
    c.n_layer = 2;
    fg_gpt *g = fg_gpt_create(&c, 5);
    cr_assert(g, "%s", fg_last_error());
    return g;
}

/* Replaces the first `from` in DIR/config.json by `to`. */
static void edit_config(const char *dir, const char *from, const char *to) {
    char p[600];
    snprintf(p, sizeof p, "%.500s/config.json", dir);
    size_t n = 0;
    char *s = (char *)read_bytes(p, &n);
    char *at = strstr(s, from);
    cr_assert(at, "config.json has no '%s'", from);
    FILE *f = fopen(p, "wb");
    fwrite(s, 1, (size_t)(at - s), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(s);
}

Test(gpt2_files, hf_folder_round_trips_and_foreign_configurations_are_refused) {
    char dir[256], out[512];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_hf_XXXXXX");
    snprintf(out, sizeof out, "%s/hf", dir);
    fg_gpt *g = small_model(12);
    cr_assert_eq(fg_hf_save(g, out, 0), FG_OK, "%s", fg_last_error());
    fg_model_file *m = fg_model_file_load(out);
    cr_assert(m, "%s", fg_last_error());
    cr_expect_eq(m->format, FG_MODEL_HF);
    cr_expect_eq(memcmp(fg_data(m->model->params_flat), fg_data(g->params_flat), (size_t)g->num_elements * 4), 0,
                 "the weights changed on the way through the folder");
    fg_model_file_free(m);
    struct {
        const char *from, *to, *expect;
    } bad[] = {
        {"\"gelu_new\"", "\"relu\"", "activation_function"},
        {"1e-05", "1e-06", "layer_norm_epsilon"},
        {"1e-05", "1e-05x", "not a JSON object of the form config.json has"}, /* not JSON: refused where it stops being */
        {"1e-05", "-1e-05", "layer_norm_epsilon -1e-05"},
        {"1e-05", "nan", "expected a value at byte"},
        {"\"n_layer\": 2", "\"n_layer\": 1025", "n_layer\" is 1025, not an integer in 1..1024"},
        {"\"n_embd\": 16", "\"n_embd\": 65537", "n_embd\" is 65537, not an integer in 1..65536"},
        {"\"n_embd\": 16", "\"n_embd\": 16.0", "n_embd\" is 16.0"},
        {"\"n_head\": 2", "\"n_head\": -2", "n_head\" is -2"},
        {"\"n_positions\": 12", "\"n_positions\": 1048577", "n_positions\" is 1048577"},
        {"\"vocab_size\": ", "\"vocab_size\": 99999999", "vocab_size\" is 9999999911, not an integer"},
        {"\"n_inner\": null", "\"n_inner\": 10", "n_inner"},
        {"\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", "tie_word_embeddings"},
        {"\"scale_attn_by_inverse_layer_idx\": false", "\"scale_attn_by_inverse_layer_idx\": true", "layer index"},
        {"\"model_type\": \"gpt2\"", "\"model_type\": \"llama\"", "model_type"},
        {"\"n_layer\": 2", "\"n_layer\": 3", "missing tensor"},
        {"\"n_embd\": 16", "\"n_embd\": 8", "shape"},
        {"\"n_layer\": 2", "\"n_layer\": 2,,", "JSON"},
    };
    char cfg0[600], keep[600];
    snprintf(cfg0, sizeof cfg0, "%.500s/config.json", out);
    snprintf(keep, sizeof keep, "%s/config.keep", dir);
    size_t n0 = 0;
    unsigned char *orig = read_bytes(cfg0, &n0);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_bytes(cfg0, orig, n0);
        edit_config(out, bad[i].from, bad[i].to);
        cr_expect_null(fg_model_file_load(out), "case %zu loaded", i);
        cr_expect(strstr(fg_last_error(), bad[i].expect), "case %zu: '%s'", i, fg_last_error());
    }
    write_bytes(cfg0, orig, n0);
    (void)keep;
    free(orig);
    /* an existing folder: kept without overwrite; replaced with it; never when it holds other files */
    cr_expect_eq(fg_hf_save(g, out, 0), FG_ERR_ARG);
    cr_expect(strstr(fg_last_error(), "--overwrite"), "%s", fg_last_error());
    cr_expect_eq(fg_hf_save(g, out, 1), FG_OK, "%s", fg_last_error());
    char other[600];
    snprintf(other, sizeof other, "%s/log.csv", out);
    write_bytes(other, "step\n", 5);
    cr_expect_eq(fg_hf_save(g, out, 1), FG_ERR_ARG);
    cr_expect(strstr(fg_last_error(), "log.csv"), "%s", fg_last_error());
    cr_expect_eq(access(other, F_OK), 0, "the user's file went away");
    unlink(other);
    /* a cropped context keeps wpe's first rows */
    fg_gpt *small = small_model(5);
    cr_assert_eq(fg_gpt_copy_weights(small, g), FG_OK, "%s", fg_last_error());
    const fg_tensor *a = fg_gpt_weight(small, FG_GPT_WPE, 0), *b = fg_gpt_weight(g, FG_GPT_WPE, 0);
    cr_expect_eq(memcmp(fg_data(a), fg_data(b), (size_t)fg_numel(a) * 4), 0, "cropped wpe differs");
    cr_expect_neq(fg_gpt_copy_weights(g, small), FG_OK, "a longer context was made up");
    fg_gpt_free(small);
    fg_gpt_free(g);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* The interpreter with transformers: $FG_TORCH_PYTHON when set, else the system one. */
static const char *torch_python(void) {
    const char *p = getenv("FG_TORCH_PYTHON");
    return p && *p ? p : FGT_PYTHON;
}

Test(gpt2_files, hf_models_match_transformers_and_exports_load_in_transformers, .timeout = 600) {
    const char *what = "transformers cross-check of the GPT-2 file formats";
    const char *script = "tests/gpt2_files_torch_check.py";
    if (access(script, R_OK) != 0) fgt_skip(what, "tests/gpt2_files_torch_check.py not found (run from the repo root)");
    if (access(torch_python(), X_OK) != 0) fgt_skip(what, "no python interpreter (set FG_TORCH_PYTHON)");
    char dir[256], cmd[2048], log[32768], p[700];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_gpt2_hf_XXXXXX");
    snprintf(cmd, sizeof cmd, "HF_HUB_DISABLE_PROGRESS_BARS=1 HF_HUB_OFFLINE=1 %s %s make %s 2>&1", torch_python(), script, dir);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    if (st == FGT_PYTHON_CANNOT_RUN) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) {}
        fgt_skip(what, log);
    }
    cr_assert_eq(st, 0, "make exited %d:\n%s", st, log);
    snprintf(p, sizeof p, "%s/count", dir);
    size_t nb = 0;
    char *cnt = (char *)read_bytes(p, &nb);
    const int count = atoi(cnt);
    free(cnt);
    for (int i = 0; i < count; i++) {
        snprintf(p, sizeof p, "%s/hf%d", dir, i);
        fg_model_file *m = fg_model_file_load(p);
        cr_assert(m, "hf%d: %s", i, fg_last_error());
        snprintf(p, sizeof p, "%s/x%d.npy", dir, i);
        fg_tensor *x = fg_npy_load(p);
        cr_assert(x, "%s", fg_last_error());
        const int B = (int)x->shape[0], T = (int)x->shape[1];
        int32_t *ids = malloc((size_t)B * T * sizeof *ids);
        for (int k = 0; k < B * T; k++) ids[k] = (int32_t)((const double *)fg_data(x))[k];
        fg_tensor *lg = fg_gpt_forward(m->model, ids, B, T, NULL);
        cr_assert(lg, "%s", fg_last_error());
        snprintf(p, sizeof p, "%s/fg_logits%d.npy", dir, i);
        cr_assert_eq(fg_npy_save(p, lg), FG_OK, "%s", fg_last_error());
        /* flashgrad -> hf, and hf -> llm.c -> hf */
        snprintf(p, sizeof p, "%s/exp%d", dir, i);
        cr_assert_eq(fg_hf_save(m->model, p, 0), FG_OK, "%s", fg_last_error());
        snprintf(p, sizeof p, "%s/rt%d.bin", dir, i);
        cr_assert_eq(fg_llmc_save(m->model, p, 3, 0), FG_OK, "%s", fg_last_error());
        fg_model_file *r = fg_model_file_load(p);
        cr_assert(r, "%s", fg_last_error());
        snprintf(p, sizeof p, "%s/rt%d", dir, i);
        cr_assert_eq(fg_hf_save(r->model, p, 0), FG_OK, "%s", fg_last_error());
        fg_model_file_free(r);
        fg_release(lg);
        fg_release(x);
        free(ids);
        fg_model_file_free(m);
    }
    /* one file of a folder, named directly, is the same model */
    snprintf(p, sizeof p, "%s/hf0/model.safetensors", dir);
    fg_model_file *one = fg_model_file_load(p);
    cr_expect(one && one->format == FG_MODEL_HF, "%s", fg_last_error());
    fg_model_file_free(one);
    snprintf(cmd, sizeof cmd, "HF_HUB_DISABLE_PROGRESS_BARS=1 HF_HUB_OFFLINE=1 %s %s check %s 2>&1", torch_python(), script, dir);
    st = fgt_run_cmd(cmd, log, sizeof log);
    if (fgt_verbose() || st) fprintf(stderr, "[gpt2_files] %s", log);
    cr_expect_eq(st, 0, "gpt2_files_torch_check.py check exited %d:\n%s", st, log);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

#define SHAKESPEARE "../shared/datasets/tinyshakespeare/input.txt"

Test(gpt2_files, hf_model_fine_tunes_with_init_from_and_exports_back, .timeout = 600) {
    const char *what = "fine-tuning a transformers GPT-2 and exporting it";
    const char *script = "tests/gpt2_files_torch_check.py";
    if (access(script, R_OK) != 0) fgt_skip(what, "tests/gpt2_files_torch_check.py not found (run from the repo root)");
    if (access(SHAKESPEARE, R_OK) != 0) fgt_skip(what, SHAKESPEARE " not found");
    char dir[256], cmd[4096], log[32768], p[700];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_gpt2_ft_XXXXXX");
    snprintf(cmd, sizeof cmd, "HF_HUB_DISABLE_PROGRESS_BARS=1 %s %s make_ft %s 2>&1", torch_python(), script, dir);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    if (st == FGT_PYTHON_CANNOT_RUN) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) {}
        fgt_skip(what, log);
    }
    cr_assert_eq(st, 0, "make_ft exited %d:\n%s", st, log);
    /* a model flag that contradicts the file, a longer context, a vocabulary that does not fit, and
     * --resume with --init-from: one line, exit 2, nothing written */
    const char *bad[] = {"--n-layer 3", "--block-size 65", "", "--resume"};
    const char *expect[] = {"contradicts", "only shrink", "vocabulary", "not both"};
    for (int i = 0; i < 4; i++) {
        snprintf(cmd, sizeof cmd, "%s train --init-from %s/hf_start --data %s %s %s --steps 2 --out %s/bad 2>&1",
                 fgt_bin(), dir, SHAKESPEARE, i == 2 ? "" : "--byte", bad[i], dir);
        st = fgt_run_cmd(cmd, log, sizeof log);
        cr_expect_eq(st, 2, "'%s' exited %d:\n%s", bad[i], st, log);
        cr_expect(strstr(log, expect[i]), "'%s': %s", bad[i], log);
        snprintf(p, sizeof p, "%s/bad", dir);
        cr_expect_neq(access(p, F_OK), 0, "'%s' created the run folder", bad[i]);
    }
    /* 50 steps of fine-tuning (nanoGPT's spelling of the flag), the loss going down */
    snprintf(cmd, sizeof cmd,
             "%s train --init_from %s/hf_start --data %s --byte --block-size 32 --batch-size 8 --steps 50 --lr 1e-3 "
             "--warmup 5 --eval-every 50 --eval-iters 4 --samples 0 --out %s/run 2>&1",
             fgt_bin(), dir, SHAKESPEARE, dir);
    st = fgt_run_cmd(cmd, log, sizeof log);
    cr_assert_eq(st, 0, "train exited %d:\n%s", st, log);
    cr_expect(strstr(log, "init from"), "%s", log);
    double first = 0, last = 0;
    const char *l1 = strstr(log, "step 1/50 loss "), *l50 = strstr(log, "step 50/50 loss ");
    cr_assert(l1 && l50, "no step lines:\n%s", log);
    sscanf(l1, "step 1/50 loss %lf", &first);
    sscanf(l50, "step 50/50 loss %lf", &last);
    cr_expect(last < first - 1.0, "fine-tuning did not learn: loss %g -> %g", first, last);
    snprintf(cmd, sizeof cmd, "%s export --ckpt %s/run --to hf %s/ft_hf 2>&1", fgt_bin(), dir, dir);
    st = fgt_run_cmd(cmd, log, sizeof log);
    cr_assert_eq(st, 0, "export exited %d:\n%s", st, log);
    /* flashgrad's logits of the run's checkpoint, for the comparison */
    snprintf(p, sizeof p, "%s/run", dir);
    fg_model_file *m = fg_model_file_load(p);
    cr_assert(m, "%s", fg_last_error());
    cr_expect_eq(m->format, FG_MODEL_FLASHGRAD);
    cr_expect(m->tokenizer && fg_tokenizer_kind(m->tokenizer) == FG_TOK_BYTE, "the run lost its tokenizer");
    const char *text = "ROMEO:\nWhat light through yonder window breaks";
    const int T = 32;
    int32_t ids[32];
    double xd[32];
    for (int i = 0; i < T; i++) xd[i] = ids[i] = (unsigned char)text[i];
    fg_tensor *lg = fg_gpt_forward(m->model, ids, 1, T, NULL);
    cr_assert(lg, "%s", fg_last_error());
    snprintf(p, sizeof p, "%s/ft_logits.npy", dir);
    cr_assert_eq(fg_npy_save(p, lg), FG_OK, "%s", fg_last_error());
    snprintf(p, sizeof p, "%s/ft_x.npy", dir);
    cr_assert_eq(fg_npy_save_raw(p, FG_F64, 2, (int64_t[]){1, T}, xd), FG_OK, "%s", fg_last_error());
    fg_release(lg);
    fg_model_file_free(m);
    /* the text prompt works on the fine-tuned run (its byte tokenizer is in the checkpoint) */
    snprintf(cmd, sizeof cmd, "%s sample --ckpt %s/run --prompt 'ROMEO:' --tokens 20 2>&1", fgt_bin(), dir);
    st = fgt_run_cmd(cmd, log, sizeof log);
    cr_expect(st == 0 && !strncmp(log, "ROMEO:", 6), "sample exited %d:\n%s", st, log);
    snprintf(cmd, sizeof cmd, "HF_HUB_DISABLE_PROGRESS_BARS=1 %s %s check_ft %s 2>&1", torch_python(), script, dir);
    st = fgt_run_cmd(cmd, log, sizeof log);
    if (fgt_verbose() || st) fprintf(stderr, "[gpt2_files] %s", log);
    cr_expect_eq(st, 0, "check_ft exited %d:\n%s", st, log);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* `flashgrad eval --ckpt` on a Hugging Face folder and an llm.c file of one model: both need
 * --data-bin (one line, exit 2, without it or with --data), and both print the loss this test
 * computes itself on the trainer's evaluation batches of that token folder. */
Test(gpt2_files, eval_takes_hf_folders_and_llmc_files_with_data_bin) {
    char dir[256], p[700], cmd[4096], log[8192];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_gpt2_eval_XXXXXX");
    const int T = 12, B = 3, iters = 2;
    fg_gpt *g = small_model(T);
    const int V = g->cfg.vocab_size;
    snprintf(p, sizeof p, "%s/hf", dir);
    cr_assert_eq(fg_hf_save(g, p, 0), FG_OK, "%s", fg_last_error());
    snprintf(p, sizeof p, "%s/model.bin", dir);
    cr_assert_eq(fg_llmc_save(g, p, 3, 0), FG_OK, "%s", fg_last_error());
    /* a nanoGPT token folder: train.bin and val.bin, uint16 ids below V */
    snprintf(p, sizeof p, "%s/data", dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    uint64_t s = 99;
    for (int split = 0; split < 2; split++) {
        uint16_t ids[600];
        for (int i = 0; i < 600; i++) ids[i] = (uint16_t)(rng_next(&s) % (uint64_t)V);
        snprintf(p, sizeof p, "%s/data/%s.bin", dir, split ? "val" : "train");
        write_bytes(p, ids, sizeof ids);
    }
    /* the reference: the same batches through the library, the loss of the model in memory */
    snprintf(p, sizeof p, "%s/data", dir);
    fg_source *src = fg_source_tokens(p, NULL, V, T);
    cr_assert(src, "%s", fg_last_error());
    double ref[2] = {0, 0};
    int32_t x[B * T], y[B * T];
    fg_no_grad_enter();
    for (int split = 0; split < 2; split++)
        for (int i = 0; i < iters; i++) {
            cr_assert_eq(fg_source_batch(src, split ? FG_SPLIT_VAL : FG_SPLIT_TRAIN, B, T, fg_trainer_eval_seed(7),
                                         (uint64_t)i, x, y),
                         FG_OK, "%s", fg_last_error());
            fg_tensor *l = fg_gpt_loss(g, x, y, B, T, NULL);
            cr_assert(l, "%s", fg_last_error());
            ref[split] += fg_get(l, 0) / iters;
            fg_release(l);
        }
    fg_no_grad_exit();
    fg_source_free(src);
    fg_gpt_free(g);
    const char *forms[] = {"hf", "model.bin"};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s eval --ckpt %s/%s 2>&1", fgt_bin(), dir, forms[k]);
        int st = fgt_run_cmd(cmd, log, sizeof log);
        const char *nl = strchr(log, '\n');
        cr_expect(st == 2 && strstr(log, "--data-bin") && nl && !nl[1], "%s: exited %d:\n%s", forms[k], st,
                  log);
        snprintf(cmd, sizeof cmd, "%s eval --ckpt %s/%s --data %s/data/train.bin 2>&1", fgt_bin(), dir, forms[k], dir);
        st = fgt_run_cmd(cmd, log, sizeof log);
        cr_expect(st == 2 && strstr(log, "--data-bin"), "%s --data: exited %d:\n%s", forms[k], st, log);
        snprintf(cmd, sizeof cmd,
                 "%s eval --ckpt %s/%s --data-bin %s/data --batch-size %d --eval-iters %d --seed 7 2>&1", fgt_bin(),
                 dir, forms[k], dir, B, iters);
        st = fgt_run_cmd(cmd, log, sizeof log);
        cr_assert_eq(st, 0, "%s: eval exited %d:\n%s", forms[k], st, log);
        const char *at = strstr(log, "step 0: train loss ");
        double tl = 0, vl = 0;
        cr_assert(at && sscanf(at, "step 0: train loss %lf, val loss %lf", &tl, &vl) == 2, "%s", log);
        /* the printed figures have four decimals */
        cr_expect(fabs(tl - ref[0]) < 6e-5 && fabs(vl - ref[1]) < 6e-5, "%s: eval %.5f %.5f, reference %.5f %.5f",
                  forms[k], tl, vl, ref[0], ref[1]);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* Creates dir/rel with text (a folder when text is NULL). */
static void plant(const char *dir, const char *rel, const char *text) {
    char p[600];
    snprintf(p, sizeof p, "%.400s/%s", dir, rel);
    if (!text) {
        cr_assert_eq(mkdir(p, 0777), 0, "mkdir %s", p);
        return;
    }
    FILE *f = fopen(p, "w");
    cr_assert(f, "cannot create %s", p);
    fputs(text, f);
    fclose(f);
}

static int present(const char *dir, const char *rel) {
    char p[600];
    struct stat sb;
    snprintf(p, sizeof p, "%.400s/%s", dir, rel);
    return lstat(p, &sb) == 0;
}

/* An export killed midway leaves its temporary beside OUT (a folder for Hugging Face, a file for
 * llm.c): the next export to that OUT removes it. Only those: a temporary that a live writer holds
 * (its lock), a name that only looks like one, a folder with a user's file in it and a link stay. */
Test(gpt2_files, an_export_removes_what_a_killed_export_left_and_nothing_else) {
    char dir[256], out[512], bin[512];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_exl_XXXXXX");
    snprintf(out, sizeof out, "%s/hf", dir);
    snprintf(bin, sizeof bin, "%s/m.bin", dir);
    /* left by dead writers */
    static const char *const dead[] = {"hf" FG_TMP_MARK "Ab12Cd", "m.bin" FG_TMP_MARK "x9Y8z7",
                                       "hf" FG_TMP_MARK "000000"};
    plant(dir, dead[0], NULL);
    plant(dir, "hf" FG_TMP_MARK "Ab12Cd/model.safetensors", "half a model");
    plant(dir, "hf" FG_TMP_MARK "Ab12Cd/config.json" FG_TMP_MARK "Qw12Er", "{");
    plant(dir, dead[1], "half an llm.c file");
    plant(dir, dead[2], NULL);
    /* not leftovers */
    static const char *const keep[] = {"hf" FG_TMP_MARK "notes", "m.bin" FG_TMP_MARK "Ab12Cd.old",
                                       "hf" FG_TMP_MARK "Zz99Yy", "other" FG_TMP_MARK "Ab12Cd",
                                       "hf" FG_TMP_MARK "Ln00Kk", "m.bin" FG_TMP_MARK "Live01"};
    plant(dir, keep[0], "the user's");
    plant(dir, keep[1], "the user's");
    plant(dir, keep[2], NULL);
    plant(dir, "hf" FG_TMP_MARK "Zz99Yy/notes.txt", "the user's notes"); /* a folder holding a user's file */
    plant(dir, keep[3], "the user's");
    plant(dir, "target.txt", "the user's");
    char lp[600], live[600];
    snprintf(lp, sizeof lp, "%s/%s", dir, keep[4]);
    cr_assert_eq(symlink("target.txt", lp), 0);
    plant(dir, keep[5], "a live export's bytes");
    snprintf(live, sizeof live, "%s/%s", dir, keep[5]);
    int held = open(live, O_RDONLY | O_CLOEXEC); /* an export still writing: it holds its temporary */
    cr_assert(held >= 0 && fg_tmp_hold(held) == 0);
    fg_gpt *g = small_model(12);
    cr_assert_eq(fg_hf_save(g, out, 0), FG_OK, "%s", fg_last_error());
    cr_assert_eq(fg_llmc_save(g, bin, 3, 0), FG_OK, "%s", fg_last_error());
    for (size_t i = 0; i < sizeof dead / sizeof dead[0]; i++)
        cr_expect(!present(dir, dead[i]), "the dead writer's %s was left", dead[i]);
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        cr_expect(present(dir, keep[i]), "%s was removed", keep[i]);
    cr_expect(present(dir, "hf" FG_TMP_MARK "Zz99Yy/notes.txt") && present(dir, "target.txt"),
              "a user's file was removed");
    close(held);
    fg_gpt_free(g);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* The Hugging Face folder gets the mode mkdir(2) gives (0777 less the umask), its files 0666 less
 * the umask; a replaced export folder keeps its mode. */
Test(gpt2_files, an_hf_export_folder_honours_the_umask) {
    char dir[256], out[512], p[600];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_exm_XXXXXX");
    fg_gpt *g = small_model(12);
    static const unsigned masks[] = {022, 077, 002, 027};
    for (size_t i = 0; i < sizeof masks / sizeof masks[0]; i++) {
        umask(masks[i]);
        snprintf(out, sizeof out, "%s/hf%zu", dir, i);
        cr_assert_eq(fg_hf_save(g, out, 0), FG_OK, "%s", fg_last_error());
        struct stat sb;
        cr_assert_eq(stat(out, &sb), 0);
        cr_expect_eq(sb.st_mode & 07777, 0777 & ~masks[i], "umask %03o: folder mode %03o", masks[i],
                     sb.st_mode & 07777);
        snprintf(p, sizeof p, "%s/model.safetensors", out);
        cr_assert_eq(stat(p, &sb), 0);
        cr_expect_eq(sb.st_mode & 07777, 0666 & ~masks[i], "umask %03o: file mode %03o", masks[i], sb.st_mode & 07777);
    }
    /* replaced with --overwrite: the mode the user gave the folder stays */
    snprintf(out, sizeof out, "%s/hf0", dir);
    cr_assert_eq(chmod(out, 0750), 0);
    umask(022);
    cr_assert_eq(fg_hf_save(g, out, 1), FG_OK, "%s", fg_last_error());
    struct stat sb;
    cr_assert_eq(stat(out, &sb), 0);
    cr_expect_eq(sb.st_mode & 07777, 0750, "the replaced folder's mode %03o", sb.st_mode & 07777);
    fg_gpt_free(g);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* export --overwrite replaces an export that flashgrad wrote and nothing else: a Hugging Face folder
 * from elsewhere (its model.safetensors without flashgrad's mark), a folder with a user's file, a
 * link in OUT's place are refused by name and left as they were. */
Test(gpt2_files, an_export_overwrites_only_an_export_flashgrad_wrote) {
    char dir[256], out[512];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_exo_XXXXXX");
    fg_gpt *g = small_model(12);
    snprintf(out, sizeof out, "%s/user", dir);
    plant(dir, "user", NULL);
    plant(dir, "user/config.json", "{\"model_type\": \"gpt2\"}");
    plant(dir, "user/model.safetensors", "the user's weights");
    cr_expect_eq(fg_hf_save(g, out, 1), FG_ERR_ARG, "a user's HF folder was replaced");
    cr_expect(strstr(fg_last_error(), "model.safetensors") && strstr(fg_last_error(), "fg_export"), "%s",
              fg_last_error());
    cr_expect(present(dir, "user/model.safetensors") && present(dir, "user/config.json"), "the user's files went");
    /* flashgrad's own export: replaced; with a user's file added: refused */
    snprintf(out, sizeof out, "%s/ours", dir);
    cr_assert_eq(fg_hf_save(g, out, 0), FG_OK, "%s", fg_last_error());
    cr_expect_eq(fg_hf_save(g, out, 1), FG_OK, "%s", fg_last_error());
    plant(dir, "ours/notes.txt", "mine");
    cr_expect_eq(fg_hf_save(g, out, 1), FG_ERR_ARG, "a folder with a user's file was replaced");
    cr_expect(strstr(fg_last_error(), "notes.txt"), "%s", fg_last_error());
    cr_expect(present(dir, "ours/notes.txt"), "the user's file went");
    /* a link in OUT's place */
    char lp[600];
    snprintf(lp, sizeof lp, "%s/link", dir);
    cr_assert_eq(symlink("ours", lp), 0);
    cr_expect_eq(fg_hf_save(g, lp, 1), FG_ERR_ARG, "a link was replaced");
    fg_gpt_free(g);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}
