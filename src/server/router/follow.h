/* `airlockd router follow`: keeps a running HAProxy's map of moved sessions and its servers
 * (address, agent port, weight while a node takes no new session) as the database says, told
 * by the notices on channel airlock_router (sent by the statements that change them:
 * store/pg_schema.c) and re-reading all of it every few seconds and after a reconnection. */
#ifndef AIRLOCKD_ROUTER_FOLLOW_H
#define AIRLOCKD_ROUTER_FOLLOW_H

#include "store/pg.h"

typedef struct {
    const char *stats_socket; /* HAProxy's runtime API (level admin) */
    const char *map;          /* the map file HAProxy's configuration names (kept current for a restart) */
    int reread_s;             /* seconds between two whole re-reads */
} router_follow_opts;

/* Runs until SIGTERM or SIGINT; the exit status. */
int router_follow(pg_pool *db, const router_follow_opts *o);

/* One whole pass (the servers and the moved sessions made what the database says) and back:
 * 0 when HAProxy and the map file are current, else 1. For a caller that must know the
 * router is current now (fleet.sh drain, before it returns). */
int router_sync_once(pg_pool *db, const router_follow_opts *o);

#endif
