/* Ours: snapshots of sessions' workspaces (docs/api.md "Snapshots"): POST
 * /v1/sessions/{id}/snapshots, GET /v1/snapshots, GET and DELETE /v1/snapshots/{id}, and the
 * from_snapshot of a new session. Another tenant's snapshot or session is answered 404. */
#include "api/snapshots.h"

#include "api/handlers.h"
#include "domain/pause.h"
#include "drain/extents.h"
#include "egress/policy.h"
#include "log/log.h"
#include "sandbox/session_checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FLUSH_TIMEOUT_S 30

static json_t *snapshot_json(const snapshot_record *v)
{
    json_t *o = json_pack("{s:s,s:I,s:b,s:f,s:s,s:s,s:I}", "snapshot_id", v->id, "bytes", (json_int_t)v->bytes,
                          "memory", v->memory, "created_at", v->created_at, "session_id", v->session_id, "template",
                          v->template_name, "disk_mb", (json_int_t)(v->quota_bytes >> 20));
    if (o)
        json_object_set_new(o, "name", v->name[0] ? json_string(v->name) : json_null());
    if (o && v->memory) /* (a fleet's list does not know it: the record in the store does) */
        json_object_set_new(o, "memory_bytes", v->memory_bytes > 0 ? json_integer(v->memory_bytes) : json_null());
    return o;
}

/* A name: 1-64 of letters, digits, '.', '_', '-' and spaces, not blank. */
static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > SNAPSHOT_NAME_MAX || s[0] == ' ')
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-' || ch == ' '))
            return false;
    }
    return true;
}

/* The body of a snapshot: {"name": str, "memory": false}; false when a 422 was sent. */
static bool read_body(http_request *r, json_t *body, const char **name, size_t *name_len, bool *memory)
{
    json_t *errs = json_array();
    *name = NULL;
    *name_len = 0;
    *memory = false;
    if (body && !body_is_object(errs, body))
        return !send_if_invalid(r, errs);
    if (body && v_string(errs, body, "name", false, 0, name, name_len) && *name && !name_ok(*name, *name_len))
        json_array_append_new(errs, verr("string_pattern_mismatch", loc_of("body", "name"),
                                         "A snapshot's name is 1 to 64 letters, digits, '.', '_', '-' or spaces",
                                         json_object_get(body, "name"), NULL));
    if (body)
        v_bool(errs, body, "memory", false, memory);
    return !send_if_invalid(r, errs);
}

/* A memory snapshot's part (domain/snapshots.h snapshot_memory): the session's own sandbox
 * checkpointed while it runs, its kernels' list kept beside the image. */
typedef struct {
    app *a;
    session *s;
    const char *image_dir;
    json_t *kernels; /* their list, read before the sandbox's lock is taken */
    int (*still)(void *);
    void *still_ctx;
    bool lost; /* the save failed and the session's sandbox ended with it */
} memory_ctx;

/* While the sandbox is held still: its kernels' list and its egress rules beside the image (a
 * fork's sandbox is restored on a network of its own with those rules: the image's processes
 * expect one), then the workspace's copy. */
static int keep_kernels_then(void *arg)
{
    memory_ctx *m = arg;
    char path[4200], rules[4200];
    json_t *none = json_array();
    if (snprintf(path, sizeof path, "%s/kernels.json", m->image_dir) >= (int)sizeof path ||
        snprintf(rules, sizeof rules, "%s/" SNAPSHOT_EGRESS, m->image_dir) >= (int)sizeof rules ||
        json_dump_file(m->kernels, path, JSON_COMPACT) != 0 ||
        json_dump_file(m->s->egress ? m->s->egress : none, rules, JSON_COMPACT) != 0) {
        json_decref(none);
        log_session(LV_WARN, m->s->id, NULL, "cannot keep its kernels with a memory snapshot");
        return -1;
    }
    json_decref(none);
    return m->still(m->still_ctx);
}

