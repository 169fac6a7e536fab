/* What the files routes share (files.c: the contract's write and read; files_raw.c: the raw
 * bytes extension; files_list.c: the directory listing extension; files_paths.c: the path
 * query and the refusals of a path). */
#ifndef AIRLOCKD_API_FILES_H
#define AIRLOCKD_API_FILES_H

#include "api/api.h"

#include <stdbool.h>
#include <stddef.h>

/* ---- files_paths.c ---- */

/* 403 quoting the path exactly as sent. */
void files_send_denied(http_request *r, const char *path, size_t len);
/* 400 for a path over the documented bounds (docs/server.md "Limits"); false for any other rc. */
bool files_send_path_bound(http_request *r, int rc);
/* 400 naming the parameter (where: "the query parameter 'path'") when path holds a NUL byte,
 * which no file name can; false when it holds none. */
bool files_send_if_nul(http_request *r, const char *path, size_t len, const char *where);
/* The ?path= query as Starlette decodes it (UTF-8 with replacement), malloc'd; NULL when a
 * 422 (missing), a 400 (a NUL byte) or a 500 was sent. */
char *files_query_path(http_request *r, size_t *len);

/* ---- files_raw.c ---- */

/* Whether the request's body is raw bytes (Content-Type: application/octet-stream). */
bool files_raw_body(http_request *r);
/* Whether the client asks for raw bytes (Accept names application/octet-stream). */
bool files_raw_wanted(http_request *r);
/* Streams the open regular file fd (taken) as application/octet-stream, at most limit bytes
 * (larger: 413 naming the limit). */
void files_send_raw(http_request *r, int fd, const char *path, long long limit);

#endif
