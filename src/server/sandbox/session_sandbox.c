/* Commands through a session sandbox's agent (see session_sandbox.h; the frames are
 * src/agent/protocol.h's): the request frame on the agent's stdin, then its frames back (output,
 * exit) on the agent's stdout, every slot's on the one pipe (agent_stdio.h: read by the thread
 * that waits for them, each slot's output within its window), under a deadline, the output
 * budget, the tap and the client's cancel; several commands at once, one per slot; the sandbox thawed
 * while any runs and frozen after the last once the agent's next container is ready
 * (sandbox_session_settle, from the warm thread). The agent enforces the timeout itself (it
 * kills the command's PID namespace); a sandbox whose agent does not answer by the timeout
 * plus a grace is killed. */
#include "sandbox/session_sandbox.h"

#include "log/log.h"
#include "sandbox/internal.h"
#include "sandbox/agent_stdio.h"
#include "../../agent/protocol.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* After the command's own timeout, how long the agent gets to say it killed it. */
#define AGENT_GRACE_MS 5000
/* How long a sandbox stays thawed after its last command, for the session's next one: a
 * frozen gVisor sandbox takes ~3 ms longer to answer its next command, a thawed idle one costs
 * ~40 ms of CPU a second (its sentry), so a pause between an agent's tool calls keeps it
 * thawed and an idle session is frozen after a second. */
#define THAWED_MS 1000
/* How long it waits for the agent's next container beyond that before it is frozen anyway. */
#define SETTLE_MS 2000
#define TICK_MS 1000

