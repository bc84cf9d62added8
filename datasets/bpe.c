/* bpe.c — byte-level BPE (see bpe.h): the readers of the three file formats, the pre-tokenizer and
 * the merge loop.
 *
 * The vocabulary is one table of tokens (id -> bytes) with a hash index (bytes -> id) and a hash
 * table of merges ((left id, right id) -> (rank, merged id)). Both formats fill the same tables:
 * a Hugging Face file lists its merges, a tiktoken file implies them (every split of a token into
 * two tokens is a merge whose rank is the token's).
 *
 * The merge loop keeps a piece's parts in a linked list and the candidate pairs in a binary heap
 * keyed by (rank, position), so that a piece of L bytes takes O(L log L) however long it is. A heap
 * entry goes stale when a neighbour merges; it is recognised when popped (the pair now at that
 * position has another rank, or the position is gone) and dropped.
 */
#include "datasets/bpe.h"
#include "datasets/bpe_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tensor/json.h"
#include "tensor/utf8.h"

#ifdef FG_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

#define BPE_MAX_FILE ((size_t)1 << 30) /* a tokenizer file of more than 1 GiB is not one */
#define BPE_MAX_TOKEN 65536             /* bytes in one token */
#define BPE_MAX_VOCAB (1 << 24)

/* The pre-tokenizer patterns of the tiktoken encodings (GPT-2's is also Hugging Face's ByteLevel). */
static const char PAT_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char PAT_CL100K[] = "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+"
                                 "|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s";
static const char PAT_O200K[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct {
    const char *text;
    int32_t id;
} bpe_special_def;

static const bpe_special_def SPEC_GPT2[] = {{"<|endoftext|>", 50256}, {NULL, 0}};
static const bpe_special_def SPEC_P50K[] = {{"<|endoftext|>", 50256}, {NULL, 0}};
static const bpe_special_def SPEC_CL100K[] = {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258},
                                              {"<|fim_middle|>", 100259}, {"<|fim_suffix|>", 100260},
                                              {"<|endofprompt|>", 100276}, {NULL, 0}};
static const bpe_special_def SPEC_O200K[] = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}, {NULL, 0}};

static const struct {
    const char *name;
    const char *pattern;
    const bpe_special_def *specials;
} bpe_encodings[] = {
    {"gpt2", PAT_GPT2, SPEC_GPT2},           {"r50k_base", PAT_GPT2, SPEC_GPT2},
    {"p50k_base", PAT_GPT2, SPEC_P50K},      {"cl100k_base", PAT_CL100K, SPEC_CL100K},
    {"o200k_base", PAT_O200K, SPEC_O200K},
};

struct fg_bpe {
    int32_t n_ids;
    uint32_t *off, *len; /* token id -> bytes pool[off, off + len); len UINT32_MAX: no token */
    char *pool;
    size_t pool_n, pool_cap;
    uint32_t *index; /* bytes -> id + 1 (0: empty), open addressing */
    size_t index_cap;
    uint64_t *pair_key; /* (left << 32 | right) + 1 (0: empty) */
    uint32_t *pair_rank;
    int32_t *pair_out;
    size_t pair_cap, pair_n;
    int32_t byte_id[256];
    int32_t *special; /* ids of the tokens cut out before the regex */
    unsigned char *special_flag; /* 1: special (cut out only when allowed), 0: an added token */
    int n_special;
    unsigned char special_first[256]; /* 1 when some special token starts with this byte */
    int whole_first;                  /* a piece that is a token is that token (no merging) */
    char *pattern;
    fg_bpe__regex *re;
};

/* ---- tables ---- */

static int32_t index_find(const fg_bpe *t, const void *b, size_t n) {
    if (!t->index_cap) return -1;
    size_t m = t->index_cap - 1;
    for (size_t h = fg_xxh64(b, n, 0) & m;; h = (h + 1) & m) {
        uint32_t e = t->index[h];
        if (!e) return -1;
        int32_t id = (int32_t)(e - 1);
        if (t->len[id] == n && memcmp(t->pool + t->off[id], b, n) == 0) return id;
    }
}

static fg_status grow_ids(fg_bpe *t, int32_t n_ids) {
    if (n_ids <= t->n_ids) return FG_OK;
    uint32_t *o = realloc(t->off, (size_t)n_ids * sizeof *o), *l;
    if (!o) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    t->off = o;
    if (!(l = realloc(t->len, (size_t)n_ids * sizeof *l))) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    t->len = l;
    for (int32_t i = t->n_ids; i < n_ids; i++) t->off[i] = 0, t->len[i] = UINT32_MAX;
    t->n_ids = n_ids;
    return FG_OK;
}

/* Gives token `id` the bytes b[0..n). A second token with the same id is refused by the caller's
 * message `what`. */
static fg_status set_token(fg_bpe *t, int32_t id, const void *b, size_t n, const char *what) {
    if (id < 0 || id >= BPE_MAX_VOCAB) return fg_error(FG_ERR_FORMAT, "%s: token id %d is out of range [0, %d)", what, (int)id, BPE_MAX_VOCAB);
    if (n == 0 || n > BPE_MAX_TOKEN) return fg_error(FG_ERR_FORMAT, "%s: token %d has %zu bytes (1 to %d allowed)", what, (int)id, n, BPE_MAX_TOKEN);
    FG_TRY(grow_ids(t, id + 1));
    if (t->len[id] != UINT32_MAX) return fg_error(FG_ERR_FORMAT, "%s: two tokens have the id %d", what, (int)id);
    if (t->pool_n + n > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
        while (cap < t->pool_n + n) cap *= 2;
        char *p = realloc(t->pool, cap);
        if (!p) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
        t->pool = p;
        t->pool_cap = cap;
    }
    memcpy(t->pool + t->pool_n, b, n);
    t->off[id] = (uint32_t)t->pool_n;
    t->len[id] = (uint32_t)n;
    t->pool_n += n;
    return FG_OK;
}

/* Indexes every token with bytes, except the special ones (never produced by merging). Two
 * tokens with the same bytes are refused. */
