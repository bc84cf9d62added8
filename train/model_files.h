/* model_files.h — models in and out: flashgrad checkpoints, Hugging Face folders, llm.c files.
 *
 * One loader takes any path a user may hand over and says what it found:
 *   - a flashgrad run folder, or its model.safetensors (train/checkpoint.h): weights, the
 *     configuration, the tokenizer, the step;
 *   - a Hugging Face folder of GPT2LMHeadModel, LlamaForCausalLM or NanoChatForCausalLM (what
 *     save_pretrained writes; config.json's model_type "gpt2", "llama" or "nanochat" says which):
 *     config.json plus model.safetensors, or shards listed in model.safetensors.index.json
 *     ("weight_map"); or such a .safetensors file with config.json beside it. F32, F16 and BF16
 *     tensors load (into float32), whatever config.json's dtype says. Any tensor the model does not
 *     have, a missing one or a wrong shape is refused; config.json must describe what flashgrad
 *     computes, and a key that asks for anything else is refused by name.
 *     GPT-2: names are GPT2LMHeadModel's ("transformer." may be absent, as GPT2Model writes them);
 *     the four matmul weights c_attn, attn.c_proj, c_fc and mlp.c_proj are Conv1D's (in, out) and
 *     are transposed into flashgrad's (out, in); lm_head.weight, when stored, must equal wte (the
 *     head is tied); the causal-mask buffers of older files (attn.bias, attn.masked_bias) are
 *     skipped. config.json: tanh GELU ("gelu_new"), LayerNorm epsilon 1e-5, n_inner 4 n_embd, tied
 *     embeddings, plain attention scaling.
 *     Llama and NanoChat: the names are flashgrad's llama and nanochat names (train/gpt.h), nn.Linear
 *     (out, in) like flashgrad's; a tied model's lm_head.weight, when stored, must equal
 *     model.embed_tokens.weight; older files' rotary_emb.inv_freq buffers are skipped. config.json
 *     maps onto fg_gpt_config: num_hidden_layers, num_attention_heads, num_key_value_heads (GQA),
 *     hidden_size, intermediate_size, vocab_size, max_position_embeddings (the block size),
 *     rms_norm_eps, rope_parameters.rope_theta (or rope_theta, transformers 4), tie_word_embeddings,
 *     attention_bias with mlp_bias (Llama: both or neither; NanoChat: none),
 *     final_logit_softcapping (NanoChat; absent means transformers' default 15). Refused by name:
 *     hidden_act other than silu (Llama) or relu2 (NanoChat), head_dim other than hidden_size /
 *     num_attention_heads, any rope_type but "default" or rope_scaling, partial rotary, interleaved
 *     rotary, mixtures of experts, sliding windows, layer_types other than full attention,
 *     pretraining_tp other than 1, quantization_config, attention logit softcapping.
 *   - an llm.c model file (gpt2_124M.bin, written by llm.c's train_gpt2.py write_model): a header of
 *     256 int32 (magic 20240326, version 3 = float32 or 5 = bfloat16, then maxT, V, L, H, C, Vp),
 *     then every parameter in llm.c's order — wte (Vp, C), wpe (maxT, C), then each per-block kind
 *     for all L blocks in turn (ln_1 w, b, c_attn w, b, attn.c_proj w, b, ln_2 w, b, c_fc w, b,
 *     mlp.c_proj w, b), then ln_f w, b — in PyTorch's (out, in) layout. The file must be exactly that
 *     long.
 * The model in memory has the real vocabulary V (GPT-2's 50257): llm.c's padding rows (Vp - V of
 * them, zero) are dropped on loading and written back as zeros, so they are never sampled and no
 * gradient reaches them; the loss and the softmax run over the V real tokens, as in transformers.
 *
 * The writers produce what the other programs load: fg_hf_save a folder
 * <Class>.from_pretrained(OUT) takes with no missing or unexpected keys, the class by the model's
 * arch (gpt2: GPT2LMHeadModel, llama: LlamaForCausalLM, nanochat: NanoChatForCausalLM; an option
 * the class cannot express, such as a window pattern or a softcap under llama, is refused by name):
 * config.json and one float32 model.safetensors with the names above (GPT-2's Conv1D layout; no
 * lm_head when the head is tied), fg_llmc_save an llm.c
 * model file (version 3 or 5; Vp = V rounded up to a multiple of 128, as llm.c pads). Both are
 * written atomically: a folder is built beside OUT under a temporary name and swapped in whole; an
 * existing OUT is replaced only with `overwrite`, and only when it holds nothing but what such an
 * export writes (fg_folder_check_ours, train/run_folder.h: model.safetensors carries the metadata
 * key "fg_export", which marks the folder as flashgrad's; a run folder, a Hugging Face folder from
 * elsewhere or any other file is never replaced). The folder gets 0777 less the umask (or the mode
 * of the export folder it replaces). Before writing, what a killed export to the same OUT left
 * beside it (OUT FG_TMP_MARK "XXXXXX", held by no live writer) is removed (fg_remove_leftovers).
 */
