/* cmd_eval.c — `flashgrad eval --ckpt DIR`: the train and validation loss of a saved model, writing
 * nothing (see eval.h). The model comes through fg_model_file_load, as for `sample --ckpt`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/eval.h"
#include "cli/flags.h"
#include "ops/cpu.h"
#include "train/checkpoint.h"
#include "train/model_files.h"
#include "train/trainer.h"
#include "autograd/autograd.h"


/* The model at `path` (anything `sample --ckpt` takes: a flashgrad run folder or its model file, a
 * Hugging Face folder (GPT-2, Llama, NanoChat), an llm.c model file; train/model_files.h) on the CPU, and for a flashgrad
 * run its checkpoint's record of the data and training (*ck, NULL for the GPT-2 files; its
 * configuration is valid when the optimizer file was there). NULL + fg_last_error(). */
static fg_model_file *load_model(const char *path, fg_ckpt **ck) {
    *ck = NULL;
    fg_model_file *m = fg_model_file_load(path);
    if (!m || m->format != FG_MODEL_FLASHGRAD) return m;
    *ck = fg_ckpt_open(path, 1); /* the run's batch size and seed are in the optimizer file */
    if (!*ck) fg_clear_error();  /* none: the model file's own record (m->ckpt) */
    return m;
}

/* The mean loss (and bits per byte, where tokens map to bytes) of iters fixed batches of split s,
 * as fg_trainer_eval draws them. */
static fg_status eval_loss(fg_gpt *g, const fg_source *src, fg_split s, int B, int T, int iters, uint64_t run_seed,
                           double *loss, double *bpb) {
    int32_t *x = malloc((size_t)B * T * sizeof *x), *y = malloc((size_t)B * T * sizeof *y);
    int32_t *tb = bpb ? fg_token_bytes_table(src) : NULL;
    fg_status st = x && y ? FG_OK : fg_error(FG_ERR_OOM, "eval: out of memory for a %d x %d batch", B, T);
    if (st == FG_OK) st = fg_eval_batches(g, src, s, B, T, iters, run_seed, tb, x, y, loss, bpb);
    free(tb);
    free(x);
    free(y);
    return st;
}

int fg_eval_run(const fg_eval_opts *o) {
    fg_ckpt *opt_ck = NULL;
    fg_source *src = NULL;
    int code = 0;
    fg_model_file *mf = load_model(o->ckpt, &opt_ck);
    if (!mf) {
        fprintf(stderr, "flashgrad %s: %s\n", o->cmd, fg_last_error());
        return 1;
    }
    fg_gpt *g = mf->model;
    const fg_ckpt *ck = opt_ck ? opt_ck : mf->ckpt;
    const fg_ckpt_info *in = ck ? fg_ckpt_get_info(ck) : NULL;
    if (!in) {
        /* a GPT-2 file records no data: token ids of its vocabulary are the only thing it reads */
        const char *what = mf->format == FG_MODEL_HF ? "a Hugging Face folder" : "an llm.c model file";
        if (o->data) {
            fprintf(stderr,
                    "flashgrad %s: --data: %s takes GPT-2 token ids and flashgrad has no BPE encoder; give the "
                    "tokenized data with --data-bin PATH\n",
                    o->cmd, what);
            code = 2;
            goto out;
        }
        if (!o->data_bin) {
            fprintf(stderr, "flashgrad %s: %s records no data: give its token files with --data-bin PATH\n", o->cmd,
                    what);
            code = 2;
            goto out;
        }
        src = fg_source_tokens(o->data_bin, NULL, g->cfg.vocab_size, g->cfg.block_size);
    } else {
        /* the data the checkpoint recorded, opened by its kind: a data flag of another kind is refused */
        const fg_source_ops *kind = fg_source_kinds[in->data.kind];
        const char *const flag[2] = {"--data", "--data-bin"}, *value[2] = {o->data, o->data_bin};
        const char *given = NULL;
        for (int i = 0; i < 2; i++) {
            if (kind->data_flag && !strcmp(flag[i], kind->data_flag)) {
                given = value[i];
            } else if (value[i]) {
                fprintf(stderr, "flashgrad %s: %s: the checkpoint trained on %s%s%s%s\n", o->cmd, flag[i], kind->what,
                        kind->data_flag ? " (give " : "", kind->data_flag ? kind->data_flag : "",
                        kind->data_flag ? ")" : "");
                code = 2;
                goto out;
            }
        }
        src = fg_ckpt_source(ck, given);
    }
    if (!src) {
        fprintf(stderr, "flashgrad %s: %s\n", o->cmd, fg_last_error());
        code = 1;
        goto out;
    }
    const fg_train_config *tc = in && in->has_train ? &in->train : NULL;
    const int B = o->batch_size ? o->batch_size : tc ? tc->batch_size : 12;
    const int iters = o->eval_iters ? o->eval_iters : tc ? tc->eval_iters : 20;
    const uint64_t seed = o->has_seed ? o->seed : tc ? tc->seed : 1337;
    int T = fg_source_fixed_block(src);
    if (T == 0) T = g->cfg.block_size;
    const long long step = in ? (long long)in->step : 0;
    printf("checkpoint: %s (%s) at step %lld: %d layers, %d heads, %d embd, block %d, vocabulary %d\n", o->ckpt,
           fg_model_format_name(mf->format), step, g->cfg.n_layer, g->cfg.n_head, g->cfg.n_embd, g->cfg.block_size, g->cfg.vocab_size);
    printf("eval: %d batches of %d x %d tokens per split (seed %llu%s), threads %d, nothing written\n", iters, B, T,
           (unsigned long long)seed, tc   ? ""
           : in ? "; the checkpoint has no optimizer file: batch 12, 20 batches by default"
                : "; the model file has no training record: batch 12, 20 batches by default",
           fg_pool_threads());
    double tl = NAN, vl = NAN, vb = NAN;
    if (eval_loss(g, src, FG_SPLIT_TRAIN, B, T, iters, seed, &tl, NULL) != FG_OK ||
        eval_loss(g, src, FG_SPLIT_VAL, B, T, iters, seed, &vl, &vb) != FG_OK) {
        fprintf(stderr, "flashgrad %s: evaluation: %s\n", o->cmd, fg_last_error());
        code = 1;
        goto out;
    }
    if (isfinite(vb))
        printf("step %lld: train loss %.4f, val loss %.4f, val bpb %.4f\n", step, tl, vl, vb);
    else
        printf("step %lld: train loss %.4f, val loss %.4f\n", step, tl, vl);
out:
    fg_source_free(src);
    fg_ckpt_close(opt_ck);
    fg_model_file_free(mf);
    return code;
}

