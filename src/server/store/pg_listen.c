/* LISTEN on one channel from a thread of its own (store/pg_listen.h). */
#include "store/pg_listen.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAKE_MS 200 /* how often the thread looks at `stopping` */

struct pg_listener {
    pg_pool *pool;
    char channel[64];
    pg_notify_fn fn;
    void *ctx;
    atomic_bool stopping;
    pthread_t thread;
};

static PGconn *listen_conn(pg_listener *l)
{
    PGconn *c = pg_connect(l->pool);
    char sql[96];
    snprintf(sql, sizeof sql, "LISTEN %s", l->channel);
    PGresult *res = PQstatus(c) == CONNECTION_OK ? PQexec(c, sql) : NULL;
    bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!ok) {
        PQfinish(c);
        return NULL;
    }
    return c;
}

static void nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static void *listen_main(void *arg)
{
    pg_listener *l = arg;
    PGconn *c = NULL;
    while (!atomic_load(&l->stopping)) {
        if (!c) {
            if (!(c = listen_conn(l))) {
                for (int i = 0; i < 1000 / WAKE_MS && !atomic_load(&l->stopping); i++)
                    nap_ms(WAKE_MS);
                continue;
            }
            l->fn(l->ctx, NULL); /* whatever was sent while it was not listening is unknown */
        }
        struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
        int n = poll(&pfd, 1, WAKE_MS);
        if (n < 0 || (n > 0 && !PQconsumeInput(c)) || PQstatus(c) != CONNECTION_OK) {
            PQfinish(c);
            c = NULL;
            l->fn(l->ctx, NULL);
            continue;
        }
        for (PGnotify *m; (m = PQnotifies(c)) != NULL; PQfreemem(m))
            l->fn(l->ctx, m->extra);
    }
    PQfinish(c);
    return NULL;
}

pg_listener *pg_listen_start(pg_pool *p, const char *channel, pg_notify_fn fn, void *ctx)
{
    size_t n = strlen(channel);
    if (n == 0 || n >= 64 || strspn(channel, "abcdefghijklmnopqrstuvwxyz_0123456789") != n)
        return NULL;
    pg_listener *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->pool = p;
    snprintf(l->channel, sizeof l->channel, "%s", channel);
    l->fn = fn;
    l->ctx = ctx;
    if (pthread_create(&l->thread, NULL, listen_main, l) != 0) {
        free(l);
        return NULL;
    }
    return l;
}

void pg_listen_stop(pg_listener *l)
{
    if (!l)
        return;
    atomic_store(&l->stopping, true);
    pthread_join(l->thread, NULL);
    free(l);
}
