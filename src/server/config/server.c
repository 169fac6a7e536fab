/* The server's own sections of the settings: sessions (TTL, quota, where they are saved), the
 * HTTP layer's limits and the shutdown grace, the host-wide command cap, the sandboxes booted
 * ahead, the workspace disks, /import, and where the sandbox backend finds its programs. */
#include "config/internal.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
#define DEFAULT_IMPORT_BASE_URL "https://github.com"

static long cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n;
}

/* A session's size unless it asks for another: memory, CPUs (in steps of 0.1), processes. */
static int load_session_size(config *c, const config_src *src)
{
    long memory_mb, processes;
    double cpus;
    if (config_var_whole(src, "SANDBOX_SESSION_MEMORY_MB", SANDBOX_MEMORY_MB, 128, 1024 * 1024, "MB", &memory_mb) ||
        config_var_whole(src, "SANDBOX_SESSION_MAX_PROCESSES", SANDBOX_MAX_PROCESSES, 8, 1000000, "processes",
                         &processes) ||
        config_var_positive(src, "SANDBOX_SESSION_CPUS", SANDBOX_CPU_PERCENT / 100.0, &cpus))
        return -1;
    double tenths = cpus * 10;
    long whole = (long)(tenths + 0.5); /* cpus > 0 here */
    if (cpus < 0.1 || cpus > 1024 || tenths - (double)whole > 1e-6 || (double)whole - tenths > 1e-6)
        return config_fail(src->err, "SANDBOX_SESSION_CPUS", NULL, "must be a number of CPUs from 0.1 to 1024 in steps of 0.1");
    c->session_size = (sandbox_size){.memory_mb = (unsigned)memory_mb, .cpu_percent = (unsigned)whole * 10,
                                     .max_processes = (unsigned)processes};
    return 0;
}

/* Idle time, workspace quota, a session's size, and SANDBOX_SESSION_STATE (a file, or off). */
static int load_sessions(config *c, const config_src *src)
{
    double mb;
    if (config_var_positive(src, "SANDBOX_SESSION_TTL", 1800, &c->session_ttl) ||
        config_var_positive(src, "SANDBOX_PAUSED_TTL", 604800, &c->paused_ttl) ||
        config_var_positive(src, "SANDBOX_WORKSPACE_QUOTA_MB", 512, &mb) || load_session_size(c, src))
        return -1;
    if (mb > 1e9)
        return config_fail(src->err, "SANDBOX_WORKSPACE_QUOTA_MB", NULL, "too large");
    c->quota_bytes = (long long)(mb * 1048576.0);
    const char *state = config_var(src, "SANDBOX_SESSION_STATE");
    c->session_state_off = state && strcmp(state, "off") == 0;
    c->session_state = c->session_state_off ? NULL : state;
    c->snapshot_dir = config_var(src, "SANDBOX_SNAPSHOT_DIR");
    if (c->snapshot_dir && c->snapshot_dir[0] != '/')
        return config_fail(src->err, "SANDBOX_SNAPSHOT_DIR", c->snapshot_dir, "must be an absolute path");
    return 0;
}

/* SANDBOX_IMPORT_MAX_MB and the archive download base URL (the flag first). */
static int load_import(config *c, const config_src *src)
{
    if (config_var_int(src, "SANDBOX_IMPORT_MAX_MB", 100, 1, 1000000, "MB", &c->import_max_mb))
        return -1;
    if (!c->import_base_url) {
        const char *env = config_var(src, "AIRLOCK_IMPORT_BASE_URL");
        c->import_base_url = env ? env : DEFAULT_IMPORT_BASE_URL;
    }
    return config_http_url(src->err, "AIRLOCK_IMPORT_BASE_URL / --import-base-url", c->import_base_url);
}

static int var_unsigned(const config_src *src, const char *name, unsigned *v, long lo, long hi, const char *unit)
{
    long out;
    if (config_var_whole(src, name, (long)*v, lo, hi, unit, &out))
        return -1;
    *v = (unsigned)out;
    return 0;
}

