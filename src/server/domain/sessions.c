/* The session registry: a list under one mutex, reference counts, the idle reaper thread. */
#include "domain/sessions.h"

#include "fs/walk.h"
#include "sandbox/sandbox.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct registry {
    pthread_mutex_t mu;
    pthread_cond_t cond;     /* wakes the reaper for shutdown */
    session *head;
    char *root;              /* <state>/workspaces, symlink-free */
    double ttl;
    bool stopping;
    bool reaper_running;
    pthread_t reaper;
    registry_remove_hook on_remove;
    void *on_remove_ctx;
};

double epoch_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)(ts.tv_nsec / 1000) / 1e6;
}

static void session_destroy(session *s)
{
    if (fs_rmtree(s->workspace) != 0)
        fprintf(stderr, "airlockd: could not wipe workspace %s: %s\n", s->workspace, strerror(errno));
    json_decref(s->egress);
    free(s->workspace);
    free(s);
}

registry *registry_new(const char *state_dir, double ttl, char *err, size_t errlen)
{
    registry *r = calloc(1, sizeof *r);
    char *root = NULL;
    if (!r || asprintf(&root, "%s/workspaces", state_dir) < 0) {
        snprintf(err, errlen, "out of memory");
        free(r);
        return NULL;
    }
    if (fs_rmtree(root) != 0 || mkdir(root, 0700) != 0 || chmod(root, 0700) != 0) {
        snprintf(err, errlen, "cannot prepare %s: %s", root, strerror(errno));
        free(root);
        free(r);
        return NULL;
    }
    r->root = realpath(root, NULL);
    free(root);
    if (!r->root) {
        snprintf(err, errlen, "cannot resolve the workspace directory: %s", strerror(errno));
        free(r);
        return NULL;
    }
    r->ttl = ttl;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cond, NULL);
    return r;
}

/* Unlinks s from the list (caller holds the lock); returns true when the caller must
 * destroy it now (nobody else holds a reference). */
static bool unlink_locked(registry *r, session *s)
{
    if (r->on_remove)
        r->on_remove(r->on_remove_ctx, s->id);
    for (session **pp = &r->head; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    }
    s->removed = true;
    s->next = NULL;
    return --s->refs == 0;
}

/* Unlinks s; when that dropped the last reference, queues it on *doomed so it is
 * destroyed after the lock is released (destroying removes a workspace tree). */
static void retire_locked(registry *r, session *s, session **doomed)
{
    if (unlink_locked(r, s)) {
        s->next = *doomed;
        *doomed = s;
    }
}

static void *reaper_main(void *arg)
{
    registry *r = arg;
    double interval = r->ttl / 4.0;
    interval = interval < 1.0 ? 1.0 : interval > 60.0 ? 60.0 : interval;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)interval;
        until.tv_nsec += (long)((interval - (double)(time_t)interval) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!r->stopping && pthread_cond_timedwait(&r->cond, &r->mu, &until) == 0) {
        }
        if (r->stopping)
            break;
        double now = epoch_now();
        session *doomed = NULL;
        for (session *s = r->head, *nx; s; s = nx) {
            nx = s->next;
            /* a session with a request in flight (e.g. a long command) is not idle */
            if (s->refs > 1 || now - s->last_accessed_at <= r->ttl)
                continue;
            retire_locked(r, s, &doomed);
        }
        pthread_mutex_unlock(&r->mu);
        for (session *s = doomed, *nx; s; s = nx) {
            nx = s->next;
            fprintf(stderr, "airlockd: session %s expired after %.0f s idle\n", s->id, r->ttl);
            session_destroy(s);
        }
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

void registry_set_remove_hook(registry *r, registry_remove_hook hook, void *ctx)
{
    pthread_mutex_lock(&r->mu);
    r->on_remove = hook;
    r->on_remove_ctx = ctx;
    pthread_mutex_unlock(&r->mu);
}

bool registry_removed(registry *r, const session *s)
{
    pthread_mutex_lock(&r->mu);
    bool removed = s->removed;
    pthread_mutex_unlock(&r->mu);
    return removed;
}

int registry_start_reaper(registry *r)
{
    if (pthread_create(&r->reaper, NULL, reaper_main, r) != 0)
        return -1;
    r->reaper_running = true;
    return 0;
}

void registry_remove_all(registry *r)
{
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_cond_broadcast(&r->cond);
    bool join = r->reaper_running;
    r->reaper_running = false;
    pthread_mutex_unlock(&r->mu);
    if (join)
        pthread_join(r->reaper, NULL);
    pthread_mutex_lock(&r->mu);
    session *doomed = NULL;
    while (r->head) {
        session *s = r->head;
        retire_locked(r, s, &doomed);
    }
    pthread_mutex_unlock(&r->mu);
    for (session *s = doomed, *nx; s; s = nx) {
        nx = s->next;
        session_destroy(s);
    }
}

void registry_free(registry *r)
{
    if (!r)
        return;
    registry_remove_all(r);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->mu);
    rmdir(r->root);
    free(r->root);
    free(r);
}

