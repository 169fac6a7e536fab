/* A session's own sandbox in the warm table (SANDBOX_EXEC_MODE=session, see warm.h): wanted
 * when the session is made, lent to its commands (up to AGENT_SLOTS at once, each in its own
 * container there) and given back. */
#include "domain/warm_internal.h"

#include "sandbox/session_checkpoint.h"
#include "sandbox/session_sandbox.h"
#include "../../agent/protocol.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* How long a command waits for its session's sandbox to boot before it runs another way. */
#define SESSION_WAIT_MS 20000
/* A waiting command looks at its client this often. */
#define WAIT_SLICE_MS 50
/* How long a restored sandbox's agent has to answer its check. */
#define CHECK_TIMEOUT_S 30

bool warm_sessions(const warm_pool *w)
{
    return w && w->ws.sessions;
}

/* s's own entry, a pending want made when it has none; NULL when the table has no room. */
static entry *want_locked(warm_pool *w, const session *s, const char *tenant, const char *root)
{
    entry *e = warm_find_kind(w, s->id, true);
    if (!e && !w->stopping && (e = warm_free_entry_locked(w)) != NULL) {
        if (!warm_fill_entry(e, s->id, s->workspace, tenant, root))
            return NULL;
        e->session = true;
        e->created_at = s->created_at;
        e->size = s->size;
        if (json_array_size(s->egress) > 0 && !(e->egress = json_deep_copy(s->egress))) {
            warm_clear_entry(e); /* never a sandbox without its session's network */
            return NULL;
        }
    }
    warm_wake(w);
    return e;
}

void warm_want_session(warm_pool *w, const session *s, const char *tenant, const char *root)
{
    if (!warm_sessions(w) || strlen(s->id) >= KEY_MAX || !s->id[0])
        return;
    pthread_mutex_lock(&w->mu);
    (void)want_locked(w, s, tenant, root);
    pthread_mutex_unlock(&w->mu);
}

static bool client_gone(int fd)
{
    if (fd <= 0)
        return false;
    struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLERR | POLLRDHUP)) != 0;
}

/* key's own entry once it is ready, now lent to the caller (too when lent to other commands
 * with a slot to spare); with wait, a boot under way is waited for. NULL when there is none
 * to be had. Locked. */
static entry *lend(warm_pool *w, const session *s, const sandbox_opts *o, bool wait)
{
    const char *key = s->id;
    int64_t until = warm_now_ms() + (wait ? SESSION_WAIT_MS : 0);
    entry *e = want_locked(w, s, o->tenant, o->root_dir);
    while (e && (e->state == E_PENDING || e->state == E_STARTING || e->state == E_BOOTING)) {
        if (e->state == E_BOOTING)
            sandbox_boot_hurry(e->sb);
        if (warm_now_ms() >= until || client_gone(o->cancel_fd) || w->stopping)
            return NULL;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&w->changed, &w->mu, &ts);
        e = warm_find_kind(w, key, true);
    }
    /* (a dead one still held by kernels is not lent: they let go of it, then the next boots) */
    if (e && e->state == E_LENT && e->borrowers < AGENT_SLOTS && !e->doomed && sandbox_session_usable(e->sb)) {
        e->borrowers++;
        return e;
    }
    if (!e || e->state != E_READY)
        return NULL;
    e->state = E_LENT;
    e->borrowers = 1;
    return e;
}

/* Gives e back after a borrow: the last borrower out decides whether it waits for the next
 * one, or is released (dead: its session's next one boots). */
static void give_back(warm_pool *w, entry *e)
{
    pthread_mutex_lock(&w->mu);
    e->used_ms = warm_now_ms();
    if (--e->borrowers > 0) {
        /* the last command out decides */
    } else if (sandbox_session_usable(e->sb) && !e->doomed) {
        e->state = E_READY;
        warm_wake(w); /* to freeze it once its agent is ready for the next command */
    } else {
        e->reboot = true; /* unless its session ended (doomed) */
        e->state = E_DOOMED;
        warm_wake(w);
    }
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->mu);
}

int warm_session_run(warm_pool *w, const session *s, const sandbox_opts *o, const char *command,
                     int timeout_seconds, bool wait, sandbox_result *out, char *errbuf, size_t errlen)
{
    if (!warm_sessions(w) || o->network || strlen(s->id) >= KEY_MAX || !s->id[0])
        return 1;
    if (json_array_size(s->egress) > 0 && !w->ws.net.open)
        return 1; /* no way to give its sandbox the session's network */
    pthread_mutex_lock(&w->mu);
    entry *e = w->stopping ? NULL : lend(w, s, o, wait);
    pthread_mutex_unlock(&w->mu);
    if (!e)
        return 1;
    /* a lent entry is never released nor reused: e stays this sandbox's */
    int rc = sandbox_session_run(e->sb, o, command, timeout_seconds, out, errbuf, errlen);
    give_back(w, e);
    return rc;
}

