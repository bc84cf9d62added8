/* safetensors.c — the safetensors writer and its strict, bounded reader (see safetensors.h).
 *
 * The reader parses the header with the project's strict JSON reader (tensor/json.h: RFC 8259,
 * valid UTF-8, no repeated key, bounded nesting, every value's byte offset kept) and then walks the
 * tree for the shape of a safetensors header: top object -> ("__metadata__" -> object of strings) |
 * (tensor -> object of "dtype": string, "shape": [ints], "data_offsets": [int, int]). A refusal of
 * the JSON reader is reworded for a header (what was expected, at which header byte, in which
 * object), so every message says what is wrong in the file's terms. The header is bounded (100 MB,
 * the Python library's limit) before anything is parsed; the parser is fuzzed.
 */
#include "tensor/safetensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tensor/json.h"
#include "tensor/utf8.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host (the format's data is little-endian)"
#endif

/* The Python library refuses headers above 100 MB; so do we (a corrupt length must not make us
 * allocate or scan gigabytes). */
#define ST_MAX_HEADER ((uint64_t)100000000)
#define ST_CHECKSUM_PREFIX "xxh64:"    /* data only (files of older writers) */
#define ST_CHECKSUM2_PREFIX "xxh64v2:" /* header content, then data */

static const struct {
    const char *name;
    size_t size;
} st_dtypes[FG_ST_DTYPE_COUNT] = {
    [FG_ST_F32] = {"F32", 4},   [FG_ST_F64] = {"F64", 8},         [FG_ST_I32] = {"I32", 4},
    [FG_ST_I64] = {"I64", 8},   [FG_ST_U8] = {"U8", 1},           [FG_ST_I8] = {"I8", 1},
    [FG_ST_I16] = {"I16", 2},   [FG_ST_U16] = {"U16", 2},         [FG_ST_U32] = {"U32", 4},
    [FG_ST_U64] = {"U64", 8},   [FG_ST_F16] = {"F16", 2},         [FG_ST_BF16] = {"BF16", 2},
    [FG_ST_BOOL] = {"BOOL", 1}, [FG_ST_F8_E4M3] = {"F8_E4M3", 1}, [FG_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *fg_st_dtype_name(fg_st_dtype dt) { return (dt >= 0 && dt < FG_ST_DTYPE_COUNT) ? st_dtypes[dt].name : "?"; }
size_t fg_st_dtype_size(fg_st_dtype dt) { return (dt >= 0 && dt < FG_ST_DTYPE_COUNT) ? st_dtypes[dt].size : 0; }
fg_st_dtype fg_st_from_dtype(fg_dtype dt) { return dt == FG_F64 ? FG_ST_F64 : dt == FG_BF16 ? FG_ST_BF16 : FG_ST_F32; }

/* numel * size with overflow checks; 0 on overflow (sets *ok = 0). */
static size_t array_bytes(int ndim, const int64_t *shape, size_t elem, int *ok) {
    uint64_t b = elem;
    *ok = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || __builtin_mul_overflow(b, (uint64_t)shape[i], &b) || b > (uint64_t)INT64_MAX) {
            *ok = 0;
            return 0;
        }
    }
    if (b > SIZE_MAX) {
        *ok = 0;
        return 0;
    }
    return (size_t)b;
}

/* ==============================================================================================
 * writer
 * ============================================================================================ */

typedef struct {
    char *name;
    fg_st_dtype dtype;
    int ndim;
    int64_t shape[FG_ST_MAX_DIMS];
    const void *data; /* borrowed, or == owned */
    void *owned;      /* a copy the writer frees, or NULL */
    size_t nbytes;
    size_t begin; /* offset in the data buffer, set by write */
} st_entry;

struct fg_st_writer {
    st_entry *e;
    int n, cap;
    char **mkey, **mval;
    int mn, mcap;
};

fg_st_writer *fg_st_writer_new(void) {
    fg_st_writer *w = calloc(1, sizeof *w);
    if (!w) fg_error(FG_ERR_OOM, "safetensors: out of memory for a writer");
    return w;
}

void fg_st_writer_free(fg_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        free(w->e[i].name);
        free(w->e[i].owned);
    }
    for (int i = 0; i < w->mn; i++) {
        free(w->mkey[i]);
        free(w->mval[i]);
    }
    free(w->e);
    free(w->mkey);
    free(w->mval);
    free(w);
}

/* Checks and appends an entry; `copy` decides whether data is copied now. */
static fg_status writer_add(fg_st_writer *w, const char *name, fg_st_dtype dt, int ndim, const int64_t *shape,
                            const void *data, int copy, void *take) {
    if (!w) return fg_error(FG_ERR_ARG, "safetensors: NULL writer");
    if (!name || !*name) return fg_error(FG_ERR_ARG, "safetensors: empty tensor name");
    if (!fg_utf8_valid(name)) return fg_error(FG_ERR_ARG, "safetensors: tensor name is not valid UTF-8");
    if (strcmp(name, "__metadata__") == 0)
        return fg_error(FG_ERR_ARG, "safetensors: the name '__metadata__' is reserved");
    if (dt < 0 || dt >= FG_ST_DTYPE_COUNT)
        return fg_error(FG_ERR_DTYPE, "safetensors: tensor '%s': unknown dtype %d", name, (int)dt);
    if (ndim < 0 || ndim > FG_ST_MAX_DIMS || (ndim > 0 && !shape))
        return fg_error(FG_ERR_ARG, "safetensors: tensor '%s': rank %d (0..%d supported)", name, ndim, FG_ST_MAX_DIMS);
    int ok;
    size_t nb = array_bytes(ndim, shape, st_dtypes[dt].size, &ok);
    if (!ok) {
        char sb[200];
        fg_dims_str(sb, sizeof sb, ndim, shape);
        return fg_error(FG_ERR_ARG, "safetensors: tensor '%s': bad shape %s", name, sb);
    }
    if (nb && !data) return fg_error(FG_ERR_ARG, "safetensors: tensor '%s': NULL data", name);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0) return fg_error(FG_ERR_ARG, "safetensors: tensor '%s' added twice", name);
    if (w->n == w->cap) {
        int nc = w->cap ? 2 * w->cap : 16;
        st_entry *ne = realloc(w->e, (size_t)nc * sizeof *ne);
        if (!ne) return fg_error(FG_ERR_OOM, "safetensors: out of memory");
        w->e = ne;
        w->cap = nc;
    }
    st_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name) return fg_error(FG_ERR_OOM, "safetensors: out of memory");
    e->dtype = dt;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->nbytes = nb;
    if (take) {
        e->owned = take;
        e->data = take;
    } else if (copy && nb) {
        e->owned = malloc(nb);
        if (!e->owned) {
            free(e->name);
            return fg_error(FG_ERR_OOM, "safetensors: out of memory copying '%s' (%zu bytes)", name, nb);
        }
        memcpy(e->owned, data, nb);
        e->data = e->owned;
    } else {
        e->data = data;
    }
    w->n++;
    return FG_OK;
}

