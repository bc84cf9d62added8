/* json.h — a strict JSON reader (RFC 8259) for the documents flashgrad reads whole: tokenizer files
 * (tokenizer.json, vocab.json), Hugging Face config files and safetensors headers.
 *
 * fg_json_parse reads a document into a tree that the document owns. Strict means: exactly one
 * value with only whitespace around it; strings of valid UTF-8 without raw control characters,
 * escapes decoded (\uXXXX surrogate pairs joined; a lone surrogate is an error); a repeated key in
 * one object is an error (a later value must never silently replace an earlier one); numbers as
 * the grammar writes them (no leading zeros, no "+", no "NaN"); nesting at most FG_JSON_MAX_DEPTH.
 * An error names the document, what was expected, and the byte, line and column where it was not
 * found. Parsing takes time and memory in proportion to the text (no recursion past the depth
 * limit, duplicate keys found by sorting).
 *
 * Strings are kept decoded, NUL-terminated, with their length (a string may hold "\u0000").
 */
#ifndef FG_JSON_H
#define FG_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FG_JSON_MAX_DEPTH 128

typedef enum { FG_JSON_NULL, FG_JSON_FALSE, FG_JSON_TRUE, FG_JSON_NUMBER, FG_JSON_STRING, FG_JSON_ARRAY, FG_JSON_OBJECT } fg_json_kind;

/* One value. For FG_JSON_STRING, str/len is the decoded string; for FG_JSON_NUMBER, str/len is
 * the number's text as written; for arrays and objects, items[0..len) are the elements (in an
 * object each item's key/key_len names it, in the document's order). key is NULL outside objects. */
typedef struct fg_json fg_json;
struct fg_json {
    fg_json_kind kind;
    uint32_t len;
    uint32_t key_len;
    const char *key;
    const char *str;
    const fg_json *items;
    size_t at; /* the byte of the text where the value starts */
};

typedef struct fg_json_doc fg_json_doc;

/* Parses text[0..n). `what` names the document in messages ("tokenizer.json"). On success *doc
 * (caller frees with fg_json_free) holds the tree; else FG_ERR_FORMAT (FG_ERR_OOM) with the reason,
 * and *doc is NULL. */
fg_status fg_json_parse(const char *text, size_t n, const char *what, fg_json_doc **doc);

/* Why a parse failed, for a caller that words its own messages (the safetensors reader). */
typedef enum {
    FG_JSON_FAULT_NONE = 0,
    FG_JSON_FAULT_OOM,
    FG_JSON_FAULT_UNTERMINATED, /* at: the string's opening quote */
    FG_JSON_FAULT_CONTROL,      /* a raw control character in a string */
    FG_JSON_FAULT_UTF8,         /* invalid UTF-8 in a string */
    FG_JSON_FAULT_BAD_U,        /* at: a \u not followed by 4 hex digits */
    FG_JSON_FAULT_SURROGATE,    /* at: the \u of an unpaired surrogate */
    FG_JSON_FAULT_ESCAPE,       /* at: an unknown escape's backslash */
    FG_JSON_FAULT_VALUE,        /* expected a value */
    FG_JSON_FAULT_KEY,          /* expected a key (a string) */
    FG_JSON_FAULT_COLON,        /* expected ':' */
    FG_JSON_FAULT_COMMA,        /* expected ',' or the container's close (see `close`) */
    FG_JSON_FAULT_LEADING_ZERO,
    FG_JSON_FAULT_DIGIT,        /* expected a digit after '.' or in an exponent */
    FG_JSON_FAULT_DEPTH,        /* nesting deeper than FG_JSON_MAX_DEPTH */
    FG_JSON_FAULT_TOO_BIG,      /* a string of 4 GiB or a container of 4 billion items */
    FG_JSON_FAULT_BOM,          /* a byte-order mark before the document */
    FG_JSON_FAULT_TRAILING,     /* text after the document's end */
    FG_JSON_FAULT_REPEATED_KEY, /* `key` twice in one object; at: the object's closing brace */
} fg_json_fault;

typedef struct {
    fg_json_fault fault;
    size_t at;       /* byte of the text */
    int depth;       /* containers open around `at` (0: outside the top value) */
    int has_owner;   /* the innermost open container is a member of an object... */
    char owner[256]; /* ...under this key (decoded, cut short if longer) */
    char key[256];   /* FG_JSON_FAULT_REPEATED_KEY: the key (decoded, cut short if longer) */
    char close;      /* FG_JSON_FAULT_COMMA: '}' or ']' */
} fg_json_error;

/* fg_json_parse, and when it fails and err is not NULL, *err says where and why (the message of
 * fg_last_error is set as by fg_json_parse). */
fg_status fg_json_parse_ex(const char *text, size_t n, const char *what, fg_json_doc **doc, fg_json_error *err);

/* The top value; owned by doc. */
const fg_json *fg_json_root(const fg_json_doc *doc);

/* Frees the document and every value in it; NULL is a no-op. */
void fg_json_free(fg_json_doc *doc);

/* The member `key` of an object, or NULL (also when obj is NULL or not an object). */
const fg_json *fg_json_get(const fg_json *obj, const char *key);

/* 1 and *out when v is a number written as an integer (no fraction, no exponent) within int64;
 * else 0. */
int fg_json_int64(const fg_json *v, int64_t *out);

/* 1 and *out when v is a number whose value is finite as a double; else 0. */
int fg_json_double(const fg_json *v, double *out);

/* 1 when v is a string equal to s, else 0. */
int fg_json_is(const fg_json *v, const char *s);

/* A short name of the kind ("object", "string", ...), for messages. */
const char *fg_json_kind_name(fg_json_kind k);

#ifdef __cplusplus
}
#endif
#endif /* FG_JSON_H */
