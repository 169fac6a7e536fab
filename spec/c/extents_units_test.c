/* Unit test of a drain's disk stream (drain/extents.c, as root on the real kernel): a workspace
 * image holding a 3 GB sparse file and 1 MiB of data is sent as about its used blocks, the copy
 * written from the stream into a fresh image is the same image byte for byte and passes
 * e2fsck; the receiving side refuses a stream that is not one, announces another size, puts a
 * run outside the image or out of order, sends past its end mark, lies in its end mark, or
 * stops early. The one program a move runs (e2fsck, on the receiving node) inherits no
 * descriptor beyond its standard ones. Built and run by spec/server/extents_units_spec.lua. */
#include "check.h"
#include "disk/image.h"
#include "drain/extents.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB (1024LL * 1024)

static char base[64];

static char *at(const char *rel)
{
    static char bufs[4][512];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, 512, "%s/%s", base, rel);
    return b;
}

typedef struct {
    char *data;
    size_t n, cap;
} memory;

static bool to_memory(void *ctx, const void *data, size_t n)
{
    memory *m = ctx;
    if (m->n + n > m->cap) {
        size_t cap = (m->n + n) * 2;
        char *d = realloc(m->data, cap);
        if (!d)
            return false;
        m->data = d;
        m->cap = cap;
    }
    memcpy(m->data + m->n, data, n);
    m->n += n;
    return true;
}

