/* compare.c — the safetensors header reader (tensor/safetensors.c) against Debian's JSON libraries.
 *
 * For every input (the fuzz corpus, its regressions, the malformed-header table of
 * tests/test_safetensors.c and a few probes of the strictness that matters: duplicate keys, exact
 * 64-bit integers, integer syntax), it asks
 *   - flashgrad's reader (fg_st_parse): accepted, or refused with which message;
 *   - jansson, cJSON and json-c, each with the thinnest check layer that gives the header the shape
 *     the format has (top object; "__metadata__" an object of strings; each tensor an object of
 *     exactly "dtype" (a known name), "shape" (at most 8 integers >= 0) and "data_offsets" (two
 *     integers >= 0); no key twice; no NUL in a string),
 * and prints where a library's verdict differs. Only the JSON stage is compared: an input that
 * flashgrad refuses after its JSON stage (sizes, overlaps, checksum) counts as "JSON accepted".
 * Then it times the header parse of a synthetic GPT-2-sized header and a large one, and measures
 * what parsing a 64 MB header made of one metadata value holding an array costs each (peak memory).
 *
 *   sh bench/json_libs/run.sh      (builds this with the three libraries and runs it)
 */
#include <cjson/cJSON.h>
#include <jansson.h>

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensor/fileio.h"
#include "tensor/safetensors.h"

#include "bench/json_libs/verdict.h"


/* ---- flashgrad: the whole reader; refusals after the JSON stage count as JSON-accepted ---- */
static const char *const post_json[] = {"bytes, but data_offsets", "overlap", "belong to no tensor", "end before they begin",
                                        "truncated (header says", ") is too large", "checksum", NULL};
static verdict fg_verdict(const unsigned char *b, size_t n, int *stage_pre) {
    *stage_pre = 0;
    fg_st_file *f = fg_st_parse(b, n, "in");
    if (f) {
        fg_st_close(f);
        return ACCEPT;
    }
    const char *m = fg_last_error();
    if (strstr(m, "truncated (file has") || strstr(m, "implausible") || strstr(m, "bytes of header, file has"))
        *stage_pre = 1;
    for (int i = 0; post_json[i]; i++)
        if (strstr(m, post_json[i]) && !strstr(m, "appears twice")) return ACCEPT;
    verdict v = {0, ""};
    snprintf(v.msg, sizeof v.msg, "%s", m + 4);
    return v;
}

/* ---- jansson: JSON_REJECT_DUPLICATES; integers are json_int_t (long long), overflow an error ---- */
static verdict jansson_check_int(json_t *x, const char *what) {
    if (!json_is_integer(x)) return refuse("%s is not an integer", what);
    if (json_integer_value(x) < 0) return refuse("%s is negative", what);
    return ACCEPT;
}
static verdict jansson_verdict(const char *h, size_t n) {
    json_error_t e;
    json_t *root = json_loadb(h, n, JSON_REJECT_DUPLICATES, &e);
    if (!root) {
        verdict v = {0, ""};
        snprintf(v.msg, sizeof v.msg, "%s (position %d)", e.text, e.position);
        return v;
    }
    verdict v = ACCEPT;
    const char *key;
    json_t *val;
    if (!json_is_object(root)) {
        v = refuse("not an object", NULL);
        goto done;
    }
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) { v = refuse("__metadata__ not an object", NULL); goto done; }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) { v = refuse("metadata '%s' not a string", mk); goto done; }
            }
            continue;
        }
        if (!json_is_object(val) || json_object_size(val) != 3) { v = refuse("tensor '%s' malformed", key); goto done; }
        json_t *dt = json_object_get(val, "dtype"), *sh = json_object_get(val, "shape"),
               *of = json_object_get(val, "data_offsets");
        if (!json_is_string(dt) || !known_dtype(json_string_value(dt))) { v = refuse("tensor '%s' dtype", key); goto done; }
        if (!json_is_array(sh) || json_array_size(sh) > 8) { v = refuse("tensor '%s' shape", key); goto done; }
        for (size_t i = 0; i < json_array_size(sh); i++)
            if (!(v = jansson_check_int(json_array_get(sh, i), "a shape dimension")).ok) goto done;
        if (!json_is_array(of) || json_array_size(of) != 2) { v = refuse("tensor '%s' data_offsets", key); goto done; }
        for (size_t i = 0; i < 2; i++)
            if (!(v = jansson_check_int(json_array_get(of, i), "a data offset")).ok) goto done;
    }
