/* The session registry: ids, owners, timestamps, workspaces (each on its own disk image,
 * disk/pool.h), persistence across restarts, the idle-TTL reaper. Sessions are reference
 * counted so a DELETE or reap during a running command removes the workspace only when that
 * command is done. */
#ifndef AIRLOCKD_SESSIONS_H
#define AIRLOCKD_SESSIONS_H

#include "disk/pool.h"
#include "domain/tenants.h"
#include "sandbox/sandbox.h"
#include "store/session_state.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Room for a template's id (domain/templates.h) and its NUL. */
#define SESSION_TEMPLATE_ID_MAX 24

/* Whether a session runs (pause and resume: domain/pause.h). */
typedef enum {
    SESSION_ACTIVE = 0,
    SESSION_PAUSING,  /* its sandbox is stopping, its disk being unmounted */
    SESSION_PAUSED,   /* nothing of it runs; its image is kept, unmounted */
    SESSION_RESUMING, /* its disk is being mounted again */
} session_state;

typedef struct session {
    char id[17];            /* "sbx_" + 12 lowercase hex */
    size_t tenant;
    json_t *egress;         /* expanded rules */
    double created_at;
    double last_accessed_at;
    long long quota_bytes;  /* its disk quota (the one it was created with) */
    char template_name[SESSION_TEMPLATE_MAX]; /* the template it was made with */
    sandbox_size size;      /* memory_mb, cpu_percent, max_processes: never 0 */
    char *workspace;        /* absolute, symlink-free host directory on its own disk */
    int refs;               /* the registry's own reference + one per request using it */
    bool ready;             /* its disk is made (a session being created is invisible) */
    bool keep_disk;         /* taken off at shutdown: its last release keeps the disk */
    bool removed;           /* it has left the registry (deleted, expired, shut down) */
    bool moving;            /* a drain is moving it to another node: requests wait (503) */
    bool moved_away;        /* another node owns it now: its last release keeps the fleet's row */
    bool handed_over;       /* in the fleet's shared store now: its last release touches nothing
                             * under its id (which may be this node's again by then) */
    bool touched_in_flight; /* a touching request holds it: idle time starts when the last one ends */
    char template_id[SESSION_TEMPLATE_ID_MAX]; /* ours: the template it runs on ("": the default root) */
    bool on_idle_pause;     /* {"on_idle": "pause"}: its idle TTL pauses it instead of deleting it */
    session_state state;    /* under the registry's lock */
    session_pause_state pause; /* while paused: when, and its memory image if any */
    struct session *next;
} session;

typedef struct registry registry;

/* The template a session without one is made with (the contract's default). */
#define SESSION_DEFAULT_TEMPLATE "sandbox-base:latest"

/* What a new session is made with (POST /v1/sessions): its template and its size. */
typedef struct {
    const char *template_name; /* NULL: SESSION_DEFAULT_TEMPLATE; at most SESSION_TEMPLATE_MAX - 1 bytes */
    const char *template_id;   /* ours: a built template's id (domain/templates.h); NULL: the host's root */
    sandbox_size size;         /* a 0 field: its default (sandbox/sandbox.h) */
    long long quota_bytes;     /* its disk; 0: the server's (SANDBOX_WORKSPACE_QUOTA_MB) */
    bool on_idle_pause;        /* {"on_idle": "pause"} */
    /* ours: a disk that starts as a copy (a snapshot's): fill writes it into a fresh image of
     * fill_image_bytes (disk_receive; quota_bytes must be the copy's); NULL: a new, empty one */
    disk_fill_fn fill;
    void *fill_ctx;
    long long fill_image_bytes;
} session_spec;

/* s takes spec's (NULL: the defaults) template and size, each default filled in from defaults
 * (NULL, or a 0 field: sandbox.h's) and default_quota bytes (the disk). */
void session_spec_apply(session *s, const session_spec *spec, const sandbox_size *defaults, long long default_quota);

/* A fleet's shared session registry (fleet/fleet.h), which decides max_sessions across nodes:
 * reserve registers a new id (0; 1 over the limit with *open_now; -1 unreachable), ready gives
 * the reserved row its final id and time, release drops a session gone for good. Called
 * outside the registry's lock. */
typedef struct {
    int (*reserve)(void *ctx, const char *id, const char *tenant, int max, const json_t *egress, long long quota_bytes,
                   int *open_now);
    void (*ready)(void *ctx, const char *reserved_id, const char *id, double created_at, const session *s);
    void (*release)(void *ctx, const char *id);
    /* s was paused (paused_at) or resumed (0); NULL: not recorded */
    void (*paused)(void *ctx, const char *id, double paused_at);
    void *ctx;
} registry_shared;