const char **sbx_agent_argv(const sandbox *s, const char *argv[SBX_AGENT_ARGV_MAX],
                            char dirs[SBX_ROOTFS_MAX_BINDS][64], char nproc[16])
{
    static const char *const fixed[] = {"-r", "/usr", "-w", "/workspace", "-d", "/dev", "-r", "/sys"};
    static const sbx_rootfs no_binds; /* a template's root is whole: its own /usr only */
    const sbx_rootfs *r = s->root_dir ? &no_binds : &s->b->rootfs;
    size_t n = 0;
    argv[n++] = SBX_AGENT_PATH;
    snprintf(nproc, 16, "%u", s->nproc); /* each command's process limit */
    argv[n++] = "-p";
    argv[n++] = nproc;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        argv[n++] = fixed[i];
    for (size_t i = 0; i < r->nbinds && i < SBX_ROOTFS_MAX_BINDS; i++) {
        snprintf(dirs[i], sizeof dirs[i], "/%s", r->binds[i]);
        argv[n++] = "-r";
        argv[n++] = dirs[i];
    }
    argv[n] = NULL;
    return argv;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The FRAME_RUN frame for slot: timeout, command, the sandbox's environment. NULL when out of
 * memory or too long for the agent. */
static unsigned char *request_frame(const sandbox *s, unsigned slot, const char *command, int timeout_seconds,
                                    size_t *len)
{
    const char *env[SBX_ENV_ALL_MAX];
    sbx_env_with_network(s, env);
    size_t payload = strlen(command) < SBX_WAITER_COMMAND_MAX ? frame_run_len(command, env) : 0;
    unsigned char *f = payload ? malloc(FRAME_HEADER + payload) : NULL;
    if (!f)
        return NULL;
    frame_head_put(f, FRAME_RUN, slot, (uint32_t)payload);
    frame_run_put(f + FRAME_HEADER, (uint32_t)timeout_seconds * 1000u, command, env);
    *len = FRAME_HEADER + payload;
    return f;
}

/* One command's run: its slot and per-command options, and what the frames said. */
typedef struct {
    sandbox *s;
    unsigned slot;
    int cancel_fd;  /* sandbox_opts.cancel_fd */
    const sandbox_tap *tap;
    bool to_tap;    /* before the deadline: output goes to the tap too */
    uint32_t taken; /* output bytes taken since the last FRAME_CREDIT */
    bool kill_due;  /* the client hung up: FRAME_KILL to send */
    sbx_proc_result r;
    bool ended;     /* 'X' came */
    int code;
    bool failed;    /* out of memory: errbuf says so */
    bool not_started; /* 'F' came: the command never ran (errbuf says why) */
    bool gone;      /* end of file or a broken frame: the sandbox died */
    char *errbuf;
    size_t errlen;
} agent_run;

static bool run_over(const agent_run *a)
{
    return a->ended || a->failed || a->not_started || a->gone;
}

/* Whether a frame to a's slot is due: the window a's output took back (FRAME_CREDIT), half a
 * window at a time, or a FRAME_KILL. */
static bool due(const agent_run *a)
{
    return !a->ended && (a->kill_due || a->taken >= AGENT_WINDOW / 2);
}

/* Sends what is due, unless another thread is writing to the agent (then later: the caller may
 * be the one whose reading lets the agent take that thread's frame). */
static void send_due(agent_run *a)
{
    if (!due(a) || pthread_mutex_trylock(&a->s->cmd_mu) != 0)
        return;
    unsigned char p[4];
    frame_put_u32(p, a->taken);
    if (a->taken >= AGENT_WINDOW / 2 && frame_send(a->s->cmd_w, FRAME_CREDIT, a->slot, p, sizeof p) != 0)
        a->gone = true;
    else if (a->taken >= AGENT_WINDOW / 2)
        a->taken = 0;
    if (a->kill_due && frame_send(a->s->cmd_w, FRAME_KILL, a->slot, NULL, 0) != 0)
        a->gone = true;
    a->kill_due = false;
    pthread_mutex_unlock(&a->s->cmd_mu);
}

/* Takes in one frame of a's slot (its output to the tap too while a->to_tap). A frame that
 * breaks the protocol is a sandbox that cannot be trusted: gone. */
static void take_frame(agent_run *a, frame_type t, const unsigned char *payload, uint32_t len)
{
    frame_exit x;
    const sandbox_tap *tap = a->to_tap ? a->tap : NULL;
    switch (t) {
    case FRAME_STDOUT:
    case FRAME_STDERR:
        if (capture_feed(t == FRAME_STDOUT ? &a->r.out : &a->r.err, (const char *)payload, len) != 0) {
            snprintf(a->errbuf, a->errlen, "out of memory");
            a->failed = true;
            break;
        }
        if (tap)
            tap->output(tap->ctx, t == FRAME_STDOUT ? 1 : 2, (const char *)payload, len);
        a->taken += len;
        send_due(a);
        break;
    case FRAME_EXIT:
        if (frame_exit_get(payload, len, &x) != 0) {
            a->gone = true;
            break;
        }
        a->ended = true;
        a->code = x.code;
        a->r.timed_out = x.ending == FRAME_ENDED_TIMED_OUT;
        a->r.cancelled = x.ending == FRAME_ENDED_KILLED;
        break;
    case FRAME_FAIL:
        snprintf(a->errbuf, a->errlen, "the sandbox could not start the command: %.*s", (int)len, payload);
        a->not_started = true;
        break;
    default: /* never one of a slot's */
        a->gone = true;
        break;
    }
}

/* Whether a's tap cannot take output now (a slow client): a's frames wait in its queue. */
static bool tap_full(const agent_run *a)
{
    return a->to_tap && a->tap && a->tap->full(a->tap->ctx);
}

/* agent_stdio_read's taker: a's own frame in place, unless its tap is full. */
static bool take_in_place(void *ctx, frame_type t, const unsigned char *payload, uint32_t len)
{
    agent_run *a = ctx;
    if (run_over(a) || tap_full(a))
        return false;
    take_frame(a, t, payload, len);
    return true;
}

/* Thaws s for its commands: the first one also gets the command's limits (sbx_cg_begin_command).
 * Under agent_mu, when no other command runs. */
static int begin(sandbox *s, char *errbuf, size_t errlen)
{
    s->settling = false;
    if (!s->sent) {
        sbx_cg_limits lim = sbx_command_limits(s);
        if (sbx_cg_begin_command(&s->cg, &lim) != 0) {
            snprintf(errbuf, errlen, "sandbox %s hit its memory limit while booting", s->id);
            return -1;
        }
        s->sent = true;
        return 0;
    }
    if (sbx_cg_next_command(&s->cg) != 0) {
        snprintf(errbuf, errlen, "cannot thaw sandbox %s", s->id);
        return -1;
    }
    return 0;
}

/* Kills the sandbox for good (a command that outlived its timeout, a broken agent). Under
 * agent_mu. */
static void kill_sandbox(sandbox *s)
{
    s->ran = true; /* unusable from now on */
    (void)sbx_cg_kill_all_except(&s->cg, s->child.pid);
}

static void kill_sandbox_now(sandbox *s)
{
    pthread_mutex_lock(&s->agent_mu);
    kill_sandbox(s);
    pthread_mutex_unlock(&s->agent_mu);
}

/* Takes in a's queued frames while its tap takes them; then claims the reader role when a
 * does not hold it (*reader) and nobody does. False when the agent is gone. */
static bool take_queued(sandbox *s, agent_run *a, bool *reader)
{
    pthread_mutex_lock(&s->agent_mu);
    agent_frame *f;
    while (!run_over(a) && !tap_full(a) && (f = agent_stdio_pop(s->io, a->slot)) != NULL) {
        pthread_mutex_unlock(&s->agent_mu);
        take_frame(a, f->type, f->payload, f->len);
        free(f);
        pthread_mutex_lock(&s->agent_mu);
    }
    if (!*reader)
        *reader = agent_stdio_claim(s->io);
    bool ok = !agent_stdio_broken(s->io);
    pthread_mutex_unlock(&s->agent_mu);
    return ok;
}

/* Reads the agent's frames until the command ends, its deadline passes or the sandbox dies:
 * itself from the agent's stdout while it holds the reader role, else as the reader queues
 * them (agent_stdio.h). */
static void collect(sandbox *s, int timeout_seconds, agent_run *a)
{
    int64_t deadline = now_ms() + (int64_t)timeout_seconds * 1000;
    int64_t give_up = deadline + AGENT_GRACE_MS;
    bool asked_kill = false, reader = false;
    const sandbox_tap *tap = a->tap;
    agent_stdio *io = s->io;
    for (;;) {
        int64_t now = now_ms();
        /* past the deadline the frames are read whatever the tap says (a timed-out result has
         * no output): an agent that waits for its window gets to kill the command at once */
        a->to_tap = now < deadline;
        if (!take_queued(s, a, &reader))
            a->gone = true;
        if (run_over(a))
            break;
        if (tap)
            tap->output(tap->ctx, 0, NULL, 0);
        if (now >= give_up) {
            kill_sandbox_now(s);
            a->r.timed_out = !a->r.cancelled;
            a->code = -1;
            break;
        }
        struct pollfd pf[3];
        nfds_t n = 0;
        int i_cancel = -1;
        if (tap_full(a) && tap->room_fd >= 0)
            pf[n++] = (struct pollfd){.fd = tap->room_fd, .events = POLLIN};
        int i_ev = (int)n;
        pf[n++] = (struct pollfd){.fd = reader ? agent_stdio_fd(io) : agent_stdio_wake_fd(io, a->slot), .events = POLLIN};
        if (a->cancel_fd > 0 && !asked_kill) {
            pf[n] = (struct pollfd){.fd = a->cancel_fd, .events = POLLRDHUP};
            i_cancel = (int)n++;
        }
        int wait = (int)(give_up - now < TICK_MS ? give_up - now : TICK_MS);
        if (tap && tap->tick_ms > 0 && wait > tap->tick_ms)
            wait = tap->tick_ms;
        if (now < deadline && wait > deadline - now)
            wait = (int)(deadline - now);
        if (due(a) && wait > 5)
            wait = 5; /* another thread was writing to the agent: soon again */
        if (poll(pf, n, wait) < 0 && errno != EINTR) {
            kill_sandbox_now(s);
            a->gone = true;
            break;
        }
        if (i_cancel >= 0 && (pf[i_cancel].revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL))) {
            asked_kill = true;
            a->r.cancelled = true;
            a->kill_due = true;
        }
        send_due(a);
        if (!pf[i_ev].revents)
            continue;
        if (!reader)
            agent_stdio_woken(io, a->slot);
        else if (agent_stdio_read(io, a->slot, take_in_place, a, false) < 0)
            a->gone = true;
    }
    if (reader) { /* the others' threads take the role on */
        pthread_mutex_lock(&s->agent_mu);
        agent_stdio_release(io, s->slots_busy & ~(1u << a->slot));
        pthread_mutex_unlock(&s->agent_mu);
    }
}

