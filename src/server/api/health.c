/* GET /healthz (contract 1.1): no key, no rate limit. */
#include "api/handlers.h"

/* In a fleet, what the node knows of the whole fleet from its last view (never a database read
 * here: the router checks every node twice a second): "scope" says whose count
 * active_sessions is, the fleet's ("fleet") or, while that view is stale, this node's ("node"). */
static json_t *fleet_health(app *a, size_t own)
{
    fleet_totals t;
    bool have = fleet_view_totals(a->fleet, &t);
    bool fleet_wide = have && !t.stale;
    json_t *totals = have ? json_pack("{s:i,s:i,s:I,s:I,s:f,s:b}", "nodes", (int)t.nodes, "nodes_active",
                                      (int)t.active, "sessions", (json_int_t)t.sessions, "commands_running",
                                      (json_int_t)t.commands_running, "as_of", t.as_of, "stale", t.stale)
                          : json_null();
    return json_pack("{s:s,s:I,s:s,s:s,s:I,s:o}", "status", "healthy", "active_sessions",
                     (json_int_t)(fleet_wide ? (size_t)t.sessions : own), "scope", fleet_wide ? "fleet" : "node",
                     "node", fleet_node_id(a->fleet), "node_sessions", (json_int_t)own, "fleet", totals);
}

/* The body is the contract's, exactly (a fleet node adds its view of the fleet); the isolation
 * backend ("gvisor", or the weaker "bubblewrap" fallback) is reported in a header so clients
 * and monitors can tell. */
void api_health(app *a, http_request *r, const api_call *c)
{
    (void)c;
    size_t own = registry_count(a->reg);
    json_t *body = a->fleet ? fleet_health(a, own)
                            : json_pack("{s:s,s:I}", "status", "healthy", "active_sessions", (json_int_t)own);
    http_send_json_header(r, 200, body, "x-airlock-isolation", sandbox_backend_name(a->sb));
}
