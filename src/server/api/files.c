/* POST /v1/sessions/{id}/write and GET /v1/sessions/{id}/read (contract 1.5, 1.6). A read
 * takes at most the server's read limit + 1 bytes from the file (never its claimed size:
 * sparse and growing files are read, not believed) and answers 413 past the limit. A read
 * that asks for application/octet-stream gets the exact bytes instead (files_raw.c). */
#include "api/files.h"
#include "api/handlers.h"

#include "domain/paths.h"
#include "domain/quota.h"
#include "text/jstr.h"
#include "text/utf8.h"
#include "util/buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The content's JSON literal decoded into the file in pieces (api/body.c left it undecoded). */
static int write_literal(void *ctx, int fd)
{
    const api_write_body *w = ctx;
    char buf[64 * 1024];
    size_t pos = 0, n;
    while ((n = jstr_decode(w->content, w->content_raw_len, &pos, buf, sizeof buf)) > 0) {
        for (size_t off = 0; off < n;) {
            ssize_t k = write(fd, buf + off, n - off);
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0)
                return -1;
            off += (size_t)k;
        }
    }
    return 0;
}

void api_files_write(app *a, http_request *r, const api_call *c)
{
    const char *path = NULL, *content = NULL;
    size_t path_len = 0, content_len = 0, chars = 0;
    quota_source literal = {0};
    if (c->write) { /* the usual shape: both are strings, the content still a literal */
        path = c->write->path;
        path_len = c->write->path_len;
        chars = c->write->content_chars;
        literal = (quota_source){.len = c->write->content_bytes, .write = write_literal, .ctx = (void *)c->write};
    } else {
        json_t *body = c->body;
        json_t *errs = json_array();
        if (body_is_object(errs, body)) {
            v_string(errs, body, "path", true, 0, &path, &path_len);
            v_string(errs, body, "content", true, 0, &content, &content_len);
        }
        if (send_if_invalid(r, errs))
            return;
        chars = utf8_count(content, content_len);
    }
    if (files_send_if_nul(r, path, path_len, "the body's field 'path'"))
        return;
    session *s = acquire_session(a, r, c);
    if (!s)
        return;
    char *rel = NULL, *quota_msg = NULL;
    int rc = path_resolve(s->workspace, path, path_len, &rel);
    quota_write_result wr = QUOTA_FAILED;
    if (rc == PATH_OK && c->write)
        wr = quota_write_from(s->workspace, rel, path, &literal, s->quota_bytes, &quota_msg);
    else if (rc == PATH_OK)
        wr = quota_write_file(s->workspace, rel, path, content, content_len, s->quota_bytes, &quota_msg);
    if (rc == PATH_DENIED) {
        files_send_denied(r, path, path_len);
    } else if (files_send_path_bound(r, rc)) {
    } else if (rc != PATH_OK || wr == QUOTA_FAILED) {
        http_send_500(r);
    } else if (wr == QUOTA_EXCEEDED) {
        http_send_detail(r, 413, quota_msg);
    } else if (wr == QUOTA_IO) {
        send_detail_with(r, 507, "Writing %s failed: the workspace's disk could not store it (I/O error). "
                                 "Nothing was saved under that name.", path);
    } else {
        char *msg = NULL;
        if (asprintf(&msg, "Successfully wrote %zu characters to %s", chars, path) >= 0) {
            http_send_json(r, 200, json_pack("{s:s,s:s}", "status", "success", "message", msg));
            free(msg);
        } else {
            http_send_500(r);
        }
    }
    free(quota_msg);
    free(rel);
    registry_release(a->reg, s);
}

/* The file's bytes, at most limit of them; NULL with errno EFBIG when it holds more. */
static char *read_fd(int fd, size_t limit, size_t *len)
{
    buffer b;
    buf_init(&b, limit);
    struct stat st;
    /* the size only sizes the first allocation; the read itself decides */
    if (fstat(fd, &st) == 0 && st.st_size > 0)
        (void)buf_reserve(&b, (size_t)st.st_size < limit ? (size_t)st.st_size : limit);
    if (buf_read_all(&b, fd) != 0) {
        int e = errno;
        buf_free(&b);
        errno = e;
        return NULL;
    }
    return buf_take(&b, len);
}

/* Python's universal newlines: \r\n and a lone \r both become \n. */
static size_t normalize_newlines(char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r') {
            s[o++] = '\n';
            if (i + 1 < n && s[i + 1] == '\n')
                i++;
        } else {
            s[o++] = s[i];
        }
    }
    return o;
}

void api_files_read(app *a, http_request *r, const api_call *c)
{
    size_t path_len;
    char *path = files_query_path(r, &path_len);
    if (!path)
        return;
    bool raw = files_raw_wanted(r); /* the airlock extension: the exact bytes, streamed */
    session *s = acquire_session(a, r, c);
    if (!s) {
        free(path);
        return;
    }
    char *rel = NULL;
    int fd = -1;
    int rc = path_resolve(s->workspace, path, path_len, &rel);
    if (rc == PATH_OK)
        rc = path_open_read(s->workspace, rel, &fd);
    if (rc == PATH_DENIED) {
        files_send_denied(r, path, path_len);
    } else if (files_send_path_bound(r, rc)) {
    } else if (rc == PATH_MISSING && raw) {
        send_detail_with(r, 404, "File '%s' does not exist.", path);
    } else if (rc == PATH_MISSING) {
        char *msg = NULL;
        if (asprintf(&msg, "Error: File '%s' does not exist.", path) >= 0) {
            http_send_json(r, 200, json_pack("{s:s%,s:s}", "path", path, path_len, "content", msg));
            free(msg);
        }
    } else if (rc != PATH_OK) {
        http_send_500(r);
    } else if (raw) {
        files_send_raw(r, fd, path, s->quota_bytes);
    } else {
        size_t len;
        char *data = read_fd(fd, a->cfg->read_limit, &len);
        if (!data && errno == EFBIG) {
            char *msg = NULL;
            if (asprintf(&msg, "Reading %s: the file is larger than this server's %zu MB read limit. "
                               "Read it in parts with a command (head -c, tail -c or split).",
                         path, a->cfg->read_limit / (1024 * 1024)) >= 0) {
                http_send_detail(r, 413, msg);
                free(msg);
            }
        } else if (!data || !utf8_valid(data, len)) {
            http_send_500(r); /* UnicodeDecodeError in the reference */
        } else {
            len = normalize_newlines(data, len);
            http_send_json(r, 200, json_pack("{s:s%,s:o}", "path", path, path_len, "content",
                                             json_stringn_nocheck(data, len)));
        }
        free(data);
        close(fd);
    }
    free(rel);
    free(path);
    registry_release(a->reg, s);
}