typedef struct {
    const char *state_dir;   /* absolute, symlink-free */
    double ttl;              /* idle seconds */
    double paused_ttl;       /* SANDBOX_PAUSED_TTL: a paused session is deleted this long after its pause */
    long long quota_bytes;   /* the disk quota of new sessions */
    sandbox_size size;       /* their size unless they ask for another (0 fields: sandbox.h's) */
    const char *state_file;  /* where sessions are saved; NULL: not persisted (wiped at shutdown) */
    tenants *tenants;        /* names the saved sessions' tenants */
    disk_pool *disk;
    int id_slot;             /* 1..255: new ids open with it in two hex digits (a fleet node's slot) */
    const registry_shared *shared; /* a fleet's shared registry, or NULL */
} registry_opts;

/* Opens the registry and, with a state file, brings back its sessions that have not expired:
 * each takes over its mount when a killed predecessor left it, else its image is checked and
 * mounted; a session whose image is held elsewhere is logged and kept for a later start, not
 * served. Then removes the predecessor's leftovers of every other session (disk_cleanup).
 * NULL with a message on failure (an unreadable state file included: nothing is deleted). */
registry *registry_new(const registry_opts *o, char *err, size_t errlen);

/* THE shutdown decision for sessions and workspaces: stops the reaper; with persistence,
 * saves the sessions and unmounts their disks, keeping every image for the next start
 * (disks still in use are unmounted when their last request ends); without, removes them.
 * Idempotent; the registry then holds no session. */
void registry_shutdown(registry *r);

/* registry_shutdown, then frees (no request may be running any more). */
void registry_free(registry *r);

/* Called with the id of every session that leaves the registry (deleted, expired or removed
 * at shutdown) at that moment, under the registry's lock: it must be quick and must not call
 * back into the registry (egress revokes the session's proxy pass here). */
typedef void (*registry_remove_hook)(void *ctx, const char *session_id);
void registry_set_remove_hook(registry *r, registry_remove_hook hook, void *ctx);

/* Called with the id of every session whose last reference is gone, just before its disk is
 * unmounted (and deleted, unless kept at shutdown), outside the registry's lock: whatever
 * still uses its workspace must be gone when it returns (a sandbox booted ahead for it). kept:
 * the session lives on (shutdown): what a restart takes up again (its memory image) stays. */
typedef void (*registry_destroy_hook)(void *ctx, const char *session_id, bool kept);
void registry_set_destroy_hook(registry *r, registry_destroy_hook hook, void *ctx);

/* Spares: workspaces made ahead for a tenant's next new session, each with its sandbox booted
 * over it (domain/warm.h). adopt gives one (its id and malloc'd workspace become the new
 * session's); drop_all deletes every unadopted one (room for a session that needs the disk
 * space). Both are called outside the registry's lock. */
typedef struct {
    bool (*adopt)(void *ctx, size_t tenant, const char *template_id, char *id, size_t id_len, char **workspace);
    void (*drop_all)(void *ctx);
    void *ctx;
} registry_spares;
void registry_set_spares(registry *r, const registry_spares *sp);

/* A spare's disk: a fresh id no session has, and its new disk of the sessions' quota
 * (*workspace malloc'd); 0 on success, else no room (or an error, logged). A spare's sandbox
 * has registry_opts.size. */
int registry_make_spare_disk(registry *r, char *id, size_t id_len, char **workspace);

/* Deletes the disk of a spare no session adopted. */
void registry_drop_spare_disk(registry *r, const char *id);

/* Whether s (which the caller holds a reference to) has left the registry meanwhile. */
bool registry_removed(registry *r, const session *s);

/* Starts the idle reaper thread (sweeps every min(60, ttl/4) s, at least 1 s; also saves
 * the sessions' last access times every few seconds when they changed). */
int registry_start_reaper(registry *r);

/* What a registry operation came to; the API layer turns these into HTTP answers. */
typedef enum {
    SESSION_OK = 0,
    SESSION_NOT_FOUND, /* no such session (never created, deleted, or expired) */
    SESSION_FORBIDDEN, /* another tenant's session */
    SESSION_LIMIT,     /* the tenant already has max_sessions open */
    SESSION_CAPACITY,  /* no disk room for another workspace (server-wide cap or host disk) */
    SESSION_ERROR,     /* the workspace could not be made (logged) */
    SESSION_UNAVAILABLE, /* the fleet's shared registry cannot be reached: no new session */
    SESSION_STORAGE,   /* made, but the state file could not be saved: undone (fail closed) */
    SESSION_MOVING,    /* a drain is moving it to another node right now: retry shortly */
    SESSION_BUSY,      /* pause: a request (a command) is using it */
} session_result;

