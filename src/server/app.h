/* What every request handler needs: configuration, registry, limits, isolation backend. */
#ifndef AIRLOCKD_APP_H
#define AIRLOCKD_APP_H

#include "store/audit.h"
#include "config.h"
#include "http/http.h"
#include "store/keystore.h"
#include "domain/limits.h"
#include "sandbox/sandbox.h"
#include "domain/sessions.h"

#include <stdatomic.h>

typedef struct app {
    const config *cfg;
    registry *reg;
    limits *lim;
    sandbox_backend *sb;
    atomic_ulong exec_seq; /* makes sandbox names unique per command */
    audit_store *audit;    /* SANDBOX_AUDIT, or NULL */
    keystore *keys;        /* SANDBOX_KEYSTORE, or NULL */
} app;

/* The http_handler: routing, the /v1 check order, the route handlers. */
void app_handle(void *cls, http_request *req);

/* Route handlers (files.c, exec_route.c, import_route.c); tenant is already authenticated. */
void handle_write(app *a, http_request *r, size_t tenant, const char *id, json_t *body);
void handle_read(app *a, http_request *r, size_t tenant, const char *id);
void handle_exec(app *a, http_request *r, size_t tenant, const char *id, json_t *body);
void handle_import(app *a, http_request *r, size_t tenant, const char *id, json_t *body); /* import_route.c */

/* keys_route.c: tenant index for an X-API-Key value (static or self-service key), or -1.
 * Also sets the calling thread's app_actor(). */
long app_auth(app *a, const char *key);
/* Audit actor of the request this thread is handling: "static key" or "key <key_id>". */
const char *app_actor(void);
void handle_audit(app *a, http_request *r, size_t tenant);
/* /v1/keys[/{key_id}] and /v1/admin/keys[/{key_id}] by method (key_id NULL without one);
 * the admin handler does its own authentication. */
void handle_keys(app *a, http_request *r, size_t tenant, const char *method, const char *key_id, json_t *body);
void handle_admin_keys(app *a, http_request *r, const char *method, const char *key_id, json_t *body);

/* route_checks.c: the checks every route shares. */
/* Appends the validation errors of a missing / non-object body; true when body is usable. */
bool body_is_object(json_t *errs, json_t *body);
/* Sends the 422 {"detail": errs}; takes errs. */
void send_validation(http_request *r, json_t *errs);
/* Sends the 422 when errs holds any error, else frees errs; true when the 422 was sent. */
bool send_if_invalid(http_request *r, json_t *errs);
/* Reads the optional ?limit= integer into *limit (left as is when absent);
 * false when a 422 was sent. */
bool limit_query(http_request *r, long long *limit);
/* The tenant's session id, touched and referenced (registry_release it);
 * NULL when a 404/403 was sent. */
session *acquire_session(app *a, http_request *r, size_t tenant, const char *id);

#endif
