/* This node's place in a fleet (--database): its row in the nodes table (registered at start,
 * a slot that opens the ids of its sessions, a heartbeat every second), the sessions of the
 * whole fleet in PostgreSQL, and the tenants' shared counters. Every function that decides a
 * limit is one call of a database function (store/pg_schema.c), exact across nodes. */
#ifndef AIRLOCKD_FLEET_H
#define AIRLOCKD_FLEET_H

#include "store/audit.h"
#include "store/pg.h"
#include "store/snapshots.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct fleet fleet;

typedef struct {
    const char *node_id;   /* --node-id */
    const char *advertise; /* --advertise: how the router and the other nodes reach it */
    double lost_after;     /* seconds a silent node keeps its sessions (SANDBOX_FLEET_LOST_AFTER) */
    int capacity;          /* sessions it takes at most (0: no cap of its own) */
    const char *agent_host; /* where HAProxy's agent-check reads the load (fleet/agent.c) */
    int agent_port;        /* 0: no agent */
} fleet_opts;

/* What this node reports with each heartbeat (it may call fleet_session_touch). */
typedef int (*fleet_load_fn)(void *ctx);
/* Told, at start and after the node was declared dead, each of its sessions the fleet
 * declared lost meanwhile: the node must drop it (its slot was freed, its id answers 410). */
typedef void (*fleet_lost_fn)(void *ctx, const char *session_id);

/* How many sessions the node holds now (cheap: no database). */
typedef size_t (*fleet_count_fn)(void *ctx);

/* Registers the node (its slot assigned on its first start). NULL with a message in err. */
fleet *fleet_open(pg_pool *db, const fleet_opts *o, char *err, size_t errlen);
/* Drops the sessions declared lost while the node was away (lost(ctx, id) for each; the
 * heartbeat calls it again if the node is declared dead later): before the node serves any
 * request. 0, or -1 when the database cannot be read. */
int fleet_drop_lost(fleet *f, fleet_lost_fn lost, void *ctx);
/* Starts the heartbeat thread; load(ctx) is the number of sessions it holds (ctx is the one
 * given to fleet_drop_lost). */
int fleet_start(fleet *f, fleet_load_fn load);
/* The live session count behind fleet_full and the agent's weight; set before fleet_start. */
void fleet_set_count(fleet *f, fleet_count_fn count, void *ctx);
/* Whether the node holds its capacity of sessions (never without a capacity). */
bool fleet_full(fleet *f);
/* What HAProxy's agent-check reads (one line, with its newline): "ready up P%", P the share
 * of its capacity still free (100 without a capacity), at least 1; 0 while the node takes no
 * new session (not accepting, or full). */
void fleet_agent_reply(fleet *f, char *out, size_t outlen);
/* The advertised URL once the listening port is known; 0 or -1. */
int fleet_set_url(fleet *f, const char *url);
/* Where the other nodes reach this node's node-to-node routes (its internal listener); 0 or -1. */
int fleet_set_internal_url(fleet *f, const char *url);
/* Stops the heartbeat (NULL: nothing); fleet_close then frees. */
void fleet_stop(fleet *f);
void fleet_close(fleet *f);

int fleet_slot(const fleet *f);
const char *fleet_node_id(const fleet *f);
double fleet_lost_after(const fleet *f);
/* The slot a session id names (its first two hex digits), or -1. */
int fleet_slot_of(const char *session_id);
/* Whether the node takes new sessions: it is active and its last heartbeat reached the
 * database. */
bool fleet_accepting(fleet *f);
/* How many nodes were not dead at the last heartbeat that reached the database (≥ 1). */
int fleet_live_nodes(fleet *f);

/* GET /v1/admin/nodes: every node with its state, sessions, commands running, last
 * heartbeat and the sessions a drain could not move (unmoved: [{session_id, reason}]); NULL
 * when the database cannot be read. */
json_t *fleet_nodes(fleet *f);

/* ---- the node's last view of the fleet (fleet/view.c) ---- */

/* The nodes as the last read of fleet_nodes that reached the database gave them (a copy), and
 * when (*as_of, epoch seconds); NULL when the database was never read. */