/* The HTTP layer's limits and the shutdown grace period (README "Limits"). */
static int load_http(config *c, const config_src *src)
{
    http_limits *l = &c->http;
    http_limits_default(l);
    long rate_kb, memory_mb, grace;
    if (var_unsigned(src, "SANDBOX_MAX_CONNECTIONS", &l->max_connections, 16, 1000000, "connections") ||
        var_unsigned(src, "SANDBOX_MAX_CONNECTIONS_PER_CLIENT", &l->max_per_client, 1, 1000000, "connections") ||
        var_unsigned(src, "SANDBOX_HEADER_TIMEOUT", &l->header_timeout_s, 1, 3600, "seconds") ||
        var_unsigned(src, "SANDBOX_TRANSFER_TIMEOUT", &l->transfer_timeout_s, 1, 3600, "seconds") ||
        config_var_whole(src, "SANDBOX_MIN_TRANSFER_RATE_KB", (long)(l->min_rate / 1024), 1, 10000000,
                         "KiB per second", &rate_kb) ||
        config_var_whole(src, "SANDBOX_BODY_MEMORY_MB", (long)(l->body_memory >> 20), 1, 1000000, "MB", &memory_mb) ||
        var_unsigned(src, "SANDBOX_REQUEST_THREADS", &l->quick_threads, 1, 1024, "threads") ||
        var_unsigned(src, "SANDBOX_COMMAND_THREADS", &l->long_threads, 1, 1024, "threads") ||
        var_unsigned(src, "SANDBOX_REQUEST_QUEUE", &l->queue, 1, 100000, "requests") ||
        config_var_whole(src, "SANDBOX_SHUTDOWN_GRACE", DEFAULT_SHUTDOWN_GRACE, 0, 86400, "seconds", &grace))
        return -1;
    l->min_rate = (size_t)rate_kb * 1024;
    l->body_memory = (size_t)memory_mb << 20;
    c->shutdown_grace = (double)grace;
    return 0;
}

/* The host-wide command cap and queue, the output budget and the read limit (ours). */
static int load_capacity(config *c, const config_src *src)
{
    long out_kb, read_mb;
    if (config_var_int(src, "SANDBOX_MAX_RUNNING", DEFAULT_RUNNING_PER_CPU * cpus(), 1, 100000, "commands",
                       &c->max_running) ||
        config_var_int(src, "SANDBOX_QUEUE_SECONDS", DEFAULT_QUEUE_SECONDS, 0, 3600, "seconds", &c->queue_seconds) ||
        config_var_whole(src, "SANDBOX_OUTPUT_MAX_KB", DEFAULT_OUTPUT_MAX_KB, 1, 1024 * 1024, "KB", &out_kb) ||
        config_var_whole(src, "SANDBOX_READ_MAX_MB", DEFAULT_READ_MAX_MB, 1, 1024, "MB", &read_mb))
        return -1;
    c->output_limit = (size_t)out_kb * 1024u;
    c->read_limit = (size_t)read_mb * 1024u * 1024u;
    return 0;
}

/* Sandboxes booted ahead (ours): how many at most, and how long one may wait unused. */
static int load_warm(config *c, const config_src *src)
{
    c->warm_booting = (int)cpus();
    return config_var_int(src, "SANDBOX_WARM_MAX", DEFAULT_WARM_PER_CPU * cpus(), 0, 1024, "sandboxes", &c->warm_max) ||
                   config_var_int(src, "SANDBOX_WARM_IDLE_SECONDS", DEFAULT_WARM_IDLE_SECONDS, 1, 86400, "seconds",
                                  &c->warm_idle_seconds) ||
                   config_var_int(src, "SANDBOX_WARM_NEW", DEFAULT_WARM_NEW, 0, 4, "sandboxes", &c->warm_new) ||
                   config_var_int(src, "SANDBOX_RESTORE_AHEAD", 1, 0, 1, "sandboxes", &c->restore_ahead)
               ? -1
               : 0;
}

/* Templates (ours): builds at once, a build step's wall clock, the apt sources and suite. */
static int load_templates(config *c, const config_src *src)
{
    c->template_sources = config_var(src, "SANDBOX_TEMPLATE_SOURCES");
    c->template_suite = config_var(src, "SANDBOX_TEMPLATE_SUITE");
    c->template_bases = config_var(src, "SANDBOX_TEMPLATE_BASES");
    if (c->template_bases && c->template_bases[0] != '/')
        return config_fail(src->err, "SANDBOX_TEMPLATE_BASES", c->template_bases, "must be an absolute path");
    if (c->template_suite) {
        size_t n = strlen(c->template_suite);
        bool ok = n > 0 && n < 64;
        for (size_t i = 0; ok && i < n; i++) {
            char ch = c->template_suite[i];
            ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.';
        }
        if (!ok)
            return config_fail(src->err, "SANDBOX_TEMPLATE_SUITE", c->template_suite,
                               "must be a release name such as bookworm ([a-z0-9.-], under 64)");
    }
    return config_var_int(src, "SANDBOX_TEMPLATE_BUILDS", 1, 1, 64, "builds", &c->template_builds) ||
                   config_var_int(src, "SANDBOX_TEMPLATE_BUILD_TIMEOUT", 900, 30, 86400, "seconds",
                                  &c->template_build_timeout)
               ? -1
               : 0;
}

