/* Sandboxes booted ahead for sessions: a fixed table of entries, one thread that boots, watches
 * and releases them, and the hand-over to a session's next command (see warm.h). */
#include "domain/warm_internal.h"

#include "log/log.h"
#include "sandbox/session_sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int64_t warm_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void warm_wake(warm_pool *w)
{
    ssize_t r = write(w->wake[1], "w", 1);
    (void)r; /* a full pipe already wakes the thread */
}

void warm_clear_entry(entry *e)
{
    free(e->workspace);
    free(e->tenant);
    free(e->root);
    json_decref(e->egress);
    memset(e, 0, sizeof *e);
    e->state = E_FREE;
}

entry *warm_find_kind(warm_pool *w, const char *key, bool own_sandbox)
{
    for (int i = 0; i < w->n; i++)
        if (w->e[i].state != E_FREE && !w->e[i].spare && w->e[i].session == own_sandbox &&
            strcmp(w->e[i].key, key) == 0)
            return &w->e[i];
    return NULL;
}

/* key's sandbox booted ahead for one command. */
static entry *find(warm_pool *w, const char *key)
{
    return warm_find_kind(w, key, false);
}

/* Any entry of key's (for its session's end). */
static entry *find_any(warm_pool *w, const char *key)
{
    entry *e = warm_find_kind(w, key, false);
    return e ? e : warm_find_kind(w, key, true);
}

/* Takes e's sandbox out of the table and releases it with the lock dropped; an unadopted
 * spare's disk goes after its sandbox (which had it mounted); a session's own sandbox that
 * died is wanted again for its next command. */
static void release_entry(warm_pool *w, entry *e)
{
    sandbox *sb = e->sb;
    void *net = e->net;
    char spare_id[KEY_MAX] = "";
    if (e->spare && e->workspace)
        snprintf(spare_id, sizeof spare_id, "%s", e->key);
    entry again = {0};
    if (e->reboot && !e->doomed && !w->stopping) { /* keeps its key, workspace and tenant */
        again = *e;
        e->workspace = e->tenant = e->root = NULL;
        e->egress = NULL;
    }
    warm_clear_entry(e);
    pthread_mutex_unlock(&w->mu);
    sandbox_release(sb);
    if (net) /* after the sandbox that used it */
        w->ws.net.close(w->ws.net.ctx, net);
    if (spare_id[0])
        w->ws.disks.drop(w->ws.disks.ctx, spare_id);
    pthread_mutex_lock(&w->mu);
    entry *n = again.workspace && !warm_find_kind(w, again.key, true) ? warm_free_entry_locked(w) : NULL;
    if (n && warm_fill_entry(n, again.key, again.workspace, again.tenant, again.root)) {
        n->session = true;
        n->egress = again.egress;
        n->created_at = again.created_at;
        n->size = again.size;
        again.egress = NULL;
    }
    json_decref(again.egress);
    free(again.workspace);
    free(again.tenant);
    free(again.root);
    pthread_cond_broadcast(&w->changed);
}

/* A spare's id and disk, made with the lock dropped (tens of ms); false when there is no room. */
static bool make_spare_disk(warm_pool *w, entry *e)
{
    char id[KEY_MAX];
    char *workspace = NULL;
    pthread_mutex_unlock(&w->mu);
    int rc = w->ws.disks.make(w->ws.disks.ctx, id, sizeof id, &workspace);
    pthread_mutex_lock(&w->mu);
    if (rc != 0)
        return false;
    snprintf(e->key, sizeof e->key, "%s", id);
    e->workspace = workspace;
    return true;
}

/* Starts pending boots while fewer than max_booting are under way. */
static void start_boots(warm_pool *w)
{
    int booting = 0;
    for (int i = 0; i < w->n; i++)
        booting += w->e[i].state == E_STARTING || w->e[i].state == E_BOOTING;
    for (int i = 0; i < w->n && booting < w->ws.max_booting && !w->stopping; i++) {
        entry *e = &w->e[i];
        if (e->state != E_PENDING)
            continue;
        e->state = E_STARTING;
        e->started_ms = warm_now_ms();
        booting++;
        if (e->spare && !make_spare_disk(w, e)) {
            warm_clear_entry(e); /* no disk space: new sessions start cold */
            pthread_cond_broadcast(&w->changed);
            continue;
        }
        char name[KEY_MAX + 4];
        snprintf(name, sizeof name, "%s-%s", e->key, e->session ? "s" : "w");
        sandbox_opts o = {.workspace_dir = e->workspace, .name = name, .tenant = e->tenant, .cancel_fd = -1,
                          .boot_ahead = true, .agent = e->session, .size = e->size, .root_dir = e->root};
        char err[512] = "";
        pthread_mutex_unlock(&w->mu);
        /* a session with egress: its sandbox on the session's network (an entry starting
         * stays as it is while the lock is dropped) */
        void *net = NULL;
        sandbox *sb = NULL;
        if (!e->egress || (w->ws.net.open && (net = w->ws.net.open(w->ws.net.ctx, e->key, e->tenant, e->created_at,
                                                                   e->egress, NULL, &o.network, err, sizeof err)) != NULL))
            sb = sandbox_prepare(w->b, &o, err, sizeof err);
        if (!sb && net)
            w->ws.net.close(w->ws.net.ctx, net);
        pthread_mutex_lock(&w->mu);
        e->sb = sb;
        e->net = sb ? net : NULL;
        if (!sb) {
            log_warn("cannot boot a sandbox ahead for %s: %s", e->key, err[0] ? err : "no egress");
            warm_clear_entry(e);
        } else if (e->doomed || w->stopping) {
            release_entry(w, e);
        } else {
            e->state = E_BOOTING;
        }
        pthread_cond_broadcast(&w->changed);
    }
}

