/* Responses as Starlette writes them: compact JSON in Python's spelling, {"detail": ...},
 * the plain-text 500, 307 redirects and 405s. One response per request, kept until the
 * server queues it (handlers may run on a worker while their connection is suspended). */
#include "http/internal.h"

#include "text/pyjson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void http_queue(http_request *r, unsigned status, const char *data, size_t len,
                const char *ctype, const char *const *headers)
{
    if (r->response)
        return;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return;
    if (ctype)
        MHD_add_response_header(resp, "content-type", ctype);
    for (size_t i = 0; headers && headers[i] && headers[i + 1]; i += 2)
        MHD_add_response_header(resp, headers[i], headers[i + 1]);
    http_note_apply(r, resp);
    r->response = resp;
    r->response_len = len;
    r->status = status;
}

void http_note(http_request *r, const char *header, const char *value, const char *json_key)
{
    r->note_header = header;
    r->note_value = value;
    r->note_key = json_key;
}

void http_note_apply(const http_request *r, struct MHD_Response *resp)
{
    if (r->note_header)
        MHD_add_response_header(resp, r->note_header, r->note_value);
}

static void send_json_headers(http_request *r, unsigned status, json_t *body, const char *const *headers)
{
    if (r->note_key && status >= 200 && status < 300 && json_is_object(body))
        json_object_set_new(body, r->note_key, json_true());
    char *text = body ? pyjson_dumps(body) : NULL;
    json_decref(body);
    if (!text) {
        http_send_500(r);
        return;
    }
    http_queue(r, status, text, strlen(text), "application/json", headers);
    free(text);
}

void http_send_json_header(http_request *r, unsigned status, json_t *body,
                           const char *hname, const char *hvalue)
{
    const char *headers[] = {hname, hvalue, NULL};
    send_json_headers(r, status, body, hname ? headers : NULL);
}

void http_send_json(http_request *r, unsigned status, json_t *body)
{
    send_json_headers(r, status, body, NULL);
}

void http_send_detail(http_request *r, unsigned status, const char *detail)
{
    http_send_json(r, status, json_pack("{s:s}", "detail", detail));
}

void http_send_retry(http_request *r, unsigned status, const char *detail, unsigned retry_s)
{
    char secs[16];
    snprintf(secs, sizeof secs, "%u", retry_s);
    /* refusals made before the body is read close the connection: say so */
    const char *headers[] = {"retry-after", secs, "connection", "close", NULL};
    send_json_headers(r, status, json_pack("{s:s}", "detail", detail), headers);
}

void http_send_file(http_request *r, unsigned status, int fd, unsigned long long size, const char *ctype)
{
    if (r->response) {
        close(fd);
        return;
    }
    struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(size, fd, 0);
    if (!resp) {
        close(fd);
        http_send_500(r);
        return;
    }
    if (ctype)
        MHD_add_response_header(resp, "content-type", ctype);
    http_note_apply(r, resp);
    r->response = resp;
    r->response_len = (size_t)size; /* its deadline scales with it */
    r->status = status;
}

void http_send_bytes(http_request *r, unsigned status, const void *data, size_t len, const char *ctype,
                     const char *const *headers)
{
    http_queue(r, status, data, len, ctype, headers);
}

void http_send_500(http_request *r)
{
    static const char msg[] = "Internal Server Error";
    http_queue(r, 500, msg, sizeof msg - 1, "text/plain; charset=utf-8", NULL);
}

void http_send_redirect(http_request *r, const char *location)
{
    const char *headers[] = {"location", location, NULL};
    http_queue(r, 307, "", 0, NULL, headers);
}

void http_send_405(http_request *r, const char *allow)
{
    static const char msg[] = "{\"detail\":\"Method Not Allowed\"}";
    const char *headers[] = {"allow", allow, NULL};
    http_queue(r, 405, msg, sizeof msg - 1, "application/json", headers);
}
