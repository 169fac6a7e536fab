/* Self-service keys in a fleet's PostgreSQL (the api_keys table of store/pg_schema.c), with a
 * node-side cache of successful lookups for at most cache_s seconds: a key revoked
 * on any node stops working on every node when its notification arrives (NOTIFY
 * airlock_keys: milliseconds), and within that time if a node's listener is disconnected.
 * Thread-safe. The functions mirror store/keystore.h, which calls them for a key store opened
 * with keystore_open_pg. */
#ifndef AIRLOCKD_KEYSTORE_PG_H
#define AIRLOCKD_KEYSTORE_PG_H

#include "store/keystore.h"
#include "store/pg.h"

typedef struct keystore_pg keystore_pg;

/* cache_s: how long a successful lookup is trusted without a revocation notice. */
keystore_pg *keystore_pg_new(pg_pool *db, double cache_s);
void keystore_pg_free(keystore_pg *k);

/* hash: the key's SHA-256 in hex (the key itself never reaches this file). */
bool keystore_pg_auth(keystore_pg *k, const char *hash, const char *key_id, char **tenant);
int keystore_pg_create(keystore_pg *k, const char *tenant, const char *name, json_t **record, int *active);
json_t *keystore_pg_list(keystore_pg *k, const char *tenant);
int keystore_pg_revoke(keystore_pg *k, const char *tenant, const char *key_id, bool keep_last, json_t **record);

#endif
