/* A workspace disk on the wire, both ways (drain/extents.h): the used, non-zero blocks of an
 * ext4 image (libext2fs's block bitmaps) and their writing back at their offsets. */
#include "drain/extents.h"

#include <ext2fs/ext2fs.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[16] = "AIRLOCK-DISK-1\n"; /* 15 characters and a NUL */
#define HEADER_BYTES 32
#define RUN_HEAD_BYTES 16
#define END_MARK (~0ULL)
#define CHUNK (1u << 20) /* read this much of the image at a time */

static void put64(unsigned char *p, unsigned long long v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static unsigned long long get64(const unsigned char *p)
{
    unsigned long long v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static bool all_zero(const unsigned char *p, size_t n)
{
    return p[0] == 0 && memcmp(p, p + 1, n - 1) == 0;
}

typedef struct {
    extents_out out;
    void *ctx;
    int fd;
    unsigned bs;
    unsigned char *buf; /* CHUNK bytes */
    long long sent;
    char *err;
    size_t errlen;
} sender;

static bool send_run(sender *s, unsigned long long off, const unsigned char *data, size_t n)
{
    unsigned char h[RUN_HEAD_BYTES];
    put64(h, off);
    put64(h + 8, n);
    if (!s->out(s->ctx, h, sizeof h) || !s->out(s->ctx, data, n)) {
        snprintf(s->err, s->errlen, "the receiving node stopped reading");
        return false;
    }
    s->sent += (long long)n;
    return true;
}

/* Sends the non-zero blocks of [first, end), each stretch of them as one run. */
static int send_blocks(sender *s, unsigned long long first, unsigned long long end)
{
    unsigned long long per = CHUNK / s->bs;
    for (unsigned long long b = first; b < end;) {
        unsigned long long k = end - b < per ? end - b : per;
        size_t n = (size_t)(k * s->bs);
        for (size_t got = 0; got < n;) {
            ssize_t r = pread(s->fd, s->buf + got, n - got, (off_t)(b * s->bs + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                snprintf(s->err, s->errlen, "cannot read the image: %s", r < 0 ? strerror(errno) : "it is shorter");
                return -1;
            }
            got += (size_t)r;
        }
        for (unsigned long long i = 0; i < k;) {
            if (all_zero(s->buf + i * s->bs, s->bs)) {
                i++;
                continue;
            }
            unsigned long long j = i + 1;
            while (j < k && !all_zero(s->buf + j * s->bs, s->bs))
                j++;
            if (!send_run(s, (b + i) * s->bs, s->buf + i * s->bs, (size_t)((j - i) * s->bs)))
                return -1;
            i = j;
        }
        b += k;
    }
    return 0;
}

/* Every stretch of blocks the filesystem uses (its bitmaps, read by libext2fs), and what
 * precedes its first data block (the boot block of a 1 KiB-block filesystem). */
static int send_used(sender *s, ext2_filsys fs)
{
    unsigned long long total = ext2fs_blocks_count(fs->super), first = fs->super->s_first_data_block;
    if (first > 0 && send_blocks(s, 0, first) != 0)
        return -1;
    for (blk64_t b = first; b < total;) {
        blk64_t start, stop;
        if (ext2fs_find_first_set_block_bitmap2(fs->block_map, b, total - 1, &start) != 0)
            break; /* no used block from b on */
        if (ext2fs_find_first_zero_block_bitmap2(fs->block_map, start, total - 1, &stop) != 0)
            stop = total;
        if (send_blocks(s, start, stop) != 0)
            return -1;
        b = stop;
    }
    return 0;
}

int extents_send(const char *image, extents_out out, void *ctx, long long *data_bytes, char *err, size_t errlen)
{
    sender s = {.out = out, .ctx = ctx, .fd = open(image, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), .err = err,
                .errlen = errlen};
    struct stat st;
    ext2_filsys fs = NULL;
    int rc = -1;
    if (s.fd < 0 || fstat(s.fd, &st) != 0) {
        snprintf(err, errlen, "cannot open the image: %s", strerror(errno));
        goto done;
    }
    /* the loop device may write the image past the page cache (direct I/O): pages cached
     * before then are dropped, so what is read is what the frozen filesystem wrote */
    posix_fadvise(s.fd, 0, 0, POSIX_FADV_DONTNEED);
    errcode_t e = ext2fs_open(image, EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &fs);
    if (e == 0)
        e = ext2fs_read_block_bitmap(fs);
    if (e != 0) {
        snprintf(err, errlen, "cannot read its filesystem: %s", error_message(e));
        goto done;
    }
    s.bs = fs->blocksize;
    if (s.bs == 0 || CHUNK % s.bs != 0 || ext2fs_blocks_count(fs->super) * s.bs > (unsigned long long)st.st_size) {
        snprintf(err, errlen, "its filesystem does not fit its image");
        goto done;
    }
    if (!(s.buf = malloc(CHUNK))) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    unsigned char h[HEADER_BYTES] = {0};
    memcpy(h, MAGIC, sizeof MAGIC);
    put64(h + 16, (unsigned long long)st.st_size);
    if (!out(ctx, h, sizeof h)) {
        snprintf(err, errlen, "the receiving node stopped reading");
        goto done;
    }
    if (send_used(&s, fs) != 0)
        goto done;
    unsigned char end[RUN_HEAD_BYTES];
    put64(end, END_MARK);
    put64(end + 8, (unsigned long long)s.sent);
    if (!out(ctx, end, sizeof end)) {
        snprintf(err, errlen, "the receiving node stopped reading");
        goto done;
    }
    *data_bytes = s.sent;
    rc = 0;
done:
    if (fs)
        ext2fs_close_free(&fs);
    if (s.fd >= 0)
        close(s.fd);
    free(s.buf);
    return rc;
}

/* ---- the receiving side ---- */

typedef enum { AT_HEADER, AT_RUN_HEAD, AT_RUN_DATA, AT_END } sink_state;

struct extents_sink {
    int fd;
    unsigned long long size;
    sink_state at;
    unsigned char head[HEADER_BYTES];
    size_t have;                 /* bytes of head gathered */
    unsigned long long off, left; /* the run being written */
    unsigned long long floor;    /* the next run starts here or later */
    long long data;
    bool whole, failed;
    char err[160];
};

extents_sink *extents_sink_new(int fd, long long image_bytes)
{
    extents_sink *k = calloc(1, sizeof *k);
    if (k) {
        k->fd = fd;
        k->size = (unsigned long long)image_bytes;
    }
    return k;
}

static int refuse(extents_sink *k, const char *why)
{
    k->failed = true;
    snprintf(k->err, sizeof k->err, "%s", why);
    return -1;
}

/* Gathers want bytes of a header into k->head; true when they are all in. */
static bool gather(extents_sink *k, size_t want, const char **data, size_t *n)
{
    size_t take = want - k->have < *n ? want - k->have : *n;
    memcpy(k->head + k->have, *data, take);
    k->have += take;
    *data += take;
    *n -= take;
    return k->have == want;
}

static int run_head(extents_sink *k)
{
    unsigned long long off = get64(k->head), len = get64(k->head + 8);
    k->have = 0;
    if (off == END_MARK) {
        if (len != (unsigned long long)k->data)
            return refuse(k, "its end mark does not match the data sent");
        k->whole = true;
        k->at = AT_END;
        return 0;
    }
    if (len == 0 || off < k->floor || off > k->size || len > k->size - off)
        return refuse(k, "a run lies outside the image or out of order");
    k->off = off;
    k->left = len;
    k->at = AT_RUN_DATA;
    return 0;
}

int extents_sink_feed(extents_sink *k, const char *data, size_t n)
{
    while (n > 0 && !k->failed) {
        switch (k->at) {
        case AT_HEADER:
            if (gather(k, HEADER_BYTES, &data, &n)) {
                if (memcmp(k->head, MAGIC, sizeof MAGIC) != 0 || get64(k->head + 24) != 0)
                    return refuse(k, "it is not a workspace disk stream");
                if (get64(k->head + 16) != k->size)
                    return refuse(k, "its image size is not the one announced");
                k->have = 0;
                k->at = AT_RUN_HEAD;
            }
            break;
        case AT_RUN_HEAD:
            if (gather(k, RUN_HEAD_BYTES, &data, &n) && run_head(k) != 0)
                return -1;
            break;
        case AT_RUN_DATA: {
            size_t take = k->left < n ? (size_t)k->left : n;
            ssize_t w = pwrite(k->fd, data, take, (off_t)k->off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return refuse(k, w < 0 && errno == ENOSPC ? "no room on the host for the image" : "cannot write the image");
            k->off += (unsigned long long)w;
            k->left -= (unsigned long long)w;
            k->data += w;
            data += w;
            n -= (size_t)w;
            if (k->left == 0) {
                k->floor = k->off;
                k->at = AT_RUN_HEAD;
            }
            break;
        }
        case AT_END:
            return refuse(k, "data follows its end mark");
        }
    }
    return k->failed ? -1 : 0;
}

bool extents_sink_whole(const extents_sink *k)
{
    return k->whole && !k->failed;
}

const char *extents_sink_error(const extents_sink *k)
{
    return k->failed ? k->err : k->whole ? "" : "the stream ended before its end mark";
}

long long extents_sink_data_bytes(const extents_sink *k)
{
    return k->data;
}

void extents_sink_free(extents_sink *k)
{
    free(k);
}

static bool feed_sink(void *ctx, const void *data, size_t n)
{
    return extents_sink_feed(ctx, data, n) == 0;
}

int extents_copy(const char *src, int fd, long long image_bytes, long long *data_bytes, char *err, size_t errlen)
{
    extents_sink *k = extents_sink_new(fd, image_bytes);
    if (!k) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    long long sent = 0;
    int rc = extents_send(src, feed_sink, k, &sent, err, errlen);
    if (rc == 0 && !extents_sink_whole(k)) {
        snprintf(err, errlen, "the copy is not whole: %s", extents_sink_error(k));
        rc = -1;
    } else if (rc != 0 && k->failed) { /* the writing side's reason, not "stopped reading" */
        snprintf(err, errlen, "%s", extents_sink_error(k));
    }
    if (rc == 0)
        *data_bytes = extents_sink_data_bytes(k);
    extents_sink_free(k);
    return rc;
}
