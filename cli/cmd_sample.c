/* cmd_sample.c — `flashgrad sample`: generate text from a checkpoint.
 *
 * Loads DIR/model.safetensors (or a model file), encodes the prompt with the checkpoint's own
 * tokenizer, and writes the prompt plus --tokens generated tokens to stdout for each of
 * --num-samples samples. Sampling is softmax(logits / temperature) over the top-k tokens, with the
 * draws from Philox(seed): the same seed gives the same text. --temperature 0 is greedy decoding.
 * Exit: 0 done, 1 bad or missing checkpoint / prompt not in the vocabulary, 2 usage error.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/checkpoint.h"
#include "cli/commands.h"
#include "cli/flags.h"

enum { S_CKPT, S_PROMPT, S_TOKENS, S_TEMP, S_TOPK, S_SEED, S_NUM, S_COUNT };

int fg_cmd_sample(int argc, char **argv) {
    fg_flag f[S_COUNT] = {
        [S_CKPT] = {"--ckpt", FG_FLAG_STR, "DIR", "checkpoint folder (or its model.safetensors) (required)"},
        [S_PROMPT] = {"--prompt", FG_FLAG_STR, "TEXT", "text to continue (default: a newline, or the first token)"},
        [S_TOKENS] = {"--tokens", FG_FLAG_INT, "N", "tokens to generate", 0, 1e7, 0, .i = 200},
        [S_TEMP] = {"--temperature", FG_FLAG_F64, "T", "softmax temperature (0: greedy)", 0, 100, 0, .d = 0.8},
        [S_TOPK] = {"--top-k", FG_FLAG_INT, "K", "sample among the K likeliest tokens (0: all)", 0, 1 << 24, 0, .i = 0},
        [S_SEED] = {"--seed", FG_FLAG_U64, "S", "sampling seed", .u = 1337},
        [S_NUM] = {"--num-samples", FG_FLAG_INT, "N", "samples to generate", 1, 1000, 0, .i = 1},
    };
    int rc = fg_flags_parse("sample", f, S_COUNT, argc, argv);
    if (rc == -1) {
        fg_flags_help(stdout, "sample",
                      "--ckpt DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]", f, S_COUNT);
        return 0;
    }
    if (rc) return rc;
    if (!f[S_CKPT].given) {
        fprintf(stderr, "flashgrad sample: --ckpt DIR is required (a folder written by flashgrad train)\n");
        return 2;
    }
    fg_ckpt *ck = fg_ckpt_open(f[S_CKPT].s, 0);
    if (!ck) {
        fprintf(stderr, "flashgrad sample: %s\n", fg_last_error());
        return 1;
    }
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    const fg_tokenizer *tok = in->tokenizer;
    fg_gpt *g = fg_ckpt_load_model(ck);
    if (!g) {
        fprintf(stderr, "flashgrad sample: %s\n", fg_last_error());
        fg_ckpt_close(ck);
        return 1;
    }
    const char *prompt = f[S_PROMPT].s;
    size_t plen = prompt ? strlen(prompt) : 0;
    const int n_new = (int)f[S_TOKENS].i;
    int32_t *t = malloc((plen + 1 + (size_t)n_new) * sizeof *t);
    char *text = malloc(plen + 1 + (size_t)n_new + 1);
    int code = 0;
    if (!t || !text) {
        fprintf(stderr, "flashgrad sample: out of memory\n");
        code = 1;
        goto out;
    }
    int np;
    if (plen > 0) {
        if (fg_tokenizer_encode(tok, prompt, plen, t) != FG_OK) {
            fprintf(stderr, "flashgrad sample: --prompt: %s\n", fg_last_error());
            code = 1;
            goto out;
        }
        np = (int)plen;
    } else {
        int32_t nl = fg_tokenizer_token_of(tok, '\n');
        t[0] = nl >= 0 ? nl : 0;
        np = 1;
    }
    int32_t *work = malloc(((size_t)np + (size_t)n_new) * sizeof *work);
    if (!work) {
        code = 1;
        goto out;
    }
    for (int s = 0; s < (int)f[S_NUM].i; s++) {
        memcpy(work, t, (size_t)np * sizeof *work);
        fg_sample_opts o = {.temperature = f[S_TEMP].d, .top_k = (int)f[S_TOPK].i, .seed = f[S_SEED].u + (uint64_t)s};
        if (fg_gpt_generate(g, work, np, n_new, &o) != FG_OK) {
            fprintf(stderr, "flashgrad sample: %s\n", fg_last_error());
            code = 1;
            break;
        }
        /* print the prompt as given, then the new tokens */
        fg_tokenizer_decode(tok, work + np, (size_t)n_new, text);
        if (f[S_NUM].i > 1) printf("---- sample %d ----\n", s + 1);
        if (plen) fwrite(prompt, 1, plen, stdout);
        fwrite(text, 1, (size_t)n_new, stdout);
        fputc('\n', stdout);
        if (ferror(stdout)) break; /* output lost: main's stdout check reports it and exits 1 */
    }
    free(work);
out:
    free(t);
    free(text);
    fg_gpt_free(g);
    fg_ckpt_close(ck);
    return code;
}
