/* A session sandbox's agent speaks on its stdout (src/agent/protocol.h: the channels): every
 * slot's frames on one pipe. Nobody reads it for the others: the thread that waits for frames
 * of its own reads it itself, while it holds the reader role (one thread at a time), takes its
 * own frames in place and queues the other slots' for their threads, waking them; with one
 * command at a time no frame changes thread. A queue holds at most the slot's window
 * (AGENT_WINDOW, FRAME_CREDIT): a slot whose client reads slowly never stalls the pipe.
 * Everything here but agent_stdio_read runs under the sandbox's agent_mu (given at creation). */
#ifndef AIRLOCKD_SANDBOX_AGENT_STDIO_H
#define AIRLOCKD_SANDBOX_AGENT_STDIO_H

#include "../../agent/protocol.h"

#include <pthread.h>
#include <stdbool.h>

typedef struct agent_stdio agent_stdio;

/* A frame queued for its slot's thread (free() when done). */
typedef struct agent_frame {
    struct agent_frame *next;
    frame_type type;
    uint32_t len;
    unsigned char payload[];
} agent_frame;

/* Whether the reader's own frame was taken in (false: queue it, e.g. its client is slow). */
typedef bool (*agent_take_fn)(void *ctx, frame_type t, const unsigned char *payload, uint32_t len);

/* Reads the agent's stdout out_fd (taken: closed by agent_stdio_free); mu guards the rest.
 * NULL when out of memory or descriptors. */
agent_stdio *agent_stdio_new(int out_fd, pthread_mutex_t *mu);
void agent_stdio_free(agent_stdio *io);

/* The agent's stdout, to poll while holding the reader role; and slot's wake-up descriptor
 * (readable when frames were queued for it or the role came free), to poll otherwise. */
int agent_stdio_fd(const agent_stdio *io);
int agent_stdio_wake_fd(const agent_stdio *io, unsigned slot);
/* Empties slot's wake-up descriptor. */
void agent_stdio_woken(agent_stdio *io, unsigned slot);

/* The reader role: true when the caller now holds it (nobody did). Locked. */
bool agent_stdio_claim(agent_stdio *io);
/* Gives the role up, waking the threads of the slots in busy (a bit per slot) to take it on.
 * Locked. */
void agent_stdio_release(agent_stdio *io, unsigned busy);

/* The reader: what the agent wrote (not waiting for it). Each frame of slot mine goes to take
 * while mine's queue is empty and take accepts it (take NULL, or mine >= AGENT_SLOTS: none);
 * else each frame is queued for its slot; FRAME_IDLE is noted (agent_stdio_idle_said). 1 when
 * something was read, 0 when nothing was there, -1 when the agent is gone (end of file) or
 * broke the protocol (agent_stdio_broken from then on). With locked, the caller holds mu. */
int agent_stdio_read(agent_stdio *io, unsigned mine, agent_take_fn take, void *ctx, bool locked);

/* The next frame queued for slot, NULL when none. Locked. */
agent_frame *agent_stdio_pop(agent_stdio *io, unsigned slot);
/* Drops what slot's queue holds (its command is over). Locked. */
void agent_stdio_clear(agent_stdio *io, unsigned slot);
/* Whether a FRAME_IDLE came since the last call. Locked. */
bool agent_stdio_idle_said(agent_stdio *io);
/* True once the agent is gone or broke the protocol. Locked. */
bool agent_stdio_broken(const agent_stdio *io);

#endif
