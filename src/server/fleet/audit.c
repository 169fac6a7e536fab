/* The fleet's audit log: each node records into its own SQLite store (store/audit.c), which is
 * also its outbox; the request that records a row ships it before its answer, in a group
 * commit with the rows, command ends and command starts of the node's other requests (so the
 * next request, on any node, reads it), and every heartbeat ships what is still new to the
 * database's audit table, where a row's key (tenant, node, sort key) makes a repeated shipment
 * write nothing twice. While the database is down, rows wait in the outbox. GET /v1/audit
 * reads every node's rows. */
#include "fleet/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SHIP_BATCH 500

/* Ships the outbox in batches; when extra is given, insert takes a $3: extra with the first
 * batch (*extra_sent then says it reached the database), "[]" with the next. */
static int ship_locked(fleet *f, audit_store *store, fleet_outbox_read read, fleet_outbox_done done,
                       const char *insert, const char *extra, bool *extra_sent)
{
    for (int round = 0; store && round < 20; round++) {
        json_t *rows = NULL;
        if (read(store, SHIP_BATCH, &rows) != 0) {
            json_decref(rows);
            return -1;
        }
        size_t n = json_array_size(rows);
        if (n == 0) {
            json_decref(rows);
            return 0;
        }
        char *last = strdup(json_string_value(json_object_get(json_array_get(rows, n - 1), "sk")));
        char *text = json_dumps(rows, JSON_COMPACT);
        json_decref(rows);
        bool with_extra = extra && !*extra_sent;
        const char *p[] = {text, f->id, with_extra ? extra : "[]"}; /* the ends go with the first */
        PGresult *res = text && last ? pg_query(f->db, insert, extra ? 3 : 2, p) : NULL;
        if (res && with_extra)
            *extra_sent = true;
        free(text);
        bool shipped = res != NULL;
        PQclear(res);
        if (shipped)
            done(store, last);
        free(last);
        if (!shipped)
            return -1;
        if (n < SHIP_BATCH)
            return 0;
    }
    return 0;
}

int fleet_outbox_ship(fleet *f, audit_store *store, fleet_outbox_read read, fleet_outbox_done done,
                      const char *insert)
{
    pthread_mutex_lock(&f->ship_mu);
    bool unused = false;
    int rc = ship_locked(f, store, read, done, insert, NULL, &unused);
    pthread_mutex_unlock(&f->ship_mu);
    return rc;
}

/* The audit rows go with the ends of the commands that ended meanwhile ($3): an exec's end
 * and its audit row are one transaction, and the ends of commands that finish together are
 * one. One statement text, prepared once per connection. */
int fleet_audit_ship(fleet *f, audit_store *store)
{
    pthread_mutex_lock(&f->ship_mu);
    char *ended = fleet_commands_ended(f);
    bool sent = false;
    int rc = ship_locked(f, store, audit_outbox_read, audit_outbox_mark, FLEET_AUDIT_WITH_ENDS, ended ? ended : "[]",
                         &sent);
    if (ended && !sent && fleet_commands_take_off(f, ended) != 0) { /* no audit row went: the ends alone */
        fleet_commands_unended(f, ended);
        rc = -1;
    }
    pthread_mutex_unlock(&f->ship_mu);
    free(ended);
    return rc;
}

void fleet_set_outbox(fleet *f, audit_store *store)
{
    f->outbox = store;
}

/* Each start's answer from the group's integer[] ("{1,0,2}": airlock_exec_take's), in order;
 * false when it does not name one per start. */
static bool read_admitted(const char *v, fleet_exec_start *starts)
{
    fleet_exec_start *st = starts;
    for (; v && *v; v++) {
        if (*v < '0' || *v > '2')
            continue;
        if (!st)
            return false;
        st->admitted = *v - '0';
        st = st->next;
    }
    return st == NULL;
}

/* The starts as airlock_exec_group_take takes them: [[tenant, max], ...]; NULL when out of memory. */
static char *starts_json(fleet_exec_start *starts)
{
    json_t *a = json_array();
    for (fleet_exec_start *st = starts; a && st; st = st->next)
        json_array_append_new(a, json_pack("[si]", st->tenant, st->max));
    char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return text;
}

/* One group (ship_mu held): the ends that wait, the first batch of the outbox and the starts,
 * in one statement (schema migrations 15 and 16); what the outbox holds beyond its first batch (after
 * an outage) follows in batches of its own. 0, or -1 with the starts -1. */
