/* Request bodies as FastAPI reads them: JSON by content type, Python's decoder errors
 * (422 json_invalid with its position, 400 for undecodable or too deeply nested text); and
 * file-write bodies of the usual shape without a tree (the content is decoded into the file
 * by the handler, so a write costs its body and a small buffer, README "Limits"). */
#include "api/api.h"

#include "text/jstr.h"
#include "text/pyjson.h"
#include "text/utf8.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* FastAPI parses a body as JSON when there is no content-type or it is application/json
 * or application/...+json; otherwise the raw text is validated (and fails). */
static bool json_content_type(const char *ct)
{
    if (!ct)
        return true;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t n = strcspn(ct, ";");
    while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
        n--;
    if (n < 12 || strncasecmp(ct, "application/", 12) != 0)
        return false;
    const char *sub = ct + 12;
    size_t sl = n - 12;
    return (sl == 4 && strncasecmp(sub, "json", 4) == 0) ||
           (sl >= 5 && strncasecmp(sub + sl - 5, "+json", 5) == 0);
}

/* The body's JSON text, checked the way Python's json.loads checks it: 1 with *text / *len
 * (a BOM dropped) to parse, 0 when done already (*out set: absent body or not JSON by its
 * content type), -1 when a 400/422 was sent. */
static int json_text(http_request *r, json_t **out, const char **text, size_t *text_len)
{
    size_t len;
    const char *b = http_body(r, &len);
    *out = NULL;
    if (len == 0)
        return 0;
    if (!json_content_type(http_header(r, "Content-Type"))) {
        size_t tl;
        char *t = utf8_replace(b, len, &tl);
        *out = t ? json_stringn_nocheck(t, tl) : NULL;
        free(t);
        return 0;
    }
    if (len >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0) { /* json.loads(bytes) drops a BOM */
        b += 3;
        len -= 3;
    }
    if (!utf8_valid(b, len)) {
        http_send_detail(r, 400, "There was an error parsing the body");
        return -1;
    }
    const char *msg;
    size_t pos;
    int rc = pyjson_check(b, len, &msg, &pos);
    if (rc == 1) {
        json_t *errs = json_array();
        json_array_append_new(errs, verr_json_invalid(pos, msg));
        send_validation(r, errs);
        return -1;
    }
    if (rc == 2) {
        http_send_detail(r, 400, "There was an error parsing the body");
        return -1;
    }
    *text = b;
    *text_len = len;
    return 1;
}

