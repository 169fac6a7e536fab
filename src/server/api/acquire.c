/* The session a route works on (c->param), looked up once with the same replies on every
 * session route: 404 (or, in a fleet, the answer for a session held by another node), 503
 * while it moves, 403 for another tenant's; and, for a route that records an audit entry,
 * 507 before anything runs while the audit log cannot be written. */
#include "api/api.h"
#include "api/handlers.h"

/* A paused session is resumed before the call uses it, and the answer says so (docs/api.md
 * "Pause and resume"): false when an error was sent. */
static bool resume_for_call(app *a, http_request *r, session *s)
{
    bool resumed = false;
    double ms = 0;
    char why[300] = "";
    session_result rc = resume_session(&a->pause, s, &resumed, &ms, why, sizeof why);
    if (rc == SESSION_ERROR && why[0] && registry_state(a->reg, s, NULL) == SESSION_PAUSED) {
        char msg[600];
        snprintf(msg, sizeof msg, "The paused session's memory could not be restored (%s). It stays paused, its "
                                  "image and files kept: POST /v1/sessions/{id}/resume retries; "
                                  "resume?discard_memory=1 resumes its files only.", why);
        http_send_detail(r, 500, msg);
    } else if (rc == SESSION_NOT_FOUND)
        http_send_detail(r, 404, "Session not found or expired");
    else if (rc == SESSION_BUSY) /* its memory image is another runsc version's */
        http_send_detail(r, 409, "The paused session's memory image was made by another runsc version; it stays "
                                 "paused. POST /v1/sessions/{id}/resume?discard_memory=1 resumes its files only.");
    else if (rc != SESSION_OK)
        http_send_retry(r, 503, "The paused session could not be resumed (its disk could not be mounted); its "
                                "files are kept. Retry shortly.", 2);
    else if (resumed)
        http_note(r, "x-airlock-resumed", "1", "resumed");
    return rc == SESSION_OK;
}

/* The caller's session c->param, touched or not, referenced; NULL when a 404/403/503 was sent
 * (or another node answered). */
static session *acquire_found(app *a, http_request *r, const api_call *c, bool touch)
{
    session *s = NULL;
    session_result rc = registry_acquire(a->reg, c->param, c->tenant, touch, &s);
    if (rc == SESSION_NOT_FOUND && store_take_over(a, c->param, c->tenant))
        rc = registry_acquire(a->reg, c->param, c->tenant, touch, &s);
    /* the same strings on every session route */
    if (rc == SESSION_NOT_FOUND && fleet_answer_elsewhere(a, r, c->param, c->tenant))
        return NULL;
    if (rc == SESSION_NOT_FOUND)
        http_send_detail(r, 404, "Session not found or expired");
    else if (rc == SESSION_MOVING)
        send_moving(r, c->param);
    else if (rc != SESSION_OK)
        http_send_detail(r, 403, "Forbidden: Access denied to this session");
    return rc == SESSION_OK ? s : NULL;
}

session *acquire_session(app *a, http_request *r, const api_call *c)
{
    /* every session route counts as activity, so the idle reaper spares it */
    session *s = acquire_found(a, r, c, true);
    if (s && !resume_for_call(a, r, s)) {
        registry_release(a->reg, s);
        return NULL;
    }
    return s;
}

session *acquire_session_as_is(app *a, http_request *r, const api_call *c)
{
    return acquire_found(a, r, c, false);
}

session *acquire_audited_session(app *a, http_request *r, const api_call *c, const char *what)
{
    session *s = acquire_session(a, r, c);
    if (s && !audit_writable(a->audit)) {
        registry_release(a->reg, s);
        send_not_saved(r, 507, what);
        return NULL;
    }
    return s;
}
