/* The raw bytes extension of the files routes (ours, docs/api.md): POST .../write?path= with
 * Content-Type application/octet-stream takes the body as the file's exact bytes, streamed to
 * disk as it arrives (never held in memory), and GET .../read with Accept
 * application/octet-stream answers them (streamed from disk). An upload is admitted from the
 * headers (key, rate limit, session, path, quota, all before any body byte), written to an
 * unnamed file in the target's directory under the quota, and named only when the whole body
 * is in: a body cut short or over the quota leaves no file. */
#include "api/files.h"
#include "api/handlers.h"

#include "domain/paths.h"
#include "domain/quota.h"
#include "domain/upload.h"
#include "log/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define MB 1048576.0
#define OCTET_STREAM "application/octet-stream"

typedef enum {
    RAW_WRITING = 0,
    RAW_OVER_QUOTA, /* the soft quota or the disk: 413 with the contract's text */
    RAW_FAILED,     /* the disk failed otherwise: 500 */
} raw_state;

/* One raw upload, from its admission to the end of its request. */
typedef struct {
    app *a;
    session *s;
    char *path;           /* as sent (UTF-8 with replacement), for the answers */
    upload_file file;
    long long base;       /* the workspace's usage without the file it replaces */
    long long projected;  /* usage the upload would reach (for the 413 text) */
    raw_state state;
} raw_upload;

/* Whether a media-type header names type (parameters and case ignored). */
static bool names_type(const char *value, const char *type)
{
    size_t n = strlen(type);
    for (const char *p = value; p && *p; p++) {
        if (strncasecmp(p, type, n) == 0 && (p == value || p[-1] == ' ' || p[-1] == ',' || p[-1] == '\t'))
            return true;
    }
    return false;
}