fg_status fg_st_writer_add(fg_st_writer *w, const char *name, fg_st_dtype dt, int ndim, const int64_t *shape,
                           const void *data) {
    return writer_add(w, name, dt, ndim, shape, data, 0, NULL);
}

fg_status fg_st_writer_add_copy(fg_st_writer *w, const char *name, fg_st_dtype dt, int ndim, const int64_t *shape,
                                const void *data) {
    return writer_add(w, name, dt, ndim, shape, data, 1, NULL);
}

fg_status fg_st_writer_add_tensor(fg_st_writer *w, const char *name, const fg_tensor *t) {
    if (!t) return fg_error(FG_ERR_ARG, "safetensors: tensor '%s' is NULL", name ? name : "");
    fg_st_dtype dt = fg_st_from_dtype(t->dtype);
    if (t->device == FG_CPU && fg_is_contiguous(t))
        return writer_add(w, name, dt, t->ndim, t->shape, fg_data(t), 0, NULL);
    /* strided or on a device: gather it on the host now, in C order */
    size_t nb = fg_nbytes(t);
    void *host = malloc(nb ? nb : 1);
    if (!host) return fg_error(FG_ERR_OOM, "safetensors: out of memory copying '%s'", name ? name : "");
    fg_status st = fg_to_host(t, host);
    if (st == FG_OK) st = writer_add(w, name, dt, t->ndim, t->shape, host, 0, host);
    if (st != FG_OK) free(host);
    return st;
}

fg_status fg_st_writer_set_metadata(fg_st_writer *w, const char *key, const char *value) {
    if (!w || !key || !value) return fg_error(FG_ERR_ARG, "safetensors: NULL metadata argument");
    if (strcmp(key, FG_ST_CHECKSUM_KEY) == 0)
        return fg_error(FG_ERR_ARG, "safetensors: metadata key '%s' is reserved for the writer", FG_ST_CHECKSUM_KEY);
    if (!fg_utf8_valid(key) || !fg_utf8_valid(value))
        return fg_error(FG_ERR_ARG, "safetensors: metadata '%s' is not valid UTF-8", key);
    char *v = strdup(value);
    if (!v) return fg_error(FG_ERR_OOM, "safetensors: out of memory");
    for (int i = 0; i < w->mn; i++) {
        if (strcmp(w->mkey[i], key) == 0) {
            free(w->mval[i]);
            w->mval[i] = v;
            return FG_OK;
        }
    }
    if (w->mn == w->mcap) {
        int nc = w->mcap ? 2 * w->mcap : 8;
        char **nk = realloc(w->mkey, (size_t)nc * sizeof *nk);
        if (nk) w->mkey = nk;
        char **nv = nk ? realloc(w->mval, (size_t)nc * sizeof *nv) : NULL;
        if (nv) w->mval = nv;
        if (!nk || !nv) {
            free(v);
            return fg_error(FG_ERR_OOM, "safetensors: out of memory");
        }
        w->mcap = nc;
    }
    char *k = strdup(key);
    if (!k) {
        free(v);
        return fg_error(FG_ERR_OOM, "safetensors: out of memory");
    }
    w->mkey[w->mn] = k;
    w->mval[w->mn] = v;
    w->mn++;
    return FG_OK;
}

/* A growing byte string for the JSON header. */
typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}
static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }
static void sb_u64(sbuf *b, uint64_t v) {
    char t[24];
    int k = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sb_put(b, t, (size_t)k);
}
/* A JSON string literal: quotes, backslashes and control characters escaped; UTF-8 as is. */
static void sb_jstr(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char t[8];
        switch (*p) {
        case '"':
            sb_put(b, "\\\"", 2);
            break;
        case '\\':
            sb_put(b, "\\\\", 2);
            break;
        case '\n':
            sb_put(b, "\\n", 2);
            break;
        case '\t':
            sb_put(b, "\\t", 2);
            break;
        case '\r':
            sb_put(b, "\\r", 2);
            break;
        default:
            if (*p < 0x20) {
                snprintf(t, sizeof t, "\\u%04x", *p);
                sb_put(b, t, 6);
            } else {
                sb_put(b, (const char *)p, 1);
            }
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_str_ptr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
/* Entries compared by name. */
static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(st_entry *const *)a)->name, (*(st_entry *const *)b)->name);
}
/* Data layout order: larger elements first (so each tensor starts aligned to its element size
 * once the data buffer is 8-aligned), then by name. */
