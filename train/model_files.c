/* model_files.c — which reader a path needs, flashgrad checkpoints, copying weights between models,
 * and what every export shares (see model_files.h). The formats themselves: hf_files.c (Hugging
 * Face folders), llmc_files.c (llm.c model files).
 */
#include "train/model_files.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tensor/safetensors.h"
#include "train/model_files_internal.h"
#include "train/run_folder.h"

const char *fg_model_format_name(fg_model_format f) {
    static const char *const n[] = {"flashgrad", "hf", "llmc"};
    return (unsigned)f < FG_MODEL_FORMAT_COUNT ? n[f] : "?";
}

void fg_model_file_free(fg_model_file *m) {
    if (!m) return;
    fg_tokenizer_free(m->own_tokenizer);
    fg_gpt_free(m->model);
    fg_ckpt_close(m->ckpt);
    free(m);
}

/* 1 when something is at p (following links): whatever it is, its reader then opens it through
 * fg_read_file / fg_open_read, which refuses a FIFO, a device or a folder by name instead of this
 * test passing it over in silence. */
int fg__file_is_there(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* The parameter values of g as float32 into a new host buffer of g->num_elements (caller frees). */
float *fg__model_host_f32(const fg_gpt *g) {
    float *out = malloc((size_t)g->num_elements * sizeof *out);
    fg_tensor *h = out ? fg_to(g->params_flat, FG_CPU, FG_F32) : NULL;
    if (!h) {
        free(out);
        if (!out) fg_error(FG_ERR_OOM, "out of memory for the model's %lld parameters", (long long)g->num_elements);
        return NULL;
    }
    memcpy(out, fg_data(h), (size_t)g->num_elements * sizeof *out);
    fg_release(h);
    return out;
}

/* ---- what is at a path ---- */

/* 1 when the safetensors file's header carries flashgrad's "fg_kind" (a checkpoint); reads only
 * the header. */
static int st_is_flashgrad(const char *path) { return fg_st_peek_metadata(path, "fg_kind", NULL, 0); }

static fg_model_file *flashgrad_load(const char *path) {
    fg_ckpt *c = fg_ckpt_open(path, 0);
    if (!c) return NULL;
    fg_model_file *m = calloc(1, sizeof *m);
    fg_gpt *g = m ? fg_ckpt_load_model(c) : NULL;
    if (!g) {
        if (!m) fg_error(FG_ERR_OOM, "out of memory");
        free(m);
        fg_ckpt_close(c);
        return NULL;
    }
    const fg_ckpt_info *in = fg_ckpt_get_info(c);
    m->format = FG_MODEL_FLASHGRAD;
    m->model = g;
    m->ckpt = c;
    m->tokenizer = in->tokenizer;
    m->step = in->step;
    return m;
}

fg_model_file *fg_model_file_load(const char *path) {
    if (!path || !*path) {
        fg_error(FG_ERR_ARG, "no model path given");
        return NULL;
    }
    if (strlen(path) > 4000) {
        fg_error(FG_ERR_ARG, "model path too long");
        return NULL;
    }
    struct stat sb;
    char file[4096];
    if (fg_run_folder_file_for_reading(path, file, sizeof file) != FG_OK) return NULL;
    path = file;
    if (stat(path, &sb) != 0) {
        fg_error(FG_ERR_IO, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char p[4096 + 64], run[4096];
    if (S_ISDIR(sb.st_mode)) {
        /* a run folder: where its run is (an interrupted --overwrite may have set it aside) */
        if (fg_run_folder_for_reading(path, run, sizeof run) != FG_OK) return NULL;
        path = run;
        snprintf(p, sizeof p, "%s/%s", path, FG_CKPT_MODEL_FILE);
        if (fg__file_is_there(p) && st_is_flashgrad(p)) return flashgrad_load(path);
        snprintf(p, sizeof p, "%s/config.json", path);
        if (fg__file_is_there(p)) return fg__hf_load(path, NULL);
        snprintf(p, sizeof p, "%s/%s", path, FG_CKPT_MODEL_FILE);
        if (fg__file_is_there(p)) return flashgrad_load(path); /* says what is wrong with it */
        fg_error(FG_ERR_IO,
                 "%s: no model here (looked for a flashgrad run's model.safetensors and a Hugging Face folder's "
                 "config.json)",
                 path);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        /* a device, FIFO or socket: fg_open_read refuses it without reading or waiting, and says what it is */
        int fd = -1;
        int64_t size = 0;
        if (fg_open_read(path, 0, &fd, &size) == FG_OK) {
            close(fd);
            fg_error(FG_ERR_IO, "%s: not a regular file or folder", path);
        }
        return NULL;
    }
    if (fg__llmc_file_magic(path)) return fg__llmc_load(path);
    if (st_is_flashgrad(path)) return flashgrad_load(path);
    /* a Hugging Face weights file: its config.json is beside it */
    snprintf(p, sizeof p, "%s", path);
    char *slash = strrchr(p, '/');
    const char *dir = slash ? (slash == p ? "/" : (*slash = '\0', p)) : ".";
    char cj[4096 + 80];
    snprintf(cj, sizeof cj, "%.4096s/config.json", dir);
    size_t L = strlen(path);
    if (L > 12 && !strcmp(path + L - 12, ".safetensors") && fg__file_is_there(cj)) return fg__hf_load(dir, path);
    if (L > 12 && !strcmp(path + L - 12, ".safetensors")) return flashgrad_load(path); /* its own message */
    fg_error(FG_ERR_FORMAT,
             "%s: not a model file flashgrad reads (an llm.c .bin starts with magic %d; safetensors files are "
             "flashgrad checkpoints or Hugging Face weights with config.json beside them)",
             path, FG__LLMC_MAGIC);
    return NULL;
}

/* ---- GPT-2 as the files of GPT-2 know it ---- */

const char *fg__gpt2_cannot(const fg_gpt_config *c, char *why, size_t cap) {
    int windows = 0;
    for (int l = 0; l < c->n_layer; l++) windows |= fg_gpt_layer_window(c, l) != 0;
    if (c->pos != FG_POS_LEARNED)
        snprintf(why, cap, "pos %s", fg_gpt_pos_name(c->pos));
    else if (c->norm != FG_NORM_LAYERNORM)
        snprintf(why, cap, "norm %s", fg_gpt_norm_name(c->norm));
    else if (fg_gpt_eps(c) != 1e-5)
        snprintf(why, cap, "norm_eps %g", fg_gpt_eps(c));
    else if (c->emb_norm)
        snprintf(why, cap, "emb_norm 1");
    else if (c->qk_norm)
        snprintf(why, cap, "qk_norm 1");
    else if (c->mlp != FG_MLP_GELU)
        snprintf(why, cap, "mlp %s", fg_gpt_mlp_name(c->mlp));
    else if (fg_gpt_hidden(c) != 4 * c->n_embd)
        snprintf(why, cap, "mlp_hidden %d", fg_gpt_hidden(c));
    else if (c->no_bias)
        snprintf(why, cap, "no_bias 1");
    else if (c->untie_head)
        snprintf(why, cap, "an untied head");
    else if (fg_gpt_kv_heads(c) != c->n_head)
        snprintf(why, cap, "n_kv_head %d", fg_gpt_kv_heads(c));
    else if (c->logit_softcap > 0)
        snprintf(why, cap, "logit_softcap %g", c->logit_softcap);
    else if (windows)
        snprintf(why, cap, "window %s", c->window);
    else
        return NULL;
    return why;
}

/* ---- copying weights between models ---- */

fg_status fg_gpt_copy_weights(fg_gpt *dst, const fg_gpt *src) {
    const fg_gpt_config *a = &dst->cfg, *b = &src->cfg;
    if (a->n_layer != b->n_layer || a->n_head != b->n_head || a->n_embd != b->n_embd || a->vocab_size != b->vocab_size)
        return fg_error(FG_ERR_ARG, "copy weights: the models differ (L %d/%d, H %d/%d, C %d/%d, V %d/%d)", a->n_layer,
                        b->n_layer, a->n_head, b->n_head, a->n_embd, b->n_embd, a->vocab_size, b->vocab_size);
    if (a->block_size > b->block_size)
        return fg_error(FG_ERR_ARG, "copy weights: block size %d is larger than the source's %d", a->block_size,
                        b->block_size);
    /* the same architecture: what the table does not show, then every entry by name and shape */
    const char *diff = a->pos != b->pos                           ? "pos"
                       : fg_gpt_theta(a) != fg_gpt_theta(b)       ? "rope_theta"
                       : a->norm != b->norm                       ? "norm"
                       : fg_gpt_eps(a) != fg_gpt_eps(b)           ? "norm_eps"
                       : a->qk_norm != b->qk_norm                 ? "qk_norm"
                       : a->emb_norm != b->emb_norm               ? "emb_norm"
                       : a->mlp != b->mlp                         ? "mlp"
                       : fg_gpt_kv_heads(a) != fg_gpt_kv_heads(b) ? "n_kv_head"
                       : a->logit_softcap != b->logit_softcap     ? "logit_softcap"
                       : dst->n_params != src->n_params           ? "parameters"
                                                                  : NULL;
    for (int l = 0; !diff && l < a->n_layer; l++)
        if ((fg_gpt_layer_window(a, l) != 0) != (fg_gpt_layer_window(b, l) != 0)) diff = "window";
    for (int i = 0; !diff && i < dst->n_params; i++) {
        const fg_gpt_param *p = &dst->params[i], *q = fg_gpt_find(src, p->name);
        if (!q || q->ndim != p->ndim || q->shape[1] != p->shape[1] ||
            (p->kind == FG_GPT_WPE ? q->shape[0] < p->shape[0] : q->shape[0] != p->shape[0]))
            diff = p->name;
    }
    if (diff) return fg_error(FG_ERR_ARG, "copy weights: the architectures differ (%s)", diff);
    fg_tensor *hs = fg_to(src->params_flat, FG_CPU, dst->cfg.dtype);
    int64_t n = dst->num_elements;
    fg_tensor *hd = hs ? fg_empty(dst->cfg.dtype, FG_CPU, 1, &n) : NULL;
    if (!hd) {
        fg_release(hs);
        return fg_last_status();
    }
    const size_t es = dst->cfg.dtype == FG_F64 ? 8 : 4;
    for (int i = 0; i < dst->n_params; i++) {
        const fg_gpt_param *p = &dst->params[i], *q = fg_gpt_find(src, p->name);
        /* wpe keeps its first rows (cropped context); everything else is whole */
        memcpy((char *)fg_data(hd) + p->offset * es, (const char *)fg_data(hs) + q->offset * es, (size_t)p->numel * es);
    }
    fg_status st;
    if (dst->params_flat->device == FG_CPU) {
        st = fg_copy_into(dst->params_flat, hd);
    } else {
        fg_tensor *moved = fg_to(hd, dst->params_flat->device, dst->cfg.dtype);
        st = moved ? fg_copy_into(dst->params_flat, moved) : fg_last_status();
        fg_release(moved);
    }
    fg_release(hs);
    fg_release(hd);
    return st;
}

/* ---- writing ---- */

/* OUT may be written: absent, or (with overwrite) a folder that flashgrad's export wrote, holding
 * nothing else (fg_folder_check_ours, the rule `train --overwrite` follows too). */
fg_status fg__export_check_out(const char *out, int overwrite) {
    struct stat sb;
    if (lstat(out, &sb) != 0) {
        if (errno == ENOENT) return FG_OK;
        return fg_error(FG_ERR_IO, "%s: %s", out, strerror(errno));
    }
    if (!overwrite) return fg_error(FG_ERR_ARG, "%s already exists; pass --overwrite to replace it", out);
    if (!S_ISDIR(sb.st_mode)) return fg_error(FG_ERR_ARG, "%s exists and is not a folder; not replacing it", out);
    return fg_folder_check_ours(out, FG_FOLDER_HF_EXPORT, "--overwrite");
}

/* The names an export folder holds (what a leftover build folder may hold besides temporaries). */
static int export_file_name(const char *n) {
    return !strcmp(n, "config.json") || !strcmp(n, "model.safetensors") || !strcmp(n, "model.safetensors.index.json") ||
           fg_is_hf_shard_name(n);
}

/* A temporary of the export to OUT (ctx: OUT's last component): the folder or file a killed export
 * was building beside OUT. */
static int export_temporary(const char *name, const void *ctx) { return fg_is_temporary_of(name, ctx); }

/* Removes what an export to out that was killed midway left beside it (fg_remove_leftovers: only
 * temporaries no live writer holds). */
void fg__export_remove_leftovers(const char *out, int dirs) {
    char p[4096];
    snprintf(p, sizeof p, "%s", out);
    char *slash = strrchr(p, '/');
    const char *base = slash ? slash + 1 : p;
    const char *dir = slash ? (slash == p ? "/" : (*slash = '\0', p)) : ".";
    fg_remove_leftovers(dir, export_temporary, base, dirs ? export_file_name : NULL);
}

/* fsyncs the folder that holds `path` (its rename into place); a failure loses nothing more */
void fg__fsync_dir_of(const char *path) {
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    char *slash = strrchr(p, '/');
    const char *dir = slash ? (slash == p ? "/" : (*slash = '\0', p)) : ".";
    fg_fsync_dir(dir);
}