json_t *fleet_nodes_view(fleet *f, double *as_of);

typedef struct {
    long nodes, active;        /* nodes in the view, and those active */
    long long sessions;        /* active sessions on them */
    long long commands_running;
    double as_of;              /* when the view was read */
    bool stale;                /* the database cannot be reached now, or the view is old */
} fleet_totals;
/* The fleet's totals from the last view (no database read: /healthz); false when there is
 * none yet (then *t is zero and stale). */
bool fleet_view_totals(fleet *f, fleet_totals *t);

/* POST /v1/admin/nodes/{id}/drain: the node takes no new session from now on and its
 * sessions move (it becomes `drained` once it holds none; starting it again makes it
 * active); the sessions an earlier drain could not move are tried again. The node's row after
 * the change in *row ({id, state}); 0, 1 no such node, -1 unreachable. */
int fleet_drain(fleet *f, const char *node_id, json_t **row);

/* ---- sessions (fleet/registry.c) ---- */

/* A new session id of tenant against max: 0 registered, 1 refused with *open_now (the
 * tenant's sessions), -1 the database cannot be reached. */
int fleet_session_reserve(fleet *f, const char *id, const char *tenant, int max, const json_t *egress,
                          long long quota_bytes, int *open_now);
/* The reserved row takes its final id (a spare's), creation time and shape (the session's
 * template and size: {"template", "memory_mb", "cpu_percent", "max_processes"}; NULL: '{}'). */
void fleet_session_ready(fleet *f, const char *reserved_id, const char *id, double created_at, const json_t *shape);
/* The session is gone for good (deleted, expired, its disk failed). */
void fleet_session_release(fleet *f, const char *id);
/* At start: this node's sessions the database lists as active but the node no longer holds
 * (its state was lost, e.g. a wiped state directory) are declared lost, so they free their
 * tenant's slots and answer 410. held(ctx, id) says whether the node holds id. */
void fleet_session_reconcile(fleet *f, bool (*held)(void *ctx, const char *id), void *ctx);
/* Last-use times of this node's sessions (ids[i] at times[i]): those used since the last
 * heartbeat reached the database go with the next one (call it from the load function). */
void fleet_session_touch(fleet *f, size_t n, char (*ids)[17], const double *times);

typedef enum {
    FLEET_WHERE_NONE,      /* no such session anywhere */
    FLEET_WHERE_FORBIDDEN, /* another tenant's */
    FLEET_WHERE_WAIT,      /* on another node that may come back: 503 + Retry-After */
    FLEET_WHERE_LOST,      /* lost with its node */
    FLEET_WHERE_UNKNOWN,   /* the database cannot be reached */
} fleet_where;
/* Where a session that this node does not hold lives; node (its id) filled for WAIT/LOST. */
fleet_where fleet_session_where(fleet *f, const char *id, const char *tenant, char *node, size_t nodelen);
/* The tenant's live sessions on every node, newest first, as the list route shows them
 * (tenant_id, state, expires_at = last use + ttl, or a paused one's pause + paused_ttl); NULL when the database cannot be read. */
json_t *fleet_session_list(fleet *f, const char *tenant, double ttl, double paused_ttl);
/* Session id of this node was paused at paused_at (0: resumed): the list shows its state. */
void fleet_session_paused(fleet *f, const char *id, double paused_at);
/* Every tenant's sessions in the fleet's registry (the admin's listing), newest first, at most
 * limit: [{"id","tenant","node","state","created_at","last_accessed_at", its template and size
 * (session_shape_json), "memory_limit_bytes","disk_quota_bytes"}]; NULL when the database
 * cannot be reached. */
json_t *fleet_session_list_all(fleet *f, int limit);

/* ---- a drain's moves (fleet/moves.c) ---- */

/* Called from the heartbeat while this node is draining; it must not block (drain/move.c's
 * mover wakes its own thread). */
typedef void (*fleet_drain_fn)(void *ctx);
void fleet_set_drain(fleet *f, fleet_drain_fn step, void *ctx);
/* The draining node's sessions a drain may still move (active, not refused by an earlier
 * move of this drain): a JSON array of ids, NULL when the database cannot be read. */
