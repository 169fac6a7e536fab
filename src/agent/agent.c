/* airlock-agent: the first process of a session's long-lived gVisor sandbox (SANDBOX_EXEC_MODE=
 * session). It runs as root inside the sandbox and runs each command of the session in a fresh
 * container of its own: a child in new PID, mount, IPC and UTS namespaces, whose root is a new
 * overlay (writable, thrown away) over the sandbox's read-only root, with the sandbox's bind
 * mounts (-r DIR read-only, -w DIR read-write, -d DIR with its devices: /dev) placed again, and new /tmp, /dev/shm and /proc;
 * -p N sets how many processes each command may have (its session's max_processes, default 64).
 * The child drops to uid/gid 1000 with no capabilities and no_new_privs, with stdin /dev/null
 * and cwd /workspace, and execs /bin/bash as PID 1 of its namespace before its command comes:
 * bash, loaded, waits in the preloaded bootstrap (bootstrap.c) for the command and its
 * environment on a pipe, then starts as `/bin/bash -c COMMAND` would. When that PID 1 ends (or the
 * timeout, or a cancel, kills it) the kernel kills everything else in its namespace; the agent
 * reads the command's pipes to their end, reports the exit, and then prepares the next child
 * (not while the command runs: they would share the sandbox's CPU; nor, while a kernel lives,
 * while a cell of it may run: HOLD_MS below).
 *
 * Each command runs in a worker process of the agent's, which made its container child ahead
 * of it, relays its pipes and reports its exit on the command's slot, then makes the
 * next container and waits for the next command: a session's commands one after another reuse
 * one worker. Commands of a session may run at once (AGENT_SLOTS, each in its own container):
 * a command that finds no free worker gets a new one at once; when they end, one worker stays.
 *
 * A long-lived process (a session's kernel: FRAME_SPAWN) runs the same way on a slot of its own,
 * in a container made for it with its stdin on a pipe of its worker's (FRAME_STDIN feeds it),
 * without a timeout; FRAME_SIGNAL's signals go to it (SIGINT: interrupt its cell). It holds its
 * slot and worker until it ends.
 *
 * The protocol and its channels (the agent's stdin and stdout) are protocol.h's; the container
 * child is container.c, the worker worker.c, the output they share out.c (agent.h says what
 * they share).
 *
 * Commands cannot reach the agent: it lives in the sandbox's first PID namespace (theirs are
 * children), as root (they are uid 1000 without capabilities), and every descriptor of the
 * agent is close-on-exec. Static, so the sandbox needs no loader to run it. */
#include "agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>

#define UNPREPARED "cannot prepare a container"
/* While a long-lived process (a kernel) lives, the making of the next container waits until a
 * command comes, or WORKER_DEFER_MS after a command ended (worker.c: a cell may come right after
 * it), or HOLD_MS after a request to the process (a cell) came (the worker is stopped): the
 * cell then has the sandbox's CPU to itself. A container's making takes ~10 ms of it and a cell
 * using state already loaded a few ms; a cell right after a command took twice as long as one
 * 0.3 s later while the container was being made. */
#define HOLD_MS 50

bind_mount agent_binds[BINDS_MAX];
volatile int *agent_process_lives;
int agent_nbinds;
long agent_nproc = AGENT_NPROC_DEFAULT;

/* The frame from airlockd being handed on: its payload. */
static char request[AGENT_REQUEST_MAX + 1];

/* After FRAME_BOOTED, FRAME_IDLE says to airlockd each time that the container for the next
 * command is ready (or cannot be made): airlockd freezes an idle sandbox only then (or after a
 * second), never with that container half made, and never holds a command's result for it. */
static bool booted;

static void say_idle(void)
{
    if (booted)
        (void)out_send(FRAME_IDLE, 0, NULL, 0);
}

/* The workers: one per command running, and one free (its container made, or being made) for
 * the next command. */
#define WORKERS (AGENT_SLOTS + 1)
static worker workers[WORKERS];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* While > 0: when the held workers go on (CLOCK_MONOTONIC ms). */
static int64_t hold_until;

/* The free workers making a container stop (their process groups: the container child being
 * made is in its worker's) for ms from now, or longer if held already. */
static void hold_spares(int ms)
{
    for (int i = 0; i < WORKERS; i++) {
        worker *w = &workers[i];
        if (w->pid > 0 && w->slot < 0 && w->making && !w->held && kill(-w->pid, SIGSTOP) == 0)
            w->held = true;
    }
    int64_t until = now_ms() + ms;
    if (until > hold_until)
        hold_until = until;
}

