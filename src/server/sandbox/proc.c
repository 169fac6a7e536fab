/* Spawns the sandbox launcher, captures its two output streams and enforces the deadline. */
#include "sandbox/proc.h"

#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ioprio_set(2) has no libc wrapper: its "who" for the calling process, and the idle class */
#define IOPRIO_WHO_PROCESS 1
#define IOPRIO_CLASS_IDLE (3 << 13)

/* After the launcher exits, its descendants may hold the pipes a moment longer. */
#define DRAIN_GRACE_MS 2000
/* After a cancel, how long the launcher gets to exit once its sandbox is killed. */
#define CANCEL_GRACE_MS 1500
/* Output pipes this large are drained in fewer, larger reads. */
#define PIPE_SIZE (1024 * 1024)
/* Reads of one stream per wake-up (up to 16 MiB) before the loop looks around again. */
#define DRAIN_READS 16

/* Error report from the child before exec: which step failed and its errno. */
typedef struct {
    int step;
    int err;
} child_error;

enum { STEP_SETUP = 1, STEP_CGROUP, STEP_RLIMIT, STEP_PREEXEC, STEP_PRIVS, STEP_EXEC };

static const char *step_name(int step)
{
    switch (step) {
    case STEP_CGROUP: return "joining the sandbox cgroup";
    case STEP_RLIMIT: return "setting resource limits";
    case STEP_PREEXEC: return "preparing mounts";
    case STEP_PRIVS: return "dropping privileges";
    case STEP_EXEC: return "exec";
    default: return "preparing the child process";
    }
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Takes what is readable on fd, a bounded number of reads at a time so that a writer as fast
 * as we read cannot keep the loop from its deadline, its cancel_fd and the other stream;
 * each read goes to the tap (when any), and a gated drain stops while the tap is full;
 * returns 1 on EOF, 0 to continue, -1 on error. */
static int drain(int fd, capture *c, const sandbox_tap *tap, int stream, bool gated)
{
    for (int reads = 0; reads < DRAIN_READS; reads++) {
        if (gated && tap->full(tap->ctx))
            return 0; /* the tap's reader is behind: leave the rest in the pipe */
        ssize_t r = capture_read(c, fd);
        if (r > 0) {
            if (tap)
                tap->output(tap->ctx, stream, c->last, c->last_len);
            continue;
        }
        if (r == 0)
            return 1;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return -1;
    }
    return 0;
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* Child side between fork and exec: only async-signal-safe calls. Never returns. */
static void child_exec(const sbx_proc_opts *o, int devnull, int out_w, int err_w, int report)
{
    child_error ce = {STEP_SETUP, 0};
    sigset_t none;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    /* Ignored signals survive exec; the server ignores SIGPIPE. */
    for (int sig = 1; sig < NSIG; sig++)
        (void)sigaction(sig, &dfl, NULL);
    sigemptyset(&none);
    umask(022); /* the server's own 077 is not the sandboxed commands' */
    /* Own process group (a kill handle without a cgroup), but not setsid(): a new session
     * is a new scheduler autogroup, which measurably slows runsc's start (0.3 -> 0.45 s). */
    if (sigprocmask(SIG_SETMASK, &none, NULL) != 0 || setpgid(0, 0) != 0)
        goto fail;
    /* Park the four descriptors we keep above 0-3 so that placing one cannot clobber
     * another (e.g. a pipe that happens to be fd 1). */
    enum { PARK = 4 + SBX_PASS_FDS_MAX };
    int p_null, p_out, p_err, p_rep, p_pass[SBX_PASS_FDS_MAX];
    if ((p_null = fcntl(o->stdin_fd > 0 ? o->stdin_fd : devnull, F_DUPFD_CLOEXEC, PARK)) < 0 ||
        (p_out = fcntl(out_w, F_DUPFD_CLOEXEC, PARK)) < 0 ||
        (p_err = fcntl(err_w, F_DUPFD_CLOEXEC, PARK)) < 0 ||
        (p_rep = fcntl(report, F_DUPFD_CLOEXEC, PARK)) < 0)
        goto fail;
    report = p_rep;
    for (int i = 0; i < o->npass_fds; i++)
        if ((p_pass[i] = fcntl(o->pass_fds[i], F_DUPFD_CLOEXEC, PARK)) < 0)
            goto fail;
    if (dup2(p_null, 0) < 0 || dup2(p_out, 1) < 0 || dup2(p_err, 2) < 0 || dup2(p_rep, 3) < 0 ||
        fcntl(3, F_SETFD, FD_CLOEXEC) != 0)
        goto fail;
    report = 3;
    for (int i = 0; i < o->npass_fds; i++) /* dup2 clears FD_CLOEXEC: these stay open */
        if (dup2(p_pass[i], 4 + i) < 0)
            goto fail;
    /* Descriptors other threads opened without O_CLOEXEC must not leak into the sandbox. */
    if (close_range((unsigned)(4 + o->npass_fds), ~0U, 0) != 0)
        goto fail;
    if (o->lowest_priority) { /* best effort: a device scheduler without classes ignores it */
        (void)syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, IOPRIO_CLASS_IDLE);
        (void)setpriority(PRIO_PROCESS, 0, 19);
    }
    ce.step = STEP_CGROUP;
    if (o->cg && sbx_cg_join_self(o->cg) != 0)
        goto fail;
    ce.step = STEP_RLIMIT;
    for (size_t i = 0; i < o->nrlimits; i++) {
        struct rlimit cur, rl = {o->rlimits[i].value, o->rlimits[i].value};
        /* Without CAP_SYS_RESOURCE a hard limit can only go down: never ask for more. */
        if (getrlimit(o->rlimits[i].resource, &cur) != 0)
            goto fail;
        if (cur.rlim_max != RLIM_INFINITY && rl.rlim_max > cur.rlim_max)
            rl.rlim_cur = rl.rlim_max = cur.rlim_max;
        if (setrlimit(o->rlimits[i].resource, &rl) != 0)
            goto fail;
    }
    ce.step = STEP_PREEXEC;
    if (o->pre_exec) {
        int e = o->pre_exec(o->pre_exec_ctx);
        if (e != 0) {
            errno = e;
            goto fail;
        }
    }
    ce.step = STEP_PRIVS;
    if (o->drop_privs && (setgroups(0, NULL) != 0 || setgid((gid_t)o->gid) != 0 ||
                          setuid((uid_t)o->uid) != 0))
        goto fail;
    /* The launcher dies with the server thread that waits for it (and gVisor's attached
     * sandbox dies with the launcher). Set after setuid, which clears it. */
    ce.step = STEP_SETUP;
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        goto fail;
    ce.step = STEP_EXEC;
    execve(o->argv[0], (char *const *)o->argv, (char *const *)o->envp);
fail:
    ce.err = errno;
    (void)!write(report, &ce, sizeof ce);
    _exit(127);
}

/* Kills the launcher's whole tree: the cgroup holds every descendant, even daemonized ones;
 * without one the new session's process group is the best available handle. */
static void kill_tree(const sbx_proc_opts *o, pid_t pid)
{
    if (o->cg)
        (void)sbx_cg_kill_all(o->cg);
    if (pid > 0) { /* never kill(0) or kill(-0): that would be the server's own group */
        (void)kill(-pid, SIGKILL);
        (void)kill(pid, SIGKILL);
    }
}

/* Cancel: kills the sandbox at once but leaves the launcher (e.g. `runsc run`) to notice and
 * clear its own state, which takes milliseconds; kill_tree follows if it does not. */
static void stop_sandbox(const sbx_proc_opts *o, pid_t pid)
{
    if (o->cg)
        (void)sbx_cg_kill_all_except(o->cg, pid);
    else if (pid > 0)
        (void)kill(-pid, SIGKILL);
}

static int wait_child(pid_t pid, int *status)
{
    for (;;) {
        if (waitpid(pid, status, 0) == pid)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

int sbx_proc_start(const sbx_proc_opts *o, sbx_proc_child *c, char *errbuf, size_t errlen)
{
    c->pid = -1;
    c->out = c->err = -1;
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, rep[2] = {-1, -1};
    int devnull = -1, rc = -1;
    pid_t pid = -1;

    if (o->npass_fds < 0 || o->npass_fds > SBX_PASS_FDS_MAX) {
        snprintf(errbuf, errlen, "too many descriptors to pass: %d", o->npass_fds);
        return -1;
    }
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0 || (o->stdout_fd <= 0 && pipe2(outp, O_CLOEXEC) != 0) ||
        (o->stderr_fd <= 0 && pipe2(errp, O_CLOEXEC) != 0) || pipe2(rep, O_CLOEXEC) != 0) {
        snprintf(errbuf, errlen, "cannot create pipes: %s", strerror(errno));
        goto out;
    }
    /* best effort: a smaller pipe only means more, smaller reads */
    if (outp[0] >= 0)
        (void)fcntl(outp[0], F_SETPIPE_SZ, PIPE_SIZE);
    if (errp[0] >= 0)
        (void)fcntl(errp[0], F_SETPIPE_SZ, PIPE_SIZE);
    pid = fork();
    if (pid < 0) {
        snprintf(errbuf, errlen, "fork failed: %s", strerror(errno));
        goto out;
    }
    if (pid == 0)
        child_exec(o, devnull, o->stdout_fd > 0 ? o->stdout_fd : outp[1], o->stderr_fd > 0 ? o->stderr_fd : errp[1],
                   rep[1]);
    close_fd(&outp[1]);
    close_fd(&errp[1]);
    close_fd(&rep[1]);
    close_fd(&devnull);

    /* The report pipe closes on exec (success) or carries the failing step. */
    child_error ce;
    ssize_t got;
    do
        got = read(rep[0], &ce, sizeof ce);
    while (got < 0 && errno == EINTR);
    if (got == (ssize_t)sizeof ce) {
        int st;
        (void)wait_child(pid, &st);
        pid = -1;
        snprintf(errbuf, errlen, "cannot start %s: %s failed: %s", o->argv[0],
                 step_name(ce.step), strerror(ce.err));
        goto out;
    }
    c->pid = pid;
    c->out = outp[0];
    c->err = errp[0];
    outp[0] = errp[0] = -1;
    rc = 0;
out:
    close_fd(&outp[0]);
    close_fd(&outp[1]);
    close_fd(&errp[0]);
    close_fd(&errp[1]);
    close_fd(&rep[0]);
    close_fd(&rep[1]);
    close_fd(&devnull);
    return rc;
}

/* One collect: the launcher, its pipes, and where the run stands. Each event of the poll
 * loop (output, the launcher's exit, the client's hang-up, the clock) has its handler. */
typedef struct {
    const sbx_proc_opts *o;
    sbx_proc_result *r;
    const sandbox_tap *tap;
    pid_t pid;            /* -1 once reaped */
    int out, err, pidfd;  /* -1: closed, or (pidfd) none: then poll in short slices */
    int64_t deadline;     /* the wall clock of the run */
    int64_t give_up;      /* once stopping: when to kill everything and stop waiting */
    int64_t exited_at;    /* when the launcher exited; -1 while it runs */
    bool stopping;        /* past the deadline or cancelled: the tree is being stopped */
    bool out_open, err_open;
    bool watch_cancel;
    bool failed;          /* errbuf says why */
    char *errbuf;
    size_t errlen;
    /* this round's poll set: the indexes of each descriptor in pf, -1 when absent */
    struct pollfd pf[5];
    nfds_t n;
    int i_out, i_err, i_pid, i_cancel;
    bool gated;           /* a tap's room gates the reads */
} collect_state;

static void collect_fail(collect_state *st, const char *what)
{
    snprintf(st->errbuf, st->errlen, "%s failed: %s", what, strerror(errno));
    st->failed = true;
}

/* The clock: false when the loop must end (the deadline without a polite stop, the grace
 * after stopping, or the drain grace after the launcher's exit). At the deadline the polite
 * stop starts and its grace period counts. */
static bool clock_allows(collect_state *st)
{
    int64_t now = now_ms();
    if (!st->stopping && now >= st->deadline) {
        st->r->timed_out = true;
        if (!st->o->on_deadline)
            return false;
        st->stopping = true;
        st->o->on_deadline(st->o->ctx);
        st->give_up = now_ms() + (st->o->grace_ms > 0 ? st->o->grace_ms : 0);
        now = now_ms();
    }
    if (now >= st->give_up)
        return false;
    /* something outside the sandbox kept the pipes: stop reading */
    return st->exited_at < 0 || now - st->exited_at < DRAIN_GRACE_MS;
}

static int add_poll(collect_state *st, int fd, short events)
{
    st->pf[st->n] = (struct pollfd){.fd = fd, .events = events};
    return (int)st->n++;
}

/* What this round waits on: the pipes (unless a tap without room holds them back: the
 * command blocks on its writes until it has some; once the launcher is gone, what its pipes
 * still hold is bounded: read it all), the launcher's exit, the client's hang-up. */
static void build_poll_set(collect_state *st)
{
    const sandbox_tap *tap = st->tap;
    st->n = 0;
    st->i_out = st->i_err = st->i_pid = st->i_cancel = -1;
    st->gated = tap && st->exited_at < 0;
    bool tap_full = st->gated && tap->full(tap->ctx);
    if (tap_full && tap->room_fd >= 0)
        add_poll(st, tap->room_fd, POLLIN);
    if (st->out_open && !tap_full)
        st->i_out = add_poll(st, st->out, POLLIN);
    if (st->err_open && !tap_full)
        st->i_err = add_poll(st, st->err, POLLIN);
    if (st->exited_at < 0 && st->pidfd >= 0)
        st->i_pid = add_poll(st, st->pidfd, POLLIN);
    /* only the hang-up: data a client sends meanwhile must not wake us */
    if (st->watch_cancel && !st->stopping)
        st->i_cancel = add_poll(st, st->o->cancel_fd, POLLRDHUP);
}

/* How long this round may sleep: to the deadline (or the give-up time), within the drain
 * grace, in short slices without a pidfd, and at most a tap's tick. */
static int poll_wait_ms(const collect_state *st)
{
    int64_t now = now_ms();
    int64_t wait = (st->stopping ? st->give_up : st->deadline) - now;
    if (st->exited_at >= 0 && wait > DRAIN_GRACE_MS - (now - st->exited_at))
        wait = DRAIN_GRACE_MS - (now - st->exited_at);
    if (st->exited_at < 0 && st->pidfd < 0 && wait > 50)
        wait = 50;
    if (st->tap && wait > st->tap->tick_ms)
        wait = st->tap->tick_ms;
    /* the clock may have passed a limit since clock_allows: poll once more without waiting */
    return (int)(wait < 0 ? 0 : wait > 60000 ? 60000 : wait);
}

static bool fired(const collect_state *st, int i)
{
    return i >= 0 && st->pf[i].revents;
}

/* The client hung up: the sandbox is killed now, the launcher gets a moment to clear up. */
static void on_cancel(collect_state *st)
{
    if (st->pf[st->i_cancel].revents & POLLNVAL) {
        st->watch_cancel = false; /* not a descriptor (any more): nothing to watch */
        return;
    }
    st->r->cancelled = true;
    st->stopping = true;
    stop_sandbox(st->o, st->pid);
    st->give_up = now_ms() + CANCEL_GRACE_MS;
}

/* Output on stream 1 (stdout) or 2 (stderr): read it; its end closes that side. */
static void on_output(collect_state *st, int stream)
{
    int fd = stream == 1 ? st->out : st->err;
    int d = drain(fd, stream == 1 ? &st->r->out : &st->r->err, st->tap, stream, st->gated);
    if (d < 0)
        collect_fail(st, stream == 1 ? "reading sandbox stdout" : "reading sandbox stderr");
    else if (stream == 1)
        st->out_open = d == 0;
    else
        st->err_open = d == 0;
}

/* The launcher may have exited: reap it (its pipes may still hold output). */
static void on_launcher_exit(collect_state *st)
{
    int status = 0;
    if (waitpid(st->pid, &status, WNOHANG) == st->pid) {
        st->exited_at = now_ms();
        st->r->status = status;
        st->pid = -1;
    }
}

/* One round: wait for the next event and handle each that came. */
static void collect_round(collect_state *st)
{
    build_poll_set(st);
    int pr = poll(st->pf, st->n, poll_wait_ms(st));
    if (pr < 0 && errno != EINTR) {
        collect_fail(st, "poll");
        return;
    }
    if (pr > 0 && fired(st, st->i_cancel))
        on_cancel(st);
    if (pr > 0 && fired(st, st->i_out))
        on_output(st, 1);
    if (pr > 0 && !st->failed && fired(st, st->i_err))
        on_output(st, 2);
    if (!st->failed && st->exited_at < 0 && (st->pidfd < 0 || (pr > 0 && fired(st, st->i_pid))))
        on_launcher_exit(st);
}

/* The end: whatever is left of the tree is killed (after a timeout, cancel or failure, or a
 * launcher still running), the launcher reaped, the descriptors closed. */
static void collect_end(collect_state *st)
{
    if (st->pid > 0 || st->r->timed_out || st->r->cancelled || st->failed)
        kill_tree(st->o, st->pid);
    int status = 0;
    if (st->pid > 0 && wait_child(st->pid, &status) == 0)
        st->r->status = status;
    st->pid = -1;
    close_fd(&st->out);
    close_fd(&st->err);
    close_fd(&st->pidfd);
}

int sbx_proc_collect(const sbx_proc_opts *o, sbx_proc_child *c, sbx_proc_result *r, char *errbuf,
                     size_t errlen)
{
    memset(r, 0, sizeof *r);
    size_t limit = o->output_limit ? o->output_limit : SANDBOX_OUTPUT_LIMIT;
    capture_init(&r->out, limit);
    capture_init(&r->err, limit);
    collect_state st = {.o = o, .r = r, .tap = o->tap, .pid = c->pid, .out = c->out, .err = c->err,
                        .deadline = o->timeout_ms > 0 ? now_ms() + o->timeout_ms : INT64_MAX,
                        .give_up = INT64_MAX, .exited_at = -1, .out_open = c->out >= 0, .err_open = c->err >= 0,
                        .watch_cancel = o->cancel_fd > 0, .errbuf = errbuf, .errlen = errlen};
    c->out = c->err = -1;
    c->pid = -1;
    if ((st.out >= 0 && fcntl(st.out, F_SETFL, O_NONBLOCK) != 0) || (st.err >= 0 && fcntl(st.err, F_SETFL, O_NONBLOCK) != 0))
        collect_fail(&st, "fcntl");
    /* A pidfd wakes poll() when the launcher exits; without one, poll in short slices. */
    st.pidfd = (int)syscall(SYS_pidfd_open, st.pid, 0);
    while (!st.failed && (st.out_open || st.err_open || st.exited_at < 0)) {
        if (st.tap)
            st.tap->output(st.tap->ctx, 0, NULL, 0); /* a tick: the tap may say it is still alive */
        if (!clock_allows(&st))
            break;
        collect_round(&st);
    }
    collect_end(&st);
    if (st.failed)
        sbx_proc_result_free(r);
    return st.failed ? -1 : 0;
}

int sbx_proc_run(const sbx_proc_opts *o, sbx_proc_result *r, char *errbuf, size_t errlen)
{
    sbx_proc_child c;
    if (sbx_proc_start(o, &c, errbuf, errlen) != 0) {
        memset(r, 0, sizeof *r);
        return -1;
    }
    return sbx_proc_collect(o, &c, r, errbuf, errlen);
}

int sbx_proc_exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return -1;
}

void sbx_proc_result_free(sbx_proc_result *r)
{
    capture_free(&r->out);
    capture_free(&r->err);
}
