/* Session state as one JSON document: {"airlockd_sessions": 1, "state_dir": ..., "sessions": [...]}. */
#include "store/session_state.h"

#include "log/log.h"
#include "util/sync.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FORMAT 1

void session_records_free(session_record *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].tenant);
        json_decref(v[i].egress);
    }
    free(v);
}

static bool egress_valid(const json_t *e)
{
    if (!json_is_array(e))
        return false;
    size_t i;
    const json_t *item;
    json_array_foreach(e, i, item) {
        if (!json_is_string(item))
            return false;
    }
    return true;
}

/* An optional whole number of the record (absent: 0, from a file written before it existed);
 * false when present but not 1..max. */
static bool optional_count(const json_t *o, const char *field, unsigned max, unsigned *out)
{
    const json_t *v = json_object_get(o, field);
    *out = 0;
    if (!v)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (json_int_t)max)
        return false;
    *out = (unsigned)json_integer_value(v);
    return true;
}

/* Copies a string field of o into out (size bytes with its NUL); false when present but not a
 * string that fits. */
static bool optional_string(const json_t *o, const char *field, char *out, size_t size)
{
    const json_t *v = json_object_get(o, field);
    if (!v)
        return true;
    if (!json_is_string(v) || json_string_length(v) >= size || strlen(json_string_value(v)) != json_string_length(v))
        return false;
    memcpy(out, json_string_value(v), json_string_length(v) + 1);
    return true;
}

/* A paused session's {"paused_at", "image_dir", "image_bytes", "runsc_version", "image_moved"} (absent: active,
 * a file from before pause); false when malformed. */
static bool pause_from(const json_t *p, session_pause_state *out)
{
    memset(out, 0, sizeof *out);
    if (!p)
        return true;
    const json_t *at = json_object_get(p, "paused_at"), *bytes = json_object_get(p, "image_bytes");
    const json_t *moved = json_object_get(p, "image_moved");
    if (!json_is_object(p) || !json_is_number(at) || !isfinite(json_number_value(at)) ||
        (bytes && (!json_is_integer(bytes) || json_integer_value(bytes) < 0)) || (moved && !json_is_boolean(moved)))
        return false;
    out->image_moved = json_is_true(moved);
    out->paused = true;
    out->paused_at = json_number_value(at);
    out->image_bytes = bytes ? (long long)json_integer_value(bytes) : 0;
    return optional_string(p, "image_dir", out->image_dir, sizeof out->image_dir) &&
           optional_string(p, "runsc_version", out->runsc_version, sizeof out->runsc_version);
}

static json_t *pause_json(const session_pause_state *p)
{
    json_t *o = json_pack("{s:f}", "paused_at", p->paused_at);
    if (o && p->image_dir[0]) {
        json_object_set_new(o, "image_dir", json_string(p->image_dir));
        json_object_set_new(o, "image_bytes", json_integer((json_int_t)p->image_bytes));
        json_object_set_new(o, "runsc_version", json_string(p->runsc_version));
        if (p->image_moved)
            json_object_set_new(o, "image_moved", json_true());
    }
    return o;
}

/* One record from its JSON object; false when a field is missing or wrong. */
static bool record_from(const json_t *o, session_record *r)
{
    const char *id = json_string_value(json_object_get(o, "session_id"));
    const char *tenant = json_string_value(json_object_get(o, "tenant_id"));
    json_t *egress = json_object_get(o, "egress");
    const json_t *created = json_object_get(o, "created_at"), *last = json_object_get(o, "last_accessed_at");
    const json_t *quota = json_object_get(o, "disk_quota_bytes");
    if (!id || !session_id_valid(id) || !tenant || !*tenant || !egress_valid(egress) || !json_is_number(created) ||
        !json_is_number(last) || !json_is_integer(quota) || json_integer_value(quota) <= 0)
        return false;
    double c = json_number_value(created), l = json_number_value(last);
    if (!isfinite(c) || !isfinite(l))
        return false;
    memset(r, 0, sizeof *r);
    const json_t *tpl = json_object_get(o, "template");
    if (tpl && (!json_is_string(tpl) || json_string_length(tpl) >= sizeof r->template_name ||
                strlen(json_string_value(tpl)) != json_string_length(tpl)))
        return false;
    if (tpl)
        memcpy(r->template_name, json_string_value(tpl), json_string_length(tpl) + 1);
    if (!optional_count(o, "memory_mb", 1u << 24, &r->memory_mb) ||
        !optional_count(o, "cpu_percent", 1u << 20, &r->cpu_percent) ||
        !optional_count(o, "max_processes", 1u << 24, &r->max_processes))
        return false;
    memcpy(r->id, id, sizeof r->id);
    r->tenant = strdup(tenant);
    r->egress = json_incref(egress);
    r->created_at = c;
    r->last_accessed_at = l;
    r->quota_bytes = (long long)json_integer_value(quota);
    const char *tpl_id = json_string_value(json_object_get(o, "template_id")); /* ours; absent: the default */
    if (tpl_id && strlen(tpl_id) < sizeof r->template_id)
        memcpy(r->template_id, tpl_id, strlen(tpl_id) + 1);
    r->on_idle_pause = json_is_true(json_object_get(o, "on_idle_pause"));
    if (!pause_from(json_object_get(o, "pause"), &r->pause))
        return false;
    return r->tenant != NULL;
}

