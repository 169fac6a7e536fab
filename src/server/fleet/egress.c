/* The fleet's egress log: each node keeps the events of its sessions' proxy in its outbox
 * (store/audit.c, beside the audit rows), ships them at every heartbeat to the database's
 * egress_events table, where a row's key (session, node, sort key) makes a repeated shipment
 * write nothing twice, and reads a session's events from there, so they outlive a drain. They
 * go when their session ends or is declared lost (triggers: store/pg_schema.c, migration 5). */
#include "fleet/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fleet_egress_ship(fleet *f, audit_store *store)
{
    return fleet_outbox_ship(f, store, audit_egress_outbox_read, audit_egress_outbox_done,
        "INSERT INTO egress_events SELECT r.session_id, $2, r.sk, r.event::jsonb"
        " FROM json_to_recordset($1::json) AS r(sk text, session_id text, event text)"
        /* events that arrive after their session ended (a late shipment) are dropped */
        " WHERE EXISTS (SELECT 1 FROM sessions s WHERE s.id = r.session_id AND s.state = 'active')"
        " ON CONFLICT DO NOTHING");
}

json_t *fleet_egress_events(fleet *f, const char *session_id, int limit)
{
    char lim[16];
    snprintf(lim, sizeof lim, "%d", limit);
    const char *p[] = {session_id, lim};
    PGresult *res = pg_query(f->db,
        "SELECT event::text FROM (SELECT event, sk, node FROM egress_events WHERE session_id = $1"
        " ORDER BY sk DESC, node LIMIT $2::integer) e ORDER BY sk, node", 2, p);
    if (!res)
        return NULL;
    json_t *arr = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        json_t *ev = json_loads(PQgetvalue(res, i, 0), 0, NULL);
        if (ev)
            json_array_append_new(arr, ev);
    }
    PQclear(res);
    return arr;
}

json_t *fleet_egress_denials(fleet *f, int limit)
{
    char lim[16];
    snprintf(lim, sizeof lim, "%d", limit);
    const char *p[] = {lim};
    PGresult *res = pg_query(f->db,
        "SELECT session_id, event::text FROM egress_events WHERE event->>'decision' = 'deny'"
        " ORDER BY sk DESC, node LIMIT $1::integer", 1, p);
    if (!res)
        return NULL;
    json_t *arr = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        json_t *ev = json_loads(PQgetvalue(res, i, 1), 0, NULL);
        if (json_is_object(ev)) {
            json_object_set_new(ev, "session_id", json_string(PQgetvalue(res, i, 0)));
            json_array_append_new(arr, ev);
        } else {
            json_decref(ev);
        }
    }
    PQclear(res);
    return arr;
}
