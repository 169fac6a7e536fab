/* Filesystem walks that never follow symlinks: allocated size of a tree, recursive
 * removal. Both work through directory fds so a sandboxed program swapping a directory
 * for a symlink cannot redirect them outside the workspace. */
#ifndef AIRLOCKD_FSUTIL_H
#define AIRLOCKD_FSUTIL_H

/* Allocated bytes (st_blocks * 512) of dir and everything below it; -1 on error. */
long long fs_tree_usage(const char *dir);

/* Removes dir and everything below it. 0, or -1 with errno set. */
int fs_rmtree(const char *dir);

#endif
