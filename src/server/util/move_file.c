/* util/move_file.h: rename, else a sparse copy (SEEK_DATA/SEEK_HOLE) and an unlink (of a
 * directory's files: a copy of each into a new directory, renamed into place, then the old removed). */
#include "util/move_file.h"

#include "fs/walk.h"
#include "util/sync.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COPY_CHUNK (1 << 20)

/* Copies in's data extents into out (already as long as in): holes stay holes. buf: COPY_CHUNK
 * bytes (on the heap: thread-local storage of that size would come off every thread's stack). */
static int copy_extents(int in, int out, off_t size, char *buf)
{
    off_t at = 0;
    while (at < size) {
        off_t data = lseek(in, at, SEEK_DATA);
        if (data < 0)
            return errno == ENXIO ? 0 : -1; /* only a hole left */
        off_t hole = lseek(in, data, SEEK_HOLE);
        if (hole < 0)
            return -1;
        for (off_t p = data; p < hole;) {
            size_t want = (size_t)(hole - p < (off_t)COPY_CHUNK ? hole - p : (off_t)COPY_CHUNK);
            ssize_t n = pread(in, buf, want, p);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return -1;
            for (ssize_t w = 0; w < n;) {
                ssize_t k = pwrite(out, buf + w, (size_t)(n - w), p + w);
                if (k < 0 && errno == EINTR)
                    continue;
                if (k <= 0)
                    return -1;
                w += k;
            }
            p += n;
        }
        at = hole;
    }
    return 0;
}

/* src's data copied into a new, sparse, synced dst (which must not exist), src kept: 0, or -1
 * with errno (dst not left behind). */
static int copy_file(const char *src, const char *dst)
{
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.part", dst) < 0)
        return -1;
    int in = open(src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    int out = in >= 0 ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600) : -1;
    char *buf = out >= 0 ? malloc(COPY_CHUNK) : NULL;
    struct stat st;
    bool ok = buf && fstat(in, &st) == 0 && ftruncate(out, st.st_size) == 0 &&
              copy_extents(in, out, st.st_size, buf) == 0 && fdatasync(out) == 0;
    int saved = errno;
    free(buf);
    if (in >= 0)
        close(in);
    if (out >= 0 && close(out) != 0)
        ok = false;
    ok = ok && rename(tmp, dst) == 0 && sync_parent(dst) == 0;
    if (!ok) {
        saved = errno ? errno : saved;
        if (out >= 0)
            unlink(tmp);
        free(tmp);
        errno = saved;
        return -1;
    }
    free(tmp);
    return 0;
}

int move_file(const char *src, const char *dst)
{
    if (rename(src, dst) == 0)
        return sync_parent(dst) == 0 && sync_parent(src) == 0 ? 0 : -1;
    if (errno != EXDEV || copy_file(src, dst) != 0)
        return -1;
    return unlink(src) == 0 || errno == ENOENT ? 0 : -1;
}

/* Every regular file of the directory src copied into the directory dst (both open). 0, or -1
 * with errno (ENOTSUP for anything but a regular file: a memory image is flat). */
static int copy_files(const char *src, const char *dst)
{
    DIR *d = opendir(src);
    if (!d)
        return -1;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *from = NULL, *to = NULL;
        struct stat st;
        if (asprintf(&from, "%s/%s", src, e->d_name) < 0)
            from = NULL;
        if (!from || asprintf(&to, "%s/%s", dst, e->d_name) < 0) {
            to = NULL;
            rc = -1;
        } else if (lstat(from, &st) != 0) {
            rc = -1;
        } else if (!S_ISREG(st.st_mode)) {
            errno = ENOTSUP;
            rc = -1;
        } else {
            rc = copy_file(from, to);
        }
        free(from);
        free(to);
    }
    int saved = errno;
    closedir(d);
    errno = saved;
    return rc;
}

int move_dir(const char *src, const char *dst)
{
    if (rename(src, dst) == 0)
        return sync_parent(dst) == 0 && sync_parent(src) == 0 ? 0 : -1;
    if (errno != EXDEV)
        return -1;
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.part", dst) < 0)
        return -1;
    (void)fs_rmtree(tmp); /* one a stopped copy left */
    bool ok = mkdir(tmp, 0700) == 0 && copy_files(src, tmp) == 0 && sync_dir(tmp) == 0 && rename(tmp, dst) == 0 &&
              sync_parent(dst) == 0;
    int saved = errno;
    if (!ok) {
        (void)fs_rmtree(tmp);
        free(tmp);
        errno = saved;
        return -1;
    }
    free(tmp);
    (void)fs_rmtree(src); /* dst is whole: what of src cannot go is a leftover, not a failure */
    return 0;
}
