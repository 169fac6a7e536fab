/* A memory snapshot of a running session sandbox (session_snapshot.c): saved while it goes on;
 * a fork restores the image as a sandbox of its own (session_checkpoint.h,
 * sandbox_session_from_image with fork). */
#ifndef AIRLOCKD_SANDBOX_SESSION_SNAPSHOT_H
#define AIRLOCKD_SANDBOX_SESSION_SNAPSHOT_H

#include "sandbox/sandbox.h"

#include <stddef.h>

/* What runs while a memory snapshot's sandbox is held still (sandbox_session_snapshot): 0, or
 * -1 (the snapshot is given up). */
typedef int (*sandbox_still_fn)(void *ctx);

/* A memory snapshot of running s: `runsc pause`, `runsc checkpoint --leave-running` into
 * image_dir (an existing, empty directory; s's spec kept there as sandbox.json, with egress its
 * proxy login, sandbox/image_login.h), then still(ctx)
 * while nothing in s runs (its workspace is then as the image saw it), then `runsc resume`.
 * 0 when saved; 1 when it cannot be now (a command or cell runs); -1 failed (message in
 * errbuf): s runs on in these cases (it is thawed, frozen again once idle); SANDBOX_SAVE_LOST
 * when s could not be resumed after it: s was ended, its processes' memory lost. */
int sandbox_session_snapshot(sandbox *s, const char *image_dir, sandbox_still_fn still, void *ctx, char *errbuf,
                             size_t errlen);

#endif
