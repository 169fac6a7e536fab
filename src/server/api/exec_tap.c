/* The output tap of a running command: NDJSON events of the streaming exec, spill files. */
#include "api/exec_tap.h"

#include "domain/paths.h"
#include "text/pyjson.h"
#include "text/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void exec_tap_event(exec_tap *t, json_t *event)
{
    char *line = event ? pyjson_dumps(event) : NULL;
    json_decref(event);
    if (!line || !t->stream) {
        free(line);
        return;
    }
    size_t n = strlen(line);
    line[n] = '\n'; /* pyjson's NUL becomes the line's end */
    (void)http_stream_write(t->stream, line, n + 1);
    free(line);
    t->last_event_ms = now_ms();
}

/* One stdout/stderr event of raw bytes (replaced like the plain result's text). */
static void text_event(exec_tap *t, int stream, const char *raw, size_t n)
{
    if (n == 0)
        return;
    size_t len = 0;
    char *text = utf8_replace(raw, n, &len);
    if (!text)
        return;
    exec_tap_event(t, json_pack("{s:s,s:o}", "type", stream == 1 ? "stdout" : "stderr", "data",
                                json_stringn_nocheck(text, len)));
    free(text);
}

static void stream_piece(exec_tap *t, int stream, const char *data, size_t len)
{
    size_t p = t->pending_len[stream];
    char *joined = NULL;
    if (p) { /* the cut character goes first */
        joined = malloc(p + len);
        if (!joined)
            return;
        memcpy(joined, t->pending[stream], p);
        memcpy(joined + p, data, len);
        data = joined;
        len += p;
    }
    size_t keep = utf8_partial_tail(data, len);
    text_event(t, stream, data, len - keep);
    memcpy(t->pending[stream], data + len - keep, keep);
    t->pending_len[stream] = keep;
    free(joined);
}

static void spill_piece(exec_tap *t, int stream, const char *data, size_t len)
{
    int fd = t->spill_fd[stream];
    const char *why = NULL;
    if (len > t->spill_room) {
        len = (size_t)t->spill_room;
        why = "the session's disk quota is reached";
    }
    while (len > 0 && !why) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            why = errno == ENOSPC || errno == EDQUOT ? "the workspace disk is full" : strerror(errno);
            break;
        }
        data += w;
        len -= (size_t)w;
        t->spill_room -= (unsigned long long)w;
    }
    if (!why)
        return;
    if (!t->spill_warning && asprintf(&t->spill_warning, "Output spill to %s stopped early: %s.",
                                      t->spill_path[stream], why) < 0)
        t->spill_warning = NULL;
    close(fd);
    t->spill_fd[stream] = -1;
}

static void tap_output(void *ctx, int stream, const char *data, size_t len)
{
    exec_tap *t = ctx;
    if (stream == 0) {
        if (t->stream && now_ms() - t->last_event_ms >= EXEC_HEARTBEAT_MS)
            exec_tap_event(t, json_pack("{s:s}", "type", "heartbeat"));
        return;
    }
    if (stream != 1 && stream != 2)
        return;
    if (t->spill_fd[stream] >= 0)
        spill_piece(t, stream, data, len);
    if (t->stream)
        stream_piece(t, stream, data, len);
}

static bool tap_full(void *ctx)
{
    exec_tap *t = ctx;
    return t->stream && http_stream_full(t->stream);
}

void exec_tap_init(exec_tap *t, http_stream *stream)
{
    memset(t, 0, sizeof *t);
    t->stream = stream;
    t->spill_fd[0] = t->spill_fd[1] = t->spill_fd[2] = -1;
    t->last_event_ms = now_ms();
    t->tap = (sandbox_tap){.output = tap_output, .full = tap_full,
                           .room_fd = stream ? http_stream_room_fd(stream) : -1,
                           .tick_ms = EXEC_HEARTBEAT_MS / 4, .ctx = t};
}

int exec_tap_spill(exec_tap *t, const char *workspace, const char *id, long long quota_bytes,
                   char *errbuf, size_t errlen)
{
    static const char *const suffix[3] = {NULL, "stdout", "stderr"};
    t->spill_room = quota_bytes > 0 ? (unsigned long long)quota_bytes : ~0ULL;
    for (int i = 1; i <= 2; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, ".airlock/exec-%s.%s", id, suffix[i]);
        int rc = path_open_write(workspace, rel, &t->spill_fd[i]);
        if (rc != PATH_OK) {
            t->spill_fd[i] = -1;
            snprintf(errbuf, errlen, "cannot create the spill file /workspace/%s: %s", rel,
                     rc == PATH_NOSPACE ? "the workspace disk is full" : "not a writable path");
            return -1;
        }
        if (asprintf(&t->spill_path[i], "/workspace/%s", rel) < 0) {
            t->spill_path[i] = NULL;
            snprintf(errbuf, errlen, "out of memory");
            return -1;
        }
    }
    return 0;
}

void exec_tap_flush(exec_tap *t)
{
    for (int i = 1; i <= 2; i++) {
        if (t->pending_len[i])
            text_event(t, i, (const char *)t->pending[i], t->pending_len[i]);
        t->pending_len[i] = 0;
    }
}

void exec_tap_close(exec_tap *t)
{
    for (int i = 1; i <= 2; i++) {
        if (t->spill_fd[i] >= 0)
            close(t->spill_fd[i]);
        t->spill_fd[i] = -1;
        free(t->spill_path[i]);
        t->spill_path[i] = NULL;
    }
    free(t->spill_warning);
    t->spill_warning = NULL;
}
