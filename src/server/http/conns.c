/* The connection table and its sweeper: one mutex, a free list, a tally per client address,
 * and per lane two doubly linked queues (slot indices) of the connections owing headers, in
 * the order they entered them. A connection past its deadline, or evicted, is shut down
 * (SO_LINGER 0 first when a response is being sent, so unsent bytes are dropped instead of
 * lingering as an orphan socket); MHD then sees the end, closes it and frees its slot
 * through conns_close. */
#include "http/conns.h"
#include "log/log.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SWEEP_MS 200
/* Evictions are logged at most once a minute (with the count so far). */
#define EVICT_LOG_MS 60000
/* A connection over its address's cap only waits for its headers to get a 503. */
#define OVER_CAP_HEADER_MS 2000

int64_t conns_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool conns_init(conn_table *t, size_t cap, unsigned per_client, unsigned evict_at, unsigned header_timeout_s)
{
    memset(t, 0, sizeof *t);
    t->slots = calloc(cap, sizeof *t->slots);
    if (!t->slots || !tally_init(&t->clients, cap)) {
        free(t->slots);
        t->slots = NULL;
        return false;
    }
    t->cap = cap;
    t->per_client = per_client;
    t->evict_at = evict_at;
    for (int l = 0; l < CONN_LANES; l++)
        for (int q = 0; q < WAIT_QUEUES; q++)
            t->lanes[l].head[q] = t->lanes[l].tail[q] = -1;
    t->header_ms = (int64_t)header_timeout_s * 1000;
    t->free_head = -1;
    for (size_t i = cap; i-- > 0;) {
        t->slots[i].fd = -1;
        t->slots[i].queue = -1;
        t->slots[i].next_free = t->free_head;
        t->free_head = (int)i;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->wake, NULL);
    return true;
}

/* IPv4 as its IPv6-mapped form, so both spellings of one address count together. */
static bool address_key(const struct sockaddr *sa, unsigned char key[TALLY_KEY])
{
    memset(key, 0, TALLY_KEY);
    if (sa && sa->sa_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return true;
    }
    if (sa && sa->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
        return true;
    }
    return false;
}

/* ---- the queue of connections owing headers (under t->mu) ---- */

static void wait_push(conn_table *t, conn_slot *s, int queue)
{
    conn_lane *l = &t->lanes[s->lane];
    int i = (int)(s - t->slots);
    s->queue = queue;
    s->wait_prev = l->tail[queue];
    s->wait_next = -1;
    if (l->tail[queue] >= 0)
        t->slots[l->tail[queue]].wait_next = i;
    else
        l->head[queue] = i;
    l->tail[queue] = i;
}

static void wait_drop(conn_table *t, conn_slot *s)
{
    if (s->queue < 0)
        return;
    conn_lane *l = &t->lanes[s->lane];
    if (s->wait_prev >= 0)
        t->slots[s->wait_prev].wait_next = s->wait_next;
    else
        l->head[s->queue] = s->wait_next;
    if (s->wait_next >= 0)
        t->slots[s->wait_next].wait_prev = s->wait_prev;
    else
        l->tail[s->queue] = s->wait_prev;
    s->queue = -1;
}

static void cut(conn_table *t, conn_slot *s)
{
    if (s->phase == PHASE_RESPOND) {
        struct linger lg = {1, 0};
        if (setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) != 0 && errno != EBADF)
            log_warn("http: SO_LINGER: %s", strerror(errno));
    }
    if (shutdown(s->fd, SHUT_RDWR) != 0 && errno != ENOTCONN)
        log_warn("http: shutdown: %s", strerror(errno));
    s->cut = true;
    wait_drop(t, s);
    atomic_fetch_add(s->phase == PHASE_HEADERS ? &t->cut_headers
                     : s->phase == PHASE_BODY  ? &t->cut_body
                                               : &t->cut_response, 1);
}

/* The lane is near its cap: the oldest silent connection goes, else the oldest talking one. */
static void evict_oldest(conn_table *t, conn_lane *l, int64_t now)
{
    int i = l->head[WAIT_SILENT] >= 0 ? l->head[WAIT_SILENT] : l->head[WAIT_TALKING];
    if (i < 0)
        return;
    cut(t, &t->slots[i]);
    unsigned long n = atomic_fetch_add(&t->evicted, 1) + 1;
    if (now - t->evict_said_ms >= EVICT_LOG_MS || n == 1) {
        t->evict_said_ms = now;
        log_warn("http: %u connections open on a listening socket: closing the oldest owing their "
                 "request headers (%lu so far)",
                 l->open, n);
    }
}

