/* The growable byte buffer: doubling growth, a limit, a sticky error. */
#include "util/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BUF_MIN_CAP 64

void buf_init(buffer *b, size_t limit)
{
    memset(b, 0, sizeof *b);
    b->limit = limit;
}

static int fail(buffer *b, int err)
{
    b->err = err;
    errno = err;
    return -1;
}

/* Reallocates to exactly cap bytes (cap > b->len). */
static int resize(buffer *b, size_t cap)
{
    char *nd = realloc(b->data, cap);
    if (!nd)
        return fail(b, ENOMEM);
    if (!b->data)
        nd[0] = '\0';
    b->data = nd;
    b->cap = cap;
    return 0;
}

int buf_reserve(buffer *b, size_t n)
{
    if (b->err)
        return fail(b, b->err);
    if (n > SIZE_MAX - 1 - b->len)
        return fail(b, ENOMEM);
    if (b->limit && n > b->limit - b->len)
        return fail(b, EFBIG);
    size_t need = b->len + n + 1;
    if (b->data && need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : BUF_MIN_CAP;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    return resize(b, cap);
}

int buf_grow_to(buffer *b, size_t cap)
{
    if (b->err)
        return fail(b, b->err);
    if (cap == 0 || (b->limit && cap - 1 > b->limit))
        return fail(b, EFBIG);
    if (b->data && cap <= b->cap)
        return 0;
    return resize(b, cap);
}

int buf_append(buffer *b, const void *p, size_t n)
{
    if (buf_reserve(b, n) != 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_puts(buffer *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_printf(buffer *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return fail(b, ENOMEM);
    if (buf_reserve(b, (size_t)n) != 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

ssize_t buf_read(buffer *b, int fd, size_t max)
{
    if (b->err)
        return fail(b, b->err);
    if (b->limit && max > b->limit - b->len)
        max = b->limit - b->len;
    if (max == 0) {
        /* full: only the end of the input keeps this from being too much */
        char probe;
        ssize_t got;
        do
            got = read(fd, &probe, 1);
        while (got < 0 && errno == EINTR);
        return got > 0 ? fail(b, EFBIG) : got;
    }
    if (buf_reserve(b, max) != 0)
        return -1;
    for (;;) {
        ssize_t got = read(fd, b->data + b->len, max);
        if (got < 0 && errno == EINTR)
            continue;
        if (got > 0) {
            b->len += (size_t)got;
            b->data[b->len] = '\0';
        }
        return got;
    }
}

int buf_read_all(buffer *b, int fd)
{
    for (;;) {
        /* at least 4 KiB at a time, more as the buffer grows */
        size_t chunk = b->cap - b->len > 4096 ? b->cap - b->len - 1 : 4096;
        ssize_t got = buf_read(b, fd, chunk);
        if (got == 0)
            return 0;
        if (got < 0)
            return -1;
    }
}

void buf_truncate(buffer *b, size_t len)
{
    if (b->data && len < b->len) {
        b->len = len;
        b->data[len] = '\0';
    }
}

char *buf_take(buffer *b, size_t *len)
{
    if (!b->err && !b->data)
        buf_reserve(b, 0);
    if (b->err) {
        buf_free(b);
        return NULL;
    }
    char *out = b->data;
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return out;
}

void buf_free(buffer *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->err = 0;
}
