/* Pause and resume: the registry keeps the state and the disk (domain/sessions.c), this file
 * orders the steps and holds the sandbox's part of them. */
#include "domain/pause.h"

#include "fleet/fleet.h"
#include "log/log.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* The sandbox's part of a pause: s's sandbox (and its network namespace and egress listener,
 * which live as long as it) is gone when this returns. A memory pause would checkpoint it into
 * an image here and describe it in *image; files only, *image stays zero. */
static int sandbox_stop(const pause_deps *d, const session *s, session_pause_state *image)
{
    memset(image, 0, sizeof *image);
    if (d->warm)
        warm_forget(d->warm, s->id);
    return 0;
}

/* The sandbox's part of a resume: s's sandbox boots again over its workspace, on its template,
 * with its size and (through the warm pool's network hook) its egress namespace and proxy. A
 * memory pause would restore its image here (refusing one another runsc version made). */
static void sandbox_start(const pause_deps *d, const session *s)
{
    if (!d->warm)
        return; /* every command boots its own sandbox */
    char *root = s->template_id[0] && d->templates ? templates_root(d->templates, s->template_id) : NULL;
    if (s->template_id[0] && !root)
        return; /* its template is gone: its commands say so */
    warm_want_session(d->warm, s, tenants_get(d->tenants, s->tenant)->name, root);
    free(root);
}

typedef struct {
    const pause_deps *d;
    const char *id;
    long long bytes;
} store_record;

static bool record_in_store(void *ctx)
{
    const store_record *sr = ctx;
    /* the parts of the paused image, relative to the store (a memory image joins as "memory") */
    char rel[64];
    snprintf(rel, sizeof rel, "paused/%s.img", sr->id);
    json_t *parts = json_pack("{s:s,s:I}", "workspace", rel, "bytes", (json_int_t)sr->bytes);
    bool ok = parts && fleet_store_put(sr->d->fleet, sr->id, parts) == 0;
    json_decref(parts);
    return ok;
}

/* In a fleet, paused s leaves this node for the shared store (docs/fleet.md "The shared
 * store"): any node takes it from there on its next call. Logged when it stays here. */
static void hand_to_store(const pause_deps *d, session *s)
{
    char dst[4200];
    snprintf(dst, sizeof dst, "%s/%s.img", d->store_dir, s->id);
    char *img = disk_image_path(registry_disk(d->reg), s->id);
    struct stat st;
    store_record sr = {.d = d, .id = s->id, .bytes = img && stat(img, &st) == 0 ? (long long)st.st_size : 0};
    free(img);
    if (registry_hand_over(d->reg, s, dst, record_in_store, &sr))
        log_session(LV_INFO, s->id, NULL, "session %s: its paused image is in the shared store", s->id);
    else
        log_session(LV_WARN, s->id, NULL, "session %s stays paused on this node (the shared store did not take it)",
                    s->id);
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
    if (sandbox_stop(d, s, &image) != 0) {
        (void)registry_pause_end(d->reg, s, NULL); /* never left half paused */
        sandbox_start(d, s);
        return SESSION_ERROR;
    }
    rc = registry_pause_end(d->reg, s, &image);
    if (rc != SESSION_OK) {
        sandbox_start(d, s); /* active again: its sandbox comes back */
        return rc;
    }
    out->image_bytes = image.image_bytes;
    out->pause_ms = ms_since(&t0);
    log_session(LV_INFO, s->id, NULL, "session %s paused in %.0f ms (files only)", s->id, out->pause_ms);
    if (d->fleet && d->store_dir)
        hand_to_store(d, s);
    return SESSION_OK;
}

session_result resume_session(const pause_deps *d, session *s, bool *resumed, double *resume_ms)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    *resume_ms = 0;
    session_result rc = registry_resume(d->reg, s, resumed);
    if (rc != SESSION_OK || !*resumed)
        return rc;
    sandbox_start(d, s);
    *resume_ms = ms_since(&t0);
    log_session(LV_INFO, s->id, NULL, "session %s resumed in %.0f ms", s->id, *resume_ms);
    return SESSION_OK;
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
    if (pause_kernels_in_the_way(d, s) > 0) {
        log_session(LV_INFO, session_id, NULL, "session %s: its kernels end at its idle TTL; its files are paused",
                    session_id);
        kernels_forget_session(d->kernels, session_id);
    }
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
        log_session(LV_INFO, id, NULL, "session %s deleted after %.0f s paused (in the shared store)", id,
                    d->paused_ttl);
    }
    json_decref(ids);
}