int session_state_load(const char *path, const char *state_dir, session_record **out, size_t *n, char *err,
                       size_t errlen)
{
    *out = NULL;
    *n = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "SANDBOX_SESSION_STATE: cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > SESSION_STATE_MAX_BYTES) {
        snprintf(err, errlen, "SANDBOX_SESSION_STATE: %s is not a session state file (%s)", path,
                 S_ISREG(st.st_mode) ? "too large" : "not a regular file");
        return -1;
    }
    json_error_t je;
    json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    const json_t *sessions = json_object_get(doc, "sessions");
    const char *dir = json_string_value(json_object_get(doc, "state_dir"));
    if (!doc || json_integer_value(json_object_get(doc, "airlockd_sessions")) != FORMAT || !dir ||
        !json_is_array(sessions)) {
        snprintf(err, errlen, "SANDBOX_SESSION_STATE: %s is not a session state file this airlockd reads%s%s; "
                              "move it away to start without its sessions",
                 path, doc ? "" : ": ", doc ? "" : je.text);
        json_decref(doc);
        return -1;
    }
    if (strcmp(dir, state_dir) != 0) {
        snprintf(err, errlen, "SANDBOX_SESSION_STATE: %s holds the sessions of the state directory %s, not of %s",
                 path, dir, state_dir);
        json_decref(doc);
        return -1;
    }
    size_t count = json_array_size(sessions);
    session_record *v = count ? calloc(count, sizeof *v) : NULL;
    if (count && !v) {
        snprintf(err, errlen, "out of memory");
        json_decref(doc);
        return -1;
    }
    size_t i;
    const json_t *item;
    json_array_foreach(sessions, i, item) {
        if (record_from(item, &v[*n]))
            (*n)++;
        else
            log_warn("%s: skipping session record %zu (malformed)", path, i);
    }
    json_decref(doc);
    *out = v;
    return 0;
}

static json_t *record_json(const session_record *r)
{
    json_t *o = json_pack("{s:s,s:s,s:O,s:f,s:f,s:I}", "session_id", r->id, "tenant_id", r->tenant, "egress",
                          r->egress, "created_at", r->created_at, "last_accessed_at", r->last_accessed_at,
                          "disk_quota_bytes", (json_int_t)r->quota_bytes);
    if (o && r->template_name[0])
        json_object_set_new(o, "template", json_string(r->template_name));
    const char *names[] = {"memory_mb", "cpu_percent", "max_processes"};
    const unsigned values[] = {r->memory_mb, r->cpu_percent, r->max_processes};
    for (size_t i = 0; o && i < sizeof values / sizeof values[0]; i++)
        if (values[i])
            json_object_set_new(o, names[i], json_integer((json_int_t)values[i]));
    if (o && r->template_id[0]) /* ours: a built template's id */
        json_object_set_new(o, "template_id", json_string(r->template_id));
    if (o && r->on_idle_pause)
        json_object_set_new(o, "on_idle_pause", json_true());
    if (o && r->pause.paused)
        json_object_set_new(o, "pause", pause_json(&r->pause));
    return o;
}

int session_state_save(const char *path, const char *state_dir, const session_record *v, size_t n, char *err,
                       size_t errlen)
{
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++) {
        if (json_array_append_new(list, record_json(&v[i])) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    json_t *doc = list ? json_pack("{s:i,s:s,s:o}", "airlockd_sessions", FORMAT, "state_dir", state_dir,
                                   "sessions", list)
                       : NULL;
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    char *tmp = NULL;
    if (!text || asprintf(&tmp, "%s.tmp", path) < 0) {
        free(text);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int rc = -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
        size_t len = strlen(text), off = 0;
        while (off < len) {
            ssize_t w = write(fd, text + off, len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        /* flushed before the rename, so a crash leaves the old file or the new one, whole */
        bool ok = off == len && write(fd, "\n", 1) == 1 && fchmod(fd, 0600) == 0 && fdatasync(fd) == 0;
        if (close(fd) == 0 && ok && rename(tmp, path) == 0 && sync_parent(path) == 0)
            rc = 0;
    }
    if (rc != 0) {
        snprintf(err, errlen, "SANDBOX_SESSION_STATE: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    free(text);
    return rc;
}