/* Takes a free slot of s for a command, thawing s for the first one: its slot, -1 when none is
 * free (the caller runs the command another way), -2 when s cannot be thawed (killed). */
static int take_slot(sandbox *s, char *errbuf, size_t errlen)
{
    pthread_mutex_lock(&s->agent_mu);
    int slot = -1;
    for (int i = 0; i < AGENT_SLOTS && slot < 0; i++)
        if (!(s->slots_busy & (1u << i)) && s->io)
            slot = i;
    if (slot >= 0 && s->running == 0 && begin(s, errbuf, errlen) != 0) {
        kill_sandbox(s);
        slot = -2;
    }
    if (slot >= 0) {
        agent_stdio_clear(s->io, (unsigned)slot); /* (what a run that failed left) */
        s->slots_busy |= 1u << slot;
        s->running++;
    }
    pthread_mutex_unlock(&s->agent_mu);
    return slot;
}

/* A command (or a process's turn) ended: the memory's verdict (oom, limit_hit); the last one
 * out freezes s (or kills it when the agent is gone or the memory limit took the sentry down).
 * Under agent_mu. */
static bool end_turn_locked(sandbox *s, bool gone, bool *limit_hit)
{
    bool oom = false;
    *limit_hit = false;
    sbx_cg_oom_status(&s->cg, &oom, limit_hit);
    if (gone || oom) /* a host OOM kill takes the whole sentry down */
        kill_sandbox(s);
    if (--s->running == 0) {
        sbx_cg_end_command(&s->cg);
        /* frozen a second later once the agent's next container is ready (sandbox_session_settle) */
        s->settling = !s->ran;
        s->next_ready = false;
        s->idle_since = now_ms();
        if (!s->ran && !s->settling && sbx_cg_freeze(&s->cg, true) != 0)
            kill_sandbox(s); /* never leave it running idle */
    }
    return oom;
}

