/* json.c — the strict JSON reader (see json.h).
 *
 * One pass of recursive descent, bounded by FG_JSON_MAX_DEPTH. The elements of the container being
 * read sit on one scratch stack; when the container closes they are copied into the document's
 * arena as one contiguous array, so a finished value never moves. Strings are decoded into the
 * arena after a first scan has found their end (their decoded form is never longer than their
 * text). A closed object's keys are checked for repeats: pairwise when it is small, else by sorting
 * an index.
 */
#include "tensor/json.h"

#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/utf8.h"

/* ---- the arena: chunks that are never moved or freed before the document ---- */
typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} chunk;

struct fg_json_doc {
    chunk *chunks;
    fg_json root;
};

enum { CHUNK_BYTES = 1 << 20 };

static void *arena_alloc(fg_json_doc *d, size_t n) {
    n = (n + 15) & ~(size_t)15;
    chunk *c = d->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_BYTES / 4 ? n : CHUNK_BYTES;
        chunk *nc = malloc(sizeof *nc + cap);
        if (!nc) return NULL;
        nc->used = 0;
        nc->cap = cap;
        if (c && cap == n) { /* a large block goes behind the current chunk, which stays in use */
            nc->next = c->next;
            c->next = nc;
            nc->used = n;
            return nc->data;
        }
        nc->next = c;
        d->chunks = c = nc;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

/* ---- the parser ---- */
typedef struct {
    const char *text, *p, *end, *what;
    fg_json_doc *doc;
    fg_json *stack; /* elements of the open containers */
    size_t sn, scap;
    fg_status st;
    int depth;                      /* containers open around p */
    const char *owner, *next_owner; /* the key of the innermost open container; of the next one */
    fg_json_error *err;             /* NULL when the caller wants the message only */
} parser;

static void copy_shown(char *dst, size_t cap, const char *src) { snprintf(dst, cap, "%s", src); }

static fg_status fail(parser *ps, fg_json_fault fault, const char *at, const char *fmt, const char *arg) {
    if (ps->st != FG_OK) return ps->st;
    if (ps->err) {
        fg_json_error *e = ps->err;
        e->fault = fault;
        e->at = (size_t)(at - ps->text);
        e->depth = ps->depth;
        e->has_owner = ps->owner != NULL;
        copy_shown(e->owner, sizeof e->owner, ps->owner ? ps->owner : "");
    }
    size_t line = 1, col = 1;
    for (const char *q = ps->text; q < at; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    char why[160];
    snprintf(why, sizeof why, fmt, arg ? arg : "");
    ps->st = fg_error(FG_ERR_FORMAT, "%s: %s at byte %zu (line %zu, column %zu)", ps->what, why,
                      (size_t)(at - ps->text), line, col);
    return ps->st;
}

static fg_status oom(parser *ps) {
    if (ps->st == FG_OK) {
        ps->st = fg_error(FG_ERR_OOM, "%s: out of memory while reading it", ps->what);
        if (ps->err) ps->err->fault = FG_JSON_FAULT_OOM;
    }
    return ps->st;
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static int hex4(const char *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        unsigned d = h >= '0' && h <= '9' ? (unsigned)(h - '0') : h >= 'a' && h <= 'f' ? (unsigned)(h - 'a' + 10)
                   : h >= 'A' && h <= 'F' ? (unsigned)(h - 'A' + 10) : 16;
        if (d == 16) return 0;
        *v = *v * 16 + d;
    }
    return 1;
}

static size_t put_utf8(unsigned char *o, unsigned cp) {
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    if (cp < 0x800) return o[0] = (unsigned char)(0xc0 | cp >> 6), o[1] = (unsigned char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | cp >> 12), o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | cp >> 18), o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f)), o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at ps->p (its opening quote) into *out and *len, decoded into the arena. */
static fg_status read_string(parser *ps, const char **out, uint32_t *len) {
    const char *start = ++ps->p, *q = start;
    while (q < ps->end && *q != '"') q += *q == '\\' && q + 1 < ps->end ? 2 : 1;
    if (q >= ps->end) return fail(ps, FG_JSON_FAULT_UNTERMINATED, start - 1, "a string that never ends%s", NULL);
    if ((size_t)(q - start) >= UINT32_MAX)
        return fail(ps, FG_JSON_FAULT_TOO_BIG, start - 1, "a string longer than 4 GiB%s", NULL);
    unsigned char *o = arena_alloc(ps->doc, (size_t)(q - start) + 1), *o0 = o;
    if (!o) return oom(ps);
    const unsigned char *p = (const unsigned char *)start, *e = (const unsigned char *)q;
    while (p < e) {
        unsigned c = *p;
        if (c < 0x20)
            return fail(ps, FG_JSON_FAULT_CONTROL, (const char *)p, "a raw control character in a string%s", NULL);
        if (c >= 0x80) {
            size_t k = fg_utf8_seq(p, (size_t)(e - p));
            if (k == 0) return fail(ps, FG_JSON_FAULT_UTF8, (const char *)p, "invalid UTF-8 in a string%s", NULL);
            memcpy(o, p, k);
            o += k, p += k;
            continue;
        }
        if (c != '\\') {
            *o++ = (unsigned char)c, p++;
            continue;
        }
        const unsigned char *esc = p++;
        switch (*p++) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (e - p < 4 || !hex4((const char *)p, &cp))
                return fail(ps, FG_JSON_FAULT_BAD_U, (const char *)esc, "a bad \\u escape%s", NULL);
            p += 4;
            if (cp >= 0xdc00 && cp <= 0xdfff)
                return fail(ps, FG_JSON_FAULT_SURROGATE, (const char *)esc, "an unpaired surrogate \\u%.4s",
                            (const char *)esc + 2);
            if (cp >= 0xd800 && cp <= 0xdbff) {
                if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4((const char *)p + 2, &lo) || lo < 0xdc00 ||
                    lo > 0xdfff)
                    return fail(ps, FG_JSON_FAULT_SURROGATE, (const char *)esc, "an unpaired surrogate \\u%.4s",
                                (const char *)esc + 2);
                p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            o += put_utf8(o, cp);
            break;
        }
        default: return fail(ps, FG_JSON_FAULT_ESCAPE, (const char *)esc, "an unknown escape in a string%s", NULL);
        }
    }
    *o = '\0';
    *out = (const char *)o0;
    *len = (uint32_t)(o - o0);
    ps->p = q + 1;
    return FG_OK;
}

