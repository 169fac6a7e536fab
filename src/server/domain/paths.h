/* Workspace path rules (contract 2.5): a client path is joined to the workspace,
 * resolved like Python's os.path.realpath, and must stay inside the workspace. Files are
 * then opened component by component without following symlinks. */
#ifndef AIRLOCKD_PATHS_H
#define AIRLOCKD_PATHS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* The longest path a client may give (bytes) and the deepest it may reach (directory levels,
 * read lexically: "a/../b" reaches 1); the same bounds hold once symlinks are resolved
 * (docs/server.md "Limits"). */
#define PATH_MAX_BYTES 4096
#define PATH_MAX_DEPTH 256

enum {
    PATH_OK = 0,
    PATH_DENIED,   /* 403: resolves outside the workspace */
    PATH_ERROR,    /* 500: NUL byte, a directory, a file where a directory is needed, ... */
    PATH_MISSING,  /* read: the file does not exist */
    PATH_TOO_LONG, /* 400: over PATH_MAX_BYTES (checked before any filesystem work) */
    PATH_TOO_DEEP, /* 400: over PATH_MAX_DEPTH (likewise) */
    PATH_NOSPACE,  /* write: the workspace's disk is full (ENOSPC/EDQUOT making a directory or the file) */
};

/* ws must be an absolute, symlink-free directory. On PATH_OK *rel is the malloc'd
 * resolved path relative to ws ("" = the workspace itself). Time and memory are linear in
 * the path's length plus the symlink targets met (at most 256 distinct symlinks). */
int path_resolve(const char *ws, const char *path, size_t len, char **rel);
/* path_resolve with other bounds (the unit tests resolve paths far over the defaults). */
int path_resolve_bounded(const char *ws, const char *path, size_t len, size_t max_bytes, size_t max_depth,
                         char **rel);

/* Opens an existing regular file for reading (PATH_OK, PATH_MISSING or PATH_ERROR). */
int path_open_read(const char *ws, const char *rel, int *fd);

/* Creates missing parent directories (owned by the sandbox user), then creates or
 * truncates the file (PATH_OK, PATH_NOSPACE or PATH_ERROR). */
int path_open_write(const char *ws, const char *rel, int *fd);

/* Opens the directory holding rel's last component without following symlinks (creating
 * missing ones, owned by the sandbox user, when create is set); *last points into rel.
 * An fd, or -1 with errno set. rel must not be "". */
int path_open_parent(const char *ws, const char *rel, bool create, const char **last);

/* Opens an existing directory (rel "" = the workspace) without following symlinks
 * (PATH_OK, PATH_MISSING or PATH_ERROR: not a directory). */
int path_open_dir(const char *ws, const char *rel, int *fd);

/* Removes ws/rel if it is still the file whose fstat was st (a write that did not fit).
 * 0 or -1. */
int path_remove_file(const char *ws, const char *rel, const struct stat *st);

#endif
