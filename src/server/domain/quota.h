/* THE workspace disk quota (contract 2.4). Each workspace is its own filesystem (disk/), so
 * the kernel enforces the hard limit while anything writes (ENOSPC, files, directories and
 * inodes all count), and usage is read from it in O(1) (statvfs: no tree walk). On top, the
 * contract's soft layer: a files-API write that would take the workspace over its quota is
 * refused with the 413 text, and a command that left it over quota gets the warning. */
#ifndef AIRLOCKD_QUOTA_H
#define AIRLOCKD_QUOTA_H

#include <stddef.h>

/* Bytes the workspace's disk holds (allocated blocks: files, directories, symlinks); -1 when
 * unknown. */
long long quota_usage(const char *ws);

/* Bytes that may still be written: the quota left, and no more than the disk's free space. */
long long quota_free(const char *ws, long long quota_bytes);

typedef enum {
    QUOTA_WRITTEN = 0,
    QUOTA_EXCEEDED, /* *msg is the 413 text; nothing was left behind */
    QUOTA_FAILED,   /* not written (500) */
    QUOTA_IO,       /* the disk failed to store it (an I/O error writing or syncing): the
                     * partial file is removed, never acknowledged (507) */
} quota_write_result;

/* Writes data to ws/rel (rel as path_resolve gave it; parents made as needed), whole, or not
 * at all: refused before anything is touched when it would take the workspace over
 * quota_bytes or does not fit its disk, and when the disk fills meanwhile (a command writing
 * at the same time) the partial file is removed and the answer is the same refusal. *msg
 * (malloc'd): "Writing <path> would use X.X MB of the workspace's Q MB disk quota. Delete
 * files first." */
quota_write_result quota_write_file(const char *ws, const char *rel, const char *path_as_sent, const char *data,
                                    size_t len, long long quota_bytes, char **msg);

/* Where a write's bytes come from: len of them, written to fd by write (0, or -1 with errno;
 * a short write is an error). */
typedef struct {
    size_t len;
    int (*write)(void *ctx, int fd);
    void *ctx;
} quota_source;

/* quota_write_file with the bytes from src. The file and its directory entry are synced
 * before QUOTA_WRITTEN (fail closed: a write the disk could not keep is not acknowledged). */
quota_write_result quota_write_from(const char *ws, const char *rel, const char *path_as_sent, const quota_source *src,
                                    long long quota_bytes, char **msg);

/* The 413 text of a write that does not fit (malloc'd; projected: the workspace's usage with
 * the write done). */
char *quota_exceeded_text(const char *path_as_sent, long long projected, long long quota_bytes);

/* Blocks of the regular file ws/rel that a write would replace (0 when there is none). */
long long quota_replaced_bytes(const char *ws, const char *rel);

/* After an exec: NULL when within quota, else the malloc'd warning text. */
char *quota_exec_warning(const char *ws, long long quota_bytes);

#endif
