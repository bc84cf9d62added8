/* train_setup.c — the run of `flashgrad train` before its first step (cli/train_cmd.h): the
 * configuration, fresh from the flags or resumed from the checkpoint in --out (whose settings the
 * flags may only change where that keeps the curve), the folder (train/run_folder.h) and the
 * trainer, the agreement across ranks, and --eval-only. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/eval.h"
#include "cli/train_cmd.h"
#include "tensor/fileio.h"
#include "train/ckpt_keys.h"

static int same_d(double a, double b) { return a == b; }

/* The flag of a checkpoint key a resumed run keeps: "--" + the key, '_' as '-' (ckpt_keys.h). */
static const fg_flag *kept_flag(const fg_flag *f, const char *key) {
    char name[64] = "--";
    for (size_t i = 0; key[i] && i + 3 < sizeof name; i++) name[i + 2] = key[i] == '_' ? '-' : key[i];
    for (int k = 0; k < FG_TF_COUNT; k++)
        if (!strcmp(f[k].name, name)) return &f[k];
    FG_ASSERT(0, "a kept checkpoint key has no flag");
    return NULL;
}
/* --resume: flag k, when given, must not differ from the checkpoint's value. */
static void keep_i(const fg_flag *k, int64_t val) {
    if (k->given && k->i != val)
        fg_train_die(2, "%s %lld differs from the checkpoint's %lld; a resumed run keeps its settings", k->name,
                     (long long)k->i, (long long)val);
}
static void keep_d(const fg_flag *k, double val) {
    if (k->given && !same_d(k->d, val))
        fg_train_die(2, "%s %g differs from the checkpoint's %g; a resumed run keeps its settings", k->name, k->d, val);
}
static void keep_u(const fg_flag *k, uint64_t val) {
    if (k->given && k->u != val) fg_train_die(2, "%s differs from the checkpoint's %" PRIu64, k->name, val);
}
static void keep_s(const fg_flag *k, const char *val) {
    if (k->given && strcmp(k->s, val))
        fg_train_die(2, "%s %s differs from the checkpoint's %s; a resumed run keeps its settings", k->name, k->s, val);
}
#define KEEP_ROW_I(key, v, a) keep_i(kept_flag(f, key), (int64_t)(v));
#define KEEP_ROW_F(key, v, a) keep_d(kept_flag(f, key), (double)(v));
#define KEEP_ROW_FO(key, v, a) keep_d(kept_flag(f, key), (double)(v));
#define KEEP_ROW_U(key, v, a) keep_u(kept_flag(f, key), (uint64_t)(v));
#define KEEP_ROW_E(key, v, name) keep_s(kept_flag(f, key), name(v));
#define KEEP_ROW_KEEP(type, key, v, a) KEEP_ROW_##type(key, v, a)
#define KEEP_ROW_FREE(type, key, v, a)
#define KEEP_MODEL_ROW(key, type, field, a, b, keep, when) KEEP_ROW_##keep(type, key, kept.model.field, a)
#define KEEP_RUN_ROW(key, type, field, a, b, keep, when) KEEP_ROW_##keep(type, key, kept.field, a)

/* A run folder's refusal (FG_ERR_ARG) is a usage error, exit 2; its other failures exit 1. */
static void folder_or_die(fg_status st) {
    if (st != FG_OK) fg_train_die(st == FG_ERR_ARG ? 2 : 1, "%s", fg_last_error());
}

/* What the folder's recovery or clean-up says. */
static void folder_note(const char *line) { fg_train_say("%s\n", line); }

/* --init-from after the data loaded: the same vocabulary, and the same tokenizer when the model
 * has one (a flashgrad text run), or the ids would mean other bytes. */
static void init_from_check_data(const fg_flag *f, const fg_source *src) {
    const char *path = f[F_INIT_FROM].s;
    const int V = fg_train_init_model->model->cfg.vocab_size, Vd = fg_source_vocab_size(src);
    const fg_tokenizer *mt = fg_train_init_model->tokenizer, *dt = fg_source_tokenizer(src);
    if (Vd != V)
        fg_train_die(
            2,
            "--init-from: the data's vocabulary (%d%s) differs from the model's in '%s' (%d): the token ids must mean "
            "the same thing (--byte gives 256; --data-bin --vocab-size the file's)",
            Vd, dt ? (fg_tokenizer_kind(dt) == FG_TOK_BYTE ? ", byte-level" : ", character-level") : "", path, V);
    if (mt) {
        char *a = fg_tokenizer_serialize(mt), *b = dt ? fg_tokenizer_serialize(dt) : NULL;
        int same = a && b && !strcmp(a, b);
        free(a);
        free(b);
        if (!same)
            fg_train_die(2, "--init-from: the model in '%s' has its own tokenizer, and this data's is %s", path,
                         dt ? "a different one" : "none (token ids)");
    }
}