/* The kernels are read outside the sandbox's lock (a kernel's interrupt takes the kernels' lock,
 * then the sandbox's) and read again after: a kernel made or ended meanwhile makes it a 409. */
static int checkpoint_session(void *ctx, const char *image_dir, int (*still)(void *), void *still_ctx, char *why,
                              size_t whylen)
{
    memory_ctx *m = ctx;
    m->image_dir = image_dir;
    m->still = still;
    m->still_ctx = still_ctx;
    if (!(m->kernels = kernels_describe(m->a->kernels, m->s->id))) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    int rc = warm_session_snapshot(m->a->warm, m->s, image_dir, keep_kernels_then, m, why, whylen);
    m->lost = rc == SANDBOX_SAVE_LOST;
    json_t *after = kernels_describe(m->a->kernels, m->s->id);
    if (rc == 0 && !json_equal(m->kernels, after)) {
        snprintf(why, whylen, "the session's kernels changed while it was taken");
        rc = 1;
    }
    json_decref(after);
    json_decref(m->kernels);
    m->kernels = NULL;
    return rc;
}

typedef struct {
    app *a;
    session *s;
    const char *tenant;
} flush_ctx;

/* SANDBOX_EXEC_MODE=session: the session's own sandbox runs `sync`, so what its programs wrote
 * and gVisor still holds reaches the workspace's filesystem. A session without a sandbox
 * ready (none, still booting) holds nothing unwritten: each command's sandbox wrote its files
 * out when it ended. */
static int flush_session(void *arg)
{
    flush_ctx *f = arg;
    if (!warm_sessions(f->a->warm))
        return 0;
    session *s = f->s;
    char *root = s->template_id[0] ? templates_root(f->a->templates, s->template_id) : NULL;
    sandbox_opts so = {.workspace_dir = s->workspace, .name = "snapshot", .tenant = f->tenant, .output_limit = 4096,
                       .cancel_fd = -1, .size = s->size, .root_dir = root};
    sandbox_result res = {0};
    char err[256] = "";
    int rc = warm_session_run(f->a->warm, s, &so, "sync", FLUSH_TIMEOUT_S, false, &res, err, sizeof err);
    free(root);
    if (rc == 0 && res.exit_code != 0) {
        snprintf(err, sizeof err, "sync exited %d", res.exit_code);
        rc = -1;
    }
    sandbox_result_free(&res);
    if (rc < 0)
        log_session(LV_WARN, s->id, f->tenant, "cannot flush its sandbox for a snapshot: %s", err);
    return rc < 0 ? -1 : 0;
}

