/* Ours: a session's live figures (GET /v1/sessions/{id}/metrics, the tenant's own sessions)
 * and every session on this node with its figures, plus in a fleet every session the
 * database knows with its node (GET /v1/admin/sessions, the admin key). The figures are read
 * when asked: CPU time, memory and host tasks from the sandboxes' cgroups (those released
 * already kept by domain/figures.h), the disk from the workspace's own filesystem. */
#include "api/handlers.h"

#include "domain/quota.h"

#include <stdlib.h>
#include <string.h>

/* The fleet's rows listed at most (the database's view of every node). */
#define FLEET_ROWS_MAX 10000

/* One session's live figures, read now. */
typedef struct {
    sandbox_usage live;
    figures_session fig;
    long long disk_used;
    const char *state;
} session_figures;

/* live: its sandboxes' usage read already (the listing's one pass), or NULL: read now. */
static void read_figures(app *a, const session *s, const sandbox_usage *live, session_figures *out)
{
    char prefix[24];
    snprintf(prefix, sizeof prefix, "%s-", s->id); /* its sandboxes' names (api/exec.c, domain/warm.c) */
    if (live)
        out->live = *live;
    else
        (void)sandbox_usage_of(a->sb, tenants_get(a->tenants, s->tenant)->name, prefix, &out->live);
    figures_get(a->figures, s->id, &out->fig);
    bool paused = registry_state(a->reg, s, NULL) != SESSION_ACTIVE; /* its disk is not mounted */
    out->disk_used = paused ? -1 : quota_usage(s->workspace);
    out->state = s->moving ? "moving" : paused ? "paused" : out->fig.running > 0 ? "running" : "idle";
}

static double to_ms(double seconds)
{
    return (double)(long long)(seconds * 1000.0) / 1000.0;
}

static double cpu_seconds(const session_figures *f)
{
    unsigned long long ns = f->live.cpu_ns + f->fig.retired_cpu_ns;
    return (double)(ns / 1000000ull) / 1000.0; /* to the millisecond */
}

static json_int_t peak_bytes(const session_figures *f)
{
    unsigned long long p = f->live.memory_peak_bytes;
    if (f->fig.retired_peak_bytes > p)
        p = f->fig.retired_peak_bytes;
    if (f->live.memory_bytes > p)
        p = f->live.memory_bytes;
    return (json_int_t)p;
}

/* The figures both routes show, into obj. */
static void put_figures(json_t *obj, const session *s, const session_figures *f)
{
    json_object_set_new(obj, "cpu_seconds", json_real(cpu_seconds(f)));
    json_object_set_new(obj, "memory_bytes", json_integer((json_int_t)f->live.memory_bytes));
    json_object_set_new(obj, "memory_peak_bytes", json_integer(peak_bytes(f)));
    json_object_set_new(obj, "memory_limit_bytes", json_integer((json_int_t)s->size.memory_mb << 20));
    json_object_set_new(obj, "disk_used_bytes", f->disk_used >= 0 ? json_integer(f->disk_used) : json_null());
    json_object_set_new(obj, "disk_quota_bytes", json_integer(s->quota_bytes));
    json_object_set_new(obj, "processes", json_integer((json_int_t)f->live.tasks));
    json_object_set_new(obj, "sandboxes", json_integer((json_int_t)f->live.sandboxes));
    json_object_set_new(obj, "commands_run", json_integer((json_int_t)f->fig.commands_run));
    json_object_set_new(obj, "running_commands", json_integer(f->fig.running));
    json_object_set_new(obj, "state", json_string(f->state));
}

void api_session_metrics(app *a, http_request *r, const api_call *c)
{
    session *s = NULL;
    session_result rc = registry_acquire(a->reg, c->param, c->tenant, true, &s);
    if (rc == SESSION_NOT_FOUND && fleet_answer_elsewhere(a, r, c->param, c->tenant))
        return;
    if (rc == SESSION_MOVING) {
        send_moving(r, c->param);
        return;
    }
    if (rc != SESSION_OK) { /* another tenant's is none of the caller's business */
        http_send_detail(r, 404, "Session not found or expired");
        return;
    }
    session_figures f;
    read_figures(a, s, NULL, &f);
    json_t *obj = json_pack("{s:s,s:s}", "session_id", s->id, "tenant_id", tenants_get(a->tenants, s->tenant)->name);
    put_figures(obj, s, &f);
    json_object_set_new(obj, "sampled_at", json_real(epoch_now()));
    registry_release(a->reg, s);
    http_send_json(r, 200, obj);
}

/* This node's sessions for the listing, sorted by id, each with its sandboxes' usage (read
 * in one pass over every sandbox, not one per session). */
typedef struct {
    char id[17];
    size_t tenant;
    sandbox_usage live;
} local_session;

typedef struct {
    local_session *v;
    size_t n;
} local_sessions;

static int by_id(const void *x, const void *y)
{
    return strcmp(((const local_session *)x)->id, ((const local_session *)y)->id);
}

static local_session *find_local(const local_sessions *l, const char *id)
{
    local_session key = {.tenant = 0};
    snprintf(key.id, sizeof key.id, "%s", id);
    return l->n ? bsearch(&key, l->v, l->n, sizeof *l->v, by_id) : NULL;
}

