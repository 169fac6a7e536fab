/* The fleet as the session registry's and the limits' shared store: adapters from their
 * callback interfaces (domain/sessions.h, domain/limits.h) to fleet/fleet.h. */
#include "fleet/wire.h"

#include <string.h>

static int reserve(void *ctx, const char *id, const char *tenant, int max, const json_t *egress, long long quota,
                   int *open_now)
{
    return fleet_session_reserve(ctx, id, tenant, max, egress, quota, open_now);
}

static void ready(void *ctx, const char *reserved_id, const char *id, double created_at, const session *s)
{
    json_t *shape = json_pack("{s:s,s:I,s:I,s:I}", "template", s->template_name, "memory_mb",
                              (json_int_t)s->size.memory_mb, "cpu_percent", (json_int_t)s->size.cpu_percent,
                              "max_processes", (json_int_t)s->size.max_processes);
    if (shape && s->on_idle_pause)
        json_object_set_new(shape, "on_idle", json_string("pause"));
    fleet_session_ready(ctx, reserved_id, id, created_at, shape);
    json_decref(shape);
}

static void release(void *ctx, const char *id)
{
    fleet_session_release(ctx, id);
}

static void paused(void *ctx, const char *id, double paused_at)
{
    fleet_session_paused(ctx, id, paused_at);
}

static int lease(void *ctx, const char *tenant, int per_minute, int want, double give_back, int *granted,
                 double *left, double *wait_s)
{
    return fleet_lease_tokens(ctx, tenant, per_minute, want, give_back, granted, left, wait_s);
}

static int exec_begin(void *ctx, const char *tenant, int max)
{
    return fleet_command_begin(ctx, tenant, max);
}

static void exec_end(void *ctx, const char *tenant)
{
    fleet_command_end(ctx, tenant);
}

static void exec_return(void *ctx, const char *tenant, int n)
{
    fleet_commands_return(ctx, tenant, n);
}

static int nodes(void *ctx)
{
    return fleet_live_nodes(ctx);
}

void fleet_wire(fleet *f, registry_shared *rs, limits_shared *ls)
{
    *rs = (registry_shared){.reserve = reserve, .ready = ready, .release = release, .paused = paused, .ctx = f};
    *ls = (limits_shared){.lease = lease, .exec_begin = exec_begin, .exec_end = exec_end,
                          .exec_return = exec_return, .nodes = nodes,
                          .ctx = f};
}

static int snap_usage(void *ctx, const char *tenant, long *n, long long *bytes)
{
    return fleet_snapshot_usage(ctx, tenant, n, bytes);
}

static int snap_add(void *ctx, const snapshot_record *rec, const snapshot_limits *lim, long *n, long long *bytes)
{
    return fleet_snapshot_add(ctx, rec, lim->max_count, lim->max_bytes, n, bytes);
}

static void snap_remove(void *ctx, const char *id)
{
    fleet_snapshot_remove(ctx, id);
}

static snapshot_record *snap_list(void *ctx, const char *tenant, size_t *n, bool *ok)
{
    return fleet_snapshot_list(ctx, tenant, n, ok);
}

void fleet_wire_snapshots(fleet *f, snapshots *sn)
{
    size_t n = 0; /* the store's snapshots from before the table join it */
    snapshot_record *v = snapshot_store_list(snapshots_store(sn), NULL, &n);
    fleet_snapshot_backfill(f, v, n);
    snapshot_records_free(v, n);
    snapshots_set_index(sn, &(snapshot_index){.usage = snap_usage, .add = snap_add, .remove = snap_remove,
                                              .list = snap_list, .ctx = f});
}

session_spec fleet_shape_spec(const json_t *shape, long long quota_bytes)
{
    json_t *m = json_object_get(shape, "memory_mb"), *c = json_object_get(shape, "cpu_percent"),
           *n = json_object_get(shape, "max_processes");
    /* what the database holds was written by a node: still only whole numbers in range count */
    session_spec spec = {.template_name = json_string_value(json_object_get(shape, "template")),
                         .quota_bytes = quota_bytes};
    if (json_is_integer(m) && json_integer_value(m) > 0 && json_integer_value(m) <= 1 << 24)
        spec.size.memory_mb = (unsigned)json_integer_value(m);
    if (json_is_integer(c) && json_integer_value(c) > 0 && json_integer_value(c) <= 1 << 20)
        spec.size.cpu_percent = (unsigned)json_integer_value(c);
    if (json_is_integer(n) && json_integer_value(n) > 0 && json_integer_value(n) <= 1 << 24)
        spec.size.max_processes = (unsigned)json_integer_value(n);
    if (spec.template_name && strlen(spec.template_name) >= SESSION_TEMPLATE_MAX)
        spec.template_name = NULL;
    return spec;
}