static fg_status build_index(fg_bpe *t, const char *what) {
    size_t cap = 16;
    while (cap < (size_t)t->n_ids * 2) cap *= 2;
    free(t->index);
    if (!(t->index = calloc(cap, sizeof *t->index))) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    t->index_cap = cap;
    unsigned char *skip = calloc((size_t)t->n_ids, 1);
    if (!skip) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    for (int i = 0; i < t->n_special; i++) skip[t->special[i]] = 1;
    fg_status st = FG_OK;
    for (int32_t id = 0; id < t->n_ids && st == FG_OK; id++) {
        if (t->len[id] == UINT32_MAX || skip[id]) continue;
        const char *b = t->pool + t->off[id];
        int32_t other = index_find(t, b, t->len[id]);
        if (other >= 0) {
            st = fg_error(FG_ERR_FORMAT, "%s: tokens %d and %d have the same bytes", what, (int)other, (int)id);
            break;
        }
        size_t m = cap - 1, h = fg_xxh64(b, t->len[id], 0) & m;
        while (t->index[h]) h = (h + 1) & m;
        t->index[h] = (uint32_t)id + 1;
    }
    free(skip);
    for (int b = 0; b < 256 && st == FG_OK; b++) {
        unsigned char c = (unsigned char)b;
        if ((t->byte_id[b] = index_find(t, &c, 1)) < 0)
            st = fg_error(FG_ERR_FORMAT, "%s: the vocabulary has no token for the byte 0x%02x (a byte-level BPE has all 256)", what, b);
    }
    return st;
}

static size_t pair_slot(const fg_bpe *t, uint64_t key) {
    size_t m = t->pair_cap - 1, h = fg_bpe__mix64(key) & m;
    while (t->pair_key[h] && t->pair_key[h] != key + 1) h = (h + 1) & m;
    return h;
}

static fg_status pair_reserve(fg_bpe *t, size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    t->pair_key = calloc(cap, sizeof *t->pair_key);
    t->pair_rank = malloc(cap * sizeof *t->pair_rank);
    t->pair_out = malloc(cap * sizeof *t->pair_out);
    if (!t->pair_key || !t->pair_rank || !t->pair_out) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    t->pair_cap = cap;
    return FG_OK;
}

/* Adds the merge (a, b) -> out with `rank`; returns 0 when the pair already has one. */
static int pair_add(fg_bpe *t, int32_t a, int32_t b, uint32_t rank, int32_t out) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t h = pair_slot(t, key);
    if (t->pair_key[h]) return 0;
    t->pair_key[h] = key + 1;
    t->pair_rank[h] = rank;
    t->pair_out[h] = out;
    t->pair_n++;
    return 1;
}

static int pair_find(const fg_bpe *t, int32_t a, int32_t b, uint32_t *rank, int32_t *out) {
    size_t h = pair_slot(t, (uint64_t)(uint32_t)a << 32 | (uint32_t)b);
    if (!t->pair_key[h]) return 0;
    *rank = t->pair_rank[h];
    *out = t->pair_out[h];
    return 1;
}

static fg_status add_special(fg_bpe *t, int32_t id, int is_special) {
    for (int i = 0; i < t->n_special; i++)
        if (t->special[i] == id) return FG_OK;
    int32_t *s = realloc(t->special, (size_t)(t->n_special + 1) * sizeof *s);
    if (!s) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    t->special = s;
    unsigned char *f = realloc(t->special_flag, (size_t)(t->n_special + 1));
    if (!f) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    t->special_flag = f;
    t->special[t->n_special] = id;
    t->special_flag[t->n_special++] = (unsigned char)is_special;
    t->special_first[(unsigned char)t->pool[t->off[id]]] = 1;
    return FG_OK;
}

/* ---- the pre-tokenizer's regular expression ---- */

/* The reference tokenizers' regex engines and PCRE2 read a few things differently; a pattern is
 * translated into PCRE2's spelling of what its own engine means:
 *   - \s, \S: Unicode's White_Space property in both engines (PCRE2's \s also takes U+180E);
 *   - Hugging Face's files are read by Oniguruma with Ruby's syntax, where X{n,m}+ is not a
 *     possessive repeat but (?:X{n,m})+, \h is a hexadecimal digit, and ^ and $ match at every
 *     line start and end; tiktoken's engine (fancy-regex) reads X{n,m}+ as possessive and $ as the
 *     end of the text, as PCRE2 does with DOLLAR_ENDONLY. */
#define WS_CLASS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define HEX_CLASS "0-9a-fA-F"

typedef struct {
    char *s;
    size_t n, cap;
} pbuf;

static int pb_put(pbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->s, cap);
        if (!q) return 0;
        b->s = q;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
    return 1;
}

/* The length of the escape at p (p[0] == '\\'): \p{..}, \x{..} and the like up to their '}'. */
static size_t escape_len(const char *p) {
    if (!p[1]) return 1;
    if (strchr("pPxNgk", p[1]) && p[2] == '{') {
        const char *e = strchr(p + 3, '}');
        return e ? (size_t)(e - p) + 1 : strlen(p);
    }
    if ((p[1] == 'p' || p[1] == 'P') && p[2]) return 3;
    if (p[1] == 'x' && isxdigit((unsigned char)p[2]) && isxdigit((unsigned char)p[3])) return 4;
    size_t q = fg_utf8_seq((const unsigned char *)p + 1, strlen(p + 1));
    return 1 + (q ? q : 1);
}

/* The pattern in PCRE2's spelling (see above); onig: the pattern comes from a Hugging Face file.
 * NULL (and an error) for what the spelling cannot express (\S or \H inside a class). */
