/* Loading and checking the SANDBOX_* environment into the configuration. */
#include "config.h"

#include "egress/policy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEFAULT_MAX_SESSIONS 10
#define DEFAULT_RPM 120
#define DEFAULT_MAX_EXEC 4
/* the longest command (60 s) plus its sandbox start and release */
#define DEFAULT_SHUTDOWN_GRACE 70
#define DEFAULT_RUNNING_PER_CPU 4
#define DEFAULT_QUEUE_SECONDS 20
#define DEFAULT_OUTPUT_MAX_KB 1024
#define DEFAULT_READ_MAX_MB 8
/* sandboxes booted ahead: each waits frozen (no CPU) and holds ~17 MB of charged memory */
#define DEFAULT_WARM_PER_CPU 4
#define DEFAULT_WARM_IDLE_SECONDS 120
#define DEFAULT_WARM_NEW 1
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
    if (json_object_get(j, "*") && (rc = apply_limits(&c->star, json_object_get(j, "*"), "*", err, errlen)) != 0)
        goto out;
    for (size_t i = 0; i < c->ntenants; i++) {
        json_t *star = json_object_get(j, "*"), *own = json_object_get(j, c->tenants[i].name);
        if (star && (rc = apply_limits(&c->tenants[i], star, "*", err, errlen)) != 0)
            goto out;
        if (own && (rc = apply_limits(&c->tenants[i], own, c->tenants[i].name, err, errlen)) != 0)
            goto out;
    }
out:
    if (rc == 0)
        c->limits_json = j;
    else
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
    json_t *star = j ? json_object_get(j, "*") : NULL;
    c->star.egress_allowed = star ? egress_expand(star) : json_array();
out:
    if (rc == 0)
        c->egress_json = j;
    else
        json_decref(j);
    return rc;
}

static int positive_number(const char *var, double def, double *out, char *err, size_t errlen);

/* "sqlite:<path>" → the path; NULL when unset; -1 on a bad value. */
static int sqlite_var(const char *var, char **out, char *err, size_t errlen)
{
    const char *s = getenv(var);
    *out = NULL;
    if (!s || !*s)
        return 0;
    if (strncmp(s, "sqlite:", 7) != 0 || !s[7])
        return failf(err, errlen, "%s: expected sqlite:<path> (the only backend airlockd has), got '%s'", var, s);
    *out = strdup(s + 7);
    return *out ? 0 : failf(err, errlen, "out of memory");
}

/* The fleet's database URL (it holds a password: read from the environment or a file, never
 * shown) and the grace of a silent node. The --database flag, when given, was set first. */
static int load_fleet(config *c, char *err, size_t errlen)
{
    const char *url = getenv("SANDBOX_DATABASE_URL"), *file = getenv("SANDBOX_DATABASE_URL_FILE");
    if (!c->database_url && url && *url && !(c->database_url = strdup(url)))
        return failf(err, errlen, "out of memory");
    if (!c->database_url && file && *file) {
        FILE *f = fopen(file, "r");
        char buf[4096];
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        if (!f || n == 0)
            return failf(err, errlen, "SANDBOX_DATABASE_URL_FILE: cannot read %s", file);
        buf[n] = '\0';
        c->database_url = trim_dup(buf, n);
        memset(buf, 0, sizeof buf);
        if (!c->database_url)
            return failf(err, errlen, "out of memory");
    }
    c->fleet_lost_after = 120;
    if (c->database_url && positive_number("SANDBOX_FLEET_LOST_AFTER", 120, &c->fleet_lost_after, err, errlen))
        return -1;
    return 0;
}

