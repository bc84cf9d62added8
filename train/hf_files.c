/* hf_files.c — Hugging Face folders in and out (see model_files.h).
 *
 * One row of hf_archs per transformers class: its model_type, how its config.json maps onto
 * fg_gpt_config (and back), and how its tensors are named and laid out. A new architecture is a new
 * row (and, when its config keys differ, a reader and a writer for them), not a new branch in the
 * loader or the writer, which only walk the model's parameter table (train/gpt.h) and look each
 * name up in the files.
 *
 * Shapes: L blocks, H heads, C = n_embd, V vocabulary, T positions. flashgrad keeps the matmul
 * weights as PyTorch's nn.Linear does, (out, in); Hugging Face's GPT-2 keeps them as its Conv1D
 * does, (in, out): c_attn (C, 3C), attn.c_proj (C, C), c_fc (C, 4C), mlp.c_proj (4C, C). Llama
 * and NanoChat use nn.Linear, and flashgrad's llama and nanochat names are theirs (gpt.h).
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
#include "tensor/f16.h"
#include "tensor/fileio.h"
#include "tensor/json.h"
#include "tensor/safetensors.h"
#include "train/model_files.h"
#include "train/model_files_internal.h"
#include "train/run_folder.h"

#define HF_MAX_SHARDS 1024

typedef struct hf_arch hf_arch;
struct hf_arch {
    const char *model_type; /* config.json's "model_type" */
    const char *class_name; /* its "architectures" entry: the transformers class */
    fg_gpt_arch arch;       /* the flashgrad family whose parameter names the files use */
    /* config.json's object into *mc; FG_ERR_FORMAT naming the key flashgrad does not compute */
    fg_status (*read_config)(const hf_arch *a, const char *file, const fg_json *root, fg_gpt_config *mc);
    /* the first option of c the class cannot express, written into why (NULL: it can) */
    const char *(*cannot)(const hf_arch *a, const fg_gpt_config *c, char *why, size_t cap);
    /* config.json for g (caller frees); NULL when out of memory */
    char *(*config_json)(const hf_arch *a, const fg_gpt *g, const char *dtype);
    /* 1 for the kinds stored (in, out), Conv1D's layout; NULL: none */
    int (*transposed)(fg_gpt_kind k);
    const char *short_prefix;   /* a prefix of every name that files may leave out, or NULL */
    const char *const *skipped; /* name suffixes of stored buffers that carry no parameter */
    /* the rotary families' settings (rope_read_config, rope_cannot, rope_config_json) */
    const char *hidden_act; /* the only activation the class computes as flashgrad does */
    fg_gpt_pos pos;         /* the rotary embedding's direction (nanochat turns the other way) */
    fg_gpt_norm norm;
    int emb_norm, qk_norm;
    fg_gpt_mlp mlp;
    const char *mlp_bias_key; /* the key of the MLP's biases, NULL when the class has none */
    const char *softcap_key;  /* the final logit softcap's key, or NULL */
    double softcap_default;   /* its value when the key is absent */
};

/* The Conv1D weights: stored transposed in Hugging Face GPT-2 files. */
static int gpt2_transposed(fg_gpt_kind k) {
    return k == FG_GPT_ATTN_W || k == FG_GPT_APROJ_W || k == FG_GPT_FC_W || k == FG_GPT_MPROJ_W;
}

/* ---- GPT2LMHeadModel's config.json ---- */

/* The keys that matter, as text ("" = absent). Strings keep a leading '"'. */
enum {
    HK_MODEL_TYPE,
    HK_N_LAYER,
    HK_N_HEAD,
    HK_N_EMBD,
    HK_N_POS,
    HK_N_CTX,
    HK_VOCAB,
    HK_N_INNER,
    HK_ACT,
    HK_EPS,
    HK_TIE,
    HK_SCALE,
    HK_SCALE_LAYER,
    HK_REORDER,
    HK_ADD_CROSS,
    HK_COUNT
};
static const char *const hf_keys[HK_COUNT] = {"model_type",
                                              "n_layer",
                                              "n_head",
                                              "n_embd",
                                              "n_positions",
                                              "n_ctx",
                                              "vocab_size",
                                              "n_inner",
                                              "activation_function",
                                              "layer_norm_epsilon",
                                              "tie_word_embeddings",
                                              "scale_attn_weights",
                                              "scale_attn_by_inverse_layer_idx",
                                              "reorder_and_upcast_attn",
                                              "add_cross_attention"};

static fg_status hf_int(const char *file, const char *v, const char *key, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return fg_error(FG_ERR_FORMAT, "%s: \"%s\" is %s, not an integer in %d..%d", file, key, *v ? v : "missing", lo,
                        hi);
    *out = (int)x;
    return FG_OK;
}

/* The keys' values as text: a string with a leading '"', a number as written, true/false/null;
 * "" when absent, or when an object or array (what a key of these never is). */
