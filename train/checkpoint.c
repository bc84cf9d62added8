/* checkpoint.c — saving and reading runs (see checkpoint.h). */
#include "train/checkpoint.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tensor/fileio.h"
#include "tensor/safetensors.h"

#define KIND_MODEL "flashgrad.gpt"
#define KIND_OPTIM "flashgrad.optimizer"
#define CKPT_VERSION "1"

struct fg_ckpt {
    char model_path[4096], optim_path[4096];
    fg_st_file *model, *optim;
    fg_tokenizer *tok;
    fg_ckpt_info info;
};

uint64_t fg_ckpt_params_hash(const fg_gpt *g) {
    if (g->params_flat->device == FG_CPU) return fg_xxh64(fg_data(g->params_flat), (size_t)fg_nbytes(g->params_flat), 0);
    /* a device model hashes a host copy of its buffer (same bytes, same hash); 0 if the copy fails */
    fg_tensor *h = fg_to(g->params_flat, FG_CPU, g->params_flat->dtype);
    uint64_t x = h ? fg_xxh64(fg_data(h), (size_t)fg_nbytes(h), 0) : 0;
    fg_release(h);
    return x;
}

/* ---- writing ---- */

static fg_status meta_i64(fg_st_writer *w, const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return fg_st_writer_set_metadata(w, key, buf);
}
static fg_status meta_u64(fg_st_writer *w, const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return fg_st_writer_set_metadata(w, key, buf);
}
static fg_status meta_hex(fg_st_writer *w, const char *key, uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%016" PRIx64, v);
    return fg_st_writer_set_metadata(w, key, buf);
}
/* %.17g: a double that reads back to the same bits. */
static fg_status meta_f64(fg_st_writer *w, const char *key, double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    return fg_st_writer_set_metadata(w, key, buf);
}

#define CHECK(expr)                          \
    do {                                     \
        if ((st = (expr)) != FG_OK) goto out; \
    } while (0)

static fg_status join(char *dst, size_t n, const char *dir, const char *file) {
    if ((size_t)snprintf(dst, n, "%s/%s", dir, file) >= n)
        return fg_error(FG_ERR_ARG, "checkpoint: the path '%s/%s' is too long", dir, file);
    return FG_OK;
}

