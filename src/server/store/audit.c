/* The audit log on SQLite (contract 1.12). Rows are keyed per tenant by a sort key
 * "<20-digit microsecond timestamp>#<8 hex>", which is also the paging cursor. */
#include "store/audit.h"
#include "log/log.h"
#include "store/sqlite.h"

#include "text/utf8.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define AUDIT_MAX_COMMAND 2000 /* characters (code points) */
#define AUDIT_PRUNE_EVERY_US (3600LL * 1000000LL)

struct audit_store {
    sqlite3 *db;
    pthread_mutex_t mu; /* one statement at a time; also guards last_prune_us */
    int retention_days;
    long long last_prune_us;
    bool failing; /* the last record could not be stored */
};

static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS audit ("
    " tenant_id TEXT NOT NULL, sk TEXT NOT NULL, ts_us INTEGER NOT NULL,"
    " session_id TEXT, actor TEXT, kind TEXT, command TEXT, truncated INTEGER NOT NULL,"
    " exit_code INTEGER, duration_s REAL, timed_out INTEGER NOT NULL, oom_killed INTEGER NOT NULL,"
    " detail TEXT, PRIMARY KEY (tenant_id, sk)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS audit_ts ON audit (ts_us);"
    "CREATE TABLE IF NOT EXISTS audit_probe (x INTEGER);"
    /* a fleet node's outbox: the sort key up to which rows reached the database */
    "CREATE TABLE IF NOT EXISTS audit_shipped (one INTEGER PRIMARY KEY CHECK (one = 1), sk TEXT NOT NULL);"
    /* a fleet node's egress events on their way to the database (deleted once there) */
    "CREATE TABLE IF NOT EXISTS egress_outbox (sk TEXT PRIMARY KEY, session_id TEXT NOT NULL,"
    " event TEXT NOT NULL) WITHOUT ROWID;";

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static long long cutoff_us(const audit_store *s, long long now)
{
    return now - (long long)s->retention_days * 86400LL * 1000000LL;
}

/* Caller holds mu. */
static void prune_locked(audit_store *s, long long now)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(s->db, "DELETE FROM audit WHERE ts_us < ?", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, cutoff_us(s, now));
        if (sqlite3_step(st) != SQLITE_DONE)
            log_error("audit: pruning failed: %s", sqlite3_errmsg(s->db));
    } else {
        log_error("audit: pruning failed: %s", sqlite3_errmsg(s->db));
    }
    sqlite3_finalize(st);
    s->last_prune_us = now;
}

audit_store *audit_open(const char *path, int retention_days, char *err, size_t errlen)
{
    audit_store *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->retention_days = retention_days;
    s->db = sqlite_open_store(path, SCHEMA, "SANDBOX_AUDIT", err, errlen);
    if (!s->db) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_lock(&s->mu);
    prune_locked(s, now_us());
    pthread_mutex_unlock(&s->mu);
    return s;
}