done:
    json_decref(root);
    return v;
}

/* ---- cJSON: numbers are doubles (valueint an int); duplicates stay in the child list ---- */
static verdict cjson_check_int(const cJSON *x, const char *what) {
    if (!cJSON_IsNumber(x)) return refuse("%s is not a number", what);
    double d = x->valuedouble;
    if (d < 0) return refuse("%s is negative", what);
    if (d != (double)(int64_t)d || d >= 9223372036854775808.0) return refuse("%s is not an integer", what);
    return ACCEPT;
}
static int cmp_strp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }
/* cJSON keeps a repeated key as a second child: the check layer sorts the names to find one */
static int cjson_dups(const cJSON *o) {
    int n = cJSON_GetArraySize(o), k = 0, dup = 0;
    const char **names = malloc((size_t)(n ? n : 1) * sizeof *names);
    for (const cJSON *a = o->child; a; a = a->next) names[k++] = a->string;
    qsort(names, (size_t)k, sizeof *names, cmp_strp);
    for (int i = 1; i < k && !dup; i++) dup = !strcmp(names[i - 1], names[i]);
    free(names);
    return dup;
}
static verdict cjson_verdict(const char *h, size_t n) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(h, n, &end, 0);
    if (!root) return refuse("parse error near offset %s", NULL);
    verdict v = ACCEPT;
    /* trailing bytes: only whitespace may follow (require_null_terminated needs a NUL inside n) */
    for (const char *p = end; p < h + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') { v = refuse("data after the object", NULL); goto done; }
    if (!cJSON_IsObject(root)) { v = refuse("not an object", NULL); goto done; }
    if (cjson_dups(root)) { v = refuse("duplicate key (found by the check layer)", NULL); goto done; }
    for (const cJSON *t = root->child; t; t = t->next) {
        if (!strcmp(t->string, "__metadata__")) {
            if (!cJSON_IsObject(t) || cjson_dups(t)) { v = refuse("__metadata__", NULL); goto done; }
            for (const cJSON *m = t->child; m; m = m->next)
                if (!cJSON_IsString(m)) { v = refuse("metadata '%s' not a string", m->string); goto done; }
            continue;
        }
        if (!cJSON_IsObject(t) || cJSON_GetArraySize(t) != 3 || cjson_dups(t)) { v = refuse("tensor '%s'", t->string); goto done; }
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype"), *sh = cJSON_GetObjectItemCaseSensitive(t, "shape"),
                    *of = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        if (!cJSON_IsString(dt) || !known_dtype(dt->valuestring)) { v = refuse("tensor '%s' dtype", t->string); goto done; }
        if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) > 8) { v = refuse("tensor '%s' shape", t->string); goto done; }
        for (const cJSON *d = sh->child; d; d = d->next)
            if (!(v = cjson_check_int(d, "a shape dimension")).ok) goto done;
        if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2) { v = refuse("tensor '%s' offsets", t->string); goto done; }
        for (const cJSON *d = of->child; d; d = d->next)
            if (!(v = cjson_check_int(d, "a data offset")).ok) goto done;
    }
done:
    cJSON_Delete(root);
    return v;
}

/* ---- inputs ---- */
typedef struct {
    char name[96];
    const char *want; /* the test's required message part, for table cases */
    unsigned char *b;
    size_t n;
} input;
static input *ins;
static int nin, capin;
static void add_input(const char *name, unsigned char *b, size_t n) {
    if (nin == capin) ins = realloc(ins, (size_t)(capin = capin ? 2 * capin : 256) * sizeof *ins);
    snprintf(ins[nin].name, sizeof ins[nin].name, "%s", name);
    ins[nin].want = NULL;
    ins[nin].b = b;
    ins[nin].n = n;
    nin++;
}
/* 8-byte length, the JSON, ndata data bytes (the test file's make_st) */
static void add_json(const char *name, const char *json, size_t jn, size_t ndata) {
    size_t n = 8 + jn + ndata;
    unsigned char *b = malloc(n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)jn >> (8 * i));
    memcpy(b + 8, json, jn);
    for (size_t i = 0; i < ndata; i++) b[8 + jn + i] = (unsigned char)(i * 7 + 3);
    add_input(name, b, n);
}
static void add_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        void *b = NULL;
        size_t n = 0;
        if (fg_read_file(p, 1 << 20, &b, &n) != FG_OK) { /* regular files of at most 1 MiB, never waited on */
            fg_clear_error();
            continue;
        }
        snprintf(p, sizeof p, "%s/%.40s", strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir, e->d_name);
        add_input(p, b, n);
    }
    closedir(d);
}