fg_status fg_ckpt_save(const char *dir, const fg_trainer *tr) {
    const fg_gpt *g = tr->model;
    const fg_gpt_config *mc = &g->cfg;
    const fg_train_config *tc = &tr->cfg;
    const fg_source *src = tr->data;
    char mpath[4096], opath[4096];
    fg_status st = join(mpath, sizeof mpath, dir, FG_CKPT_MODEL_FILE);
    if (st == FG_OK) st = join(opath, sizeof opath, dir, FG_CKPT_OPTIM_FILE);
    if (st != FG_OK) return st;
    /* Device buffers (cuda) are written from host copies, one bulk copy each. */
    fg_tensor *hp = NULL, *hm = NULL, *hv = NULL;
    if (mc->device != FG_CPU) {
        hp = fg_to(g->params_flat, FG_CPU, mc->dtype);
        hm = hp ? fg_to(tr->opt.m, FG_CPU, mc->dtype) : NULL;
        hv = hm ? fg_to(tr->opt.v, FG_CPU, mc->dtype) : NULL;
        if (!hv) {
            st = fg_last_status();
            fg_release(hp);
            fg_release(hm);
            return st;
        }
    }
    const uint64_t phash = hp ? fg_xxh64(fg_data(hp), (size_t)fg_nbytes(hp), 0) : fg_ckpt_params_hash(g);
    const fg_st_dtype dt = fg_st_from_dtype(mc->dtype);
    char *tokstr = fg_tokenizer_serialize(fg_source_tokenizer(src));
    fg_st_writer *mw = fg_st_writer_new(), *ow = fg_st_writer_new();
    if (!tokstr || !mw || !ow) {
        st = fg_error(FG_ERR_OOM, "checkpoint: out of memory");
        goto out;
    }

    /* the model */
    for (int j = 0; j < g->n_params; j++) {
        const fg_gpt_param *p = &g->params[j];
        const void *pd = hp ? (const char *)fg_data(hp) + (size_t)p->offset * fg_dtype_size(mc->dtype) : fg_data(p->w);
        CHECK(fg_st_writer_add(mw, p->name, dt, p->w->ndim, p->w->shape, pd));
    }
    CHECK(fg_st_writer_set_metadata(mw, "format", "pt")); /* what HF's loaders look for */
    CHECK(fg_st_writer_set_metadata(mw, "fg_kind", KIND_MODEL));
    CHECK(fg_st_writer_set_metadata(mw, "fg_version", CKPT_VERSION));
    CHECK(meta_i64(mw, "n_layer", mc->n_layer));
    CHECK(meta_i64(mw, "n_head", mc->n_head));
    CHECK(meta_i64(mw, "n_embd", mc->n_embd));
    CHECK(meta_i64(mw, "block_size", mc->block_size));
    CHECK(meta_i64(mw, "vocab_size", mc->vocab_size));
    CHECK(meta_f64(mw, "dropout", mc->dropout));
    CHECK(fg_st_writer_set_metadata(mw, "attn", fg_attn_impl_name(mc->attn)));
    CHECK(fg_st_writer_set_metadata(mw, "bias", "true"));
    CHECK(fg_st_writer_set_metadata(mw, "tied_lm_head", "true"));
    CHECK(fg_st_writer_set_metadata(mw, "tokenizer", tokstr));
    if (src->kind == FG_SOURCE_ADDITION) {
        const fg_addition_config *ac = fg_addition_get_config(src->add);
        CHECK(fg_st_writer_set_metadata(mw, "data", "addition"));
        CHECK(meta_i64(mw, "addition.n_digits", ac->n_digits));
        CHECK(meta_i64(mw, "addition.answer_only", ac->answer_only));
        CHECK(meta_f64(mw, "addition.val_fraction", ac->val_fraction));
        CHECK(meta_u64(mw, "addition.split_seed", ac->split_seed));
    } else {
        CHECK(fg_st_writer_set_metadata(mw, "data", "text"));
        CHECK(fg_st_writer_set_metadata(mw, "text.path", src->path));
        CHECK(meta_hex(mw, "text.xxh64", src->file_hash));
        CHECK(meta_f64(mw, "text.val_fraction", src->val_fraction));
    }
    CHECK(meta_i64(mw, "step", tr->step));
    CHECK(meta_hex(mw, "params_xxh64", phash));

    /* the optimizer and the rest of the run's state */
    int64_t P = g->num_elements, one = 1, two = 2;
    int64_t step = tr->step;
    uint64_t rng[2] = {tc->seed, (uint64_t)tr->step};
    CHECK(fg_st_writer_add(ow, "exp_avg", dt, 1, &P, fg_data(hm ? hm : tr->opt.m)));
    CHECK(fg_st_writer_add(ow, "exp_avg_sq", dt, 1, &P, fg_data(hv ? hv : tr->opt.v)));
    CHECK(fg_st_writer_add_copy(ow, "step", FG_ST_I64, 1, &one, &step));
    CHECK(fg_st_writer_add_copy(ow, "rng", FG_ST_U64, 1, &two, rng));
    CHECK(fg_st_writer_set_metadata(ow, "fg_kind", KIND_OPTIM));
    CHECK(fg_st_writer_set_metadata(ow, "fg_version", CKPT_VERSION));
    CHECK(meta_i64(ow, "step", tr->step));
    CHECK(meta_hex(ow, "params_xxh64", phash));
    CHECK(meta_i64(ow, "adamw_t", tr->opt.t));
    CHECK(meta_f64(ow, "lr", tc->opt.lr));
    CHECK(meta_f64(ow, "min_lr", tc->opt.min_lr));
    CHECK(meta_i64(ow, "warmup", tc->opt.warmup));
    CHECK(meta_i64(ow, "decay_steps", tc->opt.decay_steps));
    CHECK(meta_f64(ow, "beta1", tc->opt.beta1));
    CHECK(meta_f64(ow, "beta2", tc->opt.beta2));
    CHECK(meta_f64(ow, "eps", tc->opt.eps));
    CHECK(meta_f64(ow, "weight_decay", tc->opt.weight_decay));
    CHECK(meta_f64(ow, "grad_clip", tc->opt.grad_clip));
    CHECK(meta_i64(ow, "batch_size", tc->batch_size));
    CHECK(meta_i64(ow, "grad_accum", tc->grad_accum));
    CHECK(meta_i64(ow, "steps", tc->steps));
    CHECK(meta_i64(ow, "eval_every", tc->eval_every));
    CHECK(meta_i64(ow, "eval_iters", tc->eval_iters));
    CHECK(meta_u64(ow, "seed", tc->seed));

    /* Crash-consistent order. The model file says which state is current; the optimizer state of
     * the model that is on disk must exist at every moment:
     *   1. optimizer.safetensors -> optimizer.prev.safetensors (rename: the old pair stays whole)
     *   2. write the new optimizer.safetensors              (old model + prev still pair up)
     *   3. write the new model.safetensors                  (new model + new optimizer pair up)
     * A kill anywhere leaves a model whose optimizer state is one of the two files, and
     * fg_ckpt_open picks the one whose step and parameter hash match the model. */
    {
        char ppath[4096];
        CHECK(join(ppath, sizeof ppath, dir, FG_CKPT_OPTIM_PREV_FILE));
        struct stat sb;
        if (stat(opath, &sb) == 0 && stat(mpath, &sb) == 0) {
            if (rename(opath, ppath) != 0) {
                st = fg_error(FG_ERR_IO, "checkpoint: cannot rename %s to %s: %s", opath, ppath, strerror(errno));
                goto out;
            }
        }
    }
    CHECK(fg_st_writer_write(ow, opath));
    CHECK(fg_st_writer_write(mw, mpath));
out:
    fg_st_writer_free(mw);
    fg_st_writer_free(ow);
    fg_release(hp);
    fg_release(hm);
    fg_release(hv);
    free(tokstr);
    return st;
}

