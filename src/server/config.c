#include "config.h"

#include "egress.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_SESSIONS 10
#define DEFAULT_RPM 120
#define DEFAULT_MAX_EXEC 4

static int failf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static char *trim_dup(const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) {
        s++;
        n--;
    }
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        n--;
    return strndup(s, n);
}

static long find_tenant(const config *c, const char *name)
{
    for (size_t i = 0; i < c->ntenants; i++)
        if (strcmp(c->tenants[i].name, name) == 0)
            return (long)i;
    return -1;
}

static int add_key(config *c, const char *tenant, const char *key, const char *var, char *err, size_t errlen)
{
    for (size_t i = 0; i < c->nkeys; i++)
        if (strcmp(c->keys[i].key, key) == 0)
            return failf(err, errlen, "%s: the same API key is configured twice (keys must be unique)", var);
    long t = find_tenant(c, tenant);
    if (t < 0) {
        tenant_cfg *nt = realloc(c->tenants, (c->ntenants + 1) * sizeof *nt);
        if (!nt)
            return failf(err, errlen, "out of memory");
        c->tenants = nt;
        memset(&nt[c->ntenants], 0, sizeof *nt);
        nt[c->ntenants].name = strdup(tenant);
        nt[c->ntenants].max_sessions = DEFAULT_MAX_SESSIONS;
        nt[c->ntenants].requests_per_minute = DEFAULT_RPM;
        nt[c->ntenants].max_concurrent_exec = DEFAULT_MAX_EXEC;
        t = (long)c->ntenants++;
    }
    key_cfg *nk = realloc(c->keys, (c->nkeys + 1) * sizeof *nk);
    if (!nk)
        return failf(err, errlen, "out of memory");
    c->keys = nk;
    nk[c->nkeys].key = strdup(key);
    nk[c->nkeys].len = strlen(key);
    nk[c->nkeys].tenant = (size_t)t;
    c->nkeys++;
    return 0;
}

static int parse_keys(config *c, const char *spec, char *err, size_t errlen)
{
    const char *p = spec;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char *entry = trim_dup(p, n);
        if (!entry)
            return failf(err, errlen, "out of memory");
        if (*entry) {
            char *colon = strchr(entry, ':');
            char *tenant = NULL, *key = NULL;
            if (colon) {
                tenant = trim_dup(entry, (size_t)(colon - entry));
                key = trim_dup(colon + 1, strlen(colon + 1));
            }
            int rc = 0;
            if (!tenant || !key || !*tenant || !*key)
                rc = failf(err, errlen, "SANDBOX_API_KEYS: each entry must look like tenant:key");
            else
                rc = add_key(c, tenant, key, "SANDBOX_API_KEYS", err, errlen);
            free(tenant);
            free(key);
            if (rc) {
                free(entry);
                return -1;
            }
        }
        free(entry);
        if (!comma)
            break;
        p = comma + 1;
    }
    return 0;
}

/* A variable or its _FILE twin holding JSON; *out NULL when neither is set. */
static int load_json_var(const char *var, json_t **out, char *err, size_t errlen)
{
    char filevar[128];
    snprintf(filevar, sizeof filevar, "%s_FILE", var);
    const char *text = getenv(var), *file = getenv(filevar);
    json_error_t je;
    *out = NULL;
    if (text && *text) {
        *out = json_loads(text, JSON_DECODE_ANY, &je);
        if (!*out)
            return failf(err, errlen, "%s: invalid JSON: %s", var, je.text);
    } else if (file && *file) {
        *out = json_load_file(file, JSON_DECODE_ANY, &je);
        if (!*out)
            return failf(err, errlen, "%s: cannot load %s: %s", filevar, file, je.text);
    }
    return 0;
}

static int apply_limits(tenant_cfg *t, const json_t *entry, const char *name, char *err, size_t errlen)
{
    const char *k;
    json_t *v;
    if (!json_is_object(entry))
        return failf(err, errlen, "SANDBOX_TENANT_LIMITS: the entry for '%s' must be an object", name);
    json_object_foreach((json_t *)entry, k, v) {
        int *slot = strcmp(k, "max_sessions") == 0          ? &t->max_sessions
                    : strcmp(k, "requests_per_minute") == 0 ? &t->requests_per_minute
                    : strcmp(k, "max_concurrent_exec") == 0 ? &t->max_concurrent_exec
                                                            : NULL;
        if (!slot)
            return failf(err, errlen, "SANDBOX_TENANT_LIMITS: unknown limit '%s' for '%s'", k, name);
        /* jansson keeps booleans apart from integers, so true/false are refused here */
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000000000)
            return failf(err, errlen, "SANDBOX_TENANT_LIMITS: %s for '%s' must be a positive integer", k, name);
        *slot = (int)json_integer_value(v);
    }
    return 0;
}

