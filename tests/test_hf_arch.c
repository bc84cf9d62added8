/* test_hf_arch.c — Llama and NanoChat Hugging Face folders in and out (train/model_files.h):
 * against transformers itself (tests/hf_arch_torch_check.py: logits, greedy decoding, the export
 * bit for bit, a fine-tune through `train --init-from` exported back) and, without Python, the
 * round trip through a folder (float32, bfloat16 and float16, one file or shards) and the refusals: a config.json key that asks for what flashgrad does
 * not compute, and a model whose options its transformers class cannot express. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "datasets/source.h"
#include "tensor/bf16.h"
#include "tensor/f16.h"
#include "tensor/fileio.h"
#include "tensor/npy.h"
#include "tests/common.h"
#include "train/model_files.h"
#include "train/trainer.h"

TestSuite(hf_arch, .timeout = 600);

#define SCRIPT "tests/hf_arch_torch_check.py"
#define SHAKESPEARE "../shared/datasets/tinyshakespeare/input.txt"

/* The interpreter with transformers: $FG_TORCH_PYTHON when set, else the system one. */
static const char *torch_python(void) {
    const char *p = getenv("FG_TORCH_PYTHON");
    return p && *p ? p : FGT_PYTHON;
}

static char *read_text(const char *path) {
    void *b = NULL;
    size_t n = 0;
    cr_assert_eq(fg_read_file(path, 0, &b, &n), FG_OK, "%s", fg_last_error());
    char *s = realloc(b, n + 1);
    cr_assert(s);
    s[n] = '\0';
    return s;
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(s, 1, strlen(s), f), strlen(s));
    fclose(f);
}

