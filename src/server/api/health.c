/* GET /healthz (contract 1.1): no key, no rate limit. */
#include "api/handlers.h"

/* The body is the contract's, exactly; the isolation backend ("gvisor", or the weaker
 * "bubblewrap" fallback) is reported in a header so clients and monitors can tell. */
void api_health(app *a, http_request *r, const api_call *c)
{
    (void)c;
    http_send_json_header(r, 200, json_pack("{s:s,s:I}", "status", "healthy", "active_sessions",
                                            (json_int_t)registry_count(a->reg)),
                          "x-airlock-isolation", sandbox_backend_name(a->sb));
}
