/* Joining a fleet: its database, this node's row and heartbeat, the shared store of the
 * sessions, the limits, the keys and the audit log. */
#include "run/fleet.h"

#include "api/routes.h"
#include "drain/move.h"
#include "fleet/wire.h"
#include "log/log.h"
#include "store/pg_schema.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

/* The pool's connections (made when first needed): with the listening connection (key
 * revocations, exec slot requests), a node holds at most this plus one of the database's
 * connections (docs/fleet.md). A plain call needs none: only creates, deletes, execs (those
 * taking a slot, or giving one back with their audit row), listings and the heartbeat take one. */
#define FLEET_DB_CONNECTIONS 4

/* seconds a node-to-node request still running at shutdown gets before it is cut */
#define INTERNAL_STOP_S 10

/* Each heartbeat: the sessions' last uses, the audit outbox and the unspent tokens of
 * leases past their time go to the database; the load is the number of sessions held. */
static int beat(void *ctx)
{
    app *a = ctx;
    limits_return_leases(a->lim, false);
    char(*ids)[17] = NULL;
    double *times = NULL;
    size_t n = registry_times(a->reg, &ids, &times);
    fleet_session_touch(a->fleet, n, ids, times);
    free(ids);
    free(times);
    fleet_audit_ship(a->fleet, a->audit);
    fleet_egress_ship(a->fleet, a->audit);
    return (int)n;
}

/* Each egress event of this node's sessions waits in the outbox until the heartbeat ships it. */
static void egress_event(void *ctx, const char *session_id, const json_t *event)
{
    app *a = ctx;
    audit_egress_record(a->audit, session_id, event);
}

/* A session the fleet declared lost while this node was away goes (its files with it). */
static void lost(void *ctx, const char *session_id)
{
    app *a = ctx;
    if (registry_forget(a->reg, session_id))
        log_session(LV_WARN, session_id, NULL, "session %s was declared lost while this node was away; removed",
                    session_id);
}

/* Another node asks for a tenant's exec slots (NULL: the database forgot this node's). */
static void slots_wanted(void *ctx, const char *tenant)
{
    app *a = ctx;
    if (tenant)
        limits_slots_wanted(a->lim, tenant);
    else
        limits_slots_forgotten(a->lim);
}

static size_t count(void *ctx)
{
    return registry_count(ctx);
}

static bool held(void *ctx, const char *id)
{
    return registry_has(ctx, id);
}

int server_join_fleet(server *s)
{
    const config *c = s->cfg;
    app *a = &s->a;
    if (!c->database_url)
        return 0;
    if (!(a->db = pg_open(c->database_url, FLEET_DB_CONNECTIONS, s->err, sizeof s->err)) ||
        pg_schema_migrate(a->db, s->err, sizeof s->err) != 0)
        return -1;
    char host[256] = "", url[300];
    if (!c->node_id && gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "node");
    snprintf(url, sizeof url, "http://%s:%u", c->listen_host, c->port);
    fleet_opts fo = {.node_id = c->node_id ? c->node_id : host, .advertise = c->advertise ? c->advertise : url,
                     .lost_after = c->fleet_lost_after, .capacity = c->fleet_capacity,
                     .agent_host = c->listen_host, .agent_port = c->fleet_agent_port};
    if (!(a->fleet = fleet_open(a->db, &fo, s->err, sizeof s->err)))
        return -1;
    /* the audit rows' durability is the database's once shipped (api/audit.c): no sync of
     * the outbox per record */
    if (a->audit && audit_defer_sync(a->audit) != 0) {
        snprintf(s->err, sizeof s->err, "fleet: cannot set up the audit outbox");
        return -1;
    }
    fleet_set_outbox(a->fleet, a->audit); /* a command's start ships what waits there with it */
    limits_shared ls;
    fleet_wire(a->fleet, &s->shared, &ls);
    limits_set_shared(a->lim, &ls);
    if (limits_renew_ahead(a->lim) != 0) { /* a busy tenant's requests never wait for a lease */
        snprintf(s->err, sizeof s->err, "fleet: cannot start the request tokens' renewer");
        return -1;
    }
    if (fleet_listen_slots(a->fleet, slots_wanted, a) != 0) {
        snprintf(s->err, sizeof s->err, "fleet: cannot listen for the other nodes' exec slot requests");
        return -1;
    }
    /* the fleet's keys are in its database (a SANDBOX_KEYSTORE file would be this node's alone) */
    if (c->keystore_path)
        log_warn("fleet: SANDBOX_KEYSTORE is ignored: self-service keys live in the database");
    keystore_close(a->keys);
    if (!(a->keys = keystore_open_pg(a->db, c->fleet_key_cache_s))) {
        snprintf(s->err, sizeof s->err, "out of memory");
        return -1;
    }
    return 0;
}