/* Creates a session of spec (NULL: the defaults; checked against max_sessions atomically)
 * with its disk: a spare's when the session has no egress, the default template and size, and
 * the tenant has one, else a new one, and saves it (with a state file) before it is handed
 * out: SESSION_STORAGE when that save failed (nothing is left of it). egress is copied.
 * SESSION_LIMIT with *open_now = the tenant's session count; SESSION_OK with a reference
 * in *out. */
session_result registry_create(registry *r, size_t tenant, int max_sessions, const json_t *egress,
                               const session_spec *spec, session **out, int *open_now);
/* How many sessions (and sessions being created) run on built template template_id (ours). */
int registry_template_users(registry *r, const char *template_id);

/* The tenant's session id with a reference in *out (last_accessed_at refreshed when touch,
 * and again when the last request holding it ends, so a long command's session is idle only
 * from its end): SESSION_OK, SESSION_NOT_FOUND or SESSION_FORBIDDEN. */
session_result registry_acquire(registry *r, const char *id, size_t tenant, bool touch, session **out);
void registry_release(registry *r, session *s);

/* Removes the tenant's session id (its disk goes when no request uses it any more):
 * SESSION_OK, SESSION_NOT_FOUND or SESSION_FORBIDDEN. */
session_result registry_delete(registry *r, const char *id, size_t tenant);

/* Whether session id is here (ready, being created, or kept for a later start). */
bool registry_has(registry *r, const char *id);

/* Removes session id whoever its tenant (a fleet declared it lost while this node was away):
 * true when it was here. */
bool registry_forget(registry *r, const char *id);

/* ---- a fleet's drain (drain/move.c) ---- */

/* Takes idle session id out of service for a move (requests get SESSION_MOVING), with a
 * reference in *out; false when a request holds it (a command runs: it finishes first) or it
 * is not here. */
bool registry_move_out_begin(registry *r, const char *id, session **out);
/* The move is over: moved, it leaves this node (its disk deleted, the fleet's row kept:
 * another node owns it); else it is back in service. Drops the reference. */
void registry_move_out_end(registry *r, session *s, bool moved);
/* The image file of session id while it is moving out (malloc'd), else NULL. */
char *registry_moving_image(registry *r, const char *id);
/* Freezes (or thaws) the disk of s, which is moving out: its image stays as it is while it is
 * copied. 0, or -1 with errno. */
int registry_move_freeze(registry *r, session *s, bool freeze);
/* A session moving in: id of spec (its template and size; spec->quota_bytes its quota) with the
 * disk another node sends (an image of image_bytes, which fill writes: disk/pool.h's
 * disk_receive), invisible (and with a reference in *out) until
 * registry_move_in_end. SESSION_OK; SESSION_CAPACITY when this node has no room for it (checked
 * before fill runs), SESSION_ERROR when it could not be made or did not arrive whole: the
 * reason in why. */
session_result registry_move_in(registry *r, const char *id, size_t tenant, const json_t *egress,
                                const session_spec *spec, long long image_bytes, disk_fill_fn fill, void *ctx,
                                double created_at, double last_used, session **out, char *why, size_t whylen);
/* ok: it is served and saved from now on (false when the save failed: undone); else it goes
 * (its disk deleted, the fleet's row kept for the node it came from). Drops the reference. */
bool registry_move_in_end(registry *r, session *s, bool ok);

/* ---- pause and resume (domain/pause.c drives them; the registry keeps the state and the
 * disk) ---- */

/* Begins pausing s (the caller holds a reference): waits for a pause or resume under way,
 * then SESSION_OK with s PAUSING (or, *already, PAUSED as it was: nothing to do);
 * SESSION_BUSY when another request holds it (a command runs) or, with only_if_idle, it was
 * used within its idle TTL; SESSION_NOT_FOUND when it was deleted meanwhile. */
session_result registry_pause_begin(registry *r, session *s, bool only_if_idle, bool *already);

/* Ends pausing s (its sandbox stopped): its disk is unmounted (the image kept), it is PAUSED
 * since now with state's image (files only: zeros) and saved before this returns. On failure
 * it is ACTIVE again: SESSION_ERROR (the disk stayed mounted) or SESSION_STORAGE (not saved). */
session_result registry_pause_end(registry *r, session *s, const session_pause_state *state);
/* (state NULL: the pause is given up, s is ACTIVE again: SESSION_ERROR.) */

/* Resumes s (the caller holds a reference): waits for a pause or resume under way; when it is
 * PAUSED, mounts its disk again and resets its idle clock (*resumed true), and s stays RESUMING
 * (every other request's resume waits) until the caller, its sandbox restored and checked,
 * calls registry_resume_end. SESSION_OK; SESSION_ERROR when its disk cannot be mounted (it
 * stays PAUSED, image kept); SESSION_NOT_FOUND when it was deleted meanwhile. */
