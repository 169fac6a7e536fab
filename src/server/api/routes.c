/* The route table and the dispatcher: which handler answers a method and path, and the
 * order of the checks before it (body → key → rate limit), as the reference server does.
 * A new route is one row here and its handler (declared in api/handlers.h). */
#include "api/routes.h"

#include "api/handlers.h"
#include "domain/auth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every route takes bodies up to the HTTP layer's cap today; a row may lower it. */
#define BODY_MAX HTTP_MAX_BODY

/* Declaration order matters as in Starlette: the first path match decides the 405's Allow. */
static const api_route ROUTES[] = {
    /* method   pattern                        auth        json   max_body  handler */
    {"GET",    "/healthz",                    API_PUBLIC, false, BODY_MAX, api_health},
    {"POST",   "/v1/sessions",                API_TENANT, true,  BODY_MAX, api_sessions_create},
    {"GET",    "/v1/sessions",                API_TENANT, false, BODY_MAX, api_sessions_list},
    {"DELETE", "/v1/sessions/{}",             API_TENANT, false, BODY_MAX, api_sessions_delete},
    {"POST",   "/v1/sessions/{}/write",       API_TENANT, true,  BODY_MAX, api_files_write},
    {"GET",    "/v1/sessions/{}/read",        API_TENANT, false, BODY_MAX, api_files_read},
    {"POST",   "/v1/sessions/{}/exec",        API_TENANT, true,  BODY_MAX, api_exec},
    {"POST",   "/v1/sessions/{}/import",      API_TENANT, true,  BODY_MAX, api_import},
    {"GET",    "/v1/sessions/{}/egress",      API_TENANT, false, BODY_MAX, api_egress_log},
    {"GET",    "/v1/egress/policy",           API_TENANT, false, BODY_MAX, api_egress_policy},
    {"GET",    "/v1/usage",                   API_TENANT, false, BODY_MAX, api_usage},
    {"GET",    "/v1/audit",                   API_TENANT, false, BODY_MAX, api_audit},
    {"GET",    "/v1/keys",                    API_TENANT, false, BODY_MAX, api_keys_list},
    {"POST",   "/v1/keys",                    API_TENANT, true,  BODY_MAX, api_keys_create},
    {"DELETE", "/v1/keys/{}",                 API_TENANT, false, BODY_MAX, api_keys_revoke},
    {"GET",    "/v1/admin/keys",              API_ADMIN,  false, BODY_MAX, api_admin_keys_list},
    {"POST",   "/v1/admin/keys",              API_ADMIN,  true,  BODY_MAX, api_admin_keys_create},
    {"DELETE", "/v1/admin/keys/{}",           API_ADMIN,  false, BODY_MAX, api_admin_keys_revoke},
};

#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])
#define PARAM_MAX 256

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

/* Starlette serves HEAD with the GET route. */
static const char *route_method(const char *method)
{
    return strcmp(method, "HEAD") == 0 ? "GET" : method;
}

/* The route for method and path (param filled), or NULL; *partial is the first route whose
 * path matched with another method (for the 405), when partial is non-NULL. */
static const api_route *find_route(const char *method, const char *path, char param[PARAM_MAX],
                                   const api_route **partial)
{
    method = route_method(method);
    if (partial)
        *partial = NULL;
    for (size_t i = 0; i < N_ROUTES; i++) {
        if (!path_matches(ROUTES[i].pattern, path, param, PARAM_MAX))
            continue;
        if (strcmp(ROUTES[i].method, method) == 0)
            return &ROUTES[i];
        if (partial && !*partial)
            *partial = &ROUTES[i];
    }
    return NULL;
}

size_t api_body_limit(void *cls, const char *method, const char *path)
{
    (void)cls;
    char param[PARAM_MAX];
    const api_route *rt = method && path ? find_route(method, path, param, NULL) : NULL;
    return rt ? rt->max_body : HTTP_MAX_BODY;
}

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

/* 401 unless the caller's key is a tenant's, then 429 past its request rate. */
static bool authenticate_tenant(app *a, http_request *r, api_call *c, auth_caller *who)
{
    if (!auth_tenant(a->cfg, a->tenants, a->keys, http_header(r, "X-API-Key"), who)) {
        http_send_detail(r, 401, "Invalid or missing X-API-Key header");
        return false;
    }
    long retry = 0;
    if (!limits_take_token(a->lim, who->tenant, &c->requests_available, &retry)) {
        char msg[160], hdr[32];
        snprintf(msg, sizeof msg, "Rate limit of %d requests per minute exceeded; retry in %ld s.",
                 tenants_get(a->tenants, who->tenant)->requests_per_minute, retry);
        snprintf(hdr, sizeof hdr, "%ld", retry);
        http_send_json_header(r, 429, json_pack("{s:s}", "detail", msg), "retry-after", hdr);
        return false;
    }
    c->tenant = who->tenant;
    c->actor = who->actor;
    return true;
}

/* 404 while the admin API is off, 401 for any key but the admin key. */
static bool authenticate_admin(app *a, http_request *r)
{
    switch (auth_admin(a->cfg, a->keys, http_header(r, "X-API-Key"))) {
    case AUTH_ADMIN_OK:
        return true;
    case AUTH_ADMIN_OFF:
        http_send_detail(r, 404, "The admin API is not enabled on this server.");
        return false;
    default:
        http_send_detail(r, 401, "Invalid or missing admin key");
        return false;
    }
}

static void run(app *a, http_request *r, const api_route *rt, const char *param)
{
    api_call c = {.param = strstr(rt->pattern, "{}") ? param : NULL};
    if (rt->auth == API_PUBLIC) {
        rt->handler(a, r, &c);
        return;
    }
    if (rt->json_body && !api_parse_body(r, &c.body))
        return;
    auth_caller who;
    bool allowed = rt->auth == API_ADMIN ? authenticate_admin(a, r) : authenticate_tenant(a, r, &c, &who);
    if (allowed)
        rt->handler(a, r, &c);
    json_decref(c.body);
}

void api_handle(void *cls, http_request *r)
{
    app *a = cls;
    const char *path = http_path(r);
    const api_route *partial = NULL;
    char param[PARAM_MAX];
    const api_route *rt = find_route(http_method(r), path, param, &partial);
    if (rt) {
        run(a, r, rt, param);
        return;
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