/* Booting sandboxes that finished (or gave up), doomed ones, idle ones. */
static void look_around(warm_pool *w)
{
    int64_t now = warm_now_ms();
    for (int i = 0; i < w->n; i++) {
        entry *e = &w->e[i];
        if (e->state == E_BOOTING) {
            char err[512] = "";
            int rc = sandbox_boot_check(e->sb, err, sizeof err);
            if (rc == 1) {
                e->state = E_READY;
                e->used_ms = now;
                pthread_cond_broadcast(&w->changed); /* a command may wait for a session's own */
            } else if (rc < 0 || now - e->started_ms > BOOT_GIVE_UP_MS) {
                log_warn("sandbox booted ahead for %s given up: %s", e->key,
                         rc < 0 ? err : "boot too slow");
                release_entry(w, e);
            }
        } else if (e->state == E_DOOMED ||
                   (e->state == E_READY && now - e->used_ms > (int64_t)w->ws.idle_seconds * 1000)) {
            release_entry(w, e);
        }
    }
}

/* A session sandbox idle since its last command: frozen once its agent's next container is
 * ready (sandbox_session_settle; doomed, to boot again, when that killed it); until then its
 * descriptor to poll in *pf, and *wait_ms cut to its deadline. 1 when *pf was filled, else 0.
 * Locked. */
static nfds_t settle_fd(entry *e, struct pollfd *pf, int *wait_ms)
{
    int64_t until = 0;
    int fd = sandbox_session_settle(e->sb, &until);
    /* (a lent one, borrowed by a kernel between its cells, is given back by its borrower) */
    if (fd < 0 && e->state == E_READY && !sandbox_session_usable(e->sb)) { /* its freeze failed: killed */
        e->reboot = true;
        e->state = E_DOOMED;
        *wait_ms = 0; /* released at once, as a command would have found it */
    }
    if (fd < 0)
        return 0;
    int64_t left = until - warm_now_ms();
    if (left < *wait_ms)
        *wait_ms = left > 0 ? (int)left : 0;
    *pf = (struct pollfd){.fd = fd, .events = POLLIN};
    return 1;
}

static void *warm_main(void *arg)
{
    warm_pool *w = arg;
    struct pollfd *pf = calloc((size_t)w->n + 1, sizeof *pf);
    pthread_mutex_lock(&w->mu);
    while (!w->stopping) {
        start_boots(w);
        look_around(w);
        if (w->stopping)
            break;
        nfds_t n = 0;
        int wait = pf ? TICK_MS : 50;
        if (pf) {
            pf[n++] = (struct pollfd){.fd = w->wake[0], .events = POLLIN};
            for (int i = 0; i < w->n; i++)
                if (w->e[i].state == E_BOOTING && sandbox_boot_fd(w->e[i].sb) >= 0)
                    pf[n++] = (struct pollfd){.fd = sandbox_boot_fd(w->e[i].sb), .events = POLLIN};
                else if ((w->e[i].state == E_READY || w->e[i].state == E_LENT) && w->e[i].session)
                    n += settle_fd(&w->e[i], &pf[n], &wait);
        }
        pthread_mutex_unlock(&w->mu);
        /* a descriptor a taker closed meanwhile only wakes this poll early */
        if (poll(pf, n, wait) > 0 && pf && (pf[0].revents & POLLIN)) {
            char drain[64];
            while (read(w->wake[0], drain, sizeof drain) > 0) {
            }
        }
        pthread_mutex_lock(&w->mu);
    }
    /* release everything here: a sandbox dies with the thread that started it */
    for (int i = 0; i < w->n; i++) {
        entry *e = &w->e[i];
        while (e->state == E_STARTING || e->state == E_LENT) /* none: no command runs by now */
            pthread_cond_wait(&w->changed, &w->mu);
        if (e->state != E_FREE)
            release_entry(w, e);
    }
    pthread_mutex_unlock(&w->mu);
    free(pf);
    return NULL;
}