conn_slot *conns_open(conn_table *t, int fd, const struct sockaddr *sa)
{
    unsigned char key[TALLY_KEY];
    bool counted = address_key(sa, key);
    int64_t now = conns_now_ms();
    pthread_mutex_lock(&t->mu);
    if (t->free_head < 0) {
        pthread_mutex_unlock(&t->mu);
        return NULL;
    }
    conn_slot *s = &t->slots[t->free_head];
    uint64_t n = counted ? tally_add(&t->clients, key, 1, UINT64_MAX) : 0;
    if (counted && n == 0) { /* cannot happen: the tally has room for every connection */
        pthread_mutex_unlock(&t->mu);
        return NULL;
    }
    t->free_head = s->next_free;
    s->fd = fd;
    s->phase = PHASE_HEADERS;
    s->counted = counted;
    s->over_cap = counted && n > t->per_client;
    s->cut = false;
    s->deadline_ms = now + (s->over_cap && t->header_ms > OVER_CAP_HEADER_MS ? OVER_CAP_HEADER_MS : t->header_ms);
    memcpy(s->addr, key, TALLY_KEY);
    s->lane = counted ? CONN_TCP : CONN_LOCAL;
    conn_lane *l = &t->lanes[s->lane];
    if (++l->open > t->evict_at)
        evict_oldest(t, l, now);
    wait_push(t, s, WAIT_SILENT);
    pthread_mutex_unlock(&t->mu);
    return s;
}

void conns_close(conn_table *t, conn_slot *s)
{
    pthread_mutex_lock(&t->mu);
    if (s->counted)
        tally_sub(&t->clients, s->addr, 1);
    wait_drop(t, s);
    t->lanes[s->lane].open--;
    s->phase = PHASE_FREE;
    s->fd = -1;
    s->counted = false;
    s->next_free = t->free_head;
    t->free_head = (int)(s - t->slots);
    pthread_mutex_unlock(&t->mu);
}

void conns_talking(conn_table *t, conn_slot *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&t->mu);
    if (s->queue == WAIT_SILENT) {
        wait_drop(t, s);
        wait_push(t, s, WAIT_TALKING);
    }
    pthread_mutex_unlock(&t->mu);
}

void conns_set(conn_table *t, conn_slot *s, conn_phase phase, int64_t deadline_ms)
{
    if (!s)
        return;
    pthread_mutex_lock(&t->mu);
    /* owing headers again (kept alive): to the back of the silent queue */
    wait_drop(t, s);
    if (phase == PHASE_HEADERS && !s->cut)
        wait_push(t, s, WAIT_SILENT);
    s->phase = phase;
    s->deadline_ms = deadline_ms;
    pthread_mutex_unlock(&t->mu);
}

void conns_cut_all(conn_table *t)
{
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].phase != PHASE_FREE)
            t->slots[i].deadline_ms = 0;
    pthread_mutex_unlock(&t->mu);
}

static void *sweeper_main(void *arg)
{
    conn_table *t = arg;
    pthread_mutex_lock(&t->mu);
    while (!t->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += SWEEP_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!t->stop && pthread_cond_timedwait(&t->wake, &t->mu, &until) == 0) {
        }
        int64_t now = conns_now_ms();
        /* MHD frees a slot (conns_close, under this lock) before it closes the fd, so every
         * fd seen here is still the connection's own */
        for (size_t i = 0; i < t->cap && !t->stop; i++) {
            conn_slot *s = &t->slots[i];
            if (s->phase != PHASE_FREE && s->phase != PHASE_HANDLER && !s->cut && s->deadline_ms <= now)
                cut(t, s);
        }
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

bool conns_start(conn_table *t)
{
    t->sweeping = pthread_create(&t->sweeper, NULL, sweeper_main, t) == 0;
    return t->sweeping;
}

void conns_free(conn_table *t)
{
    if (!t->slots)
        return;
    if (t->sweeping) {
        pthread_mutex_lock(&t->mu);
        t->stop = true;
        pthread_cond_broadcast(&t->wake);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->sweeper, NULL);
    }
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->mu);
    tally_free(&t->clients);
    free(t->slots);
    t->slots = NULL;
}