void api_snapshots_create(app *a, http_request *r, const api_call *c)
{
    const tenant_cfg *t = tenants_get(a->tenants, c->tenant);
    const char *name = NULL;
    size_t name_len = 0;
    bool memory = false;
    if (!read_body(r, c->body, &name, &name_len, &memory))
        return;
    session *s = NULL;
    session_result sr = registry_acquire(a->reg, c->param, c->tenant, true, &s);
    if (sr == SESSION_NOT_FOUND && fleet_answer_elsewhere(a, r, c->param, c->tenant))
        return;
    if (sr == SESSION_MOVING) {
        send_moving(r, c->param);
        return;
    }
    if (sr != SESSION_OK) { /* another tenant's session is not shown to exist */
        http_send_detail(r, 404, "Session not found or expired");
        return;
    }
    /* a paused session is resumed first, as for any call (its disk is mounted again) */
    bool resumed = false;
    double resume_ms = 0;
    sr = resume_session(&a->pause, s, &resumed, &resume_ms, NULL, 0);
    if (sr != SESSION_OK) {
        registry_release(a->reg, s);
        if (sr == SESSION_NOT_FOUND)
            http_send_detail(r, 404, "Session not found or expired");
        else
            http_send_retry(r, 503, "The paused session could not be resumed (its disk could not be mounted); its "
                                    "files are kept. Retry shortly.", 2);
        return;
    }
    if (resumed)
        http_note(r, "x-airlock-resumed", "1", "resumed");
    char nm[SNAPSHOT_NAME_MAX + 1] = "";
    if (name)
        memcpy(nm, name, name_len);
    snapshot_limits lim = {.max_count = t->max_snapshots, .max_bytes = (long long)t->max_snapshot_mb << 20};
    flush_ctx f = {a, s, t->name};
    snapshot_record rec;
    char why[512] = "";
    /* memory: only with kernels (nothing else in a session's memory is worth an image): a
     * session without any gets a files-only snapshot, which its answer says (memory false) */
    memory_ctx mc = {.a = a, .s = s};
    char runsc[SNAPSHOT_RUNSC_VERSION_MAX] = "";
    snapshot_memory mem = {.checkpoint = checkpoint_session, .ctx = &mc, .runsc_version = runsc,
                           .most_bytes = (long long)s->size.memory_mb << 20};
    bool with_memory = memory && kernels_count(a->kernels, s->id) > 0;
    snapshot_result rc = SNAP_ERROR;
    if (with_memory && sandbox_runsc_version(a->pause.sb, runsc, sizeof runsc) != 0)
        snprintf(why, sizeof why, "runsc gave no version");
    else
        rc = snapshots_take(a->snapshots, s, t->name, nm, &lim, flush_session, &f, with_memory ? &mem : NULL, &rec,
                            why, sizeof why);
    registry_release(a->reg, s);
    if (rc == SNAP_BUSY) {
        char msg[640];
        snprintf(msg, sizeof msg, "Cannot take a memory snapshot now: %s. Take it when it is done.", why);
        http_send_detail(r, 409, msg);
    } else if (rc == SNAP_LIMIT) {
        http_send_detail(r, 429, why);
    } else if (rc == SNAP_FULL) {
        char msg[640];
        snprintf(msg, sizeof msg, "No room for the snapshot: %s. Try again later or delete snapshots.", why);
        http_send_json_header(r, 503, json_pack("{s:s}", "detail", msg), "retry-after", "5");
    } else if (rc != SNAP_OK && mc.lost) {
        http_send_detail(r, 500, "The snapshot could not be made (the server logged why), and the session's sandbox "
                                 "ended with the failed save: its kernels' memory is lost (their next cell starts them "
                                 "anew and says kernel_restarted); its files are kept and it is active.");
    } else if (rc != SNAP_OK) { /* the reason (host paths) is in the log, not the answer */
        http_send_detail(r, 500, "The snapshot could not be made (the server logged why); the session is untouched.");
    } else {
        log_session(LV_INFO, rec.session_id, t->name, "snapshot %s taken (%lld bytes%s)", rec.id, rec.bytes,
                    rec.memory ? ", with its memory" : "");
        http_send_json(r, 201, snapshot_json(&rec));
        free(rec.tenant);
    }
}

void api_snapshots_list(app *a, http_request *r, const api_call *c)
{
    const char *tname = tenants_get(a->tenants, c->tenant)->name;
    size_t n = 0;
    bool ok = true;
    snapshot_record *v = snapshots_list(a->snapshots, tname, &n, &ok);
    if (!ok) {
        http_send_retry(r, 503, "The fleet's database cannot be reached to list the snapshots. Retry shortly.", 2);
        return;
    }
    json_t *items = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(items, snapshot_json(&v[i]));
    snapshot_records_free(v, n);
    http_send_json(r, 200, json_pack("{s:s,s:o}", "tenant_id", tname, "snapshots", items));
}

void api_snapshots_get(app *a, http_request *r, const api_call *c)
{
    snapshot_record rec;
    if (!snapshot_store_get(snapshots_store(a->snapshots), c->param, tenants_get(a->tenants, c->tenant)->name, &rec)) {
        http_send_detail(r, 404, "Snapshot not found");
        return;
    }
    http_send_json(r, 200, snapshot_json(&rec));
    free(rec.tenant);
}

