/* airlockd: a local Airlock-compatible sandbox server. Flags, startup, signals, shutdown. */
#include "app.h"

#include "api/routes.h"
#include "disk/pool.h"
#include "http/http.h"
#include "sandbox/guard.h"
#include "store/state_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The signal handler can only reach the main thread through this pipe. */
static int signal_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(signal_pipe[1], &b, 1) < 0) {
        /* nothing more can be done inside a signal handler */
    }
    errno = saved;
}

/* After the grace period (or a second signal) running requests are stopped: this long for
 * their commands to be killed and their answers sent. */
#define CANCEL_WAIT_S 10

/* Waits until no request is in flight (true), or seconds pass or another signal comes. */
static bool wait_for_requests(http_server *srv, double seconds)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (http_in_flight(srv) == 0)
            return true;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 >= seconds)
            return false;
        struct pollfd p = {.fd = signal_pipe[0], .events = POLLIN};
        if (poll(&p, 1, 50) > 0) {
            unsigned char sig;
            if (read(signal_pipe[0], &sig, 1) == 1)
                return false;
        }
    }
}

/* SIGTERM / SIGINT: stop accepting, let what runs finish within the grace period (a second
 * signal cuts it short), stop what is left, then close. false when requests still run at
 * the end (the caller must not free what they use). */
static bool stop_serving(http_server *srv, const config *cfg)
{
    http_quiesce(srv);
    if (cfg->unix_path)
        unlink(cfg->unix_path);
    unsigned running = http_in_flight(srv);
    if (running)
        fprintf(stderr, "airlockd: waiting up to %.0f s for %u running requests (a second signal stops them now)\n",
                cfg->shutdown_grace, running);
    if (!wait_for_requests(srv, cfg->shutdown_grace)) {
        fprintf(stderr, "airlockd: stopping %u running requests\n", http_in_flight(srv));
        http_cancel(srv);
        wait_for_requests(srv, CANCEL_WAIT_S);
    }
    return http_stop(srv);
}

/* A caught (not ignored) SIGPIPE resets to the default in commands we start, so shell
 * pipelines inside the sandbox behave normally. */
static void forget_warm(void *ctx, const char *session_id)
{
    warm_forget(ctx, session_id);
}

/* Spares (domain/warm.h): their disks are the registry's, their sandboxes the warm pool's. */
static int spare_disk_make(void *ctx, char *id, size_t id_len, char **workspace)
{
    app *a = ctx;
    return a->reg ? registry_make_spare_disk(a->reg, id, id_len, workspace) : -1;
}

static void spare_disk_drop(void *ctx, const char *id)
{
    app *a = ctx;
    if (a->reg)
        registry_drop_spare_disk(a->reg, id);
}

static bool spare_adopt(void *ctx, size_t tenant, char *id, size_t id_len, char **workspace)
{
    app *a = ctx;
    return warm_adopt_spare(a->warm, tenants_get(a->tenants, tenant)->name, id, id_len, workspace);
}

static void spares_drop_all(void *ctx)
{
    warm_drop_spares(((app *)ctx)->warm);
}

static void on_sigpipe(int sig)
{
    (void)sig;
}

static void usage(FILE *f)
{
    fputs("usage: airlockd [--listen HOST:PORT] [--unix PATH] [--state-dir DIR] [--port-file FILE]\n"
          "                [--runsc PATH] [--import-base-url URL] [--help]\n"
          "\n"
          "  --listen HOST:PORT  TCP address (default 127.0.0.1:8000; port 0 = any free port)\n"
          "  --unix PATH         also listen on a unix socket\n"
          "  --state-dir DIR     sessions, workspace disks and sandbox state (default\n"
          "                      ./airlockd-state); a new or empty directory, or one airlockd made\n"
          "  --port-file FILE    write the bound TCP port here once listening\n"
          "  --runsc PATH        gVisor runsc binary (default $AIRLOCK_RUNSC, then PATH)\n"
          "  --import-base-url URL  where /import downloads archives (default\n"
          "                      $AIRLOCK_IMPORT_BASE_URL, then https://github.com)\n"
          "\n"
          "Environment: SANDBOX_API_KEYS=tenant:key[,tenant:key] and/or SANDBOX_API_KEY (tenant\n"
          "'default'; at least one key is required), SANDBOX_SESSION_TTL (1800 s),\n"
          "SANDBOX_WORKSPACE_QUOTA_MB (512), SANDBOX_TENANT_LIMITS[_FILE], SANDBOX_EGRESS_POLICY[_FILE],\n"
          "SANDBOX_REQUIRE_GVISOR=1, SANDBOX_KEYSTORE=sqlite:PATH (self-service keys),\n"
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
          "SANDBOX_EGRESS_IDLE_SECONDS (300).\n",
          f);
}

