/* train_flags.h — the flags `flashgrad train` and `flashgrad bench train` share (the data, the
 * model, the optimizer, and where and how it runs), with one set of names, bounds and help lines,
 * and the one place that checks the configuration made from them.
 *
 * A command's flag table begins with these FG_TF_COUNT flags, in FG_TRAIN_FLAGS order (f[FG_TF_LR]
 * is --lr), followed by its own. The command then, in this order:
 *     fg_train_flags_init(f)                      names, bounds and help of f[0 .. FG_TF_COUNT)
 *     fg_train_flags_defaults(f, d)               their defaults from a task's train_defaults.h
 *     fg_flags_parse(...)                         the command line
 *     fg_train_flags_check(f, &run)               invariants between the flags; starts the device
 *     src = fg_train_flags_source(f)              the data
 *     fg_train_flags_config(f, src, &run, &cfg)   the whole fg_train_config, checked
 * Usage errors (exit 2) come back as FG_ERR_ARG or FG_ERR_DEVICE with a message naming the flags,
 * e.g. "--n-embd 30 is not a multiple of --n-head 4"; a source that does not load (exit 1) as NULL
 * and the reason. The command prints "flashgrad <cmd>: <message>".
 */
#ifndef FG_TRAIN_FLAGS_H
#define FG_TRAIN_FLAGS_H

#include "cli/flags.h"
#include "cli/train_defaults.h"
#include "train/trainer.h"

/* X(id, name, type, meta, help, lo, hi, lo_open): the value must lie in [lo, hi] ((lo, hi] when
 * lo_open; lo = hi = 0: any). Defaults come from fg_train_flags_defaults. */