/* config.json of dir with its first `from` replaced by `to` (asserts `from` is there). */
static void edit_config(const char *dir, const char *from, const char *to) {
    char p[600];
    snprintf(p, sizeof p, "%.500s/config.json", dir);
    char *s = read_text(p);
    char *at = strstr(s, from);
    cr_assert(at, "config.json has no '%s':\n%s", from, s);
    FILE *f = fopen(p, "wb");
    fwrite(s, 1, (size_t)(at - s), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(s);
}

static fg_gpt *arch_model(fg_gpt_arch arch, int kv, uint64_t seed) {
    fg_gpt_config c = fg_gpt_default_config();
    fg_gpt_arch_preset(&c, arch);
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = kv;
    c.n_embd = 32;
    c.mlp_hidden = 48;
    c.block_size = 16;
    c.vocab_size = 40;
    fg_gpt *g = fg_gpt_create(&c, seed);
    cr_assert(g, "%s", fg_last_error());
    return g;
}

/* Python prepares folders, the C side reads them (fg_model_file_load, fg_gpt_forward), decodes
 * greedily with `flashgrad sample` and exports them with `flashgrad export`, Python compares. */
Test(hf_arch, llama_and_nanochat_folders_match_transformers, .timeout = 900) {
    const char *what = "transformers cross-check of Llama and NanoChat folders";
    if (access(SCRIPT, R_OK) != 0) fgt_skip(what, SCRIPT " not found (run from the repo root)");
    if (access(torch_python(), X_OK) != 0) fgt_skip(what, "no python interpreter (set FG_TORCH_PYTHON)");
    char dir[256], cmd[4096], p[700];
    static char log[65536];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_hf_arch_XXXXXX");
    snprintf(cmd, sizeof cmd, "HF_HUB_DISABLE_PROGRESS_BARS=1 HF_HUB_OFFLINE=1 %s %s make %s 2>&1", torch_python(),
             SCRIPT, dir);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    if (st == FGT_PYTHON_CANNOT_RUN) {
        fgt_remove_tmpdir(dir);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) {}
        fgt_skip(what, log);
    }
    cr_assert_eq(st, 0, "make exited %d:\n%s", st, log);
    snprintf(p, sizeof p, "%s/count", dir);
    char *cnt = read_text(p);
    const int count = atoi(cnt);
    free(cnt);
    snprintf(p, sizeof p, "%s/new_tokens", dir);
    char *nt = read_text(p);
    const int new_tokens = atoi(nt);
    free(nt);
    cr_assert(count > 0 && new_tokens > 0);
    for (int i = 0; i < count; i++) {
        snprintf(p, sizeof p, "%s/hf%d", dir, i);
        fg_model_file *m = fg_model_file_load(p);
        cr_assert(m, "hf%d: %s", i, fg_last_error());
        cr_expect_eq(m->format, FG_MODEL_HF);
        snprintf(p, sizeof p, "%s/x%d.npy", dir, i);
        fg_tensor *x = fg_npy_load(p);
        cr_assert(x, "%s", fg_last_error());
        const int B = (int)x->shape[0], T = (int)x->shape[1];
        int32_t *ids = malloc((size_t)B * T * sizeof *ids);
        for (int k = 0; k < B * T; k++) ids[k] = (int32_t)((const double *)fg_data(x))[k];
        fg_tensor *lg = fg_gpt_forward(m->model, ids, B, T, NULL);
        cr_assert(lg, "hf%d: %s", i, fg_last_error());
        snprintf(p, sizeof p, "%s/fg_logits%d.npy", dir, i);
        cr_assert_eq(fg_npy_save(p, lg), FG_OK, "%s", fg_last_error());
        fg_release(lg);
        fg_release(x);
        free(ids);
        fg_model_file_free(m);
        /* greedy decoding through the program (the KV cache), the prompt ids in and out */
        snprintf(p, sizeof p, "%s/prompt%d.txt", dir, i);
        char *prompt = read_text(p);
        snprintf(cmd, sizeof cmd,
                 "%s sample --ckpt %s/hf%d --prompt-ids %s --temperature 0 --tokens %d > %s/fg_gen%d.txt 2> %s/err%d",
                 fgt_bin(), dir, i, prompt, new_tokens, dir, i, dir, i);
        free(prompt);
        st = fgt_run_cmd(cmd, log, sizeof log);
        snprintf(p, sizeof p, "%s/err%d", dir, i);
        char *err = read_text(p);
        cr_assert_eq(st, 0, "hf%d: sample exited %d: %s", i, st, err);
        free(err);
        /* the export in the original's dtype and, for a sharded original, sharded too: the script's
         * exp_args<i>.txt holds the flags */
        snprintf(p, sizeof p, "%s/exp_args%d.txt", dir, i);
        char *args = read_text(p);
        snprintf(cmd, sizeof cmd, "%s export --ckpt %s/hf%d --to hf %s/exp%d %s 2>&1", fgt_bin(), dir, i, dir, i, args);
        free(args);
        st = fgt_run_cmd(cmd, log, sizeof log);
        cr_assert_eq(st, 0, "hf%d: export exited %d:\n%s", i, st, log);
    }
    snprintf(cmd, sizeof cmd, "HF_HUB_DISABLE_PROGRESS_BARS=1 HF_HUB_OFFLINE=1 %s %s check %s 2>&1", torch_python(),
             SCRIPT, dir);
    st = fgt_run_cmd(cmd, log, sizeof log);
    if (fgt_verbose() || st) fprintf(stderr, "[hf_arch] %s", log);
    cr_expect_eq(st, 0, SCRIPT " check exited %d:\n%s", st, log);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* A random transformers Llama and NanoChat fine-tuned for 50 steps with `train --init-from`, then
 * exported with `export --to hf`: transformers loads each export and its logits equal flashgrad's. */
Test(hf_arch, llama_and_nanochat_fine_tune_with_init_from_and_export_back, .timeout = 900) {
    const char *what = "fine-tuning transformers Llama and NanoChat models and exporting them";
    if (access(SCRIPT, R_OK) != 0) fgt_skip(what, SCRIPT " not found (run from the repo root)");
    if (access(SHAKESPEARE, R_OK) != 0) fgt_skip(what, SHAKESPEARE " not found");
    char dir[256], cmd[4096], p[700];
    static char log[65536];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_hf_arch_ft_XXXXXX");
    snprintf(cmd, sizeof cmd, "HF_HUB_DISABLE_PROGRESS_BARS=1 %s %s make_ft %s 2>&1", torch_python(), SCRIPT, dir);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    if (st == FGT_PYTHON_CANNOT_RUN) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) {}
        fgt_skip(what, log);
    }
    cr_assert_eq(st, 0, "make_ft exited %d:\n%s", st, log);
    const char *text = "ROMEO:\nWhat light through yonder window breaks";
    const int T = 32;
    int32_t ids[32];
    double xd[32];
    for (int i = 0; i < T; i++) xd[i] = ids[i] = (unsigned char)text[i];
    snprintf(p, sizeof p, "%s/ft_x.npy", dir);
    cr_assert_eq(fg_npy_save_raw(p, FG_F64, 2, (int64_t[]){1, T}, xd), FG_OK, "%s", fg_last_error());
    const char *kinds[] = {"llama", "nanochat"};
    for (int k = 0; k < 2; k++) {
        snprintf(
            cmd, sizeof cmd,
            "%s train --init-from %s/%s_start --data %s --byte --block-size 32 --batch-size 8 --steps 50 --lr 1e-3 "
            "--warmup 5 --eval-every 50 --eval-iters 4 --samples 0 --out %s/%s_run 2>&1",
            fgt_bin(), dir, kinds[k], SHAKESPEARE, dir, kinds[k]);
        st = fgt_run_cmd(cmd, log, sizeof log);
        cr_assert_eq(st, 0, "%s: train exited %d:\n%s", kinds[k], st, log);
        cr_expect(strstr(log, "init from"), "%s", log);
        double first = 0, last = 0;
        const char *l1 = strstr(log, "step 1/50 loss "), *l50 = strstr(log, "step 50/50 loss ");
        cr_assert(l1 && l50, "%s: no step lines:\n%s", kinds[k], log);
        sscanf(l1, "step 1/50 loss %lf", &first);
        sscanf(l50, "step 50/50 loss %lf", &last);
        cr_expect(last < first - 1.0, "%s: fine-tuning did not learn: loss %g -> %g", kinds[k], first, last);
        snprintf(cmd, sizeof cmd, "%s export --ckpt %s/%s_run --to hf %s/%s_ft 2>&1", fgt_bin(), dir, kinds[k], dir,
                 kinds[k]);
        st = fgt_run_cmd(cmd, log, sizeof log);
        cr_assert_eq(st, 0, "%s: export exited %d:\n%s", kinds[k], st, log);
        snprintf(p, sizeof p, "%s/%s_run", dir, kinds[k]);
        fg_model_file *m = fg_model_file_load(p);
        cr_assert(m, "%s", fg_last_error());
        cr_expect_eq(m->format, FG_MODEL_FLASHGRAD);
        cr_expect_eq(m->model->cfg.arch, k == 0 ? FG_ARCH_LLAMA : FG_ARCH_NANOCHAT, "the run forgot its architecture");
        fg_tensor *lg = fg_gpt_forward(m->model, ids, 1, T, NULL);
        cr_assert(lg, "%s", fg_last_error());
        snprintf(p, sizeof p, "%s/%s_ft_logits.npy", dir, kinds[k]);
        cr_assert_eq(fg_npy_save(p, lg), FG_OK, "%s", fg_last_error());
        fg_release(lg);
        fg_model_file_free(m);
    }
    snprintf(cmd, sizeof cmd, "HF_HUB_DISABLE_PROGRESS_BARS=1 %s %s check_ft %s 2>&1", torch_python(), SCRIPT, dir);
    st = fgt_run_cmd(cmd, log, sizeof log);
    if (fgt_verbose() || st) fprintf(stderr, "[hf_arch] %s", log);
    cr_expect_eq(st, 0, "check_ft exited %d:\n%s", st, log);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* A checked-in transformers folder (tests/fixtures/make_tiny_llama.py) through fg_model_file_load
 * (what --init-from, sample and eval use): its logits for the fixture's tokens against
 * transformers' own (float64 forward on the file's float32 weights), with no Python. The float32
 * model within 1e-5 of the logits' scale; the same weights in a float64 model (fg_gpt_copy_weights,
 * as --init-from copies them) within 1e-9. */
