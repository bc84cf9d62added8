/* hf_files.c — Hugging Face folders in and out (see model_files.h).
 *
 * Shapes: L blocks, H heads, C = n_embd, V vocabulary, T positions. flashgrad keeps the matmul
 * weights as PyTorch's nn.Linear does, (out, in); Hugging Face's GPT-2 keeps them as its Conv1D
 * does, (in, out): c_attn (C, 3C), attn.c_proj (C, C), c_fc (C, 4C), mlp.c_proj (4C, C).
 * Everything else has the same shape in both.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/bf16.h"
#include "tensor/fileio.h"
#include "tensor/json.h"
#include "tensor/safetensors.h"
#include "train/model_files.h"
#include "train/model_files_internal.h"
#include "train/run_folder.h"

#define HF_MAX_SHARDS 1024

/* The Conv1D weights: stored transposed in Hugging Face files. */
static int hf_transposed(fg_gpt_kind k) {
    return k == FG_GPT_ATTN_W || k == FG_GPT_APROJ_W || k == FG_GPT_FC_W || k == FG_GPT_MPROJ_W;
}

/* ---- Hugging Face config.json ---- */

/* The keys that matter, as text ("" = absent). Strings keep a leading '"'. */
enum {
    HK_MODEL_TYPE, HK_N_LAYER, HK_N_HEAD, HK_N_EMBD, HK_N_POS, HK_N_CTX, HK_VOCAB, HK_N_INNER, HK_ACT, HK_EPS,
    HK_TIE, HK_SCALE, HK_SCALE_LAYER, HK_REORDER, HK_ADD_CROSS, HK_COUNT
};
static const char *const hf_keys[HK_COUNT] = {
    "model_type", "n_layer", "n_head", "n_embd", "n_positions", "n_ctx", "vocab_size", "n_inner",
    "activation_function", "layer_norm_epsilon", "tie_word_embeddings", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"};

static fg_status hf_int(const char *file, const char *v, const char *key, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return fg_error(FG_ERR_FORMAT, "%s: \"%s\" is %s, not an integer in %d..%d", file, key, *v ? v : "missing",
                        lo, hi);
    *out = (int)x;
    return FG_OK;
}

/* The keys' values as text: a string with a leading '"', a number as written, true/false/null;
 * "" when absent, or when an object or array (what a key of these never is). */
static void hf_value_text(const fg_json *v, char *out, size_t cap) {
    out[0] = '\0';
    if (!v) return;
    switch (v->kind) {
    case FG_JSON_STRING: snprintf(out, cap, "\"%s", v->str); break;
    case FG_JSON_NUMBER: snprintf(out, cap, "%s", v->str); break;
    case FG_JSON_TRUE:
    case FG_JSON_FALSE:
    case FG_JSON_NULL: snprintf(out, cap, "%s", fg_json_kind_name(v->kind)); break;
    default: break;
    }
}

/* file's text as a strict JSON object (tensor/json.h); NULL + the reason, `what` naming the form. */
static fg_json_doc *hf_read_json(const char *file, size_t max, const char *what) {
    void *buf = NULL;
    size_t n = 0;
    if (fg_read_file(file, max, &buf, &n) != FG_OK) return NULL;
    fg_json_doc *doc = NULL;
    fg_status st = fg_json_parse(buf, n, file, &doc);
    free(buf);
    if (st == FG_OK && fg_json_root(doc)->kind != FG_JSON_OBJECT) {
        fg_json_free(doc);
        doc = NULL;
        fg_error(FG_ERR_FORMAT, "%s: the document is not an object", file);
    }
    if (!doc) {
        char why[1024]; /* fg_error must not read the buffer it writes */
        snprintf(why, sizeof why, "%s", fg_last_error());
        fg_error(FG_ERR_FORMAT, "%s: not %s (%s)", file, what, why);
    }
    return doc;
}

static fg_status hf_read_config(const char *file, fg_gpt_config *mc) {
    fg_json_doc *doc = hf_read_json(file, 16u << 20, "a JSON object of the form config.json has");
    if (!doc) return fg_last_status();
    char val[HK_COUNT][256];
    for (int k = 0; k < HK_COUNT; k++) hf_value_text(fg_json_get(fg_json_root(doc), hf_keys[k]), val[k], sizeof val[k]);
    fg_json_free(doc);
    fg_status st;
    if (strcmp(val[HK_MODEL_TYPE], "\"gpt2"))
        return fg_error(FG_ERR_FORMAT, "%s: model_type is %s, and flashgrad loads GPT-2 (\"gpt2\") models", file,
                        val[HK_MODEL_TYPE][0] ? val[HK_MODEL_TYPE] + (val[HK_MODEL_TYPE][0] == '"') : "missing");
    *mc = fg_gpt_default_config();
    /* each number within what flashgrad's GPT takes (gpt.h) */
    if ((st = hf_int(file, val[HK_N_LAYER], "n_layer", 1, FG_GPT_MAX_LAYER, &mc->n_layer)) ||
        (st = hf_int(file, val[HK_N_HEAD], "n_head", 1, FG_GPT_MAX_EMBD, &mc->n_head)) ||
        (st = hf_int(file, val[HK_N_EMBD], "n_embd", 1, FG_GPT_MAX_EMBD, &mc->n_embd)) ||
        (st = hf_int(file, val[HK_VOCAB], "vocab_size", 1, FG_GPT_MAX_VOCAB, &mc->vocab_size)))
        return st;
    /* n_positions (n_ctx in the oldest configs) */
    if ((st = hf_int(file, val[HK_N_POS][0] ? val[HK_N_POS] : val[HK_N_CTX], "n_positions", 1, FG_GPT_MAX_BLOCK,
                     &mc->block_size)))
        return st;
    /* what flashgrad computes: refuse a configuration that asks for something else */
    const char *act = val[HK_ACT];
    if (*act && strcmp(act, "\"gelu_new") && strcmp(act, "\"gelu_pytorch_tanh"))
        return fg_error(FG_ERR_FORMAT,
                        "%s: activation_function %s: flashgrad's GPT uses the tanh GELU (\"gelu_new\") only", file,
                        act + 1);
    char *eps_end = NULL;
    const double eps = *val[HK_EPS] ? strtod(val[HK_EPS], &eps_end) : 1e-5;
    if (*val[HK_EPS] && (eps_end == val[HK_EPS] || *eps_end || eps != 1e-5)) /* the whole value, a number */
        return fg_error(FG_ERR_FORMAT, "%s: layer_norm_epsilon %s: flashgrad's LayerNorm uses 1e-05", file,
                        val[HK_EPS]);
    if (*val[HK_N_INNER] && strcmp(val[HK_N_INNER], "null")) {
        int inner = 0;
        if (hf_int(file, val[HK_N_INNER], "n_inner", 1, INT32_MAX, &inner) || inner != 4 * mc->n_embd)
            return fg_error(FG_ERR_FORMAT, "%s: n_inner %s: flashgrad's MLP is 4 x n_embd = %d wide", file,
                            val[HK_N_INNER], 4 * mc->n_embd);
    }
    struct {
        int key;
        const char *need;
        const char *why;
    } flags[] = {{HK_TIE, "true", "the LM head is tied to wte in flashgrad"},
                 {HK_SCALE, "true", "flashgrad scales attention by 1/sqrt(head size)"},
                 {HK_SCALE_LAYER, "false", "flashgrad does not scale attention by the layer index"},
                 {HK_REORDER, "false", "flashgrad does not reorder or upcast attention"},
                 {HK_ADD_CROSS, "false", "flashgrad's GPT has no cross-attention"}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (*val[flags[i].key] && strcmp(val[flags[i].key], flags[i].need))
            return fg_error(FG_ERR_FORMAT, "%s: %s is %s: %s", file, hf_keys[flags[i].key], val[flags[i].key],
                            flags[i].why);
    if (mc->n_embd % mc->n_head)
        return fg_error(FG_ERR_FORMAT, "%s: n_embd %d is not a multiple of n_head %d", file, mc->n_embd, mc->n_head);
    mc->dropout = 0;
    mc->dtype = FG_F32;
    mc->device = FG_CPU;
    return fg_gpt_config_check(mc) == FG_OK ? FG_OK : fg_error(FG_ERR_FORMAT, "%s: %s", file, fg_last_error());
}

/* The shard file names of model.safetensors.index.json (its "weight_map" values, each once), into
 * names[0..*n). */
static fg_status hf_read_index(const char *file, char (*names)[256], int *n) {
    static const char what[] = "a safetensors index (a JSON object whose \"weight_map\" names each tensor's file in this folder)";
    *n = 0;
    fg_json_doc *doc = hf_read_json(file, 64u << 20, what);
    if (!doc) return fg_last_status();
    const fg_json *map = fg_json_get(fg_json_root(doc), "weight_map");
    int ok = map && map->kind == FG_JSON_OBJECT;
    for (uint32_t t = 0; ok && t < map->len; t++) {
        const fg_json *shard = &map->items[t];
        if (shard->kind != FG_JSON_STRING || shard->len == 0 || shard->len >= 256 || strlen(shard->str) != shard->len ||
            strchr(shard->str, '/')) {
            ok = 0;
            break;
        }
        int i = 0;
        while (i < *n && strcmp(names[i], shard->str)) i++;
        if (i == *n) {
            if (*n == HF_MAX_SHARDS) {
                ok = 0;
                break;
            }
            memcpy(names[(*n)++], shard->str, shard->len + 1);
        }
    }
    fg_json_free(doc);
    if (!ok || *n == 0) return fg_error(FG_ERR_FORMAT, "%s: not %s", file, what);
    return FG_OK;
}

/* float16 / bfloat16 bits to float (exact). */
static float f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return s ? -v : v;
    }
    if (e == 31)
        u = s | 0x7f800000u | (m << 13);
    else
        u = s | ((e + 112) << 23) | (m << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* An array's n elements as float32 into dst (any alignment in the file). */
static fg_status array_to_f32(const char *file, const fg_st_array *a, float *dst, int64_t n) {
    const unsigned char *s = a->data;
    switch (a->dtype) {
    case FG_ST_F32: memcpy(dst, s, (size_t)n * 4); break;
    case FG_ST_F16:
    case FG_ST_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = a->dtype == FG_ST_F16 ? f16_to_f32(h) : fg_bf16_to_f32(h);
        }
        break;
    default:
        return fg_error(FG_ERR_FORMAT, "%s: tensor '%s' is %s; flashgrad loads F32, F16 and BF16 weights", file,
                        a->name, fg_st_dtype_name(a->dtype));
    }
    return FG_OK;
}

typedef struct {
    fg_st_file *f[HF_MAX_SHARDS];
    char path[HF_MAX_SHARDS][4096];
    int n;
} hf_files;

static const fg_st_array *hf_find(const hf_files *h, const char *name, int *which) {
    for (int i = 0; i < h->n; i++) {
        const fg_st_array *a = fg_st_find(h->f[i], name);
        if (a) {
            *which = i;
            return a;
        }
    }
    return NULL;
}

/* The model from opened safetensors files (one, or the shards) and config.json's configuration. */
static fg_gpt *hf_build(hf_files *h, const fg_gpt_config *mc, const char *label) {
    /* GPT2LMHeadModel names start with "transformer."; GPT2Model's do not */
    int w = 0;
    const char *prefix = hf_find(h, "transformer.wte.weight", &w) ? "" : hf_find(h, "wte.weight", &w) ? "x" : NULL;
    if (!prefix) {
        fg_error(FG_ERR_FORMAT, "%s: no 'transformer.wte.weight' (nor 'wte.weight'): not a GPT-2 model's weights",
                 label);
        return NULL;
    }
    const size_t skip = *prefix ? strlen("transformer.") : 0; /* bytes of our names to drop */
    fg_gpt *g = fg_gpt_create_empty(mc);
    float *flat = g ? malloc((size_t)g->num_elements * sizeof *flat) : NULL;
    float *tmp = NULL;
    if (!flat) {
        if (g) fg_error(FG_ERR_OOM, "%s: out of memory", label);
        goto fail;
    }
    int64_t used = 0; /* arrays consumed: each must be used once */
    int64_t biggest = 0;
    for (int i = 0; i < g->n_params; i++) biggest = g->params[i].numel > biggest ? g->params[i].numel : biggest;
    tmp = malloc((size_t)biggest * sizeof *tmp);
    if (!tmp) {
        fg_error(FG_ERR_OOM, "%s: out of memory", label);
        goto fail;
    }
    for (int i = 0; i < g->n_params; i++) {
        const fg_gpt_param *p = &g->params[i];
        const char *name = p->name + skip;
        int fi = 0;
        const fg_st_array *a = hf_find(h, name, &fi);
        if (!a) {
            fg_error(FG_ERR_FORMAT, "%s: missing tensor '%s' (config.json describes %d blocks)", label, name,
                     mc->n_layer);
            goto fail;
        }
        int64_t want[2] = {p->shape[0], p->ndim == 2 ? p->shape[1] : 1};
        if (hf_transposed(p->kind)) {
            int64_t t = want[0];
            want[0] = want[1];
            want[1] = t;
        }
        if (a->ndim != p->ndim || a->shape[0] != want[0] || (p->ndim == 2 && a->shape[1] != want[1])) {
            char got[96] = "(";
            for (int d = 0; d < a->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)a->shape[d]);
            if (p->ndim == 2)
                fg_error(FG_ERR_FORMAT, "%s: tensor '%s' has shape %s), config.json implies (%lld, %lld)", label,
                         name, got, (long long)want[0], (long long)want[1]);
            else
                fg_error(FG_ERR_FORMAT, "%s: tensor '%s' has shape %s), config.json implies (%lld)", label, name, got,
                         (long long)want[0]);
            goto fail;
        }
        if (array_to_f32(h->path[fi], a, hf_transposed(p->kind) ? tmp : flat + p->offset, p->numel) != FG_OK)
            goto fail;
        if (hf_transposed(p->kind)) {
            /* HF (in, out) = want (rows r = in, cols c = out) -> ours (out, in) */
            const int64_t R = want[0], Cc = want[1];
            float *d = flat + p->offset;
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < Cc; c++) d[c * R + r] = tmp[r * Cc + c];
        }
        used++;
    }
    /* every other stored tensor must be one GPT-2 files carry without meaning: the causal masks,
     * or the tied head (equal to wte) */
    const fg_gpt_param *wte = &g->params[0];
    for (int fi = 0; fi < h->n; fi++)
        for (int k = 0; k < fg_st_count(h->f[fi]); k++) {
            const fg_st_array *a = fg_st_at(h->f[fi], k);
            char full[FG_GPT_NAME_MAX + 16];
            snprintf(full, sizeof full, "%s%s", skip ? "transformer." : "", a->name);
            if (fg_gpt_find(g, full)) continue;
            size_t L = strlen(a->name);
            if ((L > 10 && !strcmp(a->name + L - 10, ".attn.bias")) ||
                (L > 17 && !strcmp(a->name + L - 17, ".attn.masked_bias")))
                continue;
            if (!strcmp(a->name, "lm_head.weight")) {
                int same = a->ndim == 2 && a->shape[0] == wte->shape[0] && a->shape[1] == wte->shape[1];
                if (same && array_to_f32(h->path[fi], a, tmp, wte->numel) == FG_OK)
                    same = memcmp(tmp, flat + wte->offset, (size_t)wte->numel * sizeof *tmp) == 0;
                if (!same) {
                    fg_error(FG_ERR_FORMAT,
                             "%s: lm_head.weight differs from transformer.wte.weight; flashgrad's LM head is tied to "
                             "the embedding",
                             h->path[fi]);
                    goto fail;
                }
                continue;
            }
            fg_error(FG_ERR_FORMAT, "%s: unexpected tensor '%s' (not part of a GPT-2 model)", h->path[fi], a->name);
            goto fail;
        }
    for (int64_t i = 0; i < g->num_elements; i++)
        if (!isfinite(flat[i])) {
            fg_error(FG_ERR_FORMAT, "%s: a weight is not finite (%g, element %lld of the model)", label, (double)flat[i],
                     (long long)i);
            goto fail;
        }
    memcpy(fg_data(g->params_flat), flat, (size_t)g->num_elements * sizeof *flat);
    (void)used;
    free(flat);
    free(tmp);
    return g;
