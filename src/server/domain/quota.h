/* The soft per-workspace disk quota (contract 2.4): usage = allocated blocks of the
 * workspace tree, symlinks measured but not followed. */
#ifndef AIRLOCKD_QUOTA_H
#define AIRLOCKD_QUOTA_H

#include <stddef.h>

/* For a write of new_bytes to ws/rel: NULL when it fits, else the malloc'd 413 message
 * ("Writing <path> would use X.X MB of the workspace's Q MB disk quota. Delete files first."). */
char *quota_write_check(const char *ws, const char *rel, const char *path_as_sent,
                        size_t new_bytes, long long quota_bytes);

/* After an exec: NULL when within quota, else the malloc'd warning text. */
char *quota_exec_warning(const char *ws, long long quota_bytes);

#endif