static int load_stores(config *c, char *err, size_t errlen)
{
    if (sqlite_var("SANDBOX_KEYSTORE", &c->keystore_path, err, errlen) ||
        sqlite_var("SANDBOX_AUDIT", &c->audit_path, err, errlen))
        return -1;
    const char *days = getenv("SANDBOX_AUDIT_RETENTION_DAYS");
    c->audit_retention_days = 90;
    if (days && *days) {
        char *end;
        errno = 0;
        long d = strtol(days, &end, 10);
        if (errno || *end || end == days || d < 1 || d > 36500)
            return failf(err, errlen, "SANDBOX_AUDIT_RETENTION_DAYS: must be a whole number of days (1-36500), got '%s'",
                         days);
        c->audit_retention_days = (int)d;
    }
    const char *admin = getenv("SANDBOX_ADMIN_KEY");
    if (!admin || !*admin)
        return 0;
    size_t n = strlen(admin);
    if (n < 32)
        return failf(err, errlen, "SANDBOX_ADMIN_KEY: must be at least 32 characters long");
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)admin[i] > 0x7E || (unsigned char)admin[i] < 0x21)
            return failf(err, errlen, "SANDBOX_ADMIN_KEY: must be printable ASCII without spaces");
    if (!c->keystore_path && !c->database_url)
        return failf(err, errlen, "SANDBOX_ADMIN_KEY: the admin API manages self-service keys; "
                                  "set SANDBOX_KEYSTORE=sqlite:<path> (or a fleet's --database) too");
    for (size_t i = 0; i < c->nkeys; i++)
        if (strcmp(c->keys[i].key, admin) == 0)
            return failf(err, errlen, "SANDBOX_ADMIN_KEY: must differ from every tenant key");
    c->admin_key = strdup(admin);
    c->admin_key_len = n;
    return c->admin_key ? 0 : failf(err, errlen, "out of memory");
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

/* A whole number in [lo, hi] from var (def when unset); what it counts names the unit. */
static int whole_number(const char *var, long def, long lo, long hi, const char *what, long *out, char *err,
                        size_t errlen)
{
    const char *s = getenv(var);
    *out = def;
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    while (*end == ' ')
        end++;
    if (errno || *end || end == s || v < lo || v > hi)
        return failf(err, errlen, "%s: must be a whole number of %s from %ld to %ld, got '%s'", var, what, lo, hi, s);
    *out = v;
    return 0;
}

/* The host-wide command cap and queue, the output budget and the read limit (ours). */
static int load_capacity(config *c, char *err, size_t errlen)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), running, queue, out_kb, read_mb;
    if (cpus < 1)
        cpus = 1;
    if (whole_number("SANDBOX_MAX_RUNNING", DEFAULT_RUNNING_PER_CPU * cpus, 1, 100000, "commands", &running, err,
                     errlen) ||
        whole_number("SANDBOX_QUEUE_SECONDS", DEFAULT_QUEUE_SECONDS, 0, 3600, "seconds", &queue, err, errlen) ||
        whole_number("SANDBOX_OUTPUT_MAX_KB", DEFAULT_OUTPUT_MAX_KB, 1, 1024 * 1024, "KB", &out_kb, err, errlen) ||
        whole_number("SANDBOX_READ_MAX_MB", DEFAULT_READ_MAX_MB, 1, 1024, "MB", &read_mb, err, errlen))
        return -1;
    c->max_running = (int)running;
    c->queue_seconds = (int)queue;
    c->output_limit = (size_t)out_kb * 1024u;
    c->read_limit = (size_t)read_mb * 1024u * 1024u;
    return 0;
}

/* Sandboxes booted ahead (ours): how many at most, and how long one may wait unused. */
static int load_warm(config *c, char *err, size_t errlen)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), max, idle, spares;
    if (cpus < 1)
        cpus = 1;
    if (whole_number("SANDBOX_WARM_MAX", DEFAULT_WARM_PER_CPU * cpus, 0, 1024, "sandboxes", &max, err, errlen) ||
        whole_number("SANDBOX_WARM_IDLE_SECONDS", DEFAULT_WARM_IDLE_SECONDS, 1, 86400, "seconds", &idle, err,
                     errlen) ||
        whole_number("SANDBOX_WARM_NEW", DEFAULT_WARM_NEW, 0, 4, "sandboxes", &spares, err, errlen))
        return -1;
    c->warm_max = (int)max;
    c->warm_idle_seconds = (int)idle;
    c->warm_booting = (int)cpus;
    c->warm_new = (int)spares;
    return 0;
}

