/* Authentication: static keys, self-service keys and the admin key, in constant time. */
#include "domain/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Printable ASCII only; anything else is refused outright, like the reference. */
static bool printable_ascii(const char *key)
{
    for (const char *p = key; *p; p++)
        if ((unsigned char)*p > 0x7E || (unsigned char)*p < 0x20)
            return false;
    return true;
}

/* Tenant index of a static key, or -1. Every configured key is compared in full. */
static long static_key_tenant(const config *c, const char *key)
{
    size_t n = strlen(key);
    long found = -1;
    for (size_t i = 0; i < c->nkeys; i++) {
        const key_cfg *k = &c->keys[i];
        /* constant time for a given length: every byte is compared, no early exit */
        unsigned diff = (unsigned)(k->len ^ n);
        for (size_t j = 0; j < k->len; j++)
            diff |= (unsigned char)k->key[j] ^ (unsigned char)(j < n ? key[j] : 0);
        long hit = (long)k->tenant;
        found = diff == 0 ? hit : found;
    }
    return found;
}

bool auth_tenant(const config *c, tenants *t, keystore *ks, const char *key, auth_caller *who)
{
    if (!key || !printable_ascii(key))
        return false;
    long st = static_key_tenant(c, key);
    if (st >= 0) {
        who->tenant = (size_t)st;
        snprintf(who->actor, sizeof who->actor, "static key");
        return true;
    }
    if (!ks)
        return false;
    char *tenant = NULL, id[KEY_ID_LEN + 1];
    if (!keystore_auth(ks, key, &tenant, id))
        return false;
    long idx = tenants_intern(t, tenant);
    free(tenant);
    if (idx < 0)
        return false;
    who->tenant = (size_t)idx;
    snprintf(who->actor, sizeof who->actor, "key %s", id);
    return true;
}

auth_admin_result auth_admin(const config *c, const keystore *ks, const char *key)
{
    if (!c->admin_key || !ks)
        return AUTH_ADMIN_OFF;
    if (!key)
        return AUTH_ADMIN_DENIED;
    size_t n = strlen(key);
    unsigned diff = (unsigned)(n ^ c->admin_key_len);
    for (size_t j = 0; j < c->admin_key_len; j++)
        diff |= (unsigned char)c->admin_key[j] ^ (unsigned char)(j < n ? key[j] : 0);
    return diff == 0 ? AUTH_ADMIN_OK : AUTH_ADMIN_DENIED;
}
