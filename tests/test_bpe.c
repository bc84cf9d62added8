/* test_bpe.c — byte-level BPE (datasets/bpe.h) and the strict JSON reader (tensor/json.h).
 *
 * The merge loop is checked against a plain quadratic reference written here from the definition
 * (merge the adjacent pair of lowest rank, leftmost first, until none has a rank), on random merge
 * tables in both formats; GPT-2's byte-to-character table is written here from its definition too.
 * The ids of real tokenizers are compared with Hugging Face `tokenizers`, `transformers` and
 * `bpe-openai` by tests/bpe_check.py where FG_TORCH_PYTHON has them. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "datasets/bpe.h"
#include "datasets/bpe_train.h"
#include "datasets/text.h"
#include "datasets/tokenizer.h"
#include "tensor/fileio.h"
#include "tensor/json.h"
#include "tests/common.h"

TestSuite(bpe);
TestSuite(json);

/* ---- the JSON reader ---- */

Test(json, strict_documents_parse_and_everything_else_is_refused_with_a_place) {
    static const struct {
        const char *text, *err; /* err NULL: must parse */
    } cases[] = {
        {"{\"a\": [1, -2.5e3, true, false, null, \"x\"]}", NULL},
        {"  [] ", NULL},
        {"\"\\u00e9\\ud83d\\ude00\\n\\\"\"", NULL},
        {"0", NULL},
        {"-0.0e+1", NULL},
        {"", "found the end"},
        {"{", "expected a key"},
        {"[1,]", "expected a value"},
        {"{\"a\":1,}", "expected a key"},
        {"[01]", "leading zero"},
        {"[1.]", "digit after '.'"},
        {"[1e]", "digit in an exponent"},
        {"[+1]", "expected a value"},
        {"[NaN]", "expected a value"},
        {"[tru]", "expected a value"},
        {"\"\\ud800\"", "unpaired surrogate"},
        {"\"\\udc00x\"", "unpaired surrogate"},
        {"\"a\tb\"", "raw control character"},
        {"\"\\x\"", "unknown escape"},
        {"\"\\u12g4\"", "bad \\u escape"},
        {"\"\xc3\x28\"", "invalid UTF-8"},
        {"\"\xed\xa0\x80\"", "invalid UTF-8"},
        {"\"abc", "never ends"},
        {"{\"a\":1,\"a\":2}", "the key \"a\" twice"},
        {"{\"k0\":0,\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9,\"k3\":0}", "the key \"k3\" twice"},
        {"[] []", "text after the document's end"},
        {"\xef\xbb\xbf{}", "byte-order mark"},
        {"{\"a\" 1}", "expected ':'"},
        {"[1 2]", "expected ',' or ']'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fg_json_doc *d = NULL;
        fg_status st = fg_json_parse(cases[i].text, strlen(cases[i].text), "doc.json", &d);
        if (!cases[i].err) {
            cr_expect_eq(st, FG_OK, "case %zu '%s': %s", i, cases[i].text, fg_last_error());
        } else {
            cr_expect_eq(st, FG_ERR_FORMAT, "case %zu '%s' parsed", i, cases[i].text);
            cr_expect(d == NULL);
            cr_expect(strstr(fg_last_error(), cases[i].err) && strstr(fg_last_error(), "doc.json: ") && strstr(fg_last_error(), " at byte "),
                      "case %zu '%s': '%s' lacks '%s'", i, cases[i].text, fg_last_error(), cases[i].err);
        }
        fg_json_free(d);
    }
    /* nesting: 128 levels parse, 129 do not */
    char deep[300];
    for (int depth = 128; depth <= 129; depth++) {
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        fg_json_doc *d = NULL;
        fg_status st = fg_json_parse(deep, 2 * (size_t)depth, "deep", &d);
        cr_expect_eq(st, depth == 128 ? FG_OK : FG_ERR_FORMAT, "depth %d: %s", depth, fg_last_error());
        fg_json_free(d);
    }
}

Test(json, values_come_back_decoded_with_their_lengths) {
    const char *text = "{\"s\": \"a\\u0000b\\u00e9\\ud83d\\ude00\\/\", \"i\": -9223372036854775808, \"big\": 9223372036854775808,"
                       " \"f\": 2.5e-3, \"arr\": [1, {\"x\": []}], \"line\":\n \"\"}";
    fg_json_doc *d;
    cr_assert_eq(fg_json_parse(text, strlen(text), "t", &d), FG_OK, "%s", fg_last_error());
    const fg_json *r = fg_json_root(d), *s = fg_json_get(r, "s");
    const char want[] = "a\0b\xc3\xa9\xf0\x9f\x98\x80/";
    cr_assert(s && s->kind == FG_JSON_STRING);
    cr_expect_eq(s->len, sizeof want - 1);
    cr_expect(memcmp(s->str, want, sizeof want - 1) == 0 && s->str[s->len] == '\0');
    int64_t i;
    cr_expect(fg_json_int64(fg_json_get(r, "i"), &i) && i == INT64_MIN);
    cr_expect(!fg_json_int64(fg_json_get(r, "big"), &i), "2^63 is not an int64");
    cr_expect(!fg_json_int64(fg_json_get(r, "f"), &i), "2.5e-3 is not an integer");
    double f;
    cr_expect(fg_json_double(fg_json_get(r, "f"), &f) && f == 2.5e-3);
    const fg_json *arr = fg_json_get(r, "arr");
    cr_expect(arr && arr->kind == FG_JSON_ARRAY && arr->len == 2 && arr->items[1].kind == FG_JSON_OBJECT);
    cr_expect(fg_json_get(&arr->items[1], "x")->kind == FG_JSON_ARRAY);
    cr_expect_null(fg_json_get(r, "missing"));
    cr_expect_eq(r->len, 6);
    fg_json_free(d);
}

/* ---- a tokenizer.json made here ---- */

/* GPT-2's byte-to-character table, from its definition: the printable Latin-1 bytes stand for
 * themselves, the other 68 take U+0100 onwards in increasing order. Writes b's character as UTF-8
 * (JSON-escaped where JSON needs it); returns its length. */
static size_t byte_char(unsigned b, char *out) {
    unsigned cp = b, k = 0;
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    if (!printable) {
        for (unsigned x = 0; x < b; x++)
            k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255));
        cp = 256 + k;
    }
    if (cp == '"' || cp == '\\') return out[0] = '\\', out[1] = (char)cp, 2;
    if (cp < 0x80) return out[0] = (char)cp, 1;
    out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

static size_t token_json(const unsigned char *b, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += byte_char(b[i], out + k);
    return k;
}

typedef struct {
    unsigned char bytes[64][16];
    size_t len[64];
    int n;          /* tokens past the 256 bytes: ids 256 .. 256 + n */
    int ml[64], mr[64]; /* merges: token ids */
    int nm;
} table;

static int find_token(const table *t, const unsigned char *b, size_t n) {
    if (n == 1) return b[0];
    for (int i = 0; i < t->n; i++)
        if (t->len[i] == n && memcmp(t->bytes[i], b, n) == 0) return 256 + i;
    return -1;
}
static const unsigned char *tok_bytes(const table *t, int id, size_t *n, unsigned char *one) {
    if (id < 256) return *n = 1, one[0] = (unsigned char)id, one;
    return *n = t->len[id - 256], t->bytes[id - 256];
}

