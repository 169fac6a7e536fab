/* Strict request framing, checked once the headers are in and before anything else: what
 * libmicrohttpd 0.9.75 lets through although a proxy in front may frame it differently (a
 * request-smuggling primitive). Refused: a second Content-Length (equal or not), Content-
 * Length with Transfer-Encoding, a Transfer-Encoding other than one "chunked" (501), a header
 * name that is not a token, a header folded over two lines (obs-fold) or holding a bare CR,
 * a raw NUL or a space in the target and %00 in its path (MHD would end the path there), and
 * an HTTP/1.1 request without exactly one Host. The refusal closes the connection, so nothing
 * after it is read as a next request. MHD itself refuses a Content-Length that is not a plain
 * number, and ends a header value at a raw NUL. */
#include "http/strict.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

typedef struct {
    unsigned content_length, transfer_encoding, host;
    bool te_chunked;   /* the (one) Transfer-Encoding is exactly "chunked" */
    bool bad_name;     /* a header name with a character outside RFC 9110's token */
    bool nul;          /* a NUL inside a header name or value */
    bool folded;       /* a line continued on the next (obs-fold), or a bare CR in a value */
} header_scan;

static bool is_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL);
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size)
{
    (void)kind;
    header_scan *h = cls;
    if (!key || key_size == 0) {
        h->bad_name = true;
        return MHD_YES;
    }
    for (size_t i = 0; i < key_size; i++)
        if (!is_tchar((unsigned char)key[i]))
            h->bad_name = true;
    if (strlen(key) != key_size || (value && memchr(value, '\0', value_size)))
        h->nul = true;
    /* MHD 0.9.75 parses a header in place, its value after its name; a folded line it joins
     * into a copy elsewhere, under a name with the continuation glued on ("X-A:" + " b" ->
     * "X-Ab"), where a proxy would see "X-A: b" */
    if (value && ((uintptr_t)value <= (uintptr_t)key + key_size || memchr(value, '\r', value_size) ||
                  memchr(value, '\n', value_size)))
        h->folded = true;
    if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0)
        h->host++;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        h->content_length++;
    if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        h->transfer_encoding++;
        h->te_chunked = value && value_size == 7 && strncasecmp(value, "chunked", 7) == 0;
    }
    return MHD_YES;
}

/* "%00" in the path (before any '?'): MHD decodes the path into a C string, which would end
 * there and answer for a shorter path. */
static bool path_has_escaped_nul(const char *raw_uri)
{
    for (const char *p = raw_uri; *p && *p != '?'; p++)
        if (p[0] == '%' && p[1] == '0' && p[2] == '0')
            return true;
    return false;
}

/* MHD takes the request line's last space as the target's end, so "GET /a b HTTP/1.1" has
 * the target "/a b", where another parser may stop at the first. */
static bool target_has_space(const char *raw_uri)
{
    return strpbrk(raw_uri, " \t") != NULL;
}

unsigned http_strict_check(struct MHD_Connection *c, const char *version, const char *raw_uri, bool raw_nul,
                           const char **detail)
{
    header_scan h = {0};
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, scan_header, &h);
    if (raw_nul || path_has_escaped_nul(raw_uri)) {
        *detail = "Invalid request target: a NUL byte";
        return 400;
    }
    if (target_has_space(raw_uri)) {
        *detail = "Invalid request target: a space";
        return 400;
    }
    /* RFC 9112 3.2: exactly one Host in HTTP/1.1 (MHD's own check, MHD_OPTION_STRICT_FOR_CLIENT,
     * answers with its header block sent twice in 0.9.75) */
    if (h.host > 1 || (h.host == 0 && version && strcmp(version, MHD_HTTP_VERSION_1_1) == 0)) {
        *detail = "Invalid request: HTTP/1.1 needs exactly one Host header";
        return 400;
    }
    if (h.bad_name || h.nul || h.folded) {
        *detail = "Invalid header: a name must be a token, and a header one line without NUL or CR bytes";
        return 400;
    }
    if (h.content_length > 1) {
        *detail = "Invalid framing: more than one Content-Length";
        return 400;
    }
    if (h.transfer_encoding && h.content_length) {
        *detail = "Invalid framing: both Content-Length and Transfer-Encoding";
        return 400;
    }
    if (h.transfer_encoding > 1 || (h.transfer_encoding && !h.te_chunked)) {
        *detail = "Transfer-Encoding not implemented: only a single chunked is";
        return 501;
    }
    return 0;
}

void http_strict_refuse(http_request *r, unsigned status, const char *detail)
{
    char body[256];
    int n = snprintf(body, sizeof body, "{\"detail\":\"%s\"}", detail);
    static const char *const headers[] = {"connection", "close", NULL};
    if (n > 0 && (size_t)n < sizeof body)
        http_queue(r, status, body, (size_t)n, "application/json", headers);
}