static char *translate_pattern(const char *pat, int onig, const char *what) {
    pbuf o = {0};
    size_t n = strlen(pat), groups[64];
    int ng = 0, in_class = 0, ok = 1;
    long atom = -1; /* where the last complete atom starts in the output */
    for (size_t i = 0; i < n && ok;) {
        char c = pat[i];
        if (c == '\\') {
            size_t k = escape_len(pat + i);
            char e = pat[i + 1];
            long at = (long)o.n;
            if (e == 's' || e == 'S' || (onig && (e == 'h' || e == 'H'))) {
                const char *cls = e == 's' || e == 'S' ? WS_CLASS : HEX_CLASS;
                if (in_class && (e == 'S' || e == 'H')) {
                    free(o.s);
                    fg_error(FG_ERR_FORMAT, "%s: the pre-tokenizer's pattern has \\%c inside a character class (not supported)", what, e);
                    return NULL;
                }
                ok = in_class ? pb_put(&o, cls, strlen(cls))
                              : pb_put(&o, e == 's' || e == 'h' ? "[" : "[^", e == 's' || e == 'h' ? 1 : 2) && pb_put(&o, cls, strlen(cls)) && pb_put(&o, "]", 1);
            } else {
                ok = pb_put(&o, pat + i, k);
            }
            if (!in_class) atom = at;
            i += k;
        } else if (in_class) {
            ok = pb_put(&o, &c, 1);
            if (c == ']') in_class = 0;
            i++;
        } else if (c == '[') {
            atom = (long)o.n;
            in_class = 1;
            ok = pb_put(&o, &c, 1);
            i++;
            if (i < n && pat[i] == '^') ok &= pb_put(&o, &pat[i++], 1);
            if (i < n && pat[i] == ']') ok &= pb_put(&o, &pat[i++], 1); /* a ']' first is a literal */
        } else if (c == '(') {
            if (ng < 64) groups[ng] = o.n;
            ng++;
            atom = -1;
            ok = pb_put(&o, &c, 1);
            i++;
        } else if (c == ')') {
            atom = ng > 0 && ng <= 64 ? (long)groups[ng - 1] : -1;
            if (ng > 0) ng--;
            ok = pb_put(&o, &c, 1);
            i++;
        } else if (c == '{' && onig) {
            size_t j = i + 1;
            while (j < n && (isdigit((unsigned char)pat[j]) || pat[j] == ',')) j++;
            if (j < n && pat[j] == '}' && j > i + 1 && j + 1 < n && pat[j + 1] == '+' && atom >= 0) {
                /* X{n,m}+ -> (?:X{n,m})+ */
                size_t len = o.n - (size_t)atom;
                ok = pb_put(&o, "(?:", 3);
                if (ok) {
                    memmove(o.s + atom + 3, o.s + atom, len);
                    memcpy(o.s + atom, "(?:", 3);
                    ok = pb_put(&o, pat + i, j + 1 - i) && pb_put(&o, ")+", 2);
                }
                i = j + 2;
                atom = -1;
            } else {
                ok = pb_put(&o, &c, 1);
                i++;
            }
        } else {
            size_t k = fg_utf8_seq((const unsigned char *)pat + i, n - i);
            if (!k) k = 1;
            if (!strchr("*+?{|^$.", c) || c == '.') atom = (long)o.n;
            if (c == '|') atom = -1;
            ok = pb_put(&o, pat + i, k);
            i += k;
        }
    }
    if (!ok || !o.s) {
        free(o.s);
        fg_error(FG_ERR_OOM, "tokenizer: out of memory");
        return NULL;
    }
    return o.s;
}

struct fg_bpe__regex {
#ifdef FG_HAVE_PCRE2
    pcre2_code *code;
#endif
    int unused;
};

fg_bpe__regex *fg_bpe__regex_compile(const char *pat, int onig, const char *what) {
#ifdef FG_HAVE_PCRE2
    fg_bpe__regex *re = calloc(1, sizeof *re);
    char *p = re ? translate_pattern(pat, onig, what) : NULL;
    if (!p) {
        if (!re) fg_error(FG_ERR_OOM, "tokenizer: out of memory");
        free(re);
        return NULL;
    }
    int err;
    PCRE2_SIZE at;
    re->code = pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED,
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (onig ? PCRE2_MULTILINE : PCRE2_DOLLAR_ENDONLY), &err, &at, NULL);
    free(p);
    if (!re->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        free(re);
        fg_error(FG_ERR_FORMAT, "%s: the pre-tokenizer's pattern does not compile: %s", what, (const char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* without the JIT (some CPUs) it still matches */
    return re;
#else
    (void)pat, (void)onig;
    fg_error(FG_ERR_DEVICE, "%s: this flashgrad was built without PCRE2 (install libpcre2-dev and rebuild for BPE tokenizers)", what);
    return NULL;
#endif
}

void fg_bpe__regex_free(fg_bpe__regex *re) {
    if (!re) return;
#ifdef FG_HAVE_PCRE2
    pcre2_code_free(re->code);
#endif
    free(re);
}

fg_status fg_bpe__pieces(const fg_bpe__regex *re, const unsigned char *text, size_t n, fg_bpe__piece_fn fn, void *ctx) {
#ifdef FG_HAVE_PCRE2
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->code, NULL);
    if (!md) return fg_error(FG_ERR_OOM, "tokenizer: out of memory while encoding");
    fg_status st = FG_OK;
    size_t at = 0, done = 0;
    while (at < n && st == FG_OK) {
        int rc = pcre2_match(re->code, text, n, at, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            st = fg_error(FG_ERR_ARG, "tokenizer: the pre-tokenizer's regex failed at byte %zu: %s", at, (const char *)msg);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match: move on by one character */
            size_t q = fg_utf8_seq(text + at, n - at);
            at += q ? q : 1;
            continue;
        }
        if (ms > done) st = fn(text + done, ms - done, ctx); /* a stretch no match covers */
        if (st == FG_OK) st = fn(text + ms, me - ms, ctx);
        done = at = me;
    }
    if (st == FG_OK && done < n) st = fn(text + done, n - done, ctx);
    pcre2_match_data_free(md);
    return st;
#else
    (void)re, (void)text, (void)n, (void)fn, (void)ctx;
    return fg_error(FG_ERR_DEVICE, "tokenizer: this flashgrad was built without PCRE2");
#endif
}

const char *fg_bpe__named_pattern(const char *name) {
    for (size_t i = 0; i < sizeof bpe_encodings / sizeof *bpe_encodings; i++)
        if (strcmp(name, bpe_encodings[i].name) == 0) return bpe_encodings[i].pattern;
    return NULL;
}

static fg_status compile_pattern(fg_bpe *t, const char *pat, int onig, const char *what) {
    if (!(t->pattern = strdup(pat))) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    t->re = fg_bpe__regex_compile(pat, onig, what);
    return t->re ? FG_OK : fg_last_status();
}

/* ---- tiktoken rank files ---- */

size_t fg_bpe__b64_encode(const void *data, size_t n, char *out) {
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *b = data;
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
        out[k++] = digits[v >> 18], out[k++] = digits[(v >> 12) & 63];
        out[k++] = i + 1 < n ? digits[(v >> 6) & 63] : '=';
        out[k++] = i + 2 < n ? digits[v & 63] : '=';
    }
    return k;
}

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes standard base64 (with its '=' padding) s[0..n) into out; returns the length or -1. */
long fg_bpe__b64_decode(const char *s, size_t n, unsigned char *out) {
    if (n == 0 || n % 4) return -1;
    size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    long k = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        for (size_t j = 0; j < 4; j++) {
            int d = i + j >= n - pad ? 0 : b64_value((unsigned char)s[i + j]);
            if (d < 0) return -1;
            v = v << 6 | (uint32_t)d;
        }
        out[k++] = (unsigned char)(v >> 16);
        if (i + 4 < n || pad < 2) out[k++] = (unsigned char)(v >> 8);
        if (i + 4 < n || pad < 1) out[k++] = (unsigned char)v;
    }
    /* the padding bits must be zero, as every encoder writes them (one spelling per token) */
    if ((pad == 2 && (b64_value((unsigned char)s[n - 3]) & 15)) || (pad == 1 && (b64_value((unsigned char)s[n - 2]) & 3))) return -1;
    return k;
}

