/* The fleet's snapshots in PostgreSQL (schema migration 14): one row per snapshot in the shared
 * store, so a tenant's list and limits are exact whichever node answers. */
#include "fleet/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fleet_snapshot_add(fleet *f, const snapshot_record *rec, int max_count, long long max_bytes, long *n,
                       long long *used)
{
    json_t *row = json_pack("{s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:I,s:b,s:s,s:f}", "id", rec->id, "tenant", rec->tenant,
                            "name", rec->name, "session_id", rec->session_id, "template", rec->template_name,
                            "quota_bytes", (json_int_t)rec->quota_bytes, "image_bytes",
                            (json_int_t)rec->image_bytes, "bytes", (json_int_t)rec->bytes, "memory", rec->memory,
                            "node", f->id, "created_at", rec->created_at);
    char *js = row ? json_dumps(row, JSON_COMPACT) : NULL;
    json_decref(row);
    if (!js)
        return -1;
    char mc[24], mb[24];
    snprintf(mc, sizeof mc, "%d", max_count);
    snprintf(mb, sizeof mb, "%lld", max_bytes);
    const char *p[] = {js, mc, mb};
    PGresult *res = pg_query(f->db, "SELECT added, n, used FROM airlock_snapshot_add($1::jsonb, $2::integer,"
                                    " $3::bigint)", 3, p);
    free(js);
    int rc = -1;
    if (res && PQntuples(res) == 1) {
        rc = strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? 0 : 1;
        *n = atol(PQgetvalue(res, 0, 1));
        *used = atoll(PQgetvalue(res, 0, 2));
    }
    PQclear(res);
    return rc;
}

int fleet_snapshot_usage(fleet *f, const char *tenant, long *n, long long *used)
{
    const char *p[] = {tenant};
    PGresult *res = pg_query(f->db, "SELECT count(*), coalesce(sum(bytes), 0) FROM snapshots WHERE tenant = $1", 1,
                             p);
    int rc = res && PQntuples(res) == 1 ? 0 : -1;
    if (rc == 0) {
        *n = atol(PQgetvalue(res, 0, 0));
        *used = atoll(PQgetvalue(res, 0, 1));
    }
    PQclear(res);
    return rc;
}

void fleet_snapshot_remove(fleet *f, const char *id)
{
    const char *p[] = {id};
    PQclear(pg_query(f->db, "DELETE FROM snapshots WHERE id = $1", 1, p));
}

/* a bounded copy of a column into a fixed field */
static void field(char *out, size_t size, const char *v)
{
    snprintf(out, size, "%s", v);
}

snapshot_record *fleet_snapshot_list(fleet *f, const char *tenant, size_t *n, bool *ok)
{
    *n = 0;
    const char *p[] = {tenant};
    PGresult *res = pg_query(f->db, "SELECT id, name, session_id, template, quota_bytes, image_bytes, bytes,"
                                    " memory, created_at FROM snapshots WHERE tenant = $1"
                                    " ORDER BY created_at DESC, id", 1, p);
    *ok = res != NULL;
    int rows = res ? PQntuples(res) : 0;
    snapshot_record *v = rows ? calloc((size_t)rows, sizeof *v) : NULL;
    for (int i = 0; v && i < rows; i++) {
        snapshot_record *r = &v[*n];
        field(r->id, sizeof r->id, PQgetvalue(res, i, 0));
        field(r->name, sizeof r->name, PQgetvalue(res, i, 1));
        field(r->session_id, sizeof r->session_id, PQgetvalue(res, i, 2));
        field(r->template_name, sizeof r->template_name, PQgetvalue(res, i, 3));
        r->quota_bytes = atoll(PQgetvalue(res, i, 4));
        r->image_bytes = atoll(PQgetvalue(res, i, 5));
        r->bytes = atoll(PQgetvalue(res, i, 6));
        r->memory = strcmp(PQgetvalue(res, i, 7), "t") == 0;
        r->created_at = atof(PQgetvalue(res, i, 8));
        if ((r->tenant = strdup(tenant)))
            (*n)++;
    }
    if (rows && !v)
        *ok = false;
    PQclear(res);
    return v;
}

void fleet_snapshot_backfill(fleet *f, const snapshot_record *v, size_t n)
{
    for (size_t i = 0; i < n; i++) { /* made before the table, or its row lost: never counted twice */
        long cnt = 0;
        long long used = 0;
        const char *p[] = {v[i].id};
        char *have = pg_value(f->db, "SELECT 1 FROM snapshots WHERE id = $1", 1, p);
        if (!have)
            fleet_snapshot_add(f, &v[i], 1 << 30, 1LL << 62, &cnt, &used);
        free(have);
    }
}
