/* Workspace paths: Python's realpath rules, then component-wise opens that never follow a
 * symlink. */
#include "domain/paths.h"

#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LINKS 256

typedef struct {
    char *link;
    char *resolved; /* NULL while being resolved: meeting it again means a loop */
} seen_entry;

typedef struct {
    seen_entry *e;
    size_t n;
    bool fail;
} seen_list;

static char *join2(const char *a, const char *b, size_t blen)
{
    size_t al = strlen(a);
    bool slash = al > 0 && a[al - 1] == '/';
    char *r = malloc(al + blen + 2);
    if (!r)
        return NULL;
    memcpy(r, a, al);
    size_t o = al;
    if (!slash)
        r[o++] = '/';
    memcpy(r + o, b, blen);
    r[o + blen] = '\0';
    return r;
}

static void to_parent(char *p)
{
    char *s = strrchr(p, '/');
    if (s == p || !s)
        p[1] = '\0', p[0] = '/';
    else
        *s = '\0';
}

/* Lexical normalisation of an absolute path (Python's normpath, used after a loop). */
static void normalize(char *p)
{
    char *out = p;
    const char *in = p;
    size_t o = 0;
    out[o++] = '/';
    while (*in) {
        while (*in == '/')
            in++;
        const char *end = strchrnul(in, '/');
        size_t n = (size_t)(end - in);
        if (n == 0 || (n == 1 && in[0] == '.')) {
            /* skip */
        } else if (n == 2 && in[0] == '.' && in[1] == '.') {
            while (o > 1 && out[o - 1] != '/')
                o--;
            if (o > 1)
                o--;
        } else {
            if (o > 1)
                out[o++] = '/';
            memmove(out + o, in, n);
            o += n;
        }
        in = end;
    }
    out[o] = '\0';
}

/* Python's posixpath._joinrealpath (non-strict). Takes ownership of path. */
static char *join_real(char *path, const char *rest, seen_list *seen, bool *ok)
{
    *ok = true;
    if (rest[0] == '/') {
        free(path);
        path = strdup("/");
        while (*rest == '/')
            rest++;
    }
    while (path && *rest) {
        const char *end = strchrnul(rest, '/');
        size_t n = (size_t)(end - rest);
        const char *name = rest;
        rest = *end ? end + 1 : end;
        if (n == 0 || (n == 1 && name[0] == '.'))
            continue;
        if (n == 2 && name[0] == '.' && name[1] == '.') {
            to_parent(path);
            continue;
        }
        char *newpath = join2(path, name, n);
        struct stat st;
        if (!newpath || lstat(newpath, &st) != 0 || !S_ISLNK(st.st_mode)) {
            free(path);
            path = newpath;
            continue;
        }
        size_t k;
        for (k = 0; k < seen->n; k++)
            if (strcmp(seen->e[k].link, newpath) == 0)
                break;
        if (k < seen->n) {
            if (seen->e[k].resolved) {
                free(path);
                free(newpath);
                path = strdup(seen->e[k].resolved);
                continue;
            }
            free(path); /* a symlink loop: Python gives up and returns the rest joined */
            path = join2(newpath, rest, strlen(rest));
            free(newpath);
            *ok = false;
            return path;
        }
        char target[PATH_MAX];
        ssize_t tl = readlink(newpath, target, sizeof target - 1);
        seen_entry *ne = seen->n < MAX_LINKS ? realloc(seen->e, (seen->n + 1) * sizeof *ne) : NULL;
        if (tl < 0 || !ne) {
            if (ne)
                seen->e = ne;
            seen->fail = true;
            free(newpath);
            free(path);
            return NULL;
        }
        target[tl] = '\0';
        seen->e = ne;
        size_t me = seen->n++;
        seen->e[me].link = newpath;
        seen->e[me].resolved = NULL;
        bool sub_ok;
        path = join_real(path, target, seen, &sub_ok);
        if (!path)
            return NULL;
        if (!sub_ok) {
            char *r = join2(path, rest, strlen(rest));
            free(path);
            *ok = false;
            return r;
        }
        seen->e[me].resolved = strdup(path);
    }
    return path;
}