fail:
    free(flat);
    free(tmp);
    fg_gpt_free(g);
    return NULL;
}

/* A Hugging Face folder (dir), or one of its .safetensors files (file != NULL). */
static fg_model_file *hf_load_weights(const char *dir, const char *file) {
    char cfgpath[4096 + 16];
    char idx[4096 + 40];
    fg_gpt_config mc;
    snprintf(cfgpath, sizeof cfgpath, "%s/config.json", dir);
    if (hf_read_config(cfgpath, &mc) != FG_OK) return NULL;
    hf_files *h = calloc(1, sizeof *h);
    fg_model_file *m = calloc(1, sizeof *m);
    if (!h || !m) {
        free(h);
        free(m);
        fg_error(FG_ERR_OOM, "out of memory");
        return NULL;
    }
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    char(*names)[256] = NULL;
    char one[4096];
    if (snprintf(one, sizeof one, "%s/model.safetensors", dir) >= (int)sizeof one) {
        fg_error(FG_ERR_ARG, "%s: path too long", dir);
        goto fail;
    }
    if (file || fg__file_is_there(one)) {
        snprintf(h->path[0], sizeof h->path[0], "%s", file ? file : one);
        h->n = 1;
    } else if (fg__file_is_there(idx)) {
        int n = 0;
        names = malloc(HF_MAX_SHARDS * sizeof *names);
        if (!names) {
            fg_error(FG_ERR_OOM, "out of memory");
            goto fail;
        }
        if (hf_read_index(idx, names, &n) != FG_OK) goto fail;
        for (int i = 0; i < n; i++)
            if (snprintf(h->path[i], sizeof h->path[i], "%s/%s", dir, names[i]) >= (int)sizeof h->path[i]) {
                fg_error(FG_ERR_ARG, "%s: path too long", dir);
                goto fail;
            }
        h->n = n;
    } else {
        fg_error(FG_ERR_IO, "%s: config.json but neither model.safetensors nor model.safetensors.index.json", dir);
        goto fail;
    }
    for (int i = 0; i < h->n; i++)
        if (!(h->f[i] = fg_st_load(h->path[i]))) goto fail;
    /* a name in two shards is ambiguous */
    for (int i = 1; i < h->n; i++)
        for (int k = 0; k < fg_st_count(h->f[i]); k++)
            for (int e = 0; e < i; e++)
                if (fg_st_find(h->f[e], fg_st_at(h->f[i], k)->name)) {
                    fg_error(FG_ERR_FORMAT, "%s: tensor '%s' is also in %s", h->path[i], fg_st_at(h->f[i], k)->name,
                             h->path[e]);
                    goto fail;
                }
    m->model = hf_build(h, &mc, file ? file : dir);
    if (!m->model) goto fail;
    m->format = FG_MODEL_HF;
    for (int i = 0; i < h->n; i++) fg_st_close(h->f[i]);
    free(h);
    free(names);
    return m;
fail:
    for (int i = 0; i < h->n; i++) fg_st_close(h->f[i]);
    free(h);
    free(names);
    free(m);
    return NULL;
}

