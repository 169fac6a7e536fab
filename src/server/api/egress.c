/* GET /v1/sessions/{id}/egress (contract 1.9) and GET /v1/egress/policy (1.10). */
#include "api/handlers.h"

#include "egress/log.h"

void api_egress_log(app *a, http_request *r, const api_call *c)
{
    long long limit = 200;
    if (!limit_query(r, &limit))
        return;
    limit = limit < 1 ? 1 : limit > EGRESS_LOG_RING ? EGRESS_LOG_RING : limit; /* silently */
    session *s = acquire_session(a, r, c);
    if (!s)
        return;
    json_t *events = NULL;
    /* in a fleet: from the database, with every node's events of the session (this node's
     * own shipped first); this node's alone while the database cannot be reached */
    if (a->fleet && fleet_egress_ship(a->fleet, a->audit) == 0)
        events = fleet_egress_events(a->fleet, s->id, (int)limit);
    if (!events)
        events = egress_events(a->egress, s->id, (size_t)limit);
    http_send_json(r, 200, json_pack("{s:s,s:o}", "session_id", s->id, "events", events ? events : json_array()));
    registry_release(a->reg, s);
}

void api_egress_policy(app *a, http_request *r, const api_call *c)
{
    const tenant_cfg *t = tenants_get(a->tenants, c->tenant);
    http_send_json(r, 200, json_pack("{s:s,s:O}", "tenant_id", t->name, "allowed", t->egress_allowed));
}