static void hf_value_text(const fg_json *v, char *out, size_t cap) {
    out[0] = '\0';
    if (!v) return;
    switch (v->kind) {
    case FG_JSON_STRING:
        snprintf(out, cap, "\"%s", v->str);
        break;
    case FG_JSON_NUMBER:
        snprintf(out, cap, "%s", v->str);
        break;
    case FG_JSON_TRUE:
    case FG_JSON_FALSE:
    case FG_JSON_NULL:
        snprintf(out, cap, "%s", fg_json_kind_name(v->kind));
        break;
    default:
        break;
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

static fg_status gpt2_read_config(const hf_arch *a, const char *file, const fg_json *root, fg_gpt_config *mc) {
    (void)a;
    char val[HK_COUNT][256];
    for (int k = 0; k < HK_COUNT; k++) hf_value_text(fg_json_get(root, hf_keys[k]), val[k], sizeof val[k]);
    fg_status st;
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

/* What GPT2LMHeadModel cannot express of c (see hf_arch.cannot): what llm.c's files cannot. */
static const char *gpt2_cannot(const hf_arch *a, const fg_gpt_config *c, char *why, size_t cap) {
    (void)a;
    return fg__gpt2_cannot(c, why, cap);
}

/* config.json for g: the keys GPT2Config reads, with flashgrad's fixed choices spelled out. */
static char *gpt2_config_json(const hf_arch *a, const fg_gpt *g, const char *dtype) {
    (void)a;
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
             "  \"torch_dtype\": \"%s\",\n"
             "  \"use_cache\": true,\n"
             "  \"vocab_size\": %d\n"
             "}\n",
             c->dropout, bos, c->dropout, bos, c->block_size, c->n_embd, c->n_head, c->n_layer, c->block_size,
             c->dropout, dtype, c->vocab_size);
    return s;
}

/* ---- the rotary families: LlamaForCausalLM and NanoChatForCausalLM ---- */

/* A key's value for a message: the number or string as written, true/false/null, "an object" ... */
static const char *hf_shown(const fg_json *v, char *buf, size_t cap) {
    if (!v) return "missing";
    if (v->kind == FG_JSON_STRING)
        snprintf(buf, cap, "\"%.200s\"", v->str);
    else if (v->kind == FG_JSON_NUMBER)
        snprintf(buf, cap, "%.200s", v->str);
    else
        snprintf(buf, cap, "%s", fg_json_kind_name(v->kind));
    return buf;
}

/* An integer key in lo..hi; absent or null takes dflt when dflt >= lo, else is refused. */
static fg_status rope_int(const char *file, const hf_arch *a, const fg_json *root, const char *key, int lo, int hi,
                          int dflt, int *out) {
    const fg_json *v = fg_json_get(root, key);
    if ((!v || v->kind == FG_JSON_NULL) && dflt >= lo) {
        *out = dflt;
        return FG_OK;
    }
    int64_t x = 0;
    char b[256];
    if (!fg_json_int64(v, &x) || x < lo || x > hi)
        return fg_error(FG_ERR_FORMAT, "%s: \"%s\" is %s, not an integer in %d..%d (model_type \"%s\")", file, key,
                        hf_shown(v, b, sizeof b), lo, hi, a->model_type);
    *out = (int)x;
    return FG_OK;
}

/* A boolean key; absent or null is dflt. */
static fg_status rope_bool(const char *file, const fg_json *root, const char *key, int dflt, int *out) {
    const fg_json *v = fg_json_get(root, key);
    char b[256];
    if (!v || v->kind == FG_JSON_NULL)
        *out = dflt;
    else if (v->kind == FG_JSON_TRUE || v->kind == FG_JSON_FALSE)
        *out = v->kind == FG_JSON_TRUE;
    else
        return fg_error(FG_ERR_FORMAT, "%s: \"%s\" is %s, not true or false", file, key, hf_shown(v, b, sizeof b));
    return FG_OK;
}

/* A positive finite number below hi; absent or null is dflt. */
static fg_status rope_double(const char *file, const fg_json *root, const char *key, double hi, double dflt,
                             double *out) {
    const fg_json *v = fg_json_get(root, key);
    char b[256];
    if (!v || v->kind == FG_JSON_NULL) {
        *out = dflt;
        return FG_OK;
    }
    if (!fg_json_double(v, out) || !(*out > 0) || !(*out < hi))
        return fg_error(FG_ERR_FORMAT, "%s: \"%s\" is %s, not a number in (0, %g)", file, key, hf_shown(v, b, sizeof b),
                        hi);
    return FG_OK;
}

/* Keys that describe what flashgrad does not compute, with the value that means "not used" (absent
 * and null always do): mixtures of experts, sliding windows, other rotary layouts, quantized
 * weights, tensor-parallel pretraining's split products. */
static const struct {
    const char *key;
    const char *plain; /* the JSON text that is harmless, or NULL: any value is refused */
    const char *what;
} rope_refused[] = {
    {"rope_scaling", NULL, "flashgrad computes plain RoPE (rope_type \"default\") only"},
    {"partial_rotary_factor", "1", "flashgrad rotates the whole head"},
    {"rope_interleaved", "false", "flashgrad rotates in Hugging Face's rotate_half layout"},
    {"num_local_experts", "0", "flashgrad has no mixture of experts"},
    {"num_experts", "0", "flashgrad has no mixture of experts"},
    {"n_routed_experts", "0", "flashgrad has no mixture of experts"},
    {"num_experts_per_tok", "0", "flashgrad has no mixture of experts"},
    {"moe_intermediate_size", "0", "flashgrad has no mixture of experts"},
    {"n_shared_experts", "0", "flashgrad has no mixture of experts"},
    {"sliding_window", NULL, "Hugging Face's windows are not flashgrad's (every layer attends to the whole context)"},
    {"use_sliding_window", "false", "every layer attends to the whole context"},
    {"pretraining_tp", "1", "flashgrad computes the plain products (pretraining_tp 1)"},
    {"quantization_config", NULL, "flashgrad reads unquantized F32, F16 and BF16 weights"},
    {"attn_logit_softcapping", NULL, "flashgrad caps the final logits only"},
};

/* The key's value as JSON text, for the comparison with `plain` (numbers as written). */
static int rope_is_plain(const fg_json *v, const char *plain) {
    if (!v || v->kind == FG_JSON_NULL) return 1;
    if (!plain) return 0;
    if (v->kind == FG_JSON_NUMBER) {
        double x, p = strtod(plain, NULL);
        return fg_json_double(v, &x) && x == p;
    }
    if (v->kind == FG_JSON_TRUE || v->kind == FG_JSON_FALSE) return !strcmp(fg_json_kind_name(v->kind), plain);
    return 0;
}

/* config.json of a LlamaForCausalLM or NanoChatForCausalLM into *mc (the row's preset, then the
 * file's sizes and settings). Anything the row's class computes that flashgrad does not is refused
 * with the key's name. */
static fg_status rope_read_config(const hf_arch *a, const char *file, const fg_json *root, fg_gpt_config *mc) {
    fg_status st;
    char b[256];
    *mc = fg_gpt_default_config();
    fg_gpt_arch_preset(mc, a->arch);
    int heads = 0, kv = 0;
    if ((st = rope_int(file, a, root, "num_hidden_layers", 1, FG_GPT_MAX_LAYER, 0, &mc->n_layer)) ||
        (st = rope_int(file, a, root, "num_attention_heads", 1, FG_GPT_MAX_EMBD, 0, &heads)) ||
        (st = rope_int(file, a, root, "hidden_size", 1, FG_GPT_MAX_EMBD, 0, &mc->n_embd)) ||
        (st = rope_int(file, a, root, "vocab_size", 1, FG_GPT_MAX_VOCAB, 0, &mc->vocab_size)) ||
        (st = rope_int(file, a, root, "intermediate_size", 1, FG_GPT_MAX_HIDDEN, 0, &mc->mlp_hidden)) ||
        (st = rope_int(file, a, root, "max_position_embeddings", 1, FG_GPT_MAX_BLOCK, 2048, &mc->block_size)) ||
        (st = rope_int(file, a, root, "num_key_value_heads", 1, FG_GPT_MAX_EMBD, heads, &kv)))
        return st;
    mc->n_head = heads;
    if (mc->n_embd % heads)
        return fg_error(FG_ERR_FORMAT, "%s: hidden_size %d is not a multiple of num_attention_heads %d", file,
                        mc->n_embd, heads);
    if (heads % kv)
        return fg_error(FG_ERR_FORMAT, "%s: num_key_value_heads %d does not divide num_attention_heads %d", file, kv,
                        heads);
    mc->n_kv_head = kv;
    int hd = 0;
    if ((st = rope_int(file, a, root, "head_dim", 1, FG_GPT_MAX_EMBD, mc->n_embd / heads, &hd))) return st;
    if (hd != mc->n_embd / heads)
        return fg_error(FG_ERR_FORMAT,
                        "%s: head_dim %d: flashgrad's heads are hidden_size / num_attention_heads = %d wide", file, hd,
                        mc->n_embd / heads);
    const fg_json *act = fg_json_get(root, "hidden_act");
    if (act && act->kind != FG_JSON_NULL && !fg_json_is(act, a->hidden_act))
        return fg_error(FG_ERR_FORMAT, "%s: hidden_act %s: flashgrad's %s MLP uses \"%s\"", file,
                        hf_shown(act, b, sizeof b), a->class_name, a->hidden_act);
    if ((st = rope_double(file, root, "rms_norm_eps", 1, 1e-6, &mc->norm_eps))) return st;
    /* the rotary embedding: rope_parameters (transformers 5), else rope_theta beside it (4.x) */
    const fg_json *rp = fg_json_get(root, "rope_parameters");
    if (rp && rp->kind == FG_JSON_OBJECT) {
        for (uint32_t i = 0; i < rp->len; i++) {
            const fg_json *e = &rp->items[i];
            if (!strcmp(e->key, "rope_theta")) continue;
            if (!strcmp(e->key, "rope_type") && fg_json_is(e, "default")) continue;
            if (!strcmp(e->key, "partial_rotary_factor") && rope_is_plain(e, "1")) continue;
            return fg_error(FG_ERR_FORMAT,
                            "%s: rope_parameters.%s is %s: flashgrad computes plain RoPE (rope_type "
                            "\"default\") only",
                            file, e->key, hf_shown(e, b, sizeof b));
        }
        if ((st = rope_double(file, rp, "rope_theta", 1e300, 10000.0, &mc->rope_theta))) return st;
    } else if (rp && rp->kind != FG_JSON_NULL) {
        return fg_error(FG_ERR_FORMAT, "%s: rope_parameters is %s, not an object", file, hf_shown(rp, b, sizeof b));
    } else if ((st = rope_double(file, root, "rope_theta", 1e300, 10000.0, &mc->rope_theta))) {
        return st;
    }
    for (size_t i = 0; i < sizeof rope_refused / sizeof rope_refused[0]; i++) {
        const fg_json *v = fg_json_get(root, rope_refused[i].key);
        if (!rope_is_plain(v, rope_refused[i].plain))
            return fg_error(FG_ERR_FORMAT, "%s: %s is %s: %s", file, rope_refused[i].key, hf_shown(v, b, sizeof b),
                            rope_refused[i].what);
    }
    const fg_json *lt = fg_json_get(root, "layer_types"); /* every layer "full_attention" is plain */
    if (lt && lt->kind != FG_JSON_NULL) {
        int ok = lt->kind == FG_JSON_ARRAY;
        for (uint32_t i = 0; ok && i < lt->len; i++) ok = fg_json_is(&lt->items[i], "full_attention");
        if (!ok)
            return fg_error(FG_ERR_FORMAT,
                            "%s: layer_types: flashgrad reads models whose layers are all "
                            "\"full_attention\"",
                            file);
    }
    int tie = 0, abias = 0, mbias = 0;
    if ((st = rope_bool(file, root, "tie_word_embeddings", 0, &tie)) ||
        (st = rope_bool(file, root, "attention_bias", 0, &abias)))
        return st;
    if (a->mlp_bias_key) {
        if ((st = rope_bool(file, root, a->mlp_bias_key, 0, &mbias))) return st;
        if (abias != mbias)
            return fg_error(FG_ERR_FORMAT, "%s: attention_bias %s with %s %s: flashgrad's biases are all on or all off",
                            file, abias ? "true" : "false", a->mlp_bias_key, mbias ? "true" : "false");
    } else if (abias) {
        return fg_error(FG_ERR_FORMAT,
                        "%s: attention_bias is true: %s has no biases in its MLP, and flashgrad's "
                        "biases are all on or all off",
                        file, a->class_name);
    }
    mc->no_bias = !abias;
    mc->untie_head = !tie;
    mc->logit_softcap = 0;
    if (a->softcap_key) {
        const fg_json *v = fg_json_get(root, a->softcap_key);
        if (!v)
            mc->logit_softcap = a->softcap_default;
        else if (v->kind != FG_JSON_NULL &&
                 (!fg_json_double(v, &mc->logit_softcap) || !(mc->logit_softcap > 0) || !(mc->logit_softcap < 1e30)))
            return fg_error(FG_ERR_FORMAT, "%s: %s is %s, not a positive number or null", file, a->softcap_key,
                            hf_shown(v, b, sizeof b));
    }
    mc->dropout = 0;
    mc->dtype = FG_F32;
    mc->device = FG_CPU;
    return fg_gpt_config_check(mc) == FG_OK ? FG_OK : fg_error(FG_ERR_FORMAT, "%s: %s", file, fg_last_error());
}

/* A double as JSON: the shortest of %.15g, %.16g, %.17g that reads back as the same value. */
static void json_double(char *out, size_t cap, double x) {
    for (int p = 15; p <= 17; p++) {
        snprintf(out, cap, "%.*g", p, x);
        if (strtod(out, NULL) == x) break;
    }
    if (!strpbrk(out, ".eEn")) snprintf(out + strlen(out), cap - strlen(out), ".0"); /* a float, as Python writes it */
}

/* What the row's class cannot express of c: the first option it lacks, as "name value", or NULL. */
static const char *rope_cannot(const hf_arch *a, const fg_gpt_config *c, char *why, size_t cap) {
    int windows = 0;
    for (int l = 0; l < c->n_layer; l++) windows |= fg_gpt_layer_window(c, l) != 0;
    if (c->pos != a->pos)
        snprintf(why, cap, "pos %s", fg_gpt_pos_name(c->pos));
    else if (c->norm != a->norm)
        snprintf(why, cap, "norm %s", fg_gpt_norm_name(c->norm));
    else if (c->emb_norm != a->emb_norm)
        snprintf(why, cap, "emb_norm %d", c->emb_norm);
    else if (c->qk_norm != a->qk_norm)
        snprintf(why, cap, "qk_norm %d", c->qk_norm);
    else if (c->mlp != a->mlp)
        snprintf(why, cap, "mlp %s", fg_gpt_mlp_name(c->mlp));
    else if (!a->mlp_bias_key && !c->no_bias)
        snprintf(why, cap, "biases (no_bias 0)");
    else if (!a->softcap_key && c->logit_softcap > 0)
        snprintf(why, cap, "logit_softcap %g", c->logit_softcap);
    else if (windows)
        snprintf(why, cap, "window %s", c->window);
    else
        return NULL;
    return why;
}

/* config.json for a rotary-family model g: the keys its transformers config reads. */
static char *rope_config_json(const hf_arch *a, const fg_gpt *g, const char *dtype) {
    const fg_gpt_config *c = &g->cfg;
    const size_t cap = 4096;
    char *s = malloc(cap);
    if (!s) return NULL;
    char eps[64], theta[64], cap_s[64] = "null";
    json_double(eps, sizeof eps, fg_gpt_eps(c));
    json_double(theta, sizeof theta, fg_gpt_theta(c));
    if (c->logit_softcap > 0) json_double(cap_s, sizeof cap_s, c->logit_softcap);
    const char *bias = c->no_bias ? "false" : "true";
    int n = snprintf(s, cap,
                     "{\n"
                     "  \"architectures\": [\"%s\"],\n"
                     "  \"attention_bias\": %s,\n"
                     "  \"attention_dropout\": 0.0,\n"
                     "  \"bos_token_id\": null,\n"
                     "  \"dtype\": \"%s\",\n"
                     "  \"eos_token_id\": null,\n",
                     a->class_name, bias, dtype);
    if (a->softcap_key) n += snprintf(s + n, cap - n, "  \"%s\": %s,\n", a->softcap_key, cap_s);
    n += snprintf(s + n, cap - n,
                  "  \"head_dim\": %d,\n"
                  "  \"hidden_act\": \"%s\",\n"
                  "  \"hidden_size\": %d,\n"
                  "  \"initializer_range\": 0.02,\n"
                  "  \"intermediate_size\": %d,\n"
                  "  \"max_position_embeddings\": %d,\n",
                  fg_gpt_head_dim(c), a->hidden_act, c->n_embd, fg_gpt_hidden(c), c->block_size);
    if (a->mlp_bias_key) n += snprintf(s + n, cap - n, "  \"%s\": %s,\n", a->mlp_bias_key, bias);
    n += snprintf(s + n, cap - n,
                  "  \"model_type\": \"%s\",\n"
                  "  \"num_attention_heads\": %d,\n"
                  "  \"num_hidden_layers\": %d,\n"
                  "  \"num_key_value_heads\": %d,\n"
                  "  \"pad_token_id\": null,\n"
                  "  \"rms_norm_eps\": %s,\n"
                  "  \"rope_parameters\": {\"rope_theta\": %s, \"rope_type\": \"default\"},\n"
                  "  \"tie_word_embeddings\": %s,\n"
                  "  \"use_cache\": true,\n"
                  "  \"vocab_size\": %d\n"
                  "}\n",
                  a->model_type, c->n_head, c->n_layer, fg_gpt_kv_heads(c), eps, theta,
                  c->untie_head ? "false" : "true", c->vocab_size);
    (void)n;
    return s;
}

/* ---- the table ---- */

static const char *const gpt2_skipped[] = {".attn.bias", ".attn.masked_bias", NULL}; /* causal masks */
static const char *const rope_skipped[] = {".rotary_emb.inv_freq", NULL};            /* older Llama files */

static const hf_arch hf_archs[] = {
    {.model_type = "gpt2",
     .class_name = "GPT2LMHeadModel",
     .arch = FG_ARCH_GPT2,
     .read_config = gpt2_read_config,
     .cannot = gpt2_cannot,
     .config_json = gpt2_config_json,
     .transposed = gpt2_transposed,
     .short_prefix = "transformer.",
     .skipped = gpt2_skipped},
    {.model_type = "llama",
     .class_name = "LlamaForCausalLM",
     .arch = FG_ARCH_LLAMA,
     .read_config = rope_read_config,
     .cannot = rope_cannot,
     .config_json = rope_config_json,
     .skipped = rope_skipped,
     .hidden_act = "silu",
     .pos = FG_POS_ROPE,
     .norm = FG_NORM_RMSNORM,
     .mlp = FG_MLP_SWIGLU,
     .mlp_bias_key = "mlp_bias"},
    {.model_type = "nanochat",
     .class_name = "NanoChatForCausalLM",
     .arch = FG_ARCH_NANOCHAT,
     .read_config = rope_read_config,
     .cannot = rope_cannot,
     .config_json = rope_config_json,
     .skipped = rope_skipped,
     .hidden_act = "relu2",
     .pos = FG_POS_ROPE_NANOCHAT,
     .norm = FG_NORM_RMSNORM_FREE,
     .emb_norm = 1,
     .qk_norm = 1,
     .mlp = FG_MLP_RELU2,
     .softcap_key = "final_logit_softcapping",
     .softcap_default = 15.0},
};
#define HF_N_ARCHS (sizeof hf_archs / sizeof hf_archs[0])

/* config.json at file: its row of hf_archs (by model_type) and the configuration it describes. */
static fg_status hf_read_config(const char *file, const hf_arch **row, fg_gpt_config *mc) {
    fg_json_doc *doc = hf_read_json(file, 16u << 20, "a JSON object of the form config.json has");
    if (!doc) return fg_last_status();
    const fg_json *root = fg_json_root(doc), *mt = fg_json_get(root, "model_type");
    *row = NULL;
    for (size_t i = 0; i < HF_N_ARCHS && !*row; i++)
        if (fg_json_is(mt, hf_archs[i].model_type)) *row = &hf_archs[i];
    fg_status st;
    if (!*row) {
        char b[256];
        st = fg_error(FG_ERR_FORMAT,
                      "%s: model_type is %s, and flashgrad loads GPT-2 (\"gpt2\"), Llama (\"llama\") and NanoChat "
                      "(\"nanochat\") models",
                      file, mt && mt->kind == FG_JSON_STRING ? mt->str : hf_shown(mt, b, sizeof b));
    } else {
        st = (*row)->read_config(*row, file, root, mc);
    }
    fg_json_free(doc);
    return st;
}

/* The row that writes models of family arch. */
static const hf_arch *hf_arch_for(fg_gpt_arch arch) {
    for (size_t i = 0; i < HF_N_ARCHS; i++)
        if (hf_archs[i].arch == arch) return &hf_archs[i];
    return NULL;
}

/* The shard file names of model.safetensors.index.json (its "weight_map" values, each once), into
 * names[0..*n). */
static fg_status hf_read_index(const char *file, char (*names)[256], int *n) {
    static const char what[] =
        "a safetensors index (a JSON object whose \"weight_map\" names each tensor's file in this folder)";
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

/* An array's n elements as float32 into dst (any alignment in the file). */
static fg_status array_to_f32(const char *file, const fg_st_array *a, float *dst, int64_t n) {
    const unsigned char *s = a->data;
    switch (a->dtype) {
    case FG_ST_F32:
        memcpy(dst, s, (size_t)n * 4);
        break;
    case FG_ST_F16:
    case FG_ST_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = a->dtype == FG_ST_F16 ? fg_f16_to_f32(h) : fg_bf16_to_f32(h);
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

/* The entry of g of kind k (the first; the embedding and the head are single), or NULL. */
static const fg_gpt_param *hf_param_of(const fg_gpt *g, fg_gpt_kind k) {
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i].kind == k) return &g->params[i];
    return NULL;
}

/* 1 when name ends with one of the row's skipped suffixes. */
static int hf_skipped(const hf_arch *r, const char *name) {
    size_t L = strlen(name);
    for (const char *const *x = r->skipped; x && *x; x++) {
        size_t n = strlen(*x);
        if (L > n && !strcmp(name + L - n, *x)) return 1;
    }
    return 0;
}

/* The model from opened safetensors files (one, or the shards), config.json's configuration and
 * its row. */
static fg_gpt *hf_build(hf_files *h, const hf_arch *r, const fg_gpt_config *mc, const char *label) {
    fg_gpt *g0 = fg_gpt_create_empty(mc);
    if (!g0) return NULL;
    /* a row's short prefix may be absent (GPT2Model's names lack GPT2LMHeadModel's "transformer.") */
    const fg_gpt_param *emb = hf_param_of(g0, FG_GPT_WTE);
    int w = 0;
    size_t skip = 0; /* bytes of our names to drop */
    if (!hf_find(h, emb->name, &w)) {
        const size_t np = r->short_prefix ? strlen(r->short_prefix) : 0;
        if (np && !strncmp(emb->name, r->short_prefix, np) && hf_find(h, emb->name + np, &w)) {
            skip = np;
        } else {
            if (np)
                fg_error(FG_ERR_FORMAT, "%s: no '%s' (nor '%s'): not a %s model's weights", label, emb->name,
                         emb->name + np, r->class_name);
            else
                fg_error(FG_ERR_FORMAT, "%s: no '%s': not a %s model's weights", label, emb->name, r->class_name);
            fg_gpt_free(g0);
            return NULL;
        }
    }
    fg_gpt *g = g0;
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
        const int tr = r->transposed && r->transposed(p->kind);
        if (tr) {
            int64_t t = want[0];
            want[0] = want[1];
            want[1] = t;
        }
        if (a->ndim != p->ndim || a->shape[0] != want[0] || (p->ndim == 2 && a->shape[1] != want[1])) {
            char got[96] = "(";
            for (int d = 0; d < a->ndim; d++)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)a->shape[d]);
            if (p->ndim == 2)
                fg_error(FG_ERR_FORMAT, "%s: tensor '%s' has shape %s), config.json implies (%lld, %lld)", label, name,
                         got, (long long)want[0], (long long)want[1]);
            else
                fg_error(FG_ERR_FORMAT, "%s: tensor '%s' has shape %s), config.json implies (%lld)", label, name, got,
                         (long long)want[0]);
            goto fail;
        }
        if (array_to_f32(h->path[fi], a, tr ? tmp : flat + p->offset, p->numel) != FG_OK) goto fail;
        if (tr) {
            /* HF (in, out) = want (rows r = in, cols c = out) -> ours (out, in) */
            const int64_t R = want[0], Cc = want[1];
            float *d = flat + p->offset;
            for (int64_t r = 0; r < R; r++)
                for (int64_t c = 0; c < Cc; c++) d[c * R + r] = tmp[r * Cc + c];
        }
        used++;
    }
    /* every other stored tensor must be one the files carry without meaning: the row's buffers
     * (causal masks, rotary frequencies), or a tied head (equal to the embedding) */
    const fg_gpt_param *wte = emb;
    for (int fi = 0; fi < h->n; fi++)
        for (int k = 0; k < fg_st_count(h->f[fi]); k++) {
            const fg_st_array *a = fg_st_at(h->f[fi], k);
            char full[FG_GPT_NAME_MAX + 16];
            snprintf(full, sizeof full, "%.*s%s", (int)skip, emb->name, a->name);
            if (fg_gpt_find(g, full)) continue;
            if (hf_skipped(r, a->name)) continue;
            if (!strcmp(a->name, "lm_head.weight")) {
                int same = a->ndim == 2 && a->shape[0] == wte->shape[0] && a->shape[1] == wte->shape[1];
                if (same && array_to_f32(h->path[fi], a, tmp, wte->numel) == FG_OK)
                    same = memcmp(tmp, flat + wte->offset, (size_t)wte->numel * sizeof *tmp) == 0;
                if (!same) {
                    fg_error(FG_ERR_FORMAT,
                             "%s: lm_head.weight differs from %s; the LM head is tied to the embedding "
                             "(tie_word_embeddings)",
                             h->path[fi], wte->name);
                    goto fail;
                }
                continue;
            }
            fg_error(FG_ERR_FORMAT, "%s: unexpected tensor '%s' (not part of a %s model as config.json describes it)",
                     h->path[fi], a->name, r->class_name);
            goto fail;
        }
    for (int64_t i = 0; i < g->num_elements; i++)
        if (!isfinite(flat[i])) {
            fg_error(FG_ERR_FORMAT, "%s: a weight is not finite (%g, element %lld of the model)", label,
                     (double)flat[i], (long long)i);
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
    const hf_arch *row = NULL;
    snprintf(cfgpath, sizeof cfgpath, "%s/config.json", dir);
    if (hf_read_config(cfgpath, &row, &mc) != FG_OK) return NULL;
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
    m->model = hf_build(h, row, &mc, file ? file : dir);
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
        fg_error(FG_ERR_FORMAT, "its %d tokens are more than the model's %d ids", fg_tokenizer_vocab_size(t),
                 m->model->cfg.vocab_size);
        fg_tokenizer_free(t);
        t = NULL;
    }
    if (!t) {
        snprintf(m->tokenizer_note, sizeof m->tokenizer_note, "the tokenizer files in '%.400s' are not used: %.500s",
                 dir, fg_last_error());
        fg_clear_error();
        return m;
    }
    m->tokenizer = m->own_tokenizer = t;
    return m;
}