#define FG_TRAIN_FLAGS(X)                                                                                              \
    X(DATA, "--data", FG_FLAG_STR, "FILE", "train on a text file (character-level tokenizer unless --byte)", 0, 0, 0)  \
    X(BYTE, "--byte", FG_FLAG_BOOL, NULL, "byte-level tokenizer (vocabulary 256) for --data", 0, 0, 0)                 \
    X(TOKENIZER, "--tokenizer", FG_FLAG_STR, "PATH",                                                                   \
      "a BPE tokenizer for --data (a folder with tokenizer.json or vocab.json + merges.txt, a tokenizer.json, a "      \
      ".tiktoken file); with --data-bin, the ids' tokenizer (--vocab-size then defaults to its vocabulary)",          \
      0, 0, 0)                                                                                                         \
    X(DATA_BIN, "--data-bin", FG_FLAG_STR, "PATH",                                                                     \
      "train on pre-tokenized uint16 ids: a folder with nanoGPT's train.bin and val.bin (or llm.c's *train*.bin and "  \
      "*val*.bin files: a pair, or shards), one .bin file, or a quoted pattern of shards ('data/fw_train_*.bin')",     \
      0, 0, 0)                                                                                                         \
    X(VOCAB, "--vocab-size", FG_FLAG_INT, "V",                                                                         \
      "--data-bin: the vocabulary, every id below it (GPT-2: 50257) (default: none; required with --data-bin)", 1,     \
      FG_TOKEN_MAX_VOCAB, 0)                                                                                           \
    X(DIGITS, "--digits", FG_FLAG_INT, "N", "addition: digits per operand", 1, FG_ADD_MAX_DIGITS, 0)                   \
    X(N_LAYER, "--n-layer", FG_FLAG_INT, "N", "transformer blocks", 1, 1024, 0)                                        \
    X(N_HEAD, "--n-head", FG_FLAG_INT, "N", "attention heads (must divide --n-embd)", 1, 65536, 0)                     \
    X(N_EMBD, "--n-embd", FG_FLAG_INT, "N", "embedding width", 1, 65536, 0)                                            \
    X(BLOCK, "--block-size", FG_FLAG_INT, "N",                                                                         \
      "context length (default: 64 for text; 3 x digits + 3 for the addition task, which needs at least that)", 1,     \
      1 << 20, 0)                                                                                                      \
    X(ARCH, "--arch", FG_FLAG_STR, "NAME",                                                                             \
      "architecture preset: gpt2 (learned positions, LayerNorm, GELU, biases, tied head), llama (RoPE, RMSNorm, "      \
      "SwiGLU, no biases, untied head) or nanochat (RoPE, QK-norm, parameter-free RMSNorm after the embedding too, "   \
      "ReLU², no biases, untied head, logit softcap 15); each flag below changes one option of it",                    \
      0, 0, 0)                                                                                                         \
    X(N_KV_HEAD, "--n-kv-head", FG_FLAG_INT, "N",                                                                      \
      "key/value heads, dividing --n-head: grouped-query attention, 1 = multi-query (default: --n-head)", 1, 65536, 0) \
    X(POS, "--pos", FG_FLAG_STR, "KIND", "positions: learned (a table) or rope (rotary)", 0, 0, 0)                     \
    X(ROPE_THETA, "--rope-theta", FG_FLAG_F64, "X", "the rotary embedding's base (default: 10000)", 0, 1e300, 1)       \
    X(NORM, "--norm", FG_FLAG_STR, "KIND", "layernorm, rmsnorm, or rmsnorm-free (RMSNorm without a weight)", 0, 0, 0)  \
    X(NORM_EPS, "--norm-eps", FG_FLAG_F64, "X", "every norm's eps (default: 1e-5; llama and nanochat 1e-6)", 0, 0.5,   \
      1)                                                                                                               \
    X(EMB_NORM, "--emb-norm", FG_FLAG_INT, "0|1", "1: a norm right after the token embedding (nanochat)", 0, 1, 0)     \
    X(QK_NORM, "--qk-norm", FG_FLAG_INT, "0|1", "1: q and k RMS-normalized per head, after the rotary embedding", 0,   \
      1, 0)                                                                                                            \
    X(MLP, "--mlp", FG_FLAG_STR, "KIND", "the MLP: gelu (GPT-2), swiglu (Llama) or relu2 (nanochat)", 0, 0, 0)         \
    X(MLP_HIDDEN, "--mlp-hidden", FG_FLAG_INT, "N", "the MLP's hidden width (default: 4 x --n-embd)", 1, 1 << 20, 0)   \
    X(BIAS, "--bias", FG_FLAG_TRUTH, NULL,                                                                             \
      "biases in the linear layers and LayerNorm: True or False (gpt2: True; llama, nanochat: False; nanoGPT's "       \
      "bias)",                                                                                                         \
      0, 0, 0)                                                                                                         \
    X(TIE_HEAD, "--tie-head", FG_FLAG_INT, "0|1", "1: the LM head is the token embedding (gpt2: 1, others: 0)", 0, 1,  \
      0)                                                                                                               \
    X(SOFTCAP, "--logit-softcap", FG_FLAG_F64, "C", "final logits C tanh(logits / C) (0: off; nanochat: 15)", 0, 1e30, \
      0)                                                                                                               \
    X(WINDOW, "--window", FG_FLAG_STR, "PATTERN",                                                                      \
      "per-layer attention windows: S and L repeated over the layers, S seeing the block-size / 4 previous tokens, L " \
      "all of them; the last layer is always L (nanochat trains with SSSL) (default: L)",                              \
      0, 0, 0)                                                                                                         \
    X(BATCH, "--batch-size", FG_FLAG_INT, "N", "sequences per micro-batch", 1, 1 << 24, 0)                             \
    X(ACCUM, "--grad-accum", FG_FLAG_INT, "N", "micro-batches per optimizer step", 1, 1 << 20, 0)                      \
    X(LR, "--lr", FG_FLAG_F64, "X", "peak learning rate", 0, 10, 1)                                                    \
    X(MIN_LR, "--min-lr", FG_FLAG_F64, "X", "learning rate at the end of the cosine decay", 0, 10, 0)                  \
    X(WARMUP, "--warmup", FG_FLAG_INT, "N", "linear learning-rate warm-up steps", 0, 1e12, 0)                          \
    X(DECAY, "--lr-decay-steps", FG_FLAG_INT, "N", "step where the cosine reaches --min-lr (default: the last step)",  \
      0, 1e12, 1)                                                                                                      \
    X(WD, "--weight-decay", FG_FLAG_F64, "X", "AdamW weight decay of the 2-d weights", 0, 1e6, 0)                      \
    X(BETA1, "--beta1", FG_FLAG_F64, "X", "AdamW beta1", 0, 0.999999999, 0)                                            \
    X(BETA2, "--beta2", FG_FLAG_F64, "X", "AdamW beta2", 0, 0.999999999, 0)                                            \
    X(CLIP, "--grad-clip", FG_FLAG_F64, "X", "clip the global gradient norm (0: off)", 0, 1e30, 0)                     \
    X(DROPOUT, "--dropout", FG_FLAG_F64, "P", "dropout probability (embeddings, attention, residuals)", 0, 0.99, 0)    \
    X(SEED, "--seed", FG_FLAG_U64, "N", "seed of the initialization, batches and dropout", 0, 0, 0)                    \
    X(ATTN, "--attn", FG_FLAG_STR, "IMPL", "attention implementation: naive or flash", 0, 0, 0)                        \
    X(DEVICE, "--device", FG_FLAG_STR, "DEV", "cpu or cuda", 0, 0, 0)                                                  \
    X(RECOMPUTE, "--recompute", FG_FLAG_STR, "WHAT", "activation checkpointing: none, attn or block", 0, 0, 0)         \
    X(DTYPE, "--dtype", FG_FLAG_STR, "DTYPE",                                                                          \
      "float32, or bfloat16: mixed precision on cuda (float32 weights and AdamW, bf16 matmuls and attention)", 0, 0,   \
      0)                                                                                                               \
    X(THREADS, "--threads", FG_FLAG_INT, "N",                                                                          \
      "threads of flashgrad's pool and of OpenBLAS, at most 64 (default: FG_NUM_THREADS / OPENBLAS_NUM_THREADS or " \
      "all cores)",                                                                                                    \
      1, 64, 0)

