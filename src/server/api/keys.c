/* /v1/keys (contract 1.13): a tenant's self-service keys; key creation shared with admin.c. */
#include "api/handlers.h"

#include "text/pystr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEYSTORE_OFF "Self-service keys are not enabled on this server (SANDBOX_KEYSTORE)."
#define BAD_TENANT "Tenant names are 1-63 chars of lowercase letters, digits, '-' or '_'."

/* ^[a-z0-9][a-z0-9_-]{0,62}$ */
static bool tenant_name_ok(const char *t, size_t n)
{
    if (n < 1 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && (i == 0 || (c != '_' && c != '-')))
            return false;
    }
    return true;
}

/* name.strip()[:100] or "unnamed"; malloc'd. */
static char *key_name(const char *name, size_t len)
{
    if (!name)
        return strdup("unnamed");
    size_t s, e;
    py_strip(name, len, &s, &e);
    if (s == e)
        return strdup("unnamed");
    /* the 100-character cap was already enforced by validation */
    return strndup(name + s, e - s);
}

bool key_body(http_request *r, json_t *body, bool admin, const char **tenant, size_t *tenant_len,
              const char **name, size_t *name_len)
{
    json_t *errs = json_array();
    if (body_is_object(errs, body)) {
        if (admin)
            v_string(errs, body, "tenant", true, 0, tenant, tenant_len);
        v_string(errs, body, "name", false, 100, name, name_len);
    }
    return !send_if_invalid(r, errs);
}

void create_key(app *a, http_request *r, const char *tenant, size_t tenant_len, const char *name,
                size_t name_len)
{
    if (!tenant_name_ok(tenant, tenant_len)) {
        http_send_detail(r, 400, BAD_TENANT);
        return;
    }
    char *t = strndup(tenant, tenant_len), *stored = key_name(name, name_len);
    if (!t || !stored || tenants_intern(a->tenants, t) < 0) {
        free(t);
        free(stored);
        http_send_500(r);
        return;
    }
    json_t *rec = NULL;
    int active = 0;
    int rc = keystore_create(a->keys, t, stored, &rec, &active);
    if (rc == KS_OK) {
        http_send_json(r, 201, rec);
    } else if (rc == KS_LIMIT) {
        char *msg = NULL;
        if (asprintf(&msg, "Tenant '%s' already has %d active keys (max %d). Revoke one first.", t, active,
                     KEYSTORE_MAX_ACTIVE) >= 0)
            http_send_detail(r, 409, msg);
        else
            http_send_500(r);
        free(msg);
    } else if (rc == KS_STORAGE) {
        send_not_saved(r, 507, "The new key");
    } else {
        http_send_500(r);
    }
    free(t);
    free(stored);
}

void api_keys_create(app *a, http_request *r, const api_call *c)
{
    const char *tname = tenants_get(a->tenants, c->tenant)->name;
    const char *name = NULL, *unused = NULL;
    size_t name_len = 0, unused_len = 0;
    if (!key_body(r, c->body, false, &unused, &unused_len, &name, &name_len))
        return;
    if (!a->keys) {
        http_send_detail(r, 501, KEYSTORE_OFF);
        return;
    }
    create_key(a, r, tname, strlen(tname), name, name_len);
}

void api_keys_list(app *a, http_request *r, const api_call *c)
{
    const char *tname = tenants_get(a->tenants, c->tenant)->name;
    if (!a->keys) {
        http_send_detail(r, 501, KEYSTORE_OFF);
        return;
    }
    json_t *keys = keystore_list(a->keys, tname);
    if (keys)
        http_send_json(r, 200, json_pack("{s:s,s:o}", "tenant_id", tname, "keys", keys));
    else
        http_send_500(r);
}

void api_keys_revoke(app *a, http_request *r, const api_call *c)
{
    const char *tname = tenants_get(a->tenants, c->tenant)->name;
    if (!a->keys) {
        http_send_detail(r, 501, KEYSTORE_OFF);
        return;
    }
    json_t *rec = NULL;
    int rc = keystore_revoke(a->keys, tname, c->param, true, &rec);
    if (rc == KS_OK)
        http_send_json(r, 200, rec);
    else if (rc == KS_NOT_FOUND)
        send_detail_with(r, 404, "No key '%s' for this tenant.", c->param);
    else if (rc == KS_LAST_KEY)
        http_send_detail(r, 409, "This is the tenant's last active key; create a new one before revoking it.");
    else if (rc == KS_STORAGE)
        send_not_saved(r, 507, "The revocation");
    else
        http_send_500(r);
}
