/* Workspace images: fallocate + mke2fs, e2fsck -p, loop + mount(2), and the takeover check. */
#include "disk/image.h"

#include "disk/loop.h"
#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024LL * 1024)
/* mke2fs picks 4 KiB blocks from 512 MiB up, where the smallest journal is 4 MiB. */
#define BIG_IMAGE (512 * MIB)
/* mke2fs and e2fsck of a workspace take milliseconds; a stuck one is killed. */
#define TOOL_TIMEOUT_MS 120000
/* After an unmount, autoclear releases the loop asynchronously. */
#define HELD_WAIT_MS 3000
#define HELD_POLL_MS 50

static const char *const TOOL_DIRS[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
static char *const TOOL_ENV[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};

static char *find_tool(const char *name)
{
    for (size_t i = 0; i < sizeof TOOL_DIRS / sizeof TOOL_DIRS[0]; i++) {
        char *p = NULL;
        if (asprintf(&p, "%s/%s", TOOL_DIRS[i], name) < 0)
            return NULL;
        if (access(p, X_OK) == 0)
            return p;
        free(p);
    }
    return NULL;
}

int image_tools_find(image_tools *t, char *err, size_t errlen)
{
    t->mke2fs = find_tool("mke2fs");
    t->e2fsck = find_tool("e2fsck");
    if (t->mke2fs && t->e2fsck)
        return 0;
    snprintf(err, errlen, "workspace disks need e2fsprogs (mke2fs and e2fsck): install it (apt-get install e2fsprogs)");
    image_tools_free(t);
    return -1;
}

void image_tools_free(image_tools *t)
{
    free(t->mke2fs);
    free(t->e2fsck);
    t->mke2fs = t->e2fsck = NULL;
}

/* The first estimate, never less than the quota needs (image_create then shrinks it). */
long long image_bytes_for(long long quota_bytes)
{
    long long bytes = quota_bytes + quota_bytes / 16 + 2 * MIB;
    return (bytes + MIB - 1) / MIB * MIB;
}

static long long ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)(t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Runs an e2fsprogs program (stdin and stdout /dev/null) and returns its exit status, or -1
 * when it could not run or was killed at the deadline. The start of its stderr goes to err. */
static int run_tool(char *const argv[], char *err, size_t errlen)
{
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
    /* nothing else of airlockd's (sockets, pipes, disks) reaches the tool */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, TOOL_ENV);
    posix_spawn_file_actions_destroy(&fa);
    close(pipefd[1]);
    if (rc != 0) {
        close(pipefd[0]);
        snprintf(err, errlen, "cannot run %s: %s", argv[0], strerror(rc));
        return -1;
    }
    char msg[512];
    size_t kept = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool killed = false;
    for (;;) {
        long long left = TOOL_TIMEOUT_MS - ms_since(&t0);
        struct pollfd p = {pipefd[0], POLLIN, 0};
        int pr = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0) {
            kill(pid, SIGKILL);
            killed = true;
            break;
        }
        char chunk[512];
        ssize_t n = read(pipefd[0], chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        size_t take = (size_t)n < sizeof msg - 1 - kept ? (size_t)n : sizeof msg - 1 - kept;
        memcpy(msg + kept, chunk, take); /* the rest is drained and dropped */
        kept += take;
    }
    close(pipefd[0]);
    msg[kept] = '\0';
    while (kept > 0 && (msg[kept - 1] == '\n' || msg[kept - 1] == ' '))
        msg[--kept] = '\0';
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (killed || !WIFEXITED(status)) {
        snprintf(err, errlen, "%s %s", argv[0], killed ? "took too long" : "was killed");
        return -1;
    }
    if (WEXITSTATUS(status) != 0)
        snprintf(err, errlen, "%s exited with %d%s%s", argv[0], WEXITSTATUS(status), kept ? ": " : "", msg);
    return WEXITSTATUS(status);
}