#ifndef FG_MODEL_FILES_H
#define FG_MODEL_FILES_H

#include "tensor/safetensors.h"
#include "datasets/tokenizer.h"
#include "train/checkpoint.h"
#include "train/gpt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FG_MODEL_FLASHGRAD = 0, FG_MODEL_HF, FG_MODEL_LLMC, FG_MODEL_FORMAT_COUNT } fg_model_format;

/* "flashgrad", "hf", "llmc". */
const char *fg_model_format_name(fg_model_format f);

/* A model read from a file, with what the file said about it. */
typedef struct {
    fg_model_format format;
    fg_gpt *model;                 /* CPU; float32 except a flashgrad float64 checkpoint. Owned. */
    const fg_tokenizer *tokenizer; /* the checkpoint's (flashgrad text runs), the BPE of a Hugging Face
                                    * folder's tokenizer files, else NULL. Owned. */
    fg_tokenizer *own_tokenizer;   /* a Hugging Face folder's (owned here), else NULL */
    char tokenizer_note[1024];     /* why tokenizer files beside the model are not used, or "" */
    fg_ckpt *ckpt;                 /* flashgrad: the open checkpoint (owns tokenizer), else NULL */
    int64_t step;                  /* flashgrad: the checkpoint's step, else 0 */
    int padded_vocab;              /* llm.c: Vp of the file, else 0 */
    int llmc_version;              /* llm.c: 3 or 5, else 0 */
} fg_model_file;

/* Loads `path` (any of the forms above; which one is decided from what is on disk, not from the
 * name). NULL + fg_last_error(): FG_ERR_IO when nothing loadable is there (the message says what was
 * looked for), FG_ERR_FORMAT when a file is malformed or describes a model flashgrad does not
 * compute. Caller frees with fg_model_file_free. */
fg_model_file *fg_model_file_load(const char *path);
void fg_model_file_free(fg_model_file *m); /* NULL is fine */

/* Copies the weights of `src` into `dst` (any device and dtype): the same architecture (every
 * option and every table entry) and vocabulary, dst's block size at most src's (wpe's first rows:
 * nanoGPT's crop_block_size). FG_ERR_ARG naming the first difference. */
fg_status fg_gpt_copy_weights(fg_gpt *dst, const fg_gpt *src);

/* Writes a Hugging Face folder at out_dir (see the top). FG_ERR_ARG when the model's options have
 * no equivalent in its class, when out_dir exists and overwrite is 0, or it holds anything an
 * export does not write; FG_ERR_IO on a write failure (nothing is left behind then). */
fg_status fg_hf_save(const fg_gpt *g, const char *out_dir, int overwrite);
/* How fg_hf_save_with writes the weights: dtype FG_ST_F32, FG_ST_BF16 or FG_ST_F16 (rounded to
 * nearest even, config.json's dtype saying which), and max_shard_bytes > 0 splits them over
 * model-0000i-of-0000n.safetensors files of at most that many bytes each (a larger tensor alone in
 * its file) with model.safetensors.index.json naming each tensor's file, as transformers'
 * save_pretrained does; 0 = one model.safetensors. */
typedef struct {
    fg_st_dtype dtype;
    int64_t max_shard_bytes;
} fg_hf_save_opts;

/* The same as fg_hf_save with a BPE tokenizer's files beside the model (tokenizer.json,
 * vocab.json and merges.txt, or <encoding>.tiktoken, as it was read; tok NULL or not a BPE: none)
 * and opts (NULL: float32, one file). */
fg_status fg_hf_save_with(const fg_gpt *g, const fg_tokenizer *tok, const char *out_dir, int overwrite,
                          const fg_hf_save_opts *opts);
/* Writes an llm.c model file: version 3 (float32) or 5 (bfloat16, rounded to nearest even); a
 * model that is not GPT-2 is refused (FG_ERR_ARG). The same rule for an existing file (replaced
 * with overwrite only when it is an llm.c model file). */
fg_status fg_llmc_save(const fg_gpt *g, const char *out_file, int version, int overwrite);

#ifdef __cplusplus
}
#endif
#endif /* FG_MODEL_FILES_H */
