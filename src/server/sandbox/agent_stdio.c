/* The agent's stdout, read by whichever thread waits for it (see agent_stdio.h). */
#include "sandbox/agent_stdio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* What a slot's queue may hold: its window, in payload bytes and (each at least 1 byte, plus
 * its end) in frames; an agent that sends more broke the protocol. */
#define QUEUE_BYTES_MAX (AGENT_WINDOW + FRAME_FAIL_MAX)
#define QUEUE_FRAMES_MAX (AGENT_WINDOW + 2)

typedef struct {
    agent_frame *head, **tail;
    size_t bytes, frames;
    int wake; /* eventfd */
} slot_queue;

struct agent_stdio {
    pthread_mutex_t *mu;
    int out;
    bool reading; /* a thread holds the reader role */
    bool broken;
    bool idle;    /* a FRAME_IDLE since agent_stdio_idle_said */
    slot_queue q[AGENT_SLOTS];
    /* the reader's: what it read and has not handed out yet (at most one frame's part) */
    size_t have;
    unsigned char buf[FRAME_HEADER + FRAME_OUTPUT_MAX];
};

agent_stdio *agent_stdio_new(int out_fd, pthread_mutex_t *mu)
{
    agent_stdio *io = calloc(1, sizeof *io);
    if (!io || fcntl(out_fd, F_SETFL, O_NONBLOCK) != 0) {
        free(io);
        return NULL;
    }
    io->mu = mu;
    io->out = out_fd;
    for (int i = 0; i < AGENT_SLOTS; i++) {
        io->q[i].tail = &io->q[i].head;
        io->q[i].wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (io->q[i].wake < 0) {
            io->out = -1; /* the caller still owns it */
            agent_stdio_free(io);
            return NULL;
        }
    }
    return io;
}

void agent_stdio_free(agent_stdio *io)
{
    if (!io)
        return;
    for (int i = 0; i < AGENT_SLOTS; i++) {
        agent_stdio_clear(io, (unsigned)i);
        if (io->q[i].wake > 0)
            close(io->q[i].wake);
    }
    if (io->out >= 0)
        close(io->out);
    free(io);
}

int agent_stdio_fd(const agent_stdio *io)
{
    return io->out;
}

int agent_stdio_wake_fd(const agent_stdio *io, unsigned slot)
{
    return io->q[slot].wake;
}

void agent_stdio_woken(agent_stdio *io, unsigned slot)
{
    uint64_t n;
    (void)!read(io->q[slot].wake, &n, sizeof n);
}

static void wake(agent_stdio *io, unsigned slot)
{
    uint64_t one = 1;
    (void)!write(io->q[slot].wake, &one, sizeof one);
}

bool agent_stdio_claim(agent_stdio *io)
{
    if (io->reading)
        return false;
    io->reading = true;
    return true;
}

void agent_stdio_release(agent_stdio *io, unsigned busy)
{
    io->reading = false;
    for (unsigned i = 0; i < AGENT_SLOTS; i++)
        if (busy & (1u << i))
            wake(io, i);
}

/* A frame for the others (locked): queued for its slot and its thread woken, or noted. */
static void deliver(agent_stdio *io, const frame_head *h, const unsigned char *payload)
{
    if (h->type == FRAME_IDLE) {
        io->idle = true;
        return;
    }
    slot_queue *q = &io->q[h->slot];
    agent_frame *f = malloc(sizeof *f + h->len);
    if (!f || q->bytes + h->len > QUEUE_BYTES_MAX || q->frames >= QUEUE_FRAMES_MAX) {
        free(f); /* (out of memory: the slot's thread finds the agent gone) */
        io->broken = true;
        return;
    }
    f->next = NULL;
    f->type = h->type;
    f->len = h->len;
    memcpy(f->payload, payload, h->len);
    *q->tail = f;
    q->tail = &f->next;
    q->bytes += h->len;
    q->frames++;
    wake(io, h->slot);
}

/* The frame at p (have bytes there): its length whole, 0 when not all of it came yet, -1 when
 * it breaks the protocol (not the agent's, a slot out of range). */
static long frame_at(const unsigned char *p, size_t have, frame_head *h)
{
    if (have < FRAME_HEADER)
        return 0;
    if (frame_head_get(p, h) != 0 || !frame_from_agent(h->type) || h->slot >= AGENT_SLOTS ||
        h->type == FRAME_BOOTED)
        return -1;
    return have - FRAME_HEADER < h->len ? 0 : (long)(FRAME_HEADER + h->len);
}

/* Marks the agent broken (a failed read or a frame that breaks the protocol). */
static void set_broken(agent_stdio *io, bool locked)
{
    if (!locked)
        pthread_mutex_lock(io->mu);
    io->broken = true;
    if (!locked)
        pthread_mutex_unlock(io->mu);
}

int agent_stdio_read(agent_stdio *io, unsigned mine, agent_take_fn take, void *ctx, bool locked)
{
    ssize_t r = read(io->out, io->buf + io->have, sizeof io->buf - io->have);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (r <= 0) {
        set_broken(io, locked);
        return -1;
    }
    io->have += (size_t)r;
    size_t off = 0;
    frame_head h;
    long n;
    bool broken = false;
    /* the buffer is the reader's alone, and so is its own queue's head (only a reader queues
     * and only its slot's thread takes): the lock is for the other slots' queues */
    while (!broken && (n = frame_at(io->buf + off, io->have - off, &h)) != 0) {
        if (n < 0) {
            set_broken(io, locked);
            broken = true;
            break;
        }
        const unsigned char *payload = io->buf + off + FRAME_HEADER;
        off += (size_t)n;
        /* the reader's own frame in place, unless earlier ones wait in its queue */
        if (take && h.slot == mine && h.type != FRAME_IDLE && !io->q[mine].head && take(ctx, h.type, payload, h.len))
            continue;
        if (!locked)
            pthread_mutex_lock(io->mu);
        deliver(io, &h, payload);
        broken = io->broken;
        if (!locked)
            pthread_mutex_unlock(io->mu);
    }
    memmove(io->buf, io->buf + off, io->have - off);
    io->have -= off;
    return broken ? -1 : 1;
}

agent_frame *agent_stdio_pop(agent_stdio *io, unsigned slot)
{
    slot_queue *q = &io->q[slot];
    agent_frame *f = q->head;
    if (!f)
        return NULL;
    q->head = f->next;
    if (!q->head)
        q->tail = &q->head;
    q->bytes -= f->len;
    q->frames--;
    return f;
}

void agent_stdio_clear(agent_stdio *io, unsigned slot)
{
    agent_frame *f;
    while ((f = agent_stdio_pop(io, slot)) != NULL)
        free(f);
}

bool agent_stdio_idle_said(agent_stdio *io)
{
    bool said = io->idle;
    io->idle = false;
    return said;
}

bool agent_stdio_broken(const agent_stdio *io)
{
    return io->broken;
}
