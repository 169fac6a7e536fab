/* The persisted sessions (SANDBOX_SESSION_STATE): one JSON file, replaced atomically (written
 * aside, flushed, renamed over), naming the state directory whose workspace images it goes with.
 * A few hundred small records at most, rewritten whole when sessions come and go. */
#ifndef AIRLOCKD_SESSION_STATE_H
#define AIRLOCKD_SESSION_STATE_H

#include "domain/session_id.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Largest state file read back (a record takes ~300 bytes). */
#define SESSION_STATE_MAX_BYTES (64L * 1024 * 1024)

/* Bytes a session's template name may take, its NUL included. */
#define SESSION_TEMPLATE_MAX 128

/* What a paused session keeps beyond its workspace image: a memory image (a runsc checkpoint
 * directory, its size and the runsc version that made it) when it had one; a files-only pause
 * keeps none (dir ""). */
#define SESSION_PAUSE_DIR_MAX 256
#define SESSION_RUNSC_VERSION_MAX 64
typedef struct {
    bool paused;
    double paused_at;        /* when it was paused (its SANDBOX_PAUSED_TTL counts from it) */
    char image_dir[SESSION_PAUSE_DIR_MAX];             /* "": files only */
    long long image_bytes;                             /* 0: files only */
    char runsc_version[SESSION_RUNSC_VERSION_MAX];     /* the image's maker ("" files only) */
    bool image_moved; /* the image came from a fleet's shared store: made for a sandbox of another
                       * node (or process), it is restored as a sandbox of its own here */
} session_pause_state;

typedef struct {
    char id[17];            /* "sbx_" + 12 lowercase hex */
    char *tenant;           /* the tenant's name */
    json_t *egress;         /* expanded rules (a reference) */
    double created_at;
    double last_accessed_at;
    long long quota_bytes;  /* the quota its image was made for */
    char template_name[SESSION_TEMPLATE_MAX]; /* "" in a file from before templates: the default */
    unsigned memory_mb, cpu_percent, max_processes; /* 0 in a file from before sizes: the defaults */
    char template_id[24];   /* ours: the template it runs on ("": the default root) */
    bool on_idle_pause;     /* {"on_idle": "pause"}: its idle TTL pauses it (absent: deleted) */
    session_pause_state pause; /* absent in a file from before pause: active */
} session_record;

/* Reads path: *out (malloc'd, *n records; NULL and 0 when the file does not exist). Malformed
 * records are skipped with a log line. -1 with a message when the file cannot be read, is not
 * a session state file, or belongs to another state directory than state_dir. */
int session_state_load(const char *path, const char *state_dir, session_record **out, size_t *n, char *err,
                       size_t errlen);

/* Replaces path with these records. -1 with a message on failure (the old file stays). */
int session_state_save(const char *path, const char *state_dir, const session_record *v, size_t n, char *err,
                       size_t errlen);

void session_records_free(session_record *v, size_t n);

#endif
