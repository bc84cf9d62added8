/* train_flags.c — see train_flags.h. */
#include "cli/train_flags.h"

#include <stdio.h>
#include <string.h>

#include "ops/cpu.h"
#include "ops/device.h"

_Static_assert(FG_POOL_MAX_THREADS == 64, "--threads says at most 64 (train_flags.h)");


void fg_train_flags_init(fg_flag *f) {
    static const fg_flag table[FG_TF_COUNT] = {
#define FG_TF_INIT(id, nm, ty, me, he, l, h, lop)                                                                      \
    {.name = nm, .type = ty, .meta = me, .help = he, .lo = l, .hi = h, .lo_open = lop},
        FG_TRAIN_FLAGS(FG_TF_INIT)
#undef FG_TF_INIT
    };
    memcpy(f, table, sizeof table);
}

void fg_train_flags_defaults(fg_flag *f, const fg_train_defaults *d) {
    f[FG_TF_DIGITS].i = d->digits;
    f[FG_TF_N_LAYER].i = d->n_layer;
    f[FG_TF_N_HEAD].i = d->n_head;
    f[FG_TF_N_EMBD].i = d->n_embd;
    f[FG_TF_BLOCK].i = d->block_size;
    f[FG_TF_BATCH].i = d->batch_size;
    f[FG_TF_ACCUM].i = d->grad_accum;
    f[FG_TF_LR].d = d->lr;
    f[FG_TF_MIN_LR].d = d->min_lr;
    f[FG_TF_WARMUP].i = d->warmup;
    f[FG_TF_DECAY].i = 0;
    f[FG_TF_WD].d = d->weight_decay;
    f[FG_TF_BETA1].d = d->beta1;
    f[FG_TF_BETA2].d = d->beta2;
    f[FG_TF_CLIP].d = d->grad_clip;
    f[FG_TF_DROPOUT].d = d->dropout;
    f[FG_TF_SEED].u = 1337;
    f[FG_TF_ATTN].s = "flash";
    f[FG_TF_DEVICE].s = "cpu";
    f[FG_TF_RECOMPUTE].s = "none";
    f[FG_TF_DTYPE].s = "float32";
    f[FG_TF_ARCH].s = "gpt2";
}

/* The index of s among a name function's values 0 .. n-1, or -1. */
static int parse_named(const char *s, int n, const char *(*name)(int)) {
    for (int i = 0; i < n; i++)
        if (!strcmp(s, name(i))) return i;
    return -1;
}
static const char *arch_name(int i) { return fg_gpt_arch_name((fg_gpt_arch)i); }
static const char *pos_name(int i) { return fg_gpt_pos_name((fg_gpt_pos)i); }
static const char *norm_name(int i) { return fg_gpt_norm_name((fg_gpt_norm)i); }
static const char *mlp_name(int i) { return fg_gpt_mlp_name((fg_gpt_mlp)i); }

/* The architecture flags into run (see fg_train_flags_check). */
static fg_status arch_flags_check(const fg_flag *f, fg_train_choice *run) {
    const int arch = parse_named(f[FG_TF_ARCH].s, FG_ARCH_COUNT, arch_name);
    if (arch < 0)
        return fg_error(FG_ERR_ARG, "--arch: unknown architecture '%s' (gpt2, llama or nanochat)", f[FG_TF_ARCH].s);
    run->arch = (fg_gpt_arch)arch;
    run->arch_from = NULL;
    run->pos = f[FG_TF_POS].given ? parse_named(f[FG_TF_POS].s, FG_POS_COUNT, pos_name) : -1;
    if (f[FG_TF_POS].given && run->pos < 0)
        return fg_error(FG_ERR_ARG, "--pos: unknown kind '%s' (learned or rope)", f[FG_TF_POS].s);
    run->norm = f[FG_TF_NORM].given ? parse_named(f[FG_TF_NORM].s, FG_NORM_COUNT, norm_name) : -1;
    if (f[FG_TF_NORM].given && run->norm < 0)
        return fg_error(FG_ERR_ARG, "--norm: unknown kind '%s' (layernorm, rmsnorm or rmsnorm-free)", f[FG_TF_NORM].s);
    run->mlp = f[FG_TF_MLP].given ? parse_named(f[FG_TF_MLP].s, FG_MLP_COUNT, mlp_name) : -1;
    if (f[FG_TF_MLP].given && run->mlp < 0)
        return fg_error(FG_ERR_ARG, "--mlp: unknown kind '%s' (gelu, swiglu or relu2)", f[FG_TF_MLP].s);
    if (f[FG_TF_N_KV_HEAD].given && f[FG_TF_N_HEAD].i % f[FG_TF_N_KV_HEAD].i)
        return fg_error(FG_ERR_ARG, "--n-kv-head %lld does not divide --n-head %lld", (long long)f[FG_TF_N_KV_HEAD].i,
                        (long long)f[FG_TF_N_HEAD].i);
    if (f[FG_TF_WINDOW].given) {
        const char *w = f[FG_TF_WINDOW].s;
        const size_t n = strlen(w);
        if (!n || n >= FG_GPT_WINDOW_MAX || strspn(w, "SL") != n)
            return fg_error(FG_ERR_ARG, "--window '%s': a pattern of 1 to %d letters S (short) and L (long)", w,
                            FG_GPT_WINDOW_MAX - 1);
    }
    return FG_OK;
}