static void fixture_logits(const char *name, fg_gpt_arch arch) {
    char dir[256], ref[256];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", name);
    snprintf(ref, sizeof ref, "tests/fixtures/%s_logits.txt", name);
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
    cr_assert(c->arch == arch && c->n_layer == 2 && c->n_head == 4 && fg_gpt_kv_heads(c) == 2 && c->n_embd == 16 &&
                  fg_gpt_hidden(c) == 40 && c->vocab_size == VV && c->block_size == 16 && fg_gpt_theta(c) == 500,
              "%s: config arch %s L %d H %d KV %d C %d I %d V %d T %d theta %g", name, fg_gpt_arch_name(c->arch),
              c->n_layer, c->n_head, fg_gpt_kv_heads(c), c->n_embd, fg_gpt_hidden(c), c->vocab_size, c->block_size,
              fg_gpt_theta(c));
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
                cr_assert(
                    fabs(got - want[t][v]) <= tol,
                    "%s, %s model: logit (position %d, token %d) is %.9g, transformers' %.9g (|diff| %.3g > %.3g)",
                    name, pass ? "float64" : "float32", t, v, got, want[t][v], fabs(got - want[t][v]), tol);
            }
        fg_release(lg);
    }
    fg_no_grad_exit();
    fg_gpt_free(g64);
    fg_model_file_free(m);
}

