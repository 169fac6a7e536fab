/* The fleet's session registry in PostgreSQL: which node holds which session, the tenants'
 * session counts, the answers for a session whose node is not this one. */
#include "fleet/internal.h"
#include "log/log.h"

#include "fleet/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int fleet_session_reserve(fleet *f, const char *id, const char *tenant, int max, const json_t *egress,
                          long long quota_bytes, int *open_now)
{
    char m[24], q[24];
    char *eg = json_dumps(egress, JSON_COMPACT);
    snprintf(m, sizeof m, "%d", max);
    snprintf(q, sizeof q, "%lld", quota_bytes >> 20);
    const char *p[] = {id, tenant, f->id, m, eg ? eg : "[]", q};
    char *v = pg_value(f->db, "SELECT airlock_session_reserve($1, $2, $3, $4::integer, $5::jsonb, $6::integer)", 6, p);
    free(eg);
    if (!v)
        return -1;
    int n = atoi(v);
    free(v);
    if (n < 0)
        return 0;
    *open_now = n;
    return 1;
}

void fleet_session_ready(fleet *f, const char *reserved_id, const char *id, double created_at, const json_t *shape)
{
    char t[40];
    snprintf(t, sizeof t, "%.6f", created_at);
    char *sh = shape ? json_dumps(shape, JSON_COMPACT) : NULL;
    const char *p[] = {reserved_id, id, t, sh ? sh : "{}"};
    PQclear(pg_query(f->db, "UPDATE sessions SET id = $2, created_at = $3::double precision,"
                            " last_used = $3::double precision, shape = $4::jsonb WHERE id = $1", 4, p));
    free(sh);
}

void fleet_session_release(fleet *f, const char *id)
{
    const char *p[] = {id, f->id};
    /* a lost session's row stays: its id answers 410 until the row is pruned (an ended
     * session's egress events go with its row: schema migration 5) */
    PQclear(pg_query(f->db, "DELETE FROM sessions WHERE id = $1 AND node = $2 AND state = 'active'", 2, p));
}

void fleet_session_paused(fleet *f, const char *id, double paused_at)
{
    char t[40];
    snprintf(t, sizeof t, "%.6f", paused_at);
    const char *p[] = {id, f->id, t};
    PQclear(pg_query(f->db, "UPDATE sessions SET paused_at = nullif($3::double precision, 0)"
                            " WHERE id = $1 AND node = $2", 3, p));
}

void fleet_session_reconcile(fleet *f, bool (*held)(void *ctx, const char *id), void *ctx)
{
    const char *p[] = {f->id};
    PGresult *res = pg_query(f->db, "SELECT id FROM sessions WHERE node = $1 AND state = 'active'"
                                    " AND stored IS NULL", 1, p); /* a stored one is no node's */
    for (int i = 0; res && i < PQntuples(res); i++) {
        const char *id = PQgetvalue(res, i, 0);
        if (held(ctx, id))
            continue;
        const char *q[] = {id, f->id};
        PQclear(pg_query(f->db, "UPDATE sessions SET state = 'lost', lost_at = now() WHERE id = $1 AND node = $2"
                                " AND state = 'active'", 2, q));
        log_session(LV_WARN, id, NULL, "session %s is not on this node any more: declared lost", id);
    }
    PQclear(res);
}

/* a last use this much older than the previous touch is sent again: one recorded while the
 * previous list was being taken is never missed */
#define TOUCH_OVERLAP_S 2.0

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void fleet_session_touch(fleet *f, size_t n, char (*ids)[17], const double *times)
{
    /* only the sessions used since the last beat reached the database: its cost follows the
     * requests, not the sessions held */
    double since = f->touch_since - TOUCH_OVERLAP_S;
    f->touch_at = wall_now();
    free(f->touch_ids);
    free(f->touch_times);
    f->touch_ids = f->touch_times = NULL;
    size_t used = 0;
    for (size_t i = 0; i < n; i++)
        used += times[i] >= since;
    if (used == 0)
        return;
    /* two Postgres arrays: {id,...} and {time,...}, sent with the next heartbeat */
    size_t cap = used * 40 + 8;
    char *a = malloc(cap), *b = malloc(cap);
    if (!a || !b) {
        free(a);
        free(b);
        return;
    }
    size_t ao = 0, bo = 0;
    a[ao++] = '{';
    b[bo++] = '{';
    for (size_t i = 0, k = 0; i < n; i++) {
        if (times[i] < since)
            continue;
        ao += (size_t)snprintf(a + ao, cap - ao, "%s%s", k ? "," : "", ids[i]);
        bo += (size_t)snprintf(b + bo, cap - bo, "%s%.6f", k ? "," : "", times[i]);
        k++;
    }
    snprintf(a + ao, cap - ao, "}");
    snprintf(b + bo, cap - bo, "}");
    f->touch_ids = a;
    f->touch_times = b;
}

