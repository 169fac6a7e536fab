/* Mount points from /proc/self/mountinfo, umount2 with a lazy fallback, a shared bind mount. */
#include "disk/mounts.h"
#include "log/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>

/* Stacked mounts need one pass each; more than this is not ours to untangle. */
#define UNMOUNT_PASSES 8
/* A mountinfo line: two escaped paths of at most PATH_MAX each, options, source. */
#define LINE_MAX_BYTES (3 * 4096 + 1024)

/* mountinfo escapes space, tab, newline and backslash as \ooo: decoded in place. */
static void unescape(char *s)
{
    char *o = s;
    for (const char *i = s; *i; i++) {
        if (i[0] == '\\' && i[1] >= '0' && i[1] <= '3' && i[2] >= '0' && i[2] <= '7' && i[3] >= '0' &&
            i[3] <= '7') {
            *o++ = (char)((i[1] - '0') * 64 + (i[2] - '0') * 8 + (i[3] - '0'));
            i += 3;
        } else {
            *o++ = *i;
        }
    }
    *o = '\0';
}

/* The mount point field (the 5th) of a mountinfo line, decoded; NULL when malformed. */
static char *mount_point_of(char *line)
{
    char *save = NULL, *field = strtok_r(line, " ", &save);
    for (int i = 1; field && i < 5; i++)
        field = strtok_r(NULL, " ", &save);
    if (field)
        unescape(field);
    return field;
}

static bool strictly_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    return strncmp(path, dir, n) == 0 && path[n] == '/' && path[n + 1] != '\0';
}

void mounts_free(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

int mounts_under(const char *dir, char ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char *line = malloc(LINE_MAX_BYTES);
    char **v = NULL;
    size_t cap = 0;
    int rc = line ? 0 : -1;
    bool skipping = false; /* inside the rest of an overlong line */
    while (rc == 0 && fgets(line, LINE_MAX_BYTES, f)) {
        size_t len = strlen(line);
        bool whole = len > 0 && line[len - 1] == '\n';
        bool skip = skipping;
        skipping = !whole;
        if (skip || !whole)
            continue;
        line[len - 1] = '\0';
        const char *mp = mount_point_of(line);
        if (!mp || !strictly_under(mp, dir))
            continue;
        if (*n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            char **nv = ncap <= MOUNTS_MAX ? realloc(v, ncap * sizeof *nv) : NULL;
            if (!nv) {
                rc = -1;
                break;
            }
            v = nv;
            cap = ncap;
        }
        if (!(v[*n] = strdup(mp)))
            rc = -1;
        else
            (*n)++;
    }
    free(line);
    fclose(f);
    if (rc != 0) {
        mounts_free(v, *n);
        *n = 0;
        errno = ENOMEM;
        return -1;
    }
    *out = v;
    return 0;
}

bool mounts_is_mount_point(const char *path)
{
    struct statx sx;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) != 0)
        return false;
    if (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)
        return (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
    /* kernels before 5.8: a mount point on another device (a bind of the same one is missed) */
    char *parent = NULL;
    struct stat a, b;
    bool r = asprintf(&parent, "%s/..", path) >= 0 && lstat(path, &a) == 0 && lstat(parent, &b) == 0 &&
             a.st_dev != b.st_dev;
    free(parent);
    return r;
}

int mounts_unmount(const char *path)
{
    if (umount2(path, UMOUNT_NOFOLLOW) == 0)
        return 0;
    if (errno == EBUSY && umount2(path, UMOUNT_NOFOLLOW | MNT_DETACH) == 0)
        return 0;
    return -1;
}

int mounts_unmount_under(const char *dir, bool (*keep)(void *ctx, const char *path), void *ctx)
{
    int done = 0;
    for (int pass = 0; pass < UNMOUNT_PASSES; pass++) {
        char **v;
        size_t n;
        if (mounts_under(dir, &v, &n) != 0)
            break;
        int tried = 0;
        for (size_t i = n; i-- > 0;) { /* later lines sit on earlier ones: deepest first */
            if (keep && keep(ctx, v[i]))
                continue;
            tried++;
            if (mounts_unmount(v[i]) == 0)
                done++;
            else
                log_warn("cannot unmount %s: %s", v[i], strerror(errno));
        }
        mounts_free(v, n);
        if (tried == 0)
            break;
    }
    return done;
}

int mounts_make_shared(const char *dir)
{
    if (mounts_is_mount_point(dir)) /* a predecessor's: its peers (sandboxes' copies) stay linked */
        return mount(NULL, dir, NULL, MS_REC | MS_SHARED, NULL);
    /* the bind mount would cover (and so pin, out of reach) whatever is mounted below: those
     * are leftovers, unmounted first */
    mounts_unmount_under(dir, NULL, NULL);
    if (mount(dir, dir, NULL, MS_BIND, NULL) != 0)
        return -1;
    /* a peer group of its own: on a host whose / is shared (systemd), a bind would otherwise
     * join /'s group, and every workspace mount would be copied to all of /'s peers */
    if (mount(NULL, dir, NULL, MS_PRIVATE, NULL) != 0)
        return -1;
    return mount(NULL, dir, NULL, MS_SHARED, NULL);
}
