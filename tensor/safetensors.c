/* safetensors.c — the safetensors writer and its strict, bounded reader (see safetensors.h).
 *
 * The reader's JSON parser knows the shape of a safetensors header, so it needs no general value
 * type and no recursion: top object -> ("__metadata__" -> object of strings) | (tensor -> object of
 * "dtype": string, "shape": [ints], "data_offsets": [int, int]). Nesting is at most 3 by
 * construction; anything else is an error that says what was expected and at which header byte.
 * Every read goes through a cursor checked against the end of the header (the parser is fuzzed).
 *
 * Why a parser of its own rather than a JSON library: none of Debian's keeps every strictness this
 * reader has. Each was run, with the thinnest check layer that gives the header its shape, over
 * the fuzz corpus, the malformed-header table of tests/test_safetensors.c and probes of exactly
 * these points (bench/json_libs/compare.c; results under bench/results/json_libs_*):
 *   - json-c: a repeated key silently replaces the earlier value, leaving nothing a check could
 *     find; integers past INT64_MAX are clamped without an error (99999999999999999999 becomes
 *     18446744073709551615, json_object_get_int64 then gives INT64_MAX with errno 0); and even with
 *     JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8 it passes lone surrogates, overlong UTF-8,
 *     raw control characters in strings, \u0000 in a key and single-quoted keys.
 *   - cJSON: numbers are doubles, so 9007199254740993 reads as 9007199254740992 (a shape would
 *     change without a word, and INT64_MAX cannot be told from 2^63) and 2.0, 1e3 and 08 pass for
 *     integers; it does not validate UTF-8 and passes raw control characters, \u0000 (cutting the
 *     C string short) and a byte-order mark.
 *     (It keeps a repeated key as a second child, so that one a check can catch.)
 *   - jansson keeps the most: JSON_REJECT_DUPLICATES refuses repeated keys, integers are exact to
 *     INT64_MAX ("too big integer" past it), strings and UTF-8 are strict. It still reads "-0" as
 *     0 (a negative number passes); its refusals are its own sentences and positions, not the
 *     messages this reader gives and its tests require ("expected ':' at header byte 4", "unpaired
 *     surrogate \ud800", "number too large for a shape dimension"); and it builds the whole
 *     document before anything can be checked, so a hostile header of the format's 100 MB costs
 *     memory and time in proportion, where this parser stops at the first byte that cannot belong
 *     to a safetensors header. It is slower on ordinary headers too.
 */
#include "tensor/safetensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/fileio.h"
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

/* A cursor over the JSON header. */
typedef struct {
    const unsigned char *p, *start, *end;
    fg_st_file *f;
} jcur;