/* var as a whole number of MB (at least min) in bytes; def (bytes) when unset. */
static int whole_mb(const char *var, long long def, long min, long long *out, char *err, size_t errlen)
{
    long mb;
    if (whole_number(var, (long)(def / 1048576LL), min, 1000000000L, "MB", &mb, err, errlen))
        return -1;
    *out = (long long)mb * 1048576LL;
    return 0;
}

/* The workspace disks (SANDBOX_DISK_TOTAL_MB, SANDBOX_DISK_RESERVE_MB) and where sessions are
 * saved (SANDBOX_SESSION_STATE: a file, or off). */
static int load_disk(config *c, char *err, size_t errlen)
{
    if (whole_mb("SANDBOX_DISK_TOTAL_MB", 0, 1, &c->disk_total_bytes, err, errlen) ||
        whole_mb("SANDBOX_DISK_RESERVE_MB", 1024LL * 1048576LL, 0, &c->disk_reserve_bytes, err, errlen))
        return -1;
    const char *state = getenv("SANDBOX_SESSION_STATE");
    c->session_state = NULL;
    c->session_state_off = false;
    if (state && strcmp(state, "off") == 0)
        c->session_state_off = true;
    else if (state && *state)
        c->session_state = state;
    return 0;
}

/* SANDBOX_IMPORT_MAX_MB (a positive whole number) and the archive download base URL. */
static int load_import(config *c, char *err, size_t errlen)
{
    long mb;
    if (whole_number("SANDBOX_IMPORT_MAX_MB", 100, 1, 1000000, "MB", &mb, err, errlen))
        return -1;
    c->import_max_mb = (int)mb;
    if (!c->import_base_url || !*c->import_base_url) {
        const char *env = getenv("AIRLOCK_IMPORT_BASE_URL");
        c->import_base_url = env && *env ? env : "https://github.com";
    }
    if (strncmp(c->import_base_url, "http://", 7) != 0 && strncmp(c->import_base_url, "https://", 8) != 0)
        return failf(err, errlen, "AIRLOCK_IMPORT_BASE_URL / --import-base-url: must be an http:// or https:// URL, got '%s'",
                     c->import_base_url);
    return 0;
}

/* The HTTP layer's limits and the shutdown grace period (README "Limits"). */
static int load_http(config *c, char *err, size_t errlen)
{
    http_limits *l = &c->http;
    http_limits_default(l);
    long conns, per_client, header_s, transfer_s, rate_kb, memory_mb, quick, slow, queue, grace;
    if (whole_number("SANDBOX_MAX_CONNECTIONS", l->max_connections, 16, 1000000, "connections", &conns, err, errlen) ||
        whole_number("SANDBOX_MAX_CONNECTIONS_PER_CLIENT", l->max_per_client, 1, 1000000, "connections", &per_client,
                     err, errlen) ||
        whole_number("SANDBOX_HEADER_TIMEOUT", l->header_timeout_s, 1, 3600, "seconds", &header_s, err, errlen) ||
        whole_number("SANDBOX_TRANSFER_TIMEOUT", l->transfer_timeout_s, 1, 3600, "seconds", &transfer_s, err, errlen) ||
        whole_number("SANDBOX_MIN_TRANSFER_RATE_KB", (long)(l->min_rate / 1024), 1, 10000000, "KiB per second",
                     &rate_kb, err, errlen) ||
        whole_number("SANDBOX_BODY_MEMORY_MB", (long)(l->body_memory >> 20), 1, 1000000, "MB", &memory_mb, err, errlen) ||
        whole_number("SANDBOX_REQUEST_THREADS", l->quick_threads, 1, 1024, "threads", &quick, err, errlen) ||
        whole_number("SANDBOX_COMMAND_THREADS", l->long_threads, 1, 1024, "threads", &slow, err, errlen) ||
        whole_number("SANDBOX_REQUEST_QUEUE", l->queue, 1, 100000, "requests", &queue, err, errlen) ||
        whole_number("SANDBOX_SHUTDOWN_GRACE", DEFAULT_SHUTDOWN_GRACE, 0, 86400, "seconds", &grace, err, errlen))
        return -1;
    l->max_connections = (unsigned)conns;
    l->max_per_client = (unsigned)per_client;
    l->header_timeout_s = (unsigned)header_s;
    l->transfer_timeout_s = (unsigned)transfer_s;
    l->min_rate = (size_t)rate_kb * 1024;
    l->body_memory = (size_t)memory_mb << 20;
    l->quick_threads = (unsigned)quick;
    l->long_threads = (unsigned)slow;
    l->queue = (unsigned)queue;
    c->shutdown_grace = (double)grace;
    return 0;
}