fg_status fg_hf_save(const fg_gpt *g, const char *out_dir, int overwrite) {
    return fg_hf_save_with(g, NULL, out_dir, overwrite, NULL);
}

/* A BPE tokenizer's files into the folder dir, under the names Hugging Face (and tiktoken) give them. */
static fg_status write_tokenizer_files(const fg_tokenizer *tok, const char *dir) {
    const fg_bpe_files *f = fg_tokenizer_bpe_files(tok);
    if (!f) return FG_OK; /* a character or byte tokenizer: Hugging Face has no file for it */
    char name[2][64];
    if (f->kind == FG_BPE_JSON)
        snprintf(name[0], sizeof name[0], "tokenizer.json");
    else if (f->kind == FG_BPE_TIKTOKEN)
        snprintf(name[0], sizeof name[0], "%s.tiktoken", f->encoding);
    else
        snprintf(name[0], sizeof name[0], "vocab.json"), snprintf(name[1], sizeof name[1], "merges.txt");
    for (int i = 0; i < (f->kind == FG_BPE_VOCAB_MERGES ? 2 : 1); i++) {
        char p[4096 + 128];
        snprintf(p, sizeof p, "%s/%s", dir, name[i]);
        const void *parts[1] = {f->data[i]};
        FG_TRY(fg_write_file_atomic(p, parts, &f->n[i], 1));
    }
    return FG_OK;
}

