/* A session sandbox (session_sandbox.h) saved with its memory into an image directory and
 * brought back from it in the same sandbox struct (issue #26: pause with kernels). */
#ifndef AIRLOCKD_SANDBOX_SESSION_CHECKPOINT_H
#define AIRLOCKD_SANDBOX_SESSION_CHECKPOINT_H

#include "sandbox/sandbox.h"

#include <stdbool.h>
#include <stddef.h>

/* A save that failed and could not be undone: the sandbox was ended with it (its processes'
 * memory lost; its workspace is untouched). */
#define SANDBOX_SAVE_LOST (-2)

/* `runsc pause`, then `runsc checkpoint --leave-running --image-path image_dir` of s (an
 * existing, empty directory): 0 when saved (s's sandbox, still paused, is then ended: its
 * runsc, stdio and cgroup are gone; s waits for sandbox_session_restore or sandbox_release;
 * its network, if any, is no longer used: its connections were cut), 1 when it cannot be now
 * (a command or cell runs: s runs on), -1 when it failed and s was resumed (it runs on as
 * before, its memory whole; message in errbuf), SANDBOX_SAVE_LOST when it failed and s could
 * not be resumed (ended, its memory lost). A failed save never ends s by itself: runsc ends a
 * sandbox whose save without --leave-running fails (e.g. a full disk). */
int sandbox_session_checkpoint(sandbox *s, const char *image_dir, char *errbuf, size_t errlen);

/* `runsc restore` of s from image_dir under the same id, bundle and cgroup, the agent on new
 * stdin and stdout, on s's network (sandbox_session_set_network: a namespace made again with
 * the addresses of the one it was saved on; NULL: none): 0 when started (its first command
 * tells whether it answers), -1 with a message. The image is left in place. */
int sandbox_session_restore(sandbox *s, const char *image_dir, char *errbuf, size_t errlen);

/* True when s's last restore went into a sandbox made ahead (sandbox/restore_spare.h). */
bool sandbox_session_restored_ahead(sandbox *s);

/* The network checkpointed s is restored on (the one it ran on is closed after the checkpoint,
 * and net made again before the restore; NULL: none). Kept by the caller while s lives. */
void sandbox_session_set_network(sandbox *s, const sandbox_network *net);

/* A sandbox restored from image_dir by another airlockd process (the struct of its checkpoint
 * is gone): its container id and spec kept there, its workspace, tenant, size and network from o, the
 * slots in slots_busy (bit i: slot i) held by processes the image brings back. fork: a memory
 * snapshot's image restored as a new sandbox beside the one it was taken of (a container id,
 * bundle and cgroup of its own, the kept spec rebased on o's workspace and root, on o's network).
 * NULL with errbuf when it could not be restored (nothing of it left). */
sandbox *sandbox_session_from_image(sandbox_backend *b, const sandbox_opts *o, const char *image_dir,
                                    unsigned slots_busy, bool fork, char *errbuf, size_t errlen);

/* The mark beside an image (in image_dir) made of a sandbox whose agent answers FRAME_PING
 * (sandbox_session_ping): its restore is checked with a ping; one without (an older build's
 * image) with a command. keep: 0, or -1. */
int sandbox_image_keep_agent_ping(const char *image_dir);
bool sandbox_image_agent_pings(const char *image_dir);

/* runsc's version (the first line of `runsc --version`: "runsc version release-..."): an
 * image is restored only by the version that made it. Asked of runsc once, and again when its
 * file changes (another inode, size or mtime: a runsc replaced under a running airlockd). 0, or
 * -1. */
int sandbox_runsc_version(sandbox_backend *b, char *out, size_t len);

#endif
