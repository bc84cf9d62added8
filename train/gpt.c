/* gpt.c — the model of gpt.h: configuration, parameter table, forward graph, generation.
 *
 * What an architecture may have (gpt.h, fg_gpt_config): learned or rotary positions (Llama's
 * rotate_half or nanochat's direction), LayerNorm or RMSNorm with or without a weight, a norm
 * after the embedding, QK-norm, grouped-query attention, GELU / SwiGLU / ReLU² MLPs, biases or
 * none, a tied or untied head, a logit softcap, per-layer sliding windows.
 *
 * Shapes: B batch, T time, C channels (n_embd), H heads, H_kv K/V heads, hd = C / H head size,
 * I MLP width, V vocabulary, L layers. The backward is autograd's: every step of the forward below
 * is an op from ops/ that records its own rule, so this file has no backward of its own.
 */
#include "train/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "ops/ops.h"
#include "autograd/recompute.h"
#include "ops/cpu.h"
#include "ops/infer.h"
#include "tensor/philox.h"

fg_gpt_config fg_gpt_default_config(void) {
    return (fg_gpt_config){.n_layer = 4,
                           .n_head = 4,
                           .n_embd = 128,
                           .block_size = 64,
                           .vocab_size = 0,
                           .dropout = 0.0,
                           .attn = FG_ATTN_FLASH,
                           .dtype = FG_F32,
                           .device = FG_CPU};
}

/* ---- architecture options ---- */

static const char *const arch_names[FG_ARCH_COUNT] = {"gpt2", "llama", "nanochat"};
static const char *const pos_names[FG_POS_COUNT] = {"learned", "rope", "rope-nanochat"};
static const char *const norm_names[FG_NORM_COUNT] = {"layernorm", "rmsnorm", "rmsnorm-free"};
static const char *const mlp_names[FG_MLP_COUNT] = {"gelu", "swiglu", "relu2"};

