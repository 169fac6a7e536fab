/* Sandboxes booted ahead for sessions (ours): after each command of a session, the sandbox
 * for its next command boots in the background and waits frozen, so the next exec only hands
 * the command over. Each sandbox still runs exactly one command and is destroyed; only
 * /workspace (the session's own disk) is shared with the one before.
 *
 * Bounded: at most max_ready sandboxes held (booting or waiting), the most recently used
 * sessions first (a new want evicts the longest unused waiting one when full); at most
 * max_booting boot at once; a waiting sandbox unused for idle_seconds is released. A session
 * without one (first command, evicted, egress, still queued to boot) runs cold, as before.
 * One thread boots them: a sandbox dies with the thread that started it.
 *
 * Ours, SANDBOX_EXEC_MODE=session (warm_session.c): the same table also holds each session's
 * own long-lived sandbox, whose agent runs every command of the session in a fresh container
 * (sandbox/session_sandbox.h). It boots when the session is made, waits frozen between
 * commands, is lent to one command at a time and given back, counts against max_ready like
 * any other (the longest idle one is released for a new want), is released after idle_seconds
 * without a command and with the session (warm_forget); one that died (memory limit) is
 * released and its session's next one boots, the workspace untouched. */
#ifndef AIRLOCKD_WARM_H
#define AIRLOCKD_WARM_H

#include "domain/sessions.h"
#include "sandbox/sandbox.h"
#include "sandbox/session_snapshot.h"

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>

typedef struct warm_pool warm_pool;

/* The workspace disks of spares (sandboxes booted ahead for a tenant's next new session):
 * make gives a fresh session id (id_len bytes with its NUL) and its new, empty disk's
 * workspace (malloc'd), 0 on success; drop deletes the disk of a spare no session adopted. */
typedef struct {
    int (*make)(void *ctx, char *id, size_t id_len, char **workspace);
    void (*drop)(void *ctx, const char *id);
    void *ctx;
} warm_spare_disks;

/* SANDBOX_EXEC_MODE=session, a session with egress rules: the network of its own sandbox
 * (egress/), open as long as that sandbox lives (its commands share it: their only way out
 * is the session's proxy). open gives a handle and *net, or NULL with a message (as: the proxy
 * login a sandbox restored from a memory image is given, the one its processes hold; NULL: the
 * session's own); close ends it, after the sandbox. */
typedef struct {
    void *(*open)(void *ctx, const char *key, const char *tenant, double created_at, const json_t *rules,
                  const sandbox_proxy_login *as, const sandbox_network **net, char *errbuf, size_t errlen);
    void (*close)(void *ctx, void *handle);
    void *ctx;
} warm_session_network;

typedef struct {
    int max_ready;    /* SANDBOX_WARM_MAX; 0: no sandbox is booted ahead */
    int idle_seconds; /* SANDBOX_WARM_IDLE_SECONDS */
    int max_booting;  /* boots at once (the CPUs) */
    int spares;       /* SANDBOX_WARM_NEW: spares per tenant (0: new sessions start cold) */
    sandbox_size spare_size; /* a spare's sandbox: the sessions' default size */
    bool sessions;    /* SANDBOX_EXEC_MODE=session: sessions get a sandbox of their own */
    warm_spare_disks disks;
    warm_session_network net;
} warm_settings;

/* NULL with a message when the thread cannot start; NULL without one (errbuf "") when
 * max_ready is 0 or the backend cannot boot ahead: then every command runs cold. */
warm_pool *warm_new(sandbox_backend *b, const warm_settings *ws, char *errbuf, size_t errlen);

/* Releases every sandbox held (spares' disks deleted) and stops the thread (no command may be
 * running in one). */
void warm_free(warm_pool *w);

/* Boots a sandbox ahead for session key over workspace (absolute), for tenant, of size (NULL:
 * the default), on root (a template's, sandbox_opts.root_dir; NULL: the default); name
 * prefixes its id. Does nothing when key already has one, or when full with nothing to evict. */
void warm_want(warm_pool *w, const char *key, const char *workspace, const char *tenant, const sandbox_size *size,
               const char *root);

/* key's sandbox, booted (waiting up to a few seconds for a boot under way, less if cancel_fd
 * hangs up), now the caller's to sandbox_run and sandbox_release; NULL when there is none
 * (run cold). */
sandbox *warm_take(warm_pool *w, const char *key, int cancel_fd);

/* Keeps settings.spares sandboxes booting or booted for tenant's next new sessions on root (a
 * built template's; NULL: the default root: spares are kept per template in use), each over
 * a fresh disk of its own, of settings.spare_size (a spare counts against max_ready like any other, and is released
 * when idle like any other). */
void warm_want_spare(warm_pool *w, const char *tenant, const char *root);

/* Adopts one of tenant's spares on root (NULL: the default) for a new session: its id (id_len bytes with the NUL) and
 * workspace (malloc'd) are the session's from now on, and its sandbox is the session's first
 * (warm_take with that id). false when tenant has none booting or booted. */
