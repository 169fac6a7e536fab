/* One request of a drain to another node (drain/peer.c): the fleet's secret as a bearer token
 * (never in a URL or a log), a time bound, an abort flag, and what came back. */
#ifndef AIRLOCKD_DRAIN_PEER_H
#define AIRLOCKD_DRAIN_PEER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* Takes the next bytes of the answer's body; false stops the request. */
typedef bool (*peer_body_fn)(void *ctx, const char *data, size_t n);

typedef struct {
    const char *method, *url, *secret;
    const char *header;        /* one more request header ("Name: value"), or NULL */
    long timeout_s;            /* the whole request */
    long stall_s;              /* 0, or: ends when not a byte came for this long */
    peer_body_fn body;         /* NULL: the answer's "detail" is kept (peer_answer.detail) */
    void *body_ctx;
    const atomic_bool *abort;  /* NULL, or: the request ends as soon as it is set */
} peer_request;

typedef struct {
    long status;        /* the HTTP status, 0 when none came */
    bool timed_out;     /* its time (or stall) bound ended it */
    bool aborted;       /* the abort flag or the body callback ended it */
    char detail[300];   /* the answer's {"detail": ...} when no body callback was given */
    char error[200];    /* what went wrong when no status came */
} peer_answer;

void peer_call(const peer_request *q, peer_answer *ans);

#endif
