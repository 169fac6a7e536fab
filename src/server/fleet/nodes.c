/* The node's row: registration, the heartbeat thread, the admin list of nodes. */
#include "domain/session_id.h"
#include "fleet/agent.h"
#include "fleet/internal.h"
#include "log/log.h"
#include "obs/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static json_t *read_nodes(fleet *f, bool exact);

#define HEARTBEAT_S 1

fleet *fleet_open(pg_pool *db, const fleet_opts *o, char *err, size_t errlen)
{
    fleet *f = calloc(1, sizeof *f);
    if (!f || !(f->id = strdup(o->node_id)) || !(f->url = strdup(o->advertise))) {
        if (f)
            free(f->id);
        free(f);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    f->db = db;
    f->lost_after = o->lost_after;
    f->capacity = o->capacity;
    f->agent_port = o->agent_port;
    if (o->agent_port > 0 && !(f->agent_host = strdup(o->agent_host ? o->agent_host : "127.0.0.1"))) {
        fleet_close(f);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    char cap[24];
    snprintf(cap, sizeof cap, "%d", o->capacity);
    const char *p[] = {f->id, f->url, cap};
    char *slot = pg_value(db, "SELECT airlock_node_register($1, $2, $3::integer)", 3, p);
    if (!slot) {
        snprintf(err, errlen, "cannot register node '%s' in the database (see the message above)", f->id);
        fleet_close(f);
        return NULL;
    }
    f->slot = atoi(slot);
    free(slot);
    /* the port HAProxy's agent-check reads (the router program prints it from here) */
    char agent[24];
    snprintf(agent, sizeof agent, "%d", o->agent_port);
    const char *ap[] = {f->id, agent};
    PQclear(pg_query(db, "UPDATE nodes SET agent_port = $2::integer WHERE id = $1", 2, ap));
    pthread_mutex_init(&f->mu, NULL);
    pthread_mutex_init(&f->ship_mu, NULL);
    pthread_mutex_init(&f->gc_mu, NULL);
    pthread_cond_init(&f->gc_cond, NULL);
    f->gc_starts_end = &f->gc_starts;
    pthread_mutex_init(&f->cmd_mu, NULL);
    pthread_mutex_init(&f->view_mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->locks_ready = true;
    atomic_store(&f->accepting, true);
    log_info("fleet node '%s' (slot %02x) at %s", f->id, (unsigned)f->slot, f->url);
    return f;
}

/* This node's sessions the fleet declared lost: dropped here too. False when the database
 * could not be read. */
static bool drop_lost(fleet *f)
{
    const char *p[] = {f->id};
    PGresult *res = pg_query(f->db, "SELECT id FROM sessions WHERE node = $1 AND state = 'lost'", 1, p);
    for (int i = 0; res && f->lost && i < PQntuples(res); i++)
        f->lost(f->load_ctx, PQgetvalue(res, i, 0));
    PQclear(res);
    return res != NULL;
}

/* One heartbeat, one statement: the node's row, its state, the reaping of dead nodes (by one
 * node at a time) and the count of nodes alive (schema migration 9). */
static void beat(fleet *f)
{
    int load = f->load ? f->load(f->load_ctx) : 0;
    fleet_commands_flush(f); /* ends no audit row took along (the database was away) */
    char l[24], g[32];
    snprintf(l, sizeof l, "%d", load);
    snprintf(g, sizeof g, "%.3f", f->lost_after);
    const char *p[] = {f->id, l, g, f->touch_ids, f->touch_times};
    PGresult *res = pg_query(f->db, "SELECT st, live FROM airlock_node_beat($1, $2::integer, $3::double precision,"
                                    " $4::text[], $5::double precision[])", 5, p);
    if (res) /* the last uses it carried are in the database */
        f->touch_since = f->touch_at;
    const char *state = res && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) ? PQgetvalue(res, 0, 0) : NULL;
    bool active = state && strcmp(state, "active") == 0;
    if (state)
        metrics_heartbeat_ok();
    if (state && strcmp(state, "dead") == 0 && drop_lost(f)) {
        /* declared dead while it could not reach the database: it drops the sessions
         * declared lost first (their ids answer 410 from the database), and only then
         * registers again, so an `active` row never names a node still serving them (the
         * next heartbeat tries again when they could not be read) */
        char cap[24];
        snprintf(cap, sizeof cap, "%d", f->capacity);
        const char *rp[] = {f->id, f->url, cap};
        free(pg_value(f->db, "SELECT airlock_node_register($1, $2, $3::integer)", 3, rp));
        log_warn("this node had been declared dead; registered again");
        if (f->slots_fn) /* its exec slots went with its counters */
            f->slots_fn(f->slots_ctx, NULL);
    }
    atomic_store(&f->accepting, active);
    bool draining = state && strcmp(state, "draining") == 0;
    long live = state ? atol(PQgetvalue(res, 0, 1)) : -1;
    if (live > 0)
        atomic_store(&f->live_nodes, (int)live);
    if (state) /* the view the admin list and /healthz fall back on during an outage */
        json_decref(read_nodes(f, false));
    PQclear(res);
    if (draining && f->drain_step)
        f->drain_step(f->drain_ctx);
}

static void *heartbeat_main(void *arg)
{
    fleet *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stopping) {
        pthread_mutex_unlock(&f->mu);
        beat(f);
        pthread_mutex_lock(&f->mu);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += HEARTBEAT_S;
        while (!f->stopping && pthread_cond_timedwait(&f->cond, &f->mu, &until) == 0) {
        }
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static void agent_reply(void *ctx, char *out, size_t outlen)
{
    fleet_agent_reply(ctx, out, outlen);
}

int fleet_drop_lost(fleet *f, fleet_lost_fn lost, void *ctx)
{
    f->lost = lost;
    f->load_ctx = ctx;
    return drop_lost(f) ? 0 : -1;
}

int fleet_start(fleet *f, fleet_load_fn load)
{
    f->load = load;
    if (f->agent_port > 0) {
        char err[200];
        if (!(f->agent = fleet_agent_start(agent_reply, f, f->agent_host, f->agent_port, err, sizeof err))) {
            log_error("fleet: %s", err);
            return -1;
        }
    }
    if (pthread_create(&f->beater, NULL, heartbeat_main, f) != 0)
        return -1;
    f->beating = true;
    return 0;
}

void fleet_set_count(fleet *f, fleet_count_fn count, void *ctx)
{
    f->count = count;
    f->count_ctx = ctx;
}

bool fleet_full(fleet *f)
{
    return f->capacity > 0 && f->count && f->count(f->count_ctx) >= (size_t)f->capacity;
}

void fleet_agent_reply(fleet *f, char *out, size_t outlen)
{
    long pct = 100;
    if (!fleet_accepting(f) || fleet_full(f)) {
        snprintf(out, outlen, "ready up 0%%\n"); /* weight 0: no new session */
        return;
    }
    if (f->capacity > 0 && f->count) {
        long held = (long)f->count(f->count_ctx);
        pct = 100 * (f->capacity - held) / f->capacity;
    }
    snprintf(out, outlen, "ready up %ld%%\n", pct < 1 ? 1 : pct);
}

int fleet_set_url(fleet *f, const char *url)
{
    char *u = strdup(url);
    if (!u)
        return -1;
    const char *p[] = {f->id, u};
    PGresult *res = pg_query(f->db, "UPDATE nodes SET url = $2 WHERE id = $1", 2, p);
    if (!res) {
        free(u);
        return -1;
    }
    PQclear(res);
    free(f->url);
    f->url = u;
    log_info("fleet node '%s' advertised at %s", f->id, f->url);
    return 0;
}

int fleet_set_internal_url(fleet *f, const char *url)
{
    const char *p[] = {f->id, url};
    PGresult *res = pg_query(f->db, "UPDATE nodes SET internal_url = $2 WHERE id = $1", 2, p);
    PQclear(res);
    return res ? 0 : -1;
}

void fleet_stop(fleet *f)
{
    if (!f)
        return;
    fleet_agent_stop(f->agent);
    f->agent = NULL;
    pg_listen_stop(f->slots_listener);
    f->slots_listener = NULL;
    if (!f->beating)
        return;
    pthread_mutex_lock(&f->mu);
    f->stopping = true;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->beater, NULL);
    f->beating = false;
}

void fleet_close(fleet *f)
{
    if (!f)
        return;
    fleet_stop(f);
    if (f->locks_ready) {
        pthread_mutex_destroy(&f->mu);
        pthread_mutex_destroy(&f->ship_mu);
        pthread_mutex_destroy(&f->gc_mu);
        pthread_cond_destroy(&f->gc_cond);
        pthread_mutex_destroy(&f->cmd_mu);
        pthread_mutex_destroy(&f->view_mu);
        fleet_view_free(f);
        pthread_cond_destroy(&f->cond);
    }
    json_decref(f->ended);
    free(f->touch_ids);
    free(f->touch_times);
    free(f->id);
    free(f->url);
    free(f->agent_host);
    free(f);
}

int fleet_slot(const fleet *f)
{
    return f->slot;
}

const char *fleet_node_id(const fleet *f)
{
    return f->id;
}

double fleet_lost_after(const fleet *f)
{
    return f->lost_after;
}

int fleet_live_nodes(fleet *f)
{
    int n = atomic_load(&f->live_nodes);
    return n > 0 ? n : 1;
}

bool fleet_accepting(fleet *f)
{
    return atomic_load(&f->accepting) && pg_reachable(f->db);
}

int fleet_slot_of(const char *id)
{
    return session_id_slot(id);
}

/* The nodes' rows. exact: sessions counted in the sessions table and the sessions a drain could
 * not move (what GET /v1/admin/nodes says); else each node's own count from its last
 * heartbeat (its load; 0 for a dead node) and no unmoved list, so a heartbeat's read of the
 * view costs the same whatever the number of sessions in the fleet. */
static json_t *read_nodes(fleet *f, bool exact)
{
    PGresult *res = pg_query(f->db, exact
        ? "SELECT n.id, n.slot, n.url, n.state, extract(epoch FROM n.heartbeat)::double precision,"
          " extract(epoch FROM now() - n.heartbeat)::double precision, n.capacity, n.load,"
          " (SELECT count(*) FROM sessions s WHERE s.node = n.id AND s.state = 'active'),"
          " (SELECT coalesce(sum(running), 0) FROM command_counts c WHERE c.node = n.id)"
          " FROM nodes n ORDER BY n.slot"
        : "SELECT n.id, n.slot, n.url, n.state, extract(epoch FROM n.heartbeat)::double precision,"
          " extract(epoch FROM now() - n.heartbeat)::double precision, n.capacity, n.load,"
          " CASE WHEN n.state = 'dead' THEN 0 ELSE n.load END,"
          " (SELECT coalesce(sum(running), 0) FROM command_counts c WHERE c.node = n.id)"
          " FROM nodes n ORDER BY n.slot", 0, NULL);
    if (!res)
        return NULL;
    /* the sessions a drain could not move, by node */
    PGresult *um = exact ? pg_query(f->db, "SELECT node, id, move_error FROM sessions WHERE state = 'active'"
                                           " AND move_error IS NOT NULL ORDER BY node, id", 0, NULL)
                         : PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    if (!um) {
        PQclear(res);
        return NULL;
    }
    json_t *arr = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        json_t *unmoved = json_array();
        for (int j = 0; j < PQntuples(um); j++)
            if (strcmp(PQgetvalue(um, j, 0), PQgetvalue(res, i, 0)) == 0)
                json_array_append_new(unmoved, json_pack("{s:s,s:s}", "session_id", PQgetvalue(um, j, 1), "reason",
                                                         PQgetvalue(um, j, 2)));
        char slot[8];
        snprintf(slot, sizeof slot, "%02x", (unsigned)atoi(PQgetvalue(res, i, 1)));
        json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:s,s:f,s:f,s:i,s:i,s:I,s:I,s:o}",
            "id", PQgetvalue(res, i, 0), "slot", slot, "url", PQgetvalue(res, i, 2),
            "state", PQgetvalue(res, i, 3), "last_heartbeat", atof(PQgetvalue(res, i, 4)),
            "heartbeat_age_s", atof(PQgetvalue(res, i, 5)), "capacity", atoi(PQgetvalue(res, i, 6)),
            "load", atoi(PQgetvalue(res, i, 7)), "sessions", (json_int_t)atoll(PQgetvalue(res, i, 8)),
            "commands_running", (json_int_t)atoll(PQgetvalue(res, i, 9)), "unmoved", unmoved));
    }
    PQclear(um);
    PQclear(res);
    fleet_view_keep(f, arr);
    return arr;
}

json_t *fleet_nodes(fleet *f)
{
    return read_nodes(f, true);
}

int fleet_drain(fleet *f, const char *node_id, json_t **row)
{
    *row = NULL;
    const char *p[] = {node_id};
    /* a drain asked again tries again the sessions an earlier one could not move */
    PGresult *res = pg_query(f->db,
        "WITH n AS (UPDATE nodes SET state = CASE WHEN state = 'active' THEN 'draining' ELSE state END"
        "  WHERE id = $1 RETURNING id, state),"
        " r AS (UPDATE sessions SET move_error = NULL WHERE node = $1 AND move_error IS NOT NULL"
        "  AND EXISTS (SELECT 1 FROM n WHERE n.state = 'draining'))"
        " SELECT id, state FROM n", 1, p);
    if (!res)
        return -1;
    int rc = PQntuples(res) == 1 ? 0 : 1;
    if (rc == 0)
        *row = json_pack("{s:s,s:s}", "id", PQgetvalue(res, 0, 0), "state", PQgetvalue(res, 0, 1));
    PQclear(res);
    return rc;
}