static int parse_name(const char *const *names, int n, const char *s) {
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

const char *fg_gpt_arch_name(fg_gpt_arch a) { return a >= 0 && a < FG_ARCH_COUNT ? arch_names[a] : "?"; }
int fg_gpt_arch_parse(const char *s) { return parse_name(arch_names, FG_ARCH_COUNT, s); }
const char *fg_gpt_pos_name(fg_gpt_pos p) { return p >= 0 && p < FG_POS_COUNT ? pos_names[p] : "?"; }
int fg_gpt_pos_parse(const char *s) { return parse_name(pos_names, FG_POS_COUNT, s); }
const char *fg_gpt_norm_name(fg_gpt_norm n) { return n >= 0 && n < FG_NORM_COUNT ? norm_names[n] : "?"; }
int fg_gpt_norm_parse(const char *s) { return parse_name(norm_names, FG_NORM_COUNT, s); }
const char *fg_gpt_mlp_name(fg_gpt_mlp m) { return m >= 0 && m < FG_MLP_COUNT ? mlp_names[m] : "?"; }
int fg_gpt_mlp_parse(const char *s) { return parse_name(mlp_names, FG_MLP_COUNT, s); }

void fg_gpt_arch_preset(fg_gpt_config *c, fg_gpt_arch a) {
    c->arch = a;
    c->n_kv_head = 0;
    c->pos = FG_POS_LEARNED;
    c->rope_theta = 0;
    c->norm = FG_NORM_LAYERNORM;
    c->norm_eps = 0;
    c->emb_norm = c->qk_norm = 0;
    c->mlp = FG_MLP_GELU;
    c->mlp_hidden = 0;
    c->no_bias = c->untie_head = 0;
    c->logit_softcap = 0;
    memset(c->window, 0, sizeof c->window);
    if (a == FG_ARCH_LLAMA) {
        /* LlamaForCausalLM with LlamaConfig's defaults */
        c->pos = FG_POS_ROPE;
        c->rope_theta = 10000;
        c->norm = FG_NORM_RMSNORM;
        c->norm_eps = 1e-6;
        c->mlp = FG_MLP_SWIGLU;
        c->no_bias = c->untie_head = 1;
    } else if (a == FG_ARCH_NANOCHAT) {
        /* NanoChatForCausalLM with NanoChatConfig's defaults (nanochat's model without windows) */
        c->pos = FG_POS_ROPE_NANOCHAT;
        c->rope_theta = 10000;
        c->norm = FG_NORM_RMSNORM_FREE;
        c->norm_eps = 1e-6;
        c->emb_norm = c->qk_norm = 1;
        c->mlp = FG_MLP_RELU2;
        c->no_bias = c->untie_head = 1;
        c->logit_softcap = 15;
    }
}

void fg_gpt_copy_arch(fg_gpt_config *dst, const fg_gpt_config *src) {
    dst->arch = src->arch;
    dst->n_kv_head = src->n_kv_head;
    dst->pos = src->pos;
    dst->rope_theta = src->rope_theta;
    dst->norm = src->norm;
    dst->norm_eps = src->norm_eps;
    dst->emb_norm = src->emb_norm;
    dst->qk_norm = src->qk_norm;
    dst->mlp = src->mlp;
    dst->mlp_hidden = src->mlp_hidden;
    dst->no_bias = src->no_bias;
    dst->untie_head = src->untie_head;
    dst->logit_softcap = src->logit_softcap;
    memcpy(dst->window, src->window, sizeof dst->window);
}

int fg_gpt_kv_heads(const fg_gpt_config *c) { return c->n_kv_head > 0 ? c->n_kv_head : c->n_head; }
int fg_gpt_head_dim(const fg_gpt_config *c) { return c->n_embd / c->n_head; }
int fg_gpt_hidden(const fg_gpt_config *c) { return c->mlp_hidden > 0 ? c->mlp_hidden : 4 * c->n_embd; }
double fg_gpt_eps(const fg_gpt_config *c) { return c->norm_eps > 0 ? c->norm_eps : 1e-5; }
double fg_gpt_theta(const fg_gpt_config *c) { return c->rope_theta > 0 ? c->rope_theta : 10000.0; }

int fg_gpt_layer_window(const fg_gpt_config *c, int l) {
    const size_t n = strnlen(c->window, sizeof c->window);
    if (n == 0 || l == c->n_layer - 1 || c->window[(size_t)l % n] != 'S') return 0;
    return c->block_size / 4 > 0 ? c->block_size / 4 : 1;
}

int fg_gpt_is_gpt2(const fg_gpt_config *c) {
    int full = 1;
    for (int l = 0; l < c->n_layer; l++) full &= fg_gpt_layer_window(c, l) == 0;
    return c->arch == FG_ARCH_GPT2 && fg_gpt_kv_heads(c) == c->n_head && c->pos == FG_POS_LEARNED &&
           c->norm == FG_NORM_LAYERNORM && !c->emb_norm && !c->qk_norm && c->mlp == FG_MLP_GELU &&
           fg_gpt_hidden(c) == 4 * c->n_embd && !c->no_bias && !c->untie_head && c->logit_softcap == 0 && full;
}

void fg_gpt_arch_describe(const fg_gpt_config *c, char *buf, size_t n) {
    size_t k = 0;
#define FG_DESCRIBE(...)                                                                                               \
    do {                                                                                                               \
        if (k < n) k += (size_t)snprintf(buf + k, n - k, __VA_ARGS__);                                                 \
    } while (0)
    FG_DESCRIBE("%s", fg_gpt_arch_name(c->arch));
    if (fg_gpt_is_gpt2(c)) return;
    FG_DESCRIBE(": %s", fg_gpt_pos_name(c->pos));
    if (c->pos != FG_POS_LEARNED) FG_DESCRIBE(" (theta %g)", fg_gpt_theta(c));
    FG_DESCRIBE(", %s (eps %g)%s", fg_gpt_norm_name(c->norm), fg_gpt_eps(c),
                c->emb_norm ? " after the embedding too" : "");
    if (c->qk_norm) FG_DESCRIBE(", qk-norm");
    FG_DESCRIBE(", %s (hidden %d)", fg_gpt_mlp_name(c->mlp), fg_gpt_hidden(c));
    if (fg_gpt_kv_heads(c) != c->n_head) FG_DESCRIBE(", %d kv heads", fg_gpt_kv_heads(c));
    FG_DESCRIBE("%s%s", c->no_bias ? ", no biases" : ", biases", c->untie_head ? ", untied head" : ", tied head");
    if (c->logit_softcap > 0) FG_DESCRIBE(", logit softcap %g", c->logit_softcap);
    if (c->window[0]) FG_DESCRIBE(", windows %s", c->window);
#undef FG_DESCRIBE
}

static fg_status arch_check(const fg_gpt_config *c) {
    if (c->arch < 0 || c->arch >= FG_ARCH_COUNT) return fg_error(FG_ERR_ARG, "gpt: unknown arch %d", (int)c->arch);
    if (c->n_kv_head < 0 || c->n_kv_head > c->n_head || c->n_head % fg_gpt_kv_heads(c))
        return fg_error(FG_ERR_ARG, "gpt: n_kv_head %d must divide n_head %d", c->n_kv_head, c->n_head);
    if (c->pos < 0 || c->pos >= FG_POS_COUNT) return fg_error(FG_ERR_ARG, "gpt: unknown pos %d", (int)c->pos);
    if (!(c->rope_theta >= 0 && isfinite(c->rope_theta)))
        return fg_error(FG_ERR_ARG, "gpt: rope_theta %g must be finite and > 0 (0 = 10000)", c->rope_theta);
    if (c->pos != FG_POS_LEARNED && fg_gpt_head_dim(c) % 2)
        return fg_error(FG_ERR_ARG, "gpt: pos %s needs an even head dim (n_embd / n_head = %d)",
                        fg_gpt_pos_name(c->pos), fg_gpt_head_dim(c));
    if (c->norm < 0 || c->norm >= FG_NORM_COUNT) return fg_error(FG_ERR_ARG, "gpt: unknown norm %d", (int)c->norm);
    if (!(c->norm_eps >= 0 && c->norm_eps < 1))
        return fg_error(FG_ERR_ARG, "gpt: norm_eps %g must be > 0 and < 1 (0 = 1e-5)", c->norm_eps);
    if (c->emb_norm != 0 && c->emb_norm != 1)
        return fg_error(FG_ERR_ARG, "gpt: emb_norm %d is not 0 or 1", c->emb_norm);
    if (c->qk_norm != 0 && c->qk_norm != 1) return fg_error(FG_ERR_ARG, "gpt: qk_norm %d is not 0 or 1", c->qk_norm);
    if (c->mlp < 0 || c->mlp >= FG_MLP_COUNT) return fg_error(FG_ERR_ARG, "gpt: unknown mlp %d", (int)c->mlp);
    if (c->mlp_hidden < 0 || c->mlp_hidden > FG_GPT_MAX_HIDDEN ||
        (c->mlp_hidden == 0 && 4 * c->n_embd > FG_GPT_MAX_HIDDEN))
        return fg_error(FG_ERR_ARG, "gpt: mlp_hidden %d is outside 1..%d (0 = 4 n_embd)", c->mlp_hidden,
                        FG_GPT_MAX_HIDDEN);
    if (c->no_bias != 0 && c->no_bias != 1) return fg_error(FG_ERR_ARG, "gpt: no_bias %d is not 0 or 1", c->no_bias);
    if (c->untie_head != 0 && c->untie_head != 1)
        return fg_error(FG_ERR_ARG, "gpt: untie_head %d is not 0 or 1", c->untie_head);
    if (!(c->logit_softcap >= 0 && isfinite(c->logit_softcap)))
        return fg_error(FG_ERR_ARG, "gpt: logit_softcap %g must be finite and >= 0 (0 = off)", c->logit_softcap);
    if (c->dtype == FG_F32 && c->logit_softcap > 0 && c->logit_softcap < 1e-30)
        return fg_error(FG_ERR_ARG, "gpt: logit_softcap %g is too small for float32", c->logit_softcap);
    const size_t wn = strnlen(c->window, sizeof c->window);
    if (wn == sizeof c->window)
        return fg_error(FG_ERR_ARG, "gpt: window pattern is longer than %d letters", FG_GPT_WINDOW_MAX - 1);
    for (size_t i = 0; i < wn; i++)
        if (c->window[i] != 'S' && c->window[i] != 'L')
            return fg_error(FG_ERR_ARG, "gpt: window pattern '%s' may hold only S and L", c->window);
    if (c->device != FG_CPU && !fg_gpt_is_gpt2(c))
        return fg_error(FG_ERR_DEVICE, "gpt: architectures other than GPT-2's (arch %s) run on the CPU only",
                        fg_gpt_arch_name(c->arch));
    return FG_OK;
}

fg_status fg_gpt_config_check(const fg_gpt_config *c) {
    if (!c) return fg_error(FG_ERR_ARG, "gpt: config is NULL");
    if (c->n_layer < 1 || c->n_layer > FG_GPT_MAX_LAYER)
        return fg_error(FG_ERR_ARG, "gpt: n_layer %d is outside 1..%d", c->n_layer, FG_GPT_MAX_LAYER);
    if (c->n_head < 1) return fg_error(FG_ERR_ARG, "gpt: n_head %d must be at least 1", c->n_head);
    if (c->n_embd < 1 || c->n_embd > FG_GPT_MAX_EMBD)
        return fg_error(FG_ERR_ARG, "gpt: n_embd %d is outside 1..%d", c->n_embd, FG_GPT_MAX_EMBD);
    if (c->n_embd % c->n_head)
        return fg_error(FG_ERR_ARG, "gpt: n_embd %d is not a multiple of n_head %d", c->n_embd, c->n_head);
    if (c->block_size < 1 || c->block_size > FG_GPT_MAX_BLOCK)
        return fg_error(FG_ERR_ARG, "gpt: block_size %d is outside 1..%d", c->block_size, FG_GPT_MAX_BLOCK);
    if (c->vocab_size < 1 || c->vocab_size > FG_GPT_MAX_VOCAB)
        return fg_error(FG_ERR_ARG, "gpt: vocab_size %d is outside 1..%d", c->vocab_size, FG_GPT_MAX_VOCAB);
    if (!(c->dropout >= 0.0 && c->dropout < 1.0))
        return fg_error(FG_ERR_ARG, "gpt: dropout %g is outside [0, 1)", c->dropout);
    if (c->attn < 0 || c->attn >= FG_ATTN_IMPL_COUNT)
        return fg_error(FG_ERR_ARG, "gpt: unknown attention implementation %d", (int)c->attn);
    if (c->dtype != FG_F32 && c->dtype != FG_F64)
        return fg_error(FG_ERR_DTYPE, "gpt: dtype must be float32 or float64");
    if (c->device < 0 || c->device >= FG_DEVICE_COUNT)
        return fg_error(FG_ERR_DEVICE, "gpt: unknown device %d", (int)c->device);
    if (c->recompute < 0 || c->recompute >= FG_RECOMPUTE_COUNT)
        return fg_error(FG_ERR_ARG, "gpt: unknown recompute setting %d", (int)c->recompute);
    for (int l = 0; l < FG_GPT_MAX_LAYER_PLAN; l++)
        if (c->recompute_plan[l] > FG_RECOMPUTE_COUNT || (l >= c->n_layer && c->recompute_plan[l]))
            return fg_error(FG_ERR_ARG, "gpt: recompute plan entry %d (%d) is not a choice for a block of %d", l,
                            (int)c->recompute_plan[l], c->n_layer);
    if (c->compute < 0 || c->compute >= FG_COMPUTE_COUNT)
        return fg_error(FG_ERR_ARG, "gpt: unknown compute precision %d", (int)c->compute);
    fg_status ast = arch_check(c);
    if (ast != FG_OK) return ast;
    if (c->compute == FG_COMPUTE_BF16) {
        const int d = c->n_embd / c->n_head;
        if (c->dtype != FG_F32)
            return fg_error(FG_ERR_DTYPE, "gpt: bfloat16 mixed precision keeps float32 weights (dtype %s)",
                            fg_dtype_name(c->dtype));
        if (c->attn != FG_ATTN_FLASH)
            return fg_error(FG_ERR_ARG, "gpt: bfloat16 mixed precision runs flash attention only (naive has no bf16 "
                                        "kernels)");
        /* the bf16 flash kernels' head dims (cuda/attention_bf16.h) */
        if (d % 8 || d > 128)
            return fg_error(FG_ERR_ARG,
                            "gpt: bfloat16 mixed precision needs a head dim (n_embd / n_head = %d) that is a multiple "
                            "of 8 up to 128 (the bf16 attention kernels')",
                            d);
    }
    return FG_OK;
}

static const char *const recompute_names[FG_RECOMPUTE_COUNT] = {"none", "attn", "block", "pointwise", "mlp"};

const char *fg_gpt_recompute_name(fg_gpt_recompute r) {
    return r >= 0 && r < FG_RECOMPUTE_COUNT ? recompute_names[r] : "?";
}

int fg_gpt_recompute_parse(const char *s) {
    for (int r = 0; s && r < FG_RECOMPUTE_COUNT; r++)
        if (!strcmp(s, recompute_names[r])) return r;
    return -1;
}

fg_gpt_recompute fg_gpt_layer_recompute(const fg_gpt_config *c, int l) {
    const int p = l >= 0 && l < FG_GPT_MAX_LAYER_PLAN ? c->recompute_plan[l] : 0;
    return p ? (fg_gpt_recompute)(p - 1) : c->recompute;
}

fg_status fg_gpt_recompute_set(fg_gpt_config *c, const char *plan) {
    if (!plan || !*plan) return fg_error(FG_ERR_ARG, "recompute plan: empty");
    unsigned char p[FG_GPT_MAX_LAYER_PLAN] = {0};
    int n = 0;
    for (const char *s = plan;; n++) {
        size_t len = strcspn(s, ",");
        int r = -1;
        for (int k = 0; k < FG_RECOMPUTE_COUNT; k++)
            if (strlen(recompute_names[k]) == len && !strncmp(s, recompute_names[k], len)) r = k;
        if (r < 0)
            return fg_error(FG_ERR_ARG, "recompute plan: '%.*s' (block %d) is not none, pointwise, attn, mlp or block",
                            (int)(len > 40 ? 40 : len), s, n);
        if (n >= c->n_layer || n >= FG_GPT_MAX_LAYER_PLAN)
            return fg_error(FG_ERR_ARG, "recompute plan: more choices than the model's %d blocks", c->n_layer);
        p[n] = (unsigned char)(r + 1);
        s += len;
        if (!*s) break;
        s++;
    }
    n++;
    if (n == 1) { /* one name: every block */
        c->recompute = (fg_gpt_recompute)(p[0] - 1);
        memset(c->recompute_plan, 0, sizeof c->recompute_plan);
        return FG_OK;
    }
    if (n != c->n_layer)
        return fg_error(FG_ERR_ARG, "recompute plan: %d choices for a model of %d blocks (one name, or one per block)",
                        n, c->n_layer);
    memcpy(c->recompute_plan, p, sizeof p);
    return FG_OK;
}

int fg_gpt_recompute_format(const fg_gpt_config *c, char *out, size_t n) {
    const fg_gpt_recompute r0 = fg_gpt_layer_recompute(c, 0);
    int uniform = 1;
    for (int l = 1; l < c->n_layer; l++) uniform &= fg_gpt_layer_recompute(c, l) == r0;
    if (uniform) return snprintf(out, n, "%s", recompute_names[r0]);
    size_t used = 0;
    for (int l = 0; l < c->n_layer; l++) {
        int k = snprintf(used < n ? out + used : NULL, used < n ? n - used : 0, "%s%s", l ? "," : "",
                         fg_gpt_recompute_name(fg_gpt_layer_recompute(c, l)));
        used += (size_t)k;
    }
    return (int)used;
}

/* ---- the parameter table, generated from FG_GPT_PARAMS ---- */

/* When an entry exists (the list's `present` column). */
typedef enum {
    P_ALL,     /* always */
    P_LEARNED, /* learned positions */
    P_NORM_W,  /* a norm with a weight (layernorm, rmsnorm) */
    P_NORM_B,  /* a layernorm with a bias */
    P_EMBN_W,  /* emb_norm, with a weight */
    P_EMBN_B,  /* emb_norm, layernorm with a bias */
    P_FUSED,   /* q, k, v in one named matrix (GPT-2 names) */
    P_SPLIT,   /* q, k, v as three named matrices (Llama / NanoChat names) */
    P_FUSED_B, /* their biases */
    P_SPLIT_B,
    P_BIAS,   /* a linear layer's bias */
    P_GATE,   /* swiglu's gate */
    P_GATE_B, /* its bias */
    P_UNTIED  /* an untied LM head */
} present_rule;

static int param_present(const fg_gpt_config *c, present_rule r) {
    const int norm_w = c->norm != FG_NORM_RMSNORM_FREE, norm_b = c->norm == FG_NORM_LAYERNORM && !c->no_bias;
    const int fused = c->arch == FG_ARCH_GPT2, bias = !c->no_bias;
    switch (r) {
    case P_ALL:
        return 1;
    case P_LEARNED:
        return c->pos == FG_POS_LEARNED;
    case P_NORM_W:
        return norm_w;
    case P_NORM_B:
        return norm_b;
    case P_EMBN_W:
        return c->emb_norm && norm_w;
    case P_EMBN_B:
        return c->emb_norm && norm_b;
    case P_FUSED:
        return fused;
    case P_SPLIT:
        return !fused;
    case P_FUSED_B:
        return fused && bias;
    case P_SPLIT_B:
        return !fused && bias;
    case P_BIAS:
        return bias;
    case P_GATE:
        return c->mlp == FG_MLP_SWIGLU;
    case P_GATE_B:
        return c->mlp == FG_MLP_SWIGLU && bias;
    case P_UNTIED:
        return c->untie_head;
    }
    return 0;
}

typedef struct {
    int where;                       /* 0 before the blocks, 1 per block, 2 after */
    const char *name[FG_ARCH_COUNT]; /* printf formats, %d = block */
    int ndim;
    int decay;
    fg_gpt_init init;
    present_rule present;
} kind_info;

static const kind_info kinds[FG_GPT_KIND_COUNT] = {
#define FG_GPT_KIND_INFO(id, where, n0, n1, n2, nd, r, c, decay, init, present)                                        \
    {where, {n0, n1, n2}, nd, decay, init, present},
    FG_GPT_PARAMS(FG_GPT_KIND_INFO)
#undef FG_GPT_KIND_INFO
};

/* The shape of one kind under config cfg: the list's rows/cols with V, T, C, QKV, KV, I bound here. */
static void kind_shape(const fg_gpt_config *cfg, fg_gpt_kind k, int64_t shape[2]) {
    const int64_t V = cfg->vocab_size, T = cfg->block_size, C = cfg->n_embd;
    const int64_t KV = (int64_t)fg_gpt_kv_heads(cfg) * fg_gpt_head_dim(cfg), QKV = C + 2 * KV, I = fg_gpt_hidden(cfg);
    (void)V;
    (void)T;
    (void)KV;
    (void)QKV;
    (void)I;
    switch (k) {
#define FG_GPT_KIND_SHAPE(id, where, n0, n1, n2, nd, r, c, decay, init, present)                                       \
    case FG_GPT_##id:                                                                                                  \
        shape[0] = (r);                                                                                                \
        shape[1] = (c);                                                                                                \
        break;
        FG_GPT_PARAMS(FG_GPT_KIND_SHAPE)
#undef FG_GPT_KIND_SHAPE
    default:
        shape[0] = shape[1] = 0;
    }
}

static void fill_entry(const fg_gpt_config *c, fg_gpt_param *p, fg_gpt_kind k, int layer, int64_t *offset) {
    p->kind = k;
    p->layer = layer;
    p->ndim = kinds[k].ndim;
    kind_shape(c, k, p->shape);
    p->numel = p->ndim == 2 ? p->shape[0] * p->shape[1] : p->shape[0];
    if (p->ndim == 1) p->shape[1] = 1;
    p->offset = *offset;
    *offset += p->numel;
    p->decay = kinds[k].decay;
    p->init = kinds[k].init;
    p->w = NULL;
    if (kinds[k].where == 1) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        snprintf(p->name, sizeof p->name, kinds[k].name[c->arch], layer);
#pragma GCC diagnostic pop
    } else {
        snprintf(p->name, sizeof p->name, "%s", kinds[k].name[c->arch]);
    }
}

