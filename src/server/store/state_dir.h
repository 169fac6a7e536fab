/* The state directory's ownership: airlockd works only in a directory it created itself,
 * recognised by a marker file naming the layout's format, and locked (flock on the marker)
 * while a server uses it. A directory that is not empty and has no marker is someone else's:
 * it is refused and nothing in it is touched. */
#ifndef AIRLOCKD_STATE_DIR_H
#define AIRLOCKD_STATE_DIR_H

#include <stddef.h>

#define STATE_DIR_MARKER ".airlockd-state"
#define STATE_DIR_FORMAT 1

/* Creates path (and its parents) when missing, or accepts it when it is empty or carries a
 * marker of a format this server reads; then writes the marker if new and locks it (waiting up
 * to 5 s for a predecessor that is still exiting). On success
 * *real is the malloc'd absolute, symlink-free path and *lock_fd holds the lock (close it at
 * exit). -1 with a message naming the directory and what to do otherwise. */
int state_dir_claim(const char *path, char **real, int *lock_fd, char *err, size_t errlen);

#endif
