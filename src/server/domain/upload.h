/* A workspace file written whole or not at all, for bodies streamed as they arrive: the bytes
 * go to an unnamed file (O_TMPFILE) in the target's directory, which takes the target's name
 * only on commit (link under a hidden temporary name, then rename over the target). A body
 * that never completes (the client hung up, a short Content-Length, the quota) leaves
 * nothing behind, not even after a crash of airlockd. */
#ifndef AIRLOCKD_UPLOAD_H
#define AIRLOCKD_UPLOAD_H

#include <stddef.h>

typedef struct {
    int dir_fd;        /* the target's directory */
    int fd;            /* the unnamed file being written */
    char *last;        /* the target's name in dir_fd */
    unsigned long long written;
} upload_file;

/* Opens the unnamed file for ws/rel (rel as path_resolve gave it; missing parents made):
 * PATH_OK, PATH_NOSPACE (no inode or block for it) or PATH_ERROR. */
int upload_open(const char *ws, const char *rel, upload_file *u);

/* Appends n bytes: 0, or an errno (ENOSPC/EDQUOT: the disk is full). */
int upload_write(upload_file *u, const char *data, size_t n);

/* Gives the file its name, replacing the target, durably (its data synced before, its directory
 * after): 0, or an errno. The upload is closed. */
int upload_commit(upload_file *u);

/* Drops the file (its blocks return to the disk at once); harmless when closed. */
void upload_discard(upload_file *u);

#endif
