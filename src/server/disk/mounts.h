/* Mounts under the state directory: which are there (/proc/self/mountinfo), unmounting one,
 * and the shared bind mount that makes unmounts reach other mount namespaces' copies. */
#ifndef AIRLOCKD_DISK_MOUNTS_H
#define AIRLOCKD_DISK_MOUNTS_H

#include <stdbool.h>
#include <stddef.h>

/* Most mount points under one state directory that a scan reports. */
#define MOUNTS_MAX 65536

/* The mount points strictly below dir (absolute, symlink-free), in mountinfo order (a mount
 * comes after the one it sits on): a malloc'd array of *n malloc'd paths, NULL when none
 * (or on failure: then -1). Free with mounts_free. */
int mounts_under(const char *dir, char ***out, size_t *n);
void mounts_free(char **v, size_t n);

/* True when path is itself a mount point. */
bool mounts_is_mount_point(const char *path);

/* Unmounts path (never following a symlink); a busy mount is detached lazily and goes when
 * its last user does. 0, or -1 with errno set. */
int mounts_unmount(const char *path);

/* Unmounts every mount point strictly below dir, deepest first, except those keep(ctx, path)
 * keeps. Returns how many were unmounted. */
int mounts_unmount_under(const char *dir, bool (*keep)(void *ctx, const char *path), void *ctx);

/* Makes dir a mount point of its own (a bind mount onto itself in a peer group of its own,
 * unless it already is one; mounts below it are unmounted first, as the bind would cover them)
 * with shared propagation: unmounts below it then also reach the copies that other mount
 * namespaces made of them (a sandbox's, another program's `unshare -m`), so an image's loop
 * is released when its session goes. 0, or -1 with errno set. */
int mounts_make_shared(const char *dir);

#endif
