/* The tenants' sections of the settings: the API keys (SANDBOX_API_KEYS, SANDBOX_API_KEY),
 * the stores (SANDBOX_KEYSTORE, SANDBOX_AUDIT, SANDBOX_ADMIN_KEY), the tenants' limits and
 * egress rules (SANDBOX_TENANT_LIMITS, SANDBOX_EGRESS_POLICY, or their _FILE twins), and the
 * settings of a tenant first seen at runtime. Key values never appear in an error. */
#include "config/internal.h"

#include "egress/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_MAX_SESSIONS 10
#define DEFAULT_RPM 120
#define DEFAULT_MAX_EXEC 4
/* Kernels a session may have at once (each holds an agent slot beside its commands'). */
#define DEFAULT_MAX_KERNELS 2
/* The largest session a tenant may ask for unless its limits say otherwise. */
#define DEFAULT_MAX_MEMORY_MB 2048
#define DEFAULT_MAX_CPU_PERCENT 200
#define DEFAULT_MAX_PROCESSES 256
#define DEFAULT_MAX_TEMPLATES 10
#define DEFAULT_MAX_TEMPLATE_BUILDS 1
#define DEFAULT_MAX_TEMPLATE_MB 4096
#define DEFAULT_MAX_SNAPSHOTS 10
#define DEFAULT_MAX_SNAPSHOT_MB 4096
#define LIMITS_VAR "SANDBOX_TENANT_LIMITS"
#define POLICY_VAR "SANDBOX_EGRESS_POLICY"

static void default_limits(tenant_cfg *t)
{
    t->max_sessions = DEFAULT_MAX_SESSIONS;
    t->requests_per_minute = DEFAULT_RPM;
    t->max_concurrent_exec = DEFAULT_MAX_EXEC;
    t->max_kernels = DEFAULT_MAX_KERNELS;
    t->max_memory_mb = DEFAULT_MAX_MEMORY_MB;
    t->max_cpu_percent = DEFAULT_MAX_CPU_PERCENT;
    t->max_disk_mb = 0;
    t->max_processes = DEFAULT_MAX_PROCESSES;
    t->max_templates = DEFAULT_MAX_TEMPLATES;
    t->max_template_builds = DEFAULT_MAX_TEMPLATE_BUILDS;
    t->max_template_mb = DEFAULT_MAX_TEMPLATE_MB;
    t->max_snapshots = DEFAULT_MAX_SNAPSHOTS;
    t->max_snapshot_mb = DEFAULT_MAX_SNAPSHOT_MB;
}