enum {
#define FG_TF_ENUM(id, name, type, meta, help, lo, hi, lo_open) FG_TF_##id,
    FG_TRAIN_FLAGS(FG_TF_ENUM)
#undef FG_TF_ENUM
        FG_TF_COUNT
};

/* The named settings the flags choose, parsed and checked by fg_train_flags_check. */
typedef struct {
    fg_device device;
    fg_attn_impl attn;
    fg_gpt_recompute recompute;
    fg_compute compute; /* --dtype: FG_COMPUTE_FULL (float32) or FG_COMPUTE_BF16 (bfloat16) */
    fg_gpt_arch arch;   /* --arch */
    int pos, norm, mlp; /* --pos, --norm, --mlp: fg_gpt_pos, fg_gpt_norm, fg_gpt_mlp, or -1 when not given */
    /* a model whose architecture the run takes (--init-from's; the caller sets it after
     * fg_train_flags_check), or NULL: the flags' */
    const fg_gpt_config *arch_from;
} fg_train_choice;

/* f[0 .. FG_TF_COUNT): names, types, bounds and help; values zero, nothing given. */
void fg_train_flags_init(fg_flag *f);
/* The defaults of a task (cli/train_defaults.h) for the data, model and optimizer flags, and
 * seed 1337, flash attention, the cpu, no recomputation, float32. */
void fg_train_flags_defaults(fg_flag *f, const fg_train_defaults *d);

/* The invariants of the flags, checked after parsing, in this order: --byte needs --data;
 * --data-bin excludes --data and needs --vocab-size, which needs --data-bin; --device
 * is cpu or cuda, and that device starts (fg_device_start; its reason otherwise, after
 * "--device cuda: "); --attn and --recompute name a setting; --dtype is float32 or bfloat16, and bfloat16 needs
 * a device with bf16 kernels (cuda; on the cpu: "--dtype bfloat16: ..." and exit 2); --n-head divides --n-embd;
 * --arch, --pos, --norm and --mlp name a setting, --n-kv-head divides --n-head, --window is a pattern of S
 * and L; --min-lr <= --lr. FG_OK with *run filled, else the error (a usage error). */
fg_status fg_train_flags_check(const fg_flag *f, fg_train_choice *run);

/* The data: --data with its tokenizer (block size --block-size; --tokenizer's BPE, else model_tok when
 * it is a BPE and --byte is not given, else a character-level one), --data-bin with --vocab-size
 * (and --tokenizer's BPE, else model_tok's when it is one, as the ids' tokenizer), or the addition task with --digits and the given answer_only. Caller
 * frees. NULL + fg_last_error() when it does not load. */
fg_source *fg_train_flags_source(const fg_flag *f, int answer_only, const fg_tokenizer *model_tok);

/* The configuration of a fresh run on src. The caller sets cfg->steps, cfg->eval_every and
 * cfg->eval_iters; the rest comes from the flags and *run: --block-size, when given, must hold the
 * addition task's sequences (its default is their length); --lr-decay-steps defaults to
 * cfg->steps; the architecture is --arch's preset with each given option flag applied over it. Then the whole is checked (fg_train_config_check). FG_OK, or FG_ERR_ARG. */
fg_status fg_train_flags_config(const fg_flag *f, const fg_source *src, const fg_train_choice *run,
                                fg_train_config *cfg);

/* The architecture flags over m: --arch's preset when given (else m's options stay), then each
 * option flag given. */
void fg_train_flags_arch(const fg_flag *f, const fg_train_choice *run, fg_gpt_config *m);
/* The first architecture flag given (its name, "--arch", "--pos", ...), or NULL. */
const char *fg_train_flags_arch_given(const fg_flag *f);

/* --threads, when given: the size of flashgrad's pool and of OpenBLAS's. */
void fg_train_flags_threads(const fg_flag *f);

#endif /* FG_TRAIN_FLAGS_H */