fg_status fg_train_flags_check(const fg_flag *f, fg_train_choice *run) {
    if (f[FG_TF_TOKENIZER].given && f[FG_TF_BYTE].given)
        return fg_error(FG_ERR_ARG, "give either --byte or --tokenizer, not both");
    if (f[FG_TF_TOKENIZER].given && !f[FG_TF_DATA].given && !f[FG_TF_DATA_BIN].given)
        return fg_error(FG_ERR_ARG, "--tokenizer applies to --data (text) and --data-bin (its ids' tokenizer) only");
    if (!f[FG_TF_DATA].given && f[FG_TF_BYTE].given)
        return fg_error(FG_ERR_ARG, "--byte applies to --data files only%s",
                        f[FG_TF_DATA_BIN].given ? " (--data-bin files hold token ids already)" : "");
    if (f[FG_TF_DATA].given && f[FG_TF_DATA_BIN].given)
        return fg_error(FG_ERR_ARG, "give either --data FILE (text) or --data-bin PATH (token ids), not both");
    if ((f[FG_TF_DATA].given || f[FG_TF_DATA_BIN].given) && f[FG_TF_DIGITS].given)
        return fg_error(FG_ERR_ARG, "--digits applies to the addition task only, not to %s",
                        f[FG_TF_DATA].given ? "--data" : "--data-bin");
    if (f[FG_TF_VOCAB].given && !f[FG_TF_DATA_BIN].given)
        return fg_error(FG_ERR_ARG,
                        "--vocab-size applies to --data-bin only (text and the addition task have their own)");
    if (f[FG_TF_DATA_BIN].given && !f[FG_TF_VOCAB].given)
        return fg_error(FG_ERR_ARG,
                        "--data-bin needs --vocab-size V: the number of token ids (every id in the files is below it; "
                        "GPT-2's is 50257), or the --tokenizer that made them");
    const char *dev = f[FG_TF_DEVICE].s;
    if (!strcmp(dev, "cpu"))
        run->device = FG_CPU;
    else if (!strcmp(dev, "cuda"))
        run->device = FG_CUDA;
    else
        return fg_error(FG_ERR_ARG, "--device: unknown device '%s' (cpu or cuda)", dev);
    /* a CPU build says "built without CUDA" here; a CUDA build starts the device */
    if (fg_device_start(run->device) != FG_OK) {
        char why[1024]; /* fg_error must not read the buffer it writes */
        snprintf(why, sizeof why, "%s", fg_last_error());
        return fg_error(FG_ERR_DEVICE, "--device %s: %s", fg_device_name(run->device), why);
    }
    const char *attn = f[FG_TF_ATTN].s;
    if (!strcmp(attn, "flash"))
        run->attn = FG_ATTN_FLASH;
    else if (!strcmp(attn, "naive"))
        run->attn = FG_ATTN_NAIVE;
    else
        return fg_error(FG_ERR_ARG, "--attn: unknown implementation '%s' (naive or flash)", attn);
    int recompute = fg_gpt_recompute_parse(f[FG_TF_RECOMPUTE].s);
    if (recompute < 0)
        return fg_error(FG_ERR_ARG, "--recompute: unknown setting '%s' (none, attn or block)", f[FG_TF_RECOMPUTE].s);
    run->recompute = (fg_gpt_recompute)recompute;
    const int compute = fg_compute_parse(f[FG_TF_DTYPE].s);
    if (compute < 0)
        return fg_error(FG_ERR_ARG, "--dtype %s: not available (float32, or bfloat16 on cuda)", f[FG_TF_DTYPE].s);
    run->compute = (fg_compute)compute;
    if (run->compute == FG_COMPUTE_BF16 && run->device == FG_CPU)
        return fg_error(FG_ERR_ARG,
                        "--dtype bfloat16: the CPU has no bf16 kernels yet; bfloat16 mixed precision trains on cuda "
                        "(--device cuda), the CPU in float32");
    if (f[FG_TF_N_EMBD].i % f[FG_TF_N_HEAD].i)
        return fg_error(FG_ERR_ARG, "--n-embd %lld is not a multiple of --n-head %lld", (long long)f[FG_TF_N_EMBD].i,
                        (long long)f[FG_TF_N_HEAD].i);
    fg_status ast = arch_flags_check(f, run);
    if (ast != FG_OK) return ast;
    if (f[FG_TF_MIN_LR].d > f[FG_TF_LR].d)
        return fg_error(FG_ERR_ARG, "--min-lr %g is larger than --lr %g", f[FG_TF_MIN_LR].d, f[FG_TF_LR].d);
    return FG_OK;
}