bool warm_adopt_spare(warm_pool *w, const char *tenant, const char *root, char *id, size_t id_len,
                      char **workspace);

/* Releases every spare and deletes its disk, returning once they are gone (room for a session
 * that needs the disk space). */
void warm_drop_spares(warm_pool *w);

/* Releases key's sandbox, if any, and returns once it is gone (its workspace is then free to
 * unmount). */
void warm_forget(warm_pool *w, const char *key);

/* Whether sessions get a sandbox of their own (settings.sessions, and the backend can: gVisor
 * with the agent). */
bool warm_sessions(const warm_pool *w);

/* Boots session s's own sandbox (over its workspace, for tenant, on root: its template's, NULL
 * the default; on its egress network when it has rules) unless it has one. */
void warm_want_session(warm_pool *w, const session *s, const char *tenant, const char *root);

/* Runs command in session s's own sandbox (on o->root_dir; booting it first when it has none; with wait,
 * waiting for a boot under way) with o's per-command options (o->network unset: a session
 * with egress has its network in its sandbox). 0 ran, -1 failed (errbuf), 1 not run there:
 * run it another way (every slot of the session's busy with parallel commands, still
 * booting, none could be had, or it cannot take this command). */
int warm_session_run(warm_pool *w, const session *s, const sandbox_opts *o, const char *command,
                     int timeout_seconds, bool wait, sandbox_result *out, char *errbuf, size_t errlen);

/* Borrows session s's own sandbox for a long-lived process (a kernel: sandbox/session_sandbox.h
 * sandbox_session_spawn), as a command does but for as long as it wants: booting it first when
 * it has none, waiting for a boot under way. NULL when none can be had (not session mode, the
 * table full, its boot failed, cancel_fd hung up). The sandbox is neither frozen-released when
 * idle nor evicted while borrowed; give it back (warm_session_give_back) before warm_forget. */
sandbox *warm_session_borrow(warm_pool *w, const session *s, const char *tenant, const char *root, int cancel_fd);
void warm_session_give_back(warm_pool *w, const session *s, sandbox *sb);

/* Releases key's sandboxes booted ahead for one command (not its own session sandbox): a pause
 * with memory keeps only that one. */
void warm_forget_waiters(warm_pool *w, const char *key);
/* A pause with memory (domain/pause.c): s's own sandbox saved into image_dir and ended, its
 * entry (lent to its kernels) kept; sandbox_session_checkpoint's 0 / 1 (not now) / -1. */
int warm_session_checkpoint(warm_pool *w, const session *s, const char *image_dir, char *errbuf, size_t errlen);
/* Its resume: s's sandbox restored from image_dir in that entry and checked (its agent runs a
 * command). 0, or -1 with a message (the sandbox is then unusable); 1 when that entry is gone
 * (airlockd restarted since): warm_session_restore_anew then. */
int warm_session_restore(warm_pool *w, const session *s, const char *image_dir, char *errbuf, size_t errlen);
/* True when s's sandbox was last restored into one made ahead (sandbox/restore_spare.h). */
bool warm_session_restored_ahead(warm_pool *w, const session *s);
/* The same after a restart: a new entry of s (for tenant, on root) whose sandbox is restored
 * from image_dir (sandbox_session_from_image: slots_busy held by its kernels' processes) and
 * checked, then lent to its borrowers kernels. The sandbox, or NULL with errbuf. */
sandbox *warm_session_restore_anew(warm_pool *w, const session *s, const char *tenant, const char *root,
                                   const char *image_dir, unsigned slots_busy, int borrowers, bool fork,
                                   const sandbox_proxy_login *login, char *errbuf, size_t errlen);
/* (fork: image_dir is a memory snapshot's, restored as s's own new sandbox: sandbox_session_from_image.
 * login: with egress, the proxy login kept with the image, given to s's network when its egress
 * state is made now; NULL: s's own.) */

/* A memory snapshot of s's own sandbox while it runs (sandbox_session_snapshot): still(ctx)
 * runs while it is held still. Its 0 / 1 (not now) / -1; 1 too when s's sandbox cannot be had now. */
int warm_session_snapshot(warm_pool *w, const session *s, const char *image_dir, sandbox_still_fn still, void *ctx,
                          char *errbuf, size_t errlen);

/* The sandboxes held, by state (for GET /metrics): booting (wanted, starting or booting),
 * ready (booted, waiting frozen), in use (a session's own sandbox lent to commands), and how
 * many of all of them are spares for tenants' next sessions. */
typedef struct {
    int booting, ready, in_use, spares;
} warm_counts;
void warm_count(warm_pool *w, warm_counts *out);

/* For a server exiting without cleanup (_exit): kills the processes of every sandbox held,
 * so that none is left frozen (the next start removes the rest). */
void warm_abandon(warm_pool *w);

#endif