/* A sandbox named "<session id>-...": its usage goes to that session (sandbox_usage_fn). */
static void add_sandbox(void *ctx, const char *name, const sandbox_usage *u)
{
    char id[17];
    if (strlen(name) <= 16 || name[16] != '-')
        return;
    memcpy(id, name, 16);
    id[16] = '\0';
    local_session *ls = find_local(ctx, id);
    if (!ls)
        return;
    ls->live.cpu_ns += u->cpu_ns;
    ls->live.memory_bytes += u->memory_bytes;
    ls->live.tasks += u->tasks;
    ls->live.sandboxes += u->sandboxes;
    if (u->memory_peak_bytes > ls->live.memory_peak_bytes)
        ls->live.memory_peak_bytes = u->memory_peak_bytes;
}

/* Every session of this node (NULL entries when out of memory: none listed). */
static local_sessions read_local(app *a)
{
    local_sessions l = {NULL, 0};
    char (*ids)[17] = NULL;
    size_t *owners = NULL;
    size_t n = registry_owners(a->reg, &ids, &owners);
    l.v = ids && owners ? calloc(n ? n : 1, sizeof *l.v) : NULL;
    for (size_t i = 0; l.v && i < n; i++) {
        memcpy(l.v[i].id, ids[i], sizeof l.v[i].id);
        l.v[i].tenant = owners[i];
    }
    l.n = l.v ? n : 0;
    free(ids);
    free(owners);
    qsort(l.v, l.n, sizeof *l.v, by_id);
    (void)sandbox_usage_each(a->sb, add_sandbox, &l);
    return l;
}

/* One of this node's sessions with its live figures (NULL when it went meanwhile). */
static json_t *local_row(app *a, const local_session *ls, double now)
{
    session *s = NULL;
    if (registry_acquire(a->reg, ls->id, ls->tenant, false, &s) != SESSION_OK)
        return NULL;
    session_figures f;
    read_figures(a, s, &ls->live, &f);
    json_t *row = json_pack("{s:s,s:s,s:o,s:s,s:f,s:f,s:f}", "id", s->id, "tenant",
                            tenants_get(a->tenants, s->tenant)->name, "node",
                            a->fleet ? json_string(fleet_node_id(a->fleet)) : json_null(), "state", f.state,
                            "created_at", s->created_at, "last_accessed_at", s->last_accessed_at, "age_s",
                            to_ms(now - s->created_at));
    session_shape_json(row, s->template_name, &s->size, s->quota_bytes);
    put_figures(row, s, &f);
    json_t *running = json_array();
    int shown = f.fig.running < FIGURES_RUNNING_MAX ? f.fig.running : FIGURES_RUNNING_MAX;
    for (int i = 0; i < shown; i++)
        json_array_append_new(running, json_pack("{s:s,s:f}", "command", f.fig.run[i].command, "started_at",
                                                 f.fig.run[i].started_at));
    json_object_set_new(row, "running", running);
    json_object_set_new(row, "last_command",
                        f.fig.has_last ? json_pack("{s:s,s:i,s:f}", "command", f.fig.last_command, "exit_code",
                                                   f.fig.last_exit_code, "ended_at", f.fig.last_ended_at)
                                       : json_null());
    json_object_set_new(row, "live", json_true());
    registry_release(a->reg, s);
    return row;
}

static int newest_first(const void *x, const void *y)
{
    double a = json_real_value(json_object_get(*(json_t *const *)x, "created_at"));
    double b = json_real_value(json_object_get(*(json_t *const *)y, "created_at"));
    return a < b ? 1 : a > b ? -1 : 0;
}

/* A session of another node, as the fleet's database has it: no live figures. */
static json_t *remote_row(json_t *db_row, double now)
{
    json_t *row = json_deep_copy(db_row);
    if (strcmp(json_string_value(json_object_get(row, "state")), "active") == 0)
        json_object_set_new(row, "state", json_string("elsewhere"));
    json_object_set_new(row, "age_s", json_real(to_ms(now - json_real_value(json_object_get(row, "created_at")))));
    const char *absent[] = {"cpu_seconds", "memory_bytes",     "memory_peak_bytes", "disk_used_bytes", "processes",
                            "sandboxes",   "commands_run",     "running_commands",  "running",         "last_command"};
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
        json_object_set_new(row, absent[i], json_null());
    json_object_set_new(row, "live", json_false());
    return row;
}

void api_admin_sessions(app *a, http_request *r, const api_call *c)
{
    (void)c;
    double now = epoch_now();
    local_sessions local = read_local(a);
    json_t *rows = json_array();
    json_t **made = calloc(local.n ? local.n : 1, sizeof *made);
    size_t nmade = 0;
    for (size_t i = 0; made && i < local.n; i++)
        if ((made[nmade] = local_row(a, &local.v[i], now)))
            nmade++;
    qsort(made, nmade, sizeof *made, newest_first);
    for (size_t i = 0; i < nmade; i++)
        json_array_append_new(rows, made[i]);
    free(made);
    json_t *answer = json_pack("{s:o,s:o}", "sessions", rows, "node",
                               a->fleet ? json_string(fleet_node_id(a->fleet)) : json_null());
    if (a->fleet) {
        json_t *db = fleet_session_list_all(a->fleet, FLEET_ROWS_MAX);
        size_t k;
        json_t *db_row;
        json_array_foreach(db, k, db_row) {
            const char *id = json_string_value(json_object_get(db_row, "id"));
            if (id && !find_local(&local, id))
                json_array_append_new(rows, remote_row(db_row, now));
        }
        json_object_set_new(answer, "database", json_string(db ? "ok" : "unreachable"));
        json_decref(db);
    }
    free(local.v);
    http_send_json(r, 200, answer);
}