/* Random merges over the letters of `alpha`: each joins two tokens made so far into a new one. */
static void random_table(table *t, const char *alpha, int merges, uint64_t seed) {
    memset(t, 0, sizeof *t);
    uint64_t s = seed;
    int na = (int)strlen(alpha);
    while (t->nm < merges) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        int pool = na + t->n;
        int a = (int)((s >> 33) % (uint64_t)pool), b = (int)((s >> 13) % (uint64_t)pool);
        int ia = a < na ? (unsigned char)alpha[a] : 256 + a - na, ib = b < na ? (unsigned char)alpha[b] : 256 + b - na;
        unsigned char one_a[1], one_b[1], cat[32];
        size_t la, lb;
        const unsigned char *pa = tok_bytes(t, ia, &la, one_a), *pb = tok_bytes(t, ib, &lb, one_b);
        if (la + lb > 16) continue;
        memcpy(cat, pa, la);
        memcpy(cat + la, pb, lb);
        int dup = 0;
        for (int m = 0; m < t->nm; m++) dup |= t->ml[m] == ia && t->mr[m] == ib;
        if (dup) continue;
        if (find_token(t, cat, la + lb) < 0) {
            memcpy(t->bytes[t->n], cat, la + lb);
            t->len[t->n++] = la + lb;
        }
        t->ml[t->nm] = ia, t->mr[t->nm] = ib;
        t->nm++;
    }
}

/* tokenizer.json text: vocab ids 0..255 are the bytes, then the table's tokens; `pre` is the
 * pre_tokenizer JSON; "<|endoftext|>" is an added special token after them. */
static char *hf_json(const table *t, const char *pre, const char *extra_model) {
    size_t cap = 1 << 20, k = 0;
    char *o = malloc(cap);
    k += (size_t)sprintf(o + k, "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":%d,\"content\":\"<|endoftext|>\",\"single_word\":false,"
                                "\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],\"normalizer\":null,"
                                "\"pre_tokenizer\":%s,\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
                                "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null%s,\"vocab\":{",
                         256 + t->n, pre, extra_model);
    for (int id = 0; id < 256 + t->n; id++) {
        unsigned char one[1];
        size_t n;
        const unsigned char *b = tok_bytes(t, id, &n, one);
        o[k++] = id ? ',' : ' ';
        o[k++] = '"';
        k += token_json(b, n, o + k);
        k += (size_t)sprintf(o + k, "\":%d", id);
    }
    k += (size_t)sprintf(o + k, "},\"merges\":[");
    for (int m = 0; m < t->nm; m++) {
        unsigned char one[1];
        size_t n;
        const unsigned char *b;
        o[k++] = m ? ',' : ' ';
        o[k++] = '"';
        b = tok_bytes(t, t->ml[m], &n, one);
        k += token_json(b, n, o + k);
        o[k++] = ' ';
        b = tok_bytes(t, t->mr[m], &n, one);
        k += token_json(b, n, o + k);
        o[k++] = '"';
    }
    k += (size_t)sprintf(o + k, "]}}");
    return o;
}

/* The reference: Hugging Face's rank of a pair is its merge's index. */
static int hf_rank(const table *t, int a, int b) {
    for (int m = 0; m < t->nm; m++)
        if (t->ml[m] == a && t->mr[m] == b) return m;
    return -1;
}

/* The quadratic reference of one piece: ids of b[0..n) after every merge, ranks from rank_of. */
static size_t reference_bpe(const table *t, const unsigned char *b, size_t n, int (*rank_of)(const table *, int, int), int *out) {
    size_t k = n;
    for (size_t i = 0; i < n; i++) out[i] = b[i];
    for (;;) {
        int best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < k; i++) {
            int r = rank_of(t, out[i], out[i + 1]);
            if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
        }
        if (best < 0) return k;
        unsigned char one_a[1], one_b[1], cat[64];
        size_t la, lb;
        const unsigned char *pa = tok_bytes(t, out[at], &la, one_a), *pb = tok_bytes(t, out[at + 1], &lb, one_b);
        memcpy(cat, pa, la);
        memcpy(cat + la, pb, lb);
        out[at] = find_token(t, cat, la + lb);
        memmove(out + at + 1, out + at + 2, (k - at - 2) * sizeof *out);
        k--;
    }
}

/* tiktoken's rank of a pair: the rank (here the id) of the joined token. */
static int tt_rank(const table *t, int a, int b) {
    unsigned char one_a[1], one_b[1], cat[64];
    size_t la, lb;
    const unsigned char *pa = tok_bytes(t, a, &la, one_a), *pb = tok_bytes(t, b, &lb, one_b);
    memcpy(cat, pa, la);
    memcpy(cat + la, pb, lb);
    return find_token(t, cat, la + lb);
}

static void random_text(unsigned char *b, size_t n, const char *alpha, uint64_t *s) {
    for (size_t i = 0; i < n; i++) {
        *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
        b[i] = (unsigned char)alpha[(*s >> 33) % strlen(alpha)];
    }
}

Test(bpe, hugging_face_merges_match_the_quadratic_reference) {
    for (uint64_t seed = 1; seed <= 12; seed++) {
        table t;
        random_table(&t, "abc", 40, seed);
        /* no regex: the whole text is one piece, so every merge is reachable */
        char *js = hf_json(&t, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}", "");
        fg_bpe *tok = fg_bpe_from_memory(js, strlen(js), NULL, "made.json");
        cr_assert(tok, "seed %llu: %s", (unsigned long long)seed, fg_last_error());
        cr_expect_eq(fg_bpe_vocab_size(tok), 256 + t.n + 1);
        uint64_t s = seed * 977;
        for (int trial = 0; trial < 40; trial++) {
            unsigned char text[300];
            size_t n = 1 + (size_t)trial * 7 % 299;
            random_text(text, n, "abc", &s);
            int want[300];
            size_t nw = reference_bpe(&t, text, n, hf_rank, want);
            int32_t *ids;
            size_t nids;
            cr_assert_eq(fg_bpe_encode(tok, text, n, 1, &ids, &nids), FG_OK, "%s", fg_last_error());
            cr_assert_eq(nids, nw, "seed %llu trial %d: %zu ids, the reference %zu", (unsigned long long)seed, trial, nids, nw);
            for (size_t i = 0; i < nw; i++) cr_assert_eq(ids[i], want[i], "seed %llu trial %d id %zu", (unsigned long long)seed, trial, i);
            free(ids);
        }
        fg_bpe_free(tok);
        free(js);
    }
}

/* A tiktoken rank file of the table: the 256 bytes at ranks 0..255, the tokens after. */
static char *tiktoken_text(const table *t, size_t *len) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(1 << 16);
    size_t k = 0;
    for (int id = 0; id < 256 + t->n; id++) {
        unsigned char one[1];
        size_t n;
        const unsigned char *b = tok_bytes(t, id, &n, one);
        for (size_t i = 0; i < n; i += 3) {
            uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
            o[k++] = b64[v >> 18], o[k++] = b64[(v >> 12) & 63];
            o[k++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
            o[k++] = i + 2 < n ? b64[v & 63] : '=';
        }
        k += (size_t)sprintf(o + k, " %d\n", id);
    }
    *len = k;
    return o;
}

Test(bpe, tiktoken_ranks_match_the_quadratic_reference) {
    for (uint64_t seed = 1; seed <= 12; seed++) {
        table t;
        random_table(&t, "abc", 40, seed + 100);
        size_t n;
        char *tt = tiktoken_text(&t, &n);
        fg_bpe *tok = fg_bpe_from_memory(tt, n, "gpt2", "made.tiktoken");
        cr_assert(tok, "%s", fg_last_error());
        uint64_t s = seed * 31;
        for (int trial = 0; trial < 40; trial++) {
            unsigned char text[300];
            size_t len = 1 + (size_t)trial * 11 % 299;
            random_text(text, len, "abc", &s); /* letters only: GPT-2's regex gives one piece */
            int want[300];
            size_t nw = find_token(&t, text, len) >= 0 ? (want[0] = find_token(&t, text, len), 1)
                                                        : reference_bpe(&t, text, len, tt_rank, want);
            int32_t *ids;
            size_t nids;
            cr_assert_eq(fg_bpe_encode(tok, text, len, 0, &ids, &nids), FG_OK, "%s", fg_last_error());
            cr_assert_eq(nids, nw, "seed %llu trial %d: %zu ids, the reference %zu", (unsigned long long)seed, trial, nids, nw);
            for (size_t i = 0; i < nw; i++) cr_assert_eq(ids[i], want[i], "seed %llu trial %d id %zu", (unsigned long long)seed, trial, i);
            free(ids);
        }
        fg_bpe_free(tok);
        free(tt);
    }
}

