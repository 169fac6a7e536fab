/* /v1/sessions: create (contract 1.2), list (1.3), delete (1.4) and, ours, one session's fields (GET /v1/sessions/{id}). */
#include "api/handlers.h"

#include "api/session_size.h"
#include "api/snapshots.h"
#include "egress/policy.h"
#include "text/pyrepr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const TEMPLATES[] = {"sandbox-base:latest", "python:3.11-slim"};

/* A template name that is not one of the reference's two: the tenant's (or the admin's) built
 * template, its id in id; else the answer is sent (404 unknown, 409 not ready) and false. On a
 * fleet node a template still building here is waited for (templates_await): a create never
 * fails because the node the router chose lacks it; alone, a server answers 409 at once (its
 * client built the template and can wait for it). */
static bool resolve_template(app *a, http_request *r, const char *tenant, const char *name, size_t len, char *id)
{
    char *nm = strndup(name, len);
    const char *status = "";
    char why[512] = "";
    templates_result rc = TPL_NOT_FOUND;
    if (nm && strlen(nm) == len)
        rc = a->fleet ? templates_await(a->templates, tenant, nm, TEMPLATES_AWAIT_S, http_client_fd(r), id, &status,
                                        why, sizeof why)
                      : templates_resolve(a->templates, tenant, nm, id, &status);
    char *msg = NULL;
    int n = -1;
    if (rc == TPL_NOT_READY && a->fleet && strcmp(status, "building") == 0) {
        /* still building past the wait (or too many creates wait): HAProxy retries elsewhere */
        free(nm);
        http_send_json_header(r, 503, json_pack("{s:s}", "detail", "The template is being built on this node; "
                                                "retry shortly (another node may have it ready)."),
                              "retry-after", "5");
        return false;
    }
    if (rc == TPL_NOT_READY && why[0])
        n = asprintf(&msg, "Template '%s' is not ready (status %s): %s", nm, status, why);
    else if (rc == TPL_NOT_READY)
        n = asprintf(&msg, "Template '%s' is not ready (status %s).", nm, status);
    else if (rc != TPL_OK) {
        json_t *list = json_pack("[s,s]", TEMPLATES[0], TEMPLATES[1]);
        char *allowed_repr = pyrepr_list(list);
        json_decref(list);
        n = asprintf(&msg, "Template '%s' not found: neither one of %s nor a template of this tenant "
                     "(GET /v1/templates).", nm ? nm : "", allowed_repr ? allowed_repr : "");
        free(allowed_repr);
    }
    if (rc != TPL_OK) {
        if (n >= 0)
            http_send_detail(r, rc == TPL_NOT_READY ? 409 : 404, msg);
        else
            http_send_500(r);
    }
    free(msg);
    free(nm);
    return rc == TPL_OK;
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

/* Ours: {"on_idle": "delete" (the default) | "pause"}: what the idle TTL does to it. */
static void validate_on_idle(json_t *errs, json_t *body, bool *pause)
{
    const json_t *v = json_object_get(body, "on_idle");
    *pause = false;
    if (!v || json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), "delete") == 0 &&
                                  json_string_length(v) == 6))
        return;
    if (json_is_string(v) && strcmp(json_string_value(v), "pause") == 0 && json_string_length(v) == 5) {
        *pause = true;
        return;
    }
    json_array_append_new(errs, verr("literal_error", loc_of("body", "on_idle"), "Input should be 'delete' or 'pause'",
                                     (json_t *)v, json_pack("{s:s}", "expected", "'delete' or 'pause'")));
}

/* A session made from a memory snapshot (ours): its own sandbox restored from the snapshot's
 * image and checked, its kernels adopted, before it is answered. false with the answer sent:
 * the session is deleted again (nothing of it kept). */
static bool restore_fork(app *a, http_request *r, const api_call *c, session *s, const snapshot_source *from)
{
    char why[300] = "";
    if (pause_restore_fork(&a->pause, s, from->memory_dir, why, sizeof why) == 0) {
        log_session(LV_INFO, s->id, NULL, "session %s made from memory snapshot %s", s->id, from->rec.id);
        return true;
    }
    log_session(LV_WARN, s->id, NULL, "session %s: memory snapshot %s could not be restored: %s", s->id,
                from->rec.id, why);
    kernels_forget_session(a->kernels, s->id);
    (void)registry_delete(a->reg, s->id, c->tenant);
    registry_release(a->reg, s);
    bool gone = access(from->memory_dir, F_OK) != 0;
    char msg[500];
    snprintf(msg, sizeof msg, "The session could not be made from the memory snapshot: %s. Nothing of it was kept.",
             gone ? "the snapshot was deleted meanwhile" : why);
    http_send_detail(r, gone ? 404 : 500, msg);
    return false;
}