static int load_limits(config *c, char *err, size_t errlen)
{
    json_t *j;
    if (load_json_var("SANDBOX_TENANT_LIMITS", &j, err, errlen))
        return -1;
    if (!j)
        return 0;
    int rc = 0;
    const char *k;
    json_t *v;
    if (!json_is_object(j)) {
        rc = failf(err, errlen, "SANDBOX_TENANT_LIMITS: must be a JSON object");
        goto out;
    }
    json_object_foreach(j, k, v) {
        tenant_cfg scratch = {0};
        if ((rc = apply_limits(&scratch, v, k, err, errlen)) != 0) /* validate every entry */
            goto out;
    }
    for (size_t i = 0; i < c->ntenants; i++) {
        json_t *star = json_object_get(j, "*"), *own = json_object_get(j, c->tenants[i].name);
        if (star && (rc = apply_limits(&c->tenants[i], star, "*", err, errlen)) != 0)
            goto out;
        if (own && (rc = apply_limits(&c->tenants[i], own, c->tenants[i].name, err, errlen)) != 0)
            goto out;
    }
out:
    json_decref(j);
    return rc;
}

static int load_egress(config *c, char *err, size_t errlen)
{
    json_t *j;
    if (load_json_var("SANDBOX_EGRESS_POLICY", &j, err, errlen))
        return -1;
    int rc = 0;
    const char *k;
    json_t *v;
    if (j && !json_is_object(j)) {
        rc = failf(err, errlen, "SANDBOX_EGRESS_POLICY: must be a JSON object");
        goto out;
    }
    if (j) {
        json_object_foreach(j, k, v) {
            size_t i;
            json_t *item;
            if (!json_is_array(v)) {
                rc = failf(err, errlen, "SANDBOX_EGRESS_POLICY: the entry for '%s' must be a list", k);
                goto out;
            }
            json_array_foreach(v, i, item) {
                if (!json_is_string(item)) {
                    rc = failf(err, errlen, "SANDBOX_EGRESS_POLICY: rules for '%s' must be strings", k);
                    goto out;
                }
            }
        }
    }
    for (size_t i = 0; i < c->ntenants; i++) {
        json_t *rules = j ? json_object_get(j, c->tenants[i].name) : NULL;
        if (!rules && j)
            rules = json_object_get(j, "*");
        c->tenants[i].egress_allowed = rules ? egress_expand(rules) : json_array();
    }
out:
    json_decref(j);
    return rc;
}

static int positive_number(const char *var, double def, double *out, char *err, size_t errlen)
{
    const char *s = getenv(var);
    *out = def;
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    while (*end == ' ')
        end++;
    if (errno || *end || !(d < 1e300) || d <= 0)
        return failf(err, errlen, "%s: must be a positive number, got '%s'", var, s);
    *out = d;
    return 0;
}

static bool var_set(const char *var)
{
    const char *s = getenv(var);
    return s && *s && strcmp(s, "0") != 0;
}

int config_load_env(config *c, char *err, size_t errlen)
{
    const char *keys = getenv("SANDBOX_API_KEYS"), *key = getenv("SANDBOX_API_KEY");
    if (keys && parse_keys(c, keys, err, errlen))
        return -1;
    if (key && *key && add_key(c, "default", key, "SANDBOX_API_KEY", err, errlen))
        return -1;
    if (c->nkeys == 0)
        return failf(err, errlen, "SANDBOX_API_KEYS / SANDBOX_API_KEY: no API key configured; "
                                  "set SANDBOX_API_KEYS=tenant:key[,tenant:key] or SANDBOX_API_KEY");
    /* Features of the hosted server that airlockd does not have: refuse rather than
     * silently run without them. */
    static const char *const unsupported[] = {"SANDBOX_KEYSTORE", "SANDBOX_ADMIN_KEY", "SANDBOX_AUDIT"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (var_set(unsupported[i]))
            return failf(err, errlen, "%s: not supported by airlockd; unset it", unsupported[i]);
    double mb;
    if (positive_number("SANDBOX_SESSION_TTL", 1800, &c->session_ttl, err, errlen) ||
        positive_number("SANDBOX_WORKSPACE_QUOTA_MB", 512, &mb, err, errlen))
        return -1;
    if (mb > 1e9)
        return failf(err, errlen, "SANDBOX_WORKSPACE_QUOTA_MB: too large");
    c->quota_bytes = (long long)(mb * 1048576.0);
    c->require_gvisor = getenv("SANDBOX_REQUIRE_GVISOR") && strcmp(getenv("SANDBOX_REQUIRE_GVISOR"), "1") == 0;
    if (load_limits(c, err, errlen) || load_egress(c, err, errlen))
        return -1;
    return 0;
}

long config_auth(const config *c, const char *key)
{
    if (!key)
        return -1;
    size_t n = strlen(key);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)key[i] > 0x7E || (unsigned char)key[i] < 0x20)
            return -1; /* non-ASCII keys are refused outright, like the reference */
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

void config_free(config *c)
{
    for (size_t i = 0; i < c->ntenants; i++) {
        free(c->tenants[i].name);
        json_decref(c->tenants[i].egress_allowed);
    }
    for (size_t i = 0; i < c->nkeys; i++) {
        memset(c->keys[i].key, 0, c->keys[i].len);
        free(c->keys[i].key);
    }
    free(c->tenants);
    free(c->keys);
    c->tenants = NULL;
    c->keys = NULL;
    c->ntenants = c->nkeys = 0;
}