static fg_status read_input(const char *path, char **buf, size_t *n) {
    int fd;
    int64_t size;
    *buf = NULL;
    FG_TRY(fg_open_read(path, 0, &fd, &size));
    fg_status st = fg_read_fd(fd, path, BPE_MAX_FILE, (void **)buf, n);
    close(fd);
    return st;
}

/* The encoding's index in bpe_encodings: named, or from the start of the file's name; -1 and an
 * error when neither says. */
static int find_encoding(const char *path, const char *encoding) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    int e = -1;
    for (size_t i = 0; i < sizeof bpe_encodings / sizeof *bpe_encodings; i++) {
        size_t k = strlen(bpe_encodings[i].name);
        if (encoding ? strcmp(encoding, bpe_encodings[i].name) == 0
                     : strncmp(base, bpe_encodings[i].name, k) == 0 && (base[k] == '.' || base[k] == '\0')) {
            e = (int)i;
            break;
        }
    }
    if (e < 0 && encoding)
        fg_error(FG_ERR_ARG, "unknown tiktoken encoding '%s' (gpt2, r50k_base, p50k_base, cl100k_base, o200k_base)", encoding);
    else if (e < 0)
        fg_error(FG_ERR_ARG, "%s: the file's name does not say its encoding (gpt2, r50k_base, p50k_base, cl100k_base or o200k_base); name it with --encoding", path);
    return e;
}

/* A tiktoken rank file's text buf[0..n) (named `path` in messages), of encoding e. */
static fg_status tiktoken_from(fg_bpe *t, char *buf, size_t n, int e, const char *path) {
    fg_status st = FG_OK;
    unsigned char tok[BPE_MAX_TOKEN];
    size_t line = 0, count = 0;
    int32_t max_rank = -1;
    for (char *p = buf, *end = buf + n; p < end && st == FG_OK;) {
        char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
        line++;
        if (le > p && le[-1] == '\r') le--;
        if (le == p) { /* an empty line (the last one) */
            p = nl ? nl + 1 : end;
            continue;
        }
        char *sp = memchr(p, ' ', (size_t)(le - p));
        long k = -1;
        long long rank = -1;
        if (sp && (size_t)(sp - p) <= 4 * ((BPE_MAX_TOKEN - 2) / 3)) k = fg_bpe__b64_decode(p, (size_t)(sp - p), tok);
        if (sp && k > 0) {
            char *r = sp + 1;
            rank = 0;
            if (r == le) rank = -1;
            for (; r < le && rank >= 0; r++) rank = isdigit((unsigned char)*r) && rank < BPE_MAX_VOCAB ? rank * 10 + (*r - '0') : -1;
            if (rank >= BPE_MAX_VOCAB) rank = -1;
        }
        if (k <= 0 || rank < 0)
            st = fg_error(FG_ERR_FORMAT, "%s: line %zu is not \"base64-token rank\" (a rank below %d)", path, line, BPE_MAX_VOCAB);
        else if ((st = set_token(t, (int32_t)rank, tok, (size_t)k, path)) == FG_OK && rank > max_rank)
            max_rank = (int32_t)rank;
        count++;
        p = nl ? nl + 1 : end;
    }
    if (st == FG_OK && count == 0) st = fg_error(FG_ERR_FORMAT, "%s: no tokens in the file", path);
    for (const bpe_special_def *s = bpe_encodings[e].specials; st == FG_OK && s->text; s++) {
        if (s->id <= max_rank && t->len[s->id] != UINT32_MAX)
            st = fg_error(FG_ERR_FORMAT, "%s: the special token %s's id %d is an ordinary token's rank in this file (not %s?)", path, s->text, (int)s->id, bpe_encodings[e].name);
        else if ((st = set_token(t, s->id, s->text, strlen(s->text), path)) == FG_OK)
            st = add_special(t, s->id, 1);
    }
    if (st == FG_OK) st = build_index(t, path);
    if (st == FG_OK) {
        /* every split of a token into two tokens is a merge with the token's rank */
        size_t splits = 0;
        for (int32_t id = 0; id <= max_rank; id++)
            if (t->len[id] != UINT32_MAX) splits += t->len[id] - 1;
        st = pair_reserve(t, splits + 1);
        for (int32_t id = 0; id <= max_rank && st == FG_OK; id++) {
            if (t->len[id] == UINT32_MAX) continue;
            const char *b = t->pool + t->off[id];
            for (uint32_t i = 1; i < t->len[id]; i++) {
                int32_t l = index_find(t, b, i), r = l >= 0 ? index_find(t, b + i, t->len[id] - i) : -1;
                if (r >= 0) pair_add(t, l, r, (uint32_t)id, id);
            }
        }
    }
    t->whole_first = 1; /* tiktoken takes a piece that is a token as that token */
    if (st == FG_OK) st = compile_pattern(t, bpe_encodings[e].pattern, 0, path);
    return st;
}

/* ---- Hugging Face files ---- */

/* GPT-2's byte-to-character table: bytes that are printable Latin-1 ('!'..'~', '¡'..'¬', '®'..'ÿ')
 * stand for themselves; the other 68 bytes, in increasing order, become U+0100, U+0101, ... */
void fg_bpe__byte_chars(uint32_t cp_of[256]) {
    int next = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        cp_of[b] = printable ? (uint32_t)b : (uint32_t)(0x100 + next++);
    }
}

/* Decodes a byte-level token string (UTF-8 of the table's characters) into bytes; -1 when a
 * character is not in the table. */
static long unmap_bytes(const char *s, size_t n, unsigned char *out, const int16_t *byte_of_cp) {
    long k = 0;
    for (size_t i = 0; i < n;) {
        size_t q = fg_utf8_seq((const unsigned char *)s + i, n - i);
        if (!q) return -1;
        uint32_t cp = (unsigned char)s[i];
        if (q == 2) cp = ((cp & 0x1f) << 6) | ((unsigned char)s[i + 1] & 0x3f);
        else if (q > 2) return -1; /* every character of the table is below U+0800 */
        if (cp >= 0x144 || byte_of_cp[cp] < 0) return -1;
        out[k++] = (unsigned char)byte_of_cp[cp];
        i += q;
    }
    return k;
}

typedef struct {
    int16_t byte_of_cp[0x144];
    const char *what;
} hf_ctx;

