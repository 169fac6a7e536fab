#include "app.h"
#include "egress/policy.h"
#include "api/validate.h"
#include "text/pyjson.h"
#include "text/pyrepr.h"
#include "text/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum {
    R_HEALTHZ, R_CREATE, R_LIST, R_DELETE, R_WRITE, R_READ, R_EXEC, R_IMPORT, R_EGRESS_LOG,
    R_POLICY, R_USAGE, R_AUDIT, R_KEYS_LIST, R_KEYS_CREATE, R_KEYS_DELETE, R_ADMIN_LIST,
    R_ADMIN_CREATE, R_ADMIN_DELETE,
} route_id;

typedef struct {
    route_id id;
    const char *method;
    const char *pattern; /* "{}" is one path segment */
    bool body;           /* takes a JSON body */
} route;

/* Declaration order matters as in Starlette: the first path match decides the 405's Allow. */
static const route ROUTES[] = {
    {R_HEALTHZ, "GET", "/healthz", false},
    {R_CREATE, "POST", "/v1/sessions", true},
    {R_LIST, "GET", "/v1/sessions", false},
    {R_DELETE, "DELETE", "/v1/sessions/{}", false},
    {R_WRITE, "POST", "/v1/sessions/{}/write", true},
    {R_READ, "GET", "/v1/sessions/{}/read", false},
    {R_EXEC, "POST", "/v1/sessions/{}/exec", true},
    {R_IMPORT, "POST", "/v1/sessions/{}/import", true},
    {R_EGRESS_LOG, "GET", "/v1/sessions/{}/egress", false},
    {R_POLICY, "GET", "/v1/egress/policy", false},
    {R_USAGE, "GET", "/v1/usage", false},
    {R_AUDIT, "GET", "/v1/audit", false},
    {R_KEYS_LIST, "GET", "/v1/keys", false},
    {R_KEYS_CREATE, "POST", "/v1/keys", true},
    {R_KEYS_DELETE, "DELETE", "/v1/keys/{}", false},
    {R_ADMIN_LIST, "GET", "/v1/admin/keys", false},
    {R_ADMIN_CREATE, "POST", "/v1/admin/keys", true},
    {R_ADMIN_DELETE, "DELETE", "/v1/admin/keys/{}", false},
};

#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])

static const char *const TEMPLATES[] = {"sandbox-base:latest", "python:3.11-slim"};

/* Matches path against pattern; the "{}" segment is copied to param (≤ 255 bytes). */
static bool path_matches(const char *pattern, const char *path, char *param, size_t plen)
{
    while (*pattern && *path) {
        if (pattern[0] == '{' && pattern[1] == '}') {
            const char *end = strchrnul(path, '/');
            size_t n = (size_t)(end - path);
            if (n == 0)
                return false;
            if (param) {
                size_t c = n < plen - 1 ? n : plen - 1;
                memcpy(param, path, c);
                param[c] = '\0';
            }
            path = end;
            pattern += 2;
            continue;
        }
        if (*pattern != *path)
            return false;
        pattern++;
        path++;
    }
    return *pattern == '\0' && *path == '\0';
}

/* FastAPI parses a body as JSON when there is no content-type or it is application/json
 * or application/...+json; otherwise the raw text is validated (and fails). */
static bool json_content_type(const char *ct)
{
    if (!ct)
        return true;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t n = strcspn(ct, ";");
    while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
        n--;
    if (n < 12 || strncasecmp(ct, "application/", 12) != 0)
        return false;
    const char *sub = ct + 12;
    size_t sl = n - 12;
    return (sl == 4 && strncasecmp(sub, "json", 4) == 0) ||
           (sl >= 5 && strncasecmp(sub + sl - 5, "+json", 5) == 0);
}

/* Reads the request body the way Starlette/FastAPI does. Returns false when a response
 * (400/422/500) was already sent. *out stays NULL for an absent body or JSON null. */