/* ---- reading ---- */

static const char *need(fg_ckpt *c, const fg_st_file *f, const char *path, const char *key, fg_status *st) {
    (void)c;
    if (*st != FG_OK) return NULL;
    const char *v = fg_st_metadata(f, key);
    if (!v) *st = fg_error(FG_ERR_FORMAT, "%s: the metadata has no '%s' (an incomplete or foreign checkpoint)", path, key);
    return v;
}

static int64_t get_i64(fg_ckpt *c, const fg_st_file *f, const char *path, const char *key, int64_t lo, int64_t hi,
                       fg_status *st) {
    const char *v = need(c, f, path, key, st);
    if (!v) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        *st = fg_error(FG_ERR_FORMAT, "%s: metadata '%s' = '%.40s' is not an integer in %lld..%lld", path, key, v,
                       (long long)lo, (long long)hi);
        return 0;
    }
    return x;
}

static uint64_t get_u64(fg_ckpt *c, const fg_st_file *f, const char *path, const char *key, int base, fg_status *st) {
    const char *v = need(c, f, path, key, st);
    if (!v) return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, base);
    if (errno || end == v || *end || *v == '-' || *v == '+' || *v == ' ') {
        *st = fg_error(FG_ERR_FORMAT, "%s: metadata '%s' = '%.40s' is not an unsigned integer", path, key, v);
        return 0;
    }
    return x;
}

static double get_f64(fg_ckpt *c, const fg_st_file *f, const char *path, const char *key, double lo, double hi,
                      fg_status *st) {
    const char *v = need(c, f, path, key, st);
    if (!v) return 0;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        *st = fg_error(FG_ERR_FORMAT, "%s: metadata '%s' = '%.40s' is not a number in [%g, %g]", path, key, v, lo, hi);
        return 0;
    }
    return x;
}

