/* The protocol between airlockd and airlock-agent, defined once: both sides, and the agent's
 * workers and container bootstrap, include this header (header-only, static functions, so the
 * static agent and the preloaded bootstrap link nothing of airlockd's). spec/c/
 * agent_protocol_test.c round-trips every frame and checks every bound.
 *
 * A frame: the type (1 byte), the slot (1 byte), the payload's length (4 bytes little-endian),
 * the payload. The slot is the command's channel (0 .. AGENT_SLOTS - 1): a session runs up to
 * AGENT_SLOTS commands at once, each on a slot of its own.
 *
 *   type         direction          payload                                        length
 *   FRAME_RUN    airlockd -> agent  u32 timeout_ms, command NUL,                   5 .. AGENT_REQUEST_MAX
 *                                   env entries NUL-terminated each (at most
 *                                   FRAME_ENV_MAX)
 *   FRAME_KILL   airlockd -> agent  none: kill the command running in the slot     0
 *                                   (one that ended already: nothing)
 *   FRAME_SPAWN  airlockd -> agent  as FRAME_RUN (its timeout must be 0): a long-   5 .. AGENT_REQUEST_MAX
 *                                   lived process (a kernel) with no timeout and
 *                                   its stdin on a pipe fed by FRAME_STDIN; it
 *                                   holds the slot until it ends (FRAME_EXIT)
 *   FRAME_STDIN  airlockd -> agent  bytes for the slot's process's stdin; an empty 0 .. FRAME_OUTPUT_MAX
 *                                   one closes it
 *   FRAME_SIGNAL airlockd -> agent  u8 signal number (1 .. 64) for the slot's      1
 *                                   process (PID 1 of its container: SIGINT
 *                                   interrupts a kernel's cell, SIGKILL ends it)
 *   FRAME_STDOUT agent -> airlockd  the command's stdout bytes, as read            1 .. FRAME_OUTPUT_MAX
 *   FRAME_STDERR agent -> airlockd  its stderr bytes                               1 .. FRAME_OUTPUT_MAX
 *   FRAME_EXIT   agent -> airlockd  i32 exit code (shell conventions; -1 killed),  5
 *                                   u8 ending (FRAME_ENDED_*)
 *   FRAME_FAIL   agent -> airlockd  text: the command could not be started         1 .. FRAME_FAIL_MAX
 *   FRAME_CREDIT airlockd -> agent  u32 bytes: the slot's command may send that     4
 *                                   many more output bytes (flow control, below)
 *   FRAME_BOOTED agent -> airlockd  none: booted (slot 0), the first frame          0
 *   FRAME_IDLE   agent -> airlockd  none: the next command's container is ready    0
 *                                   (or cannot be made; slot 0)
 *   FRAME_PING   airlockd -> agent  none: answered at once with FRAME_PONG on its  0
 *                                   slot, no container made (a restored sandbox's
 *                                   check: the agent answers)
 *   FRAME_PONG   agent -> airlockd  none: the FRAME_PING of its slot came          0
 *
 * The channels (SANDBOX_EXEC_MODE=session): the agent's stdin and stdout, which `runsc restore`
 * maps again (descriptors passed with --pass-fd it cannot restore):
 *   fd 0         airlockd -> agent  FRAME_RUN, FRAME_KILL, FRAME_SPAWN, FRAME_STDIN, FRAME_SIGNAL,
 *                                   FRAME_CREDIT, FRAME_PING
 *   fd 1         agent -> airlockd  FRAME_BOOTED once booted, then every slot's FRAME_STDOUT,
 *                                   FRAME_STDERR, FRAME_EXIT, FRAME_FAIL, FRAME_PONG and FRAME_IDLE,
 *                                   interleaved frame by frame; each frame is one write under
 *                                   the agent's output lock (src/agent/out.c)
 * Flow control: a slot's process sends at most AGENT_WINDOW output payload bytes beyond what
 * airlockd has granted back with FRAME_CREDIT (each process starts with AGENT_WINDOW), so
 * airlockd holds at most that much per slot for a slow reader and never stops reading fd 1:
 * one slot's slow client cannot stall the other slots or the agent.
 * Inside the sandbox:
 *   agent -> worker   its message pipe: the FRAME_RUN, FRAME_SPAWN, FRAME_KILL, FRAME_STDIN,
 *                     FRAME_SIGNAL and FRAME_CREDIT frames as airlockd sent them (slot
 *                     FRAME_SLOT_WARMUP: the warm-up command, whose frames go nowhere)
 *   worker -> agent   its state pipe, single bytes: WORKER_READY (its container is made, or
 *                     cannot be), WORKER_DONE (its command ended and its exit went out)
 *   worker -> container  the request pipe: u32 length, then a FRAME_RUN payload (bootstrap.c) */
#ifndef AIRLOCK_AGENT_PROTOCOL_H
#define AIRLOCK_AGENT_PROTOCOL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

