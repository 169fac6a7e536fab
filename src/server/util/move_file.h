/* Moving a file (or a directory of files) between directories that may sit on different filesystems (a node's images
 * and the fleet's shared store, docs/fleet.md "The shared store"). */
#ifndef AIRLOCKD_MOVE_FILE_H
#define AIRLOCKD_MOVE_FILE_H

/* Moves src to dst (which must not exist): a rename on one filesystem; across two, a copy of
 * src's data extents into a sparse dst, synced, then src unlinked. 0, or -1 with errno (dst
 * never left half written; src kept). */
int move_file(const char *src, const char *dst);

/* Moves the directory src, which holds regular files only (a memory image), to dst (which must
 * not exist): a rename on one filesystem; across two, each file copied (sparse, synced) into
 * dst.part, renamed to dst, then src removed (as far as it can be). 0, or -1 with errno (dst
 * never left half written; src kept). */
int move_dir(const char *src, const char *dst);

#endif
