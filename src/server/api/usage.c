/* GET /v1/usage (contract 1.11): the tenant's limits and what it uses of them now. */
#include "api/handlers.h"

void api_usage(app *a, http_request *r, const api_call *c)
{
    size_t tenant = c->tenant;
    const tenant_cfg *t = tenants_get(a->tenants, tenant);
    long open = -1, elsewhere = 0;
    if (a->fleet && fleet_tenant_usage(a->fleet, t->name, &open, &elsewhere) != 0) /* every node's */
        open = -1, elsewhere = 0;
    if (open < 0)
        open = (long)registry_count_tenant(a->reg, tenant);
    /* this node's commands exactly; the other nodes' by the slots they hold */
    long running = limits_running(a->lim, tenant) + elsewhere;
    http_send_json(r, 200, json_pack("{s:s,s:{s:i,s:i,s:i},s:I,s:i,s:I}", "tenant_id", t->name, "limits",
                                     "max_sessions", t->max_sessions, "requests_per_minute", t->requests_per_minute,
                                     "max_concurrent_exec", t->max_concurrent_exec,
                                     "sessions_open", (json_int_t)open,
                                     "commands_running", (int)running,
                                     "requests_available", (json_int_t)c->requests_available));
}
