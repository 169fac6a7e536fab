/* GET /v1/sessions/{id}/egress (contract 1.9) and GET /v1/egress/policy (1.10). */
#include "api/handlers.h"

void api_egress_log(app *a, http_request *r, const api_call *c)
{
    long long limit = 0; /* validated only: there are no events to page through */
    if (!limit_query(r, &limit))
        return;
    session *s = acquire_session(a, r, c);
    if (!s)
        return;
    /* airlockd has no egress proxy yet, so no session has events */
    http_send_json(r, 200, json_pack("{s:s,s:[]}", "session_id", s->id, "events"));
    registry_release(a->reg, s);
}

void api_egress_policy(app *a, http_request *r, const api_call *c)
{
    const tenant_cfg *t = tenants_get(a->tenants, c->tenant);
    http_send_json(r, 200, json_pack("{s:s,s:O}", "tenant_id", t->name, "allowed", t->egress_allowed));
}