/* The name of shard i (0-based) of n: transformers' "model-00001-of-00002.safetensors", or
 * model.safetensors when there is one. */
static void shard_name(char *b, size_t cap, int i, int n) {
    if (n == 1)
        snprintf(b, cap, "model.safetensors");
    else
        snprintf(b, cap, "model-%05d-of-%05d.safetensors", i + 1, n);
}

static int cmp_names(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* model.safetensors.index.json: the bytes of all tensors and, sorted by name, the file of each. */
static char *shard_index_json(const fg_gpt *g, const int *shard_of, int n_shards, int64_t total) {
    const char **names = malloc((size_t)g->n_params * sizeof *names);
    size_t cap = 256;
    for (int i = 0; i < g->n_params; i++) cap += strlen(g->params[i].name) + 64;
    char *s = names ? malloc(cap) : NULL;
    if (!s) {
        free(names);
        return NULL;
    }
    size_t n = (size_t)snprintf(s, cap, "{\n  \"metadata\": {\n    \"total_size\": %lld\n  },\n  \"weight_map\": {\n",
                                (long long)total);
    for (int i = 0; i < g->n_params; i++) names[i] = g->params[i].name;
    qsort(names, (size_t)g->n_params, sizeof *names, cmp_names);
    for (int k = 0; k < g->n_params; k++) {
        int i = 0;
        while (strcmp(g->params[i].name, names[k])) i++;
        char file[64];
        shard_name(file, sizeof file, shard_of[i], n_shards);
        n += (size_t)snprintf(s + n, cap - n, "    \"%s\": \"%s\"%s\n", names[k], file, k + 1 < g->n_params ? "," : "");
    }
    snprintf(s + n, cap - n, "  }\n}\n");
    free(names);
    return s;
}

fg_status fg_hf_save_with(const fg_gpt *g, const fg_tokenizer *tok, const char *out_dir, int overwrite,
                          const fg_hf_save_opts *opts) {
    if (!g || !out_dir || !*out_dir) return fg_error(FG_ERR_ARG, "export: no model or no output folder");
    const fg_st_dtype dt = opts ? opts->dtype : FG_ST_F32;
    const int64_t max_shard = opts ? opts->max_shard_bytes : 0;
    if (dt != FG_ST_F32 && dt != FG_ST_BF16 && dt != FG_ST_F16)
        return fg_error(FG_ERR_ARG, "export --to hf: weights are written as F32, BF16 or F16, not %s", fg_st_dtype_name(dt));
    if (max_shard < 0) return fg_error(FG_ERR_ARG, "export --to hf: a shard's size must be positive");
    const char *dt_name = dt == FG_ST_F32 ? "float32" : dt == FG_ST_BF16 ? "bfloat16" : "float16";
    const size_t es = dt == FG_ST_F32 ? 4 : 2;
    char out[4096];
    if (snprintf(out, sizeof out, "%s", out_dir) >= (int)sizeof out - 64) return fg_error(FG_ERR_ARG, "path too long");
    for (size_t L = strlen(out); L > 1 && out[L - 1] == '/'; L--) out[L - 1] = '\0';
    const hf_arch *r = hf_arch_for(g->cfg.arch);
    char why[256];
    if (!r)
        return fg_error(FG_ERR_ARG, "export --to hf: no Hugging Face class for a %s model",
                        fg_gpt_arch_name(g->cfg.arch));
    if (r->cannot(r, &g->cfg, why, sizeof why))
        return fg_error(FG_ERR_ARG, "export --to hf: %s has no %s in transformers' %s; not exported",
                        fg_gpt_arch_name(g->cfg.arch), why, r->class_name);
    /* the shards: tensors in the table's order, a new file when the next one would pass max_shard
     * (a tensor larger than max_shard has a file of its own), as transformers' save_pretrained */
    int *shard_of = malloc((size_t)g->n_params * sizeof *shard_of);
    if (!shard_of) return fg_error(FG_ERR_OOM, "export: out of memory");
    int n_shards = 1;
    int64_t in_shard = 0, total = 0;
    for (int i = 0; i < g->n_params; i++) {
        const int64_t nb = g->params[i].numel * (int64_t)es;
        if (max_shard > 0 && in_shard > 0 && in_shard + nb > max_shard) n_shards++, in_shard = 0;
        shard_of[i] = n_shards - 1;
        in_shard += nb;
        total += nb;
    }
    if (n_shards > HF_MAX_SHARDS) {
        free(shard_of);
        return fg_error(FG_ERR_ARG, "export --to hf: a shard size of %lld bytes makes %d files, more than the %d a folder may have",
                        (long long)max_shard, n_shards, HF_MAX_SHARDS);
    }
    fg_status st = fg__export_check_out(out, overwrite);
    if (st != FG_OK) {
        free(shard_of);
        return st;
    }
    fg__export_remove_leftovers(out, 1);
    float *flat = fg__model_host_f32(g);
    if (!flat) {
        free(shard_of);
        return fg_last_status();
    }
    /* every tensor as the file has it: Conv1D weights transposed, then converted to dt */
    int64_t n_all = 0;
    for (int i = 0; i < g->n_params; i++) n_all += g->params[i].numel;
    float *tr = malloc((size_t)(n_all ? n_all : 1) * sizeof *tr);
    uint16_t *half = dt != FG_ST_F32 && tr ? malloc((size_t)(n_all ? n_all : 1) * sizeof *half) : NULL;
    fg_st_writer *w[HF_MAX_SHARDS] = {NULL};
    int n_w = 0;
    for (; tr && (dt == FG_ST_F32 || half) && n_w < n_shards; n_w++)
        if (!(w[n_w] = fg_st_writer_new())) break;
    char *cfg = n_w == n_shards ? r->config_json(r, g, dt_name) : NULL;
    char *index = cfg && n_shards > 1 ? shard_index_json(g, shard_of, n_shards, total) : NULL;
    char tmp[4096 + 64] = "";
    int tmp_fd = -1;
    if (!cfg || (n_shards > 1 && !index)) {
        st = fg_error(FG_ERR_OOM, "export: out of memory");
        goto done;
    }
    int64_t at = 0;
    for (int i = 0; i < g->n_params && st == FG_OK; i++) {
        const fg_gpt_param *p = &g->params[i];
        const float *src = flat + p->offset;
        float *d = tr + at;
        int64_t shape[FG_ST_MAX_DIMS];
        for (int k = 0; k < p->ndim; k++) shape[k] = p->shape[k];
        if (r->transposed && r->transposed(p->kind)) {
            const int64_t R = p->shape[0], Cc = p->shape[1]; /* ours (out, in) -> (in, out) */
            for (int64_t i0 = 0; i0 < R; i0++)
                for (int64_t c = 0; c < Cc; c++) d[c * R + i0] = src[i0 * Cc + c];
            shape[0] = Cc, shape[1] = R;
        } else {
            memcpy(d, src, (size_t)p->numel * sizeof *d);
        }
        const void *data = d;
        if (dt != FG_ST_F32) {
            uint16_t *h = half + at;
            for (int64_t e = 0; e < p->numel; e++) h[e] = dt == FG_ST_BF16 ? fg_bf16_from_f32(d[e]) : fg_f16_from_f32(d[e]);
            data = h;
        }
        st = fg_st_writer_add(w[shard_of[i]], p->name, dt, p->ndim, shape, data);
        at += p->numel;
    }
    /* "format" is what transformers reads; "fg_export" tells a later --overwrite that flashgrad
     * wrote this folder */
    for (int k = 0; k < n_shards && st == FG_OK; k++) {
        st = fg_st_writer_set_metadata(w[k], "format", "pt");
        if (st == FG_OK) st = fg_st_writer_set_metadata(w[k], "fg_export", "hf");
    }
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
    for (int k = 0; k < n_shards && st == FG_OK; k++) {
        char file[64];
        shard_name(file, sizeof file, k, n_shards);
        snprintf(p1, sizeof p1, "%s/%s", tmp, file);
        st = fg_st_writer_write(w[k], p1);
    }
    if (st == FG_OK && index) {
        snprintf(p1, sizeof p1, "%s/model.safetensors.index.json", tmp);
        const void *parts[1] = {index};
        size_t sizes[1] = {strlen(index)};
        st = fg_write_file_atomic(p1, parts, sizes, 1);
    }
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
    free(index);
    for (int k = 0; k < n_w; k++) fg_st_writer_free(w[k]);
    free(half);
    free(tr);
    free(flat);
    free(shard_of);
    return st;
}
