/* The snapshot store (SANDBOX_SNAPSHOT_DIR): one directory per snapshot, named by its id,
 * holding its record (snapshot.json, which names its parts) and its parts (the workspace
 * image, workspace.img, sparse; with memory, runsc's image directory memory/). A snapshot is
 * written into a temporary directory (.tmp-<owner>-<id>) and renamed into place once whole
 * and synced, and deleted by renaming it aside (.del-<owner>-<id>) first: a crash never
 * leaves a half snapshot looking whole. The store keeps no index of its own: every read
 * scans the directory, so the servers of one machine (a fleet's nodes) can share it. */
#ifndef AIRLOCKD_STORE_SNAPSHOTS_H
#define AIRLOCKD_STORE_SNAPSHOTS_H

#include <stdbool.h>
#include <stddef.h>

#define SNAPSHOT_ID_SIZE 22        /* "snap_" + 16 lowercase hex + NUL */
#define SNAPSHOT_NAME_MAX 64       /* characters of a name */
#define SNAPSHOT_TEMPLATE_MAX 128  /* room for a template's name and its NUL */
#define SNAPSHOT_WORKSPACE "workspace.img"
#define SNAPSHOT_MEMORY "memory"       /* a memory snapshot's runsc image directory */
#define SNAPSHOT_EGRESS "egress.json"  /* in it: the session's egress rules, expanded */
#define SNAPSHOT_EGRESS_RULES_MAX 256  /* (20 asked, presets expanded: far fewer) */
#define SNAPSHOT_RUNSC_VERSION_MAX 128

typedef struct {
    char id[SNAPSHOT_ID_SIZE];
    char name[SNAPSHOT_NAME_MAX + 1];  /* "": none given */
    char *tenant;                      /* malloc'd */
    char session_id[32];               /* the session it was taken of */
    char template_name[SNAPSHOT_TEMPLATE_MAX];
    long long quota_bytes;             /* the session's disk quota: its sessions get the same */
    long long image_bytes;             /* the workspace image's size (its filesystem's) */
    long long bytes;                   /* what its parts take on the host (the memory image's included) */
    bool memory;                       /* it holds a memory image (SNAPSHOT_MEMORY) too */
    /* With memory: the image's bytes, the runsc that made it (the only one that restores it),
     * and the sandbox size it was made in (its sessions get the same). */
    long long memory_bytes;
    char runsc_version[SNAPSHOT_RUNSC_VERSION_MAX];
    unsigned memory_mb, cpu_percent, max_processes;
    double created_at;
} snapshot_record;

typedef struct snapshot_store snapshot_store;

/* Opens dir (made 0700 when missing) for a server that marks its temporary directories with
 * owner ([A-Za-z0-9_-], ≤ 40: a fleet node's name, "local" alone). Removes what this owner
 * left half done (temporary and half-deleted directories) and every snapshot directory
 * without a complete record; complete ones are kept. NULL with a message on failure. */
snapshot_store *snapshot_store_open(const char *dir, const char *owner, char *err, size_t errlen);
void snapshot_store_close(snapshot_store *st);

/* Takes the store's lock (flock on <dir>/.lock), which every server sharing the store takes to
 * count and add snapshots: a tenant's limits hold across them. The descriptor to give to
 * snapshot_store_unlock, or -1 with a message (nothing is locked). */
int snapshot_store_lock(snapshot_store *st, char *err, size_t errlen);
void snapshot_store_unlock(int fd);

/* Whether id has the shape of a snapshot id (checked before any path is made of it). */
bool snapshot_id_valid(const char *id);

/* A new snapshot's id and its temporary directory, made: *workspace is the malloc'd path of
 * the workspace image to write there (a memory image goes beside it, in SNAPSHOT_MEMORY). -1
 * with a message on failure. */
int snapshot_store_begin(snapshot_store *st, char id[SNAPSHOT_ID_SIZE], char **workspace, char *err, size_t errlen);
/* Writes rec (rec->id from begin) as the temporary directory's record, syncs it, and renames
 * the directory into place: the snapshot exists from now on. -1 with a message on failure
 * (nothing of it is left). */
int snapshot_store_commit(snapshot_store *st, const snapshot_record *rec, char *err, size_t errlen);
/* Removes begin's temporary directory (a snapshot given up). */
void snapshot_store_abort(snapshot_store *st, const char *id);

/* Every complete snapshot of tenant (NULL: all), newest first: a malloc'd array of *n (NULL
 * when none); free it with snapshot_records_free. */
snapshot_record *snapshot_store_list(snapshot_store *st, const char *tenant, size_t *n);
void snapshot_records_free(snapshot_record *v, size_t n);

/* Snapshot id of tenant into *out (free out->tenant): false when there is none (another
 * tenant's included). */
bool snapshot_store_get(snapshot_store *st, const char *id, const char *tenant, snapshot_record *out);

/* The path of a snapshot's workspace image (malloc'd); id must be valid. */
char *snapshot_store_workspace(snapshot_store *st, const char *id);
/* The path of a snapshot's memory image directory (malloc'd); id must be valid. */
char *snapshot_store_memory(snapshot_store *st, const char *id);

/* Deletes snapshot id of tenant: 1 when there is none, 0 when it is gone (its bytes in
 * *freed), -1 when it could not be removed (logged). */
int snapshot_store_remove(snapshot_store *st, const char *id, const char *tenant, long long *freed);

/* The bytes all snapshots take (the disk budget's share of them, at start). */
long long snapshot_store_bytes(snapshot_store *st);

#endif
