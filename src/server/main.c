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
    char err[512] = "";
    switch (config_load(&cfg, argc, argv, environ, err, sizeof err)) {
    case CONFIG_OK:
        break;
    case CONFIG_HELP:
        config_usage(stdout);
        config_free(&cfg);
        return 0;
    case CONFIG_UNKNOWN_FLAG:
        fprintf(stderr, "airlockd: %s\n", err);
        config_usage(stderr);
        config_free(&cfg);
        return 2;
    case CONFIG_BAD_FLAG:
        fprintf(stderr, "airlockd: %s\n", err);
        config_free(&cfg);
        return 2;
    case CONFIG_INVALID:
        fprintf(stderr, "airlockd: invalid configuration: %s\n", err);
        config_free(&cfg);
        return 2;
    }

    /* every connection and every running sandbox holds descriptors (tree walks hold at most
     * FS_WALK_OPEN_DIRS + 3): use what the hard limit allows */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    umask(022);

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
    a.cfg = &cfg;
    a.state_dir = state;
    atomic_init(&a.exec_seq, 1);
    a.sb = sandbox_backend_open(state, &cfg.sandbox, err, sizeof err);
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
    if (lock_fd >= 0)
        close(lock_fd); /* the state directory is free for the next server */
    return status;
}