int fg_gpt_table(const fg_gpt_config *c, fg_gpt_param *out) {
    /* Table order: the "before" kinds, then each block's kinds, then the "after" kinds; in each
     * part the list's order, skipping the entries c lacks. */
    int i = 0;
    int64_t off = 0;
    for (int where = 0; where < 3; where++) {
        const int reps = where == 1 ? c->n_layer : 1;
        for (int l = 0; l < reps; l++)
            for (int k = 0; k < FG_GPT_KIND_COUNT; k++) {
                if (kinds[k].where != where || !param_present(c, kinds[k].present)) continue;
                if (out) fill_entry(c, &out[i], (fg_gpt_kind)k, where == 1 ? l : -1, &off);
                i++;
            }
    }
    return i;
}

/* A contiguous view of flat[offset .. offset + numel) as (rows, cols), or (rows) when cols is 0. */
static fg_tensor *range_view(fg_tensor *flat, int64_t offset, int64_t rows, int64_t cols) {
    const int64_t numel = cols ? rows * cols : rows;
    fg_tensor *s = fg_view_slice(flat, 0, offset, offset + numel);
    if (!s) return NULL;
    int64_t shape[2] = {rows, cols};
    fg_tensor *v = fg_view_reshape(s, cols ? 2 : 1, shape);
    fg_release(s);
    return v;
}

/* A leaf over params_flat[offset ..) whose gradient is the same range of grads_flat. */
static fg_tensor *leaf_view(fg_gpt *g, int64_t offset, int64_t rows, int64_t cols, const char *name) {
    fg_tensor *w = range_view(g->params_flat, offset, rows, cols);
    fg_tensor *gv = w ? range_view(g->grads_flat, offset, rows, cols) : NULL;
    fg_status st = gv ? fg_set_requires_grad(w, 1) : fg_last_status();
    if (st == FG_OK) st = fg_set_grad_storage(w, gv);
    fg_release(gv);
    if (st != FG_OK) {
        fg_release(w);
        return NULL;
    }
    w->name = name;
    return w;
}

/* The fused leaves of layer l (slot FUSED_QKV_W ...): one view over adjacent entries, so that
 * q, k, v (and gate, up) are one GEMM whatever the names. */
enum { FUSED_QKV_W = 0, FUSED_QKV_B, FUSED_GU_W, FUSED_GU_B, FUSED_COUNT };

static fg_status make_fused(fg_gpt *g) {
    const fg_gpt_config *c = &g->cfg;
    static const struct {
        fg_gpt_kind first, last;
        const char *name;
    } spans[FUSED_COUNT] = {{FG_GPT_Q_W, FG_GPT_V_W, "qkv.weight"},
                            {FG_GPT_Q_B, FG_GPT_V_B, "qkv.bias"},
                            {FG_GPT_GATE_W, FG_GPT_FC_W, "gate_up.weight"},
                            {FG_GPT_GATE_B, FG_GPT_FC_B, "gate_up.bias"}};
    for (int l = 0; l < c->n_layer; l++)
        for (int f = 0; f < FUSED_COUNT; f++) {
            const fg_tensor *a = fg_gpt_weight(g, spans[f].first, l), *b = fg_gpt_weight(g, spans[f].last, l);
            if (!a || !b) continue;
            const fg_gpt_param *pa = NULL, *pb = NULL;
            for (int j = 0; j < g->n_params; j++) {
                if (g->params[j].w == a) pa = &g->params[j];
                if (g->params[j].w == b) pb = &g->params[j];
            }
            const int64_t rows = (pb->offset + pb->numel - pa->offset) / (pa->ndim == 2 ? pa->shape[1] : 1);
            fg_tensor *w = leaf_view(g, pa->offset, rows, pa->ndim == 2 ? pa->shape[1] : 0, spans[f].name);
            if (!w) return fg_last_status();
            g->fused[(size_t)l * FUSED_COUNT + (size_t)f] = w;
        }
    return FG_OK;
}

