/* Paused sessions in the fleet's shared store (docs/fleet.md "The shared store"): a session
 * paused on a node of a fleet leaves its image in the store and its row says so
 * (sessions.stored: the image's parts, relative to SANDBOX_SNAPSHOT_DIR); no node holds it
 * then, and the first node a call for it reaches takes it, in one statement, so two nodes
 * racing never both do. A node's death does not lose it (schema migration 13). */
#include "fleet/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fleet_store_put(fleet *f, const char *id, const json_t *parts)
{
    char *js = json_dumps(parts, JSON_COMPACT);
    if (!js)
        return -1;
    const char *p[] = {id, f->id, js};
    PGresult *res = pg_query(f->db, "UPDATE sessions SET stored = $3::jsonb WHERE id = $1 AND node = $2"
                                    " AND state = 'active' RETURNING id", 3, p);
    int rc = res && PQntuples(res) == 1 ? 0 : -1;
    PQclear(res);
    free(js);
    return rc;
}

json_t *fleet_store_take(fleet *f, const char *id, const char *tenant)
{
    const char *p[] = {id, tenant, f->id};
    /* the row locked first: a second taker waits, then finds stored NULL and takes nothing */
    PGresult *res = pg_query(f->db,
        "WITH o AS (SELECT id, stored FROM sessions WHERE id = $1 AND stored IS NOT NULL FOR UPDATE)"
        " UPDATE sessions s SET node = $3, stored = NULL, moving_to = NULL, move_error = NULL FROM o"
        " WHERE s.id = o.id AND s.tenant = $2 AND s.state = 'active' AND s.stored IS NOT NULL"
        " RETURNING s.egress::text, s.quota_mb, s.created_at, s.last_used, s.shape::text,"
        " coalesce(s.paused_at, s.last_used), o.stored::text", 3, p);
    json_t *row = NULL;
    if (res && PQntuples(res) == 1)
        row = json_pack("{s:o,s:I,s:f,s:f,s:o,s:f,s:o}", "egress", json_loads(PQgetvalue(res, 0, 0), 0, NULL),
                        "quota_mb", (json_int_t)atoll(PQgetvalue(res, 0, 1)), "created_at",
                        atof(PQgetvalue(res, 0, 2)), "last_used", atof(PQgetvalue(res, 0, 3)), "shape",
                        json_loads(PQgetvalue(res, 0, 4), 0, NULL), "paused_at", atof(PQgetvalue(res, 0, 5)),
                        "stored", json_loads(PQgetvalue(res, 0, 6), 0, NULL));
    PQclear(res);
    return row;
}

int fleet_store_hand_over(fleet *f, const char *id)
{
    /* the router sends its calls to the active node with the most free room (as a drain's
     * move picks one); that node takes it from the store on the first call */
    const char *p[] = {id, f->id};
    PGresult *res = pg_query(f->db,
        "WITH t AS (SELECT n.id FROM nodes n WHERE n.state = 'active' AND n.id <> $2"
        "   AND n.heartbeat > now() - interval '5 seconds'"
        "   ORDER BY (SELECT count(*) FROM sessions s WHERE s.node = n.id AND s.state = 'active'), n.id LIMIT 1)"
        " UPDATE sessions s SET node = t.id FROM t WHERE ($1::text IS NULL OR s.id = $1) AND s.node = $2"
        " AND s.stored IS NOT NULL RETURNING s.id", 2, p);
    int rc = res ? PQntuples(res) : -1;
    PQclear(res);
    return rc;
}

json_t *fleet_store_expired(fleet *f, double paused_ttl, int limit)
{
    char t[32], l[16];
    snprintf(t, sizeof t, "%.3f", paused_ttl);
    snprintf(l, sizeof l, "%d", limit);
    const char *p[] = {t, l};
    /* deleted by the one statement that finds it: of nodes sweeping at once, one removes each */
    PGresult *res = pg_query(f->db, "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions"
                                    " WHERE stored IS NOT NULL AND state = 'active'"
                                    " AND paused_at < airlock_now() - $1::double precision"
                                    " ORDER BY id LIMIT $2::integer FOR UPDATE SKIP LOCKED) RETURNING id", 2, p);
    if (!res)
        return NULL;
    json_t *ids = json_array();
    for (int i = 0; ids && i < PQntuples(res); i++)
        json_array_append_new(ids, json_string(PQgetvalue(res, i, 0)));
    PQclear(res);
    return ids;
}
