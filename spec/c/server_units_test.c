/* Unit test of airlockd's growable buffer (util/buf) and tree walker (fs/walk): limits and
 * sticky errors; visiting order, symlinks never followed, removal that stays inside the tree,
 * and a 3,000-level chain walked and removed under a 64-descriptor limit. And util/move_file's
 * move of a memory image's directory, within a filesystem and across two (/dev/shm to /tmp).
 * Built and run by spec/server/units_spec.lua. */
#include "check.h"
#include "fs/walk.h"
#include "util/buf.h"
#include "util/move_file.h"

#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- buffer -------------------------------------------------------------------------- */

static void test_buffer(void)
{
    buffer b = {0};
    CHECK(buf_puts(&b, "abc") == 0 && buf_printf(&b, "-%d-", 42) == 0 && buf_append(&b, "x\0y", 3) == 0);
    CHECK(b.len == 10 && memcmp(b.data, "abc-42-x\0y", 10) == 0 && b.data[10] == '\0');
    buf_truncate(&b, 3);
    CHECK(b.len == 3 && strcmp(b.data, "abc") == 0);
    size_t len = 99;
    char *s = buf_take(&b, &len);
    CHECK(s && len == 3 && strcmp(s, "abc") == 0 && b.data == NULL && b.len == 0);
    free(s);
    s = buf_take(&b, &len); /* empty: "" */
    CHECK(s && len == 0 && s[0] == '\0');
    free(s);

    buf_init(&b, 5);
    CHECK(buf_append(&b, "12345", 5) == 0);
    CHECK(buf_append(&b, "6", 1) == -1 && b.err == EFBIG && b.len == 5);
    CHECK(buf_append(&b, "", 0) == -1); /* sticky */
    CHECK(buf_take(&b, NULL) == NULL && b.data == NULL && b.err == 0);

    /* reading: exactly the limit is fine, one byte more is EFBIG */
    int p[2];
    CHECK(pipe(p) == 0);
    CHECK(write(p[1], "hello", 5) == 5);
    close(p[1]);
    buf_init(&b, 5);
    CHECK(buf_read_all(&b, p[0]) == 0 && b.len == 5 && strcmp(b.data, "hello") == 0);
    close(p[0]);
    buf_free(&b);
    CHECK(pipe(p) == 0);
    CHECK(write(p[1], "hello!", 6) == 6);
    close(p[1]);
    buf_init(&b, 5);
    CHECK(buf_read_all(&b, p[0]) == -1 && errno == EFBIG);
    close(p[0]);
    buf_free(&b);
}

/* ---- walker -------------------------------------------------------------------------- */

static char base[64];

static void mkfile(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* A chain of depth directories named "d" below dir, made by descriptor (no long paths). */
static int make_chain(const char *dir, int depth)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int i = 0; fd >= 0 && i < depth; i++) {
        int next = mkdirat(fd, "d", 0755) == 0 ? openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        close(fd);
        fd = next;
    }
    if (fd < 0)
        return -1;
    int f = openat(fd, "leaf", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    close(fd);
    if (f < 0)
        return -1;
    close(f);
    return 0;
}

/* A comb: depth levels of "d", each also holding a directory "s" (with a file) and a file
 * "z", so directories closed to stay within the descriptor budget are reopened with names
 * still to visit. */
static int make_comb(const char *dir, int depth)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int i = 0; fd >= 0 && i < depth; i++) {
        int ok = mkdirat(fd, "d", 0755) == 0 && mkdirat(fd, "s", 0755) == 0;
        int f1 = ok ? openat(fd, "z", O_WRONLY | O_CREAT | O_CLOEXEC, 0644) : -1;
        int f2 = ok ? openat(fd, "s/f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644) : -1;
        if (f1 >= 0)
            close(f1);
        if (f2 >= 0)
            close(f2);
        int next = f1 >= 0 && f2 >= 0 ? openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        close(fd);
        fd = next;
    }
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

static long long expected_blocks;

static int add_nftw(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)path;
    (void)flag;
    (void)ftw;
    expected_blocks += (long long)st->st_blocks * 512;
    return 0;
}

typedef struct {
    int entries, dirs_done, in_skipped, max_depth, max_fds, order_errors;
    char last_done[256];
} tally;

static int count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ".", ".." and the DIR's own */
}

