/* POST /v1/sessions/{id}/import (contract 1.8): validation, the order of checks, the
 * response and the audit entry. Parsing, download and unpacking live in import/. */
#include "api/handlers.h"

#include "domain/quota.h"
#include "import/fetch.h"
#include "import/spec.h"
#include "import/unpack.h"
#include "log/log.h"
#include "store/audit.h"
#include "text/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MB 1048576.0
#define AUDIT_DETAIL_CHARS 300

/* Monotonic seconds: an import's duration is counted from its request. */
static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- audit: kind "import", command as requested; as the reference records it, exit_code 0
 * on success and null on failure, duration_s (rounded to ms) either way ---------------- */
static int audit_import(app *a, const api_call *c, const session *s, const char *command, const char *detail,
                        bool ok, double started)
{
    audit_entry e;
    memset(&e, 0, sizeof e);
    e.tenant = tenants_get(a->tenants, c->tenant)->name;
    e.session_id = s->id;
    e.actor = c->actor;
    e.kind = "import";
    e.command = command;
    e.detail = detail;
    e.has_exit_code = ok;
    e.exit_code = 0;
    e.has_duration = true;
    e.duration_s = (double)(long long)((mono_s() - started) * 1000.0 + 0.5) / 1000.0;
    return api_audit_record(a, &e);
}

/* Copy of s (len bytes) cut to max characters; NULs end it early. */
static char *cut_chars(const char *s, size_t max)
{
    size_t n = strlen(s), i = 0, chars = 0;
    while (i < n && chars < max) {
        uint32_t cp;
        size_t l = utf8_seq_len((const unsigned char *)s + i, n - i, &cp);
        i += l ? l : 1;
        chars++;
    }
    return strndup(s, i);
}

/* The HTTP status of a failed import step. */
static unsigned import_status(import_result rc)
{
    switch (rc) {
    case IMPORT_BAD_REQUEST:
        return 400;
    case IMPORT_NOT_FOUND:
        return 404;
    case IMPORT_EXISTS:
        return 409;
    case IMPORT_TOO_LARGE:
        return 413;
    case IMPORT_UNPACK_FAILED:
        return 422;
    case IMPORT_UPSTREAM:
        return 502;
    default:
        return 500;
    }
}

/* Sends the error and audits it as "failed (<status>): <message>". */
static void fail(app *a, http_request *r, const api_call *c, const session *s, const char *command,
                 import_result rc, const char *msg, size_t msg_len, double started)
{
    unsigned status = import_status(rc);
    char *detail = NULL;
    if (asprintf(&detail, "failed (%u): %.*s", status, (int)msg_len, msg) >= 0) {
        char *cut = cut_chars(detail, AUDIT_DETAIL_CHARS);
        audit_import(a, c, s, command, cut ? cut : detail, false, started);
        free(cut);
        free(detail);
    }
    json_t *body = json_pack("{s:s%}", "detail", msg, msg_len);
    /* the contract's 404 text speaks of the hosted service's console; a hint says what holds here */
    if (body && rc == IMPORT_NOT_FOUND)
        json_object_set_new(body, "hint",
                            json_sprintf("airlockd has no console and no GitHub connection: it downloads public "
                                         "archives from %s only. Check the owner, name and ref; a private "
                                         "repository's files can be sent with /write instead.",
                                         a->cfg->import_base_url));
    http_send_json(r, status, body);
}

/* "import <repo>[ @<ref>][ into <path>]" as requested. */
static char *command_text(const char *repo, const char *ref, const char *path)
{
    char *c = NULL;
    if (asprintf(&c, "import %s%s%s%s%s", repo, ref && *ref ? " @" : "", ref && *ref ? ref : "",
                 path && *path ? " into " : "", path && *path ? path : "") < 0)
        return NULL;
    return c;
}

