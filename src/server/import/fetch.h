/* POST /v1/sessions/{id}/import, step 2 (contract 1.8): downloading the repository's
 * tar.gz archive with libcurl, size-capped, redirects followed only to GitHub's hosts. */
#ifndef AIRLOCKD_IMPORT_FETCH_H
#define AIRLOCKD_IMPORT_FETCH_H

#include "config/config.h"
#include "import/spec.h"

/* GETs <cfg->import_base_url>/<owner>/<name>/archive/<ref>.tar.gz and writes the body of
 * the 200 answer to fd (a fresh, empty file). Redirects are followed only to https
 * github.com / codeload.github.com / api.github.com, and with a non-default base URL also
 * to that base's own scheme, host and port. IMPORT_OK with *bytes; IMPORT_NOT_FOUND,
 * IMPORT_TOO_LARGE or IMPORT_UPSTREAM with the malloc'd detail in *msg; IMPORT_FAILED for a
 * local failure, or when cancel_fd (> 0: the client's socket) reports a hang-up. */
import_result import_fetch(const config *cfg, const import_spec *spec, int cancel_fd, int fd, long long *bytes,
                           char **msg);

#endif
