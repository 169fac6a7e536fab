/* Snapshots of sessions' workspaces and, with kernels, their memory (store/snapshots.h):
 * taking one of a running session (its sandbox's writes flushed, its filesystem frozen while
 * its image is copied sparse; with memory, the copy made while the checkpointed sandbox is
 * held still), the tenant's limits, and the server's disk budget, which snapshots share with
 * the workspace images. */
#ifndef AIRLOCKD_DOMAIN_SNAPSHOTS_H
#define AIRLOCKD_DOMAIN_SNAPSHOTS_H

#include "disk/pool.h"
#include "domain/sessions.h"
#include "store/snapshots.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct snapshots snapshots;

/* The store at dir for owner (store/snapshots.h), its bytes counted against disk's cap. */
snapshots *snapshots_open(const char *dir, const char *owner, disk_pool *disk, char *err, size_t errlen);
void snapshots_close(snapshots *sn);
snapshot_store *snapshots_store(snapshots *sn);

typedef struct {
    int max_count;       /* the tenant's max_snapshots */
    long long max_bytes; /* the tenant's max_snapshot_mb, in bytes */
} snapshot_limits;

typedef enum {
    SNAP_OK = 0,
    SNAP_LIMIT, /* over the tenant's max_snapshots or max_snapshot_mb: why says which */
    SNAP_FULL,  /* the server's disk budget or the host has no room: why says so */
    SNAP_BUSY,  /* a memory snapshot cannot be taken now (a command or cell runs): why says so */
    SNAP_ERROR, /* logged; why says what failed */
} snapshot_result;

/* Makes the sandbox of the session write what it holds to the workspace (0; -1 when it could
 * not: the snapshot is refused rather than made inconsistent). */
typedef int (*snapshot_flush_fn)(void *ctx);

/* A memory snapshot's part (the API's: it knows the session's sandbox and kernels).
 * checkpoint saves the session's memory into image_dir (made, empty) and runs still(still_ctx)
 * while the session is held still (its workspace then as the image saw it): 0, 1 (not now:
 * why), -1 (why). runsc_version names the image's maker; most_bytes bounds its size. */
typedef struct {
    int (*checkpoint)(void *ctx, const char *image_dir, int (*still)(void *), void *still_ctx, char *why,
                      size_t whylen);
    void *ctx;
    const char *runsc_version;
    long long most_bytes;
} snapshot_memory;

/* Snapshots session s (the caller holds a reference) for tenant, named name ("" none): flush,
 * then its filesystem frozen while its image is copied into the store, then thawed; with mem
 * (NULL: files only), its memory saved too, the copy made while mem holds it still (no flush:
 * the checkpoint writes the sandbox's files out). One at a time per server. SNAP_OK with the
 * record in *out (free out->tenant). */
snapshot_result snapshots_take(snapshots *sn, session *s, const char *tenant, const char *name,
                               const snapshot_limits *lim, snapshot_flush_fn flush, void *flush_ctx,
                               const snapshot_memory *mem, snapshot_record *out, char *why, size_t whylen);

/* In a fleet, the snapshots' list in its database (fleet/snapshots.c), so listing and limits are
 * exact across machines; the directory stays the data. */
typedef struct {
    int (*usage)(void *ctx, const char *tenant, long *n, long long *bytes); /* 0, -1 unreachable */
    /* rec recorded against lim: 0 added, 1 refused (*n of *bytes exist), -1 unreachable */
    int (*add)(void *ctx, const snapshot_record *rec, const snapshot_limits *lim, long *n, long long *bytes);
    void (*remove)(void *ctx, const char *id);
    snapshot_record *(*list)(void *ctx, const char *tenant, size_t *n, bool *ok);
    void *ctx;
} snapshot_index;
void snapshots_set_index(snapshots *sn, const snapshot_index *ix);

/* The tenant's snapshots, newest first (the index's, else the directory's); *ok false when the
 * index cannot be read. Free with snapshot_records_free. */
snapshot_record *snapshots_list(snapshots *sn, const char *tenant, size_t *n, bool *ok);

/* Deletes snapshot id of tenant, giving its bytes back to the budget: as snapshot_store_remove. */
int snapshots_delete(snapshots *sn, const char *id, const char *tenant);

#endif
