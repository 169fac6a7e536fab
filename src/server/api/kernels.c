/* Ours (issue 25, docs/api.md "Kernels"): a session's stateful interpreters.
 *   POST   /v1/sessions/{id}/kernels {"language":"python"} -> 201 {"kernel_id","language","state"}
 *   GET    /v1/sessions/{id}/kernels                       -> {"kernels":[...]}
 *   DELETE /v1/sessions/{id}/kernels/{kid}
 *   POST   /v1/sessions/{id}/kernels/{kid}/execute {"code","timeout"} -> the cell's answer; with
 *          ?stream=1 ("stream": true, or Accept: application/x-ndjson) NDJSON events as the
 *          cell runs (stdout, stderr, display, exception), ending in {"type":"result",...}
 *   POST   /v1/sessions/{id}/kernels/{kid}/interrupt
 * Kernels live in the session's own sandbox: SANDBOX_EXEC_MODE=session only (else 409). */
#include "api/handlers.h"

#include "api/exec_tap.h"
#include "log/log.h"
#include "../../agent/protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NDJSON "application/x-ndjson"
#define NEEDS_SESSION_MODE "Kernels need the session's own sandbox (SANDBOX_EXEC_MODE=session, on gVisor with airlock-agent); this server runs each command in a sandbox of its own."

/* The session id and kernel id of c->param ("sid/kid", routes.c); false (404 sent) when the
 * path has no kernel id. */
static bool split_ids(http_request *r, const api_call *c, char sid[64], char kid[64])
{
    const char *slash = c->param ? strchr(c->param, '/') : NULL;
    if (!slash || (size_t)(slash - c->param) >= 64 || strlen(slash + 1) >= 64) {
        http_send_detail(r, 404, "Kernel not found");
        return false;
    }
    memcpy(sid, c->param, (size_t)(slash - c->param));
    sid[slash - c->param] = '\0';
    snprintf(kid, 64, "%s", slash + 1);
    return true;
}

/* The caller's session of the path (404/403 sent when not theirs), when this server can run
 * kernels (409 sent when not). */
static session *kernel_session(app *a, http_request *r, const api_call *c, const char *sid)
{
    if (!warm_sessions(a->warm)) {
        http_send_detail(r, 409, NEEDS_SESSION_MODE);
        return NULL;
    }
    api_call sc = *c;
    sc.param = sid;
    return acquire_session(a, r, &sc);
}

/* split_ids, then kernel_session of the session id: NULL when an answer was sent. */
static session *kernel_session_of_path(app *a, http_request *r, const api_call *c, char sid[64], char kid[64])
{
    if (!split_ids(r, c, sid, kid))
        return NULL;
    return kernel_session(a, r, c, sid);
}

static void send_unknown_kernel(http_request *r, const char *kid)
{
    send_detail_with(r, 404, "Kernel '%s' not found in this session.", kid);
}

void api_kernels_create(app *a, http_request *r, const api_call *c)
{
    json_t *errs = json_array();
    const char *language = NULL;
    size_t language_len = 0;
    if (body_is_object(errs, c->body) &&
        v_string(errs, c->body, "language", true, 64, &language, &language_len) &&
        !(language_len == 6 && memcmp(language, "python", 6) == 0))
        json_array_append_new(errs, json_pack("{s:s,s:[s,s],s:s,s:s%,s:{s:s}}", "type", "literal_error", "loc", "body",
                                              "language", "msg", "Input should be 'python'", "input", language,
                                              language_len, "ctx", "expected", "'python'"));
    if (send_if_invalid(r, errs))
        return;
    session *s = kernel_session(a, r, c, c->param);
    if (!s)
        return;
    const tenant_cfg *t = tenants_get(a->tenants, c->tenant);
    char *root = s->template_id[0] ? templates_root(a->templates, s->template_id) : NULL;
    char id[KERNEL_ID_MAX], errbuf[512] = "";
    kernel_start_rc rc = KERNEL_FAILED;
    if (s->template_id[0] && !root)
        snprintf(errbuf, sizeof errbuf, "the session's template %s is not there any more", s->template_id);
    else
        rc = kernels_start(a->kernels, s, t->name, root, t->max_kernels, http_client_fd(r), id, errbuf, sizeof errbuf);
    free(root);
    registry_release(a->reg, s);
    char text[256];
    switch (rc) {
    case KERNEL_OK:
        http_send_json(r, 201, json_pack("{s:s,s:s,s:s}", "kernel_id", id, "language", "python", "state", "idle"));
        break;
    case KERNEL_TOO_MANY:
        snprintf(text, sizeof text, "Too many kernels in this session: %d allowed. Delete one first.", t->max_kernels);
        http_send_detail(r, 409, text);
        break;
    case KERNEL_NO_SANDBOX:
        log_warn("kernel in %s: %s", c->param, errbuf);
        http_send_detail(r, 503, "The session's sandbox is not available for a kernel right now; try again shortly.");
        break;
    default:
        log_error("kernel in %s failed to start: %s", c->param, errbuf);
        send_detail_with(r, 500, "The kernel could not start: %s", errbuf);
        break;
    }
}