static fg_status read_number(parser *ps, fg_json *v) {
    const char *s = ps->p, *p = s;
    if (p < ps->end && *p == '-') p++;
    if (p >= ps->end || *p < '0' || *p > '9') return fail(ps, FG_JSON_FAULT_VALUE, s, "expected a value%s", NULL);
    if (*p == '0') {
        p++;
        if (p < ps->end && *p >= '0' && *p <= '9')
            return fail(ps, FG_JSON_FAULT_LEADING_ZERO, s, "a number with a leading zero%s", NULL);
    } else {
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && *p == '.') {
        if (++p >= ps->end || *p < '0' || *p > '9')
            return fail(ps, FG_JSON_FAULT_DIGIT, p, "expected a digit after '.'%s", NULL);
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < ps->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < ps->end && (*p == '+' || *p == '-')) p++;
        if (p >= ps->end || *p < '0' || *p > '9')
            return fail(ps, FG_JSON_FAULT_DIGIT, p, "expected a digit in an exponent%s", NULL);
        while (p < ps->end && *p >= '0' && *p <= '9') p++;
    }
    char *t = arena_alloc(ps->doc, (size_t)(p - s) + 1);
    if (!t) return oom(ps);
    memcpy(t, s, (size_t)(p - s));
    t[p - s] = '\0';
    v->kind = FG_JSON_NUMBER;
    v->str = t;
    v->len = (uint32_t)(p - s);
    ps->p = p;
    return FG_OK;
}

static fg_status push(parser *ps, const fg_json *v) {
    if (ps->sn == ps->scap) {
        size_t cap = ps->scap ? ps->scap * 2 : 256;
        fg_json *s = realloc(ps->stack, cap * sizeof *s);
        if (!s) return oom(ps);
        ps->stack = s;
        ps->scap = cap;
    }
    ps->stack[ps->sn++] = *v;
    return FG_OK;
}