static int cmp_entry_layout(const void *a, const void *b) {
    const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
    size_t sx = st_dtypes[x->dtype].size, sy = st_dtypes[y->dtype].size;
    if (sx != sy) return sx > sy ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* ---- the checksum (format in safetensors.h) ---- */

static void hx_u64(fg_xxh64_state *h, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    fg_xxh64_update(h, b, 8);
}
static void hx_str(fg_xxh64_state *h, const char *s) {
    size_t n = strlen(s);
    hx_u64(h, n);
    fg_xxh64_update(h, s, n);
}
/* One tensor as the header digest sees it. */
static void hx_tensor(fg_xxh64_state *h, const char *name, fg_st_dtype dt, int ndim, const int64_t *shape,
                      uint64_t begin, uint64_t end) {
    hx_str(h, name);
    hx_str(h, st_dtypes[dt].name);
    hx_u64(h, (uint64_t)ndim);
    for (int d = 0; d < ndim; d++) hx_u64(h, (uint64_t)shape[d]);
    hx_u64(h, begin);
    hx_u64(h, end);
}

/* The header JSON of what fg_st_writer_write would write, and the entries in data layout order;
 * sets every entry's offset. `path` only names the file in messages. */
static fg_status st_build(fg_st_writer *w, const char *path, sbuf *js, st_entry ***layout_out) {
    fg_status rc = FG_OK;
    int n = w->n;
    st_entry **by_layout = malloc((size_t)(n ? n : 1) * sizeof *by_layout);
    st_entry **by_name = malloc((size_t)(n ? n : 1) * sizeof *by_name);
    /* metadata keys, plus the checksum, in key order */
    char **mk = malloc((size_t)(w->mn + 1) * sizeof *mk);
    if (!by_layout || !by_name || !mk) {
        rc = fg_error(FG_ERR_OOM, "safetensors: out of memory writing '%s'", path);
        goto done;
    }
    for (int i = 0; i < n; i++) by_layout[i] = by_name[i] = &w->e[i];
    qsort(by_layout, (size_t)n, sizeof *by_layout, cmp_entry_layout);
    qsort(by_name, (size_t)n, sizeof *by_name, cmp_entry_name);

    /* offsets and the digest of the data buffer, in layout order */
    fg_xxh64_state hs;
    fg_xxh64_init(&hs, 0);
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        by_layout[i]->begin = pos;
        pos += by_layout[i]->nbytes;
        fg_xxh64_update(&hs, by_layout[i]->data, by_layout[i]->nbytes);
    }
    const uint64_t data_sum = fg_xxh64_digest(&hs);

    int nm = 0;
    char ck[] = FG_ST_CHECKSUM_KEY;
    mk[nm++] = ck;
    for (int i = 0; i < w->mn; i++) mk[nm++] = w->mkey[i];
    qsort(mk, (size_t)nm, sizeof *mk, cmp_str_ptr);

    /* the digest of the header's content: metadata (without the checksum) and tensor table */
    fg_xxh64_init(&hs, 0);
    hx_u64(&hs, (uint64_t)w->mn);
    for (int i = 0; i < nm; i++) {
        if (mk[i] == ck) continue;
        for (int j = 0; j < w->mn; j++) {
            if (mk[i] != w->mkey[j]) continue;
            hx_str(&hs, w->mkey[j]);
            hx_str(&hs, w->mval[j]);
        }
    }
    hx_u64(&hs, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        const st_entry *e = by_name[i];
        hx_tensor(&hs, e->name, e->dtype, e->ndim, e->shape, e->begin, e->begin + e->nbytes);
    }
    char sum[64];
    snprintf(sum, sizeof sum, ST_CHECKSUM2_PREFIX "%016llx:%016llx", (unsigned long long)fg_xxh64_digest(&hs),
             (unsigned long long)data_sum);

    /* the header */
    sb_puts(js, "{\"__metadata__\":{");
    for (int i = 0; i < nm; i++) {
        const char *val = sum;
        for (int j = 0; j < w->mn; j++)
            if (mk[i] == w->mkey[j]) val = w->mval[j];
        if (i) sb_puts(js, ",");
        sb_jstr(js, mk[i]);
        sb_puts(js, ":");
        sb_jstr(js, val);
    }
    sb_puts(js, "}");
    for (int i = 0; i < n; i++) {
        const st_entry *e = by_name[i];
        sb_puts(js, ",");
        sb_jstr(js, e->name);
        sb_puts(js, ":{\"dtype\":\"");
        sb_puts(js, st_dtypes[e->dtype].name);
        sb_puts(js, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) {
            if (d) sb_puts(js, ",");
            sb_u64(js, (uint64_t)e->shape[d]);
        }
        sb_puts(js, "],\"data_offsets\":[");
        sb_u64(js, e->begin);
        sb_puts(js, ",");
        sb_u64(js, e->begin + e->nbytes);
        sb_puts(js, "]}");
    }
    sb_puts(js, "}");
    /* pad with spaces so the data starts at a multiple of 8 */
    while (!js->oom && js->n % 8) sb_put(js, " ", 1);
    if (js->oom) {
        rc = fg_error(FG_ERR_OOM, "safetensors: out of memory building the header of '%s'", path);
        goto done;
    }
    if (js->n > ST_MAX_HEADER) {
        rc = fg_error(FG_ERR_ARG, "safetensors: header of '%s' would be %zu bytes (limit %llu)", path, js->n,
                      (unsigned long long)ST_MAX_HEADER);
        goto done;
    }
done:
    free(by_name);
    free(mk);
    if (rc == FG_OK)
        *layout_out = by_layout;
    else
        free(by_layout);
    return rc;
}

fg_status fg_st_writer_check(fg_st_writer *w, const char *path) {
    if (!w) return fg_error(FG_ERR_ARG, "safetensors: NULL writer");
    if (!path || !*path) return fg_error(FG_ERR_ARG, "safetensors: empty file path");
    sbuf js = {0};
    st_entry **by_layout = NULL;
    fg_status rc = st_build(w, path, &js, &by_layout);
    free(by_layout);
    free(js.p);
    return rc;
}

fg_status fg_st_writer_write(fg_st_writer *w, const char *path) {
    if (!w) return fg_error(FG_ERR_ARG, "safetensors: NULL writer");
    if (!path || !*path) return fg_error(FG_ERR_ARG, "safetensors: empty file path");
    int n = w->n;
    sbuf js = {0};
    st_entry **by_layout = NULL;
    const void **parts = NULL;
    size_t *sizes = NULL;
    fg_status rc = st_build(w, path, &js, &by_layout);
    if (rc != FG_OK) goto done;
    parts = malloc((size_t)(n + 2) * sizeof *parts);
    sizes = malloc((size_t)(n + 2) * sizeof *sizes);
    if (!parts || !sizes) {
        rc = fg_error(FG_ERR_OOM, "safetensors: out of memory writing '%s'", path);
        goto done;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)js.n >> (8 * i));
    parts[0] = len8;
    sizes[0] = 8;
    parts[1] = js.p;
    sizes[1] = js.n;
    for (int i = 0; i < n; i++) {
        parts[2 + i] = by_layout[i]->data;
        sizes[2 + i] = by_layout[i]->nbytes;
    }
    rc = fg_write_file_atomic(path, parts, sizes, n + 2);
done:
    free(by_layout);
    free(parts);
    free(sizes);
    free(js.p);
    return rc;
}

/* The metadata of a writer and of a file are both n (key, value) pairs in two arrays; these look
 * them up (linearly: there are few, and a file's are searched before they are sorted). */
static const char *meta_find(char *const *keys, char *const *vals, int n, const char *key) {
    if (!key) return NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], key) == 0) return vals[i];
    return NULL;
}

static void meta_at(char *const *keys, char *const *vals, int n, int i, const char **key, const char **value) {
    int ok = i >= 0 && i < n;
    if (key) *key = ok ? keys[i] : NULL;
    if (value) *value = ok ? vals[i] : NULL;
}

