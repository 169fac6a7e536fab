/* `airlockd router config|follow` (router/router.h): its flags, the database URL (from a file,
 * never a command line), and the two jobs. */
#include "router/router.h"

#include "log/log.h"
#include "router/follow.h"
#include "router/haproxy_config.h"
#include "router/view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_REREAD_S 5

static int usage(FILE *out)
{
    fprintf(out,
            "usage: airlockd router config --bind HOST:PORT --stats-socket PATH --map PATH\n"
            "                             [--database-url-file FILE]\n"
            "       airlockd router follow --stats-socket PATH --map PATH [--database-url-file FILE]\n"
            "                             [--reread SECONDS]\n"
            "       airlockd router sync --stats-socket PATH --map PATH [--database-url-file FILE]\n"
            "  config  prints HAProxy's configuration from the nodes table to stdout and writes the map\n"
            "          of moved sessions it names\n"
            "  follow  keeps the running HAProxy's moved sessions and servers current over its runtime\n"
            "          API (the stats socket), told by the database, re-reading every SECONDS (5)\n"
            "  sync    one pass of follow, then exits (0: HAProxy is current)\n"
            "The database URL: --database-url-file, else SANDBOX_DATABASE_URL_FILE, else\n"
            "SANDBOX_DATABASE_URL (docs/fleet.md).\n");
    return 2;
}

/* The first line of file, trimmed, malloc'd; NULL with a message in err (never its content). */
static char *read_first_line(const char *file, char *err, size_t errlen)
{
    FILE *f = fopen(file, "r");
    char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    if (n == 0) {
        snprintf(err, errlen, "cannot read the database URL file %s", file);
        return NULL;
    }
    buf[n] = '\0';
    char *s = buf + strspn(buf, " \t");
    s[strcspn(s, " \t\r\n")] = '\0';
    char *url = strdup(s);
    memset(buf, 0, sizeof buf);
    if (!url)
        snprintf(err, errlen, "out of memory");
    return url;
}

typedef struct {
    const char *bind, *stats_socket, *map, *url_file;
    int reread_s;
} router_args;

static int parse(int argc, char **argv, router_args *a)
{
    a->reread_s = DEFAULT_REREAD_S;
    for (int i = 2; i < argc; i++) {
        const char *flag = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        static const char *const known[] = {"--bind", "--stats-socket", "--map", "--database-url-file", "--reread"};
        bool is_known = false;
        for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
            is_known = is_known || strcmp(flag, known[k]) == 0;
        if (!is_known) {
            log_error("router: unknown flag %s", flag);
            return -1;
        }
        if (!val) {
            log_error("router: %s needs a value", flag);
            return -1;
        }
        if (strcmp(flag, "--bind") == 0)
            a->bind = val;
        else if (strcmp(flag, "--stats-socket") == 0)
            a->stats_socket = val;
        else if (strcmp(flag, "--map") == 0)
            a->map = val;
        else if (strcmp(flag, "--database-url-file") == 0)
            a->url_file = val;
        else if (strcmp(flag, "--reread") == 0) {
            char *end;
            long s = strtol(val, &end, 10);
            if (*end || s < 1 || s > 3600) {
                log_error("router: --reread: seconds from 1 to 3600, got '%s'", val);
                return -1;
            }
            a->reread_s = (int)s;
        }
        i++;
    }
    return 0;
}

/* The database, checked to have the router's schema (a node migrates it; the router only reads). */
static pg_pool *open_db(const router_args *a)
{
    char err[512];
    const char *file = a->url_file ? a->url_file : getenv("SANDBOX_DATABASE_URL_FILE");
    char *url = file ? read_first_line(file, err, sizeof err) : getenv("SANDBOX_DATABASE_URL") ? strdup(getenv("SANDBOX_DATABASE_URL")) : NULL;
    if (!url) {
        log_error("router: %s", file ? err : "no database URL (--database-url-file)");
        return NULL;
    }
    pg_pool *db = pg_open(url, 1, err, sizeof err);
    memset(url, 0, strlen(url));
    free(url);
    if (!db) {
        log_error("router: %s", err);
        return NULL;
    }
    char *have = pg_value(db, "SELECT to_regproc('airlock_moved_sessions') IS NOT NULL", 0, NULL);
    bool ok = have && strcmp(have, "t") == 0;
    free(have);
    if (!ok) {
        log_error("router: the database has no fleet schema the router knows (start a node of this "
                  "version first: it migrates the schema)");
        pg_close(db);
        return NULL;
    }
    return db;
}

static int run_config(pg_pool *db, const router_args *a)
{
    PGconn *c = pg_connect(db);
    router_node *nodes = NULL;
    router_move *moves = NULL;
    size_t nn = 0, nm = 0;
    char err[512] = "", clean[512];
    int rc = 1;
    if (PQstatus(c) != CONNECTION_OK)
        snprintf(err, sizeof err, "the database: %s", PQerrorMessage(c));
    else if (router_read_nodes(c, &nodes, &nn, err, sizeof err) == 0 && nn == 0)
        snprintf(err, sizeof err, "no node in the nodes table (start a node first)");
    else if (nn > 0 && router_read_moves(c, &moves, &nm, err, sizeof err) == 0 &&
             router_write_map(a->map, moves, nm, err, sizeof err) == 0) {
        router_config_opts o = {.bind = a->bind, .stats_socket = a->stats_socket, .map = a->map};
        rc = router_print_config(stdout, &o, nodes, nn) == 0 ? 0 : 1;
        if (rc)
            snprintf(err, sizeof err, "cannot write the configuration");
    }
    if (rc) {
        pg_redact(db, err, clean, sizeof clean);
        log_error("router: %s", clean);
    }
    free(nodes);
    free(moves);
    PQfinish(c);
    return rc;
}

int router_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
        return argc < 2 ? usage(stderr) : (usage(stdout), 0);
    bool config = strcmp(argv[1], "config") == 0, follow = strcmp(argv[1], "follow") == 0,
         sync = strcmp(argv[1], "sync") == 0;
    router_args a = {0};
    if ((!config && !follow && !sync) || parse(argc, argv, &a) != 0)
        return usage(stderr);
    if (!a.stats_socket || !a.map || (config && !a.bind)) {
        log_error("router %s: --stats-socket and --map%s are needed", argv[1], config ? " and --bind" : "");
        return 2;
    }
    umask(022); /* the map file is HAProxy's to read */
    pg_pool *db = open_db(&a);
    if (!db)
        return 1;
    int rc;
    if (config) {
        rc = run_config(db, &a);
    } else {
        router_follow_opts o = {.stats_socket = a.stats_socket, .map = a.map, .reread_s = a.reread_s};
        rc = sync ? router_sync_once(db, &o) : router_follow(db, &o);
    }
    pg_close(db);
    return rc;
}
