#include "text/exec_format.h"

#include "text/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool py_isspace(uint32_t cp)
{
    /* CPython's Py_UNICODE_ISSPACE: bidi classes WS, B, S and category Zs. */
    if (cp <= 0x7F)
        return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

/* Start of the code point that ends just before s[end]. */
static size_t prev_start(const char *s, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

void py_strip(const char *s, size_t n, size_t *start, size_t *end)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t a = 0, b = n;
    while (a < b) {
        uint32_t cp;
        size_t l = utf8_seq_len(p + a, b - a, &cp);
        if (l == 0 || !py_isspace(cp))
            break;
        a += l;
    }
    while (b > a) {
        size_t ps = prev_start(s, b);
        uint32_t cp;
        size_t l = utf8_seq_len(p + ps, b - ps, &cp);
        if (l == 0 || ps + l != b || !py_isspace(cp))
            break;
        b = ps;
    }
    *start = a;
    *end = b;
}

typedef struct {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

/* Parts are joined with "\n"; this adds the separator before every part but the first. */
static void sb_part(sbuf *b, const char *prefix, const char *s, size_t n)
{
    if (b->len)
        sb_add(b, "\n", 1);
    sb_str(b, prefix);
    sb_add(b, s, n);
}

char *exec_format_output(const char *out, size_t out_len, const char *err, size_t err_len,
                         const char *const *warnings, size_t nwarnings, int exit_code,
                         bool timed_out, size_t *len)
{
    sbuf b = {0};
    char code[32];
    snprintf(code, sizeof code, "%d", exit_code);
    if (timed_out) {
        sb_part(&b, "[TIMEOUT]: ", nwarnings ? warnings[0] : "", nwarnings ? strlen(warnings[0]) : 0);
        sb_part(&b, "[EXIT CODE]: ", code, strlen(code));
    } else {
        size_t a, e;
        py_strip(out, out_len, &a, &e);
        if (e > a)
            sb_part(&b, "[STDOUT]:\n", out + a, e - a);
        py_strip(err, err_len, &a, &e);
        if (e > a)
            sb_part(&b, "[STDERR]:\n", err + a, e - a);
        for (size_t i = 0; i < nwarnings; i++)
            sb_part(&b, "[WARNING]: ", warnings[i], strlen(warnings[i]));
        sb_part(&b, "[EXIT CODE]: ", code, strlen(code));
    }
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