image_result image_reserve(const char *path, long long bytes, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
        return IMAGE_FAILED;
    }
    /* Reserved now, so a full host disk fails here, cleanly, instead of later as I/O errors
     * inside the image (a sparse image overcommits the host and loses data when it fills). */
    int rc = fallocate(fd, 0, 0, (off_t)bytes);
    int e = errno;
    if (close(fd) != 0 && rc == 0) {
        rc = -1;
        e = errno;
    }
    if (rc != 0) {
        unlink(path);
        snprintf(err, errlen, "cannot reserve %lld bytes for %s: %s", bytes, path, strerror(e));
        return e == ENOSPC || e == EDQUOT ? IMAGE_NOSPACE : IMAGE_FAILED;
    }
    return IMAGE_OK;
}

static unsigned long long le32(const unsigned char *p)
{
    return (unsigned long long)p[0] | (unsigned long long)p[1] << 8 | (unsigned long long)p[2] << 16 |
           (unsigned long long)p[3] << 24;
}

/* What a command can write on the filesystem made in the image: its free blocks less the
 * blocks reserved for root (none: -m 0) and those ext4 keeps for its own metadata (2 % of
 * the blocks, at most 4096) — statvfs's f_bavail once mounted. -1 when unreadable. */
static long long usable_bytes(const char *path)
{
    unsigned char sb[1024];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t n = fd >= 0 ? pread(fd, sb, sizeof sb, 1024) : -1;
    if (fd >= 0)
        close(fd);
    if (n != (ssize_t)sizeof sb || sb[0x38] != 0x53 || sb[0x39] != 0xEF) /* the ext4 magic */
        return -1;
    unsigned long long blocks = le32(sb + 0x4), reserved = le32(sb + 0x8), free_blocks = le32(sb + 0xC);
    unsigned long long bs = 1024ULL << le32(sb + 0x18);
    unsigned long long resv = blocks / 50 < 4096 ? blocks / 50 : 4096;
    if (free_blocks < reserved + resv)
        return 0;
    return (long long)((free_blocks - reserved - resv) * bs);
}

/* mke2fs on the image at path: -m 0: no blocks reserved for root (the files API writes as
 * root, commands as uid 1000: one limit for both); -i 8192: inodes are part of the quota;
 * a small journal; nodiscard keeps the reserved blocks. The image is always a new file
 * fallocated whole (image_reserve), which reads as zeros: assume_storage_prezeroed marks its
 * inode tables and journal zeroed, so mke2fs writes ~0.4 MB whatever the size, and no mount
 * has the kernel's lazy init write them (a 512 MB workspace's 16 MB of inode tables,
 * measured: 17 MB written through the loop device in its first 15 s, 0 with the mark). */
static int make_fs(const image_tools *t, const char *path, bool big, char *err, size_t errlen)
{
    char *argv[] = {t->mke2fs, "-q", "-F", "-t", "ext4", "-b", big ? "4096" : "1024", "-m", "0", "-i", "8192",
                    "-J", big ? "size=4" : "size=1", "-E", "nodiscard,assume_storage_prezeroed=1",
                    "-L", "airlock-ws", (char *)path, NULL};
    return run_tool(argv, err, errlen);
}

/* The writable space may pass the quota by this much at most (the quota holds within 1 MB:
 * what the workspace directory and a few blocks take, and the sizing's step). */
#define SIZE_SLACK (64 * 1024LL)
#define SIZE_TOLERANCE (512 * 1024LL)
#define SIZE_PASSES 6

image_result image_create(const image_tools *t, const char *path, long long quota_bytes, long long *bytes_out,
                          char *err, size_t errlen)
{
    /* The filesystem's own costs (journal, inode tables, group metadata, ext4's reserve) are
     * not a fixed share: make it at the estimate (which holds the quota), read what it can
     * hold, and make it again smaller until what a command can write is the quota plus at
     * most SIZE_SLACK + SIZE_TOLERANCE. Its metadata shrinks with it, so shrinking by the
     * excess converges from above (two passes, measured: 1 MB to 2 GB quotas). */
    long long estimate = image_bytes_for(quota_bytes), bytes = estimate, want = quota_bytes + SIZE_SLACK;
    bool big = estimate >= BIG_IMAGE;
    for (int pass = 0;; pass++) {
        image_result r = image_reserve(path, bytes, err, errlen);
        if (r != IMAGE_OK)
            return r;
        if (make_fs(t, path, big, err, errlen) != 0) {
            unlink(path);
            return IMAGE_FAILED;
        }
        long long usable = usable_bytes(path);
        if (usable < 0) {
            snprintf(err, errlen, "%s: mke2fs made no readable ext4 superblock", path);
            unlink(path);
            return IMAGE_FAILED;
        }
        long long excess = usable - want;
        bool last = pass >= SIZE_PASSES;
        /* done when it fits; at the end, whatever holds the quota (the estimate always does) */
        if ((excess >= 0 && (excess <= SIZE_TOLERANCE || last)) || (last && bytes == estimate)) {
            *bytes_out = bytes;
            return IMAGE_OK;
        }
        long long next = excess > 0 ? bytes - excess : bytes - 2 * excess + 65536;
        if (last || next > estimate)
            next = estimate;
        next = next / 4096 * 4096;
        if (next == bytes)
            next -= 4096;
        unlink(path); /* made again from scratch: no stale metadata of the larger one */
        bytes = next;
    }
}

