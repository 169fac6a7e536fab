/* The fleet handle's fields, shared by fleet/nodes.c, registry.c and counters.c. */
#ifndef AIRLOCKD_FLEET_INTERNAL_H
#define AIRLOCKD_FLEET_INTERNAL_H

#include "fleet/fleet.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct {
    char *tenant;
    long long id; /* its row in the commands table */
} fleet_command;

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
    pthread_mutex_t cmd_mu;  /* the two lists below */
    fleet_command *cmds;     /* this node's running commands counted in the database */
    size_t ncmds, cmdcap;
    long long *ended;        /* rows of ended commands not deleted yet */
    size_t nended, endcap;
    double touch_since;      /* wall clock: last uses before this reached the database */
    double touch_at;         /* wall clock: when the staged list below was taken */
    char *touch_ids, *touch_times; /* last uses for the next heartbeat (Postgres arrays), or NULL */
    pthread_mutex_t view_mu; /* guards view and view_at (fleet/view.c) */
    json_t *view;            /* the nodes as last read from the database, or NULL */
    double view_at;
};

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
