/* POST /v1/sessions/{id}/import, step 3 (contract 1.8): the destination check and the
 * unpacking of the downloaded archive inside the session's sandbox. */
#ifndef AIRLOCKD_IMPORT_UNPACK_H
#define AIRLOCKD_IMPORT_UNPACK_H

#include "import/spec.h"
#include "sandbox/sandbox.h"

#define IMPORT_UNPACK_TIMEOUT 120

/* Whether /workspace/<dest> exists (symlinks resolved inside the workspace, the last
 * component not followed): 1 yes, 0 no, -1 when a symlink leads it out of the workspace. */
int import_dest_exists(const char *ws, const char *dest);

/* The file an archive is downloaded into: unnamed (O_TMPFILE) in the workspace ws itself,
 * so every byte of it is on the session's own disk, under its quota, and nothing is left
 * behind by a failure or a crash. -1 with errno. */
int import_archive_file(const char *ws);

/* Names the archive (archive_fd, from import_archive_file on the same workspace) in the
 * workspace under a temporary name, runs `mkdir -p <dest> && tar -xzf <archive> -C <dest>
 * --strip-components=1` in a sandbox made with o (its workspace_dir, name, tenant and
 * cancel_fd; 120 s), counts the regular files under
 * dest and removes the temporary archive (and dest, new until then, when tar fails).
 * IMPORT_OK with *files; IMPORT_UNPACK_FAILED with the malloc'd "Unpacking <owner>/<name>
 * failed: ..." detail in *msg; IMPORT_FAILED when the archive could not be placed or the
 * sandbox not started or the client hung up (message in errbuf). */
import_result import_unpack(sandbox_backend *sb, const sandbox_opts *o, int archive_fd,
                            const import_spec *spec, long long *files, char **msg, char *errbuf,
                            size_t errlen);

#endif
