/* Python json module compatibility: the decoder's rejections and the encoder's spelling. */
#include "text/pyjson.h"

#include "text/utf8.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>

#define MAX_DEPTH 900 /* beyond this CPython raises RecursionError (400, not 422) */

typedef struct {
    const char *s;
    size_t n;
    const char *msg;
    size_t err; /* byte offset of the error */
    bool deep;
} scan;

static size_t skip_ws(const scan *sc, size_t i)
{
    while (i < sc->n && (sc->s[i] == ' ' || sc->s[i] == '\t' || sc->s[i] == '\n' || sc->s[i] == '\r'))
        i++;
    return i;
}

static bool fail(scan *sc, const char *msg, size_t at)
{
    sc->msg = msg;
    sc->err = at;
    return false;
}

static bool hexd(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* i points just past the opening quote; on success *end is just past the closing one. */
static bool scan_string(scan *sc, size_t i, size_t *end)
{
    size_t begin = i - 1;
    for (;;) {
        while (i < sc->n && sc->s[i] != '"' && sc->s[i] != '\\') {
            if ((unsigned char)sc->s[i] <= 0x1F)
                return fail(sc, "Invalid control character at", i);
            i++;
        }
        if (i >= sc->n)
            return fail(sc, "Unterminated string starting at", begin);
        if (sc->s[i] == '"') {
            *end = i + 1;
            return true;
        }
        i++; /* backslash */
        if (i >= sc->n)
            return fail(sc, "Unterminated string starting at", begin);
        char c = sc->s[i];
        if (c != 'u') {
            if (!strchr("\"\\/bfnrt", c) || c == '\0')
                return fail(sc, "Invalid \\escape", i - 1);
            i++;
            continue;
        }
        size_t u = i;
        i++;
        if (i + 4 >= sc->n)
            return fail(sc, "Invalid \\uXXXX escape", u);
        for (size_t k = 0; k < 4; k++)
            if (!hexd(sc->s[i + k]))
                return fail(sc, "Invalid \\uXXXX escape", u);
        i += 4;
    }
}

static bool scan_value(scan *sc, size_t i, size_t *end, int depth);

static bool scan_number(scan *sc, size_t i, size_t *end)
{
    size_t st = i;
    if (i < sc->n && sc->s[i] == '-')
        i++;
    if (i < sc->n && sc->s[i] == '0') {
        i++;
    } else if (i < sc->n && sc->s[i] >= '1' && sc->s[i] <= '9') {
        while (i < sc->n && sc->s[i] >= '0' && sc->s[i] <= '9')
            i++;
    } else {
        return fail(sc, "Expecting value", st);
    }
    if (i + 1 < sc->n && sc->s[i] == '.' && sc->s[i + 1] >= '0' && sc->s[i + 1] <= '9') {
        i += 2;
        while (i < sc->n && sc->s[i] >= '0' && sc->s[i] <= '9')
            i++;
    }
    if (i < sc->n && (sc->s[i] == 'e' || sc->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < sc->n && (sc->s[j] == '+' || sc->s[j] == '-'))
            j++;
        if (j < sc->n && sc->s[j] >= '0' && sc->s[j] <= '9') {
            while (j < sc->n && sc->s[j] >= '0' && sc->s[j] <= '9')
                j++;
            i = j;
        }
    }
    *end = i;
    return true;
}

static bool lit(const scan *sc, size_t i, const char *w)
{
    size_t l = strlen(w);
    return i + l <= sc->n && memcmp(sc->s + i, w, l) == 0;
}

static bool scan_object(scan *sc, size_t i, size_t *end, int depth)
{
    i = skip_ws(sc, i);
    if (i < sc->n && sc->s[i] == '}') {
        *end = i + 1;
        return true;
    }
    for (;;) {
        if (i >= sc->n || sc->s[i] != '"')
            return fail(sc, "Expecting property name enclosed in double quotes", i);
        if (!scan_string(sc, i + 1, &i))
            return false;
        i = skip_ws(sc, i);
        if (i >= sc->n || sc->s[i] != ':')
            return fail(sc, "Expecting ':' delimiter", i);
        i = skip_ws(sc, i + 1);
        if (!scan_value(sc, i, &i, depth + 1))
            return false;
        i = skip_ws(sc, i);
        if (i < sc->n && sc->s[i] == '}') {
            *end = i + 1;
            return true;
        }
        if (i >= sc->n || sc->s[i] != ',')
            return fail(sc, "Expecting ',' delimiter", i);
        size_t comma = i;
        i = skip_ws(sc, i + 1);
        if (i < sc->n && sc->s[i] == '}')
            return fail(sc, "Illegal trailing comma before end of object", comma);
    }
}

static bool scan_array(scan *sc, size_t i, size_t *end, int depth)
{
    i = skip_ws(sc, i);
    if (i < sc->n && sc->s[i] == ']') {
        *end = i + 1;
        return true;
    }
    for (;;) {
        if (!scan_value(sc, i, &i, depth + 1))
            return false;
        i = skip_ws(sc, i);
        if (i < sc->n && sc->s[i] == ']') {
            *end = i + 1;
            return true;
        }
        if (i >= sc->n || sc->s[i] != ',')
            return fail(sc, "Expecting ',' delimiter", i);
        size_t comma = i;
        i = skip_ws(sc, i + 1);
        if (i < sc->n && sc->s[i] == ']')
            return fail(sc, "Illegal trailing comma before end of array", comma);
    }
}

static bool scan_value(scan *sc, size_t i, size_t *end, int depth)
{
    if (depth > MAX_DEPTH) {
        sc->deep = true;
        return fail(sc, "", i);
    }
    if (i >= sc->n)
        return fail(sc, "Expecting value", i);
    switch (sc->s[i]) {
    case '"':
        return scan_string(sc, i + 1, end);
    case '{':
        return scan_object(sc, i + 1, end, depth);
    case '[':
        return scan_array(sc, i + 1, end, depth);
    case 'n':
        if (lit(sc, i, "null"))
            return *end = i + 4, true;
        break;
    case 't':
        if (lit(sc, i, "true"))
            return *end = i + 4, true;
        break;
    case 'f':
        if (lit(sc, i, "false"))
            return *end = i + 5, true;
        break;
    case 'N':
        if (lit(sc, i, "NaN"))
            return *end = i + 3, true;
        break;
    case 'I':
        if (lit(sc, i, "Infinity"))
            return *end = i + 8, true;
        break;
    case '-':
        if (lit(sc, i, "-Infinity"))
            return *end = i + 9, true;
        return scan_number(sc, i, end);
    default:
        if (sc->s[i] >= '0' && sc->s[i] <= '9')
            return scan_number(sc, i, end);
        break;
    }
    return fail(sc, "Expecting value", i);
}

int pyjson_check(const char *s, size_t n, const char **msg, size_t *pos)
{
    scan sc = {s, n, NULL, 0, false};
    size_t i = skip_ws(&sc, 0), end;
    bool ok = scan_value(&sc, i, &end, 0);
    if (ok) {
        end = skip_ws(&sc, end);
        if (end < n)
            ok = fail(&sc, "Extra data", end);
    }
    if (ok)
        return 0;
    if (sc.deep)
        return 2;
    *msg = sc.msg;
    *pos = utf8_count(s, sc.err);
    return 1;
}

char *pyjson_dumps(const json_t *v)
{
    /* 16 significant digits print microsecond timestamps and typical inputs exactly as
     * Python's repr does */
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(16));
    if (!s)
        return NULL;
    /* jansson writes control characters as \u001F; Python writes \u001f */
    for (char *p = s; *p; p++) {
        if (*p != '\\')
            continue;
        p++;
        if (*p == 'u')
            for (int k = 1; k <= 4 && p[k]; k++)
                p[k] = (char)tolower((unsigned char)p[k]);
    }
    return s;
}