static void j_ws(jcur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

/* "expected X at header byte K (found 'c')" */
static fg_status j_expected(jcur *c, const char *what) {
    size_t at = (size_t)(c->p - c->start);
    if (c->p >= c->end)
        return st_fail(c->f,
                       "malformed header JSON: expected %s at header byte %zu (found the end "
                       "of the header)",
                       what, at);
    unsigned ch = *c->p;
    if (ch >= 0x20 && ch < 0x7f)
        return st_fail(c->f, "malformed header JSON: expected %s at header byte %zu (found '%c')", what, at, (char)ch);
    return st_fail(c->f,
                   "malformed header JSON: expected %s at header byte %zu (found byte "
                   "0x%02x)",
                   what, at, ch);
}

static int j_char(jcur *c, char ch) {
    j_ws(c);
    if (c->p < c->end && *c->p == (unsigned char)ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int hexval(unsigned ch) {
    if (ch >= '0' && ch <= '9') return (int)(ch - '0');
    if (ch >= 'a' && ch <= 'f') return (int)(ch - 'a' + 10);
    if (ch >= 'A' && ch <= 'F') return (int)(ch - 'A' + 10);
    return -1;
}

/* 4 hex digits after "\u" at p (bounded by end); -1 if not. */
static long hex4(const unsigned char *p, const unsigned char *end) {
    if (end - p < 4) return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* A JSON string; *out is a new NUL-terminated UTF-8 copy (caller frees). Strict: no raw control
 * characters, only JSON's escapes, surrogates only in valid \uD8xx\uDCxx pairs, valid UTF-8, and
 * no NUL (names and values are C strings). */
static fg_status j_string(jcur *c, const char *what, char **out) {
    *out = NULL;
    j_ws(c);
    if (c->p >= c->end || *c->p != '"') return j_expected(c, what);
    const unsigned char *s = ++c->p;
    /* pass 1: find the closing quote (a backslash always escapes the next byte) */
    const unsigned char *q = s;
    while (q < c->end && *q != '"') {
        if (*q == '\\' && c->end - q < 2)
            q = c->end; /* a backslash as the last header byte */
        else
            q += (*q == '\\') ? 2 : 1;
    }
    if (q >= c->end) {
        return st_fail(c->f,
                       "malformed header JSON: unterminated string starting at header byte "
                       "%zu",
                       (size_t)(s - 1 - c->start));
    }
    /* pass 2: decode; the result is never longer than the literal */
    char *o = malloc((size_t)(q - s) + 1);
    if (!o) return fg_error(FG_ERR_OOM, "%s: out of memory parsing the header", c->f->label);
    size_t k = 0;
    const unsigned char *p = s;
    while (p < q) {
        size_t at = (size_t)(p - c->start);
        unsigned ch = *p;
        if (ch < 0x20) {
            free(o);
            return st_fail(c->f,
                           "malformed header JSON: control character 0x%02x in a string at "
                           "header byte %zu",
                           ch, at);
        }
        if (ch == '\\') {
            unsigned e = p[1]; /* p + 1 < q: pass 1 never stops inside an escape */
            p += 2;
            unsigned long cp;
            switch (e) {
            case '"':
                cp = '"';
                break;
            case '\\':
                cp = '\\';
                break;
            case '/':
                cp = '/';
                break;
            case 'b':
                cp = '\b';
                break;
            case 'f':
                cp = '\f';
                break;
            case 'n':
                cp = '\n';
                break;
            case 'r':
                cp = '\r';
                break;
            case 't':
                cp = '\t';
                break;
            case 'u': {
                long u = hex4(p, q);
                if (u < 0) {
                    free(o);
                    return st_fail(c->f, "malformed header JSON: bad \\u escape at header byte %zu", at);
                }
                p += 4;
                cp = (unsigned long)u;
                if (cp >= 0xD800 && cp <= 0xDBFF) { /* high surrogate: a low one must follow */
                    long lo = (q - p >= 6 && p[0] == '\\' && p[1] == 'u') ? hex4(p + 2, q) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        free(o);
                        return st_fail(c->f,
                                       "malformed header JSON: unpaired surrogate \\u%04lx "
                                       "at header byte %zu",
                                       cp, at);
                    }
                    p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned long)lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    free(o);
                    return st_fail(c->f,
                                   "malformed header JSON: unpaired surrogate \\u%04lx at "
                                   "header byte %zu",
                                   cp, at);
                } else if (cp == 0) {
                    free(o);
                    return st_fail(c->f,
                                   "\\u0000 in a header string (at byte %zu) is not "
                                   "supported",
                                   at);
                }
                break;
            }
            default:
                free(o);
                return st_fail(c->f, "malformed header JSON: bad escape at header byte %zu", at);
            }
            /* UTF-8 encode cp */
            if (cp < 0x80) {
                o[k++] = (char)cp;
            } else if (cp < 0x800) {
                o[k++] = (char)(0xC0 | (cp >> 6));
                o[k++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                o[k++] = (char)(0xE0 | (cp >> 12));
                o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                o[k++] = (char)(0x80 | (cp & 0x3F));
            } else {
                o[k++] = (char)(0xF0 | (cp >> 18));
                o[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                o[k++] = (char)(0x80 | (cp & 0x3F));
            }
        } else {
            size_t len = fg_utf8_seq(p, (size_t)(q - p));
            if (!len) {
                free(o);
                return st_fail(c->f, "malformed header JSON: invalid UTF-8 at header byte %zu", at);
            }
            memcpy(o + k, p, len);
            k += len;
            p += len;
        }
    }
    o[k] = '\0';
    c->p = q + 1;
    *out = o;
    return FG_OK;
}

/* A non-negative JSON integer up to INT64_MAX (JSON syntax: no leading zeros). */
static fg_status j_uint(jcur *c, const char *what, int64_t *v) {
    j_ws(c);
    if (c->p < c->end && *c->p == '-')
        return st_fail(c->f, "negative number for %s at header byte %zu", what, (size_t)(c->p - c->start));
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return j_expected(c, what);
    const unsigned char *s = c->p;
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        unsigned d = (unsigned)(*c->p - '0');
        if (x > ((uint64_t)INT64_MAX - d) / 10)
            return st_fail(c->f, "number too large for %s at header byte %zu", what, (size_t)(s - c->start));
        x = x * 10 + d;
        c->p++;
    }
    if (*s == '0' && c->p - s > 1)
        return st_fail(c->f, "malformed header JSON: number with a leading zero at header byte %zu",
                       (size_t)(s - c->start));
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E'))
        return st_fail(c->f, "%s must be an integer (header byte %zu)", what, (size_t)(s - c->start));
    *v = (int64_t)x;
    return FG_OK;
}

static fg_status meta_push(fg_st_file *f, char *k, char *v) {
    if (f->mcount == f->mcap) {
        int nc = f->mcap ? 2 * f->mcap : 8;
        char **nk = realloc(f->mkey, (size_t)nc * sizeof *nk);
        if (nk) f->mkey = nk;
        char **nv = nk ? realloc(f->mval, (size_t)nc * sizeof *nv) : NULL;
        if (nv) f->mval = nv;
        if (!nk || !nv) {
            free(k);
            free(v);
            return fg_error(FG_ERR_OOM, "%s: out of memory parsing the header", f->label);
        }
        f->mcap = nc;
    }
    f->mkey[f->mcount] = k;
    f->mval[f->mcount] = v;
    f->mcount++;
    return FG_OK;
}

/* {"key": "value", ...} */
static fg_status j_metadata(jcur *c) {
    if (!j_char(c, '{')) return j_expected(c, "'{' (the __metadata__ object)");
    if (j_char(c, '}')) return FG_OK;
    for (;;) {
        char *k, *v;
        fg_status st = j_string(c, "a metadata key", &k);
        if (st) return st;
        if (!j_char(c, ':')) {
            free(k);
            return j_expected(c, "':'");
        }
        j_ws(c);
        if (c->p < c->end && *c->p != '"') {
            st = st_fail(c->f, "metadata value for '%s' must be a string (header byte %zu)", k,
                         (size_t)(c->p - c->start));
            free(k);
            return st;
        }
        st = j_string(c, "a metadata value", &v);
        if (st) {
            free(k);
            return st;
        }
        st = meta_push(c->f, k, v);
        if (st) return st;
        if (j_char(c, ',')) continue;
        if (j_char(c, '}')) return FG_OK;
        return j_expected(c, "',' or '}' in __metadata__");
    }
}

/* {"dtype": "F32", "shape": [..], "data_offsets": [b, e]} in any key order, each exactly once. */
static fg_status j_tensor(jcur *c, fg_st_array *a, size_t *begin, size_t *end) {
    const char *nm = a->name;
    int have_dt = 0, have_shape = 0, have_off = 0;
    if (!j_char(c, '{')) {
        char what[96];
        snprintf(what, sizeof what, "'{' (the entry of tensor '%.40s')", nm);
        return j_expected(c, what);
    }
    if (j_char(c, '}'))
        return st_fail(c->f,
                       "tensor '%s': empty entry (needs dtype, shape, "
                       "data_offsets)",
                       nm);
    for (;;) {
        char *key;
        fg_status st = j_string(c, "a key of a tensor entry", &key);
        if (st) return st;
        if (!j_char(c, ':')) {
            free(key);
            return j_expected(c, "':'");
        }
        if (strcmp(key, "dtype") == 0) {
            free(key);
            if (have_dt++) return st_fail(c->f, "tensor '%s': key 'dtype' appears twice", nm);
            char *d;
            st = j_string(c, "a dtype string", &d);
            if (st) return st;
            int found = -1;
            for (int i = 0; i < FG_ST_DTYPE_COUNT; i++)
                if (strcmp(d, st_dtypes[i].name) == 0) found = i;
            if (found < 0) {
                st = st_fail(c->f, "tensor '%s': unknown dtype '%.40s'", nm, d);
                free(d);
                return st;
            }
            free(d);
            a->dtype = (fg_st_dtype)found;
        } else if (strcmp(key, "shape") == 0) {
            free(key);
            if (have_shape++) return st_fail(c->f, "tensor '%s': key 'shape' appears twice", nm);
            if (!j_char(c, '[')) return j_expected(c, "'[' (a shape)");
            int nd = 0;
            if (!j_char(c, ']')) {
                for (;;) {
                    int64_t d;
                    st = j_uint(c, "a shape dimension", &d);
                    if (st) return st;
                    if (nd >= FG_ST_MAX_DIMS)
                        return st_fail(c->f,
                                       "tensor '%s': more than %d dimensions are not "
                                       "supported",
                                       nm, FG_ST_MAX_DIMS);
                    a->shape[nd++] = d;
                    if (j_char(c, ',')) continue;
                    if (j_char(c, ']')) break;
                    return j_expected(c, "',' or ']' in a shape");
                }
            }
            a->ndim = nd;
        } else if (strcmp(key, "data_offsets") == 0) {
            free(key);
            if (have_off++) return st_fail(c->f, "tensor '%s': key 'data_offsets' appears twice", nm);
            int64_t b, e;
            if (!j_char(c, '[')) return j_expected(c, "'[' (data_offsets)");
            if ((st = j_uint(c, "a data offset", &b))) return st;
            if (!j_char(c, ',')) return j_expected(c, "',' (data_offsets has two numbers)");
            if ((st = j_uint(c, "a data offset", &e))) return st;
            if (!j_char(c, ']')) return j_expected(c, "']' (data_offsets has two numbers)");
            *begin = (size_t)b;
            *end = (size_t)e;
        } else {
            st = st_fail(c->f,
                         "tensor '%s': unexpected key '%.40s' (expected dtype, shape, "
                         "data_offsets)",
                         nm, key);
            free(key);
            return st;
        }
        if (j_char(c, ',')) continue;
        if (j_char(c, '}')) break;
        return j_expected(c, "',' or '}' in a tensor entry");
    }
    if (!have_dt || !have_shape || !have_off)
        return st_fail(c->f, "tensor '%s': entry lacks '%s'", nm,
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

    /* --- the JSON header --- */
    jcur c = {b + 8, b + 8, b + dstart, f};
    size_t *begins = NULL, *ends = NULL;
    fg_status st = FG_OK;
    int seen_meta = 0;
    if (!j_char(&c, '{')) return j_expected(&c, "'{' (the header object)");
    if (!j_char(&c, '}')) {
        for (;;) {
            char *key;
            st = j_string(&c, "a tensor name", &key);
            if (st) goto fail;
            if (!j_char(&c, ':')) {
                free(key);
                st = j_expected(&c, "':'");
                goto fail;
            }
            if (strcmp(key, "__metadata__") == 0) {
                free(key);
                if (seen_meta++) {
                    st = st_fail(f, "key '__metadata__' appears twice");
                    goto fail;
                }
                if ((st = j_metadata(&c))) goto fail;
            } else {
                if (f->count == f->cap) {
                    int nc = f->cap ? 2 * f->cap : 16;
                    fg_st_array *na = realloc(f->a, (size_t)nc * sizeof *na);
                    size_t *nb = na ? realloc(begins, (size_t)nc * sizeof *nb) : NULL;
                    if (na) f->a = na;
                    if (nb) begins = nb;
                    size_t *ne = nb ? realloc(ends, (size_t)nc * sizeof *ne) : NULL;
                    if (ne) ends = ne;
                    if (!na || !nb || !ne) {
                        free(key);
                        st = fg_error(FG_ERR_OOM, "%s: out of memory parsing the header", f->label);
                        goto fail;
                    }
                    f->cap = nc;
                }
                fg_st_array *a = &f->a[f->count];
                memset(a, 0, sizeof *a);
                a->name = key;
                begins[f->count] = ends[f->count] = 0;
                f->count++; /* owned by f from here on, even if the entry is bad */
                st = j_tensor(&c, a, &begins[f->count - 1], &ends[f->count - 1]);
                if (st) goto fail;
            }
            if (j_char(&c, ',')) continue;
            if (j_char(&c, '}')) break;
            st = j_expected(&c, "',' or '}' in the header object");
            goto fail;
        }
    }
    j_ws(&c);
    if (c.p < c.end) {
        st = st_fail(f,
                     "unexpected data after the header object at header byte %zu (the header "
                     "may only be padded with spaces)",
                     (size_t)(c.p - c.start));
        goto fail;
    }

    /* --- names must be unique (checked first: a repeated entry would also overlap itself) --- */
    if (f->count > 1) {
        const char **names = malloc((size_t)f->count * sizeof *names);
        if (!names) {
            st = fg_error(FG_ERR_OOM, "%s: out of memory", f->label);
            goto fail;
        }
        for (int i = 0; i < f->count; i++) names[i] = f->a[i].name;
        qsort(names, (size_t)f->count, sizeof *names, cmp_str_ptr);
        for (int i = 1; i < f->count && !st; i++)
            if (strcmp(names[i - 1], names[i]) == 0) st = st_fail(f, "tensor name '%s' appears twice", names[i]);
        free(names);
        if (st) goto fail;
    }

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

    /* --- lookup order; metadata keys must be unique --- */
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
        for (int i = 1; i < f->mcount; i++)
            if (strcmp(f->mkey[i - 1], f->mkey[i]) == 0)
                return st_fail(f, "metadata key '%s' appears twice", f->mkey[i]);
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