fg_gpt *fg_gpt_create_empty(const fg_gpt_config *cfg) {
    if (fg_gpt_config_check(cfg) != FG_OK) return NULL;
    fg_autograd_init();
    fg_gpt *g = calloc(1, sizeof *g);
    if (!g) {
        fg_error(FG_ERR_OOM, "gpt: out of memory");
        return NULL;
    }
    g->cfg = *cfg;
    g->n_params = fg_gpt_table(cfg, NULL);
    g->params = calloc((size_t)g->n_params, sizeof *g->params);
    g->by_kind = calloc((size_t)FG_GPT_KIND_COUNT * (size_t)(cfg->n_layer + 1), sizeof *g->by_kind);
    g->fused = calloc((size_t)FUSED_COUNT * (size_t)cfg->n_layer, sizeof *g->fused);
    if (!g->params || !g->by_kind || !g->fused) {
        fg_error(FG_ERR_OOM, "gpt: out of memory");
        fg_gpt_free(g);
        return NULL;
    }
    fg_gpt_table(cfg, g->params);
    const fg_gpt_param *last = &g->params[g->n_params - 1];
    g->num_elements = last->offset + last->numel;

    int64_t n = g->num_elements;
    g->params_flat = fg_zeros(cfg->dtype, cfg->device, 1, &n);
    g->grads_flat = g->params_flat ? fg_zeros(cfg->dtype, cfg->device, 1, &n) : NULL;
    if (!g->grads_flat) {
        fg_gpt_free(g);
        return NULL;
    }
    for (int j = 0; j < g->n_params; j++) {
        fg_gpt_param *p = &g->params[j];
        /* the gradient lives in grads_flat, so zeroing, clipping and AdamW are flat loops */
        p->w = leaf_view(g, p->offset, p->shape[0], p->ndim == 2 ? p->shape[1] : 0, p->name);
        if (!p->w) {
            fg_gpt_free(g);
            return NULL;
        }
        g->by_kind[p->kind * (cfg->n_layer + 1) + (p->layer < 0 ? 0 : p->layer)] = p->w;
    }
    if (make_fused(g) != FG_OK) {
        fg_gpt_free(g);
        return NULL;
    }
    return g;
}

/* One piece of a parameter's initial values (fg_rand_normal_range; any thread). */
#define INIT_PIECE 65536
typedef struct {
    double *out;
    int64_t n;
    double std;
    uint64_t seed, stream;
} init_job;

static void init_piece(void *ctx, int64_t item, int worker) {
    (void)worker;
    const init_job *J = ctx;
    const int64_t k0 = item * INIT_PIECE, k1 = J->n - k0 < INIT_PIECE ? J->n : k0 + INIT_PIECE;
    fg_rand_normal_range(J->out + k0, k0, k1, 0.0, J->std, J->seed, J->stream);
}

fg_gpt *fg_gpt_create(const fg_gpt_config *cfg, uint64_t seed) {
    fg_gpt *g = fg_gpt_create_empty(cfg);
    if (!g) return NULL;
    const double std = 0.02, resid_std = 0.02 / sqrt(2.0 * cfg->n_layer);
    for (int j = 0; j < g->n_params; j++) {
        fg_gpt_param *p = &g->params[j];
        fg_status st = FG_OK;
        if (p->init == FG_INIT_ONES) {
            st = fg_fill(p->w, 1.0);
        } else if (p->init == FG_INIT_NORMAL || p->init == FG_INIT_RESID) {
            /* Drawn in float64 and converted, so float32 and float64 models start alike: the
             * values of fg_rand_normal, filled in pieces on the pool */
            fg_tensor *r = fg_empty(FG_F64, FG_CPU, p->w->ndim, p->w->shape);
            if (r) {
                init_job J = {fg_data(r), fg_numel(r), p->init == FG_INIT_RESID ? resid_std : std, seed,
                              FG_GPT_INIT_STREAM + (uint64_t)j};
                fg_pool_run((J.n + INIT_PIECE - 1) / INIT_PIECE, init_piece, &J, 0);
            }
            /* on a device: the same host numbers, copied over (fg_to), so a cuda model starts
             * bit-identical to a CPU one */
            fg_tensor *d = r && p->w->device != FG_CPU ? fg_to(r, p->w->device, p->w->dtype) : fg_retain(r);
            st = d ? fg_copy_into(p->w, d) : fg_last_status();
            fg_release(d);
            fg_release(r);
        }
        if (st != FG_OK) {
            fg_gpt_free(g);
            return NULL;
        }
    }
    return g;
}

void fg_gpt_free(fg_gpt *g) {
    if (!g) return;
    if (g->params)
        for (int j = 0; j < g->n_params; j++) fg_release(g->params[j].w);
    if (g->fused)
        for (int j = 0; j < FUSED_COUNT * g->cfg.n_layer; j++) fg_release(g->fused[j]);
    fg_release(g->params_flat);
    fg_release(g->grads_flat);
    free(g->params);
    free(g->by_kind);
    free(g->fused);
    free(g);
}

fg_tensor *fg_gpt_weight(const fg_gpt *g, fg_gpt_kind kind, int layer) {
    if (kinds[kind].where != 1) layer = 0;
    return g->by_kind[kind * (g->cfg.n_layer + 1) + layer];
}

const fg_gpt_param *fg_gpt_find(const fg_gpt *g, const char *name) {
    for (int j = 0; j < g->n_params; j++)
        if (!strcmp(g->params[j].name, name)) return &g->params[j];
    return NULL;
}

void fg_gpt_zero_grad(fg_gpt *g) { fg_fill(g->grads_flat, 0.0); }

/* ---- dropout seeds ---- */

uint64_t fg_gpt_dropout_seed(const fg_gpt_train_ctx *ctx, int layer, fg_gpt_drop_site site) {
    /* One Philox block per (step, micro) on a stream per (layer, site): distinct sites can never
     * share a mask, and the seed depends on nothing but these numbers. */
    uint64_t stream = FG_GPT_DROPOUT_STREAM | ((uint64_t)(uint32_t)(layer + 1) << 8) | (uint64_t)site;
    uint32_t w[4];
    fg_philox_block(ctx->seed, stream, (ctx->step << 20) | (uint64_t)(ctx->micro & 0xFFFFF), w);
    return ((uint64_t)w[1] << 32) | w[0];
}

/* ---- forward ---- */

/* Take ownership of an op's result; on NULL jump to the failure path. */
#define TAKE(var, expr)                                                                                                \
    do {                                                                                                               \
        fg_tensor *tmp_ = (expr);                                                                                      \
        if (!tmp_) goto fail;                                                                                          \
        fg_release(var);                                                                                               \
        (var) = tmp_;                                                                                                  \
    } while (0)

static fg_tensor *maybe_dropout(fg_gpt *g, fg_tensor *x, const fg_gpt_train_ctx *train, int layer,
                                fg_gpt_drop_site site) {
    if (!train || g->cfg.dropout == 0.0) return fg_retain(x);
    return fg_dropout(x, g->cfg.dropout, fg_gpt_dropout_seed(train, layer, site), 0);
}

/* ---- the pieces every architecture is made of ---- */

/* The model's norm of x (..., C) with weight w and bias b (either NULL where absent): layernorm,
 * rmsnorm with a weight, or rmsnorm without one, each with cfg's eps. */
static fg_tensor *model_norm(const fg_gpt *g, fg_tensor *x, fg_tensor *w, fg_tensor *b) {
    const double eps = fg_gpt_eps(&g->cfg);
    switch (g->cfg.norm) {
    case FG_NORM_RMSNORM:
        return fg_rmsnorm(x, w, eps);
    case FG_NORM_RMSNORM_FREE:
        return fg_rmsnorm(x, NULL, eps);
    default:
        return fg_layernorm(x, w, b, eps);
    }
}

/* The MLP's activation of fc (..., I) — of (..., 2I) for swiglu, gate then up — -> (..., I). */
static fg_tensor *mlp_act(const fg_gpt *g, fg_tensor *fc) {
    switch (g->cfg.mlp) {
    case FG_MLP_RELU2:
        return fg_relu2(fc);
    case FG_MLP_SWIGLU:
        return fg_swiglu_packed(fc);
    default:
        return fg_gelu(fc);
    }
}

/* Layer l's q|k|v projection (weight (QKV, C), bias (QKV) or NULL) and gate|up (or c_fc) one. */
static fg_tensor *qkv_weight(const fg_gpt *g, int l) {
    fg_tensor *w = fg_gpt_weight(g, FG_GPT_ATTN_W, l);
    return w ? w : g->fused[(size_t)l * FUSED_COUNT + FUSED_QKV_W];
}
static fg_tensor *qkv_bias(const fg_gpt *g, int l) {
    fg_tensor *b = fg_gpt_weight(g, FG_GPT_ATTN_B, l);
    return b ? b : g->fused[(size_t)l * FUSED_COUNT + FUSED_QKV_B];
}
static fg_tensor *fc_weight(const fg_gpt *g, int l) {
    fg_tensor *w = g->fused[(size_t)l * FUSED_COUNT + FUSED_GU_W];
    return w ? w : fg_gpt_weight(g, FG_GPT_FC_W, l);
}
static fg_tensor *fc_bias(const fg_gpt *g, int l) {
    fg_tensor *b = g->fused[(size_t)l * FUSED_COUNT + FUSED_GU_B];
    return b ? b : fg_gpt_weight(g, FG_GPT_FC_B, l);
}
/* The LM head's weight (V, C): lm_head, or the token embedding when tied. */
static fg_tensor *head_weight(const fg_gpt *g) {
    fg_tensor *w = fg_gpt_weight(g, FG_GPT_HEAD_W, 0);
    return w ? w : fg_gpt_weight(g, FG_GPT_WTE, 0);
}

/* ---- pointwise recomputation (FG_RECOMPUTE_POINTWISE; fg_recompute_drop) ----
 * The pointwise outputs a block's matmuls save: the norms' outputs before the qkv and the c_fc
 * projections (B, T, C) and the MLP activation's (B, T, I). Each is given back once its matmul has
 * run and recomputed, with the same function, from the pointwise op's own input (which that op keeps
 * anyway) just before the matmul's backward. */
