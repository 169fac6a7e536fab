/* The disk quota: usage from statvfs, the write under quota, the 413 and warning texts. */
#include "domain/quota.h"

#include "domain/paths.h"
#include "util/sync.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MB 1048576.0

long long quota_usage(const char *ws)
{
    struct statvfs sv;
    if (statvfs(ws, &sv) != 0)
        return -1;
    return (long long)(sv.f_blocks - sv.f_bfree) * (long long)sv.f_frsize;
}

long long quota_free(const char *ws, long long quota_bytes)
{
    struct statvfs sv;
    if (statvfs(ws, &sv) != 0)
        return 0;
    long long used = (long long)(sv.f_blocks - sv.f_bfree) * (long long)sv.f_frsize;
    long long left = quota_bytes - used, avail = (long long)sv.f_bavail * (long long)sv.f_frsize;
    left = left < avail ? left : avail;
    return left > 0 ? left : 0;
}

long long quota_replaced_bytes(const char *ws, const char *rel)
{
    char *full = NULL;
    struct stat st;
    long long n = 0;
    if (*rel && asprintf(&full, "%s/%s", ws, rel) >= 0 && lstat(full, &st) == 0 && S_ISREG(st.st_mode))
        n = (long long)st.st_blocks * 512;
    free(full);
    return n;
}

char *quota_exceeded_text(const char *path_as_sent, long long projected, long long quota_bytes)
{
    char *msg = NULL;
    if (asprintf(&msg, "Writing %s would use %.1f MB of the workspace's %.0f MB disk quota. Delete files first.",
                 path_as_sent, (double)projected / MB, (double)quota_bytes / MB) < 0)
        return strdup("Writing would exceed the workspace's disk quota. Delete files first.");
    return msg;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The written file's directory entry is durable once its directory is synced. */
static int sync_entry(const char *ws, const char *rel)
{
    const char *last;
    return sync_close(path_open_parent(ws, rel, false, &last));
}

quota_write_result quota_write_from(const char *ws, const char *rel, const char *path_as_sent, const quota_source *src,
                                    long long quota_bytes, char **msg)
{
    *msg = NULL;
    size_t len = src->len;
    struct statvfs sv;
    if (statvfs(ws, &sv) != 0)
        return QUOTA_FAILED;
    long long used = (long long)(sv.f_blocks - sv.f_bfree) * (long long)sv.f_frsize;
    long long avail = (long long)sv.f_bavail * (long long)sv.f_frsize;
    long long replaced = quota_replaced_bytes(ws, rel);
    long long projected = used - replaced + (long long)len;
    /* over the quota, or more than the disk holds: refused before anything is touched */
    if (projected > quota_bytes || (long long)len > avail + replaced) {
        *msg = quota_exceeded_text(path_as_sent, projected, quota_bytes);
        return QUOTA_EXCEEDED;
    }
    int fd = -1;
    int rc = path_open_write(ws, rel, &fd);
    if (rc == PATH_NOSPACE) { /* its directories or its inode: the disk is out of inodes */
        *msg = quota_exceeded_text(path_as_sent, projected, quota_bytes);
        return QUOTA_EXCEEDED;
    }
    if (rc != PATH_OK)
        return QUOTA_FAILED;
    struct stat written; /* identifies the file to remove if the write fails */
    bool known = fstat(fd, &written) == 0;
    /* acknowledged only once on the disk: the data, then the directory entry */
    int err = src->write(src->ctx, fd) == 0 && fdatasync(fd) == 0 ? 0 : errno;
    if (close(fd) != 0 && !err && errno != EINTR)
        err = errno;
    if (!err && sync_entry(ws, rel) != 0)
        err = errno;
    if (!err)
        return QUOTA_WRITTEN;
    /* never a partial file: a command filled the disk meanwhile, or the disk failed */
    if (known)
        path_remove_file(ws, rel, &written);
    if (err != ENOSPC && err != EDQUOT)
        return QUOTA_IO;
    /* the usage now, with the partial file (and so the replaced content) gone */
    long long now = quota_usage(ws);
    projected = (now >= 0 ? now : used - replaced) + (long long)len;
    *msg = quota_exceeded_text(path_as_sent, projected, quota_bytes);
    return QUOTA_EXCEEDED;
}

typedef struct {
    const char *data;
    size_t len;
} memory_source;

static int write_memory(void *ctx, int fd)
{
    const memory_source *m = ctx;
    return write_all(fd, m->data, m->len);
}

quota_write_result quota_write_file(const char *ws, const char *rel, const char *path_as_sent, const char *data,
                                    size_t len, long long quota_bytes, char **msg)
{
    memory_source m = {data, len};
    quota_source src = {.len = len, .write = write_memory, .ctx = &m};
    return quota_write_from(ws, rel, path_as_sent, &src, quota_bytes, msg);
}

char *quota_exec_warning(const char *ws, long long quota_bytes)
{
    long long usage = quota_usage(ws);
    if (usage <= quota_bytes)
        return NULL;
    char *msg = NULL;
    if (asprintf(&msg, "Workspace uses %.1f MB, over its %.0f MB disk quota. Delete files before writing more.",
                 (double)usage / MB, (double)quota_bytes / MB) < 0)
        return NULL;
    return msg;
}
