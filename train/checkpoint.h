/* checkpoint.h — a run saved as two safetensors files, and read back.
 *
 * DIR/model.safetensors      the weights, named as nanoGPT names them (train/gpt.h), so PyTorch
 *                            and Hugging Face tools load them; __metadata__ holds the model
 *                            configuration (with "compute_dtype" = "bfloat16" for a run in bf16
 *                            mixed precision, absent for float32), the tokenizer
 *                            (datasets/tokenizer.h's string), what data the run trained on, the
 *                            step and "params_xxh64" (see below).
 * DIR/optimizer.safetensors  what a resumed run needs beyond the weights: AdamW's moments
 *                            "exp_avg" and "exp_avg_sq" (P) in the parameters' flat order,
 *                            "step" (I64, 1), "rng" (U64, 2: the run seed and the step — every
 *                            random draw is a pure function of those, so this is the whole RNG
 *                            state), and the training configuration in its metadata; a run
 *                            with Muon (train/muon.h) adds "muon_momentum_buffer" (the hidden
 *                            matrices' buffers back to back in table order) and the metadata
 *                            "optimizer" = "muon", "muon_lr", "muon_momentum", "muon_nesterov",
 *                            "muon_ns_steps", "muon_weight_decay", "muon_adjust_lr", "muon_t"
 *                            (absent "optimizer": AdamW alone).
 * The configuration's keys (model, architecture, run, Muon) are the rows of train/ckpt_keys.h: each
 * is written, read with its range, and held on --resume from its row.
 *
 * Pairing. Both files are written atomically (fileio.h). Both record the step and params_xxh64,
 * the XXH64 of the flat parameter buffer, and a resume checks that they agree. A save first renames
 * the old optimizer file to optimizer.prev.safetensors, then writes the new optimizer file, then the
 * new model: a kill at any moment leaves a model whose own optimizer state is on disk (the new file
 * or the .prev one), and a resume picks the one that pairs with the model. (The rename only happens
 * when the optimizer file pairs with the model: after a killed save the model's state is .prev, and
 * the next save keeps it there until its own model is in place.) A pair that still does
 * not match (files copied from elsewhere) is refused with a message naming both steps.
 *
 * Reading validates everything before allocating the model: the format (fileio/safetensors do the
 * bytes: truncation, corruption via the checksum, which covers the metadata and the tensor table as
 * well as the data), flashgrad's kind and version tags (a foreign safetensors file is refused by
 * name, one written by an older flashgrad by its version), every metadata value (exactly as the
 * writer writes it: canonical integers, %.17g numbers, names of enums; ranges by the library's own
 * configuration checks; no key the reader does not know), the tokenizer, that every expected
 * tensor is present with the expected shape and dtype and nothing else is, and that every
 * parameter and moment is finite (and every second moment >= 0). Each error message names the file
 * and the problem.
 *
 * Version 2 (this one) differs from version 1 in the checksum (safetensors.h: "xxh64v2", over the
 * metadata too), "text.path" stored with '%' and bytes outside UTF-8 escaped as %XX (so any file
 * name can be stored), and "text.path_abs". Version 1 files are refused by name.
 *
 * A run on token files (data "tokens", tokenizer "none") records each file as text files are
 * recorded: "tokens.train.{path,path_abs,xxh64,format,count}", then "tokens.val" ("file" with the
 * same five keys under "tokens.val.", or "train_tail": the train file's last tenth); the vocabulary
 * is "vocab_size". A run on a shard set (datasets/tokens.h) records instead the folder or pattern it
 * was given, "tokens.source" and "tokens.source_abs", then "tokens.train.shards" (the count N) and
 * "tokens.train.shard.K" for K = 0 .. N-1 in the set's order, each "<xxh64> <format> <ids> <path>"
 * (the path stored as paths are), and "tokens.val": "shards" with "tokens.val.shards" and
 * "tokens.val.shard.K" the same way, or "train_tail" (the last tenth of the train sequence).
 */
