/* error.c — the per-thread last-error buffer behind fg_last_error(). */
#include "tensor/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char g_msg[1024];
static _Thread_local fg_status g_status = FG_OK;

const char *fg_last_error(void) { return g_msg; }
fg_status fg_last_status(void) { return g_status; }

void fg_clear_error(void) {
    g_msg[0] = '\0';
    g_status = FG_OK;
}

/* Formats into a scratch buffer first, so a message may quote the previous one
 * (fg_error(st, "step 3: %s", fg_last_error())). */
fg_status fg_error(fg_status st, const char *fmt, ...) {
    char msg[sizeof g_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(g_msg, msg, sizeof g_msg);
    g_status = st;
    return st;
}

/* The width of byte c in fg_printable's output. */
static size_t printable_width(unsigned char c) { return c == '\\' ? 2 : (c >= 0x20 && c < 0x7f) ? 1 : 4; }

const char *fg_printable(char *out, size_t cap, const char *text, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t total = 0;
    for (size_t i = 0; i < n && total < cap; i++) total += printable_width((unsigned char)text[i]);
    /* all of it when it fits; else as much as leaves room for "..." and the NUL */
    size_t room = total + 1 <= cap ? cap - 1 : cap - 4, k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        size_t w = printable_width(c);
        if (k + w > room) break;
        if (w == 1) {
            out[k++] = (char)c;
        } else if (w == 2) {
            out[k++] = '\\';
            out[k++] = '\\';
        } else {
            out[k++] = '\\';
            out[k++] = 'x';
            out[k++] = hex[c >> 4];
            out[k++] = hex[c & 15];
        }
    }
    if (total + 1 > cap) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    out[k] = '\0';
    return out;
}

const char *fg_status_name(fg_status st) {
    static const char *names[FG_STATUS_COUNT] = {
        "ok",        "bad argument",    "shape mismatch", "dtype mismatch",   "device mismatch", "out of memory",
        "i/o error", "bad file format", "bad state",      "non-finite value",
    };
    return (st >= 0 && st < FG_STATUS_COUNT) ? names[st] : "unknown status";
}

void fg_assert_fail(const char *expr, const char *file, int line, const char *hint) {
    fprintf(stderr, "flashgrad internal error at %s:%d: %s (%s)\n", file, line, expr, hint ? hint : "");
    abort();
}
