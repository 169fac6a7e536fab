/* Streamed answers: a chunked response whose body a handler writes from its worker thread
 * while MHD sends it. A bounded byte queue sits between them: the worker appends, MHD's
 * content reader takes; an empty queue suspends the connection (the reader returns 0 after
 * suspending, as microhttpd.h prescribes) and the next write or the end resumes it. The
 * stream is shared by the response (freed by MHD) and the worker (which ends it). */
#include "http/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Bytes per chunk MHD asks for at most. */
#define STREAM_BLOCK (64u * 1024u)

struct http_stream {
    pthread_mutex_t mu;
    buffer q;               /* queued bytes: q.data[head .. q.len) */
    size_t head;
    size_t cap;
    struct MHD_Connection *conn;
    bool parked;            /* the reader found the queue empty and suspended the connection */
    bool ended;             /* the worker is done: the reader ends the body once it is empty */
    bool dead;              /* MHD freed the response: nobody reads any more */
    int room_fd;            /* eventfd: the reader took bytes */
    int client_fd;          /* a duplicate of the client's socket (-1: none) */
    atomic_int refs;        /* the response and the worker */
};

static void stream_release(http_stream *st)
{
    if (atomic_fetch_sub(&st->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&st->mu);
    buf_free(&st->q);
    if (st->room_fd >= 0)
        close(st->room_fd);
    if (st->client_fd >= 0)
        close(st->client_fd);
    free(st);
}

static size_t queued(const http_stream *st)
{
    return st->q.len - st->head;
}

/* MHD's content reader (an event thread). */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    http_stream *st = cls;
    ssize_t n = 0;
    pthread_mutex_lock(&st->mu);
    size_t avail = queued(st);
    if (avail) {
        bool was_full = avail >= st->cap;
        size_t take = avail < max ? avail : max;
        memcpy(buf, st->q.data + st->head, take);
        st->head += take;
        if (st->head == st->q.len) {
            buf_truncate(&st->q, 0);
            st->head = 0;
        } else if (st->head >= st->cap) { /* keep the buffer within about twice cap */
            memmove(st->q.data, st->q.data + st->head, st->q.len - st->head);
            buf_truncate(&st->q, st->q.len - st->head);
            st->head = 0;
        }
        uint64_t one = 1;
        if (was_full && st->room_fd >= 0 && write(st->room_fd, &one, sizeof one) < 0 && errno != EAGAIN)
            n = MHD_CONTENT_READER_END_WITH_ERROR;
        else
            n = (ssize_t)take;
    } else if (st->ended) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        st->parked = true;
        MHD_suspend_connection(st->conn);
    }
    pthread_mutex_unlock(&st->mu);
    return n;
}

/* MHD is done with the response (sent, or the connection closed). */
static void stream_gone(void *cls)
{
    http_stream *st = cls;
    pthread_mutex_lock(&st->mu);
    st->dead = true;
    pthread_mutex_unlock(&st->mu);
    stream_release(st);
}

/* Under st->mu: lets MHD call the reader again. */
static void wake_reader(http_stream *st)
{
    if (st->parked && !st->dead) {
        st->parked = false;
        MHD_resume_connection(st->conn);
    }
}

http_stream *http_stream_begin(http_request *r, const char *ctype, size_t cap, unsigned max_s)
{
    if (r->response || r->state != RQ_RUNNING || atomic_load(&r->stream))
        return NULL;
    http_stream *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    pthread_mutex_init(&st->mu, NULL);
    buf_init(&st->q, 0);
    st->cap = cap ? cap : 1;
    st->conn = r->conn;
    atomic_init(&st->refs, 2);
    st->room_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int fd = http_client_fd(r);
    st->client_fd = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1;
    struct MHD_Response *resp =
        st->room_fd >= 0 ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, st, stream_gone)
                         : NULL;
    if (!resp) {
        atomic_store(&st->refs, 1);
        stream_release(st);
        return NULL;
    }
    MHD_add_response_header(resp, "content-type", ctype);
    MHD_add_response_header(resp, "cache-control", "no-store");
    http_note_apply(r, resp);
    r->response = resp;
    r->response_len = 0;
    r->status = 200;
    r->respond_s = max_s;
    atomic_store(&r->holders, 2);
    atomic_store(&r->stream, st);
    /* the event thread queues the response; from here on only st is shared with it */
    r->state = RQ_RESUMED;
    MHD_resume_connection(r->conn);
    return st;
}

bool http_stream_write(http_stream *st, const char *data, size_t len)
{
    pthread_mutex_lock(&st->mu);
    bool alive = !st->dead;
    if (alive && len) {
        if (buf_append(&st->q, data, len) == 0)
            wake_reader(st);
        else
            alive = false;
    }
    pthread_mutex_unlock(&st->mu);
    return alive;
}

bool http_stream_full(http_stream *st)
{
    uint64_t n;
    if (st->room_fd >= 0 && read(st->room_fd, &n, sizeof n) < 0 && errno != EAGAIN)
        return false;
    pthread_mutex_lock(&st->mu);
    bool full = !st->dead && queued(st) >= st->cap;
    pthread_mutex_unlock(&st->mu);
    return full;
}

int http_stream_room_fd(const http_stream *st)
{
    return st->room_fd;
}

int http_stream_cancel_fd(const http_stream *st)
{
    return st->client_fd;
}

void http_stream_finish(http_request *r)
{
    http_stream *st = atomic_load(&r->stream);
    pthread_mutex_lock(&st->mu);
    st->ended = true;
    wake_reader(st);
    pthread_mutex_unlock(&st->mu);
    stream_release(st);
    if (atomic_fetch_sub(&r->holders, 1) == 1)
        http_request_free(r->server, r);
}
