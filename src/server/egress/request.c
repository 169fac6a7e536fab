/* Parsing the proxy's request head: the request line, header lines, the CONNECT authority
 * and the Basic credentials of Proxy-Authorization. Strict: anything not plainly HTTP/1.x is
 * malformed. */
#include "egress/request.h"

#include <string.h>
#include <strings.h>

size_t egress_head_end(const char *buf, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (i + 1 < len && buf[i + 1] == '\n')
            return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

/* RFC 9110 tchar */
static bool is_tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* The next line of buf[*at..end): start and length without its CR LF / LF; false at the end. */
static bool next_line(const char *buf, size_t end, size_t *at, const char **line, size_t *n)
{
    if (*at >= end)
        return false;
    const char *start = buf + *at;
    const char *nl = memchr(start, '\n', end - *at);
    size_t len = nl ? (size_t)(nl - start) : end - *at;
    *at += len + (nl ? 1 : 0);
    if (len && start[len - 1] == '\r')
        len--;
    *line = start;
    *n = len;
    return true;
}

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Strict base64 (padding only at the end); the decoded bytes in out, -1 when malformed or
 * longer than cap. */
static long b64_decode(const char *s, size_t n, unsigned char *out, size_t cap)
{
    size_t pad = 0;
    while (n && s[n - 1] == '=' && pad < 2) {
        n--;
        pad++;
    }
    if ((n + pad) % 4 != 0 || n == 0)
        return -1;
    size_t o = 0;
    unsigned acc = 0, bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o >= cap)
                return -1;
            out[o++] = (unsigned char)((acc >> bits) & 0xff);
        }
    }
    return (long)o;
}

/* "Basic <base64 of user:pass>"; false when anything is off. */
static bool parse_basic(const char *v, size_t n, egress_request *out)
{
    if (n < 6 || strncasecmp(v, "Basic", 5) != 0 || (v[5] != ' ' && v[5] != '\t'))
        return false;
    size_t i = 5;
    while (i < n && (v[i] == ' ' || v[i] == '\t'))
        i++;
    unsigned char dec[200];
    long m = b64_decode(v + i, n - i, dec, sizeof dec);
    if (m <= 0)
        return false;
    unsigned char *colon = memchr(dec, ':', (size_t)m);
    if (!colon || memchr(dec, '\0', (size_t)m))
        return false;
    size_t ul = (size_t)(colon - dec), pl = (size_t)m - ul - 1;
    if (ul >= sizeof out->user || pl >= sizeof out->pass)
        return false;
    memcpy(out->user, dec, ul);
    out->user[ul] = '\0';
    memcpy(out->pass, colon + 1, pl);
    out->pass[pl] = '\0';
    return true;
}

/* host:port or [v6]:port into out->host (normalised) and out->port. */
static int parse_authority(const char *t, size_t n, egress_request *out)
{
    const char *host = t, *port;
    size_t hl;
    if (n && t[0] == '[') {
        const char *close = memchr(t, ']', n);
        if (!close || close + 1 >= t + n || close[1] != ':')
            return -1;
        host = t + 1;
        hl = (size_t)(close - host);
        port = close + 2;
    } else {
        const char *colon = NULL;
        for (size_t i = 0; i < n; i++)
            if (t[i] == ':')
                colon = t + i;
        if (!colon)
            return -1;
        hl = (size_t)(colon - t);
        port = colon + 1;
        if (memchr(t, ':', hl)) /* an IPv6 literal needs its brackets */
            return -1;
    }
    size_t pl = (size_t)(t + n - port);
    if (pl == 0 || pl > 5)
        return -1;
    unsigned p = 0;
    for (size_t i = 0; i < pl; i++) {
        if (port[i] < '0' || port[i] > '9')
            return -1;
        p = p * 10 + (unsigned)(port[i] - '0');
    }
    if (p > 65535)
        return -1;
    while (hl && host[hl - 1] == '.')
        hl--;
    if (hl == 0 || hl > EGRESS_HOST_MAX)
        return -1;
    for (size_t i = 0; i < hl; i++) {
        unsigned char c = (unsigned char)host[i];
        out->host[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    out->host[hl] = '\0';
    out->port = p;
    return 0;
}

/* METHOD SP target SP HTTP/1.x */
static int parse_request_line(const char *l, size_t n, egress_request *out)
{
    const char *sp1 = memchr(l, ' ', n);
    if (!sp1 || sp1 == l || (size_t)(sp1 - l) >= sizeof out->method)
        return -1;
    size_t ml = (size_t)(sp1 - l);
    for (size_t i = 0; i < ml; i++)
        if (!is_tchar((unsigned char)l[i]))
            return -1;
    memcpy(out->method, l, ml);
    out->method[ml] = '\0';
    const char *t = sp1 + 1, *end = l + n;
    const char *sp2 = memchr(t, ' ', (size_t)(end - t));
    size_t tl = sp2 ? (size_t)(sp2 - t) : (size_t)(end - t);
    size_t keep = tl < EGRESS_TARGET_LOG_MAX ? tl : EGRESS_TARGET_LOG_MAX;
    memcpy(out->target, t, keep);
    out->target[keep] = '\0';
    if (!sp2 || tl == 0)
        return -1;
    for (size_t i = 0; i < tl; i++)
        if ((unsigned char)t[i] <= 0x20 || t[i] == 0x7f)
            return -1;
    const char *v = sp2 + 1;
    if ((size_t)(end - v) != 8 || (memcmp(v, "HTTP/1.1", 8) != 0 && memcmp(v, "HTTP/1.0", 8) != 0))
        return -1;
    out->connect = strcmp(out->method, "CONNECT") == 0;
    if (out->connect && parse_authority(t, tl, out) != 0)
        return -1;
    return 0;
}

int egress_request_parse(const char *buf, size_t len, egress_request *out)
{
    memset(out, 0, sizeof *out);
    if (len == 0 || memchr(buf, '\0', len))
        return -1;
    size_t at = 0, n;
    const char *line;
    if (!next_line(buf, len, &at, &line, &n) || parse_request_line(line, n, out) != 0)
        return -1;
    int headers = 0, auths = 0;
    bool auth_ok = false;
    while (next_line(buf, len, &at, &line, &n) && n > 0) {
        if (++headers > EGRESS_HEADERS_MAX)
            return -1;
        const char *colon = memchr(line, ':', n);
        if (!colon || colon == line)
            return -1; /* also an obsolete folded line, which starts with whitespace */
        size_t nl = (size_t)(colon - line);
        for (size_t i = 0; i < nl; i++)
            if (!is_tchar((unsigned char)line[i]))
                return -1;
        const char *v = colon + 1, *ve = line + n;
        for (const char *p = v; p < ve; p++)
            if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f)
                return -1;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        if (nl == 19 && strncasecmp(line, "Proxy-Authorization", 19) == 0 && ++auths == 1)
            auth_ok = parse_basic(v, (size_t)(ve - v), out);
    }
    out->auth = auth_ok && auths == 1;
    if (!out->auth) {
        memset(out->user, 0, sizeof out->user);
        memset(out->pass, 0, sizeof out->pass);
    }
    return 0;
}
