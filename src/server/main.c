/* airlockd: a local Airlock-compatible sandbox server. Its start-up story: the settings, the
 * process, the server's parts, serving until a signal, the shutdown. */
#include "config/config.h"
#include "log/log.h"
#include "router/router.h"
#include "run/migrate.h"
#include "run/server.h"
#include "run/signals.h"
#include "sandbox/guard.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The node id on every log line: in a fleet only (--node-id, default the host name, as
 * run/fleet.c names the node). */
static const char *log_node(const config *cfg, char *host, size_t cap)
{
    if (!cfg->database_url)
        return NULL;
    if (cfg->node_id)
        return cfg->node_id;
    host[cap - 1] = '\0';
    return gethostname(host, cap - 1) == 0 ? host : NULL;
}

/* The flags and the environment into cfg, and the logger set up from them: -1 to go on, else
 * the exit status (--help: 0; a bad flag or setting: 2, logged). */
static int load_settings(config *cfg, int argc, char **argv, char *host, size_t cap)
{
    char err[512] = "";
    config_status st = config_load(cfg, argc, argv, environ, err, sizeof err);
    switch (st) {
    case CONFIG_OK:
        log_setup(cfg->log_level, cfg->log_json, log_node(cfg, host, cap));
        return -1;
    case CONFIG_HELP:
        config_usage(stdout);
        return 0;
    case CONFIG_UNKNOWN_FLAG:
    case CONFIG_BAD_FLAG:
        log_error("%s", err);
        if (st == CONFIG_UNKNOWN_FLAG)
            config_usage(stderr); /* the usage text is for a person: not a log line */
        return 2;
    case CONFIG_INVALID:
        break;
    }
    log_setup(LV_INFO, cfg->log_json, NULL); /* the format asked for, when it was read before the error */
    log_error("invalid configuration: %s", err);
    return 2;
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

/* Every connection and every running sandbox holds descriptors (tree walks hold at most
 * FS_WALK_OPEN_DIRS + 3): use what the hard limit allows. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* Serves until SIGTERM or SIGINT, then stops; 0, or leaves the process when requests would
 * not end. */
static int serve(server *s)
{
    int sig = signals_wait();
    log_info("signal %d, shutting down", sig);
    if (!server_stop(s))
        server_abandon(s, 0);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], GUARD_OPTION) == 0)
        return sbx_guard_main(argv[2]); /* airlockd's own guard (sandbox/guard.h) */
    if (argc >= 2 && strcmp(argv[1], "router") == 0)
        return router_main(argc - 1, argv + 1); /* the fleet's router program (router/router.h) */
    keep_std_fds();
    config cfg;
    char host[HOST_NAME_MAX + 1];
    int status = load_settings(&cfg, argc, argv, host, sizeof host);
    if (status >= 0) {
        config_free(&cfg);
        return status;
    }
    if (cfg.migrate_only) {
        status = migrate_main(&cfg);
        config_free(&cfg);
        return status;
    }
    raise_fd_limit();
    /* everything airlockd creates is private (0600 files, 0700 directories) unless it gives
     * a mode on purpose; sandboxed commands get the usual 022 back (sandbox/proc.c) */
    umask(077);
    server s;
    status = 1;
    if (server_open(&s, &cfg) != 0 || server_listen(&s) != 0)
        log_error("%s", s.err);
    else
        status = serve(&s);
    server_close(&s, status);
    config_free(&cfg);
    return status;
}