static session *find_locked(registry *r, const char *id)
{
    for (session *s = r->head; s; s = s->next)
        if (strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

static int new_id(char out[17])
{
    unsigned char b[6];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)n;
    }
    snprintf(out, 17, "sbx_%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5]);
    return 0;
}

session_result registry_create(registry *r, size_t tenant, int max_sessions, const json_t *egress,
                               session **out, int *open_now)
{
    session *s = calloc(1, sizeof *s);
    if (!s)
        return SESSION_ERROR;
    pthread_mutex_lock(&r->mu);
    int count = 0;
    for (session *it = r->head; it; it = it->next)
        if (it->tenant == tenant)
            count++;
    if (count >= max_sessions) {
        pthread_mutex_unlock(&r->mu);
        free(s);
        *open_now = count;
        return SESSION_LIMIT;
    }
    do {
        if (new_id(s->id) != 0)
            goto fail;
    } while (find_locked(r, s->id));
    if (asprintf(&s->workspace, "%s/%s", r->root, s->id) < 0) {
        s->workspace = NULL;
        goto fail;
    }
    if (mkdir(s->workspace, 0755) != 0)
        goto fail;
    /* commands run as the sandbox user and must own their workspace */
    if (chown(s->workspace, SANDBOX_UID, SANDBOX_GID) != 0 && errno != EPERM) {
        rmdir(s->workspace);
        goto fail;
    }
    s->tenant = tenant;
    s->egress = json_deep_copy(egress);
    s->created_at = s->last_accessed_at = epoch_now();
    s->refs = 2; /* the registry's and the caller's */
    s->next = r->head;
    r->head = s;
    pthread_mutex_unlock(&r->mu);
    *out = s;
    return SESSION_OK;
fail:
    pthread_mutex_unlock(&r->mu);
    fprintf(stderr, "airlockd: cannot create a workspace: %s\n", strerror(errno));
    free(s->workspace);
    free(s);
    return SESSION_ERROR;
}

/* Whether the tenant may use s (NULL: not found). */
static session_result owner_check(const session *s, size_t tenant)
{
    return !s ? SESSION_NOT_FOUND : s->tenant != tenant ? SESSION_FORBIDDEN : SESSION_OK;
}

session_result registry_acquire(registry *r, const char *id, size_t tenant, bool touch, session **out)
{
    pthread_mutex_lock(&r->mu);
    session *s = find_locked(r, id);
    session_result rc = owner_check(s, tenant);
    if (rc == SESSION_OK) {
        s->refs++;
        if (touch)
            s->last_accessed_at = epoch_now();
        *out = s;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void registry_release(registry *r, session *s)
{
    pthread_mutex_lock(&r->mu);
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        session_destroy(s);
}

session_result registry_delete(registry *r, const char *id, size_t tenant)
{
    pthread_mutex_lock(&r->mu);
    session *s = find_locked(r, id);
    session_result rc = owner_check(s, tenant);
    bool destroy = rc == SESSION_OK && unlink_locked(r, s);
    pthread_mutex_unlock(&r->mu);
    if (destroy)
        session_destroy(s);
    return rc;
}

session_info *registry_list(registry *r, size_t tenant, size_t *n)
{
    *n = 0;
    pthread_mutex_lock(&r->mu);
    size_t count = 0;
    for (session *s = r->head; s; s = s->next)
        count += s->tenant == tenant;
    session_info *v = count ? calloc(count, sizeof *v) : NULL;
    for (session *s = r->head; v && s; s = s->next) {
        if (s->tenant != tenant)
            continue;
        session_info *e = &v[(*n)++];
        memcpy(e->id, s->id, sizeof e->id);
        e->egress = json_incref(s->egress);
        e->created_at = s->created_at;
        e->last_accessed_at = s->last_accessed_at;
        e->expires_at = s->last_accessed_at + r->ttl;
    }
    pthread_mutex_unlock(&r->mu);
    /* newest first; the list is kept in creation order reversed already, but sort (stably)
     * to be robust against equal-microsecond creations */
    for (size_t i = 1; i < *n; i++) {
        for (size_t k = i; k > 0 && v[k - 1].created_at < v[k].created_at; k--) {
            session_info tmp = v[k];
            v[k] = v[k - 1];
            v[k - 1] = tmp;
        }
    }
    return v;
}

void session_info_free(session_info *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(v[i].egress);
    free(v);
}

size_t registry_count(registry *r)
{
    size_t n = 0;
    pthread_mutex_lock(&r->mu);
    for (session *s = r->head; s; s = s->next)
        n++;
    pthread_mutex_unlock(&r->mu);
    return n;
}

size_t registry_count_tenant(registry *r, size_t tenant)
{
    size_t n = 0;
    pthread_mutex_lock(&r->mu);
    for (session *s = r->head; s; s = s->next)
        n += s->tenant == tenant;
    pthread_mutex_unlock(&r->mu);
    return n;
}