static bool blank(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static long find_tenant(const config *c, const char *name)
{
    for (size_t i = 0; i < c->ntenants; i++)
        if (strcmp(c->tenants[i].name, name) == 0)
            return (long)i;
    return -1;
}

static int add_key(config *c, const char *tenant, const char *key, const char *var, config_err err)
{
    for (size_t i = 0; i < c->nkeys; i++)
        if (strcmp(c->keys[i].key, key) == 0)
            return config_fail(err, var, NULL, "the same API key is configured twice (keys must be unique)");
    long t = find_tenant(c, tenant);
    if (t < 0) {
        tenant_cfg *nt = realloc(c->tenants, (c->ntenants + 1) * sizeof *nt);
        if (!nt)
            return config_fail(err, var, NULL, "out of memory");
        c->tenants = nt;
        memset(&nt[c->ntenants], 0, sizeof *nt);
        default_limits(&nt[c->ntenants]);
        if (!(nt[c->ntenants].name = strdup(tenant)))
            return config_fail(err, var, NULL, "out of memory");
        t = (long)c->ntenants++;
    }
    key_cfg *nk = realloc(c->keys, (c->nkeys + 1) * sizeof *nk);
    if (!nk)
        return config_fail(err, var, NULL, "out of memory");
    c->keys = nk;
    if (!(nk[c->nkeys].key = strdup(key)))
        return config_fail(err, var, NULL, "out of memory");
    nk[c->nkeys].len = strlen(key);
    nk[c->nkeys].tenant = (size_t)t;
    c->nkeys++;
    return 0;
}

typedef struct {
    config *c;
    config_err err;
} keys_ctx;

/* One "tenant:key" entry of SANDBOX_API_KEYS (spaces around either part are dropped). */
static int key_entry(void *ctx, const char *s, size_t n)
{
    keys_ctx *k = ctx;
    const char *colon = memchr(s, ':', n);
    char *tenant = NULL, *key = NULL;
    int rc = -1;
    if (colon) {
        size_t tl = (size_t)(colon - s);
        while (tl && blank(s[tl - 1]))
            tl--;
        const char *k0 = colon + 1;
        while (k0 < s + n && blank(*k0))
            k0++;
        tenant = strndup(s, tl);
        key = strndup(k0, (size_t)(s + n - k0));
    }
    if (!tenant || !key || !*tenant || !*key)
        config_fail(k->err, "SANDBOX_API_KEYS", NULL, "each entry must look like tenant:key");
    else
        rc = add_key(k->c, tenant, key, "SANDBOX_API_KEYS", k->err);
    if (key)
        memset(key, 0, strlen(key));
    free(tenant);
    free(key);
    return rc;
}

/* SANDBOX_ADMIN_KEY: long, printable, not a tenant's key, and only with a key store. */
static int load_admin_key(config *c, const config_src *src)
{
    const char *var = "SANDBOX_ADMIN_KEY", *admin = config_var(src, var);
    if (!admin)
        return 0;
    size_t n = strlen(admin);
    if (n < 32)
        return config_fail(src->err, var, NULL, "must be at least 32 characters long");
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)admin[i] > 0x7E || (unsigned char)admin[i] < 0x21)
            return config_fail(src->err, var, NULL, "must be printable ASCII without spaces");
    if (!c->keystore_path && !c->database_url)
        return config_fail(src->err, var, NULL,
                           "the admin API manages self-service keys; set SANDBOX_KEYSTORE=sqlite:<path> (or a "
                           "fleet's database) too");
    for (size_t i = 0; i < c->nkeys; i++)
        if (strcmp(c->keys[i].key, admin) == 0)
            return config_fail(src->err, var, NULL, "must differ from every tenant key");
    c->admin_key = strdup(admin);
    c->admin_key_len = n;
    return c->admin_key ? 0 : config_fail(src->err, var, NULL, "out of memory");
}

static int sqlite_var(const config_src *src, const char *name, char **out)
{
    const char *s = config_var(src, name);
    *out = NULL;
    return s ? config_sqlite(src->err, name, s, out) : 0;
}

int config_load_keys(config *c, const config_src *src)
{
    keys_ctx k = {.c = c, .err = src->err};
    const char *key = config_var(src, "SANDBOX_API_KEY");
    if (config_list(config_var(src, "SANDBOX_API_KEYS"), key_entry, &k) ||
        (key && add_key(c, "default", key, "SANDBOX_API_KEY", src->err)))
        return -1;
    if (sqlite_var(src, "SANDBOX_KEYSTORE", &c->keystore_path) || sqlite_var(src, "SANDBOX_AUDIT", &c->audit_path) ||
        config_var_int(src, "SANDBOX_AUDIT_RETENTION_DAYS", 90, 1, 36500, "days", &c->audit_retention_days) ||
        load_admin_key(c, src))
        return -1;
    if (c->nkeys == 0 && !c->keystore_path && !c->database_url) /* a fleet's keys may all be in its database */
        return config_fail(src->err, "SANDBOX_API_KEYS / SANDBOX_API_KEY", NULL,
                           "no API key configured; set SANDBOX_API_KEYS=tenant:key[,tenant:key], SANDBOX_API_KEY "
                           "or SANDBOX_KEYSTORE");
    default_limits(&c->star);
    return 0;
}