/* A Hugging Face folder: the model, and the BPE tokenizer of the tokenizer files beside it
 * (tokenizer.json, or vocab.json + merges.txt) when flashgrad reads them; when it cannot, the model
 * still loads and tokenizer_note says why. */
fg_model_file *fg__hf_load(const char *dir, const char *file) {
    fg_model_file *m = hf_load_weights(dir, file);
    if (!m) return NULL;
    char a[4200], b[4200];
    snprintf(a, sizeof a, "%s/tokenizer.json", dir);
    snprintf(b, sizeof b, "%s/vocab.json", dir);
    if (access(a, F_OK) != 0 && access(b, F_OK) != 0) return m;
    fg_tokenizer *t = fg_tokenizer_bpe_load(dir, NULL);
    if (t && fg_tokenizer_vocab_size(t) > m->model->cfg.vocab_size) {
        fg_error(FG_ERR_FORMAT, "its %d tokens are more than the model's %d ids", fg_tokenizer_vocab_size(t), m->model->cfg.vocab_size);
        fg_tokenizer_free(t);
        t = NULL;
    }
    if (!t) {
        snprintf(m->tokenizer_note, sizeof m->tokenizer_note, "the tokenizer files in '%.400s' are not used: %.500s", dir, fg_last_error());
        fg_clear_error();
        return m;
    }
    m->tokenizer = m->own_tokenizer = t;
    return m;
}

