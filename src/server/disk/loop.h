/* Loop devices for workspace images: attach an image with autoclear, tell which loop serves a
 * file, and detach the loops a killed predecessor left serving files under a directory.
 * A loop is recognised by its backing file (/sys/block/loopN/loop/backing_file), so only
 * loops of this server's images are ever touched. */
#ifndef AIRLOCKD_DISK_LOOP_H
#define AIRLOCKD_DISK_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Attaches file (absolute, symlink-free) to a free loop device with autoclear and direct I/O:
 * the loop goes by itself when its last user (a mount) goes, also if the server dies before
 * mounting. Returns the open loop device (its path in dev), or -1 with errno set. */
int loop_attach(const char *file, char *dev, size_t devlen);

/* True when some loop device is backed by file (absolute, symlink-free); its name ("loop7")
 * in name when not NULL. A loop whose file was deleted does not count. */
bool loop_serving(const char *file, char *name, size_t namelen);

/* True when the block device dev is a loop backed by file. */
bool loop_device_backs(dev_t dev, const char *file);

/* Detaches every loop backed by a file directly under dir, unless keep(ctx, path) says
 * otherwise (a deleted file's path is given without the " (deleted)" mark). Returns how many
 * were detached. */
int loop_detach_under(const char *dir, bool (*keep)(void *ctx, const char *file), void *ctx);

#endif
