/* The agent's worker: runs a session's commands one after another, each in a container child
 * made ahead of it (container.c). It says WORKER_READY on its state pipe once the container is
 * made (or cannot be), takes a FRAME_RUN from its message pipe, hands the request to the
 * container, relays the command's pipes to the command's slot as FRAME_STDOUT/FRAME_STDERR
 * (within the slot's window: FRAME_CREDIT from airlockd widens it, and while it is shut the
 * command's pipes fill and its writes wait), kills it at its timeout or at a FRAME_KILL, says
 * WORKER_DONE, sends FRAME_EXIT (or
 * FRAME_FAIL), and makes the next container: commands after the first do not pay for a fork
 * of the worker. It ends when the agent closes its message pipe, or with the agent (its death
 * signal). */
#include "agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>

/* After PID 1 of a command ended, its pipes close as soon as the kernel has killed the rest. */
#define DRAIN_MS 3000
/* While a long-lived process lives, how long after a command the next container waits for a
 * command to come (it is made at once then) before it is made: a cell right after a command
 * does not share the sandbox's CPU with it (agent.c). */
#define WORKER_DEFER_MS 30
/* A command's timeout when its request says none. */
#define DEFAULT_TIMEOUT_MS 15000
#define UNPREPARED "cannot prepare a container"
#define MALFORMED "a malformed request"

static char request[AGENT_REQUEST_MAX + 1];
static char chunk[FRAME_OUTPUT_MAX];

/* The slot of this worker's current command (FRAME_SLOT_WARMUP: its frames go nowhere), and
 * the output bytes it may still send (protocol.h: flow control). */
static unsigned out_slot;
static uint32_t credit;

/* One frame to airlockd; a failure means airlockd is gone: the sandbox ends with the agent. */
static void send_out(frame_type t, const void *p, size_t n)
{
    if (out_slot != FRAME_SLOT_WARMUP && out_send(t, out_slot, p, n) != 0)
        _exit(0);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Relays what one pipe has to airlockd as frames of type t, within the credit; -1 at end of
 * file. */
static int relay(int *fd, frame_type t)
{
    ssize_t r = read(*fd, chunk, credit < sizeof chunk ? credit : sizeof chunk);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (r <= 0) {
        close_fd(fd);
        return -1;
    }
    credit -= (uint32_t)r;
    send_out(t, chunk, (size_t)r);
    return 0;
}

static int exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -1;
}

/* How a command ended: the frame that says so (FRAME_EXIT, or FRAME_FAIL with the container's
 * set-up error). */
typedef struct {
    frame_type type;
    unsigned char payload[FRAME_FAIL_MAX];
    size_t len;
} ending;

/* A long-lived process's stdin (FRAME_SPAWN): its pipe (non-blocking, -1 for a command or
 * once closed) and the bytes airlockd sent that it has not taken yet (airlockd sends one
 * request at a time: bounded by one request). */
typedef struct {
    int w;
    char *pending;
    size_t len;
    bool close_after; /* an empty FRAME_STDIN came: closed once pending is written */
} stdin_feed;

/* Writes what the pipe takes of f's pending bytes; closes it when asked and all is written, or
 * when its reader is gone. */
static void feed(stdin_feed *f)
{
    while (f->w >= 0 && f->len > 0) {
        ssize_t n = write(f->w, f->pending, f->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            f->len = 0;
            close_fd(&f->w);
            break;
        }
        memmove(f->pending, f->pending + n, f->len - (size_t)n);
        f->len -= (size_t)n;
    }
    if (f->len == 0 && f->close_after)
        close_fd(&f->w);
}

/* Takes a FRAME_STDIN payload request[0..len) for f (bytes past the bound are dropped: airlockd
 * never sends them). */
static void take_stdin(stdin_feed *f, size_t len)
{
    if (len == 0) {
        f->close_after = true;
    } else if (f->w >= 0 && f->pending && f->len + len <= AGENT_REQUEST_MAX + FRAME_OUTPUT_MAX) {
        memcpy(f->pending + f->len, request, len);
        f->len += len;
    }
    feed(f);
}

/* What came on *msg_r for the running process: a FRAME_KILL's or FRAME_SIGNAL's signal (0 for
 * none: a FRAME_CREDIT widens its window, a FRAME_STDIN is stdin for it, anything else is
 * dropped). Closes *msg_r when the agent is gone. */