warm_pool *warm_new(sandbox_backend *b, const warm_settings *ws, char *errbuf, size_t errlen)
{
    if (errlen)
        errbuf[0] = '\0';
    if (ws->max_ready <= 0 || !sandbox_can_boot_ahead(b))
        return NULL;
    bool sessions = ws->sessions && sandbox_can_host_session(b);
    warm_pool *w = calloc(1, sizeof *w);
    if (!w || !(w->e = calloc((size_t)ws->max_ready, sizeof *w->e))) {
        free(w);
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    w->b = b;
    w->ws = *ws;
    w->ws.sessions = sessions;
    if (w->ws.max_booting < 1)
        w->ws.max_booting = 1;
    w->n = ws->max_ready;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->changed, NULL);
    if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(errbuf, errlen, "cannot create a pipe: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&w->thread, NULL, warm_main, w) != 0) {
        snprintf(errbuf, errlen, "cannot start the warm sandbox thread");
        close(w->wake[0]);
        close(w->wake[1]);
        goto fail;
    }
    return w;
fail:
    pthread_cond_destroy(&w->changed);
    pthread_mutex_destroy(&w->mu);
    free(w->e);
    free(w);
    return NULL;
}

void warm_free(warm_pool *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_mutex_unlock(&w->mu);
    warm_wake(w);
    pthread_join(w->thread, NULL);
    close(w->wake[0]);
    close(w->wake[1]);
    pthread_cond_destroy(&w->changed);
    pthread_mutex_destroy(&w->mu);
    free(w->e);
    free(w);
}

/* A free entry for a new want, locked; when full, the longest unused waiting one is doomed to
 * make room for the next want, and NULL. */
entry *warm_free_entry_locked(warm_pool *w)
{
    entry *lru = NULL;
    for (int i = 0; i < w->n; i++) {
        if (w->e[i].state == E_FREE)
            return &w->e[i];
        if (w->e[i].state == E_READY && (!lru || w->e[i].used_ms < lru->used_ms))
            lru = &w->e[i];
    }
    if (lru)
        lru->state = E_DOOMED;
    return NULL;
}

/* Fills a free entry as a pending want (key NULL: a spare, whose key comes with its disk). */
bool warm_fill_entry(entry *e, const char *key, const char *workspace, const char *tenant, const char *root)
{
    e->workspace = workspace ? strdup(workspace) : NULL;
    e->tenant = tenant ? strdup(tenant) : NULL;
    e->root = root ? strdup(root) : NULL;
    if ((workspace && !e->workspace) || (tenant && !e->tenant) || (root && !e->root)) {
        warm_clear_entry(e);
        return false;
    }
    snprintf(e->key, sizeof e->key, "%s", key ? key : "");
    e->spare = key == NULL;
    e->state = E_PENDING;
    e->used_ms = warm_now_ms();
    return true;
}

void warm_want(warm_pool *w, const char *key, const char *workspace, const char *tenant, const sandbox_size *size,
               const char *root)
{
    if (!w || strlen(key) >= KEY_MAX || !key[0])
        return;
    pthread_mutex_lock(&w->mu);
    entry *e = w->stopping ? NULL : find(w, key);
    if (e)
        e->used_ms = warm_now_ms();
    else if (!w->stopping && (e = warm_free_entry_locked(w)) != NULL &&
             warm_fill_entry(e, key, workspace, tenant, root) && size)
        e->size = *size;
    pthread_mutex_unlock(&w->mu);
    warm_wake(w);
}

static bool same_or_null(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

void warm_want_spare(warm_pool *w, const char *tenant, const char *root)
{
    if (!w || w->ws.spares <= 0 || !w->ws.disks.make)
        return;
    pthread_mutex_lock(&w->mu);
    int have = 0;
    int64_t now = warm_now_ms();
    for (int i = 0; i < w->n; i++) {
        entry *e = &w->e[i];
        if (e->state != E_FREE && e->state != E_DOOMED && e->spare && same_or_null(e->tenant, tenant) &&
            same_or_null(e->root, root)) {
            e->used_ms = now;
            have++;
        }
    }
    for (; have < w->ws.spares && !w->stopping; have++) {
        entry *e = warm_free_entry_locked(w);
        if (!e || !warm_fill_entry(e, NULL, NULL, tenant, root))
            break;
        e->size = w->ws.spare_size;
    }
    pthread_mutex_unlock(&w->mu);
    warm_wake(w);
}

bool warm_adopt_spare(warm_pool *w, const char *tenant, const char *root, char *id, size_t id_len, char **workspace)
{
    if (!w)
        return false;
    bool adopted = false;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < w->n && !adopted; i++) {
        entry *e = &w->e[i];
        if (!e->spare || (e->state != E_BOOTING && e->state != E_READY) || !same_or_null(e->tenant, tenant) ||
            !same_or_null(e->root, root) || strlen(e->key) >= id_len || !(*workspace = strdup(e->workspace)))
            continue;
        snprintf(id, id_len, "%s", e->key);
        e->spare = false; /* the session's from now on: its disk stays with it */
        e->used_ms = warm_now_ms();
        adopted = true;
    }
    pthread_mutex_unlock(&w->mu);
    return adopted;
}