image_result image_check(const image_tools *t, const char *path, char *err, size_t errlen)
{
    char *argv[] = {t->e2fsck, "-p", (char *)path, NULL};
    int rc = run_tool(argv, err, errlen);
    /* 0: clean; 1: errors fixed. Anything else needs a person (e2fsck -f by hand). */
    if (rc == 0 || rc == 1)
        return IMAGE_OK;
    return rc < 0 ? IMAGE_FAILED : IMAGE_DAMAGED;
}

int image_workspace_dir(const char *mnt, char *err, size_t errlen)
{
    char *w = NULL;
    if (asprintf(&w, "%s/" IMAGE_WORKSPACE, mnt) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = 0;
    if (mkdir(w, 0755) == 0) {
        /* chmod: /workspace keeps its usual 0755 whatever airlockd's own umask (077) */
        if (chown(w, SANDBOX_UID, SANDBOX_GID) != 0 || chmod(w, 0755) != 0) {
            snprintf(err, errlen, "cannot chown %s: %s", w, strerror(errno));
            rc = -1;
        }
    } else if (errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", w, strerror(errno));
        rc = -1;
    }
    free(w);
    return rc;
}

image_result image_mount(const image_tools *t, const char *image, const char *mnt, bool check, char *err,
                         size_t errlen)
{
    char holder[64];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bool held; /* (a scan of every loop device: once when none serves it, as at nearly every mount) */
    while ((held = loop_serving(image, holder, sizeof holder)) && ms_since(&t0) < HELD_WAIT_MS) {
        struct timespec nap = {0, HELD_POLL_MS * 1000000L};
        nanosleep(&nap, NULL);
    }
    if (held) {
        snprintf(err, errlen, "%s is still attached to /dev/%s (a copy of its mount in another mount "
                              "namespace holds it); not mounting it a second time",
                 image, holder);
        return IMAGE_HELD;
    }
    if (check) { /* only now: never check an image that some loop still serves */
        image_result r = image_check(t, image, err, errlen);
        if (r != IMAGE_OK)
            return r;
    }
    char dev[64];
    int loopfd = loop_attach(image, dev, sizeof dev);
    if (loopfd < 0) {
        snprintf(err, errlen, "cannot attach %s to a loop device: %s", image, strerror(errno));
        return IMAGE_FAILED;
    }
    /* Not noexec: gVisor maps workspace files with PROT_EXEC (binaries and libraries that pip
     * puts in /workspace); the host itself never runs anything from there.
     * errors=remount-ro: an I/O error stops writes instead of corrupting the image. */
    int rc = mount(dev, mnt, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, "errors=remount-ro,noinit_itable");
    int e = errno;
    close(loopfd); /* the mount holds the loop now; autoclear frees it at unmount */
    if (rc != 0) {
        snprintf(err, errlen, "cannot mount %s on %s: %s", image, mnt, strerror(e));
        return IMAGE_FAILED;
    }
    if (image_workspace_dir(mnt, err, errlen) != 0) {
        umount2(mnt, UMOUNT_NOFOLLOW | MNT_DETACH);
        return IMAGE_FAILED;
    }
    return IMAGE_OK;
}

bool image_mounted_at(const char *image, const char *mnt)
{
    struct stat st;
    return lstat(mnt, &st) == 0 && S_ISDIR(st.st_mode) && loop_device_backs(st.st_dev, image);
}