Test(hf_arch, llama_fixture_logits_match_transformers_without_python) { fixture_logits("tiny_llama", FG_ARCH_LLAMA); }

Test(hf_arch, nanochat_fixture_logits_match_transformers_without_python) {
    fixture_logits("tiny_nanochat", FG_ARCH_NANOCHAT);
}

/* A Llama and a NanoChat model through a folder and back: the same weights bit for bit, the same
 * architecture. */
Test(hf_arch, folders_round_trip_without_python) {
    char dir[256], out[512];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_hf_arch_rt_XXXXXX");
    const fg_gpt_arch archs[] = {FG_ARCH_LLAMA, FG_ARCH_NANOCHAT};
    for (int a = 0; a < 2; a++)
        for (int tied = 0; tied < 2; tied++) {
            fg_gpt_config c = fg_gpt_default_config();
            fg_gpt_arch_preset(&c, archs[a]);
            c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 32, c.mlp_hidden = 48, c.block_size = 16;
            c.vocab_size = 40, c.untie_head = !tied, c.rope_theta = 12345.5, c.norm_eps = 3e-6;
            fg_gpt *g = fg_gpt_create(&c, 5 + (uint64_t)a);
            cr_assert(g, "%s", fg_last_error());
            snprintf(out, sizeof out, "%s/m%d%d", dir, a, tied);
            cr_assert_eq(fg_hf_save(g, out, 0), FG_OK, "%s", fg_last_error());
            fg_model_file *m = fg_model_file_load(out);
            cr_assert(m, "%s", fg_last_error());
            const fg_gpt_config *r = &m->model->cfg;
            cr_expect_eq(r->arch, c.arch);
            cr_expect_eq(fg_gpt_kv_heads(r), 2);
            cr_expect_eq(r->untie_head, c.untie_head);
            cr_expect_eq(fg_gpt_theta(r), 12345.5);
            cr_expect_eq(fg_gpt_eps(r), 3e-6);
            cr_expect_eq(r->logit_softcap, c.logit_softcap);
            cr_expect_eq(fg_gpt_hidden(r), 48);
            cr_assert_eq(m->model->num_elements, g->num_elements);
            cr_expect_eq(memcmp(fg_data(m->model->params_flat), fg_data(g->params_flat), (size_t)g->num_elements * 4),
                         0, "%s: the weights changed on the way through the folder", fg_gpt_arch_name(c.arch));
            fg_model_file_free(m);
            fg_gpt_free(g);
        }
    snprintf(out, sizeof out, "rm -rf '%s'", dir);
    if (system(out)) {}
}

/* The bytes of dir/name (caller frees). */
static char *file_bytes(const char *dir, const char *name, size_t *n) {
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    void *b = NULL;
    cr_assert_eq(fg_read_file(p, 0, &b, n), FG_OK, "%s", fg_last_error());
    return b;
}

/* Half-precision and sharded exports: the weights come back rounded once (to nearest even), a
 * second export of what was read writes the same bytes, every shard is in the index, and
 * --overwrite replaces a sharded export (no shard left behind) but not a folder with a user's file. */
