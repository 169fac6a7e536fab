/* The checks route handlers share before doing their work: body shape, 422 replies,
 * the optional ?limit= query, the 503 of a moving session, the 507 of a change that could
 * not be saved, and the 429 of the concurrent-command limit. */
#include "api/api.h"
#include "api/handlers.h"

#include "text/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool body_is_object(json_t *errs, json_t *body)
{
    if (!body) {
        verr_missing_body(errs);
        return false;
    }
    if (!json_is_object(body)) {
        json_array_append_new(errs, verr("model_attributes_type", loc_of("body", NULL),
            "Input should be a valid dictionary or object to extract fields from", body, NULL));
        return false;
    }
    return true;
}

void send_validation(http_request *r, json_t *errs)
{
    http_send_json(r, 422, json_pack("{s:o}", "detail", errs));
}

bool send_if_invalid(http_request *r, json_t *errs)
{
    if (json_array_size(errs)) {
        send_validation(r, errs);
        return true;
    }
    json_decref(errs);
    return false;
}

bool limit_query(http_request *r, long long *limit)
{
    size_t len = 0;
    char *raw = http_query(r, "limit", &len);
    if (!raw)
        return true;
    json_t *errs = json_array();
    bool ok = v_query_int(errs, "limit", raw, len, limit);
    free(raw);
    if (!ok) {
        send_validation(r, errs);
        return false;
    }
    json_decref(errs);
    return true;
}

void send_moving(http_request *r, const char *id)
{
    char msg[200];
    snprintf(msg, sizeof msg, "Session %s is moving to another node (its node is draining); retry shortly.", id);
    http_send_retry(r, 503, msg, 1);
}

void send_detail_with(http_request *r, unsigned status, const char *fmt, const char *arg)
{
    size_t n;
    char *clean = utf8_replace(arg, strlen(arg), &n), *msg = NULL;
    if (clean && asprintf(&msg, fmt, clean) >= 0)
        http_send_detail(r, status, msg);
    else
        http_send_500(r);
    free(msg);
    free(clean);
}

void api_send_exec_limit(http_request *r, int allowed)
{
    char text[128], n[16];
    snprintf(text, sizeof text, "Too many commands running at once: %d allowed. Wait for one to finish.", allowed);
    snprintf(n, sizeof n, "%d", allowed);
    http_send_json_header(r, 429, json_pack("{s:s}", "detail", text), "X-Airlock-Exec-Limit", n);
}

void api_send_no_slot(http_request *r, int max_slots, slot_result sr)
{
    char text[128];
    snprintf(text, sizeof text, "All %d command slots of this server are in use; try again shortly.", max_slots);
    if (sr == SLOT_BUSY)
        http_send_detail(r, 503, text);
    else
        http_send_500(r); /* cancelled: the client is gone */
}

void send_not_saved(http_request *r, unsigned status, const char *what)
{
    char msg[256];
    snprintf(msg, sizeof msg, "%s could not be saved: the server's storage is full or failing. Nothing was changed; "
                              "try again later.",
             what);
    http_send_detail(r, status, msg);
}
