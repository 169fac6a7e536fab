/* What every route handler gets and shares: the call (caller, path parameter, parsed body),
 * the route table's row type, and the checks all routes make (422 replies, ?limit=, the
 * session lookup with its 404/403). */
#ifndef AIRLOCKD_API_H
#define AIRLOCKD_API_H

#include "api/validate.h"
#include "app.h"
#include "http/http.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* A file-write body of the usual shape ({"path": str, "content": str, ...}) read without a
 * JSON tree (api/body.c): the path decoded, the content left as its JSON literal in the
 * request's body, decoded into the file as it is written. */
typedef struct {
    bool set;                /* the body had this shape (else the call's body is the tree) */
    char *path;              /* malloc'd, decoded (may hold NUL) */
    size_t path_len;
    const char *path_raw;    /* the literals, inside their quotes, in the request's body */
    size_t path_raw_len;
    const char *content;
    size_t content_raw_len;
    size_t content_bytes;    /* decoded UTF-8 size */
    size_t content_chars;    /* Python's len() */
    bool large;              /* holds the one-large-parse lock (released by api_write_body_free) */
} api_write_body;

typedef struct api_call {
    size_t tenant;           /* API_TENANT routes: the caller's tenant index */
    const char *actor;       /* and its audit actor: "static key" | "key <key_id>" */
    long requests_available; /* request tokens the tenant has left after this one */
    const char *param;       /* the path's "{}" segment (cut at 255 bytes), or NULL */
    json_t *body;            /* json_body routes: the body (NULL when absent or null) */
    const api_write_body *write; /* POST .../write of the usual shape: its fields, body NULL */
} api_call;

/* Answers the request with one http_send_*; the call is the dispatcher's (body freed after). */
typedef void (*api_handler)(app *a, http_request *r, const api_call *c);

typedef enum {
    API_PUBLIC, /* no key (GET /healthz): no body parsed, no rate limit */
    API_TENANT, /* a tenant's X-API-Key (401), then its request rate (429) */
    API_ADMIN,  /* SANDBOX_ADMIN_KEY: 404 while the admin API is off, then 401 */
} api_auth;

/* One row of the route table (api/routes.c). */
typedef struct api_route {
    const char *method;  /* a GET route also answers HEAD */
    const char *pattern; /* the path; "{}" matches one non-empty segment, given as c->param */
    api_auth auth;       /* checked from the headers, before any body byte is read */
    bool json_body;      /* parse the body as FastAPI does (400/422) before answering 401 */
    size_t max_body;     /* bytes (docs/server.md "Limits"); a longer body is answered 413 unread */
    http_run run;        /* which worker pool runs the handler */
    api_handler handler;
} api_route;

/* ---- checks.c: what every route shares ------------------------------------------- */

/* Appends the validation errors of a missing / non-object body; true when body is usable. */
bool body_is_object(json_t *errs, json_t *body);
/* Ours (api/templates.c): a template name: 1-64 of [a-z0-9._-], starting with a letter or digit. */
bool api_template_name_valid(const char *name, size_t len);
/* Sends the 422 {"detail": errs}; takes errs. */
void send_validation(http_request *r, json_t *errs);
/* Sends the 422 when errs holds any error, else frees errs; true when the 422 was sent. */
bool send_if_invalid(http_request *r, json_t *errs);
/* Reads the optional ?limit= integer into *limit (left as is when absent);
 * false when a 422 was sent. */
bool limit_query(http_request *r, long long *limit);
/* The caller's session c->param, touched and referenced (registry_release it);
 * NULL when a 404/403 was sent. */
session *acquire_session(app *a, http_request *r, const api_call *c);
/* acquire_session without the touch and the resume (pause and resume decide themselves). */
session *acquire_session_as_is(app *a, http_request *r, const api_call *c);
/* 503 + Retry-After: 1 for a session a drain is moving to another node. */
void send_moving(http_request *r, const char *id);
/* The 429 of a tenant at its concurrent-command limit (exec, import): the reference's text
 * "Too many commands running at once: N allowed. Wait for one to finish." and, ours, the same
 * N in the header X-Airlock-Exec-Limit, so clients need not read it from the sentence. */
void api_send_exec_limit(http_request *r, int allowed);
/* The answer when slots_acquire gave no slot: 503 "All N command slots of this server are in use;
 * try again shortly." when busy, 500 when cancelled (the client is gone). */
void api_send_no_slot(http_request *r, int max_slots, slot_result sr);
/* acquire_session for a route that records an audit entry: fails closed (507 "<what> could
 * not be saved: ...") while the audit log cannot be written, before anything runs. */
session *acquire_audited_session(app *a, http_request *r, const api_call *c, const char *what);
/* audit_record, and in a fleet the row shipped to the database at once (0 or -1 as
 * audit_record: a row not shipped yet waits in the node's outbox). */
int api_audit_record(app *a, const audit_entry *e);
/* In a fleet: the ends of commands that made no audit record reach the database before the
 * answer (so the next request on any node finds their slots free); a no-op otherwise. */
void api_commands_ended(app *a);
/* Sends {"detail": fmt with arg} with arg made valid UTF-8 (fmt has one %s). */
void send_detail_with(http_request *r, unsigned status, const char *fmt, const char *arg);
/* Fail closed on storage: a change that could not be made durable is refused, never
 * acknowledged. Sends "<what> could not be saved: the server's storage is full or failing.
 * Nothing was changed; try again later." (503 where the SDKs may retry: nothing was done;
 * else 507). */
void send_not_saved(http_request *r, unsigned status, const char *what);

/* ---- body.c ------------------------------------------------------------------------ */

/* Reads the request body the way Starlette/FastAPI does. false when a response
 * (400/422/500) was already sent. *out stays NULL for an absent body or JSON null. */
bool api_parse_body(http_request *r, json_t **out);

/* The same for a file-write body: the usual shape fills *w (w->set) without a tree; any
 * other gets the tree in *out (large ones one at a time). false when an answer was sent.
 * Release both with api_write_body_free after the handler. */
bool api_parse_write_body(http_request *r, json_t **out, api_write_body *w);
void api_write_body_free(api_write_body *w, json_t *tree);

/* ---- keys.c: key creation, shared with admin.c ------------------------------------- */

/* Validates {"name": str ≤ 100} (+ "tenant" for admins); false when a 422 was sent. */
bool key_body(http_request *r, json_t *body, bool admin, const char **tenant, size_t *tenant_len,
              const char **name, size_t *name_len);
/* Issues a key for tenant (checked against the tenant-name rules) and answers 201/400/409. */
void create_key(app *a, http_request *r, const char *tenant, size_t tenant_len, const char *name,
                size_t name_len);

#endif
