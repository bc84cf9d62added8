/* utf8.h — UTF-8 validation, one rule for every file format and message flashgrad writes.
 *
 * Valid means RFC 3629 (section 4): no stray continuation bytes, no truncated sequences, no
 * overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF.
 */
#ifndef FG_UTF8_H
#define FG_UTF8_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Length (1..4) of the valid UTF-8 sequence at p[0..n), n >= 1; 0 when it is not valid. */
size_t fg_utf8_seq(const unsigned char *p, size_t n);

/* 1 when the NUL-terminated string s is valid UTF-8 throughout, else 0. */
int fg_utf8_valid(const char *s);

#ifdef __cplusplus
}
#endif
#endif /* FG_UTF8_H */