void api_kernels_list(app *a, http_request *r, const api_call *c)
{
    session *s = kernel_session(a, r, c, c->param);
    if (!s)
        return;
    json_t *list = kernels_list(a->kernels, s->id);
    registry_release(a->reg, s);
    http_send_json(r, 200, json_pack("{s:o}", "kernels", list));
}

void api_kernels_delete(app *a, http_request *r, const api_call *c)
{
    char sid[64], kid[64];
    session *s = kernel_session_of_path(a, r, c, sid, kid);
    if (!s)
        return;
    bool found = kernels_delete(a->kernels, s->id, kid);
    registry_release(a->reg, s);
    if (found)
        http_send_json(r, 200, json_pack("{s:s,s:s}", "status", "deleted", "kernel_id", kid));
    else
        send_unknown_kernel(r, kid);
}

void api_kernels_interrupt(app *a, http_request *r, const api_call *c)
{
    char sid[64], kid[64];
    session *s = kernel_session_of_path(a, r, c, sid, kid);
    if (!s)
        return;
    kernel *k = kernels_get(a->kernels, s->id, kid);
    registry_release(a->reg, s);
    if (!k) {
        send_unknown_kernel(r, kid);
        return;
    }
    kernel_interrupt(a->kernels, k);
    kernels_put(a->kernels, k);
    http_send_json(r, 200, json_pack("{s:s,s:s}", "status", "interrupted", "kernel_id", kid));
}

/* ---- execute ---------------------------------------------------------------------- */

/* The streamed form's events: dropped while the client reads slower than the cell writes
 * (the final result keeps the output's head and tail as without streaming). */
static void stream_text(void *ctx, int stream, const char *text, size_t len)
{
    exec_tap *tap = ctx;
    if (!http_stream_full(tap->stream))
        exec_tap_event(tap, json_pack("{s:s,s:s%}", "type", stream == 2 ? "stderr" : "stdout", "data", text, len));
}

static void stream_result(void *ctx, json_t *data)
{
    exec_tap *tap = ctx;
    if (!http_stream_full(tap->stream))
        exec_tap_event(tap, json_pack("{s:s,s:O}", "type", "display", "data", data));
}

static void stream_error(void *ctx, json_t *error)
{
    exec_tap *tap = ctx;
    exec_tap_event(tap, json_pack("{s:s,s:O}", "type", "exception", "error", error));
}

/* {"type":"heartbeat"} after EXEC_HEARTBEAT_MS without an event, as the exec stream. */
static void stream_tick(void *ctx)
{
    exec_tap *tap = ctx;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (now - tap->last_event_ms >= EXEC_HEARTBEAT_MS && !http_stream_full(tap->stream))
        exec_tap_event(tap, json_pack("{s:s}", "type", "heartbeat"));
}

/* The cell's audit record (kind "kernel", the code as its command): 0, or -1 when it could not
 * be saved (the answer says so; the cell ran). */
static int audit_cell(app *a, const api_call *c, const session *s, const char *code, const json_t *answer,
                      double duration_s)
{
    const tenant_cfg *t = tenants_get(a->tenants, c->tenant);
    json_t *error = json_object_get(answer, "error");
    audit_entry ae = {.tenant = t->name, .session_id = s->id, .actor = c->actor, .kind = "kernel",
                      .command = code, .has_duration = true, .duration_s = duration_s,
                      .timed_out = json_is_true(json_object_get(answer, "timed_out")),
                      .oom_killed = json_is_true(json_object_get(answer, "oom_killed")),
                      .detail = json_string_value(json_object_get(error, "name"))};
    return api_audit_record(a, &ae);
}

/* Whether the streamed form was asked for: ?stream=1 (or true), "stream": true, or Accept. */
static bool wants_stream(http_request *r, bool body_stream)
{
    size_t len = 0;
    char *q = http_query(r, "stream", &len);
    bool on = q && ((len == 1 && q[0] == '1') || (len == 4 && memcmp(q, "true", 4) == 0));
    free(q);
    const char *accept = http_header(r, "accept");
    return on || body_stream || (accept && strstr(accept, NDJSON));
}

