/* tokenizer.c — char-level, byte-level and BPE tokenizers (see tokenizer.h for the text format). */
#include "datasets/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/bpe_internal.h"

/* A BPE tokenizer's tables and files, shared by its copies (read-only after loading). */
typedef struct {
    fg_bpe *bpe;
    fg_bpe_files files;
    int refs;
} bpe_shared;

struct fg_tokenizer {
    fg_tok_kind kind;
    int vocab;               /* 1..256 (char, byte); the BPE's vocabulary */
    unsigned char byte[256]; /* byte[id], strictly increasing in id (char, byte) */
    int16_t id[256];         /* id[byte], -1 when the byte is not in the vocabulary (char, byte) */
    bpe_shared *bpe;         /* BPE */
};

#define FG_TOK_BYTE_STR "byte-v1"
#define FG_TOK_CHAR_PREFIX "char-v1:"

/* Builds a tokenizer from a 256-entry presence table. */
static fg_tokenizer *tok_from_present(fg_tok_kind kind, const unsigned char present[256]) {
    fg_tokenizer *t = malloc(sizeof *t);
    if (!t) {
        fg_error(FG_ERR_OOM, "tokenizer: out of memory");
        return NULL;
    }
    t->kind = kind;
    t->vocab = 0;
    t->bpe = NULL;
    for (int c = 0; c < 256; c++) {
        t->id[c] = -1;
        if (present[c]) {
            t->id[c] = (int16_t)t->vocab;
            t->byte[t->vocab++] = (unsigned char)c;
        }
    }
    return t;
}

/* Writes a byte as it should appear in a message: 'a' or \xNN. buf holds >= 8 chars. */
static const char *show_byte(unsigned char c, char *buf) {
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
        snprintf(buf, 8, "'%c'", c);
    else
        snprintf(buf, 8, "\\x%02x", c);
    return buf;
}

fg_tokenizer *fg_tokenizer_char_from_text(const void *text, size_t n) {
    if (n == 0 || !text) {
        fg_error(FG_ERR_ARG, "tokenizer: cannot build a char-level vocabulary from an empty text");
        return NULL;
    }
    unsigned char present[256] = {0};
    const unsigned char *p = text;
    for (size_t i = 0; i < n; i++) present[p[i]] = 1;
    return tok_from_present(FG_TOK_CHAR, present);
}

fg_tokenizer *fg_tokenizer_char_from_vocab(const void *vocab, size_t n) {
    if (!vocab || n == 0 || n > 256) {
        fg_error(FG_ERR_ARG, "tokenizer: a vocabulary needs 1..256 bytes, got %zu", n);
        return NULL;
    }
    unsigned char present[256] = {0};
    const unsigned char *p = vocab;
    char b[8];
    for (size_t i = 0; i < n; i++) {
        if (present[p[i]]) {
            fg_error(FG_ERR_ARG, "tokenizer: byte %s appears twice in the vocabulary (index %zu)", show_byte(p[i], b),
                     i);
            return NULL;
        }
        present[p[i]] = 1;
    }
    return tok_from_present(FG_TOK_CHAR, present);
}

fg_tokenizer *fg_tokenizer_byte(void) {
    unsigned char present[256];
    memset(present, 1, sizeof present);
    return tok_from_present(FG_TOK_BYTE, present);
}

fg_tokenizer *fg_tokenizer_clone(const fg_tokenizer *tok) {
    if (!tok) {
        fg_error(FG_ERR_ARG, "tokenizer: clone of NULL");
        return NULL;
    }
    fg_tokenizer *t = malloc(sizeof *t);
    if (!t) {
        fg_error(FG_ERR_OOM, "tokenizer: out of memory");
        return NULL;
    }
    memcpy(t, tok, sizeof *t);
    if (t->bpe) __atomic_add_fetch(&t->bpe->refs, 1, __ATOMIC_RELAXED);
    return t;
}