/* Tokens bc < ab < cd < abcd: merging "abcd" stops at a|bc|d (no token joins those), while the
 * whole piece is a token. tiktoken and Hugging Face's ignore_merges take the whole piece. */
Test(bpe, a_piece_that_is_a_token_is_taken_whole_where_the_format_says_so) {
    table t;
    memset(&t, 0, sizeof t);
    const char *tok[] = {"bc", "ab", "cd", "abcd"};
    for (int i = 0; i < 4; i++) memcpy(t.bytes[i], tok[i], t.len[i] = strlen(tok[i]));
    t.n = 4;
    int ml[] = {'b', 'a', 'c', 257}, mr[] = {'c', 'b', 'd', 258};
    for (int i = 0; i < 4; i++) t.ml[i] = ml[i], t.mr[i] = mr[i];
    t.nm = 4;
    const int32_t merged[] = {'a', 256, 'd'}, whole[] = {259};
    struct {
        const char *name;
        fg_bpe *tok;
        const int32_t *want;
        size_t n;
    } cases[3];
    size_t tn;
    char *tt = tiktoken_text(&t, &tn);
    const char *pre = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";
    char *plain = hf_json(&t, pre, ""), *ign = hf_json(&t, pre, ",\"ignore_merges\":true");
    cases[0].name = "tiktoken", cases[0].tok = fg_bpe_from_memory(tt, tn, "r50k_base", "t"), cases[0].want = whole, cases[0].n = 1;
    cases[1].name = "hf", cases[1].tok = fg_bpe_from_memory(plain, strlen(plain), NULL, "p"), cases[1].want = merged, cases[1].n = 3;
    cases[2].name = "hf ignore_merges", cases[2].tok = fg_bpe_from_memory(ign, strlen(ign), NULL, "i"), cases[2].want = whole, cases[2].n = 1;
    for (int c = 0; c < 3; c++) {
        cr_assert(cases[c].tok, "%s: %s", cases[c].name, fg_last_error());
        int32_t *ids;
        size_t n;
        cr_assert_eq(fg_bpe_encode(cases[c].tok, "abcd", 4, 0, &ids, &n), FG_OK);
        cr_expect_eq(n, cases[c].n, "%s: %zu ids", cases[c].name, n);
        for (size_t i = 0; i < n && i < cases[c].n; i++) cr_expect_eq(ids[i], cases[c].want[i], "%s: id %zu", cases[c].name, i);
        free(ids);
        fg_bpe_free(cases[c].tok);
    }
    free(tt);
    free(plain);
    free(ign);
}

Test(bpe, any_bytes_decode_back_and_special_tokens_are_cut_out_only_when_allowed) {
    table t;
    random_table(&t, "ab c\n", 30, 7);
    char *js = hf_json(&t, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}", "");
    fg_bpe *tok = fg_bpe_from_memory(js, strlen(js), NULL, "made.json");
    cr_assert(tok, "%s", fg_last_error());
    const int32_t eot = fg_bpe_special_id(tok, "<|endoftext|>");
    cr_assert_eq(eot, 256 + t.n);
    uint64_t s = 5;
    for (int trial = 0; trial < 200; trial++) {
        unsigned char text[512];
        size_t n = (size_t)trial * 13 % 512;
        for (size_t i = 0; i < n; i++) { /* every byte value: NUL, invalid UTF-8, stray continuation bytes */
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            text[i] = (unsigned char)(s >> 56);
        }
        if (n > 20 && trial % 3 == 0) memcpy(text + 5, "<|endoftext|>", 13);
        for (int allow = 0; allow <= 1; allow++) {
            int32_t *ids;
            size_t nids;
            cr_assert_eq(fg_bpe_encode(tok, text, n, allow, &ids, &nids), FG_OK, "%s", fg_last_error());
            int has_eot = 0;
            for (size_t i = 0; i < nids; i++) has_eot |= ids[i] == eot;
            cr_expect_eq(has_eot, allow && n > 20 && trial % 3 == 0, "trial %d allow %d", trial, allow);
            char *back = NULL;
            size_t len = 0;
            cr_assert_eq(fg_bpe_decode(tok, ids, nids, &back, &len), FG_OK, "%s", fg_last_error());
            cr_assert(len == n && memcmp(back, text, n) == 0, "trial %d allow %d: decode(encode(x)) != x", trial, allow);
            free(back);
            free(ids);
        }
    }
    int32_t bad[] = {1, 256 + t.n + 1};
    char *out = NULL;
    size_t len = 0;
    cr_expect_eq(fg_bpe_decode(tok, bad, 2, &out, &len), FG_ERR_ARG);
    cr_expect(strstr(fg_last_error(), "token id"), "%s", fg_last_error());
    free(out);
    fg_bpe_free(tok);
    free(js);
}

Test(bpe, a_piece_a_megabyte_long_takes_no_quadratic_time, .timeout = 60) {
    table t;
    random_table(&t, "ab", 30, 3);
    char *js = hf_json(&t, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}", "");
    fg_bpe *tok = fg_bpe_from_memory(js, strlen(js), NULL, "made.json");
    cr_assert(tok, "%s", fg_last_error());
    size_t n = 4 << 20;
    unsigned char *text = malloc(n);
    uint64_t s = 9;
    random_text(text, n, "ab", &s); /* one piece of 4 MiB: ' ?\p{L}+' */
    int32_t *ids;
    size_t nids;
    cr_assert_eq(fg_bpe_encode(tok, text, n, 0, &ids, &nids), FG_OK, "%s", fg_last_error());
    char *back = NULL;
    size_t len = 0;
    cr_assert_eq(fg_bpe_decode(tok, ids, nids, &back, &len), FG_OK);
    cr_expect(len == n && memcmp(back, text, n) == 0);
    free(back);
    free(ids);
    free(text);
    fg_bpe_free(tok);
    free(js);
}

/* Hugging Face reads its files' regexes with Oniguruma's Ruby syntax, where X{1,3}+ repeats
 * X{1,3} (any run of digits is one piece) and \h is a hex digit; tiktoken's X{1,3}+ is a possessive
 * repeat of at most three. Tokens 12 < 123 < 1234 show which reading was used. */
Test(bpe, hugging_face_patterns_are_read_as_oniguruma_reads_them) {
    table t;
    memset(&t, 0, sizeof t);
    const char *tok[] = {"12", "123", "1234", "ab", "abc"};
    for (int i = 0; i < 5; i++) memcpy(t.bytes[i], tok[i], t.len[i] = strlen(tok[i]));
    t.n = 5;
    int ml[] = {'1', 256, 257, 'a', 259}, mr[] = {'2', '3', '4', 'b', 'c'};
    for (int i = 0; i < 5; i++) t.ml[i] = ml[i], t.mr[i] = mr[i];
    t.nm = 5;
    const char *pre = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\p{N}{1,3}+|\\\\h|\\\\s+|.\"},"
                      "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}";
    char *js = hf_json(&t, pre, "");
    fg_bpe *hf = fg_bpe_from_memory(js, strlen(js), NULL, "onig.json");
    cr_assert(hf, "%s", fg_last_error());
    int32_t *ids;
    size_t n;
    cr_assert_eq(fg_bpe_encode(hf, "1234", 4, 0, &ids, &n), FG_OK);
    cr_expect(n == 1 && ids[0] == 258, "1234: %zu ids, the first %d (Oniguruma: one piece, one token)", n, (int)ids[0]);
    free(ids);
    cr_assert_eq(fg_bpe_encode(hf, "abc", 3, 0, &ids, &n), FG_OK); /* \h: a, b, c are hex digits, one piece each */
    cr_expect(n == 3 && ids[0] == 'a' && ids[1] == 'b' && ids[2] == 'c', "abc: %zu ids", n);
    free(ids);
    fg_bpe_free(hf);
    free(js);
    /* the same merges as a tiktoken file with cl100k's pattern: digits go in threes */
    size_t tn;
    char *tt = tiktoken_text(&t, &tn);
    fg_bpe *tk = fg_bpe_from_memory(tt, tn, "cl100k_base", "t");
    cr_assert(tk, "%s", fg_last_error());
    cr_assert_eq(fg_bpe_encode(tk, "1234", 4, 0, &ids, &n), FG_OK);
    cr_expect(n == 2 && ids[0] == 257 && ids[1] == '4', "1234: %zu ids (tiktoken: 123|4)", n);
    free(ids);
    fg_bpe_free(tk);
    free(tt);
}