/* A cell is a unit of work like a command: one of the tenant's max_concurrent_exec, then one of
 * the server's command slots (waiting for one as a command does). false when refused (sent). */
static bool take_turn(app *a, http_request *r, size_t tenant)
{
    if (!limits_exec_begin(a->lim, tenant)) {
        api_send_exec_limit(r, tenants_get(a->tenants, tenant)->max_concurrent_exec);
        return false;
    }
    slot_result sr = slots_acquire(a->slots, tenant, http_client_fd(r));
    if (sr == SLOT_OK)
        return true;
    limits_exec_end(a->lim, tenant);
    api_commands_ended(a); /* free on every node before the answer */
    api_send_no_slot(r, slots_max(a->slots), sr);
    return false;
}

void api_kernels_execute(app *a, http_request *r, const api_call *c)
{
    char sid[64], kid[64];
    if (!split_ids(r, c, sid, kid))
        return;
    json_t *errs = json_array();
    const char *code = NULL;
    size_t code_len = 0;
    long long timeout = 15, output_limit = (long long)a->cfg->output_limit;
    bool body_stream = false;
    if (body_is_object(errs, c->body)) {
        v_string(errs, c->body, "code", true, 0, &code, &code_len);
        v_lax_int(errs, c->body, "timeout", 15, 1, 60, &timeout);
        v_bool(errs, c->body, "stream", false, &body_stream);
        v_lax_int(errs, c->body, "output_limit_bytes", output_limit, 16, output_limit, &output_limit);
    }
    if (send_if_invalid(r, errs))
        return;
    if (!warm_sessions(a->warm)) {
        http_send_detail(r, 409, NEEDS_SESSION_MODE);
        return;
    }
    api_call sc = *c;
    sc.param = sid;
    session *s = acquire_audited_session(a, r, &sc, "The cell's audit record"); /* no cell runs unaudited */
    if (!s)
        return;
    kernel *k = kernels_get(a->kernels, s->id, kid);
    if (!k) {
        registry_release(a->reg, s);
        send_unknown_kernel(r, kid);
        return;
    }
    if (!take_turn(a, r, c->tenant)) {
        kernels_put(a->kernels, k);
        registry_release(a->reg, s);
        return;
    }
    exec_tap tap;
    exec_tap_init(&tap, NULL);
    if (wants_stream(r, body_stream))
        exec_tap_init(&tap, http_stream_begin(r, NDJSON, EXEC_STREAM_QUEUE, (unsigned)timeout + 60));
    kernel_events ev = {.text = stream_text, .result = stream_result, .error = stream_error, .tick = stream_tick,
                        .ctx = &tap};
    int cancel_fd = tap.stream ? http_stream_cancel_fd(tap.stream) : http_client_fd(r);
    char errbuf[512] = "";
    json_t *answer = kernel_execute(a->kernels, k, s, code, code_len, (int)timeout, (size_t)output_limit, cancel_fd,
                                    tap.stream ? &ev : NULL, errbuf, sizeof errbuf);
    slots_release(a->slots, c->tenant);
    limits_exec_end(a->lim, c->tenant);
    kernels_put(a->kernels, k);
    bool audited = !answer || audit_cell(a, c, s, code, answer,
                                         (double)json_integer_value(json_object_get(answer, "duration_ms")) / 1000.0) == 0;
    if (!answer) /* no audit record took its end along */
        api_commands_ended(a);
    registry_release(a->reg, s);
    if (!audited) {
        json_decref(answer);
        const char *detail = "The cell ran but its audit record could not be saved: the server's storage is full or failing.";
        if (tap.stream)
            exec_tap_event(&tap, json_pack("{s:s,s:i,s:s}", "type", "error", "status", 507, "detail", detail));
        else
            http_send_detail(r, 507, detail);
    } else if (!answer) {
        log_error("a cell of kernel %s in %s failed: %s", kid, sid, errbuf);
        if (tap.stream)
            exec_tap_event(&tap, json_pack("{s:s,s:i,s:s}", "type", "error", "status", 500, "detail", errbuf));
        else
            send_detail_with(r, 500, "The cell could not run: %s", errbuf);
    } else if (tap.stream) {
        exec_tap_event(&tap, json_pack("{s:s,s:o}", "type", "result", "result", answer));
    } else {
        http_send_json(r, 200, answer);
    }
    exec_tap_close(&tap);
}