static int signal_asked(int *msg_r, stdin_feed *in)
{
    frame_head h;
    int rc = frame_recv(*msg_r, &h, request, sizeof request);
    if (rc != 0) {
        close_fd(msg_r); /* the agent is gone: so is this worker, at its death signal */
        return 0;
    }
    if (h.type == FRAME_CREDIT) {
        uint32_t more = frame_get_u32((unsigned char *)request);
        credit = more > AGENT_WINDOW * 4u - credit ? AGENT_WINDOW * 4u : credit + more;
    }
    if (h.type == FRAME_KILL)
        return SIGKILL;
    if (h.type == FRAME_SIGNAL) {
        int sig = frame_signal_get((unsigned char *)request, h.len);
        return sig > 0 ? sig : 0;
    }
    if (h.type == FRAME_STDIN)
        take_stdin(in, h.len);
    return 0;
}

/* Relays the output of p, whose request the worker wrote to it, until it ends, the timeout
 * (none for a long-lived process: spawned) or a FRAME_KILL on *msg_r (airlockd's cancel);
 * FRAME_SIGNAL's signals go to its PID 1, FRAME_STDIN's bytes to in; then says how it ended in
 * *end. */
static void run(prepared *p, uint32_t timeout_ms, bool spawned, stdin_feed *in, int sigfd, int *msg_r, ending *end)
{
    int64_t deadline = spawned ? INT64_MAX : now_ms() + (timeout_ms ? timeout_ms : DEFAULT_TIMEOUT_MS);
    frame_ending killed = FRAME_ENDED_EXITED;
    int status = 0, exited = 0;
    int64_t drain_until = 0;
    size_t fail_len = 0;
    while (p->out_r >= 0 || p->err_r >= 0 || !exited || p->fail_r >= 0) {
        /* a shut window holds the pipes (the process's writes wait), and the drain for it */
        bool open = credit > 0;
        struct pollfd pf[6] = {
            {.fd = open ? p->out_r : -1, .events = POLLIN}, {.fd = open ? p->err_r : -1, .events = POLLIN},
            {.fd = sigfd, .events = POLLIN},    {.fd = p->fail_r, .events = POLLIN},
            {.fd = *msg_r, .events = POLLIN},
            {.fd = in->len > 0 ? in->w : -1, .events = POLLOUT},
        };
        int64_t now = now_ms();
        if (exited && !open && *msg_r >= 0)
            drain_until = now + DRAIN_MS;
        int64_t until = exited ? drain_until : deadline;
        if (now >= until) {
            if (exited)
                break; /* something outside the namespace holds a pipe: give up on it */
            kill(p->pid, SIGKILL);
            killed = FRAME_ENDED_TIMED_OUT;
            deadline = now + 60000;
            continue;
        }
        int64_t wait = until - now;
        if (poll(pf, 6, wait > 60000 ? 60000 : (int)wait) < 0 && errno != EINTR)
            _exit(1);
        if (pf[5].revents)
            feed(in);
        if (pf[0].revents)
            relay(&p->out_r, FRAME_STDOUT);
        if (pf[1].revents)
            relay(&p->err_r, FRAME_STDERR);
        if (pf[3].revents) {
            ssize_t r = read(p->fail_r, end->payload + fail_len, sizeof end->payload - fail_len);
            if (r > 0)
                fail_len += (size_t)r;
            else if (r == 0 || errno != EINTR)
                close_fd(&p->fail_r);
        }
        int sig = pf[4].revents ? signal_asked(msg_r, in) : 0;
        if (sig > 0 && !killed && !exited)
            kill(p->pid, sig);
        if (sig == SIGKILL && !killed && !exited)
            killed = FRAME_ENDED_KILLED;
        if (pf[2].revents) {
            struct signalfd_siginfo si;
            while (read(sigfd, &si, sizeof si) > 0) {
            }
            int st;
            if (!exited && waitpid(p->pid, &st, WNOHANG) == p->pid) {
                exited = 1;
                status = st;
                drain_until = now_ms() + DRAIN_MS;
            }
        }
    }
    p->pid = -1;
    close_fd(&in->w);
    in->len = 0;
    close_fd(&p->out_r);
    close_fd(&p->err_r);
    close_fd(&p->fail_r);
    if (fail_len > 0 && !killed) {
        end->type = FRAME_FAIL;
        end->len = fail_len;
        return;
    }
    end->type = FRAME_EXIT;
    frame_exit_put(end->payload, killed ? -1 : exit_code(status), killed);
    end->len = 5;
}

/* Hands request[0..len) to a container on its request pipe, as u32 length and request. A
 * container that died in its set-up is told nothing: its fail pipe has the reason. */
static void give_request(int cmd_w, size_t len)
{
    unsigned char n[4];
    frame_put_u32(n, (uint32_t)len);
    if (frame_write_all(cmd_w, n, 4) == 0)
        (void)frame_write_all(cmd_w, request, len);
}