/* Runs the import for an acquired session; answers every outcome. */
static void run_import(app *a, http_request *r, const api_call *c, session *s, const char *command,
                       const import_spec *spec, double started)
{
    size_t tenant = c->tenant;
    const tenant_cfg *t = tenants_get(a->tenants, tenant);
    char *msg = NULL;
    int exists = import_dest_exists(s->workspace, spec->dest);
    if (exists) {
        /* a folder behind a symlink out of the workspace is no folder inside it */
        int rc = exists < 0 ? asprintf(&msg, "'%s' isn't a valid folder name inside the workspace.", spec->dest)
                            : asprintf(&msg, "/workspace/%s already exists. Pick another folder name or delete it first.",
                                       spec->dest);
        if (rc < 0)
            msg = NULL;
        if (msg)
            fail(a, r, c, s, command, exists < 0 ? IMPORT_BAD_REQUEST : IMPORT_EXISTS, msg, strlen(msg), started);
        else
            http_send_500(r);
        free(msg);
        return;
    }
    if (!limits_exec_begin(a->lim, tenant)) {
        api_send_exec_limit(r, t->max_concurrent_exec);
        return;
    }
    /* The download goes to the session's own disk, so it is counted and reserved before a
     * byte is written: it may take the workspace's free quota; an archive past that (or past
     * the import limit) is refused (announced) or stopped (grown) with the 413. */
    long long free_bytes = quota_free(s->workspace, s->quota_bytes);
    int fd = import_archive_file(s->workspace);
    if (fd < 0)
        log_session(LV_ERROR, s->id, t->name, "import into %s: cannot make the download file: %s", s->id,
                    strerror(errno));
    long long bytes = 0, files = 0;
    import_result rc =
        fd < 0 ? IMPORT_FAILED : import_fetch(a->cfg, spec, http_client_fd(r), fd, free_bytes, &bytes, &msg);
    if (rc == IMPORT_TOO_LARGE) {
        int n = bytes > (long long)a->cfg->import_max_mb * 1048576
                    ? asprintf(&msg, "%s/%s is larger than the %d MB import limit.", spec->owner, spec->name,
                               a->cfg->import_max_mb)
                    : asprintf(&msg, "The archive (%.1f MB) doesn't fit in the workspace's free disk space (%.1f MB).",
                               (double)bytes / MB, (double)free_bytes / MB);
        if (n < 0)
            msg = NULL, rc = IMPORT_FAILED;
    }
    int cancel_fd = http_client_fd(r); /* a hang-up stops the unpacking */
    slot_result sr = rc == IMPORT_OK ? slots_acquire(a->slots, tenant, cancel_fd) : SLOT_OK;
    if (rc == IMPORT_OK && sr == SLOT_OK) {
        char name[64], errbuf[512] = "";
        snprintf(name, sizeof name, "%s-%lu", s->id, (unsigned long)atomic_fetch_add(&a->exec_seq, 1));
        sandbox_opts so = {.workspace_dir = s->workspace, .name = name, .tenant = t->name,
                           .cancel_fd = cancel_fd, .size = s->size};
        rc = import_unpack(a->sb, &so, fd, spec, &files, &msg, errbuf, sizeof errbuf);
        slots_release(a->slots, tenant);
        if (rc == IMPORT_FAILED)
            log_session(LV_ERROR, s->id, t->name, "import into %s failed: %s", s->id, errbuf);
    }
    if (fd >= 0)
        close(fd);
    limits_exec_end(a->lim, tenant);
    if (rc == IMPORT_OK && sr != SLOT_OK) {
        api_commands_ended(a); /* no audit record takes its end along */
        api_send_no_slot(r, slots_max(a->slots), sr);
    } else if (rc == IMPORT_OK) {
        char *path = NULL, *detail = NULL;
        if (asprintf(&path, "/workspace/%s", spec->dest) < 0)
            path = NULL;
        bool audited = false;
        if (path && asprintf(&detail, "%lld files into %s", files, path) >= 0) {
            audited = audit_import(a, c, s, command, detail, true, started) == 0;
            free(detail);
        }
        char *full = NULL;
        if (path && !audited) { /* never acknowledged without its record */
            send_detail_with(r, 507, "The import into %s ran but its audit record could not be saved: the server's "
                                     "storage is full or failing.", path);
        } else if (path && asprintf(&full, "%s/%s", spec->owner, spec->name) >= 0) {
            http_send_json(r, 200, json_pack("{s:s,s:s,s:s,s:s,s:I,s:I}", "repo", full, "ref", spec->ref,
                                             "path", path, "dest", spec->dest, "files", (json_int_t)files,
                                             "archive_bytes", (json_int_t)bytes));
            free(full);
        } else {
            http_send_500(r);
        }
        free(path);
    } else if (rc != IMPORT_FAILED && msg) {
        fail(a, r, c, s, command, rc, msg, strlen(msg), started);
    } else {
        http_send_500(r);
    }
    free(msg);
}

void api_import(app *a, http_request *r, const api_call *c)
{
    json_t *body = c->body;
    json_t *errs = json_array();
    const char *repo = NULL, *ref = NULL, *path = NULL;
    size_t repo_len = 0, ref_len = 0, path_len = 0;
    if (body_is_object(errs, body)) {
        v_string(errs, body, "repo", true, 300, &repo, &repo_len);
        json_t *jref = json_object_get(body, "ref"), *jpath = json_object_get(body, "path");
        if (jref && !json_is_null(jref))
            v_string(errs, body, "ref", false, 200, &ref, &ref_len);
        if (jpath && !json_is_null(jpath))
            v_string(errs, body, "path", false, 200, &path, &path_len);
    }
    if (send_if_invalid(r, errs))
        return;
    session *s = acquire_audited_session(a, r, c, "The import's audit record"); /* nothing is imported unaudited */
    if (!s)
        return;
    double started = mono_s();
    char *command = command_text(repo, ref, path), *msg = NULL;
    size_t msg_len = 0;
    import_spec spec;
    import_result rc = command ? import_spec_parse(repo, repo_len, ref, ref_len, path, path_len, &spec, &msg, &msg_len)
                               : IMPORT_FAILED;
    if (rc == IMPORT_OK) {
        run_import(a, r, c, s, command, &spec, started);
        import_spec_free(&spec);
    } else if (rc == IMPORT_BAD_REQUEST) {
        fail(a, r, c, s, command, rc, msg, msg_len, started);
    } else {
        http_send_500(r);
    }
    free(msg);
    free(command);
    registry_release(a->reg, s);
}