/* Processes one agent runs at once, each on a slot of its own: a session's parallel commands
 * (up to its tenant's max_concurrent_exec, at most 4) and its kernels (up to max_kernels, at
 * most 2). */
#define AGENT_SLOTS 6
#define FRAME_HEADER 6
/* The largest output payload the agent sends (one read of a command's pipe). */
#define FRAME_OUTPUT_MAX (64u * 1024u)
/* A command's request: timeout, the command (< 1 MiB) and its environment. */
#define AGENT_REQUEST_MAX ((1u << 20) + (64u << 10))
/* Entries of a request's environment. */
#define FRAME_ENV_MAX 64
/* The longest FRAME_FAIL text. */
#define FRAME_FAIL_MAX 256u
/* The slot of the agent's warm-up command (inside the sandbox only). */
#define FRAME_SLOT_WARMUP 255
/* Output payload bytes a slot's command may send ahead of airlockd's FRAME_CREDIT. */
#define AGENT_WINDOW (256u * 1024u)

typedef enum {
    FRAME_RUN = 'C',
    FRAME_KILL = 'K',
    FRAME_STDOUT = '1',
    FRAME_STDERR = '2',
    FRAME_EXIT = 'X',
    FRAME_FAIL = 'F',
    FRAME_SPAWN = 'P',
    FRAME_STDIN = '0', /* fd 0, as FRAME_STDOUT is '1' */
    FRAME_SIGNAL = 'S',
    FRAME_CREDIT = 'W',
    FRAME_BOOTED = 'B',
    FRAME_IDLE = 'I',
    FRAME_PING = '?',
    FRAME_PONG = '!',
} frame_type;

/* The highest signal number a FRAME_SIGNAL carries. */
#define FRAME_SIGNAL_MAX 64

/* How a command ended (FRAME_EXIT's last byte). */
typedef enum { FRAME_ENDED_EXITED = 0, FRAME_ENDED_TIMED_OUT = 1, FRAME_ENDED_KILLED = 2 } frame_ending;

/* The single bytes of a worker's state pipe. */
enum { WORKER_READY = 'r', WORKER_DONE = 'd' };

/* Preloaded into the bash each prepared container has exec'd ahead of its command (see
 * src/agent/bootstrap.c); the placeholder for the command it waits for in bash's argv. */
#define AGENT_BOOTSTRAP_PATH "/airlock/bootstrap.so"
#define AGENT_BOOTSTRAP_WAITING "airlock: waiting for its command"

typedef struct {
    frame_type type;
    unsigned slot;
    uint32_t len;
} frame_head;

/* A FRAME_RUN payload, parsed in place: command and env point into the payload. */
typedef struct {
    uint32_t timeout_ms;
    char *command;
    char *env[FRAME_ENV_MAX + 1]; /* NULL-terminated */
} frame_run;

typedef struct {
    int32_t code;
    frame_ending ending;
} frame_exit;

static inline void frame_put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t frame_get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Whether t is a frame type, and the bounds of its payload's length. */
static inline bool frame_bounds(int t, uint32_t *min, uint32_t *max)
{
    switch (t) {
    case FRAME_RUN:
    case FRAME_SPAWN:
        *min = 5, *max = AGENT_REQUEST_MAX;
        return true;
    case FRAME_KILL:
        *min = 0, *max = 0;
        return true;
    case FRAME_STDIN:
        *min = 0, *max = FRAME_OUTPUT_MAX;
        return true;
    case FRAME_SIGNAL:
        *min = 1, *max = 1;
        return true;
    case FRAME_STDOUT:
    case FRAME_STDERR:
        *min = 1, *max = FRAME_OUTPUT_MAX;
        return true;
    case FRAME_EXIT:
        *min = 5, *max = 5;
        return true;
    case FRAME_FAIL:
        *min = 1, *max = FRAME_FAIL_MAX;
        return true;
    case FRAME_CREDIT:
        *min = 4, *max = 4;
        return true;
    case FRAME_BOOTED:
    case FRAME_IDLE:
    case FRAME_PING:
    case FRAME_PONG:
        *min = 0, *max = 0;
        return true;
    default:
        return false;
    }
}

/* Whether t is a frame the agent sends (else one airlockd sends). */
static inline bool frame_from_agent(frame_type t)
{
    return t == FRAME_STDOUT || t == FRAME_STDERR || t == FRAME_EXIT || t == FRAME_FAIL || t == FRAME_BOOTED ||
           t == FRAME_IDLE || t == FRAME_PONG;
}

static inline void frame_head_put(unsigned char h[FRAME_HEADER], frame_type t, unsigned slot, uint32_t len)
{
    h[0] = (unsigned char)t;
    h[1] = (unsigned char)slot;
    frame_put_u32(h + 2, len);
}

/* Decodes and checks a header: 0, or -1 for an unknown type, a slot out of range or a length
 * outside the type's bounds. */
