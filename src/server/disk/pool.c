/* The server's workspace disks: paths, the total cap and reserve, create/open/close/destroy,
 * and the start-up takeover and cleanup. */
#include "disk/pool.h"
#include "util/move_file.h"

#include "disk/image.h"
#include "disk/loop.h"
#include "disk/mounts.h"
#include "fs/walk.h"
#include "log/log.h"
#include "util/sync.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MB (1024.0 * 1024.0)
#define IMAGE_SUFFIX ".img"

struct disk_pool {
    char *images;     /* <state>/images */
    char *workspaces; /* <state>/workspaces, a shared mount */
    image_tools tools;
    pthread_mutex_t mu; /* guards used */
    long long used;     /* bytes of the images of sessions (kept or being created) */
    long long cap;
    long long reserve;
    bool cap_given;
};

/* "<dir>/<id><suffix>", malloc'd. */
static char *path_of(const char *dir, const char *id, const char *suffix)
{
    char *p = NULL;
    return asprintf(&p, "%s/%s%s", dir, id, suffix) < 0 ? NULL : p;
}

static int make_dir(const char *path, char *err, size_t errlen)
{
    if ((mkdir(path, 0700) != 0 && errno != EEXIST) || chmod(path, 0700) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

disk_pool *disk_pool_open(const char *state_dir, const disk_limits *l, char *err, size_t errlen)
{
    disk_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->images = path_of(state_dir, "images", "")) ||
        !(p->workspaces = path_of(state_dir, "workspaces", ""))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    pthread_mutex_init(&p->mu, NULL);
    p->cap = l->total_cap;
    p->cap_given = l->total_cap > 0;
    p->reserve = l->reserve;
    if (image_tools_find(&p->tools, err, errlen) != 0 || make_dir(p->images, err, errlen) != 0 ||
        make_dir(p->workspaces, err, errlen) != 0)
        goto fail;
    if (mounts_make_shared(p->workspaces) != 0) {
        snprintf(err, errlen, "cannot make %s a shared mount: %s", p->workspaces, strerror(errno));
        goto fail;
    }
    return p;
fail:
    if (p) {
        image_tools_free(&p->tools);
        free(p->images);
        free(p->workspaces);
        free(p);
    }
    return NULL;
}

static long long host_free(const disk_pool *p)
{
    struct statvfs sv;
    if (statvfs(p->images, &sv) != 0)
        return -1;
    return (long long)sv.f_bavail * (long long)sv.f_frsize;
}

void disk_pool_start(disk_pool *p)
{
    long long avail = host_free(p);
    pthread_mutex_lock(&p->mu);
    if (!p->cap_given) {
        long long cap = p->used + (avail > p->reserve ? avail - p->reserve : 0);
        p->cap = cap;
    }
    long long cap = p->cap, used = p->used;
    pthread_mutex_unlock(&p->mu);
    log_info("workspace disks: %.0f MB in use of %.0f MB (%s), %.0f MB free on the host, "
             "%.0f MB kept free for the server's state",
             (double)used / MB, (double)cap / MB, p->cap_given ? "SANDBOX_DISK_TOTAL_MB" : "default: free space",
             (double)avail / MB, (double)p->reserve / MB);
    if (cap - used < image_bytes_for(1))
        log_warn("no room for new workspaces on %s: sessions will be refused "
                 "with 503 until disk space is freed",
                 p->images);
}

void disk_pool_usage(disk_pool *p, long long *used, long long *cap)
{
    pthread_mutex_lock(&p->mu);
    *used = p->used;
    *cap = p->cap;
    pthread_mutex_unlock(&p->mu);
}

void disk_pool_close(disk_pool *p)
{
    if (!p)
        return;
    if (mounts_is_mount_point(p->workspaces) && mounts_unmount(p->workspaces) != 0)
        log_warn("cannot unmount %s: %s", p->workspaces, strerror(errno));
    image_tools_free(&p->tools);
    pthread_mutex_destroy(&p->mu);
    free(p->images);
    free(p->workspaces);
    free(p);
}

static void account(disk_pool *p, long long delta)
{
    pthread_mutex_lock(&p->mu);
    p->used += delta;
    pthread_mutex_unlock(&p->mu);
}

/* Takes bytes from the cap; false when they do not fit. */
static bool reserve_bytes(disk_pool *p, long long bytes)
{
    pthread_mutex_lock(&p->mu);
    bool fits = p->used + bytes <= p->cap;
    if (fits)
        p->used += bytes;
    long long used = p->used, cap = p->cap;
    pthread_mutex_unlock(&p->mu);
    if (!fits)
        log_warn("refusing a new workspace: images use %.0f MB of %.0f MB, it needs %.0f MB",
                 (double)used / MB, (double)cap / MB, (double)bytes / MB);
    return fits;
}

/* The host keeps the reserve after taking `more` bytes. */
static bool reserve_kept(disk_pool *p, long long more)
{
    long long avail = host_free(p);
    if (avail >= 0 && avail - more >= p->reserve)
        return true;
    log_warn("refusing a new workspace: %.0f MB free on the host, %.0f MB are kept for the "
             "server's state",
             (double)avail / MB, (double)p->reserve / MB);
    return false;
}

bool disk_pool_take(disk_pool *p, long long bytes, char *why, size_t whylen)
{
    if (!reserve_bytes(p, bytes)) {
        pthread_mutex_lock(&p->mu);
        snprintf(why, whylen, "the server's disks use %.0f MB of %.0f MB and this needs %.0f MB", p->used / MB,
                 p->cap / MB, bytes / MB);
        pthread_mutex_unlock(&p->mu);
        return false;
    }
    if (!reserve_kept(p, bytes)) {
        snprintf(why, whylen, "the host has %.0f MB free, keeps %.0f MB for the server's own state and this "
                              "needs %.0f MB", host_free(p) / MB, p->reserve / MB, bytes / MB);
        account(p, -bytes);
        return false;
    }
    return true;
}

void disk_pool_adjust(disk_pool *p, long long delta)
{
    account(p, delta);
}

/* The end of making a session's disk (image made, then mounted on mnt): *workspace, its
 * workspace folder, when it is mounted; otherwise undoes what was done (the mount, the image and
 * its mount point, the bytes reserved) and answers false. */
static bool finish_workspace(disk_pool *p, const char *img, const char *mnt, bool made, bool mounted,
                             long long bytes, char **workspace)
{
    if (mounted && (*workspace = path_of(mnt, IMAGE_WORKSPACE, "")) != NULL)
        return true;
    if (mounted)
        mounts_unmount(mnt);
    if (made) {
        rmdir(mnt);
        unlink(img);
    }
    account(p, -bytes);
    return false;
}

disk_result disk_create(disk_pool *p, const char *id, long long quota_bytes, char **workspace)
{
    *workspace = NULL;
    long long bytes = image_bytes_for(quota_bytes);
    if (!reserve_bytes(p, bytes))
        return DISK_FULL;
    char *img = path_of(p->images, id, IMAGE_SUFFIX), *mnt = path_of(p->workspaces, id, "");
    char err[512] = "";
    disk_result rc = DISK_ERROR;
    bool made = false, mounted = false;
    if (!img || !mnt) {
        snprintf(err, sizeof err, "out of memory");
    } else if (!reserve_kept(p, bytes)) {
        rc = DISK_FULL;
    } else {
        long long made_bytes = 0;
        image_result ir = image_create(&p->tools, img, quota_bytes, &made_bytes, err, sizeof err);
        made = ir == IMAGE_OK;
        if (made) { /* what it really takes (at most what was reserved) */
            account(p, made_bytes - bytes);
            bytes = made_bytes;
        }
        if (ir == IMAGE_NOSPACE)
            rc = DISK_FULL;
        else if (made && sync_dir(p->images) != 0) /* a saved session's image survives a crash */
            snprintf(err, sizeof err, "cannot sync %s: %s", p->images, strerror(errno));
        else if (made && !reserve_kept(p, 0)) /* another program took the space meanwhile */
            rc = DISK_FULL;
        else if (made && mkdir(mnt, 0700) != 0)
            snprintf(err, sizeof err, "cannot create %s: %s", mnt, strerror(errno));
        else if (made)
            mounted = image_mount(&p->tools, img, mnt, false, err, sizeof err) == IMAGE_OK;
    }
    if (finish_workspace(p, img, mnt, made, mounted, bytes, workspace))
        rc = DISK_OK;
    else if (rc == DISK_ERROR)
        log_session(LV_ERROR, id, NULL, "cannot make the workspace disk of %s: %s", id, err[0] ? err : "out of memory");
    free(img);
    free(mnt);
    return rc;
}

disk_result disk_open(disk_pool *p, const char *id, char **workspace, bool *adopted)
{
    *workspace = NULL;
    *adopted = false;
    char *img = path_of(p->images, id, IMAGE_SUFFIX), *mnt = path_of(p->workspaces, id, "");
    char err[512] = "";
    disk_result rc = DISK_ERROR;
    struct stat st;
    if (!img || !mnt) {
        snprintf(err, sizeof err, "out of memory");
    } else if (lstat(img, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, sizeof err, "its image %s is missing", img);
    } else {
        account(p, (long long)st.st_size); /* kept on disk whatever happens next */
        if (image_mounted_at(img, mnt)) {
            *adopted = true;
            /* a predecessor killed during a drain's move may have left it frozen */
            if (disk_thaw(p, id) == 0)
                log_session(LV_WARN, id, NULL, "its disk was left frozen by a move that did not end; thawed");
            rc = image_workspace_dir(mnt, err, sizeof err) == 0 ? DISK_OK : DISK_HELD;
        } else {
            /* whatever else sits on its mount point is a leftover */
            if (mounts_is_mount_point(mnt))
                mounts_unmount(mnt);
            image_result ir = IMAGE_FAILED;
            if (mkdir(mnt, 0700) != 0 && errno != EEXIST)
                snprintf(err, sizeof err, "cannot create %s: %s", mnt, strerror(errno));
            else
                ir = image_mount(&p->tools, img, mnt, true, err, sizeof err);
            /* never lose a workspace to a failure that may pass: keep the image unserved */
            rc = ir == IMAGE_OK ? DISK_OK : DISK_HELD;
        }
    }
    if (rc == DISK_OK && !(*workspace = path_of(mnt, IMAGE_WORKSPACE, "")))
        rc = DISK_HELD;
    if (rc == DISK_HELD && image_mounted_at(img, mnt)) /* unserved: nothing of it stays mounted */
        mounts_unmount(mnt);
    if (rc != DISK_OK)
        log_session(LV_WARN, id, NULL, "session %s not restored%s: %s", id,
                    rc == DISK_HELD ? " (its image is kept for a later start)" : "", err[0] ? err : "out of memory");
    free(img);
    free(mnt);
    return rc;
}

char *disk_image_path(disk_pool *p, const char *id)
{
    return path_of(p->images, id, IMAGE_SUFFIX);
}

/* FIFREEZE or FITHAW on the root of the session's mounted filesystem. */
static int freeze_ioctl(disk_pool *p, const char *id, unsigned long op)
{
    char *mnt = path_of(p->workspaces, id, "");
    int fd = mnt ? open(mnt, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW) : -1;
    int rc = fd >= 0 ? ioctl(fd, op, 0) : -1, e = errno;
    if (fd >= 0)
        close(fd);
    free(mnt);
    errno = e;
    return rc;
}

int disk_freeze(disk_pool *p, const char *id)
{
    return freeze_ioctl(p, id, FIFREEZE);
}

int disk_thaw(disk_pool *p, const char *id)
{
    return freeze_ioctl(p, id, FITHAW);
}

disk_result disk_receive(disk_pool *p, const char *id, long long bytes, disk_fill_fn fill, void *ctx,
                         char **workspace, char *why, size_t whylen)
{
    *workspace = NULL;
    snprintf(why, whylen, "out of memory");
    if (!reserve_bytes(p, bytes)) {
        pthread_mutex_lock(&p->mu);
        snprintf(why, whylen, "its disks use %.0f MB of %.0f MB and the session's disk needs %.0f MB", p->used / MB,
                 p->cap / MB, bytes / MB);
        pthread_mutex_unlock(&p->mu);
        return DISK_FULL;
    }
    char *img = path_of(p->images, id, IMAGE_SUFFIX), *mnt = path_of(p->workspaces, id, "");
    disk_result rc = DISK_ERROR;
    bool made = false, mounted = false;
    if (img && mnt && !reserve_kept(p, bytes)) {
        snprintf(why, whylen, "its host has %.0f MB free, keeps %.0f MB for its own state and the session's disk "
                              "needs %.0f MB", host_free(p) / MB, p->reserve / MB, bytes / MB);
        rc = DISK_FULL;
    } else if (img && mnt) {
        image_result ir = image_reserve(img, bytes, why, whylen);
        made = ir == IMAGE_OK;
        if (ir == IMAGE_NOSPACE)
            rc = DISK_FULL;
        int fd = made ? open(img, O_WRONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
        if (made && fd < 0)
            snprintf(why, whylen, "cannot open %s: %s", img, strerror(errno));
        else if (made && fill(ctx, fd) != 0)
            snprintf(why, whylen, "its image did not arrive whole");
        else if (made && fdatasync(fd) != 0)
            snprintf(why, whylen, "cannot sync %s: %s", img, strerror(errno));
        else if (made && sync_dir(p->images) != 0) /* a saved session's image survives a crash */
            snprintf(why, whylen, "cannot sync %s: %s", p->images, strerror(errno));
        else if (made && mkdir(mnt, 0700) != 0)
            snprintf(why, whylen, "cannot create %s: %s", mnt, strerror(errno));
        else if (made) /* checked: it came over the network */
            mounted = image_mount(&p->tools, img, mnt, true, why, whylen) == IMAGE_OK;
        if (fd >= 0)
            close(fd);
    }
    if (finish_workspace(p, img, mnt, made, mounted, bytes, workspace))
        rc = DISK_OK;
    free(img);
    free(mnt);
    return rc;
}

static void unmount_session(const char *mnt)
{
    if (mounts_is_mount_point(mnt) && mounts_unmount(mnt) != 0)
        log_warn("cannot unmount %s: %s", mnt, strerror(errno));
}

void disk_close(disk_pool *p, const char *id)
{
    char *mnt = path_of(p->workspaces, id, "");
    if (mnt)
        unmount_session(mnt);
    free(mnt);
}

char *disk_workspace_path(disk_pool *p, const char *id)
{
    char *mnt = path_of(p->workspaces, id, "");
    char *ws = mnt ? path_of(mnt, IMAGE_WORKSPACE, "") : NULL;
    free(mnt);
    return ws;
}

int disk_pause(disk_pool *p, const char *id)
{
    char *mnt = path_of(p->workspaces, id, "");
    int rc = -1;
    if (mnt) {
        unmount_session(mnt);
        rc = mounts_is_mount_point(mnt) ? -1 : 0;
    }
    free(mnt);
    return rc;
}

disk_result disk_resume(disk_pool *p, const char *id, char **workspace)
{
    *workspace = NULL;
    char *img = path_of(p->images, id, IMAGE_SUFFIX), *mnt = path_of(p->workspaces, id, "");
    char err[512] = "out of memory";
    disk_result rc = DISK_ERROR;
    struct stat st;
    if (!img || !mnt) {
        /* err says it */
    } else if (lstat(img, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, sizeof err, "its image %s is missing", img);
    } else if (mkdir(mnt, 0700) != 0 && errno != EEXIST) {
        snprintf(err, sizeof err, "cannot create %s: %s", mnt, strerror(errno));
    } else if ((mounts_is_mount_point(mnt) || image_mount(&p->tools, img, mnt, false, err, sizeof err) == IMAGE_OK) &&
               image_workspace_dir(mnt, err, sizeof err) == 0 && (*workspace = path_of(mnt, IMAGE_WORKSPACE, ""))) {
        rc = DISK_OK;
    }
    if (rc != DISK_OK)
        log_session(LV_ERROR, id, NULL, "cannot mount the disk of paused session %s again (its image is kept): %s", id,
                    err);
    free(img);
    free(mnt);
    return rc;
}

disk_result disk_keep(disk_pool *p, const char *id)
{
    char *img = path_of(p->images, id, IMAGE_SUFFIX), *mnt = path_of(p->workspaces, id, "");
    struct stat st;
    disk_result rc = DISK_ERROR;
    if (img && mnt && lstat(img, &st) == 0 && S_ISREG(st.st_mode)) {
        account(p, (long long)st.st_size);
        unmount_session(mnt); /* a predecessor killed while pausing it */
        rc = DISK_OK;
    } else {
        log_session(LV_WARN, id, NULL, "paused session %s not restored: its image is missing", id);
    }
    free(img);
    free(mnt);
    return rc;
}

int disk_hand_over(disk_pool *p, const char *id, const char *dst)
{
    char *img = path_of(p->images, id, IMAGE_SUFFIX), *mnt = path_of(p->workspaces, id, "");
    struct stat st;
    int rc = -1;
    if (img && mnt && !mounts_is_mount_point(mnt) && lstat(img, &st) == 0 && S_ISREG(st.st_mode) &&
        move_file(img, dst) == 0) {
        account(p, -(long long)st.st_size);
        if (rmdir(mnt) != 0 && errno != ENOENT)
            log_warn("cannot remove %s: %s", mnt, strerror(errno));
        rc = 0;
    } else {
        log_session(LV_WARN, id, NULL, "the image of %s could not be moved to %s: %s", id, dst, strerror(errno));
    }
    free(img);
    free(mnt);
    return rc;
}

int disk_take_over(disk_pool *p, const char *id, const char *src)
{
    char *img = path_of(p->images, id, IMAGE_SUFFIX);
    int rc = -1;
    if (img && access(img, F_OK) != 0 && move_file(src, img) == 0)
        rc = 0;
    else
        log_session(LV_WARN, id, NULL, "the image of %s could not be taken from %s: %s", id, src, strerror(errno));
    free(img);
    return rc;
}

void disk_destroy(disk_pool *p, const char *id)
{
    char *img = path_of(p->images, id, IMAGE_SUFFIX), *mnt = path_of(p->workspaces, id, "");
    if (!img || !mnt) {
        log_session(LV_ERROR, id, NULL, "out of memory removing the disk of %s", id);
    } else {
        unmount_session(mnt);
        if (rmdir(mnt) != 0 && errno != ENOENT)
            log_warn("cannot remove %s: %s", mnt, strerror(errno));
        struct stat st;
        if (lstat(img, &st) == 0) {
            /* a lazily detached mount keeps the blocks until its last user goes */
            if (unlink(img) == 0)
                account(p, -(long long)st.st_size);
            else
                log_warn("cannot remove %s: %s", img, strerror(errno));
        }
    }
    free(img);
    free(mnt);
}

typedef struct {
    const disk_pool *p;
    bool (*live)(void *ctx, const char *id);
    void *ctx;
} cleanup_ctx;

/* Mounts under the workspaces mount to keep: live sessions' mount points. */
static bool keep_mount(void *arg, const char *path)
{
    const cleanup_ctx *c = arg;
    size_t wl = strlen(c->p->workspaces);
    if (strncmp(path, c->p->workspaces, wl) != 0 || path[wl] != '/' || strchr(path + wl + 1, '/'))
        return false;
    return c->live(c->ctx, path + wl + 1);
}

/* The session id of an image name "<id>.img" into id; false for other names. */
static bool image_id(const char *name, char *id, size_t idlen)
{
    size_t n = strlen(name), sl = strlen(IMAGE_SUFFIX);
    if (n <= sl || n - sl >= idlen || strcmp(name + n - sl, IMAGE_SUFFIX) != 0)
        return false;
    memcpy(id, name, n - sl);
    id[n - sl] = '\0';
    return true;
}

static bool keep_loop(void *arg, const char *file)
{
    const cleanup_ctx *c = arg;
    const char *name = strrchr(file, '/');
    char id[256];
    return name && image_id(name + 1, id, sizeof id) && c->live(c->ctx, id);
}

/* Each name in dir (not "." or ".."), flat. */
static void for_each_name(const char *dir, void (*fn)(const cleanup_ctx *c, const char *dir, const char *name),
                          const cleanup_ctx *c)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            fn(c, dir, e->d_name);
    closedir(d);
}

static void remove_orphan_image(const cleanup_ctx *c, const char *dir, const char *name)
{
    char id[256];
    if (!image_id(name, id, sizeof id)) {
        log_info("leaving %s/%s alone (not a workspace image)", dir, name);
        return;
    }
    if (c->live(c->ctx, id))
        return;
    char *path = path_of(dir, name, "");
    if (path && unlink(path) != 0)
        log_warn("cannot remove %s: %s", path, strerror(errno));
    free(path);
}

static void remove_orphan_mount_point(const cleanup_ctx *c, const char *dir, const char *name)
{
    if (c->live(c->ctx, name))
        return;
    char *path = path_of(dir, name, "");
    /* unmounted above; a plain directory left there is ours, the walker never crosses into a
     * mount that is still there */
    if (path && !mounts_is_mount_point(path) && fs_rmtree(path) != 0)
        log_warn("cannot remove %s: %s", path, strerror(errno));
    free(path);
}

void disk_cleanup(disk_pool *p, bool (*live)(void *ctx, const char *id), void *ctx)
{
    cleanup_ctx c = {p, live, ctx};
    /* the pool's own mounts only: other parts of the server clean theirs */
    int unmounted = mounts_unmount_under(p->workspaces, keep_mount, &c);
    int detached = loop_detach_under(p->images, keep_loop, &c);
    for_each_name(p->images, remove_orphan_image, &c);
    for_each_name(p->workspaces, remove_orphan_mount_point, &c);
    if (unmounted || detached)
        log_info("removed leftovers of an earlier run: %d mounts, %d loop devices", unmounted,
                 detached);
}
