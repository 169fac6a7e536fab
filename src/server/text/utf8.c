/* UTF-8 decoding as Python's codecs do it: validation, counting, U+FFFD replacement. */
#include "text/utf8.h"

#include <stdlib.h>
#include <string.h>

/* Valid second-byte range for a lead byte; later continuation bytes are 80..BF. */
static bool second_range(unsigned char lead, unsigned char *lo, unsigned char *hi, size_t *len)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
        *len = 2;
    } else if (lead == 0xE0) {
        *len = 3;
        *lo = 0xA0;
    } else if (lead == 0xED) {
        *len = 3;
        *hi = 0x9F;
    } else if (lead >= 0xE1 && lead <= 0xEF) {
        *len = 3;
    } else if (lead == 0xF0) {
        *len = 4;
        *lo = 0x90;
    } else if (lead >= 0xF1 && lead <= 0xF3) {
        *len = 4;
    } else if (lead == 0xF4) {
        *len = 4;
        *hi = 0x8F;
    } else {
        return false;
    }
    return true;
}

/* Returns the valid length, or 0 and in *bad the length of the maximal invalid subpart. */
static size_t decode_one(const unsigned char *s, size_t n, uint32_t *cp, size_t *bad)
{
    unsigned char lo, hi;
    size_t len;
    *bad = 1;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (!second_range(s[0], &lo, &hi, &len))
        return 0;
    uint32_t v = s[0] & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (size_t i = 1; i < len; i++) {
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (i >= n || s[i] < l || s[i] > h) {
            *bad = i;
            return 0;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return len;
}

size_t utf8_seq_len(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t bad;
    uint32_t dummy;
    if (n == 0)
        return 0;
    return decode_one(s, n, cp ? cp : &dummy, &bad);
}

bool utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = utf8_seq_len(p + i, n - i, NULL);
        if (l == 0)
            return false;
        i += l;
    }
    return true;
}

size_t utf8_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            c++;
    return c;
}

size_t utf8_put(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

char *utf8_replace(const char *s, size_t n, size_t *out_len)
{
    /* Worst case: every byte becomes a 3-byte U+FFFD. */
    if (n > (SIZE_MAX - 1) / 3)
        return NULL;
    char *out = malloc(n * 3 + 1);
    if (!out)
        return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        size_t bad;
        size_t l = decode_one(p + i, n - i, &cp, &bad);
        if (l) {
            memcpy(out + o, p + i, l);
            o += l;
            i += l;
        } else {
            o += utf8_put(out + o, 0xFFFD);
            i += bad;
        }
    }
    out[o] = '\0';
    if (out_len)
        *out_len = o;
    return out;
}

size_t utf8_partial_tail(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char b = u[n - k], lo, hi;
        size_t need;
        if (b >= 0x80 && b <= 0xBF)
            continue; /* a continuation: look further back for its lead */
        if (!second_range(b, &lo, &hi, &need) || need <= k)
            return 0; /* ASCII, an invalid lead, or complete */
        if (k >= 2 && (u[n - k + 1] < lo || u[n - k + 1] > hi))
            return 0; /* already invalid: the replacement happens now */
        return k;
    }
    return 0;
}
