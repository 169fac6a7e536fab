/* POST /v1/sessions/{id}/pause and /resume (domain/pause.h; docs/api.md "Pause and resume"). */
#include "api/api.h"
#include "api/handlers.h"

#include <stdlib.h>
#include <string.h>

void api_sessions_pause(app *a, http_request *r, const api_call *c)
{
    session *s = acquire_session_as_is(a, r, c);
    if (!s)
        return;
    pause_outcome out;
    session_result rc = pause_session(&a->pause, s, false, &out);
    if (rc == SESSION_OK) {
        session_pause_state p;
        registry_state(a->reg, s, &p);
        http_send_json(r, 200, json_pack("{s:s,s:s,s:I,s:f,s:f}", "session_id", s->id, "state", "paused",
                                         "image_bytes", (json_int_t)out.image_bytes, "pause_ms", out.pause_ms,
                                         "paused_at", p.paused_at));
    } else if (rc == SESSION_BUSY && out.why[0]) {
        char msg[400];
        snprintf(msg, sizeof msg, "Cannot pause with its kernels' memory: %s.", out.why);
        http_send_detail(r, 409, msg);
    } else if (rc == SESSION_BUSY) {
        http_send_detail(r, 409, "Cannot pause: a command is running in this session (or another request is "
                                 "using it). Pause it when it is done.");
    } else if (rc == SESSION_NOT_FOUND) {
        http_send_detail(r, 404, "Session not found or expired");
    } else if (rc == SESSION_STORAGE) {
        send_not_saved(r, 507, "The paused state");
    } else if (out.sandbox_lost) {
        char msg[600];
        snprintf(msg, sizeof msg, "The session could not be paused: %s. Its sandbox ended with the failed save: its "
                 "kernels' memory is lost (their next cell starts them anew and says kernel_restarted); its files "
                 "are kept and it is active.", out.why);
        http_send_detail(r, 500, msg);
    } else if (out.why[0]) {
        char msg[400];
        snprintf(msg, sizeof msg, "The session could not be paused: %s. It is still active, its kernels as they were.",
                 out.why);
        http_send_detail(r, 500, msg);
    } else {
        http_send_detail(r, 500, "The session could not be paused (logged); it is still active.");
    }
    registry_release(a->reg, s);
}

void api_sessions_resume(app *a, http_request *r, const api_call *c)
{
    session *s = acquire_session_as_is(a, r, c);
    if (!s)
        return;
    bool resumed = false;
    double ms = 0;
    char why[300] = "";
    size_t len = 0;
    char *discard = http_query(r, "discard_memory", &len);
    bool discard_memory = discard && (strcmp(discard, "1") == 0 || strcmp(discard, "true") == 0);
    bool bad = discard && !discard_memory && strcmp(discard, "0") != 0 && strcmp(discard, "false") != 0;
    free(discard);
    if (bad) {
        registry_release(a->reg, s);
        http_send_detail(r, 400, "The query parameter 'discard_memory' must be 1, true, 0 or false.");
        return;
    }
    session_result rc = resume_session_with(&a->pause, s, discard_memory, &resumed, &ms, why, sizeof why);
    if (rc == SESSION_OK) {
        if (resumed)
            http_note(r, "x-airlock-resumed", "1", NULL);
        http_send_json(r, 200, json_pack("{s:s,s:s,s:b,s:f}", "session_id", s->id, "state", "active", "resumed",
                                         resumed, "resume_ms", ms));
    } else if (rc == SESSION_NOT_FOUND) {
        http_send_detail(r, 404, "Session not found or expired");
    } else if (rc == SESSION_BUSY) {
        char msg[500];
        snprintf(msg, sizeof msg, "The session's memory cannot be restored: %s. It stays paused, its image kept; "
                                  "resume?discard_memory=1 resumes its files only (its kernels end).", why);
        http_send_detail(r, 409, msg);
    } else if (why[0] && registry_state(a->reg, s, NULL) == SESSION_PAUSED) {
        char msg[600];
        snprintf(msg, sizeof msg, "The session's memory could not be restored (%s). It stays paused, its image and "
                                  "files kept: resume again to retry, or resume?discard_memory=1 for its files only "
                                  "(its kernels end).", why);
        http_send_detail(r, 500, msg);
    } else if (why[0]) {
        char msg[500];
        snprintf(msg, sizeof msg, "The session's memory could not be restored (%s): its kernels ended; its files "
                                  "are kept and it is active.", why);
        http_send_detail(r, 500, msg);
    } else {
        http_send_retry(r, 503, "The paused session could not be resumed (its disk could not be mounted); its "
                                "files are kept. Retry shortly.", 2);
    }
    registry_release(a->reg, s);
}