static int key_cmp(const void *a, const void *b) {
    const fg_json *x = *(const fg_json *const *)a, *y = *(const fg_json *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    return c ? c : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* The first member whose key an earlier member of the same object has, or NULL. */
static const fg_json *repeated_key(parser *ps, const fg_json *it, size_t n) {
    if (n <= 8) {
        for (size_t i = 1; i < n; i++)
            for (size_t j = 0; j < i; j++)
                if (it[i].key_len == it[j].key_len && memcmp(it[i].key, it[j].key, it[i].key_len) == 0) return &it[i];
        return NULL;
    }
    const fg_json **ix = malloc(n * sizeof *ix);
    if (!ix) return oom(ps), NULL;
    for (size_t i = 0; i < n; i++) ix[i] = &it[i];
    qsort(ix, n, sizeof *ix, key_cmp);
    const fg_json *r = NULL;
    for (size_t i = 1; i < n && !r; i++)
        if (key_cmp(&ix[i - 1], &ix[i]) == 0) r = ix[i] > ix[i - 1] ? ix[i] : ix[i - 1];
    free(ix);
    return r;
}

static fg_status read_value(parser *ps, fg_json *v, int depth);

/* An array or an object, at its opening bracket. */
static fg_status read_container(parser *ps, fg_json *v, int depth) {
    int is_obj = *ps->p == '{';
    char close = is_obj ? '}' : ']';
    if (depth >= FG_JSON_MAX_DEPTH) return fail(ps, FG_JSON_FAULT_DEPTH, ps->p, "nesting deeper than %s levels", "128");
    ps->p++;
    const char *outer_owner = ps->owner;
    ps->owner = ps->next_owner;
    ps->depth = depth + 1;
    size_t base = ps->sn;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
    } else {
        for (;;) {
            fg_json item = {0};
            skip_ws(ps);
            if (is_obj) {
                if (ps->p >= ps->end || *ps->p != '"')
                    return fail(ps, FG_JSON_FAULT_KEY, ps->p, "expected a key (a string)%s", NULL);
                FG_TRY(read_string(ps, &item.key, &item.key_len));
                skip_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':')
                    return fail(ps, FG_JSON_FAULT_COLON, ps->p, "expected ':'%s", NULL);
                ps->p++;
            }
            const char *key = item.key;
            uint32_t key_len = item.key_len;
            ps->next_owner = key;
            FG_TRY(read_value(ps, &item, depth + 1));
            item.key = key, item.key_len = key_len;
            FG_TRY(push(ps, &item));
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == close) {
                ps->p++;
                break;
            }
            if (ps->err) ps->err->close = close;
            return fail(ps, FG_JSON_FAULT_COMMA, ps->p, is_obj ? "expected ',' or '}'%s" : "expected ',' or ']'%s",
                        NULL);
        }
    }
    size_t n = ps->sn - base;
    if (n >= UINT32_MAX)
        return fail(ps, FG_JSON_FAULT_TOO_BIG, ps->p, "a container of more than 4 billion items%s", NULL);
    fg_json *items = NULL;
    if (n) {
        if (!(items = arena_alloc(ps->doc, n * sizeof *items))) return oom(ps);
        memcpy(items, ps->stack + base, n * sizeof *items);
    }
    ps->sn = base;
    if (is_obj && n > 1) {
        const fg_json *r = repeated_key(ps, items, n);
        if (ps->st != FG_OK) return ps->st;
        if (r) {
            char shown[64];
            snprintf(shown, sizeof shown, "%.40s%s", r->key, r->key_len > 40 ? "..." : "");
            for (char *c = shown; *c; c++)
                if ((unsigned char)*c < 0x20) *c = '?';
            if (ps->err) copy_shown(ps->err->key, sizeof ps->err->key, r->key);
            return fail(ps, FG_JSON_FAULT_REPEATED_KEY, ps->p - 1, "the key \"%s\" twice in one object (ending here)",
                        shown);
        }
    }
    v->kind = is_obj ? FG_JSON_OBJECT : FG_JSON_ARRAY;
    v->items = items;
    v->len = (uint32_t)n;
    ps->owner = outer_owner;
    ps->depth = depth;
    return FG_OK;
}

static int literal(parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0) return 0;
    ps->p += n;
    return 1;
}