int server_settle_fleet(server *s)
{
    app *a = &s->a;
    if (!a->fleet)
        return 0;
    /* the sessions are restored by now: what the database still gives this node beyond them
     * is lost, and what the fleet declared lost while it was away goes, before any request
     * could reach them */
    fleet_session_reconcile(a->fleet, held, a->reg);
    if (fleet_drop_lost(a->fleet, lost, a) != 0) {
        snprintf(s->err, sizeof s->err, "fleet: cannot read this node's lost sessions from the database");
        return -1;
    }
    if (a->egress && a->audit)
        egress_set_sink(a->egress, egress_event, a);
    /* with a store the nodes share (SANDBOX_SNAPSHOT_DIR), a paused session's image goes there,
     * beside the snapshots (docs/fleet.md "The shared store"); without one it stays on its node */
    const char *snap = s->cfg->snapshot_dir;
    if (!snap)
        return 0;
    if (asprintf(&a->pause.store_dir, "%s/paused", snap) < 0) {
        a->pause.store_dir = NULL;
        snprintf(s->err, sizeof s->err, "out of memory");
        return -1;
    }
    if (mkdir(a->pause.store_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(s->err, sizeof s->err, "fleet: cannot create %s: %s", a->pause.store_dir, strerror(errno));
        return -1;
    }
    a->pause.paused_ttl = s->cfg->paused_ttl;
    a->pause.fleet = a->fleet;
    registry_set_sweep_hook(a->reg, pause_store_sweep, &a->pause);
    if (a->snapshots) /* listed and limited from the database, whichever node answers */
        fleet_wire_snapshots(a->fleet, a->snapshots);
    return 0;
}

/* The node-to-node routes (a drain's moves) on a listener of their own, on the node's private
 * address (SANDBOX_FLEET_INTERNAL_LISTEN), which the router never forwards to: only with the
 * fleet's secret (a node without it neither sends nor takes moves). */
static int start_internal(server *s)
{
    const config *c = s->cfg;
    if (!c->fleet_secret)
        return 0;
    const char *host = c->fleet_internal_host ? c->fleet_internal_host : c->listen_host;
    http_options ho = {.host = host, .port = c->fleet_internal_port, .admit = api_admit_internal,
                       .handler = api_handle_internal, .cls = &s->a, .limits = c->http};
    char err[256];
    if (!(s->internal = http_start(&ho, err, sizeof err))) {
        snprintf(s->err, sizeof s->err, "fleet: the node-to-node listener (SANDBOX_FLEET_INTERNAL_LISTEN): %s", err);
        return -1;
    }
    char url[300];
    snprintf(url, sizeof url, strchr(host, ':') ? "http://[%s]:%u" : "http://%s:%u", host, http_port(s->internal));
    if (fleet_set_internal_url(s->a.fleet, url) != 0) {
        snprintf(s->err, sizeof s->err, "fleet: cannot record the node-to-node listener in the database");
        return -1;
    }
    return 0;
}

/* Stops the node-to-node listener: a move still running gets INTERNAL_STOP_S seconds. */
static void stop_internal(server *s)
{
    if (!s->internal)
        return;
    http_quiesce(s->internal);
    for (int i = 0; i < INTERNAL_STOP_S * 20 && http_in_flight(s->internal) > 0; i++)
        nanosleep(&(struct timespec){0, 50000000L}, NULL);
    if (http_in_flight(s->internal) > 0)
        http_cancel(s->internal);
    for (int i = 0; i < INTERNAL_STOP_S * 20 && http_in_flight(s->internal) > 0; i++)
        nanosleep(&(struct timespec){0, 50000000L}, NULL);
    if (http_stop(s->internal))
        s->internal = NULL;
    else
        log_warn("fleet: a node-to-node request did not end; its listener is left open until exit");
}

int server_start_fleet(server *s)
{
    app *a = &s->a;
    if (!a->fleet)
        return 0;
    char url[300];
    snprintf(url, sizeof url, "http://%s:%u", s->cfg->listen_host, http_port(s->srv));
    fleet_set_count(a->fleet, count, a->reg);
    if (!(s->mover = mover_start(a))) {
        snprintf(s->err, sizeof s->err, "fleet: cannot start the drain's mover");
        return -1;
    }
    fleet_set_drain(a->fleet, mover_wake, s->mover);
    if (start_internal(s) != 0)
        return -1;
    if ((!s->cfg->advertise && fleet_set_url(a->fleet, url) != 0) || fleet_start(a->fleet, beat) != 0) {
        snprintf(s->err, sizeof s->err, "fleet: cannot advertise this node");
        return -1;
    }
    return 0;
}

void server_stop_fleet(server *s)
{
    if (s->a.fleet) { /* what this node leased and did not spend is the other nodes' again */
        limits_stop_renewer(s->a.lim);
        limits_return_leases(s->a.lim, true);
    }
    fleet_stop(s->a.fleet); /* first: the heartbeat wakes the mover */
    if (s->a.fleet && pg_reachable(s->a.db)) { /* what the requests queued and did not ship goes now */
        fleet_audit_ship(s->a.fleet, s->a.audit);
        fleet_egress_ship(s->a.fleet, s->a.audit);
    }
    mover_stop(s->mover);   /* a move under way is undone: its session stays here */
    s->mover = NULL;
    stop_internal(s);
}

void server_close_fleet(server *s)
{
    s->a.pause.fleet = NULL;
    free(s->a.pause.store_dir);
    s->a.pause.store_dir = NULL;
    fleet_close(s->a.fleet);
    s->a.fleet = NULL;
    pg_close(s->a.db);
    s->a.db = NULL;
}