static bool parse_body(http_request *r, json_t **out)
{
    size_t len;
    const char *b = http_body(r, &len);
    *out = NULL;
    if (len == 0)
        return true;
    if (!json_content_type(http_header(r, "Content-Type"))) {
        size_t tl;
        char *text = utf8_replace(b, len, &tl);
        *out = text ? json_stringn_nocheck(text, tl) : NULL;
        free(text);
        return true;
    }
    if (len >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0) { /* json.loads(bytes) drops a BOM */
        b += 3;
        len -= 3;
    }
    if (!utf8_valid(b, len)) {
        http_send_detail(r, 400, "There was an error parsing the body");
        return false;
    }
    const char *msg;
    size_t pos;
    int rc = pyjson_check(b, len, &msg, &pos);
    if (rc == 1) {
        json_t *errs = json_array();
        json_array_append_new(errs, verr_json_invalid(pos, msg));
        send_validation(r, errs);
        return false;
    }
    if (rc == 2) {
        http_send_detail(r, 400, "There was an error parsing the body");
        return false;
    }
    json_error_t je;
    json_t *v = json_loadb(b, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!v) {
        /* valid for Python but not for jansson (NaN, huge integers, lone surrogates) */
        http_send_500(r);
        return false;
    }
    if (json_is_null(v))
        json_decref(v);
    else
        *out = v;
    return true;
}

/* ---- small handlers ---------------------------------------------------------------- */

/* The body is the contract's, exactly; the isolation backend ("gvisor", or the weaker
 * "bubblewrap" fallback) is reported in a header so clients and monitors can tell. */
static void handle_healthz(app *a, http_request *r)
{
    http_send_json_header(r, 200, json_pack("{s:s,s:I}", "status", "healthy", "active_sessions",
                                            (json_int_t)registry_count(a->reg)),
                          "x-airlock-isolation", sandbox_backend_name(a->sb));
}

static bool validate_egress(json_t *errs, json_t *body, json_t **egress)
{
    json_t *v = json_object_get(body, "egress");
    *egress = v;
    if (!v)
        return true;
    if (!json_is_array(v)) {
        json_array_append_new(errs, verr("list_type", loc_of("body", "egress"), "Input should be a valid list", v, NULL));
        return false;
    }
    bool ok = true;
    size_t i;
    json_t *item;
    json_array_foreach(v, i, item) {
        if (!json_is_string(item)) {
            json_t *loc = loc_of("body", "egress");
            json_array_append_new(loc, json_integer((json_int_t)i));
            json_array_append_new(errs, verr("string_type", loc, "Input should be a valid string", item, NULL));
            ok = false;
        }
    }
    if (ok && json_array_size(v) > 20) {
        char msg[96];
        snprintf(msg, sizeof msg, "List should have at most 20 items after validation, not %zu", json_array_size(v));
        json_array_append_new(errs, verr("too_long", loc_of("body", "egress"), msg, v,
                                         json_pack("{s:s,s:i,s:I}", "field_type", "List", "max_length", 20,
                                                   "actual_length", (json_int_t)json_array_size(v))));
        ok = false;
    }
    return ok;
}

static bool validate_metadata(json_t *errs, json_t *body)
{
    json_t *v = json_object_get(body, "metadata");
    if (!v || json_is_null(v))
        return true;
    if (!json_is_object(v)) {
        json_array_append_new(errs, verr("dict_type", loc_of("body", "metadata"), "Input should be a valid dictionary", v, NULL));
        return false;
    }
    bool ok = true;
    const char *k;
    json_t *item;
    json_object_foreach(v, k, item) {
        if (!json_is_string(item)) {
            json_t *loc = loc_of("body", "metadata");
            json_array_append_new(loc, json_string(k));
            json_array_append_new(errs, verr("string_type", loc, "Input should be a valid string", item, NULL));
            ok = false;
        }
    }
    return ok;
}