/* The model file's kind tag; refuses files that are not flashgrad models by name. */
static fg_status check_kind(const fg_st_file *f, const char *path, const char *want) {
    const char *kind = fg_st_metadata(f, "fg_kind");
    if (!kind)
        return fg_error(FG_ERR_FORMAT,
                        "%s: not a flashgrad checkpoint (its metadata has no 'fg_kind'; a safetensors file from "
                        "another program?)", path);
    if (strcmp(kind, want)) {
        if (!strcmp(want, KIND_MODEL) && !strcmp(kind, KIND_OPTIM))
            return fg_error(FG_ERR_FORMAT, "%s: holds optimizer state, not a model (pass the model file or its folder)", path);
        return fg_error(FG_ERR_FORMAT, "%s: is a '%.40s' file, expected '%s'", path, kind, want);
    }
    const char *ver = fg_st_metadata(f, "fg_version");
    if (!ver || strcmp(ver, CKPT_VERSION))
        return fg_error(FG_ERR_FORMAT, "%s: checkpoint version '%.20s' is not supported (this flashgrad reads version %s)",
                        path, ver ? ver : "(none)", CKPT_VERSION);
    return FG_OK;
}

/* Before any allocation: the parameters' dtype, and that the file holds exactly as many tensors
 * and elements as the configuration implies (so a forged configuration cannot make us allocate
 * more than the file holds). Names and shapes are checked once the table exists
 * (check_against_model). */
static fg_status check_tensors(fg_ckpt *c) {
    const fg_gpt_config *mc = &c->info.model;
    const char *path = c->model_path;
    const fg_st_array *wte = fg_st_find(c->model, "transformer.wte.weight");
    if (!wte) return fg_error(FG_ERR_FORMAT, "%s: no tensor 'transformer.wte.weight'", path);
    if (wte->dtype != FG_ST_F32 && wte->dtype != FG_ST_F64)
        return fg_error(FG_ERR_FORMAT, "%s: parameters are %s; flashgrad reads F32 and F64", path,
                        fg_st_dtype_name(wte->dtype));
    c->info.model.dtype = wte->dtype == FG_ST_F32 ? FG_F32 : FG_F64;
    /* 2 embeddings + 12 tensors per block + ln_f's 2 */
    int expected = 4 + 12 * mc->n_layer;
    if (fg_st_count(c->model) != expected)
        return fg_error(FG_ERR_FORMAT, "%s: holds %d tensors; a %d-layer model has %d", path, fg_st_count(c->model),
                        mc->n_layer, expected);
    /* P = V C + T C + L (12 C^2 + 13 C) + 2 C, in double: no overflow for any accepted config */
    double C = mc->n_embd, want = (double)mc->vocab_size * C + (double)mc->block_size * C +
                                  (double)mc->n_layer * (12 * C * C + 13 * C) + 2 * C;
    double have = 0;
    for (int i = 0; i < fg_st_count(c->model); i++) {
        const fg_st_array *a = fg_st_at(c->model, i);
        size_t es = fg_st_dtype_size(a->dtype);
        have += es ? (double)(a->nbytes / es) : 0;
    }
    if (have != want)
        return fg_error(FG_ERR_FORMAT, "%s: holds %.0f parameters; the configuration in its metadata needs %.0f", path,
                        have, want);
    return FG_OK;
}

/* Shapes and dtypes of every table entry against the file (the model is built already). */
static fg_status check_against_model(const fg_ckpt *c, const fg_gpt *g) {
    const fg_st_dtype dt = fg_st_from_dtype(g->cfg.dtype);
    for (int j = 0; j < g->n_params; j++) {
        const fg_gpt_param *p = &g->params[j];
        const fg_st_array *a = fg_st_find(c->model, p->name);
        if (!a) return fg_error(FG_ERR_FORMAT, "%s: no tensor '%s'", c->model_path, p->name);
        int ok = a->dtype == dt && a->ndim == p->w->ndim;
        for (int d = 0; ok && d < a->ndim; d++) ok = a->shape[d] == p->w->shape[d];
        if (!ok) {
            char want[64];
            fg_shape_str(p->w, want, sizeof want);
            return fg_error(FG_ERR_FORMAT, "%s: tensor '%s' is %s of rank %d; the configuration needs %s %s",
                            c->model_path, p->name, fg_st_dtype_name(a->dtype), a->ndim, fg_st_dtype_name(dt), want);
        }
    }
    return FG_OK;
}

