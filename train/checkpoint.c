/* checkpoint.c — saving and reading runs (see checkpoint.h). */
#include "train/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tensor/safetensors.h"
#include "tensor/utf8.h"
#include "train/ckpt_keys.h"
#include "train/run_folder.h"

#define KIND_MODEL "flashgrad.gpt"
#define KIND_OPTIM "flashgrad.optimizer"
#define CKPT_VERSION "2"
/* Room a file path leaves for the suffix of its temporary file (fileio.h: "<path>.tmp.XXXXXX"). */
#define TMP_SUFFIX_ROOM 16

struct fg_ckpt {
    char model_path[4096], optim_path[4096];
    fg_st_file *model, *optim;
    fg_tokenizer *tok;
    int64_t adamw_t;
    int64_t muon_t;
    fg_ckpt_info info;
};

uint64_t fg_ckpt_params_hash(const fg_gpt *g) {
    if (g->params_flat->device == FG_CPU)
        return fg_xxh64(fg_data(g->params_flat), (size_t)fg_nbytes(g->params_flat), 0);
    /* a device model hashes a host copy of its buffer (same bytes, same hash); 0 if the copy fails */
    fg_tensor *h = fg_to(g->params_flat, FG_CPU, g->params_flat->dtype);
    uint64_t x = h ? fg_xxh64(fg_data(h), (size_t)fg_nbytes(h), 0) : 0;
    fg_release(h);
    return x;
}

static fg_status join(char *dst, size_t n, const char *dir, const char *file) {
    size_t k = (size_t)snprintf(dst, n, "%s/%s", dir, file);
    if (k + TMP_SUFFIX_ROOM >= n)
        return fg_error(FG_ERR_ARG, "checkpoint: the path '%.60s...%s' is too long (%zu bytes, at most %zu)", dir, file,
                        k, n - 1 - TMP_SUFFIX_ROOM);
    return FG_OK;
}

/* ---- the parameter table without a model ----
 * The names and shapes a configuration implies, in the flat order: the model's own table
 * (fg_gpt_table), without allocating the model. */

/* The table of mc: malloc'd, *n entries (no tensors); NULL + fg_error on out-of-memory. */
static fg_gpt_param *param_table(const fg_gpt_config *mc, int *n) {
    const int total = fg_gpt_table(mc, NULL);
    fg_gpt_param *t = calloc((size_t)total, sizeof *t);
    if (!t) {
        fg_error(FG_ERR_OOM, "checkpoint: out of memory");
        return NULL;
    }
    fg_gpt_table(mc, t);
    *n = total;
    return t;
}

/* ---- paths in metadata ----
 * Metadata strings are UTF-8; file names need not be. A path is stored with '%' and every byte that
 * is not part of a valid UTF-8 sequence written as %XX (two uppercase hex digits), everything else
 * as is: "data/input.txt" stays readable, and every byte string round-trips. */

/* The stored form of path p (malloc'd), or NULL + fg_error. */
static char *path_escape(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    size_t n = strlen(p), k = 0;
    char *o = malloc(3 * n + 1);
    if (!o) {
        fg_error(FG_ERR_OOM, "checkpoint: out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n;) {
        size_t l = fg_utf8_seq(u + i, n - i);
        if (l == 0 || u[i] == '%') {
            k += (size_t)snprintf(o + k, 4, "%%%02X", u[i]);
            i++;
        } else {
            memcpy(o + k, u + i, l);
            k += l;
            i += l;
        }
    }
    o[k] = '\0';
    return o;
}

static int upper_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes a stored path into out[0..cap); 1 when s is exactly what path_escape writes for some path
 * (no NUL, no needless escape) and it fits, else 0. */
static int path_unescape(const char *s, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; s[i];) {
        int c = (unsigned char)s[i];
        if (s[i] == '%') {
            int hi = upper_hex(s[i + 1]), lo = hi < 0 ? -1 : upper_hex(s[i + 2]);
            if (lo < 0) return 0;
            c = hi * 16 + lo;
            i += 3;
            if (c == 0) return 0;
        } else {
            i++;
        }
        if (k + 1 >= cap) return 0;
        out[k++] = (char)c;
    }
    out[k] = '\0';
    char *back = path_escape(out);
    int same = back && strcmp(back, s) == 0;
    free(back);
    return same;
}

/* ---- metadata, read strictly ----
 * One reader serves a file read back (fg_ckpt_open) and a writer about to write
 * (fg_ckpt_check_savable), so what is written is checked by the same code that will read it.
 * Every value must be exactly what fg_ckpt_save writes: integers in canonical decimal (%lld),
 * hashes as 16 lowercase hex digits, numbers as %.17g of a finite double, fixed strings and enums
 * by name; ranges are the library's own checks (fg_gpt_config_check, fg_train_config_check, the
 * datasets'); and a key the reader does not look up is refused. */

typedef struct {
    const fg_st_file *f;   /* the metadata of a file read back, or */
    const fg_st_writer *w; /* of one about to be written */
    const char *path;      /* names it in messages */
    fg_status st;          /* the first error; later lookups do nothing */
    int nread;
    const char *read[96]; /* the keys looked up: the only keys the file may hold */
    /* and the keys ix_prefix[i] + K for K below ix_n[i] (a source's numbered keys) */
    int nix;
    const char *ix_prefix[4];
    int ix_n[4];
} meta_rd;