static void handle_create(app *a, http_request *r, size_t tenant, json_t *body)
{
    const tenant_cfg *t = &a->cfg->tenants[tenant];
    json_t *errs = json_array(), *egress_in = NULL;
    const char *tpl = NULL;
    size_t tpl_len = 0;
    if (body_is_object(errs, body)) {
        v_string(errs, body, "template", false, 0, &tpl, &tpl_len);
        validate_metadata(errs, body);
        validate_egress(errs, body, &egress_in);
    }
    if (send_if_invalid(r, errs))
        return;
    if (!tpl)
        tpl = TEMPLATES[0], tpl_len = strlen(TEMPLATES[0]);
    bool allowed = false;
    for (size_t i = 0; i < sizeof TEMPLATES / sizeof TEMPLATES[0]; i++)
        allowed |= tpl_len == strlen(TEMPLATES[i]) && memcmp(tpl, TEMPLATES[i], tpl_len) == 0;
    if (!allowed) {
        char *rep = NULL, *msg = NULL;
        json_t *list = json_pack("[s,s]", TEMPLATES[0], TEMPLATES[1]);
        char *allowed_repr = pyrepr_list(list);
        json_decref(list);
        /* the template is quoted raw inside '...', as the reference's f-string does */
        rep = strndup(tpl, tpl_len);
        if (rep && allowed_repr && asprintf(&msg, "Template '%s' not permitted. Allowed: %s", rep, allowed_repr) >= 0) {
            http_send_detail(r, 400, msg);
            free(msg);
        } else {
            http_send_500(r);
        }
        free(rep);
        free(allowed_repr);
        return;
    }
    json_t *empty = json_array();
    json_t *expanded = egress_expand(egress_in ? egress_in : empty);
    json_decref(empty);
    json_t *refused = egress_refused(expanded, t->egress_allowed);
    if (json_array_size(refused)) {
        char *a1 = pyrepr_list(refused), *a2 = pyrepr_list(t->egress_allowed), *msg = NULL;
        if (a1 && a2 && asprintf(&msg, "Egress not permitted for this tenant: %s. Allowed: %s", a1, a2) >= 0) {
            http_send_detail(r, 403, msg);
            free(msg);
        } else {
            http_send_500(r);
        }
        free(a1);
        free(a2);
        json_decref(refused);
        json_decref(expanded);
        return;
    }
    json_decref(refused);
    session *s = NULL;
    int open_now = 0;
    int rc = registry_create(a->reg, tenant, t->max_sessions, expanded, &s, &open_now);
    json_decref(expanded);
    if (rc == REG_LIMIT) {
        char msg[160];
        snprintf(msg, sizeof msg, "Session limit reached: %d of %d sessions are open. Delete one first.",
                 open_now, t->max_sessions);
        http_send_detail(r, 429, msg);
        return;
    }
    if (rc != REG_OK) {
        http_send_500(r);
        return;
    }
    http_send_json(r, 201, json_pack("{s:s,s:s,s:O,s:I,s:f,s:s}", "session_id", s->id, "tenant_id", t->name,
                                     "egress", s->egress, "disk_quota_mb", (json_int_t)(a->cfg->quota_bytes >> 20),
                                     "created_at", s->created_at, "status", "ready"));
    registry_release(a->reg, s);
}

static void handle_delete(app *a, http_request *r, size_t tenant, const char *id)
{
    int rc = registry_delete(a->reg, id, tenant);
    if (rc == 404)
        http_send_detail(r, 404, "Session not found");
    else if (rc == 403)
        http_send_detail(r, 403, "Forbidden");
    else
        http_send_json(r, 200, json_pack("{s:s,s:s}", "status", "terminated", "session_id", id));
}

static void handle_usage(app *a, http_request *r, size_t tenant, long available)
{
    const tenant_cfg *t = &a->cfg->tenants[tenant];
    http_send_json(r, 200, json_pack("{s:s,s:{s:i,s:i,s:i},s:I,s:i,s:I}", "tenant_id", t->name, "limits",
                                     "max_sessions", t->max_sessions, "requests_per_minute", t->requests_per_minute,
                                     "max_concurrent_exec", t->max_concurrent_exec,
                                     "sessions_open", (json_int_t)registry_count_tenant(a->reg, tenant),
                                     "commands_running", limits_running(a->lim, tenant),
                                     "requests_available", (json_int_t)available));
}

static void handle_egress_log(app *a, http_request *r, size_t tenant, const char *id)
{
    long long limit = 0; /* validated only: there are no events to page through */
    if (!limit_query(r, &limit))
        return;
    session *s = acquire_session(a, r, tenant, id);
    if (!s)
        return;
    /* airlockd has no egress proxy yet, so no session has events */
    http_send_json(r, 200, json_pack("{s:s,s:[]}", "session_id", s->id, "events"));
    registry_release(a->reg, s);
}

/* ---- dispatch ---------------------------------------------------------------------- */

static void redirect_without_slash(http_request *r, const char *path)
{
    const char *host = http_header(r, "Host"), *q = http_raw_query(r);
    char *loc = NULL;
    int n = asprintf(&loc, "http://%s%.*s%s%s", host ? host : "127.0.0.1", (int)(strlen(path) - 1), path,
                     q ? "?" : "", q ? q : "");
    if (n < 0) {
        http_send_500(r);
        return;
    }
    http_send_redirect(r, loc);
    free(loc);
}