void api_snapshots_delete(app *a, http_request *r, const api_call *c)
{
    int rc = snapshot_id_valid(c->param)
                 ? snapshots_delete(a->snapshots, c->param, tenants_get(a->tenants, c->tenant)->name)
                 : 1;
    if (rc == 1)
        http_send_detail(r, 404, "Snapshot not found");
    else if (rc != 0)
        http_send_500(r);
    else
        http_send_json(r, 200, json_pack("{s:s,s:s}", "status", "deleted", "snapshot_id", c->param));
}

/* ---- from_snapshot ---- */

static int fill_from_snapshot(void *ctx, int fd)
{
    snapshot_source *src = ctx;
    char err[256] = "";
    long long data = 0;
    if (extents_copy(src->image, fd, src->rec.image_bytes, &data, err, sizeof err) == 0)
        return 0;
    src->gone = access(src->image, F_OK) != 0;
    log_warn("cannot copy snapshot %s: %s", src->rec.id, src->gone ? "it was deleted meanwhile" : err);
    return -1;
}

/* A 422 for field with msg, input the body's value. */
static void send_field_error(http_request *r, json_t *body, const char *field, const char *msg)
{
    json_t *errs = json_array();
    json_array_append_new(errs, verr("value_error", loc_of("body", field), msg, json_object_get(body, field), NULL));
    send_validation(r, errs);
}

/* The egress rules a memory snapshot was taken with (SNAPSHOT_EGRESS beside its image: none
 * when it has no such file, as before egress could be snapshotted); NULL when unreadable. */
static json_t *memory_egress(const char *memory_dir)
{
    char path[4200];
    if (snprintf(path, sizeof path, "%s/" SNAPSHOT_EGRESS, memory_dir) >= (int)sizeof path)
        return NULL;
    if (access(path, F_OK) != 0)
        return json_array();
    json_t *rules = json_load_file(path, 0, NULL);
    bool ok = json_is_array(rules) && json_array_size(rules) <= SNAPSHOT_EGRESS_RULES_MAX;
    size_t i;
    json_t *v;
    json_array_foreach(rules, i, v) ok = ok && json_is_string(v);
    if (!ok) {
        json_decref(rules);
        return NULL;
    }
    return rules;
}

/* body's egress, when it has one, is the memory snapshot's rules (src->egress): false with a
 * 422 sent. (The fork's sandbox is restored with the network its image was saved with: one
 * with egress keeps it, one without has none.) */
static bool same_egress(http_request *r, json_t *body, const snapshot_source *src)
{
    json_t *asked = json_object_get(body, "egress");
    if (!asked)
        return true;
    json_t *expanded = egress_expand(asked);
    bool same = expanded && json_equal(expanded, src->egress);
    json_decref(expanded);
    if (same)
        return true;
    char *rules = json_dumps(src->egress, JSON_COMPACT);
    char msg[600];
    snprintf(msg, sizeof msg, "A session from a memory snapshot has the egress rules it was taken with (%.400s): "
             "leave egress out", rules ? rules : "[]");
    free(rules);
    send_field_error(r, body, "egress", msg);
    return false;
}

/* A memory snapshot's session: this server's runsc made the image (else 409), in a sandbox of
 * its own (SANDBOX_EXEC_MODE=session), with the snapshot's egress rules and size (a size field
 * or egress in body other than them: 422). spec takes the size; src the image's directory and
 * its rules. false with the answer sent. */