static fg_status hf_vocab(fg_bpe *t, const fg_json *vocab, hf_ctx *c) {
    if (!vocab || vocab->kind != FG_JSON_OBJECT || vocab->len == 0)
        return fg_error(FG_ERR_FORMAT, "%s: \"vocab\" is not an object of token: id", c->what);
    unsigned char *tok = malloc(BPE_MAX_TOKEN);
    if (!tok) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    fg_status st = FG_OK;
    for (uint32_t i = 0; i < vocab->len && st == FG_OK; i++) {
        const fg_json *v = &vocab->items[i];
        int64_t id;
        long k = v->key_len <= 2 * BPE_MAX_TOKEN ? unmap_bytes(v->key, v->key_len, tok, c->byte_of_cp) : -1;
        if (!fg_json_int64(v, &id) || id < 0 || id >= BPE_MAX_VOCAB)
            st = fg_error(FG_ERR_FORMAT, "%s: the id of vocab entry %u is not an integer in [0, %d)", c->what, i, BPE_MAX_VOCAB);
        else if (k <= 0)
            st = fg_error(FG_ERR_FORMAT, "%s: vocab entry %u (id %lld) is not a byte-level token (characters outside GPT-2's byte table)", c->what, i, (long long)id);
        else
            st = set_token(t, (int32_t)id, tok, (size_t)k, c->what);
    }
    free(tok);
    return st;
}

/* One merge "a b" (or ["a", "b"]) as line `rank`. */
static fg_status hf_merge(fg_bpe *t, const char *a, size_t an, const char *b, size_t bn, uint32_t rank, hf_ctx *c) {
    unsigned char *buf = malloc(2 * (size_t)BPE_MAX_TOKEN);
    if (!buf) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    long ka = an <= 2 * BPE_MAX_TOKEN ? unmap_bytes(a, an, buf, c->byte_of_cp) : -1;
    long kb = ka > 0 && bn <= 2 * BPE_MAX_TOKEN && ka + (long)bn / 2 < 2 * BPE_MAX_TOKEN ? unmap_bytes(b, bn, buf + ka, c->byte_of_cp) : -1;
    fg_status st = FG_OK;
    int32_t l = ka > 0 ? index_find(t, buf, (size_t)ka) : -1, r = kb > 0 ? index_find(t, buf + ka, (size_t)kb) : -1;
    int32_t out = l >= 0 && r >= 0 ? index_find(t, buf, (size_t)(ka + kb)) : -1;
    if (l < 0 || r < 0)
        st = fg_error(FG_ERR_FORMAT, "%s: merge %u names a token that is not in the vocabulary", c->what, rank);
    else if (out < 0)
        st = fg_error(FG_ERR_FORMAT, "%s: merge %u makes a token that is not in the vocabulary", c->what, rank);
    else if (!pair_add(t, l, r, rank, out))
        st = fg_error(FG_ERR_FORMAT, "%s: merge %u repeats an earlier merge", c->what, rank);
    free(buf);
    return st;
}

static fg_status hf_merges_json(fg_bpe *t, const fg_json *m, hf_ctx *c) {
    if (!m || m->kind != FG_JSON_ARRAY) return fg_error(FG_ERR_FORMAT, "%s: \"merges\" is not an array", c->what);
    FG_TRY(pair_reserve(t, m->len + 1));
    for (uint32_t i = 0; i < m->len; i++) {
        const fg_json *e = &m->items[i];
        if (e->kind == FG_JSON_STRING) {
            const char *sp = memchr(e->str, ' ', e->len);
            if (!sp || memchr(sp + 1, ' ', e->len - (size_t)(sp + 1 - e->str)))
                return fg_error(FG_ERR_FORMAT, "%s: merge %u is not two tokens separated by one space", c->what, i);
            FG_TRY(hf_merge(t, e->str, (size_t)(sp - e->str), sp + 1, e->len - (size_t)(sp + 1 - e->str), i, c));
        } else if (e->kind == FG_JSON_ARRAY && e->len == 2 && e->items[0].kind == FG_JSON_STRING && e->items[1].kind == FG_JSON_STRING) {
            FG_TRY(hf_merge(t, e->items[0].str, e->items[0].len, e->items[1].str, e->items[1].len, i, c));
        } else {
            return fg_error(FG_ERR_FORMAT, "%s: merge %u is neither \"a b\" nor [\"a\", \"b\"]", c->what, i);
        }
    }
    return FG_OK;
}

/* A value that must be absent, null or false (a feature this reader does not have). */
static fg_status hf_refuse_set(const fg_json *obj, const char *key, const char *where, hf_ctx *c) {
    const fg_json *v = fg_json_get(obj, key);
    if (v && v->kind != FG_JSON_NULL && v->kind != FG_JSON_FALSE)
        return fg_error(FG_ERR_FORMAT, "%s: %s.%s is set; flashgrad's BPE does not support it", c->what, where, key);
    return FG_OK;
}

/* The pre-tokenizer: ByteLevel (its own regex when use_regex), or a Sequence of regex Splits with
 * the Isolated behaviour followed by ByteLevel without its regex. One regex in all. */
static fg_status hf_pretokenizer(fg_bpe *t, const fg_json *pt, hf_ctx *c) {
    const fg_json *steps = pt, *one = pt;
    uint32_t n = 1;
    if (pt && fg_json_is(fg_json_get(pt, "type"), "Sequence")) {
        steps = fg_json_get(pt, "pretokenizers");
        if (!steps || steps->kind != FG_JSON_ARRAY) return fg_error(FG_ERR_FORMAT, "%s: pre_tokenizer.pretokenizers is not an array", c->what);
        n = steps->len;
        one = steps->items;
    }
    const char *pattern = NULL;
    int byte_level = 0;
    for (uint32_t i = 0; i < n; i++, one++) {
        const fg_json *type = fg_json_get(one, "type");
        if (fg_json_is(type, "ByteLevel")) {
            FG_TRY(hf_refuse_set(one, "add_prefix_space", "pre_tokenizer", c));
            const fg_json *re = fg_json_get(one, "use_regex");
            if (!re || re->kind == FG_JSON_TRUE) {
                if (pattern) return fg_error(FG_ERR_FORMAT, "%s: the pre-tokenizer applies two regexes (not supported)", c->what);
                pattern = PAT_GPT2;
            }
            byte_level = 1;
        } else if (fg_json_is(type, "Split") && !byte_level) {
            const fg_json *p = fg_json_get(fg_json_get(one, "pattern"), "Regex");
            if (!p || p->kind != FG_JSON_STRING || strlen(p->str) != p->len)
                return fg_error(FG_ERR_FORMAT, "%s: pre_tokenizer Split.pattern is not {\"Regex\": \"...\"} (a String pattern is not supported)", c->what);
            if (!fg_json_is(fg_json_get(one, "behavior"), "Isolated"))
                return fg_error(FG_ERR_FORMAT, "%s: pre_tokenizer Split.behavior is not \"Isolated\" (the only one supported)", c->what);
            FG_TRY(hf_refuse_set(one, "invert", "pre_tokenizer.Split", c));
            if (pattern) return fg_error(FG_ERR_FORMAT, "%s: the pre-tokenizer applies two regexes (not supported)", c->what);
            pattern = p->str;
        } else {
            return fg_error(FG_ERR_FORMAT, "%s: pre_tokenizer step %u (%s) is not supported (ByteLevel, or regex Splits then ByteLevel)", c->what, i,
                            type && type->kind == FG_JSON_STRING ? type->str : "no type");
        }
    }
    if (!byte_level) return fg_error(FG_ERR_FORMAT, "%s: pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)", c->what);
    return compile_pattern(t, pattern ? pattern : "(?s).+", 1, c->what);
}