/* config.json for g: the keys GPT2Config reads, with flashgrad's fixed choices spelled out. */
static char *hf_config_json(const fg_gpt *g) {
    const fg_gpt_config *c = &g->cfg;
    char *s = malloc(2048);
    if (!s) return NULL;
    int bos = c->vocab_size > 50256 ? 50256 : c->vocab_size - 1;
    snprintf(s, 2048,
             "{\n"
             "  \"activation_function\": \"gelu_new\",\n"
             "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
             "  \"attn_pdrop\": %.17g,\n"
             "  \"bos_token_id\": %d,\n"
             "  \"embd_pdrop\": %.17g,\n"
             "  \"eos_token_id\": %d,\n"
             "  \"initializer_range\": 0.02,\n"
             "  \"layer_norm_epsilon\": 1e-05,\n"
             "  \"model_type\": \"gpt2\",\n"
             "  \"n_ctx\": %d,\n"
             "  \"n_embd\": %d,\n"
             "  \"n_head\": %d,\n"
             "  \"n_inner\": null,\n"
             "  \"n_layer\": %d,\n"
             "  \"n_positions\": %d,\n"
             "  \"reorder_and_upcast_attn\": false,\n"
             "  \"resid_pdrop\": %.17g,\n"
             "  \"scale_attn_by_inverse_layer_idx\": false,\n"
             "  \"scale_attn_weights\": true,\n"
             "  \"tie_word_embeddings\": true,\n"
             "  \"torch_dtype\": \"float32\",\n"
             "  \"use_cache\": true,\n"
             "  \"vocab_size\": %d\n"
             "}\n",
             c->dropout, bos, c->dropout, bos, c->block_size, c->n_embd, c->n_head, c->n_layer, c->block_size,
             c->dropout, c->vocab_size);
    return s;
}