/* The create, with from (ours) the snapshot its disk copies when the body names one. */
static void create_session(app *a, http_request *r, const api_call *c, snapshot_source *from)
{
    const tenant_cfg *t = tenants_get(a->tenants, c->tenant);
    json_t *body = c->body;
    json_t *errs = json_array(), *egress_in = NULL;
    const char *tpl = NULL;
    size_t tpl_len = 0;
    session_spec spec = {0};
    if (body_is_object(errs, body)) {
        v_string(errs, body, "template", false, 0, &tpl, &tpl_len);
        validate_metadata(errs, body);
        validate_egress(errs, body, &egress_in);
        session_size_from_body(errs, body, t, a->cfg->quota_bytes, &spec);
        validate_on_idle(errs, body, &spec.on_idle_pause);
    }
    if (send_if_invalid(r, errs))
        return;
    if (!snapshot_source_from_body(a, r, body, t->name, from, &spec))
        return;
    if (!tpl && from->image) /* ours: the snapshot's template */
        tpl = from->rec.template_name, tpl_len = strlen(tpl);
    if (!tpl)
        tpl = TEMPLATES[0], tpl_len = strlen(TEMPLATES[0]);
    bool allowed = false;
    for (size_t i = 0; i < sizeof TEMPLATES / sizeof TEMPLATES[0]; i++)
        allowed |= tpl_len == strlen(TEMPLATES[i]) && memcmp(tpl, TEMPLATES[i], tpl_len) == 0;
    /* ours: a template built from Debian packages (api/templates.c): 404 / 409 when not ready */
    char tpl_id[SESSION_TEMPLATE_ID_MAX] = "";
    if (!allowed && api_template_name_valid(tpl, tpl_len)) {
        if (!resolve_template(a, r, t->name, tpl, tpl_len, tpl_id))
            return;
        allowed = true;
    }
    if (!allowed) { /* the reference's answer to a name no template can have */
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
    /* ours: a memory snapshot's session has its rules (its tenant's policy may have changed since) */
    json_t *expanded = from->egress ? json_incref(from->egress) : egress_expand(egress_in ? egress_in : empty);
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
        if (tpl_id[0])
            templates_unpin(a->templates, tpl_id);
        return;
    }
    json_decref(refused);
    spec.template_name = tpl; /* an allowed name: NUL-terminated, no longer than the longest */
    spec.template_id = tpl_id[0] ? tpl_id : NULL; /* ours: a built template */
    /* draining, full, or no database: HAProxy retries the create on another node */
    if (a->fleet && (!fleet_accepting(a->fleet) || fleet_full(a->fleet))) {
        json_decref(expanded);
        http_send_json_header(r, 503, json_pack("{s:s}", "detail", "This node takes no new sessions now "
                                                "(draining, full, or its database cannot be reached); retry shortly."),
                              "retry-after", "2");
        if (tpl_id[0])
            templates_unpin(a->templates, tpl_id);
        return;
    }
    session *s = NULL;
    int open_now = 0;
    session_result rc = registry_create(a->reg, c->tenant, t->max_sessions, expanded, &spec, &s, &open_now);
    json_decref(expanded);
    if (tpl_id[0])
        templates_unpin(a->templates, tpl_id);
    if (rc == SESSION_LIMIT) {
        char msg[160];
        snprintf(msg, sizeof msg, "Session limit reached: %d of %d sessions are open. Delete one first.",
                 open_now, t->max_sessions);
        http_send_detail(r, 429, msg);
        return;
    }
    if (rc == SESSION_CAPACITY) {
        http_send_detail(r, 503, "All sandbox workspaces are in use; try again shortly.");
        return;
    }
    if (rc == SESSION_UNAVAILABLE) { /* a fleet node fails closed without its database */
        http_send_json_header(r, 503, json_pack("{s:s}", "detail", "The fleet's database cannot be reached; "
                                                "no session can be created now. Retry shortly."),
                              "retry-after", "2");
        return;
    }
    if (rc == SESSION_ERROR && from->gone) {
        http_send_detail(r, 404, "Snapshot not found");
        return;
    }
    if (rc == SESSION_STORAGE) { /* nothing was created: 503 like the contract's capacity answer */
        send_not_saved(r, 503, "The new session");
        return;
    }
    if (rc != SESSION_OK) {
        http_send_500(r);
        return;
    }
    if (from->memory_dir && !restore_fork(a, r, c, s, from))
        return;
    json_t *created = json_pack("{s:s,s:s,s:O,s:I,s:f,s:s}", "session_id", s->id, "tenant_id", t->name,
                                "egress", s->egress, "disk_quota_mb", (json_int_t)(s->quota_bytes >> 20),
                                "created_at", s->created_at, "status", "ready");
    if (created)
        session_shape_json(created, s->template_name, &s->size, s->quota_bytes);
    if (created) {
        json_object_set_new(created, "state", json_string("active"));
        json_object_set_new(created, "on_idle", json_string(s->on_idle_pause ? "pause" : "delete"));
    }
    http_send_json(r, 201, created);
    /* the tenant's next new session finds its disk made and its first sandbox booted */
    char *root = tpl_id[0] ? templates_root(a->templates, tpl_id) : NULL; /* spares per template in use */
    if (json_array_size(s->egress) == 0 && (!tpl_id[0] || root))
        warm_want_spare(a->warm, t->name, root);
    warm_want_session(a->warm, s, t->name, root); /* SANDBOX_EXEC_MODE=session */
    free(root);
    registry_release(a->reg, s);
}

