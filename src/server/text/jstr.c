/* JSON string literals: measure, decode in pieces, find the end. Input is validated JSON. */
#include "text/jstr.h"

#include <stdint.h>
#include <string.h>

static unsigned hexv(char c)
{
    return c <= '9' ? (unsigned)(c - '0') : (unsigned)((c | 0x20) - 'a' + 10);
}

static uint32_t hex4(const char *p)
{
    return hexv(p[0]) << 12 | hexv(p[1]) << 8 | hexv(p[2]) << 4 | hexv(p[3]);
}

/* The escape at s[i] == '\\': its code point in *cp (a surrogate pair combined; a lone
 * surrogate as itself) and the index after it. */
static size_t escape_at(const char *s, size_t n, size_t i, uint32_t *cp)
{
    char c = s[i + 1];
    if (c != 'u') {
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        *cp = (uint32_t)(unsigned char)to[strchr(from, c) - from];
        return i + 2;
    }
    uint32_t u = hex4(s + i + 2);
    i += 6;
    if (u >= 0xD800 && u <= 0xDBFF && i + 6 <= n && s[i] == '\\' && s[i + 1] == 'u') {
        uint32_t lo = hex4(s + i + 2);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
            *cp = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
            return i + 6;
        }
    }
    *cp = u;
    return i;
}

static size_t utf8_len_of(uint32_t cp)
{
    return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

static size_t utf8_put(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

bool jstr_measure(const char *s, size_t n, size_t *bytes, size_t *chars)
{
    size_t b = 0, c = 0, i = 0;
    while (i < n) {
        if (s[i] != '\\') {
            b++;
            c += ((unsigned char)s[i] & 0xC0) != 0x80; /* a UTF-8 lead byte starts a character */
            i++;
            continue;
        }
        uint32_t cp;
        i = escape_at(s, n, i, &cp);
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return false;
        b += utf8_len_of(cp);
        c++;
    }
    *bytes = b;
    *chars = c;
    return true;
}

size_t jstr_decode(const char *s, size_t n, size_t *pos, char *out, size_t cap)
{
    size_t i = *pos, o = 0;
    while (i < n) {
        if (s[i] != '\\') {
            /* a run of plain bytes, as much as fits */
            const char *bs = memchr(s + i, '\\', n - i);
            size_t run = (bs ? (size_t)(bs - s) : n) - i;
            if (run > cap - o)
                run = cap - o;
            memcpy(out + o, s + i, run);
            o += run;
            i += run;
            if (o == cap)
                break;
            continue;
        }
        if (cap - o < JSTR_DECODE_MIN)
            break;
        uint32_t cp;
        i = escape_at(s, n, i, &cp);
        o += utf8_put(cp, out + o);
    }
    *pos = i;
    return o;
}

size_t jstr_end(const char *s, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
    }
    return n;
}
