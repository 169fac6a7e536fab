/* The one growable byte buffer of airlockd: NUL-terminated whenever it holds memory, with an
 * optional size limit, and a sticky error so a run of appends is checked once at the end. */
#ifndef AIRLOCKD_BUF_H
#define AIRLOCKD_BUF_H

#include <stdarg.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct buffer {
    char *data;   /* NULL until the first reservation; then data[len] == '\0' */
    size_t len;
    size_t cap;   /* bytes allocated (always > len once data is set) */
    size_t limit; /* most bytes it may hold; 0 = only memory limits it */
    int err;      /* 0, or ENOMEM / EFBIG (over limit) after a failed append; sticky */
} buffer;

/* An empty buffer holding at most limit bytes (0: no limit). Zero-initialising a buffer is
 * the same as buf_init(b, 0). */
void buf_init(buffer *b, size_t limit);

/* Room for n more bytes (and the NUL). 0, or -1 with b->err set. */
int buf_reserve(buffer *b, size_t n);

/* Allocates exactly cap bytes (room for cap - 1 bytes and the NUL) when it has less, for an
 * owner that accounts for memory itself. 0, or -1 with b->err set (EFBIG past the limit). */
int buf_grow_to(buffer *b, size_t cap);

/* Appends; 0, or -1 with b->err set (nothing is appended then, and nothing after). */
int buf_append(buffer *b, const void *p, size_t n);
int buf_puts(buffer *b, const char *s);
int buf_printf(buffer *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One read(2) of up to max bytes from fd onto the end (EINTR retried). The bytes read,
 * 0 at end of file, or -1: errno from read (EAGAIN for a non-blocking fd with nothing to
 * read), or b->err's value when the buffer cannot grow. */
ssize_t buf_read(buffer *b, int fd, size_t max);

/* Reads fd to its end. 0, or -1 with errno set (EFBIG past the limit). */
int buf_read_all(buffer *b, int fd);

/* Drops everything after the first len bytes (len <= b->len). */
void buf_truncate(buffer *b, size_t len);

/* Hands the bytes over as a malloc'd NUL-terminated string ("" when empty; *len its length
 * when len is non-NULL) and leaves b empty. NULL when b->err is set or out of memory (b is
 * freed then too). */
char *buf_take(buffer *b, size_t *len);

/* Frees the memory; b is empty again with its limit kept and its error cleared. */
void buf_free(buffer *b);

#endif