const char *fg_st_writer_metadata(const fg_st_writer *w, const char *key) {
    return w ? meta_find(w->mkey, w->mval, w->mn, key) : NULL;
}

int fg_st_writer_metadata_count(const fg_st_writer *w) { return w ? w->mn : 0; }

void fg_st_writer_metadata_at(const fg_st_writer *w, int i, const char **key, const char **value) {
    meta_at(w ? w->mkey : NULL, w ? w->mval : NULL, w ? w->mn : 0, i, key, value);
}

/* ==============================================================================================
 * reader
 * ============================================================================================ */

struct fg_st_file {
    unsigned char *buf; /* the whole file */
    size_t n;
    char *label;    /* file name for messages */
    fg_st_array *a; /* sorted by name */
    int count, cap;
    char **mkey, **mval; /* sorted by key */
    int mcount, mcap;
    size_t data_start; /* offset of the data buffer in buf */
    fg_st_sum sum;     /* what the verified checksum covered */
};

void fg_st_close(fg_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->count; i++) free((char *)f->a[i].name);
    for (int i = 0; i < f->mcount; i++) {
        free(f->mkey[i]);
        free(f->mval[i]);
    }
    free(f->a);
    free(f->mkey);
    free(f->mval);
    free(f->buf);
    free(f->label);
    free(f);
}