static int parse_listen(const char *arg, config *c, char **host_store)
{
    const char *colon = strrchr(arg, ':');
    if (!colon)
        return -1;
    char *end;
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (errno || *end || colon[1] == '\0' || port > 65535)
        return -1;
    size_t hl = (size_t)(colon - arg);
    if (hl >= 2 && arg[0] == '[' && arg[hl - 1] == ']') { /* [::1]:8000 */
        arg++;
        hl -= 2;
    }
    *host_store = hl ? strndup(arg, hl) : strdup("127.0.0.1");
    if (!*host_store)
        return -1;
    c->listen_host = *host_store;
    c->port = (unsigned)port;
    return 0;
}

static int write_port_file(const char *path, unsigned port)
{
    /* written to a temporary name and renamed, so a reader never sees a partial number */
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp", path) < 0)
        return -1;
    FILE *f = fopen(tmp, "w");
    int rc = -1;
    if (f) {
        int w = fprintf(f, "%u\n", port);
        if (fclose(f) == 0 && w > 0 && rename(tmp, path) == 0)
            rc = 0;
    }
    if (rc)
        unlink(tmp);
    free(tmp);
    return rc;
}

/* Descriptors 0-2 stay taken (by /dev/null when closed at start), so no client connection
 * is ever one of them: a zero cancel_fd in sandbox_opts can then mean "none". */