typedef enum { PW_LN1, PW_LN2, PW_ACT } pw_site;
typedef struct {
    fg_gpt *g;
    int l;
    pw_site site;
} pw_args;

/* the pointwise op of a site, in[0] its input: ln_1(x), ln_2(x) or act(c_fc output) */
static fg_tensor *pw_recompute(void *ctx, fg_tensor *const *in) {
    const pw_args *a = ctx;
    switch (a->site) {
    case PW_LN1:
        return model_norm(a->g, in[0], fg_gpt_weight(a->g, FG_GPT_LN1_W, a->l), fg_gpt_weight(a->g, FG_GPT_LN1_B, a->l));
    case PW_LN2:
        return model_norm(a->g, in[0], fg_gpt_weight(a->g, FG_GPT_LN2_W, a->l), fg_gpt_weight(a->g, FG_GPT_LN2_B, a->l));
    default:
        return mlp_act(a->g, in[0]);
    }
}

/* y, the output of the matmul that read h = the site's op of `in`: with block l pointwise, h is
 * dropped (recomputed in the backward); otherwise y as it is. New reference. */
static fg_tensor *pointwise_drop(fg_gpt *g, int l, pw_site site, fg_tensor *y, fg_tensor *h, fg_tensor *in) {
    if (fg_gpt_layer_recompute(&g->cfg, l) != FG_RECOMPUTE_POINTWISE) return fg_retain(y);
    pw_args a = {g, l, site};
    return fg_recompute_drop(y, h, pw_recompute, &a, sizeof a, 1, &in);
}

/* Layer l's attention options: causal, GQA, its window. */
static fg_attn_opts layer_attn_opts(const fg_gpt *g, int l) {
    fg_attn_opts o = fg_attn_defaults();
    o.impl = g->cfg.attn;
    o.causal = 1;
    if (fg_gpt_kv_heads(&g->cfg) != g->cfg.n_head) o.variant.n_kv_heads = fg_gpt_kv_heads(&g->cfg);
    const int w = fg_gpt_layer_window(&g->cfg, l);
    if (w > 0) {
        o.variant.window = 1;
        o.variant.window_left = w;
        o.variant.window_right = 0;
    }
    return o;
}

/* qkv (B, T, QKV) with the rotary embedding (positions pos0 + t) and the QK-norm on its q and k
 * heads where the config has them, v as it is, in one pass; the rows stay packed for
 * fg_attention_qkv. nanochat's rotary turns by minus the angle (rotary -1). New reference (qkv
 * itself, retained, for a model with neither). */
static fg_tensor *rotate_qkv(const fg_gpt *g, fg_tensor *qkv, int64_t pos0) {
    if (g->cfg.pos == FG_POS_LEARNED && !g->cfg.qk_norm) return fg_retain(qkv);
    int rotary = 0;
    if (g->cfg.pos == FG_POS_ROPE) rotary = 1;
    if (g->cfg.pos == FG_POS_ROPE_NANOCHAT) rotary = -1;
    const fg_rope_qkv_opts o = {
        .n_head = g->cfg.n_head,
        .n_kv_heads = fg_gpt_kv_heads(&g->cfg),
        .rotary = rotary,
        .theta = fg_gpt_theta(&g->cfg),
        .pos0 = pos0,
        .qk_norm = g->cfg.qk_norm,
        .eps = fg_gpt_eps(&g->cfg),
    };
    return fg_rope_qkv(qkv, &o);
}

/* The heads of one part of qkv (B, T, QKV): columns [c0, c0 + n hd) as a (B, n, T, hd) view. */
static fg_tensor *heads_of(const fg_gpt *g, fg_tensor *qkv, int64_t c0, int64_t n) {
    const int64_t B = qkv->shape[0], T = qkv->shape[1], hd = fg_gpt_head_dim(&g->cfg);
    fg_tensor *x = NULL;
    TAKE(x, fg_slice(qkv, 2, c0, c0 + n * hd));
    TAKE(x, fg_reshape(x, 4, (int64_t[]){B, T, n, hd}));
    TAKE(x, fg_permute(x, (int[]){0, 2, 1, 3}));
    return x;
fail:
    fg_release(x);
    return NULL;
}

/* One block's attention branch. x is (B, T, C); returns c_proj(attn(...)) (B, T, C). */
static fg_tensor *attention_branch(fg_gpt *g, fg_tensor *x, int l, const fg_gpt_train_ctx *train) {
    const int64_t H = g->cfg.n_head;
    fg_tensor *h = NULL, *qkv = NULL, *y = NULL;
    TAKE(h, model_norm(g, x, fg_gpt_weight(g, FG_GPT_LN1_W, l), fg_gpt_weight(g, FG_GPT_LN1_B, l)));
    TAKE(qkv, fg_linear(h, qkv_weight(g, l), qkv_bias(g, l))); /* (B,T,QKV) */
    TAKE(qkv, pointwise_drop(g, l, PW_LN1, qkv, h, x));
    fg_attn_opts o = layer_attn_opts(g, l);
    if (train && g->cfg.dropout > 0) {
        o.dropout_p = g->cfg.dropout;
        o.seed = fg_gpt_dropout_seed(train, l, FG_DROP_ATTN);
    }
    /* rotary embedding and QK-norm act on q and k between the projection and the attention */
    TAKE(qkv, rotate_qkv(g, qkv, 0));
    /* q, k, v are the parts of each row, H, H_kv, H_kv heads of hd each; y (B, T, C) has the
     * heads side by side: fg_attention_qkv moves the heads without autograd views */
    TAKE(y, fg_attention_qkv(qkv, H, &o));
    TAKE(y, fg_linear(y, fg_gpt_weight(g, FG_GPT_APROJ_W, l), fg_gpt_weight(g, FG_GPT_APROJ_B, l)));
    TAKE(y, maybe_dropout(g, y, train, l, FG_DROP_ATTN_RESID));
    fg_release(h);
    fg_release(qkv);
    return y;
fail:
    fg_release(h);
    fg_release(qkv);
    fg_release(y);
    return NULL;
}

/* One block's MLP branch. x is (B, T, C); returns mlp.c_proj(act(mlp.c_fc(ln_2(x)))) (B, T, C). */
static fg_tensor *mlp_branch(fg_gpt *g, fg_tensor *x, int l, const fg_gpt_train_ctx *train) {
    fg_tensor *h = NULL, *a = NULL, *y = NULL;
    TAKE(a, model_norm(g, x, fg_gpt_weight(g, FG_GPT_LN2_W, l), fg_gpt_weight(g, FG_GPT_LN2_B, l)));
    TAKE(h, fg_linear(a, fc_weight(g, l), fc_bias(g, l))); /* (B,T,I), or (B,T,2I): gate|up */
    TAKE(h, pointwise_drop(g, l, PW_LN2, h, a, x));
    TAKE(a, mlp_act(g, h)); /* (B,T,I) */
    TAKE(y, fg_linear(a, fg_gpt_weight(g, FG_GPT_MPROJ_W, l), fg_gpt_weight(g, FG_GPT_MPROJ_B, l))); /* (B,T,C) */
    TAKE(y, pointwise_drop(g, l, PW_ACT, y, a, h));
    TAKE(y, maybe_dropout(g, y, train, l, FG_DROP_MLP_RESID));
    fg_release(h);
    fg_release(a);
    return y;
fail:
    fg_release(h);
    fg_release(a);
    fg_release(y);
    return NULL;
}

/* ---- activation checkpointing (cfg.recompute; autograd/recompute.h) ----
 * The checkpointed functions get everything they depend on by value in ckpt_args: the dropout
 * seeds are pure functions of (train, layer, site), so the recomputation draws the same masks. */
typedef struct {
    fg_gpt *g;
    int l;
    int has_train;
    fg_gpt_train_ctx train;
} ckpt_args;

/* x (B, T, C) -> attention_branch(x) (B, T, C) */
static fg_tensor *ckpt_attention(void *ctx, fg_tensor *const *in) {
    const ckpt_args *a = ctx;
    return attention_branch(a->g, in[0], a->l, a->has_train ? &a->train : NULL);
}

/* x (B, T, C) -> mlp_branch(x) (B, T, C) */
static fg_tensor *ckpt_mlp(void *ctx, fg_tensor *const *in) {
    const ckpt_args *a = ctx;
    return mlp_branch(a->g, in[0], a->l, a->has_train ? &a->train : NULL);
}

/* One block, x (B, T, C) -> x + attn(x), then + mlp(...) (B, T, C) */
static fg_tensor *block_forward(fg_gpt *g, fg_tensor *x_in, int l, const fg_gpt_train_ctx *train) {
    fg_tensor *x = fg_retain(x_in), *br = NULL;
    const fg_gpt_recompute rc = fg_gpt_layer_recompute(&g->cfg, l);
    ckpt_args a = {.g = g, .l = l, .has_train = train != NULL};
    if (train) a.train = *train;
    if (rc == FG_RECOMPUTE_ATTN) {
        TAKE(br, fg_recompute(ckpt_attention, &a, sizeof a, 1, &x));
    } else {
        TAKE(br, attention_branch(g, x, l, train));
    }
    TAKE(x, fg_add(x, br));
    if (rc == FG_RECOMPUTE_MLP) {
        TAKE(br, fg_recompute(ckpt_mlp, &a, sizeof a, 1, &x));
    } else {
        TAKE(br, mlp_branch(g, x, l, train));
    }
    TAKE(x, fg_add(x, br));
    fg_release(br);
    return x;
fail:
    fg_release(x);
    fg_release(br);
    return NULL;
}

static fg_tensor *ckpt_block(void *ctx, fg_tensor *const *in) {
    const ckpt_args *a = ctx;
    return block_forward(a->g, in[0], a->l, a->has_train ? &a->train : NULL);
}

