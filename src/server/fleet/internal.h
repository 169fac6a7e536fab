/* The fleet handle's fields, shared by fleet/nodes.c, registry.c and counters.c. */
#ifndef AIRLOCKD_FLEET_INTERNAL_H
#define AIRLOCKD_FLEET_INTERNAL_H

#include "fleet/fleet.h"
#include "store/pg_listen.h"

#include <pthread.h>
#include <stdatomic.h>

struct fleet {
    pg_pool *db;
    char *id, *url;
    int slot;
    double lost_after;
    atomic_bool accepting;   /* active, as of the last heartbeat that reached the database */
    atomic_int live_nodes;   /* nodes not dead, as of the last heartbeat that reached it */
    fleet_load_fn load;
    fleet_lost_fn lost;
    void *load_ctx;
    int capacity;
    fleet_count_fn count;
    void *count_ctx;
    fleet_drain_fn drain_step;
    void *drain_ctx;
    char *agent_host;
    int agent_port;
    struct fleet_agent *agent; /* HAProxy's agent-check listener, or NULL */
    pthread_t beater;
    bool beating, stopping, locks_ready;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    pthread_mutex_t ship_mu; /* one outbox shipment at a time (heartbeat and request threads) */
    /* the group commit of audit rows and command ends (fleet/audit.c): each request that
     * queued something takes a number; a shipment covers every number taken before it began */
    pthread_mutex_t gc_mu;
    pthread_cond_t gc_cond;
    unsigned long long gc_taken, gc_shipped, gc_failed; /* numbers: last taken, last shipped, last failed */
    bool gc_busy;            /* a shipment is under way (its requests wait for it) */
    struct fleet_exec_start *gc_starts; /* command starts waiting for the next shipment, oldest first */
    struct fleet_exec_start **gc_starts_end;
    audit_store *outbox;     /* the node's audit outbox (fleet_set_outbox), or NULL */
    pthread_mutex_t cmd_mu;  /* ended, below */
    json_t *ended;           /* the tenant of each ended command not yet taken off its count */
    double touch_since;      /* wall clock: last uses before this reached the database */
    double touch_at;         /* wall clock: when the staged list below was taken */
    char *touch_ids, *touch_times; /* last uses for the next heartbeat (Postgres arrays), or NULL */
    pthread_mutex_t view_mu; /* guards view and view_at (fleet/view.c) */
    json_t *view;            /* the nodes as last read from the database, or NULL */
    double view_at;
    struct pg_listener *slots_listener; /* NOTIFY airlock_slots: other nodes asking for exec slots */
    fleet_slots_fn slots_fn;
    void *slots_ctx;
};

/* The audit rows $1 (a JSON array of outbox rows) of node $2 and, in the same transaction, the
 * ends of its commands $3 (a JSON array of their tenants: a count each, migration 12). The
 * ends alone are this with no audit row ("[]"). */
#define FLEET_AUDIT_WITH_ENDS                                                                              \
    "WITH ended AS (UPDATE command_counts c SET running = greatest(c.running - e.n, 0)"                    \
    " FROM (SELECT value AS tenant, count(*)::integer AS n FROM json_array_elements_text($3::json)"         \
    " GROUP BY value) e WHERE c.tenant = e.tenant AND c.node = $2)"                                         \
    " INSERT INTO audit SELECT r.tenant_id, $2, r.sk, r.ts_us, r.session_id, r.actor, r.kind, r.command,"   \
    " r.truncated, r.exit_code, r.duration_s, r.timed_out, r.oom_killed, r.detail"                          \
    " FROM json_populate_recordset(NULL::audit, $1::json) r ON CONFLICT DO NOTHING"

/* A command's start waiting in a group commit (fleet/audit.c): admitted 1, 0 refused, 2
 * refused while other nodes hold slots (asked for their idle ones), -1 the database did not
 * answer. */
typedef struct fleet_exec_start {
    const char *tenant;
    int max;
    int admitted;
    struct fleet_exec_start *next;
} fleet_exec_start;

/* fleet/audit.c: the group commit: everything queued before it began (audit rows, command
 * ends) and start (NULL: none) reach the database in one transaction, done before it returns;
 * 0, or -1 (the database did not take them: the rows wait in the outbox, the ends in their
 * queue, the start is -1). */
int fleet_group_commit(fleet *f, audit_store *store, fleet_exec_start *start);

/* fleet/counters.c: takes ended (a JSON array of tenants) off the counts now, in one
 * transaction (ship_mu held); 0 or -1. */
int fleet_commands_take_off(fleet *f, const char *ended);

/* fleet/registry.c: runs a statement whose rows are session ids (column 0): a JSON array of
 * them, NULL when it failed. */
json_t *fleet_session_ids(fleet *f, const char *sql, int nparams, const char *const *params);

/* fleet/view.c: keeps a copy of nodes (a successful read of the nodes table) as the view. */
void fleet_view_keep(fleet *f, const json_t *nodes);
void fleet_view_free(fleet *f);



/* One of the node's outboxes in audit.db (fleet/audit.c): read(store, limit, &rows) gives the
 * rows waiting, oldest first, each with its "sk"; done(store, sk) says they reached the
 * database. */
typedef int (*fleet_outbox_read)(audit_store *store, int limit, json_t **rows);
typedef int (*fleet_outbox_done)(audit_store *store, const char *sk);
/* Ships what waits in the outbox with insert ($1 the rows as a JSON array, $2 this node's id;
 * ON CONFLICT DO NOTHING, so a repeated shipment writes nothing twice): 0, or -1 (it stays). */
int fleet_outbox_ship(fleet *f, audit_store *store, fleet_outbox_read read, fleet_outbox_done done,
                      const char *insert);

#endif
