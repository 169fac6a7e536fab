/* Pause and resume: the registry keeps the state and the disk (domain/sessions.c), this file
 * orders the steps and holds the sandbox's part of them. */
#include "domain/pause.h"

#include "fleet/fleet.h"
#include "fs/walk.h"
#include "log/log.h"
#include "sandbox/image_login.h"
#include "util/move_file.h"
#include "sandbox/session_checkpoint.h"
#include "../../agent/protocol.h"

#include <dirent.h>
#include <openssl/crypto.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Where s's memory image is kept: <state dir>/images/<id>.ckpt (one directory, runsc's files). */
static bool image_path(const pause_deps *d, const char *id, char *out, size_t len)
{
    int n = d->state_dir ? snprintf(out, len, "%s/images/%s.ckpt", d->state_dir, id) : -1;
    return n > 0 && (size_t)n < len;
}

void pause_forget_image(const pause_deps *d, const char *session_id)
{
    char dir[SESSION_PAUSE_DIR_MAX];
    if (image_path(d, session_id, dir, sizeof dir) && fs_rmtree(dir) != 0 && errno != ENOENT)
        log_warn("cannot remove the memory image %s: %s", dir, strerror(errno));
}

/* The name part of an image set aside for removal (image_removed_soon). */
#define SET_ASIDE ".ckpt.removed-"

/* Removes the image set aside at arg (its path, freed here), then any other left set aside
 * (by a process that ended before it removed them). */
static void *remove_set_aside(void *arg)
{
    char *dir = arg;
    if (fs_rmtree(dir) != 0 && errno != ENOENT)
        log_warn("cannot remove the memory image %s: %s", dir, strerror(errno));
    char *slash = strrchr(dir, '/');
    DIR *dd = NULL;
    if (slash) {
        *slash = '\0';
        dd = opendir(dir);
    }
    struct dirent *e;
    while (dd && (e = readdir(dd)) != NULL) {
        char p[SESSION_PAUSE_DIR_MAX + 300];
        if (strstr(e->d_name, SET_ASIDE) && snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p)
            (void)fs_rmtree(p); /* (another such thread may be removing it: no matter) */
    }
    if (dd)
        closedir(dd);
    free(dir);
    return NULL;
}

/* A restored session's image removed off its resume's path (unlinking 160 MB took 40-160 ms on
 * a loaded host): renamed aside at once, removed by a thread of its own; in place when that
 * cannot be. */
