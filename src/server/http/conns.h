/* The connection table (private to http/): every open connection's phase and absolute
 * deadline, the count of connections per client address, the sweeper thread that cuts a
 * connection past its deadline (MHD's own timeouts restart with every byte; these do not),
 * and, per listening socket, the connections still owing their request headers, oldest
 * first: near the cap, each new connection closes the oldest of them (see conns_open). */
#ifndef AIRLOCKD_HTTP_CONNS_H
#define AIRLOCKD_HTTP_CONNS_H

#include "http/tally.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef enum {
    PHASE_FREE,
    PHASE_HEADERS, /* waiting for a request's headers (new or kept-alive connection) */
    PHASE_BODY,    /* reading a request body */
    PHASE_HANDLER, /* a handler runs: no deadline (the handler has its own) */
    PHASE_RESPOND, /* sending a response */
} conn_phase;

typedef struct conn_slot {
    int fd;
    conn_phase phase;
    int64_t deadline_ms;          /* CLOCK_MONOTONIC */
    bool counted;                 /* counted under addr */
    bool over_cap;                /* past the per-client cap: refused once its headers are in */
    bool cut;                     /* the sweeper shut it down */
    unsigned char addr[TALLY_KEY];
    int next_free;
    int lane;                     /* its listening socket's: CONN_TCP or CONN_LOCAL */
    int queue;                    /* owing headers: WAIT_SILENT or WAIT_TALKING; else -1 */
    int wait_prev, wait_next;     /* in that queue of its lane */
} conn_slot;

/* Connections are counted per kind of listening socket: TCP (IPv4/IPv6 peers) and local
 * (the unix socket), each with its own cap. */
enum { CONN_TCP, CONN_LOCAL, CONN_LANES };

/* The connections owing headers, in two queues, oldest first: silent ones (nothing of their
 * next request yet: new or kept alive between requests) go before talking ones (a request
 * line in, its headers not complete). */
enum { WAIT_SILENT, WAIT_TALKING, WAIT_QUEUES };

typedef struct {
    unsigned open;                /* connections open, cut ones included until MHD closes them */
    int head[WAIT_QUEUES], tail[WAIT_QUEUES];
} conn_lane;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;          /* ends the sweeper */
    conn_slot *slots;
    size_t cap;
    int free_head;
    tally clients;
    unsigned per_client;
    unsigned evict_at;            /* per lane: from this many open, a newcomer evicts the oldest */
    conn_lane lanes[CONN_LANES];
    int64_t evict_said_ms;        /* the last log line about evictions */
    int64_t header_ms;
    pthread_t sweeper;
    bool sweeping, stop;
    atomic_ulong cut_headers, cut_body, cut_response, evicted;
} conn_table;

int64_t conns_now_ms(void);

/* cap connections at most; per_client: the soft per-address cap; evict_at: the open
 * connections of one lane from which a new one evicts the oldest owing headers (below the
 * daemon's own cap, so MHD keeps accepting). false when out of memory. */
bool conns_init(conn_table *t, size_t cap, unsigned per_client, unsigned evict_at, unsigned header_timeout_s);
/* Starts the sweeper; false when the thread cannot start. */
bool conns_start(conn_table *t);
/* Stops the sweeper and frees the table (no connection may be left). */
void conns_free(conn_table *t);

/* A new connection (fd, peer address sa or NULL): its slot, in the header phase; NULL when
 * the table is full. Addresses other than IPv4/IPv6 (unix sockets) are not counted per
 * address and go in the local lane. When its lane holds more than evict_at connections, one
 * owing its request headers is cut: the oldest silent one (new or idle between requests),
 * else the oldest talking one (trickling its headers). Under a flood the accept queue keeps
 * moving, and a client that sends its request at once is served: it talks, and new silent
 * connections go first. */
conn_slot *conns_open(conn_table *t, int fd, const struct sockaddr *sa);
/* The connection is closing (MHD has not closed the fd yet): the slot is free again. */
void conns_close(conn_table *t, conn_slot *s);
/* s's request line is in (its headers may still trickle): it is evicted after silent ones. */
void conns_talking(conn_table *t, conn_slot *s);
/* Moves s to phase with an absolute deadline (ignored for PHASE_HANDLER). */
void conns_set(conn_table *t, conn_slot *s, conn_phase phase, int64_t deadline_ms);
/* Shutting down: every connection not running a handler is cut at the next sweep. */
void conns_cut_all(conn_table *t);

#endif
