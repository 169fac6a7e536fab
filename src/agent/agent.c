/* airlock-agent: the first process of a session's long-lived gVisor sandbox (SANDBOX_EXEC_MODE=
 * session). It runs as root inside the sandbox and runs each command of the session in a fresh
 * container of its own: a child in new PID, mount, IPC and UTS namespaces, whose root is a new
 * overlay (writable, thrown away) over the sandbox's read-only root, with the sandbox's bind
 * mounts (-r DIR read-only, -w DIR read-write, -d DIR with its devices: /dev) placed again, and new /tmp, /dev/shm and /proc.
 * The child drops to uid/gid 1000 with no capabilities and no_new_privs, with stdin /dev/null
 * and cwd /workspace, and execs /bin/bash as PID 1 of its namespace before its command comes:
 * bash, loaded, waits in the preloaded bootstrap (bootstrap.c) for the command and its
 * environment on a pipe, then starts as `/bin/bash -c COMMAND` would. When that PID 1 ends (or the
 * timeout, or a cancel, kills it) the kernel kills everything else in its namespace; the agent
 * reads the command's pipes to their end, reports the exit, and then prepares the next child
 * (not while the command runs: they would share the sandbox's CPU).
 *
 * Each command runs in a worker process of the agent's, which made its container child ahead
 * of it, relays its pipes and reports its exit on the command's own channel, then makes the
 * next container and waits for the next command: a session's commands one after another reuse
 * one worker. Commands of a session may run at once (AGENT_SLOTS, each in its own container):
 * a command that finds no free worker gets a new one at once; when they end, one worker stays.
 *
 * Protocol (frames: 1 type byte, 4 bytes little-endian length, payload), on fds passed by
 * `runsc run --pass-fd` and held on the host only by airlockd:
 *   fd 3, airlockd -> agent: 'C' u8 slot, u32 timeout_ms, command NUL, env entries NUL-terminated
 *                            each; 'K' u8 slot: kill the command running in that slot (cancel).
 *   fd 4, agent -> airlockd: the byte 'R' once booted (as airlock-waiter says it); then a 'g'
 *                            each time the next command's container is ready (or cannot be made).
 *   fd 5 + slot, agent -> airlockd, for the command of that slot (0 .. AGENT_SLOTS - 1):
 *                            '1' / '2' stdout / stderr bytes as read;
 *                            'X' i32 exit code (shell conventions), u8 timed out (1) / killed (2).
 *                            'F' text: the command could not be started (the agent goes on).
 * Commands cannot reach the agent: it lives in the sandbox's first PID namespace (theirs are
 * children), as root (they are uid 1000 without capabilities), and every descriptor of the
 * agent is close-on-exec. Static, so the sandbox needs no loader to run it. */
#include "frames.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { FD_IN = 3, FD_READY = 4, FD_OUT = 5 };
/* A worker's slot for the warm-up command, whose frames go nowhere. */
#define SLOT_NONE 255

#define UID 1000
#define GID 1000
#define NPROC_DEFAULT 64
#define NPROC_MAX 1000000
#define REQUEST_MAX AGENT_REQUEST_MAX
#define BINDS_MAX 32
#define CHUNK FRAME_OUTPUT_MAX
/* Where the child builds its root, inside a tmpfs of its own mount namespace. */
#define NEW_BASE "/tmp"
#define NEW_ROOT NEW_BASE "/root"
#define TMP_OPTS "size=64m,mode=1777"
#define ROOT_OPTS "size=64m,mode=755"
/* After PID 1 of a command ended, its pipes close as soon as the kernel has killed the rest. */
#define DRAIN_MS 3000

typedef struct {
    const char *dir;
    char kind; /* 'r' read-only, 'w' read-write, 'd' devices (as the sandbox has it) */
} bind_mount;

static bind_mount binds[BINDS_MAX];
static int nbinds;
/* Processes a command may have (-p N: its session's max_processes). */
static long nproc_limit = NPROC_DEFAULT;
static char request[REQUEST_MAX + 1];

