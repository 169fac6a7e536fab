/* The soft disk quota: usage measured with the tree walker, the 413 and warning texts. */
#include "domain/quota.h"

#include "fs/walk.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MB 1048576.0

char *quota_write_check(const char *ws, const char *rel, const char *path_as_sent,
                        size_t new_bytes, long long quota_bytes)
{
    long long usage = fs_tree_usage(ws);
    if (usage < 0)
        usage = 0;
    char *full = malloc(strlen(ws) + strlen(rel) + 2);
    if (full) {
        sprintf(full, "%s/%s", ws, rel);
        struct stat st;
        /* the file being replaced frees its blocks */
        if (*rel && lstat(full, &st) == 0 && S_ISREG(st.st_mode))
            usage -= (long long)st.st_blocks * 512;
        free(full);
    }
    long long projected = usage + (long long)new_bytes;
    if (projected <= quota_bytes)
        return NULL;
    char *msg = NULL;
    if (asprintf(&msg, "Writing %s would use %.1f MB of the workspace's %.0f MB disk quota. Delete files first.",
                 path_as_sent, (double)projected / MB, (double)quota_bytes / MB) < 0)
        return strdup("Writing would exceed the workspace's disk quota. Delete files first.");
    return msg;
}

char *quota_exec_warning(const char *ws, long long quota_bytes)
{
    long long usage = fs_tree_usage(ws);
    if (usage <= quota_bytes)
        return NULL;
    char *msg = NULL;
    if (asprintf(&msg, "Workspace uses %.1f MB, over its %.0f MB disk quota. Delete files before writing more.",
                 (double)usage / MB, (double)quota_bytes / MB) < 0)
        return NULL;
    return msg;
}