fg_source *fg_train_flags_source(const fg_flag *f, int answer_only, const fg_tokenizer *model_tok) {
    fg_tokenizer *bpe = NULL;
    if (f[FG_TF_TOKENIZER].given && !(bpe = fg_tokenizer_bpe_load(f[FG_TF_TOKENIZER].s, NULL))) {
        char why[1024]; /* fg_error must not read the buffer it writes */
        snprintf(why, sizeof why, "%s", fg_last_error());
        fg_error(fg_last_status(), "--tokenizer: %s", why);
        return NULL;
    }
    fg_source *src = NULL;
    if (f[FG_TF_DATA].given) {
        fg_text_options to = fg_text_default_options((int)f[FG_TF_BLOCK].i);
        to.kind = f[FG_TF_BYTE].given ? FG_TOK_BYTE : FG_TOK_CHAR;
        /* a model's BPE tokenizer (--init-from a folder with one) reads the text unless told otherwise */
        to.tokenizer = bpe ? bpe : !f[FG_TF_BYTE].given && model_tok && fg_tokenizer_kind(model_tok) == FG_TOK_BPE ? model_tok : NULL;
        src = fg_source_text(f[FG_TF_DATA].s, &to);
    } else if (f[FG_TF_DATA_BIN].given) {
        src = fg_source_tokens(f[FG_TF_DATA_BIN].s, NULL, (int)f[FG_TF_VOCAB].i, (int)f[FG_TF_BLOCK].i);
        /* the ids' tokenizer: --tokenizer's, else a model's BPE (--init-from a folder with one) */
        const fg_tokenizer *ids_tok = bpe ? bpe : model_tok && fg_tokenizer_kind(model_tok) == FG_TOK_BPE ? model_tok : NULL;
        if (src && ids_tok && (bpe || !fg_source_tokenizer(src)) && fg_source_tokens_set_tokenizer(src, ids_tok) != FG_OK) {
            fg_source_free(src);
            src = NULL;
        }
    }
    fg_tokenizer_free(bpe);
    if (f[FG_TF_DATA].given || f[FG_TF_DATA_BIN].given) return src;
    fg_addition_config ac = fg_addition_default_config();
    ac.n_digits = (int)f[FG_TF_DIGITS].i;
    ac.answer_only = answer_only;
    return fg_source_addition(&ac);
}

