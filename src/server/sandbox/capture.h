/* A bounded capture of one output stream of a sandboxed command: it keeps the first 2/5 and
 * the last 3/5 of a byte budget (the split of the SDK tools' trim), counts and drops what lies
 * between, and reads in large chunks so a command writing gigabytes is drained at pipe speed
 * while the memory held stays at the budget. The launcher (sandbox/proc.c) feeds it; the
 * budget is its parameter (sandbox_opts.output_limit). */
#ifndef AIRLOCKD_SANDBOX_CAPTURE_H
#define AIRLOCKD_SANDBOX_CAPTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/buf.h"

/* Marks the cut in a truncated stream; %llu is the number of bytes omitted. */
#define CAPTURE_MARKER "\n\n... [TRUNCATED: %llu bytes omitted] ...\n\n"

typedef struct {
    buffer head;        /* the first head_max bytes (grows as they come) */
    size_t head_max;
    char *ring;         /* the last tail_max bytes seen after the head filled (allocated then) */
    size_t tail_max;
    size_t ring_pos;    /* where the next byte goes */
    size_t ring_len;    /* bytes held (<= tail_max) */
    char *scratch;      /* a read chunk when the ring is smaller than one */
    uint64_t total;     /* bytes seen */
    int err;            /* ENOMEM, sticky */
    const char *last;   /* the bytes of the last capture_read, until the next one (a tap's view) */
    size_t last_len;
} capture;

/* An empty capture keeping at most limit bytes (head 2/5, tail the rest; limit >= 2). */
void capture_init(capture *c, size_t limit);

/* One read(2) from fd (EINTR retried) of up to a large chunk. The bytes read, 0 at end of
 * file, or -1 with errno (EAGAIN when a non-blocking fd has nothing; ENOMEM). */
ssize_t capture_read(capture *c, int fd);

/* Feeds n bytes as if read (for tests and other sources). 0, or -1 with ENOMEM. */
int capture_feed(capture *c, const void *p, size_t n);

/* The first bytes kept, NUL-terminated (for a launcher's error message); *len may be NULL. */
const char *capture_head(const capture *c, size_t *len);

/* The stream as kept, malloc'd and NUL-terminated: everything when it fit the budget, else
 * head + CAPTURE_MARKER + tail with the cut moved off any UTF-8 sequence it split (so the
 * text decodes as the whole stream would). *omitted gets the bytes left out (0 when
 * complete). NULL when out of memory. The capture is emptied either way. */
char *capture_take(capture *c, size_t *len, uint64_t *omitted);

void capture_free(capture *c);

#endif
