/* Workspace paths: bounded in length and depth, resolved with Python's realpath rules in
 * time linear in the bytes walked, then opened component by component never following a
 * symlink. */
#include "domain/paths.h"

#include "sandbox/sandbox.h"
#include "util/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_LINKS 256
#define NONE SIZE_MAX

/* A symlink met while resolving: Python's `seen` entry. */
typedef struct {
    char *link;     /* its absolute path */
    uint64_t hash;
    char *target;   /* what it points to: the rest of the frame resolving it reads from here */
    char *resolved; /* NULL while being resolved: meeting it again means a loop */
} link_entry;

/* What is left to walk: the path itself, or a symlink's target (link = its entry). */
typedef struct {
    const char *rest;
    size_t link;    /* NONE for the path itself */
} frame;

/* The path resolved so far, with where each component starts, so going to the parent is
 * O(1) and the whole resolution linear in the bytes walked. */
typedef struct {
    char *buf;
    size_t len, max_len;
    size_t *slash;  /* slash[i]: the offset of the '/' before component i */
    size_t depth, max_depth;
    size_t dead;    /* components deeper than this cannot exist (NONE: unknown) */
} rpath;

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static void rp_root(rpath *p)
{
    p->buf[0] = '/';
    p->buf[1] = '\0';
    p->len = 1;
    p->depth = 0;
    p->dead = NONE;
}

static void rp_parent(rpath *p)
{
    if (p->depth == 0)
        return;
    p->depth--;
    p->len = p->slash[p->depth] ? p->slash[p->depth] : 1;
    p->buf[p->len] = '\0';
    if (p->dead != NONE && p->depth < p->dead)
        p->dead = NONE;
}

static int rp_push(rpath *p, const char *name, size_t n)
{
    size_t sep = p->len > 1;
    if (n > p->max_len - p->len - sep)
        return PATH_TOO_LONG;
    if (p->depth >= p->max_depth)
        return PATH_TOO_DEEP;
    p->slash[p->depth++] = p->len > 1 ? p->len : 0;
    if (sep)
        p->buf[p->len++] = '/';
    memcpy(p->buf + p->len, name, n);
    p->len += n;
    p->buf[p->len] = '\0';
    return PATH_OK;
}

/* The resolved path becomes s (absolute, normalised: a cached resolution). */
static int rp_set(rpath *p, const char *s)
{
    rp_root(p);
    while (*s) {
        while (*s == '/')
            s++;
        const char *end = strchrnul(s, '/');
        if (end > s) {
            int rc = rp_push(p, s, (size_t)(end - s));
            if (rc != PATH_OK)
                return rc;
        }
        s = end;
    }
    return PATH_OK;
}

/* Python's posixpath.join(a, b) appended to out. */
static int py_join(buffer *out, const char *b)
{
    if (b[0] == '/')
        buf_truncate(out, 0);
    else if (out->len && out->data[out->len - 1] != '/')
        buf_append(out, "/", 1);
    return buf_puts(out, b);
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

/* The deepest level the path reaches read lexically ("a/../b" reaches 1), and its levels. */
static size_t lexical_depth(const char *path, size_t len, size_t *levels)
{
    size_t d = 0, max = 0;
    const char *p = path, *end = path + len;
    *levels = 0;
    while (p < end) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        const char *stop = slash ? slash : end;
        size_t n = (size_t)(stop - p);
        if (n == 2 && p[0] == '.' && p[1] == '.')
            d = d ? d - 1 : 0;
        else if (n && !(n == 1 && p[0] == '.'))
            max = ++d > max ? d : max;
        p = stop + 1;
    }
    *levels = d;
    return max;
}

/* Python's posixpath._joinrealpath (non-strict) from "/" over full, without recursion: a
 * symlink pushes a frame that walks its target. Sets *res (malloc'd, normalised) and returns
 * PATH_OK, or PATH_TOO_LONG / PATH_TOO_DEEP / PATH_ERROR. */