bool files_raw_body(http_request *r)
{
    const char *ct = http_header(r, "Content-Type");
    if (!ct)
        return false;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t n = strlen(OCTET_STREAM);
    return strncasecmp(ct, OCTET_STREAM, n) == 0 && (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

bool files_raw_wanted(http_request *r)
{
    const char *accept = http_header(r, "Accept");
    return accept && names_type(accept, OCTET_STREAM);
}

static void over_quota(raw_upload *u, long long projected)
{
    u->state = RAW_OVER_QUOTA;
    u->projected = projected;
    upload_discard(&u->file); /* its blocks go back to the disk now */
}

/* The body sink (event thread): each chunk goes to the unnamed file, within the quota. */
static void raw_write(void *ctx, const char *data, size_t n)
{
    raw_upload *u = ctx;
    if (u->state != RAW_WRITING)
        return; /* refused already: the rest of the body is read and dropped */
    long long after = u->base + (long long)u->file.written + (long long)n;
    if (after > u->s->quota_bytes) {
        over_quota(u, after);
        return;
    }
    int err = upload_write(&u->file, data, n);
    if (err == ENOSPC || err == EDQUOT) {
        over_quota(u, after);
    } else if (err) {
        log_session(LV_ERROR, u->s->id, NULL, "raw write to %s: %s", u->s->id, strerror(err));
        u->state = RAW_FAILED;
        upload_discard(&u->file);
    }
}

/* The end of the request, answered or not: an upload not committed leaves nothing. */
static void raw_done(void *ctx)
{
    raw_upload *u = ctx;
    upload_discard(&u->file);
    registry_release(u->a->reg, u->s);
    free(u->path);
    free(u);
}

static void send_over_quota(http_request *r, const char *path, long long projected, long long quota)
{
    char *msg = quota_exceeded_text(path, projected, quota);
    if (msg)
        http_send_detail(r, 413, msg);
    else
        http_send_500(r);
    free(msg);
}

void *api_files_raw_admit(app *a, http_request *r, const api_call *c, http_admission *adm)
{
    size_t path_len;
    char *path = files_query_path(r, &path_len);
    if (!path)
        return NULL;
    session *s = acquire_session(a, r, c);
    if (!s) {
        free(path);
        return NULL;
    }
    raw_upload *u = calloc(1, sizeof *u);
    if (u)
        u->file = (upload_file){.dir_fd = -1, .fd = -1};
    char *rel = NULL;
    int rc = u ? path_resolve(s->workspace, path, path_len, &rel) : PATH_ERROR;
    bool chunked;
    unsigned long long declared = http_declared_length(r, &chunked);
    long long used = quota_usage(s->workspace), free_bytes = quota_free(s->workspace, s->quota_bytes);
    long long replaced = rc == PATH_OK ? quota_replaced_bytes(s->workspace, rel) : 0;
    long long projected = used - replaced + (long long)declared;
    if (rc == PATH_DENIED) {
        files_send_denied(r, path, path_len);
    } else if (files_send_path_bound(r, rc)) {
    } else if (rc != PATH_OK || used < 0) {
        http_send_500(r);
    } else if (!chunked && (projected > s->quota_bytes || (long long)declared > free_bytes + replaced)) {
        send_over_quota(r, path, projected, s->quota_bytes); /* refused before the body */
    } else {
        rc = upload_open(s->workspace, rel, &u->file);
        if (rc == PATH_NOSPACE)
            send_over_quota(r, path, projected, s->quota_bytes);
        else if (rc != PATH_OK)
            http_send_500(r);
    }
    free(rel);
    if (rc != PATH_OK || u->file.fd < 0) {
        if (u)
            upload_discard(&u->file);
        free(u);
        free(path);
        registry_release(a->reg, s);
        return NULL;
    }
    *u = (raw_upload){.a = a, .s = s, .path = path, .file = u->file, .base = used - replaced};
    /* the quota is checked as bytes arrive; past it the rest of the body is read and dropped
     * so that the client gets the 413 quota answer, but not more than one quota more (docs/server.md
     * "Limits": past twice the quota the connection gets 413 and is closed) */
    adm->body_cap = (size_t)s->quota_bytes * 2;
    adm->sink = (http_body_sink){.write = raw_write, .done = raw_done, .ctx = u};
    return u;
}

void api_files_write_raw(app *a, http_request *r, void *upload)
{
    (void)a;
    raw_upload *u = upload;
    if (u->state == RAW_OVER_QUOTA) {
        send_over_quota(r, u->path, u->projected, u->s->quota_bytes);
        return;
    }
    unsigned long long written = u->file.written;
    int err = u->state == RAW_FAILED ? EIO : upload_commit(&u->file);
    if (err == ENOSPC || err == EDQUOT) {
        send_over_quota(r, u->path, u->base + (long long)written, u->s->quota_bytes);
    } else if (err) {
        http_send_500(r); /* the target is a directory, as a JSON write would find */
    } else {
        char *msg = NULL;
        if (asprintf(&msg, "Successfully wrote %llu bytes to %s", written, u->path) >= 0)
            http_send_json(r, 200, json_pack("{s:s,s:s,s:I}", "status", "success", "message", msg, "bytes",
                                             (json_int_t)written));
        else
            http_send_500(r);
        free(msg);
    }
}

void files_send_raw(http_request *r, int fd, const char *path, long long limit)
{
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        http_send_500(r);
        return;
    }
    /* a file larger than its disk's quota is sparse (or a race): its apparent size is not
     * sent; the bytes go from the page cache to the socket, never into airlockd's memory */
    if (st.st_size > limit) {
        char *msg = NULL;
        close(fd);
        if (asprintf(&msg, "Reading %s: the file's size (%.1f MB) is over the workspace's %.0f MB quota "
                           "(a sparse file). Read it in parts with a command (head -c, tail -c or split).",
                     path, (double)st.st_size / MB, (double)limit / MB) >= 0)
            http_send_detail(r, 413, msg);
        else
            http_send_500(r);
        free(msg);
        return;
    }
    http_send_file(r, 200, fd, (unsigned long long)st.st_size, OCTET_STREAM);
}