static void image_removed_soon(const pause_deps *d, const char *session_id)
{
    static atomic_uint seq;
    char dir[SESSION_PAUSE_DIR_MAX], aside[SESSION_PAUSE_DIR_MAX + 40];
    if (!image_path(d, session_id, dir, sizeof dir))
        return;
    int n = snprintf(aside, sizeof aside, "%.*s%s%u", (int)(strlen(dir) - strlen(".ckpt")), dir, SET_ASIDE,
                     atomic_fetch_add(&seq, 1));
    char *copy = n > 0 && (size_t)n < sizeof aside && rename(dir, aside) == 0 ? strdup(aside) : NULL;
    pthread_attr_t attr;
    pthread_t t;
    bool started = false;
    if (copy && pthread_attr_init(&attr) == 0) {
        (void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        (void)pthread_attr_setstacksize(&attr, 256 * 1024);
        started = pthread_create(&t, &attr, remove_set_aside, copy) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!started) {
        if (fs_rmtree(copy ? copy : dir) != 0 && errno != ENOENT)
            log_warn("cannot remove the memory image %s: %s", copy ? copy : dir, strerror(errno));
        free(copy);
    }
}

/* s's kernels (ids, languages, agent slots) kept beside its image as kernels.json, for a resume
 * by another airlockd process (restore_anew). A failure is logged: that resume gives the files. */
static void keep_kernels(const pause_deps *d, const session *s, const char *image_dir)
{
    char p[SESSION_PAUSE_DIR_MAX + 20];
    json_t *list = kernels_describe(d->kernels, s->id);
    if (snprintf(p, sizeof p, "%s/kernels.json", image_dir) >= (int)sizeof p || !list ||
        json_dump_file(list, p, JSON_COMPACT) != 0)
        log_warn("cannot keep session %s's kernels with its memory image", s->id);
    json_decref(list);
}

/* After a restart (s's checkpointed sandbox went with the old process): a new sandbox restored
 * from the image in image_dir, its kernels (kernels.json) made again on their slots there; fork:
 * a memory snapshot's image, restored as s's own. 0, or -1. */
static int restore_anew(const pause_deps *d, const session *s, const char *image_dir, bool fork, char *errbuf,
                        size_t errlen)
{
    if (kernels_count(d->kernels, s->id) > 0) { /* this process's kernels: their sandbox went */
        snprintf(errbuf, errlen, "the session's checkpointed sandbox is gone");
        return -1;
    }
    json_t *list = kernels_of_image(image_dir, errbuf, errlen);
    unsigned slots = 0;
    size_t i;
    json_t *k;
    if (!list)
        return -1;
    if (json_array_size(list) > AGENT_SLOTS) {
        snprintf(errbuf, errlen, "the memory image lists more kernels than a sandbox has slots");
        json_decref(list);
        return -1;
    }
    json_array_foreach(list, i, k) {
        json_int_t slot = json_integer_value(json_object_get(k, "slot"));
        if (!json_is_string(json_object_get(k, "kernel_id")) || slot < -1 || slot >= AGENT_SLOTS) {
            snprintf(errbuf, errlen, "the memory image's list of kernels is malformed");
            json_decref(list);
            return -1;
        }
        if (slot >= 0)
            slots |= 1u << slot;
    }
    /* with egress: the proxy login its processes hold (a fork's: the session it was taken of) */
    sandbox_proxy_login login;
    int has_login = json_array_size(s->egress) > 0 ? sandbox_image_login(image_dir, &login) : 0;
    if (has_login < 0) {
        snprintf(errbuf, errlen, "the memory image's egress login is unreadable");
        json_decref(list);
        return -1;
    }
    const char *tenant = tenants_get(d->tenants, s->tenant)->name;
    char *root = s->template_id[0] && d->templates ? templates_root(d->templates, s->template_id) : NULL;
    sandbox *sb = warm_session_restore_anew(d->warm, s, tenant, root, image_dir, slots, (int)json_array_size(list),
                                            fork, has_login ? &login : NULL, errbuf, errlen);
    OPENSSL_cleanse(&login, sizeof login);
    json_array_foreach(list, i, k) {
        if (sb && !kernels_adopt(d->kernels, s, tenant, root, sb, json_string_value(json_object_get(k, "kernel_id")),
                                 (int)json_integer_value(json_object_get(k, "slot"))))
            warm_session_give_back(d->warm, s, sb); /* (out of memory: that kernel is gone) */
    }
    free(root);
    json_decref(list);
    return sb ? 0 : -1;
}

/* The sandbox's part of a pause: s's sandbox (and its network namespace and egress listener,
 * which live as long as it) is gone when this returns. With kernels, it is checkpointed into
 * an image first (described in *image; its egress network is made again at the restore);
 * files only, *image stays zero. 0, 1 (busy: a cell runs), -1 (failed; message in errbuf: the
 * sandbox runs on), SANDBOX_SAVE_LOST (failed, and the sandbox ended with it). */
static int sandbox_stop(const pause_deps *d, const session *s, session_pause_state *image, char *errbuf,
                        size_t errlen)
{
    memset(image, 0, sizeof *image);
    if (pause_kernels_in_the_way(d, s) > 0) {
        if (!image_path(d, s->id, image->image_dir, sizeof image->image_dir) ||
            sandbox_runsc_version(d->sb, image->runsc_version, sizeof image->runsc_version) != 0) {
            snprintf(errbuf, errlen, "no room for the memory image, or runsc gave no version");
            return -1;
        }
        char parent[SESSION_PAUSE_DIR_MAX];
        snprintf(parent, sizeof parent, "%s/images", d->state_dir);
        (void)fs_rmtree(image->image_dir);
        if ((mkdir(parent, 0700) != 0 && errno != EEXIST) || mkdir(image->image_dir, 0700) != 0) {
            snprintf(errbuf, errlen, "cannot create %s: %s", image->image_dir, strerror(errno));
            return -1;
        }
        warm_forget_waiters(d->warm, s->id); /* they hold its workspace's mount */
        int rc = warm_session_checkpoint(d->warm, s, image->image_dir, errbuf, errlen);
        if (rc != 0) {
            (void)fs_rmtree(image->image_dir);
            return rc;
        }
        keep_kernels(d, s, image->image_dir);
        long long used = fs_tree_usage(image->image_dir); /* (on the host: allocated bytes) */
        image->image_bytes = used > 0 ? used : 0;
        return 0; /* its warm entry stays, lent to its kernels, for the restore */
    }
    if (d->warm)
        warm_forget(d->warm, s->id);
    return 0;
}

/* The sandbox's part of a resume: s's sandbox boots again over its workspace, on its template,
 * with its size and (through the warm pool's network hook) its egress namespace and proxy; or,
 * paused with its memory (p's image), it is restored from that image (on a namespace and proxy
 * made again the same way), which another runsc version cannot read (refused), then checked
 * (its agent, and each kernel: how many answered in *kernels_pinged, unless NULL). 0, 1
 * (refused: errbuf), -1 (the restore failed: errbuf). */
static int sandbox_start(const pause_deps *d, const session *s, const session_pause_state *p, int *kernels_pinged,
                         char *errbuf, size_t errlen)
{
    int pinged = 0;
    if (p && p->image_dir[0]) {
        char now[SESSION_RUNSC_VERSION_MAX];
        if (sandbox_runsc_version(d->sb, now, sizeof now) != 0 || strcmp(now, p->runsc_version) != 0) {
            snprintf(errbuf, errlen, "its memory image was made by runsc %s, this server runs %s", p->runsc_version,
                     now);
            return 1;
        }
        /* one from the store was made for another node's sandbox (or this node's, gone since):
         * restored as a sandbox of its own, as a memory snapshot's fork is */
        int rc = p->image_moved ? 1 : warm_session_restore(d->warm, s, p->image_dir, errbuf, errlen);
        if (rc == 1)
            rc = restore_anew(d, s, p->image_dir, p->image_moved, errbuf, errlen);
        if (rc == 0 && (pinged = kernels_check_restored(d->kernels, s->id, p->image_dir, errbuf, errlen)) < 0)
            rc = -1; /* (the image stays for another try: the caller ends what was restored) */
        if (rc == 0)
            image_removed_soon(d, s->id);
        if (kernels_pinged)
            *kernels_pinged = pinged;
        return rc;
    }
    if (!d->warm)
        return 0; /* every command boots its own sandbox */
    char *root = s->template_id[0] && d->templates ? templates_root(d->templates, s->template_id) : NULL;
    if (s->template_id[0] && !root)
        return 0; /* its template is gone: its commands say so */
    warm_want_session(d->warm, s, tenants_get(d->tenants, s->tenant)->name, root);
    free(root);
    return 0;
}

/* Where paused session id's part (suffix ".img": its workspace image, ".ckpt": its memory
 * image) lies in the shared store. */
static bool store_path(const pause_deps *d, const char *id, const char *suffix, char *out, size_t len)
{
    int n = d->store_dir ? snprintf(out, len, "%s/%s%s", d->store_dir, id, suffix) : -1;
    return n > 0 && (size_t)n < len;
}

typedef struct {
    const pause_deps *d;
    const char *id;
    long long bytes;
    const session_pause_state *p; /* its memory image, if any (image_dir "": files only) */
} store_record;

static bool record_in_store(void *ctx)
{
    const store_record *sr = ctx;
    const session_pause_state *p = sr->p;
    /* the parts of the paused session, relative to the store */
    char rel[64], dst[SESSION_PAUSE_DIR_MAX + 300];
    snprintf(rel, sizeof rel, "paused/%s.img", sr->id);
    json_t *parts = json_pack("{s:s,s:I}", "workspace", rel, "bytes", (json_int_t)sr->bytes);
    bool memory = p->image_dir[0] != '\0';
    if (memory) { /* its memory image joins its workspace's in the store */
        snprintf(rel, sizeof rel, "paused/%s.ckpt", sr->id);
        if (!parts || !store_path(sr->d, sr->id, ".ckpt", dst, sizeof dst) || move_dir(p->image_dir, dst) != 0) {
            log_session(LV_WARN, sr->id, NULL, "session %s: its memory image could not be moved to the shared store: %s",
                        sr->id, strerror(errno));
            json_decref(parts);
            return false;
        }
        json_object_set_new(parts, "memory", json_pack("{s:s,s:I,s:s}", "dir", rel, "bytes", (json_int_t)p->image_bytes,
                                                       "runsc_version", p->runsc_version));
    }
    bool ok = parts && fleet_store_put(sr->d->fleet, sr->id, parts) == 0;
    json_decref(parts);
    if (!ok && memory && move_dir(dst, p->image_dir) != 0) /* not recorded: it comes back with the workspace */
        log_session(LV_ERROR, sr->id, NULL, "paused session %s: its memory image stays in %s", sr->id, dst);
    return ok;
}

/* In a fleet, paused s leaves this node for the shared store (docs/fleet.md "The shared
 * store"), its memory image with it: any node takes it from there on its next call. Logged
 * when it stays here. */
static void hand_to_store(const pause_deps *d, session *s)
{
    char dst[4200];
    snprintf(dst, sizeof dst, "%s/%s.img", d->store_dir, s->id);
    char *img = disk_image_path(registry_disk(d->reg), s->id);
    struct stat st;
    session_pause_state p;
    (void)registry_state(d->reg, s, &p);
    store_record sr = {.d = d, .id = s->id, .bytes = img && stat(img, &st) == 0 ? (long long)st.st_size : 0, .p = &p};
    free(img);
    if (registry_hand_over(d->reg, s, dst, record_in_store, &sr))
        log_session(LV_INFO, s->id, NULL, "session %s: its paused image%s in the shared store", s->id,
                    p.image_dir[0] ? " and its memory image are" : " is");
    else
        log_session(LV_WARN, s->id, NULL, "session %s stays paused on this node (the shared store did not take it)",
                    s->id);
}

int pause_image_from_store(const pause_deps *d, const char *id, const json_t *stored, session_pause_state *p)
{
    memset(p, 0, sizeof *p);
    const json_t *m = json_object_get(stored, "memory");
    if (!m)
        return 0; /* files only */
    const char *version = json_string_value(json_object_get(m, "runsc_version"));
    json_int_t bytes = json_integer_value(json_object_get(m, "bytes"));
    char src[SESSION_PAUSE_DIR_MAX + 300], parent[SESSION_PAUSE_DIR_MAX];
    if (!version || strlen(version) >= sizeof p->runsc_version || bytes < 0 ||
        !store_path(d, id, ".ckpt", src, sizeof src) || !image_path(d, id, p->image_dir, sizeof p->image_dir) ||
        snprintf(parent, sizeof parent, "%s/images", d->state_dir) >= (int)sizeof parent) {
        log_session(LV_ERROR, id, NULL, "session %s: its stored memory image is not described whole", id);
        return -1;
    }
    (void)fs_rmtree(p->image_dir); /* (one a restart of this node left: not this session's now) */
    if ((mkdir(parent, 0700) != 0 && errno != EEXIST) || move_dir(src, p->image_dir) != 0) {
        log_session(LV_WARN, id, NULL, "session %s: its memory image could not be taken from %s: %s", id, src,
                    strerror(errno));
        return -1;
    }
    snprintf(p->runsc_version, sizeof p->runsc_version, "%s", version);
    p->image_bytes = (long long)bytes;
    p->image_moved = true;
    return 0;
}

void pause_image_to_store(const pause_deps *d, const char *id, const session_pause_state *p)
{
    char dst[SESSION_PAUSE_DIR_MAX + 300];
    if (p->image_dir[0] && (!store_path(d, id, ".ckpt", dst, sizeof dst) || move_dir(p->image_dir, dst) != 0))
        log_session(LV_ERROR, id, NULL, "session %s: its memory image stays in %s", id, p->image_dir);
}

session_result pause_session(const pause_deps *d, session *s, bool only_if_idle, pause_outcome *out)
{
    memset(out, 0, sizeof *out);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    session_result rc = registry_pause_begin(d->reg, s, only_if_idle, &out->was_paused);
    if (rc != SESSION_OK || out->was_paused) {
        if (out->was_paused) {
            session_pause_state p;
            registry_state(d->reg, s, &p);
            out->image_bytes = p.image_bytes;
            if (d->fleet && d->store_dir) /* one the store did not take before: again */
                hand_to_store(d, s);
        }
        return rc;
    }
    session_pause_state image;
    char err[300] = "";
    int stopped = sandbox_stop(d, s, &image, err, sizeof err);
    if (stopped != 0) {
        (void)registry_pause_end(d->reg, s, NULL); /* never left half paused */
        log_session(stopped > 0 ? LV_INFO : LV_WARN, s->id, NULL, "session %s not paused: %s", s->id, err);
        snprintf(out->why, sizeof out->why, "%s", err);
        out->sandbox_lost = stopped == SANDBOX_SAVE_LOST;
        return stopped > 0 ? SESSION_BUSY : SESSION_ERROR;
    }
    rc = registry_pause_end(d->reg, s, &image);
    if (rc != SESSION_OK) {
        if (image.image_dir[0] && sandbox_start(d, s, &image, NULL, err, sizeof err) != 0)
            log_session(LV_WARN, s->id, NULL, "session %s: its sandbox could not be restored: %s", s->id, err);
        else if (!image.image_dir[0])
            (void)sandbox_start(d, s, NULL, NULL, err, sizeof err); /* active again: its sandbox comes back */
        return rc;
    }
    out->image_bytes = image.image_bytes;
    out->pause_ms = ms_since(&t0);
    log_session(LV_INFO, s->id, NULL, "session %s paused in %.0f ms (%s)", s->id, out->pause_ms,
                image.image_dir[0] ? "with its memory" : "files only");
    if (d->fleet && d->store_dir)
        hand_to_store(d, s);
    return SESSION_OK;
}

/* 0 when s is not paused with a memory image this server's runsc can read; 1 (why says both
 * versions) when its image was made by another runsc version: it stays paused, its image kept. */
static int image_of_other_runsc(const pause_deps *d, const session *s, char *why, size_t whylen)
{
    session_pause_state p;
    if (registry_state(d->reg, s, &p) != SESSION_PAUSED || !p.image_dir[0])
        return 0;
    char now[SESSION_RUNSC_VERSION_MAX] = "";
    if (sandbox_runsc_version(d->sb, now, sizeof now) == 0 && strcmp(now, p.runsc_version) == 0)
        return 0;
    if (why)
        snprintf(why, whylen, "its memory image was made by runsc %s, this server runs %s", p.runsc_version,
                 now[0] ? now : "a runsc that gave no version");
    return 1;
}

void pause_want_restore_ahead(const pause_deps *d, size_t tenant)
{
    char dir[SESSION_PAUSE_DIR_MAX];
    const tenant_cfg *t = tenants_get(d->tenants, tenant);
    if (t && registry_latest_memory_pause(d->reg, tenant, dir, sizeof dir))
        sandbox_restore_ahead_want(d->sb, t->name, dir);
}

void pause_drop_restore_ahead(const pause_deps *d, size_t tenant)
{
    char dir[SESSION_PAUSE_DIR_MAX];
    const tenant_cfg *t = tenants_get(d->tenants, tenant);
    if (t && !registry_latest_memory_pause(d->reg, tenant, dir, sizeof dir))
        sandbox_restore_ahead_drop(d->sb, t->name);
}

session_result resume_session_with(const pause_deps *d, session *s, bool discard_memory, bool *resumed,
                                   double *resume_ms, char *why, size_t whylen)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    *resume_ms = 0;
    *resumed = false;
    if (!discard_memory && image_of_other_runsc(d, s, why, whylen)) {
        if (d->fleet && d->store_dir) /* back for a node of its runsc, never lost with this one */
            hand_to_store(d, s);
        return SESSION_BUSY;
    }
    session_pause_state p;
    if (registry_state(d->reg, s, NULL) == SESSION_PAUSED)
        sandbox_prime_cgroup_join(d->sb); /* (its wait beside the disk's mount) */
    session_result rc = registry_resume(d->reg, s, resumed, &p);
    if (rc != SESSION_OK || !*resumed)
        return rc;
    double disk_ms = ms_since(&t0); /* its disk mounted (its state saved at the end) */
    if (discard_memory && p.image_dir[0]) {
        /* files only, as asked: its kernels and their memory end */
        log_session(LV_INFO, s->id, NULL, "session %s resumed without its memory (discard_memory)", s->id);
        kernels_forget_session(d->kernels, s->id);
        warm_forget(d->warm, s->id);
        pause_forget_image(d, s->id);
        memset(&p, 0, sizeof p);
    }
    char err[300] = "";
    /* (an image an older build made has no mark: its check is a command) */
    bool pings = p.image_dir[0] && sandbox_image_agent_pings(p.image_dir);
    int pinged = 0;
    int started = sandbox_start(d, s, &p, &pinged, err, sizeof err);
    if (started != 0) { /* (only a restore from an image fails) */
        /* what this process held of its sandbox and kernels is gone with the failed restore;
         * the image (kernels.json in it) is kept for another try, as after a restart */
        kernels_forget_session(d->kernels, s->id);
        warm_forget(d->warm, s->id);
        if (why)
            snprintf(why, whylen, "%s", err);
        if (registry_resume_end(d->reg, s, &p) == SESSION_OK) {
            log_session(LV_WARN, s->id, NULL, "session %s: its memory was not restored: %s; it stays paused, its "
                        "image kept", s->id, err);
            if (d->fleet && d->store_dir) /* for another try, on any node */
                hand_to_store(d, s);
            return SESSION_ERROR;
        }
        /* not paused again (the turn ended active): its files are there (mounted); its kernels'
         * memory is not: they end */
        log_session(LV_WARN, s->id, NULL, "session %s: its memory was not restored: %s; its kernels end", s->id, err);
        pause_forget_image(d, s->id);
        return SESSION_ERROR;
    }
    (void)registry_resume_end(d->reg, s, NULL);
    *resume_ms = ms_since(&t0);
    if (p.image_dir[0]) {
        pause_want_restore_ahead(d, s->tenant); /* its tenant's next resume finds one too */
        log_session(LV_INFO, s->id, NULL, "session %s resumed in %.0f ms (disk %.0f ms; sandbox restored%s, its agent "
                    "checked with %s and %d kernel(s) with theirs, its image removed %.0f ms)", s->id, *resume_ms,
                    disk_ms, warm_session_restored_ahead(d->warm, s) ? " into one made ahead" : "",
                    pings ? "a ping" : "a command", pinged, *resume_ms - disk_ms);
    } else {
        log_session(LV_INFO, s->id, NULL, "session %s resumed in %.0f ms (disk %.0f ms; its sandbox boots for its "
                    "next command)", s->id, *resume_ms, disk_ms);
    }
    return SESSION_OK;
}

