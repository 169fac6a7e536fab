/* The router's follower (router/follow.h): one database connection that LISTENs and reads, and
 * HAProxy's runtime API for every change. */
#include "router/follow.h"

#include "log/log.h"
#include "router/haproxy_api.h"
#include "router/view.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHANNEL "airlock_router"
/* runtime API commands sent in one connection at most (HAProxy reads a line of up to its
 * buffer size, 16 kB by default) */
#define BATCH 100
/* the map file is rewritten at most this often while moves are notified */
#define MAP_WRITE_MS 1000

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static long long mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

typedef struct {
    pg_pool *db;
    const router_follow_opts *o;
    PGconn *conn;
    router_node *nodes; /* as last applied; NULL before the first read */
    size_t n_nodes;
    bool nodes_read;
    bool moves_stale;   /* a move was notified since the map file was written */
    long long map_written_ms;
} follower;

/* Commands gathered into batches of BATCH, each sent in one connection. */
typedef struct {
    char *buf;
    size_t len, cap;
    int count;
    bool failed;
} batch;

static void batch_flush(follower *fw, batch *b)
{
    if (b->count == 0)
        return;
    char err[256], *answer = NULL;
    if (haproxy_api(fw->o->stats_socket, b->buf, &answer, err, sizeof err) != 0) {
        log_warn("router: %s", err);
        b->failed = true;
    } else if (answer && (strstr(answer, "No such") || strstr(answer, "Unknown"))) {
        log_warn("router: HAProxy refused a change (%.200s): a node HAProxy's configuration lacks needs it "
                 "printed again (airlockd router config) and a reload", answer);
    }
    free(answer);
    b->len = 0;
    b->count = 0;
}

static void batch_add(follower *fw, batch *b, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void batch_add(follower *fw, batch *b, const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (n <= 0 || (size_t)n >= sizeof cmd)
        return;
    if (b->len + (size_t)n + 2 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->len + (size_t)n + 2)
            cap *= 2;
        char *bigger = realloc(b->buf, cap);
        if (!bigger) {
            b->failed = true;
            return;
        }
        b->buf = bigger;
        b->cap = cap;
    }
    if (b->count > 0)
        b->buf[b->len++] = ';';
    memcpy(b->buf + b->len, cmd, (size_t)n + 1);
    b->len += (size_t)n;
    if (++b->count >= BATCH)
        batch_flush(fw, b);
}

static bool batch_end(follower *fw, batch *b)
{
    batch_flush(fw, b);
    free(b->buf);
    return !b->failed;
}

static int cmp_move(const void *a, const void *b)
{
    return strcmp(((const router_move *)a)->id, ((const router_move *)b)->id);
}

/* HAProxy's map as it is now ("show map": "<ref> <key> <value>" lines), sorted by id. */
static int haproxy_moves(follower *fw, router_move **out, size_t *n)
{
    char cmd[4200], err[256], *answer = NULL;
    snprintf(cmd, sizeof cmd, "show map %s", fw->o->map);
    *out = NULL;
    *n = 0;
    if (haproxy_api(fw->o->stats_socket, cmd, &answer, err, sizeof err) != 0) {
        log_warn("router: %s", err);
        return -1;
    }
    size_t cap = 64, k = 0;
    router_move *v = malloc(cap * sizeof *v);
    if (!v) {
        free(answer);
        log_warn("router: out of memory");
        return -1;
    }
    for (char *line = answer, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char ref[40], id[64], be[64];
        if (sscanf(line, "%39s %63s %63s", ref, id, be) != 3 || !session_id_valid(id) ||
            strlen(be) >= sizeof v->backend)
            continue;
        if (k == cap) {
            router_move *bigger = realloc(v, cap * 2 * sizeof *v);
            if (!bigger) {
                free(v);
                free(answer);
                log_warn("router: out of memory");
                return -1;
            }
            v = bigger;
            cap *= 2;
        }
        memcpy(v[k].id, id, sizeof v[k].id);
        memcpy(v[k].backend, be, strlen(be) + 1); /* (its length checked above) */
        k++;
    }
    bool unknown = answer && strstr(answer, "Unknown map identifier");
    free(answer);
    if (unknown) {
        log_warn("router: HAProxy has no map %s (its configuration names another)", fw->o->map);
        free(v);
        return -1;
    }
    qsort(v, k, sizeof *v, cmp_move);
    *out = v;
    *n = k;
    return 0;
}