sandbox *warm_session_borrow(warm_pool *w, const session *s, const char *tenant, const char *root, int cancel_fd)
{
    if (!warm_sessions(w) || strlen(s->id) >= KEY_MAX || !s->id[0])
        return NULL;
    if (json_array_size(s->egress) > 0 && !w->ws.net.open)
        return NULL;
    sandbox_opts o = {.tenant = tenant, .root_dir = root, .cancel_fd = cancel_fd};
    pthread_mutex_lock(&w->mu);
    entry *e = w->stopping ? NULL : lend(w, s, &o, true);
    pthread_mutex_unlock(&w->mu);
    return e ? e->sb : NULL;
}

void warm_session_give_back(warm_pool *w, const session *s, sandbox *sb)
{
    pthread_mutex_lock(&w->mu);
    entry *e = warm_find_kind(w, s->id, true);
    bool ours = e && e->sb == sb && e->state == E_LENT && e->borrowers > 0;
    pthread_mutex_unlock(&w->mu);
    if (ours) /* (a lent entry stays this sandbox's until given back) */
        give_back(w, e);
}

/* s's own entry's sandbox when booted and lent or ready (locked look-up); NULL when none. */
static sandbox *session_sandbox(warm_pool *w, const session *s)
{
    pthread_mutex_lock(&w->mu);
    entry *e = warm_find_kind(w, s->id, true);
    sandbox *sb = e && !e->doomed && (e->state == E_LENT || e->state == E_READY) ? e->sb : NULL;
    pthread_mutex_unlock(&w->mu);
    return sb;
}

int warm_session_checkpoint(warm_pool *w, const session *s, const char *image_dir, char *errbuf, size_t errlen)
{
    sandbox *sb = warm_sessions(w) ? session_sandbox(w, s) : NULL;
    if (!sb) {
        snprintf(errbuf, errlen, "the session has no sandbox of its own");
        return -1;
    }
    int rc = sandbox_session_checkpoint(sb, image_dir, errbuf, errlen);
    if (rc != 0)
        return rc;
    /* its network (namespaces, proxy listener) goes with the sandbox: a paused session holds
     * nothing on the host; the restore makes it again (open_network) */
    pthread_mutex_lock(&w->mu);
    entry *e = warm_find_kind(w, s->id, true);
    void *net = e && e->sb == sb ? e->net : NULL;
    if (net)
        e->net = NULL;
    pthread_mutex_unlock(&w->mu);
    sandbox_session_set_network(sb, NULL);
    if (net)
        w->ws.net.close(w->ws.net.ctx, net);
    return 0;
}

/* The network of a restored sandbox of session s (with egress rules; none without): a new
 * handle and *network, or NULL (*network NULL too) when s has none. -1 with errbuf when it
 * cannot be made. */
static int open_network(warm_pool *w, const session *s, const char *tenant, const sandbox_proxy_login *login,
                        void **handle, const sandbox_network **network, char *errbuf, size_t errlen)
{
    *handle = NULL;
    *network = NULL;
    if (json_array_size(s->egress) == 0)
        return 0;
    if (!w->ws.net.open) {
        snprintf(errbuf, errlen, "the session's egress network cannot be made here");
        return -1;
    }
    char err[256] = "";
    *handle = w->ws.net.open(w->ws.net.ctx, s->id, tenant, s->created_at, s->egress, login, network, err, sizeof err);
    if (!*handle) {
        snprintf(errbuf, errlen, "its egress network could not be made again: %s", err[0] ? err : "unknown");
        *network = NULL;
        return -1;
    }
    return 0;
}

/* The restored agent answers (and so the restore is over: its image may go): a ping, answered
 * by the agent itself, when the image says its agent knows it; else a command (its first settle
 * and freeze follow either). A command would also make a container in the restored sandbox
 * first (~0.1 s on a loaded host) before its answer. */
static int check_restored(sandbox *sb, const char *image_dir, char *errbuf, size_t errlen)
{
    if (sandbox_image_agent_pings(image_dir))
        return sandbox_session_ping(sb, CHECK_TIMEOUT_S * 1000, errbuf, errlen);
    sandbox_opts o = {.cancel_fd = -1};
    sandbox_result r;
    memset(&r, 0, sizeof r);
    int rc = sandbox_session_run(sb, &o, "true", CHECK_TIMEOUT_S, &r, errbuf, errlen);
    bool ok = rc == 0 && r.exit_code == 0;
    if (rc == 0 && !ok)
        snprintf(errbuf, errlen, "the restored sandbox's agent did not run a command (exit %d)", r.exit_code);
    else if (rc == 1)
        snprintf(errbuf, errlen, "the restored sandbox's agent did not take a command");
    if (rc == 0)
        sandbox_result_free(&r);
    return ok ? 0 : -1;
}

