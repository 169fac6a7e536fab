/* The one directory-tree walker of airlockd, and the tree usage and removal built on it.
 * It never follows a symlink, never leaves the root's filesystem, and never recurses: the
 * path from the root is an explicit stack on the heap, each directory's names are read at
 * once, and at most FS_WALK_OPEN_DIRS directories below the root are open at a time (the
 * others are reopened through ".." or by name from an open ancestor, and must be the same
 * device and inode as when first seen). So a tree any number of levels deep costs bounded
 * stack and descriptors and no path longer than one name, and a program swapping
 * directories for symlinks meanwhile cannot lead it out of the tree. */
#ifndef AIRLOCKD_FS_WALK_H
#define AIRLOCKD_FS_WALK_H

#include <stddef.h>
#include <sys/stat.h>

#define FS_WALK_OPEN_DIRS 16

typedef enum {
    FS_ENTRY,    /* an entry below the root, before the contents of a directory */
    FS_DIR_DONE, /* a directory below the root, after all its contents */
} fs_event;

typedef struct {
    fs_event event;
    int dirfd;             /* the directory holding the entry, open during the call */
    const char *name;      /* the entry's name in it */
    const struct stat *st; /* lstat of the entry; NULL for FS_DIR_DONE */
    size_t depth;          /* 1 for the root's own entries */
} fs_entry;

/* What a visitor returns: FS_CONTINUE; FS_SKIP (on a directory's FS_ENTRY: do not go into
 * it, and no FS_DIR_DONE for it); or -1 with errno set, recorded as the walk's failure
 * while the walk goes on. */
enum { FS_CONTINUE = 0, FS_SKIP = 1 };
typedef int (*fs_visit)(void *ctx, const fs_entry *e);

/* Visits the tree below the open directory rootfd (left open), each directory's entries
 * before going into the first subdirectory. 0 when everything was visited and no visitor
 * failed; else -1 with errno from the first failure, after visiting all it could. */
int fs_walk(int rootfd, fs_visit visit, void *ctx);

/* Allocated bytes (st_blocks * 512) of dir and everything below it; -1 when dir cannot be
 * opened as a directory (a symlink included). Entries that vanish meanwhile do not count. */
long long fs_tree_usage(const char *dir);

/* Removes dir and everything below it (a symlink or file at dir is unlinked). 0 (also when
 * dir does not exist), or -1 with errno set; removes all it can either way. */
int fs_rmtree(const char *dir);

#endif