enum { E_CKPT, E_DATA, E_DATA_BIN, E_ITERS, E_BATCH, E_SEED, E_THREADS, E_COUNT };

int fg_cmd_eval(int argc, char **argv) {
    fg_flag f[E_COUNT] = {
        [E_CKPT] = {"--ckpt", FG_FLAG_STR, "DIR", "a flashgrad run folder (or its model.safetensors), a Hugging Face folder (GPT-2, Llama, NanoChat) or an llm.c model file (required)"},
        [E_DATA] = {"--data", FG_FLAG_STR, "FILE", "a text file instead of the one the run trained on (default: that one)"},
        [E_DATA_BIN] = {"--data-bin", FG_FLAG_STR, "PATH",
                        "token files instead of the ones the run trained on (default: those; required for GPT-2 files)"},
        [E_ITERS] = {"--eval-iters", FG_FLAG_INT, "N", "batches per split (default: the run's)", 1, 1e7},
        [E_BATCH] = {"--batch-size", FG_FLAG_INT, "N", "sequences per batch (default: the run's)", 1, 1 << 24},
        [E_SEED] = {"--seed", FG_FLAG_U64, "N", "run seed the fixed batches derive from (default: the run's)"},
        [E_THREADS] = {"--threads", FG_FLAG_INT, "N", "threads (default: FG_NUM_THREADS or all cores)", 1, 1024},
    };
    f[E_ITERS].alias = "--eval_iters";
    f[E_BATCH].alias = "--batch_size";
    int rc = fg_flags_parse("eval", f, E_COUNT, argc, argv);
    if (rc == -1) {
        printf("The train and validation loss of a saved model, on the fixed evaluation batches `train` uses (so with\n"
               "the run's settings, the figures of its last evaluation). Reads the checkpoint; writes nothing.\n\n");
        fg_flags_help(stdout, "eval", "--ckpt PATH [--data FILE | --data-bin PATH] [--eval-iters N] [options]", f,
                      E_COUNT);
        return 0;
    }
    if (rc) return rc;
    if (!f[E_CKPT].given) {
        fprintf(stderr, "flashgrad eval: --ckpt PATH is required (a flashgrad run folder, a Hugging Face folder or an "
                        "llm.c model file)\n");
        return 2;
    }
    if (f[E_DATA].given && f[E_DATA_BIN].given) {
        fprintf(stderr, "flashgrad eval: give either --data FILE or --data-bin PATH, not both\n");
        return 2;
    }
    if (f[E_THREADS].given) {
        fg_blas_set_threads((int)f[E_THREADS].i);
        fg_pool_set_threads((int)f[E_THREADS].i);
    }
    fg_eval_opts o = {.cmd = "eval",
                      .ckpt = f[E_CKPT].s,
                      .data = f[E_DATA].given ? f[E_DATA].s : NULL,
                      .data_bin = f[E_DATA_BIN].given ? f[E_DATA_BIN].s : NULL,
                      .batch_size = f[E_BATCH].given ? (int)f[E_BATCH].i : 0,
                      .eval_iters = f[E_ITERS].given ? (int)f[E_ITERS].i : 0,
                      .has_seed = f[E_SEED].given,
                      .seed = f[E_SEED].u};
    return fg_eval_run(&o);
}