void fg_tokenizer_free(fg_tokenizer *tok) {
    if (tok && tok->bpe && __atomic_sub_fetch(&tok->bpe->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        fg_bpe_free(tok->bpe->bpe);
        fg_bpe_files_free(&tok->bpe->files);
        free(tok->bpe);
    }
    free(tok);
}

/* A BPE tokenizer from its files' bytes (taken over: freed on failure too). */
static fg_tokenizer *tok_from_bpe_files(fg_bpe_files *files, const char *what) {
    fg_bpe *bpe = fg_bpe_from_files(files, what);
    fg_tokenizer *t = bpe ? malloc(sizeof *t) : NULL;
    bpe_shared *sh = t ? malloc(sizeof *sh) : NULL;
    if (!sh) {
        if (bpe) fg_error(FG_ERR_OOM, "tokenizer: out of memory");
        fg_bpe_free(bpe);
        fg_bpe_files_free(files);
        free(t);
        return NULL;
    }
    sh->bpe = bpe;
    sh->files = *files;
    sh->refs = 1;
    memset(t, 0, sizeof *t);
    t->kind = FG_TOK_BPE;
    t->vocab = fg_bpe_vocab_size(bpe);
    t->bpe = sh;
    memset(t->id, -1, sizeof t->id);
    return t;
}

fg_tokenizer *fg_tokenizer_bpe_load(const char *path, const char *encoding) {
    fg_bpe_files f;
    if (fg_bpe_files_read(path, encoding, &f) != FG_OK) return NULL;
    return tok_from_bpe_files(&f, path);
}

const fg_bpe_files *fg_tokenizer_bpe_files(const fg_tokenizer *tok) { return tok && tok->bpe ? &tok->bpe->files : NULL; }
const fg_bpe *fg_tokenizer_bpe(const fg_tokenizer *tok) { return tok && tok->bpe ? tok->bpe->bpe : NULL; }

fg_tok_kind fg_tokenizer_kind(const fg_tokenizer *tok) { return tok->kind; }
int fg_tokenizer_vocab_size(const fg_tokenizer *tok) { return tok->vocab; }

int32_t fg_tokenizer_token_of(const fg_tokenizer *tok, unsigned char c) {
    if (tok->bpe) {
        int32_t *ids = NULL;
        size_t n = 0;
        int32_t id = fg_bpe_encode(tok->bpe->bpe, &c, 1, 0, &ids, &n) == FG_OK && n == 1 ? ids[0] : -1;
        free(ids);
        return id;
    }
    return tok->id[c];
}

int fg_tokenizer_byte_of(const fg_tokenizer *tok, int32_t id) {
    if (tok->bpe) {
        size_t n = 0;
        const char *b = fg_bpe_token(tok->bpe->bpe, id, &n);
        return b && n == 1 ? (unsigned char)b[0] : -1;
    }
    return (id >= 0 && id < tok->vocab) ? tok->byte[id] : -1;
}

int fg_tokenizer_token_bytes(const fg_tokenizer *tok, int32_t id) {
    if (tok->bpe) {
        size_t n = 0;
        if (fg_bpe_is_special(tok->bpe->bpe, id) || !fg_bpe_token(tok->bpe->bpe, id, &n)) return 0;
        return (int)n;
    }
    return id >= 0 && id < tok->vocab ? 1 : 0;
}

fg_status fg_tokenizer_encode_text(const fg_tokenizer *tok, const void *text, size_t n, int32_t **ids, size_t *nids) {
    if (!tok || !ids || !nids || (n > 0 && !text)) return fg_error(FG_ERR_ARG, "tokenizer: encode needs a tokenizer, text and an output");
    *ids = NULL;
    *nids = 0;
    if (tok->bpe) return fg_bpe_encode(tok->bpe->bpe, text, n, 0, ids, nids);
    int32_t *out = malloc((n ? n : 1) * sizeof *out);
    if (!out) return fg_error(FG_ERR_OOM, "tokenizer: out of memory for %zu tokens", n);
    fg_status st = fg_tokenizer_encode(tok, text, n, out);
    if (st != FG_OK) {
        free(out);
        return st;
    }
    *ids = out;
    *nids = n;
    return FG_OK;
}

fg_status fg_tokenizer_decode_text(const fg_tokenizer *tok, const int32_t *ids, size_t n, char **out, size_t *len) {
    if (!tok || !out || !len || (n > 0 && !ids)) return fg_error(FG_ERR_ARG, "tokenizer: decode needs a tokenizer, ids and an output");
    if (tok->bpe) return fg_bpe_decode(tok->bpe->bpe, ids, n, out, len);
    char *o = realloc(*out, *len + n + 1);
    if (!o) return fg_error(FG_ERR_OOM, "tokenizer: out of memory");
    *out = o;
    FG_TRY(fg_tokenizer_decode(tok, ids, n, o + *len));
    *len += n;
    o[*len] = '\0';
    return FG_OK;
}

fg_status fg_tokenizer_encode(const fg_tokenizer *tok, const void *text, size_t n, int32_t *out) {
    if (!tok || (n > 0 && (!text || !out)))
        return fg_error(FG_ERR_ARG, "tokenizer: encode needs a tokenizer, text and an output buffer");
    if (tok->bpe) return fg_error(FG_ERR_ARG, "tokenizer: a BPE tokenizer's ids are not one per byte (fg_tokenizer_encode_text)");
    const unsigned char *p = text;
    for (size_t i = 0; i < n; i++) {
        int16_t id = tok->id[p[i]];
        if (id < 0) {
            char b[8];
            return fg_error(FG_ERR_ARG, "tokenizer: byte %s at offset %zu is not in the vocabulary (%d tokens)",
                            show_byte(p[i], b), i, tok->vocab);
        }
        out[i] = id;
    }
    return FG_OK;
}

fg_status fg_tokenizer_decode(const fg_tokenizer *tok, const int32_t *ids, size_t n, char *out) {
    if (!tok || (n > 0 && (!ids || !out)))
        return fg_error(FG_ERR_ARG, "tokenizer: decode needs a tokenizer, ids and an output buffer");
    if (tok->bpe) return fg_error(FG_ERR_ARG, "tokenizer: a BPE tokenizer's tokens are not one byte each (fg_tokenizer_decode_text)");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->vocab)
            return fg_error(FG_ERR_ARG, "tokenizer: token id %d at index %zu is outside [0, %d)", (int)ids[i], i,
                            tok->vocab);
        out[i] = (char)tok->byte[ids[i]];
    }
    return FG_OK;
}

