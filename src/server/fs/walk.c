/* The iterative, descriptor-bounded tree walker; usage and removal as its visitors. */
#include "fs/walk.h"

#include "util/buf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* One directory on the path from the root. Its entries' names sit in the walk's name stack
 * at [start, end); its own name is in its parent's range, so nothing is copied per level. */
typedef struct {
    size_t name;       /* offset of its name in the name stack (the root has none) */
    dev_t dev;         /* identity of what was opened, checked when reopened */
    ino_t ino;
    int fd;            /* -1 while closed to stay within FS_WALK_OPEN_DIRS */
    size_t start, end; /* its entries' names, each NUL-terminated */
    size_t next;       /* offset of the next name to visit */
} frame;

typedef struct {
    frame *v;          /* v[0] is the root, v[n - 1] the directory being read */
    size_t n, cap;
    buffer names;      /* the name stack: the frames' entry names, root first */
    size_t open;       /* frames below the root with an open fd */
    size_t lo;         /* every frame in [1, lo) is closed */
    int err;           /* errno of the first failure, 0 when none */
} walk;

static void record(walk *w, int err)
{
    if (!w->err)
        w->err = err ? err : EIO;
}

static const char *name_at(const walk *w, size_t off)
{
    return w->names.data + off;
}

/* Reads every name of the directory open at f->fd ("." and ".." left out) onto the name
 * stack. -1 with errno set when not all could be read (those read are kept). */
static int read_names(walk *w, frame *f)
{
    f->start = f->next = f->end = w->names.len;
    int dfd = fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        int e = errno;
        if (dfd >= 0)
            close(dfd);
        errno = e;
        return -1;
    }
    int rc = 0;
    for (;;) {
        errno = 0;
        struct dirent *e = readdir(d);
        if (!e) {
            rc = errno ? -1 : 0;
            break;
        }
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (buf_append(&w->names, e->d_name, strlen(e->d_name) + 1) != 0) {
            rc = -1; /* out of memory: the walk visits what it holds */
            break;
        }
        f->end = w->names.len;
    }
    int e = errno;
    closedir(d);
    errno = e;
    return rc;
}

static void close_frame(walk *w, size_t i)
{
    if (i > 0 && w->v[i].fd >= 0) {
        close(w->v[i].fd);
        w->v[i].fd = -1;
        w->open--;
    }
}

/* Takes fd (may be -1) as frame i's when it is the directory first seen there; else closes
 * it and fails with ESTALE (moved or replaced since). */
static int check_same(const frame *f, int fd)
{
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || st.st_dev != f->dev || st.st_ino != f->ino) {
        close(fd);
        errno = ESTALE;
        return -1;
    }
    return fd;
}

/* Opens frame i again: through ".." of its open child, else name by name from the nearest
 * open ancestor (the root is always open). 0, or -1 with errno set. */
static int reopen(walk *w, size_t i)
{
    if (w->v[i].fd >= 0)
        return 0;
    int fd = -1;
    if (i + 1 < w->n && w->v[i + 1].fd >= 0)
        fd = check_same(&w->v[i], openat(w->v[i + 1].fd, "..", DIR_FLAGS));
    if (fd < 0) {
        size_t j = i;
        while (w->v[j].fd < 0)
            j--;
        fd = w->v[j].fd;
        for (size_t k = j + 1; k <= i; k++) {
            int next = check_same(&w->v[k], openat(fd, name_at(w, w->v[k].name), DIR_FLAGS));
            if (fd != w->v[j].fd)
                close(fd);
            if (next < 0)
                return -1;
            fd = next;
        }
    }
    w->v[i].fd = fd;
    w->open++;
    if (i < w->lo)
        w->lo = i;
    return 0;
}

/* Keeps at most FS_WALK_OPEN_DIRS frames open, closing those nearest the root first. */
static void trim(walk *w)
{
    while (w->open > FS_WALK_OPEN_DIRS && w->lo < w->n - 1) {
        close_frame(w, w->lo);
        w->lo++;
    }
}

/* Goes into the top frame's directory entry at name (offset). 0 (also when the entry is on
 * another filesystem, which is not entered), or -1 with errno set. */
