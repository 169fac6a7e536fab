/* Unit test of the JSON string decoder a file write streams its content through (text/jstr):
 * sizes and Python's len(), every escape, surrogate pairs, lone surrogates refused, and the
 * decoded bytes identical whatever the piece size (down to the 4-byte minimum). Built and run
 * by spec/server/storage_spec.lua under ASan/UBSan. */
#include "check.h"
#include "text/jstr.h"

#include <stdlib.h>
#include <string.h>

/* Decodes lit (the inside of a literal) in pieces of cap bytes. */
static size_t decode_all(const char *lit, size_t cap, char *out)
{
    size_t n = strlen(lit), pos = 0, got = 0, k;
    char *piece = malloc(cap);
    while ((k = jstr_decode(lit, n, &pos, piece, cap)) > 0) {
        memcpy(out + got, piece, k);
        got += k;
    }
    free(piece);
    return got;
}

static void check_literal(const char *lit, const char *want, size_t want_len, size_t want_chars)
{
    size_t bytes = 0, chars = 0;
    CHECK(jstr_measure(lit, strlen(lit), &bytes, &chars));
    CHECK(bytes == want_len);
    CHECK(chars == want_chars);
    for (size_t cap = JSTR_DECODE_MIN; cap < 40; cap++) {
        char out[256];
        size_t got = decode_all(lit, cap, out);
        CHECK(got == want_len && memcmp(out, want, want_len) == 0);
    }
}

int main(void)
{
    check_literal("", "", 0, 0);
    check_literal("plain text", "plain text", 10, 10);
    check_literal("a\\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti", "a\"b\\c/d\be\ff\ng\rh\ti", 17, 17);
    check_literal("\\u0041\\u00e9\\u20ac", "A\xc3\xa9\xe2\x82\xac", 6, 3);
    check_literal("x\\u0000y", "x\0y", 3, 3);
    /* raw UTF-8: characters, not bytes */
    check_literal("\xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80", "\xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80", 10, 5);
    /* a surrogate pair is one character of four bytes */
    check_literal("\\ud83d\\ude00!", "\xf0\x9f\x98\x80!", 5, 2);
    check_literal("\\uD83D\\uDE00", "\xf0\x9f\x98\x80", 4, 1);
    /* lone surrogates: Python keeps them, UTF-8 cannot hold them */
    size_t b, c;
    CHECK(!jstr_measure("\\ud800", 6, &b, &c));
    CHECK(!jstr_measure("a\\udc00b", 8, &b, &c));
    CHECK(!jstr_measure("\\ud83d\\u0041", 12, &b, &c));
    CHECK(!jstr_measure("\\ud83d", 6, &b, &c));
    /* the end of a literal in JSON text, escaped quotes and backslashes included */
    const char *text = "\"a\\\"b\\\\\" , \"c\"";
    CHECK(jstr_end(text, strlen(text), 0) == 8);
    CHECK(jstr_end(text, strlen(text), 11) == 14);
    /* a long literal across many pieces */
    size_t n = 200000;
    char *lit = malloc(n * 6 + 1), *want = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        memcpy(lit + i * 6, "\\u00e9", 6);
        memcpy(want + i * 2, "\xc3\xa9", 2);
    }
    lit[n * 6] = '\0';
    CHECK(jstr_measure(lit, n * 6, &b, &c) && b == n * 2 && c == n);
    char *out = malloc(n * 2);
    CHECK(decode_all(lit, 65536, out) == n * 2 && memcmp(out, want, n * 2) == 0);
    free(out);
    free(lit);
    free(want);
    return CHECK_SUMMARY();
}
