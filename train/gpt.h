/* gpt.h — one decoder-only transformer with architecture options (GPT-2, Llama, nanochat and free
 * mixes of their parts), its parameters in one flat buffer.
 *
 * Shape letters: B batch, T time (<= block_size), C = n_embd, H = n_head, H_kv = n_kv_head (K/V
 * heads), hd = C / H, I = the MLP's hidden width, V = vocab_size, L = n_layer.
 *
 *     x = wte[idx] (+ wpe[0..T) with learned positions)          (B, T, C), then dropout
 *     x = norm(x)                                                  with emb_norm only (nanochat)
 *     for each of the L blocks:
 *         h = norm(x); q, k, v = split(h @ [W_q; W_k; W_v]ᵀ (+ b))   H, H_kv, H_kv heads of hd
 *         q, k = rope(q), rope(k)                                   rotary positions only
 *         q, k = rmsnorm(q), rmsnorm(k) over hd, no weight          qk_norm only (after rope)
 *         x = x + dropout(o_proj(attention(q, k, v)))               causal, GQA, the layer's window
 *         x = x + dropout(down(act(up(norm(x)))))                    gelu_tanh (4C, GPT-2) |
 *                                                                    silu(gate) * up (SwiGLU) | relu²
 *     logits = norm(x) @ headᵀ                                      (B, T, V): head = wte (tied) or
 *     logits = c tanh(logits / c)                                   lm_head; the softcap when c > 0
 * norm is LayerNorm (weight, bias), RMSNorm with a weight, or RMSNorm without one, per the config.
 * The options and presets are listed at fg_gpt_config below; the default is exactly GPT-2.
 *
 * Attention goes through fg_attention (ops/attention.h) with the implementation in cfg.attn
 * (naive or flash), causal masking, GQA (its variant.n_kv_heads), sliding windows and attention
 * dropout. Dropout sites follow nanoGPT: after the embeddings, on the attention weights, and after
 * each residual branch's output projection. The backward is autograd's: every step above is an op
 * of ops/ with its own rule (fg_rmsnorm, fg_rope, fg_swiglu, fg_relu2, fg_softcap ...).
 *
 * Parameters. Every parameter is a named view into ONE contiguous buffer (params_flat), and each
 * view's gradient (tensor->grad) is the matching view into one flat gradient buffer (grads_flat),
 * set before the first backward, so zeroing, clipping and AdamW are single loops over an array.
 * The table of views is generated from one X-macro list, FG_GPT_PARAMS below: names per family,
 * shape, whether AdamW decays it, how it is initialized, and under which options it exists. For a
 * GPT-2 the names and layouts are nanoGPT's (PyTorch nn.Linear: a weight is (out, in)), so
 * `model.load_state_dict(safetensors.torch.load_file(...))` works for nanoGPT's GPT with
 * bias=True; the tied lm_head.weight is not stored (as in HF's GPT-2 files). The buffer holds them
 * in table order: wte, wpe, then block 0's twelve tensors, block 1's, ..., then ln_f.
 *
 * Initialization, for every architecture, is GPT-2's (also what transformers' _init_weights does
 * for Llama and NanoChat with initializer_range 0.02): matrices and embeddings normal(0, 0.02), an
 * untied lm_head too; the two residual output projections (attention's and the MLP's) normal(0,
 * 0.02 / sqrt(2 L)); biases 0; norm gains 1. Parameter i of the table draws from Philox stream
 * (seed, FG_GPT_INIT_STREAM + i), so a model does not depend on thread count, and a float64 model
 * starts from the same values as a float32 one (up to rounding).
 *
 * Float64 models exist for gradient checks; training uses float32. Architectures other than
 * GPT-2's run on the CPU (their ops have no device kernels).
 */