/* The data flags a checkpoint's data may refuse, in the order they are checked, and how a refusal
 * reads: naming the data and the flag that gives it, naming the data, or naming the data the flag
 * belongs to. */
enum { SAY_DATA_AND_FLAG, SAY_DATA, SAY_OWNER };
static const struct {
    int flag, say;
} data_flags[] = {{FG_TF_DATA_BIN, SAY_DATA_AND_FLAG}, {FG_TF_VOCAB, SAY_DATA_AND_FLAG},
                  {FG_TF_DATA, SAY_DATA_AND_FLAG},     {F_TASK, SAY_DATA},
                  {FG_TF_DIGITS, SAY_OWNER},           {F_EVAL_PROBLEMS, SAY_OWNER},
                  {F_ANSWER_ONLY, SAY_OWNER}};

/* The index of flag `name` in f. */
static int flag_index(const fg_flag *f, const char *name) {
    for (int k = 0; k < F_COUNT; k++)
        if (!strcmp(f[k].name, name)) return k;
    FG_ASSERT(0, "a data kind names a flag train does not have");
    return -1;
}

/* --resume: the data of checkpoint ck (in --out), as its kind records it: the data flags it does
 * not take are refused, the settings it keeps kept, and the data opened again (from its own flag
 * when given, else from what the checkpoint recorded) into r->src. */
static void resume_data(const train_args *a, train_run *r, const fg_ckpt *ck, const char *out) {
    const fg_flag *f = a->f;
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    const fg_source_ops *kind = fg_source_kinds[in->data.kind];
    for (size_t i = 0; i < sizeof data_flags / sizeof data_flags[0]; i++) {
        const int k = data_flags[i].flag;
        const int given = k == FG_TF_DATA_BIN ? a->is_bin : k == FG_TF_DATA ? a->is_text : f[k].given;
        const fg_source_ops *owner = fg_source_kind_taking(f[k].name);
        if (!given || owner == kind) continue;
        if (data_flags[i].say == SAY_OWNER)
            fg_train_die(2, "%s applies to %s only; the checkpoint in '%s' was trained on %s", f[k].name,
                         owner ? owner->what : "other data", out, kind->what);
        const int with_flag = data_flags[i].say == SAY_DATA_AND_FLAG && kind->data_flag;
        fg_train_die(2, "%s: the checkpoint in '%s' was trained on %s%s%s%s", f[k].name, out, kind->what,
                     with_flag ? " (" : "", with_flag ? kind->data_flag : "", with_flag ? ")" : "");
    }
    for (const char *const *fl = kind->flags; *fl; fl++) {
        int64_t v;
        if (fg_source_kept(&in->data, *fl, &v)) keep_i(&f[flag_index(f, *fl)], v);
    }
    /* the kind's own flag if given, else what the checkpoint recorded (the paths as written, then
     * the absolute ones) */
    const int k = kind->data_flag ? flag_index(f, kind->data_flag) : -1;
    const int given = k == FG_TF_DATA_BIN ? a->is_bin : k == FG_TF_DATA ? a->is_text : k >= 0 && f[k].given;
    r->src = fg_ckpt_source(ck, given ? f[k].s : NULL);
    if (!r->src && kind->data_flag)
        fg_train_die(1, "--resume: %s%s%s%s%s", fg_last_error(), given ? "" : "; give ", given ? "" : kind->data_noun,
                     given ? "" : " with ", given ? "" : kind->data_flag);
    if (!r->src) fg_train_die(1, "%s", fg_last_error());
}

/* --resume: the configuration of the checkpoint in --out, which the flags may only change where
 * that keeps the curve (steps, decay, evaluation, attention, recompute, device; not --dtype). Takes
 * the folder's lock before reading the checkpoint; leaves it open in r->ck. What it opens goes
 * into *r at once, so that it stays reachable when a check stops the program (the leak checkers
 * see it). */