static void m_fail(meta_rd *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void m_fail(meta_rd *r, const char *fmt, ...) {
    if (r->st != FG_OK) return;
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->st = fg_error(FG_ERR_FORMAT, "%s: %s", r->path, msg);
}

static const char *m_lookup(const meta_rd *r, const char *key) {
    return r->f ? fg_st_metadata(r->f, key) : fg_st_writer_metadata(r->w, key);
}

/* Records key as one the file may hold. */
static void m_known(meta_rd *r, const char *key) {
    FG_ASSERT(r->nread < (int)(sizeof r->read / sizeof r->read[0]), "meta_rd.read is too small");
    r->read[r->nread++] = key;
}

static const char *m_need(meta_rd *r, const char *key) {
    m_known(r, key);
    if (r->st != FG_OK) return NULL;
    const char *v = m_lookup(r, key);
    if (!v) m_fail(r, "the metadata has no '%s' (an incomplete or foreign checkpoint)", key);
    return v;
}

/* -?(0|[1-9][0-9]*) within int64, not "-0" */
static int parse_i64(const char *s, int64_t *v) {
    int neg = *s == '-';
    const char *d = s + neg;
    if (*d < '0' || *d > '9' || (*d == '0' && (d[1] || neg))) return 0;
    uint64_t x = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; *d; d++) {
        if (*d < '0' || *d > '9') return 0;
        unsigned dig = (unsigned)(*d - '0');
        if (x > (lim - dig) / 10) return 0;
        x = x * 10 + dig;
    }
    *v = neg ? (int64_t)(0 - x) : (int64_t)x;
    return 1;
}

/* 0|[1-9][0-9]* within uint64 */
static int parse_u64(const char *s, uint64_t *v) {
    if (*s < '0' || *s > '9' || (*s == '0' && s[1])) return 0;
    uint64_t x = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return 0;
        unsigned dig = (unsigned)(*s - '0');
        if (x > (UINT64_MAX - dig) / 10) return 0;
        x = x * 10 + dig;
    }
    *v = x;
    return 1;
}

static int64_t m_int(meta_rd *r, const char *key, int64_t lo, int64_t hi) {
    const char *v = m_need(r, key);
    int64_t x = 0;
    if (!v) return 0;
    if (!parse_i64(v, &x)) {
        m_fail(r, "metadata '%s' = '%.40s' is not an integer in %lld..%lld written in plain decimal", key, v,
               (long long)lo, (long long)hi);
        return 0;
    }
    if (x < lo || x > hi) {
        m_fail(r, "metadata '%s' = %lld is outside %lld..%lld", key, (long long)x, (long long)lo, (long long)hi);
        return 0;
    }
    return x;
}

static uint64_t m_u64(meta_rd *r, const char *key) {
    const char *v = m_need(r, key);
    uint64_t x = 0;
    if (v && !parse_u64(v, &x))
        m_fail(r, "metadata '%s' = '%.40s' is not an unsigned integer in plain decimal", key, v);
    return x;
}

static uint64_t m_hex(meta_rd *r, const char *key) {
    const char *v = m_need(r, key);
    if (!v) return 0;
    uint64_t x = 0;
    int ok = strlen(v) == 16;
    for (int i = 0; ok && i < 16; i++) {
        char c = v[i];
        if (c >= '0' && c <= '9')
            x = x << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            x = x << 4 | (uint64_t)(c - 'a' + 10);
        else
            ok = 0;
    }
    if (!ok) m_fail(r, "metadata '%s' = '%.40s' is not 16 lowercase hex digits", key, v);
    return x;
}

/* %.17g: a finite double written so it reads back to the same bits, in [lo, hi] ([lo, hi) when
 * hi_open). */
static double m_f64(meta_rd *r, const char *key, double lo, double hi, int hi_open) {
    const char *v = m_need(r, key);
    if (!v) return 0;
    char *end, back[40];
    double x = strtod(v, &end);
    int ok = end != v && !*end && isfinite(x);
    if (ok) {
        snprintf(back, sizeof back, "%.17g", x);
        ok = strcmp(back, v) == 0;
    }
    if (!ok) {
        m_fail(r, "metadata '%s' = '%.40s' is not a finite number written as flashgrad writes it (%%.17g)", key, v);
        return 0;
    }
    if (!(x >= lo && (hi_open ? x < hi : x <= hi))) {
        m_fail(r, "metadata '%s' = %.17g is outside [%g, %g%c", key, x, lo, hi, hi_open ? ')' : ']');
        return 0;
    }
    return x;
}

static void m_lit(meta_rd *r, const char *key, const char *want) {
    const char *v = m_need(r, key);
    if (v && strcmp(v, want))
        m_fail(r, "metadata '%s' = '%.40s'; flashgrad writes '%s' there and reads nothing else", key, v, want);
}

/* The index of the value among names[0..n), or -1. */
static int m_enum(meta_rd *r, const char *key, const char *const *names, int n) {
    const char *v = m_need(r, key);
    if (!v) return -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) return i;
    char list[200];
    size_t k = 0;
    list[0] = '\0';
    for (int i = 0; i < n && k < sizeof list; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "", names[i]);
    m_fail(r, "metadata '%s' = '%.40s' is none of: %s", key, v, list);
    return -1;
}

/* A stored path (see above) decoded into out. */
static void m_path(meta_rd *r, const char *key, char *out, size_t cap, int may_be_empty) {
    const char *v = m_need(r, key);
    out[0] = '\0';
    if (!v) return;
    if (!path_unescape(v, out, cap))
        m_fail(r,
               "metadata '%s' = '%.60s' is not a path as flashgrad stores it ('%%' and bytes outside UTF-8 as "
               "%%XX), or it is longer than %zu bytes",
               key, v, cap - 1);
    else if (!may_be_empty && !out[0])
        m_fail(r, "metadata '%s' is empty", key);
}

/* A numbered key a source read: a prefix it named and K in canonical decimal below its count. */
static int indexed_key_read(const meta_rd *r, const char *k) {
    for (int s = 0; s < r->nix; s++) {
        const size_t n = strlen(r->ix_prefix[s]);
        int64_t i;
        if (!strncmp(k, r->ix_prefix[s], n) && parse_i64(k + n, &i) && i >= 0 && i < r->ix_n[s]) return 1;
    }
    return 0;
}

