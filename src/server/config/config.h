/* airlockd's settings: the command-line flags, the SANDBOX_* / AIRLOCK_* environment
 * (contract 2.9) and the files it names, loaded once by config_load into one typed value.
 * Immutable after startup, so threads read it without locking. No other module reads the
 * environment: each receives its part of this value (http_limits, egress_settings,
 * sandbox_settings, ...). The value parsers are in config/parse.h. */
#ifndef AIRLOCKD_CONFIG_H
#define AIRLOCKD_CONFIG_H

#include "http/http.h"
#include "egress/settings.h"
#include "log/log.h"
#include "sandbox/sandbox.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* One tenant's settings (contract 2.2, 2.8). */
typedef struct {
    char *name;
    int max_sessions;
    int requests_per_minute;
    int max_concurrent_exec;
    int max_kernels;         /* ours: live kernels per session (POST .../kernels) */
    /* the largest session a create may ask for (ours; docs/server.md "Session sizes") */
    int max_memory_mb;
    int max_cpu_percent;    /* max_cpus × 100 */
    int max_disk_mb;        /* 0: the larger of 2048 and SANDBOX_WORKSPACE_QUOTA_MB */
    int max_processes;
    int max_templates;       /* ours: templates it may have */
    int max_template_builds; /* ours: its template builds at once */
    int max_template_mb;     /* ours: MB its templates may take in all */
    int max_snapshots;       /* ours: snapshots it may keep */
    int max_snapshot_mb;     /* ours: MB its snapshots may take in all */
    json_t *egress_allowed; /* expanded rules the tenant may request */
} tenant_cfg;

typedef struct {
    char *key;
    size_t len;
    size_t tenant; /* index into tenants (the same index in the runtime table, domain/tenants.h) */
} key_cfg;

