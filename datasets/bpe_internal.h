/* bpe_internal.h — what the BPE tokenizer (bpe.c) shares with its trainer (bpe_train.c): the
 * pre-tokenizer's regex and GPT-2's byte-to-character table. Private to datasets/. */
#ifndef FG_BPE_INTERNAL_H
#define FG_BPE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A compiled pre-tokenizer pattern (PCRE2 with Unicode properties, \s as Unicode's White_Space),
 * read as tiktoken's engine reads it, or with onig as Hugging Face's (Oniguruma, Ruby syntax).
 * NULL + fg_error when it does not compile, or without PCRE2. `what` names it in messages. */
typedef struct fg_bpe__regex fg_bpe__regex;
fg_bpe__regex *fg_bpe__regex_compile(const char *pattern, int onig, const char *what);
void fg_bpe__regex_free(fg_bpe__regex *re);

/* Calls fn on every piece of text[0..n) in order: each match, and each stretch between matches;
 * the pieces cover the text exactly. Stops at the first status fn returns other than FG_OK. */
typedef fg_status (*fg_bpe__piece_fn)(const unsigned char *piece, size_t n, void *ctx);
fg_status fg_bpe__pieces(const fg_bpe__regex *re, const unsigned char *text, size_t n, fg_bpe__piece_fn fn, void *ctx);

/* The pattern of a tiktoken encoding ("gpt2", "r50k_base", "p50k_base", "cl100k_base",
 * "o200k_base"), or NULL. */
const char *fg_bpe__named_pattern(const char *name);

/* GPT-2's byte-to-character table: cp_of[b] is the code point that stands for byte b. */
void fg_bpe__byte_chars(uint32_t cp_of[256]);

/* A 64-bit finalizer (MurmurHash3's): spreads a pair of ids over a hash table. */
static inline uint64_t fg_bpe__mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* Standard base64 with '=' padding: the encoder writes 4 * ceil(n / 3) characters to out; the
 * decoder takes only what an encoder writes (n a nonzero multiple of 4, padding bits zero) and
 * returns the byte count written to out (at most 3 n / 4), or -1. */
size_t fg_bpe__b64_encode(const void *data, size_t n, char *out);
long fg_bpe__b64_decode(const char *s, size_t n, unsigned char *out);

#ifdef __cplusplus
}
#endif
#endif /* FG_BPE_INTERNAL_H */