int path_resolve(const char *ws, const char *path, size_t len, char **rel)
{
    *rel = NULL;
    if (memchr(path, '\0', len))
        return PATH_ERROR; /* Python: ValueError "embedded null byte" → 500 */
    char *full = path[0] == '/' ? strdup(path) : join2(ws, path, len);
    if (!full)
        return PATH_ERROR;
    seen_list seen = {0};
    bool ok;
    char *res = join_real(strdup("/"), full, &seen, &ok);
    free(full);
    for (size_t i = 0; i < seen.n; i++) {
        free(seen.e[i].link);
        free(seen.e[i].resolved);
    }
    free(seen.e);
    if (!res)
        return PATH_ERROR;
    normalize(res);
    size_t wl = strlen(ws);
    int rc = PATH_DENIED;
    if (strncmp(res, ws, wl) == 0 && (res[wl] == '\0' || res[wl] == '/')) {
        *rel = strdup(res[wl] ? res + wl + 1 : "");
        rc = *rel ? PATH_OK : PATH_ERROR;
    }
    free(res);
    return rc;
}

/* Opens the directory holding the last component of rel, creating missing ones when
 * create is set. *last points into rel. Returns an fd or -1 (errno set). */
static int open_parent(const char *ws, const char *rel, bool create, const char **last)
{
    int dfd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const char *p = rel;
    while (dfd >= 0) {
        const char *slash = strchr(p, '/');
        if (!slash)
            break;
        char name[NAME_MAX + 1];
        size_t n = (size_t)(slash - p);
        if (n > NAME_MAX) {
            close(dfd);
            errno = ENAMETOOLONG;
            return -1;
        }
        memcpy(name, p, n);
        name[n] = '\0';
        int nfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0 && errno == ENOENT && create) {
            if (mkdirat(dfd, name, 0755) == 0) {
                /* the sandbox user must be able to modify what the API created */
                if (fchownat(dfd, name, SANDBOX_UID, SANDBOX_GID, AT_SYMLINK_NOFOLLOW) != 0 && errno != EPERM) {
                    int e = errno;
                    close(dfd);
                    errno = e;
                    return -1;
                }
            } else if (errno != EEXIST) {
                int e = errno;
                close(dfd);
                errno = e;
                return -1;
            }
            nfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        int e = errno;
        close(dfd);
        errno = e;
        dfd = nfd;
        p = slash + 1;
    }
    *last = p;
    return dfd;
}

int path_open_read(const char *ws, const char *rel, int *fd)
{
    const char *last;
    if (!*rel)
        return PATH_ERROR; /* the workspace itself is a directory */
    int dfd = open_parent(ws, rel, false, &last);
    if (dfd < 0)
        return (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) ? PATH_MISSING : PATH_ERROR;
    *fd = openat(dfd, last, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int e = errno;
    close(dfd);
    if (*fd < 0)
        return (e == ENOENT || e == ENOTDIR || e == ELOOP) ? PATH_MISSING : PATH_ERROR;
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(*fd);
        return PATH_ERROR;
    }
    return PATH_OK;
}

static bool disk_full(int err)
{
    return err == ENOSPC || err == EDQUOT;
}

int path_open_write(const char *ws, const char *rel, int *fd)
{
    const char *last;
    if (!*rel)
        return PATH_ERROR;
    int dfd = open_parent(ws, rel, true, &last);
    if (dfd < 0)
        return disk_full(errno) ? PATH_NOSPACE : PATH_ERROR;
    *fd = openat(dfd, last, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    int e = errno;
    close(dfd);
    if (*fd < 0)
        return disk_full(e) ? PATH_NOSPACE : PATH_ERROR;
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(*fd);
        return PATH_ERROR;
    }
    if (fchown(*fd, SANDBOX_UID, SANDBOX_GID) != 0 && errno != EPERM) {
        close(*fd);
        return PATH_ERROR;
    }
    return PATH_OK;
}

int path_remove_file(const char *ws, const char *rel, const struct stat *st)
{
    const char *last;
    struct stat named;
    if (!*rel)
        return -1;
    int dfd = open_parent(ws, rel, false, &last);
    if (dfd < 0)
        return -1;
    /* only the file this request wrote, never what a command put in its place meanwhile */
    int rc = fstatat(dfd, last, &named, AT_SYMLINK_NOFOLLOW) == 0 && named.st_dev == st->st_dev &&
                     named.st_ino == st->st_ino
                 ? unlinkat(dfd, last, 0)
                 : -1;
    close(dfd);
    return rc;
}
