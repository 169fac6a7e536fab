/* Sessions' long-lived sandboxes: a fixed table of entries, one thread that boots, watches and
 * releases them, and the command path that borrows a session's sandbox (see session_boxes.h). */
#include "domain/session_boxes.h"

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

#define KEY_MAX 40
/* How long a command waits for its session's sandbox to boot before it runs in one of its own. */
#define TAKE_WAIT_MS 20000
/* A boot that has not finished by then is given up. */
#define BOOT_GIVE_UP_MS 60000
/* The thread looks around at least this often (idle releases). */
#define TICK_MS 1000
/* A waiting command looks at its client this often. */
#define WAIT_SLICE_MS 50

typedef enum {
    B_FREE,
    B_PENDING,  /* wanted, waiting for a boot slot */
    B_STARTING, /* the thread is starting it (sandbox_prepare, outside the lock) */
    B_BOOTING,  /* runsc started, the agent has not said "R" yet */
    B_READY,    /* booted, frozen, waiting for a command */
    B_BUSY,     /* a command runs in it */
    B_DOOMED,   /* evicted, died or forgotten: the thread releases it */
} box_state;

typedef struct {
    box_state state;
    char key[KEY_MAX];
    char *workspace;
    char *tenant;
    sandbox *sb;
    int64_t used_ms;    /* wanted, or last command ended: for the LRU and the idle release */
    int64_t started_ms; /* its boot began */
    bool forgotten;     /* the session ended while it was starting or busy */
    bool reboot;        /* doomed because it died: boot the session a new one once released */
} box;