/* idx (B, T) -> the final layernorm's output (B, T, C), the LM head's input */
static fg_tensor *gpt_hidden(fg_gpt *g, const int32_t *idx, int B, int T, const fg_gpt_train_ctx *train) {
    if (B < 1 || T < 1 || T > g->cfg.block_size) {
        fg_error(FG_ERR_ARG, "gpt: batch (%d, %d) needs B >= 1 and 1 <= T <= block_size %d", B, T, g->cfg.block_size);
        return NULL;
    }
    fg_tensor *x = NULL, *pos = NULL, *br = NULL;
    TAKE(x, fg_embedding(fg_gpt_weight(g, FG_GPT_WTE, 0), idx, 2, (int64_t[]){B, T})); /* (B,T,C) */
    if (g->cfg.pos == FG_POS_LEARNED) {
        TAKE(pos, fg_slice(fg_gpt_weight(g, FG_GPT_WPE, 0), 0, 0, T)); /* (T,C) view */
        TAKE(x, fg_add(x, pos));                                       /* broadcast over B */
    }
    TAKE(x, maybe_dropout(g, x, train, -1, FG_DROP_EMB));
    if (g->cfg.emb_norm)
        TAKE(x, model_norm(g, x, fg_gpt_weight(g, FG_GPT_EMBN_W, 0), fg_gpt_weight(g, FG_GPT_EMBN_B, 0)));
    for (int l = 0; l < g->cfg.n_layer; l++) {
        if (fg_gpt_layer_recompute(&g->cfg, l) == FG_RECOMPUTE_BLOCK) {
            ckpt_args a = {.g = g, .l = l, .has_train = train != NULL};
            if (train) a.train = *train;
            TAKE(x, fg_recompute(ckpt_block, &a, sizeof a, 1, &x));
        } else {
            TAKE(x, block_forward(g, x, l, train));
        }
    }
    TAKE(x, model_norm(g, x, fg_gpt_weight(g, FG_GPT_LNF_W, 0), fg_gpt_weight(g, FG_GPT_LNF_B, 0)));
    fg_release(pos);
    fg_release(br);
    return x;
fail:
    fg_release(x);
    fg_release(pos);
    fg_release(br);
    return NULL;
}

fg_tensor *fg_gpt_forward(fg_gpt *g, const int32_t *idx, int B, int T, const fg_gpt_train_ctx *train) {
    fg_tensor *h = gpt_hidden(g, idx, B, T, train);
    fg_tensor *logits = h ? fg_linear(h, head_weight(g), NULL) : NULL; /* (B,T,V) */
    fg_release(h);
    if (logits && g->cfg.logit_softcap > 0) {
        fg_tensor *c = fg_softcap(logits, g->cfg.logit_softcap);
        fg_release(logits);
        logits = c;
    }
    return logits;
}

/* The LM head, the logit softcap (if any) and the loss as one op (fg_linear_cross_entropy): the
 * (B, T, V) logits are never all live, the same numbers as cross_entropy(fg_gpt_forward(...)). */
fg_tensor *fg_gpt_loss(fg_gpt *g, const int32_t *idx, const int32_t *targets, int B, int T,
                       const fg_gpt_train_ctx *train) {
    fg_tensor *h = gpt_hidden(g, idx, B, T, train);
    if (!h) return NULL;
    fg_tensor *loss = fg_linear_cross_entropy(h, head_weight(g), targets, g->cfg.logit_softcap, 0);
    fg_release(h);
    return loss;
}

/* ---- the KV cache ----
 * Buffers, in the model's dtype (es bytes an element), T = block_size rows:
 *   k, v   (L, H, T, hd)   the cache: head h of layer l, position t at ((l H + h) T + t) hd
 *   x      (T, C)          the residual stream of the new rows
 *   h      (T, C)          a layernorm's or a projection's output
 *   qkv    (T, 3C)         c_attn's output
 *   q, o   (H, T, hd)      the new rows' queries and attention outputs, head-major (the kernels' layout)
 *   y      (T, C)          the heads' outputs side by side
 *   fc, ac (T, 4C)         c_fc's output and its gelu
 *   mean, rstd (T), lse (H, T)   what the kernels write beside their outputs
 *   logits (V)             the LM head on the last new row */
struct fg_gpt_kv {
    fg_gpt_config cfg;
    int len;
    size_t es;
    char *k, *v, *x, *h, *qkv, *q, *o, *y, *fc, *ac, *mean, *rstd, *lse, *logits;
};

static const size_t kv_count = 14;

static char **kv_slot(fg_gpt_kv *kv, size_t i) {
    char **s[] = {&kv->k,  &kv->v,  &kv->x,    &kv->h,    &kv->qkv, &kv->q,   &kv->o,
                  &kv->y,  &kv->fc, &kv->ac,   &kv->mean, &kv->rstd, &kv->lse, &kv->logits};
    return s[i];
}

fg_gpt_kv *fg_gpt_kv_create(const fg_gpt *g) {
    const fg_gpt_config *c = &g->cfg;
    if (c->device != FG_CPU) {
        fg_error(FG_ERR_DEVICE, "gpt: the KV cache runs CPU models only (this one is on %s)", fg_device_name(c->device));
        return NULL;
    }
    fg_gpt_kv *kv = calloc(1, sizeof *kv);
    if (!kv) {
        fg_error(FG_ERR_OOM, "gpt: out of memory for the KV cache");
        return NULL;
    }
    kv->cfg = *c;
    kv->es = c->dtype == FG_F64 ? 8 : 4;
    const size_t L = (size_t)c->n_layer, T = (size_t)c->block_size, C = (size_t)c->n_embd, H = (size_t)c->n_head;
    const size_t KV = (size_t)fg_gpt_kv_heads(c) * (size_t)fg_gpt_head_dim(c); /* a row of k or v */
    /* the buffers after k and v serve the GPT-2 path only; other architectures run the ops on
     * tensors and keep only k and v here */
    const size_t s = fg_gpt_is_gpt2(c) ? 1 : 0;
    const size_t n[14] = {
        L * T * KV, L * T * KV,    s * T * C,     s * T * C, s * 3 * T * C, s * T * C, s * T * C,
        s * T * C,  s * 4 * T * C, s * 4 * T * C, s * T,     s * T,         s * H * T, (size_t)c->vocab_size};
    for (size_t i = 0; i < kv_count; i++) {
        if (n[i] == 0) continue;
        char *p = fg_alloc(FG_CPU, n[i] * kv->es);
        if (!p) {
            fg_gpt_kv_free(kv);
            return NULL;
        }
        /* touched here once, so that the first tokens do not pay for fresh pages */
        memset(p, 0, n[i] * kv->es);
        *kv_slot(kv, i) = p;
    }
    return kv;
}

void fg_gpt_kv_free(fg_gpt_kv *kv) {
    if (!kv) return;
    for (size_t i = 0; i < kv_count; i++)
        if (*kv_slot(kv, i)) fg_free(FG_CPU, *kv_slot(kv, i));
    free(kv);
}

void fg_gpt_kv_reset(fg_gpt_kv *kv) { kv->len = 0; }

int fg_gpt_kv_len(const fg_gpt_kv *kv) { return kv->len; }

/* dst (n, C) += src (n, C) */
static void kv_add(fg_dtype dt, char *dst, const char *src, size_t n) {
    if (dt == FG_F32) {
        float *d = (float *)dst;
        const float *s = (const float *)src;
        for (size_t i = 0; i < n; i++) d[i] += s[i];
    } else {
        double *d = (double *)dst;
        const double *s = (const double *)src;
        for (size_t i = 0; i < n; i++) d[i] += s[i];
    }
}

/* 1 when every layer has the same window under a and b. */
static int same_windows(const fg_gpt_config *a, const fg_gpt_config *b) {
    const int L = a->n_layer > b->n_layer ? a->n_layer : b->n_layer;
    for (int l = 0; l < L; l++)
        if (fg_gpt_layer_window(a, l) != fg_gpt_layer_window(b, l)) return 0;
    return 1;
}

int fg_gpt_same_arch(const fg_gpt_config *a, const fg_gpt_config *b) {
    return a->arch == b->arch && fg_gpt_kv_heads(a) == fg_gpt_kv_heads(b) && a->pos == b->pos &&
           fg_gpt_theta(a) == fg_gpt_theta(b) && a->norm == b->norm && fg_gpt_eps(a) == fg_gpt_eps(b) &&
           a->emb_norm == b->emb_norm && a->qk_norm == b->qk_norm && a->mlp == b->mlp &&
           fg_gpt_hidden(a) == fg_gpt_hidden(b) && a->no_bias == b->no_bias && a->untie_head == b->untie_head &&
           a->logit_softcap == b->logit_softcap && same_windows(a, b);
}

/* The cache for every architecture but plain GPT-2: the forward's own ops (no grad) on the n new
 * rows, positions len .. len + n − 1 (rotary with pos0 = len), with K and V of every position kept
 * per layer and KV head in kv->k, kv->v, (L, H_kv, T, hd); each layer's n queries attend to the
 * len + n cached keys under its options (GQA, window; causal bottom-right). */