/* ---- training ---- */

typedef struct {
    int tok[64];
    int len;
    long long count;
} rword;

/* The quadratic reference trainer on pieces given directly: recount every pair each round, merge
 * the most frequent (smaller ids first among equals) everywhere, left to right. */
static int reference_train(rword *w, int nw, int merges, long long min_freq, table *t) {
    memset(t, 0, sizeof *t);
    for (int m = 0; m < merges; m++) {
        long long best = 0;
        int ba = 0, bb = 0;
        for (int i = 0; i < nw; i++)
            for (int k = 0; k + 1 < w[i].len; k++) {
                int a = w[i].tok[k], b = w[i].tok[k + 1];
                long long f = 0;
                for (int j = 0; j < nw; j++)
                    for (int q = 0; q + 1 < w[j].len; q++) f += w[j].tok[q] == a && w[j].tok[q + 1] == b ? w[j].count : 0;
                if (f > best || (f == best && (a < ba || (a == ba && b < bb)))) best = f, ba = a, bb = b;
            }
        if (best < min_freq || best == 0) return m;
        unsigned char one_a[1], one_b[1];
        size_t la, lb;
        const unsigned char *pa = tok_bytes(t, ba, &la, one_a), *pb = tok_bytes(t, bb, &lb, one_b);
        memcpy(t->bytes[t->n], pa, la);
        memcpy(t->bytes[t->n] + la, pb, lb);
        t->len[t->n++] = la + lb;
        t->ml[t->nm] = ba, t->mr[t->nm++] = bb;
        int x = 256 + m;
        for (int i = 0; i < nw; i++) {
            int out = 0;
            for (int k = 0; k < w[i].len;) {
                if (k + 1 < w[i].len && w[i].tok[k] == ba && w[i].tok[k + 1] == bb) w[i].tok[out++] = x, k += 2;
                else w[i].tok[out++] = w[i].tok[k++];
            }
            w[i].len = out;
        }
    }
    return merges;
}

Test(bpe, training_matches_the_quadratic_reference_and_is_deterministic) {
    char dir[256], corpus[512];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_bpe_train_XXXXXX");
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    for (uint64_t seed = 1; seed <= 6; seed++) {
        /* words of a and b separated by single spaces: GPT-2's regex makes "w" then " w" pieces */
        uint64_t s = seed;
        char text[4000];
        size_t n = 0;
        rword w[400];
        int nw = 0;
        for (int word = 0; word < 300; word++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            int len = 1 + (int)((s >> 40) % 6);
            char piece[16];
            int pl = 0;
            if (word) piece[pl++] = ' ';
            for (int k = 0; k < len; k++) {
                s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                piece[pl++] = (s >> 50) & 1 ? 'a' : 'b';
            }
            memcpy(text + n, piece, (size_t)pl);
            n += (size_t)pl;
            int found = -1;
            for (int i = 0; i < nw && found < 0; i++)
                if (w[i].len == pl) {
                    int same = 1;
                    for (int k = 0; k < pl; k++) same &= w[i].tok[k] == (unsigned char)piece[k];
                    if (same) found = i;
                }
            if (found >= 0) {
                w[found].count++;
            } else {
                for (int k = 0; k < pl; k++) w[nw].tok[k] = (unsigned char)piece[k];
                w[nw].len = pl, w[nw].count = 1;
                nw++;
            }
        }
        FILE *f = fopen(corpus, "wb");
        fwrite(text, 1, n, f);
        fclose(f);
        const long long min_freq = seed % 2 ? 2 : 1;
        table ref;
        int made = reference_train(w, nw, 40, min_freq, &ref);
        const char *files[] = {corpus};
        const char *specials[] = {"<|endoftext|>"};
        fg_bpe_train_opts o = {.vocab_size = 256 + 40 + 1, .pattern = "gpt2", .specials = specials, .n_specials = 1, .min_frequency = min_freq};
        char *js, *js2;
        size_t len, len2;
        cr_assert_eq(fg_bpe_train(files, 1, &o, &js, &len), FG_OK, "%s", fg_last_error());
        cr_assert_eq(fg_bpe_train(files, 1, &o, &js2, &len2), FG_OK, "%s", fg_last_error());
        cr_expect(len == len2 && memcmp(js, js2, len) == 0, "seed %llu: two trainings differ", (unsigned long long)seed);
        fg_json_doc *d;
        cr_assert_eq(fg_json_parse(js, len, "trained", &d), FG_OK, "%s", fg_last_error());
        const fg_json *merges = fg_json_get(fg_json_get(fg_json_root(d), "model"), "merges");
        cr_assert(merges && merges->kind == FG_JSON_ARRAY);
        cr_assert_eq((int)merges->len, made, "seed %llu: %u merges, the reference %d", (unsigned long long)seed, merges->len, made);
        for (int m = 0; m < made; m++) {
            for (int side = 0; side < 2; side++) {
                unsigned char one[1];
                size_t bl;
                const unsigned char *b = tok_bytes(&ref, side ? ref.mr[m] : ref.ml[m], &bl, one);
                char want[128];
                size_t wl = token_json(b, bl, want);
                const fg_json *got = &merges->items[m].items[side];
                cr_assert(got->len == wl && memcmp(got->str, want, wl) == 0, "seed %llu merge %d side %d: '%s', the reference '%.*s'",
                          (unsigned long long)seed, m, side, got->str, (int)wl, want);
            }
        }
        /* what was written loads, and encodes the corpus as the reference merges do */
        fg_bpe *tok = fg_bpe_from_memory(js, len, NULL, "trained");
        cr_assert(tok, "%s", fg_last_error());
        cr_expect_eq(fg_bpe_vocab_size(tok), 256 + made + 1);
        cr_expect_eq(fg_bpe_special_id(tok, "<|endoftext|>"), 256 + made);
        fg_bpe_free(tok);
        fg_json_free(d);
        free(js);
        free(js2);
    }
    unlink(corpus);
    fgt_remove_tmpdir(dir);
}

Test(bpe, training_options_out_of_range_are_refused) {
    const char *files[] = {"/nonexistent/corpus.txt"};
    char *js;
    size_t len;
    fg_bpe_train_opts o = {.vocab_size = 300, .pattern = "gpt3", .min_frequency = 2};
    cr_expect_eq(fg_bpe_train(files, 1, &o, &js, &len), FG_ERR_ARG);
    cr_expect(strstr(fg_last_error(), "unknown pattern 'gpt3'"), "%s", fg_last_error());
    o.pattern = "gpt2";
    o.vocab_size = 200;
    cr_expect_eq(fg_bpe_train(files, 1, &o, &js, &len), FG_ERR_ARG);
    cr_expect(strstr(fg_last_error(), "cannot hold the 256 bytes"), "%s", fg_last_error());
    o.vocab_size = 300;
    cr_expect_neq(fg_bpe_train(files, 1, &o, &js, &len), FG_OK);
    cr_expect(strstr(fg_last_error(), "/nonexistent/corpus.txt"), "%s", fg_last_error());
}

