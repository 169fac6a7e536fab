/* Who is calling: the tenant behind an X-API-Key (the configuration's static keys first, then
 * the key store's self-service keys) with the actor the audit log records, and the admin
 * key. Every key comparison takes the same time however much of a key matched. */
#ifndef AIRLOCKD_AUTH_H
#define AIRLOCKD_AUTH_H

#include "config/config.h"
#include "domain/tenants.h"
#include "store/keystore.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    size_t tenant;  /* index into the configuration's tenant table */
    char actor[32]; /* "static key" or "key <key_id>" */
} auth_caller;

/* true with *who filled when key is a static key or an active self-service key (ks may be
 * NULL: no key store; a key store tenant seen for the first time is added to t). Keys with
 * bytes outside printable ASCII are refused outright. */
bool auth_tenant(const config *c, tenants *t, keystore *ks, const char *key, auth_caller *who);

typedef enum {
    AUTH_ADMIN_OK,
    AUTH_ADMIN_OFF,    /* no SANDBOX_ADMIN_KEY or no key store: the admin API does not exist */
    AUTH_ADMIN_DENIED, /* key missing or wrong */
} auth_admin_result;

auth_admin_result auth_admin(const config *c, const keystore *ks, const char *key);

#endif
