/* A drain's moves from the draining node (docs/fleet.md "Drain"). The heartbeat only wakes
 * the mover's thread, so a move never delays it. For each of the node's idle sessions the
 * mover takes it out of service, names its new node in the database, freezes its disk (its
 * image then stays consistent and unchanged) and asks that node to take it
 * (POST /v1/fleet/internal/sessions/{id}, the image's size in X-Airlock-Image-Bytes); the new
 * node checks it has room, fetches the disk's used blocks from this node
 * (GET .../archive: drain/transfer.c), checks and mounts it and becomes the owner. A move that
 * fails or does not end within SANDBOX_FLEET_MOVE_TIMEOUT_S is undone in the database (unless
 * the new node took it first), the disk thawed and the session served here again, its reason
 * kept for the drain's report (sessions.move_error). */
#include "drain/move.h"

#include "drain/peer.h"
#include "log/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct mover {
    app *a;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool wake, stopping;
    atomic_bool abort; /* the move under way ends now */
};

static void nap(mover *m, int seconds)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += seconds;
    pthread_mutex_lock(&m->mu);
    while (!m->stopping && pthread_cond_timedwait(&m->cond, &m->mu, &until) == 0) {
    }
    pthread_mutex_unlock(&m->mu);
}

/* Asks node (at url) to take session id, whose disk image has image_bytes: true when it did;
 * else why says what the drain reports (empty: nothing to report, it is tried again). */
static bool ask_to_take(mover *m, const char *id, const char *node, const char *url, long long image_bytes,
                        char *why, size_t whylen)
{
    const config *c = m->a->cfg;
    char target[600], header[80];
    snprintf(target, sizeof target, "%s/v1/fleet/internal/sessions/%s", url, id);
    snprintf(header, sizeof header, "X-Airlock-Image-Bytes: %lld", image_bytes);
    peer_request q = {.method = "POST", .url = target, .secret = c->fleet_secret, .header = header,
                      .timeout_s = c->fleet_move_timeout_s, .abort = &m->abort};
    peer_answer ans;
    peer_call(&q, &ans);
    if (ans.status == 200)
        return true;
    if (ans.aborted || ans.status == 503)
        why[0] = '\0'; /* this node is stopping, or that one takes other moves: the next pass */
    else if (ans.timed_out)
        snprintf(why, whylen, "its move to %s did not end within SANDBOX_FLEET_MOVE_TIMEOUT_S (%d s)", node,
                 c->fleet_move_timeout_s);
    else if (ans.status == 507)
        snprintf(why, whylen, "node %s has no room for it: %s", node, ans.detail);
    else if (ans.status)
        snprintf(why, whylen, "node %s answered %ld: %s", node, ans.status, ans.detail);
    else
        snprintf(why, whylen, "node %s could not be reached: %s", node, ans.error);
    return false;
}

/* The move failed: undone in the database, unless the receiving node took it first (then it
 * did move: true). While the database cannot tell, the session stays out of service. */
static bool undo(mover *m, const char *id, const char *why)
{
    int rc;
    while ((rc = fleet_move_cancel(m->a->fleet, id, why[0] ? why : NULL)) < 0 && !atomic_load(&m->abort))
        nap(m, 1);
    if (rc < 0)
        log_session(LV_ERROR, id, NULL, "drain: whether it moved is unknown (the database cannot be reached); "
                                        "it is served here again");
    return rc == 1;
}

/* Session id, idle, is paused into the shared store (or was paused here) and handed to
 * another node without copying (docs/fleet.md "The shared store"): true when it left. */
static bool hand_over_paused(mover *m, const char *id)
{
    app *a = m->a;
    session *s = NULL;
    size_t tenant = 0;
    if (!registry_tenant_of(a->reg, id, &tenant) || registry_acquire(a->reg, id, tenant, false, &s) != SESSION_OK)
        return false;
    pause_outcome out;
    session_result rc = pause_session(&a->pause, s, false, &out); /* a request using it: BUSY */
    registry_release(a->reg, s);
    if (rc != SESSION_OK || registry_has(a->reg, id))
        return false; /* in use, or still here */
    if (fleet_store_hand_over(a->fleet, id) != 1)
        return false; /* stored: the next pass hands it over */
    log_session(LV_INFO, id, NULL, "drain: handed over paused, its image in the shared store (no copy)");
    return true;
}

