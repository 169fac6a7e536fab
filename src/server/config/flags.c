/* The command-line flags of airlockd and its --help text (which lists the variables too). */
#include "config/internal.h"

#include <stdlib.h>
#include <string.h>

void config_usage(FILE *f)
{
    fputs("usage: airlockd [--listen HOST:PORT] [--unix PATH] [--state-dir DIR] [--port-file FILE]\n"
          "                [--runsc PATH] [--isolation gvisor|bubblewrap|auto] [--import-base-url URL]\n"
          "                [--database URL] [--node-id ID] [--advertise URL] [--migrate-only] [--help]\n"
          "\n"
          "  --listen HOST:PORT  TCP address (default 127.0.0.1:8000; port 0 = any free port)\n"
          "  --unix PATH         also listen on a unix socket\n"
          "  --state-dir DIR     sessions, workspace disks and sandbox state (default\n"
          "                      ./airlockd-state); a new or empty directory, or one airlockd made\n"
          "  --port-file FILE    write the bound TCP port here once listening\n"
          "  --runsc PATH        gVisor runsc binary (default $AIRLOCK_RUNSC, then the checkout's\n"
          "                      .deps/runsc/usr/bin/runsc beside airlockd, then PATH)\n"
          "  --isolation KIND    gvisor (the default: refuse to start without it), bubblewrap (the\n"
          "                      weaker sandbox, asked for), auto (gVisor, else bubblewrap);\n"
          "                      default $SANDBOX_ISOLATION\n"
          "  --import-base-url URL  where /import downloads archives (default\n"
          "                      $AIRLOCK_IMPORT_BASE_URL, then https://github.com)\n"
          "  --database URL      join a fleet whose shared state is in this PostgreSQL database\n"
          "                      (docs/fleet.md; prefer SANDBOX_DATABASE_URL or\n"
          "                      SANDBOX_DATABASE_URL_FILE: it holds a password)\n"
          "  --node-id ID        this node's name in the fleet (default: the host name)\n"
          "  --advertise URL     how the router reaches this node (default: the listen address)\n"
          "  --migrate-only      bring the fleet's database to this version's schema, then exit\n"
          "\n"
          "Environment: SANDBOX_API_KEYS=tenant:key[,tenant:key] and/or SANDBOX_API_KEY (tenant\n"
          "'default'; at least one key is required), SANDBOX_SESSION_TTL (1800 s),\n"
          "SANDBOX_PAUSED_TTL (604800 s: a paused session is deleted this long after its pause),\n"
          "SANDBOX_WORKSPACE_QUOTA_MB (512), SANDBOX_TENANT_LIMITS[_FILE], SANDBOX_EGRESS_POLICY[_FILE],\n"
          "SANDBOX_ISOLATION, SANDBOX_REQUIRE_GVISOR=1|0 (gvisor|auto), SANDBOX_KEYSTORE=sqlite:PATH (self-service keys),\n"
          "SANDBOX_ADMIN_KEY (>= 32 chars; the admin API, needs SANDBOX_KEYSTORE),\n"
          "SANDBOX_AUDIT=sqlite:PATH and SANDBOX_AUDIT_RETENTION_DAYS (90),\n"
          "SANDBOX_IMPORT_MAX_MB (100), AIRLOCK_IMPORT_BASE_URL (https://github.com),\n"
          "Limits (README, \"Limits\"): SANDBOX_MAX_CONNECTIONS (4096), SANDBOX_MAX_CONNECTIONS_PER_CLIENT\n"
          "(256), SANDBOX_HEADER_TIMEOUT (10 s), SANDBOX_TRANSFER_TIMEOUT (10 s) with\n"
          "SANDBOX_MIN_TRANSFER_RATE_KB (256), SANDBOX_BODY_MEMORY_MB (256), SANDBOX_REQUEST_THREADS (8),\n"
          "SANDBOX_COMMAND_THREADS (32), SANDBOX_REQUEST_QUEUE (256), SANDBOX_SHUTDOWN_GRACE (70 s),\n"
          "SANDBOX_MAX_RUNNING (4 per CPU; commands at once, all tenants), SANDBOX_QUEUE_SECONDS (20),\n"
          "SANDBOX_OUTPUT_MAX_KB (1024 per stream), SANDBOX_READ_MAX_MB (8),\n"
          "SANDBOX_SESSION_STATE (a file, default <state dir>/sessions.json; off: sessions end with\n"
          "the server), SANDBOX_DISK_TOTAL_MB (all workspace images together; default: the free\n"
          "space at start), SANDBOX_DISK_RESERVE_MB (1024: host space new images leave free),\n"
          "SANDBOX_EGRESS_DNS (ip[:port],...; default the host's resolver), SANDBOX_EGRESS_LOG_DIR,\n"
          "SANDBOX_EGRESS_MAX_TUNNELS (32 per session), SANDBOX_EGRESS_MAX_TUNNELS_TOTAL (1024),\n"
          "SANDBOX_EGRESS_IDLE_SECONDS (300). A fleet: SANDBOX_DATABASE_URL or SANDBOX_DATABASE_URL_FILE,\n"
          "SANDBOX_FLEET_LOST_AFTER (120 s), SANDBOX_FLEET_KEY_CACHE_S (2 s), SANDBOX_FLEET_SECRET_FILE,\n"
          "SANDBOX_FLEET_INTERNAL_LISTEN (the node-to-node listener; default the listen address, any port).\n"
          "Logs (stderr): SANDBOX_LOG_LEVEL (error|warn|info|debug; info), SANDBOX_LOG_FORMAT (text|json; text).\n"
          "\n"
          "airlockd router config|follow ...: the fleet's router program beside HAProxy (docs/fleet.md;\n"
          "airlockd router --help).\n",
          f);
}