/* ---- prepare ---- */

static unsigned char *slurp(const char *path, size_t *n) {
    void *b = NULL;
    cr_assert_eq(fg_read_file(path, 0, &b, n), FG_OK, "%s", fg_last_error());
    return b;
}

/* The ids of text[0..n) as uint16 or uint32 little-endian bytes. */
static unsigned char *encoded(const fg_bpe *tok, const char *text, size_t n, int width, const int32_t *eot, size_t *len) {
    int32_t *ids;
    size_t k;
    cr_assert_eq(fg_bpe_encode(tok, text, n, 0, &ids, &k), FG_OK, "%s", fg_last_error());
    unsigned char *o = malloc((k + 1) * 4 + 1);
    for (size_t i = 0; i <= k; i++) {
        if (i == k && !eot) break;
        uint32_t v = (uint32_t)(i == k ? *eot : ids[i]);
        for (int b = 0; b < width; b++) o[width * i + b] = (unsigned char)(v >> (8 * b));
    }
    *len = (k + (eot ? 1 : 0)) * (size_t)width;
    free(ids);
    return o;
}

Test(bpe, prepare_writes_the_ids_of_nanogpts_split_whatever_the_chunks_and_threads, .timeout = 120) {
    char dir[256], cmd[2048], log[4096], p[600], tokdir[300], txt[300];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_prepare_XXXXXX");
    /* a tokenizer trained here, and a text with multi-byte characters (the cut counts characters) */
    snprintf(txt, sizeof txt, "%s/text.txt", dir);
    FILE *f = fopen(txt, "wb");
    for (int i = 0; i < 3000; i++) fprintf(f, "%s %d naïve café, “quoted” 中文\n%s", i % 7 ? "Line" : "LINE", i * 37 % 1000, i % 5 ? "" : "\n");
    fclose(f);
    snprintf(tokdir, sizeof tokdir, "%s/tok", dir);
    snprintf(cmd, sizeof cmd, "%s tokenizer train --vocab-size 400 --out %s %s 2>&1", fgt_bin(), tokdir, txt);
    cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "%s", log);
    fg_bpe *tok = fg_bpe_load(tokdir, NULL);
    cr_assert(tok, "%s", fg_last_error());
    size_t n;
    unsigned char *text = slurp(txt, &n);
    size_t chars = 0;
    for (size_t i = 0; i < n; i++) chars += (text[i] & 0xc0) != 0x80;
    size_t cut_chars = (size_t)((double)chars * 0.9), cut = 0;
    for (size_t c = 0; cut < n; cut++)
        if ((text[cut] & 0xc0) != 0x80 && c++ == cut_chars) break;
    size_t tl, vl;
    unsigned char *want_train = encoded(tok, (char *)text, cut, 2, NULL, &tl), *want_val = encoded(tok, (char *)text + cut, n - cut, 2, NULL, &vl);
    const char *runs[] = {"--threads 1", "--threads 3 --chunk-mb 0.001", "--threads 2 --chunk-mb 0.0005"};
    for (int r = 0; r < 3; r++) {
        snprintf(cmd, sizeof cmd, "%s prepare --tokenizer %s --out %s/out%d %s %s 2>&1", fgt_bin(), tokdir, dir, r, runs[r], txt);
        cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "%s: %s", runs[r], log);
        size_t gl;
        snprintf(p, sizeof p, "%s/out%d/train.bin", dir, r);
        unsigned char *got = slurp(p, &gl);
        cr_expect(gl == tl && memcmp(got, want_train, tl) == 0, "%s: train.bin differs (%zu bytes, want %zu)", runs[r], gl, tl);
        free(got);
        snprintf(p, sizeof p, "%s/out%d/val.bin", dir, r);
        got = slurp(p, &gl);
        cr_expect(gl == vl && memcmp(got, want_val, vl) == 0, "%s: val.bin differs", runs[r]);
        free(got);
        snprintf(p, sizeof p, "%s/out%d/tokenizer.json", dir, r);
        cr_expect_eq(access(p, R_OK), 0, "the tokenizer was not copied beside the ids");
    }
    /* again into the same folder: refused without --overwrite, and nothing changed */
    snprintf(cmd, sizeof cmd, "%s prepare --tokenizer %s --out %s/out0 %s 2>&1", fgt_bin(), tokdir, dir, txt);
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 1, "%s", log);
    cr_expect(strstr(log, "exists (--overwrite replaces it)"), "%s", log);
    /* llm.c's shards: the val shard first, train shards of at most 1000 ids, each with its header */
    snprintf(cmd, sizeof cmd, "%s prepare --tokenizer %s --out %s/llmc --format llmc --name t --shard-tokens 1000 %s 2>&1", fgt_bin(), tokdir, dir, txt);
    cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "%s", log);
    size_t at = 0;
    for (int s = 1;; s++) {
        snprintf(p, sizeof p, "%s/llmc/t_train_%06d.bin", dir, s);
        if (access(p, F_OK) != 0) break;
        size_t gl;
        unsigned char *got = slurp(p, &gl);
        int32_t h[3];
        memcpy(h, got, sizeof h);
        cr_expect(h[0] == 20240520 && h[1] == 1 && gl == 1024 + 2 * (size_t)h[2] && h[2] <= 1000, "shard %d: header %d %d %d, %zu bytes", s, h[0], h[1], h[2], gl);
        cr_expect(memcmp(got + 1024, want_train + at, 2 * (size_t)h[2]) == 0, "shard %d differs", s);
        at += 2 * (size_t)h[2];
        free(got);
    }
    cr_expect_eq(at, tl, "the train shards hold %zu bytes of ids, want %zu", at, tl);
    free(want_train);
    free(want_val);
    /* two documents: <|endoftext|> after each */
    snprintf(cmd, sizeof cmd, "%s prepare --tokenizer %s --out %s/two --val-fraction 0.5 %s %s 2>&1", fgt_bin(), tokdir, dir, txt, txt);
    cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "%s", log);
    const int32_t eot = fg_bpe_special_id(tok, "<|endoftext|>");
    cr_assert_geq(eot, 0);
    unsigned char *doc = encoded(tok, (char *)text, n, 2, &eot, &tl);
    size_t gl;
    snprintf(p, sizeof p, "%s/two/train.bin", dir);
    unsigned char *got = slurp(p, &gl);
    cr_expect(gl == tl && memcmp(got, doc, tl) == 0, "the first document (and its <|endoftext|>) is the train split");
    free(got);
    snprintf(p, sizeof p, "%s/two/val.bin", dir);
    got = slurp(p, &gl);
    cr_expect(gl == tl && memcmp(got, doc, tl) == 0, "the second is the val split");
    free(got);
    free(doc);
    free(text);
    fg_bpe_free(tok);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