/* Waits for the next FRAME_RUN or FRAME_SPAWN on msg_r (a FRAME_KILL, FRAME_STDIN or
 * FRAME_SIGNAL for a process that ended already is nothing); its head, or ends the worker when
 * the agent is gone or needs it no more. */
static frame_head next_run(int msg_r, prepared *p)
{
    frame_head h;
    do {
        int rc = frame_recv(msg_r, &h, request, sizeof request);
        if (rc == -2)
            _exit(1); /* the agent never sends one */
        if (rc != 0) {
            container_discard(p);
            _exit(0);
        }
    } while (h.type != FRAME_RUN && h.type != FRAME_SPAWN);
    return h;
}

/* For a FRAME_SPAWN: the container made ahead (stdin /dev/null) is replaced by one whose stdin
 * is a pipe of the worker's (in), on a new request pipe cmd. 0, or -1. */
static int respawn(prepared *p, int cmd[2], stdin_feed *in)
{
    container_discard(p);
    close_fd(&cmd[1]);
    int pin[2];
    if (!(in->pending = malloc(AGENT_REQUEST_MAX + FRAME_OUTPUT_MAX)))
        return -1;
    if (pipe2(pin, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(cmd, O_CLOEXEC) != 0 || container_prepare(p, cmd[0], pin[0]) != 0 ||
        fcntl(pin[1], F_SETFL, O_NONBLOCK) != 0) {
        close(pin[0]);
        close(pin[1]);
        return -1;
    }
    close(pin[0]);
    in->w = pin[1];
    char b;
    if (read(p->ready_r, &b, 1) < 0) { /* (end of file: the fail pipe says why) */
    }
    close_fd(&p->ready_r);
    return 0;
}

static void worker_main(int msg_r, int state_w)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        _exit(1);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    int sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    for (bool after_command = false;; after_command = true) {
        if (after_command && agent_process_lives && *agent_process_lives) {
            struct pollfd next = {.fd = msg_r, .events = POLLIN};
            (void)poll(&next, 1, WORKER_DEFER_MS);
        }
        prepared p = {.pid = -1, .out_r = -1, .err_r = -1, .fail_r = -1, .ready_r = -1};
        int cmd[2] = {-1, -1};
        /* a container that cannot be made is said to its command's slot, once that comes */
        bool unprepared = sigfd < 0 || pipe2(cmd, O_CLOEXEC) != 0 || container_prepare(&p, cmd[0], -1) != 0;
        char b;
        if (!unprepared && read(p.ready_r, &b, 1) < 0) { /* (end of file: the fail pipe says why) */
        }
        close_fd(&p.ready_r);
        const char ready = WORKER_READY, done = WORKER_DONE;
        if (frame_write_all(state_w, &ready, 1) != 0)
            _exit(0);
        frame_head h = next_run(msg_r, &p);
        out_slot = h.slot;
        credit = AGENT_WINDOW;
        stdin_feed in = {.w = -1, .pending = NULL};
        if (h.type == FRAME_SPAWN && !unprepared)
            unprepared = respawn(&p, cmd, &in) != 0;
        frame_run req;
        const char *refusal = unprepared ? UNPREPARED
                              : frame_run_get(request, h.len, &req) != 0 ? MALFORMED : NULL;
        ending end = {.type = FRAME_FAIL};
        if (refusal) {
            end.len = strlen(refusal);
            memcpy(end.payload, refusal, end.len);
            close_fd(&cmd[1]);
            container_discard(&p);
        } else {
            give_request(cmd[1], h.len);
            close_fd(&cmd[1]);
            run(&p, req.timeout_ms, h.type == FRAME_SPAWN, &in, sigfd, &msg_r, &end);
        }
        close_fd(&in.w);
        free(in.pending);
        /* free again before airlockd hears of the exit: the next command, sent when it does,
         * finds this worker free */
        if (msg_r < 0 || frame_write_all(state_w, &done, 1) != 0)
            _exit(0);
        send_out(end.type, end.payload, end.len);
    }
}

int worker_start(worker *w)
{
    int msg[2], state[2];
    if (pipe2(msg, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(state, O_CLOEXEC) != 0) {
        close(msg[0]);
        close(msg[1]);
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        (void)setpgid(0, 0);
        close(msg[1]);
        close(state[0]);
        worker_main(msg[0], state[1]);
    }
    if (pid > 0)
        (void)setpgid(pid, pid); /* (both sides: a stop may come before the child ran) */
    close(msg[0]);
    close(state[1]);
    if (pid < 0) {
        close(msg[1]);
        close(state[0]);
        return -1;
    }
    *w = (worker){.pid = pid, .msg_w = msg[1], .state_r = state[0], .slot = -1, .making = true};
    return 0;
}