void audit_close(audit_store *s)
{
    if (!s)
        return;
    sqlite3_close(s->db);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int audit_defer_sync(audit_store *s)
{
    pthread_mutex_lock(&s->mu);
    int rc = sqlite3_exec(s->db, "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
    pthread_mutex_unlock(&s->mu);
    if (rc != SQLITE_OK)
        log_error("audit: cannot defer the store's syncs: %s", sqlite3_errmsg(s->db));
    return rc == SQLITE_OK ? 0 : -1;
}

int audit_sync(audit_store *s)
{
    pthread_mutex_lock(&s->mu);
    /* a checkpoint syncs the WAL (every commit in it) before it copies any of it */
    int rc = sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    pthread_mutex_unlock(&s->mu);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY) /* busy: another connection checkpoints, synced */
        log_error("audit: cannot sync the store: %s", sqlite3_errmsg(s->db));
    return rc == SQLITE_OK || rc == SQLITE_BUSY ? 0 : -1;
}

int audit_retention_days(const audit_store *s)
{
    return s ? s->retention_days : 0;
}

void audit_prune(audit_store *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    prune_locked(s, now_us());
    pthread_mutex_unlock(&s->mu);
}

static void bind_opt_text(sqlite3_stmt *st, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

/* Byte length of the first max code points of a NUL-terminated string. */
static size_t prefix_bytes(const char *s, size_t max, bool *cut)
{
    size_t n = strlen(s), i = 0, count = 0;
    while (i < n && count < max) {
        uint32_t cp;
        size_t l = utf8_seq_len((const unsigned char *)s + i, n - i, &cp);
        i += l ? l : 1; /* invalid bytes count as one character each */
        count++;
    }
    *cut = i < n;
    return i;
}

int audit_record(audit_store *s, const audit_entry *e)
{
    if (!s || !e || !e->tenant)
        return 0;
    const char *cmd = e->command ? e->command : "";
    bool truncated;
    size_t cmd_len = prefix_bytes(cmd, AUDIT_MAX_COMMAND, &truncated);
    pthread_mutex_lock(&s->mu);
    long long now = now_us();
    if (now - s->last_prune_us >= AUDIT_PRUNE_EVERY_US)
        prune_locked(s, now);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db,
                                "INSERT INTO audit (tenant_id, sk, ts_us, session_id, actor, kind, command,"
                                " truncated, exit_code, duration_s, timed_out, oom_killed, detail)"
                                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                                -1, &st, NULL);
    /* a clash of the random suffix within one microsecond is retried with a new one */
    for (int attempt = 0; rc == SQLITE_OK && attempt < 4; attempt++) {
        unsigned int rnd = 0;
        if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
            rnd = (unsigned int)(now ^ (long long)attempt * 2654435761LL);
        char sk[40];
        snprintf(sk, sizeof sk, "%020lld#%08x", now, rnd);
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, e->tenant, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, sk, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 3, now);
        bind_opt_text(st, 4, e->session_id);
        bind_opt_text(st, 5, e->actor);
        bind_opt_text(st, 6, e->kind);
        sqlite3_bind_text(st, 7, cmd, (int)cmd_len, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 8, truncated);
        if (e->has_exit_code)
            sqlite3_bind_int(st, 9, e->exit_code);
        else
            sqlite3_bind_null(st, 9);
        if (e->has_duration)
            sqlite3_bind_double(st, 10, e->duration_s);
        else
            sqlite3_bind_null(st, 10);
        sqlite3_bind_int(st, 11, e->timed_out);
        sqlite3_bind_int(st, 12, e->oom_killed);
        bind_opt_text(st, 13, e->detail);
        rc = sqlite3_step(st);
        if (rc == SQLITE_DONE) {
            rc = SQLITE_OK;
            break;
        }
        if (rc != SQLITE_CONSTRAINT)
            break;
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK)
        log_error("audit: cannot record a %s entry: %s", e->kind ? e->kind : "?",
                  sqlite3_errmsg(s->db));
    sqlite3_finalize(st);
    s->failing = rc != SQLITE_OK;
    pthread_mutex_unlock(&s->mu);
    return rc == SQLITE_OK ? 0 : -1;
}

bool audit_writable(audit_store *s)
{
    if (!s)
        return true;
    pthread_mutex_lock(&s->mu);
    if (s->failing) {
        /* a real commit (one page through the WAL, synced), leaving nothing behind */
        int rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE; INSERT INTO audit_probe VALUES (1);"
                                     " DELETE FROM audit_probe; COMMIT;", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            sqlite3_exec(s->db, "ROLLBACK;", NULL, NULL, NULL);
        s->failing = rc != SQLITE_OK;
    }
    bool ok = !s->failing;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static json_t *column_text(sqlite3_stmt *st, int i)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return json_null();
    const char *t = (const char *)sqlite3_column_text(st, i);
    int n = sqlite3_column_bytes(st, i);
    if (!t)
        return json_null();
    /* stored text came in as UTF-8, but never hand jansson anything invalid */
    size_t len;
    char *clean = utf8_replace(t, (size_t)n, &len);
    json_t *v = clean ? json_stringn_nocheck(clean, len) : json_null();
    free(clean);
    return v;
}

/* The fields of an entry from session_id on, at column first (then actor, kind, command,
 * truncated, exit_code, duration_s, timed_out, oom_killed, detail). */