static void put64(unsigned char *p, unsigned long long v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Feeds a whole stream into a fresh sink over a file of size bytes, n bytes at a time; the
 * sink's verdict: 1 whole, 0 refused or cut short. */
static int feed(const unsigned char *s, size_t len, long long size, size_t step, char *why, size_t whylen)
{
    int fd = open(at("sink.img"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && ftruncate(fd, size) == 0);
    extents_sink *k = extents_sink_new(fd, size);
    int rc = 0;
    for (size_t i = 0; i < len && rc == 0; i += step)
        rc = extents_sink_feed(k, (const char *)s + i, len - i < step ? len - i : step);
    int whole = rc == 0 && extents_sink_whole(k);
    snprintf(why, whylen, "%s", extents_sink_error(k));
    extents_sink_free(k);
    close(fd);
    return whole;
}

/* A stream by hand: the header for size, then runs (offset, length, byte value), then an end
 * mark for `claimed` bytes (-1: the bytes of the runs; -2: no end mark). */
static size_t craft(unsigned char *out, unsigned long long size, const unsigned long long (*runs)[3], int nruns,
                    long long claimed)
{
    size_t n = 0;
    memset(out, 0, 32);
    memcpy(out, "AIRLOCK-DISK-1\n", 16);
    put64(out + 16, size);
    n = 32;
    unsigned long long sum = 0;
    for (int i = 0; i < nruns; i++) {
        put64(out + n, runs[i][0]);
        put64(out + n + 8, runs[i][1]);
        n += 16;
        memset(out + n, (int)runs[i][2], runs[i][1]);
        n += runs[i][1];
        sum += runs[i][1];
    }
    if (claimed != -2) {
        put64(out + n, ~0ULL);
        put64(out + n + 8, claimed == -1 ? sum : (unsigned long long)claimed);
        n += 16;
    }
    return n;
}

static void test_bounds(void)
{
    static unsigned char s[1 << 16];
    char why[200];
    const unsigned long long fine[][3] = {{0, 1024, 1}, {4096, 2048, 2}, {6144, 1024, 3}};
    size_t n = craft(s, 8192, fine, 3, -1);
    CHECK(feed(s, n, 8192, 1, why, sizeof why) == 1); /* byte by byte */
    CHECK(feed(s, n, 8192, 7, why, sizeof why) == 1);
    int fd = open(at("sink.img"), O_RDONLY | O_CLOEXEC);
    unsigned char back[8192];
    CHECK(fd >= 0 && pread(fd, back, sizeof back, 0) == (ssize_t)sizeof back);
    close(fd);
    CHECK(back[0] == 1 && back[1023] == 1 && back[1024] == 0 && back[4096] == 2 && back[6143] == 2 &&
          back[6144] == 3 && back[7167] == 3 && back[7168] == 0);
    /* another size than announced */
    CHECK(feed(s, n, 16384, 64, why, sizeof why) == 0 && strstr(why, "size"));
    /* not a stream */
    memcpy(s, "AIRLOCK-DISK-9\n", 15);
    CHECK(feed(s, n, 8192, 64, why, sizeof why) == 0 && strstr(why, "not a workspace disk stream"));
    /* a run past the end, a run out of order or overlapping, an empty run */
    const unsigned long long past[][3] = {{8000, 1024, 1}};
    n = craft(s, 8192, past, 1, -1);
    CHECK(feed(s, n, 8192, 64, why, sizeof why) == 0 && strstr(why, "outside the image"));
    const unsigned long long back_runs[][3] = {{4096, 1024, 1}, {4000, 64, 2}};
    n = craft(s, 8192, back_runs, 2, -1);
    CHECK(feed(s, n, 8192, 64, why, sizeof why) == 0 && strstr(why, "out of order"));
    const unsigned long long empty[][3] = {{0, 0, 0}};
    n = craft(s, 8192, empty, 1, -1);
    CHECK(feed(s, n, 8192, 64, why, sizeof why) == 0);
    /* an end mark that lies, bytes after it, a stream that stops before it */
    n = craft(s, 8192, fine, 3, 99);
    CHECK(feed(s, n, 8192, 64, why, sizeof why) == 0 && strstr(why, "end mark"));
    n = craft(s, 8192, fine, 3, -1);
    s[n++] = 0;
    CHECK(feed(s, n, 8192, 64, why, sizeof why) == 0 && strstr(why, "follows its end mark"));
    n = craft(s, 8192, fine, 3, -2);
    CHECK(feed(s, n, 8192, 64, why, sizeof why) == 0 && strstr(why, "ended before its end mark"));
}

static void test_sparse_workspace(void)
{
    image_tools t;
    char err[512];
    long long bytes = 0;
    CHECK(image_tools_find(&t, err, sizeof err) == 0);
    CHECK(image_create(&t, at("src.img"), 16 * MIB, &bytes, err, sizeof err) == IMAGE_OK);
    CHECK(mkdir(at("mnt"), 0700) == 0);
    CHECK(image_mount(&t, at("src.img"), at("mnt"), false, err, sizeof err) == IMAGE_OK);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s && truncate -s 3G sparse.bin && head -c 1048576 /dev/urandom > data && "
                              "dd if=data of=sparse.bin bs=65536 seek=16384 conv=notrunc 2>/dev/null && "
                              "ln data hard && ln -s ../../etc up && mkfifo fifo && mknod dev c 1 3 && "
                              "touch \"$(printf 'a\\nb\\377')\" && chmod 4755 data",
             at("mnt/w"));
    CHECK(system(cmd) == 0);
    /* frozen while it is read, as a drain's move does */
    int dir = open(at("mnt"), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(dir >= 0 && ioctl(dir, FIFREEZE, 0) == 0);
    memory m = {0};
    long long sent = 0;
    CHECK(extents_send(at("src.img"), to_memory, &m, &sent, err, sizeof err) == 0);
    /* about its used blocks (2 MiB of data, the filesystem's metadata and journal), never the
     * sparse file's 3 GB nor the image's 16 MiB */
    CHECK(sent >= 2 * MIB && sent < 4 * MIB);
    CHECK((long long)m.n < sent + MIB);
    printf("a 3 GB sparse file and 1 MiB of data: %lld bytes sent of a %lld-byte image\n", sent, bytes);
    CHECK(image_reserve(at("copy.img"), bytes, err, sizeof err) == IMAGE_OK);
    int fd = open(at("copy.img"), O_WRONLY | O_CLOEXEC);
    extents_sink *k = extents_sink_new(fd, bytes);
    CHECK(extents_sink_feed(k, m.data, m.n) == 0 && extents_sink_whole(k));
    CHECK(extents_sink_data_bytes(k) == sent);
    extents_sink_free(k);
    close(fd);
    /* the same image, byte for byte (the fresh source reads as zeros wherever nothing was sent),
     * compared while the source is still frozen */
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", at("src.img"), at("copy.img"));
    CHECK(system(cmd) == 0);
    CHECK(ioctl(dir, FITHAW, 0) == 0);
    close(dir);
    CHECK(umount2(at("mnt"), MNT_DETACH) == 0);
    CHECK(image_check(&t, at("copy.img"), err, sizeof err) == IMAGE_OK);
    /* a stream cut anywhere is never whole */
    fd = open(at("copy.img"), O_WRONLY | O_CLOEXEC);
    k = extents_sink_new(fd, bytes);
    CHECK(extents_sink_feed(k, m.data, m.n - 1) == 0 && !extents_sink_whole(k));
    extents_sink_free(k);
    close(fd);
    /* not an image: a clear error, nothing sent beyond nothing */
    memory none = {0};
    CHECK(extents_send(at("sink.img"), to_memory, &none, &sent, err, sizeof err) == -1 && none.n == 0);
    free(none.data);
    free(m.data);
    image_tools_free(&t);
}

/* What a tool run for a disk (e2fsck here) has open: a stand-in lists its descriptors while
 * the test holds a pipe and a socket that are not close-on-exec. */
static void test_tool_descriptors(void)
{
    char script[600], err[256];
    snprintf(script, sizeof script, "#!/bin/sh\nls /proc/self/fd > %s\n", at("fds"));
    FILE *f = fopen(at("fake-e2fsck"), "w");
    CHECK(f && fputs(script, f) >= 0 && fclose(f) == 0 && chmod(at("fake-e2fsck"), 0755) == 0);
    int p[2];
    CHECK(pipe(p) == 0);
    image_tools t = {.e2fsck = at("fake-e2fsck")};
    CHECK(image_check(&t, at("src.img"), err, sizeof err) == IMAGE_OK);
    close(p[0]);
    close(p[1]);
    char fds[64] = "";
    f = fopen(at("fds"), "r");
    size_t n = f ? fread(fds, 1, sizeof fds - 1, f) : 0;
    if (f)
        fclose(f);
    fds[n] = '\0';
    /* its standard three, and the directory ls reads */
    CHECK(strcmp(fds, "0\n1\n2\n3\n") == 0);
    if (strcmp(fds, "0\n1\n2\n3\n") != 0)
        printf("the tool had open: %s\n", fds);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("needs root (mounts and loop devices)\n");
        return 1;
    }
    snprintf(base, sizeof base, "/tmp/airlockd-extents-units-XXXXXX");
    if (!mkdtemp(base))
        return 1;
    test_bounds();
    test_sparse_workspace();
    test_tool_descriptors();
    char cmd[256];
    snprintf(cmd, sizeof cmd, "grep -o ' %s/[^ ]*' /proc/self/mountinfo | xargs -r umount -l; "
                              "rm -rf --one-file-system %s", base, base);
    if (system(cmd) != 0)
        printf("could not remove %s\n", base);
    return CHECK_SUMMARY();
}