void api_sessions_create(app *a, http_request *r, const api_call *c)
{
    snapshot_source from;
    memset(&from, 0, sizeof from);
    create_session(a, r, c, &from);
    snapshot_source_free(&from);
}

/* A session as the list and GET /v1/sessions/{id} show it. */
static json_t *info_json(const session_info *v, const char *tenant)
{
    json_t *o = json_pack("{s:s,s:s,s:O,s:f,s:f,s:f,s:I}", "session_id", v->id, "tenant_id", tenant, "egress",
                          v->egress, "created_at", v->created_at, "last_accessed_at", v->last_accessed_at,
                          "expires_at", v->expires_at, "disk_quota_mb", (json_int_t)(v->quota_bytes >> 20));
    if (o) {
        session_shape_json(o, v->template_name, &v->size, v->quota_bytes);
        json_object_set_new(o, "state", json_string(v->paused ? "paused" : "active"));
        json_object_set_new(o, "on_idle", json_string(v->on_idle_pause ? "pause" : "delete"));
        if (v->paused)
            json_object_set_new(o, "paused_at", json_real(v->paused_at));
    }
    return o;
}

void api_sessions_list(app *a, http_request *r, const api_call *c)
{
    const char *tname = tenants_get(a->tenants, c->tenant)->name;
    if (a->fleet) { /* every node's sessions, from the fleet's registry */
        json_t *all = fleet_session_list(a->fleet, tname, a->cfg->session_ttl, a->cfg->paused_ttl);
        if (all)
            http_send_json(r, 200, json_pack("{s:s,s:o}", "tenant_id", tname, "sessions", all));
        else
            http_send_json_header(r, 503, json_pack("{s:s}", "detail", "The fleet's database cannot be reached."),
                                  "retry-after", "2");
        return;
    }
    size_t n = 0;
    session_info *v = registry_list(a->reg, c->tenant, &n);
    json_t *items = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(items, info_json(&v[i], tname));
    session_info_free(v, n);
    http_send_json(r, 200, json_pack("{s:s,s:o}", "tenant_id", tname, "sessions", items));
}

void api_sessions_get(app *a, http_request *r, const api_call *c)
{
    session_info v;
    session_result rc = registry_info(a->reg, c->param, c->tenant, &v); /* not a touch, like the list */
    if (rc == SESSION_NOT_FOUND && store_take_over(a, c->param, c->tenant))
        rc = registry_info(a->reg, c->param, c->tenant, &v);
    if (rc == SESSION_NOT_FOUND && fleet_answer_elsewhere(a, r, c->param, c->tenant))
        return;
    if (rc == SESSION_NOT_FOUND) {
        http_send_detail(r, 404, "Session not found or expired");
    } else if (rc == SESSION_MOVING) {
        send_moving(r, c->param);
    } else if (rc != SESSION_OK) {
        http_send_detail(r, 403, "Forbidden: Access denied to this session");
    } else {
        json_t *o = info_json(&v, tenants_get(a->tenants, c->tenant)->name);
        if (o)
            json_object_set_new(o, "status", json_string("ready"));
        json_decref(v.egress);
        http_send_json(r, 200, o);
    }
}

void api_sessions_delete(app *a, http_request *r, const api_call *c)
{
    const char *id = c->param;
    session_result rc = registry_delete(a->reg, id, c->tenant);
    if (rc == SESSION_NOT_FOUND && store_take_over(a, id, c->tenant)) /* its image leaves the store */
        rc = registry_delete(a->reg, id, c->tenant);
    if (rc == SESSION_OK) { /* a cell under way ends now, not when its request lets the session go */
        kernels_forget_session(a->kernels, id);
        /* and a sandbox made ahead for its resume, unless another session needs it */
        pause_drop_restore_ahead(&a->pause, c->tenant);
    }
    if (rc == SESSION_NOT_FOUND && fleet_answer_elsewhere(a, r, id, c->tenant))
        return;
    if (rc == SESSION_NOT_FOUND)
        http_send_detail(r, 404, "Session not found");
    else if (rc == SESSION_FORBIDDEN)
        http_send_detail(r, 403, "Forbidden");
    else if (rc == SESSION_MOVING)
        send_moving(r, id);
    else
        http_send_json(r, 200, json_pack("{s:s,s:s}", "status", "terminated", "session_id", id));
}