json_t *fleet_move_candidates(fleet *f);
/* The draining node: session sid (its own) is moving to the active node with the most free
 * room, whose id and URL go to node and url; 0, or -1 (no such node, or not its session). */
int fleet_move_begin(fleet *f, const char *sid, char *node, size_t nodelen, char *url, size_t urllen);
/* The move did not finish: sid stays on this node, with why (NULL: none, it is tried again) as
 * the reason the drain reports. 0 done; 1 it had moved after all (the receiving node took it
 * first: it is not this node's any more); -1 the database cannot be reached (unknown). */
int fleet_move_cancel(fleet *f, const char *sid, const char *why);
/* sid (this node's) could not start moving: why is what the drain reports. */
void fleet_move_refused(fleet *f, const char *sid, const char *why);
/* The draining node: whether sid is its own and moving (its disk may be read). */
bool fleet_move_outgoing(fleet *f, const char *sid);
/* The receiving node: sid's row when the database says it is moving to this node
 * ({tenant, egress, quota_mb, shape, created_at, last_used, source: the draining node's URL}), else
 * NULL. */
json_t *fleet_move_incoming(fleet *f, const char *sid);
/* The receiving node owns sid from now on: 0, or -1 (it was not moving here). */
int fleet_move_commit(fleet *f, const char *sid);

/* ---- paused sessions in the shared store (fleet/store.c) ---- */

/* Session id (this node's, paused) has its image in the shared store now: parts names its
 * files, relative to the store ({"workspace": "paused/<id>.img", "bytes": n}, and for one paused
 * with its kernels' memory "memory": {"dir": "paused/<id>.ckpt", "bytes": m, "runsc_version": v}).
 * 0, or -1 (not recorded: the caller keeps it). */
int fleet_store_put(fleet *f, const char *id, const json_t *parts);
/* Takes session id of tenant from the store for this node, in one statement (of nodes racing,
 * one gets it): its row ({egress, quota_mb, created_at, last_used, shape, paused_at, stored:
 * its parts}) when this node took it, else NULL (not in the store, or another node was first).
 * An image this node then fails to take goes back with fleet_store_put. */
json_t *fleet_store_take(fleet *f, const char *id, const char *tenant);
/* Stored sessions paused longer than paused_ttl (SANDBOX_PAUSED_TTL), at most limit, deleted
 * from the registry by this call alone: their ids (their images are the caller's to remove),
 * NULL when the database cannot be reached. */
json_t *fleet_store_expired(fleet *f, double paused_ttl, int limit);
/* A draining node hands its stored session id (NULL: every one) to the active node with the
 * fewest sessions (the router sends their calls there): how many, or -1 (unreachable). */
int fleet_store_hand_over(fleet *f, const char *id);

/* ---- snapshots (fleet/snapshots.c) ---- */

/* Records rec (taken by this node, not yet renamed into place) against its tenant's
 * max_count and max_bytes, in one statement: 0 added, 1 refused (*n snapshots of *used bytes
 * exist), -1 unreachable. */
int fleet_snapshot_add(fleet *f, const snapshot_record *rec, int max_count, long long max_bytes, long *n,
                       long long *used);
/* The tenant's snapshots and their bytes: 0, or -1 unreachable. */
int fleet_snapshot_usage(fleet *f, const char *tenant, long *n, long long *used);
void fleet_snapshot_remove(fleet *f, const char *id);
/* The tenant's snapshots, newest first (free with snapshot_records_free); *ok false when the
 * database cannot be read. */
snapshot_record *fleet_snapshot_list(fleet *f, const char *tenant, size_t *n, bool *ok);
/* At start: the store's snapshots the table does not list yet are added (made before it). */
void fleet_snapshot_backfill(fleet *f, const snapshot_record *v, size_t n);

/* ---- shared counters (fleet/counters.c) ---- */

/* A lease of up to want request tokens of the tenant's fleet-wide bucket, giving back
 * give_back unused ones, in one statement: 0 with *granted, the bucket's tokens left and,
 * when none was granted, the seconds until its next token; -1 unreachable. */