static fg_status hf_added(fg_bpe *t, const fg_json *added, hf_ctx *c) {
    if (!added || added->kind == FG_JSON_NULL) return FG_OK;
    if (added->kind != FG_JSON_ARRAY) return fg_error(FG_ERR_FORMAT, "%s: \"added_tokens\" is not an array", c->what);
    for (uint32_t i = 0; i < added->len; i++) {
        const fg_json *a = &added->items[i], *content = fg_json_get(a, "content"), *special = fg_json_get(a, "special");
        int64_t id;
        if (!fg_json_int64(fg_json_get(a, "id"), &id) || id < 0 || id >= BPE_MAX_VOCAB || !content || content->kind != FG_JSON_STRING || content->len == 0)
            return fg_error(FG_ERR_FORMAT, "%s: added_tokens[%u] has no id in range or no content", c->what, i);
        static const char *const unsupported[] = {"single_word", "lstrip", "rstrip"};
        for (size_t k = 0; k < 3; k++) FG_TRY(hf_refuse_set(a, unsupported[k], "added_tokens[]", c));
        if (id < t->n_ids && t->len[id] != UINT32_MAX) {
            if (t->len[id] != content->len || memcmp(t->pool + t->off[id], content->str, content->len) != 0)
                return fg_error(FG_ERR_FORMAT, "%s: added_tokens[%u] gives id %lld to a text other than the vocabulary's", c->what, i, (long long)id);
        } else {
            FG_TRY(set_token(t, (int32_t)id, content->str, content->len, c->what));
        }
        FG_TRY(add_special(t, (int32_t)id, special && special->kind == FG_JSON_TRUE));
    }
    return FG_OK;
}

/* A tokenizer.json's text buf[0..n) (named `path` in messages). */
static fg_status tokenizer_json_from(fg_bpe *t, const char *buf, size_t n, const char *path, hf_ctx *c) {
    fg_json_doc *doc;
    fg_status st = fg_json_parse(buf, n, path, &doc);
    if (st != FG_OK) return st;
    const fg_json *root = fg_json_root(doc), *model = fg_json_get(root, "model");
    const fg_json *type = fg_json_get(model, "type");
    if (root->kind != FG_JSON_OBJECT || !model) st = fg_error(FG_ERR_FORMAT, "%s: no \"model\" object (not a tokenizer.json?)", path);
    else if (type && !fg_json_is(type, "BPE")) st = fg_error(FG_ERR_FORMAT, "%s: model.type is %s; only BPE is supported", path, type->kind == FG_JSON_STRING ? type->str : "not a string");
    static const char *const refused[] = {"dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"};
    for (size_t i = 0; i < 5 && st == FG_OK; i++) st = hf_refuse_set(model, refused[i], "model", c);
    const fg_json *norm = fg_json_get(root, "normalizer");
    if (st == FG_OK && norm && norm->kind != FG_JSON_NULL) st = fg_error(FG_ERR_FORMAT, "%s: normalizer is set; flashgrad's BPE supports none", path);
    const fg_json *dec = fg_json_get(root, "decoder");
    if (st == FG_OK && dec && dec->kind != FG_JSON_NULL && !fg_json_is(fg_json_get(dec, "type"), "ByteLevel"))
        st = fg_error(FG_ERR_FORMAT, "%s: decoder is not ByteLevel (not supported)", path);
    if (st == FG_OK) st = hf_vocab(t, fg_json_get(model, "vocab"), c);
    if (st == FG_OK) st = hf_added(t, fg_json_get(root, "added_tokens"), c);
    if (st == FG_OK) st = build_index(t, path);
    if (st == FG_OK) st = hf_merges_json(t, fg_json_get(model, "merges"), c);
    const fg_json *ign = fg_json_get(model, "ignore_merges");
    t->whole_first = ign && ign->kind == FG_JSON_TRUE;
    if (st == FG_OK) st = hf_pretokenizer(t, fg_json_get(root, "pre_tokenizer"), c);
    fg_json_free(doc);
    return st;
}

/* GPT-2's vocab.json + merges.txt, as bytes (named vocab_name and merges_name in messages). */
static fg_status vocab_merges_from(fg_bpe *t, const char *vbuf, size_t vn, const char *mbuf, size_t n, const char *vocab_path,
                                   const char *merges_path, hf_ctx *c) {
    fg_json_doc *doc;
    fg_status st = fg_json_parse(vbuf, vn, vocab_path, &doc);
    if (st != FG_OK) return st;
    c->what = vocab_path;
    st = hf_vocab(t, fg_json_root(doc), c);
    fg_json_free(doc);
    if (st == FG_OK) {
        unsigned char eot[] = "<|endoftext|>";
        int32_t id = -1;
        for (int32_t i = 0; i < t->n_ids && id < 0; i++)
            if (t->len[i] == sizeof eot - 1 && memcmp(t->pool + t->off[i], eot, sizeof eot - 1) == 0) id = i;
        if (id >= 0) st = add_special(t, id, 1);
    }
    if (st == FG_OK) st = build_index(t, vocab_path);
    if (st != FG_OK) return st;
    c->what = merges_path;
    size_t lines = 1;
    for (size_t i = 0; i < n; i++) lines += mbuf[i] == '\n';
    st = pair_reserve(t, lines);
    uint32_t rank = 0;
    size_t line = 0;
    for (const char *p = mbuf, *end = mbuf + n; p < end && st == FG_OK;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
        line++;
        if (le > p && le[-1] == '\r') le--;
        if (le > p && !(line == 1 && (size_t)(le - p) >= 8 && strncmp(p, "#version", 8) == 0)) {
            const char *sp = memchr(p, ' ', (size_t)(le - p));
            if (!sp || memchr(sp + 1, ' ', (size_t)(le - sp - 1)))
                st = fg_error(FG_ERR_FORMAT, "%s: line %zu is not two tokens separated by one space", merges_path, line);
            else
                st = hf_merge(t, p, (size_t)(sp - p), sp + 1, (size_t)(le - sp - 1), rank++, c);
        }
        p = nl ? nl + 1 : end;
    }
    if (st == FG_OK) st = compile_pattern(t, PAT_GPT2, 1, vocab_path);
    return st;
}

