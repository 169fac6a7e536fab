/* Uploads into the workspace: an unnamed file that is named only once it is complete. */
#include "domain/upload.h"

#include "domain/paths.h"
#include "log/log.h"
#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tries at naming the finished file under a fresh hidden name before the rename. */
#define LINK_TRIES 8

int upload_open(const char *ws, const char *rel, upload_file *u)
{
    *u = (upload_file){.dir_fd = -1, .fd = -1};
    if (!*rel)
        return PATH_ERROR; /* the workspace itself */
    const char *last;
    int dfd = path_open_parent(ws, rel, true, &last);
    if (dfd < 0)
        return errno == ENOSPC || errno == EDQUOT ? PATH_NOSPACE : PATH_ERROR;
    int fd = openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        close(dfd);
        return e == ENOSPC || e == EDQUOT ? PATH_NOSPACE : PATH_ERROR;
    }
    /* the sandbox user must be able to modify what the API wrote */
    if ((fchown(fd, SANDBOX_UID, SANDBOX_GID) != 0 && errno != EPERM) || !(u->last = strdup(last))) {
        close(fd);
        close(dfd);
        return PATH_ERROR;
    }
    u->dir_fd = dfd;
    u->fd = fd;
    return PATH_OK;
}

int upload_write(upload_file *u, const char *data, size_t n)
{
    while (n) {
        ssize_t w = write(u->fd, data, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        data += w;
        n -= (size_t)w;
        u->written += (unsigned long long)w;
    }
    return 0;
}

/* Links the unnamed file into dir_fd under a fresh hidden name (in *tmp). 0 or -1. */
static int link_hidden(upload_file *u, char tmp[64])
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", u->fd);
    for (int i = 0; i < LINK_TRIES; i++) {
        unsigned long long rnd = 0;
        if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
            return -1;
        snprintf(tmp, 64, ".airlock-upload-%016llx", rnd);
        if (linkat(AT_FDCWD, proc, u->dir_fd, tmp, AT_SYMLINK_FOLLOW) == 0)
            return 0;
        if (errno != EEXIST)
            return -1;
    }
    return -1;
}

int upload_commit(upload_file *u)
{
    char tmp[64];
    int err = 0;
    /* acknowledged only once on the disk: the data before it is named, the name after */
    if (fdatasync(u->fd) != 0) {
        err = errno;
    } else if (link_hidden(u, tmp) != 0) {
        err = errno ? errno : EIO;
    } else if (renameat(u->dir_fd, tmp, u->dir_fd, u->last) != 0) {
        err = errno; /* the target is a directory, say: the hidden name goes too */
        if (unlinkat(u->dir_fd, tmp, 0) != 0)
            log_warn("upload: removing a temporary name: %s", strerror(errno));
    } else if (fsync(u->dir_fd) != 0) {
        err = errno;
    }
    if (close(u->fd) != 0 && !err && errno != EINTR)
        err = errno;
    u->fd = -1;
    upload_discard(u);
    return err;
}

void upload_discard(upload_file *u)
{
    if (u->fd >= 0)
        close(u->fd);
    if (u->dir_fd >= 0)
        close(u->dir_fd);
    free(u->last);
    *u = (upload_file){.dir_fd = -1, .fd = -1};
}
