/* One session's egress log: the last EGRESS_LOG_RING events in memory (what GET
 * /v1/sessions/{id}/egress returns) and, with SANDBOX_EGRESS_LOG_DIR, every event appended
 * to <dir>/<session>.jsonl as one JSON line (rotated to .jsonl.1 past EGRESS_LOG_FILE_MAX).
 * Thread-safe: the proxy thread adds, request threads read. */
#ifndef AIRLOCKD_EGRESS_LOG_H
#define AIRLOCKD_EGRESS_LOG_H

#include <jansson.h>
#include <stddef.h>

#define EGRESS_LOG_RING 1000 /* the contract's largest ?limit= */
#define EGRESS_LOG_FILE_MAX (64ll * 1024 * 1024)

typedef struct egress_log egress_log;

/* dir NULL: memory only. The file is opened (created 0640) here and held until close. */
egress_log *egress_log_open(const char *dir, const char *session_id, char *err, size_t errlen);

/* Told of every event added (with the session's id), under the log's lock: a fleet node
 * puts it in its outbox for the database (run/fleet.c). */
typedef void (*egress_log_sink)(void *ctx, const char *session_id, const json_t *event);
void egress_log_set_sink(egress_log *l, egress_log_sink sink, void *ctx);

/* Appends an event (the reference is stolen). */
void egress_log_add(egress_log *l, json_t *event);

/* A new array of the last `limit` events, oldest first. */
json_t *egress_log_last(egress_log *l, size_t limit);

/* Appends to out the last `limit` denied events (decision "deny"), newest first, each a copy
 * with "session_id" added. */
void egress_log_denials(egress_log *l, size_t limit, json_t *out);

/* How many events were ever added (for tests of bounds). */
size_t egress_log_count(egress_log *l);

/* Closes the file (later events stay in memory only): the session is gone. */
void egress_log_close_file(egress_log *l);

void egress_log_close(egress_log *l);

#endif