/* Every key of the metadata must be one the reader looked up. */
static void m_no_other_keys(meta_rd *r) {
    if (r->st != FG_OK) return;
    int n = r->f ? fg_st_metadata_count(r->f) : fg_st_writer_metadata_count(r->w);
    for (int i = 0; i < n; i++) {
        const char *k;
        if (r->f)
            fg_st_metadata_at(r->f, i, &k, NULL);
        else
            fg_st_writer_metadata_at(r->w, i, &k, NULL);
        int known = (r->f && !strcmp(k, FG_ST_CHECKSUM_KEY)) || indexed_key_read(r, k);
        for (int j = 0; j < r->nread && !known; j++) known = !strcmp(k, r->read[j]);
        if (!known) {
            m_fail(r, "metadata key '%.60s' is not one a flashgrad checkpoint (version %s) holds", k, CKPT_VERSION);
            return;
        }
    }
}

/* The kind and version tags, and (for a file) that its checksum covered the metadata. Refuses
 * files that are not flashgrad checkpoints by name. */
static void m_kind(meta_rd *r, const char *want) {
    m_known(r, "fg_kind");
    m_known(r, "fg_version");
    const char *kind = m_lookup(r, "fg_kind"), *ver = m_lookup(r, "fg_version");
    if (!kind) {
        m_fail(r,
               "not a flashgrad checkpoint (its metadata has no 'fg_kind'; a safetensors file from another program?)");
    } else if (strcmp(kind, want)) {
        if (!strcmp(want, KIND_MODEL) && !strcmp(kind, KIND_OPTIM))
            m_fail(r, "holds optimizer state, not a model (pass the model file or its folder)");
        else
            m_fail(r, "is a '%.40s' file, expected '%s'", kind, want);
    } else if (ver && !strcmp(ver, "1")) {
        m_fail(r,
               "written by an older flashgrad (checkpoint format version 1, whose metadata no checksum covers); "
               "this flashgrad reads version %s only: train again, or use the flashgrad that wrote it",
               CKPT_VERSION);
    } else if (!ver || strcmp(ver, CKPT_VERSION)) {
        m_fail(r, "checkpoint version '%.20s' is not supported (this flashgrad reads version %s)", ver ? ver : "(none)",
               CKPT_VERSION);
    } else if (r->f && fg_st_checksum_coverage(r->f) != FG_ST_SUM_ALL) {
        m_fail(r, "its checksum does not cover its metadata (%s); a version %s checkpoint always has one that does",
               fg_st_checksum_coverage(r->f) == FG_ST_SUM_NONE ? "it has none" : "it covers the tensor data only",
               CKPT_VERSION);
    }
}

/* ---- the reader a source reads its identity through (datasets/source.h) ---- */
static fg_status rd_status(void *ctx) { return ((meta_rd *)ctx)->st; }
static void rd_fail(void *ctx, const char *msg) { m_fail(ctx, "%s", msg); }
static void rd_fail_status(void *ctx, fg_status st) {
    meta_rd *r = ctx;
    if (r->st == FG_OK) r->st = st;
}
static const char *rd_lookup(void *ctx, const char *key) { return m_lookup(ctx, key); }
static void rd_indexed(void *ctx, const char *prefix, int n) {
    meta_rd *r = ctx;
    FG_ASSERT(r->nix < (int)(sizeof r->ix_n / sizeof r->ix_n[0]), "meta_rd.ix_prefix is too small");
    r->ix_prefix[r->nix] = prefix;
    r->ix_n[r->nix++] = n;
}
static int64_t rd_i64(void *ctx, const char *key, int64_t lo, int64_t hi) { return m_int(ctx, key, lo, hi); }
static uint64_t rd_u64(void *ctx, const char *key) { return m_u64(ctx, key); }
static uint64_t rd_hex(void *ctx, const char *key) { return m_hex(ctx, key); }
static double rd_f64(void *ctx, const char *key, double lo, double hi, int hi_open) {
    return m_f64(ctx, key, lo, hi, hi_open);
}
static int rd_name(void *ctx, const char *key, const char *const *names, int n) { return m_enum(ctx, key, names, n); }
static void rd_path(void *ctx, const char *key, char *out, size_t cap, int may_be_empty) {
    m_path(ctx, key, out, cap, may_be_empty);
}
static fg_meta_reader source_reader(meta_rd *r) {
    return (fg_meta_reader){.ctx = r,
                            .status = rd_status,
                            .fail = rd_fail,
                            .fail_status = rd_fail_status,
                            .lookup = rd_lookup,
                            .indexed = rd_indexed,
                            .i64 = rd_i64,
                            .u64 = rd_u64,
                            .hex = rd_hex,
                            .f64 = rd_f64,
                            .name = rd_name,
                            .path = rd_path,
                            .parse_i64 = parse_i64,
                            .unescape_path = path_unescape};
}

/* ---- the configuration's keys (ckpt_keys.h), read ----
 * One statement per row: the row's reader into `dst`, only when its `when` says the file holds it. */
static const char *const no_yes[2] = {"false", "true"};
#define RD_I(key, dst, lo, hi) (dst) = m_int(r, key, lo, hi)
#define RD_F(key, dst, lo, hi) (dst) = m_f64(r, key, lo, hi, 0)
#define RD_FO(key, dst, lo, hi) (dst) = m_f64(r, key, lo, hi, 1)
#define RD_U(key, dst, lo, hi) (dst) = m_u64(r, key)
#define RD_E(key, dst, name, n)                                                                                        \
    do {                                                                                                               \
        const char *names_[n];                                                                                         \
        for (int i_ = 0; i_ < (n); i_++) names_[i_] = name(i_);                                                        \
        const int k_ = m_enum(r, key, names_, n);                                                                      \
        if (k_ >= 0) (dst) = k_;                                                                                       \
    } while (0)
