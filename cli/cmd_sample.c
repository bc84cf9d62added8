/* cmd_sample.c — `flashgrad sample`: generate text from a checkpoint.
 *
 * Loads a model (train/model_files.h: a flashgrad run folder or model file, a Hugging Face GPT-2, Llama or NanoChat
 * folder, an llm.c model file), encodes the prompt with the checkpoint's own
 * tokenizer, and writes the prompt plus --tokens generated tokens to stdout for each of
 * --num-samples samples (sample s draws with seed + s). Sampling is softmax(logits / temperature)
 * over the top-k tokens, then the top-p nucleus, with the draws from Philox(seed): the same seed gives
 * the same text. --temperature 0 is greedy decoding. Generation keeps K and V per layer (the KV
 * cache of train/gpt.h: one new row per token); --no-kv-cache recomputes the whole context for every
 * token instead (the same tokens at temperature 0, slower). --stream writes each token as soon as it
 * is drawn. The speed, tokens/s of the generated tokens (prompt included in the time), goes to
 * stderr as one line (with --speed, or when stderr is a terminal), so stdout holds only the text.
 *
 * A model trained on token files (--data-bin) has no tokenizer of its own: each sample is printed
 * as its token ids in decimal, separated by spaces, one line per sample, or — with --tokenizer FILE
 * (llm.c's tokenizer file, datasets/tokens.h) — as the bytes of its tokens; a tokenizer smaller than
 * the model's (padded) vocabulary restricts the draws to its ids. Its prompt is given as
 * ids, --prompt-ids 50256,464 (comma-separated, each below the vocabulary); without one it starts
 * from the tokenizer's end-of-text id (a version 2 file), else from id 0. --prompt-ids works for
 * every model, and the prompt is printed before the generated tokens in the same form.
 * Exit: 0 done, 1 bad or missing checkpoint or tokenizer / prompt not in the vocabulary, 2 usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "datasets/tokens.h"
#include "ops/cpu.h"
#include "train/model_files.h"
#include "cli/commands.h"
#include "cli/flags.h"

enum {
    S_CKPT,
    S_PROMPT,
    S_PROMPT_IDS,
    S_TOKENIZER,
    S_TOKENS,
    S_TEMP,
    S_TOPK,
    S_TOPP,
    S_SEED,
    S_NUM,
    S_STREAM,
    S_NO_CACHE,
    S_SPEED,
    S_COUNT
};

/* "1,2,3" into ids[0..*n) (at most cap): decimal ids separated by single commas. 0, or 2 after
 * printing the usage error. */
static int parse_ids(const char *s, int32_t *ids, size_t cap, size_t *n) {
    *n = 0;
    const char *p = s;
    for (;;) {
        if (*p < '0' || *p > '9') break;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno || v > INT32_MAX || *n >= cap) break;
        ids[(*n)++] = (int32_t)v;
        p = end;
        if (*p == '\0') return 0;
        if (*p != ',') break;
        p++;
    }
    fprintf(stderr,
            "flashgrad sample: --prompt-ids: '%.60s' is not a list of token ids (decimal numbers separated by "
            "commas, e.g. 50256,464)\n",
            s);
    return 2;
}

/* The bytes of ids[0..n) with llm.c's tokenizer v (every id is below its vocabulary). */
static void write_vocab(const fg_token_vocab *v, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        const unsigned char *b = fg_token_vocab_bytes(v, ids[i], &len);
        if (b) fwrite(b, 1, len, stdout);
    }
}

/* ids[0..n) in decimal, separated by spaces. */
static void write_ids(const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
}

/* How the tokens of this model are printed: its own tokenizer, llm.c's tokenizer file, or ids. */
typedef struct {
    const fg_tokenizer *tok;
    const fg_token_vocab *vocab;
    size_t written; /* tokens of the current sample written so far (ids: the separator) */
} writer;

static void write_tokens(writer *w, const int32_t *ids, size_t n) {
    if (w->tok) {
        char *buf = NULL;
        size_t len = 0;
        if (fg_tokenizer_decode_text(w->tok, ids, n, &buf, &len) == FG_OK) fwrite(buf, 1, len, stdout);
        free(buf);
    } else if (w->vocab) {
        write_vocab(w->vocab, ids, n);
    } else {
        if (w->written && n) fputc(' ', stdout);
        write_ids(ids, n);
    }
    w->written += n;
}

