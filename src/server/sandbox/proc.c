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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
    if ((p_null = fcntl(devnull, F_DUPFD_CLOEXEC, PARK)) < 0 ||
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
    if (devnull < 0 || pipe2(outp, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0 ||
        pipe2(rep, O_CLOEXEC) != 0) {
        snprintf(errbuf, errlen, "cannot create pipes: %s", strerror(errno));
        goto out;
    }
    /* best effort: a smaller pipe only means more, smaller reads */
    (void)fcntl(outp[0], F_SETPIPE_SZ, PIPE_SIZE);
    (void)fcntl(errp[0], F_SETPIPE_SZ, PIPE_SIZE);
    pid = fork();
    if (pid < 0) {
        snprintf(errbuf, errlen, "fork failed: %s", strerror(errno));
        goto out;
    }
    if (pid == 0)
        child_exec(o, devnull, outp[1], errp[1], rep[1]);
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

int sbx_proc_collect(const sbx_proc_opts *o, sbx_proc_child *c, sbx_proc_result *r, char *errbuf,
                     size_t errlen)
{
    memset(r, 0, sizeof *r);
    size_t limit = o->output_limit ? o->output_limit : SANDBOX_OUTPUT_LIMIT;
    capture_init(&r->out, limit);
    capture_init(&r->err, limit);
    int outp[2] = {c->out, -1}, errp[2] = {c->err, -1};
    int pidfd = -1, rc = -1;
    pid_t pid = c->pid;
    c->out = c->err = -1;
    c->pid = -1;

    bool failed = false;
    if (fcntl(outp[0], F_SETFL, O_NONBLOCK) != 0 || fcntl(errp[0], F_SETFL, O_NONBLOCK) != 0) {
        snprintf(errbuf, errlen, "fcntl failed: %s", strerror(errno));
        failed = true;
    }
    /* A pidfd wakes poll() when the launcher exits; without one, poll in short slices. */
    pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

    int64_t deadline = o->timeout_ms > 0 ? now_ms() + o->timeout_ms : INT64_MAX;
    int64_t give_up = INT64_MAX; /* once stopping: when to kill everything and stop waiting */
    int64_t exited_at = -1;
    int status = 0;
    bool stopping = false;
    bool out_open = true, err_open = true;
    bool watch_cancel = o->cancel_fd > 0;
    const sandbox_tap *tap = o->tap;
    while (!failed && (out_open || err_open || exited_at < 0)) {
        if (tap)
            tap->output(tap->ctx, 0, NULL, 0); /* a tick: the tap may say it is still alive */
        int64_t now = now_ms();
        if (!stopping && now >= deadline) {
            r->timed_out = true;
            if (!o->on_deadline)
                break;
            stopping = true;
            o->on_deadline(o->ctx);
            give_up = now_ms() + (o->grace_ms > 0 ? o->grace_ms : 0);
            continue;
        }
        if (now >= give_up)
            break;
        if (exited_at >= 0 && now - exited_at >= DRAIN_GRACE_MS)
            break; /* something outside the sandbox kept the pipes: stop reading */
        struct pollfd pf[5];
        nfds_t n = 0;
        int i_out = -1, i_err = -1, i_pid = -1, i_cancel = -1;
        /* a tap without room: the pipes wait (the command blocks on write) until it has some */
        /* (once the launcher is gone, what its pipes still hold is bounded: read it all) */
        bool gated = tap && exited_at < 0;
        bool tap_full = gated && tap->full(tap->ctx);
        if (tap_full && tap->room_fd >= 0)
            pf[n++] = (struct pollfd){.fd = tap->room_fd, .events = POLLIN};
        if (out_open && !tap_full) {
            pf[n] = (struct pollfd){.fd = outp[0], .events = POLLIN};
            i_out = (int)n++;
        }
        if (err_open && !tap_full) {
            pf[n] = (struct pollfd){.fd = errp[0], .events = POLLIN};
            i_err = (int)n++;
        }
        if (exited_at < 0 && pidfd >= 0) {
            pf[n] = (struct pollfd){.fd = pidfd, .events = POLLIN};
            i_pid = (int)n++;
        }
        if (watch_cancel && !stopping) {
            /* only the hang-up: data a client sends meanwhile must not wake us */
            pf[n] = (struct pollfd){.fd = o->cancel_fd, .events = POLLRDHUP};
            i_cancel = (int)n++;
        }
        int64_t until = stopping ? give_up : deadline;
        int64_t wait = until - now;
        if (exited_at >= 0 && wait > DRAIN_GRACE_MS - (now - exited_at))
            wait = DRAIN_GRACE_MS - (now - exited_at);
        if (exited_at < 0 && pidfd < 0 && wait > 50)
            wait = 50;
        if (tap && wait > tap->tick_ms)
            wait = tap->tick_ms;
        int pr = poll(pf, n, (int)(wait > 60000 ? 60000 : wait));
        if (pr < 0 && errno != EINTR) {
            snprintf(errbuf, errlen, "poll failed: %s", strerror(errno));
            failed = true;
            break;
        }
        if (pr > 0 && i_cancel >= 0 && pf[i_cancel].revents) {
            if (pf[i_cancel].revents & POLLNVAL) {
                watch_cancel = false; /* not a descriptor (any more): nothing to watch */
            } else {
                r->cancelled = true;
                stopping = true;
                stop_sandbox(o, pid);
                give_up = now_ms() + CANCEL_GRACE_MS;
            }
        }
        if (pr > 0) {
            if (i_out >= 0 && pf[i_out].revents) {
                int d = drain(outp[0], &r->out, tap, 1, gated);
                if (d < 0) {
                    snprintf(errbuf, errlen, "reading sandbox stdout failed: %s", strerror(errno));
                    failed = true;
                    break;
                }
                out_open = d == 0;
            }
            if (i_err >= 0 && pf[i_err].revents) {
                int d = drain(errp[0], &r->err, tap, 2, gated);
                if (d < 0) {
                    snprintf(errbuf, errlen, "reading sandbox stderr failed: %s", strerror(errno));
                    failed = true;
                    break;
                }
                err_open = d == 0;
            }
        }
        if (exited_at < 0 && (pidfd < 0 || (i_pid >= 0 && pr > 0 && pf[i_pid].revents))) {
            pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid) {
                exited_at = now_ms();
                r->status = status;
                pid = -1;
            }
        }
    }
    if (pid > 0 || r->timed_out || r->cancelled || failed)
        kill_tree(o, pid);
    if (pid > 0) {
        int st = 0;
        if (wait_child(pid, &st) == 0)
            r->status = st;
        pid = -1;
    }
    rc = failed ? -1 : 0;
    close_fd(&outp[0]);
    close_fd(&errp[0]);
    close_fd(&pidfd);
    if (rc != 0)
        sbx_proc_result_free(r);
    return rc;
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
