/* The fleet's routes (docs/fleet.md): GET /v1/admin/nodes (admin key), GET /v1/fleet/accepting
 * (HAProxy's check for new sessions), and the answer for a session another node holds. */
#include "api/handlers.h"

#include <stdio.h>

void api_admin_nodes(app *a, http_request *r, const api_call *c)
{
    (void)c;
    if (!a->fleet) {
        http_send_detail(r, 404, "This server is not part of a fleet (no --database).");
        return;
    }
    json_t *nodes = fleet_nodes(a->fleet);
    double as_of = epoch_now();
    bool stale = !nodes;
    /* the database cannot be read: what this node last saw, said to be so */
    if (stale)
        nodes = fleet_nodes_view(a->fleet, &as_of);
    /* the heartbeats' ages as of now, not as of the view */
    size_t i;
    json_t *n;
    json_array_foreach(stale ? nodes : NULL, i, n) {
        double age = json_number_value(json_object_get(n, "heartbeat_age_s")) + (epoch_now() - as_of);
        json_object_set_new(n, "heartbeat_age_s", json_real(age > 0 ? age : 0));
    }
    if (nodes)
        http_send_json(r, 200, json_pack("{s:s,s:o,s:b,s:f}", "node", fleet_node_id(a->fleet), "nodes", nodes,
                                         "stale", stale, "as_of", as_of));
    else
        http_send_json_header(r, 503, json_pack("{s:s}", "detail", "The fleet's database cannot be reached."),
                              "retry-after", "2");
}

void api_admin_node_drain(app *a, http_request *r, const api_call *c)
{
    json_t *row = NULL;
    int rc = a->fleet ? fleet_drain(a->fleet, c->param, &row) : 1;
    if (!a->fleet)
        http_send_detail(r, 404, "This server is not part of a fleet (no --database).");
    else if (rc == 0)
        http_send_json(r, 200, row);
    else if (rc == 1)
        send_detail_with(r, 404, "No node '%s'.", c->param);
    else
        http_send_json_header(r, 503, json_pack("{s:s}", "detail", "The fleet's database cannot be reached."),
                              "retry-after", "2");
}

void api_fleet_accepting(app *a, http_request *r, const api_call *c)
{
    (void)c;
    if (!a->fleet)
        http_send_detail(r, 404, "Not Found");
    else if (fleet_accepting(a->fleet) && !fleet_full(a->fleet))
        http_send_json(r, 200, json_pack("{s:b,s:s}", "accepting", 1, "node", fleet_node_id(a->fleet)));
    else
        http_send_json(r, 503, json_pack("{s:b,s:s}", "accepting", 0, "node", fleet_node_id(a->fleet)));
}

bool fleet_answer_elsewhere(app *a, http_request *r, const char *id, size_t tenant)
{
    if (!a->fleet || fleet_slot_of(id) < 0)
        return false;
    bool own = fleet_slot_of(id) == fleet_slot(a->fleet);
    char node[128] = "", msg[400], retry[16];
    int grace = (int)fleet_lost_after(a->fleet);
    fleet_where w = fleet_session_where(a->fleet, id, tenants_get(a->tenants, tenant)->name, node, sizeof node);
    /* an id of this node's that it does not hold: gone (404), lost while it was away (410),
     * or moved by a drain to another node (503 until the router's map sends it there) */
    if (w == FLEET_WHERE_NONE || (own && w != FLEET_WHERE_LOST && w != FLEET_WHERE_WAIT))
        return false;
    switch (w) {
    case FLEET_WHERE_FORBIDDEN:
        http_send_detail(r, 403, "Forbidden: Access denied to this session");
        return true;
    case FLEET_WHERE_WAIT:
        snprintf(msg, sizeof msg, "Session %s lives on node '%s', which this request could not reach; retry "
                                  "shortly (a node silent for %d s is declared lost with its sessions).", id, node,
                 grace);
        snprintf(retry, sizeof retry, "%d", 2);
        http_send_json_header(r, 503, json_pack("{s:s}", "detail", msg), "retry-after", retry);
        return true;
    case FLEET_WHERE_LOST:
        snprintf(msg, sizeof msg, "Session %s was lost with its node '%s' (no heartbeat for %d s): its "
                                  "workspace is gone. Create a new session.", id, node, grace);
        http_send_detail(r, 410, msg);
        return true;
    case FLEET_WHERE_UNKNOWN:
    default:
        http_send_json_header(r, 503, json_pack("{s:s}", "detail", "The fleet's database cannot be reached; "
                                                "the node of this session is unknown. Retry shortly."),
                              "retry-after", "2");
        return true;
    }
}
