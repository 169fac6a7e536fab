/* The egress log of one session: a ring of the last events and an optional JSON-lines file. */
#include "egress/log.h"

#include "log/log.h"
#include "text/pyjson.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct egress_log {
    pthread_mutex_t mu;
    json_t *ring[EGRESS_LOG_RING];
    size_t next;   /* where the next event goes */
    size_t total;  /* events ever added */
    int fd;        /* the JSON-lines file, or -1 */
    long long size;
    char *path;    /* <dir>/<session>.jsonl */
    bool reported; /* a write error was logged once */
    char session_id[32];
    egress_log_sink sink; /* NULL: none */
    void *sink_ctx;
};

static int open_file(egress_log *l)
{
    l->fd = open(l->path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (l->fd < 0)
        return -1;
    struct stat st;
    l->size = fstat(l->fd, &st) == 0 ? (long long)st.st_size : 0;
    return 0;
}

egress_log *egress_log_open(const char *dir, const char *session_id, char *err, size_t errlen)
{
    egress_log *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->fd = -1;
    snprintf(l->session_id, sizeof l->session_id, "%s", session_id);
    pthread_mutex_init(&l->mu, NULL);
    if (dir) {
        if (asprintf(&l->path, "%s/%s.jsonl", dir, session_id) < 0) {
            l->path = NULL;
            snprintf(err, errlen, "out of memory");
            egress_log_close(l);
            return NULL;
        }
        if (open_file(l) != 0) {
            snprintf(err, errlen, "cannot open the egress log %s: %s", l->path, strerror(errno));
            egress_log_close(l);
            return NULL;
        }
    }
    return l;
}

/* Past the size cap the file becomes <path>.1 (replacing an older one) and a new one starts. */
static void rotate(egress_log *l)
{
    char *old = NULL;
    if (asprintf(&old, "%s.1", l->path) < 0)
        return;
    close(l->fd);
    l->fd = -1;
    if (rename(l->path, old) != 0 || open_file(l) != 0) {
        if (!l->reported)
            log_error("cannot rotate the egress log %s: %s", l->path, strerror(errno));
        l->reported = true;
        if (l->fd < 0)
            (void)open_file(l);
    }
    free(old);
}

static void write_line(egress_log *l, const json_t *event)
{
    char *text = pyjson_dumps(event);
    if (!text)
        return;
    size_t n = strlen(text);
    text[n] = '\n'; /* over the terminator: the line goes out in one write */
    if (l->size + (long long)n + 1 > EGRESS_LOG_FILE_MAX && l->size > 0)
        rotate(l);
    ssize_t w = l->fd >= 0 ? write(l->fd, text, n + 1) : -1;
    if (w > 0)
        l->size += w;
    if (w != (ssize_t)(n + 1) && !l->reported) {
        log_error("cannot write the egress log %s: %s", l->path,
                  w < 0 ? strerror(errno) : "short write");
        l->reported = true;
    }
    free(text);
}

void egress_log_set_sink(egress_log *l, egress_log_sink sink, void *ctx)
{
    pthread_mutex_lock(&l->mu);
    l->sink = sink;
    l->sink_ctx = ctx;
    pthread_mutex_unlock(&l->mu);
}

void egress_log_add(egress_log *l, json_t *event)
{
    if (!event)
        return;
    pthread_mutex_lock(&l->mu);
    if (l->path)
        write_line(l, event);
    if (l->sink)
        l->sink(l->sink_ctx, l->session_id, event);
    json_decref(l->ring[l->next]);
    l->ring[l->next] = event;
    l->next = (l->next + 1) % EGRESS_LOG_RING;
    l->total++;
    pthread_mutex_unlock(&l->mu);
}

json_t *egress_log_last(egress_log *l, size_t limit)
{
    json_t *out = json_array();
    if (!out)
        return NULL;
    pthread_mutex_lock(&l->mu);
    size_t have = l->total < EGRESS_LOG_RING ? l->total : EGRESS_LOG_RING;
    size_t n = limit < have ? limit : have;
    for (size_t k = 0; k < n; k++) {
        size_t i = (l->next + EGRESS_LOG_RING - n + k) % EGRESS_LOG_RING;
        json_array_append(out, l->ring[i]);
    }
    pthread_mutex_unlock(&l->mu);
    return out;
}

void egress_log_denials(egress_log *l, size_t limit, json_t *out)
{
    pthread_mutex_lock(&l->mu);
    size_t have = l->total < EGRESS_LOG_RING ? l->total : EGRESS_LOG_RING, found = 0;
    for (size_t k = 1; k <= have && found < limit; k++) {
        json_t *ev = l->ring[(l->next + EGRESS_LOG_RING - k) % EGRESS_LOG_RING];
        const char *decision = json_string_value(json_object_get(ev, "decision"));
        if (!decision || strcmp(decision, "deny") != 0)
            continue;
        json_t *copy = json_copy(ev);
        if (copy) {
            json_object_set_new(copy, "session_id", json_string(l->session_id));
            json_array_append_new(out, copy);
        }
        found++;
    }
    pthread_mutex_unlock(&l->mu);
}

size_t egress_log_count(egress_log *l)
{
    pthread_mutex_lock(&l->mu);
    size_t n = l->total;
    pthread_mutex_unlock(&l->mu);
    return n;
}

void egress_log_close_file(egress_log *l)
{
    pthread_mutex_lock(&l->mu);
    if (l->fd >= 0)
        close(l->fd);
    l->fd = -1;
    free(l->path);
    l->path = NULL;
    pthread_mutex_unlock(&l->mu);
}

void egress_log_close(egress_log *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < EGRESS_LOG_RING; i++)
        json_decref(l->ring[i]);
    if (l->fd >= 0)
        close(l->fd);
    free(l->path);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
