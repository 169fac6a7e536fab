/* The router's reads of the fleet's database (router/view.h). */
#include "router/view.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void db_error(PGconn *c, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s", what, PQerrorMessage(c));
    for (char *s = err; *s; s++)
        if (*s == '\n' || *s == '\t')
            *s = ' ';
}

/* A name HAProxy takes as a server name as it is. */
static bool server_name_ok(const char *id)
{
    size_t n = strlen(id);
    return n > 0 && n < 64 && strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n;
}

/* "http://host:port" (a trailing / allowed) into host:port. */
static bool addr_of(const char *url, char *out, size_t outlen)
{
    if (strncmp(url, "http://", 7) != 0)
        return false;
    const char *h = url + 7;
    size_t n = strcspn(h, "/");
    if (n == 0 || n >= outlen || (h[n] && strcmp(h + n, "/") != 0) || !memchr(h, ':', n))
        return false;
    memcpy(out, h, n);
    out[n] = '\0';
    return strspn(out, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.:") == n;
}

int router_read_nodes(PGconn *c, router_node **out, size_t *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    PGresult *res = PQexec(c, "SELECT id, slot, url, agent_port, state FROM nodes WHERE state <> 'dead' ORDER BY slot");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        db_error(c, "reading the nodes table", err, errlen);
        PQclear(res);
        return -1;
    }
    int rows = PQntuples(res);
    router_node *v = calloc(rows > 0 ? (size_t)rows : 1, sizeof *v);
    if (!v) {
        PQclear(res);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < rows; i++) {
        const char *id = PQgetvalue(res, i, 0), *url = PQgetvalue(res, i, 2);
        if (!server_name_ok(id) || !addr_of(url, v[i].addr, sizeof v[i].addr)) {
            snprintf(err, errlen, "node '%.63s': its id must be letters, digits, '-', '_' or '.' and its URL "
                                  "http://HOST:PORT (the router cannot route to '%.100s')", id, url);
            free(v);
            PQclear(res);
            return -1;
        }
        snprintf(v[i].id, sizeof v[i].id, "%s", id);
        v[i].slot = atoi(PQgetvalue(res, i, 1));
        v[i].agent_port = atoi(PQgetvalue(res, i, 3));
        snprintf(v[i].state, sizeof v[i].state, "%s", PQgetvalue(res, i, 4));
    }
    PQclear(res);
    *out = v;
    *n = (size_t)rows;
    return 0;
}

int router_read_moves(PGconn *c, router_move **out, size_t *n, char *err, size_t errlen)
{
    *out = NULL;
    *n = 0;
    /* COLLATE "C": the order strcmp gives, which the router's merge relies on */
    PGresult *res = PQexec(c, "SELECT id, backend FROM airlock_moved_sessions() ORDER BY id COLLATE \"C\"");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        db_error(c, "reading the moved sessions", err, errlen);
        PQclear(res);
        return -1;
    }
    int rows = PQntuples(res);
    router_move *v = calloc(rows > 0 ? (size_t)rows : 1, sizeof *v);
    if (!v) {
        PQclear(res);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t k = 0;
    for (int i = 0; i < rows; i++) {
        const char *id = PQgetvalue(res, i, 0), *be = PQgetvalue(res, i, 1);
        if (!session_id_valid(id) || strlen(be) != ROUTER_BACKEND_LEN - 1)
            continue;
        memcpy(v[k].id, id, sizeof v[k].id);
        memcpy(v[k].backend, be, sizeof v[k].backend);
        k++;
    }
    PQclear(res);
    *out = v;
    *n = k;
    return 0;
}

int router_write_map(const char *path, const router_move *m, size_t n, char *err, size_t errlen)
{
    /* a name of this process's own: the follower and a one-off `router sync` (fleet.sh drain)
     * may write the map at the same time, and one's rename must not take the other's file */
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "the map path is too long");
        return -1;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
        return -1;
    }
    fchmod(fileno(f), 0644); /* HAProxy reads it, whatever user it runs as */
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s %s\n", m[i].id, m[i].backend);
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