int config_load_env(config *c, char *err, size_t errlen)
{
    const char *keys = getenv("SANDBOX_API_KEYS"), *key = getenv("SANDBOX_API_KEY");
    if (keys && parse_keys(c, keys, err, errlen))
        return -1;
    if (key && *key && add_key(c, "default", key, "SANDBOX_API_KEY", err, errlen))
        return -1;
    if (load_fleet(c, err, errlen) || load_stores(c, err, errlen))
        return -1;
    if (c->nkeys == 0 && !c->keystore_path && !c->database_url)
        return failf(err, errlen, "SANDBOX_API_KEYS / SANDBOX_API_KEY: no API key configured; "
                                  "set SANDBOX_API_KEYS=tenant:key[,tenant:key], SANDBOX_API_KEY "
                                  "or SANDBOX_KEYSTORE");
    double mb;
    if (positive_number("SANDBOX_SESSION_TTL", 1800, &c->session_ttl, err, errlen) ||
        positive_number("SANDBOX_WORKSPACE_QUOTA_MB", 512, &mb, err, errlen))
        return -1;
    if (mb > 1e9)
        return failf(err, errlen, "SANDBOX_WORKSPACE_QUOTA_MB: too large");
    c->quota_bytes = (long long)(mb * 1048576.0);
    /* A typo here must not silently allow the weaker bubblewrap fallback: only 1 or 0. */
    const char *gv = getenv("SANDBOX_REQUIRE_GVISOR");
    if (gv && *gv && strcmp(gv, "1") != 0 && strcmp(gv, "0") != 0)
        return failf(err, errlen, "SANDBOX_REQUIRE_GVISOR: must be 1 (refuse to run without gVisor) or 0, got '%s'", gv);
    c->require_gvisor = gv && strcmp(gv, "1") == 0;
    c->star.max_sessions = DEFAULT_MAX_SESSIONS;
    c->star.requests_per_minute = DEFAULT_RPM;
    c->star.max_concurrent_exec = DEFAULT_MAX_EXEC;
    if (load_import(c, err, errlen) || load_http(c, err, errlen) || load_capacity(c, err, errlen) || load_warm(c, err, errlen) ||
        load_disk(c, err, errlen))
        return -1;
    if (load_limits(c, err, errlen) || load_egress(c, err, errlen))
        return -1;
    return egress_settings_load(&c->egress, err, errlen);
}

bool config_runtime_tenant(const config *c, const char *name, tenant_cfg *out)
{
    *out = c->star;
    out->name = strdup(name);
    json_t *own = c->limits_json ? json_object_get(c->limits_json, name) : NULL;
    char ignored[8];
    if (own)
        apply_limits(out, own, name, ignored, sizeof ignored); /* validated at startup */
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
    c->tenants = NULL;
    c->keys = NULL;
    c->ntenants = c->nkeys = 0;
}
