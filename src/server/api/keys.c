/* Authentication with static and self-service keys, GET /v1/audit (contract 1.12),
 * /v1/keys (1.13) and /v1/admin/keys (1.14). */
#include "app.h"
#include "text/exec_format.h"
#include "api/validate.h"
#include "text/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The caller of the request this thread handles; libmicrohttpd runs each request in one
 * thread from authentication to the response. */
static _Thread_local char actor_buf[32] = "static key";

const char *app_actor(void)
{
    return actor_buf;
}

long app_auth(app *a, const char *key)
{
    long t = config_auth(a->cfg, key);
    if (t >= 0) {
        snprintf(actor_buf, sizeof actor_buf, "static key");
        return t;
    }
    if (!a->keys || !key)
        return -1;
    for (const char *p = key; *p; p++)
        if ((unsigned char)*p > 0x7E || (unsigned char)*p < 0x20)
            return -1; /* non-ASCII keys are refused outright, like static ones */
    char *tenant = NULL, id[KEY_ID_LEN + 1];
    if (!keystore_auth(a->keys, key, &tenant, id))
        return -1;
    long idx = config_tenant_intern(a->cfg, tenant);
    free(tenant);
    if (idx >= 0)
        snprintf(actor_buf, sizeof actor_buf, "key %s", id);
    return idx;
}

/* detail text built from a format with one user-supplied string (made valid UTF-8). */
static void send_detail_with(http_request *r, unsigned status, const char *fmt, const char *arg)
{
    size_t n;
    char *clean = utf8_replace(arg, strlen(arg), &n), *msg = NULL;
    if (clean && asprintf(&msg, fmt, clean) >= 0)
        http_send_detail(r, status, msg);
    else
        http_send_500(r);
    free(msg);
    free(clean);
}

/* ---- audit ------------------------------------------------------------------------- */

void handle_audit(app *a, http_request *r, size_t tenant)
{
    long long limit = 100;
    size_t before_len = 0;
    if (!limit_query(r, &limit))
        return;
    if (!a->audit) {
        http_send_detail(r, 501, "The audit log is not enabled on this server (SANDBOX_AUDIT).");
        return;
    }
    limit = limit < 1 ? 1 : limit > 500 ? 500 : limit;
    char *before = http_query(r, "before", &before_len);
    json_t *entries = NULL;
    char *next = NULL;
    const char *name = a->cfg->tenants[tenant].name;
    int rc = audit_query(a->audit, name, before, before_len, (int)limit, &entries, &next);
    free(before);
    if (rc != 0) {
        http_send_500(r);
        return;
    }
    http_send_json(r, 200, json_pack("{s:s,s:o,s:o,s:i}", "tenant_id", name, "entries", entries, "next",
                                     next ? json_string(next) : json_null(), "retention_days",
                                     audit_retention_days(a->audit)));
    free(next);
}

/* ---- keys -------------------------------------------------------------------------- */

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

/* Validates {"name": str ≤ 100} (+ "tenant" for admins); false when a 422 was sent. */
static bool key_body(http_request *r, json_t *body, bool admin, const char **tenant, size_t *tenant_len,
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

static void create_key(app *a, http_request *r, const char *tenant, size_t tenant_len, const char *name,
                       size_t name_len)
{
    if (!tenant_name_ok(tenant, tenant_len)) {
        http_send_detail(r, 400, BAD_TENANT);
        return;
    }
    char *t = strndup(tenant, tenant_len), *stored = key_name(name, name_len);
    if (!t || !stored || config_tenant_intern(a->cfg, t) < 0) {
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
    } else {
        http_send_500(r);
    }
    free(t);
    free(stored);
}

void handle_keys(app *a, http_request *r, size_t tenant, const char *method, const char *key_id, json_t *body)
{
    const char *tname = a->cfg->tenants[tenant].name;
    if (strcmp(method, "POST") == 0) {
        const char *name = NULL, *unused = NULL;
        size_t name_len = 0, unused_len = 0;
        if (!key_body(r, body, false, &unused, &unused_len, &name, &name_len))
            return;
        if (!a->keys) {
            http_send_detail(r, 501, KEYSTORE_OFF);
            return;
        }
        create_key(a, r, tname, strlen(tname), name, name_len);
        return;
    }
    if (!a->keys) {
        http_send_detail(r, 501, KEYSTORE_OFF);
        return;
    }
    if (!key_id) {
        json_t *keys = keystore_list(a->keys, tname);
        if (keys)
            http_send_json(r, 200, json_pack("{s:s,s:o}", "tenant_id", tname, "keys", keys));
        else
            http_send_500(r);
        return;
    }
    json_t *rec = NULL;
    int rc = keystore_revoke(a->keys, tname, key_id, true, &rec);
    if (rc == KS_OK)
        http_send_json(r, 200, rec);
    else if (rc == KS_NOT_FOUND)
        send_detail_with(r, 404, "No key '%s' for this tenant.", key_id);
    else if (rc == KS_LAST_KEY)
        http_send_detail(r, 409, "This is the tenant's last active key; create a new one before revoking it.");
    else
        http_send_500(r);
}

void handle_admin_keys(app *a, http_request *r, const char *method, const char *key_id, json_t *body)
{
    if (!a->cfg->admin_key || !a->keys) {
        http_send_detail(r, 404, "The admin API is not enabled on this server.");
        return;
    }
    if (!config_is_admin(a->cfg, http_header(r, "X-API-Key"))) {
        http_send_detail(r, 401, "Invalid or missing admin key");
        return;
    }
    if (strcmp(method, "POST") == 0) {
        const char *tenant = NULL, *name = NULL;
        size_t tenant_len = 0, name_len = 0;
        if (key_body(r, body, true, &tenant, &tenant_len, &name, &name_len))
            create_key(a, r, tenant, tenant_len, name, name_len);
        return;
    }
    if (!key_id) {
        size_t len = 0;
        char *tenant = http_query(r, "tenant", &len);
        json_t *keys = keystore_list(a->keys, tenant);
        free(tenant);
        if (keys)
            http_send_json(r, 200, json_pack("{s:o}", "keys", keys));
        else
            http_send_500(r);
        return;
    }
    json_t *rec = NULL;
    int rc = keystore_revoke(a->keys, NULL, key_id, false, &rec);
    if (rc == KS_OK)
        http_send_json(r, 200, rec);
    else if (rc == KS_NOT_FOUND)
        send_detail_with(r, 404, "No key '%s'.", key_id);
    else
        http_send_500(r);
}
