/* One workspace's disk image: an ext4 filesystem in a file, fully allocated on the host at
 * creation, attached to a loop device and mounted nosuid,nodev,noatime. The workspace is the
 * subdirectory IMAGE_WORKSPACE of the mount, owned by the sandbox user, so lost+found (which
 * e2fsck recreates) stays out of the sandbox's sight. */
#ifndef AIRLOCKD_DISK_IMAGE_H
#define AIRLOCKD_DISK_IMAGE_H

#include <stdbool.h>
#include <stddef.h>

#define IMAGE_WORKSPACE "w"

/* The e2fsprogs programs (found once, at start). */
typedef struct {
    char *mke2fs;
    char *e2fsck;
} image_tools;

/* Finds mke2fs and e2fsck in the system directories. -1 with a message when missing. */
int image_tools_find(image_tools *t, char *err, size_t errlen);
void image_tools_free(image_tools *t);

/* The most bytes the image file for a quota takes (what the pool reserves before making it):
 * the filesystem's usable space at that size is at least the quota. */
long long image_bytes_for(long long quota_bytes);

typedef enum {
    IMAGE_OK = 0,
    IMAGE_NOSPACE, /* the host has no room for it (fallocate: ENOSPC) */
    IMAGE_HELD,    /* a loop device elsewhere still serves it: mounting it twice corrupts it */
    IMAGE_DAMAGED, /* e2fsck -p could not repair it */
    IMAGE_FAILED,  /* anything else (message in err) */
} image_result;

/* A fresh file of bytes at path (which must not exist), fully reserved on the host (a full
 * host disk fails here, cleanly, instead of later as I/O errors inside the image); it reads
 * as zeros. Nothing is left behind on failure. */
image_result image_reserve(const char *path, long long bytes, char *err, size_t errlen);

/* Creates path (which must not exist) fully reserved on the host with an empty ext4
 * filesystem where a command can write the quota and at most ~0.6 MB more (whatever the
 * size: the filesystem's own costs are measured, not guessed), in *bytes (at most
 * image_bytes_for(quota_bytes)). Nothing is left behind on failure. */
image_result image_create(const image_tools *t, const char *path, long long quota_bytes, long long *bytes,
                          char *err, size_t errlen);

/* Checks an image that no loop serves (e2fsck -p: repairs what is safe to repair). */
image_result image_check(const image_tools *t, const char *path, char *err, size_t errlen);

/* Mounts image (absolute, symlink-free) on the directory mnt, after waiting a bounded time for
 * a loop that still serves it to go (IMAGE_HELD if it does not). With check, runs
 * image_check first. Creates the workspace subdirectory on first use. */
image_result image_mount(const image_tools *t, const char *image, const char *mnt, bool check, char *err,
                         size_t errlen);

/* Creates the workspace subdirectory of the image mounted on mnt unless it exists. -1 with a
 * message on failure. */
int image_workspace_dir(const char *mnt, char *err, size_t errlen);

/* True when mnt is the mount point of image (through a loop backed by it): a mount that a
 * killed predecessor left, to be taken over as it is. */
bool image_mounted_at(const char *image, const char *mnt);

#endif
