/* Pausing and resuming a session (docs/api.md "Pause and resume"). A paused session keeps its
 * workspace image, unmounted, and nothing of it runs on the host: no sandbox (so no runsc
 * process, cgroup, network namespace or egress listener), no loop device. Today every pause is
 * files only (image_bytes 0: nothing in a plain session's memory is worth keeping); a memory
 * image (a runsc checkpoint) slots in behind sandbox_stop / sandbox_start below, its directory,
 * size and runsc version recorded in the session's pause state (store/session_state.h). */
#ifndef AIRLOCKD_PAUSE_H
#define AIRLOCKD_PAUSE_H

#include "domain/kernels.h"
#include "domain/sessions.h"
#include "domain/templates.h"
#include "domain/tenants.h"
#include "domain/warm.h"

#include <stdbool.h>

/* What pausing and resuming use. */
typedef struct {
    registry *reg;
    warm_pool *warm;        /* the sessions' own sandboxes (NULL: commands run cold) */
    templates *templates;   /* a built template's root, to boot a resumed session on it */
    tenants *tenants;
    kernels *kernels;       /* a session's kernels: a pause keeps their memory (an image) */
    sandbox_backend *sb;    /* runsc (its version names an image's maker) */
    const char *state_dir;  /* images/<id>.ckpt: a session's memory image */
    struct fleet *fleet;    /* in a fleet: a paused session goes to the shared store, its memory image
                             * with it (NULL: stays) */
    char *store_dir;        /* <SANDBOX_SNAPSHOT_DIR>/paused, in a fleet */
    double paused_ttl;      /* SANDBOX_PAUSED_TTL: stored sessions expire after it */
} pause_deps;

typedef struct {
    bool was_paused;        /* it was paused already: nothing was done */
    long long image_bytes;  /* its memory image (0: files only) */
    double pause_ms;        /* how long the pause took */
    char why[300];          /* not paused: why (a cell runs, runsc's message) */
    bool sandbox_lost;      /* not paused, and its sandbox ended with the failed save (its
                             * kernels' memory lost; its files kept, it is active) */
} pause_outcome;

/* Pauses s (the caller holds a reference): its sandbox stops, its disk is unmounted, and it is
 * saved as paused before this returns. only_if_idle (the idle reaper): only if no request
 * used it within its idle TTL. SESSION_OK (*out filled), SESSION_BUSY (a request, such as a
 * command, is using it), SESSION_NOT_FOUND (deleted meanwhile), SESSION_ERROR / SESSION_STORAGE
 * (logged; it is active as before). */
session_result pause_session(const pause_deps *d, session *s, bool only_if_idle, pause_outcome *out);

/* Kernels s has: with any, a pause checkpoints s's sandbox (its memory) into an image. */
size_t pause_kernels_in_the_way(const pause_deps *d, const session *s);

/* Resumes s when it is paused (*resumed then, and *resume_ms): its disk mounted again and its
 * sandbox booting on it with its template, size and egress. SESSION_OK; SESSION_ERROR when its
 * disk could not be mounted (it stays paused, its image kept); SESSION_NOT_FOUND. */
session_result resume_session(const pause_deps *d, session *s, bool *resumed, double *resume_ms, char *why,
                              size_t whylen);
/* (why, whylen > 0: on SESSION_ERROR after the disk came back, why its memory did not: the
 * session is then paused again with its image kept, for another resume (registry_state says
 * so), or, when it could not be paused again, active with its files, its kernels ended.) */
/* SESSION_BUSY (why names both versions) when its memory image was made by another runsc
 * version: it stays paused, its image kept. */

/* The same; discard_memory: a memory image is not restored but removed, its kernels end (the
 * way out of an image another runsc made): its files only. */
session_result resume_session_with(const pause_deps *d, session *s, bool discard_memory, bool *resumed,
                                   double *resume_ms, char *why, size_t whylen);

/* A new session s from a memory snapshot (its image in image_dir, kernels.json beside it):
 * its own sandbox restored from the image, checked (its agent answers, then each kernel), and
 * its kernels adopted under their ids. 0, or -1 with a message (nothing of the sandbox left). */
int pause_restore_fork(const pause_deps *d, const session *s, const char *image_dir, char *errbuf, size_t errlen);

/* In a fleet, a session taken from the shared store: its memory image (stored's "memory" part,
 * docs/fleet.md "The shared store") moved into this node's images and described in *p (its
 * directory, size, runsc version, image_moved: restored as a sandbox of its own). 0 (*p all
 * zero when stored has no memory part: files only), or -1 (logged; the image stays in the
 * store). */
int pause_image_from_store(const pause_deps *d, const char *id, const json_t *stored, session_pause_state *p);
/* Undoes pause_image_from_store (the session could not be held here): its image back in the
 * store. */
void pause_image_to_store(const pause_deps *d, const char *id, const session_pause_state *p);

/* Removes session_id's memory image, if any (its end). */
void pause_forget_image(const pause_deps *d, const char *session_id);

/* A sandbox made ahead for the next resume of tenant's sessions paused with their memory (of
 * the spec of the one paused last; sandbox_restore_ahead_want), when it has one: after a
 * resume took one, and at a start for every tenant. */
void pause_want_restore_ahead(const pause_deps *d, size_t tenant);

/* After a session of tenant was deleted: its sandboxes made ahead go (and are gone when this
 * returns) unless another of its sessions is paused with its memory. */
void pause_drop_restore_ahead(const pause_deps *d, size_t tenant);

/* The idle reaper's hook (registry_pause_hook; ctx: a pause_deps that outlives the registry). */
void pause_idle_session(void *ctx, const char *session_id, size_t tenant);

/* The registry's sweep hook (ctx: the pause_deps): in a fleet, the stored paused sessions past
 * their paused TTL are deleted, their images removed from the store, by whichever node sweeps
 * first. */
void pause_store_sweep(void *ctx);

#endif