/* The command of slot ended: end_turn_locked's verdict, and the slot is free. */
static bool give_slot(sandbox *s, int slot, bool gone, bool *limit_hit)
{
    pthread_mutex_lock(&s->agent_mu);
    s->slots_busy &= ~(1u << slot);
    agent_stdio_clear(s->io, (unsigned)slot);
    bool oom = end_turn_locked(s, gone, limit_hit);
    pthread_mutex_unlock(&s->agent_mu);
    return oom;
}

int sandbox_session_run(sandbox *s, const sandbox_opts *o, const char *command, int timeout_seconds,
                        sandbox_result *out, char *errbuf, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (errlen)
        errbuf[0] = '\0';
    if (!sandbox_session_usable(s)) {
        snprintf(errbuf, errlen, "sandbox %s cannot take a command", s->id);
        return -1;
    }
    if (timeout_seconds < 1)
        timeout_seconds = 1;
    if (timeout_seconds > 86400)
        timeout_seconds = 86400;
    int slot = take_slot(s, errbuf, errlen);
    if (slot < 0)
        return 1;
    size_t len;
    unsigned char *frame = request_frame(s, (unsigned)slot, command ? command : "", timeout_seconds, &len);
    agent_run a;
    memset(&a, 0, sizeof a);
    a.s = s;
    a.slot = (unsigned)slot;
    a.errbuf = errbuf;
    a.errlen = errlen;
    a.cancel_fd = o->cancel_fd;
    a.tap = o->tap;
    size_t limit = o->output_limit ? o->output_limit : SANDBOX_OUTPUT_LIMIT;
    capture_init(&a.r.out, limit);
    capture_init(&a.r.err, limit);
    if (!frame) {
        bool hit;
        (void)give_slot(s, slot, false, &hit);
        return 1;
    }
    pthread_mutex_lock(&s->cmd_mu);
    if (frame_write_all(s->cmd_w, frame, len) != 0)
        a.gone = true;
    pthread_mutex_unlock(&s->cmd_mu);
    free(frame);
    if (!a.gone)
        collect(s, timeout_seconds, &a);
    bool limit_hit = false;
    bool oom = give_slot(s, slot, a.gone, &limit_hit);
    if (a.gone && !oom && !a.r.cancelled && !a.r.timed_out) {
        sbx_proc_result_free(&a.r);
        snprintf(errbuf, errlen, "the session's sandbox %s died", s->id);
        return -1;
    }
    if (a.failed) {
        sbx_proc_result_free(&a.r);
        return -1;
    }
    if (a.not_started) { /* its next command gets a new sandbox; this one runs another way */
        log_warn("%s; the command runs in a sandbox of its own", errbuf);
        kill_sandbox_now(s);
        sbx_proc_result_free(&a.r);
        return 1;
    }
    /* as on the per-command path: a SIGKILL at the memory limit is the memory */
    bool oom_killed = oom || (a.code == 137 && limit_hit);
    if (sbx_finish_result(out, &a.r, oom_killed ? 137 : a.code, oom_killed) != 0) {
        snprintf(errbuf, errlen, "out of memory");
        return -1;
    }
    return 0;
}