/* Says to the workers (agent_process_lives) whether a long-lived process runs. */
static void say_if_process_lives(void)
{
    bool lives = false;
    for (int i = 0; i < WORKERS; i++)
        lives = lives || (workers[i].pid > 0 && workers[i].slot >= 0 && workers[i].spawned);
    if (agent_process_lives)
        *agent_process_lives = lives;
}

/* The held workers go on. */
static void release_spares(void)
{
    for (int i = 0; i < WORKERS; i++)
        if (workers[i].held) {
            (void)kill(-workers[i].pid, SIGCONT);
            workers[i].held = false;
        }
    hold_until = 0;
}

/* Ends w: a worker without its message pipe discards its container and exits. */
static void let_worker_go(worker *w)
{
    if (w->held) {
        (void)kill(-w->pid, SIGCONT);
        w->held = false;
    }
    w->making = false;
    close_fd(&w->msg_w);
    close_fd(&w->state_r);
    w->pid = -1;
}

/* Hands the FRAME_RUN (or FRAME_SPAWN: t) whose payload is request[0..len) for slot to w. */
static void hand_over(worker *w, frame_type t, unsigned slot, size_t len)
{
    if (frame_send(w->msg_w, t, slot, request, len) != 0) {
        /* it died: its slot stays silent, and airlockd kills the sandbox after the timeout */
    }
    w->slot = slot == FRAME_SLOT_WARMUP ? -1 : (int)slot;
    w->spawned = t == FRAME_SPAWN;
    w->making = false;
    say_if_process_lives();
}

/* A free worker (without a command) other than except, NULL when there is none. */
static worker *free_worker(const worker *except)
{
    for (int i = 0; i < WORKERS; i++)
        if (&workers[i] != except && workers[i].pid > 0 && workers[i].slot < 0)
            return &workers[i];
    return NULL;
}

/* A new worker in an unused place; NULL when none can be made. */
static worker *new_worker(void)
{
    for (int i = 0; i < WORKERS; i++)
        if (workers[i].pid <= 0)
            return worker_start(&workers[i]) == 0 ? &workers[i] : NULL;
    return NULL;
}

/* What w said on its state pipe. A worker whose command ended stays for the next command
 * unless another is free already (it goes: one container made ahead is enough). */
static void heard_from(worker *w)
{
    char b;
    ssize_t r = read(w->state_r, &b, 1);
    if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
        let_worker_go(w); /* it died: reaped below */
        return;
    }
    if (r < 0)
        return;
    if (b == WORKER_DONE) {
        w->slot = -1;
        w->spawned = false;
        w->making = true;
        say_if_process_lives();
        if (free_worker(w))
            let_worker_go(w);
    } else if (b == WORKER_READY && w->slot < 0) {
        w->making = false;
        say_idle();
    }
}

/* Reaps ended workers (and the containers of workers that ended). */
static void reap(int sigfd)
{
    struct signalfd_siginfo si;
    while (read(sigfd, &si, sizeof si) > 0) {
    }
    pid_t pid;
    while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
        for (int i = 0; i < WORKERS; i++)
            if (workers[i].pid == pid)
                let_worker_go(&workers[i]);
}

static void usage_exit(void)
{
    static const char msg[] = "usage: airlock-agent [-p PROCESSES] [-r DIR | -w DIR | -d DIR]... (run by airlockd in a sandbox)\n";
    (void)frame_write_all(2, msg, sizeof msg - 1);
    _exit(2);
}

/* A FRAME_RUN or FRAME_SPAWN (t) from airlockd (its payload in request[0..len)): to the free
 * worker (its container made ahead, or being made), else to a new one; FRAME_FAIL when none
 * can be had. */
static void command(frame_type t, unsigned slot, size_t len)
{
    worker *w = free_worker(NULL);
    if (!w && !(w = new_worker())) {
        (void)out_send(FRAME_FAIL, slot, UNPREPARED, sizeof UNPREPARED - 1);
        return;
    }
    hand_over(w, t, slot, len);
}

/* A FRAME_KILL, FRAME_STDIN, FRAME_SIGNAL or FRAME_CREDIT (t) from airlockd, its payload in
 * request[0..len): to the worker running that slot's process (none: it ended, nothing to do).
 * Bytes for a long-lived process's stdin are a request to it: the spare containers wait. */
static void pass_on(frame_type t, unsigned slot, size_t len)
{
    for (int i = 0; i < WORKERS; i++)
        if (workers[i].pid > 0 && workers[i].slot == (int)slot) {
            if (t == FRAME_STDIN && len > 0 && workers[i].spawned)
                hold_spares(HOLD_MS);
            (void)frame_send(workers[i].msg_w, t, slot, request, len);
        }
}