static fg_status read_model_meta(fg_ckpt *c) {
    const fg_st_file *f = c->model;
    const char *path = c->model_path;
    fg_status st = check_kind(f, path, KIND_MODEL);
    if (st != FG_OK) return st;
    fg_ckpt_info *in = &c->info;
    in->model = fg_gpt_default_config();
    in->model.n_layer = (int)get_i64(c, f, path, "n_layer", 1, 1024, &st);
    in->model.n_head = (int)get_i64(c, f, path, "n_head", 1, 1 << 16, &st);
    in->model.n_embd = (int)get_i64(c, f, path, "n_embd", 1, 1 << 16, &st);
    in->model.block_size = (int)get_i64(c, f, path, "block_size", 1, 1 << 20, &st);
    in->model.vocab_size = (int)get_i64(c, f, path, "vocab_size", 1, 1 << 24, &st);
    in->model.dropout = get_f64(c, f, path, "dropout", 0.0, 0.999999, &st);
    const char *attn = need(c, f, path, "attn", &st);
    in->step = get_i64(c, f, path, "step", 0, INT64_MAX / 2, &st);
    in->params_hash = get_u64(c, f, path, "params_xxh64", 16, &st);
    const char *tokstr = need(c, f, path, "tokenizer", &st);
    const char *data = need(c, f, path, "data", &st);
    if (st != FG_OK) return st;
    if (!strcmp(attn, "naive")) in->model.attn = FG_ATTN_NAIVE;
    else if (!strcmp(attn, "flash")) in->model.attn = FG_ATTN_FLASH;
    else return fg_error(FG_ERR_FORMAT, "%s: metadata 'attn' = '%.20s' is not naive or flash", path, attn);
    if (in->model.n_embd % in->model.n_head)
        return fg_error(FG_ERR_FORMAT, "%s: n_embd %d is not a multiple of n_head %d", path, in->model.n_embd, in->model.n_head);
    c->tok = fg_tokenizer_parse(tokstr, strlen(tokstr));
    if (!c->tok) return fg_error(FG_ERR_FORMAT, "%s: bad tokenizer: %s", path, fg_last_error());
    in->tokenizer = c->tok;
    if (fg_tokenizer_vocab_size(c->tok) != in->model.vocab_size)
        return fg_error(FG_ERR_FORMAT, "%s: the tokenizer has %d tokens but vocab_size is %d", path,
                        fg_tokenizer_vocab_size(c->tok), in->model.vocab_size);
    if (!strcmp(data, "addition")) {
        in->source = FG_SOURCE_ADDITION;
        in->addition = fg_addition_default_config();
        in->addition.n_digits = (int)get_i64(c, f, path, "addition.n_digits", 1, FG_ADD_MAX_DIGITS, &st);
        in->addition.answer_only = (int)get_i64(c, f, path, "addition.answer_only", 0, 1, &st);
        in->addition.val_fraction = get_f64(c, f, path, "addition.val_fraction", 0.0, 0.5, &st);
        in->addition.split_seed = get_u64(c, f, path, "addition.split_seed", 10, &st);
    } else if (!strcmp(data, "text")) {
        in->source = FG_SOURCE_TEXT;
        const char *p = need(c, f, path, "text.path", &st);
        if (p) snprintf(in->data_path, sizeof in->data_path, "%s", p);
        in->data_hash = get_u64(c, f, path, "text.xxh64", 16, &st);
        in->val_fraction = get_f64(c, f, path, "text.val_fraction", 0.0, 0.5, &st);
    } else {
        return fg_error(FG_ERR_FORMAT, "%s: metadata 'data' = '%.20s' is not addition or text", path, data);
    }
    if (st != FG_OK) return st;
    return check_tensors(c);
}