#define FG_TOK_BPE_PREFIX "bpe-v1:"

/* "bpe-v1:json:<b64>", "bpe-v1:tiktoken:<encoding>:<b64>", "bpe-v1:vocab-merges:<b64>:<b64>". */
static char *serialize_bpe(const fg_bpe_files *f) {
    const char *kind = f->kind == FG_BPE_JSON ? "json" : f->kind == FG_BPE_TIKTOKEN ? "tiktoken" : "vocab-merges";
    size_t need = strlen(FG_TOK_BPE_PREFIX) + strlen(kind) + strlen(f->encoding) + 4 + 4 * ((f->n[0] + 2) / 3) + 4 * ((f->n[1] + 2) / 3);
    char *s = malloc(need), *w = s;
    if (!s) return fg_error(FG_ERR_OOM, "tokenizer: out of memory"), NULL;
    w += sprintf(w, "%s%s:", FG_TOK_BPE_PREFIX, kind);
    if (f->kind == FG_BPE_TIKTOKEN) w += sprintf(w, "%s:", f->encoding);
    w += fg_bpe__b64_encode(f->data[0], f->n[0], w);
    if (f->kind == FG_BPE_VOCAB_MERGES) {
        *w++ = ':';
        w += fg_bpe__b64_encode(f->data[1], f->n[1], w);
    }
    *w = '\0';
    return s;
}

/* The inverse of serialize_bpe: s[0..len) after the prefix. */
static fg_tokenizer *parse_bpe(const char *s, size_t len) {
    fg_bpe_files f = {0};
    const char *end = s + len, *p = s;
    const char *colon = memchr(p, ':', len);
    if (!colon) return fg_error(FG_ERR_FORMAT, "tokenizer: a BPE tokenizer string without its kind"), NULL;
    size_t kl = (size_t)(colon - p);
    f.kind = kl == 4 && memcmp(p, "json", 4) == 0 ? FG_BPE_JSON : kl == 8 && memcmp(p, "tiktoken", 8) == 0 ? FG_BPE_TIKTOKEN
           : kl == 12 && memcmp(p, "vocab-merges", 12) == 0 ? FG_BPE_VOCAB_MERGES : 0;
    if (!f.kind) return fg_error(FG_ERR_FORMAT, "tokenizer: unknown BPE tokenizer kind '%.*s'", (int)(kl < 32 ? kl : 32), p), NULL;
    p = colon + 1;
    if (f.kind == FG_BPE_TIKTOKEN) {
        colon = memchr(p, ':', (size_t)(end - p));
        if (!colon || colon == p || (size_t)(colon - p) >= sizeof f.encoding)
            return fg_error(FG_ERR_FORMAT, "tokenizer: a tiktoken tokenizer string without its encoding"), NULL;
        memcpy(f.encoding, p, (size_t)(colon - p));
        p = colon + 1;
    }
    for (int part = 0; part < (f.kind == FG_BPE_VOCAB_MERGES ? 2 : 1); part++) {
        const char *q = part == 0 && f.kind == FG_BPE_VOCAB_MERGES ? memchr(p, ':', (size_t)(end - p)) : end;
        if (!q) q = end;
        size_t n = (size_t)(q - p);
        f.data[part] = malloc(n / 4 * 3 + 4);
        long k = f.data[part] ? fg_bpe__b64_decode(p, n, (unsigned char *)f.data[part]) : -1;
        if (k <= 0) {
            fg_bpe_files_free(&f);
            return fg_error(FG_ERR_FORMAT, "tokenizer: the BPE tokenizer's files are not canonical base64"), NULL;
        }
        f.n[part] = (size_t)k;
        p = q + (q < end);
        if (part == 0 && f.kind == FG_BPE_VOCAB_MERGES && q == end) {
            fg_bpe_files_free(&f);
            return fg_error(FG_ERR_FORMAT, "tokenizer: a vocab-merges tokenizer string without its merges"), NULL;
        }
    }
    return tok_from_bpe_files(&f, "the checkpoint's tokenizer");
}

