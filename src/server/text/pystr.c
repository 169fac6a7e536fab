/* Python str methods on UTF-8: isspace and strip, over all of Unicode's whitespace. */
#include "text/pystr.h"

#include "text/utf8.h"

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
