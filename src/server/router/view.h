/* What the router reads of the fleet's database: the nodes HAProxy routes to and the
 * sessions a drain moved (airlock_moved_sessions(), store/pg_schema.c). */
#ifndef AIRLOCKD_ROUTER_VIEW_H
#define AIRLOCKD_ROUTER_VIEW_H

#include "domain/session_id.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

/* HAProxy's backend name of a slot: "slot_" + two hex digits */
#define ROUTER_BACKEND_LEN 8

typedef struct {
    char id[64];        /* the node's id (HAProxy's server name) */
    int slot;
    char addr[128];     /* host:port its clients' requests go to */
    int agent_port;     /* 0: no agent-check */
    char state[16];     /* active, draining, drained, dead */
} router_node;

typedef struct {
    char id[SESSION_ID_LEN + 1];
    char backend[ROUTER_BACKEND_LEN];
} router_move;

/* The nodes that are not dead, by slot; 0, or -1 with a message in err (a node whose id or
 * URL HAProxy could not take is named there). */
int router_read_nodes(PGconn *c, router_node **out, size_t *n, char *err, size_t errlen);

/* Every live moved session with its new node's backend, sorted by id; 0 or -1. */
int router_read_moves(PGconn *c, router_move **out, size_t *n, char *err, size_t errlen);

/* The map file HAProxy reads at start ("id backend" lines), replaced whole (rename). */
int router_write_map(const char *path, const router_move *m, size_t n, char *err, size_t errlen);

#endif