static hf_ctx hf_ctx_for(const char *what) {
    hf_ctx c = {.what = what};
    uint32_t cp_of[256];
    fg_bpe__byte_chars(cp_of);
    memset(c.byte_of_cp, -1, sizeof c.byte_of_cp);
    for (int b = 0; b < 256; b++) c.byte_of_cp[cp_of[b]] = (int16_t)b;
    return c;
}

static fg_bpe *finish(fg_bpe *t, fg_status st) {
    if (st == FG_OK) return t;
    fg_bpe_free(t);
    return NULL;
}

void fg_bpe_files_free(fg_bpe_files *f) {
    if (!f) return;
    free(f->data[0]);
    free(f->data[1]);
    memset(f, 0, sizeof *f);
}

fg_status fg_bpe_files_read(const char *path, const char *encoding, fg_bpe_files *f) {
    memset(f, 0, sizeof *f);
    if (!path || !*path) return fg_error(FG_ERR_ARG, "tokenizer: no path");
    size_t n = strlen(path);
    fg_status st = FG_OK;
    char *a = malloc(n + 32), *b = malloc(n + 32);
    if (!a || !b) {
        st = fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    } else if (encoding || (n > 9 && strcmp(path + n - 9, ".tiktoken") == 0)) {
        int e = find_encoding(path, encoding);
        f->kind = FG_BPE_TIKTOKEN;
        st = e < 0 ? fg_last_status() : read_input(path, &f->data[0], &f->n[0]);
        if (e >= 0) snprintf(f->encoding, sizeof f->encoding, "%s", bpe_encodings[e].name);
    } else if (n > 5 && strcmp(path + n - 5, ".json") == 0) {
        f->kind = FG_BPE_JSON;
        st = read_input(path, &f->data[0], &f->n[0]);
    } else {
        sprintf(a, "%s/tokenizer.json", path);
        sprintf(b, "%s/vocab.json", path);
        if (access(a, F_OK) == 0) {
            f->kind = FG_BPE_JSON;
            st = read_input(a, &f->data[0], &f->n[0]);
        } else if (access(b, F_OK) == 0) {
            f->kind = FG_BPE_VOCAB_MERGES;
            st = read_input(b, &f->data[0], &f->n[0]);
            sprintf(a, "%s/merges.txt", path);
            if (st == FG_OK) st = read_input(a, &f->data[1], &f->n[1]);
        } else {
            st = fg_error(FG_ERR_ARG, "%s: not a tokenizer (a folder with tokenizer.json, or vocab.json + merges.txt; a .tiktoken file; a tokenizer.json)", path);
        }
    }
    free(a);
    free(b);
    if (st != FG_OK) fg_bpe_files_free(f);
    return st;
}

fg_bpe *fg_bpe_from_files(const fg_bpe_files *f, const char *what) {
    what = what ? what : "tokenizer";
    fg_bpe *t = calloc(1, sizeof *t);
    if (!t) return fg_error(FG_ERR_OOM, "tokenizer: out of memory"), NULL;
    hf_ctx c = hf_ctx_for(what);
    fg_status st;
    if (f->kind == FG_BPE_TIKTOKEN) {
        int e = find_encoding(what, f->encoding);
        char *copy = e >= 0 ? malloc(f->n[0] + 1) : NULL;
        if (e < 0) st = fg_last_status();
        else if (!copy) st = fg_error(FG_ERR_OOM, "tokenizer: out of memory");
        else st = (memcpy(copy, f->data[0], f->n[0]), tiktoken_from(t, copy, f->n[0], e, what));
        free(copy);
    } else if (f->kind == FG_BPE_JSON) {
        st = tokenizer_json_from(t, f->data[0], f->n[0], what, &c);
    } else if (f->kind == FG_BPE_VOCAB_MERGES) {
        char vn[600], mn[600];
        snprintf(vn, sizeof vn, "%s (vocab.json)", what);
        snprintf(mn, sizeof mn, "%s (merges.txt)", what);
        st = vocab_merges_from(t, f->data[0], f->n[0], f->data[1], f->n[1], vn, mn, &c);
    } else {
        st = fg_error(FG_ERR_ARG, "%s: no tokenizer files", what);
    }
    return finish(t, st);
}

fg_bpe *fg_bpe_load(const char *path, const char *encoding) {
    fg_bpe_files f;
    if (fg_bpe_files_read(path, encoding, &f) != FG_OK) return NULL;
    fg_bpe *t = fg_bpe_from_files(&f, path);
    fg_bpe_files_free(&f);
    return t;
}

fg_bpe *fg_bpe_from_memory(const void *data, size_t n, const char *encoding, const char *what) {
    if (!data && n) return fg_error(FG_ERR_ARG, "fg_bpe_from_memory: data is NULL"), NULL;
    fg_bpe_files f = {.kind = encoding ? FG_BPE_TIKTOKEN : FG_BPE_JSON, .data = {(char *)data, NULL}, .n = {n, 0}};
    if (encoding) snprintf(f.encoding, sizeof f.encoding, "%s", encoding);
    if (encoding && strcmp(f.encoding, encoding) != 0) return fg_error(FG_ERR_ARG, "unknown tiktoken encoding '%s'", encoding), NULL;
    return fg_bpe_from_files(&f, what);
}

void fg_bpe_free(fg_bpe *t) {
    if (!t) return;
    free(t->off);
    free(t->len);
    free(t->pool);
    free(t->index);
    free(t->pair_key);
    free(t->pair_rank);
    free(t->pair_out);
    free(t->special);
    free(t->special_flag);
    free(t->pattern);
    fg_bpe__regex_free(t->re);
    free(t);
}

int32_t fg_bpe_vocab_size(const fg_bpe *t) { return t ? t->n_ids : 0; }

const char *fg_bpe_pattern(const fg_bpe *t) { return t ? t->pattern : NULL; }

const char *fg_bpe_token(const fg_bpe *t, int32_t id, size_t *len) {
    if (!t || id < 0 || id >= t->n_ids || t->len[id] == UINT32_MAX) return NULL;
    if (len) *len = t->len[id];
    return t->pool + t->off[id];
}

int fg_bpe_is_special(const fg_bpe *t, int32_t id) {
    for (int i = 0; t && i < t->n_special; i++)
        if (t->special[i] == id) return 1;
    return 0;
}

