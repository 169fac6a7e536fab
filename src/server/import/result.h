/* What an import step came to; api/import.c turns these into HTTP answers. */
#ifndef AIRLOCKD_IMPORT_RESULT_H
#define AIRLOCKD_IMPORT_RESULT_H

typedef enum {
    IMPORT_OK = 0,
    IMPORT_FAILED,        /* a local failure (out of memory, a file, the sandbox; logged) */
    IMPORT_BAD_REQUEST,   /* the repository, ref or folder as sent cannot be imported */
    IMPORT_NOT_FOUND,     /* GitHub has no such repository or ref */
    IMPORT_TOO_LARGE,     /* the archive is over SANDBOX_IMPORT_MAX_MB or the free quota */
    IMPORT_EXISTS,        /* the destination folder exists already */
    IMPORT_UPSTREAM,      /* the download failed or was redirected somewhere else */
    IMPORT_UNPACK_FAILED, /* tar failed in the sandbox */
} import_result;

#endif
