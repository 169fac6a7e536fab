/* A node's steps into and out of its fleet (--database), beside run/server.h's: join (the
 * schema migrated, the node registered, the sessions' and limits' shared store, the keys in
 * the database), settle (the sessions lost meanwhile dropped, before listening), start (the
 * advertised address, the heartbeat), stop and close. Each does nothing on a server without
 * a database. */
#ifndef AIRLOCKD_RUN_FLEET_H
#define AIRLOCKD_RUN_FLEET_H

#include "run/server.h"

/* Before the sessions are opened: -1 with the reason in s->err. */
int server_join_fleet(server *s);
/* Once the sessions are restored, before listening: -1 with the reason in s->err. */
int server_settle_fleet(server *s);
/* Once listening (the port is known): -1 with the reason in s->err. */
int server_start_fleet(server *s);
/* No heartbeat reads the sessions any more. */
void server_stop_fleet(server *s);
/* After the sessions are freed (they release their rows). */
void server_close_fleet(server *s);

#endif