static int record_visit(void *ctx, const fs_entry *e)
{
    tally *t = ctx;
    if ((int)e->depth > t->max_depth)
        t->max_depth = (int)e->depth;
    if (e->event == FS_DIR_DONE) {
        t->dirs_done++;
        CHECK(e->st == NULL);
        snprintf(t->last_done, sizeof t->last_done, "%s", e->name);
        return FS_CONTINUE;
    }
    t->entries++;
    if (t->entries % 97 == 0) {
        int n = count_fds();
        if (n > t->max_fds)
            t->max_fds = n;
    }
    if (strcmp(e->name, "inside-skipped") == 0)
        t->in_skipped++;
    /* a directory's entry comes before its contents are visited */
    if (S_ISDIR(e->st->st_mode) && strcmp(e->name, "skip") == 0)
        return FS_SKIP;
    return FS_CONTINUE;
}

/* Moves level 51 of a chain out from under level 50 while the walk is at the bottom, so
 * going back up through ".." finds another parent and must reopen level 50 by name. */
typedef struct {
    const char *from, *to;
    int moved, dirs_done;
} mover;

static int move_midway(void *ctx, const fs_entry *e)
{
    mover *m = ctx;
    if (e->event == FS_DIR_DONE)
        m->dirs_done++;
    else if (!m->moved && strcmp(e->name, "leaf") == 0)
        m->moved = rename(m->from, m->to) == 0 ? 1 : -1;
    return FS_CONTINUE;
}

static void test_moved_parent(void)
{
    char root[128], from[512], to[160];
    snprintf(root, sizeof root, "%s/moving", base);
    CHECK(mkdir(root, 0755) == 0 && make_chain(root, 100) == 0);
    int n = snprintf(from, sizeof from, "%s", root);
    for (int i = 0; i < 51; i++)
        n += snprintf(from + n, sizeof from - (size_t)n, "/d");
    snprintf(to, sizeof to, "%s/moved", root);
    mover m = {from, to, 0, 0};
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(fs_walk(fd, move_midway, &m) == 0);
    close(fd);
    CHECK(m.moved == 1);
    CHECK(m.dirs_done == 100); /* every level reported, levels 1-50 reached again by name */
    CHECK(fs_rmtree(root) == 0 && !exists(root));
}

static void test_walk(void)
{
    snprintf(base, sizeof base, "/tmp/airlock-walk-XXXXXX");
    CHECK(mkdtemp(base) != NULL);
    char tree[128], outside[128], p[256];
    snprintf(tree, sizeof tree, "%s/tree", base);
    snprintf(outside, sizeof outside, "%s/outside", base);
    CHECK(mkdir(tree, 0755) == 0 && mkdir(outside, 0755) == 0);
    snprintf(p, sizeof p, "%s/canary", outside);
    mkfile(p, "keep me");
    snprintf(p, sizeof p, "%s/a", tree);
    CHECK(mkdir(p, 0755) == 0);
    snprintf(p, sizeof p, "%s/a/file", tree);
    mkfile(p, "some text");
    snprintf(p, sizeof p, "%s/a/to-outside", tree); /* a symlink to a directory out of the tree */
    CHECK(symlink(outside, p) == 0);
    snprintf(p, sizeof p, "%s/skip", tree);
    CHECK(mkdir(p, 0755) == 0);
    snprintf(p, sizeof p, "%s/skip/inside-skipped", tree);
    mkfile(p, "x");
    snprintf(p, sizeof p, "%s/chain", tree);
    CHECK(mkdir(p, 0755) == 0 && make_chain(p, 300) == 0);

    /* usage: the same sum as nftw's, symlinks measured, not followed */
    expected_blocks = 0;
    CHECK(nftw(tree, add_nftw, 64, FTW_PHYS) == 0);
    CHECK(fs_tree_usage(tree) == expected_blocks);

    int fd = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int fds_before = count_fds();
    tally t = {0};
    CHECK(fs_walk(fd, record_visit, &t) == 0);
    close(fd);
    /* entries: a, file, to-outside, skip, chain, 300 x d, leaf */
    CHECK(t.entries == 306);
    CHECK(t.in_skipped == 0);
    CHECK(t.dirs_done == 302); /* a, chain, 300 x d; not skip */
    CHECK(t.max_depth == 302);
    CHECK(t.max_fds <= fds_before + FS_WALK_OPEN_DIRS + 3);

    /* removal leaves what a symlink points to */
    CHECK(fs_rmtree(tree) == 0);
    CHECK(!exists(tree));
    snprintf(p, sizeof p, "%s/canary", outside);
    CHECK(exists(p));
    CHECK(fs_rmtree(tree) == 0); /* gone already: fine */

    /* a symlink as the root: unlinked, its target kept */
    snprintf(p, sizeof p, "%s/link", base);
    CHECK(symlink(outside, p) == 0);
    CHECK(fs_tree_usage(p) == -1);
    CHECK(fs_rmtree(p) == 0 && !exists(p) && exists(outside));

    /* the comb: every entry visited once, every directory done once, all removed */
    snprintf(p, sizeof p, "%s/comb", base);
    CHECK(mkdir(p, 0755) == 0 && make_comb(p, 200) == 0);
    expected_blocks = 0;
    CHECK(nftw(p, add_nftw, 64, FTW_PHYS) == 0);
    CHECK(fs_tree_usage(p) == expected_blocks);
    fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    tally comb = {0};
    CHECK(fs_walk(fd, record_visit, &comb) == 0);
    close(fd);
    CHECK(comb.entries == 200 * 4 && comb.dirs_done == 200 * 2 && comb.max_depth == 201);
    CHECK(fs_rmtree(p) == 0 && !exists(p));

    /* 3,000 levels under 64 descriptors: a walk holding one per level could not */
    snprintf(p, sizeof p, "%s/deep", base);
    CHECK(mkdir(p, 0755) == 0 && make_chain(p, 3000) == 0);
    struct rlimit old, low = {64, 64};
    CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
    low.rlim_max = old.rlim_max;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    long long u = fs_tree_usage(p);
    CHECK(u >= 3000LL * 512);
    CHECK(fs_rmtree(p) == 0 && !exists(p));
    CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);

    test_moved_parent();
    CHECK(fs_rmtree(base) == 0 && !exists(base));
}

