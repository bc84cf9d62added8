/* bpe.h — byte-level BPE: the tokenizers of GPT-2, Llama 3 and OpenAI's tiktoken encodings.
 *
 * Encoding takes bytes to token ids in three steps, as the reference implementations do:
 *   1. special tokens (tiktoken's allowed_special; Hugging Face's added tokens) are cut out first,
 *      leftmost match first and the longest at one position; they are never merged with anything;
 *   2. the rest is pre-tokenized with the tokenizer's own regular expression (PCRE2, JIT-compiled):
 *      every match is a piece, and so is every stretch between matches (bytes that are not valid
 *      UTF-8 are matched by nothing and so form pieces of their own);
 *   3. each piece starts as its bytes, one token each, and the adjacent pair of lowest merge rank
 *      is merged until no pair has a rank (the leftmost of equal ranks first).
 * Decoding concatenates the tokens' bytes, so decode(encode(x)) == x for any bytes x.
 *
 * Merge ranks: in a tiktoken file the rank of the pair (a, b) is the rank of the token a+b; in a
 * Hugging Face BPE it is the merge's line in `merges`. Tokens are kept as raw bytes: GPT-2's
 * byte-to-character table is applied only when a Hugging Face file is read or written.
 *
 * Files (fg_bpe_load):
 *   - a folder with tokenizer.json (a BPE model; a ByteLevel pre-tokenizer, alone or after
 *     regex Split steps with the Isolated behaviour; a ByteLevel decoder), or with vocab.json +
 *     merges.txt (GPT-2's files; its regex; <|endoftext|> special when present); a .json file
 *     names tokenizer.json itself;
 *   - a tiktoken rank file (lines "base64-token rank"), whose regex and special tokens come from
 *     its encoding's name: gpt2 / r50k_base / p50k_base, cl100k_base or o200k_base, taken from the
 *     file name unless `encoding` names it.
 * What these formats can say and this reader does not do (normalizers, add_prefix_space, other
 * models or pre-tokenizers, dropout) is refused with one line naming the key.
 *
 * A tokenizer is immutable after loading and may be shared by threads.
 */
#ifndef FG_BPE_H
#define FG_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_bpe fg_bpe;

/* Reads the tokenizer at `path` (see above). `encoding` names a tiktoken file's encoding (NULL:
 * from the file's name; given, `path` is read as a tiktoken file whatever its name). Caller frees with fg_bpe_free. NULL + fg_error (FG_ERR_IO, FG_ERR_FORMAT,
 * FG_ERR_ARG) on failure; a build without PCRE2 refuses every tokenizer with one line. */
fg_bpe *fg_bpe_load(const char *path, const char *encoding);

/* The bytes of a tokenizer's file(s) as read: what a checkpoint keeps to build it again. */
typedef enum { FG_BPE_JSON = 1, FG_BPE_TIKTOKEN = 2, FG_BPE_VOCAB_MERGES = 3 } fg_bpe_kind;
typedef struct {
    fg_bpe_kind kind;
    char encoding[16]; /* a tiktoken file's encoding */
    char *data[2];     /* tokenizer.json, the rank file, or vocab.json and merges.txt (malloc'd) */
    size_t n[2];
} fg_bpe_files;

/* Reads the file(s) of the tokenizer at `path` (as fg_bpe_load finds them) into *f; caller frees
 * with fg_bpe_files_free. FG_OK, or an error and *f empty. */
fg_status fg_bpe_files_read(const char *path, const char *encoding, fg_bpe_files *f);
void fg_bpe_files_free(fg_bpe_files *f);
/* The tokenizer of those bytes (`what` names it in messages). NULL + fg_error. */
fg_bpe *fg_bpe_from_files(const fg_bpe_files *f, const char *what);

/* The same from a file's bytes data[0..n): a tiktoken rank file when `encoding` names its
 * encoding, else a tokenizer.json. `what` names it in messages. */
fg_bpe *fg_bpe_from_memory(const void *data, size_t n, const char *encoding, const char *what);

void fg_bpe_free(fg_bpe *t);

/* Token ids run over [0, fg_bpe_vocab_size) (some ids inside may be unused, as in cl100k_base). */
int32_t fg_bpe_vocab_size(const fg_bpe *t);

/* The id of the special token whose text is `text`, or -1. */
int32_t fg_bpe_special_id(const fg_bpe *t, const char *text);

/* The regular expression the pre-tokenizer uses, as the file or encoding gives it. Owned by t. */
const char *fg_bpe_pattern(const fg_bpe *t);

/* Encodes text[0..n): *ids (caller frees with free()) gets *nids ids. allow_special: 1 cuts out
 * every special token, 0 encodes their text as ordinary text (tiktoken's encode_ordinary; added
 * tokens that are not special are cut out either way, as Hugging Face does). FG_ERR_OOM or
 * FG_ERR_ARG on failure. */
fg_status fg_bpe_encode(const fg_bpe *t, const void *text, size_t n, int allow_special, int32_t **ids, size_t *nids);

/* Appends the bytes of ids[0..n) to *out (caller frees; *out may be NULL with *len 0 to start).
 * An id outside the vocabulary, or an unused one, is FG_ERR_ARG naming it. */
fg_status fg_bpe_decode(const fg_bpe *t, const int32_t *ids, size_t n, char **out, size_t *len);

/* The bytes of one token (a view into t), or NULL for an id outside the vocabulary or unused. */
const char *fg_bpe_token(const fg_bpe *t, int32_t id, size_t *len);
/* 1 when id is one of t's special tokens (<|endoftext|>, ...), else 0. */
int fg_bpe_is_special(const fg_bpe *t, int32_t id);

#ifdef __cplusplus
}
#endif
#endif /* FG_BPE_H */