static fg_status st_fail(const fg_st_file *f, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static fg_status st_fail(const fg_st_file *f, const char *fmt, ...) {
    char msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fg_error(FG_ERR_FORMAT, "%s: %s", f->label, msg);
}

/* "malformed header JSON: expected X at header byte K (found 'c')", for the byte at hdr[at]. */
static fg_status st_expected(const fg_st_file *f, const unsigned char *hdr, size_t hlen, size_t at, const char *what) {
    if (at >= hlen)
        return st_fail(f, "malformed header JSON: expected %s at header byte %zu (found the end of the header)", what,
                       at);
    unsigned ch = hdr[at];
    if (ch >= 0x20 && ch < 0x7f)
        return st_fail(f, "malformed header JSON: expected %s at header byte %zu (found '%c')", what, at, (char)ch);
    return st_fail(f, "malformed header JSON: expected %s at header byte %zu (found byte 0x%02x)", what, at, ch);
}

/* The header's JSON refused by tensor/json.h, in the words of a safetensors header: the depth and
 * the key of the open container tell the top object, __metadata__ and a tensor entry apart. */
static fg_status st_json_fault(const fg_st_file *f, const unsigned char *hdr, size_t hlen, const fg_json_error *e) {
    const int top = e->depth == 1, meta = e->depth == 2 && e->has_owner && !strcmp(e->owner, "__metadata__");
    const int entry = e->depth == 2 && e->has_owner && !meta;
    const size_t at = e->at;
    switch (e->fault) {
    case FG_JSON_FAULT_OOM:
        return fg_error(FG_ERR_OOM, "%s: out of memory parsing the header", f->label);
    case FG_JSON_FAULT_UNTERMINATED:
        return st_fail(f, "malformed header JSON: unterminated string starting at header byte %zu", at);
    case FG_JSON_FAULT_CONTROL:
        return st_fail(f, "malformed header JSON: control character 0x%02x in a string at header byte %zu",
                       at < hlen ? hdr[at] : 0u, at);
    case FG_JSON_FAULT_UTF8:
        return st_fail(f, "malformed header JSON: invalid UTF-8 at header byte %zu", at);
    case FG_JSON_FAULT_BAD_U:
        return st_fail(f, "malformed header JSON: bad \\u escape at header byte %zu", at);
    case FG_JSON_FAULT_SURROGATE: {
        unsigned cp = 0; /* the 4 hex digits after the \u (the JSON reader has checked them) */
        for (size_t k = at + 2; k < at + 6 && k < hlen; k++)
            cp = cp << 4 | (unsigned)(hdr[k] <= '9' ? hdr[k] - '0' : (hdr[k] | 0x20) - 'a' + 10);
        return st_fail(f, "malformed header JSON: unpaired surrogate \\u%04x at header byte %zu", cp, at);
    }
    case FG_JSON_FAULT_ESCAPE:
        return st_fail(f, "malformed header JSON: bad escape at header byte %zu", at);
    case FG_JSON_FAULT_VALUE:
    case FG_JSON_FAULT_BOM:
        return st_expected(f, hdr, hlen, at, e->depth == 0 ? "'{' (the header object)" : "a value");
    case FG_JSON_FAULT_KEY:
        return st_expected(f, hdr, hlen, at,
                           top    ? "a tensor name"
                           : meta ? "a metadata key"
                                  : "a key of a tensor entry");
    case FG_JSON_FAULT_COLON:
        return st_expected(f, hdr, hlen, at, "':'");
    case FG_JSON_FAULT_COMMA:
        return st_expected(f, hdr, hlen, at,
                           top                                           ? "',' or '}' in the header object"
                           : meta                                        ? "',' or '}' in __metadata__"
                           : entry                                       ? "',' or '}' in a tensor entry"
                           : e->depth == 3 && !strcmp(e->owner, "shape") ? "',' or ']' in a shape"
                           : e->close == ']'                             ? "',' or ']'"
                                                                         : "',' or '}'");
    case FG_JSON_FAULT_LEADING_ZERO:
        return st_fail(f, "malformed header JSON: number with a leading zero at header byte %zu", at);
    case FG_JSON_FAULT_DIGIT:
        return st_expected(f, hdr, hlen, at, "a digit");
    case FG_JSON_FAULT_TRAILING:
        return st_fail(f,
                       "unexpected data after the header object at header byte %zu (the header may only be "
                       "padded with spaces)",
                       at);
    case FG_JSON_FAULT_REPEATED_KEY:
        if (top && !strcmp(e->key, "__metadata__")) return st_fail(f, "key '__metadata__' appears twice");
        if (top) return st_fail(f, "tensor name '%s' appears twice", e->key);
        if (meta) return st_fail(f, "metadata key '%s' appears twice", e->key);
        if (entry) return st_fail(f, "tensor '%s': key '%s' appears twice", e->owner, e->key);
        return st_fail(f, "malformed header JSON: key '%s' appears twice in one object (header byte %zu)", e->key, at);
    default:
        return st_fail(f, "malformed header JSON: nesting or sizes beyond a header's at header byte %zu", at);
    }
}

/* Names, values and dtypes are C strings: a decoded string must hold no NUL. */
static fg_status st_no_nul(const fg_st_file *f, const char *s, uint32_t len, size_t at) {
    if (strlen(s) == len) return FG_OK;
    return st_fail(f, "\\u0000 in a header string (at or before header byte %zu) is not supported", at);
}

/* A non-negative integer up to INT64_MAX. */
static fg_status st_uint(const fg_st_file *f, const unsigned char *hdr, size_t hlen, const fg_json *v, const char *what,
                         int64_t *out) {
    if (v->kind != FG_JSON_NUMBER) return st_expected(f, hdr, hlen, v->at, what);
    if (v->str[0] == '-') return st_fail(f, "negative number for %s at header byte %zu", what, v->at);
    if (strpbrk(v->str, ".eE")) return st_fail(f, "%s must be an integer (header byte %zu)", what, v->at);
    if (!fg_json_int64(v, out)) return st_fail(f, "number too large for %s at header byte %zu", what, v->at);
    return FG_OK;
}

static fg_status meta_push(fg_st_file *f, const fg_json *k, const fg_json *v) {
    char *ks = strdup(k->key), *vs = strdup(v->str);
    if (!ks || !vs) {
        free(ks);
        free(vs);
        return fg_error(FG_ERR_OOM, "%s: out of memory parsing the header", f->label);
    }
    f->mkey[f->mcount] = ks;
    f->mval[f->mcount] = vs;
    f->mcount++;
    return FG_OK;
}

/* {"key": "value", ...} */
static fg_status st_metadata(fg_st_file *f, const unsigned char *hdr, size_t hlen, const fg_json *m) {
    if (m->kind != FG_JSON_OBJECT) return st_expected(f, hdr, hlen, m->at, "'{' (the __metadata__ object)");
    if (m->len && !(f->mkey = malloc(m->len * sizeof *f->mkey)))
        return fg_error(FG_ERR_OOM, "%s: out of memory parsing the header", f->label);
    if (m->len && !(f->mval = malloc(m->len * sizeof *f->mval)))
        return fg_error(FG_ERR_OOM, "%s: out of memory parsing the header", f->label);
    f->mcap = (int)m->len;
    for (uint32_t i = 0; i < m->len; i++) {
        const fg_json *v = &m->items[i];
        FG_TRY(st_no_nul(f, v->key, v->key_len, v->at));
        if (v->kind != FG_JSON_STRING)
            return st_fail(f, "metadata value for '%s' must be a string (header byte %zu)", v->key, v->at);
        FG_TRY(st_no_nul(f, v->str, v->len, v->at));
        FG_TRY(meta_push(f, v, v));
    }
    return FG_OK;
}

/* {"dtype": "F32", "shape": [..], "data_offsets": [b, e]} in any key order, each exactly once (the
 * JSON reader refuses a repeated key). */
static fg_status st_tensor(fg_st_file *f, const unsigned char *hdr, size_t hlen, const fg_json *e, fg_st_array *a,
                           size_t *begin, size_t *end) {
    const char *nm = a->name;
    int have_dt = 0, have_shape = 0, have_off = 0;
    if (e->kind != FG_JSON_OBJECT) {
        char what[96];
        snprintf(what, sizeof what, "'{' (the entry of tensor '%.40s')", nm);
        return st_expected(f, hdr, hlen, e->at, what);
    }
    if (e->len == 0) return st_fail(f, "tensor '%s': empty entry (needs dtype, shape, data_offsets)", nm);
    for (uint32_t k = 0; k < e->len; k++) {
        const fg_json *v = &e->items[k];
        if (strcmp(v->key, "dtype") == 0 && v->key_len == 5) {
            have_dt = 1;
            if (v->kind != FG_JSON_STRING) return st_expected(f, hdr, hlen, v->at, "a dtype string");
            FG_TRY(st_no_nul(f, v->str, v->len, v->at));
            int found = -1;
            for (int i = 0; i < FG_ST_DTYPE_COUNT; i++)
                if (fg_json_is(v, st_dtypes[i].name)) found = i;
            if (found < 0) return st_fail(f, "tensor '%s': unknown dtype '%.40s'", nm, v->str);
            a->dtype = (fg_st_dtype)found;
        } else if (strcmp(v->key, "shape") == 0 && v->key_len == 5) {
            have_shape = 1;
            if (v->kind != FG_JSON_ARRAY) return st_expected(f, hdr, hlen, v->at, "'[' (a shape)");
            for (uint32_t d = 0; d < v->len; d++) {
                int64_t x;
                FG_TRY(st_uint(f, hdr, hlen, &v->items[d], "a shape dimension", &x));
                if (d >= FG_ST_MAX_DIMS)
                    return st_fail(f, "tensor '%s': more than %d dimensions are not supported", nm, FG_ST_MAX_DIMS);
                a->shape[d] = x;
            }
            a->ndim = (int)v->len;
        } else if (strcmp(v->key, "data_offsets") == 0 && v->key_len == 12) {
            have_off = 1;
            int64_t b, en;
            if (v->kind != FG_JSON_ARRAY) return st_expected(f, hdr, hlen, v->at, "'[' (data_offsets)");
            if (v->len < 1) return st_expected(f, hdr, hlen, v->at + 1, "a data offset");
            FG_TRY(st_uint(f, hdr, hlen, &v->items[0], "a data offset", &b));
            if (v->len < 2) return st_fail(f, "tensor '%s': expected ',' (data_offsets has two numbers)", nm);
            FG_TRY(st_uint(f, hdr, hlen, &v->items[1], "a data offset", &en));
            if (v->len > 2)
                return st_fail(f, "tensor '%s': expected ']' (data_offsets has two numbers) at header byte %zu", nm,
                               v->items[2].at);
            *begin = (size_t)b;
            *end = (size_t)en;
        } else {
            FG_TRY(st_no_nul(f, v->key, v->key_len, v->at));
            return st_fail(f, "tensor '%s': unexpected key '%.40s' (expected dtype, shape, data_offsets)", nm, v->key);
        }
    }
    if (!have_dt || !have_shape || !have_off)
        return st_fail(f, "tensor '%s': entry lacks '%s'", nm,
                       !have_dt      ? "dtype"
                       : !have_shape ? "shape"
                                     : "data_offsets");
    return FG_OK;
}

typedef struct {
    size_t begin, end;
    int idx;
} st_range;

static int cmp_range(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}
static int cmp_array_name(const void *a, const void *b) {
    return strcmp(((const fg_st_array *)a)->name, ((const fg_st_array *)b)->name);
}
/* sort metadata key/value pairs together: sort an index */
typedef struct {
    char *k, *v;
} kv;
static int cmp_kv(const void *a, const void *b) { return strcmp(((const kv *)a)->k, ((const kv *)b)->k); }

/* Exactly 16 lowercase hex digits (as the writer writes them) into *v; 0 if not. */
static int hex16(const char *s, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 16; i++) {
        unsigned ch = (unsigned char)s[i];
        if (ch >= '0' && ch <= '9')
            x = x << 4 | (ch - '0');
        else if (ch >= 'a' && ch <= 'f')
            x = x << 4 | (ch - 'a' + 10);
        else
            return 0;
    }
    *v = x;
    return 1;
}