#define RD_NB(key, dst, lo, hi) (dst) = m_enum(r, key, no_yes, 2) == 0
#define RD_WIN(key, dst, lo, hi) m_window(r, key, dst, sizeof(dst))
#define RD_PLAN(key, dst, lo, hi) plan = m_plan(r, key)
#define R_WHEN_ALL(key) 1
#define R_WHEN_SET(key) (m_lookup(r, key) != NULL)
#define R_WHEN_OPT(key) (m_lookup(r, key) != NULL)
#define READ_MODEL_ROW(key, type, field, a, b, keep, when)                                                             \
    if (R_WHEN_##when(key)) RD_##type(key, c->field, a, b);
#define READ_RUN_ROW(key, type, field, a, b, keep, when)                                                               \
    if (R_WHEN_##when(key)) RD_##type(key, t->field, a, b);

/* The attention window: a pattern of S and L ("L": every layer full, stored in the config as ""). */
static void m_window(meta_rd *r, const char *key, char *window, size_t cap) {
    const char *w = m_need(r, key);
    if (w && (strlen(w) >= cap || strspn(w, "SL") != strlen(w) || !*w))
        m_fail(r, "metadata '%s' = '%.40s' is not a pattern of 1 to %d letters S and L", key, w, (int)cap - 1);
    else if (w)
        snprintf(window, cap, "%s", strcmp(w, "L") ? w : "");
}

/* The recompute plan's text (applied once the model's shape is read), or NULL. */
static const char *m_plan(meta_rd *r, const char *key) {
    m_known(r, key);
    return m_lookup(r, key);
}

/* The model's configuration: GPT-2's defaults, then every row the file holds; *plan gets the
 * recompute plan's text (or NULL). */
static void parse_model_config(meta_rd *r, fg_gpt_config *c, const char **plan_out) {
    const char *plan = NULL;
    FG_CKPT_MODEL_KEYS(READ_MODEL_ROW)
    /* the architecture beyond GPT-2's, written only for other models */
    if (r->st == FG_OK && m_lookup(r, "arch")) {
        FG_CKPT_ARCH_KEYS(READ_MODEL_ROW)
    }
    *plan_out = plan;
}

/* The model file's metadata into *in; *tok gets the tokenizer (caller frees, also on error). */
static fg_status parse_model_meta(meta_rd *r, fg_ckpt_info *in, fg_tokenizer **tok) {
    *tok = NULL;
    m_kind(r, KIND_MODEL);
    m_lit(r, "format", "pt");
    in->model = fg_gpt_default_config();
    const char *plan = NULL;
    parse_model_config(r, &in->model, &plan);
    in->step = m_int(r, "step", 0, FG_TRAIN_STEPS_MAX);
    in->params_hash = m_hex(r, "params_xxh64");
    const char *tokstr = m_need(r, "tokenizer");
    const fg_meta_reader sr = source_reader(r);
    const int data = fg_source_kind_read(&sr);
    if (r->st != FG_OK) return r->st;
    if (plan && fg_gpt_recompute_set(&in->model, plan) != FG_OK) m_fail(r, "bad 'recompute': %s", fg_last_error());
    if (fg_gpt_config_check(&in->model) != FG_OK)
        m_fail(r, "the metadata describes no valid model: %s", fg_last_error());
    if (r->st != FG_OK) return r->st;
    /* the data: its kind reads its own keys, the tokenizer first */
    fg_source_identity_read(&sr, data, tokstr, in->model.vocab_size, in->model.block_size, &in->data, tok);
    if (r->st != FG_OK) return r->st;
    in->tokenizer = *tok;
    m_no_other_keys(r);
    return r->st;
}

/* The optimizer file's metadata: the run's configuration (its model part from `model`), the step,
 * the pairing hash and AdamW's update count. */
static fg_status parse_optim_meta(meta_rd *r, const fg_gpt_config *model, fg_train_config *t, int64_t *step,
                                  uint64_t *params_hash, int64_t *adamw_t, int64_t *muon_t) {
    m_kind(r, KIND_OPTIM);
    /* each key's plausible range (trainer.h): a value outside is refused naming the key */
    *step = m_int(r, "step", 0, FG_TRAIN_STEPS_MAX);
    *params_hash = m_hex(r, "params_xxh64");
    *adamw_t = m_int(r, "adamw_t", 0, FG_TRAIN_STEPS_MAX);
    memset(t, 0, sizeof *t);
    t->model = *model;
    FG_CKPT_RUN_KEYS(READ_RUN_ROW)
    /* a run with Muon says so; a file without "optimizer" trained with AdamW alone */
    *muon_t = 0;
    if (t->optimizer == FG_OPTIM_MUON) {
        FG_CKPT_MUON_KEYS(READ_RUN_ROW)
        *muon_t = m_int(r, "muon_t", 0, FG_TRAIN_STEPS_MAX);
    }
    m_no_other_keys(r);
    if (r->st != FG_OK) return r->st;
    if (*adamw_t != *step)
        m_fail(r, "metadata 'adamw_t' = %lld differs from 'step' = %lld (AdamW makes one update per step)",
               (long long)*adamw_t, (long long)*step);
    else if (t->optimizer == FG_OPTIM_MUON && *muon_t != *step)
        m_fail(r, "metadata 'muon_t' = %lld differs from 'step' = %lld (Muon makes one update per step)",
               (long long)*muon_t, (long long)*step);
    else if (fg_train_config_check(t) != FG_OK)
        m_fail(r, "the metadata describes no valid training run: %s", fg_last_error());
    return r->st;
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
/* The metadata writer a source describes itself through (source.h). */
static fg_status writer_set(void *ctx, const char *key, const char *value) {
    return fg_st_writer_set_metadata(ctx, key, value);
}

/* The recompute plan, when there is one (a run without recomputation keeps its old bytes). */
static fg_status meta_plan(fg_st_writer *w, const char *key, const fg_gpt_config *mc) {
    char plan[FG_GPT_MAX_LAYER * 12];
    fg_gpt_recompute_format(mc, plan, sizeof plan);
    return strcmp(plan, "none") ? fg_st_writer_set_metadata(w, key, plan) : FG_OK;
}

/* ---- the configuration's keys (ckpt_keys.h), written ----
 * One statement per row: the row's writer, when its `when` says the value is recorded. */
#define WR_I(w, key, v, a) meta_i64(w, key, v)
#define WR_F(w, key, v, a) meta_f64(w, key, v)
#define WR_FO(w, key, v, a) meta_f64(w, key, v)
#define WR_U(w, key, v, a) meta_u64(w, key, v)
#define WR_E(w, key, v, name) fg_st_writer_set_metadata(w, key, name(v))
#define WR_NB(w, key, v, a) fg_st_writer_set_metadata(w, key, (v) ? "false" : "true")
#define WR_WIN(w, key, v, a) fg_st_writer_set_metadata(w, key, (v)[0] ? (v) : "L")
#define WR_PLAN(w, key, v, a) meta_plan(w, key, mc) /* writes nothing for "none" */
#define SET_I(v) ((v) != 0)
#define SET_E(v) ((v) != 0)
#define SET_PLAN(v) 1
#define W_WHEN_ALL(type, v) 1
#define W_WHEN_SET(type, v) SET_##type(v)
#define W_WHEN_OPT(type, v) 1
#define WRITE_MODEL_ROW(key, type, field, a, b, keep, when)                                                            \
    if (W_WHEN_##when(type, mc->field)) CHECK(WR_##type(mw, key, mc->field, a));
#define WRITE_RUN_ROW(key, type, field, a, b, keep, when)                                                              \
    if (W_WHEN_##when(type, tc->field)) CHECK(WR_##type(ow, key, tc->field, a));

#define CHECK(expr)                                                                                                    \
    do {                                                                                                               \
        if ((st = (expr)) != FG_OK) goto out;                                                                          \
    } while (0)

/* The two files of a save, ready to write: both writers borrow the trainer's buffers (or the host
 * copies here, for a model on a device). */
typedef struct {
    fg_st_writer *mw, *ow;
    fg_tensor *hp, *hm, *hv;
} ckpt_writers;

static void writers_free(ckpt_writers *cw) {
    fg_st_writer_free(cw->mw);
    fg_st_writer_free(cw->ow);
    fg_release(cw->hp);
    fg_release(cw->hm);
    fg_release(cw->hv);
    memset(cw, 0, sizeof *cw);
}

/* Everything fg_ckpt_save writes, built in memory. On failure cw is freed. */
static fg_status build_writers(const fg_trainer *tr, ckpt_writers *cw) {
    const fg_gpt *g = tr->model;
    const fg_gpt_config *mc = &g->cfg;
    const fg_train_config *tc = &tr->cfg;
    const fg_source *src = tr->data;
    fg_status st = FG_OK;
    char *tokstr = NULL;
    memset(cw, 0, sizeof *cw);
    /* Device buffers (cuda) are written from host copies, one bulk copy each. */
    if (mc->device != FG_CPU) {
        cw->hp = fg_to(g->params_flat, FG_CPU, mc->dtype);
        cw->hm = cw->hp ? fg_to(tr->opt.m, FG_CPU, mc->dtype) : NULL;
        cw->hv = cw->hm ? fg_to(tr->opt.v, FG_CPU, mc->dtype) : NULL;
        if (!cw->hv) {
            st = fg_last_status();
            goto out;
        }
    }
    const fg_tensor *hp = cw->hp;
    const uint64_t phash = hp ? fg_xxh64(fg_data(hp), (size_t)fg_nbytes(hp), 0) : fg_ckpt_params_hash(g);
    const fg_st_dtype dt = fg_st_from_dtype(mc->dtype);
    /* token files have no tokenizer unless a meta.pkl or --tokenizer gave them one */
    tokstr = !fg_source_tokenizer(src) ? strdup(FG_TOKENIZER_NONE) : fg_tokenizer_serialize(fg_source_tokenizer(src));
    fg_st_writer *mw = cw->mw = fg_st_writer_new(), *ow = cw->ow = fg_st_writer_new();
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
    FG_CKPT_MODEL_KEYS(WRITE_MODEL_ROW)
    if (!fg_gpt_is_gpt2(mc)) {
        FG_CKPT_ARCH_KEYS(WRITE_MODEL_ROW) /* a GPT-2 writes none */
    }
    CHECK(fg_st_writer_set_metadata(mw, "tokenizer", tokstr));
    const fg_meta_writer dw = {.ctx = mw, .set = writer_set, .escape_path = path_escape};
    CHECK(fg_source_describe(src, &dw));
    CHECK(meta_i64(mw, "step", tr->step));
    CHECK(meta_hex(mw, "params_xxh64", phash));

    /* the optimizer and the rest of the run's state */
    int64_t P = g->num_elements, one = 1, two = 2;
    int64_t step = tr->step;
    uint64_t rng[2] = {tc->seed, (uint64_t)tr->step};
    CHECK(fg_st_writer_add(ow, "exp_avg", dt, 1, &P, fg_data(cw->hm ? cw->hm : tr->opt.m)));
    CHECK(fg_st_writer_add(ow, "exp_avg_sq", dt, 1, &P, fg_data(cw->hv ? cw->hv : tr->opt.v)));
    CHECK(fg_st_writer_add_copy(ow, "step", FG_ST_I64, 1, &one, &step));
    CHECK(fg_st_writer_add_copy(ow, "rng", FG_ST_U64, 1, &two, rng));
    CHECK(fg_st_writer_set_metadata(ow, "fg_kind", KIND_OPTIM));
    CHECK(fg_st_writer_set_metadata(ow, "fg_version", CKPT_VERSION));
    CHECK(meta_i64(ow, "step", tr->step));
    CHECK(meta_hex(ow, "params_xxh64", phash));
    CHECK(meta_i64(ow, "adamw_t", tr->opt.t));
    FG_CKPT_RUN_KEYS(WRITE_RUN_ROW)
    if (tc->optimizer == FG_OPTIM_MUON) {
        /* Muon's momentum buffers, back to back in table order (train/muon.h) */
        int64_t M = tr->muon.n;
        CHECK(fg_st_writer_add(ow, "muon_momentum_buffer", dt, 1, &M, fg_data(tr->muon.buf)));
        FG_CKPT_MUON_KEYS(WRITE_RUN_ROW)
        CHECK(meta_i64(ow, "muon_t", tr->muon.t));
    }
out:
    free(tokstr);
    if (st != FG_OK) writers_free(cw);
    return st;
}

/* The three file paths of a save into dir. */
static fg_status save_paths(const char *dir, char mpath[4096], char opath[4096], char ppath[4096]) {
    fg_status st = join(mpath, 4096, dir, FG_CKPT_MODEL_FILE);
    if (st == FG_OK) st = join(opath, 4096, dir, FG_CKPT_OPTIM_FILE);
    if (st == FG_OK) st = join(ppath, 4096, dir, FG_CKPT_OPTIM_PREV_FILE);
    return st;
}

/* 1 when the optimizer file at opath is the model file's own state (the same step and parameter
 * hash), as fg_ckpt_open would pair them. */
static int pair_on_disk(const char *mpath, const char *opath) {
    static const char *const keys[] = {"step", "params_xxh64"};
    for (int i = 0; i < 2; i++) {
        char a[64], b[64];
        if (!fg_st_peek_metadata(mpath, keys[i], a, sizeof a) || !fg_st_peek_metadata(opath, keys[i], b, sizeof b) ||
            strcmp(a, b))
            return 0;
    }
    return 1;
}

fg_status fg_ckpt_save(const char *dir, const fg_trainer *tr) {
    char mpath[4096], opath[4096], ppath[4096];
    ckpt_writers cw;
    fg_status st = save_paths(dir, mpath, opath, ppath);
    if (st != FG_OK) return st;
    if ((st = build_writers(tr, &cw)) != FG_OK) return st;

    /* Crash-consistent order. The model file says which state is current; the optimizer state of
     * the model that is on disk must exist at every moment:
     *   1. optimizer.safetensors -> optimizer.prev.safetensors (rename: the old pair stays whole)
     *   2. write the new optimizer.safetensors              (old model + prev still pair up)
     *   3. write the new model.safetensors                  (new model + new optimizer pair up)
     * A kill anywhere leaves a model whose optimizer state is one of the two files, and
     * fg_ckpt_open picks the one whose step and parameter hash match the model. Step 1 only when
     * optimizer.safetensors is the model's own state: after a save killed between 2 and 3 it is
     * not (the model's is .prev), and renaming it over .prev would leave the model unpaired should
     * this save be killed too; the stale file is simply replaced in step 2. */
    struct stat sb;
    if ((st = fg_check_replaceable(mpath)) != FG_OK || (st = fg_check_replaceable(opath)) != FG_OK ||
        (st = fg_check_replaceable(ppath)) != FG_OK) {
        fg_error(st, "checkpoint: %s", fg_last_error());
        goto out;
    }
    if (stat(opath, &sb) == 0 && stat(mpath, &sb) == 0 && pair_on_disk(mpath, opath) &&
        (st = fg_rename_replace(opath, ppath)) != FG_OK) {
        fg_error(st, "checkpoint: %s", fg_last_error());
        goto out;
    }
    CHECK(fg_st_writer_write(cw.ow, opath));
    CHECK(fg_st_writer_write(cw.mw, mpath));
out:
    writers_free(&cw);
    return st;
}

fg_status fg_ckpt_check_savable(const char *dir, const fg_trainer *tr) {
    char mpath[4096], opath[4096], ppath[4096];
    ckpt_writers cw;
    fg_status st = save_paths(dir, mpath, opath, ppath);
    if (st != FG_OK) return st;
    if ((st = build_writers(tr, &cw)) != FG_OK) return st;
    fg_ckpt_info in;
    memset(&in, 0, sizeof in);
    CHECK(fg_st_writer_check(cw.ow, opath));
    CHECK(fg_st_writer_check(cw.mw, mpath));
    /* what fg_ckpt_open will make of it */
    fg_tokenizer *tok = NULL;
    meta_rd rm = {.w = cw.mw, .path = mpath};
    st = parse_model_meta(&rm, &in, &tok);
    fg_tokenizer_free(tok);
    if (st != FG_OK) goto out;
    in.model.dtype = tr->model->cfg.dtype;
    fg_train_config t;
    int64_t step, adamw_t, muon_t;
    uint64_t ph;
    meta_rd ro = {.w = cw.ow, .path = opath};
    CHECK(parse_optim_meta(&ro, &in.model, &t, &step, &ph, &adamw_t, &muon_t));
    /* the data's paths as they will read back */
    st = fg_source_check_read_back(tr->data, &in.data);
out:
    fg_source_identity_free(&in.data);
    writers_free(&cw);
    return st;
}

/* ---- reading ---- */

/* Index of the first element of F32/F64 array a that is not finite (or, with nonneg, is below
 * zero), or -1 if there is none; *bad gets its value. */
static int64_t first_bad(const fg_st_array *a, int nonneg, double *bad) {
    const unsigned char *p = a->data;
    const size_t es = fg_st_dtype_size(a->dtype), n = es ? a->nbytes / es : 0;
    for (size_t i = 0; i < n; i++) {
        double x;
        if (a->dtype == FG_ST_F32) {
            float f;
            memcpy(&f, p + i * 4, 4);
            x = f;
        } else {
            memcpy(&x, p + i * 8, 8);
        }
        if (!isfinite(x) || (nonneg && x < 0)) {
            *bad = x;
            return (int64_t)i;
        }
    }
    return -1;
}

/* Before any allocation, from the metadata's configuration: the file holds exactly the tensors of
 * that model (names, shapes, one float dtype), with finite values. */
static fg_status check_tensors(fg_ckpt *c) {
    const fg_gpt_config *mc = &c->info.model;
    const char *path = c->model_path;
    int n;
    fg_gpt_param *t = param_table(mc, &n);
    if (!t) return fg_last_status();
    /* the token embedding, the table's first entry (transformer.wte.weight for a GPT-2) */
    const fg_st_array *wte = fg_st_find(c->model, t[0].name);
    if (!wte || (wte->dtype != FG_ST_F32 && wte->dtype != FG_ST_F64)) {
        fg_status e = !wte ? fg_error(FG_ERR_FORMAT, "%s: no tensor '%s'", path, t[0].name)
                           : fg_error(FG_ERR_FORMAT, "%s: parameters are %s; flashgrad reads F32 and F64", path,
                                      fg_st_dtype_name(wte->dtype));
        free(t);
        return e;
    }
    c->info.model.dtype = wte->dtype == FG_ST_F32 ? FG_F32 : FG_F64;
    fg_status st = FG_OK;
    if (fg_st_count(c->model) != n)
        st = fg_error(FG_ERR_FORMAT, "%s: holds %d tensors; a %d-layer model has %d", path, fg_st_count(c->model),
                      mc->n_layer, n);
    for (int j = 0; j < n && st == FG_OK; j++) {
        const fg_gpt_param *p = &t[j];
        const fg_st_array *a = fg_st_find(c->model, p->name);
        if (!a) {
            st = fg_error(FG_ERR_FORMAT, "%s: no tensor '%s'", path, p->name);
            break;
        }
        int same = a->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = a->shape[d] == p->shape[d];
        if (!same || a->dtype != wte->dtype) {
            char have[200], want[64];
            st = fg_error(FG_ERR_FORMAT,
                          "%s: %s has shape %s %s, expected %s %s (from the configuration in the metadata)", path,
                          p->name, fg_dims_str(have, sizeof have, a->ndim, a->shape), fg_st_dtype_name(a->dtype),
                          fg_dims_str(want, sizeof want, p->ndim, p->shape), fg_st_dtype_name(wte->dtype));
            break;
        }
        double bad;
        int64_t i = first_bad(a, 0, &bad);
        if (i >= 0) {
            char at[80] = "";
            if (p->ndim == 2)
                snprintf(at, sizeof at, ", element (%lld, %lld)", (long long)(i / p->shape[1]),
                         (long long)(i % p->shape[1]));
            st = fg_error(FG_ERR_FORMAT,
                          "%s: tensor '%s' holds a non-finite value (%g) at index %lld%s; a model with it "
                          "computes nothing meaningful",
                          path, p->name, bad, (long long)i, at);
        }
    }
    free(t);
    return st;
}

static fg_status read_model(fg_ckpt *c) {
    meta_rd r = {.f = c->model, .path = c->model_path};
    fg_status st = parse_model_meta(&r, &c->info, &c->tok);
    return st != FG_OK ? st : check_tensors(c);
}

static fg_status read_optim(fg_ckpt *c) {
    const fg_st_file *f = c->optim;
    const char *path = c->optim_path;
    fg_ckpt_info *in = &c->info;
    fg_train_config t;
    int64_t step, adamw_t, muon_t;
    uint64_t ph;
    meta_rd r = {.f = f, .path = path};
    fg_status st = parse_optim_meta(&r, &in->model, &t, &step, &ph, &adamw_t, &muon_t);
    if (st != FG_OK) return st;
    if (step != in->step || ph != in->params_hash)
        return fg_error(FG_ERR_FORMAT,
                        "%s is from step %lld but %s is from step %lld%s: the pair does not match (a checkpoint "
                        "write was interrupted?), so the run cannot be resumed exactly",
                        path, (long long)step, c->model_path, (long long)in->step,
                        step == in->step ? " with other weights" : "");
    const int muon = t.optimizer == FG_OPTIM_MUON;
    if (fg_st_count(f) != 4 + muon)
        return fg_error(FG_ERR_FORMAT, "%s: holds %d tensors, expected %d (exp_avg, exp_avg_sq, %srng, step)", path,
                        fg_st_count(f), 4 + muon, muon ? "muon_momentum_buffer, " : "");
    /* the moments: one per parameter, finite; the second ones are averages of squares */
    int64_t P = 0;
    for (int i = 0; i < fg_st_count(c->model); i++) {
        const fg_st_array *a = fg_st_at(c->model, i);
        P += (int64_t)(a->nbytes / fg_st_dtype_size(a->dtype));
    }
    const fg_st_dtype dt = fg_st_from_dtype(in->model.dtype);
    const char *names[2] = {"exp_avg", "exp_avg_sq"};
    for (int k = 0; k < 2; k++) {
        const fg_st_array *a = fg_st_find(f, names[k]);
        if (!a) return fg_error(FG_ERR_FORMAT, "%s: no tensor '%s'", path, names[k]);
        if (a->dtype != dt || a->ndim != 1 || a->shape[0] != P) {
            char have[200];
            return fg_error(FG_ERR_FORMAT, "%s: %s has shape %s %s, expected (%lld) %s (one moment per parameter)",
                            path, names[k], fg_dims_str(have, sizeof have, a->ndim, a->shape), fg_st_dtype_name(a->dtype),
                            (long long)P, fg_st_dtype_name(dt));
        }
        double bad;
        int64_t i = first_bad(a, k == 1, &bad);
        if (i >= 0)
            return fg_error(FG_ERR_FORMAT, "%s: %s holds %s (%g) at index %lld; AdamW cannot continue from it", path,
                            names[k], isfinite(bad) ? "a negative second moment" : "a non-finite value", bad,
                            (long long)i);
    }
    if (muon) {
        /* one buffer element per element of the matrices Muon takes, finite */
        int np = 0;
        fg_gpt_param *tab = param_table(&in->model, &np);
        if (!tab) return fg_last_status();
        int64_t M = 0;
        for (int j = 0; j < np; j++)
            if (fg_muon_takes(&tab[j])) M += tab[j].numel;
        free(tab);
        const fg_st_array *a = fg_st_find(f, "muon_momentum_buffer");
        if (!a) return fg_error(FG_ERR_FORMAT, "%s: no tensor 'muon_momentum_buffer' (the run trained with Muon)", path);
        if (a->dtype != dt || a->ndim != 1 || a->shape[0] != M) {
            char have[200];
            return fg_error(FG_ERR_FORMAT,
                            "%s: muon_momentum_buffer has shape %s %s, expected (%lld) %s (one element per element of "
                            "the hidden matrices)",
                            path, fg_dims_str(have, sizeof have, a->ndim, a->shape), fg_st_dtype_name(a->dtype),
                            (long long)M, fg_st_dtype_name(dt));
        }
        double bad;
        int64_t i = first_bad(a, 0, &bad);
        if (i >= 0)
            return fg_error(FG_ERR_FORMAT, "%s: muon_momentum_buffer holds a non-finite value (%g) at index %lld; Muon "
                            "cannot continue from it", path, bad, (long long)i);
    }
    int64_t st_step = 0, one = 1, two = 2;
    uint64_t rng[2];
    if (fg_st_read(f, "step", FG_ST_I64, 1, &one, &st_step) != FG_OK ||
        fg_st_read(f, "rng", FG_ST_U64, 1, &two, rng) != FG_OK)
        return fg_error(FG_ERR_FORMAT, "%s", fg_last_error());
    if (st_step != step || rng[1] != (uint64_t)step || rng[0] != t.seed)
        return fg_error(FG_ERR_FORMAT,
                        "%s: its step/rng tensors (%lld, seed %llu) disagree with its metadata (%lld, seed %llu)", path,
                        (long long)st_step, (unsigned long long)rng[0], (long long)step, (unsigned long long)t.seed);
    in->train = t;
    c->adamw_t = adamw_t;
    c->muon_t = muon_t;
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
    /* a run's model file given by its path: where the run is (an interrupted --overwrite may have
     * set it aside) */
    char file[4096];
    fg_status st = fg_run_folder_file_for_reading(path, file, sizeof file);
    if (st != FG_OK) {
        fg_ckpt_close(c);
        return NULL;
    }
    path = file;
    if (stat(path, &sb) != 0) {
        st = fg_error(FG_ERR_IO, "%s: no such checkpoint (%s)", path, strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        /* a run folder: where its run is (an interrupted --overwrite may have set it aside) */
        char dir[4096];
        st = fg_run_folder_for_reading(path, dir, sizeof dir);
        if (st == FG_OK) st = join(c->model_path, sizeof c->model_path, dir, FG_CKPT_MODEL_FILE);
        if (st == FG_OK) st = join(c->optim_path, sizeof c->optim_path, dir, FG_CKPT_OPTIM_FILE);
    } else {
        snprintf(c->model_path, sizeof c->model_path, "%s", path);
        const char *slash = strrchr(path, '/');
        int dirlen = slash ? (int)(slash - path) : 1;
        snprintf(c->optim_path, sizeof c->optim_path, "%.*s/%s", dirlen, slash ? path : ".", FG_CKPT_OPTIM_FILE);
    }
    if (st == FG_OK && !(c->model = fg_st_load(c->model_path))) st = fg_last_status();
    if (st == FG_OK) st = read_model(c);
    if (st == FG_OK && with_optimizer) {
        if (!(c->optim = fg_st_load(c->optim_path))) st = fg_last_status();
        if (st == FG_OK) st = read_optim(c);
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
                st = (c->optim = fg_st_load(c->optim_path)) ? read_optim(c) : fg_last_status();
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
    fg_source_identity_free(&c->info.data);
    free(c);
}

const fg_ckpt_info *fg_ckpt_get_info(const fg_ckpt *c) { return &c->info; }

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
            char have[200], want[64];
            return fg_error(FG_ERR_FORMAT, "%s: %s has shape %s %s, expected %s %s", c->model_path, p->name,
                            fg_dims_str(have, sizeof have, a->ndim, a->shape), fg_st_dtype_name(a->dtype),
                            fg_dims_str(want, sizeof want, p->w->ndim, p->w->shape), fg_st_dtype_name(dt));
        }
    }
    return FG_OK;
}

/* Weights into g (same config as the checkpoint's), then the pairing hash. */
static fg_status load_weights(const fg_ckpt *c, fg_gpt *g) {
    fg_status st = check_against_model(c, g);
    for (int j = 0; j < g->n_params && st == FG_OK; j++)
        st = fg_st_read_into(c->model, g->params[j].name, g->params[j].w);
    if (st != FG_OK) return st;
    if (fg_ckpt_params_hash(g) != c->info.params_hash)
        return fg_error(FG_ERR_FORMAT, "%s: the weights do not match their recorded params_xxh64", c->model_path);
    return FG_OK;
}

fg_gpt *fg_ckpt_load_model(const fg_ckpt *c) {
    fg_gpt_config mc = c->info.model;
    mc.device = FG_CPU;
    mc.compute = FG_COMPUTE_FULL; /* the weights are float32; a CPU model computes in float32 */
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
    if (a->n_layer != b->n_layer || a->n_head != b->n_head || a->n_embd != b->n_embd ||
        a->block_size != b->block_size || a->vocab_size != b->vocab_size || a->dtype != b->dtype ||
        !fg_gpt_same_arch(a, b))
        return fg_error(FG_ERR_ARG, "checkpoint: the trainer's model differs from the checkpoint's");
    if (a->compute != b->compute)
        return fg_error(FG_ERR_ARG, "checkpoint: the run computed in %s, the trainer in %s; a resumed run keeps its "
                                    "precision", fg_compute_name(b->compute), fg_compute_name(a->compute));
    const fg_optim_kind ok = c->info.train.optimizer;
    if (tr->cfg.optimizer != ok)
        return fg_error(FG_ERR_ARG, "checkpoint: the run trained with --optimizer %s, the trainer has %s; a resumed run "
                                    "keeps its optimizer", fg_optim_name(ok), fg_optim_name(tr->cfg.optimizer));
    fg_status st = load_weights(c, tr->model);
    if (st == FG_OK) st = fg_st_read_into(c->optim, "exp_avg", tr->opt.m);
    if (st == FG_OK) st = fg_st_read_into(c->optim, "exp_avg_sq", tr->opt.v);
    if (st == FG_OK && ok == FG_OPTIM_MUON) st = fg_st_read_into(c->optim, "muon_momentum_buffer", tr->muon.buf);
    if (st != FG_OK) return st;
    tr->opt.t = c->adamw_t;
    tr->muon.t = c->muon_t;
    tr->step = c->info.step;
    return FG_OK;
}

/* ---- the data of the run ---- */

fg_source *fg_ckpt_source(const fg_ckpt *c, const char *given) {
    return fg_source_reopen(&c->info.data, c->info.tokenizer, given);
}