#define T1 "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"
/* tests/test_safetensors.c, refuses_malformed_headers_with_a_reason: the JSON, data bytes, and the
 * message part the test requires */
static const struct {
    const char *json;
    size_t ndata;
    const char *want;
} table[] = {
    {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 'a': unknown dtype 'F33'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor 'a': entry lacks 'data_offsets'"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"foo\":1}}", 8, "tensor 'a': unexpected key 'foo'"},
    {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "key 'dtype' appears twice"},
    {"{\"a\":" T1 ",\"a\":" T1 "}", 8, "tensor name 'a' appears twice"},
    {"{\"__metadata__\":{\"k\":1},\"a\":" T1 "}", 8, "metadata value for 'k' must be a string"},
    {"{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0, "metadata key 'k' appears twice"},
    {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "key '__metadata__' appears twice"},
    {"{\"a\":" T1 ",}", 8, "malformed header JSON: expected a tensor name at header byte"},
    {"{\"a\"" T1 "}", 8, "expected ':' at header byte 4"},
    {"{\"a\":{\"dtype\":\"F32}}", 8, "unterminated string"},
    {"{\"a\tb\":" T1 "}", 8, "control character 0x09"},
    {"{\"a\\qb\":" T1 "}", 8, "bad escape at header byte 3"},
    {"{\"a\\ud800\":" T1 "}", 8, "unpaired surrogate \\ud800"},
    {"{\"a\\udc00\":" T1 "}", 8, "unpaired surrogate \\udc00"},
    {"{\"a\\u12\":" T1 "}", 8, "bad \\u escape"},
    {"{\"a\\u0000\":" T1 "}", 8, "\\u0000 in a header string"},
    {"{\"a\xff\":" T1 "}", 8, "invalid UTF-8 at header byte 3"},
    {"{\"a\xc0\xaf\":" T1 "}", 8, "invalid UTF-8"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, "leading zero"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "negative number for a shape dimension"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "a shape dimension must be an integer"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8, "expected a shape dimension"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, "more than 8 dimensions"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8, "expected ']' (data_offsets has two numbers)"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", 8,
     "number too large for a shape dimension"},
    {"{\"a\":5}", 8, "expected '{' (the entry of tensor 'a')"},
    {"[]", 0, "expected '{' (the header object) at header byte 0"},
    {"{} x", 0, "unexpected data after the header object at header byte 3"},
    {"{}\0", 0, "unexpected data after the header object"},
    {"", 0, "expected '{' (the header object) at header byte 0 (found the end of the header)"},
};

/* Probes: valid or not by the format's rules (flashgrad's verdict is the reference). */
static const struct {
    const char *what, *json;
    size_t ndata;
} probes[] = {
    {"dim 2^53+1 (zero-sized)", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,9007199254740993],\"data_offsets\":[0,0]}}", 0},
    {"dim INT64_MAX (zero-sized)", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,9223372036854775807],\"data_offsets\":[0,0]}}", 0},
    {"dim INT64_MAX+1", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,9223372036854775808],\"data_offsets\":[0,0]}}", 0},
    {"dim UINT64_MAX+1", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,18446744073709551616],\"data_offsets\":[0,0]}}", 0},
    {"dim 1e3", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1e3],\"data_offsets\":[0,1000]}}", 1000},
    {"dim 8.0", "{\"a\":{\"dtype\":\"U8\",\"shape\":[8.0],\"data_offsets\":[0,8]}}", 8},
    {"dim -0", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-0],\"data_offsets\":[0,0]}}", 0},
    {"dim 08", "{\"a\":{\"dtype\":\"U8\",\"shape\":[08],\"data_offsets\":[0,8]}}", 8},
    {"dim true", "{\"a\":{\"dtype\":\"U8\",\"shape\":[true],\"data_offsets\":[0,1]}}", 1},
    {"duplicate dtype, same value", "{\"a\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", 8},
    {"duplicate metadata key", "{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0},
    {"duplicate tensor", "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}", 8},
    {"NUL escape in metadata", "{\"__metadata__\":{\"k\":\"a\\u0000b\"}}", 0},
    {"lone surrogate", "{\"__metadata__\":{\"k\":\"\\ud800\"}}", 0},
    {"surrogate pair", "{\"__metadata__\":{\"k\":\"\\ud834\\udd1e\"}}", 0},
    {"overlong UTF-8", "{\"__metadata__\":{\"k\":\"\xc0\xaf\"}}", 0},
    {"UTF-8 surrogate bytes", "{\"__metadata__\":{\"k\":\"\xed\xa0\x80\"}}", 0},
    {"raw tab in string", "{\"__metadata__\":{\"k\":\"a\tb\"}}", 0},
    {"single quotes", "{'__metadata__':{}}", 0},
    {"trailing comma in object", "{\"__metadata__\":{\"k\":\"v\",}}", 0},
    {"comment", "{/*c*/}", 0},
    {"BOM", "\xef\xbb\xbf{}", 0},
    {"padding newline", "{}\n  ", 0},
    {"empty key tensor", "{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1},
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* A header of nt tensors as flashgrad writes it (compact, name order), with its data buffer size. */
static char *make_header(int nt, size_t *hn, size_t *data) {
    size_t cap = (size_t)nt * 120 + 64, k = 0;
    char *h = malloc(cap);
    k += (size_t)sprintf(h + k, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0;
    for (int i = 0; i < nt; i++) {
        k += (size_t)sprintf(h + k, ",\"h.%06d.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[%zu,%zu]}",
                             i, off, off + 16);
        off += 16;
    }
    h[k++] = '}';
    *hn = k;
    *data = off;
    return h;
}

typedef verdict (*libfn)(const char *, size_t);
static void time_parse(const char *label, int nt) {
    size_t hn, dn;
    char *h = make_header(nt, &hn, &dn);
    size_t n = 8 + hn + dn;
    unsigned char *b = calloc(1, n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hn >> (8 * i));
    memcpy(b + 8, h, hn);
    int reps = nt > 10000 ? 5 : 200;
    const char *names[4] = {"flashgrad", "jansson", "cJSON", "json-c"};
    libfn fns[4] = {NULL, jansson_verdict, cjson_verdict, jsonc_verdict};
    printf("header parse, %s: %d tensors, %zu header bytes (median of %d, ms):", label, nt, hn, reps);
    for (int l = 0; l < 4; l++) {
        double best[256];
        int r = reps > 256 ? 256 : reps;
        for (int i = 0; i < r; i++) {
            double t0 = now();
            int pre;
            verdict v = l ? fns[l](h, hn) : fg_verdict(b, n, &pre);
            best[i] = now() - t0;
            if (!v.ok) printf(" [%s refused: %s]", names[l], v.msg);
        }
        for (int i = 1; i < r; i++)
            for (int j = i; j > 0 && best[j] < best[j - 1]; j--) {
                double t = best[j];
                best[j] = best[j - 1];
                best[j - 1] = t;
            }
        printf("  %s %.3f", names[l], 1e3 * best[r / 2]);
    }
    printf("\n");
    free(b);
    free(h);
}

/* Peak memory of parsing a header of hn bytes whose one metadata value is an array of small
 * integers: a child process per library, ru_maxrss of each. */
static void memory_probe(size_t hn) {
    char *h = malloc(hn + 1);
    size_t k = (size_t)sprintf(h, "{\"__metadata__\":{\"k\":[");
    while (k + 8 < hn) {
        h[k++] = '1';
        h[k++] = ',';
    }
    h[k++] = '1';
    h[k++] = ']';
    h[k++] = '}';
    while (k < hn - 1) h[k++] = ' ';
    h[k++] = '}';
    unsigned char *b = malloc(8 + hn);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hn >> (8 * i));
    memcpy(b + 8, h, hn);
    const char *names[4] = {"flashgrad", "jansson", "cJSON", "json-c"};
    libfn fns[4] = {NULL, jansson_verdict, cjson_verdict, jsonc_verdict};
    printf("a %zu-byte header of one metadata value [1,1,...] (refused by all): peak RSS, time:", hn);
    fflush(stdout);
    for (int l = 0; l < 4; l++) {
        pid_t p = fork();
        if (p == 0) {
            double t0 = now();
            int pre;
            verdict v = l ? fns[l](h, hn) : fg_verdict(b, 8 + hn, &pre);
            fprintf(stderr, "%s:%s:%.3f\n", names[l], v.ok ? "ACCEPTED" : "refused", now() - t0);
            _exit(0);
        }
        int st;
        struct rusage ru;
        wait4(p, &st, 0, &ru);
        printf("  %s %.0f MB", names[l], ru.ru_maxrss / 1024.0);
    }
    printf("\n");
    free(b);
    free(h);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) add_dir(argv[i]);
    int ncorpus = nin;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "table case %zu", i);
        if (!strcmp(table[i].json, "{}")) /* "{}\0": the JSON holds a NUL */
            add_json(nm, "{}\0", 3, 0);
        else
            add_json(nm, table[i].json, strlen(table[i].json), table[i].ndata);
        ins[nin - 1].want = table[i].want;
    }
    int ntable = nin - ncorpus;
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) add_json(probes[i].what, probes[i].json, strlen(probes[i].json), probes[i].ndata);

    const char *names[3] = {"jansson", "cJSON", "json-c"};
    libfn fns[3] = {jansson_verdict, cjson_verdict, jsonc_verdict};
    int agree[3] = {0}, looser[3] = {0}, stricter[3] = {0}, msg_kept[3] = {0}, counted = 0, pre = 0, fg_refused = 0;
    for (int i = 0; i < nin; i++) {
        int stage_pre;
        verdict f = fg_verdict(ins[i].b, ins[i].n, &stage_pre);
        if (stage_pre) {
            pre++;
            continue;
        }
        uint64_t hl = 0;
        for (int k = 0; k < 8; k++) hl |= (uint64_t)ins[i].b[k] << (8 * k);
        const char *h = (const char *)ins[i].b + 8;
        counted++;
        fg_refused += !f.ok;
        int is_table = i >= ncorpus && i < ncorpus + ntable, is_probe = i >= ncorpus + ntable;
        for (int l = 0; l < 3; l++) {
            verdict v = fns[l](h, (size_t)hl);
            if (v.ok == f.ok) {
                agree[l]++;
            } else if (v.ok) {
                looser[l]++;
            } else {
                stricter[l]++;
            }
            if (is_table && !v.ok && strstr(v.msg, ins[i].want)) msg_kept[l]++;
            if (v.ok != f.ok || is_probe || is_table)
                printf("%-10s %-34.34s flashgrad: %-60.60s | %s: %s\n", v.ok != f.ok ? "DIFFERS" : "same", ins[i].name,
                       f.ok ? "accepted (JSON stage)" : f.msg, names[l], v.ok ? "ACCEPTED" : v.msg);
        }
    }
    printf("\n%d inputs (%d corpus/regression files, %d of the test's malformed-header table, %zu probes); %d refused "
           "before the JSON (length prefix) left out; of the %d compared, flashgrad refuses %d at the JSON stage\n",
           nin, ncorpus, ntable, sizeof probes / sizeof probes[0], pre, counted, fg_refused);
    for (int l = 0; l < 3; l++)
        printf("%-8s same verdict %d/%d, accepts what flashgrad refuses %d, refuses what flashgrad accepts %d; "
               "the test's required message kept in %d of %d table cases\n",
               names[l], agree[l], counted, looser[l], stricter[l], msg_kept[l], ntable);
    printf("\n");
    time_parse("GPT-2 small-sized", 150);
    time_parse("large", 100000);
    memory_probe((size_t)64 << 20);
    return 0;
}
