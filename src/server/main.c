/* airlockd: a local Airlock-compatible sandbox server. Its start-up story: the settings, the
 * process, the server's parts, serving until a signal, the shutdown. */
#include "config/config.h"
#include "router/router.h"
#include "run/migrate.h"
#include "run/server.h"
#include "run/signals.h"
#include "sandbox/guard.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The flags and the environment into cfg: -1 to go on, else the exit status (--help: 0; a bad
 * flag or setting: 2, said on stderr). */
static int load_settings(config *cfg, int argc, char **argv)
{
    char err[512] = "";
    switch (config_load(cfg, argc, argv, environ, err, sizeof err)) {
    case CONFIG_OK:
        return -1;
    case CONFIG_HELP:
        config_usage(stdout);
        return 0;
    case CONFIG_UNKNOWN_FLAG:
        fprintf(stderr, "airlockd: %s\n", err);
        config_usage(stderr);
        return 2;
    case CONFIG_BAD_FLAG:
        fprintf(stderr, "airlockd: %s\n", err);
        return 2;
    case CONFIG_INVALID:
        break;
    }
    fprintf(stderr, "airlockd: invalid configuration: %s\n", err);
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
    fprintf(stderr, "airlockd: signal %d, shutting down\n", sig);
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
    int status = load_settings(&cfg, argc, argv);
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
        fprintf(stderr, "airlockd: %s\n", s.err);
    else
        status = serve(&s);
    server_close(&s, status);
    config_free(&cfg);
    return status;
}
