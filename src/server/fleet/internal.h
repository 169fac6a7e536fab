/* The fleet handle's fields, shared by fleet/nodes.c, registry.c and counters.c. */
#ifndef AIRLOCKD_FLEET_INTERNAL_H
#define AIRLOCKD_FLEET_INTERNAL_H

#include "fleet/fleet.h"

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
};


/* The number a statement counts for its one parameter ($1), or -1 when the database cannot
 * be read. */
long fleet_count(fleet *f, const char *sql, const char *tenant);

#endif