int fleet_lease_tokens(fleet *f, const char *tenant, int per_minute, int want, double give_back, int *granted,
                       double *left, double *wait_s);
/* A concurrent-exec slot of the tenant against max (docs/fleet.md "Exec slots"): 1 leased,
 * 0 refused, 2 refused while other nodes hold slots of the tenant (they were asked for their
 * idle ones), -1 unreachable (in a group commit with the other requests' starts, ends and
 * audit rows: fleet/audit.c). */
int fleet_command_begin(fleet *f, const char *tenant, int max);
/* n of the tenant's slots go back at once (another node asked for them): one statement, with
 * what else waits to ship. */
void fleet_commands_return(fleet *f, const char *tenant, int n);
/* Called with the tenant whose idle slots another node asks for (fn runs on a listener
 * thread), and with NULL when the database forgot this node's slots (it was declared dead and
 * registered again). */
typedef void (*fleet_slots_fn)(void *ctx, const char *tenant);
/* Listens for other nodes' requests for slots (NOTIFY airlock_slots); 0 or -1. */
int fleet_listen_slots(fleet *f, fleet_slots_fn fn, void *ctx);
/* A slot goes back: it is taken off its tenant's count with the next audit shipment (the one
 * the ended command's audit row makes at once; the heartbeat's at the latest). */
void fleet_command_end(fleet *f, const char *tenant);
/* The tenants of the ended commands not yet taken off their counts, as a JSON array, taken
 * from the queue (NULL: none; free it); fleet_commands_unended puts them back when they
 * could not be taken off. */
char *fleet_commands_ended(fleet *f);
void fleet_commands_unended(fleet *f, const char *ended);
/* Whether ended commands wait to be taken off their counts. */
bool fleet_commands_waiting(fleet *f);
/* Takes the ended commands that wait off their counts (the heartbeat). */
void fleet_commands_flush(fleet *f);
/* The tenant's live sessions on every node and the exec slots the other nodes hold (running a
 * command, or idle for up to ~2 s after one: Exec slots in docs/fleet.md), in one statement:
 * 0 or -1. */
int fleet_tenant_usage(fleet *f, const char *tenant, long *sessions, long *elsewhere);

/* ---- the audit log (fleet/audit.c) ---- */

/* The node's audit outbox (store/audit.c), which a command's start ships with it; before the
 * first request. */
void fleet_set_outbox(fleet *f, audit_store *store);
/* Ships what is new in this node's audit outbox to the database (each heartbeat): 0 when all
 * of it is there, -1 when some still waits. */
int fleet_audit_ship(fleet *f, audit_store *store);
/* The same right after a request recorded a row (or queued a command's end), unless the
 * database is known to be down (-1): a group commit with the other requests' rows and ends
 * (fleet/audit.c), done before it returns, so the next request, on any node, reads it. */
int fleet_audit_ship_now(fleet *f, audit_store *store);
/* GET /v1/audit over every node's rows (as audit_query); 0 or -1. */
int fleet_audit_query(fleet *f, const char *tenant, const char *before, int limit, int retention_days,
                      json_t **entries, char **next);
/* The status page: every tenant's newest rows of every node (with "tenant_id" and "node"),
 * newest first, at most limit, in *entries; 0, or -1 when the database cannot be read. */
int fleet_audit_recent(fleet *f, int limit, int retention_days, json_t **entries);

/* ---- the egress log (fleet/egress.c) ---- */

/* Ships what waits in this node's egress outbox to the database (each heartbeat, and before
 * a read): 0, or -1 (it stays in the outbox). */
int fleet_egress_ship(fleet *f, audit_store *store);
/* The last limit events of a session from every node that held it, oldest first; NULL when
 * the database cannot be read. */
json_t *fleet_egress_events(fleet *f, const char *session_id, int limit);
/* The status page: the newest denied attempts of every live session, on any node, newest
 * first, at most limit, each event with its "session_id"; NULL when the database cannot be
 * read. */
json_t *fleet_egress_denials(fleet *f, int limit);

#endif
