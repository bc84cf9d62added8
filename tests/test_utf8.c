/* UTF-8 validation against RFC 3629's boundaries. */
#include <criterion/criterion.h>
#include <string.h>

#include "tensor/utf8.h"

static size_t seq(const char *s) { return fg_utf8_seq((const unsigned char *)s, strlen(s)); }

Test(utf8, sequence_lengths_at_the_boundaries) {
    cr_expect_eq(seq("A"), 1);
    cr_expect_eq(seq("\xC2\x80"), 2);         /* U+0080, the first two-byte code point */
    cr_expect_eq(seq("\xE0\xA0\x80"), 3);     /* U+0800 */
    cr_expect_eq(seq("\xED\x9F\xBF"), 3);     /* U+D7FF, just below the surrogates */
    cr_expect_eq(seq("\xEF\xBF\xBF"), 3);     /* U+FFFF */
    cr_expect_eq(seq("\xF0\x90\x80\x80"), 4); /* U+10000 */
    cr_expect_eq(seq("\xF4\x8F\xBF\xBF"), 4); /* U+10FFFF, the last code point */
}

Test(utf8, invalid_forms_are_refused) {
    cr_expect_eq(seq("\x80"), 0);             /* a stray continuation byte */
    cr_expect_eq(seq("\xC0\xAF"), 0);         /* an overlong '/' */
    cr_expect_eq(seq("\xE0\x9F\xBF"), 0);     /* an overlong three-byte form */
    cr_expect_eq(seq("\xED\xA0\x80"), 0);     /* U+D800, a surrogate */
    cr_expect_eq(seq("\xF0\x8F\xBF\xBF"), 0); /* an overlong four-byte form */
    cr_expect_eq(seq("\xF4\x90\x80\x80"), 0); /* above U+10FFFF */
    cr_expect_eq(seq("\xF5\x80\x80\x80"), 0);
    cr_expect_eq(seq("\xE2\x82"), 0);     /* truncated */
    cr_expect_eq(seq("\xE2\x28\xA1"), 0); /* a bad continuation byte */
}

Test(utf8, whole_strings) {
    cr_expect(fg_utf8_valid(""));
    cr_expect(fg_utf8_valid("data/input.txt"));
    cr_expect(fg_utf8_valid("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
    cr_expect(!fg_utf8_valid("caf\xE9")); /* Latin-1 */
    cr_expect(!fg_utf8_valid("ok\xC3"));  /* cut short at the end */
}
