/* The two halves of a workspace's transfer in a drain's move (drain/transfer.c): the draining
 * node streams the session's frozen disk (drain/extents.h) as the answer to the receiving
 * node's GET; the receiving node writes that stream into the session's new image. */
#ifndef AIRLOCKD_DRAIN_TRANSFER_H
#define AIRLOCKD_DRAIN_TRANSFER_H

#include "app.h"
#include "http/http.h"

/* The draining node: answers r with the disk image of session id (moving out, frozen), or
 * with an error when it cannot start; the stream is cut (no end mark) when the move is given
 * up meanwhile or takes longer than SANDBOX_FLEET_MOVE_TIMEOUT_S. */
void transfer_send(app *a, http_request *r, const char *id);

/* The receiving node: a disk_fill_fn's context. */
typedef struct {
    const app *a;
    const char *source_url; /* the draining node */
    const char *id;
    long long image_bytes;
    long timeout_s;
    long long data_bytes;   /* what arrived */
    char why[300];          /* why it failed */
} transfer_fetch;

/* A disk_fill_fn (ctx: a transfer_fetch): fetches the session's disk into fd. 0, or -1 with
 * the reason in why. */
int transfer_fetch_fill(void *ctx, int fd);

/* At most a few moves arrive at once (each holds a worker and a disk being written): takes
 * one of their places, waiting at most wait_s; false when none freed. */
bool transfer_incoming_take(double wait_s);
void transfer_incoming_give(void);

#endif