int32_t fg_bpe_special_id(const fg_bpe *t, const char *text) {
    size_t n = text ? strlen(text) : 0;
    for (int i = 0; t && i < t->n_special; i++)
        if (t->len[t->special[i]] == n && memcmp(t->pool + t->off[t->special[i]], text, n) == 0) return t->special[i];
    return -1;
}

/* ---- encoding ---- */

typedef struct {
    int32_t *ids;
    size_t n, cap;
    /* the merge loop's scratch, grown to the longest piece */
    int32_t *part;
    uint32_t *next, *prev;
    uint64_t *heap;
    size_t scap;
} enc_state;

static fg_status emit(enc_state *s, int32_t id) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        int32_t *p = realloc(s->ids, cap * sizeof *p);
        if (!p) return fg_error(FG_ERR_OOM, "tokenizer: out of memory while encoding");
        s->ids = p;
        s->cap = cap;
    }
    s->ids[s->n++] = id;
    return FG_OK;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* Merges one piece b[0..n) (see the top of the file) and emits its tokens. */
static fg_status encode_piece(const fg_bpe *t, const unsigned char *b, size_t n, enc_state *s) {
    if (n == 0) return FG_OK;
    if (n == 1) return emit(s, t->byte_id[b[0]]);
    if (t->whole_first) {
        int32_t id = index_find(t, b, n);
        if (id >= 0) return emit(s, id);
    }
    if (n >= UINT32_MAX) return fg_error(FG_ERR_ARG, "tokenizer: a piece of 4 GiB or more");
    if (n > s->scap) {
        size_t cap = n * 2;
        int32_t *part = realloc(s->part, cap * sizeof *part);
        if (part) s->part = part;
        uint32_t *nx = realloc(s->next, cap * sizeof *nx);
        if (nx) s->next = nx;
        uint32_t *pv = realloc(s->prev, cap * sizeof *pv);
        if (pv) s->prev = pv;
        uint64_t *h = realloc(s->heap, 2 * cap * sizeof *h);
        if (h) s->heap = h;
        if (!part || !nx || !pv || !h) return fg_error(FG_ERR_OOM, "tokenizer: out of memory while encoding");
        s->scap = cap;
    }
    int32_t *part = s->part;
    uint32_t *next = s->next, *prev = s->prev;
    uint64_t *heap = s->heap;
    size_t hn = 0;
    uint32_t rank;
    int32_t out;
    for (size_t i = 0; i < n; i++) {
        part[i] = t->byte_id[b[i]];
        next[i] = (uint32_t)(i + 1);
        prev[i] = (uint32_t)i - 1; /* UINT32_MAX before the first */
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (pair_find(t, part[i], part[i + 1], &rank, &out)) heap_push(heap, &hn, (uint64_t)rank << 32 | i);
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        uint32_t r = (uint32_t)(top >> 32), i = (uint32_t)top;
        /* stale when the part at i was merged into its left neighbour, or the pair there changed */
        if (part[i] < 0 || next[i] >= n || !pair_find(t, part[i], part[next[i]], &rank, &out) || rank != r) continue;
        uint32_t j = next[i];
        part[i] = out;
        part[j] = -1;
        next[i] = next[j];
        if (next[j] < n) prev[next[j]] = i;
        if (prev[i] != UINT32_MAX && pair_find(t, part[prev[i]], part[i], &rank, &out))
            heap_push(heap, &hn, (uint64_t)rank << 32 | prev[i]);
        if (next[i] < n && pair_find(t, part[i], part[next[i]], &rank, &out)) heap_push(heap, &hn, (uint64_t)rank << 32 | i);
    }
    for (uint32_t i = 0; i < n; i = next[i]) FG_TRY(emit(s, part[i]));
    return FG_OK;
}

typedef struct {
    const fg_bpe *t;
    enc_state *s;
} piece_ctx;

static fg_status merge_piece(const unsigned char *p, size_t n, void *ctx) {
    piece_ctx *c = ctx;
    return encode_piece(c->t, p, n, c->s);
}

/* Pre-tokenizes and merges text[0..n), which holds no special token. */
static fg_status encode_ordinary(const fg_bpe *t, const unsigned char *text, size_t n, enc_state *s) {
    piece_ctx c = {t, s};
    return fg_bpe__pieces(t->re, text, n, merge_piece, &c);
}

fg_status fg_bpe_encode(const fg_bpe *t, const void *text, size_t n, int allow_special, int32_t **ids, size_t *nids) {
    if (!t || !ids || !nids || (!text && n)) return fg_error(FG_ERR_ARG, "fg_bpe_encode: NULL argument");
    *ids = NULL;
    *nids = 0;
    enc_state s = {0};
    const unsigned char *p = text;
    fg_status st = FG_OK;
    size_t start = 0;
    for (size_t i = 0; i < n && st == FG_OK;) {
        int best = -1;
        size_t best_len = 0;
        if (t->special_first[p[i]]) {
            for (int k = 0; k < t->n_special; k++) {
                int32_t id = t->special[k];
                size_t len = t->len[id];
                if ((allow_special || !t->special_flag[k]) && len > best_len && len <= n - i && memcmp(p + i, t->pool + t->off[id], len) == 0)
                    best = k, best_len = len;
            }
        }
        if (best < 0) {
            i++;
            continue;
        }
        st = encode_ordinary(t, p + start, i - start, &s);
        if (st == FG_OK) st = emit(&s, t->special[best]);
        i += best_len;
        start = i;
    }
    if (st == FG_OK) st = encode_ordinary(t, p + start, n - start, &s);
    free(s.part);
    free(s.next);
    free(s.prev);
    free(s.heap);
    if (st != FG_OK) {
        free(s.ids);
        return st;
    }
    *ids = s.ids;
    *nids = s.n;
    return FG_OK;
}

fg_status fg_bpe_decode(const fg_bpe *t, const int32_t *ids, size_t n, char **out, size_t *len) {
    if (!t || !out || !len || (!ids && n)) return fg_error(FG_ERR_ARG, "fg_bpe_decode: NULL argument");
    size_t total = *len;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_ids || t->len[ids[i]] == UINT32_MAX)
            return fg_error(FG_ERR_ARG, "tokenizer: token id %d is not in the vocabulary (%d ids)", (int)ids[i], (int)t->n_ids);
        total += t->len[ids[i]];
    }
    char *o = realloc(*out, total + 1);
    if (!o) return fg_error(FG_ERR_OOM, "tokenizer: out of memory while decoding");
    size_t k = *len;
    for (size_t i = 0; i < n; i++) {
        memcpy(o + k, t->pool + t->off[ids[i]], t->len[ids[i]]);
        k += t->len[ids[i]];
    }
    o[k] = '\0';
    *out = o;
    *len = k;
    return FG_OK;
}
