/* What every files route does with the path it was given (api/files.h): the ?path= query
 * decoded as Starlette does, and the 403 and 400 answers of a path refused by domain/paths
 * or holding a NUL byte. */
#include "api/files.h"

#include "domain/paths.h"
#include "text/utf8.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void files_send_denied(http_request *r, const char *path, size_t len)
{
    char *p = strndup(path, len), *msg = NULL;
    if (p && asprintf(&msg, "Access denied: symlink/path traversal outside workspace for '%s'", p) >= 0) {
        http_send_detail(r, 403, msg);
        free(msg);
    } else {
        http_send_500(r);
    }
    free(p);
}

bool files_send_path_bound(http_request *r, int rc)
{
    char msg[160];
    if (rc == PATH_TOO_LONG)
        snprintf(msg, sizeof msg, "Path too long: at most %d bytes, also once symlinks are resolved.",
                 PATH_MAX_BYTES);
    else if (rc == PATH_TOO_DEEP)
        snprintf(msg, sizeof msg, "Path too deep: at most %d directory levels, also once symlinks are resolved.",
                 PATH_MAX_DEPTH);
    else
        return false;
    http_send_detail(r, 400, msg);
    return true;
}

bool files_send_if_nul(http_request *r, const char *path, size_t len, const char *where)
{
    if (!memchr(path, '\0', len))
        return false;
    char msg[160];
    snprintf(msg, sizeof msg, "Invalid path: %s contains a NUL byte, which no file name can.", where);
    http_send_detail(r, 400, msg);
    return true;
}

char *files_query_path(http_request *r, size_t *len)
{
    size_t raw_len;
    char *raw = http_query(r, "path", &raw_len);
    if (!raw) {
        json_t *errs = json_array();
        json_array_append_new(errs, verr("missing", loc_of("query", "path"), "Field required", NULL, NULL));
        send_validation(r, errs);
        return NULL;
    }
    if (files_send_if_nul(r, raw, raw_len, "the query parameter 'path'")) {
        free(raw);
        return NULL;
    }
    /* Starlette decodes query values as UTF-8 with replacement */
    char *path = utf8_replace(raw, raw_len, len);
    free(raw);
    if (!path)
        http_send_500(r);
    return path;
}