/* The workspace disks: the cap on all images (0: from the free space) and the host reserve. */
static int load_disk(config *c, const config_src *src)
{
    return config_var_megabytes(src, "SANDBOX_DISK_TOTAL_MB", 0, 1, 1000000000L, &c->disk_total_bytes) ||
                   config_var_megabytes(src, "SANDBOX_DISK_RESERVE_MB", 1024LL * 1048576LL, 0, 1000000000L,
                                        &c->disk_reserve_bytes)
               ? -1
               : 0;
}

int config_load_server(config *c, const config_src *src)
{
    return load_sessions(c, src) || load_import(c, src) || load_http(c, src) || load_capacity(c, src) ||
                   load_warm(c, src) || load_templates(c, src) || load_disk(c, src)
               ? -1
               : 0;
}

static const char *const isolations[] = {"gvisor", "bubblewrap", "auto", NULL};

/* The isolation: --isolation, else SANDBOX_ISOLATION, else SANDBOX_REQUIRE_GVISOR (1: gvisor,
 * 0: auto, the fallback allowed as before), else gvisor. A typo must not silently allow the
 * weaker bubblewrap: only the listed values, and SANDBOX_REQUIRE_GVISOR=1 with a weaker
 * isolation is refused. */
static int load_isolation(config *c, const config_src *src)
{
    sandbox_settings *s = &c->sandbox;
    const char *rq = config_var(src, "SANDBOX_REQUIRE_GVISOR");
    bool require = false;
    if (rq && config_switch(src->err, "SANDBOX_REQUIRE_GVISOR", rq, "refuse to run without gVisor", &require))
        return -1;
    const char *name = c->isolation_flag ? "--isolation" : "SANDBOX_ISOLATION";
    const char *iso = c->isolation_flag ? c->isolation_flag : config_var(src, name);
    int kind = SANDBOX_ISOLATION_GVISOR;
    if (iso) {
        if (config_choice(src->err, name, iso, isolations, &kind))
            return -1;
        snprintf(c->isolation_by, sizeof c->isolation_by, "%s%s%s", name, c->isolation_flag ? " " : "=", iso);
    } else if (rq) {
        kind = require ? SANDBOX_ISOLATION_GVISOR : SANDBOX_ISOLATION_AUTO;
        snprintf(c->isolation_by, sizeof c->isolation_by, "SANDBOX_REQUIRE_GVISOR=%s", rq);
    }
    if (require && kind != SANDBOX_ISOLATION_GVISOR)
        return config_fail(src->err, "SANDBOX_REQUIRE_GVISOR", NULL, "1 refuses the weaker bubblewrap that %s asks for",
                           c->isolation_by);
    s->isolation = (sandbox_isolation)kind;
    s->isolation_by = c->isolation_by[0] ? c->isolation_by : NULL;
    return 0;
}

/* Where the backend finds runsc (the flag first), the waiter and bwrap, and the isolation. */
int config_load_sandbox(config *c, const config_src *src)
{
    sandbox_settings *s = &c->sandbox;
    if (!s->runsc)
        s->runsc = config_var(src, "AIRLOCK_RUNSC");
    s->waiter = config_var(src, "AIRLOCK_WAITER");
    s->agent = config_var(src, "AIRLOCK_AGENT");
    s->search_path = config_var(src, "PATH");
    /* ours: where a command runs (docs/server.md "What a command runs in") */
    const char *mode = config_var(src, "SANDBOX_EXEC_MODE");
    if (mode && strcmp(mode, "session") != 0 && strcmp(mode, "command") != 0)
        return config_fail(src->err, "SANDBOX_EXEC_MODE", mode, "must be session or command");
    s->session_mode = !mode || strcmp(mode, "session") == 0; /* session unless told command */
    return load_isolation(c, src);
}