fg_status fg_train_flags_config(const fg_flag *f, const fg_source *src, const fg_train_choice *run,
                                fg_train_config *cfg) {
    int block = (int)f[FG_TF_BLOCK].i;
    const int T = fg_source_fixed_block(src);
    if (T) {
        if (f[FG_TF_BLOCK].given && block < T)
            return fg_error(FG_ERR_ARG, "--block-size %d is shorter than the addition task's sequences (%d)", block, T);
        if (!f[FG_TF_BLOCK].given) block = T;
    }
    cfg->model = fg_gpt_default_config();
    cfg->model.n_layer = (int)f[FG_TF_N_LAYER].i;
    cfg->model.n_head = (int)f[FG_TF_N_HEAD].i;
    cfg->model.n_embd = (int)f[FG_TF_N_EMBD].i;
    cfg->model.block_size = block;
    cfg->model.vocab_size = fg_source_vocab_size(src);
    cfg->model.dropout = f[FG_TF_DROPOUT].d;
    cfg->model.attn = run->attn;
    cfg->model.recompute = run->recompute;
    cfg->model.compute = run->compute;
    cfg->model.device = run->device;
    /* the architecture: a model's (--init-from), or the preset and each option given */
    if (run->arch_from) {
        fg_gpt_copy_arch(&cfg->model, run->arch_from);
    } else {
        fg_gpt_arch_preset(&cfg->model, run->arch);
        fg_train_flags_arch(f, run, &cfg->model);
    }
    cfg->batch_size = (int)f[FG_TF_BATCH].i;
    cfg->grad_accum = (int)f[FG_TF_ACCUM].i;
    cfg->seed = f[FG_TF_SEED].u;
    cfg->opt = (fg_adamw_config){.lr = f[FG_TF_LR].d,
                                 .min_lr = f[FG_TF_MIN_LR].d,
                                 .warmup = f[FG_TF_WARMUP].i,
                                 .decay_steps = f[FG_TF_DECAY].given ? f[FG_TF_DECAY].i : cfg->steps,
                                 .beta1 = f[FG_TF_BETA1].d,
                                 .beta2 = f[FG_TF_BETA2].d,
                                 .eps = 1e-8,
                                 .weight_decay = f[FG_TF_WD].d,
                                 .grad_clip = f[FG_TF_CLIP].d};
    return fg_train_config_check(cfg);
}

void fg_train_flags_arch(const fg_flag *f, const fg_train_choice *run, fg_gpt_config *m) {
    if (f[FG_TF_ARCH].given) fg_gpt_arch_preset(m, run->arch);
    if (f[FG_TF_N_KV_HEAD].given) m->n_kv_head = (int)f[FG_TF_N_KV_HEAD].i;
    if (run->pos >= 0) m->pos = (fg_gpt_pos)run->pos;
    if (f[FG_TF_ROPE_THETA].given) m->rope_theta = f[FG_TF_ROPE_THETA].d;
    if (run->norm >= 0) m->norm = (fg_gpt_norm)run->norm;
    if (f[FG_TF_NORM_EPS].given) m->norm_eps = f[FG_TF_NORM_EPS].d;
    if (f[FG_TF_EMB_NORM].given) m->emb_norm = (int)f[FG_TF_EMB_NORM].i;
    if (f[FG_TF_QK_NORM].given) m->qk_norm = (int)f[FG_TF_QK_NORM].i;
    if (run->mlp >= 0) m->mlp = (fg_gpt_mlp)run->mlp;
    if (f[FG_TF_MLP_HIDDEN].given) m->mlp_hidden = (int)f[FG_TF_MLP_HIDDEN].i;
    if (f[FG_TF_BIAS].given) m->no_bias = !f[FG_TF_BIAS].i;
    if (f[FG_TF_TIE_HEAD].given) m->untie_head = !f[FG_TF_TIE_HEAD].i;
    if (f[FG_TF_SOFTCAP].given) m->logit_softcap = f[FG_TF_SOFTCAP].d;
    if (f[FG_TF_WINDOW].given) snprintf(m->window, sizeof m->window, "%s", f[FG_TF_WINDOW].s);
}

const char *fg_train_flags_arch_given(const fg_flag *f) {
    static const int ids[] = {FG_TF_ARCH,     FG_TF_N_KV_HEAD, FG_TF_POS,     FG_TF_ROPE_THETA, FG_TF_NORM,
                              FG_TF_NORM_EPS, FG_TF_EMB_NORM,  FG_TF_QK_NORM, FG_TF_MLP,        FG_TF_MLP_HIDDEN,
                              FG_TF_BIAS,     FG_TF_TIE_HEAD,  FG_TF_SOFTCAP, FG_TF_WINDOW};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (f[ids[i]].given) return f[ids[i]].name;
    return NULL;
}

void fg_train_flags_threads(const fg_flag *f) {
    if (!f[FG_TF_THREADS].given) return;
    fg_blas_set_threads((int)f[FG_TF_THREADS].i);
    fg_pool_set_threads((int)f[FG_TF_THREADS].i);
}