/* The moved sessions: HAProxy's map made what the database says (the difference applied),
 * and the map file rewritten for HAProxy's next start. */
static int sync_moves(follower *fw)
{
    router_move *want = NULL, *have = NULL;
    size_t nw = 0, nh = 0;
    char err[512];
    if (router_read_moves(fw->conn, &want, &nw, err, sizeof err) != 0) {
        char clean[512];
        pg_redact(fw->db, err, clean, sizeof clean);
        log_warn("router: %s", clean);
        return -1;
    }
    int rc = -1;
    if (haproxy_moves(fw, &have, &nh) == 0) {
        batch b = {0};
        const char *map = fw->o->map;
        size_t i = 0, j = 0;
        while (i < nw || j < nh) {
            int c = i == nw ? 1 : j == nh ? -1 : strcmp(want[i].id, have[j].id);
            if (c < 0) {
                batch_add(fw, &b, "add map %s %s %s", map, want[i].id, want[i].backend);
                i++;
            } else if (c > 0) {
                batch_add(fw, &b, "del map %s %s", map, have[j].id);
                j++;
            } else {
                if (strcmp(want[i].backend, have[j].backend) != 0)
                    batch_add(fw, &b, "set map %s %s %s", map, want[i].id, want[i].backend);
                i++;
                j++;
            }
        }
        rc = batch_end(fw, &b) ? 0 : -1;
    }
    if (router_write_map(fw->o->map, want, nw, err, sizeof err) != 0) {
        log_warn("router: the map file: %s", err);
        rc = -1;
    }
    if (rc == 0) {
        fw->moves_stale = false;
        fw->map_written_ms = mono_ms();
    }
    free(want);
    free(have);
    return rc;
}

/* One notice "s <id> <backend or ->": the session's route in HAProxy at once. */
static void apply_move(follower *fw, const char *id, const char *backend)
{
    if (!session_id_valid(id))
        return;
    char cmd[4400], err[256], *answer = NULL;
    const char *map = fw->o->map;
    if (strcmp(backend, "-") == 0) {
        snprintf(cmd, sizeof cmd, "del map %s %s", map, id);
    } else {
        if (strncmp(backend, "slot_", 5) != 0 || strlen(backend) != ROUTER_BACKEND_LEN - 1 ||
            strspn(backend + 5, "0123456789abcdef") != 2)
            return;
        snprintf(cmd, sizeof cmd, "set map %s %s %s", map, id, backend);
    }
    if (haproxy_api(fw->o->stats_socket, cmd, &answer, err, sizeof err) != 0) {
        log_warn("router: %s", err);
    } else if (strcmp(backend, "-") != 0 && answer && strstr(answer, "not found")) {
        /* a session moved for the first time: its entry is new */
        snprintf(cmd, sizeof cmd, "add map %s %s %s", map, id, backend);
        if (haproxy_api(fw->o->stats_socket, cmd, NULL, err, sizeof err) != 0)
            log_warn("router: %s", err);
    }
    free(answer);
    fw->moves_stale = true;
    log_info("router: session %s routed to %s", id, strcmp(backend, "-") == 0 ? "its own slot" : backend);
}

static const router_node *find_node(const router_node *v, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].id, id) == 0)
            return &v[i];
    return NULL;
}

static bool takes_new_sessions(const char *state)
{
    return strcmp(state, "active") == 0;
}

/* The nodes: each server's address and agent port where the database changed them, and no
 * new session for a node that takes none (its weight in `create`). */
