/* The frames between airlockd and airlock-agent (both sides include this one definition):
 * 1 type byte, the payload's length as 4 bytes little-endian, the payload. The types and
 * payloads are listed in src/agent/agent.c's first comment. Header-only (static functions),
 * so the static agent links nothing of airlockd's. */
#ifndef AIRLOCK_AGENT_FRAMES_H
#define AIRLOCK_AGENT_FRAMES_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#define FRAME_HEADER 5
/* Commands one agent runs at once, each on a frame channel of its own (fds 5.. in the
 * sandbox): a session's parallel commands, up to its tenant's max_concurrent_exec. */
#define AGENT_SLOTS 4
/* The largest output payload the agent sends (one read of a command's pipe). */
#define FRAME_OUTPUT_MAX (64u * 1024u)
/* A command's request as the agent hands it to its container: timeout, the command (< 1 MiB)
 * and its environment. */
#define AGENT_REQUEST_MAX ((1u << 20) + (64u << 10))
/* Preloaded into the bash each prepared container has exec'd ahead of its command (see
 * src/agent/bootstrap.c); the placeholder for the command it waits for in bash's argv. */
#define AGENT_BOOTSTRAP_PATH "/airlock/bootstrap.so"
#define AGENT_BOOTSTRAP_WAITING "airlock: waiting for its command"

static inline void frame_put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t frame_get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The whole of p[0..n) to fd (EINTR retried): 0, or -1 (the other side is gone). */
static inline int frame_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Exactly n bytes from fd into p (EINTR retried): 0, or -1 at end of file or on an error. */
static inline int frame_read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n > 0) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

#endif