int sandbox_session_ping(sandbox *s, int timeout_ms, char *errbuf, size_t errlen)
{
    if (!sandbox_session_usable(s)) {
        snprintf(errbuf, errlen, "sandbox %s cannot take a command", s->id);
        return -1;
    }
    int slot = take_slot(s, errbuf, errlen); /* (thawed, with its command's limits, as for a command) */
    if (slot < 0) {
        if (slot == -1)
            snprintf(errbuf, errlen, "sandbox %s has no free slot", s->id);
        return -1;
    }
    pthread_mutex_lock(&s->cmd_mu);
    bool sent = frame_send(s->cmd_w, FRAME_PING, (unsigned)slot, NULL, 0) == 0;
    pthread_mutex_unlock(&s->cmd_mu);
    int64_t until = now_ms() + timeout_ms;
    bool pong = false, gone = !sent;
    unsigned char payload[FRAME_FAIL_MAX]; /* (a free slot gets nothing else: larger breaks it) */
    while (!pong && !gone) {
        int64_t left = until - now_ms();
        if (left <= 0)
            break;
        frame_head h;
        bool cancelled = false;
        int rc = sandbox_session_proc_read(s, slot, (int)left, -1, &cancelled, &h, payload, sizeof payload);
        gone = rc < 0;
        pong = rc == 1 && h.type == FRAME_PONG;
    }
    bool limit_hit;
    (void)give_slot(s, slot, !pong, &limit_hit); /* (no answer: it cannot be trusted with a command) */
    if (!pong)
        snprintf(errbuf, errlen, "the agent of sandbox %s %s", s->id, gone ? "is gone" : "did not answer");
    return pong ? 0 : -1;
}