int warm_session_restore(warm_pool *w, const session *s, const char *image_dir, char *errbuf, size_t errlen)
{
    sandbox *sb = warm_sessions(w) ? session_sandbox(w, s) : NULL;
    if (!sb) {
        snprintf(errbuf, errlen, "the session's checkpointed sandbox is gone");
        return 1;
    }
    void *net = NULL;
    const sandbox_network *network = NULL;
    pthread_mutex_lock(&w->mu);
    entry *e = warm_find_kind(w, s->id, true);
    const char *tenant = e && e->sb == sb ? e->tenant : NULL;
    pthread_mutex_unlock(&w->mu);
    if (!tenant) {
        snprintf(errbuf, errlen, "the session's checkpointed sandbox is gone");
        return 1;
    }
    /* (its entry is lent to its kernels: it keeps its tenant and stays sb's meanwhile) */
    if (open_network(w, s, tenant, NULL, &net, &network, errbuf, errlen) != 0)
        return -1;
    pthread_mutex_lock(&w->mu);
    void *old = e->net; /* (none: the checkpoint closed it) */
    e->net = net;       /* the entry owns it from here: closed after its sandbox (warm.c) */
    pthread_mutex_unlock(&w->mu);
    sandbox_session_set_network(sb, network);
    if (old)
        w->ws.net.close(w->ws.net.ctx, old);
    if (sandbox_session_restore(sb, image_dir, errbuf, errlen) != 0)
        return -1;
    return check_restored(sb, image_dir, errbuf, errlen);
}

bool warm_session_restored_ahead(warm_pool *w, const session *s)
{
    sandbox *sb = warm_sessions(w) ? session_sandbox(w, s) : NULL;
    return sb && sandbox_session_restored_ahead(sb);
}

int warm_session_snapshot(warm_pool *w, const session *s, const char *image_dir, sandbox_still_fn still, void *ctx,
                          char *errbuf, size_t errlen)
{
    /* (lent while it works: neither evicted nor released meanwhile) */
    sandbox_opts o = {.cancel_fd = -1};
    pthread_mutex_lock(&w->mu);
    entry *e = warm_sessions(w) && !w->stopping ? lend(w, s, &o, false) : NULL;
    pthread_mutex_unlock(&w->mu);
    if (!e) { /* (its kernels hold it: every slot is in use, or it is being made again) */
        snprintf(errbuf, errlen, "the session's sandbox is busy (every slot in use) or not ready");
        return 1;
    }
    int rc = sandbox_session_snapshot(e->sb, image_dir, still, ctx, errbuf, errlen);
    give_back(w, e);
    return rc;
}

sandbox *warm_session_restore_anew(warm_pool *w, const session *s, const char *tenant, const char *root,
                                   const char *image_dir, unsigned slots_busy, int borrowers, bool fork,
                                   const sandbox_proxy_login *login, char *errbuf, size_t errlen)
{
    if (!warm_sessions(w) || strlen(s->id) >= KEY_MAX || !s->id[0]) {
        snprintf(errbuf, errlen, "sessions have no sandbox of their own here");
        return NULL;
    }
    pthread_mutex_lock(&w->mu);
    entry *e = w->stopping || warm_find_kind(w, s->id, true) ? NULL : warm_free_entry_locked(w);
    if (e && !warm_fill_entry(e, s->id, s->workspace, tenant, root))
        e = NULL;
    if (e) { /* starting: the thread leaves it alone while the restore runs */
        e->session = true;
        e->created_at = s->created_at;
        e->size = s->size;
        e->state = E_STARTING;
        e->started_ms = warm_now_ms();
    }
    pthread_mutex_unlock(&w->mu);
    if (!e) {
        snprintf(errbuf, errlen, "no room for the session's restored sandbox");
        return NULL;
    }
    sandbox_opts o = {.workspace_dir = s->workspace, .name = s->id, .tenant = tenant, .cancel_fd = -1,
                      .size = s->size, .root_dir = root};
    void *net = NULL;
    json_t *egress = json_array_size(s->egress) > 0 ? json_deep_copy(s->egress) : NULL;
    sandbox *sb = NULL;
    if (json_array_size(s->egress) > 0 && !egress)
        snprintf(errbuf, errlen, "out of memory");
    else if (open_network(w, s, tenant, login, &net, &o.network, errbuf, errlen) == 0)
        sb = sandbox_session_from_image(w->b, &o, image_dir, slots_busy, fork, errbuf, errlen);
    if (sb && check_restored(sb, image_dir, errbuf, errlen) != 0) {
        sandbox_release(sb);
        sb = NULL;
    }
    pthread_mutex_lock(&w->mu);
    bool kept = sb && !e->doomed && !w->stopping;
    if (!kept) {
        sandbox_release(sb);
        sb = NULL;
        warm_clear_entry(e);
    } else {
        e->sb = sb;
        e->egress = egress; /* its network, made again if it dies (warm.c) */
        e->net = net;
        e->used_ms = warm_now_ms();
        e->state = borrowers > 0 ? E_LENT : E_READY; /* lent to its kernels, as before the pause */
        e->borrowers = borrowers;
        warm_wake(w);
    }
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->mu);
    if (!kept) {
        if (net) /* after the sandbox that used it */
            w->ws.net.close(w->ws.net.ctx, net);
        json_decref(egress);
    }
    return sb;
}