static int push(walk *w, size_t name)
{
    if (w->n == w->cap) {
        size_t cap = w->cap * 2;
        frame *nv = realloc(w->v, cap * sizeof *nv);
        if (!nv)
            return -1;
        w->v = nv;
        w->cap = cap;
    }
    int fd = openat(w->v[w->n - 1].fd, name_at(w, name), DIR_FLAGS);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        errno = e;
        return -1;
    }
    if (st.st_dev != w->v[0].dev) { /* a mount point: another filesystem is not ours to walk */
        close(fd);
        return 0;
    }
    frame *f = &w->v[w->n++];
    *f = (frame){.name = name, .dev = st.st_dev, .ino = st.st_ino, .fd = fd};
    w->open++;
    trim(w);
    if (read_names(w, f) != 0)
        record(w, errno); /* visit what was read */
    return 0;
}

/* Leaves the top frame: reports it to visit from its parent, which is reopened if needed. */
static void pop(walk *w, fs_visit visit, void *ctx)
{
    size_t top = w->n - 1, parent = w->n - 2;
    if (reopen(w, parent) == 0) {
        fs_entry e = {FS_DIR_DONE, w->v[parent].fd, name_at(w, w->v[top].name), NULL, top};
        if (visit(ctx, &e) < 0)
            record(w, errno);
    } else {
        record(w, errno);
    }
    close_frame(w, top);
    buf_truncate(&w->names, w->v[top].start); /* its names go; its own name is its parent's */
    w->n--;
    if (w->lo > w->n - 1)
        w->lo = w->n > 1 ? w->n - 1 : 1;
}

/* Visits the top frame's next name, and goes into it when it is a directory. */
static void step(walk *w, fs_visit visit, void *ctx)
{
    frame *top = &w->v[w->n - 1];
    size_t name = top->next;
    top->next += strlen(name_at(w, name)) + 1;
    struct stat st;
    if (fstatat(top->fd, name_at(w, name), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) /* gone meanwhile: nothing to visit */
            record(w, errno);
        return;
    }
    fs_entry e = {FS_ENTRY, top->fd, name_at(w, name), &st, w->n};
    int rc = visit(ctx, &e);
    if (rc < 0)
        record(w, errno);
    if (rc != FS_SKIP && S_ISDIR(st.st_mode) && push(w, name) != 0)
        record(w, errno);
}

int fs_walk(int rootfd, fs_visit visit, void *ctx)
{
    walk w = {.cap = 64, .lo = 1};
    struct stat st;
    w.v = calloc(w.cap, sizeof *w.v);
    if (!w.v)
        return -1;
    if (fstat(rootfd, &st) != 0) {
        free(w.v);
        return -1;
    }
    w.v[0] = (frame){.dev = st.st_dev, .ino = st.st_ino, .fd = rootfd};
    w.n = 1;
    if (read_names(&w, &w.v[0]) != 0)
        record(&w, errno);
    while (w.n > 0) {
        frame *top = &w.v[w.n - 1];
        if (top->fd < 0 && reopen(&w, w.n - 1) != 0) {
            /* moved away meanwhile: the rest of its entries cannot be reached */
            record(&w, errno);
            top->next = top->end;
        }
        if (top->next < top->end)
            step(&w, visit, ctx);
        else if (w.n > 1)
            pop(&w, visit, ctx);
        else
            break;
    }
    buf_free(&w.names);
    free(w.v);
    if (w.err) {
        errno = w.err;
        return -1;
    }
    return 0;
}

/* ---- usage ------------------------------------------------------------------------- */

static int add_blocks(void *ctx, const fs_entry *e)
{
    if (e->event == FS_ENTRY)
        *(long long *)ctx += (long long)e->st->st_blocks * 512;
    return FS_CONTINUE;
}

long long fs_tree_usage(const char *dir)
{
    int fd = open(dir, DIR_FLAGS);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    long long total = (long long)st.st_blocks * 512;
    (void)fs_walk(fd, add_blocks, &total); /* what could not be read does not count */
    close(fd);
    return total;
}

/* ---- removal ----------------------------------------------------------------------- */

static int remove_entry(void *ctx, const fs_entry *e)
{
    (void)ctx;
    if (e->event == FS_ENTRY && S_ISDIR(e->st->st_mode))
        return FS_CONTINUE; /* removed at FS_DIR_DONE, once empty */
    int flags = e->event == FS_DIR_DONE ? AT_REMOVEDIR : 0;
    if (unlinkat(e->dirfd, e->name, flags) == 0 || errno == ENOENT)
        return FS_CONTINUE;
    return -1;
}

int fs_rmtree(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(dir) == 0 || errno == ENOENT ? 0 : -1;
    int fd = open(dir, DIR_FLAGS);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    int rc = fs_walk(fd, remove_entry, NULL);
    int err = errno;
    close(fd);
    if (rmdir(dir) != 0 && errno != ENOENT)
        return -1;
    errno = err;
    return rc;
}