static int ship_group(fleet *f, audit_store *store, fleet_exec_start *starts)
{
    json_t *rows = NULL;
    if (store && audit_outbox_read(store, SHIP_BATCH, &rows) != 0) {
        json_decref(rows);
        rows = NULL;
        store = NULL; /* the outbox cannot be read now: the heartbeat tries again */
    }
    size_t n = json_array_size(rows);
    char *last = n ? strdup(json_string_value(json_object_get(json_array_get(rows, n - 1), "sk"))) : NULL;
    char *rows_text = n ? json_dumps(rows, JSON_COMPACT) : NULL;
    json_decref(rows);
    char *ended = fleet_commands_ended(f);
    char *st_text = starts_json(starts);
    int rc = -1;
    if ((!n || (last && rows_text)) && st_text) {
        /* the plainest statement that carries the group (a lone start or a lone end costs
         * what it did before the group commit: its own statement), nothing when it is empty */
        const char *rows_or = n ? rows_text : "[]", *ended_or = ended ? ended : "[]";
        char max[24];
        snprintf(max, sizeof max, "%d", starts ? starts->max : 0);
        PGresult *res = NULL;
        char *v = NULL;
        bool ok;
        if (!starts) {
            const char *p[] = {rows_or, f->id, ended_or};
            ok = (!n && !ended) || (res = pg_query(f->db, FLEET_AUDIT_WITH_ENDS, 3, p)) != NULL;
        } else if (!starts->next && !n && !ended) {
            const char *p[] = {starts->tenant, f->id, max};
            ok = (v = pg_value(f->db, "SELECT airlock_exec_take($1, $2, $3::integer)", 3, p)) &&
                 read_admitted(v, starts);
        } else {
            const char *p[] = {f->id, rows_or, ended_or, st_text};
            ok = (v = pg_value(f->db, "SELECT airlock_exec_group_take($1, $2::json, $3::json, $4::json)", 4, p)) &&
                 read_admitted(v, starts);
        }
        PQclear(res);
        free(v);
        if (ok) {
            rc = 0;
            if (n)
                audit_outbox_mark(store, last);
        }
    }
    if (rc != 0) {
        if (ended)
            fleet_commands_unended(f, ended);
        for (fleet_exec_start *st = starts; st; st = st->next)
            st->admitted = -1;
    }
    free(ended);
    free(st_text);
    free(rows_text);
    free(last);
    bool unused = false;
    if (rc == 0 && n == SHIP_BATCH) /* the rest of a backlog */
        rc = ship_locked(f, store, audit_outbox_read, audit_outbox_mark, FLEET_AUDIT_WITH_ENDS, "[]", &unused);
    return rc;
}

/* A group commit, as a database's own of its log: a request takes a number; the first to find
 * no shipment under way ships everything queued (the audit rows, command ends and command
 * starts of every request that took a number before it began) in one transaction, the others
 * wait for it and are done when it covered their number; a number taken during a shipment
 * waits for the next, which one of them makes. No request is answered before what it queued
 * is in the database, and none waits beyond the shipment under way and its own: no timer (a
 * wait of up to 2 ms for the node's other running commands, as PostgreSQL's commit_delay,
 * merged 1.5% of the starts and ends of 4 commands at once on each node, for up to 2 ms each;
 * docs/fleet.md). */
int fleet_group_commit(fleet *f, audit_store *store, fleet_exec_start *start)
{
    pthread_mutex_lock(&f->gc_mu);
    unsigned long long mine = ++f->gc_taken;
    if (start) {
        start->next = NULL;
        *f->gc_starts_end = start;
        f->gc_starts_end = &start->next;
    }
    while (f->gc_shipped < mine && f->gc_failed < mine) {
        if (f->gc_busy) {
            pthread_cond_wait(&f->gc_cond, &f->gc_mu);
            continue;
        }
        f->gc_busy = true;
        unsigned long long covers = f->gc_taken;
        fleet_exec_start *starts = f->gc_starts;
        f->gc_starts = NULL;
        f->gc_starts_end = &f->gc_starts;
        pthread_mutex_unlock(&f->gc_mu);
        pthread_mutex_lock(&f->ship_mu);
        int rc = ship_group(f, store, starts);
        pthread_mutex_unlock(&f->ship_mu);
        pthread_mutex_lock(&f->gc_mu);
        f->gc_busy = false;
        if (rc == 0 && covers > f->gc_shipped)
            f->gc_shipped = covers;
        else if (rc != 0 && covers > f->gc_failed)
            f->gc_failed = covers;
        pthread_cond_broadcast(&f->gc_cond);
    }
    int rc = f->gc_shipped >= mine ? 0 : -1;
    pthread_mutex_unlock(&f->gc_mu);
    return rc;
}