/* The child prepared for the next command. */
typedef struct {
    pid_t pid;
    int out_r;   /* its stdout and stderr */
    int err_r;
    int fail_r;  /* its setup error text, or end of file at its exec */
    int ready_r; /* a byte (or end of file) once its mounts are made */
} prepared;

/* Where this process's frames go: the channel of the command's slot. */
static int out_fd = FD_OUT;

/* One frame to airlockd; a failure means airlockd is gone: the sandbox ends with the agent. */
static void send_frame(char type, const void *p, size_t n)
{
    unsigned char h[FRAME_HEADER];
    h[0] = (unsigned char)type;
    frame_put_u32(h + 1, (uint32_t)n);
    if (frame_write_all(out_fd, h, FRAME_HEADER) != 0 || (n && frame_write_all(out_fd, p, n) != 0))
        _exit(0);
}

/* ---- the child: a fresh container waiting for its command ------------------------------ */

/* Reports a failed step (text on the fail pipe) and ends the child. */
static void child_fail(int fail_w, const char *step)
{
    char msg[256];
    int n = snprintf(msg, sizeof msg, "%s: %s", step, strerror(errno));
    if (n > 0)
        (void)frame_write_all(fail_w, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(126);
}

static int bind_into(const bind_mount *m)
{
    char dst[PATH_MAX];
    if (snprintf(dst, sizeof dst, "%s%s", NEW_ROOT, m->dir) >= (int)sizeof dst)
        return -1;
    if (mount(m->dir, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
        return -1;
    if (m->kind == 'd')
        return 0;
    unsigned long fl = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (m->kind == 'w' ? 0 : MS_RDONLY);
    return mount(NULL, dst, NULL, fl, NULL);
}

/* The new root: an overlay over / in a fresh tmpfs, the sandbox's binds, a fresh /tmp,
 * /dev/shm and /proc; pivoted into, the old root detached. */
static void child_mounts(int fail_w)
{
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        child_fail(fail_w, "making mounts private");
    if (mount("tmpfs", NEW_BASE, "tmpfs", MS_NOSUID | MS_NODEV, ROOT_OPTS) != 0)
        child_fail(fail_w, "mounting the root's tmpfs");
    if (mkdir(NEW_BASE "/up", 0755) != 0 || mkdir(NEW_BASE "/work", 0755) != 0 || mkdir(NEW_ROOT, 0755) != 0)
        child_fail(fail_w, "making the overlay's directories");
    if (mount("overlay", NEW_ROOT, "overlay", MS_NOSUID | MS_NODEV,
              "lowerdir=/,upperdir=" NEW_BASE "/up,workdir=" NEW_BASE "/work") != 0)
        child_fail(fail_w, "mounting the overlay root");
    for (int i = 0; i < nbinds; i++)
        if (bind_into(&binds[i]) != 0)
            child_fail(fail_w, binds[i].dir);
    unsigned long noexec = MS_NOSUID | MS_NODEV | MS_NOEXEC;
    if (mount("proc", NEW_ROOT "/proc", "proc", noexec, NULL) != 0)
        child_fail(fail_w, "mounting /proc");
    if (mount("tmpfs", NEW_ROOT "/tmp", "tmpfs", noexec, TMP_OPTS) != 0)
        child_fail(fail_w, "mounting /tmp");
    if (mount("shm", NEW_ROOT "/dev/shm", "tmpfs", noexec, TMP_OPTS) != 0)
        child_fail(fail_w, "mounting /dev/shm");
    if (chdir(NEW_ROOT) != 0 || syscall(SYS_pivot_root, ".", ".") != 0 || umount2(".", MNT_DETACH) != 0 ||
        chdir("/") != 0)
        child_fail(fail_w, "pivoting into the new root");
    if (sethostname("sandbox", 7) != 0)
        child_fail(fail_w, "setting the host name");
}

/* Drops to UID/GID with no capabilities (bounding set emptied, so nothing regains any),
 * no_new_privs, the command's limits. */
static void child_drop(int fail_w)
{
    /* gVisor counts a uid's tasks from their creation: this child was made as root, so it is
     * not among uid 1000's; one less keeps the command at nproc_limit processes in all */
    struct rlimit nproc = {(rlim_t)nproc_limit - 1, (rlim_t)nproc_limit - 1}, core = {0, 0};
    if (setrlimit(RLIMIT_NPROC, &nproc) != 0 || setrlimit(RLIMIT_CORE, &core) != 0)
        child_fail(fail_w, "setting limits");
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            child_fail(fail_w, "dropping capabilities");
    /* raw system calls: glibc's would set the ids of every thread of the worker whose memory
     * this child shares until its exec (see prepare) */
    if (syscall(SYS_setgroups, 0, NULL) != 0 || syscall(SYS_setgid, GID) != 0 || syscall(SYS_setuid, UID) != 0)
        child_fail(fail_w, "switching to uid 1000");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        child_fail(fail_w, "setting no_new_privs");
}

/* Puts each of from[i] on the number to[i], open across exec (the sources stay close-on-exec):
 * through copies above them all, so no source is overwritten before it is placed. */
static int place_fds(const int *from, const int *to, int n)
{
    int high[8];
    for (int i = 0; i < n; i++)
        if ((high[i] = fcntl(from[i], F_DUPFD_CLOEXEC, 16)) < 0)
            return -1;
    for (int i = 0; i < n; i++)
        if (dup2(high[i], to[i]) < 0)
            return -1;
    for (int i = 0; i < n; i++)
        close(high[i]);
    return 0;
}

/* PID 1 of a new container: mounts, drops, and execs /bin/bash ahead of its command, with the
 * bootstrap preloaded: bash, loaded, waits in it for the request on fd 3, says ready on fd 4
 * and failures on fd 5 (see bootstrap.c). Never returns. */
static void child_main(int cmd_r, int out_w, int err_w, int fail_w, int ready_w)
{
    /* an ignored signal stays ignored across exec: the command gets SIGPIPE's default back */
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    /* A sibling that died with the agent must not live on. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        child_fail(fail_w, "setting the parent death signal");
    child_mounts(fail_w);
    if (access(AGENT_BOOTSTRAP_PATH, R_OK) != 0)
        child_fail(fail_w, AGENT_BOOTSTRAP_PATH);
    /* Every other descriptor of the agent's is close-on-exec (fds 3 to 5 of the agent's too) */
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int from[] = {nul, out_w, err_w, cmd_r, ready_w, fail_w}, to[] = {0, 1, 2, 3, 4, 5};
    if (nul < 0 || place_fds(from, to, 6) != 0)
        child_fail(fail_w, "placing the container's descriptors");
    fail_w = 5; /* its old number may now be another's */
    child_drop(fail_w);
    if (chdir("/workspace") != 0)
        child_fail(fail_w, "entering /workspace");
    char *argv[] = {"/bin/bash", "-c", AGENT_BOOTSTRAP_WAITING, NULL};
    char *env[] = {"LD_PRELOAD=" AGENT_BOOTSTRAP_PATH, NULL};
    execve(argv[0], argv, env);
    child_fail(fail_w, "exec /bin/bash");
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* The container child's descriptors: its ends, and the worker's ends it closes. */
typedef struct {
    int cmd_r, out_w, err_w, fail_w, ready_w;
    int out_r, err_r, fail_r, ready_r;
} child_fds;

static int child_entry(void *arg)
{
    const child_fds *f = arg;
    close(f->out_r);
    close(f->err_r);
    close(f->fail_r);
    close(f->ready_r);
    /* out/err survive exec by their dup2 onto 1 and 2; the rest is close-on-exec */
    child_main(f->cmd_r, f->out_w, f->err_w, f->fail_w, f->ready_w);
    return 126;
}

/* The child runs on this stack in the worker's memory until its exec (the worker waits). */
static char child_stack[64 * 1024] __attribute__((aligned(16)));

/* Makes the next container child, which reads its request from cmd_r (taken: closed here);
 * 0, or -1 (errno). The child shares the worker's memory until it execs bash (CLONE_VM |
 * CLONE_VFORK, as posix_spawn does): under gVisor, copying an address space for a fork costs
 * milliseconds the exec would throw away. */
static int prepare(prepared *p, int cmd_r)
{
    int out[2], err[2], fail[2], ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) {
        close(cmd_r);
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(fail, O_CLOEXEC) != 0) {
        close(cmd_r);
        close(ready[0]);
        close(ready[1]);
        return -1;
    }
    child_fds f = {cmd_r, out[1], err[1], fail[1], ready[1], out[0], err[0], fail[0], ready[0]};
    pid_t pid = clone(child_entry, child_stack + sizeof child_stack,
                      CLONE_VM | CLONE_VFORK | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD, &f);
    int e = errno;
    close(ready[1]);
    close(cmd_r);
    close(out[1]);
    close(err[1]);
    close(fail[1]);
    if (pid < 0) {
        close(out[0]);
        close(err[0]);
        close(fail[0]);
        close(ready[0]);
        errno = e;
        return -1;
    }
    *p = (prepared){.pid = pid, .out_r = out[0], .err_r = err[0], .fail_r = fail[0],
                    .ready_r = ready[0]};
    return 0;
}

static void discard(prepared *p)
{
    if (p->pid > 0) {
        kill(p->pid, SIGKILL);
        while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR) {
        }
    }
    p->pid = -1;
    close_fd(&p->out_r);
    close_fd(&p->err_r);
    close_fd(&p->fail_r);
    close_fd(&p->ready_r);
}

/* ---- running one command ---------------------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char chunk[CHUNK];

/* Relays what one pipe has to airlockd as frames of type t; -1 at end of file. */
static int relay(int *fd, char t)
{
    ssize_t r = read(*fd, chunk, sizeof chunk);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    if (r <= 0) {
        close_fd(fd);
        return -1;
    }
    send_frame(t, chunk, (size_t)r);
    return 0;
}

/* Reads a frame header and payload from airlockd into request; its type, or 0 at end of file. */
static char read_frame(size_t *len)
{
    unsigned char h[FRAME_HEADER];
    if (frame_read_all(FD_IN, h, FRAME_HEADER) != 0)
        return 0;
    *len = frame_get_u32(h + 1);
    if (*len > REQUEST_MAX || frame_read_all(FD_IN, request, *len) != 0)
        return 0;
    return (char)h[0];
}

static int exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -1;
}

/* How a command ended: the frame that says so ('X' exit, or 'F' the container's set-up error). */
typedef struct {
    char type;
    char payload[256];
    size_t len;
} ending;

/* Relays the output of p, whose request the worker wrote to it, until it ends, the timeout or
 * a 'K' from the agent on *msg_r (airlockd's cancel); then says how it ended in *end. */
static void run(prepared *p, uint32_t timeout_ms, int sigfd, int *msg_r, ending *end)
{
    int64_t deadline = now_ms() + (timeout_ms ? timeout_ms : 15000);
    int killed = 0, status = 0, exited = 0;
    int64_t drain_until = 0;
    char *fail = end->payload;
    size_t fail_len = 0;
    while (p->out_r >= 0 || p->err_r >= 0 || !exited || p->fail_r >= 0) {
        struct pollfd pf[5] = {
            {.fd = p->out_r, .events = POLLIN}, {.fd = p->err_r, .events = POLLIN},
            {.fd = sigfd, .events = POLLIN},    {.fd = p->fail_r, .events = POLLIN},
            {.fd = killed || exited ? -1 : *msg_r, .events = POLLIN},
        };
        int64_t now = now_ms();
        int64_t until = exited ? drain_until : deadline;
        if (now >= until) {
            if (exited)
                break; /* something outside the namespace holds a pipe: give up on it */
            kill(p->pid, SIGKILL);
            killed = 1;
            deadline = now + 60000;
            continue;
        }
        if (poll(pf, 5, (int)(until - now)) < 0 && errno != EINTR)
            _exit(1);
        if (pf[0].revents)
            relay(&p->out_r, '1');
        if (pf[1].revents)
            relay(&p->err_r, '2');
        if (pf[3].revents) {
            ssize_t r = read(p->fail_r, fail + fail_len, sizeof end->payload - 1 - fail_len);
            if (r > 0)
                fail_len += (size_t)r;
            else if (r == 0 || errno != EINTR)
                close_fd(&p->fail_r);
        }
        if (pf[4].revents) {
            unsigned char k[2];
            if (frame_read_all(*msg_r, k, 2) != 0) {
                close_fd(msg_r); /* the agent is gone: so is this worker, at its death signal */
            } else if (k[0] == 'K') {
                kill(p->pid, SIGKILL);
                killed = 2;
            }
        }
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
    close_fd(&p->out_r);
    close_fd(&p->err_r);
    close_fd(&p->fail_r);
    if (fail_len > 0 && !killed) {
        end->type = 'F';
        end->len = fail_len;
        return;
    }
    end->type = 'X';
    frame_put_u32((unsigned char *)end->payload, (uint32_t)(killed ? -1 : exit_code(status)));
    end->payload[4] = (char)killed;
    end->len = 5;
}

/* ---- main ------------------------------------------------------------------------------- */

/* A request for `true` with no environment, as the warm-up (gVisor's first exec is the slow one). */
static size_t warm_up_request(void)
{
    frame_put_u32((unsigned char *)request, 15000);
    memcpy(request + 4, "true", 5);
    return 9;
}

/* ---- workers: each runs one command at a time, with a container made ahead of it -------- */

#define UNPREPARED "cannot prepare a container"

/* Messages from the agent to a worker, on its message pipe:
 *   'C' u8 slot, u32 length, the request (u32 timeout_ms, command NUL, env entries NUL each)
 *   'K' u8 slot: cancel the command running (one that ended already: nothing)
 * and from a worker to the agent, on its state pipe: 'r' its container is ready for a command
 * (or cannot be made: the command is answered 'F'); 'd' its command ended (its exit went out). */
typedef struct {
    pid_t pid;
    int msg_w;
    int state_r;
    int slot; /* the slot of the command it runs; -1 when it has none */
} worker;

/* Hands request[0..len) to a container on its request pipe, as u32 length and request. A
 * container that died in its set-up is told nothing: its fail pipe has the reason. */
static void give_request(int cmd_w, size_t len)
{
    unsigned char n[4];
    frame_put_u32(n, (uint32_t)len);
    if (frame_write_all(cmd_w, n, 4) == 0)
        (void)frame_write_all(cmd_w, request, len);
}

/* A worker's life: a container made ahead ('r'), a command ('C') run in it (its exit on the
 * command's slot, then 'd'), again and again until the agent closes the message pipe. Commands
 * after the first do not pay for a fork of the worker. */
static void worker_main(int msg_r, int state_w)
{
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        _exit(1);
    close(FD_IN);
    close(FD_READY);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    int sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    for (;;) {
        prepared p = {.pid = -1, .out_r = -1, .err_r = -1, .fail_r = -1, .ready_r = -1};
        int cmd[2] = {-1, -1};
        /* a container that cannot be made is said to its command's slot, once that comes */
        bool unprepared = sigfd < 0 || pipe2(cmd, O_CLOEXEC) != 0 || prepare(&p, cmd[0]) != 0;
        char b;
        if (!unprepared && read(p.ready_r, &b, 1) < 0) { /* (end of file: the fail pipe says why) */
        }
        close_fd(&p.ready_r);
        if (frame_write_all(state_w, "r", 1) != 0)
            _exit(0);
        unsigned char h[6];
        do { /* a 'K' for a command that ended already is nothing */
            if (frame_read_all(msg_r, h, 2) != 0) {
                discard(&p); /* the agent is gone or needs no more of this worker */
                _exit(0);
            }
        } while (h[0] != 'C');
        size_t len;
        if (frame_read_all(msg_r, h + 2, 4) != 0 || (len = frame_get_u32(h + 2)) > REQUEST_MAX ||
            frame_read_all(msg_r, request, len) != 0)
            _exit(1);
        if (h[1] == SLOT_NONE) {
            out_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
            if (out_fd < 0)
                _exit(1);
        } else {
            out_fd = FD_OUT + h[1];
        }
        if (!unprepared)
            give_request(cmd[1], len);
        close_fd(&cmd[1]);
        ending end = {.type = 'F', .len = sizeof UNPREPARED - 1};
        if (unprepared) {
            memcpy(end.payload, UNPREPARED, sizeof UNPREPARED - 1);
            discard(&p);
        } else {
            run(&p, len >= 4 ? frame_get_u32((unsigned char *)request) : 0, sigfd, &msg_r, &end);
        }
        /* free again before airlockd hears of the exit: the next command, sent when it does,
         * finds this worker free */
        if (msg_r < 0 || frame_write_all(state_w, "d", 1) != 0)
            _exit(0);
        send_frame(end.type, end.payload, end.len);
        if (out_fd != FD_OUT + h[1])
            close(out_fd);
        out_fd = FD_OUT;
    }
}

/* Forks a worker; 0, or -1. */
static int start_worker(worker *w)
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
        close(msg[1]);
        close(state[0]);
        worker_main(msg[0], state[1]);
    }
    close(msg[0]);
    close(state[1]);
    if (pid < 0) {
        close(msg[1]);
        close(state[0]);
        return -1;
    }
    *w = (worker){.pid = pid, .msg_w = msg[1], .state_r = state[0], .slot = -1};
    return 0;
}

