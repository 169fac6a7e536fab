/* A drain's moves between nodes (drain/move.c, docs/fleet.md "Drain"): the draining node's
 * step (from its heartbeat) and the two halves of a workspace's transfer. */
#ifndef AIRLOCKD_DRAIN_MOVE_H
#define AIRLOCKD_DRAIN_MOVE_H

#include "app.h"

/* A fleet_drain_fn (ctx is the app): moves what it can of the node's idle sessions. */
void move_drain_step(void *ctx);
/* The workspace as a tar archive in an unnamed file, read from its start; -1 on failure. */
int move_pack(const app *a, const char *workspace);
/* Fetches session id's archive from the draining node at source_url and unpacks it into
 * workspace: 0, or -1. */
int move_fetch(const app *a, const char *source_url, const char *id, const char *workspace);

#endif