int fleet_audit_ship_now(fleet *f, audit_store *store)
{
    /* else the heartbeat catches up once the database is back */
    return pg_reachable(f->db) ? fleet_group_commit(f, store, NULL) : -1;
}

static json_t *text_or_null(PGresult *res, int i, int col)
{
    return PQgetisnull(res, i, col) ? json_null() : json_string(PQgetvalue(res, i, col));
}

/* Row i of a query whose columns are sk, ts_us, session_id, actor, kind, command, truncated,
 * exit_code, duration_s, timed_out, oom_killed, detail: an entry of GET /v1/audit. */
static json_t *row_entry(PGresult *res, int i)
{
    json_t *o = json_object();
    json_object_set_new(o, "ts", json_real((double)atoll(PQgetvalue(res, i, 1)) / 1e6));
    json_object_set_new(o, "session_id", text_or_null(res, i, 2));
    json_object_set_new(o, "actor", text_or_null(res, i, 3));
    json_object_set_new(o, "kind", text_or_null(res, i, 4));
    json_object_set_new(o, "command", text_or_null(res, i, 5));
    json_object_set_new(o, "truncated", json_boolean(strcmp(PQgetvalue(res, i, 6), "t") == 0));
    json_object_set_new(o, "exit_code", PQgetisnull(res, i, 7) ? json_null()
                                                               : json_integer(atoll(PQgetvalue(res, i, 7))));
    json_object_set_new(o, "duration_s", PQgetisnull(res, i, 8) ? json_null()
                                                                : json_real(atof(PQgetvalue(res, i, 8))));
    json_object_set_new(o, "timed_out", json_boolean(strcmp(PQgetvalue(res, i, 9), "t") == 0));
    json_object_set_new(o, "oom_killed", json_boolean(strcmp(PQgetvalue(res, i, 10), "t") == 0));
    json_object_set_new(o, "detail", text_or_null(res, i, 11));
    return o;
}

/* The oldest timestamp (microseconds, as text for a query parameter) a row may have to be
 * still within retention_days. */
static void retention_cutoff(int retention_days, char *out, size_t size)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long now = (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
    snprintf(out, size, "%lld", now - (long long)retention_days * 86400LL * 1000000LL);
}

int fleet_audit_query(fleet *f, const char *tenant, const char *before, int limit, int retention_days,
                      json_t **entries, char **next)
{
    *entries = NULL;
    *next = NULL;
    char cutoff[32], lim[16];
    retention_cutoff(retention_days, cutoff, sizeof cutoff);
    snprintf(lim, sizeof lim, "%d", limit + 1); /* one extra row tells whether more exist */
    const char *p[] = {tenant, cutoff, lim, before};
    PGresult *res = pg_query(f->db,
        "SELECT sk, ts_us, session_id, actor, kind, command, truncated, exit_code, duration_s, timed_out,"
        " oom_killed, detail FROM audit WHERE tenant_id = $1 AND ts_us >= $2::bigint"
        " AND ($4::text IS NULL OR sk < $4) ORDER BY sk DESC, node LIMIT $3::integer", 4, p);
    if (!res)
        return -1;
    json_t *arr = json_array();
    int rows = PQntuples(res);
    for (int i = 0; i < rows && i < limit; i++)
        json_array_append_new(arr, row_entry(res, i));
    if (rows > limit && limit > 0)
        *next = strdup(PQgetvalue(res, limit - 1, 0));
    PQclear(res);
    *entries = arr;
    return 0;
}

int fleet_audit_recent(fleet *f, int limit, int retention_days, json_t **entries)
{
    *entries = NULL;
    char cutoff[32], lim[16];
    retention_cutoff(retention_days, cutoff, sizeof cutoff);
    snprintf(lim, sizeof lim, "%d", limit);
    const char *p[] = {cutoff, lim};
    PGresult *res = pg_query(f->db,
        "SELECT sk, ts_us, session_id, actor, kind, command, truncated, exit_code, duration_s, timed_out,"
        " oom_killed, detail, tenant_id, node FROM audit WHERE ts_us >= $1::bigint"
        " ORDER BY ts_us DESC, sk DESC, node LIMIT $2::integer", 2, p);
    if (!res)
        return -1;
    json_t *arr = json_array();
    for (int i = 0; i < PQntuples(res); i++) {
        json_t *o = row_entry(res, i);
        json_object_set_new(o, "tenant_id", json_string(PQgetvalue(res, i, 12)));
        json_object_set_new(o, "node", json_string(PQgetvalue(res, i, 13)));
        json_array_append_new(arr, o);
    }
    PQclear(res);
    *entries = arr;
    return 0;
}