/* Ends w: a worker without its message pipe discards its container and exits. */
static void let_worker_go(worker *w)
{
    close_fd(&w->msg_w);
    close_fd(&w->state_r);
    w->pid = -1;
}

/* Hands the request in request[0..len) for slot to w. */
static void hand_over(worker *w, unsigned slot, size_t len)
{
    unsigned char h[6] = {'C', (unsigned char)slot};
    frame_put_u32(h + 2, (uint32_t)len);
    if (frame_write_all(w->msg_w, h, 6) != 0 || frame_write_all(w->msg_w, request, len) != 0) {
        /* it died: its slot stays silent, and airlockd kills the sandbox after the timeout */
    }
    w->slot = slot == SLOT_NONE ? -1 : (int)slot;
}

/* After 'R', fd 4 says to airlockd, a byte each time, that the container for the next command
 * is ready (or cannot be made): airlockd freezes an idle sandbox only then (or after a second),
 * never with that container half made, and never holds a command's result for it. */
static int idle_fd = -1;

static void say_idle(void)
{
    if (idle_fd >= 0)
        (void)write(idle_fd, "g", 1); /* non-blocking: a full pipe has said it already */
}

/* The workers: one per command running, and one free (its container made, or being made) for
 * the next command. */
#define WORKERS (AGENT_SLOTS + 1)
static worker workers[WORKERS];

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
            return start_worker(&workers[i]) == 0 ? &workers[i] : NULL;
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
    if (b == 'd') {
        w->slot = -1;
        if (free_worker(w))
            let_worker_go(w);
    } else if (b == 'r' && w->slot < 0) {
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

/* Answers slot's command 'F': no worker could take it. */
static void cannot_run(unsigned slot)
{
    out_fd = FD_OUT + (int)slot;
    send_frame('F', UNPREPARED, sizeof UNPREPARED - 1);
    out_fd = FD_OUT;
}

/* A 'C' from airlockd (in request[0..n)): its slot's command goes to the free worker (its
 * container made ahead, or being made), else to a new one. */
static void command(size_t n)
{
    if (n < 1 || request[0] >= AGENT_SLOTS)
        return; /* airlockd never sends one: nowhere to answer */
    unsigned slot = (unsigned char)request[0];
    memmove(request, request + 1, n - 1);
    worker *w = free_worker(NULL);
    if (!w && !(w = new_worker())) {
        cannot_run(slot);
        return;
    }
    hand_over(w, slot, n - 1);
}

/* A 'K' from airlockd: to the worker running that slot's command. */
static void cancel(size_t n)
{
    if (n < 1 || request[0] >= AGENT_SLOTS)
        return;
    unsigned char k[2] = {'K', (unsigned char)request[0]};
    for (int i = 0; i < WORKERS; i++)
        if (workers[i].pid > 0 && workers[i].slot == (int)k[1])
            (void)frame_write_all(workers[i].msg_w, k, 2);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 < argc && strcmp(argv[i], "-p") == 0) {
            char *end = NULL;
            errno = 0;
            nproc_limit = strtol(argv[i + 1], &end, 10);
            if (errno || !end || *end || end == argv[i + 1] || nproc_limit < 2 || nproc_limit > NPROC_MAX)
                usage_exit();
            continue;
        }
        if (i + 1 >= argc || nbinds == BINDS_MAX || argv[i + 1][0] != '/' ||
            argv[i][0] != '-' || !strchr("rwd", argv[i][1]) || argv[i][1] == '\0' || argv[i][2] != '\0')
            usage_exit();
        binds[nbinds++] = (bind_mount){argv[i + 1], argv[i][1]};
    }
    signal(SIGPIPE, SIG_IGN);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &chld, NULL) != 0)
        return 1;
    int sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd < 0 || fcntl(FD_IN, F_SETFD, FD_CLOEXEC) != 0 || fcntl(FD_READY, F_SETFD, FD_CLOEXEC) != 0)
        return 1;
    for (int i = 0; i < AGENT_SLOTS; i++)
        if (fcntl(FD_OUT + i, F_SETFD, FD_CLOEXEC) != 0)
            return 1;
    for (int i = 0; i < WORKERS; i++)
        workers[i] = (worker){.pid = -1, .msg_w = -1, .state_r = -1, .slot = -1};
    /* the warm-up (its output and exit go nowhere: airlockd expects 'R' first), then the
     * container for the first command */
    worker *w = new_worker();
    if (!w)
        return 1;
    hand_over(w, SLOT_NONE, warm_up_request());
    char b;
    while (w->state_r >= 0 && frame_read_all(w->state_r, &b, 1) == 0 && b != 'd') {
    }
    while (w->state_r >= 0 && frame_read_all(w->state_r, &b, 1) == 0 && b != 'r') {
    }
    if (w->pid <= 0 || w->state_r < 0)
        return 1;
    w->slot = -1;
    /* kept (a worker closes its copy): the idle channel from now on */
    if (frame_write_all(FD_READY, "R", 1) != 0 || fcntl(FD_READY, F_SETFL, O_NONBLOCK) != 0)
        return 1;
    idle_fd = FD_READY;
    say_idle();
    for (;;) {
        struct pollfd pf[2 + WORKERS] = {{.fd = FD_IN, .events = POLLIN}, {.fd = sigfd, .events = POLLIN}};
        for (int i = 0; i < WORKERS; i++)
            pf[2 + i] = (struct pollfd){.fd = workers[i].state_r, .events = POLLIN};
        if (poll(pf, 2 + WORKERS, -1) < 0 && errno != EINTR)
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
        size_t n;
        char t = read_frame(&n);
        if (t == 0)
            break; /* airlockd is gone: every worker and container dies with the agent */
        if (t == 'C')
            command(n);
        else if (t == 'K')
            cancel(n);
    }
    return 0;
}