static void configure_resumed(const train_args *a, train_run *r) {
    const fg_flag *f = a->f;
    const char *out = a->out;
    struct stat sb;
    char aside[4200], moving[4200], interrupted[4200], from[4200], from_model[4300];
    snprintf(aside, sizeof aside, "%s/%s", out, FG_RUN_ASIDE_DONE);
    snprintf(moving, sizeof moving, "%s/%s", out, FG_RUN_ASIDE_MOVING);
    snprintf(interrupted, sizeof interrupted, "%s/%s/%s", out, FG_RUN_RESUME_DIR, FG_CKPT_MODEL_FILE);
    if (stat(a->model_path, &sb) != 0 && stat(aside, &sb) != 0 && stat(moving, &sb) != 0 &&
        stat(interrupted, &sb) != 0)
        fg_train_die(1, "--resume: no checkpoint in '%s' (%s: %s)", out, a->model_path, strerror(errno));
    if (f[F_OVERWRITE].given) fg_train_die(2, "--overwrite starts a new run; it cannot be combined with --resume");
    if (fg_train_comm->rank == 0) {
        folder_or_die(fg_run_folder_lock(&r->folder));
        folder_or_die(fg_run_folder_recover(&r->folder));
    }
    /* the latest state: --out's checkpoint, or the one a stop signal kept beside the best one */
    fg_run_folder_resume_from(out, from, sizeof from);
    snprintf(from_model, sizeof from_model, "%s/%s", from, FG_CKPT_MODEL_FILE);
    if (stat(from_model, &sb) != 0)
        fg_train_die(1, "--resume: no checkpoint in '%s' (%s: %s)", out, a->model_path, strerror(errno));
    snprintf(r->resumed_from, sizeof r->resumed_from, "%s", from);
    fg_ckpt *ck = r->ck = fg_ckpt_open(from, 1);
    if (!ck) fg_train_die(1, "--resume: %s", fg_last_error());
    const fg_ckpt_info *in = fg_ckpt_get_info(ck);
    fg_train_config cfg = in->train;
    /* the checkpoint counts the micro-batches of the whole step: they must divide among the ranks */
    if (cfg.grad_accum % fg_train_comm->size)
        fg_train_die(2,
                     "--resume: the checkpoint's steps have %d micro-batches, which do not divide among %d processes",
                     cfg.grad_accum, fg_train_comm->size);
    const int accum_per_rank = cfg.grad_accum / fg_train_comm->size;
    /* Settings that shape the run must match the checkpoint's, or the resumed curve would not
     * be the uninterrupted one. */
    /* the checkpoint's rows (train/ckpt_keys.h) a resumed run keeps; the step's micro-batches
     * are compared as each rank counts them */
    fg_train_config kept = cfg;
    kept.grad_accum = accum_per_rank;
    FG_CKPT_MODEL_KEYS(KEEP_MODEL_ROW)
    FG_CKPT_RUN_KEYS(KEEP_RUN_ROW)
    if (cfg.optimizer == FG_OPTIM_MUON) {
        FG_CKPT_MUON_KEYS(KEEP_RUN_ROW)
    }
    if (fg_train_flags_arch_given(f)) {
        fg_gpt_config want = cfg.model;
        fg_train_flags_arch(f, &a->run, &want);
        if (!fg_gpt_same_arch(&want, &cfg.model)) {
            char arch[512];
            fg_gpt_arch_describe(&cfg.model, arch, sizeof arch);
            fg_train_die(2, "%s differs from the checkpoint's architecture (%s); a resumed run keeps its settings",
                         fg_train_flags_arch_given(f), arch);
        }
    }
    if (f[FG_TF_BYTE].given && (!in->tokenizer || fg_tokenizer_kind(in->tokenizer) != FG_TOK_BYTE))
        fg_train_die(2, "--byte: the checkpoint %s",
                     in->tokenizer ? "uses a character-level tokenizer" : "trained on token files");
    resume_data(a, r, ck, out);
    /* what may change on resume */
    if (f[F_STEPS].given) cfg.steps = f[F_STEPS].i;
    if (f[FG_TF_DECAY].given) cfg.opt.decay_steps = f[FG_TF_DECAY].i;
    if (f[F_EVAL_EVERY].given) cfg.eval_every = (int)f[F_EVAL_EVERY].i;
    if (f[F_EVAL_ITERS].given) cfg.eval_iters = (int)f[F_EVAL_ITERS].i;
    if (a->ng.best_only_given) cfg.save_best_only = a->ng.best_only; /* else the run's own policy */
    cfg.model.attn = f[FG_TF_ATTN].given ? a->run.attn : in->model.attn;
    /* changes no number: free on resume; without --recompute the checkpoint's plan */
    if (f[FG_TF_RECOMPUTE].given) {
        cfg.model.recompute = FG_RECOMPUTE_NONE;
        memset(cfg.model.recompute_plan, 0, sizeof cfg.model.recompute_plan);
        if (fg_gpt_recompute_set(&cfg.model, f[FG_TF_RECOMPUTE].s) != FG_OK)
            fg_train_die(2, "--recompute: %s", fg_last_error());
    }
    cfg.model.device = a->run.device;       /* checkpoints are device-neutral: resume on either */
    /* the products' precision shapes the curve: it stays the checkpoint's (ops/device.h) */
    if (f[FG_TF_DTYPE].given && a->run.compute != in->model.compute)
        fg_train_die(2, "--dtype %s differs from the checkpoint's %s; a resumed run keeps its settings",
                     fg_compute_name(a->run.compute), fg_compute_name(in->model.compute));
    if (cfg.model.compute == FG_COMPUTE_BF16 && cfg.model.device == FG_CPU)
        fg_train_die(2, "--resume: the run in '%s' trains with --dtype bfloat16, which runs on cuda only (add --device "
                        "cuda)",
                     out);
    if (in->step >= cfg.steps)
        fg_train_die(2, "--resume: the checkpoint is at step %lld of %lld already; pass a larger --steps to continue",
                     (long long)in->step, (long long)cfg.steps);
    r->cfg = cfg;
}