struct session_boxes {
    sandbox_backend *b;
    session_boxes_settings set;
    pthread_mutex_t mu;
    pthread_cond_t changed;
    box *e;
    int n;
    int wake[2];
    bool stopping;
    pthread_t thread;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void wake(session_boxes *w)
{
    ssize_t r = write(w->wake[1], "w", 1);
    (void)r; /* a full pipe already wakes the thread */
}

static void clear_box(box *e)
{
    free(e->workspace);
    free(e->tenant);
    memset(e, 0, sizeof *e);
    e->state = B_FREE;
}

static box *find(session_boxes *w, const char *key)
{
    for (int i = 0; i < w->n; i++)
        if (w->e[i].state != B_FREE && strcmp(w->e[i].key, key) == 0)
            return &w->e[i];
    return NULL;
}

/* A new entry for key (PENDING), evicting the longest idle READY one when the table is full;
 * NULL when nothing can be evicted or out of memory. */
static box *add(session_boxes *w, const char *key, const char *workspace, const char *tenant)
{
    box *free_e = NULL, *lru = NULL;
    for (int i = 0; i < w->n && !free_e; i++) {
        box *e = &w->e[i];
        if (e->state == B_FREE)
            free_e = e;
        else if (e->state == B_READY && (!lru || e->used_ms < lru->used_ms))
            lru = e;
    }
    if (!free_e) {
        if (lru)
            lru->state = B_DOOMED; /* the thread releases it; this want comes back later */
        wake(w);
        return NULL;
    }
    if (strlen(key) >= KEY_MAX)
        return NULL;
    free_e->workspace = strdup(workspace);
    free_e->tenant = tenant ? strdup(tenant) : NULL;
    if (!free_e->workspace || (tenant && !free_e->tenant)) {
        clear_box(free_e);
        return NULL;
    }
    snprintf(free_e->key, sizeof free_e->key, "%s", key);
    free_e->state = B_PENDING;
    free_e->used_ms = now_ms();
    wake(w);
    return free_e;
}

/* Takes e's sandbox out of the table and releases it with the lock dropped; a sandbox that
 * died is replaced by a new boot for its session. */
static void release_box(session_boxes *w, box *e)
{
    sandbox *sb = e->sb;
    bool reboot = e->reboot && !e->forgotten && !w->stopping;
    char key[KEY_MAX];
    char *workspace = NULL, *tenant = NULL;
    if (reboot) {
        snprintf(key, sizeof key, "%s", e->key);
        workspace = e->workspace;
        tenant = e->tenant;
        e->workspace = e->tenant = NULL;
    }
    clear_box(e);
    pthread_mutex_unlock(&w->mu);
    sandbox_release(sb);
    pthread_mutex_lock(&w->mu);
    if (reboot && !find(w, key))
        (void)add(w, key, workspace, tenant);
    free(workspace);
    free(tenant);
    pthread_cond_broadcast(&w->changed);
}

/* Starts pending boots while fewer than max_booting are under way. */
static void start_boots(session_boxes *w)
{
    int booting = 0;
    for (int i = 0; i < w->n; i++)
        booting += w->e[i].state == B_STARTING || w->e[i].state == B_BOOTING;
    for (int i = 0; i < w->n && booting < w->set.max_booting && !w->stopping; i++) {
        box *e = &w->e[i];
        if (e->state != B_PENDING)
            continue;
        e->state = B_STARTING;
        e->started_ms = now_ms();
        booting++;
        char name[KEY_MAX + 4];
        snprintf(name, sizeof name, "%s-s", e->key);
        sandbox_opts o = {.workspace_dir = e->workspace, .name = name, .tenant = e->tenant, .cancel_fd = -1,
                          .boot_ahead = true, .agent = true};
        char err[512] = "";
        pthread_mutex_unlock(&w->mu);
        sandbox *sb = sandbox_prepare(w->b, &o, err, sizeof err);
        pthread_mutex_lock(&w->mu);
        e->sb = sb;
        if (!sb) {
            fprintf(stderr, "airlockd: cannot boot the sandbox of session %s: %s\n", e->key, err);
            clear_box(e);
        } else if (e->forgotten || w->stopping) {
            release_box(w, e);
        } else {
            e->state = B_BOOTING;
        }
        pthread_cond_broadcast(&w->changed);
    }
}

/* Boots that finished (or gave up), doomed sandboxes, idle ones. */
static void look_around(session_boxes *w)
{
    int64_t now = now_ms();
    for (int i = 0; i < w->n; i++) {
        box *e = &w->e[i];
        if (e->state == B_BOOTING) {
            char err[512] = "";
            int rc = sandbox_boot_check(e->sb, err, sizeof err);
            if (rc == 1) {
                e->state = B_READY;
                e->used_ms = now;
                pthread_cond_broadcast(&w->changed);
            } else if (rc < 0 || now - e->started_ms > BOOT_GIVE_UP_MS) {
                fprintf(stderr, "airlockd: the sandbox of session %s did not boot: %s\n", e->key,
                        rc < 0 ? err : "boot too slow");
                release_box(w, e);
            }
        } else if (e->state == B_DOOMED ||
                   (e->state == B_READY && now - e->used_ms > (int64_t)w->set.idle_seconds * 1000)) {
            release_box(w, e);
        }
    }
}

static void *boxes_main(void *arg)
{
    session_boxes *w = arg;
    struct pollfd *pf = calloc((size_t)w->n + 1, sizeof *pf);
    pthread_mutex_lock(&w->mu);
    while (!w->stopping) {
        start_boots(w);
        look_around(w);
        if (w->stopping)
            break;
        nfds_t n = 0;
        if (pf) {
            pf[n++] = (struct pollfd){.fd = w->wake[0], .events = POLLIN};
            for (int i = 0; i < w->n; i++)
                if (w->e[i].state == B_BOOTING && sandbox_boot_fd(w->e[i].sb) >= 0)
                    pf[n++] = (struct pollfd){.fd = sandbox_boot_fd(w->e[i].sb), .events = POLLIN};
        }
        pthread_mutex_unlock(&w->mu);
        if (pf)
            (void)poll(pf, n, TICK_MS);
        char drain[64];
        while (read(w->wake[0], drain, sizeof drain) > 0) {
        }
        pthread_mutex_lock(&w->mu);
    }
    /* stopping: release everything not in a command (session_boxes_free waits for none) */
    for (int i = 0; i < w->n; i++)
        if (w->e[i].state != B_FREE && w->e[i].state != B_BUSY && w->e[i].state != B_STARTING)
            release_box(w, &w->e[i]);
    pthread_mutex_unlock(&w->mu);
    free(pf);
    return NULL;
}

session_boxes *session_boxes_new(sandbox_backend *b, const session_boxes_settings *set, char *errbuf,
                                 size_t errlen)
{
    if (errlen)
        errbuf[0] = '\0';
    if (set->max <= 0 || !sandbox_can_host_session(b))
        return NULL;
    session_boxes *w = calloc(1, sizeof *w);
    if (!w || !(w->e = calloc((size_t)set->max, sizeof *w->e))) {
        free(w);
        snprintf(errbuf, errlen, "out of memory");
        return NULL;
    }
    w->b = b;
    w->set = *set;
    if (w->set.max_booting < 1)
        w->set.max_booting = 1;
    w->n = set->max;
    if (pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        snprintf(errbuf, errlen, "cannot create a pipe: %s", strerror(errno));
        free(w->e);
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->changed, NULL);
    int rc = pthread_create(&w->thread, NULL, boxes_main, w);
    if (rc != 0) {
        snprintf(errbuf, errlen, "cannot start the session sandboxes' thread: %s", strerror(rc));
        close(w->wake[0]);
        close(w->wake[1]);
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->changed);
        free(w->e);
        free(w);
        return NULL;
    }
    return w;
}