int sandbox_session_settle(sandbox *s, int64_t *until_ms)
{
    pthread_mutex_lock(&s->agent_mu);
    int fd = -1;
    if (s->settling && s->running == 0 && !s->ran && s->io) {
        /* no command runs: nobody else reads the agent's stdout (its FRAME_IDLE) */
        int rc = 0;
        if (agent_stdio_claim(s->io)) {
            while ((rc = agent_stdio_read(s->io, AGENT_SLOTS, NULL, NULL, true)) > 0) {
            }
            agent_stdio_release(s->io, 0);
        }
        s->next_ready = s->next_ready || agent_stdio_idle_said(s->io);
        int64_t now = now_ms(), thawed_until = s->idle_since + THAWED_MS, settle_until = s->idle_since + SETTLE_MS;
        if (rc < 0) { /* the agent died */
            s->settling = false;
            kill_sandbox(s);
        } else if (now >= settle_until || (s->next_ready && now >= thawed_until)) {
            s->settling = false;
            if (sbx_cg_freeze(&s->cg, true) != 0)
                kill_sandbox(s); /* never leave it running idle */
        } else {
            fd = agent_stdio_fd(s->io); /* (read to its end: only a deadline wakes the poll once said) */
            *until_ms = s->next_ready ? thawed_until : settle_until;
        }
    }
    pthread_mutex_unlock(&s->agent_mu);
    return fd;
}

bool sandbox_session_usable(sandbox *s)
{
    pthread_mutex_lock(&s->agent_mu);
    bool ok = s->agent && s->booted && !s->ran && s->cmd_w >= 0 && s->io && !agent_stdio_broken(s->io);
    pthread_mutex_unlock(&s->agent_mu);
    return ok;
}

int sandbox_session_spawn(sandbox *s, const char *command, char *errbuf, size_t errlen)
{
    if (errlen)
        errbuf[0] = '\0';
    if (!sandbox_session_usable(s)) {
        snprintf(errbuf, errlen, "sandbox %s cannot take a process", s->id);
        return -1;
    }
    int slot = take_slot(s, errbuf, errlen);
    if (slot == -1)
        snprintf(errbuf, errlen, "every slot of sandbox %s is busy", s->id);
    if (slot < 0)
        return -1;
    size_t len;
    unsigned char *frame = request_frame(s, (unsigned)slot, command, 1, &len);
    bool sent = false;
    if (frame) {
        frame[0] = FRAME_SPAWN;
        frame_put_u32(frame + FRAME_HEADER, 0); /* no timeout: airlockd keeps the process's time */
        s->proc_taken[slot] = 0;
        pthread_mutex_lock(&s->cmd_mu);
        sent = frame_write_all(s->cmd_w, frame, len) == 0;
        pthread_mutex_unlock(&s->cmd_mu);
        free(frame);
    }
    if (!sent) {
        bool hit;
        (void)give_slot(s, slot, frame != NULL, &hit);
        snprintf(errbuf, errlen, "cannot start a process in sandbox %s", s->id);
        return -1;
    }
    return slot;
}

/* Gives slot's process back the window its output took (FRAME_CREDIT), half a window at a time,
 * unless another thread is writing to the agent (then at the next read). */
static void proc_grant(sandbox *s, int slot)
{
    if (s->proc_taken[slot] < AGENT_WINDOW / 2 || pthread_mutex_trylock(&s->cmd_mu) != 0)
        return;
    unsigned char p[4];
    frame_put_u32(p, s->proc_taken[slot]);
    if (frame_send(s->cmd_w, FRAME_CREDIT, (unsigned)slot, p, sizeof p) == 0)
        s->proc_taken[slot] = 0;
    pthread_mutex_unlock(&s->cmd_mu);
}

