/* The connection table (private to http/): every open connection's phase and absolute
 * deadline, the count of connections per client address, and the sweeper thread that cuts
 * a connection past its deadline. MHD's own timeouts restart with every byte; these do not. */
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
} conn_slot;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;          /* ends the sweeper */
    conn_slot *slots;
    size_t cap;
    int free_head;
    tally clients;
    unsigned per_client;
    int64_t header_ms;
    pthread_t sweeper;
    bool sweeping, stop;
    atomic_ulong cut_headers, cut_body, cut_response;
} conn_table;

int64_t conns_now_ms(void);

/* cap connections at most; per_client: the soft per-address cap. false when out of memory. */
bool conns_init(conn_table *t, size_t cap, unsigned per_client, unsigned header_timeout_s);
/* Starts the sweeper; false when the thread cannot start. */
bool conns_start(conn_table *t);
/* Stops the sweeper and frees the table (no connection may be left). */
void conns_free(conn_table *t);

/* A new connection (fd, peer address sa or NULL): its slot, in the header phase; NULL when
 * the table is full. Addresses other than IPv4/IPv6 (unix sockets) are not counted. */
conn_slot *conns_open(conn_table *t, int fd, const struct sockaddr *sa);
/* The connection is closing (MHD has not closed the fd yet): the slot is free again. */
void conns_close(conn_table *t, conn_slot *s);
/* Moves s to phase with an absolute deadline (ignored for PHASE_HANDLER). */
void conns_set(conn_table *t, conn_slot *s, conn_phase phase, int64_t deadline_ms);
/* Shutting down: every connection not running a handler is cut at the next sweep. */
void conns_cut_all(conn_table *t);

#endif