#ifndef FG_GPT_H
#define FG_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "ops/attention.h"
#include "ops/device.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Activation checkpointing (autograd/recompute.h), a memory/time trade that never changes a number.
 * Each block makes one of these choices:
 *   NONE       every op keeps what its backward needs (the whole graph lives until the backward);
 *   ATTN       the block's attention sublayer — ln_1, c_attn, the heads' attention, c_proj and its
 *              dropout — is one checkpoint: the forward keeps only the sublayer's input (the block
 *              input x) and its output; the backward recomputes ln_1(x), qkv, attention (and flash's
 *              logsumexp, or naive's P) before backpropagating through them. The MLP keeps its graph.
 *   BLOCK      the whole block is one checkpoint: only its input survives the forward; the backward
 *              re-runs the block (attention and MLP) before its backward.
 *   POINTWISE  the cheap pointwise outputs are dropped after their matmul has used them and
 *              recomputed just before that matmul's backward (fg_recompute_drop): ln_1's, ln_2's
 *              and the MLP activation's outputs (llm.c's -r 2, Megatron's selective recompute); the
 *              matmuls are not redone.
 *   MLP        the block's MLP sublayer (ln_2, c_fc, the activation, c_proj, dropout) is one
 *              checkpoint; attention keeps its graph.
 * cfg.recompute is the choice of every block unless cfg.recompute_plan gives one per block.
 * Losses and gradients are bit-for-bit the same under every plan (tests/test_recompute.c). */
typedef enum {
    FG_RECOMPUTE_NONE = 0,
    FG_RECOMPUTE_ATTN,
    FG_RECOMPUTE_BLOCK,
    FG_RECOMPUTE_POINTWISE,
    FG_RECOMPUTE_MLP,
    FG_RECOMPUTE_COUNT
} fg_gpt_recompute;
/* "none", "attn", "block", "pointwise", "mlp"; parse returns -1 on an unknown name. */
const char *fg_gpt_recompute_name(fg_gpt_recompute r);
int fg_gpt_recompute_parse(const char *s);

#define FG_GPT_MAX_LAYER_PLAN 1024 /* = FG_GPT_MAX_LAYER */

/* ---- architecture options ----
 * Every option's zero value is GPT-2's, so a zeroed config with the sizes set is today's model:
 *   arch        the family the parameter NAMES follow (below); a preset also sets the options.
 *   n_kv_head   heads of K and V (grouped-query attention; 1 = multi-query); 0 = n_head. Divides n_head.
 *   pos         LEARNED: wpe (block_size, C) added to the token embedding; ROPE: rotary embedding of
 *               q and k in every layer (fg_rope: Hugging Face Llama's rotate_half layout, position t
 *               of the sequence), no wpe; ROPE_NANOCHAT: the same pairs turned the other way, as
 *               nanochat and transformers' NanoChat do (out_i = x_i cos + x_{i+D/2} sin,
 *               out_{i+D/2} = x_{i+D/2} cos − x_i sin); rope_theta their base (0 = 10000).
 *   norm        LAYERNORM (weight, and a bias unless no_bias), RMSNORM (weight: Llama), RMSNORM_FREE
 *               (no parameter: nanochat); norm_eps every norm's eps (0 = 1e-5, GPT-2's).
 *   emb_norm    1: a norm of the model's kind right after the embedding (nanochat).
 *   qk_norm     1: q and k are RMS-normalized over the head dim, per head, without a weight, with
 *               norm_eps: after the rotary embedding when pos is ROPE (Hugging Face NanoChat's order).
 *   mlp         GELU: c_proj(gelu_tanh(c_fc x)); SWIGLU: down(silu(gate x) * up x) (Llama);
 *               RELU2: c_proj(relu(c_fc x)²) (nanochat). mlp_hidden the hidden width (0 = 4C).
 *   no_bias     1: no bias in any linear layer nor in LayerNorm (Llama, nanochat).
 *   untie_head  1: the LM head is its own (V, C) matrix lm_head.weight; 0: tied to the token embedding.
 *   logit_softcap   c > 0: logits = c tanh(logits / c) (nanochat: 15); 0 = off.
 *   window      per-layer attention windows, a string of 'S' and 'L' repeated over the layers: layer l
 *               takes window[l % strlen(window)]; 'L' attends to the whole (causal) context, 'S' to
 *               the block_size / 4 previous tokens and itself; the last layer is always 'L'. ""
 *               (or "L") = every layer full. nanochat trains with "SSSL".
 * Presets (fg_gpt_arch_preset): gpt2 = all zero. llama = rope 10000, rmsnorm 1e-6, swiglu (hidden
 * mlp_hidden, 0 = 4C), no bias, untied head (Hugging Face LlamaConfig's defaults). nanochat =
 * rope-nanochat 10000, parameter-free rmsnorm 1e-6, emb_norm, qk_norm, relu2 4C, no bias, untied head, softcap 15,
 * window "L" (Hugging Face NanoChatForCausalLM has no windows; "SSSL" is the flag --window),
 * rotary turned nanochat's way (ROPE_NANOCHAT).
 *
 * Names. arch GPT2 keeps nanoGPT's names (transformer.wte.weight, transformer.h.%d.attn.c_attn.weight:
 * q, k, v fused in one matrix of (H + 2 H_kv) hd rows ...); LLAMA uses Hugging Face LlamaForCausalLM's
 * (model.embed_tokens.weight, model.layers.%d.self_attn.q_proj.weight ...) and NANOCHAT transformers'
 * NanoChatForCausalLM's (the same, with mlp.fc1 and mlp.fc2). An option a family lacks gets a name in
 * that family's style: GPT2 with swiglu adds mlp.c_gate (gate) beside mlp.c_fc (up), an untied head
 * is lm_head.weight, emb_norm's weight transformer.ln_e.weight / model.embed_norm.weight, learned
 * positions under LLAMA or NANOCHAT model.embed_positions.weight. Whatever the names, q, k and v
 * (and gate and up) are adjacent in the flat buffer in that order, so each is one GEMM. */
typedef enum { FG_ARCH_GPT2 = 0, FG_ARCH_LLAMA, FG_ARCH_NANOCHAT, FG_ARCH_COUNT } fg_gpt_arch;
typedef enum { FG_POS_LEARNED = 0, FG_POS_ROPE, FG_POS_ROPE_NANOCHAT, FG_POS_COUNT } fg_gpt_pos;
typedef enum { FG_NORM_LAYERNORM = 0, FG_NORM_RMSNORM, FG_NORM_RMSNORM_FREE, FG_NORM_COUNT } fg_gpt_norm;
typedef enum { FG_MLP_GELU = 0, FG_MLP_SWIGLU, FG_MLP_RELU2, FG_MLP_COUNT } fg_gpt_mlp;
#define FG_GPT_WINDOW_MAX 32 /* bytes of the window pattern, its terminating 0 included */

typedef struct {
    int n_layer;       /* L, >= 1 */
    int n_head;        /* H, divides n_embd */
    int n_embd;        /* C */
    int block_size;    /* longest sequence (rows of wpe) */
    int vocab_size;    /* V, 1..2^24 */
    double dropout;    /* every dropout site; 0 <= p < 1 */
    fg_attn_impl attn; /* naive or flash */
    fg_dtype dtype;    /* FG_F32 for training, FG_F64 for gradient checks */
    fg_device device;
    fg_gpt_recompute recompute; /* activation checkpointing of every block (see above); 0 = none */
    /* per-block choices: recompute_plan[l] = 1 + the choice of block l; 0 (all zero by default)
     * leaves block l to cfg.recompute. Read it with fg_gpt_layer_recompute. */
    unsigned char recompute_plan[FG_GPT_MAX_LAYER_PLAN];
    /* the products' precision (ops/device.h): FULL, or BF16 — bfloat16 mixed precision, float32
     * weights, gradients and AdamW with bf16 GEMMs and attention — which needs a float32 model,
     * flash attention and a head dim (n_embd / n_head) that is a multiple of 8 up to 128 (the bf16
     * attention kernels', cuda/attention_bf16.h), checked here, and a device with bf16 kernels
     * (cuda), checked by the trainer, which runs its steps and evaluations under the setting
     * (fg_device_set_compute). A model alone (no trainer) computes in full precision. */
    fg_compute compute;
    /* the architecture (see above); all zero = GPT-2 */
    fg_gpt_arch arch;
    int n_kv_head;
    fg_gpt_pos pos;
    double rope_theta;
    fg_gpt_norm norm;
    double norm_eps;
    int emb_norm;
    int qk_norm;
    fg_gpt_mlp mlp;
    int mlp_hidden;
    int no_bias;
    int untie_head;
    double logit_softcap;
    char window[FG_GPT_WINDOW_MAX];
} fg_gpt_config;

/* L 4, H 4, C 128, block 64, vocab 0 (must be set), dropout 0, flash, float32, CPU, full-precision
 * products, GPT-2's architecture. */
fg_gpt_config fg_gpt_default_config(void);
/* The largest model dimensions fg_gpt_config_check accepts (and a checkpoint's metadata may hold). */
#define FG_GPT_MAX_LAYER 1024 /* FG_GPT_MAX_LAYER_PLAN too */
#define FG_GPT_MAX_EMBD (1 << 16) /* n_embd; n_head divides it, so it bounds n_head too */
#define FG_GPT_MAX_BLOCK (1 << 20)
#define FG_GPT_MAX_VOCAB (1 << 24)
#define FG_GPT_MAX_HIDDEN (1 << 20) /* mlp_hidden */

/* FG_OK, or FG_ERR_ARG with a message naming the bad field. */
fg_status fg_gpt_config_check(const fg_gpt_config *c);

/* The recompute choice of block l (0 <= l < n_layer): the plan's, else cfg.recompute. */
fg_gpt_recompute fg_gpt_layer_recompute(const fg_gpt_config *c, int l);
/* A plan from text: one name ("block": every block the same; recompute_plan cleared) or n_layer
 * names separated by commas, one per block from block 0 ("block,attn,none,none"). FG_OK with c
 * set, or FG_ERR_ARG naming the bad part (c unchanged). */
fg_status fg_gpt_recompute_set(fg_gpt_config *c, const char *plan);
/* The plan as text: the one name when every block makes the same choice, else the per-block list
 * (fg_gpt_recompute_set reads it back). Writes at most n bytes (NUL included); returns the length
 * it needs (as snprintf). */
int fg_gpt_recompute_format(const fg_gpt_config *c, char *out, size_t n);

/* Sets c's architecture fields (arch and every option above) to preset a's; sizes untouched. */
void fg_gpt_arch_preset(fg_gpt_config *c, fg_gpt_arch a);
/* Copies src's architecture fields (arch and every option above) into dst; sizes untouched. */
void fg_gpt_copy_arch(fg_gpt_config *dst, const fg_gpt_config *src);
/* "gpt2", "llama", "nanochat"; parse returns -1 on an unknown name. The same for the options:
 * pos "learned" | "rope" | "rope-nanochat"; norm "layernorm" | "rmsnorm" | "rmsnorm-free"; mlp "gelu" | "swiglu" | "relu2". */
const char *fg_gpt_arch_name(fg_gpt_arch a);
int fg_gpt_arch_parse(const char *s);
const char *fg_gpt_pos_name(fg_gpt_pos p);
int fg_gpt_pos_parse(const char *s);
const char *fg_gpt_norm_name(fg_gpt_norm n);
int fg_gpt_norm_parse(const char *s);
const char *fg_gpt_mlp_name(fg_gpt_mlp m);
int fg_gpt_mlp_parse(const char *s);
/* The resolved sizes and settings of c (defaults applied): K/V heads, head dim, MLP hidden width,
 * norm eps, rope theta, and layer l's attention window (0 = full, else the keys back it sees:
 * max(1, block_size / 4)). */
int fg_gpt_kv_heads(const fg_gpt_config *c);
int fg_gpt_head_dim(const fg_gpt_config *c);
int fg_gpt_hidden(const fg_gpt_config *c);
double fg_gpt_eps(const fg_gpt_config *c);
double fg_gpt_theta(const fg_gpt_config *c);
int fg_gpt_layer_window(const fg_gpt_config *c, int l);
/* 1 when c's architecture is GPT-2's: every option at zero, or at a value that means the same
 * (n_kv_head = n_head, mlp_hidden = 4C, a window pattern of only L). */
int fg_gpt_is_gpt2(const fg_gpt_config *c);
/* One line of c's architecture into buf (n bytes, always terminated), e.g. "nanochat: rope (theta
 * 10000), rmsnorm-free (eps 1e-06) after the embedding too, qk-norm, relu2 (hidden 512), 2 kv heads,
 * no biases, untied head, logit softcap 15, windows SSSL"; "gpt2" for GPT-2's. */
void fg_gpt_arch_describe(const fg_gpt_config *c, char *buf, size_t n);
/* 1 when a and b have the same architecture (options compared after their defaults apply). */
int fg_gpt_same_arch(const fg_gpt_config *a, const fg_gpt_config *b);

/* How a parameter starts. */
typedef enum { FG_INIT_NORMAL = 0, FG_INIT_RESID, FG_INIT_ZEROS, FG_INIT_ONES } fg_gpt_init;

/* The parameter list. X(id, where, gpt2_name, llama_name, nanochat_name, ndim, rows, cols, decay,
 * init, present):
 *   where  0 = before the blocks, 1 = once per block (names have a %d for the block), 2 = after;
 *   names  under arch GPT2, LLAMA, NANOCHAT (see "Names" above);
 *   rows, cols  the shape in terms of V, T (block size), C, QKV = (H + 2 H_kv) hd, KV = H_kv hd,
 *          I = the MLP's hidden width (cols 1 for 1-d);
 *   decay  1 if AdamW's weight decay applies (nanoGPT: every 2-d tensor, i.e. the matmul weights
 *          and the embeddings; never biases or norm parameters);
 *   present  under which options the entry exists (P_ALL, P_LEARNED, P_NORM_W, P_NORM_B, P_EMBN_W,
 *          P_EMBN_B, P_FUSED, P_SPLIT, P_FUSED_B, P_SPLIT_B, P_BIAS, P_GATE, P_GATE_B, P_UNTIED;
 *          train/gpt.c's param_present says each). GPT-2 has exactly the entries it always had, in
 *          the same order. */
#define FG_GPT_PARAMS(X)                                                                                               \
    X(WTE, 0, "transformer.wte.weight", "model.embed_tokens.weight", "model.embed_tokens.weight", 2, V, C, 1,          \
      FG_INIT_NORMAL, P_ALL)                                                                                           \
    X(WPE, 0, "transformer.wpe.weight", "model.embed_positions.weight", "model.embed_positions.weight", 2, T, C, 1,    \
      FG_INIT_NORMAL, P_LEARNED)                                                                                       \
    X(EMBN_W, 0, "transformer.ln_e.weight", "model.embed_norm.weight", "model.embed_norm.weight", 1, C, 1, 0,          \
      FG_INIT_ONES, P_EMBN_W)                                                                                          \
    X(EMBN_B, 0, "transformer.ln_e.bias", "model.embed_norm.bias", "model.embed_norm.bias", 1, C, 1, 0, FG_INIT_ZEROS, \
      P_EMBN_B)                                                                                                        \
    X(LN1_W, 1, "transformer.h.%d.ln_1.weight", "model.layers.%d.input_layernorm.weight",                              \
      "model.layers.%d.input_layernorm.weight", 1, C, 1, 0, FG_INIT_ONES, P_NORM_W)                                    \
    X(LN1_B, 1, "transformer.h.%d.ln_1.bias", "model.layers.%d.input_layernorm.bias",                                  \
      "model.layers.%d.input_layernorm.bias", 1, C, 1, 0, FG_INIT_ZEROS, P_NORM_B)                                     \
    X(ATTN_W, 1, "transformer.h.%d.attn.c_attn.weight", "", "", 2, QKV, C, 1, FG_INIT_NORMAL, P_FUSED)                 \
    X(Q_W, 1, "", "model.layers.%d.self_attn.q_proj.weight", "model.layers.%d.self_attn.q_proj.weight", 2, C, C, 1,    \
      FG_INIT_NORMAL, P_SPLIT)                                                                                         \
    X(K_W, 1, "", "model.layers.%d.self_attn.k_proj.weight", "model.layers.%d.self_attn.k_proj.weight", 2, KV, C, 1,   \
      FG_INIT_NORMAL, P_SPLIT)                                                                                         \
    X(V_W, 1, "", "model.layers.%d.self_attn.v_proj.weight", "model.layers.%d.self_attn.v_proj.weight", 2, KV, C, 1,   \
      FG_INIT_NORMAL, P_SPLIT)                                                                                         \
    X(ATTN_B, 1, "transformer.h.%d.attn.c_attn.bias", "", "", 1, QKV, 1, 0, FG_INIT_ZEROS, P_FUSED_B)                  \
    X(Q_B, 1, "", "model.layers.%d.self_attn.q_proj.bias", "model.layers.%d.self_attn.q_proj.bias", 1, C, 1, 0,        \
      FG_INIT_ZEROS, P_SPLIT_B)                                                                                        \
    X(K_B, 1, "", "model.layers.%d.self_attn.k_proj.bias", "model.layers.%d.self_attn.k_proj.bias", 1, KV, 1, 0,       \
      FG_INIT_ZEROS, P_SPLIT_B)                                                                                        \
    X(V_B, 1, "", "model.layers.%d.self_attn.v_proj.bias", "model.layers.%d.self_attn.v_proj.bias", 1, KV, 1, 0,       \
      FG_INIT_ZEROS, P_SPLIT_B)                                                                                        \
    X(APROJ_W, 1, "transformer.h.%d.attn.c_proj.weight", "model.layers.%d.self_attn.o_proj.weight",                    \
      "model.layers.%d.self_attn.o_proj.weight", 2, C, C, 1, FG_INIT_RESID, P_ALL)                                     \
    X(APROJ_B, 1, "transformer.h.%d.attn.c_proj.bias", "model.layers.%d.self_attn.o_proj.bias",                        \
      "model.layers.%d.self_attn.o_proj.bias", 1, C, 1, 0, FG_INIT_ZEROS, P_BIAS)                                      \
    X(LN2_W, 1, "transformer.h.%d.ln_2.weight", "model.layers.%d.post_attention_layernorm.weight",                     \
      "model.layers.%d.post_attention_layernorm.weight", 1, C, 1, 0, FG_INIT_ONES, P_NORM_W)                           \
    X(LN2_B, 1, "transformer.h.%d.ln_2.bias", "model.layers.%d.post_attention_layernorm.bias",                         \
      "model.layers.%d.post_attention_layernorm.bias", 1, C, 1, 0, FG_INIT_ZEROS, P_NORM_B)                            \
    X(GATE_W, 1, "transformer.h.%d.mlp.c_gate.weight", "model.layers.%d.mlp.gate_proj.weight",                         \
      "model.layers.%d.mlp.fc_gate.weight", 2, I, C, 1, FG_INIT_NORMAL, P_GATE)                                        \
    X(FC_W, 1, "transformer.h.%d.mlp.c_fc.weight", "model.layers.%d.mlp.up_proj.weight",                               \
      "model.layers.%d.mlp.fc1.weight", 2, I, C, 1, FG_INIT_NORMAL, P_ALL)                                             \
    X(GATE_B, 1, "transformer.h.%d.mlp.c_gate.bias", "model.layers.%d.mlp.gate_proj.bias",                             \
      "model.layers.%d.mlp.fc_gate.bias", 1, I, 1, 0, FG_INIT_ZEROS, P_GATE_B)                                         \
    X(FC_B, 1, "transformer.h.%d.mlp.c_fc.bias", "model.layers.%d.mlp.up_proj.bias", "model.layers.%d.mlp.fc1.bias",   \
      1, I, 1, 0, FG_INIT_ZEROS, P_BIAS)                                                                               \
    X(MPROJ_W, 1, "transformer.h.%d.mlp.c_proj.weight", "model.layers.%d.mlp.down_proj.weight",                        \
      "model.layers.%d.mlp.fc2.weight", 2, C, I, 1, FG_INIT_RESID, P_ALL)                                              \
    X(MPROJ_B, 1, "transformer.h.%d.mlp.c_proj.bias", "model.layers.%d.mlp.down_proj.bias",                            \
      "model.layers.%d.mlp.fc2.bias", 1, C, 1, 0, FG_INIT_ZEROS, P_BIAS)                                               \
    X(LNF_W, 2, "transformer.ln_f.weight", "model.norm.weight", "model.norm.weight", 1, C, 1, 0, FG_INIT_ONES,         \
      P_NORM_W)                                                                                                        \
    X(LNF_B, 2, "transformer.ln_f.bias", "model.norm.bias", "model.norm.bias", 1, C, 1, 0, FG_INIT_ZEROS, P_NORM_B)    \
    X(HEAD_W, 2, "lm_head.weight", "lm_head.weight", "lm_head.weight", 2, V, C, 1, FG_INIT_NORMAL, P_UNTIED)

typedef enum {
#define FG_GPT_KIND_ENUM(id, where, n0, n1, n2, nd, r, c, decay, init, present) FG_GPT_##id,
    FG_GPT_PARAMS(FG_GPT_KIND_ENUM)
#undef FG_GPT_KIND_ENUM
        FG_GPT_KIND_COUNT
} fg_gpt_kind;

#define FG_GPT_NAME_MAX 64

/* One entry of the table: a named view into params_flat. */
typedef struct {
    char name[FG_GPT_NAME_MAX]; /* "transformer.h.0.attn.c_attn.weight" */
    fg_gpt_kind kind;
    int layer; /* block index, or -1 */
    int ndim;  /* 1 or 2 */
    int64_t shape[2];
    int64_t offset, numel; /* elements, into params_flat / grads_flat */
    int decay;
    fg_gpt_init init;
    fg_tensor *w; /* the leaf (requires grad); w->grad is the view into grads_flat */
} fg_gpt_param;

typedef struct fg_gpt {
    fg_gpt_config cfg;
    int n_params; /* entries in the table */
    fg_gpt_param *params;
    int64_t num_elements;   /* total parameter count */
    fg_tensor *params_flat; /* (num_elements) */
    fg_tensor *grads_flat;  /* (num_elements) */
    fg_tensor **by_kind;    /* [kind * (L + 1) + (layer or 0)]: borrowed from the table; NULL if absent */
    fg_tensor **fused;      /* per layer, leaves over adjacent entries (q|k|v, gate|up, their biases)
                             * whose gradients are the same ranges of grads_flat; gpt.c's own */
} fg_gpt;

/* The table config c implies, without a model: every entry's name, kind, layer, shape, offset,
 * decay and init (w NULL), in the flat buffer's order, into out (NULL: only count). Returns the
 * number of entries. c must pass fg_gpt_config_check. */
int fg_gpt_table(const fg_gpt_config *c, fg_gpt_param *out);

/* A model with GPT-2 initialization from `seed` (see the top). Caller frees with fg_gpt_free.
 * NULL with fg_last_error() on a bad config or out of memory. */
fg_gpt *fg_gpt_create(const fg_gpt_config *cfg, uint64_t seed);
/* The same table and buffers, all parameters zero (for loading a checkpoint). */
fg_gpt *fg_gpt_create_empty(const fg_gpt_config *cfg);
void fg_gpt_free(fg_gpt *g); /* NULL is fine */

/* The leaf of parameter `kind` in block `layer` (layer ignored for the global ones), or NULL when
 * the architecture has no such entry. Borrowed. */
fg_tensor *fg_gpt_weight(const fg_gpt *g, fg_gpt_kind kind, int layer);
/* The table entry called `name`, or NULL. */
const fg_gpt_param *fg_gpt_find(const fg_gpt *g, const char *name);
/* grads_flat := 0. */
void fg_gpt_zero_grad(fg_gpt *g);

/* Dropout during training: masks are pure functions of (seed, step, micro, layer, site), so a
 * resumed run draws exactly the masks the uninterrupted one would have. */
typedef struct {
    uint64_t seed;  /* the run's seed */
    uint64_t step;  /* optimizer step */
    uint32_t micro; /* micro-step within it (gradient accumulation) */
} fg_gpt_train_ctx;

typedef enum { FG_DROP_EMB = 0, FG_DROP_ATTN, FG_DROP_ATTN_RESID, FG_DROP_MLP_RESID } fg_gpt_drop_site;

/* The 64-bit seed of one dropout site (layer -1 for the embedding dropout). */
uint64_t fg_gpt_dropout_seed(const fg_gpt_train_ctx *ctx, int layer, fg_gpt_drop_site site);

/* Logits (B, T, V) for tokens idx (B, T) int32 row-major, T <= block_size, ids in [0, V).
 * train NULL: no dropout (evaluation); otherwise dropout cfg.dropout with masks from *train.
 * Records the graph when grad mode is on. New reference; NULL on error. */
fg_tensor *fg_gpt_forward(fg_gpt *g, const int32_t *idx, int B, int T, const fg_gpt_train_ctx *train);
/* Mean cross-entropy (shape (1)) of the logits against targets (B, T) (-1 = ignored). */
fg_tensor *fg_gpt_loss(fg_gpt *g, const int32_t *idx, const int32_t *targets, int B, int T,
                       const fg_gpt_train_ctx *train);

/* Sampling. temperature 0 is greedy (argmax, first index on ties); top_k 0 keeps all V tokens;
 * top_k k keeps every logit >= the k-th largest, so ties with the k-th are all kept (nanoGPT's
 * mask logits < topk(logits, k)[-1] = -inf), more than k tokens then.
 * vocab_limit n in 1..V-1 samples only ids below n — the tokenizer's real vocabulary when the model's
 * was padded (GPT-2's 50257 in 50304: no data id reaches the tail, which is never emitted then, as
 * llm.c samples); 0 keeps all V. Draw j of a generation uses fg_philox_u32(seed, FG_GPT_SAMPLE_STREAM, j). */
typedef struct fg_gpt_kv fg_gpt_kv;

/* Called with each new token as soon as it is chosen (streaming output); its index j counts from 0. */
typedef void (*fg_gpt_token_fn)(void *user, int j, int32_t token);

typedef struct {
    double temperature;
    int top_k;
    uint64_t seed;
    int vocab_limit;
    /* nucleus sampling: after temperature and top_k, keep the likeliest tokens (by decreasing
     * probability, equal ones by smaller id first) up to and including the first whose cumulative
     * probability reaches top_p (>=, so a sum exactly equal to top_p stops there; at least one
     * token); 0 or >= 1 keeps them all */
    double top_p;
    /* 1: recompute the whole context for every token (the reference the cache is tested against);
     * 0: the KV cache below (CPU models; a device model always recomputes) */
    int no_cache;
    fg_gpt_kv *kv;           /* a cache to reuse across calls (fg_gpt_kv_create); NULL: one per call */
    fg_gpt_token_fn on_token; /* NULL: none */
    void *user;
} fg_sample_opts;

#define FG_GPT_INIT_STREAM 0x494e4954000000ull    /* "INIT" */
#define FG_GPT_DROPOUT_STREAM 0x44524f50000000ull /* "DROP" */
#define FG_GPT_SAMPLE_STREAM 0x53414d50000000ull  /* "SAMP" */

/* tokens[0 .. n_prompt) is the prompt (n_prompt >= 1); writes n_new tokens after it, so tokens
 * must hold n_prompt + n_new. The context is the last block_size tokens, at positions from 0, as
 * nanoGPT's generate crops it. With the cache, token j costs one new row per layer while the whole
 * sequence fits the block; past it every token shifts the window (new positions for every kept
 * token), so the cache is rebuilt from the cropped context: the same tokens as the recompute, at its
 * cost. No grad is recorded. */
fg_status fg_gpt_generate(fg_gpt *g, int32_t *tokens, int n_prompt, int n_new, const fg_sample_opts *o);
/* One draw, the rule fg_gpt_generate applies to each token: the id from softmax(x / temperature)
 * (temperature > 0) restricted by top_k and top_p as above, renormalized, at uniform u in (0, 1]
 * (the smallest id whose cumulative probability in id order reaches u); temperature 0 is the
 * argmax. x (n logits) is overwritten; order (n ints) is scratch. */
int fg_gpt_sample_logits(double *x, int n, double temperature, int top_k, double top_p, double u, int *order);
/* ---- the KV cache: incremental inference without autograd ----
 * Per layer, K and V of every position so far, (H_kv, block_size, hd) each, and (GPT-2) scratch
 * for block_size rows of every activation, all allocated once by fg_gpt_kv_create and reused by
 * every call. Other architectures run the forward's own ops on the new rows (rotary positions from
 * len, the layer's window, the softcap) and keep only K and V here. fg_gpt_kv_append(g, kv, idx, n, logits) runs the model on n new tokens at positions
 * len .. len + n − 1 (len = fg_gpt_kv_len): each layer computes its n new rows (ln_1, c_attn),
 * writes their k, v into the cache, and attends with its n queries to all len + n cached keys
 * (fg_attention's kernels, causal with Nq = n < Nk: bottom-right, so query i sees keys 0 .. len + i);
 * then c_proj, the MLP and ln_f on those rows, and the LM head on the last. The numbers are those
 * of fg_gpt_forward's last row up to float rounding (the products run on fewer rows).
 * A prompt is appended at once (n rows), then one token per call. For CPU models of cfg.attn's
 * implementation; no dropout. */
/* A cache for g's shapes (kept valid only while g's weights do not change). Caller frees with
 * fg_gpt_kv_free. NULL with fg_last_error(): not a CPU model (FG_ERR_DEVICE), out of memory. */
fg_gpt_kv *fg_gpt_kv_create(const fg_gpt *g);
void fg_gpt_kv_free(fg_gpt_kv *kv); /* NULL is fine */
/* Forget every position (length 0); the buffers stay. */
void fg_gpt_kv_reset(fg_gpt_kv *kv);
/* Positions held. */
int fg_gpt_kv_len(const fg_gpt_kv *kv);
/* Appends tokens idx[0..n) (ids in [0, V), 1 <= n, len + n <= block_size) and, if logits is not
 * NULL, writes the last new token's logits (V doubles) there. FG_ERR_ARG on bad sizes or ids (the
 * cache is unchanged then). */
fg_status fg_gpt_kv_append(fg_gpt *g, fg_gpt_kv *kv, const int32_t *idx, int n, double *logits);

/* Greedy decoding of B prompts at once: tokens is (B, t0 + n_new) row-major, each row's first t0
 * tokens the prompt; fills the rest. t0 + n_new - 1 <= block_size. */
fg_status fg_gpt_greedy_batch(fg_gpt *g, int32_t *tokens, int B, int t0, int n_new);

#ifdef __cplusplus
}
#endif
#endif /* FG_GPT_H */
