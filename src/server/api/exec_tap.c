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

/* Appends text as the inside of a JSON string, escaped exactly as pyjson_dumps does (jansson
 * with lowercase hex: quote, backslash, \b \f \n \r \t, other controls as \u00xx; UTF-8 kept
 * as is); returns the end. out has room for 6 bytes per input byte. Runs of plain bytes are
 * copied whole: the data events of a large output are mostly that. */
static char *escape_json_text(char *out, const unsigned char *text, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t i = 0;
    while (i < len) {
        size_t run = i;
        while (run < len && text[run] >= 0x20 && text[run] != '"' && text[run] != '\\')
            run++;
        memcpy(out, text + i, run - i);
        out += run - i;
        if (run == len)
            break;
        unsigned char c = text[run];
        *out++ = '\\';
        switch (c) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '\b': *out++ = 'b'; break;
        case '\f': *out++ = 'f'; break;
        case '\n': *out++ = 'n'; break;
        case '\r': *out++ = 'r'; break;
        case '\t': *out++ = 't'; break;
        default:
            *out++ = 'u';
            *out++ = '0';
            *out++ = '0';
            *out++ = hex[c >> 4];
            *out++ = hex[c & 15];
        }
        i = run + 1;
    }
    return out;
}

/* One stdout/stderr event of raw bytes (replaced like the plain result's text), written
 * straight to the stream: the same line exec_tap_event would make of
 * {"type": ..., "data": ...}, without building a JSON value for each piece. */
static void text_event(exec_tap *t, int stream, const char *raw, size_t n)
{
    static const char tail[] = "\"}\n";
    if (n == 0 || !t->stream)
        return;
    size_t len = 0;
    char *text = utf8_replace(raw, n, &len);
    if (!text)
        return;
    const char *head = stream == 1 ? "{\"type\":\"stdout\",\"data\":\"" : "{\"type\":\"stderr\",\"data\":\"";
    size_t head_len = strlen(head);
    char *line = len <= (SIZE_MAX - 64) / 6 ? malloc(head_len + 6 * len + sizeof tail) : NULL;
    if (line) {
        memcpy(line, head, head_len);
        char *end = escape_json_text(line + head_len, (const unsigned char *)text, len);
        memcpy(end, tail, sizeof tail - 1);
        end += sizeof tail - 1;
        (void)http_stream_write(t->stream, line, (size_t)(end - line));
        t->last_event_ms = now_ms();
    }
    free(line);
    free(text);
}

/* Sends stream's pending bytes as one event: all of them (at the end), or all but the start
 * of a character cut at their end (kept for the next piece). */
static void send_pending(exec_tap *t, int stream, bool all)
{
    size_t len = t->pending_len[stream];
    if (len == 0)
        return;
    char *p = t->pending[stream];
    size_t keep = all ? 0 : utf8_partial_tail(p, len);
    text_event(t, stream, p, len - keep);
    memmove(p, p + len - keep, keep);
    t->pending_len[stream] = keep;
}

static void stream_piece(exec_tap *t, int stream, const char *data, size_t len)
{
    /* the other stream's bytes came first: they go first */
    send_pending(t, 3 - stream, false);
    size_t have = t->pending_len[stream];
    if (have + len > t->pending_cap[stream]) {
        size_t cap = have + len > EXEC_EVENT_BYTES ? have + len : EXEC_EVENT_BYTES;
        char *grown = realloc(t->pending[stream], cap);
        if (!grown)
            return;
        t->pending[stream] = grown;
        t->pending_cap[stream] = cap;
    }
    memcpy(t->pending[stream] + have, data, len);
    t->pending_len[stream] = have + len;
    if (t->pending_len[stream] >= EXEC_EVENT_BYTES)
        send_pending(t, stream, false);
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
    if (stream == 0) { /* a tick: the runner is about to wait, what it read goes now */
        if (t->stream) {
            send_pending(t, 1, false);
            send_pending(t, 2, false);
        }
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
    for (int i = 1; i <= 2; i++)
        send_pending(t, i, true);
}

void exec_tap_close(exec_tap *t)
{
    for (int i = 1; i <= 2; i++) {
        if (t->spill_fd[i] >= 0)
            close(t->spill_fd[i]);
        t->spill_fd[i] = -1;
        free(t->spill_path[i]);
        t->spill_path[i] = NULL;
        free(t->pending[i]);
        t->pending[i] = NULL;
        t->pending_len[i] = t->pending_cap[i] = 0;
    }
    free(t->spill_warning);
    t->spill_warning = NULL;
}
