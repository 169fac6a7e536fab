/* Self-service API keys (SANDBOX_KEYSTORE=sqlite:<path>, contract 1.13/1.14):
 * "asb_<key_id>_<secret>", only the SHA-256 of the whole key is stored. Thread-safe. */
#ifndef AIRLOCKD_KEYSTORE_H
#define AIRLOCKD_KEYSTORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "store/key_material.h"

#define KEYSTORE_MAX_ACTIVE 10
#define KEYSTORE_NOTE "Store this key now: it is shown only once and can't be recovered."

typedef struct pg_pool pg_pool;

typedef struct keystore keystore;

keystore *keystore_open(const char *path, char *err, size_t errlen);
/* The same key store on a fleet's database (store/keystore_pg.h); NULL when out of memory. */
keystore *keystore_open_pg(pg_pool *db, double cache_s);
void keystore_close(keystore *ks);

/* Checks an "asb_..." key. true with the tenant name (malloc'd) and key id when it is
 * a stored, active key; the hash comparison is constant-time. */
bool keystore_auth(keystore *ks, const char *key, char **tenant, char key_id[KEY_ID_LEN + 1]);

/* KS_STORAGE: the store could not write the change (disk full, I/O error): nothing changed. */
enum { KS_OK = 0, KS_NOT_FOUND, KS_LIMIT, KS_LAST_KEY, KS_ERROR, KS_STORAGE };

/* Issues a key: KS_OK with *record (public record + "api_key" + "note"); KS_LIMIT with
 * *active = the tenant's active key count. */
int keystore_create(keystore *ks, const char *tenant, const char *name, json_t **record, int *active);

/* The public records of a tenant (or of every tenant when tenant is NULL), oldest first. */
json_t *keystore_list(keystore *ks, const char *tenant);

/* Revokes key_id (of tenant, or of any tenant when tenant is NULL). A revoked key comes
 * back unchanged. With keep_last, refuses (KS_LAST_KEY) to revoke the tenant's last active
 * key. KS_OK with *record. */
int keystore_revoke(keystore *ks, const char *tenant, const char *key_id, bool keep_last, json_t **record);

#endif