static fg_status kv_append_ops(fg_gpt *g, fg_gpt_kv *kv, const int32_t *idx, int n, double *logits) {
    const fg_gpt_config *c = &g->cfg;
    const int64_t H = c->n_head, Hkv = fg_gpt_kv_heads(c), hd = fg_gpt_head_dim(c), T = c->block_size;
    const int64_t len = kv->len, N = len + n, V = c->vocab_size;
    const size_t es = kv->es, head = (size_t)T * (size_t)hd * es; /* bytes of one KV head's cache */
    fg_tensor *x = NULL, *t = NULL, *h = NULL, *qkv = NULL, *q = NULL, *k = NULL, *v = NULL, *y = NULL;
    fg_tensor *kc = NULL, *vc = NULL;
    TAKE(x, fg_embedding(fg_gpt_weight(g, FG_GPT_WTE, 0), idx, 2, (int64_t[]){1, n})); /* (1,n,C) */
    if (c->pos == FG_POS_LEARNED) {
        TAKE(t, fg_slice(fg_gpt_weight(g, FG_GPT_WPE, 0), 0, len, N));
        TAKE(x, fg_add(x, t));
    }
    if (c->emb_norm) TAKE(x, model_norm(g, x, fg_gpt_weight(g, FG_GPT_EMBN_W, 0), fg_gpt_weight(g, FG_GPT_EMBN_B, 0)));
    for (int l = 0; l < c->n_layer; l++) {
        TAKE(h, model_norm(g, x, fg_gpt_weight(g, FG_GPT_LN1_W, l), fg_gpt_weight(g, FG_GPT_LN1_B, l)));
        TAKE(qkv, fg_linear(h, qkv_weight(g, l), qkv_bias(g, l))); /* (1,n,QKV) */
        TAKE(qkv, rotate_qkv(g, qkv, len));                        /* rotary at positions len .. */
        TAKE(q, heads_of(g, qkv, 0, H));                           /* (1,H,n,hd) */
        TAKE(k, heads_of(g, qkv, H * hd, Hkv));                    /* (1,H_kv,n,hd) */
        TAKE(v, heads_of(g, qkv, (H + Hkv) * hd, Hkv));            /* (1,H_kv,n,hd) */
        TAKE(k, fg_make_contiguous(k));
        TAKE(v, fg_make_contiguous(v));
        char *kl = kv->k + (size_t)l * (size_t)Hkv * head, *vl = kv->v + (size_t)l * (size_t)Hkv * head;
        const size_t rows = (size_t)n * (size_t)hd * es, at = (size_t)len * (size_t)hd * es;
        for (int64_t j = 0; j < Hkv; j++) {
            memcpy(kl + (size_t)j * head + at, (const char *)fg_data(k) + (size_t)j * rows, rows);
            memcpy(vl + (size_t)j * head + at, (const char *)fg_data(v) + (size_t)j * rows, rows);
        }
        /* the cached keys and values 0 .. N − 1 of every KV head, as (1, H_kv, N, hd) views */
        const int64_t shape[4] = {1, Hkv, T, hd};
        TAKE(kc, fg_from_blob(c->dtype, 4, shape, kl));
        TAKE(kc, fg_slice(kc, 2, 0, N));
        TAKE(vc, fg_from_blob(c->dtype, 4, shape, vl));
        TAKE(vc, fg_slice(vc, 2, 0, N));
        const fg_attn_opts o = layer_attn_opts(g, l); /* causal bottom-right: query i sees keys <= len + i */
        TAKE(y, fg_attention(q, kc, vc, &o, NULL));   /* (1,H,n,hd) */
        TAKE(y, fg_permute(y, (int[]){0, 2, 1, 3}));
        TAKE(y, fg_reshape(y, 3, (int64_t[]){1, n, H * hd}));
        TAKE(y, fg_linear(y, fg_gpt_weight(g, FG_GPT_APROJ_W, l), fg_gpt_weight(g, FG_GPT_APROJ_B, l)));
        TAKE(x, fg_add(x, y));
        TAKE(y, mlp_branch(g, x, l, NULL));
        TAKE(x, fg_add(x, y));
    }
    kv->len = (int)N;
    if (logits) {
        /* the final norm, the head and the softcap on the last new row only */
        TAKE(t, fg_slice(x, 1, n - 1, n));
        TAKE(t, model_norm(g, t, fg_gpt_weight(g, FG_GPT_LNF_W, 0), fg_gpt_weight(g, FG_GPT_LNF_B, 0)));
        TAKE(t, fg_linear(t, head_weight(g), NULL));
        if (c->logit_softcap > 0) TAKE(t, fg_softcap(t, c->logit_softcap));
        TAKE(t, fg_make_contiguous(t));
        for (int64_t j = 0; j < V; j++)
            logits[j] = c->dtype == FG_F32 ? ((const float *)fg_data(t))[j] : ((const double *)fg_data(t))[j];
    }
    fg_status st = FG_OK;
    if (0) {
    fail:
        st = fg_last_status();
        if (st == FG_OK) st = fg_error(FG_ERR_OOM, "gpt: the KV cache's step failed");
    }
    fg_release(x);
    fg_release(t);
    fg_release(h);
    fg_release(qkv);
    fg_release(q);
    fg_release(k);
    fg_release(v);
    fg_release(y);
    fg_release(kc);
    fg_release(vc);
    return st;
}

#define KV_W(kind, l) fg_data(fg_gpt_weight(g, FG_GPT_##kind, (l)))
#define KV_TRY(expr)                                                                                                   \
    do {                                                                                                               \
        fg_status st_ = (expr);                                                                                        \
        if (st_ != FG_OK) return st_;                                                                                  \
    } while (0)

fg_status fg_gpt_kv_append(fg_gpt *g, fg_gpt_kv *kv, const int32_t *idx, int n, double *logits) {
    const fg_gpt_config *c = &g->cfg;
    if (c->n_layer != kv->cfg.n_layer || c->n_head != kv->cfg.n_head || c->n_embd != kv->cfg.n_embd ||
        c->block_size != kv->cfg.block_size || c->vocab_size != kv->cfg.vocab_size || c->dtype != kv->cfg.dtype ||
        c->device != FG_CPU || !fg_gpt_same_arch(c, &kv->cfg))
        return fg_error(FG_ERR_ARG, "gpt: the KV cache was made for a model of other shapes");
    if (n < 1 || n > c->block_size - kv->len)
        return fg_error(FG_ERR_ARG, "gpt: %d new tokens do not fit the KV cache (%d of block_size %d held)", n, kv->len,
                        c->block_size);
    const int64_t V = c->vocab_size, C = c->n_embd, H = c->n_head, hd = C / H, T = c->block_size;
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= V)
            return fg_error(FG_ERR_ARG, "gpt: token %d (number %d) is outside the vocabulary of %lld", (int)idx[i], i,
                            (long long)V);
    if (!fg_gpt_is_gpt2(c)) {
        fg_no_grad_enter();
        fg_status st = kv_append_ops(g, kv, idx, n, logits);
        fg_no_grad_exit();
        return st;
    }
    const fg_dtype dt = c->dtype;
    const fg_device D = FG_CPU;
    const size_t es = kv->es, row = (size_t)C * es;
    const int64_t len = kv->len, N = len + n; /* keys after this call */

    /* x = wte[idx] + wpe[len .. len + n) */
    KV_TRY(fg_infer_embedding(D, dt, kv->x, KV_W(WTE, 0), idx, n, V, C));
    kv_add(dt, kv->x, (const char *)KV_W(WPE, 0) + (size_t)len * row, (size_t)n * (size_t)C);

    fg_attn_opts ao = fg_attn_defaults();
    ao.impl = c->attn;
    ao.causal = 1; /* bottom-right: new query i (position len + i) sees keys 0 .. len + i */
    const int64_t q_head = (int64_t)n * hd, kv_head = T * hd; /* elements from one head to the next */
    for (int l = 0; l < c->n_layer; l++) {
        /* attention: qkv = c_attn(ln_1(x)) on the new rows */
        KV_TRY(fg_infer_layernorm(D, dt, kv->h, kv->mean, kv->rstd, kv->x, KV_W(LN1_W, l), KV_W(LN1_B, l), n, C, 1e-5));
        KV_TRY(fg_infer_linear(D, dt, kv->qkv, kv->h, KV_W(ATTN_W, l), KV_W(ATTN_B, l), n, 3 * C, C));
        /* each row [q | k | v], H heads of hd: q to (H, n, hd), k and v into the cache at len + i */
        const size_t hb = (size_t)hd * es, qb = (size_t)q_head * es, kb = (size_t)kv_head * es;
        char *kl = kv->k + (size_t)l * (size_t)H * kb, *vl = kv->v + (size_t)l * (size_t)H * kb;
        for (int i = 0; i < n; i++) {
            const char *r = kv->qkv + (size_t)i * 3 * row;
            for (int64_t h = 0; h < H; h++) {
                memcpy(kv->q + (size_t)h * qb + (size_t)i * hb, r + (size_t)h * hb, hb);
                memcpy(kl + (size_t)h * kb + (size_t)(len + i) * hb, r + row + (size_t)h * hb, hb);
                memcpy(vl + (size_t)h * kb + (size_t)(len + i) * hb, r + 2 * row + (size_t)h * hb, hb);
            }
        }
        /* each head's n new queries against its len + n cached keys */
        KV_TRY(fg_infer_attention(D, dt, &ao, H, n, N, hd, kv->o, kv->lse, kv->q, kl, vl, q_head, kv_head));
        /* heads side by side again: y[i, h hd ..] = o[h, i, ..] */
        for (int i = 0; i < n; i++)
            for (int64_t h = 0; h < H; h++)
                memcpy(kv->y + (size_t)i * row + (size_t)h * hb, kv->o + (size_t)h * qb + (size_t)i * hb, hb);
        KV_TRY(fg_infer_linear(D, dt, kv->h, kv->y, KV_W(APROJ_W, l), KV_W(APROJ_B, l), n, C, C));
        kv_add(dt, kv->x, kv->h, (size_t)n * (size_t)C);
        /* MLP: x += mlp.c_proj(gelu(mlp.c_fc(ln_2(x)))) */
        KV_TRY(fg_infer_layernorm(D, dt, kv->h, kv->mean, kv->rstd, kv->x, KV_W(LN2_W, l), KV_W(LN2_B, l), n, C, 1e-5));
        KV_TRY(fg_infer_linear(D, dt, kv->fc, kv->h, KV_W(FC_W, l), KV_W(FC_B, l), n, 4 * C, C));
        KV_TRY(fg_infer_gelu(D, dt, kv->ac, kv->fc, (int64_t)n * 4 * C));
        KV_TRY(fg_infer_linear(D, dt, kv->h, kv->ac, KV_W(MPROJ_W, l), KV_W(MPROJ_B, l), n, C, 4 * C));
        kv_add(dt, kv->x, kv->h, (size_t)n * (size_t)C);
    }
    kv->len = (int)N;
    if (!logits) return FG_OK;
    /* ln_f and the tied LM head on the last new row only */
    const char *last = kv->x + (size_t)(n - 1) * row;
    KV_TRY(fg_infer_layernorm(D, dt, kv->h, kv->mean, kv->rstd, last, KV_W(LNF_W, 0), KV_W(LNF_B, 0), 1, C, 1e-5));
    KV_TRY(fg_infer_linear(D, dt, kv->logits, kv->h, KV_W(WTE, 0), NULL, 1, V, C));
    for (int64_t j = 0; j < V; j++)
        logits[j] = dt == FG_F32 ? ((const float *)kv->logits)[j] : ((const double *)kv->logits)[j];
    return FG_OK;
}
#undef KV_W
#undef KV_TRY

