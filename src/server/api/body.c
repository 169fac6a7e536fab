/* Request bodies as FastAPI reads them: JSON by content type, Python's decoder errors
 * (422 json_invalid with its position, 400 for undecodable or too deeply nested text). */
#include "api/api.h"

#include "text/pyjson.h"
#include "text/utf8.h"

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

bool api_parse_body(http_request *r, json_t **out)
{
    size_t len;
    const char *b = http_body(r, &len);
    *out = NULL;
    if (len == 0)
        return true;
    if (!json_content_type(http_header(r, "Content-Type"))) {
        size_t tl;
        char *text = utf8_replace(b, len, &tl);
        *out = text ? json_stringn_nocheck(text, tl) : NULL;
        free(text);
        return true;
    }
    if (len >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0) { /* json.loads(bytes) drops a BOM */
        b += 3;
        len -= 3;
    }
    if (!utf8_valid(b, len)) {
        http_send_detail(r, 400, "There was an error parsing the body");
        return false;
    }
    const char *msg;
    size_t pos;
    int rc = pyjson_check(b, len, &msg, &pos);
    if (rc == 1) {
        json_t *errs = json_array();
        json_array_append_new(errs, verr_json_invalid(pos, msg));
        send_validation(r, errs);
        return false;
    }
    if (rc == 2) {
        http_send_detail(r, 400, "There was an error parsing the body");
        return false;
    }
    json_error_t je;
    json_t *v = json_loadb(b, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
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
