/* The session a route works on (c->param), looked up once with the same replies on every
 * session route: 404 (or, in a fleet, the answer for a session held by another node), 503
 * while it moves, 403 for another tenant's; and, for a route that records an audit entry,
 * 507 before anything runs while the audit log cannot be written. */
#include "api/api.h"
#include "api/handlers.h"

session *acquire_session(app *a, http_request *r, const api_call *c)
{
    session *s = NULL;
    /* every session route counts as activity, so the idle reaper spares it */
    session_result rc = registry_acquire(a->reg, c->param, c->tenant, true, &s);
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
