/* The two halves of a workspace's transfer in a drain's move (drain/transfer.h). */
#include "drain/transfer.h"

#include "drain/extents.h"
#include "drain/peer.h"
#include "log/log.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define STREAM_QUEUE (1u << 20) /* bytes queued for a slow receiving node before reading waits */
#define STALL_S 30              /* a transfer that moves no byte for this long is given up */
#define INCOMING_MAX 2          /* moves arriving at once */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the draining node ---- */

typedef struct {
    app *a;
    const char *id;
    http_stream *st;
    double until;
} outgoing;

/* Queues bytes for the receiving node, waiting (bounded) while it reads slowly; false once it
 * is gone, the time is up, or the move was given up (it is no longer moving). */
static bool stream_out(void *ctx, const void *data, size_t n)
{
    outgoing *o = ctx;
    char *img = registry_moving_image(o->a->reg, o->id);
    free(img);
    if (!img || !http_stream_write(o->st, data, n))
        return false;
    while (http_stream_full(o->st)) {
        double left = o->until - now_s();
        if (left <= 0)
            return false;
        struct pollfd p[2] = {{.fd = http_stream_room_fd(o->st), .events = POLLIN},
                              {.fd = http_stream_cancel_fd(o->st), .events = POLLRDHUP}};
        int pr = poll(p, 2, left > 1 ? 1000 : (int)(left * 1000) + 1);
        if (pr < 0 && errno != EINTR)
            return false;
        if (pr > 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
            return false;
    }
    return true;
}

void transfer_send(app *a, http_request *r, const char *id)
{
    char *img = registry_moving_image(a->reg, id);
    if (!img) {
        char d[120];
        snprintf(d, sizeof d, "Session %s is not moving out of this node.", id);
        http_send_detail(r, 403, d);
        return;
    }
    int bound = a->cfg->fleet_move_timeout_s;
    outgoing o = {.a = a, .id = id, .until = now_s() + bound};
    if (!(o.st = http_stream_begin(r, "application/octet-stream", STREAM_QUEUE, (unsigned)bound))) {
        free(img);
        http_send_500(r);
        return;
    }
    long long sent = 0;
    char err[200];
    if (extents_send(img, stream_out, &o, &sent, err, sizeof err) != 0)
        log_session(LV_WARN, id, NULL, "drain: sending its disk stopped: %s", err);
    else
        log_session(LV_INFO, id, NULL, "drain: its disk was sent (%lld bytes of data)", sent);
    free(img);
}

/* ---- the receiving node ---- */

static bool into_sink(void *ctx, const char *data, size_t n)
{
    return extents_sink_feed(ctx, data, n) == 0;
}

int transfer_fetch_fill(void *ctx, int fd)
{
    transfer_fetch *t = ctx;
    extents_sink *k = extents_sink_new(fd, t->image_bytes);
    if (!k) {
        snprintf(t->why, sizeof t->why, "out of memory");
        return -1;
    }
    char url[600];
    snprintf(url, sizeof url, "%s/v1/fleet/internal/sessions/%s/archive", t->source_url, t->id);
    peer_request q = {.method = "GET", .url = url, .secret = t->a->cfg->fleet_secret, .timeout_s = t->timeout_s,
                      .stall_s = STALL_S, .body = into_sink, .body_ctx = k};
    peer_answer ans;
    peer_call(&q, &ans);
    int rc = 0;
    if (ans.status != 200 && !(ans.aborted && extents_sink_error(k)[0])) {
        snprintf(t->why, sizeof t->why, "its node answered %ld for its disk%s%s", ans.status,
                 ans.error[0] ? ": " : "", ans.error);
        rc = -1;
    } else if (!extents_sink_whole(k)) {
        snprintf(t->why, sizeof t->why, "its disk did not arrive whole: %s", extents_sink_error(k));
        rc = -1;
    }
    t->data_bytes = extents_sink_data_bytes(k);
    extents_sink_free(k);
    return rc;
}

static pthread_mutex_t incoming_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t incoming_cond = PTHREAD_COND_INITIALIZER;
static int incoming;

bool transfer_incoming_take(double wait_s)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)wait_s;
    pthread_mutex_lock(&incoming_mu);
    int rc = 0;
    while (incoming >= INCOMING_MAX && rc == 0)
        rc = pthread_cond_timedwait(&incoming_cond, &incoming_mu, &until);
    bool ok = incoming < INCOMING_MAX;
    if (ok)
        incoming++;
    pthread_mutex_unlock(&incoming_mu);
    return ok;
}

void transfer_incoming_give(void)
{
    pthread_mutex_lock(&incoming_mu);
    incoming--;
    pthread_cond_signal(&incoming_cond);
    pthread_mutex_unlock(&incoming_mu);
}