static fg_status read_optim_meta(fg_ckpt *c) {
    const fg_st_file *f = c->optim;
    const char *path = c->optim_path;
    fg_status st = check_kind(f, path, KIND_OPTIM);
    if (st != FG_OK) return st;
    fg_ckpt_info *in = &c->info;
    int64_t step = get_i64(c, f, path, "step", 0, INT64_MAX / 2, &st);
    uint64_t ph = get_u64(c, f, path, "params_xxh64", 16, &st);
    if (st != FG_OK) return st;
    if (step != in->step || ph != in->params_hash)
        return fg_error(FG_ERR_FORMAT,
                        "%s is from step %lld but %s is from step %lld%s: the pair does not match (a checkpoint "
                        "write was interrupted?), so the run cannot be resumed exactly", path, (long long)step,
                        c->model_path, (long long)in->step, step == in->step ? " with other weights" : "");
    fg_train_config *t = &in->train;
    t->model = in->model;
    t->opt.lr = get_f64(c, f, path, "lr", 0, 1e6, &st);
    t->opt.min_lr = get_f64(c, f, path, "min_lr", 0, 1e6, &st);
    t->opt.warmup = get_i64(c, f, path, "warmup", 0, INT64_MAX / 2, &st);
    t->opt.decay_steps = get_i64(c, f, path, "decay_steps", 1, INT64_MAX / 2, &st);
    t->opt.beta1 = get_f64(c, f, path, "beta1", 0, 0.999999999, &st);
    t->opt.beta2 = get_f64(c, f, path, "beta2", 0, 0.999999999, &st);
    t->opt.eps = get_f64(c, f, path, "eps", 1e-300, 1, &st);
    t->opt.weight_decay = get_f64(c, f, path, "weight_decay", 0, 1e6, &st);
    t->opt.grad_clip = get_f64(c, f, path, "grad_clip", 0, 1e30, &st);
    t->batch_size = (int)get_i64(c, f, path, "batch_size", 1, 1 << 24, &st);
    t->grad_accum = (int)get_i64(c, f, path, "grad_accum", 1, 1 << 24, &st);
    t->steps = get_i64(c, f, path, "steps", 1, INT64_MAX / 2, &st);
    t->eval_every = (int)get_i64(c, f, path, "eval_every", 0, INT32_MAX, &st);
    t->eval_iters = (int)get_i64(c, f, path, "eval_iters", 1, INT32_MAX, &st);
    t->seed = get_u64(c, f, path, "seed", 10, &st);
    (void)get_i64(c, f, path, "adamw_t", 0, INT64_MAX / 2, &st);
    if (st != FG_OK) return st;
    if (fg_st_count(f) != 4)
        return fg_error(FG_ERR_FORMAT, "%s: holds %d tensors, expected 4 (exp_avg, exp_avg_sq, rng, step)", path,
                        fg_st_count(f));
    in->has_train = 1;
    return FG_OK;
}