/* ---- generation ---- */

/* Row `row` of the last time step of logits (B, T, V), as doubles. */
static fg_status last_logits(fg_tensor *logits, int row, double *out) {
    const int64_t T = logits->shape[1], V = logits->shape[2];
    if (logits->device != FG_CPU) {
        /* the (1, 1, V) view, read back with fg_to_host into out's memory, then widened in place
         * from the top down (element v's float32 is read before slot v's double is written) */
        fg_tensor *r = fg_view_slice(logits, 0, row, row + 1);
        fg_tensor *last = r ? fg_view_slice(r, 1, T - 1, T) : NULL;
        fg_status st = last ? fg_to_host(last, out) : fg_last_status();
        fg_release(last);
        fg_release(r);
        if (st == FG_OK && logits->dtype == FG_F32)
            for (int64_t v = V - 1; v >= 0; v--) {
                float f;
                memcpy(&f, (const char *)out + (size_t)v * sizeof f, sizeof f); /* no aliasing */
                out[v] = f;
            }
        return st;
    }
    int64_t base = ((int64_t)row * T + (T - 1)) * V;
    if (logits->dtype == FG_F32) {
        const float *p = (const float *)fg_data(logits) + base;
        for (int64_t v = 0; v < V; v++) out[v] = p[v];
    } else {
        const double *p = (const double *)fg_data(logits) + base;
        for (int64_t v = 0; v < V; v++) out[v] = p[v];
    }
    return FG_OK;
}

static int argmax(const double *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The logits the comparison below sorts ids by (qsort has no context argument). */
static _Thread_local const double *sort_keys;

/* descending by value, ties by the smaller id first: a fixed order */
static int by_value_desc(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    const double u = sort_keys[i], v = sort_keys[j];
    if (u != v) return u > v ? -1 : 1;
    return (i > j) - (i < j);
}

int fg_gpt_sample_logits(double *x, int n, double temperature, int top_k, double top_p, double u, int *order) {
    if (temperature <= 0) return argmax(x, n);
    double mx = x[argmax(x, n)];
    const int use_k = top_k > 0 && top_k < n, use_p = top_p > 0 && top_p < 1;
    if (use_k || use_p) {
        for (int i = 0; i < n; i++) order[i] = i;
        sort_keys = x;
        qsort(order, (size_t)n, sizeof *order, by_value_desc);
    }
    /* keep x >= the k-th largest value (ties with it included, as nanoGPT's torch.topk mask) */
    double kth = use_k ? x[order[top_k - 1]] : -INFINITY;
    double total = 0;
    for (int i = 0; i < n; i++) {
        x[i] = x[i] >= kth ? exp((x[i] - mx) / temperature) : 0.0;
        total += x[i];
    }
    if (use_p) {
        /* the smallest prefix of the sorted ids whose probability reaches top_p; the rest get 0 */
        double acc = 0, kept = 0;
        int r = 0;
        for (; r < n && x[order[r]] > 0; r++) {
            acc += x[order[r]];
            if (acc >= top_p * total) {
                r++;
                break;
            }
        }
        for (int q = r; q < n; q++) x[order[q]] = 0;
        for (int q = 0; q < r; q++) kept += x[order[q]];
        total = kept;
    }
    double target = u * total, acc = 0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] == 0) continue;
        acc += x[i];
        last = i;
        if (acc >= target) return i;
    }
    return last;
}

/* The logits of the next token after tokens[0 .. len) into row (V): the recompute over the last
 * block_size tokens, or the cache (appending what it lacks, or rebuilt from the cropped context). */
static fg_status next_logits(fg_gpt *g, fg_gpt_kv *kv, const int32_t *tokens, int len, double *row) {
    const int T = g->cfg.block_size;
    if (!kv) {
        int t = len < T ? len : T;
        fg_tensor *logits = fg_gpt_forward(g, tokens + (len - t), 1, t, NULL);
        if (!logits) return fg_last_status();
        fg_status st = last_logits(logits, 0, row);
        fg_release(logits);
        return st;
    }
    if (len > T) {
        /* the window moved: every kept token has a new position */
        fg_gpt_kv_reset(kv);
        return fg_gpt_kv_append(g, kv, tokens + (len - T), T, row);
    }
    const int have = fg_gpt_kv_len(kv);
    return fg_gpt_kv_append(g, kv, tokens + have, len - have, row);
}

fg_status fg_gpt_generate(fg_gpt *g, int32_t *tokens, int n_prompt, int n_new, const fg_sample_opts *o) {
    if (n_prompt < 1) return fg_error(FG_ERR_ARG, "generate: the prompt needs at least one token");
    if (n_new < 0) return fg_error(FG_ERR_ARG, "generate: n_new %d is negative", n_new);
    const int V = g->cfg.vocab_size;
    if (o->vocab_limit < 0 || o->vocab_limit > V)
        return fg_error(FG_ERR_ARG, "generate: vocab_limit %d is outside 0..%d", o->vocab_limit, V);
    if (!(o->top_p >= 0) || !(o->temperature >= 0))
        return fg_error(FG_ERR_ARG, "generate: temperature %g and top_p %g must be >= 0", o->temperature, o->top_p);
    for (int i = 0; i < n_prompt; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return fg_error(FG_ERR_ARG, "generate: prompt token %d (number %d) is outside the vocabulary of %d",
                            (int)tokens[i], i, V);
    const int n_ids = o->vocab_limit ? o->vocab_limit : V; /* ids that may be drawn */
    double *row = malloc((size_t)V * sizeof *row);
    int *order = malloc((size_t)V * sizeof *order);
    fg_gpt_kv *own = NULL, *kv = NULL;
    if (!o->no_cache && g->cfg.device == FG_CPU) {
        kv = o->kv ? o->kv : (own = fg_gpt_kv_create(g));
        if (!kv) {
            free(row);
            free(order);
            return fg_last_status();
        }
        fg_gpt_kv_reset(kv); /* it held another sequence */
    }
    fg_status st = FG_OK;
    if (!row || !order) st = fg_error(FG_ERR_OOM, "generate: out of memory");
    fg_no_grad_enter();
    for (int j = 0; j < n_new && st == FG_OK; j++) {
        int len = n_prompt + j;
        st = next_logits(g, kv, tokens, len, row);
        if (st != FG_OK) break;
        double u = fg_u32_to_uniform_f64(fg_philox_u32(o->seed, FG_GPT_SAMPLE_STREAM, (uint64_t)j));
        tokens[len] = fg_gpt_sample_logits(row, n_ids, o->temperature, o->top_k, o->top_p, u, order);
        if (o->on_token) o->on_token(o->user, j, tokens[len]);
    }
    fg_no_grad_exit();
    fg_gpt_kv_free(own);
    free(row);
    free(order);
    return st;
}

fg_status fg_gpt_greedy_batch(fg_gpt *g, int32_t *tokens, int B, int t0, int n_new) {
    const int W = t0 + n_new, V = g->cfg.vocab_size;
    if (t0 < 1 || n_new < 0 || (n_new > 0 && t0 + n_new - 1 > g->cfg.block_size))
        return fg_error(FG_ERR_ARG, "greedy: prompt %d + %d new tokens do not fit block_size %d", t0, n_new,
                        g->cfg.block_size);
    int32_t *ctx = malloc((size_t)B * (size_t)W * sizeof *ctx);
    double *row = malloc((size_t)V * sizeof *row);
    fg_status st = FG_OK;
    if (!ctx || !row) st = fg_error(FG_ERR_OOM, "greedy: out of memory");
    fg_no_grad_enter();
    for (int j = 0; j < n_new && st == FG_OK; j++) {
        int t = t0 + j;
        /* the first t tokens of each row, packed as (B, t) */
        for (int b = 0; b < B; b++) memcpy(ctx + (size_t)b * t, tokens + (size_t)b * W, (size_t)t * sizeof *ctx);
        fg_tensor *logits = fg_gpt_forward(g, ctx, B, t, NULL);
        if (!logits) {
            st = fg_last_status();
            break;
        }
        for (int b = 0; b < B && st == FG_OK; b++) {
            st = last_logits(logits, b, row);
            tokens[(size_t)b * W + t] = argmax(row, V);
        }
        fg_release(logits);
    }
    fg_no_grad_exit();
    free(ctx);
    free(row);
    return st;
}