session_result resume_session(const pause_deps *d, session *s, bool *resumed, double *resume_ms, char *why,
                              size_t whylen)
{
    return resume_session_with(d, s, false, resumed, resume_ms, why, whylen);
}

int pause_restore_fork(const pause_deps *d, const session *s, const char *image_dir, char *errbuf, size_t errlen)
{
    if (restore_anew(d, s, image_dir, true, errbuf, errlen) != 0)
        return -1;
    if (kernels_check_restored(d->kernels, s->id, image_dir, errbuf, errlen) >= 0)
        return 0;
    kernels_forget_session(d->kernels, s->id);
    warm_forget(d->warm, s->id);
    return -1;
}

size_t pause_kernels_in_the_way(const pause_deps *d, const session *s)
{
    return d->kernels ? kernels_count(d->kernels, s->id) : 0;
}

void pause_idle_session(void *ctx, const char *session_id, size_t tenant)
{
    const pause_deps *d = ctx;
    session *s = NULL;
    if (registry_acquire(d->reg, session_id, tenant, false, &s) != SESSION_OK)
        return;
    pause_outcome out;
    session_result rc = pause_session(d, s, true, &out);
    if (rc != SESSION_OK && rc != SESSION_BUSY && rc != SESSION_NOT_FOUND)
        log_session(LV_WARN, session_id, NULL, "session %s could not be paused after its idle TTL; it stays active",
                    session_id);
    registry_release(d->reg, s);
}

/* the stored sessions expired per sweep at most (the rest at the next) */
#define EXPIRED_PER_SWEEP 100

void pause_store_sweep(void *ctx)
{
    const pause_deps *d = ctx;
    if (!d->fleet || !d->store_dir)
        return;
    json_t *ids = fleet_store_expired(d->fleet, d->paused_ttl, EXPIRED_PER_SWEEP);
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v) {
        const char *id = json_string_value(v);
        char img[4200];
        snprintf(img, sizeof img, "%s/%s.img", d->store_dir, id);
        if (unlink(img) != 0 && errno != ENOENT)
            log_warn("cannot remove %s: %s", img, strerror(errno));
        snprintf(img, sizeof img, "%s/%s.ckpt", d->store_dir, id); /* its memory image, if any */
        if (fs_rmtree(img) != 0 && errno != ENOENT)
            log_warn("cannot remove %s: %s", img, strerror(errno));
        log_session(LV_INFO, id, NULL, "session %s deleted after %.0f s paused (in the shared store)", id,
                    d->paused_ttl);
    }
    json_decref(ids);
}
