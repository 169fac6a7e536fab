/* The route table, the admission and the dispatcher: which handler answers a method and
 * path, what its body may weigh and which pool runs it; the key checked from the headers
 * before any body byte; then the reference's order (body → key → rate limit → handler).
 * A new route is one row here and its handler (declared in api/handlers.h). */
#include "api/routes.h"

#include "api/files.h"
#include "api/handlers.h"
#include "domain/auth.h"
#include "obs/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Body caps (docs/server.md "Limits"): routes without a body read and ignore up to NO_BODY bytes;
 * JSON of a few fields gets FIELDS; a file write carries the file. */
#define NO_BODY (16u * 1024u)
#define FIELDS (1024u * 1024u)
#define FILE_BODY HTTP_MAX_BODY
#define QUICK HTTP_RUN_QUICK
#define LONG HTTP_RUN_LONG /* commands, imports, workspace removal: the pool that may wait */

/* Declaration order matters as in Starlette: the first path match decides the 405's Allow. */
static const api_route ROUTES[] = {
    /* method   pattern                        auth        json   max_body   run    handler */
    {"GET",    "/healthz",                    API_PUBLIC, false, NO_BODY,   HTTP_RUN_INLINE, api_health},
    /* ours: Prometheus, the admin key also as Authorization: Bearer (Prometheus' own way) */
    {"GET",    "/metrics",                    API_ADMIN,  false, NO_BODY,   QUICK, api_metrics},
    {"POST",   "/v1/sessions",                API_TENANT, true,  FIELDS,    QUICK, api_sessions_create},
    {"GET",    "/v1/sessions",                API_TENANT, false, NO_BODY,   QUICK, api_sessions_list},
    {"DELETE", "/v1/sessions/{}",             API_TENANT, false, NO_BODY,   LONG,  api_sessions_delete},
    {"GET",    "/v1/sessions/{}",             API_TENANT, false, NO_BODY,   QUICK, api_sessions_get},
    {"POST",   "/v1/sessions/{}/write",       API_TENANT, true,  FILE_BODY, QUICK, api_files_write},
    {"GET",    "/v1/sessions/{}/read",        API_TENANT, false, NO_BODY,   QUICK, api_files_read},
    {"GET",    "/v1/sessions/{}/list",        API_TENANT, false, NO_BODY,   QUICK, api_files_list},
    {"POST",   "/v1/sessions/{}/exec",        API_TENANT, true,  FIELDS,    LONG,  api_exec},
    {"POST",   "/v1/sessions/{}/import",      API_TENANT, true,  FIELDS,    LONG,  api_import},
    {"GET",    "/v1/sessions/{}/egress",      API_TENANT, false, NO_BODY,   QUICK, api_egress_log},
    {"POST",   "/v1/sessions/{}/pause",       API_TENANT, false, NO_BODY,   LONG,  api_sessions_pause},
    {"POST",   "/v1/sessions/{}/resume",      API_TENANT, false, NO_BODY,   LONG,  api_sessions_resume},
    {"GET",    "/v1/sessions/{}/metrics",     API_TENANT, false, NO_BODY,   QUICK, api_session_metrics},
    /* ours: kernels (api/kernels.c) */
    {"POST",   "/v1/sessions/{}/kernels",     API_TENANT, true,  FIELDS,    LONG,  api_kernels_create},
    {"GET",    "/v1/sessions/{}/kernels",     API_TENANT, false, NO_BODY,   QUICK, api_kernels_list},
    {"DELETE", "/v1/sessions/{}/kernels/{}",  API_TENANT, false, NO_BODY,   LONG,  api_kernels_delete},
    {"POST",   "/v1/sessions/{}/kernels/{}/execute",   API_TENANT, true, FIELDS, LONG, api_kernels_execute},
    {"POST",   "/v1/sessions/{}/kernels/{}/interrupt", API_TENANT, false, NO_BODY, QUICK, api_kernels_interrupt},
    /* ours: snapshots (the copy of a workspace image takes up to seconds: the pool that may wait) */
    {"POST",   "/v1/sessions/{}/snapshots",   API_TENANT, true,  FIELDS,    LONG,  api_snapshots_create},
    {"GET",    "/v1/snapshots",               API_TENANT, false, NO_BODY,   QUICK, api_snapshots_list},
    {"GET",    "/v1/snapshots/{}",            API_TENANT, false, NO_BODY,   QUICK, api_snapshots_get},
    {"DELETE", "/v1/snapshots/{}",            API_TENANT, false, NO_BODY,   LONG,  api_snapshots_delete},
    {"GET",    "/v1/egress/policy",           API_TENANT, false, NO_BODY,   QUICK, api_egress_policy},
    {"GET",    "/v1/usage",                   API_TENANT, false, NO_BODY,   QUICK, api_usage},
    {"GET",    "/v1/audit",                   API_TENANT, false, NO_BODY,   QUICK, api_audit},
    {"GET",    "/v1/keys",                    API_TENANT, false, NO_BODY,   QUICK, api_keys_list},
    {"POST",   "/v1/keys",                    API_TENANT, true,  FIELDS,    QUICK, api_keys_create},
    {"DELETE", "/v1/keys/{}",                 API_TENANT, false, NO_BODY,   QUICK, api_keys_revoke},
    {"GET",    "/v1/admin/keys",              API_ADMIN,  false, NO_BODY,   QUICK, api_admin_keys_list},
    {"POST",   "/v1/admin/keys",              API_ADMIN,  true,  FIELDS,    QUICK, api_admin_keys_create},
    {"DELETE", "/v1/admin/keys/{}",           API_ADMIN,  false, NO_BODY,   QUICK, api_admin_keys_revoke},
    {"POST",   "/v1/templates",               API_TENANT, true,  FIELDS,    QUICK, api_templates_create},
    {"GET",    "/v1/templates",               API_TENANT, false, NO_BODY,   QUICK, api_templates_list},
    {"GET",    "/v1/templates/{}",            API_TENANT, false, NO_BODY,   QUICK, api_templates_get},
    {"DELETE", "/v1/templates/{}",            API_TENANT, false, NO_BODY,   LONG,  api_templates_delete},
    {"GET",    "/v1/templates/{}/log",        API_TENANT, false, NO_BODY,   LONG,  api_templates_log},
    {"POST",   "/v1/admin/templates",         API_ADMIN,  true,  FIELDS,    QUICK, api_admin_templates_create},
    {"GET",    "/v1/admin/templates",         API_ADMIN,  false, NO_BODY,   QUICK, api_admin_templates_list},
    {"DELETE", "/v1/admin/templates/{}",      API_ADMIN,  false, NO_BODY,   LONG,  api_admin_templates_delete},
    {"GET",    "/v1/admin/nodes",             API_ADMIN,  false, NO_BODY,   QUICK, api_admin_nodes},
    {"GET",    "/v1/admin/sessions",          API_ADMIN,  false, NO_BODY,   QUICK, api_admin_sessions},
    {"POST",   "/v1/admin/nodes/{}/drain",    API_ADMIN,  false, NO_BODY,   QUICK, api_admin_node_drain},
    {"GET",    "/v1/admin/audit",             API_ADMIN,  false, NO_BODY,   QUICK, api_admin_audit},
    {"GET",    "/v1/admin/egress",            API_ADMIN,  false, NO_BODY,   QUICK, api_admin_egress},
    {"GET",    "/v1/admin/status",            API_ADMIN,  false, NO_BODY,   QUICK, api_admin_status},
    /* the status page (its files embedded in airlockd; the key is asked for by the page) */
    {"GET",    "/admin",                      API_PUBLIC, false, NO_BODY,   QUICK, api_admin_page},
    {"GET",    "/admin/",                     API_PUBLIC, false, NO_BODY,   QUICK, api_admin_page},
    {"GET",    "/admin/{}",                   API_PUBLIC, false, NO_BODY,   QUICK, api_admin_page},
    {"GET",    "/v1/fleet/accepting",         API_PUBLIC, false, NO_BODY,   HTTP_RUN_INLINE, api_fleet_accepting},
};