/* A variable or its _FILE twin holding JSON; *out NULL when neither is set. */
static int load_json_var(const config_src *src, const char *var, json_t **out)
{
    char filevar[128];
    snprintf(filevar, sizeof filevar, "%s_FILE", var);
    const char *text = config_var(src, var), *file = config_var(src, filevar);
    json_error_t je;
    *out = NULL;
    if (text && !(*out = json_loads(text, JSON_DECODE_ANY, &je)))
        return config_fail(src->err, var, NULL, "invalid JSON: %s", je.text);
    if (!text && file && !(*out = json_load_file(file, JSON_DECODE_ANY, &je)))
        return config_fail(src->err, filevar, NULL, "cannot load %s: %s", file, je.text);
    return 0;
}

static int apply_limits(tenant_cfg *t, const json_t *entry, const char *name, config_err err)
{
    const char *k;
    json_t *v;
    if (!json_is_object(entry))
        return config_fail(err, LIMITS_VAR, NULL, "the entry for '%s' must be an object", name);
    json_object_foreach((json_t *)entry, k, v) {
        if (strcmp(k, "max_cpus") == 0) { /* CPUs, whole or in tenths (0.5) */
            double cpus = json_is_number(v) && !json_is_boolean(v) ? json_number_value(v) : -1;
            double tenths = cpus * 10;
            if (!(cpus >= 0.1 && cpus <= 1024) || tenths - (double)(long)(tenths + 0.5) > 1e-6 ||
                (double)(long)(tenths + 0.5) - tenths > 1e-6)
                return config_fail(err, LIMITS_VAR, NULL,
                                   "max_cpus for '%s' must be a number of CPUs from 0.1 to 1024 in steps of 0.1", name);
            t->max_cpu_percent = (int)(long)(tenths + 0.5) * 10;
            continue;
        }
        int *slot = strcmp(k, "max_sessions") == 0          ? &t->max_sessions
                    : strcmp(k, "requests_per_minute") == 0 ? &t->requests_per_minute
                    : strcmp(k, "max_concurrent_exec") == 0 ? &t->max_concurrent_exec
                    : strcmp(k, "max_kernels") == 0         ? &t->max_kernels
                    : strcmp(k, "max_memory_mb") == 0       ? &t->max_memory_mb
                    : strcmp(k, "max_disk_mb") == 0         ? &t->max_disk_mb
                    : strcmp(k, "max_processes") == 0       ? &t->max_processes
                    : strcmp(k, "max_templates") == 0       ? &t->max_templates
                    : strcmp(k, "max_template_builds") == 0 ? &t->max_template_builds
                    : strcmp(k, "max_template_mb") == 0     ? &t->max_template_mb
                    : strcmp(k, "max_snapshots") == 0       ? &t->max_snapshots
                    : strcmp(k, "max_snapshot_mb") == 0     ? &t->max_snapshot_mb
                                                            : NULL;
        if (!slot)
            return config_fail(err, LIMITS_VAR, NULL, "unknown limit '%s' for '%s'", k, name);
        /* jansson keeps booleans apart from integers, so true/false are refused here */
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 1000000000)
            return config_fail(err, LIMITS_VAR, NULL, "%s for '%s' must be a positive integer", k, name);
        *slot = (int)json_integer_value(v);
    }
    return 0;
}

/* Every entry checked; "*" applies to every tenant, then a tenant's own entry. */
static int apply_all_limits(config *c, json_t *j, config_err err)
{
    const char *k;
    json_t *v, *star = json_object_get(j, "*");
    if (!json_is_object(j))
        return config_fail(err, LIMITS_VAR, NULL, "must be a JSON object");
    json_object_foreach(j, k, v) {
        tenant_cfg scratch = {0};
        if (apply_limits(&scratch, v, k, err))
            return -1;
    }
    if (star && apply_limits(&c->star, star, "*", err))
        return -1;
    for (size_t i = 0; i < c->ntenants; i++) {
        json_t *own = json_object_get(j, c->tenants[i].name);
        if ((star && apply_limits(&c->tenants[i], star, "*", err)) ||
            (own && apply_limits(&c->tenants[i], own, c->tenants[i].name, err)))
            return -1;
    }
    return 0;
}