static void keep_std_fds(void)
{
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) != -1)
            continue;
        int n = open("/dev/null", O_RDWR);
        if (n >= 0 && n != fd) {
            (void)dup2(n, fd);
            close(n);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], GUARD_OPTION) == 0)
        return sbx_guard_main(argv[2]); /* airlockd's own guard (sandbox/guard.h) */
    keep_std_fds();
    config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen_host = "127.0.0.1";
    cfg.port = 8000;
    cfg.state_dir = "./airlockd-state";
    char *host_store = NULL, err[512] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        const char *eq = strchr(a, '=');
        char name[32];
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        if (nl >= sizeof name)
            nl = sizeof name - 1;
        memcpy(name, a, nl);
        name[nl] = '\0';
        if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        bool known = strcmp(name, "--listen") == 0 || strcmp(name, "--unix") == 0 ||
                     strcmp(name, "--state-dir") == 0 || strcmp(name, "--port-file") == 0 ||
                     strcmp(name, "--runsc") == 0 || strcmp(name, "--import-base-url") == 0;
        if (!known) {
            fprintf(stderr, "airlockd: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val || !*val) {
            fprintf(stderr, "airlockd: %s needs a value\n", name);
            return 2;
        }
        if (strcmp(name, "--listen") == 0) {
            free(host_store);
            host_store = NULL;
            if (parse_listen(val, &cfg, &host_store) != 0) {
                fprintf(stderr, "airlockd: --listen: expected HOST:PORT, got '%s'\n", val);
                return 2;
            }
        } else if (strcmp(name, "--unix") == 0) {
            cfg.unix_path = val;
        } else if (strcmp(name, "--state-dir") == 0) {
            cfg.state_dir = val;
        } else if (strcmp(name, "--port-file") == 0) {
            cfg.port_file = val;
        } else if (strcmp(name, "--import-base-url") == 0) {
            cfg.import_base_url = val;
        } else {
            cfg.runsc = val;
        }
    }
    if (config_load_env(&cfg, err, sizeof err) != 0) {
        fprintf(stderr, "airlockd: invalid configuration: %s\n", err);
        config_free(&cfg);
        free(host_store);
        return 2;
    }

    /* every connection and every running sandbox holds descriptors (tree walks hold at most
     * FS_WALK_OPEN_DIRS + 3): use what the hard limit allows */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    /* everything airlockd creates is private (0600 files, 0700 directories) unless it gives
     * a mode on purpose; sandboxed commands get the usual 022 back (sandbox/proc.c) */
    umask(077);

    int status = 1, lock_fd = -1;
    char *state = NULL, *state_file = NULL;
    app a;
    memset(&a, 0, sizeof a);
    http_server *srv = NULL;
    disk_pool *disk = NULL;
    /* first: nothing is created in, or removed from, a directory airlockd does not own */
    if (state_dir_claim(cfg.state_dir, &state, &lock_fd, err, sizeof err) != 0) {
        fprintf(stderr, "airlockd: %s\n", err);
        goto out;
    }
    cfg.state_dir = state;
    a.cfg = &cfg;
    atomic_init(&a.exec_seq, 1);
    a.sb = sandbox_backend_open(state, cfg.runsc, cfg.require_gvisor, err, sizeof err);
    if (!a.sb) {
        fprintf(stderr, "airlockd: no isolation backend: %s\n", err);
        goto out;
    }
    /* if this process is killed, the guard thaws and removes what its cgroups hold */
    const char *cg_root = sandbox_backend_cgroup_root(a.sb);
    if (cg_root && sbx_guard_spawn(cg_root, lock_fd, err, sizeof err) != 0)
        fprintf(stderr, "airlockd: %s (a killed airlockd's sandboxes then wait for the next start)\n", err);
    if (cfg.audit_path && !(a.audit = audit_open(cfg.audit_path, cfg.audit_retention_days, err, sizeof err))) {
        fprintf(stderr, "airlockd: %s\n", err);
        goto out;
    }
    if (cfg.keystore_path && !(a.keys = keystore_open(cfg.keystore_path, err, sizeof err))) {
        fprintf(stderr, "airlockd: %s\n", err);
        goto out;
    }
    disk_limits dl = {.total_cap = cfg.disk_total_bytes, .reserve = cfg.disk_reserve_bytes};
    if (!(disk = disk_pool_open(state, &dl, err, sizeof err))) {
        fprintf(stderr, "airlockd: %s\n", err);
        goto out;
    }
    if (!cfg.session_state_off && !cfg.session_state && asprintf(&state_file, "%s/sessions.json", state) < 0) {
        state_file = NULL;
        fprintf(stderr, "airlockd: out of memory\n");
        goto out;
    }
    if (cfg.egress.test_ca && sandbox_backend_trust_ca(a.sb, cfg.egress.test_ca, err, sizeof err) != 0) {
        fprintf(stderr, "airlockd: AIRLOCK_TEST_EGRESS_CA: %s\n", err);
        goto out;
    }
    a.egress = egress_open(&cfg.egress, state, err, sizeof err);
    if (!a.egress) {
        fprintf(stderr, "airlockd: egress: %s\n", err);
        goto out;
    }
    a.tenants = tenants_new(&cfg);
    a.lim = a.tenants ? limits_new(a.tenants) : NULL;
    a.slots = a.tenants ? slots_new(cfg.max_running, tenants_capacity(a.tenants), 4 * cfg.max_running,
                                    cfg.queue_seconds * 1000)
                        : NULL;
    if (!a.lim || !a.slots) {
        fprintf(stderr, "airlockd: out of memory\n");
        goto out;
    }
    warm_settings ws = {.max_ready = cfg.warm_max, .idle_seconds = cfg.warm_idle_seconds,
                        .max_booting = cfg.warm_booting, .spares = cfg.warm_new,
                        .disks = {.make = spare_disk_make, .drop = spare_disk_drop, .ctx = &a}};
    a.warm = warm_new(a.sb, &ws, err, sizeof err);
    if (!a.warm && err[0]) {
        fprintf(stderr, "airlockd: %s\n", err);
        goto out;
    }
    /* after the sandbox backend removed the predecessor's sandboxes, which held workspaces */
    registry_opts ro = {.state_dir = state, .ttl = cfg.session_ttl, .quota_bytes = cfg.quota_bytes,
                        .state_file = cfg.session_state_off ? NULL : cfg.session_state ? cfg.session_state : state_file,
                        .tenants = a.tenants, .disk = disk};
    if (!(a.reg = registry_new(&ro, err, sizeof err))) {
        fprintf(stderr, "airlockd: %s\n", err);
        goto out;
    }
    /* a deleted or expired session's proxy pass, listeners and tunnels end with it */
    registry_set_remove_hook(a.reg, egress_forget_session, a.egress);
    /* a session's sandbox booted ahead goes before its disk is unmounted */
    registry_set_destroy_hook(a.reg, forget_warm, a.warm);
    registry_spares sp = {.adopt = spare_adopt, .drop_all = spares_drop_all, .ctx = &a};
    if (a.warm)
        registry_set_spares(a.reg, &sp);

    if (pipe2(signal_pipe, O_CLOEXEC) != 0) {
        perror("airlockd: pipe");
        goto out;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_sigpipe;
    sigaction(SIGPIPE, &sa, NULL);

    http_options ho = {.host = cfg.listen_host, .port = cfg.port, .unix_path = cfg.unix_path,
                       .admit = api_admit, .handler = api_handle, .cls = &a, .limits = cfg.http};
    srv = http_start(&ho, err, sizeof err);
    if (!srv) {
        fprintf(stderr, "airlockd: %s\n", err);
        goto out;
    }
    if (registry_start_reaper(a.reg) != 0) {
        fprintf(stderr, "airlockd: cannot start the session reaper\n");
        goto out;
    }
    if (cfg.port_file && write_port_file(cfg.port_file, http_port(srv)) != 0) {
        fprintf(stderr, "airlockd: --port-file %s: %s\n", cfg.port_file, strerror(errno));
        goto out;
    }
    fprintf(stderr, "airlockd listening on http://%s:%u%s%s (isolation: %s)\n", cfg.listen_host,
            http_port(srv), cfg.unix_path ? " and unix:" : "", cfg.unix_path ? cfg.unix_path : "",
            sandbox_backend_name(a.sb));

    unsigned char sig = 0;
    while (read(signal_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    fprintf(stderr, "airlockd: signal %d, shutting down\n", sig);
    status = 0;
    bool stopped = stop_serving(srv, &cfg);
    srv = NULL;
    /* spares are no session's: their sandboxes and disks go; sessions are saved and their
     * disks unmounted (those still in use once their request ends) */
    warm_drop_spares(a.warm);
    registry_shutdown(a.reg);
    if (!stopped) {
        /* a handler is still inside a command or a download: freeing what it uses would be
         * worse than leaving; its sandbox dies with this process (PR_SET_PDEATHSIG) */
        fprintf(stderr, "airlockd: requests did not end in time; exiting without cleanup\n");
        warm_abandon(a.warm); /* frozen, they would outlive this process */
        if (cfg.port_file)
            unlink(cfg.port_file);
        _exit(status);
    }
out:
    if (srv && cfg.unix_path)
        unlink(cfg.unix_path);
    if (srv && !http_stop(srv))
        _exit(status);
    warm_drop_spares(a.warm); /* their disks are the registry's */
    registry_free(a.reg);     /* before egress: removing sessions tells egress */
    a.reg = NULL;
    warm_free(a.warm);        /* after the sessions, whose removal forgets their sandboxes */
    disk_pool_close(disk);
    egress_close(a.egress);
    limits_free(a.lim);
    slots_free(a.slots);
    tenants_free(a.tenants);
    audit_close(a.audit);
    keystore_close(a.keys);
    if (a.sb)
        sandbox_backend_close(a.sb);
    if (cfg.port_file && status == 0)
        unlink(cfg.port_file);
    config_free(&cfg);
    free(state);
    free(state_file);
    free(host_store);
    if (lock_fd >= 0)
        close(lock_fd); /* the state directory is free for the next server */
    return status;
}