static const char *const flags_with_value[] = {"--listen",    "--unix",      "--state-dir",      "--port-file",
                                               "--runsc",     "--isolation", "--import-base-url", "--database",
                                               "--node-id",   "--advertise"};

static bool known_flag(const char *name)
{
    for (size_t i = 0; i < sizeof flags_with_value / sizeof flags_with_value[0]; i++)
        if (strcmp(name, flags_with_value[i]) == 0)
            return true;
    return false;
}

/* One flag and its value into c. */
static int set_flag(config *c, const char *name, const char *val, config_err err)
{
    if (strcmp(name, "--listen") == 0) {
        free(c->listen_host);
        c->listen_host = NULL;
        return config_host_port(err, "--listen", val, &c->listen_host, &c->port);
    }
    if (strcmp(name, "--database") == 0) {
        free(c->database_url);
        if (!(c->database_url = strdup(val)))
            return config_fail(err, name, NULL, "out of memory");
        /* it may hold a password: blanked in our command line (ps) once copied */
        memset((char *)val, '*', strlen(val));
        return 0;
    }
    if (strcmp(name, "--node-id") == 0) {
        c->node_id = val;
        return 0;
    }
    if (strcmp(name, "--advertise") == 0) {
        c->advertise = val;
        return config_http_url(err, name, val);
    }
    const char **slot = strcmp(name, "--unix") == 0        ? &c->unix_path
                        : strcmp(name, "--state-dir") == 0 ? &c->state_dir
                        : strcmp(name, "--port-file") == 0 ? &c->port_file
                        : strcmp(name, "--runsc") == 0     ? &c->sandbox.runsc
                        : strcmp(name, "--isolation") == 0 ? &c->isolation_flag
                                                           : &c->import_base_url;
    *slot = val;
    return 0;
}

/* --name value or --name=value, each flag at most what its last use says. */
int config_load_flags(config *c, int argc, char **argv, config_err err, config_status *status)
{
    c->port = 8000;
    c->state_dir = "./airlockd-state";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        char name[32];
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        if (nl >= sizeof name)
            nl = sizeof name - 1;
        memcpy(name, a, nl);
        name[nl] = '\0';
        if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
            *status = CONFIG_HELP;
            return -1;
        }
        if (strcmp(a, "--migrate-only") == 0) {
            c->migrate_only = true;
            continue;
        }
        if (!known_flag(name)) {
            snprintf(err.buf, err.len, "unknown option '%s'", a);
            *status = CONFIG_UNKNOWN_FLAG;
            return -1;
        }
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        *status = CONFIG_BAD_FLAG;
        if (!val || !*val) {
            snprintf(err.buf, err.len, "%s needs a value", name);
            return -1;
        }
        if (set_flag(c, name, val, err))
            return -1;
    }
    *status = CONFIG_OK;
    if (!c->listen_host && !(c->listen_host = strdup("127.0.0.1"))) {
        *status = CONFIG_INVALID;
        return config_fail(err, "--listen", NULL, "out of memory");
    }
    return 0;
}