static int check_policy(const json_t *j, config_err err)
{
    const char *k;
    json_t *v;
    if (!json_is_object(j))
        return config_fail(err, POLICY_VAR, NULL, "must be a JSON object");
    json_object_foreach((json_t *)j, k, v) {
        size_t i;
        json_t *item;
        if (!json_is_array(v))
            return config_fail(err, POLICY_VAR, NULL, "the entry for '%s' must be a list", k);
        json_array_foreach(v, i, item) {
            if (!json_is_string(item))
                return config_fail(err, POLICY_VAR, NULL, "rules for '%s' must be strings", k);
        }
    }
    return 0;
}

/* Each tenant's allowed egress: its own entry, else "*", else nothing. */
static void apply_policy(config *c, const json_t *j)
{
    json_t *star = j ? json_object_get(j, "*") : NULL;
    for (size_t i = 0; i < c->ntenants; i++) {
        json_t *rules = j ? json_object_get(j, c->tenants[i].name) : NULL;
        if (!rules)
            rules = star;
        c->tenants[i].egress_allowed = rules ? egress_expand(rules) : json_array();
    }
    c->star.egress_allowed = star ? egress_expand(star) : json_array();
}

int config_load_policies(config *c, const config_src *src)
{
    if (load_json_var(src, LIMITS_VAR, &c->limits_json))
        return -1;
    if (c->limits_json && apply_all_limits(c, c->limits_json, src->err))
        return -1;
    if (load_json_var(src, POLICY_VAR, &c->egress_json) || (c->egress_json && check_policy(c->egress_json, src->err)))
        return -1;
    apply_policy(c, c->egress_json);
    return 0;
}

bool config_runtime_tenant(const config *c, const char *name, tenant_cfg *out)
{
    *out = c->star;
    out->name = strdup(name);
    json_t *own = c->limits_json ? json_object_get(c->limits_json, name) : NULL;
    char ignored[8];
    if (own)
        apply_limits(out, own, name, (config_err){ignored, sizeof ignored}); /* validated at startup */
    json_t *rules = c->egress_json ? json_object_get(c->egress_json, name) : NULL;
    out->egress_allowed = rules ? egress_expand(rules) : json_deep_copy(c->star.egress_allowed);
    if (out->name && out->egress_allowed)
        return true;
    config_tenant_free(out);
    return false;
}

void config_tenant_free(tenant_cfg *t)
{
    free(t->name);
    json_decref(t->egress_allowed);
    t->name = NULL;
    t->egress_allowed = NULL;
}

void config_free(config *c)
{
    json_decref(c->star.egress_allowed);
    json_decref(c->limits_json);
    json_decref(c->egress_json);
    free(c->keystore_path);
    free(c->audit_path);
    if (c->database_url) {
        memset(c->database_url, 0, strlen(c->database_url));
        free(c->database_url);
        c->database_url = NULL;
    }
    if (c->fleet_secret) {
        memset(c->fleet_secret, 0, strlen(c->fleet_secret));
        free(c->fleet_secret);
        c->fleet_secret = NULL;
    }
    if (c->admin_key) {
        memset(c->admin_key, 0, c->admin_key_len);
        free(c->admin_key);
    }
    c->star.egress_allowed = c->limits_json = c->egress_json = NULL;
    c->keystore_path = c->audit_path = c->admin_key = NULL;
    for (size_t i = 0; i < c->ntenants; i++)
        config_tenant_free(&c->tenants[i]);
    for (size_t i = 0; i < c->nkeys; i++) {
        memset(c->keys[i].key, 0, c->keys[i].len);
        free(c->keys[i].key);
    }
    free(c->tenants);
    free(c->keys);
    free(c->fleet_internal_host);
    c->fleet_internal_host = NULL;
    free(c->listen_host);
    c->tenants = NULL;
    c->keys = NULL;
    c->listen_host = NULL;
    c->ntenants = c->nkeys = 0;
}
