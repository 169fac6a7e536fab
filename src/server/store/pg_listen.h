/* A listener for PostgreSQL notifications (LISTEN/NOTIFY) on one channel, called back with each
 * notification's payload, and with NULL whenever it may have missed some (it was
 * disconnected: the caller treats everything as changed). The listeners of one pool share a
 * thread and one connection of their own (a fleet node's key revocations and exec slot
 * requests: one connection, not two); it reconnects every second while the database is
 * away. */
#ifndef AIRLOCKD_PG_LISTEN_H
#define AIRLOCKD_PG_LISTEN_H

#include "store/pg.h"

typedef struct pg_listener pg_listener;

/* fn(ctx, payload) runs on the pool's listening thread, one call at a time; payload NULL:
 * notifications may be lost. */
typedef void (*pg_notify_fn)(void *ctx, const char *payload);

/* channel: a plain SQL identifier (letters, digits, _). NULL when the thread cannot start, or
 * the pool has 8 listeners already. */
pg_listener *pg_listen_start(pg_pool *p, const char *channel, pg_notify_fn fn, void *ctx);
void pg_listen_stop(pg_listener *l);

#endif
