/* A small pool of libpq connections: taken under a mutex, reset after a failure, the
 * password kept out of every message. Each connection prepares a statement the first time it
 * runs it and reuses that (parsing and planning were most of the database's CPU for the
 * fleet's short statements: docs/fleet.md "The cost of a call"). */
#include "store/pg.h"
#include "log/log.h"

#include "obs/metrics.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CONNS 16
/* after a failed connection, statements fail at once for this long instead of each waiting
 * for its own connection attempt (up to the connect timeout while the database is away) */
#define RETRY_AFTER_MS 1000
/* statements prepared per connection; beyond them a statement is parsed and planned each time */
#define STMT_CACHE 48

/* a statement prepared on a connection, named "airlock_<its index>" */
typedef struct {
    uint64_t hash;
    char *sql;
} prepared_stmt;

struct pg_pool {
    pthread_mutex_t mu;
    pthread_cond_t freed;
    char *url;
    char *password;              /* from the URL (redaction), or NULL */
    PGconn *conns[MAX_CONNS];
    bool busy[MAX_CONNS];
    prepared_stmt stmts[MAX_CONNS][STMT_CACHE]; /* each connection's, used by its holder only */
    unsigned nstmts[MAX_CONNS];
    unsigned n;
    atomic_bool reachable;
    atomic_llong last_log;       /* seconds: errors are logged at most once a second */
    atomic_llong down_until_ms;  /* monotonic: no new connection attempt before */
};

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

/* libpq's connection options: the URL expanded, a short connect timeout, our name. */
static PGconn *connect_url(const char *url)
{
    const char *keys[] = {"dbname", "connect_timeout", "application_name", "tcp_user_timeout", NULL};
    const char *vals[] = {url, "3", "airlockd", "5000", NULL};
    return PQconnectdbParams(keys, vals, 1);
}

void pg_redact(const pg_pool *p, const char *msg, char *out, size_t outlen)
{
    size_t o = 0, pl = p && p->password ? strlen(p->password) : 0;
    for (const char *s = msg; *s && o + 1 < outlen;) {
        if (pl && strncmp(s, p->password, pl) == 0) {
            for (const char *r = "***"; *r && o + 1 < outlen; r++)
                out[o++] = *r;
            s += pl;
            continue;
        }
        /* one line: libpq's "\n\t" between its sentences becomes one space */
        bool blank = *s == '\n' || *s == '\t';
        if (!blank || (o > 0 && out[o - 1] != ' '))
            out[o++] = blank ? ' ' : *s;
        s++;
    }
    while (o && out[o - 1] == ' ')
        o--;
    out[o] = '\0';
}

static void report_error(pg_pool *p, const char *what, const char *msg)
{
    long long now = (long long)time(NULL);
    if (atomic_exchange(&p->last_log, now) == now)
        return;
    char clean[512];
    pg_redact(p, msg, clean, sizeof clean);
    log_error("database: %s: %s", what, clean);
}

/* The password of url, or NULL (PQconninfoParse knows every way to write it). */
static char *url_password(const char *url)
{
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(url, &perr);
    PQfreemem(perr); /* may quote the URL: never shown */
    char *pw = NULL;
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "password") == 0 && o->val && *o->val)
            pw = strdup(o->val);
    PQconninfoFree(opts);
    return pw;
}

pg_pool *pg_open(const char *url, unsigned nconns, char *err, size_t errlen)
{
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(url, &perr);
    bool parsed = opts != NULL;
    PQfreemem(perr); /* may quote the URL: never shown */
    PQconninfoFree(opts);
    if (!parsed || (strncmp(url, "postgresql://", 13) != 0 && strncmp(url, "postgres://", 11) != 0)) {
        snprintf(err, errlen, "the database URL is not a valid postgresql:// URL");
        return NULL;
    }
    pg_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->url = strdup(url))) {
        free(p);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->password = url_password(url);
    p->n = nconns < 1 ? 1 : nconns > MAX_CONNS ? MAX_CONNS : nconns;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->freed, NULL);
    p->conns[0] = connect_url(url);
    if (PQstatus(p->conns[0]) != CONNECTION_OK) {
        char clean[400];
        pg_redact(p, PQerrorMessage(p->conns[0]), clean, sizeof clean);
        snprintf(err, errlen, "cannot connect to the database: %s", clean);
        pg_close(p);
        return NULL;
    }
    atomic_store(&p->reachable, true);
    return p;
}

/* Forgets connection i's prepared statements (a new or reset connection has none). */
static void forget_prepared(pg_pool *p, unsigned i)
{
    for (unsigned k = 0; k < p->nstmts[i]; k++)
        free(p->stmts[i][k].sql);
    p->nstmts[i] = 0;
}

void pg_close(pg_pool *p)
{
    if (!p)
        return;
    for (unsigned i = 0; i < MAX_CONNS; i++) {
        if (p->conns[i])
            PQfinish(p->conns[i]);
        forget_prepared(p, i);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->freed);
    if (p->url) {
        memset(p->url, 0, strlen(p->url));
        free(p->url);
    }
    if (p->password) {
        memset(p->password, 0, strlen(p->password));
        free(p->password);
    }
    free(p);
}

/* A free connection slot (waits while all are busy). */
static unsigned take(pg_pool *p)
{
    pthread_mutex_lock(&p->mu);
    for (;;) {
        for (unsigned i = 0; i < p->n; i++) {
            if (!p->busy[i]) {
                p->busy[i] = true;
                pthread_mutex_unlock(&p->mu);
                return i;
            }
        }
        pthread_cond_wait(&p->freed, &p->mu);
    }
}