Test(bpe, prepare_writes_uint32_ids_for_a_large_vocabulary_and_refuses_what_cannot_be_written, .timeout = 60) {
    char dir[256], cmd[2048], log[4096], p[600];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_prepare_XXXXXX");
    /* cl100k's special ids make a vocabulary of 100277 even with the 256 bytes alone */
    table t;
    random_table(&t, "ab ", 20, 4);
    size_t tn;
    char *tt = tiktoken_text(&t, &tn);
    snprintf(p, sizeof p, "%s/cl100k_base.tiktoken", dir);
    FILE *f = fopen(p, "wb");
    fwrite(tt, 1, tn, f);
    fclose(f);
    char txt[300];
    snprintf(txt, sizeof txt, "%s/t.txt", dir);
    f = fopen(txt, "wb");
    for (int i = 0; i < 500; i++) fputs("ab ba aab <|endoftext|>\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s prepare --tokenizer %s --out %s/n %s 2>&1", fgt_bin(), p, dir, txt);
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 1, "%s", log);
    cr_expect(strstr(log, "uint16") && strstr(log, "--format llmc"), "%s", log);
    snprintf(cmd, sizeof cmd, "%s prepare --tokenizer %s --out %s/l --format llmc --name x %s 2>&1", fgt_bin(), p, dir, txt);
    cr_assert_eq(fgt_run_cmd(cmd, log, sizeof log), 0, "%s", log);
    snprintf(p, sizeof p, "%s/l/x_train_000001.bin", dir);
    size_t gl;
    unsigned char *got = slurp(p, &gl);
    int32_t h[3];
    memcpy(h, got, sizeof h);
    cr_expect(h[0] == 20240801 && h[1] == 7 && gl == 1024 + 4 * (size_t)h[2], "header %d %d %d, %zu bytes", h[0], h[1], h[2], gl);
    free(got);
    /* a FIFO as the text: refused at once */
    snprintf(p, sizeof p, "%s/fifo.txt", dir);
    cr_assert_eq(mkfifo(p, 0600), 0);
    snprintf(cmd, sizeof cmd, "%s prepare --tokenizer %s/cl100k_base.tiktoken --out %s/f --format llmc %s 2>&1", fgt_bin(), dir, dir, p);
    cr_expect_eq(fgt_run_cmd(cmd, log, sizeof log), 1, "%s", log);
    cr_expect(strstr(log, "fifo.txt"), "%s", log);
    free(tt);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* ---- the tokenizer in checkpoints, and the flows ---- */