/* The first spare entry (any state but free), or NULL; key unused. */
static entry *find_spare(warm_pool *w, const char *key)
{
    (void)key;
    for (int i = 0; i < w->n; i++)
        if (w->e[i].state != E_FREE && w->e[i].spare)
            return &w->e[i];
    return NULL;
}

/* Releases every entry next(w, key) finds, returning once they are gone: one still starting
 * or running a command is doomed and waited for (its thread, or its command, gives it back). */
static void release_found(warm_pool *w, entry *(*next)(warm_pool *, const char *), const char *key)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    entry *e;
    while ((e = next(w, key)) != NULL) {
        if (e->state == E_STARTING || e->state == E_LENT) {
            e->doomed = true;
            pthread_cond_wait(&w->changed, &w->mu);
            continue;
        }
        release_entry(w, e);
    }
    pthread_mutex_unlock(&w->mu);
}

static entry *find_waiter(warm_pool *w, const char *key)
{
    return warm_find_kind(w, key, false);
}

void warm_forget_waiters(warm_pool *w, const char *key)
{
    release_found(w, find_waiter, key);
}

void warm_drop_spares(warm_pool *w)
{
    release_found(w, find_spare, NULL);
}

/* Waits for a boot under way (the caller owns sb now); false when it failed or took too long. */
static bool wait_booted(sandbox *sb, int cancel_fd)
{
    int64_t until = warm_now_ms() + TAKE_WAIT_MS;
    sandbox_boot_hurry(sb);
    char err[512] = "";
    for (;;) {
        int rc = sandbox_boot_check(sb, err, sizeof err);
        if (rc != 0) {
            if (rc < 0)
                log_warn("%s", err);
            return rc == 1;
        }
        int64_t left = until - warm_now_ms();
        if (left <= 0)
            return false;
        struct pollfd pf[2] = {{.fd = sandbox_boot_fd(sb), .events = POLLIN},
                               {.fd = cancel_fd > 0 ? cancel_fd : -1, .events = POLLRDHUP}};
        int pr = poll(pf, 2, (int)left);
        if (pr < 0 && errno != EINTR)
            return false;
        if (pr > 0 && pf[1].revents && !(pf[1].revents & POLLNVAL))
            return false; /* the client left: the cold path notices it at once */
    }
}

sandbox *warm_take(warm_pool *w, const char *key, int cancel_fd)
{
    if (!w)
        return NULL;
    pthread_mutex_lock(&w->mu);
    entry *e;
    while ((e = find(w, key)) != NULL && e->state == E_STARTING)
        pthread_cond_wait(&w->changed, &w->mu);
    if (!e || e->state == E_DOOMED) {
        pthread_mutex_unlock(&w->mu);
        return NULL;
    }
    entry_state st = e->state;
    sandbox *sb = e->sb;
    warm_clear_entry(e);
    pthread_mutex_unlock(&w->mu);
    warm_wake(w); /* a boot slot may have freed */
    if (st == E_PENDING)
        return NULL; /* its boot had not begun: cold is faster than waiting for one */
    if (st == E_BOOTING && !wait_booted(sb, cancel_fd)) {
        sandbox_release(sb);
        return NULL;
    }
    return sb;
}

void warm_forget(warm_pool *w, const char *key)
{
    release_found(w, find_any, key);
}

void warm_abandon(warm_pool *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < w->n; i++)
        if (w->e[i].sb && w->e[i].state != E_STARTING)
            sandbox_abandon(w->e[i].sb);
    pthread_mutex_unlock(&w->mu);
}

void warm_count(warm_pool *w, warm_counts *out)
{
    memset(out, 0, sizeof *out);
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    for (int i = 0; i < w->n; i++) {
        const entry *e = &w->e[i];
        if (e->state == E_PENDING || e->state == E_STARTING || e->state == E_BOOTING)
            out->booting++;
        else if (e->state == E_READY)
            out->ready++;
        else if (e->state == E_LENT)
            out->in_use++;
        if (e->state != E_FREE && e->state != E_DOOMED && e->spare)
            out->spares++;
    }
    pthread_mutex_unlock(&w->mu);
}