/* A file at dir/name holding text, holed before it (a sparse image). */
static void put(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && pwrite(fd, text, strlen(text), 1 << 20) == (ssize_t)strlen(text));
    if (fd >= 0)
        close(fd);
}

static bool holds(const char *dir, const char *name, const char *text)
{
    char p[512], got[64] = "";
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_RDONLY);
    struct stat st;
    bool ok = fd >= 0 && fstat(fd, &st) == 0 && st.st_size == (off_t)((1 << 20) + strlen(text)) &&
              st.st_blocks * 512 < (1 << 20) && pread(fd, got, strlen(text), 1 << 20) == (ssize_t)strlen(text) &&
              strcmp(got, text) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

static void test_move_dir(void)
{
    char shm[] = "/dev/shm/move-unit-XXXXXX", tmp[] = "/tmp/move-unit-XXXXXX";
    CHECK(mkdtemp(shm) != NULL && mkdtemp(tmp) != NULL);
    char src[256], dst[256], back[256], sub[300];
    snprintf(src, sizeof src, "%s/x.ckpt", shm);
    snprintf(dst, sizeof dst, "%s/x.ckpt", tmp);
    snprintf(back, sizeof back, "%s/y.ckpt", shm);
    CHECK(mkdir(src, 0700) == 0);
    put(src, "pages.img", "pages");
    put(src, "checkpoint.img", "state");
    /* across two filesystems: copied (sparse) and renamed into place, the source gone */
    CHECK(move_dir(src, dst) == 0);
    CHECK(!exists(src) && holds(dst, "pages.img", "pages") && holds(dst, "checkpoint.img", "state"));
    snprintf(sub, sizeof sub, "%s.part", dst);
    CHECK(!exists(sub));
    /* and back, then within one filesystem: a rename */
    CHECK(move_dir(dst, back) == 0 && !exists(dst) && holds(back, "pages.img", "pages"));
    CHECK(move_dir(back, src) == 0 && !exists(back) && holds(src, "checkpoint.img", "state"));
    /* a directory in it (no memory image has one): refused across filesystems, nothing half made */
    snprintf(sub, sizeof sub, "%s/sub", src);
    CHECK(mkdir(sub, 0700) == 0);
    errno = 0;
    CHECK(move_dir(src, dst) == -1 && errno == ENOTSUP && !exists(dst) && holds(src, "pages.img", "pages"));
    snprintf(sub, sizeof sub, "%s.part", dst);
    CHECK(!exists(sub));
    /* a destination that exists is never written over */
    CHECK(mkdir(dst, 0700) == 0);
    put(dst, "other", "other");
    CHECK(move_dir(src, dst) == -1 && holds(dst, "other", "other") && holds(src, "pages.img", "pages"));
    CHECK(fs_rmtree(shm) == 0 && fs_rmtree(tmp) == 0);
}

int main(void)
{
    test_buffer();
    test_walk();
    test_move_dir();
    return CHECK_SUMMARY();
}
