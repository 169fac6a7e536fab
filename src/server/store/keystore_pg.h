/* Self-service keys in a fleet's PostgreSQL (the api_keys table of store/pg_schema.c), with a
 * node-side cache of successful lookups for at most KEYSTORE_PG_CACHE_S seconds: a key revoked
 * on any node stops working on every node within that time. Thread-safe. The functions
 * mirror store/keystore.h, which calls them for a key store opened with keystore_open_pg. */
#ifndef AIRLOCKD_KEYSTORE_PG_H
#define AIRLOCKD_KEYSTORE_PG_H

#include "store/keystore.h"
#include "store/pg.h"

#define KEYSTORE_PG_CACHE_S 2.0

typedef struct keystore_pg keystore_pg;

keystore_pg *keystore_pg_new(pg_pool *db);
void keystore_pg_free(keystore_pg *k);

/* hash: the key's SHA-256 in hex (the key itself never reaches this file). */
bool keystore_pg_auth(keystore_pg *k, const char *hash, const char *key_id, char **tenant);
int keystore_pg_create(keystore_pg *k, const char *tenant, const char *name, json_t **record, int *active);
json_t *keystore_pg_list(keystore_pg *k, const char *tenant);
int keystore_pg_revoke(keystore_pg *k, const char *tenant, const char *key_id, bool keep_last, json_t **record);

#endif
