/* LISTEN on channels of a pool from one thread and one connection (store/pg_listen.h). */
#include "store/pg_listen.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAKE_MS 200  /* how often the thread looks at `stopping` and at new channels */
#define MAX_SUBS 8   /* listeners a pool's connection serves */

/* The listening connection of one pool, with every listener on it. */
typedef struct hub {
    pg_pool *pool;
    pthread_mutex_t mu; /* subs, gen; held while a notification is handed out */
    struct pg_listener *subs[MAX_SUBS];
    int gen; /* changes with each listener added: the thread LISTENs again */
    atomic_bool stopping;
    pthread_t thread;
    struct hub *next;
} hub;

struct pg_listener {
    hub *h;
    char channel[64];
    pg_notify_fn fn;
    void *ctx;
};

static pthread_mutex_t hubs_mu = PTHREAD_MUTEX_INITIALIZER;
static hub *hubs;

static void nap_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Every listener's channel LISTENed on c (h->mu held); false when the connection failed. */
static bool listen_all(hub *h, PGconn *c)
{
    for (int i = 0; i < MAX_SUBS; i++) {
        if (!h->subs[i])
            continue;
        char sql[96];
        snprintf(sql, sizeof sql, "LISTEN %s", h->subs[i]->channel);
        PGresult *res = PQexec(c, sql);
        bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
        PQclear(res);
        if (!ok)
            return false;
    }
    return true;
}

/* Each listener told (h->mu held): of channel's payload, or (channel NULL) that notifications
 * may have been missed. */
static void hand_out(hub *h, const char *channel, const char *payload)
{
    for (int i = 0; i < MAX_SUBS; i++) {
        pg_listener *l = h->subs[i];
        if (l && (!channel || strcmp(l->channel, channel) == 0))
            l->fn(l->ctx, channel ? payload : NULL);
    }
}

static void *listen_main(void *arg)
{
    hub *h = arg;
    PGconn *c = NULL;
    int listened = -1;
    while (!atomic_load(&h->stopping)) {
        if (!c) {
            c = pg_connect(h->pool);
            if (PQstatus(c) != CONNECTION_OK) {
                PQfinish(c);
                c = NULL;
                for (int i = 0; i < 1000 / WAKE_MS && !atomic_load(&h->stopping); i++)
                    nap_ms(WAKE_MS);
                continue;
            }
            listened = -1;
        }
        pthread_mutex_lock(&h->mu);
        if (listened != h->gen) { /* connected again, or a listener added */
            bool ok = listen_all(h, c);
            if (ok) {
                listened = h->gen;
                hand_out(h, NULL, NULL); /* whatever was sent while not listening is unknown */
            }
            pthread_mutex_unlock(&h->mu);
            if (!ok) {
                PQfinish(c);
                c = NULL;
                nap_ms(WAKE_MS);
            }
            continue;
        }
        pthread_mutex_unlock(&h->mu);
        struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
        int n = poll(&pfd, 1, WAKE_MS);
        if (n < 0 || (n > 0 && !PQconsumeInput(c)) || PQstatus(c) != CONNECTION_OK) {
            PQfinish(c);
            c = NULL;
            pthread_mutex_lock(&h->mu);
            hand_out(h, NULL, NULL);
            pthread_mutex_unlock(&h->mu);
            continue;
        }
        for (PGnotify *m; (m = PQnotifies(c)) != NULL; PQfreemem(m)) {
            pthread_mutex_lock(&h->mu);
            hand_out(h, m->relname, m->extra);
            pthread_mutex_unlock(&h->mu);
        }
    }
    PQfinish(c);
    return NULL;
}

/* The pool's hub, started when it has none (hubs_mu held); NULL when it cannot start. */
static hub *hub_of(pg_pool *p)
{
    for (hub *h = hubs; h; h = h->next)
        if (h->pool == p)
            return h;
    hub *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->pool = p;
    pthread_mutex_init(&h->mu, NULL);
    if (pthread_create(&h->thread, NULL, listen_main, h) != 0) {
        pthread_mutex_destroy(&h->mu);
        free(h);
        return NULL;
    }
    h->next = hubs;
    hubs = h;
    return h;
}

pg_listener *pg_listen_start(pg_pool *p, const char *channel, pg_notify_fn fn, void *ctx)
{
    size_t n = strlen(channel);
    if (n == 0 || n >= 64 || strspn(channel, "abcdefghijklmnopqrstuvwxyz_0123456789") != n)
        return NULL;
    pg_listener *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    snprintf(l->channel, sizeof l->channel, "%s", channel);
    l->fn = fn;
    l->ctx = ctx;
    pthread_mutex_lock(&hubs_mu);
    hub *h = hub_of(p);
    int slot = -1;
    if (h) {
        pthread_mutex_lock(&h->mu);
        for (int i = 0; i < MAX_SUBS && slot < 0; i++)
            if (!h->subs[i])
                slot = i;
        if (slot >= 0) {
            h->subs[slot] = l;
            h->gen++;
            l->h = h;
        }
        pthread_mutex_unlock(&h->mu);
    }
    pthread_mutex_unlock(&hubs_mu);
    if (slot < 0) {
        free(l);
        return NULL;
    }
    return l;
}

void pg_listen_stop(pg_listener *l)
{
    if (!l)
        return;
    hub *h = l->h;
    pthread_mutex_lock(&hubs_mu);
    pthread_mutex_lock(&h->mu); /* no notification is being handed to it after this */
    bool last = true;
    for (int i = 0; i < MAX_SUBS; i++) {
        if (h->subs[i] == l)
            h->subs[i] = NULL;
        else if (h->subs[i])
            last = false;
    }
    pthread_mutex_unlock(&h->mu);
    if (last) { /* the pool's connection goes with its last listener */
        for (hub **pp = &hubs; *pp; pp = &(*pp)->next)
            if (*pp == h) {
                *pp = h->next;
                break;
            }
    }
    pthread_mutex_unlock(&hubs_mu);
    if (last) {
        atomic_store(&h->stopping, true);
        pthread_join(h->thread, NULL);
        pthread_mutex_destroy(&h->mu);
        free(h);
    }
    free(l);
}