/* A fresh run: the data (a bad file is one line and exit 1), then the configuration from the
 * flags, checked (train_flags.h). */
void fg_train_configure_fresh(const train_args *a, train_run *r) {
    const fg_flag *f = a->f;
    r->src = fg_train_flags_source(f, (int)f[F_ANSWER_ONLY].i, fg_train_init_model ? fg_train_init_model->tokenizer : NULL);
    if (!r->src) fg_train_die(1, "%s", fg_last_error());
    r->cfg.steps = f[F_STEPS].i;
    r->cfg.eval_every = (int)f[F_EVAL_EVERY].i;
    r->cfg.eval_iters = (int)f[F_EVAL_ITERS].i;
    if (f[F_INIT_FROM].given) init_from_check_data(f, r->src);
    if (fg_train_flags_config(f, r->src, &a->run, &r->cfg) != FG_OK) fg_train_die(2, "%s", fg_last_error());
    r->cfg.grad_accum *= fg_train_comm->size; /* --grad-accum is per process; the config counts the whole step */
    r->cfg.save_best_only = a->ng.best_only;
}

/* The run's configuration (fresh or resumed), then its folder, then the trainer (restored from
 * the checkpoint on resume). Stops with one line on any failure. */
void fg_train_configure(const train_args *a, train_run *r) {
    memset(r, 0, sizeof *r);
    r->folder = fg_run_folder_at(a->out, folder_note);
    r->other_step = -1;
    const char *out = a->out;
    if (a->f[F_RESUME].given)
        configure_resumed(a, r);
    else
        fg_train_configure_fresh(a, r);

    /* --memory-budget: the plan, measured on this machine, before anything is written */
    if (a->run.memory_budget) {
        if (fg_train_comm->size > 1) fg_train_die(2, "--memory-budget plans one process (not under mpirun)");
        const int rc = fg_train_flags_memory_plan(&a->run, r->src, &r->cfg, 1, 2, NULL, stdout);
        if (rc) fg_train_die(rc, "%s", fg_last_error());
    }

    /* The folder: after the data loaded, so a bad dataset leaves nothing behind. A fresh run takes
     * the lock here; a resumed one took it before reading the checkpoint. */
    if (fg_train_comm->rank > 0) {
        /* rank 0 alone writes the folder */
    } else if (!r->ck) {
        folder_or_die(fg_run_folder_make(out));
        folder_or_die(fg_run_folder_lock(&r->folder));
        folder_or_die(fg_run_folder_recover(&r->folder));
        fg_status os = fg_run_folder_other_run(&r->folder, a->f[F_OVERWRITE].given, &r->other_step);
        if (os != FG_OK) fg_run_folder_refused(&r->folder);
        folder_or_die(os);
        r->other_pending = r->other_step >= 0;
    } else if (access(out, W_OK) != 0) {
        fg_train_die(1, "--out: cannot write to '%s': %s", out, strerror(errno));
    }
    if (fg_train_comm->rank == 0) fg_run_folder_remove_temporaries(out);

    r->tr = fg_trainer_create_dist(&r->cfg, r->src, fg_train_comm, (int)a->f[F_ZERO].i);
    if (!r->tr) fg_train_die(1, "%s", fg_last_error());
    if (fg_train_init_model) {
        /* the file's weights (wpe cropped to --block-size); optimizer and schedule start afresh */
        if (fg_gpt_copy_weights(r->tr->model, fg_train_init_model->model) != FG_OK)
            fg_train_die(1, "--init-from: %s", fg_last_error());
        const fg_gpt_config *mc = &fg_train_init_model->model->cfg;
        fg_train_say("init from %s (%s%s%s: L %d, H %d, C %d, vocabulary %d, context %d%s)\n", a->f[F_INIT_FROM].s,
                     fg_model_format_name(fg_train_init_model->format), fg_gpt_is_gpt2(mc) ? "" : " ",
                     fg_gpt_is_gpt2(mc) ? "" : fg_gpt_arch_name(mc->arch), mc->n_layer, mc->n_head, mc->n_embd,
                     mc->vocab_size, mc->block_size, r->cfg.model.block_size < mc->block_size ? ", cropped" : "");
        fg_model_file_free(fg_train_init_model);
        fg_train_init_model = NULL;
    }
    /* whatever could make a checkpoint fail (except the disk) fails now, before the first step
     * (with --zero the checkpoint's moments are whole: the check sees full-size ones) */
    if (fg_trainer_unshard(r->tr, 0) != FG_OK) fg_train_die(1, "%s", fg_last_error());
    if (fg_train_comm->rank == 0 && fg_ckpt_check_savable(out, r->tr) != FG_OK) fg_train_die(1, "%s", fg_last_error());
    if (r->ck) {
        if (fg_ckpt_restore(r->ck, r->tr) != FG_OK) fg_train_die(1, "--resume: %s", fg_last_error());
        fg_ckpt_close(r->ck);
        r->ck = NULL;
        if (fg_train_comm->rank == 0) fg_run_log_load(&r->log, a->log_path, r->tr->step);
    }
    fg_trainer_reshard(r->tr, 1);
}

