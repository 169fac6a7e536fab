/* airlockd configuration: command-line flags plus the SANDBOX_* environment (contract 2.9).
 * Immutable after startup, so threads read it without locking. */
#ifndef AIRLOCKD_CONFIG_H
#define AIRLOCKD_CONFIG_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *name;
    int max_sessions;
    int requests_per_minute;
    int max_concurrent_exec;
    json_t *egress_allowed; /* expanded rules the tenant may request */
} tenant_cfg;

typedef struct {
    char *key;
    size_t len;
    size_t tenant; /* index into tenants */
} key_cfg;

typedef struct config {
    tenant_cfg *tenants;
    size_t ntenants;
    key_cfg *keys;
    size_t nkeys;
    double session_ttl;      /* seconds of idle time */
    long long quota_bytes;   /* per-workspace soft quota */
    bool require_gvisor;
    /* flags */
    const char *listen_host;
    unsigned port;
    const char *unix_path;
    const char *state_dir;
    const char *port_file;
    const char *runsc;
} config;

/* Reads the environment into c (flags are set by the caller). Returns 0, or -1 with a
 * message naming the offending variable in err. */
int config_load_env(config *c, char *err, size_t errlen);

/* Tenant index for an X-API-Key value, or -1. Compares against every key in constant
 * time so timing does not reveal how much of a key matched. */
long config_auth(const config *c, const char *key);

void config_free(config *c);

#endif