static fg_status read_value(parser *ps, fg_json *v, int depth) {
    skip_ws(ps);
    v->at = (size_t)(ps->p - ps->text);
    if (ps->p >= ps->end) return fail(ps, FG_JSON_FAULT_VALUE, ps->p, "expected a value, found the end%s", NULL);
    switch (*ps->p) {
    case '{':
    case '[': return read_container(ps, v, depth);
    case '"': v->kind = FG_JSON_STRING; return read_string(ps, &v->str, &v->len);
    case 't': v->kind = FG_JSON_TRUE; break;
    case 'f': v->kind = FG_JSON_FALSE; break;
    case 'n': v->kind = FG_JSON_NULL; break;
    default: return read_number(ps, v);
    }
    if (!literal(ps, v->kind == FG_JSON_TRUE ? "true" : v->kind == FG_JSON_FALSE ? "false" : "null"))
        return fail(ps, FG_JSON_FAULT_VALUE, ps->p, "expected a value%s", NULL);
    return FG_OK;
}

fg_status fg_json_parse(const char *text, size_t n, const char *what, fg_json_doc **doc) {
    return fg_json_parse_ex(text, n, what, doc, NULL);
}

fg_status fg_json_parse_ex(const char *text, size_t n, const char *what, fg_json_doc **doc, fg_json_error *err) {
    if (err) memset(err, 0, sizeof *err);
    if (!doc) return fg_error(FG_ERR_ARG, "fg_json_parse: doc is NULL");
    *doc = NULL;
    if (!text && n) return fg_error(FG_ERR_ARG, "fg_json_parse: text is NULL");
    fg_json_doc *d = calloc(1, sizeof *d);
    if (!d) return fg_error(FG_ERR_OOM, "%s: out of memory while reading it", what ? what : "JSON");
    parser ps = {.text = text ? text : "", .p = text ? text : "", .end = (text ? text : "") + n,
                 .what = what ? what : "JSON", .doc = d, .st = FG_OK, .err = err};
    if (n >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        fail(&ps, FG_JSON_FAULT_BOM, ps.p, "a byte-order mark before the document%s", NULL);
    if (ps.st == FG_OK && read_value(&ps, &d->root, 0) == FG_OK) {
        skip_ws(&ps);
        if (ps.p != ps.end) fail(&ps, FG_JSON_FAULT_TRAILING, ps.p, "text after the document's end%s", NULL);
    }
    free(ps.stack);
    if (ps.st != FG_OK) {
        fg_json_free(d);
        return ps.st;
    }
    *doc = d;
    return FG_OK;
}

const fg_json *fg_json_root(const fg_json_doc *doc) { return doc ? &doc->root : NULL; }

void fg_json_free(fg_json_doc *doc) {
    if (!doc) return;
    for (chunk *c = doc->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(doc);
}

const fg_json *fg_json_get(const fg_json *obj, const char *key) {
    if (!obj || obj->kind != FG_JSON_OBJECT || !key) return NULL;
    size_t n = strlen(key);
    for (uint32_t i = 0; i < obj->len; i++)
        if (obj->items[i].key_len == n && memcmp(obj->items[i].key, key, n) == 0) return &obj->items[i];
    return NULL;
}

int fg_json_int64(const fg_json *v, int64_t *out) {
    if (!v || v->kind != FG_JSON_NUMBER || strpbrk(v->str, ".eE")) return 0;
    errno = 0;
    char *end;
    long long x = strtoll(v->str, &end, 10);
    if (errno == ERANGE || *end != '\0') return 0;
    *out = (int64_t)x;
    return 1;
}

int fg_json_double(const fg_json *v, double *out) {
    if (!v || v->kind != FG_JSON_NUMBER) return 0;
    char *end;
    double x = strtod(v->str, &end);
    if (*end != '\0' || !isfinite(x)) return 0;
    *out = x;
    return 1;
}

int fg_json_is(const fg_json *v, const char *s) {
    return v && v->kind == FG_JSON_STRING && strlen(s) == v->len && memcmp(v->str, s, v->len) == 0;
}

const char *fg_json_kind_name(fg_json_kind k) {
    static const char *const names[] = {"null", "false", "true", "number", "string", "array", "object"};
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "?";
}
