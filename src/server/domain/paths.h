/* Workspace path rules (contract 2.5): a client path is joined to the workspace,
 * resolved like Python's os.path.realpath, and must stay inside the workspace. Files are
 * then opened component by component without following symlinks. */
#ifndef AIRLOCKD_PATHS_H
#define AIRLOCKD_PATHS_H

#include <stddef.h>
#include <sys/stat.h>

enum {
    PATH_OK = 0,
    PATH_DENIED,  /* 403: resolves outside the workspace */
    PATH_ERROR,   /* 500: NUL byte, a directory, a file where a directory is needed, ... */
    PATH_MISSING, /* read: the file does not exist */
    PATH_NOSPACE, /* write: the workspace's disk is full (ENOSPC/EDQUOT making a directory or the file) */
};

/* ws must be an absolute, symlink-free directory. On PATH_OK *rel is the malloc'd
 * resolved path relative to ws ("" = the workspace itself). */
int path_resolve(const char *ws, const char *path, size_t len, char **rel);

/* Opens an existing regular file for reading (PATH_OK, PATH_MISSING or PATH_ERROR). */
int path_open_read(const char *ws, const char *rel, int *fd);

/* Creates missing parent directories (owned by the sandbox user), then creates or
 * truncates the file (PATH_OK, PATH_NOSPACE or PATH_ERROR). */
int path_open_write(const char *ws, const char *rel, int *fd);

/* Removes ws/rel if it is still the file whose fstat was st (a write that did not fit).
 * 0 or -1. */
int path_remove_file(const char *ws, const char *rel, const struct stat *st);

#endif