Test(bpe, tokenizer_strings_round_trip_in_every_file_kind_and_bad_ones_are_refused) {
    table t;
    random_table(&t, "ab c", 12, 21);
    char dir[256], p[600];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_bpe_tok_XXXXXX");
    /* the three kinds of files */
    char *js = hf_json(&t, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}", "");
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    FILE *f = fopen(p, "wb");
    fputs(js, f);
    fclose(f);
    size_t tn;
    char *tt = tiktoken_text(&t, &tn);
    snprintf(p, sizeof p, "%s/r50k_base.tiktoken", dir);
    f = fopen(p, "wb");
    fwrite(tt, 1, tn, f);
    fclose(f);
    char vm[300];
    snprintf(vm, sizeof vm, "%s/vm", dir);
    cr_assert_eq(mkdir(vm, 0700), 0);
    char *v0 = strstr(js, "\"vocab\":{") + 8, *v1 = strstr(v0, "},\"merges\":");
    snprintf(p, sizeof p, "%s/vocab.json", vm);
    f = fopen(p, "wb");
    fwrite(v0, 1, (size_t)(v1 - v0 + 1), f);
    fclose(f);
    snprintf(p, sizeof p, "%s/merges.txt", vm);
    f = fopen(p, "wb");
    fputs("#version: 0.2\n", f);
    for (const char *m = strstr(js, "\"merges\":[") + 10; *m == ' ' || *m == ',';) {
        const char *a = strchr(m, '"') + 1, *b = strchr(a, '"');
        fwrite(a, 1, (size_t)(b - a), f);
        fputc('\n', f);
        m = b + 1;
    }
    fclose(f);
    const char *paths[3] = {dir, NULL, vm};
    char tpath[600];
    snprintf(tpath, sizeof tpath, "%s/r50k_base.tiktoken", dir);
    paths[1] = tpath;
    const char *prefixes[3] = {"bpe-v1:json:", "bpe-v1:tiktoken:r50k_base:", "bpe-v1:vocab-merges:"};
    for (int k = 0; k < 3; k++) {
        fg_tokenizer *tok = fg_tokenizer_bpe_load(paths[k], NULL);
        cr_assert(tok, "%s: %s", paths[k], fg_last_error());
        cr_expect_eq(fg_tokenizer_kind(tok), FG_TOK_BPE);
        char *str = fg_tokenizer_serialize(tok);
        cr_assert(str && !strncmp(str, prefixes[k], strlen(prefixes[k])), "%s: '%.40s'", paths[k], str);
        for (const char *c = str; *c; c++) cr_assert(*c >= 0x20 && *c < 0x7f, "a byte that is not printable ASCII");
        fg_tokenizer *back = fg_tokenizer_parse(str, strlen(str));
        cr_assert(back, "%s", fg_last_error());
        char *again = fg_tokenizer_serialize(back);
        cr_expect_str_eq(again, str);
        /* the same ids both ways */
        const char *text = "ab c abba  cab\nbca";
        int32_t *i1, *i2;
        size_t n1, n2;
        cr_assert_eq(fg_tokenizer_encode_text(tok, text, strlen(text), &i1, &n1), FG_OK);
        cr_assert_eq(fg_tokenizer_encode_text(back, text, strlen(text), &i2, &n2), FG_OK);
        cr_expect(n1 == n2 && memcmp(i1, i2, n1 * sizeof *i1) == 0, "%s: the parsed tokenizer encodes otherwise", prefixes[k]);
        char *dec = NULL;
        size_t dl = 0;
        cr_assert_eq(fg_tokenizer_decode_text(back, i2, n2, &dec, &dl), FG_OK);
        cr_expect(dl == strlen(text) && !memcmp(dec, text, dl));
        /* damaged strings: refused with one line */
        size_t L = strlen(str);
        char *bad = strdup(str);
        bad[L - 3] = '!';
        cr_expect_null(fg_tokenizer_parse(bad, L), "a bad base64 character was accepted");
        cr_expect_null(fg_tokenizer_parse(str, L - 1), "a cut string was accepted");
        free(bad);
        free(dec);
        free(i1);
        free(i2);
        free(again);
        free(str);
        fg_tokenizer_free(back);
        fg_tokenizer_free(tok);
    }
    cr_expect_null(fg_tokenizer_parse("bpe-v1:yaml:QUJD", 16));
    cr_expect(strstr(fg_last_error(), "unknown BPE tokenizer kind"), "%s", fg_last_error());
    free(js);
    free(tt);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* A text file under a BPE: nanoGPT's split (train = text[:int(n * 0.9)] in characters), each part
 * encoded on its own. */
Test(bpe, a_text_dataset_splits_by_characters_and_encodes_the_parts_apart) {
    table t;
    random_table(&t, "ab ", 20, 8);
    char *js = hf_json(&t, "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}", "");
    char dir[256], p[600];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_bpe_text_XXXXXX");
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    FILE *f = fopen(p, "wb");
    fputs(js, f);
    fclose(f);
    fg_tokenizer *tok = fg_tokenizer_bpe_load(dir, NULL);
    cr_assert(tok, "%s", fg_last_error());
    /* two-byte characters before the cut move it away from 90% of the bytes */
    char text[3000];
    size_t n = 0;
    for (int i = 0; i < 150; i++) n += (size_t)sprintf(text + n, i < 100 ? "\xc3\xa9\xc3\xa9 ab" : "abba ba");
    fg_text_options o = fg_text_default_options(4);
    o.tokenizer = tok;
    fg_text_dataset *ds = fg_text_from_memory(text, n, "t", &o);
    cr_assert(ds, "%s", fg_last_error());
    size_t chars = 0, cut = 0;
    for (size_t i = 0; i < n; i++) chars += ((unsigned char)text[i] & 0xc0) != 0x80;
    size_t cc = (size_t)((double)chars * 0.9);
    for (size_t c = 0; cut < n; cut++)
        if (((unsigned char)text[cut] & 0xc0) != 0x80 && c++ == cc) break;
    int32_t *a, *b;
    size_t na, nb;
    cr_assert_eq(fg_tokenizer_encode_text(tok, text, cut, &a, &na), FG_OK);
    cr_assert_eq(fg_tokenizer_encode_text(tok, text + cut, n - cut, &b, &nb), FG_OK);
    cr_expect_eq(fg_text_split_tokens(ds, FG_SPLIT_TRAIN), na);
    cr_expect_eq(fg_text_split_tokens(ds, FG_SPLIT_VAL), nb);
    cr_expect(memcmp(fg_text_split_data(ds, FG_SPLIT_TRAIN), a, na * sizeof *a) == 0, "train ids differ");
    cr_expect(memcmp(fg_text_split_data(ds, FG_SPLIT_VAL), b, nb * sizeof *b) == 0, "val ids differ");
    cr_expect_eq(fg_text_vocab_size(ds), fg_tokenizer_vocab_size(tok));
    free(a);
    free(b);
    fg_text_free(ds);
    fg_tokenizer_free(tok);
    free(js);
    unlink(p);
    fgt_remove_tmpdir(dir);
}

/* Runs cmd (printf-style) and returns its exit status; its output in log. */
static int runf(char *log, size_t n, const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return fgt_run_cmd(cmd, log, n);
}

Test(bpe, text_to_text_train_sample_export_and_init_from_with_a_bpe_tokenizer, .timeout = 300) {
    char dir[256], log[16384], txt[300];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_bpe_flow_XXXXXX");
    const char *fg = fgt_bin();
    snprintf(txt, sizeof txt, "%s/text.txt", dir);
    FILE *f = fopen(txt, "wb");
    for (int i = 0; i < 800; i++) fprintf(f, "ROMEO: I love thee, %s %d.\nJULIET: O Romeo, Romeo!\n\n", i % 3 ? "sweet" : "fair", i % 17);
    fclose(f);
    const char *model = "--n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch-size 4 --steps 6 --eval-every 3 --eval-iters 2";
    cr_assert_eq(runf(log, sizeof log, "%s tokenizer train --vocab-size 300 --out %s/tok %s 2>&1", fg, dir, txt), 0, "%s", log);
    /* text -> train with the tokenizer -> sample --prompt speaks text */
    cr_assert_eq(runf(log, sizeof log, "%s train --data %s --tokenizer %s/tok --out %s/run %s 2>&1", fg, txt, dir, dir, model), 0, "%s", log);
    cr_expect(strstr(log, "BPE tokenizer"), "the run does not say its tokenizer:\n%s", log);
    cr_assert_eq(runf(log, sizeof log, "%s sample --ckpt %s/run --prompt 'ROMEO: I' --tokens 5 --seed 3 2>/dev/null", fg, dir), 0, "%s", log);
    cr_expect(!strncmp(log, "ROMEO: I", 8), "the sample does not begin with the prompt's text: '%.60s'", log);
    cr_assert_eq(runf(log, sizeof log, "%s eval --ckpt %s/run 2>&1", fg, dir), 0, "%s", log);
    /* the tokenizer goes out with the model, byte for byte, and comes back in with it */
    cr_assert_eq(runf(log, sizeof log, "%s export --ckpt %s/run --to hf %s/hf 2>&1", fg, dir, dir), 0, "%s", log);
    cr_expect_eq(runf(log, sizeof log, "cmp %s/tok/tokenizer.json %s/hf/tokenizer.json 2>&1", dir, dir), 0, "%s", log);
    cr_assert_eq(runf(log, sizeof log, "%s sample --ckpt %s/hf --prompt 'JULIET:' --tokens 4 2>/dev/null", fg, dir), 0, "%s", log);
    cr_expect(!strncmp(log, "JULIET:", 7), "'%.60s'", log);
    /* --init-from the exported folder on the text: the folder's tokenizer reads it */
    cr_assert_eq(runf(log, sizeof log, "%s train --init-from %s/hf --data %s --out %s/ft --steps 2 --batch-size 2 --eval-every 1 --eval-iters 1 2>&1", fg, dir, txt, dir),
                 0, "%s", log);
    cr_expect(strstr(log, "BPE tokenizer"), "%s", log);
    /* prepare -> train on the ids with their tokenizer -> sample --prompt */
    cr_assert_eq(runf(log, sizeof log, "%s prepare --tokenizer %s/tok --out %s/ids %s 2>&1", fg, dir, dir, txt), 0, "%s", log);
    cr_assert_eq(runf(log, sizeof log, "%s train --data-bin %s/ids --tokenizer %s/ids --out %s/run2 %s 2>&1", fg, dir, dir, dir, model), 0, "%s", log);
    cr_assert_eq(runf(log, sizeof log, "%s sample --ckpt %s/run2 --prompt 'ROMEO:' --tokens 3 2>/dev/null", fg, dir), 0, "%s", log);
    cr_expect(!strncmp(log, "ROMEO:", 6), "'%.60s'", log);
    /* --init-from a folder with a tokenizer, on ids: the run keeps the folder's tokenizer */
    cr_assert_eq(runf(log, sizeof log, "%s train --init-from %s/hf --data-bin %s/ids --out %s/ft2 --steps 2 --batch-size 2 --eval-every 1 --eval-iters 1 2>&1", fg, dir, dir, dir),
                 0, "%s", log);
    cr_assert_eq(runf(log, sizeof log, "%s sample --ckpt %s/ft2 --prompt 'ROMEO:' --tokens 3 2>/dev/null", fg, dir), 0, "%s", log);
    cr_expect(!strncmp(log, "ROMEO:", 6), "'%.60s'", log);
    /* a model trained on ids without a tokenizer takes one at sampling */
    cr_assert_eq(runf(log, sizeof log, "%s train --data-bin %s/ids --vocab-size 300 --out %s/run3 %s 2>&1", fg, dir, dir, model), 0, "%s", log);
    cr_expect_neq(runf(log, sizeof log, "%s sample --ckpt %s/run3 --prompt 'ROMEO:' --tokens 3 2>&1", fg, dir), 0);
    cr_expect(strstr(log, "--tokenizer PATH"), "%s", log);
    cr_assert_eq(runf(log, sizeof log, "%s sample --ckpt %s/run3 --tokenizer %s/tok --prompt 'ROMEO:' --tokens 3 2>/dev/null", fg, dir, dir), 0, "%s", log);
    cr_expect(!strncmp(log, "ROMEO:", 6), "'%.60s'", log);
    /* refusals: one line each */
    cr_expect_eq(runf(log, sizeof log, "%s train --data %s --tokenizer %s/tok --byte --out %s/x 2>&1", fg, txt, dir, dir), 2, "%s", log);
    cr_expect(strstr(log, "--byte or --tokenizer"), "%s", log);
    cr_expect_eq(runf(log, sizeof log, "%s train --data %s --tokenizer %s/nothing --out %s/x 2>&1", fg, txt, dir, dir), 1, "%s", log);
    cr_expect(strstr(log, "--tokenizer: "), "%s", log);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
}

/* ---- bad input: one line each ---- */

static void expect_refused(const char *text, size_t n, const char *encoding, const char *why, const char *label) {
    fg_bpe *tok = fg_bpe_from_memory(text, n, encoding, "bad");
    cr_expect_null(tok, "%s: accepted", label);
    cr_expect(strstr(fg_last_error(), why) && !strchr(fg_last_error(), '\n'), "%s: '%s' lacks '%s'", label, fg_last_error(), why);
    fg_bpe_free(tok);
}

static char *replace(const char *s, const char *from, const char *to) {
    const char *at = strstr(s, from);
    cr_assert(at, "'%s' not in the document", from);
    size_t a = (size_t)(at - s), f = strlen(from), t = strlen(to), n = strlen(s);
    char *o = malloc(n - f + t + 1);
    memcpy(o, s, a);
    memcpy(o + a, to, t);
    memcpy(o + a + t, at + f, n - a - f + 1);
    return o;
}

Test(bpe, malformed_or_unsupported_tokenizer_json_is_refused_by_name) {
    table t;
    random_table(&t, "ab", 6, 11);
    const char *pre = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}";
    char *good = hf_json(&t, pre, "");
    fg_bpe *ok = fg_bpe_from_memory(good, strlen(good), NULL, "good");
    cr_assert(ok, "%s", fg_last_error());
    fg_bpe_free(ok);
    /* the first merge is "a b" in some order of the table's letters: name its parts */
    char first[64];
    const char *m = strstr(good, "\"merges\":[ \"") + 12;
    size_t ml = strcspn(m, "\"");
    memcpy(first, m, ml);
    first[ml] = '\0';
    static const struct {
        const char *from, *to, *why;
    } edits[] = {
        {"\"normalizer\":null", "\"normalizer\":{\"type\":\"NFC\"}", "normalizer"},
        {"\"add_prefix_space\":false", "\"add_prefix_space\":true", "add_prefix_space"},
        {"\"type\":\"BPE\"", "\"type\":\"WordPiece\"", "only BPE"},
        {"\"dropout\":null", "\"dropout\":0.1", "model.dropout"},
        {"\"decoder\":{\"type\":\"ByteLevel\"}", "\"decoder\":{\"type\":\"Metaspace\"}", "decoder"},
        {"\"special\":true}", "\"special\":true,\"lstrip\":true}", "the key \"lstrip\" twice"},
        {"\"lstrip\":false", "\"lstrip\":true", "lstrip"},
        {"\"vocab\":{", "\"vocab\":{\"\xe2\x96\x81x\":9999,", "not a byte-level token"},
        {"\"vocab\":{", "\"vocab\":{\"zz\":5,", "two tokens have the id 5"},
        {"\"merges\":[", "\"merges\":[\"a \xc4\xa0\xc4\xa0\xc4\xa0\",", "not in the vocabulary"},
        {"\"merges\":[", "\"merges\":[\"a b c\",", "not two tokens separated by one space"},
        {"\"merges\":[", "\"merges\":[7,", "neither"},
        {"\"version\":\"1.0\",", "\"version\":\"1.0\",\"version\":\"2\",", "the key \"version\" twice"},
        {"\"model\":", "\"modell\":", "no \"model\""},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        char *bad = replace(good, edits[i].from, edits[i].to);
        expect_refused(bad, strlen(bad), NULL, edits[i].why, edits[i].to);
        free(bad);
    }
    /* a merge listed twice, and a merge whose result is missing */
    char twice[200];
    snprintf(twice, sizeof twice, "\"merges\":[ \"%s\",\"%s\"", first, first);
    char head[80];
    snprintf(head, sizeof head, "\"merges\":[ \"%s\"", first);
    char *bad = replace(good, head, twice);
    expect_refused(bad, strlen(bad), NULL, "repeats an earlier merge", "a merge twice");
    free(bad);
    bad = replace(good, "\"merges\":[", "\"merges\":[\"a a\",\"aa a\",");
    expect_refused(bad, strlen(bad), NULL, "not in the vocabulary", "a merge whose result is no token");
    free(bad);
    /* a vocabulary without the byte 0xff (its character U+00FF, 'ÿ') */
    bad = replace(good, "\"\xc3\xbf\":255", "\"\xc3\xbf\xc3\xbf\":255");
    expect_refused(bad, strlen(bad), NULL, "no token for the byte 0xff", "a byte missing");
    free(bad);
    /* a Split pattern PCRE2 rejects, and Split behaviours other than Isolated */
    const char *split = "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(ab\"},"
                        "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}";
    char *js = hf_json(&t, split, "");
    expect_refused(js, strlen(js), NULL, "does not compile", "a bad regex");
    char *removed = replace(js, "(ab", "a+");
    char *removed2 = replace(removed, "Isolated", "Removed");
    expect_refused(removed2, strlen(removed2), NULL, "Isolated", "Split Removed");
    free(removed2);
    free(removed);
    free(js);
    /* every truncation of the document is refused (never a crash, never a partial tokenizer) */
    size_t n = strlen(good);
    for (size_t cut = 0; cut < n; cut += 1 + cut / 7) expect_refused(good, cut, NULL, "bad: ", "truncated");
    free(good);
}