fleet_where fleet_session_where(fleet *f, const char *id, const char *tenant, char *node, size_t nodelen)
{
    const char *p[] = {id};
    PGresult *res = pg_query(f->db, "SELECT tenant, node, state FROM sessions WHERE id = $1", 1, p);
    if (!res)
        return FLEET_WHERE_UNKNOWN;
    fleet_where w = FLEET_WHERE_NONE;
    if (PQntuples(res) == 1) {
        snprintf(node, nodelen, "%s", PQgetvalue(res, 0, 1));
        w = strcmp(PQgetvalue(res, 0, 0), tenant) != 0   ? FLEET_WHERE_FORBIDDEN
            : strcmp(PQgetvalue(res, 0, 2), "lost") == 0 ? FLEET_WHERE_LOST
                                                         : FLEET_WHERE_WAIT;
    }
    PQclear(res);
    return w;
}

json_t *fleet_session_list(fleet *f, const char *tenant, double ttl, double paused_ttl)
{
    const char *p[] = {tenant};
    PGresult *res = pg_query(f->db, "SELECT id, egress::text, created_at, last_used, quota_mb, shape::text,"
                                    " paused_at FROM sessions"
                                    " WHERE tenant = $1 AND state = 'active' ORDER BY created_at DESC, id", 1, p);
    if (!res)
        return NULL;
    json_t *arr = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        json_t *eg = json_loads(PQgetvalue(res, i, 1), 0, NULL);
        double last = atof(PQgetvalue(res, i, 3));
        long long quota_mb = atoll(PQgetvalue(res, i, 4));
        json_t *item = json_pack("{s:s,s:s,s:o,s:f,s:f,s:f,s:I}", "session_id", PQgetvalue(res, i, 0),
                                 "tenant_id", tenant, "egress", eg ? eg : json_array(), "created_at",
                                 atof(PQgetvalue(res, i, 2)), "last_accessed_at", last,
                                 "expires_at", last + ttl, "disk_quota_mb", (json_int_t)quota_mb);
        json_t *shape = json_loads(PQgetvalue(res, i, 5), 0, NULL);
        session_spec spec = fleet_shape_spec(shape, quota_mb << 20);
        session filled = {0}; /* the defaults filled in as the node that holds it did */
        session_spec_apply(&filled, &spec, NULL, quota_mb << 20);
        if (item)
            session_shape_json(item, filled.template_name, &filled.size, filled.quota_bytes);
        bool paused = !PQgetisnull(res, i, 6);
        if (item) { /* as a node's own list shows it (api/sessions.c) */
            json_object_set_new(item, "state", json_string(paused ? "paused" : "active"));
            const char *on_idle = json_string_value(json_object_get(shape, "on_idle"));
            json_object_set_new(item, "on_idle", json_string(on_idle && strcmp(on_idle, "pause") == 0 ? "pause"
                                                                                                      : "delete"));
        }
        if (item && paused) {
            double at = atof(PQgetvalue(res, i, 6));
            json_object_set_new(item, "paused_at", json_real(at));
            json_object_set_new(item, "expires_at", json_real(at + paused_ttl));
        }
        json_decref(shape);
        json_array_append_new(arr, item);
    }
    PQclear(res);
    return arr;
}

json_t *fleet_session_list_all(fleet *f, int limit)
{
    char lim[16];
    snprintf(lim, sizeof lim, "%d", limit);
    const char *p[] = {lim};
    PGresult *res = pg_query(f->db, "SELECT id, tenant, node, state, created_at, last_used, quota_mb, shape::text"
                                    " FROM sessions ORDER BY created_at DESC, id LIMIT $1::integer", 1, p);
    if (!res)
        return NULL;
    json_t *arr = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        long long quota_mb = atoll(PQgetvalue(res, i, 6));
        json_t *item = json_pack("{s:s,s:s,s:s,s:s,s:f,s:f}", "id", PQgetvalue(res, i, 0), "tenant",
                                 PQgetvalue(res, i, 1), "node", PQgetvalue(res, i, 2), "state", PQgetvalue(res, i, 3),
                                 "created_at", atof(PQgetvalue(res, i, 4)), "last_accessed_at",
                                 atof(PQgetvalue(res, i, 5)));
        json_t *shape = json_loads(PQgetvalue(res, i, 7), 0, NULL);
        session_spec spec = fleet_shape_spec(shape, quota_mb << 20);
        session filled = {0}; /* the defaults filled in as the node that holds it did */
        session_spec_apply(&filled, &spec, NULL, quota_mb << 20);
        if (item) {
            session_shape_json(item, filled.template_name, &filled.size, filled.quota_bytes);
            json_object_set_new(item, "memory_limit_bytes", json_integer((json_int_t)filled.size.memory_mb << 20));
            json_object_set_new(item, "disk_quota_bytes", json_integer(filled.quota_bytes));
        }
        json_decref(shape);
        json_array_append_new(arr, item);
    }
    PQclear(res);
    return arr;
}
