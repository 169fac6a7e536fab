/* HAProxy's configuration for a fleet, printed from the nodes table (docs/fleet.md "The
 * router"): one backend per node slot, the create and any backends, the map of moved
 * sessions, path normalisation before any rule reads the path, and every answer HAProxy
 * makes itself in airlockd's JSON shape. */
#ifndef AIRLOCKD_ROUTER_HAPROXY_CONFIG_H
#define AIRLOCKD_ROUTER_HAPROXY_CONFIG_H

#include "router/view.h"

#include <stdio.h>

typedef struct {
    const char *bind;         /* HOST:PORT clients connect to */
    const char *stats_socket; /* the runtime API's socket (level admin: the follower's) */
    const char *map;          /* the map file of moved sessions */
} router_config_opts;

/* Writes the configuration for nodes (n ≥ 1) to out; 0, or -1 when out failed. */
int router_print_config(FILE *out, const router_config_opts *o, const router_node *nodes, size_t n);

#endif