static void run_v1(app *a, http_request *r, const route *rt, const char *param)
{
    json_t *body = NULL;
    if (rt->body && !parse_body(r, &body))
        return;
    if (rt->id == R_ADMIN_LIST || rt->id == R_ADMIN_CREATE || rt->id == R_ADMIN_DELETE) {
        handle_admin_keys(a, r, rt->method, rt->id == R_ADMIN_DELETE ? param : NULL, body);
        json_decref(body);
        return;
    }
    long tenant = app_auth(a, http_header(r, "X-API-Key"));
    if (tenant < 0) {
        http_send_detail(r, 401, "Invalid or missing X-API-Key header");
        json_decref(body);
        return;
    }
    long available = 0, retry = 0;
    if (!limits_take_token(a->lim, (size_t)tenant, &available, &retry)) {
        char msg[160], hdr[32];
        snprintf(msg, sizeof msg, "Rate limit of %d requests per minute exceeded; retry in %ld s.",
                 a->cfg->tenants[tenant].requests_per_minute, retry);
        snprintf(hdr, sizeof hdr, "%ld", retry);
        http_send_json_header(r, 429, json_pack("{s:s}", "detail", msg), "retry-after", hdr);
        json_decref(body);
        return;
    }
    size_t t = (size_t)tenant;
    switch (rt->id) {
    case R_CREATE:
        handle_create(a, r, t, body);
        break;
    case R_LIST:
        http_send_json(r, 200, registry_list(a->reg, t, a->cfg->tenants[t].name, a->cfg->quota_bytes >> 20));
        break;
    case R_DELETE:
        handle_delete(a, r, t, param);
        break;
    case R_WRITE:
        handle_write(a, r, t, param, body);
        break;
    case R_READ:
        handle_read(a, r, t, param);
        break;
    case R_EXEC:
        handle_exec(a, r, t, param, body);
        break;
    case R_IMPORT:
        handle_import(a, r, t, param, body);
        break;
    case R_EGRESS_LOG:
        handle_egress_log(a, r, t, param);
        break;
    case R_POLICY:
        http_send_json(r, 200, json_pack("{s:s,s:O}", "tenant_id", a->cfg->tenants[t].name, "allowed",
                                         a->cfg->tenants[t].egress_allowed));
        break;
    case R_USAGE:
        handle_usage(a, r, t, available);
        break;
    case R_AUDIT:
        handle_audit(a, r, t);
        break;
    case R_KEYS_LIST:
    case R_KEYS_CREATE:
    case R_KEYS_DELETE:
        handle_keys(a, r, t, rt->method, rt->id == R_KEYS_DELETE ? param : NULL, body);
        break;
    default:
        http_send_500(r);
        break;
    }
    json_decref(body);
}

void app_handle(void *cls, http_request *r)
{
    app *a = cls;
    const char *path = http_path(r), *method = http_method(r);
    if (strcmp(method, "HEAD") == 0)
        method = "GET"; /* Starlette serves HEAD with the GET route */
    const route *partial = NULL;
    char param[256];
    for (size_t i = 0; i < N_ROUTES; i++) {
        if (!path_matches(ROUTES[i].pattern, path, param, sizeof param))
            continue;
        if (strcmp(ROUTES[i].method, method) == 0) {
            if (ROUTES[i].id == R_HEALTHZ)
                handle_healthz(a, r);
            else
                run_v1(a, r, &ROUTES[i], param);
            return;
        }
        if (!partial)
            partial = &ROUTES[i];
    }
    if (partial) {
        http_send_405(r, strcmp(partial->method, "GET") == 0 ? "GET, HEAD" : partial->method);
        return;
    }
    size_t pl = strlen(path);
    if (pl > 1 && path[pl - 1] == '/') {
        char *alt = strndup(path, pl - 1);
        bool any = false;
        for (size_t i = 0; alt && i < N_ROUTES && !any; i++)
            any = path_matches(ROUTES[i].pattern, alt, NULL, 0);
        free(alt);
        if (any) {
            redirect_without_slash(r, path);
            return;
        }
    }
    http_send_detail(r, 404, "Not Found");
}