/* Moves session id to another node if it is idle (a request holds it: the next pass). */
static void move_one(mover *m, const char *id)
{
    app *a = m->a;
    session *s = NULL;
    if (registry_paused(a->reg, id)) { /* listed with its reason, so the drain can end */
        if (!a->pause.store_dir)
            fleet_move_refused(a->fleet, id, "it is paused: a paused session stays on its node until it is "
                                             "resumed or deleted (no shared store: SANDBOX_SNAPSHOT_DIR)");
        else if (!hand_over_paused(m, id)) /* one the shared store did not take when it paused */
            fleet_move_refused(a->fleet, id, "it is paused and the shared store did not take its image "
                                             "(SANDBOX_SNAPSHOT_DIR/paused): it stays on its node");
        return;
    }
    if (!registry_move_out_begin(a->reg, id, &s))
        return;
    /* it asked to be paused when idle: no copy (one with kernels is paused with their memory,
     * which the store takes with its workspace) */
    if (s->on_idle_pause && a->pause.store_dir) {
        registry_move_out_end(a->reg, s, false);
        if (!hand_over_paused(m, id))
            log_session(LV_WARN, id, NULL, "drain: could not pause it for another node; tried again");
        return;
    }
    char node[200], url[400], why[600] = "";
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (fleet_move_begin(a->fleet, id, node, sizeof node, url, sizeof url) != 0) {
        snprintf(why, sizeof why, "no other node can take it (none is active with a fresh heartbeat and room "
                                  "for another session)");
        fleet_move_refused(a->fleet, id, why);
        log_session(LV_WARN, id, NULL, "drain: kept on this node: %s", why);
        registry_move_out_end(a->reg, s, false);
        return;
    }
    char *img = registry_moving_image(a->reg, id);
    struct stat st;
    bool moved = false, frozen = false;
    if (!img || stat(img, &st) != 0)
        snprintf(why, sizeof why, "its disk image cannot be read");
    else if (registry_move_freeze(a->reg, s, true) != 0)
        snprintf(why, sizeof why, "its disk cannot be frozen for the copy: %s", strerror(errno));
    else
        frozen = true;
    if (frozen)
        moved = ask_to_take(m, id, node, url, (long long)st.st_size, why, sizeof why);
    free(img);
    if (!moved && undo(m, id, why)) {
        moved = true;
        log_session(LV_INFO, id, NULL, "drain: node %s took it after all", node);
    }
    if (frozen && registry_move_freeze(a->reg, s, false) != 0)
        log_session(LV_ERROR, id, NULL, "drain: its disk cannot be thawed: %s", strerror(errno));
    registry_move_out_end(a->reg, s, moved);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (moved)
        log_session(LV_INFO, id, NULL, "drain: moved to %s in %.2f s", node, took);
    else
        log_session(LV_WARN, id, NULL, "drain: kept on this node after %.2f s: %s", took,
                    why[0] ? why : "this node is stopping");
}

/* One pass over the sessions the drain may still move. */
static void pass(mover *m)
{
    /* the stored paused sessions it still routes: to another node, no copy */
    if (fleet_store_hand_over(m->a->fleet, NULL) > 0)
        log_info("drain: paused sessions in the shared store handed to another node");
    json_t *ids = fleet_move_candidates(m->a->fleet);
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v)
    {
        if (atomic_load(&m->abort))
            break;
        move_one(m, json_string_value(v));
    }
    json_decref(ids);
}

static void *mover_main(void *arg)
{
    mover *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stopping) {
        if (!m->wake) {
            pthread_cond_wait(&m->cond, &m->mu);
            continue;
        }
        m->wake = false;
        pthread_mutex_unlock(&m->mu);
        pass(m);
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

mover *mover_start(app *a)
{
    mover *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->a = a;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cond, NULL);
    if (pthread_create(&m->thread, NULL, mover_main, m) != 0) {
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->cond);
        free(m);
        return NULL;
    }
    return m;
}

void mover_wake(void *ctx)
{
    mover *m = ctx;
    if (!m->a->cfg->fleet_secret)
        return; /* no secret: sessions stay until they end (docs/fleet.md) */
    pthread_mutex_lock(&m->mu);
    m->wake = true;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->mu);
}

void mover_stop(mover *m)
{
    if (!m)
        return;
    atomic_store(&m->abort, true);
    pthread_mutex_lock(&m->mu);
    m->stopping = true;
    pthread_cond_broadcast(&m->cond);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->thread, NULL);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cond);
    free(m);
}
