/* Ours: /v1/templates (a tenant's) and /v1/admin/templates (every tenant's): build, list, get,
 * delete, and the build's progress streamed as NDJSON (domain/templates.h). */
#include "api/handlers.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NDJSON "application/x-ndjson"
#define MAX_PACKAGES 64
#define PACKAGE_NAME_MAX 100
#define MAX_SETUP 32
#define SETUP_COMMAND_MAX 4096
#define SETUP_TOTAL_MAX (16 * 1024)
/* The admin's templates: how many, builds at once. */
#define ADMIN_MAX_TEMPLATES 100
#define ADMIN_MAX_BUILDS 4
/* The stream's queue, and how long one may last. */
#define LOG_STREAM_QUEUE (64u * 1024u)
#define LOG_STREAM_MAX_S 7200

bool api_template_name_valid(const char *name, size_t len)
{
    if (len < 1 || len > 64 || !((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9')))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* Debian's package name grammar (Policy 5.6.7): lowercase letters, digits, '+', '-', '.', at
 * least two, starting with a letter or digit. Nothing else reaches mmdebstrap. */
static bool package_name_valid(const char *s, size_t len)
{
    if (len < 2 || len > PACKAGE_NAME_MAX || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

static json_t *item_loc(const char *field, size_t i)
{
    json_t *loc = loc_of("body", field);
    json_array_append_new(loc, json_integer((json_int_t)i));
    return loc;
}

static void too_long(json_t *errs, const char *field, json_t *v, size_t max)
{
    char msg[128];
    snprintf(msg, sizeof msg, "List should have at most %zu items after validation, not %zu", max,
             json_array_size(v));
    json_array_append_new(errs, verr("too_long", loc_of("body", field), msg, v,
                                     json_pack("{s:s,s:I,s:I}", "field_type", "List", "max_length", (json_int_t)max,
                                               "actual_length", (json_int_t)json_array_size(v))));
}

/* name, packages, setup, recommends checked; each fault named by its field (422). */
static bool validate(json_t *errs, json_t *body, const char **name, json_t **packages, json_t **setup,
                     bool *recommends)
{
    size_t nlen = 0;
    if (!body_is_object(errs, body))
        return false;
    if (v_string(errs, body, "name", true, 0, name, &nlen) && !api_template_name_valid(*name, nlen))
        json_array_append_new(errs, verr("value_error", loc_of("body", "name"),
                                         "Value error, a template name is 1-64 characters of a-z, 0-9, '.', '_', '-', "
                                         "starting with a letter or digit",
                                         json_object_get(body, "name"), NULL));
    json_t *pk = json_object_get(body, "packages");
    *packages = pk;
    if (!pk) {
        json_array_append_new(errs, verr("missing", loc_of("body", "packages"), "Field required", body, NULL));
    } else if (!json_is_array(pk)) {
        json_array_append_new(errs, verr("list_type", loc_of("body", "packages"), "Input should be a valid list", pk, NULL));
    } else if (json_array_size(pk) == 0) {
        json_array_append_new(errs, verr("too_short", loc_of("body", "packages"),
                                         "List should have at least 1 item after validation, not 0", pk,
                                         json_pack("{s:s,s:i,s:i}", "field_type", "List", "min_length", 1,
                                                   "actual_length", 0)));
    } else if (json_array_size(pk) > MAX_PACKAGES) {
        too_long(errs, "packages", pk, MAX_PACKAGES);
    } else {
        size_t i;
        json_t *item;
        json_array_foreach(pk, i, item) {
            if (!json_is_string(item))
                json_array_append_new(errs, verr("string_type", item_loc("packages", i), "Input should be a valid string", item, NULL));
            else if (!package_name_valid(json_string_value(item), json_string_length(item)))
                json_array_append_new(errs, verr("value_error", item_loc("packages", i),
                                                 "Value error, not a Debian package name (2-100 of a-z, 0-9, '+', "
                                                 "'-', '.', starting with a letter or digit)", item, NULL));
        }
    }
    v_bool(errs, body, "recommends", false, recommends);
    json_t *su = json_object_get(body, "setup");
    *setup = su;
    if (su && !json_is_null(su)) {
        if (!json_is_array(su)) {
            json_array_append_new(errs, verr("list_type", loc_of("body", "setup"), "Input should be a valid list", su, NULL));
        } else if (json_array_size(su) > MAX_SETUP) {
            too_long(errs, "setup", su, MAX_SETUP);
        } else {
            size_t i, total = 0;
            json_t *item;
            json_array_foreach(su, i, item) {
                size_t len = json_string_length(item);
                total += len;
                if (!json_is_string(item))
                    json_array_append_new(errs, verr("string_type", item_loc("setup", i), "Input should be a valid string", item, NULL));
                else if (len == 0 || len > SETUP_COMMAND_MAX || memchr(json_string_value(item), '\0', len))
                    json_array_append_new(errs, verr("value_error", item_loc("setup", i),
                                                     "Value error, a setup command is 1-4096 bytes without NUL", item, NULL));
            }
            if (total > SETUP_TOTAL_MAX)
                json_array_append_new(errs, verr("value_error", loc_of("body", "setup"),
                                                 "Value error, the setup commands take at most 16384 bytes in all", su, NULL));
        }
    }
    return json_array_size(errs) == 0;
}

static void send_result(http_request *r, templates_result rc, json_t *answer, const char *msg, const char *name)
{
    switch (rc) {
    case TPL_OK:
        http_send_json(r, 200, answer);
        return;
    case TPL_BUILDING:
        http_send_json(r, 202, answer);
        return;
    case TPL_CONFLICT:
        http_send_detail(r, 409, msg);
        break;
    case TPL_LIMIT:
        http_send_detail(r, 429, msg);
        break;
    case TPL_UNAVAILABLE:
        http_send_detail(r, 501, msg);
        break;
    case TPL_NOT_FOUND:
        send_detail_with(r, 404, "Template '%s' not found", name);
        break;
    case TPL_IN_USE:
        send_detail_with(r, 409, "Template '%s' is in use (sessions run on it, or its build is under way); "
                         "delete those sessions first", name);
        break;
    default:
        http_send_500(r);
        break;
    }
    json_decref(answer);
}

static void create_as(app *a, http_request *r, const api_call *c, const char *owner, const templates_quota *q)
{
    json_t *errs = json_array(), *packages = NULL, *setup = NULL;
    const char *name = NULL;
    bool recommends = false;
    if (!validate(errs, c->body, &name, &packages, &setup, &recommends)) {
        send_validation(r, errs);
        return;
    }
    json_decref(errs);
    json_t *none = json_array(), *answer = NULL;
    char msg[300] = "";
    templates_recipe recipe = {.packages = packages, .setup = setup && !json_is_null(setup) ? setup : none,
                               .recommends = recommends};
    templates_result rc = templates_build(a->templates, owner, q, name, &recipe, &answer, msg, sizeof msg);
    json_decref(none);
    send_result(r, rc, answer, msg, name);
}

void api_templates_create(app *a, http_request *r, const api_call *c)
{
    const tenant_cfg *t = tenants_get(a->tenants, c->tenant);
    templates_quota q = {.max_templates = t->max_templates, .max_builds = t->max_template_builds,
                         .max_bytes = (long long)t->max_template_mb << 20};
    create_as(a, r, c, t->name, &q);
}

void api_admin_templates_create(app *a, http_request *r, const api_call *c)
{
    templates_quota q = {.max_templates = ADMIN_MAX_TEMPLATES, .max_builds = ADMIN_MAX_BUILDS, .max_bytes = 0};
    create_as(a, r, c, "", &q);
}

static void list_as(app *a, http_request *r, const char *owner)
{
    http_send_json(r, 200, json_pack("{s:o}", "templates", templates_list(a->templates, owner)));
}

void api_templates_list(app *a, http_request *r, const api_call *c)
{
    list_as(a, r, tenants_get(a->tenants, c->tenant)->name);
}

void api_admin_templates_list(app *a, http_request *r, const api_call *c)
{
    (void)c;
    list_as(a, r, "");
}

void api_templates_get(app *a, http_request *r, const api_call *c)
{
    json_t *answer = NULL;
    templates_result rc = templates_get(a->templates, tenants_get(a->tenants, c->tenant)->name, c->param, &answer);
    send_result(r, rc, answer, "", c->param);
}

void api_templates_delete(app *a, http_request *r, const api_call *c)
{
    templates_result rc = templates_delete(a->templates, tenants_get(a->tenants, c->tenant)->name, c->param);
    if (rc == TPL_OK)
        http_send_json(r, 200, json_pack("{s:s,s:s}", "status", "deleted", "name", c->param));
    else
        send_result(r, rc, NULL, "", c->param);
}

void api_admin_templates_delete(app *a, http_request *r, const api_call *c)
{
    templates_result rc = templates_delete(a->templates, "", c->param);
    if (rc == TPL_OK)
        http_send_json(r, 200, json_pack("{s:s,s:s}", "status", "deleted", "name", c->param));
    else
        send_result(r, rc, NULL, "", c->param);
}

static bool client_gone(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
    return fd >= 0 && poll(&pf, 1, 0) > 0 && (pf.revents & (POLLHUP | POLLERR | POLLRDHUP)) != 0;
}

/* The build's progress events, one JSON object a line, until the build has ended (a template
 * already built or failed gives the events kept and ends). */
void api_templates_log(app *a, http_request *r, const api_call *c)
{
    const char *owner = tenants_get(a->tenants, c->tenant)->name;
    json_t *probe = NULL;
    if (templates_get(a->templates, owner, c->param, &probe) != TPL_OK) {
        send_detail_with(r, 404, "Template '%s' not found", c->param);
        return;
    }
    json_decref(probe);
    http_stream *st = http_stream_begin(r, NDJSON, LOG_STREAM_QUEUE, LOG_STREAM_MAX_S);
    if (!st) {
        http_send_detail(r, 503, "The progress cannot be streamed now; retry shortly.");
        return;
    }
    unsigned long long after = 0;
    bool done = false;
    int cancel_fd = http_stream_cancel_fd(st);
    while (!done) {
        json_t *events = NULL;
        if (templates_events(a->templates, owner, c->param, &after, 1000, &events, &done) != TPL_OK)
            break;
        size_t i;
        json_t *e;
        bool gone = false;
        json_array_foreach(events, i, e) {
            char *line = json_dumps(e, JSON_COMPACT);
            if (line) {
                size_t n = strlen(line);
                line[n] = '\n';
                gone = !http_stream_write(st, line, n + 1);
                free(line);
            }
            if (gone)
                break;
        }
        json_decref(events);
        if (gone || client_gone(cancel_fd))
            break;
    }
}
