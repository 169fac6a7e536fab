/* Directory syncs: what makes a new name (a rename, a created file) survive a crash; and one
 * sync of a whole filesystem for a tree written without syncs of its own (a template's root). */
#include "util/sync.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* sync(fd) (fsync or syncfs), then close: 0, or -1 with sync's errno (or open's: fd < 0). */
static int synced_close(int fd, int (*sync)(int))
{
    if (fd < 0)
        return -1;
    int rc = sync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int sync_close(int fd)
{
    return synced_close(fd, fsync);
}

int sync_dir(const char *dir)
{
    return sync_close(open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

int sync_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir)
        return -1;
    int rc = sync_dir(dir);
    int e = errno;
    free(dir);
    errno = e;
    return rc;
}

int sync_filesystem(const char *path)
{
    return synced_close(open(path, O_RDONLY | O_CLOEXEC), syncfs);
}