void session_boxes_free(session_boxes *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_mutex_unlock(&w->mu);
    wake(w);
    pthread_join(w->thread, NULL);
    for (int i = 0; i < w->n; i++) { /* whatever was left starting or busy (none should be) */
        sandbox_release(w->e[i].sb);
        clear_box(&w->e[i]);
    }
    close(w->wake[0]);
    close(w->wake[1]);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->changed);
    free(w->e);
    free(w);
}

void session_boxes_want(session_boxes *w, const char *key, const char *workspace, const char *tenant)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    if (!w->stopping && !find(w, key))
        (void)add(w, key, workspace, tenant);
    pthread_mutex_unlock(&w->mu);
}

static bool client_gone(int fd)
{
    if (fd <= 0)
        return false;
    struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL));
}

/* key's entry once it is READY (now BUSY, the caller's), waiting for a boot under way; NULL when
 * there is none to be had in time. Called and returns with the lock held. */
static box *take(session_boxes *w, const char *key, const sandbox_opts *o, bool wait)
{
    int64_t until = now_ms() + (wait ? TAKE_WAIT_MS : 0);
    box *e = find(w, key);
    if (!e)
        e = add(w, key, o->workspace_dir, o->tenant);
    while (e && (e->state == B_PENDING || e->state == B_STARTING || e->state == B_BOOTING)) {
        if (e->state == B_BOOTING)
            sandbox_boot_hurry(e->sb);
        if (now_ms() >= until || client_gone(o->cancel_fd) || w->stopping)
            return NULL;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        (void)pthread_cond_timedwait(&w->changed, &w->mu, &ts);
        e = find(w, key);
    }
    if (!e || e->state != B_READY)
        return NULL;
    e->state = B_BUSY;
    return e;
}

int session_boxes_run(session_boxes *w, const char *key, const sandbox_opts *o, const char *command,
                      int timeout_seconds, bool wait, sandbox_result *out, char *errbuf, size_t errlen)
{
    if (!w || o->network)
        return 1;
    pthread_mutex_lock(&w->mu);
    box *e = w->stopping ? NULL : take(w, key, o, wait);
    sandbox *sb = e ? e->sb : NULL;
    pthread_mutex_unlock(&w->mu);
    if (!sb)
        return 1;
    int rc = sandbox_session_run(sb, o, command, timeout_seconds, out, errbuf, errlen);
    pthread_mutex_lock(&w->mu);
    /* the entry is still this sandbox's: a BUSY one is never released or reused */
    e->used_ms = now_ms();
    if (sandbox_session_usable(sb) && !e->forgotten) {
        e->state = B_READY;
    } else {
        e->state = B_DOOMED;
        e->reboot = !e->forgotten;
        wake(w);
    }
    pthread_cond_broadcast(&w->changed);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void session_boxes_forget(session_boxes *w, const char *key)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    box *e = find(w, key);
    while (e && (e->state == B_STARTING || e->state == B_BUSY)) {
        e->forgotten = true;
        pthread_cond_wait(&w->changed, &w->mu);
        e = find(w, key);
    }
    if (e && e->state == B_PENDING)
        clear_box(e);
    else if (e)
        release_box(w, e);
    pthread_mutex_unlock(&w->mu);
}

void session_boxes_abandon(session_boxes *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n; i++) /* no lock: the server is exiting at once */
        if (w->e[i].sb)
            sandbox_abandon(w->e[i].sb);
}
