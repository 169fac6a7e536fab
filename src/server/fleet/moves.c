/* A drain's moves in the database (docs/fleet.md "Drain"): the draining node names the node a
 * session moves to (sessions.moving_to), the receiving node takes only a session the database
 * says is moving to it and becomes its owner in one statement; a failed move is undone in one
 * statement too (exactly one of the two wins) and leaves its reason (sessions.move_error). */
#include "fleet/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fleet_set_drain(fleet *f, fleet_drain_fn step, void *ctx)
{
    f->drain_step = step;
    f->drain_ctx = ctx;
}

json_t *fleet_move_candidates(fleet *f)
{
    const char *p[] = {f->id};
    /* a moving_to left by a move this node never finished (it was killed) is overwritten */
    PGresult *res = pg_query(f->db, "SELECT id FROM sessions WHERE node = $1 AND state = 'active'"
                                    " AND move_error IS NULL AND stored IS NULL ORDER BY last_used", 1, p);
    if (!res)
        return NULL;
    json_t *ids = json_array();
    for (int i = 0; ids && i < PQntuples(res); i++)
        json_array_append_new(ids, json_string(PQgetvalue(res, i, 0)));
    PQclear(res);
    return ids;
}

/* The URLs a move uses are the nodes' internal listeners (internal_url), never the address
 * the router forwards to. */
int fleet_move_begin(fleet *f, const char *sid, char *node, size_t nodelen, char *url, size_t urllen)
{
    /* the active node with the most free room (heartbeat fresh, below its capacity), counting
     * the sessions it owns and those moving to it now */
    const char *p[] = {sid, f->id};
    PGresult *res = pg_query(f->db,
        "WITH c AS (SELECT n.id, coalesce(n.internal_url, n.url) AS url, n.capacity, (SELECT count(*) FROM sessions s WHERE s.state = 'active'"
        "   AND (s.node = n.id OR s.moving_to = n.id)) AS held FROM nodes n WHERE n.state = 'active' AND n.id <> $2"
        "   AND n.heartbeat > now() - interval '5 seconds'),"
        " t AS (SELECT id, url FROM c WHERE capacity = 0 OR held < capacity"
        "  ORDER BY CASE WHEN capacity = 0 THEN 0 ELSE held::double precision / capacity END, held LIMIT 1)"
        " UPDATE sessions s SET moving_to = t.id FROM t WHERE s.id = $1 AND s.node = $2 AND s.state = 'active'"
        " RETURNING t.id, t.url", 2, p);
    int rc = res && PQntuples(res) == 1 ? 0 : -1;
    if (rc == 0) {
        snprintf(node, nodelen, "%s", PQgetvalue(res, 0, 0));
        snprintf(url, urllen, "%s", PQgetvalue(res, 0, 1));
    }
    PQclear(res);
    return rc;
}

int fleet_move_cancel(fleet *f, const char *sid, const char *why)
{
    /* only while it is still this node's: a receiving node that committed first wins */
    const char *p[] = {sid, f->id, why};
    PGresult *res = pg_query(f->db, "UPDATE sessions SET moving_to = NULL, move_error = $3 WHERE id = $1"
                                    " AND node = $2 RETURNING id", 3, p);
    int rc = !res ? -1 : PQntuples(res) == 1 ? 0 : 1;
    PQclear(res);
    return rc;
}

void fleet_move_refused(fleet *f, const char *sid, const char *why)
{
    const char *p[] = {sid, f->id, why};
    PQclear(pg_query(f->db, "UPDATE sessions SET move_error = $3 WHERE id = $1 AND node = $2", 3, p));
}

bool fleet_move_outgoing(fleet *f, const char *sid)
{
    const char *p[] = {sid, f->id};
    char *v = pg_value(f->db, "SELECT 1 FROM sessions WHERE id = $1 AND node = $2 AND moving_to IS NOT NULL"
                              " AND state = 'active'", 2, p);
    free(v);
    return v != NULL;
}

json_t *fleet_move_incoming(fleet *f, const char *sid)
{
    const char *p[] = {sid, f->id};
    PGresult *res = pg_query(f->db,
        "SELECT s.tenant, s.egress::text, s.quota_mb, s.created_at, s.last_used, coalesce(n.internal_url, n.url),"
        " s.shape::text FROM sessions s"
        " JOIN nodes n ON n.id = s.node WHERE s.id = $1 AND s.moving_to = $2 AND s.state = 'active'", 2, p);
    json_t *row = NULL;
    if (res && PQntuples(res) == 1)
        row = json_pack("{s:s,s:o,s:I,s:f,s:f,s:s,s:o}", "tenant", PQgetvalue(res, 0, 0), "egress",
                        json_loads(PQgetvalue(res, 0, 1), 0, NULL), "quota_mb",
                        (json_int_t)atoll(PQgetvalue(res, 0, 2)), "created_at", atof(PQgetvalue(res, 0, 3)),
                        "last_used", atof(PQgetvalue(res, 0, 4)), "source", PQgetvalue(res, 0, 5), "shape",
                        json_loads(PQgetvalue(res, 0, 6), 0, NULL));
    PQclear(res);
    return row;
}

int fleet_move_commit(fleet *f, const char *sid)
{
    const char *p[] = {sid, f->id};
    PGresult *res = pg_query(f->db, "UPDATE sessions SET node = $2, moving_to = NULL, move_error = NULL WHERE id = $1"
                                    " AND moving_to = $2"
                                    " AND state = 'active' RETURNING id", 2, p);
    int rc = res && PQntuples(res) == 1 ? 0 : -1;
    PQclear(res);
    return rc;
}
