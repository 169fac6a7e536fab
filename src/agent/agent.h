/* What the agent's parts share (bubblewrap-style: one file per process of the agent): the
 * container child (container.c), the worker that runs commands in such children one after
 * another (worker.c), the agent's loop that hands airlockd's frames to workers (agent.c), and
 * the output all of them write airlockd's frames to (out.c).
 * The protocol itself is protocol.h. */
#ifndef AIRLOCK_AGENT_AGENT_H
#define AIRLOCK_AGENT_AGENT_H

#include "protocol.h"

#include <stdbool.h>
#include <sys/types.h>

/* The agent's channels with airlockd (protocol.h): its stdin and stdout. */
enum { FD_IN = 0, FD_OUT = 1 };

/* Sets up the output lock; before the first fork. 0, or -1. (out.c) */
int out_init(void);

/* One frame to airlockd on FD_OUT, whole, under the output lock: 0, or -1 (airlockd is gone).
 * (out.c) */
int out_send(frame_type t, unsigned slot, const void *p, size_t n);

#define BINDS_MAX 32

/* A bind mount of the sandbox's placed again in each container's root. */
typedef struct {
    const char *dir;
    char kind; /* 'r' read-only, 'w' read-write, 'd' devices (as the sandbox has it) */
} bind_mount;

/* The sandbox's bind mounts, from the agent's argv (agent.c). */
extern bind_mount agent_binds[BINDS_MAX];
extern int agent_nbinds;

/* Processes a command may have (-p N: its session's max_processes; agent.c). */
#define AGENT_NPROC_DEFAULT 64
#define AGENT_NPROC_MAX 1000000
extern long agent_nproc;

/* Whether a long-lived process (a kernel) runs in the sandbox: set by the agent's loop in
 * memory it shares with its workers (NULL when it could not be had); a worker then waits a
 * little before it makes its next container (worker.c). (agent.c) */
extern volatile int *agent_process_lives;

/* A container child prepared for the next command: bash exec'd and waiting in the bootstrap. */
typedef struct {
    pid_t pid;
    int out_r;   /* its stdout and stderr */
    int err_r;
    int fail_r;  /* its setup error text, or end of file at its exec */
    int ready_r; /* a byte (or end of file) once its mounts are made */
} prepared;

/* Makes the next container child, which reads its request from cmd_r (taken: closed here)
 * and has in_r as its stdin (a long-lived process's, FRAME_SPAWN; the caller's to close; -1:
 * /dev/null); 0, or -1 (errno). (container.c) */
int container_prepare(prepared *p, int cmd_r, int in_r);

/* Kills and reaps p's child if any, and closes its descriptors. (container.c) */
void container_discard(prepared *p);

/* A worker as the agent's loop sees it. */
typedef struct {
    pid_t pid;
    int msg_w;   /* FRAME_RUN / FRAME_SPAWN / FRAME_KILL / FRAME_STDIN / FRAME_SIGNAL frames to it */
    int state_r; /* WORKER_READY / WORKER_DONE bytes from it */
    int slot;    /* the slot of the command it runs; -1 when it has none */
    bool spawned; /* what it runs is a long-lived process (FRAME_SPAWN) */
    bool making;  /* free, and making its next container (from its start or WORKER_DONE to
                   * WORKER_READY) */
    bool held;    /* stopped (SIGSTOP to its process group) while a process's request runs */
} worker;

/* Forks a worker, the leader of a process group of its own (its container child is in it until
 * the command's request comes: the group can be stopped while it makes one): 0, or -1.
 * (worker.c) */
int worker_start(worker *w);

/* Closes *fd when open and sets it to -1. */
static inline void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

#endif
