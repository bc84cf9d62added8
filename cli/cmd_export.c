/* cmd_export.c — `flashgrad export`: a model handed to another program.
 *
 *   flashgrad export --ckpt SRC --to hf OUT_DIR        a Hugging Face folder (the class by the arch;
 *                                                      --dtype float32|bfloat16|float16, --max-shard-size)
 *   flashgrad export --ckpt SRC --to llmc OUT.bin      an llm.c model file (--llmc-dtype float32|bfloat16)
 *
 * SRC is anything `sample --ckpt` takes (train/model_files.h): a flashgrad run folder or model file,
 * a Hugging Face folder, an llm.c model file. OUT is written atomically; an existing OUT is replaced
 * only with --overwrite, and only when it is itself such an export (an HF folder: one flashgrad's
 * export wrote, holding nothing else). What a killed export left beside OUT goes (model_files.h).
 * Exit: 0 written, 1 unreadable source or failed write, 2 usage error (and an OUT that exists).
 */
#include <stdio.h>
#include <string.h>

#include "train/model_files.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/flags.h"

enum { E_CKPT, E_TO, E_DTYPE, E_HF_DTYPE, E_SHARD, E_OVERWRITE, E_COUNT };

int fg_cmd_export(int argc, char **argv) {
    fg_flag f[E_COUNT] = {
        [E_CKPT] = {"--ckpt", FG_FLAG_STR, "SRC",
                    "the model: a flashgrad run folder, a Hugging Face folder (GPT-2, Llama, NanoChat) or an llm.c .bin (required)"},
        [E_TO] = {"--to", FG_FLAG_STR, "FORMAT", "hf (a folder for transformers) or llmc (llm.c's model file)"},
        [E_DTYPE] = {"--llmc-dtype", FG_FLAG_STR, "DT", "llmc: float32 (version 3) or bfloat16 (version 5)",
                     .s = "float32"},
        [E_HF_DTYPE] = {"--dtype", FG_FLAG_STR, "DT", "hf: the weights' dtype, float32, bfloat16 or float16 (rounded to nearest even)",
                        .s = "float32"},
        [E_SHARD] = {"--max-shard-size", FG_FLAG_STR, "SIZE",
                     "hf: split the weights over files of at most SIZE (B, KiB, MiB, GiB) with an index, as "
                     "transformers' save_pretrained (default: one file)"},
        [E_OVERWRITE] = {"--overwrite", FG_FLAG_BOOL, NULL, "replace an existing export at OUT"},
    };
    /* OUT is the one positional argument: take it out before the flags are parsed */
    const char *out = NULL;
    char *rest[256];
    int nrest = 0;
    if (argc > 256) {
        fprintf(stderr, "flashgrad export: too many arguments\n");
        return 2;
    }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int takes_value = i > 0 && a[0] == '-' && strcmp(a, "--overwrite") && strcmp(a, "--help") && strcmp(a, "-h") &&
                          !strchr(a, '=');
        if (i > 0 && a[0] != '-') {
            if (out) {
                fprintf(stderr, "flashgrad export: one output path, not '%s' and '%s'\n", out, a);
                return 2;
            }
            out = a;
            continue;
        }
        rest[nrest++] = argv[i];
        if (takes_value && i + 1 < argc) rest[nrest++] = argv[++i];
    }
    int rc = fg_flags_parse("export", f, E_COUNT, nrest, rest);
    if (rc == -1) {
        fg_flags_help(stdout, "export", "--ckpt SRC --to hf|llmc OUT [--dtype DT] [--max-shard-size SIZE] [--llmc-dtype DT] [--overwrite]", f,
                      E_COUNT);
        return 0;
    }
    if (rc) return rc;
    if (!f[E_CKPT].given || !f[E_TO].given || !out) {
        fprintf(stderr, "flashgrad export: usage: flashgrad export --ckpt SRC --to hf|llmc OUT\n");
        return 2;
    }
    const int to_hf = !strcmp(f[E_TO].s, "hf"), to_llmc = !strcmp(f[E_TO].s, "llmc");
    if (!to_hf && !to_llmc) {
        fprintf(stderr, "flashgrad export: --to: unknown format '%s' (hf or llmc)\n", f[E_TO].s);
        return 2;
    }
    int version = !strcmp(f[E_DTYPE].s, "float32") ? 3 : !strcmp(f[E_DTYPE].s, "bfloat16") ? 5 : 0;
    if (!version) {
        fprintf(stderr, "flashgrad export: --llmc-dtype: '%s' is neither float32 nor bfloat16\n", f[E_DTYPE].s);
        return 2;
    }
    if (f[E_DTYPE].given && !to_llmc) {
        fprintf(stderr, "flashgrad export: --llmc-dtype applies to --to llmc only\n");
        return 2;
    }
    fg_hf_save_opts hf = {.dtype = FG_ST_F32};
    if (!strcmp(f[E_HF_DTYPE].s, "bfloat16"))
        hf.dtype = FG_ST_BF16;
    else if (!strcmp(f[E_HF_DTYPE].s, "float16"))
        hf.dtype = FG_ST_F16;
    else if (strcmp(f[E_HF_DTYPE].s, "float32")) {
        fprintf(stderr, "flashgrad export: --dtype: '%s' is not float32, bfloat16 or float16\n", f[E_HF_DTYPE].s);
        return 2;
    }
    if (f[E_SHARD].given && fg_parse_size(f[E_SHARD].s, &hf.max_shard_bytes)) {
        fprintf(stderr, "flashgrad export: --max-shard-size: '%s' is not a size (a positive number of B, KiB, MiB or GiB)\n",
                f[E_SHARD].s);
        return 2;
    }
    if ((f[E_HF_DTYPE].given || f[E_SHARD].given) && !to_hf) {
        fprintf(stderr, "flashgrad export: %s applies to --to hf only (llm.c's file: --llmc-dtype)\n",
                f[E_HF_DTYPE].given ? "--dtype" : "--max-shard-size");
        return 2;
    }
    fg_model_file *m = fg_model_file_load(f[E_CKPT].s);
    if (!m) {
        fprintf(stderr, "flashgrad export: %s\n", fg_last_error());
        return 1;
    }
    fg_status st = to_hf ? fg_hf_save_with(m->model, m->tokenizer, out, (int)f[E_OVERWRITE].i, &hf)
                         : fg_llmc_save(m->model, out, version, (int)f[E_OVERWRITE].i);
    const fg_gpt_config *c = &m->model->cfg;
    int code = 0;
    if (st != FG_OK) {
        fprintf(stderr, "flashgrad export: %s\n", fg_last_error());
        code = st == FG_ERR_ARG ? 2 : 1;
    } else {
        fprintf(stderr, "flashgrad export: %s %s model (L %d, H %d, C %d, block %d, vocabulary %d) written to %s (%s)\n",
                fg_model_format_name(m->format), fg_gpt_arch_name(c->arch), c->n_layer, c->n_head, c->n_embd, c->block_size, c->vocab_size, out,
                to_hf ? (hf.dtype == FG_ST_F32 ? "Hugging Face folder, float32" : hf.dtype == FG_ST_BF16 ? "Hugging Face folder, bfloat16" : "Hugging Face folder, float16")
                : version == 3 ? "llm.c float32" : "llm.c bfloat16");
        const int bpe = m->tokenizer && fg_tokenizer_kind(m->tokenizer) == FG_TOK_BPE;
        if (m->tokenizer || m->format != FG_MODEL_FLASHGRAD)
            fprintf(stderr, "flashgrad export: %s\n",
                    bpe && to_hf    ? "the BPE tokenizer's files are beside the model"
                    : bpe           ? "the BPE tokenizer is not part of llm.c's model file: keep its files beside it"
                    : m->tokenizer  ? "the checkpoint's character/byte tokenizer is not part of either format: "
                                      "encode text the same way (one token per byte) on the other side"
                                    : "the weights only");
    }
    fg_model_file_free(m);
    return code;
}
