/* POST /v1/sessions/{id}/import, step 1 (contract 1.8): the repository spec, ref and
 * destination folder as sent, parsed and validated before anything is downloaded. */
#ifndef AIRLOCKD_IMPORT_SPEC_H
#define AIRLOCKD_IMPORT_SPEC_H

#include "import/result.h"

#include <stddef.h>

typedef struct {
    char *owner; /* validated, so plain ASCII without NULs */
    char *name;  /* ".git" suffix dropped */
    char *ref;   /* explicit ref, else the URL's /tree/<ref>, else "HEAD" */
    char *dest;  /* folder under /workspace, default the repository name */
} import_spec;

/* repo is required; ref and path may be NULL (absent or JSON null). IMPORT_OK with *out
 * filled; IMPORT_BAD_REQUEST with the malloc'd detail in *msg (*msg_len bytes, may hold NULs
 * taken from the input); IMPORT_FAILED when out of memory. */
import_result import_spec_parse(const char *repo, size_t repo_len, const char *ref, size_t ref_len,
                                const char *path, size_t path_len, import_spec *out, char **msg,
                                size_t *msg_len);

void import_spec_free(import_spec *s);

#endif
