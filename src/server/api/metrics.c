/* GET /metrics (ours): the Prometheus text format for the admin key (also accepted as
 * "Authorization: Bearer <key>", the only way Prometheus sends a credential): the counters of
 * obs/metrics.h, then the gauges read now (sessions, sandboxes, budgets, and in a fleet the
 * heartbeat, the database and the outbox). docs/server.md "Metrics" lists them. */
#include "api/handlers.h"

#include "obs/metrics.h"

#include <stdlib.h>
#include <time.h>

/* A scrape is a few kB; 1000 tenants with refusals and every route and status stay far
 * below this. */
#define SCRAPE_MAX (4u * 1024u * 1024u)

static const char *tenant_name(void *ctx, size_t i)
{
    const app *a = ctx;
    return i < tenants_capacity(a->tenants) ? tenants_get(a->tenants, i)->name : NULL;
}

static void write_sessions(app *a, buffer *b)
{
    /* (read in turn: a pause between the two reads can count a session in both or neither) */
    size_t all = registry_count(a->reg), paused = registry_count_paused(a->reg);
    metrics_write_help(b, "airlockd_sessions", "gauge", "Sessions on this node, by state");
    metrics_write_sample(b, "airlockd_sessions", "state=\"active\"", (double)(all > paused ? all - paused : 0));
    metrics_write_sample(b, "airlockd_sessions", "state=\"paused\"", (double)paused);
    warm_counts w;
    warm_count(a->warm, &w);
    metrics_write_help(b, "airlockd_sandboxes", "gauge",
                       "Sandboxes held ahead of their commands and sessions' own sandboxes, by state");
    metrics_write_sample(b, "airlockd_sandboxes", "state=\"booting\"", w.booting);
    metrics_write_sample(b, "airlockd_sandboxes", "state=\"ready\"", w.ready);
    metrics_write_sample(b, "airlockd_sandboxes", "state=\"in_use\"", w.in_use);
    metrics_write_gauge(b, "airlockd_sandboxes_spare", "Of those, spares booted for tenants' next new sessions", NULL,
                        w.spares);
    metrics_write_gauge(b, "airlockd_sandboxes_restore_ahead",
                        "Sandboxes made ahead for the resumes of paused sessions, waiting (besides those above)", NULL,
                        (double)sandbox_restore_ahead_count(a->sb));
}

static void write_budgets(app *a, http_request *r, buffer *b)
{
    long long used = 0, cap = 0;
    disk_pool_usage(a->disk, &used, &cap);
    metrics_write_help(b, "airlockd_disk_budget_bytes", "gauge",
                       "The workspace disks' budget (SANDBOX_DISK_TOTAL_MB): bytes the sessions' images take, and the cap");
    metrics_write_sample(b, "airlockd_disk_budget_bytes", "kind=\"used\"", (double)used);
    metrics_write_sample(b, "airlockd_disk_budget_bytes", "kind=\"total\"", (double)cap);
    size_t bused = 0, btotal = 0;
    http_body_budget(r, &bused, &btotal);
    metrics_write_help(b, "airlockd_body_memory_budget_bytes", "gauge",
                       "The memory budget of request bodies held at once (SANDBOX_BODY_MEMORY_MB)");
    metrics_write_sample(b, "airlockd_body_memory_budget_bytes", "kind=\"used\"", (double)bused);
    metrics_write_sample(b, "airlockd_body_memory_budget_bytes", "kind=\"total\"", (double)btotal);
    sandbox_usage u;
    if (sandbox_total_usage(a->sb, &u)) {
        metrics_write_gauge(b, "airlockd_sandbox_memory_bytes", "Memory all sandboxes hold now (their cgroups)",
                            NULL, (double)u.memory_bytes);
        metrics_write_help(b, "airlockd_sandbox_cpu_seconds_total", "counter",
                           "CPU time of all sandboxes of this server since it started (their cgroups)");
        metrics_write_sample(b, "airlockd_sandbox_cpu_seconds_total", NULL, (double)u.cpu_ns / 1e9);
    }
}

static void write_fleet(app *a, buffer *b)
{
    metrics_write_gauge(b, "airlockd_fleet_heartbeat_age_seconds",
                        "Seconds since this node's heartbeat last reached the database (-1: never yet)", NULL,
                        metrics_heartbeat_age());
    metrics_write_gauge(b, "airlockd_fleet_database_reachable", "1 while the fleet's database answers", NULL,
                        pg_reachable(a->db) ? 1 : 0);
    metrics_write_help(b, "airlockd_fleet_database_errors_total", "counter",
                       "Statements to the fleet's database that failed (or could not be sent)");
    metrics_write_sample(b, "airlockd_fleet_database_errors_total", NULL, (double)metrics_db_errors());
    long long audit_rows = -1, egress_rows = -1;
    audit_outbox_depth(a->audit, &audit_rows, &egress_rows);
    metrics_write_help(b, "airlockd_fleet_outbox_rows", "gauge",
                       "Rows waiting in this node's outbox for the database (-1: unreadable)");
    metrics_write_sample(b, "airlockd_fleet_outbox_rows", "outbox=\"audit\"", (double)audit_rows);
    metrics_write_sample(b, "airlockd_fleet_outbox_rows", "outbox=\"egress\"", (double)egress_rows);
}

void api_metrics(app *a, http_request *r, const api_call *c)
{
    (void)c;
    buffer b;
    buf_init(&b, SCRAPE_MAX);
    metrics_write_counters(&b, tenant_name, a);
    write_sessions(a, &b);
    write_budgets(a, r, &b);
    if (a->fleet)
        write_fleet(a, &b);
    size_t len = 0;
    char *text = buf_take(&b, &len);
    if (!text) {
        buf_free(&b);
        http_send_500(r);
        return;
    }
    http_send_bytes(r, 200, text, len, "text/plain; version=0.0.4; charset=utf-8", NULL);
    free(text);
}
