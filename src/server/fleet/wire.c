/* The fleet as the session registry's and the limits' shared store: adapters from their
 * callback interfaces (domain/sessions.h, domain/limits.h) to fleet/fleet.h. */
#include "fleet/wire.h"

static int reserve(void *ctx, const char *id, const char *tenant, int max, const json_t *egress, long long quota,
                   int *open_now)
{
    return fleet_session_reserve(ctx, id, tenant, max, egress, quota, open_now);
}

static void ready(void *ctx, const char *reserved_id, const char *id, double created_at)
{
    fleet_session_ready(ctx, reserved_id, id, created_at);
}

static void release(void *ctx, const char *id)
{
    fleet_session_release(ctx, id);
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

static int nodes(void *ctx)
{
    return fleet_live_nodes(ctx);
}

void fleet_wire(fleet *f, registry_shared *rs, limits_shared *ls)
{
    *rs = (registry_shared){.reserve = reserve, .ready = ready, .release = release, .ctx = f};
    *ls = (limits_shared){.lease = lease, .exec_begin = exec_begin, .exec_end = exec_end, .nodes = nodes,
                          .ctx = f};
}