char *fg_tokenizer_serialize(const fg_tokenizer *tok) {
    if (!tok) {
        fg_error(FG_ERR_ARG, "tokenizer: serialize of NULL");
        return NULL;
    }
    if (tok->bpe) return serialize_bpe(&tok->bpe->files);
    size_t need =
        tok->kind == FG_TOK_BYTE ? sizeof FG_TOK_BYTE_STR : strlen(FG_TOK_CHAR_PREFIX) + 2 * (size_t)tok->vocab + 1;
    char *s = malloc(need);
    if (!s) {
        fg_error(FG_ERR_OOM, "tokenizer: out of memory");
        return NULL;
    }
    if (tok->kind == FG_TOK_BYTE) {
        memcpy(s, FG_TOK_BYTE_STR, sizeof FG_TOK_BYTE_STR);
        return s;
    }
    static const char hex[] = "0123456789abcdef";
    size_t k = strlen(FG_TOK_CHAR_PREFIX);
    memcpy(s, FG_TOK_CHAR_PREFIX, k);
    for (int i = 0; i < tok->vocab; i++) {
        s[k++] = hex[tok->byte[i] >> 4];
        s[k++] = hex[tok->byte[i] & 15];
    }
    s[k] = '\0';
    return s;
}

/* Lowercase hex digit value, or -1. Uppercase is refused so that the text form is canonical. */
static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

fg_tokenizer *fg_tokenizer_parse(const char *s, size_t len) {
    if (!s && len > 0) {
        fg_error(FG_ERR_ARG, "tokenizer: parse of NULL");
        return NULL;
    }
    const size_t blen = strlen(FG_TOK_BYTE_STR), plen = strlen(FG_TOK_CHAR_PREFIX), bp = strlen(FG_TOK_BPE_PREFIX);
    if (len == blen && memcmp(s, FG_TOK_BYTE_STR, blen) == 0) return fg_tokenizer_byte();
    if (len > bp && memcmp(s, FG_TOK_BPE_PREFIX, bp) == 0) {
        if (memchr(s, '\0', len)) return fg_error(FG_ERR_FORMAT, "tokenizer: a NUL byte in the tokenizer string"), NULL;
        return parse_bpe(s + bp, len - bp);
    }
    if (len < plen || memcmp(s, FG_TOK_CHAR_PREFIX, plen) != 0) {
        fg_error(FG_ERR_FORMAT,
                 "tokenizer: unknown tokenizer string (expected \"%s\" or \"%s<hex>\", "
                 "got %zu bytes)",
                 FG_TOK_BYTE_STR, FG_TOK_CHAR_PREFIX, len);
        return NULL;
    }
    size_t h = len - plen;
    if (h == 0 || h % 2 != 0 || h > 512) {
        fg_error(FG_ERR_FORMAT,
                 "tokenizer: char vocabulary must be 2..512 hex digits, an even "
                 "number; got %zu",
                 h);
        return NULL;
    }
    unsigned char present[256] = {0};
    int prev = -1;
    for (size_t i = 0; i < h; i += 2) {
        int hi = hexval(s[plen + i]), lo = hexval(s[plen + i + 1]);
        if (hi < 0 || lo < 0) {
            fg_error(FG_ERR_FORMAT, "tokenizer: character at offset %zu is not a lowercase hex digit",
                     plen + i + (hi < 0 ? 0 : 1));
            return NULL;
        }
        int c = hi * 16 + lo;
        if (c <= prev) {
            fg_error(FG_ERR_FORMAT,
                     "tokenizer: vocabulary byte 0x%02x at offset %zu is not greater "
                     "than the one before (0x%02x): bytes must be sorted and distinct",
                     c, plen + i, prev);
            return NULL;
        }
        present[c] = 1;
        prev = c;
    }
    return tok_from_present(FG_TOK_CHAR, present);
}