/* The data's identity: the text file's XXH64, and that of a few batches of each split (so that any
 * kind of source whose contents differ between the ranks is told apart by what it feeds). */
static uint64_t data_hash(const train_run *r) {
    fg_trainer *tr = r->tr;
    const int B = r->cfg.batch_size, T = tr->T;
    fg_xxh64_state h;
    fg_xxh64_init(&h, 0);
    fg_xxh64_update(&h, &r->src->file_hash, sizeof r->src->file_hash);
    for (int s = 0; s < 2; s++)
        for (uint64_t i = 0; i < 4; i++) {
            if (fg_source_batch(r->src, s ? FG_SPLIT_VAL : FG_SPLIT_TRAIN, B, T, r->cfg.seed, i, tr->x, tr->y) != FG_OK)
                fg_train_die(1, "%s", fg_last_error());
            fg_xxh64_update(&h, tr->x, (size_t)B * (size_t)T * sizeof *tr->x);
            fg_xxh64_update(&h, tr->y, (size_t)B * (size_t)T * sizeof *tr->y);
        }
    return fg_xxh64_digest(&h);
}

/* Every rank describes its run (each flag's value, the data's and the program's identity, the
 * state it starts from); a field that differs from rank 0's stops every rank with one line. */
void fg_train_agree(const train_args *a, const train_run *r) {
    if (fg_train_comm->size == 1) return;
    enum { N = F_COUNT + 4 };
    fg_comm_field mine[N];
    memset(mine, 0, sizeof mine);
    int k = 0;
    for (int i = 0; i < F_COUNT; i++) {
        const fg_flag *fl = &a->f[i];
        switch (fl->type) {
        case FG_FLAG_INT:
            fg_comm_field_add(mine, &k, fl->name, "%lld", (long long)fl->i);
            break;
        case FG_FLAG_F64:
            fg_comm_field_add(mine, &k, fl->name, "%.17g", fl->d);
            break;
        case FG_FLAG_STR:
            fg_comm_field_add(mine, &k, fl->name, "%s", fl->s ? fl->s : "");
            break;
        case FG_FLAG_BOOL:
            fg_comm_field_add(mine, &k, fl->name, "%s", fl->given ? "given" : "not given");
            break;
        case FG_FLAG_TRUTH:
            fg_comm_field_add(mine, &k, fl->name, "%s", fl->i ? "True" : "False");
            break;
        case FG_FLAG_U64:
            fg_comm_field_add(mine, &k, fl->name, "%" PRIu64, fl->u);
            break;
        }
    }
    fg_comm_field_add(mine, &k, "data", "xxh64 %016" PRIx64, data_hash(r));
    fg_comm_field_add(mine, &k, "build", "program xxh64 %016" PRIx64, fg_program_hash());
    fg_comm_field_add(mine, &k, "starting step", "%lld", (long long)r->tr->step);
    fg_comm_field_add(mine, &k, "starting parameters", "xxh64 %016" PRIx64, fg_ckpt_params_hash(r->tr->model));
    fg_status st = fg_comm_agree(fg_train_comm, mine, k);
    if (st != FG_OK) fg_train_die(st == FG_ERR_ARG ? 2 : 1, "%s", fg_last_error());
}

