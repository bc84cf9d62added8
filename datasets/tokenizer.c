/* tokenizer.c — char-level and byte-level tokenizers (see tokenizer.h for the text format). */
#include "datasets/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fg_tokenizer {
    fg_tok_kind kind;
    int vocab;               /* 1..256 */
    unsigned char byte[256]; /* byte[id], strictly increasing in id */
    int16_t id[256];         /* id[byte], -1 when the byte is not in the vocabulary */
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
    return t;
}

void fg_tokenizer_free(fg_tokenizer *tok) { free(tok); }

fg_tok_kind fg_tokenizer_kind(const fg_tokenizer *tok) { return tok->kind; }
int fg_tokenizer_vocab_size(const fg_tokenizer *tok) { return tok->vocab; }

int32_t fg_tokenizer_token_of(const fg_tokenizer *tok, unsigned char c) { return tok->id[c]; }

int fg_tokenizer_byte_of(const fg_tokenizer *tok, int32_t id) {
    return (id >= 0 && id < tok->vocab) ? tok->byte[id] : -1;
}

fg_status fg_tokenizer_encode(const fg_tokenizer *tok, const void *text, size_t n, int32_t *out) {
    if (!tok || (n > 0 && (!text || !out)))
        return fg_error(FG_ERR_ARG, "tokenizer: encode needs a tokenizer, text and an output buffer");
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
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->vocab)
            return fg_error(FG_ERR_ARG, "tokenizer: token id %d at index %zu is outside [0, %d)", (int)ids[i], i,
                            tok->vocab);
        out[i] = (char)tok->byte[ids[i]];
    }
    return FG_OK;
}

char *fg_tokenizer_serialize(const fg_tokenizer *tok) {
    if (!tok) {
        fg_error(FG_ERR_ARG, "tokenizer: serialize of NULL");
        return NULL;
    }
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
    const size_t blen = strlen(FG_TOK_BYTE_STR), plen = strlen(FG_TOK_CHAR_PREFIX);
    if (len == blen && memcmp(s, FG_TOK_BYTE_STR, blen) == 0) return fg_tokenizer_byte();
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
