/* tokenizer.h — the tokenizers of text models (character-level, byte-level and BPE), and their
 * text form for checkpoints.
 *
 * The char and byte kinds map one byte of text to one token, so a text of n bytes encodes to
 * exactly n tokens and decodes back to the same n bytes; a BPE tokenizer (datasets/bpe.h) maps
 * pieces of text to tokens (fg_tokenizer_encode_text / _decode_text serve every kind).
 *   - char-level: the vocabulary is the sorted set of distinct bytes of a training text; token i is
 *     the i-th smallest such byte. A byte not in the vocabulary cannot be encoded (an error, not a
 *     silent substitution). Multi-byte UTF-8 characters become several tokens, so a model can
 *     sample a byte sequence that is not valid UTF-8 (the name says "char"; the unit is the byte).
 *   - byte-level: vocabulary 0..255, token i is byte i. Encodes anything.
 *
 * A tokenizer is stored with a checkpoint as one printable ASCII string (safetensors __metadata__):
 *   "byte-v1"                 the byte-level tokenizer
 *   "char-v1:<hex>"           a char-level tokenizer; <hex> is its vocabulary, two lowercase hex
 *                             digits per byte, in strictly increasing byte order, 1..256 bytes.
 *   "bpe-v1:json:<b64>"       a BPE tokenizer: its tokenizer.json in base64,
 *   "bpe-v1:tiktoken:<encoding>:<b64>"        or its tiktoken rank file and the encoding's name,
 *   "bpe-v1:vocab-merges:<b64>:<b64>"         or its vocab.json and merges.txt.
 * Hex makes the string safe for JSON and C strings whatever the vocabulary holds (quotes,
 * backslashes, newlines, NUL). fg_tokenizer_parse accepts exactly the strings that
 * fg_tokenizer_serialize produces (so serialize(parse(s)) == s for every accepted s) and rejects
 * everything else with FG_ERR_FORMAT. The parser reads only the `len` bytes it is given, allocates
 * nothing before the input is validated, and never crashes on any input (it is a fuzz target).
 *
 * Tokens are int32_t, matching the targets of fg_cross_entropy.
 */
#ifndef FG_TOKENIZER_H
#define FG_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "datasets/bpe.h"
#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    FG_TOK_CHAR = 0, /* vocabulary = distinct bytes of a training text */
    FG_TOK_BYTE = 1, /* vocabulary = all 256 byte values */
    FG_TOK_BPE = 2,  /* byte-level BPE (datasets/bpe.h) */
    FG_TOK_KIND_COUNT
} fg_tok_kind;

/* Opaque. Immutable after creation, so one tokenizer may be shared by threads. */
typedef struct fg_tokenizer fg_tokenizer;

/* A char-level tokenizer whose vocabulary is the distinct bytes of text[0..n). Any byte value is
 * allowed (validation of "is this text?" is the text dataset's job). n == 0 is FG_ERR_ARG (an empty
 * vocabulary). Caller frees with fg_tokenizer_free. NULL + fg_error on failure. */
fg_tokenizer *fg_tokenizer_char_from_text(const void *text, size_t n);

/* A char-level tokenizer with exactly the given vocabulary: `vocab` holds n distinct bytes in any
 * order (they are sorted); 1 <= n <= 256. Duplicates are FG_ERR_ARG. Caller frees. */
fg_tokenizer *fg_tokenizer_char_from_vocab(const void *vocab, size_t n);

/* The byte-level tokenizer (vocab 256). Caller frees. */
fg_tokenizer *fg_tokenizer_byte(void);

/* The BPE tokenizer at `path` (a folder with tokenizer.json or vocab.json + merges.txt, a
 * tokenizer.json, or a .tiktoken file; `encoding` names a tiktoken file's encoding, NULL: from its
 * name), keeping its files' bytes for the checkpoint. Caller frees. NULL + fg_error. */
fg_tokenizer *fg_tokenizer_bpe_load(const char *path, const char *encoding);

/* A BPE tokenizer's files (as read), or NULL for the other kinds. Borrowed. */
const fg_bpe_files *fg_tokenizer_bpe_files(const fg_tokenizer *tok);
/* A BPE tokenizer's encoder, or NULL for the other kinds. Borrowed. */
const fg_bpe *fg_tokenizer_bpe(const fg_tokenizer *tok);

/* A copy (a BPE tokenizer's tables are shared, read-only). Caller frees. */
fg_tokenizer *fg_tokenizer_clone(const fg_tokenizer *tok);

/* Frees tok; NULL is a no-op. */
void fg_tokenizer_free(fg_tokenizer *tok);

fg_tok_kind fg_tokenizer_kind(const fg_tokenizer *tok);
/* Number of tokens: 1..256 (char, byte), up to 2^24 (BPE). */
int fg_tokenizer_vocab_size(const fg_tokenizer *tok);

/* The token of byte c, or -1 when c is not in the vocabulary (BPE: the token of that one byte). */
int32_t fg_tokenizer_token_of(const fg_tokenizer *tok, unsigned char c);
/* The byte of token id, or -1 when id is outside [0, vocab_size) (BPE: -1 unless the token is one
 * byte). */
int fg_tokenizer_byte_of(const fg_tokenizer *tok, int32_t id);
/* How many bytes of text token id stands for: 1 for a char- or byte-level token, the length of a
 * BPE token's bytes; 0 for a special token (<|endoftext|>: no text), an unused id or one outside
 * the vocabulary. The denominator of bits per byte (nanochat's token_bytes). */
int fg_tokenizer_token_bytes(const fg_tokenizer *tok, int32_t id);

/* Any kind: the ids of text[0..n) into *ids (caller frees with free()), *nids of them (BPE: special
 * tokens in the text are ordinary text). A char-level tokenizer refuses a byte outside its
 * vocabulary as fg_tokenizer_encode does. */
fg_status fg_tokenizer_encode_text(const fg_tokenizer *tok, const void *text, size_t n, int32_t **ids, size_t *nids);
/* Any kind: the bytes of ids[0..n) appended to *out (caller frees; *out may start NULL with *len
 * 0); NUL-terminated after *len. An id outside the vocabulary is FG_ERR_ARG naming it. */
fg_status fg_tokenizer_decode_text(const fg_tokenizer *tok, const int32_t *ids, size_t n, char **out, size_t *len);

/* Char and byte kinds: encodes text[0..n) into out[0..n) (one token per byte; caller owns out, n slots).
 * A byte outside the vocabulary is FG_ERR_ARG; the message names the byte (printable or \xNN) and
 * its offset; out is then partly written. */
fg_status fg_tokenizer_encode(const fg_tokenizer *tok, const void *text, size_t n, int32_t *out);

/* Char and byte kinds: decodes ids[0..n) into out[0..n) bytes (caller owns out, n bytes; no NUL is appended).
 * An id outside [0, vocab_size) is FG_ERR_ARG naming the id and its index. */
fg_status fg_tokenizer_decode(const fg_tokenizer *tok, const int32_t *ids, size_t n, char *out);

/* The checkpoint string (format above): malloc'd, NUL-terminated, printable ASCII; caller frees
 * with free(). NULL + fg_error only if memory runs out. */
char *fg_tokenizer_serialize(const fg_tokenizer *tok);

/* Parses s[0..len) (need not be NUL-terminated; a NUL byte inside is malformed). Malformed input
 * is FG_ERR_FORMAT with a message saying what is wrong and where. Caller frees the result. */
fg_tokenizer *fg_tokenizer_parse(const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* FG_TOKENIZER_H */