static void set_fields(json_t *o, sqlite3_stmt *st, int first)
{
    json_object_set_new(o, "session_id", column_text(st, first));
    json_object_set_new(o, "actor", column_text(st, first + 1));
    json_object_set_new(o, "kind", column_text(st, first + 2));
    json_object_set_new(o, "command", column_text(st, first + 3));
    json_object_set_new(o, "truncated", json_boolean(sqlite3_column_int(st, first + 4)));
    json_object_set_new(o, "exit_code", sqlite3_column_type(st, first + 5) == SQLITE_NULL
                                            ? json_null()
                                            : json_integer(sqlite3_column_int64(st, first + 5)));
    json_object_set_new(o, "duration_s", sqlite3_column_type(st, first + 6) == SQLITE_NULL
                                             ? json_null()
                                             : json_real(sqlite3_column_double(st, first + 6)));
    json_object_set_new(o, "timed_out", json_boolean(sqlite3_column_int(st, first + 7)));
    json_object_set_new(o, "oom_killed", json_boolean(sqlite3_column_int(st, first + 8)));
    json_object_set_new(o, "detail", column_text(st, first + 9));
}

static json_t *row_entry(sqlite3_stmt *st)
{
    json_t *o = json_object();
    json_object_set_new(o, "ts", json_real((double)sqlite3_column_int64(st, 1) / 1e6));
    set_fields(o, st, 2);
    return o;
}

int audit_query(audit_store *s, const char *tenant, const char *before, size_t before_len, int limit,
                json_t **entries, char **next)
{
    *entries = NULL;
    *next = NULL;
    if (!s)
        return -1;
    if (limit < 1)
        limit = 1;
    if (limit > 500)
        limit = 500;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st = NULL;
    const char *sql = before ? "SELECT sk, ts_us, session_id, actor, kind, command, truncated, exit_code,"
                               " duration_s, timed_out, oom_killed, detail FROM audit"
                               " WHERE tenant_id = ? AND ts_us >= ? AND sk < ? ORDER BY sk DESC LIMIT ?"
                             : "SELECT sk, ts_us, session_id, actor, kind, command, truncated, exit_code,"
                               " duration_s, timed_out, oom_killed, detail FROM audit"
                               " WHERE tenant_id = ? AND ts_us >= ? ORDER BY sk DESC LIMIT ?";
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    json_t *arr = json_array();
    char *last_sk = NULL;
    bool more = false;
    if (rc == SQLITE_OK) {
        int i = 1;
        sqlite3_bind_text(st, i++, tenant, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, i++, cutoff_us(s, now_us()));
        if (before)
            sqlite3_bind_text(st, i++, before, (int)(before_len > 4096 ? 4096 : before_len), SQLITE_TRANSIENT);
        sqlite3_bind_int(st, i, limit + 1); /* one extra row tells whether more exist */
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if ((int)json_array_size(arr) == limit) {
                more = true;
                continue;
            }
            json_array_append_new(arr, row_entry(st));
            free(last_sk);
            const char *sk = (const char *)sqlite3_column_text(st, 0);
            last_sk = sk ? strdup(sk) : NULL;
        }
        if (rc == SQLITE_DONE)
            rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK)
        log_error("audit: query failed: %s", sqlite3_errmsg(s->db));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    if (rc != SQLITE_OK) {
        json_decref(arr);
        free(last_sk);
        return -1;
    }
    *entries = arr;
    if (more)
        *next = last_sk;
    else
        free(last_sk);
    return 0;
}

int audit_recent(audit_store *s, int limit, json_t **entries)
{
    *entries = NULL;
    if (!s)
        return -1;
    limit = limit < 1 ? 1 : limit > 500 ? 500 : limit;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, "SELECT sk, ts_us, session_id, actor, kind, command, truncated, exit_code,"
                                       " duration_s, timed_out, oom_killed, detail, tenant_id FROM audit"
                                       " WHERE ts_us >= ? ORDER BY ts_us DESC, sk DESC LIMIT ?", -1, &st, NULL);
    json_t *arr = json_array();
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, cutoff_us(s, now_us()));
        sqlite3_bind_int(st, 2, limit);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            json_t *o = row_entry(st);
            json_object_set_new(o, "tenant_id", json_string((const char *)sqlite3_column_text(st, 12)));
            json_array_append_new(arr, o);
        }
        if (rc == SQLITE_DONE)
            rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK)
        log_error("audit: the newest rows cannot be read: %s", sqlite3_errmsg(s->db));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    if (rc != SQLITE_OK) {
        json_decref(arr);
        return -1;
    }
    *entries = arr;
    return 0;
}

/* Up to limit rows of an outbox (sql, its LIMIT the one parameter), each made an object by
 * row; 0 with *rows, or -1 (what: for the message). */