static int sync_nodes(follower *fw)
{
    router_node *now = NULL;
    size_t n = 0;
    char err[512];
    if (router_read_nodes(fw->conn, &now, &n, err, sizeof err) != 0) {
        char clean[512];
        pg_redact(fw->db, err, clean, sizeof clean);
        log_warn("router: %s", clean);
        return -1;
    }
    batch b = {0};
    for (size_t i = 0; i < n; i++) {
        const router_node *was = fw->nodes_read ? find_node(fw->nodes, fw->n_nodes, now[i].id) : NULL;
        char host[128];
        snprintf(host, sizeof host, "%s", now[i].addr);
        char *colon = strrchr(host, ':');
        if (!colon)
            continue;
        *colon = '\0';
        const char *port = colon + 1;
        if (!was || strcmp(was->addr, now[i].addr) != 0) {
            batch_add(fw, &b, "set server create/%s addr %s port %s", now[i].id, host, port);
            batch_add(fw, &b, "set server any/%s addr %s port %s", now[i].id, host, port);
            for (size_t j = 0; j < n; j++)
                batch_add(fw, &b, "set server slot_%02x/%s addr %s port %s", now[j].slot, now[i].id, host, port);
            if (was)
                log_info("router: node %s now at %s", now[i].id, now[i].addr);
        }
        if (now[i].agent_port > 0 && (!was || was->agent_port != now[i].agent_port))
            batch_add(fw, &b, "set server create/%s agent-port %d", now[i].id, now[i].agent_port);
        bool takes = takes_new_sessions(now[i].state);
        if (!takes && (!was || takes_new_sessions(was->state)))
            batch_add(fw, &b, "set server create/%s weight 0", now[i].id);
        else if (takes && was && !takes_new_sessions(was->state))
            batch_add(fw, &b, "set server create/%s weight 100", now[i].id);
        if (was && strcmp(was->state, now[i].state) != 0)
            log_info("router: node %s is %s", now[i].id, now[i].state);
    }
    bool ok = batch_end(fw, &b);
    free(fw->nodes);
    fw->nodes = now;
    fw->n_nodes = n;
    fw->nodes_read = ok;
    return ok ? 0 : -1;
}

/* A new connection that LISTENs, or NULL (said once a second at most). */
static PGconn *listen_conn(follower *fw)
{
    PGconn *c = pg_connect(fw->db);
    PGresult *res = PQstatus(c) == CONNECTION_OK ? PQexec(c, "LISTEN " CHANNEL) : NULL;
    bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok) {
        char clean[512];
        pg_redact(fw->db, PQerrorMessage(c), clean, sizeof clean);
        log_warn("router: the database: %s", clean);
        PQfinish(c);
        return NULL;
    }
    return c;
}

static void on_notice(follower *fw, const char *payload, bool *nodes_changed)
{
    char kind[4], id[64], backend[16];
    int k = sscanf(payload, "%3s %63s %15s", kind, id, backend);
    if (k == 3 && strcmp(kind, "s") == 0)
        apply_move(fw, id, backend);
    else if (k >= 2 && strcmp(kind, "n") == 0)
        *nodes_changed = true;
}

int router_sync_once(pg_pool *db, const router_follow_opts *o)
{
    follower fw = {.db = db, .o = o};
    if (!(fw.conn = listen_conn(&fw)))
        return 1;
    bool ok = sync_nodes(&fw) == 0;
    ok = sync_moves(&fw) == 0 && ok;
    PQfinish(fw.conn);
    free(fw.nodes);
    return ok ? 0 : 1;
}

int router_follow(pg_pool *db, const router_follow_opts *o)
{
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    follower fw = {.db = db, .o = o};
    long long next_reread = 0;
    log_info("router: following the fleet for HAProxy at %s (map %s)", o->stats_socket, o->map);
    while (!stopping) {
        if (!fw.conn && !(fw.conn = listen_conn(&fw))) {
            for (int i = 0; i < 10 && !stopping; i++)
                nanosleep(&(struct timespec){0, 100000000L}, NULL);
            continue;
        }
        long long now = mono_ms();
        if (now >= next_reread) {
            /* everything again: after a (re)connection, notices may have been missed */
            bool ok = sync_nodes(&fw) == 0;
            ok = sync_moves(&fw) == 0 && ok;
            next_reread = mono_ms() + (ok ? o->reread_s * 1000LL : 1000);
        } else if (fw.moves_stale && now - fw.map_written_ms >= MAP_WRITE_MS) {
            sync_moves(&fw);
        }
        struct pollfd p = {.fd = PQsocket(fw.conn), .events = POLLIN};
        long long wait = next_reread - mono_ms();
        if (fw.moves_stale && wait > MAP_WRITE_MS)
            wait = MAP_WRITE_MS;
        int r = poll(&p, 1, wait < 0 ? 0 : (int)wait);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 || (r > 0 && !PQconsumeInput(fw.conn)) || PQstatus(fw.conn) != CONNECTION_OK) {
            log_warn("router: the database connection was lost; reconnecting");
            PQfinish(fw.conn);
            fw.conn = NULL;
            next_reread = 0;
            continue;
        }
        bool nodes_changed = false;
        for (PGnotify *m; (m = PQnotifies(fw.conn)) != NULL; PQfreemem(m))
            on_notice(&fw, m->extra, &nodes_changed);
        if (nodes_changed)
            sync_nodes(&fw);
    }
    PQfinish(fw.conn);
    free(fw.nodes);
    log_info("router: stopped");
    return 0;
}