static bool memory_source_ok(app *a, http_request *r, json_t *body, snapshot_source *src, session_spec *spec)
{
    char now[SNAPSHOT_RUNSC_VERSION_MAX] = "", msg[400];
    const snapshot_record *rec = &src->rec;
    if (sandbox_runsc_version(a->pause.sb, now, sizeof now) != 0 || strcmp(now, rec->runsc_version) != 0) {
        snprintf(msg, sizeof msg, "The memory snapshot was made by %s; this server runs %s, which cannot restore it.",
                 rec->runsc_version, now[0] ? now : "a runsc that gave no version");
        http_send_detail(r, 409, msg);
        return false;
    }
    if (!warm_sessions(a->warm)) {
        http_send_detail(r, 409, "A memory snapshot's session needs a sandbox of its own (SANDBOX_EXEC_MODE=session), "
                                 "which this server does not give sessions.");
        return false;
    }
    if (!(src->memory_dir = snapshot_store_memory(snapshots_store(a->snapshots), rec->id)) ||
        !(src->egress = memory_egress(src->memory_dir))) {
        log_warn("memory snapshot %s: its egress rules cannot be read", rec->id);
        http_send_500(r);
        return false;
    }
    if (!same_egress(r, body, src))
        return false;
    struct {
        const char *field;
        unsigned asked, is;
    } sz[] = {{"memory_mb", spec->size.memory_mb, rec->memory_mb},
              {"cpus", spec->size.cpu_percent, rec->cpu_percent},
              {"max_processes", spec->size.max_processes, rec->max_processes}};
    for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++)
        if (sz[i].asked && sz[i].asked != sz[i].is) {
            snprintf(msg, sizeof msg, "A session from a memory snapshot has the size it was taken with (memory_mb %u, "
                     "cpus %.2f, max_processes %u): leave %s out", rec->memory_mb, rec->cpu_percent / 100.0,
                     rec->max_processes, sz[i].field);
            send_field_error(r, body, sz[i].field, msg);
            return false;
        }
    spec->size.memory_mb = rec->memory_mb;
    spec->size.cpu_percent = rec->cpu_percent;
    spec->size.max_processes = rec->max_processes;
    return true;
}

bool snapshot_source_from_body(app *a, http_request *r, json_t *body, const char *tenant, snapshot_source *src,
                               session_spec *spec)
{
    memset(src, 0, sizeof *src);
    json_t *v = json_object_get(body, "from_snapshot");
    if (!v || json_is_null(v))
        return true;
    if (!json_is_string(v) || !snapshot_id_valid(json_string_value(v))) {
        send_field_error(r, body, "from_snapshot", "A snapshot id (snap_ and 16 hex digits, as POST "
                                                   "/v1/sessions/{id}/snapshots gave it)");
        return false;
    }
    snapshot_store *st = snapshots_store(a->snapshots);
    if (!snapshot_store_get(st, json_string_value(v), tenant, &src->rec)) {
        http_send_detail(r, 404, "Snapshot not found");
        return false;
    }
    json_t *tpl = json_object_get(body, "template");
    char msg[256];
    if (json_is_string(tpl) && strcmp(json_string_value(tpl), src->rec.template_name) != 0) {
        snprintf(msg, sizeof msg, "A session from a snapshot has the snapshot's template (%s): leave template out",
                 src->rec.template_name);
        send_field_error(r, body, "template", msg);
        snapshot_source_free(src);
        return false;
    }
    if (src->rec.memory && !memory_source_ok(a, r, body, src, spec)) {
        snapshot_source_free(src);
        return false;
    }
    json_t *disk = json_object_get(body, "disk_mb");
    if (disk && !json_is_null(disk) && spec->quota_bytes != src->rec.quota_bytes) {
        snprintf(msg, sizeof msg, "A session from a snapshot has the snapshot's disk (%lld MB): leave disk_mb out",
                 src->rec.quota_bytes >> 20);
        send_field_error(r, body, "disk_mb", msg);
        snapshot_source_free(src);
        return false;
    }
    if (!(src->image = snapshot_store_workspace(st, src->rec.id))) {
        http_send_500(r);
        snapshot_source_free(src);
        return false;
    }
    spec->quota_bytes = src->rec.quota_bytes;
    spec->fill = fill_from_snapshot;
    spec->fill_ctx = src;
    spec->fill_image_bytes = src->rec.image_bytes;
    return true;
}

void snapshot_source_free(snapshot_source *src)
{
    free(src->rec.tenant);
    free(src->image);
    free(src->memory_dir);
    json_decref(src->egress);
    memset(src, 0, sizeof *src);
}