fg_status fg_gpt2_save_hf(const fg_gpt *g, const char *out_dir, int overwrite) { return fg_gpt2_save_hf_with(g, NULL, out_dir, overwrite); }

/* A BPE tokenizer's files into the folder dir, under the names Hugging Face (and tiktoken) give them. */
static fg_status write_tokenizer_files(const fg_tokenizer *tok, const char *dir) {
    const fg_bpe_files *f = fg_tokenizer_bpe_files(tok);
    if (!f) return FG_OK; /* a character or byte tokenizer: Hugging Face has no file for it */
    char name[2][64];
    if (f->kind == FG_BPE_JSON) snprintf(name[0], sizeof name[0], "tokenizer.json");
    else if (f->kind == FG_BPE_TIKTOKEN) snprintf(name[0], sizeof name[0], "%s.tiktoken", f->encoding);
    else snprintf(name[0], sizeof name[0], "vocab.json"), snprintf(name[1], sizeof name[1], "merges.txt");
    for (int i = 0; i < (f->kind == FG_BPE_VOCAB_MERGES ? 2 : 1); i++) {
        char p[4096 + 128];
        snprintf(p, sizeof p, "%s/%s", dir, name[i]);
        const void *parts[1] = {f->data[i]};
        FG_TRY(fg_write_file_atomic(p, parts, &f->n[i], 1));
    }
    return FG_OK;
}

