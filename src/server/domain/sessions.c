/* The session registry: a list under one mutex, reference counts, the disks of the sessions
 * (disk/pool), their persistence (store/session_state) and the idle reaper thread. */
#include "domain/sessions.h"

#include "log/log.h"
#include "store/session_state.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Touches are saved at most this often (a restart after a kill -9 may see a session up to
 * this much less recently used than it was). Sessions coming and going are saved at once. */
#define SAVE_INTERVAL 5.0

struct registry {
    pthread_mutex_t mu;
    pthread_cond_t cond;      /* wakes the reaper for shutdown */
    pthread_cond_t turned;    /* a session's pause or resume ended */
    session *head;
    session_record *parked;   /* restored sessions whose disks could not be mounted: kept */
    size_t nparked;
    char *state_dir;
    char *state_file;         /* NULL: not persisted */
    tenants *tenants;
    disk_pool *disk;
    double ttl;
    double paused_ttl;        /* a paused session is deleted this long after its pause */
    long long quota_bytes;
    sandbox_size size;        /* new sessions' size unless they ask for another */
    bool stopping;
    bool reaper_running;
    bool shut_down;           /* nothing is saved any more */
    bool dirty;               /* a last access time changed since the last save */
    pthread_t reaper;
    pthread_mutex_t save_mu;  /* one save at a time, in order */
    bool save_failing;        /* logged once until a save works again */
    registry_remove_hook on_remove;
    void *on_remove_ctx;
    registry_destroy_hook on_destroy; /* set before serving, then only read */
    void *on_destroy_ctx;
    registry_spares spares;           /* set before serving, then only read */
    registry_pause_hook on_idle_pause; /* set before serving, then only read */
    void *on_idle_pause_ctx;
    void (*on_sweep)(void *ctx); /* after each sweep (a fleet's stored sessions); set before serving */
    void *on_sweep_ctx;
    registry_shared shared;           /* a fleet's, or all NULL */
    int id_slot;
};

double epoch_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)(ts.tv_nsec / 1000) / 1e6;
}

static void session_free(session *s)
{
    json_decref(s->egress);
    free(s->workspace);
    free(s);
}

/* The last reference is gone: the disk goes with the session (or stays, at shutdown). */
static void session_destroy(registry *r, session *s)
{
    if (s->handed_over) { /* its files are in the store, its sandbox and kernels went before */
        session_free(s);
        return;
    }
    if (!s->keep_disk && !s->moved_away && r->shared.release)
        r->shared.release(r->shared.ctx, s->id);
    if (r->on_destroy)
        r->on_destroy(r->on_destroy_ctx, s->id, s->keep_disk);
    if (s->keep_disk)
        disk_close(r->disk, s->id);
    else
        disk_destroy(r->disk, s->id);
    session_free(s);
}

static void destroy_all(registry *r, session *doomed)
{
    for (session *s = doomed, *nx; s; s = nx) {
        nx = s->next;
        session_destroy(r, s);
    }
}

/* Writes every ready session and every parked one to the state file, durably (the file and
 * its directory synced). false when it could not be written (logged): the file still holds
 * the previous list. */
static bool save(registry *r)
{
    if (!r->state_file)
        return true;
    pthread_mutex_lock(&r->save_mu);
    pthread_mutex_lock(&r->mu);
    if (r->shut_down) {
        pthread_mutex_unlock(&r->mu);
        pthread_mutex_unlock(&r->save_mu);
        return true;
    }
    size_t count = r->nparked, n = 0;
    for (session *s = r->head; s; s = s->next)
        count += s->ready;
    session_record *v = calloc(count ? count : 1, sizeof *v);
    bool ok = v != NULL;
    for (session *s = r->head; ok && s; s = s->next) {
        if (!s->ready)
            continue;
        session_record *e = &v[n++];
        memcpy(e->id, s->id, sizeof e->id);
        e->tenant = strdup(tenants_get(r->tenants, s->tenant)->name);
        e->egress = json_incref(s->egress);
        e->created_at = s->created_at;
        e->last_accessed_at = s->last_accessed_at;
        e->quota_bytes = s->quota_bytes;
        memcpy(e->template_name, s->template_name, sizeof e->template_name);
        e->memory_mb = s->size.memory_mb;
        e->cpu_percent = s->size.cpu_percent;
        e->max_processes = s->size.max_processes;
        memcpy(e->template_id, s->template_id, sizeof e->template_id);
        e->on_idle_pause = s->on_idle_pause;
        /* paused, resuming, or pausing with its disk unmounted: a restart finds it paused */
        if (s->pause.paused)
            e->pause = s->pause;
        ok = e->tenant != NULL;
    }
    for (size_t i = 0; ok && i < r->nparked; i++) {
        session_record *e = &v[n++];
        *e = r->parked[i];
        e->tenant = strdup(r->parked[i].tenant);
        e->egress = json_incref(r->parked[i].egress);
        ok = e->tenant != NULL;
    }
    r->dirty = false;
    pthread_mutex_unlock(&r->mu);
    char err[512] = "out of memory";
    if (ok)
        ok = session_state_save(r->state_file, r->state_dir, v, n, err, sizeof err) == 0;
    if (!ok) {
        if (!r->save_failing)
            log_error("sessions not saved (new sessions are refused until a save works): %s",
                      err);
        pthread_mutex_lock(&r->mu);
        r->dirty = true; /* the reaper tries again */
        pthread_mutex_unlock(&r->mu);
    }
    r->save_failing = !ok;
    session_records_free(v, n);
    pthread_mutex_unlock(&r->save_mu);
    return ok;
}