Test(hf_arch, half_precision_and_sharded_exports_round_trip) {
    char dir[256], a[300], b[600], cmd[600];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_hf_arch_half_XXXXXX");
    fg_gpt_config c = fg_gpt_default_config();
    fg_gpt_arch_preset(&c, FG_ARCH_NANOCHAT);
    c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 32, c.block_size = 16, c.vocab_size = 40;
    fg_gpt *g = fg_gpt_create(&c, 9);
    cr_assert(g, "%s", fg_last_error());
    const float *w0 = fg_data(g->params_flat);
    const fg_st_dtype dts[2] = {FG_ST_BF16, FG_ST_F16};
    for (int k = 0; k < 2; k++) {
        const fg_hf_save_opts o = {.dtype = dts[k], .max_shard_bytes = 5000};
        snprintf(a, sizeof a, "%s/a%d", dir, k);
        snprintf(b, sizeof b, "%s/b%d", dir, k);
        cr_assert_eq(fg_hf_save_with(g, NULL, a, 0, &o), FG_OK, "%s", fg_last_error());
        fg_model_file *m = fg_model_file_load(a);
        cr_assert(m, "%s", fg_last_error());
        const float *w = fg_data(m->model->params_flat);
        for (int64_t i = 0; i < g->num_elements; i++) {
            const float want = dts[k] == FG_ST_BF16 ? fg_bf16_to_f32(fg_bf16_from_f32(w0[i])) : fg_f16_to_f32(fg_f16_from_f32(w0[i]));
            cr_assert_eq(w[i], want, "element %lld: %a, expected %a", (long long)i, (double)w[i], (double)want);
        }
        cr_assert_eq(fg_hf_save_with(m->model, NULL, b, 0, &o), FG_OK, "%s", fg_last_error());
        fg_model_file_free(m);
        /* the index names files that exist, and the two exports' files are the same bytes */
        size_t ni = 0;
        char *index = file_bytes(a, "model.safetensors.index.json", &ni);
        int shards = 0;
        for (int s = 1; s < 100; s++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05d-of-", s);
            if (!strstr(index, name)) break;
            shards++;
        }
        cr_assert_geq(shards, 3, "%d shards for a %lld-element model at 5000 bytes each", shards, (long long)g->num_elements);
        for (int s = 1; s <= shards; s++) {
            char name[64];
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s, shards);
            size_t n1 = 0, n2 = 0;
            char *x = file_bytes(a, name, &n1), *y = file_bytes(b, name, &n2);
            cr_expect(n1 == n2 && !memcmp(x, y, n1), "%s differs between the export and its re-export", name);
            free(x);
            free(y);
        }
        free(index);
    }
    /* --overwrite: a sharded export by a single file, then nothing of the shards is left */
    snprintf(a, sizeof a, "%s/a0", dir);
    cr_assert_eq(fg_hf_save(g, a, 1), FG_OK, "%s", fg_last_error());
    snprintf(b, sizeof b, "%s/model.safetensors.index.json", a);
    cr_expect_neq(access(b, F_OK), 0, "the old index is still there");
    snprintf(b, sizeof b, "%s/model-00001-of-00003.safetensors", a);
    struct stat sb;
    cr_expect_neq(stat(b, &sb), 0, "an old shard is still there");
    /* a user's own shard-named file or note is not replaced */
    const fg_hf_save_opts o = {.dtype = FG_ST_F32, .max_shard_bytes = 5000};
    snprintf(a, sizeof a, "%s/a1", dir);
    snprintf(b, sizeof b, "%s/notes.txt", a);
    write_text(b, "mine");
    cr_expect_eq(fg_hf_save_with(g, NULL, a, 1, &o), FG_ERR_ARG, "a folder with a user's file was replaced");
    cr_expect_eq(access(b, F_OK), 0, "the user's file is gone");
    cr_expect(strstr(fg_last_error(), "notes.txt"), "%s", fg_last_error());
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    fg_gpt_free(g);
}