static void give(pg_pool *p, unsigned i)
{
    pthread_mutex_lock(&p->mu);
    p->busy[i] = false;
    pthread_cond_signal(&p->freed);
    pthread_mutex_unlock(&p->mu);
}

/* The slot's connection, (re)connected; NULL when the database cannot be reached. */
static PGconn *conn_of(pg_pool *p, unsigned i)
{
    bool usable = p->conns[i] && PQstatus(p->conns[i]) == CONNECTION_OK;
    if (!usable && mono_ms() < atomic_load(&p->down_until_ms))
        return NULL;
    if (!p->conns[i] || PQstatus(p->conns[i]) != CONNECTION_OK)
        forget_prepared(p, i);
    if (!p->conns[i])
        p->conns[i] = connect_url(p->url);
    else if (PQstatus(p->conns[i]) != CONNECTION_OK)
        PQreset(p->conns[i]);
    if (PQstatus(p->conns[i]) != CONNECTION_OK) {
        report_error(p, "cannot connect", PQerrorMessage(p->conns[i]));
        atomic_store(&p->reachable, false);
        atomic_store(&p->down_until_ms, mono_ms() + RETRY_AFTER_MS);
        return NULL;
    }
    return p->conns[i];
}

static uint64_t text_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* The index of sql among connection i's prepared statements, preparing it if there is room;
 * -1 when it is not prepared (no room, or the database refused it: running it says why). */
static int prepared_index(pg_pool *p, unsigned i, PGconn *c, const char *sql, int nparams)
{
    uint64_t h = text_hash(sql);
    for (unsigned k = 0; k < p->nstmts[i]; k++)
        if (p->stmts[i][k].hash == h && strcmp(p->stmts[i][k].sql, sql) == 0)
            return (int)k;
    if (p->nstmts[i] == STMT_CACHE)
        return -1;
    char *copy = strdup(sql);
    if (!copy)
        return -1;
    char name[32];
    snprintf(name, sizeof name, "airlock_%u", p->nstmts[i]);
    PGresult *res = PQprepare(c, name, sql, nparams, NULL);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok) {
        free(copy);
        return -1;
    }
    p->stmts[i][p->nstmts[i]] = (prepared_stmt){.hash = h, .sql = copy};
    return (int)p->nstmts[i]++;
}

/* Runs sql on connection i, prepared when it can be. A prepared statement whose plan the
 * schema changed under it ("cached plan must not change result type", 0A000: another node
 * migrated) or that the server no longer has (26000: a pooler's DISCARD ALL) is dropped with
 * the others and the statement run once more as it is. */
static PGresult *run_on(pg_pool *p, unsigned i, PGconn *c, const char *sql, int nparams, const char *const *params)
{
    int k = prepared_index(p, i, c, sql, nparams);
    if (k < 0)
        return PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0);
    char name[32];
    snprintf(name, sizeof name, "airlock_%d", k);
    PGresult *res = PQexecPrepared(c, name, nparams, params, NULL, NULL, 0);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    if (state && (strcmp(state, "0A000") == 0 || strcmp(state, "26000") == 0) && PQstatus(c) == CONNECTION_OK) {
        PQclear(res);
        PQclear(PQexec(c, "DEALLOCATE ALL"));
        forget_prepared(p, i);
        res = PQexecParams(c, sql, nparams, NULL, params, NULL, NULL, 0);
    }
    return res;
}

PGresult *pg_query(pg_pool *p, const char *sql, int nparams, const char *const *params)
{
    unsigned i = take(p);
    PGconn *c = conn_of(p, i);
    PGresult *res = c ? run_on(p, i, c, sql, nparams, params) : NULL;
    if (c && PQstatus(c) == CONNECTION_BAD) {
        /* a connection the database closed (it restarted): one more try on a new one */
        PQclear(res);
        c = conn_of(p, i);
        res = c ? run_on(p, i, c, sql, nparams, params) : NULL;
    }
    ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (c && st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
        report_error(p, "statement failed", PQerrorMessage(c));
        PQclear(res);
        res = NULL;
    }
    if (c)
        atomic_store(&p->reachable, PQstatus(c) == CONNECTION_OK);
    if (!res)
        metrics_db_error();
    give(p, i);
    return res;
}

char *pg_value(pg_pool *p, const char *sql, int nparams, const char *const *params)
{
    PGresult *res = pg_query(p, sql, nparams, params);
    char *v = res && PQntuples(res) > 0 && !PQgetisnull(res, 0, 0) ? strdup(PQgetvalue(res, 0, 0)) : NULL;
    PQclear(res);
    return v;
}

int pg_exec_locked(pg_pool *p, long long lock_key, int (*fn)(PGconn *c, void *ctx, char *err, size_t errlen),
                   void *ctx, char *err, size_t errlen)
{
    unsigned i = take(p);
    PGconn *c = conn_of(p, i);
    int rc = -1;
    if (!c) {
        snprintf(err, errlen, "the database cannot be reached");
    } else {
        char sql[96];
        snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%lld)", lock_key);
        PGresult *res = PQexec(c, sql);
        bool locked = PQresultStatus(res) == PGRES_TUPLES_OK;
        PQclear(res);
        if (locked) {
            rc = fn(c, ctx, err, errlen);
            snprintf(sql, sizeof sql, "SELECT pg_advisory_unlock(%lld)", lock_key);
            PQclear(PQexec(c, sql));
        } else {
            pg_redact(p, PQerrorMessage(c), err, errlen);
        }
    }
    give(p, i);
    return rc;
}

PGconn *pg_connect(pg_pool *p)
{
    return connect_url(p->url);
}

bool pg_reachable(pg_pool *p)
{
    return atomic_load(&p->reachable);
}