fg_ckpt *fg_ckpt_open(const char *path, int with_optimizer) {
    fg_ckpt *c = calloc(1, sizeof *c);
    if (!c) {
        fg_error(FG_ERR_OOM, "checkpoint: out of memory");
        return NULL;
    }
    struct stat sb;
    fg_status st = FG_OK;
    if (stat(path, &sb) != 0) {
        st = fg_error(FG_ERR_IO, "%s: no such checkpoint (%s)", path, strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        st = join(c->model_path, sizeof c->model_path, path, FG_CKPT_MODEL_FILE);
        if (st == FG_OK) st = join(c->optim_path, sizeof c->optim_path, path, FG_CKPT_OPTIM_FILE);
    } else {
        snprintf(c->model_path, sizeof c->model_path, "%s", path);
        const char *slash = strrchr(path, '/');
        int dirlen = slash ? (int)(slash - path) : 1;
        snprintf(c->optim_path, sizeof c->optim_path, "%.*s/%s", dirlen, slash ? path : ".", FG_CKPT_OPTIM_FILE);
    }
    if (st == FG_OK && !(c->model = fg_st_load(c->model_path))) st = fg_last_status();
    if (st == FG_OK) st = read_model_meta(c);
    if (st == FG_OK && with_optimizer) {
        if (!(c->optim = fg_st_load(c->optim_path))) st = fg_last_status();
        if (st == FG_OK) st = read_optim_meta(c);
        if (st != FG_OK) {
            /* A save killed between its optimizer and model writes leaves the model's own state in
             * optimizer.prev.safetensors (see fg_ckpt_save): use it when it pairs with the model. */
            char prev[sizeof c->optim_path], first_error[1024];
            snprintf(first_error, sizeof first_error, "%s", fg_last_error());
            fg_status first_status = st;
            const char *slash = strrchr(c->optim_path, '/');
            int dirlen = slash ? (int)(slash - c->optim_path) : 1;
            snprintf(prev, sizeof prev, "%.*s/%s", dirlen, slash ? c->optim_path : ".", FG_CKPT_OPTIM_PREV_FILE);
            struct stat pb;
            if (stat(prev, &pb) == 0) {
                fg_st_close(c->optim);
                c->optim = NULL;
                char saved[sizeof c->optim_path];
                memcpy(saved, c->optim_path, sizeof saved);
                memcpy(c->optim_path, prev, sizeof prev);
                st = (c->optim = fg_st_load(c->optim_path)) ? read_optim_meta(c) : fg_last_status();
                if (st != FG_OK) { /* report the newer file's problem, not the fallback's */
                    memcpy(c->optim_path, saved, sizeof saved);
                    st = fg_error(first_status, "%s", first_error);
                }
            }
        }
    }
    if (st != FG_OK) {
        fg_ckpt_close(c);
        return NULL;
    }
    return c;
}

void fg_ckpt_close(fg_ckpt *c) {
    if (!c) return;
    fg_st_close(c->model);
    fg_st_close(c->optim);
    fg_tokenizer_free(c->tok);
    free(c);
}

const fg_ckpt_info *fg_ckpt_get_info(const fg_ckpt *c) { return &c->info; }

/* Weights into g (same config as the checkpoint's), then the pairing hash. */
static fg_status load_weights(const fg_ckpt *c, fg_gpt *g) {
    fg_status st = check_against_model(c, g);
    for (int j = 0; j < g->n_params && st == FG_OK; j++) st = fg_st_read_into(c->model, g->params[j].name, g->params[j].w);
    if (st != FG_OK) return st;
    if (fg_ckpt_params_hash(g) != c->info.params_hash)
        return fg_error(FG_ERR_FORMAT, "%s: the weights do not match their recorded params_xxh64", c->model_path);
    return FG_OK;
}

fg_gpt *fg_ckpt_load_model(const fg_ckpt *c) {
    fg_gpt_config mc = c->info.model;
    mc.device = FG_CPU;
    fg_gpt *g = fg_gpt_create_empty(&mc);
    if (!g) return NULL;
    if (load_weights(c, g) != FG_OK) {
        fg_gpt_free(g);
        return NULL;
    }
    return g;
}

fg_status fg_ckpt_restore(const fg_ckpt *c, fg_trainer *tr) {
    if (!c->info.has_train) return fg_error(FG_ERR_STATE, "checkpoint: opened without its optimizer state");
    const fg_gpt_config *a = &tr->model->cfg, *b = &c->info.model;
    if (a->n_layer != b->n_layer || a->n_head != b->n_head || a->n_embd != b->n_embd || a->block_size != b->block_size ||
        a->vocab_size != b->vocab_size || a->dtype != b->dtype)
        return fg_error(FG_ERR_ARG, "checkpoint: the trainer's model differs from the checkpoint's");
    fg_status st = load_weights(c, tr->model);
    if (st == FG_OK) st = fg_st_read_into(c->optim, "exp_avg", tr->opt.m);
    if (st == FG_OK) st = fg_st_read_into(c->optim, "exp_avg_sq", tr->opt.v);
    int64_t step = 0, one = 1, two = 2;
    uint64_t rng[2];
    if (st == FG_OK) st = fg_st_read(c->optim, "step", FG_ST_I64, 1, &one, &step);
    if (st == FG_OK) st = fg_st_read(c->optim, "rng", FG_ST_U64, 1, &two, rng);
    if (st != FG_OK) return fg_error(fg_last_status(), "%s", fg_last_error());
    if (step != c->info.step || rng[1] != (uint64_t)step || rng[0] != c->info.train.seed)
        return fg_error(FG_ERR_FORMAT, "%s: its step/rng tensors (%lld, seed %llu) disagree with its metadata (%lld, seed %llu)",
                        c->optim_path, (long long)step, (unsigned long long)rng[0], (long long)c->info.step,
                        (unsigned long long)c->info.train.seed);
    const char *t = fg_st_metadata(c->optim, "adamw_t");
    tr->opt.t = t ? strtoll(t, NULL, 10) : step;
    tr->step = step;
    return FG_OK;
}