fg_status fg_gpt2_save_hf_with(const fg_gpt *g, const fg_tokenizer *tok, const char *out_dir, int overwrite) {
    if (!g || !out_dir || !*out_dir) return fg_error(FG_ERR_ARG, "export: no model or no output folder");
    char out[4096];
    if (snprintf(out, sizeof out, "%s", out_dir) >= (int)sizeof out - 64) return fg_error(FG_ERR_ARG, "path too long");
    for (size_t L = strlen(out); L > 1 && out[L - 1] == '/'; L--) out[L - 1] = '\0';
    fg_status st = fg__export_check_out(out, overwrite);
    if (st != FG_OK) return st;
    fg__export_remove_leftovers(out, 1);
    float *flat = fg__model_host_f32(g);
    if (!flat) return fg_last_status();
    /* the Conv1D weights transposed into one buffer, the rest borrowed from flat */
    int64_t nt = 0;
    for (int i = 0; i < g->n_params; i++)
        if (hf_transposed(g->params[i].kind)) nt += g->params[i].numel;
    float *tr = malloc((size_t)(nt ? nt : 1) * sizeof *tr);
    fg_st_writer *w = tr ? fg_st_writer_new() : NULL;
    char *cfg = w ? hf_config_json(g) : NULL;
    char tmp[4096 + 64] = "";
    int tmp_fd = -1;
    if (!cfg) {
        st = fg_error(FG_ERR_OOM, "export: out of memory");
        goto done;
    }
    int64_t at = 0;
    for (int i = 0; i < g->n_params && st == FG_OK; i++) {
        const fg_gpt_param *p = &g->params[i];
        const float *src = flat + p->offset;
        if (hf_transposed(p->kind)) {
            const int64_t R = p->shape[0], Cc = p->shape[1]; /* ours (out, in) -> (in, out) */
            float *d = tr + at;
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < Cc; c++) d[c * R + r] = src[r * Cc + c];
            int64_t shape[2] = {Cc, R};
            st = fg_st_writer_add(w, p->name, FG_ST_F32, 2, shape, d);
            at += p->numel;
        } else {
            st = fg_st_writer_add(w, p->name, FG_ST_F32, p->ndim, p->shape, src);
        }
    }
    if (st == FG_OK) st = fg_st_writer_set_metadata(w, "format", "pt");
    /* what tells a later --overwrite that flashgrad wrote this folder (transformers reads "format" only) */
    if (st == FG_OK) st = fg_st_writer_set_metadata(w, "fg_export", "hf");
    if (st != FG_OK) goto done;
    /* build the folder beside OUT, then put it in place in one rename (or one exchange) */
    snprintf(tmp, sizeof tmp, "%s" FG_TMP_MARK "XXXXXX", out);
    if (!mkdtemp(tmp)) {
        st = fg_error(FG_ERR_IO, "export: cannot create a folder beside %s: %s", out, strerror(errno));
        tmp[0] = '\0';
        goto done;
    }
    /* held while the folder is built, so that a later export tells it from a dead one's leftover */
    tmp_fd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /* mkdtemp makes 0700; the folder gets what mkdir(2) would give (0777 less the umask), or the mode
     * of the export folder it replaces, as a file written by rename keeps the replaced file's */
    struct stat old_sb;
    mode_t mode = lstat(out, &old_sb) == 0 && S_ISDIR(old_sb.st_mode) ? old_sb.st_mode & 07777 : 0777 & ~fg_umask();
    if (tmp_fd < 0 || fg_tmp_hold(tmp_fd) != 0 || fchmod(tmp_fd, mode) != 0) {
        st = fg_error(FG_ERR_IO, "export: cannot set up the folder '%s': %s", tmp, strerror(errno));
        goto done;
    }
    char p1[4096 + 128];
    snprintf(p1, sizeof p1, "%s/model.safetensors", tmp);
    st = fg_st_writer_write(w, p1);
    if (st == FG_OK) {
        snprintf(p1, sizeof p1, "%s/config.json", tmp);
        const void *parts[1] = {cfg};
        size_t sizes[1] = {strlen(cfg)};
        st = fg_write_file_atomic(p1, parts, sizes, 1);
    }
    if (st == FG_OK && tok) st = write_tokenizer_files(tok, tmp);
    if (st != FG_OK) goto done;
    if (rename(tmp, out) == 0) {
        tmp[0] = '\0';
    } else if ((errno == ENOTEMPTY || errno == EEXIST) && overwrite) {
        /* swap both folders at once: OUT is never missing; the old one is then under tmp */
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_EXCHANGE) != 0) {
            st = fg_error(FG_ERR_IO, "export: cannot put %s in place: %s", out, strerror(errno));
            goto done;
        }
    } else {
        st = fg_error(FG_ERR_IO, "export: cannot put %s in place: %s", out, strerror(errno));
        goto done;
    }
    fg__fsync_dir_of(out);
done:
    if (tmp[0]) fg_remove_flat_dir(tmp);
    if (tmp_fd >= 0) close(tmp_fd);
    free(cfg);
    fg_st_writer_free(w);
    free(tr);
    free(flat);
    return st;
}
