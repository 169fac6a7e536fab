/* Sandboxes created ahead for resumes (issue #26): most of a `runsc restore` is runsc making
 * the sandbox (its gofer, the sentry's process and platform), not loading the image. After a
 * session of a tenant is paused with its memory, one sandbox of the same spec is made ahead for
 * that tenant with `runsc create` (nothing runs in it: its agent and kernels come from an
 * image) and waits; the tenant's next resume of a paused session of that spec (or a session
 * made from a memory snapshot of it) restores into it
 * (`runsc restore` of an existing container loads the image into it), which takes about half
 * the time of a restore that makes its own sandbox. One is also wanted after a resume took one
 * while the tenant has another session paused with its memory, and at a start
 * (domain/pause.h pause_want_restore_ahead).
 *
 * Its /workspace is a directory of its own, a shared mount point (<state>/restore-spares/<id>/ws):
 * the gofer binds it when the spare is made, as a slave copy, so the session's workspace bound
 * onto it at the take reaches the gofer, which opens its mounts only when the image is loaded.
 * Its cgroup, made under the tenant's group, is renamed to the session's sandbox id at the take
 * and given the session's limits. Only a spare whose spec is the session's (save the workspace
 * and the cgroup) is taken: runsc restores an image into the sandbox it was saved from.
 *
 * Bounded: at most one spare per tenant, max in all (SANDBOX_WARM_MAX: sandboxes held ready),
 * each released after idle_seconds untaken or when its tenant's last session paused with its
 * memory is deleted (sbx_spares_drop), all at shutdown; a spare's processes are in the
 * server's cgroups and its mounts under its state directory, which a start clears. */
#ifndef AIRLOCKD_SANDBOX_RESTORE_SPARE_H
#define AIRLOCKD_SANDBOX_RESTORE_SPARE_H

#include "sandbox/sandbox.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct sbx_spares sbx_spares;

/* The spares of backend b under <state_dir>/restore-spares, what a killed predecessor left
 * there cleared (its processes were killed with its cgroups: its mounts are unmounted, its
 * directories removed). None are made until sbx_spares_configure. NULL with a message. */
sbx_spares *sbx_spares_open(sandbox_backend *b, const char *state_dir, char *errbuf, size_t errlen);

/* How many spares at most (0: none are made) and how long one waits untaken. */
void sbx_spares_configure(sbx_spares *sp, int max, int idle_seconds);

/* How many spares are made and wait (0 when sp is NULL). */
int sbx_spares_ready(sbx_spares *sp);

/* Every spare released (made ones ended, their mounts and directories removed). */
void sbx_spares_close(sbx_spares *sp);

/* After a pause with memory of a sandbox of tenant group `group` whose image (its spec kept
 * beside it as sandbox.json) is image_dir: a spare of that spec is made for the group in the
 * background, unless one is (a ready spare of another spec is replaced), the spec joins a named
 * network namespace (egress: never the same), or the bound is reached. */
void sbx_spares_want(sbx_spares *sp, const char *group, const char *image_dir);

/* Releases group's spares (made or being made) and returns once they are gone: its last
 * session paused with its memory was deleted. */
void sbx_spares_drop(sbx_spares *sp, const char *group);

/* Restores s (checkpointed, or made from an image: its spec in s->bundle, no cgroup yet; a
 * session made from a memory snapshot or taken from a fleet's store is such) from image_dir
 * into a ready spare of its
 * group and spec, as sandbox_session_restore does: 1 when restored that way (s now runs in it:
 * its cgroup, agent pipes, runsc_id and spare_dir are the spare's), 0 when no spare fits (s is
 * untouched: restore it the usual way), -1 when the restore into one failed (message in
 * errbuf; the spare is gone, s as it was). Under s->agent_mu. */
int sbx_spares_restore(sbx_spares *sp, sandbox *s, const char *image_dir, char *errbuf, size_t errlen);

/* What is left of the spare s was restored into once s's processes (and runsc's state of
 * sbx_runsc_id(s)) are gone: the workspace bound on its mount point, the directory.
 * s->runsc_id and s->spare_dir cleared. */
void sbx_spares_forget(sandbox *s);

#endif
