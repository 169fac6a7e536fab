/* The workspace disks of one server: session <id> has the image <state>/images/<id>.img
 * mounted on <state>/workspaces/<id>, and its workspace is that mount's subdirectory. The
 * pool keeps the images' total size under a server-wide cap and refuses an image that would
 * leave the state directory's filesystem with less than a reserve (the server's own state,
 * SQLite stores, sandbox bundles). At start it takes over what a killed predecessor left
 * mounted and removes the rest of its leftovers: only mounts below <state>/workspaces, loops
 * backed by files in <state>/images and images of no session are touched. */
#ifndef AIRLOCKD_DISK_POOL_H
#define AIRLOCKD_DISK_POOL_H

#include <stdbool.h>
#include <stddef.h>

typedef struct disk_pool disk_pool;

typedef struct {
    long long total_cap; /* most bytes all images may take together; 0: see disk_pool_start */
    long long reserve;   /* bytes a new image must leave free on the state dir's filesystem */
} disk_limits;

typedef enum {
    DISK_OK = 0,
    DISK_FULL,  /* over the cap, or the host has no room: a 503 "try again shortly" */
    DISK_HELD,  /* restoring: the image is kept but cannot be mounted now (mounted elsewhere,
                 * damaged, a failed mount): the session is not served this run */
    DISK_ERROR, /* logged */
} disk_result;

/* Makes <state>/images and <state>/workspaces (0700) and turns the latter into a shared
 * mount (see disk/mounts.h). NULL with a message on failure. */
disk_pool *disk_pool_open(const char *state_dir, const disk_limits *l, char *err, size_t errlen);

/* After the sessions are back (disk_open) and leftovers are gone (disk_cleanup): fixes the
 * default cap (the images kept plus the free space less the reserve) and logs the figures. */
void disk_pool_start(disk_pool *p);

/* The bytes the images take now (*used) under the cap (*cap), for the status page. */
void disk_pool_usage(disk_pool *p, long long *used, long long *cap);

/* Bytes kept beside the images that count against the same cap (snapshots,
 * store/snapshots.h). take reserves bytes: false when they do not fit under the cap or would
 * leave the host less than the reserve (*why says which, with the figures); adjust adds
 * (bytes found at start, a reservation grown) or, negative, gives back. */
bool disk_pool_take(disk_pool *p, long long bytes, char *why, size_t whylen);
void disk_pool_adjust(disk_pool *p, long long delta);

/* Unmounts the workspaces mount (every session must be closed or destroyed) and frees. */
void disk_pool_close(disk_pool *p);

/* A new session's disk of quota_bytes, mounted; *workspace is the malloc'd workspace path. */
disk_result disk_create(disk_pool *p, const char *id, long long quota_bytes, char **workspace);

/* A persisted session's disk: its mount taken over when still there (*adopted), else its image
 * checked and mounted. DISK_HELD keeps the image (counted against the cap) but mounts
 * nothing; DISK_ERROR only when the image is gone. */
disk_result disk_open(disk_pool *p, const char *id, char **workspace, bool *adopted);

/* ---- a drain's moves (drain/move.c) ---- */

/* The session's image file (malloc'd), or NULL. */
char *disk_image_path(disk_pool *p, const char *id);

/* Freezes the session's mounted filesystem (FIFREEZE: everything it holds is written to the
 * image, which stays consistent and unchanged; writers wait) or thaws it; 0, or -1 with errno. */
int disk_freeze(disk_pool *p, const char *id);
int disk_thaw(disk_pool *p, const char *id);

/* Writes a disk arriving from another node: called with the image's descriptor (open for
 * writing, it reads as zeros where nothing is written); 0 when it is whole. */
typedef int (*disk_fill_fn)(void *ctx, int fd);

/* A session's disk arriving from another node: an image of bytes (the caller bounds it by the
 * session's quota) is taken from the cap and must leave the host's reserve, before anything
 * is written (DISK_FULL, nothing made, when it does not fit: *why says so); then fill writes
 * it, it is synced, checked (e2fsck -p) and mounted, and *workspace is the malloc'd
 * workspace path. DISK_ERROR (the reason in *why) leaves nothing behind. */
disk_result disk_receive(disk_pool *p, const char *id, long long bytes, disk_fill_fn fill, void *ctx,
                         char **workspace, char *why, size_t whylen);

/* ---- pause and resume (domain/pause.c): a paused session keeps its image, unmounted and
 * counted against the cap, with no loop device attached ---- */

/* Unmounts the session's disk (its loop detaches with it) and keeps its image; 0, or -1 when
 * it is still mounted (logged). */
int disk_pause(disk_pool *p, const char *id);

/* Mounts a paused session's kept image again; *workspace is the malloc'd workspace path.
 * DISK_ERROR (logged, the image kept) when it cannot. */
disk_result disk_resume(disk_pool *p, const char *id, char **workspace);

/* A persisted paused session's image at start: counted against the cap and left unmounted
 * (a mount a killed predecessor left is undone). DISK_ERROR when the image is gone. */
disk_result disk_keep(disk_pool *p, const char *id);

/* ---- a fleet's shared store (fleet/store.c, docs/fleet.md "The shared store") ---- */

/* A paused session's kept image leaves this node for dst (util/move_file.h: a rename on one
 * filesystem), no longer counted against the cap; 0, or -1 (logged, the image kept). */
int disk_hand_over(disk_pool *p, const char *id, const char *dst);

/* A paused session's image comes from src into this node's images (then disk_keep counts it);
 * 0, or -1 (logged, src kept). */
int disk_take_over(disk_pool *p, const char *id, const char *src);

/* The session's workspace path (malloc'd) whether or not its disk is mounted, or NULL. */
char *disk_workspace_path(disk_pool *p, const char *id);

/* Unmounts the session's disk and keeps its image (shutdown with persistence). */
void disk_close(disk_pool *p, const char *id);

/* Unmounts the session's disk and deletes its image. */
void disk_destroy(disk_pool *p, const char *id);

/* Removes a killed predecessor's leftovers of every session for which live(ctx, id) is false:
 * its mounts (any mount below <state>/workspaces but live sessions'), loops backed by its
 * image, the image itself and its mount point directory. */
void disk_cleanup(disk_pool *p, bool (*live)(void *ctx, const char *id), void *ctx);

#endif