/* jansson's tree of checked JSON text; false when a 500 was sent. */
static bool json_tree(http_request *r, const char *b, size_t len, json_t **out)
{
    json_error_t je;
    json_t *v = json_loadb(b, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v && strstr(je.text, "too big")) /* an integer past 64 bits: a (huge) number, as in Python, so a
                                            * field with a range answers its 422 */
        v = json_loadb(b, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
    if (!v) {
        /* valid for Python but not for jansson (NaN, huge integers, lone surrogates) */
        http_send_500(r);
        return false;
    }
    if (json_is_null(v))
        json_decref(v);
    else
        *out = v;
    return true;
}

bool api_parse_body(http_request *r, json_t **out)
{
    const char *b;
    size_t len;
    int rc = json_text(r, out, &b, &len);
    return rc < 0 ? false : rc == 0 ? true : json_tree(r, b, len, out);
}

/* ---- write bodies without a tree ---------------------------------------------------- */

/* A path longer than this (as sent) takes the general parse: real paths are far shorter. */
#define WRITE_PATH_RAW_MAX (64u * 1024u)

/* One large write body of an unusual shape (over LARGE_BODY) parsed into a tree at a time,
 * held until that tree is freed: it may cost several times the body (jansson's lexer buffer
 * doubles, every value is an allocation). */
#define LARGE_BODY (1024u * 1024u)
static pthread_mutex_t large_parse = PTHREAD_MUTEX_INITIALIZER;

static size_t skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

/* The end of the value starting at s[i] in validated JSON (iterative: no depth limit). */
static size_t value_end(const char *s, size_t n, size_t i)
{
    if (s[i] == '"')
        return jstr_end(s, n, i);
    if (s[i] != '{' && s[i] != '[') {
        while (i < n && !strchr(",}] \t\n\r", s[i]))
            i++;
        return i;
    }
    size_t depth = 0;
    while (i < n) {
        char c = s[i];
        if (c == '"') {
            i = jstr_end(s, n, i);
            continue;
        }
        if (c == '{' || c == '[')
            depth++;
        else if ((c == '}' || c == ']') && --depth == 0)
            return i + 1;
        i++;
    }
    return n;
}

/* Whether the key literal s[0..n) (inside its quotes) decodes to name. */
static bool key_is(const char *s, size_t n, const char *name)
{
    char buf[16];
    size_t bytes, chars, pos = 0, got = 0, k;
    if (n > 64 || !jstr_measure(s, n, &bytes, &chars) || bytes != strlen(name))
        return false;
    while ((k = jstr_decode(s, n, &pos, buf + got, sizeof buf - got)) > 0)
        got += k;
    return got == bytes && memcmp(buf, name, bytes) == 0;
}

/* Finds the top-level "path" and "content" of checked JSON text (the last of each, as
 * Python's dict keeps): true when the body is an object where both are strings. */
static bool scan_write_fields(const char *s, size_t n, api_write_body *w)
{
    size_t i = skip_ws(s, n, 0);
    bool have_path = false, have_content = false;
    if (i >= n || s[i] != '{')
        return false;
    i = skip_ws(s, n, i + 1);
    while (i < n && s[i] == '"') {
        size_t key_end = jstr_end(s, n, i);
        const char *key = s + i + 1;
        size_t key_len = key_end - i - 2;
        size_t v = skip_ws(s, n, skip_ws(s, n, key_end) + 1); /* past the ':' */
        size_t v_end = value_end(s, n, v);
        bool str = s[v] == '"';
        if (key_is(key, key_len, "path")) {
            have_path = str;
            w->path_raw = s + v + 1;
            w->path_raw_len = str ? v_end - v - 2 : 0;
        } else if (key_is(key, key_len, "content")) {
            have_content = str;
            w->content = s + v + 1;
            w->content_raw_len = str ? v_end - v - 2 : 0;
        }
        i = skip_ws(s, n, v_end);
        if (i < n && s[i] == ',')
            i = skip_ws(s, n, i + 1);
    }
    return have_path && have_content;
}

bool api_parse_write_body(http_request *r, json_t **out, api_write_body *w)
{
    memset(w, 0, sizeof *w);
    const char *b;
    size_t len;
    int rc = json_text(r, out, &b, &len);
    if (rc <= 0)
        return rc == 0;
    if (scan_write_fields(b, len, w) && w->path_raw_len <= WRITE_PATH_RAW_MAX) {
        size_t path_bytes, path_chars;
        bool path_ok = jstr_measure(w->path_raw, w->path_raw_len, &path_bytes, &path_chars);
        if (!path_ok || !jstr_measure(w->content, w->content_raw_len, &w->content_bytes, &w->content_chars)) {
            http_send_500(r); /* a lone surrogate: Python cannot encode it (jansson refused it too) */
            return false;
        }
        size_t pos = 0, got;
        if (!(w->path = malloc(path_bytes + JSTR_DECODE_MIN))) {
            http_send_500(r);
            return false;
        }
        while ((got = jstr_decode(w->path_raw, w->path_raw_len, &pos, w->path + w->path_len,
                                  path_bytes + JSTR_DECODE_MIN - w->path_len)) > 0)
            w->path_len += got;
        w->path[w->path_len] = '\0';
        w->set = true;
        return true;
    }
    memset(w, 0, sizeof *w);
    /* anything else ends in a 422 quoting the input: jansson's tree, large ones one at a time */
    if (len > LARGE_BODY) {
        pthread_mutex_lock(&large_parse);
        w->large = true;
    }
    return json_tree(r, b, len, out);
}

void api_write_body_free(api_write_body *w, json_t *tree)
{
    json_decref(tree);
    free(w->path);
    if (w->large)
        pthread_mutex_unlock(&large_parse);
    memset(w, 0, sizeof *w);
}