static inline int frame_head_get(const unsigned char h[FRAME_HEADER], frame_head *out)
{
    uint32_t min, max, len = frame_get_u32(h + 2);
    if (!frame_bounds(h[0], &min, &max) || len < min || len > max)
        return -1;
    if (h[1] >= AGENT_SLOTS && h[1] != FRAME_SLOT_WARMUP)
        return -1;
    *out = (frame_head){.type = (frame_type)h[0], .slot = h[1], .len = len};
    return 0;
}

/* The length of the FRAME_RUN payload for command and env (NULL-terminated); 0 when it is over
 * AGENT_REQUEST_MAX or env has more than FRAME_ENV_MAX entries. */
static inline size_t frame_run_len(const char *command, const char *const *env)
{
    size_t n = 4 + strlen(command) + 1, i;
    for (i = 0; env[i]; i++)
        n += strlen(env[i]) + 1;
    return i > FRAME_ENV_MAX || n > AGENT_REQUEST_MAX ? 0 : n;
}

/* Writes the FRAME_RUN payload into p (frame_run_len bytes). */
static inline void frame_run_put(unsigned char *p, uint32_t timeout_ms, const char *command, const char *const *env)
{
    frame_put_u32(p, timeout_ms);
    p += 4;
    size_t l = strlen(command) + 1;
    memcpy(p, command, l);
    p += l;
    for (size_t i = 0; env[i]; i++) {
        l = strlen(env[i]) + 1;
        memcpy(p, env[i], l);
        p += l;
    }
}

/* Parses a FRAME_RUN payload p[0..len) in place: 0, or -1 when it is not one (too short, not
 * NUL-terminated, more than FRAME_ENV_MAX entries). */
static inline int frame_run_get(char *p, size_t len, frame_run *out)
{
    if (len < 5 || len > AGENT_REQUEST_MAX || p[len - 1] != '\0')
        return -1;
    out->timeout_ms = frame_get_u32((unsigned char *)p);
    char *c = p + 4, *end = p + len;
    out->command = c;
    c += strlen(c) + 1;
    size_t n = 0;
    while (c < end) {
        if (n == FRAME_ENV_MAX)
            return -1;
        out->env[n++] = c;
        c += strlen(c) + 1;
    }
    out->env[n] = NULL;
    return 0;
}

static inline void frame_exit_put(unsigned char p[5], int32_t code, frame_ending ending)
{
    frame_put_u32(p, (uint32_t)code);
    p[4] = (unsigned char)ending;
}

/* 0, or -1 when p[0..len) is not a FRAME_EXIT payload. */
static inline int frame_exit_get(const unsigned char *p, size_t len, frame_exit *out)
{
    if (len != 5 || p[4] > FRAME_ENDED_KILLED)
        return -1;
    out->code = (int32_t)frame_get_u32(p);
    out->ending = (frame_ending)p[4];
    return 0;
}

/* The signal of a FRAME_SIGNAL payload p[0..len): 1 .. FRAME_SIGNAL_MAX, or -1 when it is not
 * one. */
static inline int frame_signal_get(const unsigned char *p, size_t len)
{
    return len == 1 && p[0] >= 1 && p[0] <= FRAME_SIGNAL_MAX ? p[0] : -1;
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

/* One frame to fd, its header and payload in one write where the pipe takes it whole: 0, or
 * -1 (the other side is gone). */
static inline int frame_send(int fd, frame_type t, unsigned slot, const void *p, size_t n)
{
    unsigned char h[FRAME_HEADER];
    frame_head_put(h, t, slot, (uint32_t)n);
    struct iovec iov[2] = {{h, FRAME_HEADER}, {(void *)p, n}};
    ssize_t w;
    do
        w = writev(fd, iov, n ? 2 : 1);
    while (w < 0 && errno == EINTR);
    if (w < 0)
        return -1;
    size_t done = (size_t)w;
    if (done < FRAME_HEADER && frame_write_all(fd, h + done, FRAME_HEADER - done) != 0)
        return -1;
    size_t sent = done > FRAME_HEADER ? done - FRAME_HEADER : 0;
    return sent < n ? frame_write_all(fd, (const char *)p + sent, n - sent) : 0;
}

/* One frame from fd: its checked header in *h and its payload in buf (cap bytes): 0; -1 at
 * end of file or on a read error; -2 for a frame that breaks the protocol (unknown type, a
 * length out of its bounds or over cap). */
static inline int frame_recv(int fd, frame_head *h, void *buf, size_t cap)
{
    unsigned char raw[FRAME_HEADER];
    if (frame_read_all(fd, raw, FRAME_HEADER) != 0)
        return -1;
    if (frame_head_get(raw, h) != 0 || h->len > cap)
        return -2;
    return h->len && frame_read_all(fd, buf, h->len) != 0 ? -1 : 0;
}

#endif