session_result registry_resume(registry *r, session *s, bool *resumed, session_pause_state *was);
/* (was, unless NULL: the pause it resumed from, its memory image included; zeros otherwise.) */

/* Ends the resume registry_resume began (*resumed): again NULL, s is ACTIVE and saved so;
 * else (its restore failed) PAUSED once more on again's image, as registry_pause_end makes it
 * (its result: not SESSION_OK when s could not be paused again, and is ACTIVE). */
session_result registry_resume_end(registry *r, session *s, const session_pause_state *again);

/* The memory image directory (into dir) of tenant's session paused last with one made here
 * (not one taken from a fleet's store); false when it has none. */
bool registry_latest_memory_pause(registry *r, size_t tenant, char *dir, size_t len);

/* Whether session id is here and paused (or pausing, or resuming). */
bool registry_paused(registry *r, const char *id);

/* What s's state is now (and, paused, its pause) under the lock. */
session_state registry_state(registry *r, const session *s, session_pause_state *pause);

/* Called by the reaper, outside the lock, with each session of {"on_idle": "pause"} whose idle
 * TTL ended: pauses it (domain/pause.c) unless a request came meanwhile. */
typedef void (*registry_pause_hook)(void *ctx, const char *session_id, size_t tenant);
void registry_set_pause_hook(registry *r, registry_pause_hook hook, void *ctx);
/* Called by the reaper, outside the lock, after each of its sweeps (a fleet's paused sessions
 * in the shared store expire there: domain/pause.c). */
void registry_set_sweep_hook(registry *r, void (*hook)(void *ctx), void *ctx);

/* What a session list shows of one session. */
typedef struct {
    char id[17];
    json_t *egress; /* a reference */
    double created_at, last_accessed_at, expires_at;
    long long quota_bytes;
    char template_name[SESSION_TEMPLATE_MAX];
    sandbox_size size;
    bool paused;       /* PAUSED or PAUSING (else active) */
    double paused_at;
    bool on_idle_pause;
} session_info;

/* The tenant's sessions, newest first: a malloc'd array of *n entries (NULL when there are
 * none or memory ran out); free it with session_info_free. */
session_info *registry_list(registry *r, size_t tenant, size_t *n);
void session_info_free(session_info *v, size_t n);

/* The tenant's session id as a list shows it (in *out, its egress a reference the caller
 * drops), without touching it: SESSION_OK, SESSION_NOT_FOUND,
 * SESSION_FORBIDDEN or SESSION_MOVING. */
session_result registry_info(registry *r, const char *id, size_t tenant, session_info *out);

/* A session's template and size as the API shows them: "template", "memory_mb", "cpus",
 * "disk_mb", "max_processes" added to o. */
void session_shape_json(json_t *o, const char *template_name, const sandbox_size *size, long long quota_bytes);

/* Every ready session's id and last access time (malloc'd arrays of the returned count). */
size_t registry_times(registry *r, char (**ids)[17], double **times);

/* Every ready session's id and tenant index (malloc'd arrays of the returned count; the
 * admin's listing acquires each in turn). */
size_t registry_owners(registry *r, char (**ids)[17], size_t **owners);

size_t registry_count(registry *r);
size_t registry_count_tenant(registry *r, size_t tenant);
/* Of registry_count's, those paused (or pausing: as the listing says). */
size_t registry_count_paused(registry *r);

/* Current wall-clock time as float seconds, rounded to microseconds like time.time(). */
double epoch_now(void);

/* ---- a fleet's shared store (fleet/store.c) ---- */

/* The tenant of session id held here: false when it is not. */
bool registry_tenant_of(registry *r, const char *id, size_t *tenant);

/* The disks the registry's sessions live on. */
disk_pool *registry_disk(registry *r);

/* Paused s (the caller holds a reference) leaves this node: what this process holds of it goes
 * first (the destroy hook, as for a session kept: its kernels' hold, its sandbox entry), its
 * image moves to dst, recorded(ctx) says where it is now (false: the image comes back), and it
 * is forgotten here without releasing its fleet row (the store holds it); its last release
 * then touches nothing of a session of its id taken back meanwhile. false (logged) when it is
 * not paused, its image could not move or it was not recorded: it stays here, paused (a memory
 * image then restored as after a restart). */
bool registry_hand_over(registry *r, session *s, const char *dst, bool (*recorded)(void *ctx), void *ctx);

/* A paused session from the store: its image moved from src into this node's images and rec
 * held here, paused, as a restart restores it. SESSION_OK, SESSION_NOT_FOUND (its paused TTL
 * had ended: released), SESSION_ERROR (src kept when its image could not move). */
session_result registry_adopt_paused(registry *r, session_record *rec, const char *src);

#endif
