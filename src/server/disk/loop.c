/* Loop devices through /dev/loop-control and LOOP_CONFIGURE; found again through sysfs. */
#include "disk/loop.h"
#include "log/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/loop.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* Other processes race for the same free loop (EBUSY): bounded retries. */
#define ATTACH_ATTEMPTS 64
#define DELETED_MARK " (deleted)"

/* Opens /dev/loopN, making the node when the kernel made the device but nothing made its
 * node (no udev in containers). */
static int open_loop_node(int nr, char *dev, size_t devlen)
{
    snprintf(dev, devlen, "/dev/loop%d", nr);
    int fd = open(dev, O_RDWR | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        if (mknod(dev, S_IFBLK | 0660, makedev(7, (unsigned)nr)) != 0 && errno != EEXIST)
            return -1;
        fd = open(dev, O_RDWR | O_CLOEXEC);
    }
    return fd;
}

static int configure(int loopfd, int filefd, const char *file, bool direct_io)
{
    struct loop_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.fd = (unsigned)filefd;
    /* autoclear: the loop detaches itself when its mount goes (or its opener dies unmounted);
     * direct I/O: no second copy of the data in the host page cache */
    cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR | (direct_io ? LO_FLAGS_DIRECT_IO : 0);
    snprintf((char *)cfg.info.lo_file_name, LO_NAME_SIZE, "%s", file);
    return ioctl(loopfd, LOOP_CONFIGURE, &cfg);
}

int loop_attach(const char *file, char *dev, size_t devlen)
{
    int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (ctl < 0)
        return -1;
    int filefd = open(file, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (filefd < 0) {
        int e = errno;
        close(ctl);
        errno = e;
        return -1;
    }
    int loopfd = -1, err = 0;
    for (int attempt = 0; attempt < ATTACH_ATTEMPTS && loopfd < 0 && !err; attempt++) {
        int nr = ioctl(ctl, LOOP_CTL_GET_FREE);
        int fd = nr < 0 ? -1 : open_loop_node(nr, dev, devlen);
        if (fd < 0) {
            err = errno;
            break;
        }
        int rc = configure(fd, filefd, file, true);
        if (rc != 0 && errno == EINVAL) /* a backing filesystem without O_DIRECT */
            rc = configure(fd, filefd, file, false);
        if (rc == 0) {
            loopfd = fd;
        } else {
            if (errno != EBUSY) /* EBUSY: another process took this loop first */
                err = errno;
            close(fd);
        }
    }
    if (loopfd < 0 && !err)
        err = EBUSY;
    close(filefd);
    close(ctl);
    errno = err;
    return loopfd;
}

/* The backing file of loop `name` ("loop7") into out, without the "(deleted)" mark; *deleted
 * tells whether it had one. false when name is not an attached loop. */
static bool backing_file(const char *name, char *out, size_t outlen, bool *deleted)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "/sys/block/%s/loop/backing_file", name);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, out, outlen - 1);
    close(fd);
    if (n <= 0)
        return false;
    out[n] = '\0';
    if (out[n - 1] == '\n')
        out[--n] = '\0';
    size_t ml = strlen(DELETED_MARK);
    *deleted = (size_t)n > ml && strcmp(out + n - ml, DELETED_MARK) == 0;
    if (*deleted)
        out[n - ml] = '\0';
    return true;
}

bool loop_serving(const char *file, char *name, size_t namelen)
{
    DIR *d = opendir("/sys/block");
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        char back[PATH_MAX];
        bool deleted;
        if (strncmp(e->d_name, "loop", 4) != 0 || !backing_file(e->d_name, back, sizeof back, &deleted))
            continue;
        found = !deleted && strcmp(back, file) == 0;
        if (found && name)
            snprintf(name, namelen, "%s", e->d_name);
    }
    closedir(d);
    return found;
}

bool loop_device_backs(dev_t dev, const char *file)
{
    char p[64], link[PATH_MAX];
    snprintf(p, sizeof p, "/sys/dev/block/%u:%u", major(dev), minor(dev));
    ssize_t n = readlink(p, link, sizeof link - 1);
    if (n <= 0)
        return false;
    link[n] = '\0';
    const char *name = strrchr(link, '/');
    name = name ? name + 1 : link;
    char back[PATH_MAX];
    bool deleted;
    return strncmp(name, "loop", 4) == 0 && backing_file(name, back, sizeof back, &deleted) &&
           !deleted && strcmp(back, file) == 0;
}

int loop_detach_under(const char *dir, bool (*keep)(void *ctx, const char *file), void *ctx)
{
    DIR *d = opendir("/sys/block");
    if (!d)
        return 0;
    size_t dl = strlen(dir);
    int detached = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char back[PATH_MAX];
        bool deleted;
        if (strncmp(e->d_name, "loop", 4) != 0 || !backing_file(e->d_name, back, sizeof back, &deleted))
            continue;
        /* directly under dir: images are never in subdirectories */
        if (strncmp(back, dir, dl) != 0 || back[dl] != '/' || strchr(back + dl + 1, '/'))
            continue;
        if (keep && keep(ctx, back))
            continue;
        char dev[300];
        snprintf(dev, sizeof dev, "/dev/%s", e->d_name);
        int fd = open(dev, O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && ioctl(fd, LOOP_CLR_FD) == 0)
            detached++;
        else
            log_warn("cannot detach %s (%s): %s", dev, back, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    closedir(d);
    return detached;
}
