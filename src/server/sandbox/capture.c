/* Head + tail capture of a command's output stream within a fixed byte budget. */
#include "sandbox/capture.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bytes per read(2): a whole pipe buffer (up to 1 MiB once enlarged) in one call. */
#define CAPTURE_CHUNK (1024u * 1024u)
/* A ring smaller than this is fed through a scratch chunk, so a tiny budget still drains
 * in large reads. */
#define CAPTURE_SCRATCH (64u * 1024u)

void capture_init(capture *c, size_t limit)
{
    memset(c, 0, sizeof *c);
    if (limit < 2)
        limit = 2;
    c->head_max = limit / 5 * 2 + (limit % 5) * 2 / 5;
    if (c->head_max == 0)
        c->head_max = 1;
    c->tail_max = limit - c->head_max;
    buf_init(&c->head, c->head_max);
}

static int fail_nomem(capture *c)
{
    c->err = ENOMEM;
    errno = ENOMEM;
    return -1;
}

static bool ring_ready(capture *c)
{
    if (!c->ring)
        c->ring = malloc(c->tail_max);
    return c->ring != NULL;
}

/* Keeps the last tail_max bytes of p[0..n) in the ring. */
static void ring_put(capture *c, const char *p, size_t n)
{
    if (n >= c->tail_max) {
        memcpy(c->ring, p + n - c->tail_max, c->tail_max);
        c->ring_pos = 0;
        c->ring_len = c->tail_max;
        return;
    }
    size_t first = c->tail_max - c->ring_pos < n ? c->tail_max - c->ring_pos : n;
    memcpy(c->ring + c->ring_pos, p, first);
    memcpy(c->ring, p + first, n - first);
    c->ring_pos = (c->ring_pos + n) % c->tail_max;
    c->ring_len = c->ring_len + n < c->tail_max ? c->ring_len + n : c->tail_max;
}

int capture_feed(capture *c, const void *p, size_t n)
{
    if (c->err)
        return fail_nomem(c);
    const char *s = p;
    c->total += n;
    size_t room = c->head_max - c->head.len;
    size_t into_head = n < room ? n : room;
    if (into_head && buf_append(&c->head, s, into_head) != 0)
        return fail_nomem(c);
    if (n > into_head) {
        if (!ring_ready(c))
            return fail_nomem(c);
        ring_put(c, s + into_head, n - into_head);
    }
    return 0;
}

static ssize_t read_retry(int fd, void *p, size_t n)
{
    ssize_t got;
    do
        got = read(fd, p, n);
    while (got < 0 && errno == EINTR);
    return got;
}

ssize_t capture_read(capture *c, int fd)
{
    if (c->err)
        return fail_nomem(c);
    ssize_t got;
    c->last_len = 0;
    if (c->head.len < c->head_max) {
        /* the head grows with what comes (a short output costs a short buffer) */
        size_t room = c->head_max - c->head.len, want = c->head.len > CAPTURE_SCRATCH ? c->head.len : CAPTURE_SCRATCH;
        size_t at = c->head.len;
        got = buf_read(&c->head, fd, room < want ? room : want);
        if (got < 0 && c->head.err)
            return fail_nomem(c);
        if (got > 0)
            c->last = c->head.data + at;
    } else if (!ring_ready(c)) {
        return fail_nomem(c);
    } else if (c->tail_max >= CAPTURE_SCRATCH) {
        /* straight into the ring, up to its wrap point */
        size_t room = c->tail_max - c->ring_pos;
        c->last = c->ring + c->ring_pos;
        got = read_retry(fd, c->ring + c->ring_pos, room < CAPTURE_CHUNK ? room : CAPTURE_CHUNK);
        if (got > 0) {
            c->ring_pos = (c->ring_pos + (size_t)got) % c->tail_max;
            c->ring_len = c->ring_len + (size_t)got < c->tail_max ? c->ring_len + (size_t)got : c->tail_max;
        }
    } else {
        if (!c->scratch && !(c->scratch = malloc(CAPTURE_SCRATCH)))
            return fail_nomem(c);
        got = read_retry(fd, c->scratch, CAPTURE_SCRATCH);
        if (got > 0)
            ring_put(c, c->scratch, (size_t)got);
        c->last = c->scratch;
    }
    if (got > 0) {
        c->total += (uint64_t)got;
        c->last_len = (size_t)got;
    }
    return got;
}

const char *capture_head(const capture *c, size_t *len)
{
    if (len)
        *len = c->head.len;
    return c->head.data ? c->head.data : "";
}

/* The ring's i-th oldest byte. */
static unsigned char ring_at(const capture *c, size_t i)
{
    size_t first = c->ring_len < c->tail_max ? 0 : c->ring_pos;
    return (unsigned char)c->ring[(first + i) % c->tail_max];
}

static bool is_continuation(unsigned char b)
{
    return b >= 0x80 && b <= 0xBF;
}

/* Bytes at the end of s[0..n) that start a UTF-8 sequence the cut left unfinished. */
static size_t unfinished_tail(const char *s, size_t n)
{
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char b = (unsigned char)s[n - k];
        if (is_continuation(b))
            continue;
        size_t need = b >= 0xF0 && b <= 0xF4 ? 4 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xC2 && b <= 0xDF ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

char *capture_take(capture *c, size_t *len, uint64_t *omitted)
{
    *omitted = 0;
    if (len)
        *len = 0;
    if (c->err) {
        capture_free(c);
        return NULL;
    }
    size_t head_end = c->head.len, tail_start = 0;
    uint64_t kept = (uint64_t)c->head.len + c->ring_len;
    bool cut = c->total > kept;
    if (cut) {
        /* Move the cut off split characters: the head loses an unfinished sequence, the tail
         * its leading continuation bytes (at most 3); both count as omitted. */
        head_end -= unfinished_tail(c->head.data, c->head.len);
        while (tail_start < 3 && tail_start < c->ring_len && is_continuation(ring_at(c, tail_start)))
            tail_start++;
        *omitted = c->total - head_end - (c->ring_len - tail_start);
    }
    buffer out = {0};
    buf_reserve(&out, head_end + c->ring_len + 80);
    buf_append(&out, c->head.data ? c->head.data : "", head_end);
    if (cut)
        buf_printf(&out, CAPTURE_MARKER, (unsigned long long)*omitted);
    if (c->ring_len) {
        size_t first = c->ring_len < c->tail_max ? 0 : c->ring_pos;
        size_t from = (first + tail_start) % c->tail_max, n = c->ring_len - tail_start;
        size_t part = c->tail_max - from < n ? c->tail_max - from : n;
        buf_append(&out, c->ring + from, part);
        buf_append(&out, c->ring, n - part);
    }
    capture_free(c);
    return buf_take(&out, len);
}

void capture_free(capture *c)
{
    buf_free(&c->head);
    free(c->ring);
    free(c->scratch);
    c->ring = c->scratch = NULL;
    c->ring_pos = c->ring_len = 0;
    c->total = 0;
    c->err = 0;
    c->last = NULL;
    c->last_len = 0;
}
