/* The audit log (SANDBOX_AUDIT=sqlite:<path>): one row per exec / import, per tenant,
 * kept SANDBOX_AUDIT_RETENTION_DAYS days. Thread-safe. Fails closed: a record that cannot be
 * stored is reported to the caller (which refuses the request), and while the store is
 * failing, audit_writable says so before anything runs. */
#ifndef AIRLOCKD_AUDIT_H
#define AIRLOCKD_AUDIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct audit_store audit_store; /* NULL when SANDBOX_AUDIT is unset */

typedef struct {
    const char *tenant;
    const char *session_id;
    const char *actor;      /* "static key" | "key <key_id>" */
    const char *kind;       /* "exec" | "import" */
    const char *command;    /* stored up to 2000 characters, then "truncated": true */
    bool has_exit_code;
    int exit_code;
    bool has_duration;
    double duration_s;
    bool timed_out;
    bool oom_killed;
    const char *detail;     /* may be NULL */
} audit_entry;

/* Opens (creates) the SQLite file at path and deletes entries older than retention_days.
 * NULL with a message in err on failure. */
audit_store *audit_open(const char *path, int retention_days, char *err, size_t errlen);
void audit_close(audit_store *store);

int audit_retention_days(const audit_store *store);

/* A fleet node's store: its commits are no longer synced one by one (synchronous=NORMAL: they
 * survive a crash of airlockd, and a power loss once synced); a record is durable once it is
 * in the fleet's database, or after audit_sync, which the node calls when it could not ship
 * the record before its answer. 0, or -1 (logged). */
int audit_defer_sync(audit_store *store);
int audit_sync(audit_store *store);

/* Deletes entries older than the retention period (also done at open and hourly by
 * audit_record). */
void audit_prune(audit_store *store);

/* Stores the entry durably (synchronous=FULL): 0, or -1 when it could not be stored
 * (logged). NULL store: 0. */
int audit_record(audit_store *store, const audit_entry *e);

/* false while the store cannot write: its last record failed and a small write made now
 * (a probe, nothing kept) fails too. NULL store: true. */
bool audit_writable(audit_store *store);

/* GET /v1/audit: the tenant's entries older than the cursor `before` (NULL: from the
 * newest; any other string is compared like a cursor, "<20-digit µs>#<8 hex>"), newest
 * first, at most limit (1..500). 0 with *entries (new array) and *next (malloc'd cursor,
 * or NULL when no more exist); -1 on a store error (logged). */
int audit_query(audit_store *store, const char *tenant, const char *before, size_t before_len,
                int limit, json_t **entries, char **next);

/* The status page: every tenant's newest entries (each with its "tenant_id"), newest first, at
 * most limit (1..500), in *entries; 0, or -1 on a store error (logged). */
int audit_recent(audit_store *store, int limit, json_t **entries);

/* A fleet node's store is also its outbox (fleet/audit.c ships it to the database): up to
 * limit rows recorded after the shipped mark, oldest first, as objects with the columns of
 * the table ("tenant_id", "sk", "ts_us", ...), in *rows; 0 or -1. */
int audit_outbox_read(audit_store *store, int limit, json_t **rows);
/* Rows waiting in the outbox for the database: audit rows, egress events; -1 each when
 * unreadable. */
void audit_outbox_depth(audit_store *store, long long *audit_rows, long long *egress_rows);
/* Everything up to sort key sk has reached the database. */
int audit_outbox_mark(audit_store *store, const char *sk);

/* A fleet node's egress events take the same way: each is kept here (durably, like an audit
 * row) until the database has it. 0 or -1. */
int audit_egress_record(audit_store *store, const char *session_id, const json_t *event);
/* Up to limit waiting events, oldest first, as {"sk", "session_id", "event" (JSON text)}. */
int audit_egress_outbox_read(audit_store *store, int limit, json_t **rows);
/* The events up to sort key sk reached the database: they leave the outbox. */
int audit_egress_outbox_done(audit_store *store, const char *sk);

#endif
