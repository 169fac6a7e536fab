/* POST /v1/sessions/{id}/import, step 2 (contract 1.8): downloading the repository's
 * tar.gz archive with libcurl, size-capped, redirects followed only to GitHub's hosts. */
#ifndef AIRLOCKD_IMPORT_FETCH_H
#define AIRLOCKD_IMPORT_FETCH_H

#include "config/config.h"
#include "import/spec.h"

/* GETs <cfg->import_base_url>/<owner>/<name>/archive/<ref>.tar.gz and writes the body of
 * the 200 answer to fd (a fresh, empty file), never more than room bytes (what fd's disk has
 * reserved for it). An archive that announces more than room or the import limit is refused
 * before a byte is written; one that grows past room is written no further (the download goes
 * on, discarded, to learn its size), and one past the import limit is stopped there.
 * Redirects are followed only to https github.com / codeload.github.com / api.github.com,
 * and with a non-default base URL also to that base's own scheme, host and port.
 * IMPORT_OK with *bytes; IMPORT_TOO_LARGE with *bytes the archive's size (announced, or as
 * far as it was read: past the import limit when that stopped it), no message; also when
 * fd's disk filled meanwhile; IMPORT_NOT_FOUND or IMPORT_UPSTREAM with the malloc'd detail in
 * *msg; IMPORT_FAILED for a local failure, or when cancel_fd (> 0: the client's socket)
 * reports a hang-up. */
import_result import_fetch(const config *cfg, const import_spec *spec, int cancel_fd, int fd, long long room,
                           long long *bytes, char **msg);

#endif