static int join_real(const char *full, size_t max_len, size_t max_depth, char **res)
{
    rpath p = {.max_len = max_len, .max_depth = max_depth};
    link_entry *links = calloc(MAX_LINKS, sizeof *links);
    frame *frames = calloc(MAX_LINKS + 1, sizeof *frames);
    p.buf = malloc(max_len + 1);
    p.slash = calloc(max_depth + 1, sizeof *p.slash);
    size_t nlinks = 0, nf = 0;
    int rc = links && frames && p.buf && p.slash ? PATH_OK : PATH_ERROR;
    bool loop = false;
    char target[PATH_MAX];
    if (rc == PATH_OK) {
        rp_root(&p);
        frames[nf++] = (frame){full, NONE};
    }
    while (rc == PATH_OK && nf > 0 && !loop) {
        frame *f = &frames[nf - 1];
        if (!*f->rest) {
            if (f->link != NONE && !(links[f->link].resolved = strdup(p.buf)))
                rc = PATH_ERROR;
            nf--;
            continue;
        }
        const char *name = f->rest, *end = strchrnul(name, '/');
        size_t n = (size_t)(end - name);
        f->rest = *end ? end + 1 : end;
        if (n == 0 || (n == 1 && name[0] == '.'))
            continue;
        if (n == 2 && name[0] == '.' && name[1] == '.') {
            rp_parent(&p);
            continue;
        }
        bool parent_dead = p.dead != NONE && p.depth >= p.dead;
        if ((rc = rp_push(&p, name, n)) != PATH_OK || parent_dead)
            continue; /* under a missing entry or a file nothing is a symlink: no lstat */
        struct stat st;
        if (lstat(p.buf, &st) != 0) {
            /* missing, or too long for one system call (ENAMETOOLONG): Python reads on
             * lexically; opens later go component by component and never follow a link */
            p.dead = p.depth;
            continue;
        }
        if (!S_ISLNK(st.st_mode)) {
            if (!S_ISDIR(st.st_mode))
                p.dead = p.depth;
            continue;
        }
        uint64_t h = hash_bytes(p.buf, p.len);
        size_t k;
        for (k = 0; k < nlinks; k++)
            if (links[k].hash == h && strcmp(links[k].link, p.buf) == 0)
                break;
        if (k < nlinks && links[k].resolved) {
            rc = rp_set(&p, links[k].resolved);
            continue;
        }
        if (k < nlinks) {
            loop = true; /* a symlink loop: Python gives up and joins what is left */
            continue;
        }
        ssize_t tl = nlinks < MAX_LINKS ? readlink(p.buf, target, sizeof target - 1) : -1;
        if (tl < 0) {
            rc = PATH_ERROR;
            continue;
        }
        target[tl] = '\0';
        links[k] = (link_entry){strdup(p.buf), h, strdup(target), NULL};
        nlinks++;
        if (!links[k].link || !links[k].target) {
            rc = PATH_ERROR;
            continue;
        }
        rp_parent(&p);
        if (target[0] == '/')
            rp_root(&p);
        frames[nf++] = (frame){links[k].target, k};
    }
    *res = NULL;
    if (rc == PATH_OK) {
        buffer out = {0};
        buf_puts(&out, p.buf);
        /* after a loop: the looping link's path, then what each level had left */
        for (size_t i = nf; loop && i-- > 0;)
            py_join(&out, frames[i].rest);
        *res = buf_take(&out, NULL);
        if (!*res)
            rc = PATH_ERROR;
        else if (loop)
            normalize(*res);
    }
    for (size_t i = 0; i < nlinks; i++) {
        free(links[i].link);
        free(links[i].target);
        free(links[i].resolved);
    }
    free(links);
    free(frames);
    free(p.buf);
    free(p.slash);
    return rc;
}

int path_resolve(const char *ws, const char *path, size_t len, char **rel)
{
    return path_resolve_bounded(ws, path, len, PATH_MAX_BYTES, PATH_MAX_DEPTH, rel);
}

int path_resolve_bounded(const char *ws, const char *path, size_t len, size_t max_bytes, size_t max_depth,
                         char **rel)
{
    *rel = NULL;
    if (memchr(path, '\0', len))
        return PATH_ERROR; /* Python: ValueError "embedded null byte" → 500 */
    /* bounded before any filesystem work */
    size_t levels;
    if (len > max_bytes)
        return PATH_TOO_LONG;
    if (lexical_depth(path, len, &levels) > max_depth)
        return PATH_TOO_DEEP;
    size_t wl = strlen(ws), ws_levels;
    lexical_depth(ws, wl, &ws_levels);
    char *full = path[0] == '/' ? strndup(path, len) : NULL;
    if (!full && path[0] != '/' && asprintf(&full, "%s/%.*s", ws, (int)len, path) < 0)
        full = NULL;
    if (!full)
        return PATH_ERROR;
    char *res = NULL;
    int rc = join_real(full, wl + 1 + max_bytes, ws_levels + max_depth, &res);
    free(full);
    if (rc != PATH_OK)
        return rc;
    rc = PATH_DENIED;
    if (strncmp(res, ws, wl) == 0 && (res[wl] == '\0' || res[wl] == '/')) {
        const char *inside = res[wl] ? res + wl + 1 : "";
        size_t in_len = strlen(inside);
        if (in_len > max_bytes)
            rc = PATH_TOO_LONG;
        else if (lexical_depth(inside, in_len, &levels) > max_depth)
            rc = PATH_TOO_DEEP;
        else
            rc = (*rel = strdup(inside)) ? PATH_OK : PATH_ERROR;
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
                /* the sandbox user must be able to modify what the API created; 0755 whatever
                 * airlockd's own umask (077), as the reference server makes it */
                if ((fchownat(dfd, name, SANDBOX_UID, SANDBOX_GID, AT_SYMLINK_NOFOLLOW) != 0 && errno != EPERM) ||
                    fchmodat(dfd, name, 0755, 0) != 0) {
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

int path_open_parent(const char *ws, const char *rel, bool create, const char **last)
{
    return open_parent(ws, rel, create, last);
}

int path_open_dir(const char *ws, const char *rel, int *fd)
{
    if (!*rel) {
        *fd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return *fd >= 0 ? PATH_OK : PATH_ERROR;
    }
    const char *last;
    int dfd = open_parent(ws, rel, false, &last);
    if (dfd < 0)
        return (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) ? PATH_MISSING : PATH_ERROR;
    *fd = openat(dfd, last, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int e = errno;
    close(dfd);
    if (*fd < 0)
        return (e == ENOENT || e == ELOOP) ? PATH_MISSING : PATH_ERROR;
    return PATH_OK;
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
    /* A new file is 0644 whatever airlockd's own umask (077), as the reference server makes it;
     * an existing one keeps its mode. */
    const int flags = O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    *fd = openat(dfd, last, flags | O_CREAT | O_EXCL, 0644);
    bool created = *fd >= 0;
    if (!created && errno == EEXIST)
        *fd = openat(dfd, last, flags | O_TRUNC);
    int e = errno;
    close(dfd);
    if (*fd < 0)
        return disk_full(e) ? PATH_NOSPACE : PATH_ERROR;
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode) || (created && fchmod(*fd, 0644) != 0)) {
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
