/* Python repr() of strings and string lists. */
#include "text/pyrepr.h"

#include "text/utf8.h"
#include "util/buf.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Approximates str.isprintable(): controls, separators other than space, format chars
 * and surrogates/noncharacters are escaped by repr(). */
static bool printable(uint32_t cp)
{
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD)
        return false;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
        (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF ||
        (cp >= 0xFFF9 && cp <= 0xFFFB) || cp == 0xFFFE || cp == 0xFFFF)
        return false;
    return true;
}

char *pyrepr_str(const char *s, size_t n)
{
    /* Python picks single quotes unless the text has ' and no ". */
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    char *out = malloc(n * 10 + 3); /* \UXXXXXXXX is the longest escape */
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    const unsigned char *p = (const unsigned char *)s;
    out[o++] = q;
    while (i < n) {
        uint32_t cp;
        size_t l = utf8_seq_len(p + i, n - i, &cp);
        if (l == 0) {
            cp = 0xFFFD;
            l = 1;
        }
        if (cp == (uint32_t)q || cp == '\\') {
            out[o++] = '\\';
            out[o++] = (char)cp;
        } else if (cp == '\n') {
            memcpy(out + o, "\\n", 2), o += 2;
        } else if (cp == '\r') {
            memcpy(out + o, "\\r", 2), o += 2;
        } else if (cp == '\t') {
            memcpy(out + o, "\\t", 2), o += 2;
        } else if (!printable(cp)) {
            if (cp <= 0xFF)
                o += (size_t)sprintf(out + o, "\\x%02x", (unsigned)cp);
            else if (cp <= 0xFFFF)
                o += (size_t)sprintf(out + o, "\\u%04x", (unsigned)cp);
            else
                o += (size_t)sprintf(out + o, "\\U%08x", (unsigned)cp);
        } else {
            memcpy(out + o, p + i, l);
            o += l;
        }
        i += l;
    }
    out[o++] = q;
    out[o] = '\0';
    return out;
}

char *pyrepr_list(const json_t *array)
{
    buffer out = {0};
    size_t idx;
    const json_t *v;
    buf_puts(&out, "[");
    json_array_foreach(array, idx, v) {
        if (!json_is_string(v))
            continue;
        char *r = pyrepr_str(json_string_value(v), json_string_length(v));
        if (!r) {
            buf_free(&out);
            return NULL;
        }
        if (out.len > 1)
            buf_puts(&out, ", ");
        buf_puts(&out, r);
        free(r);
    }
    buf_puts(&out, "]");
    return buf_take(&out, NULL);
}