/* The warm-up: `true` with no environment run in the first worker (gVisor's first exec is the
 * slow one; its frames go nowhere), then that worker's container for the first command.
 * 0, or -1 when the worker died. */
static int warm_up(void)
{
    worker *w = new_worker();
    if (!w)
        return -1;
    const char *const no_env[] = {NULL};
    size_t len = frame_run_len("true", no_env);
    frame_run_put((unsigned char *)request, 15000, "true", no_env);
    hand_over(w, FRAME_RUN, FRAME_SLOT_WARMUP, len);
    char b;
    while (w->state_r >= 0 && frame_read_all(w->state_r, &b, 1) == 0 && b != WORKER_DONE) {
    }
    while (w->state_r >= 0 && frame_read_all(w->state_r, &b, 1) == 0 && b != WORKER_READY) {
    }
    if (w->pid <= 0 || w->state_r < 0)
        return -1;
    w->slot = -1;
    return 0;
}

/* The process limit (-p N) and the binds (-r/-w/-d DIR ...) from argv, or the usage and exit. */
static void parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 < argc && strcmp(argv[i], "-p") == 0) {
            char *end = NULL;
            errno = 0;
            agent_nproc = strtol(argv[i + 1], &end, 10);
            if (errno || end == argv[i + 1] || *end || agent_nproc < 2 || agent_nproc > AGENT_NPROC_MAX)
                usage_exit();
            continue;
        }
        if (i + 1 >= argc || agent_nbinds == BINDS_MAX || argv[i + 1][0] != '/' || argv[i][0] != '-' ||
            argv[i][1] == '\0' || !strchr("rwd", argv[i][1]) || argv[i][2] != '\0')
            usage_exit();
        agent_binds[agent_nbinds++] = (bind_mount){argv[i + 1], argv[i][1]};
    }
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &chld, NULL) != 0)
        return 1;
    int sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd < 0 || fcntl(FD_IN, F_SETFD, FD_CLOEXEC) != 0 || fcntl(FD_OUT, F_SETFD, FD_CLOEXEC) != 0 ||
        out_init() != 0)
        return 1;
    for (int i = 0; i < WORKERS; i++)
        workers[i] = (worker){.pid = -1, .msg_w = -1, .state_r = -1, .slot = -1};
    /* shared with the workers forked from here (never with what they exec) */
    void *shared = mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared != MAP_FAILED)
        agent_process_lives = shared;
    /* airlockd expects FRAME_BOOTED first: the warm-up comes before it */
    if (warm_up() != 0 || out_send(FRAME_BOOTED, 0, NULL, 0) != 0)
        return 1;
    booted = true;
    say_idle();
    for (;;) {
        struct pollfd pf[2 + WORKERS] = {{.fd = FD_IN, .events = POLLIN}, {.fd = sigfd, .events = POLLIN}};
        for (int i = 0; i < WORKERS; i++)
            pf[2 + i] = (struct pollfd){.fd = workers[i].state_r, .events = POLLIN};
        int64_t left = hold_until > 0 ? hold_until - now_ms() : -1;
        if (hold_until > 0 && left <= 0) {
            release_spares();
            left = -1;
        }
        if (poll(pf, 2 + WORKERS, left > 0 ? (int)left : -1) < 0 && errno != EINTR)
            return 1;
        for (int i = 0; i < WORKERS; i++)
            if (pf[2 + i].revents && workers[i].state_r >= 0)
                heard_from(&workers[i]);
        if (pf[1].revents)
            reap(sigfd);
        /* a worker whose command ends is free again; one is made when none is left (all died) */
        bool any = false;
        for (int i = 0; i < WORKERS; i++)
            any = any || workers[i].pid > 0;
        if (!any)
            (void)new_worker();
        if (!pf[0].revents)
            continue;
        frame_head h;
        int rc = frame_recv(FD_IN, &h, request, sizeof request);
        if (rc == -1)
            break; /* airlockd is gone: every worker and container dies with the agent */
        if (rc == -2 || h.slot >= AGENT_SLOTS)
            return 1; /* airlockd never sends one: the stream cannot be trusted past it */
        if (h.type == FRAME_RUN || h.type == FRAME_SPAWN) {
            release_spares(); /* a command never waits for a held container */
            command(h.type, h.slot, h.len);
        }
        else if (h.type == FRAME_KILL || h.type == FRAME_STDIN || h.type == FRAME_SIGNAL || h.type == FRAME_CREDIT)
            pass_on(h.type, h.slot, h.len);
        else if (h.type == FRAME_PING) /* the agent itself answers: no worker, no container */
            (void)out_send(FRAME_PONG, h.slot, NULL, 0);
    }
    return 0;
}