/* The header digest of a parsed file (tables sorted): the same sequence st_build hashes. */
static uint64_t header_digest(const fg_st_file *f) {
    fg_xxh64_state h;
    fg_xxh64_init(&h, 0);
    const int has_sum = fg_st_metadata(f, FG_ST_CHECKSUM_KEY) != NULL;
    hx_u64(&h, (uint64_t)(f->mcount - has_sum));
    for (int i = 0; i < f->mcount; i++) {
        if (strcmp(f->mkey[i], FG_ST_CHECKSUM_KEY) == 0) continue;
        hx_str(&h, f->mkey[i]);
        hx_str(&h, f->mval[i]);
    }
    hx_u64(&h, (uint64_t)f->count);
    const unsigned char *data0 = f->buf + f->data_start;
    for (int i = 0; i < f->count; i++) {
        const fg_st_array *a = &f->a[i];
        uint64_t begin = (uint64_t)((const unsigned char *)a->data - data0);
        hx_tensor(&h, a->name, a->dtype, a->ndim, a->shape, begin, begin + a->nbytes);
    }
    return fg_xxh64_digest(&h);
}

/* Parses and validates f->buf; on success fills f's tables. */
static fg_status st_validate(fg_st_file *f) {
    const unsigned char *b = f->buf;
    size_t n = f->n;
    if (n < 8)
        return st_fail(f,
                       "truncated (file has %zu bytes; a safetensors file starts with an 8-byte "
                       "header length)",
                       n);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)b[i] << (8 * i);
    if (hlen > ST_MAX_HEADER)
        return st_fail(f,
                       "header length %llu is implausible (limit %llu bytes): not a "
                       "safetensors file, or a corrupted one",
                       (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
    if (hlen > n - 8)
        return st_fail(f,
                       "truncated (header says %llu bytes of header, file has %zu after the "
                       "length)",
                       (unsigned long long)hlen, n - 8);
    size_t dstart = 8 + (size_t)hlen;
    size_t dsize = n - dstart;
    f->data_start = dstart;

    /* --- the JSON header (tensor/json.h), then its shape --- */
    const unsigned char *hdr = b + 8;
    size_t *begins = NULL, *ends = NULL;
    fg_json_error jerr;
    fg_json_doc *doc = NULL;
    fg_status st = fg_json_parse_ex((const char *)hdr, (size_t)hlen, f->label, &doc, &jerr);
    if (st != FG_OK) return st_json_fault(f, hdr, (size_t)hlen, &jerr);
    const fg_json *root = fg_json_root(doc);
    if (root->kind != FG_JSON_OBJECT) {
        st = st_expected(f, hdr, (size_t)hlen, root->at, "'{' (the header object)");
        goto fail;
    }
    const fg_json *meta = fg_json_get(root, "__metadata__");
    const int nt = (int)root->len - (meta != NULL);
    if (nt > 0) {
        f->a = calloc((size_t)nt, sizeof *f->a);
        begins = calloc((size_t)nt, sizeof *begins);
        ends = calloc((size_t)nt, sizeof *ends);
        if (!f->a || !begins || !ends) {
            st = fg_error(FG_ERR_OOM, "%s: out of memory parsing the header", f->label);
            goto fail;
        }
        f->cap = nt;
    }
    for (uint32_t i = 0; i < root->len; i++) {
        const fg_json *v = &root->items[i];
        if (v == meta) {
            if ((st = st_metadata(f, hdr, (size_t)hlen, v))) goto fail;
            continue;
        }
        if ((st = st_no_nul(f, v->key, v->key_len, v->at))) goto fail;
        fg_st_array *a = &f->a[f->count];
        if (!(a->name = strdup(v->key))) {
            st = fg_error(FG_ERR_OOM, "%s: out of memory parsing the header", f->label);
            goto fail;
        }
        f->count++; /* owned by f from here on, even if the entry is bad */
        if ((st = st_tensor(f, hdr, (size_t)hlen, v, a, &begins[f->count - 1], &ends[f->count - 1]))) goto fail;
    }
    fg_json_free(doc);
    doc = NULL;

    /* --- every tensor: sizes agree with shapes, ranges tile the data buffer --- */
    size_t max_end = 0;
    for (int i = 0; i < f->count; i++) {
        fg_st_array *a = &f->a[i];
        int ok;
        size_t need = array_bytes(a->ndim, a->shape, st_dtypes[a->dtype].size, &ok);
        char sb[200];
        fg_dims_str(sb, sizeof sb, a->ndim, a->shape);
        if (!ok) {
            st = st_fail(f, "tensor '%s': shape %s is too large", a->name, sb);
            goto fail;
        }
        if (ends[i] < begins[i]) {
            st = st_fail(f, "tensor '%s': data_offsets [%zu, %zu] end before they begin", a->name, begins[i], ends[i]);
            goto fail;
        }
        if (ends[i] - begins[i] != need) {
            st = st_fail(f,
                         "tensor '%s': shape %s of %s needs %zu bytes, but data_offsets [%zu, "
                         "%zu] hold %zu",
                         a->name, sb, st_dtypes[a->dtype].name, need, begins[i], ends[i], ends[i] - begins[i]);
            goto fail;
        }
        a->nbytes = need;
        if (ends[i] > max_end) max_end = ends[i];
    }
    if (max_end > dsize) {
        st = st_fail(f, "truncated (header says %zu bytes of data, file has %zu)", max_end, dsize);
        goto fail;
    }
    if (f->count > 0) {
        st_range *r = malloc((size_t)f->count * sizeof *r);
        if (!r) {
            st = fg_error(FG_ERR_OOM, "%s: out of memory", f->label);
            goto fail;
        }
        for (int i = 0; i < f->count; i++) r[i] = (st_range){begins[i], ends[i], i};
        qsort(r, (size_t)f->count, sizeof *r, cmp_range);
        size_t pos = 0;
        int prev = -1;
        for (int i = 0; i < f->count && !st; i++) {
            if (r[i].begin < pos)
                st = st_fail(f, "tensors '%s' and '%s' overlap in the data buffer", f->a[prev].name,
                             f->a[r[i].idx].name);
            else if (r[i].begin > pos)
                st = st_fail(f, "data bytes [%zu, %zu) belong to no tensor (a hole before '%s')", pos, r[i].begin,
                             f->a[r[i].idx].name);
            pos = r[i].end;
            prev = r[i].idx;
        }
        free(r);
        if (st) goto fail;
        max_end = pos;
    }
    if (max_end < dsize) {
        st = st_fail(f,
                     "the last %zu bytes of the file belong to no tensor (header says %zu bytes "
                     "of data, file has %zu)",
                     dsize - max_end, max_end, dsize);
        goto fail;
    }
    for (int i = 0; i < f->count; i++) f->a[i].data = b + dstart + begins[i];
    free(begins);
    free(ends);
    begins = ends = NULL;

    /* --- lookup order (the JSON reader has refused repeated names and keys) --- */
    if (f->count > 1) qsort(f->a, (size_t)f->count, sizeof *f->a, cmp_array_name);
    if (f->mcount > 1) {
        kv *m = malloc((size_t)f->mcount * sizeof *m);
        if (!m) return fg_error(FG_ERR_OOM, "%s: out of memory", f->label);
        for (int i = 0; i < f->mcount; i++) m[i] = (kv){f->mkey[i], f->mval[i]};
        qsort(m, (size_t)f->mcount, sizeof *m, cmp_kv);
        for (int i = 0; i < f->mcount; i++) {
            f->mkey[i] = m[i].k;
            f->mval[i] = m[i].v;
        }
        free(m);
    }

    /* --- the checksum, when the writer left one --- */
    const char *sum = fg_st_metadata(f, FG_ST_CHECKSUM_KEY);
    if (sum) {
        const size_t pl1 = strlen(ST_CHECKSUM_PREFIX), pl2 = strlen(ST_CHECKSUM2_PREFIX);
        uint64_t want_head = 0, want_data = 0;
        int v2 = strncmp(sum, ST_CHECKSUM2_PREFIX, pl2) == 0 && strlen(sum) == pl2 + 33 && sum[pl2 + 16] == ':' &&
                 hex16(sum + pl2, &want_head) && hex16(sum + pl2 + 17, &want_data);
        int v1 = !v2 && strncmp(sum, ST_CHECKSUM_PREFIX, pl1) == 0 && strlen(sum) == pl1 + 16 &&
                 hex16(sum + pl1, &want_data);
        if (!v1 && !v2)
            return st_fail(f,
                           "unrecognized checksum '%.60s' in the metadata (expected " ST_CHECKSUM2_PREFIX
                           "<16 hex digits>:<16 hex digits>, or " ST_CHECKSUM_PREFIX
                           "<16 hex digits> from older writers)",
                           sum);
        if (v2) {
            uint64_t got = header_digest(f);
            if (got != want_head)
                return st_fail(f,
                               "checksum mismatch in the header (file corrupted or edited): the "
                               "metadata and tensor table hash to xxh64 %016llx, the header records "
                               "%016llx",
                               (unsigned long long)got, (unsigned long long)want_head);
        }
        uint64_t got = fg_xxh64(b + dstart, dsize, 0);
        if (got != want_data)
            return st_fail(f,
                           "checksum mismatch in tensor data (file corrupted): the header "
                           "records xxh64 %016llx, the data hashes to %016llx",
                           (unsigned long long)want_data, (unsigned long long)got);
        f->sum = v2 ? FG_ST_SUM_ALL : FG_ST_SUM_DATA;
    }
    return FG_OK;
fail:
    fg_json_free(doc);
    free(begins);
    free(ends);
    return st;
}

/* Takes ownership of buf (malloc'ed, n bytes). */
static fg_st_file *st_open_owned(unsigned char *buf, size_t n, const char *label) {
    fg_st_file *f = calloc(1, sizeof *f);
    char *lab = strdup(label ? label : "safetensors");
    if (!f || !lab) {
        free(f);
        free(lab);
        free(buf);
        fg_error(FG_ERR_OOM, "safetensors: out of memory");
        return NULL;
    }
    f->buf = buf;
    f->n = n;
    f->label = lab;
    if (st_validate(f) != FG_OK) {
        fg_st_close(f);
        return NULL;
    }
    return f;
}

fg_st_file *fg_st_load(const char *path) {
    void *buf;
    size_t n;
    if (!path || !*path) {
        fg_error(FG_ERR_ARG, "safetensors: empty file path");
        return NULL;
    }
    /* max_bytes 0: regular files only, bounded by their size (see fg_read_file). */
    if (fg_read_file(path, 0, &buf, &n) != FG_OK) return NULL;
    return st_open_owned(buf, n, path);
}

fg_st_file *fg_st_parse(const void *buf, size_t n, const char *label) {
    if (!buf && n) {
        fg_error(FG_ERR_ARG, "safetensors: NULL buffer");
        return NULL;
    }
    unsigned char *copy = malloc(n ? n : 1);
    if (!copy) {
        fg_error(FG_ERR_OOM, "safetensors: out of memory for %zu bytes", n);
        return NULL;
    }
    if (n) memcpy(copy, buf, n);
    return st_open_owned(copy, n, label);
}

int fg_st_count(const fg_st_file *f) { return f ? f->count : 0; }

const fg_st_array *fg_st_at(const fg_st_file *f, int i) { return (f && i >= 0 && i < f->count) ? &f->a[i] : NULL; }

const fg_st_array *fg_st_find(const fg_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    int lo = 0, hi = f->count - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(f->a[mid].name, name);
        if (c == 0) return &f->a[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

const char *fg_st_metadata(const fg_st_file *f, const char *key) {
    return f ? meta_find(f->mkey, f->mval, f->mcount, key) : NULL;
}

int fg_st_metadata_count(const fg_st_file *f) { return f ? f->mcount : 0; }

int fg_st_peek_metadata(const char *path, const char *key, char *out, size_t cap) {
    int fd = -1, yes = 0;
    int64_t size = 0;
    unsigned char len8[8];
    char *h = NULL;
    fg_json_doc *doc = NULL;
    if (fg_open_read(path, 0, &fd, &size) != FG_OK || size < 8 || pread(fd, len8, 8, 0) != 8) goto done;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
    if (hl > ST_MAX_HEADER || hl > (uint64_t)size - 8 || !(h = malloc((size_t)hl + 1)) ||
        pread(fd, h, (size_t)hl, 8) != (ssize_t)hl)
        goto done;
    if (fg_json_parse(h, (size_t)hl, path, &doc) != FG_OK) goto done;
    const fg_json *v = fg_json_get(fg_json_get(fg_json_root(doc), "__metadata__"), key);
    if (v && v->kind == FG_JSON_STRING && strlen(v->str) == v->len && (!out || v->len < cap)) {
        if (out) memcpy(out, v->str, (size_t)v->len + 1);
        yes = 1;
    }
done:
    fg_json_free(doc);
    free(h);
    if (fd >= 0) close(fd);
    fg_clear_error();
    return yes;
}

fg_st_sum fg_st_checksum_coverage(const fg_st_file *f) { return f ? f->sum : FG_ST_SUM_NONE; }

void fg_st_metadata_at(const fg_st_file *f, int i, const char **key, const char **value) {
    meta_at(f ? f->mkey : NULL, f ? f->mval : NULL, f ? f->mcount : 0, i, key, value);
}

/* The array, checked against an expected dtype and shape; NULL with an error. */
static const fg_st_array *find_checked(const fg_st_file *f, const char *name, fg_st_dtype dt, int ndim,
                                       const int64_t *shape) {
    if (!f || !name) {
        fg_error(FG_ERR_ARG, "safetensors: NULL file or name");
        return NULL;
    }
    const fg_st_array *a = fg_st_find(f, name);
    if (!a) {
        fg_error(FG_ERR_ARG, "%s: no tensor named '%s'", f->label, name);
        return NULL;
    }
    int same_shape = a->ndim == ndim;
    for (int i = 0; same_shape && i < ndim; i++) same_shape = a->shape[i] == shape[i];
    if (a->dtype != dt || !same_shape) {
        char have[200], want[200];
        fg_dims_str(have, sizeof have, a->ndim, a->shape);
        if (ndim >= 0 && ndim <= FG_ST_MAX_DIMS && (shape || ndim == 0))
            fg_dims_str(want, sizeof want, ndim, shape);
        else
            snprintf(want, sizeof want, "(rank %d)", ndim);
        fg_error(a->dtype != dt ? FG_ERR_DTYPE : FG_ERR_SHAPE, "%s: tensor '%s' is %s %s in the file, expected %s %s",
                 f->label, name, st_dtypes[a->dtype].name, have, fg_st_dtype_name(dt), want);
        return NULL;
    }
    return a;
}

fg_status fg_st_read(const fg_st_file *f, const char *name, fg_st_dtype dt, int ndim, const int64_t *shape, void *dst) {
    if (ndim < 0 || ndim > FG_ST_MAX_DIMS || (ndim > 0 && !shape))
        return fg_error(FG_ERR_ARG, "safetensors: bad expected rank %d for '%s'", ndim, name ? name : "");
    const fg_st_array *a = find_checked(f, name, dt, ndim, shape);
    if (!a) return fg_last_status();
    if (a->nbytes && !dst) return fg_error(FG_ERR_ARG, "safetensors: NULL destination");
    if (a->nbytes) memcpy(dst, a->data, a->nbytes);
    return FG_OK;
}

fg_tensor *fg_st_tensor(const fg_st_file *f, const char *name) {
    if (!f || !name) {
        fg_error(FG_ERR_ARG, "safetensors: NULL file or name");
        return NULL;
    }
    const fg_st_array *a = fg_st_find(f, name);
    if (!a) {
        fg_error(FG_ERR_ARG, "%s: no tensor named '%s'", f->label, name);
        return NULL;
    }
    if (a->dtype != FG_ST_F32 && a->dtype != FG_ST_F64 && a->dtype != FG_ST_BF16) {
        fg_error(FG_ERR_DTYPE,
                 "%s: tensor '%s' is %s; only F32, F64 and BF16 convert to a tensor "
                 "(read it raw with fg_st_read)",
                 f->label, name, st_dtypes[a->dtype].name);
        return NULL;
    }
    if (a->ndim > FG_MAX_DIMS) {
        fg_error(FG_ERR_SHAPE, "%s: tensor '%s' has rank %d (tensors have at most %d)", f->label, name, a->ndim,
                 FG_MAX_DIMS);
        return NULL;
    }
    const fg_dtype dt = a->dtype == FG_ST_F64 ? FG_F64 : a->dtype == FG_ST_BF16 ? FG_BF16 : FG_F32;
    fg_tensor *t = fg_empty(dt, FG_CPU, a->ndim, a->shape);
    if (t && a->nbytes) memcpy(fg_data(t), a->data, a->nbytes);
    return t;
}

fg_status fg_st_read_into(const fg_st_file *f, const char *name, fg_tensor *dst) {
    if (!dst) return fg_error(FG_ERR_ARG, "safetensors: NULL destination tensor");
    const fg_st_array *a = find_checked(f, name, fg_st_from_dtype(dst->dtype), dst->ndim, dst->shape);
    if (!a) return fg_last_status();
    /* A host tensor over the file's bytes (copied first if they are not aligned for the dtype,
     * which can happen in files from other writers), then an ordinary strided copy. */
    size_t es = st_dtypes[a->dtype].size;
    void *tmp = NULL;
    void *src = (void *)a->data;
    if ((uintptr_t)src % es != 0 || (a->nbytes == 0)) {
        tmp = malloc(a->nbytes ? a->nbytes : es);
        if (!tmp) return fg_error(FG_ERR_OOM, "safetensors: out of memory reading '%s'", name);
        if (a->nbytes) memcpy(tmp, a->data, a->nbytes);
        src = tmp;
    }
    fg_status st;
    fg_tensor *blob = fg_from_blob(dst->dtype, a->ndim, a->shape, src);
    if (!blob) {
        st = fg_last_status();
    } else if (dst->device == FG_CPU) {
        st = fg_copy_into(dst, blob);
    } else {
        fg_tensor *dev = fg_to(blob, dst->device, dst->dtype);
        st = dev ? fg_copy_into(dst, dev) : fg_last_status();
        fg_release(dev);
    }
    fg_release(blob);
    free(tmp);
    return st;
}
