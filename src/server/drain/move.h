/* A drain's moves from the draining node (drain/move.c, docs/fleet.md "Drain"): a thread of
 * their own, one move at a time, each within SANDBOX_FLEET_MOVE_TIMEOUT_S. */
#ifndef AIRLOCKD_DRAIN_MOVE_H
#define AIRLOCKD_DRAIN_MOVE_H

#include "app.h"

typedef struct mover mover;

/* Starts the mover's thread (it sleeps until woken); NULL when it cannot start. */
mover *mover_start(app *a);
/* A fleet_drain_fn (ctx: the mover): the heartbeat says the node is draining. Never blocks. */
void mover_wake(void *ctx);
/* Gives up the move under way (undone: the session stays here) and ends the thread. */
void mover_stop(mover *m);

#endif
