/* Making a rename or a new file durable: syncing the directory that names it. */
#ifndef AIRLOCKD_UTIL_SYNC_H
#define AIRLOCKD_UTIL_SYNC_H

/* fsync of fd (a directory opened by the caller; -1 passes through), then close: 0, or -1
 * with errno. */
int sync_close(int fd);

/* fsync of the directory dir: 0, or -1 with errno. */
int sync_dir(const char *dir);

/* fsync of the directory holding path ("." for a bare name): 0, or -1 with errno. */
int sync_parent(const char *path);

/* syncfs of the filesystem holding path (everything written to it so far is on disk): 0, or
 * -1 with errno. */
int sync_filesystem(const char *path);

#endif