/* --eval-only: the train and val loss of the checkpoint in --out (with --resume), or of the model
 * the flags would start from, printed; nothing is written, and --out need not exist. */
int fg_train_eval_only(const train_args *a) {
    const fg_flag *f = a->f;
    if (fg_train_comm->size > 1) fg_train_die(2, "--eval-only runs in one process (not under mpirun)");
    if (f[F_RESUME].given) {
        if (a->run.device != FG_CPU) fg_train_die(2, "--eval-only --resume evaluates on the CPU (leave out --device)");
        fg_eval_opts o = {.cmd = "train",
                          .ckpt = a->out,
                          .data = f[FG_TF_DATA].given ? f[FG_TF_DATA].s : NULL,
                          .data_bin = f[FG_TF_DATA_BIN].given ? f[FG_TF_DATA_BIN].s : NULL,
                          .batch_size = f[FG_TF_BATCH].given ? (int)f[FG_TF_BATCH].i : 0,
                          .eval_iters = f[F_EVAL_ITERS].given ? (int)f[F_EVAL_ITERS].i : 0,
                          .has_seed = f[FG_TF_SEED].given,
                          .seed = f[FG_TF_SEED].u};
        return fg_eval_run(&o);
    }
    train_run r;
    memset(&r, 0, sizeof r);
    fg_train_configure_fresh(a, &r);
    r.tr = fg_trainer_create_dist(&r.cfg, r.src, fg_train_comm, 0);
    if (!r.tr) fg_train_die(1, "%s", fg_last_error());
    const fg_gpt_config *mc = &r.tr->model->cfg;
    fg_train_say(
        "eval-only: a freshly initialized model (seed %llu; --resume evaluates the run in %s): %d layers, %d heads, "
        "%d embd, block %d, vocabulary %d\n",
        (unsigned long long)r.cfg.seed, a->out, mc->n_layer, mc->n_head, mc->n_embd, mc->block_size, mc->vocab_size);
    fg_train_say("eval: %d batches of %d x %d tokens per split, nothing written\n", r.cfg.eval_iters, r.cfg.batch_size,
                 r.tr->T);
    double tl, vl, vb = NAN;
    if (fg_trainer_eval_loss(r.tr, FG_SPLIT_TRAIN, &tl) != FG_OK || fg_trainer_eval(r.tr, FG_SPLIT_VAL, &vl, &vb) != FG_OK)
        fg_train_die(1, "evaluation: %s", fg_last_error());
    if (isfinite(vb))
        fg_train_say("step 0: train loss %s, val loss %s, val bpb %.4f\n", LOSS(tl), LOSS(vl), vb);
    else
        fg_train_say("step 0: train loss %s, val loss %s\n", LOSS(tl), LOSS(vl));
    fg_trainer_free(r.tr);
    fg_source_free(r.src);
    return 0;
}
