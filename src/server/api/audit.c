/* GET /v1/audit (contract 1.12): the tenant's command history, newest first, paged; and the
 * recording of a row by the routes that audit. */
#include "api/handlers.h"

#include "store/audit.h"

#include <stdlib.h>

int api_audit_record(app *a, const audit_entry *e)
{
    int rc = audit_record(a->audit, e);
    /* a fleet node's record is durable once in the database; else it is synced here, before
     * the answer (store/audit.h) */
    if (rc == 0 && a->fleet && fleet_audit_ship_now(a->fleet, a->audit) != 0)
        rc = audit_sync(a->audit);
    return rc;
}

void api_commands_ended(app *a)
{
    if (a->fleet && fleet_commands_waiting(a->fleet))
        (void)fleet_audit_ship_now(a->fleet, a->audit); /* else the heartbeat's */
}

void api_audit(app *a, http_request *r, const api_call *c)
{
    long long limit = 100;
    size_t before_len = 0;
    if (!limit_query(r, &limit))
        return;
    if (!a->audit) {
        http_send_detail(r, 501, "The audit log is not enabled on this server (SANDBOX_AUDIT).");
        return;
    }
    limit = limit < 1 ? 1 : limit > 500 ? 500 : limit;
    char *before = http_query(r, "before", &before_len);
    json_t *entries = NULL;
    char *next = NULL;
    const char *name = tenants_get(a->tenants, c->tenant)->name;
    /* a fleet's: every node's rows, from the database */
    int rc = a->fleet ? fleet_audit_query(a->fleet, name, before, (int)limit, audit_retention_days(a->audit), &entries,
                                          &next)
                      : audit_query(a->audit, name, before, before_len, (int)limit, &entries, &next);
    free(before);
    if (rc != 0 && a->fleet) {
        http_send_json_header(r, 503, json_pack("{s:s}", "detail", "The fleet's database cannot be reached."),
                              "retry-after", "2");
        return;
    }
    if (rc != 0) {
        http_send_500(r);
        return;
    }
    http_send_json(r, 200, json_pack("{s:s,s:o,s:o,s:i}", "tenant_id", name, "entries", entries, "next",
                                     next ? json_string(next) : json_null(), "retention_days",
                                     audit_retention_days(a->audit)));
    free(next);
}
