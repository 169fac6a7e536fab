/* A workspace disk on the wire (drain/extents.c): what a drain's move sends is the session's
 * ext4 image, but only the blocks its filesystem uses (libext2fs reads the block bitmaps) and
 * of those only the ones that are not all zeros. The receiver writes them at their offsets
 * into a fresh image of the same size that reads as zeros elsewhere, so the copy is the same
 * filesystem, block for block: every file type, link, mode, owner and name comes as it was,
 * a sparse file stays sparse, and nothing is unpacked by a program on either side.
 *
 * The stream: a header (16 bytes of magic, the image's size as 8 bytes little-endian, 8
 * bytes zero), then runs (offset, length as 8 bytes little-endian each, then the bytes), in
 * increasing offsets, then an end mark (offset all ones, length: the data bytes sent). */
#ifndef AIRLOCKD_DRAIN_EXTENTS_H
#define AIRLOCKD_DRAIN_EXTENTS_H

#include <stdbool.h>
#include <stddef.h>

/* Takes the next bytes of the stream; false stops it (the receiver went away, a bound). */
typedef bool (*extents_out)(void *ctx, const void *data, size_t n);

/* Sends the image at path, which nothing writes meanwhile (frozen or unmounted). 0 with the
 * data bytes sent in *data_bytes, or -1 with a message in err. */
int extents_send(const char *image, extents_out out, void *ctx, long long *data_bytes, char *err, size_t errlen);

/* The receiving side: writes what arrives into fd (an image of image_bytes that reads as
 * zeros) and refuses anything outside it, out of order, or after the end. */
typedef struct extents_sink extents_sink;
extents_sink *extents_sink_new(int fd, long long image_bytes);
/* 0, or -1 once the stream is refused (extents_sink_error says why; further calls fail). */
int extents_sink_feed(extents_sink *k, const char *data, size_t n);
/* Whether the end mark arrived and matched the data written. */
bool extents_sink_whole(const extents_sink *k);
const char *extents_sink_error(const extents_sink *k);
long long extents_sink_data_bytes(const extents_sink *k);
void extents_sink_free(extents_sink *k);

/* Both sides at once on one host (a snapshot, a session made from one): the image at src,
 * which nothing writes meanwhile, into fd (an image of the same size that reads as zeros:
 * a sparse file, or a fresh reserved one). 0 with the data bytes written in *data_bytes, or
 * -1 with a message in err. */
int extents_copy(const char *src, int fd, long long image_bytes, long long *data_bytes, char *err, size_t errlen);

#endif