static int outbox_rows(audit_store *s, const char *sql, int limit, json_t *(*row)(sqlite3_stmt *st), json_t **rows,
                       const char *what)
{
    *rows = NULL;
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    json_t *arr = json_array();
    if (rc == SQLITE_OK) {
        sqlite3_bind_int(st, 1, limit);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW)
            json_array_append_new(arr, row(st));
        if (rc == SQLITE_DONE)
            rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK)
        log_error("audit: reading the %s failed: %s", what, sqlite3_errmsg(s->db));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    if (rc != SQLITE_OK) {
        json_decref(arr);
        return -1;
    }
    *rows = arr;
    return 0;
}

static json_t *audit_row(sqlite3_stmt *st)
{
    json_t *o = json_object();
    json_object_set_new(o, "tenant_id", column_text(st, 0));
    json_object_set_new(o, "sk", column_text(st, 1));
    json_object_set_new(o, "ts_us", json_integer(sqlite3_column_int64(st, 2)));
    set_fields(o, st, 3);
    return o;
}

int audit_outbox_read(audit_store *s, int limit, json_t **rows)
{
    /* sort keys grow with time: rows are written under mu with the time taken under it */
    return outbox_rows(s,
                       "SELECT tenant_id, sk, ts_us, session_id, actor, kind, command, truncated, exit_code,"
                       " duration_s, timed_out, oom_killed, detail FROM audit"
                       " WHERE sk > coalesce((SELECT sk FROM audit_shipped WHERE one = 1), '')"
                       " ORDER BY sk LIMIT ?",
                       limit, audit_row, rows, "outbox");
}

/* One statement with the sort key sk as its parameter (what: for the message); 0 or -1. */
static int run_with_sk(audit_store *s, const char *sql, const char *sk, const char *what)
{
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, sk, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    }
    if (rc != SQLITE_OK)
        log_error("audit: %s failed: %s", what, sqlite3_errmsg(s->db));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return rc == SQLITE_OK ? 0 : -1;
}

int audit_outbox_mark(audit_store *s, const char *sk)
{
    return run_with_sk(s, "INSERT INTO audit_shipped (one, sk) VALUES (1, ?)"
                          " ON CONFLICT (one) DO UPDATE SET sk = excluded.sk", sk, "marking the outbox");
}

/* One count(*) (0 or more), or -1. */
static long long count_rows(audit_store *s, const char *sql)
{
    pthread_mutex_lock(&s->mu);
    sqlite3_stmt *st = NULL;
    long long n = -1;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return n;
}

void audit_outbox_depth(audit_store *s, long long *audit_rows, long long *egress_rows)
{
    *audit_rows = *egress_rows = -1;
    if (!s)
        return;
    *audit_rows = count_rows(s, "SELECT count(*) FROM audit"
                                " WHERE sk > coalesce((SELECT sk FROM audit_shipped WHERE one = 1), '')");
    *egress_rows = count_rows(s, "SELECT count(*) FROM egress_outbox");
}

int audit_egress_record(audit_store *s, const char *session_id, const json_t *event)
{
    char *text = json_dumps(event, JSON_COMPACT);
    if (!s || !text) {
        free(text);
        return -1;
    }
    pthread_mutex_lock(&s->mu);
    unsigned int rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        rnd = (unsigned int)now_us();
    char sk[40];
    snprintf(sk, sizeof sk, "%020lld#%08x", now_us(), rnd);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db, "INSERT INTO egress_outbox (sk, session_id, event) VALUES (?, ?, ?)", -1,
                                &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_text(st, 1, sk, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, session_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 3, text, -1, SQLITE_TRANSIENT);
        rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    }
    if (rc != SQLITE_OK)
        log_error("audit: storing an egress event failed: %s", sqlite3_errmsg(s->db));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    free(text);
    return rc == SQLITE_OK ? 0 : -1;
}

static json_t *egress_row(sqlite3_stmt *st)
{
    return json_pack("{s:o,s:o,s:o}", "sk", column_text(st, 0), "session_id", column_text(st, 1), "event",
                     column_text(st, 2));
}

int audit_egress_outbox_read(audit_store *s, int limit, json_t **rows)
{
    return outbox_rows(s, "SELECT sk, session_id, event FROM egress_outbox ORDER BY sk LIMIT ?", limit, egress_row,
                       rows, "egress outbox");
}

int audit_egress_outbox_done(audit_store *s, const char *sk)
{
    return run_with_sk(s, "DELETE FROM egress_outbox WHERE sk <= ?", sk, "clearing the egress outbox");
}
