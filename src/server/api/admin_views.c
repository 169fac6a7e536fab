/* The admin key's views for the status page (docs/server.md "Status page"), across tenants:
 * GET /v1/admin/audit (the newest audit rows), GET /v1/admin/egress (the newest denied egress
 * attempts) and GET /v1/admin/status (this server's budgets). In a fleet the first two read
 * the database; while it cannot be reached they answer from this node's own records, with
 * "scope": "node" and "stale": true, instead of failing. */
#include "api/handlers.h"

#include "egress/log.h"

#include <stdio.h>

#define RECENT_DEFAULT 50
#define TENANTS_SHOWN 200 /* tenants listed in the status at most (the busiest are all there) */

/* {"scope", "node", "stale", <key>: rows}: rows from the fleet's database (fleet_wide) or from
 * this node alone. */
static void send_rows(app *a, http_request *r, const char *key, json_t *rows, bool fleet_wide)
{
    http_send_json(r, 200, json_pack("{s:s,s:o,s:b,s:o}", "scope", fleet_wide ? "fleet" : "node", "node",
                                     a->fleet ? json_string(fleet_node_id(a->fleet)) : json_null(), "stale",
                                     a->fleet && !fleet_wide, key, rows));
}

static bool clamped_limit(http_request *r, long long *limit, long long max)
{
    *limit = RECENT_DEFAULT;
    if (!limit_query(r, limit))
        return false;
    *limit = *limit < 1 ? 1 : *limit > max ? max : *limit; /* silently, as ?limit= elsewhere */
    return true;
}

void api_admin_audit(app *a, http_request *r, const api_call *c)
{
    (void)c;
    long long limit;
    if (!clamped_limit(r, &limit, 500))
        return;
    if (!a->audit) {
        http_send_detail(r, 501, "The audit log is not enabled on this server (SANDBOX_AUDIT).");
        return;
    }
    json_t *rows = NULL;
    bool fleet_wide = a->fleet && fleet_audit_recent(a->fleet, (int)limit, audit_retention_days(a->audit), &rows) == 0;
    if (!fleet_wide && audit_recent(a->audit, (int)limit, &rows) != 0) {
        http_send_500(r);
        return;
    }
    send_rows(a, r, "entries", rows, fleet_wide);
}

void api_admin_egress(app *a, http_request *r, const api_call *c)
{
    (void)c;
    long long limit;
    if (!clamped_limit(r, &limit, EGRESS_LOG_RING))
        return;
    json_t *rows = NULL;
    /* this node's own events are shipped first, as GET /v1/sessions/{id}/egress does */
    if (a->fleet && fleet_egress_ship(a->fleet, a->audit) == 0)
        rows = fleet_egress_denials(a->fleet, (int)limit);
    bool fleet_wide = rows != NULL;
    if (!rows)
        rows = a->egress ? egress_denials(a->egress, (size_t)limit) : json_array();
    if (!rows) {
        http_send_500(r);
        return;
    }
    send_rows(a, r, "denials", rows, fleet_wide);
}

/* Each tenant with sessions or commands on this server, and every configured one. */
static json_t *tenant_rows(app *a)
{
    json_t *out = json_array();
    size_t n = tenants_count(a->tenants);
    for (size_t i = 0; out && i < n && json_array_size(out) < TENANTS_SHOWN; i++) {
        size_t open = registry_count_tenant(a->reg, i);
        int running = limits_running(a->lim, i);
        if (i >= a->cfg->ntenants && open == 0 && running == 0)
            continue;
        const tenant_cfg *t = tenants_get(a->tenants, i);
        json_array_append_new(out, json_pack("{s:s,s:I,s:i,s:i,s:i,s:i}", "tenant", t->name, "sessions_open",
                                             (json_int_t)open, "max_sessions", t->max_sessions,
                                             "commands_running", running, "max_concurrent_exec",
                                             t->max_concurrent_exec, "requests_per_minute",
                                             t->requests_per_minute));
    }
    return out;
}

/* The host's memory (/proc/meminfo, kB): its total and what is available; -1 when unknown. */
static void host_memory(long long *total, long long *available)
{
    *total = *available = -1;
    FILE *f = fopen("/proc/meminfo", "re");
    char line[128];
    long long kb;
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "MemTotal: %lld kB", &kb) == 1)
            *total = kb * 1024;
        else if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
            *available = kb * 1024;
    }
    if (f)
        fclose(f);
}

static json_t *bytes_or_null(long long n)
{
    return n >= 0 ? json_integer(n) : json_null();
}

void api_admin_status(app *a, http_request *r, const api_call *c)
{
    (void)c;
    long long disk_used = 0, disk_cap = 0;
    if (a->disk)
        disk_pool_usage(a->disk, &disk_used, &disk_cap);
    long long mem_total, mem_available;
    host_memory(&mem_total, &mem_available);
    int capacity = a->cfg->fleet_capacity;
    json_t *budgets = json_pack(
        "{s:{s:I,s:o},s:{s:i,s:i},s:{s:I,s:I,s:I},s:{s:o,s:o}}",
        "sessions", "open", (json_int_t)registry_count(a->reg), "max",
        a->fleet && capacity > 0 ? json_integer(capacity) : json_null(),
        "commands", "running", slots_running(a->slots), "max", slots_max(a->slots),
        "disk", "used_bytes", (json_int_t)disk_used, "total_bytes", (json_int_t)disk_cap, "session_quota_bytes",
        (json_int_t)a->cfg->quota_bytes,
        "host_memory", "total_bytes", bytes_or_null(mem_total), "available_bytes", bytes_or_null(mem_available));
    http_send_json(r, 200, json_pack("{s:o,s:b,s:o,s:s,s:f,s:o,s:o}", "node",
                                     a->fleet ? json_string(fleet_node_id(a->fleet)) : json_null(), "fleet",
                                     a->fleet != NULL, "database_reachable",
                                     a->db ? json_boolean(pg_reachable(a->db)) : json_null(), "isolation",
                                     sandbox_backend_name(a->sb), "session_ttl_s", a->cfg->session_ttl, "budgets",
                                     budgets, "tenants", tenant_rows(a)));
}
