/* Unit test of airlockd's exec output formatting, Python str.strip() semantics and
 * U+FFFD replacement. Built and run by spec/server/server_spec.lua. */
#include "text/exec_format.h"
#include "text/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, checks;

static void check_str(const char *what, const char *got, size_t got_len, const char *want)
{
    checks++;
    if (got_len != strlen(want) || memcmp(got, want, got_len) != 0) {
        failures++;
        printf("FAIL %s\n  got:  [%.*s]\n  want: [%s]\n", what, (int)got_len, got, want);
    }
}

static void fmt(const char *what, const char *out, const char *err, const char *const *w, size_t nw,
                int code, int timed_out, const char *want)
{
    size_t len;
    char *s = exec_format_output(out, strlen(out), err, strlen(err), w, nw, code, timed_out, &len);
    check_str(what, s, len, want);
    free(s);
}

static void strip(const char *what, const char *in, const char *want)
{
    size_t a, b;
    py_strip(in, strlen(in), &a, &b);
    check_str(what, in + a, b - a, want);
}

static void replace(const char *what, const char *in, size_t n, const char *want)
{
    size_t len;
    char *s = utf8_replace(in, n, &len);
    check_str(what, s, len, want);
    free(s);
}

int main(void)
{
    const char *oom[] = {"Process killed by cgroups (Memory limit exceeded)."};
    const char *to[] = {"Execution exceeded 3s limit."};
    const char *two[] = {"first", "second"};
    fmt("stdout only", "hi\n", "", NULL, 0, 0, 0, "[STDOUT]:\nhi\n[EXIT CODE]: 0");
    fmt("empty", "", "", NULL, 0, 0, 0, "[EXIT CODE]: 0");
    fmt("whitespace-only stdout omitted", " \n\t\n", "", NULL, 0, 0, 0, "[EXIT CODE]: 0");
    fmt("both streams", "a\n", "b\n", NULL, 0, 2, 0, "[STDOUT]:\na\n[STDERR]:\nb\n[EXIT CODE]: 2");
    fmt("oom", "", "Killed\n", oom, 1, 137, 0,
        "[STDERR]:\nKilled\n[WARNING]: Process killed by cgroups (Memory limit exceeded).\n[EXIT CODE]: 137");
    fmt("warnings in order", "x", "", two, 2, 1, 0, "[STDOUT]:\nx\n[WARNING]: first\n[WARNING]: second\n[EXIT CODE]: 1");
    fmt("timeout ignores streams", "lost\n", "lost\n", to, 1, -1, 1,
        "[TIMEOUT]: Execution exceeded 3s limit.\n[EXIT CODE]: -1");
    fmt("inner whitespace kept", "  a \n\n b  \n", "", NULL, 0, 0, 0, "[STDOUT]:\na \n\n b\n[EXIT CODE]: 0");

    strip("ascii", " \t\n\v\f\rx\r\n", "x");
    strip("info separators", "\x1c\x1d\x1e\x1fx\x1f", "x");
    strip("nbsp and nel", "\xc2\xa0\xc2\x85x\xc2\xa0", "x");
    strip("ogham, en quad..hair space", "\xe1\x9a\x80\xe2\x80\x80\xe2\x80\x8ax\xe2\x80\x8a", "x");
    strip("line/para sep, nnbsp, mmsp, ideographic", "\xe2\x80\xa8\xe2\x80\xa9x\xe2\x80\xaf\xe2\x81\x9f\xe3\x80\x80", "x");
    strip("zero width space is not whitespace", "\xe2\x80\x8bx", "\xe2\x80\x8bx");
    strip("BOM is not whitespace", "\xef\xbb\xbfx ", "\xef\xbb\xbfx");
    strip("all whitespace", " \xc2\xa0 ", "");

    replace("valid untouched", "h\xc3\xa9", 3, "h\xc3\xa9");
    replace("lone byte", "a\xff" "b", 3, "a\xef\xbf\xbd" "b");
    replace("truncated 3-byte is one U+FFFD", "\xe2\x82", 2, "\xef\xbf\xbd");
    replace("encoded surrogate is three", "\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    replace("overlong", "\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd");
    {
        size_t len;
        char *s = utf8_replace("a\0b", 3, &len); /* NUL bytes are valid UTF-8 */
        checks++;
        if (len != 3 || memcmp(s, "a\0b", 3) != 0) {
            failures++;
            printf("FAIL NUL kept\n");
        }
        free(s);
    }

    checks++;
    if (utf8_count("h\xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80", 10) != 4) {
        failures++;
        printf("FAIL utf8_count\n");
    }
    printf("%d checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
