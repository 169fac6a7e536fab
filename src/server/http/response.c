/* Responses as Starlette writes them: compact JSON in Python's spelling, {"detail": ...},
 * the plain-text 500, 307 redirects and 405s. One response per request. */
#include "http/internal.h"

#include "text/pyjson.h"

#include <stdlib.h>
#include <string.h>

void http_queue(http_request *r, unsigned status, const char *data, size_t len,
                const char *ctype, const char *hname, const char *hvalue)
{
    if (r->responded)
        return;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return;
    if (ctype)
        MHD_add_response_header(resp, "content-type", ctype);
    if (hname)
        MHD_add_response_header(resp, hname, hvalue);
    if (MHD_queue_response(r->conn, status, resp) == MHD_YES) {
        r->responded = true;
        r->status = status;
    }
    MHD_destroy_response(resp);
}

void http_send_json_header(http_request *r, unsigned status, json_t *body,
                           const char *hname, const char *hvalue)
{
    char *text = body ? pyjson_dumps(body) : NULL;
    json_decref(body);
    if (!text) {
        http_send_500(r);
        return;
    }
    http_queue(r, status, text, strlen(text), "application/json", hname, hvalue);
    free(text);
}

void http_send_json(http_request *r, unsigned status, json_t *body)
{
    http_send_json_header(r, status, body, NULL, NULL);
}

void http_send_detail(http_request *r, unsigned status, const char *detail)
{
    http_send_json(r, status, json_pack("{s:s}", "detail", detail));
}

void http_send_500(http_request *r)
{
    static const char msg[] = "Internal Server Error";
    http_queue(r, 500, msg, sizeof msg - 1, "text/plain; charset=utf-8", NULL, NULL);
}

void http_send_redirect(http_request *r, const char *location)
{
    http_queue(r, 307, "", 0, NULL, "location", location);
}

void http_send_405(http_request *r, const char *allow)
{
    static const char msg[] = "{\"detail\":\"Method Not Allowed\"}";
    http_queue(r, 405, msg, sizeof msg - 1, "application/json", "allow", allow);
}