/* Node to node (a drain's moves), served only on a fleet node's own internal listener
 * (SANDBOX_FLEET_INTERNAL_LISTEN), never on the address the router forwards to: no spelling
 * of a path reaches them from a client. The fleet's secret is checked by the handler. */
static const api_route INTERNAL_ROUTES[] = {
    {"POST",   "/v1/fleet/internal/sessions/{}",         API_PUBLIC, false, NO_BODY, LONG, api_fleet_move_in},
    {"GET",    "/v1/fleet/internal/sessions/{}/archive", API_PUBLIC, false, NO_BODY, LONG, api_fleet_move_archive},
};

#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])
#define N_INTERNAL_ROUTES (sizeof INTERNAL_ROUTES / sizeof INTERNAL_ROUTES[0])
#define PARAM_MAX 256

/* Matches path against pattern; the "{}" segment is copied to param (≤ 255 bytes); a second
 * one (the kernel routes: /v1/sessions/{}/kernels/{}) follows it after a '/'. */
static bool path_matches(const char *pattern, const char *path, char *param, size_t plen)
{
    size_t used = 0;
    while (*pattern && *path) {
        if (pattern[0] == '{' && pattern[1] == '}') {
            const char *end = strchrnul(path, '/');
            size_t n = (size_t)(end - path);
            if (n == 0)
                return false;
            if (param && used + 1 < plen) {
                if (used > 0)
                    param[used++] = '/';
                size_t c = n < plen - 1 - used ? n : plen - 1 - used;
                memcpy(param + used, path, c);
                used += c;
                param[used] = '\0';
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
static const api_route *find_route_in(const api_route *routes, size_t n, const char *method, const char *path,
                                      char param[PARAM_MAX], const api_route **partial)
{
    method = route_method(method);
    if (partial)
        *partial = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!path_matches(routes[i].pattern, path, param, PARAM_MAX))
            continue;
        if (strcmp(routes[i].method, method) == 0)
            return &routes[i];
        if (partial && !*partial)
            *partial = &routes[i];
    }
    return NULL;
}

static const api_route *find_route(const char *method, const char *path, char param[PARAM_MAX],
                                   const api_route **partial)
{
    return find_route_in(ROUTES, N_ROUTES, method, path, param, partial);
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

/* Answers a request that matches no route (405, 307 or 404). */
static void send_unrouted(http_request *r, const char *path, const api_route *partial)
{
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

/* What the admission learned from the headers, for the dispatcher (in the request's
 * application record). */
typedef struct {
    unsigned route;          /* its row + 1 in ROUTES; 0: none matched (for the metrics) */
    bool authed;             /* the key is the tenant's / the admin's */
    auth_admin_result admin; /* API_ADMIN routes */
    auth_caller who;         /* API_TENANT routes, when authed */
    void *upload;            /* a raw write admitted from its headers (files_raw.c) */
} admission;

_Static_assert(sizeof(admission) <= HTTP_APP_DATA, "the admission record must fit the request's room");

/* The credential of "Authorization: Bearer <key>", or NULL. */
static const char *bearer_token(http_request *r)
{
    const char *v = http_header(r, "Authorization");
    if (!v || strncasecmp(v, "Bearer ", 7) != 0)
        return NULL;
    v += 7;
    while (*v == ' ')
        v++;
    return *v ? v : NULL;
}

/* The answer a request whose key failed gets; a valid key on the wrong kind of route says so
 * after the contract's text (the admin key on a tenant's route, a tenant's key on an admin
 * route), with the contract's 401. */
static void send_unauthorized(app *a, http_request *r, const api_route *rt, const admission *ad)
{
    const char *key = http_header(r, "X-API-Key");
    if (!key && rt->handler == api_metrics)
        key = bearer_token(r);
    auth_caller who;
    if (rt->auth == API_TENANT && key && auth_admin(a->cfg, a->keys, key) == AUTH_ADMIN_OK)
        http_send_detail(r, 401, "Invalid or missing X-API-Key header: this is the admin key, which opens only "
                                 "the /v1/admin/ routes (GET /v1/admin/sessions lists every tenant's sessions).");
    else if (rt->auth == API_TENANT)
        http_send_detail(r, 401, "Invalid or missing X-API-Key header");
    else if (ad->admin == AUTH_ADMIN_OFF)
        http_send_detail(r, 404, "The admin API is not enabled on this server.");
    else if (key && auth_tenant(a->cfg, a->tenants, a->keys, key, &who))
        http_send_detail(r, 401, "Invalid or missing admin key: this is a tenant's key; the admin routes "
                                 "(/v1/admin/..., /metrics) need the admin key (SANDBOX_ADMIN_KEY).");
    else
        http_send_detail(r, 401, "Invalid or missing admin key");
}

static bool take_request_token(app *a, http_request *r, api_call *c, const auth_caller *who, bool exempt);

/* A raw write (our extension) streams its body to disk: everything its handler needs is
 * checked from the headers, the rate limit included, before the first body byte. */
static void admit_raw_write(app *a, http_request *r, http_admission *adm, admission *ad, const char *param)
{
    api_call c = {.param = param};
    if (take_request_token(a, r, &c, &ad->who, false))
        ad->upload = api_files_raw_admit(a, r, &c, adm);
}

/* Owners of body-budget shares: 0 is everyone unauthenticated, 1 the admin, 2 + n tenant n. */
#define OWNER_ADMIN 1ul
#define OWNER_TENANT0 2ul

void api_admit(void *cls, http_request *r, http_admission *adm)
{
    app *a = cls;
    admission *ad = http_app_data(r);
    const api_route *partial = NULL;
    char param[PARAM_MAX];
    const api_route *rt = find_route(http_method(r), http_path(r), param, &partial);
    if (!rt) {
        send_unrouted(r, http_path(r), partial);
        return;
    }
    ad->route = (unsigned)(rt - ROUTES) + 1;
    adm->body_cap = rt->max_body;
    adm->run = rt->run;
    if (rt->auth == API_PUBLIC)
        return;
    const char *key = http_header(r, "X-API-Key");
    if (!key && rt->handler == api_metrics)
        key = bearer_token(r);
    if (rt->auth == API_ADMIN) {
        ad->admin = auth_admin(a->cfg, a->keys, key);
        ad->authed = ad->admin == AUTH_ADMIN_OK;
        adm->owner = ad->authed ? OWNER_ADMIN : 0;
    } else {
        ad->authed = auth_tenant(a->cfg, a->tenants, a->keys, key, &ad->who);
        adm->owner = ad->authed ? OWNER_TENANT0 + ad->who.tenant : 0;
    }
    bool raw_write = rt->handler == api_files_write && files_raw_body(r);
    if (ad->authed && raw_write)
        admit_raw_write(a, r, adm, ad, param);
    if (ad->authed)
        return;
    if (raw_write) { /* raw bytes are never parsed as JSON: 401 at once */
        send_unauthorized(a, r, rt, ad);
        return;
    }
    /* The reference answers a body that is not JSON at all (422) before it checks the key:
     * kept for small bodies, read to decide; anything larger is refused unread. */
    bool chunked;
    unsigned long long declared = http_declared_length(r, &chunked);
    if (rt->json_body && !chunked && declared <= HTTP_UNAUTH_BODY_MAX) {
        adm->body_cap = declared;
        adm->run = HTTP_RUN_QUICK;
        return;
    }
    send_unauthorized(a, r, rt, ad);
}

/* Whether the request deletes one of the caller's own sessions: that frees a session slot,
 * a disk and a sandbox, so the request rate never refuses it (a client whose DELETE met a
 * 429 would otherwise hold the session until the idle TTL). A DELETE of an id the tenant
 * does not own is counted as usual, so this is no way around the limit. */
static bool frees_own_session(app *a, const api_route *rt, const char *param, const auth_caller *who)
{
    session *s = NULL;
    if (rt->handler != api_sessions_delete || registry_acquire(a->reg, param, who->tenant, false, &s) != SESSION_OK)
        return false;
    registry_release(a->reg, s);
    return true;
}

/* 429 past the tenant's request rate (unless exempt: then a token is taken only when there is
 * one); else fills the call's caller. */
static bool take_request_token(app *a, http_request *r, api_call *c, const auth_caller *who, bool exempt)
{
    long retry = 0;
    if (!limits_take_token(a->lim, who->tenant, &c->requests_available, &retry) && !exempt) {
        char msg[160], hdr[32];
        snprintf(msg, sizeof msg, "Rate limit of %d requests per minute exceeded; retry in %ld s.",
                 tenants_get(a->tenants, who->tenant)->requests_per_minute, retry);
        snprintf(hdr, sizeof hdr, "%ld", retry);
        metrics_rate_refused(who->tenant, false);
        http_send_json_header(r, 429, json_pack("{s:s}", "detail", msg), "retry-after", hdr);
        return false;
    }
    c->tenant = who->tenant;
    c->actor = who->actor;
    return true;
}

/* The reference's order after the key: body (400/422; an unparseable body even before the
 * key), 401, 429, then the handler. */
static void run(app *a, http_request *r, const api_route *rt, const char *param)
{
    const admission *ad = http_app_data(r);
    api_call c = {.param = strstr(rt->pattern, "{}") ? param : NULL};
    if (rt->auth == API_PUBLIC) {
        rt->handler(a, r, &c);
        return;
    }
    if (ad->upload) { /* admitted, rate-limited and streamed to disk already */
        api_files_write_raw(a, r, ad->upload);
        return;
    }
    /* a file write's content goes from its body to the file without a copy (api/body.c) */
    api_write_body wb;
    bool file_write = rt->handler == api_files_write;
    if (rt->json_body && !(file_write ? api_parse_write_body(r, &c.body, &wb) : api_parse_body(r, &c.body))) {
        if (file_write)
            api_write_body_free(&wb, NULL);
        return;
    }
    if (file_write && wb.set)
        c.write = &wb;
    bool allowed = ad->authed && (rt->auth == API_ADMIN ||
                                  take_request_token(a, r, &c, &ad->who, frees_own_session(a, rt, param, &ad->who)));
    if (!ad->authed)
        send_unauthorized(a, r, rt, ad);
    else if (allowed)
        rt->handler(a, r, &c);
    if (file_write)
        api_write_body_free(&wb, c.body);
    else
        json_decref(c.body);
}

void api_admit_internal(void *cls, http_request *r, http_admission *adm)
{
    (void)cls;
    const api_route *partial = NULL;
    char param[PARAM_MAX];
    const api_route *rt = find_route_in(INTERNAL_ROUTES, N_INTERNAL_ROUTES, http_method(r), http_path(r), param,
                                        &partial);
    if (!rt) {
        if (partial)
            http_send_405(r, partial->method);
        else
            http_send_detail(r, 404, "Not Found");
        return;
    }
    adm->body_cap = rt->max_body;
    adm->run = rt->run;
}

void api_handle_internal(void *cls, http_request *r)
{
    char param[PARAM_MAX];
    const api_route *rt = find_route_in(INTERNAL_ROUTES, N_INTERNAL_ROUTES, http_method(r), http_path(r), param,
                                        NULL);
    if (rt)
        run(cls, r, rt, param);
    else
        http_send_500(r); /* admitted requests have a route */
}

void api_handle(void *cls, http_request *r)
{
    app *a = cls;
    char param[PARAM_MAX];
    const api_route *rt = find_route(http_method(r), http_path(r), param, NULL);
    if (rt)
        run(a, r, rt, param);
    else
        http_send_500(r); /* admitted requests have a route */
}

/* Which latency histogram a route's calls go to. */
static metrics_timed timed_of(const api_route *rt)
{
    if (rt->handler == api_sessions_create)
        return METRICS_TIMED_CREATE;
    if (rt->handler == api_exec)
        return METRICS_TIMED_EXEC;
    if (rt->handler == api_files_write)
        return METRICS_TIMED_FILE_WRITE;
    if (rt->handler == api_files_read)
        return METRICS_TIMED_FILE_READ;
    if (rt->handler == api_files_list)
        return METRICS_TIMED_FILE_LIST;
    return METRICS_TIMED_NONE;
}

void api_name_routes(void)
{
    metrics_mark_start();
    for (size_t i = 0; i < N_ROUTES; i++)
        metrics_set_route((unsigned)i, ROUTES[i].method, ROUTES[i].pattern, timed_of(&ROUTES[i]));
}

void api_finished(void *cls, http_request *r, unsigned status, double seconds)
{
    (void)cls;
    const admission *ad = http_app_data(r);
    metrics_request(ad->route ? ad->route - 1 : METRICS_NO_ROUTE, status, seconds);
}