int sandbox_session_proc_read(sandbox *s, int slot, int wait_ms, int cancel_fd, bool *cancelled, frame_head *h,
                              void *payload, size_t cap)
{
    if (slot < 0 || slot >= AGENT_SLOTS || !s->io)
        return -1;
    agent_stdio *io = s->io;
    int64_t until = now_ms() + (wait_ms < 0 ? 0 : wait_ms);
    bool reader = false, last = false;
    int rc = 0;
    for (;;) {
        proc_grant(s, slot);
        pthread_mutex_lock(&s->agent_mu);
        agent_frame *f = agent_stdio_pop(io, (unsigned)slot);
        bool broken = agent_stdio_broken(io);
        if (!f && !broken && !reader)
            reader = agent_stdio_claim(io);
        pthread_mutex_unlock(&s->agent_mu);
        if (f) {
            /* a frame over the caller's buffer breaks the protocol: the sandbox cannot be trusted */
            rc = f->len <= cap ? 1 : -1;
            if (rc == 1) {
                *h = (frame_head){.type = f->type, .slot = (unsigned)slot, .len = f->len};
                memcpy(payload, f->payload, f->len);
                if (f->type == FRAME_STDOUT || f->type == FRAME_STDERR)
                    s->proc_taken[slot] += f->len;
            }
            free(f);
            break;
        }
        if (broken) {
            rc = -1;
            break;
        }
        if (last)
            break;
        int64_t left = until - now_ms();
        struct pollfd pf[2] = {
            {.fd = reader ? agent_stdio_fd(io) : agent_stdio_wake_fd(io, (unsigned)slot), .events = POLLIN},
            {.fd = cancel_fd > 0 && !*cancelled ? cancel_fd : -1, .events = POLLRDHUP}};
        if (poll(pf, 2, left > 0 ? (int)left : 0) < 0 && errno != EINTR) {
            rc = -1;
            break;
        }
        if (pf[1].revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL))
            *cancelled = true;
        if (pf[0].revents && !reader)
            agent_stdio_woken(io, (unsigned)slot);
        else if (pf[0].revents && agent_stdio_read(io, (unsigned)slot, NULL, NULL, false) < 0)
            rc = -1;
        if (rc < 0 || *cancelled)
            break;
        if (now_ms() >= until && !pf[0].revents)
            break;
        last = now_ms() >= until; /* (what was just read may be this slot's: looked at once more) */
    }
    if (reader) { /* the others' threads take the role on */
        pthread_mutex_lock(&s->agent_mu);
        agent_stdio_release(io, s->slots_busy & ~(1u << slot));
        pthread_mutex_unlock(&s->agent_mu);
    }
    return rc;
}

int sandbox_session_proc_send(sandbox *s, int slot, int type, const void *data, size_t len)
{
    const char *p = data;
    int rc = 0;
    pthread_mutex_lock(&s->cmd_mu);
    if (s->cmd_w < 0 || s->ran || slot < 0 || slot >= AGENT_SLOTS) {
        rc = -1;
    } else if (type != FRAME_STDIN) {
        rc = frame_send(s->cmd_w, (frame_type)type, (unsigned)slot, data, len);
    } else {
        do { /* in frames the agent takes */
            size_t n = len > FRAME_OUTPUT_MAX ? FRAME_OUTPUT_MAX : len;
            if (n > 0 || len == 0)
                rc = frame_send(s->cmd_w, FRAME_STDIN, (unsigned)slot, p, n);
            p += n;
            len -= n;
        } while (rc == 0 && len > 0);
    }
    pthread_mutex_unlock(&s->cmd_mu);
    return rc;
}

int sandbox_session_proc_signal(sandbox *s, int slot, int sig)
{
    unsigned char b = (unsigned char)sig;
    return sandbox_session_proc_send(s, slot, FRAME_SIGNAL, &b, 1);
}

int sandbox_session_proc_begin(sandbox *s, char *errbuf, size_t errlen)
{
    pthread_mutex_lock(&s->agent_mu);
    int rc = 0;
    if (s->ran) {
        snprintf(errbuf, errlen, "the session's sandbox %s died", s->id);
        rc = -1;
    } else if (s->running == 0 && begin(s, errbuf, errlen) != 0) {
        kill_sandbox(s);
        rc = -1;
    }
    if (rc == 0)
        s->running++;
    pthread_mutex_unlock(&s->agent_mu);
    return rc;
}

bool sandbox_session_proc_end(sandbox *s, bool gone, bool *limit_hit)
{
    pthread_mutex_lock(&s->agent_mu);
    bool oom = end_turn_locked(s, gone, limit_hit);
    pthread_mutex_unlock(&s->agent_mu);
    return oom;
}

void sandbox_session_proc_release(sandbox *s, int slot)
{
    pthread_mutex_lock(&s->agent_mu);
    if (slot >= 0 && slot < AGENT_SLOTS)
        s->slots_busy &= ~(1u << slot);
    pthread_mutex_unlock(&s->agent_mu);
}