static session *find_locked(registry *r, const char *id)
{
    for (session *s = r->head; s; s = s->next)
        if (s->ready && strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

/* An id in use by any session, being created or parked. */
static bool id_taken_locked(registry *r, const char *id)
{
    for (session *s = r->head; s; s = s->next)
        if (strcmp(s->id, id) == 0)
            return true;
    for (size_t i = 0; i < r->nparked; i++)
        if (strcmp(r->parked[i].id, id) == 0)
            return true;
    return false;
}

/* For disk_cleanup, while registry_new runs alone: the sessions restored or parked. */
static bool id_live(void *ctx, const char *id)
{
    return id_taken_locked(ctx, id);
}

static bool park(registry *r, session_record *rec)
{
    session_record *nv = realloc(r->parked, (r->nparked + 1) * sizeof *nv);
    if (!nv)
        return false;
    r->parked = nv;
    r->parked[r->nparked++] = *rec;
    memset(rec, 0, sizeof *rec); /* moved */
    return true;
}

/* a 0 field of v: d's, else sandbox.h's */
static unsigned or_default(unsigned v, unsigned d, unsigned builtin)
{
    return v ? v : d ? d : builtin;
}

void session_spec_apply(session *s, const session_spec *spec, const sandbox_size *defaults, long long default_quota)
{
    const char *tpl = spec && spec->template_name && spec->template_name[0] ? spec->template_name
                                                                           : SESSION_DEFAULT_TEMPLATE;
    snprintf(s->template_name, sizeof s->template_name, "%s", tpl);
    snprintf(s->template_id, sizeof s->template_id, "%s", spec && spec->template_id ? spec->template_id : "");
    sandbox_size z = {0};
    const sandbox_size *size = spec ? &spec->size : &z, *d = defaults ? defaults : &z;
    s->size.memory_mb = or_default(size->memory_mb, d->memory_mb, SANDBOX_MEMORY_MB);
    s->size.cpu_percent = or_default(size->cpu_percent, d->cpu_percent, SANDBOX_CPU_PERCENT);
    s->size.max_processes = or_default(size->max_processes, d->max_processes, SANDBOX_MAX_PROCESSES);
    s->quota_bytes = spec && spec->quota_bytes > 0 ? spec->quota_bytes : default_quota;
    s->on_idle_pause = spec && spec->on_idle_pause;
}

/* The reference's two template names: both run on the default root; a built template (ours)
 * has spares of its own. */
static bool on_default_root(const char *template_name)
{
    return strcmp(template_name, SESSION_DEFAULT_TEMPLATE) == 0 || strcmp(template_name, "python:3.11-slim") == 0;
}

/* Whether s has the default root and size (a spare, made ahead, fits only such a one). */
static bool session_is_default(const registry *r, const session *s)
{
    session d = {0};
    session_spec_apply(&d, NULL, &r->size, r->quota_bytes);
    return (on_default_root(s->template_name) || s->template_id[0]) && s->size.memory_mb == d.size.memory_mb &&
           s->size.cpu_percent == d.size.cpu_percent && s->size.max_processes == d.size.max_processes &&
           s->quota_bytes == d.quota_bytes;
}

void session_shape_json(json_t *o, const char *template_name, const sandbox_size *size, long long quota_bytes)
{
    json_object_set_new(o, "template", json_string(template_name));
    json_object_set_new(o, "memory_mb", json_integer((json_int_t)size->memory_mb));
    /* a whole number of CPUs as an integer (2), else as a number (0.5) */
    json_object_set_new(o, "cpus", size->cpu_percent % 100 == 0 ? json_integer((json_int_t)(size->cpu_percent / 100))
                                                                : json_real(size->cpu_percent / 100.0));
    json_object_set_new(o, "disk_mb", json_integer((json_int_t)(quota_bytes >> 20)));
    json_object_set_new(o, "max_processes", json_integer((json_int_t)size->max_processes));
}

/* Brings back one persisted session (registry_new, single-threaded). */
static void restore_one(registry *r, session_record *rec, double now, int *adopted, int *mounted, int *kept,
                        int *expired)
{
    /* one of {"on_idle": "pause"} whose idle TTL ended while the server was down is paused */
    if (!rec->pause.paused && rec->on_idle_pause && now - rec->last_accessed_at > r->ttl) {
        memset(&rec->pause, 0, sizeof rec->pause);
        rec->pause.paused = true;
        rec->pause.paused_at = rec->last_accessed_at + r->ttl;
    }
    if (rec->pause.paused ? now - rec->pause.paused_at > r->paused_ttl : now - rec->last_accessed_at > r->ttl) {
        log_session(LV_INFO, rec->id, rec->tenant, "session %s expired while the server was down", rec->id);
        (*expired)++;
        if (r->shared.release)
            r->shared.release(r->shared.ctx, rec->id);
        return; /* its disk is a leftover now */
    }
    long tenant = tenants_intern(r->tenants, rec->tenant);
    session *s = tenant >= 0 ? calloc(1, sizeof *s) : NULL;
    char *ws = NULL;
    bool was_mounted = false;
    /* a paused session stays paused: its image is kept, nothing is mounted */
    disk_result dr = !s                ? DISK_HELD
                     : rec->pause.paused ? disk_keep(r->disk, rec->id)
                                       : disk_open(r->disk, rec->id, &ws, &was_mounted);
    if (dr == DISK_OK && rec->pause.paused && !(ws = disk_workspace_path(r->disk, rec->id)))
        dr = DISK_HELD;
    if (dr == DISK_OK) {
        memcpy(s->id, rec->id, sizeof s->id);
        s->tenant = (size_t)tenant;
        s->egress = json_incref(rec->egress);
        s->created_at = rec->created_at;
        s->last_accessed_at = rec->last_accessed_at;
        session_spec spec = {.template_name = rec->template_name,
                             .size = {rec->memory_mb, rec->cpu_percent, rec->max_processes}};
        session_spec_apply(s, &spec, NULL, rec->quota_bytes); /* a file from before sizes: today's */
        memcpy(s->template_id, rec->template_id, sizeof s->template_id);
        s->on_idle_pause = rec->on_idle_pause;
        s->pause = rec->pause;
        s->state = rec->pause.paused ? SESSION_PAUSED : SESSION_ACTIVE;
        s->workspace = ws;
        s->refs = 1;
        s->ready = true;
        s->next = r->head;
        r->head = s;
        if (!rec->pause.paused)
            (*(was_mounted ? adopted : mounted))++;
        return;
    }
    free(s);
    if (dr == DISK_HELD) {
        if (tenant < 0)
            log_session(LV_WARN, rec->id, rec->tenant,
                        "session %s not restored (kept for a later start): its tenant '%s' is not configured", rec->id,
                        rec->tenant);
        if (park(r, rec))
            (*kept)++;
    }
}

static int restore(registry *r, char *err, size_t errlen)
{
    session_record *v = NULL;
    size_t n = 0;
    if (r->state_file && session_state_load(r->state_file, r->state_dir, &v, &n, err, errlen) != 0)
        return -1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double now = epoch_now();
    int adopted = 0, mounted = 0, kept = 0, expired = 0;
    for (size_t i = 0; i < n; i++) {
        bool dup = id_taken_locked(r, v[i].id);
        if (dup)
            log_session(LV_WARN, v[i].id, NULL, "session %s is listed twice in %s; the first is kept", v[i].id,
                        r->state_file);
        else
            restore_one(r, &v[i], now, &adopted, &mounted, &kept, &expired);
    }
    session_records_free(v, n);
    disk_cleanup(r->disk, id_live, r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (n)
        log_info("restored %d sessions in %.0f ms (%d mounts taken over, %d images mounted again); "
                 "%d expired, %d kept for a later start",
                 adopted + mounted,
                 (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6, adopted, mounted,
                 expired, kept);
    disk_pool_start(r->disk);
    save(r);
    return 0;
}

registry *registry_new(const registry_opts *o, char *err, size_t errlen)
{
    registry *r = calloc(1, sizeof *r);
    if (!r || !(r->state_dir = strdup(o->state_dir)) || (o->state_file && !(r->state_file = strdup(o->state_file)))) {
        snprintf(err, errlen, "out of memory");
        if (r)
            free(r->state_dir);
        free(r);
        return NULL;
    }
    r->ttl = o->ttl;
    r->paused_ttl = o->paused_ttl > 0 ? o->paused_ttl : 604800;
    r->quota_bytes = o->quota_bytes;
    r->size = o->size;
    r->tenants = o->tenants;
    r->disk = o->disk;
    r->id_slot = o->id_slot;
    if (o->shared)
        r->shared = *o->shared;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->save_mu, NULL);
    pthread_cond_init(&r->cond, NULL);
    pthread_cond_init(&r->turned, NULL);
    if (restore(r, err, errlen) != 0) {
        r->shut_down = true; /* nothing of the state file's sessions is touched */
        registry_free(r);
        return NULL;
    }
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
 * destroyed after the lock is released (destroying unmounts and deletes a disk). */
static void retire_locked(registry *r, session *s, session **doomed)
{
    if (unlink_locked(r, s)) {
        s->next = *doomed;
        *doomed = s;
    }
}

static double monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sessions of {"on_idle": "pause"} one sweep pauses at most (pausing takes a little while). */
#define PAUSES_PER_SWEEP 64

static void *reaper_main(void *arg)
{
    registry *r = arg;
    struct {
        char id[17];
        size_t tenant;
    } to_pause[PAUSES_PER_SWEEP];
    double interval = r->ttl / 4.0;
    interval = interval < 1.0 ? 1.0 : interval > 60.0 ? 60.0 : interval;
    double tick = interval < SAVE_INTERVAL ? interval : SAVE_INTERVAL;
    double next_sweep = monotonic_now() + interval;
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)tick;
        until.tv_nsec += (long)((tick - (double)(time_t)tick) * 1e9);
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!r->stopping && pthread_cond_timedwait(&r->cond, &r->mu, &until) == 0) {
        }
        if (r->stopping)
            break;
        session *doomed = NULL;
        bool swept = false;
        size_t npause = 0;
        bool swept_now = monotonic_now() >= next_sweep;
        if (swept_now) {
            next_sweep = monotonic_now() + interval;
            double now = epoch_now();
            for (session *s = r->head, *nx; s; s = nx) {
                nx = s->next;
                /* a session with a request in flight (e.g. a long command) is not idle */
                if (!s->ready || s->refs > 1)
                    continue;
                if (s->state == SESSION_PAUSED && now - s->pause.paused_at > r->paused_ttl) {
                    log_session(LV_INFO, s->id, NULL, "session %s deleted after %.0f s paused", s->id, r->paused_ttl);
                } else if (s->state != SESSION_ACTIVE || now - s->last_accessed_at <= r->ttl) {
                    continue;
                } else if (s->on_idle_pause && r->on_idle_pause) {
                    if (npause < PAUSES_PER_SWEEP) { /* the rest at the next sweep */
                        memcpy(to_pause[npause].id, s->id, sizeof s->id);
                        to_pause[npause++].tenant = s->tenant;
                    }
                    continue;
                } else {
                    log_session(LV_INFO, s->id, NULL, "session %s expired after %.0f s idle", s->id, r->ttl);
                }
                retire_locked(r, s, &doomed);
                swept = true;
            }
        }
        bool dirty = r->dirty || swept;
        pthread_mutex_unlock(&r->mu);
        if (dirty)
            save(r);
        destroy_all(r, doomed);
        for (size_t i = 0; i < npause; i++) {
            log_session(LV_INFO, to_pause[i].id, NULL, "session %s pauses after %.0f s idle", to_pause[i].id, r->ttl);
            r->on_idle_pause(r->on_idle_pause_ctx, to_pause[i].id, to_pause[i].tenant);
        }
        if (swept_now && r->on_sweep)
            r->on_sweep(r->on_sweep_ctx);
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

void registry_set_destroy_hook(registry *r, registry_destroy_hook hook, void *ctx)
{
    pthread_mutex_lock(&r->mu);
    r->on_destroy = hook;
    r->on_destroy_ctx = ctx;
    pthread_mutex_unlock(&r->mu);
}

void registry_set_spares(registry *r, const registry_spares *sp)
{
    pthread_mutex_lock(&r->mu);
    r->spares = *sp;
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

void registry_shutdown(registry *r)
{
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_cond_broadcast(&r->cond);
    bool join = r->reaper_running;
    r->reaper_running = false;
    pthread_mutex_unlock(&r->mu);
    if (join)
        pthread_join(r->reaper, NULL);
    save(r); /* the latest access times: the idle time goes on counting from them */
    pthread_mutex_lock(&r->mu);
    r->shut_down = true;
    bool keep = r->state_file != NULL;
    session *doomed = NULL;
    for (session *s = r->head, *nx; s; s = nx) {
        nx = s->next;
        if (!s->ready)
            continue; /* its creator finishes it */
        s->keep_disk = keep;
        retire_locked(r, s, &doomed);
    }
    pthread_mutex_unlock(&r->mu);
    destroy_all(r, doomed);
}

void registry_free(registry *r)
{
    if (!r)
        return;
    registry_shutdown(r);
    for (session *s = r->head, *nx; s; s = nx) { /* a creation that never finished */
        nx = s->next;
        session_free(s);
    }
    session_records_free(r->parked, r->nparked);
    pthread_cond_destroy(&r->cond);
    pthread_cond_destroy(&r->turned);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->save_mu);
    free(r->state_dir);
    free(r->state_file);
    free(r);
}

/* A fresh random id; a fleet node's ids open with its slot (the router's key). */
static int new_id(char out[17], int slot)
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
    session_id_format(out, b, slot);
    return 0;
}

int registry_make_spare_disk(registry *r, char *id, size_t id_len, char **workspace)
{
    char fresh[17];
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    do
        rc = r->shut_down ? -1 : new_id(fresh, r->id_slot);
    while (rc == 0 && id_taken_locked(r, fresh));
    pthread_mutex_unlock(&r->mu);
    if (rc != 0 || id_len < sizeof fresh)
        return -1;
    memcpy(id, fresh, sizeof fresh);
    return disk_create(r->disk, id, r->quota_bytes, workspace) == DISK_OK ? 0 : -1;
}

void registry_drop_spare_disk(registry *r, const char *id)
{
    disk_destroy(r->disk, id);
}

/* The disk of s, being created (invisible): a spare's, whose id s takes, when it has no
 * egress (a spare has no network); else a new one, after dropping the spares when they hold
 * the room it needs. */
static disk_result take_disk(registry *r, session *s, const session_spec *spec, char **ws)
{
    char id[sizeof s->id];
    if (spec && spec->fill) { /* a copy (ours: from a snapshot): never a spare's empty disk */
        char why[256] = "";
        disk_result dr = disk_receive(r->disk, s->id, spec->fill_image_bytes, spec->fill, spec->fill_ctx, ws, why,
                                      sizeof why);
        if (dr == DISK_FULL && r->spares.drop_all) {
            r->spares.drop_all(r->spares.ctx);
            dr = disk_receive(r->disk, s->id, spec->fill_image_bytes, spec->fill, spec->fill_ctx, ws, why, sizeof why);
        }
        if (dr == DISK_ERROR)
            log_session(LV_ERROR, s->id, NULL, "cannot make the workspace disk of %s as a copy: %s", s->id, why);
        return dr;
    }
    /* a spare is made with the default size, on the default root or a built template's (ours) */
    if (r->spares.adopt && json_array_size(s->egress) == 0 && session_is_default(r, s) &&
        r->spares.adopt(r->spares.ctx, s->tenant, s->template_id, id, sizeof id, ws)) {
        pthread_mutex_lock(&r->mu);
        memcpy(s->id, id, sizeof id);
        pthread_mutex_unlock(&r->mu);
        return DISK_OK;
    }
    disk_result dr = disk_create(r->disk, s->id, s->quota_bytes, ws);
    if (dr == DISK_FULL && r->spares.drop_all) {
        r->spares.drop_all(r->spares.ctx);
        dr = disk_create(r->disk, s->id, s->quota_bytes, ws);
    }
    return dr;
}

int registry_template_users(registry *r, const char *template_id)
{
    int n = 0;
    pthread_mutex_lock(&r->mu);
    for (session *it = r->head; it; it = it->next)
        n += strcmp(it->template_id, template_id) == 0;
    for (size_t i = 0; i < r->nparked; i++)
        n += strcmp(r->parked[i].template_id, template_id) == 0;
    pthread_mutex_unlock(&r->mu);
    return n;
}

session_result registry_create(registry *r, size_t tenant, int max_sessions, const json_t *egress,
                               const session_spec *spec, session **out, int *open_now)
{
    session *s = calloc(1, sizeof *s);
    if (!s || !(s->egress = json_deep_copy(egress))) {
        free(s);
        return SESSION_ERROR;
    }
    s->tenant = tenant;
    session_spec_apply(s, spec, &r->size, r->quota_bytes);
    /* Reserve the place (invisible until ready), make the disk without the lock (tens of ms),
     * then publish. */
    pthread_mutex_lock(&r->mu);
    int count = 0;
    for (session *it = r->head; it; it = it->next)
        if (it->tenant == tenant)
            count++;
    if (count >= max_sessions || r->shut_down) {
        pthread_mutex_unlock(&r->mu);
        session_free(s);
        *open_now = count;
        return r->shut_down ? SESSION_ERROR : SESSION_LIMIT;
    }
    do {
        if (new_id(s->id, r->id_slot) != 0) {
            pthread_mutex_unlock(&r->mu);
            session_free(s);
            return SESSION_ERROR;
        }
    } while (id_taken_locked(r, s->id));
    s->refs = 2; /* the registry's and the caller's; the reaper skips it meanwhile */
    s->next = r->head;
    r->head = s;
    pthread_mutex_unlock(&r->mu);

    /* a fleet's count decides (exact across nodes) before any disk is made */
    char reserved[sizeof s->id];
    memcpy(reserved, s->id, sizeof reserved);
    int shared = r->shared.reserve ? r->shared.reserve(r->shared.ctx, reserved, tenants_get(r->tenants, tenant)->name,
                                                       max_sessions, s->egress, s->quota_bytes, open_now)
                                   : 0;
    char *ws = NULL;
    disk_result dr = shared == 0 ? take_disk(r, s, spec, &ws) : DISK_ERROR;
    pthread_mutex_lock(&r->mu);
    if (dr != DISK_OK) {
        unlink_locked(r, s);
        pthread_mutex_unlock(&r->mu);
        session_free(s);
        if (shared != 0)
            return shared > 0 ? SESSION_LIMIT : SESSION_UNAVAILABLE;
        if (r->shared.release)
            r->shared.release(r->shared.ctx, reserved);
        return dr == DISK_FULL ? SESSION_CAPACITY : SESSION_ERROR;
    }
    s->workspace = ws;
    s->created_at = s->last_accessed_at = epoch_now();
    s->ready = true;
    pthread_mutex_unlock(&r->mu);
    if (r->shared.ready)
        r->shared.ready(r->shared.ctx, reserved, s->id, s->created_at, s);
    if (!save(r)) {
        /* fail closed: a session a restart would not bring back is never handed out; its
         * disk goes with it */
        pthread_mutex_lock(&r->mu);
        unlink_locked(r, s);          /* the registry's reference */
        bool last = --s->refs == 0;   /* and the caller's */
        pthread_mutex_unlock(&r->mu);
        if (last)
            session_destroy(r, s);
        return SESSION_STORAGE;
    }
    *out = s;
    return SESSION_OK;
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
    if (rc == SESSION_OK && s->moving)
        rc = SESSION_MOVING;
    if (rc == SESSION_OK) {
        s->refs++;
        if (touch) {
            s->last_accessed_at = epoch_now();
            s->touched_in_flight = true;
            r->dirty = true;
        }
        *out = s;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void registry_release(registry *r, session *s)
{
    pthread_mutex_lock(&r->mu);
    if (s->refs == 2 && !s->removed && s->touched_in_flight) { /* the last request ends */
        s->last_accessed_at = epoch_now();
        s->touched_in_flight = false;
        r->dirty = true;
    }
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        session_destroy(r, s);
}

session_result registry_delete(registry *r, const char *id, size_t tenant)
{
    pthread_mutex_lock(&r->mu);
    session *s = find_locked(r, id);
    session_result rc = owner_check(s, tenant);
    if (rc == SESSION_OK && s->moving)
        rc = SESSION_MOVING;
    bool destroy = rc == SESSION_OK && unlink_locked(r, s);
    pthread_mutex_unlock(&r->mu);
    if (rc == SESSION_OK)
        save(r); /* gone from the state file before its disk goes */
    if (destroy)
        session_destroy(r, s);
    return rc;
}

bool registry_move_out_begin(registry *r, const char *id, session **out)
{
    pthread_mutex_lock(&r->mu);
    session *s = find_locked(r, id);
    /* only the registry's: idle; a paused session stays on its node (not moved) */
    bool ok = s && s->ready && !s->moving && s->refs == 1 && s->state == SESSION_ACTIVE;
    if (ok) {
        s->moving = true;
        s->refs++;
        *out = s;
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

void registry_move_out_end(registry *r, session *s, bool moved)
{
    pthread_mutex_lock(&r->mu);
    bool destroy = false;
    if (moved && !s->removed) {
        s->moved_away = true;
        destroy = unlink_locked(r, s);
    }
    s->moving = false;
    destroy = --s->refs == 0 || destroy;
    pthread_mutex_unlock(&r->mu);
    if (moved)
        save(r);
    if (destroy)
        session_destroy(r, s);
}

char *registry_moving_image(registry *r, const char *id)
{
    pthread_mutex_lock(&r->mu);
    session *s = find_locked(r, id);
    char *img = s && s->moving ? disk_image_path(r->disk, s->id) : NULL;
    pthread_mutex_unlock(&r->mu);
    return img;
}

int registry_move_freeze(registry *r, session *s, bool freeze)
{
    return freeze ? disk_freeze(r->disk, s->id) : disk_thaw(r->disk, s->id);
}

session_result registry_move_in(registry *r, const char *id, size_t tenant, const json_t *egress,
                                const session_spec *spec, long long image_bytes, disk_fill_fn fill, void *ctx,
                                double created_at, double last_used, session **out, char *why, size_t whylen)
{
    snprintf(why, whylen, "out of memory");
    session *s = calloc(1, sizeof *s);
    if (!s || strlen(id) != sizeof s->id - 1 || !(s->egress = json_deep_copy(egress))) {
        free(s);
        return SESSION_ERROR;
    }
    memcpy(s->id, id, sizeof s->id);
    s->tenant = tenant;
    session_spec_apply(s, spec, &r->size, r->quota_bytes);
    s->moved_away = true; /* until it is in: undoing it never releases the fleet's row */
    pthread_mutex_lock(&r->mu);
    if (id_taken_locked(r, id) || r->shut_down) {
        pthread_mutex_unlock(&r->mu);
        session_free(s);
        snprintf(why, whylen, "this node already holds a session %s or is stopping", id);
        return SESSION_ERROR;
    }
    s->refs = 2;
    s->next = r->head;
    r->head = s;
    pthread_mutex_unlock(&r->mu);
    char *ws = NULL;
    disk_result dr = disk_receive(r->disk, s->id, image_bytes, fill, ctx, &ws, why, whylen);
    pthread_mutex_lock(&r->mu);
    if (dr != DISK_OK) {
        unlink_locked(r, s);
        pthread_mutex_unlock(&r->mu);
        session_free(s);
        return dr == DISK_FULL ? SESSION_CAPACITY : SESSION_ERROR;
    }
    s->workspace = ws;
    s->created_at = created_at;
    s->last_accessed_at = last_used;
    pthread_mutex_unlock(&r->mu);
    *out = s;
    return SESSION_OK;
}

bool registry_move_in_end(registry *r, session *s, bool ok)
{
    pthread_mutex_lock(&r->mu);
    if (ok) {
        s->ready = true;
        s->moved_away = false;
    }
    pthread_mutex_unlock(&r->mu);
    if (ok && !save(r))
        ok = false;
    pthread_mutex_lock(&r->mu);
    if (!ok) {
        s->moved_away = true;
        unlink_locked(r, s);
    }
    bool last = --s->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (last)
        session_destroy(r, s);
    return ok;
}

bool registry_has(registry *r, const char *id)
{
    pthread_mutex_lock(&r->mu);
    bool found = id_taken_locked(r, id); /* being created or parked counts */
    pthread_mutex_unlock(&r->mu);
    return found;
}

bool registry_forget(registry *r, const char *id)
{
    pthread_mutex_lock(&r->mu);
    session *s = find_locked(r, id);
    bool destroy = s && unlink_locked(r, s);
    pthread_mutex_unlock(&r->mu);
    if (s)
        save(r);
    if (destroy)
        session_destroy(r, s);
    return s != NULL;
}

/* What a session's listing and GET show of s (r->mu held): e is zeroed beforehand. */
static void info_of(const registry *r, const session *s, session_info *e)
{
    memcpy(e->id, s->id, sizeof e->id);
    e->egress = json_incref(s->egress);
    e->created_at = s->created_at;
    e->last_accessed_at = s->last_accessed_at;
    e->paused = s->state == SESSION_PAUSED || s->state == SESSION_PAUSING;
    e->paused_at = s->pause.paused_at;
    e->on_idle_pause = s->on_idle_pause;
    /* a paused session is deleted paused_ttl after its pause */
    e->expires_at = s->state == SESSION_PAUSED ? s->pause.paused_at + r->paused_ttl : s->last_accessed_at + r->ttl;
    e->quota_bytes = s->quota_bytes;
    memcpy(e->template_name, s->template_name, sizeof e->template_name);
    e->size = s->size;
}

session_info *registry_list(registry *r, size_t tenant, size_t *n)
{
    *n = 0;
    pthread_mutex_lock(&r->mu);
    size_t count = 0;
    for (session *s = r->head; s; s = s->next)
        count += s->ready && s->tenant == tenant;
    session_info *v = count ? calloc(count, sizeof *v) : NULL;
    for (session *s = r->head; v && s; s = s->next) {
        if (!s->ready || s->tenant != tenant)
            continue;
        info_of(r, s, &v[(*n)++]);
    }
    pthread_mutex_unlock(&r->mu);
    /* newest first (a stable insertion sort: creations in the same microsecond keep their
     * order) */
    for (size_t i = 1; i < *n; i++) {
        for (size_t k = i; k > 0 && v[k - 1].created_at < v[k].created_at; k--) {
            session_info tmp = v[k];
            v[k] = v[k - 1];
            v[k - 1] = tmp;
        }
    }
    return v;
}

session_result registry_info(registry *r, const char *id, size_t tenant, session_info *out)
{
    pthread_mutex_lock(&r->mu);
    session *s = find_locked(r, id);
    session_result rc = owner_check(s, tenant);
    if (rc == SESSION_OK && s->moving)
        rc = SESSION_MOVING;
    if (rc == SESSION_OK) {
        memset(out, 0, sizeof *out);
        info_of(r, s, out);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

void session_info_free(session_info *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(v[i].egress);
    free(v);
}

/* Copies the id of every ready session into *ids and one value of each (put writes value n of
 * the value_size-byte array *values) under one hold of the lock; the count copied. */
static size_t ready_sessions(registry *r, char (**ids)[17], void **values, size_t value_size,
                             void (*put)(void *values, size_t n, const session *s))
{
    pthread_mutex_lock(&r->mu);
    size_t n = 0, count = 0;
    for (session *s = r->head; s; s = s->next)
        count += s->ready;
    *ids = calloc(count ? count : 1, sizeof **ids);
    *values = calloc(count ? count : 1, value_size);
    for (session *s = r->head; *ids && *values && s; s = s->next) {
        if (!s->ready)
            continue;
        memcpy((*ids)[n], s->id, sizeof s->id);
        put(*values, n++, s);
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void put_last_accessed(void *values, size_t n, const session *s)
{
    ((double *)values)[n] = s->last_accessed_at;
}

static void put_tenant(void *values, size_t n, const session *s)
{
    ((size_t *)values)[n] = s->tenant;
}

size_t registry_times(registry *r, char (**ids)[17], double **times)
{
    void *values = NULL;
    size_t n = ready_sessions(r, ids, &values, sizeof **times, put_last_accessed);
    *times = values;
    return n;
}

size_t registry_owners(registry *r, char (**ids)[17], size_t **owners)
{
    void *values = NULL;
    size_t n = ready_sessions(r, ids, &values, sizeof **owners, put_tenant);
    *owners = values;
    return n;
}

size_t registry_count(registry *r)
{
    size_t n = 0;
    pthread_mutex_lock(&r->mu);
    for (session *s = r->head; s; s = s->next)
        n += s->ready;
    pthread_mutex_unlock(&r->mu);
    return n;
}

size_t registry_count_paused(registry *r)
{
    size_t n = 0;
    pthread_mutex_lock(&r->mu);
    for (session *s = r->head; s; s = s->next)
        n += s->ready && (s->state == SESSION_PAUSED || s->state == SESSION_PAUSING);
    pthread_mutex_unlock(&r->mu);
    return n;
}

size_t registry_count_tenant(registry *r, size_t tenant)
{
    size_t n = 0;
    pthread_mutex_lock(&r->mu);
    for (session *s = r->head; s; s = s->next)
        n += s->ready && s->tenant == tenant;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* ---- pause and resume ---- */

/* Waits while s is pausing or resuming (r->mu held). */
static void wait_turn_locked(registry *r, const session *s)
{
    while (s->state == SESSION_PAUSING || s->state == SESSION_RESUMING)
        pthread_cond_wait(&r->turned, &r->mu);
}

session_result registry_pause_begin(registry *r, session *s, bool only_if_idle, bool *already)
{
    *already = false;
    pthread_mutex_lock(&r->mu);
    wait_turn_locked(r, s);
    session_result rc = SESSION_OK;
    if (s->removed || r->shut_down)
        rc = SESSION_NOT_FOUND;
    else if (s->state == SESSION_PAUSED)
        *already = true;
    else if (s->refs > 2 || s->moving) /* the registry's and the caller's: any other is a request using it */
        rc = SESSION_BUSY;
    else if (only_if_idle && epoch_now() - s->last_accessed_at <= r->ttl)
        rc = SESSION_BUSY; /* used since the reaper looked */
    else
        s->state = SESSION_PAUSING;
    pthread_mutex_unlock(&r->mu);
    return rc;
}

/* Ends a turn of s at state (r->mu held). */
static void turn_end_locked(registry *r, session *s, session_state state)
{
    s->state = state;
    pthread_cond_broadcast(&r->turned);
}

session_result registry_pause_end(registry *r, session *s, const session_pause_state *state)
{
    if (!state || disk_pause(r->disk, s->id) != 0) {
        pthread_mutex_lock(&r->mu);
        turn_end_locked(r, s, SESSION_ACTIVE);
        pthread_mutex_unlock(&r->mu);
        return SESSION_ERROR;
    }
    pthread_mutex_lock(&r->mu);
    s->pause = *state;
    s->pause.paused = true;
    s->pause.paused_at = epoch_now();
    pthread_mutex_unlock(&r->mu);
    if (save(r)) {
        pthread_mutex_lock(&r->mu);
        double at = s->pause.paused_at;
        turn_end_locked(r, s, SESSION_PAUSED);
        pthread_mutex_unlock(&r->mu);
        if (r->shared.paused)
            r->shared.paused(r->shared.ctx, s->id, at);
        return SESSION_OK;
    }
    /* not saved: a restart would mount it as active, so it stays active now */
    char *ws = NULL;
    disk_result dr = disk_resume(r->disk, s->id, &ws);
    free(ws); /* the same path as s->workspace */
    pthread_mutex_lock(&r->mu);
    memset(&s->pause, 0, sizeof s->pause);
    turn_end_locked(r, s, dr == DISK_OK ? SESSION_ACTIVE : SESSION_PAUSED);
    pthread_mutex_unlock(&r->mu);
    return SESSION_STORAGE;
}

session_result registry_resume(registry *r, session *s, bool *resumed, session_pause_state *was)
{
    *resumed = false;
    if (was)
        memset(was, 0, sizeof *was);
    pthread_mutex_lock(&r->mu);
    wait_turn_locked(r, s);
    if (s->removed) {
        pthread_mutex_unlock(&r->mu);
        return SESSION_NOT_FOUND;
    }
    if (s->state != SESSION_PAUSED) {
        pthread_mutex_unlock(&r->mu);
        return SESSION_OK;
    }
    s->state = SESSION_RESUMING;
    if (was)
        *was = s->pause; /* its memory image, if any (read once the pause under way ended) */
    pthread_mutex_unlock(&r->mu);
    char *ws = NULL;
    disk_result dr = disk_resume(r->disk, s->id, &ws);
    free(ws); /* the same path as s->workspace */
    pthread_mutex_lock(&r->mu);
    if (dr == DISK_OK) {
        memset(&s->pause, 0, sizeof s->pause);
        s->last_accessed_at = epoch_now(); /* resuming resets its idle clock */
    } else {
        turn_end_locked(r, s, SESSION_PAUSED);
    }
    pthread_mutex_unlock(&r->mu);
    if (dr != DISK_OK)
        return SESSION_ERROR;
    *resumed = true; /* the turn stays the caller's: registry_resume_end */
    return SESSION_OK;
}

session_result registry_resume_end(registry *r, session *s, const session_pause_state *again)
{
    if (again)
        return registry_pause_end(r, s, again);
    pthread_mutex_lock(&r->mu);
    turn_end_locked(r, s, SESSION_ACTIVE);
    pthread_mutex_unlock(&r->mu);
    /* not saved: a restart finds it paused, its files in its image, and resumes it then */
    save(r);
    if (r->shared.paused)
        r->shared.paused(r->shared.ctx, s->id, 0);
    return SESSION_OK;
}

bool registry_tenant_of(registry *r, const char *id, size_t *tenant)
{
    pthread_mutex_lock(&r->mu);
    const session *s = find_locked(r, id);
    if (s)
        *tenant = s->tenant;
    pthread_mutex_unlock(&r->mu);
    return s != NULL;
}

disk_pool *registry_disk(registry *r)
{
    return r->disk;
}

bool registry_hand_over(registry *r, session *s, const char *dst, bool (*recorded)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&r->mu);
    wait_turn_locked(r, s);
    bool ok = !s->removed && s->state == SESSION_PAUSED && !s->moving;
    if (ok)
        s->state = SESSION_PAUSING; /* a resume waits for this turn, then finds it gone */
    pthread_mutex_unlock(&r->mu);
    if (!ok)
        return false;
    /* before any node can take it (this one included): nothing of it held here after that */
    if (r->on_destroy)
        r->on_destroy(r->on_destroy_ctx, s->id, true);
    ok = disk_hand_over(r->disk, s->id, dst) == 0;
    if (ok && !recorded(ctx)) { /* not recorded where it is: it comes back and stays here */
        ok = false;
        if (disk_take_over(r->disk, s->id, dst) != 0 || disk_keep(r->disk, s->id) != DISK_OK)
            log_session(LV_ERROR, s->id, NULL, "paused session %s: its image stays in %s", s->id, dst);
    }
    pthread_mutex_lock(&r->mu);
    bool destroy = false;
    if (ok) {
        s->moved_away = true; /* its fleet row stays: the store holds it now */
        s->handed_over = true;
        destroy = unlink_locked(r, s);
    }
    turn_end_locked(r, s, SESSION_PAUSED);
    pthread_mutex_unlock(&r->mu);
    if (ok)
        save(r);
    if (destroy)
        session_destroy(r, s);
    return ok;
}

session_result registry_adopt_paused(registry *r, session_record *rec, const char *src)
{
    if (!rec->pause.paused || registry_has(r, rec->id) || disk_take_over(r->disk, rec->id, src) != 0)
        return SESSION_ERROR;
    int adopted = 0, mounted = 0, kept = 0, expired = 0;
    pthread_mutex_lock(&r->mu);
    restore_one(r, rec, epoch_now(), &adopted, &mounted, &kept, &expired);
    bool held = find_locked(r, rec->id) != NULL;
    pthread_mutex_unlock(&r->mu);
    if (held)
        save(r);
    char *img = expired ? disk_image_path(r->disk, rec->id) : NULL;
    if (img && unlink(img) != 0) /* its paused TTL had ended: nothing of it is kept */
        log_warn("cannot remove %s: %s", img, strerror(errno));
    free(img);
    return held ? SESSION_OK : expired ? SESSION_NOT_FOUND : SESSION_ERROR;
}

bool registry_latest_memory_pause(registry *r, size_t tenant, char *dir, size_t len)
{
    double latest = -1;
    pthread_mutex_lock(&r->mu);
    for (const session *s = r->head; s; s = s->next)
        if (s->ready && s->tenant == tenant && s->state == SESSION_PAUSED && s->pause.image_dir[0] &&
            !s->pause.image_moved && s->pause.paused_at > latest && strlen(s->pause.image_dir) < len) {
            latest = s->pause.paused_at;
            memcpy(dir, s->pause.image_dir, strlen(s->pause.image_dir) + 1);
        }
    pthread_mutex_unlock(&r->mu);
    return latest >= 0;
}

bool registry_paused(registry *r, const char *id)
{
    pthread_mutex_lock(&r->mu);
    const session *s = find_locked(r, id);
    bool paused = s && s->state != SESSION_ACTIVE;
    pthread_mutex_unlock(&r->mu);
    return paused;
}

session_state registry_state(registry *r, const session *s, session_pause_state *pause)
{
    pthread_mutex_lock(&r->mu);
    session_state st = s->state;
    if (pause)
        *pause = s->pause;
    pthread_mutex_unlock(&r->mu);
    return st;
}

void registry_set_sweep_hook(registry *r, void (*hook)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&r->mu);
    r->on_sweep = hook;
    r->on_sweep_ctx = ctx;
    pthread_mutex_unlock(&r->mu);
}

void registry_set_pause_hook(registry *r, registry_pause_hook hook, void *ctx)
{
    pthread_mutex_lock(&r->mu);
    r->on_idle_pause = hook;
    r->on_idle_pause_ctx = ctx;
    pthread_mutex_unlock(&r->mu);
}
