/* airlockd: a local Airlock-compatible sandbox server. Flags, startup, signals, shutdown. */
#include "app.h"

#include "api/routes.h"
#include "http/http.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

/* A caught (not ignored) SIGPIPE resets to the default in commands we start, so shell
 * pipelines inside the sandbox behave normally. */
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
          "  --state-dir DIR     workspaces and sandbox state (default ./airlockd-state)\n"
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

static int mkdir_p(const char *dir)
{
    char *p = strdup(dir);
    if (!p)
        return -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            free(p);
            return -1;
        }
        *s = '/';
    }
    int rc = mkdir(p, 0700) != 0 && errno != EEXIST ? -1 : 0;
    free(p);
    return rc;
}

int main(int argc, char **argv)
{
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
    umask(022);

    int status = 1;
    char *state = NULL;
    app a;
    memset(&a, 0, sizeof a);
    http_server *srv = NULL;
    if (mkdir_p(cfg.state_dir) != 0 || chmod(cfg.state_dir, 0700) != 0 ||
        !(state = realpath(cfg.state_dir, NULL))) {
        fprintf(stderr, "airlockd: --state-dir %s: %s\n", cfg.state_dir, strerror(errno));
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
    if (cfg.audit_path && !(a.audit = audit_open(cfg.audit_path, cfg.audit_retention_days, err, sizeof err))) {
        fprintf(stderr, "airlockd: %s\n", err);
        goto out;
    }
    if (cfg.keystore_path && !(a.keys = keystore_open(cfg.keystore_path, err, sizeof err))) {
        fprintf(stderr, "airlockd: %s\n", err);
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
    a.reg = registry_new(state, cfg.session_ttl, err, sizeof err);
    a.tenants = tenants_new(&cfg);
    a.lim = a.tenants ? limits_new(a.tenants) : NULL;
    if (!a.reg || !a.lim) {
        fprintf(stderr, "airlockd: %s\n", a.reg ? "out of memory" : err);
        goto out;
    }
    /* a deleted or expired session's proxy pass, listeners and tunnels end with it */
    registry_set_remove_hook(a.reg, egress_forget_session, a.egress);

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
                       .handler = api_handle, .body_limit = api_body_limit, .cls = &a};
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
    /* wipe workspaces first so they are gone even if a running command delays the rest */
    registry_remove_all(a.reg);
out:
    http_stop(srv);
    registry_free(a.reg); /* before egress: removing sessions tells egress */
    egress_close(a.egress);
    limits_free(a.lim);
    tenants_free(a.tenants);
    audit_close(a.audit);
    keystore_close(a.keys);
    if (a.sb)
        sandbox_backend_close(a.sb);
    if (cfg.unix_path && srv)
        unlink(cfg.unix_path);
    if (cfg.port_file && status == 0)
        unlink(cfg.port_file);
    config_free(&cfg);
    free(state);
    free(host_store);
    return status;
}
