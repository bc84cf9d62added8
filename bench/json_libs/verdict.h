/* verdict.h — what compare.c and compare_jsonc.c share (json-c's names clash with jansson's, so
 * json-c's check layer lives in a file of its own). */
#ifndef FG_JSON_LIBS_VERDICT_H
#define FG_JSON_LIBS_VERDICT_H
#include <stddef.h>

typedef struct {
    int ok;
    char msg[200];
} verdict;

extern const verdict ACCEPT;
int known_dtype(const char *s);
verdict refuse(const char *fmt, const char *a);
verdict jsonc_verdict(const char *h, size_t n);
#endif
