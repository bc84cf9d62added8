/* utf8.c — UTF-8 validation (see utf8.h). */
#include "tensor/utf8.h"

#include <string.h>

size_t fg_utf8_seq(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c == 0xE0) { /* E0 A0..BF: below that would be overlong */
        len = 3;
        lo = 0xA0;
    } else if (c == 0xED) { /* ED 80..9F: A0..BF would be a surrogate */
        len = 3;
        hi = 0x9F;
    } else if (c >= 0xE1 && c <= 0xEF)
        len = 3;
    else if (c == 0xF0) { /* F0 90..BF: below that would be overlong */
        len = 4;
        lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3)
        len = 4;
    else if (c == 0xF4) { /* F4 80..8F: above that would pass U+10FFFF */
        len = 4;
        hi = 0x8F;
    } else
        return 0; /* 80..C1 (continuation bytes, overlong two-byte forms), F5..FF */
    if (n < len || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return len;
}

int fg_utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    while (n) {
        size_t k = fg_utf8_seq(p, n);
        if (!k) return 0;
        p += k;
        n -= k;
    }
    return 1;
}