/* --stream: each token as it comes */
static void stream_token(void *user, int j, int32_t t) {
    (void)j;
    write_tokens(user, &t, 1);
    fflush(stdout);
}

int fg_cmd_sample(int argc, char **argv) {
    fg_flag f[S_COUNT] = {
        [S_CKPT] = {"--ckpt", FG_FLAG_STR, "PATH",
                    "the model: a flashgrad run folder (or its model.safetensors), a Hugging Face folder (GPT-2, Llama, NanoChat), or "
                    "an llm.c model file (required)"},
        [S_PROMPT] = {"--prompt", FG_FLAG_STR, "TEXT", "text to continue (default: a newline, or the first token)"},
        [S_PROMPT_IDS] = {"--prompt-ids", FG_FLAG_STR, "IDS",
                          "prompt as token ids, e.g. 50256,464 (default: end-of-text of --tokenizer, or id 0)"},
        [S_TOKENIZER] = {"--tokenizer", FG_FLAG_STR, "PATH",
                         "the tokenizer of a model without one (trained on --data-bin ids, GPT-2 files): a BPE "
                         "tokenizer (a folder with tokenizer.json or vocab.json + merges.txt, a tokenizer.json, a "
                         ".tiktoken file) encodes --prompt and decodes; llm.c's gpt2_tokenizer.bin decodes only; "
                         "without one, ids are printed as numbers"},
        [S_TOKENS] = {"--tokens", FG_FLAG_INT, "N", "tokens to generate", 0, 1e7, 0, .i = 200},
        [S_TEMP] = {"--temperature", FG_FLAG_F64, "T", "softmax temperature (0: greedy)", 0, 100, 0, .d = 0.8},
        [S_TOPK] = {"--top-k", FG_FLAG_INT, "K", "sample among the K likeliest tokens (0: all)", 0, 1 << 24, 0, .i = 0},
        [S_TOPP] = {"--top-p", FG_FLAG_F64, "P",
                    "then among the likeliest tokens whose probability reaches P (nucleus; 1: all)", 0, 1, 1, .d = 1},
        [S_SEED] = {"--seed", FG_FLAG_U64, "S", "sampling seed (sample s uses S + s)", .u = 1337},
        [S_NUM] = {"--num-samples", FG_FLAG_INT, "N", "samples to generate", 1, 1000, 0, .i = 1},
        [S_STREAM] = {"--stream", FG_FLAG_BOOL, NULL, "print each token as it is generated"},
        [S_NO_CACHE] = {"--no-kv-cache", FG_FLAG_BOOL, NULL,
                        "recompute the whole context for every token (the reference; slower)"},
        [S_SPEED] = {"--speed", FG_FLAG_BOOL, NULL,
                     "print the tokens/s line to stderr (default: when stderr is a terminal)"},
    };
    int rc = fg_flags_parse("sample", f, S_COUNT, argc, argv);
    if (rc == -1) {
        fg_flags_help(stdout, "sample",
                      "--ckpt PATH [--prompt TEXT | --prompt-ids IDS] [--tokenizer FILE] [--tokens N] [--temperature T] "
                      "[--top-k K] [--top-p P] [--seed S] [--num-samples N] [--stream] [--no-kv-cache] [--speed]",
                      f, S_COUNT);
        return 0;
    }
    if (rc) return rc;
    if (!f[S_CKPT].given) {
        fprintf(stderr, "flashgrad sample: --ckpt PATH is required (a flashgrad run folder, a Hugging Face folder "
                        "or an llm.c model file)\n");
        return 2;
    }
    if (f[S_PROMPT].given && f[S_PROMPT_IDS].given) {
        fprintf(stderr, "flashgrad sample: give either --prompt TEXT or --prompt-ids IDS, not both\n");
        return 2;
    }
    /* a flashgrad checkpoint, a Hugging Face folder or an llm.c file (train/model_files.h) */
    fg_model_file *mf = fg_model_file_load(f[S_CKPT].s);
    if (!mf) {
        fprintf(stderr, "flashgrad sample: %s\n", fg_last_error());
        return 1;
    }
    const fg_tokenizer *tok = mf->tokenizer; /* NULL: token ids (a --data-bin run, GPT-2 files) */
    fg_gpt *g = mf->model;
    const int V = g->cfg.vocab_size;
    fg_token_vocab *vocab = NULL;
    fg_tokenizer *bpe = NULL; /* a --tokenizer BPE */
    int limit = 0; /* sample only ids below it (0: all V) */
    fg_gpt_kv *kv = NULL;
    int32_t *t = NULL, *work = NULL;
    int code = 0;
    if (f[S_TOKENIZER].given && tok) {
        fprintf(stderr,
                "flashgrad sample: --tokenizer: this checkpoint has its own %s tokenizer; --tokenizer is for models "
                "trained on token files (train --data-bin) and GPT-2 files\n",
                fg_tokenizer_kind(tok) == FG_TOK_BYTE ? "byte-level" : fg_tokenizer_kind(tok) == FG_TOK_BPE ? "BPE" : "character-level");
        code = 2;
        goto out;
    }
    size_t tl = f[S_TOKENIZER].given ? strlen(f[S_TOKENIZER].s) : 0;
    if (tl && !(tl > 4 && strcmp(f[S_TOKENIZER].s + tl - 4, ".bin") == 0)) {
        /* a BPE tokenizer (llm.c's .bin file decodes only, below) */
        if (!(bpe = fg_tokenizer_bpe_load(f[S_TOKENIZER].s, NULL))) {
            fprintf(stderr, "flashgrad sample: --tokenizer: %s\n", fg_last_error());
            code = 1;
            goto out;
        }
        if (fg_tokenizer_vocab_size(bpe) > V) {
            fprintf(stderr, "flashgrad sample: --tokenizer: it has %d tokens, more than the model's %d ids\n", fg_tokenizer_vocab_size(bpe), V);
            code = 1;
            goto out;
        }
        if (fg_tokenizer_vocab_size(bpe) < V) limit = fg_tokenizer_vocab_size(bpe); /* a padded vocabulary */
        tok = bpe;
    }
    if (f[S_PROMPT].given && !tok) {
        fprintf(stderr,
                "flashgrad sample: --prompt: this model has no text tokenizer (%s); give its BPE tokenizer with "
                "--tokenizer PATH (tokenizer.json, vocab.json + merges.txt, a .tiktoken file), or the prompt as ids "
                "with --prompt-ids, e.g. --prompt-ids 50256,464\n",
                mf->format == FG_MODEL_FLASHGRAD ? "trained on token ids, train --data-bin"
                : mf->tokenizer_note[0]          ? mf->tokenizer_note
                                                 : "a GPT-2 model file without tokenizer files beside it");
        code = 2;
        goto out;
    }
    if (f[S_TOKENIZER].given && !bpe) {
        vocab = fg_token_vocab_load(f[S_TOKENIZER].s);
        if (!vocab) {
            fprintf(stderr, "flashgrad sample: --tokenizer: %s\n", fg_last_error());
            code = 1;
            goto out;
        }
        if (fg_token_vocab_size(vocab) < V) {
            /* a padded vocabulary (GPT-2's 50257 tokens in 50304 ids): only decodable ids are drawn */
            limit = fg_token_vocab_size(vocab);
        }
    }
    const int V_out = limit ? limit : V; /* ids a prompt may use and a sample may hold */
    const char *prompt = f[S_PROMPT].s, *pids = f[S_PROMPT_IDS].s;
    /* prompt slots: one per byte of text, or at most one per two characters of an id list */
    size_t cap = prompt ? strlen(prompt) : pids ? strlen(pids) / 2 + 1 : 1;
    const int n_new = (int)f[S_TOKENS].i;
    t = malloc((cap + 1) * sizeof *t);
    work = malloc((cap + 1 + (size_t)n_new) * sizeof *work);
    /* one cache for every sample: its buffers are allocated (and touched) once */
    if (!(int)f[S_NO_CACHE].i && !(kv = fg_gpt_kv_create(g))) {
        fprintf(stderr, "flashgrad sample: %s\n", fg_last_error());
        code = 1;
        goto out;
    }
    if (!t || !work) {
        fprintf(stderr, "flashgrad sample: out of memory\n");
        code = 1;
        goto out;
    }
    size_t np = 0; /* prompt tokens */
    int shown = 0; /* the prompt is printed before each sample (not the default one) */
    if (pids && *pids) {
        if ((code = parse_ids(pids, t, cap, &np)) != 0) goto out;
        for (size_t i = 0; i < np; i++)
            if (t[i] >= V_out) {
                fprintf(stderr, "flashgrad sample: --prompt-ids: id %d (number %zu) is outside the vocabulary of %d\n",
                        (int)t[i], i + 1, V_out);
                code = 1;
                goto out;
            }
        shown = 1;
    } else if (prompt && *prompt) {
        int32_t *ids = NULL;
        if (fg_tokenizer_encode_text(tok, prompt, strlen(prompt), &ids, &np) != FG_OK) { /* at most one id per byte */
            fprintf(stderr, "flashgrad sample: --prompt: %s\n", fg_last_error());
            code = 1;
            goto out;
        }
        memcpy(t, ids, np * sizeof *t);
        free(ids);
        for (size_t i = 0; i < np; i++)
            if (t[i] >= V_out) {
                fprintf(stderr, "flashgrad sample: --prompt: its token %d is outside the model's vocabulary of %d\n", (int)t[i], V_out);
                code = 1;
                goto out;
            }
        shown = 1;
    } else {
        /* a BPE model starts from <|endoftext|> (GPT-2's habit), the others from a newline */
        const fg_bpe *b = tok ? fg_tokenizer_bpe(tok) : NULL;
        int32_t start = b && fg_bpe_special_id(b, "<|endoftext|>") >= 0 ? fg_bpe_special_id(b, "<|endoftext|>")
                        : tok ? fg_tokenizer_token_of(tok, '\n') : vocab ? fg_token_vocab_eot(vocab) : 0;
        t[0] = start >= 0 && start < V_out ? start : 0;
        np = 1;
    }
    if (limit)
        fprintf(stderr,
                "flashgrad sample: --tokenizer '%s' has %d tokens, the model's vocabulary %d ids: sampling only ids "
                "below %d\n",
                f[S_TOKENIZER].s, limit, V, limit);
    writer w = {.tok = tok, .vocab = vocab};
    const int stream = (int)f[S_STREAM].i;
    double seconds = 0;
    int done = 0;
    for (int s = 0; s < (int)f[S_NUM].i; s++) {
        memcpy(work, t, np * sizeof *work);
        fg_sample_opts o = {.temperature = f[S_TEMP].d,
                            .top_k = (int)f[S_TOPK].i,
                            .top_p = f[S_TOPP].d,
                            .seed = f[S_SEED].u + (uint64_t)s,
                            .vocab_limit = limit,
                            .no_cache = (int)f[S_NO_CACHE].i,
                            .kv = kv,
                            .on_token = stream ? stream_token : NULL,
                            .user = &w};
        if (f[S_NUM].i > 1) printf("---- sample %d ----\n", s + 1);
        w.written = 0;
        /* the prompt (when given), then the new tokens, in the model's form */
        if (stream && shown) {
            write_tokens(&w, work, np);
            fflush(stdout);
        }
        double t0 = fg_now();
        if (fg_gpt_generate(g, work, (int)np, n_new, &o) != FG_OK) {
            if (stream) fputc('\n', stdout);
            fprintf(stderr, "flashgrad sample: %s\n", fg_last_error());
            code = 1;
            break;
        }
        seconds += fg_now() - t0;
        done++;
        if (!stream) write_tokens(&w, shown ? work : work + np, (shown ? np : 0) + (size_t)n_new);
        fputc('\n', stdout);
        if (ferror(stdout)) break; /* output lost: main's stdout check reports it and exits 1 */
    }
    /* the speed, unless the output was lost (main reports that, in one line) */
    const int speed = f[S_SPEED].i || isatty(STDERR_FILENO);
    if (speed && done && n_new > 0 && fflush(stdout) == 0 && !ferror(stdout))
        fprintf(stderr, "flashgrad sample: %d × %d tokens in %.3f s: %.1f tokens/s (%s, prompt %zu tokens, %d threads)\n",
                done, n_new, seconds, (double)done * n_new / (seconds > 0 ? seconds : 1e-9),
                (int)f[S_NO_CACHE].i ? "recomputing the context per token" : "KV cache", np, fg_pool_threads());
out:
    free(t);
    free(work);
    fg_gpt_kv_free(kv);
    fg_token_vocab_free(vocab);
    fg_tokenizer_free(bpe);
    fg_model_file_free(mf);
    return code;
}