/* Each key that asks for what flashgrad does not compute: the load fails with one line naming it. */
Test(hf_arch, unsupported_config_keys_are_refused_by_name) {
    char dir[256], out[512];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_hf_arch_bad_XXXXXX");
    struct {
        fg_gpt_arch arch;
        const char *from, *to, *expect;
    } bad[] = {
        {FG_ARCH_LLAMA, "\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act"},
        {FG_ARCH_LLAMA, "\"rope_type\": \"default\"", "\"rope_type\": \"linear\", \"factor\": 2.0",
         "rope_parameters.rope_type"},
        {FG_ARCH_LLAMA, "\"rope_type\": \"default\"", "\"rope_type\": \"default\", \"factor\": 2.0",
         "rope_parameters.factor"},
        {FG_ARCH_LLAMA, "\"model_type\"", "\"rope_scaling\": {\"rope_type\": \"yarn\"}, \"model_type\"",
         "rope_scaling"},
        {FG_ARCH_LLAMA, "\"model_type\"", "\"num_local_experts\": 8, \"model_type\"", "num_local_experts"},
        {FG_ARCH_LLAMA, "\"model_type\"", "\"num_experts_per_tok\": 2, \"model_type\"", "num_experts_per_tok"},
        {FG_ARCH_LLAMA, "\"model_type\"", "\"sliding_window\": 4, \"model_type\"", "sliding_window"},
        {FG_ARCH_LLAMA, "\"model_type\"", "\"rope_interleaved\": true, \"model_type\"", "rope_interleaved"},
        {FG_ARCH_LLAMA, "\"model_type\"", "\"pretraining_tp\": 2, \"model_type\"", "pretraining_tp"},
        {FG_ARCH_LLAMA, "\"model_type\"", "\"quantization_config\": {}, \"model_type\"", "quantization_config"},
        {FG_ARCH_LLAMA, "\"model_type\"",
         "\"layer_types\": [\"sliding_attention\", \"full_attention\"], \"model_type\"", "layer_types"},
        {FG_ARCH_LLAMA, "\"head_dim\": 8", "\"head_dim\": 16", "head_dim"},
        {FG_ARCH_LLAMA, "\"attention_bias\": false", "\"attention_bias\": true", "attention_bias"},
        {FG_ARCH_LLAMA, "\"mlp_bias\": false", "\"mlp_bias\": true", "mlp_bias"},
        {FG_ARCH_LLAMA, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", "num_key_value_heads"},
        {FG_ARCH_LLAMA, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 2.5", "num_key_value_heads"},
        {FG_ARCH_LLAMA, "\"rms_norm_eps\": ", "\"rms_norm_eps\": -", "rms_norm_eps"},
        {FG_ARCH_LLAMA, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": 0", "tie_word_embeddings"},
        {FG_ARCH_LLAMA, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true",
         "lm_head.weight differs from model.embed_tokens.weight"},
        {FG_ARCH_LLAMA, "\"model_type\": \"llama\"", "\"model_type\": \"mistral\"", "model_type"},
        {FG_ARCH_LLAMA, "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3", "missing tensor"},
        {FG_ARCH_NANOCHAT, "\"attention_bias\": false", "\"attention_bias\": true", "attention_bias"},
        {FG_ARCH_NANOCHAT, "\"hidden_act\": \"relu2\"", "\"hidden_act\": \"silu\"", "hidden_act"},
        {FG_ARCH_NANOCHAT, "\"final_logit_softcapping\": 15.0", "\"final_logit_softcapping\": \"15\"",
         "final_logit_softcapping"},
        {FG_ARCH_NANOCHAT, "\"final_logit_softcapping\": 15.0", "\"final_logit_softcapping\": null", "differs"},
    };
    for (int a = 0; a < 2; a++) {
        fg_gpt *g = arch_model(a ? FG_ARCH_NANOCHAT : FG_ARCH_LLAMA, 2, 9);
        snprintf(out, sizeof out, "%s/m%d", dir, a);
        cr_assert_eq(fg_hf_save(g, out, 0), FG_OK, "%s", fg_last_error());
        fg_gpt_free(g);
    }
    char cfg[600];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const int a = bad[i].arch == FG_ARCH_NANOCHAT;
        snprintf(out, sizeof out, "%s/m%d", dir, a);
        snprintf(cfg, sizeof cfg, "%s/config.json", out);
        char *orig = read_text(cfg);
        edit_config(out, bad[i].from, bad[i].to);
        fg_model_file *m = fg_model_file_load(out);
        if (strcmp(bad[i].expect, "differs")) {
            cr_expect_null(m, "case %zu (%s) loaded", i, bad[i].to);
            cr_expect(strstr(fg_last_error(), bad[i].expect), "case %zu: '%s'", i, fg_last_error());
            cr_expect(!strchr(fg_last_error(), '\n'), "case %zu: more than one line: '%s'", i, fg_last_error());
        } else {
            /* null is transformers' "no softcap": it loads, as another model */
            cr_expect(m && m->model->cfg.logit_softcap == 0, "case %zu: %s", i, m ? "softcap kept" : fg_last_error());
        }
        fg_model_file_free(m);
        write_text(cfg, orig);
        free(orig);
    }
    snprintf(out, sizeof out, "rm -rf '%s'", dir);
    if (system(out)) {}
}

/* A model whose options its transformers class (or llm.c's format) cannot express is not
 * exported: one line naming the option, nothing written. */
Test(hf_arch, exports_refuse_what_the_class_cannot_express) {
    char dir[256], out[512];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_hf_arch_exp_XXXXXX");
    snprintf(out, sizeof out, "%s/out", dir);
    struct {
        fg_gpt_arch arch;
        const char *option, *expect;
    } bad[] = {
        {FG_ARCH_LLAMA, "softcap", "logit_softcap"}, {FG_ARCH_LLAMA, "qk_norm", "qk_norm"},
        {FG_ARCH_LLAMA, "window", "window"},         {FG_ARCH_NANOCHAT, "window", "window"},
        {FG_ARCH_NANOCHAT, "bias", "biases"},        {FG_ARCH_GPT2, "rope", "pos rope"},
        {FG_ARCH_GPT2, "kv", "n_kv_head"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fg_gpt_config c = fg_gpt_default_config();
        fg_gpt_arch_preset(&c, bad[i].arch);
        c.n_layer = 2, c.n_head = 4, c.n_embd = 32, c.block_size = 16, c.vocab_size = 40;
        if (!strcmp(bad[i].option, "softcap")) c.logit_softcap = 30;
        if (!strcmp(bad[i].option, "qk_norm")) c.qk_norm = 1;
        if (!strcmp(bad[i].option, "window")) snprintf(c.window, sizeof c.window, "SSSL");
        if (!strcmp(bad[i].option, "bias")) c.no_bias = 0;
        if (!strcmp(bad[i].option, "rope")) c.pos = FG_POS_ROPE;
        if (!strcmp(bad[i].option, "kv")) c.n_kv_head = 2;
        fg_gpt *g = fg_gpt_create(&c, 1);
        cr_assert(g, "case %zu: %s", i, fg_last_error());
        cr_expect_eq(fg_hf_save(g, out, 0), FG_ERR_ARG, "case %zu exported", i);
        cr_expect(strstr(fg_last_error(), bad[i].expect), "case %zu: '%s'", i, fg_last_error());
        cr_expect_neq(access(out, F_OK), 0, "case %zu wrote %s", i, out);
        fg_gpt_free(g);
    }
    /* llm.c's files hold GPT-2 only */
    fg_gpt *g = arch_model(FG_ARCH_LLAMA, 2, 3);
    snprintf(out, sizeof out, "%s/out.bin", dir);
    cr_expect_eq(fg_llmc_save(g, out, 3, 0), FG_ERR_ARG);
    cr_expect(strstr(fg_last_error(), "llm.c"), "'%s'", fg_last_error());
    cr_expect_neq(access(out, F_OK), 0, "an llm.c file was written");
    /* weights copy only between models of one architecture */
    fg_gpt *n = arch_model(FG_ARCH_NANOCHAT, 2, 3);
    cr_expect_eq(fg_gpt_copy_weights(n, g), FG_ERR_ARG);
    cr_expect(strstr(fg_last_error(), "architectures differ"), "'%s'", fg_last_error());
    fg_gpt *g1 = arch_model(FG_ARCH_LLAMA, 1, 3);
    cr_expect_eq(fg_gpt_copy_weights(g1, g), FG_ERR_ARG);
    fg_gpt_free(g1);
    fg_gpt_free(n);
    fg_gpt_free(g);
    snprintf(out, sizeof out, "rm -rf '%s'", dir);
    if (system(out)) {}
}

/* `flashgrad eval --ckpt FOLDER --data-bin DIR` on a Llama and a NanoChat folder prints the losses
 * this test computes itself on the trainer's evaluation batches with the model in memory. */
Test(hf_arch, eval_takes_llama_and_nanochat_folders) {
    char dir[256], p[700], cmd[4096], log[8192];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_hf_arch_eval_XXXXXX");
    const int T = 16, B = 3, iters = 2; /* T: arch_model's block size, what eval takes */
    snprintf(p, sizeof p, "%s/data", dir);
    cr_assert_eq(mkdir(p, 0755), 0);
    uint64_t s = 99;
    for (int split = 0; split < 2; split++) {
        uint16_t ids[600];
        for (int i = 0; i < 600; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            ids[i] = (uint16_t)(s % 40);
        }
        snprintf(p, sizeof p, "%s/data/%s.bin", dir, split ? "val" : "train");
        FILE *f = fopen(p, "wb");
        cr_assert(f && fwrite(ids, sizeof ids, 1, f) == 1);
        fclose(f);
    }
    for (int a = 0; a < 2; a++) {
        fg_gpt *g = arch_model(a ? FG_ARCH_NANOCHAT : FG_ARCH_LLAMA, 2, 21 + (uint64_t)a);
        /* weights far from the init's scale, so that the loss depends on every one of them and on
         * the batches (a fresh model's is about ln V whatever it reads) */
        float *w = fg_data(g->params_flat);
        for (int64_t i = 0; i < g->num_elements; i++) w[i] *= 25;
        snprintf(p, sizeof p, "%s/m%d", dir, a);
        cr_assert_eq(fg_hf_save(g, p, 0), FG_OK, "%s", fg_last_error());
        snprintf(p, sizeof p, "%s/data", dir);
        fg_source *src = fg_source_tokens(p, NULL, 40, T);
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
        snprintf(cmd, sizeof cmd,
                 "%s eval --ckpt %s/m%d --data-bin %s/data --batch-size %d --eval-iters %d --seed 7 2>&1", fgt_bin(),
                 dir, a, dir, B, iters);
        int st = fgt_run_cmd(cmd, log, sizeof log);
        cr_assert_eq(st, 0, "eval exited %d:\n%s", st, log);
        const char *at = strstr(log, "step 0: train loss ");
        double tl = 0, vl = 0;
        cr_assert(at && sscanf(at, "step 0: train loss %lf, val loss %lf", &tl, &vl) == 2, "%s", log);
        cr_expect(fabs(tl - ref[0]) < 6e-5 && fabs(vl - ref[1]) < 6e-5, "%s: eval %.5f %.5f, reference %.5f %.5f",
                  a ? "nanochat" : "llama", tl, vl, ref[0], ref[1]);
        cr_expect(fabs(ref[0] - 3.6888794541139363) > 0.05, "%s: the loss %.5f is a fresh model's (ln 40)",
                  a ? "nanochat" : "llama", ref[0]);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* A config.json as transformers 4 wrote SmolLM2-135M's (its keys and values; 1 layer and 64 tokens
 * here): rope_theta beside the keys, rope_scaling null, rope_interleaved false, is_llama_config,
 * transformers.js_config, torch_dtype bfloat16 over float32 weights. It loads as the Llama it is. */
Test(hf_arch, a_smollm2_config_loads) {
    char dir[256], out[512], cfg[600];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_hf_arch_smol_XXXXXX");
    fg_gpt_config c = fg_gpt_default_config();
    fg_gpt_arch_preset(&c, FG_ARCH_LLAMA);
    c.n_layer = 1, c.n_head = 9, c.n_kv_head = 3, c.n_embd = 576, c.mlp_hidden = 1536, c.block_size = 64;
    c.vocab_size = 64, c.untie_head = 0, c.rope_theta = 100000, c.norm_eps = 1e-5;
    fg_gpt *g = fg_gpt_create(&c, 17);
    cr_assert(g, "%s", fg_last_error());
    snprintf(out, sizeof out, "%s/smol", dir);
    cr_assert_eq(fg_hf_save(g, out, 0), FG_OK, "%s", fg_last_error());
    snprintf(cfg, sizeof cfg, "%s/config.json", out);
    write_text(cfg,
               "{\n"
               "  \"architectures\": [\"LlamaForCausalLM\"],\n"
               "  \"attention_bias\": false,\n"
               "  \"attention_dropout\": 0.0,\n"
               "  \"bos_token_id\": 0,\n"
               "  \"eos_token_id\": 0,\n"
               "  \"hidden_act\": \"silu\",\n"
               "  \"hidden_size\": 576,\n"
               "  \"initializer_range\": 0.041666666666666664,\n"
               "  \"intermediate_size\": 1536,\n"
               "  \"is_llama_config\": true,\n"
               "  \"max_position_embeddings\": 64,\n"
               "  \"model_type\": \"llama\",\n"
               "  \"num_attention_heads\": 9,\n"
               "  \"num_hidden_layers\": 1,\n"
               "  \"num_key_value_heads\": 3,\n"
               "  \"pretraining_tp\": 1,\n"
               "  \"rms_norm_eps\": 1e-05,\n"
               "  \"rope_interleaved\": false,\n"
               "  \"rope_scaling\": null,\n"
               "  \"rope_theta\": 100000,\n"
               "  \"tie_word_embeddings\": true,\n"
               "  \"torch_dtype\": \"bfloat16\",\n"
               "  \"transformers.js_config\": {\"kv_cache_dtype\": {\"q4f16\": \"float16\", \"fp16\": \"float16\"}},\n"
               "  \"transformers_version\": \"4.42.3\",\n"
               "  \"use_cache\": true,\n"
               "  \"vocab_size\": 64\n"
               "}\n");
    fg_model_file *m = fg_model_file_load(out);
    cr_assert(m, "%s", fg_last_error());
    const fg_gpt_config *r = &m->model->cfg;
    cr_expect(r->arch == FG_ARCH_LLAMA && fg_gpt_kv_heads(r) == 3 && fg_gpt_hidden(r) == 1536 && !r->untie_head &&
                  fg_gpt_theta(r) == 100000 && fg_gpt_eps(r) == 1e-5 && r->block_size == 64 && r->no_bias,
              "arch %s kv %d hidden %d untie %d theta %g eps %g block %d no_bias %d", fg_gpt_arch_name(r->arch),
              fg_gpt_kv_heads(r), fg_gpt_hidden(r), r->untie_head, fg_gpt_theta(r), fg_gpt_eps(r), r->block_size,
              r->no_bias);
    cr_expect_eq(memcmp(fg_data(m->model->params_flat), fg_data(g->params_flat), (size_t)g->num_elements * 4), 0);
    fg_model_file_free(m);
    fg_gpt_free(g);
    snprintf(out, sizeof out, "rm -rf '%s'", dir);
    if (system(out)) {}
}