typedef struct config {
    tenant_cfg *tenants;     /* the tenants of the static keys */
    size_t ntenants;
    tenant_cfg star;         /* the "*" limits and egress, for tenants first seen at runtime */
    json_t *limits_json;     /* SANDBOX_TENANT_LIMITS / SANDBOX_EGRESS_POLICY as loaded */
    json_t *egress_json;
    char *keystore_path;     /* SANDBOX_KEYSTORE=sqlite:<path>, or NULL */
    char *admin_key;         /* SANDBOX_ADMIN_KEY (≥ 32 chars), or NULL */
    size_t admin_key_len;
    char *audit_path;        /* SANDBOX_AUDIT=sqlite:<path>, or NULL */
    int audit_retention_days;
    key_cfg *keys;
    size_t nkeys;
    double session_ttl;      /* seconds of idle time */
    double paused_ttl;       /* SANDBOX_PAUSED_TTL: seconds a paused session is kept (604800) */
    long long quota_bytes;   /* per-workspace disk quota (SANDBOX_WORKSPACE_QUOTA_MB) */
    sandbox_size session_size; /* SANDBOX_SESSION_MEMORY_MB, _CPUS, _MAX_PROCESSES: a session's size
                                * unless it asks for another (docs/server.md "Session sizes") */
    long long disk_total_bytes;   /* SANDBOX_DISK_TOTAL_MB: cap on all workspace images; 0 = from free space */
    long long disk_reserve_bytes; /* SANDBOX_DISK_RESERVE_MB: host space new images must leave free */
    const char *session_state;    /* SANDBOX_SESSION_STATE: a file; NULL = <state dir>/sessions.json */
    bool session_state_off;       /* SANDBOX_SESSION_STATE=off: sessions end with the server */
    const char *snapshot_dir;     /* SANDBOX_SNAPSHOT_DIR; NULL = <state dir>/snapshots */
    int import_max_mb;          /* SANDBOX_IMPORT_MAX_MB, default 100 */
    http_limits http;           /* connections, deadlines, body memory, worker pools (README "Limits") */
    double shutdown_grace;      /* SANDBOX_SHUTDOWN_GRACE: seconds running requests get after SIGTERM */
    int max_running;            /* SANDBOX_MAX_RUNNING: commands at once, all tenants (4 per CPU) */
    int queue_seconds;          /* SANDBOX_QUEUE_SECONDS: a command's wait for a slot (20; 0: none) */
    size_t output_limit;        /* SANDBOX_OUTPUT_MAX_KB (1024) in bytes: kept of each output stream */
    size_t read_limit;          /* SANDBOX_READ_MAX_MB (8) in bytes: the largest file /read returns */
    egress_settings egress;     /* SANDBOX_EGRESS_DNS, _LOG_DIR, our bounds, the test-only map */
    sandbox_settings sandbox;   /* --runsc / AIRLOCK_RUNSC, AIRLOCK_WAITER, PATH, --isolation /
                                 * SANDBOX_ISOLATION, SANDBOX_REQUIRE_GVISOR */
    log_level log_level;        /* SANDBOX_LOG_LEVEL (info) */
    bool log_json;              /* SANDBOX_LOG_FORMAT=json: JSON lines, else text */
    /* flags */
    char *listen_host;          /* --listen (allocated; default 127.0.0.1) */
    unsigned port;
    const char *unix_path;
    const char *state_dir;      /* --state-dir as given (main claims it: app.state_dir is its real path) */
    const char *port_file;
    const char *isolation_flag; /* --isolation as given (wins over SANDBOX_ISOLATION) */
    char isolation_by[64];      /* which setting chose the isolation (sandbox.isolation_by) */
    const char *import_base_url; /* --import-base-url, else $AIRLOCK_IMPORT_BASE_URL, else https://github.com */
    int warm_max;               /* SANDBOX_WARM_MAX: sandboxes booted ahead at most (4 per CPU; 0: none) */
    int warm_idle_seconds;      /* SANDBOX_WARM_IDLE_SECONDS: one unused this long is released (120) */
    int warm_booting;           /* boots ahead at once (the CPUs) */
    int warm_new;               /* SANDBOX_WARM_NEW: spares per tenant for new sessions (1; 0: none) */
    int restore_ahead;          /* SANDBOX_RESTORE_AHEAD: sandboxes made ahead per tenant for resumes with memory (1; 0: none) */
    int template_builds;        /* SANDBOX_TEMPLATE_BUILDS: template builds at once (1) */
    int template_build_timeout; /* SANDBOX_TEMPLATE_BUILD_TIMEOUT: seconds per build step (900) */
    const char *template_sources; /* SANDBOX_TEMPLATE_SOURCES: apt sources file (glob); NULL: the host's */
    const char *template_suite;   /* SANDBOX_TEMPLATE_SUITE; NULL: the host's codename */
    const char *template_bases;   /* SANDBOX_TEMPLATE_BASES: the cached bases' directory; NULL: the state's */
    /* the fleet (docs/fleet.md): all NULL / 0 without a database */
    char *database_url;         /* --database, SANDBOX_DATABASE_URL or the file SANDBOX_DATABASE_URL_FILE names */
    bool migrate_only;          /* --migrate-only: the database's schema, nothing else (run/migrate.c) */
    const char *node_id;        /* --node-id (default: the host name) */
    const char *advertise;      /* --advertise URL (default: http://<listen address>:<port>) */
    double fleet_lost_after;    /* SANDBOX_FLEET_LOST_AFTER: seconds a silent node keeps its sessions (120) */
    double fleet_key_cache_s;   /* SANDBOX_FLEET_KEY_CACHE_S: seconds a looked-up key is trusted without a
                                 * revocation notice reaching the node (2) */
    int fleet_move_timeout_s;   /* SANDBOX_FLEET_MOVE_TIMEOUT_S: the longest one drain's move may take (300) */
    int fleet_capacity;         /* SANDBOX_FLEET_CAPACITY: sessions this node holds at most (0: no cap) */
    int fleet_agent_port;       /* SANDBOX_FLEET_AGENT_PORT: HAProxy's agent-check port (0: none) */
    char *fleet_secret;         /* read from SANDBOX_FLEET_SECRET_FILE (0600): node-to-node moves (NULL: none) */
    char *fleet_internal_host;  /* SANDBOX_FLEET_INTERNAL_LISTEN: the node-to-node listener's address (NULL:
                                 * the listen address) and port (0: any free one) */
    unsigned fleet_internal_port;
} config;

typedef enum {
    CONFIG_OK,
    CONFIG_HELP,         /* --help / -h: print config_usage to stdout, exit 0 */
    CONFIG_UNKNOWN_FLAG, /* err names it; print config_usage to stderr too, exit 2 */
    CONFIG_BAD_FLAG,     /* a flag without a value or with a bad one; err says which, exit 2 */
    CONFIG_INVALID,      /* a setting of the environment (or a file it names); err names it */
} config_status;

/* Loads the flags of argv, then the environment envp (NULL-terminated "NAME=value", e.g.
 * environ) and the files it names, into c. argv and envp must outlive c (strings point into
 * them). On any status but CONFIG_OK, err holds the message (never a key's value); release c
 * with config_free in every case. */
config_status config_load(config *c, int argc, char **argv, char *const *envp, char *err, size_t errlen);

/* The flags and variables, for --help. */
void config_usage(FILE *f);

/* The settings of a tenant first seen at runtime (through a self-service key): the "*"
 * limits and egress, or its own entries in SANDBOX_TENANT_LIMITS / SANDBOX_EGRESS_POLICY.
 * false when out of memory; release with config_tenant_free. */
bool config_runtime_tenant(const config *c, const char *name, tenant_cfg *out);
void config_tenant_free(tenant_cfg *t);

void config_free(config *c);

#endif
