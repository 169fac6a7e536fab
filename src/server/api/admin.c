/* /v1/admin/keys (contract 1.14): every tenant's keys, behind SANDBOX_ADMIN_KEY (checked by
 * the dispatcher). */
#include "api/handlers.h"

#include <stdlib.h>

void api_admin_keys_create(app *a, http_request *r, const api_call *c)
{
    const char *tenant = NULL, *name = NULL;
    size_t tenant_len = 0, name_len = 0;
    if (key_body(r, c->body, true, &tenant, &tenant_len, &name, &name_len))
        create_key(a, r, tenant, tenant_len, name, name_len);
}

void api_admin_keys_list(app *a, http_request *r, const api_call *c)
{
    (void)c;
    size_t len = 0;
    char *tenant = http_query(r, "tenant", &len);
    json_t *keys = keystore_list(a->keys, tenant);
    free(tenant);
    if (keys)
        http_send_json(r, 200, json_pack("{s:o}", "keys", keys));
    else
        http_send_500(r);
}

void api_admin_keys_revoke(app *a, http_request *r, const api_call *c)
{
    json_t *rec = NULL;
    int rc = keystore_revoke(a->keys, NULL, c->param, false, &rec);
    if (rc == KS_OK)
        http_send_json(r, 200, rec);
    else if (rc == KS_NOT_FOUND)
        send_detail_with(r, 404, "No key '%s'.", c->param);
    else if (rc == KS_STORAGE)
        send_not_saved(r, 507, "The revocation");
    else
        http_send_500(r);
}