#ifndef FG_CHECKPOINT_H
#define FG_CHECKPOINT_H

#include <stdint.h>

#include "datasets/tokenizer.h"
#include "train/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_CKPT_MODEL_FILE "model.safetensors"
#define FG_CKPT_OPTIM_FILE "optimizer.safetensors"
/* The optimizer state of the previous save, kept until the next model file is in place. */
#define FG_CKPT_OPTIM_PREV_FILE "optimizer.prev.safetensors"

/* What a checkpoint says about itself. */
typedef struct {
    fg_gpt_config model;
    int64_t step;
    /* what it trained on, as its data's kind read it back (datasets/source.h); owned by the
     * checkpoint */
    fg_source_identity data;
    const fg_tokenizer *tokenizer;        /* owned by the checkpoint; NULL for token files (no tokenizer) */
    uint64_t params_hash;
    int has_train;         /* the optimizer file was read: train and moments are valid */
    fg_train_config train; /* the run's configuration (model part = `model`) */
} fg_ckpt_info;

typedef struct fg_ckpt fg_ckpt;

/* Opens `path`: a folder holding model.safetensors (and optimizer.safetensors when
 * with_optimizer), or a model .safetensors file itself (then the optimizer file is looked for in
 * the same folder). Validates as described at the top. NULL + fg_last_error() (FG_ERR_IO when a
 * file is missing or unreadable, FG_ERR_FORMAT when one is malformed, foreign or mismatched). */
fg_ckpt *fg_ckpt_open(const char *path, int with_optimizer);
void fg_ckpt_close(fg_ckpt *c); /* NULL is fine */
const fg_ckpt_info *fg_ckpt_get_info(const fg_ckpt *c);

/* A new model (on the CPU, the file's dtype) holding the stored weights. Caller frees. */
fg_gpt *fg_ckpt_load_model(const fg_ckpt *c);
/* Into a trainer made from the checkpoint's configuration: weights, moments, AdamW's t and the
 * step. Needs with_optimizer. */
fg_status fg_ckpt_restore(const fg_ckpt *c, fg_trainer *tr);

/* Writes DIR/optimizer.safetensors then DIR/model.safetensors (keeping the previous optimizer file as
 * optimizer.prev.safetensors until the model is in place; see the top) for the current state.
 * DIR must exist. */
fg_status fg_ckpt_save(const char *dir, const fg_trainer *tr);

/* Builds everything fg_ckpt_save(dir, tr) would write, checks it as fg_ckpt_open would read it
 * (the metadata) and as the writer would (paths, header limits), and writes nothing: a run calls it
 * before its first step, so a checkpoint cannot fail for any reason but the disk later. */
fg_status fg_ckpt_check_savable(const char *dir, const fg_trainer *tr);

/* The data the checkpoint trained on, opened again by its kind (fg_source_reopen): the addition
 * task with its settings; a text file tokenized with the checkpoint's tokenizer and split as it
 * was; token files (a file, a pair or a shard set) for its vocabulary and block size. `given` (a
 * path the user passed: --data for text, --data-bin for token files) is used alone when not NULL;
 * otherwise the paths recorded in the checkpoint are tried as written (from the current folder when
 * relative), then the absolute ones recorded beside them. A candidate counts only if its contents
 * hash to the recorded XXH64 (every file of it; a shard set must be the same shards in the same
 * order, and the error names the first shard added, missing, changed or moved). NULL + an error
 * naming every path tried and what was wrong with it (FG_ERR_IO). Caller frees with fg_source_free. */
fg_source *fg_ckpt_source(const fg_ckpt *c, const char *given);

/* XXH64 of a model's flat parameter buffer (the pairing check). */
uint64_t fg_ckpt_params_hash(const fg_gpt *g);

#ifdef __cplusplus
}
#endif
#endif /* FG_CHECKPOINT_H */
