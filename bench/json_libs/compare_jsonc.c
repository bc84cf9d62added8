/* compare_jsonc.c — json-c's check layer for compare.c (see there). */
#include <errno.h>
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench/json_libs/verdict.h"

static const char *const dtypes[] = {"F32", "F64", "I32",  "I64",  "U8",      "I8",     "I16", "U16",
                                     "U32", "U64", "F16", "BF16", "BOOL", "F8_E4M3", "F8_E5M2"};
int known_dtype(const char *s) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcmp(s, dtypes[i])) return 1;
    return 0;
}


verdict refuse(const char *fmt, const char *a) {
    verdict v = {0, ""};
    snprintf(v.msg, sizeof v.msg, fmt, a ? a : "");
    return v;
}
const verdict ACCEPT = {1, ""};

/* ---- json-c: JSON_TOKENER_STRICT; a repeated key replaces the earlier value ---- */
static verdict jsonc_check_int(struct json_object *x, const char *what) {
    if (!json_object_is_type(x, json_type_int)) return refuse("%s is not an integer", what);
    errno = 0;
    int64_t i = json_object_get_int64(x);
    if (errno) return refuse("%s out of range", what);
    if (i < 0) return refuse("%s is negative", what);
    return ACCEPT;
}
verdict jsonc_verdict(const char *h, size_t n) {
    json_tokener *tok = json_tokener_new();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    struct json_object *root = json_tokener_parse_ex(tok, h, (int)n);
    enum json_tokener_error err = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!root || err != json_tokener_success) {
        json_object_put(root);
        return refuse("%s", json_tokener_error_desc(err));
    }
    verdict v = ACCEPT;
    for (size_t p = used; p < n; p++)
        if (h[p] != ' ' && h[p] != '\t' && h[p] != '\n' && h[p] != '\r') { v = refuse("data after the object", NULL); goto done; }
    if (!json_object_is_type(root, json_type_object)) { v = refuse("not an object", NULL); goto done; }
    json_object_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_object_is_type(val, json_type_object)) { v = refuse("__metadata__", NULL); goto done; }
            json_object_object_foreach(val, mk, mv) {
                if (!json_object_is_type(mv, json_type_string)) { v = refuse("metadata '%s'", mk); goto done; }
                if (strlen(json_object_get_string(mv)) != (size_t)json_object_get_string_len(mv)) { v = refuse("NUL in '%s'", mk); goto done; }
            }
            continue;
        }
        if (strlen(key) == 0 && 0) continue;
        struct json_object *dt, *sh, *of;
        if (!json_object_is_type(val, json_type_object) || json_object_object_length(val) != 3 ||
            !json_object_object_get_ex(val, "dtype", &dt) || !json_object_object_get_ex(val, "shape", &sh) ||
            !json_object_object_get_ex(val, "data_offsets", &of)) { v = refuse("tensor '%s'", key); goto done; }
        if (!json_object_is_type(dt, json_type_string) || !known_dtype(json_object_get_string(dt))) { v = refuse("tensor '%s' dtype", key); goto done; }
        if (!json_object_is_type(sh, json_type_array) || json_object_array_length(sh) > 8) { v = refuse("tensor '%s' shape", key); goto done; }
        for (size_t i = 0; i < json_object_array_length(sh); i++)
            if (!(v = jsonc_check_int(json_object_array_get_idx(sh, i), "a shape dimension")).ok) goto done;
        if (!json_object_is_type(of, json_type_array) || json_object_array_length(of) != 2) { v = refuse("tensor '%s' offsets", key); goto done; }
        for (size_t i = 0; i < 2; i++)
            if (!(v = jsonc_check_int(json_object_array_get_idx(of, i), "a data offset")).ok) goto done;
    }
done:
    json_object_put(root);
    return v;
}