Test(bpe, malformed_tiktoken_files_are_refused_by_line) {
    static const struct {
        const char *text, *why;
    } cases[] = {
        {"YQ== 0\nYQ== 1\n", "same bytes"},
        {"YQ== 0\nYg== 0\n", "two tokens have the id 0"},
        {"YQ=! 0\n", "line 1 is not"},
        {"YQ== 0\nYg== x\n", "line 2 is not"},
        {"YQ== 99999999999\n", "line 1 is not"},
        {"YQ==0\n", "line 1 is not"},
        {"YR== 0\n", "line 1 is not"}, /* padding bits set: not how any encoder writes "a" */
        {"", "no tokens"},
        {"YQ== 0\n", "no token for the byte 0x00"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) expect_refused(cases[i].text, strlen(cases[i].text), "gpt2", cases[i].why, cases[i].text);
    expect_refused("YQ== 0\n", 7, "cl200k", "unknown tiktoken encoding 'cl200k'", "an unknown encoding");
    /* a special token's id taken by an ordinary rank */
    table t;
    random_table(&t, "ab", 2, 1);
    size_t n;
    char *tt = tiktoken_text(&t, &n);
    char *more = malloc(n + 64);
    memcpy(more, tt, n);
    n += (size_t)sprintf(more + n, "YWJhYmFi 50256\n");
    expect_refused(more, n, "gpt2", "special token <|endoftext|>", "a special's id as a rank");
    free(more);
    free(tt);
}

Test(bpe, paths_that_are_no_tokenizer_fail_at_once_with_one_line, .timeout = 30) {
    char dir[256], p[512];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_bpe_XXXXXX");
    cr_expect_null(fg_bpe_load(dir, NULL));
    cr_expect(strstr(fg_last_error(), "not a tokenizer"), "%s", fg_last_error());
    snprintf(p, sizeof p, "%s/gpt2.tiktoken", dir);
    cr_assert_eq(mkfifo(p, 0600), 0, "mkfifo: %s", strerror(errno));
    cr_expect_null(fg_bpe_load(p, NULL)); /* a FIFO nobody writes: refused, not waited on */
    cr_expect(strstr(fg_last_error(), "FIFO") || strstr(fg_last_error(), "regular"), "%s", fg_last_error());
    unlink(p);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    cr_assert_eq(mkdir(p, 0700), 0);
    cr_expect_null(fg_bpe_load(dir, NULL));
    cr_expect(strstr(fg_last_error(), "tokenizer.json"), "%s", fg_last_error());
    rmdir(p);
    snprintf(p, sizeof p, "%s/mystery.tiktoken", dir);
    FILE *f = fopen(p, "w");
    fputs("YQ== 0\n", f);
    fclose(f);
    cr_expect_null(fg_bpe_load(p, NULL));
    cr_expect(strstr(fg_last_error(), "does not say its encoding"), "%s", fg_last_error());
    unlink(p);
    cr_expect_null(fg_bpe_load("/dev/zero", "gpt2"));
    fgt_remove_tmpdir(dir);
}

/* ---- the references themselves ---- */

Test(bpe, ids_equal_tokenizers_transformers_and_bpe_openai, .timeout = 900) {
    const char *what = "BPE cross-check against tokenizers, transformers and bpe-openai";
    const char *py = getenv("FG_TORCH_PYTHON");
    if (!py || !*py) py = FGT_PYTHON;
    if (access(py, X_OK) != 0) fgt_skip(what, "no python interpreter (set FG_TORCH_PYTHON)");
    char dir[256], cmd[1024], log[16384];
    fgt_make_tmpdir(dir, sizeof dir, "/tmp/fg_bpe_check_XXXXXX");
    snprintf(cmd, sizeof cmd, "HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false %s tests/bpe_check.py %s %s 2>&1", py, fgt_bin(), dir);
    int st = fgt_run_cmd(cmd, log, sizeof log);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) {}
    if (st == FGT_PYTHON_CANNOT_RUN) fgt_skip(what, log);
    if (fgt_verbose() || st) fprintf(stderr, "[bpe] %s", log);
    cr_expect_eq(st, 0, "bpe_check.py exited %d:\n%s", st, log);
    cr_expect(strstr(log, "all equal"), "%s", log);
}
