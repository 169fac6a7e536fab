/* Ours: what a command's output does while it runs, beside the kept result. In the
 * streaming form of exec each piece becomes an NDJSON event on the open answer
 * ({"type":"stdout"|"stderr","data":...}, cut only between UTF-8 characters, invalid bytes
 * replaced as in the plain result), with a {"type":"heartbeat"} after every
 * EXEC_HEARTBEAT_MS of silence; with spill the whole of each stream is also written to a
 * file in the workspace, within the session's disk quota (a full disk stops the file and
 * says so in a warning). */
#ifndef AIRLOCKD_API_EXEC_TAP_H
#define AIRLOCKD_API_EXEC_TAP_H

#include "http/http.h"
#include "sandbox/sandbox.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define EXEC_HEARTBEAT_MS 2000
/* Bytes of events queued for a slow client before the command is made to wait. */
#define EXEC_STREAM_QUEUE (256u * 1024u)
/* The most output bytes gathered into one stdout or stderr event. */
#define EXEC_EVENT_BYTES (64u * 1024u)

typedef struct {
    http_stream *stream;      /* NULL: not streamed */
    int spill_fd[3];          /* [1] stdout, [2] stderr; -1: none */
    char *spill_path[3];      /* as the sandbox sees them (/workspace/...) */
    char *spill_warning;      /* why a spill file stopped short, or NULL */
    unsigned long long spill_room; /* bytes the spill files may still take (the quota) */
    /* [1] stdout, [2] stderr: bytes read and not yet sent as an event. Pieces are gathered
     * into events of up to EXEC_EVENT_BYTES (an event per pipe read would cost a JSON object
     * per few KiB); what one round of reads brought goes out before the runner waits again,
     * so nothing is held back while the command is quiet. */
    char *pending[3];
    size_t pending_len[3], pending_cap[3];
    int64_t last_event_ms;
    sandbox_tap tap;
} exec_tap;

/* An idle tap for stream (may be NULL). */
void exec_tap_init(exec_tap *t, http_stream *stream);

/* Opens the spill files .airlock/exec-<id>.stdout and .stderr under workspace (owned by the
 * sandbox user), with room for quota_bytes in all (<= 0: no bound of ours). 0, or -1 with a
 * message in errbuf. */
int exec_tap_spill(exec_tap *t, const char *workspace, const char *id, long long quota_bytes,
                   char *errbuf, size_t errlen);

/* Sends what is still pending, a cut character included (as U+FFFD: the stream ended there). */
void exec_tap_flush(exec_tap *t);

/* Writes one event (a JSON object, stolen) as a line of the stream. */
void exec_tap_event(exec_tap *t, json_t *event);

/* Closes the spill files and frees what the tap holds. */
void exec_tap_close(exec_tap *t);

#endif
